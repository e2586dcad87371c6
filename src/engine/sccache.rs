//! One sccache server per recipe, so its compiles can be counted.
//!
//! sccache's counters belong to its server. With one server per machine (its default: TCP port
//! 4226), recipes built side by side would add up into one count, and the step reaper would stop a
//! server that a step started, since it runs as that step's daemon. So the engine starts a server
//! for each recipe before its first step and stops it after the last. The server:
//!
//! - listens on an abstract Unix socket named for this rocmforge process and the recipe's work
//!   dir (`SCCACHE_SERVER_UDS`, which the steps' clients are given too);
//! - runs in the foreground (`SCCACHE_START_SERVER=1 SCCACHE_NO_DAEMON=1 sccache`) under the same supervisor as a step, so it
//!   dies with rocmforge however rocmforge dies;
//! - takes its storage settings (`SCCACHE_DIR`, `SCCACHE_WEBDAV_*`, ...) and `SCCACHE_BASEDIRS`
//!   from the recipe's step environment.
//!
//! When it stops, its counters are added to `sccache-stats.json` in the recipe's work dir, so a
//! resumed build reports every compile of the recipe, as ccache's statistics log does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::progress::CompilerCacheStats;

/// How long a server gets to start listening (sccache's own client waits 10 s).
const STARTUP: Duration = Duration::from_secs(15);

/// The server address of the recipe with work dir `recipe_dir`: an abstract socket (no file, no
/// path length limit), in sccache's spelling of one (`\x00` then the name).
pub fn socket_for(recipe_dir: &Path) -> String {
    let h = &crate::digest::sha256_hex(recipe_dir.display().to_string().as_bytes())[..16];
    format!("\\x00rocmforge-sccache-{}-{h}", std::process::id())
}

/// A running server of one recipe; dropping it stops the server and records its counts.
pub struct Server {
    child: Child,
    socket: String,
    env: BTreeMap<String, String>,
    stats_file: PathBuf,
}

impl Server {
    /// Starts the server for a recipe whose steps run with `step_env` (which carries
    /// `SCCACHE_SERVER_UDS`, see [`socket_for`]), its output going to `log`; returns once it
    /// listens. Counts go to `stats_file` when it stops.
    pub fn start(step_env: &BTreeMap<String, String>, log: &Path, stats_file: &Path) -> Result<Server, String> {
        let socket =
            step_env.get("SCCACHE_SERVER_UDS").cloned().ok_or("no SCCACHE_SERVER_UDS in the step environment")?;
        let env: BTreeMap<String, String> = step_env
            .iter()
            .filter(|(k, _)| k.starts_with("SCCACHE_") || *k == "PATH")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let out = std::fs::File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        let supervised = crate::process::supervisor::enabled();
        let mut cmd =
            if supervised { crate::process::supervisor::command("sccache", &[]) } else { Command::new("sccache") };
        // sccache's own way to run the server in the foreground (`--start-server` would start
        // it as a child of its own and return).
        cmd.envs(&env)
            .env("SCCACHE_START_SERVER", "1")
            .env("SCCACHE_NO_DAEMON", "1")
            .env("SCCACHE_IDLE_TIMEOUT", "0")
            .stdin(if supervised { Stdio::piped() } else { Stdio::null() })
            .stdout(out)
            .stderr(err);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().map_err(|e| format!("cannot start the sccache server: {e}"))?;
        let mut server = Server { child, socket, env, stats_file: stats_file.to_path_buf() };
        let started = Instant::now();
        loop {
            if server.listening() {
                return Ok(server);
            }
            let failed = |what: &str| {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
                format!("{what} (log {}: {})", log.display(), tail.join(" | "))
            };
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(failed(&format!("the sccache server ended at start ({status})")));
            }
            if started.elapsed() > STARTUP {
                return Err(failed(&format!("the sccache server did not listen within {} s", STARTUP.as_secs())));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Does the server accept connections on its socket?
    fn listening(&self) -> bool {
        use std::os::linux::net::SocketAddrExt;
        let name = self.socket.strip_prefix("\\x00").unwrap_or(&self.socket);
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a))
            .is_ok()
    }

