//! `verify`: runs the smoke-test matrix ([`crate::verify`]) with the stack's venv Python (or
//! another), under the activation `env` prints and the profile's settings, one process per
//! case, and saves the report, with the card it found and the driver, under
//! `<state-dir>/verify/<stack>/` (CPU mode: `<state-dir>/verify/<stack>/cpu/`, so a CPU run is
//! never taken for the GPU's latest).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::UsageError;
use crate::config::Config;
use crate::host::gpu::{self, Gpu};
use crate::host::HostRoot;
use crate::recipe::{Stack, GFX_OVERRIDE_VAR};
use crate::target::TargetSet;
use crate::verify::run::{CaseResult, Runner};
use crate::verify::DEVICE_VAR;

#[derive(Debug, Clone)]
pub struct VerifyRequest {
    /// The Python that runs the cases (default: the stack's venv's).
    pub python: Option<PathBuf>,
    pub timeout: Duration,
    pub profile: Option<String>,
    pub targets: TargetSet,
    pub prefix: PathBuf,
    /// Only these cases (default: all).
    pub cases: Vec<String>,
    /// Without a stack: audit the kernels of the libMIOpen the torch loads with these settings
    /// (their `work` is replaced by the report's folder), before the cases; `None`: do not.
    pub kernel_audit: Option<crate::audit::Settings>,
}

/// What a run is made under, known before its first case.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyHeader {
    pub stack: String,
    pub profile: Option<String>,
    /// Why that profile, on a binary stack: what GPU code its wheels carry ([`crate::gpu_code`]).
    pub profile_why: Option<String>,
    pub python: PathBuf,
    pub timeout_s: f64,
    pub started: String,
    /// `gpu`, or `cpu` in CPU mode (`ROCMFORGE_VERIFY_DEVICE=cpu` in the caller's environment).
    pub device: &'static str,
    /// The cards found and where ([`gpu::card_line`]).
    pub card: String,
    pub gpus: Vec<Gpu>,
    /// The driver and where it was read ([`gpu::driver`]).
    pub driver: String,
    /// MIOpen's kernel cache, shared by the cases (and kept between runs).
    pub miopen_cache: PathBuf,
    /// Without a stack: the torch the Python imports, what it was built for and carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_found: Option<crate::verify::probe::TorchFound>,
    /// Without a stack: what the kernels of the libMIOpen that torch loads do on the targets
    /// ([`crate::audit`]), compiled before the cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miopen_audit: Option<crate::audit::Audit>,
}

/// The header's `stack` without one.
pub const NO_STACK: &str = "none (a torch rocmforge did not install)";

fn check_cases(req: &VerifyRequest, ids: &[&str]) -> Result<(), UsageError> {
    match req.cases.iter().find(|c| !ids.contains(&c.as_str())) {
        Some(c) => Err(UsageError(format!("no case `{c}` in the verify matrix (`rocmforge verify --list`)"))),
        None => Ok(()),
    }
}

impl VerifyHeader {
    pub fn cpu_mode(&self) -> bool {
        self.device == "cpu"
    }
}

/// The run, as saved in the report.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    #[serde(flatten)]
    pub header: VerifyHeader,
    /// torch's and HIP's versions, as the first case that imported torch printed them.
    pub torch: Option<String>,
    pub hip: Option<String>,
    pub results: Vec<CaseResult>,
    /// Results the profile does not expect (errors, hangs it does not list).
    pub unexpected: usize,
    #[serde(skip)]
    pub saved: Option<PathBuf>,
}

/// SIGINT, SIGTERM or SIGHUP came: the running case (or the probe) was stopped with all its
/// processes, and no other case started.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by signal {signal}{}: {what}; no report saved", crate::process::signal_name(*signal))]
pub struct Interrupted {
    pub signal: i32,
    pub what: String,
}

/// How long the process may go on after SIGINT/SIGTERM before it exits from the handler (only a
/// `verify` stuck outside its cases reaches it: a case is stopped at once).
const INTERRUPT_BACKSTOP: Duration = Duration::from_secs(20);

/// Where the reports of `verify --python` without a stack go: `<state-dir>/verify/<this>/`.
pub const ANY_TORCH: &str = "any-torch";

