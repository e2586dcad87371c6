//! Git fixtures: repositories made in temp dirs with fixed dates (so commit ids are stable), and
//! a `git daemon` on 127.0.0.1 serving them, killed by its PID on drop.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs git in `dir` with a fixed identity and dates and no user/system config; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.org")
        .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.org")
        .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A work repository (served as is by the daemon).
pub struct Repo {
    pub dir: PathBuf,
    /// (path, commit) of recorded submodules: `add -A` would drop them (no checkout there).
    gitlinks: std::cell::RefCell<Vec<(String, String)>>,
}

impl Repo {
    pub fn init(dir: PathBuf) -> Repo {
        std::fs::create_dir_all(&dir).unwrap();
        git(&dir, &["init", "-q", "-b", "main"]);
        Repo { dir, gitlinks: Default::default() }
    }

    pub fn write(&self, rel: &str, text: &str) -> &Repo {
        let p = self.dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    /// Records `commit` as the submodule at `path`, with `url` in .gitmodules.
    pub fn submodule(&self, path: &str, url: &str, commit: &str) -> &Repo {
        let gm = self.dir.join(".gitmodules");
        let mut text = std::fs::read_to_string(&gm).unwrap_or_default();
        text.push_str(&format!("[submodule \"{path}\"]\n\tpath = {path}\n\turl = {url}\n"));
        std::fs::write(gm, text).unwrap();
        self.gitlinks.borrow_mut().push((path.to_string(), commit.to_string()));
        self
    }

    /// Commits everything; returns the commit id.
    pub fn commit(&self, msg: &str) -> String {
        git(&self.dir, &["add", "-A"]);
        for (path, commit) in self.gitlinks.borrow().iter() {
            git(&self.dir, &["update-index", "--add", "--cacheinfo", &format!("160000,{commit},{path}")]);
        }
        git(&self.dir, &["commit", "-q", "-m", msg]);
        git(&self.dir, &["rev-parse", "HEAD"])
    }

    pub fn tag(&self, name: &str, commit: &str) {
        git(&self.dir, &["tag", "-f", "-a", "-m", name, name, commit]);
    }
}

/// `git daemon` serving `base` on 127.0.0.1.
pub struct GitDaemon {
    pub port: u16,
    child: Child,
    /// The server's own PID, from the pid file it writes: `git daemon` runs `git-daemon` as a
    /// child of the `git` process we started, so killing that process alone would leave the
    /// server running. (Read at start: the folder holding the file may be gone by drop time.)
    pid: i32,
}

impl GitDaemon {
    pub fn start(base: &Path) -> GitDaemon {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let pid_file = base.join("daemon.pid");
        let child = Command::new("git")
            .arg("daemon")
            .arg("--export-all")
            .arg("--reuseaddr")
            .arg("--informative-errors")
            .arg(format!("--base-path={}", base.display()))
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(format!("--pid-file={}", pid_file.display()))
            .arg(base)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon starts (Debian: the `git` package has it; run ci/setup.sh)");
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(10), "git daemon did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let start = Instant::now();
        let pid = loop {
            let read = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok());
            if let Some(pid) = read {
                break pid;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "git daemon wrote no {}", pid_file.display());
            std::thread::sleep(Duration::from_millis(20));
        };
        GitDaemon { port, child, pid }
    }

    pub fn url(&self, path: &str) -> String {
        format!("git://127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for GitDaemon {
    /// Stops the server by the PID it wrote, then the `git` process that started it.
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three repositories served as `test/{top,mid,leaf}.git`: top has `third_party/mid` (URL on
/// github.com, to be rewritten), mid has `deps/leaf` (relative URL `../leaf.git`).
pub struct Forest {
    pub base: PathBuf,
    pub top: Repo,
    pub mid: Repo,
    pub leaf: Repo,
    /// top's pinned commit (tag `v1`), and a later one (tag `v2`, branch tip).
    pub t1: String,
    pub t2: String,
    pub m1: String,
    pub l1: String,
}

pub fn forest(base: &Path) -> Forest {
    let leaf = Repo::init(base.join("test/leaf.git"));
    let l1 = leaf.write("leaf.txt", "leaf\n").commit("leaf");
    let mid = Repo::init(base.join("test/mid.git"));
    mid.write("mid.txt", "mid\n").submodule("deps/leaf", "../leaf.git", &l1);
    let m1 = mid.commit("mid");
    let top = Repo::init(base.join("test/top.git"));
    top.write("src/main.c", "int main(void)\n{\n    return 0;\n}\n").write("README", "top\n").submodule(
        "third_party/mid",
        "https://github.com/test/mid.git",
        &m1,
    );
    let t1 = top.commit("top 1");
    top.tag("v1", &t1);
    let t2 = top.write("README", "top, later\n").commit("top 2");
    top.tag("v2", &t2);
    Forest { base: base.to_path_buf(), top, mid, leaf, t1, t2, m1, l1 }
}

/// A server on 127.0.0.1 that accepts connections, sends `partial` (maybe nothing) and then
/// never answers again, holding each connection open: a half-dead git mirror. Counts the
/// connections; stops accepting on drop.
pub struct StallServer {
    pub port: u16,
    pub connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StallServer {
    pub fn start(partial: &'static [u8]) -> StallServer {
        use std::io::Write;
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (c, s) = (connections.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        c.fetch_add(1, Ordering::SeqCst);
                        let _ = stream.write_all(partial);
                        held.push(stream);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        StallServer { port, connections, stop, thread: Some(thread) }
    }

    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for StallServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
