//! `doctor`: is this host ready to build a closure tonight? The OS and its glibc (2.41 and later
//! refuse libraries that ask for an executable stack), compilers, CMake, the stack's Python,
//! every `[host]` need of the recipes (with the command that installs what is missing), disk
//! against the stack's estimate, RAM against the jobs, the GPUs the kernel sees, membership of
//! the GPU groups, a leftover `HSA_OVERRIDE_GFX_VERSION`, and the compiler cache a build would
//! use. The host is read through [`HostRoot`] (`ROCMFORGE_HOST_ROOT`), commands on `PATH`.

use std::path::PathBuf;

use serde::Serialize;

use crate::config::Config;
use crate::engine::budget;
use crate::graph::BuildGraph;
use crate::host::glibc::{self, Glibc};
use crate::host::gpu::{self, Gpu};
use crate::host::needs::{self, HostCheck};
use crate::host::{self, Account, HostRoot, Memory};
use crate::recipe::{Recipe, Stack};
use crate::target::TargetSet;

#[derive(Debug, Clone)]
pub struct DoctorRequest {
    /// Recipes whose closure is checked; empty: every recipe of the stack.
    pub recipes: Vec<String>,
    /// `--target`; `None`: what `build` would choose (the host's RDNA1 card, else the stack's).
    pub targets: Option<TargetSet>,
    pub jobs: usize,
    /// With `--rocm-path`: audit its libMIOpen's kernels with these settings (targets and work
    /// folder replaced by the doctor's); `None`: do not.
    pub kernel_audit: Option<crate::audit::Settings>,
    /// What the user decided about an installed ROCm (`--from-source`, ...).
    pub installation: crate::installation::Choices,
}

/// A tool on `PATH` and the first line of its `--version`.
#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    pub name: String,
    pub path: Option<PathBuf>,
    pub version: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Disk {
    /// The directory measured (the work dir: sources and build trees).
    pub path: PathBuf,
    pub free: u64,
    /// The stack's `disk-gb`, in bytes.
    pub estimate: Option<u64>,
    /// rocmforge's other directories on the same disk (`state dir`, `cache dir`).
    pub also: Vec<&'static str>,
}

/// The state or cache dir when it lies on another disk than the work dir: rocmforge writes
/// there during the whole build (state: status, history, reports; cache: every artifact).
#[derive(Debug, Clone, Serialize)]
pub struct OtherDisk {
    pub what: &'static str,
    pub path: PathBuf,
    pub free: u64,
}

/// Below this much free space, the state or cache dir's disk is reported as nearly full.
pub const LOW_FREE: u64 = 1 << 30;

