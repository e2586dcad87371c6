//! Progress reporting. Library code reports through the `Progress` trait; how it is shown
//! (live bars on a terminal, plain timestamped lines, or only warnings) is decided here, in one
//! place: indicatif appears nowhere else.
//!
//! Implementations are called from several threads at once (recipes build in parallel), so
//! each keeps its state behind a lock and never blocks for long.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the engine tells the user while it works. Implementations must be cheap and thread-safe.
pub trait Progress: Send + Sync {
    /// A status line about one recipe ("fetching", "applying 0001-x.patch", ...).
    fn message(&self, recipe: &str, msg: &str);
    /// A transfer's progress: `what` is a URL or "objects"; `total` when known.
    fn transfer(&self, recipe: &str, what: &str, done: u64, total: Option<u64>) {
        let _ = (recipe, what, done, total);
    }
    /// A build of `recipes` (in order) begins; `to_build` are those that will really be built
    /// (the rest are cache hits, sources, externals: they take no time worth an ETA).
    fn build_started(&self, recipes: &[String], to_build: &[String]) {
        let _ = (recipes, to_build);
    }
    /// A recipe's turn begins; `cached`: its artifact is reused.
    fn recipe_started(&self, recipe: &str, cached: bool) {
        let _ = (recipe, cached);
    }
    /// The shell command a step is about to run (shown with `--verbose`).
    fn step_command(&self, recipe: &str, step: &str, command: &str) {
        let _ = (recipe, step, command);
    }
    /// A step starts; its output goes to `log`.
    fn step_started(&self, recipe: &str, step: &str, log: &Path) {
        let _ = (recipe, step, log);
    }
    fn step_finished(&self, recipe: &str, step: &str, ok: bool) {
        let _ = (recipe, step, ok);
    }
    /// What a recipe's installed files carry, checked against its `[targets]` declarations
    /// (`device-code`, `must-contain`) after its steps, before its artifact is stored.
    fn coverage(&self, recipe: &str, checks: &[crate::offload::coverage::CoverageCheck]) {
        let _ = (recipe, checks);
    }
    /// Why a recipe failed (one line), just before it finishes as "failed".
    fn recipe_failed(&self, recipe: &str, error: &str) {
        let _ = (recipe, error);
    }
    /// What the compiler cache did for the recipe's compiles (after its steps ran).
    fn compiler_cache(&self, recipe: &str, stats: &CompilerCacheStats) {
        let _ = (recipe, stats);
    }
    fn recipe_finished(&self, recipe: &str, outcome: Outcome) {
        let _ = (recipe, outcome);
    }
    fn build_finished(&self, ok: bool) {
        let _ = ok;
    }
    /// A warning the user should see even when quiet.
    fn warn(&self, recipe: &str, msg: &str) {
        self.message(recipe, &format!("warning: {msg}"));
    }
}

/// How a recipe's turn in a build ended: what the engine reports, the status file records
/// (`"built"`, `"cached"`, ...) and the report draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Built,
    /// From the local cache.
    Cached,
    /// From the shared (remote) cache: downloaded, checked, stored locally.
    Downloaded,
    /// Its source prepared, nothing built (a source-only recipe).
    #[serde(rename = "source")]
    SourceOnly,
    Skipped,
    /// Taken from an installed ROCm.
    External,
    /// Never the result of a recipe that ran to its end: the engine's error carries why.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Built => "built",
            Outcome::Cached => "cached",
            Outcome::Downloaded => "downloaded",
            Outcome::SourceOnly => "source",
            Outcome::Skipped => "skipped",
            Outcome::External => "external",
            Outcome::Failed => "failed",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A recipe's compiles as its compiler cache counted them (ccache: its per-recipe statistics
/// log, `CCACHE_STATSLOG`; sccache: the recipe's own server, `engine::sccache`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompilerCacheStats {
    /// `ccache` or `sccache`.
    pub tool: String,
    /// Compiles answered from the cache, local or remote.
    pub hits: u64,
    /// Of the hits, those answered by the remote storage.
    pub remote_hits: u64,
    /// Compiles the cache did not have (run, then stored).
    pub misses: u64,
    /// Calls the cache passed straight to the compiler (links, unsupported options, ...).
    pub uncacheable: u64,
}

