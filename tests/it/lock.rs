//! `rocmforge lock` (unlocked git recipes pinned through a lock file, over a real git daemon
//! behind a github.com URL rewrite) and `--rocm-path` (components of an installed ROCm used,
//! not built).

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

use crate::support::archive::{gz, tar_of};
use crate::support::git::{GitDaemon, Repo};
use crate::support::http::HttpServer;
use crate::support::rocmforge;

const STACK: &str = "[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\ndefault = true\n";

fn script(name: &str, extra: &str, steps: &[&str]) -> String {
    let steps: Vec<String> = steps.iter().map(|s| format!("  {s:?},")).collect();
    format!(
        "[package]\nname = \"{name}\"\nversion = \"1.0\"\nsummary = \"{name}\"\n{extra}\n[build]\nsystem = \"script\"\nsteps = [\n  \"mkdir -p {{stage}}/lib\",\n  \"echo {name} > {{stage}}/lib/{name}.txt\",\n  \"echo built >> {{prefix}}/../{name}.runs\",\n{}\n]\n\n[targets]\ngpu = false\n",
        steps.join("\n")
    )
}

/// A recipe tree in `root`: `app` (from `app_source`, a `[source]` table or "") needs `hip`,
/// `blas` and `smi`, which an installed ROCm may provide.
fn write_tree(root: &Path, app_source: &str) {
    let d = root.join("recipes/t");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("stack.toml"), STACK).unwrap();
    std::fs::write(d.join("hip.toml"), script("hip", "[external]\ncmake-package = \"hip\"\n", &[])).unwrap();
    std::fs::write(
        d.join("blas.toml"),
        script("blas", "[external]\ncmake-package = \"rocblas\"\nfiles = [\"include/rocblas/rocblas.h\"]\n", &[]),
    )
    .unwrap();
    std::fs::write(d.join("smi.toml"), script("smi", "[external]\nfiles = [\"bin/rocm-smi\"]\n", &[])).unwrap();
    std::fs::write(
        d.join("app.toml"),
        script(
            "app",
            &format!("{app_source}\n[dependencies]\nbuild = [\"hip\", \"blas\", \"smi\"]\n"),
            &[
                "mkdir -p {stage}/share",
                "echo \"$CMAKE_PREFIX_PATH\" > {stage}/share/cmake-prefix-path.txt",
                "if [ -e {src}/app.txt ]; then cp {src}/app.txt {stage}/share/; fi",
            ],
        ),
    )
    .unwrap();
}

struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn tree(&self) -> PathBuf {
        self.dir.path().join("tree")
    }
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = rocmforge(&self.home());
        c.env("ROCMFORGE_CONFIG", self.dir.path().join("config.toml"));
        c.arg("--recipes").arg(self.tree()).args(args);
        c
    }
    fn plan(&self, extra: &[&str]) -> Value {
        let mut args = vec!["plan", "app", "--json"];
        args.extend_from_slice(extra);
        let out = self.cmd(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
    fn lock_text(&self) -> String {
        std::fs::read_to_string(self.tree().join("recipes/t/rocmforge.lock")).unwrap()
    }
}

fn entry<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["recipes"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("{name} in {plan}"))
}

fn world(config: &str, app_source: &str) -> World {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    write_tree(&dir.path().join("tree"), app_source);
    World { dir }
}

