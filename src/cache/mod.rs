//! The artifact cache: every recipe's result stored under its cache key, behind one `Store` trait
//! (in the spirit of sccache's `Storage`: get / put / check / location) so a remote tier can sit
//! behind the local disk store without the plan or the engine knowing. The local disk store
//! (`local`) is the first implementation; it also serves `cache list|verify|gc`.

mod local;

use std::path::Path;

use crate::key::{CacheKey, KeyInputs};

pub use local::{Artifact, CacheError, KeyLock, LocalStore, StatPrint};

/// Where artifacts are kept. An artifact handed out by `get` or `put` lies on local disk, ready
/// to deploy; a store with a remote tier copies a remote hit to local disk first.
pub trait Store: Send + Sync {
    /// Where the store is, for messages (a directory, a URL).
    fn location(&self) -> String;
    /// Whether a complete artifact for `key` is there (cheap: the plan asks for every recipe).
    fn check(&self, key: &CacheKey) -> bool;
    /// The complete artifact for `key`, if there is one.
    fn get(&self, key: &CacheKey) -> Result<Option<Artifact>, CacheError>;
    /// Stores `stage` (the install tree, relative to the prefix; moved or copied) under `key`
    /// with the inputs that made it. The caller holds the key's lock.
    fn put(&self, key: &CacheKey, inputs: &KeyInputs, stage: &Path) -> Result<Artifact, CacheError>;
    /// Removes the artifact for `key` (a forced rebuild replaces it).
    fn remove(&self, key: &CacheKey) -> Result<(), CacheError>;
    /// The cheap check before `a` is used (deployed, published): its files are as stored
    /// ([`CacheError::Altered`] says which is not). The caller holds the key's lock.
    fn check_intact(&self, a: &Artifact) -> Result<(), CacheError>;
    /// Serialises work on one key between processes (held while storing or deploying).
    fn lock(&self, key: &CacheKey) -> Result<KeyLock, CacheError>;
}
