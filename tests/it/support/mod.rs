//! Shared test helpers: running the binary, fixture trees, path scrubbing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub mod archive;
pub mod git;
pub mod host;
pub mod http;
pub mod kpack;
pub mod procs;
pub mod tls;
pub mod wheel;
pub mod nginx;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fixture recipe tree (11 recipes shaped like the real stack).
pub fn fixture_tree() -> PathBuf {
    repo_root().join("tests/fixtures/tree")
}

/// `rocmforge` with a clean environment: no user config, dirs inside `home`.
pub fn rocmforge(home: &Path) -> Command {
    Command::from_std(rocmforge_process(home))
}

/// [`rocmforge`] as a plain process, to spawn, signal and stop.
pub fn rocmforge_process(home: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("rocmforge"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("NO_COLOR", "1");
    c
}

/// Copies a directory tree (for tests that edit a fixture).
pub fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(from).unwrap();
        let dst = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// Replaces `path` in `text` with `[ROOT]`, for snapshots.
pub fn scrub(text: &str, path: &Path) -> String {
    text.replace(&path.display().to_string(), "[ROOT]")
}

/// Every file under `p` with its bytes, sorted (empty when `p` does not exist): for comparing
/// trees.
pub fn tree_bytes(p: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = walkdir::WalkDir::new(p)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().strip_prefix(p).unwrap().display().to_string(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

/// The script-only fixture stack (`tests/fixtures/scripts`) copied into a temp home: the
/// engine and report tests add their own helpers in `impl ScriptsStack` blocks.
pub struct ScriptsStack {
    pub home: tempfile::TempDir,
    pub tree: PathBuf,
}

impl ScriptsStack {
    pub fn new() -> ScriptsStack {
        let home = tempfile::tempdir().unwrap();
        let tree = home.path().join("tree");
        copy_tree(&repo_root().join("tests/fixtures/scripts"), &tree);
        std::fs::create_dir_all(home.path().join("out")).unwrap();
        ScriptsStack { home, tree }
    }
    /// `<home>/out`: the prefix's parent, where fixture steps count their runs.
    pub fn out(&self) -> PathBuf {
        self.home.path().join("out")
    }
    pub fn prefix(&self) -> PathBuf {
        self.out().join("prefix")
    }
    /// `rocmforge --recipes <tree>` in the temp home.
    pub fn cmd(&self) -> Command {
        let mut c = rocmforge(self.home.path());
        c.arg("--recipes").arg(&self.tree);
        c
    }
    /// `rocmforge --recipes <tree>` in the temp home, as a plain process to spawn and stop.
    pub fn process(&self) -> std::process::Command {
        let mut c = rocmforge_process(self.home.path());
        c.arg("--recipes").arg(&self.tree);
        c
    }
    /// Replaces the first `from` in `recipes/scripts/<recipe>.toml` by `to`.
    pub fn edit(&self, recipe: &str, from: &str, to: &str) {
        let p = self.tree.join(format!("recipes/scripts/{recipe}.toml"));
        let t = std::fs::read_to_string(&p).unwrap();
        assert!(t.contains(from));
        std::fs::write(&p, t.replacen(from, to, 1)).unwrap();
    }
    pub fn state(&self) -> PathBuf {
        self.home.path().join("state/rocmforge")
    }
    pub fn work(&self, recipe: &str) -> PathBuf {
        self.home.path().join("cache/rocmforge/work/scripts").join(recipe)
    }
}

/// The example stack's upstream (`ci/example-sources.sh`: git repos and the hipvec tarball),
/// made under `dir/upstream` and served on 127.0.0.1 (git daemon, HTTP), with a config at
/// `config` whose `[url-rewrite]` points the recipes' URLs at them. Both servers stop on drop.
pub struct ExampleUpstream {
    pub daemon: git::GitDaemon,
    pub http: http::HttpServer,
}

impl ExampleUpstream {
    pub fn serve(dir: &Path, config: &Path) -> ExampleUpstream {
        let up = dir.join("upstream");
        let st = std::process::Command::new("bash")
            .arg(repo_root().join("ci/example-sources.sh"))
            .arg(&up)
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
        let daemon = git::GitDaemon::start(&up.join("git"));
        let http = http::HttpServer::start();
        http.add("hipvec-1.0.0.tar.gz", std::fs::read(up.join("files/hipvec-1.0.0.tar.gz")).unwrap());
        std::fs::write(
            config,
            format!(
                "[url-rewrite]\n\"https://example.invalid/rocmforge/hipvec-1.0.0.tar.gz\" = \"{}\"\n\"https://example.invalid/rocmforge/\" = \"{}\"\n",
                http.url("hipvec-1.0.0.tar.gz"),
                daemon.url("")
            ),
        )
        .unwrap();
        ExampleUpstream { daemon, http }
    }
}

/// The example stack with its upstream on 127.0.0.1 and a recipe tree of the test's own (so a
/// test can edit a patch), in a temp home.
pub struct Example {
    pub home: tempfile::TempDir,
    pub tree: PathBuf,
    pub config: PathBuf,
    pub upstream: ExampleUpstream,
}

impl Example {
    pub fn new() -> Example {
        let home = tempfile::tempdir().unwrap();
        let config = home.path().join("config.toml");
        let upstream = ExampleUpstream::serve(home.path(), &config);
        // A tree of our own, so a test can edit a patch.
        let tree = home.path().join("tree");
        copy_tree(&repo_root().join("recipes/example"), &tree.join("recipes/example"));
        copy_tree(&repo_root().join("patches/example"), &tree.join("patches/example"));
        Example { home, tree, config, upstream }
    }

    pub fn prefix(&self) -> PathBuf {
        self.home.path().join("prefix")
    }

    pub fn cmd(&self, home: &Path) -> assert_cmd::Command {
        assert_cmd::Command::from_std(self.process(home))
    }

    /// [`Example::cmd`] as a plain process, to spawn, signal and stop.
    pub fn process(&self, home: &Path) -> std::process::Command {
        let mut c = rocmforge_process(home);
        c.env("ROCMFORGE_CONFIG", &self.config)
            .env("PIP_NO_INDEX", "1")
            .env("PIP_FIND_LINKS", wheelhouse())
            .env("ROCMFORGE_RETRIES", "1")
            .env("ROCMFORGE_RETRY_BASE_MS", "10")
            .arg("--recipes")
            .arg(&self.tree)
            .args(["--stack", "example"]);
        c
    }

    pub fn build(&self, home: &Path, prefix: &Path, args: &[&str]) -> std::process::Output {
        self.cmd(home).args(["build", "--prefix"]).arg(prefix).args(args).output().unwrap()
    }

    /// One work dir path for every run of the crash test: compilers record source paths (debug
    /// info of the Python extension), so only builds made in the same place are byte-identical.
    pub fn shared_work(&self) -> PathBuf {
        let w = self.home.path().join("work");
        let _ = std::fs::remove_dir_all(&w);
        w
    }
}

/// The wheelhouse of setuptools and wheel that tests build wheels with offline
/// (`ROCMFORGE_TEST_WHEELHOUSE`, else `target/wheelhouse`, which ci/setup.sh fills).
pub fn wheelhouse() -> PathBuf {
    let p = std::env::var_os("ROCMFORGE_TEST_WHEELHOUSE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/wheelhouse"));
    assert!(p.is_dir(), "no wheelhouse at {}: run ci/setup.sh (it downloads setuptools and wheel there)", p.display());
    p
}

/// A finished command's status, stdout and stderr, for assertions and their messages.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "[status] {}\n[stdout]\n{}\n[stderr]\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every file of a tree with the sha256 of its bytes (a symlink: of its target path), sorted;
/// those below the top-level folders `skip` are left out.
pub fn snapshot(p: &Path, skip: &[&str]) -> Vec<(String, String)> {
    use sha2::Digest;
    let mut v: Vec<(String, String)> = walkdir::WalkDir::new(p)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| !e.file_type().is_dir() && !skip.iter().any(|s| e.path().starts_with(p.join(s))))
        .map(|e| {
            let bytes = if e.file_type().is_symlink() {
                std::fs::read_link(e.path()).unwrap().display().to_string().into_bytes()
            } else {
                std::fs::read(e.path()).unwrap()
            };
            (e.path().strip_prefix(p).unwrap().display().to_string(), hex::encode(sha2::Sha256::digest(&bytes)))
        })
        .collect();
    v.sort();
    v
}

/// Makes a FIFO (named pipe) at `path`: opening it for reading blocks until a writer comes.
pub fn mkfifo(path: &Path) {
    use rustix::fs::{FileType, Mode, CWD};
    rustix::fs::mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o644), 0)
        .unwrap_or_else(|e| panic!("cannot make a FIFO at {}: {e}", path.display()));
}

