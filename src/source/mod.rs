//! Sources: getting a recipe's pinned source into the cache (`fetch`), laying a pristine tree
//! out (`checkout`), and a patched work tree that survives crashes (`prepare`).
//!
//! Cache layout under `cache_dir`: `git/<name>-<hash>.git` (bare mirrors, one per URL),
//! `downloads/<sha256>` (verified files; `.part` while downloading). Everything is verified
//! (commit id, sha256) before anything is built from it, and again whenever it is read from the
//! cache: a cached download is re-hashed on every fetch (an altered one is fetched again), a
//! mirror's objects are checked against their ids by libgit2 on every read (see `git`).

pub mod archive;
pub mod download;
pub mod git;
pub mod http;
pub mod index_page;

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::patch::{self, PatchError};
use crate::progress::Progress;
use crate::recipe::{Recipe, RecipeTree, SourceSpec};

pub use archive::ArchiveError;
pub use download::DownloadError;
pub use git::GitError;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Download(#[from] DownloadError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    Patch(#[from] PatchError),
    #[error("recipe `{recipe}` is not pinned (a git source without `rev` or a url source without `sha256`): `rocmforge build` pins it, or run `rocmforge lock`")]
    Unlocked { recipe: String },
    #[error("recipe `{recipe}` takes its source from `{from}`: prepare `{from}` and use its tree")]
    FromOther { recipe: String, from: String },
    #[error("patch `{name}` of recipe `{recipe}` is missing from the recipe tree (expected `{path}`)")]
    PatchMissing { recipe: String, name: String, path: String },
    #[error("recipe `{recipe}`: its source `{source_url}` has no directory `{subdir}` (the recipe's `subdir`){hint}")]
    NoSubdir { recipe: String, source_url: String, subdir: String, hint: String },
    #[error(
        "recipe `{recipe}`: its archive `{source_url}` leaves nothing after `strip-components = {strip}`: lower it"
    )]
    EmptyTree { recipe: String, source_url: String, strip: u32 },
    #[error("`{path}`")]
    Io { path: PathBuf, source: std::io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SourceError + '_ {
    move |source| SourceError::Io { path: path.to_path_buf(), source }
}

/// What a source is, exactly: the one spelling of a source in cache keys, prepared-tree markers
/// and `fetch`'s report. Known from the recipe alone (`pinned`, no fetch needed: pins are in the
/// recipe or the lock file) or, with submodule commits, from a fetch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SourceIdentity {
    /// The commit, and each submodule's `(path, commit)` (empty when known from the recipe only).
    Git {
        commit: String,
        submodules: Vec<(String, String)>,
    },
    /// A git source with a tag but no commit yet: nothing can be built from it.
    Unlocked {
        tag: String,
    },
    Sha256 {
        sha256: String,
    },
    /// The tree of another recipe (before that recipe's key is known).
    From {
        recipe: String,
    },
    /// The tree of another recipe, identified by that recipe's cache key.
    Tree {
        recipe: String,
        key: String,
    },
    /// Provided by an installed ROCm: the component's version and the sha256 of the files taken
    /// (`installation::Decision::Take`), never where they lie.
    Installed {
        identity: String,
    },
    None,
}

impl SourceIdentity {
    /// The identity a recipe pins, known without fetching.
    pub fn pinned(recipe: &Recipe) -> SourceIdentity {
        match &recipe.source {
            SourceSpec::Git { rev: Some(rev), .. } => {
                SourceIdentity::Git { commit: rev.clone(), submodules: Vec::new() }
            }
            SourceSpec::Git { rev: None, tag, .. } => SourceIdentity::Unlocked { tag: tag.clone().unwrap_or_default() },
            SourceSpec::Url { sha256: Some(sha256), .. } => SourceIdentity::Sha256 { sha256: sha256.clone() },
            SourceSpec::Url { sha256: None, .. } => SourceIdentity::Unlocked { tag: String::new() },
            SourceSpec::From { recipe, .. } => SourceIdentity::From { recipe: recipe.clone() },
            SourceSpec::None => SourceIdentity::None,
        }
    }
}

