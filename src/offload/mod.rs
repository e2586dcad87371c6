//! GPU code inside files: which gfx targets the device code of a library, object, code object
//! or wheel was compiled for. Read in Rust, never by running a tool:
//!
//! - `elf`: AMDGPU code objects (`*.co`, `*.hsaco`, as Tensile and MIOpen ship them; the
//!   target is in the ELF header's `e_flags`) and host ELF files (libraries, objects) whose
//!   `.hip_fatbin` section holds offload bundles; and whether a host library or executable
//!   asks for an executable stack, which glibc 2.41 and later refuse to load;
//! - `bundle`: clang offload bundles, plain and compressed (zlib, zstd);
//! - `coverage`: whether a recipe's installed files carry what it declares (device code for
//!   every target built, a string a patch put in);
//! - this file: files, directories and wheels (a `.whl` is read as a zip in memory, never
//!   unpacked), and the target ids in `roc-obj-ls`'s spelling (`gfx1010`, `gfx1010:xnack-`).

pub mod bundle;
pub mod coverage;
pub mod elf;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    #[error("{0}")]
    Malformed(String),
    #[error("`{path}`: {message}")]
    File { path: String, message: String },
    #[error("cannot read `{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl OffloadError {
    fn in_file(self, path: &str) -> OffloadError {
        match self {
            OffloadError::Malformed(message) => OffloadError::File { path: path.to_string(), message },
            other => other,
        }
    }
}

/// Where a piece of device code was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Container {
    /// The file is an AMDGPU code object.
    CodeObject,
    /// An entry of a plain offload bundle.
    Bundle,
    /// An entry of a compressed offload bundle.
    CompressedBundle { version: u16, method: &'static str },
    /// A `__CLANG_OFFLOAD_BUNDLE__<id>` section of a `-fgpu-rdc` object (device bitcode).
    RdcSection,
}

impl Container {
    pub fn describe(&self) -> String {
        match self {
            Container::CodeObject => "code object".into(),
            Container::Bundle => "offload bundle".into(),
            Container::CompressedBundle { version, method } => {
                format!("compressed offload bundle (v{version}, {method})")
            }
            Container::RdcSection => "device bitcode section".into(),
        }
    }
}

/// One piece of device code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceCode {
    /// The target id, as clang and `roc-obj-ls` spell it: `gfx1010`, `gfx1010:xnack-`.
    pub target: String,
    /// The bundle entry id (`hipv4-amdgcn-amd-amdhsa--gfx1010`), when it came from a bundle.
    pub entry: Option<String>,
    pub container: Container,
    /// Bytes of device code.
    pub size: u64,
}

/// What kind of file carried the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    /// An AMDGPU code object.
    CodeObject,
    /// A host ELF file (library, executable, object).
    Elf,
    /// A bare offload bundle (`.hipfb`).
    Bundle,
}

/// One file (or wheel member) read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inspected {
    /// The path as given (below a directory: joined to it); a wheel member is
    /// `<wheel>!<member>`.
    pub path: String,
    pub kind: FileKind,
    /// Every target, sorted, once each.
    pub targets: Vec<String>,
    pub code: Vec<DeviceCode>,
    /// The stack a host library or executable asks for (left out for objects, code objects,
    /// bundles).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<elf::Stack>,
}

impl Inspected {
    fn new(path: String, kind: FileKind, code: Vec<DeviceCode>) -> Inspected {
        let mut targets: Vec<String> = code.iter().map(|c| c.target.clone()).collect();
        targets.sort_by_key(|t| target_order(t));
        targets.dedup();
        Inspected { path, kind, targets, code, stack: None }
    }

    /// The processors (`gfx1010`) of its targets, feature suffixes dropped.
    pub fn processors(&self) -> Vec<&str> {
        let mut p: Vec<&str> = self.targets.iter().map(|t| processor(t)).collect();
        p.dedup();
        p
    }
}

/// `gfx1010:xnack-` -> `gfx1010`.
pub fn processor(target: &str) -> &str {
    target.split(':').next().unwrap_or(target)
}

/// Sorts gfx names by generation then model (`gfx90a` before `gfx1010`), as people read them.
fn target_order(t: &str) -> (usize, String) {
    let p = processor(t);
    (p.len(), t.to_string())
}

