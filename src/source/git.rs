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

use git2::{FetchOptions, ObjectType, Oid, RemoteCallbacks, Repository};

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

/// Throttled fetch progress to the progress layer.
fn callbacks<'a>(progress: &'a dyn Progress, label: &'a str) -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    let mut last = Instant::now() - Duration::from_secs(1);
    cb.transfer_progress(move |s| {
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
    super::ensure_cache_dir(parent).map_err(|source| GitError::Io { path: parent.to_path_buf(), source })?;
    let _lock = lock_for(&path)?;
    let fetch_url = cfg.rewrite_url(url);
    let mirror_err = |source| GitError::Mirror { url: url.to_string(), path: path.clone(), source };
    let fresh = !path.join("HEAD").is_file();
    if fresh {
        progress.message(label, &format!("cloning mirror of {url}{}", via(url, &fetch_url)));
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        // A failed clone removes its temp dir; a killed one leaves it to `cache gc`.
        let guard = crate::fsutil::TempDirGuard::new(tmp.clone());
        let repo = Repository::init_bare(&tmp).map_err(mirror_err)?;
        crate::fault::point("clone", label);
        fetch_into(&repo, url, &fetch_url, progress, label)?;
        drop(repo);
        std::fs::rename(&tmp, &path).map_err(|source| GitError::Io { path: path.clone(), source })?;
        guard.keep();
    } else {
        progress.message(label, &format!("updating mirror of {url}{}", via(url, &fetch_url)));
        let repo = Repository::open_bare(&path).map_err(mirror_err)?;
        fetch_into(&repo, url, &fetch_url, progress, label)?;
    }
    Ok(path)
}

/// Temp dirs of mirror clones (`git/<name>-<hash>.tmp-<pid>`) whose process is gone: a killed
/// clone's leftovers, for `cache verify` to report and `cache gc` to remove.
pub fn stale_temps(cfg: &Config) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(cfg.cache_dir.join("git")) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.rsplit_once(".tmp-").is_some_and(|(_, pid)| !crate::fsutil::owner_alive(pid))
        })
        .collect();
    v.sort();
    v
}

fn fetch_into(
    repo: &Repository,
    url: &str,
    fetch_url: &str,
    progress: &dyn Progress,
    label: &str,
) -> Result<(), GitError> {
    let err = |source| GitError::Fetch { url: url.to_string(), via: via(url, fetch_url), source };
    let mut remote = repo.remote_anonymous(fetch_url).map_err(err)?;
    let mut opts = FetchOptions::new();
    opts.remote_callbacks(callbacks(progress, label));
    opts.download_tags(git2::AutotagOption::None);
    opts.prune(git2::FetchPrune::On);
    opts.update_fetchhead(false);
    // Branches and tags only: `refs/*` would drag in every pull request of a GitHub repo.
    remote.fetch(&["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], Some(&mut opts), None).map_err(err)?;
    Ok(())
}

/// Try fetching one commit by id (servers that allow it: GitHub does). Failure is not an error.
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
pub fn resolve_tag(cfg: &Config, url: &str, tag: &str) -> Result<String, GitError> {
    let fetch_url = cfg.rewrite_url(url);
    let err = |source| GitError::List { url: url.into(), via: via(url, &fetch_url), source };
    let mut remote = git2::Remote::create_detached(fetch_url.as_str()).map_err(err)?;
    remote.connect(git2::Direction::Fetch).map_err(err)?;
    let want = format!("refs/tags/{tag}");
    let peeled = format!("{want}^{{}}");
    let heads = remote.list().map_err(err)?;
    let find = |name: &str| heads.iter().find(|h| h.name() == name).map(|h| h.oid().to_string());
    find(&peeled).or_else(|| find(&want)).ok_or_else(|| GitError::NoSuchTag { url: url.into(), tag: tag.into() })
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
