//! The local store with a shared remote cache behind it (sccache's multi-level shape): a key is
//! looked up locally, then remotely; a remote hit is checked (signature by a trusted key, the
//! key it was signed for, the inputs hashing to that key, the blob's size and sha256), unpacked
//! and stored locally, then used like any local artifact. A built artifact is stored locally,
//! then uploaded (blob first, signed manifest last, so a reader never finds a manifest whose
//! blob is missing), unless the store is read-only or has no signing key.
//!
//! During a build, uploads run on one thread of their own, in the order the artifacts were
//! stored ([`Store::run_uploads`]): the recipe's dependents start as soon as its artifact is
//! stored locally instead of waiting for the upload, which on a slow link can take minutes
//! for LLVM or PyTorch. The build waits for the queue at its end; what an interrupted build
//! did not upload, `rocmforge cache push` does.
//!
//! Nothing remote can fail a build: an unreachable server is one warning, after which the
//! store stops asking it; a refused artifact is built locally, with the reason.

use std::collections::VecDeque;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::remote::{self, Manifest, RemoteCache, RemoteError, COMPRESSION, MANIFEST_FORMAT};
use super::trust::{signed_text, PublicKey, SecretKey, Trusted};
use super::{Artifact, CacheError, KeyLock, LocalStore, Located, Store};
use crate::config::Config;
use crate::key::{CacheKey, KeyInputs};
use crate::progress::Progress;

pub struct LayeredStore {
    local: LocalStore,
    remote: RemoteCache,
    read_only: bool,
    signer: Option<SecretKey>,
    trusted: Trusted,
    progress: Arc<dyn Progress>,
    /// Set once the server did not answer: it is not asked again by this process.
    down: AtomicBool,
    /// Manifests checked by `locate` (the plan), for `get` (the build): the manifest (`None`:
    /// the server has none), or why it was refused.
    checked: Mutex<HashMap<String, Result<Option<Manifest>, String>>>,
    /// Keys whose remote copy was refused: not downloaded again, and replaced by the local
    /// build's upload.
    refused: Mutex<HashSet<String>>,
    /// Where blobs are packed and unpacked (inside the cache dir: same filesystem as the store).
    scratch: PathBuf,
    /// Artifacts waiting for the upload thread, when one runs.
    uploads: Mutex<Uploads>,
    uploads_changed: Condvar,
}

/// The upload queue of a build ([`Store::run_uploads`]).
#[derive(Default)]
struct Uploads {
    /// An upload thread runs (or is about to: [`Store::open_uploads`]): `put` queues instead of
    /// uploading itself.
    running: bool,
    /// No more will be queued: the thread ends when the queue is empty.
    closed: bool,
    queue: VecDeque<(Artifact, KeyInputs)>,
}

/// Uploads queued or under way in this process (all stores), for the interrupt handler to say.
static UNFINISHED_UPLOADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many uploads this process queued and has not finished: what an interrupted build leaves
/// to `rocmforge cache push`.
pub fn unfinished_uploads() -> usize {
    UNFINISHED_UPLOADS.load(Ordering::SeqCst)
}

/// How many manifests `prefetch` asks for side by side.
const PREFETCH_CONNECTIONS: usize = 8;

/// The scratch dir of blob transfers in the cache dir: `{get,put}-<key>-<random>-<pid>/` each.
const SCRATCH: &str = "remote-tmp";

/// Scratch dirs of blob transfers whose process is gone (a killed download or upload), for
/// `cache verify` to report and `cache gc` to remove.
pub fn stale_transfers(cache_dir: &Path) -> Vec<PathBuf> {
    crate::fsutil::stale_entries(&cache_dir.join(SCRATCH), |name, _| !crate::fsutil::owner_alive(name))
}

/// Who shows up in messages about the store itself.
const WHO: &str = "remote cache";

/// Why `cache push` did not push an artifact.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// Nothing can be pushed: read-only, no signing key, or the server cannot be reached.
    #[error("{0}")]
    Stop(String),
    /// This artifact cannot be pushed (damaged, unreadable, refused by the server).
    #[error("{0}")]
    Artifact(String),
}