#[test]
fn lock_pins_unlocked_tags_and_update_reports_moves() {
    let git_base = tempfile::tempdir().unwrap();
    let repo = Repo::init(git_base.path().join("test/app.git"));
    let c1 = repo.write("app.txt", "one\n").commit("one");
    repo.tag("v1", &c1);
    let daemon = GitDaemon::start(git_base.path());
    let w = world(
        &format!("[url-rewrite]\n\"https://github.com/\" = \"{}\"\n", daemon.url("")),
        "[source]\ngit = \"https://github.com/test/app.git\"\ntag = \"v1\"\n",
    );

    // Unpinned: the plan says so and `build --locked` refuses, naming the source and the fix.
    let plan = w.plan(&[]);
    assert_eq!(entry(&plan, "app")["locked"], false);
    assert_eq!(entry(&plan, "app")["state"], "blocked");
    assert_eq!(entry(&plan, "app")["pin"], Value::Null);
    let prefix = w.home().join("prefix");
    let out = w.cmd(&["build", "app", "--locked", "--prefix", prefix.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--locked: 1 recipe(s) are not pinned")
            && err.contains("  - app: git `https://github.com/test/app.git` tag `v1` has no `rev`")
            && err.contains("rocmforge lock"),
        "{err}"
    );
    assert!(!w.tree().join("recipes/t/rocmforge.lock").exists());

    // lock writes the lock file beside the recipes.
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = w.lock_text();
    let lock: toml::Value = toml::from_str(&text).unwrap();
    let pins = lock["pin"].as_array().unwrap();
    assert_eq!(pins.len(), 1, "{text}");
    assert_eq!(pins[0]["recipe"].as_str(), Some("app"));
    assert_eq!(pins[0]["url"].as_str(), Some("https://github.com/test/app.git"));
    assert_eq!(pins[0]["tag"].as_str(), Some("v1"));
    assert_eq!(pins[0]["rev"].as_str(), Some(c1.as_str()));

    // Now the plan shows it locked at that commit, and build goes through.
    let plan = w.plan(&[]);
    assert_eq!(entry(&plan, "app")["locked"], true);
    assert_eq!(entry(&plan, "app")["source"]["rev"], c1.as_str());
    assert_eq!(entry(&plan, "app")["state"], "not-built");
    let text_plan = String::from_utf8(w.cmd(&["plan", "app"]).output().unwrap().stdout).unwrap();
    assert!(text_plan.contains(&format!("@ v1 ({})", &c1[..12])), "{text_plan}");
    let out = w.cmd(&["build", "app", "--prefix", prefix.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(prefix.join("share/app.txt")).unwrap(), "one\n");

    // The tag moves upstream: plain `lock` keeps the pin, `lock --update` reports and takes it.
    let c2 = repo.write("app.txt", "two\n").commit("two");
    repo.tag("v1", &c2);
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success());
    assert!(w.lock_text().contains(&c1));
    let out = w.cmd(&["lock", "--update"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("app: v1 moved {} -> {}", &c1[..8], &c2[..8])), "{stdout}");
    assert!(w.lock_text().contains(&c2) && !w.lock_text().contains(&c1));
    assert_eq!(entry(&w.plan(&[]), "app")["source"]["rev"], c2.as_str());
}

#[test]
fn lock_entry_for_a_changed_recipe_is_ignored_and_pruned() {
    let git_base = tempfile::tempdir().unwrap();
    let repo = Repo::init(git_base.path().join("test/app.git"));
    let c1 = repo.write("app.txt", "one\n").commit("one");
    repo.tag("v1", &c1);
    repo.tag("v2", &c1);
    let daemon = GitDaemon::start(git_base.path());
    let w = world(
        &format!("[url-rewrite]\n\"https://github.com/\" = \"{}\"\n", daemon.url("")),
        "[source]\ngit = \"https://github.com/test/app.git\"\ntag = \"v1\"\n",
    );
    assert!(w.cmd(&["lock"]).output().unwrap().status.success());
    // The recipe now names another tag: the old pin does not apply.
    let app = w.tree().join("recipes/t/app.toml");
    std::fs::write(&app, std::fs::read_to_string(&app).unwrap().replace("tag = \"v1\"", "tag = \"v2\"")).unwrap();
    assert_eq!(entry(&w.plan(&[]), "app")["locked"], false);
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success());
    let text = w.lock_text();
    assert!(text.contains("tag = \"v2\"") && !text.contains("tag = \"v1\""), "{text}");
    assert_eq!(entry(&w.plan(&[]), "app")["locked"], true);
}

