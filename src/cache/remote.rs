//! A shared artifact cache over HTTP, in bazel-remote's layout, so that bazel-remote
//! (`--disable_http_ac_validation`), nginx with WebDAV `PUT`, or an S3 gateway can serve it:
//!
//! - `PUT|GET|HEAD <base>/cas/<sha256>`: the blob, a zstd-compressed tar of the artifact's tree
//!   (its files relative to the prefix);
//! - `PUT|GET|HEAD <base>/ac/<cache key>`: the [`Manifest`], a small JSON naming the blob's
//!   sha256, size and compression, the key inputs, and an ed25519 signature (`trust`).
//!
//! Credentials (a bearer token, or basic auth from the config or the URL's userinfo) go into
//! request headers only: the URL kept and shown in messages has no userinfo, and errors of the
//! HTTP client are shown without their URL. Requests have short timeouts: an unreachable server
//! must cost a warning, not the night.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use crate::config::{RemoteCacheConfig, Secret};
use crate::digest::HashingWriter;
use crate::key::KeyInputs;

/// The manifest's own format (not the cache format: that one is inside the key).
pub const MANIFEST_FORMAT: u32 = 1;
/// The blob's compression; the signature names it.
pub const COMPRESSION: &str = "zstd";

/// `/ac/<key>`: what the artifact stored under `key` is, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The cache key this manifest was made for (the signature covers it).
    pub key: String,
    pub blob: BlobRef,
    /// `zstd`: the blob is a tar compressed with zstd.
    pub compression: String,
    /// The inputs of the key (their sha256 must be the key).
    pub inputs: KeyInputs,
    /// The name of the key that signed [`crate::cache::trust::signed_text`], and the signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    pub sha256: String,
    pub size: u64,
}

/// What a blob download received.
#[derive(Debug)]
pub struct Received {
    pub sha256: String,
    pub len: u64,
    /// The read error that ended the transfer early for good, if one did.
    pub broke: Option<String>,
    /// How often the transfer broke off and was resumed.
    pub resumes: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// No answer: refused connection, DNS, timeout. The store stops asking this server.
    #[error("the remote cache {url} cannot be reached: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the remote cache answered {status} to {method} {url}{hint}")]
    Status { method: &'static str, url: String, status: StatusCode, hint: &'static str },
    #[error("the remote cache's answer to GET {url} broke off: {reason}")]
    Body { url: String, reason: String },
    #[error("`{path}`: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error("cache-url `{url}` is not a usable http(s) URL: {reason}")]
    BadUrl { url: String, reason: String },
}

impl RemoteError {
    pub fn is_unreachable(&self) -> bool {
        matches!(self, RemoteError::Unreachable { .. })
    }
}

enum Auth {
    None,
    Bearer(Secret),
    Basic(String, Option<Secret>),
}

/// The HTTP side of the remote cache: paths, requests, credentials, timeouts.
pub struct RemoteCache {
    /// The base URL without userinfo, ending in `/`.
    base: url::Url,
    auth: Auth,
    client: reqwest::blocking::Client,
    /// How long a blob transfer may take in all.
    blob_timeout: Duration,
    /// How often a broken blob transfer is resumed.
    retry: crate::source::download::RetryPolicy,
}

/// Connecting and small requests: short, so a dead server costs seconds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const SMALL_TIMEOUT: Duration = Duration::from_secs(15);

