//! Sources and patches (issue: sources and patches): git mirrors and submodules over a real
//! `git daemon`, downloads from a real HTTP server that cuts connections, hostile archives,
//! patch failures, and the `fetch` / `patch` / `source` commands.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rocmforge::config::Config;
use rocmforge::progress::Progress;
use rocmforge::recipe::Recipe;
use rocmforge::source::archive::{self, ArchiveError, ArchiveFormat};
use rocmforge::source::download::{self, RetryPolicy};
use rocmforge::source::{self, git as sgit, DownloadError, GitError, SourceError, SourceIdentity};
use sha2::{Digest, Sha256};

use crate::support::archive::{gz, tar_of};
use crate::support::git::{forest, git, GitDaemon};
use crate::support::http::HttpServer;

/// Records everything reported, for asserts.
#[derive(Default)]
struct Collect(Mutex<Vec<String>>);

impl Progress for Collect {
    fn message(&self, recipe: &str, msg: &str) {
        self.0.lock().unwrap().push(format!("{recipe}: {msg}"));
    }
    fn transfer(&self, recipe: &str, what: &str, done: u64, total: Option<u64>) {
        self.0.lock().unwrap().push(format!("{recipe}: transfer {what} {done}/{total:?}"));
    }
}

impl Collect {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

fn config(home: &Path, rewrites: &[(&str, &str)]) -> Config {
    let mut cfg = Config::load_from(&home.join("no-config.toml")).unwrap();
    cfg.cache_dir = home.join("cache");
    cfg.work_dir = home.join("work");
    cfg.state_dir = home.join("state");
    cfg.url_rewrites = rewrites.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    cfg
}

fn git_recipe(name: &str, url: &str, tag: Option<&str>, rev: &str, submodules: bool) -> Recipe {
    let toml = format!(
        "[package]\nname = \"{name}\"\nversion = \"1\"\nsummary = \"s\"\n[source]\ngit = \"{url}\"\n{}rev = \"{rev}\"\nsubmodules = {submodules}\n[build]\nsystem = \"source-only\"\n",
        tag.map(|t| format!("tag = \"{t}\"\n")).unwrap_or_default()
    );
    load_one(name, &toml, &[])
}

/// Loads one recipe through the real loader (a one-recipe stack in memory).
fn load_one(name: &str, toml: &str, patches: &[(&str, &[u8])]) -> Recipe {
    let mut files = std::collections::BTreeMap::new();
    files.insert(
        "recipes/t/stack.toml".to_string(),
        b"[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n".to_vec(),
    );
    files.insert(format!("recipes/t/{name}.toml"), toml.as_bytes().to_vec());
    for (p, b) in patches {
        files.insert(format!("patches/t/{name}/{p}"), b.to_vec());
    }
    let tree = rocmforge::recipe::RecipeTree::from_files(rocmforge::recipe::Origin::Embedded, files);
    let stack = rocmforge::recipe::load_stack(&tree, "t").unwrap_or_else(|d| panic!("{d}"));
    stack.recipes[name].clone()
}

// ---------------------------------------------------------------------------------------------
// Git

struct GitSetup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    forest: crate::support::git::Forest,
    daemon: GitDaemon,
}

fn git_setup() -> GitSetup {
    let dir = tempfile::tempdir().unwrap();
    let f = forest(&dir.path().join("srv"));
    let daemon = GitDaemon::start(&f.base);
    let home = dir.path().join("home");
    GitSetup { home, forest: f, daemon, _dir: dir }
}

impl GitSetup {
    fn cfg(&self) -> Config {
        config(&self.home, &[("https://github.com/", &self.daemon.url(""))])
    }
}

#[test]
fn git_pinned_checkout_with_nested_submodules() {
    let s = git_setup();
    let cfg = s.cfg();
    let r = git_recipe("top", "https://github.com/test/top.git", Some("v1"), &s.forest.t1, true);
    let p = Collect::default();
    let fetched = source::fetch(&cfg, &r, &p).unwrap();
    assert_eq!(
        fetched.identity,
        SourceIdentity::Git {
            commit: s.forest.t1.clone(),
            submodules: vec![
                ("third_party/mid".into(), s.forest.m1.clone()),
                ("third_party/mid/deps/leaf".into(), s.forest.l1.clone()),
            ]
        }
    );
    let lines = p.lines();
    assert!(
        lines.iter().any(|l| l.contains("cloning mirror of https://github.com/test/top.git (via `git://127.0.0.1:")),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|l| l.contains("transfer objects")), "fetch progress is reported: {lines:#?}");

    let dest = s.home.join("work/top/src");
    source::checkout(&r, &fetched, &dest).unwrap();
    assert_eq!(git(&dest, &["rev-parse", "HEAD"]), s.forest.t1);
    assert_eq!(std::fs::read_to_string(dest.join("README")).unwrap(), "top\n", "the pinned commit, not the branch tip");
    assert_eq!(git(&dest.join("third_party/mid"), &["rev-parse", "HEAD"]), s.forest.m1);
    assert_eq!(git(&dest.join("third_party/mid/deps/leaf"), &["rev-parse", "HEAD"]), s.forest.l1);
    assert_eq!(std::fs::read_to_string(dest.join("third_party/mid/deps/leaf/leaf.txt")).unwrap(), "leaf\n");
    // One bare mirror per repository URL, in a tagged cache dir.
    let mut mirrors: Vec<String> = std::fs::read_dir(cfg.cache_dir.join("git"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".git"))
        .collect();
    mirrors.sort();
    assert_eq!(mirrors.len(), 3, "{mirrors:?}");
    assert!(
        mirrors[0].starts_with("leaf-") && mirrors[1].starts_with("mid-") && mirrors[2].starts_with("top-"),
        "{mirrors:?}"
    );
    assert!(cfg.cache_dir.join("git/CACHEDIR.TAG").is_file());

    // A second fetch reuses the mirrors: updated, not cloned again, nothing new transferred.
    let top_mirror = sgit::mirror_path(&cfg, "https://github.com/test/top.git");
    std::fs::write(top_mirror.join("rocmforge-test-marker"), "x").unwrap();
    let p2 = Collect::default();
    source::fetch(&cfg, &r, &p2).unwrap();
    let lines = p2.lines();
    assert!(!lines.iter().any(|l| l.contains("cloning")), "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("updating mirror of https://github.com/test/top.git")), "{lines:#?}");
    assert!(top_mirror.join("rocmforge-test-marker").exists());

    // `lock` will use this.
    assert_eq!(
        sgit::resolve_tag(&cfg, "top", "https://github.com/test/top.git", "v1", &Collect::default()).unwrap(),
        s.forest.t1
    );
    assert!(matches!(
        sgit::resolve_tag(&cfg, "top", "https://github.com/test/top.git", "nope", &Collect::default()),
        Err(GitError::NoSuchTag { .. })
    ));
}

