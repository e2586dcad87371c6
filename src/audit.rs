//! What a MIOpen someone else built does on gfx101x, proved without a GPU from the kernels it
//! carries: its embedded kernel sources ([`crate::offload::miopen`]) are laid out as a kernel
//! tree, and the stack's own gfx101x checks (`recipes/checks/miopen-batchnorm`,
//! `recipes/checks/miopen-legacy-ck`, the same scripts the source stacks run after install)
//! compile them for the requested targets, with the compiler found here ([`find_compiler`]),
//! each by the recipe's own `[[check]]` step line with the placeholders filled
//! ([`step_command`]); `recipes/checks/miopen-sweep` compiles every embedded kernel file.
//! Where the host code's defines are not readable from the library the checks compile every
//! variant the kernels' own `#if`s admit and say what they assumed. Each failure is reported
//! with its kernel, target, compiler message and what the user can do ([`remedy`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::offload::miopen;
use crate::recipe::{PostCheck, RecipeTree};

/// The control target every check also compiles for: a failure there too is the check's sample
/// values, not the target (gfx9: the DPP reduction, the gfx9 buffer resource word).
pub const CONTROL: &str = "gfx900";

/// How long one check may compile (the legacy-CK reductions: about 100 s per target on 2 cores).
const CHECK_TIMEOUT: Duration = Duration::from_secs(3600);

/// The recipe whose `[[check]]`s an audit runs, (stack, recipe): MIOpen's source build runs the
/// same checks after install. Their folders (`files`, `helpers`) are the recipe's, read from the
/// audit's recipe tree, so a change there is the one place.
pub const CHECKS_RECIPE: (&str, &str) = ("rocm-6.2", "miopen");

/// The checks an audit runs: (its name in the audit, the recipe's `[[check]]`, what it proves).
/// A list, not every `[[check]]` of the recipe: a check runs on a library's tree only if it has
/// a mode for a tree without host code (its script reads the manifest `rocmforge` writes,
/// kernelcheck.EMBEDDED), which a new recipe check need not have; and the audit's report names
/// each and says what to do about its failures ([`remedy`]). What a check is run with is the
/// recipe's: its step line, its files, its helpers.
pub const CHECKS: [(&str, &str, &str); 3] = [
    ("batchnorm", "batchnorm-gfx101x", "batchnorm's OpenCL kernels (DPP `row_bcast` reduction)"),
    ("legacy-ck", "legacy-ck-gfx101x", "the legacy composable-kernel reductions (target macro, buffer resource dword)"),
    (
        "sweep",
        "kernel-sweep-gfx101x",
        "every embedded kernel file (.cl, .cpp, .s) compiled, against the gfx900 control",
    ),
];

/// The placeholder an audit leaves out of a step, with the option before it: an audit links no
/// code object (MIOpen's comgr links the device libraries when it builds a kernel), and without
/// `--device-libs` each check stops before linking (OpenCL and assembly to relocatable objects,
/// HIP to GPU assembly, then assembled), which is also the text legacy-CK's dword reading reads.
const LEFT_OUT: &str = "rocm_device_libs";

/// The compiler the checks run with, and where it was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compiler {
    pub clang: PathBuf,
    pub objdump: PathBuf,
    /// `the ROCm at /opt/rocm-6.2.4`, `a distribution's clang (/usr/lib/llvm-15)`, `the host's clang`.
    pub from: String,
    /// Its `--version` first line.
    pub version: String,
    /// Where `include/hip/hip_runtime.h` is, for the HIP kernels (legacy CK).
    pub hip_root: Option<PathBuf>,
}

/// One compile of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compile {
    pub target: String,
    pub kernel: String,
    /// The variant (`MIO_BN_VARIANT`) or parameter set (`rnn-bias-fp32`).
    #[serde(default)]
    pub variant: serde_json::Value,
    pub ok: bool,
    /// The compiler's first error lines (or the check's reason) when it failed.
    #[serde(default)]
    pub message: Vec<String>,
    /// The sweep's classification (`ok`, `FAILED`, `known`, `inconclusive`, `unverified`:
    /// fails on the target alone, where the rocm-6.2 host code never builds it, which a tree
    /// without host code cannot confirm; `control`), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Compile {
    /// Not proved either way whatever the control did (the sweep's `unverified`).
    fn unproved(&self) -> bool {
        self.status.as_deref() == Some("unverified")
    }
}

/// What a check's `--json` file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckJson {
    #[serde(default)]
    pub compiles: Vec<Compile>,
    #[serde(default)]
    pub problems: Vec<String>,
    #[serde(default)]
    pub assumed: Vec<String>,
    #[serde(default)]
    pub compiler: String,
    #[serde(default)]
    pub pass: bool,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckOutcome {
    /// `batchnorm`, `legacy-ck`.
    pub name: String,
    pub what: String,
    /// `pass`, `fail`, `inconclusive` (no compile fails on the targets alone, but some are not
    /// proved either way: they fail on the control too, or [`Compile::unproved`]), or `error`
    /// (the check could not run; `error` says why).
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub result: CheckJson,
    /// What of the recipe's step the audit did not pass (`--device-libs {rocm_device_libs}`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// The check's full output.
    pub log: PathBuf,
}

