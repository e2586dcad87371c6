//! The build engine: for each recipe of the closure, in order, reuse its cached artifact or
//! prepare its source, run its steps (resuming finished ones), store the artifact, and deploy.

pub mod budget;
pub mod state;
pub mod step;
pub mod systems;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cache::ArtifactCache;
use crate::config::Config;
use crate::deploy::{DeployOutcome, Prefix};
use crate::graph::BuildGraph;
use crate::key::{self, CacheKey, KeyInputs, CACHE_FORMAT, ENV_ALLOWLIST};
use crate::progress::Progress;
use crate::recipe::{BuildSystem, Recipe, RecipeTree, SourceSpec, Stack, TargetDecision};
use crate::target::TargetSet;

use state::WorkDir;
use step::{StepDirs, StepError};
use systems::Vars;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{} recipe(s) have no pinned commit: {}\nrun `rocmforge lock` to resolve their tags to commits, then build again", .0.len(), .0.join(", "))]
    Unlocked(Vec<String>),
    #[error("none of the requested targets can be built by: {}", .0.join("; "))]
    Unsupported(Vec<String>),
    #[error(transparent)]
    Step(#[from] StepError),
    #[error("{} recipe(s) failed: {}\n{}{}", failed.len(), failed.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "), failed.iter().map(|(_, e)| format!("\n{e}\n")).collect::<String>(), if not_built.is_empty() { String::new() } else { format!("\nnot built (downstream of a failure): {}", not_built.join(", ")) })]
    Several { failed: Vec<(String, BuildError)>, not_built: Vec<String> },
    #[error(transparent)]
    Expand(#[from] systems::ExpandError),
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    #[error(transparent)]
    Deploy(#[from] crate::deploy::DeployError),
    #[error("{recipe}: cannot prepare its source")]
    Source { recipe: String, source: anyhow::Error },
    #[error("{recipe}: cannot publish its wheels to the local index")]
    Publish { recipe: String, source: crate::index::IndexError },
    #[error("{what} `{path}`")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{recipe}: `install-wheels` names `{name}`, but no build dependency of {recipe} deployed a wheel of that project ({available})")]
    NoDependencyWheel { recipe: String, name: String, available: String },
    #[error("{recipe}: `install-wheels` names `{name}`, which more than one build dependency built: {}", .wheels.join(", "))]
    AmbiguousDependencyWheel { recipe: String, name: String, wheels: Vec<String> },
    #[error("{recipe}: requirement `{requirement}` names `{project}`, a project its dependency `{dep}` builds ({file}): from `requirements`, pip may install another build of it from an index; list it in `install-wheels` instead")]
    RequirementIsDependencyWheel { recipe: String, requirement: String, project: String, dep: String, file: String },
    #[error("stack `{stack}` wants Python {version}, which was not found: install it (e.g. `pyenv install {version}`) or set ROCMFORGE_PYTHON to an interpreter")]
    NoPython { stack: String, version: String },
}

fn io_err<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> BuildError + 'p {
    move |source| BuildError::Io { what, path: path.to_path_buf(), source }
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub targets: TargetSet,
    /// The job budget (default: cores).
    pub jobs: usize,
    /// Recipes forced to rebuild (with everything downstream of them).
    pub rebuild: Vec<String>,
    pub prefix: PathBuf,
    /// Build everything not downstream of a failure, then report all failures.
    pub keep_going: bool,
}

/// What the engine decided for one recipe before doing anything.
#[derive(Debug, Clone)]
pub struct Decision {
    pub name: String,
    pub key: CacheKey,
    pub inputs: KeyInputs,
    pub targets: TargetDecision,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// An artifact with this key is in the cache.
    Cached,
    /// Must be built; the reasons say why (empty: never built).
    Build(Vec<String>),
    /// A source tree only; prepared when a dependent builds.
    SourceOnly,
    /// Not built for these targets.
    Skipped(String),
    /// Provided by the installed ROCm (`--rocm-path`); the reason says by what.
    External(String),
}

/// What happened to each recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Built,
    Cached,
    SourceOnly,
    Skipped,
    External,
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Built => "built",
            Outcome::Cached => "cached",
            Outcome::SourceOnly => "source",
            Outcome::Skipped => "skipped",
            Outcome::External => "external",
        }
    }
}

