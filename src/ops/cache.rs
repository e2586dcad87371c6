//! `cache_list`, `cache_verify`, `cache_gc` (the local artifact store) and `clean` (work dirs).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use crate::cache::{Artifact, CacheError, LocalStore};
use crate::config::Config;
use crate::fsutil::tree_size;
use crate::index::{IndexError, IndexProblem};
use crate::key::CacheKey;
use crate::layout::{WorkDir, WorkHolder};
use crate::recipe::Stack;
use crate::source::download::{self, DownloadProblem};
use crate::source::git;

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

/// What `cache verify` found: everything the engine reads from its own cache re-hashed in full
/// (artifacts against their manifests, downloads against the sha256 that names them, published
/// wheels against the index state), and every leftover of an interrupted operation.
#[derive(Default)]
pub struct VerifyReport {
    pub artifacts: usize,
    /// Artifacts whose files no longer match their manifest (an in-place edit of a hard-linked
    /// prefix file is one: the file is the cache's).
    pub damaged: Vec<(Artifact, CacheError)>,
    pub downloads: usize,
    pub bad_downloads: Vec<DownloadProblem>,
    pub published: usize,
    pub index_problems: Vec<IndexProblem>,
    /// Temp files of publishes killed before their rename, in the index or a stack's own index.
    pub index_leftovers: Vec<PathBuf>,
    /// Artifact entries without a completion marker (a store killed after its rename).
    pub incomplete: Vec<PathBuf>,
    /// Temp dirs of killed stores and clones (their process is gone).
    pub leftovers: Vec<PathBuf>,
    /// Unfinished downloads: resumable, not damage (listed, not failed).
    pub partial_downloads: Vec<PathBuf>,
}

impl VerifyReport {
    /// Whether anything needs repair (`cache gc`, a rebuild).
    pub fn has_problems(&self) -> bool {
        !(self.damaged.is_empty()
            && self.bad_downloads.is_empty()
            && self.index_problems.is_empty()
            && self.incomplete.is_empty()
            && self.leftovers.is_empty()
            && self.index_leftovers.is_empty())
    }
}

/// What killed runs left in the cache and state dirs: `cache verify` lists it, `cache gc`
/// removes it.
fn leftovers(cfg: &Config, store: &LocalStore) -> Vec<std::path::PathBuf> {
    let mut v = store.stale_temps();
    v.extend(git::stale_temps(cfg));
    v.extend(crate::cache::stale_transfers(&cfg.cache_dir));
    v.extend(crate::report::status::stale_temps(&cfg.state_dir));
    v
}

pub fn cache_verify(cfg: &Config) -> Result<VerifyReport, IndexError> {
    let store = LocalStore::new(&cfg.cache_dir);
    let (done, incomplete) = store.list();
    let artifacts = done.len();
    let damaged = done.into_iter().filter_map(|a| store.verify(&a).err().map(|e| (a, e))).collect();
    let (downloads, bad_downloads) = download::verify_cache(cfg);
    let index = crate::index::verify(&cfg.index_dir())?;
    let leftovers = leftovers(cfg, &store);
    Ok(VerifyReport {
        artifacts,
        damaged,
        downloads,
        bad_downloads,
        published: index.checked,
        index_problems: index.problems,
        index_leftovers: index.leftovers,
        incomplete,
        leftovers,
        partial_downloads: download::stale_parts(cfg, Duration::ZERO).into_iter().map(|(p, _)| p).collect(),
    })
}

/// What `cache_gc` removes besides leftovers (incomplete entries, temp dirs of killed stores and
/// clones, unfinished downloads older than [`download::STALE_PART_AGE`], temp files in the index).
#[derive(Debug, Clone, Copy, Default)]
pub struct GcRequest {
    /// Artifacts whose files no longer match their manifest, and downloads whose content no
    /// longer matches their sha256.
    pub damaged: bool,
    /// Artifacts no recipe of any stack last built or used.
    pub unused: bool,
}

