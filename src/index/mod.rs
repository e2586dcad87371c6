//! The local package index: wheels the stack builds, published into a PEP 503 "simple"
//! directory that pip and uv install from over `file://`, or over `http://` via [`serve`].
//!
//! Layout of an index directory:
//!
//! ```text
//! index.json                      the source of truth (projects, files, hashes, yanks)
//! .lock                           held while publishing or yanking
//! simple/index.html               every project
//! simple/<project>/index.html     every file, with #sha256=, data-requires-python, ...
//! simple/<project>/<wheel>        the wheel, never rewritten with other bytes
//! simple/<project>/<wheel>.metadata   its METADATA (PEP 658)
//! ```
//!
//! Pages are regenerated from `index.json`; every file is written atomically (temp + rename),
//! wheels before the pages that link them, so a reader sees a whole old or whole new index.

pub mod pages;
pub mod serve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::wheel;
pub use crate::wheel::{normalize_name, Version, WheelError, WheelName};

/// Bump when `index.json` changes shape; an older rocmforge then refuses instead of misreading.
pub const STATE_FORMAT: u32 = 1;

/// The name of the state file at the top of an index directory.
pub const STATE_FILE: &str = "index.json";

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("failed to {action} `{path}`")]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error("`{path}` is not a wheel the index accepts")]
    Wheel { path: PathBuf, source: WheelError },
    #[error(
        "`{filename}` is already published with different bytes (published sha256 {published}, `{path}` has sha256 {offered}); \
         a published file never changes: give the rebuild a new version or local label"
    )]
    Conflict { filename: String, path: PathBuf, published: String, offered: String },
    #[error(
        "`{path}` is the same wheel as `{first}`, {where_}: the names are equal under PEP 503 and the versions under PEP 440 \
         (`Foo_Bar`/`foo_bar`, `1.0`/`1.0.0`) and the tags are the same, so pip would take either; \
         publish it as `{first}` or give it a new version or local label"
    )]
    SameWheel { path: PathBuf, first: String, where_: &'static str },
    #[error("two different files named `{filename}` in one publish: `{first}` and `{second}`")]
    DuplicateInBatch { filename: String, first: PathBuf, second: PathBuf },
    #[error("the index state `{path}` is corrupt")]
    State { path: PathBuf, source: serde_json::Error },
    #[error("the index state `{path}` has format {found}; this rocmforge reads format {STATE_FORMAT}")]
    StateFormat { path: PathBuf, found: u32 },
    #[error("no published file matches {0}")]
    NotFound(String),
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> IndexError + 'a {
    move |source| IndexError::Io { action, path: path.to_path_buf(), source }
}

/// The contents of `index.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    pub format: u32,
    /// Keyed by normalised project name.
    pub projects: BTreeMap<String, Project>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Project {
    /// The name as the first published METADATA spelled it.
    pub name: String,
    /// Ordered by version, then filename.
    pub files: Vec<FileRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub filename: String,
    /// Normalised PEP 440 version.
    pub version: String,
    pub sha256: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_python: Option<String>,
    /// sha256 of the `.metadata` file (the wheel's METADATA).
    pub metadata_sha256: String,
    /// `Some(reason)` once yanked (PEP 592); the reason may be empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yanked: Option<String>,
}

/// What [`publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The wheel is new to the index and now listed.
    Published,
    /// A file of that name with the same bytes was already published: nothing changed.
    AlreadyPresent,
    /// Already published, but the index's copy had been altered on disk (its sha256 no longer
    /// the published one): replaced by the offered file, which has the published bytes.
    Repaired,
}

/// One wheel of a [`publish_all`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishReport {
    pub filename: String,
    pub project: String,
    pub version: String,
    pub sha256: String,
    pub outcome: PublishOutcome,
    /// For [`PublishOutcome::Repaired`]: the sha256 the altered copy had.
    pub found_sha256: Option<String>,
}

