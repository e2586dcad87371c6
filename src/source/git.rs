//! Git sources: one bare mirror per repository URL in the cache (`git/<name>-<hash>.git`),
//! updated by fetch; work trees cloned from the mirror and checked out at the pinned commit;
//! submodules, recursively, each from its own mirror at the commit its parent records.
//!
//! What is verified, and why that is enough: a mirror is content-addressed. libgit2 checks every
//! object it reads against its id (strict hash verification, on by default), so a commit id
//! found in the mirror names exactly one tree, and a checkout of it either writes that tree or
//! fails; after the checkout HEAD is compared with the pinned commit (`WrongCommit`). The
//! checked-out work tree is not part of the cache: it lives in the recipe's work dir, carries a
//! prepared marker (source identity and patch digests, see `source::prepare`), and is where a
//! user edits on purpose (`rocmforge source`, then `patch diff`), so it is not re-hashed: a
//! re-hash would wipe those edits. What the cache does hold, the mirrors, is checked by git's
//! own object ids on every read.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::cell::Cell;

use git2::{ErrorClass, ErrorCode, FetchOptions, ObjectType, Oid, RemoteCallbacks, Repository};

use super::download::RetryPolicy;
use crate::config::Config;
use crate::progress::Progress;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("offline: no cached mirror of `{url}` (expected at `{mirror}`); run `rocmforge fetch` while online")]
    OfflineMissing { url: String, mirror: PathBuf },
    #[error("cannot fetch `{url}`{via}")]
    Fetch { url: String, via: String, source: git2::Error },
    #[error("commit {rev} is not in `{url}`{how}")]
    RevNotFound { url: String, rev: String, how: String },
    #[error("tag `{tag}` of `{url}` now points at {actual}, but the recipe pins rev {rev}: the tag moved; check the new commit and update `rev` (or `tag`)")]
    TagMoved { url: String, tag: String, rev: String, actual: String },
    #[error("tag `{tag}` does not exist in `{url}` (the recipe pins it with rev {rev})")]
    TagMissing { url: String, tag: String, rev: String },
    #[error("submodule `{path}` of `{parent}` at {commit}: {msg}")]
    Submodule { parent: String, path: String, commit: String, msg: String },
    #[error("checkout of `{url}` at {rev} into `{dest}` failed")]
    Checkout { url: String, rev: String, dest: PathBuf, source: git2::Error },
    #[error("`{dest}` is at {actual} after checkout, expected {rev} (`{url}`)")]
    WrongCommit { url: String, rev: String, actual: String, dest: PathBuf },
    #[error("git mirror `{path}` of `{url}`")]
    Mirror { url: String, path: PathBuf, source: git2::Error },
    #[error("cannot list the refs of `{url}`{via}")]
    List { url: String, via: String, source: git2::Error },
    /// `detail`: the attempts, what they reached, the read timeout and the last error.
    #[error("{what} `{url}`{via} stopped making progress: {detail}. Run the same command again later, or point `[url-rewrite]` at a mirror; `download-timeout-secs` and `download-retries` (or `ROCMFORGE_HTTP_TIMEOUT_SECS`, `ROCMFORGE_RETRIES`) set the bound")]
    Stalled { what: &'static str, url: String, via: String, detail: String },
    #[error("tag `{tag}` not found in `{url}`")]
    NoSuchTag { url: String, tag: String },
    #[error("`{path}`")]
    Io { path: PathBuf, source: std::io::Error },
}

fn via(url: &str, fetched: &str) -> String {
    if url == fetched {
        String::new()
    } else {
        format!(" (via `{fetched}`)")
    }
}

