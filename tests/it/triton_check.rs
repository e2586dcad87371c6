//! The Triton check of rocm-6.2's `triton` recipe (`recipes/checks/triton-kernels`, issue 40)
//! run for real: the recipe's own wheel (PyPI's triton 3.2.0, which ci/setup.sh downloads into
//! the test wheelhouse; its sha256 is compared with the recipe's pin here) compiles the check's
//! kernels, and Debian's LLVM 19 stands in for the stack's llvm: its `ld.lld` is Triton's linker,
//! its llvm-readelf, llvm-objdump and llvm-mc read the code objects back (LLVM 15's llvm-mc
//! refuses the VOP3 literal of Triton 3.7's `v_permlanex16_b32` for gfx1010; docs/triton.md).
//!
//! - `plan` lists the check for rocm-6.2's triton, which pytorch depends on.
//! - The recipe's step as shipped (`AMDGCN_USE_BUFFER_OPS=0`, the profiles' value): the six
//!   kernels hold for gfx1010 (target, wave32, every instruction re-assembled, no row_bcast, no
//!   buffer descriptor), and each code object's ELF header names gfx1010 (read here, not by the
//!   check).
//! - The same step with buffer operations on (later Triton's default): Triton gives gfx1010
//!   gfx90a's descriptor word 0x27000, and the check fails naming each kernel that has one and
//!   the bits that are wrong, while gfx90a, where 0x27000 is right, holds: the check tells GFX9
//!   from GFX10 rather than refusing buffer operations.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{copy_tree, repo_root, rocmforge, text, wheelhouse};

/// The stand-in for the stack's llvm (Debian 12: packages llvm-19 and lld-19).
const LLVM: &str = "/usr/lib/llvm-19";
/// The Python of the wheel (cp311), the stack's.
const PYTHON: &str = "python3.11";
/// The check's kernels (kernels.py): the matmuls use no buffer operation in Triton 3.2.
const KERNELS: [&str; 6] = ["add-fp32", "gelu-fp16", "softmax-fp32", "matmul-fp16", "matmul-fp32", "atomic-add-fp32"];
const WITH_BUFFER_OPS: [&str; 4] = ["add-fp32", "gelu-fp16", "softmax-fp32", "atomic-add-fp32"];

fn recipe() -> toml::Value {
    let p = repo_root().join("recipes/rocm-6.2/triton.toml");
    toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The recipe's one check step.
fn shipped_step() -> String {
    let r = recipe();
    let checks = r["check"].as_array().unwrap();
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0]["name"].as_str(), Some("triton-kernels"));
    assert_eq!(checks[0]["files"].as_str(), Some("triton-kernels"));
    let steps = checks[0]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{steps:?}");
    steps[0].as_str().unwrap().to_string()
}

/// The recipe's wheel in the test wheelhouse, its sha256 the recipe's pin.
fn pinned_wheel() -> PathBuf {
    let r = recipe();
    in_wheelhouse(r["source"]["url"].as_str().unwrap(), r["source"]["sha256"].as_str().unwrap())
}

/// The file `url` names in the test wheelhouse (ci/setup.sh downloads it there), checked to be
/// the one whose sha256 is `sha256`.
fn in_wheelhouse(url: &str, sha256: &str) -> PathBuf {
    let name = url.rsplit('/').next().unwrap();
    let wheel = wheelhouse().join(name);
    assert!(wheel.is_file(), "{} is missing: run ci/setup.sh (it downloads {url} there)", wheel.display());
    let out = Command::new("sha256sum").arg(&wheel).output().expect("sha256sum (coreutils) runs");
    assert!(out.status.success(), "{}", text(&out));
    let got = String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string();
    assert_eq!(got, sha256, "{}: not the pinned file", wheel.display());
    wheel
}

