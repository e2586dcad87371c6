//! Fault injection for crash tests: `ROCMFORGE_FAULT=<point>` makes rocmforge SIGKILL itself
//! when it reaches that point, the way a power cut or `kill -9` would. Points are named
//! `<phase>:<recipe>`: fetch, patch, step:<step>, store, deploy, upload (e.g. `store:hipvec`,
//! `step:build:hipvec`). Unset in normal use; reading one environment variable costs nothing.
//!
//! `ROCMFORGE_FAULT=pause:<point>` instead pauses there: rocmforge creates the file named by
//! `ROCMFORGE_FAULT_PAUSE` and waits (up to a minute) until the test removes it, so a test can
//! act at that moment (remove an artifact as a concurrent `cache gc` would).

/// Kills this process with SIGKILL if `ROCMFORGE_FAULT` names this point.
pub fn point(phase: &str, recipe: &str) {
    if let Some(want) = std::env::var_os("ROCMFORGE_FAULT") {
        if want.to_str() == Some(&format!("pause:{phase}:{recipe}")) {
            pause();
        }
        if want.to_str() == Some(&format!("{phase}:{recipe}")) {
            // Nothing after this runs.
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
    }
}

fn pause() {
    let Some(flag) = std::env::var_os("ROCMFORGE_FAULT_PAUSE") else { return };
    let flag = std::path::PathBuf::from(flag);
    if std::fs::write(&flag, std::process::id().to_string()).is_err() {
        return;
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while flag.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
