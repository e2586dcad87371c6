//! Lock files: the pins `build` (or `lock`) made for unpinned recipes, as Cargo.lock does for
//! crates: the commit an unlocked git recipe's tag (a `tag` and no `rev`) resolved to, and the
//! sha256 of an unpinned url recipe's download (a `url` and no `sha256`). A directory tree keeps
//! its lock at `recipes/<stack>/rocmforge.lock`; the embedded recipes keep theirs at
//! `<state-dir>/locks/<stack>.lock`.
//!
//! ```toml
//! [[pin]]
//! recipe = "clr"
//! url = "https://github.com/ROCm/clr.git"
//! tag = "rocm-6.2.4"
//! rev = "0123...40 hex"
//!
//! [[pin]]
//! recipe = "zlib"
//! url = "https://example.org/zlib-1.3.tar.gz"
//! sha256 = "0123...64 hex"
//! ```
//!
//! Loading a stack applies its lock: an unlocked recipe whose (url, tag) is pinned gets that rev,
//! an unpinned url recipe whose url is pinned gets that sha256. A pin whose recipe now has a
//! `rev`/`sha256`, or another url or tag, is ignored (and `lock` prunes it).
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
//! A prebuilt wheel named by project and version (`[source] index`, `project`, `version`, no
//! `url`) is pinned to the file `lock` picked from the index's page for the stack's Python and
//! glibc floor; the pin records what was asked beside it, and applies only while all of it is
//! unchanged:
//!
//! ```toml
//! [[pin]]
//! recipe = "torch"
//! url = "https://host/whl/files/torch-2.9.1%2Brocm7.10.0-cp312-cp312-manylinux_2_28_x86_64.whl"
//! sha256 = "64 hex"
//! page = "https://host/whl/torch/"
//! index = "https://host/whl/"
//! project = "torch"
//! version = "2.9.1"
//! python = "3.12"
//! glibc = "2.28"
//! ```
//!
//! This module is the file's format, reading, writing and applying; resolving tags to commits
//! (the network) is the `lock` operation, in src/ops/lock.rs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{PinFrom, RecipeTree, SourceSpec, Stack};

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    pub recipe: String,
    pub url: String,
    /// Git: the tag that was resolved, and the commit it named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
    /// Url: the sha256 of the download.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Url with an `index`: the index page whose `#sha256=` link gave the digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
    /// A wheel named by project and version: what was asked (the index, the project, the
    /// version as written, the stack's Python and glibc floor), and `url` is the file picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glibc: Option<String>,
}

impl Pin {
    /// A git pin: `tag` of `url` named `rev`.
    pub fn git(recipe: &str, url: &str, tag: &str, rev: &str) -> Pin {
        Pin { recipe: recipe.into(), url: url.into(), tag: Some(tag.into()), rev: Some(rev.into()), ..Pin::default() }
    }

    /// A url pin: the content of `url` has this sha256.
    pub fn url(recipe: &str, url: &str, sha256: &str) -> Pin {
        Pin { recipe: recipe.into(), url: url.into(), sha256: Some(sha256.into()), ..Pin::default() }
    }

    /// The file `picked` for what `asked`.
    pub fn wheel(recipe: &str, asked: &WheelAsked<'_>, picked: &PickedWheel) -> Pin {
        Pin {
            page: Some(picked.page.clone()),
            index: Some(asked.index.to_string()),
            project: Some(asked.project.to_string()),
            version: Some(asked.version.to_string()),
            python: Some(asked.python.to_string()),
            glibc: Some(asked.glibc.to_string()),
            ..Pin::url(recipe, &picked.url, &picked.sha256)
        }
    }