impl CheckOutcome {
    /// Compiles that fail on a requested target and pass on the control: the target's failures.
    pub fn failures(&self) -> impl Iterator<Item = &Compile> {
        self.result.compiles.iter().filter(|c| !c.ok && c.target != CONTROL && !self.control_fails(c) && !c.unproved())
    }

    /// Compiles that fail on a requested target and on the control too, or that the check
    /// could not tell ([`Compile::unproved`]): not proved either way.
    pub fn inconclusive(&self) -> impl Iterator<Item = &Compile> {
        self.result.compiles.iter().filter(|c| !c.ok && c.target != CONTROL && (self.control_fails(c) || c.unproved()))
    }

    /// `fail` (a compile fails on the targets alone, or a problem), else `inconclusive` (some
    /// are not proved either way), else `pass`: an unproved compile never reads as a pass.
    pub fn verdict(&self) -> &'static str {
        if self.failures().next().is_some() || !self.result.problems.is_empty() {
            "fail"
        } else if self.inconclusive().next().is_some() {
            "inconclusive"
        } else {
            "pass"
        }
    }

    fn control_fails(&self, c: &Compile) -> bool {
        self.result
            .compiles
            .iter()
            .any(|o| o.target == CONTROL && o.kernel == c.kernel && o.variant == c.variant && !o.ok)
    }

    fn on_targets(&self) -> usize {
        self.result.compiles.iter().filter(|c| c.target != CONTROL).count()
    }
}

/// The audit of one libMIOpen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Audit {
    pub library: PathBuf,
    pub miopen_version: Option<String>,
    pub hip_version: Option<String>,
    pub targets: Vec<String>,
    /// Files embedded (kernels, includes) and how many of them have no recovered name.
    pub kernels: usize,
    pub includes: usize,
    pub unnamed: usize,
    /// The kernel tree the checks ran on.
    pub tree: PathBuf,
    pub compiler: Option<Compiler>,
    pub checks: Vec<CheckOutcome>,
    /// Why nothing was checked (the library unreadable, no compiler, no Python).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Audit {
    /// Whether a check ran and failed.
    pub fn failed(&self, check: &str) -> bool {
        self.checks.iter().any(|c| c.name == check && c.status == "fail")
    }

    /// What could not be checked: the whole library (its `error`) or each check that could not
    /// run, one line each naming the library (`inspect` exits 1 on any).
    pub fn not_run(&self) -> Vec<String> {
        let lib = self.library.display();
        if let Some(e) = &self.error {
            return vec![format!("{lib}: kernels not checked: {e}")];
        }
        self.checks
            .iter()
            .filter(|c| c.status == "error")
            .map(|c| format!("{lib}: the {} check could not run: {}", c.name, c.error.as_deref().unwrap_or("?")))
            .collect()
    }

    /// One line: each check's outcome and the kernels that fail on the targets
    /// (`batchnorm: FAIL (MIOpenBatchNormBwdSpatial.cl ...); legacy-ck: pass`).
    pub fn summary(&self) -> String {
        if let Some(e) = &self.error {
            return format!("not checked: {e}");
        }
        let checks: Vec<String> = self
            .checks
            .iter()
            .map(|c| match c.status.as_str() {
                "fail" => {
                    let kernels: std::collections::BTreeSet<&str> = c.failures().map(|f| f.kernel.as_str()).collect();
                    let mut what: Vec<String> = kernels.into_iter().map(String::from).collect();
                    what.extend(c.result.problems.iter().cloned());
                    format!("{}: FAIL on {} ({})", c.name, self.targets.join(" "), what.join(", "))
                }
                "pass" => format!("{}: pass", c.name),
                "inconclusive" => {
                    format!("{}: INCONCLUSIVE ({} not proved either way)", c.name, c.inconclusive().count())
                }
                _ => format!("{}: not checked ({})", c.name, c.error.as_deref().unwrap_or("?")),
            })
            .collect();
        format!("MIOpen {}: {}", self.miopen_version.as_deref().unwrap_or("?"), checks.join("; "))
    }

    /// The outcome for people, a few lines, each failure with what to do.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let version = self.miopen_version.as_deref().unwrap_or("of unknown version");
        let hip = self.hip_version.as_deref().map(|h| format!(", built with HIP {h}")).unwrap_or_default();
        s.push_str(&format!("MIOpen {version}{hip}: {}\n", self.library.display()));
        if let Some(e) = &self.error {
            s.push_str(&format!("  kernels not checked: {e}\n"));
            return s;
        }
        let unnamed =
            if self.unnamed > 0 { format!(" ({} without a recovered name)", self.unnamed) } else { String::new() };
        s.push_str(&format!(
            "  embedded: {} kernels, {} includes{unnamed}; kernel tree: {}\n",
            self.kernels,
            self.includes,
            self.tree.display()
        ));
        if let Some(c) = &self.compiler {
            s.push_str(&format!("  compiler: {} ({}, {})\n", c.clang.display(), c.from, c.version));
        }
        for c in &self.checks {
            let n = c.on_targets();
            let failed = c.failures().count();
            let unproved = c.inconclusive().count();
            let unproved = if unproved > 0 {
                format!(
                    "; {unproved} fail on the {CONTROL} control too (the check's sample values: not proved either way)"
                )
            } else {
                String::new()
            };
            let targets = self.targets.join(" ");
            let head = match c.status.as_str() {
                "pass" => format!("pass: {n} compiles for {targets}, none fails on them alone{unproved}"),
                "fail" => {
                    format!("FAIL: {failed} of {n} compiles for {targets} fail, and compile for {CONTROL}{unproved}")
                }
                "inconclusive" => format!(
                    "INCONCLUSIVE (not a pass): {n} compiles for {targets}, none fails on them alone, {} not proved either way",
                    c.inconclusive().count()
                ),
                _ => format!("NOT RUN: {}", c.error.as_deref().unwrap_or("?")),
            };
            s.push_str(&format!("  {} ({}): {head}\n", c.name, c.what));
            for a in &c.result.assumed {
                s.push_str(&format!("    assumed: {a}\n"));
            }
            for l in &c.left_out {
                s.push_str(&format!(
                    "    not passed: {l} (an audit links no code object: each compile stops before linking)\n"
                ));
            }
            // One line per kernel and target: the first failing variant's message.
            let mut seen = std::collections::BTreeSet::new();
            for f in c.failures() {
                if !seen.insert((f.kernel.clone(), f.target.clone())) {
                    continue;
                }
                let msg = f.message.iter().find(|l| l.contains("error")).or(f.message.first()).map(|l| l.trim());
                s.push_str(&format!("    FAILED {} {}: {}\n", f.target, f.kernel, msg.unwrap_or("no message")));
            }
            for p in &c.result.problems {
                s.push_str(&format!("    FAILED {p}\n"));
            }
            // The unproved, one line per kernel and target, when they decide the outcome.
            let mut seen = std::collections::BTreeSet::new();
            for f in c.inconclusive().filter(|_| c.status == "inconclusive") {
                if !seen.insert((f.kernel.clone(), f.target.clone())) {
                    continue;
                }
                let why = match (&f.detail, f.unproved()) {
                    (Some(d), true) => d.clone(),
                    _ => format!("fails on {CONTROL} too"),
                };
                s.push_str(&format!("    not proved {} {}: {why}\n", f.target, f.kernel));
            }
            if c.status == "fail" {
                s.push_str(&format!("    what to do: {}\n", remedy(&c.name)));
            }
            s.push_str(&format!("    log: {}\n", c.log.display()));
        }
        s
    }
}

