//! Coverage: whether the files a recipe installed carry what its `[targets]` declares.
//!
//! - `device-code = ["lib/libx.so", "lib/x/library/*.co"]`: each entry, a path or a glob
//!   (`*` stays inside one directory, `**` crosses them), must match at least one installed
//!   file, and the files it matches must together carry device code for every target the recipe
//!   was built for (a processor matches whatever its features: `gfx1010:xnack-` is gfx1010).
//!   Together, because Tensile ships one code object per target.
//! - `must-contain = { "lib/libx.so" = "text" }`: every file the path or glob matches must
//!   contain the text (MIOpen embeds its kernel sources: a patched kernel leaves its line there).
//!
//! Paths are relative to the recipe's installed tree (the prefix), or, for recipes that make
//! wheels, to the root of each wheel (`torch/lib/libtorch_hip.so`), read in memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

use super::{inspect_bytes, processor, OffloadError};

/// What a recipe declares.
#[derive(Debug, Clone, Copy)]
pub struct CoverageSpec<'a> {
    pub device_code: &'a [String],
    pub must_contain: &'a BTreeMap<String, String>,
}

impl CoverageSpec<'_> {
    pub fn is_empty(&self) -> bool {
        self.device_code.is_empty() && self.must_contain.is_empty()
    }
}

