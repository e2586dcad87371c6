//! `rocmforge cache list|verify|gc|keygen|push` and `rocmforge clean`.

use super::{CliResult, Context, Failure};
use crate::fsutil::human_size;
use crate::ops::cache::{
    cache_gc, cache_keygen, cache_list, cache_push, cache_verify, clean as clean_work_dirs, GcRequest,
};

#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// List cached artifacts: key, recipe, size, and incomplete entries.
    List,
    /// Re-hash every artifact, cached download and published wheel, and look for leftovers of
    /// killed stores and clones; exit 1 if anything is damaged or left over.
    Verify,
    /// Remove leftovers (incomplete entries, temp dirs of killed stores and clones, unfinished
    /// downloads older than 14 days, temp files in the index), damaged artifacts and downloads
    /// (with --damaged), and artifacts no recipe of the stack's last builds uses (with --unused).
    Gc {
        #[arg(long)]
        damaged: bool,
        #[arg(long)]
        unused: bool,
    },
    /// Upload to the shared cache (`cache-url`) the local artifacts it lacks (of these recipes;
    /// all when none is named): those built while the server was down or before `cache-url` was
    /// set. Each is re-hashed first and signed; exit 1 if any could not be pushed.
    Push {
        /// Recipes whose artifacts to push (every artifact of the local cache when none).
        recipes: Vec<String>,
    },
    /// Make the key pair that signs uploads to a shared cache (`signing-key` in the config, default
    /// <state-dir>/cache-signing.key, mode 0600) and print its public key for other machines'
    /// `trusted-keys`.
    Keygen {
        /// The key's name (default: rocmforge-<host name>-1).
        #[arg(long)]
        name: Option<String>,
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
            let r = cache_verify(&cfg).map_err(Failure::failed)?;
            for (_, e) in &r.damaged {
                eprintln!("error: {e}");
            }
            for d in &r.bad_downloads {
                eprintln!("error: download `{}` {}", d.path.display(), d.problem);
            }
            for p in &r.index_problems {
                eprintln!("error: published file `{}` {}", p.path.display(), p.problem);
            }
            for p in &r.incomplete {
                eprintln!("error: incomplete artifact entry `{}` (an interrupted store)", p.display());
            }
            for p in &r.leftovers {
                eprintln!("error: `{}` was left by a killed store or clone (its process is gone)", p.display());
            }
            for p in &r.index_leftovers {
                eprintln!(
                    "error: `{}` was left by a killed publish (a wheel or page never renamed into the index)",
                    p.display()
                );
            }
            for p in &r.partial_downloads {
                println!("unfinished download (resumed by the next fetch): {}", p.display());
            }
            let summary =
                format!("{} artifact(s), {} download(s), {} published file(s)", r.artifacts, r.downloads, r.published);
            if !r.has_problems() {
                println!("ok: {summary} verified");
                return Ok(());
            }
            let mut what = Vec::new();
            if !r.damaged.is_empty() {
                let keys: Vec<&str> = r.damaged.iter().map(|(a, _)| a.key.short()).collect();
                what.push(format!("{} damaged artifact(s): {}", keys.len(), keys.join(", ")));
            }
            if !r.bad_downloads.is_empty() {
                what.push(format!("{} damaged download(s)", r.bad_downloads.len()));
            }
            if !r.index_problems.is_empty() {
                what.push(format!("{} problem(s) in the index", r.index_problems.len()));
            }
            let leftovers = r.incomplete.len() + r.leftovers.len() + r.index_leftovers.len();
            if leftovers > 0 {
                what.push(format!("{leftovers} leftover(s) of interrupted work (`rocmforge cache gc` removes them)"));
            }
            Err(Failure::failed(anyhow::anyhow!("{} (checked {summary})", what.join("; "))))
        }
        Cmd::Keygen { name } => {
            let k = cache_keygen(&cfg, name.as_deref()).map_err(Failure::failed)?;
            eprintln!("secret key written to {} (mode 0600: keep it to this machine)", k.secret_file.display());
            eprintln!("public key (add it to `trusted-keys` in the config of every machine that should accept this one's uploads):");
            println!("{}", k.public);
            Ok(())
        }
        Cmd::Push { recipes } => {
            let progress = std::sync::Arc::new(crate::progress::Lines::new());
            let r = cache_push(&cfg, &recipes, progress).map_err(Failure::failed)?;
            for (recipe, key) in &r.present {
                println!("{}  {recipe:<24} already in the shared cache", key.short());
            }
            for (recipe, key, size) in &r.uploaded {
                println!("{}  {recipe:<24} uploaded ({})", key.short(), human_size(*size));
            }
            for (recipe, why) in &r.failed {
                eprintln!("error: {recipe}: {why}");
            }
            let total: u64 = r.uploaded.iter().map(|(_, _, s)| s).sum();
            let summary = format!(
                "{} artifact(s) uploaded ({}), {} already there",
                r.uploaded.len(),
                human_size(total),
                r.present.len()
            );
            if r.failed.is_empty() {
                println!("{summary}");
                return Ok(());
            }
            Err(Failure::failed(anyhow::anyhow!("{} artifact(s) not pushed; {summary}", r.failed.len())))
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
            None => match c.held_by {
                Some(holder) => println!(
                    "{:<24} {:>10}  kept: in use by {}, now running (run `rocmforge clean` again once it ends)",
                    c.recipe,
                    "",
                    holder.map(|h| h.to_string()).unwrap_or_else(|| "a running build".into())
                ),
                None => println!("{:<24} {:>10}  kept: build not finished (use --all to remove)", c.recipe, ""),
            },
        }
    }
    println!("freed {}", human_size(total));
    Ok(())
}
