//! A torch rocmforge did not install (`verify --python PY` without `--stack`): which torch and
//! HIP the Python imports, the GPU targets that torch was built for, whether the card's target
//! is among them (and what `HSA_OVERRIDE_GFX_VERSION` in the environment changes), the GPU code
//! the libraries it loaded carry, and MIOpen's version. [`PROBE_SCRIPT`] imports torch in a
//! process of its own (under the run's timeout) and prints what it found; the libraries' code is
//! read here, with [`crate::offload`]'s reader (AMD's `.kpack` form included).
//!
//! The targets come from `torch._C._cuda_getArchFlags()` when the torch has it: the list the
//! build was compiled for (`torch.cuda.get_arch_list()` is empty without a visible device).
//! Otherwise from the device code of torch's own libraries (`libtorch_hip.so` and the rest, in
//! its directory or wherever a distribution put them). A torch without HIP (a CPU or CUDA build) has no GPU code for an AMD card:
//! that is said, and nothing is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::process::{Job, Tracked};
use crate::recipe::GFX_OVERRIDE_VAR;

/// The script that imports torch and says what it found.
pub const PROBE_SCRIPT: &str = include_str!("probe.py");
const TAG: &str = "ROCMFORGE-PROBE ";

/// What the probe script printed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Printed {
    pub python: Option<String>,
    pub python_version: Option<String>,
    pub torch: Option<String>,
    pub torch_dir: Option<PathBuf>,
    pub hip: Option<String>,
    pub cuda: Option<String>,
    pub arch_flags: Option<Vec<String>>,
    pub arch_flags_error: Option<String>,
    #[serde(default)]
    pub libraries: Vec<PathBuf>,
    pub miopen: Option<String>,
    pub miopen_library: Option<PathBuf>,
    pub miopen_error: Option<String>,
    #[serde(rename = "override")]
    pub gfx_override: Option<String>,
    pub error: Option<String>,
}

/// The device code of one loaded library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibraryCode {
    pub library: PathBuf,
    pub targets: Vec<String>,
    /// The `.kpack` archives it was found in (AMD's multi-arch form), if so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kpack: Vec<String>,
}

/// What `verify --python` reports about the torch, before the cases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TorchFound {
    #[serde(flatten)]
    pub printed: Printed,
    /// The processors the torch was built for (`gfx1010`), sorted; empty when unknown or none.
    pub archs: Vec<String>,
    /// Where `archs` comes from.
    pub archs_from: String,
    /// The loaded libraries that carry device code (read only for a torch with HIP).
    pub code: Vec<LibraryCode>,
    /// Libraries that could not be read, with why.
    pub unreadable: Vec<String>,
    /// Whether the card's target is among `archs`, and what the override changes: for people.
    pub verdict: String,
}

impl TorchFound {
    /// `2.9.1+rocm7.14 (/usr/lib/python3/dist-packages/torch)`, or why there is none.
    pub fn torch_line(&self) -> String {
        match (&self.printed.torch, &self.printed.error) {
            (Some(t), _) => format!(
                "{t} ({})",
                self.printed.torch_dir.as_deref().map(|d| d.display().to_string()).unwrap_or_default()
            ),
            (None, Some(e)) => format!("none: {e}"),
            (None, None) => "none".into(),
        }
    }

    /// HIP's version, or what this torch was built for instead.
    pub fn hip_line(&self) -> String {
        match (&self.printed.hip, &self.printed.cuda, &self.printed.torch) {
            (Some(h), _, _) => h.clone(),
            (None, _, None) => "unknown (torch did not import)".into(),
            (None, Some(c), _) => {
                format!("none: a CUDA {c} build (torch.version.hip is None): no GPU code for an AMD card")
            }
            (None, None, _) => "none: a CPU-only build (torch.version.hip is None)".into(),
        }
    }

    pub fn archs_line(&self) -> String {
        if self.archs.is_empty() && self.printed.arch_flags.as_ref().is_some_and(|f| !f.is_empty()) {
            format!("no AMD GPU target ({})", self.archs_from)
        } else if self.archs.is_empty() {
            format!("none known ({})", self.archs_from)
        } else {
            format!("{} (from {})", self.archs.join(" "), self.archs_from)
        }
    }