impl CompilerCacheStats {
    /// `ccache: 3 hits (2 remote), 1 miss, 2 not cacheable`.
    pub fn summary(&self) -> String {
        let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut s = format!("{}: {}", self.tool, plural(self.hits, "hit", "hits"));
        if self.remote_hits > 0 {
            s.push_str(&format!(" ({} remote)", self.remote_hits));
        }
        s.push_str(&format!(", {}", plural(self.misses, "miss", "misses")));
        if self.uncacheable > 0 {
            s.push_str(&format!(", {} not cacheable", self.uncacheable));
        }
        s
    }
}

/// Reports nothing but warnings (tests, `plan`).
pub struct Silent;

impl Progress for Silent {
    fn message(&self, _: &str, _: &str) {}
    fn warn(&self, recipe: &str, msg: &str) {
        eprintln!("warning: {recipe}: {msg}");
    }
}

/// How much the user asked to see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verbosity {
    /// Only warnings and errors.
    Quiet,
    #[default]
    Normal,
    /// Plain lines plus every step's command and log path.
    Verbose,
}

/// Plain lines on stderr with the time since start: for logs, CI, `NO_COLOR`, `--quiet` and
/// `--verbose`.
pub struct Lines {
    start: Instant,
    verbosity: Verbosity,
}

impl Lines {
    pub fn new() -> Lines {
        Lines::with(Verbosity::Normal)
    }
    pub fn with(verbosity: Verbosity) -> Lines {
        Lines { start: Instant::now(), verbosity }
    }
    fn line(&self, recipe: &str, msg: &str) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "[{}] {recipe}: {msg}", clock(self.start.elapsed()));
    }
}

impl Default for Lines {
    fn default() -> Self {
        Lines::new()
    }
}

impl Progress for Lines {
    fn message(&self, recipe: &str, msg: &str) {
        if self.verbosity != Verbosity::Quiet {
            self.line(recipe, msg);
        }
    }
    fn warn(&self, recipe: &str, msg: &str) {
        self.line(recipe, &format!("warning: {msg}"));
    }
    fn step_command(&self, recipe: &str, step: &str, command: &str) {
        if self.verbosity == Verbosity::Verbose {
            self.line(recipe, &format!("{step}: $ {command}"));
        }
    }
    fn step_started(&self, recipe: &str, step: &str, log: &Path) {
        if self.verbosity == Verbosity::Verbose {
            self.line(recipe, &format!("{step}: log {}", log.display()));
        }
    }
    fn step_finished(&self, recipe: &str, step: &str, ok: bool) {
        if self.verbosity == Verbosity::Verbose {
            self.line(recipe, &format!("{step}: {}", if ok { "ok" } else { "FAILED" }));
        }
    }
    fn recipe_finished(&self, recipe: &str, outcome: Outcome) {
        if self.verbosity == Verbosity::Verbose {
            self.line(recipe, outcome.as_str());
        }
    }
}

/// Forwards every event to several reporters (the display, the build recorder, ...).
pub struct Fanout(pub Vec<Arc<dyn Progress>>);

impl Progress for Fanout {
    fn message(&self, recipe: &str, msg: &str) {
        self.0.iter().for_each(|p| p.message(recipe, msg));
    }
    fn transfer(&self, recipe: &str, what: &str, done: u64, total: Option<u64>) {
        self.0.iter().for_each(|p| p.transfer(recipe, what, done, total));
    }
    fn build_started(&self, recipes: &[String], to_build: &[String]) {
        self.0.iter().for_each(|p| p.build_started(recipes, to_build));
    }
    fn recipe_started(&self, recipe: &str, cached: bool) {
        self.0.iter().for_each(|p| p.recipe_started(recipe, cached));
    }
    fn step_command(&self, recipe: &str, step: &str, command: &str) {
        self.0.iter().for_each(|p| p.step_command(recipe, step, command));
    }
    fn step_started(&self, recipe: &str, step: &str, log: &Path) {
        self.0.iter().for_each(|p| p.step_started(recipe, step, log));
    }
    fn step_finished(&self, recipe: &str, step: &str, ok: bool) {
        self.0.iter().for_each(|p| p.step_finished(recipe, step, ok));
    }
    fn coverage(&self, recipe: &str, checks: &[crate::offload::coverage::CoverageCheck]) {
        self.0.iter().for_each(|p| p.coverage(recipe, checks));
    }
    fn recipe_failed(&self, recipe: &str, error: &str) {
        self.0.iter().for_each(|p| p.recipe_failed(recipe, error));
    }
    fn compiler_cache(&self, recipe: &str, stats: &CompilerCacheStats) {
        self.0.iter().for_each(|p| p.compiler_cache(recipe, stats));
    }
    fn recipe_finished(&self, recipe: &str, outcome: Outcome) {
        self.0.iter().for_each(|p| p.recipe_finished(recipe, outcome));
    }
    fn build_finished(&self, ok: bool) {
        self.0.iter().for_each(|p| p.build_finished(ok));
    }
    fn warn(&self, recipe: &str, msg: &str) {
        self.0.iter().for_each(|p| p.warn(recipe, msg));
    }
}