/// What a user of a MIOpen that fails a check can do.
pub fn remedy(check: &str) -> &'static str {
    match check {
        "batchnorm" => "build MIOpen with the rocm-6.2 stack (its patch 0001 takes the LDS reduction on gfx101x: `rocmforge build pytorch --target gfx1010`); with this MIOpen, run batchnorm without it: `torch.backends.cudnn.enabled = False` makes PyTorch use its own batchnorm kernels",
        "sweep" => "build MIOpen with the rocm-6.2 stack, whose kernels pass this sweep for gfx101x (`rocmforge build pytorch --target gfx1010`); with this MIOpen, a failing kernel fails when a solver builds it: find the solver (`MIOPEN_LOG_LEVEL=6` names the kernel file it builds) and turn it off with its `MIOPEN_DEBUG_*` variable (MIOpen's docs/debugging list)",
        "legacy-ck" => "build MIOpen with the rocm-6.2 stack (its patch 0003 gives gfx101x a target macro); with this MIOpen, `MIOPEN_RNNWRW_REDUCTION=0` makes RNN backward add the bias with OpTensor instead of ReduceTensor's legacy-CK kernels (src/ocl/rnnocl.cpp ReducAddBias)",
        _ => "see the check's log",
    }
}

/// Whether `clang` targets AMDGPU (`-print-targets` lists amdgcn).
fn has_amdgpu(clang: &Path) -> bool {
    let mut c = Command::new(clang);
    c.arg("-print-targets");
    matches!(crate::process::bounded::bounded(&mut c, Duration::from_secs(30)), Ok((s, [out, _])) if s.success() && String::from_utf8_lossy(&out).contains("amdgcn"))
}