#[derive(Debug, Clone, Serialize)]
pub struct MemoryFit {
    pub memory: Memory,
    pub jobs: usize,
    /// The recipe that needs the most memory per job, and that figure.
    pub heaviest: Option<(String, f64)>,
    /// How many jobs that recipe gets at once with this memory.
    pub jobs_that_fit: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Doctor {
    pub stack: String,
    pub recipes: usize,
    /// The host's glibc (`None`: no `libc.so.6` found that names its release).
    pub glibc: Option<Glibc>,
    pub tools: Vec<Tool>,
    pub check: HostCheck,
    pub disk: Option<Disk>,
    /// The state and cache dirs' disks, where they are not the work dir's.
    pub other_disks: Vec<OtherDisk>,
    pub memory: Option<MemoryFit>,
    pub gpus: Vec<Gpu>,
    pub targets: TargetSet,
    /// Why those targets (asked, from the GPU, the stack's default).
    pub targets_from: String,
    pub account: Account,
    pub hsa_override: Option<String>,
    /// What a build would put in front of the compilers (`ccache`, `sccache`, `distcc`, or
    /// `none`); `None` when it would refuse to start (a warning says why).
    pub compiler_cache: Option<String>,
    /// The installed ROCm the short night would build on (`--rocm-path`, else one found at
    /// `/opt/rocm`, `/opt/rocm-*` or `/usr`), and what it would take and build.
    pub installation: Option<InstallationReport>,
    /// A binary stack: the GPU code its built wheels carry and the profile a card of the
    /// targets runs them with, and why ([`crate::gpu_code`]); `None` before a build.
    pub wheels: Option<String>,
    /// With `--rocm-path`: what the kernels of its libMIOpen do on the targets ([`crate::audit`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miopen_audit: Option<crate::audit::Audit>,
    /// What may go wrong but does not stop a build.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InstallationReport {
    /// `/opt/rocm-6.2.4 (ROCm's layout, release 6.2.4 from .info/version)`.
    pub found: String,
    /// `--rocm-path` (or config), or `found here` (not used until passed).
    pub from: String,
    pub taken: Vec<String>,
    /// `(recipe, why it is built)`, for the recipes the installation has.
    pub built: Vec<(String, String)>,
    pub refused: Vec<(String, String)>,
    /// Recipes with an `[external]` spec the installation lacks (built).
    pub absent: Vec<String>,
}

/// The installed ROCm `cfg` names, else the first found: `/opt/rocm`, the newest `/opt/rocm-*`,
/// or `/usr` with a HIP CMake package.
fn installation_report(
    cfg: &Config,
    stack: &Stack,
    recipes: &[&Recipe],
    targets: &TargetSet,
    choices: &crate::installation::Choices,
    root: &HostRoot,
) -> Option<InstallationReport> {
    let (path, from) = match &cfg.rocm_path {
        Some(p) => (p.clone(), "--rocm-path".to_string()),
        None => {
            let mut opt: Vec<PathBuf> = std::fs::read_dir(root.path("/opt"))
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("rocm"))
                        && p.join(".info/version").is_file()
                })
                .collect();
            opt.sort_by(|a, b| crate::wheel::natural_cmp(&a.to_string_lossy(), &b.to_string_lossy()));
            let usr = root.path("/usr");
            let found = opt.pop().or_else(|| {
                crate::installation::MULTIARCH
                    .iter()
                    .any(|m| usr.join("lib").join(m).join("cmake/hip").is_dir())
                    .then_some(usr)
            })?;
            (found, "found here; pass `--rocm-path` to build on it".to_string())
        }
    };
    let inst = crate::installation::Installation::open(&path, &cfg.state_dir);
    let mut r = InstallationReport {
        found: inst.describe(),
        from,
        taken: Vec::new(),
        built: Vec::new(),
        refused: Vec::new(),
        absent: Vec::new(),
    };
    for recipe in recipes {
        // The targets it would really be built for, as the plan decides them.
        let decided = recipe.targets.decide(targets);
        match inst.decide(recipe, &stack.rocm_version, decided.targets(), choices) {
            Some(crate::installation::Decision::Take { .. }) => r.taken.push(recipe.name.clone()),
            Some(crate::installation::Decision::Absent(_)) => r.absent.push(recipe.name.clone()),
            Some(crate::installation::Decision::Build(why)) => r.built.push((recipe.name.clone(), why)),
            Some(crate::installation::Decision::Refuse { reason, .. }) => r.refused.push((recipe.name.clone(), reason)),
            None => {}
        }
    }
    inst.save();
    Some(r)
}

impl Doctor {
    /// A build would refuse to start (a need is missing).
    pub fn has_problems(&self) -> bool {
        !self.check.is_ok()
    }
}

const TOOLS: &[&str] = &["cc", "c++", "hipcc", "cmake", "ninja", "git", "python3", "ccache", "sccache"];

