//! The local wheel index (issue: wheels in a local package index that pip and uv install
//! from, over file:// and http://). Real clients: wheels are built here with pip + setuptools
//! (one pure-Python, one with a C extension), published with `rocmforge index publish`, and
//! installed with pip and uv into fresh virtual environments, from `file://` and from
//! `rocmforge index serve` on 127.0.0.1. Nothing reaches beyond 127.0.0.1.
//!
//! Needs on PATH: `python3` with setuptools and wheel importable, `uv`, and a C compiler.
//! Missing tools fail the tests with a message saying what to install; nothing is skipped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rocmforge::index::{self, PublishOutcome};
use rustix::process::{Pid, Signal};
use sha2::Digest;

use crate::support::rocmforge;

// ---------------------------------------------------------------------------------------------
// Tools and wheels

const TOOLS_HINT: &str = "the index tests need `python3` (3.8+) with setuptools and wheel, `uv`, and gcc: \
                          run `python3 -m pip install uv setuptools wheel`";

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}\n{TOOLS_HINT}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\n[stdout]\n{stdout}\n[stderr]\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn require_tools() {
    static CHECKED: OnceLock<()> = OnceLock::new();
    CHECKED.get_or_init(|| {
        for (cmd, args) in [
            ("python3", &["-c", "import setuptools, wheel"][..]),
            ("uv", &["--version"][..]),
            ("gcc", &["--version"][..]),
        ] {
            let ok = Command::new(cmd).args(args).output().is_ok_and(|o| o.status.success());
            assert!(ok, "`{cmd} {}` failed: {TOOLS_HINT}", args.join(" "));
        }
    });
}

fn key() -> String {
    hex::encode(sha2::Sha256::digest(b"fixture cache key"))
}

/// The wheels every real-client test installs, built once per test run.
struct Wheels {
    /// rfpure 1.0.0+rocm6.2.4.gfx1010.k…, pure Python.
    pure_1_0: PathBuf,
    /// rfpure 1.1.0+…: a newer release, so pins and yanks have something to choose against.
    pure_1_1: PathBuf,
    /// rfcext 2.6.0+rocm6.2.4.gfx1010.gfx1012.k…: a C extension, Requires-Python >=3.8,
    /// depending on rfpure==1.0.0 (the way torchvision pins torch).
    cext: PathBuf,
}

impl Wheels {
    fn all(&self) -> Vec<&Path> {
        vec![&self.pure_1_0, &self.pure_1_1, &self.cext]
    }
}

fn pure_version(base: &str) -> String {
    index::local_version(base, "6.2.4", &["gfx1010"], 0, &key())
}

fn cext_version() -> String {
    index::local_version("2.6.0", "6.2.4", &["gfx1012", "gfx1010"], 0, &key())
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const SPEED_C: &str = r#"#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}
static PyMethodDef methods[] = {{"add", add, METH_VARARGS, "a + b, in C"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speed", NULL, -1, methods};
PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&module); }
"#;

fn wheels() -> &'static Wheels {
    static WHEELS: OnceLock<Wheels> = OnceLock::new();
    WHEELS.get_or_init(|| {
        require_tools();
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("index-wheels");
        let _ = std::fs::remove_dir_all(&root);
        let src = root.join("src");
        write_pure_source(&src.join("pure-1.0"), &pure_version("1.0.0"), "pure-1.0.0");
        write_pure_source(&src.join("pure-1.1"), &pure_version("1.1.0"), "pure-1.1.0");
        write(
            &src.join("cext/setup.py"),
            &format!(
                "from setuptools import setup, Extension\n\
                 setup(name=\"rfcext\", version=\"{}\", packages=[\"rfcext\"],\n\
                 \x20     ext_modules=[Extension(\"rfcext._speed\", [\"rfcext/_speed.c\"])],\n\
                 \x20     python_requires=\">=3.8\", install_requires=[\"rfpure==1.0.0\"])\n",
                cext_version()
            ),
        );
        write(&src.join("cext/rfcext/__init__.py"), "from ._speed import add\n");
        write(&src.join("cext/rfcext/_speed.c"), SPEED_C);
        let out = root.join("wheels");
        // One pip call per version of a project: pip wheel resolves its arguments together.
        pip_wheel(&[&src.join("pure-1.0"), &src.join("cext")], &out);
        pip_wheel(&[&src.join("pure-1.1")], &out);
        let find = |prefix: &str| {
            let found: Vec<PathBuf> = std::fs::read_dir(&out)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
                .collect();
            assert_eq!(found.len(), 1, "{prefix}*: {found:?}");
            found.into_iter().next().unwrap()
        };
        Wheels {
            pure_1_0: find(&format!("rfpure-{}-", pure_version("1.0.0"))),
            pure_1_1: find(&format!("rfpure-{}-", pure_version("1.1.0"))),
            cext: find(&format!("rfcext-{}-cp", cext_version())),
        }
    })
}

fn write_pure_source(dir: &Path, version: &str, value: &str) {
    write(
        &dir.join("setup.py"),
        &format!(
            "from setuptools import setup\nsetup(name=\"rfpure\", version=\"{version}\", packages=[\"rfpure\"])\n"
        ),
    );
    write(&dir.join("rfpure/__init__.py"), &format!("VALUE = \"{value}\"\n"));
}

