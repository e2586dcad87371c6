//! `rocmforge patch check [<recipe>]` and `rocmforge patch diff <recipe> [-o FILE]`.

use std::path::{Path, PathBuf};

use super::{CliResult, Context, Failure};
use crate::progress::{Lines, Progress};
use crate::recipe::{Recipe, RecipeTree, Stack};
use crate::source;

#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// Check that each patch series applies onto its pinned source (all recipes with patches
    /// when none is named); every failure is reported.
    Check {
        #[arg(value_name = "RECIPE")]
        recipe: Option<String>,
    },
    /// Write the edits made in a prepared work tree (`rocmforge source <recipe>`) as the next
    /// patch of the series: into patches/<stack>/<recipe>/ when --recipes is a directory, else
    /// to stdout (or -o FILE).
    Diff {
        #[arg(value_name = "RECIPE")]
        recipe: String,
        /// Write the patch here instead.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
        /// Name of the new patch (`NNNN-<name>.patch`).
        #[arg(long, default_value = "local-edits")]
        name: String,
    },
}

pub fn find_recipe<'a>(stack: &'a Stack, name: &str) -> Result<&'a Recipe, Failure> {
    stack.recipe(name).ok_or_else(|| {
        let close = crate::recipe::load_closest(name, stack.recipes.keys().map(String::as_str));
        let hint = close.first().map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default();
        Failure::usage(anyhow::anyhow!("no recipe named `{name}` in stack `{}`{hint}", stack.name))
    })
}

pub fn run(ctx: &Context, cmd: Cmd) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    match cmd {
        Cmd::Check { recipe } => {
            let recipes: Vec<&Recipe> = match recipe {
                Some(r) => vec![find_recipe(&stack, &r)?],
                None => stack.recipes.values().filter(|r| !r.patches.is_empty()).collect(),
            };
            super::fetch::check_all(&cfg, &tree, recipes.into_iter(), "patch series")
        }
        Cmd::Diff { recipe, output, name } => diff(ctx, &cfg, &tree, &stack, &recipe, output, &name),
    }
}

fn diff(
    _ctx: &Context,
    cfg: &crate::config::Config,
    tree: &RecipeTree,
    stack: &Stack,
    name: &str,
    output: Option<PathBuf>,
    patch_name: &str,
) -> CliResult {
    let recipe = find_recipe(stack, name)?;
    let work = source::work_tree_dir(cfg, &stack.name, &recipe.name);
    let series = source::patch_series(tree, recipe).map_err(Failure::failed)?;
    let expected = source::expected_marker(recipe, &series).map_err(Failure::failed)?;
    if !source::is_prepared(&work, &expected) {
        return Err(Failure::failed(anyhow::anyhow!(
            "`{}` is not a prepared work tree of `{name}` with its current patch series: run `rocmforge source {name}`, edit the files there, then run this again",
            work.display()
        )));
    }
    // The baseline: the same source and series, prepared afresh in a scratch dir.
    let progress = Lines::new();
    let scratch_parent = cfg.work_dir.join(".scratch");
    std::fs::create_dir_all(&scratch_parent).map_err(Failure::failed)?;
    let scratch = tempfile::tempdir_in(&scratch_parent).map_err(Failure::failed)?;
    let base = scratch.path().join("src");
    progress.message(name, "preparing a pristine patched tree to compare with");
    source::prepare(cfg, tree, recipe, &base, &progress).map_err(Failure::failed)?;
    let d = crate::patch::diff_trees(&base, &work).map_err(Failure::failed)?;
    for f in &d.skipped_binary {
        progress.warn(name, &format!("`{f}` is binary: left out of the patch"));
    }
    if d.patch.is_empty() {
        eprintln!("no changes in {} (compared with its source and {} patch(es))", work.display(), series.len());
        return Ok(());
    }
    let write = |path: &Path| -> CliResult {
        std::fs::write(path, &d.patch)
            .map_err(|e| Failure::failed(anyhow::Error::new(e).context(format!("cannot write `{}`", path.display()))))
    };
    if let Some(out) = output {
        write(&out)?;
        eprintln!("wrote {} ({} file(s) changed)", out.display(), d.files.len());
        return Ok(());
    }
    let Some(root) = tree.root() else {
        use std::io::Write;
        std::io::stdout().write_all(&d.patch).map_err(Failure::failed)?;
        return Ok(());
    };
    let number = next_number(&recipe.patches.iter().map(|p| p.name.as_str()).collect::<Vec<_>>());
    let slug: String =
        patch_name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect();
    let file_name = format!("{number:04}-{slug}.patch");
    let dir = root.join("patches").join(&stack.name).join(&recipe.name);
    std::fs::create_dir_all(&dir).map_err(Failure::failed)?;
    let path = dir.join(&file_name);
    if path.exists() {
        return Err(Failure::failed(anyhow::anyhow!("`{}` already exists: choose another --name", path.display())));
    }
    write(&path)?;
    let recipe_file = root.join(&recipe.file);
    match add_to_series(&recipe_file, &file_name) {
        Ok(()) => eprintln!(
            "wrote {} ({} file(s) changed) and added it to the series in {}",
            path.display(),
            d.files.len(),
            recipe_file.display()
        ),
        _ => eprintln!(
            "wrote {} ({} file(s) changed); add \"{file_name}\" to `[patches] series` in {}",
            path.display(),
            d.files.len(),
            recipe_file.display()
        ),
    }
    println!("{}", path.display());
    Ok(())
}

/// One more than the highest `NNNN-` prefix of the series (or its length).
pub fn next_number(series: &[&str]) -> u32 {
    let max = series.iter().filter_map(|n| n.split('-').next()?.parse::<u32>().ok()).max().unwrap_or(0);
    max.max(series.len() as u32) + 1
}

/// Appends `file` to the recipe's `[patches] series` (see [`crate::recipe::edit`]).
fn add_to_series(recipe_file: &Path, file: &str) -> anyhow::Result<()> {
    let text = crate::recipe::edit::add_patch_to_series(&std::fs::read_to_string(recipe_file)?, file)?;
    Ok(crate::fsutil::write_atomic(recipe_file, text.as_bytes())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering() {
        assert_eq!(next_number(&[]), 1);
        assert_eq!(next_number(&["0001-a.patch", "0007-b.patch"]), 8);
        assert_eq!(next_number(&["fix.patch", "other.patch"]), 3);
    }
}
