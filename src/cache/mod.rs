//! The artifact cache: every recipe's result stored under its cache key, behind one `Store` trait
//! (in the spirit of sccache's `Storage`: get / put / check / location) so a remote tier can sit
//! behind the local disk store without the plan or the engine knowing. The local disk store
//! (`local`) is the first implementation; it also serves `cache list|verify|gc`. `layered` puts
//! a shared HTTP cache (`remote`, bazel-remote's layout) behind it, accepting only artifacts
//! signed by a trusted key (`trust`).

mod layered;
mod local;
pub mod remote;
pub mod trust;

use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::key::{CacheKey, KeyInputs};
use crate::progress::Progress;

pub use layered::{stale_transfers, unfinished_uploads, LayeredStore, PushError};
pub use local::{Artifact, CacheError, KeyLock, LocalStore, StatPrint};

/// Where an artifact was found (the plan's "cached" or "remote hit").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// In the local store.
    Local,
    /// In the remote cache at this URL, signed by a trusted key; downloaded when used.
    Remote(String),
    /// The remote cache has an entry that cannot be used: why.
    Refused(String),
    Absent,
}

/// Where artifacts are kept. An artifact handed out by `get` or `put` lies on local disk, ready
/// to deploy; a store with a remote tier copies a remote hit to local disk first.
pub trait Store: Send + Sync {
    /// Where the store is, for messages (a directory, a URL).
    fn location(&self) -> String;
    /// Whether a complete artifact for `key` is there (cheap: the plan asks for every recipe).
    fn check(&self, key: &CacheKey) -> bool;
    /// Where the artifact for `key` is (the plan asks for every recipe): a store with a remote
    /// tier says `Remote` for an artifact it can download, `Refused` for one it would refuse.
    fn locate(&self, key: &CacheKey) -> Located {
        if self.check(key) {
            Located::Local
        } else {
            Located::Absent
        }
    }
    /// The complete artifact for `key`, if there is one. A remote copy that fails a check is
    /// [`CacheError::Refused`] (once: asked again, the key is absent).
    fn get(&self, key: &CacheKey) -> Result<Option<Artifact>, CacheError>;
    /// Stores `stage` (the install tree, relative to the prefix; moved or copied) under `key`
    /// with the inputs that made it. The caller holds the key's lock.
    fn put(&self, key: &CacheKey, inputs: &KeyInputs, stage: &Path) -> Result<Artifact, CacheError>;
    /// Removes the artifact for `key` (a forced rebuild replaces it).
    fn remove(&self, key: &CacheKey) -> Result<(), CacheError>;
    /// The cheap check before `a` is used (deployed, published): its files are as stored
    /// ([`CacheError::Altered`] says which is not). The caller holds the key's lock.
    fn check_intact(&self, a: &Artifact) -> Result<(), CacheError>;
    /// The whole check before `a`'s files are laid into a prefix: every file re-hashed, then
    /// fingerprinted afresh. The caller holds the key's lock.
    fn check_whole(&self, a: &Artifact) -> Result<(), CacheError>;
    /// Records `a`'s fingerprints as its files are now (after a deploy linked them). The caller
    /// holds the key's lock.
    fn fingerprint(&self, a: &Artifact) -> Result<(), CacheError>;
    /// Serialises work on one key between processes (held while storing or deploying).
    fn lock(&self, key: &CacheKey) -> Result<KeyLock, CacheError>;
    /// `locate` will be asked about these keys: a store with a remote tier fetches what it needs
    /// for them side by side now.
    fn prefetch(&self, keys: &[CacheKey]) {
        let _ = keys;
    }
    /// From now on `put` queues its uploads for [`Store::run_uploads`] instead of uploading
    /// before it returns: called before the thread that runs them is spawned, so no `put` of the
    /// build finds the queue not yet open however late that thread starts.
    fn open_uploads(&self) {}
    /// Runs, on the calling thread, the uploads `put` queues (a store with a remote tier uploads
    /// in the background of a build this way), until [`Store::close_uploads`] and the queue is
    /// empty. Without a thread in here, `put` uploads before it returns.
    fn run_uploads(&self) {}
    /// No more uploads will be queued: `run_uploads` returns once the queue is empty.
    fn close_uploads(&self) {}
}

/// The artifact store `cfg` asks for: the local store, behind a remote cache when `cache-url`
/// is set. Warnings (an unreachable server, a refused artifact) go to `progress`.
pub fn open(cfg: &Config, progress: Arc<dyn Progress>) -> Result<Box<dyn Store>, CacheError> {
    let local = LocalStore::new(&cfg.cache_dir);
    match &cfg.remote.url {
        None => Ok(Box::new(local)),
        Some(url) => Ok(Box::new(LayeredStore::open(cfg, url, local, progress)?)),
    }
}
