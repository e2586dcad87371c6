//! `rocmforge inspect`: the GPU targets of the device code in files, directories and wheels.

use std::path::PathBuf;

use super::{CliResult, Context, Failure};
use crate::ops::inspect::{inspect, InspectReport};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Shared libraries, objects, code objects (*.co, *.hsaco), wheels (*.whl) or directories
    /// (read recursively).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_ctx: &Context, args: Args) -> CliResult {
    let report = inspect(&args.paths);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(Failure::failed)?);
    } else {
        print!("{}", render(&report));
    }
    if report.errors.is_empty() {
        return Ok(());
    }
    let mut msg = format!("{} file(s) could not be read:", report.errors.len());
    for e in &report.errors {
        msg.push_str(&format!("\n  - {e}"));
    }
    Err(Failure::failed(anyhow::anyhow!(msg)))
}

/// One line per file: its targets and where the code sits; files without device code say so.
fn render(r: &InspectReport) -> String {
    let mut out = String::new();
    let mut without = 0;
    for f in &r.files {
        if f.code.is_empty() {
            without += 1;
            out.push_str(&format!("{}: no GPU code\n", f.path));
            continue;
        }
        let mut kinds: Vec<String> = f.code.iter().map(|c| c.container.describe()).collect();
        kinds.dedup();
        out.push_str(&format!("{}: {} ({})\n", f.path, f.targets.join(" "), kinds.join(", ")));
    }
    let with = r.files.len() - without;
    out.push_str(&format!("{with} file(s) with GPU code, {without} without"));
    if r.skipped > 0 {
        out.push_str(&format!(", {} other file(s) skipped", r.skipped));
    }
    out.push('\n');
    out
}