/// A small tmpfs (this needs root, as CI has): unmounted when dropped.
pub struct SmallDisk(pub PathBuf);

impl SmallDisk {
    pub fn mount(at: PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&at).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(st.success(), "cannot mount a {size} tmpfs at {} (the test needs root)", at.display());
        SmallDisk(at)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A HIP kernel and a host function that launches it (what hipcc compiles in the tests).
pub const HIP_KERNEL: &str = r#"#include <hip/hip_runtime.h>
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
extern "C" void run_axpy(float a, const float* x, float* y, int n) {
  hipLaunchKernelGGL(axpy, dim3((n + 63) / 64), dim3(64), 0, 0, a, x, y, n);
}
"#;

/// Runs hipcc in `dir` (Debian's `hipcc`, installed by ci/setup.sh); panics with its output.
pub fn hipcc(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("hipcc")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run hipcc: {e} (ci/setup.sh installs it)"));
    assert!(
        out.status.success(),
        "hipcc {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The bytes of a shared library holding [`HIP_KERNEL`] compiled for `targets` only, made once
/// per test run and target list.
pub fn hip_library(targets: &[&str]) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "hip-library-{}-{}",
        targets.join("-"),
        std::process::id()
    ));
    let lib = dir.join("libk.so");
    if !lib.is_file() {
        std::fs::create_dir_all(&dir).unwrap();
        // Tests of one run may make the same library at once: each its own source and partial
        // file, each rename whole.
        let me = format!("{:?}", std::thread::current().id()).replace(['(', ')'], "");
        let (source, partial) = (format!("k-{me}.hip"), format!("libk.so.partial-{me}"));
        std::fs::write(dir.join(&source), HIP_KERNEL).unwrap();
        let mut args: Vec<String> = targets.iter().map(|t| format!("--offload-arch={t}")).collect();
        args.extend(["-fPIC", "-shared", source.as_str(), "-o", partial.as_str()].map(String::from));
        hipcc(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
        std::fs::rename(dir.join(&partial), &lib).unwrap();
    }
    std::fs::read(lib).unwrap()
}
