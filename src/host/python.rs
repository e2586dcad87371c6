//! The stack's Python (`python = "3.11"` in stack.toml), wherever the user keeps it:
//! `$ROCMFORGE_PYTHON`, `python3.11` on `PATH`, a pyenv version (`$PYENV_ROOT/versions/3.11.*`,
//! default `~/.pyenv`), or a uv-managed one (`uv python find 3.11`). Ubuntu 24.04 has only 3.12:
//! where none is found, [`install_hint`] is the one command that gets it.

use std::path::PathBuf;

use serde::Serialize;

/// An interpreter and where it was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundPython {
    pub path: PathBuf,
    /// `ROCMFORGE_PYTHON`, `PATH`, `pyenv` or `uv`.
    pub via: &'static str,
}

/// A host Python of `version` ("3.11"; "3" for any).
pub fn find_python(version: &str) -> Option<PathBuf> {
    locate_python(version).map(|f| f.path)
}

/// [`find_python`], saying where it found it.
pub fn locate_python(version: &str) -> Option<FoundPython> {
    if let Some(p) = std::env::var_os("ROCMFORGE_PYTHON").filter(|p| !p.is_empty()) {
        return Some(FoundPython { path: PathBuf::from(p), via: "ROCMFORGE_PYTHON" });
    }
    let exe = format!("python{version}");
    on_path(&exe)
        .map(|path| FoundPython { path, via: "PATH" })
        .or_else(|| in_pyenv(version, &exe).map(|path| FoundPython { path, via: "pyenv" }))
        .or_else(|| from_uv(version).map(|path| FoundPython { path, via: "uv" }))
}

fn on_path(exe: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        // pyenv shims answer for versions that are not installed: pyenv's own are read below.
        .filter(|dir| !dir.to_string_lossy().contains("pyenv/shims"))
        .map(|dir| dir.join(exe))
        .find(|p| p.is_file())
}

/// The newest `$PYENV_ROOT/versions/<version>.*` (what `pyenv prefix <version>.x` names).
fn in_pyenv(version: &str, exe: &str) -> Option<PathBuf> {
    let root =
        std::env::var_os("PYENV_ROOT").map(PathBuf::from).or_else(|| dirs::home_dir().map(|h| h.join(".pyenv")))?;
    let mut found: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir(root.join("versions"))
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let matches = n == version || n.starts_with(&format!("{version}."));
            let p = e.path().join("bin").join(exe);
            (matches && p.is_file()).then(|| (crate::recipe::host::version_numbers(&n).unwrap_or_default(), p))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

/// `uv python find <version>`: uv's managed interpreters (`uv python install`), and any other
/// it knows. Only when uv is on `PATH`; uv never downloads for `find`.
fn from_uv(version: &str) -> Option<PathBuf> {
    if version == "3" {
        return None;
    }
    let uv = super::which("uv")?;
    let out = std::process::Command::new(uv)
        .args(["python", "find", version])
        .env("UV_PYTHON_DOWNLOADS", "never")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && p.is_file()).then_some(p)
}

/// The one command that gets Python `version` where none was found: uv installs a managed
/// build (uv itself comes from PyPI).
pub fn install_hint(version: &str) -> String {
    if super::which("uv").is_some() {
        format!("uv python install {version}")
    } else {
        format!("python3 -m pip install --user uv && uv python install {version}")
    }
}
