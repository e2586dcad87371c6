//! A child run until it ends or a deadline passes, then stopped with everything it started.
//!
//! A [`Job`] is a command to start in a process group of its own, under a
//! [`super::supervisor`] when asked and available, its processes marked with a token
//! ([`Tracked`]). [`Job::start`] gives a [`Child`]: [`Child::wait_until`] waits for it (or
//! its deadline), [`Child::stop`] stops every process it started, [`Child::kill_group`] its
//! group alone. While it runs it is listed, so that [`stop_all`] (the signal handler's, see
//! [`on_termination`]) stops it too; once `stop_all` began, no job starts any more.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::reap::{self, Proc, Stop};
use super::Tracked;

/// How long a supervisor may take to stop its child's processes before it is killed with them
/// (its own stop gives up after 30 s).
const SUPERVISOR_STOP: Duration = Duration::from_secs(35);

/// How long rocmforge itself keeps stopping an unsupervised child's processes.
const GIVE_UP: Duration = Duration::from_secs(10);

/// A running child's group and, when supervised, the supervisor's stdin, whose closing tells it
/// to stop the child.
struct Listed {
    pgid: i32,
    supervisor: Option<ChildStdin>,
}

/// The running children, and whether [`stop_all`] began (then nothing starts).
struct Running {
    children: Vec<Listed>,
    stopping: bool,
}

static RUNNING: Mutex<Running> = Mutex::new(Running { children: Vec::new(), stopping: false });

fn running() -> std::sync::MutexGuard<'static, Running> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// A command to start as a tracked child.
pub struct Job {
    pub command: Command,
    supervised: bool,
}

impl Job {
    /// `program args`, under a supervisor when `supervise` is asked and this binary is one
    /// ([`super::supervisor::enabled`]). Set the environment, directory and output on
    /// `command`; its stdin and process group are [`Job::start`]'s.
    pub fn new(program: impl AsRef<OsStr>, args: &[&OsStr], supervise: bool) -> Job {
        if supervise && super::supervisor::enabled() {
            Job { command: super::supervisor::command(program, args), supervised: true }
        } else {
            let mut command = Command::new(program);
            command.args(args);
            Job { command, supervised: false }
        }
    }

    /// Does it run under a supervisor?
    pub fn supervised(&self) -> bool {
        self.supervised
    }

    /// A command as it is (never supervised).
    pub fn from_command(command: Command) -> Job {
        Job { command, supervised: false }
    }

    /// Starts it in a process group of its own, stdin closed (a supervisor's: the pipe that
    /// keeps it going), with `token` in its environment as [`Tracked::TOKEN_VAR`] when given.
    /// Refused (`Interrupted`) once [`stop_all`] began.
    pub fn start(mut self, token: Option<String>) -> std::io::Result<Child> {
        if let Some(t) = &token {
            self.command.env(Tracked::TOKEN_VAR, t);
        }
        self.command.stdin(if self.supervised { Stdio::piped() } else { Stdio::null() }).process_group(0);
        // Listed under the lock it is started in, so a `stop_all` sees it or stops it starting.
        let mut list = running();
        if list.stopping {
            return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "stopping: interrupted by a signal"));
        }
        let mut tries = 0;
        let mut child = loop {
            match self.command.spawn() {
                // Being written right now (or a forked process still holds it open for writing).
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::TXTBSY.raw_os_error()) && tries < 5 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                r => break r?,
            }
        };
        let pgid = child.id() as i32;
        list.children.push(Listed { pgid, supervisor: child.stdin.take() });
        Ok(Child { child, tracked: Tracked { pgid, token }, supervised: self.supervised, status: None })
    }
}

/// A started [`Job`]. Dropped while running, it is stopped.
pub struct Child {
    pub child: std::process::Child,
    tracked: Tracked,
    supervised: bool,
    status: Option<ExitStatus>,
}

impl Child {
    /// Its process group and token (for `running.pid`).
    pub fn tracked(&self) -> &Tracked {
        &self.tracked
    }

