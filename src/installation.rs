//! An installed ROCm (`--rocm-path`, config `rocm-path`, `ROCMFORGE_ROCM_PATH`): the short
//! night builds on it and takes from it only what may stand in for a recipe.
//!
//! # Layouts
//!
//! - **ROCm's own** (AMD's packages under `/opt/rocm-X.Y.Z`, or a ROCm unpacked or built
//!   elsewhere the same way): `lib/`, `include/`, `llvm/`, `amdgcn/bitcode/`, and the release in
//!   `.info/version`, which every component shares.
//! - **Debian's and Ubuntu's own packages** (FHS, `--rocm-path /usr`): libraries and CMake
//!   packages under `lib/<multiarch>/` (`lib/x86_64-linux-gnu/cmake/rocblas/`), data of a
//!   library in a versioned folder (`lib/x86_64-linux-gnu/rocblas/<version>/library/`), LLVM and
//!   the device libraries under `lib/llvm-<N>/`. A recipe's `[external]` and `device-code`
//!   paths are written for ROCm's layout; [`Layout::candidates`] maps them. Each component's
//!   version is its package's, from the dpkg database of the root the installation lies in
//!   (`<root>/../var/lib/dpkg`): a distribution's packages need not share one version.
//!
//! # What may stand in for a recipe ([`Installation::decide`])
//!
//! Only a recipe with an `[external]` spec whose files are all there, and then only if (in this
//! order): the user did not ask to build it from source (`--from-source`); it has no patches
//! (a patched recipe is built; `--take-installed` takes it anyway and the plan says the fix is
//! missing); the component's version has the stack's major.minor (`6.2.x` for the 6.2 stack;
//! the patch level is shown, not compared; another version is refused, not built around,
//! unless `--accept-rocm-version X.Y` names it); and its installed `device-code` files carry
//! every requested target. Otherwise the recipe is built, and the plan says why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::offload::coverage::{self, Installed};
use crate::recipe::Recipe;
use crate::target::TargetSet;

/// How the installation's files are laid out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Layout {
    /// ROCm's own: `lib/`, `llvm/`, `.info/version`.
    Rocm,
    /// A distribution's packages: `lib/<multiarch>/`, `lib/llvm-<N>/`.
    Fhs { multiarch: String },
}

impl Layout {
    /// Where a path (or glob) written for ROCm's layout may lie in this one, most likely first.
    pub fn candidates(&self, rel: &str) -> Vec<String> {
        let rel = &any_clang_version(rel);
        let Layout::Fhs { multiarch: ma } = self else {
            return vec![rel.to_string()];
        };
        let (first, rest) = rel.split_once('/').unwrap_or((rel, ""));
        let under = |dir: String| if rest.is_empty() { dir } else { format!("{dir}/{rest}") };
        match first {
            "llvm" => vec![under("lib/llvm-*".into())],
            "amdgcn" => vec![
                under("lib/llvm-*/lib/clang/*/amdgcn".into()),
                under(format!("lib/{ma}/amdgcn")),
                under("share/amdgcn".into()),
            ],
            ".info" => Vec::new(),
            "lib" => {
                let mut out = vec![format!("lib/{ma}/{rest}")];
                if let Some(pkg) = rest.strip_prefix("cmake/") {
                    out.push(format!("lib/llvm-*/lib/cmake/{pkg}"));
                    // Arch-independent packages: Debian 12's rocm-device-libs 5.2.3 installs
                    // /usr/lib/cmake/AMDDeviceLibs.
                    out.push(format!("lib/{rest}"));
                } else if let Some((dir, inner)) = rest.split_once('/') {
                    // Debian keeps a library's data in a versioned folder: rocblas/<ver>/library.
                    out.push(format!("lib/{ma}/{dir}/*/{inner}"));
                }
                out
            }
            _ => vec![rel.to_string()],
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Layout::Rocm => "ROCm's layout".into(),
            Layout::Fhs { multiarch } => format!("a distribution's layout (lib/{multiarch}, versions from dpkg)"),
        }
    }
}