#[test]
fn git_moved_tag_and_wrong_rev_are_caught() {
    let s = git_setup();
    let cfg = s.cfg();
    let r = git_recipe("top", "https://github.com/test/top.git", Some("v1"), &s.forest.t1, false);
    source::fetch(&cfg, &r, &Collect::default()).unwrap();
    // Upstream moves the tag.
    s.forest.top.tag("v1", &s.forest.t2);
    let e = source::fetch(&cfg, &r, &Collect::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "tag `v1` of `https://github.com/test/top.git` now points at {}, but the recipe pins rev {}: the tag moved; check the new commit and update `rev` (or `tag`)",
            s.forest.t2, s.forest.t1
        )
    );
    let wrong = "0123456789abcdef0123456789abcdef01234567";
    let r = git_recipe("top", "https://github.com/test/top.git", None, wrong, false);
    let e = source::fetch(&cfg, &r, &Collect::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("commit {wrong} is not in `https://github.com/test/top.git` (no branch or tag of the repository contains it): check the recipe's `rev`")
    );
}

#[test]
fn git_offline_uses_only_the_cache() {
    let s = git_setup();
    let mut cfg = s.cfg();
    let r = git_recipe("top", "https://github.com/test/top.git", Some("v1"), &s.forest.t1, true);
    cfg.offline = true;
    let e = source::fetch(&cfg, &r, &Collect::default()).unwrap_err();
    assert!(matches!(e, SourceError::Git(GitError::OfflineMissing { .. })), "{e}");
    assert!(e.to_string().starts_with("offline: no cached mirror of `https://github.com/test/top.git`"), "{e}");
    cfg.offline = false;
    source::fetch(&cfg, &r, &Collect::default()).unwrap();
    // Offline now works, even with the server gone.
    drop(s.daemon);
    cfg.offline = true;
    let f = source::fetch(&cfg, &r, &Collect::default()).unwrap();
    let dest = s.home.join("offline-tree");
    source::checkout(&r, &f, &dest).unwrap();
    assert!(dest.join("third_party/mid/deps/leaf/leaf.txt").is_file());
}

// ---------------------------------------------------------------------------------------------
// Downloads

fn fast() -> RetryPolicy {
    RetryPolicy { attempts: 3, base: std::time::Duration::from_millis(5), timeout: std::time::Duration::from_secs(5) }
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// 300 kB that differ everywhere, so a splice at the wrong offset cannot hash right.
fn payload() -> Vec<u8> {
    let mut out = Vec::with_capacity(300_000);
    let mut x: u32 = 12345;
    while out.len() < 300_000 {
        x = x.wrapping_mul(1103515245).wrapping_add(12345);
        out.push((x >> 16) as u8);
    }
    out
}

#[test]
fn download_cut_mid_body_resumes_with_only_the_missing_bytes() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    let body = payload();
    srv.add("x-1.0.tar.gz", body.clone());
    srv.with(|s| s.drop_after.push_back(100_000));
    let path =
        download::fetch_with(&cfg, "x", &srv.url("x-1.0.tar.gz"), &sha(&body), &Collect::default(), &fast()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), body);
    assert_eq!(path, cfg.cache_dir.join("downloads").join(sha(&body)));
    srv.with(|s| {
        assert_eq!(s.bytes_sent, body.len() as u64, "exactly the file, once: the cut part was not sent again");
        assert_eq!(s.requests.len(), 2);
        assert_eq!(s.requests[1].1.as_deref(), Some("bytes=100000-"));
    });
    assert!(!path.with_extension("part").exists());
    assert!(cfg.cache_dir.join("downloads/CACHEDIR.TAG").is_file());

    // The same content, asked for by another URL: not downloaded again.
    let again =
        download::fetch_with(&cfg, "y", &srv.url("elsewhere.tar.gz"), &sha(&body), &Collect::default(), &fast())
            .unwrap();
    assert_eq!(again, path);
    srv.with(|s| assert_eq!(s.requests.len(), 2));
}

#[test]
fn permanent_http_errors_and_unusable_urls_are_not_retried_but_503_is() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    // Backoffs long enough that a retry of a permanent error would be obvious in the count.
    let patient = RetryPolicy {
        attempts: 3,
        base: std::time::Duration::from_millis(200),
        timeout: std::time::Duration::from_secs(5),
    };
    let e = download::fetch_with(&cfg, "x", &srv.url("missing.tar.gz"), &sha(b"x"), &Collect::default(), &patient)
        .unwrap_err();
    assert!(matches!(e, DownloadError::Http { status: 404, attempts: 1, .. }), "{e}");
    assert!(e.to_string().contains("the server answered HTTP 404 (after 1 attempt(s))"), "{e}");
    srv.with(|s| assert_eq!(s.requests.len(), 1, "a 404 is asked once"));

    let e = download::fetch_with(&cfg, "x", "ftp://127.0.0.1:9/x.tar.gz", &sha(b"x"), &Collect::default(), &patient)
        .unwrap_err();
    assert!(matches!(e, DownloadError::Network { attempts: 1, .. }), "an unsupported scheme is tried once: {e}");

    // A redirect loop answers the same next time: asked once, named as a loop, not retried.
    srv.with(|s| {
        s.requests.clear();
        s.redirects.insert("/loop-a.tar.gz".into(), "/loop-b.tar.gz".into());
        s.redirects.insert("/loop-b.tar.gz".into(), "/loop-a.tar.gz".into());
    });
    let url = srv.url("loop-a.tar.gz");
    let e = download::fetch_with(&cfg, "x", &url, &sha(b"x"), &Collect::default(), &patient).unwrap_err();
    assert!(matches!(e, DownloadError::Redirects { .. }), "{e}");
    assert!(e.to_string().starts_with(&format!("cannot download `{url}`: its redirects loop")), "{e}");
    let asked = srv.with(|s| s.requests.len());
    assert!((2..=12).contains(&asked), "one attempt following the loop, not 3: {asked} requests");

    // A 503 is worth waiting for.
    let body = payload();
    srv.add("busy.tar.gz", body.clone());
    srv.with(|s| {
        s.requests.clear();
        s.fail_5xx = 2;
    });
    download::fetch_with(&cfg, "x", &srv.url("busy.tar.gz"), &sha(&body), &Collect::default(), &fast()).unwrap();
    srv.with(|s| assert_eq!(s.requests.len(), 3));
}

#[test]
fn download_resumes_a_part_left_by_an_earlier_run() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    let body = payload();
    srv.add("x.tar.gz", body.clone());
    // What a killed run leaves: the first 50 kB and the validator of the response they came from.
    let dest = download::cache_path(&cfg, &sha(&body));
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(dest.with_extension("part"), &body[..50_000]).unwrap();
    std::fs::write(dest.with_extension("part.validator"), crate::support::http::etag(&body)).unwrap();
    download::fetch_with(&cfg, "x", &srv.url("x.tar.gz"), &sha(&body), &Collect::default(), &fast()).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), body);
    srv.with(|s| {
        assert_eq!(s.requests, vec![("/x.tar.gz".to_string(), Some("bytes=50000-".to_string()))]);
        assert_eq!(s.bytes_sent, body.len() as u64 - 50_000);
    });

    // A part from another version of the file (validator differs): If-Range makes the server
    // send it all, and the download restarts cleanly.
    let other = payload().into_iter().rev().collect::<Vec<u8>>();
    srv.add("y.tar.gz", other.clone());
    let dest = download::cache_path(&cfg, &sha(&other));
    std::fs::write(dest.with_extension("part"), &body[..50_000]).unwrap();
    std::fs::write(dest.with_extension("part.validator"), "\"stale\"").unwrap();
    srv.with(|s| s.bytes_sent = 0);
    download::fetch_with(&cfg, "y", &srv.url("y.tar.gz"), &sha(&other), &Collect::default(), &fast()).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), other);
    srv.with(|s| assert_eq!(s.bytes_sent, other.len() as u64));
}

