//! Tarball and file downloads: streamed to `downloads/<sha256>.part` while hashing, resumed with
//! `Range`/`If-Range` after an interruption, retried with backoff on connection errors and 5xx,
//! and renamed to `downloads/<sha256>` only when the hash matches. The cache is keyed by the
//! content's sha256, so the same bytes are downloaded once, whoever asks; a file lock keeps two
//! processes from downloading the same thing at once.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::{CONTENT_RANGE, ETAG, IF_RANGE, LAST_MODIFIED, RANGE};
use reqwest::StatusCode;

use crate::config::Config;
use crate::progress::Progress;

#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("offline: `{url}` (sha256 {sha256}) is not in the cache (expected `{path}`); run `rocmforge fetch` while online")]
    OfflineMissing { url: String, sha256: String, path: PathBuf },
    #[error("sha256 mismatch for `{url}`: expected {expected}, got {actual} ({bytes} bytes); the download was discarded, nothing was cached")]
    Mismatch { url: String, expected: String, actual: String, bytes: u64 },
    #[error("cannot download `{url}`{via}: the server answered HTTP {status} (after {attempts} attempt(s))")]
    Http { url: String, via: String, status: u16, attempts: u32 },
    #[error("cannot download `{url}`{via} (after {attempts} attempt(s)){}", tls_hint(.source))]
    Network { url: String, via: String, attempts: u32, source: reqwest::Error },
    #[error("download of `{url}`{via} stopped making progress: {failures} attempts in a row did not get past byte {furthest} (each waits at most {timeout} s for data; {attempts} attempt(s) in all). The part downloaded is kept: run the same command again later, or point `[url-rewrite]` at a mirror, and it resumes")]
    Stalled {
        url: String,
        via: String,
        attempts: u32,
        failures: u32,
        furthest: u64,
        timeout: u64,
        source: std::io::Error,
    },
    #[error("cannot download `{url}`{via}: its redirects loop or go on past 10 hops (the last asked for: `{last}`); not retried: point the recipe's URL (or `[url-rewrite]`) at the file's final address")]
    Redirects { url: String, via: String, last: String },
    #[error("offline: `{url}` has no sha256 yet and must be downloaded to pin it; run the command again online")]
    OfflineUnpinned { url: String },
    #[error("`{path}`")]
    Io { path: PathBuf, source: std::io::Error },
}

/// A refused certificate named, with what to do (the chain below says it only in rustls's words).
fn tls_hint(e: &reqwest::Error) -> String {
    super::http::tls_problem(e).map(|t| format!(": {t}")).unwrap_or_default()
}

/// How hard to try. Tests shorten it with `ROCMFORGE_RETRY_BASE_MS`.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts that made no progress before giving up.
    pub attempts: u32,
    /// First backoff; doubled each time, capped at 30 s.
    pub base: Duration,
    /// Connect timeout, and the longest wait for any read.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { attempts: 5, base: Duration::from_millis(1000), timeout: Duration::from_secs(60) }
    }
}

impl RetryPolicy {
    /// Defaults, overridden by `ROCMFORGE_RETRIES`, `ROCMFORGE_RETRY_BASE_MS` and
    /// `ROCMFORGE_HTTP_TIMEOUT_SECS`.
    pub fn from_env() -> RetryPolicy {
        Self::over(RetryPolicy::default())
    }

    /// The config's `download-retries` and `download-timeout-secs`, then the environment.
    pub fn for_config(cfg: &Config) -> RetryPolicy {
        let d = RetryPolicy::default();
        Self::over(RetryPolicy {
            attempts: cfg.download_retries.map(|n| n.max(1)).unwrap_or(d.attempts),
            timeout: cfg.download_timeout_secs.map(|s| Duration::from_secs(s.max(1))).unwrap_or(d.timeout),
            ..d
        })
    }

    fn over(d: RetryPolicy) -> RetryPolicy {
        // Config::load refused a bad value, naming it.
        let num = |name: &str| crate::config::env_number(name).ok().flatten();
        RetryPolicy {
            attempts: num("ROCMFORGE_RETRIES").map(|n| n.max(1) as u32).unwrap_or(d.attempts),
            base: num("ROCMFORGE_RETRY_BASE_MS").map(Duration::from_millis).unwrap_or(d.base),
            timeout: num("ROCMFORGE_HTTP_TIMEOUT_SECS").map(Duration::from_secs).unwrap_or(d.timeout),
        }
    }

    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 1u32 << failures.saturating_sub(1).min(10);
        (self.base * factor).min(Duration::from_secs(30))
    }
}

