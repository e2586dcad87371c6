//! A real nginx on 127.0.0.1 serving a directory with WebDAV `PUT` (as a team's cache server
//! would: README's config), with its own prefix, config, pid file and logs in a temp dir, on a
//! free port; stopped by its PID (SIGQUIT, then SIGKILL) on drop.

use std::net::TcpStream;
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
    /// Starts nginx in `dir` (created), serving `<dir>/root` with WebDAV `PUT` and `DELETE`.
    pub fn start(dir: &Path) -> Nginx {
        Nginx::start_with(
            dir,
            "location / {\n            dav_methods PUT DELETE;\n            create_full_put_path on;\n            dav_access user:rw group:r all:r;\n        }",
        )
    }

    /// Starts nginx in `dir` (created), serving `<dir>/root` with these `location` blocks.
    pub fn start_with(dir: &Path, locations: &str) -> Nginx {
        Nginx::start_with_modules(dir, &[], locations)
    }

    /// As `start_with`, loading these dynamic modules first (Debian's, from
    /// `/usr/lib/nginx/modules`: `ngx_http_dav_ext_module` of libnginx-mod-http-dav-ext).
    pub fn start_with_modules(dir: &Path, modules: &[&str], locations: &str) -> Nginx {
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
        let root = dir.join("root");
        std::fs::create_dir_all(&root).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let d = dir.display();
        // As root, nginx's workers would become `nobody`, who cannot write the temp dir.
        let user = if rustix::process::geteuid().is_root() { "user root root;\n" } else { "" };
        let conf = format!(
            "{load}{user}daemon off;
worker_processes 1;
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
    server {{
        listen 127.0.0.1:{port};
        root {d}/root;
        client_max_body_size 1g;
        {locations}
    }}
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
            .spawn()
            .expect("nginx starts (Debian package nginx; run ci/setup.sh)");
        let mut n = Nginx { port, root, dir: dir.to_path_buf(), child: Some(child) };
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

    /// Stops nginx by its PID: SIGQUIT (workers finish and exit with the master), SIGKILL after
    /// 5 seconds.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::QUIT);
        }
        let start = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}
