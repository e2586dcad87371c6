//! Nothing left running: a step's processes die with the build, however the build dies.
//!
//! rocmforge runs each step under a supervisor, itself re-executed as `rocmforge __supervise
//! bash <script>` (hidden; `main` below). The supervisor leads a new process group, in which the
//! step's shell runs; it is a child subreaper, so descendants orphaned by their parents (a
//! daemon, a `setsid` child) are re-parented to it rather than to init. Its stdin is a pipe whose
//! other end only the rocmforge process holds: when rocmforge dies, by any signal, SIGKILL
//! included, or exits, the supervisor reads end-of-file and stops every process of the step
//! (SIGTERM, a grace period, then SIGKILL until none is left). When the step's shell ends, the
//! supervisor kills what the step left running and exits with the shell's status (the same
//! exit code, or dying of the same signal), so rocmforge sees the step exactly as before.
//!
//! A step's processes are found in `/proc`: the members of its process group, the processes
//! whose environment carries its token (`ROCMFORGE_STEP_TOKEN`, passed through the script's
//! clean environment), and every descendant of those. `leftovers` uses the same rule for a build
//! whose rocmforge and supervisor are both gone (`kill -9` of both, e.g. `pkill -9 rocmforge`).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

use crate::layout::RunningStep;

/// The hidden first argument that makes rocmforge a step's supervisor.
pub const SUPERVISE: &str = "__supervise";

/// Names the file the supervisor writes the step's core seconds to when the step ended
/// (`layout::step_core_secs` reads it); not passed on to the step.
pub const CORE_TIME_FILE_VAR: &str = "ROCMFORGE_STEP_CORE_TIME_FILE";

/// User plus system seconds of this process's waited-for descendants (`cutime` and `cstime` of
/// `/proc/self/stat`, in the kernel's fixed 100 ticks a second): as a subreaper that reaped
/// every process of the step, that is the whole step's core time.
fn reaped_core_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command's closing parenthesis; cutime and cstime are fields 16 and 17.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
    Some((ticks(16)? + ticks(17)?) as f64 / 100.0)
}

/// How long stopped processes get between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_millis(300);

/// One process, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// The command name (`comm`).
    pub name: String,
}

/// `/proc/<pid>/stat`, unless the process is gone or a zombie (dead, waiting to be reaped).
fn read_proc(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    let state = rest.next()?;
    if state == "Z" || state == "X" || state == "x" {
        return None;
    }
    let ppid = rest.next()?.parse().ok()?;
    let pgid = rest.next()?.parse().ok()?;
    Some(Proc { pid, ppid, pgid, name })
}

/// Every live process on the machine (that `/proc` shows us).
pub fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_proc)
        .collect()
}

/// Does process `pid` carry `var=value` in its (initial) environment?
fn has_env(pid: i32, var: &str, value: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { return false };
    let want = format!("{var}={value}");
    env.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
}

/// The live processes of the step recorded in `step`, sorted by pid, except `exclude`: its
/// process group's members (when no token is recorded, or the group holds a process with the
/// token: a group id reused after a reboot names someone else), the processes carrying its
/// token, and all their descendants.
pub fn step_processes(step: &RunningStep, exclude: Option<i32>) -> Vec<Proc> {
    let all = processes();
    let token = |p: &Proc| step.token.as_deref().is_some_and(|t| has_env(p.pid, RunningStep::TOKEN_VAR, t));
    let carriers: BTreeSet<i32> = all.iter().filter(|p| token(p)).map(|p| p.pid).collect();
    let group_is_ours = step.token.is_none() || all.iter().any(|p| p.pgid == step.pgid && carriers.contains(&p.pid));
    let mut found: BTreeSet<i32> = carriers;
    if group_is_ours {
        found.extend(all.iter().filter(|p| p.pgid == step.pgid).map(|p| p.pid));
    }
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in &all {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut todo: Vec<i32> = found.iter().copied().collect();
    while let Some(pid) = todo.pop() {
        for c in children.get(&pid).into_iter().flatten() {
            if found.insert(*c) {
                todo.push(*c);
            }
        }
    }
    all.into_iter().filter(|p| found.contains(&p.pid) && Some(p.pid) != exclude).collect()
}

/// The processes a dead build's step left running (none while its supervisor is still at work
/// stopping them is not promised: this is what is alive now).
pub fn leftovers(step: &RunningStep) -> Vec<Proc> {
    step_processes(step, None)
}

fn signal(pid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Reaps every exited child of this process (a subreaper inherits orphans), without blocking.
fn reap_children() {
    while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
}

/// Reaps every exited child of this process; is any child still alive?
fn children_left() -> bool {
    loop {
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some(_)) | Err(rustix::io::Errno::INTR) => continue,
            Ok(None) => return true,
            // ECHILD: no child at all.
            Err(_) => return false,
        }
    }
}

/// How `stop` goes about it.
#[derive(Debug, Clone, Copy)]
pub struct Stop {
    /// SIGTERM first, and up to `GRACE` to end, before SIGKILL.
    pub grace: bool,
    /// Reap exited children meanwhile: only for the supervisor, whose children are all the
    /// step's (in rocmforge, `wait` on any child would take another step's exit status).
    pub reap: bool,
    /// Give up after this long.
    pub give_up: Duration,
}

