//! `rocmforge verify` against a stand-in Python: a shell script that ignores the torch code and
//! does per case what a control file says: pass, raise, crash by a signal, or hang (with a child
//! that ignores SIGTERM and one in its own session). Hangs are reported within the timeout, the
//! run goes on to the next case, nothing of a case is left running (processes are found in /proc
//! by a marker in their environment), and the exit status says whether the profile expected it.

use crate::support::text;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::rocmforge;

const STACK: &str = r#"[stack]
name = "verifystack"
rocm-version = "5.7"
summary = "a binary stack for verify tests"
default-targets = ["gfx1010"]
default = true
default-profile = "gemm-only"

[profile.gemm-only]
description = "known to hang on 16->32 at 48x48"
env = { HSA_OVERRIDE_GFX_VERSION = "10.3.0", MIOPEN_DEBUG_CONV_GEMM = "1" }
known-hangs = ["conv-16-32-s48-k3-b1"]
"#;

const WHEEL_RECIPE: &str = "[package]\nname = \"w\"\nversion = \"1.0\"\nsummary = \"x\"\n\n[source]\nurl = \"https://example.invalid/w-1.0-py3-none-any.whl\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\n\n[build]\nsystem = \"prebuilt-wheel\"\n\n[targets]\ngpu = false\n";

/// The stand-in: `python <script> <case json>`. It records the environment the case ran with.
const STAND_IN: &str = r#"#!/bin/bash
id=$(printf '%s' "$2" | sed -e 's/.*"id":"\([^"]*\)".*/\1/')
what=$(awk -v id="$id" '$1 == id { print $2 }' "$RF_VERIFY_CONTROL")
env > "$RF_VERIFY_ENVS/$id"
export RF_VERIFY_MARK
case "$what" in
  raise) printf 'Traceback (most recent call last):\n  File "case.py", line 9\nRuntimeError: HIP error: invalid device function\n' >&2; exit 1 ;;
  crash) kill -SEGV $$ ;;
  hang)
    bash -c 'trap "" TERM; while :; do sleep 1; done' &
    setsid bash -c 'sleep 300' &
    sleep 300 ;;
  *) echo 'ROCMFORGE-RESULT {"first": 1.25, "cached": 0.004}' ;;
esac
"#;

/// The marked processes alive now.
fn marked(mark: &str) -> Vec<i32> {
    crate::support::processes_with_env("RF_VERIFY_MARK", mark)
}

struct Verify {
    home: tempfile::TempDir,
    tree: PathBuf,
    python: PathBuf,
    control: PathBuf,
    envs: PathBuf,
    mark: String,
}

impl Verify {
    fn new() -> Verify {
        let home = tempfile::tempdir().unwrap();
        let tree = home.path().join("tree");
        let dir = tree.join("recipes/verifystack");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stack.toml"), STACK).unwrap();
        std::fs::write(dir.join("w.toml"), WHEEL_RECIPE).unwrap();
        let python = home.path().join("stand-in-python");
        std::fs::write(&python, STAND_IN).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let envs = home.path().join("envs");
        std::fs::create_dir_all(&envs).unwrap();
        let mark = format!("verify-{}-{}", std::process::id(), home.path().file_name().unwrap().to_string_lossy());
        let control = home.path().join("control");
        Verify { home, tree, python, control, envs, mark }
    }

    fn control(&self, lines: &[(&str, &str)]) {
        let t: String = lines.iter().map(|(id, what)| format!("{id} {what}\n")).collect();
        std::fs::write(&self.control, t).unwrap();
    }

    fn run(&self, args: &[&str]) -> Output {
        rocmforge(self.home.path())
            .arg("--recipes")
            .arg(&self.tree)
            .arg("verify")
            .arg("--python")
            .arg(&self.python)
            .args(args)
            .env("RF_VERIFY_CONTROL", &self.control)
            .env("RF_VERIFY_ENVS", &self.envs)
            .env("RF_VERIFY_MARK", &self.mark)
            .env("MIOPEN_DEBUG_CONV_GEMM", "0")
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap()
    }

    fn case_env(&self, id: &str) -> String {
        std::fs::read_to_string(self.envs.join(id)).unwrap_or_else(|e| panic!("case {id} did not run: {e}"))
    }

    fn state(&self) -> &Path {
        self.home.path()
    }
}

