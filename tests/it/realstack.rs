//! The real `rocm-6.2` stack (the recipes and patches embedded in the binary) fetched, locked
//! and patched against stand-ins (issue #7): for every git URL of the `pytorch` + `torchvision`
//! closure (plus `composable-kernel`, the other recipe with a patch), a tiny repository with the
//! recipe's tag, served by `git daemon` on 127.0.0.1 behind the tool's `[url-rewrite]` of
//! `https://github.com/`. Nothing leaves 127.0.0.1.
//!
//! Stand-ins carry no upstream content. Where a recipe has patches, the files they touch are
//! generated from each patch's own pre-image (context and `-` lines of every hunk, at the line the
//! hunk names, the gaps filled with filler lines), so the series applies without offset; the
//! expected result is the same walk with the post-image (context and `+` lines).
//!
//! Pinned revs: five recipes (half, rocm-core, roct, rocr, tensile) pin a real upstream commit
//! id, which no stand-in can have (a commit id is the hash of its content). So:
//! - against the embedded stack, `rocmforge lock` pins the unlocked tags (what a user does) and
//!   `rocmforge fetch` is expected to fail for exactly those five, each with the error that names
//!   the pinned commit, the URL and "check the recipe's `rev`"; everything else is `ok`, and
//!   `patch check` / `source` run on the real series through the lock file;
//! - for a preflight that passes end to end, the test writes a `--recipes` copy of the repo's own
//!   `recipes/` and `patches/` in which the only change is the `rev = ...` line removed from those
//!   five recipes (asserted), so `rocmforge lock` pins them to the stand-ins like the others.
//!
//! Tarballs (`url` sources): the closure has none today, and the test asserts that. A future one
//! would be served from `support::http::HttpServer` behind a rewrite of its URL; its `sha256` pins
//! the real upstream file, which a stand-in cannot reproduce, so it would be handled like a pinned
//! rev (expected failure naming the sha256 mismatch in the embedded run; the `sha256` of the
//! stand-in written into the `--recipes` copy for the passing run).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::support::git::{git, GitDaemon, Repo};
use crate::support::{copy_tree, repo_root, rocmforge};

const STACK: &str = "rocm-6.2";
/// The recipes asked for: the closure of the first two is the preflight; composable-kernel is
/// outside it but carries a patch, and `patch check` covers every recipe with patches.
const ASKED: &[&str] = &["pytorch", "torchvision", "composable-kernel"];
const GITHUB: &str = "https://github.com/";
/// Every command gets this long at most; tiny local repositories take a few seconds in all.
const TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Patches, read independently of the tool's parser: per file, hunks with old/new lines.

#[derive(Debug)]
struct Hunk {
    old_start: usize,
    /// Line of the `@@` header in the patch file (1-based).
    patch_line: usize,
    /// Context and `-` lines, in order (the pre-image).
    old: Vec<String>,
    /// Context and `+` lines, in order (the post-image).
    new: Vec<String>,
    /// `+` lines only.
    added: Vec<String>,
    /// Index into `old` of the first context line.
    first_context: Option<usize>,
}

#[derive(Debug)]
struct FileChange {
    path: String,
    hunks: Vec<Hunk>,
}

fn range(s: &str) -> (usize, usize) {
    match s.split_once(',') {
        Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
        None => (s.parse().unwrap(), 1),
    }
}