/// Which files `yank` acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// One file by its name.
    File(String),
    /// Every file of one release (PEP 592 yanks releases; the simple API marks each file).
    Release { project: String, version: String },
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::File(name) => write!(f, "`{name}`"),
            Selector::Release { project, version } => write!(f, "`{project}` version `{version}`"),
        }
    }
}

/// An index directory.
struct Index {
    root: PathBuf,
}

impl Index {
    fn simple(&self) -> PathBuf {
        self.root.join("simple")
    }
    fn state_path(&self) -> PathBuf {
        self.root.join(STATE_FILE)
    }

    /// Creates the directories (and an empty root page, so `file://` works from the start) and
    /// takes the index lock, held until the returned file is dropped.
    fn lock(&self) -> Result<std::fs::File, IndexError> {
        let simple = self.simple();
        std::fs::create_dir_all(&simple).map_err(io("create", &simple))?;
        let path = self.root.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        fs4::fs_std::FileExt::lock_exclusive(&file).map_err(io("lock", &path))?;
        Ok(file)
    }

    fn load(&self) -> Result<State, IndexError> {
        load_state(&self.root)
    }

    /// Writes the state first (the source of truth), then every page that derives from it.
    fn save(&self, state: &State, changed: &[String]) -> Result<(), IndexError> {
        let path = self.state_path();
        let mut json =
            serde_json::to_string_pretty(state).map_err(|source| IndexError::State { path: path.clone(), source })?;
        json.push('\n');
        crate::fsutil::write_if_changed(&path, json.as_bytes()).map_err(io("write", &path))?;
        for name in changed {
            if let Some(project) = state.projects.get(name) {
                let page = self.simple().join(name).join("index.html");
                crate::fsutil::write_if_changed(&page, pages::project_html(name, project).as_bytes())
                    .map_err(io("write", &page))?;
            }
        }
        let root = self.simple().join("index.html");
        crate::fsutil::write_if_changed(&root, pages::root_html(state).as_bytes()).map_err(io("write", &root))?;
        Ok(())
    }
}

/// Reads `index.json` of the index at `root` (an empty state if there is none yet).
pub fn load_state(root: &Path) -> Result<State, IndexError> {
    let path = root.join(STATE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(State { format: STATE_FORMAT, ..State::default() })
        }
        Err(e) => return Err(io("read", &path)(e)),
    };
    let state: State =
        serde_json::from_str(&text).map_err(|source| IndexError::State { path: path.clone(), source })?;
    if state.format != STATE_FORMAT {
        return Err(IndexError::StateFormat { path, found: state.format });
    }
    Ok(state)
}

/// A wheel checked and ready to enter the index.
struct Candidate {
    path: PathBuf,
    name: WheelName,
    meta: wheel::CoreMetadata,
    record: FileRecord,
}

fn inspect(path: &Path) -> Result<Candidate, IndexError> {
    let bad = |source| IndexError::Wheel { path: path.to_path_buf(), source };
    let filename = path
        .file_name()
        .and_then(|f| f.to_str())
        .ok_or_else(|| bad(WheelError::Filename(path.display().to_string(), "it is not a UTF-8 file name")))?;
    let name = WheelName::parse(filename).map_err(bad)?;
    let meta = wheel::read_metadata(path, &name).map_err(bad)?;
    let (sha256, size) = crate::digest::sha256_file(path).map_err(io("read", path))?;
    let record = FileRecord {
        filename: filename.to_string(),
        version: name.normalized_version(),
        sha256,
        size,
        requires_python: meta.requires_python.clone(),
        metadata_sha256: crate::digest::sha256_hex(&meta.raw),
        yanked: None,
    };
    Ok(Candidate { path: path.to_path_buf(), name, meta, record })
}