/// One stable line: `git:<commit>[ <path>=<commit>...]`, `unlocked:<tag>`, `sha256:<hex>`,
/// `from:<recipe>`, `tree:<recipe>@<key>`, `installed:<version>@sha256:<files>`, `none`.
impl std::fmt::Display for SourceIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceIdentity::Git { commit, submodules } => {
                write!(f, "git:{commit}")?;
                for (p, c) in submodules {
                    write!(f, " {p}={c}")?;
                }
                Ok(())
            }
            SourceIdentity::Unlocked { tag } => write!(f, "unlocked:{tag}"),
            SourceIdentity::Sha256 { sha256 } => write!(f, "sha256:{sha256}"),
            SourceIdentity::From { recipe } => write!(f, "from:{recipe}"),
            SourceIdentity::Tree { recipe, key } => write!(f, "tree:{recipe}@{key}"),
            SourceIdentity::Installed { identity } => write!(f, "installed:{identity}"),
            SourceIdentity::None => f.write_str("none"),
        }
    }
}

/// Where a fetched source is in the cache.
#[derive(Debug, Clone)]
pub enum FetchedKind {
    Git(git::FetchedGit),
    /// A verified download (`downloads/<sha256>`), with how to lay it out.
    File {
        url: String,
        path: PathBuf,
        strip_components: u32,
    },
    From {
        recipe: String,
    },
    None,
}

/// A source present in the cache and verified.
#[derive(Debug, Clone)]
pub struct FetchedSource {
    pub recipe: String,
    pub identity: SourceIdentity,
    pub kind: FetchedKind,
}

/// Brings `recipe`'s source into the cache (mirror or download) and verifies it. Offline
/// (`cfg.offline`), uses only the cache and says what is missing.
pub fn fetch(cfg: &Config, recipe: &Recipe, progress: &dyn Progress) -> Result<FetchedSource, SourceError> {
    let (identity, kind) = match &recipe.source {
        SourceSpec::Git { url, tag, rev, submodules, .. } => {
            let Some(rev) = rev else { return Err(SourceError::Unlocked { recipe: recipe.name.clone() }) };
            let g = git::fetch(cfg, &recipe.name, url, tag.as_deref(), rev, *submodules, progress)?;
            let subs = g.submodules.iter().map(|s| (s.path.clone(), s.commit.clone())).collect();
            (SourceIdentity::Git { commit: g.commit.clone(), submodules: subs }, FetchedKind::Git(g))
        }
        SourceSpec::Url { url, sha256, strip_components, .. } => {
            let Some(sha256) = sha256 else { return Err(SourceError::Unlocked { recipe: recipe.name.clone() }) };
            let path = download::fetch(cfg, &recipe.name, url, sha256, progress)?;
            (
                SourceIdentity::Sha256 { sha256: sha256.clone() },
                FetchedKind::File { url: url.clone(), path, strip_components: *strip_components },
            )
        }
        SourceSpec::From { recipe: other, .. } => {
            (SourceIdentity::From { recipe: other.clone() }, FetchedKind::From { recipe: other.clone() })
        }
        SourceSpec::None => (SourceIdentity::None, FetchedKind::None),
    };
    Ok(FetchedSource { recipe: recipe.name.clone(), identity, kind })
}

/// Lays the pristine source out at `dest` (which must not exist, or be empty).
pub fn checkout(recipe: &Recipe, fetched: &FetchedSource, dest: &Path) -> Result<(), SourceError> {
    match &fetched.kind {
        FetchedKind::Git(g) => git::checkout(g, dest)?,
        FetchedKind::File { url, path, strip_components } => {
            std::fs::create_dir_all(dest).map_err(io_err(dest))?;
            match archive::detect(path, url)? {
                Some(format) => archive::extract(path, format, dest, *strip_components)?,
                None => {
                    let name = crate::recipe::url_file_name(url);
                    std::fs::copy(path, dest.join(&name)).map_err(io_err(&dest.join(&name)))?;
                }
            }
        }
        FetchedKind::From { recipe: from } => {
            return Err(SourceError::FromOther { recipe: recipe.name.clone(), from: from.clone() })
        }
        FetchedKind::None => std::fs::create_dir_all(dest).map_err(io_err(dest))?,
    }
    Ok(())
}

