//! sha256 in one place: of bytes, and of a file (streamed: artifacts and wheels can be
//! gigabytes). Digests are lowercase hex.

use std::io;
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
