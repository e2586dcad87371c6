//! Finding and stopping every process of a tracked child ([`super::Tracked`]), in `/proc`: the
//! members of its process group, the processes whose environment carries its token
//! (`ROCMFORGE_STEP_TOKEN`, passed through a step script's clean environment), and every
//! descendant of those. A child that leaves the group (`setsid`) and drops the token (`env -i`)
//! is found only while it descends from one of them: under a [`super::supervisor`], a child
//! subreaper, it always does. [`leftovers`] uses the same rule for a build whose rocmforge and
//! supervisor are both gone (`kill -9` of both, e.g. `pkill -9 rocmforge`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

use super::Tracked;

/// How long stopped processes get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_millis(300);

/// One process, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// The command name (`comm`).
    pub name: String,
}

/// `/proc/<which>/stat` (`which`: a pid, or `self`), and where its command name (`comm`, in
/// parentheses, may hold spaces) ends: the fields after it start with field 3 of proc(5).
pub(super) struct Stat {
    text: String,
    open: usize,
    close: usize,
}

impl Stat {
    pub(super) fn read(which: &str) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{which}/stat")).ok()?;
        let (open, close) = (text.find('(')?, text.rfind(')')?);
        (open < close).then_some(Stat { text, open, close })
    }
    fn name(&self) -> &str {
        &self.text[self.open + 1..self.close]
    }
    /// Field `n` as proc(5) numbers them (3: state, 4: ppid, 5: pgrp, 16: cutime, ...), for `n >= 3`.
    pub(super) fn field(&self, n: usize) -> Option<&str> {
        self.text[self.close + 1..].split_whitespace().nth(n.checked_sub(3)?)
    }
}

/// `/proc/<pid>/stat`, unless the process is gone or a zombie (dead, waiting to be reaped).
fn read_proc(pid: i32) -> Option<Proc> {
    let stat = Stat::read(&pid.to_string())?;
    if matches!(stat.field(3)?, "Z" | "X" | "x") {
        return None;
    }
    let ppid = stat.field(4)?.parse().ok()?;
    let pgid = stat.field(5)?.parse().ok()?;
    Some(Proc { pid, ppid, pgid, name: stat.name().to_string() })
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
pub fn members(step: &Tracked, exclude: Option<i32>) -> Vec<Proc> {
    let all = processes();
    let token = |p: &Proc| step.token.as_deref().is_some_and(|t| has_env(p.pid, Tracked::TOKEN_VAR, t));
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
pub fn leftovers(step: &Tracked) -> Vec<Proc> {
    members(step, None)
}

fn signal(pid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Reaps every exited child of this process (a subreaper inherits orphans), without blocking.
pub(super) fn reap_children() {
    while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
}

/// Reaps every exited child of this process; is any child still alive?
pub(super) fn children_left() -> bool {
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
pub fn stop(step: &Tracked, exclude: Option<i32>, how: Stop) -> Vec<Proc> {
    let reap_children = || {
        if how.reap {
            reap_children()
        }
    };
    let (grace, give_up) = (how.grace, how.give_up);
    let start = Instant::now();
    if grace {
        let procs = members(step, exclude);
        if procs.is_empty() {
            return procs;
        }
        procs.iter().for_each(|p| signal(p.pid, Signal::TERM));
        while start.elapsed() < GRACE {
            std::thread::sleep(Duration::from_millis(20));
            reap_children();
            if members(step, exclude).is_empty() {
                return Vec::new();
            }
        }
    }
    loop {
        reap_children();
        let procs = members(step, exclude);
        if procs.is_empty() || start.elapsed() > give_up {
            return procs;
        }
        procs.iter().for_each(|p| signal(p.pid, Signal::KILL));
        std::thread::sleep(Duration::from_millis(10));
    }
}
