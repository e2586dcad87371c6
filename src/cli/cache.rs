//! `rocmforge cache list|verify|gc` and `rocmforge clean`.

use std::collections::BTreeSet;

use super::{CliResult, Context, Failure};
use crate::cache::ArtifactCache;
use crate::engine::state::WorkDir;
use crate::fsutil::{human_size, tree_size};

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
    let cache = ArtifactCache::new(&cfg.cache_dir);
    let (done, partial) = cache.list();
    match cmd {
        Cmd::List => {
            for a in &done {
                let recipe = a.inputs().map(|i| i.recipe).unwrap_or_else(|| "?".into());
                println!("{}  {:<24} {:>10}", a.key.short(), recipe, human_size(tree_size(&a.tree())));
            }
            for p in &partial {
                println!("incomplete  {}", p.display());
            }
            println!(
                "{} artifact(s), {} incomplete, {} in {}",
                done.len(),
                partial.len(),
                human_size(tree_size(cache.root())),
                cache.root().display()
            );
            Ok(())
        }
        Cmd::Verify => {
            let mut bad = Vec::new();
            for a in &done {
                if let Err(e) = cache.verify(a) {
                    eprintln!("error: {e}");
                    bad.push(a.key.short().to_string());
                }
            }
            if bad.is_empty() {
                println!("ok: {} artifact(s) verified", done.len());
                Ok(())
            } else {
                Err(Failure::failed(anyhow::anyhow!("{} damaged artifact(s): {}", bad.len(), bad.join(", "))))
            }
        }
        Cmd::Gc { damaged, unused } => {
            let mut freed = 0;
            let mut removed = 0;
            for p in &partial {
                freed += tree_size(p);
                cache.remove(p).map_err(Failure::failed)?;
                removed += 1;
            }
            let in_use: BTreeSet<String> = if unused { last_build_keys(&cfg.state_dir) } else { BTreeSet::new() };
            for a in &done {
                let drop = (damaged && cache.verify(a).is_err()) || (unused && !in_use.contains(a.key.as_str()));
                if drop {
                    let _lock = cache.lock(&a.key).map_err(Failure::failed)?;
                    freed += tree_size(&a.dir);
                    cache.remove(&a.dir).map_err(Failure::failed)?;
                    removed += 1;
                }
            }
            println!("removed {removed} entr{}, freed {}", if removed == 1 { "y" } else { "ies" }, human_size(freed));
            Ok(())
        }
    }
}

/// Keys recorded by the last build of every recipe of every stack.
fn last_build_keys(state_dir: &std::path::Path) -> BTreeSet<String> {
    walkdir::WalkDir::new(state_dir.join("last-build"))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| serde_json::from_slice::<crate::key::KeyInputs>(&std::fs::read(e.path()).ok()?).ok())
        .map(|i| i.key().0)
        .collect()
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
    for name in stack.recipes.keys() {
        let wd = WorkDir::new(&cfg.work_dir, &stack.name, name);
        if !wd.root.exists() {
            continue;
        }
        let finished = wd.state().is_some_and(|s| s.stored);
        let source_only = stack.recipes[name].is_source_only();
        if finished || args.all || (source_only && wd.state().is_none()) {
            let size = tree_size(&wd.root);
            crate::fsutil::remove_dir_all_if_exists(&wd.root).map_err(|e| {
                Failure::failed(anyhow::Error::new(e).context(format!("cannot remove {}", wd.root.display())))
            })?;
            println!("{:<24} {:>10}  {}", name, human_size(size), wd.root.display());
            total += size;
        } else {
            println!("{:<24} {:>10}  kept: build not finished (use --all to remove)", name, "");
        }
    }
    println!("freed {}", human_size(total));
    Ok(())
}