/// Publishes one wheel into the index at `index_dir` (created if needed). Publishing a file
/// that is already there with the same bytes is a no-op ([`PublishOutcome::AlreadyPresent`]);
/// with other bytes it is refused ([`IndexError::Conflict`]) and the index is left unchanged.
pub fn publish(index_dir: &Path, wheel: &Path) -> Result<PublishOutcome, IndexError> {
    let reports = publish_all(index_dir, &[wheel.to_path_buf()])?;
    Ok(reports.first().map_or(PublishOutcome::AlreadyPresent, |r| r.outcome))
}

/// Publishes several wheels as one change (e.g. torch and torchvision of one build): every
/// wheel is validated and checked for conflicts before anything is written, so either all are
/// published or none is.
/// Checks that `wheels` may enter the index as it is now, without writing anything: every wheel
/// valid, no two of one name with different bytes, none with the name of a published file with
/// other bytes. A build checks this before it stores an artifact (a wheel the index would refuse
/// must not sit in the cache, failing every later build at publish).
pub fn check_publishable(index_dir: &Path, wheels: &[PathBuf]) -> Result<Vec<PublishReport>, IndexError> {
    let index = Index { root: index_dir.to_path_buf() };
    let state = index.load()?;
    admit(&index, &state, wheels).map(|(reports, _)| reports)
}

type Admitted = (Vec<PublishReport>, Vec<(String, PublishOutcome, Candidate)>);

/// What publishing `wheels` into `state` would do, or why it is refused.
fn admit(index: &Index, state: &State, wheels: &[PathBuf]) -> Result<Admitted, IndexError> {
    let mut candidates: Vec<Candidate> = Vec::new();
    for path in wheels {
        let c = inspect(path)?;
        if let Some(prev) =
            candidates.iter().find(|p| p.record.filename != c.record.filename && p.name.same_wheel_as(&c.name))
        {
            return Err(IndexError::SameWheel {
                path: c.path,
                first: prev.record.filename.clone(),
                where_: "earlier in this publish",
            });
        }
        if let Some(prev) = candidates.iter().find(|p| p.record.filename == c.record.filename) {
            if prev.record.sha256 != c.record.sha256 {
                return Err(IndexError::DuplicateInBatch {
                    filename: c.record.filename,
                    first: prev.path.clone(),
                    second: c.path,
                });
            }
            continue;
        }
        candidates.push(c);
    }
    let mut reports = Vec::new();
    let mut fresh = Vec::new();
    for c in candidates {
        let project = c.name.project();
        let existing =
            state.projects.get(&project).and_then(|p| p.files.iter().find(|f| f.filename == c.record.filename));
        if existing.is_none() {
            let mut published = state.projects.get(&project).into_iter().flat_map(|p| &p.files);
            if let Some(f) = published.find(|f| WheelName::parse(&f.filename).is_ok_and(|n| n.same_wheel_as(&c.name))) {
                return Err(IndexError::SameWheel {
                    path: c.path,
                    first: f.filename.clone(),
                    where_: "already published",
                });
            }
        }
        let outcome = match existing {
            Some(f) if f.sha256 != c.record.sha256 => {
                return Err(IndexError::Conflict {
                    filename: c.record.filename.clone(),
                    path: c.path.clone(),
                    published: f.sha256.clone(),
                    offered: c.record.sha256.clone(),
                })
            }
            Some(_) => PublishOutcome::AlreadyPresent,
            None => PublishOutcome::Published,
        };
        // A published file is never trusted unverified: the index's copy is re-hashed, and an
        // altered one is replaced by the offered bytes (which are the published ones).
        let mut found_sha256 = None;
        let mut outcome = outcome;
        let dst = index.simple().join(&project).join(&c.record.filename);
        if outcome == PublishOutcome::AlreadyPresent && dst.is_file() {
            let (actual, _) = crate::digest::sha256_file(&dst).map_err(io("read", &dst))?;
            if actual != c.record.sha256 {
                outcome = PublishOutcome::Repaired;
                found_sha256 = Some(actual);
            }
        }
        reports.push(PublishReport {
            filename: c.record.filename.clone(),
            project: project.clone(),
            version: c.record.version.clone(),
            sha256: c.record.sha256.clone(),
            outcome,
            found_sha256,
        });
        fresh.push((project, outcome, c));
    }
    Ok((reports, fresh))
}

