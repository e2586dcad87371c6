//! The host's Python: the interpreter a stack asks for, found without running anything.

use std::path::PathBuf;

/// A host Python of `version` ("3.11"): `$ROCMFORGE_PYTHON`, `python3.11` on PATH, or pyenv's.
pub fn find_python(version: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ROCMFORGE_PYTHON").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = format!("python{version}");
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        // pyenv shims answer for versions that are not installed: skip them.
        if dir.to_string_lossy().contains("pyenv/shims") {
            continue;
        }
        let p = dir.join(&exe);
        if p.is_file() {
            return Some(p);
        }
    }
    let root =
        std::env::var_os("PYENV_ROOT").map(PathBuf::from).or_else(|| dirs::home_dir().map(|h| h.join(".pyenv")))?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n == version || n.starts_with(&format!("{version}."))
        })
        .map(|e| e.path().join("bin").join(&exe))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}
