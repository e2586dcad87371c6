//! Processes this program starts, and none left behind: one home for starting a child in a
//! process group of its own, waiting for it until a deadline, and stopping everything it started
//! (its group, the processes carrying its token, their descendants), however it ends.
//!
//! - [`Tracked`]: what names a child's processes: its process group and the token they carry in
//!   `ROCMFORGE_STEP_TOKEN` (a process that leaves the group keeps its environment).
//! - [`reap`]: finding a tracked child's processes in `/proc` and stopping them.
//! - [`supervisor`]: this binary re-run as `rocmforge __supervise PROGRAM ARGS...`, a child
//!   subreaper that stops all of a child's processes when the child ends or this program dies
//!   (SIGKILL included).
//! - [`child`]: [`Job`] and [`Child`], a child run until a deadline and then stopped (build
//!   steps, verify's cases and probe), the running children a signal stops ([`stop_all`]), and
//!   the signal handler ([`on_termination`], [`signalled`]).
//! - [`bounded`]: a host tool asked a question (`--version`), its output read under a deadline.
//!
//! A leaf: it uses no other module of this crate (`tests/it/layering.rs` holds it so).

pub mod bounded;
pub mod child;
pub mod reap;
pub mod supervisor;

pub use bounded::{bounded, MAX_OUTPUT};
pub use child::{on_termination, signalled, stop_all, Child, Job};

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// A child's processes: its process group (led by its supervisor, or by the child itself), and
/// the token its processes carry in [`Tracked::TOKEN_VAR`] (none for a group alone, as in the
/// `running.pid` files older versions wrote).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    pub pgid: i32,
    pub token: Option<String>,
}

impl Tracked {
    pub const TOKEN_VAR: &'static str = "ROCMFORGE_STEP_TOKEN";

    /// A token no other child of any process has: `<label><pid>-<nanoseconds>`.
    pub fn new_token(label: &str) -> String {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        format!("{label}{}-{nanos}", std::process::id())
    }

    /// The text of a `running.pid` file: the group, then `token <T>`.
    pub fn text(&self) -> String {
        match &self.token {
            Some(t) => format!("{}\ntoken {t}\n", self.pgid),
            None => format!("{}\n", self.pgid),
        }
    }

    pub fn parse(text: &str) -> Option<Tracked> {
        let mut lines = text.lines();
        let pgid = lines.next()?.trim().parse().ok().filter(|p| *p > 1)?;
        let token =
            lines.find_map(|l| l.strip_prefix("token ")).map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
        Some(Tracked { pgid, token })
    }
}

/// `timeout` from now, or `None` when that is past what the clock can count (no deadline).
pub fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// How a program that did not succeed ended, for messages: `exit status 3`, `killed by signal
/// 11` (with [`signal_name`] after it where the name helps: ` (SIGSEGV)`).
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "failed".into(),
    }
}

/// ` (SIGSEGV)`: the signal's name, after a number; nothing for a number that names none.
pub fn signal_name(sig: i32) -> String {
    signal_hook::low_level::signal_name(sig).map(|n| format!(" ({n})")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracked_group_round_trips_and_reads_the_old_one_line_form() {
        let r = Tracked { pgid: 4242, token: Some("17-99".into()) };
        assert_eq!(Tracked::parse(&r.text()), Some(r));
        assert_eq!(Tracked::parse("4242\n"), Some(Tracked { pgid: 4242, token: None }));
        assert_eq!(Tracked::parse("1\n"), None, "never the init process");
        assert_eq!(Tracked::parse("garbage"), None);
        assert_ne!(Tracked::new_token("a-"), Tracked::new_token("a-"));
        assert!(Tracked::new_token("verify-").starts_with(&format!("verify-{}-", std::process::id())));
    }

    #[test]
    fn a_deadline_past_the_clock_is_none() {
        assert!(deadline_after(Duration::from_secs(1)).is_some());
        assert_eq!(deadline_after(Duration::MAX), None);
    }
}
