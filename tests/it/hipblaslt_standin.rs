//! hipBLASLt on a night whose targets it has no kernels for (issue 33): the shipped recipe plans
//! its `[stand-in]` (the host library without Tensile, patch 0001, its own estimate and check) for
//! gfx10 targets and the real library for targets with kernels; and the stand-in's check
//! (`recipes/checks/hipblaslt-standin/check.py`) run for real with g++ and nm against a stand-in
//! hipBLASLt written here (tests/fixtures/hipblaslt-standin: our own headers and library, by
//! hipBLASLt 6.2's type names): it passes, and fails naming the symbol a library lacks or the call
//! that aborts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{copy_tree, repo_root, rocmforge, text};

const TIMEOUT: Duration = Duration::from_secs(120);

fn plan(home: &Path, targets: &str) -> Value {
    let out = rocmforge(home)
        .args(["--stack", "rocm-6.2", "plan", "hipblaslt", "--json", "--target", targets, "-j", "16"])
        .args(["--memory-gb", "64"])
        .timeout(TIMEOUT)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn hipblaslt(plan: &Value) -> Value {
    plan["recipes"].as_array().unwrap().iter().find(|r| r["name"] == "hipblaslt").unwrap().clone()
}

fn checks(e: &Value) -> Vec<String> {
    e["checks"].as_array().map(|a| a.iter().map(|c| c.as_str().unwrap().to_string()).collect()).unwrap_or_default()
}

#[test]
fn hipblaslt_plans_the_real_library_for_targets_with_kernels_and_the_stand_in_for_gfx10() {
    let home = tempfile::tempdir().unwrap();
    // A target with kernels: the real library, with Tensile, its full estimate, no stand-in check.
    let real = hipblaslt(&plan(home.path(), "gfx90a"));
    assert_eq!(real["targets"]["decision"], "build", "{real}");
    assert_eq!(real["targets"]["targets"], serde_json::json!(["gfx90a"]));
    assert_eq!(real["estimate"]["parallel_secs"], 12.0 * 3600.0, "{real}");
    assert!(!checks(&real).contains(&"hipblaslt-standin".to_string()), "{real}");
    assert_eq!(real["inputs"]["targets"], serde_json::json!(["gfx90a"]));
    // gfx1100 has kernels too.
    let rdna3 = hipblaslt(&plan(home.path(), "gfx1100"));
    assert_eq!(rdna3["targets"]["decision"], "build", "{rdna3}");

    // Only gfx10: the stand-in, its reason, its minutes-long estimate and its check.
    let stand_in = hipblaslt(&plan(home.path(), "gfx1010"));
    assert_eq!(stand_in["targets"]["decision"], "stand-in", "{stand_in}");
    assert_eq!(stand_in["targets"]["targets"], serde_json::json!(["gfx1010"]));
    assert!(stand_in["targets"]["reason"].as_str().unwrap().contains("hipBLASLt issue 648"), "{stand_in}");
    let secs =
        stand_in["estimate"]["serial_secs"].as_f64().unwrap() + stand_in["estimate"]["parallel_secs"].as_f64().unwrap();
    assert!(secs > 0.0 && secs < 3600.0, "the stand-in takes minutes, not hours: {stand_in}");
    assert_eq!(stand_in["estimate_from"], "recipe");
    assert!(checks(&stand_in).contains(&"hipblaslt-standin".to_string()), "{stand_in}");
    assert_eq!(
        stand_in["patches"],
        serde_json::json!(["0001-stand-in-without-tensile.patch", "0002-tensilelite-msgpack-cxx-any-major.patch"])
    );
    // The key says which build it is.
    assert_eq!(stand_in["inputs"]["targets"], serde_json::json!(["gfx1010", "stand-in"]));
    assert_ne!(stand_in["key"], real["key"]);

    // Mixed targets: one with kernels, so the real library, for it alone.
    let mixed = hipblaslt(&plan(home.path(), "gfx1010,gfx90a"));
    assert_eq!(mixed["targets"]["decision"], "build", "{mixed}");
    assert_eq!(mixed["targets"]["targets"], serde_json::json!(["gfx90a"]));
    assert_eq!(mixed["targets"]["dropped"], serde_json::json!(["gfx1010"]));
    assert_eq!(mixed["estimate"]["parallel_secs"], 12.0 * 3600.0, "{mixed}");
    assert!(!checks(&mixed).contains(&"hipblaslt-standin".to_string()), "{mixed}");

    // The text says which mode and why.
    let out = rocmforge(home.path())
        .args(["--stack", "rocm-6.2", "plan", "hipblaslt", "--target", "gfx1010", "-j", "16", "--memory-gb", "64"])
        .timeout(TIMEOUT)
        .output()
        .unwrap();
    let t = text(&out);
    assert!(
        t.contains("targets: gfx1010, as a stand-in without kernels (`[stand-in]`: hipBLASLt has no gfx10 kernels"),
        "{t}"
    );
}

// ---------------------------------------------------------------------------------------------
// The check, run for real.

fn check_dir() -> PathBuf {
    repo_root().join("recipes/checks/hipblaslt-standin")
}

fn fixture() -> PathBuf {
    repo_root().join("tests/fixtures/hipblaslt-standin")
}

fn need_tools() {
    for tool in ["g++", "nm", "python3"] {
        let ok = Command::new(tool).arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
        assert!(ok, "{tool} is needed (Debian 12: g++, binutils, python3; ci/setup.sh installs them)");
    }
}

/// An installed stand-in hipBLASLt in a temp prefix: the fixture's headers and its library built
/// with g++ (`defines` as -D flags).
fn installed(defines: &[&str]) -> tempfile::TempDir {
    need_tools();
    let prefix = tempfile::tempdir().unwrap();
    copy_tree(&fixture().join("include"), &prefix.path().join("include"));
    std::fs::create_dir_all(prefix.path().join("lib")).unwrap();
    let mut gxx = Command::new("g++");
    gxx.args(["-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden"])
        .arg(format!("-I{}", fixture().join("include").display()))
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg(fixture().join("libstandin.cpp"))
        .arg("-o")
        .arg(prefix.path().join("lib/libhipblaslt.so"));
    let out = gxx.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    prefix
}

/// check.py against `prefix`, as the recipe's step runs it (with g++ for the stack's compiler).
fn run_check(prefix: &Path) -> (i32, String) {
    let out = Command::new("python3")
        .arg(check_dir().join("check.py"))
        .args(["--cxx", "g++", "--prefix"])
        .arg(prefix)
        .arg("--work")
        .arg(prefix.join("out"))
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), text(&out))
}