impl LayeredStore {
    /// The store for `cfg` with the remote cache at `url`. Errors: a bad URL, a malformed
    /// `trusted-keys` entry or signing key file (each named).
    pub fn open(
        cfg: &Config,
        url: &str,
        local: LocalStore,
        progress: Arc<dyn Progress>,
    ) -> Result<LayeredStore, CacheError> {
        let r = &cfg.remote;
        let remote = RemoteCache::new(r, url, crate::source::download::RetryPolicy::for_config(cfg))
            .map_err(|e| CacheError::Remote(e.to_string()))?;
        let file = cfg.file.as_ref().map(|f| format!(" in {}", f.display())).unwrap_or_default();
        let mut trusted = Vec::new();
        for k in &r.trusted_keys {
            trusted.push(
                PublicKey::parse(k, &format!("trusted-keys entry{file}"))
                    .map_err(|e| CacheError::Remote(e.to_string()))?,
            );
        }
        let key_file = r.signing_key_file(&cfg.state_dir);
        let signer = match SecretKey::read(&key_file) {
            Ok(k) => Some(k),
            Err(super::trust::TrustError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && r.signing_key.is_none() =>
            {
                None
            }
            Err(e) => return Err(CacheError::Remote(e.to_string())),
        };
        // A machine trusts what it signed itself.
        if let Some(s) = &signer {
            if !trusted.iter().any(|k| k == &s.public()) {
                trusted.push(s.public());
            }
        }
        if signer.is_none() && !r.read_only {
            progress.warn(
                WHO,
                &format!(
                    "no signing key at {}: built artifacts are not uploaded to {} (`rocmforge cache keygen` makes one; or set `cache-read-only = true`)",
                    key_file.display(),
                    remote.shown()
                ),
            );
        }
        if trusted.is_empty() {
            progress.warn(
                WHO,
                &format!("`trusted-keys` is empty{file}: no artifact from {} will be accepted", remote.shown()),
            );
        }
        Ok(LayeredStore {
            scratch: cfg.cache_dir.join(SCRATCH),
            local,
            remote,
            read_only: r.read_only,
            signer,
            trusted: Trusted(trusted),
            progress,
            down: AtomicBool::new(false),
            checked: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashSet::new()),
            uploads: Mutex::new(Uploads::default()),
            uploads_changed: Condvar::new(),
        })
    }

    fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// Notes a remote failure: an unreachable server is said once and not asked again; other
    /// failures are warnings about `who`.
    fn failed(&self, who: &str, doing: &str, e: &RemoteError) {
        if e.is_unreachable() {
            if !self.down.swap(true, Ordering::Relaxed) {
                let later = if self.uploads_anything() {
                    "; what this build makes is not uploaded (`rocmforge cache push` uploads it later)"
                } else {
                    ""
                };
                self.progress.warn(
                    who,
                    &format!(
                        "{e} (while {doing}): going on without it, building locally what it would have given{later}"
                    ),
                );
            }
        } else {
            self.progress.warn(who, &format!("{doing}: {e}"));
        }
    }

    /// Does a build upload what it stores (not read-only, with a key to sign with)?
    fn uploads_anything(&self) -> bool {
        !self.read_only && self.signer.is_some()
    }

    /// The manifest under `key`, checked: `Ok(None)` when there is none (or the server is
    /// down), `Err(reason)` when it cannot be used.
    fn manifest(&self, key: &CacheKey) -> Result<Option<Manifest>, String> {
        if let Some(c) = self.checked.lock().unwrap_or_else(|e| e.into_inner()).get(key.as_str()) {
            return c.clone();
        }
        if self.is_down() {
            return Ok(None);
        }
        let checked = match self.remote.get_manifest(key.as_str()) {
            Ok(Some(bytes)) => self.check_manifest(key, &bytes).map(Some),
            Ok(None) => Ok(None),
            Err(e) => {
                self.failed(WHO, &format!("asking for artifact {}", key.short()), &e);
                return Ok(None);
            }
        };
        self.checked.lock().unwrap_or_else(|e| e.into_inner()).insert(key.0.clone(), checked.clone());
        checked
    }

