//! What a build did, kept for people: a `Recorder` (a `Progress`) notes every recipe and step
//! with its times, keeps `<state>/status/<stack>.json` current for `rocmforge status`, and when
//! the build ends writes the report (`report.json`, a Chrome trace, an HTML timeline) under
//! `<state>/reports/<stack>/<time>/` and each built recipe's duration for the next ETA.

pub mod html;
pub mod status;
pub mod trace;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::progress::{CompilerCacheStats, Outcome, Progress};

/// Bump when a field changes meaning, so readers can tell old files.
pub const FORMAT: u32 = 1;

/// The whole story of one build; also the status file's content while it runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct BuildRecord {
    pub format: u32,
    pub stack: String,
    /// The rocmforge process running the build.
    pub pid: u32,
    /// UTC, RFC 3339.
    pub started_at: String,
    /// The same instant in milliseconds since the Unix epoch (for "how long ago").
    pub started_unix_ms: u64,
    pub updated_at: String,
    pub state: BuildState,
    /// Seconds from start to end (set when it ended).
    pub duration_secs: Option<f64>,
    pub recipes_total: usize,
    pub recipes_done: usize,
    /// What is building now (derived from `recipes`, for readers of the status file).
    #[serde(default)]
    pub running: Vec<RunningRecipe>,
    /// Every recipe of the build, in build order.
    pub recipes: Vec<RecipeRecord>,
    /// The report directory, once written.
    pub report: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BuildState {
    #[default]
    Running,
    Succeeded,
    Failed,
    Interrupted,
}

