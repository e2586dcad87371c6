//! Applying a series all-or-nothing: in memory over the tree first, written only when every
//! patch applied.

use std::collections::BTreeMap;
use std::path::Path;

use super::binary::{self, blob_id, BinaryPatch};
use super::parse::{parse, split_lines, trim_eol, FilePatch, Hunk};
use super::{DirReader, PatchError, TreeRead};

/// Files of the tree as the series changes them: reads fall through to the tree.
pub(super) struct Overlay<'a> {
    base: &'a dyn TreeRead,
    files: BTreeMap<String, Option<Vec<u8>>>,
    modes: BTreeMap<String, u32>,
}

impl Overlay<'_> {
    pub(super) fn get(&self, path: &str) -> Result<Option<Vec<u8>>, PatchError> {
        match self.files.get(path) {
            Some(v) => Ok(v.clone()),
            None => self.base.read(path).map_err(|source| PatchError::Read { path: path.into(), source }),
        }
    }
}

/// Where a hunk's old lines are in `lines`, searching outward from `want`, not before `from`.
fn find_block(lines: &[&[u8]], block: &[&[u8]], want: usize, from: usize) -> Option<usize> {
    let fits = |i: usize| i >= from && i + block.len() <= lines.len() && lines[i..i + block.len()] == *block;
    // Nothing fits past the end, so the nearest place to a `want` beyond it is the nearest to the
    // end (a hunk claiming line 10^12 used to make this loop run 10^12 times).
    let want = want.min(lines.len());
    for d in 0..=lines.len() {
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

/// How far before and after the first differing column an excerpt of a long line reaches.
const EXCERPT_BEFORE: usize = 30;
const EXCERPT_AFTER: usize = 40;

/// `chars[from..to]`, with `...` where the line goes on.
fn excerpt(chars: &[char], from: usize, to: usize) -> String {
    let to = to.min(chars.len());
    let from = from.min(to);
    let mut s = String::new();
    if from > 0 {
        s.push_str("...");
    }
    s.extend(&chars[from..to]);
    if to < chars.len() {
        s.push_str("...");
    }
    s
}

/// The message for file line `line_no` being `got` where the patch expects `want`: both lines
/// whole when they are short, else an excerpt of each around the first column where they differ
/// (cutting both at the same length would show two identical strings).
fn differing_line(line_no: usize, got: &[u8], want: &[u8]) -> String {
    let got: Vec<char> = String::from_utf8_lossy(trim_eol(got)).chars().collect();
    let want: Vec<char> = String::from_utf8_lossy(trim_eol(want)).chars().collect();
    if got.len() <= 80 && want.len() <= 80 {
        let (g, w): (String, String) = (got.iter().collect(), want.iter().collect());
        return format!("line {line_no} is `{g}`, the patch expects `{w}`");
    }
    let col = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
    let (from, to) = (col.saturating_sub(EXCERPT_BEFORE), col + EXCERPT_AFTER);
    let how = if col == got.len() {
        format!("the file's line ends there ({} characters)", got.len())
    } else if col == want.len() {
        format!("the patch's line ends there ({} characters)", want.len())
    } else {
        "they differ".to_string()
    };
    format!(
        "line {line_no} differs from the patch at column {}: {how}\n    file:  `{}`\n    patch: `{}`",
        col + 1,
        excerpt(&got, from, to),
        excerpt(&want, from, to)
    )
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
                return differing_line(at + k + 1, got, want);
            }
            _ => {}
        }
    }
    "its lines are not at the expected place (an earlier hunk overlaps it)".into()
}

