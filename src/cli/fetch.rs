//! `rocmforge fetch`: the evening preflight. Every source of the closure is fetched and verified,
//! every patch series checked; all failures are reported together.

use super::{one_line, CliResult, Context, Failure};
use crate::config::Config;
use crate::graph::BuildGraph;
use crate::progress::{Lines, Progress};
use crate::recipe::{Recipe, RecipeTree, SourceSpec};
use crate::source::{self, SourceError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Recipes to fetch (their dependencies are included).
    #[arg(required = true, value_name = "RECIPE")]
    pub recipes: Vec<String>,
    /// GPU targets, comma separated (checked; sources do not depend on them).
    #[arg(long, short = 't', value_name = "TARGETS")]
    pub target: Option<String>,
}

/// Fetches one recipe's source and checks its patches. `From` recipes are fetched through the
/// recipe they name.
pub fn fetch_and_check(
    cfg: &Config,
    tree: &RecipeTree,
    recipe: &Recipe,
    progress: &dyn Progress,
) -> Result<String, SourceError> {
    let fetched = source::fetch(cfg, recipe, progress)?;
    let patches = source::patch_series(tree, recipe)?;
    if !patches.is_empty() && !matches!(recipe.source, SourceSpec::From { .. }) {
        progress.message(&recipe.name, &format!("checking {} patch(es)", patches.len()));
        source::check_patches(cfg, recipe, &fetched, &patches)?;
    }
    Ok(fetched.identity.key())
}

/// Runs `fetch_and_check` over `recipes`, then reports every failure at once.
pub fn check_all<'a>(
    cfg: &Config,
    tree: &RecipeTree,
    recipes: impl Iterator<Item = &'a Recipe>,
    what: &str,
) -> CliResult {
    let progress = Lines::new();
    let mut failures = Vec::new();
    let mut count = 0;
    for recipe in recipes {
        if recipe.source == SourceSpec::None && recipe.patches.is_empty() {
            continue;
        }
        count += 1;
        match fetch_and_check(cfg, tree, recipe, &progress) {
            Ok(id) => println!("ok    {:<24} {id}", recipe.name),
            Err(e) => {
                println!("FAIL  {:<24} {}", recipe.name, recipe.source.describe());
                failures.push(format!("{}: {}", recipe.name, one_line(&e)));
            }
        }
    }
    if failures.is_empty() {
        println!("all {count} {what} ok{}", if cfg.offline { " (offline: from the cache)" } else { "" });
        return Ok(());
    }
    let mut msg =
        format!("{} of {count} {what} failed{}:", failures.len(), if cfg.offline { " (offline)" } else { "" });
    for f in &failures {
        msg.push_str(&format!("\n  - {}", f.replace('\n', "\n    ")));
    }
    Err(Failure::failed(anyhow::anyhow!(msg)))
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    ctx.targets(&stack, args.target.as_deref())?;
    let cfg = ctx.config()?;
    let graph = BuildGraph::closure(&stack, &args.recipes).map_err(Failure::usage)?;
    let recipes = graph.order().into_iter().map(|n| &stack.recipes[n]);
    check_all(&cfg, &tree, recipes, "sources and patch series")
}
