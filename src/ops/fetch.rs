//! `fetch` and `patch_check`: the evening preflight. Every source of the closure is fetched and
//! verified, every patch series checked against its pinned source; every failure is returned,
//! not just the first.

use crate::config::Config;
use crate::graph::{BuildGraph, GraphError};
use crate::progress::Progress;
use crate::recipe::{Recipe, RecipeTree, SourceSpec, Stack};
use crate::source::{self, SourceError, SourceIdentity};

/// One recipe checked: its source as the recipe names it, and what was found.
pub struct Checked {
    pub recipe: String,
    pub source: String,
    pub result: Result<SourceIdentity, SourceError>,
}

/// Checks `recipes` one by one (those with neither a source nor patches are left out), handing
/// each result to `each` as it comes.
pub fn check_all<'a>(
    cfg: &Config,
    tree: &RecipeTree,
    recipes: impl Iterator<Item = &'a Recipe>,
    progress: &dyn Progress,
    each: &mut dyn FnMut(&Checked),
) -> Vec<Checked> {
    let mut out = Vec::new();
    for recipe in recipes {
        if recipe.source == SourceSpec::None && recipe.patches.is_empty() {
            continue;
        }
        let checked = Checked {
            recipe: recipe.name.clone(),
            source: recipe.source.describe(),
            result: source::preflight(cfg, tree, recipe, progress),
        };
        each(&checked);
        out.push(checked);
    }
    out
}

/// Every source of the closure of `recipes`, fetched and verified, and its patches checked.
pub fn fetch(
    cfg: &Config,
    tree: &RecipeTree,
    stack: &Stack,
    recipes: &[String],
    progress: &dyn Progress,
    each: &mut dyn FnMut(&Checked),
) -> Result<Vec<Checked>, GraphError> {
    let graph = BuildGraph::closure(stack, recipes)?;
    for (recipe, warning) in stack.unlisted_patch_warnings(tree, &graph.order()) {
        progress.warn(&recipe, &warning);
    }
    Ok(check_all(cfg, tree, graph.order().into_iter().map(|n| &stack.recipes[n]), progress, each))
}

/// The patch series of `recipe` (every recipe with patches when `None`), checked.
pub fn patch_check(
    cfg: &Config,
    tree: &RecipeTree,
    stack: &Stack,
    recipe: Option<&str>,
    progress: &dyn Progress,
    each: &mut dyn FnMut(&Checked),
) -> Result<Vec<Checked>, GraphError> {
    let recipes: Vec<&Recipe> = match recipe {
        Some(r) => vec![super::find_recipe(stack, r)?],
        None => stack.recipes.values().filter(|r| !r.patches.is_empty()).collect(),
    };
    let names: Vec<&str> = match recipe {
        Some(_) => recipes.iter().map(|r| r.name.as_str()).collect(),
        None => Vec::new(),
    };
    for (recipe, warning) in stack.unlisted_patch_warnings(tree, &names) {
        progress.warn(&recipe, &warning);
    }
    Ok(check_all(cfg, tree, recipes.into_iter(), progress, each))
}
