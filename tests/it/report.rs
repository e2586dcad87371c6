//! Build reports, `status`, `log` and the HTML timeline, on the script-only stack.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use serde_json::Value;

use crate::support::ScriptsStack as Env;

impl Env {
    fn build_output(&self) -> std::process::Output {
        self.cmd().args(["build", "top", "--prefix"]).arg(self.prefix()).output().unwrap()
    }
    fn latest(&self) -> PathBuf {
        std::fs::canonicalize(self.state().join("reports/scripts/latest")).expect("a latest report")
    }
    fn stdout(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "rocmforge {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
    /// Starts `build top` in the background with mid's step5 sleeping 30 s (printing a line
    /// first), and waits until that step runs and has printed.
    fn start_slow_build(&self) -> Running {
        self.edit("mid", "then sleep 30; fi", "then echo 'mid: sleeping as asked'; sleep 30; fi");
        std::fs::write(self.out().join("slow-mid"), "").unwrap();
        let mut c = self.process();
        c.args(["build", "top", "--prefix"]).arg(self.prefix()).stdout(Stdio::null()).stderr(Stdio::null());
        let run = Running { child: c.spawn().unwrap(), running_pid: self.work("mid").join("running.pid") };
        let log = self.work("mid").join("logs/step5.log");
        wait_for("mid's slow step to print", Duration::from_secs(30), || {
            std::fs::read_to_string(&log).is_ok_and(|t| t.contains("sleeping as asked")) && run.running_pid.exists()
        });
        run
    }
}

/// A background build; killed (with its step's process group) when dropped.
struct Running {
    child: Child,
    running_pid: PathBuf,
}

impl Running {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    fn step_group(&self) -> Option<i32> {
        std::fs::read_to_string(&self.running_pid).ok()?.lines().next()?.parse().ok()
    }
    fn signal(&mut self, sig: Signal) -> std::process::ExitStatus {
        let _ = rustix::process::kill_process(Pid::from_child(&self.child), sig);
        self.child.wait().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let group = self.step_group();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(g) = group.filter(|g| *g > 1) {
            let _ = rustix::process::kill_process_group(Pid::from_raw(g).unwrap(), Signal::KILL);
        }
    }
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn recipe<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["recipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in report"))
}

/// (recipe, step) of every complete event of a trace.
fn spans(trace: &Value) -> Vec<(String, String)> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            assert!(e["ts"].as_u64().is_some() && e["dur"].as_u64().is_some(), "{e}");
            (e["args"]["recipe"].as_str().unwrap().to_string(), e["name"].as_str().unwrap().to_string())
        })
        .collect()
}

