//! Safe extraction of .tar(.gz|.xz|.bz2|.zst) and .zip: nothing is ever written outside the
//! destination. Entries with `..` or absolute paths, symlinks and hard links that lead out of the
//! destination, and device files are refused, naming the entry.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveFormat {
    Tar,
    TarGz,
    TarXz,
    TarBz2,
    TarZst,
    Zip,
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive `{archive}`: refusing entry `{entry}`: {reason}")]
    Unsafe { archive: PathBuf, entry: String, reason: String },
    #[error("cannot read archive `{archive}`")]
    Read { archive: PathBuf, source: std::io::Error },
    #[error("archive `{archive}`: cannot write `{path}`")]
    Write { archive: PathBuf, path: PathBuf, source: std::io::Error },
    #[error("`{url}` is named like an archive (`{suffix}`) but what it served is not one: {content} (downloaded to `{archive}`). Check the URL in a browser: a wrong path or an expired link often serves an error page")]
    NotAnArchive { url: String, suffix: &'static str, content: String, archive: PathBuf },
}

impl ArchiveError {
    pub fn from_io(archive: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError + '_ {
        move |source| ArchiveError::Read { archive: archive.to_path_buf(), source }
    }
}

/// The names that say "archive": such a file must hold one (an old v7 `.tar` has no magic and
/// is trusted by its name).
const ARCHIVE_SUFFIXES: &[&str] =
    &[".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tbz", ".tar.zst", ".tzst", ".zip"];

/// The archive format of `path`, by its first bytes, then by the URL's name; `None`: a plain
/// file. A file whose name says archive and whose bytes are none is refused, naming both.
pub fn detect(path: &Path, url: &str) -> Result<Option<ArchiveFormat>, ArchiveError> {
    let (format, head) = sniff(path, url).map_err(ArchiveError::from_io(path))?;
    let name = crate::recipe::url_file_name(url).to_ascii_lowercase();
    match ARCHIVE_SUFFIXES.iter().find(|s| name.ends_with(*s)) {
        Some(suffix) if format.is_none() => Err(ArchiveError::NotAnArchive {
            url: url.to_string(),
            suffix,
            content: describe_content(&head),
            archive: path.to_path_buf(),
        }),
        _ => Ok(format),
    }
}

/// What a file that should be an archive holds, for people: "an HTML page", "text starting
/// `...`", "empty", or its first bytes.
fn describe_content(head: &[u8]) -> String {
    if head.is_empty() {
        return "it is empty".into();
    }
    let text = String::from_utf8_lossy(&head[..head.len().min(200)]);
    let lower = text.to_ascii_lowercase();
    if lower.trim_start().starts_with('<') && (lower.contains("<html") || lower.contains("<!doctype html")) {
        return "an HTML page".into();
    }
    if head.iter().take(64).all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace()) {
        let first: String = text.chars().take(60).map(|c| if c.is_whitespace() { ' ' } else { c }).collect();
        return format!("text starting `{}`", first.trim_end());
    }
    let hex: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("data starting with the bytes {}", hex.join(" "))
}

/// The format by magic (or a v7 `.tar` by name), and the first bytes read.
fn sniff(path: &Path, url: &str) -> std::io::Result<(Option<ArchiveFormat>, Vec<u8>)> {
    let mut head = [0u8; 512];
    let mut f = File::open(path)?;
    let mut n = 0;
    while n < head.len() {
        let k = f.read(&mut head[n..])?;
        if k == 0 {
            break;
        }
        n += k;
    }
    let h = &head[..n];
    let by_magic = if h.starts_with(&[0x1f, 0x8b]) {
        Some(ArchiveFormat::TarGz)
    } else if h.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Some(ArchiveFormat::TarXz)
    } else if h.starts_with(b"BZh") {
        Some(ArchiveFormat::TarBz2)
    } else if h.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some(ArchiveFormat::TarZst)
    } else if h.starts_with(b"PK\x03\x04") || h.starts_with(b"PK\x05\x06") {
        Some(ArchiveFormat::Zip)
    } else if n >= 262 && &h[257..262] == b"ustar" {
        Some(ArchiveFormat::Tar)
    } else {
        None
    };
    let name = crate::recipe::url_file_name(url);
    // A wheel is a zip, but it is installed, not unpacked.
    if name.ends_with(".whl") {
        return Ok((None, h.to_vec()));
    }
    // Old (v7) tar files have no magic: trust the name then.
    Ok((by_magic.or_else(|| name.ends_with(".tar").then_some(ArchiveFormat::Tar)), h.to_vec()))
}

