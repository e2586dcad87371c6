//! `source`: a recipe's patched work tree, prepared (fetch, pristine checkout, patches) or reused
//! when complete.

use std::path::PathBuf;

use crate::config::Config;
use crate::progress::Progress;
use crate::recipe::{RecipeTree, SourceSpec, Stack};

/// Prepares the tree `recipe` builds from and returns its path. A `from` recipe lives in the
/// tree of the recipe it names.
pub fn source(
    cfg: &Config,
    tree: &RecipeTree,
    stack: &Stack,
    recipe: &str,
    progress: &dyn Progress,
) -> anyhow::Result<PathBuf> {
    let recipe = super::find_recipe(stack, recipe)?;
    let (owner, subdir) = match &recipe.source {
        SourceSpec::From { recipe: other, subdir } => (super::find_recipe(stack, other)?, subdir.clone()),
        _ => (recipe, None),
    };
    let dest = crate::source::work_tree_dir(cfg, &stack.name, &owner.name);
    let path = crate::source::prepare(cfg, tree, owner, &dest, progress)?;
    Ok(match subdir {
        Some(s) => path.join(s),
        None => path,
    })
}
