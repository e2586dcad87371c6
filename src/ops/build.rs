//! `build`: plans the closure, then carries the plan out with the engine, recording status and a
//! report; Ctrl-C or SIGTERM stops the running steps and records the build as interrupted.

use std::path::PathBuf;
use std::sync::Arc;

use super::plan::plan_graph;
use super::UsageError;
use crate::config::{CompilerCacheChoice, Config};
use crate::engine::compilers::Launchers;
use crate::engine::{budget, BuildError, Engine, EngineOptions, Outcome};
use crate::graph::BuildGraph;
use crate::plan::Request;
use crate::progress::{self, Fanout, Verbosity};
use crate::recipe::{RecipeTree, Stack};
use crate::report::status::Waiting;
use crate::report::{self, Recorder};

#[derive(Debug, Clone)]
pub struct BuildRequest {
    /// What is planned (`until` narrows its recipes).
    pub plan: Request,
    /// The job budget (default: cores).
    pub jobs: Option<usize>,
    pub keep_going: bool,
    /// Stop after this recipe (build only it and what it needs).
    pub until: Option<String>,
    /// `--compiler-cache`: overrides the config's `compiler-cache`.
    pub compiler_cache: Option<CompilerCacheChoice>,
}

/// What a build did.
pub struct BuildRun {
    /// Each recipe's outcome in build order, or why the build failed.
    pub result: Result<Vec<(String, Outcome)>, BuildError>,
    pub prefix: PathBuf,
    /// The report directory (none for a build that found everything up to date).
    pub report: Option<Result<PathBuf, String>>,
    /// The stack's venv, filled after a successful build with the wheels it deployed (`None`:
    /// no wheels, or the venv already holds exactly these).
    pub venv: Option<Result<crate::venv::Filled, crate::venv::VenvError>>,
}

/// Builds `req`. `Err` only for a request that names recipes outside the build.
pub fn build(
    cfg: &Config,
    tree: &RecipeTree,
    stack: &Stack,
    req: &BuildRequest,
    verbosity: Verbosity,
) -> Result<BuildRun, anyhow::Error> {
    let launchers = Launchers::resolve(cfg, req.compiler_cache)?;
    let full = BuildGraph::closure(stack, &req.plan.recipes)?;
    let outside = |flag: &str, r: &str| {
        UsageError(format!("{flag} {r}: `{r}` is not part of this build ({})", req.plan.recipes.join(", ")))
    };
    if let Some(r) = req.plan.rebuild.iter().find(|r| !full.contains(r)) {
        return Err(outside("--rebuild", r).into());
    }
    let graph = match &req.until {
        Some(u) if !full.contains(u) => return Err(outside("--until", u).into()),
        Some(u) => BuildGraph::closure(stack, std::slice::from_ref(u))?,
        None => full,
    };
    // Wheels are published at the end of their recipes, hours in: an unusable index is said now.
    let publishes = graph.order().iter().any(|n| stack.recipes[*n].build.system.makes_wheels());
    if publishes {
        cfg.check_index_writable(&crate::index::stack_dir(&cfg.index_dir(), stack))?;
    }
    let display = progress::display(verbosity, report::load_durations(&cfg.state_dir, &stack.name));
    // One store for the plan and the build: a remote cache found unreachable while planning is
    // not asked again.
    let store = crate::cache::open(cfg, display.clone())?;
    let plan = plan_graph(cfg, tree, stack, &graph, &req.plan, store.as_ref());
    let in_plan: Vec<&str> = plan.recipes.iter().map(|e| e.name.as_str()).collect();
    for (recipe, warning) in stack.unlisted_patch_warnings(tree, &in_plan) {
        display.warn(&recipe, &warning);
    }
    // One build at a time deploys into a prefix; a second one waits (and `status` shows it).
    let _prefix_lock = {
        let mut waiting = None;
        let lock = crate::deploy::lock_prefix(&plan.prefix, &stack.name, |holder| {
            let who = match &holder {
                Some(h) => format!("the build of stack `{}` (pid {})", h.stack, h.pid),
                None => "another build".to_string(),
            };
            display.warn(
                "build",
                &format!(
                    "waiting for {who}, which builds into {}; this build goes on when it ends",
                    plan.prefix.display()
                ),
            );
            waiting = Some(Waiting::record(
                &cfg.state_dir,
                Waiting {
                    pid: std::process::id(),
                    stack: stack.name.clone(),
                    prefix: plan.prefix.clone(),
                    holder: holder.map(|h| h.pid),
                    since: report::utc(std::time::SystemTime::now()),
                },
            ));
        })
        .map_err(|e| anyhow::Error::new(e).context(format!("cannot lock the prefix {}", plan.prefix.display())))?;
        drop(waiting);
        lock
    };
    // The display (bars or lines) and the recorder (status file, report, durations) both hear
    // every event.
    let recorder = Arc::new(Recorder::new(&cfg.state_dir, &stack.name));
    let progress = Fanout(vec![display, recorder.clone()]);
    install_interrupt_handler(recorder.clone());
    let opts = EngineOptions {
        jobs: req.jobs.unwrap_or_else(budget::default_jobs).max(1),
        keep_going: req.keep_going,
        launchers,
    };
    let result = Engine::new(cfg, tree, stack, &plan, store.as_ref(), &progress, opts).run();
    if result.is_err() && recorder.record().state == report::BuildState::Interrupted {
        // The signal handler is stopping the steps (that is why they failed) and exits with
        // 130 in a moment; an error and exit 1 from here would misreport the interruption.
        std::thread::sleep(std::time::Duration::from_secs(10));
    }
    let venv = match &result {
        Ok(_) => fill_venv(cfg, stack, &plan.prefix),
        Err(_) => None,
    };
    Ok(BuildRun { result, prefix: plan.prefix.clone(), report: recorder.report(), venv })
}

/// The venv step at the end of a successful build: the stack's wheels deployed in the prefix,
/// installed from the stack's index into `<state-dir>/venvs/<stack>` (unless it holds them).
fn fill_venv(
    cfg: &Config,
    stack: &Stack,
    prefix: &std::path::Path,
) -> Option<Result<crate::venv::Filled, crate::venv::VenvError>> {
    // A stack without a Python of its own has no venv.
    stack.python.as_ref()?;
    let index = crate::index::stack_dir(&cfg.index_dir(), stack);
    let wheels = match crate::venv::stack_wheels(prefix, &index) {
        Ok(w) if w.is_empty() => return None,
        Ok(w) => w,
        Err(e) => return Some(Err(e)),
    };
    if crate::venv::holds(&cfg.state_dir, stack, &wheels) {
        return None;
    }
    crate::venv::fill(&cfg.state_dir, stack, &wheels).transpose()
}

/// Ctrl-C / SIGTERM: record the build as interrupted (report included), stop every running
/// step's process group, then exit. Finished steps are recorded, so the same command continues
/// from there.
fn install_interrupt_handler(recorder: Arc<Recorder>) {
    let _ = crate::process::on_termination(move |_| {
        eprintln!("\ninterrupted: stopping running steps; run the same command again to continue");
        // Before the kill: the steps' deaths must not be recorded as failures.
        recorder.interrupted();
        if let Some(Ok(dir)) = recorder.report() {
            eprintln!("report: {}", dir.display());
        }
        crate::process::stop_all();
        match crate::cache::unfinished_uploads() {
            0 => {}
            n => eprintln!(
                "{n} upload(s) to the shared cache did not finish: `rocmforge cache push` uploads what the server lacks"
            ),
        }
        std::process::exit(130);
    });
}