/// A component's version in the installation, and where it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Version {
    /// The release (`6.2.4`): Debian's upstream version, `.info/version`'s first part.
    pub release: String,
    /// `.info/version` or `dpkg: librocblas4 6.4.4-4`.
    pub from: String,
}

impl Version {
    /// `6.2` of `6.2.4`.
    pub fn major_minor(&self) -> String {
        major_minor(&self.release)
    }
}

/// `lib/clang/18/...` as `lib/clang/*/...`: clang's resource folder is named by its LLVM major
/// (LLVM 16 and later) or its full version (`15.0.0` in ROCm 5.4.3, `15.0.6` in Debian 12),
/// which an installation of another version (accepted with `--accept-rocm-version`) differs in.
fn any_clang_version(rel: &str) -> String {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut out: Vec<&str> = Vec::with_capacity(parts.len());
    let is_version = |p: &str| p.split('.').all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
    for (i, p) in parts.iter().enumerate() {
        let versioned = i >= 2 && parts[i - 1] == "clang" && parts[i - 2] == "lib" && is_version(p);
        out.push(if versioned && !p.is_empty() { "*" } else { p });
    }
    out.join("/")
}

fn major_minor(v: &str) -> String {
    v.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// What the user decided about an installed ROCm (global flags; [`Installation::decide`] reads it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Choices {
    /// Build these although the installation provides them (`--from-source`).
    pub from_source: BTreeSet<String>,
    /// Take these from the installation although they are patched (`--take-installed`).
    pub take_installed: BTreeSet<String>,
    /// Accept components of this major.minor (or `any`) in place of the stack's
    /// (`--accept-rocm-version`).
    pub accept_version: Option<String>,
}

/// What the installation does for one recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Taken: the recipe is not built. `identity` goes into its key (the version and the
    /// sha256 of the files it takes, never where they lie).
    Take { reason: String, identity: String },
    /// Built from source; why the installation's copy does not stand in.
    Build(String),
    /// Built from source: the installation lacks it (what is absent).
    Absent(String),
    /// Not built and not taken: the installation holds another version; `accept` is what
    /// `--accept-rocm-version` takes for it (its major.minor, or `any` when none was found).
    Refuse { reason: String, accept: String },
}

/// The multiarch folders of a distribution's layout (`lib/<multiarch>/`) rocmforge knows.
pub const MULTIARCH: [&str; 2] = ["x86_64-linux-gnu", "aarch64-linux-gnu"];

/// An installed ROCm, opened once per plan.
#[derive(Debug)]
pub struct Installation {
    pub root: PathBuf,
    pub layout: Layout,
    /// ROCm's layout: the release `.info/version` names (`6.2.4-116` gives `6.2.4`).
    pub release: Option<String>,
    dpkg: Option<crate::host::dpkg::Database>,
    memo: Mutex<Memo>,
}

impl Installation {
    /// Reads what the installation at `path` is (nothing is walked yet). File digests and the
    /// GPU targets found are remembered in `state_dir` by path, size, mtime and inode.
    pub fn open(path: &Path, state_dir: &Path) -> Installation {
        let root = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let release = std::fs::read_to_string(root.join(".info/version"))
            .ok()
            .and_then(|t| t.lines().next().map(str::trim).map(String::from))
            .filter(|v| !v.is_empty())
            .map(|v| v.split('-').next().unwrap_or(&v).to_string());
        let multiarch = MULTIARCH.into_iter().find(|m| root.join("lib").join(m).is_dir());
        let (layout, dpkg) = match (&release, multiarch) {
            (None, Some(ma)) => {
                let sysroot = root.parent().unwrap_or(Path::new("/"));
                (
                    Layout::Fhs { multiarch: ma.to_string() },
                    crate::host::dpkg::Database::read(&sysroot.join("var/lib/dpkg")),
                )
            }
            _ => (Layout::Rocm, None),
        };
        let memo = Memo::load(state_dir);
        Installation { root, layout, release, dpkg, memo: Mutex::new(memo) }
    }