/// The compiler the checks use: the user's ROCm's (`{rocm}/llvm/bin/clang`, or
/// `{rocm}/lib/llvm/bin/clang` as the rocm-sdk wheels lay it out), then a distribution's clang
/// with the AMDGPU target (the newest `/usr/lib/llvm-N`), then the host's `clang`; the first
/// that targets AMDGPU and has an llvm-objdump beside it. `host` is the filesystem root
/// (tests point it elsewhere).
pub fn find_compiler(rocm: Option<&Path>, host: &Path) -> Result<Compiler, String> {
    let mut candidates: Vec<(PathBuf, String)> = Vec::new();
    if let Some(r) = rocm {
        for rel in ["llvm/bin/clang", "lib/llvm/bin/clang"] {
            candidates.push((r.join(rel), format!("the ROCm at {}", r.display())));
        }
    }
    let mut llvms: Vec<(u32, PathBuf)> = std::fs::read_dir(host.join("usr/lib"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            Some((n.strip_prefix("llvm-")?.parse().ok()?, e.path()))
        })
        .collect();
    llvms.sort_by_key(|l| std::cmp::Reverse(l.0));
    for (_, dir) in llvms {
        candidates.push((dir.join("bin/clang"), format!("a distribution's clang ({})", dir.display())));
    }
    if let Some(c) = crate::host::which("clang") {
        candidates.push((c, "the host's clang".into()));
    }
    let mut tried = Vec::new();
    for (clang, from) in candidates {
        if !clang.is_file() {
            continue;
        }
        let real = std::fs::canonicalize(&clang).unwrap_or_else(|_| clang.clone());
        let objdump = real.parent().map(|d| d.join("llvm-objdump")).filter(|p| p.is_file());
        if !has_amdgpu(&clang) {
            tried.push(format!("{} (no AMDGPU target)", clang.display()));
            continue;
        }
        let Some(objdump) = objdump else {
            tried.push(format!("{} (no llvm-objdump beside it)", clang.display()));
            continue;
        };
        let version = crate::host::tool_version(&clang).unwrap_or_default();
        let hip_root = rocm
            .into_iter()
            .map(Path::to_path_buf)
            .chain([host.join("usr")])
            .find(|r| r.join("include/hip/hip_runtime.h").is_file());
        return Ok(Compiler { clang, objdump, from, version, hip_root });
    }
    Err(format!(
        "no clang with the AMDGPU target and llvm-objdump was found{}: install one (Debian: `apt-get install -y clang-19 llvm-19`), or point --rocm-path at a ROCm with llvm/bin/clang",
        if tried.is_empty() { String::new() } else { format!(" ({})", tried.join("; ")) }
    ))
}

/// What an audit is asked, by `inspect`, `doctor --rocm-path` and `verify --python`.
#[derive(Debug, Clone)]
pub struct Settings {
    pub targets: Vec<String>,
    /// Where each library's kernel tree, checks and logs go: `<work>/<n>-<file name>/`.
    pub work: PathBuf,
    /// The user's ROCm (compiler, HIP headers), when one is known.
    pub rocm: Option<PathBuf>,
    /// The recipe tree holding the checks: [`CHECKS_RECIPE`]'s `[[check]]`s and their folders.
    pub checks: RecipeTree,
    /// The filesystem root the compiler is looked for under (`/`; tests point it elsewhere).
    pub host: PathBuf,
    /// A regex: the sweep compiles only the kernel files whose name it matches (`--only`),
    /// to bound a run (a whole library is some hundred compiles).
    pub sweep_only: Option<String>,
}

impl Settings {
    /// The audit of `library`, the `n`th of a run (its work folder `<work>/<n>-<file name>`).
    pub fn audit(&self, n: usize, library: &Path) -> Audit {
        let name = library.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        audit(&AuditRequest { library, settings: self, work: self.work.join(format!("{n}-{name}")) })
    }
}

/// The request of one audit.
pub struct AuditRequest<'a> {
    pub library: &'a Path,
    pub settings: &'a Settings,
    /// Where the kernel tree, the checks and their logs go (made anew).
    pub work: PathBuf,
}

/// The libMIOpen of an installed ROCm: `lib/`, `lib64/` or `lib/<multiarch>/` under `rocm`, the
/// file `libMIOpen.so` or its versioned names lead to (`None`: the installation has none).
pub fn installed_library(rocm: &Path) -> Option<PathBuf> {
    let mut dirs = vec![rocm.join("lib"), rocm.join("lib64")];
    dirs.extend(crate::installation::MULTIARCH.iter().map(|m| rocm.join("lib").join(m)));
    dirs.iter().find_map(|d| {
        let mut names: Vec<PathBuf> = std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| miopen::is_miopen_name(p) && p.is_file())
            .collect();
        // The real file, not a link to it, the longest name first (`libMIOpen.so.1.0`).
        names.sort_by_key(|p| (p.is_symlink(), std::cmp::Reverse(p.as_os_str().len())));
        names.into_iter().next()
    })
}

