//! `rocmforge plan`: the ordered list of what a build would do.

use super::{CliResult, Context, Failure, Selection};
use crate::ops::plan::{plan, PlanRequest};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub selection: Selection,
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
    let cfg = ctx.config()?;
    let req = PlanRequest {
        recipes: args.selection.recipes.clone(),
        targets: ctx.targets(&stack, args.selection.target.as_deref())?,
        prefix: ctx.prefix(&cfg, &stack, args.prefix.as_deref()),
        rebuild: Vec::new(),
    };
    let plan = plan(&cfg, &tree, &stack, &req).map_err(Failure::usage)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan).map_err(Failure::failed)?);
    } else {
        print!("{}", plan.render());
    }
    Ok(())
}