    /// `/opt/rocm-6.2.4 (ROCm's layout, release 6.2.4)`.
    pub fn describe(&self) -> String {
        let version = match (&self.release, &self.dpkg) {
            (Some(r), _) => format!(", release {r} from .info/version"),
            (None, Some(_)) => String::new(),
            (None, None) if matches!(self.layout, Layout::Fhs { .. }) => ", no dpkg database: versions unknown".into(),
            (None, None) => ", no .info/version: version unknown".into(),
        };
        format!("{} ({}{version})", self.root.display(), self.layout.describe())
    }

    /// The installed files a path or glob written for ROCm's layout matches: the first of the
    /// layout's candidates that matches anything (relative to the root, sorted).
    pub fn matching(&self, rel: &str) -> Vec<String> {
        for c in self.layout.candidates(rel) {
            let mut found = coverage::matching(&Installed::Tree(&self.root), &c).unwrap_or_default();
            if !found.is_empty() {
                found.sort();
                return found;
            }
        }
        Vec::new()
    }

    /// What a runtime wheel takes for a path or glob written for ROCm's layout: (its path in the
    /// wheel, the file). A literal path is one file, the newest the layout holds
    /// (`lib/llvm-21/bin/ld.lld` over `lib/llvm-19/...`), kept at the path as written, where a
    /// profile may name it (`rocmforge_rocm/llvm/bin/ld.lld`); a glob's matches keep the
    /// installation's own paths, since its libraries find their data from where they lie.
    /// `llvm` is the taken LLVM's folder (the plan's `{rocm_llvm}`), when the plan has one: an
    /// `llvm/...` path is looked for there first, so the wheel's ld.lld is the compiler's own.
    pub fn runtime_wheel_files(&self, rel: &str, llvm: Option<&Path>) -> Vec<(String, PathBuf)> {
        if !rel.contains(['*', '?', '[', '{']) {
            let taken = llvm.zip(rel.strip_prefix("llvm/")).map(|(d, r)| d.join(r)).filter(|p| p.is_file());
            return taken
                .or_else(|| self.locate(rel).filter(|p| p.is_file()))
                .map(|p| (rel.to_string(), p))
                .into_iter()
                .collect();
        }
        self.matching(rel).into_iter().map(|m| (m.clone(), self.root.join(m))).collect()
    }

    /// One file or folder written for ROCm's layout (`lib/cmake/hip`, `llvm`): where it lies,
    /// the newest of several (`lib/llvm-21` over `lib/llvm-19`).
    pub fn locate(&self, rel: &str) -> Option<PathBuf> {
        for c in self.layout.candidates(rel) {
            let mut hits: Vec<PathBuf> = if !c.contains('*') {
                Some(self.root.join(&c)).filter(|p| p.exists()).into_iter().collect()
            } else {
                // Files and folders alike (`lib/llvm-*`), below the pattern's literal folders.
                let Ok(m) = coverage::matcher(&c) else { continue };
                let walk = walkdir::WalkDir::new(self.root.join(coverage::literal_dirs(&c))).min_depth(1);
                match coverage::walk_depth(&c) {
                    Some(depth) => walk.max_depth(depth),
                    None => walk,
                }
                .into_iter()
                .filter_map(Result::ok)
                .filter(|e| m.is_match(e.path().strip_prefix(&self.root).unwrap_or(e.path())))
                .map(|e| e.into_path())
                .collect()
            };
            hits.sort_by(|a, b| crate::wheel::natural_cmp(&a.to_string_lossy(), &b.to_string_lossy()));
            if let Some(p) = hits.pop() {
                return Some(p);
            }
        }
        None
    }

    /// The component's version: the release of ROCm's layout, or the dpkg package that owns
    /// the first of `files` (relative to the root).
    pub fn version_of(&self, files: &[String]) -> Option<Version> {
        if let Some(r) = &self.release {
            return Some(Version { release: r.clone(), from: ".info/version".into() });
        }
        let dpkg = self.dpkg.as_ref()?;
        files.iter().find_map(|f| {
            let abs = Path::new("/").join(self.root.file_name()?).join(f);
            let pkg = dpkg.owner(&abs.to_string_lossy())?;
            let version = dpkg.versions.get(pkg)?;
            Some(Version { release: upstream_version(version), from: format!("dpkg: {pkg} {version}") })
        })
    }