/// Reads the library's kernels, lays them out and runs the checks. Never fails: what could not
/// be done is in the audit's `error` (or a check's).
pub fn audit(req: &AuditRequest<'_>) -> Audit {
    let mut a = Audit {
        library: req.library.to_path_buf(),
        miopen_version: None,
        hip_version: None,
        targets: req.settings.targets.clone(),
        kernels: 0,
        includes: 0,
        unnamed: 0,
        tree: req.work.join("tree"),
        compiler: None,
        checks: Vec::new(),
        error: None,
    };
    let embedded = match miopen::read_embedded(req.library) {
        Ok(e) => e,
        Err(e) => {
            a.error = Some(format!("its embedded kernels cannot be read: {e}"));
            return a;
        }
    };
    a.miopen_version = embedded.miopen_version.clone();
    a.hip_version = embedded.hip_version.clone();
    a.includes = embedded.files.iter().filter(|f| f.include).count();
    a.kernels = embedded.files.len() - a.includes;
    a.unnamed = embedded.unnamed().count();
    if let Err(e) = miopen::write_tree(&embedded, req.library, &a.tree) {
        a.error = Some(format!("cannot write the kernel tree {}: {e}", a.tree.display()));
        return a;
    }
    let compiler = match find_compiler(req.settings.rocm.as_deref(), &req.settings.host) {
        Ok(c) => c,
        Err(e) => {
            a.error = Some(e);
            return a;
        }
    };
    let Some(python) = crate::host::which("python3") else {
        a.error = Some("no python3 on PATH to run the checks with".into());
        return a;
    };
    let declared = recipe_checks(&req.settings.checks);
    for (name, check, what) in CHECKS {
        let c = declared.as_ref().map_err(Clone::clone).and_then(|all| {
            all.iter().find(|c| c.name == check).ok_or_else(|| {
                format!("recipes/{}/{}.toml has no [[check]] `{check}`", CHECKS_RECIPE.0, CHECKS_RECIPE.1)
            })
        });
        a.checks.push(run_check(req, &a.tree, &compiler, &python, name, c, what));
    }
    a.compiler = Some(compiler);
    a
}

/// The `[[check]]`s of [`CHECKS_RECIPE`] in `tree`, with their files and helpers.
fn recipe_checks(tree: &RecipeTree) -> Result<Vec<PostCheck>, String> {
    let (stack, recipe) = CHECKS_RECIPE;
    let loaded = crate::recipe::load_stack(tree, stack).map_err(|d| {
        let first = d.to_string().lines().next().unwrap_or_default().to_string();
        format!("the checks' stack `{stack}` does not load ({first}; {} problems: `rocmforge recipes check`)", d.len())
    })?;
    loaded
        .recipes
        .get(recipe)
        .map(|r| r.checks.clone())
        .ok_or_else(|| format!("stack `{stack}` has no recipe `{recipe}`"))
}

/// The check's files in `base`, and its helpers beside it, as the source build lays them out.
fn lay_out(c: &PostCheck, base: &Path) -> Result<(), String> {
    if c.files.is_empty() {
        return Err(format!("the recipe's [[check]] `{}` names no `files`", c.name));
    }
    let folders = std::iter::once((base.to_path_buf(), &c.files)).chain(c.helpers_beside(base));
    for (at, files) in folders {
        crate::fsutil::write_fresh(&at, files).map_err(|(what, path, e)| {
            format!("cannot write the check into {}: {what} {}: {e}", at.display(), path.display())
        })?;
    }
    Ok(())
}

/// The argv of a check's step line (one command, as `shlex` splits it) with its placeholders
/// filled by `fill`, and what was left out: [`LEFT_OUT`] with the option before it. A line that
/// is not one command (`&&`, a pipe, a redirection) or a placeholder `fill` refuses is an error.
pub fn step_command(
    step: &str,
    fill: impl Fn(&str) -> Result<String, String>,
) -> Result<(Vec<String>, Vec<String>), String> {
    use crate::recipe::placeholders::{pieces, Piece};
    let words = shlex::split(step).ok_or_else(|| format!("the step `{step}` does not split into words"))?;
    let (mut argv, mut left_out) = (Vec::<String>::new(), Vec::new());
    for w in &words {
        if ["&&", "||", ";", "|", ">", ">>", "<", "&"].contains(&w.as_str()) {
            return Err(format!("the step `{step}` is more than one command (`{w}`): an audit runs one"));
        }
        let ps = pieces(w);
        if ps.iter().any(|p| matches!(p, Piece::Name(n) if *n == LEFT_OUT)) {
            match argv.last() {
                Some(o) if o.starts_with("--") => left_out.push(format!("{} {w}", argv.pop().unwrap_or_default())),
                _ => left_out.push(w.clone()),
            }
            continue;
        }
        let mut word = String::new();
        for p in ps {
            match p {
                Piece::Text(t) => word.push_str(t),
                Piece::Name(n) => word.push_str(&fill(n)?),
                Piece::Unclosed(t) => return Err(format!("the step `{step}` has a placeholder cut short: `{t}`")),
            }
        }
        argv.push(word);
    }
    if argv.is_empty() {
        return Err("the step is empty".into());
    }
    Ok((argv, left_out))
}

