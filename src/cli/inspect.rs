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
    /// The targets a libMIOpen given directly is checked for: its embedded kernels are
    /// compiled by the stack's gfx101x checks (batchnorm, legacy CK, the kernel sweep) for each.
    #[arg(long, short = 't', value_name = "TARGETS", default_value = "gfx1010")]
    pub target: String,
    /// Where a libMIOpen's kernel tree, checks and logs go (default: under the state dir).
    #[arg(long, value_name = "DIR")]
    pub kernels_dir: Option<PathBuf>,
    /// Only read the device code: do not compile a libMIOpen's kernels.
    #[arg(long)]
    pub no_kernel_checks: bool,
    /// The kernel sweep compiles only the kernel files whose name this regex (Python's `re`)
    /// matches, to bound a run (a whole libMIOpen is some hundred compiles per target).
    #[arg(long, value_name = "REGEX")]
    pub sweep_only: Option<String>,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let targets = crate::target::TargetSet::parse(&args.target).map_err(Failure::usage)?;
    // The recipe tree and the config only when a libMIOpen is given to audit.
    let wanted = !args.no_kernel_checks && args.paths.iter().any(|p| crate::offload::miopen::is_miopen_name(p));
    let audit = match wanted {
        false => None,
        true => Some(crate::audit::Settings {
            targets: targets.names().iter().map(|t| t.to_string()).collect(),
            work: match &args.kernels_dir {
                Some(d) => d.clone(),
                None => ctx.config()?.state_dir.join("miopen-audit"),
            },
            rocm: ctx.rocm_path.clone(),
            checks: ctx.tree()?,
            host: "/".into(),
            sweep_only: args.sweep_only.clone(),
        }),
    };
    let report = inspect(&args.paths, audit.as_ref());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(Failure::failed)?);
    } else {
        print!("{}", render(&report));
    }
    // A libMIOpen's check that could not run is not a pass: exit 1, naming each.
    let not_run: Vec<String> = report.miopen.iter().flat_map(|a| a.not_run()).collect();
    if report.errors.is_empty() && not_run.is_empty() {
        return Ok(());
    }
    let mut msg = String::new();
    if !report.errors.is_empty() {
        msg.push_str(&format!("{} file(s) could not be read:", report.errors.len()));
        for e in &report.errors {
            msg.push_str(&format!("\n  - {e}"));
        }
    }
    if !not_run.is_empty() {
        if !msg.is_empty() {
            msg.push('\n');
        }
        msg.push_str(&format!(
            "{} MIOpen kernel check(s) could not run (their outcome is unknown, not a pass):",
            not_run.len()
        ));
        for e in &not_run {
            msg.push_str(&format!("\n  - {e}"));
        }
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
    for a in &r.miopen {
        out.push_str(&a.render());
    }
    out
}
