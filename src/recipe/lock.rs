//! Lock files: the commits `rocmforge lock` resolved for unlocked git recipes (a `tag` and no
//! `rev`). A directory tree keeps its lock at `recipes/<stack>/rocmforge.lock`; the embedded
//! recipes keep theirs at `<state-dir>/locks/<stack>.lock`.
//!
//! ```toml
//! [[pin]]
//! recipe = "clr"
//! url = "https://github.com/ROCm/clr.git"
//! tag = "rocm-6.2.4"
//! rev = "0123...40 hex"
//! ```
//!
//! Loading a stack applies its lock: an unlocked recipe whose (url, tag) is pinned gets that rev.
//! A pin whose recipe now has a `rev`, or another url or tag, is ignored (and `lock` prunes it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{RecipeTree, SourceSpec, Stack};
use crate::config::Config;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    pub recipe: String,
    pub url: String,
    pub tag: String,
    pub rev: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    #[serde(default, rename = "pin")]
    pub pins: Vec<Pin>,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot read lock file `{path}`")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid lock file `{path}`: {message}; delete it and run `rocmforge lock` again")]
    Invalid { path: PathBuf, message: String },
    #[error("cannot write lock file `{path}`")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{recipe}: cannot resolve tag `{tag}`")]
    Resolve { recipe: String, tag: String, source: Box<crate::source::GitError> },
    #[error("unknown recipe `{0}` in stack")]
    UnknownRecipe(String),
}

/// Where the lock of `stack` lives for this tree.
pub fn path(tree: &RecipeTree, cfg: &Config, stack: &str) -> PathBuf {
    match tree.root() {
        Some(root) => root.join("recipes").join(stack).join("rocmforge.lock"),
        None => cfg.state_dir.join("locks").join(format!("{stack}.lock")),
    }
}

/// Reads a lock file; a missing file is an empty lock.
pub fn read(path: &Path) -> Result<LockFile, LockError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LockFile::default()),
        Err(source) => return Err(LockError::Read { path: path.to_path_buf(), source }),
    };
    toml::from_str(&text)
        .map_err(|e| LockError::Invalid { path: path.to_path_buf(), message: e.message().trim_end().to_string() })
}

/// Writes a lock file atomically, pins sorted.
pub fn write(path: &Path, lock: &LockFile) -> Result<(), LockError> {
    let mut lock = lock.clone();
    lock.pins.sort();
    lock.pins.dedup();
    let mut text = String::from("# Written by `rocmforge lock`: the commits unlocked git recipes' tags resolved to.\n");
    text.push_str(&toml::to_string(&lock).expect("lock serialises"));
    crate::fsutil::write_atomic(path, text.as_bytes())
        .map_err(|source| LockError::Write { path: path.to_path_buf(), source })
}

/// The (url, tag) of an unlocked git recipe with a tag.
fn unlocked_tag(spec: &SourceSpec) -> Option<(&str, &str)> {
    match spec {
        SourceSpec::Git { url, tag: Some(tag), rev: None, .. } => Some((url, tag)),
        _ => None,
    }
}

/// Whether a pin still applies to the stack (its recipe is unlocked with the same url and tag).
pub fn pin_applies(stack: &Stack, pin: &Pin) -> bool {
    stack.recipe(&pin.recipe).and_then(|r| unlocked_tag(&r.source)).is_some_and(|(u, t)| u == pin.url && t == pin.tag)
}

/// Gives every unlocked recipe pinned in `lock` its rev.
pub fn apply_pins(stack: &mut Stack, lock: &LockFile) {
    for pin in &lock.pins {
        if !pin_applies(stack, pin) {
            continue;
        }
        if let Some(r) = stack.recipes.get_mut(&pin.recipe) {
            if let SourceSpec::Git { rev, .. } = &mut r.source {
                *rev = Some(pin.rev.clone());
            }
        }
    }
}

/// Applies the stack's lock file (if any) to a freshly loaded stack.
pub fn apply(stack: &mut Stack, tree: &RecipeTree, cfg: &Config) -> Result<(), LockError> {
    let lock = read(&path(tree, cfg, &stack.name))?;
    apply_pins(stack, &lock);
    Ok(())
}

/// A pinned tag that resolved to another commit on `lock --update`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub recipe: String,
    pub tag: String,
    pub old: String,
    pub new: String,
}

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
}

/// `rocmforge lock`: resolves the tags of the stack's unlocked recipes (all, or `only`) and
/// rewrites the lock. `stack` is as loaded, without the lock applied. Without `update`, pinned
/// tags are not resolved again.
pub fn lock(
    stack: &Stack,
    tree: &RecipeTree,
    cfg: &Config,
    only: &[String],
    update: bool,
) -> Result<LockReport, LockError> {
    for n in only {
        if stack.recipe(n).is_none() {
            return Err(LockError::UnknownRecipe(n.clone()));
        }
    }
    let path = path(tree, cfg, &stack.name);
    let old = read(&path)?;
    let mut report = LockReport { path: path.clone(), ..Default::default() };
    let mut pins: BTreeMap<String, Pin> = BTreeMap::new();
    for pin in old.pins {
        if pin_applies(stack, &pin) {
            pins.insert(pin.recipe.clone(), pin);
        } else {
            report.pruned.push(pin);
        }
    }
    for (name, r) in &stack.recipes {
        let Some((url, tag)) = unlocked_tag(&r.source) else { continue };
        if !only.is_empty() && !only.contains(name) {
            if pins.contains_key(name) {
                report.unchanged += 1;
            }
            continue;
        }
        let existing = pins.get(name).cloned();
        if existing.is_some() && !update {
            report.unchanged += 1;
            continue;
        }
        let rev = crate::source::git::resolve_tag(cfg, url, tag).map_err(|source| LockError::Resolve {
            recipe: name.clone(),
            tag: tag.to_string(),
            source: Box::new(source),
        })?;
        let pin = Pin { recipe: name.clone(), url: url.to_string(), tag: tag.to_string(), rev: rev.clone() };
        match existing {
            Some(e) if e.rev == rev => report.unchanged += 1,
            Some(e) => report.moved.push(Moved { recipe: name.clone(), tag: tag.to_string(), old: e.rev, new: rev }),
            None => report.added.push(pin.clone()),
        }
        pins.insert(name.clone(), pin);
    }
    write(&path, &LockFile { pins: pins.into_values().collect() })?;
    Ok(report)
}
