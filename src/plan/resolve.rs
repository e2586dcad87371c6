//! Resolving a plan, in named steps: which recipes `--rebuild` forces; each recipe's target and
//! installation decisions and its key (dependencies first: a key holds its dependencies');
//! asking the store about every key at once; each recipe's status and the night's estimate of
//! it; the taken toolchain's place; the schedule's ranks.

use std::collections::{BTreeMap, BTreeSet};

use super::night::{self, Order, Work};
use super::{tasks_of, Host, PinInfo, Plan, PlanEntry, PlanOptions, State, Status};
use crate::cache::{Located, Store};
use crate::graph::BuildGraph;
use crate::history::History;
use crate::installation::Decision;
use crate::key::{self, CacheKey, KeyInputs, CACHE_FORMAT};
use crate::layout::WorkDir;
use crate::recipe::{Recipe, RecipeTree, SourceSpec, Stack, TargetDecision};
use crate::source::SourceIdentity;

/// Resolves the build of `graph`: keys from the recipes, patches and host; statuses from the
/// store (is the key there?) and the history (what changed since the last build?).
pub fn resolve(
    tree: &RecipeTree,
    stack: &Stack,
    graph: &BuildGraph,
    opts: &PlanOptions<'_>,
    host: &Host,
    store: &dyn Store,
    history: &History,
) -> Plan {
    let forced = forced_by_rebuild(graph, &opts.request.rebuild);
    let keyed = key_each(tree, stack, graph, opts, host);
    prefetch(store, &keyed, &forced);
    let taken: BTreeSet<&str> =
        keyed.iter().filter(|k| matches!(k.decision, Some(Decision::Take { .. }))).map(|k| k.name).collect();
    let needed = not_needed(graph, &taken);
    let uses_installation = uses_installation(graph, &taken);
    let waves = graph.waves();
    let mut accept_versions: BTreeSet<String> = BTreeSet::new();
    let mut recipes = Vec::new();
    for k in keyed {
        // What is built: a stand-in's args, checks and estimate.
        let built = k.recipe.as_built(&k.targets);
        let r = &*built;
        let why_not_needed = needed.get(k.name).map(String::as_str);
        let status = status_of(&k, r, why_not_needed, &forced, opts, store, history, &mut accept_versions);
        let estimate = estimate_of(r, &k.targets, &status, opts.durations.get(k.name));
        recipes.push(PlanEntry {
            name: r.name.clone(),
            version: r.version.clone(),
            system: r.build.system.as_str(),
            source: r.source.clone(),
            locked: !r.source.is_unlocked(),
            pin: PinInfo::of(r),
            patches: r.patches.iter().map(|p| p.name.clone()).collect(),
            checks: checks_of(stack, r),
            provides: r.provides.len(),
            deps: graph.deps_of(k.name).into_iter().map(String::from).collect(),
            wave: waves.iter().position(|w| w.contains(&k.name)).unwrap_or(0),
            targets: k.targets,
            key: k.key,
            inputs: k.inputs,
            work_dir: WorkDir::new(&opts.work_dir, &stack.name, k.name).root,
            estimate: estimate.work,
            estimate_from: estimate.from,
            checks_estimate: estimate.checks,
            download_mb: estimate.download_mb,
            disk_gb: estimate.disk_gb,
            priority_secs: 0.0,
            rank: 0,
            on_installation: uses_installation.get(k.name) == Some(&true),
            status,
            not_taken: match k.decision {
                Some(Decision::Build(why) | Decision::Absent(why)) => Some(why),
                _ => None,
            },
        });
    }
    let (rocm_llvm, rocm_device_libs) = taken_toolchain(stack, host, &recipes);
    let taken_cmake_dirs = taken_cmake_dirs(stack, host, &recipes);
    if let Some(rocm) = &host.rocm {
        rocm.save();
    }
    rank(&mut recipes, opts.request.order);
    Plan {
        stack: stack.name.clone(),
        rocm_version: stack.rocm_version.clone(),
        requested: graph.requested().to_vec(),
        targets: opts.request.targets.clone(),
        prefix: opts.request.prefix.clone(),
        rocm_path: host.rocm.as_ref().map(|r| r.root.clone()),
        rocm_llvm,
        rocm_device_libs,
        taken_cmake_dirs,
        recipes,
        schedule: opts.request.order,
        night: None,
        full_night_secs: None,
        accept_versions: {
            let mut v: Vec<String> = accept_versions.into_iter().collect();
            v.sort_by(|a, b| crate::wheel::natural_cmp(a, b));
            v
        },
    }
}

