//! Patch series: parsing unified diffs (plain and `git format-patch`), applying a series
//! all-or-nothing, and writing a user's edits back as a patch.
//!
//! A series is applied in memory over the tree first; files are written only when every patch
//! applied, so a failure leaves the tree exactly as it was. Hunks must match exactly (an offset
//! is allowed, fuzz is not): a patch that "almost" applies onto a moved tree is a bug waiting in
//! hour 7, not a convenience.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error(
        "`{patch}` is not a patch: it has no `--- a/FILE` / `+++ b/FILE` header followed by a hunk (`@@ -L,N +L,N @@`)"
    )]
    NotAPatch { patch: String },
    #[error("`{patch}` line {line}: malformed patch: {msg}")]
    Malformed { patch: String, line: usize, msg: String },
    #[error("`{patch}` touches `{file}`, which is outside the source tree")]
    UnsafePath { patch: String, file: String },
    #[error("`{patch}` has a binary change to `{file}`, which rocmforge cannot apply: make the change a text patch or a build step")]
    Binary { patch: String, file: String },
    #[error("`{patch}` does not apply: `{file}` does not exist in the tree{}", applied_hint(*already_applied))]
    FileMissing { patch: String, file: String, already_applied: bool },
    #[error("`{patch}` does not apply: it creates `{file}`, which already exists{}", applied_hint(*already_applied))]
    FileExists { patch: String, file: String, already_applied: bool },
    #[error("`{patch}` does not apply: hunk #{hunk} of `{file}` (patch line {patch_line}, file line {line}) does not match: {reason}{}", applied_hint(*already_applied))]
    HunkFailed {
        patch: String,
        file: String,
        hunk: usize,
        /// Line in the target file where the hunk should start.
        line: usize,
        /// Line of the `@@` header in the patch file.
        patch_line: usize,
        reason: String,
        already_applied: bool,
    },
    #[error("cannot read `{path}`")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write `{path}` (the tree may be partly patched: recreate it)")]
    Write { path: PathBuf, source: std::io::Error },
}

fn applied_hint(yes: bool) -> &'static str {
    if yes {
        "\n  note: the patch looks already applied (its result is already in the tree)"
    } else {
        ""
    }
}

impl PatchError {
    /// The series file this error is about, if any.
    pub fn patch_name(&self) -> Option<&str> {
        match self {
            PatchError::NotAPatch { patch }
            | PatchError::Malformed { patch, .. }
            | PatchError::UnsafePath { patch, .. }
            | PatchError::Binary { patch, .. }
            | PatchError::FileMissing { patch, .. }
            | PatchError::FileExists { patch, .. }
            | PatchError::HunkFailed { patch, .. } => Some(patch),
            _ => None,
        }
    }
}

/// Read access to a source tree by relative path (`a/b.c`): a directory, or a git commit read
/// straight from a mirror.
pub trait TreeRead {
    /// The file's bytes, or `None` when there is no such file.
    fn read(&self, path: &str) -> std::io::Result<Option<Vec<u8>>>;
}

/// A tree on disk.
pub struct DirReader<'a>(pub &'a Path);

impl TreeRead for DirReader<'_> {
    fn read(&self, path: &str) -> std::io::Result<Option<Vec<u8>>> {
        let p = self.0.join(path);
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => std::fs::read(&p).map(Some),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.kind() == std::io::ErrorKind::NotADirectory => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    Context(Vec<u8>),
    Remove(Vec<u8>),
    Add(Vec<u8>),
}

/// One `@@` hunk. Line bytes include their `\n`, except a last line marked
/// `\ No newline at end of file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
    pub lines: Vec<HunkLine>,
    /// Line of the `@@` header in the patch file (1-based).
    pub patch_line: usize,
}

impl Hunk {
    fn old_lines(&self) -> Vec<&[u8]> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(b) | HunkLine::Remove(b) => Some(b.as_slice()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }
    fn new_lines(&self) -> Vec<&[u8]> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(b) | HunkLine::Add(b) => Some(b.as_slice()),
                HunkLine::Remove(_) => None,
            })
            .collect()
    }
}

