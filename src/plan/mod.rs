//! The plan: the resolved build. Per recipe of the closure, in build order: what will be built
//! from what (source identity, patches), for which targets, its cache key and the inputs behind
//! it, its work dir, and its status with the reason. `plan` prints it; the engine carries it out
//! and decides nothing the plan already decided, including the order in which ready recipes
//! start (`night`: longest remaining path first) and the night's estimated length.

pub mod night;
mod render;
mod resolve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::installation::{Choices, Installation};
use crate::key::{self, CacheKey, KeyInputs};
use crate::layout::WorkDir;
use crate::recipe::{PinFrom, Recipe, SourceSpec, TargetDecision};
use crate::target::TargetSet;
use night::{Night, Order, Task, Work};

/// The state `plan` shows (and `--json` prints, kebab-case).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Not built yet (no cached artifact), or a source tree to prepare.
    NotBuilt,
    /// A cached artifact matches the recipe's key.
    Cached,
    /// The remote cache has a signed artifact for the key: downloaded, not built.
    RemoteHit,
    /// Will be rebuilt; the reason says what changed.
    Rebuild,
    /// Provided by an installed ROCm (`--rocm-path`).
    External,
    /// Not built for these targets (the recipe says so).
    Skipped,
    /// Cannot be built: an unlocked source, or unsupported targets with no fallback.
    Blocked,
}

impl State {
    pub fn as_str(&self) -> &'static str {
        match self {
            State::NotBuilt => "not built",
            State::Cached => "cached",
            State::RemoteHit => "remote hit",
            State::Rebuild => "rebuild",
            State::External => "external",
            State::Skipped => "skipped",
            State::Blocked => "blocked",
        }
    }
}

/// What the build will do with a recipe, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Deploy the cached artifact.
    Cached,
    /// Download the artifact from the remote cache at this URL, then deploy it.
    Remote(String),
    /// Build it. `reasons` is empty when it was never built; `forced` by `--rebuild`.
    Build { reasons: Vec<String>, forced: bool },
    /// A source tree only; prepared when a dependent builds.
    SourceOnly,
    /// Not built for these targets.
    Skipped(String),
    /// Provided by the installed ROCm; the reason says by what.
    External(String),
    /// The installed ROCm holds another version of it (`installation::Decision::Refuse`).
    Refused(String),
    /// Its git source has no pinned commit.
    Unlocked,
    /// None of the requested targets is supported and there is no fallback.
    Unsupported(String),
}

/// A recipe's pin as `plan` shows it: what pins the source, where that came from, and who else
/// states it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PinInfo {
    /// `rev <40 hex>` or `sha256 <64 hex>`.
    pub pin: String,
    pub from: PinFrom,
    /// The recipe's `[source] witness`.
    pub witness: Option<String>,
}

impl PinInfo {
    fn of(r: &Recipe) -> Option<PinInfo> {
        Some(PinInfo { pin: r.source.pin()?, from: r.pin_from.clone()?, witness: r.witness.clone() })
    }

    /// `rev 0123... (recipe; witness: ...)`.
    pub fn describe(&self) -> String {
        let from = match &self.from {
            PinFrom::Recipe => "recipe".to_string(),
            PinFrom::LockFile { path } => format!("lock file {path}"),
        };
        match &self.witness {
            Some(w) => format!("{} ({from}; witness: {w})", self.pin),
            None => format!("{} ({from}; no witness named)", self.pin),
        }
    }
}

