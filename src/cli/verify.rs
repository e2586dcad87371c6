//! `rocmforge verify`: the smoke-test matrix (inference and training cases), each case in its
//! own process under a timeout; a table, the report as JSON, or a Markdown table for an issue.

use std::path::PathBuf;
use std::time::Duration;

use super::{CliResult, Context, Failure};
use crate::ops::verify::{verify, Interrupted, VerifyHeader, VerifyReport, VerifyRequest};
use crate::verify::run::{CaseResult, Outcome};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Python that runs the cases (default: the stack's venv, filled by `build`). Without
    /// `--stack`: a torch rocmforge did not install (AMD's wheels in a venv, a distribution's
    /// python3-torch-rocm, your own build): it says which torch and HIP it found, the targets that
    /// torch was built for, whether the card's is among them, the GPU code its libraries carry and
    /// MIOpen's version, then runs the cases in your environment, with no stack or profile.
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// Seconds each case may run before it counts as a hang (the first call compiles MIOpen
    /// kernels, which can take minutes on gfx1010).
    #[arg(long, value_name = "S", default_value_t = 300.0, allow_negative_numbers = true)]
    pub timeout: f64,
    /// Print the results as JSON (the saved report) instead of a table.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the results as a Markdown table to paste into an issue (stack, torch and HIP
    /// versions, card, driver, profile, then one row per case).
    #[arg(long)]
    pub markdown: bool,
    /// A run-time profile of the stack (default: its `default-profile`); its known hangs and
    /// known failures are shown as known, not as unexpected.
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
    /// With --python alone: do not compile the kernels of the libMIOpen the torch loads (by
    /// default the stack's gfx101x checks compile them for the targets before the cases).
    #[arg(long)]
    pub no_kernel_checks: bool,
}

/// The longest `--timeout` taken: a week per case (a case's first call compiles MIOpen's
/// kernels, minutes on gfx1010; more than a week is a hang however it is counted).
const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;

const CPU_MODE: &str = "CPU MODE: this tests the case programs, not a GPU";

fn secs(s: Option<f64>) -> String {
    s.map(|s| format!("{s:.3}s")).unwrap_or_else(|| "-".into())
}

/// The result cell; `hang` says how long a hang lasted.
fn result(r: &CaseResult, hang: &str) -> String {
    let known = |k: bool| if k { " (known)" } else { "" };
    match &r.outcome {
        Outcome::Pass if r.known_hang => "pass (listed as a known hang)".to_string(),
        Outcome::Pass if r.known_failure => "pass (listed as a known failure)".to_string(),
        Outcome::Pass => "pass".to_string(),
        Outcome::Hang => format!("HANG{} {hang}", known(r.known_hang)),
        Outcome::Wrong(m) => format!("WRONG{}: {m}", known(r.known_failure)),
        Outcome::Error(m) => format!("error{}: {m}", known(r.known_failure)),
    }
}

fn row(r: &CaseResult) -> String {
    let result = result(r, &format!("after {:.1}s", r.wall_s));
    format!("{:<26} {:<40} {:>10} {:>10}  {result}", r.id, r.describe, secs(r.first_s), secs(r.cached_s))
}

/// `68 case(s): 60 pass, 1 known hang(s), 1 known failure(s), 3 unexpected`.
fn summary(report: &VerifyReport) -> String {
    let count = |f: &dyn Fn(&CaseResult) -> bool| report.results.iter().filter(|r| f(r)).count();
    format!(
        "{} case(s): {} pass, {} known hang(s), {} known failure(s), {} unexpected",
        report.results.len(),
        count(&|r| r.outcome == Outcome::Pass),
        count(&|r| r.known_hang && r.outcome == Outcome::Hang),
        count(&|r| r.known_failure && matches!(r.outcome, Outcome::Error(_) | Outcome::Wrong(_))),
        report.unexpected
    )
}

fn versions(report: &VerifyReport) -> (String, String) {
    match &report.torch {
        None => ("not imported by any case".into(), "unknown".into()),
        Some(t) => (t.clone(), report.hip.clone().unwrap_or_else(|| "none (a torch built without ROCm)".into())),
    }
}

/// What `verify --python` without a stack found about the torch, as (label, text) rows.
fn torch_rows(h: &VerifyHeader) -> Vec<(&'static str, String)> {
    let Some(t) = &h.torch_found else { return Vec::new() };
    let python = format!(
        "{}{}",
        h.python.display(),
        t.printed.python_version.as_deref().map(|v| format!(" (Python {v})")).unwrap_or_default()
    );
    vec![
        ("python", python),
        ("torch found", t.torch_line()),
        ("HIP found", t.hip_line()),
        ("built for", t.archs_line()),
        ("the card", t.verdict.clone()),
        ("GPU code loaded", t.code_line()),
        ("MIOpen", t.miopen_line()),
    ]
}

fn header_lines(h: &VerifyHeader) {
    if h.cpu_mode() {
        println!("{CPU_MODE}");
    }
    for (k, v) in torch_rows(h) {
        println!("{k}: {v}");
    }
    if let Some(a) = &h.miopen_audit {
        print!("MIOpen kernels: {}", a.render());
    }
    println!("card: {}", h.card);
    println!("driver: {}", h.driver);
    if let Some(why) = &h.profile_why {
        println!("profile: {} ({why})", h.profile.as_deref().unwrap_or("(none)"));
    }
}

