//! `rocmforge verify` against a stand-in Python: a shell script that ignores the torch code and
//! does per case what a control file says: pass, raise, crash by a signal, report a wrong result
//! as case.py does, or hang (with a child that ignores SIGTERM and one in its own session). Hangs
//! are reported within the timeout, the run goes on to the next case, nothing of a case is left
//! running (processes are found in /proc by a marker in their environment), and the exit status
//! says whether the profile expected it. The host is a fake one (`ROCMFORGE_HOST_ROOT`) with an
//! RX 5700 XT, so the card line is known.

use crate::support::{scrub, text};
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
known-failures = ["sdpa", "torch-compile"]
"#;

const WHEEL_RECIPE: &str = "[package]\nname = \"w\"\nversion = \"1.0\"\nsummary = \"x\"\n\n[source]\nurl = \"https://example.invalid/w-1.0-py3-none-any.whl\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\n\n[build]\nsystem = \"prebuilt-wheel\"\n\n[targets]\ngpu = false\n";

/// The difference a wrong case reports, in the form case.py's `difference` writes it.
const WRONG: &str = "grad weight (first call): max abs diff 0.31 > tolerance 0.0012 (float32: atol 1e-05 + rtol 0.001 x largest reference magnitude 1.19)";

/// A repetition of a repeated case that differs, as case.py names it.
const WRONG_REPETITION: &str = "int64 cumsum, repetition 3 of 8 (cached call): 2 of 3000017 values differ from the reference (exact comparison), the first at flat index 2999999: 5 instead of 7";

/// What case.py's `torch-compile` exits with on a GPU torch without Triton (torch 2.6's
/// RuntimeError inside Dynamo's BackendCompilerFailed): the reason first, then what torch raised.
const NO_TRITON: &str = "no Triton installed (torch.compile's GPU backend, Inductor, needs it; `import triton`: No module named 'triton'): BackendCompilerFailed: RuntimeError: Cannot find a working triton installation. Either the package is not installed or it is too old.";

/// The stand-in: `python <script> <case json>`. It records the environment the case ran with and
/// prints the torch line as case.py does.
const STAND_IN: &str = r#"#!/bin/bash
id=$(printf '%s' "$2" | sed -e 's/.*"id":"\([^"]*\)".*/\1/')
what=$(awk -v id="$id" '$1 == id { print $2 }' "$RF_VERIFY_CONTROL")
env > "$RF_VERIFY_ENVS/$id"
export RF_VERIFY_MARK
printf 'ROCMFORGE-TORCH {"torch": "2.6.0+rocm6.2.4.gfx1010", "hip": "6.2.41134-0", "device": "%s"}\n' "${ROCMFORGE_VERIFY_DEVICE:-cuda}"
case "$what" in
  raise) printf 'Traceback (most recent call last):\n  File "case.py", line 9\nRuntimeError: HIP error: invalid device function\n' >&2; exit 1 ;;
  crash) kill -SEGV $$ ;;
  wrong) echo "ROCMFORGE-WRONG $RF_VERIFY_WRONG"; echo "$RF_VERIFY_WRONG" >&2; exit 1 ;;
  wrongrep) echo "ROCMFORGE-WRONG $RF_VERIFY_WRONG_REPETITION"; echo "$RF_VERIFY_WRONG_REPETITION" >&2; exit 1 ;;
  notriton) echo "$RF_VERIFY_NO_TRITON" >&2; exit 1 ;;
  hang)
    bash -c 'trap "" TERM; while :; do sleep 1; done' &
    setsid bash -c 'sleep 300' &
    sleep 300 ;;
  escape)
    (setsid env -i RF_VERIFY_ESCAPED="$RF_VERIFY_MARK" sleep 300 &)
    echo 'ROCMFORGE-RESULT {"first": 1.25, "cached": 0.004}' ;;
  hangescape)
    (setsid env -i RF_VERIFY_ESCAPED="$RF_VERIFY_MARK" sleep 300 &)
    bash -c 'trap "" TERM; while :; do sleep 1; done' &
    sleep 300 ;;
  *) echo 'ROCMFORGE-RESULT {"first": 1.25, "cached": 0.004}' ;;
esac
"#;

/// The `python3` on `PATH`.
fn python3() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 on PATH")
}

/// The marked processes alive now.
fn marked(mark: &str) -> Vec<i32> {
    crate::support::procs::processes_with_env("RF_VERIFY_MARK", mark)
}

/// The escapees alive now: processes of a case that left its process group (`setsid`) and its
/// environment (`env -i`: no token, no mark but this one), whose parent ended.
fn escaped(mark: &str) -> Vec<i32> {
    crate::support::procs::processes_with_env("RF_VERIFY_ESCAPED", mark)
}