    /// What it pins, for people: `rocm-6.2.4 -> 0123456789ab` or `sha256 0123456789ab`.
    pub fn describe(&self) -> String {
        match (&self.tag, &self.rev, &self.sha256) {
            (Some(t), Some(r), _) => format!("{t} -> {}", &r[..12.min(r.len())]),
            (_, _, Some(h)) if self.project.is_some() => {
                format!("{} sha256 {}", crate::recipe::url_file_name(&self.url), &h[..12.min(h.len())])
            }
            (_, _, Some(h)) => format!("sha256 {}", &h[..12.min(h.len())]),
            _ => "nothing".into(),
        }
    }
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
    #[error("lock file {}:{line}: {message}; correct it, or remove this pin and run `rocmforge lock` again", path.display())]
    InvalidAt { path: PathBuf, line: usize, message: String },
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
    let invalid = |message: String| LockFileError::Invalid { path: path.to_path_buf(), message };
    let lock: LockFile = toml::from_str(&text).map_err(|e| invalid(e.message().trim_end().to_string()))?;
    for p in &lock.pins {
        let git = p.tag.is_some() && p.rev.is_some() && p.sha256.is_none();
        let url = p.tag.is_none() && p.rev.is_none() && p.sha256.is_some();
        if !git && !url {
            return Err(invalid(format!(
                "pin of `{}` must have either `tag` and `rev` (git) or `sha256` (url)",
                p.recipe
            )));
        }
    }
    check_digests(path, &text)?;
    Ok(lock)
}

