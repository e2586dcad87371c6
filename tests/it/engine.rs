//! The build engine on a script-only stack: caching, reasons, resume, failures, crashes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use predicates::prelude::*;
use rustix::process::{Pid, Signal};

use crate::support::{tree_bytes, ScriptsStack as Env, SmallDisk};

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

/// `build top` started in the background with the fault `fault` (a `pause:` point), once it
/// waits there: the build's process, and the flag file whose removal lets it go on.
fn paused_build(e: &Env, fault: &str, what: &str) -> (std::process::Child, std::path::PathBuf) {
    let flag = e.home.path().join("paused");
    let child = e
        .process()
        .args(["build", "top", "--prefix"])
        .arg(e.prefix())
        .env("ROCMFORGE_FAULT", fault)
        .env("ROCMFORGE_FAULT_PAUSE", &flag)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(what, Duration::from_secs(30), || flag.exists());
    (child, flag)
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
    e.cmd()
        .args(["cache", "verify"])
        .assert()
        .success()
        .stdout("ok: 4 artifact(s), 0 download(s), 0 published file(s) verified\n");
    // Damage one artifact: verify names it, gc --damaged removes it, the next build rebuilds it.
    let root = artifacts_root(&e);
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

/// `clean --all` while a build runs: the running recipe's work dir (and those of the recipes
/// the build did before) are the build's; clean keeps them, naming the build, and the build
/// goes on to the end. (Before: mid's dir was removed under its steps, and the build failed.)
#[test]
fn clean_all_during_a_build_keeps_the_dirs_the_build_holds_and_names_it() {
    let e = Env::new();
    let (child, flag) = paused_build(&e, "pause:step:step1:mid", "mid's first step");
    let out = e.cmd().args(["clean", "--all"]).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let pid = child.id();
    assert!(
        text.contains(&format!("kept: in use by `rocmforge build` of stack `scripts` (pid {pid}), now running")),
        "{text}"
    );
    assert!(e.work("mid").join("state.json").is_file(), "mid's work dir was removed under its build: {text}");
    std::fs::remove_file(&flag).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    // Once the build has ended, the same command removes them.
    let out = e.cmd().args(["clean", "--all"]).output().unwrap();
    assert!(out.status.success() && !output_text(&out).contains("kept"), "{}", output_text(&out));
    assert!(!e.work("mid").exists());
}

/// A step's temp files: a real hipcc compile (which leaves its `<name>-XXXXXX` dirs in
/// `$TMPDIR`), Python's `tempfile` and `mktemp` land in the recipe's work dir, never in the
/// user's `$TMPDIR` (`TMP`, `TEMP`), and go when its artifact is stored; a killed step's
/// leftovers go when the steps start again.
#[test]
fn steps_get_a_temp_dir_inside_their_work_dir_removed_with_it() {
    let e = Env::new();
    let user_tmp = e.home.path().join("user-tmp");
    std::fs::create_dir_all(&user_tmp).unwrap();
    e.edit(
        "mid",
        "\"mkdir -p {stage}/lib\",",
        &format!(
            "\"mkdir -p {{stage}}/lib\",\n  \"hipcc --offload-arch=gfx1010 -c {}/k.hip -o {{build}}/k.o\",\n  \"python3 -c 'import tempfile; print(tempfile.mkdtemp())' > {}/made.txt\",\n  \"mktemp >> {}/made.txt; echo \\\"$TMPDIR $TMP $TEMP\\\" >> {}/made.txt\",\n  \"if [ -e {{prefix}}/../pause-mid ]; then touch {{prefix}}/../paused; sleep 30; fi\",",
            e.out().display(),
            e.out().display(),
            e.out().display(),
            e.out().display()
        ),
    );
    std::fs::write(e.out().join("k.hip"), crate::support::HIP_KERNEL).unwrap();
    let build = || {
        e.cmd()
            .env("TMPDIR", &user_tmp)
            .env("TMP", &user_tmp)
            .env("TEMP", &user_tmp)
            .args(["build", "top", "--prefix"])
            .arg(e.prefix())
            .output()
            .unwrap()
    };
    let out = build();
    assert!(out.status.success(), "{}", output_text(&out));
    let left: Vec<_> = std::fs::read_dir(&user_tmp).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "the steps left {left:?} in the user's TMPDIR");
    let tmp = e.work("mid").join("tmp");
    let made = std::fs::read_to_string(e.out().join("made.txt")).unwrap();
    let lines: Vec<&str> = made.lines().collect();
    assert!(lines[0].starts_with(&format!("{}/", tmp.display())), "{made}");
    assert!(lines[1].starts_with(&format!("{}/", tmp.display())), "{made}");
    let t = tmp.display().to_string();
    assert_eq!(lines[2], format!("{t} {t} {t}"), "{made}");
    assert!(!tmp.exists(), "the temp dir stays after the artifact was stored");

    // Killed during a step: its temp files stay in the work dir, and go when the steps start
    // again.
    e.edit("mid", "echo done >", "echo done again >");
    std::fs::write(e.out().join("pause-mid"), "").unwrap();
    let mut child = e
        .process()
        .env("TMPDIR", &user_tmp)
        .args(["build", "top", "--prefix"])
        .arg(e.prefix())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("mid's pausing step", Duration::from_secs(60), || e.out().join("paused").exists());
    let _ = rustix::process::kill_process(Pid::from_child(&child), Signal::KILL);
    child.wait().unwrap();
    let stale: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!stale.is_empty(), "the killed run's temp files are in the work dir");
    std::fs::remove_file(e.out().join("pause-mid")).unwrap();
    let out = build();
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(!tmp.exists() && std::fs::read_dir(&user_tmp).unwrap().next().is_none());
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
    let (child, flag) = paused_build(&e, "pause:reuse:mid", "the reuse of mid");
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

