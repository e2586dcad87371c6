//! Which GPU code a binary stack's wheels carry, and so how a card runs them. PyTorch's own ROCm
//! wheels were built for gfx900/906/908/90a/1030 and later lists, never gfx1010; RDNA1 owners
//! ran them as a gfx1030 with `HSA_OVERRIDE_GFX_VERSION=10.3.0`, and without it got
//! `hipErrorNoBinaryForGpu`. So the wheels decide, not the stack's author: when a prebuilt
//! wheel is built (fetched), the GPU targets its libraries carry are read in memory
//! ([`crate::offload`]'s reader; AMD's multi-arch wheels keep it in `.kpack` archives of their
//! device wheels, which a host library's marker names: [`crate::offload::kpack`]) and recorded beside it in the artifact ([`RECORD_DIR`]). A
//! requested target every package carries (in one of its wheels: AMD splits a package's device
//! code into a wheel per target) runs natively; one they do not is run as a target they do carry
//! by a profile whose `HSA_OVERRIDE_GFX_VERSION` names it (same gfx major: gfx101x as gfx1030),
//! and that profile is the one `env` and `verify` activate for the card; with neither, the
//! build fails naming what the wheels carry. Native stacks never take this road.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::recipe::{Profile, Stack, GFX_OVERRIDE_VAR};
use crate::target::TargetSet;

/// Where the record of a recipe's wheels lies in its artifact (and so in the prefix):
/// `<RECORD_DIR>/<recipe>.json`.
pub const RECORD_DIR: &str = "share/rocmforge/gpu-targets";

/// The GPU code one wheel carries (wheels without any are not recorded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WheelCode {
    pub wheel: String,
    /// Processors (`gfx1030`), sorted.
    pub targets: Vec<String>,
}

/// Reads the GPU targets of every library, code object and `.kpack` archive in `wheels`, in
/// memory. A host library whose device code AMD's multi-arch packaging moved into `.kpack`
/// archives (a `.rocm_kpack_ref` marker) is given the targets of the archives its marker names
/// in any of the wheels or of the wheels `beside` (installed with them: the device wheels),
/// where they lie once installed. Only `wheels` are described.
pub fn read(wheels: &[PathBuf], beside: &[PathBuf]) -> Result<Vec<WheelCode>, crate::offload::OffloadError> {
    Ok(read_all(wheels, beside)?.code)
}

/// What [`read_all`] found.
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub code: Vec<WheelCode>,
    /// Host libraries whose marker led to no archive (`<wheel>!<member>`), in wheels that
    /// carry no GPU code otherwise: their device code is in a device wheel that was not given.
    pub moved_out: Vec<String>,
}

/// [`read`], and the libraries whose device code is nowhere among the wheels.
pub fn read_all(wheels: &[PathBuf], beside: &[PathBuf]) -> Result<Found, crate::offload::OffloadError> {
    let mut files = Vec::new();
    for w in wheels {
        files.push(crate::offload::inspect_wheel(w, &crate::offload::is_code_member)?);
    }
    let mut all: Vec<crate::offload::Inspected> = files.concat();
    // The archives of the wheels beside are read only for a marker to follow: most wheels have
    // none, and a device wheel's archives are hundreds of megabytes.
    if all.iter().any(|i| i.kpack.is_some()) {
        for w in beside {
            all.extend(crate::offload::inspect_wheel(w, &crate::offload::is_kpack_member)?);
        }
    }
    if let Some(e) = crate::offload::follow_markers(&mut all, &[]).into_iter().next() {
        return Err(e);
    }
    let mut found = Found::default();
    let mut all = all.into_iter();
    for (w, n) in wheels.iter().zip(files.iter().map(Vec::len)) {
        let mut targets = BTreeSet::new();
        let mut unled = Vec::new();
        for i in all.by_ref().take(n) {
            targets.extend(i.processors().into_iter().map(str::to_string));
            if i.kpack.as_ref().is_some_and(|k| k.archives.is_empty()) {
                unled.push(i.path.clone());
            }
        }
        if !targets.is_empty() {
            let wheel = w.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            found.code.push(WheelCode { wheel, targets: targets.into_iter().collect() });
        } else {
            found.moved_out.extend(unled);
        }
    }
    Ok(found)
}

/// Writes the record of `recipe` into its installed tree.
pub fn record(tree: &Path, recipe: &str, code: &[WheelCode]) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(code).expect("the record serialises");
    crate::fsutil::write_atomic(&tree.join(RECORD_DIR).join(format!("{recipe}.json")), json.as_bytes())
}