/// The pins' `rev` and `sha256` in the only form a build can verify against (40 and 64
/// lowercase hex characters), else the lock file's line: a bad digest would otherwise fail the
/// download, blamed on the server, with the lock file never named.
fn check_digests(path: &Path, text: &str) -> Result<(), LockFileError> {
    #[derive(Deserialize)]
    struct Spans {
        #[serde(default)]
        pin: Vec<PinSpans>,
    }
    #[derive(Deserialize)]
    struct PinSpans {
        recipe: String,
        rev: Option<toml::Spanned<String>>,
        sha256: Option<toml::Spanned<String>>,
    }
    let Ok(spans) = toml::from_str::<Spans>(text) else { return Ok(()) };
    for p in spans.pin {
        for (field, value, len) in [("rev", &p.rev, 40), ("sha256", &p.sha256, 64)] {
            let Some(v) = value else { continue };
            if !super::lower::is_hex(v.get_ref(), len) {
                return Err(LockFileError::InvalidAt {
                    path: path.to_path_buf(),
                    line: text[..v.span().start].matches('\n').count() + 1,
                    message: format!(
                        "pin of `{}`: `{field}` must be {len} lowercase hex characters, got `{}`",
                        p.recipe,
                        v.get_ref()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Writes a lock file atomically, pins sorted.
pub fn write(path: &Path, lock: &LockFile) -> Result<(), LockFileError> {
    let mut lock = lock.clone();
    lock.pins.sort();
    lock.pins.dedup();
    let mut text = String::from(
        "# Written by `rocmforge build` / `rocmforge lock`: the commits unlocked git recipes' tags resolved to,\n# and the sha256 of unpinned url recipes' downloads. Keep it with the recipes.\n",
    );
    text.push_str(&toml::to_string(&lock).expect("lock serialises"));
    crate::fsutil::write_atomic(path, text.as_bytes())
        .map_err(|source| LockFileError::Write { path: path.to_path_buf(), source })
}

/// What a recipe that names a wheel by project and version asks for, on its stack.
#[derive(Debug, Clone, Copy)]
pub struct WheelAsked<'a> {
    pub index: &'a str,
    pub project: &'a str,
    pub version: &'a str,
    /// The stack's Python (`3.12`) and glibc floor (`2.28`).
    pub python: &'a str,
    pub glibc: &'a str,
}

/// The wheel file `lock` picked from an index page for a wheel request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickedWheel {
    /// The file's absolute URL, as the index names it (relative links resolved against the page).
    pub url: String,
    pub sha256: String,
    /// The project's page, as the recipe's index names it.
    pub page: String,
    /// The page marks the file yanked (PEP 592), with this reason (empty: none given): taken only
    /// because the recipe's exact version names it and no other file fits.
    pub yanked: Option<String>,
}

/// What an unpinned source needs to be pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpinned<'a> {
    /// A git source with a tag and no rev: the tag is resolved to a commit.
    Tag { url: &'a str, tag: &'a str },
    /// A url source without sha256: its digest is read from `index`'s page for the file, or,
    /// without an index, the download is hashed.
    Download { url: &'a str, index: Option<&'a str> },
    /// A prebuilt wheel named by project and version: the file is picked from `index`'s page.
    Wheel { index: &'a str, project: &'a str, version: &'a str },
}

impl Unpinned<'_> {
    /// Why it is unpinned and how to pin it by hand, for `--locked`'s refusal.
    pub fn describe(&self) -> String {
        match self {
            Unpinned::Tag { url, tag } => format!("git `{url}` tag `{tag}` has no `rev`"),
            Unpinned::Download { url, .. } => format!("url `{url}` has no `sha256`"),
            Unpinned::Wheel { index, project, version } => {
                format!(
                    "wheel `{project}` `{version}` of index `{index}` has no file picked (`rocmforge lock` picks it)"
                )
            }
        }
    }
}

/// What is left to pin in an unpinned source (`None` for a pinned source, or a git source with
/// neither tag nor rev, which the loader refuses).
pub fn unpinned(spec: &SourceSpec) -> Option<Unpinned<'_>> {
    match spec {
        SourceSpec::Git { url, tag: Some(tag), rev: None, .. } => Some(Unpinned::Tag { url, tag }),
        SourceSpec::Url { sha256: None, index: Some(index), wheel: Some(w), .. } => {
            Some(Unpinned::Wheel { index, project: &w.project, version: &w.version })
        }
        SourceSpec::Url { url, sha256: None, index, .. } => Some(Unpinned::Download { url, index: index.as_deref() }),
        _ => None,
    }
}

/// Whether a pin still applies to the stack (its recipe is unpinned with the same url and tag).
pub fn pin_applies(stack: &Stack, pin: &Pin) -> bool {
    let Some(recipe) = stack.recipe(&pin.recipe) else { return false };
    match (unpinned(&recipe.source), &pin.tag, &pin.rev, &pin.sha256) {
        (Some(Unpinned::Tag { url, tag }), Some(t), Some(_), None) => url == pin.url && tag == t,
        (Some(Unpinned::Download { url, .. }), None, None, Some(_)) => url == pin.url && pin.project.is_none(),
        // Picked for what the recipe asks, on the stack's Python and glibc floor as they are now.
        (Some(Unpinned::Wheel { index, project, version }), None, None, Some(_)) => {
            pin.index.as_deref() == Some(index)
                && pin.project.as_deref() == Some(project)
                && pin.version.as_deref() == Some(version)
                && pin.python == stack.python
                && pin.glibc.as_deref() == Some(stack.glibc.as_str())
        }
        _ => false,
    }
}

/// Gives every unpinned recipe pinned in `lock` its rev or sha256; `from` is the lock file's
/// path, recorded in the recipe (`plan` shows where a pin came from).
pub fn apply_pins(stack: &mut Stack, lock: &LockFile, from: &Path) {
    for pin in &lock.pins {
        if !pin_applies(stack, pin) {
            continue;
        }
        if let Some(r) = stack.recipes.get_mut(&pin.recipe) {
            match &mut r.source {
                SourceSpec::Git { rev, .. } => *rev = pin.rev.clone(),
                SourceSpec::Url { sha256, url, wheel, .. } => {
                    if wheel.is_some() {
                        *url = pin.url.clone();
                    }
                    *sha256 = pin.sha256.clone()
                }
                _ => continue,
            }
            r.pin_from = Some(PinFrom::LockFile { path: from.display().to_string() });
        }
    }
}

/// Applies the stack's lock file (if any) to a freshly loaded stack; `state_dir` as for [`path`].
pub fn apply(stack: &mut Stack, tree: &RecipeTree, state_dir: &Path) -> Result<(), LockFileError> {
    let path = path(tree, state_dir, &stack.name);
    let lock = read(&path)?;
    apply_pins(stack, &lock, &path);
    Ok(())
}