/// An audit's value of a placeholder of a check's step: `{src}` the kernel tree, `{targets}`
/// the targets and the control, `{rocm_llvm}` the LLVM root of the compiler found
/// (`<root>/bin/clang`), `{rocm}` and `{root:<recipe>}` the root holding HIP's headers (the
/// recipe's `{root:clr}`: the checks take `include/hip` from it), `{jobs}` this machine's cores.
fn placeholder(
    req: &AuditRequest<'_>,
    tree: &Path,
    compiler: &Compiler,
    targets: &str,
    name: &str,
) -> Result<String, String> {
    let p = |p: &Path| p.display().to_string();
    match name {
        "src" => Ok(p(tree)),
        "targets" => Ok(targets.to_string()),
        "jobs" => Ok(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).to_string()),
        "rocm_llvm" => compiler
            .clang
            .parent()
            .filter(|b| b.file_name().is_some_and(|n| n == "bin") && compiler.clang.file_name().is_some_and(|n| n == "clang"))
            .and_then(Path::parent)
            .map(p)
            .ok_or_else(|| format!("the compiler {} is not `<llvm>/bin/clang`, which the step's `{{rocm_llvm}}/bin/clang` names", compiler.clang.display())),
        n if n == "rocm" || n.starts_with("root:") => compiler.hip_root.as_deref().map(p).ok_or_else(|| {
            format!(
                "no include/hip/hip_runtime.h for the HIP kernels (looked in {}/usr{}): install HIP's headers (Debian: `apt-get install -y libamdhip64-dev`) or give --rocm-path",
                req.settings.host.display().to_string().trim_end_matches('/'),
                req.settings.rocm.as_ref().map(|r| format!(" and {}", r.display())).unwrap_or_default()
            )
        }),
        other => Err(format!("the step names `{{{other}}}`, which an audit has no value for")),
    }
}

