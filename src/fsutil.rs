//! Small filesystem helpers shared by the cache, deploy and build state: atomic writes, tree
//! copies that keep symlinks and modes, sizes.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically and durably: a temp file in the same dir, fsynced,
/// renamed, then the dir synced. For records a resume relies on (markers, manifests, state).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    via_temp(path, true, |f| f.write_all(bytes))
}

/// Replaces `path` with `bytes` atomically (a reader never sees half a file) but without
/// fsync: for status, reports and other records that may be lost in a power cut.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    via_temp(path, false, |f| f.write_all(bytes))
}

/// Copies the file `src` to `dst` like [`write_atomic`] writes: atomically and durably, streamed
/// (not read into memory: wheels can be gigabytes).
pub fn copy_atomic(src: &Path, dst: &Path) -> io::Result<()> {
    via_temp(dst, true, |f| io::copy(&mut fs::File::open(src)?, f).map(drop))
}

/// Like [`write_atomic`], but leaves the file (and its mtime) alone when it already holds `bytes`.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    match fs::read(path) {
        Ok(old) if old == bytes => Ok(false),
        _ => write_atomic(path, bytes).map(|()| true),
    }
}

/// Fills a temp file in `path`'s directory with `fill`, then renames it over `path`; `durable`:
/// fsyncs the file before and the directory after the rename. The file gets the mode a plain
/// `fs::write` would give it (0666 less the umask), not the temp file's 0600: the index's pages
/// and wheels are read by web servers running as other users.
fn via_temp(path: &Path, durable: bool, fill: impl FnOnce(&mut fs::File) -> io::Result<()>) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp =
        tempfile::Builder::new().prefix(".tmp-").permissions(fs::Permissions::from_mode(0o666)).tempfile_in(dir)?;
    fill(tmp.as_file_mut())?;
    if durable {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    if durable {
        sync_dir(dir);
    }
    Ok(())
}

/// fsyncs a directory so a rename in it survives a power cut (best effort).
pub fn sync_dir(dir: &Path) {
    if let Ok(f) = fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// An exclusive lock on a file that says who holds it (the holder writes its note, JSON, into
/// the file). Released when dropped (the note wiped, so a finished holder leaves nothing
/// behind), or when the process dies.
pub struct HeldLock {
    file: fs::File,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

/// Takes the lock at `path` and writes `me` into it. If another process holds it: with
/// `waiting`, that is told who (when its note can be read) and the call blocks until the holder
/// lets go; without, `Err(holder)` is returned at once.
pub fn lock_held<H: serde::Serialize + serde::de::DeserializeOwned>(
    path: &Path,
    me: &H,
    waiting: Option<&mut dyn FnMut(Option<H>)>,
) -> io::Result<Result<HeldLock, Option<H>>> {
    use fs4::fs_std::FileExt;
    use std::io::Seek;
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let mut file = fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)?;
    match file.try_lock_exclusive() {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            let holder = fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok());
            match waiting {
                Some(wait) => {
                    wait(holder);
                    file.lock_exclusive()?;
                }
                None => return Ok(Err(holder)),
            }
        }
        Err(e) => return Err(e),
    }
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(&serde_json::to_vec(me).map_err(io::Error::other)?)?;
    Ok(Ok(HeldLock { file }))
}

/// One entry of a tree listing, relative to the tree root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub path: String,
    #[serde(flatten)]
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum EntryKind {
    File { sha256: String, size: u64, mode: u32 },
    Symlink { target: String },
    Dir,
}

/// A relative path that stays inside the tree it is joined to: not empty, no root, no `..`.
pub fn is_safe_rel(p: &str) -> bool {
    !p.is_empty()
        && Path::new(p)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
}

