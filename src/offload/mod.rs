//! GPU code inside files: which gfx targets the device code of a library, object, code object
//! or wheel was compiled for. Read in Rust, never by running a tool:
//!
//! - `elf`: AMDGPU code objects (`*.co`, `*.hsaco`, as Tensile and MIOpen ship them; the
//!   target is in the ELF header's `e_flags`) and host ELF files (libraries, objects) whose
//!   `.hip_fatbin` section holds offload bundles; and whether a host library or executable
//!   asks for an executable stack, which glibc 2.41 and later refuse to load;
//! - `bundle`: clang offload bundles, plain and compressed (zlib, zstd);
//! - `kpack`: AMD's multi-arch form, where a host library's device code was moved into `.kpack`
//!   archives and a `.rocm_kpack_ref` marker says where they are ([`follow_markers`] finds them
//!   among the files read, or on disk inside a directory the caller gave, never outside it);
//! - `msgpack`: the MessagePack reader `kpack` needs;
//! - `coverage`: whether a recipe's installed files carry what it declares (device code for
//!   every target built, a string a patch put in);
//! - `source`: what they read from, a file on disk, a wheel's member or bytes, by seeking to the
//!   parts they need (a wheel's member inflated as it is read), so no file is held whole;
//! - this file: files, directories and wheels (a `.whl` is read as a zip, its members one at a
//!   time, never unpacked), and the target ids in `roc-obj-ls`'s spelling (`gfx1010`,
//!   `gfx1010:xnack-`).

pub mod bundle;
pub mod coverage;
pub mod elf;
pub mod kpack;
pub mod miopen;
pub mod msgpack;
pub mod source;

use std::io::{Read, SeekFrom};
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
    /// A kernel of a `.kpack` archive (`none` or `zstd-per-kernel`); on a host library, one its
    /// `.rocm_kpack_ref` marker led to.
    Kpack { scheme: &'static str },
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
            Container::Kpack { scheme } => format!("kpack archive ({scheme})"),
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
    /// A `.kpack` archive.
    Kpack,
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
    /// A host library whose device code was moved into `.kpack` archives: its marker, and the
    /// archives found holding its kernels (their code is in `code`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kpack: Option<KpackLink>,
}

/// Where a host library's `.rocm_kpack_ref` marker led.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KpackLink {
    #[serde(flatten)]
    pub marker: kpack::Marker,
    /// The archives found that hold its kernels (paths as shown).
    pub archives: Vec<String>,
}

impl Inspected {
    fn new(path: String, kind: FileKind, code: Vec<DeviceCode>) -> Inspected {
        let mut targets: Vec<String> = code.iter().map(|c| c.target.clone()).collect();
        targets.sort_by_key(|t| target_order(t));
        targets.dedup();
        Inspected { path, kind, targets, code, stack: None, kpack: None }
    }

    fn add_code(&mut self, more: Vec<DeviceCode>) {
        let mut code = std::mem::take(&mut self.code);
        code.extend(more);
        let (stack, kpack) = (self.stack, self.kpack.take());
        *self = Inspected { stack, kpack, ..Inspected::new(std::mem::take(&mut self.path), self.kind, code) };
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
    } else if kpack::is_kpack(head) {
        Some(FileKind::Kpack)
    } else {
        None
    }
}

/// The device code in `bytes` (an ELF file or a bare bundle), and the stack a host library or
/// executable asks for; `None` when it is neither.
pub fn inspect_bytes(path: &str, bytes: &[u8]) -> Result<Option<Inspected>, OffloadError> {
    inspect_source(path, &mut std::io::Cursor::new(bytes))
}

