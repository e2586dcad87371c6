//! Where things live on disk: the one place that spells each layout other modules read.
//!
//! - A recipe's work dir, `<work-dir>/<stack>/<recipe>/`: `src/` (the patched tree) and its
//!   marker `src.prepared.json`, `build/`, `stage/`, `tmp/` (the steps' `TMPDIR`), `steps/NN-<step>.sh` (each step's script,
//!   numbered in run order), `logs/<step>.log`, `running.pid` (the step now running: its process
//!   group on the first line, then `token <T>`, the value of `ROCMFORGE_STEP_TOKEN` in its
//!   processes' environment; see `process::Tracked`) and `state.json` (which key the dir is for,
//!   finished steps, stored or not), `ccache-stats.log` (ccache's count of the recipe's compiles).
//!   Its lock, `<work-dir>/<stack>/.locks/<recipe>.lock`, is held by the build using it.
//! - Scratch trees (pristine copies to compare or check against): `<work-dir>/.scratch/`.
//! - The last build of each recipe: `<state-dir>/last-build/<stack>/<recipe>.json`, the cache-key
//!   inputs of the artifact it last built or used (read by `plan` to say why a recipe rebuilds and
//!   by `cache gc --unused`; see `history`).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::process::Tracked;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct WorkState {
    pub key: String,
    pub steps_done: Vec<String>,
    pub stored: bool,
    /// The build serial of this key's build here: the recipe's count of builds begun in this
    /// state dir ([`next_build_serial`]), taken when the build begins and kept across resumed
    /// runs, so every step sees the same wheel version (`local_version` of the index module).
    #[serde(default)]
    pub serial: u64,
}

/// Who holds a work dir's lock (see [`WorkDir::lock`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WorkHolder {
    pub pid: u32,
    /// The command holding it (`build`, `clean`).
    pub command: String,
    pub stack: String,
}

impl WorkHolder {
    pub fn me(command: &str, stack: &str) -> WorkHolder {
        WorkHolder { pid: std::process::id(), command: command.to_string(), stack: stack.to_string() }
    }
}

impl std::fmt::Display for WorkHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`rocmforge {}` of stack `{}` (pid {})", self.command, self.stack, self.pid)
    }
}

/// A recipe's work dir: `src/` (the patched tree), `build/`, `stage/`, `steps/`, `logs/`.
#[derive(Debug, Clone)]
pub struct WorkDir {
    pub root: PathBuf,
}

