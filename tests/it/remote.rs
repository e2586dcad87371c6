//! The shared artifact cache against a real nginx on 127.0.0.1, configured with the README's
//! own block from "A team's shared cache" (WebDAV `PUT`, `create_full_put_path`, no body limit,
//! basic auth on uploads): machine A builds and uploads, machine B (its own cache, work and state dirs, its
//! own PATH to the same tools, the same prefix path emptied first) downloads everything and
//! compiles nothing; altered, truncated, unsigned-by-a-trusted-key, altered-after-signing and
//! replayed artifacts are refused and built locally with the reason; a server stopped mid-build
//! costs a warning, not the build.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::ScriptsStack;

/// The password of the uploaders' basic auth: it must never appear in any output.
pub const PASSWORD: &str = "s3cret-upl0ad-pw";

pub use crate::support::nginx::Nginx;

/// nginx with README's config ("A team's shared cache"): `/cache/` takes WebDAV `PUT`s, with
/// `create_full_put_path`, no body limit and basic auth (user `lab`, [`PASSWORD`]) on uploads.
pub fn cache_server(dir: &Path) -> Nginx {
    Nginx::readme(dir, PASSWORD)
}

/// The `cache-url` of [`cache_server`].
pub fn cache_url(n: &Nginx) -> String {
    n.url("cache/")
}

/// `<root>/cache/<rel>` on the server's disk.
fn cache_file(n: &Nginx, rel: &str) -> PathBuf {
    n.root.join("cache").join(rel)
}

/// One machine: its own config, cache, work and state dirs and PATH; the prefix is the stack's.
struct Machine {
    dir: PathBuf,
    path: String,
}

impl Machine {
    fn new(s: &ScriptsStack, name: &str, path: String) -> Machine {
        let dir = s.home.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        Machine { dir, path }
    }

    fn config(&self, body: &str) {
        std::fs::write(self.dir.join("config.toml"), body).unwrap();
    }

    fn cmd(&self, s: &ScriptsStack) -> Command {
        let mut c = s.process();
        c.env("PATH", &self.path)
            .env("NO_COLOR", "1")
            .env("ROCMFORGE_CONFIG", self.dir.join("config.toml"))
            .env("ROCMFORGE_CACHE_DIR", self.dir.join("cache"))
            .env("ROCMFORGE_WORK_DIR", self.dir.join("work"))
            .env("ROCMFORGE_STATE_DIR", self.dir.join("state"))
            .env("ROCMFORGE_CACHE_CONNECT_TIMEOUT_SECS", "2")
            .env("ROCMFORGE_SCHEDULE", "name");
        c
    }