/// The tools the check needs here, or a loud failure naming the package.
fn tools() {
    for (tool, package) in
        [("ld.lld", "lld-19"), ("llvm-mc", "llvm-19"), ("llvm-objdump", "llvm-19"), ("llvm-readelf", "llvm-19")]
    {
        let p = Path::new(LLVM).join("bin").join(tool);
        assert!(p.exists(), "{} is needed (Debian 12: package {package}; ci/setup.sh installs it)", p.display());
    }
    let v = Command::new(PYTHON).arg("--version").output();
    assert!(
        v.as_ref().map(|o| o.status.success()).unwrap_or(false),
        "{PYTHON} is needed: the wheel is cp311 (Debian 12's python3): {v:?}"
    );
}

/// Runs `step` (the recipe's check line) as the engine does with the recipe's wheel: see `run_with`.
fn run(step: &str, targets: &str) -> (i32, String, tempfile::TempDir) {
    run_with(step, targets, &pinned_wheel(), PYTHON, &[])
}

/// Runs `step` as the engine does: bash in a copy of the check's files, `{installed}` an
/// installed tree holding `wheel` in share/rocmforge/wheels, `{python}` the given Python,
/// `{rocm_llvm}` the stand-in LLVM, in an environment of PATH, HOME and `env` alone. Returns
/// the exit code, the output and the work folder (`out/` inside it).
fn run_with(
    step: &str,
    targets: &str,
    wheel: &Path,
    python: &str,
    env: &[(String, String)],
) -> (i32, String, tempfile::TempDir) {
    tools();
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("check");
    copy_tree(&repo_root().join("recipes/checks/triton-kernels"), &files);
    let wheels = dir.path().join("installed/share/rocmforge/wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    std::os::unix::fs::symlink(wheel, wheels.join(wheel.file_name().unwrap())).unwrap();
    let line = step
        .replace("{python}", python)
        .replace("{installed}", dir.path().join("installed").to_str().unwrap())
        .replace("{rocm_llvm}", LLVM)
        .replace("{targets}", targets);
    assert!(!line.contains('{'), "a placeholder the test does not fill: {line}");
    let out = Command::new("bash")
        .arg("-c")
        .arg(&line)
        .current_dir(&files)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), all, dir)
}

/// EF_AMDGPU_MACH of an AMDGPU code object's ELF header (e_flags, low byte).
/// The check's PASS line for kernel `k` on gfx1010, whose code object it read back as gfx1010 wave32.
fn gfx1010_pass_line<'a>(out: &'a str, k: &str) -> &'a str {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("PASS gfx1010 {k}: ")))
        .unwrap_or_else(|| panic!("no PASS line for {k}:\n{out}"));
    assert!(line.contains(": amdgcn-amd-amdhsa--gfx1010 wave32, "), "{line}");
    line
}

fn mach(obj: &Path) -> u32 {
    let b = std::fs::read(obj).unwrap_or_else(|e| panic!("{}: {e}", obj.display()));
    assert!(b.len() >= 64 && &b[..4] == b"\x7fELF" && b[4] == 2, "{}: not an ELF64 file", obj.display());
    assert_eq!(u16::from_le_bytes([b[18], b[19]]), 224, "{}: e_machine is not EM_AMDGPU", obj.display());
    u32::from_le_bytes([b[48], b[49], b[50], b[51]]) & 0xff
}

