//! One recipe's turn: deploy its cached artifact, or prepare its source, run its steps (resuming
//! finished ones), store the artifact and deploy it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::proofs;
use super::step::{self, Step, StepError};
use super::systems::{self, Vars};
use super::undeclared;
use super::{io_err, BuildError, Engine, Outcome};
use crate::deploy::{DeployOutcome, Prefix};
use crate::host::python::find_python;
use crate::layout::{WorkDir, WorkState};
use crate::plan::{PlanEntry, Status};
use crate::recipe::{BuildSystem, Recipe, SourceSpec};

impl Engine<'_> {
    /// Carries out the plan's status for one recipe.
    pub(super) fn run_recipe(&self, d: &PlanEntry, jobs: usize, prefix: &Prefix) -> Result<Outcome, BuildError> {
        // What is built: a stand-in's args, checks and estimate (`Recipe::as_built`).
        let built = self.stack.recipes[&d.name].as_built(&d.targets);
        let r = &*built;
        self.progress.recipe_started(&d.name, matches!(d.status, Status::Cached | Status::Remote(_)));
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
            Status::Cached | Status::Remote(_) => self.reuse(r, d, jobs, prefix),
            Status::Build { reasons, forced } => {
                let why = if reasons.is_empty() { "not built before".to_string() } else { reasons.join(", ") };
                self.progress.message(&d.name, &format!("building ({why})"));
                self.build_one(r, d, *forced, jobs, prefix).map(|()| Outcome::Built)
            }
            Status::Unlocked | Status::Unsupported(_) | Status::Refused(_) => {
                unreachable!("the engine refuses blocked plans")
            }
        };
        // Out of space writing rocmforge's own files (the work dir's, the state's, the
        // cache's): which disk filled, and the setting that moves it.
        let result = result.map_err(|e| match no_space(&e).then(|| explain_full_disk(self.cfg, &d.work().root)) {
            Some(Some(disk)) => BuildError::NoSpace { error: crate::diagnostic::one_line(&e), disk },
            _ => e,
        });
        if let Err(e) = &result {
            self.progress.recipe_failed(&d.name, &crate::diagnostic::one_line(e));
        }
        self.progress.recipe_finished(&d.name, result.as_ref().map_or(Outcome::Failed, |o| *o));
        result
    }

    /// Deploys the cached artifact the plan found. If it is gone by now (a concurrent `cache gc`
    /// removed it), the recipe is built instead, and the build says why.
    fn reuse(&self, r: &Recipe, d: &PlanEntry, jobs: usize, prefix: &Prefix) -> Result<Outcome, BuildError> {
        crate::fault::point("reuse", &d.name);
        let mut altered = None;
        let mut refused = None;
        // The plan found it only on the shared cache: `get` downloads it.
        let downloaded = matches!(d.status, Status::Remote(_));
        {
            // Held while deploying: `cache gc` takes the same lock before it removes anything.
            let _lock = self.store.lock(&d.key)?;
            let got = match self.store.get(&d.key) {
                Err(e @ crate::cache::CacheError::Refused { .. }) => {
                    refused = Some(e.to_string());
                    None
                }
                got => got?,
            };
            if let Some(a) = got {
                match self.check_before_deploy(&a, &d.name, prefix) {
                    Ok(()) => {}
                    Err(e @ crate::cache::CacheError::Altered { .. }) => {
                        // Never used: removed, and the recipe rebuilt and deployed again in full
                        // (a hard-linked prefix shares the altered file).
                        self.store.remove(&d.key)?;
                        altered = Some(e.to_string());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if let Some(a) = self.store.get(&d.key)? {
                if let DeployOutcome::Deployed { files } = prefix.deploy(&d.name, &a, false)? {
                    self.store.fingerprint(&a)?;
                    self.progress.message(&d.name, &format!("cached ({}), deployed {files} files", d.key.short()));
                }
                self.publish_wheels(r, &a)?;
                self.remember(d)?;
                return Ok(if downloaded { Outcome::Downloaded } else { Outcome::Cached });
            }
        }
        if let Some(why) = altered {
            self.progress.warn(&d.name, &format!("{why}: removed from the cache; rebuilding it"));
            return self.build_one(r, d, true, jobs, prefix).map(|()| Outcome::Built);
        }
        if let Some(why) = refused {
            self.progress.warn(&d.name, &format!("{why}; building it locally"));
            return self.build_one(r, d, false, jobs, prefix).map(|()| Outcome::Built);
        }
        if let Status::Remote(url) = &d.status {
            self.progress.warn(
                &d.name,
                &format!("artifact {} was in the remote cache {url} when the build was planned and could not be downloaded now: building it locally", d.key.short()),
            );
            return self.build_one(r, d, false, jobs, prefix).map(|()| Outcome::Built);
        }
        self.progress.warn(
            &d.name,
            &format!(
                "artifact {} was in the cache when the build was planned and is gone now (removed by `rocmforge cache gc` or by hand?): building it",
                d.key.short()
            ),
        );
        self.build_one(r, d, false, jobs, prefix).map(|()| Outcome::Built)
    }

    /// The check of a cached artifact before it is used: the cheap one (stat fingerprints)
    /// when the prefix holds it already, else, as its files are laid into the prefix for the
    /// night to build on, every file re-hashed (BENCHMARKS.md, "Deploys re-hash").
    fn check_before_deploy(
        &self,
        a: &crate::cache::Artifact,
        recipe: &str,
        prefix: &Prefix,
    ) -> Result<(), crate::cache::CacheError> {
        if prefix.is_deployed(recipe, a.key.as_str()) {
            self.store.check_intact(a)
        } else {
            self.store.check_whole(a)
        }
    }

    /// The artifact for `d` from the store (a remote copy included); one the store refused is
    /// said and taken as absent, so the recipe is built.
    fn get_or_build(&self, r: &Recipe, d: &PlanEntry) -> Result<Option<crate::cache::Artifact>, BuildError> {
        match self.store.get(&d.key) {
            Err(e @ crate::cache::CacheError::Refused { .. }) => {
                self.progress.warn(&r.name, &format!("{e}; building it locally"));
                Ok(None)
            }
            got => Ok(got?),
        }
    }

    fn remember(&self, d: &PlanEntry) -> Result<(), BuildError> {
        self.history.record(&d.inputs).map_err(|(path, source)| BuildError::Io { what: "cannot write", path, source })
    }

    /// A recipe's work dir: the plan's, or (for a recipe outside the plan) the same layout.
    pub(super) fn work_dir(&self, recipe: &str) -> WorkDir {
        self.plan
            .entry(recipe)
            .map(PlanEntry::work)
            .unwrap_or_else(|| WorkDir::new(&self.cfg.work_dir, &self.stack.name, recipe))
    }

    /// Locks `recipe`'s work dir for the rest of the build (once: later calls find it held),
    /// waiting, and saying so, while another process holds it.
    fn hold_work_dir(&self, recipe: &str) -> Result<(), BuildError> {
        let held = || self.work_locks.lock().unwrap_or_else(|e| e.into_inner());
        if held().contains_key(recipe) {
            return Ok(());
        }
        let wd = self.work_dir(recipe);
        let me = crate::layout::WorkHolder::me("build", &self.stack.name);
        let mut waiting = |holder: Option<crate::layout::WorkHolder>| {
            let who = holder.map(|h| h.to_string()).unwrap_or_else(|| "another process".into());
            self.progress.warn(recipe, &format!("waiting for {who}, which holds the work dir `{}`", wd.root.display()));
        };
        let lock = wd
            .lock(&me, Some(&mut waiting))
            .map_err(io_err("cannot lock the work dir", &wd.root))?
            .unwrap_or_else(|_| unreachable!("it waits"));
        held().entry(recipe.to_string()).or_insert(lock);
        Ok(())
    }

    fn build_one(
        &self,
        r: &Recipe,
        d: &PlanEntry,
        forced: bool,
        jobs: usize,
        prefix: &Prefix,
    ) -> Result<(), BuildError> {
        let _lock = self.store.lock(&d.key)?;
        self.hold_work_dir(&r.name)?;
        let wd = d.work();
        let mut forced = forced;
        let cached = if forced { None } else { self.get_or_build(r, d)? };
        if let Some(a) = cached {
            if let Err(e) = self.check_before_deploy(&a, &r.name, prefix) {
                self.progress.warn(&r.name, &format!("{e}: removed from the cache; rebuilding it"));
                self.store.remove(&d.key)?;
                forced = true;
            }
        }
        if forced {
            // Start the work dir afresh; the cached artifact stays until the new one is stored.
            let _ = std::fs::remove_file(wd.root.join("state.json"));
        }
        if forced || self.store.get(&d.key)?.is_none() {
            step::reap_orphan(&wd);
            let next_serial = || crate::layout::next_build_serial(&self.cfg.state_dir, &self.stack.name, &r.name);
            let mut state =
                wd.begin(d.key.as_str(), next_serial).map_err(io_err("cannot prepare work dir", &wd.root))?;
            let src = {
                let _one_at_a_time = self.prepare_lock.lock().unwrap_or_else(|e| e.into_inner());
                self.prepare_tree(r)?
            };
            std::fs::create_dir_all(wd.build()).map_err(io_err("cannot create", &wd.build()))?;
            // What the steps write into the prefix is nobody's (the clock's coarse tick is the
            // second taken off).
            let steps_began = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
            let produced = self.run_steps(r, d, &wd, &mut state, src, jobs, prefix)?;
            if r.build.system == BuildSystem::RuntimeWheel {
                self.make_runtime_wheel(r, &produced, prefix, self.wheel_version(r, d, state.serial))?;
            }
            self.link_runtime_wheels(r, &produced, prefix)?;
            let stray = prefix.unowned_since(steps_began);
            if !stray.is_empty() {
                let _ = std::fs::remove_file(wd.root.join("state.json"));
                return Err(BuildError::WroteIntoPrefix {
                    recipe: r.name.clone(),
                    prefix: prefix.root.clone(),
                    files: stray,
                });
            }
            std::fs::create_dir_all(&produced).map_err(io_err("cannot create", &produced))?;
            // Before anything opens a file of the stage: a FIFO would block it for ever.
            let special = crate::fsutil::special_files(&produced).map_err(io_err("cannot read", &produced))?;
            if !special.is_empty() {
                return Err(BuildError::SpecialFiles { recipe: r.name.clone(), stage: produced, files: special });
            }
            let entries = crate::fsutil::list_tree(&produced).map_err(io_err("cannot read", &produced))?;
            if entries.iter().all(|e| e.kind == crate::fsutil::EntryKind::Dir) {
                // A cmake build that installs nothing was misconfigured; a script may mean it.
                if r.build.system == BuildSystem::Cmake {
                    return Err(BuildError::NothingInstalled { recipe: r.name.clone(), stage: produced });
                }
                self.progress.warn(&r.name, &format!("its steps installed nothing into `{}`", produced.display()));
            }
            self.clear_exec_stacks(r, &produced)?;
            self.record_gpu_code(r, &produced, prefix, d.targets.targets().unwrap_or(&self.plan.targets))?;
            self.check_wheels(r, &produced, prefix)?;
            self.check_outputs(r, d, &produced, &wd)?;
            if forced {
                self.store.remove(&d.key)?;
            }
            self.store.put(&d.key, &d.inputs, &produced)?;
            for done in [wd.stage(), wd.tmp()] {
                crate::fsutil::remove_dir_all_if_exists(&done).map_err(io_err("cannot clean", &done))?;
            }
            state.stored = true;
            wd.save(&state).map_err(io_err("cannot record step in", &wd.root))?;
        }
        let Some(a) = self.store.get(&d.key)? else {
            return Err(BuildError::Vanished {
                recipe: r.name.clone(),
                key: d.key.to_string(),
                store: self.store.location(),
            });
        };
        if let DeployOutcome::Deployed { .. } = prefix.deploy(&r.name, &a, forced)? {
            self.store.fingerprint(&a)?;
        }
        self.publish_wheels(r, &a)?;
        self.remember(d)?;
        self.progress.message(&r.name, &format!("built and deployed ({})", d.key.short()));
        Ok(())
    }

    /// Runs the recipe's steps not yet finished (an OOM-killed step once more with half the
    /// jobs); returns the directory holding what the steps installed.
    #[allow(clippy::too_many_arguments)]
    fn run_steps(
        &self,
        r: &Recipe,
        d: &PlanEntry,
        wd: &WorkDir,
        state: &mut WorkState,
        src: PathBuf,
        jobs: usize,
        prefix: &Prefix,
    ) -> Result<PathBuf, BuildError> {
        // make-style tools in this recipe's steps share its slice of the budget (GNU make
        // jobserver); ninja and others get `-j`/MAX_JOBS of the same size.
        let client = jobserver::Client::new(jobs).map_err(io_err("cannot create a jobserver", Path::new("(pipe)")))?;
        let mut vars = self.vars(r, d, wd, src, jobs, state.serial)?;
        if r.build.system == BuildSystem::PythonWheel {
            (vars.find_links, vars.install_wheels) =
                self.dependency_wheels(r, prefix, &wd.build().join("dependency-wheels"))?;
        }
        let mut steps = self.expand_steps(r, d, wd, &vars)?;
        let produced = vars.installed.clone();
        redo_steps_of_a_taken_stage(&steps, &produced, state);
        // The steps' temp dir starts empty: what a killed run's steps left there goes (their
        // processes were stopped before this).
        crate::fsutil::remove_dir_all_if_exists(&vars.tmp).map_err(io_err("cannot empty", &vars.tmp))?;
        std::fs::create_dir_all(&vars.tmp).map_err(io_err("cannot create", &vars.tmp))?;
        let server = self.start_compiler_cache_server(r, wd, &steps, state);
        let mut retried_oom = false;
        // Each helpers folder is laid out once per build, by the first check that names it.
        let mut helpers_laid = BTreeSet::new();
        let mut i = 0;
        while i < steps.len() {
            let s = &steps[i];
            if state.steps_done.contains(&s.name) {
                i += 1;
                continue;
            }
            // A check's first step starts from a fresh copy of its files.
            if let Some(c) = r.checks.iter().find(|c| proofs::check_step_names(c).first() == Some(&s.name)) {
                proofs::materialize(c, &s.cwd, &mut helpers_laid)?;
            }
            match self.run_step(r, wd, i, s, &client, vars.jobs, prefix)? {
                Ok(()) => crate::fault::point(&format!("step:{}", steps[i].name), &r.name),
                // Killed for memory: once, with half the jobs.
                Err(StepError::Failed(f)) if f.looks_oom && !retried_oom => {
                    retried_oom = true;
                    vars.jobs = self.halve_jobs_after_oom(r, &f, vars.jobs);
                    steps = self.expand_steps(r, d, wd, &vars)?;
                    continue;
                }
                Err(StepError::Failed(f)) => {
                    return Err(match disk_full(self.cfg, &wd.root, &f.tail_lines) {
                        Some(disk) => BuildError::DiskFull { failure: f, disk },
                        None => StepError::Failed(f).into(),
                    })
                }
                Err(e) => return Err(e.into()),
            }
            state.steps_done.push(steps[i].name.clone());
            // A step done in rocmforge (emptying the stage) is recorded with the next one: were
            // it lost, it would be redone, at no cost, before the steps it comes before.
            if steps[i].fresh_dir.is_none() {
                wd.save(state).map_err(io_err("cannot record step in", &wd.root))?;
            }
            i += 1;
        }
        self.check_undeclared_caches_below(r, wd, &vars.src, prefix)?;
        drop(server);
        if let Some(stats) = self.opts.launchers.stats(wd).filter(|s| s.hits + s.misses + s.uncacheable > 0) {
            self.progress.message(&r.name, &stats.summary());
            self.progress.compiler_cache(&r.name, &stats);
        }
        Ok(produced)
    }

    /// The recipe's steps with `vars` filled in, each with its environment (the keyed variables,
    /// the compiler launchers).
    fn expand_steps(&self, r: &Recipe, d: &PlanEntry, wd: &WorkDir, vars: &Vars) -> Result<Vec<Step>, BuildError> {
        let toolchain = crate::digest::sha256_hex(
            serde_json::to_string(&(&d.inputs.toolchain, &d.inputs.deps)).expect("serialises").as_bytes(),
        );
        let mut env = systems::step_env(r, vars, &d.inputs.env)?;
        self.opts.launchers.apply(r, &mut env, &self.cfg.work_dir, wd, &toolchain);
        Ok(systems::steps(r, vars, &env)?)
    }

    /// A compiler cache's server, if it has one, runs while the steps do (outside their process
    /// groups, which are stopped after each step); none when every step is done.
    fn start_compiler_cache_server(
        &self,
        r: &Recipe,
        wd: &WorkDir,
        steps: &[Step],
        state: &WorkState,
    ) -> Option<super::sccache::Server> {
        let first = steps.iter().find(|s| !state.steps_done.contains(&s.name))?;
        self.opts.launchers.start_server(&first.env, wd).unwrap_or_else(|e| {
            self.progress.warn(&r.name, &format!("{e}: the compiles are not counted for the report"));
            None
        })
    }

    /// Runs step `i`, telling the progress; the outer error is what CMake's cache shows after it
    /// searched (a package found outside the recipe's closure), the inner the step's own.
    #[allow(clippy::too_many_arguments)]
    fn run_step(
        &self,
        r: &Recipe,
        wd: &WorkDir,
        i: usize,
        s: &Step,
        client: &jobserver::Client,
        jobs: usize,
        prefix: &Prefix,
    ) -> Result<Result<(), StepError>, BuildError> {
        self.progress.message(&r.name, &format!("{} ({jobs} jobs)", s.name));
        self.progress.step_command(&r.name, &s.name, &s.command);
        self.progress.step_started(&r.name, &s.name, &wd.step_log(&s.name));
        let result = step::run(&r.name, i, s, wd, Some(client));
        self.progress.step_finished(&r.name, &s.name, result.is_ok());
        // CMake has searched by now (configure; build, which may configure again): its
        // cache says whether it found what the recipe does not depend on. A configure that
        // failed may have failed for want of such a package, which had not finished yet.
        let searched = r.build.system == BuildSystem::Cmake && matches!(s.name.as_str(), "configure" | "build");
        if searched && (result.is_ok() || s.name == "configure") {
            if let Err(u) = self.check_undeclared(r, &wd.build().join("CMakeCache.txt"), prefix) {
                if let Err(StepError::Failed(f)) = &result {
                    self.progress
                        .warn(&r.name, &format!("step `{}` failed ({}; log: {})", f.step, f.status, f.log.display()));
                }
                return Err(u);
            }
        }
        Ok(result)
    }

    /// The jobs for the retry of a step that looks killed for memory: half, and the user told.
    fn halve_jobs_after_oom(&self, r: &Recipe, f: &step::StepFailure, jobs: usize) -> usize {
        let half = (jobs / 2).max(1);
        self.progress.warn(
            &r.name,
            &format!(
                "step `{}` looks killed for lack of memory ({}); retrying once with {half} jobs instead of {jobs}",
                f.step, f.status
            ),
        );
        half
    }

    /// A CMake run inside other systems' steps (PyTorch's setup.py) leaves its cache below the
    /// source or build dir: each is checked as a CMake recipe's own is.
    fn check_undeclared_caches_below(
        &self,
        r: &Recipe,
        wd: &WorkDir,
        src: &Path,
        prefix: &Prefix,
    ) -> Result<(), BuildError> {
        if matches!(r.build.system, BuildSystem::PythonWheel | BuildSystem::Script) {
            let mut caches = undeclared::caches_below(&wd.build());
            if src != wd.build() {
                caches.extend(undeclared::caches_below(src));
            }
            for cache in caches {
                self.check_undeclared(r, &cache, prefix)?;
            }
        }
        Ok(())
    }

    /// Fails when the CMake cache at `cache` shows the build using what recipes outside its
    /// declared closure installed (see `undeclared`).
    fn check_undeclared(&self, r: &Recipe, cache: &Path, prefix: &Prefix) -> Result<(), BuildError> {
        undeclared::check(cache, r, self.stack, &prefix.root, &prefix.manifests())?;
        Ok(())
    }

    /// `serial`: the build serial of this key's build (see [`crate::index::local_version`]).
    fn vars(
        &self,
        r: &Recipe,
        d: &PlanEntry,
        wd: &WorkDir,
        src: PathBuf,
        jobs: usize,
        serial: u64,
    ) -> Result<Vars, BuildError> {
        let host_python = match &self.stack.python {
            Some(_) if !r.uses_stack_python() => None,
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
        let installed = match r.build.system {
            BuildSystem::Cmake => crate::fsutil::join_rel(&wd.stage(), &self.plan.prefix.display().to_string()),
            _ => wd.stage(),
        };
        // The installation's copy for a recipe built on it, else the prefix's.
        let on_installation = |taken: &Option<PathBuf>, own: PathBuf| match taken {
            Some(dir) if d.on_installation => dir.clone(),
            _ => own,
        };
        // `{root:<dep>}`: where each build dependency's files lie.
        let dep_roots = r
            .build_deps
            .iter()
            .map(|dep| {
                let taken = self.plan.entry(dep).is_some_and(|e| e.state() == crate::plan::State::External);
                let root = match &self.plan.rocm_path {
                    Some(dir) if taken => dir.clone(),
                    _ => self.plan.prefix.clone(),
                };
                (dep.clone(), root)
            })
            .collect();
        Ok(Vars {
            installed,
            requested: Some(self.plan.targets.clone()),
            prefix: self.plan.prefix.clone(),
            targets: d.targets.targets().cloned(),
            jobs,
            src,
            build: wd.build(),
            stage: wd.stage(),
            tmp: wd.tmp(),
            work_dir: self.cfg.work_dir.clone(),
            python,
            host_python,
            version: r.version.clone(),
            wheel_version: self.wheel_version(r, d, serial),
            source_trees,
            rocm_path: self.plan.rocm_path.clone(),
            rocm: on_installation(&self.plan.rocm_path, self.plan.prefix.clone()),
            rocm_llvm: on_installation(&self.plan.rocm_llvm, self.plan.prefix.join("llvm")),
            rocm_device_libs: on_installation(&self.plan.rocm_device_libs, self.plan.prefix.join("amdgcn/bitcode")),
            package_roots: if d.on_installation { self.rebuilt_packages(&d.name) } else { Vec::new() },
            package_dirs: if d.on_installation { self.plan.taken_cmake_dirs.clone() } else { Default::default() },
            dep_roots,
            find_links: None,
            install_wheels: Vec::new(),
        })
    }

    /// The version a wheel the recipe makes gets: its own, with the local label of this build
    /// (ROCm, targets, build serial, key: [`crate::index::local_version`]).
    fn wheel_version(&self, r: &Recipe, d: &PlanEntry, serial: u64) -> String {
        crate::index::local_version(
            &r.version,
            &self.stack.rocm_version,
            &d.targets.targets().map(|t| t.names()).unwrap_or_default(),
            serial,
            d.key.as_str(),
        )
    }

    /// The CMake packages of the recipes `name` depends on (transitively) that this plan builds
    /// or deploys from the cache, rather than takes from the installation or skips.
    fn rebuilt_packages(&self, name: &str) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![name.to_string()];
        let mut out = BTreeSet::new();
        while let Some(n) = todo.pop() {
            let Some(e) = self.plan.entry(&n) else { continue };
            for dep in &e.deps {
                if !seen.insert(dep.clone()) {
                    continue;
                }
                todo.push(dep.clone());
                // Taken, or skipped as not needed: nothing of it is in the prefix.
                let absent = self
                    .plan
                    .entry(dep)
                    .is_some_and(|e| matches!(e.state(), crate::plan::State::External | crate::plan::State::Skipped));
                let r = &self.stack.recipes[dep];
                if !absent {
                    out.extend(r.cmake_packages.iter().cloned());
                    out.extend(r.external.as_ref().and_then(|x| x.cmake_package.clone()));
                }
            }
        }
        out.into_iter().collect()
    }

    /// The tree a recipe builds from (patched), preparing source dependencies as needed.
    fn prepare_tree(&self, r: &Recipe) -> Result<PathBuf, BuildError> {
        for dep in &r.source_deps {
            self.prepare_own(&self.stack.recipes[dep])?;
        }
        match &r.source {
            SourceSpec::From { recipe, subdir } => {
                self.hold_work_dir(recipe)?;
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
        self.hold_work_dir(&r.name)?;
        let src = self.work_dir(&r.name).src();
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

/// Whether `e` failed for want of space: a write that got ENOSPC or EDQUOT somewhere in its
/// chain (a failed step is told apart by its log instead, [`disk_full`]).
fn no_space(e: &BuildError) -> bool {
    if matches!(e, BuildError::DiskFull { .. } | BuildError::NoSpace { .. } | BuildError::Step(StepError::Failed(_))) {
        return false;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            let full = [rustix::io::Errno::NOSPC, rustix::io::Errno::DQUOT].map(|e| e.raw_os_error());
            if io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error().is_some_and(|n| full.contains(&n)) {
                return true;
            }
        }
        cause = c.source();
    }
    false
}

/// Which of rocmforge's disks is full, for a recipe whose work dir is `root`: its work dir's
/// (with what the recipe left there), else the state or cache dir's.
fn explain_full_disk(cfg: &crate::config::Config, root: &std::path::Path) -> Option<String> {
    let space = crate::fsutil::disk_space(root).or_else(|| crate::fsutil::disk_space(&cfg.work_dir))?;
    if space.free < NEARLY_FULL {
        return disk_full(cfg, root, &[]);
    }
    other_disk_full(cfg, root, &space)
}

/// A step said a disk filled while its work dir's disk (`work`, holding `root`) has room: the
/// state or cache dir's disk, when one of them is (nearly) full, named with what it holds. Not
/// the work dir's, which a user who moved it to an empty disk would otherwise be told to move
/// again.
fn other_disk_full(
    cfg: &crate::config::Config,
    root: &std::path::Path,
    work: &crate::fsutil::DiskSpace,
) -> Option<String> {
    let dirs = [
        ("state dir", &cfg.state_dir, "state-dir", "ROCMFORGE_STATE_DIR", "its build reports, venvs, lock files and, unless `index-dir` moves it, the wheel index: a new state dir starts those afresh"),
        ("cache dir", &cfg.cache_dir, "cache-dir", "ROCMFORGE_CACHE_DIR", "every recipe's artifact and download: what it holds now is not seen from a new one"),
    ];
    dirs.into_iter().find_map(|(what, dir, key, env, holds)| {
        let space = crate::fsutil::disk_space(dir)?;
        (space.mount != work.mount && space.free < NEARLY_FULL).then(|| {
            format!(
                "the disk holding the {what} `{}` (mounted at `{}`) is full: {} free of {}. The work dir `{}` is on another disk (`{}`, {} free), which did not fill. To go on: free space on `{}` and run the same command again; or set {} to a directory on a larger disk (the {what} holds {holds})",
                dir.display(),
                space.mount.display(),
                crate::fsutil::human_size(space.free),
                crate::fsutil::human_size(space.total),
                root.display(),
                work.mount.display(),
                crate::fsutil::human_size(work.free),
                space.mount.display(),
                setting_name(key, env),
            )
        })
    })
}

/// How the user sets `key`: the environment variable when it is set (it overrides the
/// config), else the config file.
fn setting_name(key: &str, env: &str) -> String {
    if std::env::var_os(env).is_some_and(|x| !x.is_empty()) {
        format!("`{env}` (set in this environment; it overrides `{key}` in the config)")
    } else {
        format!("`{key}` in the config file `{}`", crate::config::Config::default_file().display())
    }
}

/// Below this much free space, a failed step is taken to have filled the disk.
const NEARLY_FULL: u64 = 64 << 20;

/// When a step failed because the disk holding the work dir `root` filled up (its log says so,
/// or almost nothing is free there), what to tell the user: where, how much is free, every
/// directory of rocmforge's on that disk (its state writes need room too, so moving the work
/// dir alone is not enough while the failed tree fills the disk), what the recipe left there,
/// and the commands that go on.
/// A store interrupted after it took the stage: the steps that fill the stage are redone.
fn redo_steps_of_a_taken_stage(steps: &[Step], produced: &Path, state: &mut WorkState) {
    if !produced.exists() {
        if let Some(first) = steps.iter().position(|s| s.fills_stage) {
            let refill: Vec<&str> = steps[first..].iter().map(|s| s.name.as_str()).collect();
            state.steps_done.retain(|n| !refill.contains(&n.as_str()));
        }
    }
}

fn disk_full(cfg: &crate::config::Config, root: &std::path::Path, tail: &[String]) -> Option<String> {
    let said = tail.iter().any(|l| l.contains("No space left on device") || l.contains("Disk quota exceeded"));
    let space = crate::fsutil::disk_space(root)?;
    if space.free >= NEARLY_FULL {
        // The work dir's disk has room: the one that filled is another, the state or cache
        // dir's when one of them is (nearly) full, else one that is not rocmforge's (the
        // step's log says which).
        return if said { other_disk_full(cfg, root, &space) } else { None };
    }
    let used = crate::fsutil::tree_size(root);
    let on_disk = |dir: &std::path::Path| crate::fsutil::disk_space(dir).is_some_and(|d| d.mount == space.mount);
    let mut here: Vec<String> = Vec::new();
    for (what, dir) in [("work dir", &cfg.work_dir), ("state dir", &cfg.state_dir), ("cache dir", &cfg.cache_dir)] {
        if on_disk(dir) {
            here.push(format!("the {what} `{}`", dir.display()));
        }
    }
    let cache_here = on_disk(&cfg.cache_dir);
    let setting = setting_name;
    Some(format!(
        "the disk holding `{}` (mounted at `{}`) is full: {} free of {}. rocmforge writes there: {}. This recipe's work dir holds {} of what its steps made, and needed more than the {} that were free. To go on: run `rocmforge clean --all` (it frees the work dirs there, this one included: a work dir on another disk starts the recipe afresh anyway), then set {} to a directory on a larger disk{}, then run the same command again. Or free space on `{}` and run the same command again",
        root.display(),
        space.mount.display(),
        crate::fsutil::human_size(space.free),
        crate::fsutil::human_size(space.total),
        here.join(", "),
        crate::fsutil::human_size(used),
        crate::fsutil::human_size(space.free),
        setting("work-dir", "ROCMFORGE_WORK_DIR"),
        if cache_here {
            format!(
                " (if this disk is small, move the cache too, {}: every recipe's artifact is stored there; what it holds now is not seen from the new one)",
                setting("cache-dir", "ROCMFORGE_CACHE_DIR")
            )
        } else {
            String::new()
        },
        space.mount.display(),
    ))
}
