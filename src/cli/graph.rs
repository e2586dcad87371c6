//! `rocmforge graph`: the dependency graph as Graphviz dot or JSON.

use super::{CliResult, Context, Failure};
use crate::graph::BuildGraph;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Dot,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Recipes whose closure to print.
    #[arg(required = true, value_name = "RECIPE")]
    pub recipes: Vec<String>,
    #[arg(long, value_enum, default_value = "dot")]
    pub format: Format,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let graph = BuildGraph::closure(&stack, &args.recipes).map_err(Failure::usage)?;
    match args.format {
        Format::Dot => print!("{}", graph.to_dot()),
        Format::Json => println!("{}", serde_json::to_string_pretty(&graph.to_json()).map_err(Failure::failed)?),
    }
    Ok(())
}
