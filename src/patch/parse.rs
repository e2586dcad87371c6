//! Parsing unified diffs (plain and `git format-patch`) into file changes.

use super::binary::{parse_binary, BinaryPatch};
use super::PatchError;

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
    pub(super) fn old_lines(&self) -> Vec<&[u8]> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(b) | HunkLine::Remove(b) => Some(b.as_slice()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }
    pub(super) fn new_lines(&self) -> Vec<&[u8]> {
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
    /// The blob ids of git's `index OLD..NEW` line.
    pub index: Option<(String, String)>,
    /// A `GIT binary patch` (then `hunks` is empty).
    pub binary: Option<BinaryPatch>,
}

impl FilePatch {
    /// The path this change is reported under.
    pub fn path(&self) -> &str {
        self.new.as_deref().or(self.old.as_deref()).unwrap_or("")
    }
}

pub(super) fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|b| *b == b'\n').collect()
}

pub(super) fn trim_eol(l: &[u8]) -> &[u8] {
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
            git_block = Some((git_diff_header(rest), false));
            i += 1;
            continue;
        }
        if let Some((fp, meaningful)) = git_block.as_mut() {
            if let Some(next) = read_git_header_line(name, &lines, i, fp, meaningful)? {
                i = next;
                continue;
            }
        }
        if line.starts_with(b"--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with(b"+++ ")) {
            out.push(read_file_hunks(name, &lines, &mut i, git_block.take())?);
            continue;
        }
        i += 1;
    }
    flush_git(&mut git_block, &mut out);
    if out.is_empty() {
        return Err(PatchError::NotAPatch { patch: name.into() });
    }
    check_paths_stay_inside(name, &out)?;
    Ok(out)
}

fn malformed(patch: &str, line: usize, msg: String) -> PatchError {
    PatchError::Malformed { patch: patch.to_string(), line, msg }
}

/// `diff --git a/x b/x`: the change's paths, before any extended header line.
fn git_diff_header(rest: &[u8]) -> FilePatch {
    let s = String::from_utf8_lossy(trim_eol(rest)).to_string();
    let (mut old, mut new) = match s.split_once(" b/") {
        Some((a, b)) => (Some(a.to_string()), Some(format!("b/{b}"))),
        None => (None, None),
    };
    strip_prefixes(&mut old, &mut new);
    FilePatch { old, new, ..FilePatch::default() }
}

/// One of git's extended header lines (modes, renames, `index`, a binary patch) into the block's
/// change; `meaningful` is set when the line makes the change stand alone without hunks. Returns
/// the line after a `GIT binary patch` it read whole, `None` for any other line.
fn read_git_header_line(
    name: &str,
    lines: &[&[u8]],
    i: usize,
    fp: &mut FilePatch,
    meaningful: &mut bool,
) -> Result<Option<usize>, PatchError> {
    let line = lines[i];
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
    } else if let Some(ids) = line.strip_prefix(b"index ") {
        let ids = String::from_utf8_lossy(trim_eol(ids)).to_string();
        let ids = ids.split(' ').next().unwrap_or("");
        fp.index = ids.split_once("..").map(|(a, b)| (a.to_string(), b.to_string()));
    } else if trim_eol(line) == b"GIT binary patch" {
        let mut j = i + 1;
        let bin = parse_binary(lines, &mut j).map_err(|(line, msg)| malformed(name, line, msg))?;
        fp.binary = Some(bin);
        *meaningful = true;
        return Ok(Some(j));
    } else if line.starts_with(b"Binary files ") && trim_eol(line).ends_with(b" differ") {
        return Err(PatchError::Binary { patch: name.into(), file: fp.path().to_string() });
    }
    Ok(None)
}

/// A `---`/`+++` pair at `*i` and the hunks after it, taking the modes and blob ids of the
/// `diff --git` block it closes; `*i` is left on the line after the last hunk.
fn read_file_hunks(
    name: &str,
    lines: &[&[u8]],
    i: &mut usize,
    git_block: Option<(FilePatch, bool)>,
) -> Result<FilePatch, PatchError> {
    let mut old = header_path(&lines[*i][4..]);
    let mut new = header_path(&lines[*i + 1][4..]);
    strip_prefixes(&mut old, &mut new);
    let mut fp = match git_block {
        Some((g, _)) => FilePatch { old, new, new_mode: g.new_mode, index: g.index, ..FilePatch::default() },
        None => FilePatch { old, new, ..FilePatch::default() },
    };
    *i += 2;
    while *i < lines.len() && lines[*i].starts_with(b"@@ ") {
        fp.hunks.push(read_hunk(name, lines, i)?);
    }
    if fp.hunks.is_empty() && !(fp.old.is_none() && fp.new.is_some()) {
        return Err(malformed(name, *i, format!("`{}` has a header but no hunk", fp.path())));
    }
    Ok(fp)
}

/// The `@@` hunk at `*i`: as many old and new lines as its header counts, and a
/// `\ No newline at end of file` after them; `*i` is left on the line after it.
fn read_hunk(name: &str, lines: &[&[u8]], i: &mut usize) -> Result<Hunk, PatchError> {
    let header = String::from_utf8_lossy(trim_eol(lines[*i])).to_string();
    let Some((a, b, c, d)) = parse_hunk_header(&header) else {
        return Err(malformed(name, *i + 1, format!("bad hunk header `{header}`")));
    };
    let mut hunk = Hunk { old_start: a, old_len: b, new_start: c, new_len: d, lines: Vec::new(), patch_line: *i + 1 };
    *i += 1;
    let (mut old_left, mut new_left) = (b, d);
    while old_left > 0 || new_left > 0 {
        let Some(l) = lines.get(*i) else {
            return Err(malformed(
                name,
                *i,
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
                    name,
                    *i + 1,
                    format!(
                        "hunk `{header}` has {old_left} old and {new_left} new line(s) left, but this line is `{}`",
                        String::from_utf8_lossy(trim_eol(l))
                    ),
                ))
            }
        }
        *i += 1;
    }
    if lines.get(*i).is_some_and(|l| l.starts_with(b"\\")) {
        no_newline(&mut hunk);
        *i += 1;
    }
    Ok(hunk)
}

/// Every path a change names is relative and stays inside the tree it is applied to.
fn check_paths_stay_inside(name: &str, out: &[FilePatch]) -> Result<(), PatchError> {
    for fp in out {
        for p in [&fp.old, &fp.new].into_iter().flatten() {
            if !crate::fsutil::is_safe_rel(p) {
                return Err(PatchError::UnsafePath { patch: name.into(), file: p.clone() });
            }
        }
    }
    Ok(())
}

/// `\ No newline at end of file`: the previous line has no `\n`.
fn no_newline(hunk: &mut Hunk) {
    if let Some(HunkLine::Context(b) | HunkLine::Remove(b) | HunkLine::Add(b)) = hunk.lines.last_mut() {
        if b.ends_with(b"\n") {
            b.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::GIT_PATCH;

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

    /// Every patch shipped in the binary parses (whether it applies is `rocmforge fetch`'s job).
    #[test]
    fn embedded_patches_parse() {
        let tree = crate::recipe::RecipeTree::embedded();
        for stack in tree.stack_names() {
            let Ok(s) = crate::recipe::load_stack(&tree, &stack) else { continue };
            for r in s.recipes.values() {
                for p in &r.patches {
                    let bytes = tree.get(&p.path).expect("loader checked it exists");
                    let files = parse(&p.name, bytes).unwrap_or_else(|e| panic!("{e}"));
                    assert!(!files.is_empty());
                }
            }
        }
    }
}
