//! Running a host program briefly and safely: in its own process group, stdin closed, its
//! output read in threads (at most [`MAX_OUTPUT`] of each), killed with its whole group past a
//! deadline. For tools asked a question (`--version`, where compiler-rt's builtins are), never
//! for build steps ([`super::Job`] under a supervisor).

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Output beyond this is not read (an answer is a few lines).
pub const MAX_OUTPUT: u64 = 64 * 1024;

/// Runs `command` within `timeout`: its exit status and `[stdout, stderr]`, or how it could not
/// be run or waited for ("no answer within ..."). `command` is taken (left empty).
pub fn bounded(command: &mut Command, timeout: Duration) -> Result<(ExitStatus, [Vec<u8>; 2]), String> {
    let deadline = super::deadline_after(timeout);
    let mut taken = Command::new(command.get_program());
    std::mem::swap(&mut taken, command);
    taken.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child =
        super::Job::from_command(taken).start(None).map_err(|e| format!("cannot be started: {}", e.kind()))?;
    // The group id stays that tool's while its leader is not reaped, or (once it is) while a
    // process it left in its group holds the output open: `kill_group` reaches them.
    let (tx, rx) = std::sync::mpsc::channel();
    read_in_thread(child.child.stdout.take(), 0, tx.clone());
    read_in_thread(child.child.stderr.take(), 1, tx);
    let late = || format!("no answer within {} s", timeout.as_secs_f64());
    let status = match child.wait_until(deadline) {
        Ok(Some(status)) => status,
        Ok(None) => {
            child.kill_group();
            return Err(late());
        }
        Err(e) => {
            child.kill_group();
            return Err(format!("cannot be waited for: {}", e.kind()));
        }
    };
    let mut outputs = [Vec::new(), Vec::new()];
    for _ in 0..2 {
        let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
        match rx.recv_timeout(left) {
            Ok((i, buf)) => outputs[i] = buf,
            Err(_) => {
                // A process it left behind still holds the output open.
                child.kill_group();
                return Err(late());
            }
        }
    }
    Ok((status, outputs))
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
