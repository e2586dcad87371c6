//! Running the cases: each in a process group of its own, with a token in its environment, under
//! a timeout. A case that outlives it is a HANG: every process of the case (group members, token
//! carriers, their descendants, a child that ignores SIGTERM included) is stopped as a build step
//! is (`engine::reap`), and the run goes on. A case that ends leaves nothing running either.
//! Output goes to files, never pipes, so a lingering grandchild cannot block the reading.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Case;
use crate::engine::reap::{self, Stop};
use crate::layout::RunningStep;

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", content = "message", rename_all = "kebab-case")]
pub enum Outcome {
    Pass,
    /// Outlived its timeout.
    Hang,
    /// Raised, exited non-zero or died of a signal: the message says which, with the case's
    /// last line of error output.
    Error(String),
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub id: String,
    pub describe: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Seconds of the first call (MIOpen compiles its kernels then) and of the second (cached).
    pub first_s: Option<f64>,
    pub cached_s: Option<f64>,
    /// Seconds the case's process ran.
    pub wall_s: f64,
    /// The profile lists the case as a known hang.
    pub known_hang: bool,
    /// The result is one the profile expects (a pass, or a hang it lists).
    pub expected: bool,
}

/// What every case runs with.
pub struct Runner {
    pub python: PathBuf,
    pub timeout: Duration,
    /// The whole environment of a case (the activation applied to the caller's).
    pub env: BTreeMap<String, String>,
    /// Where the script and each case's output go.
    pub dir: PathBuf,
    pub known_hangs: Vec<String>,
}

const RESULT_TAG: &str = "ROCMFORGE-RESULT ";

impl Runner {
    /// Writes the case script into `dir`.
    pub fn prepare(&self) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let script = self.dir.join("case.py");
        crate::fsutil::write_atomic(&script, super::CASE_SCRIPT.as_bytes())?;
        Ok(script)
    }

    /// Runs one case to its end or its timeout.
    pub fn run(&self, script: &Path, case: &Case) -> CaseResult {
        let known_hang = self.known_hangs.contains(&case.id);
        let start = Instant::now();
        let (outcome, times) = match self.run_process(script, case) {
            Ok(r) => r,
            Err(e) => (Outcome::Error(format!("cannot run `{}`: {e}", self.python.display())), None),
        };
        let expected = match &outcome {
            Outcome::Pass => true,
            Outcome::Hang => known_hang,
            Outcome::Error(_) => false,
        };
        CaseResult {
            id: case.id.clone(),
            describe: case.describe(),
            outcome,
            first_s: times.map(|t| t.0),
            cached_s: times.map(|t| t.1),
            wall_s: start.elapsed().as_secs_f64(),
            known_hang,
            expected,
        }
    }

    fn run_process(&self, script: &Path, case: &Case) -> std::io::Result<(Outcome, Option<(f64, f64)>)> {
        let out_path = self.dir.join(format!("{}.out", case.id));
        let err_path = self.dir.join(format!("{}.err", case.id));
        let token = format!(
            "verify-{}-{}-{}",
            std::process::id(),
            case.id,
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
        );
        let mut child = Command::new(&self.python)
            .arg(script)
            .arg(case.json())
            .env_clear()
            .envs(&self.env)
            .env(RunningStep::TOKEN_VAR, &token)
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path)?)
            .stderr(std::fs::File::create(&err_path)?)
            .process_group(0)
            .spawn()?;
        let group = RunningStep { pgid: child.id() as i32, token: Some(token) };
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break Some(s);
            }
            if Instant::now() >= deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Whatever the case left (or, on a hang, all of it) is stopped: SIGTERM, then SIGKILL.
        reap::stop(&group, None, Stop { grace: status.is_none(), reap: false, give_up: Duration::from_secs(10) });
        let status = match status {
            Some(s) => s,
            None => {
                let _ = child.wait();
                return Ok((Outcome::Hang, None));
            }
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let times = stdout.lines().rev().find_map(|l| l.strip_prefix(RESULT_TAG)).and_then(parse_times);
        if status.success() {
            return Ok(match times {
                Some(t) => (Outcome::Pass, Some(t)),
                None => {
                    (Outcome::Error(format!("exited 0 without a result line; {}", last_line(&stderr, &stdout))), None)
                }
            });
        }
        use std::os::unix::process::ExitStatusExt;
        let how = match (status.code(), status.signal()) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(s)) => format!("killed by signal {s}{}", signal_name(s)),
            _ => "failed".into(),
        };
        Ok((Outcome::Error(format!("{how}: {}", last_line(&stderr, &stdout))), None))
    }
}

fn parse_times(json: &str) -> Option<(f64, f64)> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    Some((v.get("first")?.as_f64()?, v.get("cached")?.as_f64()?))
}

/// The last non-empty line of the error output (a traceback's last line is the exception).
fn last_line(stderr: &str, stdout: &str) -> String {
    stderr
        .lines()
        .chain(stdout.lines())
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with(RESULT_TAG))
        .map(|l| l.trim().chars().take(300).collect())
        .unwrap_or_else(|| "no output".into())
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        4 => " (SIGILL)",
        6 => " (SIGABRT)",
        7 => " (SIGBUS)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        15 => " (SIGTERM)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_names_the_exception() {
        let err = "Traceback (most recent call last):\n  File \"x\", line 1\nRuntimeError: HIP error: invalid device function\n\n";
        assert_eq!(last_line(err, ""), "RuntimeError: HIP error: invalid device function");
        assert_eq!(last_line("", ""), "no output");
        assert_eq!(parse_times(r#"{"first": 1.5, "cached": 0.25}"#), Some((1.5, 0.25)));
    }
}