/// Every record deployed in `prefix` (none: the stack has no prebuilt wheel with GPU code, or is
/// not built yet).
pub fn load(prefix: &Path) -> Vec<WheelCode> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(prefix.join(RECORD_DIR))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| serde_json::from_slice::<Vec<WheelCode>>(&std::fs::read(f).ok()?).ok())
        .flatten()
        .collect()
}

/// How a card of target `t` runs the wheels.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Runs {
    /// Every wheel with GPU code carries `t`.
    Natively,
    /// As `target`, which every wheel carries, with `profile`'s override.
    As { profile: String, target: String },
    /// Neither.
    Not,
}

/// The package a wheel's device code belongs to: its project, less a trailing target
/// (`amd_torch_device_gfx1012-2.12.0-...whl`: `amd_torch_device`; `torch-...whl`: `torch`).
/// AMD's multi-arch packaging splits one package's device code into a wheel per target
/// (rocm-kpack's wheel splitter: `amd-torch-device-<target>`; TheRock's
/// `rocm-sdk-device-<target>`), so those wheels carry it together.
fn package_of(wheel: &str) -> &str {
    let project = wheel.split_once('-').map(|(p, _)| p).unwrap_or(wheel);
    match project.rfind("_gfx") {
        Some(i) if project[i + 4..].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => &project[..i],
        _ => project,
    }
}

/// The targets every package with GPU code carries, in one of its wheels or another (a target
/// split across per-target device wheels counts once any of them carries it).
fn common(code: &[WheelCode]) -> BTreeSet<&str> {
    let mut packages: std::collections::BTreeMap<&str, BTreeSet<&str>> = std::collections::BTreeMap::new();
    for c in code {
        packages.entry(package_of(&c.wheel)).or_default().extend(c.targets.iter().map(String::as_str));
    }
    let mut sets = packages.into_values();
    let first = sets.next().unwrap_or_default();
    sets.fold(first, |acc, s| acc.intersection(&s).copied().collect())
}

/// `10` of gfx1010, `9` of gfx90a.
fn gfx_major(t: &str) -> &str {
    let d = t.strip_prefix("gfx").unwrap_or(t);
    &d[..d.len().saturating_sub(2)]
}

/// The stack's profiles, the default first.
fn profiles(stack: &Stack) -> Vec<&Profile> {
    let mut v: Vec<&Profile> = stack.profiles.values().collect();
    v.sort_by_key(|p| (Some(&p.name) != stack.default_profile.as_ref(), p.name.clone()));
    v
}

/// How a card of target `t` runs the wheels of `code` on `stack`.
fn runs(stack: &Stack, code: &[WheelCode], t: &str) -> Runs {
    let carried = common(code);
    if carried.contains(t) {
        return Runs::Natively;
    }
    profiles(stack)
        .into_iter()
        .find_map(|p| {
            let r = p.runs_as()?;
            (carried.contains(r.as_str()) && gfx_major(&r) == gfx_major(t))
                .then(|| Runs::As { profile: p.name.clone(), target: r })
        })
        .unwrap_or(Runs::Not)
}

/// `torch-….whl: gfx1030, gfx900; torchvision-….whl: gfx1030`.
pub fn describe(code: &[WheelCode]) -> String {
    code.iter().map(|c| format!("{}: {}", c.wheel, c.targets.join(", "))).collect::<Vec<_>>().join("; ")
}

/// Why a build stops: a requested target the wheels cannot run.
pub fn refusal(stack: &Stack, code: &[WheelCode], targets: &TargetSet) -> Option<String> {
    if stack.is_native() || code.is_empty() {
        return None;
    }
    let cannot: Vec<&str> = targets.names().into_iter().filter(|t| runs(stack, code, t) == Runs::Not).collect();
    (!cannot.is_empty()).then(|| {
        format!(
            "the wheels carry GPU code for {} only ({}), and no profile of stack `{}` runs a {} as one of those targets ({GFX_OVERRIDE_VAR}); add such a profile to {}, or build for a target they carry",
            common(code).into_iter().collect::<Vec<_>>().join(", "),
            describe(code),
            stack.name,
            cannot.join(", "),
            stack.file
        )
    })
}

/// The profile `env` and `verify` use, and what to tell the user about it.
#[derive(Debug, Clone)]
pub struct Choice<'a> {
    pub profile: Option<&'a Profile>,
    /// Why this profile (a comment line of the activation).
    pub note: Option<String>,
    pub warning: Option<String>,
}

