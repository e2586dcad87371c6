//! `rocmforge env` and the stack's venv with real parts: a small native stack (a script recipe
//! installing into the prefix, a wheel recipe from a `file://` URL) is built, which fills the
//! venv with the stack's wheel (uv or pip); the lines `env` prints are snapshotted for bash, zsh
//! and fish and sourced in real bash, zsh and fish, with and without `HSA_OVERRIDE_GFX_VERSION`
//! in the caller's environment, checking the variables that result and that the venv's Python
//! imports the wheel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::wheel::{make, sha256_hex};
use crate::support::{rocmforge, scrub, text};

const STACK: &str = r#"[stack]
name = "envstack"
rocm-version = "6.2.4"
summary = "a native stack for env tests"
default-targets = ["gfx1010"]
default = true
python = "3.11"
venv-constraints = ["rfenv<2"]
default-profile = "native"

[profile.native]
description = "MIOpen defaults: kernels compiled on first use"
env = { MIOPEN_LOG_LEVEL = "3" }

[profile.implicit-gemm]
description = "the binary installs' knobs, on a native build"
env = { MIOPEN_DEBUG_CONV_IMPLICIT_GEMM = "1", MIOPEN_DEBUG_CONV_GEMM = "0" }
known-hangs = ["conv-16-32-s48-k3-b1"]
"#;

struct EnvStack {
    home: tempfile::TempDir,
    tree: PathBuf,
}

impl EnvStack {
    fn new() -> EnvStack {
        let home = tempfile::tempdir().unwrap();
        let tree = home.path().join("tree");
        let dir = tree.join("recipes/envstack");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stack.toml"), STACK).unwrap();
        std::fs::write(
            dir.join("tool.toml"),
            "[package]\nname = \"tool\"\nversion = \"1.0\"\nsummary = \"a native tool\"\n\n[build]\nsystem = \"script\"\n\
             steps = [\"mkdir -p {stage}/bin {stage}/lib && printf '#!/bin/sh\\\\necho native tool\\\\n' > {stage}/bin/rftool && chmod +x {stage}/bin/rftool && touch {stage}/lib/librf.so\"]\n\n[targets]\ngpu = false\n",
        )
        .unwrap();
        let (name, bytes) = make("rfenv", "1.0.0", "py3-none-any", "rfenv", "from the stack's venv");
        let wheel = home.path().join(&name);
        std::fs::write(&wheel, &bytes).unwrap();
        std::fs::write(
            dir.join("rfenv.toml"),
            format!(
                "[package]\nname = \"rfenv\"\nversion = \"1.0.0\"\nsummary = \"a wheel\"\n\n[source]\nurl = \"file://{}\"\nsha256 = \"{}\"\n\n\
                 [build]\nsystem = \"prebuilt-wheel\"\n\n[targets]\ngpu = false\n",
                wheel.display(),
                sha256_hex(&bytes)
            ),
        )
        .unwrap();
        EnvStack { home, tree }
    }

    fn cmd(&self) -> assert_cmd::Command {
        let mut c = rocmforge(self.home.path());
        c.arg("--recipes").arg(&self.tree).timeout(std::time::Duration::from_secs(120));
        c
    }

    fn prefix(&self) -> PathBuf {
        self.home.path().join("state/rocmforge/prefix/envstack")
    }

    fn venv(&self) -> PathBuf {
        self.home.path().join("state/rocmforge/venvs/envstack")
    }