/// Where verified content with this sha256 lives in the cache.
pub fn cache_path(cfg: &Config, sha256: &str) -> PathBuf {
    cfg.cache_dir.join("downloads").join(sha256)
}

/// Ensures `downloads/<sha256>` holds `url`'s content, verified; returns its path.
pub fn fetch(
    cfg: &Config,
    label: &str,
    url: &str,
    sha256: &str,
    progress: &dyn Progress,
) -> Result<PathBuf, DownloadError> {
    fetch_with(cfg, label, url, sha256, progress, &RetryPolicy::for_config(cfg))
}

pub fn fetch_with(
    cfg: &Config,
    label: &str,
    url: &str,
    sha256: &str,
    progress: &dyn Progress,
    policy: &RetryPolicy,
) -> Result<PathBuf, DownloadError> {
    let dest = cache_path(cfg, sha256);
    if cached_intact(&dest, url, sha256, label, progress)? {
        return Ok(dest);
    }
    if cfg.offline {
        return Err(DownloadError::OfflineMissing { url: url.into(), sha256: sha256.into(), path: dest });
    }
    let dir = dest.parent().expect("downloads dir");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DownloadError::Io { path, source }
    };
    crate::fsutil::mark_cachedir(dir).map_err(io(dir))?;
    let lock_path = dir.join(format!("{sha256}.lock"));
    let _lock = super::lock_file(&lock_path).map_err(io(&lock_path))?;
    // Another process may have finished it while we waited for the lock.
    if cached_intact(&dest, url, sha256, label, progress)? {
        return Ok(dest);
    }
    let fetch_url = cfg.rewrite_url(url);
    if fetch_url.starts_with("file:") {
        copy_local(url, &fetch_url, Some(sha256), &dest)?;
        return Ok(dest);
    }
    let d = Downloader { url, fetch_url: &fetch_url, sha256: Some(sha256), label, progress, policy, dest: &dest };
    d.run()?;
    Ok(dest)
}

/// Downloads `url` whose digest no recipe states yet (an unpinned url source, for `lock`): it is
/// streamed to `downloads/url-<sha256 of the url>.part` (resumed and retried like any download),
/// hashed, and kept as `downloads/<sha256>`, so the build that follows does not download it
/// again. Returns the sha256 and the cached file.
pub fn fetch_unpinned(
    cfg: &Config,
    label: &str,
    url: &str,
    progress: &dyn Progress,
) -> Result<(String, PathBuf), DownloadError> {
    if cfg.offline {
        return Err(DownloadError::OfflineUnpinned { url: url.into() });
    }
    let dir = cfg.cache_dir.join("downloads");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DownloadError::Io { path, source }
    };
    crate::fsutil::mark_cachedir(&dir).map_err(io(&dir))?;
    let staging = dir.join(format!("url-{}", crate::digest::sha256_hex(url.as_bytes())));
    let lock_path = staging.with_extension("lock");
    let _lock = super::lock_file(&lock_path).map_err(io(&lock_path))?;
    let fetch_url = cfg.rewrite_url(url);
    let actual = if fetch_url.starts_with("file:") {
        copy_local(url, &fetch_url, None, &staging)?
    } else {
        let d = Downloader {
            url,
            fetch_url: &fetch_url,
            sha256: None,
            label,
            progress,
            policy: &RetryPolicy::for_config(cfg),
            dest: &staging,
        };
        d.run()?
    };
    let dest = cache_path(cfg, &actual);
    std::fs::rename(&staging, &dest).map_err(io(&dest))?;
    remember_verified(&dest);
    Ok((actual, dest))
}

/// The downloads this process wrote or verified, with the size and mtime they had then: the
/// same run uses them without hashing them again (a later run re-hashes).
static VERIFIED: std::sync::Mutex<Vec<(PathBuf, u64, Option<std::time::SystemTime>)>> =
    std::sync::Mutex::new(Vec::new());