#[test]
fn download_restarts_cleanly_when_the_server_ignores_range() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    let body = payload();
    srv.add("x.tar.gz", body.clone());
    srv.with(|s| {
        s.ignore_range = true;
        s.drop_after.push_back(100_000);
    });
    let p = Collect::default();
    let path = download::fetch_with(&cfg, "x", &srv.url("x.tar.gz"), &sha(&body), &p, &fast()).unwrap();
    assert_eq!(std::fs::read(path).unwrap(), body);
    srv.with(|s| {
        assert_eq!(s.requests[1].1.as_deref(), Some("bytes=100000-"), "it asked for the rest");
        assert_eq!(s.bytes_sent, 100_000 + body.len() as u64, "and got (and kept) the whole file instead");
    });
    assert!(p.lines().iter().any(|l| l.contains("the server sent the whole file; starting over")), "{:#?}", p.lines());
}

/// A read timeout of 1 s and 3 attempts without progress: the stall bound is
/// (attempts + 1) x (timeout + the resend up to the furthest byte) plus the backoffs.
fn stall_policy() -> RetryPolicy {
    RetryPolicy { attempts: 3, base: std::time::Duration::from_millis(5), timeout: std::time::Duration::from_secs(1) }
}

#[test]
fn a_server_that_stalls_mid_body_ends_the_download_within_the_bound_and_a_later_run_resumes() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    let body = payload();
    srv.add("x.tar.gz", body.clone());
    srv.with(|s| {
        s.stall_at = Some(120_000);
        s.stall_for = std::time::Duration::from_millis(1500);
    });
    let url = srv.url("x.tar.gz");
    let p = Collect::default();
    let started = std::time::Instant::now();
    let e = download::fetch_with(&cfg, "x", &url, &sha(&body), &p, &stall_policy()).unwrap_err().to_string();
    let took = started.elapsed();
    assert!(
        e.contains("stopped making progress: 3 attempts in a row did not get past byte 120000 (each waits at most 1 s for data; 4 attempt(s) in all)")
            && e.contains("The part downloaded is kept: run the same command again later"),
        "{e}"
    );
    // Before: any byte reset the count, so a stall cost 101 timeouts. Now: the first attempt
    // and 3 without progress, each about one timeout (the server holds each for 1.5 s).
    assert!(took < std::time::Duration::from_secs(15), "{took:?}");
    srv.with(|s| assert_eq!(s.requests.len(), 4, "{:?}", s.requests));
    let said: Vec<String> = p.lines().into_iter().filter(|l| !l.contains("transfer ")).collect();
    assert!(said.len() <= 10, "a few lines, not hundreds: {said:#?}");
    // The server recovers: the next run asks for the rest only.
    srv.with(|s| s.stall_at = None);
    let path = download::fetch_with(&cfg, "x", &url, &sha(&body), &Collect::default(), &stall_policy()).unwrap();
    assert_eq!(std::fs::read(path).unwrap(), body);
    srv.with(|s| assert_eq!(s.requests.last().unwrap().1.as_deref(), Some("bytes=120000-")));
}

#[test]
fn a_server_that_ignores_range_and_cuts_at_the_same_byte_ends_after_the_attempts_without_progress() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    let body = payload();
    srv.add("x.tar.gz", body.clone());
    srv.with(|s| {
        s.ignore_range = true;
        s.drop_after.extend([100_000; 50]);
    });
    let url = srv.url("x.tar.gz");
    let e = download::fetch_with(&cfg, "x", &url, &sha(&body), &Collect::default(), &stall_policy())
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 attempts in a row did not get past byte 100000"), "{e}");
    // Each restart sends the first 100000 bytes again; before, every restart counted as progress.
    srv.with(|s| assert_eq!(s.requests.len(), 4, "{:?}", s.requests.len()));
    // A good server: the next run gets it whole.
    srv.with(|s| s.drop_after.clear());
    let path = download::fetch_with(&cfg, "x", &url, &sha(&body), &Collect::default(), &stall_policy()).unwrap();
    assert_eq!(std::fs::read(path).unwrap(), body);
}

#[test]
fn download_wrong_sha256_never_reaches_the_cache() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    let body = payload();
    srv.add("x.tar.gz", body.clone());
    let wrong = sha(b"something else");
    let url = srv.url("x.tar.gz");
    let e = download::fetch_with(&cfg, "x", &url, &wrong, &Collect::default(), &fast()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("sha256 mismatch for `{url}`: expected {wrong}, got {} (300000 bytes); the download was discarded, nothing was cached", sha(&body))
    );
    let dir = cfg.cache_dir.join("downloads");
    let left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    assert!(left.iter().all(|n| n == "CACHEDIR.TAG" || n.ends_with(".lock")), "{left:?}");
}

