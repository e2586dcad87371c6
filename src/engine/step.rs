//! One build step: written out as a shell script (with its whole environment) that a user can
//! re-run by hand, run in its own process group (under a supervisor, `process::supervisor`, in
//! the rocmforge binary), output streamed to a log file.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::fsutil;
use crate::layout::WorkDir;
use crate::process::{reap, Job};

/// Set in a step script's environment once it is clean (only what the script exports, the
/// jobserver, the step's token): a script started without it (by hand) starts itself again
/// under `env -i`; rocmforge starts it with a clean environment and this set.
const CLEAN_ENV_VAR: &str = "ROCMFORGE_STEP_CLEAN_ENV";

/// How rocmforge itself stops a step's processes (at once; never reaping: see `reap::Stop`).
const IN_ROCMFORGE: reap::Stop = reap::Stop { grace: false, reap: false, give_up: std::time::Duration::from_secs(5) };

#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    /// A shell command line (bash).
    pub command: String,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    /// This step empties and refills the stage (the tree stored as the artifact).
    pub fills_stage: bool,
    /// The step only empties this directory and creates it anew (its `command` says so, for
    /// the script a user re-runs by hand): done in rocmforge, starting no process.
    pub fresh_dir: Option<PathBuf>,
}

/// A failed step, with everything needed to understand and reproduce it.
#[derive(Debug, thiserror::Error)]
#[error("{recipe}: step `{step}` failed ({status})\n  command:   {command}\n  directory: {cwd}\n  log:       {log}\n  re-run:    bash {script}\n--- last {n} lines of the log ---\n{tail}", n = tail_lines.len(), tail = tail_lines.join("\n"), cwd = cwd.display(), log = log.display(), script = script.display())]
pub struct StepFailure {
    pub recipe: String,
    pub step: String,
    pub command: String,
    pub cwd: PathBuf,
    pub status: String,
    pub tail_lines: Vec<String>,
    pub log: PathBuf,
    pub script: PathBuf,
    /// The step was killed for memory (exit 137 or a compiler killed by a signal).
    pub looks_oom: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Failed(Box<StepFailure>),
    #[error("{recipe}: cannot run step `{step}`: {what} `{path}`")]
    Io { recipe: String, step: String, what: &'static str, path: PathBuf, source: std::io::Error },
}

/// One word of a bash script. A plain word (letters, digits, `-_./=:,+@%`) stays bare, so scripts
/// and the commands shown while building read as written (`numpy==2.2.1`, `-DX=a,b`); anything
/// else (blanks, quotes, `$`, the `;` of a target list, non-ASCII, empty) is quoted by shlex.
pub(super) fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b)) {
        return s.to_string();
    }
    shlex::Quoter::new().allow_nul(true).quote(s).expect("quoting fails only on a NUL, which is allowed").into_owned()
}

/// May this step setting hold a credential? Names ending in `_REMOTE_STORAGE` (ccache's remote
/// storage URLs carry them) or holding `TOKEN`, `PASSWORD` or `SECRET`, and any value with a URL
/// whose authority has a user part (`https://user:pw@host/`). Such values are never written to
/// a step script nor shown from a log.
pub fn is_secret(name: &str, value: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n.ends_with("_REMOTE_STORAGE")
        || ["TOKEN", "PASSWORD", "SECRET"].iter().any(|w| n.contains(w))
        || value.match_indices("://").any(|(i, _)| {
            let authority = value[i + 3..].split(['/', ' ', '|', '?', '#']).next().unwrap_or("");
            authority.contains('@')
        })
}

/// `text` with every secret value of `env` ([`is_secret`]) replaced by `<redacted NAME>`.
pub fn redact(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = text.to_string();
    for (k, v) in env.iter().filter(|(k, v)| !v.is_empty() && is_secret(k, v)) {
        out = out.replace(v.as_str(), &format!("<redacted {k}>"));
    }
    out
}