#[test]
fn lock_refuses_offline_and_unknown_recipes_before_touching_the_lock_file() {
    let w = world("", "[source]\ngit = \"https://github.com/test/app.git\"\ntag = \"v1\"\n");
    for (args, want) in [
        (
            &["--offline", "lock"][..],
            "error: `rocmforge lock` resolves tags over the network; it cannot run with --offline\n",
        ),
        (
            &["--offline", "lock", "nope"][..],
            "error: `rocmforge lock` resolves tags over the network; it cannot run with --offline\n",
        ),
        (&["lock", "app", "nope"][..], "error: unknown recipe `nope` in stack\n"),
    ] {
        let out = w.cmd(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
    }
    assert!(!w.tree().join("recipes/t/rocmforge.lock").exists());
}

fn fake_rocm(root: &Path, version: &str) {
    std::fs::create_dir_all(root.join("lib/cmake/hip")).unwrap();
    std::fs::create_dir_all(root.join("lib/cmake/rocblas")).unwrap(); // but no rocblas.h
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::write(root.join("bin/rocm-smi"), "#!/bin/sh\n").unwrap();
    std::fs::create_dir_all(root.join(".info")).unwrap();
    std::fs::write(root.join(".info/version"), format!("{version}-120\n")).unwrap();
}

#[test]
fn rocm_path_marks_matching_recipes_external_and_build_skips_them() {
    let w = world("", "");
    let rocm = w.dir.path().join("rocm");
    fake_rocm(&rocm, "6.2.4");
    let r = rocm.to_str().unwrap();

    let without = w.plan(&[]);
    for n in ["hip", "blas", "smi", "app"] {
        assert_eq!(entry(&without, n)["state"], "not-built", "{n}");
    }
    let plan = w.plan(&["--rocm-path", r]);
    assert_eq!(entry(&plan, "hip")["state"], "external");
    assert_eq!(entry(&plan, "hip")["reason"], format!("provided by {r} (hip 6.2.4, .info/version): lib/cmake/hip"));
    assert_eq!(entry(&plan, "smi")["state"], "external");
    assert_eq!(entry(&plan, "smi")["reason"], format!("provided by {r} (smi 6.2.4, .info/version): bin/rocm-smi"));
    assert_eq!(entry(&plan, "blas")["state"], "not-built", "rocblas.h is missing");
    assert_eq!(entry(&plan, "app")["state"], "not-built");

    // The environment variable does the same.
    let out = w.cmd(&["plan", "app", "--json"]).env("ROCMFORGE_ROCM_PATH", &rocm).output().unwrap();
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(entry(&p, "hip")["state"], "external");

    // Dependents' keys follow the installed ROCm's version.
    let key = |p: &Value| entry(p, "app")["key"].as_str().unwrap().to_string();
    assert_ne!(key(&plan), key(&without));
    std::fs::write(rocm.join(".info/version"), "6.2.5-1\n").unwrap();
    let newer = w.plan(&["--rocm-path", r]);
    assert_ne!(key(&newer), key(&plan));
    assert!(entry(&newer, "hip")["reason"].as_str().unwrap().contains("(hip 6.2.5, .info/version)"));

    // build skips the external ones and finds the ROCm after the stack prefix.
    let prefix = w.home().join("p/prefix");
    let out = w.cmd(&["build", "app", "--rocm-path", r, "--prefix", prefix.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let runs = |n: &str| w.home().join(format!("p/{n}.runs")).exists();
    assert!(!runs("hip") && !runs("smi"), "external recipes were built");
    assert!(runs("blas") && runs("app"));
    let cpp = std::fs::read_to_string(prefix.join("share/cmake-prefix-path.txt")).unwrap();
    assert_eq!(cpp.trim(), format!("{}:{r}", prefix.display()));
}

#[test]
fn embedded_recipes_lock_into_the_state_dir() {
    // Every shipped recipe is pinned in its file: `lock` on the embedded stack pins nothing and
    // writes its (empty) lock into the state dir, not into the binary's recipes.
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let run = |args: &[&str]| rocmforge(&home).args(args).output().unwrap();
    let out = run(&["--stack", "rocm-6.2", "lock"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = home.join("state/rocmforge/locks/rocm-6.2.lock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("wrote {}: 0 new, 0 moved, 0 unchanged, 0 pruned", path.display())), "{stdout}");
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(lock.get("pin").and_then(|p| p.as_array()).is_none_or(|p| p.is_empty()), "{lock}");
    // An unknown recipe is bad usage.
    assert_eq!(run(&["--stack", "rocm-6.2", "lock", "nosuch"]).status.code(), Some(2));
}

/// As cargo writes Cargo.lock: the first `build` pins what its closure leaves unpinned (a git
/// tag without `rev`, a url without `sha256`), prints each pin and writes the lock file; with
/// `--locked` (build, fetch, plan) nothing new is pinned and every unpinned source is named.
#[test]
fn build_pins_unpinned_sources_and_locked_refuses_to() {
    let git_base = tempfile::tempdir().unwrap();
    let repo = Repo::init(git_base.path().join("test/app.git"));
    let c1 = repo.write("app.txt", "from git\n").commit("one");
    repo.tag("v1", &c1);
    repo.write("app.txt", "after the tag\n").commit("two");
    let daemon = GitDaemon::start(git_base.path());
    let http = HttpServer::start();
    let tarball = gz(&tar_of(&[
        ("data-1.0/", tar::EntryType::Directory, None, b""),
        ("data-1.0/data.txt", tar::EntryType::Regular, None, b"from the tarball\n"),
    ]));
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&tarball));
    http.add("dl/data-1.0.tar.gz", tarball);
    let config = format!(
        "[url-rewrite]\n\"https://github.com/\" = \"{}\"\n\"https://example.org/\" = \"{}\"\n",
        daemon.url(""),
        http.url("dl/")
    );
    let w = world(&config, "");
    let d = w.tree().join("recipes/t");
    std::fs::write(
        d.join("data.toml"),
        script(
            "data",
            "[source]\nurl = \"https://example.org/data-1.0.tar.gz\"\n",
            &["mkdir -p {stage}/share", "cp {src}/data.txt {stage}/share/"],
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("app.toml"),
        script(
            "app",
            "[source]\ngit = \"https://github.com/test/app.git\"\ntag = \"v1\"\n\n[dependencies]\nbuild = [\"data\"]\n",
            &["mkdir -p {stage}/share", "cp {src}/app.txt {stage}/share/"],
        ),
    )
    .unwrap();
    let prefix = w.home().join("prefix");
    let p = prefix.to_str().unwrap();
    let lock_path = w.tree().join("recipes/t/rocmforge.lock");

    // --locked: refused, each unpinned source named, nothing downloaded, no lock file.
    for args in
        [&["build", "app", "--locked", "--prefix", p][..], &["fetch", "app", "--locked"], &["plan", "app", "--locked"]]
    {
        let out = w.cmd(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--locked: 2 recipe(s) are not pinned and --locked pins nothing new"), "{args:?}: {err}");
        assert!(err.contains("  - data: url `https://example.org/data-1.0.tar.gz` has no `sha256`"), "{err}");
        assert!(err.contains("  - app: git `https://github.com/test/app.git` tag `v1` has no `rev`"), "{err}");
        assert!(err.contains(&lock_path.display().to_string()), "{err}");
    }
    assert!(!lock_path.exists());
    assert_eq!(http.with(|s| s.requests.len()), 0);

    // build: pins both (printed), writes the lock file, builds from the pinned sources.
    let out = w.cmd(&["build", "app", "--prefix", p]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("pinned app: v1 -> {}", &c1[..12])), "{err}");
    assert!(err.contains(&format!("pinned data: sha256 {}", &sha[..12])), "{err}");
    assert!(err.contains(&format!("wrote 2 pin(s) to {}", lock_path.display())), "{err}");
    let lock: toml::Value = toml::from_str(&w.lock_text()).unwrap();
    let pins = lock["pin"].as_array().unwrap();
    assert_eq!(pins.len(), 2, "{}", w.lock_text());
    let pin = |r: &str| pins.iter().find(|p| p["recipe"].as_str() == Some(r)).unwrap().clone();
    assert_eq!(pin("app")["rev"].as_str(), Some(c1.as_str()));
    assert_eq!(pin("data")["sha256"].as_str(), Some(sha.as_str()));
    assert_eq!(pin("data").get("rev"), None);
    assert_eq!(std::fs::read_to_string(prefix.join("share/app.txt")).unwrap(), "from git\n");
    assert_eq!(std::fs::read_to_string(prefix.join("share/data.txt")).unwrap(), "from the tarball\n");
    // Pinning kept the download in the cache: the build did not fetch it again.
    assert_eq!(http.with(|s| s.requests.len()), 1);

    // plan shows each pin and where it came from.
    let plan = w.plan(&[]);
    assert_eq!(entry(&plan, "app")["pin"]["pin"], format!("rev {c1}"));
    assert_eq!(entry(&plan, "app")["pin"]["from"]["kind"], "lock-file");
    assert_eq!(entry(&plan, "data")["pin"]["pin"], format!("sha256 {sha}"));
    assert_eq!(entry(&plan, "data")["pin"]["from"]["path"], lock_path.display().to_string());
    let text = String::from_utf8(w.cmd(&["plan", "app"]).output().unwrap().stdout).unwrap();
    assert!(
        text.contains(&format!("     pin:     sha256 {sha} (lock file {}; no witness named)\n", lock_path.display())),
        "{text}"
    );

    // Now everything is pinned: --locked goes through and pins nothing.
    for args in [&["plan", "app", "--locked"][..], &["build", "app", "--locked", "--prefix", p]] {
        let out = w.cmd(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(!err.contains("pinned"), "{err}");
    }
    // A recipe that pins itself is shown so, with its witness.
    std::fs::write(
        d.join("data.toml"),
        script(
            "data",
            &format!("[source]\nurl = \"https://example.org/data-1.0.tar.gz\"\nsha256 = \"{sha}\"\nwitness = \"the test made it\"\n"),
            &["mkdir -p {stage}/share", "cp {src}/data.txt {stage}/share/"],
        ),
    )
    .unwrap();
    let text = String::from_utf8(w.cmd(&["plan", "app"]).output().unwrap().stdout).unwrap();
    assert!(text.contains(&format!("     pin:     sha256 {sha} (recipe; witness: the test made it)\n")), "{text}");
}

/// A pin's digest the build could never match (not 64, or 40, lowercase hex) is refused when the
/// lock file is read, naming its line, not blamed later on the download.
#[test]
fn a_malformed_digest_in_the_lock_file_is_refused_at_its_line() {
    let source = "[source]\nurl = \"https://example.org/app-1.0.tar.gz\"\n";
    for (field, value, pin) in [
        (
            "sha256",
            "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "url = \"https://example.org/app-1.0.tar.gz\"\n",
        ),
        ("sha256", "e3b0c442", "url = \"https://example.org/app-1.0.tar.gz\"\n"),
        ("rev", "v1", "url = \"https://github.com/test/app.git\"\ntag = \"v1\"\n"),
    ] {
        let w = world(
            "",
            if field == "rev" { "[source]\ngit = \"https://github.com/test/app.git\"\ntag = \"v1\"\n" } else { source },
        );
        let lock = w.tree().join("recipes/t/rocmforge.lock");
        std::fs::write(&lock, format!("# by hand\n[[pin]]\nrecipe = \"app\"\n{pin}{field} = \"{value}\"\n")).unwrap();
        let line = if field == "rev" { 6 } else { 5 };
        let out = w.cmd(&["plan", "app"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{field} = {value}: {err}");
        assert!(
            err.contains(&format!(
                "lock file {}:{line}: pin of `app`: `{field}` must be {} lowercase hex characters, got `{value}`",
                lock.display(),
                if field == "rev" { 40 } else { 64 }
            )),
            "{err}"
        );
        assert!(err.contains("run `rocmforge lock` again"), "{err}");
    }
}

/// A stack whose prebuilt wheel is named by project and version in a PEP 503 index (no file
/// name): `[source] index`, `project`, `version`; Python 3.11, glibc floor 2.28.
const WHEEL_STACK: &str = "[stack]\nname = \"w\"\nrocm-version = \"7.10\"\nsummary = \"w\"\ndefault-targets = [\"gfx1010\"]\ndefault = true\npython = \"3.11\"\nglibc = \"2.28\"\nindex-path = \"w\"\n";

/// An index shaped like AMD's: relative links with `#sha256=`, several Pythons, platforms,
/// versions and local labels of torch; `(file, bytes, linked with a digest)`.
struct WheelIndex {
    home: tempfile::TempDir,
    http: HttpServer,
}

impl WheelIndex {
    fn new(version: &str) -> WheelIndex {
        let home = tempfile::tempdir().unwrap();
        let http = HttpServer::start();
        let d = home.path().join("tree/recipes/w");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("stack.toml"), WHEEL_STACK).unwrap();
        std::fs::write(
            d.join("torch.toml"),
            format!(
                "[package]\nname = \"torch\"\nversion = \"2.9.1\"\nsummary = \"t\"\n\n[source]\nindex = \"https://repo.example.invalid/whl/\"\nproject = \"torch\"\nversion = \"{version}\"\n\n[build]\nsystem = \"prebuilt-wheel\"\n\n[targets]\ngpu = false\n"
            ),
        )
        .unwrap();
        std::fs::write(
            home.path().join("config.toml"),
            format!("[url-rewrite]\n\"https://repo.example.invalid/\" = \"{}\"\n", http.url("")),
        )
        .unwrap();
        WheelIndex { home, http }
    }

    /// Serves `files` (version, tags, with a digest) on torch's page, the wheels under `files/`.
    fn serve(&self, files: &[(&str, &str, bool)]) -> Vec<(String, Vec<u8>)> {
        let mut page = String::from("<!DOCTYPE html>\n<html><body><h1>Links for torch</h1>\n");
        let mut out = Vec::new();
        for (version, tag, digest) in files {
            let (name, bytes) =
                crate::support::wheel::make("torch", version, tag, "torch", &format!("{version} {tag}"));
            let served = name.replace('+', "%2B");
            self.http.add(&format!("whl/files/{served}"), bytes.clone());
            let frag =
                if *digest { format!("#sha256={}", crate::support::wheel::sha256_hex(&bytes)) } else { String::new() };
            page.push_str(&format!("<a href=\"../files/{served}{frag}\">{name}</a><br/>\n"));
            out.push((name, bytes));
        }
        page.push_str("</body></html>\n");
        self.http.add("whl/torch/", page.into_bytes());
        out
    }

    /// A wheel of torch served at `<dir>/<name>` (the `+` escaped, and as written): its name,
    /// bytes and sha256.
    fn wheel(&self, dir: &str, version: &str, tag: &str) -> (String, Vec<u8>, String) {
        let (name, bytes) = crate::support::wheel::make("torch", version, tag, "torch", &format!("{version} {tag}"));
        self.http.add(&format!("{dir}/{}", name.replace('+', "%2B")), bytes.clone());
        self.http.add(&format!("{dir}/{name}"), bytes.clone());
        let digest = crate::support::wheel::sha256_hex(&bytes);
        (name, bytes, digest)
    }

    /// The picked pin's url.
    fn pinned_url(&self) -> String {
        let lock: toml::Value = toml::from_str(&self.lock_text()).unwrap();
        lock["pin"].as_array().unwrap()[0]["url"].as_str().unwrap().to_string()
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = rocmforge(self.home.path());
        c.env("ROCMFORGE_CONFIG", self.home.path().join("config.toml"))
            .env("ROCMFORGE_RETRIES", "1")
            .env("ROCMFORGE_RETRY_BASE_MS", "10")
            .env("ROCMFORGE_HTTP_TIMEOUT_SECS", "5")
            .timeout(std::time::Duration::from_secs(120))
            .arg("--recipes")
            .arg(self.home.path().join("tree"))
            .args(args);
        c
    }

    fn lock_text(&self) -> String {
        std::fs::read_to_string(self.home.path().join("tree/recipes/w/rocmforge.lock")).unwrap_or_default()
    }
}

/// Other Pythons, platforms, glibc floors, versions and local labels beside the one file the
/// stack takes (index 1: cp311, manylinux_2_28, the most specific for glibc 2.28).
const AMD_LIKE: [(&str, &str, bool); 7] = [
    ("2.9.1+rocm7.10.0", "cp312-cp312-manylinux_2_28_x86_64", true),
    ("2.9.1+rocm7.10.0", "cp311-cp311-manylinux_2_28_x86_64", true),
    ("2.9.1+rocm7.10.0", "cp311-cp311-linux_x86_64", true),
    ("2.9.1+rocm7.10.0", "cp311-cp311-manylinux_2_34_x86_64", true),
    ("2.9.1+rocm7.10.0", "cp311-cp311-win_amd64", true),
    ("2.8.0+rocm7.10.0", "cp311-cp311-manylinux_2_28_x86_64", true),
    ("2.10.0+rocm7.10.0", "cp311-cp311-manylinux_2_28_x86_64", true),
];

#[test]
fn lock_picks_the_one_wheel_for_the_stacks_python_and_glibc_and_build_verifies_it() {
    let w = WheelIndex::new("2.9.1");
    let served = w.serve(&AMD_LIKE);
    let (want, bytes) = &served[1];

    let plan = String::from_utf8(w.cmd(&["plan", "torch"]).output().unwrap().stdout).unwrap();
    assert!(
        plan.contains("torch 2.9.1 from index https://repo.example.invalid/whl/ (unpinned: `rocmforge lock` or `build` picks the file)"),
        "{plan}"
    );
    let out = w.cmd(&["build", "torch", "--locked"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("wheel `torch` `2.9.1` of index `https://repo.example.invalid/whl/` has no file picked"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let digest = crate::support::wheel::sha256_hex(bytes);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "torch: {want} sha256 {} (from https://repo.example.invalid/whl/torch/)",
            &digest[..12]
        )),
        "{stdout}"
    );
    let lock: toml::Value = toml::from_str(&w.lock_text()).unwrap();
    let pin = &lock["pin"].as_array().unwrap()[0];
    // The relative link resolved against the page as the recipe names it (not the rewrite).
    assert_eq!(
        pin["url"].as_str(),
        Some(format!("https://repo.example.invalid/whl/files/{}", want.replace('+', "%2B")).as_str()),
        "{pin}"
    );
    assert_eq!(pin["sha256"].as_str(), Some(digest.as_str()));
    for (k, v) in [("project", "torch"), ("version", "2.9.1"), ("python", "3.11"), ("glibc", "2.28")] {
        assert_eq!(pin[k].as_str(), Some(v), "{pin}");
    }

    // plan shows the wheel, its index and the file; build --locked downloads it (through the
    // rewrite), verifies it and publishes exactly it.
    let plan = String::from_utf8(w.cmd(&["plan", "torch"]).output().unwrap().stdout).unwrap();
    assert!(
        plan.contains(&format!(
            "torch 2.9.1 from index https://repo.example.invalid/whl/: https://repo.example.invalid/whl/files/{}",
            want.replace('+', "%2B")
        )),
        "{plan}"
    );
    let out = w.cmd(&["build", "torch", "--locked"]).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    let own = w.home.path().join("state/rocmforge/index/w/simple/torch");
    assert_eq!(std::fs::read(own.join(want)).unwrap(), *bytes);
    let published: Vec<String> = std::fs::read_dir(&own)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".whl"))
        .collect();
    assert_eq!(published, std::slice::from_ref(want));

    // Another Python for the stack: the pin no longer applies, and the lock picks again.
    let st = w.home.path().join("tree/recipes/w/stack.toml");
    std::fs::write(&st, WHEEL_STACK.replace("python = \"3.11\"", "python = \"3.12\"")).unwrap();
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(w.lock_text().contains(&served[0].0.replace('+', "%2B")), "{}", w.lock_text());
}

#[test]
fn a_wheel_unlike_its_picked_digest_is_refused_by_the_build() {
    let w = WheelIndex::new("==2.9.1");
    let served = w.serve(&AMD_LIKE);
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    w.http.add(&format!("whl/files/{}", served[1].0.replace('+', "%2B")), b"other bytes".to_vec());
    let out = w.cmd(&["build", "torch"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sha256") && err.contains(&crate::support::wheel::sha256_hex(&served[1].1)), "{err}");
    assert!(!w.home.path().join("state/rocmforge/index/w/simple/torch").exists(), "nothing published");
}

/// A remote page linking the wheel as a `file://` URL (with the local file's right digest):
/// the build would have used a file of this machine as the published wheel. Refused, naming the
/// page, the file and the link; nothing is locked.
#[test]
fn lock_refuses_a_remote_index_pages_link_to_a_local_file() {
    let w = WheelIndex::new("2.9.1");
    let (name, bytes) =
        crate::support::wheel::make("torch", "2.9.1", "cp311-cp311-manylinux_2_28_x86_64", "torch", "local");
    let local = w.home.path().join(&name);
    std::fs::write(&local, &bytes).unwrap();
    let link = format!("file://{}", local.display());
    w.http.add(
        "whl/torch/",
        format!(
            "<html><body><a href=\"{link}#sha256={}\">{name}</a></body></html>\n",
            crate::support::wheel::sha256_hex(&bytes)
        )
        .into_bytes(),
    );
    let out = w.cmd(&["lock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", crate::support::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("links `{name}`, the file of `torch` `2.9.1` for the stack, as `{link}`, which is not on the web: a remote page's links are remote")),
        "{err}"
    );
    assert!(err.contains("the index page `https://repo.example.invalid/whl/torch/`"), "{err}");
    assert_eq!(w.lock_text(), "", "nothing locked");
}

#[test]
fn lock_refuses_no_match_an_ambiguity_and_a_link_without_digest_naming_page_project_version_and_files() {
    let page = "https://repo.example.invalid/whl/torch/";
    for (version, files, wanted) in [
        // No file of the version.
        (
            "2.9.2",
            &AMD_LIKE[..],
            vec![
                format!("the index page `{page}`"),
                "has no file of `torch` version `2.9.2`".to_string(),
                "torch-2.8.0+rocm7.10.0-cp311-cp311-manylinux_2_28_x86_64.whl".to_string(),
            ],
        ),
        // The version, but only for another Python or platform.
        (
            "2.9.1",
            &[AMD_LIKE[0], AMD_LIKE[3], AMD_LIKE[4]][..],
            vec![
                "has `torch` `2.9.1`, but no file of it installs on CPython 3.11 on Linux x86_64 with glibc 2.28".to_string(),
                "torch-2.9.1+rocm7.10.0-cp311-cp311-win_amd64.whl".to_string(),
            ],
        ),
        // Two local labels of the version, equally fitting.
        (
            "2.9.1",
            &[AMD_LIKE[1], ("2.9.1+rocm7.9.0", "cp311-cp311-manylinux_2_28_x86_64", true)][..],
            vec![
                "has 2 equally fitting files of `torch` `2.9.1` for CPython 3.11 on Linux x86_64 with glibc 2.28".to_string(),
                "torch-2.9.1+rocm7.9.0-cp311-cp311-manylinux_2_28_x86_64.whl".to_string(),
                "torch-2.9.1+rocm7.10.0-cp311-cp311-manylinux_2_28_x86_64.whl".to_string(),
                "`version = \"==X+label\"`".to_string(),
            ],
        ),
        // The one file, linked without a digest.
        (
            "2.9.1+rocm7.10.0",
            &[("2.9.1+rocm7.10.0", "cp311-cp311-manylinux_2_28_x86_64", false)][..],
            vec![format!(
                "links `torch-2.9.1+rocm7.10.0-cp311-cp311-manylinux_2_28_x86_64.whl`, the file of `torch` `2.9.1+rocm7.10.0` for the stack, without a `#sha256=` digest"
            ), format!("the index page `{page}`")],
        ),
    ] {
        let w = WheelIndex::new(version);
        w.serve(files);
        let out = w.cmd(&["lock"]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{version}: {}", crate::support::text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("torch: cannot pick a wheel file"), "{err}");
        assert!(err.contains(&format!("(via `{}`)", w.http.url("whl/torch/"))), "the rewrite is named: {err}");
        for s in &wanted {
            assert!(err.contains(s.as_str()), "{version}: `{s}` in {err}");
        }
        assert_eq!(w.lock_text(), "", "nothing locked");
    }
    // A project the index does not serve (404 here; 403 at repo.amd.com).
    let w = WheelIndex::new("2.9.1");
    let out = w.cmd(&["lock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", crate::support::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "the index `https://repo.example.invalid/whl/` serves no project `torch` (HTTP 404 Not Found at `{page}` (via `{}`)",
            w.http.url("whl/torch/")
        )),
        "{err}"
    );
    assert!(err.contains("check the recipe's `project` and `index`"), "{err}");
    // repo.amd.com answers 403 for a project it lacks: the same error.
    w.http.with(|s| s.statuses.insert("/whl/torch/".into(), 403));
    let out = w.cmd(&["lock"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("serves no project `torch` (HTTP 403 Forbidden at"), "{err}");
}

#[test]
fn lock_reads_index_pages_as_html_comments_entities_and_any_attribute_syntax() {
    let w = WheelIndex::new("2.9.1");
    let (want, _, d1) = w.wheel("whl/files", "2.9.1+rocm7.10.0", "cp311-cp311-manylinux_2_28_x86_64");
    let (py312, _, d2) = w.wheel("whl/files", "2.9.1+rocm7.10.0", "cp312-cp312-manylinux_2_28_x86_64");
    let (old, _, d3) = w.wheel("whl/files", "2.9.1+rocm7.9.0", "cp311-cp311-manylinux_2_28_x86_64");
    // The file the stack takes linked unquoted, its `+` as a character reference; another
    // spaced around `=`; a third only inside a comment (taken, it would make two candidates).
    let page = format!(
        "<!DOCTYPE html>\n<html><body>\n<!-- withdrawn:\n<a href=\"../files/{old}#sha256={d3}\">{old}</a>\n-->\n\
         <a href=../files/{}#sha256={d1}>{want}</a><br/>\n<a\n  href = \"../files/{py312}#sha256={d2}\" >{py312}</a>\n</body></html>\n",
        want.replace('+', "&#43;")
    );
    w.http.add("whl/torch/", page.into_bytes());
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    assert_eq!(w.pinned_url(), format!("https://repo.example.invalid/whl/files/{want}"), "{}", w.lock_text());
    let out = w.cmd(&["build", "torch", "--locked"]).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));

    // The spaced link is read too: Python 3.12 takes it.
    let st = w.home.path().join("tree/recipes/w/stack.toml");
    std::fs::write(&st, WHEEL_STACK.replace("python = \"3.11\"", "python = \"3.12\"")).unwrap();
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    assert_eq!(w.pinned_url(), format!("https://repo.example.invalid/whl/files/{py312}"), "{}", w.lock_text());
}

/// torch's page with 2.9.3 for Python 3.13 and later only, 2.9.2 yanked and 2.9.1, all for
/// CPython 3.11 by their tags.
fn marked_page(w: &WheelIndex) -> [String; 3] {
    let tag = "cp311-cp311-manylinux_2_28_x86_64";
    let (new, _, d1) = w.wheel("whl/files", "2.9.3", tag);
    let (yanked, _, d2) = w.wheel("whl/files", "2.9.2", tag);
    let (fine, _, d3) = w.wheel("whl/files", "2.9.1", tag);
    let page = format!(
        "<html><body>\n<a href=\"../files/{new}#sha256={d1}\" data-requires-python=\"&gt;=3.13\">{new}</a>\n\
         <a href=\"../files/{yanked}#sha256={d2}\" data-requires-python=\"&gt;=3.9\" data-yanked=\"broken build &amp; withdrawn\">{yanked}</a>\n\
         <a href=\"../files/{fine}#sha256={d3}\" data-requires-python=\"&gt;=3.9,&lt;3.14\">{fine}</a>\n</body></html>\n"
    );
    w.http.add("whl/torch/", page.into_bytes());
    [new, yanked, fine]
}

#[test]
fn lock_takes_no_file_for_another_python_and_a_yanked_one_only_when_named_and_said() {
    // A wildcard takes the newest release the stack may install: not 2.9.3 (Python >= 3.13),
    // not 2.9.2 (yanked).
    let w = WheelIndex::new("==2.9.*");
    let [_, _, fine] = marked_page(&w);
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    assert_eq!(w.pinned_url(), format!("https://repo.example.invalid/whl/files/{fine}"));

    // Asked for exactly, the file for Python 3.13 is refused, saying why.
    let w = WheelIndex::new("2.9.3");
    let [new, ..] = marked_page(&w);
    let out = w.cmd(&["lock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", crate::support::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has `torch` `2.9.3` for CPython 3.11 on Linux x86_64 with glibc 2.28 only in files it marks as not for the stack")
            && err.contains(&format!("{new} (requires Python `>=3.13`)")),
        "{err}"
    );
    assert_eq!(w.lock_text(), "", "nothing locked");

    // Asked for exactly, the yanked file is taken (PEP 592), with a warning giving the reason.
    let w = WheelIndex::new("2.9.2");
    let [_, yanked, _] = marked_page(&w);
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    let said = crate::support::text(&out);
    assert!(
        said.contains(&format!(
            "the only file that fits, `https://repo.example.invalid/whl/files/{yanked}`, is yanked"
        )) && said.contains("(reason given: broken build & withdrawn)"),
        "{said}"
    );
    assert_eq!(w.pinned_url(), format!("https://repo.example.invalid/whl/files/{yanked}"));
}

#[test]
fn lock_resolves_relative_links_against_the_page_a_redirect_led_to() {
    let w = WheelIndex::new("2.9.1");
    let (want, bytes, digest) = w.wheel("mirror/files", "2.9.1", "cp311-cp311-manylinux_2_28_x86_64");
    w.http.with(|s| s.redirects.insert("/whl/torch/".into(), "/mirror/torch/".into()));
    w.http.add("mirror/torch/", format!("<a href=\"../files/{want}#sha256={digest}\">{want}</a>\n").into_bytes());
    let out = w.cmd(&["lock"]).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    // Where the page was, as the recipe would name it: the build goes through the rewrite.
    assert_eq!(w.pinned_url(), format!("https://repo.example.invalid/mirror/files/{want}"), "{}", w.lock_text());
    let out = w.cmd(&["build", "torch", "--locked"]).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    let own = w.home.path().join("state/rocmforge/index/w/simple/torch");
    assert_eq!(std::fs::read(own.join(&want)).unwrap(), bytes);
}

#[test]
fn lock_waits_for_a_stalled_page_as_configured_and_reads_no_page_past_its_bound() {
    let w = WheelIndex::new("2.9.1");
    w.serve(&AMD_LIKE);
    std::fs::write(
        w.home.path().join("config.toml"),
        format!(
            "download-timeout-secs = 2\n[url-rewrite]\n\"https://repo.example.invalid/\" = \"{}\"\n",
            w.http.url("")
        ),
    )
    .unwrap();
    w.http.with(|s| {
        s.stall_at = Some(40);
        s.stall_for = std::time::Duration::from_secs(6);
    });
    let out = w.cmd(&["lock"]).env_remove("ROCMFORGE_HTTP_TIMEOUT_SECS").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", crate::support::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read the index page `https://repo.example.invalid/whl/torch/`")
            && err.contains("no answer within 2 s (`download-timeout-secs` in the config"),
        "{err}"
    );
    assert!(!err.contains("error decoding response body"), "{err}");

    w.http.with(|s| s.stall_at = None);
    let mut huge = b"<html><body>".to_vec();
    huge.resize(33 << 20, b' ');
    w.http.add("whl/torch/", huge);
    let out = w.cmd(&["lock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", crate::support::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the page is larger than 32 MiB, more than any index page: not read"), "{err}");
}

#[test]
fn lock_and_downloads_trust_the_certificates_ssl_cert_file_names_and_name_a_refused_one() {
    let w = WheelIndex::new("2.9.1");
    let served = w.serve(&AMD_LIKE);
    let tls = crate::support::tls::TlsFront::start(w.http.port, w.home.path());
    std::fs::write(
        w.home.path().join("config.toml"),
        format!("[url-rewrite]\n\"https://repo.example.invalid/\" = \"{}\"\n", tls.url("")),
    )
    .unwrap();

    // The proxy's CA trusted by no one: the error names the certificate problem and the fix.
    let out = w.cmd(&["lock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", crate::support::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TLS: the server's certificate is not signed by a certificate authority this machine trusts (invalid peer certificate: UnknownIssuer)")
            && err.contains("rocmforge trusts the system's certificate store and Mozilla's roots")
            && err.contains("point SSL_CERT_FILE at it"),
        "{err}"
    );

    // Trusted through SSL_CERT_DIR (a folder of PEM files, as `openssl rehash` makes), then
    // SSL_CERT_FILE, as curl and pip read them: lock reads the page over TLS.
    let ca = tls.ca_pem.clone();
    let dir = w.home.path().join("cert-dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&ca, dir.join("proxy-ca.pem")).unwrap();
    let out = w.cmd(&["lock"]).env("SSL_CERT_DIR", &dir).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    assert!(!w.lock_text().is_empty(), "locked through SSL_CERT_DIR");
    std::fs::remove_file(w.home.path().join("tree/recipes/w/rocmforge.lock")).unwrap();
    let out = w.cmd(&["lock"]).env("SSL_CERT_FILE", &ca).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    assert!(!w.lock_text().is_empty(), "locked through SSL_CERT_FILE");

    // A download refused the same way says so; trusted, it goes through.
    let out = w.cmd(&["build", "torch", "--locked"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot download `https://repo.example.invalid/whl/files/{}`",
            served[1].0.replace('+', "%2B")
        )) && err
            .contains("TLS: the server's certificate is not signed by a certificate authority this machine trusts"),
        "{err}"
    );
    let out = w.cmd(&["build", "torch", "--locked"]).env("SSL_CERT_FILE", &ca).output().unwrap();
    assert!(out.status.success(), "{}", crate::support::text(&out));
    let own = w.home.path().join("state/rocmforge/index/w/simple/torch");
    assert_eq!(std::fs::read(own.join(&served[1].0)).unwrap(), served[1].1);
}
