//! The plan: the resolved build. Per recipe of the closure, in build order: what will be built
//! from what (source identity, patches), for which targets, its cache key and the inputs behind
//! it, its work dir, and its status with the reason. `plan` prints it; the engine carries it out
//! and decides nothing the plan already decided, including the order in which ready recipes
//! start (`night`: longest remaining path first) and the night's estimated length.

pub mod night;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cache::{Located, Store};
use crate::graph::BuildGraph;
use crate::history::History;
use crate::installation::{Choices, Decision, Installation};
use crate::key::{self, CacheKey, KeyInputs, CACHE_FORMAT};
use crate::layout::WorkDir;
use crate::recipe::{PinFrom, Recipe, RecipeTree, SourceSpec, Stack, TargetDecision};
use crate::source::SourceIdentity;
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

#[derive(Debug, Clone, Serialize)]
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
    pub state: State,
    pub reason: String,
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
}

impl PlanEntry {
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

/// What a plan is made for.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub targets: TargetSet,
    /// The install prefix (absolute): part of every key.
    pub prefix: PathBuf,
    /// Recipes forced to rebuild (with everything downstream of them).
    pub rebuild: Vec<String>,
    pub work_dir: PathBuf,
    /// Each recipe's last build time in seconds (`report::load_durations`), for the estimates.
    pub durations: BTreeMap<String, f64>,
    /// The order ready recipes start in.
    pub order: Order,
    /// What the user decided about the installed ROCm (`--from-source`, ...).
    pub installation: Choices,
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

/// The targets as the key holds them: those really built for, and `stand-in` after them when
/// the recipe is built as its `[stand-in]` says, so the two builds of one recipe never share a
/// key. (Without a stand-in, exactly the targets: the keys of every other build are unchanged.)
fn targets_in_key(decision: &TargetDecision) -> Vec<String> {
    let mut t = key::targets_of(decision.targets());
    if matches!(decision, TargetDecision::StandIn { .. }) {
        t.push("stand-in".into());
    }
    t
}

/// Resolves the build of `graph`: keys from the recipes, patches and host; statuses from the
/// store (is the key there?) and the history (what changed since the last build?).
pub fn resolve(
    tree: &RecipeTree,
    stack: &Stack,
    graph: &BuildGraph,
    opts: &PlanOptions,
    host: &Host,
    store: &dyn Store,
    history: &History,
) -> Plan {
    let waves = graph.waves();
    let wave_of = |n: &str| waves.iter().position(|w| w.contains(&n)).unwrap_or(0);
    let mut forced: BTreeSet<&str> = BTreeSet::new();
    for r in &opts.rebuild {
        if graph.contains(r) {
            forced.insert(r);
            forced.extend(graph.downstream_of(r));
        }
    }
    let mut keys: BTreeMap<String, CacheKey> = BTreeMap::new();
    let mut recipes = Vec::new();
    let mut keyed = Vec::new();
    for name in graph.order() {
        let r = &stack.recipes[name];
        let targets = if r.is_source_only() { TargetDecision::SourceOnly } else { r.targets.decide(&opts.targets) };
        let decision = match (&host.rocm, &targets) {
            // A stand-in is the recipe built otherwise: an installation stands for it only as for
            // any build (unpatched, same version), and says why not.
            (
                Some(rocm),
                TargetDecision::Build { .. }
                | TargetDecision::HostOnly
                | TargetDecision::SourceOnly
                | TargetDecision::StandIn { .. },
            ) => rocm.decide(r, &stack.rocm_version, targets.targets(), &opts.installation),
            _ => None,
        };
        let external = match &decision {
            Some(Decision::Take { reason, identity, .. }) => Some((reason.clone(), identity.clone())),
            _ => None,
        };
        let source = match (&external, &r.source) {
            (Some((_, identity)), _) => SourceIdentity::Installed { identity: identity.clone() },
            (None, SourceSpec::From { recipe, .. }) => SourceIdentity::Tree {
                recipe: recipe.clone(),
                key: keys.get(recipe).map(|k| k.to_string()).unwrap_or_default(),
            },
            (None, _) => SourceIdentity::pinned(r),
        };
        let host_facts = !r.is_source_only();
        let inputs = KeyInputs {
            format: CACHE_FORMAT,
            recipe: r.name.clone(),
            recipe_content: crate::digest::sha256_hex(r.as_built(&targets).canonical.as_bytes()),
            source: source.to_string(),
            patches: if external.is_some() { Vec::new() } else { crate::source::patch_digests(tree, r) },
            targets: targets_in_key(&targets),
            prefix: opts.prefix.display().to_string(),
            env: if host_facts { host.env.clone() } else { BTreeMap::new() },
            toolchain: match (host_facts, r.build.system) {
                (false, _) => String::new(),
                (true, crate::recipe::BuildSystem::PrebuiltWheel) => {
                    format!("{}\n{}", host.toolchain, key::PREBUILT_WHEEL_TOOL)
                }
                (true, crate::recipe::BuildSystem::PythonWheel | crate::recipe::BuildSystem::RuntimeWheel)
                    if stack.has_runtime_wheels() =>
                {
                    format!("{}\n{}", host.toolchain, key::WHEEL_LINK_TOOL)
                }
                (true, _) => host.toolchain.clone(),
            },
            host_os: if host_facts { host.os.clone() } else { String::new() },
            deps: graph.deps_of(name).into_iter().map(|d| (d.to_string(), keys[d].to_string())).collect(),
        };
        let key = inputs.key();
        keys.insert(name.to_string(), key.clone());
        keyed.push((name, r, targets, decision, inputs, key));
    }
    // Every key the store will be asked about, at once: a shared cache fetches their manifests
    // side by side instead of one round trip after another.
    let asked: Vec<CacheKey> = keyed
        .iter()
        .filter(|(name, r, targets, decision, _, _)| {
            !matches!(decision, Some(Decision::Take { .. } | Decision::Refuse { .. }))
                && !matches!(targets, TargetDecision::Skip { .. } | TargetDecision::Unsupported { .. })
                && !r.source.is_unlocked()
                && !r.is_source_only()
                && !forced.contains(name)
        })
        .map(|k| k.5.clone())
        .collect();
    store.prefetch(&asked);
    let taken: BTreeSet<&str> =
        keyed.iter().filter(|k| matches!(k.3, Some(Decision::Take { .. }))).map(|k| k.0).collect();
    let needed = not_needed(graph, &taken);
    let mut uses_installation: BTreeMap<&str, bool> = BTreeMap::new();
    for name in graph.order() {
        let uses = graph.deps_of(name).iter().any(|d| taken.contains(d) || uses_installation.get(d) == Some(&true));
        uses_installation.insert(name, uses);
    }
    let mut accept_versions: BTreeSet<String> = BTreeSet::new();
    for (name, r, targets, decision, inputs, key) in keyed {
        // What is built: a stand-in's args, checks and estimate.
        let r = &*r.as_built(&targets);
        let status = if let Some(Decision::Take { reason, .. }) = &decision {
            Status::External(reason.clone())
        } else if let Some(Decision::Refuse { reason, accept }) = &decision {
            accept_versions.insert(accept.clone());
            Status::Refused(reason.clone())
        } else if let Some(why) = needed.get(name) {
            Status::Skipped(why.clone())
        } else if let TargetDecision::Unsupported { reason } = &targets {
            Status::Unsupported(reason.clone())
        } else if let TargetDecision::Skip { reason } = &targets {
            Status::Skipped(reason.clone())
        } else if r.source.is_unlocked() {
            Status::Unlocked
        } else if r.is_source_only() {
            Status::SourceOnly
        } else if forced.contains(name) {
            let why = if opts.rebuild.iter().any(|f| f == name) { "--rebuild" } else { "--rebuild of a dependency" };
            Status::Build { reasons: vec![why.into()], forced: true }
        } else {
            match store.locate(&key) {
                Located::Local => Status::Cached,
                Located::Remote(url) => Status::Remote(url),
                located => {
                    let mut reasons = match located {
                        Located::Refused(why) => vec![why],
                        _ => Vec::new(),
                    };
                    reasons.extend(match history.last(name) {
                        Some(old) => {
                            let w = inputs.explain_change(&old);
                            if w.is_empty() {
                                vec!["artifact missing from the cache".into()]
                            } else {
                                w
                            }
                        }
                        None => Vec::new(),
                    });
                    Status::Build { reasons, forced: false }
                }
            }
        };
        let (state, mut reason) = describe(&status, &key);
        if let (Some(Decision::Build(why) | Decision::Absent(why)), true) =
            (&decision, matches!(status, Status::Build { .. }))
        {
            reason = format!("{reason}; built: {why}");
        }
        let on_installation = uses_installation.get(name) == Some(&true);
        // An unlocked recipe builds once it is locked: the night includes it.
        let will_build =
            matches!(status, Status::Build { .. }) || (matches!(status, Status::Unlocked) && !r.is_source_only());
        let (estimate, estimate_from) = match (opts.durations.get(name), &r.estimate) {
            _ if !will_build => (Work::default(), "nothing to build"),
            (Some(secs), _) => (Work::fixed(*secs), "last build"),
            (None, Some(e)) => {
                (Work { serial_secs: e.serial_minutes * 60.0, parallel_secs: e.parallel_core_hours * 3600.0 }, "recipe")
            }
            (None, None) => (Work::fixed(night::DEFAULT_ESTIMATE_SECS), "default"),
        };
        // A recorded duration already holds the checks that ran after the install.
        let checks_estimate = match estimate_from {
            "recipe" | "default" => checks_work(r, targets.targets().map_or(0, |t| t.iter().count())),
            _ => Work::default(),
        };
        let estimate = Work {
            serial_secs: estimate.serial_secs + checks_estimate.serial_secs,
            parallel_secs: estimate.parallel_secs + checks_estimate.parallel_secs,
        };
        let (download_mb, disk_gb) = match &r.estimate {
            Some(e) if will_build || r.is_source_only() => (e.download_mb, e.disk_gb),
            _ => (0.0, 0.0),
        };
        recipes.push(PlanEntry {
            name: r.name.clone(),
            version: r.version.clone(),
            system: r.build.system.as_str(),
            source: r.source.clone(),
            locked: !r.source.is_unlocked(),
            pin: PinInfo::of(r),
            patches: r.patches.iter().map(|p| p.name.clone()).collect(),
            checks: r
                .checks
                .iter()
                .map(|c| c.name.clone())
                .chain((r.build.system == crate::recipe::BuildSystem::PrebuiltWheel).then(|| {
                    format!(
                        "executable stacks (a library asking for one is cleared in the published copy, labelled `{}`; the pin stays the download's)",
                        crate::wheel::execstack::LABEL
                    )
                }))
                .chain(wheel_links(stack, r))
                .collect(),
            provides: r.provides.len(),
            deps: graph.deps_of(name).into_iter().map(String::from).collect(),
            wave: wave_of(name),
            targets,
            state,
            reason,
            key,
            inputs,
            work_dir: WorkDir::new(&opts.work_dir, &stack.name, name).root,
            estimate,
            estimate_from,
            checks_estimate,
            download_mb,
            disk_gb,
            priority_secs: 0.0,
            rank: 0,
            on_installation,
            status,
        });
    }
    let taken_dir = |top: &str, dir: &str| {
        let rocm = host.rocm.as_ref()?;
        let takes = recipes.iter().any(|e| {
            e.state == State::External
                && stack.recipes[&e.name].external.as_ref().is_some_and(|x| x.files.iter().any(|f| f.starts_with(top)))
        });
        takes.then(|| rocm.locate(dir)).flatten()
    };
    let (rocm_llvm, rocm_device_libs) = (taken_dir("llvm/", "llvm"), taken_dir("amdgcn/", "amdgcn/bitcode"));
    let taken_cmake_dirs = host
        .rocm
        .as_ref()
        .map(|rocm| {
            recipes
                .iter()
                .filter(|e| e.state == State::External)
                .filter_map(|e| stack.recipes[&e.name].external.as_ref()?.cmake_package.clone())
                .filter_map(|pkg| Some((pkg.clone(), rocm.locate(&format!("lib/cmake/{pkg}"))?)))
                .collect()
        })
        .unwrap_or_default();
    if let Some(rocm) = &host.rocm {
        rocm.save();
    }
    let tasks = tasks_of(&recipes, |_| 1);
    let prio = night::longest_remaining(&tasks);
    let ranks = night::ranks(&tasks, opts.order);
    for (i, e) in recipes.iter_mut().enumerate() {
        e.priority_secs = prio[i];
        e.rank = ranks[i];
    }
    Plan {
        stack: stack.name.clone(),
        rocm_version: stack.rocm_version.clone(),
        requested: graph.requested().to_vec(),
        targets: opts.targets.clone(),
        prefix: opts.prefix.clone(),
        rocm_path: host.rocm.as_ref().map(|r| r.root.clone()),
        rocm_llvm,
        rocm_device_libs,
        taken_cmake_dirs,
        recipes,
        schedule: opts.order,
        night: None,
        full_night_secs: None,
        accept_versions: {
            let mut v: Vec<String> = accept_versions.into_iter().collect();
            v.sort_by(|a, b| crate::wheel::natural_cmp(a, b));
            v
        },
    }
}

/// The recipes nothing needs once `taken` come from the installation, with why: a recipe is
/// needed when asked for, or when a needed recipe that is built depends on it (a source tree
/// whose consumers all come from the installation is not fetched).
fn not_needed<'g>(graph: &'g BuildGraph, taken: &BTreeSet<&str>) -> BTreeMap<&'g str, String> {
    if taken.is_empty() {
        return BTreeMap::new();
    }
    let mut needed: BTreeSet<&str> = graph.requested().iter().map(String::as_str).collect();
    for name in graph.order().into_iter().rev() {
        if needed.contains(name) && !taken.contains(name) {
            needed.extend(graph.deps_of(name));
        }
    }
    graph
        .order()
        .into_iter()
        .filter(|n| !needed.contains(n))
        .map(|n| {
            let users = graph.dependents_of(n).join(", ");
            (n, format!("not needed: its users ({users}) come from the installation or are not built"))
        })
        .collect()
}

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

    /// The human-readable plan.
    pub fn render(&self) -> String {
        let mut s = format!(
            "plan for {} on stack {} (ROCm {}), targets {}: {} recipes\n\n",
            self.requested.join(", "),
            self.stack,
            self.rocm_version,
            self.targets.comma_list(),
            self.recipes.len()
        );
        for (i, e) in self.recipes.iter().enumerate() {
            s.push_str(&format!("{:>3}. {} {} [{}] wave {}\n", i + 1, e.name, e.version, e.system, e.wave));
            s.push_str(&format!("     source:  {}\n", e.source.describe()));
            match (&e.pin, &e.source) {
                (Some(p), _) => s.push_str(&format!("     pin:     {}\n", p.describe())),
                (None, SourceSpec::From { recipe, .. }) => s.push_str(&format!("     pin:     {recipe}'s\n")),
                (None, SourceSpec::None) => {}
                (None, _) => s.push_str("     pin:     none yet (`rocmforge build` pins it)\n"),
            }
            if !e.patches.is_empty() {
                s.push_str(&format!("     patches: {}\n", e.patches.join(", ")));
            }
            if !e.deps.is_empty() {
                s.push_str(&format!("     deps:    {}\n", e.deps.join(", ")));
            }
            if !e.checks.is_empty() || e.provides > 0 {
                let mut what = Vec::new();
                if !e.checks.is_empty() {
                    what.push(format!("after install: {}", e.checks.join(", ")));
                }
                if e.provides > 0 {
                    what.push(format!("{} need(s) of its consumers", e.provides));
                }
                s.push_str(&format!("     checks:  {}\n", what.join("; ")));
            }
            s.push_str(&format!("     targets: {}\n", e.targets.describe()));
            s.push_str(&format!("     state:   {} ({})\n", e.state.as_str(), e.reason));
        }
        let blocked: Vec<&str> =
            self.recipes.iter().filter(|e| e.state == State::Blocked).map(|e| e.name.as_str()).collect();
        if !blocked.is_empty() {
            s.push_str(&format!("\n{} blocked: {}\n", blocked.len(), blocked.join(", ")));
        }
        if !self.accept_versions.is_empty() {
            let refused: Vec<&str> = self
                .recipes
                .iter()
                .filter(|e| matches!(e.status, Status::Refused(_)))
                .map(|e| e.name.as_str())
                .collect();
            s.push_str(&format!(
                "the installation holds {} in other versions: `--accept-rocm-version {}` takes them all, `--from-source {}` builds them\n",
                refused.join(", "),
                self.accept_versions.join(","),
                refused.join(",")
            ));
        }
        if let Some(n) = &self.night {
            let guessed = self.recipes.iter().filter(|e| e.estimate_from == "default").count();
            s.push_str(&format!(
                "\nestimated length: {} on {} job{} (lower bound {}, {} order); critical path {}: {}\n",
                night::human(n.estimated_secs),
                n.jobs,
                if n.jobs == 1 { "" } else { "s" },
                night::human(n.lower_bound_secs),
                self.schedule.as_str(),
                night::human(n.critical_path_secs),
                if n.critical_path.is_empty() { "nothing to build".to_string() } else { n.critical_path.join(" -> ") },
            ));
            if let (Some(full), Some(rocm)) = (self.full_night_secs, &self.rocm_path) {
                let taken = self.recipes.iter().filter(|e| e.state == State::External).count();
                s.push_str(&format!(
                    "the short night on {}: {} recipe(s) taken from it; the full night (nothing taken) would be {}\n",
                    rocm.display(),
                    taken,
                    night::human(full)
                ));
            }
            let download: f64 = self.recipes.iter().map(|e| e.download_mb).sum();
            let disk: f64 = self.recipes.iter().map(|e| e.disk_gb).sum();
            if download > 0.0 || disk > 0.0 {
                s.push_str(&format!(
                    "downloads {}, disk while building {} (work trees, build trees and artifacts of the recipes to build)\n",
                    human_mb(download),
                    human_mb(disk * 1024.0)
                ));
            }
            let checks = self.recipes.iter().filter(|e| e.checks_estimate != Work::default());
            let (serial, parallel, count) = checks.fold((0.0, 0.0, 0), |(s, p, c), e| {
                (s + e.checks_estimate.serial_secs, p + e.checks_estimate.parallel_secs, c + 1)
            });
            if count > 0 {
                s.push_str(&format!(
                    "checks after install ({count} recipe(s)): {} on {} job{} if run alone, {:.0} core-minutes; in the figures above\n",
                    night::human(serial + parallel / n.jobs.max(1) as f64),
                    n.jobs,
                    if n.jobs == 1 { "" } else { "s" },
                    parallel / 60.0
                ));
            }
            let measured = self.recipes.iter().filter(|e| e.estimate_from == "last build").count();
            s.push_str(&format!(
                "an estimate: per recipe, its serial minutes plus its compile core-hours over the jobs it gets (capped by its `memory-per-job-gb` in {}){}; more cores shorten the compiles, not the serial parts or the chain (docs/night-estimate.md)\n",
                match n.memory_gb {
                    Some(g) => format!("{g} GiB"),
                    None => "this host's free memory".to_string(),
                },
                if measured > 0 { format!("; {measured} recipe(s) take their last build here") } else { String::new() },
            ));
            if guessed > 0 {
                s.push_str(&format!(
                    "({guessed} recipe(s) never built here and without `[estimate]` count {} each)\n",
                    night::human(night::DEFAULT_ESTIMATE_SECS)
                ));
            }
        }
        s
    }
}

