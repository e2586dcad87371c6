//! `rocmforge env`: print the shell lines that activate a stack (prefix, venv, profile).

use std::path::PathBuf;

use super::{CliResult, Context, Failure};
use crate::activate::Shell;
use crate::ops::env::{env, EnvRequest};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// GPU targets the stack was built for (default: the stack's).
    #[arg(long, short = 't', value_name = "TARGETS")]
    pub target: Option<String>,
    /// The shell to print for: `eval "$(rocmforge env)"` (bash, zsh), `rocmforge env --shell fish | source`.
    #[arg(long, value_enum, default_value = "bash")]
    pub shell: Shell,
    /// A run-time profile of the stack (`[profile.<name>]` in its stack.toml; default: its `default-profile`).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The stack's prefix (default: config `prefix`, else <state-dir>/prefix/<stack>).
    #[arg(long)]
    pub prefix: Option<PathBuf>,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    let req = EnvRequest {
        targets: ctx.targets(&stack, args.target.as_deref())?,
        prefix: ctx.prefix(&cfg, &stack, args.prefix.as_deref()),
        profile: args.profile,
    };
    let activation = env(&cfg, &stack, &req).map_err(Failure::usage)?;
    for w in &activation.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", crate::activate::render(&activation, args.shell));
    Ok(())
}