#[test]
fn build_warns_about_a_patch_file_its_series_does_not_name() {
    let e = Env::new();
    let dir = e.tree.join("patches/scripts/mid");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("0001-forgotten.patch"), "--- a/x\n+++ b/x\n").unwrap();
    e.build(&[]).success().stderr(predicate::str::contains(
        "0001-forgotten.patch` is not in the patch series of `mid` and is not applied",
    ));
}

#[test]
fn a_step_that_fills_the_disk_says_so_naming_the_disk_and_what_it_needed() {
    let e = Env::new();
    let disk = SmallDisk::mount(e.home.path().join("small"), "2m");
    e.edit(
        "mid",
        "\"mkdir -p {stage}/lib\",",
        "\"mkdir -p {stage}/lib\",\n  \"head -c 8000000 /dev/zero > {build}/big\",",
    );
    let out =
        e.cmd().env("ROCMFORGE_WORK_DIR", &disk.0).args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("mid: step `step2` failed because its disk is full: the disk holding"), "{err}");
    assert!(err.contains(&format!("(mounted at `{}`) is full:", disk.0.display())), "{err}");
    assert!(
        err.contains("needed more than the")
            && err
                .contains("set `ROCMFORGE_WORK_DIR` (set in this environment; it overrides `work-dir` in the config)"),
        "{err}"
    );
    assert!(err.contains(&format!("rocmforge writes there: the work dir `{}`.", disk.0.display())), "{err}");
    // Nothing of mid was stored; base, built before, still is.
    let list = String::from_utf8(e.cmd().args(["cache", "list"]).output().unwrap().stdout).unwrap();
    assert!(list.contains(" base ") && !list.contains(" mid "), "{list}");
}

#[test]
fn the_advice_after_a_full_disk_works_when_followed_literally() {
    let e = Env::new();
    // Work, state and cache on one small disk, as a default setup has them on one.
    let disk = SmallDisk::mount(e.home.path().join("small"), "2m");
    let config = e.home.path().join("config.toml");
    let dirs = |work: &std::path::Path, cache: &std::path::Path| {
        format!(
            "work-dir = \"{}\"\nstate-dir = \"{}\"\ncache-dir = \"{}\"\n",
            work.display(),
            disk.0.join("state").display(),
            cache.display()
        )
    };
    std::fs::write(&config, dirs(&disk.0.join("work"), &disk.0.join("cache"))).unwrap();
    e.edit(
        "mid",
        "\"mkdir -p {stage}/lib\",",
        "\"mkdir -p {stage}/lib\",\n  \"head -c 8000000 /dev/zero > {build}/big\",",
    );
    let build = || {
        e.cmd().env("ROCMFORGE_CONFIG", &config).args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap()
    };
    let out = build();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Every directory of rocmforge's on the full disk is named, and what mid left there.
    assert!(
        err.contains(&format!(
            "rocmforge writes there: the work dir `{}`, the state dir `{}`, the cache dir `{}`. This recipe's work dir holds ",
            disk.0.join("work").display(),
            disk.0.join("state").display(),
            disk.0.join("cache").display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "To go on: run `rocmforge clean --all` (it frees the work dirs there, this one included: a work dir on another disk starts the recipe afresh anyway), then set `work-dir` in the config file `{}` to a directory on a larger disk (if this disk is small, move the cache too, `cache-dir` in the config file",
            config.display()
        )),
        "{err}"
    );
    // Before: moving the work dir alone failed again, the state writes finding the disk full.
    // Followed literally: clean, move the work dir, the same command again.
    let out = e.cmd().env("ROCMFORGE_CONFIG", &config).args(["clean", "--all"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(&config, dirs(&e.home.path().join("large/work"), &disk.0.join("cache"))).unwrap();
    let out = build();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(e.prefix().join("lib").exists());
}

#[test]
fn a_full_state_disk_is_named_not_the_work_dir_moved_to_an_empty_disk() {
    let e = Env::new();
    // The state dir on a small disk; the work dir (and cache) on the large one, as after
    // following the advice of a full disk with the state dir left where it was.
    let disk = SmallDisk::mount(e.home.path().join("small"), "2m");
    let state = disk.0.join("state");
    let work = e.home.path().join("large/work");
    e.edit(
        "mid",
        "\"mkdir -p {stage}/lib\",",
        &format!("\"mkdir -p {{stage}}/lib\",\n  \"head -c 8000000 /dev/zero > {}/filler\",", disk.0.display()),
    );
    let out = e
        .cmd()
        .env("ROCMFORGE_WORK_DIR", &work)
        .env("ROCMFORGE_STATE_DIR", &state)
        .args(["build", "top", "--prefix"])
        .arg(e.prefix())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "failed because its disk is full: the disk holding the state dir `{}` (mounted at `{}`) is full:",
            state.display(),
            disk.0.display()
        )),
        "{err}"
    );
    assert!(err.contains("which did not fill") && err.contains(&format!("The work dir `{}", work.display())), "{err}");
    assert!(err.contains("set `ROCMFORGE_STATE_DIR` (set in this environment"), "{err}");
    assert!(!err.contains("then set `ROCMFORGE_WORK_DIR`") && !err.contains("work-dir` in the config"), "{err}");
}

