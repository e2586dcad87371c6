//! The rocPRIM look-back fence check (`recipes/checks/rocprim-lookback-fence/check.py`, issue 29
//! item 2) run for real: Debian's hipcc 5.2 (clang 15, whose gfx10 agent-scope acquire is
//! `buffer_gl0_inv` then `buffer_gl1_inv`, the order llvm/llvm-project PR 81450 fixed) compiles
//! the check's own HIP program against a stand-in rocPRIM tree (tests/fixtures/lookback-fence,
//! written here), and Debian's llvm-objdump 15 disassembles it.
//!
//! Unpatched, the check fails naming the look-back kernel; with the stack's patch
//! `patches/rocm-5.4/rocprim/0001-*.patch` applied to the stand-in (the same `git apply` the
//! upstream file takes) it passes. A fence in the fixed compiler's order passes too, and code
//! without a device fence fails rather than passing for want of anything to check.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{copy_tree, repo_root};

const OBJDUMP: &str = "/usr/lib/llvm-15/bin/llvm-objdump";

fn check_dir() -> PathBuf {
    repo_root().join("recipes/checks/rocprim-lookback-fence")
}

/// The patch the rocm-5.4 rocPRIM recipe applies (its only one).
fn patch() -> PathBuf {
    let dir = repo_root().join("patches/rocm-5.4/rocprim");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains("lookback-fence"))
        .collect();
    assert_eq!(found.len(), 1, "one look-back fence patch in {}: {found:?}", dir.display());
    found.pop().unwrap()
}

/// A fresh copy of the stand-in tree (its root is the rocPRIM repository root).
fn stand_in() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo_root().join("tests/fixtures/lookback-fence"), dir.path());
    dir
}

fn thread_hpp(tree: &Path) -> PathBuf {
    tree.join("rocprim/include/rocprim/intrinsics/thread.hpp")
}

/// Replaces the body of the stand-in's memory_fence_device().
fn set_fence(tree: &Path, body: &str) {
    let p = thread_hpp(tree);
    let text = std::fs::read_to_string(&p).unwrap();
    let old = "    void memory_fence_device()\n    {\n        ::__threadfence();\n    }\n";
    assert_eq!(text.matches(old).count(), 1, "the stand-in's fence in {}", p.display());
    std::fs::write(&p, text.replace(old, &format!("    void memory_fence_device()\n    {{\n{body}    }}\n"))).unwrap();
}