    /// Fetches and checks the manifests of `keys` (those not in the local store), up to
    /// [`PREFETCH_CONNECTIONS`] at a time, for `manifest` to answer from memory.
    fn fetch_manifests(&self, keys: &[CacheKey]) {
        let todo: Vec<&CacheKey> = keys.iter().filter(|k| self.local.get(k).is_none()).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..PREFETCH_CONNECTIONS.min(todo.len()) {
                s.spawn(|| {
                    while let Some(k) = todo.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let _ = self.manifest(k);
                    }
                });
            }
        });
    }

    /// Everything about a manifest that can be checked before its blob is downloaded.
    fn check_manifest(&self, key: &CacheKey, bytes: &[u8]) -> Result<Manifest, String> {
        let m: Manifest = serde_json::from_slice(bytes).map_err(|e| format!("its manifest is not valid: {e}"))?;
        if m.format != MANIFEST_FORMAT {
            return Err(format!("its manifest has format {} (this rocmforge reads {MANIFEST_FORMAT})", m.format));
        }
        let (Some(signer), Some(sig)) = (&m.signer, &m.signature) else {
            return Err("it is not signed".into());
        };
        // Whatever the manifest says, the signature must be over it as it is now.
        self.trusted.check(signer, sig, &signed_text(&m.key, &m.blob.sha256, m.blob.size, &m.compression))?;
        if m.key != key.as_str() {
            return Err(format!(
                "its manifest was signed for key {}, not for the key {} it is stored under (copied from another key's path)",
                &m.key[..m.key.len().min(12)],
                key.short()
            ));
        }
        if m.inputs.key() != *key {
            return Err("the key inputs in its manifest do not hash to its key".into());
        }
        if m.compression != COMPRESSION {
            return Err(format!("its blob is compressed with `{}`, which this rocmforge does not read", m.compression));
        }
        if m.blob.sha256.len() != 64 || !m.blob.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("its manifest names no valid sha256".into());
        }
        Ok(m)
    }

    fn refuse(&self, key: &CacheKey, reason: String) -> CacheError {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).insert(key.0.clone());
        CacheError::Refused { key: key.short().to_string(), from: self.remote.shown(), reason }
    }

    fn was_refused(&self, key: &CacheKey) -> bool {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).contains(key.as_str())
    }

    /// A scratch dir for one blob transfer (`<kind>-<key>-<random>-<pid>`, see [`stale_transfers`]).
    fn transfer_dir(&self, kind: &str, key: &CacheKey) -> std::io::Result<tempfile::TempDir> {
        std::fs::create_dir_all(&self.scratch)?;
        tempfile::Builder::new()
            .prefix(&format!("{kind}-{}-", key.short()))
            .suffix(&format!("-{}", std::process::id()))
            .tempdir_in(&self.scratch)
    }

    /// Downloads, checks and unpacks the blob `m` names, then stores it locally.
    fn download(&self, key: &CacheKey, m: &Manifest) -> Result<Option<Artifact>, CacheError> {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| CacheError::Io { path: p, source }
        };
        let tmp = self.transfer_dir("get", key).map_err(io(&self.scratch))?;
        let blob = tmp.path().join("blob");
        let who = m.inputs.recipe.as_str();
        self.progress.message(
            who,
            &format!(
                "downloading artifact {} ({}) from {}",
                key.short(),
                crate::fsutil::human_size(m.blob.size),
                self.remote.shown()
            ),
        );
        let got = match self.remote.get_blob(&m.blob.sha256, &blob, m.blob.size) {
            Ok(got) => got,
            Err(e @ RemoteError::Unreachable { .. }) => {
                self.failed(who, &format!("downloading artifact {}", key.short()), &e);
                return Ok(None);
            }
            Err(e) => return Err(self.refuse(key, format!("its blob could not be downloaded: {e}"))),
        };
        if got.len < m.blob.size {
            let how = got.broke.map(|b| format!(": the transfer broke off ({b})")).unwrap_or_default();
            return Err(self.refuse(key, format!("its blob is truncated: {} of {} bytes{how}", got.len, m.blob.size)));
        }
        if got.len > m.blob.size {
            return Err(
                self.refuse(key, format!("its blob is longer than the {} bytes its manifest names", m.blob.size))
            );
        }
        if got.sha256 != m.blob.sha256 {
            return Err(self.refuse(
                key,
                format!(
                    "its blob's sha256 is {}, not the {} its signed manifest names (altered on the server?)",
                    &got.sha256[..12],
                    &m.blob.sha256[..12]
                ),
            ));
        }
        let stage = tmp.path().join("tree");
        if let Err(e) = remote::unpack(&blob, &stage) {
            return Err(self.refuse(key, format!("its blob cannot be unpacked: {e}")));
        }
        let a = self.local.store(key, &m.inputs, &stage)?;
        let resumed = match got.resumes {
            0 => String::new(),
            n => format!(" (the transfer broke off and was resumed {n} time(s))"),
        };
        self.progress
            .message(who, &format!("downloaded artifact {} from {}{resumed}", key.short(), self.remote.shown()));
        Ok(Some(a))
    }

    /// Uploads a stored artifact: blob, then signed manifest. Returns the blob's size, or `None`
    /// when the server has the artifact already (or there is no key to sign it with).
    fn upload(&self, a: &Artifact, inputs: &KeyInputs) -> Result<Option<u64>, RemoteError> {
        let Some(signer) = &self.signer else { return Ok(None) };
        let key = &a.key;
        // Another machine got there first (unless its copy was refused here: then it is replaced).
        if !self.was_refused(key) && self.remote.has_manifest(key.as_str())? {
            return Ok(None);
        }
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| RemoteError::Io { path: p, source }
        };
        let tmp = self.transfer_dir("put", key).map_err(io(&self.scratch))?;
        let blob = tmp.path().join("blob");
        let (sha256, size) = remote::pack(&a.tree(), &blob).map_err(io(&blob))?;
        self.remote.put_file(&format!("cas/{sha256}"), &blob, size)?;
        let text = signed_text(key.as_str(), &sha256, size, COMPRESSION);
        let m = Manifest {
            format: MANIFEST_FORMAT,
            key: key.0.clone(),
            blob: remote::BlobRef { sha256, size },
            compression: COMPRESSION.into(),
            inputs: inputs.clone(),
            signer: Some(signer.name.clone()),
            signature: Some(signer.sign(&text)),
        };
        self.remote.put_bytes(&format!("ac/{}", key.as_str()), serde_json::to_vec_pretty(&m).expect("serialises"))?;
        self.progress.message(
            &inputs.recipe,
            &format!(
                "uploaded artifact {} ({}) to {}",
                key.short(),
                crate::fsutil::human_size(m.blob.size),
                self.remote.shown()
            ),
        );
        Ok(Some(m.blob.size))
    }

    /// Whether this store may push (`cache push`): not read-only, and with a key to sign with.
    pub fn can_push(&self) -> Result<(), PushError> {
        if self.read_only {
            return Err(PushError::Stop(format!(
                "`cache-read-only` is set (or --cache-read-only): nothing is pushed to {}",
                self.remote.shown()
            )));
        }
        if self.signer.is_none() {
            return Err(PushError::Stop(format!(
                "no signing key: artifacts pushed to {} must be signed (`rocmforge cache keygen` makes a key)",
                self.remote.shown()
            )));
        }
        Ok(())
    }

    /// Uploads `a` for a build: a failure costs a warning.
    fn upload_logged(&self, a: &Artifact, inputs: &KeyInputs) {
        crate::fault::point("upload", &inputs.recipe);
        if let Err(e) = self.upload(a, inputs) {
            let doing = format!("uploading artifact {}", a.key.short());
            if e.is_unreachable() {
                self.failed(&inputs.recipe, &doing, &e);
            } else {
                self.progress.warn(&inputs.recipe, &format!("{doing}: {e} (`rocmforge cache push` uploads it later)"));
            }
        }
    }

    /// `cache push`: uploads the local artifact `a` unless the server has it, after re-hashing
    /// its files (a damaged artifact is never shared). Returns the uploaded size, `None` when the
    /// server had it. The caller holds the key's lock.
    pub fn push(&self, a: &Artifact) -> Result<Option<u64>, PushError> {
        self.can_push()?;
        self.local.verify(a).map_err(|e| PushError::Artifact(format!("{e}: not pushed")))?;
        let inputs = a.inputs().ok_or_else(|| {
            PushError::Artifact(format!("artifact {} has no readable inputs (`rocmforge cache verify`)", a.key.short()))
        })?;
        self.upload(a, &inputs).map_err(|e| {
            let msg = format!("uploading artifact {}: {e}", a.key.short());
            if e.is_unreachable() {
                PushError::Stop(msg)
            } else {
                PushError::Artifact(msg)
            }
        })
    }

    /// The local store behind the remote one.
    pub fn local(&self) -> &LocalStore {
        &self.local
    }
}