/// The changes a patch makes to one file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FilePatch {
    /// Path before (`None`: the file is created).
    pub old: Option<String>,
    /// Path after (`None`: the file is deleted).
    pub new: Option<String>,
    pub hunks: Vec<Hunk>,
    /// `new file mode` / `new mode` (e.g. 0o755).
    pub new_mode: Option<u32>,
}

impl FilePatch {
    /// The path this change is reported under.
    pub fn path(&self) -> &str {
        self.new.as_deref().or(self.old.as_deref()).unwrap_or("")
    }
}

fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|b| *b == b'\n').collect()
}

fn trim_eol(l: &[u8]) -> &[u8] {
    let l = l.strip_suffix(b"\n").unwrap_or(l);
    l.strip_suffix(b"\r").unwrap_or(l)
}

/// `a/x/y` with the timestamp a `diff -u` header may carry removed; `None` for /dev/null.
fn header_path(raw: &[u8]) -> Option<String> {
    let s = String::from_utf8_lossy(trim_eol(raw)).to_string();
    let s = s.split('\t').next().unwrap_or("").trim_end().to_string();
    let s = if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') { s[1..s.len() - 1].to_string() } else { s };
    if s == "/dev/null" {
        None
    } else {
        Some(s)
    }
}

/// `-p1` when the paths carry git's `a/` `b/` prefixes, `-p0` otherwise.
fn strip_prefixes(old: &mut Option<String>, new: &mut Option<String>) {
    let has = |p: &Option<String>, pre: &str| p.as_deref().is_none_or(|p| p.starts_with(pre));
    if (old.is_some() || new.is_some()) && has(old, "a/") && has(new, "b/") {
        for p in [old, new] {
            if let Some(s) = p.as_mut() {
                *s = s[2..].to_string();
            }
        }
    }
}

fn parse_range(s: &str) -> Option<(usize, usize)> {
    match s.split_once(',') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => Some((s.parse().ok()?, 1)),
    }
}

/// `@@ -a,b +c,d @@ ...` -> (a, b, c, d).
fn parse_hunk_header(line: &str) -> Option<(usize, usize, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let (a, b) = parse_range(old)?;
    let (c, d) = parse_range(new)?;
    Some((a, b, c, d))
}

fn parse_mode(s: &[u8]) -> Option<u32> {
    u32::from_str_radix(std::str::from_utf8(trim_eol(s)).ok()?.trim(), 8).ok().map(|m| m & 0o777)
}

