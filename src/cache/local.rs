//! The local artifact store: each recipe's staged install tree stored on disk under its key, only
//! whole (temp name, syncfs, rename, completion marker last), under a per-key lock.
//!
//! Layout: `<cache>/artifacts-v3/<key>/{tree/, files.json, inputs.json, stat.json, complete}`. The
//! bucket's number is the cache format (`key::CACHE_FORMAT`): after a format change old entries
//! are never looked at (`artifacts-v1` and `-v2` can be deleted by hand). `stat.json` (the files' stat
//! fingerprints, checked before every use) came later without a new bucket: it changes no key
//! and no file an older rocmforge reads, and an entry without it is re-hashed in full once on
//! its next use, then fingerprinted. A store fills `.tmp-<key>-<pid>/` and renames it; a failed
//! store removes it, a killed one leaves it for `cache verify` to report and `cache gc` to
//! remove once the pid is gone.

use std::fs;
use std::path::{Path, PathBuf};

use fs4::fs_std::FileExt;

use crate::fsutil::{self, Entry};
use crate::key::{CacheKey, KeyInputs};

const BUCKET: &str = "artifacts-v3";
const MARKER: &str = "complete";
/// The stat fingerprints of an artifact's files (see [`StatPrint`]).
const STAT_FILE: &str = "stat.json";
/// Names of entries a store is filling: `.tmp-<key>-<pid>`.
const TEMP_PREFIX: &str = ".tmp-";

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache I/O on `{path}`")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("artifact {key} is damaged: {problem}; remove it with `rocmforge cache gc --damaged` and rebuild")]
    Damaged { key: String, problem: String },
    #[error("artifact {key} was altered on disk: `{file}` ({what})")]
    Altered { key: String, file: String, what: String },
    /// A remote cache's copy that failed a check (signature, key, sha256, size): never used.
    #[error("the remote cache's artifact {key} at {from} was refused: {reason}")]
    Refused { key: String, from: String, reason: String },
    #[error("remote cache: {0}")]
    Remote(String),
}

/// The stat fingerprint of one file of an artifact (`stat.json`), recorded when it is stored
/// and checked every time the artifact is used: a full re-hash on every no-op build would cost
/// minutes for a multi-GB stack, a stat costs microseconds. With hard-linked deploys a prefix
/// file *is* the cache's file, so an in-place edit of the prefix changes this inode's size or
/// mtime and is caught here; a file replaced by another changes the inode number. Another size
/// is an alteration; another mtime or inode only makes that file be re-hashed, and one that still
/// hashes as stored gets its new fingerprint (a `cp -a` or restored copy of the cache has new
/// inodes and the same bytes, and stays a cache). An edit that keeps size and mtime (a deliberate
/// `touch -d`) is left to `cache verify`, which re-hashes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatPrint {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i128,
    pub ino: u64,
    /// The inode's change time, which no tool can set back: an in-place edit whose mtime was
    /// put back (`touch -r`, `rsync --inplace -t`) still moves it. (Absent in prints written
    /// before it was recorded: such a print differs, and the file is re-hashed once.)
    #[serde(default)]
    pub ctime_ns: i128,
}

fn stat_print(tree: &Path, rel: &str) -> std::io::Result<StatPrint> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(fsutil::join_rel(tree, rel))?;
    Ok(StatPrint {
        path: rel.to_string(),
        size: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ino: m.ino(),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    })
}

fn stat_prints(tree: &Path, files: &[Entry]) -> std::io::Result<Vec<StatPrint>> {
    files
        .iter()
        .filter(|e| matches!(e.kind, fsutil::EntryKind::File { .. }))
        .map(|e| stat_print(tree, &e.path))
        .collect()
}

fn io<'p>(path: &'p Path) -> impl FnOnce(std::io::Error) -> CacheError + 'p {
    move |source| CacheError::Io { path: path.to_path_buf(), source }
}

#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
}