/// Unpacks `archive` into `dest` (created if needed), dropping `strip` leading path components.
pub fn extract(archive: &Path, format: ArchiveFormat, dest: &Path, strip: u32) -> Result<(), ArchiveError> {
    std::fs::create_dir_all(dest).map_err(|source| ArchiveError::Write {
        archive: archive.into(),
        path: dest.into(),
        source,
    })?;
    let root = dest.canonicalize().map_err(|source| ArchiveError::Write {
        archive: archive.into(),
        path: dest.into(),
        source,
    })?;
    let ex = Extractor { archive: archive.to_path_buf(), root, strip: strip as usize };
    let file = File::open(archive).map_err(ArchiveError::from_io(archive))?;
    let r = BufReader::new(file);
    match format {
        ArchiveFormat::Tar => ex.tar(r),
        ArchiveFormat::TarGz => ex.tar(flate2::read::MultiGzDecoder::new(r)),
        ArchiveFormat::TarXz => ex.tar(xz2::read::XzDecoder::new_multi_decoder(r)),
        ArchiveFormat::TarBz2 => ex.tar(bzip2::read::MultiBzDecoder::new(r)),
        ArchiveFormat::TarZst => {
            ex.tar(zstd::stream::read::Decoder::with_buffer(r).map_err(ArchiveError::from_io(archive))?)
        }
        ArchiveFormat::Zip => ex.zip(),
    }
}

/// Why an entry path is refused, or its components after stripping (`None`: stripped away).
pub fn entry_components(raw: &Path, strip: usize) -> Result<Option<PathBuf>, String> {
    let mut parts = Vec::new();
    for c in raw.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err("its path contains `..`".into()),
            Component::RootDir | Component::Prefix(_) => return Err("its path is absolute".into()),
        }
    }
    if parts.len() <= strip {
        return Ok(None);
    }
    Ok(Some(parts[strip..].iter().collect()))
}

/// Whether a symlink at `link_dir_depth` directories below the root, with target `target`, stays
/// inside the root. `..` may only lead the target (`../../lib/x`), so the lexical answer is the
/// physical one.
pub fn symlink_target_ok(target: &Path, link_dir_depth: usize) -> Result<(), String> {
    let mut ups = 0;
    let mut seen_name = false;
    for c in target.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("it is a symlink to the absolute path `{}`", target.display()))
            }
            Component::ParentDir if seen_name => {
                return Err(format!("it is a symlink to `{}`, with `..` after a name", target.display()))
            }
            Component::ParentDir => ups += 1,
            Component::Normal(_) => seen_name = true,
            Component::CurDir => {}
        }
    }
    if ups > link_dir_depth {
        return Err(format!("it is a symlink to `{}`, outside the destination", target.display()));
    }
    Ok(())
}

fn os(b: &[u8]) -> &Path {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Path::new(OsStr::from_bytes(b))
    }
    #[cfg(not(unix))]
    {
        Path::new(std::str::from_utf8(b).unwrap_or("\u{fffd}"))
    }
}

struct Extractor {
    archive: PathBuf,
    root: PathBuf,
    strip: usize,
}