/// Where the bare mirror of `url` lives: keyed by the recipe's URL (not the rewritten one), so
/// switching mirrors keeps the cache.
pub fn mirror_path(cfg: &Config, url: &str) -> PathBuf {
    let hash = crate::digest::sha256_hex(url.trim_end_matches('/').as_bytes());
    let last = url.trim_end_matches('/').rsplit(['/', ':']).next().unwrap_or("repo");
    let name: String = last
        .trim_end_matches(".git")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' })
        .collect();
    let name = if name.is_empty() { "repo".to_string() } else { name };
    cfg.cache_dir.join("git").join(format!("{name}-{}.git", &hash[..16]))
}

/// A submodule resolved to its mirror and the commit its parent records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedSubmodule {
    /// Path from the top of the work tree (`third_party/ck/deps/x`).
    pub path: String,
    pub url: String,
    pub mirror: PathBuf,
    pub commit: String,
}

/// A git source present in the cache: the mirror, the verified commit, its submodules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedGit {
    pub url: String,
    pub mirror: PathBuf,
    pub commit: String,
    /// Depth-first, parents before children.
    pub submodules: Vec<FetchedSubmodule>,
}

/// Throttled fetch progress to the progress layer; what the attempt reached, in `reached`.
fn callbacks<'a>(progress: &'a dyn Progress, label: &'a str, reached: &'a Reached) -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    let mut last = Instant::now() - Duration::from_secs(1);
    cb.transfer_progress(move |s| {
        reached.bytes.set(reached.bytes.get().max(s.received_bytes() as u64));
        reached.objects.set(reached.objects.get().max(s.received_objects() as u64));
        reached.total.set(s.total_objects() as u64);
        let done = s.received_objects() == s.total_objects() && s.indexed_deltas() == s.total_deltas();
        if done || last.elapsed() >= Duration::from_millis(250) {
            last = Instant::now();
            progress.transfer(label, "objects", s.received_objects() as u64, Some(s.total_objects() as u64));
            progress.transfer(label, "bytes", s.received_bytes() as u64, None);
        }
        true
    });
    cb
}

pub(crate) fn lock_for(path: &Path) -> Result<std::fs::File, GitError> {
    super::lock_file(&path.with_extension("lock")).map_err(|source| GitError::Io { path: path.to_path_buf(), source })
}

/// Makes sure the mirror of `url` exists and (online) is up to date with the remote's branches
/// and tags. Offline, only checks that it exists.
pub fn ensure_mirror(cfg: &Config, url: &str, progress: &dyn Progress, label: &str) -> Result<PathBuf, GitError> {
    let path = mirror_path(cfg, url);
    if cfg.offline {
        if path.join("HEAD").is_file() {
            return Ok(path);
        }
        return Err(GitError::OfflineMissing { url: url.to_string(), mirror: path });
    }
    let parent = path.parent().expect("mirror has a parent");
    crate::fsutil::mark_cachedir(parent).map_err(|source| GitError::Io { path: parent.to_path_buf(), source })?;
    let _lock = lock_for(&path)?;
    let fetch_url = cfg.rewrite_url(url);
    let mirror_err = |source| GitError::Mirror { url: url.to_string(), path: path.clone(), source };
    let fresh = !path.join("HEAD").is_file();
    if fresh {
        progress.message(label, &format!("cloning mirror of {url}{}", via(url, &fetch_url)));
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        // A killed clone of this mirror left its temp dir: this clone redoes it.
        if let Some(name) = path.with_extension("tmp-").file_name() {
            let _ = crate::fsutil::remove_dead_temps(parent, &name.to_string_lossy());
        }
        let _ = std::fs::remove_dir_all(&tmp);
        // A failed clone removes its temp dir; a killed one leaves it to `cache gc`.
        let guard = crate::fsutil::TempDirGuard::new(tmp.clone());
        let repo = Repository::init_bare(&tmp).map_err(mirror_err)?;
        crate::fault::point("clone", label);
        fetch_into(cfg, &repo, url, &fetch_url, progress, label)?;
        drop(repo);
        std::fs::rename(&tmp, &path).map_err(|source| GitError::Io { path: path.clone(), source })?;
        guard.keep();
    } else {
        progress.message(label, &format!("updating mirror of {url}{}", via(url, &fetch_url)));
        let repo = Repository::open_bare(&path).map_err(mirror_err)?;
        fetch_into(cfg, &repo, url, &fetch_url, progress, label)?;
    }
    Ok(path)
}