/// Removes leftovers and what `req` asks for; returns (entries removed, bytes freed).
pub fn cache_gc(cfg: &Config, req: GcRequest) -> anyhow::Result<(usize, u64)> {
    let store = LocalStore::new(&cfg.cache_dir);
    let (done, partial) = store.list();
    let mut freed = 0;
    let mut removed = 0;
    for p in &partial {
        // A store holds the key's lock from its rename to its marker: wait for it, then look again.
        let key = CacheKey(p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        let _lock = store.lock(&key)?;
        if store.get(&key).is_some() {
            continue;
        }
        freed += tree_size(p);
        store.remove_entry(p)?;
        removed += 1;
    }
    let stale = leftovers(cfg, &store);
    for p in &stale {
        freed += tree_size(p);
        let gone = if p.is_dir() { crate::fsutil::remove_dir_all_if_exists(p) } else { std::fs::remove_file(p) };
        gone.with_context(|| format!("cannot remove {}", p.display()))?;
        removed += 1;
    }
    for (part, size) in download::stale_parts(cfg, download::STALE_PART_AGE) {
        download::remove_part(&part).with_context(|| format!("cannot remove {}", part.display()))?;
        freed += size;
        removed += 1;
    }
    let (n, bytes) = crate::index::remove_temp_files(&cfg.index_dir())?;
    removed += n;
    freed += bytes;
    if req.damaged {
        for bad in download::verify_cache(cfg).1 {
            freed += download::remove_damaged(&bad).with_context(|| format!("cannot remove {}", bad.path.display()))?;
            removed += 1;
        }
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
    /// Bytes freed; `None` when the dir was kept.
    pub freed: Option<u64>,
    /// Why it was kept when a running build holds it (the dir's lock), else its build has not
    /// finished.
    pub held_by: Option<Option<WorkHolder>>,
}

/// Removes the work dirs of recipes whose artifact is stored (with `all`, every work dir),
/// except those a running build holds: each is removed under its lock, so a build never loses
/// the dir it works in.
pub fn clean(cfg: &Config, stack: &Stack, all: bool) -> anyhow::Result<Vec<Cleaned>> {
    let mut out = Vec::new();
    let me = WorkHolder::me("clean", &stack.name);
    for (name, recipe) in &stack.recipes {
        let wd = WorkDir::new(&cfg.work_dir, &stack.name, name);
        if !wd.root.exists() {
            continue;
        }
        let finished = wd.state().is_some_and(|s| s.stored);
        let source_only = recipe.is_source_only();
        let mut held_by = None;
        let freed = if finished || all || (source_only && wd.state().is_none()) {
            let cannot =
                |e: std::io::Error| anyhow::Error::new(e).context(format!("cannot remove {}", wd.root.display()));
            match wd.lock(&me, None).map_err(cannot)? {
                Err(holder) => {
                    held_by = Some(holder);
                    None
                }
                Ok(_lock) => {
                    let size = tree_size(&wd.root);
                    crate::fsutil::remove_dir_all_if_exists(&wd.root).map_err(cannot)?;
                    Some(size)
                }
            }
        } else {
            None
        };
        out.push(Cleaned { recipe: name.clone(), dir: wd.root, freed, held_by });
    }
    Ok(out)
}

/// A key pair made by [`cache_keygen`].
pub struct NewKey {
    /// Where the secret key was written (mode 0600).
    pub secret_file: PathBuf,
    /// `<name>:<base64>`, for other machines' `trusted-keys`.
    pub public: String,
}

/// Makes the key pair that signs this machine's uploads to a shared cache: the secret key goes
/// to `signing-key` (default `<state-dir>/cache-signing.key`), never over an existing one.
pub fn cache_keygen(cfg: &Config, name: Option<&str>) -> anyhow::Result<NewKey> {
    let name = match name {
        Some(n) => n.to_string(),
        None => {
            let host =
                std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()).filter(|h| !h.is_empty());
            format!("rocmforge-{}-1", host.unwrap_or_else(|| "host".into()))
        }
    };
    let key = crate::cache::trust::SecretKey::generate(&name)?;
    // The name must parse back as the public key's name.
    crate::cache::trust::PublicKey::parse(&key.public().to_string(), "--name")?;
    let secret_file = cfg.remote.signing_key_file(&cfg.state_dir);
    key.write_new(&secret_file)?;
    Ok(NewKey { secret_file, public: key.public().to_string() })
}

/// What `cache push` did.
#[derive(Default)]
pub struct PushReport {
    /// Recipe, key, uploaded size.
    pub uploaded: Vec<(String, CacheKey, u64)>,
    /// Recipe and key of artifacts the server had.
    pub present: Vec<(String, CacheKey)>,
    /// Recipe and why its artifact was not pushed.
    pub failed: Vec<(String, String)>,
}

/// Uploads to the shared cache (`cache-url`) the local artifacts of `recipes` (all when empty)
/// that it lacks: those built while the server was down, or before `cache-url` was set.
pub fn cache_push(
    cfg: &Config,
    recipes: &[String],
    progress: std::sync::Arc<dyn crate::progress::Progress>,
) -> anyhow::Result<PushReport> {
    let Some(url) = &cfg.remote.url else {
        anyhow::bail!("no shared cache to push to: set `cache-url` in the config, ROCMFORGE_CACHE_URL or --cache-url");
    };
    let store = crate::cache::LayeredStore::open(cfg, url, LocalStore::new(&cfg.cache_dir), progress)?;
    // (Not `cache_list`: it measures every artifact's size, which pushing does not need.)
    let recipe_of = |a: &Artifact| a.inputs().map(|i| i.recipe).unwrap_or_else(|| "?".into());
    let mut listed: Vec<(String, Artifact)> = store.local().list().0.into_iter().map(|a| (recipe_of(&a), a)).collect();
    if !recipes.is_empty() {
        let missing: Vec<&str> =
            recipes.iter().filter(|r| !listed.iter().any(|(name, _)| name == *r)).map(String::as_str).collect();
        if !missing.is_empty() {
            anyhow::bail!(
                "no artifact of {} in the local cache {} (`rocmforge cache list` shows what is there)",
                missing.join(", "),
                cfg.cache_dir.display()
            );
        }
        listed.retain(|(name, _)| recipes.contains(name));
    }
    store.can_push()?;
    let mut report = PushReport::default();
    for (recipe, artifact) in listed {
        let key = artifact.key.clone();
        let _lock = store.local().lock(&key)?;
        match store.push(&artifact) {
            Ok(Some(size)) => report.uploaded.push((recipe, key, size)),
            Ok(None) => report.present.push((recipe, key)),
            Err(e @ crate::cache::PushError::Stop(_)) => return Err(e.into()),
            Err(e) => report.failed.push((recipe, e.to_string())),
        }
    }
    Ok(report)
}
