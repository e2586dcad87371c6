//! Cache keys. A recipe's key is the sha256 of an explicit table of its own inputs
//! ([`KeyInputs`], as JSON), which holds every dependency's key, so a change anywhere rebuilds
//! exactly what is downstream. The inputs are stored beside the artifact (`inputs.json`) and in
//! `<state-dir>/last-build/`, so `plan` can say why a recipe will rebuild.
//!
//! A key says *what* was built, never *where* or *when*: two machines (or one machine before
//! and after reinstalling its compiler) building the same recipe from the same sources with the
//! same tools into the same prefix compute the same key, so an artifact made on one is valid on
//! the other.
//!
//! # The inputs
//!
//! | input (`KeyInputs` field)                                  | in the key | note |
//! |------------------------------------------------------------|:----------:|:----:|
//! | cache format (`format`, [`CACHE_FORMAT`])                   | yes        | 1    |
//! | recipe name (`recipe`)                                      | yes        |      |
//! | recipe content (`recipe_content`)                           | yes        | 2    |
//! | source identity (`source`)                                  | yes        | 3    |
//! | patches: file name and sha256, in series order (`patches`)  | yes        |      |
//! | GPU targets really built for (`targets`)                    | yes        | 4    |
//! | install prefix (`prefix`)                                   | yes        | 5    |
//! | allow-listed environment variables (`env`)                  | yes        | 6    |
//! | host toolchain identity (`toolchain`)                       | yes        | 7    |
//! | host distribution and release (`host_os`)                   | yes        | 12   |
//! | each dependency's key (`deps`)                              | yes        | 8    |
//! | mtimes, inodes, sizes of anything                           | never      | 9    |
//! | where host tools lie (absolute tool paths)                  | never      | 9    |
//! | work, cache, state, index and temp dirs                     | never      | 9    |
//! | user and host names, `HOME`                                 | never      | 9    |
//! | source URLs and `url-rewrite`                               | never      | 3    |
//! | job count (`-j`), link mode, rocmforge's own version        | no         | 10   |
//! | the Python interpreter of python-wheel recipes              | not yet    | 11   |
//!
//! 1. Bumped whenever keys change meaning: an input added or removed, an input (the toolchain
//!    identity, say) computed differently, or rocmforge driving a build system in a way that
//!    changes what it installs. The cache's artifact bucket (`artifacts-v<N>` in `cache.rs`)
//!    moves with it, so an old entry is never even looked at.
//! 2. The recipe parsed and serialised canonically (keys sorted): comments, whitespace and key
//!    order do not count. Placeholders (`{prefix}`, `{src}`, `{build}`, `{stage}`) are hashed
//!    unexpanded, so no directory of this machine enters through the recipe.
//! 3. The pinned commit (`git:<rev>`), the tarball's sha256 (`sha256:<hex>`), the key of the
//!    tree a `from` recipe reads (`tree:<key>`), each with its `subdir`; `unlocked:<tag>` for a
//!    recipe that cannot build yet. Never the URL (a mirror or a `url-rewrite` gives the same
//!    bytes, which the commit id or sha256 already name) and never where the checkout or the
//!    download lies. A component taken from an installed ROCm (`--rocm-path`) is
//!    `installed:<version>@sha256:<digest>`: its version (`.info/version`, or its dpkg
//!    package's) and the sha256 of the `[external]` files taken (a CMake package folder: every
//!    file in it), not where or when they were installed (`installation`). Dependents' CMake
//!    files do record that path: machines sharing such artifacts install ROCm at one path.
//! 4. After the recipe's own target decision (supported subset, substitute, host only), with
//!    `stand-in` after them for a recipe built as its `[stand-in]` says (`plan`); empty
//!    for host-only recipes, so they do not rebuild when only the GPU targets change.
//! 5. The one path in the key, kept because it must be: ROCm's CMake package files, pkg-config
//!    files, hipcc's and HIP's configuration, RPATHs and installed Python packages embed the
//!    absolute install prefix, so an artifact built for `/opt/a` is broken in `/opt/b`.
//!    Machines that should share artifacts use the same prefix. The default prefix lies in the
//!    state dir (`~/.local/state/rocmforge/prefix/<stack>`, which names the user): set `prefix`
//!    in the config, or pass `--prefix`, to share.
//! 6. Only [`ENV_ALLOWLIST`], the host variables a build reads that change its output (the
//!    steps' environment holds no other host variable that could: `engine::systems::step_env`),
//!    and only those set. Their values are the user's own choice and enter as given, paths
//!    included (`CC=/usr/lib/ccache/gcc`, `HIP_CLANG_PATH=/opt/llvm/bin`): set them alike on
//!    machines that should share artifacts.
//! 7. What each host tool *is*, by its `--version` output: see [Toolchain
//!    identity](#toolchain-identity). Empty for source-only recipes: they compile nothing, so a
//!    compiler update does not re-key their source trees. A prebuilt wheel's adds one more line,
//!    [`PREBUILT_WHEEL_TOOL`]: what rocmforge itself does to the download (clears executable
//!    stacks, records the GPU code), so a change there re-keys those artifacts and nothing else;
//!    python-wheel and runtime-wheel recipes' of a stack with runtime wheels add
//!    [`WHEEL_LINK_TOOL`] the same way (patchelf's own version is not named: a known gap, as
//!    note 11's).
//! 8. A dependency's key covers its own inputs, so a change upstream re-keys all that is
//!    downstream, transitively.
//! 9. These say where or when, not what: they differ between machines and change with every
//!    reinstall while the artifact would not. They may appear in local memo files that decide
//!    when to recompute an identity (below), never in a key. (The work dir does not reach
//!    artifacts either: compilers get `-ffile-prefix-map=<work-dir>=/rocmforge-work`, so debug
//!    info and `__FILE__` name the stable path, and two work dirs make the same bytes.) The
//!    compiler cache and distcc (`engine::compilers`) are not inputs either: they change where
//!    and whether a compile runs, not what it makes.
//! 10. They do not change what is installed. A change of rocmforge that does is a `CACHE_FORMAT`
//!     bump (note 1).
//! 11. A known gap: python-wheel recipes build with the host Python found for the stack's
//!     `python` (or `ROCMFORGE_PYTHON`), which no key input names; the wheel's tags do.
//! 12. What the host gives the build besides its tools: the libraries and headers of its
//!     packages (libc, libstdc++, zlib, Python's headers, Debian's HIP runtime). Artifacts are
//!     shared between machines through a remote cache, and an artifact linked against one
//!     distribution's libraries may not even load on another, so the key names the
//!     distribution and its release: `ID` and `VERSION_ID` of `/etc/os-release` (else
//!     `/usr/lib/os-release`), as `debian 12` ([`host_os`]); `unknown` when neither file says.
//!     Empty for source-only recipes, like the toolchain. A point release of the same
//!     distribution (12.4 -> 12.5) keeps `VERSION_ID` and so the key: its ABI is stable. The
//!     finer input, the versions of the host packages a recipe declares it builds against,
//!     belongs beside it once recipes declare them (a `[host]` table): one line per package,
//!     `<name>: <version>`, asked of the package manager and memoised like the tools' identities.
//!
//! ## Considerations for inclusion
//!
//! - An input belongs in the key if changing it can change what the build installs. A key
//!   missing such an input silently reuses a wrong artifact, the worst failure a cache can
//!   have; a key holding an input that does not matter rebuilds for nothing and keeps machines
//!   from sharing artifacts.
//! - Say what a thing *is* (a commit id, a sha256, a tool's version output), not where it lies
//!   or when it was written. Paths, inodes, sizes and mtimes may decide when an identity is
//!   recomputed, locally; they are never the identity.
//! - Every input must be cheap on a no-op build (its benchmark: at most 3x `rocmforge
//!   --version`): keys are computed for every recipe on every `plan` and `build`. What is slow
//!   to learn (asking a tool) is memoised locally.
//! - Adding, removing or redefining an input bumps [`CACHE_FORMAT`].
//!
//! # Toolchain identity
//!
//! For each of [`TOOLS`], the first executable file of that name on `PATH` (the one a build
//! step would run) is asked `--version` with stdin closed, a time limit and a small fixed
//! environment: `PATH`, `HOME`, `LC_ALL=C` (gcc translates its banner) and the allow-listed
//! variables (`HIP_CLANG_PATH` picks the clang hipcc runs). Its output (stdout; stderr only when
//! stdout is empty: Debian's hipcc prints a rocm_agent_enumerator traceback there on a machine
//! without a GPU) is normalised: lines trimmed, blank lines at either end dropped, and every
//! absolute path replaced by `<path>`, such as clang's `InstalledDir: /usr/lib/llvm-15/bin` and
//! `Configuration file: ...` or a self-built clang's `(/home/me/llvm-project <commit>)`. The
//! tool's identity is its first line and the sha256 of the whole:
//! `cc (Debian 12.2.0-14+deb12u1) 12.2.0 (sha256:...)`. A tool not on `PATH` is `absent`; one
//! that cannot be started, exits non-zero, is killed or does not answer in time is `failed
//! (<how>)`, and the key says so (a build that needs the tool fails on its own). The toolchain
//! input is one line per tool, `<tool>: <identity>`, so `plan` names the tool that changed.
//!
//! No content hash of the tool's file is added, for three reasons. The file on `PATH` is rarely
//! the compiler: `cc` is gcc's driver, which runs `cc1` from elsewhere; Debian's `hipcc` is a
//! perl script running `hipcc.pl` and a clang; clang's code generation lives in `libLLVM`.
//! Hashing that file would miss the upgrades that matter. It would also split keys where the
//! tools are the same: builds of one release by different hands, or relocated installs, differ
//! in bytes (build ids, embedded install paths) but not in what they compile. And the version
//! output already names what matters: distribution compilers print their package revision,
//! ROCm's clang its build and branch, a clang from git its commit. The price is that a tool
//! rebuilt with another behaviour but the same version output goes unnoticed: `--rebuild` is the
//! remedy.
//!
//! ## The memo
//!
//! Asking is slow (Debian's `hipcc --version` runs perl, clang and rocm_agent_enumerator: 0.3 to
//! 0.6 s) and keys are computed on every `plan` and `build`, so each identity is remembered in
//! `<state-dir>/tool-identities.json` ([`MEMO_FILE`]; local, never shared, never in a key). An
//! entry is found by (tool, its path on `PATH`, a digest of the environment it was asked in),
//! and trusted while these are unchanged, else the tool is asked again:
//!
//! - the resolved file (symlinks followed): its path, device, inode, size, mtime and ctime
//!   (the one time stamp `touch` and `cp -p` cannot set back);
//! - the directory it lies in (same fields): wrapper scripts run their siblings (`hipcc` runs
//!   `hipcc.pl` and `hipvars.pm`), and package managers rename new files into place, which
//!   changes the directory;
//! - each directory an `InstalledDir:` line named: the clang hipcc runs lies elsewhere.
//!
//! Failures are not remembered (a tool may work once a missing library is installed). The file
//! is replaced atomically, and only when an entry changed; past 64 entries the oldest go. A memo
//! that cannot be read or written is ignored: the tools are then asked every time.
//!
//! If you change any input of the hash, or how it is computed, bump `CACHE_FORMAT`.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::target::TargetSet;