/// [`inspect_bytes`] of a file on disk or a wheel's member (`path` is what to show): only its
/// headers, tables and device code sections are read, a bundle as a stream, a `.kpack`
/// archive's table and its kernels' headers.
pub fn inspect_source(path: &str, src: &mut dyn source::Source) -> Result<Option<Inspected>, OffloadError> {
    let io = |e: std::io::Error| OffloadError::File { path: path.to_string(), message: format!("cannot read: {e}") };
    let len = source::len_of(src).map_err(io)?;
    let mut head = Vec::new();
    src.seek(SeekFrom::Start(0)).map_err(io)?;
    (&mut *src).take(24).read_to_end(&mut head).map_err(io)?;
    let (kind, code) = match sniff(&head) {
        None => return Ok(None),
        Some(FileKind::Bundle) => {
            src.seek(SeekFrom::Start(0)).map_err(io)?;
            (FileKind::Bundle, bundle::read_stream(src, len).map_err(|e| e.in_file(path))?)
        }
        Some(FileKind::Kpack) => (FileKind::Kpack, kpack::read(src).map_err(|e| e.in_file(path))?.code()),
        Some(_) => match elf::read(src).map_err(|e| e.in_file(path))? {
            elf::ElfContent::CodeObject(target) => (
                FileKind::CodeObject,
                vec![DeviceCode { target, entry: None, container: Container::CodeObject, size: len }],
            ),
            elf::ElfContent::Host { code, marker } => {
                let mut found = Inspected::new(path.to_string(), FileKind::Elf, code);
                src.seek(SeekFrom::Start(0)).map_err(io)?;
                found.stack = elf::read_stack(src).map_err(io)?;
                found.kpack = marker.map(|marker| KpackLink { marker, archives: Vec::new() });
                return Ok(Some(found));
            }
        },
    };
    Ok(Some(Inspected::new(path.to_string(), kind, code)))
}

/// Whether a wheel member's name is one that can carry device code: shared libraries
/// (`.so`, `.so.1.2`), objects and code objects.
pub fn is_code_member(name: &str) -> bool {
    let file = name.rsplit('/').next().unwrap_or(name);
    file.ends_with(".so")
        || file.contains(".so.")
        || [".o", ".co", ".hsaco", ".hipfb", ".kpack"].iter().any(|ext| file.ends_with(ext))
}

/// Whether a wheel member is a `.kpack` archive (what a marker in another wheel can name).
pub fn is_kpack_member(name: &str) -> bool {
    name.ends_with(".kpack")
}

/// The names of a wheel's members, in archive order.
pub fn wheel_members(wheel: &Path) -> Result<Vec<String>, OffloadError> {
    let zip = open_wheel(wheel)?;
    Ok(zip.file_names().map(str::to_string).collect())
}

fn open_wheel(wheel: &Path) -> Result<zip::ZipArchive<std::fs::File>, OffloadError> {
    open_wheel_file(wheel).map(|(zip, _)| zip)
}

/// The wheel as a zip, and the file again (another descriptor of it) for reading its members
/// by offset.
fn open_wheel_file(wheel: &Path) -> Result<(zip::ZipArchive<std::fs::File>, std::fs::File), OffloadError> {
    let io = |source| OffloadError::Io { path: wheel.to_path_buf(), source };
    let f = crate::fsutil::open_regular(wheel).map_err(io)?;
    let again = f.try_clone().map_err(io)?;
    let zip = zip::ZipArchive::new(f).map_err(|e| OffloadError::File {
        path: wheel.display().to_string(),
        message: format!("not a readable wheel (zip): {e}"),
    })?;
    Ok((zip, again))
}

/// What is handed each file read: its name (or path to show) and the file to read from.
pub type ReadMember<'a> = dyn FnMut(&str, &mut dyn source::Source) -> Result<(), OffloadError> + 'a;

/// Hands each wheel member named by `pick`, one at a time, to `f` with its name, as a
/// [`source::Member`]: inflated as `f` reads it, never held whole. A member whose stream is
/// damaged is an error naming it ("cannot read"), whatever `f` made of the failed read.
pub fn for_each_member(wheel: &Path, pick: &dyn Fn(&str) -> bool, f: &mut ReadMember<'_>) -> Result<(), OffloadError> {
    let (mut zip, file) = open_wheel_file(wheel)?;
    let names: Vec<String> = zip.file_names().filter(|n| pick(n)).map(str::to_string).collect();
    for name in names {
        let cannot = |e: &str| OffloadError::File {
            path: format!("{}!{name}", wheel.display()),
            message: format!("cannot read: {e}"),
        };
        let mut member = source::Member::of(&mut zip, &file, &name).map_err(|e| cannot(&e))?;
        let read = f(&name, &mut member);
        if let Some(e) = member.failure() {
            return Err(cannot(e));
        }
        read?;
    }
    Ok(())
}

