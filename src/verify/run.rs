//! Running the cases: each in a process group of its own, with a token in its environment, under
//! a supervisor (`process::supervisor`, a subreaper: a child that leaves the group and drops the
//! token stays its descendant), under a timeout. A case that outlives it is a HANG: every process
//! of the case (group members, token carriers, their descendants, a child that ignores SIGTERM
//! included) is stopped as a build step's are, and the run goes on. A case that ends leaves
//! nothing running either, nor one whose rocmforge is killed.
//! Output goes to files, never pipes, so a lingering grandchild cannot block the reading. The
//! script's tagged lines on stdout say what it found: the torch it imported (`ROCMFORGE-TORCH`),
//! a result that differs from the reference (`ROCMFORGE-WRONG`), the times of a pass
//! (`ROCMFORGE-RESULT`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Case;
use crate::process::{Job, Tracked};

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", content = "message", rename_all = "kebab-case")]
pub enum Outcome {
    Pass,
    /// Outlived its timeout.
    Hang,
    /// Ran to its end, but an output or gradient differs from the float64 CPU reference: the
    /// message names the tensor, the largest difference and the tolerance.
    Wrong(String),
    /// Raised, exited non-zero or died of a signal: the message says which, with the case's
    /// last line of error output.
    Error(String),
}

/// What the case's Python imported, as it printed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Versions {
    pub torch: String,
    /// `torch.version.hip` (none for a torch built without ROCm).
    pub hip: Option<String>,
    /// `cuda` (the GPU, through HIP) or `cpu` (CPU mode).
    pub device: String,
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
    /// The profile lists the case as a known failure (an error or a wrong result).
    pub known_failure: bool,
    /// The result is one the profile expects (a pass, a hang it lists, a failure it lists).
    pub expected: bool,
    /// The torch the case imported (none when it did not get that far).
    pub versions: Option<Versions>,
}

/// What every case runs with.
pub struct Runner {
    pub python: PathBuf,
    pub timeout: Duration,
    /// The whole environment of a case (the activation applied to the caller's).
    pub env: BTreeMap<String, String>,
    /// Where the script and each case's output go.
    pub dir: PathBuf,
    /// The profile's known hangs and failures.
    pub known: crate::recipe::KnownCases,
}

const RESULT_TAG: &str = "ROCMFORGE-RESULT ";
const WRONG_TAG: &str = "ROCMFORGE-WRONG ";
const TORCH_TAG: &str = "ROCMFORGE-TORCH ";

/// What one process of a case left.
struct Ended {
    outcome: Outcome,
    times: Option<(f64, f64)>,
    versions: Option<Versions>,
}

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
        let known_hang = self.known.is_known_hang(&case.id);
        let start = Instant::now();
        let ended = self.run_process(script, case).unwrap_or_else(|e| Ended {
            outcome: Outcome::Error(format!("cannot run `{}`: {e}", self.python.display())),
            times: None,
            versions: None,
        });
        let message = match &ended.outcome {
            Outcome::Wrong(m) | Outcome::Error(m) => Some(m.as_str()),
            Outcome::Pass | Outcome::Hang => None,
        };
        let known_failure = self.known.is_known_failure(&case.id, message);
        let expected = match &ended.outcome {
            Outcome::Pass => true,
            Outcome::Hang => known_hang,
            Outcome::Wrong(_) | Outcome::Error(_) => known_failure,
        };
        CaseResult {
            id: case.id.clone(),
            describe: case.describe(),
            outcome: ended.outcome,
            first_s: ended.times.map(|t| t.0),
            cached_s: ended.times.map(|t| t.1),
            wall_s: start.elapsed().as_secs_f64(),
            known_hang,
            known_failure,
            expected,
            versions: ended.versions,
        }
    }

    fn run_process(&self, script: &Path, case: &Case) -> std::io::Result<Ended> {
        let out_path = self.dir.join(format!("{}.out", case.id));
        let err_path = self.dir.join(format!("{}.err", case.id));
        let json = case.json();
        let mut job = Job::new(&self.python, &[script.as_os_str(), std::ffi::OsStr::new(&json)], true);
        job.command
            .env_clear()
            .envs(&self.env)
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(&self.dir)
            .stdout(std::fs::File::create(&out_path)?)
            .stderr(std::fs::File::create(&err_path)?);
        let mut child = job.start(Some(Tracked::new_token(&format!("verify-{}-", case.id))))?;
        let status = child.wait_until(crate::process::deadline_after(self.timeout))?;
        // Whatever the case left (or, on a hang, all of it) is stopped: SIGTERM, then SIGKILL.
        child.stop(status.is_none());
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let tagged = |tag: &str| stdout.lines().rev().find_map(|l| l.strip_prefix(tag)).map(str::trim);
        let versions = tagged(TORCH_TAG).and_then(|j| serde_json::from_str(j).ok());
        let times = tagged(RESULT_TAG).and_then(parse_times);
        let outcome = match (status, tagged(WRONG_TAG)) {
            (None, _) => Outcome::Hang,
            (Some(_), Some(wrong)) => Outcome::Wrong(wrong.to_string()),
            (Some(s), None) if s.success() && times.is_some() => Outcome::Pass,
            (Some(s), None) if s.success() => {
                Outcome::Error(format!("exited 0 without a result line; {}", last_line(&stderr, &stdout)))
            }
            (Some(s), None) => {
                use std::os::unix::process::ExitStatusExt;
                let how = crate::process::describe_status(s);
                let name = s.signal().map(crate::process::signal_name).unwrap_or_default();
                Outcome::Error(format!("{how}{name}: {}", last_line(&stderr, &stdout)))
            }
        };
        let times = if outcome == Outcome::Pass { times } else { None };
        Ok(Ended { outcome, times, versions })
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
        .find(|l| !l.trim().is_empty() && !l.starts_with("ROCMFORGE-"))
        .map(|l| l.trim().chars().take(300).collect())
        .unwrap_or_else(|| "no output".into())
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