/// A complete artifact in the cache.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub key: CacheKey,
    pub dir: PathBuf,
}

impl Artifact {
    /// The install tree, relative to the prefix.
    pub fn tree(&self) -> PathBuf {
        self.dir.join("tree")
    }
    pub fn inputs(&self) -> Option<KeyInputs> {
        serde_json::from_slice(&fs::read(self.dir.join("inputs.json")).ok()?).ok()
    }
    pub fn files(&self) -> Result<Vec<Entry>, CacheError> {
        let p = self.dir.join("files.json");
        let bytes = fs::read(&p).map_err(io(&p))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| CacheError::Damaged { key: self.key.0.clone(), problem: format!("files.json: {e}") })
    }
}

/// How a file differs from its artifact's manifest.
enum Difference {
    /// Missing, or other bytes, size or mode.
    Changed,
    /// Not in the manifest.
    Unexpected,
}

/// Held while a key is being stored or read for deploy.
pub struct KeyLock(#[allow(dead_code)] fs::File);

impl LocalStore {
    pub fn new(cache_dir: &Path) -> LocalStore {
        LocalStore { root: cache_dir.join(BUCKET) }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir_of(&self, key: &CacheKey) -> PathBuf {
        self.root.join(key.as_str())
    }

    /// Takes the per-key lock (blocks while another process holds it).
    pub fn lock(&self, key: &CacheKey) -> Result<KeyLock, CacheError> {
        let locks = self.root.join(".locks");
        fs::create_dir_all(&locks).map_err(io(&locks))?;
        let p = locks.join(format!("{}.lock", key.as_str()));
        let f = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&p).map_err(io(&p))?;
        f.lock_exclusive().map_err(io(&p))?;
        Ok(KeyLock(f))
    }

    /// The artifact for `key`, if it is complete. Entries without the marker are ignored.
    pub fn get(&self, key: &CacheKey) -> Option<Artifact> {
        let dir = self.dir_of(key);
        dir.join(MARKER).is_file().then(|| Artifact { key: key.clone(), dir })
    }

    /// Stores `stage` (the install tree, relative to the prefix) under `key`. The caller holds
    /// the key's lock. `stage` is moved when it is on the same filesystem, else copied.
    pub fn store(&self, key: &CacheKey, inputs: &KeyInputs, stage: &Path) -> Result<Artifact, CacheError> {
        if let Some(a) = self.get(key) {
            return Ok(a);
        }
        fs::create_dir_all(&self.root).map_err(io(&self.root))?;
        let _ = fsutil::mark_cachedir(self.root.parent().unwrap_or(&self.root));
        let final_dir = self.dir_of(key);
        // An incomplete entry from a crash: never trusted, replaced.
        fsutil::remove_dir_all_if_exists(&final_dir).map_err(io(&final_dir))?;
        let ours = format!("{TEMP_PREFIX}{}-", key.short());
        // A killed store of this key left its temp: this store redoes it.
        fsutil::remove_dead_temps(&self.root, &ours).map_err(io(&self.root))?;
        let tmp = self.root.join(format!("{ours}{}", std::process::id()));
        fsutil::remove_dir_all_if_exists(&tmp).map_err(io(&tmp))?;
        fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        let guard = fsutil::TempDirGuard::new(tmp.clone());
        let tree = tmp.join("tree");
        if fs::rename(stage, &tree).is_err() {
            fsutil::copy_tree(stage, &tree, false).map_err(io(stage))?;
        }
        fs::create_dir_all(&tree).map_err(io(&tree))?;
        let files = fsutil::list_tree(&tree).map_err(io(&tree))?;
        let write = |name: &str, bytes: Vec<u8>| -> Result<(), CacheError> {
            let p = tmp.join(name);
            fsutil::replace(&p, &bytes).map_err(io(&p))
        };
        write("files.json", serde_json::to_vec_pretty(&files).expect("serialises"))?;
        write("inputs.json", serde_json::to_vec_pretty(inputs).expect("serialises"))?;
        let prints = stat_prints(&tree, &files).map_err(io(&tree))?;
        write(STAT_FILE, serde_json::to_vec_pretty(&prints).expect("serialises"))?;
        crate::fault::point("store-tmp", &inputs.recipe);
        // Every file, its directory entries and the two records on disk before the entry gets
        // its final name: one syncfs rather than an fsync per file (thousands in a ROCm library).
        fsutil::sync_filesystem(&tmp).map_err(io(&tmp))?;
        fs::rename(&tmp, &final_dir).map_err(io(&final_dir))?;
        guard.keep();
        fsutil::sync_dir(&self.root);
        crate::fault::point("store", &inputs.recipe);
        let marker = final_dir.join(MARKER);
        fsutil::write_atomic(&marker, key.as_str().as_bytes()).map_err(io(&marker))?;
        Ok(Artifact { key: key.clone(), dir: final_dir })
    }

    /// The cheap check before an artifact is used: every file's stat fingerprint against the one
    /// recorded when it was stored; a file whose inode or mtime moved is re-hashed, and only one
    /// whose bytes differ is an alteration. An artifact stored before fingerprints existed is re-hashed
    /// once in full and then fingerprinted. The caller holds the key's lock.
    pub fn check_intact(&self, a: &Artifact) -> Result<(), CacheError> {
        let p = a.dir.join(STAT_FILE);
        let prints: Vec<StatPrint> = match fs::read(&p) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| CacheError::Damaged { key: a.key.0.clone(), problem: format!("{STAT_FILE}: {e}") })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.verify(a).map_err(|e| match e {
                    CacheError::Damaged { key, problem } => {
                        CacheError::Altered { key, file: problem, what: "found by a full re-hash".into() }
                    }
                    other => other,
                })?;
                return self.fingerprint(a);
            }
            Err(e) => return Err(io(&p)(e)),
        };
        let tree = a.tree();
        // A print that differs only in inode or mtime is a reason to re-hash that file, never
        // by itself a reason to delete it: `cp -a`, a backup restore or a move to another disk
        // gives every file a new inode with the same bytes.
        let mut suspects = Vec::new();
        for want in &prints {
            let altered = |what: String| CacheError::Altered { key: a.key.0.clone(), file: want.path.clone(), what };
            let have = match stat_print(&tree, &want.path) {
                Ok(h) => h,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(altered("missing".into())),
                Err(e) => return Err(io(&tree.join(&want.path))(e)),
            };
            if have.size != want.size {
                return Err(altered(format!("size {} instead of {}", have.size, want.size)));
            }
            if have != *want {
                suspects.push((want, have));
            }
        }
        if suspects.is_empty() {
            return Ok(());
        }
        let files = a.files()?;
        let stored: std::collections::HashMap<&str, &str> = files
            .iter()
            .filter_map(|e| match &e.kind {
                fsutil::EntryKind::File { sha256, .. } => Some((e.path.as_str(), sha256.as_str())),
                _ => None,
            })
            .collect();
        for (want, have) in &suspects {
            let path = fsutil::join_rel(&tree, &want.path);
            let (actual, _) = crate::digest::sha256_file(&path).map_err(io(&path))?;
            if stored.get(want.path.as_str()) != Some(&actual.as_str()) {
                let what = if have.ino != want.ino {
                    "replaced by another file"
                } else {
                    "modified in place after it was stored"
                };
                return Err(CacheError::Altered { key: a.key.0.clone(), file: want.path.clone(), what: what.into() });
            }
        }
        // Every suspect still hashes right: its new stat becomes the fingerprint, so the next
        // check is cheap again.
        let now: std::collections::HashMap<&str, &StatPrint> =
            suspects.iter().map(|(w, h)| (w.path.as_str(), h)).collect();
        let fresh: Vec<StatPrint> = prints.iter().map(|w| now.get(w.path.as_str()).map_or(w, |h| *h).clone()).collect();
        fsutil::replace(&p, &serde_json::to_vec_pretty(&fresh).expect("serialises")).map_err(io(&p))?;
        Ok(())
    }

    /// The whole check before an artifact's files are laid into a prefix (a night builds on
    /// them): every file re-hashed against its manifest, whatever its stat says, so what no stat
    /// shows (a bit flipped on the disk) is caught before anything is built on it. Then the
    /// fingerprints are recorded afresh. The caller holds the key's lock.
    pub fn check_whole(&self, a: &Artifact) -> Result<(), CacheError> {
        if let Some((file, what)) = self.first_difference(a)? {
            let what = match what {
                Difference::Changed => {
                    "missing, or other bytes than stored, found by re-hashing it before it was deployed"
                }
                Difference::Unexpected => "not stored with it, found before it was deployed",
            };
            return Err(CacheError::Altered { key: a.key.0.clone(), file, what: what.into() });
        }
        self.fingerprint(a)
    }

    /// Records every file's stat fingerprint as it is now: after a deploy hard-linked the files
    /// (a new link moves their change time), so the next cheap check finds them as they were
    /// checked. The caller checked them and holds the key's lock.
    pub fn fingerprint(&self, a: &Artifact) -> Result<(), CacheError> {
        let p = a.dir.join(STAT_FILE);
        let prints = stat_prints(&a.tree(), &a.files()?).map_err(io(&a.tree()))?;
        fsutil::replace(&p, &serde_json::to_vec_pretty(&prints).expect("serialises")).map_err(io(&p))
    }

    /// Temporary entries (`.tmp-<key>-<pid>`) of stores whose process is gone: a killed store's
    /// leftovers, for `cache verify` to report and `cache gc` to remove.
    pub fn stale_temps(&self) -> Vec<PathBuf> {
        fsutil::stale_entries(&self.root, |name, _| {
            name.strip_prefix(TEMP_PREFIX).is_some_and(|rest| !fsutil::owner_alive(rest))
        })
    }

    /// Every complete artifact, and the names of incomplete entries (a store interrupted
    /// between its rename and its marker; temp dirs of stores are [`LocalStore::stale_temps`]).
    pub fn list(&self) -> (Vec<Artifact>, Vec<PathBuf>) {
        let mut done = Vec::new();
        let mut partial = Vec::new();
        let Ok(rd) = fs::read_dir(&self.root) else { return (done, partial) };
        let mut entries: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name == ".locks" || name.starts_with(TEMP_PREFIX) {
                continue;
            }
            if p.join(MARKER).is_file() {
                done.push(Artifact { key: CacheKey(name), dir: p });
            } else if p.is_dir() {
                partial.push(p);
            }
        }
        (done, partial)
    }

    /// Re-hashes an artifact's files against its manifest.
    pub fn verify(&self, a: &Artifact) -> Result<(), CacheError> {
        match self.first_difference(a)? {
            None => Ok(()),
            Some((file, what)) => {
                let problem = match what {
                    Difference::Changed => format!("`{file}` is missing or changed"),
                    Difference::Unexpected => format!("unexpected file `{file}`"),
                };
                Err(CacheError::Damaged { key: a.key.0.clone(), problem })
            }
        }
    }

    /// The first entry whose file differs from the manifest (re-hashed in full), if any.
    fn first_difference(&self, a: &Artifact) -> Result<Option<(String, Difference)>, CacheError> {
        let want = a.files()?;
        let have = fsutil::list_tree(&a.tree()).map_err(|e| match e.kind() {
            // A special file (stored by an older rocmforge, or put there): named, never opened.
            std::io::ErrorKind::InvalidData => CacheError::Damaged { key: a.key.0.clone(), problem: e.to_string() },
            _ => io(&a.tree())(e),
        })?;
        if let Some(m) = want.iter().find(|e| !have.contains(e)) {
            return Ok(Some((m.path.clone(), Difference::Changed)));
        }
        Ok(have.iter().find(|e| !want.contains(e)).map(|x| (x.path.clone(), Difference::Unexpected)))
    }

    /// Removes an entry (complete or not).
    pub fn remove_entry(&self, dir: &Path) -> Result<(), CacheError> {
        fsutil::remove_dir_all_if_exists(dir).map_err(io(dir))
    }
}

