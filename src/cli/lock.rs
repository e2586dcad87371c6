//! `rocmforge lock`: pin unpinned recipes (git tags to commits, downloads to their sha256) in the
//! stack's lock file.

use super::{CliResult, Context, Failure};
use crate::ops::lock::{self, LockError, LockOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Re-resolve every pinned tag too, and report the tags that moved.
    #[arg(long)]
    pub update: bool,
    /// Recipes to lock (default: every unlocked recipe of the stack).
    #[arg(value_name = "RECIPE")]
    pub recipes: Vec<String>,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack_unlocked(&tree)?;
    let cfg = ctx.config()?;
    cfg.check_writable().map_err(Failure::failed)?;
    let opts = LockOptions { recipes: args.recipes, update: args.update };
    let report = lock::lock(&stack, &tree, &cfg, &opts, &crate::progress::Lines::new()).map_err(|e| match e {
        LockError::Offline | LockError::UnknownRecipe(_) => Failure::usage(e),
        _ => Failure::failed(e),
    })?;
    let quiet = ctx.verbosity == crate::progress::Verbosity::Quiet;
    for m in &report.moved {
        println!("{}: {} moved {} -> {}", m.recipe, m.tag, &m.old[..8.min(m.old.len())], &m.new[..8.min(m.new.len())]);
    }
    if quiet {
        return Ok(());
    }
    for p in &report.added {
        match &p.page {
            Some(page) => println!("{}: {} (from {page})", p.recipe, p.describe()),
            None => println!("{}: {}", p.recipe, p.describe()),
        }
    }
    for p in &report.pruned {
        println!(
            "{}: pin {} dropped (the recipe is pinned itself now, or has another url or tag)",
            p.recipe,
            p.describe()
        );
    }
    println!(
        "wrote {}: {} new, {} moved, {} unchanged, {} pruned",
        report.path.display(),
        report.added.len(),
        report.moved.len(),
        report.unchanged,
        report.pruned.len()
    );
    Ok(())
}