impl Extractor {
    fn refuse(&self, entry: &str, reason: impl Into<String>) -> ArchiveError {
        ArchiveError::Unsafe { archive: self.archive.clone(), entry: entry.to_string(), reason: reason.into() }
    }
    fn werr(&self, path: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError {
        let (archive, path) = (self.archive.clone(), path.to_path_buf());
        move |source| ArchiveError::Write { archive, path, source }
    }

    fn rel(&self, entry: &str, raw: &Path) -> Result<Option<PathBuf>, ArchiveError> {
        entry_components(raw, self.strip).map_err(|r| self.refuse(entry, r))
    }

    /// The real directory `rel` names, created as needed, never leaving the root (existing
    /// symlinks on the way are followed only when they stay inside).
    fn dir(&self, entry: &str, rel: &Path) -> Result<PathBuf, ArchiveError> {
        let mut cur = self.root.clone();
        for c in rel.components() {
            let next = cur.join(c);
            match std::fs::symlink_metadata(&next) {
                Ok(m) if m.file_type().is_symlink() => {
                    let real = next.canonicalize().map_err(self.werr(&next))?;
                    if !real.starts_with(&self.root) || !real.is_dir() {
                        return Err(
                            self.refuse(entry, format!("it would be written through the symlink `{}`", next.display()))
                        );
                    }
                    cur = real;
                }
                Ok(m) if m.is_dir() => cur = next,
                Ok(_) => return Err(self.refuse(entry, format!("`{}` is a file, not a directory", next.display()))),
                Err(_) => {
                    std::fs::create_dir(&next).map_err(self.werr(&next))?;
                    cur = next;
                }
            }
        }
        Ok(cur)
    }

    /// The place for a non-directory entry: its parent made real; anything already there removed.
    fn slot(&self, entry: &str, rel: &Path) -> Result<PathBuf, ArchiveError> {
        let parent = self.dir(entry, rel.parent().unwrap_or(Path::new("")))?;
        let path = parent.join(rel.file_name().expect("a normal last component"));
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => return Err(self.refuse(entry, "a directory of the same name is already there")),
            Ok(_) => std::fs::remove_file(&path).map_err(self.werr(&path))?,
            Err(_) => {}
        }
        Ok(path)
    }

    fn file(&self, entry: &str, rel: &Path, mut data: impl Read, mode: u32) -> Result<(), ArchiveError> {
        let path = self.slot(entry, rel)?;
        let mut f = OpenOptions::new().write(true).create_new(true).open(&path).map_err(self.werr(&path))?;
        std::io::copy(&mut data, &mut f).map_err(ArchiveError::from_io(&self.archive))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = if mode == 0 { 0o644 } else { (mode & 0o777) | 0o200 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(self.werr(&path))?;
        }
        let _ = mode;
        Ok(())
    }

    fn symlink(&self, entry: &str, rel: &Path, target: &Path) -> Result<(), ArchiveError> {
        let parent = self.dir(entry, rel.parent().unwrap_or(Path::new("")))?;
        let depth = parent.strip_prefix(&self.root).map(|p| p.components().count()).unwrap_or(0);
        symlink_target_ok(target, depth).map_err(|r| self.refuse(entry, r))?;
        let path = self.slot(entry, rel)?;
        #[cfg(unix)]
        std::os::unix::fs::symlink(target, &path).map_err(self.werr(&path))?;
        #[cfg(not(unix))]
        return Err(self.refuse(entry, "symlinks are not supported on this platform"));
        #[allow(unreachable_code)]
        Ok(())
    }

    fn hardlink(&self, entry: &str, rel: &Path, raw_target: &Path) -> Result<(), ArchiveError> {
        let target_rel = match entry_components(raw_target, self.strip) {
            Ok(Some(t)) => t,
            Ok(None) => {
                return Err(self.refuse(
                    entry,
                    format!("it is a hard link to `{}`, outside the destination", raw_target.display()),
                ))
            }
            Err(r) => return Err(self.refuse(entry, format!("it is a hard link to `{}`: {r}", raw_target.display()))),
        };
        let source = self.root.join(&target_rel);
        let ok = std::fs::symlink_metadata(&source).is_ok_and(|m| m.is_file())
            && source.canonicalize().is_ok_and(|r| r.starts_with(&self.root));
        if !ok {
            return Err(self.refuse(
                entry,
                format!("it is a hard link to `{}`, which is not a file extracted before it", raw_target.display()),
            ));
        }
        let path = self.slot(entry, rel)?;
        std::fs::hard_link(&source, &path).map_err(self.werr(&path))
    }