/// What a special file is (a FIFO, a socket, a device node), or `None` for the kinds a tree of
/// files may hold (regular files, directories, symlinks). Opening a FIFO blocks until a writer
/// comes, so every reader of an install tree asks this of `lstat` before it opens anything.
pub fn special_kind(ft: &fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_file() || ft.is_dir() || ft.is_symlink() {
        None
    } else if ft.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if ft.is_socket() {
        Some("a Unix socket")
    } else if ft.is_char_device() {
        Some("a character device node")
    } else if ft.is_block_device() {
        Some("a block device node")
    } else {
        Some("neither a file, a directory nor a symlink")
    }
}

/// Opens `path` (a symlink followed) for reading if it is a regular file, else an
/// `InvalidInput` error saying what it is ("a FIFO (named pipe)": see [`special_kind`]; the
/// caller names the path). Opened without blocking, so a FIFO given in place of a file is refused
/// at once, never waited on for a writer that does not come; a file swapped in between is read as
/// what the open found.
pub fn open_regular(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new().read(true).custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32).open(path)?;
    let ft = f.metadata()?.file_type();
    if ft.is_file() {
        return Ok(f);
    }
    let what = if ft.is_dir() { "a directory" } else { special_kind(&ft).unwrap_or("not a regular file") };
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a regular file: {what}")))
}

/// The special files under `root` (see [`special_kind`]), by path relative to `root`, sorted.
/// Nothing is opened: only `lstat`.
pub fn special_files(root: &Path) -> io::Result<Vec<(String, &'static str)>> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
        let e = e.map_err(|e| io::Error::other(e.to_string()))?;
        if let Some(kind) = special_kind(&e.file_type()) {
            let rel = e.path().strip_prefix(root).expect("under root").to_string_lossy().into_owned();
            out.push((rel, kind));
        }
    }
    Ok(out)
}

/// Lists a tree (sorted), hashing files (on every core: multi-GB artifacts are listed when
/// stored and verified). Used for artifact manifests and verification.
pub fn list_tree(root: &Path) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut files = Vec::new();
    for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
        let e = e.map_err(|e| io::Error::other(e.to_string()))?;
        let rel = e.path().strip_prefix(root).expect("under root").to_string_lossy().into_owned();
        let ft = e.file_type();
        let kind = if ft.is_symlink() {
            EntryKind::Symlink { target: fs::read_link(e.path())?.to_string_lossy().into_owned() }
        } else if ft.is_dir() {
            EntryKind::Dir
        } else if let Some(kind) = special_kind(&ft) {
            // Never opened: a FIFO would block the reader for ever.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("`{rel}` is {kind}: only files, directories and symlinks can be stored"),
            ));
        } else {
            let m = e.metadata().map_err(|e| io::Error::other(e.to_string()))?;
            files.push((out.len(), m.len()));
            EntryKind::File { sha256: String::new(), size: m.len(), mode: m.permissions().mode() & 0o7777 }
        };
        out.push(Entry { path: rel, kind });
    }
    // Hash in parallel: files dealt to workers largest first, each taking the next from a shared
    // counter, so one huge library does not leave the other cores idle at the end.
    files.sort_by_key(|&(_, size)| std::cmp::Reverse(size));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(files.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let hashes: Vec<io::Result<Vec<(usize, String)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(at, _)) = files.get(i) else { return Ok(done) };
                        done.push((at, crate::digest::sha256_file(&root.join(&out[at].path))?.0));
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("hash worker")).collect()
    });
    for part in hashes {
        for (at, hash) in part? {
            if let EntryKind::File { sha256, .. } = &mut out[at].kind {
                *sha256 = hash;
            }
        }
    }
    Ok(out)
}

/// Flushes the whole filesystem holding `path` (one `syncfs`, far cheaper than an fsync per file
/// when thousands of new files must reach the disk before a completion marker).
pub fn sync_filesystem(path: &Path) -> io::Result<()> {
    let f = fs::File::open(path)?;
    Ok(rustix::fs::syncfs(&f)?)
}