    /// What the installation does for `r` (`None`: the recipe has no `[external]`).
    /// `targets`: the GPU targets the recipe would be built for (`None`: host only).
    pub fn decide(
        &self,
        r: &Recipe,
        stack_version: &str,
        targets: Option<&TargetSet>,
        choices: &Choices,
    ) -> Option<Decision> {
        let spec = r.external.as_ref()?;
        let mut wanted: Vec<&str> = spec.files.iter().map(String::as_str).collect();
        let cmake = spec.cmake_package.as_ref().map(|p| format!("lib/cmake/{p}"));
        wanted.extend(cmake.as_deref());
        let mut found = Vec::new();
        let mut absent = Vec::new();
        for w in wanted {
            match self.locate(w) {
                Some(p) => found.push((w, p)),
                None => absent.push(w),
            }
        }
        let at = self.root.display();
        if !absent.is_empty() {
            return Some(Decision::Absent(format!("not in the installation at {at} ({} absent)", absent.join(", "))));
        }
        if choices.from_source.contains(&r.name) {
            return Some(Decision::Build(format!("--from-source (the installation at {at} has it)")));
        }
        let patches: Vec<String> = r.patches.iter().map(|p| p.name.clone()).collect();
        let take_patched = choices.take_installed.contains(&r.name);
        if !patches.is_empty() && !take_patched {
            return Some(Decision::Build(format!(
                "patched ({}); the installation's copy lacks the fix (`--take-installed {}` takes it anyway)",
                patches.join(", "),
                r.name
            )));
        }
        let rel_found: Vec<String> =
            found.iter().map(|(_, p)| p.strip_prefix(&self.root).unwrap_or(p).to_string_lossy().into_owned()).collect();
        let version = self.version_of(&rel_found);
        let wants = major_minor(stack_version);
        // `--accept-rocm-version 6.4,7.0`: a distribution's components need not share a version.
        let accepted = |v: &str| match choices.accept_version.as_deref() {
            Some("any") => true,
            Some(a) => a.split(',').any(|a| major_minor(a.trim()) == v),
            None => false,
        };
        match &version {
            Some(v) if v.major_minor() == wants || accepted(&v.major_minor()) => {}
            None if choices.accept_version.as_deref() == Some("any") => {}
            Some(v) => {
                return Some(Decision::Refuse {
                    reason: format!(
                        "the installation at {at} has {} {} ({}); the stack needs {wants}.x. Pass `--accept-rocm-version {}` to take it anyway, or `--from-source {}` to build it",
                        r.name, v.release, v.from, v.major_minor(), r.name
                    ),
                    accept: v.major_minor(),
                })
            }
            None => {
                return Some(Decision::Refuse {
                    reason: format!(
                    "the installation at {at} has {} but says no version (no .info/version, no dpkg package owns {}); the stack needs {wants}.x. Pass `--accept-rocm-version any` to take it anyway, or `--from-source {}`",
                    r.name,
                    rel_found.first().map(String::as_str).unwrap_or("its files"),
                    r.name
                ),
                    accept: "any".into(),
                })
            }
        }
        if let Some(t) = targets {
            let required: Vec<&str> = t.names().iter().map(|n| crate::offload::processor(n)).collect();
            for pattern in &r.targets.device_code {
                let files = self.matching(pattern);
                let mut carried: BTreeSet<String> = BTreeSet::new();
                for f in &files {
                    carried.extend(self.targets_in(f));
                }
                let missing: Vec<&str> = required.iter().copied().filter(|t| !carried.contains(*t)).collect();
                if files.is_empty() || !missing.is_empty() {
                    let found = if carried.is_empty() {
                        "no GPU code".to_string()
                    } else {
                        carried.into_iter().collect::<Vec<_>>().join(", ")
                    };
                    let mapped = self.layout.candidates(pattern).join(" or ");
                    return Some(Decision::Build(if files.is_empty() {
                        format!("the installed {} has no file at {mapped}", r.name)
                    } else {
                        format!(
                            "the installed {} has no {} code in {mapped} ({} file(s) carry {found})",
                            r.name,
                            missing.join(", "),
                            files.len()
                        )
                    }));
                }
            }
        }
        let mut identity = version.as_ref().map(|v| v.release.clone()).unwrap_or_else(|| "unknown".into());
        let mut digests = String::new();
        for (w, p) in &found {
            for (rel, sha) in self.digests_below(p) {
                digests.push_str(&format!("{w}{rel} {sha}\n"));
            }
        }
        identity.push_str(&format!("@sha256:{}", crate::digest::sha256_hex(digests.as_bytes())));
        let shown = rel_found.join(", ");
        let v = version.map(|v| format!(" ({} {}, {})", r.name, v.release, v.from)).unwrap_or_default();
        let reason = if take_patched && !patches.is_empty() {
            format!(
                "provided by {at}{v}: {shown}; WITHOUT its patches ({}): the fix is missing (--take-installed)",
                patches.join(", ")
            )
        } else {
            format!("provided by {at}{v}: {shown}")
        };
        Some(Decision::Take { reason, identity })
    }