/// Parses a patch file (`name` is used in errors) into its file changes.
pub fn parse(name: &str, bytes: &[u8]) -> Result<Vec<FilePatch>, PatchError> {
    let lines = split_lines(bytes);
    let malformed = |line: usize, msg: String| PatchError::Malformed { patch: name.to_string(), line, msg };
    let mut out: Vec<FilePatch> = Vec::new();
    // A `diff --git` block waiting for its `---`/`+++` (or standing alone: new empty file, rename).
    let mut git_block: Option<(FilePatch, bool)> = None;
    let mut i = 0;
    let flush_git = |block: &mut Option<(FilePatch, bool)>, out: &mut Vec<FilePatch>| {
        if let Some((fp, meaningful)) = block.take() {
            if meaningful {
                out.push(fp);
            }
        }
    };
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix(b"diff --git ") {
            flush_git(&mut git_block, &mut out);
            let s = String::from_utf8_lossy(trim_eol(rest)).to_string();
            let (mut old, mut new) = match s.split_once(" b/") {
                Some((a, b)) => (Some(a.to_string()), Some(format!("b/{b}"))),
                None => (None, None),
            };
            strip_prefixes(&mut old, &mut new);
            git_block = Some((FilePatch { old, new, ..FilePatch::default() }, false));
            i += 1;
            continue;
        }
        if let Some((fp, meaningful)) = git_block.as_mut() {
            if let Some(m) = line.strip_prefix(b"new file mode ") {
                fp.old = None;
                fp.new_mode = parse_mode(m);
                *meaningful = true;
            } else if line.starts_with(b"deleted file mode ") {
                fp.new = None;
                *meaningful = true;
            } else if let Some(m) = line.strip_prefix(b"new mode ") {
                fp.new_mode = parse_mode(m);
                *meaningful = true;
            } else if let Some(p) = line.strip_prefix(b"rename from ") {
                fp.old = header_path(p);
                *meaningful = true;
            } else if let Some(p) = line.strip_prefix(b"rename to ") {
                fp.new = header_path(p);
                *meaningful = true;
            } else if line.starts_with(b"GIT binary patch")
                || (line.starts_with(b"Binary files ") && trim_eol(line).ends_with(b" differ"))
            {
                return Err(PatchError::Binary { patch: name.into(), file: fp.path().to_string() });
            }
        }
        if line.starts_with(b"--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with(b"+++ ")) {
            let mut old = header_path(&line[4..]);
            let mut new = header_path(&lines[i + 1][4..]);
            strip_prefixes(&mut old, &mut new);
            let mut fp = match git_block.take() {
                Some((g, _)) => FilePatch { old, new, new_mode: g.new_mode, hunks: Vec::new() },
                None => FilePatch { old, new, ..FilePatch::default() },
            };
            i += 2;
            while i < lines.len() && lines[i].starts_with(b"@@ ") {
                let header = String::from_utf8_lossy(trim_eol(lines[i])).to_string();
                let Some((a, b, c, d)) = parse_hunk_header(&header) else {
                    return Err(malformed(i + 1, format!("bad hunk header `{header}`")));
                };
                let mut hunk =
                    Hunk { old_start: a, old_len: b, new_start: c, new_len: d, lines: Vec::new(), patch_line: i + 1 };
                i += 1;
                let (mut old_left, mut new_left) = (b, d);
                while old_left > 0 || new_left > 0 {
                    let Some(l) = lines.get(i) else {
                        return Err(malformed(
                            i,
                            format!("hunk `{header}` ends early: {old_left} old and {new_left} new line(s) missing"),
                        ));
                    };
                    let body = l.get(1..).unwrap_or(b"\n").to_vec();
                    match l.first() {
                        Some(b' ') if old_left > 0 && new_left > 0 => {
                            hunk.lines.push(HunkLine::Context(body));
                            old_left -= 1;
                            new_left -= 1;
                        }
                        // An empty line is a blank context line whose space an editor removed.
                        Some(b'\n') | Some(b'\r') if old_left > 0 && new_left > 0 => {
                            hunk.lines.push(HunkLine::Context(l.to_vec()));
                            old_left -= 1;
                            new_left -= 1;
                        }
                        Some(b'-') if old_left > 0 => {
                            hunk.lines.push(HunkLine::Remove(body));
                            old_left -= 1;
                        }
                        Some(b'+') if new_left > 0 => {
                            hunk.lines.push(HunkLine::Add(body));
                            new_left -= 1;
                        }
                        Some(b'\\') => no_newline(&mut hunk),
                        _ => {
                            return Err(malformed(
                                i + 1,
                                format!(
                                    "hunk `{header}` has {old_left} old and {new_left} new line(s) left, but this line is `{}`",
                                    String::from_utf8_lossy(trim_eol(l))
                                ),
                            ))
                        }
                    }
                    i += 1;
                }
                if lines.get(i).is_some_and(|l| l.starts_with(b"\\")) {
                    no_newline(&mut hunk);
                    i += 1;
                }
                fp.hunks.push(hunk);
            }
            if fp.hunks.is_empty() && !(fp.old.is_none() && fp.new.is_some()) {
                return Err(malformed(i, format!("`{}` has a header but no hunk", fp.path())));
            }
            out.push(fp);
            continue;
        }
        i += 1;
    }
    flush_git(&mut git_block, &mut out);
    if out.is_empty() {
        return Err(PatchError::NotAPatch { patch: name.into() });
    }
    for fp in &out {
        for p in [&fp.old, &fp.new].into_iter().flatten() {
            if !is_safe_rel(p) {
                return Err(PatchError::UnsafePath { patch: name.into(), file: p.clone() });
            }
        }
    }
    Ok(out)
}

