//! `rocmforge verify`: the Conv2d/batchnorm matrix, each case in its own process under a timeout.

use std::path::PathBuf;
use std::time::Duration;

use super::{CliResult, Context, Failure};
use crate::ops::verify::{verify, VerifyRequest};
use crate::verify::run::{CaseResult, Outcome};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Python that runs the cases (default: the stack's venv, filled by `build`).
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// Seconds each case may run before it counts as a hang (the first call compiles MIOpen
    /// kernels, which can take minutes on gfx1010).
    #[arg(long, value_name = "S", default_value_t = 300.0)]
    pub timeout: f64,
    /// Print the results as JSON (the saved report) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A run-time profile of the stack (default: its `default-profile`); its known hangs are
    /// shown as known, not failures.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// GPU targets the stack was built for (default: the stack's).
    #[arg(long, short = 't', value_name = "TARGETS")]
    pub target: Option<String>,
    /// Run only this case (repeatable; see --list).
    #[arg(long = "case", value_name = "ID")]
    pub cases: Vec<String>,
    /// List the cases and exit.
    #[arg(long)]
    pub list: bool,
}

fn secs(s: Option<f64>) -> String {
    s.map(|s| format!("{s:.3}s")).unwrap_or_else(|| "-".into())
}

fn row(r: &CaseResult) -> String {
    let result = match &r.outcome {
        Outcome::Pass if r.known_hang => "pass (listed as a known hang)".to_string(),
        Outcome::Pass => "pass".to_string(),
        Outcome::Hang if r.known_hang => format!("HANG (known) after {:.1}s", r.wall_s),
        Outcome::Hang => format!("HANG after {:.1}s", r.wall_s),
        Outcome::Error(m) => format!("error: {m}"),
    };
    format!("{:<24} {:<32} {:>10} {:>10}  {result}", r.id, r.describe, secs(r.first_s), secs(r.cached_s))
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    if args.list {
        for c in crate::verify::matrix() {
            println!("{:<24} {}", c.id, c.describe());
        }
        return Ok(());
    }
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        return Err(Failure::usage(anyhow::anyhow!("--timeout must be a positive number of seconds")));
    }
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    let req = VerifyRequest {
        python: args.python,
        timeout: Duration::from_secs_f64(args.timeout),
        profile: args.profile,
        targets: ctx.targets(&stack, args.target.as_deref())?,
        prefix: ctx.prefix(&cfg, &stack, None),
        cases: args.cases,
    };
    let json = args.json;
    if !json {
        eprintln!(
            "each case runs in its own process, at most {}s; the first call of a case compiles MIOpen's kernels (slow, once: they are cached for the next cases and runs)",
            args.timeout
        );
        println!("{:<24} {:<32} {:>10} {:>10}  result", "case", "what", "first", "cached");
    }
    let report = verify(&cfg, &stack, &req, |r| {
        if !json {
            println!("{}", row(r));
        }
    })
    .map_err(Failure::from_op)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report).expect("the report serialises"));
    } else {
        let known = report.results.iter().filter(|r| r.known_hang && r.outcome == Outcome::Hang).count();
        println!(
            "{} case(s): {} pass, {} known hang(s), {} unexpected; report {}",
            report.results.len(),
            report.results.iter().filter(|r| r.outcome == Outcome::Pass).count(),
            known,
            report.unexpected,
            report.saved.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
        );
    }
    if report.unexpected > 0 {
        return Err(Failure::failed(anyhow::anyhow!(
            "{} case(s) ended in a way profile `{}` does not expect",
            report.unexpected,
            report.profile.as_deref().unwrap_or("(none)")
        )));
    }
    Ok(())
}
