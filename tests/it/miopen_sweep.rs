//! The MIOpen kernel sweep (recipes/checks/miopen-sweep/sweep.py), run as the rocm-6.2 miopen
//! recipe's `[[check]] kernel-sweep-gfx101x` runs it, against a stand-in MIOpen tree written
//! for these tests (tests/fixtures/miopen-sweep/: its README says what each kernel is), with
//! Debian's clang-15 and device libraries. A kernel that fails on gfx1010 alone fails the sweep
//! naming it and the compiler's message; named in a known file it passes as known; a known
//! entry that compiles is stale; a kernel that fails on the control gfx900 too is the sweep's
//! sample values (inconclusive), not the target's; a solver refusing gfx10 skips its kernel.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::repo_root;

const CLANG: &str = "/usr/lib/llvm-15/bin/clang";
const DEVICE_LIBS: &str = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";

/// Runs sweep.py for gfx1010 (control gfx900) on the stand-in tree; `known` is written to a
/// known file when given. Returns the exit code and stdout + stderr.
fn sweep(dir: &Path, known: Option<&str>, only: Option<&str>) -> (i32, String) {
    assert!(Path::new(CLANG).is_file(), "{CLANG} is missing: install Debian 12's clang-15");
    assert!(
        Path::new(DEVICE_LIBS).join("ockl.bc").is_file(),
        "{DEVICE_LIBS}/ockl.bc is missing: install Debian 12's rocm-device-libs"
    );
    let script: PathBuf = repo_root().join("recipes/checks/miopen-sweep/sweep.py");
    let mut c = Command::new("python3");
    c.arg(&script)
        .arg("--src")
        .arg(repo_root().join("tests/fixtures/miopen-sweep"))
        .args(["--clang", CLANG, "--targets", "gfx1010", "--device-libs", DEVICE_LIBS, "--jobs", "2"])
        .arg("--work")
        .arg(dir.join("kernels"))
        .current_dir(dir);
    if let Some(k) = known {
        std::fs::write(dir.join("known.txt"), k).unwrap();
        c.args(["--known", "known.txt"]);
    }
    if let Some(o) = only {
        c.args(["--only", o]);
    }
    let out = c.output().expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The report line of `kernel`.
fn line<'a>(text: &'a str, kernel: &str) -> &'a str {
    text.lines().find(|l| l.contains(&format!(" {kernel} "))).unwrap_or_else(|| panic!("no line for {kernel}:\n{text}"))
}

#[test]
fn a_kernel_that_fails_on_gfx1010_alone_fails_the_sweep_naming_it_and_the_compilers_message() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = sweep(dir.path(), None, None);
    assert_eq!(code, 1, "{text}");
    let dpp = line(&text, "MIOpenFixtureDpp.cl");
    assert!(dpp.starts_with("FAILED ") && dpp.contains("gfx1010"), "{text}");
    // The compiler's message follows the line, with the file:line in the tree.
    let after = text.split(dpp).nth(1).unwrap();
    assert!(
        after.starts_with("\n             | src/kernels/MIOpenFixtureDpp.cl:6:22: error: not a valid operand."),
        "{text}"
    );
    // The others: compiles; fails on gfx900 too; refused by its solver (at the refusing line).
    assert!(line(&text, "MIOpenFixtureCopy.cl").starts_with("ok "), "{text}");
    assert!(line(&text, "MIOpenFixtureTiles.cl").starts_with("inconclusive "), "{text}");
    let skip = line(&text, "fixture_gfx9_only.s");
    assert!(
        skip.starts_with("skipped ") && skip.contains("fixture_gfx9.cpp:5 `if(!StartsWith(name, \"gfx9\"))`"),
        "{text}"
    );
    assert!(
        text.contains("summary: gfx1010: 1 FAILED, 1 inconclusive, 1 ok, 1 skipped; control gfx900: 3 compiles"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("FAIL"), "{text}");
    // Each compile leaves its log: the command and the compiler's output.
    let log = std::fs::read_to_string(dir.path().join("kernels/gfx1010.MIOpenFixtureDpp.cl.-.log")).unwrap();
    assert!(log.starts_with(CLANG) && log.contains("-mcpu=gfx1010") && log.contains("not a valid operand"), "{log}");
}

#[test]
fn a_failure_named_in_the_known_file_passes_and_is_reported_as_known_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let known = "# stand-in\nMIOpenFixtureDpp.cl gfx101* DPP row_bcast, gfx9 only (a patch pending)\n";
    let (code, text) = sweep(dir.path(), Some(known), Some("Dpp"));
    assert_eq!(code, 0, "{text}");
    let dpp = line(&text, "MIOpenFixtureDpp.cl");
    assert!(
        dpp.starts_with("known ") && dpp.contains("DPP row_bcast, gfx9 only (a patch pending) (known.txt:2)"),
        "{text}"
    );
    assert!(text.contains("not a valid operand"), "{text}");
    assert!(text.contains("summary: gfx1010: 1 known;") && text.trim_end().ends_with("PASS"), "{text}");
}

#[test]
fn a_known_entry_that_compiles_now_is_stale_and_fails_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let known = "MIOpenFixtureCopy.cl gfx1010 said to fail once\n";
    let (code, text) = sweep(dir.path(), Some(known), Some("Copy"));
    assert_eq!(code, 1, "{text}");
    assert!(line(&text, "MIOpenFixtureCopy.cl").starts_with("ok "), "{text}");
    assert!(
        text.contains("STALE   MIOpenFixtureCopy.cl gfx1010 compiles now; known.txt:1 names it as failing"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("FAIL"), "{text}");
}

#[test]
fn a_kernel_that_fails_on_the_control_too_is_inconclusive_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = sweep(dir.path(), None, Some("Tiles"));
    assert_eq!(code, 0, "{text}");
    let tiles = line(&text, "MIOpenFixtureTiles.cl");
    assert!(tiles.starts_with("inconclusive ") && tiles.contains("fails on the control gfx900 too"), "{text}");
    assert!(text.contains("MLO_FIXTURE_TILES must be at least 2"), "{text}");
    assert!(text.contains("summary: gfx1010: 1 inconclusive;") && text.trim_end().ends_with("PASS"), "{text}");
}