/// `\ No newline at end of file`: the previous line has no `\n`.
fn no_newline(hunk: &mut Hunk) {
    if let Some(HunkLine::Context(b) | HunkLine::Remove(b) | HunkLine::Add(b)) = hunk.lines.last_mut() {
        if b.ends_with(b"\n") {
            b.pop();
        }
    }
}

/// A relative path that stays inside the tree.
pub fn is_safe_rel(p: &str) -> bool {
    !p.is_empty() && Path::new(p).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// Files of the tree as the series changes them: reads fall through to the tree.
struct Overlay<'a> {
    base: &'a dyn TreeRead,
    files: BTreeMap<String, Option<Vec<u8>>>,
    modes: BTreeMap<String, u32>,
}

impl Overlay<'_> {
    fn get(&self, path: &str) -> Result<Option<Vec<u8>>, PatchError> {
        match self.files.get(path) {
            Some(v) => Ok(v.clone()),
            None => self.base.read(path).map_err(|source| PatchError::Read { path: path.into(), source }),
        }
    }
}

/// Where a hunk's old lines are in `lines`, searching outward from `want`, not before `from`.
fn find_block(lines: &[&[u8]], block: &[&[u8]], want: usize, from: usize) -> Option<usize> {
    let fits = |i: usize| i >= from && i + block.len() <= lines.len() && lines[i..i + block.len()] == *block;
    let max = lines.len().max(want) + 1;
    for d in 0..=max {
        if want >= d && fits(want - d) {
            return Some(want - d);
        }
        if d > 0 && fits(want + d) {
            return Some(want + d);
        }
    }
    None
}

fn show(l: &[u8]) -> String {
    let s = String::from_utf8_lossy(trim_eol(l));
    if s.chars().count() > 80 {
        format!("{}...", s.chars().take(80).collect::<String>())
    } else {
        s.to_string()
    }
}

/// Why a hunk does not match at its expected place: the first differing line.
fn mismatch_reason(lines: &[&[u8]], old: &[&[u8]], at: usize) -> String {
    for (k, want) in old.iter().enumerate() {
        match lines.get(at + k) {
            None => {
                return format!(
                    "the file has {} line(s), the hunk expects `{}` at line {}",
                    lines.len(),
                    show(want),
                    at + k + 1
                )
            }
            Some(got) if got != want => {
                if trim_eol(got) == trim_eol(want) {
                    return format!("line {} differs in its line ending or final newline", at + k + 1);
                }
                return format!("line {} is `{}`, the patch expects `{}`", at + k + 1, show(got), show(want));
            }
            _ => {}
        }
    }
    "its lines are not at the expected place (an earlier hunk overlaps it)".into()
}

enum FileFailure {
    Missing,
    Exists,
    Hunk { index: usize, line: usize, patch_line: usize, reason: String },
}

/// Applies `hunks` to `content`; `reverse` swaps old and new (to test "already applied").
fn apply_hunks(content: &[u8], hunks: &[Hunk], reverse: bool) -> Result<Vec<u8>, FileFailure> {
    let lines = split_lines(content);
    let mut out: Vec<u8> = Vec::with_capacity(content.len() + 256);
    let mut pos = 0usize;
    let mut offset: isize = 0;
    for (index, h) in hunks.iter().enumerate() {
        let (old, new, start, len) = if reverse {
            (h.new_lines(), h.old_lines(), h.new_start, h.new_len)
        } else {
            (h.old_lines(), h.new_lines(), h.old_start, h.old_len)
        };
        // With no old lines, `start` is the line after which the new ones go.
        let expected = if len == 0 { start } else { start.saturating_sub(1) };
        let want = (expected as isize + offset).max(pos as isize) as usize;
        let Some(at) = find_block(&lines, &old, want, pos) else {
            return Err(FileFailure::Hunk {
                index: index + 1,
                line: expected + 1,
                patch_line: h.patch_line,
                reason: mismatch_reason(&lines, &old, want.min(lines.len())),
            });
        };
        for l in &lines[pos..at] {
            out.extend_from_slice(l);
        }
        for l in &new {
            out.extend_from_slice(l);
        }
        pos = at + old.len();
        offset = at as isize - expected as isize;
    }
    for l in &lines[pos..] {
        out.extend_from_slice(l);
    }
    Ok(out)
}

