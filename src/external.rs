//! An installed ROCm (`--rocm-path`, config `rocm-path`, `ROCMFORGE_ROCM_PATH`) providing some
//! components: a recipe whose `[external]` spec matches the installation is used, not built.

use std::path::{Path, PathBuf};

use crate::recipe::ExternalSpec;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledRocm {
    pub path: PathBuf,
    /// From `<rocm>/.info/version` ("6.2.4-..." gives "6.2.4"), when present.
    pub version: Option<String>,
}

impl InstalledRocm {
    pub fn open(path: &Path) -> InstalledRocm {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let version = std::fs::read_to_string(path.join(".info/version"))
            .ok()
            .and_then(|t| t.lines().next().map(str::trim).map(String::from))
            .filter(|v| !v.is_empty())
            .map(|v| v.split('-').next().unwrap_or(&v).to_string());
        InstalledRocm { path, version }
    }

    /// The cache-key input of a component it provides: dependents rebuild if the ROCm changes.
    pub fn key_input(&self) -> String {
        format!("external:{}:{}", self.path.display(), self.version.as_deref().unwrap_or("unknown"))
    }

    /// What in the installation matches `spec` (relative paths), if all of it is there; `None`
    /// when the spec names nothing or something is missing.
    pub fn provides(&self, spec: &ExternalSpec) -> Option<Vec<String>> {
        let mut found = Vec::new();
        if let Some(pkg) = &spec.cmake_package {
            let rel = format!("lib/cmake/{pkg}");
            if !self.path.join(&rel).is_dir() {
                return None;
            }
            found.push(rel);
        }
        for f in &spec.files {
            if !self.path.join(f).exists() {
                return None;
            }
            found.push(f.clone());
        }
        (!found.is_empty()).then_some(found)
    }

    /// The plan's reason: `provided by /opt/rocm (ROCm 6.2.4): lib/cmake/hip`.
    pub fn reason(&self, found: &[String]) -> String {
        let version = self.version.as_deref().map(|v| format!(" (ROCm {v})")).unwrap_or_default();
        format!("provided by {}{version}: {}", self.path.display(), found.join(", "))
    }
}
