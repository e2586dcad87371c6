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
    // One job: broken runs first (the longest remaining path: after-broken waits for it), fails,
    // and nothing new starts.
    e.build(&["after-broken", "independent", "--jobs", "1"])
        .code(1)
        .stderr(predicate::str::contains("broken: step `step1` failed"));
    assert_eq!(e.read("independent.runs"), "");
}

/// The 16-recipe graph (`tests/fixtures/night`): a chain `zeta-1` .. `zeta-4` of 3-minute
/// recipes whose head sorts last, and twelve 2-minute recipes `a` .. `l` (estimates from the
/// recipes; the steps sleep 0 s here).
const NIGHT: [&str; 13] = ["zeta-4", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"];

fn night(home: &std::path::Path, order: Option<&str>, args: &[&str]) -> assert_cmd::Command {
    let mut c = rocmforge(home);
    if let Some(o) = order {
        c.env("ROCMFORGE_SCHEDULE", o);
    }
    c.arg("--recipes").arg(repo_root().join("tests/fixtures/night")).args(["--stack", "night"]).args(args).args(NIGHT);
    c
}

fn start_order(home: &std::path::Path, order: Option<&str>) -> Vec<String> {
    let prefix = home.join("out/prefix");
    std::fs::create_dir_all(home.join("out")).unwrap();
    night(home, order, &["build", "--jobs", "1", "--prefix", prefix.to_str().unwrap()]).assert().success();
    let events = std::fs::read_to_string(home.join("out/events")).unwrap();
    events.lines().filter(|l| l.contains(" start ")).map(|l| l.split(' ').next().unwrap().to_string()).collect()
}

#[test]
fn the_head_of_the_longest_chain_starts_first() {
    let home = tempfile::tempdir().unwrap();
    let order = start_order(home.path(), None);
    assert_eq!(order[..4], ["zeta-1", "zeta-2", "zeta-3", "zeta-4"], "{order:?}");
    assert_eq!(order[4..], ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"], "{order:?}");
}

#[test]
fn rocmforge_schedule_forces_an_order() {
    let home = tempfile::tempdir().unwrap();
    let order = start_order(home.path(), Some("name"));
    assert_eq!(order[..2], ["a", "b"], "{order:?}");
    assert_eq!(order[12..], ["zeta-1", "zeta-2", "zeta-3", "zeta-4"], "{order:?}");
    let home = tempfile::tempdir().unwrap();
    let order = start_order(home.path(), Some("reverse-name"));
    assert_eq!(order[..5], ["zeta-1", "zeta-2", "zeta-3", "zeta-4", "l"], "{order:?}");
    let home = tempfile::tempdir().unwrap();
    night(home.path(), Some("random"), &["plan"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("ROCMFORGE_SCHEDULE=random: unknown order"));
}

#[test]
fn plan_estimates_the_night_and_its_critical_path() {
    let home = tempfile::tempdir().unwrap();
    night(home.path(), None, &["plan", "--jobs", "3"]).assert().success().stdout(predicate::str::contains(
        "estimated length: 12m00s on 3 jobs (lower bound 12m00s, critical-path order); \
         critical path 12m00s: zeta-1 -> zeta-2 -> zeta-3 -> zeta-4\n",
    ));
    night(home.path(), Some("name"), &["plan", "--jobs", "3"])
        .assert()
        .success()
        .stdout(predicate::str::contains("estimated length: 20m00s on 3 jobs (lower bound 12m00s, name order)"));
    let out = night(home.path(), None, &["plan", "--jobs", "3", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schedule"], "critical-path");
    assert_eq!(v["night"]["estimated_secs"], 720.0);
    assert_eq!(v["night"]["lower_bound_secs"], 720.0);
    let head = v["recipes"].as_array().unwrap().iter().find(|e| e["name"] == "zeta-1").unwrap();
    assert_eq!((head["rank"].as_u64(), head["priority_secs"].as_f64()), (Some(0), Some(720.0)));
    assert_eq!(head["estimate_from"], "recipe");
}