fn new_file_content(fp: &FilePatch, reverse: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for h in &fp.hunks {
        for l in if reverse { h.old_lines() } else { h.new_lines() } {
            out.extend_from_slice(l);
        }
    }
    out
}

/// Applies one file's change to the overlay.
fn apply_file(ov: &mut Overlay<'_>, fp: &FilePatch) -> Result<(), (String, FileFailure)> {
    let path = fp.path().to_string();
    let read = |ov: &Overlay<'_>, p: &str| ov.get(p).map_err(|_| (p.to_string(), FileFailure::Missing));
    match (&fp.old, &fp.new) {
        (None, Some(new)) => {
            if read(ov, new)?.is_some() {
                return Err((path, FileFailure::Exists));
            }
            ov.files.insert(new.clone(), Some(new_file_content(fp, false)));
            if let Some(m) = fp.new_mode {
                ov.modes.insert(new.clone(), m);
            }
        }
        (Some(old), new) => {
            let Some(content) = read(ov, old)? else { return Err((old.clone(), FileFailure::Missing)) };
            let result = apply_hunks(&content, &fp.hunks, false).map_err(|f| (old.clone(), f))?;
            match new {
                None => {
                    ov.files.insert(old.clone(), None);
                }
                Some(new) => {
                    if new != old {
                        if read(ov, new)?.is_some() {
                            return Err((new.clone(), FileFailure::Exists));
                        }
                        ov.files.insert(old.clone(), None);
                    }
                    ov.files.insert(new.clone(), Some(result));
                    if let Some(m) = fp.new_mode {
                        ov.modes.insert(new.clone(), m);
                    }
                }
            }
        }
        (None, None) => {}
    }
    Ok(())
}

/// Whether every change of the patch is already in the tree (it reverse-applies cleanly).
fn looks_applied(ov: &Overlay<'_>, files: &[FilePatch]) -> bool {
    files.iter().all(|fp| match (&fp.old, &fp.new) {
        (None, Some(new)) => ov.get(new).ok().flatten().is_some_and(|c| c == new_file_content(fp, false)),
        (Some(old), None) => ov.get(old).ok().flatten().is_none(),
        (Some(_), Some(new)) => ov.get(new).ok().flatten().is_some_and(|c| apply_hunks(&c, &fp.hunks, true).is_ok()),
        (None, None) => true,
    })
}

/// Applies the series to an overlay over `base`; the overlay holds the result.
fn apply_in_memory<'a>(base: &'a dyn TreeRead, patches: &[(String, Vec<u8>)]) -> Result<Overlay<'a>, PatchError> {
    let mut ov = Overlay { base, files: BTreeMap::new(), modes: BTreeMap::new() };
    for (name, bytes) in patches {
        let files = parse(name, bytes)?;
        // Each patch is itself all-or-nothing, so "already applied" is judged on the state before it.
        let before = (ov.files.clone(), ov.modes.clone());
        for fp in &files {
            if let Err((file, failure)) = apply_file(&mut ov, fp) {
                ov.files = before.0;
                ov.modes = before.1;
                let already_applied = looks_applied(&ov, &files);
                let patch = name.clone();
                return Err(match failure {
                    FileFailure::Missing => PatchError::FileMissing { patch, file, already_applied },
                    FileFailure::Exists => PatchError::FileExists { patch, file, already_applied },
                    FileFailure::Hunk { index, line, patch_line, reason } => {
                        PatchError::HunkFailed { patch, file, hunk: index, line, patch_line, reason, already_applied }
                    }
                });
            }
        }
    }
    Ok(ov)
}

/// Checks that the series applies onto the tree read by `base`; nothing is written.
pub fn check_series_with(base: &dyn TreeRead, patches: &[(String, Vec<u8>)]) -> Result<(), PatchError> {
    apply_in_memory(base, patches).map(|_| ())
}

/// Checks that the series applies onto the tree at `tree_dir`; nothing is written.
pub fn check_series(tree_dir: &Path, patches: &[(String, Vec<u8>)]) -> Result<(), PatchError> {
    check_series_with(&DirReader(tree_dir), patches)
}

