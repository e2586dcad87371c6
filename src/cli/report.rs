//! `rocmforge report`: the latest build report of a stack.

use super::{CliResult, Context, Failure};
use crate::report::reports_dir;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Open timeline.html with the desktop's browser (xdg-open).
    #[arg(long)]
    pub open: bool,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let cfg = ctx.config()?;
    let stack = ctx.build_stack(&cfg)?;
    let latest = reports_dir(&cfg.state_dir, &stack).join("latest");
    let dir = std::fs::canonicalize(&latest).map_err(|_| {
        Failure::failed(anyhow::anyhow!(
            "no build report for stack `{stack}` yet (`rocmforge build` writes one into `{}`)",
            latest.display()
        ))
    })?;
    println!("{}", dir.display());
    if args.open {
        let page = dir.join("timeline.html");
        std::process::Command::new("xdg-open")
            .arg(&page)
            .spawn()
            .map_err(|e| Failure::failed(anyhow::anyhow!("cannot run xdg-open to show `{}`: {e}", page.display())))?;
    }
    Ok(())
}
