//! Deploy: artifacts laid into the stack's prefix, with a per-recipe manifest of installed
//! files, so a rebuilt recipe's old files are removed first and a crash mid-deploy is undone.
//!
//! `<prefix>/.rocmforge/manifests/<recipe>.json` = { key, files, complete }. Before copying, the
//! manifest lists the old and the new files with `complete: false`; after, only the new ones with
//! `complete: true`. A run that finds an incomplete manifest removes everything it lists first.
//!
//! Files are cloned or hard-linked from the cache where the filesystem allows (`link-mode`,
//! default `auto`), else copied: restoring a multi-GB artifact then costs a directory walk.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cache::Artifact;
use crate::config::LinkMode;
use crate::fsutil::{self, EntryKind};

#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("cannot deploy {recipe} into `{path}`")]
    Io { recipe: String, path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub recipe: String,
    pub key: String,
    pub files: Vec<String>,
    pub complete: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeployOutcome {
    /// The prefix already holds this artifact.
    AlreadyDeployed,
    Deployed {
        files: usize,
    },
}

/// Held by the build that deploys into a prefix: two builds into one prefix would race on its
/// files, so the second waits for the first (see [`fsutil::HeldLock`]).
pub type PrefixLock = fsutil::HeldLock;

/// Who holds a prefix: written into the lock file by the holder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PrefixHolder {
    pub pid: u32,
    pub stack: String,
}

/// `<prefix>/.rocmforge/build.lock`.
fn lock_path(root: &Path) -> PathBuf {
    root.join(".rocmforge/build.lock")
}

/// Takes the build lock of the prefix at `root`. If another build holds it, `waiting` is told
/// who (when it can be read) and the call blocks until that build ends.
pub fn lock_prefix(
    root: &Path,
    stack: &str,
    waiting: impl FnOnce(Option<PrefixHolder>),
) -> std::io::Result<PrefixLock> {
    let me = PrefixHolder { pid: std::process::id(), stack: stack.to_string() };
    let mut waiting = Some(waiting);
    let mut tell = |holder| {
        if let Some(w) = waiting.take() {
            w(holder)
        }
    };
    Ok(fsutil::lock_held(&lock_path(root), &me, Some(&mut tell))?.unwrap_or_else(|_| unreachable!("it waits")))
}

pub struct Prefix {
    pub root: PathBuf,
    link_mode: LinkMode,
}

impl Prefix {
    pub fn new(root: &Path, link_mode: LinkMode) -> Prefix {
        Prefix { root: root.to_path_buf(), link_mode }
    }

    fn manifest_path(&self, recipe: &str) -> PathBuf {
        self.root.join(".rocmforge/manifests").join(format!("{recipe}.json"))
    }

    pub fn manifest(&self, recipe: &str) -> Option<Manifest> {
        serde_json::from_slice(&fs::read(self.manifest_path(recipe)).ok()?).ok()
    }