fn stamp(path: &Path) -> Option<(u64, Option<std::time::SystemTime>)> {
    std::fs::metadata(path).ok().map(|m| (m.len(), m.modified().ok()))
}

fn remember_verified(path: &Path) {
    if let Some((len, mtime)) = stamp(path) {
        let mut v = VERIFIED.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|(p, _, _)| p != path);
        v.push((path.to_path_buf(), len, mtime));
    }
}

fn verified_this_run(path: &Path) -> bool {
    let Some((len, mtime)) = stamp(path) else { return false };
    VERIFIED.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|(p, l, m)| p == path && *l == len && *m == mtime)
}

/// The sha256 state of the first `bytes` of `path` (a part left by an earlier run).
fn hash_prefix(path: &Path, bytes: u64) -> std::io::Result<Hashed> {
    let mut h = Hashed::new(std::io::sink());
    std::io::copy(&mut File::open(path)?.take(bytes), &mut h)?;
    Ok(h)
}

/// Whether the cached file `dest` is there with the content `sha256` names. The cache is never
/// trusted unverified: the file is re-hashed when a later run fetches a recipe's source from it
/// (a recipe is built rarely; hashing a tarball is cheap next to building it), not in the run
/// that wrote or already verified it. An altered file is removed, with a warning naming both
/// digests, so the caller downloads it again.
fn cached_intact(
    dest: &Path,
    url: &str,
    sha256: &str,
    label: &str,
    progress: &dyn Progress,
) -> Result<bool, DownloadError> {
    if !dest.is_file() {
        return Ok(false);
    }
    if dest.file_name().is_some_and(|n| n == sha256) && verified_this_run(dest) {
        return Ok(true);
    }
    let io = |source| DownloadError::Io { path: dest.to_path_buf(), source };
    let (actual, bytes) = crate::digest::sha256_file(dest).map_err(io)?;
    if actual == sha256 {
        remember_verified(dest);
        return Ok(true);
    }
    progress.warn(
        label,
        &format!(
            "cached download `{}` of `{url}` was altered on disk (expected sha256 {sha256}, found {actual}, {bytes} bytes): removed; fetching it again",
            dest.display()
        ),
    );
    std::fs::remove_file(dest).map_err(io)?;
    Ok(false)
}

/// One problem `cache verify` found in the download cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadProblem {
    pub path: PathBuf,
    pub problem: String,
}

/// What `cache verify` checks in `downloads/`: every verified file (named by its sha256)
/// re-hashed. Returns (files checked, problems). `.part` files (with their `.part.validator`)
/// are resumable downloads, not damage: they are not reported here (see [`stale_parts`]).
pub fn verify_cache(cfg: &Config) -> (usize, Vec<DownloadProblem>) {
    let dir = cfg.cache_dir.join("downloads");
    let mut checked = 0;
    let mut problems = Vec::new();
    for path in entries(&dir) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if !is_sha256(&name) {
            continue;
        }
        checked += 1;
        match crate::digest::sha256_file(&path) {
            Ok((actual, _)) if actual == name => {}
            Ok((actual, bytes)) => problems.push(DownloadProblem {
                path,
                problem: format!(
                    "altered on disk: its name says sha256 {name}, its content has {actual} ({bytes} bytes)"
                ),
            }),
            Err(e) => problems.push(DownloadProblem { path, problem: format!("cannot be read: {e}") }),
        }
    }
    (checked, problems)
}

/// Removes a damaged cached download (the next build that needs it downloads it again).
pub fn remove_damaged(p: &DownloadProblem) -> std::io::Result<u64> {
    let size = std::fs::metadata(&p.path).map(|m| m.len()).unwrap_or(0);
    crate::fsutil::remove_if_exists(&p.path)?;
    Ok(size)
}

/// How old an unfinished download (`<sha256>.part`) must be before `cache gc` drops it: younger
/// ones are kept so the next run resumes them.
pub const STALE_PART_AGE: Duration = Duration::from_secs(14 * 24 * 3600);