/// A recipe's `[[check]]`s in the night's model, for `targets` requested targets.
fn checks_work(r: &Recipe, targets: usize) -> Work {
    r.checks.iter().filter_map(|c| c.estimate.as_ref()).fold(Work::default(), |w, e| Work {
        serial_secs: w.serial_secs + e.serial_seconds,
        parallel_secs: w.parallel_secs + e.core_seconds_per_target * targets.max(1) as f64,
    })
}

/// `850 MB`, `12.4 GB`.
fn human_mb(mb: f64) -> String {
    if mb >= 1024.0 {
        format!("{:.1} GB", mb / 1024.0)
    } else {
        format!("{mb:.0} MB")
    }
}

/// What a wheel the stack builds is checked and changed for (issue 38): a runtime wheel's
/// contents; the runtime wheels a python-wheel recipe's wheels will require (those below it, each
/// `==` the build made) with RUNPATH relative to `$ORIGIN`; the library closure of both. Nothing
/// in a stack without runtime wheels (its wheels load through `rocmforge env`).
fn wheel_links(stack: &Stack, r: &Recipe) -> Vec<String> {
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
pub fn runtime_wheels_below(stack: &Stack, r: &Recipe) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = r.build_deps.iter().map(String::as_str).collect();
    let mut out = BTreeSet::new();
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