/// Inspects the wheel members named by `pick` (`<wheel>!<member>` in the results).
pub fn inspect_wheel(wheel: &Path, pick: &dyn Fn(&str) -> bool) -> Result<Vec<Inspected>, OffloadError> {
    let mut out = Vec::new();
    for_each_member(wheel, pick, &mut |name, member| {
        if let Some(i) = inspect_source(&format!("{}!{name}", wheel.display()), member)? {
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
    // A FIFO or device named in place of a file is refused, never waited on. One open: the
    // head and then the parts a reader needs are read from it.
    let opened = crate::fsutil::open_regular(path).and_then(|mut f| read_head(&mut f, &mut head).map(|n| (f, n)));
    match opened {
        Err(source) => found.errors.push(OffloadError::Io { path: path.to_path_buf(), source }),
        Ok((_, n)) if sniff(&head[..n]).is_none() => {
            if named {
                found.errors.push(OffloadError::File {
                    path: shown,
                    message: "not an ELF file, an offload bundle or a wheel: no GPU code to read".into(),
                });
            } else {
                found.skipped += 1;
            }
        }
        Ok((mut f, _)) => match inspect_source(&shown, &mut f) {
            Ok(Some(i)) => found.files.push(i),
            Ok(None) => found.skipped += 1,
            Err(e) => found.errors.push(e),
        },
    }
}

/// Where a file read lies in its tree, for resolving a marker's relative paths: a wheel
/// member's path inside the wheel (as installed), else the path as shown.
fn place(shown: &str) -> &str {
    shown.split_once(".whl!").map(|(_, m)| m).unwrap_or(shown)
}

/// Follows the `.rocm_kpack_ref` marker of every host library in `files`: the archives its
/// search paths name, among `files` (by their place: a wheel's member as installed, so one
/// wheel's marker finds another wheel's archives) or, for a library on disk below one of
/// `roots` (the directories the user gave: a Python environment's site-packages), on disk below
/// that root (read then, not added to `files`). A marker never leads out of what was given: an
/// absolute search path, or one whose `..` climbs out of the root (a symlink included), is not
/// followed, and nothing on disk is read for a library outside every root. Their kernels filed
/// under the library's name become the library's code. An archive on disk that cannot be read
/// is an error (a FIFO or device in its place included: refused at once, never waited on); one
/// not found is not (a device package for another architecture is simply not installed).
pub fn follow_markers(files: &mut [Inspected], roots: &[PathBuf]) -> Vec<OffloadError> {
    let mut errors = Vec::new();
    let mut from_disk: Vec<Inspected> = Vec::new();
    let archives: Vec<(String, usize)> = files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.kind == FileKind::Kpack)
        .map(|(i, f)| (kpack::normalize(place(&f.path)), i))
        .collect();
    for i in 0..files.len() {
        let Some(link) = files[i].kpack.clone() else { continue };
        let here = place(&files[i].path);
        let dir = here.rsplit_once('/').map(|(d, _)| d).unwrap_or(".");
        let root = match files[i].path.contains(".whl!") {
            true => None,
            false => roots.iter().find(|r| Path::new(&files[i].path).starts_with(r)),
        };
        let mut found: Vec<(String, Vec<DeviceCode>)> = Vec::new();
        for sp in link.marker.search_paths.iter().filter(|sp| !sp.starts_with('/')) {
            let pattern = kpack::normalize(&format!("{dir}/{sp}"));
            let mut hits: Vec<&Inspected> =
                archives.iter().filter(|(p, _)| kpack::names(&pattern, p)).map(|(_, j)| &files[*j]).collect();
            if let Some(root) = root.filter(|_| hits.is_empty()) {
                for p in disk_matches(&pattern, root) {
                    let shown = p.display().to_string();
                    if !from_disk.iter().any(|f| f.path == shown) {
                        match read_archive(&p) {
                            Err(e) => errors.push(e),
                            Ok(a) => from_disk.push(a),
                        }
                    }
                }
                hits = from_disk.iter().filter(|f| kpack::names(&pattern, &kpack::normalize(&f.path))).collect();
            }
            for a in hits {
                let code: Vec<DeviceCode> = a
                    .code
                    .iter()
                    .filter(|c| c.entry.as_deref().is_some_and(|e| kpack::is_kernel_of(e, &link.marker.kernel_name)))
                    .map(|c| DeviceCode {
                        entry: Some(format!("{}!{}", a.path, c.entry.as_deref().unwrap_or(""))),
                        ..c.clone()
                    })
                    .collect();
                if !code.is_empty() && !found.iter().any(|(p, _)| *p == a.path) {
                    found.push((a.path.clone(), code));
                }
            }
        }
        let f = &mut files[i];
        let mut more = Vec::new();
        for (path, code) in found {
            f.kpack.as_mut().expect("a marker").archives.push(path);
            more.extend(code);
        }
        if !more.is_empty() {
            f.add_code(more);
        }
    }
    errors
}

/// A file a marker named, read as a `.kpack` archive (its table and its kernels' headers): its
/// head is looked at first, so another kind of file is not read further.
fn read_archive(p: &Path) -> Result<Inspected, OffloadError> {
    let shown = p.display().to_string();
    let not_kpack = || OffloadError::File {
        path: shown.clone(),
        message: "named by a .rocm_kpack_ref marker, but not a kpack archive".into(),
    };
    let io = |source| OffloadError::Io { path: p.to_path_buf(), source };
    // One open, refusing a FIFO or device (never waited on for a writer): the head and the
    // archive are read from it, so a file swapped in after the look is not what is read.
    let mut f = crate::fsutil::open_regular(p).map_err(io)?;
    let mut bytes = vec![0u8; 16];
    let n = read_head(&mut f, &mut bytes).map_err(io)?;
    if !kpack::is_kpack(&bytes[..n]) {
        return Err(not_kpack());
    }
    match inspect_source(&shown, &mut f)? {
        Some(a) if a.kind == FileKind::Kpack => Ok(a),
        _ => Err(not_kpack()),
    }
}

/// The files on disk a normalised search path names (`@GFXARCH@`: each architecture there),
/// inside `root` only: the path must stay below it lexically and once symlinks are resolved.
fn disk_matches(pattern: &str, root: &Path) -> Vec<PathBuf> {
    let root_norm = kpack::normalize(&root.display().to_string());
    let lexically_inside = Path::new(pattern)
        .strip_prefix(&root_norm)
        .is_ok_and(|rest| !rest.components().any(|c| c == std::path::Component::ParentDir));
    if !lexically_inside {
        return Vec::new();
    }
    let Ok(real_root) = root.canonicalize() else { return Vec::new() };
    let really_inside = |p: &Path| p.canonicalize().is_ok_and(|c| c.starts_with(&real_root));
    if !pattern.contains(kpack::ARCH_PLACEHOLDER) {
        let p = PathBuf::from(pattern);
        return if is_there(&p) && really_inside(&p) { vec![p] } else { Vec::new() };
    }
    let (dir, _) = pattern.rsplit_once('/').unwrap_or((".", pattern));
    let dir = if dir.is_empty() { "/" } else { dir };
    if !really_inside(Path::new(dir)) {
        return Vec::new();
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            is_there(p) && kpack::names(pattern, &kpack::normalize(&p.display().to_string())) && really_inside(p)
        })
        .collect();
    out.sort();
    out
}

/// Whether a path a marker names is there to be read: anything but a directory (a symlink
/// followed). A FIFO or device is there, and refused by name when read, not passed over as absent.
fn is_there(p: &Path) -> bool {
    p.metadata().is_ok_and(|m| !m.is_dir())
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
