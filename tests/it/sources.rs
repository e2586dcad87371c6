//! Sources and patches (issue: sources and patches): git mirrors and submodules over a real
//! `git daemon`, downloads from a real HTTP server that cuts connections, hostile archives,
//! patch failures, and the `fetch` / `patch` / `source` commands.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rocmforge::config::Config;
use rocmforge::progress::Progress;
use rocmforge::recipe::Recipe;
use rocmforge::source::{self, git as sgit, GitError, SourceError, SourceIdentity};

use crate::support::git::{forest, git, GitDaemon};

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
    assert!(lines.iter().any(|l| l.contains("cloning mirror of https://github.com/test/top.git (via `git://127.0.0.1:")), "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("transfer objects")), "fetch progress is reported: {lines:#?}");

    let dest = s.home.join("work/top/src");
    source::checkout(&cfg, &r, &fetched, &dest).unwrap();
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
    assert!(mirrors[0].starts_with("leaf-") && mirrors[1].starts_with("mid-") && mirrors[2].starts_with("top-"), "{mirrors:?}");
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
    assert_eq!(sgit::resolve_tag(&cfg, "https://github.com/test/top.git", "v1").unwrap(), s.forest.t1);
    assert!(matches!(sgit::resolve_tag(&cfg, "https://github.com/test/top.git", "nope"), Err(GitError::NoSuchTag { .. })));
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
    source::checkout(&cfg, &r, &f, &dest).unwrap();
    assert!(dest.join("third_party/mid/deps/leaf/leaf.txt").is_file());
}
