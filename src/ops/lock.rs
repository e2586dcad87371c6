//! `lock`: pins a stack's unpinned recipes (over the network) and rewrites the stack's lock
//! file, whose format and use are [`crate::recipe::lockfile`]'s: an unlocked git recipe's tag is
//! resolved to its commit, an unpinned url recipe's digest is read from its index's page (`index`) or its download
//! is hashed. [`pin_closure`] is the
//! same resolver as `build` and `fetch` run it first, as cargo writes Cargo.lock: what is already
//! pinned stays as it is, only what is missing is pinned, and `--locked` refuses to pin anything.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::Config;
use crate::graph::{BuildGraph, GraphError};
use crate::progress::Progress;
use crate::recipe::lockfile::{self, LockFile, LockFileError, Pin, Unpinned};
use crate::recipe::{RecipeTree, Stack};
use crate::source::download::DownloadError;
use crate::source::index_page::IndexPageError;
use crate::source::GitError;

/// What to lock.
#[derive(Debug, Clone, Default)]
pub struct LockOptions {
    /// Recipes to lock (empty: every unpinned recipe of the stack).
    pub recipes: Vec<String>,
    /// Resolve pinned tags again too (without it, a pinned tag keeps its commit).
    pub update: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("`rocmforge lock` resolves tags over the network; it cannot run with --offline")]
    Offline,
    #[error("unknown recipe `{0}` in stack")]
    UnknownRecipe(String),
    #[error("{recipe}: cannot resolve tag `{tag}`")]
    Resolve { recipe: String, tag: String, source: Box<GitError> },
    #[error("{recipe}: cannot read the sha256 of `{url}` from its index")]
    Digest { recipe: String, url: String, source: Box<IndexPageError> },
    #[error("{recipe}: cannot pick a wheel file")]
    Pick { recipe: String, source: Box<IndexPageError> },
    #[error("{recipe}: the wheel `{project}` is picked for the stack's Python, but {file} names none: add `python = \"3.x\"` to [stack]")]
    NoPython { recipe: String, project: String, file: String },
    #[error("{recipe}: cannot download `{url}` to pin its sha256")]
    Download { recipe: String, url: String, source: Box<DownloadError> },
    #[error("{recipe}: not pinned, its download is not what its name says")]
    NotAnArchive { recipe: String, source: Box<crate::source::archive::ArchiveError> },
    #[error(
        "--locked: {} recipe(s) are not pinned and --locked pins nothing new:\n{}\npin them in their recipes (`rev = \"<40 hex>\"`, `sha256 = \"<64 hex>\"`), or run without --locked (or `rocmforge lock`) to record their pins in {}",
        .unpinned.len(),
        .unpinned.iter().map(|(r, why)| format!("  - {r}: {why}")).collect::<Vec<_>>().join("\n"),
        .path.display()
    )]
    Locked { path: PathBuf, unpinned: Vec<(String, String)> },
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    LockFile(#[from] LockFileError),
    #[error(transparent)]
    Config(Box<crate::config::ConfigError>),
}

/// A pinned tag that resolved to another commit on `lock --update`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub recipe: String,
    pub tag: String,
    pub old: String,
    pub new: String,
}

/// What `lock` did: the lock file written and how its pins changed.
#[derive(Debug, Clone, Default)]
pub struct LockReport {
    pub path: PathBuf,
    /// Newly pinned.
    pub added: Vec<Pin>,
    pub moved: Vec<Moved>,
    /// Pins dropped because they no longer apply.
    pub pruned: Vec<Pin>,
    /// Pins kept as they were.
    pub unchanged: usize,
}

