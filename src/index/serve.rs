//! `rocmforge index serve`: the index over HTTP, read-only. Pages are rendered from
//! `index.json` on each request (HTML, or PEP 691 JSON when the client asks for it); wheels and
//! `.metadata` files are streamed from `simple/<project>/`. Nothing outside `simple/` is ever
//! served: request paths are decoded once, segment by segment, and any `..`, `.`-prefixed,
//! backslash or encoded-slash segment is refused before the file system is touched; the
//! resolved path is then checked to lie under the index (no symlink escapes).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tiny_http::{Header, Method, Request, Response};

use super::pages::{self, JSON_MEDIA_TYPE};
use super::{load_state, normalize_name};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on `{addr}`: {message}")]
    Bind { addr: String, message: String },
    #[error("`{0}` is not a host:port address (e.g. 127.0.0.1:8000)")]
    BadAddress(String),
    #[error("the server stopped accepting requests")]
    Accept(#[source] std::io::Error),
    #[error("cannot watch for Ctrl-C and SIGTERM to stop the server")]
    Signal(#[source] std::io::Error),
}

/// A bound, not yet running server.
pub struct Server {
    http: tiny_http::Server,
    root: PathBuf,
    addr: SocketAddr,
}

impl Server {
    /// Binds `addr` (`127.0.0.1:0` picks a free port) to serve the index at `index_dir`.
    pub fn bind(index_dir: &Path, addr: &str) -> Result<Server, ServeError> {
        let wanted: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(addr)
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| ServeError::BadAddress(addr.to_string()))?;
        let http = tiny_http::Server::http(wanted)
            .map_err(|e| ServeError::Bind { addr: addr.to_string(), message: e.to_string() })?;
        let addr = http.server_addr().to_ip().unwrap_or(wanted);
        Ok(Server { http, root: index_dir.to_path_buf(), addr })
    }

    /// The address actually bound (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to give pip and uv as `--index-url`.
    pub fn url(&self) -> String {
        format!("http://{}/simple/", self.addr)
    }

    /// Answers requests (each on its own thread, so one large download does not hold up
    /// the rest) until `stop` becomes true; checks it every 100 ms.
    pub fn run(&self, stop: &AtomicBool, log: bool) -> Result<(), ServeError> {
        while !stop.load(Ordering::SeqCst) {
            match self.http.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(request)) => {
                    let root = self.root.clone();
                    std::thread::spawn(move || answer(&root, request, log));
                }
                Ok(None) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ServeError::Accept(e)),
            }
        }
        Ok(())
    }
}