/// 2: the toolchain is identified by the tools' `--version` output, not their paths and mtimes.
/// 3: the host's distribution and release (`host_os`) are an input; builds map the work dir to a
/// stable path (`-ffile-prefix-map`, `engine::systems`), so debug info and `__FILE__` no longer
/// name it: artifacts of format 2 hold other bytes.
pub const CACHE_FORMAT: u32 = 3;

/// The toolchain line of prebuilt-wheel recipes: rocmforge's own treatment of the downloaded
/// wheel (`wheel::execstack`, `gpu_code`). Bump its number when that changes what is stored.
pub const PREBUILT_WHEEL_TOOL: &str = "rocmforge prebuilt-wheel: noexecstack 1, gpu-targets record 1";

/// The toolchain line of python-wheel and runtime-wheel recipes: what rocmforge itself does to
/// the wheels they make (runtime wheels laid out and linked with patchelf, the other wheels
/// required to them with RUNPATH relative to `$ORIGIN`: `wheel::runtime`), so a change there
/// re-keys those artifacts and nothing else.
pub const WHEEL_LINK_TOOL: &str = "rocmforge wheel links: runtime-wheel layout 1, relink 1";

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
    /// One line per host tool, `<tool>: <identity>` ([`toolchain_identity`]); empty for
    /// source-only recipes.
    pub toolchain: String,
    /// The host's distribution and release ([`host_os`], `debian 12`); empty for source-only
    /// recipes. (Absent from the inputs of format 2 and older: read as empty.)
    #[serde(default)]
    pub host_os: String,
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
            why.extend(toolchain_changes(&old.toolchain, &self.toolchain));
        }
        if self.host_os != old.host_os && self.format == old.format {
            why.push(format!("host distribution changed ({} -> {})", or_none(&old.host_os), or_none(&self.host_os)));
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

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}