/// The state dir's disk full before a recipe begins, with only `work-dir` moved to a large
/// disk: the error names the full disk and the setting that moves it, not the new work dir.
/// (Before: "cannot prepare work dir `<new work dir>/mid`: No space left on device".)
#[test]
fn a_full_state_disk_before_a_recipe_begins_is_named_with_its_setting() {
    let e = Env::new();
    let disk = SmallDisk::mount(e.home.path().join("small"), "2m");
    let state = disk.0.join("state");
    let work = e.home.path().join("large/work");
    let build = |recipe: &str| {
        e.cmd()
            .env("ROCMFORGE_WORK_DIR", &work)
            .env("ROCMFORGE_STATE_DIR", &state)
            .args(["build", recipe, "--prefix"])
            .arg(e.prefix())
            .output()
            .unwrap()
    };
    let out = build("base");
    assert!(out.status.success(), "{}", output_text(&out));
    // Fill the state dir's disk to the last byte.
    let _ = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("head -c 4000000 /dev/zero > {}/filler", disk.0.display()))
        .status();
    let out = build("top");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "because a disk is full: the disk holding the state dir `{}` (mounted at `{}`) is full:",
            state.display(),
            disk.0.display()
        )),
        "{err}"
    );
    assert!(err.contains(&format!("The work dir `{}", work.display())) && err.contains("which did not fill"), "{err}");
    assert!(err.contains("set `ROCMFORGE_STATE_DIR` (set in this environment"), "{err}");
    assert!(err.contains(&format!("cannot write `{}/build-serials/", state.display())), "the file is named: {err}");
}

/// A real CMake project of one CMakeLists.txt as a tarball in `e`'s home, and a cmake recipe
/// `name` of it (`more`: further lines of its `[build]`).
fn cmake_recipe(e: &Env, name: &str, cmakelists: &str, more: &str) {
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(cmakelists.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    tar.append_data(&mut h, format!("{name}-1.0/CMakeLists.txt"), cmakelists.as_bytes()).unwrap();
    let bytes = crate::support::archive::gz(&tar.into_inner().unwrap());
    let file = e.home.path().join(format!("{name}-1.0.tar.gz"));
    std::fs::write(&file, &bytes).unwrap();
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    std::fs::write(
        e.tree.join(format!("recipes/scripts/{name}.toml")),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"1.0\"\nsummary = \"a real CMake project\"\n\n[source]\nurl = \"file://{}\"\nsha256 = \"{sha}\"\nstrip-components = 1\n\n[build]\nsystem = \"cmake\"\n{more}\n[targets]\ngpu = false\n",
            file.display()
        ),
    )
    .unwrap();
}