/// Runs the matrix; `on_start` hears what it runs under, `on_case` each result as it comes.
/// Fails before any case for a bad request (unknown case or profile, a profile listing a case
/// the matrix does not have, no Python, a CPU-mode variable of another value than `cpu`).
///
/// Without a stack (`verify --python PY` alone: a torch rocmforge did not install) no activation
/// or profile is applied: the cases run in the caller's environment, after the torch has been
/// looked at ([`crate::verify::probe`]).
pub fn verify(
    cfg: &Config,
    stack: Option<&Stack>,
    req: &VerifyRequest,
    on_start: impl FnOnce(&VerifyHeader),
    mut on_case: impl FnMut(&CaseResult),
) -> Result<VerifyReport, anyhow::Error> {
    let matrix = crate::verify::matrix();
    let ids: Vec<&str> = matrix.iter().map(|c| c.id.as_str()).collect();
    let cpu_mode = cpu_mode()?;
    let host = HostRoot::from_env();
    let gpus = gpu::detect(&host);
    let (profile, profile_why, python, env, mut root) = match stack {
        Some(stack) => {
            let r = stack_run(cfg, stack, req, &ids, &gpus)?;
            (r.profile, r.profile_why, r.python, r.env, r.root)
        }
        None => {
            check_cases(req, &ids)?;
            let Some(python) = req.python.clone() else {
                return Err(UsageError(
                    "without a stack, verify needs --python PY: the Python whose torch it checks".into(),
                )
                .into());
            };
            let env: BTreeMap<String, String> = std::env::vars().collect();
            (None, None, python, env, cfg.state_dir.join("verify").join(ANY_TORCH))
        }
    };
    let mut env = env;
    env.remove(DEVICE_VAR);
    if cpu_mode {
        env.insert(DEVICE_VAR.into(), "cpu".into());
        root.push("cpu");
    }
    let miopen = root.join("miopen");
    env.entry("MIOPEN_USER_DB_PATH".into()).or_insert_with(|| miopen.join("db").display().to_string());
    env.entry("MIOPEN_CUSTOM_CACHE_DIR".into()).or_insert_with(|| miopen.join("cache").display().to_string());
    // Ctrl-C, SIGTERM, SIGHUP: the running case (or the probe) is stopped with everything it
    // started, no case starts after it, and `verify` ends with `Interrupted`.
    let _ = crate::process::on_termination(|sig| {
        crate::process::stop_all();
        std::thread::sleep(INTERRUPT_BACKSTOP);
        std::process::exit(128 + sig);
    });
    let interrupted = |what: String| crate::process::signalled().map(|signal| Interrupted { signal, what });
    // A torch rocmforge did not install: what it is and carries, before the cases.
    let (torch_found, miopen_audit) = match stack {
        Some(_) => (None, None),
        None => look_at_torch(req, &gpus, &python, &env, &root),
    };
    let started = crate::report::utc(std::time::SystemTime::now());
    let runner = Runner {
        python: python.clone(),
        timeout: req.timeout,
        env,
        dir: root.join("run"),
        known: profile.map(|p| p.known.clone()).unwrap_or_default(),
    };
    let script = runner
        .prepare()
        .map_err(|e| anyhow::anyhow!("cannot write the case script into {}: {e}", runner.dir.display()))?;
    let header = VerifyHeader {
        stack: stack.map(|s| s.name.clone()).unwrap_or_else(|| NO_STACK.to_string()),
        profile: profile.map(|p| p.name.clone()),
        profile_why,
        python,
        timeout_s: req.timeout.as_secs_f64(),
        started,
        device: if cpu_mode { "cpu" } else { "gpu" },
        card: gpu::card_line(&gpus),
        gpus,
        driver: gpu::driver(&host),
        miopen_cache: miopen,
        torch_found,
        miopen_audit,
    };
    if let Some(i) = interrupted("while looking at the torch, before the first case".into()) {
        return Err(i.into());
    }
    on_start(&header);
    // Without a torch every case would fail the same way (or hang to its timeout).
    if let Some(found) = header.torch_found.as_ref().filter(|t| t.printed.torch.is_none()) {
        return Err(anyhow::anyhow!(
            "`{}` imported no torch ({}): nothing to run, no case was started",
            header.python.display(),
            found.printed.error.as_deref().unwrap_or("no reason given")
        ));
    }
    let mut results = Vec::new();
    for case in matrix.iter().filter(|c| req.cases.is_empty() || req.cases.contains(&c.id)) {
        let r = runner.run(&script, case);
        if let Some(i) = interrupted(format!("case `{}` was stopped, after {} case(s)", case.id, results.len())) {
            return Err(i.into());
        }
        on_case(&r);
        results.push(r);
    }
    let unexpected = results.iter().filter(|r| !r.expected).count();
    let versions = results.iter().find_map(|r| r.versions.clone());
    let mut report = VerifyReport {
        header,
        torch: versions.as_ref().map(|v| v.torch.clone()),
        hip: versions.and_then(|v| v.hip),
        results,
        unexpected,
        saved: None,
    };
    report.saved = Some(save(&report, &root)?);
    Ok(report)
}

/// Whether the cases run on the CPU: from the caller's environment only (the recipe loader
/// refuses it in a profile's `env`), and only as `cpu`.
fn cpu_mode() -> Result<bool, anyhow::Error> {
    match std::env::var(DEVICE_VAR) {
        Err(_) => Ok(false),
        Ok(v) if v == "cpu" => Ok(true),
        Ok(v) => Err(UsageError(format!(
            "{DEVICE_VAR}={v:?}: the only value it takes is `cpu` (unset it to run the cases on the GPU)"
        ))
        .into()),
    }
}