/// The list's entries (header | symbol | call [| no-success]), as the check reads them.
fn listed() -> Vec<(String, String)> {
    std::fs::read_to_string(check_dir().join("symbols.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let p: Vec<&str> = l.split('|').map(str::trim).collect();
            (p[0].to_string(), p[1].to_string())
        })
        .collect()
}

#[test]
fn the_list_holds_every_public_function_of_the_three_headers_once() {
    let list = listed();
    // Counted by hand in the headers at rocm-6.2.2 (README.md of the check): 24 in hipblaslt.h,
    // 4 in hipblaslt-ext-op.h, 39 exported and out of line in hipblaslt-ext.hpp.
    let per = |h: &str| list.iter().filter(|(x, _)| x == h).count();
    assert_eq!((per("hipblaslt.h"), per("hipblaslt-ext-op.h"), per("hipblaslt-ext.hpp")), (24, 4, 39));
    let mut names: Vec<&String> = list.iter().map(|(_, s)| s).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), list.len(), "a symbol listed twice");
}

#[test]
fn the_check_passes_against_a_stand_in_defining_every_listed_function() {
    let prefix = installed(&[]);
    let (code, out) = run_check(prefix.path());
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "hipblaslt-standin: {} public functions called, each a clean status; 3 probes as against 6.2.4",
            listed().len()
        )),
        "{out}"
    );
    assert!(out.contains("  ok hipblasLtMatmul: status 1"), "{out}");
    assert!(
        out.contains("  probe HIPBLASLT_HAS_GETINDEXFROMALGO: ON (probe-getindexfromalgo.cpp compiles and links: yes)"),
        "{out}"
    );
    assert!(out.contains("  probe HIPBLASLT_CUSTOM_DATA_TYPE: OFF"), "{out}");
}

#[test]
fn the_check_fails_naming_the_function_a_library_lacks() {
    let prefix = installed(&["OMIT_GET_INDEX_FROM_ALGO"]);
    let (code, out) = run_check(prefix.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("lacks 1 of the {} public functions:", listed().len())), "{out}");
    assert!(
        out.contains("  hipblaslt_ext::getIndexFromAlgo(_hipblasLtMatmulAlgo_t&) (hipblaslt-ext.hpp; symbols.txt:"),
        "{out}"
    );
}