/// Applies the series, in order, onto the tree at `tree_dir`: all of it, or (on any failure)
/// nothing.
pub fn apply_series(tree_dir: &Path, patches: &[(String, Vec<u8>)]) -> Result<(), PatchError> {
    let reader = DirReader(tree_dir);
    let ov = apply_in_memory(&reader, patches)?;
    let root = tree_dir.canonicalize().map_err(|source| PatchError::Read { path: tree_dir.into(), source })?;
    for (rel, content) in &ov.files {
        let path = tree_dir.join(rel);
        let werr = |source| PatchError::Write { path: path.clone(), source };
        let parent = path.parent().expect("a file in the tree has a parent");
        match content {
            Some(bytes) => {
                std::fs::create_dir_all(parent).map_err(werr)?;
                // Never write through a symlink that leads out of the tree.
                let real_parent = parent.canonicalize().map_err(werr)?;
                if !real_parent.starts_with(&root) {
                    return Err(PatchError::UnsafePath { patch: "(series)".into(), file: rel.clone() });
                }
                let target = real_parent.join(path.file_name().expect("file name"));
                let mode = std::fs::symlink_metadata(&target).ok().filter(|m| m.is_file()).map(|m| m.permissions());
                let mut tmp = tempfile::NamedTempFile::new_in(&real_parent).map_err(werr)?;
                std::io::Write::write_all(&mut tmp, bytes).map_err(werr)?;
                if let Some(perm) = mode {
                    std::fs::set_permissions(tmp.path(), perm).map_err(werr)?;
                } else {
                    set_mode(tmp.path(), 0o644).map_err(werr)?;
                }
                if let Some(m) = ov.modes.get(rel) {
                    set_mode(tmp.path(), *m).map_err(werr)?;
                }
                tmp.persist(&target).map_err(|e| werr(e.error))?;
            }
            None => match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(werr(e)),
            },
        }
    }
    Ok(())
}

#[cfg(unix)]
fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_: &Path, _: u32) -> std::io::Result<()> {
    Ok(())
}

/// The files of a tree (relative paths, sorted), leaving out `.git` (repos and submodule links).
fn tree_files(root: &Path) -> Result<BTreeMap<String, PathBuf>, PatchError> {
    let mut out = BTreeMap::new();
    let walk = walkdir::WalkDir::new(root).sort_by_file_name().into_iter().filter_entry(|e| e.file_name() != ".git");
    for e in walk {
        let e = e.map_err(|e| PatchError::Read {
            path: e.path().map(Path::to_path_buf).unwrap_or_else(|| root.to_path_buf()),
            source: e.into_io_error().unwrap_or_else(|| std::io::Error::other("walk failed")),
        })?;
        if e.file_type().is_file() {
            let rel = e.path().strip_prefix(root).expect("under root").to_string_lossy().replace('\\', "/");
            out.insert(rel, e.path().to_path_buf());
        }
    }
    Ok(out)
}

/// The result of diffing two trees: the patch, and files left out because they are binary.
#[derive(Debug, Default)]
pub struct TreeDiff {
    pub patch: Vec<u8>,
    pub files: Vec<String>,
    pub skipped_binary: Vec<String>,
}