    fn tar(&self, r: impl Read) -> Result<(), ArchiveError> {
        use tar::EntryType;
        let mut ar = tar::Archive::new(r);
        for entry in ar.entries().map_err(ArchiveError::from_io(&self.archive))? {
            let mut e = entry.map_err(ArchiveError::from_io(&self.archive))?;
            let raw = e.path_bytes().into_owned();
            let name = String::from_utf8_lossy(&raw).to_string();
            let kind = e.header().entry_type();
            if matches!(
                kind,
                EntryType::XGlobalHeader | EntryType::XHeader | EntryType::GNULongName | EntryType::GNULongLink
            ) {
                continue;
            }
            match kind {
                EntryType::Char | EntryType::Block => return Err(self.refuse(&name, "it is a device file")),
                EntryType::Fifo => return Err(self.refuse(&name, "it is a named pipe")),
                _ => {}
            }
            let Some(rel) = self.rel(&name, os(&raw))? else { continue };
            match kind {
                EntryType::Directory => {
                    self.dir(&name, &rel)?;
                }
                EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                    let mode = e.header().mode().unwrap_or(0o644);
                    self.file(&name, &rel, &mut e, mode)?;
                }
                EntryType::Symlink => {
                    let target = e.link_name_bytes().map(|b| b.into_owned()).unwrap_or_default();
                    self.symlink(&name, &rel, os(&target))?;
                }
                EntryType::Link => {
                    let target = e.link_name_bytes().map(|b| b.into_owned()).unwrap_or_default();
                    self.hardlink(&name, &rel, os(&target))?;
                }
                other => return Err(self.refuse(&name, format!("unsupported entry type {other:?}"))),
            }
        }
        Ok(())
    }

    fn zip(&self) -> Result<(), ArchiveError> {
        let file = File::open(&self.archive).map_err(ArchiveError::from_io(&self.archive))?;
        let mut z = zip::ZipArchive::new(file)
            .map_err(|e| ArchiveError::Read { archive: self.archive.clone(), source: std::io::Error::other(e) })?;
        for i in 0..z.len() {
            let mut f = z
                .by_index(i)
                .map_err(|e| ArchiveError::Read { archive: self.archive.clone(), source: std::io::Error::other(e) })?;
            let raw = f.name_raw().to_vec();
            let name = String::from_utf8_lossy(&raw).to_string();
            let mode = f.unix_mode().unwrap_or(0);
            let kind = mode & 0o170000;
            if matches!(kind, 0o020000 | 0o060000) {
                return Err(self.refuse(&name, "it is a device file"));
            }
            if kind == 0o010000 {
                return Err(self.refuse(&name, "it is a named pipe"));
            }
            let Some(rel) = self.rel(&name, os(&raw))? else { continue };
            if f.is_dir() {
                self.dir(&name, &rel)?;
            } else if kind == 0o120000 {
                let mut target = Vec::new();
                f.read_to_end(&mut target).map_err(ArchiveError::from_io(&self.archive))?;
                self.symlink(&name, &rel, os(&target))?;
            } else {
                self.file(&name, &rel, &mut f, mode & 0o777)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_paths() {
        assert_eq!(entry_components(Path::new("pkg-1.0/src/a.c"), 1).unwrap(), Some(PathBuf::from("src/a.c")));
        assert_eq!(entry_components(Path::new("./pkg-1.0/"), 1).unwrap(), None);
        assert_eq!(entry_components(Path::new("a/../../x"), 0).unwrap_err(), "its path contains `..`");
        assert_eq!(entry_components(Path::new("/etc/passwd"), 1).unwrap_err(), "its path is absolute");
    }

    #[test]
    fn symlink_targets() {
        assert!(symlink_target_ok(Path::new("../lib/libx.so"), 1).is_ok());
        assert!(symlink_target_ok(Path::new("libx.so.1"), 0).is_ok());
        assert!(symlink_target_ok(Path::new("../x"), 0).is_err());
        assert!(symlink_target_ok(Path::new("/etc/passwd"), 3).is_err());
        assert!(symlink_target_ok(Path::new("a/../../b"), 5).is_err());
    }
}

#[cfg(test)]
#[path = "archive_props.rs"]
mod props;
