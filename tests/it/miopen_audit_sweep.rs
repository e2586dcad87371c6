//! Issue 39: the MIOpen audit runs the kernel sweep (recipes/checks/miopen-sweep/sweep.py, the
//! rocm-6.2 miopen recipe's `[[check]] kernel-sweep-gfx101x`, by its own step line) on the
//! kernel tree read out of a libMIOpen, here one built in the test the way MIOpen embeds its
//! kernels (`crate::miopen_audit::library`), with Debian 12's clang-15 and HIP headers; and
//! `inspect` exits 1 when a check could not run.

use std::path::{Path, PathBuf};

use crate::miopen_audit::library;
use crate::support::{rocmforge, text};

/// An OpenCL kernel that uses a build parameter only as a value (no `#if` tests it): the host
/// passes `-DMIO_GOOD_SCALE=...`; without one it does not compile on any target.
const GOOD_CL: &str = "__kernel void good(__global float *x) { x[get_global_id(0)] *= MIO_GOOD_SCALE; }\n";
/// A HIP kernel whose `threadIdx` is a device-library call (`__ockl_get_local_id`): linked to a
/// code object without the device libraries it does not resolve.
const GOOD_HIP: &str =
    "extern \"C\" __global__ void good_hip(float *x) { x[threadIdx.x + blockIdx.x * MIO_GOOD_N] *= 2.0f; }\n";
/// The DPP `row_bcast` operand gfx10 lacks, as batchnorm's reduction uses it: the assembler
/// refuses it for gfx1010 and takes it for gfx900.
const BAD_CL: &str = "__kernel void bad(__global float *x) {\n    float v = x[get_global_id(0)];\n    __asm__ volatile(\"v_add_f32_dpp %0, %1, %1 row_bcast:15 row_mask:0xa\" : \"=v\"(v) : \"v\"(v));\n    x[get_global_id(0)] = v;\n}\n";

fn tools() {
    assert!(Path::new("/usr/lib/llvm-15/bin/clang").is_file(), "Debian 12's clang-15 is missing (ci/setup.sh)");
    assert!(
        Path::new("/usr/include/hip/hip_runtime.h").is_file(),
        "HIP's headers are missing: apt-get install -y libamdhip64-dev (ci/setup.sh)"
    );
}

/// `rocmforge inspect --target gfx1010` on `lib`, its audit in `work`: (exit code, stdout, all).
fn inspect(home: &Path, work: &Path, lib: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = rocmforge(home)
        .args(["inspect", "--target", "gfx1010", "--kernels-dir"])
        .arg(work)
        .args(extra)
        .arg(lib)
        .timeout(std::time::Duration::from_secs(1800))
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), text(&out))
}