/// A recipe's patch series: `(name, bytes)` in order, read from the recipe tree.
pub fn patch_series(tree: &RecipeTree, recipe: &Recipe) -> Result<Vec<(String, Vec<u8>)>, SourceError> {
    recipe
        .patches
        .iter()
        .map(|p| match tree.get(&p.path) {
            Some(b) => Ok((p.name.clone(), b.to_vec())),
            None => Err(SourceError::PatchMissing {
                recipe: recipe.name.clone(),
                name: p.name.clone(),
                path: tree.display_path(&p.path),
            }),
        })
        .collect()
}

/// `(patch name, sha256)` of a recipe's series in order, as cache keys and prepared-tree markers
/// record them (`missing` for a file the tree lacks: `recipes check` reports those).
pub fn patch_digests(tree: &RecipeTree, recipe: &Recipe) -> Vec<(String, String)> {
    recipe
        .patches
        .iter()
        .map(|p| (p.name.clone(), tree.get(&p.path).map(crate::digest::sha256_hex).unwrap_or_else(|| "missing".into())))
        .collect()
}

/// Everything `prepare` would refuse, found without touching a work tree: the source fetched
/// and verified; an archive unpacked into a scratch dir (every entry checked, and something left
/// after `strip-components`); the recipe's `subdir` present; the patch series checked. `From`
/// recipes are checked through the recipe they name.
pub fn preflight(
    cfg: &Config,
    tree: &RecipeTree,
    recipe: &Recipe,
    progress: &dyn Progress,
) -> Result<SourceIdentity, SourceError> {
    let fetched = fetch(cfg, recipe, progress)?;
    let patches = patch_series(tree, recipe)?;
    let (url, subdir) = match &recipe.source {
        SourceSpec::Git { url, subdir, .. } | SourceSpec::Url { url, subdir, .. } => (url.as_str(), subdir.as_deref()),
        _ => return Ok(fetched.identity),
    };
    let no_subdir = |subdir: &str, hint: String| SourceError::NoSubdir {
        recipe: recipe.name.clone(),
        source_url: url.to_string(),
        subdir: subdir.to_string(),
        hint,
    };
    if !patches.is_empty() {
        progress.message(&recipe.name, &format!("checking {} patch(es)", patches.len()));
    }
    match &fetched.kind {
        FetchedKind::Git(g) => {
            let reader = git::GitTreeReader::open(g)?;
            if let Some(sub) = subdir.filter(|s| !reader.has_dir(s)) {
                return Err(no_subdir(sub, format!(" at commit {}", g.commit)));
            }
            patch::check_series_with(&reader, &patches)?;
        }
        FetchedKind::File { path, url: file_url, strip_components } => {
            // A plain file (not an archive) with no patch and no subdir needs no scratch copy:
            // there is nothing in it to check beyond its digest, already verified.
            if patches.is_empty() && subdir.is_none() && archive::detect(path, file_url)?.is_none() {
                return Ok(fetched.identity);
            }
            let scratch_parent = crate::layout::scratch_dir(&cfg.work_dir);
            std::fs::create_dir_all(&scratch_parent).map_err(io_err(&scratch_parent))?;
            let scratch = tempfile::tempdir_in(&scratch_parent).map_err(io_err(&scratch_parent))?;
            let dest = scratch.path().join("src");
            checkout(recipe, &fetched, &dest)?;
            let empty = std::fs::read_dir(&dest).map_err(io_err(&dest))?.next().is_none();
            if empty {
                return Err(SourceError::EmptyTree {
                    recipe: recipe.name.clone(),
                    source_url: url.to_string(),
                    strip: *strip_components,
                });
            }
            if let Some(sub) = subdir.filter(|s| !dest.join(s).is_dir()) {
                return Err(no_subdir(sub, String::new()));
            }
            patch::check_series(&dest, &patches)?;
        }
        FetchedKind::From { .. } | FetchedKind::None => {}
    }
    Ok(fetched.identity)
}

/// What `prepare` records beside a finished work tree.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedMarker {
    pub format: u32,
    pub source: String,
    /// `(patch name, sha256)` in the order applied.
    pub patches: Vec<(String, String)>,
}