impl BuildState {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildState::Running => "running",
            BuildState::Succeeded => "succeeded",
            BuildState::Failed => "failed",
            BuildState::Interrupted => "interrupted",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunningRecipe {
    pub recipe: String,
    /// `None` while its source is prepared.
    pub step: Option<String>,
    pub log: Option<PathBuf>,
    pub step_started_at: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RecipeRecord {
    pub name: String,
    /// Written `"built"`, `"cached"`, ...; `None`: waiting or running.
    pub outcome: Option<Outcome>,
    /// "hit" (artifact reused) or "miss" (built); `None` until it starts.
    pub cache: Option<String>,
    /// Seconds since the build started.
    pub start_secs: Option<f64>,
    pub end_secs: Option<f64>,
    pub duration_secs: Option<f64>,
    /// Where its step logs are (`<work>/<stack>/<recipe>/logs`), once a step ran.
    pub log_dir: Option<PathBuf>,
    pub steps: Vec<StepRecord>,
    /// Why it failed (one line), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What its installed files carry, checked against its `[targets]` declarations
    /// (`device-code`, `must-contain`) when it was built; empty for cache hits and recipes that
    /// declare none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<crate::offload::coverage::CoverageCheck>,
    /// What the compiler cache did for its compiles, when one was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiler_cache: Option<CompilerCacheStats>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StepRecord {
    pub name: String,
    /// "running", "ok", "failed" or "interrupted".
    pub status: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// Seconds since the build started.
    pub start_secs: f64,
    pub end_secs: Option<f64>,
    pub duration_secs: Option<f64>,
    pub log: PathBuf,
    /// Core seconds (user + system) of every process of the step, from its supervisor; `None`
    /// while it runs, or when it was not supervised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_secs: Option<f64>,
}

impl BuildRecord {
    pub fn recipe(&self, name: &str) -> Option<&RecipeRecord> {
        self.recipes.iter().find(|r| r.name == name)
    }
    fn recipe_mut(&mut self, name: &str) -> &mut RecipeRecord {
        match self.recipes.iter().position(|r| r.name == name) {
            Some(i) => &mut self.recipes[i],
            None => {
                self.recipes.push(RecipeRecord { name: name.to_string(), ..Default::default() });
                self.recipes.last_mut().expect("just pushed")
            }
        }
    }
    /// Seconds of the whole build so far (or in all, once ended).
    pub fn span_secs(&self) -> f64 {
        let ends = self.recipes.iter().flat_map(|r| {
            r.end_secs.into_iter().chain(r.steps.iter().filter_map(|s| s.end_secs.or(Some(s.start_secs))))
        });
        ends.fold(self.duration_secs.unwrap_or(0.0), f64::max)
    }
    fn refresh_running(&mut self) {
        self.running = self
            .recipes
            .iter()
            .filter(|r| r.start_secs.is_some() && r.outcome.is_none())
            .map(|r| {
                let step = r.steps.last().filter(|s| s.status == "running");
                RunningRecipe {
                    recipe: r.name.clone(),
                    step: step.map(|s| s.name.clone()),
                    log: step.map(|s| s.log.clone()),
                    step_started_at: step.map(|s| s.started_at.clone()),
                }
            })
            .collect();
    }
}

/// `<state>/status/<stack>.json`
pub fn status_path(state_dir: &Path, stack: &str) -> PathBuf {
    state_dir.join("status").join(format!("{stack}.json"))
}

/// `<state>/reports/<stack>`; the newest report is its `latest`.
pub fn reports_dir(state_dir: &Path, stack: &str) -> PathBuf {
    state_dir.join("reports").join(stack)
}

/// `<state>/durations/<stack>.json`: each recipe's last build time in seconds.
pub fn durations_path(state_dir: &Path, stack: &str) -> PathBuf {
    state_dir.join("durations").join(format!("{stack}.json"))
}

/// Each recipe's last build time (empty when never built or unreadable).
pub fn load_durations(state_dir: &Path, stack: &str) -> BTreeMap<String, f64> {
    std::fs::read(durations_path(state_dir, stack))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Records a build as it happens; see the module notes.
pub struct Recorder {
    state_dir: PathBuf,
    start: Instant,
    start_sys: SystemTime,
    inner: Mutex<Inner>,
}

struct Inner {
    rec: BuildRecord,
    ended: bool,
    report: Option<Result<PathBuf, String>>,
    /// When the status file was last written: cache hits only rewrite it every so often.
    written: Option<Instant>,
}

/// How often events that change little (a cache hit) rewrite the status file.
const STATUS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl Recorder {
    pub fn new(state_dir: &Path, stack: &str) -> Recorder {
        let start_sys = SystemTime::now();
        let rec = BuildRecord {
            format: FORMAT,
            stack: stack.to_string(),
            pid: std::process::id(),
            started_at: utc(start_sys),
            started_unix_ms: start_sys.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            updated_at: utc(start_sys),
            ..Default::default()
        };
        Recorder {
            state_dir: state_dir.to_path_buf(),
            start: Instant::now(),
            start_sys,
            inner: Mutex::new(Inner { rec, ended: false, report: None, written: None }),
        }
    }

    fn now(&self) -> (f64, String) {
        let e = self.start.elapsed();
        (e.as_secs_f64(), utc(self.start_sys + e))
    }

    /// Applies `f` to the record and rewrites the status file (atomically, so a reader never
    /// sees half a file); a `minor` change only if the file is older than [`STATUS_EVERY`].
    /// Ignored once the build ended.
    fn update(&self, minor: bool, f: impl FnOnce(&mut BuildRecord, f64, &str)) {
        let (t, at) = self.now();
        let Ok(mut inner) = self.inner.lock() else { return };
        if inner.ended {
            return;
        }
        f(&mut inner.rec, t, &at);
        inner.rec.updated_at = at;
        inner.rec.refresh_running();
        if minor && inner.written.is_some_and(|w| w.elapsed() < STATUS_EVERY) {
            return;
        }
        inner.written = Some(Instant::now());
        let _ = fsutil::replace(
            &status_path(&self.state_dir, &inner.rec.stack),
            &serde_json::to_vec_pretty(&inner.rec).expect("serialises"),
        );
    }

    /// A copy of the record so far.
    pub fn record(&self) -> BuildRecord {
        self.inner.lock().map(|i| i.rec.clone()).unwrap_or_default()
    }

    /// The report's directory once written, or why it could not be.
    pub fn report(&self) -> Option<Result<PathBuf, String>> {
        self.inner.lock().ok().and_then(|i| i.report.clone())
    }

    /// The build was stopped (Ctrl-C, SIGTERM): running steps are marked interrupted and the
    /// report is written. A no-op if the build already ended.
    pub fn interrupted(&self) {
        self.end(BuildState::Interrupted);
    }

    fn end(&self, state: BuildState) {
        let (t, at) = self.now();
        let Ok(mut inner) = self.inner.lock() else { return };
        if inner.ended {
            return;
        }
        inner.ended = true;
        let rec = &mut inner.rec;
        rec.state = state;
        rec.duration_secs = Some(t);
        rec.updated_at = at.clone();
        for r in &mut rec.recipes {
            for s in r.steps.iter_mut().filter(|s| s.status == "running") {
                s.status = "interrupted".into();
                s.ended_at = Some(at.clone());
                s.end_secs = Some(t);
                s.duration_secs = Some(t - s.start_secs);
                s.core_secs = crate::layout::step_core_secs(&s.log);
            }
        }
        rec.refresh_running();
        // A build that found everything up to date leaves no report (the last one stays latest);
        // one that downloaded from the shared cache does.
        let did_work = state != BuildState::Succeeded
            || rec.recipes.iter().any(|r| matches!(r.outcome, Some(Outcome::Built | Outcome::Downloaded)));
        if did_work {
            let report = write_report(&self.state_dir, &self.start_sys, rec).map_err(|e| e.to_string());
            if let Ok(dir) = &report {
                rec.report = Some(dir.clone());
            }
            inner.report = Some(report);
        }
        let rec = &inner.rec;
        remember_durations(&self.state_dir, rec);
        let _ = fsutil::replace(
            &status_path(&self.state_dir, &rec.stack),
            &serde_json::to_vec_pretty(rec).expect("serialises"),
        );
    }
}

impl Progress for Recorder {
    fn message(&self, _: &str, _: &str) {}
    fn warn(&self, _: &str, _: &str) {}
    fn build_started(&self, recipes: &[String], _: &[String]) {
        self.update(false, |rec, _, _| {
            rec.recipes_total = recipes.len();
            for r in recipes {
                rec.recipe_mut(r);
            }
        });
    }
    fn recipe_started(&self, recipe: &str, cached: bool) {
        self.update(cached, |rec, t, _| {
            let r = rec.recipe_mut(recipe);
            r.start_secs = Some(t);
            r.cache = Some(if cached { "hit" } else { "miss" }.into());
        });
    }
    fn step_started(&self, recipe: &str, step: &str, log: &Path) {
        self.update(false, |rec, t, at| {
            let r = rec.recipe_mut(recipe);
            r.log_dir = log.parent().map(Path::to_path_buf);
            r.steps.push(StepRecord {
                name: step.to_string(),
                status: "running".into(),
                started_at: at.to_string(),
                start_secs: t,
                log: log.to_path_buf(),
                ..Default::default()
            });
        });
    }
    fn step_finished(&self, recipe: &str, step: &str, ok: bool) {
        self.update(false, |rec, t, at| {
            let r = rec.recipe_mut(recipe);
            if let Some(s) = r.steps.iter_mut().rev().find(|s| s.name == step && s.status == "running") {
                s.status = if ok { "ok" } else { "failed" }.into();
                s.ended_at = Some(at.to_string());
                s.end_secs = Some(t);
                s.duration_secs = Some(t - s.start_secs);
                s.core_secs = crate::layout::step_core_secs(&s.log);
            }
        });
    }
    fn coverage(&self, recipe: &str, checks: &[crate::offload::coverage::CoverageCheck]) {
        self.update(false, |rec, _, _| {
            rec.recipe_mut(recipe).coverage = checks.to_vec();
        });
    }
    fn recipe_failed(&self, recipe: &str, error: &str) {
        self.update(false, |rec, _, _| {
            rec.recipe_mut(recipe).error = Some(error.to_string());
        });
    }
    fn compiler_cache(&self, recipe: &str, stats: &CompilerCacheStats) {
        self.update(false, |rec, _, _| {
            rec.recipe_mut(recipe).compiler_cache = Some(stats.clone());
        });
    }
    fn recipe_finished(&self, recipe: &str, outcome: Outcome) {
        self.update(!matches!(outcome, Outcome::Built | Outcome::Failed), |rec, t, _| {
            let r = rec.recipe_mut(recipe);
            r.outcome = Some(outcome);
            r.end_secs = Some(t);
            r.duration_secs = r.start_secs.map(|s| t - s);
            // Sources and skipped recipes are neither a hit nor a miss of the artifact cache.
            if matches!(outcome, Outcome::SourceOnly | Outcome::Skipped) {
                r.cache = None;
            }
            rec.recipes_done = rec.recipes.iter().filter(|r| r.outcome.is_some()).count();
        });
    }
    fn build_finished(&self, ok: bool) {
        self.end(if ok { BuildState::Succeeded } else { BuildState::Failed });
    }
}

/// Writes `report.json`, `trace.json` and `timeline.html` into a new directory named after the
/// build's start, and points `latest` at it.
pub fn write_report(state_dir: &Path, started: &SystemTime, rec: &BuildRecord) -> std::io::Result<PathBuf> {
    let root = reports_dir(state_dir, &rec.stack);
    std::fs::create_dir_all(&root)?;
    let stamp = compact_utc(*started);
    let mut dir = root.join(&stamp);
    let mut n = 1;
    // Two builds may start in the same second (tests do); never mix their files.
    loop {
        match std::fs::create_dir(&dir) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => {
                n += 1;
                dir = root.join(format!("{stamp}-{n}"));
            }
            Err(e) => return Err(e),
        }
    }
    let mut rec = rec.clone();
    rec.report = Some(dir.clone());
    fsutil::replace(&dir.join("report.json"), &serde_json::to_vec_pretty(&rec).expect("serialises"))?;
    fsutil::replace(&dir.join("trace.json"), &serde_json::to_vec(&trace::render(&rec)).expect("serialises"))?;
    fsutil::replace(&dir.join("timeline.html"), html::render(&rec).as_bytes())?;
    // `latest` -> the new dir, replaced atomically (a symlink renamed over the old one).
    let tmp = root.join(format!(".latest.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(dir.file_name().expect("named"), &tmp)?;
    std::fs::rename(&tmp, root.join("latest"))?;
    Ok(dir)
}

/// Keeps each recipe built this time as its new last duration (the ETA of the next build).
fn remember_durations(state_dir: &Path, rec: &BuildRecord) {
    let mut d = load_durations(state_dir, &rec.stack);
    let mut changed = false;
    for r in rec.recipes.iter().filter(|r| r.outcome == Some(Outcome::Built)) {
        if let Some(s) = r.duration_secs {
            d.insert(r.name.clone(), (s * 1000.0).round() / 1000.0);
            changed = true;
        }
    }
    if changed {
        let _ = fsutil::replace(
            &durations_path(state_dir, &rec.stack),
            &serde_json::to_vec_pretty(&d).expect("serialises"),
        );
    }
}

/// `2025-01-02T03:04:05.678Z`
pub fn utc(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, ms) = civil(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
}

/// `20250102T030405Z`, for directory names.
pub fn compact_utc(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, _) = civil(t);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

fn civil(t: SystemTime) -> (i64, u32, u32, i64, i64, i64, u32) {
    let dur = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = dur.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem / 60 % 60, rem % 60, dur.subsec_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_177_045_123); // a leap day
        assert_eq!(utc(t), "2024-02-29T03:24:05.123Z");
        assert_eq!(compact_utc(t), "20240229T032405Z");
    }

    #[test]
    fn recorder_writes_status_report_and_durations() {
        let d = tempfile::tempdir().unwrap();
        let r = Recorder::new(d.path(), "s");
        r.build_started(&["a".into(), "b".into()], &["a".into(), "b".into()]);
        r.recipe_started("a", true);
        r.recipe_finished("a", Outcome::Cached);
        r.recipe_started("b", false);
        r.step_started("b", "configure", Path::new("/w/s/b/logs/configure.log"));
        let st: BuildRecord = serde_json::from_slice(&std::fs::read(status_path(d.path(), "s")).unwrap()).unwrap();
        assert_eq!((st.recipes_total, st.recipes_done, st.state), (2, 1, BuildState::Running));
        assert_eq!(st.running[0].step.as_deref(), Some("configure"));
        r.step_finished("b", "configure", true);
        let cc = CompilerCacheStats { tool: "ccache".into(), hits: 3, remote_hits: 2, misses: 1, uncacheable: 0 };
        r.compiler_cache("b", &cc);
        r.recipe_finished("b", Outcome::Built);
        r.build_finished(true);
        let dir = r.report().unwrap().unwrap();
        assert_eq!(
            std::fs::canonicalize(reports_dir(d.path(), "s").join("latest")).unwrap(),
            std::fs::canonicalize(&dir).unwrap()
        );
        let rep: BuildRecord = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
        assert_eq!(rep.state, BuildState::Succeeded);
        assert_eq!(rep.recipe("a").unwrap().cache.as_deref(), Some("hit"));
        assert_eq!(rep.recipe("b").unwrap().cache.as_deref(), Some("miss"));
        assert_eq!(rep.recipe("b").unwrap().steps[0].status, "ok");
        assert_eq!(rep.recipe("b").unwrap().compiler_cache.as_ref(), Some(&cc));
        assert_eq!(rep.recipe("a").unwrap().compiler_cache, None);
        let html = std::fs::read_to_string(dir.join("timeline.html")).unwrap();
        assert!(html.contains("ccache: 3 hits (2 remote), 1 miss"), "{html}");
        assert!(load_durations(d.path(), "s").contains_key("b"));
        assert!(!load_durations(d.path(), "s").contains_key("a"), "a cache hit says nothing about build time");
    }
}