/// One recipe of the plan. Its `state` and `reason` are derived from its `status` (and key):
/// `--json` shows them after the fields below.
#[derive(Debug, Clone, Serialize)]
#[serde(remote = "Self")]
pub struct PlanEntry {
    pub name: String,
    pub version: String,
    pub system: &'static str,
    pub source: SourceSpec,
    pub locked: bool,
    /// The source's pin and where it came from (`None`: unpinned, or no source of its own).
    pub pin: Option<PinInfo>,
    pub patches: Vec<String>,
    /// Its checks after install (`[[check]]` names) and how many needs of its consumers it
    /// answers for (`[[provides]]`): both run before its artifact is stored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    pub provides: usize,
    pub deps: Vec<String>,
    pub wave: usize,
    pub targets: TargetDecision,
    pub key: CacheKey,
    /// What the key hashes (`rocmforge plan --json` shows why two keys differ).
    pub inputs: KeyInputs,
    /// The recipe's work dir (source tree, build dir, step logs).
    pub work_dir: PathBuf,
    /// Its build's work in the night's model (nothing when it builds nothing), and from what:
    /// "last build" (all serial: measured at the jobs it had), "recipe" (`[estimate]`),
    /// "default" (`night::DEFAULT_ESTIMATE_SECS`).
    pub estimate: Work,
    pub estimate_from: &'static str,
    /// The part of `estimate` that is its `[[check]]`s' (their `estimate`, per requested target).
    pub checks_estimate: Work,
    /// What its build downloads and the disk it takes (`[estimate]`; 0 when unknown or when it
    /// builds nothing).
    pub download_mb: f64,
    pub disk_gb: f64,
    /// Its longest remaining path: its estimate plus the longest chain of dependents after it.
    pub priority_secs: f64,
    /// Ready recipes start lowest rank first (the plan's `schedule` order).
    pub rank: usize,
    /// It builds on the installed ROCm: something it depends on (transitively) is taken from
    /// there, so `{rocm}` is the installation, not the prefix.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub on_installation: bool,
    #[serde(skip)]
    pub status: Status,
    /// With an installed ROCm, for a recipe it builds: why the installation does not stand in
    /// for it (`installation::Decision::Build` or `Absent`), said after the reason.
    #[serde(skip)]
    pub not_taken: Option<String>,
}

impl Serialize for PlanEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// The derived fields (`#[serde(remote = "Self")]` makes the derive an inherent function).
        struct Fields<'a>(&'a PlanEntry);
        impl Serialize for Fields<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                PlanEntry::serialize(self.0, s)
            }
        }
        #[derive(Serialize)]
        struct Shown<'a> {
            #[serde(flatten)]
            fields: Fields<'a>,
            state: State,
            reason: String,
        }
        Shown { fields: Fields(self), state: self.state(), reason: self.reason() }.serialize(s)
    }
}

impl PlanEntry {
    /// The state `plan` shows, from the status.
    pub fn state(&self) -> State {
        describe(&self.status, &self.key).0
    }

    /// Why it has its state, from the status (and, for a build, why the installation does not
    /// stand in for it).
    pub fn reason(&self) -> String {
        let reason = describe(&self.status, &self.key).1;
        match (&self.not_taken, self.builds()) {
            (Some(why), true) => format!("{reason}; built: {why}"),
            _ => reason,
        }
    }

