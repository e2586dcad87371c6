//! Reading a build's status file from another process: which build, is it still alive.

use std::path::{Path, PathBuf};

use super::{status_path, BuildRecord, BuildState};
use crate::layout::WorkDir;
use crate::process::reap::{self, Proc};

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("no build recorded yet in `{0}` (a build writes its status there while it runs)")]
    None(PathBuf),
    #[error("cannot read build status `{path}`")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("build status `{path}` is not readable JSON (from another rocmforge version?)")]
    Parse { path: PathBuf, source: serde_json::Error },
}

/// The status of `stack`'s last build, or (no stack given) of the most recently updated build.
pub fn read(state_dir: &Path, stack: Option<&str>) -> Result<(PathBuf, BuildRecord), StatusError> {
    let path = match stack {
        Some(s) => status_path(state_dir, s),
        None => newest(&state_dir.join("status")).ok_or_else(|| StatusError::None(state_dir.join("status")))?,
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StatusError::None(path)),
        Err(source) => return Err(StatusError::Read { path, source }),
    };
    let rec = serde_json::from_slice(&bytes).map_err(|source| StatusError::Parse { path: path.clone(), source })?;
    Ok((path, rec))
}

fn newest(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, p)| p)
}

/// Is `pid` a live rocmforge process? (A reused pid running something else is not.)
pub fn rocmforge_alive(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else { return false };
    // Signal 0 only checks that the process exists; EPERM: it does, run by another user.
    let exists = p > 0
        && rustix::process::Pid::from_raw(p).is_some_and(|pid| match rustix::process::test_kill_process(pid) {
            Ok(()) => true,
            Err(e) => e == rustix::io::Errno::PERM,
        });
    if !exists {
        return false;
    }
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmd) => String::from_utf8_lossy(&cmd).contains("rocmforge"),
        Err(_) => true,
    }
}

/// What the user should read: "running", "finished", "finished: failed", "interrupted (stopped
/// by a signal)", or "interrupted (rocmforge pid N is gone)" when its process died without a word.
pub fn liveness(rec: &BuildRecord) -> String {
    match rec.state {
        BuildState::Running if rocmforge_alive(rec.pid) => "running".into(),
        BuildState::Running => format!("interrupted (rocmforge pid {} is gone)", rec.pid),
        BuildState::Succeeded => "finished".into(),
        BuildState::Failed => "finished: failed".into(),
        BuildState::Interrupted => "interrupted (stopped by a signal)".into(),
    }
}

/// A build waiting for another build's prefix: `<state>/status/<stack>.waiting-<pid>` (not
/// `.json`: `read` never mistakes it for a status file), removed when it gets the prefix.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Waiting {
    pub pid: u32,
    pub stack: String,
    pub prefix: PathBuf,
    /// The build holding the prefix, when known.
    pub holder: Option<u32>,
    pub since: String,
}

fn waiting_path(state_dir: &Path, stack: &str, pid: u32) -> PathBuf {
    state_dir.join("status").join(format!("{stack}.waiting-{pid}"))
}

impl Waiting {
    /// Records this process as waiting; the record goes when the returned guard is dropped.
    pub fn record(state_dir: &Path, w: Waiting) -> WaitingGuard {
        let path = waiting_path(state_dir, &w.stack, w.pid);
        let _ = crate::fsutil::write_atomic(&path, &serde_json::to_vec_pretty(&w).expect("serialises"));
        WaitingGuard(path)
    }

    /// The builds of `stack` waiting for a prefix now (records of dead processes are ignored).
    pub fn of(state_dir: &Path, stack: &str) -> Vec<Waiting> {
        let prefix = format!("{stack}.waiting-");
        let mut out: Vec<Waiting> = std::fs::read_dir(state_dir.join("status"))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter_map(|e| serde_json::from_slice::<Waiting>(&std::fs::read(e.path()).ok()?).ok())
            .filter(|w| rocmforge_alive(w.pid))
            .collect();
        out.sort_by_key(|w| w.pid);
        out
    }
}

/// Removes a waiting record when dropped.
pub struct WaitingGuard(PathBuf);

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Processes a step of the build left running: a recipe and what is alive of its step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub recipe: String,
    pub procs: Vec<Proc>,
}

/// For a build whose rocmforge is gone: the processes its steps left running (a step records
/// itself in `running.pid` of its work dir under `work_dir`; normally its supervisor stops them
/// all when rocmforge dies, unless it was killed too, e.g. by `pkill -9 rocmforge`). Empty for a
/// live build.
pub fn leftovers(work_dir: &Path, rec: &BuildRecord) -> Vec<Leftover> {
    if rec.state == BuildState::Running && rocmforge_alive(rec.pid) {
        return Vec::new();
    }
    rec.recipes
        .iter()
        .filter_map(|r| {
            let step = WorkDir::new(work_dir, &rec.stack, &r.name).running_step()?;
            let procs = reap::leftovers(&step);
            (!procs.is_empty()).then(|| Leftover { recipe: r.name.clone(), procs })
        })
        .collect()
}

/// How old a temp file of the status dir must be to be a leftover: a build replaces its status
/// file many times a second, so a temp file lives for microseconds unless its writer was killed.
const STALE_TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Temp files a killed build left in `<state>/status/` (the status file is replaced through a
/// `.tmp-*` file beside it): `cache verify` lists them, `cache gc` removes them.
pub fn stale_temps(state_dir: &Path) -> Vec<PathBuf> {
    crate::fsutil::stale_entries(&state_dir.join("status"), |name, e| {
        name.starts_with(".tmp-")
            && e.metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_TEMP_AGE)
    })
}