    /// `sccache <arg>` as a client of this server (never starting another: it is asked only
    /// while this one listens).
    fn client(&self, arg: &[&str]) -> Option<String> {
        let out = Command::new("sccache")
            .args(arg)
            .envs(&self.env)
            .env("SCCACHE_SERVER_UDS", &self.socket)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The server's counts so far.
    fn stats(&self) -> Option<CompilerCacheStats> {
        if !self.listening() {
            return None;
        }
        parse_stats(&self.client(&["--show-stats", "--stats-format=json"])?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(now) = self.stats() {
            let mut total = recorded(&self.stats_file);
            total.hits += now.hits;
            total.remote_hits += now.remote_hits;
            total.misses += now.misses;
            total.uncacheable += now.uncacheable;
            if let Ok(json) = serde_json::to_vec(&total) {
                let _ = crate::fsutil::write_atomic(&self.stats_file, &json);
            }
            let _ = self.client(&["--stop-server"]);
        }
        // The supervisor stops whatever is left once its stdin closes.
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The counts recorded in `stats_file` by earlier servers of the recipe (zero when none).
pub fn recorded(stats_file: &Path) -> CompilerCacheStats {
    let mut s: CompilerCacheStats =
        std::fs::read(stats_file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    s.tool = "sccache".into();
    s
}

/// Reads `sccache --show-stats --stats-format=json`. Hits and misses are summed over languages;
/// calls sccache passed straight to the compiler (not a compile, an unsupported compiler or
/// option) are not cacheable. Every hit of a server whose storage is not the local disk came from
/// the remote storage.
pub fn parse_stats(json: &str) -> Option<CompilerCacheStats> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let st = v.get("stats")?;
    let sum = |field: &str| -> u64 {
        st.get(field)
            .and_then(|f| f.get("counts"))
            .and_then(|c| c.as_object())
            .map(|c| c.values().filter_map(|n| n.as_u64()).sum())
            .unwrap_or(0)
    };
    let n = |field: &str| st.get(field).and_then(|x| x.as_u64()).unwrap_or(0);
    let hits = sum("cache_hits");
    let local = v.get("cache_location").and_then(|l| l.as_str()).is_some_and(|l| l.starts_with("Local disk"));
    Some(CompilerCacheStats {
        tool: "sccache".into(),
        hits,
        remote_hits: if local { 0 } else { hits },
        misses: sum("cache_misses"),
        uncacheable: n("requests_not_compile") + n("requests_not_cacheable") + n("requests_unsupported_compiler"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_summed_over_languages_and_remote_when_the_storage_is() {
        let local = r#"{"stats":{"compile_requests":6,"requests_unsupported_compiler":1,"requests_not_compile":2,
            "requests_not_cacheable":1,"cache_hits":{"counts":{"C/C++":2,"HIP":1},"adv_counts":{}},
            "cache_misses":{"counts":{"C/C++":1},"adv_counts":{}}},"cache_location":"Local disk: \"/c\""}"#;
        let s = parse_stats(local).unwrap();
        assert_eq!((s.hits, s.remote_hits, s.misses, s.uncacheable), (3, 0, 1, 4));
        assert_eq!(s.summary(), "sccache: 3 hits, 1 miss, 4 not cacheable");
        let remote = local.replace("Local disk: \\\"/c\\\"", "Remote storage: webdav");
        assert_eq!(parse_stats(&remote).unwrap().remote_hits, 3);
        assert!(parse_stats("sccache: error").is_none());
    }

    #[test]
    fn each_recipe_has_its_own_socket() {
        let a = socket_for(Path::new("/w/s/a"));
        let b = socket_for(Path::new("/w/s/b"));
        assert_ne!(a, b);
        assert!(a.starts_with("\\x00rocmforge-sccache-") && a.len() < 100, "{a}");
    }
}