#[test]
fn report_has_one_trace_span_per_step_and_knows_cache_hits() {
    let e = Env::new();
    let out = e.build_output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report line in:\n{stdout}"));
    let dir = PathBuf::from(line.split(" (").next().unwrap());
    assert_eq!(std::fs::canonicalize(&dir).unwrap(), e.latest());
    for f in ["report.json", "trace.json", "timeline.html"] {
        assert!(dir.join(f).is_file(), "{f} missing in {}", dir.display());
    }

    let report = json(&dir.join("report.json"));
    assert_eq!(report["state"], "succeeded");
    for r in ["base", "mid", "tool", "top"] {
        assert_eq!(
            (&recipe(&report, r)["outcome"], &recipe(&report, r)["cache"]),
            (&Value::from("built"), &Value::from("miss")),
            "{r}"
        );
        for s in recipe(&report, r)["steps"].as_array().unwrap() {
            assert_eq!(s["status"], "ok");
            assert!(s["duration_secs"].as_f64().unwrap() >= 0.0);
            assert!(Path::new(s["log"].as_str().unwrap()).is_file(), "{s}");
        }
    }
    // Exactly one span per step that ran: every step log written, and nothing else.
    let trace = json(&dir.join("trace.json"));
    let got = spans(&trace);
    let set: BTreeSet<(String, String)> = got.iter().cloned().collect();
    assert_eq!(set.len(), got.len(), "a step has two spans: {got:?}");
    let mut ran = BTreeSet::new();
    for r in ["base", "mid", "tool", "top"] {
        for f in std::fs::read_dir(e.work(r).join("logs")).unwrap() {
            let file = f.unwrap().file_name().to_string_lossy().to_string();
            if let Some(name) = file.strip_suffix(".log") {
                ran.insert((r.to_string(), name.to_string()));
            }
        }
    }
    assert_eq!(set, ran);
    assert_eq!(got.len(), 20, "4 + 6 + 3 + 3 script steps and a clean-stage step per recipe");
    // Each recipe on its own track, named after it.
    let events = trace["traceEvents"].as_array().unwrap();
    let tids: BTreeSet<String> = events.iter().filter(|e| e["ph"] == "X").map(|e| e["tid"].to_string()).collect();
    assert_eq!(tids.len(), 4);
    assert!(events.iter().any(|e| e["name"] == "thread_name" && e["args"]["name"] == "mid"));
    assert_eq!(json(&e.state().join("durations/scripts.json")).as_object().unwrap().len(), 4);

    // A change to mid: base and tool are cache hits, mid and top misses; only their steps run.
    e.edit("mid", "cat {prefix}/lib/libbase.txt >", "cat {prefix}/lib/libbase.txt {prefix}/include/base.h >");
    assert!(e.build_output().status.success());
    let dir2 = e.latest();
    assert_ne!(dir2, std::fs::canonicalize(&dir).unwrap(), "a new report per build");
    let report = json(&dir2.join("report.json"));
    for (r, outcome, cache) in
        [("base", "cached", "hit"), ("tool", "cached", "hit"), ("mid", "built", "miss"), ("top", "built", "miss")]
    {
        assert_eq!(
            (recipe(&report, r)["outcome"].as_str(), recipe(&report, r)["cache"].as_str()),
            (Some(outcome), Some(cache)),
            "{r}"
        );
    }
    assert!(recipe(&report, "base")["steps"].as_array().unwrap().is_empty());
    let got = spans(&json(&dir2.join("trace.json")));
    assert_eq!(got.len(), 7 + 4);
    assert!(got.iter().all(|(r, _)| r == "mid" || r == "top"), "{got:?}");

    let status = e.stdout(&["status"]);
    assert!(status.starts_with("build of stack `scripts`: finished (pid "), "{status}");
    assert!(status.contains("outcomes base cached, mid built, tool cached, top built"), "{status}");
    assert_eq!(e.stdout(&["report"]).trim(), dir2.display().to_string());

    // Nothing changed: no new report (the last real one stays latest), but status is current.
    let out = e.build_output();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("nothing to build: 4 recipe(s) up to date"), "{stdout}");
    assert!(!stdout.contains("report: "), "{stdout}");
    assert_eq!(e.latest(), dir2);
    assert_eq!(std::fs::read_dir(e.state().join("reports/scripts")).unwrap().count(), 3, "two reports and `latest`");
    let status = e.stdout(&["status"]);
    assert!(status.contains("outcomes base cached, mid cached, tool cached, top cached"), "{status}");
}

#[test]
fn status_before_any_build_says_so_in_words_and_as_json_and_succeeds() {
    let e = Env::new();
    let words = e.stdout(&["--stack", "scripts", "status"]);
    assert!(words.starts_with("no build recorded yet in `"), "{words}");
    let v: Value = serde_json::from_str(&e.stdout(&["--stack", "scripts", "status", "--json"])).unwrap();
    assert_eq!((v["state"].as_str(), v["stack"].as_str()), (Some("none"), Some("scripts")), "{v}");
    assert!(v["status_file"].as_str().unwrap().ends_with("status/scripts.json"), "{v}");
    assert_eq!(v["message"].as_str(), Some(words.trim()));
}