/// Unfinished downloads older than `age` that no process is downloading now (their lock is
/// free): `(the .part file, its size)`. `cache gc` removes them with their `.part.validator`.
pub fn stale_parts(cfg: &Config, age: Duration) -> Vec<(PathBuf, u64)> {
    let dir = cfg.cache_dir.join("downloads");
    let mut out = Vec::new();
    for path in entries(&dir) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let Some(sha) = name.strip_suffix(".part").filter(|s| is_sha256(s)) else { continue };
        let Ok(m) = std::fs::metadata(&path) else { continue };
        let old = m.modified().ok().and_then(|t| t.elapsed().ok()).is_some_and(|e| e >= age);
        if old && !super::is_locked(&dir.join(format!("{sha}.lock"))) {
            out.push((path, m.len()));
        }
    }
    out
}

/// Removes an unfinished download and its validator.
pub fn remove_part(part: &Path) -> std::io::Result<()> {
    crate::fsutil::remove_if_exists(part)?;
    crate::fsutil::remove_if_exists(&part.with_extension("part.validator"))
}

fn is_sha256(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect()).unwrap_or_default();
    v.sort();
    v
}

struct Downloader<'a> {
    url: &'a str,
    fetch_url: &'a str,
    /// The expected digest; `None` for a download being pinned (any content is kept).
    sha256: Option<&'a str>,
    label: &'a str,
    progress: &'a dyn Progress,
    policy: &'a RetryPolicy,
    dest: &'a Path,
}

/// What one HTTP attempt ended with.
enum Attempt {
    /// The whole content is in the `.part` file; its sha256 and size (hashed as it arrived).
    Complete { sha256: String, bytes: u64 },
    /// Worth another try; `reached`: how many bytes the `.part` file holds now.
    Retry { why: RetryWhy, reached: u64 },
}

/// How an attempt's `.part` file was opened for the answer it got.
enum PartOpened {
    /// For the body, which goes after the `done` bytes it holds; `total`: the whole length, if
    /// the server gave it.
    Writing { file: File, done: u64, total: Option<u64> },
    /// Not for a body: the answer is the attempt's end.
    Answered(Attempt),
}

/// The sha256 of the `.part` file's first bytes, kept while it grows so the finished file is
/// never read again to hash it.
type Hashed = crate::digest::HashingWriter<std::io::Sink>;

enum RetryWhy {
    Status(StatusCode),
    Network(reqwest::Error),
    /// The body stopped half-way.
    Broken(std::io::Error),
    /// No byte came within the read timeout.
    Stalled(std::io::Error),
    Restart,
}

impl RetryWhy {
    /// An answer that another try cannot change: a client error other than a timeout or "too
    /// many requests" (404 Not Found, 403, 410...), or a URL the client cannot use at all (an
    /// unsupported scheme). Retrying those only makes the user wait.
    fn is_permanent(&self) -> bool {
        match self {
            RetryWhy::Status(s) => {
                s.is_client_error() && *s != StatusCode::REQUEST_TIMEOUT && *s != StatusCode::TOO_MANY_REQUESTS
            }
            // A redirect loop (or too many hops) answers the same way next time.
            RetryWhy::Network(e) => {
                e.is_builder()
                    || e.is_redirect()
                    || super::http::is_certificate_error(e)
                    || e.url().is_some_and(|u| !matches!(u.scheme(), "http" | "https"))
            }
            RetryWhy::Broken(_) | RetryWhy::Stalled(_) | RetryWhy::Restart => false,
        }
    }
}

