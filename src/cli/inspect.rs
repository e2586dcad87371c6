//! `rocmforge inspect`: the GPU targets of the device code in files, directories and wheels, and
//! the host libraries and executables among them that need an executable stack.

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
/// A host library or executable that needs an executable stack gets a line more saying so.
fn render(r: &InspectReport) -> String {
    let mut out = String::new();
    let mut without = 0;
    let mut exec_stack = 0;
    for f in &r.files {
        if let Some(k) = f.kpack.as_ref().filter(|k| k.archives.is_empty()) {
            without += 1;
            out.push_str(&format!(
                "{}: device code moved out into kpack archives (.rocm_kpack_ref: kernels `{}`, search paths {}), none of them in what was given (a marker is followed only inside it: give the directory that holds the library and its archives)\n",
                f.path,
                k.marker.kernel_name,
                k.marker.search_paths.join(", ")
            ));
        } else if f.code.is_empty() {
            without += 1;
            out.push_str(&format!("{}: no GPU code\n", f.path));
        } else if let Some(k) = &f.kpack {
            out.push_str(&format!(
                "{}: {} (kpack archives, via .rocm_kpack_ref: {})\n",
                f.path,
                f.targets.join(" "),
                k.archives.join(", ")
            ));
        } else {
            let mut kinds: Vec<String> = f.code.iter().map(|c| c.container.describe()).collect();
            kinds.dedup();
            out.push_str(&format!("{}: {} ({})\n", f.path, f.targets.join(" "), kinds.join(", ")));
        }
        if let Some(problem) = f.stack.and_then(|s| s.problem()) {
            exec_stack += 1;
            out.push_str(&format!("{}: {problem}\n", f.path));
        }
    }
    let with = r.files.len() - without;
    out.push_str(&format!("{with} file(s) with GPU code, {without} without"));
    if exec_stack > 0 {
        out.push_str(&format!(", {exec_stack} needing an executable stack"));
    }
    if r.skipped > 0 {
        out.push_str(&format!(", {} other file(s) skipped", r.skipped));
    }
    out.push('\n');
    out
}