impl RemoteCache {
    /// `retry`: how often a broken blob transfer is resumed (the config's `download-retries`,
    /// as for source downloads: `RetryPolicy::for_config`).
    pub fn new(
        cfg: &RemoteCacheConfig,
        url: &str,
        retry: crate::source::download::RetryPolicy,
    ) -> Result<RemoteCache, RemoteError> {
        let bad = |reason: &str| RemoteError::BadUrl { url: redact(url), reason: reason.into() };
        let mut base = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad("only http:// and https:// are supported"));
        }
        let from_url = (!base.username().is_empty()).then(|| {
            let user = percent_encoding::percent_decode_str(base.username()).decode_utf8_lossy().into_owned();
            let pass = base
                .password()
                .map(|p| Secret(percent_encoding::percent_decode_str(p).decode_utf8_lossy().into_owned()));
            (user, pass)
        });
        let _ = base.set_username("");
        let _ = base.set_password(None);
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let auth = match (&cfg.token, &cfg.user, from_url) {
            (Some(t), _, _) => Auth::Bearer(t.clone()),
            (None, Some(u), _) => Auth::Basic(u.clone(), cfg.password.clone()),
            (None, None, Some((u, p))) => Auth::Basic(u, p.or_else(|| cfg.password.clone())),
            (None, None, None) => Auth::None,
        };
        // Config::load refused a bad value, naming it.
        let secs = |name: &str, default: u64| {
            Duration::from_secs(crate::config::env_number(name).ok().flatten().unwrap_or(default))
        };
        let client = crate::source::http::client(
            secs("ROCMFORGE_CACHE_CONNECT_TIMEOUT_SECS", CONNECT_TIMEOUT.as_secs()),
            SMALL_TIMEOUT,
        )
        .map_err(|e| bad(&e.without_url().to_string()))?;
        Ok(RemoteCache { base, auth, client, blob_timeout: secs("ROCMFORGE_CACHE_BLOB_TIMEOUT_SECS", 3600), retry })
    }

    /// The base URL as messages show it (never with credentials).
    pub fn shown(&self) -> String {
        self.base.to_string()
    }

    fn url(&self, rel: &str) -> url::Url {
        self.base.join(rel).expect("relative path joins")
    }

    fn request(&self, method: reqwest::Method, url: &url::Url) -> reqwest::blocking::RequestBuilder {
        let r = self.client.request(method, url.clone());
        match &self.auth {
            Auth::None => r,
            Auth::Bearer(t) => r.bearer_auth(&t.0),
            Auth::Basic(u, p) => r.basic_auth(u, p.as_ref().map(|p| &p.0)),
        }
    }

    fn send(&self, rb: reqwest::blocking::RequestBuilder) -> Result<reqwest::blocking::Response, RemoteError> {
        rb.send().map_err(|e| RemoteError::Unreachable { url: self.shown(), reason: cause_chain(&e) })
    }

    fn status_error(method: &'static str, url: &url::Url, status: StatusCode) -> RemoteError {
        let hint = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                " (check cache-token, or cache-user and cache-password, or ROCMFORGE_CACHE_TOKEN)"
            }
            StatusCode::PAYLOAD_TOO_LARGE => " (raise the server's body limit: nginx `client_max_body_size 0;`)",
            StatusCode::METHOD_NOT_ALLOWED => " (the server does not take PUT: nginx needs `dav_methods PUT;`)",
            _ => "",
        };
        RemoteError::Status { method, url: url.to_string(), status, hint }
    }

    /// The manifest stored under `key` (`None`: not there).
    pub fn get_manifest(&self, key: &str) -> Result<Option<Vec<u8>>, RemoteError> {
        let url = self.url(&format!("ac/{key}"));
        let resp = self.send(self.request(reqwest::Method::GET, &url))?;
        match resp.status() {
            StatusCode::NOT_FOUND => Ok(None),
            s if s.is_success() => {
                // A manifest is small; a huge answer is not one.
                let mut body = Vec::new();
                resp.take(1 << 20)
                    .read_to_end(&mut body)
                    .map_err(|e| RemoteError::Body { url: url.to_string(), reason: e.to_string() })?;
                Ok(Some(body))
            }
            s => Err(Self::status_error("GET", &url, s)),
        }
    }

    /// Whether `ac/<key>` is there (HEAD).
    pub fn has_manifest(&self, key: &str) -> Result<bool, RemoteError> {
        let url = self.url(&format!("ac/{key}"));
        let resp = self.send(self.request(reqwest::Method::HEAD, &url))?;
        match resp.status() {
            StatusCode::NOT_FOUND => Ok(false),
            s if s.is_success() => Ok(true),
            s => Err(Self::status_error("HEAD", &url, s)),
        }
    }

    /// Downloads `cas/<sha256>` into `dest`, reading at most `limit + 1` bytes: the sha256 and
    /// length of what arrived, and how the transfer broke off if it did for good (the caller
    /// compares them with the manifest: a broken transfer is a truncated blob). A transfer that
    /// breaks off is resumed where it stopped (`Range`; from the start if the server ignores
    /// it), as source downloads are: `download-retries` (or `ROCMFORGE_RETRIES`) tries in a row
    /// that bring nothing new, `ROCMFORGE_RETRY_BASE_MS` apart, doubling.
    pub fn get_blob(&self, sha256: &str, dest: &Path, limit: u64) -> Result<Received, RemoteError> {
        let url = self.url(&format!("cas/{sha256}"));
        let policy = &self.retry;
        let io = |source| RemoteError::Io { path: dest.to_path_buf(), source };
        let mut out = HashingWriter::new(File::create(dest).map_err(io)?);
        let (mut resumes, mut fruitless) = (0u32, 0u32);
        loop {
            let from = out.len();
            let mut rb = self.request(reqwest::Method::GET, &url).timeout(self.blob_timeout);
            if from > 0 {
                rb = rb.header(reqwest::header::RANGE, format!("bytes={from}-"));
            }
            let broke = match self.send(rb) {
                Err(e) if from == 0 => return Err(e),
                Err(e) => e.to_string(),
                Ok(resp) if resp.status() == StatusCode::PARTIAL_CONTENT && from > 0 => {
                    self.copy_body(resp, &mut out, limit)
                }
                Ok(resp) if resp.status().is_success() => {
                    if from > 0 {
                        // The server sent the whole blob again: start over.
                        out = HashingWriter::new(File::create(dest).map_err(io)?);
                    }
                    self.copy_body(resp, &mut out, limit)
                }
                Ok(resp) if from == 0 => return Err(Self::status_error("GET", &url, resp.status())),
                Ok(resp) => format!("the resumed transfer was answered {}", resp.status()),
            };
            out.inner.flush().map_err(io)?;
            if broke.is_empty() || out.len() > limit {
                break;
            }
            fruitless = if out.len() > from { 0 } else { fruitless + 1 };
            if fruitless >= policy.attempts {
                let (sha256, len) = out.finish();
                return Ok(Received { sha256, len, broke: Some(broke), resumes });
            }
            resumes += 1;
            std::thread::sleep(policy.backoff(fruitless.max(1)));
        }
        let (sha256, len) = out.finish();
        Ok(Received { sha256, len, broke: None, resumes })
    }

    /// Appends `resp`'s body to `out`, up to `limit + 1` bytes in all: how the transfer broke
    /// off, or "" when it ended.
    fn copy_body(&self, resp: reqwest::blocking::Response, out: &mut HashingWriter<File>, limit: u64) -> String {
        let room = limit.saturating_add(1).saturating_sub(out.len());
        match std::io::copy(&mut resp.take(room), out) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    /// PUTs the file `path` (of `len` bytes) at `rel` (`cas/<sha>`).
    pub fn put_file(&self, rel: &str, path: &Path, len: u64) -> Result<(), RemoteError> {
        let url = self.url(rel);
        let f = File::open(path).map_err(|source| RemoteError::Io { path: path.to_path_buf(), source })?;
        let body = reqwest::blocking::Body::sized(f, len);
        let resp = self.send(self.request(reqwest::Method::PUT, &url).timeout(self.blob_timeout).body(body))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(Self::status_error("PUT", &url, resp.status()))
        }
    }

    /// PUTs `bytes` at `rel` (`ac/<key>`).
    pub fn put_bytes(&self, rel: &str, bytes: Vec<u8>) -> Result<(), RemoteError> {
        let url = self.url(rel);
        let resp = self.send(self.request(reqwest::Method::PUT, &url).body(bytes))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(Self::status_error("PUT", &url, resp.status()))
        }
    }
}

