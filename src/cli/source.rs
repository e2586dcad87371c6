//! `rocmforge source <recipe>`: prepares the recipe's patched work tree (fetch, pristine
//! checkout, patches) and prints its path; a complete tree is reused as is.

use super::{CliResult, Context, Failure};
use crate::progress::Lines;
use crate::recipe::SourceSpec;
use crate::source;

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
    let recipe = super::patch::find_recipe(&stack, &args.recipe)?;
    // A `from` recipe lives in the tree of the recipe it names.
    let (owner, subdir) = match &recipe.source {
        SourceSpec::From { recipe: other, subdir } => (super::patch::find_recipe(&stack, other)?, subdir.clone()),
        _ => (recipe, None),
    };
    let dest = source::work_tree_dir(&cfg, &stack.name, &owner.name);
    let path = source::prepare(&cfg, &tree, owner, &dest, &Lines::new()).map_err(Failure::failed)?;
    let path = match subdir {
        Some(s) => path.join(s),
        None => path,
    };
    println!("{}", path.display());
    Ok(())
}