/// Copies the tree `src` into `dst` (created), keeping symlinks as symlinks and file modes.
/// With `fsync`, every file is synced before returning.
pub fn copy_tree(src: &Path, dst: &Path, fsync: bool) -> io::Result<()> {
    fs::create_dir_all(dst)?;
    for e in walkdir::WalkDir::new(src).min_depth(1).sort_by_file_name() {
        let e = e.map_err(|e| io::Error::other(e.to_string()))?;
        let rel = e.path().strip_prefix(src).expect("under src");
        let to = dst.join(rel);
        copy_entry(e.path(), &to, fsync)?;
    }
    if fsync {
        sync_dir(dst);
    }
    Ok(())
}

/// Copies one file, symlink or directory (not its contents), replacing what is at `to`.
pub fn copy_entry(from: &Path, to: &Path, fsync: bool) -> io::Result<()> {
    place_entry(from, to, Placement::Copy)?;
    if fsync && fs::symlink_metadata(to)?.is_file() {
        fs::File::open(to)?.sync_all()?;
    }
    Ok(())
}

/// How a file from the cache is laid into a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// A copy-on-write clone (btrfs, XFS, bcachefs): instant, and independent of the cache.
    Clone,
    /// A hard link to the cache's file: instant, but shares the file with the cache, so it must
    /// not be edited in place (`rocmforge cache verify` finds such damage).
    Hardlink,
    /// A full copy.
    Copy,
}

/// Places files the cheapest way the filesystem allows, remembering what failed so a big tree
/// does not retry a refused clone or link for every file: clone, else hard link, else copy.
pub struct Placer {
    clone: std::sync::atomic::AtomicBool,
    hardlink: std::sync::atomic::AtomicBool,
}

impl Placer {
    /// `copy_only`: the user asked for independent copies (`link-mode = "copy"`).
    pub fn new(copy_only: bool) -> Placer {
        Placer { clone: (!copy_only).into(), hardlink: (!copy_only).into() }
    }

    /// Places one entry (file, symlink or directory) at `to`, replacing what is there.
    pub fn place(&self, from: &Path, to: &Path) -> io::Result<Placement> {
        use std::sync::atomic::Ordering::Relaxed;
        for (flag, how) in [(&self.clone, Placement::Clone), (&self.hardlink, Placement::Hardlink)] {
            if flag.load(Relaxed) {
                match place_entry(from, to, how) {
                    Err(e) if refused(&e) => flag.store(false, Relaxed),
                    r => return r,
                }
            }
        }
        place_entry(from, to, Placement::Copy)
    }
}

/// The filesystem cannot do this kind of placement here (not an I/O failure).
fn refused(e: &io::Error) -> bool {
    use rustix::io::Errno;
    Errno::from_io_error(e).is_some_and(|n| {
        [Errno::OPNOTSUPP, Errno::XDEV, Errno::INVAL, Errno::NOTTY, Errno::PERM, Errno::MLINK].contains(&n)
    })
}

/// Places one entry with `how` (symlinks and directories are always made anew). Returns how a
/// file was placed.
fn place_entry(from: &Path, to: &Path, how: Placement) -> io::Result<Placement> {
    let m = fs::symlink_metadata(from)?;
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    if m.file_type().is_symlink() {
        let target = fs::read_link(from)?;
        remove_if_exists(to)?;
        std::os::unix::fs::symlink(target, to)?;
        return Ok(how);
    }
    if m.is_dir() {
        fs::create_dir_all(to)?;
        return Ok(how);
    }
    remove_if_exists(to)?;
    match how {
        Placement::Hardlink => fs::hard_link(from, to)?,
        Placement::Copy => {
            fs::copy(from, to)?;
        }
        Placement::Clone => {
            let src = fs::File::open(from)?;
            let dst = fs::OpenOptions::new().write(true).create_new(true).open(to)?;
            if let Err(e) = rustix::fs::ioctl_ficlone(&dst, &src) {
                drop(dst);
                let _ = fs::remove_file(to);
                return Err(e.into());
            }
            dst.set_permissions(m.permissions())?;
        }
    }
    Ok(how)
}