/// Stops every process of `step` but `exclude` (this process): SIGKILL, again and again (a
/// process may fork meanwhile), until none is left or `how.give_up` has passed. Returns what is
/// still alive then.
pub fn stop(step: &RunningStep, exclude: Option<i32>, how: Stop) -> Vec<Proc> {
    let reap_children = || {
        if how.reap {
            reap_children()
        }
    };
    let (grace, give_up) = (how.grace, how.give_up);
    let start = Instant::now();
    if grace {
        let procs = step_processes(step, exclude);
        if procs.is_empty() {
            return procs;
        }
        procs.iter().for_each(|p| signal(p.pid, Signal::TERM));
        while start.elapsed() < GRACE {
            std::thread::sleep(Duration::from_millis(20));
            reap_children();
            if step_processes(step, exclude).is_empty() {
                return Vec::new();
            }
        }
    }
    loop {
        reap_children();
        let procs = step_processes(step, exclude);
        if procs.is_empty() || start.elapsed() > give_up {
            return procs;
        }
        procs.iter().for_each(|p| signal(p.pid, Signal::KILL));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `rocmforge __supervise <program> <args>...`: runs the step's program in this process's group
/// and stops all of the step's processes when it ends or when rocmforge (stdin) is gone.
pub fn main(command: Vec<OsString>) -> ExitCode {
    let me = rustix::process::getpid();
    let Some((program, args)) = command.split_first() else {
        eprintln!("rocmforge {SUPERVISE}: no command given");
        return ExitCode::from(2);
    };
    // Orphans of the step (daemons, `setsid` children whose parent ended) come to us.
    let _ = rustix::process::set_child_subreaper(Some(me));
    let step = RunningStep {
        pgid: rustix::process::getpgrp().as_raw_nonzero().get(),
        token: std::env::var(RunningStep::TOKEN_VAR).ok(),
    };
    let done = Arc::new(Mutex::new(()));
    // rocmforge holds the other end of stdin and never writes: end-of-file means it is gone.
    // (Started before the step, so a rocmforge that died already is noticed at once.)
    {
        let (done, step) = (done.clone(), step.clone());
        let watch = move || {
            let mut buf = [0u8; 64];
            loop {
                match std::io::stdin().read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _held = done.lock().unwrap_or_else(|e| e.into_inner());
            stop(
                &step,
                Some(me.as_raw_nonzero().get()),
                Stop { grace: true, reap: true, give_up: Duration::from_secs(30) },
            );
            std::process::exit(1);
        };
        if std::thread::Builder::new().name("parent".into()).spawn(watch).is_err() {
            eprintln!("rocmforge {SUPERVISE}: cannot watch the build's process");
            return ExitCode::from(127);
        }
    }
    // Held while starting the step, so a stop that began meanwhile sees the step's shell.
    let starting = done.lock().unwrap_or_else(|e| e.into_inner());
    let core_time_file = std::env::var_os(CORE_TIME_FILE_VAR);
    let child = match std::process::Command::new(program)
        .args(args)
        .env_remove(CORE_TIME_FILE_VAR)
        .stdin(std::process::Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rocmforge: cannot start `{}`: {e}", program.to_string_lossy());
            return ExitCode::from(127);
        }
    };
    let shell = Pid::from_child(&child);
    drop(starting);
    let status = loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) if pid == shell => break Some(status),
            Ok(_) => continue,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break None,
        }
    };
    let _held = done.lock().unwrap_or_else(|e| e.into_inner());
    // What the step left running (a daemonised compiler server, a stray background job) ends
    // with it, as when rocmforge killed the step's group itself. Every process of the step is
    // our descendant (we are the subreaper of its orphans): with no child left, none is, and
    // the walk through `/proc` (milliseconds per step on a busy machine) is not needed.
    if children_left() {
        stop(
            &step,
            Some(me.as_raw_nonzero().get()),
            Stop { grace: false, reap: true, give_up: Duration::from_secs(30) },
        );
    }
    if let (Some(file), Some(secs)) = (core_time_file, reaped_core_secs()) {
        let _ = std::fs::write(file, format!("{secs:.2}\n"));
    }
    let Some(status) = status else { return ExitCode::from(127) };
    if let Some(code) = status.exit_status() {
        return ExitCode::from(code as u8);
    }
    if let Some(sig) = status.terminating_signal() {
        // Die of the same signal (without a core file of our own), so the step reads the same.
        let core = rustix::process::getrlimit(rustix::process::Resource::Core);
        let no_core = rustix::process::Rlimit { current: Some(0), ..core };
        let _ = rustix::process::setrlimit(rustix::process::Resource::Core, no_core);
        if let Some(s) = Signal::from_named_raw(sig) {
            let _ = rustix::process::kill_process(me, s);
            std::thread::sleep(Duration::from_millis(100));
        }
        return ExitCode::from((128 + sig).clamp(0, 255) as u8);
    }
    ExitCode::from(1)
}

/// The command that runs `program args` under a supervisor: this executable (through
/// `/proc/self/exe`, which works even when the installed binary was replaced during the build).
pub fn supervised(program: &str, args: &[&std::ffi::OsStr]) -> std::process::Command {
    let mut c = std::process::Command::new("/proc/self/exe");
    c.arg0("rocmforge").arg(SUPERVISE).arg(program).args(args);
    c
}