    /// The GPU targets (processors) an installed file carries (read with its digest, once per
    /// stat).
    fn targets_in(&self, rel: &str) -> Vec<String> {
        let path = self.root.join(rel);
        self.remembered(&path).targets
    }

    /// `(path below p, sha256)` of `p` (a file) or of every file below it (a folder).
    fn digests_below(&self, p: &Path) -> Vec<(String, String)> {
        if p.is_file() {
            return vec![(String::new(), self.remembered(p).sha256)];
        }
        let mut out = Vec::new();
        for e in walkdir::WalkDir::new(p).min_depth(1).sort_by_file_name().into_iter().filter_map(Result::ok) {
            if e.path().is_file() {
                let rel = e.path().strip_prefix(p).unwrap_or(e.path()).to_string_lossy();
                out.push((format!("/{rel}"), self.remembered(e.path()).sha256));
            }
        }
        out
    }

    fn remembered(&self, path: &Path) -> Remembered {
        let stat = Stat::of(path);
        let key = path.display().to_string();
        {
            let memo = self.memo.lock().expect("memo lock");
            if let Some(r) = memo.files.get(&key).filter(|r| r.stat == stat) {
                return r.clone();
            }
        }
        let bytes = std::fs::read(path).unwrap_or_default();
        let mut found: Vec<String> = crate::offload::inspect_bytes(&key, &bytes)
            .ok()
            .flatten()
            .map(|i| i.targets.iter().map(|t| crate::offload::processor(t).to_string()).collect())
            .unwrap_or_default();
        found.sort();
        found.dedup();
        let r = Remembered { stat, sha256: crate::digest::sha256_hex(&bytes), targets: found };
        let mut memo = self.memo.lock().expect("memo lock");
        memo.files.insert(key, r.clone());
        memo.changed = true;
        r
    }

    /// Writes what was learned (digests, targets) for the next plan.
    pub fn save(&self) {
        if let Ok(memo) = self.memo.lock() {
            memo.save();
        }
    }
}

impl Installation {
    /// Where its libraries lie (`lib`, or `lib/<multiarch>` in a distribution's layout).
    pub fn lib_dir(&self) -> PathBuf {
        match &self.layout {
            Layout::Rocm => self.root.join("lib"),
            Layout::Fhs { multiarch } => self.root.join("lib").join(multiarch),
        }
    }
}