/// Removes a file or symlink if present (not directories).
pub fn remove_if_exists(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes a directory tree if present.
pub fn remove_dir_all_if_exists(p: &Path) -> io::Result<()> {
    match fs::remove_dir_all(p) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// `files` (path relative to `dir`, content) as the only content of `dir`, scripts (`.sh`,
/// `.py`) executable: a check's folder laid out fresh. On failure: what was being done, to
/// which path, and why.
pub fn write_fresh(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<(), (&'static str, PathBuf, io::Error)> {
    remove_dir_all_if_exists(dir).map_err(|e| ("cannot clean", dir.to_path_buf(), e))?;
    fs::create_dir_all(dir).map_err(|e| ("cannot create", dir.to_path_buf(), e))?;
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| ("cannot create", parent.to_path_buf(), e))?;
        }
        fs::write(&path, bytes).map_err(|e| ("cannot write", path.clone(), e))?;
        if rel.ends_with(".sh") || rel.ends_with(".py") {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o755));
        }
    }
    Ok(())
}

/// Removes a temporary directory when dropped, unless [`TempDirGuard::keep`] was called: what failed
/// half-way leaves nothing behind (a killed process leaves its `.tmp-` dir, which `cache verify`
/// reports and `cache gc` removes once the process is gone).
pub struct TempDirGuard {
    path: Option<PathBuf>,
}

impl TempDirGuard {
    pub fn new(path: PathBuf) -> TempDirGuard {
        TempDirGuard { path: Some(path) }
    }
    pub fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for TempDirGuard {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = remove_dir_all_if_exists(&p);
        }
    }
}

/// Total size in bytes of the files under `p` (0 if absent).
pub fn tree_size(p: &Path) -> u64 {
    walkdir::WalkDir::new(p)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Human-readable size.
pub fn human_size(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// Free and total bytes of the filesystem holding `path` (the nearest existing ancestor), and
/// its mount point (the topmost ancestor on the same device).
pub struct DiskSpace {
    pub free: u64,
    pub total: u64,
    pub mount: PathBuf,
}

pub fn disk_space(path: &Path) -> Option<DiskSpace> {
    use std::os::unix::fs::MetadataExt;
    let existing = path.ancestors().find(|p| p.exists())?;
    let st = rustix::fs::statvfs(existing).ok()?;
    let dev = std::fs::metadata(existing).ok()?.dev();
    let abs = std::path::absolute(existing).ok()?;
    let mount = abs
        .ancestors()
        .take_while(|p| std::fs::metadata(p).is_ok_and(|m| m.dev() == dev))
        .last()
        .unwrap_or(&abs)
        .to_path_buf();
    Some(DiskSpace { free: st.f_bavail * st.f_frsize, total: st.f_blocks * st.f_frsize, mount })
}

/// Creates a cache directory (sources, downloads, artifacts) and marks it for backup tools
/// with `CACHEDIR.TAG` (https://bford.info/cachedir/): the one writer of the tag.
pub fn mark_cachedir(dir: &Path) -> io::Result<()> {
    let tag = dir.join("CACHEDIR.TAG");
    if !tag.exists() {
        fs::create_dir_all(dir)?;
        write_atomic(
            &tag,
            b"Signature: 8a477f597d28d172789f06886806bc55\n# This directory is a cache made by rocmforge.\n# For information see https://bford.info/cachedir/\n",
        )?;
    }
    Ok(())
}

/// Whether the process that named a temporary thing `<anything>-<pid>` or `<pid>` (the text after
/// the last `-`) is still running. A name without a pid counts as alive: never removed by guess.
pub fn owner_alive(name: &str) -> bool {
    let pid = name.rsplit('-').next().unwrap_or(name);
    match pid.parse::<u32>() {
        Ok(pid) => pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists(),
        Err(_) => true,
    }
}

/// The entries of `dir` (not below it) that `stale` picks by name and entry, sorted: the one
/// scan for what killed runs left (store temps, clone temps, transfer scratch, status temps),
/// which `cache verify` lists and `cache gc` removes. No `dir`: none.
pub fn stale_entries(dir: &Path, stale: impl Fn(&str, &fs::DirEntry) -> bool) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> =
        rd.filter_map(Result::ok).filter(|e| stale(&e.file_name().to_string_lossy(), e)).map(|e| e.path()).collect();
    v.sort();
    v
}

/// Removes the entries of `dir` named `<prefix><pid>` whose process is gone: what a killed run
/// of the same work left, which the run now redoing it (holding that work's lock) takes over, so
/// `cache verify` is clean after a resume without a `cache gc`.
pub fn remove_dead_temps(dir: &Path, prefix: &str) -> io::Result<()> {
    let Ok(rd) = fs::read_dir(dir) else { return Ok(()) };
    for e in rd.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.strip_prefix(prefix).is_some_and(|pid| pid.parse::<u32>().is_ok() && !owner_alive(pid)) {
            let p = e.path();
            if p.is_dir() {
                remove_dir_all_if_exists(&p)?;
            } else {
                remove_if_exists(&p)?;
            }
        }
    }
    Ok(())
}