/// A recipe of the closure with its decisions and key, before the store is asked about it.
struct Keyed<'a> {
    name: &'a str,
    recipe: &'a Recipe,
    targets: TargetDecision,
    decision: Option<Decision>,
    inputs: KeyInputs,
    key: CacheKey,
}

/// The recipes `--rebuild` names, and everything downstream of them.
fn forced_by_rebuild<'g>(graph: &'g BuildGraph, rebuild: &'g [String]) -> BTreeSet<&'g str> {
    let mut forced: BTreeSet<&str> = BTreeSet::new();
    for r in rebuild {
        if graph.contains(r) {
            forced.insert(r);
            forced.extend(graph.downstream_of(r));
        }
    }
    forced
}

/// Each recipe's target decision, what the installed ROCm decides for it, and its key, in build
/// order (a key holds its dependencies' keys, a source tree's key its recipe's).
fn key_each<'a>(
    tree: &RecipeTree,
    stack: &'a Stack,
    graph: &'a BuildGraph,
    opts: &PlanOptions<'_>,
    host: &Host,
) -> Vec<Keyed<'a>> {
    let mut keys: BTreeMap<String, CacheKey> = BTreeMap::new();
    let mut keyed = Vec::new();
    for name in graph.order() {
        let r = &stack.recipes[name];
        let targets =
            if r.is_source_only() { TargetDecision::SourceOnly } else { r.targets.decide(&opts.request.targets) };
        let decision = match (&host.rocm, &targets) {
            // A stand-in is the recipe built otherwise: an installation stands for it only as for
            // any build (unpatched, same version), and says why not.
            (
                Some(rocm),
                TargetDecision::Build { .. }
                | TargetDecision::HostOnly
                | TargetDecision::SourceOnly
                | TargetDecision::StandIn { .. },
            ) => rocm.decide(r, &stack.rocm_version, targets.targets(), &opts.request.installation),
            _ => None,
        };
        let inputs = key_inputs(tree, stack, r, &targets, decision.as_ref(), graph, &keys, opts, host);
        let key = inputs.key();
        keys.insert(name.to_string(), key.clone());
        keyed.push(Keyed { name, recipe: r, targets, decision, inputs, key });
    }
    keyed
}

