//! Fault injection for crash tests: `ROCMFORGE_FAULT=<point>` makes rocmforge SIGKILL itself
//! when it reaches that point, the way a power cut or `kill -9` would. Points are named
//! `<phase>:<recipe>`: fetch, patch, step:<step>, store, deploy (e.g. `store:hipvec`,
//! `step:build:hipvec`). Unset in normal use; reading one environment variable costs nothing.

/// Kills this process with SIGKILL if `ROCMFORGE_FAULT` names this point.
pub fn point(phase: &str, recipe: &str) {
    if let Some(want) = std::env::var_os("ROCMFORGE_FAULT") {
        if want.to_str() == Some(&format!("{phase}:{recipe}")) {
            // Nothing after this runs.
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
    }
}