fn sweep_json(work: &Path) -> serde_json::Value {
    let p: PathBuf = work.join("0-libMIOpen.so.1.0/sweep.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// (kernel, ok) of the sweep's compiles for `target`, sorted.
fn outcomes(sweep: &serde_json::Value, target: &str) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = sweep["compiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["target"] == target)
        .map(|c| (c["kernel"].as_str().unwrap().to_string(), c["ok"].as_bool().unwrap()))
        .collect();
    v.sort();
    v
}

/// The audit's sweep compiles every kernel of a library's tree for gfx1010 and the gfx900
/// control: the two good kernels compile on both (the OpenCL one with its code-only parameter
/// given a value and said so; the HIP one stopped at the GPU assembly, the recipe's
/// `--device-libs {rocm_device_libs}` not passed and said so), and the sweep passes; with the
/// DPP kernel beside them it fails, naming the kernel, the target, the assembler's message and
/// what to do.
#[test]
fn the_audits_sweep_passes_good_kernels_and_fails_one_that_fails_on_gfx1010_alone() {
    tools();
    let home = tempfile::tempdir().unwrap();
    let good: [(&str, &[u8], bool); 2] =
        [("MIOpenGood.cl", GOOD_CL.as_bytes(), false), ("good_hip.cpp", GOOD_HIP.as_bytes(), false)];
    let lib = library(&home.path().join("good"), "libMIOpen.so.1.0", &good, "");
    let work = home.path().join("work-good");
    let (_, stdout, all) = inspect(home.path(), &work, &lib, &[]);
    let s = sweep_json(&work);
    let both = vec![("MIOpenGood.cl".to_string(), true), ("good_hip.cpp".to_string(), true)];
    assert_eq!(outcomes(&s, "gfx1010"), both, "{s}\n{all}");
    assert_eq!(outcomes(&s, "gfx900"), both, "{s}\n{all}");
    for want in [
        "  sweep (every embedded kernel file (.cl, .cpp, .s) compiled, against the gfx900 control): pass: 2 compiles for gfx1010, none fails on them alone",
        "    assumed: MIOpenGood.cl: MIO_GOOD_SCALE=1",
        "    assumed: good_hip.cpp: MIO_GOOD_N=1",
        "    assumed: no host code: every embedded kernel is taken as built for every target",
        "    not passed: --device-libs {rocm_device_libs} (an audit links no code object",
    ] {
        assert!(stdout.lines().any(|l| l.starts_with(want)), "no line `{want}`:\n{all}");
    }

    let mut files = good.to_vec();
    files.push(("MIOpenBad.cl", BAD_CL.as_bytes(), false));
    let lib = library(&home.path().join("bad"), "libMIOpen.so.1.0", &files, "");
    let work = home.path().join("work-bad");
    let (_, stdout, all) = inspect(home.path(), &work, &lib, &[]);
    let s = sweep_json(&work);
    assert_eq!(s["pass"], false, "{s}");
    let bad = s["compiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["target"] == "gfx1010" && c["kernel"] == "MIOpenBad.cl")
        .unwrap_or_else(|| panic!("no gfx1010 compile of MIOpenBad.cl: {s}"));
    assert_eq!((bad["ok"].as_bool(), bad["status"].as_str()), (Some(false), Some("FAILED")), "{bad}");
    assert!(outcomes(&s, "gfx900").iter().all(|(_, ok)| *ok), "{s}");
    for want in [
        "  sweep (every embedded kernel file (.cl, .cpp, .s) compiled, against the gfx900 control): FAIL: 1 of 3 compiles for gfx1010 fail, and compile for gfx900",
        "    FAILED gfx1010 MIOpenBad.cl: ",
        "    what to do: build MIOpen with the rocm-6.2 stack, whose kernels pass this sweep for gfx101x",
    ] {
        assert!(stdout.lines().any(|l| l.starts_with(want)), "no line `{want}`:\n{all}");
    }
    let failed = stdout.lines().find(|l| l.starts_with("    FAILED gfx1010 MIOpenBad.cl: ")).unwrap();
    assert!(failed.contains("error: not a valid operand."), "{failed}");
}

/// The audit runs the recipe's own step line: a recipe tree whose sweep step adds
/// `--only MIOpenGood` (given with `--recipes`) sweeps that kernel alone.
#[test]
fn the_audit_runs_the_sweep_by_the_recipes_own_step_line() {
    tools();
    let home = tempfile::tempdir().unwrap();
    let tree = home.path().join("tree");
    for d in ["recipes", "patches"] {
        crate::support::copy_tree(&crate::support::repo_root().join(d), &tree.join(d));
    }
    let toml = tree.join("recipes/rocm-6.2/miopen.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    let step = "--known known-rocm-6.2.txt --jobs {jobs} --work kernels\"]";
    assert_eq!(text.matches(step).count(), 1, "the sweep's step in {}", toml.display());
    std::fs::write(
        &toml,
        text.replace(step, "--known known-rocm-6.2.txt --jobs {jobs} --work kernels --only MIOpenGood\"]"),
    )
    .unwrap();
    let files: [(&str, &[u8], bool); 2] =
        [("MIOpenGood.cl", GOOD_CL.as_bytes(), false), ("MIOpenBad.cl", BAD_CL.as_bytes(), false)];
    let lib = library(&home.path().join("lib"), "libMIOpen.so.1.0", &files, "");
    let work = home.path().join("work");
    let recipes = tree.display().to_string();
    let (_, stdout, all) = inspect(home.path(), &work, &lib, &["--recipes", &recipes]);
    let s = sweep_json(&work);
    assert_eq!(outcomes(&s, "gfx1010"), [("MIOpenGood.cl".to_string(), true)], "{s}\n{all}");
    assert!(stdout.contains("  sweep (every embedded kernel file (.cl, .cpp, .s) compiled, against the gfx900 control): pass: 1 compiles for gfx1010"), "{all}");
    let log = std::fs::read_to_string(work.join("0-libMIOpen.so.1.0/sweep.log")).unwrap();
    assert!(log.lines().next().unwrap_or_default().contains(" --work kernels --only MIOpenGood --json "), "{log}");
}

/// A check that could not run is not a pass: on a library without batchnorm's DPP kernels and
/// without the legacy-CK reductions, `inspect` prints the sweep's outcome and exits 1 naming the
/// two checks that could not run and why; with `--no-kernel-checks` it exits 0.
#[test]
fn inspect_exits_1_naming_each_kernel_check_that_could_not_run() {
    tools();
    let home = tempfile::tempdir().unwrap();
    let lib =
        library(&home.path().join("lib"), "libMIOpen.so.1.0", &[("MIOpenGood.cl", GOOD_CL.as_bytes(), false)], "");
    let work = home.path().join("work");
    let (code, stdout, all) = inspect(home.path(), &work, &lib, &[]);
    assert_eq!(code, 1, "{all}");
    assert!(
        stdout.contains(
            "  sweep (every embedded kernel file (.cl, .cpp, .s) compiled, against the gfx900 control): pass: "
        ),
        "{all}"
    );
    assert!(
        stdout.contains("  batchnorm (batchnorm's OpenCL kernels (DPP `row_bcast` reduction)): NOT RUN: "),
        "{all}"
    );
    for want in [
        "2 MIOpen kernel check(s) could not run (their outcome is unknown, not a pass):".to_string(),
        format!("  - {}: the batchnorm check could not run: ", lib.display()),
        "no MIOpenBatchNorm*.cl reaches the DPP reduction".into(),
        format!("  - {}: the legacy-ck check could not run: ", lib.display()),
        "no gridwise_generic_reduction_*.cpp among the library's kernels".into(),
    ] {
        assert!(all.contains(&want), "no `{want}`:\n{all}");
    }
    let (code, _, all) = inspect(home.path(), &home.path().join("work2"), &lib, &["--no-kernel-checks"]);
    assert_eq!(code, 0, "{all}");
}