    /// Will the build run this recipe's steps?
    pub fn builds(&self) -> bool {
        matches!(self.status, Status::Build { .. })
    }
    pub fn work(&self) -> WorkDir {
        WorkDir { root: self.work_dir.clone() }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub stack: String,
    pub rocm_version: String,
    pub requested: Vec<String>,
    pub targets: TargetSet,
    pub prefix: PathBuf,
    /// The installed ROCm providing components (`--rocm-path`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rocm_path: Option<PathBuf>,
    /// Where the taken toolchain lies in the installation (`{rocm_llvm}`,
    /// `{rocm_device_libs}`), when the recipes that make it are taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rocm_llvm: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rocm_device_libs: Option<PathBuf>,
    /// The CMake config folder of each package the taken recipes install (`[external]
    /// cmake-package`), where the installation keeps it: the steps get `<package>_DIR`, since
    /// `CMAKE_PREFIX_PATH` misses a distribution's `lib/llvm-21/lib/cmake/AMDDeviceLibs`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub taken_cmake_dirs: BTreeMap<String, PathBuf>,
    /// The versions (major.minor, or `any`) `--accept-rocm-version` must name to take every
    /// component the installation holds in another version: one list for a distribution whose
    /// packages differ.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accept_versions: Vec<String>,
    pub recipes: Vec<PlanEntry>,
    /// The order ready recipes start in (`ROCMFORGE_SCHEDULE` forces one; default critical-path).
    pub schedule: Order,
    /// The night's estimated length for a job budget (set by `ops::plan` for the machine's jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub night: Option<Night>,
    /// With an installed ROCm: the full night's estimate (nothing taken), shown beside this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_night_secs: Option<f64>,
}

/// What a plan is asked for: the one request of `plan` and `build` (which adds how to carry it
/// out, `ops::build::BuildRequest`).
#[derive(Debug, Clone)]
pub struct Request {
    /// The recipes asked for (their closure is planned).
    pub recipes: Vec<String>,
    pub targets: TargetSet,
    /// The install prefix (absolute): part of every key.
    pub prefix: PathBuf,
    /// Recipes forced to rebuild (with everything downstream of them).
    pub rebuild: Vec<String>,
    /// The order ready recipes start in (`night::Order::from_env()` for `ROCMFORGE_SCHEDULE`).
    pub order: Order,
    /// The installed ROCm to take components from (`--rocm-path`, else the config's), if any.
    pub rocm_path: Option<PathBuf>,
    /// What the user decided about it (`--from-source`, `--take-installed`,
    /// `--accept-rocm-version`).
    pub installation: Choices,
}

/// What resolving a request reads beside it: where work dirs lie, and the last builds' times.
#[derive(Debug, Clone)]
pub struct PlanOptions<'a> {
    pub request: &'a Request,
    pub work_dir: PathBuf,
    /// Each recipe's last build time in seconds (`report::load_durations`), for the estimates.
    pub durations: BTreeMap<String, f64>,
}

/// The host facts keys depend on: the allow-listed environment and the toolchain identity.
#[derive(Debug, Clone, Default)]
pub struct Host {
    pub env: BTreeMap<String, String>,
    pub toolchain: String,
    /// The distribution and release (`key::host_os`).
    pub os: String,
    /// The installed ROCm the build may take components from, if any.
    pub rocm: Option<std::sync::Arc<Installation>>,
}

impl Host {
    /// Reads this process's environment and tools (each tool's identity remembered in
    /// `state_dir`, see `key`).
    pub fn detect(rocm_path: Option<&Path>, state_dir: &Path) -> Host {
        let env = key::ENV_ALLOWLIST.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))).collect();
        let toolchain = key::toolchain_identity(&std::env::var("PATH").unwrap_or_default(), state_dir);
        let rocm = rocm_path.map(|p| std::sync::Arc::new(Installation::open(p, state_dir)));
        Host { env, toolchain, os: key::host_os(), rocm }
    }
}

pub use resolve::resolve;

/// The plan's entries as the schedule sees them, each asking for `want(entry)` jobs.
fn tasks_of(entries: &[PlanEntry], want: impl Fn(&PlanEntry) -> usize) -> Vec<Task> {
    let index: BTreeMap<&str, usize> = entries.iter().enumerate().map(|(i, e)| (e.name.as_str(), i)).collect();
    entries
        .iter()
        .map(|e| Task {
            name: e.name.clone(),
            deps: e.deps.iter().filter_map(|d| index.get(d.as_str()).copied()).collect(),
            work: e.estimate,
            want: want(e),
        })
        .collect()
}