/// `pip wheel` without network or build isolation, with a fixed SOURCE_DATE_EPOCH (as the
/// build engine sets it) so the same inputs give the same bytes.
fn pip_wheel(sources: &[&Path], out: &Path) {
    run_ok(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "wheel",
                "--no-build-isolation",
                "--no-index",
                "--no-deps",
                "--no-cache-dir",
                "--isolated",
                "-q",
            ])
            .arg("--disable-pip-version-check")
            .arg("-w")
            .arg(out)
            .args(sources)
            .env("SOURCE_DATE_EPOCH", "315532800"),
        "building test wheels with pip wheel",
    );
}

fn only_wheel_in(dir: &Path) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.into_iter().next().unwrap()
}

/// A small wheel written directly (stored, fixed timestamps: the same bytes on every run).
fn synthetic_wheel(dir: &Path, name: &str, version: &str, payload: &str) -> PathBuf {
    crafted_wheel(dir, name, version, payload, |members| members)
}

/// [`synthetic_wheel`] with its members (name, text) changed by `edit` first.
fn crafted_wheel(
    dir: &Path,
    name: &str,
    version: &str,
    payload: &str,
    edit: impl FnOnce(Vec<(String, String)>) -> Vec<(String, String)>,
) -> PathBuf {
    use zip::write::SimpleFileOptions;
    let path = dir.join(format!("{name}-{version}-py3-none-any.whl"));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let opts = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .last_modified_time(zip::DateTime::default());
    let dist_info = format!("{name}-{version}.dist-info");
    let members = vec![
        (format!("{name}/__init__.py"), payload.to_string()),
        (
            format!("{dist_info}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.8\n\n"),
        ),
        (
            format!("{dist_info}/WHEEL"),
            "Wheel-Version: 1.0\nGenerator: rocmforge-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_string(),
        ),
        (format!("{dist_info}/RECORD"), String::new()),
    ];
    for (member, text) in edit(members) {
        zip.start_file(member, opts).unwrap();
        zip.write_all(text.as_bytes()).unwrap();
    }
    zip.finish().unwrap();
    path
}