/// Pins the stack's unpinned recipes (all, or `opts.recipes`) and rewrites the lock. `stack` is
/// as loaded, without the lock applied. Needs the network: refused offline.
pub fn lock(
    stack: &Stack,
    tree: &RecipeTree,
    cfg: &Config,
    opts: &LockOptions,
    progress: &dyn Progress,
) -> Result<LockReport, LockError> {
    if cfg.offline {
        return Err(LockError::Offline);
    }
    if let Some(n) = opts.recipes.iter().find(|n| stack.recipe(n).is_none()) {
        return Err(LockError::UnknownRecipe(n.clone()));
    }
    let path = lockfile::path(tree, &cfg.state_dir, &stack.name);
    let old = lockfile::read(&path)?;
    let mut report = LockReport { path: path.clone(), ..Default::default() };
    let (kept, pruned): (Vec<Pin>, Vec<Pin>) = old.pins.into_iter().partition(|p| lockfile::pin_applies(stack, p));
    report.pruned = pruned;
    let mut pins: BTreeMap<String, Pin> = kept.into_iter().map(|p| (p.recipe.clone(), p)).collect();
    for (name, r) in &stack.recipes {
        let Some(unpinned) = lockfile::unpinned(&r.source) else { continue };
        let wanted = opts.recipes.is_empty() || opts.recipes.contains(name);
        let existing = pins.get(name).cloned();
        if !wanted || (existing.is_some() && !opts.update) {
            if existing.is_some() {
                report.unchanged += 1;
            }
            continue;
        }
        let pin = resolve(cfg, stack, name, unpinned, progress)?;
        match existing {
            Some(e) if e == pin => report.unchanged += 1,
            Some(e) => match (&pin.tag, e.rev, pin.rev.clone()) {
                (Some(tag), Some(old), Some(new)) => {
                    report.moved.push(Moved { recipe: name.clone(), tag: tag.clone(), old, new })
                }
                // A download whose content changed: the new digest replaces the old one.
                _ => report.added.push(pin.clone()),
            },
            None => report.added.push(pin.clone()),
        }
        pins.insert(name.clone(), pin);
    }
    lockfile::write(&path, &LockFile { pins: pins.into_values().collect() })?;
    Ok(report)
}

/// What [`pin_closure`] did: the stack with every pin applied, and the pins it made.
#[derive(Debug)]
pub struct Pinned {
    pub stack: Stack,
    /// New pins written to the lock file (empty when everything was pinned already).
    pub added: Vec<Pin>,
    pub path: PathBuf,
}

/// Before `build` / `fetch`: applies the stack's lock file, then pins what in the closure of
/// `recipes` is still unpinned (writing the lock file) unless `locked`, which refuses with the
/// list of every unpinned source; and checks that the dirs they write are writable (before
/// pinning, which may fetch into the cache dir: an unusable one is said as such, not as a
/// problem of the first source). `stack` is as loaded, without the lock applied.
pub fn pin_closure(
    stack: &Stack,
    tree: &RecipeTree,
    cfg: &Config,
    recipes: &[String],
    locked: bool,
    progress: &dyn Progress,
) -> Result<Pinned, LockError> {
    if !locked {
        cfg.check_writable().map_err(|e| LockError::Config(Box::new(e)))?;
    }
    let (applied, unpinned, path) = unpinned_in_closure(stack, tree, cfg, recipes)?;
    if unpinned.is_empty() {
        if locked {
            cfg.check_writable().map_err(|e| LockError::Config(Box::new(e)))?;
        }
        return Ok(Pinned { stack: applied, added: Vec::new(), path });
    }
    if locked {
        return Err(LockError::Locked { path, unpinned });
    }
    let opts = LockOptions { recipes: unpinned.into_iter().map(|(n, _)| n).collect(), update: false };
    let report = lock(stack, tree, cfg, &opts, progress)?;
    let mut applied = stack.clone();
    lockfile::apply_pins(&mut applied, &lockfile::read(&path)?, &path);
    Ok(Pinned { stack: applied, added: report.added, path })
}

/// `plan --locked`: refuses, as `build --locked` would, when a source of the closure of
/// `recipes` has no pin (the lock file applied); pins nothing, writes nothing.
pub fn check_locked(stack: &Stack, tree: &RecipeTree, cfg: &Config, recipes: &[String]) -> Result<(), LockError> {
    match unpinned_in_closure(stack, tree, cfg, recipes)? {
        (_, unpinned, _) if unpinned.is_empty() => Ok(()),
        (_, unpinned, path) => Err(LockError::Locked { path, unpinned }),
    }
}