    fn run(&self, s: &ScriptsStack, args: &[&str]) -> (bool, String) {
        let out = self.cmd(s).args(args).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!text.contains(PASSWORD), "the password was printed:\n{text}");
        (out.status.success(), text)
    }

    fn build(&self, s: &ScriptsStack, extra: &[&str]) -> String {
        let prefix = s.prefix().display().to_string();
        let mut args = vec!["build", "top", "-j", "1", "--prefix", prefix.as_str()];
        args.extend_from_slice(extra);
        let (ok, text) = self.run(s, &args);
        assert!(ok, "build failed:\n{text}");
        text
    }

    fn keygen(&self, s: &ScriptsStack, name: &str) -> String {
        let out = self.cmd(s).args(["cache", "keygen", "--name", name]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Each recipe's key, from `plan --json`.
    fn keys(&self, s: &ScriptsStack) -> Vec<(String, String)> {
        let prefix = s.prefix().display().to_string();
        let out = self.cmd(s).args(["plan", "top", "--json", "--prefix", prefix.as_str()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["recipes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["name"].as_str().unwrap().to_string(), r["key"].as_str().unwrap().to_string()))
            .collect()
    }
}

/// The recipes that ran their steps since the last call (the fixture's steps count their runs
/// next to the prefix), and the prefix emptied, as on a new machine.
fn compiled_and_reset(s: &ScriptsStack) -> Vec<String> {
    let mut ran = Vec::new();
    for r in ["base", "mid", "tool", "top"] {
        let p = s.out().join(format!("{r}.runs"));
        if p.exists() {
            ran.push(r.to_string());
            std::fs::remove_file(p).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(s.prefix());
    ran
}

/// B's PATH: a directory of its own with the same tools (symlinks; a wrapper for Debian's hipcc,
/// which finds its perl half next to the name it was called by), then the system's.
pub fn other_path(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let system = std::env::var("PATH").unwrap();
    for tool in rocmforge::key::TOOLS {
        let Some(real) = std::env::split_paths(&system).map(|d| d.join(tool)).find(|p| p.is_file()) else { continue };
        if *tool == "hipcc" {
            use std::os::unix::fs::PermissionsExt;
            let w = dir.join(tool);
            std::fs::write(&w, format!("#!/bin/sh\nexec '{}' \"$@\"\n", real.display())).unwrap();
            std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
        } else {
            std::os::unix::fs::symlink(&real, dir.join(tool)).unwrap();
        }
    }
    format!("{}:{system}", dir.display())
}

fn key_of<'a>(keys: &'a [(String, String)], recipe: &str) -> &'a str {
    &keys.iter().find(|(n, _)| n == recipe).unwrap().1
}

/// The one line of `text` about `recipe` holding `what`.
fn line_with<'a>(text: &'a str, recipe: &str, what: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(&format!("{recipe}: ")) && l.contains(what))
        .unwrap_or_else(|| panic!("no line about {recipe} with `{what}` in:\n{text}"))
}

/// A machine that uploads to `url` (basic auth user `lab`), with a key of its own, trusting it.
fn uploader(s: &ScriptsStack, name: &str, url: &str) -> (Machine, String) {
    let m = Machine::new(s, name, std::env::var("PATH").unwrap());
    m.config("");
    let public = m.keygen(s, &format!("machine-{name}"));
    m.config(&format!("cache-url = \"{url}\"\ncache-user = \"lab\"\ntrusted-keys = [\"{public}\"]\n"));
    (m, public)
}

fn setup() -> (ScriptsStack, Nginx) {
    let s = ScriptsStack::new();
    // An artifact over nginx's default 1 MiB body limit, random so zstd cannot shrink it.
    s.edit(
        "base",
        "\"mkdir -p {stage}/lib {stage}/include\",",
        "\"mkdir -p {stage}/lib {stage}/include\",\n  \"head -c 1500000 /dev/urandom > {stage}/lib/libbig.bin\",",
    );
    let n = cache_server(&s.home.path().join("nginx"));
    (s, n)
}

#[test]
fn a_second_machine_downloads_every_artifact_and_refuses_what_it_must() {
    let (s, mut nginx) = setup();
    let system_path = std::env::var("PATH").unwrap();

    // Machine A: uploads, signed with its key, with basic auth.
    let a = Machine::new(&s, "a", system_path.clone());
    a.config("");
    let a_pub = a.keygen(&s, "machine-a");
    assert!(a_pub.starts_with("machine-a:"), "{a_pub}");
    let key_file = a.dir.join("state/cache-signing.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777, 0o600);
    a.config(&format!("cache-url = \"{}\"\ncache-user = \"lab\"\ntrusted-keys = [\"{a_pub}\"]\n", cache_url(&nginx)));
    let mut cmd = a.cmd(&s);
    cmd.env("ROCMFORGE_CACHE_PASSWORD", PASSWORD);
    let prefix = s.prefix().display().to_string();
    let out = cmd.args(["build", "top", "-j", "1", "--prefix", prefix.as_str()]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    for r in ["base", "mid", "tool", "top"] {
        line_with(&text, r, "uploaded artifact");
    }
    assert_eq!(compiled_and_reset(&s), ["base", "mid", "tool", "top"]);
    let keys = a.keys(&s);
    let blob_of = |recipe: &str| -> PathBuf {
        let m: serde_json::Value = serde_json::from_slice(
            &std::fs::read(cache_file(&nginx, &format!("ac/{}", key_of(&keys, recipe)))).unwrap(),
        )
        .unwrap();
        cache_file(&nginx, &format!("cas/{}", m["blob"]["sha256"].as_str().unwrap()))
    };
    assert!(std::fs::metadata(blob_of("base")).unwrap().len() > 1 << 20, "the fixture's artifact is over 1 MiB");
    // Without the password, the server refuses uploads (the README's `limit_except`).
    let put =
        reqwest::blocking::Client::new().put(format!("{}ac/planted", cache_url(&nginx))).body("x").send().unwrap();
    assert_eq!(put.status().as_u16(), 401);

    // Machine B: its own dirs and PATH, read-only, trusting A.
    let b_config =
        format!("cache-url = \"{}\"\ncache-read-only = true\ntrusted-keys = [\"{a_pub}\"]\n", cache_url(&nginx));
    let b_path = other_path(&s.home.path().join("b-bin"));
    let fresh_b = |name: &str| {
        let b = Machine::new(&s, name, b_path.clone());
        b.config(&b_config);
        b
    };
    let b = fresh_b("b1");
    assert_eq!(b.keys(&s), keys, "B computes A's keys");
    let (ok, plan) = b.run(&s, &["plan", "top", "--prefix", prefix.as_str()]);
    assert!(ok, "{plan}");
    assert_eq!(plan.matches("state:   remote hit (artifact").count(), 4, "{plan}");
    let text = b.build(&s, &[]);
    for r in ["base", "mid", "tool", "top"] {
        line_with(&text, r, "downloaded artifact");
    }
    assert!(text.contains("nothing to build: 4 recipe(s) up to date in the cache"), "{text}");
    assert_eq!(compiled_and_reset(&s), Vec::<String>::new(), "B compiled nothing:\n{text}");
    assert!(!b.dir.join("work/scripts/base").exists(), "no work dir: nothing was prepared");
    let (ok, text) = b.run(&s, &["cache", "verify"]);
    assert!(ok, "{text}");

    // A blob altered on the server (same size), another truncated: B rebuilds those two, saying
    // why, and downloads the rest.
    let mid_blob = blob_of("mid");
    let mut bytes = std::fs::read(&mid_blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&mid_blob, &bytes).unwrap();
    let tool_blob = blob_of("tool");
    let bytes = std::fs::read(&tool_blob).unwrap();
    std::fs::write(&tool_blob, &bytes[..bytes.len() / 2]).unwrap();
    let b = fresh_b("b2");
    let text = b.build(&s, &[]);
    line_with(&text, "mid", "not the");
    line_with(&text, "mid", "altered on the server?");
    line_with(&text, "tool", "its blob is truncated");
    line_with(&text, "base", "downloaded artifact");
    line_with(&text, "top", "downloaded artifact");
    assert_eq!(compiled_and_reset(&s), ["mid", "tool"]);

    // Trust: base re-uploaded by machine C, whom B does not trust; A's manifest of base copied
    // to mid's path; tool's manifest altered after signing. Each is refused with its reason and
    // built locally; top (untouched) still downloads.
    let ac = |r: &str| cache_file(&nginx, &format!("ac/{}", key_of(&keys, r)));
    let a_base = std::fs::read(ac("base")).unwrap();
    std::fs::remove_file(ac("base")).unwrap();
    let (c, _) = uploader(&s, "c", &cache_url(&nginx));
    let mut cmd = c.cmd(&s);
    cmd.env("ROCMFORGE_CACHE_PASSWORD", PASSWORD);
    let out = cmd.args(["build", "base", "--prefix", prefix.as_str()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("uploaded artifact"));
    compiled_and_reset(&s);
    assert!(std::fs::read_to_string(ac("base")).unwrap().contains("machine-c"));
    std::fs::write(ac("mid"), &a_base).unwrap();
    let tool_manifest = std::fs::read_to_string(ac("tool")).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&tool_manifest).unwrap();
    m["blob"]["sha256"] = serde_json::Value::from(blob_of("top").file_name().unwrap().to_str().unwrap());
    m["blob"]["size"] = serde_json::Value::from(std::fs::metadata(blob_of("top")).unwrap().len());
    std::fs::write(ac("tool"), serde_json::to_vec(&m).unwrap()).unwrap();

    let b = fresh_b("b3");
    let (ok, plan) = b.run(&s, &["plan", "top", "--prefix", prefix.as_str()]);
    assert!(ok, "{plan}");
    assert!(plan.contains("signed by `machine-c`, which is not in `trusted-keys` (machine-a)"), "{plan}");
    assert_eq!(plan.matches("state:   remote hit").count(), 1, "{plan}");
    let text = b.build(&s, &[]);
    eprintln!("--- B with planted, replayed and altered manifests:\n{text}");
    line_with(&text, "base", "signed by `machine-c`, which is not in `trusted-keys` (machine-a)");
    line_with(&text, "mid", "copied from another key's path");
    line_with(&text, "tool", "does not match the manifest (altered after it was signed?)");
    line_with(&text, "top", "downloaded artifact");
    assert_eq!(compiled_and_reset(&s), ["base", "mid", "tool"]);

    // The server stopped mid-build: B goes on locally. A's manifests back in place; B pauses
    // before using mid's artifact (after base's download), the test stops nginx there.
    std::fs::write(ac("base"), &a_base).unwrap();
    std::fs::write(ac("tool"), &tool_manifest).unwrap();
    std::fs::remove_file(ac("mid")).unwrap();
    let b = fresh_b("b4");
    let (ok, plan) = b.run(&s, &["plan", "top", "--prefix", prefix.as_str()]);
    assert!(ok, "{plan}");
    let pause = s.home.path().join("pause");
    let child = b
        .cmd(&s)
        .args(["build", "top", "-j", "1", "--prefix", prefix.as_str()])
        .env("ROCMFORGE_FAULT", "pause:reuse:tool")
        .env("ROCMFORGE_FAULT_PAUSE", &pause)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !pause.exists() {
        assert!(Instant::now() < until, "the build never reached tool");
        std::thread::sleep(Duration::from_millis(20));
    }
    nginx.stop();
    std::fs::remove_file(&pause).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    eprintln!("--- B with the server stopped mid-build:\n{text}");
    line_with(&text, "base", "downloaded artifact");
    line_with(&text, "tool", "cannot be reached");
    line_with(&text, "top", "could not be downloaded now: building it locally");
    assert_eq!(text.matches("cannot be reached").count(), 1, "one warning:\n{text}");
    assert_eq!(compiled_and_reset(&s), ["mid", "tool", "top"]);
}

#[test]
fn an_unreachable_cache_costs_a_warning_not_the_build() {
    let s = ScriptsStack::new();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let m = Machine::new(&s, "m", std::env::var("PATH").unwrap());
    m.config(&format!("cache-url = \"http://lab:{PASSWORD}@127.0.0.1:{port}/cache/\"\ntrusted-keys = []\n"));
    let text = m.build(&s, &[]);
    assert_eq!(text.matches("cannot be reached").count(), 1, "{text}");
    assert!(text.contains(&format!("http://127.0.0.1:{port}/cache/")), "{text}");
    assert_eq!(compiled_and_reset(&s), ["base", "mid", "tool", "top"]);
    // A bad trusted key is an error naming the config file and the entry.
    m.config(&format!("cache-url = \"http://127.0.0.1:{port}/\"\ntrusted-keys = [\"nokey\"]\n"));
    let (ok, text) = m.run(&s, &["plan", "top"]);
    assert!(!ok);
    assert!(
        text.contains("trusted-keys entry in") && text.contains("config.toml") && text.contains("`nokey`"),
        "{text}"
    );
}

#[test]
fn cache_push_uploads_what_a_build_could_not_and_refuses_what_it_must() {
    let (s, nginx) = setup();
    // Built while the server is unreachable: nothing is uploaded.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (a, a_pub) = uploader(&s, "a", &format!("http://127.0.0.1:{dead}/cache/"));
    let text = a.build(&s, &[]);
    assert!(text.contains("cannot be reached") && !text.contains("uploaded artifact"), "{text}");
    assert!(text.contains("(`rocmforge cache push` uploads it later)"), "{text}");
    compiled_and_reset(&s);
    let push = |m: &Machine, args: &[&str]| {
        let out = m.cmd(&s).env("ROCMFORGE_CACHE_PASSWORD", PASSWORD).args(args).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!text.contains(PASSWORD), "the password was printed:\n{text}");
        (out.status.success(), text)
    };
    let (ok, text) = push(&a, &["cache", "push"]);
    assert!(!ok && text.contains("cannot be reached"), "{text}");

    // The server up: `cache push` uploads all four, then finds them there.
    a.config(&format!("cache-url = \"{}\"\ncache-user = \"lab\"\ntrusted-keys = [\"{a_pub}\"]\n", cache_url(&nginx)));
    let (ok, text) = push(&a, &["cache", "push"]);
    assert!(ok, "{text}");
    assert!(text.contains("4 artifact(s) uploaded"), "{text}");
    for (r, key) in a.keys(&s) {
        assert!(cache_file(&nginx, &format!("ac/{key}")).is_file(), "{r} was not pushed:\n{text}");
    }
    let (ok, text) = push(&a, &["cache", "push"]);
    assert!(ok && text.contains("0 artifact(s) uploaded (0 B), 4 already there"), "{text}");

    // What was pushed is what a build would have uploaded: B downloads everything.
    let b = Machine::new(&s, "b", other_path(&s.home.path().join("b-bin")));
    b.config(&format!("cache-url = \"{}\"\ncache-read-only = true\ntrusted-keys = [\"{a_pub}\"]\n", cache_url(&nginx)));
    let text = b.build(&s, &[]);
    assert!(text.contains("(4 downloaded from the shared cache)"), "{text}");
    assert_eq!(compiled_and_reset(&s), Vec::<String>::new());

    // Refused: a read-only machine, a machine without a key, a recipe with no artifact, and an
    // artifact damaged on disk (never shared; the server keeps lacking it).
    let (ok, text) = push(&b, &["cache", "push"]);
    assert!(!ok && text.contains("`cache-read-only` is set"), "{text}");
    let d = Machine::new(&s, "d", std::env::var("PATH").unwrap());
    d.config(&format!("cache-url = \"{}\"\ntrusted-keys = [\"{a_pub}\"]\n", cache_url(&nginx)));
    d.build(&s, &[]);
    compiled_and_reset(&s);
    let (ok, text) = push(&d, &["cache", "push"]);
    assert!(!ok && text.contains("no signing key") && text.contains("rocmforge cache keygen"), "{text}");
    let (ok, text) = push(&a, &["cache", "push", "nosuch"]);
    assert!(!ok && text.contains("no artifact of nosuch in the local cache"), "{text}");
    let base_key = a.keys(&s).into_iter().find(|(r, _)| r == "base").unwrap().1;
    std::fs::remove_file(cache_file(&nginx, &format!("ac/{base_key}"))).unwrap();
    let big = walkdir::WalkDir::new(a.dir.join("cache"))
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.file_name() == "libbig.bin")
        .expect("base's artifact in A's cache")
        .into_path();
    let mut bytes = std::fs::read(&big).unwrap();
    bytes[0] ^= 0xff;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&big, &bytes).unwrap();
    let (ok, text) = push(&a, &["cache", "push", "base", "top"]);
    assert!(!ok, "{text}");
    assert!(text.contains("error: base:") && text.contains("not pushed"), "{text}");
    assert!(text.contains("1 artifact(s) not pushed; 0 artifact(s) uploaded (0 B), 1 already there"), "{text}");
    assert!(!cache_file(&nginx, &format!("ac/{base_key}")).exists());
}

/// Starts `build top` on `a` with base's upload held at its start (a fault pause), and returns
/// once top has been built: the running build, and the pause file to remove to let it go.
fn build_with_base_upload_held(s: &ScriptsStack, a: &Machine) -> (std::process::Child, PathBuf) {
    build_with_uploads_held(s, a, false)
}

/// As [`build_with_base_upload_held`]; with `top_held`, top's build also waits after writing
/// `top.runs` for as long as `<out>/hold-top` exists (the test never removes it: the interrupt
/// stops the step, and the temp home's removal ends it should the test fail first), so top is
/// not stored when the test acts: base's upload is under way and mid's and tool's are queued.
fn build_with_uploads_held(s: &ScriptsStack, a: &Machine, top_held: bool) -> (std::process::Child, PathBuf) {
    if top_held {
        std::fs::write(s.out().join("hold-top"), "").unwrap();
        let runs = "\"echo built >> {prefix}/../top.runs\",";
        s.edit("top", runs, &format!("{runs}\n  \"while [ -e {{prefix}}/../hold-top ]; do sleep 0.05; done\","));
    }
    let pause = s.home.path().join("pause");
    let prefix = s.prefix().display().to_string();
    let child = a
        .cmd(s)
        .env("ROCMFORGE_CACHE_PASSWORD", PASSWORD)
        .env("ROCMFORGE_FAULT", "pause:upload:base")
        .env("ROCMFORGE_FAULT_PAUSE", &pause)
        .args(["build", "top", "-j", "1", "--prefix", prefix.as_str()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(40);
    while !s.out().join("top.runs").exists() {
        assert!(Instant::now() < until, "top was not built while base's upload was held");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, pause)
}

/// Uploads run beside the build: with base's upload held at its start, mid, tool and top are
/// built (a synchronous upload would hold base's slot, and so its dependents, until it ended);
/// once it is let go, every artifact is uploaded before the build exits.
#[test]
fn uploads_run_beside_the_build_and_end_with_it() {
    let (s, nginx) = setup();
    let (a, _) = uploader(&s, "a", &cache_url(&nginx));
    let (child, pause) = build_with_base_upload_held(&s, &a);
    assert!(pause.exists(), "base's upload was let go before top was built");
    assert!(!nginx.root.join("cache/ac").exists(), "nothing is uploaded yet");
    std::fs::remove_file(&pause).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    for r in ["base", "mid", "tool", "top"] {
        line_with(&text, r, "uploaded artifact");
    }
    for (r, key) in a.keys(&s) {
        assert!(cache_file(&nginx, &format!("ac/{key}")).is_file(), "{r} is not on the server:\n{text}");
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("built 4 recipe(s)"), "{text}");
}

/// `plan` asks the shared cache for every manifest it needs at once: a server that answers no
/// request until four are open at the same time (or 5 s have passed) sees all four of the
/// stack's, each once.
#[test]
fn plan_asks_for_the_manifests_side_by_side_and_each_once() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    let s = ScriptsStack::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (open, most, total) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let (open, most, total, paths) = (open.clone(), most.clone(), total.clone(), paths.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let (open, most, total, paths) = (open.clone(), most.clone(), total.clone(), paths.clone());
                std::thread::spawn(move || {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let line = String::from_utf8_lossy(&req).lines().next().unwrap_or("").to_string();
                    paths.lock().unwrap().push(line);
                    total.fetch_add(1, SeqCst);
                    let now = open.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    let until = Instant::now() + Duration::from_secs(5);
                    while most.load(SeqCst) < 4 && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let _ = conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    open.fetch_sub(1, SeqCst);
                });
            }
        });
    }
    let m = Machine::new(&s, "m", std::env::var("PATH").unwrap());
    m.config(&format!("cache-url = \"http://127.0.0.1:{port}/cache/\"\ntrusted-keys = []\n"));
    let (ok, text) = m.run(&s, &["plan", "top"]);
    assert!(ok, "{text}");
    let paths = paths.lock().unwrap().clone();
    assert_eq!(most.load(SeqCst), 4, "at most {} requests at once: {paths:?}", most.load(SeqCst));
    assert_eq!(total.load(SeqCst), 4, "{paths:?}");
    assert!(paths.iter().all(|p| p.starts_with("GET /cache/ac/")), "{paths:?}");
}