pub fn publish_all(index_dir: &Path, wheels: &[PathBuf]) -> Result<Vec<PublishReport>, IndexError> {
    let index = Index { root: index_dir.to_path_buf() };
    let _lock = index.lock()?;
    let mut state = index.load()?;
    let (reports, fresh) = admit(&index, &state, wheels)?;

    // Files first, so no page ever links a file that is not there yet.
    for (project, outcome, c) in &fresh {
        let dir = index.simple().join(project);
        std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let dst = dir.join(&c.record.filename);
        // An already-published file is rewritten only if it went missing from disk.
        if *outcome != PublishOutcome::AlreadyPresent || !dst.is_file() {
            crate::fsutil::copy_atomic(&c.path, &dst).map_err(io("copy the wheel to", &dst))?;
        }
        let meta_path = dir.join(format!("{}.metadata", c.record.filename));
        crate::fsutil::write_if_changed(&meta_path, &c.meta.raw).map_err(io("write", &meta_path))?;
    }

    let mut changed: Vec<String> = Vec::new();
    for (project, outcome, c) in fresh {
        if !changed.contains(&project) {
            changed.push(project.clone());
        }
        if outcome != PublishOutcome::Published {
            continue;
        }
        let entry =
            state.projects.entry(project).or_insert_with(|| Project { name: c.meta.name.clone(), files: Vec::new() });
        entry.files.push(c.record);
        entry
            .files
            .sort_by(|a, b| wheel::natural_cmp(&a.version, &b.version).then_with(|| a.filename.cmp(&b.filename)));
    }
    state.format = STATE_FORMAT;
    index.save(&state, &changed)?;
    Ok(reports)
}

/// Marks the selected files yanked (PEP 592) with `reason`, or un-yanks them when `reason` is
/// `None`. Returns the names of the files whose state changed.
pub fn yank(index_dir: &Path, selector: &Selector, reason: Option<&str>) -> Result<Vec<String>, IndexError> {
    let index = Index { root: index_dir.to_path_buf() };
    let _lock = index.lock()?;
    let mut state = index.load()?;
    // (project, file name or normalised version to match)
    let (project, by_file, wanted) = match selector {
        Selector::File(name) => {
            let parsed = WheelName::parse(name).map_err(|_| IndexError::NotFound(selector.to_string()))?;
            (parsed.project(), true, name.clone())
        }
        Selector::Release { project, version } => {
            let want = Version::parse(version).map(|v| v.to_string()).unwrap_or_else(|| version.clone());
            (normalize_name(project), false, want)
        }
    };
    let matches = |f: &FileRecord| if by_file { f.filename == wanted } else { f.version == wanted };
    let files = state.projects.get_mut(&project).map(|p| &mut p.files);
    let mut changed = Vec::new();
    let mut found = false;
    for f in files.into_iter().flatten().filter(|f| matches(f)) {
        found = true;
        let new = reason.map(str::to_string);
        if f.yanked != new {
            f.yanked = new;
            changed.push(f.filename.clone());
        }
    }
    if !found {
        return Err(IndexError::NotFound(selector.to_string()));
    }
    index.save(&state, &[project])?;
    Ok(changed)
}

/// What [`verify`] found wrong with one file of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexProblem {
    pub path: PathBuf,
    pub problem: String,
}

/// What [`verify`] found in an index directory and the indexes nested in it.
#[derive(Debug, Default)]
pub struct IndexCheck {
    /// Published files re-hashed.
    pub checked: usize,
    pub problems: Vec<IndexProblem>,
    /// Leftovers of interrupted writes: `.tmp-*` files (a publish killed before its rename),
    /// found under each index's lock, so a publish running now is not taken for one.
    pub leftovers: Vec<PathBuf>,
}