/// `stack` with its lock file applied, its unpinned sources (recipe, what it lacks), the lock file.
type LockedClosure = (Stack, Vec<(String, String)>, PathBuf);

/// `stack` with its lock file applied, the unpinned sources of the closure of `recipes` (recipe,
/// what it lacks), and the lock file's path.
fn unpinned_in_closure(
    stack: &Stack,
    tree: &RecipeTree,
    cfg: &Config,
    recipes: &[String],
) -> Result<LockedClosure, LockError> {
    let path = lockfile::path(tree, &cfg.state_dir, &stack.name);
    let mut applied = stack.clone();
    lockfile::apply_pins(&mut applied, &lockfile::read(&path)?, &path);
    let graph = BuildGraph::closure(&applied, recipes)?;
    let unpinned: Vec<(String, String)> = graph
        .order()
        .into_iter()
        .filter_map(|n| lockfile::unpinned(&applied.recipes[n].source).map(|u| (n.to_string(), u.describe())))
        .collect();
    Ok((applied, unpinned, path))
}

/// The pin of one unpinned source: the commit `tag` of `url` names now, or the sha256 of `url`'s
/// content.
fn resolve(
    cfg: &Config,
    stack: &Stack,
    recipe: &str,
    unpinned: Unpinned<'_>,
    progress: &dyn Progress,
) -> Result<Pin, LockError> {
    match unpinned {
        Unpinned::Wheel { index, project, version } => {
            let python = stack.python.as_deref().ok_or_else(|| LockError::NoPython {
                recipe: recipe.to_string(),
                project: project.to_string(),
                file: stack.file.clone(),
            })?;
            let want = lockfile::WheelAsked { index, project, version, python, glibc: &stack.glibc };
            progress.message(recipe, &format!("picking {project} {version} from {index}"));
            let picked = crate::source::index_page::resolve_wheel(cfg, &want)
                .map_err(|e| LockError::Pick { recipe: recipe.to_string(), source: Box::new(e) })?;
            if let Some(why) = &picked.yanked {
                let why = if why.is_empty() { String::new() } else { format!(" (reason given: {why})") };
                progress.warn(
                    recipe,
                    &format!(
                        "{project} {version}: the only file that fits, `{}`, is yanked on its index page{why}; it is pinned because the recipe names this exact version (PEP 592); ask for another version if the reason applies",
                        picked.url
                    ),
                );
            }
            Ok(Pin::wheel(recipe, &want, &picked))
        }
        Unpinned::Tag { url, tag } => crate::source::git::resolve_tag(cfg, recipe, url, tag, progress)
            .map(|rev| Pin::git(recipe, url, tag, &rev))
            .map_err(|source| LockError::Resolve {
                recipe: recipe.to_string(),
                tag: tag.to_string(),
                source: Box::new(source),
            }),
        Unpinned::Download { url, index: Some(index) } => {
            let file = crate::recipe::url_file_name(url);
            crate::source::index_page::digest_of(cfg, index, &file)
                .map(|(sha256, page)| Pin { page: Some(page), ..Pin::url(recipe, url, &sha256) })
                .map_err(|e| LockError::Digest {
                    recipe: recipe.to_string(),
                    url: url.to_string(),
                    source: Box::new(e),
                })
        }
        Unpinned::Download { url, index: None } => {
            let (sha256, path) =
                crate::source::download::fetch_unpinned(cfg, recipe, url, progress).map_err(|source| {
                    LockError::Download { recipe: recipe.to_string(), url: url.to_string(), source: Box::new(source) }
                })?;
            // An error page served under an archive's name is never pinned.
            crate::source::archive::detect(&path, url)
                .map_err(|e| LockError::NotAnArchive { recipe: recipe.to_string(), source: Box::new(e) })?;
            Ok(Pin::url(recipe, url, &sha256))
        }
    }
}