/// Temp dirs of mirror clones (`git/<name>-<hash>.tmp-<pid>`) whose process is gone: a killed
/// clone's leftovers, for `cache verify` to report and `cache gc` to remove.
pub fn stale_temps(cfg: &Config) -> Vec<PathBuf> {
    crate::fsutil::stale_entries(&cfg.cache_dir.join("git"), |name, _| {
        name.rsplit_once(".tmp-").is_some_and(|(_, pid)| !crate::fsutil::owner_alive(pid))
    })
}

/// How far one attempt got: the furthest of the pack received (see [`with_stall_bound`]).
#[derive(Default)]
struct Reached {
    bytes: Cell<u64>,
    objects: Cell<u64>,
    total: Cell<u64>,
}

impl Reached {
    /// What an attempt (or the furthest one) got, for messages: `pack` for a fetch, else a
    /// listing of refs (which receives no pack).
    fn describe(bytes: u64, objects: u64, total: u64, pack: bool) -> String {
        if !pack {
            "got no list of refs (the server did not answer, or stopped answering)".to_string()
        } else if bytes == 0 {
            "got no pack data (the server did not answer, or stopped before sending objects)".to_string()
        } else if total > 0 {
            format!("got no further than {objects} of {total} objects ({bytes} bytes of the pack)")
        } else {
            format!("got no further than {bytes} bytes of the pack")
        }
    }
}

/// The stall bound of url downloads, for git: libgit2's socket timeouts (connect, and the
/// longest wait for any read or write) from `download-timeout-secs`. They are process-wide, so
/// they are set once, from the first config that fetches, before any git network operation
/// starts (every one comes through here); the value set is returned for messages.
#[allow(unsafe_code)]
fn socket_timeout(policy: &RetryPolicy) -> Duration {
    static SET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        let ms = policy.timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: libgit2 reads these ints when it opens a socket; no git network operation
        // runs before this initialiser has finished (they all wait on the OnceLock), so nothing
        // reads them while they are written.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms);
            let _ = git2::opts::set_server_timeout_in_milliseconds(ms);
        }
        Duration::from_millis(ms as u64)
    })
}

/// A URL libgit2 reaches over the network (not a local path or `file://`).
fn is_network_url(url: &str) -> bool {
    match url.split_once("://") {
        Some((scheme, _)) => !scheme.eq_ignore_ascii_case("file"),
        // scp-like `user@host:path`
        None => url.split_once(':').is_some_and(|(host, _)| host.contains('@') && !host.contains('/')),
    }
}

/// An answer another try cannot change: a refusal by the server (`remote error`, an HTTP
/// client error other than 408/429, a redirect loop, authentication, a page that is not a git
/// server's), a URL libgit2 cannot use, or a local repository. Timeouts, refused and cut
/// connections and server errors are worth another try.
fn is_permanent(fetch_url: &str, e: &git2::Error) -> bool {
    if e.code() == ErrorCode::Timeout {
        return false;
    }
    if !is_network_url(fetch_url) || matches!(e.code(), ErrorCode::Auth | ErrorCode::Certificate) {
        return true;
    }
    let msg = e.message();
    match e.class() {
        ErrorClass::Net => msg.starts_with("remote error") || msg.starts_with("unsupported URL protocol"),
        ErrorClass::Os | ErrorClass::Ssl | ErrorClass::Ssh | ErrorClass::Zlib | ErrorClass::Indexer => false,
        ErrorClass::Http => {
            if let Some(code) = msg.strip_prefix("unexpected http status code: ") {
                let code: u16 = code.trim().parse().unwrap_or(0);
                (400..500).contains(&code) && code != 408 && code != 429
            } else {
                [
                    "too many redirects",
                    "unexpected redirect",
                    "redirect without location",
                    "invalid content-type",
                    "no content-type",
                    "unknown http scheme",
                    "invalid URL",
                ]
                .iter()
                .any(|p| msg.starts_with(p))
                    || msg.contains("authentication")
            }
        }
        _ => true,
    }
}