pub fn join_rel(root: &Path, rel: &str) -> PathBuf {
    root.join(rel.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_in_a_tree_is_named_by_lstat_and_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("run")).unwrap();
        fs::write(dir.path().join("run/ok"), b"x").unwrap();
        let st = std::process::Command::new("mkfifo").arg(dir.path().join("run/pipe")).status().unwrap();
        assert!(st.success());
        assert_eq!(special_files(dir.path()).unwrap(), vec![("run/pipe".to_string(), "a FIFO (named pipe)")]);
        // Listing (as storing and `cache verify` do) refuses it instead of blocking in open().
        let e = list_tree(dir.path()).unwrap_err().to_string();
        assert_eq!(e, "`run/pipe` is a FIFO (named pipe): only files, directories and symlinks can be stored");
    }

    #[test]
    fn atomic_write_replaces_and_skips_identical() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("index.html");
        write_atomic(&p, b"old").unwrap();
        assert!(write_if_changed(&p, b"new").unwrap());
        assert!(!write_if_changed(&p, b"new").unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["index.html"], "no temp files left behind");
    }

    #[test]
    fn temp_dir_guards_and_owners() {
        let dir = tempfile::tempdir().unwrap();
        let (gone, kept) = (dir.path().join("gone"), dir.path().join("kept"));
        for p in [&gone, &kept] {
            std::fs::create_dir_all(p.join("sub")).unwrap();
        }
        drop(TempDirGuard::new(gone.clone()));
        TempDirGuard::new(kept.clone()).keep();
        assert!(!gone.exists() && kept.is_dir());
        assert!(owner_alive(&format!("x.tmp-{}", std::process::id())));
        assert!(owner_alive("no-pid-here"), "never removed by guess");
        // pid_max is at most 2^22 on Linux.
        assert!(!owner_alive("abc-4194305"));
    }

    #[test]
    fn atomic_copy_replaces_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("src.whl"), dir.path().join("out/dst.whl"));
        std::fs::write(&src, vec![3u8; 300_000]).unwrap();
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::write(&dst, b"old").unwrap();
        copy_atomic(&src, &dst).unwrap();
        assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
        assert!(copy_atomic(&dir.path().join("missing"), &dst).is_err());
        assert_eq!(std::fs::read(&dst).unwrap().len(), 300_000, "a failed copy leaves the old file");
        let names: Vec<_> = std::fs::read_dir(dst.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["dst.whl"], "no temp files left behind");
    }
}
