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
//! A url source without `sha256` but with an `index` (a PEP 503 index that links the file with
//! `#sha256=`, as download.pytorch.org does) is unlocked too; `lock` reads the digest from the
//! index page and records it, and loading applies it the same way:
//!
//! ```toml
//! [[digest]]
//! recipe = "torch"
//! url = "https://download.pytorch.org/whl/rocm5.2/torch-1.13.1%2Brocm5.2-cp310-cp310-linux_x86_64.whl"
//! sha256 = "64 hex"
//! page = "https://download.pytorch.org/whl/rocm5.2/torch/"   # where it was read
//! ```
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

/// The sha256 of an unlocked url source, as its index's page gave it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Digest {
    pub recipe: String,
    pub url: String,
    pub sha256: String,
    /// The index page the digest was read from.
    pub page: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    #[serde(default, rename = "pin")]
    pub pins: Vec<Pin>,
    #[serde(default, rename = "digest", skip_serializing_if = "Vec::is_empty")]
    pub digests: Vec<Digest>,
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
    lock.digests.sort();
    lock.digests.dedup();
    let mut text = String::from("# Written by `rocmforge lock`: the commits unlocked git recipes' tags resolved to.\n");
    if !lock.digests.is_empty() {
        text.push_str("# Digests: the sha256 of url sources without one, as their index's page links them.\n");
    }
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

/// The url of a url source whose sha256 `lock` reads from `index`, and that index.
pub fn unlocked_digest(spec: &SourceSpec) -> Option<(&str, &str)> {
    match spec {
        SourceSpec::Url { url, sha256, index: Some(index), .. } if sha256.is_empty() => Some((url, index)),
        _ => None,
    }
}

/// Whether a digest still applies (its recipe is an unlocked url source of the same url).
pub fn digest_applies(stack: &Stack, d: &Digest) -> bool {
    stack.recipe(&d.recipe).and_then(|r| unlocked_digest(&r.source)).is_some_and(|(u, _)| u == d.url)
}

/// Gives every unlocked recipe pinned in `lock` its rev, or its sha256.
pub fn apply_pins(stack: &mut Stack, lock: &LockFile) {
    for d in &lock.digests {
        if !digest_applies(stack, d) {
            continue;
        }
        if let Some(r) = stack.recipes.get_mut(&d.recipe) {
            if let SourceSpec::Url { sha256, .. } = &mut r.source {
                *sha256 = d.sha256.clone();
            }
        }
    }
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