pub fn doctor(cfg: &Config, stack: &Stack, req: &DoctorRequest) -> Result<Doctor, anyhow::Error> {
    let root = HostRoot::from_env();
    let recipes: Vec<&Recipe> = if req.recipes.is_empty() {
        stack.recipes.values().collect()
    } else {
        let g = BuildGraph::closure(stack, &req.recipes)?;
        stack.recipes.values().filter(|r| g.contains(&r.name)).collect()
    };
    let building: Vec<&Recipe> = recipes.iter().copied().filter(|r| !r.is_source_only()).collect();
    let check = needs::check(&root, &building, stack.python.as_deref().map(|v| (v, stack.name.as_str())));
    let tools: Vec<Tool> = TOOLS
        .iter()
        .map(|t| {
            let path = host::which(t);
            Tool { name: t.to_string(), version: path.as_deref().and_then(host::tool_version), path }
        })
        .collect();
    let mut warnings = Vec::new();

    let (disk, other_disks) = disks(cfg, stack, &mut warnings);

    let memory = memory_fit(&root, &building, req.jobs, &mut warnings);

    let gpus = gpu::detect(&root);
    let super::Targets { set: targets, from: targets_from, .. } = super::targets(stack, req.targets.clone(), &root)?;
    let account = gpu_access(&root, &gpus, &targets, &mut warnings);
    let hsa_override = std::env::var("HSA_OVERRIDE_GFX_VERSION").ok().filter(|v| !v.is_empty());
    if let Some(v) = &hsa_override {
        warnings.push(format!(
            "HSA_OVERRIDE_GFX_VERSION={v} is set: a native build for {targets} must run without it (it makes ROCm load code for another GPU, the crashes and hangs this build avoids): `unset HSA_OVERRIDE_GFX_VERSION`, and remove it from your shell's startup files"
        ));
    }
    let compiler_cache = compiler_cache(cfg, &tools, &mut warnings);
    let installation = if stack.is_native() {
        installation_report(cfg, stack, &building, &targets, &req.installation, &root)
    } else {
        None
    };
    // A binary stack's wheels: what their GPU code means for the card (native stacks: nothing).
    let code = if stack.is_native() { Vec::new() } else { crate::gpu_code::load(&cfg.prefix_for(&stack.name)) };
    let wheels = match crate::gpu_code::choose(stack, None, &code, &targets) {
        Ok(c) if !code.is_empty() => Some(format!(
            "profile {}: {}",
            c.profile.map(|p| p.name.as_str()).unwrap_or("(none)"),
            c.why().unwrap_or_default()
        )),
        _ => None,
    };
    Ok(Doctor {
        miopen_audit: miopen_audit(cfg, req, &targets),
        installation,
        stack: stack.name.clone(),
        recipes: recipes.len(),
        glibc: glibc::detect(&root),
        tools,
        check,
        disk,
        other_disks,
        memory,
        gpus,
        targets,
        targets_from,
        account,
        hsa_override,
        compiler_cache,
        wheels,
        warnings,
    })
}

/// The work dir's disk against the stack's estimate, and the state and cache dirs' disks when
/// they are others.
fn disks(cfg: &Config, stack: &Stack, warnings: &mut Vec<String>) -> (Option<Disk>, Vec<OtherDisk>) {
    let work_disk = crate::fsutil::disk_space(&cfg.work_dir);
    let mut also = Vec::new();
    let mut other_disks = Vec::new();
    for (what, dir) in [("state dir", &cfg.state_dir), ("cache dir", &cfg.cache_dir)] {
        let Some(d) = crate::fsutil::disk_space(dir) else { continue };
        if work_disk.as_ref().is_some_and(|w| w.mount == d.mount) {
            also.push(what);
            continue;
        }
        if d.free < LOW_FREE {
            warnings.push(format!(
                "only {} free at {} ({what}): rocmforge writes there for the whole build; free space there, or set `{}` in the config to a larger disk",
                crate::fsutil::human_size(d.free),
                dir.display(),
                what.replace(' ', "-")
            ));
        }
        other_disks.push(OtherDisk { what, path: dir.clone(), free: d.free });
    }
    let disk = work_disk.map(|d| Disk {
        path: cfg.work_dir.clone(),
        free: d.free,
        estimate: stack.disk_gb.map(|g| (g * (1u64 << 30) as f64) as u64),
        also,
    });
    if let Some(Disk { free, estimate: Some(e), path, .. }) = &disk {
        if free < e {
            warnings.push(format!(
                "{} free at {} (work-dir), and a whole build of stack `{}` takes about {}: free space there, or set `work-dir` (and `cache-dir`) in the config to a larger disk",
                crate::fsutil::human_size(*free),
                path.display(),
                stack.name,
                crate::fsutil::human_size(*e)
            ));
        }
    }
    (disk, other_disks)
}