/// Every index in `index_dir`: itself and the indexes of stacks with an `index-path`
/// (`<index-dir>/<index-path>/`), each a directory with an `index.json` or a `simple/` (a first
/// publish killed before it wrote `index.json` leaves only `simple/`).
pub fn index_roots(index_dir: &Path) -> Vec<PathBuf> {
    let is_root = |d: &Path| d.join(STATE_FILE).is_file() || d.join("simple").is_dir();
    let mut v: Vec<PathBuf> = walkdir::WalkDir::new(index_dir)
        .sort_by_file_name()
        .into_iter()
        // An index's own pages and wheels hold no index.
        .filter_entry(|e| e.file_type().is_dir() && (e.depth() == 0 || e.file_name() != "simple"))
        .filter_map(Result::ok)
        .filter(|e| is_root(e.path()))
        .map(|e| e.into_path())
        .collect();
    v.sort();
    v
}

/// Every published file of every index in `index_dir` (see [`index_roots`]) re-hashed against
/// its `index.json`, and the leftovers of interrupted writes.
pub fn verify(index_dir: &Path) -> Result<IndexCheck, IndexError> {
    let mut check = IndexCheck::default();
    for root in index_roots(index_dir) {
        verify_one(&root, &mut check)?;
    }
    Ok(check)
}

fn verify_one(root: &Path, check: &mut IndexCheck) -> Result<(), IndexError> {
    let index = Index { root: root.to_path_buf() };
    let _lock = index.lock()?;
    let state = index.load()?;
    for (name, project) in &state.projects {
        for f in &project.files {
            check.checked += 1;
            let path = index.simple().join(name).join(&f.filename);
            match crate::digest::sha256_file(&path) {
                Ok((actual, _)) if actual == f.sha256 => {}
                Ok((actual, _)) => check.problems.push(IndexProblem {
                    path,
                    problem: format!(
                        "altered on disk: published with sha256 {}, now {actual}; rebuild or re-publish it",
                        f.sha256
                    ),
                }),
                Err(e) => check.problems.push(IndexProblem { path, problem: format!("cannot be read: {e}") }),
            }
        }
    }
    check.leftovers.extend(temp_files(&index));
    Ok(())
}

/// Removes the leftovers of interrupted writes in every index in `index_dir` (each under its
/// lock); returns the files removed and the bytes freed.
pub fn remove_temp_files(index_dir: &Path) -> Result<(usize, u64), IndexError> {
    let mut freed = 0;
    let mut removed = 0;
    for root in index_roots(index_dir) {
        let index = Index { root };
        let _lock = index.lock()?;
        for p in temp_files(&index) {
            freed += std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            crate::fsutil::remove_if_exists(&p).map_err(io("remove", &p))?;
            removed += 1;
        }
    }
    Ok((removed, freed))
}

/// `.tmp-*` files (atomic writes that never got their final name) in the index, not in the
/// indexes nested in it (each is looked at under its own lock).
fn temp_files(index: &Index) -> Vec<PathBuf> {
    let nested = |e: &walkdir::DirEntry| {
        e.depth() > 0
            && e.file_type().is_dir()
            && e.file_name() != "simple"
            && (e.path().join(STATE_FILE).is_file() || e.path().join("simple").is_dir())
    };
    let mut v: Vec<PathBuf> = walkdir::WalkDir::new(&index.root)
        .into_iter()
        .filter_entry(|e| !nested(e))
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.file_name().to_string_lossy().starts_with(".tmp-"))
        .map(|e| e.into_path())
        .collect();
    v.sort();
    v
}

/// Every project and file in the index (empty if the index does not exist yet).
pub fn list(index_dir: &Path) -> Result<State, IndexError> {
    load_state(index_dir)
}

/// The index a stack publishes into: `<index-dir>/<index-path>/` for a stack with an
/// `index-path` (binary fallbacks, whose wheels must never mix with native ones), else the
/// index directory itself.
pub fn stack_dir(index_dir: &Path, stack: &crate::recipe::Stack) -> PathBuf {
    match &stack.index_path {
        Some(sub) => index_dir.join(sub),
        None => index_dir.to_path_buf(),
    }
}

