//! Progress reporting. Library code reports through the `Progress` trait; how it is shown
//! (plain timestamped lines, or nothing) is decided here, in one place.

use std::io::Write;
use std::time::Instant;

/// What the engine tells the user while it works. Implementations must be cheap and thread-safe.
pub trait Progress: Send + Sync {
    /// A status line about one recipe ("fetching", "applying 0001-x.patch", ...).
    fn message(&self, recipe: &str, msg: &str);
    /// A transfer's progress: `what` is a URL or "objects"; `total` when known.
    fn transfer(&self, recipe: &str, what: &str, done: u64, total: Option<u64>) {
        let _ = (recipe, what, done, total);
    }
    /// A build of `recipes` (in order) begins.
    fn build_started(&self, recipes: &[String]) {
        let _ = recipes;
    }
    /// A recipe's turn begins; `cached`: its artifact is reused.
    fn recipe_started(&self, recipe: &str, cached: bool) {
        let _ = (recipe, cached);
    }
    /// A step starts; its output goes to `log`.
    fn step_started(&self, recipe: &str, step: &str, log: &std::path::Path) {
        let _ = (recipe, step, log);
    }
    fn step_finished(&self, recipe: &str, step: &str, ok: bool) {
        let _ = (recipe, step, ok);
    }
    /// `outcome`: "built", "cached", "failed", "skipped" or "source".
    fn recipe_finished(&self, recipe: &str, outcome: &str) {
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

/// Reports nothing (tests, `--quiet`).
pub struct Silent;

impl Progress for Silent {
    fn message(&self, _: &str, _: &str) {}
    fn warn(&self, recipe: &str, msg: &str) {
        eprintln!("warning: {recipe}: {msg}");
    }
}

/// Plain lines on stderr with the time since start: for logs, CI and `NO_COLOR`.
pub struct Lines {
    start: Instant,
}

impl Lines {
    pub fn new() -> Lines {
        Lines { start: Instant::now() }
    }
}

impl Default for Lines {
    fn default() -> Self {
        Lines::new()
    }
}

impl Progress for Lines {
    fn message(&self, recipe: &str, msg: &str) {
        let t = self.start.elapsed().as_secs();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "[{:02}:{:02}:{:02}] {recipe}: {msg}", t / 3600, t / 60 % 60, t % 60);
    }
}