/// The host's memory against `jobs` jobs of the heaviest recipe (per job).
fn memory_fit(root: &HostRoot, building: &[&Recipe], jobs: usize, warnings: &mut Vec<String>) -> Option<MemoryFit> {
    let memory = host::memory(root).map(|m| {
        let heaviest = building
            .iter()
            .filter(|r| !matches!(r.build.system, crate::recipe::BuildSystem::PrebuiltWheel))
            .max_by(|a, b| a.build.memory_per_job_gb.total_cmp(&b.build.memory_per_job_gb))
            .map(|r| (r.name.clone(), r.build.memory_per_job_gb));
        let per_job = heaviest.as_ref().map(|h| h.1).unwrap_or(0.0);
        MemoryFit { memory: m, jobs, jobs_that_fit: budget::jobs_for(jobs, per_job, Some(m.available)), heaviest }
    });
    if let Some(MemoryFit { jobs, jobs_that_fit, heaviest: Some((name, gb)), memory }) = &memory {
        if jobs_that_fit < jobs {
            warnings.push(format!(
                "{name} needs about {gb} GB per job: with {} available it runs {jobs_that_fit} of the {jobs} jobs at once (the build caps it; it is slower, not broken)",
                crate::fsutil::human_size(memory.available)
            ));
        }
    }
    memory
}

/// Whether the GPUs seen are among `targets`, and whether this user may open them.
fn gpu_access(root: &HostRoot, gpus: &[Gpu], targets: &TargetSet, warnings: &mut Vec<String>) -> Account {
    if gpus.is_empty() {
        warnings.push(format!(
            "no GPU seen (no KFD node under {}, no RDNA1 card on PCI): a build works without one, but nothing can be run or verified here",
            root.path("/sys/class/kfd").display()
        ));
    } else if !gpus.iter().any(|g| g.target.is_some_and(|t| targets.contains(t))) {
        warnings.push(format!(
            "this host's GPU(s) ({}) are not among the targets ({targets}): what is built will not run here",
            gpus.iter().map(|g| g.gfx.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }

    let account = host::account(root);
    if !gpus.is_empty() && account.uid != 0 {
        let missing: Vec<&str> = account
            .groups
            .iter()
            .filter(|(_, exists, member)| *exists && !member)
            .map(|(g, _, _)| g.as_str())
            .collect();
        if !missing.is_empty() {
            warnings.push(format!(
                "user {} is not in the group(s) {} that may open /dev/kfd and /dev/dri: `usermod -aG {} {}` (as root), then log in again",
                account.user,
                missing.join(", "),
                missing.join(","),
                account.user
            ));
        }
    }
    account
}

/// The compiler cache a build would use (`ccache`, `sccache + distcc`, `none`), or `None` when a
/// build would not start.
fn compiler_cache(cfg: &Config, tools: &[Tool], warnings: &mut Vec<String>) -> Option<String> {
    match crate::engine::compilers::Launchers::resolve(cfg, None) {
        Ok(l) => {
            if l.cache.is_none() && cfg.compiler_cache == crate::config::CompilerCacheChoice::Auto {
                let old = tools
                    .iter()
                    .find(|t: &&Tool| t.name == "sccache")
                    .and_then(|t| t.version.as_deref())
                    .filter(|v| !crate::engine::compilers::sccache_recent(v.split_whitespace().nth(1).unwrap_or("")))
                    .map(|v| format!("; `{v}` is older"))
                    .unwrap_or_default();
                warnings.push(format!(
                    "no compiler cache on PATH (ccache, or sccache {} or later{old}): a recipe rebuilt after a change compiles everything again; `apt install ccache`",
                    crate::engine::compilers::SCCACHE_MIN
                ));
            }
            let mut parts: Vec<&str> = l.cache.map(|c| c.name()).into_iter().collect();
            if l.distcc_hosts.is_some() {
                parts.push("distcc");
            }
            Some(if parts.is_empty() { "none".to_string() } else { parts.join(" + ") })
        }
        Err(e) => {
            warnings.push(format!("a build would not start: {e}"));
            None
        }
    }
}

/// The installation's MIOpen, as it is: what its own kernels do on the targets (with
/// `--rocm-path` and the kernel checks on; `None` otherwise).
fn miopen_audit(cfg: &Config, req: &DoctorRequest, targets: &TargetSet) -> Option<crate::audit::Audit> {
    let (rocm, settings) = cfg.rocm_path.as_deref().zip(req.kernel_audit.as_ref())?;
    let library = crate::audit::installed_library(rocm)?;
    let settings = crate::audit::Settings {
        targets: targets.names().iter().map(|t| t.to_string()).collect(),
        work: cfg.state_dir.join("miopen-audit").join("doctor"),
        rocm: Some(rocm.to_path_buf()),
        ..settings.clone()
    };
    Some(settings.audit(0, &library))
}