impl Downloader<'_> {
    fn part(&self) -> PathBuf {
        self.dest.with_extension("part")
    }
    /// The `ETag` (strong) or `Last-Modified` of the response the `.part` file came from.
    fn validator_path(&self) -> PathBuf {
        self.dest.with_extension("part.validator")
    }
    fn io(&self, path: &Path) -> impl FnOnce(std::io::Error) -> DownloadError {
        let path = path.to_path_buf();
        move |source| DownloadError::Io { path, source }
    }
    fn via(&self) -> String {
        if self.url == self.fetch_url {
            String::new()
        } else {
            format!(" (via `{}`)", self.fetch_url)
        }
    }

    /// The download ended for want of progress (see [`Downloader::run`]).
    fn stalled(&self, attempts: u32, failures: u32, furthest: u64, source: std::io::Error) -> DownloadError {
        DownloadError::Stalled {
            url: self.url.into(),
            via: self.via(),
            attempts,
            failures,
            furthest,
            timeout: self.policy.timeout.as_secs(),
            source,
        }
    }

    fn discard_part(&self) {
        let _ = std::fs::remove_file(self.part());
        let _ = std::fs::remove_file(self.validator_path());
    }

    /// Downloads to `dest`; returns the content's sha256.
    ///
    /// The bound is on stalls, not on the transfer: an attempt that gets the `.part` file past
    /// the furthest byte reached so far is progress, however the server behaves (cut
    /// connections resumed with `Range`, a slow link); one that does not (a server that stops
    /// sending, answers errors, or ignores `Range` and cuts before the furthest byte again) is
    /// a failure, and `policy.attempts` failures in a row end the download. The `.part` file is
    /// kept, so a later run resumes it.
    fn run(&self) -> Result<String, DownloadError> {
        let client = super::http::client(self.policy.timeout, self.policy.timeout)
            .map_err(|source| DownloadError::Network { url: self.url.into(), via: self.via(), attempts: 0, source })?;
        let mut failures = 0u32;
        let mut attempts = 0u32;
        let mut clean_retry_done = false;
        let mut furthest = std::fs::metadata(self.part()).map(|m| m.len()).unwrap_or(0);
        let mut hashed: Option<Hashed> = None;
        loop {
            attempts += 1;
            let resumed_from = std::fs::metadata(self.part()).map(|m| m.len()).unwrap_or(0);
            match self.attempt(&client, &mut hashed)? {
                Attempt::Complete { sha256: actual, bytes } => {
                    if self.sha256.is_none_or(|want| want == actual) {
                        let part = self.part();
                        File::open(&part).and_then(|f| f.sync_all()).map_err(self.io(&part))?;
                        std::fs::rename(&part, self.dest).map_err(self.io(self.dest))?;
                        let _ = std::fs::remove_file(self.validator_path());
                        remember_verified(self.dest);
                        return Ok(actual);
                    }
                    self.discard_part();
                    hashed = None;
                    // A resumed file can be spliced from two versions: try once from scratch.
                    if resumed_from > 0 && !clean_retry_done {
                        clean_retry_done = true;
                        furthest = 0;
                        self.progress.warn(
                            self.label,
                            &format!("{}: hash mismatch after resuming; downloading again from the start", self.url),
                        );
                        continue;
                    }
                    return Err(DownloadError::Mismatch {
                        url: self.url.into(),
                        expected: self.sha256.unwrap_or_default().into(),
                        actual,
                        bytes,
                    });
                }
                Attempt::Retry { why, reached } => {
                    if why.is_permanent() {
                        failures = self.policy.attempts;
                    } else if reached > furthest {
                        furthest = reached;
                        failures = 0;
                    } else {
                        failures += 1;
                    }
                    if failures >= self.policy.attempts {
                        return Err(match why {
                            RetryWhy::Status(s) => DownloadError::Http {
                                url: self.url.into(),
                                via: self.via(),
                                status: s.as_u16(),
                                attempts,
                            },
                            RetryWhy::Network(source) if source.is_redirect() => DownloadError::Redirects {
                                url: self.url.into(),
                                via: self.via(),
                                last: source.url().map(|u| u.to_string()).unwrap_or_default(),
                            },
                            RetryWhy::Network(source) => {
                                DownloadError::Network { url: self.url.into(), via: self.via(), attempts, source }
                            }
                            RetryWhy::Broken(source) | RetryWhy::Stalled(source) => {
                                self.stalled(attempts, failures, furthest, source)
                            }
                            RetryWhy::Restart => self.stalled(
                                attempts,
                                failures,
                                furthest,
                                std::io::Error::other("the server's answers to Range do not match the part"),
                            ),
                        });
                    }
                    let why_text = match &why {
                        RetryWhy::Status(s) => format!("HTTP {s}"),
                        RetryWhy::Network(e) => super::http::explain(e),
                        RetryWhy::Broken(e) | RetryWhy::Stalled(e) => format!("transfer interrupted ({e})"),
                        RetryWhy::Restart => "restarting".into(),
                    };
                    let wait = if failures == 0 { Duration::ZERO } else { self.policy.backoff(failures) };
                    self.progress.message(
                        self.label,
                        &format!(
                            "{}: {why_text} at byte {reached}; {} ({failures} of {} attempts without progress)",
                            self.url,
                            if wait.is_zero() {
                                "resuming".to_string()
                            } else {
                                format!("retrying in {} ms", wait.as_millis())
                            },
                            self.policy.attempts
                        ),
                    );
                    std::thread::sleep(wait);
                }
            }
        }
    }

    fn attempt(
        &self,
        client: &reqwest::blocking::Client,
        hashed: &mut Option<Hashed>,
    ) -> Result<Attempt, DownloadError> {
        let have = std::fs::metadata(self.part()).map(|m| m.len()).unwrap_or(0);
        let mut resp = match self.request(client, have).send() {
            Ok(r) => r,
            Err(e) => return Ok(Attempt::Retry { why: RetryWhy::Network(e), reached: have }),
        };
        match self.open_part(&resp, have, hashed)? {
            PartOpened::Writing { file, done, total } => self.write_body(&mut resp, file, done, total, hashed),
            PartOpened::Answered(a) => Ok(a),
        }
    }

    /// The GET: for the bytes after the `have` the `.part` file holds, if any, and only while the
    /// file is the one the part came from (`If-Range` with its validator).
    fn request(&self, client: &reqwest::blocking::Client, have: u64) -> reqwest::blocking::RequestBuilder {
        let mut req = client.get(self.fetch_url);
        if have > 0 {
            req = req.header(RANGE, format!("bytes={have}-"));
            if let Some(v) = std::fs::read_to_string(self.validator_path()).ok().filter(|v| !v.is_empty()) {
                req = req.header(IF_RANGE, v);
            }
            self.progress.message(self.label, &format!("resuming {} at byte {have}", self.url));
        } else {
            self.progress.message(self.label, &format!("downloading {}{}", self.url, self.via()));
        }
        req
    }

    /// The `.part` file opened for what the server's status says: appended to (a range that
    /// starts where the part ends), started over (the whole file), or not written at all (the
    /// attempt's answer: the part already whole, a restart, a retry).
    fn open_part(
        &self,
        resp: &reqwest::blocking::Response,
        have: u64,
        hashed: &mut Option<Hashed>,
    ) -> Result<PartOpened, DownloadError> {
        let part = self.part();
        match resp.status() {
            StatusCode::PARTIAL_CONTENT if have > 0 => {
                let range =
                    resp.headers().get(CONTENT_RANGE).and_then(|v| v.to_str().ok()).and_then(parse_content_range);
                match range {
                    Some((start, total)) if start == have => {
                        let mut file = OpenOptions::new().append(true).open(&part).map_err(self.io(&part))?;
                        file.seek(SeekFrom::End(0)).map_err(self.io(&part))?;
                        // The bytes already there are hashed once (a part left by an earlier
                        // run); within a run the digest follows the file.
                        if hashed.as_ref().is_none_or(|h| h.len() != have) {
                            *hashed = Some(hash_prefix(&part, have).map_err(self.io(&part))?);
                        }
                        Ok(PartOpened::Writing { file, done: have, total })
                    }
                    _ => {
                        self.discard_part();
                        *hashed = None;
                        Ok(PartOpened::Answered(Attempt::Retry { why: RetryWhy::Restart, reached: 0 }))
                    }
                }
            }
            StatusCode::OK => {
                // A fresh start: no range asked, the server ignores ranges, or the file changed.
                if have > 0 {
                    self.progress
                        .message(self.label, &format!("{}: the server sent the whole file; starting over", self.url));
                }
                let file = File::create(&part).map_err(self.io(&part))?;
                let validator = resp
                    .headers()
                    .get(ETAG)
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| !v.starts_with("W/"))
                    .or_else(|| resp.headers().get(LAST_MODIFIED).and_then(|v| v.to_str().ok()))
                    .unwrap_or("")
                    .to_string();
                std::fs::write(self.validator_path(), validator).map_err(self.io(&self.validator_path()))?;
                *hashed = Some(Hashed::new(std::io::sink()));
                Ok(PartOpened::Writing { file, done: 0, total: resp.content_length() })
            }
            StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => {
                // Perhaps the part file is already whole; the hash decides.
                let h = match hashed.take() {
                    Some(h) if h.len() == have => h,
                    _ => hash_prefix(&part, have).map_err(self.io(&part))?,
                };
                Ok(PartOpened::Answered(Attempt::Complete { sha256: h.finish().0, bytes: have }))
            }
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT => {
                Ok(PartOpened::Answered(Attempt::Retry { why: RetryWhy::Status(s), reached: have }))
            }
            s => Err(DownloadError::Http { url: self.url.into(), via: self.via(), status: s.as_u16(), attempts: 1 }),
        }
    }

    /// The body written after the `done` bytes the part holds, hashed as it arrives; a body cut
    /// short (an error, or fewer bytes than the length the server gave) is a retry.
    fn write_body(
        &self,
        resp: &mut reqwest::blocking::Response,
        mut file: File,
        mut done: u64,
        total: Option<u64>,
        hashed: &mut Option<Hashed>,
    ) -> Result<Attempt, DownloadError> {
        let part = self.part();
        let h = hashed.as_mut().expect("a digest follows every part being written");
        let mut buf = vec![0u8; 256 * 1024];
        let mut last_report = 0u64;
        loop {
            match resp.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    file.write_all(&buf[..n]).map_err(self.io(&part))?;
                    h.write_all(&buf[..n]).map_err(self.io(&part))?;
                    done += n as u64;
                    if done - last_report >= 1 << 20 {
                        last_report = done;
                        self.progress.transfer(self.label, self.url, done, total);
                    }
                }
                Err(e) => {
                    file.flush().map_err(self.io(&part))?;
                    let why = if e.to_string().contains("timed out") || e.kind() == std::io::ErrorKind::TimedOut {
                        RetryWhy::Stalled(e)
                    } else {
                        RetryWhy::Broken(e)
                    };
                    return Ok(Attempt::Retry { why, reached: done });
                }
            }
        }
        file.flush().map_err(self.io(&part))?;
        self.progress.transfer(self.label, self.url, done, total);
        if let Some(t) = total {
            if done < t {
                let e = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the body ended after {done} of {t} bytes"),
                );
                return Ok(Attempt::Retry { why: RetryWhy::Broken(e), reached: done });
            }
        }
        let (sha256, bytes) = hashed.take().expect("hashed above").finish();
        Ok(Attempt::Complete { sha256, bytes })
    }
}