#[test]
fn a_cmake_recipe_that_installs_nothing_fails_and_stores_nothing() {
    let e = Env::new();
    // A real CMake project without install rules.
    cmake_recipe(&e, "empty", "cmake_minimum_required(VERSION 3.10)\nproject(empty NONE)\n", "");
    let out = e.cmd().args(["build", "empty", "--prefix"]).arg(e.prefix()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("empty: its steps succeeded but installed nothing into"), "{err}");
    let list = String::from_utf8(e.cmd().args(["cache", "list"]).output().unwrap().stdout).unwrap();
    assert!(list.starts_with("0 artifact(s)"), "{list}");
}

fn output_text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn an_artifact_edited_in_place_through_the_prefix_is_caught_rebuilt_and_never_deployed() {
    let e = Env::new();
    e.build(&[]).success();
    let file = e.prefix().join("bin/tool.txt");
    let good = std::fs::read(&file).unwrap();
    // With the default hard-link deploy the prefix file is the cache's: writing into it in
    // place (same size, no rename) edits the artifact.
    crate::sources::write_in_place(&file, 0, b"TOOL");
    assert_ne!(std::fs::read(&file).unwrap(), good);
    e.cmd()
        .args(["cache", "verify"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("`bin/tool.txt` is missing or changed"))
        .stderr(predicate::str::contains("1 damaged artifact(s)"));

    // The build checks the artifact's stat fingerprint before using it: removed, rebuilt, and
    // deployed again, so the prefix holds the good bytes.
    let out = e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("was altered on disk: `bin/tool.txt` (modified in place after it was stored): removed from the cache; rebuilding it"),
        "{text}"
    );
    assert!(text.contains("built 1 recipe(s): tool;"), "{text}");
    assert_eq!(e.runs("tool"), 2);
    assert_eq!(std::fs::read(&file).unwrap(), good, "the altered bytes stayed in the prefix");
    e.cmd().args(["cache", "verify"]).assert().success();
    e.build(&[]).success().stdout(predicate::str::starts_with("nothing to build"));

    // A file of the artifact replaced (another inode) by other bytes of the same size and
    // mtime is caught the same way: a new inode makes the file be re-hashed.
    let root = artifacts_root(&e);
    let cached = walkdir::WalkDir::new(&root)
        .into_iter()
        .filter_map(Result::ok)
        .find(|f| f.file_name() == "tool.txt")
        .unwrap()
        .into_path();
    replace_keeping_mtime(&cached, &[b"TOOL", &good[4..]].concat());
    let out = e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("was altered on disk: `bin/tool.txt` (replaced by another file)"), "{text}");
    assert_eq!(e.runs("tool"), 3);
}

/// A same-size edit in place whose mtime was put back (`touch -r`, `rsync --inplace -t`): its
/// change time moved, so a no-op build catches it. And what no stat shows (a bit flipped on the
/// disk, made here by fingerprinting the flipped file): a deploy into a prefix re-hashes every
/// file first, so a night never builds on it.
#[test]
fn a_same_size_edit_with_its_mtime_put_back_is_caught_and_a_deploy_re_hashes() {
    use std::os::unix::fs::MetadataExt;
    let e = Env::new();
    e.build(&[]).success();
    let file = e.prefix().join("bin/tool.txt");
    let good = std::fs::read(&file).unwrap();
    let flip = |path: &std::path::Path| {
        let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
        crate::sources::write_in_place(path, 0, b"TOOL");
        std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
        assert_eq!(std::fs::metadata(path).unwrap().modified().unwrap(), mtime);
    };
    flip(&file);
    let out = e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("was altered on disk: `bin/tool.txt` (modified in place after it was stored)"), "{text}");
    assert_eq!((e.runs("tool"), std::fs::read(&file).unwrap()), (2, good.clone()));

    let root = artifacts_root(&e);
    let cached = walkdir::WalkDir::new(&root)
        .into_iter()
        .filter_map(Result::ok)
        .find(|f| f.file_name() == "tool.txt")
        .unwrap()
        .into_path();
    flip(&cached);
    let artifact = cached.ancestors().find(|d| d.join("stat.json").is_file()).unwrap();
    let stat = artifact.join("stat.json");
    let mut prints: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&stat).unwrap()).unwrap();
    let m = std::fs::metadata(&cached).unwrap();
    for p in prints.iter_mut().filter(|p| p["path"] == "bin/tool.txt") {
        p["mtime_ns"] =
            (i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec())).to_string().parse().unwrap();
        p["ctime_ns"] =
            (i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec())).to_string().parse().unwrap();
        p["ino"] = m.ino().into();
    }
    std::fs::write(&stat, serde_json::to_vec(&prints).unwrap()).unwrap();
    // The prefix as it stands shares the flipped file (a hard link): a fresh prefix is what a
    // night deploys into.
    std::fs::remove_dir_all(e.prefix()).unwrap();
    let out = e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("was altered on disk: `bin/tool.txt` (missing, or other bytes than stored, found by re-hashing it before it was deployed)"), "{text}");
    assert_eq!((e.runs("tool"), std::fs::read(&file).unwrap()), (3, good));
    e.build(&[]).success().stdout(predicate::str::starts_with("nothing to build"));
}

