//! The legacy-CK check (`recipes/checks/miopen-legacy-ck/check.py`) against a stand-in MIOpen
//! tree written for it (`tests/fixtures/legacy-ck`), with Debian's clang-15 and HIP headers:
//! unpatched it fails for gfx1010 naming the kernel and the `#error`, while gfx1030 compiles;
//! after the real patch 0003 it passes; a config that gives gfx101x a dot instruction fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{copy_tree, repo_root};

const CLANG: &str = "/usr/bin/clang-15";
const KERNEL: &str = "gridwise_generic_reduction_first_call_blockwise_reduce_partial_dims.cpp";
const CONFIG: &str = "src/composable_kernel/composable_kernel/include/utility/config.hpp";

fn tools() {
    assert!(Path::new(CLANG).exists(), "{CLANG} is missing: apt-get install clang-15");
    assert!(
        Path::new("/usr/include/hip/hip_runtime.h").exists(),
        "/usr/include/hip/hip_runtime.h is missing: apt-get install hipcc (HIP headers)"
    );
}

fn stand_in(dir: &Path) -> PathBuf {
    let tree = dir.join("miopen");
    copy_tree(&repo_root().join("tests/fixtures/legacy-ck"), &tree);
    tree
}

/// Runs check.py for gfx1010 and gfx1030: (exit code, stdout).
fn check(tree: &Path, work: &Path) -> (i32, String) {
    let out = Command::new("python3")
        .arg(repo_root().join("recipes/checks/miopen-legacy-ck/check.py"))
        .arg("--src")
        .arg(tree)
        .args(["--clang", CLANG, "--rocm", "/usr", "--targets", "gfx1010;gfx1030", "--work"])
        .arg(work)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), format!("{stdout}{stderr}"))
}

fn line<'a>(out: &'a str, status: &str, target: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(status) && l.contains(target) && l.contains(KERNEL))
        .unwrap_or_else(|| panic!("no `{status} {target} {KERNEL}` line in:\n{out}"))
}

fn apply_patch_0003(tree: &Path) {
    let patch = repo_root().join("patches/rocm-6.2/miopen/0003-legacy-ck-gfx101x.patch");
    let out =
        Command::new("patch").current_dir(tree).args(["-p1", "--batch", "-i"]).arg(&patch).output().expect("patch");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "patch 0003 does not apply to the stand-in:\n{text}");
    assert!(!text.contains("FAILED") && !text.contains("fuzz"), "{text}");
}

