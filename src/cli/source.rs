//! `rocmforge source <recipe>`: prepares the recipe's patched work tree (fetch, pristine
//! checkout, patches) and prints its path; a complete tree is reused as is.

use super::{CliResult, Context, Failure};
use crate::progress::Lines;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recipe whose tree to prepare.
    #[arg(value_name = "RECIPE")]
    pub recipe: String,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    let path =
        crate::ops::source::source(&cfg, &tree, &stack, &args.recipe, &Lines::new()).map_err(Failure::from_op)?;
    println!("{}", path.display());
    Ok(())
}
