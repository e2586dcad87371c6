//! The build engine: carries out a plan. Each recipe starts once its dependencies are done
//! (`schedule`), then reuses its cached artifact or builds it (`recipe_build`: source, steps,
//! store, deploy); its wheels go to the local index (`outputs`). A build that finds what a recipe
//! it does not depend on installed fails (`undeclared`), so no result depends on timing.
//! Everything it does was decided by the plan: the engine computes no keys and no statuses.

pub mod budget;
pub mod compilers;
mod outputs;
mod proofs;
mod preflight;
mod recipe_build;
mod schedule;
pub mod sccache;
pub mod step;
pub mod systems;
pub mod undeclared;

use std::path::{Path, PathBuf};

use crate::cache::Store;
use crate::config::Config;
use crate::deploy::Prefix;
use crate::history::History;
use crate::plan::{Plan, PlanEntry, Status};
use crate::progress::Progress;
use crate::recipe::{RecipeTree, Stack};

pub use crate::host::python::find_python;
use step::StepError;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{} recipe(s) have no pinned commit: {}\nrun `rocmforge lock` to resolve their tags to commits, then build again", .0.len(), .0.join(", "))]
    Unlocked(Vec<String>),
    #[error("none of the requested targets can be built by: {}", .0.join("; "))]
    Unsupported(Vec<String>),
    #[error("the installed ROCm does not match the stack; nothing was built:{}", .0.iter().map(|r| format!("\n  - {r}")).collect::<String>())]
    Refused(Vec<String>),
    #[error(transparent)]
    Step(#[from] StepError),
    #[error("{}: step `{}` failed because its disk is full: {disk}\n{failure}", failure.recipe, failure.step)]
    DiskFull { failure: Box<step::StepFailure>, disk: String },
    #[error("{error}\nbecause a disk is full: {disk}")]
    NoSpace { error: String, disk: String },
    #[error("{recipe}: its steps succeeded but installed nothing into `{stage}`, so its artifact would be empty; nothing was stored. Check that the project has install rules and that the recipe does not send them elsewhere")]
    NothingInstalled { recipe: String, stage: PathBuf },
    #[error("{recipe}: its steps left {} in the stage `{}` that cannot be stored or deployed (only files, directories and symlinks can): {}; nothing was stored. Remove them in a step (`rm -f {{stage}}/{}`) or make the step not install them", if files.len() == 1 { "a special file" } else { "special files" }, stage.display(), files.iter().map(|(f, k)| format!("`{f}` is {k}")).collect::<Vec<_>>().join(", "), files[0].0)]
    SpecialFiles { recipe: String, stage: PathBuf, files: Vec<(String, &'static str)> },
    #[error("{recipe}: its steps wrote into the prefix `{}` outside its stage, where no artifact holds, restores or removes what they wrote: {}{}; nothing was stored. Install into {{stage}} instead (a cmake recipe's install goes there by itself); the steps run again next time. Remove the files by hand: they are no recipe's", prefix.display(), files.iter().take(10).map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", "), if files.len() > 10 { format!(" and {} more", files.len() - 10) } else { String::new() })]
    WroteIntoPrefix { recipe: String, prefix: PathBuf, files: Vec<String> },
    #[error("{} recipe(s) failed: {}\n{}{}", failed.len(), failed.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "), failed.iter().map(|(_, e)| format!("\n{e}\n")).collect::<String>(), if not_built.is_empty() { String::new() } else { format!("\nnot built (downstream of a failure): {}", not_built.join(", ")) })]
    Several { failed: Vec<(String, BuildError)>, not_built: Vec<String> },
    #[error(transparent)]
    Expand(#[from] systems::ExpandError),
    #[error(transparent)]
    Undeclared(#[from] undeclared::UndeclaredError),
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
    #[error("{recipe}: {why}; nothing was stored")]
    WheelTargets { recipe: String, why: String },
    #[error("{recipe}: {why}; nothing was stored or published")]
    RuntimeWheel { recipe: String, why: String },
    #[error("{recipe}: `install-wheels` names `{name}`, but no build dependency of {recipe} deployed a wheel of that project ({available})")]
    NoDependencyWheel { recipe: String, name: String, available: String },
    #[error("{recipe}: `install-wheels` names `{name}`, which more than one build dependency built: {}", .wheels.join(", "))]
    AmbiguousDependencyWheel { recipe: String, name: String, wheels: Vec<String> },
    #[error("{recipe}: requirement `{requirement}` names `{project}`, a project its dependency `{dep}` builds ({file}): from `requirements`, pip may install another build of it from an index; list it in `install-wheels` instead")]
    RequirementIsDependencyWheel { recipe: String, requirement: String, project: String, dep: String, file: String },
    #[error("stack `{stack}` wants Python {version}, which was not found on PATH, in pyenv or by uv: install it with `{}` (or set ROCMFORGE_PYTHON to an interpreter)", crate::host::python::install_hint(.version))]
    NoPython { stack: String, version: String },
    #[error("{} of the {checked} source(s) this build would prepare cannot be used; nothing was built:{}", failures.len(), failures.iter().map(|(r, e)| format!("\n  - {r}: {}", e.replace('\n', "\n    "))).collect::<String>())]
    Preflight { failures: Vec<(String, String)>, checked: usize },
    #[error("{recipe}: its installed files do not carry what {what} in {file} declares; nothing was stored:{}\nCheck that the build compiles for every target (the recipe passes {{targets}} to it) and that the declared paths are where it installs", problems.iter().map(|p| format!("\n  - {p}")).collect::<String>())]
    Coverage { recipe: String, file: String, what: String, problems: Vec<String> },
    #[error("{recipe}: does not install what its consumers need (`[[provides]]` in {file}); nothing was stored:{}\nThis recipe is what is wrong, not its consumers: fix its build (each need names the consumer's file and line that take it), then build again", problems.iter().map(|p| format!("\n  - {p}")).collect::<String>())]
    Provides { recipe: String, file: String, problems: Vec<String> },
    #[error("{recipe}: installs ELF files that need an executable stack, which glibc 2.41 and later refuse to load (dlopen: cannot enable executable stack); nothing was stored:{}\nFix its build in {file}: link each with `-Wl,-z,noexecstack`, or add `-Wa,--noexecstack` for assembly sources (an assembly file without a `.note.GNU-stack` section makes the whole library ask for one); clr fixed its own in ROCm 6.1 (ROCm/clr issue 22)", problems.iter().map(|p| format!("\n  - {p}")).collect::<String>())]
    ExecStack { recipe: String, file: String, problems: Vec<String> },
    #[error("this host lacks what the recipes to build need; nothing was fetched or built (`rocmforge doctor` shows the whole host):{problems}")]
    Host { problems: String },
    #[error("{recipe}: artifact {key} is not in the cache at {store} right after it was stored; is another process cleaning the cache (`rocmforge cache gc`)? Build again")]
    Vanished { recipe: String, key: String, store: String },
}

fn io_err<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> BuildError + 'p {
    move |source| BuildError::Io { what, path: path.to_path_buf(), source }
}

/// How the engine spends the machine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The job budget (default: cores).
    pub jobs: usize,
    /// Build everything not downstream of a failure, then report all failures.
    pub keep_going: bool,
    /// The compiler cache and distcc in front of the recipes' compilers.
    pub launchers: compilers::Launchers,
}

/// What happened to each recipe (the progress trait's type: the report records the same).
pub use crate::progress::Outcome;

pub struct Engine<'a> {
    cfg: &'a Config,
    tree: &'a RecipeTree,
    stack: &'a Stack,
    plan: &'a Plan,
    store: &'a dyn Store,
    progress: &'a dyn Progress,
    opts: EngineOptions,
    history: History,
    /// Source trees are prepared one at a time (several recipes share one checkout).
    prepare_lock: std::sync::Mutex<()>,
    /// The work dirs this build uses, each locked from its first use until the build ends, so
    /// `clean` leaves them alone.
    work_locks: std::sync::Mutex<std::collections::BTreeMap<String, crate::fsutil::HeldLock>>,
}

impl<'a> Engine<'a> {
    pub fn new(
        cfg: &'a Config,
        tree: &'a RecipeTree,
        stack: &'a Stack,
        plan: &'a Plan,
        store: &'a dyn Store,
        progress: &'a dyn Progress,
        opts: EngineOptions,
    ) -> Engine<'a> {
        let history = History::new(&cfg.state_dir, &stack.name);
        Engine {
            cfg,
            tree,
            stack,
            plan,
            store,
            progress,
            opts,
            history,
            prepare_lock: std::sync::Mutex::new(()),
            work_locks: Default::default(),
        }
    }

    /// Carries out the plan. Returns each recipe's outcome in plan order. A plan with blocked
    /// recipes (unlocked sources, unsupported targets) is refused before anything runs.
    pub fn run(&self) -> Result<Vec<(String, Outcome)>, BuildError> {
        let entries = &self.plan.recipes;
        let unlocked: Vec<String> =
            entries.iter().filter(|e| e.status == Status::Unlocked).map(|e| e.name.clone()).collect();
        if !unlocked.is_empty() {
            return Err(BuildError::Unlocked(unlocked));
        }
        let unsupported: Vec<String> = entries
            .iter()
            .filter_map(|e| match &e.status {
                Status::Unsupported(reason) => Some(format!("{} ({reason})", e.name)),
                _ => None,
            })
            .collect();
        if !unsupported.is_empty() {
            return Err(BuildError::Unsupported(unsupported));
        }
        let mut refused: Vec<String> = entries
            .iter()
            .filter_map(|e| match &e.status {
                Status::Refused(reason) => Some(format!("{}: {reason}", e.name)),
                _ => None,
            })
            .collect();
        if refused.len() > 1 {
            refused.push(format!("to take them all: `--accept-rocm-version {}`", self.plan.accept_versions.join(",")));
        }
        if !refused.is_empty() {
            return Err(BuildError::Refused(refused));
        }
        let names =
            |build: bool| entries.iter().filter(|e| !build || e.builds()).map(|e| e.name.clone()).collect::<Vec<_>>();
        self.progress.build_started(&names(false), &names(true));
        // distcc recipes may run as many more jobs as the other hosts take; memory still caps
        // them (links, and the preprocessing distcc does here).
        let distcc = |e: &PlanEntry| self.opts.launchers.distcc_for(&self.stack.recipes[&e.name]);
        let remote = if entries.iter().any(|e| e.builds() && distcc(e)) { self.opts.launchers.remote_slots } else { 0 };
        let want = |e: &PlanEntry| match e.status {
            Status::Build { .. } => budget::jobs_for(
                self.opts.jobs + if distcc(e) { remote } else { 0 },
                self.stack.recipes[&e.name].build.memory_per_job_gb,
                budget::available_memory(),
            ),
            _ => 1,
        };
        let result = self.host_preflight().and_then(|()| self.preflight()).and_then(|()| {
            let prefix = Prefix::new(&self.plan.prefix, self.cfg.link_mode);
            std::fs::create_dir_all(&self.plan.prefix).map_err(io_err("cannot create prefix", &self.plan.prefix))?;
            // Uploads to a shared cache run beside the recipes, and end with the build.
            std::thread::scope(|s| {
                self.store.open_uploads();
                s.spawn(|| self.store.run_uploads());
                // Closed however the schedule ends (a panic too), or the scope would wait forever.
                struct Close<'s>(&'s dyn Store);
                impl Drop for Close<'_> {
                    fn drop(&mut self) {
                        self.0.close_uploads();
                    }
                }
                let _close = Close(self.store);
                schedule::run(entries, self.opts.jobs + remote, self.opts.keep_going, &want, &|e, jobs| {
                    self.run_recipe(e, jobs, &prefix)
                })
            })
        });
        self.progress.build_finished(result.is_ok());
        result
    }
}