/// check.py with Debian's hipcc for `targets`, the stand-in tree as rocPRIM's include dir.
fn run_check(tree: &Path, targets: &str) -> (i32, String) {
    for tool in ["hipcc", OBJDUMP, "python3"] {
        let ok = Command::new(tool).arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
        assert!(ok, "{tool} is needed (Debian 12: hipcc, llvm-15, python3; ci/setup.sh installs them)");
    }
    let work = tree.join("work");
    let out: Output = Command::new("python3")
        .arg(check_dir().join("check.py"))
        .args(["--cxx", "hipcc", "--targets", targets, "--objdump", OBJDUMP])
        .arg("--include")
        .arg(tree.join("rocprim/include"))
        .arg("--work")
        .arg(&work)
        .env("HIP_PLATFORM", "amd")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The compiler's own pairs the check reports for a gfx10 target: (gl0;gl1, gl1;gl0).
fn pairs(text: &str, target: &str) -> (usize, usize) {
    let line = text
        .lines()
        .find(|l| {
            (l.starts_with(&format!("PASS {target}: ")) || l.starts_with(&format!("FAIL {target}: ")))
                && l.contains("pairs as emitted")
        })
        .unwrap_or_else(|| panic!("no summary line for {target}:\n{text}"));
    let rest = line.split("pairs as emitted: ").nth(1).unwrap_or_else(|| panic!("{line}"));
    let n = |s: &str| s.trim().split(' ').next().unwrap().parse::<usize>().unwrap();
    let (a, b) = rest.split_once(", ").unwrap();
    (n(a), n(b))
}

#[test]
fn unpatched_fails_naming_the_kernel_and_patch_0001_makes_it_pass() {
    let tree = stand_in();
    let (code, text) = run_check(tree.path(), "gfx1010;gfx900");
    assert_eq!(code, 1, "unpatched stand-in must fail:\n{text}");
    let fails: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL gfx1010: _Z")).collect();
    assert_eq!(fails.len(), 2, "one failing sequence per scan kernel (int64, double):\n{text}");
    for l in &fails {
        assert!(
            l.contains("lookback_scan_kernel")
                && l.contains("buffer_gl1_inv at 0x")
                && l.contains("global_load_dwordx2"),
            "the failure names the kernel, the invalidate and the load it reaches: {l}"
        );
    }
    assert!(fails.iter().any(|l| l.contains("lookback_scan_kernelIx")), "int64 kernel named:\n{text}");
    assert!(fails.iter().any(|l| l.contains("lookback_scan_kernelId")), "double kernel named:\n{text}");
    // clang 15 orders the pair as compilers before llvm/llvm-project PR 81450 do.
    let (gl0_first, gl1_first) = pairs(&text, "gfx1010");
    assert!(gl0_first > 0 && gl1_first == 0, "clang 15 emits gl0_inv;gl1_inv:\n{text}");
    // gfx9 has one cache level: nothing to order, the fence only has to be there.
    assert!(text.contains("PASS gfx900: one cache level per CU"), "{text}");

    let st =
        Command::new("git").current_dir(tree.path()).args(["apply", "--check", "-p1"]).arg(patch()).status().unwrap();
    assert!(st.success(), "patch 0001 applies to the stand-in");
    let st = Command::new("git").current_dir(tree.path()).args(["apply", "-p1"]).arg(patch()).status().unwrap();
    assert!(st.success());
    assert!(std::fs::read_to_string(thread_hpp(tree.path())).unwrap().contains("buffer_gl0_inv"));

    let (code, text) = run_check(tree.path(), "gfx1010;gfx900");
    assert_eq!(code, 0, "patched stand-in must pass:\n{text}");
    assert!(text.contains("PASS gfx1010: ") && !text.contains("FAIL"), "{text}");
}

#[test]
fn the_fixed_compiler_order_passes_and_no_fence_fails() {
    // What a compiler with PR 81450 emits for the acquire: L1 first, then L0.
    let tree = stand_in();
    set_fence(
        tree.path(),
        "        __builtin_amdgcn_fence(__ATOMIC_RELEASE, \"agent\");\n        \
         asm volatile(\"buffer_gl1_inv\\n\\tbuffer_gl0_inv\" ::: \"memory\");\n",
    );
    let (code, text) = run_check(tree.path(), "gfx1010");
    assert_eq!(code, 0, "gl1 then gl0 is the right order:\n{text}");
    assert!(text.contains("PASS gfx1010: "), "{text}");
    let (gl0_first, gl1_first) = pairs(&text, "gfx1010");
    assert!(gl0_first == 0 && gl1_first > 0, "the pairs are reported in the fixed order:\n{text}");

    // The wrong order written out by hand fails the same way the compiler's does.
    let tree = stand_in();
    set_fence(
        tree.path(),
        "        __builtin_amdgcn_fence(__ATOMIC_RELEASE, \"agent\");\n        \
         asm volatile(\"buffer_gl0_inv\\n\\tbuffer_gl1_inv\" ::: \"memory\");\n",
    );
    let (code, text) = run_check(tree.path(), "gfx1010");
    assert_eq!(code, 1, "gl0 then gl1 leaves L0 stale:\n{text}");
    assert!(text.contains("FAIL gfx1010: _ZN7rocprim6detail20lookback_scan_kernel"), "{text}");

    // No agent-scope fence at all: nothing to check is a failure, not a pass.
    let tree = stand_in();
    set_fence(tree.path(), "        ::__threadfence_block();\n");
    let (code, text) = run_check(tree.path(), "gfx1010;gfx900");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL gfx1010: no buffer_gl1_inv"), "{text}");
    assert!(text.contains("FAIL gfx900: no agent-scope invalidate"), "{text}");
}
