//! Cache keys. A recipe's key hashes an explicit table of its own inputs plus every dependency's
//! key, so a change anywhere rebuilds exactly what is downstream. The inputs are stored beside
//! the artifact so `plan` can say why a recipe will rebuild.
//!
//! If you change any input of the hash, or how it is computed, bump `CACHE_FORMAT`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::target::TargetSet;

pub const CACHE_FORMAT: u32 = 1;

/// Host environment variables a build reads that change its output. Anything else is left out
/// of both the key and the build's environment (except the pass-through list in `engine::systems::step_env`).
pub const ENV_ALLOWLIST: &[&str] =
    &["CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "HIPCC_COMPILE_FLAGS_APPEND", "HIP_CLANG_PATH"];

/// Everything a recipe's build depends on, by name. Serialised as the key's explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInputs {
    pub format: u32,
    pub recipe: String,
    /// sha256 of the recipe's canonical content.
    pub recipe_content: String,
    /// Commit id, tarball sha256, or the source recipe's key.
    pub source: String,
    /// (patch file name, sha256), in series order.
    pub patches: Vec<(String, String)>,
    /// The targets this recipe is really built for (empty: host only).
    pub targets: Vec<String>,
    pub prefix: String,
    pub env: BTreeMap<String, String>,
    pub toolchain: String,
    /// Dependency name -> its key.
    pub deps: BTreeMap<String, String>,
}

impl KeyInputs {
    /// The key: sha256 over the canonical JSON of the inputs.
    pub fn key(&self) -> CacheKey {
        let json = serde_json::to_vec(self).expect("inputs serialise");
        CacheKey(sha256_hex(&json))
    }

    /// Why `self` differs from `old` (the inputs of the artifact that exists), in words.
    pub fn explain_change(&self, old: &KeyInputs) -> Vec<String> {
        let mut why = Vec::new();
        if self.format != old.format {
            why.push(format!("cache format changed ({} -> {})", old.format, self.format));
        }
        if self.recipe_content != old.recipe_content {
            why.push("recipe changed".into());
        }
        if self.source != old.source {
            why.push(format!("source changed ({} -> {})", short(&old.source), short(&self.source)));
        }
        if self.patches != old.patches {
            let old_map: BTreeMap<&String, &String> = old.patches.iter().map(|(n, h)| (n, h)).collect();
            let mut named = false;
            for (n, h) in &self.patches {
                match old_map.get(n) {
                    None => why.push(format!("patch {n} added")),
                    Some(oh) if *oh != h => why.push(format!("patch {n} changed")),
                    _ => continue,
                }
                named = true;
            }
            for (n, _) in &old.patches {
                if !self.patches.iter().any(|(m, _)| m == n) {
                    why.push(format!("patch {n} removed"));
                    named = true;
                }
            }
            if !named {
                why.push("patch order changed".into());
            }
        }
        if self.targets != old.targets {
            why.push(format!("targets changed ({} -> {})", list(&old.targets), list(&self.targets)));
        }
        if self.prefix != old.prefix {
            why.push(format!("prefix changed ({} -> {})", old.prefix, self.prefix));
        }
        if self.env != old.env {
            for k in self.env.keys().chain(old.env.keys()).collect::<std::collections::BTreeSet<_>>() {
                if self.env.get(k) != old.env.get(k) {
                    why.push(format!("environment variable {k} changed"));
                }
            }
        }
        if self.toolchain != old.toolchain {
            why.push("host toolchain changed".into());
        }
        for (d, k) in &self.deps {
            match old.deps.get(d) {
                Some(ok) if ok == k => {}
                Some(_) => why.push(format!("dependency {d} rebuilt")),
                None => why.push(format!("new dependency {d}")),
            }
        }
        for d in old.deps.keys() {
            if !self.deps.contains_key(d) {
                why.push(format!("dependency {d} dropped"));
            }
        }
        why
    }
}

fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "host only".into()
    } else {
        v.join(",")
    }
}

/// A recipe's content hash (64 hex).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CacheKey(pub String);

impl CacheKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl std::fmt::Display for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub use crate::digest::sha256_hex;

/// Identity of the host tools a build uses: each tool's resolved path, size and mtime (cheap;
/// a reinstall or upgrade changes it). Tools not installed are recorded as absent.
pub fn toolchain_identity(path_var: &str) -> String {
    let mut parts = Vec::new();
    for tool in ["cc", "c++", "cmake", "ninja", "hipcc", "clang"] {
        let found = std::env::split_paths(path_var).map(|d| d.join(tool)).find(|p| p.is_file());
        parts.push(match found.and_then(|p| describe_file(&p)) {
            Some(d) => format!("{tool}={d}"),
            None => format!("{tool}=absent"),
        });
    }
    sha256_hex(parts.join("\n").as_bytes())
}

fn describe_file(p: &Path) -> Option<String> {
    let real: PathBuf = std::fs::canonicalize(p).ok()?;
    let m = std::fs::metadata(&real).ok()?;
    let mtime = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some(format!("{}:{}:{}", real.display(), m.len(), mtime))
}

pub fn targets_of(targets: Option<&TargetSet>) -> Vec<String> {
    targets.map(|t| t.names().into_iter().map(String::from).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> KeyInputs {
        KeyInputs {
            format: CACHE_FORMAT,
            recipe: "miopen".into(),
            recipe_content: "r1".into(),
            source: "git:abc".into(),
            patches: vec![("0001-a.patch".into(), "h1".into()), ("0002-b.patch".into(), "h2".into())],
            targets: vec!["gfx1010".into()],
            prefix: "/p".into(),
            env: BTreeMap::new(),
            toolchain: "t".into(),
            deps: BTreeMap::from([("clr".into(), "k1".into())]),
        }
    }

    #[test]
    fn key_is_stable_and_sensitive() {
        let a = inputs();
        assert_eq!(a.key(), inputs().key());
        let mut b = inputs();
        b.targets = vec!["gfx1010".into(), "gfx1030".into()];
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn explains_what_changed() {
        let old = inputs();
        let mut new = inputs();
        new.patches[1].1 = "h2'".into();
        new.deps.insert("clr".into(), "k2".into());
        new.targets = vec!["gfx1012".into()];
        assert_eq!(
            new.explain_change(&old),
            vec!["patch 0002-b.patch changed", "targets changed (gfx1010 -> gfx1012)", "dependency clr rebuilt"]
        );
        assert!(inputs().explain_change(&old).is_empty());
    }
}