/// What a request gets, decided without any I/O on the socket (unit-testable).
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// A rendered page.
    Page {
        body: String,
        content_type: &'static str,
    },
    /// A file under `simple/`.
    File(PathBuf),
    Redirect(String),
    Status(u16, &'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    /// HTML, with the media type the client named (`text/html` unless it asked for the v1 one).
    Html(&'static str),
}

const V1_HTML: &str = "application/vnd.pypi.simple.v1+html";
const TEXT_HTML: &str = "text/html; charset=utf-8";

/// PEP 691 content negotiation: JSON when the client names the JSON type (or its `latest`
/// alias) at least as highly as any HTML it accepts, or asks with `?format=`; HTML otherwise.
fn negotiate(accept: Option<&str>, query: Option<&str>) -> Format {
    if let Some(q) = query {
        for pair in q.split('&') {
            if let Some(v) = pair.strip_prefix("format=") {
                let v = v.replace("%2B", "+").replace("%2b", "+").replace("%2F", "/").replace("%2f", "/");
                match v.as_str() {
                    "application/vnd.pypi.simple.v1+json" | "application/vnd.pypi.simple.latest+json" => {
                        return Format::Json
                    }
                    "application/vnd.pypi.simple.v1+html" | "application/vnd.pypi.simple.latest+html" => {
                        return Format::Html(V1_HTML)
                    }
                    "text/html" => return Format::Html(TEXT_HTML),
                    _ => {}
                }
            }
        }
    }
    let Some(accept) = accept else { return Format::Html(TEXT_HTML) };
    let mut json_q = 0.0f32;
    let mut v1_html_q = 0.0f32;
    let mut html_q = 0.0f32;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut q = 1.0f32;
        for p in parts {
            if let Some(v) = p.trim().strip_prefix("q=") {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        match media.as_str() {
            "application/vnd.pypi.simple.v1+json" | "application/vnd.pypi.simple.latest+json" => json_q = json_q.max(q),
            "application/vnd.pypi.simple.v1+html" | "application/vnd.pypi.simple.latest+html" => {
                v1_html_q = v1_html_q.max(q)
            }
            "text/html" | "text/*" | "*/*" => html_q = html_q.max(q),
            _ => {}
        }
    }
    if json_q > 0.0 && json_q >= v1_html_q && json_q >= html_q {
        Format::Json
    } else if v1_html_q > 0.0 && v1_html_q >= html_q {
        Format::Html(V1_HTML)
    } else {
        Format::Html(TEXT_HTML)
    }
}

/// Strict percent-decoding of one path segment; `None` for a malformed escape (a `%` not
/// followed by two hex digits, which percent-encoding would keep as it is) or non-UTF-8.
fn decode_segment(s: &str) -> Option<String> {
    let escape_ok = |i: usize| s.as_bytes().get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
    if !s.match_indices('%').all(|(i, _)| escape_ok(i)) {
        return None;
    }
    percent_encoding::percent_decode_str(s).decode_utf8().ok().map(|d| d.into_owned())
}

/// A decoded segment that may name something inside the index.
fn safe_segment(seg: &str) -> bool {
    !seg.is_empty() && !seg.starts_with('.') && !seg.contains(['/', '\\', '\0']) && !seg.chars().any(char::is_control)
}

/// Decides the reply to `method url` with the given `Accept` header, for the index at `root`.
pub fn route(root: &Path, method: &Method, url: &str, accept: Option<&str>) -> Reply {
    if !matches!(method, Method::Get | Method::Head) {
        return Reply::Status(405, "only GET and HEAD: the index is read-only\n");
    }
    let (path, query) = match url.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (url, None),
    };
    let path = path.split('#').next().unwrap_or("");
    if !path.starts_with('/') || path.contains('\\') {
        return Reply::Status(400, "bad request path\n");
    }
    let is_dir = path.ends_with('/');
    let raw: Vec<&str> = path[1..].split('/').collect();
    let raw = if is_dir { &raw[..raw.len() - 1] } else { &raw[..] };
    let mut segs = Vec::with_capacity(raw.len());
    for r in raw {
        match decode_segment(r) {
            Some(s) if safe_segment(&s) => segs.push(s),
            _ => return Reply::Status(404, "not found\n"),
        }
    }
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let format = negotiate(accept, query);
    match (segs.as_slice(), is_dir) {
        ([], _) => Reply::Redirect("/simple/".into()),
        (["simple"], false) => Reply::Redirect("/simple/".into()),
        (["simple"], true) => match load_state(root) {
            Ok(state) => page(format, pages::root_json(&state), pages::root_html(&state)),
            Err(_) => Reply::Status(500, "the index state cannot be read\n"),
        },
        (["simple", project], true) => {
            let normalized = normalize_name(project);
            if normalized != *project {
                return Reply::Redirect(format!("/simple/{}/", pages::url_path_segment(&normalized)));
            }
            match load_state(root) {
                Ok(state) => match state.projects.get(*project).filter(|p| !p.files.is_empty()) {
                    Some(p) => page(format, pages::project_json(project, p), pages::project_html(project, p)),
                    None => Reply::Status(404, "no such project in this index\n"),
                },
                Err(_) => Reply::Status(500, "the index state cannot be read\n"),
            }
        }
        (["simple", rest @ ..], false) if rest.len() <= 2 => file(root, &segs),
        _ => Reply::Status(404, "not found\n"),
    }
}

fn page(format: Format, json: String, html: String) -> Reply {
    match format {
        Format::Json => Reply::Page { body: json, content_type: JSON_MEDIA_TYPE },
        Format::Html(ct) => Reply::Page { body: html, content_type: ct },
    }
}

/// A file under `<root>/simple/`, only if its real path (symlinks resolved) is still there.
fn file(root: &Path, segs: &[&str]) -> Reply {
    let simple = root.join("simple");
    let mut path = root.to_path_buf();
    for s in segs {
        path.push(s);
    }
    let (Ok(real), Ok(base)) = (path.canonicalize(), simple.canonicalize()) else {
        return Reply::Status(404, "not found\n");
    };
    if !real.starts_with(&base) {
        return Reply::Status(404, "not found\n");
    }
    if real.is_dir() {
        let mut to = String::new();
        for s in segs {
            to.push('/');
            to.push_str(&pages::url_path_segment(s));
        }
        to.push('/');
        return Reply::Redirect(to);
    }
    if real.is_file() {
        Reply::File(real)
    } else {
        Reply::Status(404, "not found\n")
    }
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn answer(root: &Path, request: Request, log: bool) {
    let accept = request.headers().iter().find(|h| h.field.equiv("Accept")).map(|h| h.value.as_str().to_string());
    let reply = route(root, request.method(), request.url(), accept.as_deref());
    // Escaped: a request line must not smuggle terminal control sequences into the log.
    let line = log.then(|| format!("{} {}", request.method(), request.url().escape_debug()));
    let (status, content_type) = match reply {
        Reply::Page { body, content_type } => {
            let r = Response::from_string(body)
                .with_header(header("Content-Type", content_type).expect("static header"))
                .with_header(header("Vary", "Accept").expect("static header"))
                .with_header(header("Cache-Control", "no-cache").expect("static header"));
            let _ = request.respond(r);
            (200, content_type)
        }
        Reply::File(path) => match std::fs::File::open(&path) {
            Ok(f) => {
                let ct =
                    if path.extension().is_some_and(|e| e == "html") { TEXT_HTML } else { "application/octet-stream" };
                // A client that hangs up mid-download is its own business.
                let _ = request
                    .respond(Response::from_file(f).with_header(header("Content-Type", ct).expect("static header")));
                (200, ct)
            }
            Err(_) => {
                let _ = request.respond(Response::from_string("not found\n").with_status_code(404));
                (404, "")
            }
        },
        Reply::Redirect(to) => {
            let mut r = Response::from_string(format!("see {to}\n")).with_status_code(301);
            if let Some(h) = header("Location", &to) {
                r.add_header(h);
            }
            let _ = request.respond(r);
            (301, "")
        }
        Reply::Status(code, text) => {
            let mut r = Response::from_string(text).with_status_code(code);
            if code == 405 {
                r.add_header(header("Allow", "GET, HEAD").expect("static header"));
            }
            let _ = request.respond(r);
            (code, "")
        }
    };
    if let Some(line) = line {
        eprintln!("{}", format!("{line} {status} {content_type}").trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_with_file() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("idx");
        std::fs::create_dir_all(idx.join("simple/rfpure")).unwrap();
        std::fs::write(idx.join("simple/rfpure/rfpure-1.0-py3-none-any.whl"), b"wheel").unwrap();
        std::fs::write(idx.join("index.json"), b"{\"format\": 1, \"projects\": {}}").unwrap();
        std::fs::write(dir.path().join("secret"), b"secret").unwrap();
        dir
    }

    #[test]
    fn negotiates_like_pep_691() {
        use Format::*;
        assert_eq!(negotiate(None, None), Html(TEXT_HTML));
        assert_eq!(negotiate(Some("*/*"), None), Html(TEXT_HTML));
        assert_eq!(negotiate(Some("application/vnd.pypi.simple.v1+json"), None), Json);
        // What pip and uv send.
        assert_eq!(
            negotiate(Some("application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"), None),
            Json
        );
        assert_eq!(negotiate(Some("application/vnd.pypi.simple.v1+json;q=0.1, text/html"), None), Html(TEXT_HTML));
        assert_eq!(negotiate(Some("application/vnd.pypi.simple.v1+html"), None), Html(V1_HTML));
        assert_eq!(negotiate(Some("application/vnd.pypi.simple.v1+json;q=0"), None), Html(TEXT_HTML));
        assert_eq!(negotiate(None, Some("format=application/vnd.pypi.simple.v1%2Bjson")), Json);
    }

    #[test]
    fn routes_pages_files_and_redirects() {
        let dir = index_with_file();
        let idx = dir.path().join("idx");
        let get = |u: &str| route(&idx, &Method::Get, u, None);
        assert_eq!(get("/"), Reply::Redirect("/simple/".into()));
        assert_eq!(get("/simple"), Reply::Redirect("/simple/".into()));
        assert!(matches!(get("/simple/"), Reply::Page { content_type: TEXT_HTML, .. }));
        assert_eq!(get("/simple/RF.Pure/"), Reply::Redirect("/simple/rf-pure/".into()));
        assert_eq!(get("/simple/rfpure"), Reply::Redirect("/simple/rfpure/".into()));
        assert!(matches!(get("/simple/rfpure/rfpure-1.0-py3-none-any.whl"), Reply::File(_)));
        assert!(matches!(get("/simple/rfpure/rfpure-1.0-py3-none-any.whl?x=1"), Reply::File(_)));
        assert_eq!(get("/simple/nope/"), Reply::Status(404, "no such project in this index\n"));
        assert_eq!(
            route(&idx, &Method::Post, "/simple/", None),
            Reply::Status(405, "only GET and HEAD: the index is read-only\n")
        );
    }

    #[test]
    fn decodes_segments_strictly() {
        assert_eq!(decode_segment("rfx-1.0%2Brocm6.2.4.whl").as_deref(), Some("rfx-1.0+rocm6.2.4.whl"));
        assert_eq!(decode_segment("%2e%2E%5c").as_deref(), Some("..\\"));
        assert_eq!(decode_segment("%25").as_deref(), Some("%"));
        assert_eq!(decode_segment("%2541").as_deref(), Some("%41"), "decoded once");
        assert_eq!(decode_segment("caf%C3%A9").as_deref(), Some("café"));
        assert_eq!(decode_segment("plain").as_deref(), Some("plain"));
        assert_eq!(decode_segment("").as_deref(), Some(""));
        for bad in ["%", "%2", "a%", "%zz", "%2g", "%%41", "%+5", "%-5", "%c3%28", "%c0%ae", "%ff"] {
            assert_eq!(decode_segment(bad), None, "{bad}");
        }
    }

    #[test]
    fn refuses_traversal() {
        let dir = index_with_file();
        let idx = dir.path().join("idx");
        std::os::unix::fs::symlink(dir.path().join("secret"), idx.join("simple/rfpure/link.whl")).unwrap();
        for u in [
            "/simple/../index.json",
            "/simple/../../secret",
            "/../secret",
            "/simple/%2e%2e/index.json",
            "/simple/%2E%2E%2Findex.json",
            "/simple/..%2f..%2fsecret",
            "/simple/rfpure/..%5c..%5cindex.json",
            "/simple\\..\\index.json",
            "/simple/%5c..%5cindex.json",
            "/simple/%252e%252e%252fsecret",
            "/simple/rfpure/%00",
            "/simple/rfpure/%zz",
            "/simple/.lock",
            "/index.json",
            "/simple/rfpure/link.whl",
            "//etc/passwd",
            "http://evil/simple/../index.json",
        ] {
            let r = route(&idx, &Method::Get, u, None);
            assert!(matches!(r, Reply::Status(400 | 404, _)), "{u}: {r:?}");
        }
    }
}