/// Which copy of each library a process loads when the prefix's `lib` comes first in
/// `LD_LIBRARY_PATH` and the installation's libraries hold the same names: one line per name
/// both hold, and a warning per installed library whose own search path would still pull the
/// installation's copy (`DT_RPATH` is searched before `LD_LIBRARY_PATH`; `DT_RUNPATH` only
/// counts for a process started without it).
pub fn loads(prefix_lib: &Path, installed_lib: &Path) -> (Vec<String>, Vec<String>) {
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".so"))
            .collect()
    };
    let ours = names(prefix_lib);
    let both: Vec<String> = names(installed_lib).into_iter().filter(|n| ours.contains(n)).collect();
    let mut lines = Vec::new();
    for n in &both {
        lines.push(format!(
            "{n}: {}'s copy loads (first in LD_LIBRARY_PATH); {} is not used",
            prefix_lib.display(),
            installed_lib.join(n).display()
        ));
    }
    let mut warnings = Vec::new();
    if both.is_empty() {
        return (lines, warnings);
    }
    for lib in names(installed_lib) {
        let path = installed_lib.join(&lib);
        if ours.contains(&lib) || path.is_symlink() {
            continue;
        }
        let Some(d) = crate::offload::elf::dynamic(&path) else { continue };
        for need in d.needed.iter().filter(|n| both.contains(n)) {
            let holds = |dirs: &[String]| dirs.iter().find(|dir| Path::new(dir).join(need).exists()).cloned();
            if let Some(dir) = holds(&d.rpath) {
                warnings.push(format!(
                    "{} needs {need} and its DT_RPATH {dir} is searched before LD_LIBRARY_PATH: it loads the installation's {need}, not the prefix's rebuilt one (unless a library loaded first already brought the prefix's)",
                    path.display()
                ));
            } else if let Some(dir) = holds(&d.runpath) {
                lines.push(format!(
                    "{lib} needs {need}: under these lines the prefix's loads; a process started without them follows its RUNPATH {dir} to the installation's copy"
                ));
            }
        }
    }
    (lines, warnings)
}