/// The display for `verbosity` on this process's stderr: live bars on a colour terminal,
/// plain lines otherwise. `durations`: each recipe's last build time in seconds, for the ETA.
pub fn display(verbosity: Verbosity, durations: BTreeMap<String, f64>) -> Arc<dyn Progress> {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    if verbosity == Verbosity::Normal && std::io::stderr().is_terminal() && !no_color && !dumb {
        Arc::new(Bars::new(durations))
    } else {
        Arc::new(Lines::with(verbosity))
    }
}

/// `hh:mm:ss`.
pub fn clock(d: Duration) -> String {
    let t = d.as_secs();
    format!("{:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
}

/// A short human duration: `420ms`, `12.3s`, `4m05s`, `2h03m`.
pub fn human_secs(secs: f64) -> String {
    let s = secs.max(0.0);
    if s < 1.0 {
        format!("{:.0}ms", s * 1000.0)
    } else if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        let t = s.round() as u64;
        format!("{}m{:02}s", t / 60, t % 60)
    } else {
        let t = (s / 60.0).round() as u64;
        format!("{}h{:02}m", t / 60, t % 60)
    }
}

/// The estimated time left, learned from earlier builds.
#[derive(Debug, Clone, PartialEq)]
pub struct Eta {
    /// Seconds left for the recipes with a known last duration.
    pub secs: f64,
    /// Recipes left that were never built before (not in `secs`).
    pub unknown: usize,
}

impl Eta {
    pub fn render(&self) -> String {
        match (self.secs > 0.0, self.unknown) {
            (false, 0) => "ETA soon".into(),
            (false, n) => format!("ETA unknown ({n} recipe(s) never built)"),
            (true, 0) => format!("ETA ~{}", human_secs(self.secs)),
            (true, n) => format!("ETA ~{} + {n} recipe(s) never built", human_secs(self.secs)),
        }
    }
}

/// ETA = the sum of the remaining recipes' last durations; a running recipe counts with what is
/// left of its last duration (never below zero). Finished recipes count nothing.
pub fn eta(last: &BTreeMap<String, f64>, remaining: &[String], running: &BTreeMap<String, Duration>) -> Eta {
    let mut secs = 0.0;
    let mut unknown = 0;
    for r in remaining {
        match last.get(r) {
            Some(d) => secs += (d - running.get(r).map(|e| e.as_secs_f64()).unwrap_or(0.0)).max(0.0),
            None => unknown += 1,
        }
    }
    Eta { secs, unknown }
}

/// The newest line of a (possibly huge, still growing) log, reading only its last 4 KiB.
/// Carriage-return progress (`[12/400] ...\r`) keeps only its newest part.
pub fn last_line(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut buf = Vec::with_capacity(4096);
    f.take(4096).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let line = text
        .lines()
        .rev()
        .map(|l| l.rsplit('\r').find(|p| !p.trim().is_empty()).unwrap_or(""))
        .find(|l| !l.trim().is_empty())?;
    Some(line.chars().filter(|c| !c.is_control() || *c == '\t').collect::<String>().trim_end().to_string())
}