fn sha256_hex(path: &Path) -> String {
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

/// The index's file:// URL, as `rocmforge index url` prints it.
fn file_url(dir: &Path) -> String {
    let out = rocmforge(dir.parent().unwrap()).args(["index", "--index"]).arg(dir).arg("url").output().unwrap();
    let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(url, format!("file://{}/simple/", dir.display()));
    url
}

fn publish_cli(home: &Path, index: &Path, wheels: &[&Path]) -> String {
    let out = rocmforge(home).arg("index").arg("--index").arg(index).arg("publish").args(wheels).output().unwrap();
    assert!(out.status.success(), "publish failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Clients

/// A fresh venv made by `python3 -m venv` (with its own pip).
fn pip_venv(dir: &Path) -> PathBuf {
    run_ok(Command::new("python3").args(["-m", "venv"]).arg(dir), "python3 -m venv");
    dir.join("bin/python")
}

/// `pip install` into the venv of `python`, from `index_url` only, no cache, short timeouts.
fn pip_install(python: &Path, index_url: &str, args: &[&str]) -> std::process::Output {
    Command::new(python)
        .args(["-m", "pip", "install", "--isolated", "--no-cache-dir", "--disable-pip-version-check", "--no-input"])
        .args(["--timeout", "5", "--retries", "0", "--index-url", index_url])
        .args(args)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .output()
        .unwrap()
}

/// uv with no user config, its cache in `tmp`, no Python downloads, short timeouts.
fn uv(tmp: &Path) -> Command {
    let mut c = Command::new("uv");
    c.env("UV_CACHE_DIR", tmp.join("uv-cache"))
        .env("UV_PYTHON_DOWNLOADS", "never")
        .env("UV_HTTP_TIMEOUT", "10")
        .env("UV_NO_CONFIG", "1");
    for var in [
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
        "UV_INDEX",
        "UV_DEFAULT_INDEX",
        "UV_FIND_LINKS",
        "UV_CONFIG_FILE",
        "VIRTUAL_ENV",
    ] {
        c.env_remove(var);
    }
    c
}

fn uv_venv(tmp: &Path, dir: &Path) -> PathBuf {
    run_ok(uv(tmp).args(["venv", "-q", "--python", "python3"]).arg(dir), "uv venv");
    dir.join("bin/python")
}

fn uv_install(tmp: &Path, python: &Path, index_url: &str, args: &[&str]) -> std::process::Output {
    uv(tmp)
        .args(["pip", "install", "--python"])
        .arg(python)
        .args(["--index-url", index_url])
        .args(args)
        .output()
        .unwrap()
}

fn assert_ok(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({})\n[stdout]\n{}\n[stderr]\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `name==version` of what is installed in the venv of `python`.
fn installed(python: &Path, name: &str) -> String {
    let code = format!("import importlib.metadata as m; print(m.version('{name}'))");
    run_ok(Command::new(python).args(["-c", &code]), "reading the installed version").trim().to_string()
}

/// Imports both packages and runs the C extension.
fn check_imports(python: &Path) {
    let out = run_ok(
        Command::new(python).args(["-c", "import rfcext, rfpure; print(rfcext.add(40, 2), rfpure.VALUE)"]),
        "importing",
    );
    assert_eq!(out.trim(), "42 pure-1.0.0");
}

// ---------------------------------------------------------------------------------------------
// The server

/// `rocmforge index serve --bind 127.0.0.1:0`, stopped with SIGTERM on drop.
struct Served {
    child: Child,
    url: String,
    addr: String,
    log: PathBuf,
}

impl Served {
    fn start(home: &Path, index: &Path) -> Served {
        let log = home.join("serve.log");
        // assert_cmd cannot spawn; the same clean environment as `support::rocmforge`.
        let mut child = Command::new(env!("CARGO_BIN_EXE_rocmforge"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_STATE_HOME", home.join("state"))
            .arg("index")
            .arg("--index")
            .arg(index)
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().to_string();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with("/simple/"),
            "first line {url:?}; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let addr = url.trim_start_matches("http://").trim_end_matches("/simple/").to_string();
        Served { child, url, addr, log }
    }

    fn signal(&self, sig: Signal) {
        let _ = rustix::process::kill_process(Pid::from_child(&self.child), sig);
    }

    /// Waits (at most 5 s) for the server to exit.
    fn wait(&mut self) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(Signal::TERM);
            if self.wait().is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

struct HttpReply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpReply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One raw HTTP/1.1 request: the target is sent exactly as given (no client-side
/// normalisation of `..` or escapes).
fn http(addr: &str, method: &str, target: &str, accept: Option<&str>) -> HttpReply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(a) = accept {
        req.push_str(&format!("Accept: {a}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    HttpReply { status, headers, body: raw[split + 4..].to_vec() }
}

// ---------------------------------------------------------------------------------------------
// Publishing, listing, yanking

#[test]
fn publish_list_yank_and_pages() {
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    let w = home.path().join("w");
    std::fs::create_dir_all(&w).unwrap();
    let a = synthetic_wheel(&w, "Rf_Demo", "1.0.0+rocm6.2.4.gfx1010.k00000001", "A = 1\n");
    let b = synthetic_wheel(&w, "Rf_Demo", "1.1.0", "A = 2\n");
    let out = publish_cli(home.path(), &idx, &[&a, &b]);
    assert!(out.starts_with("published  Rf_Demo-1.0.0+rocm6.2.4.gfx1010.k00000001-py3-none-any.whl"), "{out}");
    // Same bytes again: a no-op that leaves every file untouched.
    let before = tree(&idx);
    let out = publish_cli(home.path(), &idx, &[&a]);
    assert!(out.starts_with("unchanged  Rf_Demo-1.0.0"), "{out}");
    assert_eq!(tree(&idx), before, "re-publishing the same bytes changed the index");

    rocmforge(home.path())
        .args(["index", "--index"])
        .arg(&idx)
        .args(["yank", "rf-demo", "1.1.0", "--reason", "broken <build>"])
        .assert()
        .success()
        .stdout("yanked Rf_Demo-1.1.0-py3-none-any.whl\n");
    let page = std::fs::read_to_string(idx.join("simple/rf-demo/index.html")).unwrap();
    insta::assert_snapshot!("project_page", page);
    insta::assert_snapshot!("root_page", std::fs::read_to_string(idx.join("simple/index.html")).unwrap());
    // The PEP 658 file is the wheel's METADATA, byte for byte.
    assert_eq!(
        std::fs::read_to_string(idx.join("simple/rf-demo/Rf_Demo-1.1.0-py3-none-any.whl.metadata")).unwrap(),
        "Metadata-Version: 2.1\nName: Rf_Demo\nVersion: 1.1.0\nRequires-Python: >=3.8\n\n"
    );

    let list = rocmforge(home.path()).args(["index", "--index"]).arg(&idx).arg("list").output().unwrap();
    insta::assert_snapshot!("list", String::from_utf8(list.stdout).unwrap());
    rocmforge(home.path())
        .args(["index", "--index"])
        .arg(&idx)
        .args(["yank", "Rf_Demo-1.1.0-py3-none-any.whl", "--undo"])
        .assert()
        .success()
        .stdout("un-yanked Rf_Demo-1.1.0-py3-none-any.whl\n");
    assert!(!std::fs::read_to_string(idx.join("simple/rf-demo/index.html")).unwrap().contains("data-yanked"));
    let json = rocmforge(home.path()).args(["index", "--index"]).arg(&idx).args(["list", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["projects"]["rf-demo"]["files"][1]["sha256"], sha256_hex(&b));

    // Wrong input: not a wheel, unknown release.
    let junk = w.join("notes.txt");
    std::fs::write(&junk, "x").unwrap();
    let out = rocmforge(home.path()).args(["index", "--index"]).arg(&idx).arg("publish").arg(&junk).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a wheel filename"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out =
        rocmforge(home.path()).args(["index", "--index"]).arg(&idx).args(["yank", "rf-demo", "9.9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn metadata_must_match_filename() {
    let home = tempfile::tempdir().unwrap();
    let w = synthetic_wheel(home.path(), "rfx", "1.0", "");
    let renamed = home.path().join("rfx-2.0-py3-none-any.whl");
    std::fs::rename(&w, &renamed).unwrap();
    let out = rocmforge(home.path())
        .args(["index", "--index"])
        .arg(home.path().join("idx"))
        .arg("publish")
        .arg(&renamed)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("METADATA says version `1.0` but the filename says `2.0`"), "{err}");
    assert!(!home.path().join("idx/index.json").exists());
}

#[test]
fn publishing_a_file_that_does_not_exist_says_so() {
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("rfx-1.0-py3-none-any.whl");
    let out = rocmforge(home.path()).args(["index", "publish"]).arg(&missing).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("`{}` does not exist: give the path of a wheel file", missing.display())), "{err}");
    assert!(!err.contains("inside the wheel"), "{err}");
}

/// A FIFO named like a wheel is refused at once, naming it (opening it would wait for a writer
/// for ever).
#[test]
fn publishing_a_fifo_refuses_it_without_waiting() {
    let home = tempfile::tempdir().unwrap();
    let fifo = home.path().join("rfx-1.0-py3-none-any.whl");
    crate::support::mkfifo(&fifo);
    let out = rocmforge(home.path())
        .args(["index", "--index"])
        .arg(home.path().join("idx"))
        .arg("publish")
        .arg(&fifo)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("cannot open `{}`", fifo.display())), "{err}");
    assert!(err.contains("not a regular file: a FIFO (named pipe)"), "{err}");
    assert!(!home.path().join("idx/index.json").exists());
}

#[test]
fn default_index_dir_is_under_state_dir() {
    let home = tempfile::tempdir().unwrap();
    let w = synthetic_wheel(home.path(), "rfx", "1.0", "");
    rocmforge(home.path()).args(["index", "publish"]).arg(&w).assert().success();
    assert!(home.path().join("state/rocmforge/index/simple/rfx/rfx-1.0-py3-none-any.whl").is_file());
    let other = home.path().join("elsewhere");
    rocmforge(home.path())
        .env("ROCMFORGE_INDEX_DIR", &other)
        .args(["index", "list"])
        .assert()
        .success()
        .stdout(format!("the index at {} is empty\n", other.display()));
}

#[test]
fn a_second_wheel_for_one_release_under_another_spelling_is_refused_naming_the_first() {
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    let (a, b) = (home.path().join("a"), home.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let publish = |wheels: &[&Path]| {
        rocmforge(home.path()).args(["index", "--index"]).arg(&idx).arg("publish").args(wheels).output().unwrap()
    };
    let first = synthetic_wheel(&a, "Foo_Bar", "1.0", "X = 1\n");
    let one = synthetic_wheel(&a, "rfx", "1.0", "X = 1\n");
    publish_cli(home.path(), &idx, &[&first, &one]);
    let before = tree(&idx);
    for (offered, named) in [
        // Names equal after PEP 503 normalisation.
        (synthetic_wheel(&b, "foo_bar", "1.0", "X = 2\n"), "Foo_Bar-1.0-py3-none-any.whl"),
        // Versions equal under PEP 440.
        (synthetic_wheel(&b, "rfx", "1.0.0", "X = 2\n"), "rfx-1.0-py3-none-any.whl"),
    ] {
        let out = publish(&[&offered]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("`{}` is the same wheel as `{named}`, already published:", offered.display())),
            "{err}"
        );
        assert_eq!(tree(&idx), before, "a refused publish changed the index");
    }
    // Two spellings in one publish: the second is refused, nothing is published.
    let (c, d) = (home.path().join("c"), home.path().join("d"));
    std::fs::create_dir_all(&c).unwrap();
    std::fs::create_dir_all(&d).unwrap();
    let x = synthetic_wheel(&c, "rfz", "2.0", "Z = 1\n");
    let y = synthetic_wheel(&d, "rfz", "2.0.0", "Z = 2\n");
    let out = publish(&[&x, &y]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "`{}` is the same wheel as `rfz-2.0-py3-none-any.whl`, earlier in this publish",
            y.display()
        )),
        "{err}"
    );
    assert_eq!(tree(&idx), before);
}

#[test]
fn wheels_pip_refuses_are_refused_at_publish_naming_the_wheel_and_the_member() {
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    type Edit = Box<dyn Fn(Vec<(String, String)>) -> Vec<(String, String)>>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "no-record",
            Box::new(|m| m.into_iter().filter(|(n, _)| !n.ends_with("/RECORD")).collect()),
            "the wheel has no `rfx-1.0.dist-info/RECORD`: pip refuses to install a wheel without its RECORD",
        ),
        (
            "dotdot",
            Box::new(|mut m| {
                m.push(("rfx/../../evil.py".into(), "E = 1\n".into()));
                m
            }),
            "the wheel's member `rfx/../../evil.py` is an absolute path or has a `..` component",
        ),
        (
            "absolute",
            Box::new(|mut m| {
                m.push(("/etc/evil.conf".into(), "E = 1\n".into()));
                m
            }),
            "the wheel's member `/etc/evil.conf` is an absolute path or has a `..` component",
        ),
    ];
    for (dir, edit, want) in cases {
        let dir = home.path().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let w = crafted_wheel(&dir, "rfx", "1.0", "X = 1\n", edit);
        let out = rocmforge(home.path()).args(["index", "--index"]).arg(&idx).arg("publish").arg(&w).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("`{}` is not a wheel the index accepts", w.display())), "{err}");
        assert!(err.contains(want), "{err}");
        assert!(!idx.join("index.json").exists(), "{err}");
    }
}

#[test]
fn cache_verify_lists_a_temp_file_of_a_publish_killed_before_the_first_index_write() {
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    // What a first publish killed while copying its wheel leaves, in the index and in a
    // stack's own index (`index-path`): a temp file, no `index.json` yet.
    let left = [idx.join("simple/rfx/.tmp-Ab12Cd"), idx.join("rocm-5.2-binary/simple/torch/.tmp-Ef34Gh")];
    for l in &left {
        std::fs::create_dir_all(l.parent().unwrap()).unwrap();
        std::fs::write(l, b"half a wheel").unwrap();
    }
    let verify = || rocmforge(home.path()).env("ROCMFORGE_INDEX_DIR", &idx).args(["cache", "verify"]).output().unwrap();
    let out = verify();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for l in &left {
        assert!(err.contains(&format!("error: `{}` was left by a killed publish", l.display())), "{err}");
    }
    assert!(err.contains("2 leftover(s) of interrupted work (`rocmforge cache gc` removes them)"), "{err}");
    rocmforge(home.path()).env("ROCMFORGE_INDEX_DIR", &idx).args(["cache", "gc"]).assert().success();
    assert!(left.iter().all(|l| !l.exists()));
    let out = verify();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_web_server_running_as_another_user_can_read_every_published_file() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    // The user's own dirs are theirs to open up (a temp dir is 0700); the index's are ours.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let idx = home.path().join("idx");
    let w = home.path().join("w");
    std::fs::create_dir_all(&w).unwrap();
    let wheel = synthetic_wheel(&w, "rf_served", "1.0", "A = 1\n");
    // Published under the usual umask (022), whatever the test runner's is.
    let out = Command::new("sh")
        .args(["-c", "umask 022 && exec \"$@\"", "sh"])
        .arg(assert_cmd::cargo::cargo_bin("rocmforge"))
        .args(["index", "--index"])
        .arg(&idx)
        .arg("publish")
        .arg(&wheel)
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path().join("state"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files: Vec<PathBuf> = walkdir::WalkDir::new(&idx)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    for want in ["simple/index.html", "simple/rf-served/index.html", "simple/rf-served/rf_served-1.0-py3-none-any.whl"]
    {
        assert!(files.contains(&idx.join(want)), "{want} not published: {files:?}");
    }
    // Read as `nobody`, as nginx or `python3 -m http.server` run by another user would.
    for f in &files {
        let read = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
            .arg(f)
            .output()
            .expect("setpriv (util-linux) runs a command as another user");
        assert!(
            read.status.success() && read.stdout == std::fs::read(f).unwrap(),
            "another user cannot read {} (mode {:o}): {}",
            f.display(),
            std::fs::metadata(f).unwrap().permissions().mode() & 0o7777,
            String::from_utf8_lossy(&read.stderr)
        );
    }
}

/// Every file of the index with its bytes (the lock file aside).
fn tree(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut out: Vec<_> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            (
                e.path().strip_prefix(dir).unwrap().display().to_string(),
                std::fs::read(e.path()).unwrap(),
                e.metadata().unwrap().modified().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn other_bytes_under_a_published_name_are_refused_and_nothing_changes() {
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    let (w1, w2) = (home.path().join("w1"), home.path().join("w2"));
    std::fs::create_dir_all(&w1).unwrap();
    std::fs::create_dir_all(&w2).unwrap();
    let original = synthetic_wheel(&w1, "rfx", "1.0", "X = 1\n");
    let rebuilt = synthetic_wheel(&w2, "rfx", "1.0", "X = 2\n");
    let fresh = synthetic_wheel(&w2, "rfy", "1.0", "Y = 1\n");
    publish_cli(home.path(), &idx, &[&original]);
    let before = tree(&idx);

    let out =
        rocmforge(home.path()).args(["index", "--index"]).arg(&idx).arg("publish").arg(&rebuilt).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`rfx-1.0-py3-none-any.whl` is already published with different bytes"), "{err}");
    assert!(err.contains(&sha256_hex(&original)) && err.contains(&sha256_hex(&rebuilt)), "{err}");
    assert_eq!(tree(&idx), before, "a refused publish changed the index");

    // All or none: a batch with one conflicting wheel publishes nothing.
    let out = rocmforge(home.path())
        .args(["index", "--index"])
        .arg(&idx)
        .arg("publish")
        .arg(&fresh)
        .arg(&rebuilt)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(tree(&idx), before, "a refused batch changed the index");

    // The library API the build engine calls says the same.
    let e = index::publish(&idx, &rebuilt).unwrap_err();
    assert!(matches!(e, index::IndexError::Conflict { .. }), "{e}");
    assert_eq!(index::publish(&idx, &original).unwrap(), PublishOutcome::AlreadyPresent);
    assert_eq!(index::publish(&idx, &fresh).unwrap(), PublishOutcome::Published);
}

/// Checks one page read by a reader: complete, and every file it links is there, whole.
fn check_page(idx: &Path, rel: &str) -> Result<usize, String> {
    let page = match std::fs::read_to_string(idx.join(rel)) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(format!("{rel}: {e}")),
    };
    if !page.starts_with("<!DOCTYPE html>\n") || !page.ends_with("</body>\n</html>\n") {
        return Err(format!("{rel} is incomplete:\n{page}"));
    }
    let dir = idx.join(rel).parent().unwrap().to_path_buf();
    let mut links = 0;
    for part in page.split("<a href=\"").skip(1) {
        let href = &part[..part.find('"').unwrap()];
        links += 1;
        if let Some((file, hash)) = href.split_once("#sha256=") {
            let name = file.replace("%2B", "+");
            let bytes =
                std::fs::read(dir.join(&name)).map_err(|e| format!("{rel} links {name}, which cannot be read: {e}"))?;
            if hex::encode(sha2::Sha256::digest(&bytes)) != hash {
                return Err(format!("{rel} links {name} with a hash the file does not have"));
            }
            if !dir.join(format!("{name}.metadata")).is_file() {
                return Err(format!("{rel} links {name} but its .metadata is missing"));
            }
        } else if !dir.join(href).join("index.html").is_file() {
            return Err(format!("{rel} links project {href}, whose page is missing"));
        }
    }
    Ok(links)
}

#[test]
fn readers_never_see_a_broken_page_during_publishes() {
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    let w = home.path().join("w");
    std::fs::create_dir_all(&w).unwrap();
    let mut batches: Vec<Vec<PathBuf>> = vec![Vec::new(), Vec::new()];
    for i in 0..24 {
        let name = format!("rfp{}", i % 4);
        batches[i % 2].push(synthetic_wheel(&w, &name, &format!("1.{i}"), &"x".repeat(1000 * i)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (idx, stop) = (idx.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) {
                check_page(&idx, "simple/index.html")?;
                for p in 0..4 {
                    check_page(&idx, &format!("simple/rfp{p}/index.html"))?;
                }
                reads += 1;
            }
            Ok::<usize, String>(reads)
        })
    };
    // Two writers at once: the index lock keeps their updates from overwriting each other.
    let writers: Vec<_> = batches
        .into_iter()
        .map(|batch| {
            let idx = idx.clone();
            std::thread::spawn(move || {
                for wheel in batch {
                    assert_eq!(index::publish(&idx, &wheel).unwrap(), PublishOutcome::Published);
                }
            })
        })
        .collect();
    for t in writers {
        t.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let reads = reader.join().unwrap().unwrap_or_else(|e| panic!("a reader saw a broken index: {e}"));
    assert!(reads > 0);
    let links: usize = (0..4).map(|p| check_page(&idx, &format!("simple/rfp{p}/index.html")).unwrap()).sum();
    assert_eq!(links, 24, "every publish is in the final index");
    let leftovers: Vec<_> = walkdir::WalkDir::new(&idx)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
}

// ---------------------------------------------------------------------------------------------
// Real clients

#[test]
fn pip_installs_from_file_url_with_a_pinned_version() {
    let wheels = wheels();
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    publish_cli(home.path(), &idx, &wheels.all());
    let python = pip_venv(&home.path().join("venv"));
    let url = file_url(&idx);
    // The pin names the public version; the local label (+rocm6.2.4.gfx1010.k…) still matches,
    // and the newer 1.1.0 is passed over.
    assert_ok(&pip_install(&python, &url, &["rfpure==1.0.0"]), "pip install rfpure==1.0.0");
    assert_eq!(installed(&python, "rfpure"), pure_version("1.0.0"));
    assert_ok(&pip_install(&python, &url, &["rfcext"]), "pip install rfcext");
    assert_eq!(installed(&python, "rfcext"), cext_version());
    check_imports(&python);
}

#[test]
fn uv_installs_from_file_url_and_skips_yanked() {
    let wheels = wheels();
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    publish_cli(home.path(), &idx, &wheels.all());
    let url = file_url(&idx);
    let python = uv_venv(home.path(), &home.path().join("venv"));
    assert_ok(&uv_install(home.path(), &python, &url, &["rfcext==2.6.0"]), "uv pip install rfcext==2.6.0");
    assert_eq!(installed(&python, "rfcext"), cext_version());
    assert_eq!(installed(&python, "rfpure"), pure_version("1.0.0"));
    check_imports(&python);

    // Unpinned, the newest wins; once it is yanked, the one before it does.
    let python = uv_venv(home.path(), &home.path().join("venv2"));
    assert_ok(&uv_install(home.path(), &python, &url, &["rfpure"]), "uv pip install rfpure");
    assert_eq!(installed(&python, "rfpure"), pure_version("1.1.0"));
    rocmforge(home.path())
        .args(["index", "--index"])
        .arg(&idx)
        .args(["yank", "rfpure", &pure_version("1.1.0")])
        .assert()
        .success();
    let python = uv_venv(home.path(), &home.path().join("venv3"));
    assert_ok(
        &uv_install(home.path(), &python, &url, &["--refresh", "rfpure"]),
        "uv pip install rfpure after the yank",
    );
    assert_eq!(installed(&python, "rfpure"), pure_version("1.0.0"));
}

#[test]
fn rebuilds_republish_as_a_noop_or_under_a_new_name() {
    let wheels = wheels();
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    publish_cli(home.path(), &idx, &wheels.all());
    let before = tree(&idx);

    // A resumed build: same inputs, another checkout and build dir, same bytes: a no-op.
    write_pure_source(&home.path().join("again"), &pure_version("1.0.0"), "pure-1.0.0");
    pip_wheel(&[&home.path().join("again")], &home.path().join("again-out"));
    let again = only_wheel_in(&home.path().join("again-out"));
    assert_eq!(std::fs::read(&again).unwrap(), std::fs::read(&wheels.pure_1_0).unwrap(), "same inputs, same bytes");
    assert!(publish_cli(home.path(), &idx, &[&again]).starts_with("unchanged  rfpure-1.0.0+"));
    assert_eq!(tree(&idx), before);

    // A rebuild with a new patch: a new cache key, so a new label and filename, published
    // beside the old one instead of being refused.
    let new_key = hex::encode(sha2::Sha256::digest(b"fixture cache key + 0002-new.patch"));
    let version = index::local_version("1.0.0", "6.2.4", &["gfx1010"], 0, &new_key);
    assert_ne!(version, pure_version("1.0.0"));
    write_pure_source(&home.path().join("patched"), &version, "pure-1.0.0-patched");
    pip_wheel(&[&home.path().join("patched")], &home.path().join("patched-out"));
    let patched = only_wheel_in(&home.path().join("patched-out"));
    assert!(publish_cli(home.path(), &idx, &[&patched]).starts_with(&format!("published  rfpure-{version}-")));
    let state = index::list(&idx).unwrap();
    assert_eq!(state.projects["rfpure"].files.len(), 3);
}

/// A `--require-hashes` requirements file for the published wheels, pinned to the full
/// versions (local label included) as `pip freeze` and `uv pip compile --generate-hashes`
/// write them; uv looks hashes up by the exact version, so it needs the label there.
fn hashed_requirements(dir: &Path, wheels: &Wheels, wrong: bool) -> PathBuf {
    let pure_hash = if wrong { "0".repeat(64) } else { sha256_hex(&wheels.pure_1_0) };
    let text = format!(
        "rfcext=={} --hash=sha256:{}\nrfpure=={} --hash=sha256:{pure_hash}\n",
        cext_version(),
        sha256_hex(&wheels.cext),
        pure_version("1.0.0")
    );
    let path = dir.join(if wrong { "wrong.txt" } else { "requirements.txt" });
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn pip_installs_from_the_server_with_hash_checking() {
    let wheels = wheels();
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    publish_cli(home.path(), &idx, &wheels.all());
    let server = Served::start(home.path(), &idx);
    let python = pip_venv(&home.path().join("venv"));
    let wrong = hashed_requirements(home.path(), wheels, true);
    let out = pip_install(&python, &server.url, &["--require-hashes", "-r", wrong.to_str().unwrap()]);
    assert!(!out.status.success(), "pip accepted a wrong hash");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("DO NOT MATCH THE HASHES"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let req = hashed_requirements(home.path(), wheels, false);
    assert_ok(
        &pip_install(&python, &server.url, &["--require-hashes", "-r", req.to_str().unwrap()]),
        "pip install --require-hashes",
    );
    assert_eq!(installed(&python, "rfcext"), cext_version());
    check_imports(&python);
    // pip asked for PEP 691 JSON and got it.
    let log = server.log();
    assert!(log.contains("GET /simple/rfcext/ 200 application/vnd.pypi.simple.v1+json"), "{log}");
}

#[test]
fn uv_installs_from_the_server_with_hash_checking() {
    let wheels = wheels();
    let home = tempfile::tempdir().unwrap();
    let idx = home.path().join("idx");
    publish_cli(home.path(), &idx, &wheels.all());
    let server = Served::start(home.path(), &idx);
    let python = uv_venv(home.path(), &home.path().join("venv"));
    let wrong = hashed_requirements(home.path(), wheels, true);
    let out = uv_install(home.path(), &python, &server.url, &["--require-hashes", "-r", wrong.to_str().unwrap()]);
    assert!(!out.status.success(), "uv accepted a wrong hash");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Hash mismatch for `rfpure"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let req = hashed_requirements(home.path(), wheels, false);
    assert_ok(
        &uv_install(home.path(), &python, &server.url, &["--require-hashes", "-r", req.to_str().unwrap()]),
        "uv pip install --require-hashes",
    );
    assert_eq!(installed(&python, "rfpure"), pure_version("1.0.0"));
    check_imports(&python);
    let log = server.log();
    assert!(log.contains("GET /simple/rfpure/ 200 application/vnd.pypi.simple.v1+json"), "{log}");
}

// ---------------------------------------------------------------------------------------------
// The server on its own

fn served_synthetic(home: &Path) -> (PathBuf, Served) {
    let idx = home.join("idx");
    let w = synthetic_wheel(home, "rfx", "1.0+rocm6.2.4", "X = 1\n");
    publish_cli(home, &idx, &[&w]);
    std::fs::write(home.join("secret.txt"), "TOP-SECRET").unwrap();
    let served = Served::start(home, &idx);
    (idx, served)
}

#[test]
fn server_answers_json_when_asked_and_html_otherwise() {
    let home = tempfile::tempdir().unwrap();
    let (idx, server) = served_synthetic(home.path());
    let json = "application/vnd.pypi.simple.v1+json";
    let r = http(&server.addr, "GET", "/simple/rfx/", Some(json));
    assert_eq!((r.status, r.header("Content-Type")), (200, Some(json)));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["meta"]["api-version"], "1.1");
    assert_eq!(v["files"][0]["filename"], "rfx-1.0+rocm6.2.4-py3-none-any.whl");
    assert_eq!(v["files"][0]["requires-python"], ">=3.8");
    let r = http(&server.addr, "GET", "/simple/", Some(json));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["projects"][0]["name"], "rfx");

    let r = http(&server.addr, "GET", "/simple/rfx/", None);
    assert_eq!((r.status, r.header("Content-Type")), (200, Some("text/html; charset=utf-8")));
    assert_eq!(
        r.text(),
        std::fs::read_to_string(idx.join("simple/rfx/index.html")).unwrap(),
        "served HTML = the file:// page"
    );
    let r = http(&server.addr, "GET", "/simple/rfx/", Some("text/html, application/vnd.pypi.simple.v1+json;q=0.5"));
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));

    let r = http(&server.addr, "GET", "/simple/rfx/rfx-1.0%2Brocm6.2.4-py3-none-any.whl", None);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, std::fs::read(idx.join("simple/rfx/rfx-1.0+rocm6.2.4-py3-none-any.whl")).unwrap());
    let r = http(&server.addr, "HEAD", "/simple/rfx/rfx-1.0%2Brocm6.2.4-py3-none-any.whl.metadata", None);
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert_eq!(http(&server.addr, "GET", "/simple/RFX/", None).header("Location"), Some("/simple/rfx/"));
    assert_eq!(http(&server.addr, "POST", "/simple/", None).status, 405);
    assert_eq!(http(&server.addr, "GET", "/simple/nothing/", None).status, 404);
}

#[test]
fn server_serves_nothing_outside_the_index() {
    let home = tempfile::tempdir().unwrap();
    let (_idx, server) = served_synthetic(home.path());
    for target in [
        "/../secret.txt",
        "/simple/../../secret.txt",
        "/simple/../index.json",
        "/simple/rfx/../../../secret.txt",
        "/simple/%2e%2e/%2e%2e/secret.txt",
        "/simple/%2e%2e%2f%2e%2e%2fsecret.txt",
        "/simple/%2E%2E%2F%2E%2E%2Fsecret.txt",
        "/simple/..%2f..%2fsecret.txt",
        "/simple/rfx/%2e%2e%2f%2e%2e%2f%2e%2e%2fsecret.txt",
        "/simple/%252e%252e%252f%252e%252e%252fsecret.txt",
        "/simple\\..\\..\\secret.txt",
        "/simple/..\\..\\secret.txt",
        "/simple/%5c..%5c..%5csecret.txt",
        "/simple/rfx/..%5c..%5c..%5csecret.txt",
        "/simple/%c0%ae%c0%ae/secret.txt",
        "/index.json",
        "/simple/.lock",
        "/secret.txt",
        "//secret.txt",
        "/simple//../secret.txt",
    ] {
        let r = http(&server.addr, "GET", target, None);
        assert!(matches!(r.status, 400 | 404), "{target}: {} {}", r.status, r.text());
        assert!(
            !r.text().contains("TOP-SECRET") && !r.text().contains("\"projects\""),
            "{target} leaked: {}",
            r.text()
        );
    }
}

#[test]
fn server_stops_cleanly_on_sigint_and_sigterm() {
    for sig in [Signal::INT, Signal::TERM] {
        let home = tempfile::tempdir().unwrap();
        let (_idx, mut server) = served_synthetic(home.path());
        assert_eq!(http(&server.addr, "GET", "/simple/", None).status, 200);
        server.signal(sig);
        let sig = sig.as_raw();
        let status = server.wait().unwrap_or_else(|| panic!("the server ignored signal {sig}"));
        assert!(status.success(), "signal {sig}: {status}");
        assert!(server.log().ends_with("stopped\n"), "{}", server.log());
        assert!(TcpStream::connect(&server.addr).is_err(), "still listening after signal {sig}");
    }
}