    /// `rocmforge env` output (stdout, stderr) with `extra` in its environment.
    fn env_lines(&self, args: &[&str], extra: &[(&str, &str)]) -> (String, String) {
        let mut c = self.cmd();
        // A host without a GPU, whatever this machine has: the card line is `no AMD GPU found`.
        c.arg("env").args(args).env("ROCMFORGE_HOST_ROOT", self.home.path().join("no-gpu-host"));
        for (k, v) in extra {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn scrubbed(&self, s: &str) -> String {
        scrub(s, self.home.path())
    }
}

/// Sources `lines` in `shell` started with `vars` (and a plain PATH), and returns the environment
/// it ends with plus what `python -c` printed there.
fn source_in(shell: &str, lines: &str, vars: &[(&str, &str)], dir: &Path) -> (BTreeMap<String, String>, String) {
    let file = dir.join(format!("activate.{shell}"));
    std::fs::write(&file, lines).unwrap();
    let script = format!(
        "source {f}; env > {f}.env; python -c 'import rfenv, sys; print(rfenv.VALUE); print(sys.prefix)'",
        f = file.display()
    );
    let mut c = Command::new(shell);
    c.env_clear().env("PATH", "/usr/local/bin:/usr/bin:/bin").env("HOME", dir).arg("-c").arg(&script);
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.output().unwrap_or_else(|e| panic!("cannot run {shell} (ci/setup.sh installs it): {e}"));
    assert!(out.status.success(), "{shell}: {}", text(&out));
    let env = std::fs::read_to_string(format!("{}.env", file.display())).unwrap();
    let map = env.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    (map, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn build_fills_the_venv_and_env_activates_it_in_bash_zsh_and_fish() {
    let e = EnvStack::new();
    let out = e.cmd().args(["build", "tool", "rfenv"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("venv: ") && stdout.contains("rfenv-1.0.0-py3-none-any.whl"), "{}", text(&out));
    assert!(e.venv().join("bin/python").is_file());
    // The constraints the stack states are what the venv was filled under.
    let constraints = std::fs::read_to_string(e.venv().with_extension("constraints.txt")).unwrap();
    assert!(constraints.lines().any(|l| l == "rfenv<2"), "{constraints}");
    // A second build finds the venv holding these wheels and leaves it alone.
    let again = e.cmd().args(["build", "tool", "rfenv"]).output().unwrap();
    assert!(again.status.success() && !String::from_utf8_lossy(&again.stdout).contains("venv: "), "{}", text(&again));

    for shell in ["bash", "zsh", "fish"] {
        let (lines, warnings) = e.env_lines(&["--shell", shell], &[]);
        assert_eq!(warnings, "", "no warnings without an override");
        insta::assert_snapshot!(format!("env_{shell}"), e.scrubbed(&lines));
    }
    let (lines, _) = e.env_lines(&["--profile", "implicit-gemm"], &[]);
    insta::assert_snapshot!("env_bash_implicit_gemm", e.scrubbed(&lines));

    let work = e.home.path().join("shells");
    std::fs::create_dir_all(&work).unwrap();
    let prefix = e.prefix().display().to_string();
    let venv = e.venv().display().to_string();
    for shell in ["bash", "zsh", "fish"] {
        for caller_override in [None, Some("10.3.0")] {
            let extra: Vec<(&str, &str)> =
                caller_override.map(|v| ("HSA_OVERRIDE_GFX_VERSION", v)).into_iter().collect();
            let (lines, warnings) = e.env_lines(&["--shell", shell], &extra);
            if caller_override.is_some() {
                assert!(warnings.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0 is set in your environment"), "{warnings}");
            }
            assert!(
                !lines.contains("HSA_OVERRIDE_GFX_VERSION=") && !lines.contains("-gx HSA_OVERRIDE"),
                "never set: {lines}"
            );
            let mut vars = extra.clone();
            vars.push(("LD_LIBRARY_PATH", "/old/lib"));
            let (env, printed) = source_in(shell, &lines, &vars, &work);
            let what = format!("{shell}, override {caller_override:?}");
            assert_eq!(env.get("HSA_OVERRIDE_GFX_VERSION"), None, "{what}: {env:?}");
            assert_eq!(env.get("ROCM_PATH"), Some(&prefix), "{what}");
            assert_eq!(env.get("VIRTUAL_ENV"), Some(&venv), "{what}");
            assert_eq!(
                env.get("LD_LIBRARY_PATH").map(String::as_str),
                Some(format!("{prefix}/lib:/old/lib").as_str()),
                "{what}"
            );
            let path = env.get("PATH").unwrap();
            assert!(
                path.starts_with(&format!("{venv}/bin:{prefix}/bin:"))
                    && path.ends_with("/usr/local/bin:/usr/bin:/bin"),
                "{what}: PATH={path}"
            );
            assert_eq!(env.get("MIOPEN_LOG_LEVEL").map(String::as_str), Some("3"), "{what}: the default profile");
            // The venv's Python is the one on PATH, and it holds the stack's wheel.
            assert_eq!(printed, format!("from the stack's venv\n{venv}\n"), "{what}");
        }
    }
}

#[test]
fn env_refuses_an_unknown_profile_and_a_native_stack_refuses_the_gpu_override() {
    let e = EnvStack::new();
    let out = e.cmd().args(["env", "--profile", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no profile `nope` (profiles: implicit-gemm, native)"),
        "{}",
        text(&out)
    );

    let st = e.tree.join("recipes/envstack/stack.toml");
    let t = std::fs::read_to_string(&st).unwrap();
    std::fs::write(&st, t.replace("MIOPEN_LOG_LEVEL = \"3\"", "HSA_OVERRIDE_GFX_VERSION = \"10.3.0\"")).unwrap();
    let out = e.cmd().args(["recipes", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stack.toml:13:"), "file and line: {err}");
    assert!(
        err.contains("profile `native` sets `HSA_OVERRIDE_GFX_VERSION`, but this stack is built natively"),
        "{err}"
    );
}

#[test]
fn without_uv_the_venv_is_made_by_python_and_filled_by_pip() {
    let e = EnvStack::new();
    let out = e.cmd().env("ROCMFORGE_VENV_NO_UV", "1").args(["build", "rfenv"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("rfenv-1.0.0-py3-none-any.whl (pip)"), "{}", text(&out));
    let py = e.venv().join("bin/python");
    let got = Command::new(&py).args(["-c", "import rfenv; print(rfenv.VALUE)"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&got.stdout), "from the stack's venv\n", "{}", text(&got));
    // pip itself is in the venv (python -m venv seeds it), so users can add to it.
    assert!(Command::new(&py).args(["-m", "pip", "--version"]).output().unwrap().status.success());
}

#[test]
fn stack_profile_mistakes_are_reported_with_file_and_line() {
    let e = EnvStack::new();
    let st = e.tree.join("recipes/envstack/stack.toml");
    let t = std::fs::read_to_string(&st).unwrap();
    let t = t
        .replace(
            "default-profile = \"native\"",
            "default-profile = \"natve\"\nindex-path = \"../up\"\nvenv-skip = [\"rocm[libraries]\"]\nglibc = \"2\"",
        )
        .replace("venv-constraints = [\"rfenv<2\"]", "venv-constraints = [\"<2\"]")
        .replace("known-hangs = [\"conv-16-32-s48-k3-b1\"]", "known-hangs = [\"Conv 16\"]");
    std::fs::write(&st, t).unwrap();
    let out = e.cmd().args(["recipes", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for (line, msg) in [
        (9, "`default-profile` names `natve`, which is no `[profile.<name>]` here"),
        (10, "`index-path` must be one folder name"),
        (8, "`<2` is not a requirement constraint"),
        (11, "`venv-skip` names projects, and `rocm[libraries]` is not a project name"),
        (12, "`glibc` must be a glibc version `2.N`, got `2`"),
        (21, "`Conv 16` is not a verify case id"),
    ] {
        assert!(err.contains(&format!("stack.toml:{line}:")) && err.contains(msg), "{line}: {msg}\n{err}");
    }
}

/// A profile value may name the stack's venv (`{venv}`): rocFFT's kernel cache file lives there,
/// so `env` prints the venv's real path; any other placeholder is refused at its line.
#[test]
fn a_profile_value_names_the_venv_and_nothing_else() {
    let e = EnvStack::new();
    let st = e.tree.join("recipes/envstack/stack.toml");
    let t = std::fs::read_to_string(&st).unwrap();
    let with_venv = t.replace(
        "MIOPEN_LOG_LEVEL = \"3\"",
        "MIOPEN_LOG_LEVEL = \"3\", ROCFFT_RTC_CACHE_PATH = \"{venv}/rocfft-kernel-cache.db\"",
    );
    assert_ne!(with_venv, t);
    std::fs::write(&st, &with_venv).unwrap();
    let out = e.cmd().args(["env", "--shell", "bash"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let lines = String::from_utf8_lossy(&out.stdout);
    let want = format!("{}/rocfft-kernel-cache.db", e.venv().display());
    assert!(lines.contains(&format!("ROCFFT_RTC_CACHE_PATH='{want}'")), "want {want} in:\n{lines}");
    assert!(!lines.contains("{venv}"), "{lines}");

    std::fs::write(&st, t.replace("MIOPEN_LOG_LEVEL = \"3\"", "ROCFFT_RTC_CACHE_PATH = \"{prefix}/k.db\"")).unwrap();
    let out = e.cmd().args(["recipes", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stack.toml:13:"), "file and line: {err}");
    assert!(err.contains("only `{venv}` may be placed in a value"), "{err}");
}

/// What `recipes check` used to pass and meant nothing: profile case ids that are no case of
/// verify's matrix (refused only later, by `verify`), known-failure entries with a key it does
/// not know or missing one (refused with serde's "did not match any variant"), and `venv-skip`
/// in a stack without a venv. Each is refused at its line, with the forms it takes.
#[test]
fn stack_fields_that_mean_nothing_are_refused_at_their_line() {
    let e = EnvStack::new();
    let st = e.tree.join("recipes/envstack/stack.toml");
    let check = |edit: &dyn Fn(&str) -> String| {
        std::fs::write(&st, edit(STACK)).unwrap();
        let out = e.cmd().args(["recipes", "check"]).output().unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let hangs = "known-hangs = [\"conv-16-32-s48-k3-b1\"]";
    let err = check(&|t| {
        t.replace(
            hangs,
            "known-hangs = [\"conv-16-32-s48-k3-b2\"]\nknown-failures = [\"sdpaa\", { case = \"fft\", because = \"slow\" }]",
        )
    });
    for (line, msg) in [
        (18, "profile `implicit-gemm` lists known hang `conv-16-32-s48-k3-b2`, which is no case of the verify matrix"),
        (19, "profile `implicit-gemm` lists known failure `sdpaa`, which is no case of the verify matrix"),
    ] {
        assert!(err.contains(&format!("{msg}\n  --> {}:{line}:", st.display())), "{line}: {msg}\n{err}");
    }
    assert!(err.contains("did you mean `sdpa`?") && err.contains("`rocmforge verify --list`"), "{err}");
    assert!(err.contains("2 problems found"), "`fft` is a case: {err}");

    let forms = "a known-failures entry is a case id (`\"sdpa\"`) or `{ case = \"sdpa\", because = \"text the case's message holds\" }`";
    for (entry, said) in [
        ("{ case = \"sdpa\", because = \"no flash\", ticket = \"42\" }", "unknown key `ticket`: "),
        (
            "{ case = \"sdpa\" }",
            "the entry for `sdpa` has no `because` (write the bare id `\"sdpa\"` when any failure counts): ",
        ),
        ("{ because = \"no flash\" }", "the entry has no `case`: "),
        ("3", ""),
    ] {
        let err = check(&|t| t.replace(hangs, &format!("{hangs}\nknown-failures = [{entry}]")));
        assert!(err.contains(&format!("{said}{forms}")), "{entry}: {err}");
        assert!(err.contains(&format!("{}:19:", st.display())), "{entry}: the file and line: {err}");
        assert!(!err.contains("untagged enum"), "{err}");
    }

    let err = check(&|t| t.replace("python = \"3.11\"\n", "venv-skip = [\"rocm\"]\n"));
    assert!(
        err.contains("`venv-skip` is set, but the stack names no `python`, so it has no venv to skip anything in")
            && err.contains(&format!("{}:7:", st.display())),
        "{err}"
    );
}
