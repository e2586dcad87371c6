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
//!
//! This module is the file's format, reading, writing and applying; resolving tags to commits
//! (the network) is the `lock` operation, in src/ops/lock.rs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{RecipeTree, SourceSpec, Stack};

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
pub enum LockFileError {
    #[error("cannot read lock file `{path}`")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid lock file `{path}`: {message}; delete it and run `rocmforge lock` again")]
    Invalid { path: PathBuf, message: String },
    #[error("cannot write lock file `{path}`")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Where the lock of `stack` lives for this tree: beside the recipes of a directory tree, under
/// `state_dir` (the configured state directory) for the embedded recipes.
pub fn path(tree: &RecipeTree, state_dir: &Path, stack: &str) -> PathBuf {
    match tree.root() {
        Some(root) => root.join("recipes").join(stack).join("rocmforge.lock"),
        None => state_dir.join("locks").join(format!("{stack}.lock")),
    }
}

/// Reads a lock file; a missing file is an empty lock.
pub fn read(path: &Path) -> Result<LockFile, LockFileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LockFile::default()),
        Err(source) => return Err(LockFileError::Read { path: path.to_path_buf(), source }),
    };
    toml::from_str(&text)
        .map_err(|e| LockFileError::Invalid { path: path.to_path_buf(), message: e.message().trim_end().to_string() })
}

/// Writes a lock file atomically, pins sorted.
pub fn write(path: &Path, lock: &LockFile) -> Result<(), LockFileError> {
    let mut lock = lock.clone();
    lock.pins.sort();
    lock.pins.dedup();
    let mut text = String::from("# Written by `rocmforge lock`: the commits unlocked git recipes' tags resolved to.\n");
    text.push_str(&toml::to_string(&lock).expect("lock serialises"));
    crate::fsutil::write_atomic(path, text.as_bytes())
        .map_err(|source| LockFileError::Write { path: path.to_path_buf(), source })
}

/// The (url, tag) of an unlocked git recipe with a tag: what `lock` resolves and a pin pins.
pub fn unlocked_tag(spec: &SourceSpec) -> Option<(&str, &str)> {
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

/// Applies the stack's lock file (if any) to a freshly loaded stack; `state_dir` as for [`path`].
pub fn apply(stack: &mut Stack, tree: &RecipeTree, state_dir: &Path) -> Result<(), LockFileError> {
    let lock = read(&path(tree, state_dir, &stack.name))?;
    apply_pins(stack, &lock);
    Ok(())
}