#[test]
fn hangs_are_reported_within_the_timeout_the_run_goes_on_and_nothing_is_left() {
    let v = Verify::new();
    v.control(&[
        ("conv-3-64-s40-k3-b1", "raise"),
        ("conv-3-64-s44-k3-b1", "crash"),
        ("conv-3-64-s64-k3-b1", "hang"),
        ("conv-16-32-s48-k3-b1", "hang"),
    ]);
    let start = Instant::now();
    let out = v.run(&["--timeout", "1"]);
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "an unexpected hang and errors fail the run: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = |id: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{stdout}"))
    };
    assert!(line("conv-3-64-s32-k3-b1").ends_with("  pass"), "{stdout}");
    assert!(line("conv-3-64-s32-k3-b1").contains("1.250s") && line("conv-3-64-s32-k3-b1").contains("0.004s"));
    assert!(
        line("conv-3-64-s40-k3-b1").contains("error: exit status 1: RuntimeError: HIP error: invalid device function"),
        "{stdout}"
    );
    assert!(line("conv-3-64-s44-k3-b1").contains("error: killed by signal 11 (SIGSEGV)"), "{stdout}");
    assert!(line("conv-3-64-s64-k3-b1").contains("HANG after"), "{stdout}");
    assert!(!line("conv-3-64-s64-k3-b1").contains("known"), "{stdout}");
    assert!(line("conv-16-32-s48-k3-b1").contains("HANG (known)"), "{stdout}");
    // The run went on after each hang, to the last case.
    assert!(line("matmul-1024").ends_with("  pass"), "{stdout}");
    assert!(stdout.contains("26 case(s): 22 pass, 1 known hang(s), 3 unexpected"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("compiles MIOpen's kernels"), "{stderr}");
    // Two hangs of 1 s each, 24 quick cases: far from 2 x 300 s.
    assert!(took < Duration::from_secs(40), "took {took:?}");
    assert!(marked(&v.mark).is_empty(), "processes left behind: {:?}", marked(&v.mark));

    // The report: the same results, each hang ended within the timeout and its grace.
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(v.state().join("state/rocmforge/verify/verifystack/latest.json")).unwrap(),
    )
    .unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 26);
    let hang = results.iter().find(|r| r["id"] == "conv-3-64-s64-k3-b1").unwrap();
    assert_eq!(hang["result"], "hang");
    assert!(hang["wall_s"].as_f64().unwrap() < 3.0, "{hang}");
    assert_eq!(report["unexpected"], 3);
    assert_eq!(report["profile"], "gemm-only");

    // Every case ran with the profile's settings over the caller's, and one shared MIOpen cache.
    let env = v.case_env("conv-3-64-s32-k3-b1");
    assert!(env.lines().any(|l| l == "MIOPEN_DEBUG_CONV_GEMM=1"), "{env}");
    assert!(env.lines().any(|l| l == "HSA_OVERRIDE_GFX_VERSION=10.3.0"), "{env}");
    let db = |id: &str| v.case_env(id).lines().find(|l| l.starts_with("MIOPEN_USER_DB_PATH=")).map(str::to_string);
    assert!(db("conv-3-64-s32-k3-b1").is_some());
    assert_eq!(db("conv-3-64-s32-k3-b1"), db("matmul-1024"));
}

#[test]
fn a_known_hang_alone_passes_and_json_is_the_report() {
    let v = Verify::new();
    v.control(&[("conv-16-32-s48-k3-b1", "hang")]);
    let out = v.run(&["--timeout", "1", "--json", "--case", "conv-16-32-s48-k3-b1", "--case", "conv-3-64-s32-k3-b1"]);
    assert!(out.status.success(), "a hang the profile lists is expected: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["result"], "pass");
    assert_eq!(results[1]["result"], "hang");
    assert_eq!(results[1]["known_hang"], true);
    assert_eq!(report["unexpected"], 0);
    assert!(marked(&v.mark).is_empty(), "processes left behind: {:?}", marked(&v.mark));

    let out = v.run(&["--case", "conv-9-9-s1-k1-b1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no case `conv-9-9-s1-k1-b1`"), "{}", text(&out));
}

/// The real case script under a real Python without torch: it parses its case and fails with
/// the import error, which the row shows (on a machine with the stack, this is where it runs).
#[test]
fn the_case_script_runs_under_a_real_python_and_its_error_is_shown() {
    let v = Verify::new();
    let python3 = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 on PATH");
    let out = rocmforge(v.home.path())
        .arg("--recipes")
        .arg(&v.tree)
        .args(["verify", "--timeout", "60", "--case", "matmul-1024", "--python"])
        .arg(&python3)
        .env("PYTHONNOUSERSITE", "1")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("matmul-1024")
            && stdout.contains("error: exit status 1: ModuleNotFoundError: No module named 'torch'"),
        "{}",
        text(&out)
    );
}