/// Live bars for a terminal: one overall bar (recipes done of total, elapsed, ETA) and one line
/// per running recipe with its step and the newest line of the step's log, refreshed by a
/// ticker thread. Messages are printed above the bars, which are suspended while they print.
pub struct Bars {
    inner: Arc<BarsInner>,
    ticker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

struct BarsInner {
    multi: indicatif::MultiProgress,
    overall: indicatif::ProgressBar,
    start: Instant,
    last: BTreeMap<String, f64>,
    stop: AtomicBool,
    state: Mutex<BarsState>,
}

#[derive(Default)]
struct BarsState {
    remaining: Vec<String>,
    running: BTreeMap<String, Running>,
}

struct Running {
    bar: indicatif::ProgressBar,
    since: Instant,
    /// The running step, its log, and when it started.
    step: Option<(String, PathBuf, Instant)>,
}

impl Bars {
    pub fn new(last: BTreeMap<String, f64>) -> Bars {
        let multi = indicatif::MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(5));
        // Added to `multi` when the build starts, so nothing is drawn before.
        let overall = indicatif::ProgressBar::hidden();
        overall.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix:.bold} [{bar:32.cyan/blue}] {pos}/{len} recipes  {elapsed_precise}  {wide_msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        overall.set_prefix("build");
        let inner = Arc::new(BarsInner {
            multi,
            overall,
            start: Instant::now(),
            last,
            stop: AtomicBool::new(false),
            state: Mutex::default(),
        });
        Bars { inner, ticker: Mutex::new(None) }
    }

    fn stop_ticker(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.ticker.lock().ok().and_then(|mut t| t.take()) {
            let _ = h.join();
        }
    }
}

impl BarsInner {
    fn println(&self, recipe: &str, msg: &str) {
        let _ = self.multi.println(format!("[{}] {recipe}: {msg}", clock(self.start.elapsed())));
    }

    /// Refreshes every running recipe's line and the ETA.
    fn refresh(&self) {
        let Ok(st) = self.state.lock() else { return };
        for r in st.running.values() {
            let text = match &r.step {
                Some((step, log, since)) => match last_line(log) {
                    Some(l) => format!("{step} {}  {l}", clock(since.elapsed())),
                    None => format!("{step} {}", clock(since.elapsed())),
                },
                None => format!("preparing {}", clock(r.since.elapsed())),
            };
            r.bar.set_message(text);
            r.bar.tick();
        }
        let running: BTreeMap<String, Duration> =
            st.running.iter().map(|(n, r)| (n.clone(), r.since.elapsed())).collect();
        self.overall.set_message(eta(&self.last, &st.remaining, &running).render());
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        self.stop_ticker();
    }
}

