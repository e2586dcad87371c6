//! `rocmforge patch check [<recipe>]` and `rocmforge patch diff <recipe> [-o FILE]`.

use std::path::PathBuf;

use super::{print_checked, summary, CliResult, Context, Failure};
use crate::ops::patch::{patch_diff, DiffOutcome, DiffRequest};
use crate::progress::Lines;

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

pub fn run(ctx: &Context, cmd: Cmd) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    match cmd {
        Cmd::Check { recipe } => {
            let checked = crate::ops::fetch::patch_check(
                &cfg,
                &tree,
                &stack,
                recipe.as_deref(),
                &Lines::new(),
                &mut print_checked,
            )
            .map_err(Failure::usage)?;
            summary(&checked, "patch series", cfg.offline)
        }
        Cmd::Diff { recipe, output, name } => {
            let req = DiffRequest { recipe, output, name };
            match patch_diff(&cfg, &tree, &stack, &req, &Lines::new()).map_err(Failure::from_op)? {
                DiffOutcome::NoChanges { work, series } => {
                    eprintln!("no changes in {} (compared with its source and {series} patch(es))", work.display());
                }
                DiffOutcome::Bytes(patch) => {
                    use std::io::Write;
                    std::io::stdout().write_all(&patch).map_err(Failure::failed)?;
                }
                DiffOutcome::Written { path, files, file_name: None, .. } => {
                    eprintln!("wrote {} ({files} file(s) changed)", path.display());
                }
                DiffOutcome::Written { path, files, recipe_file, added_to_series, file_name: Some(file_name) } => {
                    if added_to_series {
                        eprintln!(
                            "wrote {} ({files} file(s) changed) and added it to the series in {}",
                            path.display(),
                            recipe_file.display()
                        );
                    } else {
                        eprintln!(
                            "wrote {} ({files} file(s) changed); add \"{file_name}\" to `[patches] series` in {}",
                            path.display(),
                            recipe_file.display()
                        );
                    }
                    println!("{}", path.display());
                }
            }
            Ok(())
        }
    }
}