/// The script text: clean environment, directory, command. Secret settings ([`is_secret`]) are
/// not written: the script takes them from the environment it is started in (rocmforge starts
/// it with them), and says which to set when one is missing.
pub fn script_text(recipe: &str, step: &Step) -> String {
    let secrets: Vec<&String> = step.env.iter().filter(|(k, v)| is_secret(k, v)).map(|(k, _)| k).collect();
    let mut s = String::from("#!/usr/bin/env bash\n");
    s.push_str(&format!("# rocmforge: recipe {recipe}, step {}\n# Re-run by hand with: bash <this file>\n", step.name));
    if !secrets.is_empty() {
        let names: Vec<&str> = secrets.iter().map(|k| k.as_str()).collect();
        s.push_str(&format!(
            "# Redacted (they may hold credentials): {}. Set them in your environment first.\n",
            names.join(" ")
        ));
    }
    s.push_str("set -euo pipefail\n");
    // Start from an empty environment (only what is exported below), keeping a GNU make
    // jobserver handed down by rocmforge so make-style tools share the build's job budget, the
    // token that marks the step's processes (`reap`), and the redacted settings.
    let mut keep: String = secrets.iter().map(|k| format!(" ${{{k}+\"{k}=${k}\"}}")).collect();
    // A name bash cannot `export` (CMake's `rocm-core_ROOT`) is handed to `env` instead.
    for (k, v) in step.env.iter().filter(|(k, v)| !crate::recipe::is_env_name(k) && !is_secret(k, v)) {
        keep.push(' ');
        keep.push_str(&shell_quote(&format!("{k}={v}")));
    }
    s.push_str(&format!("if [ -z \"${{{CLEAN_ENV_VAR}:-}}\" ]; then exec env -i {CLEAN_ENV_VAR}=1 ${{MAKEFLAGS+\"MAKEFLAGS=$MAKEFLAGS\"}} ${{CARGO_MAKEFLAGS+\"CARGO_MAKEFLAGS=$CARGO_MAKEFLAGS\"}} ${{ROCMFORGE_STEP_TOKEN+\"ROCMFORGE_STEP_TOKEN=$ROCMFORGE_STEP_TOKEN\"}}{keep} bash \"$0\" \"$@\"; fi\nunset {CLEAN_ENV_VAR}\n"));
    for (k, v) in &step.env {
        if !crate::recipe::is_env_name(k) && !is_secret(k, v) {
            continue;
        }
        if is_secret(k, v) {
            s.push_str(&format!(
                "export {k}=\"${{{k}?{k} was redacted from this script (it may hold a credential): set it in the environment to re-run this step}}\"\n"
            ));
            continue;
        }
        s.push_str(&format!("export {k}={}\n", shell_quote(v)));
    }
    s.push_str(&format!("cd {}\n", shell_quote(&step.cwd.display().to_string())));
    s.push_str(&step.command);
    s.push('\n');
    s
}

/// The last `n` lines of a (possibly huge) log, reading only its end.
pub fn tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(mut f) = fs::File::open(path) else { return Vec::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(64 * 1024);
    let _ = f.seek(SeekFrom::Start(start));
    let mut buf = Vec::new();
    let _ = f.take(64 * 1024).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    let skip_partial = usize::from(start > 0);
    let from = lines.len().saturating_sub(n).max(skip_partial.min(lines.len()));
    lines[from..].iter().map(|l| l.to_string()).collect()
}

/// Memory-kill signs in a log's tail.
fn tail_says_oom(lines: &[String]) -> bool {
    lines.iter().any(|l| {
        l.contains("Killed signal terminated program")
            || l.contains("signal 9 (Kill)")
            || l.contains("fatal error: Killed")
            || l.contains("out of memory")
            || l.contains("std::bad_alloc")
    })
}

/// Kills what the step recorded by a previous, killed run left running (its supervisor, if it
/// is still at it, its process group, the processes with its token and their descendants).
pub fn reap_orphan(wd: &WorkDir) {
    if let Some(step) = wd.running_step() {
        reap::stop(&step, None, IN_ROCMFORGE);
    }
    let _ = fs::remove_file(wd.running_pid());
}