const FETCH: &str = "fetch of";
const LIST: &str = "listing the refs of";

/// Runs a git network operation under the stall bound of url downloads (README: "Downloads are
/// bounded by their stalls"): each attempt waits at most `download-timeout-secs` for data; an
/// attempt that gets further into the pack than any before is progress, one that does not is a
/// failure, and `download-retries` failures in a row end it, naming the URL and what was
/// reached. A permanent error ends it at once (`permanent`).
#[allow(clippy::too_many_arguments)]
fn with_stall_bound<T>(
    cfg: &Config,
    what: &'static str,
    url: &str,
    fetch_url: &str,
    progress: &dyn Progress,
    label: &str,
    permanent: impl Fn(git2::Error) -> GitError,
    mut op: impl FnMut(&Reached) -> Result<T, git2::Error>,
) -> Result<T, GitError> {
    let policy = RetryPolicy::for_config(cfg);
    let timeout = socket_timeout(&policy);
    let (mut attempts, mut failures, mut furthest) = (0u32, 0u32, 0u64);
    loop {
        attempts += 1;
        let reached = Reached::default();
        let e = match op(&reached) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if is_permanent(fetch_url, &e) {
            return Err(permanent(e));
        }
        let bytes = reached.bytes.get();
        if bytes > furthest {
            furthest = bytes;
            failures = 0;
        } else {
            failures += 1;
        }
        let pack = what == FETCH;
        let got = Reached::describe(bytes, reached.objects.get(), reached.total.get(), pack);
        if failures >= policy.attempts {
            let reached = if bytes < furthest { Reached::describe(furthest, 0, 0, pack) } else { got };
            return Err(GitError::Stalled {
                what,
                url: url.into(),
                via: via(url, fetch_url),
                detail: format!(
                    "{failures} attempts in a row {reached} (each waits at most {} s for data; {attempts} attempt(s) in all; the last: {})",
                    timeout.as_secs().max(1),
                    e.message()
                ),
            });
        }
        let wait = if failures == 0 { Duration::ZERO } else { policy.backoff(failures) };
        progress.message(
            label,
            &format!(
                "{url}: {} ({got}); retrying in {} ms ({failures} of {} attempts without progress)",
                e.message(),
                wait.as_millis(),
                policy.attempts
            ),
        );
        std::thread::sleep(wait);
    }
}