/// Replaces `path` by a new file (another inode) holding `bytes`, with `path`'s mtime, as a
/// restore from a backup does.
fn replace_keeping_mtime(path: &std::path::Path, bytes: &[u8]) {
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::File::options().write(true).open(&tmp).unwrap().set_modified(mtime).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_copied_or_restored_cache_stays_a_cache_and_a_really_altered_artifact_is_still_caught() {
    let e = Env::new();
    e.build(&[]).success();
    let bucket = format!("artifacts-v{}", rocmforge::key::CACHE_FORMAT);
    let old = e.home.path().join("cache/rocmforge");
    let moved = e.home.path().join("larger-disk/cache");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    let cp = |from: &std::path::Path, to: &std::path::Path| {
        let st = std::process::Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap();
        assert!(st.success());
    };
    cp(&old, &moved);
    let config = e.home.path().join("config.toml");
    std::fs::write(&config, format!("cache-dir = \"{}\"\n", moved.display())).unwrap();
    let build = || {
        e.cmd().env("ROCMFORGE_CONFIG", &config).args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap()
    };
    let artifacts = |dir: &std::path::Path| {
        let mut v: Vec<_> = std::fs::read_dir(dir.join(&bucket))
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    };
    let before = artifacts(&old);
    assert_eq!(before.len(), 4, "{before:?}");
    assert_eq!(artifacts(&moved), before);
    e.cmd().env("ROCMFORGE_CONFIG", &config).args(["cache", "verify"]).assert().success();

    // A build that finds all four artifacts of the copy intact and deletes none.
    let all_kept = || {
        let out = build();
        let text = output_text(&out);
        assert!(out.status.success(), "{text}");
        assert!(text.starts_with("nothing to build: 4 recipe(s) up to date in the cache"), "{text}");
        assert!(!text.contains("altered"), "{text}");
        assert_eq!(artifacts(&moved), before);
    };
    // The copy, moved to another place (a larger disk): every artifact used, none deleted.
    all_kept();
    for r in ["base", "mid", "tool", "top"] {
        assert_eq!(e.runs(r), 1, "{r}");
    }

    // Copied and put back in place (a backup restore: same path, same bytes, new inodes).
    let aside = e.home.path().join("backup");
    cp(&moved, &aside);
    std::fs::remove_dir_all(&moved).unwrap();
    cp(&aside, &moved);
    all_kept();
    assert_eq!(e.runs("tool"), 1);

    // A really altered file of the copy (other bytes, same size and mtime, new inode) is caught.
    let cached = walkdir::WalkDir::new(moved.join(&bucket))
        .into_iter()
        .filter_map(Result::ok)
        .find(|f| f.file_name() == "tool.txt")
        .unwrap()
        .into_path();
    let good = std::fs::read(&cached).unwrap();
    replace_keeping_mtime(&cached, &[b"TOOL", &good[4..]].concat());
    let out = build();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("was altered on disk: `bin/tool.txt` (replaced by another file)"), "{text}");
    assert_eq!(e.runs("tool"), 2);
    assert_eq!(std::fs::read(e.prefix().join("bin/tool.txt")).unwrap(), good);
}

