//! `lock`: resolves the tags of a stack's unlocked git recipes to commits (over the network) and
//! rewrites the stack's lock file, whose format and use are [`crate::recipe::lockfile`]'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::Config;
use crate::recipe::lockfile::{self, Digest, LockFile, LockFileError, Pin};
use crate::recipe::{RecipeTree, Stack};
use crate::source::index_page::IndexPageError;
use crate::source::GitError;

/// What to lock.
#[derive(Debug, Clone, Default)]
pub struct LockOptions {
    /// Recipes to lock (empty: every unlocked recipe of the stack).
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
    #[error(transparent)]
    LockFile(#[from] LockFileError),
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
    /// Newly pinned: (recipe, tag, rev).
    pub added: Vec<Pin>,
    pub moved: Vec<Moved>,
    /// Pins dropped because they no longer apply.
    pub pruned: Vec<Pin>,
    /// Pins kept as they were.
    pub unchanged: usize,
    /// Newly recorded digests of url sources, read from their index.
    pub digests: Vec<Digest>,
    /// Digests dropped because their recipe no longer has this unlocked url.
    pub pruned_digests: Vec<Digest>,
    /// Recorded digests that the index now gives otherwise (`--update`): (old, new).
    pub digests_changed: Vec<(Digest, Digest)>,
}

/// Resolves the tags of the stack's unlocked recipes (all, or `opts.recipes`) and rewrites the
/// lock. `stack` is as loaded, without the lock applied. Needs the network: refused offline.
pub fn lock(stack: &Stack, tree: &RecipeTree, cfg: &Config, opts: &LockOptions) -> Result<LockReport, LockError> {
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
        let Some((url, tag)) = lockfile::unlocked_tag(&r.source) else { continue };
        let wanted = opts.recipes.is_empty() || opts.recipes.contains(name);
        let existing = pins.get(name).cloned();
        if !wanted || (existing.is_some() && !opts.update) {
            if existing.is_some() {
                report.unchanged += 1;
            }
            continue;
        }
        let rev = resolve(cfg, name, url, tag)?;
        let pin = Pin { recipe: name.clone(), url: url.to_string(), tag: tag.to_string(), rev: rev.clone() };
        match existing {
            Some(e) if e.rev == rev => report.unchanged += 1,
            Some(e) => report.moved.push(Moved { recipe: name.clone(), tag: tag.to_string(), old: e.rev, new: rev }),
            None => report.added.push(pin.clone()),
        }
        pins.insert(name.clone(), pin);
    }
    let digests = lock_digests(stack, cfg, opts, old.digests, &mut report)?;
    lockfile::write(&path, &LockFile { pins: pins.into_values().collect(), digests })?;
    Ok(report)
}

/// The digests of the stack's unlocked url sources: kept, or read from each one's index page
/// (all wanted ones with `--update`).
fn lock_digests(
    stack: &Stack,
    cfg: &Config,
    opts: &LockOptions,
    old: Vec<Digest>,
    report: &mut LockReport,
) -> Result<Vec<Digest>, LockError> {
    let (kept, pruned): (Vec<Digest>, Vec<Digest>) = old.into_iter().partition(|d| lockfile::digest_applies(stack, d));
    report.pruned_digests = pruned;
    let mut digests: BTreeMap<String, Digest> = kept.into_iter().map(|d| (d.recipe.clone(), d)).collect();
    for (name, r) in &stack.recipes {
        let Some((url, index)) = lockfile::unlocked_digest(&r.source) else { continue };
        let wanted = opts.recipes.is_empty() || opts.recipes.contains(name);
        let existing = digests.get(name).cloned();
        if !wanted || (existing.is_some() && !opts.update) {
            if existing.is_some() {
                report.unchanged += 1;
            }
            continue;
        }
        let file = crate::recipe::url_file_name(url);
        let (sha256, page) = crate::source::index_page::digest_of(cfg, index, &file)
            .map_err(|e| LockError::Digest { recipe: name.clone(), url: url.to_string(), source: Box::new(e) })?;
        let d = Digest { recipe: name.clone(), url: url.to_string(), sha256, page };
        match existing {
            Some(e) if e.sha256 == d.sha256 => report.unchanged += 1,
            Some(e) => report.digests_changed.push((e, d.clone())),
            None => report.digests.push(d.clone()),
        }
        digests.insert(name.clone(), d);
    }
    Ok(digests.into_values().collect())
}

/// The commit `tag` of `url` names now.
fn resolve(cfg: &Config, recipe: &str, url: &str, tag: &str) -> Result<String, LockError> {
    crate::source::git::resolve_tag(cfg, url, tag).map_err(|source| LockError::Resolve {
        recipe: recipe.to_string(),
        tag: tag.to_string(),
        source: Box::new(source),
    })
}