#[test]
fn the_check_fails_naming_the_call_that_aborts() {
    let prefix = installed(&["ABORT_IN_MATMUL"]);
    let (code, out) = run_check(prefix.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("hipblaslt-standin: 1 problem(s):"), "{out}");
    assert!(out.contains("  hipblasLtMatmul: signal 6, not a status (symbols.txt:"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// The engine builds what the plan says: a stand-in's args and checks, only for it.

const STACK: &str =
    "[stack]\nname = \"si\"\nrocm-version = \"6.2.4\"\nsummary = \"a stand-in\"\ndefault-targets = [\"gfx1010\"]\n";

/// A cmake recipe with kernels for gfx90a only whose project installs `share/mode.txt` holding
/// `-DMODE`: `real` from `[build] args`, `stand-in` when the `[stand-in]` args come after them.
const LIB: &str = r#"[package]
name = "lib"
version = "1"
summary = "a library with kernels for gfx90a only"

[build]
system = "cmake"
steps = ["printf '%s\\n' 'cmake_minimum_required(VERSION 3.16)' 'project(p NONE)' 'file(WRITE ${{CMAKE_BINARY_DIR}}/mode.txt \"${{MODE}}\")' 'install(FILES ${{CMAKE_BINARY_DIR}}/mode.txt DESTINATION share)' > CMakeLists.txt"]
args = ["-DMODE=real"]

[targets]
supported = ["gfx90a"]
when-unsupported = "stand-in"
reason = "no kernels for it"

[stand-in]
args = ["-DMODE=stand-in"]

[[stand-in.check]]
name = "probe"
files = "probe"
steps = ["cp {installed}/share/mode.txt seen.txt"]
"#;

#[test]
fn the_build_of_a_stand_in_takes_its_args_and_runs_its_check_and_the_real_build_neither() {
    let home = tempfile::tempdir().unwrap();
    let tree = home.path().join("tree");
    for (path, body) in [
        ("recipes/si/stack.toml", STACK),
        ("recipes/si/lib.toml", LIB),
        ("recipes/checks/probe/README", "the stand-in's check\n"),
    ] {
        let p = tree.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    let build = |target: &str, prefix: &str| {
        let out = rocmforge(home.path())
            .arg("--recipes")
            .arg(&tree)
            .args(["--stack", "si", "build", "lib", "--target", target, "--prefix"])
            .arg(home.path().join(prefix))
            .timeout(TIMEOUT)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        std::fs::read_to_string(home.path().join(prefix).join("share/mode.txt")).unwrap()
    };
    let seen = home.path().join("cache/rocmforge/work/si/lib/build/checks/probe/seen.txt");
    assert_eq!(build("gfx1010", "p1"), "stand-in");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "stand-in", "the stand-in's check ran on what it installed");
    std::fs::remove_file(&seen).unwrap();
    assert_eq!(build("gfx90a", "p2"), "real");
    assert!(!seen.exists(), "the real build runs no stand-in check");
}

/// hipBLASLt's public header includes `<hipblas/hipblas.h>`, which a night installs in hipBLAS's
/// root, not in the installation (`{rocm}`: the first real night stopped there). The recipe's
/// own step, placeholders filled with separate roots, finds it; without `{root:hipblas}` it fails
/// naming the header.
#[test]
fn the_recipes_check_step_finds_hipblas_headers_in_hipblas_own_root() {
    let prefix = installed(&[]);
    let header = prefix.path().join("include/hipblaslt/hipblaslt.h");
    let body = std::fs::read_to_string(&header).unwrap();
    std::fs::write(&header, format!("#include <hipblas/hipblas.h>\n{body}")).unwrap();
    let roots = tempfile::tempdir().unwrap();
    let hipblas = roots.path().join("hipblas");
    std::fs::create_dir_all(hipblas.join("include/hipblas")).unwrap();
    std::fs::write(hipblas.join("include/hipblas/hipblas.h"), "#pragma once\n").unwrap();
    for empty in ["clr", "rocm"] {
        std::fs::create_dir_all(roots.path().join(empty).join("include")).unwrap();
    }
    let recipe: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo_root().join("recipes/rocm-6.2/hipblaslt.toml")).unwrap()).unwrap();
    let step = recipe["stand-in"]["check"][0]["steps"][0].as_str().unwrap().to_string();
    let run = |step: &str| {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(&check_dir(), dir.path());
        let filled = step
            .replace("{installed}", prefix.path().to_str().unwrap())
            .replace("{root:hipblas}", hipblas.to_str().unwrap())
            .replace("{root:clr}", roots.path().join("clr").to_str().unwrap())
            .replace("{rocm}", roots.path().join("rocm").to_str().unwrap());
        assert!(!filled.contains('{'), "a placeholder this test does not fill: {filled}");
        let out = Command::new("sh").arg("-c").arg(&filled).current_dir(dir.path()).output().unwrap();
        (out.status.code().unwrap_or(-1), text(&out))
    };
    let (code, out) = run(&step);
    assert_eq!(code, 0, "{step}\n{out}");
    let without = step.replace("--rocm {root:hipblas} ", "");
    assert_ne!(without, step, "the step names hipBLAS's root: {step}");
    let (code, out) = run(&without);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("hipblas/hipblas.h"), "{out}");
}