/// The error and its causes in one line (reqwest's own message is "error sending request"), a
/// refused certificate named (`source::http`).
fn cause_chain(e: &reqwest::Error) -> String {
    match (std::error::Error::source(e).is_some(), e.is_timeout()) {
        (true, true) => format!("timed out: {}", crate::source::http::explain(e)),
        (true, false) => crate::source::http::explain(e),
        (false, true) => "timed out".to_string(),
        (false, false) => e.without_url_ref(),
    }
}

trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        let mut s = self.to_string();
        if let Some(u) = self.url() {
            s = s.replace(u.as_str(), "<url>");
        }
        s
    }
}

/// A URL for messages: its userinfo (`user:password@`) replaced by `***@`. A text that is not
/// a URL is shown as `<cache-url>`, since it might hold anything.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if !u.username().is_empty() || u.password().is_some() {
                let _ = u.set_password(None);
                let _ = u.set_username("***");
            }
            u.to_string()
        }
        Err(_) => "<cache-url>".into(),
    }
}

/// Packs `tree` (an artifact's files, relative to the prefix) into `dest` as a zstd-compressed
/// tar: its sha256 and size. Symlinks stay symlinks; modes and mtimes are kept.
pub fn pack(tree: &Path, dest: &Path) -> std::io::Result<(String, u64)> {
    let out = HashingWriter::new(std::io::BufWriter::new(File::create(dest)?));
    let mut enc = zstd::stream::write::Encoder::new(out, 3)?;
    {
        let mut b = tar::Builder::new(&mut enc);
        b.follow_symlinks(false);
        b.append_dir_all(".", tree)?;
        b.finish()?;
    }
    let mut out = enc.finish()?;
    out.inner.flush()?;
    out.inner.get_ref().sync_all()?;
    Ok(out.finish())
}