/// The run as Markdown: a table of what it ran on, then one row per case.
fn markdown(report: &VerifyReport, timeout: f64) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let h = &report.header;
    let (torch, hip) = versions(report);
    let device = if h.cpu_mode() { format!("**{CPU_MODE}**") } else { "GPU".into() };
    let mut out = format!("### rocmforge verify: {}\n\n| | |\n|---|---|\n", h.stack);
    for (k, v) in torch_rows(h) {
        out.push_str(&format!("| {k} | {} |\n", cell(&v)));
    }
    if let Some(a) = &h.miopen_audit {
        out.push_str(&format!("| MIOpen kernels | {} |\n", cell(&a.summary())));
    }
    for (k, v) in [
        ("stack", h.stack.as_str()),
        ("torch", &torch),
        ("HIP", &hip),
        ("card", &h.card),
        ("driver", &h.driver),
        ("profile", h.profile.as_deref().unwrap_or("(none)")),
        ("device", &device),
        ("result", &summary(report)),
    ] {
        out.push_str(&format!("| {k} | {} |\n", cell(v)));
    }
    out.push_str("\n| case | what | result | first | cached |\n|---|---|---|---|---|\n");
    for r in &report.results {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            r.id,
            cell(&r.describe),
            cell(&result(r, &format!("over the {timeout}s timeout"))),
            secs(r.first_s),
            secs(r.cached_s)
        ));
    }
    out
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    if args.list {
        for c in crate::verify::matrix() {
            println!("{:<26} {}", c.id, c.describe());
        }
        return Ok(());
    }
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        return Err(Failure::usage(anyhow::anyhow!("--timeout must be a positive number of seconds")));
    }
    if args.timeout > MAX_TIMEOUT_S {
        return Err(Failure::usage(anyhow::anyhow!(
            "--timeout {}: at most {MAX_TIMEOUT_S} seconds (a week) per case",
            args.timeout
        )));
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    // `--python` without `--stack`: a torch rocmforge did not install; no stack is loaded.
    let any_torch = args.python.is_some() && ctx.cli_stack.is_none();
    let cfg = ctx.config()?;
    let (stack, req) = if any_torch {
        if args.profile.is_some() {
            return Err(Failure::usage(anyhow::anyhow!(
                "--profile names a profile of a stack: give --stack NAME too (--python alone checks a torch rocmforge did not install, with no stack and no profile)"
            )));
        }
        let targets = match args.target.as_deref() {
            Some(t) => {
                crate::target::TargetSet::parse(t).map_err(|e| Failure::usage(anyhow::anyhow!("--target {t}: {e}")))?
            }
            None => Default::default(),
        };
        let req = VerifyRequest {
            python: args.python,
            timeout,
            profile: None,
            targets,
            prefix: PathBuf::new(),
            cases: args.cases,
            kernel_audit: match args.no_kernel_checks {
                true => None,
                false => Some(crate::audit::Settings {
                    targets: Vec::new(),
                    work: PathBuf::new(),
                    rocm: ctx.rocm_path.clone(),
                    // No stack is loaded: rocmforge's own checks.
                    checks: crate::recipe::RecipeTree::embedded(),
                    host: "/".into(),
                    sweep_only: None,
                }),
            },
        };
        (None, req)
    } else {
        let tree = ctx.tree()?;
        let stack = ctx.stack(&tree)?;
        let req = VerifyRequest {
            python: args.python,
            timeout,
            profile: args.profile,
            targets: ctx.targets(&stack, args.target.as_deref())?,
            prefix: ctx.prefix(&cfg, &stack, None),
            cases: args.cases,
            kernel_audit: None,
        };
        (Some(stack), req)
    };
    let table = !args.json && !args.markdown;
    let on_start = |h: &VerifyHeader| {
        if h.cpu_mode() {
            eprintln!("{CPU_MODE}: the cases run on the CPU (ROCMFORGE_VERIFY_DEVICE=cpu)");
        } else {
            eprintln!(
                "each case runs in its own process, at most {}s; the first call of a case compiles MIOpen's kernels (slow, once: they are cached for the next cases and runs)",
                args.timeout
            );
        }
        if table {
            header_lines(h);
            println!("{:<26} {:<40} {:>10} {:>10}  result", "case", "what", "first", "cached");
        }
    };
    let report = verify(&cfg, stack.as_ref(), &req, on_start, |r| {
        if table {
            println!("{}", row(r));
        }
    })
    .map_err(|e| match e.downcast_ref::<Interrupted>() {
        Some(i) => Failure::new((128 + i.signal).clamp(0, 255) as u8, e),
        None => Failure::from_op(e),
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("the report serialises"));
    } else if args.markdown {
        print!("{}", markdown(&report, args.timeout));
    } else {
        let (torch, hip) = versions(&report);
        println!(
            "{}; torch {torch}, HIP {hip}; report {}",
            summary(&report),
            report.saved.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
        );
        if report.header.cpu_mode() {
            println!("{CPU_MODE}");
        }
    }
    if report.unexpected > 0 && report.header.torch_found.is_some() {
        return Err(Failure::failed(anyhow::anyhow!(
            "{} case(s) failed or hung (no stack: none is a known failure)",
            report.unexpected
        )));
    }
    if report.unexpected > 0 {
        return Err(Failure::failed(anyhow::anyhow!(
            "{} case(s) ended in a way profile `{}` does not expect",
            report.unexpected,
            report.header.profile.as_deref().unwrap_or("(none)")
        )));
    }
    Ok(())
}