#[test]
fn unpatched_gfx1010_fails_with_the_error_and_patch_0003_makes_it_compile() {
    tools();
    let dir = tempfile::tempdir().unwrap();
    let tree = stand_in(dir.path());

    let (code, out) = check(&tree, &dir.path().join("before"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("NO CK_AMD_GPU_* target macro"), "{out}");
    line(&out, "FAILED", "gfx1010");
    line(&out, "ok", "gfx1030");
    assert!(out.contains("error: Need to define (only) one GPU target"), "the compiler's message:\n{out}");
    assert!(out.ends_with("FAIL\n"), "{out}");

    apply_patch_0003(&tree);
    let (code, out) = check(&tree, &dir.path().join("after"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("-DCK_AMD_GPU_GFX101X"), "the flag is read from the patched function:\n{out}");
    line(&out, "ok", "gfx1010");
    line(&out, "ok", "gfx1030");
    assert!(out.contains("2 ok, 0 FAILED") && out.ends_with("PASS\n"), "{out}");
}

#[test]
fn a_config_that_gives_gfx101x_a_dot_instruction_fails() {
    tools();
    let dir = tempfile::tempdir().unwrap();
    let tree = stand_in(dir.path());
    apply_patch_0003(&tree);
    let config = tree.join(CONFIG);
    let text = std::fs::read_to_string(&config).unwrap();
    let fmac_only = "#elif defined(CK_AMD_GPU_GFX101X)\n// gfx1010 has no dot instructions: FMAC only, for every gfx101x\n#define CK_USE_AMD_V_FMAC_F32\n";
    assert!(text.contains(fmac_only), "patch 0003's gfx101x branch:\n{text}");
    std::fs::write(&config, text.replace(fmac_only, &format!("{fmac_only}#define CK_USE_AMD_V_DOT2_F32_F16\n")))
        .unwrap();

    let (code, out) = check(&tree, &dir.path().join("work"));
    assert_eq!(code, 1, "{out}");
    line(&out, "FAILED", "gfx1010");
    line(&out, "ok", "gfx1030");
    assert!(out.contains("instruction not supported on this GPU"), "{out}");
}

#[test]
fn a_tree_without_the_flag_function_is_not_read() {
    tools();
    let dir = tempfile::tempdir().unwrap();
    let tree = stand_in(dir.path());
    let header = tree.join("src/include/miopen/solver/ck_utility_common.hpp");
    let text = std::fs::read_to_string(&header).unwrap();
    std::fs::write(&header, text.replace("get_ck_common_compiler_flag", "other_flag")).unwrap();
    let (code, out) = check(&tree, &dir.path().join("work"));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("check error:") && out.contains("get_ck_common_compiler_flag"), "{out}");
}

/// The recipe's own step line, run as the engine runs it (a copy of the check's folder with
/// kernel-common beside it). In a night built against an installation (`--rocm-path` with
/// `--from-source clr`), `{rocm}` holds the compiler and not HIP; HIP's headers are in clr's
/// root, where the first real night's MIOpen check stopped ("no include/hip/hip_runtime.h").
#[test]
fn the_recipes_step_takes_the_hip_headers_from_clrs_root() {
    tools();
    let dir = tempfile::tempdir().unwrap();
    let tree = stand_in(dir.path());
    apply_patch_0003(&tree);
    let (llvm, rocm, clr) = (dir.path().join("llvm"), dir.path().join("rocm"), dir.path().join("clr"));
    std::fs::create_dir_all(llvm.join("bin")).unwrap();
    std::os::unix::fs::symlink(CLANG, llvm.join("bin/clang")).unwrap();
    std::fs::create_dir_all(rocm.join("include")).unwrap();
    std::fs::create_dir_all(clr.join("include")).unwrap();
    std::os::unix::fs::symlink("/usr/include/hip", clr.join("include/hip")).unwrap();
    let device_libs = Path::new("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode");
    assert!(
        device_libs.join("ockl.bc").exists(),
        "Debian's device libs (package rocm-device-libs, via hipcc) are missing"
    );

    let recipe: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo_root().join("recipes/rocm-6.2/miopen.toml")).unwrap()).unwrap();
    let check = recipe["check"].as_array().unwrap().iter().find(|c| c["name"].as_str() == Some("legacy-ck-gfx101x"));
    let check = check.expect("miopen.toml has the legacy-ck-gfx101x check");
    let step = check["steps"][0].as_str().unwrap().to_string();
    let run = |step: &str, name: &str| {
        let checks = dir.path().join(name);
        copy_tree(&repo_root().join("recipes/checks/miopen-legacy-ck"), &checks.join("legacy-ck-gfx101x"));
        copy_tree(&repo_root().join("recipes/checks/kernel-common"), &checks.join("kernel-common"));
        let filled = step
            .replace("{src}", tree.to_str().unwrap())
            .replace("{rocm_llvm}", llvm.to_str().unwrap())
            .replace("{root:clr}", clr.to_str().unwrap())
            .replace("{rocm}", rocm.to_str().unwrap())
            .replace("{targets}", "gfx1010")
            .replace("{rocm_device_libs}", device_libs.to_str().unwrap());
        assert!(!filled.contains('{'), "a placeholder this test does not fill: {filled}");
        let out =
            Command::new("sh").arg("-c").arg(&filled).current_dir(checks.join("legacy-ck-gfx101x")).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code().unwrap_or(-1), text)
    };
    let (code, out) = run(&step, "clr");
    assert_eq!(code, 0, "{step}\n{out}");
    line(&out, "ok", "gfx1010");
    let with_rocm = step.replace("{root:clr}", "{rocm}");
    assert_ne!(with_rocm, step, "the step names clr's root: {step}");
    let (code, out) = run(&with_rocm, "rocm");
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no include/hip/hip_runtime.h"), "{out}");
}