/// Ctrl-C while uploads are still queued: the build says how many did not finish and which
/// command makes them; `cache push` then uploads exactly what the server lacks.
#[test]
fn an_interrupted_build_names_its_unfinished_uploads_and_cache_push_makes_them() {
    let (s, nginx) = setup();
    let (a, _) = uploader(&s, "a", &cache_url(&nginx));
    // The signal comes while base's upload is held and top's step waits (on marks, not on
    // time): base's upload is under way, mid's and tool's are queued, top is not stored.
    let (child, pause) = build_with_uploads_held(&s, &a, true);
    assert!(pause.exists(), "base's upload was let go before top was built");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&pause);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(130), "{text}");
    let said = "3 upload(s) to the shared cache did not finish: `rocmforge cache push` uploads what the server lacks";
    assert!(text.contains(said), "{text}");
    assert!(!nginx.root.join("cache/ac").exists(), "nothing was uploaded:\n{text}");
    let out = a.cmd(&s).env("ROCMFORGE_CACHE_PASSWORD", PASSWORD).args(["cache", "push"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("3 artifact(s) uploaded"), "{text}");
    for (r, key) in a.keys(&s) {
        let there = cache_file(&nginx, &format!("ac/{key}")).is_file();
        assert_eq!(there, r != "top", "{r}: on the server {there}, top never stored:\n{text}");
    }
}