#[test]
fn status_and_log_from_another_process_while_a_build_runs_then_after_sigkill() {
    let e = Env::new();
    let mut run = e.start_slow_build();
    let build_pid = run.pid();

    let status = e.stdout(&["status"]);
    assert!(status.starts_with(&format!("build of stack `scripts`: running (pid {build_pid})")), "{status}");
    assert!(status.contains("  recipes  1/4 done"), "{status}");
    assert!(status.contains("  running mid: step step5 for 00:00:"), "{status}");
    assert!(status.contains("/mid/logs/step5.log"), "{status}");
    assert!(status.contains("    | mid: sleeping as asked"), "{status}");
    let v: Value = serde_json::from_str(&e.stdout(&["status", "--json"])).unwrap();
    assert_eq!(
        (v["liveness"].as_str(), v["alive"].as_bool(), v["pid"].as_i64()),
        (Some("running"), Some(true), Some(build_pid as i64))
    );
    assert_eq!((v["running"][0]["recipe"].as_str(), v["running"][0]["step"].as_str()), (Some("mid"), Some("step5")));
    assert_eq!(v["recipes"][0]["outcome"], "built");

    // All of mid's logs in step order, or one step's.
    let all = e.stdout(&["log", "mid"]);
    let (i3, i5) = (all.find("==> step3 (").unwrap(), all.find("==> step5 (").unwrap());
    assert!(i3 < i5, "{all}");
    assert!(all[i5..].contains("mid: sleeping as asked"), "{all}");
    assert_eq!(e.stdout(&["log", "mid", "--step", "step5"]), "mid: sleeping as asked\n");
    e.cmd()
        .args(["log", "mid", "--step", "nope"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("steps with logs: clean-stage, step1, step2, step3, step4, step5"));

    // --follow prints what is appended, and ends once the build's process is gone.
    let mut follow = e.process();
    follow.args(["log", "mid", "--step", "step5", "--follow"]).stdout(Stdio::piped());
    let mut follow = follow.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert!(follow.try_wait().unwrap().is_none(), "--follow ended while the step runs");
    {
        use std::io::Write;
        let mut log = std::fs::OpenOptions::new().append(true).open(e.work("mid").join("logs/step5.log")).unwrap();
        writeln!(log, "a line appended later").unwrap();
    }
    std::thread::sleep(Duration::from_millis(600));
    let group = run.step_group().expect("the step's process group");
    run.signal(Signal::KILL);
    let _ = rustix::process::kill_process_group(Pid::from_raw(group).unwrap(), Signal::KILL);
    wait_for("log --follow to end after the build died", Duration::from_secs(10), || {
        follow.try_wait().unwrap().is_some()
    });
    let mut followed = String::new();
    std::io::Read::read_to_string(follow.stdout.as_mut().unwrap(), &mut followed).unwrap();
    assert_eq!(followed, "mid: sleeping as asked\na line appended later\n");

    let status = e.stdout(&["status"]);
    assert!(
        status.starts_with(&format!("build of stack `scripts`: interrupted (rocmforge pid {build_pid} is gone)")),
        "{status}"
    );
    let v: Value = serde_json::from_str(&e.stdout(&["status", "--json"])).unwrap();
    assert_eq!(v["alive"], false);
}

#[test]
fn sigterm_writes_an_interrupted_report() {
    let e = Env::new();
    let mut run = e.start_slow_build();
    let status = run.signal(Signal::TERM);
    assert_eq!(status.code(), Some(130));
    let report = json(&e.latest().join("report.json"));
    assert_eq!(report["state"], "interrupted");
    let mid = recipe(&report, "mid");
    let last = mid["steps"].as_array().unwrap().last().unwrap();
    assert_eq!((last["name"].as_str(), last["status"].as_str()), (Some("step5"), Some("interrupted")));
    assert_eq!(recipe(&report, "base")["outcome"], "built");
    assert_eq!(recipe(&report, "top")["outcome"], Value::Null);
    let status = e.stdout(&["status"]);
    assert!(status.contains(": interrupted (stopped by a signal)"), "{status}");
    assert!(status.contains("  interrupted mid: step step5"), "{status}");
}

/// The headless browser the timeline test renders with (`ci/setup.sh` installs it).
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            if dir.join(name).is_file() {
                return dir.join(name);
            }
        }
    }
    panic!("chromium is not installed: this test renders timeline.html in a headless browser. Install it with `apt-get install -y chromium` (ci/setup.sh does)");
}

