//! `rocmforge build`: build the closure of the given recipes, resuming where a previous run
//! stopped and reusing cached artifacts.

use std::path::PathBuf;

use super::{CliResult, Context, Failure, Selection};
use crate::config::CompilerCacheChoice;
use crate::engine::Outcome;
use crate::ops::build::{build, BuildRequest};
use crate::plan::night::Order;
use crate::plan::Request;
use crate::progress::Verbosity;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub selection: Selection,
    /// Job budget shared by the build (default: number of cores); capped per recipe by memory.
    #[arg(long, short = 'j', value_parser = super::job_count, allow_negative_numbers = true)]
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
    /// Pin nothing new: fail if a source of the closure has no pin (a git `rev`, a url `sha256`,
    /// or one in the lock file). For CI and scripted rebuilds.
    #[arg(long)]
    pub locked: bool,
    /// Compiler cache in front of the compilers (default: config `compiler-cache`, else `auto`:
    /// ccache or sccache if installed). Never part of the cache key.
    #[arg(long, value_name = "ccache|sccache|none|auto", value_parser = parse_compiler_cache)]
    pub compiler_cache: Option<CompilerCacheChoice>,
}

fn parse_compiler_cache(s: &str) -> Result<CompilerCacheChoice, String> {
    CompilerCacheChoice::parse(s).ok_or_else(|| format!("`{s}`: use ccache, sccache, none or auto"))
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    // A typo in the targets is refused before anything is pinned or fetched.
    if let Some(spec) = args.selection.target.as_deref() {
        crate::target::TargetSet::parse(spec).map_err(Failure::usage)?;
    }
    let stack = ctx.pinned_stack(&tree, &args.selection.recipes, args.locked)?;
    let cfg = ctx.config()?;
    let req = BuildRequest {
        plan: Request {
            targets: ctx.targets(&stack, args.selection.target.as_deref())?,
            recipes: args.selection.recipes,
            rebuild: args.rebuild,
            prefix: ctx.prefix(&cfg, &stack, args.prefix.as_deref()),
            order: Order::from_env().map_err(|e| Failure::usage(anyhow::anyhow!(e)))?,
            rocm_path: cfg.rocm_path.clone(),
            installation: ctx.installation.clone(),
        },
        jobs: args.jobs,
        keep_going: args.keep_going,
        until: args.until,
        compiler_cache: args.compiler_cache,
    };
    let run = build(&cfg, &tree, &stack, &req, ctx.verbosity).map_err(Failure::from_op)?;
    let report_line = match run.report {
        Some(Ok(dir)) => {
            Some(format!("report: {} (timeline.html; trace.json opens in https://ui.perfetto.dev)", dir.display()))
        }
        Some(Err(e)) => {
            eprintln!("warning: cannot write the build report: {e}");
            None
        }
        None => None,
    };
    let outcomes = match run.result {
        Ok(o) => o,
        Err(e) => {
            if let Some(l) = report_line {
                eprintln!("{l}");
            }
            return Err(Failure::failed(e));
        }
    };
    let venv_line = match run.venv {
        Some(Ok(v)) => Some(format!(
            "venv: {} filled with {} ({}{}); activate it with `eval \"$(rocmforge env)\"`",
            v.dir.display(),
            v.wheels.join(", "),
            v.tool,
            match &v.requirements {
                Some(r) if r.is_empty() => ", --no-deps: venv-skip".to_string(),
                Some(r) => format!(", --no-deps after their requirements {}", r.join(", ")),
                None => String::new(),
            }
        )),
        Some(Err(e)) => {
            return Err(Failure::failed(
                anyhow::Error::new(e).context("the build succeeded, but its venv was not filled"),
            ))
        }
        None => None,
    };
    if ctx.verbosity == Verbosity::Quiet {
        return Ok(());
    }
    let built: Vec<&str> = outcomes.iter().filter(|(_, o)| *o == Outcome::Built).map(|(n, _)| n.as_str()).collect();
    let downloaded = outcomes.iter().filter(|(_, o)| *o == Outcome::Downloaded).count();
    let cached = outcomes.iter().filter(|(_, o)| *o == Outcome::Cached).count() + downloaded;
    let prefix = run.prefix.display();
    let from_remote = match downloaded {
        0 => String::new(),
        n => format!(" ({n} downloaded from the shared cache)"),
    };
    if built.is_empty() {
        println!("nothing to build: {cached} recipe(s) up to date in the cache{from_remote}; prefix {prefix}");
    } else {
        println!(
            "built {} recipe(s): {}; {cached} from the cache{from_remote}; prefix {prefix}",
            built.len(),
            built.join(", ")
        );
    }
    if let Some(l) = report_line {
        println!("{l}");
    }
    if let Some(l) = venv_line {
        println!("{l}");
    }
    let deployed = crate::venv::deployed_wheels(&run.prefix).unwrap_or_default();
    for w in deployed.iter().filter(|w| crate::wheel::execstack::is_labelled(w)) {
        println!(
            "note: {w} is a prebuilt wheel republished with its executable-stack request cleared (glibc 2.41+ refuses to load such libraries); the lock file pins the original download"
        );
    }
    Ok(())
}