/// Kills what a failed test left (so it does not outlive the test run), and says what it was.
fn left_behind(mark: &str) -> Vec<i32> {
    let left: Vec<i32> = marked(mark).into_iter().chain(escaped(mark)).collect();
    for pid in &left {
        if let Some(p) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    left
}

struct Verify {
    home: tempfile::TempDir,
    tree: PathBuf,
    python: PathBuf,
    control: PathBuf,
    envs: PathBuf,
    mark: String,
    host: PathBuf,
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
        // An RX 5700 XT as the amdgpu driver shows it, and AMD's packaged driver.
        let host = home.path().join("host");
        for (file, text) in [
            ("sys/class/kfd/kfd/topology/nodes/0/properties", "gfx_target_version 0\nvendor_id 0\ndevice_id 0\n"),
            (
                "sys/class/kfd/kfd/topology/nodes/1/properties",
                "gfx_target_version 100100\nvendor_id 4098\ndevice_id 29471\n",
            ),
            ("sys/module/amdgpu/version", "6.8.5\n"),
        ] {
            std::fs::create_dir_all(host.join(file).parent().unwrap()).unwrap();
            std::fs::write(host.join(file), text).unwrap();
        }
        Verify { home, tree, python, control, envs, mark, host }
    }

    fn stack_toml(&self) -> PathBuf {
        self.tree.join("recipes/verifystack/stack.toml")
    }

    /// Edits the stack file: `from` (which must be there) becomes `to`.
    fn edit_stack(&self, from: &str, to: &str) {
        let t = std::fs::read_to_string(self.stack_toml()).unwrap();
        assert!(t.contains(from), "`{from}` is not in the stack file:\n{t}");
        std::fs::write(self.stack_toml(), t.replace(from, to)).unwrap();
    }

    fn control(&self, lines: &[(&str, &str)]) {
        let t: String = lines.iter().map(|(id, what)| format!("{id} {what}\n")).collect();
        std::fs::write(&self.control, t).unwrap();
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(Some("verifystack"), &self.python, args, env)
    }

    /// `verify --python PY` on a stack, or without one (`stack` None: a torch rocmforge did not
    /// install).
    fn command(&self, stack: Option<&str>, python: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        assert_cmd::Command::from_std(self.process(stack, python, args, env))
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap()
    }

    /// The command [`Verify::command`] runs, to start and signal.
    fn process(
        &self,
        stack: Option<&str>,
        python: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> std::process::Command {
        self.process_in(Some(&self.tree), stack, python, args, env)
    }

    /// [`Verify::process`] on the recipes `recipes` (None: those embedded in rocmforge).
    fn process_in(
        &self,
        recipes: Option<&Path>,
        stack: Option<&str>,
        python: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> std::process::Command {
        let mut c = crate::support::rocmforge_process(self.home.path());
        if let Some(r) = recipes {
            c.arg("--recipes").arg(r);
        }
        if let Some(s) = stack {
            c.args(["--stack", s]);
        }
        c.arg("verify")
            .arg("--python")
            .arg(python)
            .args(args)
            .env("RF_VERIFY_CONTROL", &self.control)
            .env("RF_VERIFY_ENVS", &self.envs)
            .env("RF_VERIFY_MARK", &self.mark)
            .env("RF_VERIFY_WRONG", WRONG)
            .env("RF_VERIFY_WRONG_REPETITION", WRONG_REPETITION)
            .env("RF_VERIFY_NO_TRITON", NO_TRITON)
            .env("MIOPEN_DEBUG_CONV_GEMM", "0")
            .env("ROCMFORGE_HOST_ROOT", &self.host);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// The stand-in, but `probe.py` runs in a real python3 (with `flags`) whose `PYTHONPATH` is
    /// `site`.
    fn probing_python(&self, name: &str, site: &Path, flags: &str) -> PathBuf {
        let python = self.home.path().join(name);
        let probe = format!(
            "#!/bin/bash\ncase \"$1\" in */probe.py) PYTHONPATH={site:?} PYTHONNOUSERSITE=1 exec {:?} {flags} \"$@\" ;; esac\n",
            python3()
        );
        std::fs::write(&python, STAND_IN.replacen("#!/bin/bash\n", &probe, 1)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        python
    }

    fn report(&self, rel: &str) -> serde_json::Value {
        let file = self.state().join("state/rocmforge/verify/verifystack").join(rel);
        serde_json::from_slice(&std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))).unwrap()
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
        ("conv-bwd-32-64-s48-k3-b1", "wrong"),
        ("sdpa", "raise"),
        ("nonzero-repeat", "wrongrep"),
        ("torch-compile", "notriton"),
    ]);
    let cases = rocmforge::verify::matrix().len();
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
    // A wrong result is a failure of its own kind, with the difference; a known failure is known.
    assert!(line("conv-bwd-32-64-s48-k3-b1").ends_with(&format!("  WRONG: {WRONG}")), "{stdout}");
    assert!(line("sdpa").contains("error (known): exit status 1: RuntimeError"), "{stdout}");
    // A repeated case names the repetition that differed; torch.compile's reason is in the row.
    assert!(line("nonzero-repeat").ends_with(&format!("  WRONG: {WRONG_REPETITION}")), "{stdout}");
    assert!(line("torch-compile").ends_with(&format!("  error (known): exit status 1: {NO_TRITON}")), "{stdout}");
    // The new cases have their first-call and cached times as every other case.
    for id in ["cumsum-int64-repeat", "masked-select-repeat", "lstm", "gru"] {
        assert!(line(id).contains("1.250s") && line(id).ends_with("  pass"), "{stdout}");
    }
    // The run went on after each hang, to the last case.
    assert!(line("matmul-1024").ends_with("  pass"), "{stdout}");
    assert!(line("train-resnet").ends_with("  pass"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{cases} case(s): {} pass, 1 known hang(s), 2 known failure(s), 5 unexpected; torch 2.6.0+rocm6.2.4.gfx1010, HIP 6.2.41134-0; report ",
            cases - 8
        )),
        "{stdout}"
    );
    // The card and the driver, and how each was found.
    assert!(
        stdout.lines().any(|l| l == "card: gfx1010 (Navi 10 (RX 5600/5700, W5700)): KFD node 1, PCI 1002:731f"),
        "{stdout}"
    );
    assert!(stdout.lines().any(|l| l == "driver: amdgpu 6.8.5 (/sys/module/amdgpu/version)"), "{stdout}");
    assert!(!stdout.contains("CPU MODE"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("compiles MIOpen's kernels"), "{stderr}");
    // Two hangs of 1 s each, the other cases quick: far from 2 x 300 s.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(marked(&v.mark).is_empty(), "processes left behind: {:?}", marked(&v.mark));

    // The report: the same results, each hang ended within the timeout and its grace.
    let report = v.report("latest.json");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), cases);
    let result = |id: &str| results.iter().find(|r| r["id"] == id).unwrap();
    let hang = result("conv-3-64-s64-k3-b1");
    assert_eq!(hang["result"], "hang");
    assert!(hang["wall_s"].as_f64().unwrap() < 3.0, "{hang}");
    // The hang printed its torch line before it hung: it is kept.
    assert_eq!(hang["versions"]["torch"], "2.6.0+rocm6.2.4.gfx1010");
    let wrong = result("conv-bwd-32-64-s48-k3-b1");
    assert_eq!(
        (&wrong["result"], &wrong["message"], &wrong["expected"]),
        (&"wrong".into(), &WRONG.into(), &false.into())
    );
    let sdpa = result("sdpa");
    assert_eq!(
        (&sdpa["result"], &sdpa["known_failure"], &sdpa["expected"]),
        (&"error".into(), &true.into(), &true.into())
    );
    let compile = result("torch-compile");
    assert_eq!(
        (&compile["result"], &compile["message"], &compile["known_failure"], &compile["expected"]),
        (&"error".into(), &format!("exit status 1: {NO_TRITON}").into(), &true.into(), &true.into())
    );
    let repeated = result("nonzero-repeat");
    assert_eq!((&repeated["result"], &repeated["message"]), (&"wrong".into(), &WRONG_REPETITION.into()));
    let passed = result("cumsum-int64-repeat");
    assert_eq!((&passed["first_s"], &passed["cached_s"]), (&1.25.into(), &0.004.into()));
    assert_eq!(report["unexpected"], 5);
    assert_eq!(report["profile"], "gemm-only");
    assert_eq!(report["device"], "gpu");
    assert_eq!(report["torch"], "2.6.0+rocm6.2.4.gfx1010");
    assert_eq!(report["hip"], "6.2.41134-0");
    assert_eq!(report["card"], "gfx1010 (Navi 10 (RX 5600/5700, W5700)): KFD node 1, PCI 1002:731f");
    assert_eq!(report["gpus"][0]["pci_id"], "1002:731f");
    assert_eq!(report["driver"], "amdgpu 6.8.5 (/sys/module/amdgpu/version)");

    // Every case ran with the profile's settings over the caller's, and one shared MIOpen cache.
    let env = v.case_env("conv-3-64-s32-k3-b1");
    assert!(env.lines().any(|l| l == "MIOPEN_DEBUG_CONV_GEMM=1"), "{env}");
    assert!(env.lines().any(|l| l == "HSA_OVERRIDE_GFX_VERSION=10.3.0"), "{env}");
    let db = |id: &str| v.case_env(id).lines().find(|l| l.starts_with("MIOPEN_USER_DB_PATH=")).map(str::to_string);
    assert!(db("conv-3-64-s32-k3-b1").is_some());
    assert_eq!(db("conv-3-64-s32-k3-b1"), db("matmul-1024"));
    // No CPU mode unless the caller asks.
    assert!(!env.contains("ROCMFORGE_VERIFY_DEVICE"), "{env}");
}