#[test]
fn plan_lists_the_triton_check_for_rocm_6_2_and_torch_brings_triton() {
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path())
        .args(["--stack", "rocm-6.2", "plan", "pytorch", "--json", "--target", "gfx1010"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = |n: &str| {
        plan["recipes"].as_array().unwrap().iter().find(|e| e["name"] == n).unwrap_or_else(|| panic!("no {n}")).clone()
    };
    let triton = entry("triton");
    assert_eq!(triton["version"], "3.2.0");
    assert_eq!(triton["system"], "prebuilt-wheel");
    assert!(triton["checks"].as_array().unwrap().iter().any(|c| c == "triton-kernels"), "{}", triton["checks"]);
    assert!(entry("pytorch")["deps"].as_array().unwrap().iter().any(|d| d == "triton"), "{}", entry("pytorch"));
}

#[test]
fn the_shipped_triton_check_holds_for_gfx1010_with_pypi_triton_3_2_0() {
    let step = shipped_step();
    assert!(step.starts_with("AMDGCN_USE_BUFFER_OPS=0 {python} check.py "), "{step}");
    // The profiles set what the check runs with (recipes/rocm-6.2/stack.toml).
    let stack: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo_root().join("recipes/rocm-6.2/stack.toml")).unwrap()).unwrap();
    let profiles = stack["profile"].as_table().unwrap();
    assert!(profiles.len() >= 2, "{profiles:?}");
    for (name, p) in profiles {
        assert_eq!(p["env"]["AMDGCN_USE_BUFFER_OPS"].as_str(), Some("0"), "profile {name}");
        assert!(
            p["env"]["TRITON_HIP_LLD_PATH"].as_str().unwrap().ends_with("/rocmforge_rocm/llvm/bin/ld.lld"),
            "profile {name}: {}",
            p["env"]
        );
    }

    let (code, out, dir) = run(&step, "gfx1010");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with(&format!(
            "triton 3.2.0 from {}; AMDGCN_USE_BUFFER_OPS=0; linker {LLVM}/bin/ld.lld\n",
            recipe()["source"]["url"].as_str().unwrap().rsplit('/').next().unwrap()
        )),
        "{out}"
    );
    for k in KERNELS {
        let line = gfx1010_pass_line(&out, k);
        assert!(line.ends_with(", no row_bcast, buffer descriptors: none"), "{line}");
        let n: usize = line.split(" wave32, ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(n > 100, "{k}: {n} instructions: {line}");
        // EF_AMDGPU_MACH_AMDGCN_GFX1010.
        assert_eq!(mach(&dir.path().join(format!("check/out/gfx1010/{k}.hsaco"))), 0x33, "{k}");
    }
    assert!(!out.contains("FAIL"), "{out}");
    assert!(out.ends_with("PASS: 6 of 6 kernels hold for gfx1010\n"), "{out}");
}

#[test]
fn with_buffer_operations_on_the_triton_check_fails_gfx1010_naming_each_kernel_and_holds_for_gfx90a() {
    let shipped = shipped_step();
    assert_eq!(shipped.matches("AMDGCN_USE_BUFFER_OPS=0").count(), 1, "{shipped}");
    let step = shipped.replace("AMDGCN_USE_BUFFER_OPS=0", "AMDGCN_USE_BUFFER_OPS=1");
    let (code, out, dir) = run(&step, "gfx1010;gfx90a");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("; AMDGCN_USE_BUFFER_OPS=1; "), "{out}");
    for k in WITH_BUFFER_OPS {
        let want = format!(
            "FAIL gfx1010 {k}: buffer descriptor 0x27000 is not a GFX10 descriptor (LLVM's own for gfx1010: 0x31c16000): RESOURCE_LEVEL (bit 24) is 0, GFX10 needs 1; OOB_SELECT (bits 28-29) is 0, not 3"
        );
        assert!(out.lines().any(|l| l.starts_with(&want)), "want `{want}` in:\n{out}");
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("PASS gfx90a {k}: ")))
            .unwrap_or_else(|| panic!("no gfx90a PASS line for {k}:\n{out}"));
        assert!(
            line.contains(": amdgcn-amd-amdhsa--gfx90a wave64, ") && line.ends_with("buffer descriptors: 0x27000"),
            "{line}"
        );
        // EF_AMDGPU_MACH_AMDGCN_GFX90A.
        assert_eq!(mach(&dir.path().join(format!("check/out/gfx90a/{k}.hsaco"))), 0x3f, "{k}");
    }
    for k in ["matmul-fp16", "matmul-fp32"] {
        for t in ["gfx1010", "gfx90a"] {
            assert!(out.lines().any(|l| l.starts_with(&format!("PASS {t} {k}: "))), "{t} {k}:\n{out}");
        }
    }
    assert_eq!(out.lines().filter(|l| l.starts_with("FAIL gfx1010 ")).count(), WITH_BUFFER_OPS.len(), "{out}");
    assert!(!out.contains("FAIL gfx90a"), "{out}");
    assert!(out.ends_with("FAIL: 8 of 12 kernels hold for gfx1010, gfx90a\n"), "{out}");
}

