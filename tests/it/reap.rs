//! Nothing left running: a step's whole process tree dies with a SIGKILLed rocmforge, and
//! `status` names what a dead build left running when its step's supervisor died with it.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::support::procs;
use crate::support::ScriptsStack as Env;

/// mid's slow step, made compile-like: a three-level tree (bash -> bash -> bash -> sleep), a
/// child that ignores SIGTERM, one that started its own session, and the step's own sleep.
/// Every process but the step's shell carries `RF_REAP_MARK=<mark>` in its environment.
const STEP: &str = r#"if [ -e {prefix}/../slow-mid ]; then export RF_REAP_MARK=@MARK@; bash -c 'bash -c \"sleep 301; true\"; true' & bash -c 'trap \"\" TERM; sleep 302; true' & setsid sleep 303 & echo 'mid: sleeping as asked'; sleep 304; fi"#;

/// The marked processes alive now.
fn marked(mark: &str) -> Vec<i32> {
    procs::processes_with_env("RF_REAP_MARK", mark)
}

/// The session id from `/proc/<pid>/stat` (0 when the session's leader lies outside this pid
/// namespace, as in many containers; `getsid` wrappers that assume a positive id panic on it).
fn session_of(pid: i32) -> Option<i32> {
    // After "(comm)": state, ppid, pgrp, session.
    procs::stat_fields(Path::new(&format!("/proc/{pid}/stat")))?.get(3)?.parse().ok()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How long a wait for something that must come may take on a loaded machine (CI runners share
/// their cores; a build of `top` up to mid's step costs seconds of process starts each): only a
/// hang reaches it, an idle machine never waits for it.
const LOADED: Duration = Duration::from_secs(300);

/// Is `pid` gone, or dead and only waiting to be reaped (its state `Z` in `/proc/<pid>/stat`)?
fn ended(pid: i32) -> bool {
    !procs::alive(pid)
}

/// Is every thread of `pid` stopped (state `T` in `/proc/<pid>/task/*/stat`)? A SIGSTOP is
/// only queued when `kill` returns: until the kernel gets to each thread, the threads run on.
fn stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks
        .filter_map(Result::ok)
        .all(|t| procs::stat_fields(&t.path().join("stat")).is_some_and(|f| f.first().is_some_and(|s| s == "T")))
}

/// A build running mid's compile-like step; whatever is left of it is killed when dropped.
struct Build {
    child: Child,
    mark: String,
    group: i32,
}

impl Build {
    fn start(e: &Env) -> Build {
        let mark = format!("reap-{}-{}", std::process::id(), e.home.path().file_name().unwrap().to_string_lossy());
        e.edit("mid", "if [ -e {prefix}/../slow-mid ]; then sleep 30; fi", &STEP.replace("@MARK@", &mark));
        std::fs::write(e.out().join("slow-mid"), "").unwrap();
        let mut c = e.process();
        c.args(["build", "top", "--prefix"]).arg(e.prefix()).stdout(Stdio::null()).stderr(Stdio::null());
        let mut b = Build { child: c.spawn().unwrap(), mark, group: 0 };
        let log = e.work("mid").join("logs/step5.log");
        // Three in the tree, two ignoring SIGTERM, one in its own session, the step's sleep.
        wait_for("mid's step and all its processes", LOADED, || {
            std::fs::read_to_string(&log).is_ok_and(|t| t.contains("sleeping as asked")) && marked(&b.mark).len() >= 7
        });
        let running = std::fs::read_to_string(e.work("mid").join("running.pid")).unwrap();
        b.group = running.lines().next().unwrap().parse().unwrap();
        b
    }
    fn kill(&mut self, sig: Signal) {
        let _ = rustix::process::kill_process(Pid::from_child(&self.child), sig);
    }
}

impl Drop for Build {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in marked(&self.mark).into_iter().chain([self.group]).filter(|p| *p > 1) {
            let _ = rustix::process::kill_process(Pid::from_raw(pid).unwrap(), Signal::KILL);
        }
    }
}

#[test]
fn sigkill_of_rocmforge_leaves_no_process_of_the_step_alive() {
    let e = Env::new();
    let mut b = Build::start(&e);
    let before = marked(&b.mark);
    let setsid = before.iter().filter(|p| session_of(**p) == Some(**p));
    assert_eq!(setsid.count(), 1, "one step process leads its own session");
    b.kill(Signal::KILL);
    b.child.wait().unwrap();
    let start = Instant::now();
    wait_for("every process of the step to die with rocmforge", Duration::from_secs(10), || marked(&b.mark).is_empty());
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    wait_for("the step's supervisor (its group) to end", Duration::from_secs(5), || {
        rustix::process::test_kill_process_group(Pid::from_raw(b.group).unwrap()).is_err()
    });
    // Nothing is left, and status does not claim otherwise.
    let status = e.cmd().arg("status").output().unwrap();
    let status = String::from_utf8(status.stdout).unwrap();
    assert!(status.contains("interrupted (rocmforge pid"), "{status}");
    assert!(!status.contains("left running"), "{status}");
    // The same command goes on and finishes.
    std::fs::remove_file(e.out().join("slow-mid")).unwrap();
    e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).assert().success();
}