/// A blob transfer that breaks off is resumed where it stopped (`Range`), not refused and built
/// locally: the shared cache A filled, served by a server that drops every connection after
/// 700 kB, still gives B every artifact.
#[test]
fn a_blob_transfer_that_breaks_off_is_resumed_not_rebuilt() {
    let (s, nginx) = setup();
    let (a, a_pub) = uploader(&s, "a", &cache_url(&nginx));
    let (ok, text) = {
        let mut build = a.cmd(&s);
        build.env("ROCMFORGE_CACHE_PASSWORD", PASSWORD).args(["build", "top", "--prefix"]).arg(s.prefix());
        let out = build.output().unwrap();
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    assert!(ok, "{text}");
    compiled_and_reset(&s);
    let http = crate::support::http::HttpServer::start();
    let served = nginx.root.join("cache");
    for e in walkdir::WalkDir::new(&served).into_iter().filter_map(Result::ok).filter(|e| e.file_type().is_file()) {
        let rel = e.path().strip_prefix(&served).unwrap().display().to_string();
        http.add(&format!("cache/{rel}"), std::fs::read(e.path()).unwrap());
    }
    http.with(|st| st.drop_after.extend([700_000; 32]));
    let b = Machine::new(&s, "b", std::env::var("PATH").unwrap());
    b.config(&format!(
        "cache-url = \"{}\"\ncache-read-only = true\ntrusted-keys = [\"{a_pub}\"]\n",
        http.url("cache/")
    ));
    let out =
        b.cmd(&s).env("ROCMFORGE_RETRY_BASE_MS", "10").args(["build", "top", "--prefix"]).arg(s.prefix()).output();
    let out = out.unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    line_with(&text, "base", "downloaded artifact");
    line_with(&text, "base", "the transfer broke off and was resumed 2 time(s)");
    assert!(text.contains("(4 downloaded from the shared cache)"), "{text}");
    assert_eq!(compiled_and_reset(&s), Vec::<String>::new(), "B compiled nothing:\n{text}");
    let ranges: Vec<String> = http.with(|st| st.requests.iter().filter_map(|(_, r)| r.clone()).collect());
    assert_eq!(ranges, ["bytes=700000-", "bytes=1400000-"], "{text}");

    // The config's `download-retries` bounds the resumes that bring nothing, as for sources:
    // blobs cut at 700 kB, then twice at 0 bytes. With 3 tries C gets everything; with 1, D
    // gives base's blob up as truncated and builds base itself.
    for (name, retries, downloaded) in [("c", 3, true), ("d", 1, false)] {
        http.with(|st| {
            st.drop_only = Some("/cas/".into());
            st.drop_after = [700_000, 0, 0].into_iter().collect();
        });
        let m = Machine::new(&s, name, std::env::var("PATH").unwrap());
        m.config(&format!(
            "cache-url = \"{}\"\ncache-read-only = true\ntrusted-keys = [\"{a_pub}\"]\ndownload-retries = {retries}\n",
            http.url("cache/")
        ));
        let out = m
            .cmd(&s)
            .env("ROCMFORGE_RETRY_BASE_MS", "10")
            .args(["build", "top", "-j", "1", "--prefix"])
            .arg(s.prefix())
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{text}");
        let compiled = compiled_and_reset(&s);
        if downloaded {
            line_with(&text, "base", "the transfer broke off and was resumed 3 time(s)");
            assert!(!compiled.contains(&"base".to_string()), "{name} compiled base:\n{text}");
        } else {
            line_with(&text, "base", "its blob is truncated: 700000 of");
            assert!(compiled.contains(&"base".to_string()), "{name} did not build base:\n{text}");
        }
    }
}
