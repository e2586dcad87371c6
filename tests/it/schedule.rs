//! The scheduler: recipes side by side under one job budget, memory caps, OOM retry,
//! --keep-going (on the script-only `parallel` fixture stack).

use std::path::PathBuf;

use predicates::prelude::*;

use crate::support::{repo_root, rocmforge};

struct Env {
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("out")).unwrap();
        Env { home }
    }
    fn out(&self) -> PathBuf {
        self.home.path().join("out")
    }
    fn build(&self, args: &[&str]) -> assert_cmd::assert::Assert {
        rocmforge(self.home.path())
            .arg("--recipes")
            .arg(repo_root().join("tests/fixtures/parallel"))
            .args(["--stack", "parallel", "build", "--prefix"])
            .arg(self.out().join("prefix"))
            .args(args)
            .assert()
    }
    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.out().join(name)).unwrap_or_default()
    }
}

#[test]
fn independent_recipes_run_side_by_side_within_the_budget() {
    let e = Env::new();
    e.build(&["a", "b", "c", "--jobs", "2"]).success();
    // (time, +jobs / -jobs) events: never more jobs in flight than the budget, and at some
    // point two recipes at once.
    let mut events: Vec<(u128, i64)> = e
        .read("events")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let jobs: i64 = f[3].parse().unwrap();
            (f[2].parse().unwrap(), if f[1] == "start" { jobs } else { -jobs })
        })
        .collect();
    assert_eq!(events.len(), 6, "{}", e.read("events"));
    events.sort_by_key(|(t, d)| (*t, *d));
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, d) in events {
        now += d;
        peak = peak.max(now);
    }
    assert_eq!(peak, 2, "peak jobs in flight: {peak}\n{}", e.read("events"));
}

#[test]
fn memory_caps_each_recipes_jobs() {
    let e = Env::new();
    e.build(&["light", "heavy", "--jobs", "8"]).success();
    let jobs = e.read("jobs");
    assert!(jobs.contains("light jobs 8 MAX_JOBS 8"), "{jobs}");
    assert!(jobs.contains("heavy jobs 1 MAX_JOBS 1"), "{jobs}");
}

#[test]
fn an_oom_like_failure_is_retried_once_with_half_the_jobs() {
    let e = Env::new();
    e.build(&["oomy", "--jobs", "4"]).success().stderr(
        predicate::str::contains("looks killed for lack of memory")
            .and(predicate::str::contains("retrying once with 2 jobs instead of 4")),
    );
    assert_eq!(e.read("oomy.log"), "attempt 4\nattempt 2\n");
}

#[test]
fn keep_going_builds_the_independent_branch() {
    let e = Env::new();
    let out = e.build(&["after-broken", "independent", "--keep-going", "--jobs", "2"]).code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("broken: step `step1` failed (exit status 2)"), "{err}");
    assert!(err.contains("not built (downstream of a failure): after-broken"), "{err}");
    assert_eq!(e.read("independent.runs"), "built\n");
    assert_eq!(e.read("after-broken.runs"), "");
}

#[test]
fn without_keep_going_a_failure_stops_new_work() {
    let e = Env::new();
    // One job: broken runs first (alphabetical among ready), fails, and nothing new starts.
    e.build(&["after-broken", "independent", "--jobs", "1"])
        .code(1)
        .stderr(predicate::str::contains("broken: step `step1` failed"));
    assert_eq!(e.read("independent.runs"), "");
}