    /// Waits for it to end.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let s = self.child.wait()?;
        Ok(self.ended(s))
    }

    /// Waits for it to end, until `deadline` (none: for ever). `None` if the deadline came first.
    pub fn wait_until(&mut self, deadline: Option<Instant>) -> std::io::Result<Option<ExitStatus>> {
        let Some(deadline) = deadline else { return self.wait().map(Some) };
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        // Short sleeps first: a tool asked its version answers in milliseconds.
        let mut nap = Duration::from_millis(1);
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(Some(self.ended(s)));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }

    fn ended(&mut self, s: ExitStatus) -> ExitStatus {
        self.status = Some(s);
        unlist(self.tracked.pgid);
        s
    }

    /// Stops every process it started (`grace`: SIGTERM first, a moment to end, then SIGKILL)
    /// and waits for it; what is still alive after trying for a while is returned. A supervised
    /// child's supervisor does it (always with grace): told by its stdin closing, or already
    /// done when the child ended.
    pub fn stop(&mut self, grace: bool) -> Vec<Proc> {
        let stdin = unlist(self.tracked.pgid);
        if !self.supervised {
            let left = reap::stop(&self.tracked, None, Stop { grace, reap: false, give_up: GIVE_UP });
            if self.status.is_none() {
                self.status = self.child.wait().ok();
            }
            return left;
        }
        drop(stdin);
        if self.status.is_none() {
            let deadline = Instant::now() + SUPERVISOR_STOP;
            while self.status.is_none() && Instant::now() < deadline {
                self.status = self.child.try_wait().ok().flatten();
                std::thread::sleep(Duration::from_millis(10));
            }
            if self.status.is_none() {
                let left = reap::stop(&self.tracked, None, Stop { grace: false, reap: false, give_up: GIVE_UP });
                self.status = self.child.wait().ok();
                return left;
            }
        }
        Vec::new()
    }

    /// SIGKILL to its process group alone (a tool asked a question), and waits for it if it
    /// has not ended.
    pub fn kill_group(&mut self) {
        unlist(self.tracked.pgid);
        signal_group(self.tracked.pgid, Signal::KILL);
        if self.status.is_none() {
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.stop(false);
        }
        unlist(self.tracked.pgid);
    }
}

/// Takes `pgid` off the list; its supervisor's stdin, if any (dropping it tells the supervisor
/// to stop).
fn unlist(pgid: i32) -> Option<ChildStdin> {
    let mut list = running();
    let i = list.children.iter().position(|l| l.pgid == pgid)?;
    list.children.swap_remove(i).supervisor
}

/// Stops every running child (the signal handler's work) and lets none start after: a
/// supervised child's supervisor is told to stop it (SIGTERM, then SIGKILL to all its
/// processes) and awaited for a few seconds; an unsupervised child's process group gets
/// SIGTERM, then SIGKILL.
pub fn stop_all() {
    let listed: Vec<Listed> = {
        let mut list = running();
        list.stopping = true;
        std::mem::take(&mut list.children)
    };
    let (supervised, groups): (Vec<Listed>, Vec<Listed>) = listed.into_iter().partition(|l| l.supervisor.is_some());
    let supervisors: Vec<i32> = supervised.iter().map(|l| l.pgid).collect();
    drop(supervised);
    for l in &groups {
        signal_group(l.pgid, Signal::TERM);
    }
    if !groups.is_empty() {
        std::thread::sleep(reap::GRACE);
    }
    for l in &groups {
        signal_group(l.pgid, Signal::KILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while supervisors.iter().any(|p| group_alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pgid in &supervisors {
        signal_group(*pgid, Signal::KILL);
    }
}

/// Calls `handler` with the signal, on a thread of its own, each time the process gets SIGINT,
/// SIGTERM or SIGHUP (Ctrl-C, `kill`, a closed terminal), also when it was started with them
/// ignored; the handler normally ends the process. Signals that arrive while it runs wait for it.
pub fn on_termination(mut handler: impl FnMut(i32) + Send + 'static) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        for sig in signals.forever() {
            SIGNALLED.store(sig, Ordering::SeqCst);
            handler(sig);
        }
    })?;
    Ok(())
}

/// The last signal [`on_termination`] caught (0: none).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

/// The signal that asked this process to end, if one did (and [`on_termination`] listened).
pub fn signalled() -> Option<i32> {
    Some(SIGNALLED.load(Ordering::SeqCst)).filter(|s| *s != 0)
}

/// The process group `pgid`, if that can name one (it is positive).
fn group(pgid: i32) -> Option<Pid> {
    Pid::from_raw(pgid.max(0))
}

/// Sends `sig` to process group `pgid`; true if it was there.
fn signal_group(pgid: i32, sig: Signal) -> bool {
    group(pgid).is_some_and(|g| rustix::process::kill_process_group(g, sig).is_ok())
}

/// Does process group `pgid` exist (and may we signal it)?
fn group_alive(pgid: i32) -> bool {
    group(pgid).is_some_and(|g| rustix::process::test_kill_process_group(g).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child past its deadline is stopped with its whole group, a member that ignores
    /// SIGTERM included; one that ends in time gives its status.
    #[test]
    fn a_child_past_its_deadline_is_stopped_with_its_group() {
        let script = "trap '' TERM; (trap '' TERM; sleep 300) & sleep 300";
        let mut c = Job::new("bash", &[OsStr::new("-c"), OsStr::new(script)], true).start(None).unwrap();
        let status = c.wait_until(Some(Instant::now() + Duration::from_millis(300))).unwrap();
        assert_eq!(status, None);
        assert_eq!(c.stop(true), Vec::new());
        assert!(reap::members(c.tracked(), None).is_empty());
        let mut c = Job::new("bash", &[OsStr::new("-c"), OsStr::new("exit 3")], true).start(None).unwrap();
        let status = c.wait_until(super::super::deadline_after(Duration::from_secs(60))).unwrap();
        assert_eq!(status.and_then(|s| s.code()), Some(3));
    }
}
