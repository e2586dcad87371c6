//! The build engine on a script-only stack: caching, reasons, resume, failures, crashes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use predicates::prelude::*;
use rustix::process::{Pid, Signal};

use crate::support::{tree_bytes, ScriptsStack as Env};

impl Env {
    fn build(&self, extra: &[&str]) -> assert_cmd::assert::Assert {
        self.cmd().args(["build", "top", "--prefix"]).arg(self.prefix()).args(extra).assert()
    }
    fn runs(&self, recipe: &str) -> usize {
        std::fs::read_to_string(self.out().join(format!("{recipe}.runs"))).map(|s| s.lines().count()).unwrap_or(0)
    }
    fn plan(&self, extra: &[&str]) -> serde_json::Value {
        let out =
            self.cmd().args(["plan", "top", "--json", "--prefix"]).arg(self.prefix()).args(extra).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn state_of<'a>(plan: &'a serde_json::Value, name: &str) -> (&'a str, &'a str) {
    let r = plan["recipes"].as_array().unwrap().iter().find(|r| r["name"] == name).unwrap();
    (r["state"].as_str().unwrap(), r["reason"].as_str().unwrap())
}

#[test]
fn second_build_rebuilds_nothing_and_says_so() {
    let e = Env::new();
    e.build(&[]).success().stdout(predicate::str::contains("built 4 recipe(s): base, mid, tool, top"));
    assert_eq!(std::fs::read_to_string(e.prefix().join("bin/top.txt")).unwrap(), "base 1.0 for gfx1010\n");
    e.build(&[]).success().stdout(predicate::str::starts_with("nothing to build: 4 recipe(s) up to date in the cache"));
    for r in ["base", "mid", "tool", "top"] {
        assert_eq!(e.runs(r), 1, "{r}");
    }
    let plan = e.plan(&[]);
    assert_eq!(state_of(&plan, "top").0, "cached");
}

#[test]
fn a_change_rebuilds_that_recipe_and_dependents_only_and_plan_says_why() {
    let e = Env::new();
    e.build(&[]).success();
    e.edit("mid", "cat {prefix}/lib/libbase.txt >", "cat {prefix}/lib/libbase.txt {prefix}/include/base.h >");
    let plan = e.plan(&[]);
    assert_eq!(state_of(&plan, "base"), ("cached", state_of(&plan, "base").1));
    assert_eq!(state_of(&plan, "mid"), ("rebuild", "recipe changed"));
    assert_eq!(state_of(&plan, "top"), ("rebuild", "dependency mid rebuilt"));
    assert_eq!(state_of(&plan, "tool").0, "cached");
    e.build(&[]).success().stdout(predicate::str::contains("built 2 recipe(s): mid, top; 2 from the cache"));
    assert_eq!((e.runs("base"), e.runs("mid"), e.runs("tool"), e.runs("top")), (1, 2, 1, 2));
    assert!(std::fs::read_to_string(e.prefix().join("bin/top.txt")).unwrap().contains("#define BASE 1"));
}

#[test]
fn changing_targets_rebuilds_what_depends_on_targets() {
    let e = Env::new();
    e.build(&[]).success();
    let plan = e.plan(&["--target", "gfx1030"]);
    assert_eq!(state_of(&plan, "base"), ("rebuild", "targets changed (gfx1010 -> gfx1030)"));
    assert_eq!(state_of(&plan, "tool").0, "cached");
    e.build(&["--target", "gfx1030"]).success();
    assert_eq!((e.runs("base"), e.runs("tool")), (2, 1));
    assert_eq!(std::fs::read_to_string(e.prefix().join("lib/libbase.txt")).unwrap(), "base 1.0 for gfx1030\n");
    // Going back is a cache hit: both artifacts are kept.
    e.build(&["--target", "gfx1010"]).success().stdout(predicate::str::starts_with("nothing to build"));
    assert_eq!(std::fs::read_to_string(e.prefix().join("lib/libbase.txt")).unwrap(), "base 1.0 for gfx1010\n");
}

#[test]
fn rebuilt_recipe_old_files_are_removed_from_the_prefix() {
    let e = Env::new();
    e.build(&[]).success();
    assert!(e.prefix().join("lib/mid.done").exists());
    e.edit("mid", "echo done > {stage}/lib/mid.done", "echo done > {stage}/lib/mid.finished");
    e.build(&[]).success();
    assert!(!e.prefix().join("lib/mid.done").exists(), "old file of mid left behind");
    assert!(e.prefix().join("lib/mid.finished").exists());
}

#[test]
fn failed_step_reports_and_resumes_after_the_fix() {
    let e = Env::new();
    std::fs::write(e.out().join("fail-mid"), "").unwrap();
    let out = e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    for part in [
        "error: mid: step `step4` failed (exit status 7)",
        "  command:   if [ -e ",
        "  directory: ",
        "  log:       ",
        "  re-run:    bash ",
        "--- last 1 lines of the log ---\nmid: failing as asked",
    ] {
        assert!(err.contains(part), "missing {part:?} in:\n{err}");
    }
    // The re-run script reproduces the failure by itself.
    let script = err.lines().find_map(|l| l.strip_prefix("  re-run:    bash ")).unwrap();
    let rerun = std::process::Command::new("bash").arg(script).output().unwrap();
    assert_eq!(rerun.status.code(), Some(7));
    assert!(String::from_utf8_lossy(&rerun.stderr).contains("mid: failing as asked"));
    // The user fixes the cause; the same command continues: base is not rebuilt, mid resumes
    // at the failed step (its first three steps are not run again).
    std::fs::remove_file(e.out().join("fail-mid")).unwrap();
    // (tool is independent: it may have been built beside the failing mid in the first run.)
    e.build(&[])
        .success()
        .stdout(predicate::str::is_match(r"built [23] recipe\(s\): mid, (tool, )?top; [12] from the cache").unwrap());
    assert_eq!((e.runs("base"), e.runs("mid")), (1, 1));
}

#[test]
fn rebuild_and_until() {
    let e = Env::new();
    e.cmd()
        .args(["build", "top", "--until", "mid", "--prefix"])
        .arg(e.prefix())
        .assert()
        .success()
        .stdout(predicate::str::contains("built 2 recipe(s): base, mid;"));
    assert_eq!(e.runs("top"), 0);
    e.build(&[]).success();
    e.build(&["--rebuild", "mid"]).success().stdout(predicate::str::contains("built 2 recipe(s): mid, top;"));
    assert_eq!((e.runs("base"), e.runs("mid"), e.runs("top")), (1, 2, 2));
    e.build(&["--rebuild", "nothere"]).code(2).stderr(predicate::str::contains("`nothere` is not part of this build"));
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn group_alive(pgid: i32) -> bool {
    rustix::process::test_kill_process_group(Pid::from_raw(pgid).unwrap()).is_ok()
}

#[test]
fn sigkill_mid_step_stops_the_step_and_resume_matches_a_clean_build() {
    let e = Env::new();
    std::fs::write(e.out().join("slow-mid"), "").unwrap();
    let mut child = e.process();
    child.args(["build", "top", "--prefix"]).arg(e.prefix()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = child.spawn().unwrap();
    let running = e.home.path().join("cache/rocmforge/work/scripts/mid/running.pid");
    wait_for("mid's slow step", Duration::from_secs(20), || running.exists() && e.runs("mid") == 1);
    let pgid: i32 = std::fs::read_to_string(&running).unwrap().lines().next().unwrap().parse().unwrap();
    let _ = rustix::process::kill_process(Pid::from_child(&child), Signal::KILL);
    child.wait().unwrap();
    // The step's supervisor notices and stops the step (the reap tests look closer).
    wait_for("the step's group to die with rocmforge", Duration::from_secs(10), || !group_alive(pgid));
    std::fs::remove_file(e.out().join("slow-mid")).unwrap();
    e.build(&[]).success().stdout(predicate::str::contains("from the cache"));
    assert_eq!(e.runs("base"), 1, "a finished recipe was rebuilt");

    // The same build without interruption gives the same prefix.
    let clean = Env::new();
    clean.build(&[]).success();
    let strip = |v: Vec<(String, Vec<u8>)>| -> Vec<(String, Vec<u8>)> {
        v.into_iter().filter(|(p, _)| !p.starts_with(".rocmforge/")).collect()
    };
    let a = strip(tree_bytes(&e.prefix()));
    let b = strip(tree_bytes(&clean.prefix()));
    let rel = |v: &Vec<(String, Vec<u8>)>| v.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(rel(&a), rel(&b));
}

#[test]
fn cache_list_verify_gc_and_clean() {
    let e = Env::new();
    e.build(&[]).success();
    e.cmd().args(["cache", "list"]).assert().success().stdout(predicate::str::contains("4 artifact(s), 0 incomplete"));
    e.cmd().args(["cache", "verify"]).assert().success().stdout("ok: 4 artifact(s) verified\n");
    // Damage one artifact: verify names it, gc --damaged removes it, the next build rebuilds it.
    let root = e.home.path().join(format!("cache/rocmforge/artifacts-v{}", rocmforge::key::CACHE_FORMAT));
    let tool_file =
        walkdir::WalkDir::new(&root).into_iter().filter_map(Result::ok).find(|f| f.file_name() == "tool.txt").unwrap();
    std::fs::write(tool_file.path(), "tampered").unwrap();
    e.cmd()
        .args(["cache", "verify"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("`bin/tool.txt` is missing or changed"));
    e.cmd().args(["cache", "gc", "--damaged"]).assert().success().stdout(predicate::str::contains("removed 1 entry"));
    e.build(&[]).success().stdout(predicate::str::contains("built 1 recipe(s): tool;"));
    e.cmd().args(["clean"]).assert().success().stdout(predicate::str::contains("freed"));
    assert!(!e.home.path().join("cache/rocmforge/work/scripts/mid").exists());
    e.build(&[]).success().stdout(predicate::str::starts_with("nothing to build"));
}

#[test]
fn an_artifact_removed_after_the_plan_is_rebuilt_and_the_build_says_why() {
    let e = Env::new();
    e.build(&[]).success();
    let plan = e.plan(&[]);
    let mid = plan["recipes"].as_array().unwrap().iter().find(|r| r["name"] == "mid").unwrap();
    assert_eq!(mid["state"], "cached");
    let key = mid["key"].as_str().unwrap().to_string();
    // The build plans (mid: cached), then stops just before reusing mid's artifact, while a
    // concurrent `cache gc` removes it.
    let flag = e.home.path().join("paused");
    let child = e
        .process()
        .args(["build", "top", "--prefix"])
        .arg(e.prefix())
        .env("ROCMFORGE_FAULT", "pause:reuse:mid")
        .env("ROCMFORGE_FAULT_PAUSE", &flag)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !flag.exists() {
        assert!(Instant::now() < deadline, "the build never reached the reuse of mid");
        std::thread::sleep(Duration::from_millis(20));
    }
    let cache = e.home.path().join("cache/rocmforge");
    let artifact = std::fs::read_dir(&cache)
        .unwrap()
        .map(|b| b.unwrap().path().join(&key))
        .find(|p| p.is_dir())
        .expect("mid's artifact is in the cache");
    std::fs::remove_dir_all(&artifact).unwrap();
    std::fs::remove_file(&flag).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("artifact {} was in the cache when the build was planned and is gone now", &key[..12])),
        "{text}"
    );
    assert!(text.contains("built 1 recipe(s): mid; 3 from the cache"), "{text}");
    assert_eq!((e.runs("base"), e.runs("mid"), e.runs("top")), (1, 2, 1));
    assert!(artifact.join("complete").is_file(), "mid's artifact is stored again");
}