fn fetch_into(
    cfg: &Config,
    repo: &Repository,
    url: &str,
    fetch_url: &str,
    progress: &dyn Progress,
    label: &str,
) -> Result<(), GitError> {
    let err = |source| GitError::Fetch { url: url.to_string(), via: via(url, fetch_url), source };
    with_stall_bound(cfg, FETCH, url, fetch_url, progress, label, err, |reached| {
        let mut remote = repo.remote_anonymous(fetch_url)?;
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(callbacks(progress, label, reached));
        opts.download_tags(git2::AutotagOption::None);
        opts.prune(git2::FetchPrune::On);
        opts.update_fetchhead(false);
        // Branches and tags only: `refs/*` would drag in every pull request of a GitHub repo.
        remote.fetch(&["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], Some(&mut opts), None)
    })
}

/// Try fetching one commit by id (servers that allow it: GitHub does). Failure is not an error;
/// a stall is bounded by the socket timeout `ensure_mirror` set.
fn fetch_commit(repo: &Repository, fetch_url: &str, rev: &str) {
    if let Ok(mut remote) = repo.remote_anonymous(fetch_url) {
        let mut opts = FetchOptions::new();
        opts.download_tags(git2::AutotagOption::None).update_fetchhead(false);
        let refspec = format!("+{rev}:refs/rocmforge/pinned/{rev}");
        let _ = remote.fetch(&[refspec.as_str()], Some(&mut opts), None);
    }
}

fn has_commit(repo: &Repository, rev: &str) -> bool {
    Oid::from_str(rev).ok().and_then(|oid| repo.find_commit(oid).ok()).is_some()
}

/// Ensures the mirror, verifies `rev` is in it and `tag` (if any) points at it, and does the same
/// for every submodule (recursively when `submodules`).
pub fn fetch(
    cfg: &Config,
    label: &str,
    url: &str,
    tag: Option<&str>,
    rev: &str,
    submodules: bool,
    progress: &dyn Progress,
) -> Result<FetchedGit, GitError> {
    let mirror = ensure_mirror(cfg, url, progress, label)?;
    let repo = Repository::open_bare(&mirror).map_err(|source| GitError::Mirror {
        url: url.into(),
        path: mirror.clone(),
        source,
    })?;
    if !has_commit(&repo, rev) && !cfg.offline {
        fetch_commit(&repo, &cfg.rewrite_url(url), rev);
    }
    if !has_commit(&repo, rev) {
        let how = if cfg.offline {
            " (the cached mirror does not have it; offline, nothing was fetched)".to_string()
        } else {
            " (no branch or tag of the repository contains it): check the recipe's `rev`".to_string()
        };
        return Err(GitError::RevNotFound { url: url.into(), rev: rev.into(), how });
    }
    if let Some(tag) = tag {
        match repo.revparse_single(&format!("refs/tags/{tag}^{{commit}}")) {
            Ok(obj) if obj.id().to_string() == rev => {}
            Ok(obj) => {
                return Err(GitError::TagMoved {
                    url: url.into(),
                    tag: tag.into(),
                    rev: rev.into(),
                    actual: obj.id().to_string(),
                })
            }
            Err(_) => return Err(GitError::TagMissing { url: url.into(), tag: tag.into(), rev: rev.into() }),
        }
    }
    let mut subs = Vec::new();
    if submodules {
        collect_submodules(cfg, label, url, &repo, rev, "", progress, &mut subs)?;
    }
    Ok(FetchedGit { url: url.into(), mirror, commit: rev.into(), submodules: subs })
}

/// One `[submodule "x"]` section of `.gitmodules`.
#[derive(Debug, PartialEq, Eq)]
pub struct GitModule {
    pub path: String,
    pub url: String,
}

/// Parses `.gitmodules` (git-config syntax, only what submodules use).
pub fn parse_gitmodules(text: &str) -> Vec<GitModule> {
    let mut out = Vec::new();
    let mut cur: Option<(Option<String>, Option<String>)> = None;
    let flush = |cur: &mut Option<(Option<String>, Option<String>)>, out: &mut Vec<GitModule>| {
        if let Some((Some(path), Some(url))) = cur.take() {
            out.push(GitModule { path, url });
        }
    };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            flush(&mut cur, &mut out);
            cur = if line.starts_with("[submodule") { Some((None, None)) } else { None };
            continue;
        }
        if let (Some(c), Some((k, v))) = (cur.as_mut(), line.split_once('=')) {
            let v = v.trim().trim_matches('"').to_string();
            match k.trim() {
                "path" => c.0 = Some(v.trim_end_matches('/').to_string()),
                "url" => c.1 = Some(v),
                _ => {}
            }
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// A submodule URL relative to its parent's (`../x.git`), resolved like git does.
pub fn resolve_submodule_url(parent: &str, url: &str) -> String {
    if !(url.starts_with("./") || url.starts_with("../")) {
        return url.to_string();
    }
    let mut base = parent.trim_end_matches('/').to_string();
    let mut rest = url;
    loop {
        if let Some(r) = rest.strip_prefix("./") {
            rest = r;
        } else if let Some(r) = rest.strip_prefix("../") {
            rest = r;
            match base.rfind('/') {
                Some(i) if !base[..i].ends_with('/') => base.truncate(i),
                _ => {}
            }
        } else {
            break;
        }
    }
    format!("{base}/{rest}")
}

#[allow(clippy::too_many_arguments)]
fn collect_submodules(
    cfg: &Config,
    label: &str,
    url: &str,
    repo: &Repository,
    commit: &str,
    prefix: &str,
    progress: &dyn Progress,
    out: &mut Vec<FetchedSubmodule>,
) -> Result<(), GitError> {
    let sub_err = |path: &str, msg: String| GitError::Submodule {
        parent: url.into(),
        path: path.into(),
        commit: commit.into(),
        msg,
    };
    let oid = Oid::from_str(commit).map_err(|e| sub_err("", e.to_string()))?;
    let tree = repo.find_commit(oid).and_then(|c| c.tree()).map_err(|e| sub_err("", e.to_string()))?;
    let Ok(entry) = tree.get_path(Path::new(".gitmodules")) else { return Ok(()) };
    let blob = repo.find_blob(entry.id()).map_err(|e| sub_err(".gitmodules", e.to_string()))?;
    let modules = parse_gitmodules(&String::from_utf8_lossy(blob.content()));
    for m in modules {
        let Ok(e) = tree.get_path(Path::new(&m.path)) else {
            // Listed in .gitmodules but not in the tree: git skips it too.
            continue;
        };
        if e.kind() != Some(ObjectType::Commit) {
            continue;
        }
        let sub_commit = e.id().to_string();
        let sub_url = resolve_submodule_url(url, &m.url);
        let full = format!("{prefix}{}", m.path);
        let mirror = ensure_mirror(cfg, &sub_url, progress, label).map_err(|e| match e {
            e @ GitError::OfflineMissing { .. } => e,
            other => sub_err(&m.path, format!("{other}{}", other.source_text())),
        })?;
        let sub_repo = Repository::open_bare(&mirror).map_err(|e| sub_err(&m.path, e.to_string()))?;
        if !has_commit(&sub_repo, &sub_commit) && !cfg.offline {
            fetch_commit(&sub_repo, &cfg.rewrite_url(&sub_url), &sub_commit);
        }
        if !has_commit(&sub_repo, &sub_commit) {
            return Err(sub_err(&m.path, format!("the recorded commit {sub_commit} is not in `{sub_url}`")));
        }
        out.push(FetchedSubmodule {
            path: full.clone(),
            url: sub_url.clone(),
            mirror: mirror.clone(),
            commit: sub_commit.clone(),
        });
        collect_submodules(cfg, label, &sub_url, &sub_repo, &sub_commit, &format!("{full}/"), progress, out)?;
    }
    Ok(())
}

impl GitError {
    /// The git2 cause, for messages that fold it into one line.
    fn source_text(&self) -> String {
        use std::error::Error;
        self.source().map(|s| format!(": {s}")).unwrap_or_default()
    }
}

/// Clones `mirror` into `dest` (must not exist or be empty) and checks out `rev`, detached.
fn clone_at(url: &str, mirror: &Path, rev: &str, dest: &Path) -> Result<(), GitError> {
    let err = |source| GitError::Checkout { url: url.into(), rev: rev.into(), dest: dest.to_path_buf(), source };
    let mut no_checkout = git2::build::CheckoutBuilder::new();
    no_checkout.dry_run();
    let repo = git2::build::RepoBuilder::new()
        .clone_local(git2::build::CloneLocal::Local)
        .with_checkout(no_checkout)
        .clone(&mirror.to_string_lossy(), dest)
        .map_err(err)?;
    let oid = Oid::from_str(rev).map_err(err)?;
    let commit = repo.find_commit(oid).map_err(err)?;
    let mut co = git2::build::CheckoutBuilder::new();
    co.force().remove_untracked(true);
    repo.checkout_tree(commit.as_object(), Some(&mut co)).map_err(err)?;
    repo.set_head_detached(oid).map_err(err)?;
    // Point `origin` at the real upstream, so `git log origin/...` makes sense to a user.
    let _ = repo.remote_set_url("origin", url);
    let head = repo.head().and_then(|h| h.peel_to_commit()).map_err(err)?.id().to_string();
    if head != rev {
        return Err(GitError::WrongCommit { url: url.into(), rev: rev.into(), actual: head, dest: dest.to_path_buf() });
    }
    Ok(())
}

/// The pristine work tree at `dest`: the commit, then each submodule at its recorded commit.
pub fn checkout(fetched: &FetchedGit, dest: &Path) -> Result<(), GitError> {
    clone_at(&fetched.url, &fetched.mirror, &fetched.commit, dest)?;
    for s in &fetched.submodules {
        let sub_dest = dest.join(&s.path);
        std::fs::create_dir_all(&sub_dest).map_err(|source| GitError::Io { path: sub_dest.clone(), source })?;
        clone_at(&s.url, &s.mirror, &s.commit, &sub_dest)?;
    }
    Ok(())
}

/// The commit `tag` names on the remote `url` (after URL rewriting), without fetching: for `lock`.
/// Bounded like a fetch (see [`with_stall_bound`]).
pub fn resolve_tag(
    cfg: &Config,
    label: &str,
    url: &str,
    tag: &str,
    progress: &dyn Progress,
) -> Result<String, GitError> {
    let fetch_url = cfg.rewrite_url(url);
    let err = |source| GitError::List { url: url.into(), via: via(url, &fetch_url), source };
    let want = format!("refs/tags/{tag}");
    let peeled = format!("{want}^{{}}");
    let found = with_stall_bound(cfg, LIST, url, &fetch_url, progress, label, err, |_| {
        let mut remote = git2::Remote::create_detached(fetch_url.as_str())?;
        remote.connect(git2::Direction::Fetch)?;
        let heads = remote.list()?;
        let find = |name: &str| heads.iter().find(|h| h.name() == name).map(|h| h.oid().to_string());
        Ok(find(&peeled).or_else(|| find(&want)))
    })?;
    found.ok_or_else(|| GitError::NoSuchTag { url: url.into(), tag: tag.into() })
}

/// Reads files of a fetched git source straight from the mirrors (no checkout): patch checks.
pub struct GitTreeReader {
    /// (path prefix, repo, tree) deepest first.
    layers: Vec<(String, Repository, Oid)>,
}

impl GitTreeReader {
    pub fn open(fetched: &FetchedGit) -> Result<GitTreeReader, GitError> {
        let open = |url: &str, mirror: &Path, commit: &str| -> Result<(Repository, Oid), GitError> {
            let err = |source| GitError::Mirror { url: url.into(), path: mirror.to_path_buf(), source };
            let repo = Repository::open_bare(mirror).map_err(err)?;
            let tree = repo.find_commit(Oid::from_str(commit).map_err(err)?).and_then(|c| c.tree()).map_err(err)?.id();
            Ok((repo, tree))
        };
        let mut layers = Vec::new();
        let (r, t) = open(&fetched.url, &fetched.mirror, &fetched.commit)?;
        layers.push((String::new(), r, t));
        for s in &fetched.submodules {
            let (r, t) = open(&s.url, &s.mirror, &s.commit)?;
            layers.push((format!("{}/", s.path), r, t));
        }
        layers.sort_by_key(|l| std::cmp::Reverse(l.0.len()));
        Ok(GitTreeReader { layers })
    }

    /// Whether `path` is a directory of the tree (a submodule's root counts).
    pub fn has_dir(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        for (prefix, repo, tree) in &self.layers {
            if format!("{path}/") == *prefix {
                return true;
            }
            let Some(rel) = path.strip_prefix(prefix.as_str()) else { continue };
            let Ok(tree) = repo.find_tree(*tree) else { return false };
            return tree.get_path(Path::new(rel)).is_ok_and(|e| e.kind() == Some(ObjectType::Tree));
        }
        false
    }
}

impl crate::patch::TreeRead for GitTreeReader {
    fn read(&self, path: &str) -> std::io::Result<Option<Vec<u8>>> {
        for (prefix, repo, tree) in &self.layers {
            let Some(rel) = path.strip_prefix(prefix.as_str()) else { continue };
            let tree = repo.find_tree(*tree).map_err(std::io::Error::other)?;
            let Ok(entry) = tree.get_path(Path::new(rel)) else { return Ok(None) };
            if entry.kind() != Some(ObjectType::Blob) {
                return Ok(None);
            }
            let blob = repo.find_blob(entry.id()).map_err(std::io::Error::other)?;
            return Ok(Some(blob.content().to_vec()));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitmodules_parse() {
        let m = parse_gitmodules(
            "[submodule \"ck\"]\n\tpath = third_party/ck\n\turl = https://github.com/ROCm/composable_kernel.git\n[core]\n x = 1\n[submodule \"b\"]\n\turl = ../b.git\n\tpath = b/\n",
        );
        assert_eq!(
            m,
            vec![
                GitModule {
                    path: "third_party/ck".into(),
                    url: "https://github.com/ROCm/composable_kernel.git".into()
                },
                GitModule { path: "b".into(), url: "../b.git".into() },
            ]
        );
    }

    #[test]
    fn relative_submodule_urls() {
        assert_eq!(
            resolve_submodule_url("https://github.com/pytorch/pytorch.git", "../kineto.git"),
            "https://github.com/pytorch/kineto.git"
        );
        assert_eq!(resolve_submodule_url("https://github.com/a/b", "./c"), "https://github.com/a/b/c");
        assert_eq!(resolve_submodule_url("git://h/x/y.git", "../../z.git"), "git://h/z.git");
        assert_eq!(resolve_submodule_url("p", "https://x/y"), "https://x/y");
    }

    #[test]
    fn only_network_urls_are_retried() {
        for u in ["https://h/x.git", "git://127.0.0.1:9/x", "ssh://h/x", "git@github.com:a/b.git"] {
            assert!(is_network_url(u), "{u}");
        }
        for u in ["/srv/x.git", "file:///srv/x.git", "./x", "C/x:y"] {
            assert!(!is_network_url(u), "{u}");
        }
        let timeout = git2::Error::new(ErrorCode::Timeout, ErrorClass::Net, "could not read from socket: timed out");
        assert!(!is_permanent("https://h/x.git", &timeout));
        let refused = git2::Error::new(ErrorCode::GenericError, ErrorClass::Net, "remote error: access denied");
        assert!(is_permanent("git://h/x.git", &refused));
        let http = |m: &str| git2::Error::new(ErrorCode::GenericError, ErrorClass::Http, m);
        assert!(is_permanent("https://h/x.git", &http("unexpected http status code: 404")));
        assert!(!is_permanent("https://h/x.git", &http("unexpected http status code: 503")));
        assert!(!is_permanent("https://h/x.git", &http("unexpected http status code: 429")));
        assert!(is_permanent("https://h/x.git", &http("too many redirects or authentication replays")));
    }

    #[test]
    fn mirror_names() {
        let cfg = Config::load_from(Path::new("/nonexistent/rocmforge.toml")).unwrap();
        let p = mirror_path(&cfg, "https://github.com/ROCm/MIOpen.git");
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.starts_with("MIOpen-") && name.ends_with(".git") && name.len() == "MIOpen-".len() + 16 + 4,
            "{name}"
        );
        assert_ne!(p, mirror_path(&cfg, "https://github.com/other/MIOpen.git"));
    }
}