/// The state and reason `plan` shows for a status.
fn describe(status: &Status, key: &CacheKey) -> (State, String) {
    match status {
        Status::Cached => (State::Cached, format!("artifact {} in the cache", key.short())),
        Status::Remote(url) => (State::RemoteHit, format!("artifact {} in the remote cache {url}", key.short())),
        Status::Build { reasons, .. } if reasons.is_empty() => (State::NotBuilt, "no cached artifact".into()),
        Status::Build { reasons, .. } => (State::Rebuild, reasons.join(", ")),
        Status::SourceOnly => (State::NotBuilt, "source tree only: fetched and patched, nothing to compile".into()),
        Status::Skipped(reason) => (State::Skipped, reason.clone()),
        Status::External(reason) => (State::External, reason.clone()),
        Status::Refused(reason) => (State::Blocked, reason.clone()),
        Status::Unlocked => {
            (State::Blocked, "source is not pinned: `rocmforge build` pins it first and records the pin in the lock file; `build --locked` refuses".into())
        }
        Status::Unsupported(reason) => {
            (State::Blocked, format!("none of the requested targets is supported: {reason}"))
        }
    }
}

impl Plan {
    pub fn entry(&self, name: &str) -> Option<&PlanEntry> {
        self.recipes.iter().find(|e| e.name == name)
    }

    /// Estimates the night on a budget of `jobs`, each building recipe asking `want(entry)`
    /// jobs, by simulating the engine's schedule.
    pub fn estimate_night(&mut self, jobs: usize, memory_gb: Option<f64>, want: impl Fn(&PlanEntry) -> usize) {
        let tasks = tasks_of(&self.recipes, |e| if e.estimate.secs(1) > 0.0 { want(e) } else { 1 });
        let ranks: Vec<usize> = self.recipes.iter().map(|e| e.rank).collect();
        self.night = Some(Night { memory_gb, ..Night::of(&tasks, jobs, &ranks) });
    }
}

/// What a wheel the stack builds is checked and changed for (issue 38): a runtime wheel's
/// contents; the runtime wheels a python-wheel recipe's wheels will require (those below it, each
/// `==` the build made) with RUNPATH relative to `$ORIGIN`; the library closure of both. Nothing
/// in a stack without runtime wheels (its wheels load through `rocmforge env`).
fn wheel_links(stack: &crate::recipe::Stack, r: &Recipe) -> Vec<String> {
    if !stack.has_runtime_wheels() {
        return Vec::new();
    }
    let closure =
        "library closure (every DT_NEEDED within the stack's wheels or the system's libraries, before it is stored)"
            .to_string();
    match (&r.runtime_wheel, r.build.system) {
        (Some(w), _) => vec![
            format!(
                "runtime wheel `{}`: files of {} below `{}/` in site-packages, RUNPATH relative to $ORIGIN{}",
                w.project,
                w.files.keys().cloned().collect::<Vec<_>>().join(", "),
                w.root,
                w.profile
                    .as_ref()
                    .map(|p| format!(", profile `{p}` set at interpreter start (.pth)"))
                    .unwrap_or_default()
            ),
            closure,
        ],
        (None, crate::recipe::BuildSystem::PythonWheel) => {
            let runtime = runtime_wheels_below(stack, r);
            let mut out = Vec::new();
            if !runtime.is_empty() {
                out.push(format!(
                    "its wheels require {} (the exact builds) and find their libraries through RUNPATH relative to $ORIGIN",
                    runtime.join(", ")
                ));
            }
            out.push(closure);
            out
        }
        _ => Vec::new(),
    }
}

/// The projects of the runtime-wheel recipes in `r`'s build closure, sorted.
pub fn runtime_wheels_below(stack: &crate::recipe::Stack, r: &Recipe) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut todo: Vec<&str> = r.build_deps.iter().map(String::as_str).collect();
    let mut out = std::collections::BTreeSet::new();
    while let Some(n) = todo.pop() {
        if !seen.insert(n) {
            continue;
        }
        let Some(dep) = stack.recipes.get(n) else { continue };
        if let Some(w) = &dep.runtime_wheel {
            out.insert(w.project.clone());
        }
        todo.extend(dep.build_deps.iter().map(String::as_str));
    }
    out.into_iter().collect()
}