/// The host's distribution and release, `<ID> <VERSION_ID>` of os-release (`debian 12`,
/// `ubuntu 24.04`), or `unknown`. See note 12 of the table.
pub fn host_os() -> String {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|text| os_of(&text))
        .unwrap_or_else(|| "unknown".into())
}

/// `ID` and `VERSION_ID` of an os-release text (values unquoted); a rolling release without
/// `VERSION_ID` is its `ID` alone.
fn os_of(text: &str) -> String {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let v = l.trim().strip_prefix(name)?.strip_prefix('=')?;
            Some(v.trim().trim_matches(|c| c == '"' || c == '\'').to_string()).filter(|v| !v.is_empty())
        })
    };
    match (field("ID"), field("VERSION_ID")) {
        (Some(id), Some(v)) => format!("{id} {v}"),
        (Some(id), None) => id,
        (None, _) => "unknown".into(),
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

use crate::digest::sha256_hex;

/// The host tools whose identity enters the key of every recipe that builds something.
pub const TOOLS: &[&str] = &["cc", "c++", "cmake", "ninja", "hipcc", "clang"];

/// The memo of tool identities, in the state dir.
pub const MEMO_FILE: &str = "tool-identities.json";

/// How long a tool may take to answer `--version`.
const ASK_TIMEOUT: Duration = Duration::from_secs(20);

/// Entries kept in the memo.
const MEMO_LIMIT: usize = 64;

/// The identity of the host tools on `path_var` (see [the module docs](self#toolchain-identity)):
/// one line per tool of [`TOOLS`], `<tool>: <identity>`. Identities are remembered in
/// `<state_dir>/tool-identities.json` while the tools' files are unchanged.
pub fn toolchain_identity(path_var: &str, state_dir: &Path) -> String {
    toolchain_identity_within(path_var, state_dir, ASK_TIMEOUT)
}

fn toolchain_identity_within(path_var: &str, state_dir: &Path, timeout: Duration) -> String {
    let env = ask_env(path_var);
    let env_digest = sha256_hex(&serde_json::to_vec(&env).expect("serialises"));
    let memo_path = state_dir.join(MEMO_FILE);
    let mut memo = Memo::read(&memo_path);
    let looked_up: Vec<Lookup> = TOOLS
        .iter()
        .map(|tool| {
            let Some(invoked) = find_on_path(tool, path_var) else { return Lookup::Known("absent".into()) };
            let Some(stamps) = stamps_of(&invoked) else { return Lookup::Known("absent".into()) };
            match memo.find(tool, &invoked, &env_digest) {
                Some(e) if e.stamps.get(..2) == Some(&stamps[..]) && e.stamps[2..].iter().all(Stamp::unchanged) => {
                    Lookup::Known(e.identity.clone())
                }
                _ => Lookup::Ask { invoked, stamps },
            }
        })
        .collect();
    // The tools to ask are asked side by side (hipcc alone takes most of a second).
    let answers: Vec<Option<Answer>> = std::thread::scope(|scope| {
        let asking: Vec<_> = looked_up
            .iter()
            .map(|l| match l {
                Lookup::Ask { invoked, .. } => Some(scope.spawn(|| ask_version(invoked, &env, timeout))),
                Lookup::Known(_) => None,
            })
            .collect();
        asking
            .into_iter()
            .map(|h| {
                h.map(|h| h.join().unwrap_or_else(|_| Answer { identity: Err("panicked".into()), witnesses: vec![] }))
            })
            .collect()
    });
    let mut lines = Vec::new();
    let mut changed = false;
    for ((tool, lookup), answer) in TOOLS.iter().zip(looked_up).zip(answers) {
        let identity = match (lookup, answer) {
            (Lookup::Known(identity), _) => identity,
            (Lookup::Ask { .. }, Some(Answer { identity: Err(how), .. })) => format!("failed ({how})"),
            (Lookup::Ask { invoked, mut stamps }, Some(Answer { identity: Ok(identity), witnesses })) => {
                for w in witnesses {
                    if !stamps.contains(&w) {
                        stamps.push(w);
                    }
                }
                let env = env_digest.clone();
                memo.insert(MemoEntry { tool: tool.to_string(), invoked, env, stamps, identity: identity.clone() });
                changed = true;
                identity
            }
            (Lookup::Ask { .. }, None) => unreachable!("every tool to ask is asked"),
        };
        lines.push(format!("{tool}: {identity}"));
    }
    if changed {
        // Best effort: without the memo the tools are asked again next time.
        let _ = crate::fsutil::write_atomic(&memo_path, &serde_json::to_vec_pretty(&memo).expect("serialises"));
    }
    lines.join("\n")
}

/// A tool's identity as the memo knows it, or what to ask.
enum Lookup {
    Known(String),
    /// Its path on `PATH` and the stamps of its file and directory.
    Ask {
        invoked: PathBuf,
        stamps: Vec<Stamp>,
    },
}

/// What a tool answered: its identity or how it failed, and the stamps of the directories its
/// output named (`InstalledDir:`).
struct Answer {
    identity: Result<String, String>,
    witnesses: Vec<Stamp>,
}

/// The first executable file named `tool` on `path_var`, as a shell would find it (an empty
/// entry is the current directory).
fn find_on_path(tool: &str, path_var: &str) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .map(|d| if d.as_os_str().is_empty() { PathBuf::from(".") } else { d })
        .map(|d| d.join(tool))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
        .map(|p| std::path::absolute(&p).unwrap_or(p))
}