pub struct Engine<'a> {
    pub cfg: &'a Config,
    pub tree: &'a RecipeTree,
    pub stack: &'a Stack,
    pub progress: &'a dyn Progress,
    pub opts: BuildOptions,
    cache: ArtifactCache,
    keyed_env: BTreeMap<String, String>,
    toolchain: String,
    /// The installed ROCm providing components, if any.
    rocm: Option<crate::external::InstalledRocm>,
    /// Source trees are prepared one at a time (several recipes share one checkout).
    prepare_lock: std::sync::Mutex<()>,
}

impl<'a> Engine<'a> {
    pub fn new(
        cfg: &'a Config,
        tree: &'a RecipeTree,
        stack: &'a Stack,
        progress: &'a dyn Progress,
        opts: BuildOptions,
    ) -> Engine<'a> {
        let keyed_env: BTreeMap<String, String> =
            ENV_ALLOWLIST.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))).collect();
        let toolchain = key::toolchain_identity(&std::env::var("PATH").unwrap_or_default(), &cfg.state_dir);
        let rocm = cfg.rocm_path.as_deref().map(crate::external::InstalledRocm::open);
        Engine {
            cfg,
            tree,
            stack,
            progress,
            opts,
            cache: ArtifactCache::new(&cfg.cache_dir),
            keyed_env,
            toolchain,
            rocm,
            prepare_lock: std::sync::Mutex::new(()),
        }
    }

    pub fn cache(&self) -> &ArtifactCache {
        &self.cache
    }

    fn last_inputs_path(&self, recipe: &str) -> PathBuf {
        self.cfg.state_dir.join("last-build").join(&self.stack.name).join(format!("{recipe}.json"))
    }

    /// Inputs of the last artifact built or used for `recipe`.
    pub fn last_inputs(&self, recipe: &str) -> Option<KeyInputs> {
        serde_json::from_slice(&std::fs::read(self.last_inputs_path(recipe)).ok()?).ok()
    }

    /// Keys and statuses of every recipe of the graph, in build order.
    pub fn decide(&self, graph: &BuildGraph) -> Vec<Decision> {
        let mut keys: BTreeMap<String, CacheKey> = BTreeMap::new();
        let mut forced: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for r in &self.opts.rebuild {
            if graph.contains(r) {
                forced.insert(r.clone());
                forced.extend(graph.downstream_of(r).into_iter().map(String::from));
            }
        }
        let mut out = Vec::new();
        for name in graph.order() {
            let r = &self.stack.recipes[name];
            let decision =
                if r.is_source_only() { TargetDecision::SourceOnly } else { r.targets.decide(&self.opts.targets) };
            let external = self.external(r);
            let source = match &r.source {
                _ if external.is_some() => self.rocm.as_ref().expect("external needs a rocm").key_input(),
                SourceSpec::From { recipe, subdir } => {
                    format!(
                        "tree:{}:{}",
                        keys.get(recipe).map(|k| k.as_str()).unwrap_or("?"),
                        subdir.as_deref().unwrap_or("")
                    )
                }
                _ => key::source_identity(r),
            };
            let inputs = KeyInputs {
                format: CACHE_FORMAT,
                recipe: r.name.clone(),
                recipe_content: key::sha256_hex(r.canonical.as_bytes()),
                source,
                patches: if external.is_some() { Vec::new() } else { key::patch_hashes(self.tree, r) },
                targets: key::targets_of(decision.targets()),
                prefix: self.opts.prefix.display().to_string(),
                env: if r.is_source_only() { BTreeMap::new() } else { self.keyed_env.clone() },
                toolchain: if r.is_source_only() { String::new() } else { self.toolchain.clone() },
                deps: graph.deps_of(name).into_iter().map(|d| (d.to_string(), keys[d].0.clone())).collect(),
            };
            let key = inputs.key();
            keys.insert(name.to_string(), key.clone());
            let status = if let Some(reason) = external {
                Status::External(reason)
            } else if r.is_source_only() {
                Status::SourceOnly
            } else if let TargetDecision::Skip { reason } = &decision {
                Status::Skipped(reason.clone())
            } else if forced.contains(name) {
                Status::Build(vec![if self.opts.rebuild.iter().any(|f| f == name) {
                    "--rebuild".into()
                } else {
                    "--rebuild of a dependency".into()
                }])
            } else if self.cache.get(&key).is_some() {
                Status::Cached
            } else {
                let why = match self.last_inputs(name) {
                    Some(old) => {
                        let w = inputs.explain_change(&old);
                        if w.is_empty() {
                            vec!["artifact missing from the cache".into()]
                        } else {
                            w
                        }
                    }
                    None => Vec::new(),
                };
                Status::Build(why)
            };
            out.push(Decision { name: name.to_string(), key, inputs, targets: decision, status });
        }
        out
    }

    /// Why `r` is provided by the installed ROCm (`--rocm-path`), if it is.
    pub fn external(&self, r: &Recipe) -> Option<String> {
        let rocm = self.rocm.as_ref()?;
        let found = rocm.provides(r.external.as_ref()?)?;
        Some(rocm.reason(&found))
    }

    /// Builds the closure of `graph`. Returns each recipe's outcome in order.
    pub fn build(&self, graph: &BuildGraph) -> Result<Vec<(String, Outcome)>, BuildError> {
        let decisions = self.decide(graph);
        let unlocked: Vec<String> = decisions
            .iter()
            .filter(|d| !matches!(d.status, Status::External(_)) && self.stack.recipes[&d.name].source.is_unlocked())
            .map(|d| d.name.clone())
            .collect();
        if !unlocked.is_empty() {
            return Err(BuildError::Unlocked(unlocked));
        }
        let unsupported: Vec<String> = decisions
            .iter()
            .filter(|d| !matches!(d.status, Status::External(_)))
            .filter_map(|d| match &d.targets {
                TargetDecision::Unsupported { reason } => Some(format!("{} ({reason})", d.name)),
                _ => None,
            })
            .collect();
        if !unsupported.is_empty() {
            return Err(BuildError::Unsupported(unsupported));
        }
        let prefix = Prefix::new(&self.opts.prefix, self.cfg.link_mode);
        std::fs::create_dir_all(&self.opts.prefix).map_err(io_err("cannot create prefix", &self.opts.prefix))?;
        let mut outcomes = Vec::new();
        let names = |build: bool| {
            decisions
                .iter()
                .filter(|d| !build || matches!(d.status, Status::Build(_)))
                .map(|d| d.name.clone())
                .collect::<Vec<_>>()
        };
        self.progress.build_started(&names(false), &names(true));
        let result = self.build_all(&decisions, &prefix, &mut outcomes);
        self.progress.build_finished(result.is_ok());
        result.map(|()| outcomes)
    }

    /// Runs the recipes: each starts once its dependencies are done, side by side with others,
    /// holding as many jobs of the shared budget as it runs compile jobs.
    fn build_all(
        &self,
        decisions: &[Decision],
        prefix: &Prefix,
        outcomes: &mut Vec<(String, Outcome)>,
    ) -> Result<(), BuildError> {
        let order: BTreeMap<&str, usize> = decisions.iter().enumerate().map(|(i, d)| (d.name.as_str(), i)).collect();
        let mut waiting: BTreeMap<usize, usize> = decisions
            .iter()
            .enumerate()
            .map(|(i, d)| (i, d.inputs.deps.keys().filter(|k| order.contains_key(k.as_str())).count()))
            .collect();
        let mut ready: std::collections::BTreeSet<usize> =
            waiting.iter().filter(|(_, n)| **n == 0).map(|(i, _)| *i).collect();
        waiting.retain(|_, n| *n > 0);
        let mut failures: Vec<(String, BuildError)> = Vec::new();
        let mut blocked: Vec<String> = Vec::new();
        let mut done: Vec<(usize, Outcome)> = Vec::new();
        let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<Outcome, BuildError>)>();
        let mut free = self.opts.jobs;
        let mut held: BTreeMap<usize, usize> = BTreeMap::new();
        std::thread::scope(|scope| {
            let mut running = 0usize;
            loop {
                // After a failure (without --keep-going) nothing new starts.
                let may_start = failures.is_empty() || self.opts.keep_going;
                while let Some(i) = if may_start { ready.pop_first() } else { None } {
                    let d = &decisions[i];
                    let r = &self.stack.recipes[&d.name];
                    let want = match d.status {
                        Status::Build(_) => {
                            budget::jobs_for(self.opts.jobs, r.build.memory_per_job_gb, budget::available_memory())
                        }
                        _ => 1,
                    };
                    // A recipe starts when its share of the budget is free; else the scheduler
                    // waits for a running one to finish (and sees failures before starting more).
                    if want > free && running > 0 {
                        ready.insert(i);
                        break;
                    }
                    let jobs = want.min(free).max(1);
                    free -= jobs.min(free);
                    held.insert(i, jobs);
                    let tx = tx.clone();
                    running += 1;
                    scope.spawn(move || {
                        let result = self.run_recipe(d, jobs, prefix);
                        let _ = tx.send((i, result));
                    });
                }
                if running == 0 {
                    break;
                }
                let Ok((i, result)) = rx.recv() else { break };
                running -= 1;
                free += held.remove(&i).unwrap_or(0);
                let name = decisions[i].name.as_str();
                match result {
                    Ok(outcome) => {
                        done.push((i, outcome));
                        for (j, n) in waiting.iter_mut() {
                            if decisions[*j].inputs.deps.contains_key(name) {
                                *n -= 1;
                            }
                        }
                        let now_ready: Vec<usize> = waiting.iter().filter(|(_, n)| **n == 0).map(|(j, _)| *j).collect();
                        for j in now_ready {
                            waiting.remove(&j);
                            ready.insert(j);
                        }
                    }
                    Err(e) => failures.push((name.to_string(), e)),
                }
            }
        });
        // Whatever never became ready is downstream of a failure (or was not started).
        for j in waiting.keys().chain(ready.iter()) {
            blocked.push(decisions[*j].name.clone());
        }
        done.sort_by_key(|(i, _)| *i);
        outcomes.extend(done.into_iter().map(|(i, o)| (decisions[i].name.clone(), o)));
        match failures.len() {
            0 => Ok(()),
            1 if blocked.is_empty() || !self.opts.keep_going => Err(failures.pop().expect("one").1),
            _ => Err(BuildError::Several { failed: failures, not_built: blocked }),
        }
    }

    /// One recipe's turn: deploy its cached artifact, or build it.
    fn run_recipe(&self, d: &Decision, jobs: usize, prefix: &Prefix) -> Result<Outcome, BuildError> {
        let r = &self.stack.recipes[&d.name];
        self.progress.recipe_started(&d.name, d.status == Status::Cached);
        let result = match &d.status {
            Status::SourceOnly => Ok(Outcome::SourceOnly),
            Status::External(reason) => {
                self.progress.message(&d.name, reason);
                Ok(Outcome::External)
            }
            Status::Skipped(reason) => {
                self.progress.message(&d.name, &format!("skipped: {reason}"));
                Ok(Outcome::Skipped)
            }
            Status::Cached => (|| {
                let a = self.cache.get(&d.key).expect("decided cached");
                if let DeployOutcome::Deployed { files } = prefix.deploy(&d.name, &a, false)? {
                    self.progress.message(&d.name, &format!("cached ({}), deployed {files} files", d.key.short()));
                }
                self.publish_wheels(r, &a)?;
                self.remember(d)?;
                Ok(Outcome::Cached)
            })(),
            Status::Build(why) => {
                let why = if why.is_empty() { "not built before".to_string() } else { why.join(", ") };
                self.progress.message(&d.name, &format!("building ({why})"));
                self.build_one(r, d, jobs, prefix).map(|()| Outcome::Built)
            }
        };
        self.progress.recipe_finished(&d.name, result.as_ref().map(Outcome::as_str).unwrap_or("failed"));
        result
    }

    /// Publishes the wheels of a python-wheel or prebuilt-wheel artifact into the local index
    /// (all or none; the same bytes again are a no-op).
    fn publish_wheels(&self, r: &Recipe, a: &crate::cache::Artifact) -> Result<(), BuildError> {
        if !matches!(r.build.system, BuildSystem::PythonWheel | BuildSystem::PrebuiltWheel) {
            return Ok(());
        }
        let dir = a.tree().join(systems::WHEEL_DIR);
        let mut wheels: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io_err("no wheels were produced in", &dir))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "whl"))
            .collect();
        wheels.sort();
        if wheels.is_empty() {
            return Err(BuildError::Io {
                what: "no wheels were produced in",
                path: dir,
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        let index = self.cfg.index_dir();
        let reports = crate::index::publish_all(&index, &wheels)
            .map_err(|e| BuildError::Publish { recipe: r.name.clone(), source: e })?;
        for rep in reports {
            self.progress.message(
                &r.name,
                &format!(
                    "{}: {}",
                    match rep.outcome {
                        crate::index::PublishOutcome::Published => "published",
                        _ => "already in the index",
                    },
                    rep.filename
                ),
            );
        }
        Ok(())
    }

    fn remember(&self, d: &Decision) -> Result<(), BuildError> {
        let p = self.last_inputs_path(&d.name);
        crate::fsutil::write_if_changed(&p, &serde_json::to_vec_pretty(&d.inputs).expect("serialises"))
            .map(drop)
            .map_err(io_err("cannot write", &p))
    }

    fn work_dir(&self, recipe: &str) -> WorkDir {
        WorkDir::new(&self.cfg.work_dir, &self.stack.name, recipe)
    }

    fn build_one(&self, r: &Recipe, d: &Decision, jobs: usize, prefix: &Prefix) -> Result<(), BuildError> {
        // make-style tools in this recipe's steps share its slice of the budget (GNU make
        // jobserver); ninja and others get `-j`/MAX_JOBS of the same size.
        let client = jobserver::Client::new(jobs).map_err(io_err("cannot create a jobserver", Path::new("(pipe)")))?;
        let client = &client;
        let _lock = self.cache.lock(&d.key)?;
        let forced = matches!(&d.status, Status::Build(w) if w.iter().any(|x| x.starts_with("--rebuild")));
        let wd = self.work_dir(&r.name);
        if forced {
            // Start the work dir afresh; the cached artifact stays until the new one is stored.
            let _ = std::fs::remove_file(wd.root.join("state.json"));
        }
        if forced || self.cache.get(&d.key).is_none() {
            let dirs = StepDirs { scripts: wd.steps(), logs: wd.logs(), running: wd.root.join("running.pid") };
            step::reap_orphan(&dirs);
            let mut state = wd.begin(d.key.as_str()).map_err(io_err("cannot prepare work dir", &wd.root))?;
            let src = {
                let _one_at_a_time = self.prepare_lock.lock().unwrap_or_else(|e| e.into_inner());
                self.prepare_tree(r)?
            };
            std::fs::create_dir_all(wd.build()).map_err(io_err("cannot create", &wd.build()))?;
            let mut vars = self.vars(r, d, &wd, src, jobs)?;
            if r.build.system == BuildSystem::PythonWheel {
                (vars.find_links, vars.install_wheels) =
                    self.dependency_wheels(r, prefix, &wd.build().join("dependency-wheels"))?;
            }
            let mut steps = systems::steps(r, &vars, &systems::step_env(r, &vars, &self.keyed_env)?)?;
            let stage = wd.stage();
            let produced = match r.build.system {
                BuildSystem::Cmake => crate::fsutil::join_rel(&stage, &self.opts.prefix.display().to_string()),
                _ => stage.clone(),
            };
            // A store interrupted after it took the stage: redo the steps that fill the stage.
            if !produced.exists() {
                if let Some(first) = steps.iter().position(|s| s.fills_stage) {
                    let refill: Vec<&str> = steps[first..].iter().map(|s| s.name.as_str()).collect();
                    state.steps_done.retain(|n| !refill.contains(&n.as_str()));
                }
            }
            let mut retried_oom = false;
            let mut i = 0;
            while i < steps.len() {
                let s = &steps[i];
                if state.steps_done.contains(&s.name) {
                    i += 1;
                    continue;
                }
                self.progress.message(&r.name, &format!("{} ({} jobs)", s.name, vars.jobs));
                self.progress.step_command(&r.name, &s.name, &s.command);
                self.progress.step_started(&r.name, &s.name, &dirs.logs.join(format!("{}.log", s.name)));
                let result = step::run(&r.name, i, s, &dirs, Some(client));
                self.progress.step_finished(&r.name, &s.name, result.is_ok());
                match result {
                    Ok(()) => crate::fault::point(&format!("step:{}", steps[i].name), &r.name),
                    // Killed for memory: once, with half the jobs.
                    Err(StepError::Failed(f)) if f.looks_oom && !retried_oom => {
                        retried_oom = true;
                        let half = (vars.jobs / 2).max(1);
                        self.progress.warn(
                            &r.name,
                            &format!("step `{}` looks killed for lack of memory ({}); retrying once with {half} jobs instead of {}", f.step, f.status, vars.jobs),
                        );
                        vars.jobs = half;
                        steps = systems::steps(r, &vars, &systems::step_env(r, &vars, &self.keyed_env)?)?;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
                state.steps_done.push(steps[i].name.clone());
                wd.save(&state).map_err(io_err("cannot record step in", &wd.root))?;
                i += 1;
            }
            std::fs::create_dir_all(&produced).map_err(io_err("cannot create", &produced))?;
            if let Some(old) = self.cache.get(&d.key).filter(|_| forced) {
                self.cache.remove(&old.dir)?;
            }
            self.cache.store(&d.key, &d.inputs, &produced)?;
            crate::fsutil::remove_dir_all_if_exists(&stage).map_err(io_err("cannot clean", &stage))?;
            state.stored = true;
            wd.save(&state).map_err(io_err("cannot record step in", &wd.root))?;
        }
        let a = self.cache.get(&d.key).expect("just stored");
        prefix.deploy(&r.name, &a, forced)?;
        self.publish_wheels(r, &a)?;
        self.remember(d)?;
        self.progress.message(&r.name, &format!("built and deployed ({})", d.key.short()));
        Ok(())
    }

    fn vars(&self, r: &Recipe, d: &Decision, wd: &WorkDir, src: PathBuf, jobs: usize) -> Result<Vars, BuildError> {
        let host_python = match &self.stack.python {
            Some(v) => Some(
                find_python(v)
                    .ok_or_else(|| BuildError::NoPython { stack: self.stack.name.clone(), version: v.clone() })?,
            ),
            None => find_python("3"),
        };
        let python = if systems::uses_venv(r) { Some(wd.build().join("venv/bin/python")) } else { host_python.clone() };
        let mut source_trees = BTreeMap::new();
        for dep in &r.source_deps {
            source_trees.insert(dep.clone(), self.work_dir(dep).src());
        }
        Ok(Vars {
            prefix: self.opts.prefix.clone(),
            targets: d.targets.targets().cloned(),
            jobs,
            src,
            build: wd.build(),
            stage: wd.stage(),
            python,
            host_python,
            version: r.version.clone(),
            wheel_version: crate::index::local_version(
                &r.version,
                &self.stack.rocm_version,
                &d.targets.targets().map(|t| t.names()).unwrap_or_default(),
                d.key.as_str(),
            ),
            source_trees,
            rocm_path: self.rocm.as_ref().map(|r| r.path.clone()),
            find_links: None,
            install_wheels: Vec::new(),
        })
    }

    /// The wheels the recipe's build dependencies (transitively) deployed into the prefix, laid
    /// out as links in `dir` (recreated) for pip's `--find-links`, and the files among them that
    /// `install-wheels` names. `(None, [])` when no dependency deployed a wheel.
    fn dependency_wheels(
        &self,
        r: &Recipe,
        prefix: &Prefix,
        dir: &Path,
    ) -> Result<(Option<PathBuf>, Vec<PathBuf>), BuildError> {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo: Vec<&str> = r.build_deps.iter().map(String::as_str).collect();
        // (recipe, project, file name, path in the prefix)
        let mut wheels: Vec<(String, String, String, PathBuf)> = Vec::new();
        while let Some(dep) = todo.pop() {
            if !seen.insert(dep) {
                continue;
            }
            let Some(dr) = self.stack.recipes.get(dep) else { continue };
            todo.extend(dr.build_deps.iter().map(String::as_str));
            for f in prefix.manifest(dep).map(|m| m.files).unwrap_or_default() {
                let Some(file) = f.strip_prefix(&format!("{}/", systems::WHEEL_DIR)).filter(|n| !n.contains('/'))
                else {
                    continue;
                };
                if let Ok(w) = crate::index::WheelName::parse(file) {
                    wheels.push((dep.to_string(), w.project(), file.to_string(), prefix.root.join(&f)));
                }
            }
        }
        wheels.sort();
        for req in &r.build.requirements {
            let name: String = req
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .collect();
            let project = crate::index::normalize_name(&name);
            if let Some((dep, _, file, _)) = wheels.iter().find(|w| w.1 == project) {
                return Err(BuildError::RequirementIsDependencyWheel {
                    recipe: r.name.clone(),
                    requirement: req.clone(),
                    project: name,
                    dep: dep.clone(),
                    file: file.clone(),
                });
            }
        }
        let mut install = Vec::new();
        for name in &r.build.install_wheels {
            let project = crate::index::normalize_name(name);
            let found: Vec<&(String, String, String, PathBuf)> = wheels.iter().filter(|w| w.1 == project).collect();
            match found.as_slice() {
                [one] => install.push(dir.join(&one.2)),
                [] => {
                    let available = if wheels.is_empty() {
                        "its dependencies deployed no wheels".to_string()
                    } else {
                        format!(
                            "wheels of its dependencies: {}",
                            wheels.iter().map(|w| format!("{} from {}", w.2, w.0)).collect::<Vec<_>>().join(", ")
                        )
                    };
                    return Err(BuildError::NoDependencyWheel {
                        recipe: r.name.clone(),
                        name: name.clone(),
                        available,
                    });
                }
                many => {
                    return Err(BuildError::AmbiguousDependencyWheel {
                        recipe: r.name.clone(),
                        name: name.clone(),
                        wheels: many.iter().map(|w| format!("{} from {}", w.2, w.0)).collect(),
                    })
                }
            }
        }
        crate::fsutil::remove_dir_all_if_exists(dir).map_err(io_err("cannot clean", dir))?;
        if wheels.is_empty() {
            return Ok((None, install));
        }
        std::fs::create_dir_all(dir).map_err(io_err("cannot create", dir))?;
        for (_, _, file, path) in &wheels {
            let link = dir.join(file);
            std::os::unix::fs::symlink(path, &link).map_err(io_err("cannot link a dependency's wheel at", &link))?;
        }
        Ok((Some(dir.to_path_buf()), install))
    }

    /// The tree a recipe builds from (patched), preparing source dependencies as needed.
    fn prepare_tree(&self, r: &Recipe) -> Result<PathBuf, BuildError> {
        for dep in &r.source_deps {
            let dr = &self.stack.recipes[dep];
            self.prepare_own(dr)?;
        }
        match &r.source {
            SourceSpec::From { recipe, subdir } => {
                let base = self.work_dir(recipe).src();
                Ok(match subdir {
                    Some(s) => base.join(s),
                    None => base,
                })
            }
            _ => self.prepare_own(r),
        }
    }

    /// Fetches, checks out and patches a recipe's own source into its work dir.
    fn prepare_own(&self, r: &Recipe) -> Result<PathBuf, BuildError> {
        let wd = self.work_dir(&r.name);
        let src = wd.src();
        let subdir = match &r.source {
            SourceSpec::Git { subdir, .. } | SourceSpec::Url { subdir, .. } => subdir.clone(),
            _ => None,
        };
        match &r.source {
            SourceSpec::None | SourceSpec::From { .. } => {
                std::fs::create_dir_all(&src).map_err(io_err("cannot create", &src))?;
            }
            _ => {
                crate::source::prepare(self.cfg, self.tree, r, &src, self.progress)
                    .map_err(|e| BuildError::Source { recipe: r.name.clone(), source: e.into() })?;
            }
        }
        Ok(match subdir {
            Some(s) => src.join(s),
            None => src,
        })
    }
}

/// A host Python of `version` ("3.11"): `$ROCMFORGE_PYTHON`, `python3.11` on PATH, or pyenv's.
pub fn find_python(version: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ROCMFORGE_PYTHON").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = format!("python{version}");
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        // pyenv shims answer for versions that are not installed: skip them.
        if dir.to_string_lossy().contains("pyenv/shims") {
            continue;
        }
        let p = dir.join(&exe);
        if p.is_file() {
            return Some(p);
        }
    }
    let root =
        std::env::var_os("PYENV_ROOT").map(PathBuf::from).or_else(|| dirs::home_dir().map(|h| h.join(".pyenv")))?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n == version || n.starts_with(&format!("{version}."))
        })
        .map(|e| e.path().join("bin").join(&exe))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}
