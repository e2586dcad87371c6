//! `rocmforge fetch`: the evening preflight. Every source of the closure is fetched and verified,
//! every patch series checked; all failures are reported together.

use super::{print_checked, summary, CliResult, Context, Failure, Selection};
use crate::progress::Lines;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub selection: Selection,
    /// Pin nothing new: fail if a source of the closure has no pin (see `build --locked`).
    #[arg(long)]
    pub locked: bool,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.pinned_stack(&tree, &args.selection.recipes, args.locked)?;
    ctx.targets(&stack, args.selection.target.as_deref())?;
    let cfg = ctx.config()?;
    let checked =
        crate::ops::fetch::fetch(&cfg, &tree, &stack, &args.selection.recipes, &Lines::new(), &mut print_checked)
            .map_err(Failure::usage)?;
    summary(&checked, "sources and patch series", cfg.offline)
}