/// The environment a tool is asked in: `PATH`, `HOME`, the C locale and the allow-listed
/// variables that are set (sorted).
fn ask_env(path_var: &str) -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_string(), path_var.to_string()), ("LC_ALL".to_string(), "C".to_string())];
    for k in std::iter::once("HOME").chain(ENV_ALLOWLIST.iter().copied()) {
        if let Ok(v) = std::env::var(k) {
            env.push((k.to_string(), v));
        }
    }
    env.sort();
    env
}

/// What a file or directory looks like now: enough to notice it was replaced or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    fn unchanged(&self) -> bool {
        Stamp::of(&self.path).as_ref() == Some(self)
    }
}

/// The stamps of the file `invoked` resolves to and of its directory.
fn stamps_of(invoked: &Path) -> Option<Vec<Stamp>> {
    let real = std::fs::canonicalize(invoked).ok()?;
    let file = Stamp::of(&real)?;
    let dir = Stamp::of(real.parent()?)?;
    Some(vec![file, dir])
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct MemoEntry {
    tool: String,
    /// The tool's path on `PATH`.
    invoked: PathBuf,
    /// sha256 of the environment it was asked in.
    env: String,
    /// The resolved file, its directory, then directories its output named.
    stamps: Vec<Stamp>,
    identity: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Memo {
    format: u32,
    entries: Vec<MemoEntry>,
}

impl Memo {
    const FORMAT: u32 = 1;

    fn read(path: &Path) -> Memo {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Memo>(&b).ok())
            .filter(|m| m.format == Memo::FORMAT)
            .unwrap_or(Memo { format: Memo::FORMAT, entries: Vec::new() })
    }

    fn find(&self, tool: &str, invoked: &Path, env: &str) -> Option<&MemoEntry> {
        self.entries.iter().find(|e| e.tool == tool && e.invoked == invoked && e.env == env)
    }

    /// Adds `entry` in place of the one it supersedes, newest last, keeping at most
    /// `MEMO_LIMIT` entries.
    fn insert(&mut self, entry: MemoEntry) {
        self.entries.retain(|e| !(e.tool == entry.tool && e.invoked == entry.invoked && e.env == entry.env));
        self.entries.push(entry);
        let excess = self.entries.len().saturating_sub(MEMO_LIMIT);
        self.entries.drain(..excess);
    }
}

/// Asks `invoked --version`.
fn ask_version(invoked: &Path, env: &[(String, String)], timeout: Duration) -> Answer {
    match run_version(invoked, env, timeout) {
        Ok(out) => {
            let witnesses = out
                .lines()
                .filter_map(|l| l.trim().strip_prefix("InstalledDir:"))
                .filter_map(|d| Stamp::of(Path::new(d.trim())))
                .collect();
            Answer { identity: Ok(identity_of(&out)), witnesses }
        }
        Err(how) => Answer { identity: Err(how), witnesses: Vec::new() },
    }
}

/// Runs `invoked --version` in its own process group: its output (stdout, or stderr when stdout
/// is empty), or how it failed.
fn run_version(invoked: &Path, env: &[(String, String)], timeout: Duration) -> Result<String, String> {
    let mut command = Command::new(invoked);
    command.arg("--version").env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    let (status, [stdout, stderr]) = crate::process::bounded(&mut command, timeout)?;
    if !status.success() {
        return Err(crate::process::describe_status(status));
    }
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    Ok(if stdout.trim().is_empty() { String::from_utf8_lossy(&stderr).into_owned() } else { stdout })
}

/// A tool's identity from its `--version` output: the first line of the normalised output and
/// the sha256 of all of it.
fn identity_of(output: &str) -> String {
    let text = normalise(output);
    match text.lines().next() {
        Some(first) => format!("{first} (sha256:{})", sha256_hex(text.as_bytes())),
        None => "no version output".into(),
    }
}

/// Lines trimmed at the end, blank lines at either end dropped, absolute paths replaced by
/// `<path>`.
fn normalise(output: &str) -> String {
    let lines: Vec<String> = output.lines().map(|l| scrub_paths(l.trim_end())).collect();
    let first = lines.iter().position(|l| !l.trim().is_empty()).unwrap_or(lines.len());
    let last = lines.iter().rposition(|l| !l.trim().is_empty()).map_or(first, |i| i + 1);
    lines[first..last].join("\n")
}

/// Replaces each absolute path of `line` by `<path>`: a `/` at the start of a word or after
/// `=`, `(`, `[`, `"`, `'`, `,` or `:` (but not `://`), up to whitespace or a closing
/// `)`, `]`, `"`, `'`, `,`, `;` or `:`.
fn scrub_paths(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i] == '/'
            && match i.checked_sub(1).map(|p| chars[p]) {
                None => true,
                Some(':') => chars.get(i + 1) != Some(&'/'),
                Some(c) => c.is_whitespace() || "=([\"',".contains(c),
            };
        if starts {
            while i < chars.len() && !chars[i].is_whitespace() && !")]\"',;:".contains(chars[i]) {
                i += 1;
            }
            out.push_str("<path>");
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// Why the toolchain input changed, per tool when both sides name their tools.
fn toolchain_changes(old: &str, new: &str) -> Vec<String> {
    let per_tool = |t: &str| -> Option<BTreeMap<String, String>> {
        t.lines().map(|l| l.split_once(": ").map(|(k, v)| (k.to_string(), v.to_string()))).collect()
    };
    let generic = vec!["host toolchain changed".to_string()];
    let (Some(old), Some(new)) = (per_tool(old), per_tool(new)) else { return generic };
    // The readable part of an identity: without its digest.
    let shown = |id: &str| id.rsplit_once(" (sha256:").map_or(id, |(first, _)| first).to_string();
    let absent = "absent".to_string();
    let mut why = Vec::new();
    for tool in old.keys().chain(new.keys()).collect::<std::collections::BTreeSet<_>>() {
        let (was, now) = (old.get(tool).unwrap_or(&absent), new.get(tool).unwrap_or(&absent));
        if was != now {
            why.push(if shown(was) == shown(now) {
                format!("host toolchain changed: {tool} prints another --version")
            } else {
                format!("host toolchain changed: {tool} \"{}\" -> \"{}\"", shown(was), shown(now))
            });
        }
    }
    if why.is_empty() {
        generic
    } else {
        why
    }
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
            host_os: "debian 12".into(),
            deps: BTreeMap::from([("clr".into(), "k1".into())]),
        }
    }

    #[test]
    fn the_host_distribution_is_in_the_key() {
        let deb =
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n";
        assert_eq!(os_of(deb), "debian 12");
        assert_eq!(os_of("ID=ubuntu\nVERSION_ID='24.04'\nID_LIKE=debian\n"), "ubuntu 24.04");
        assert_eq!(os_of("ID=arch\n"), "arch");
        assert_eq!(os_of("NAME=x\n"), "unknown");
        assert!(!host_os().is_empty());
        let mut other = inputs();
        other.host_os = "ubuntu 24.04".into();
        assert_ne!(other.key(), inputs().key(), "an artifact built on another distribution has another key");
        assert_eq!(other.explain_change(&inputs()), vec!["host distribution changed (debian 12 -> ubuntu 24.04)"]);
        // Inputs recorded by format 2 have no `host_os`: they still parse.
        let mut old = serde_json::to_value(inputs()).unwrap();
        old.as_object_mut().unwrap().remove("host_os");
        let old: KeyInputs = serde_json::from_value(old).unwrap();
        assert_eq!(old.host_os, "");
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

    #[test]
    fn toolchain_changes_name_the_tool() {
        let old = "cc: cc (Debian 12.2.0-14) 12.2.0 (sha256:aa)\nhipcc: absent";
        let new = "cc: cc (Debian 12.2.0-14+deb12u1) 12.2.0 (sha256:bb)\nhipcc: HIP version: 5.2 (sha256:cc)";
        assert_eq!(
            toolchain_changes(old, new),
            vec![
                "host toolchain changed: cc \"cc (Debian 12.2.0-14) 12.2.0\" -> \"cc (Debian 12.2.0-14+deb12u1) 12.2.0\"",
                "host toolchain changed: hipcc \"absent\" -> \"HIP version: 5.2\"",
            ]
        );
        let same_first_line = "cc: cc (Debian 12.2.0-14) 12.2.0 (sha256:cc)\nhipcc: absent";
        assert_eq!(
            toolchain_changes(old, same_first_line),
            vec!["host toolchain changed: cc prints another --version"]
        );
        // Format 1 kept a bare digest: nothing to name.
        assert_eq!(toolchain_changes(&"0".repeat(64), new), vec!["host toolchain changed"]);
        let mut a = inputs();
        a.format = 1;
        a.toolchain = "0".repeat(64);
        let mut b = inputs();
        b.toolchain = new.into();
        assert_eq!(
            b.explain_change(&a),
            vec![format!("cache format changed (1 -> {CACHE_FORMAT})"), "host toolchain changed".into()]
        );
    }

    #[test]
    fn paths_are_scrubbed_from_version_output() {
        let cases = [
            ("InstalledDir: /usr/lib/llvm-15/bin", "InstalledDir: <path>"),
            ("Configuration file: /opt/rocm-6.2.4/lib/llvm/bin/clang++.cfg", "Configuration file: <path>"),
            ("clang version 18.0.0 (/home/me/src/llvm-project 1234abcd)", "clang version 18.0.0 (<path> 1234abcd)"),
            (
                "AMD clang version 18.0.0git (https://github.com/RadeonOpenCompute/llvm-project roc-6.2.4 24355)",
                "AMD clang version 18.0.0git (https://github.com/RadeonOpenCompute/llvm-project roc-6.2.4 24355)",
            ),
            (
                "Configured with: ../configure --prefix=/opt/gcc-13 --with-x",
                "Configured with: ../configure --prefix=<path> --with-x",
            ),
            ("search: /a/b:/c, '/d' [/e]", "search: <path>:<path>, '<path>' [<path>]"),
            ("cmake version 3.25.1", "cmake version 3.25.1"),
            ("and/or 1/2", "and/or 1/2"),
        ];
        for (line, want) in cases {
            assert_eq!(scrub_paths(line), want, "{line}");
        }
        assert_eq!(
            normalise("\r\n\ncmake version 3.25.1  \r\n\r\nCMake suite\n\n"),
            "cmake version 3.25.1\n\nCMake suite"
        );
        let a = identity_of("Debian clang version 15.0.6\nTarget: x86_64-pc-linux-gnu\nInstalledDir: /usr/bin\n");
        let b = identity_of("Debian clang version 15.0.6\nTarget: x86_64-pc-linux-gnu\nInstalledDir: /tmp/x/bin\n");
        assert_eq!(a, b);
        assert!(a.starts_with("Debian clang version 15.0.6 (sha256:"), "{a}");
        assert_ne!(a, identity_of("Debian clang version 15.0.6\nTarget: aarch64-linux-gnu\n"));
        assert_eq!(identity_of("\n \n"), "no version output");
    }

    /// A shell-script tool in `dir` (written through a temp name: never executed half-written).
    fn tool(dir: &Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }

    struct Tools {
        _tmp: tempfile::TempDir,
        bin: PathBuf,
        state: PathBuf,
        runs: PathBuf,
    }

    impl Tools {
        fn new() -> Tools {
            let tmp = tempfile::tempdir().unwrap();
            let (bin, state, runs) = (tmp.path().join("bin"), tmp.path().join("state"), tmp.path().join("runs"));
            std::fs::create_dir_all(&bin).unwrap();
            Tools { _tmp: tmp, bin, state, runs }
        }
        /// A `cc` that counts its runs in `runs` (outside its directory) and prints `version`.
        fn cc(&self, version: &str) -> PathBuf {
            tool(&self.bin, "cc", &format!("echo run >> '{}'\necho '{version}'", self.runs.display()))
        }
        fn runs(&self) -> usize {
            std::fs::read_to_string(&self.runs).map(|s| s.lines().count()).unwrap_or(0)
        }
        fn identity(&self) -> String {
            toolchain_identity(&self.bin.display().to_string(), &self.state)
        }
    }

    #[test]
    fn identity_is_asked_once_and_asked_again_when_the_tool_changes() {
        use std::time::SystemTime;
        let t = Tools::new();
        let cc = t.cc("cc (Test) 1.0");
        let first = t.identity();
        assert_eq!(t.runs(), 1);
        let lines: Vec<&str> = first.lines().collect();
        assert_eq!(lines.len(), TOOLS.len());
        assert!(lines[0].starts_with("cc: cc (Test) 1.0 (sha256:"), "{first}");
        assert_eq!(lines[1..], ["c++: absent", "cmake: absent", "ninja: absent", "hipcc: absent", "clang: absent"]);
        assert!(t.state.join(MEMO_FILE).is_file());

        // The memo answers: the tool is not run again.
        assert_eq!(t.identity(), first);
        assert_eq!(t.runs(), 1);

        // Edited in place (size and mtime change): asked again.
        let mut f = std::fs::OpenOptions::new().append(true).open(&cc).unwrap();
        std::io::Write::write_all(&mut f, b"# a comment\n").unwrap();
        drop(f);
        assert_eq!(t.identity(), first);
        assert_eq!(t.runs(), 2);
        assert_eq!(t.identity(), first);
        assert_eq!(t.runs(), 2);

        // Only its mtime set: asked again.
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        std::fs::File::options().write(true).open(&cc).unwrap().set_modified(old).unwrap();
        assert_eq!(t.identity(), first);
        assert_eq!(t.runs(), 3);

        // Replaced by another file of the same size and mtime (a new inode): asked again, and
        // the new answer is the new identity.
        let before = std::fs::metadata(&cc).unwrap();
        let text = std::fs::read_to_string(&cc).unwrap().replace("1.0", "2.0");
        tool(&t.bin, "cc", text.trim_start_matches("#!/bin/sh\n").trim_end());
        std::fs::File::options().write(true).open(&cc).unwrap().set_modified(old).unwrap();
        let after = std::fs::metadata(&cc).unwrap();
        assert_eq!((before.len(), before.modified().unwrap()), (after.len(), after.modified().unwrap()));
        assert_ne!(before.ino(), after.ino());
        let second = t.identity();
        assert_eq!(t.runs(), 4);
        assert!(second.starts_with("cc: cc (Test) 2.0 (sha256:"), "{second}");
        assert_eq!(t.identity(), second);
        assert_eq!(t.runs(), 4);

        // A damaged memo is ignored (and replaced).
        std::fs::write(t.state.join(MEMO_FILE), "{not json").unwrap();
        assert_eq!(t.identity(), second);
        assert_eq!(t.runs(), 5);
        assert_eq!(t.identity(), second);
        assert_eq!(t.runs(), 5);
    }

    #[test]
    fn where_the_tool_lies_is_not_its_identity() {
        let (a, b) = (Tools::new(), Tools::new());
        a.cc("cc (Test) 1.0");
        b.cc("cc (Test) 1.0");
        std::fs::File::options()
            .write(true)
            .open(b.bin.join("cc"))
            .unwrap()
            .set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(86_400))
            .unwrap();
        // The scripts differ only in where they count their runs: not in their output.
        assert_eq!(a.identity(), b.identity());
        assert!(!a.identity().contains(&a.bin.display().to_string()));
    }

    #[test]
    fn failing_tools_are_recorded_and_not_remembered() {
        let t = Tools::new();
        tool(&t.bin, "cc", &format!("echo run >> '{}'\necho 'half a banner'\nexit 3", t.runs.display()));
        tool(&t.bin, "cmake", "kill -9 $$");
        tool(&t.bin, "ninja", "echo 'ninja: read-only' >&2");
        // Not executable, and a directory: both skipped like a shell skips them.
        std::fs::write(t.bin.join("hipcc"), "#!/bin/sh\necho 1\n").unwrap();
        std::fs::create_dir(t.bin.join("clang")).unwrap();
        let id = t.identity();
        let lines: Vec<&str> = id.lines().collect();
        assert_eq!(lines[0], "cc: failed (exit status 3)");
        assert_eq!(lines[2], "cmake: failed (killed by signal 9)");
        // Nothing on stdout: stderr is the answer.
        assert!(lines[3].starts_with("ninja: ninja: read-only (sha256:"), "{id}");
        assert_eq!(lines[4], "hipcc: absent");
        assert_eq!(lines[5], "clang: absent");
        assert_eq!(t.identity(), id);
        assert_eq!(t.runs(), 2, "a failure is asked again");
    }

    #[test]
    fn a_tool_that_does_not_answer_is_stopped() {
        let t = Tools::new();
        // PATH holds only `bin`: commands by their full path.
        tool(&t.bin, "cc", "exec /bin/sleep 30");
        tool(&t.bin, "c++", "echo 'c++ (Test) 1.0'; /bin/sleep 30 &");
        let start = std::time::Instant::now();
        let id = toolchain_identity_within(&t.bin.display().to_string(), &t.state, Duration::from_millis(300));
        assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
        let lines: Vec<&str> = id.lines().collect();
        assert_eq!(lines[0], "cc: failed (no answer within 0.3 s)");
        // It answered but left a process holding its output open.
        assert_eq!(lines[1], "c++: failed (no answer within 0.3 s)");
    }
}