/// The rocm-6.2 stack's own MIOpen read as a library (`rocmforge inspect`): patch 0003's host
/// code gives every gfx101* device the family macro ` -DCK_AMD_GPU_GFX101X`, which the
/// library's strings name; the audit takes it for gfx1010 and the patched reduction compiles,
/// building its buffer resources with GFX10's dword 0x31014000. A library whose strings name only
/// upstream's targets fails on gfx1010 with the `#error`. (The first real night's libMIOpen,
/// patched, failed the audit so while the audit knew only a device's own macro.)
#[test]
fn inspect_takes_patch_0003s_family_macro_from_a_librarys_strings() {
    tools();
    let dir = tempfile::tempdir().unwrap();
    let tree = stand_in(dir.path());
    apply_patch_0003(&tree);
    let kernel =
        std::fs::read(tree.join("src/composable_kernel/composable_kernel/src/kernel_wrapper").join(KERNEL)).unwrap();
    let config = std::fs::read(tree.join(CONFIG)).unwrap();
    for (host, passes) in [(" -DCK_AMD_GPU_GFX101X", true), (" -DCK_AMD_GPU_GFX1031", false)] {
        // The kernel map's file names, the version, the host code's target literals.
        let mut c =
            format!("const char *miopen_strings[] = {{ {KERNEL:?}, \"config.hpp\", \", MIOpen version 3.2.0.\", ");
        c.push_str(&format!("\" -DCK_AMD_GPU_GFX900\", \" -DCK_AMD_GPU_GFX1030\", {host:?} }};\n"));
        c.push_str(&crate::miopen_audit::embed(KERNEL, &kernel, false, None));
        c.push_str(&crate::miopen_audit::embed("config.hpp", &config, true, None));
        let libs = dir.path().join(format!("lib-{passes}"));
        let lib = crate::support::kpack::c_library(&libs, "libMIOpen.so.1.0", &c);
        let work = dir.path().join(format!("work-{passes}"));
        let out = crate::support::rocmforge(dir.path())
            .args(["inspect", "--target", "gfx1010", "--kernels-dir"])
            .arg(&work)
            .arg(&lib)
            .timeout(std::time::Duration::from_secs(1800))
            .output()
            .unwrap();
        let all = crate::support::text(&out);
        let json = work.join("0-libMIOpen.so.1.0/legacy-ck.json");
        let ck: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap_or_else(|e| panic!("{}: {e}\n{all}", json.display())))
                .unwrap();
        assert_eq!(ck["pass"], passes, "{ck}\n{all}");
        let gfx1010: Vec<&serde_json::Value> =
            ck["compiles"].as_array().unwrap().iter().filter(|c| c["target"] == "gfx1010").collect();
        assert!(!gfx1010.is_empty(), "{ck}");
        if passes {
            assert!(
                all.contains("assumed: gfx1010: -DCK_AMD_GPU_GFX101X (named by the library's strings: a family macro"),
                "{all}"
            );
            assert!(gfx1010.iter().all(|c| c["ok"] == true), "{ck}");
            // The buffer resource the code builds holds GFX10's third dword (config.hpp's
            // gfx103x branch, which patch 0003 gives gfx101x), not gfx900's 0x00020000.
            for c in &gfx1010 {
                assert_eq!(c["buffer_dwords"], serde_json::json!(["0x31014000"]), "{c}\n{all}");
            }
        } else {
            assert!(all.contains("assumed: gfx1010: no CK_AMD_GPU_* macro"), "{all}");
            let msg = gfx1010[0]["message"][0].as_str().unwrap_or_default();
            assert!(msg.contains("error: Need to define (only) one GPU target"), "{ck}");
        }
    }
}