const MARKER_FORMAT: u32 = 1;

/// The marker file of the work tree `dest`: beside it, so nothing in the tree changes.
pub fn marker_path(dest: &Path) -> PathBuf {
    let name = dest.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "src".into());
    dest.with_file_name(format!("{name}.prepared.json"))
}

/// The marker `prepare` writes for this recipe and series.
pub fn expected_marker(recipe: &Recipe, patches: &[(String, Vec<u8>)]) -> Result<PreparedMarker, SourceError> {
    let source = match SourceIdentity::pinned(recipe) {
        SourceIdentity::Unlocked { .. } => return Err(SourceError::Unlocked { recipe: recipe.name.clone() }),
        id => id.to_string(),
    };
    Ok(PreparedMarker {
        format: MARKER_FORMAT,
        source,
        patches: patches.iter().map(|(n, b)| (n.clone(), crate::digest::sha256_hex(b))).collect(),
    })
}

/// Whether `dest` holds a complete prepared tree for exactly this recipe and series.
pub fn is_prepared(dest: &Path, expected: &PreparedMarker) -> bool {
    dest.is_dir()
        && std::fs::read(marker_path(dest))
            .ok()
            .and_then(|b| serde_json::from_slice::<PreparedMarker>(&b).ok())
            .is_some_and(|m| &m == expected)
}

/// The work tree of a recipe: its work dir's `src/`.
pub fn work_tree_dir(cfg: &Config, stack: &str, recipe: &str) -> PathBuf {
    crate::layout::WorkDir::new(&cfg.work_dir, stack, recipe).src()
}

/// Fetch + pristine checkout + patch series at `dest`, with a marker written last. A complete
/// tree for the same source and patches is trusted as is; anything else (no marker, another
/// source, other patches, a crash half-way) is removed and recreated: a patch is never applied
/// twice.
pub fn prepare(
    cfg: &Config,
    tree: &RecipeTree,
    recipe: &Recipe,
    dest: &Path,
    progress: &dyn Progress,
) -> Result<PathBuf, SourceError> {
    if let SourceSpec::From { recipe: from, .. } = &recipe.source {
        return Err(SourceError::FromOther { recipe: recipe.name.clone(), from: from.clone() });
    }
    let patches = patch_series(tree, recipe)?;
    let expected = expected_marker(recipe, &patches)?;
    if is_prepared(dest, &expected) {
        progress.message(&recipe.name, &format!("source tree ready at {}", dest.display()));
        return Ok(dest.to_path_buf());
    }
    let fetched = fetch(cfg, recipe, progress)?;
    crate::fault::point("fetch", &recipe.name);
    let marker = marker_path(dest);
    remove_path(&marker)?;
    remove_path(dest)?;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    progress.message(&recipe.name, &format!("checking out into {}", dest.display()));
    checkout(recipe, &fetched, dest)?;
    crate::fault::point("patch", &recipe.name);
    if !patches.is_empty() {
        progress.message(&recipe.name, &format!("applying {} patch(es)", patches.len()));
        patch::apply_series(dest, &patches)?;
    }
    let json = serde_json::to_vec_pretty(&expected).expect("marker serialises");
    crate::fsutil::write_atomic(&marker, &json).map_err(io_err(&marker))?;
    Ok(dest.to_path_buf())
}

fn remove_path(p: &Path) -> Result<(), SourceError> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).map_err(io_err(p)),
        Ok(_) => std::fs::remove_file(p).map_err(io_err(p)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(p)(e)),
    }
}

/// An exclusive lock on `path` (created if needed), held until the file is dropped.
pub(crate) fn lock_file(path: &Path) -> std::io::Result<File> {
    use fs4::fs_std::FileExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    f.lock_exclusive()?;
    Ok(f)
}

/// Whether another process holds the lock at `path` (a missing lock file is a free lock).
pub(crate) fn is_locked(path: &Path) -> bool {
    use fs4::fs_std::FileExt;
    let Ok(f) = std::fs::OpenOptions::new().write(true).open(path) else { return false };
    match f.try_lock_exclusive() {
        Ok(()) => {
            let _ = FileExt::unlock(&f);
            false
        }
        Err(_) => true,
    }
}
