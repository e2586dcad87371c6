//! `rocmforge cache list|verify|gc` and `rocmforge clean`.

use super::{CliResult, Context, Failure};
use crate::fsutil::human_size;
use crate::ops::cache::{cache_gc, cache_list, cache_verify, clean as clean_work_dirs, GcRequest};

#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// List cached artifacts: key, recipe, size, and incomplete entries.
    List,
    /// Re-hash every artifact against its manifest; exit 1 if any is damaged.
    Verify,
    /// Remove incomplete entries, damaged artifacts (with --damaged), and artifacts no recipe of
    /// the stack's last builds uses (with --unused).
    Gc {
        #[arg(long)]
        damaged: bool,
        #[arg(long)]
        unused: bool,
    },
}

pub fn run(ctx: &Context, cmd: Cmd) -> CliResult {
    let cfg = ctx.config()?;
    match cmd {
        Cmd::List => {
            let l = cache_list(&cfg);
            for a in &l.artifacts {
                println!("{}  {:<24} {:>10}", a.artifact.key.short(), a.recipe, human_size(a.size));
            }
            for p in &l.incomplete {
                println!("incomplete  {}", p.display());
            }
            println!(
                "{} artifact(s), {} incomplete, {} in {}",
                l.artifacts.len(),
                l.incomplete.len(),
                human_size(l.total_size),
                l.root.display()
            );
            Ok(())
        }
        Cmd::Verify => {
            let (count, damaged) = cache_verify(&cfg);
            for (_, e) in &damaged {
                eprintln!("error: {e}");
            }
            if damaged.is_empty() {
                println!("ok: {count} artifact(s) verified");
                return Ok(());
            }
            let keys: Vec<&str> = damaged.iter().map(|(a, _)| a.key.short()).collect();
            Err(Failure::failed(anyhow::anyhow!("{} damaged artifact(s): {}", keys.len(), keys.join(", "))))
        }
        Cmd::Gc { damaged, unused } => {
            let (removed, freed) = cache_gc(&cfg, GcRequest { damaged, unused }).map_err(Failure::failed)?;
            println!("removed {removed} entr{}, freed {}", if removed == 1 { "y" } else { "ies" }, human_size(freed));
            Ok(())
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct CleanArgs {
    /// Also remove work dirs of recipes whose build did not finish (their progress is lost).
    #[arg(long)]
    pub all: bool,
}

/// Removes work dirs of finished recipes (artifact stored), showing the space each frees.
pub fn clean(ctx: &Context, args: CleanArgs) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    let mut total = 0;
    for c in clean_work_dirs(&cfg, &stack, args.all).map_err(Failure::failed)? {
        match c.freed {
            Some(size) => {
                println!("{:<24} {:>10}  {}", c.recipe, human_size(size), c.dir.display());
                total += size;
            }
            None => println!("{:<24} {:>10}  kept: build not finished (use --all to remove)", c.recipe, ""),
        }
    }
    println!("freed {}", human_size(total));
    Ok(())
}