/// Unpacks a blob made by [`pack`] into `dest` (the tar crate refuses entries that would land
/// outside it).
pub fn unpack(blob: &Path, dest: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dest)?;
    let dec = zstd::stream::read::Decoder::new(File::open(blob)?)?;
    let mut ar = tar::Archive::new(dec);
    ar.set_preserve_permissions(true);
    ar.set_preserve_mtime(true);
    ar.set_unpack_xattrs(false);
    ar.unpack(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials() {
        assert_eq!(redact("https://lab:s3cret@cache.example/rf/"), "https://***@cache.example/rf/");
        assert_eq!(redact("http://127.0.0.1:8080/x"), "http://127.0.0.1:8080/x");
        assert_eq!(redact("not a url with s3cret"), "<cache-url>");
        let cfg = RemoteCacheConfig::default();
        let r = RemoteCache::new(&cfg, "http://lab:s3cret@127.0.0.1:9/rf", Default::default()).unwrap();
        assert_eq!(r.shown(), "http://127.0.0.1:9/rf/");
        assert!(matches!(r.auth, Auth::Basic(ref u, Some(ref p)) if u == "lab" && p.0 == "s3cret"));
        let e = RemoteCache::new(&cfg, "ftp://u:s3cret@x/", Default::default()).err().unwrap().to_string();
        assert!(!e.contains("s3cret") && e.contains("only http"), "{e}");
    }

    #[test]
    fn pack_and_unpack_keep_the_tree() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        std::fs::create_dir_all(tree.join("lib/empty")).unwrap();
        std::fs::write(tree.join("lib/libx.so.1"), vec![5u8; 100_000]).unwrap();
        std::os::unix::fs::symlink("libx.so.1", tree.join("lib/libx.so")).unwrap();
        std::os::unix::fs::symlink("/opt/elsewhere/libz.so", tree.join("lib/libz.so")).unwrap();
        std::fs::create_dir_all(tree.join("bin")).unwrap();
        std::fs::write(tree.join("bin/tool"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tree.join("bin/tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let blob = d.path().join("blob");
        let (sha, size) = pack(&tree, &blob).unwrap();
        assert_eq!(crate::digest::sha256_file(&blob).unwrap(), (sha, size));
        let back = d.path().join("back");
        unpack(&blob, &back).unwrap();
        assert_eq!(crate::fsutil::list_tree(&tree).unwrap(), crate::fsutil::list_tree(&back).unwrap());
    }
}