/// What a file's bytes are, for the reader: `None` when neither ELF nor a bundle.
pub fn sniff(head: &[u8]) -> Option<FileKind> {
    if head.starts_with(b"\x7fELF") {
        Some(FileKind::Elf)
    } else if bundle::is_bundle(head) {
        Some(FileKind::Bundle)
    } else {
        None
    }
}

/// The device code in `bytes` (an ELF file or a bare bundle), and the stack a host library or
/// executable asks for; `None` when it is neither.
pub fn inspect_bytes(path: &str, bytes: &[u8]) -> Result<Option<Inspected>, OffloadError> {
    let (kind, code) = match sniff(bytes) {
        None => return Ok(None),
        Some(FileKind::Bundle) => (FileKind::Bundle, bundle::read_all(bytes).map_err(|e| e.in_file(path))?),
        Some(_) => match elf::read(bytes).map_err(|e| e.in_file(path))? {
            elf::ElfContent::CodeObject(target) => (
                FileKind::CodeObject,
                vec![DeviceCode { target, entry: None, container: Container::CodeObject, size: bytes.len() as u64 }],
            ),
            elf::ElfContent::Host(code) => (FileKind::Elf, code),
        },
    };
    let mut found = Inspected::new(path.to_string(), kind, code);
    if kind == FileKind::Elf {
        found.stack = elf::host_stack(bytes);
    }
    Ok(Some(found))
}

/// Whether a wheel member's name is one that can carry device code: shared libraries
/// (`.so`, `.so.1.2`), objects and code objects.
pub fn is_code_member(name: &str) -> bool {
    let file = name.rsplit('/').next().unwrap_or(name);
    file.ends_with(".so")
        || file.contains(".so.")
        || [".o", ".co", ".hsaco", ".hipfb"].iter().any(|ext| file.ends_with(ext))
}

/// The names of a wheel's members, in archive order.
pub fn wheel_members(wheel: &Path) -> Result<Vec<String>, OffloadError> {
    let zip = open_wheel(wheel)?;
    Ok(zip.file_names().map(str::to_string).collect())
}

fn open_wheel(wheel: &Path) -> Result<zip::ZipArchive<std::fs::File>, OffloadError> {
    let f = std::fs::File::open(wheel).map_err(|source| OffloadError::Io { path: wheel.to_path_buf(), source })?;
    zip::ZipArchive::new(f).map_err(|e| OffloadError::File {
        path: wheel.display().to_string(),
        message: format!("not a readable wheel (zip): {e}"),
    })
}

/// What is handed each file read: its name (or path to show) and its bytes.
pub type ReadMember<'a> = dyn FnMut(&str, &[u8]) -> Result<(), OffloadError> + 'a;

/// Reads each wheel member named by `pick` into memory, one at a time, and hands it to `f`
/// with its name.
pub fn for_each_member(wheel: &Path, pick: &dyn Fn(&str) -> bool, f: &mut ReadMember<'_>) -> Result<(), OffloadError> {
    let mut zip = open_wheel(wheel)?;
    let names: Vec<String> = zip.file_names().filter(|n| pick(n)).map(str::to_string).collect();
    for name in names {
        let shown = || format!("{}!{name}", wheel.display());
        let mut member = zip
            .by_name(&name)
            .map_err(|e| OffloadError::File { path: shown(), message: format!("cannot read: {e}") })?;
        let mut bytes = Vec::new();
        let limit = member.size().saturating_add(1);
        member
            .by_ref()
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| OffloadError::File { path: shown(), message: format!("cannot read: {e}") })?;
        f(&name, &bytes)?;
    }
    Ok(())
}

/// Inspects the wheel members named by `pick` (`<wheel>!<member>` in the results).
pub fn inspect_wheel(wheel: &Path, pick: &dyn Fn(&str) -> bool) -> Result<Vec<Inspected>, OffloadError> {
    let mut out = Vec::new();
    for_each_member(wheel, pick, &mut |name, bytes| {
        if let Some(i) = inspect_bytes(&format!("{}!{name}", wheel.display()), bytes)? {
            out.push(i);
        }
        Ok(())
    })?;
    Ok(out)
}