/// Where the installed files are.
#[derive(Debug, Clone)]
pub enum Installed<'a> {
    /// A tree (the recipe's staged prefix).
    Tree(&'a Path),
    /// The wheels the recipe made.
    Wheels(&'a [PathBuf]),
}

/// One declaration checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoverageCheck {
    /// `device-code` or `must-contain`.
    pub kind: String,
    /// The path or glob as declared.
    pub pattern: String,
    /// device-code: the targets required; must-contain: the text.
    pub wants: Vec<String>,
    /// Each file it matched, with the targets found in it (device-code) or whether it holds the
    /// text (must-contain).
    pub files: Vec<CoveredFile>,
    /// device-code: the targets no matched file carries; must-contain: the files without the
    /// text. With no file matched, every wanted thing.
    pub missing: Vec<String>,
    pub ok: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoveredFile {
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<bool>,
}

impl CoverageCheck {
    /// One line for people: what is covered, or what is missing where.
    pub fn describe(&self) -> String {
        if self.files.is_empty() && self.kind != "provides" {
            return format!("{} `{}`: no installed file matches it", self.kind, self.pattern);
        }
        let files = self.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>();
        let shown = if files.len() > 3 {
            format!("{}, ... ({} files)", files[..3].join(", "), files.len())
        } else {
            files.join(", ")
        };
        match (self.kind.as_str(), self.ok) {
            ("device-code", true) => {
                let verb = if files.len() == 1 { "carries" } else { "carry" };
                format!("device-code `{}`: {} {verb} {}", self.pattern, shown, self.wants.join(", "))
            }
            ("device-code", false) => {
                let mut found: Vec<&str> =
                    self.files.iter().flat_map(|f| f.targets.iter().map(String::as_str)).collect();
                found.sort();
                found.dedup();
                let found = if found.is_empty() { "no GPU code".to_string() } else { found.join(", ") };
                format!(
                    "device-code `{}`: {shown} lack{} {} (found: {found})",
                    self.pattern,
                    if files.len() == 1 { "s" } else { "" },
                    self.missing.join(", ")
                )
            }
            ("provides", true) => format!("provides {}: {shown}", self.pattern),
            ("provides", false) => {
                format!("{} (needed by {}): {}", self.pattern, self.wants.join("; "), self.missing.join("; "))
            }
            (_, true) => format!(
                "must-contain `{}`: {shown} contain{} the text",
                self.pattern,
                if files.len() == 1 { "s" } else { "" }
            ),
            (_, false) => format!(
                "must-contain `{}`: {} do{} not contain `{}`",
                self.pattern,
                self.missing.join(", "),
                if self.missing.len() == 1 { "es" } else { "" },
                self.wants.join("")
            ),
        }
    }
}

/// A path or glob of a declaration, or why it is not one.
pub fn matcher(pattern: &str) -> Result<GlobMatcher, String> {
    if pattern.starts_with('/') || pattern.split('/').any(|c| c == "..") {
        return Err(format!("`{pattern}` must be a relative path inside the installed tree (no leading `/`, no `..`)"));
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("`{pattern}` is not a valid glob: {e}"))
}

/// Checks every declaration of `spec` against the installed files; `required` are the targets
/// built (processors: `gfx1010`).
pub fn check(
    spec: CoverageSpec<'_>,
    required: &[&str],
    installed: &Installed<'_>,
) -> Result<Vec<CoverageCheck>, OffloadError> {
    let mut out = Vec::new();
    for pattern in spec.device_code {
        let m = matcher(pattern).map_err(OffloadError::Malformed)?;
        let mut files = Vec::new();
        read_matching(installed, &m, &mut |path, bytes| {
            let targets = inspect_bytes(path, bytes)?.map(|i| i.targets).unwrap_or_default();
            files.push(CoveredFile { path: path.to_string(), targets, contains: None });
            Ok(())
        })?;
        let missing: Vec<String> = required
            .iter()
            .filter(|t| !files.iter().any(|f| f.targets.iter().any(|ft| processor(ft) == **t)))
            .map(|t| t.to_string())
            .collect();
        let ok = !files.is_empty() && missing.is_empty();
        out.push(CoverageCheck {
            kind: "device-code".into(),
            pattern: pattern.clone(),
            wants: required.iter().map(|t| t.to_string()).collect(),
            files,
            missing,
            ok,
        });
    }
    for (pattern, text) in spec.must_contain {
        let m = matcher(pattern).map_err(OffloadError::Malformed)?;
        let finder = memchr::memmem::Finder::new(text.as_bytes());
        let mut files = Vec::new();
        read_matching(installed, &m, &mut |path, bytes| {
            files.push(CoveredFile {
                path: path.to_string(),
                targets: Vec::new(),
                contains: Some(finder.find(bytes).is_some()),
            });
            Ok(())
        })?;
        let missing: Vec<String> = files.iter().filter(|f| f.contains == Some(false)).map(|f| f.path.clone()).collect();
        let ok = !files.is_empty() && missing.is_empty();
        out.push(CoverageCheck {
            kind: "must-contain".into(),
            pattern: pattern.clone(),
            wants: vec![text.clone()],
            files,
            missing: if ok || !missing.is_empty() { missing } else { vec![pattern.clone()] },
            ok,
        });
    }
    Ok(out)
}

/// The installed files `pattern` matches (paths as [`read_matching`] shows them), without
/// reading a tree's files.
pub fn matching(installed: &Installed<'_>, pattern: &str) -> Result<Vec<String>, OffloadError> {
    let m = matcher(pattern).map_err(OffloadError::Malformed)?;
    let mut out = Vec::new();
    match installed {
        Installed::Tree(root) => {
            for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name().into_iter().filter_map(Result::ok) {
                let rel = e.path().strip_prefix(root).unwrap_or(e.path()).to_string_lossy().replace('\\', "/");
                if !e.path().is_dir() && m.is_match(&rel) {
                    out.push(rel);
                }
            }
        }
        Installed::Wheels(_) => read_matching(installed, &m, &mut |path, _| {
            out.push(path.to_string());
            Ok(())
        })?,
    }
    Ok(out)
}

/// Hands every installed file `m` matches to `f`, with the path to show (relative to the tree;
/// `<wheel file name>!<member>` in a wheel). Symlinks in a tree are read through.
fn read_matching(
    installed: &Installed<'_>,
    m: &GlobMatcher,
    f: &mut super::ReadMember<'_>,
) -> Result<(), OffloadError> {
    match installed {
        Installed::Tree(root) => {
            let mut paths = Vec::new();
            for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
                let e = e.map_err(|e| OffloadError::Io {
                    path: e.path().unwrap_or(root).to_path_buf(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                if e.file_type().is_dir() {
                    continue;
                }
                let rel = e.path().strip_prefix(root).unwrap_or(e.path()).to_string_lossy().replace('\\', "/");
                if m.is_match(&rel) {
                    paths.push((rel, e.into_path()));
                }
            }
            for (rel, path) in paths {
                if path.is_dir() {
                    continue;
                }
                let bytes = std::fs::read(&path).map_err(|source| OffloadError::Io { path, source })?;
                f(&rel, &bytes)?;
            }
            Ok(())
        }
        Installed::Wheels(wheels) => {
            for w in *wheels {
                let name = w.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                super::for_each_member(w, &|n| m.is_match(n), &mut |member, bytes| {
                    f(&format!("{name}!{member}"), bytes)
                })?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(targets: &[&str]) -> Vec<u8> {
        let entries: Vec<(String, Vec<u8>)> =
            targets.iter().map(|t| (format!("hipv4-amdgcn-amd-amdhsa--{t}"), vec![1u8; 8])).collect();
        super::super::props::elf(62, 0, 0, 0, &[(".hip_fatbin", &super::super::props::plain_bundle(&entries))])
    }

    #[test]
    fn device_code_names_the_file_and_the_missing_target() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("lib/k")).unwrap();
        std::fs::write(d.path().join("lib/libx.so.1"), lib(&["gfx1010:xnack-"])).unwrap();
        std::os::unix::fs::symlink("libx.so.1", d.path().join("lib/libx.so")).unwrap();
        std::fs::write(d.path().join("lib/k/a-gfx1010.co"), super::super::props::elf(224, 0x133, 64, 2, &[])).unwrap();
        std::fs::write(d.path().join("lib/k/a-gfx1030.co"), super::super::props::elf(224, 0x136, 64, 2, &[])).unwrap();
        let device_code = vec!["lib/libx.so".to_string(), "lib/k/*.co".to_string(), "lib/none*.so".to_string()];
        let must_contain = BTreeMap::from([("lib/libx.so.1".to_string(), "amdhsa--gfx1010".to_string())]);
        let spec = CoverageSpec { device_code: &device_code, must_contain: &must_contain };
        let checks = check(spec, &["gfx1010", "gfx1030"], &Installed::Tree(d.path())).unwrap();
        assert!(!checks[0].ok);
        assert_eq!(checks[0].missing, ["gfx1030"]);
        let line = checks[0].describe();
        assert!(line.contains("lib/libx.so lacks gfx1030 (found: gfx1010:xnack-)"), "{line}");
        assert!(checks[1].ok, "{}", checks[1].describe());
        assert_eq!(checks[1].files.len(), 2);
        assert!(!checks[2].ok);
        assert!(checks[2].describe().contains("no installed file matches"), "{}", checks[2].describe());
        assert!(checks[3].ok, "{}", checks[3].describe());
        let must_contain = BTreeMap::from([("lib/libx.so".to_string(), "MIO_BN_GFX101X".to_string())]);
        let spec = CoverageSpec { device_code: &[], must_contain: &must_contain };
        let c = &check(spec, &[], &Installed::Tree(d.path())).unwrap()[0];
        assert!(!c.ok);
        assert!(c.describe().contains("lib/libx.so does not contain `MIO_BN_GFX101X`"), "{}", c.describe());
    }

    #[test]
    fn bad_patterns_are_named() {
        assert!(matcher("/abs").unwrap_err().contains("relative"));
        assert!(matcher("a/../b").unwrap_err().contains("relative"));
        assert!(matcher("a/[").unwrap_err().contains("not a valid glob"));
        assert!(matcher("lib/*.so").unwrap().is_match("lib/x.so"));
        assert!(!matcher("lib/*.so").unwrap().is_match("lib/sub/x.so"));
        assert!(matcher("lib/**/*.co").unwrap().is_match("lib/a/b/x.co"));
        assert!(matcher("lib/x/*.{co,hsaco}").unwrap().is_match("lib/x/k-gfx1010.hsaco"));
    }
}