#[test]
fn a_fifo_a_socket_or_a_device_node_in_a_stage_is_refused_by_name_without_hanging() {
    let mut cases = vec![
        ("mkfifo {stage}/bin/pipe", "bin/pipe", "a FIFO (named pipe)"),
        (
            "cd {stage}/bin && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\\\"sock\\\")'",
            "bin/sock",
            "a Unix socket",
        ),
    ];
    // CI runs as root; elsewhere mknod is not allowed.
    if rustix::process::geteuid().is_root() {
        cases.push(("mknod {stage}/bin/null c 1 3", "bin/null", "a character device node"));
    }
    // Every kind is tried, and every one that is not refused is named.
    let mut wrong = Vec::new();
    for (step, file, kind) in cases {
        let e = Env::new();
        e.edit(
            "tool",
            "\"echo tool > {stage}/bin/tool.txt\",",
            &format!("\"echo tool > {{stage}}/bin/tool.txt\",\n  \"{step}\","),
        );
        // A FIFO used to block the store for ever: the bound ends it, and the test fails.
        let out = e
            .cmd()
            .timeout(Duration::from_secs(60))
            .args(["build", "tool", "--prefix"])
            .arg(e.prefix())
            .output()
            .unwrap_or_else(|err| panic!("{kind}: {err}"));
        let text = output_text(&out);
        let list = String::from_utf8(e.cmd().args(["cache", "list"]).output().unwrap().stdout).unwrap();
        let want = format!(
            "tool: its steps left a special file in the stage `{}` that cannot be stored or deployed (only files, directories and symlinks can): `{file}` is {kind}; nothing was stored. Remove them in a step (`rm -f {{stage}}/{file}`)",
            e.work("tool").join("stage").display()
        );
        if out.status.code() != Some(1) || !text.contains(&want) {
            let hung = if out.status.code().is_none() { " (killed after 60 s: it hung)" } else { "" };
            wrong.push(format!("{kind}: {}{hung}\n{text}", out.status));
        } else if !list.starts_with("0 artifact(s)") || e.prefix().join(file).exists() {
            wrong.push(format!("{kind}: stored or deployed\n{list}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n---\n"));
}

#[test]
fn a_status_temp_file_left_by_a_killed_build_is_listed_by_verify_and_removed_by_gc() {
    let e = Env::new();
    e.cmd().args(["build", "tool", "--prefix"]).arg(e.prefix()).assert().success();
    // What kill -9 leaves while the status file is being replaced: an empty `.tmp-*` beside it.
    let status = e.home.path().join("state/rocmforge/status");
    let left = status.join(".tmp-Ab12Cd");
    std::fs::write(&left, "").unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&left).unwrap().set_modified(old).unwrap();
    // One being written right now is not a leftover.
    std::fs::write(status.join(".tmp-Fresh1"), "").unwrap();
    // Builds (a no-op here) do not clear it: verify names it, gc removes it.
    e.cmd().args(["build", "tool", "--prefix"]).arg(e.prefix()).assert().success();
    assert!(left.exists());
    e.cmd()
        .args(["cache", "verify"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(left.display().to_string()))
        .stderr(predicate::str::contains(".tmp-Fresh1").not())
        .stderr(predicate::str::contains("1 leftover(s) of interrupted work"));
    e.cmd().args(["cache", "gc"]).assert().success().stdout(predicate::str::contains("removed 1 entry"));
    assert!(!left.exists() && status.join(".tmp-Fresh1").exists() && status.join("scripts.json").exists());
}

#[test]
fn a_store_killed_half_way_leaves_leftovers_that_verify_reports_and_gc_reclaims() {
    let e = Env::new();
    let entries = || entries_of(&e);
    // Killed while filling the temp dir, then killed between the rename and the marker.
    for (fault, leftover) in
        [("store-tmp:tool", "was left by a killed store or clone"), ("store:tool", "incomplete artifact entry")]
    {
        let out =
            e.cmd().args(["build", "tool", "--prefix"]).arg(e.prefix()).env("ROCMFORGE_FAULT", fault).output().unwrap();
        assert!(!out.status.success(), "{fault}: {}", output_text(&out));
        let left = entries();
        assert_eq!(left.len(), 1, "{fault}: {left:?}");
        assert_eq!(left[0].starts_with(".tmp-"), fault == "store-tmp:tool", "{left:?}");
        e.cmd()
            .args(["cache", "verify"])
            .assert()
            .code(1)
            .stderr(predicate::str::contains(leftover))
            .stderr(predicate::str::contains(&left[0]))
            .stderr(predicate::str::contains("1 leftover(s) of interrupted work"));
        e.cmd().args(["cache", "gc"]).assert().success().stdout(predicate::str::contains("removed 1 entry"));
        assert_eq!(entries(), Vec::<String>::new(), "{fault}");
        e.cmd().args(["cache", "verify"]).assert().success();
    }
    // The next build redoes what the store took and stores it whole.
    e.cmd().args(["build", "tool", "--prefix"]).arg(e.prefix()).assert().success();
    e.cmd().args(["cache", "verify"]).assert().success().stdout(predicate::str::contains("ok: 1 artifact(s)"));
    assert_eq!(std::fs::read_to_string(e.prefix().join("bin/tool.txt")).unwrap(), "tool\n");

    // Killed while storing, then resumed with no `cache gc` between: the store that redoes it
    // takes the killed one's temp away, and verify is clean.
    let e = Env::new();
    let out = e
        .cmd()
        .args(["build", "tool", "--prefix"])
        .arg(e.prefix())
        .env("ROCMFORGE_FAULT", "store-tmp:tool")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", output_text(&out));
    assert!(entries_of(&e).iter().any(|n| n.starts_with(".tmp-")));
    e.cmd().args(["build", "tool", "--prefix"]).arg(e.prefix()).assert().success();
    let out = e.cmd().args(["cache", "verify"]).output().unwrap();
    assert!(out.status.success(), "a resumed store left its killed run's temp: {}", output_text(&out));
    assert!(!entries_of(&e).iter().any(|n| n.starts_with(".tmp-")));
}

/// The artifact store's folder in `e`'s home.
fn artifacts_root(e: &Env) -> std::path::PathBuf {
    e.home.path().join(format!("cache/rocmforge/artifacts-v{}", rocmforge::key::CACHE_FORMAT))
}

/// The artifact store's entries (its lock dir aside).
fn entries_of(e: &Env) -> Vec<String> {
    let root = artifacts_root(e);
    std::fs::read_dir(&root)
        .map(|rd| rd.map(|d| d.unwrap().file_name().to_string_lossy().to_string()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n != ".locks")
        .collect()
}

#[test]
fn a_trivial_step_starts_no_rm_mkdir_or_env_of_its_own() {
    // Per-recipe overhead (BENCHMARKS.md, per recipe): the stage is emptied in rocmforge, and a
    // step script started by rocmforge, whose environment is clean already, does not start
    // itself again under `env -i`. Wrappers first on PATH note every rm, mkdir and env started.
    let e = Env::new();
    let wrappers = e.home.path().join("wrappers");
    std::fs::create_dir_all(&wrappers).unwrap();
    let noted = e.home.path().join("started.txt");
    for tool in ["rm", "mkdir", "env"] {
        let real = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| format!("{d}/{tool}"))
            .find(|p| std::path::Path::new(p).exists())
            .unwrap();
        let w = wrappers.join(tool);
        std::fs::write(&w, format!("#!/bin/sh\necho \"{tool} $*\" >> '{}'\nexec {real} \"$@\"\n", noted.display()))
            .unwrap();
        std::fs::set_permissions(&w, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        e.tree.join("recipes/scripts/trivial.toml"),
        "[package]\nname = \"trivial\"\nversion = \"1.0\"\nsummary = \"one step of shell builtins\"\n\n[build]\nsystem = \"script\"\nsteps = [\"echo one > {stage}/one.txt\"]\n\n[targets]\ngpu = false\n",
    )
    .unwrap();
    // What an earlier, interrupted run left in the stage is gone before the steps run.
    let stage = e.work("trivial").join("stage");
    std::fs::create_dir_all(stage.join("old")).unwrap();
    std::fs::write(stage.join("old/stale.txt"), "stale").unwrap();
    let path = format!("{}:{}", wrappers.display(), std::env::var("PATH").unwrap());
    // The stack's Python's folder comes first on the steps' PATH: make it the wrappers'.
    let python = String::from_utf8(
        std::process::Command::new("bash").args(["-c", "command -v python3"]).output().unwrap().stdout,
    )
    .unwrap();
    std::os::unix::fs::symlink(python.trim(), wrappers.join("python3")).unwrap();
    // (No compiler cache: its launcher's directory would come first too.)
    e.cmd()
        .env("PATH", &path)
        .env("ROCMFORGE_PYTHON", wrappers.join("python3"))
        .args(["build", "trivial", "--compiler-cache", "none", "--prefix"])
        .arg(e.prefix())
        .assert()
        .success();
    assert_eq!(std::fs::read_to_string(e.prefix().join("one.txt")).unwrap(), "one\n");
    assert!(!e.prefix().join("old").exists(), "the stale stage was stored");
    assert_eq!(std::fs::read_to_string(&noted).unwrap_or_default(), "", "processes started besides the step's own");
    // The scripts still start themselves clean when run by hand (the wrappers see `env -i`).
    let script = e.work("trivial").join("steps/02-step1.sh");
    std::fs::create_dir_all(&stage).unwrap();
    let out = std::process::Command::new("bash").arg(&script).env("PATH", &path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        std::fs::read_to_string(&noted).unwrap().starts_with("env -i "),
        "{}",
        std::fs::read_to_string(&noted).unwrap()
    );
}

/// A step that writes straight into `{prefix}` (not its stage) leaves a file no artifact holds,
/// restores or removes: the recipe fails naming it, nothing is stored, and the next build runs
/// the steps again (and fails again) rather than taking the recorded steps as done. A file that
/// was in the prefix before the build is not the recipe's doing.
#[test]
fn a_step_writing_into_the_prefix_outside_every_artifact_fails_naming_the_file() {
    let e = Env::new();
    std::fs::create_dir_all(e.prefix().join("share")).unwrap();
    std::fs::write(e.prefix().join("share/mine.txt"), "the user's\n").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options().write(true).open(e.prefix().join("share/mine.txt")).unwrap().set_modified(old).unwrap();
    e.edit(
        "mid",
        "\"mkdir -p {stage}/lib\",",
        "\"mkdir -p {stage}/lib {prefix}/etc\",\n  \"echo x > {prefix}/etc/mid.conf\",",
    );
    for run in 1..=2 {
        let out = e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "run {run}: {err}");
        assert!(
            err.contains(&format!(
                "mid: its steps wrote into the prefix `{}` outside its stage, where no artifact holds, restores or removes what they wrote: `etc/mid.conf`; nothing was stored",
                e.prefix().display()
            )),
            "run {run}: {err}"
        );
        assert!(!err.contains("mine.txt"), "{err}");
        assert_eq!(e.runs("mid"), run, "the steps run again");
        assert!(!e.prefix().join("lib/libmid.txt").exists(), "mid was not deployed");
    }
    // base's files, deployed before mid ran, are base's.
    assert!(e.prefix().join("lib/libbase.txt").exists());
}

/// A cmake recipe's `requirements` reach CMake even where its CMakeLists asks for less than
/// CMake 3.15 (CMP0094 OLD: FindPython takes the newest Python on PATH, not VIRTUAL_ENV's): the
/// venv is made from Python 3.10, the host's python3.11 and newer are on PATH, and configure
/// imports the requirement with the Python3 CMake found (clr's hipamd/src, cmake_minimum_required
/// 3.5.1, found /usr/bin/python3.14 without CppHeaderParser on the night, with CMake 3.31). The
/// CMake here (3.25) still looks in the venv first under that policy, so the configure step is
/// also read: it names the venv's Python to CMake, which no policy overrides.
#[test]
fn a_cmake_recipe_finds_its_venvs_python_under_the_old_findpython_policy() {
    let e = Env::new();
    let (name, bytes) = crate::support::wheel::make("cmprobe", "1.0", "py3-none-any", "cmprobe", "from-the-venv");
    let wheel = e.home.path().join(&name);
    std::fs::write(&wheel, bytes).unwrap();
    cmake_recipe(
        &e,
        "pyprobe",
        "cmake_minimum_required(VERSION 3.5)\nproject(pyprobe NONE)\nfind_package(Python3 COMPONENTS Interpreter REQUIRED)\n\
         execute_process(COMMAND ${Python3_EXECUTABLE} -c \"import cmprobe; print(cmprobe.VALUE)\" OUTPUT_VARIABLE V RESULT_VARIABLE R)\n\
         if(NOT R EQUAL 0)\n  message(FATAL_ERROR \"${Python3_EXECUTABLE} cannot import cmprobe\")\nendif()\n\
         file(WRITE ${CMAKE_BINARY_DIR}/probe.txt \"${V}\")\ninstall(FILES ${CMAKE_BINARY_DIR}/probe.txt DESTINATION share/pyprobe)\n",
        &format!("requirements = [\"cmprobe @ file://{}\"]\n", wheel.display()),
    );
    let python = crate::support::host::real_python("3.10");
    let out = e
        .cmd()
        .env("ROCMFORGE_PYTHON", &python)
        .env("PIP_NO_INDEX", "1")
        .args(["build", "pyprobe", "--compiler-cache", "none", "--prefix"])
        .arg(e.prefix())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(e.prefix().join("share/pyprobe/probe.txt")).unwrap(), "from-the-venv\n");
    let configure = std::fs::read_to_string(e.work("pyprobe").join("steps/03-configure.sh")).unwrap();
    let venv_python = e.work("pyprobe").join("build/venv/bin/python");
    assert!(configure.contains(&format!("-DPython3_EXECUTABLE={}", venv_python.display())), "{configure}");

    // Without requirements, the stack's Python is the one named (rocBLAS made Tensile's
    // virtualenv from /usr/bin/python3.14 on the night): CMake reports it as found.
    cmake_recipe(
        &e,
        "pyplain",
        "cmake_minimum_required(VERSION 3.5)\nproject(pyplain NONE)\nfind_package(Python3 COMPONENTS Interpreter REQUIRED)\n\
         file(WRITE ${CMAKE_BINARY_DIR}/python.txt \"${Python3_EXECUTABLE}\")\ninstall(FILES ${CMAKE_BINARY_DIR}/python.txt DESTINATION share/pyplain)\n",
        "",
    );
    let out = e
        .cmd()
        .env("ROCMFORGE_PYTHON", &python)
        .args(["build", "pyplain", "--compiler-cache", "none", "--prefix"])
        .arg(e.prefix())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(e.prefix().join("share/pyplain/python.txt")).unwrap(),
        python.display().to_string()
    );
}