/// What `inspect_path` found under one path.
#[derive(Debug, Default)]
pub struct Found {
    pub files: Vec<Inspected>,
    /// Regular files that are neither ELF, bundle nor wheel (directories only).
    pub skipped: usize,
    /// Files that could not be read, with why; the rest were still read.
    pub errors: Vec<OffloadError>,
}

/// Inspects a file, a wheel (`*.whl`) or every such file under a directory (symlinks are not
/// followed: a library's `libx.so -> libx.so.1` is read once). A file given by name that is
/// neither ELF, bundle nor wheel is an error.
pub fn inspect_path(path: &Path) -> Found {
    let mut found = Found::default();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(source) => {
            found.errors.push(OffloadError::Io { path: path.to_path_buf(), source });
            return found;
        }
    };
    if meta.is_dir() {
        let mut files: Vec<PathBuf> = walkdir::WalkDir::new(path)
            .follow_links(false)
            .into_iter()
            .filter_map(|e| match e {
                Ok(e) => Some(e),
                Err(err) => {
                    let p = err.path().unwrap_or(path).to_path_buf();
                    found.errors.push(OffloadError::Io { path: p, source: err.into() });
                    None
                }
            })
            .filter(|e| e.file_type().is_file())
            .map(|e| e.into_path())
            .collect();
        files.sort();
        for f in files {
            inspect_one(&f, false, &mut found);
        }
    } else {
        inspect_one(path, true, &mut found);
    }
    found
}

fn inspect_one(path: &Path, named: bool, found: &mut Found) {
    let shown = path.display().to_string();
    if path.extension().is_some_and(|e| e == "whl") {
        match inspect_wheel(path, &is_code_member) {
            Ok(files) => found.files.extend(files),
            Err(e) => found.errors.push(e),
        }
        return;
    }
    let mut head = [0u8; 24];
    let n = std::fs::File::open(path).and_then(|mut f| read_head(&mut f, &mut head));
    match n {
        Err(source) => found.errors.push(OffloadError::Io { path: path.to_path_buf(), source }),
        Ok(n) if sniff(&head[..n]).is_none() => {
            if named {
                found.errors.push(OffloadError::File {
                    path: shown,
                    message: "not an ELF file, an offload bundle or a wheel: no GPU code to read".into(),
                });
            } else {
                found.skipped += 1;
            }
        }
        Ok(_) => match std::fs::read(path) {
            Err(source) => found.errors.push(OffloadError::Io { path: path.to_path_buf(), source }),
            Ok(bytes) => match inspect_bytes(&shown, &bytes) {
                Ok(Some(i)) => found.files.push(i),
                Ok(None) => found.skipped += 1,
                Err(e) => found.errors.push(e),
            },
        },
    }
}

fn read_head(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_that_can_carry_code() {
        for n in ["torch/lib/libtorch_hip.so", "a/libx.so.6.2", "lib/k.co", "k.hsaco", "x.o"] {
            assert!(is_code_member(n), "{n}");
        }
        for n in ["torch/__init__.py", "a.dist-info/RECORD", "lib/solib.txt", "x.cost"] {
            assert!(!is_code_member(n), "{n}");
        }
    }

    #[test]
    fn targets_sort_like_people_read_them() {
        let code = |t: &str| DeviceCode { target: t.into(), entry: None, container: Container::Bundle, size: 1 };
        let i = Inspected::new(
            "x".into(),
            FileKind::Elf,
            vec![code("gfx1030"), code("gfx90a"), code("gfx1010:xnack-"), code("gfx1030")],
        );
        assert_eq!(i.targets, ["gfx90a", "gfx1010:xnack-", "gfx1030"]);
        assert_eq!(i.processors(), ["gfx90a", "gfx1010", "gfx1030"]);
    }

    #[test]
    fn a_named_file_without_code_is_an_error_a_directory_skips_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("notes.txt"), "hello").unwrap();
        let f = inspect_path(&d.path().join("notes.txt"));
        assert!(f.errors[0].to_string().contains("not an ELF file"), "{:?}", f.errors);
        let f = inspect_path(d.path());
        assert!(f.errors.is_empty() && f.files.is_empty());
        assert_eq!(f.skipped, 1);
    }
}
