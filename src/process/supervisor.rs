//! Nothing left running: a child's processes die with it, and with this program however it dies.
//!
//! A supervised child (a build step, a verify case) runs under this binary re-executed as
//! `rocmforge __supervise PROGRAM ARGS...` (hidden; [`main`]). The supervisor leads a new process
//! group, in which the program runs; it is a child subreaper, so descendants orphaned by their
//! parents (a daemon, a `setsid` child, one that also cleared its environment) are re-parented to
//! it rather than to init. Its stdin is a pipe whose other end only the rocmforge process holds:
//! when rocmforge dies, by any signal, SIGKILL included, or exits, or closes that end (a
//! deadline passed), the supervisor reads end-of-file and stops every process of the child
//! (SIGTERM, a grace period, then SIGKILL until none is left). When the program ends, the
//! supervisor kills what it left running and exits with the program's status (the same exit
//! code, or dying of the same signal), so rocmforge sees the child exactly as without it.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal, WaitOptions};

use super::reap::{children_left, stop, Stop};
use super::Tracked;

/// The hidden first argument that makes rocmforge a supervisor.
pub const SUPERVISE: &str = "__supervise";

/// Names the file the supervisor writes the child's core seconds to when the child ended
/// (`layout::step_core_secs` reads it); not passed on to the child.
pub const CORE_TIME_FILE_VAR: &str = "ROCMFORGE_STEP_CORE_TIME_FILE";

/// User plus system seconds of this process's waited-for descendants (`cutime` and `cstime` of
/// `/proc/self/stat`, in the kernel's fixed 100 ticks a second): as a subreaper that reaped
/// every process of the child, that is the whole child's core time.
fn reaped_core_secs() -> Option<f64> {
    let stat = super::reap::Stat::read("self")?;
    let ticks = |n: usize| stat.field(n).and_then(|f| f.parse::<u64>().ok());
    Some((ticks(16)? + ticks(17)?) as f64 / 100.0)
}

/// Whether children run under a supervisor: set by the rocmforge binary, which is the supervisor
/// too; a library user's executable is not.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Runs every later supervised [`super::Job`] under a supervisor, this executable re-run as
/// `rocmforge __supervise`.
pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

/// Do supervised jobs (and the servers the engine starts for steps) run under a supervisor?
pub fn enabled() -> bool {
    ENABLED.load(Ordering::SeqCst)
}

/// `rocmforge __supervise <program> <args>...`: runs the program in this process's group and
/// stops all of its processes when it ends or when rocmforge (stdin) is gone.
pub fn main(command: Vec<OsString>) -> ExitCode {
    let me = rustix::process::getpid();
    let Some((program, args)) = command.split_first() else {
        eprintln!("rocmforge {SUPERVISE}: no command given");
        return ExitCode::from(2);
    };
    // Orphans of the child (daemons, `setsid` children whose parent ended) come to us.
    let _ = rustix::process::set_child_subreaper(Some(me));
    let child_procs = Tracked {
        pgid: rustix::process::getpgrp().as_raw_nonzero().get(),
        token: std::env::var(Tracked::TOKEN_VAR).ok(),
    };
    let done = Arc::new(Mutex::new(()));
    // rocmforge holds the other end of stdin and never writes: end-of-file means it is gone.
    // (Started before the child, so a rocmforge that died already is noticed at once.)
    {
        let (done, child_procs) = (done.clone(), child_procs.clone());
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
                &child_procs,
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
    // Held while starting the child, so a stop that began meanwhile sees the program.
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
    // What the child left running (a daemonised compiler server, a stray background job) ends
    // with it, as when rocmforge killed the child's group itself. Every process of the child is
    // our descendant (we are the subreaper of its orphans): with no child left, none is, and
    // the walk through `/proc` (milliseconds per step on a busy machine) is not needed.
    if children_left() {
        stop(
            &child_procs,
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
        // Die of the same signal (without a core file of our own), so the child reads the same.
        let core = rustix::process::getrlimit(rustix::process::Resource::Core);
        let no_core = rustix::process::Rlimit { current: Some(0), ..core };
        let _ = rustix::process::setrlimit(rustix::process::Resource::Core, no_core);
        // Rust's runtime handles SIGSEGV and SIGBUS itself (stack overflows): the default
        // disposition comes back first, or a self-sent SIGSEGV would be caught and survived.
        let _ = signal_hook::low_level::emulate_default_handler(sig);
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
pub fn command(program: impl AsRef<std::ffi::OsStr>, args: &[&std::ffi::OsStr]) -> std::process::Command {
    let mut c = std::process::Command::new("/proc/self/exe");
    c.arg0("rocmforge").arg(SUPERVISE).arg(program).args(args);
    c
}