fn run_check(
    req: &AuditRequest<'_>,
    tree: &Path,
    compiler: &Compiler,
    python: &Path,
    name: &str,
    check: Result<&PostCheck, String>,
    what: &str,
) -> CheckOutcome {
    let base = req.work.join(name);
    let log = req.work.join(format!("{name}.log"));
    let json = req.work.join(format!("{name}.json"));
    let mut out = CheckOutcome {
        name: name.into(),
        what: what.into(),
        status: "error".into(),
        error: None,
        result: CheckJson::default(),
        left_out: Vec::new(),
        log: log.clone(),
    };
    let mut targets = req.settings.targets.clone();
    if !targets.iter().any(|t| t == CONTROL) {
        targets.push(CONTROL.into());
    }
    let targets = targets.join(";");
    let argv = check.and_then(|c| {
        lay_out(c, &base)?;
        let [step] = c.steps.as_slice() else {
            return Err(format!("the recipe's [[check]] `{}` has {} steps: an audit runs one", c.name, c.steps.len()));
        };
        step_command(step, |n| placeholder(req, tree, compiler, &targets, n))
            .map_err(|e| format!("[[check]] `{}`: {e}", c.name))
    });
    let argv = match argv {
        Ok((a, left_out)) => {
            out.left_out = left_out;
            a
        }
        Err(e) => {
            out.error = Some(e);
            return out;
        }
    };
    // The step's `python3` is the one the audit found; the rest is the recipe's, then the
    // results file every check writes, and the sweep's subset when one is asked.
    let program = if argv[0] == "python3" { python.to_path_buf() } else { PathBuf::from(&argv[0]) };
    let mut args: Vec<String> = argv[1..].to_vec();
    args.extend(["--json".to_string(), json.display().to_string()]);
    if let (Some(only), "sweep") = (&req.settings.sweep_only, name) {
        args.extend(["--only".to_string(), only.clone()]);
    }
    let shown = format!(
        "{} {}",
        program.display(),
        shlex::try_join(args.iter().map(String::as_str)).unwrap_or_else(|_| args.join(" "))
    );
    // The output goes to the log, not a pipe: a whole library's sweep prints far more than a
    // bounded read takes (a pipe closed on it ended the first by-hand run, BrokenPipeError).
    if let Err(e) = std::fs::write(&log, format!("$ (cd {} && {shown})\n", base.display())) {
        out.error = Some(format!("cannot write {}: {e}", log.display()));
        return out;
    }
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "log=$1; shift; exec \"$@\" >>\"$log\" 2>&1", "sh"])
        .arg(&log)
        .arg(&program)
        .args(&args)
        .current_dir(&base);
    let status = match crate::process::bounded::bounded(&mut cmd, CHECK_TIMEOUT) {
        Ok((status, _)) => status,
        Err(e) => {
            out.error = Some(format!("`{shown}` {e}"));
            return out;
        }
    };
    let text = std::fs::read(&log).unwrap_or_default();
    match std::fs::read_to_string(&json).ok().and_then(|j| serde_json::from_str::<CheckJson>(&j).ok()) {
        Some(r) => {
            out.result = r;
            out.status = out.verdict().into();
        }
        None => {
            let text = String::from_utf8_lossy(&text);
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            out.error = Some(format!(
                "`{shown}` ended ({}) without its results: {}",
                crate::process::describe_status(status),
                last.trim()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check's outcome of `compiles`, as the audit records it (no error, nothing left out).
    fn outcome(name: &str, status: &str, compiles: Vec<Compile>) -> CheckOutcome {
        CheckOutcome {
            name: name.into(),
            what: "w".into(),
            status: status.into(),
            error: None,
            left_out: vec![],
            result: CheckJson { compiles, ..Default::default() },
            log: PathBuf::new(),
        }
    }

    fn compile(target: &str, kernel: &str, ok: bool) -> Compile {
        Compile {
            target: target.into(),
            kernel: kernel.into(),
            variant: serde_json::json!(1),
            ok,
            message: vec![],
            status: None,
            detail: None,
        }
    }

    #[test]
    fn a_failure_on_the_control_too_proves_nothing_and_only_the_targets_alone_count() {
        let c = outcome(
            "batchnorm",
            "fail",
            vec![
                compile("gfx1010", "a.cl", false),
                compile(CONTROL, "a.cl", true),
                compile("gfx1010", "b.cl", false),
                compile(CONTROL, "b.cl", false),
                compile("gfx1010", "c.cl", true),
                compile(CONTROL, "c.cl", true),
            ],
        );
        assert_eq!(c.failures().map(|f| f.kernel.as_str()).collect::<Vec<_>>(), ["a.cl"]);
        assert_eq!(c.inconclusive().map(|f| f.kernel.as_str()).collect::<Vec<_>>(), ["b.cl"]);
        assert_eq!(c.on_targets(), 3);
        assert_eq!(c.verdict(), "fail");
    }

    /// A check whose only target failures fail on the control too, or that the sweep marks
    /// `unverified`, is inconclusive, and reads so, never as a pass.
    #[test]
    fn an_unproved_compile_makes_a_check_inconclusive_not_a_pass() {
        let mut unverified = compile("gfx1010", "u.s", false);
        unverified.status = Some("unverified".into());
        unverified.detail = Some("fails on gfx1010 alone, but the rocm-6.2 host code never builds it there".into());
        let mut c = outcome(
            "sweep",
            "",
            vec![
                compile("gfx1010", "b.cl", false),
                compile(CONTROL, "b.cl", false),
                compile("gfx1010", "c.cl", true),
                compile(CONTROL, "c.cl", true),
                unverified,
                compile(CONTROL, "u.s", true),
            ],
        );
        assert_eq!(c.failures().count(), 0);
        assert_eq!(c.inconclusive().map(|f| f.kernel.as_str()).collect::<Vec<_>>(), ["b.cl", "u.s"]);
        c.status = c.verdict().into();
        assert_eq!(c.status, "inconclusive");
        let a = Audit {
            library: "/l/libMIOpen.so".into(),
            miopen_version: Some("3.5.1".into()),
            hip_version: None,
            targets: vec!["gfx1010".into()],
            kernels: 3,
            includes: 0,
            unnamed: 0,
            tree: PathBuf::new(),
            compiler: None,
            checks: vec![c.clone()],
            error: None,
        };
        let text = a.render();
        assert!(text.contains("  sweep (w): INCONCLUSIVE (not a pass): 3 compiles for gfx1010, none fails on them alone, 2 not proved either way\n"), "{text}");
        assert!(text.contains("    not proved gfx1010 b.cl: fails on gfx900 too\n"), "{text}");
        assert!(
            text.contains("    not proved gfx1010 u.s: fails on gfx1010 alone, but the rocm-6.2 host code"),
            "{text}"
        );
        assert!(!text.contains("pass:"), "{text}");
        assert_eq!(a.summary(), "MIOpen 3.5.1: sweep: INCONCLUSIVE (2 not proved either way)");
        assert!(a.not_run().is_empty());
        c.result.compiles.retain(|x| x.kernel == "c.cl");
        assert_eq!(c.verdict(), "pass");
    }

    /// The files under `dir`, by path relative to it.
    fn files_in(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
        crate::fsutil::list_tree(dir)
            .unwrap()
            .into_iter()
            .filter(|e| matches!(e.kind, crate::fsutil::EntryKind::File { .. }))
            .map(|e| (e.path.clone(), std::fs::read(dir.join(&e.path)).unwrap()))
            .collect()
    }

    /// The audit runs the checks the recipe declares, in the folders its `[[check]]`s name
    /// (`files`, `helpers`), read here from the recipe's own text: an audit that took another
    /// folder (its own list of them) lays out other files, or others beside them.
    #[test]
    fn the_audit_lays_out_the_folders_the_recipes_checks_name_and_nothing_else() {
        let tree = RecipeTree::embedded();
        let (stack, recipe) = CHECKS_RECIPE;
        let text = std::str::from_utf8(tree.get(&format!("recipes/{stack}/{recipe}.toml")).unwrap()).unwrap();
        let declared: toml::Value = toml::from_str(text).unwrap();
        let declared = declared["check"].as_array().unwrap();
        let folder = |dir: &str| -> std::collections::BTreeMap<String, Vec<u8>> {
            tree.files_under(&format!("recipes/checks/{dir}/")).map(|(r, b)| (r.to_string(), b.to_vec())).collect()
        };
        let checks = recipe_checks(&tree).unwrap();
        for (name, check, _) in CHECKS {
            let d = declared
                .iter()
                .find(|c| c["name"].as_str() == Some(check))
                .unwrap_or_else(|| panic!("{recipe}.toml declares no [[check]] `{check}`"));
            let (files, helpers) = (d["files"].as_str().unwrap(), d["helpers"].as_str().unwrap());
            let work = tempfile::tempdir().unwrap();
            let base = work.path().join(name);
            lay_out(checks.iter().find(|c| c.name == check).unwrap(), &base).unwrap();
            let (want_files, want_helpers) = (folder(files), folder(helpers));
            // The script the step runs (`python3 check.py ...`, `python3 sweep.py ...`) is among them.
            let script = d["steps"][0].as_str().unwrap().split_whitespace().nth(1).unwrap();
            assert!(
                want_files.contains_key(script) && !want_helpers.is_empty(),
                "{check}: {script}, {files}, {helpers}"
            );
            assert_eq!(files_in(&base), want_files, "{check}: the files of recipes/checks/{files}/");
            assert_eq!(files_in(&work.path().join(helpers)), want_helpers, "{check}: recipes/checks/{helpers}/");
            let mut laid: Vec<String> = std::fs::read_dir(work.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            laid.sort();
            let mut expected = vec![name.to_string(), helpers.to_string()];
            expected.sort();
            assert_eq!(laid, expected, "{check}");
        }
    }

    /// The recipe's own step lines, filled with what an audit found: each check's script with
    /// the recipe's arguments as they are (the sweep's exclusions and known list among them),
    /// the compiler as `{rocm_llvm}/bin/clang`, HIP's root for `{root:clr}`, and
    /// `--device-libs {rocm_device_libs}` left out and said; a line that is more than one
    /// command, or names a placeholder without a value, is refused.
    #[test]
    fn the_recipes_step_lines_are_filled_with_what_the_audit_found() {
        let checks = recipe_checks(&RecipeTree::embedded()).unwrap();
        let fill = |n: &str| -> Result<String, String> {
            match n {
                "src" => Ok("/t".into()),
                "rocm_llvm" => Ok("/llvm".into()),
                "targets" => Ok("gfx1010;gfx900".into()),
                "root:clr" => Ok("/hip".into()),
                "jobs" => Ok("2".into()),
                other => Err(format!("no value for {other}")),
            }
        };
        let mut argvs = std::collections::BTreeMap::new();
        for (name, check, _) in CHECKS {
            let c = checks.iter().find(|c| c.name == check).unwrap();
            assert_eq!(c.steps.len(), 1, "{check}");
            let (argv, left_out) = step_command(&c.steps[0], fill).unwrap();
            assert_eq!(left_out, ["--device-libs {rocm_device_libs}"], "{check}");
            assert_eq!(argv[0], "python3", "{check}");
            let pairs: Vec<(&str, &str)> = argv.windows(2).map(|w| (w[0].as_str(), w[1].as_str())).collect();
            for want in [
                ("--src", "/t"),
                ("--clang", "/llvm/bin/clang"),
                ("--targets", "gfx1010;gfx900"),
                ("--work", "kernels"),
            ] {
                assert!(pairs.contains(&want), "{check}: {want:?} in {argv:?}");
            }
            assert!(!argv.iter().any(|a| a.contains('{') || a == "--device-libs"), "{check}: {argv:?}");
            argvs.insert(name, argv);
        }
        assert!(argvs["legacy-ck"].windows(2).any(|w| w == ["--rocm", "/hip"]), "{argvs:?}");
        let sweep = &argvs["sweep"];
        for want in [
            ["--rocm-path", "/hip"],
            ["--exclusions", "exclusions-rocm-6.2.tsv"],
            ["--known", "known-rocm-6.2.txt"],
            ["--jobs", "2"],
        ] {
            assert!(sweep.windows(2).any(|w| w == want), "{want:?} in {sweep:?}");
        }
        assert_eq!(argvs["sweep"][1], "sweep.py");
        let err = step_command("python3 check.py --src {src} && rm -rf /", fill).unwrap_err();
        assert!(err.contains("more than one command (`&&`)"), "{err}");
        let err = step_command("python3 check.py --work {build}", fill).unwrap_err();
        assert!(err.contains("no value for build"), "{err}");
    }

    #[test]
    fn the_installed_library_is_the_real_file_in_a_lib_folder() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(installed_library(d.path()), None);
        let lib = d.path().join("lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libMIOpen.so.1.0"), b"").unwrap();
        std::os::unix::fs::symlink("libMIOpen.so.1.0", lib.join("libMIOpen.so.1")).unwrap();
        std::os::unix::fs::symlink("libMIOpen.so.1", lib.join("libMIOpen.so")).unwrap();
        std::fs::write(lib.join("libMIOpen-other.so"), b"").unwrap();
        assert_eq!(installed_library(d.path()), Some(lib.join("libMIOpen.so.1.0")));
    }
}