impl Choice<'_> {
    /// Why this profile: the note, else the warning.
    pub fn why(&self) -> Option<String> {
        self.note.clone().or_else(|| self.warning.clone())
    }
}

/// The profile for `targets` on `stack` whose wheels carry `code`: the one named, else the one
/// that runs the card on what the wheels carry, else the default.
pub fn choose<'a>(
    stack: &'a Stack,
    named: Option<&str>,
    code: &[WheelCode],
    targets: &TargetSet,
) -> Result<Choice<'a>, String> {
    let base = stack.profile(named)?;
    let mut choice = Choice { profile: base, note: None, warning: None };
    if stack.is_native() || code.is_empty() {
        return Ok(choice);
    }
    let Some(t) = targets.names().into_iter().next() else { return Ok(choice) };
    match runs(stack, code, t) {
        Runs::Natively => {
            choice.note = Some(format!("the wheels carry {t} code ({}): the card runs its own", describe(code)))
        }
        Runs::As { profile, target } => {
            // A profile asked for by name stays, when it runs the card as a carried target too.
            let p = match (named, base) {
                (Some(_), Some(b)) if b.runs_as().as_deref() == Some(target.as_str()) => b,
                _ => &stack.profiles[&profile],
            };
            let why = format!(
                "the wheels carry no {t} code ({}); profile {} runs the card as {target} ({GFX_OVERRIDE_VAR}={})",
                describe(code),
                p.name,
                p.env.get(GFX_OVERRIDE_VAR).map(String::as_str).unwrap_or_default()
            );
            match named {
                Some(n) if p.name != n => {
                    choice.warning = Some(format!("profile {n} was asked for, but {why}: without it the runtime finds no code for this card (hipErrorNoBinaryForGpu)"))
                }
                _ => {
                    choice.profile = Some(p);
                    choice.note = Some(why);
                }
            }
        }
        Runs::Not => {
            choice.warning = Some(format!(
                "the wheels carry no {t} code ({}) and no profile runs the card as a target they carry",
                describe(code)
            ))
        }
    }
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack() -> Stack {
        let files = std::collections::BTreeMap::from([
            (
                "recipes/b/stack.toml".to_string(),
                b"[stack]\nname = \"b\"\nrocm-version = \"5.2\"\nsummary = \"b\"\ndefault-targets = [\"gfx1010\"]\ndefault-profile = \"plain\"\n\n[profile.plain]\ndescription = \"no override\"\nenv = { MIOPEN_DEBUG_CONV_GEMM = \"0\" }\n\n[profile.as-1030]\ndescription = \"as gfx1030\"\nenv = { HSA_OVERRIDE_GFX_VERSION = \"10.3.0\" }\n\n[profile.as-1030-gemm]\ndescription = \"as gfx1030, GEMM only\"\nenv = { HSA_OVERRIDE_GFX_VERSION = \"10.3.0\", MIOPEN_DEBUG_CONV_GEMM = \"1\" }\n".to_vec(),
            ),
            (
                "recipes/b/torch.toml".to_string(),
                b"[package]\nname = \"torch\"\nversion = \"1\"\nsummary = \"t\"\n[source]\nurl = \"https://x.invalid/torch-1.0-py3-none-any.whl\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\n[build]\nsystem = \"prebuilt-wheel\"\n[targets]\ngpu = false\n".to_vec(),
            ),
        ]);
        let tree = crate::recipe::RecipeTree::from_files(crate::recipe::Origin::Embedded, files);
        crate::recipe::load_stack(&tree, "b").unwrap_or_else(|d| panic!("{d}"))
    }

    fn code(targets: &[&str]) -> Vec<WheelCode> {
        vec![WheelCode { wheel: "torch.whl".into(), targets: targets.iter().map(|t| t.to_string()).collect() }]
    }

    #[test]
    fn the_wheels_decide_how_a_card_runs() {
        let s = stack();
        let gfx1010 = TargetSet::parse("gfx1010").unwrap();
        assert_eq!(runs(&s, &code(&["gfx1010", "gfx1030"]), "gfx1010"), Runs::Natively);
        assert_eq!(
            runs(&s, &code(&["gfx900", "gfx1030"]), "gfx1010"),
            Runs::As { profile: "as-1030".into(), target: "gfx1030".into() }
        );
        // Another gfx major is not run as gfx1030.
        assert_eq!(runs(&s, &code(&["gfx1030"]), "gfx906"), Runs::Not);
        assert_eq!(runs(&s, &code(&["gfx900"]), "gfx1010"), Runs::Not);
        let refused = refusal(&s, &code(&["gfx900", "gfx906"]), &gfx1010).unwrap();
        assert!(refused.contains("GPU code for gfx900, gfx906 only") && refused.contains("gfx1010"), "{refused}");
        assert_eq!(refusal(&s, &code(&["gfx1030"]), &gfx1010), None);
        assert_eq!(refusal(&s, &[], &gfx1010), None, "no GPU code read: nothing to decide");

        let c = choose(&s, None, &code(&["gfx1030"]), &gfx1010).unwrap();
        assert_eq!(c.profile.map(|p| p.name.as_str()), Some("as-1030"));
        assert!(c
            .note
            .unwrap()
            .contains("no gfx1010 code (torch.whl: gfx1030); profile as-1030 runs the card as gfx1030"));
        let c = choose(&s, None, &code(&["gfx1010"]), &gfx1010).unwrap();
        assert_eq!(c.profile.map(|p| p.name.as_str()), Some("plain"));
        let c = choose(&s, Some("plain"), &code(&["gfx1030"]), &gfx1010).unwrap();
        assert_eq!(c.profile.map(|p| p.name.as_str()), Some("plain"), "a profile asked for is kept");
        assert!(c.warning.unwrap().contains("hipErrorNoBinaryForGpu"));
        // Another profile that runs the card as a carried target stays when it is asked for.
        let c = choose(&s, Some("as-1030-gemm"), &code(&["gfx1030"]), &gfx1010).unwrap();
        assert_eq!(c.profile.map(|p| p.name.as_str()), Some("as-1030-gemm"));
        assert!(c.warning.is_none() && c.note.unwrap().contains("profile as-1030-gemm runs the card as gfx1030"));
    }

    /// AMD's device code, one wheel per target: each requested target carried by one of a
    /// package's device wheels runs natively; two packages still must both carry it.
    #[test]
    fn device_code_split_across_per_target_wheels_covers_each_target_one_wheel_carries() {
        let s = stack();
        let w = |wheel: &str, targets: &[&str]| WheelCode {
            wheel: wheel.into(),
            targets: targets.iter().map(|t| t.to_string()).collect(),
        };
        assert_eq!(
            package_of("amd_torch_device_gfx1012-2.12.0+rocm7.14.0-cp312-cp312-linux_x86_64.whl"),
            "amd_torch_device"
        );
        assert_eq!(package_of("amd_torch_device_gfx12_0-2.12.0-cp312-cp312-linux_x86_64.whl"), "amd_torch_device");
        assert_eq!(package_of("rocm_sdk_device_gfx1010-7.14.0-py3-none-linux_x86_64.whl"), "rocm_sdk_device");
        assert_eq!(package_of("torch-2.12.0+rocm7.14.0-cp312-cp312-linux_x86_64.whl"), "torch");
        let split = [
            w("rocm_sdk_device_gfx1010-7.14.0-py3-none-linux_x86_64.whl", &["gfx1010"]),
            w("rocm_sdk_device_gfx1012-7.14.0-py3-none-linux_x86_64.whl", &["gfx1012"]),
            w("amd_torch_device_gfx1010-2.12.0-cp312-cp312-linux_x86_64.whl", &["gfx1010"]),
            w("amd_torch_device_gfx1012-2.12.0-cp312-cp312-linux_x86_64.whl", &["gfx1012"]),
            w("torch-2.12.0-cp312-cp312-linux_x86_64.whl", &["gfx1010", "gfx1012"]),
        ];
        assert_eq!(runs(&s, &split, "gfx1010"), Runs::Natively);
        assert_eq!(runs(&s, &split, "gfx1012"), Runs::Natively);
        assert_eq!(refusal(&s, &split, &TargetSet::parse("gfx1010,gfx1012").unwrap()), None);
        assert_eq!(runs(&s, &split, "gfx1011"), Runs::Not);
        // Two packages: torch's gfx1030 code does not run a gfx1010 because torchvision has some.
        let two = [
            w("torch-1-cp312-cp312-linux_x86_64.whl", &["gfx1030"]),
            w("torchvision-1-cp312-cp312-linux_x86_64.whl", &["gfx1010", "gfx1030"]),
        ];
        assert_eq!(runs(&s, &two, "gfx1010"), Runs::As { profile: "as-1030".into(), target: "gfx1030".into() });
        // A package whose device wheels miss a target: not native for it.
        let short = [split[0].clone(), split[2].clone(), split[3].clone()];
        assert_eq!(runs(&s, &short, "gfx1012"), Runs::Not);
    }
}