#[test]
fn timeline_of_a_failed_build_renders_in_headless_chromium() {
    let browser = chromium();
    let e = Env::new();
    std::fs::write(e.out().join("fail-mid"), "").unwrap();
    let out = e.build_output();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("report: "), "a failed build reports too:\n{stderr}");
    let dir = e.latest();
    let report = json(&dir.join("report.json"));
    assert_eq!(
        (report["state"].as_str(), recipe(&report, "mid")["outcome"].as_str()),
        (Some("failed"), Some("failed"))
    );
    let html = std::fs::read_to_string(dir.join("timeline.html")).unwrap();
    assert!(html.contains("<svg") && !html.contains("src=\"http") && !html.contains("href=\"http"), "self-contained");

    let png = e.home.path().join("timeline.png");
    let mut c = std::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", e.home.path().join("chromium").display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1200,600")
        .arg(format!("file://{}", dir.join("timeline.html").display()))
        .env("HOME", e.home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = c.kill();
            panic!("chromium did not finish the screenshot in 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 5 * 1024, "screenshot {} is {size} bytes: the page did not render", png.display());
    if let Some(keep) = std::env::var_os("ROCMFORGE_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }
}

#[test]
fn a_second_build_into_the_same_prefix_waits_for_the_first_and_status_shows_both() {
    let e = Env::new();
    let mut first = e.start_slow_build();
    let mut c = e.process();
    c.args(["build", "top", "--prefix"]).arg(e.prefix()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let second = c.spawn().unwrap();
    let waiting_line = format!("waiting  another build of `scripts` (pid {})", second.id());
    wait_for("`status` to show the second build waiting", Duration::from_secs(30), || {
        e.stdout(&["status"]).contains(&waiting_line)
    });
    let status = e.stdout(&["status"]);
    assert!(
        status.contains(&format!("(pid {})", first.pid())) && status.contains("running mid: step step5"),
        "{status}"
    );
    assert!(status.contains(&format!("(held by pid {})", first.pid())), "{status}");
    // The second waits: it has not touched the prefix or run a step meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(std::fs::read_to_string(e.out().join("mid.runs")).unwrap().lines().count(), 1);

    // The first dies; the second takes the prefix, resumes mid and finishes.
    std::fs::remove_file(e.out().join("slow-mid")).unwrap();
    first.signal(Signal::KILL);
    let out = second.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("waiting for the build of stack `scripts` (pid {}), which builds into", first.pid())),
        "{text}"
    );
    assert!(!e.stdout(&["status"]).contains("waiting  another build"), "the waiting record is gone");
}

/// Each step's core time (user + system of all its processes, the orphans its supervisor reaps
/// included) is in the report: a step whose only work is done by a child it orphans (`setsid`
/// in a subshell) shows at least most of what that work costs when measured on its own.
#[test]
fn report_records_each_steps_core_time_with_its_orphans() {
    const WORK: &str = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done";
    // What the work costs here, from bash's own `times` (user and system of the shell).
    let out = std::process::Command::new("bash").arg("-c").arg(format!("{WORK}; times")).output().unwrap();
    let times = String::from_utf8_lossy(&out.stdout).to_string();
    let secs = |t: &str| -> f64 {
        let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
        m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
    };
    let first = times.lines().next().unwrap_or_else(|| panic!("no times: {times}"));
    let cost: f64 = first.split_whitespace().map(secs).sum();
    assert!(cost > 0.05, "the work must cost something to measure: {times}");

    let e = Env::new();
    e.edit(
        "mid",
        "then sleep 30; fi",
        &format!("then sleep 30; fi; (setsid bash -c '{WORK}; touch orphan-done' &); while [ ! -e orphan-done ]; do sleep 0.05; done"),
    );
    let out = e.build_output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&e.latest().join("report.json"));
    let steps = recipe(&report, "mid")["steps"].as_array().unwrap().clone();
    let step5 = steps.iter().find(|s| s["name"] == "step5").unwrap_or_else(|| panic!("{steps:?}"));
    let logs: Vec<String> = std::fs::read_dir(e.work("mid").join("logs"))
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    let core = step5["core_secs"].as_f64().unwrap_or_else(|| panic!("no core_secs: {step5} (logs: {logs:?})"));
    let wall = step5["duration_secs"].as_f64().unwrap();
    assert!(core >= 0.6 * cost, "core {core} s for work that costs {cost} s alone");
    assert!(core <= 2.0 * wall + 0.1, "more than two cores' worth: core {core} s, wall {wall} s");
    // Every step that ran a process has one (clean-stage only empties a folder).
    for s in steps.iter().filter(|s| s["name"] != "clean-stage") {
        assert!(s["core_secs"].as_f64().is_some_and(|c| c >= 0.0), "{s}");
    }
}
