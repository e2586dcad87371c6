//! Writing wheels: a new one from its members ([`write`]), or a copy of one with some members
//! changed ([`rewrite`]), both with a RECORD pip checks (`path,sha256=<urlsafe base64>,size`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// A file of a wheel being written: its path in the archive, its bytes and its Unix mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub body: Body,
    pub mode: u32,
}

/// A member's bytes: in memory, or a file's, streamed into the wheel as it is written (a
/// runtime wheel's libraries are gigabytes; they are never held whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Bytes(Vec<u8>),
    File(PathBuf),
}

/// A reader that hashes and counts what it reads (a RECORD row's digest and size).
struct Hashing<R> {
    inner: R,
    sha: Sha256,
    len: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    #[error("cannot read wheel {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("cannot write wheel {path}: {message}")]
    Write { path: PathBuf, message: String },
}

/// zip's epoch plus a day (1980-01-02), as `SOURCE_DATE_EPOCH` gives every build: the same
/// members make the same bytes.
fn fixed_time() -> zip::DateTime {
    zip::DateTime::from_date_and_time(1980, 1, 2, 0, 0, 0).unwrap_or_default()
}

/// Writes the wheel `out` (atomically: a partial file renamed) holding `members` in their order,
/// then `<dist_info>/RECORD`.
pub fn write(out: &Path, dist_info: &str, members: &[Member]) -> Result<(), RewriteError> {
    let write = |message: String| RewriteError::Write { path: out.to_path_buf(), message };
    let tmp = out.with_extension("whl.partial");
    let file = std::fs::File::create(&tmp).map_err(|e| write(e.to_string()))?;
    let mut zip = zip::ZipWriter::new(std::io::BufWriter::new(file));
    let mut rows = Vec::new();
    let written = (|| {
        for m in members {
            match &m.body {
                Body::Bytes(bytes) => {
                    let opts = options(m.mode, bytes.len() as u64);
                    zip.start_file(m.name.as_str(), opts).map_err(|e| write(e.to_string()))?;
                    zip.write_all(bytes).map_err(|e| write(e.to_string()))?;
                    rows.push(record_row(&m.name, bytes));
                }
                Body::File(path) => {
                    let read = |e: std::io::Error| RewriteError::Read { path: path.clone(), message: e.to_string() };
                    let f = std::fs::File::open(path).map_err(read)?;
                    let size = f.metadata().map_err(read)?.len();
                    zip.start_file(m.name.as_str(), options(m.mode, size)).map_err(|e| write(e.to_string()))?;
                    let mut h = Hashing { inner: f, sha: Sha256::new(), len: 0 };
                    std::io::copy(&mut h, &mut zip).map_err(|e| write(format!("{}: {e}", path.display())))?;
                    rows.push(row(&m.name, &h.sha.finalize(), h.len));
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = written {
        drop(zip);
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    finish(zip, &tmp, out, dist_info, rows)
}

fn options(mode: u32, size: u64) -> zip::write::SimpleFileOptions {
    zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(mode & 0o7777)
        .last_modified_time(fixed_time())
        .large_file(size >= u64::from(u32::MAX))
}

fn finish(
    mut zip: zip::ZipWriter<std::io::BufWriter<std::fs::File>>,
    tmp: &Path,
    out: &Path,
    dist_info: &str,
    mut rows: Vec<String>,
) -> Result<(), RewriteError> {
    let write = |message: String| RewriteError::Write { path: out.to_path_buf(), message };
    let record = format!("{dist_info}/RECORD");
    rows.push(format!("{},,", csv(&record)));
    zip.start_file(record, options(0o644, 0)).map_err(|e| write(e.to_string()))?;
    zip.write_all((rows.join("\n") + "\n").as_bytes()).map_err(|e| write(e.to_string()))?;
    let f = zip.finish().map_err(|e| write(e.to_string()))?;
    f.into_inner().map_err(|e| write(e.to_string()))?.sync_all().map_err(|e| write(e.to_string()))?;
    std::fs::rename(tmp, out).map_err(|e| write(e.to_string()))
}

/// What [`rewrite`] passes each member through: its name as it was and its bytes, to new bytes,
/// or `None` to keep them.
pub type Edit<'a, E> = dyn FnMut(&str, &[u8]) -> Result<Option<Vec<u8>>, E> + 'a;

/// Writes `out` from `wheel`: every member in its order, renamed by `rename` and its bytes
/// passed through `edit` (`name` as it was, bytes; `None` keeps them), with its permissions;
/// the old RECORD and its signatures are replaced by a new RECORD of `dist_info` (the new
/// name). On an error nothing is left at `out`.
pub fn rewrite<E>(
    wheel: &Path,
    out: &Path,
    dist_info: &str,
    rename: &dyn Fn(&str) -> String,
    edit: &mut Edit<'_, E>,
) -> Result<Result<(), E>, RewriteError> {
    let read = |message: String| RewriteError::Read { path: wheel.to_path_buf(), message };
    let write = |message: String| RewriteError::Write { path: out.to_path_buf(), message };
    let f = std::fs::File::open(wheel).map_err(|e| read(e.to_string()))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(f))
        .map_err(|e| read(format!("not a readable wheel (zip): {e}")))?;
    let names: Vec<String> = zip.file_names().map(str::to_string).collect();
    let tmp = out.with_extension("whl.partial");
    let file = std::fs::File::create(&tmp).map_err(|e| write(e.to_string()))?;
    let mut w = zip::ZipWriter::new(std::io::BufWriter::new(file));
    let mut rows = Vec::new();
    for (i, old) in names.iter().enumerate() {
        let mut m = zip.by_index(i).map_err(|e| read(e.to_string()))?;
        let new = rename(old);
        let mode = m.unix_mode().unwrap_or(0o644);
        if m.is_dir() {
            w.add_directory(new, options(mode, 0)).map_err(|e| write(e.to_string()))?;
            continue;
        }
        let (dir, leaf) = old.rsplit_once('/').unwrap_or(("", old));
        if dir.ends_with(".dist-info") && !dir.contains('/') && leaf.starts_with("RECORD") {
            continue;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(m.size()).unwrap_or(0).min(1 << 30));
        m.read_to_end(&mut bytes).map_err(|e| read(format!("{old}: {e}")))?;
        let bytes = match edit(old, &bytes) {
            Ok(Some(changed)) => changed,
            Ok(None) => bytes,
            Err(e) => {
                drop(w);
                let _ = std::fs::remove_file(&tmp);
                return Ok(Err(e));
            }
        };
        rows.push(record_row(&new, &bytes));
        w.start_file(new, options(mode, bytes.len() as u64)).map_err(|e| write(e.to_string()))?;
        w.write_all(&bytes).map_err(|e| write(e.to_string()))?;
    }
    finish(w, &tmp, out, dist_info, rows).map(Ok)
}

/// A RECORD row: `path,sha256=<urlsafe base64, no padding>,size`.
pub fn record_row(path: &str, bytes: &[u8]) -> String {
    row(path, &Sha256::digest(bytes), bytes.len() as u64)
}

fn row(path: &str, sha256: &[u8], size: u64) -> String {
    let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha256);
    format!("{},sha256={digest},{size}", csv(path))
}

fn csv(field: &str) -> String {
    if field.contains([',', '"', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

/// The METADATA headers with `Requires-Dist` lines added after the last header (before the
/// description), each once: one already there is not repeated.
pub fn with_requirements(metadata: &[u8], requires: &[String]) -> Vec<u8> {
    let text = String::from_utf8_lossy(metadata);
    let mut lines = text.split_inclusive('\n');
    let mut headers = String::new();
    for line in lines.by_ref() {
        if line.trim().is_empty() {
            headers.push_str(&add(&headers, requires));
            headers.push_str(line);
            headers.extend(lines);
            return headers.into_bytes();
        }
        headers.push_str(line);
    }
    if !headers.is_empty() && !headers.ends_with('\n') {
        headers.push('\n');
    }
    headers.push_str(&add(&headers, requires));
    headers.into_bytes()
}

/// The `Requires-Dist` lines of `requires` that `headers` lacks.
fn add(headers: &str, requires: &[String]) -> String {
    let end = if headers.ends_with("\r\n") { "\r\n" } else { "\n" };
    requires
        .iter()
        .map(|r| format!("Requires-Dist: {r}"))
        .filter(|line| !headers.lines().any(|l| l.trim_end() == line))
        .map(|line| format!("{line}{end}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_rows_are_what_pip_checks() {
        // sha256 of "" in urlsafe base64 without padding, as pip's RECORD check computes it.
        assert_eq!(record_row("a,b.py", b""), "\"a,b.py\",sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0");
    }

    #[test]
    fn requirements_join_the_headers_once() {
        let m = b"Metadata-Version: 2.1\nName: pyvec\nVersion: 1\nRequires-Dist: a==1\n\nA description.\nRequires-Dist: no\n";
        let got = String::from_utf8(with_requirements(m, &["a==1".into(), "rt==2+x".into()])).unwrap();
        assert_eq!(
            got,
            "Metadata-Version: 2.1\nName: pyvec\nVersion: 1\nRequires-Dist: a==1\nRequires-Dist: rt==2+x\n\nA description.\nRequires-Dist: no\n"
        );
        let bare = String::from_utf8(with_requirements(b"Name: x\nVersion: 1", &["rt==2".into()])).unwrap();
        assert_eq!(bare, "Name: x\nVersion: 1\nRequires-Dist: rt==2\n");
    }
}
