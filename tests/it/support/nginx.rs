//! A real nginx on 127.0.0.1 with README's own config of a team's server (artifact cache,
//! compiler caches, wheel index), with its own prefix, config, pid file and logs in a temp dir,
//! on a free port; stopped by its PID (SIGQUIT, then SIGKILL) on drop.

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Nginx {
    pub port: u16,
    /// The served directory (`http://127.0.0.1:PORT/x` is `<root>/x`).
    pub root: PathBuf,
    /// nginx's prefix: `nginx.conf`, `nginx.pid`, `error.log`, `access.log`.
    pub dir: PathBuf,
    child: Option<Child>,
}

impl Nginx {
    /// nginx configured with README's block (the "A team's shared cache" section), as a team
    /// would install it: only its port (`127.0.0.1`, a free one), its directory (`/srv/rocmforge`
    /// becomes `<dir>/srv`) and its password file (`<dir>/htpasswd`, user `lab` with `password`)
    /// are changed. Loads Debian's dav-ext module, which README's `/sccache/` location needs.
    pub fn readme(dir: &Path, password: &str) -> Nginx {
        let readme = std::fs::read_to_string(super::repo_root().join("README.md")).unwrap();
        let blocks: Vec<&str> = readme.split("```nginx\n").skip(1).map(|b| b.split("```").next().unwrap()).collect();
        assert_eq!(blocks.len(), 1, "README.md has one nginx block");
        let srv = dir.join("srv");
        for sub in ["tmp", "wheels"] {
            std::fs::create_dir_all(srv.join(sub)).unwrap();
        }
        std::fs::write(dir.join("htpasswd"), format!("lab:{{PLAIN}}{password}\n")).unwrap();
        let block = blocks[0]
            .replace("/srv/rocmforge", &srv.display().to_string())
            .replace("/etc/nginx/rocmforge.htpasswd", &dir.join("htpasswd").display().to_string());
        assert!(block.contains("listen 8080;"), "README's nginx block listens on 8080:\n{block}");
        Nginx::start_server(dir, &["ngx_http_dav_ext_module"], &srv, |port| {
            block.replace("listen 8080;", &format!("listen 127.0.0.1:{port};"))
        })
    }

    /// Starts nginx in `dir` (created) with these dynamic modules (Debian's, from
    /// `/usr/lib/nginx/modules`: `ngx_http_dav_ext_module` of libnginx-mod-http-dav-ext) and
    /// the `server` block `server(port)`, which serves `root`.
    fn start_server(dir: &Path, modules: &[&str], root: &Path, server: impl Fn(u16) -> String) -> Nginx {
        std::fs::create_dir_all(dir).unwrap();
        let mut load = String::new();
        for m in modules {
            let so = Path::new("/usr/lib/nginx/modules").join(format!("{m}.so"));
            assert!(
                so.is_file(),
                "{} is missing: run ci/setup.sh (it installs libnginx-mod-http-dav-ext)",
                so.display()
            );
            load.push_str(&format!("load_module {};\n", so.display()));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let d = dir.display();
        let server = server(port);
        // As root, nginx's workers would become `nobody`, who cannot write the temp dir.
        let user = if rustix::process::geteuid().is_root() { "user root root;\n" } else { "" };
        let conf = format!(
            "{load}{user}daemon off;
worker_processes 1;
worker_shutdown_timeout 1s;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/tmp-body;
    proxy_temp_path {d}/tmp-proxy;
    fastcgi_temp_path {d}/tmp-fastcgi;
    uwsgi_temp_path {d}/tmp-uwsgi;
    scgi_temp_path {d}/tmp-scgi;
    {server}
}}
"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("nginx starts (Debian package nginx; run ci/setup.sh)");
        let mut n = Nginx { port, root: root.to_path_buf(), dir: dir.to_path_buf(), child: Some(child) };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = n.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!(
                    "nginx exited ({status}): {}",
                    std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
                );
            }
            assert!(start.elapsed() < Duration::from_secs(10), "nginx did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        n
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    /// nginx's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// The access log so far (one line per request: method, path, status).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }

    /// Stops nginx by its process group (the master and its workers, which lead no group of
    /// their own): SIGQUIT (workers finish and exit with the master), then SIGKILL to all of
    /// them after 5 seconds. A SIGKILL of the master alone would leave its workers serving.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) else { return };
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::QUIT);
        let start = Instant::now();
        while child.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        let _ = child.wait();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}