/// The `--- a/` / `+++ b/` files of a git-style patch with their hunks (changes to existing
/// files only, which is what this project's patches are).
fn parse_patch(text: &str) -> Vec<FileChange> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<FileChange> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if let Some(p) = l.strip_prefix("+++ b/") {
            assert!(lines[i - 1].starts_with("--- a/"), "patch line {i}: only modified files expected");
            out.push(FileChange { path: p.to_string(), hunks: Vec::new() });
            i += 1;
            continue;
        }
        if l.starts_with("@@ -") && !out.is_empty() {
            let ranges = l.trim_start_matches("@@ -").split(" @@").next().unwrap();
            let (old, new) = ranges.split_once(" +").unwrap();
            let ((old_start, mut old_left), (_, mut new_left)) = (range(old), range(new));
            assert!(old_left > 0, "hunk at patch line {} creates lines from nothing", i + 1);
            let mut h =
                Hunk { old_start, patch_line: i + 1, old: vec![], new: vec![], added: vec![], first_context: None };
            i += 1;
            while old_left > 0 || new_left > 0 {
                let body = lines[i];
                // An empty line is a blank context line.
                let (mark, rest) = if body.is_empty() { (' ', "") } else { (body.as_bytes()[0] as char, &body[1..]) };
                match mark {
                    ' ' => {
                        if h.first_context.is_none() {
                            h.first_context = Some(h.old.len());
                        }
                        h.old.push(rest.into());
                        h.new.push(rest.into());
                        old_left -= 1;
                        new_left -= 1;
                    }
                    '-' => {
                        h.old.push(rest.into());
                        old_left -= 1;
                    }
                    '+' => {
                        h.new.push(rest.into());
                        h.added.push(rest.into());
                        new_left -= 1;
                    }
                    other => panic!("patch line {}: unexpected `{other}` in a hunk", i + 1),
                }
                i += 1;
            }
            out.last_mut().unwrap().hunks.push(h);
            continue;
        }
        i += 1;
    }
    assert!(!out.is_empty() && out.iter().all(|f| !f.hunks.is_empty()), "no hunks parsed");
    out
}

fn filler(path: &str, n: usize) -> String {
    format!("/* rocmforge stand-in: line {n} of {path}, not upstream content */")
}

/// The file a stand-in holds (pre-image) and the file the patch must make of it (post-image):
/// each hunk's lines at the line its header names, filler lines in between and after.
fn images(f: &FileChange) -> (String, String) {
    let (mut pre, mut post): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let mut hunks: Vec<&Hunk> = f.hunks.iter().collect();
    hunks.sort_by_key(|h| h.old_start);
    for h in hunks {
        assert!(pre.len() < h.old_start, "{}: hunks overlap", f.path);
        while pre.len() + 1 < h.old_start {
            let line = filler(&f.path, pre.len() + 1);
            pre.push(line.clone());
            post.push(line);
        }
        pre.extend(h.old.iter().cloned());
        post.extend(h.new.iter().cloned());
    }
    for _ in 0..3 {
        let line = filler(&f.path, pre.len() + 1);
        pre.push(line.clone());
        post.push(line);
    }
    (pre.join("\n") + "\n", post.join("\n") + "\n")
}

fn patch_path(recipe: &str, name: &str) -> PathBuf {
    repo_root().join("patches").join(STACK).join(recipe).join(name)
}

// ---------------------------------------------------------------------------------------------
// The stand-ins and the world the commands run in.

/// A git source of the closure, as the plan shows it.
#[derive(Debug, Clone)]
struct GitSource {
    recipe: String,
    url: String,
    tag: String,
    rev: Option<String>,
    submodules: bool,
    patches: Vec<String>,
    /// The directory the recipe builds from, if not the root.
    subdir: Option<String>,
}

struct StandIn {
    repo: Repo,
    /// The commit the recipe's tag points at.
    tagged: String,
    /// The submodule recorded at `tagged`, if any: (path, commit).
    submodule: Option<(String, String)>,
}