/// Runs a step to completion. Output goes to `<logs>/<step>.log` (truncated first).
pub fn run(
    recipe: &str,
    index: usize,
    step: &Step,
    wd: &WorkDir,
    jobserver: Option<&jobserver::Client>,
) -> Result<(), StepError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| StepError::Io { recipe: recipe.into(), step: step.name.clone(), what, path, source }
    };
    for dir in [wd.steps(), wd.logs(), step.cwd.clone()] {
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    }
    // Written anew before each run and read by no resume: a power cut may take it (no fsync).
    let script = wd.step_script(index, &step.name);
    fsutil::replace(&script, script_text(recipe, step).as_bytes()).map_err(io("write", &script))?;
    let log = wd.step_log(&step.name);
    let log_file = fs::File::create(&log).map_err(io("create log", &log))?;
    if let Some(dir) = &step.fresh_dir {
        fsutil::remove_dir_all_if_exists(dir).map_err(io("empty", dir))?;
        return fs::create_dir_all(dir).map_err(io("create", dir));
    }

    reap_orphan(wd);
    let oom_before = super::budget::oom_kills();
    // Every process of the step carries this in its environment (the script passes it through
    // its clean environment), so it can be found after it left the process group.
    let token = crate::process::Tracked::new_token("");
    let core_time = wd.step_cpu(&step.name);
    let _ = fs::remove_file(&core_time);
    let mut job = Job::new("bash", &[script.as_os_str()], true);
    let log_err = log_file.try_clone().map_err(io("open log", &log))?;
    job.command
        .env_clear()
        .envs(&step.env)
        // The environment is clean already: the script need not start itself again under `env -i`.
        .env(CLEAN_ENV_VAR, "1")
        .current_dir(&step.cwd)
        .stdout(log_file)
        .stderr(log_err);
    if job.supervised() {
        // For the supervisor only: it removes it from the step's environment.
        job.command.env(crate::process::supervisor::CORE_TIME_FILE_VAR, &core_time);
    }
    if let Some(js) = jobserver {
        js.configure_make(&mut job.command);
    }
    let mut child = job.start(Some(token)).map_err(io("start", &script))?;
    // For `status` and the next build, while processes may live: none outlives a power cut.
    let _ = fsutil::replace(&wd.running_pid(), child.tracked().text().as_bytes());
    let exit = child.wait().map_err(io("wait for", &script))?;
    // The step's own children may linger (a daemonised compiler server): stop them (a
    // supervisor did already, and exits only when they are gone).
    child.stop(false);
    let _ = fs::remove_file(wd.running_pid());
    if exit.success() {
        return Ok(());
    }
    use std::os::unix::process::ExitStatusExt;
    let status = crate::process::describe_status(exit);
    let tail_lines: Vec<String> = tail(&log, 40).iter().map(|l| redact(l, &step.env)).collect();
    let looks_oom = exit.code() == Some(137)
        || exit.signal() == Some(9)
        || tail_says_oom(&tail_lines)
        || super::budget::oom_kills().zip(oom_before).is_some_and(|(after, before)| after > before);
    Err(StepError::Failed(Box::new(StepFailure {
        recipe: recipe.into(),
        step: step.name.clone(),
        command: step.command.clone(),
        cwd: step.cwd.clone(),
        status,
        tail_lines,
        log,
        script,
        looks_oom,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_step_reports_everything_and_script_reproduces() {
        let d = tempfile::tempdir().unwrap();
        let dirs = WorkDir { root: d.path().join("w") };
        let step = Step {
            name: "compile".into(),
            command: "for i in $(seq 1 100); do echo line $i; done; env | grep ^rocm-core_ROOT=; echo \"value=$MY_VAR\"; exit 3".into(),
            cwd: d.path().join("b"),
            env: BTreeMap::from([
                ("MY_VAR".into(), "it's here".into()),
                ("PATH".into(), "/usr/bin:/bin".into()),
                // CMake's <package>_ROOT for a package with a hyphen: no shell can export it.
                ("rocm-core_ROOT".into(), "/opt/my prefix".into()),
            ]),
            fills_stage: false,
            fresh_dir: None,
        };
        let e = run("demo", 0, &step, &dirs, None).unwrap_err();
        let StepError::Failed(f) = e else { panic!("{e}") };
        assert_eq!(f.status, "exit status 3");
        assert_eq!(f.tail_lines.len(), 40);
        assert_eq!(f.tail_lines.last().unwrap(), "value=it's here");
        assert_eq!(f.tail_lines[f.tail_lines.len() - 2], "rocm-core_ROOT=/opt/my prefix");
        assert_eq!(f.tail_lines[0], "line 63");
        let msg = f.to_string();
        assert!(msg.starts_with("demo: step `compile` failed (exit status 3)"), "{msg}");
        assert!(msg.contains("re-run:    bash "), "{msg}");
        // The script alone reproduces the failure, with the same environment.
        let out = std::process::Command::new("bash").arg(&f.script).env("MY_VAR", "other").output().unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert!(String::from_utf8_lossy(&out.stdout).contains("value=it's here"));
        assert!(!dirs.running_pid().exists());
    }

    #[test]
    fn secrets_stay_out_of_the_script_and_the_log_tail_but_reach_the_step() {
        let d = tempfile::tempdir().unwrap();
        let dirs = WorkDir { root: d.path().join("w") };
        let remote = "http://127.0.0.1:9/ccache/|bearer-token=s3cr3t-remote";
        let env = BTreeMap::from([
            ("CCACHE_REMOTE_STORAGE".to_string(), remote.to_string()),
            ("SCCACHE_WEBDAV_TOKEN".to_string(), "s3cr3t-token".to_string()),
            ("PIP_INDEX_URL".to_string(), "https://me:s3cr3t-pw@pypi.lan/simple".to_string()),
            ("PIP_EXTRA_INDEX_URL".to_string(), "https://pypi.lan/simple".to_string()),
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ]);
        let step = Step {
            name: "build".into(),
            command: "echo \"$CCACHE_REMOTE_STORAGE $SCCACHE_WEBDAV_TOKEN $PIP_INDEX_URL\" > seen; echo \"using $PIP_INDEX_URL\"; exit 1".into(),
            cwd: d.path().join("b"),
            env,
            fills_stage: false,
            fresh_dir: None,
        };
        let StepError::Failed(f) = run("demo", 0, &step, &dirs, None).unwrap_err() else { panic!() };
        // The step had the real values.
        assert_eq!(
            std::fs::read_to_string(d.path().join("b/seen")).unwrap().trim(),
            format!("{remote} s3cr3t-token https://me:s3cr3t-pw@pypi.lan/simple")
        );
        let script = std::fs::read_to_string(&f.script).unwrap();
        assert!(!script.contains("s3cr3t"), "{script}");
        assert!(
            script.contains(
                "# Redacted (they may hold credentials): CCACHE_REMOTE_STORAGE PIP_INDEX_URL SCCACHE_WEBDAV_TOKEN."
            ),
            "{script}"
        );
        assert!(script.contains("export PIP_EXTRA_INDEX_URL=https://pypi.lan/simple"), "{script}");
        assert_eq!(f.tail_lines, ["using <redacted PIP_INDEX_URL>"]);
        assert!(!f.to_string().contains("s3cr3t"));
        // Re-run by hand: without the settings it says which to set; with them it runs.
        let out = std::process::Command::new("bash").arg(&f.script).env_clear().output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("CCACHE_REMOTE_STORAGE was redacted from this script"), "{err}");
        let out = std::process::Command::new("bash")
            .arg(&f.script)
            .env_clear()
            .env("CCACHE_REMOTE_STORAGE", "a")
            .env("SCCACHE_WEBDAV_TOKEN", "b")
            .env("PIP_INDEX_URL", "c")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "using c");
        assert_eq!(std::fs::read_to_string(d.path().join("b/seen")).unwrap().trim(), "a b c");
    }

    #[test]
    fn what_counts_as_a_secret() {
        assert!(is_secret("CCACHE_REMOTE_STORAGE", "http://h/c/"));
        assert!(is_secret("SCCACHE_WEBDAV_PASSWORD", "x"));
        assert!(is_secret("AWS_SECRET_ACCESS_KEY", "x"));
        assert!(is_secret("SCCACHE_REDIS_ENDPOINT", "redis://u:p@127.0.0.1:6379"));
        assert!(is_secret("X", "a https://tok@host/x"));
        assert!(!is_secret("PIP_INDEX_URL", "https://pypi.org/simple"));
        assert!(!is_secret("CCACHE_BASEDIR", "/w"));
        assert!(!is_secret("GIT_EMAIL", "me@host"));
    }

    #[test]
    fn shell_quote_keeps_plain_words_and_round_trips_through_bash() {
        for plain in ["numpy==2.2.1", "/opt/rf/bin:/usr/bin", "-DX=a,b", "100%", "user@host"] {
            assert_eq!(shell_quote(plain), plain);
        }
        assert_eq!(shell_quote("gfx1010;gfx1012"), "'gfx1010;gfx1012'");
        let words = [
            "",
            "gfx1010;gfx1012",
            "it's here",
            "a b\tc\nd",
            "$HOME `id` $(id) \"q\" \\",
            "*.so ~ {a,b} [x] # ! ^a a^b",
            "naïve/路径",
            "'",
            "-",
        ];
        let script: String = words.iter().map(|w| format!("printf '%s\\0' {}\n", shell_quote(w))).collect();
        let out = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let got: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().split_terminator('\0').collect();
        assert_eq!(got, words);
    }

    #[test]
    fn oom_kill_message_is_recognised() {
        let d = tempfile::tempdir().unwrap();
        let dirs = WorkDir { root: d.path().join("w") };
        let step = Step {
            name: "build".into(),
            command: "echo 'clang++: error: unable to execute command: Killed signal terminated program'; exit 1"
                .into(),
            cwd: d.path().to_path_buf(),
            env: BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]),
            fills_stage: false,
            fresh_dir: None,
        };
        let StepError::Failed(f) = run("demo", 0, &step, &dirs, None).unwrap_err() else { panic!() };
        assert!(f.looks_oom);
    }
}