/// A `file://` source (a local mirror): copied while hashing, renamed only when it matches.
/// Copies a `file:` URL's content to `dest`, verified against `sha256` when given; returns its
/// sha256.
fn copy_local(url: &str, fetch_url: &str, sha256: Option<&str>, dest: &Path) -> Result<String, DownloadError> {
    let src = url::Url::parse(fetch_url).ok().and_then(|u| u.to_file_path().ok()).ok_or_else(|| DownloadError::Io {
        path: PathBuf::from(fetch_url),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a local file URL"),
    })?;
    let part = dest.with_extension("part");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| DownloadError::Io { path: p, source }
    };
    let mut from = File::open(&src).map_err(io(&src))?;
    let mut to = crate::digest::HashingWriter::new(File::create(&part).map_err(io(&part))?);
    std::io::copy(&mut from, &mut to).map_err(io(&part))?;
    to.inner.sync_all().map_err(io(&part))?;
    let (actual, bytes) = to.finish();
    if let Some(want) = sha256.filter(|w| *w != actual) {
        let _ = std::fs::remove_file(&part);
        return Err(DownloadError::Mismatch { url: url.into(), expected: want.into(), actual, bytes });
    }
    std::fs::rename(&part, dest).map_err(io(dest))?;
    remember_verified(dest);
    Ok(actual)
}

/// `bytes 100-199/200` -> (100, Some(200)).
fn parse_content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, _) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, total.trim().parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range() {
        assert_eq!(parse_content_range("bytes 100-199/200"), Some((100, Some(200))));
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, None)));
        assert_eq!(parse_content_range("items 1-2/3"), None);
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy { attempts: 3, base: Duration::from_millis(10), timeout: Duration::from_secs(1) };
        assert_eq!(p.backoff(1), Duration::from_millis(10));
        assert_eq!(p.backoff(3), Duration::from_millis(40));
        assert_eq!(p.backoff(30), Duration::from_millis(10240));
        let slow = RetryPolicy { base: Duration::from_secs(5), ..p };
        assert_eq!(slow.backoff(8), Duration::from_secs(30));
    }
}