impl WorkDir {
    pub fn new(work_dir: &Path, stack: &str, recipe: &str) -> WorkDir {
        WorkDir { root: work_dir.join(stack).join(recipe) }
    }
    pub fn src(&self) -> PathBuf {
        self.root.join("src")
    }
    pub fn build(&self) -> PathBuf {
        self.root.join("build")
    }
    pub fn stage(&self) -> PathBuf {
        self.root.join("stage")
    }
    /// The steps' temp dir (`TMPDIR`), emptied when the steps start, removed when the artifact
    /// is stored.
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }
    pub fn steps(&self) -> PathBuf {
        self.root.join("steps")
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    fn state_file(&self) -> PathBuf {
        self.root.join("state.json")
    }
    /// The script of a recipe's step, numbered by its place in the run (`steps/02-build.sh`).
    pub fn step_script(&self, index: usize, step: &str) -> PathBuf {
        self.steps().join(format!("{:02}-{step}.sh", index + 1))
    }
    /// The log of a recipe's step (`logs/build.log`).
    pub fn step_log(&self, step: &str) -> PathBuf {
        self.logs().join(format!("{step}.log"))
    }
    /// The core time a supervised step used, beside its log (`logs/build.cpu`): see
    /// [`step_core_secs`].
    pub fn step_cpu(&self, step: &str) -> PathBuf {
        step_cpu_beside(&self.step_log(step))
    }
    /// ccache's log of this recipe's compiles (`CCACHE_STATSLOG`), counted for the report.
    pub fn compiler_cache_log(&self) -> PathBuf {
        self.root.join("ccache-stats.log")
    }
    /// What this recipe's sccache servers counted, added up over runs (see `engine::sccache`).
    pub fn sccache_stats(&self) -> PathBuf {
        self.root.join("sccache-stats.json")
    }
    /// The output of this recipe's sccache server.
    pub fn sccache_log(&self) -> PathBuf {
        self.logs().join("sccache-server.log")
    }
    /// The step now running (its process group and token), so a resumed run can stop an orphan of a killed
    /// rocmforge before touching the build dir, and `status` can tell processes left behind.
    pub fn running_pid(&self) -> PathBuf {
        self.root.join("running.pid")
    }

    /// `<work-dir>/<stack>/.locks/<recipe>.lock`: held by the process using the dir (a build,
    /// from its recipe's first step until the build ends, or `clean` while it removes the dir).
    /// Outside the dir, so removing the dir never removes its lock.
    fn lock_path(&self) -> PathBuf {
        let recipe = self.root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        self.root.parent().unwrap_or(&self.root).join(".locks").join(format!("{recipe}.lock"))
    }

    /// Takes the dir's lock for `me`. Held by another process: with `waiting`, that is told who
    /// and the call waits; without, `Err(holder)` at once.
    pub fn lock(
        &self,
        me: &WorkHolder,
        waiting: Option<&mut dyn FnMut(Option<WorkHolder>)>,
    ) -> std::io::Result<Result<fsutil::HeldLock, Option<WorkHolder>>> {
        fsutil::lock_held(&self.lock_path(), me, waiting)
    }

    /// What `running.pid` says, if it is there and readable.
    pub fn running_step(&self) -> Option<Tracked> {
        Tracked::parse(&fs::read_to_string(self.running_pid()).ok()?)
    }

    /// The steps that have a log, in the order they run (from the numbered step scripts), then
    /// logs without a script (written by another version) by name.
    pub fn logged_steps(&self) -> Vec<(String, PathBuf)> {
        let mut numbered: Vec<(u32, String)> = fs::read_dir(self.steps())
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                let (num, rest) = n.strip_suffix(".sh")?.split_once('-')?;
                Some((num.parse().ok()?, rest.to_string()))
            })
            .collect();
        numbered.sort();
        let mut out: Vec<(String, PathBuf)> =
            numbered.into_iter().map(|(_, s)| (s.clone(), self.step_log(&s))).filter(|(_, p)| p.is_file()).collect();
        let mut extra: Vec<(String, PathBuf)> = fs::read_dir(self.logs())
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| Some((e.file_name().to_string_lossy().strip_suffix(".log")?.to_string(), e.path())))
            .filter(|(s, _)| !out.iter().any(|(o, _)| o == s))
            .collect();
        extra.sort();
        out.extend(extra);
        out
    }

    pub fn state(&self) -> Option<WorkState> {
        serde_json::from_slice(&fs::read(self.state_file()).ok()?).ok()
    }

    pub fn save(&self, s: &WorkState) -> std::io::Result<()> {
        fsutil::write_atomic(&self.state_file(), &serde_json::to_vec_pretty(s).expect("serialises"))
    }

    /// Makes the dir ready for `key`: a dir built for another key is wiped (its build dir would
    /// mix old and new inputs); a dir for the same key is kept, so ninja continues where it was.
    /// `next_serial` is asked for a build serial when a build of `key` begins here.
    pub fn begin(&self, key: &str, next_serial: impl FnOnce() -> std::io::Result<u64>) -> std::io::Result<WorkState> {
        match self.state() {
            Some(s) if s.key == key && s.serial != 0 => Ok(s),
            Some(mut s) if s.key == key => {
                s.serial = next_serial()?;
                self.save(&s)?;
                Ok(s)
            }
            _ => {
                for d in [self.build(), self.stage(), self.tmp(), self.steps(), self.logs()] {
                    fsutil::remove_dir_all_if_exists(&d)?;
                }
                fsutil::remove_if_exists(&self.compiler_cache_log())?;
                fsutil::remove_if_exists(&self.sccache_stats())?;
                fs::create_dir_all(&self.root)?;
                let s = WorkState { key: key.to_string(), serial: next_serial()?, ..Default::default() };
                self.save(&s)?;
                Ok(s)
            }
        }
    }
}

/// Where scratch trees go (removed when done).
pub fn scratch_dir(work_dir: &Path) -> PathBuf {
    work_dir.join(".scratch")
}

/// `<state-dir>/last-build/`: one folder per stack.
/// Counts the builds of `recipe` begun with this state dir and returns the new count (1 for the
/// first): `<state-dir>/build-serials/<stack>/<recipe>`. The wheels a build makes carry it in
/// their local label, where it makes pip and uv prefer the newer of two builds.
pub fn next_build_serial(state_dir: &Path, stack: &str, recipe: &str) -> std::io::Result<u64> {
    let path = state_dir.join("build-serials").join(stack).join(recipe);
    let last = fs::read_to_string(&path).ok().and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(0);
    let next = last + 1;
    // Said with its path: it is the state dir's, not the work dir's the caller names.
    let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("cannot write `{}`: {e}", path.display()));
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(named)?;
    }
    fsutil::write_atomic(&path, format!("{next}\n").as_bytes()).map_err(named)?;
    Ok(next)
}

pub fn last_build_root(state_dir: &Path) -> PathBuf {
    state_dir.join("last-build")
}

/// The inputs of the artifact `recipe` of `stack` last built or used.
pub fn last_build_file(state_dir: &Path, stack: &str, recipe: &str) -> PathBuf {
    last_build_root(state_dir).join(stack).join(format!("{recipe}.json"))
}

/// The core-time file of the step whose log is `log` (`logs/build.log` -> `logs/build.cpu`).
pub fn step_cpu_beside(log: &Path) -> PathBuf {
    log.with_extension("cpu")
}

/// The core seconds (user + system, every process of the step) that a step's supervisor wrote
/// beside its log when the step ended; `None` when it wrote none (an unsupervised step, or a
/// step still running) or the file is not a number.
pub fn step_core_secs(log: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(step_cpu_beside(log)).ok()?;
    text.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0)
}
