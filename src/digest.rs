//! sha256 in one place: of bytes, and of a file (streamed: artifacts and wheels can be
//! gigabytes). Digests are lowercase hex.

use std::io::{self, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

/// sha256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// sha256 of the file at `path` (as lowercase hex) and its length in bytes, read in a stream.
pub fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let len = io::copy(&mut f, &mut h)?;
    Ok((hex::encode(h.finalize()), len))
}

/// Writes through, hashing and counting: the digest of what went by without reading it again.
/// Over `io::sink()` it is a running digest alone (a download's, kept across resumed attempts).
pub struct HashingWriter<W: Write> {
    pub inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> HashingWriter<W> {
        HashingWriter { inner, hasher: Sha256::new(), len: 0 }
    }
    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// sha256 (hex) and length of what was written.
    pub fn finish(self) -> (String, u64) {
        (hex::encode(self.hasher.finalize()), self.len)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_file_agree() {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(sha256_hex(b""), empty);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"").unwrap();
        assert_eq!(sha256_file(&p).unwrap(), (empty.to_string(), 0));
        let big = vec![7u8; 200_000];
        std::fs::write(&p, &big).unwrap();
        assert_eq!(sha256_file(&p).unwrap(), (sha256_hex(&big), 200_000));
        assert!(sha256_file(&d.path().join("missing")).is_err());
    }
}