/// What a run with a stack runs under: the profile (and why), the Python (the stack's venv
/// unless --python), the environment with the stack's activation applied, the report folder.
struct RunUnder<'a> {
    profile: Option<&'a crate::recipe::Profile>,
    profile_why: Option<String>,
    python: PathBuf,
    env: BTreeMap<String, String>,
    root: PathBuf,
}

fn stack_run<'a>(
    cfg: &Config,
    stack: &'a Stack,
    req: &VerifyRequest,
    ids: &[&str],
    gpus: &[Gpu],
) -> Result<RunUnder<'a>, anyhow::Error> {
    // The profile the activation below applies: on a binary stack the wheels' GPU code
    // picks it.
    let code = crate::gpu_code::load(&req.prefix);
    let choice = crate::gpu_code::choose(stack, req.profile.as_deref(), &code, &req.targets).map_err(UsageError)?;
    let profile = choice.profile;
    if let Some(p) = profile {
        for (what, list) in p.known.lists() {
            if let Some(h) = list.iter().find(|h| !ids.contains(&h.as_str())) {
                return Err(UsageError(format!(
                    "{}: profile `{}` lists {what} `{h}`, which is no case of the verify matrix (`rocmforge verify --list`)",
                    stack.file, p.name
                ))
                .into());
            }
        }
    }
    check_cases(req, ids)?;
    let venv = crate::venv::dir(&cfg.state_dir, &stack.name);
    let python = match &req.python {
        Some(p) => p.clone(),
        None => {
            let p = crate::venv::python(&venv);
            if !p.is_file() {
                return Err(UsageError(format!(
                    "stack `{}` has no venv at {} yet: build it (`rocmforge build`, which fills the venv with the stack's wheels), or pass --python",
                    stack.name,
                    venv.display()
                ))
                .into());
            }
            p
        }
    };
    // The same activation `rocmforge env` prints, with the profile chosen above.
    let activation = super::env::activation(
        cfg,
        stack,
        &super::env::EnvRequest {
            targets: req.targets.clone(),
            prefix: req.prefix.clone(),
            profile: req.profile.clone(),
        },
        &choice,
        gpus,
    );
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    // A native build must run its own code, whatever the caller's environment says.
    if stack.is_native() {
        env.remove(GFX_OVERRIDE_VAR);
    }
    let env = crate::activate::apply(&activation, env);
    Ok(RunUnder {
        profile,
        profile_why: choice.why(),
        python,
        env,
        root: cfg.state_dir.join("verify").join(&stack.name),
    })
}

/// A torch rocmforge did not install: what it is and carries, and what its MIOpen's kernels do
/// on the targets (the targets asked, else the RDNA1 card found, else gfx1010).
fn look_at_torch(
    req: &VerifyRequest,
    gpus: &[Gpu],
    python: &std::path::Path,
    env: &BTreeMap<String, String>,
    root: &std::path::Path,
) -> (Option<crate::verify::probe::TorchFound>, Option<crate::audit::Audit>) {
    let card = gpus
        .iter()
        .find(|g| g.is_rdna1())
        .or(gpus.first())
        .map(|g| g.gfx.clone())
        .or_else(|| req.targets.names().first().map(|t| t.to_string()));
    let printed = crate::verify::probe::run(python, env, &root.join("probe"), req.timeout)
        .unwrap_or_else(|e| crate::verify::probe::Printed { error: Some(e), ..Default::default() });
    let torch_found = crate::verify::probe::assess(printed, card.as_deref());
    let library = torch_found.printed.miopen_library.as_deref().filter(|l| l.is_file());
    let miopen_audit = req.kernel_audit.as_ref().zip(library).map(|(settings, library)| {
        let mut targets: Vec<String> = req.targets.names().iter().map(|t| t.to_string()).collect();
        if targets.is_empty() {
            targets.push(gpus.iter().find(|g| g.is_rdna1()).map(|g| g.gfx.clone()).unwrap_or_else(|| "gfx1010".into()));
        }
        let settings = crate::audit::Settings { targets, work: root.join("miopen-audit"), ..settings.clone() };
        settings.audit(0, library)
    });
    (Some(torch_found), miopen_audit)
}

/// The report as `<root>/reports/<utc>.json` and `<root>/latest.json`; the first's path.
fn save(report: &VerifyReport, root: &std::path::Path) -> Result<PathBuf, anyhow::Error> {
    let json = serde_json::to_string_pretty(report).expect("the report serialises");
    let file = root.join("reports").join(format!("{}.json", crate::report::compact_utc(std::time::SystemTime::now())));
    crate::fsutil::write_atomic(&file, json.as_bytes())
        .and_then(|()| crate::fsutil::write_atomic(&root.join("latest.json"), json.as_bytes()))
        .map_err(|e| anyhow::anyhow!("cannot save the verify report {}: {e}", file.display()))?;
    Ok(file)
}