/// What recipe `r`'s key hashes (the table in `key`): `keys` holds its dependencies' keys.
#[allow(clippy::too_many_arguments)]
fn key_inputs(
    tree: &RecipeTree,
    stack: &Stack,
    r: &Recipe,
    targets: &TargetDecision,
    decision: Option<&Decision>,
    graph: &BuildGraph,
    keys: &BTreeMap<String, CacheKey>,
    opts: &PlanOptions<'_>,
    host: &Host,
) -> KeyInputs {
    let external = match decision {
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
    KeyInputs {
        format: CACHE_FORMAT,
        recipe: r.name.clone(),
        recipe_content: crate::digest::sha256_hex(r.as_built(targets).canonical.as_bytes()),
        source: source.to_string(),
        patches: if external.is_some() { Vec::new() } else { crate::source::patch_digests(tree, r) },
        targets: targets_in_key(targets),
        prefix: opts.request.prefix.display().to_string(),
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
        deps: graph.deps_of(&r.name).into_iter().map(|d| (d.to_string(), keys[d].to_string())).collect(),
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

/// Asks the store about every key it will be asked about, at once: a shared cache fetches
/// their manifests side by side instead of one round trip after another.
fn prefetch(store: &dyn Store, keyed: &[Keyed<'_>], forced: &BTreeSet<&str>) {
    let asked: Vec<CacheKey> = keyed
        .iter()
        .filter(|k| {
            !matches!(k.decision, Some(Decision::Take { .. } | Decision::Refuse { .. }))
                && !matches!(k.targets, TargetDecision::Skip { .. } | TargetDecision::Unsupported { .. })
                && !k.recipe.source.is_unlocked()
                && !k.recipe.is_source_only()
                && !forced.contains(k.name)
        })
        .map(|k| k.key.clone())
        .collect();
    store.prefetch(&asked);
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

/// Which recipes build on the installed ROCm: something they depend on (transitively) is taken.
fn uses_installation<'g>(graph: &'g BuildGraph, taken: &BTreeSet<&str>) -> BTreeMap<&'g str, bool> {
    let mut uses_installation: BTreeMap<&str, bool> = BTreeMap::new();
    for name in graph.order() {
        let uses = graph.deps_of(name).iter().any(|d| taken.contains(d) || uses_installation.get(d) == Some(&true));
        uses_installation.insert(name, uses);
    }
    uses_installation
}

/// What the build does with recipe `k` (`r`: as built), in this order: taken, refused (its
/// `--accept-rocm-version` word added to `accept_versions`), not needed, unsupported, skipped,
/// unpinned, a source tree, forced by `--rebuild`; else what the store holds, and what changed
/// since the last build.
#[allow(clippy::too_many_arguments)]
fn status_of(
    k: &Keyed<'_>,
    r: &Recipe,
    not_needed: Option<&str>,
    forced: &BTreeSet<&str>,
    opts: &PlanOptions<'_>,
    store: &dyn Store,
    history: &History,
    accept_versions: &mut BTreeSet<String>,
) -> Status {
    let name = k.name;
    if let Some(Decision::Take { reason, .. }) = &k.decision {
        Status::External(reason.clone())
    } else if let Some(Decision::Refuse { reason, accept }) = &k.decision {
        accept_versions.insert(accept.clone());
        Status::Refused(reason.clone())
    } else if let Some(why) = not_needed {
        Status::Skipped(why.to_string())
    } else if let TargetDecision::Unsupported { reason } = &k.targets {
        Status::Unsupported(reason.clone())
    } else if let TargetDecision::Skip { reason } = &k.targets {
        Status::Skipped(reason.clone())
    } else if r.source.is_unlocked() {
        Status::Unlocked
    } else if r.is_source_only() {
        Status::SourceOnly
    } else if forced.contains(name) {
        let why =
            if opts.request.rebuild.iter().any(|f| f == name) { "--rebuild" } else { "--rebuild of a dependency" };
        Status::Build { reasons: vec![why.into()], forced: true }
    } else {
        match store.locate(&k.key) {
            Located::Local => Status::Cached,
            Located::Remote(url) => Status::Remote(url),
            located => {
                let mut reasons = match located {
                    Located::Refused(why) => vec![why],
                    _ => Vec::new(),
                };
                reasons.extend(match history.last(name) {
                    Some(old) => {
                        let w = k.inputs.explain_change(&old);
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
    }
}

/// A recipe's part of the night: its work, from what, its checks' share, and what it downloads
/// and takes on disk.
struct Estimate {
    work: Work,
    from: &'static str,
    checks: Work,
    download_mb: f64,
    disk_gb: f64,
}

/// The estimate of recipe `r` (as built) with `status`, given its last build's seconds.
fn estimate_of(r: &Recipe, targets: &TargetDecision, status: &Status, last_build: Option<&f64>) -> Estimate {
    // An unlocked recipe builds once it is locked: the night includes it.
    let will_build =
        matches!(status, Status::Build { .. }) || (matches!(status, Status::Unlocked) && !r.is_source_only());
    let (estimate, estimate_from) = match (last_build, &r.estimate) {
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
    let work = Work {
        serial_secs: estimate.serial_secs + checks_estimate.serial_secs,
        parallel_secs: estimate.parallel_secs + checks_estimate.parallel_secs,
    };
    let (download_mb, disk_gb) = match &r.estimate {
        Some(e) if will_build || r.is_source_only() => (e.download_mb, e.disk_gb),
        _ => (0.0, 0.0),
    };
    Estimate { work, from: estimate_from, checks: checks_estimate, download_mb, disk_gb }
}

/// A recipe's `[[check]]`s in the night's model, for `targets` requested targets.
fn checks_work(r: &Recipe, targets: usize) -> Work {
    r.checks.iter().filter_map(|c| c.estimate.as_ref()).fold(Work::default(), |w, e| Work {
        serial_secs: w.serial_secs + e.serial_seconds,
        parallel_secs: w.parallel_secs + e.core_seconds_per_target * targets.max(1) as f64,
    })
}

/// A recipe's checks after install as `plan` names them: its `[[check]]`s, and a prebuilt
/// wheel's executable-stack check.
fn checks_of(stack: &Stack, r: &Recipe) -> Vec<String> {
    r.checks
        .iter()
        .map(|c| c.name.clone())
        .chain((r.build.system == crate::recipe::BuildSystem::PrebuiltWheel).then(|| {
            format!(
                "executable stacks (a library asking for one is cleared in the published copy, labelled `{}`; the pin stays the download's)",
                crate::wheel::execstack::LABEL
            )
        }))
        .chain(super::wheel_links(stack, r))
        .collect()
}

/// Where the taken toolchain lies in the installation (`{rocm_llvm}`, `{rocm_device_libs}`),
/// when the recipes that make it are taken.
fn taken_toolchain(
    stack: &Stack,
    host: &Host,
    recipes: &[PlanEntry],
) -> (Option<std::path::PathBuf>, Option<std::path::PathBuf>) {
    // The folder that holds a taken recipe's own file (`llvm/bin/clang` in `lib/llvm-15`), not
    // merely the newest such folder: a host may have a newer `lib/llvm-19` without clang.
    let taken_dir = |top: &str, dir: &str| {
        let rocm = host.rocm.as_ref()?;
        let file = recipes.iter().filter(|e| e.state() == State::External).find_map(|e| {
            stack.recipes[&e.name].external.as_ref()?.files.iter().find(|f| f.starts_with(top)).cloned()
        })?;
        let below = file.strip_prefix(dir).map(|rest| rest.trim_matches('/').split('/').count());
        match (rocm.locate(&file), below) {
            (Some(mut found), Some(n)) if file != dir => {
                for _ in 0..n {
                    found.pop();
                }
                Some(found)
            }
            _ => rocm.locate(dir),
        }
    };
    (taken_dir("llvm/", "llvm"), taken_dir("amdgcn/", "amdgcn/bitcode"))
}

/// The CMake config folder of each package the taken recipes install (`[external]
/// cmake-package`), where the installation keeps it.
fn taken_cmake_dirs(stack: &Stack, host: &Host, recipes: &[PlanEntry]) -> BTreeMap<String, std::path::PathBuf> {
    host.rocm
        .as_ref()
        .map(|rocm| {
            recipes
                .iter()
                .filter(|e| e.state() == State::External)
                .filter_map(|e| stack.recipes[&e.name].external.as_ref()?.cmake_package.clone())
                .filter_map(|pkg| Some((pkg.clone(), rocm.locate(&format!("lib/cmake/{pkg}"))?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Each entry's longest remaining path and its rank in `order` (ready recipes start lowest
/// rank first).
fn rank(recipes: &mut [PlanEntry], order: Order) {
    let tasks = tasks_of(recipes, |_| 1);
    let prio = night::longest_remaining(&tasks);
    let ranks = night::ranks(&tasks, order);
    for (i, e) in recipes.iter_mut().enumerate() {
        e.priority_secs = prio[i];
        e.rank = ranks[i];
    }
}