/// The stand-in's wrong line has the form case.py writes: the tag, the tensor and call, then the
/// difference against the tolerance.
#[test]
fn the_stand_in_reports_a_difference_as_case_py_does() {
    let script = rocmforge::verify::CASE_SCRIPT;
    for piece in [
        "print(\"ROCMFORGE-WRONG \" + what",
        "wrong(f\"{name} ({call}): {d}\" + more)",
        "f\"max abs diff {diff:.3g} > tolerance {tol:.3g} \"",
        "f\"({DTYPE_NAME}: atol {atol:g} + rtol {rtol:g} x largest reference magnitude {scale:.3g})\"",
        "check(got, want, \"first call\")",
        "\"float32\": (1e-3, 1e-5)",
        // A repeated case's results are named by repetition, compared exactly.
        "out[f\"{name}, repetition {i + 1} of {reps}\"] = result",
        "return \"int64 cumsum\", (v,), lambda v: torch.cumsum(v, 0)",
        "f\"{n} of {want.numel()} values differ from the reference (exact comparison), the first at flat \"",
        // torch.compile without Triton: the reason, then what torch raised.
        "return f\"no Triton installed (torch.compile's GPU backend, Inductor, needs it; {state}): {raised}\"",
        "return None, f\"`import triton`: {one_line(e, 80)}\"",
        "\"working triton installation\" in str(x).lower()",
    ] {
        assert!(script.contains(piece), "case.py no longer has {piece}");
    }
}