    /// `libtorch_hip.so: gfx1010 gfx1030 (kpack); libamdhip64.so.7: none`; `none read` for a
    /// torch without HIP.
    pub fn code_line(&self) -> String {
        if self.printed.hip.is_none() {
            return "not read (no HIP)".into();
        }
        let mut parts: Vec<String> = self
            .code
            .iter()
            .map(|c| {
                let name = c.library.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let kpack = if c.kpack.is_empty() { "" } else { " (kpack)" };
                format!("{name}: {}{kpack}", c.targets.join(" "))
            })
            .collect();
        if parts.is_empty() {
            parts.push("none in the loaded libraries".into());
        }
        parts.extend(self.unreadable.iter().map(|u| format!("unreadable: {u}")));
        parts.join("; ")
    }

    pub fn miopen_line(&self) -> String {
        let lib = self.printed.miopen_library.as_deref().map(|p| p.display().to_string());
        match (&self.printed.miopen, lib, &self.printed.miopen_error) {
            (Some(v), Some(l), _) => format!("{v} (miopenGetVersion, {l})"),
            (None, Some(l), Some(e)) => format!("unknown ({l}: {e})"),
            (None, Some(l), None) => format!("unknown ({l})"),
            _ => "not loaded by `import torch`".into(),
        }
    }
}

/// Runs the probe script with `python` in `dir` under `timeout`; the error says what went wrong.
pub fn run(python: &Path, env: &BTreeMap<String, String>, dir: &Path, timeout: Duration) -> Result<Printed, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let script = dir.join("probe.py");
    crate::fsutil::write_atomic(&script, PROBE_SCRIPT.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    let (out_path, err_path) = (dir.join("probe.out"), dir.join("probe.err"));
    let file = |p: &Path| std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()));
    let mut job = Job::new(python, &[script.as_os_str()], true);
    job.command.env_clear().envs(env).current_dir(dir).stdout(file(&out_path)?).stderr(file(&err_path)?);
    let mut child = job
        .start(Some(Tracked::new_token("verify-probe-")))
        .map_err(|e| format!("cannot run `{}`: {e}", python.display()))?;
    let status = child
        .wait_until(crate::process::deadline_after(timeout))
        .map_err(|e| format!("cannot wait for `{}`: {e}", python.display()))?;
    child.stop(status.is_none());
    if status.is_none() {
        return Err(format!("`{} probe.py` (import torch) did not end within {timeout:?}", python.display()));
    }
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    match stdout.lines().rev().find_map(|l| l.strip_prefix(TAG)) {
        Some(json) => {
            serde_json::from_str(json.trim()).map_err(|e| format!("the probe's line is not what it writes: {e}"))
        }
        None => Err(format!(
            "`{} probe.py` printed no {} line ({}): {}",
            python.display(),
            TAG.trim(),
            status.map(|s| s.to_string()).unwrap_or_default(),
            stderr.lines().chain(stdout.lines()).rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim()
        )),
    }
}

/// Whether `path` is one of torch's own libraries: in its directory, or named as they are
/// (`libtorch_hip.so`, `libc10_hip.so`: a distribution may put them in its library directory).
fn is_torchs(path: &Path, torch_dir: Option<&Path>) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    torch_dir.is_some_and(|d| path.starts_with(d)) || name.starts_with("libtorch") || name.starts_with("libc10")
}

/// Whether the device code of library `path` is read: torch's own libraries and ROCm's (by
/// name), where a HIP torch's device code lives.
fn worth_reading(path: &Path, torch_dir: Option<&Path>) -> bool {
    const ROCM: &[&str] = &[
        "libamdhip64",
        "libMIOpen",
        "librocblas",
        "libhipblas",
        "libhipblaslt",
        "librccl",
        "librocsolver",
        "libhipsolver",
        "librocsparse",
        "libhipsparse",
        "librocfft",
        "libhipfft",
        "librocrand",
        "libhiprand",
        "libaotriton",
        "libroctx",
        "libroctracer",
        "libhiprtc",
    ];
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    is_torchs(path, torch_dir) || ROCM.iter().any(|r| name.starts_with(&format!("{r}.")))
}