impl Store for LayeredStore {
    fn location(&self) -> String {
        format!("{} (then {})", self.local.root().display(), self.remote.shown())
    }

    fn check(&self, key: &CacheKey) -> bool {
        matches!(self.locate(key), Located::Local | Located::Remote(_))
    }

    fn prefetch(&self, keys: &[CacheKey]) {
        self.fetch_manifests(keys);
    }

    fn locate(&self, key: &CacheKey) -> Located {
        if self.local.get(key).is_some() {
            return Located::Local;
        }
        match self.manifest(key) {
            Ok(Some(_)) => Located::Remote(self.remote.shown()),
            Ok(None) => Located::Absent,
            Err(why) => {
                // Said by the plan; the build then takes the key as absent, and replaces the
                // server's copy with its own upload.
                self.refused.lock().unwrap_or_else(|e| e.into_inner()).insert(key.0.clone());
                Located::Refused(format!("the remote cache's artifact {} was refused: {why}", key.short()))
            }
        }
    }

    fn get(&self, key: &CacheKey) -> Result<Option<Artifact>, CacheError> {
        if let Some(a) = self.local.get(key) {
            return Ok(Some(a));
        }
        if self.was_refused(key) || self.is_down() {
            return Ok(None);
        }
        match self.manifest(key) {
            Ok(None) => Ok(None),
            Err(why) => Err(self.refuse(key, why)),
            Ok(Some(m)) => self.download(key, &m),
        }
    }

