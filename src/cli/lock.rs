//! `rocmforge lock`: pin the tags of unlocked git recipes to commits, and url sources to the
//! sha256 their index gives, in the stack's lock file.

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
    let opts = LockOptions { recipes: args.recipes, update: args.update };
    let report = lock::lock(&stack, &tree, &cfg, &opts).map_err(|e| match e {
        LockError::Offline | LockError::UnknownRecipe(_) => Failure::usage(e),
        _ => Failure::failed(e),
    })?;
    let quiet = ctx.verbosity == crate::progress::Verbosity::Quiet;
    for (old, new) in &report.digests_changed {
        println!(
            "{}: the index now gives sha256 {} (was {}) for {}",
            new.recipe,
            &new.sha256[..12],
            &old.sha256[..12],
            new.url
        );
    }
    for m in &report.moved {
        println!("{}: {} moved {} -> {}", m.recipe, m.tag, &m.old[..8.min(m.old.len())], &m.new[..8.min(m.new.len())]);
    }
    if quiet {
        return Ok(());
    }
    for p in &report.added {
        println!("{}: {} -> {}", p.recipe, p.tag, &p.rev[..12.min(p.rev.len())]);
    }
    for d in &report.digests {
        println!("{}: sha256 {} (from {})", d.recipe, &d.sha256[..12.min(d.sha256.len())], d.page);
    }
    for d in &report.pruned_digests {
        println!("{}: digest of {} dropped (the recipe no longer has this unlocked url)", d.recipe, d.url);
    }
    for p in &report.pruned {
        println!("{}: pin of {} dropped (the recipe no longer has this unlocked url and tag)", p.recipe, p.tag);
    }
    println!(
        "wrote {}: {} new, {} moved, {} unchanged, {} pruned",
        report.path.display(),
        report.added.len() + report.digests.len(),
        report.moved.len() + report.digests_changed.len(),
        report.unchanged,
        report.pruned.len() + report.pruned_digests.len()
    );
    Ok(())
}
