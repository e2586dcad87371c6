//! `rocmforge plan`: the ordered list of what a build would do.

use super::{CliResult, Context, Failure};
use crate::engine::{BuildOptions, Engine};
use crate::graph::BuildGraph;
use crate::plan::Plan;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Recipes to build (their dependencies are included).
    #[arg(required = true, value_name = "RECIPE")]
    pub recipes: Vec<String>,
    /// GPU targets, comma separated (e.g. gfx1010,gfx1012); default: the stack's.
    #[arg(long, short = 't', value_name = "TARGETS")]
    pub target: Option<String>,
    /// Install prefix the build would use (it is part of every cache key).
    #[arg(long)]
    pub prefix: Option<std::path::PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let targets = ctx.targets(&stack, args.target.as_deref())?;
    let graph = BuildGraph::closure(&stack, &args.recipes).map_err(Failure::usage)?;
    let mut plan = Plan::new(&stack, &graph, &targets);
    let cfg = ctx.config()?;
    let prefix = ctx.prefix(&cfg, &stack, args.prefix.as_deref());
    let opts = BuildOptions { targets: targets.clone(), jobs: 1, rebuild: Vec::new(), prefix, keep_going: false };
    let engine = Engine::new(&cfg, &tree, &stack, &crate::progress::Silent, opts);
    plan.apply(&engine.decide(&graph));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan).map_err(Failure::failed)?);
    } else {
        print!("{}", plan.render());
    }
    Ok(())
}