    fn put(&self, key: &CacheKey, inputs: &KeyInputs, stage: &Path) -> Result<Artifact, CacheError> {
        let a = self.local.store(key, inputs, stage)?;
        if !self.uploads_anything() || self.is_down() {
            return Ok(a);
        }
        let mut q = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        if q.running && !q.closed {
            UNFINISHED_UPLOADS.fetch_add(1, Ordering::SeqCst);
            q.queue.push_back((a.clone(), inputs.clone()));
            self.uploads_changed.notify_all();
        } else {
            drop(q);
            self.upload_logged(&a, inputs);
        }
        Ok(a)
    }

    fn open_uploads(&self) {
        self.uploads.lock().unwrap_or_else(|e| e.into_inner()).running = true;
    }

    fn run_uploads(&self) {
        self.open_uploads();
        loop {
            let mut q = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
            let next = loop {
                if let Some(job) = q.queue.pop_front() {
                    break Some(job);
                }
                if q.closed {
                    break None;
                }
                q = self.uploads_changed.wait(q).unwrap_or_else(|e| e.into_inner());
            };
            drop(q);
            let Some((a, inputs)) = next else { break };
            if !self.is_down() {
                // Not while a build of this process uses the key (deploys it, or `gc` of
                // another process removes it).
                let _lock = self.local.lock(&a.key);
                self.upload_logged(&a, &inputs);
            }
            UNFINISHED_UPLOADS.fetch_sub(1, Ordering::SeqCst);
        }
        let mut q = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        q.running = false;
        q.closed = false;
    }

    fn close_uploads(&self) {
        let mut q = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        // (Also before the thread began: it then finds the queue closed and returns.)
        if !q.queue.is_empty() {
            let n = q.queue.len();
            self.progress.message(
                WHO,
                &format!(
                    "waiting for {n} upload(s) to {} (Ctrl-C leaves them to `rocmforge cache push`)",
                    self.remote.shown()
                ),
            );
        }
        q.closed = true;
        self.uploads_changed.notify_all();
    }

    fn remove(&self, key: &CacheKey) -> Result<(), CacheError> {
        Store::remove(&self.local, key)
    }

    fn check_intact(&self, a: &Artifact) -> Result<(), CacheError> {
        self.local.check_intact(a)
    }
    fn check_whole(&self, a: &Artifact) -> Result<(), CacheError> {
        self.local.check_whole(a)
    }
    fn fingerprint(&self, a: &Artifact) -> Result<(), CacheError> {
        self.local.fingerprint(a)
    }

    fn lock(&self, key: &CacheKey) -> Result<KeyLock, CacheError> {
        self.local.lock(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_of_dead_processes_are_stale() {
        let d = tempfile::tempdir().unwrap();
        let scratch = d.path().join(SCRATCH);
        let dead = scratch.join("get-0123456789ab-Xy12Z-4000000000");
        let mine = scratch.join(format!("put-0123456789ab-Ab34C-{}", std::process::id()));
        std::fs::create_dir_all(&dead).unwrap();
        std::fs::create_dir_all(&mine).unwrap();
        assert_eq!(stale_transfers(d.path()), vec![dead]);
        assert!(stale_transfers(&d.path().join("none")).is_empty());
    }
}