/// `--markdown`: what a user pastes into an issue. Stable as it is: the stand-in's times are
/// fixed, a hang shows the timeout rather than its wall time, paths are scrubbed.
#[test]
fn markdown_is_a_table_to_paste_into_an_issue() {
    let v = Verify::new();
    v.control(&[
        ("conv-3-64-s40-k3-b1", "raise"),
        ("conv-3-64-s44-k3-b1", "crash"),
        ("conv-16-32-s48-k3-b1", "hang"),
        ("conv-bwd-3-64-s48-k3-b1", "wrong"),
        ("sdpa", "raise"),
        ("cumsum-int64-repeat", "wrongrep"),
        ("torch-compile", "notriton"),
    ]);
    let out = v.run(&["--timeout", "1", "--markdown"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("### rocmforge verify: verifystack\n"), "only the Markdown on stdout: {stdout}");
    insta::assert_snapshot!("verify_markdown", scrub(&stdout, v.home.path()));
}

/// CPU mode: only from the caller's environment, loud in every output, saved apart; any other
/// value of the variable is refused, and so is a profile that sets it.
#[test]
fn cpu_mode_comes_from_the_caller_only_and_says_so_loudly() {
    let v = Verify::new();
    v.control(&[]);
    let cpu = [("ROCMFORGE_VERIFY_DEVICE", "cpu")];
    let out = v.run_with(&["--case", "conv-3-64-s32-k3-b1"], &cpu);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let loud = "CPU MODE: this tests the case programs, not a GPU";
    assert_eq!(stdout.lines().next(), Some(loud), "{stdout}");
    assert_eq!(stdout.lines().last(), Some(loud), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(loud), "{}", text(&out));
    assert!(v.case_env("conv-3-64-s32-k3-b1").lines().any(|l| l == "ROCMFORGE_VERIFY_DEVICE=cpu"));
    // Saved apart from the GPU's reports.
    let report = v.report("cpu/latest.json");
    assert_eq!(report["device"], "cpu");
    assert_eq!(report["results"][0]["versions"]["device"], "cpu");
    assert!(!v.state().join("state/rocmforge/verify/verifystack/latest.json").exists());

    let out = v.run_with(&["--case", "conv-3-64-s32-k3-b1", "--markdown"], &cpu);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("| device | **{loud}** |")), "{}", text(&out));
    let out = v.run_with(&["--case", "conv-3-64-s32-k3-b1", "--json"], &cpu);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["device"], "cpu");

    let out = v.run_with(&["--case", "conv-3-64-s32-k3-b1"], &[("ROCMFORGE_VERIFY_DEVICE", "gpu")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the only value it takes is `cpu`"), "{}", text(&out));

    // A profile cannot switch it on.
    v.edit_stack(
        "MIOPEN_DEBUG_CONV_GEMM = \"1\" }",
        "MIOPEN_DEBUG_CONV_GEMM = \"1\", ROCMFORGE_VERIFY_DEVICE = \"cpu\" }",
    );
    let out = v.run(&["--case", "conv-3-64-s32-k3-b1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stack.toml:11:")
            && err.contains(
                "profile `gemm-only` sets `ROCMFORGE_VERIFY_DEVICE`, which only the caller's environment may set"
            ),
        "{err}"
    );
}

/// `known-failures` is checked as `known-hangs` is: ids once, in one list, of the matrix.
#[test]
fn known_failures_are_checked_like_known_hangs() {
    let v = Verify::new();
    v.control(&[]);
    v.edit_stack(
        "known-failures = [\"sdpa\", \"torch-compile\"]",
        "known-failures = [\"sdpa\", \"lstm\", \"sdpa\", \"conv-16-32-s48-k3-b1\"]",
    );
    let out = v.run(&["--case", "lstm"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for msg in [
        "`sdpa` is listed twice in `known-failures`",
        "`conv-16-32-s48-k3-b1` is listed in both `known-hangs` and `known-failures`",
    ] {
        assert!(err.contains(msg) && err.contains("stack.toml:13:"), "{msg}\n{err}");
    }

    v.edit_stack(
        "known-failures = [\"sdpa\", \"lstm\", \"sdpa\", \"conv-16-32-s48-k3-b1\"]",
        "known-failures = [\"sdpa\", \"nonzero-9\"]",
    );
    let out = v.run(&["--case", "lstm"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("recipes/verifystack/stack.toml: profile `gemm-only` lists known failure `nonzero-9`, which is no case of the verify matrix"),
        "{err}"
    );
}

/// A known failure with a stated reason (`because`) is known only when its message says so: the
/// source stacks list `torch-compile` for "no Triton installed", and a Triton that is installed
/// and then fails is news.
#[test]
fn a_known_failure_with_a_reason_is_known_only_for_that_reason() {
    let v = Verify::new();
    v.edit_stack(
        "known-failures = [\"sdpa\", \"torch-compile\"]",
        "known-failures = [\"sdpa\", { case = \"torch-compile\", because = \"no Triton installed\" }]",
    );
    v.control(&[("torch-compile", "notriton")]);
    let out = v.run(&["--case", "torch-compile"]);
    assert!(out.status.success(), "the stated reason: known: {}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("error (known): exit status 1: no Triton installed"),
        "{}",
        text(&out)
    );

    // Another reason (here a HIP error from a Triton kernel): unexpected, and the row says so.
    v.control(&[("torch-compile", "raise")]);
    let out = v.run(&["--case", "torch-compile", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &report["results"][0];
    assert_eq!(
        (r["id"].as_str(), r["known_failure"].as_bool(), r["expected"].as_bool()),
        (Some("torch-compile"), Some(false), Some(false)),
        "{r}"
    );
    assert_eq!(report["unexpected"], 1);

    // An empty reason means nothing: refused, naming the line.
    v.edit_stack("because = \"no Triton installed\"", "because = \" \"");
    let out = v.run(&["--case", "torch-compile"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stack.toml:13:") && err.contains("known failure `torch-compile`: `because` is empty"),
        "{err}"
    );
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
    let out = rocmforge(v.home.path())
        .arg("--recipes")
        .arg(&v.tree)
        .args(["--stack", "verifystack", "verify", "--timeout", "60", "--case", "matmul-1024", "--python"])
        .arg(python3())
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

/// `verify --list` shows the training cases and the cases on the known gfx101x failure paths
/// beside the Conv2d forward matrix, one line each,
/// with what it runs.
#[test]
fn list_shows_the_training_cases() {
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path()).args(["verify", "--list"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let list = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = list.lines().filter_map(|l| l.split_whitespace().next()).collect();
    for id in [
        "conv-3-64-s32-k3-b1",
        "conv-bwd-3-64-s32-k3-b1",
        "batchnorm-256-s7-b16",
        "groupnorm-64-g8-s32-b4",
        "layernorm-512-t128-b8",
        "nonzero",
        "unique",
        "scatter-add",
        "sort-topk",
        "cumsum",
        "lstm",
        "gru",
        "sdpa",
        "matmul-fp16-1024",
        "matmul-bf16-1024",
        "adamw-cnn",
        "train-resnet",
        "cumsum-int64-repeat",
        "masked-select-repeat",
        "nonzero-repeat",
        "torch-compile",
    ] {
        assert!(ids.contains(&id), "`{id}` missing from verify --list:\n{list}");
    }
    let matrix: Vec<String> = rocmforge::verify::matrix().into_iter().map(|c| c.id).collect();
    assert_eq!(ids, matrix, "one line per case of the matrix, in its order");
    let bwd = list.lines().find(|l| l.starts_with("conv-bwd-3-64-s32-k3-b1 ")).unwrap();
    assert!(bwd.contains("conv2d fwd+bwd 3->64 32x32 k3 b1"), "{bwd}");
    let what =
        |id: &str| list.lines().find(|l| l.starts_with(&format!("{id} "))).unwrap()[id.len()..].trim().to_string();
    assert_eq!(what("lstm"), "lstm fwd+bwd 32->64 x2 seq50 b8, with bias");
    assert_eq!(what("cumsum-int64-repeat"), "cumsum int64 3000017, 8 times (exact)");
    assert_eq!(what("nonzero-repeat"), "nonzero int64 3000017, 8 times (exact)");
    assert_eq!(what("torch-compile"), "torch.compile mlp fwd+bwd 64->128->10 b32");
}

/// Issue 40: the shipped rocm-6.2 stack installs Triton, so no profile of it expects
/// `torch-compile` to fail: a torch.compile without Triton is an unexpected failure there, and a
/// passing one passes with its first-call and cached times; rocm-5.4, which installs no Triton,
/// keeps it known, for that reason only. `verify --list` of the stack shows the case.
#[test]
fn torch_compile_is_no_known_failure_of_the_rocm_6_2_profiles_and_stays_one_of_rocm_5_4() {
    let v = Verify::new();
    let shipped = |stack: &str, args: &[&str]| {
        assert_cmd::Command::from_std(v.process_in(None, Some(stack), &v.python, args, &[]))
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap()
    };
    let list = shipped("rocm-6.2", &["--list"]);
    assert!(list.status.success(), "{}", text(&list));
    assert!(
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .any(|l| l.starts_with("torch-compile ") && l.ends_with(" torch.compile mlp fwd+bwd 64->128->10 b32")),
        "{}",
        text(&list)
    );
    let case = |stack: &str, profile: &str| shipped(stack, &["--case", "torch-compile", "--profile", profile]);
    let line = |out: &Output| {
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        s.lines().find(|l| l.starts_with("torch-compile ")).unwrap_or_else(|| panic!("{}", text(out))).to_string()
    };
    v.control(&[("torch-compile", "notriton")]);
    for profile in ["native", "implicit-gemm"] {
        let out = case("rocm-6.2", profile);
        assert_eq!(out.status.code(), Some(1), "rocm-6.2 {profile}: {}", text(&out));
        let l = line(&out);
        assert!(l.ends_with(&format!("  error: exit status 1: {NO_TRITON}")), "rocm-6.2 {profile}: {l}");
        assert!(!l.contains("known"), "rocm-6.2 {profile}: {l}");
        assert!(
            String::from_utf8_lossy(&out.stdout)
                .contains("1 case(s): 0 pass, 0 known hang(s), 0 known failure(s), 1 unexpected;"),
            "{}",
            text(&out)
        );
    }
    let out = case("rocm-5.4", "native");
    assert!(out.status.success(), "rocm-5.4: {}", text(&out));
    assert!(line(&out).ends_with(&format!("  error (known): exit status 1: {NO_TRITON}")), "{}", text(&out));

    v.control(&[("torch-compile", "pass")]);
    let out = case("rocm-6.2", "native");
    assert!(out.status.success(), "{}", text(&out));
    let l = line(&out);
    assert!(l.ends_with("     1.250s     0.004s  pass"), "first-call and cached times: {l}");
}

/// A torch package of someone else's, written here: `torch/__init__.py` states its version, HIP
/// and (when `flags` is given) `torch._C._cuda_getArchFlags()`, and loads its libraries as a
/// ROCm torch does at import: `lib/libtorch_hip.so` (clang-15, whose `.rocm_kpack_ref` marker
/// points at `../.kpack/torch_@GFXARCH@.kpack`, two archives holding its kernel for gfx1010 and
/// gfx1030, hipcc code objects) and `lib/libMIOpen.so.1`, whose `miopenGetVersion` says 3.2.0.
fn someone_elses_torch(site: &Path, version: &str, hip: Option<&str>, flags: Option<&str>) {
    use crate::support::kpack;
    let torch = site.join("torch");
    let py = |v: Option<&str>| v.map(|v| format!("{v:?}")).unwrap_or_else(|| "None".into());
    std::fs::create_dir_all(&torch).unwrap();
    std::fs::write(
        torch.join("__init__.py"),
        format!(
            "import ctypes, os, types\n__version__ = {version:?}\nversion = types.SimpleNamespace(hip={}, cuda=None)\n_C = types.SimpleNamespace()\nif {} is not None:\n    _C._cuda_getArchFlags = lambda: {}\nfor _lib in ('lib/libMIOpen.so.1', 'lib/libtorch_hip.so'):\n    _p = os.path.join(os.path.dirname(__file__), _lib)\n    if os.path.exists(_p):\n        ctypes.CDLL(_p)\n",
            py(hip),
            py(flags),
            py(flags)
        ),
    )
    .unwrap();
    if hip.is_none() {
        return;
    }
    let (gfx1010, gfx1030) = kpack::code_objects();
    kpack::marked_library(
        &torch.join("lib"),
        "libtorch_hip.so",
        ".rocm_kpack_ref",
        &kpack::marker("torch/lib/libtorch_hip.so", &["../.kpack/torch_@GFXARCH@.kpack"]),
    );
    kpack::c_library(
        &torch.join("lib"),
        "libMIOpen.so.1",
        "#include <stddef.h>\nint miopenGetVersion(size_t *a, size_t *b, size_t *c) { *a = 3; *b = 2; *c = 0; return 0; }\n",
    );
    std::fs::create_dir_all(torch.join(".kpack")).unwrap();
    for (arch, code) in [("gfx1010", gfx1010), ("gfx1030", gfx1030)] {
        std::fs::write(
            torch.join(format!(".kpack/torch_{arch}.kpack")),
            kpack::kpack_archive(&[arch], &[("torch/lib/libtorch_hip.so#0", arch, code)], arch == "gfx1010"),
        )
        .unwrap();
    }
}

/// `verify --python PY` without a stack, for a torch rocmforge did not install: a real python3
/// imports the torch above (`probe.py`), and the stand-in runs the cases. It says which torch and
/// HIP it found, the targets the torch was built for (read from its libraries' code, through the
/// kpack marker, or from `_cuda_getArchFlags()`), whether the card (an RX 5700 XT, gfx1010) is
/// among them and what `HSA_OVERRIDE_GFX_VERSION` in the environment changes, the GPU code loaded
/// and MIOpen's version; the cases run in the caller's environment (no stack's profile), and the
/// table, `--markdown` and the report carry it. A torch without HIP says so and runs the CPU cases.
#[test]
fn verify_python_without_a_stack_reports_the_torch_it_finds_and_runs_the_cases() {
    let v = Verify::new();
    v.control(&[("lstm", "raise")]);
    let site = v.home.path().join("site");
    someone_elses_torch(&site, "2.9.1+rocm7.1.0", Some("7.1.25424"), None);
    // The Python: probe.py runs in a real python3 with that torch; the cases in the stand-in.
    let python = v.probing_python("someone-elses-python", &site, "");
    let override_ = [("HSA_OVERRIDE_GFX_VERSION", "10.3.0")];
    let cases = ["--case", "conv-3-64-s32-k3-b1", "--case", "lstm"];
    let out = v.command(None, &python, &cases, &override_);
    assert_eq!(out.status.code(), Some(1), "lstm raised: {}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 case(s) failed or hung (no stack: none is a known failure)"),
        "{}",
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let torch_dir = site.join("torch").canonicalize().unwrap();
    for line in [
        format!("torch found: 2.9.1+rocm7.1.0 ({})", torch_dir.display()),
        "HIP found: 7.1.25424".into(),
        "built for: gfx1010 gfx1030 (from the device code of torch's own libraries".into(),
        "the card: it carries gfx1010 code: the card runs its own; HSA_OVERRIDE_GFX_VERSION=10.3.0 in the environment runs the card as gfx1030 instead of its own gfx1010 code, which it carries".into(),
        "GPU code loaded: libtorch_hip.so: gfx1010 gfx1030 (kpack)".into(),
        format!("MIOpen: 3.2.0 (miopenGetVersion, {})", torch_dir.join("lib/libMIOpen.so.1").display()),
        "card: gfx1010 (Navi 10 (RX 5600/5700, W5700)): KFD node 1".into(),
    ] {
        assert!(stdout.lines().any(|l| l.starts_with(&line)), "no line `{line}`:\n{}", text(&out));
    }
    assert!(
        stdout.contains("conv-3-64-s32-k3-b1") && stdout.contains("error: exit status 1: RuntimeError"),
        "{stdout}"
    );
    // The caller's environment, not a stack's profile (which would set MIOPEN_DEBUG_CONV_GEMM=1
    // and, on a native stack, drop the override).
    let env = v.case_env("conv-3-64-s32-k3-b1");
    assert!(env.lines().any(|l| l == "HSA_OVERRIDE_GFX_VERSION=10.3.0"), "{env}");
    assert!(env.lines().any(|l| l == "MIOPEN_DEBUG_CONV_GEMM=0"), "{env}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(v.state().join("state/rocmforge/verify/any-torch/latest.json")).unwrap())
            .unwrap();
    assert_eq!(report["stack"], "none (a torch rocmforge did not install)");
    assert_eq!(report["torch_found"]["archs"], serde_json::json!(["gfx1010", "gfx1030"]));
    assert_eq!(report["torch_found"]["miopen"], "3.2.0");

    let out = v.command(None, &python, &["--case", "conv-3-64-s32-k3-b1", "--markdown"], &[]);
    let md = String::from_utf8_lossy(&out.stdout);
    for row in [
        "| built for | gfx1010 gfx1030 (from the device code of torch's own libraries",
        "| the card | it carries gfx1010 code: the card runs its own |",
        "| MIOpen | 3.2.0 (miopenGetVersion,",
        "| stack | none (a torch rocmforge did not install) |",
    ] {
        assert!(md.contains(row), "no `{row}`:\n{md}");
    }

    // The build's own list, when the torch has it; without the override the card has no code.
    someone_elses_torch(&site, "2.9.1+rocm7.1.0", Some("7.1.25424"), Some("gfx900 gfx906 gfx1030"));
    let out = v.command(None, &python, &["--case", "conv-3-64-s32-k3-b1"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "built for: gfx900 gfx906 gfx1030 (from torch._C._cuda_getArchFlags(): gfx900 gfx906 gfx1030)",
        "the card: it carries no gfx1010 code, and no HSA_OVERRIDE_GFX_VERSION is set: expect hipErrorNoBinaryForGpu; it carries gfx1030 of the same generation, which HSA_OVERRIDE_GFX_VERSION=10.3.0 would run the card as",
    ] {
        assert!(stdout.lines().any(|l| l == line), "no line `{line}`:\n{}", text(&out));
    }

    // A list that names no target (`""`: a build that did not set it): the libraries' code says.
    someone_elses_torch(&site, "2.9.1+rocm7.1.0", Some("7.1.25424"), Some(""));
    let out = v.command(None, &python, &["--case", "conv-3-64-s32-k3-b1"], &[]);
    let line = "built for: gfx1010 gfx1030 (from the device code of torch's own libraries (torch._C._cuda_getArchFlags() names no gfx target))";
    assert!(String::from_utf8_lossy(&out.stdout).lines().any(|l| l == line), "no line `{line}`:\n{}", text(&out));

    // A torch without HIP, in CPU mode: said, and the cases run on the CPU.
    std::fs::remove_dir_all(&site).unwrap();
    someone_elses_torch(&site, "2.15.0+cpu", None, None);
    let out = v.command(None, &python, &["--case", "conv-3-64-s32-k3-b1"], &[("ROCMFORGE_VERIFY_DEVICE", "cpu")]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "HIP found: none: a CPU-only build (torch.version.hip is None)",
        "the card: this torch has no HIP: it cannot use an AMD card (in CPU mode the cases run on the CPU)",
        "GPU code loaded: not read (no HIP)",
    ] {
        assert!(stdout.lines().any(|l| l == line), "no line `{line}`:\n{}", text(&out));
    }
    assert!(v.case_env("conv-3-64-s32-k3-b1").lines().any(|l| l == "ROCMFORGE_VERIFY_DEVICE=cpu"));
    assert!(v.state().join("state/rocmforge/verify/any-torch/cpu/latest.json").is_file());

    // A profile is a stack's.
    let out = v.command(None, &python, &["--profile", "gemm-only"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--profile names a profile of a stack: give --stack NAME too")
    );
}

/// `verify --python PY` audits the libMIOpen that torch loads before the first case: a stand-in
/// torch whose `lib/libMIOpen.so.1` embeds, as MIOpen does, Debian 7.2.4's real
/// MIOpenBatchNormFwdTrainSpatial.cl (read out of `ci/debian-miopen.sh`'s package); the audit
/// compiles it for the card's gfx1010 and the gfx900 control with clang-15 and names the
/// kernel, the target, the assembler's message and what to do, before the case's row; the
/// legacy-CK check says why it could not run (no such kernel embedded); the report carries it,
/// the Markdown has its one-line summary; `--no-kernel-checks` skips it.
#[test]
fn verify_python_audits_the_libmiopen_torch_loads_before_the_cases() {
    let v = Verify::new();
    let site = v.home.path().join("site");
    someone_elses_torch(&site, "2.12.0+rocm7.2.0", Some("7.2.53211"), None);
    let real = rocmforge::offload::miopen::read_embedded(&crate::miopen_audit::debian_miopen("7.2.4")).unwrap();
    let kernel = real.files.iter().find(|f| f.name.as_deref() == Some("MIOpenBatchNormFwdTrainSpatial.cl")).unwrap();
    let lib_dir = site.join("torch/lib");
    std::fs::remove_file(lib_dir.join("libMIOpen.so.1")).unwrap();
    crate::miopen_audit::library(
        &lib_dir,
        "libMIOpen.so.1",
        &[("MIOpenBatchNormFwdTrainSpatial.cl", &kernel.text, false)],
        "int miopenGetVersion(size_t *a, size_t *b, size_t *c) { *a = 3; *b = 5; *c = 1; return 0; }\n",
    );
    let python = v.probing_python("someone-elses-python", &site, "");
    let out = v.command(None, &python, &["--case", "conv-3-64-s32-k3-b1"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lib = site.join("torch/lib/libMIOpen.so.1").canonicalize().unwrap();
    let at = |want: &str| {
        stdout.lines().position(|l| l.starts_with(want)).unwrap_or_else(|| panic!("no line `{want}`:\n{}", text(&out)))
    };
    let first = at(&format!("MIOpen kernels: MIOpen 3.5.1, built with HIP 7.2.53211: {}", lib.display()));
    let failed = at("    FAILED gfx1010 MIOpenBatchNormFwdTrainSpatial.cl: ");
    assert!(stdout.lines().nth(failed).unwrap().contains("error: not a valid operand."), "{stdout}");
    at("  compiler: /usr/lib/llvm-15/bin/clang (a distribution's clang (/usr/lib/llvm-15)");
    at("  batchnorm (batchnorm's OpenCL kernels (DPP `row_bcast` reduction)): FAIL: ");
    at("    what to do: build MIOpen with the rocm-6.2 stack (its patch 0001");
    let ck =
        at("  legacy-ck (the legacy composable-kernel reductions (target macro, buffer resource dword)): NOT RUN: ");
    assert!(
        stdout.lines().nth(ck).unwrap().contains("no gridwise_generic_reduction_*.cpp among the library's kernels"),
        "{stdout}"
    );
    let case = at("conv-3-64-s32-k3-b1");
    assert!(first < failed && failed < case, "the audit comes before the cases:\n{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(v.state().join("state/rocmforge/verify/any-torch/latest.json")).unwrap())
            .unwrap();
    assert_eq!(report["miopen_audit"]["miopen_version"], "3.5.1");
    assert_eq!(report["miopen_audit"]["targets"], serde_json::json!(["gfx1010"]));
    assert_eq!(report["miopen_audit"]["checks"][0]["status"], "fail");

    let out = v.command(None, &python, &["--case", "conv-3-64-s32-k3-b1", "--markdown"], &[]);
    let md = String::from_utf8_lossy(&out.stdout);
    let row = "| MIOpen kernels | MIOpen 3.5.1: batchnorm: FAIL on gfx1010 (MIOpenBatchNormFwdTrainSpatial.cl); legacy-ck: not checked (";
    assert!(md.contains(row), "no `{row}`:\n{md}");

    let out = v.command(None, &python, &["--case", "conv-3-64-s32-k3-b1", "--no-kernel-checks"], &[]);
    assert!(out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("MIOpen kernels"), "{}", text(&out));
}

/// A case's child that leaves its process group and clears its environment (the token with it),
/// its parent ending at once, is stopped with the case: when the case passes and when it hangs.
#[test]
fn a_case_child_that_leaves_its_group_and_environment_is_stopped_too() {
    let v = Verify::new();
    let (passes, hangs) = ("conv-3-64-s32-k3-b1", "conv-3-64-s40-k3-b1");
    v.control(&[(passes, "escape"), (hangs, "hangescape")]);
    let out = v.run(&["--timeout", "2", "--case", passes, "--case", hangs]);
    let left = left_behind(&v.mark);
    assert!(left.is_empty(), "processes left behind: {left:?}\n{}", text(&out));
    assert_eq!(out.status.code(), Some(1), "the hang is unexpected: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = |id: &str| stdout.lines().find(|l| l.starts_with(&format!("{id} "))).unwrap_or_default().to_string();
    assert!(row(passes).ends_with("  pass"), "{stdout}");
    assert!(row(hangs).contains("HANG after"), "{stdout}");
}

/// Ctrl-C and SIGTERM, and SIGINT to a verify started with it ignored (a script's background
/// job): the running case is stopped with every process of it, the escapee included, no other
/// case starts, and verify ends, saying so, with 128 + the signal. SIGKILL: the case's supervisor
/// notices and stops it all. The bounds are liveness bounds, not timings.
#[test]
fn verify_stops_on_sigint_and_sigterm_and_leaves_nothing() {
    use rustix::process::{Pid, Signal};
    let v = Verify::new();
    let (first, second) = ("conv-3-64-s32-k3-b1", "conv-3-64-s40-k3-b1");
    v.control(&[(first, "hangescape")]);
    for (sig, ignored) in [(Signal::INT, false), (Signal::TERM, false), (Signal::INT, true), (Signal::KILL, false)] {
        for e in std::fs::read_dir(&v.envs).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        let args = ["--timeout", "600", "--case", first, "--case", second];
        let mut c = v.process(Some("verifystack"), &v.python, &args, &[]);
        if ignored {
            let mut w = std::process::Command::new("bash");
            w.env_clear()
                .envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .args(["-c", "trap '' INT; exec \"$@\"", "bash"])
                .arg(c.get_program())
                .args(c.get_args());
            c = w;
        }
        c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        // The case's shell, its TERM-ignoring child and that one's sleep, its own sleep, the
        // supervisor; and the escapee.
        let start = Instant::now();
        while !(escaped(&v.mark).len() == 1 && marked(&v.mark).len() >= 4) {
            assert!(start.elapsed() < Duration::from_secs(300), "the case did not start: {:?}", left_behind(&v.mark));
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = rustix::process::kill_process(Pid::from_child(&child), sig);
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                panic!("verify went on after signal {sig:?} (ignored first: {ignored}): {:?}", left_behind(&v.mark));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        use std::os::unix::process::ExitStatusExt;
        if sig == Signal::KILL {
            // The supervisor sees its stdin close and stops the case.
            let start = Instant::now();
            while !(marked(&v.mark).is_empty() && escaped(&v.mark).is_empty())
                && start.elapsed() < Duration::from_secs(120)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let left = left_behind(&v.mark);
        assert!(left.is_empty(), "signal {sig:?} (ignored first: {ignored}): processes left behind: {left:?}\n{err}");
        if sig == Signal::KILL {
            assert_eq!(status.signal(), Some(9));
        } else {
            let n = sig.as_raw();
            assert_eq!(status.code(), Some(128 + n), "signal {sig:?}, ignored first: {ignored}: {err}");
            let name = if sig == Signal::INT { "SIGINT" } else { "SIGTERM" };
            let said = format!(
                "interrupted by signal {n} ({name}): case `{first}` was stopped, after 0 case(s); no report saved"
            );
            assert!(err.contains(&said), "no `{said}`:\n{err}");
        }
        assert!(v.envs.join(first).is_file(), "the first case ran");
        assert!(!v.envs.join(second).exists(), "signal {sig:?}: the next case started:\n{err}");
    }
}

/// A `--timeout` beyond what a case may take (or the clock count) is refused, naming the flag
/// and the bound, before anything runs.
#[test]
fn a_timeout_past_a_week_is_refused_naming_the_flag_and_the_bound() {
    let v = Verify::new();
    for t in ["1e20", "18446744073709551616", "604801"] {
        let out = v.run(&["--timeout", t]);
        assert_eq!(out.status.code(), Some(2), "--timeout {t}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: --timeout "), "{err}");
        assert!(err.contains(": at most 604800 seconds (a week) per case"), "{err}");
        assert_eq!(std::fs::read_dir(&v.envs).unwrap().count(), 0, "a case ran");
    }
}

/// `verify --python PY` whose Python imports no torch: it says so and runs no case (each would
/// fail the same way, or hang to its timeout).
#[test]
fn without_a_torch_to_import_no_case_runs() {
    let v = Verify::new();
    let site = v.home.path().join("empty-site");
    std::fs::create_dir_all(&site).unwrap();
    // `-S`: no site-packages, where a torch of this machine's could be.
    let python = v.probing_python("torchless-python", &site, "-S");
    let out = v.command(None, &python, &["--timeout", "600"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.lines().any(|l| l == "the card: no torch imported: nothing to run"), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let said = format!("error: `{}` imported no torch (`import torch`: ModuleNotFoundError:", python.display());
    assert!(err.contains(&said) && err.contains("nothing to run, no case was started"), "{}", text(&out));
    assert_eq!(std::fs::read_dir(&v.envs).unwrap().count(), 0, "a case ran:\n{}", text(&out));
}