#[test]
fn status_names_what_a_dead_build_left_running_and_building_again_stops_it() {
    let e = Env::new();
    let mut b = Build::start(&e);
    let before = marked(&b.mark);
    // `pkill -9 rocmforge` kills the step's supervisor too (it runs the rocmforge binary): the
    // step's processes are then on their own. (rocmforge is frozen first, so it cannot see its
    // step fail and go on; a frozen supervisor would take its step down with it: its process
    // group, orphaned with a stopped member, gets SIGHUP.) Frozen means every thread stopped:
    // one still running when the supervisor dies sees its step end, removes `running.pid` and
    // marks the step failed, and `status` then has nothing to name (as under load it did).
    let supervisor = Pid::from_raw(b.group).unwrap();
    b.kill(Signal::STOP);
    let build = Pid::from_child(&b.child).as_raw_nonzero().get();
    wait_for("every thread of rocmforge to stop", LOADED, || stopped(build));
    rustix::process::kill_process(supervisor, Signal::KILL).unwrap();
    b.kill(Signal::KILL);
    b.child.wait().unwrap();
    // A SIGKILLed process ends when the kernel gets to it, later on a loaded machine: wait for
    // that (not for a time) so both `status` calls below see the same processes.
    wait_for("the step's supervisor to end", LOADED, || ended(b.group));
    assert_eq!(marked(&b.mark), before, "the step's processes run on");

    // Nothing is left to lag: the build and its supervisor are gone, the step's processes alive
    // (before and after the call), so one `status` must name them, however long it takes.
    let out = e.cmd().arg("status").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = String::from_utf8(out.stdout).unwrap();
    assert_eq!(marked(&b.mark), before, "the step's processes ran on through `status`");
    let line = status.lines().find(|l| l.starts_with("  left running by mid: ")).unwrap_or_else(|| panic!("{status}"));
    assert!(line.contains("though the build's process is gone"), "{status}");
    let stop = status.lines().find_map(|l| l.strip_prefix("    stop them: kill -9 ")).unwrap();
    let named: Vec<i32> = stop.split("   ").next().unwrap().split(' ').map(|p| p.parse().unwrap()).collect();
    for pid in &before {
        assert!(named.contains(pid), "{pid} not named in:\n{status}");
    }
    let v: serde_json::Value =
        serde_json::from_slice(&e.cmd().args(["status", "--json"]).output().unwrap().stdout).unwrap();
    let left = &v["left_running"][0];
    assert_eq!(left["recipe"], "mid");
    let json_pids: Vec<i64> =
        left["processes"].as_array().unwrap().iter().map(|p| p["pid"].as_i64().unwrap()).collect();
    assert_eq!(json_pids.len(), named.len(), "{v}");

    // Building again stops them before it touches mid's work dir, then finishes.
    std::fs::remove_file(e.out().join("slow-mid")).unwrap();
    e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).assert().success();
    assert_eq!(marked(&b.mark), Vec::<i32>::new());
    let status = String::from_utf8(e.cmd().arg("status").output().unwrap().stdout).unwrap();
    assert!(!status.contains("left running"), "{status}");
}

#[test]
fn sigterm_stops_every_process_of_the_step_before_rocmforge_exits() {
    let e = Env::new();
    let mut b = Build::start(&e);
    b.kill(Signal::TERM);
    assert_eq!(b.child.wait().unwrap().code(), Some(130));
    // The supervisor was told to stop the step and awaited: nothing is left, not even for a
    // moment after rocmforge's exit.
    assert_eq!(marked(&b.mark), Vec::<i32>::new());
    assert!(rustix::process::test_kill_process_group(Pid::from_raw(b.group).unwrap()).is_err());
}

#[test]
fn a_step_killed_by_a_signal_reads_the_same_through_its_supervisor() {
    let e = Env::new();
    e.edit("mid", "exit 7; fi", "kill -TERM $$; fi");
    std::fs::write(e.out().join("fail-mid"), "").unwrap();
    let out = e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: mid: step `step4` failed (killed by signal 15)"), "{err}");
    assert!(err.contains("mid: failing as asked"), "{err}");
}

#[test]
fn what_a_finished_step_left_running_ends_with_it() {
    // A step that ends leaving a `setsid` child, an orphaned background job and a grandchild's:
    // the supervisor, their subreaper, stops them all before the step counts as done (it skips
    // its walk through /proc only when it has no child left at all).
    let e = Env::new();
    let mark = format!("left-{}-{}", std::process::id(), e.home.path().file_name().unwrap().to_string_lossy());
    e.edit(
        "mid",
        "if [ -e {prefix}/../slow-mid ]; then sleep 30; fi",
        &format!(r#"export RF_REAP_MARK={mark}; (setsid sleep 311 &); (sleep 312 &); bash -c 'sleep 313 & true'"#),
    );
    e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).assert().success();
    let left = marked(&mark);
    for pid in &left {
        let _ = rustix::process::kill_process(Pid::from_raw(*pid).unwrap(), Signal::KILL);
    }
    assert_eq!(left, Vec::<i32>::new(), "the step's processes outlived it");
}