/// rocm-7.14-binary's torch 2.12 pairs with the Triton 3.7 series, where buffer operations are on
/// by default (knobs.py `env_bool("AMDGCN_USE_BUFFER_OPS", True)`) and give gfx1010 gfx90a's
/// descriptor word 0x27000. The stack's profile turns them off: the check on PyPI's triton 3.7.1
/// (AMD's own build is not reachable here), in an environment of that profile's `env` alone,
/// finds no buffer descriptor in any of the six kernels for gfx1010, and every kernel holds:
/// read back whole, its VOP3 words whose unused src2 holds 0x80 (which no Debian LLVM decodes)
/// read with it cleared and counted. Without the profile's setting every kernel fails naming
/// 0x27000.
#[test]
fn the_rocm_7_14_profile_keeps_triton_3_7_off_buffer_operations_on_gfx1010() {
    let pin: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo_root().join("tests/fixtures/triton-3.7.1.toml")).unwrap())
            .unwrap();
    let wheel = in_wheelhouse(pin["url"].as_str().unwrap(), pin["sha256"].as_str().unwrap());
    // The 3.7.1 wheel is cp312: a Python 3.12 found as rocmforge finds a stack's.
    let python = rocmforge::host::python::find_python("3.12")
        .expect("Python 3.12 is needed for triton 3.7.1 (cp312): ci/setup.sh installs one (uv python install 3.12)");
    let python = python.to_str().unwrap();

    let stack: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo_root().join("recipes/rocm-7.14-binary/stack.toml")).unwrap())
            .unwrap();
    let profile_env: Vec<(String, String)> = stack["profile"]["native"]["env"]
        .as_table()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    assert!(profile_env.iter().any(|(k, _)| k == "AMDGCN_USE_BUFFER_OPS"), "{profile_env:?}");
    // The check step without the recipe's own setting: the environment alone decides.
    let step = shipped_step().replace("AMDGCN_USE_BUFFER_OPS=0 ", "");
    assert!(!step.contains("AMDGCN_USE_BUFFER_OPS"), "{step}");

    let (code, out, _dir) = run_with(&step, "gfx1010", &wheel, python, &profile_env);
    assert!(out.starts_with("triton 3.7.1 from "), "{out}");
    assert!(out.contains("; AMDGCN_USE_BUFFER_OPS=0; "), "{out}");
    assert!(!out.contains("buffer descriptor 0x"), "the profile's Triton builds no buffer descriptor:\n{out}");
    assert_eq!(code, 0, "{out}");
    for k in KERNELS {
        let line = gfx1010_pass_line(&out, k);
        // Every instruction re-assembled to the bytes read, some VOP3 among them read with src2 0.
        let (n, cleared) = line
            .split_once(" instructions re-assembled (0 to other bytes; ")
            .and_then(|(head, tail)| Some((head.rsplit(' ').next()?, tail.split(' ').next()?)))
            .unwrap_or_else(|| panic!("{line}"));
        let (n, cleared): (usize, usize) = (n.parse().unwrap(), cleared.parse().unwrap());
        assert!(n > 100 && cleared > 0 && cleared < n, "{k}: {line}");
        assert!(line.contains(" VOP3 read with their unused src2 0x80 as 0), no row_bcast, "), "{line}");
        assert!(line.ends_with(", buffer descriptors: none"), "{line}");
    }
    assert!(out.ends_with("PASS: 6 of 6 kernels hold for gfx1010\n"), "{out}");

    let without: Vec<(String, String)> =
        profile_env.iter().filter(|(k, _)| k != "AMDGCN_USE_BUFFER_OPS").cloned().collect();
    let (code, out, _dir) = run_with(&step, "gfx1010", &wheel, python, &without);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("; AMDGCN_USE_BUFFER_OPS=(unset); "), "{out}");
    for k in KERNELS {
        let want = format!("FAIL gfx1010 {k}: buffer descriptor 0x27000 is not a GFX10 descriptor ");
        assert!(out.lines().any(|l| l.starts_with(&want)), "want `{want}` in:\n{out}");
    }
}
