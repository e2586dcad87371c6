//! Processes as `/proc` shows them, for the tests that kill builds and look for what is left:
//! one scan of `/proc` (by what a process's environment holds) and one reader of its `stat`.

use std::path::Path;

/// A `stat` file (`/proc/<pid>/stat`, or a thread's `/proc/<pid>/task/<tid>/stat`) as its fields
/// after `(comm)`: state, ppid, pgrp, session, …; `None` once it cannot be read (the process
/// is gone).
pub fn stat_fields(file: &Path) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(file).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_string).collect())
}

/// The state letter of process `pid` (`R`, `S`, `T`, `Z`, …), `None` once it is gone.
pub fn state(pid: i32) -> Option<String> {
    stat_fields(Path::new(&format!("/proc/{pid}/stat")))?.into_iter().next()
}

/// Whether `pid` still runs: there, and neither dead waiting to be reaped (`Z`) nor dying (`X`).
pub fn alive(pid: i32) -> bool {
    state(pid).is_some_and(|s| s != "Z" && s != "X")
}

/// The live processes ([`alive`]), this test's own aside, with an entry of their environment
/// (`NAME=value`, as bytes) that `matches` takes; sorted.
pub fn processes_whose_env(matches: impl Fn(&[u8]) -> bool) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid as u32 != std::process::id())
        .filter(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            env.split(|b| *b == 0).any(&matches) && alive(*pid)
        })
        .collect();
    pids.sort();
    pids
}

/// The live processes whose environment holds `var=value`.
pub fn processes_with_env(var: &str, value: &str) -> Vec<i32> {
    let want = format!("{var}={value}");
    processes_whose_env(|kv| kv == want.as_bytes())
}

/// The live processes whose environment names `home` in some value: everything a rocmforge run
/// in a test's temp home starts carries it (`HOME`, `TMPDIR`, `VIRTUAL_ENV`, …).
pub fn processes_naming(home: &Path) -> Vec<i32> {
    let want = home.as_os_str().as_encoded_bytes();
    processes_whose_env(|kv| kv.windows(want.len()).any(|w| w == want))
}

/// `pid` and its command line, for a failure message.
pub fn described(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " ").trim_end())
        })
        .collect()
}