#[test]
fn download_retries_5xx_with_a_bound() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    let body = b"small file\n".to_vec();
    srv.add("f.txt", body.clone());
    srv.with(|s| s.fail_5xx = 2);
    download::fetch_with(&cfg, "f", &srv.url("f.txt"), &sha(&body), &Collect::default(), &fast()).unwrap();
    srv.with(|s| assert_eq!(s.requests.len(), 3));

    let other = b"other\n".to_vec();
    srv.add("g.txt", other.clone());
    srv.with(|s| s.fail_5xx = 100);
    let e = download::fetch_with(&cfg, "g", &srv.url("g.txt"), &sha(&other), &Collect::default(), &fast()).unwrap_err();
    assert!(matches!(e, DownloadError::Http { status: 503, attempts: 3, .. }), "{e}");
    // A connection refused is retried the same way, and bounded.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = download::fetch_with(
        &cfg,
        "g",
        &format!("http://127.0.0.1:{port}/g.txt"),
        &sha(&other),
        &Collect::default(),
        &fast(),
    )
    .unwrap_err();
    assert!(matches!(e, DownloadError::Network { attempts: 3, .. }), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Archives

/// Everything under `dir`, relative, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .map(|e| e.unwrap().path().strip_prefix(dir).unwrap().to_string_lossy().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn hostile_archives_are_refused_and_nothing_escapes() {
    use tar::EntryType::*;
    let ok: &[u8] = b"fine\n";
    let cases: Vec<(&str, Vec<u8>, ArchiveFormat, &str)> = vec![
        (
            "dotdot",
            gz(&tar_of(&[("pkg/a.txt", Regular, None, ok), ("pkg/../../evil.txt", Regular, None, b"x")])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/../../evil.txt`: its path contains `..`",
        ),
        (
            "absolute",
            tar_of(&[("/tmp/rocmforge-abs-evil.txt", Regular, None, b"x")]),
            ArchiveFormat::Tar,
            "refusing entry `/tmp/rocmforge-abs-evil.txt`: its path is absolute",
        ),
        (
            "symlink-out",
            gz(&tar_of(&[("pkg/link", Symlink, Some("../../outside"), b""), ("pkg/link/x.txt", Regular, None, b"x")])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/link`: it is a symlink to `../../outside`, outside the destination",
        ),
        (
            "symlink-abs",
            gz(&tar_of(&[("pkg/etc", Symlink, Some("/etc"), b"")])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/etc`: it is a symlink to the absolute path `/etc`",
        ),
        (
            "symlink-chain",
            gz(&tar_of(&[
                ("pkg/a", Symlink, Some("."), b""),
                ("pkg/a/b", Symlink, Some(".."), b""),
                ("pkg/a/b/evil.txt", Regular, None, b"x"),
            ])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/a/b`: it is a symlink to `..`, outside the destination",
        ),
        (
            "hardlink-out",
            gz(&tar_of(&[("pkg/hl", Link, Some("../../outside.txt"), b"")])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/hl`: it is a hard link to `../../outside.txt`: its path contains `..`",
        ),
        (
            "hardlink-abs",
            gz(&tar_of(&[("pkg/passwd", Link, Some("/etc/passwd"), b"")])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/passwd`: it is a hard link to `/etc/passwd`: its path is absolute",
        ),
        (
            "device",
            gz(&tar_of(&[("pkg/sda", Block, None, b"")])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/sda`: it is a device file",
        ),
        (
            "chardev",
            gz(&tar_of(&[("pkg/null", Char, None, b"")])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/null`: it is a device file",
        ),
        (
            "fifo",
            gz(&tar_of(&[("pkg/p", Fifo, None, b"")])),
            ArchiveFormat::TarGz,
            "refusing entry `pkg/p`: it is a named pipe",
        ),
        (
            "zip-dotdot",
            {
                use std::io::Write;
                let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
                z.start_file("pkg/../../zip-evil.txt", zip::write::SimpleFileOptions::default()).unwrap();
                z.write_all(b"x").unwrap();
                z.finish().unwrap().into_inner()
            },
            ArchiveFormat::Zip,
            "refusing entry `pkg/../../zip-evil.txt`: its path contains `..`",
        ),
    ];
    for (name, bytes, format, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join(format!("{name}.archive"));
        std::fs::write(&file, &bytes).unwrap();
        let out = tmp.path().join("out");
        let dest = out.join("dest");
        assert_eq!(archive::detect(&file, "https://x/y.tar").unwrap(), Some(format), "{name}");
        let e = archive::extract(&file, format, &dest, 1).unwrap_err();
        assert!(matches!(e, ArchiveError::Unsafe { .. }), "{name}: {e}");
        assert_eq!(e.to_string(), format!("archive `{}`: {want}", file.display()), "{name}");
        // Nothing outside the destination: `out` holds only `dest`, the temp dir only what we put.
        assert_eq!(listing(&out).iter().filter(|p| !p.starts_with("dest")).count(), 0, "{name}: {:?}", listing(&out));
        let mut top: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        top.sort();
        let mut want_top = vec![format!("{name}.archive"), "out".to_string()];
        want_top.sort();
        assert_eq!(top, want_top, "{name}");
    }
    assert!(!Path::new("/tmp/rocmforge-abs-evil.txt").exists());
}

#[test]
fn good_archives_extract_with_strip_components_in_every_format() {
    use std::io::Write;
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        b.append_data(&mut h, path, data).unwrap();
    };
    add("pkg-1.0/src/a.c", b"int a;\n", 0o644);
    add("pkg-1.0/bin/run.sh", b"#!/bin/sh\n", 0o755);
    add("pkg-1.0/lib/libx.so.1", b"ELF", 0o644);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "pkg-1.0/lib/libx.so", "libx.so.1").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "pkg-1.0/src/lib", "../lib").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    b.append_link(&mut h, "pkg-1.0/src/b.c", "pkg-1.0/src/a.c").unwrap();
    let tar_bytes = b.into_inner().unwrap();

    let xz = {
        let mut e = xz2::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(&tar_bytes).unwrap();
        e.finish().unwrap()
    };
    let bz = {
        let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
        e.write_all(&tar_bytes).unwrap();
        e.finish().unwrap()
    };
    let zst = zstd::encode_all(&tar_bytes[..], 1).unwrap();
    let zip_bytes = {
        let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let o = zip::write::SimpleFileOptions::default();
        z.start_file("pkg-1.0/src/a.c", o).unwrap();
        z.write_all(b"int a;\n").unwrap();
        z.finish().unwrap().into_inner()
    };
    for (name, bytes, format) in [
        ("t.tar.gz", gz(&tar_bytes), ArchiveFormat::TarGz),
        ("t.tar.xz", xz, ArchiveFormat::TarXz),
        ("t.tar.bz2", bz, ArchiveFormat::TarBz2),
        ("t.tar.zst", zst, ArchiveFormat::TarZst),
        ("t.tar", tar_bytes.clone(), ArchiveFormat::Tar),
        ("t.zip", zip_bytes, ArchiveFormat::Zip),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join(name);
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(archive::detect(&file, name).unwrap(), Some(format));
        let dest = tmp.path().join("dest");
        archive::extract(&file, format, &dest, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(std::fs::read_to_string(dest.join("src/a.c")).unwrap(), "int a;\n", "{name}");
        if format != ArchiveFormat::Zip {
            assert_eq!(std::fs::read_link(dest.join("lib/libx.so")).unwrap(), Path::new("libx.so.1"));
            assert_eq!(std::fs::read(dest.join("src/lib/libx.so")).unwrap(), b"ELF");
            assert_eq!(std::fs::read_to_string(dest.join("src/b.c")).unwrap(), "int a;\n");
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(dest.join("bin/run.sh")).unwrap().permissions().mode() & 0o777, 0o755);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Patches

/// Every file under `dir` (outside `.git`) with its content: to compare trees.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().strip_prefix(dir).unwrap().to_string_lossy().to_string(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

fn pristine_tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("src")).unwrap();
    std::fs::write(t.path().join("src/conv.cpp"), "// conv\nint a = 1;\nint b = 2;\nint c = 3;\nint d = 4;\n").unwrap();
    std::fs::write(t.path().join("README"), "readme\n").unwrap();
    t
}

fn pp(name: &str, text: &str) -> (String, Vec<u8>) {
    (name.to_string(), text.as_bytes().to_vec())
}

const P1: &str = "diff --git a/src/conv.cpp b/src/conv.cpp\n--- a/src/conv.cpp\n+++ b/src/conv.cpp\n@@ -2,3 +2,3 @@\n int a = 1;\n-int b = 2;\n+int b = 20;\n int c = 3;\n";
const P2: &str = "--- a/README\n+++ b/README\n@@ -1 +1,2 @@\n readme\n+patched\n";

/// (what, patch series as (file name, bytes), expected error).
type PatchCase = (&'static str, Vec<(String, Vec<u8>)>, String);

#[test]
fn patch_failures_have_their_own_messages_and_leave_the_tree_pristine() {
    let cases: Vec<PatchCase> = vec![
        (
            "context mismatch",
            vec![pp("0001-conv.patch", P1), pp("0002-readme.patch", P2), pp("0003-ctx.patch", "--- a/src/conv.cpp\n+++ b/src/conv.cpp\n@@ -3,3 +3,3 @@\n int b = 2;\n-int c = 3;\n+int c = 30;\n int d = 4;\n")],
            "`0003-ctx.patch` does not apply: hunk #1 of `src/conv.cpp` (patch line 3, file line 3) does not match: line 3 is `int b = 20;`, the patch expects `int b = 2;`".into(),
        ),
        (
            "missing file",
            vec![pp("0001-conv.patch", P1), pp("0002-gone.patch", "--- a/src/gone.cpp\n+++ b/src/gone.cpp\n@@ -1 +1 @@\n-x\n+y\n")],
            "`0002-gone.patch` does not apply: `src/gone.cpp` does not exist in the tree".into(),
        ),
        (
            "already applied",
            vec![pp("0001-conv.patch", P1), pp("0002-again.patch", P1)],
            "`0002-again.patch` does not apply: hunk #1 of `src/conv.cpp` (patch line 4, file line 2) does not match: line 3 is `int b = 20;`, the patch expects `int b = 2;`\n  note: the patch looks already applied (its result is already in the tree)".into(),
        ),
        (
            "not a patch",
            vec![pp("0001-conv.patch", P1), pp("0002-notes.patch", "These are my notes about the fix.\nNothing to apply here.\n")],
            "`0002-notes.patch` is not a patch: it has no `--- a/FILE` / `+++ b/FILE` header followed by a hunk (`@@ -L,N +L,N @@`)".into(),
        ),
        (
            "creates an existing file",
            vec![pp("0001-new.patch", "diff --git a/README b/README\nnew file mode 100644\n--- /dev/null\n+++ b/README\n@@ -0,0 +1 @@\n+other\n")],
            "`0001-new.patch` does not apply: it creates `README`, which already exists".into(),
        ),
    ];
    for (what, series, want) in cases {
        let t = pristine_tree();
        let before = snapshot(t.path());
        let e = rocmforge::patch::apply_series(t.path(), &series).unwrap_err();
        assert_eq!(e.to_string(), want, "{what}");
        assert_eq!(snapshot(t.path()), before, "{what}: the tree is pristine afterwards");
        // The check (no writes) says the same.
        assert_eq!(rocmforge::patch::check_series(t.path(), &series).unwrap_err().to_string(), want, "{what}");
    }
    // And the good series applies.
    let t = pristine_tree();
    rocmforge::patch::apply_series(t.path(), &[pp("1", P1), pp("2", P2)]).unwrap();
    assert_eq!(std::fs::read_to_string(t.path().join("README")).unwrap(), "readme\npatched\n");
}

#[test]
fn prepare_trusts_a_complete_tree_and_recreates_a_half_one() {
    let s = git_setup();
    let cfg = s.cfg();
    let patch = b"--- a/src/main.c\n+++ b/src/main.c\n@@ -1,4 +1,4 @@\n int main(void)\n {\n-    return 0;\n+    return 42;\n }\n--- a/third_party/mid/deps/leaf/leaf.txt\n+++ b/third_party/mid/deps/leaf/leaf.txt\n@@ -1 +1 @@\n-leaf\n+leaf, patched inside a submodule\n";
    let toml = format!(
        "[package]\nname = \"top\"\nversion = \"1\"\nsummary = \"s\"\n[source]\ngit = \"https://github.com/test/top.git\"\ntag = \"v1\"\nrev = \"{}\"\nsubmodules = true\n[patches]\nseries = [\"0001-ret.patch\"]\n[build]\nsystem = \"source-only\"\n",
        s.forest.t1
    );
    let mut files = std::collections::BTreeMap::new();
    files.insert(
        "recipes/t/stack.toml".to_string(),
        b"[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n".to_vec(),
    );
    files.insert("recipes/t/top.toml".to_string(), toml.into_bytes());
    files.insert("patches/t/top/0001-ret.patch".to_string(), patch.to_vec());
    let tree = rocmforge::recipe::RecipeTree::from_files(rocmforge::recipe::Origin::Embedded, files);
    let stack = rocmforge::recipe::load_stack(&tree, "t").unwrap();
    let r = &stack.recipes["top"];

    let dest = source::work_tree_dir(&cfg, "t", "top");
    source::prepare(&cfg, &tree, r, &dest, &Collect::default()).unwrap();
    assert!(std::fs::read_to_string(dest.join("src/main.c")).unwrap().contains("return 42;"));
    assert_eq!(
        std::fs::read_to_string(dest.join("third_party/mid/deps/leaf/leaf.txt")).unwrap(),
        "leaf, patched inside a submodule\n"
    );
    let marker = std::fs::read_to_string(source::marker_path(&dest)).unwrap();
    assert!(marker.contains(&s.forest.t1) && marker.contains("0001-ret.patch"), "{marker}");

    // Complete: trusted as is (a build dir's state survives).
    std::fs::write(dest.join("sentinel"), "x").unwrap();
    let p = Collect::default();
    source::prepare(&cfg, &tree, r, &dest, &p).unwrap();
    assert!(dest.join("sentinel").exists());
    assert!(p.lines().iter().any(|l| l.contains("source tree ready")));

    // A crash between checkout and marker: recreated from scratch, patched once.
    std::fs::remove_file(source::marker_path(&dest)).unwrap();
    source::prepare(&cfg, &tree, r, &dest, &Collect::default()).unwrap();
    assert!(!dest.join("sentinel").exists());
    assert!(std::fs::read_to_string(dest.join("src/main.c")).unwrap().contains("return 42;"));

    // Patch checks read the mirrors directly, submodules included.
    source::preflight(&cfg, &tree, r, &Collect::default()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Commands

/// A recipe tree (`top` from git with a patch reaching into a submodule, `tarball` from HTTP,
/// `app` needing both), a git daemon, an HTTP server, and a config rewriting github.com.
struct World {
    dir: tempfile::TempDir,
    git: GitSetup,
    http: HttpServer,
    tarball_sha: String,
}

impl World {
    fn tree(&self) -> PathBuf {
        self.dir.path().join("tree")
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn cmd(&self) -> assert_cmd::Command {
        let mut c = crate::support::rocmforge(&self.home());
        c.env("ROCMFORGE_CONFIG", self.dir.path().join("config.toml"))
            .env("ROCMFORGE_RETRY_BASE_MS", "5")
            .env("ROCMFORGE_RETRIES", "2")
            .env("ROCMFORGE_HTTP_TIMEOUT_SECS", "5")
            .arg("--recipes")
            .arg(self.tree());
        c
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.tree().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

const TOP_PATCH: &str = "--- a/src/main.c\n+++ b/src/main.c\n@@ -1,4 +1,4 @@\n int main(void)\n {\n-    return 0;\n+    return 42;\n }\n--- a/third_party/mid/mid.txt\n+++ b/third_party/mid/mid.txt\n@@ -1 +1 @@\n-mid\n+mid, patched\n";
const TAR_PATCH: &str = "--- a/hello.c\n+++ b/hello.c\n@@ -1 +1 @@\n-hello\n+hello, patched\n";

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let git = git_setup();
    let http = HttpServer::start();
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(6);
    h.set_mode(0o644);
    b.append_data(&mut h, "pkg-1.0/hello.c", &b"hello\n"[..]).unwrap();
    let tgz = gz(&b.into_inner().unwrap());
    let tarball_sha = sha(&tgz);
    http.add("pkg-1.0.tar.gz", tgz);
    let w = World { dir, git, http, tarball_sha };
    std::fs::write(
        w.dir.path().join("config.toml"),
        format!("[url-rewrite]\n\"https://github.com/\" = \"{}\"\n", w.git.daemon.url("")),
    )
    .unwrap();
    w.write(
        "recipes/t/stack.toml",
        "[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n",
    );
    w.write(
        "recipes/t/top.toml",
        &format!("[package]\nname = \"top\"\nversion = \"1\"\nsummary = \"s\"\n\n[source]\ngit = \"https://github.com/test/top.git\"\ntag = \"v1\"\nrev = \"{}\"\nsubmodules = true\n\n[patches]\nseries = [\"0001-ret.patch\"]\n\n[build]\nsystem = \"cmake\"\n", w.git.forest.t1),
    );
    w.write("patches/t/top/0001-ret.patch", TOP_PATCH);
    w.write(
        "recipes/t/tarball.toml",
        &format!("[package]\nname = \"tarball\"\nversion = \"1\"\nsummary = \"s\"\n\n[source]\nurl = \"{}\"\nsha256 = \"{}\"\n\n[patches]\nseries = [\"0001-hello.patch\"]\n\n[build]\nsystem = \"cmake\"\n", w.http.url("pkg-1.0.tar.gz"), w.tarball_sha),
    );
    w.write("patches/t/tarball/0001-hello.patch", TAR_PATCH);
    w.write("recipes/t/app.toml", "[package]\nname = \"app\"\nversion = \"1\"\nsummary = \"s\"\n\n[dependencies]\nbuild = [\"top\", \"tarball\"]\n\n[build]\nsystem = \"cmake\"\n");
    w
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[test]
fn cli_fetch_preflight_fetches_the_closure_and_checks_patches() {
    let w = world();
    let out = w.cmd().args(["fetch", "app", "--target", "gfx1010"]).output().unwrap();
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{so}\nstderr:\n{se}");
    assert!(
        so.contains(&format!(
            "ok    top                      git:{} third_party/mid={}",
            w.git.forest.t1, w.git.forest.m1
        )),
        "{so}"
    );
    assert!(so.contains(&format!("ok    tarball                  sha256:{}", w.tarball_sha)), "{so}");
    assert!(so.ends_with("all 2 sources and patch series ok\n"), "{so}");
    // The github.com URL went to the local daemon.
    assert!(se.contains("cloning mirror of https://github.com/test/top.git (via `git://127.0.0.1:"), "{se}");

    // Offline, from the cache: fine, even with the servers gone.
    let out = w.cmd().args(["--offline", "fetch", "app"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with("all 2 sources and patch series ok (offline: from the cache)\n"));
}

#[test]
fn cli_offline_with_an_empty_cache_lists_every_missing_source() {
    let w = world();
    let out = w.cmd().args(["fetch", "app", "--offline"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let se = crate::support::scrub(&text(&out.stderr), &w.home());
    let se = se.replace(&w.http.port.to_string(), "PORT");
    let mirror = sgit::mirror_path(&config(&w.home(), &[]), "https://github.com/test/top.git");
    let mirror_name = mirror.file_name().unwrap().to_string_lossy().to_string();
    assert_eq!(
        se,
        format!(
            "error: 2 of 2 sources and patch series failed (offline):\n  \
             - tarball: offline: `http://127.0.0.1:PORT/pkg-1.0.tar.gz` (sha256 {sha}) is not in the cache (expected `[ROOT]/cache/rocmforge/downloads/{sha}`); run `rocmforge fetch` while online\n  \
             - top: offline: no cached mirror of `https://github.com/test/top.git` (expected at `[ROOT]/cache/rocmforge/git/{mirror_name}`); run `rocmforge fetch` while online\n",
            sha = w.tarball_sha
        )
    );
}

#[test]
fn cli_fetch_reports_all_failures_together() {
    let w = world();
    // A patch that no longer applies, and a tarball whose hash is wrong.
    w.write("patches/t/top/0001-ret.patch", &TOP_PATCH.replace("-    return 0;", "-    return 1;"));
    let wrong = sha(b"not it");
    let toml =
        std::fs::read_to_string(w.tree().join("recipes/t/tarball.toml")).unwrap().replace(&w.tarball_sha, &wrong);
    w.write("recipes/t/tarball.toml", &toml);
    let out = w.cmd().args(["fetch", "app"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let se = text(&out.stderr);
    let errors = &se[se.find("error:").unwrap()..];
    assert_eq!(
        errors,
        format!(
            "error: 2 of 2 sources and patch series failed:\n  \
             - tarball: sha256 mismatch for `{url}`: expected {wrong}, got {sha} ({len} bytes); the download was discarded, nothing was cached\n  \
             - top: `0001-ret.patch` does not apply: hunk #1 of `src/main.c` (patch line 3, file line 1) does not match: line 3 is `    return 0;`, the patch expects `    return 1;`\n",
            url = w.http.url("pkg-1.0.tar.gz"),
            sha = w.tarball_sha,
            len = w.http.with(|s| s.files["/pkg-1.0.tar.gz"].len()),
        )
    );
    assert!(text(&out.stdout).contains("FAIL  top"), "{}", text(&out.stdout));
}

#[test]
fn cli_source_then_patch_diff_makes_the_next_patch() {
    let w = world();
    let out = w.cmd().args(["source", "top"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let path = PathBuf::from(text(&out.stdout).trim());
    assert_eq!(path, w.home().join("cache/rocmforge/work/t/top/src"));
    assert!(std::fs::read_to_string(path.join("src/main.c")).unwrap().contains("return 42;"));
    assert_eq!(std::fs::read_to_string(path.join("third_party/mid/mid.txt")).unwrap(), "mid, patched\n");
    // Again: the prepared tree is reused, not patched twice.
    let out = w.cmd().args(["source", "top"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("source tree ready"), "{}", text(&out.stderr));

    // The user edits the tree (inside a submodule too), then asks for a patch.
    std::fs::write(path.join("README"), "top\nedited\n").unwrap();
    std::fs::write(path.join("third_party/mid/deps/leaf/new.txt"), "new\n").unwrap();
    let out = w.cmd().args(["patch", "diff", "top"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let new_patch = w.tree().join("patches/t/top/0002-local-edits.patch");
    assert_eq!(text(&out.stdout).trim(), new_patch.display().to_string());
    assert_eq!(
        std::fs::read_to_string(&new_patch).unwrap(),
        "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1,2 @@\n top\n+edited\n\
         diff --git a/third_party/mid/deps/leaf/new.txt b/third_party/mid/deps/leaf/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/third_party/mid/deps/leaf/new.txt\n@@ -0,0 +1 @@\n+new\n"
    );
    assert!(std::fs::read_to_string(w.tree().join("recipes/t/top.toml"))
        .unwrap()
        .contains("series = [\"0001-ret.patch\", \"0002-local-edits.patch\"]"));
    // The series with the new patch checks, and `source` rebuilds the tree with it.
    let out = w.cmd().args(["patch", "check", "top"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = w.cmd().args(["source", "top"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(path.join("README")).unwrap(), "top\nedited\n");
    // To stdout with -o -: no; to a file with -o.
    let o = w.dir.path().join("edit.patch");
    let out = w.cmd().args(["patch", "diff", "top", "-o"]).arg(&o).output().unwrap();
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("no changes"), "{}", text(&out.stderr));
    assert!(!o.exists());
}

#[test]
fn download_from_a_file_url_mirror_is_verified_too() {
    let home = tempfile::tempdir().unwrap();
    let local = home.path().join("mirror/pkg-1.0.tar.gz");
    std::fs::create_dir_all(local.parent().unwrap()).unwrap();
    std::fs::write(&local, b"tarball bytes").unwrap();
    let mirror = format!("file://{}/", home.path().join("mirror").display());
    let cfg = config(home.path(), &[("https://example.org/dl/", mirror.as_str())]);
    let url = "https://example.org/dl/pkg-1.0.tar.gz";
    let e = download::fetch_with(&cfg, "p", url, &sha(b"other"), &Collect::default(), &fast()).unwrap_err();
    assert!(e.to_string().starts_with(&format!("sha256 mismatch for `{url}`: expected {}", sha(b"other"))), "{e}");
    let p = download::fetch_with(&cfg, "p", url, &sha(b"tarball bytes"), &Collect::default(), &fast()).unwrap();
    assert_eq!(std::fs::read(p).unwrap(), b"tarball bytes");
}

// ---------------------------------------------------------------------------------------------
// Nothing from the cache trusted unverified; no leftovers

/// Writes `bytes` into `path` at `offset`, in place: same inode, no truncation, no rename (what
/// an editor with in-place saves, or a stray `dd`, does).
pub(crate) fn write_in_place(path: &Path, offset: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn a_cached_download_altered_in_place_is_reported_by_verify_and_fetched_again() {
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), &[]);
    let srv = HttpServer::start();
    let body = payload();
    srv.add("x.tar.gz", body.clone());
    let url = srv.url("x.tar.gz");
    let path = download::fetch_with(&cfg, "x", &url, &sha(&body), &Collect::default(), &fast()).unwrap();
    assert_eq!(download::verify_cache(&cfg), (1, vec![]));

    write_in_place(&path, 1000, b"altered");
    let altered = sha(&std::fs::read(&path).unwrap());
    let (checked, problems) = download::verify_cache(&cfg);
    assert_eq!(checked, 1);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, path);
    assert!(problems[0].problem.contains(&format!("its content has {altered}")), "{problems:?}");

    // The next fetch re-hashes, says why, removes it and downloads it again.
    let p = Collect::default();
    let again = download::fetch_with(&cfg, "x", &url, &sha(&body), &p, &fast()).unwrap();
    assert_eq!(again, path);
    assert!(std::fs::read(&again).unwrap() == body, "the altered bytes were used");
    srv.with(|s| assert_eq!(s.requests.len(), 2, "downloaded again"));
    let want = format!("was altered on disk (expected sha256 {}, found {altered}", sha(&body));
    assert!(p.lines().iter().any(|l| l.contains("warning: cached download") && l.contains(&want)), "{:#?}", p.lines());
    assert_eq!(download::verify_cache(&cfg), (1, vec![]));

    // Unfinished downloads are resumable, not damage: kept until they are old (and unlocked).
    let part = |name: &str| cfg.cache_dir.join("downloads").join(format!("{}.part", sha(name.as_bytes())));
    std::fs::write(part("fresh"), b"half").unwrap();
    std::fs::write(part("old"), b"half").unwrap();
    std::fs::write(part("old").with_extension("part.validator"), b"\"etag\"").unwrap();
    let weeks_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(15 * 24 * 3600);
    std::fs::File::options().write(true).open(part("old")).unwrap().set_modified(weeks_ago).unwrap();
    let stale = download::stale_parts(&cfg, download::STALE_PART_AGE);
    assert_eq!(stale, vec![(part("old"), 4)]);
    download::remove_part(&part("old")).unwrap();
    assert!(!part("old").exists() && !part("old").with_extension("part.validator").exists());
    assert!(part("fresh").exists());
    assert_eq!(download::verify_cache(&cfg).1, vec![], "a .part file is not damage");

    // Offline, an altered file is not used either: removed, and the fetch says it is missing.
    write_in_place(&path, 0, b"x");
    let mut offline = cfg.clone();
    offline.offline = true;
    let e = download::fetch_with(&offline, "x", &url, &sha(&body), &Collect::default(), &fast()).unwrap_err();
    assert!(matches!(e, DownloadError::OfflineMissing { .. }), "{e}");
    assert!(!path.exists());
}

#[test]
fn a_failed_clone_leaves_no_temp_dir_and_a_killed_one_is_found_by_verify_and_reclaimed_by_gc() {
    let g = git_setup();
    let cfg = g.cfg();
    let git_dir = cfg.cache_dir.join("git");
    let temps = || -> Vec<String> {
        std::fs::read_dir(&git_dir)
            .map(|rd| rd.map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.contains(".tmp-"))
            .collect()
    };
    // A repository the daemon does not have: the clone fails, twice, and leaves nothing.
    for _ in 0..2 {
        let e = sgit::ensure_mirror(&cfg, &g.daemon.url("test/missing.git"), &Collect::default(), "m").unwrap_err();
        assert!(matches!(e, GitError::Fetch { .. }), "{e}");
    }
    assert_eq!(temps(), Vec::<String>::new());
    assert!(sgit::stale_temps(&cfg).is_empty());

    // A clone killed half-way (the process dies after creating its temp dir) leaves one: verify
    // names it, gc removes it, and verify is happy again.
    let w = world();
    let out = w.cmd().args(["fetch", "top"]).env("ROCMFORGE_FAULT", "clone:top").output().unwrap();
    assert!(!out.status.success(), "the fault point kills the fetch");
    let git_dir = w.home().join("cache/rocmforge/git");
    let left: Vec<String> = std::fs::read_dir(&git_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let out = w.cmd().args(["cache", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("{}` was left by a killed store or clone", left[0])),
        "{}",
        text(&out.stderr)
    );
    let out = w.cmd().args(["cache", "gc"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("removed 1 entry"), "{}", text(&out.stdout));
    assert!(!git_dir.join(&left[0]).exists());
    let out = w.cmd().args(["cache", "verify"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // And the fetch works afterwards.
    let out = w.cmd().args(["fetch", "top"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Killed again, then simply run again: the clone that redoes it takes the leftover away,
    // and verify is clean with no `cache gc`.
    let w = world();
    let out = w.cmd().args(["fetch", "top"]).env("ROCMFORGE_FAULT", "clone:top").output().unwrap();
    assert!(!out.status.success(), "the fault point kills the fetch");
    let out = w.cmd().args(["fetch", "top"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = w.cmd().args(["cache", "verify"]).output().unwrap();
    assert!(out.status.success(), "a resumed clone left its killed run's temp: {}", text(&out.stderr));
}

/// A one-recipe stack whose source is `url` (`sha256` pinned or not), in `home/tree`.
fn url_stack(home: &Path, url: &str, sha256: Option<&str>) -> PathBuf {
    let dir = home.join("tree/recipes/pages");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("stack.toml"),
        "[stack]\nname = \"pages\"\nrocm-version = \"6.2.4\"\nsummary = \"s\"\ndefault-targets = [\"gfx1010\"]\n",
    )
    .unwrap();
    let pin = sha256.map(|s| format!("sha256 = \"{s}\"\n")).unwrap_or_default();
    std::fs::write(
        dir.join("page.toml"),
        format!(
            "[package]\nname = \"page\"\nversion = \"1.0\"\nsummary = \"s\"\n\n[source]\nurl = \"{url}\"\n{pin}\n[build]\nsystem = \"script\"\nsteps = [\"true\"]\n\n[targets]\ngpu = false\n"
        ),
    )
    .unwrap();
    home.join("tree")
}

#[test]
fn an_error_page_served_under_an_archive_name_is_never_pinned_or_unpacked() {
    let home = tempfile::tempdir().unwrap();
    let srv = HttpServer::start();
    let page = b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>gone</body></html>\n".to_vec();
    srv.add("pkg-1.0.tar.gz", page.clone());
    let url = srv.url("pkg-1.0.tar.gz");
    let said = format!(
        "`{url}` is named like an archive (`.tar.gz`) but what it served is not one: an HTML page (downloaded to `"
    );
    // Unpinned: `lock` (and `build`, which pins first) refuse to pin the page.
    let tree = url_stack(home.path(), &url, None);
    let run = |args: &[&str]| {
        crate::support::rocmforge(home.path())
            .arg("--recipes")
            .arg(&tree)
            .args(["--stack", "pages"])
            .args(args)
            .output()
            .unwrap()
    };
    for args in [&["lock"][..], &["build", "page"]] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("page: not pinned, its download is not what its name says") && err.contains(&said),
            "{args:?}: {err}"
        );
    }
    assert!(!tree.join("recipes/pages/rocmforge.lock").exists(), "nothing pinned");
    // Pinned to the page's digest (as a first download once recorded it): the preflight refuses
    // to use it, naming the URL and what it holds, instead of building a plain file.
    url_stack(home.path(), &url, Some(&sha(&page))); // the same tree, now pinned
    let out = run(&["fetch", "page"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&said), "{err}");
    // A plain file under a plain name is still a plain file, and a text under an archive name is
    // told as text.
    let e = {
        let f = home.path().join("notes.tar.xz");
        std::fs::write(&f, "version: 1.0\n").unwrap();
        archive::detect(&f, "https://example.org/notes.tar.xz").unwrap_err().to_string()
    };
    assert!(e.contains("(`.tar.xz`) but what it served is not one: text starting `version: 1.0`"), "{e}");
    let f = home.path().join("notes.txt");
    std::fs::write(&f, "<html></html>").unwrap();
    assert_eq!(archive::detect(&f, "https://example.org/notes.txt").unwrap(), None);
}

/// `w` with github.com rewritten to `to` (a stalling server), and `tagonly`: a git source with a
/// `tag` and no `rev`, for `lock`.
fn stalled_world(to: &str) -> World {
    let w = world();
    std::fs::write(w.dir.path().join("config.toml"), format!("[url-rewrite]\n\"https://github.com/\" = \"{to}\"\n"))
        .unwrap();
    w.write(
        "recipes/t/tagonly.toml",
        "[package]\nname = \"tagonly\"\nversion = \"1\"\nsummary = \"s\"\n\n[source]\ngit = \"https://github.com/test/top.git\"\ntag = \"v1\"\n\n[build]\nsystem = \"source-only\"\n",
    );
    w
}

/// Runs `args` against a stalling git server with a 1 s read timeout and 2 attempts without
/// progress; returns stderr and how long it took. Without the bound it would hang for ever:
/// the command is killed after 60 s.
fn against_a_stall(w: &World, args: &[&str]) -> (String, std::time::Duration) {
    let started = std::time::Instant::now();
    let out = w
        .cmd()
        .env("ROCMFORGE_HTTP_TIMEOUT_SECS", "1")
        .env("ROCMFORGE_RETRIES", "2")
        .args(args)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let took = started.elapsed();
    let se = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?} took {took:?}:\n{se}");
    (se, took)
}

#[test]
fn a_git_server_that_accepts_and_never_answers_ends_fetch_and_lock_within_the_bound() {
    let srv = crate::support::git::StallServer::start(b"");
    let to = format!("git://127.0.0.1:{}/", srv.port);
    let w = stalled_world(&to);
    // Each attempt waits 1 s for an answer; 2 attempts without progress end it.
    let (se, took) = against_a_stall(&w, &["fetch", "top"]);
    assert!(
        se.contains(&format!("fetch of `https://github.com/test/top.git` (via `{to}test/top.git`) stopped making progress: 2 attempts in a row got no pack data")) &&
        se.contains("each waits at most 1 s for data; 2 attempt(s) in all"),
        "{se}"
    );
    assert!(se.contains("timed out"), "{se}");
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    assert_eq!(srv.connections(), 2);
    assert!(
        !w.home().join("cache/rocmforge/git").read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp-")),
        "a stalled clone leaves no temp dir"
    );

    let (se, took) = against_a_stall(&w, &["lock", "tagonly"]);
    assert!(
        se.contains(&format!("listing the refs of `https://github.com/test/top.git` (via `{to}test/top.git`) stopped making progress: 2 attempts in a row got no list of refs")),
        "{se}"
    );
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    assert!(!w.tree().join("recipes/t/rocmforge.lock").exists());
}

#[test]
fn a_git_server_that_answers_partially_then_stalls_ends_build_within_the_bound() {
    // An HTTP mirror that sends the head of its answer and then nothing.
    let srv = crate::support::git::StallServer::start(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nContent-Length: 4000\r\n\r\n001e# service=git-upload-pack\n",
    );
    let to = format!("http://127.0.0.1:{}/", srv.port);
    let w = stalled_world(&to);
    let (se, took) = against_a_stall(&w, &["build", "top", "--target", "gfx1010"]);
    assert!(
        se.contains(&format!("fetch of `https://github.com/test/top.git` (via `{to}test/top.git`) stopped making progress: 2 attempts in a row")),
        "{se}"
    );
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    assert_eq!(srv.connections(), 2);
}

#[test]
fn an_empty_or_relative_url_is_refused_at_its_line_before_anything_is_fetched() {
    for (url, why) in [
        ("", "got ``: it is empty"),
        ("pkg-1.0.tar.gz", "got `pkg-1.0.tar.gz`: relative URL without a base"),
        ("ftp://h/pkg-1.0.tar.gz", "`ftp` is not a scheme rocmforge downloads"),
    ] {
        let home = tempfile::tempdir().unwrap();
        let tree = url_stack(home.path(), url, Some(&"0".repeat(64)));
        for args in [&["recipes", "check"][..], &["fetch", "page"]] {
            let out = crate::support::rocmforge(home.path()).arg("--recipes").arg(&tree).args(args).output().unwrap();
            let se = text(&out.stderr);
            assert_eq!(out.status.code(), Some(3), "{url:?} {args:?}: {se}");
            assert!(
                se.contains("page.toml:7:7") && se.contains("`url` must be an absolute http(s) or file URL"),
                "{se}"
            );
            assert!(se.contains(why), "{se}");
        }
        assert!(!home.path().join("cache/rocmforge/downloads").exists());
    }
}
