//! Writing a user's edits back as a patch: a git-style diff of two trees.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::PatchError;

/// The files of a tree (relative paths, sorted), leaving out `.git` (repos and submodule links).
fn tree_files(root: &Path) -> Result<BTreeMap<String, PathBuf>, PatchError> {
    let mut out = BTreeMap::new();
    let walk = walkdir::WalkDir::new(root).sort_by_file_name().into_iter().filter_entry(|e| e.file_name() != ".git");
    for e in walk {
        let e = e.map_err(|e| PatchError::Read {
            path: e.path().map(Path::to_path_buf).unwrap_or_else(|| root.to_path_buf()),
            source: e.into_io_error().unwrap_or_else(|| std::io::Error::other("walk failed")),
        })?;
        if e.file_type().is_file() {
            let rel = e.path().strip_prefix(root).expect("under root").to_string_lossy().replace('\\', "/");
            out.insert(rel, e.path().to_path_buf());
        }
    }
    Ok(out)
}

/// The result of diffing two trees: the patch, and files left out because they are binary.
#[derive(Debug, Default)]
pub struct TreeDiff {
    pub patch: Vec<u8>,
    pub files: Vec<String>,
    pub skipped_binary: Vec<String>,
}

/// A git-style unified diff from `base` to `edited` (both directories), `.git` left out.
pub fn diff_trees(base: &Path, edited: &Path) -> Result<TreeDiff, PatchError> {
    let a = tree_files(base)?;
    let b = tree_files(edited)?;
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    let mut out = TreeDiff::default();
    let read = |p: &Path| std::fs::read(p).map_err(|source| PatchError::Read { path: p.to_path_buf(), source });
    for name in names {
        let old = a.get(name).map(|p| read(p)).transpose()?;
        let new = b.get(name).map(|p| read(p)).transpose()?;
        if old == new {
            continue;
        }
        if old.as_deref().is_some_and(|o| o.contains(&0)) || new.as_deref().is_some_and(|n| n.contains(&0)) {
            out.skipped_binary.push(name.clone());
            continue;
        }
        let mut opts = diffy::DiffOptions::new();
        opts.set_original_filename(if old.is_some() { format!("a/{name}") } else { "/dev/null".into() });
        opts.set_modified_filename(if new.is_some() { format!("b/{name}") } else { "/dev/null".into() });
        let empty: &[u8] = b"";
        let p = opts.create_patch_bytes(old.as_deref().unwrap_or(empty), new.as_deref().unwrap_or(empty));
        out.patch.extend_from_slice(format!("diff --git a/{name} b/{name}\n").as_bytes());
        if old.is_none() {
            out.patch.extend_from_slice(b"new file mode 100644\n");
        } else if new.is_none() {
            out.patch.extend_from_slice(b"deleted file mode 100644\n");
        }
        out.patch.extend_from_slice(&p.to_bytes());
        out.files.push(name.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::apply_series;

    #[test]
    fn diff_roundtrip() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(a.path().join("d")).unwrap();
        std::fs::create_dir_all(b.path().join("d")).unwrap();
        std::fs::write(a.path().join("d/f"), "1\n2\n3\n4\n5\n6\n7\n8\n9\n").unwrap();
        std::fs::write(b.path().join("d/f"), "1\n2\n3\n4\nfive\n6\n7\n8\n9").unwrap();
        std::fs::write(a.path().join("gone"), "x\n").unwrap();
        std::fs::write(b.path().join("new"), "n\n").unwrap();
        std::fs::create_dir_all(b.path().join(".git")).unwrap();
        std::fs::write(b.path().join(".git/HEAD"), "x").unwrap();
        let d = diff_trees(a.path(), b.path()).unwrap();
        assert_eq!(d.files, vec!["d/f", "gone", "new"]);
        apply_series(a.path(), &[("edit.patch".into(), d.patch)]).unwrap();
        assert_eq!(std::fs::read_to_string(a.path().join("d/f")).unwrap(), "1\n2\n3\n4\nfive\n6\n7\n8\n9");
        assert!(!a.path().join("gone").exists());
        assert_eq!(std::fs::read_to_string(a.path().join("new")).unwrap(), "n\n");
    }
}