impl super::Store for LocalStore {
    fn location(&self) -> String {
        self.root.display().to_string()
    }
    fn check(&self, key: &CacheKey) -> bool {
        self.get(key).is_some()
    }
    fn get(&self, key: &CacheKey) -> Result<Option<Artifact>, CacheError> {
        Ok(LocalStore::get(self, key))
    }
    fn put(&self, key: &CacheKey, inputs: &KeyInputs, stage: &Path) -> Result<Artifact, CacheError> {
        self.store(key, inputs, stage)
    }
    fn remove(&self, key: &CacheKey) -> Result<(), CacheError> {
        self.remove_entry(&self.dir_of(key))
    }
    fn check_intact(&self, a: &Artifact) -> Result<(), CacheError> {
        LocalStore::check_intact(self, a)
    }
    fn check_whole(&self, a: &Artifact) -> Result<(), CacheError> {
        LocalStore::check_whole(self, a)
    }
    fn fingerprint(&self, a: &Artifact) -> Result<(), CacheError> {
        LocalStore::fingerprint(self, a)
    }
    fn lock(&self, key: &CacheKey) -> Result<KeyLock, CacheError> {
        LocalStore::lock(self, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn inputs() -> KeyInputs {
        KeyInputs {
            format: crate::key::CACHE_FORMAT,
            recipe: "r".into(),
            recipe_content: "c".into(),
            source: "none".into(),
            patches: vec![],
            targets: vec![],
            prefix: "/p".into(),
            env: BTreeMap::new(),
            toolchain: "t".into(),
            host_os: String::new(),
            deps: BTreeMap::new(),
        }
    }

    /// A store under `d` holding one artifact of `files` (path in the stage, bytes), and the
    /// key's lock held while the test runs.
    fn stored(d: &Path, files: &[(&str, &[u8])]) -> (LocalStore, KeyLock, Artifact) {
        let stage = d.join("stage");
        for (rel, bytes) in files {
            let p = stage.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, bytes).unwrap();
        }
        let cache = LocalStore::new(&d.join("cache"));
        let key = inputs().key();
        let lock = cache.lock(&key).unwrap();
        let a = cache.store(&key, &inputs(), &stage).unwrap();
        (cache, lock, a)
    }

    #[test]
    fn store_get_verify_and_damage() {
        let d = tempfile::tempdir().unwrap();
        let stage = d.path().join("stage");
        fs::create_dir_all(stage.join("lib")).unwrap();
        fs::write(stage.join("lib/libx.so.1"), b"elf").unwrap();
        std::os::unix::fs::symlink("libx.so.1", stage.join("lib/libx.so")).unwrap();
        let cache = LocalStore::new(&d.path().join("cache"));
        let key = inputs().key();
        assert!(cache.get(&key).is_none());
        let _l = cache.lock(&key).unwrap();
        let a = cache.store(&key, &inputs(), &stage).unwrap();
        assert!(cache.get(&key).is_some());
        assert_eq!(a.inputs().unwrap(), inputs());
        cache.verify(&a).unwrap();
        assert_eq!(fs::read_link(a.tree().join("lib/libx.so")).unwrap(), PathBuf::from("libx.so.1"));
        fs::write(a.tree().join("lib/libx.so.1"), b"tampered").unwrap();
        let e = cache.verify(&a).unwrap_err().to_string();
        assert!(e.contains("`lib/libx.so.1` is missing or changed"), "{e}");
    }

    #[test]
    fn stat_fingerprints_catch_in_place_edits_and_replacements_and_old_entries_get_one() {
        let d = tempfile::tempdir().unwrap();
        let (cache, _l, a) = stored(d.path(), &[("lib/a.so", b"aaaa"), ("lib/b.so", b"bbbb")]);
        cache.check_intact(&a).unwrap();
        let names: Vec<_> = fs::read_dir(cache.root()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.iter().all(|n| !n.to_string_lossy().starts_with(".tmp-")), "{names:?}");

        // An artifact stored before fingerprints: re-hashed once, then fingerprinted.
        fs::remove_file(a.dir.join(STAT_FILE)).unwrap();
        cache.check_intact(&a).unwrap();
        assert!(a.dir.join(STAT_FILE).is_file());

        // In place, same size: the mtime moves.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut f = fs::OpenOptions::new().write(true).open(a.tree().join("lib/a.so")).unwrap();
        std::io::Write::write_all(&mut f, b"AA").unwrap();
        drop(f);
        let e = cache.check_intact(&a).unwrap_err().to_string();
        assert!(e.ends_with("was altered on disk: `lib/a.so` (modified in place after it was stored)"), "{e}");
        // Without a fingerprint, the full re-hash finds it too.
        fs::remove_file(a.dir.join(STAT_FILE)).unwrap();
        let e = cache.check_intact(&a).unwrap_err().to_string();
        assert!(e.contains("`lib/a.so` is missing or changed"), "{e}");
    }

    #[test]
    fn a_file_with_a_new_inode_and_the_same_bytes_is_re_hashed_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let (cache, _l, a) = stored(d.path(), &[("a.so", b"aaaa")]);
        let file = a.tree().join("a.so");
        // What `cp -a` or a restore leaves: another inode, the same bytes and mtime.
        let replace = |bytes: &[u8]| {
            let mtime = fs::metadata(&file).unwrap().modified().unwrap();
            let tmp = a.dir.join("new");
            fs::write(&tmp, bytes).unwrap();
            fs::File::options().write(true).open(&tmp).unwrap().set_modified(mtime).unwrap();
            fs::rename(&tmp, &file).unwrap();
        };
        replace(b"aaaa");
        cache.check_intact(&a).unwrap();
        let prints: Vec<StatPrint> = serde_json::from_slice(&fs::read(a.dir.join(STAT_FILE)).unwrap()).unwrap();
        assert_eq!(prints, vec![stat_print(&a.tree(), "a.so").unwrap()], "the new fingerprint is recorded");
        replace(b"AAAA");
        let e = cache.check_intact(&a).unwrap_err().to_string();
        assert!(e.ends_with("was altered on disk: `a.so` (replaced by another file)"), "{e}");
    }

    #[test]
    fn a_fifo_in_a_cached_tree_is_damage_named_by_verify_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let (cache, _l, a) = stored(d.path(), &[("a.so", b"aaaa")]);
        let st = std::process::Command::new("mkfifo").arg(a.tree().join("pipe")).status().unwrap();
        assert!(st.success());
        let e = cache.verify(&a).unwrap_err().to_string();
        assert!(
            e.contains("is damaged: `pipe` is a FIFO (named pipe): only files, directories and symlinks can be stored"),
            "{e}"
        );
    }

    #[test]
    fn the_bucket_is_the_cache_format() {
        assert_eq!(BUCKET, format!("artifacts-v{}", crate::key::CACHE_FORMAT));
    }

    #[test]
    fn entry_without_marker_is_not_trusted() {
        let d = tempfile::tempdir().unwrap();
        let cache = LocalStore::new(d.path());
        let key = inputs().key();
        fs::create_dir_all(cache.root().join(key.as_str()).join("tree")).unwrap();
        assert!(cache.get(&key).is_none());
        let (done, partial) = cache.list();
        assert!(done.is_empty());
        assert_eq!(partial.len(), 1);
    }
}
