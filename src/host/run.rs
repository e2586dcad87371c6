//! Running a host program briefly and safely: in its own process group, stdin closed, its
//! output read in threads (at most [`MAX_OUTPUT`] of each), killed with its whole group past a
//! deadline. For tools asked a question (`--version`, where compiler-rt's builtins are), never
//! for build steps (`engine::step`).

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Output beyond this is not read (an answer is a few lines).
pub const MAX_OUTPUT: u64 = 64 * 1024;

/// Runs `command` within `timeout`: its exit status and `[stdout, stderr]`, or how it could not
/// be run or waited for ("no answer within ...").
pub fn bounded(command: &mut Command, timeout: Duration) -> Result<(ExitStatus, [Vec<u8>; 2]), String> {
    let deadline = Instant::now() + timeout;
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut tries = 0;
    let mut child = loop {
        match command.spawn() {
            // Being written right now (or a forked process still holds it open for writing).
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::TXTBSY.raw_os_error()) && tries < 5 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => break r.map_err(|e| format!("cannot be started: {}", e.kind()))?,
        }
    };
    let pgid = child.id() as i32;
    // The group id is still that tool's: its leader is not reaped yet, or (once it is) a
    // process it left in its group holds the output open.
    let kill_group = || {
        if let Some(group) = rustix::process::Pid::from_raw(pgid) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    read_in_thread(child.stdout.take(), 0, tx.clone());
    read_in_thread(child.stderr.take(), 1, tx);
    let late = || format!("no answer within {} s", timeout.as_secs_f64());
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                kill_group();
                let _ = child.wait();
                return Err(late());
            }
            Err(e) => {
                kill_group();
                let _ = child.wait();
                return Err(format!("cannot be waited for: {}", e.kind()));
            }
        }
    };
    let mut outputs = [Vec::new(), Vec::new()];
    for _ in 0..2 {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((i, buf)) => outputs[i] = buf,
            Err(_) => {
                // A process it left behind still holds the output open.
                kill_group();
                return Err(late());
            }
        }
    }
    Ok((status, outputs))
}

/// How a program that did not succeed ended, for messages.
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "failed".into(),
    }
}

/// Reads `pipe` to its end (at most `MAX_OUTPUT`) in a thread, then sends `(i, bytes)`.
fn read_in_thread<R: Read + Send + 'static>(pipe: Option<R>, i: usize, tx: std::sync::mpsc::Sender<(usize, Vec<u8>)>) {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(p) = pipe {
            let _ = p.take(MAX_OUTPUT).read_to_end(&mut buf);
        }
        let _ = tx.send((i, buf));
    });
}
