//! `patch_diff`: the edits made in a prepared work tree, turned into the next patch of the
//! recipe's series (`patch_check` is in `fetch`: the same preflight).

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::progress::Progress;
use crate::recipe::{RecipeTree, Stack};
use crate::source;

#[derive(Debug, Clone)]
pub struct DiffRequest {
    pub recipe: String,
    /// Write the patch here instead of into the recipe tree.
    pub output: Option<PathBuf>,
    /// The new patch's name (`NNNN-<name>.patch`).
    pub name: String,
}

/// What `patch_diff` made.
pub enum DiffOutcome {
    /// The work tree equals its source with its series applied.
    NoChanges { work: PathBuf, series: usize },
    /// The patch, for standard output (the recipes are embedded: there is no tree to write to).
    Bytes(Vec<u8>),
    /// Written to `path`; `series_file` is the recipe file whose series now names it, if the
    /// series could be edited (else the user adds it).
    Written { path: PathBuf, files: usize, recipe_file: PathBuf, added_to_series: bool, file_name: Option<String> },
}

pub fn patch_diff(
    cfg: &Config,
    tree: &RecipeTree,
    stack: &Stack,
    req: &DiffRequest,
    progress: &dyn Progress,
) -> anyhow::Result<DiffOutcome> {
    let name = req.recipe.as_str();
    let recipe = super::find_recipe(stack, name)?;
    let work = source::work_tree_dir(cfg, &stack.name, &recipe.name);
    let series = source::patch_series(tree, recipe)?;
    let expected = source::expected_marker(recipe, &series)?;
    if !source::is_prepared(&work, &expected) {
        anyhow::bail!(
            "`{}` is not a prepared work tree of `{name}` with its current patch series: run `rocmforge source {name}`, edit the files there, then run this again",
            work.display()
        );
    }
    // The baseline: the same source and series, prepared afresh in a scratch dir.
    let scratch_parent = crate::layout::scratch_dir(&cfg.work_dir);
    std::fs::create_dir_all(&scratch_parent)?;
    let scratch = tempfile::tempdir_in(&scratch_parent)?;
    let base = scratch.path().join("src");
    progress.message(name, "preparing a pristine patched tree to compare with");
    source::prepare(cfg, tree, recipe, &base, progress)?;
    let d = crate::patch::diff_trees(&base, &work)?;
    for f in &d.skipped_binary {
        progress.warn(name, &format!("`{f}` is binary: left out of the patch"));
    }
    if d.patch.is_empty() {
        return Ok(DiffOutcome::NoChanges { work, series: series.len() });
    }
    let write = |path: &Path| -> anyhow::Result<()> {
        std::fs::write(path, &d.patch)
            .map_err(|e| anyhow::Error::new(e).context(format!("cannot write `{}`", path.display())))
    };
    if let Some(out) = &req.output {
        write(out)?;
        return Ok(DiffOutcome::Written {
            path: out.clone(),
            files: d.files.len(),
            recipe_file: PathBuf::new(),
            added_to_series: false,
            file_name: None,
        });
    }
    let Some(root) = tree.root() else {
        return Ok(DiffOutcome::Bytes(d.patch));
    };
    let number = next_number(&recipe.patches.iter().map(|p| p.name.as_str()).collect::<Vec<_>>());
    let slug: String =
        req.name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect();
    let file_name = format!("{number:04}-{slug}.patch");
    let dir = root.join("patches").join(&stack.name).join(&recipe.name);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(&file_name);
    if path.exists() {
        anyhow::bail!("`{}` already exists: choose another --name", path.display());
    }
    write(&path)?;
    let recipe_file = root.join(&recipe.file);
    let added_to_series = add_to_series(&recipe_file, &file_name).is_ok();
    Ok(DiffOutcome::Written { path, files: d.files.len(), recipe_file, added_to_series, file_name: Some(file_name) })
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