struct World {
    home: PathBuf,
    config: PathBuf,
    /// `--recipes` tree, if the run uses one (else the embedded recipes).
    tree: Option<PathBuf>,
    sources: Vec<GitSource>,
    /// By recipe name.
    stand_ins: BTreeMap<String, StandIn>,
    _daemon: GitDaemon,
    /// Dropped last: the daemon serves from it.
    _dir: tempfile::TempDir,
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The plan of `ASKED` from the embedded recipes (no config: nothing is fetched).
fn embedded_plan(home: &Path) -> Value {
    let out =
        rocmforge(home).args(["--stack", STACK, "plan"]).args(ASKED).arg("--json").timeout(TIMEOUT).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn git_sources(plan: &Value) -> Vec<GitSource> {
    let mut out = Vec::new();
    for e in plan["recipes"].as_array().unwrap() {
        let s = &e["source"];
        let name = e["name"].as_str().unwrap();
        match s["kind"].as_str().unwrap() {
            "git" => {
                let url = s["url"].as_str().unwrap().to_string();
                assert!(url.starts_with(GITHUB), "{name}: {url} is not behind the {GITHUB} rewrite: add a rewrite (tests never leave 127.0.0.1)");
                out.push(GitSource {
                    recipe: name.to_string(),
                    url,
                    tag: s["tag"].as_str().unwrap_or_else(|| panic!("{name}: git source without a tag")).to_string(),
                    rev: s["rev"].as_str().map(String::from),
                    submodules: s["submodules"].as_bool().unwrap(),
                    patches: e["patches"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect(),
                    subdir: s["subdir"].as_str().map(String::from),
                });
            }
            "from" | "none" => {}
            other => panic!(
                "{name}: `{other}` source: this test serves only git stand-ins; serve tarballs from support::http::HttpServer behind a rewrite of their URL (see the module comment on sha256 pins)"
            ),
        }
    }
    out
}

/// One stand-in repository per git source, under `base/<path of the github URL>`.
fn make_stand_ins(base: &Path, sources: &[GitSource]) -> BTreeMap<String, StandIn> {
    let mut out = BTreeMap::new();
    let mut urls: BTreeMap<&str, &str> = BTreeMap::new();
    for s in sources {
        assert!(urls.insert(&s.url, &s.recipe).is_none(), "two recipes share {}: one stand-in would serve both", s.url);
        let rel = s.url.strip_prefix(GITHUB).unwrap();
        let repo = Repo::init(base.join(rel));
        repo.write(
            "README.rocmforge-stand-in",
            &format!("Stand-in for {} ({}), made by rocmforge's tests.\n", s.url, s.recipe),
        );
        // The directory the recipe builds from (`subdir`) exists upstream: the preflight checks.
        if let Some(sub) = &s.subdir {
            repo.write(&format!("{sub}/README.rocmforge-stand-in"), "the recipe's subdir\n");
        }
        let changes: Vec<FileChange> = s
            .patches
            .iter()
            .flat_map(|p| parse_patch(&std::fs::read_to_string(patch_path(&s.recipe, p)).unwrap()))
            .collect();
        // With submodules, the submodule is `third_party/<name>` of the first patched file under
        // third_party/ (pytorch's bundled composable_kernel), so the series patches a file
        // inside a submodule as it does upstream; else a stand-in of its own.
        let sub_dir = s
            .submodules
            .then(|| {
                changes.iter().find_map(|f| {
                    let rest = f.path.strip_prefix("third_party/")?;
                    Some(format!("third_party/{}", rest.split('/').next()?))
                })
            })
            .flatten()
            .unwrap_or_else(|| "third_party/stand-in".to_string());
        let mut sub_files = Vec::new();
        for f in &changes {
            match f.path.strip_prefix(&format!("{sub_dir}/")) {
                Some(inner) if s.submodules => sub_files.push((inner.to_string(), images(f).0)),
                _ => {
                    repo.write(&f.path, &images(f).0);
                }
            }
        }
        let mut submodule = None;
        if s.submodules {
            // A submodule of its own (also behind the rewrite), so the recursive fetch runs.
            let sub_url = format!("{}-third-party.git", s.url.trim_end_matches(".git"));
            let sub = Repo::init(base.join(sub_url.strip_prefix(GITHUB).unwrap()));
            sub.write("README", &format!("third-party stand-in of {}\n", s.recipe));
            for (path, text) in &sub_files {
                sub.write(path, text);
            }
            let c = sub.commit("third party");
            repo.submodule(&sub_dir, &sub_url, &c);
            submodule = Some((sub_dir, c));
        }
        let tagged = repo.commit(&format!("{} at {}", s.recipe, s.tag));
        repo.tag(&s.tag, &tagged);
        // Work after the tag: the branch tip is not what gets checked out.
        repo.write("README.rocmforge-stand-in", "later work on the branch\n").commit("after the tag");
        out.insert(s.recipe.clone(), StandIn { repo, tagged, submodule });
    }
    out
}

impl World {
    /// Stand-ins for the embedded stack's closure; `copy_without_revs`: also write a `--recipes`
    /// copy of the repo's tree with the pinned recipes' `rev` lines removed, and run against it.
    fn new(copy_without_revs: bool) -> World {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let sources = git_sources(&embedded_plan(&home));
        let base = dir.path().join("srv");
        let stand_ins = make_stand_ins(&base, &sources);
        let daemon = GitDaemon::start(&base);
        let config = dir.path().join("config.toml");
        std::fs::write(&config, format!("[url-rewrite]\n\"{GITHUB}\" = \"{}\"\n", daemon.url(""))).unwrap();
        let tree = copy_without_revs.then(|| {
            let tree = dir.path().join("tree");
            copy_tree(&repo_root().join("recipes"), &tree.join("recipes"));
            copy_tree(&repo_root().join("patches"), &tree.join("patches"));
            for s in sources.iter().filter(|s| s.rev.is_some()) {
                let f = tree.join(format!("recipes/{STACK}/{}.toml", s.recipe));
                let before = std::fs::read_to_string(&f).unwrap();
                let after: String =
                    before.lines().filter(|l| !l.starts_with("rev = ")).map(|l| format!("{l}\n")).collect();
                assert_eq!(
                    before.lines().count(),
                    after.lines().count() + 1,
                    "{}: exactly one `rev` line removed",
                    s.recipe
                );
                std::fs::write(&f, after).unwrap();
            }
            tree
        });
        World { home, config, tree, sources, stand_ins, _daemon: daemon, _dir: dir }
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        let mut c = rocmforge(&self.home);
        c.env("ROCMFORGE_CONFIG", &self.config).args(["--stack", STACK]);
        if let Some(t) = &self.tree {
            c.arg("--recipes").arg(t);
        }
        c.args(args).timeout(TIMEOUT).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args);
        assert!(out.status.success(), "rocmforge {args:?} failed:\n{}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    }

    fn pinned(&self) -> BTreeSet<&str> {
        self.sources.iter().filter(|s| s.rev.is_some()).map(|s| s.recipe.as_str()).collect()
    }

    fn unlocked(&self) -> Vec<&str> {
        self.sources.iter().filter(|s| s.rev.is_none()).map(|s| s.recipe.as_str()).collect()
    }

    /// The recipes `rocmforge fetch pytorch torchvision` goes through (its closure).
    fn fetch_closure(&self) -> Vec<String> {
        let out = self.cmd(&["plan", "pytorch", "torchvision", "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        plan["recipes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["source"]["kind"] != "none")
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// What `fetch` prints for a recipe whose stand-in it verified.
    fn identity(&self, recipe: &str) -> String {
        let s = &self.stand_ins[recipe];
        match &s.submodule {
            Some((p, c)) => format!("git:{} {p}={c}", s.tagged),
            None => format!("git:{}", s.tagged),
        }
    }
}

/// `ok`/`FAIL` lines of `fetch` / `patch check`: recipe -> (status, rest of the line).
fn status_lines(stdout: &str) -> BTreeMap<String, (String, String)> {
    stdout
        .lines()
        .filter(|l| l.starts_with("ok ") || l.starts_with("FAIL "))
        .map(|l| {
            let mut w = l.split_whitespace();
            let st = w.next().unwrap().to_string();
            let name = w.next().unwrap().to_string();
            (name, (st, w.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// The prepared tree holds exactly the post-image of every file the series touches.
fn assert_patched(tree: &Path, recipe: &str, series: &[String]) {
    for p in series {
        let patch = std::fs::read_to_string(patch_path(recipe, p)).unwrap();
        for f in parse_patch(&patch) {
            let got = std::fs::read_to_string(tree.join(&f.path)).unwrap();
            assert_eq!(got, images(&f).1, "{recipe}: {} after {p}", f.path);
            for h in &f.hunks {
                for a in &h.added {
                    assert!(got.lines().any(|l| l == a), "{recipe}: `{a}` of {p} missing from {}", f.path);
                }
            }
        }
    }
}

#[test]
fn embedded_stack_locks_fetches_and_patches_its_stand_ins() {
    let w = World::new(false);
    let pinned = w.pinned();
    assert_eq!(
        pinned,
        BTreeSet::from(["half", "rocm-core", "rocr", "roct", "tensile"]),
        "the recipes that pin a rev changed: update the module comment"
    );

    // lock: every unlocked tag of the closure resolves to its stand-in's tagged commit (not the
    // branch tip), in <state-dir>/locks for the embedded recipes.
    let unlocked = w.unlocked();
    let mut args = vec!["lock"];
    args.extend(unlocked.iter());
    let out = w.ok(&args);
    let lock_file = w.home.join("state/rocmforge/locks/rocm-6.2.lock");
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(&lock_file).unwrap()).unwrap();
    let pins: BTreeMap<&str, &str> = lock["pin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["recipe"].as_str().unwrap(), p["rev"].as_str().unwrap()))
        .collect();
    assert_eq!(
        pins.keys().copied().collect::<BTreeSet<_>>(),
        unlocked.iter().copied().collect::<BTreeSet<_>>(),
        "{out}"
    );
    for (r, rev) in &pins {
        assert_eq!(*rev, w.stand_ins[*r].tagged, "{r}");
        let tag = &w.sources.iter().find(|s| s.recipe == *r).unwrap().tag;
        assert!(out.contains(&format!("{r}: {tag} -> {}", &rev[..12])), "{out}");
    }

    // fetch pytorch torchvision: the real preflight. Every source fetched through the rewrite and
    // verified; the five pinned revs cannot exist in a stand-in, and each fails saying so.
    let closure = w.fetch_closure();
    let out = w.cmd(&["fetch", "pytorch", "torchvision"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let lines = status_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        lines.keys().cloned().collect::<BTreeSet<_>>(),
        closure.iter().cloned().collect::<BTreeSet<_>>(),
        "{}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{} of {} sources and patch series failed:", pinned.len(), closure.len())),
        "{stderr}"
    );
    for (name, (st, rest)) in &lines {
        let s = w.sources.iter().find(|s| &s.recipe == name);
        match s {
            Some(s) if s.rev.is_some() => {
                let rev = s.rev.as_deref().unwrap();
                assert_eq!(st, "FAIL", "{name}");
                assert!(
                    stderr.contains(&format!(
                        "  - {name}: commit {rev} is not in `{}` (no branch or tag of the repository contains it): check the recipe's `rev`",
                        s.url
                    )),
                    "{name}: {stderr}"
                );
            }
            Some(_) => assert_eq!((st.as_str(), rest.as_str()), ("ok", w.identity(name).as_str()), "{name}"),
            // Recipes built from another recipe's tree (llvm, comgr, ... from llvm-project).
            None => assert_eq!((st.as_str(), rest.as_str()), ("ok", "from:llvm-project"), "{name}"),
        }
    }
    // pytorch's stand-in submodule came along (its own mirror, through the same rewrite).
    assert!(lines["pytorch"].1.contains("third_party/composable_kernel="), "{:?}", lines["pytorch"]);
    // miopen's series was checked in the preflight (it is in the closure).
    assert_eq!(lines["miopen"].0, "ok");

    // patch check: every recipe with patches, on the locked stand-ins (pytorch's patches a file
    // in its composable_kernel submodule).
    let out = w.ok(&["patch", "check"]);
    let lines = status_lines(&out);
    assert_eq!(
        lines.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["composable-kernel", "miopen", "pytorch"],
        "{out}"
    );
    assert!(lines.values().all(|(st, _)| st == "ok"), "{out}");
    assert!(out.contains("all 3 patch series ok"), "{out}");

    // source: the patched work trees hold exactly the post-images, with the '+' lines in.
    for recipe in ["miopen", "composable-kernel", "pytorch"] {
        let src = PathBuf::from(w.ok(&["source", recipe]).trim());
        assert_eq!(
            git(&src, &["rev-parse", "HEAD"]),
            w.stand_ins[recipe].tagged,
            "{recipe}: the locked commit is checked out"
        );
        let series = &w.sources.iter().find(|s| s.recipe == recipe).unwrap().patches;
        assert_patched(&src, recipe, series);
    }
    let miopen = PathBuf::from(w.ok(&["source", "miopen"]).trim());
    let h = std::fs::read_to_string(miopen.join("src/kernels/batchnorm_functions.h")).unwrap();
    assert!(h.contains("#define MIO_BN_GFX101X 0") && h.contains("(defined(MIO_BN_GFX101X) && MIO_BN_GFX101X)"), "{h}");
    let ck = PathBuf::from(w.ok(&["source", "composable-kernel"]).trim());
    assert!(std::fs::read_to_string(ck.join("include/ck/ck.hpp"))
        .unwrap()
        .contains("#elif defined(__gfx101__) || defined(__gfx103__)"));

    // Negative: upstream moves the tag to a commit whose file no longer matches the patch's
    // context. `lock --update` reports the move; `patch check` names the patch, file and hunk.
    let series = &w.sources.iter().find(|s| s.recipe == "miopen").unwrap().patches;
    let patch_name = &series[0];
    let files = parse_patch(&std::fs::read_to_string(patch_path("miopen", patch_name)).unwrap());
    let f = files.iter().find(|f| f.hunks.len() > 1).expect("a file with two hunks");
    let h2 = &f.hunks[1];
    let ctx = h2.first_context.expect("hunk #2 has context");
    let (pre, _) = images(f);
    let mut broken: Vec<String> = pre.lines().map(String::from).collect();
    let at = h2.old_start - 1 + ctx;
    broken[at] = format!("{} /* changed upstream */", broken[at]);
    let stand_in = &w.stand_ins["miopen"];
    stand_in.repo.write(&f.path, &(broken.join("\n") + "\n"));
    let moved = stand_in.repo.commit("upstream edits the context");
    stand_in.repo.tag("rocm-6.2.4", &moved);
    let out = w.ok(&["lock", "--update", "miopen"]);
    assert!(out.contains(&format!("miopen: rocm-6.2.4 moved {} -> {}", &stand_in.tagged[..8], &moved[..8])), "{out}");
    let out = w.cmd(&["patch", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let lines = status_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(lines["miopen"].0, "FAIL");
    assert_eq!(
        (lines["composable-kernel"].0.as_str(), lines["pytorch"].0.as_str()),
        ("ok", "ok"),
        "one failure does not hide the others"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "  - miopen: `{patch_name}` does not apply: hunk #2 of `{}` (patch line {}, file line {}) does not match: line {} is `{}`, the patch expects `{}`",
        f.path,
        h2.patch_line,
        h2.old_start,
        at + 1,
        broken[at],
        h2.old[ctx]
    );
    assert!(stderr.contains("1 of 3 patch series failed:") && stderr.contains(&want), "want:\n{want}\ngot:\n{stderr}");
}

#[test]
fn real_tree_with_pins_left_to_lock_passes_the_whole_preflight() {
    let w = World::new(true);
    let tree = w.tree.clone().unwrap();
    // Before lock the closure is blocked on unlocked sources; the copy differs from the repo's
    // tree only in the five `rev` lines (World::new asserted that).
    let plan: Value = serde_json::from_str(&w.ok(&["plan", "pytorch", "torchvision", "--json"])).unwrap();
    assert!(plan["recipes"].as_array().unwrap().iter().any(|e| e["state"] == "blocked"));

    // Plain `lock`, as a user runs it: every unlocked recipe of the stack.
    let out = w.ok(&["lock"]);
    let lock = std::fs::read_to_string(tree.join("recipes/rocm-6.2/rocmforge.lock")).unwrap();
    for s in &w.sources {
        assert!(
            lock.contains(&format!("recipe = \"{}\"\n", s.recipe)) && lock.contains(&w.stand_ins[&s.recipe].tagged),
            "{}: {lock}\n{out}",
            s.recipe
        );
    }

    let closure = w.fetch_closure();
    let out = w.ok(&["fetch", "pytorch", "torchvision"]);
    let lines = status_lines(&out);
    assert_eq!(lines.len(), closure.len(), "{out}");
    for (name, (st, rest)) in &lines {
        assert_eq!(st, "ok", "{name}: {out}");
        if w.stand_ins.contains_key(name) {
            assert_eq!(rest, &w.identity(name), "{name}");
        }
    }
    assert!(out.contains(&format!("all {} sources and patch series ok", closure.len())), "{out}");
    let out = w.ok(&["patch", "check"]);
    assert!(out.contains("all 3 patch series ok"), "{out}");

    // Nothing in the closure is blocked any more: it is ready to build.
    let plan: Value = serde_json::from_str(&w.ok(&["plan", "pytorch", "torchvision", "--json"])).unwrap();
    for e in plan["recipes"].as_array().unwrap() {
        assert_eq!(e["locked"], true, "{}", e["name"]);
        assert_ne!(e["state"], "blocked", "{}: {}", e["name"], e["reason"]);
    }
    let miopen = PathBuf::from(w.ok(&["source", "miopen"]).trim());
    assert_patched(&miopen, "miopen", &w.sources.iter().find(|s| s.recipe == "miopen").unwrap().patches);
}