/// Reads what the torch carries and says whether the card (`card`: its gfx name, when one was
/// found) runs it.
pub fn assess(printed: Printed, card: Option<&str>) -> TorchFound {
    let torch_dir = printed.torch_dir.clone();
    let mut code = Vec::new();
    let mut unreadable = Vec::new();
    if printed.hip.is_some() {
        let paths: Vec<PathBuf> =
            printed.libraries.iter().filter(|p| worth_reading(p, torch_dir.as_deref())).cloned().collect();
        let mut files = Vec::new();
        for p in &paths {
            let found = crate::offload::inspect_path(p);
            files.extend(found.files);
            unreadable.extend(found.errors.iter().map(|e| e.to_string()));
        }
        // Archives on disk are looked for only in the environment torch lies in (its
        // site-packages), where the device wheels install them.
        let roots: Vec<PathBuf> = torch_dir.iter().filter_map(|d| d.parent()).map(Path::to_path_buf).collect();
        unreadable.extend(crate::offload::follow_markers(&mut files, &roots).iter().map(|e| e.to_string()));
        for f in files {
            if !f.code.is_empty() {
                let targets: Vec<String> = f.processors().into_iter().map(str::to_string).collect();
                let kpack = f.kpack.map(|k| k.archives).unwrap_or_default();
                code.push(LibraryCode { library: PathBuf::from(f.path), targets, kpack });
            }
        }
    }
    // A HIP torch whose list names no gfx target (`None` or `""` from a build that did not set
    // it) is read from its libraries' code, like one without the function.
    let gfx_flags =
        printed.arch_flags.as_ref().filter(|f| printed.hip.is_none() || f.iter().any(|f| f.starts_with("gfx")));
    let (archs, archs_from) = match (gfx_flags, &printed.hip) {
        (Some(flags), _) => {
            let mut a: Vec<String> = flags
                .iter()
                .filter(|f| f.starts_with("gfx"))
                .map(|f| crate::offload::processor(f).to_string())
                .collect();
            a.sort_by_key(|t| (t.len(), t.clone()));
            a.dedup();
            let all = flags.join(" ");
            (a, format!("torch._C._cuda_getArchFlags(): {}", if all.is_empty() { "empty" } else { &all }))
        }
        (None, None) => (Vec::new(), "no HIP: no torch._C._cuda_getArchFlags() list to read either".into()),
        (None, Some(_)) => {
            let mut a: Vec<String> = code
                .iter()
                .filter(|c| is_torchs(&c.library, torch_dir.as_deref()))
                .flat_map(|c| c.targets.clone())
                .collect();
            a.sort_by_key(|t| (t.len(), t.clone()));
            a.dedup();
            let why = if printed.arch_flags.is_some() {
                "torch._C._cuda_getArchFlags() names no gfx target"
            } else {
                "no torch._C._cuda_getArchFlags()"
            };
            (a, format!("the device code of torch's own libraries ({why})"))
        }
    };
    let verdict = verdict(&printed, &archs, card);
    TorchFound { printed, archs, archs_from, code, unreadable, verdict }
}

