//! `rocmforge plan`: the ordered list of what a build would do.

use super::{CliResult, Context, Failure, Selection};
use crate::engine::budget;
use crate::ops::plan::plan;
use crate::plan::night::Order;
use crate::plan::Request;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub selection: Selection,
    /// Install prefix the build would use (it is part of every cache key).
    #[arg(long)]
    pub prefix: Option<std::path::PathBuf>,
    /// The job budget the night's estimate is for (default: number of cores).
    #[arg(long, short = 'j', value_parser = super::job_count, allow_negative_numbers = true)]
    pub jobs: Option<usize>,
    /// Estimate the night for a machine with this much memory (GiB) instead of this host's
    /// available memory (it caps each recipe's jobs by its `memory-per-job-gb`).
    #[arg(long, value_name = "GIB", allow_negative_numbers = true)]
    pub memory_gb: Option<f64>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Fail if a source of the closure has no pin (what `build --locked` would refuse); `plan`
    /// itself never pins anything.
    #[arg(long)]
    pub locked: bool,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    if args.locked {
        ctx.check_locked(&tree, &args.selection.recipes)?;
    }
    let req = Request {
        recipes: args.selection.recipes.clone(),
        targets: ctx.targets(&stack, args.selection.target.as_deref())?,
        prefix: ctx.prefix(&cfg, &stack, args.prefix.as_deref()),
        rebuild: Vec::new(),
        order: Order::from_env().map_err(|e| Failure::usage(anyhow::anyhow!(e)))?,
        rocm_path: cfg.rocm_path.clone(),
        installation: ctx.installation.clone(),
    };
    let jobs = args.jobs.unwrap_or_else(budget::default_jobs).max(1);
    if let Some(m) = args.memory_gb.filter(|m| !(m.is_finite() && *m > 0.0)) {
        return Err(Failure::usage(anyhow::anyhow!("--memory-gb {m}: give the machine's memory in GiB, more than 0")));
    }
    let plan = plan(&cfg, &tree, &stack, &req, jobs, args.memory_gb).map_err(Failure::from_op)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan).map_err(Failure::failed)?);
    } else {
        print!("{}", plan.render());
    }
    Ok(())
}