impl Progress for Bars {
    fn message(&self, recipe: &str, msg: &str) {
        self.inner.println(recipe, msg);
    }
    fn warn(&self, recipe: &str, msg: &str) {
        self.inner.println(recipe, &format!("warning: {msg}"));
    }
    fn build_started(&self, recipes: &[String], to_build: &[String]) {
        self.inner.multi.insert(0, self.inner.overall.clone());
        self.inner.overall.set_length(recipes.len() as u64);
        if let Ok(mut st) = self.inner.state.lock() {
            st.remaining = to_build.to_vec();
        }
        self.inner.refresh();
        let inner = Arc::clone(&self.inner);
        let handle = std::thread::Builder::new()
            .name("progress-ticker".into())
            .spawn(move || {
                while !inner.stop.load(Ordering::SeqCst) {
                    inner.refresh();
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
            .ok();
        if let Ok(mut t) = self.ticker.lock() {
            *t = handle;
        }
    }
    fn recipe_started(&self, recipe: &str, cached: bool) {
        if cached {
            return;
        }
        let bar = self.inner.multi.add(indicatif::ProgressBar::new_spinner());
        bar.set_style(
            indicatif::ProgressStyle::with_template("  {spinner:.green} {prefix:.bold} {wide_msg}")
                .expect("valid template"),
        );
        bar.set_prefix(recipe.to_string());
        if let Ok(mut st) = self.inner.state.lock() {
            st.running.insert(recipe.to_string(), Running { bar, since: Instant::now(), step: None });
        }
    }
    fn step_started(&self, recipe: &str, step: &str, log: &Path) {
        if let Ok(mut st) = self.inner.state.lock() {
            if let Some(r) = st.running.get_mut(recipe) {
                r.step = Some((step.to_string(), log.to_path_buf(), Instant::now()));
            }
        }
    }
    fn recipe_finished(&self, recipe: &str, outcome: Outcome) {
        if let Ok(mut st) = self.inner.state.lock() {
            st.remaining.retain(|r| r != recipe);
            if let Some(r) = st.running.remove(recipe) {
                r.bar.finish_and_clear();
                self.inner.multi.remove(&r.bar);
                let _ = self.inner.multi.println(format!(
                    "[{}] {recipe}: {outcome} in {}",
                    clock(self.inner.start.elapsed()),
                    human_secs(r.since.elapsed().as_secs_f64())
                ));
            }
        }
        self.inner.overall.inc(1);
    }
    fn build_finished(&self, ok: bool) {
        self.stop_ticker();
        let (done, total) = (self.inner.overall.position(), self.inner.overall.length().unwrap_or(0));
        self.inner.overall.finish_and_clear();
        let _ = self.inner.multi.clear();
        eprintln!(
            "[{}] build {}: {done}/{total} recipes",
            clock(self.inner.start.elapsed()),
            if ok { "done" } else { "FAILED" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_is_written_in_the_status_file_as_it_is_shown() {
        let all = [
            Outcome::Built,
            Outcome::Cached,
            Outcome::Downloaded,
            Outcome::SourceOnly,
            Outcome::Skipped,
            Outcome::External,
            Outcome::Failed,
        ];
        let words: Vec<&str> = all.iter().map(|o| o.as_str()).collect();
        assert_eq!(words, ["built", "cached", "downloaded", "source", "skipped", "external", "failed"]);
        for o in all {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{o}\""));
            assert_eq!(serde_json::from_str::<Outcome>(&json).unwrap(), o);
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn bars_count_only_recipes_to_build_in_the_eta() {
        let last = BTreeMap::from([("cached".to_string(), 3600.0), ("built".to_string(), 60.0)]);
        let bars = Bars::new(last);
        bars.build_started(&names(&["cached", "built"]), &names(&["built"]));
        bars.build_finished(true);
        assert_eq!(bars.inner.state.lock().unwrap().remaining, names(&["built"]));
        assert_eq!(bars.inner.overall.length(), Some(2), "the bar still counts every recipe");
        assert_eq!(bars.inner.overall.message(), "ETA ~1m00s", "a cache hit's old build time is not waited for");
    }

    #[test]
    fn eta_sums_remaining_recipes_last_durations() {
        let last = BTreeMap::from([("a".to_string(), 100.0), ("b".to_string(), 50.0), ("c".to_string(), 10.0)]);
        // Nothing started: everything left counts in full.
        assert_eq!(eta(&last, &names(&["a", "b", "c"]), &BTreeMap::new()), Eta { secs: 160.0, unknown: 0 });
        // a is done; b has run 20 s of its 50.
        let running = BTreeMap::from([("b".to_string(), Duration::from_secs(20))]);
        assert_eq!(eta(&last, &names(&["b", "c"]), &running), Eta { secs: 40.0, unknown: 0 });
        // A recipe slower than last time counts zero, never negative.
        let running = BTreeMap::from([("c".to_string(), Duration::from_secs(25))]);
        assert_eq!(eta(&last, &names(&["c"]), &running), Eta { secs: 0.0, unknown: 0 });
        // Recipes never built are counted apart.
        assert_eq!(eta(&last, &names(&["b", "new"]), &BTreeMap::new()), Eta { secs: 50.0, unknown: 1 });
    }

    #[test]
    fn eta_renders_for_people() {
        assert_eq!(Eta { secs: 4980.0, unknown: 0 }.render(), "ETA ~1h23m");
        assert_eq!(Eta { secs: 125.0, unknown: 2 }.render(), "ETA ~2m05s + 2 recipe(s) never built");
        assert_eq!(Eta { secs: 0.0, unknown: 3 }.render(), "ETA unknown (3 recipe(s) never built)");
        assert_eq!(human_secs(0.42), "420ms");
        assert_eq!(human_secs(12.34), "12.3s");
        assert_eq!(human_secs(754.0), "12m34s");
        assert_eq!(human_secs(3.0 * 3600.0 + 20.0 * 60.0), "3h20m");
        // The plan's copy wrote 1h60m here: the hours and the rounded minutes are one figure.
        assert_eq!(human_secs(7199.0), "2h00m");
    }

    #[test]
    fn last_line_reads_the_newest_line_of_a_growing_log() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.log");
        let mut text = String::new();
        for i in 0..5000 {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str("[1/9] a\r[2/9] b\r\n\n");
        std::fs::write(&p, text).unwrap();
        assert_eq!(last_line(&p).as_deref(), Some("[2/9] b"));
        assert_eq!(last_line(&d.path().join("none.log")), None);
    }
}