/// A git-style unified diff from `base` to `edited` (both directories), `.git` left out.
pub fn diff_trees(base: &Path, edited: &Path) -> Result<TreeDiff, PatchError> {
    let a = tree_files(base)?;
    let b = tree_files(edited)?;
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    let mut out = TreeDiff::default();
    let read = |p: &Path| std::fs::read(p).map_err(|source| PatchError::Read { path: p.to_path_buf(), source });
    for name in names {
        let old = a.get(name).map(|p| read(p)).transpose()?;
        let new = b.get(name).map(|p| read(p)).transpose()?;
        if old == new {
            continue;
        }
        if old.as_deref().is_some_and(|o| o.contains(&0)) || new.as_deref().is_some_and(|n| n.contains(&0)) {
            out.skipped_binary.push(name.clone());
            continue;
        }
        let mut opts = diffy::DiffOptions::new();
        opts.set_original_filename(if old.is_some() { format!("a/{name}") } else { "/dev/null".into() });
        opts.set_modified_filename(if new.is_some() { format!("b/{name}") } else { "/dev/null".into() });
        let empty: &[u8] = b"";
        let p = opts.create_patch_bytes(old.as_deref().unwrap_or(empty), new.as_deref().unwrap_or(empty));
        out.patch.extend_from_slice(format!("diff --git a/{name} b/{name}\n").as_bytes());
        if old.is_none() {
            out.patch.extend_from_slice(b"new file mode 100644\n");
        } else if new.is_none() {
            out.patch.extend_from_slice(b"deleted file mode 100644\n");
        }
        out.patch.extend_from_slice(&p.to_bytes());
        out.files.push(name.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mem(BTreeMap<String, Vec<u8>>);
    impl TreeRead for Mem {
        fn read(&self, path: &str) -> std::io::Result<Option<Vec<u8>>> {
            Ok(self.0.get(path).cloned())
        }
    }
    fn mem(files: &[(&str, &str)]) -> Mem {
        Mem(files.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
    }
    fn p(name: &str, text: &str) -> (String, Vec<u8>) {
        (name.to_string(), text.as_bytes().to_vec())
    }
    fn result(base: &Mem, series: &[(String, Vec<u8>)], file: &str) -> Option<String> {
        let ov = apply_in_memory(base, series).unwrap();
        ov.get(file).unwrap().map(|b| String::from_utf8(b).unwrap())
    }

    const GIT_PATCH: &str = "From 1234 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n---\n x.c | 2 +-\n\ndiff --git a/src/x.c b/src/x.c\nindex 1..2 100644\n--- a/src/x.c\n+++ b/src/x.c\n@@ -2,3 +2,3 @@ int f()\n b\n-c\n+C\n d\n-- \n2.40\n";

    #[test]
    fn parses_format_patch() {
        let f = parse("0001.patch", GIT_PATCH.as_bytes()).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].old.as_deref(), Some("src/x.c"));
        assert_eq!(f[0].new.as_deref(), Some("src/x.c"));
        assert_eq!(f[0].hunks[0].old_start, 2);
        assert_eq!(f[0].hunks[0].lines.len(), 4);
        assert_eq!(f[0].hunks[0].patch_line, 11);
    }

    #[test]
    fn applies_with_offset() {
        let base = mem(&[("src/x.c", "new\nlines\na\nb\nc\nd\ne\n")]);
        assert_eq!(result(&base, &[p("1", GIT_PATCH)], "src/x.c").unwrap(), "new\nlines\na\nb\nC\nd\ne\n");
    }

    #[test]
    fn no_newline_at_end() {
        let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n";
        assert_eq!(result(&mem(&[("f", "a\nb")]), &[p("1", patch)], "f").unwrap(), "a\nb\n");
        let e = apply_in_memory(&mem(&[("f", "a\nb\n")]), &[p("1", patch)]).err().unwrap().to_string();
        assert!(e.contains("line ending or final newline"), "{e}");
    }

    #[test]
    fn create_delete_rename() {
        let patch = "diff --git a/new.txt b/new.txt\nnew file mode 100755\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+x\n+y\ndiff --git a/old.txt b/old.txt\ndeleted file mode 100644\n--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\ndiff --git a/r1 b/r2\nsimilarity index 100%\nrename from r1\nrename to r2\ndiff --git a/empty b/empty\nnew file mode 100644\nindex 0000000..e69de29\n";
        let base = mem(&[("old.txt", "gone\n"), ("r1", "moved\n")]);
        let ov = apply_in_memory(&base, &[p("1", patch)]).unwrap();
        assert_eq!(ov.get("new.txt").unwrap().unwrap(), b"x\ny\n");
        assert_eq!(ov.get("old.txt").unwrap(), None);
        assert_eq!(ov.get("r1").unwrap(), None);
        assert_eq!(ov.get("r2").unwrap().unwrap(), b"moved\n");
        assert_eq!(ov.get("empty").unwrap().unwrap(), b"");
        assert_eq!(ov.modes.get("new.txt"), Some(&0o755));
    }

    #[test]
    fn errors() {
        let base = mem(&[("src/x.c", "a\nb\nX\nd\n")]);
        let e = check_series_with(&base, &[p("0001-x.patch", GIT_PATCH)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`0001-x.patch` does not apply: hunk #1 of `src/x.c` (patch line 11, file line 2) does not match: line 3 is `X`, the patch expects `c`"
        );
        let e = check_series_with(&mem(&[("src/x.c", "a\nb\nC\nd\n")]), &[p("0001-x.patch", GIT_PATCH)]).unwrap_err();
        assert!(matches!(e, PatchError::HunkFailed { already_applied: true, .. }), "{e}");
        let e = check_series_with(&mem(&[]), &[p("0001-x.patch", GIT_PATCH)]).unwrap_err();
        assert_eq!(e.to_string(), "`0001-x.patch` does not apply: `src/x.c` does not exist in the tree");
        let e = check_series_with(&mem(&[]), &[p("n.patch", "hello\nworld\n")]).unwrap_err();
        assert!(matches!(e, PatchError::NotAPatch { .. }), "{e}");
        let e = parse("u.patch", b"--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n").unwrap_err();
        assert!(matches!(e, PatchError::UnsafePath { .. }), "{e}");
        let e = parse("m.patch", b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n").unwrap_err();
        assert!(
            e.to_string().starts_with("`m.patch` line 5: malformed patch: hunk `@@ -1,3 +1,3 @@` ends early"),
            "{e}"
        );
    }

    #[test]
    fn series_is_cumulative_and_atomic() {
        let p1 = p("1", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n");
        let p2 = p("2", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-b\n+c\n");
        assert_eq!(result(&mem(&[("f", "a\n")]), &[p1.clone(), p2.clone()], "f").unwrap(), "c\n");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "a\n").unwrap();
        let bad = p("3", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-zzz\n+y\n");
        assert!(apply_series(dir.path(), &[p1.clone(), p2.clone(), bad]).is_err());
        assert_eq!(std::fs::read_to_string(dir.path().join("f")).unwrap(), "a\n");
        apply_series(dir.path(), &[p1, p2]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("f")).unwrap(), "c\n");
    }

    #[test]
    fn diff_roundtrip() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(a.path().join("d")).unwrap();
        std::fs::create_dir_all(b.path().join("d")).unwrap();
        std::fs::write(a.path().join("d/f"), "1\n2\n3\n4\n5\n6\n7\n8\n9\n").unwrap();
        std::fs::write(b.path().join("d/f"), "1\n2\n3\n4\nfive\n6\n7\n8\n9").unwrap();
        std::fs::write(a.path().join("gone"), "x\n").unwrap();
        std::fs::write(b.path().join("new"), "n\n").unwrap();
        std::fs::create_dir_all(b.path().join(".git")).unwrap();
        std::fs::write(b.path().join(".git/HEAD"), "x").unwrap();
        let d = diff_trees(a.path(), b.path()).unwrap();
        assert_eq!(d.files, vec!["d/f", "gone", "new"]);
        apply_series(a.path(), &[("edit.patch".into(), d.patch)]).unwrap();
        assert_eq!(std::fs::read_to_string(a.path().join("d/f")).unwrap(), "1\n2\n3\n4\nfive\n6\n7\n8\n9");
        assert!(!a.path().join("gone").exists());
        assert_eq!(std::fs::read_to_string(a.path().join("new")).unwrap(), "n\n");
    }
}

#[cfg(test)]
mod embedded {
    /// Every patch shipped in the binary parses (whether it applies is `rocmforge fetch`'s job).
    #[test]
    fn embedded_patches_parse() {
        let tree = crate::recipe::RecipeTree::embedded();
        for stack in tree.stack_names() {
            let Ok(s) = crate::recipe::load_stack(&tree, &stack) else { continue };
            for r in s.recipes.values() {
                for p in &r.patches {
                    let bytes = tree.get(&p.path).expect("loader checked it exists");
                    let files = super::parse(&p.name, bytes).unwrap_or_else(|e| panic!("{e}"));
                    assert!(!files.is_empty());
                }
            }
        }
    }
}
