//! `cache_list`, `cache_verify`, `cache_gc` (the local artifact store) and `clean` (work dirs).

use std::path::PathBuf;

use crate::cache::{Artifact, CacheError, LocalStore};
use crate::config::Config;
use crate::fsutil::tree_size;
use crate::layout::WorkDir;
use crate::recipe::Stack;

/// One stored artifact.
pub struct ArtifactInfo {
    pub artifact: Artifact,
    /// The recipe that made it (`?` when its inputs cannot be read).
    pub recipe: String,
    pub size: u64,
}

pub struct Listing {
    pub artifacts: Vec<ArtifactInfo>,
    /// Entries without a completion marker (interrupted stores).
    pub incomplete: Vec<PathBuf>,
    pub root: PathBuf,
    pub total_size: u64,
}

pub fn cache_list(cfg: &Config) -> Listing {
    let store = LocalStore::new(&cfg.cache_dir);
    let (done, incomplete) = store.list();
    let artifacts = done
        .into_iter()
        .map(|a| ArtifactInfo {
            recipe: a.inputs().map(|i| i.recipe).unwrap_or_else(|| "?".into()),
            size: tree_size(&a.tree()),
            artifact: a,
        })
        .collect();
    Listing { artifacts, incomplete, total_size: tree_size(store.root()), root: store.root().to_path_buf() }
}

/// Every artifact re-hashed against its manifest: the damaged ones, with what is wrong.
pub fn cache_verify(cfg: &Config) -> (usize, Vec<(Artifact, CacheError)>) {
    let store = LocalStore::new(&cfg.cache_dir);
    let (done, _) = store.list();
    let count = done.len();
    let damaged = done.into_iter().filter_map(|a| store.verify(&a).err().map(|e| (a, e))).collect();
    (count, damaged)
}

/// What `cache_gc` removes besides incomplete entries.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcRequest {
    /// Artifacts whose files no longer match their manifest.
    pub damaged: bool,
    /// Artifacts no recipe of any stack last built or used.
    pub unused: bool,
}

/// Removes incomplete entries and what `req` asks for; returns (entries removed, bytes freed).
pub fn cache_gc(cfg: &Config, req: GcRequest) -> Result<(usize, u64), CacheError> {
    let store = LocalStore::new(&cfg.cache_dir);
    let (done, partial) = store.list();
    let mut freed = 0;
    let mut removed = 0;
    for p in &partial {
        freed += tree_size(p);
        store.remove_entry(p)?;
        removed += 1;
    }
    let in_use = if req.unused { crate::history::keys_in_use(&cfg.state_dir) } else { Default::default() };
    for a in &done {
        let drop = (req.damaged && store.verify(a).is_err()) || (req.unused && !in_use.contains(a.key.as_str()));
        if drop {
            let _lock = store.lock(&a.key)?;
            freed += tree_size(&a.dir);
            store.remove_entry(&a.dir)?;
            removed += 1;
        }
    }
    Ok((removed, freed))
}

/// One recipe's work dir, removed or kept.
pub struct Cleaned {
    pub recipe: String,
    pub dir: PathBuf,
    /// Bytes freed; `None` when the dir was kept (its build has not finished).
    pub freed: Option<u64>,
}

/// Removes the work dirs of recipes whose artifact is stored (with `all`, every work dir).
pub fn clean(cfg: &Config, stack: &Stack, all: bool) -> anyhow::Result<Vec<Cleaned>> {
    let mut out = Vec::new();
    for (name, recipe) in &stack.recipes {
        let wd = WorkDir::new(&cfg.work_dir, &stack.name, name);
        if !wd.root.exists() {
            continue;
        }
        let finished = wd.state().is_some_and(|s| s.stored);
        let source_only = recipe.is_source_only();
        let freed = if finished || all || (source_only && wd.state().is_none()) {
            let size = tree_size(&wd.root);
            crate::fsutil::remove_dir_all_if_exists(&wd.root)
                .map_err(|e| anyhow::Error::new(e).context(format!("cannot remove {}", wd.root.display())))?;
            Some(size)
        } else {
            None
        };
        out.push(Cleaned { recipe: name.clone(), dir: wd.root, freed });
    }
    Ok(out)
}