/// Debian's `1:6.4.3+dfsg-1+b1` is upstream `6.4.3`: no epoch, no revision, no repack suffix.
pub fn upstream_version(v: &str) -> String {
    let v = v.split_once(':').map(|(_, r)| r).unwrap_or(v);
    let v = v.rsplit_once('-').map(|(u, _)| u).unwrap_or(v);
    v.split(['+', '~']).next().unwrap_or(v).to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Stat {
    size: u64,
    mtime_ns: i128,
    ino: u64,
}

impl Stat {
    fn of(p: &Path) -> Stat {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(p) {
            Ok(m) => Stat {
                size: m.size(),
                mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
                ino: m.ino(),
            },
            Err(_) => Stat { size: 0, mtime_ns: 0, ino: 0 },
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Remembered {
    stat: Stat,
    sha256: String,
    /// The GPU processors it carries (empty: no device code).
    targets: Vec<String>,
}

/// `<state-dir>/installation-files.json`: what was read of installed files, by stat. A local
/// memo: stats decide when to read again, never what a key says.
#[derive(Debug, Default)]
struct Memo {
    path: Option<PathBuf>,
    files: BTreeMap<String, Remembered>,
    changed: bool,
}

impl Memo {
    fn load(state_dir: &Path) -> Memo {
        let path = state_dir.join("installation-files.json");
        let files = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        Memo { path: Some(path), files, changed: false }
    }

    fn save(&self) {
        if let (true, Some(p)) = (self.changed, &self.path) {
            if let Ok(bytes) = serde_json::to_vec(&self.files) {
                let _ = crate::fsutil::write_atomic(p, &bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_versions_to_upstream_releases() {
        assert_eq!(upstream_version("6.4.3+dfsg-1+b1"), "6.4.3");
        assert_eq!(upstream_version("6.4.4-4"), "6.4.4");
        assert_eq!(upstream_version("1:21.1.8-14"), "21.1.8");
        assert_eq!(upstream_version("5.2.3-3"), "5.2.3");
        assert_eq!(upstream_version("7.0.2~rc1-1"), "7.0.2");
    }

    #[test]
    fn rocm_paths_map_to_a_distribution_layout() {
        let fhs = Layout::Fhs { multiarch: "x86_64-linux-gnu".into() };
        assert_eq!(fhs.candidates("lib/cmake/rocblas")[0], "lib/x86_64-linux-gnu/cmake/rocblas");
        assert_eq!(
            fhs.candidates("lib/rocblas/library/*.co"),
            vec!["lib/x86_64-linux-gnu/rocblas/library/*.co", "lib/x86_64-linux-gnu/rocblas/*/library/*.co"]
        );
        assert_eq!(fhs.candidates("llvm/bin/clang"), vec!["lib/llvm-*/bin/clang"]);
        assert_eq!(fhs.candidates("include/hip/hip_runtime.h"), vec!["include/hip/hip_runtime.h"]);
        assert!(fhs.candidates(".info/version").is_empty());
        assert_eq!(Layout::Rocm.candidates("lib/cmake/hip"), vec!["lib/cmake/hip"]);
        assert_eq!(
            Layout::Rocm.candidates("llvm/lib/clang/18/lib/linux/libclang_rt.builtins-x86_64.a"),
            vec!["llvm/lib/clang/*/lib/linux/libclang_rt.builtins-x86_64.a"]
        );
        assert_eq!(
            fhs.candidates("llvm/lib/clang/18/lib/linux/x.a"),
            vec!["lib/llvm-*/lib/clang/*/lib/linux/x.a"],
            "Debian's lib/llvm-21/lib/clang/21"
        );
        assert_eq!(fhs.candidates("share/clang/18/x"), vec!["share/clang/18/x"], "only clang's resource folder");
    }

    #[test]
    fn the_newest_llvm_is_located() {
        let d = tempfile::tempdir().unwrap();
        for v in ["9", "21", "19"] {
            std::fs::create_dir_all(d.path().join(format!("usr/lib/llvm-{v}/bin"))).unwrap();
            std::fs::write(d.path().join(format!("usr/lib/llvm-{v}/bin/clang")), "").unwrap();
        }
        std::fs::create_dir_all(d.path().join("usr/lib/x86_64-linux-gnu")).unwrap();
        let i = Installation::open(&d.path().join("usr"), d.path());
        assert_eq!(i.layout, Layout::Fhs { multiarch: "x86_64-linux-gnu".into() });
        assert_eq!(i.locate("llvm/bin/clang").unwrap(), d.path().join("usr/lib/llvm-21/bin/clang"));
        assert_eq!(i.locate("llvm").unwrap(), d.path().join("usr/lib/llvm-21"));
        assert!(i.locate("llvm/bin/lld").is_none());
    }

    /// Issue 38: under `--rocm-path /usr` the runtime wheel's `llvm/bin/ld.lld` (Triton's linker,
    /// named by the profile at `rocmforge_rocm/llvm/bin/ld.lld`) is the taken LLVM's (else the newest), once, at
    /// ROCm's path; a library glob keeps the distribution's folder.
    #[test]
    fn a_runtime_wheels_literal_path_is_the_newest_file_at_rocms_path_and_a_glob_keeps_the_installations() {
        let d = tempfile::tempdir().unwrap();
        for v in ["19", "21"] {
            std::fs::create_dir_all(d.path().join(format!("usr/lib/llvm-{v}/bin"))).unwrap();
            std::fs::write(d.path().join(format!("usr/lib/llvm-{v}/bin/ld.lld")), v).unwrap();
        }
        let lib = d.path().join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libamd_comgr.so.3"), "").unwrap();
        let i = Installation::open(&d.path().join("usr"), d.path());
        assert_eq!(
            i.runtime_wheel_files("llvm/bin/ld.lld", None),
            vec![("llvm/bin/ld.lld".to_string(), d.path().join("usr/lib/llvm-21/bin/ld.lld"))]
        );
        // The taken LLVM's own, when the plan took an older one.
        let taken = d.path().join("usr/lib/llvm-19");
        assert_eq!(
            i.runtime_wheel_files("llvm/bin/ld.lld", Some(taken.as_path())),
            vec![("llvm/bin/ld.lld".to_string(), taken.join("bin/ld.lld"))]
        );
        assert_eq!(
            i.runtime_wheel_files("lib/libamd_comgr.so*", None),
            vec![("lib/x86_64-linux-gnu/libamd_comgr.so.3".to_string(), lib.join("libamd_comgr.so.3"))]
        );
        assert!(i.runtime_wheel_files("llvm/bin/llvm-mc", Some(taken.as_path())).is_empty());
    }
}