enum FileFailure {
    Missing,
    Exists,
    Binary(String),
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
        // Saturating: a header may claim any line number (`@@ -18446744073709551615 ...`).
        let expected_i = isize::try_from(expected).unwrap_or(isize::MAX);
        let want = expected_i.saturating_add(offset).max(pos as isize) as usize;
        let Some(at) = find_block(&lines, &old, want, pos) else {
            return Err(FileFailure::Hunk {
                index: index + 1,
                line: expected.saturating_add(1),
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
        offset = at as isize - expected_i;
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

/// The file a binary change makes from `old` (`None`: the file is created), checking the blob ids
/// of the `index` line before and after, as git does.
fn binary_content(fp: &FilePatch, bin: &BinaryPatch, old: Option<&[u8]>) -> Result<Vec<u8>, FileFailure> {
    let Some((old_id, new_id)) = fp.index.as_ref().filter(|(a, b)| a.len() == 40 && b.len() == 40) else {
        return Err(FileFailure::Binary(
            "the patch has no full `index OLD..NEW` line to check it with (`git diff --binary` writes one)".into(),
        ));
    };
    if let Some(old) = old {
        let id = blob_id(old);
        if id != *old_id {
            return Err(FileFailure::Binary(format!(
                "the file is not the one the patch was made from (blob {id}, the patch's `index` line says {old_id})"
            )));
        }
    }
    let result = binary::apply_hunk(old.unwrap_or_default(), &bin.forward).map_err(FileFailure::Binary)?;
    if fp.new.is_some() {
        let id = blob_id(&result);
        if id != *new_id {
            return Err(FileFailure::Binary(format!("it makes blob {id}, the patch's `index` line says {new_id}")));
        }
    }
    Ok(result)
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
            let content = match &fp.binary {
                Some(bin) => binary_content(fp, bin, None).map_err(|f| (new.clone(), f))?,
                None => new_file_content(fp, false),
            };
            ov.files.insert(new.clone(), Some(content));
            if let Some(m) = fp.new_mode {
                ov.modes.insert(new.clone(), m);
            }
        }
        (Some(old), new) => {
            let Some(content) = read(ov, old)? else { return Err((old.clone(), FileFailure::Missing)) };
            let result = match &fp.binary {
                Some(bin) => binary_content(fp, bin, Some(&content)),
                None => apply_hunks(&content, &fp.hunks, false),
            }
            .map_err(|f| (old.clone(), f))?;
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
        (_, Some(new)) if fp.binary.is_some() => {
            ov.get(new).ok().flatten().is_some_and(|c| fp.index.as_ref().is_some_and(|(_, id)| blob_id(&c) == *id))
        }
        (None, Some(new)) => ov.get(new).ok().flatten().is_some_and(|c| c == new_file_content(fp, false)),
        (Some(old), None) => ov.get(old).ok().flatten().is_none(),
        (Some(_), Some(new)) => ov.get(new).ok().flatten().is_some_and(|c| apply_hunks(&c, &fp.hunks, true).is_ok()),
        (None, None) => true,
    })
}

/// Applies the series to an overlay over `base`; the overlay holds the result.
pub(super) fn apply_in_memory<'a>(
    base: &'a dyn TreeRead,
    patches: &[(String, Vec<u8>)],
) -> Result<Overlay<'a>, PatchError> {
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
                    FileFailure::Binary(reason) => PatchError::BinaryFailed { patch, file, reason, already_applied },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::GIT_PATCH;

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
    fn long_line_mismatch_shows_where_the_lines_differ() {
        let long = |tail: &str| format!("{}{tail} = 1;\n", "static const char *kernel_names[] = ".repeat(4));
        let patch = format!("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-{}+x\n", long("gfx1010"));
        let base = Mem([("f".to_string(), long("gfx1030").into_bytes())].into());
        let e = check_series_with(&base, &[p("1.patch", &patch)]).unwrap_err().to_string();
        // "static const char *kernel_names[] = " is 36 characters, four times: 144; then `gfx10`.
        assert!(e.contains("line 1 differs from the patch at column 150: they differ"), "{e}");
        assert!(e.contains("file:  `...t char *kernel_names[] = gfx1030 = 1;`"), "{e}");
        assert!(e.contains("patch: `...t char *kernel_names[] = gfx1010 = 1;`"), "{e}");
        // One line a prefix of the other, and a difference past a long common tail.
        let short = format!("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-{}+x\n", "a".repeat(100) + "\n");
        let base = Mem([("f".to_string(), ("a".repeat(120) + "\n").into_bytes())].into());
        let e = check_series_with(&base, &[p("2.patch", &short)]).unwrap_err().to_string();
        assert!(e.contains("at column 101: the patch's line ends there (100 characters)"), "{e}");
        assert!(e.contains(&format!("file:  `...{}`", "a".repeat(50))), "{e}");
        assert!(e.contains(&format!("patch: `...{}`", "a".repeat(30))), "{e}");
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
}