    /// Every recipe's manifest in the prefix (complete or not: a deploy under way lists its
    /// files before it lays them), by recipe name.
    pub fn manifests(&self) -> Vec<Manifest> {
        let Ok(dir) = fs::read_dir(self.root.join(".rocmforge/manifests")) else { return Vec::new() };
        let mut all: Vec<Manifest> = dir
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| serde_json::from_slice(&fs::read(e.path()).ok()?).ok())
            .collect();
        all.sort_by(|a, b| a.recipe.cmp(&b.recipe));
        all
    }

    fn write_manifest(&self, m: &Manifest) -> Result<(), DeployError> {
        let p = self.manifest_path(&m.recipe);
        fsutil::write_atomic(&p, &serde_json::to_vec_pretty(m).expect("serialises")).map_err(|source| DeployError::Io {
            recipe: m.recipe.clone(),
            path: p,
            source,
        })
    }

    /// Files (and links) in the prefix that no recipe's manifest lists and whose mtime is
    /// `since` or later, relative to the root, sorted: what a step wrote straight into the
    /// prefix instead of its stage. Nothing holds, restores or removes such a file. Older
    /// files (a prefix that is an existing folder) and `__pycache__` (Python's own byte-code
    /// of a tool run from the prefix) are not counted.
    pub fn unowned_since(&self, since: std::time::SystemTime) -> Vec<String> {
        if !self.root.is_dir() {
            return Vec::new();
        }
        let recent: Vec<String> = walkdir::WalkDir::new(&self.root)
            .min_depth(1)
            .into_iter()
            .filter_entry(|e| !(e.depth() == 1 && e.file_name() == ".rocmforge") && e.file_name() != "__pycache__")
            .filter_map(Result::ok)
            .filter(|e| !e.file_type().is_dir())
            .filter(|e| e.metadata().ok().and_then(|m| m.modified().ok()).is_some_and(|t| t >= since))
            .filter_map(|e| Some(e.path().strip_prefix(&self.root).ok()?.to_string_lossy().into_owned()))
            .collect();
        if recent.is_empty() {
            return recent;
        }
        // Read after the walk: a deploy lists its files before it lays them, so one under way
        // beside this recipe's build owns what the walk saw of it.
        let owned: BTreeSet<String> = self.manifests().into_iter().flat_map(|m| m.files).collect();
        let mut out: Vec<String> = recent.into_iter().filter(|f| !owned.contains(f)).collect();
        out.sort();
        out
    }

    /// Is `key` of `recipe` fully deployed?
    pub fn is_deployed(&self, recipe: &str, key: &str) -> bool {
        self.manifest(recipe).is_some_and(|m| m.complete && m.key == key)
    }

    /// Lays `artifact` into the prefix, replacing whatever `recipe` had deployed before.
    /// With `force`, files are laid again even if this key is deployed (a forced rebuild).
    pub fn deploy(&self, recipe: &str, artifact: &Artifact, force: bool) -> Result<DeployOutcome, DeployError> {
        let key = artifact.key.as_str();
        if !force && self.is_deployed(recipe, key) {
            return Ok(DeployOutcome::AlreadyDeployed);
        }
        let entries = artifact.files()?;
        let new_files: Vec<String> =
            entries.iter().filter(|e| !matches!(e.kind, EntryKind::Dir)).map(|e| e.path.clone()).collect();
        let old_files: Vec<String> = self.manifest(recipe).map(|m| m.files).unwrap_or_default();
        let all: BTreeSet<String> = old_files.iter().chain(new_files.iter()).cloned().collect();
        self.write_manifest(&Manifest {
            recipe: recipe.into(),
            key: key.into(),
            files: all.into_iter().collect(),
            complete: false,
        })?;
        let err = |path: PathBuf| move |source| DeployError::Io { recipe: recipe.to_string(), path, source };
        self.remove_files(recipe, &old_files)?;
        let tree = artifact.tree();
        let placer = fsutil::Placer::new(self.link_mode == LinkMode::Copy);
        for (i, e) in entries.iter().enumerate() {
            if i == entries.len() / 2 {
                crate::fault::point("deploy", recipe);
            }
            let to = fsutil::join_rel(&self.root, &e.path);
            placer.place(&tree.join(&e.path), &to).map_err(err(to.clone()))?;
        }
        self.write_manifest(&Manifest {
            recipe: recipe.into(),
            key: key.into(),
            files: new_files.clone(),
            complete: true,
        })?;
        Ok(DeployOutcome::Deployed { files: new_files.len() })
    }

    /// Removes the files a recipe deployed (and directories left empty), then its manifest.
    pub fn undeploy(&self, recipe: &str) -> Result<(), DeployError> {
        if let Some(m) = self.manifest(recipe) {
            self.remove_files(recipe, &m.files)?;
            let p = self.manifest_path(recipe);
            fsutil::remove_if_exists(&p).map_err(|source| DeployError::Io {
                recipe: recipe.into(),
                path: p,
                source,
            })?;
        }
        Ok(())
    }

    fn remove_files(&self, recipe: &str, files: &[String]) -> Result<(), DeployError> {
        let mut dirs = BTreeSet::new();
        for f in files {
            let p = fsutil::join_rel(&self.root, f);
            fsutil::remove_if_exists(&p).map_err(|source| DeployError::Io {
                recipe: recipe.into(),
                path: p.clone(),
                source,
            })?;
            let mut d = p.parent();
            while let Some(dir) = d {
                if dir == self.root {
                    break;
                }
                dirs.insert(dir.to_path_buf());
                d = dir.parent();
            }
        }
        // Deepest first; only empty directories go.
        for d in dirs.iter().rev() {
            let _ = fs::remove_dir(d);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::LocalStore;
    use crate::key::KeyInputs;
    use std::os::unix::fs::MetadataExt;

    /// A stored artifact with a library, a symlink to it and a header.
    fn artifact(cache_root: &Path) -> (LocalStore, Artifact) {
        let stage = cache_root.join("stage");
        fs::create_dir_all(stage.join("lib")).unwrap();
        fs::create_dir_all(stage.join("include")).unwrap();
        fs::write(stage.join("lib/libx.so.1"), b"elf bytes").unwrap();
        std::os::unix::fs::symlink("libx.so.1", stage.join("lib/libx.so")).unwrap();
        fs::write(stage.join("include/x.h"), b"#define X 1\n").unwrap();
        let inputs = KeyInputs {
            format: 1,
            recipe: "x".into(),
            recipe_content: "c".into(),
            source: "none".into(),
            patches: vec![],
            targets: vec![],
            prefix: "/p".into(),
            env: Default::default(),
            toolchain: "t".into(),
            host_os: String::new(),
            deps: Default::default(),
        };
        let cache = LocalStore::new(&cache_root.join("cache"));
        let key = inputs.key();
        let _l = cache.lock(&key).unwrap();
        let a = cache.store(&key, &inputs, &stage).unwrap();
        (cache, a)
    }

    fn same_file(a: &Path, b: &Path) -> bool {
        let (a, b) = (fs::metadata(a).unwrap(), fs::metadata(b).unwrap());
        (a.dev(), a.ino()) == (b.dev(), b.ino())
    }

    #[test]
    fn auto_links_cached_files_on_one_filesystem_and_copy_mode_copies() {
        let d = tempfile::tempdir().unwrap();
        let (cache, a) = artifact(d.path());
        let linked = Prefix::new(&d.path().join("linked"), LinkMode::Auto);
        assert_eq!(linked.deploy("x", &a, false).unwrap(), DeployOutcome::Deployed { files: 3 });
        let lib = linked.root.join("lib/libx.so.1");
        assert_eq!(fs::read(&lib).unwrap(), b"elf bytes");
        assert_eq!(fs::read_link(linked.root.join("lib/libx.so")).unwrap(), PathBuf::from("libx.so.1"));
        // On ext4 and tmpfs (no clones) auto means a hard link: the prefix file is the cache's.
        assert!(same_file(&lib, &a.tree().join("lib/libx.so.1")));
        // Which is why the prefix must not be edited in place: verify finds it.
        fs::write(linked.root.join("include/x.h"), b"#define X 2\n").unwrap();
        let e = cache.verify(&a).unwrap_err().to_string();
        assert!(e.contains("`include/x.h` is missing or changed"), "{e}");

        let (cache, a) = artifact(&d.path().join("second"));
        let copied = Prefix::new(&d.path().join("copied"), LinkMode::Copy);
        copied.deploy("x", &a, false).unwrap();
        let lib = copied.root.join("lib/libx.so.1");
        assert_eq!(fs::read(&lib).unwrap(), b"elf bytes");
        assert!(!same_file(&lib, &a.tree().join("lib/libx.so.1")));
        assert_eq!(fs::metadata(&lib).unwrap().nlink(), 1);
        fs::write(copied.root.join("include/x.h"), b"edited").unwrap();
        cache.verify(&a).unwrap();
    }

    #[test]
    fn auto_falls_back_to_copies_across_filesystems() {
        // The cache under the work tree, the prefix on /dev/shm (tmpfs): a link is refused
        // (EXDEV) and the deploy copies instead.
        let d = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let other = tempfile::tempdir_in("/dev/shm").expect("/dev/shm (tmpfs) is needed for this test");
        assert_ne!(
            fs::metadata(d.path()).unwrap().dev(),
            fs::metadata(other.path()).unwrap().dev(),
            "the checkout and /dev/shm must be different filesystems for this test"
        );
        let (cache, a) = artifact(d.path());
        let prefix = Prefix::new(&other.path().join("prefix"), LinkMode::Auto);
        prefix.deploy("x", &a, false).unwrap();
        let lib = prefix.root.join("lib/libx.so.1");
        assert_eq!(fs::read(&lib).unwrap(), b"elf bytes");
        assert_eq!(fs::metadata(&lib).unwrap().nlink(), 1);
        assert_eq!(fs::read(prefix.root.join("include/x.h")).unwrap(), b"#define X 1\n");
        cache.verify(&a).unwrap();
    }
}