fn verdict(p: &Printed, archs: &[String], card: Option<&str>) -> String {
    if p.torch.is_none() {
        return "no torch imported: nothing to run".into();
    }
    if p.hip.is_none() {
        return "this torch has no HIP: it cannot use an AMD card (in CPU mode the cases run on the CPU)".into();
    }
    let Some(card) = card else {
        return "no AMD card found (KFD topology, PCI): nothing to compare the targets with".into();
    };
    let has = |t: &str| archs.iter().any(|a| a == t);
    let own = if archs.is_empty() {
        format!("the targets it was built for are unknown, so whether it carries {card} code is too")
    } else if has(card) {
        format!("it carries {card} code: the card runs its own")
    } else {
        format!("it carries no {card} code")
    };
    match p.gfx_override.as_deref().map(|v| (v, crate::target::gfx_of_dotted_version(v))) {
        None if !archs.is_empty() && !has(card) => {
            let major = &card[..card.len().saturating_sub(2)];
            match archs.iter().find(|a| a.len() == card.len() && a.starts_with(major)) {
                Some(same) => format!(
                    "{own}, and no {GFX_OVERRIDE_VAR} is set: expect hipErrorNoBinaryForGpu; it carries {same} of the same generation, which {GFX_OVERRIDE_VAR}={}.{}.{} would run the card as",
                    &same[3..same.len() - 2],
                    u32::from_str_radix(&same[same.len() - 2..same.len() - 1], 16).unwrap_or(0),
                    u32::from_str_radix(&same[same.len() - 1..], 16).unwrap_or(0)
                ),
                None => format!("{own}, nor any of its generation: expect hipErrorNoBinaryForGpu"),
            }
        }
        None => own,
        Some((v, None)) => format!(
            "{own}; {GFX_OVERRIDE_VAR}={v} in the environment is no version the runtime reads (major.minor.stepping)"
        ),
        Some((v, Some(t))) if t == card => format!("{own}; {GFX_OVERRIDE_VAR}={v} names the card's own target"),
        Some((v, Some(t))) => {
            let carried = if archs.is_empty() {
                "unknown whether it carries that".to_string()
            } else if has(&t) {
                "which it carries".to_string()
            } else {
                "which it does not carry either: expect hipErrorNoBinaryForGpu".to_string()
            };
            let instead = if has(card) { format!(" instead of its own {card} code") } else { String::new() };
            format!("{own}; {GFX_OVERRIDE_VAR}={v} in the environment runs the card as {t}{instead}, {carried}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(hip: Option<&str>, ov: Option<&str>) -> Printed {
        Printed {
            torch: Some("2.9.1".into()),
            hip: hip.map(str::to_string),
            gfx_override: ov.map(str::to_string),
            ..Printed::default()
        }
    }

    /// A distribution may put torch's libraries in its library directory (Debian's and Ubuntu's
    /// python3-torch-rocm); they are read as torch's, and ROCm's by name; others are not.
    #[test]
    fn torchs_and_rocms_libraries_are_read_wherever_they_lie() {
        let torch = Path::new("/usr/lib/python3/dist-packages/torch");
        for lib in [
            "/usr/lib/python3/dist-packages/torch/lib/libtorch_hip.so",
            "/usr/lib/x86_64-linux-gnu/libtorch_hip.so.2.9",
            "/usr/lib/x86_64-linux-gnu/libc10_hip.so",
            "/opt/rocm/lib/libMIOpen.so.1",
            "/usr/lib/x86_64-linux-gnu/libamdhip64.so.6",
        ] {
            assert!(worth_reading(Path::new(lib), Some(torch)), "{lib}");
        }
        for lib in ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/lib/x86_64-linux-gnu/libamdhip64x.so"] {
            assert!(!worth_reading(Path::new(lib), Some(torch)), "{lib}");
        }
    }

    /// A HIP torch whose `_cuda_getArchFlags()` gives nothing (`None`, `""`) is read from its
    /// libraries' code, as one without the function is, not taken as built for no target.
    #[test]
    fn an_empty_arch_list_of_a_hip_torch_falls_back_to_its_libraries_code() {
        let p = Printed { arch_flags: Some(Vec::new()), ..printed(Some("7.1"), None) };
        let found = assess(p, Some("gfx1010"));
        assert_eq!(
            found.archs_from,
            "the device code of torch's own libraries (torch._C._cuda_getArchFlags() names no gfx target)"
        );
        // A CUDA build's list is still its own (no gfx target in it).
        let p = Printed { arch_flags: Some(vec!["sm_80".into()]), ..printed(None, None) };
        assert!(assess(p, Some("gfx1010")).archs_from.starts_with("torch._C._cuda_getArchFlags(): sm_80"));
    }

    #[test]
    fn the_override_and_the_archs_decide_what_the_card_runs() {
        let archs = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let v = verdict(&printed(Some("7.1"), None), &archs(&["gfx1010", "gfx1030"]), Some("gfx1010"));
        assert_eq!(v, "it carries gfx1010 code: the card runs its own");
        let v = verdict(&printed(Some("7.1"), None), &archs(&["gfx900", "gfx1030"]), Some("gfx1010"));
        assert!(
            v.contains("expect hipErrorNoBinaryForGpu") && v.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0 would run"),
            "{v}"
        );
        let v = verdict(&printed(Some("7.1"), Some("10.3.0")), &archs(&["gfx1030"]), Some("gfx1010"));
        assert!(v.ends_with("runs the card as gfx1030, which it carries"), "{v}");
        let v = verdict(&printed(Some("7.1"), Some("10.3.0")), &archs(&["gfx1010", "gfx1030"]), Some("gfx1010"));
        assert!(v.contains("as gfx1030 instead of its own gfx1010 code"), "{v}");
        let v = verdict(&printed(Some("7.1"), Some("10.3.0")), &archs(&["gfx900"]), Some("gfx1010"));
        assert!(v.ends_with("which it does not carry either: expect hipErrorNoBinaryForGpu"), "{v}");
        assert!(verdict(&printed(None, None), &[], Some("gfx1010")).contains("has no HIP"));
        assert!(verdict(&printed(Some("7.1"), None), &archs(&["gfx1010"]), None).contains("no AMD card found"));
    }
}
