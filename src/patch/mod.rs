//! Patch series: parsing unified diffs (plain and `git format-patch`, with `GIT binary patch`
//! literal and delta hunks applied as `git apply` does), applying a series all-or-nothing, and
//! writing a user's edits back as a patch.
//!
//! A series is applied in memory over the tree first; files are written only when every patch
//! applied, so a failure leaves the tree exactly as it was. Hunks must match exactly (an offset
//! is allowed, fuzz is not): a patch that "almost" applies onto a moved tree is a bug waiting in
//! hour 7, not a convenience.

use std::path::{Path, PathBuf};

mod apply;
mod binary;
mod diff;
mod parse;
#[cfg(test)]
mod props;

pub use apply::{apply_series, check_series, check_series_with};
pub use binary::{apply_delta, BinaryHunk, BinaryPatch};
pub use diff::{diff_trees, TreeDiff};
pub use parse::{parse, FilePatch, Hunk, HunkLine};

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error(
        "`{patch}` is not a patch: it has no `--- a/FILE` / `+++ b/FILE` header followed by a hunk (`@@ -L,N +L,N @@`)"
    )]
    NotAPatch { patch: String },
    #[error("`{patch}` line {line}: malformed patch: {msg}")]
    Malformed { patch: String, line: usize, msg: String },
    #[error("`{patch}` touches `{file}`, which is outside the source tree")]
    UnsafePath { patch: String, file: String },
    #[error("`{patch}` has a binary change to `{file}` without its data (`Binary files ... differ`): make the patch with `git diff --binary` or `git format-patch` (which include it)")]
    Binary { patch: String, file: String },
    #[error("`{patch}` does not apply: the binary change to `{file}` fails: {reason}{}", applied_hint(*already_applied))]
    BinaryFailed { patch: String, file: String, reason: String, already_applied: bool },
    #[error("`{patch}` does not apply: `{file}` does not exist in the tree{}", applied_hint(*already_applied))]
    FileMissing { patch: String, file: String, already_applied: bool },
    #[error("`{patch}` does not apply: it creates `{file}`, which already exists{}", applied_hint(*already_applied))]
    FileExists { patch: String, file: String, already_applied: bool },
    #[error("`{patch}` does not apply: hunk #{hunk} of `{file}` (patch line {patch_line}, file line {line}) does not match: {reason}{}", applied_hint(*already_applied))]
    HunkFailed {
        patch: String,
        file: String,
        hunk: usize,
        /// Line in the target file where the hunk should start.
        line: usize,
        /// Line of the `@@` header in the patch file.
        patch_line: usize,
        reason: String,
        already_applied: bool,
    },
    #[error("cannot read `{path}`")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write `{path}` (the tree may be partly patched: recreate it)")]
    Write { path: PathBuf, source: std::io::Error },
}

fn applied_hint(yes: bool) -> &'static str {
    if yes {
        "\n  note: the patch looks already applied (its result is already in the tree)"
    } else {
        ""
    }
}

impl PatchError {
    /// The series file this error is about, if any.
    pub fn patch_name(&self) -> Option<&str> {
        match self {
            PatchError::NotAPatch { patch }
            | PatchError::Malformed { patch, .. }
            | PatchError::UnsafePath { patch, .. }
            | PatchError::Binary { patch, .. }
            | PatchError::BinaryFailed { patch, .. }
            | PatchError::FileMissing { patch, .. }
            | PatchError::FileExists { patch, .. }
            | PatchError::HunkFailed { patch, .. } => Some(patch),
            _ => None,
        }
    }
}

/// Read access to a source tree by relative path (`a/b.c`): a directory, or a git commit read
/// straight from a mirror.
pub trait TreeRead {
    /// The file's bytes, or `None` when there is no such file.
    fn read(&self, path: &str) -> std::io::Result<Option<Vec<u8>>>;
}

/// A tree on disk.
pub struct DirReader<'a>(pub &'a Path);

impl TreeRead for DirReader<'_> {
    fn read(&self, path: &str) -> std::io::Result<Option<Vec<u8>>> {
        let p = self.0.join(path);
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => std::fs::read(&p).map(Some),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.kind() == std::io::ErrorKind::NotADirectory => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// A `git format-patch` file, for the parsing and applying tests.
#[cfg(test)]
const GIT_PATCH: &str = "From 1234 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n---\n x.c | 2 +-\n\ndiff --git a/src/x.c b/src/x.c\nindex 1..2 100644\n--- a/src/x.c\n+++ b/src/x.c\n@@ -2,3 +2,3 @@ int f()\n b\n-c\n+C\n d\n-- \n2.40\n";