/// The `file://` URL of the simple index of `index_dir` (an absolute path), with the
/// characters a URL path cannot hold percent-encoded.
pub fn file_url(index_dir: &Path) -> String {
    let mut url = String::from("file://");
    for part in index_dir.join("simple").components() {
        if let std::path::Component::Normal(p) = part {
            url.push('/');
            url.push_str(&pages::url_path_segment(&p.to_string_lossy()));
        }
    }
    url.push('/');
    url
}

/// The version a wheel built by the stack carries: `base` with a PEP 440 local label that
/// says what it was built for, when and from what, e.g.
/// `local_version("2.6.0", "6.2.4", &["gfx1012", "gfx1010"], 7, "1a2b3c4d…")` is
/// `2.6.0+rocm6.2.4.gfx1010.gfx1012.7.k1a2b3c4d`.
///
/// - A pin on the public version (`torch==2.6.0`) still matches (PEP 440 ignores the local
///   label when the specifier has none).
/// - Targets are sorted and de-duplicated, one label segment each; characters a local label
///   cannot hold (`gfx90a:xnack+`) become segment breaks.
/// - The build serial (the recipe's count of builds begun with this state dir; 0 leaves it
///   out), a numeric segment: PEP 440 compares numeric segments of a local label as numbers,
///   so where two builds' labels differ only from here on, pip and uv pick the newer build, not
///   the larger hash. A `--rebuild` of the same inputs gets a new filename too.
/// - `k` + the first 8 hex digits of the recipe's cache key: a rebuild from other inputs gets
///   another filename, so the index never has to replace a published file.
/// - A local label already on `base` is kept in front.
pub fn local_version(base: &str, rocm_version: &str, targets: &[&str], serial: u64, key_hex: &str) -> String {
    fn segments(s: &str) -> Vec<String> {
        s.to_ascii_lowercase()
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|p| !p.is_empty())
            // PEP 440 drops leading zeros of numeric segments; drop them here so the label is canonical.
            .map(|p| if p.bytes().all(|c| c.is_ascii_digit()) { wheel::trim_zeros(p) } else { p.to_string() })
            .collect()
    }
    let (public, existing) = match base.trim().split_once('+') {
        Some((p, l)) => (p, Some(l)),
        None => (base.trim(), None),
    };
    let mut label: Vec<String> = existing.map(segments).unwrap_or_default();
    let rocm = segments(rocm_version);
    if !rocm.is_empty() {
        label.push(format!("rocm{}", rocm.join(".")));
    }
    let mut ts: Vec<String> = targets.iter().map(|t| segments(t).join(".")).filter(|t| !t.is_empty()).collect();
    ts.sort();
    ts.dedup();
    label.extend(ts);
    if serial > 0 {
        label.push(serial.to_string());
    }
    let key: String = key_hex.chars().filter(char::is_ascii_hexdigit).take(8).collect::<String>().to_ascii_lowercase();
    if !key.is_empty() {
        label.push(format!("k{key}"));
    }
    if label.is_empty() {
        public.to_string()
    } else {
        format!("{public}+{}", label.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wheel::Version;

    /// The loader refuses an `index-path` that is one of these names: they must be the layout's.
    #[test]
    fn the_names_index_path_may_not_take_are_the_top_of_the_layout() {
        let index = Index { root: PathBuf::from("/i") };
        let top: Vec<String> = [index.simple(), index.state_path()]
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(top, crate::recipe::INDEX_TOP_LEVEL_NAMES);
    }

    #[test]
    fn local_version_examples() {
        let key = "1a2b3c4d5e6f";
        assert_eq!(local_version("2.6.0", "6.2.4", &["gfx1010"], 0, key), "2.6.0+rocm6.2.4.gfx1010.k1a2b3c4d");
        assert_eq!(
            local_version("2.6.0", "6.2.4", &["gfx1012", "gfx1010", "gfx1012"], 0, key),
            "2.6.0+rocm6.2.4.gfx1010.gfx1012.k1a2b3c4d"
        );
        assert_eq!(
            local_version("0.21.0", "6.2.4", &["gfx1010"], 0, "ABCDEF0123"),
            "0.21.0+rocm6.2.4.gfx1010.kabcdef01"
        );
        assert_eq!(
            local_version("2.6.0+git5", "6.2.4", &["gfx90a:xnack+"], 0, key),
            "2.6.0+git5.rocm6.2.4.gfx90a.xnack.k1a2b3c4d"
        );
        assert_eq!(local_version("1.0", "", &[], 0, ""), "1.0");
    }

    #[test]
    fn the_build_serial_comes_before_the_key_and_a_later_build_sorts_higher() {
        assert_eq!(
            local_version("2.6.0", "6.2.4", &["gfx1010"], 7, "1a2b3c4d5e"),
            "2.6.0+rocm6.2.4.gfx1010.7.k1a2b3c4d"
        );
        // The serial is a numeric segment of its own, before the key: PEP 440 compares it as a
        // number (build 10 above build 9, whatever the keys; pip and uv doing so is tested in
        // tests/it/wheels.rs).
        let v = local_version("2.6.0", "6.2.4", &["gfx1010"], 10, "00000000");
        let label: Vec<&str> = v.split_once('+').unwrap().1.split('.').collect();
        assert_eq!(label, ["rocm6", "2", "4", "gfx1010", "10", "k00000000"]);
        assert_eq!(Version::parse(&v).unwrap().to_string(), v);
    }

    #[test]
    fn local_version_is_canonical_pep_440_and_filename_safe() {
        for v in [
            local_version("2.6.0", "6.2.4", &["gfx1010", "gfx1011", "gfx1012"], 0, "ffffffffffffffff"),
            local_version("2.6.0rc1", "6.3", &["GFX1030"], 0, "0123"),
            local_version("0.21.0", "6.2.4", &["gfx90a:xnack-", "gfx1100"], 0, "00000000"),
            local_version("1.0", "6.02", &["gfx1010"], 0, "12"),
        ] {
            let parsed = Version::parse(&v).unwrap_or_else(|| panic!("{v} is not PEP 440"));
            assert_eq!(parsed.to_string(), v, "already normalised, so the filename is the canonical one");
            assert!(!v.contains('-') && !v.contains('_'), "{v} must not break a wheel filename");
            let public = parsed.public();
            assert!(v.starts_with(&format!("{public}+")), "{v}: a ==public pin matches it");
        }
    }

    #[test]
    fn temp_files_of_interrupted_writes_are_found_and_removed() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(remove_temp_files(d.path()).unwrap(), (0, 0), "no index yet");
        let project = d.path().join("simple/p");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join(".tmp-a1b2c3"), b"half a wheel").unwrap();
        std::fs::write(project.join("p-1.0-py3-none-any.whl"), b"kept").unwrap();
        assert_eq!(temp_files(&Index { root: d.path().to_path_buf() }), vec![project.join(".tmp-a1b2c3")]);
        assert_eq!(remove_temp_files(d.path()).unwrap(), (1, 12));
        assert!(!project.join(".tmp-a1b2c3").exists() && project.join("p-1.0-py3-none-any.whl").exists());
    }

    #[test]
    fn file_urls_are_encoded() {
        assert_eq!(file_url(Path::new("/home/me/My Wheels/idx")), "file:///home/me/My%20Wheels/idx/simple/");
    }

    #[test]
    fn different_keys_give_different_versions() {
        let a = local_version("2.6.0", "6.2.4", &["gfx1010"], 0, "aaaaaaaa11");
        let b = local_version("2.6.0", "6.2.4", &["gfx1010"], 0, "bbbbbbbb11");
        assert_ne!(a, b);
    }
}
