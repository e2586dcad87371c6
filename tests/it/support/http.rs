//! A small HTTP/1.1 file server on 127.0.0.1 for download tests: honours Range (206 +
//! Content-Range, If-Range against its ETag) unless told to ignore it, can drop the connection
//! after N body bytes, can stall (stop sending, connection held open) at a byte of the file,
//! can answer 503 N times, redirect, and counts the body bytes it sent.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

#[derive(Default)]
pub struct State {
    pub files: BTreeMap<String, Vec<u8>>,
    pub ignore_range: bool,
    /// Per request, in order: drop the connection after this many body bytes.
    pub drop_after: VecDeque<u64>,
    /// Only requests whose path contains this take from `drop_after` (none: every request).
    pub drop_only: Option<String>,
    /// Answer 503 to this many requests first.
    pub fail_5xx: u32,
    /// Stop sending at this byte of the file and hold the connection open for `stall_for`
    /// (a server that hangs mid-body), on every request.
    pub stall_at: Option<u64>,
    pub stall_for: std::time::Duration,
    /// Paths answered with this status and no body (`403`, as repo.amd.com answers for a project
    /// it does not serve).
    pub statuses: BTreeMap<String, u16>,
    /// Paths answered with `302 Found` to another path (`/a` -> `/b`).
    pub redirects: BTreeMap<String, String>,
    /// Body bytes sent, over all requests.
    pub bytes_sent: u64,
    /// (path, Range header) of each request.
    pub requests: Vec<(String, Option<String>)>,
}

pub struct HttpServer {
    pub port: u16,
    pub state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    pub fn start() -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    let _ = serve(c, &st);
                }
            }
        });
        HttpServer { port, state, stop, thread: Some(thread) }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    pub fn add(&self, path: &str, bytes: Vec<u8>) {
        self.state.lock().unwrap().files.insert(format!("/{path}"), bytes);
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn etag(bytes: &[u8]) -> String {
    format!("\"{}\"", &hex::encode(Sha256::digest(bytes))[..16])
}

fn serve(conn: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let mut out = conn;
    let mut st = state.lock().unwrap();
    st.requests.push((path.clone(), headers.get("range").cloned()));
    if st.fail_5xx > 0 {
        st.fail_5xx -= 1;
        return out.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    }
    if let Some(code) = st.statuses.get(&path) {
        let head = format!("HTTP/1.1 {code} Status\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return out.write_all(head.as_bytes());
    }
    if let Some(to) = st.redirects.get(&path) {
        let head = format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return out.write_all(head.as_bytes());
    }
    let Some(body) = st.files.get(&path).cloned() else {
        return out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    };
    let tag = etag(&body);
    let range_start = headers
        .get("range")
        .filter(|_| !st.ignore_range)
        .filter(|_| headers.get("if-range").is_none_or(|v| *v == tag))
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|s| s.parse::<usize>().ok());
    let (head, part) = match range_start {
        Some(s) if s < body.len() => (
            format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {s}-{}/{}\r\nETag: {tag}\r\nConnection: close\r\n\r\n",
                body.len() - s,
                body.len() - 1,
                body.len()
            ),
            &body[s..],
        ),
        Some(_) => {
            return out.write_all(format!("HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", body.len()).as_bytes());
        }
        None => (
            // A folder's page is an index page (uv refuses one without its type).
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}ETag: {tag}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
                body.len(),
                if path.ends_with('/') { "Content-Type: text/html\r\n" } else { "" }
            ),
            &body[..],
        ),
    };
    let cut = match &st.drop_only {
        Some(part) if !path.contains(part.as_str()) => None,
        _ => st.drop_after.pop_front(),
    };
    let mut n = cut.map(|c| (c as usize).min(part.len())).unwrap_or(part.len());
    let offset = body.len() - part.len();
    let stall = st.stall_at.map(|at| (at as usize).saturating_sub(offset)).filter(|left| *left < n);
    if let Some(left) = stall {
        n = left;
    }
    let stall_for = st.stall_for;
    st.bytes_sent += n as u64;
    drop(st);
    out.write_all(head.as_bytes())?;
    out.write_all(&part[..n])?;
    out.flush()?;
    if stall.is_some() {
        std::thread::sleep(stall_for);
    }
    // Dropping `out` here closes the connection, mid-body when cut.
    Ok(())
}
