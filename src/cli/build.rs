//! `rocmforge build`: build the closure of the given recipes, resuming where a previous run
//! stopped and reusing cached artifacts.

use std::path::PathBuf;
use std::sync::Arc;

use super::{CliResult, Context, Failure};
use crate::engine::{budget, BuildOptions, Engine, Outcome};
use crate::graph::BuildGraph;
use crate::progress::{self, Fanout, Verbosity};
use crate::report::{self, Recorder};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Recipes to build (their dependencies are included).
    #[arg(required = true, value_name = "RECIPE")]
    pub recipes: Vec<String>,
    /// GPU targets, comma separated (e.g. gfx1010,gfx1012); default: the stack's.
    #[arg(long, short = 't', value_name = "TARGETS")]
    pub target: Option<String>,
    /// Job budget shared by the build (default: number of cores); capped per recipe by memory.
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// Rebuild this recipe (and everything that depends on it) even if cached. Repeatable.
    #[arg(long, value_name = "RECIPE")]
    pub rebuild: Vec<String>,
    /// After a failure, go on building everything that does not depend on it; report all
    /// failures at the end.
    #[arg(long, short = 'k')]
    pub keep_going: bool,
    /// Stop after this recipe (build only it and what it needs).
    #[arg(long, value_name = "RECIPE")]
    pub until: Option<String>,
    /// Install prefix of the stack (default: config `prefix`, else <state-dir>/prefix/<stack>).
    #[arg(long)]
    pub prefix: Option<PathBuf>,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    let targets = ctx.targets(&stack, args.target.as_deref())?;
    let mut roots = args.recipes.clone();
    let full = BuildGraph::closure(&stack, &roots).map_err(Failure::usage)?;
    for r in &args.rebuild {
        if !full.contains(r) {
            return Err(Failure::usage(anyhow::anyhow!(
                "--rebuild {r}: `{r}` is not part of this build ({})",
                roots.join(", ")
            )));
        }
    }
    if let Some(u) = &args.until {
        if !full.contains(u) {
            return Err(Failure::usage(anyhow::anyhow!(
                "--until {u}: `{u}` is not part of this build ({})",
                roots.join(", ")
            )));
        }
        roots = vec![u.clone()];
    }
    let graph = BuildGraph::closure(&stack, &roots).map_err(Failure::usage)?;
    let prefix = ctx.prefix(&cfg, &stack, args.prefix.as_deref());
    let opts = BuildOptions {
        targets,
        jobs: args.jobs.unwrap_or_else(budget::default_jobs).max(1),
        rebuild: args.rebuild.clone(),
        prefix: prefix.clone(),
        keep_going: args.keep_going,
    };
    // The display (bars or lines) and the recorder (status file, report, durations) both hear
    // every event.
    let recorder = Arc::new(Recorder::new(&cfg.state_dir, &stack.name));
    let display = progress::display(ctx.verbosity, report::load_durations(&cfg.state_dir, &stack.name));
    let progress = Fanout(vec![display, recorder.clone()]);
    install_signal_handler(recorder.clone());
    let engine = Engine::new(&cfg, &tree, &stack, &progress, opts);
    let result = engine.build(&graph);
    if result.is_err() && recorder.record().state == report::BuildState::Interrupted {
        // The signal handler is stopping the steps (that is why they failed) and exits with
        // 130 in a moment; an error and exit 1 from here would misreport the interruption.
        std::thread::sleep(std::time::Duration::from_secs(10));
    }
    let quiet = ctx.verbosity == Verbosity::Quiet;
    let report_line = match recorder.report() {
        Some(Ok(dir)) => {
            Some(format!("report: {} (timeline.html; trace.json opens in https://ui.perfetto.dev)", dir.display()))
        }
        Some(Err(e)) => {
            eprintln!("warning: cannot write the build report: {e}");
            None
        }
        None => None,
    };
    let outcomes = match result {
        Ok(o) => o,
        Err(e) => {
            if let Some(l) = report_line {
                eprintln!("{l}");
            }
            return Err(Failure::failed(e));
        }
    };
    if quiet {
        return Ok(());
    }
    let built: Vec<&str> = outcomes.iter().filter(|(_, o)| *o == Outcome::Built).map(|(n, _)| n.as_str()).collect();
    let cached = outcomes.iter().filter(|(_, o)| *o == Outcome::Cached).count();
    if built.is_empty() {
        println!("nothing to build: {cached} recipe(s) up to date in the cache; prefix {}", prefix.display());
    } else {
        println!(
            "built {} recipe(s): {}; {cached} from the cache; prefix {}",
            built.len(),
            built.join(", "),
            prefix.display()
        );
    }
    if let Some(l) = report_line {
        println!("{l}");
    }
    Ok(())
}

/// Ctrl-C / SIGTERM: record the build as interrupted (report included), stop every running
/// step's process group, then exit. Finished steps are recorded, so the same command continues
/// from there.
fn install_signal_handler(recorder: Arc<Recorder>) {
    let _ = crate::engine::step::on_termination(move || {
        eprintln!("\ninterrupted: stopping running steps; run the same command again to continue");
        // Before the kill: the steps' deaths must not be recorded as failures.
        recorder.interrupted();
        if let Some(Ok(dir)) = recorder.report() {
            eprintln!("report: {}", dir.display());
        }
        crate::engine::step::kill_running_groups();
        std::process::exit(130);
    });
}
