//! Property tests of the patch reader and engine: generated and mutated patches never panic, an
//! error names the patch it is about, and a patch made by a diff applies to give the edited file.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{check_series_with, parse, PatchError, TreeRead};

struct Mem(BTreeMap<String, Vec<u8>>);

impl TreeRead for Mem {
    fn read(&self, path: &str) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.0.get(path).cloned())
    }
}

/// Every error of a patch series names the patch (or, for an I/O error, the file).
fn assert_names_patch(e: &PatchError, name: &str) {
    let msg = e.to_string();
    match e {
        PatchError::Read { .. } | PatchError::Write { .. } => {}
        _ => {
            assert_eq!(e.patch_name(), Some(name), "{msg}");
            assert!(msg.contains(&format!("`{name}`")), "the error does not name `{name}`: {msg}");
        }
    }
}

/// Lines of a small text file: few distinct lines, so diffs have context and ambiguity.
fn text_lines() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec("[abc ]{0,3}|x{90,100}[yz]", 0..24)
}

fn join(lines: &[String], final_newline: bool) -> Vec<u8> {
    let mut s = lines.join("\n");
    if final_newline && !lines.is_empty() {
        s.push('\n');
    }
    s.into_bytes()
}

/// An edit of `lines`: some lines removed, changed or inserted.
fn edited(lines: Vec<String>) -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
    let n = lines.len();
    (Just(lines), proptest::collection::vec((0..=n, 0u8..3, "[abcd]{0,3}"), 0..6)).prop_map(|(old, edits)| {
        let mut new = old.clone();
        for (at, op, text) in edits {
            let at = at.min(new.len());
            match op {
                0 if at < new.len() => {
                    new.remove(at);
                }
                1 if at < new.len() => new[at] = text,
                _ => new.insert(at, text),
            }
        }
        (old, new)
    })
}

/// A git-style patch of `f` from `old` to `new`, made by diffy (as `patch diff` makes them).
fn make_patch(old: &[u8], new: &[u8]) -> Vec<u8> {
    let mut opts = diffy::DiffOptions::new();
    opts.set_original_filename("a/dir/f.txt");
    opts.set_modified_filename("b/dir/f.txt");
    let mut p = b"diff --git a/dir/f.txt b/dir/f.txt\n".to_vec();
    p.extend(opts.create_patch_bytes(old, new).to_bytes());
    p
}

/// One mutation of a patch's lines.
#[derive(Debug, Clone)]
enum Mutation {
    Delete(prop::sample::Index),
    Duplicate(prop::sample::Index),
    /// Replace the first byte of a line.
    Lead(prop::sample::Index, u8),
    /// Replace a digit of a line (hunk counts and starts).
    Digit(prop::sample::Index, prop::sample::Index, u8),
    Insert(prop::sample::Index, String),
    Replace(prop::sample::Index, String),
    Truncate(prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let lead = prop::sample::select(vec![b' ', b'+', b'-', b'\\', b'@', b'\n', b'\r', b'd', b'G', 0xff]);
    let line = prop::sample::select(vec![
        "@@ -1,3 +1,4 @@\n",
        "@@ -0,0 +1 @@\n",
        "@@ -99999999999999999999,1 +1 @@\n",
        "@@ -1 +1 @@\n",
        "@@ -1000000000000,1 +1000000000000,1 @@\n",
        "@@ -18446744073709551615,0 +18446744073709551615 @@\n",
        "@@ -18446744073709551615 +1,0 @@\n",
        "@@ -1,0 +0,0 @@\n",
        "--- a/dir/f.txt\n",
        "+++ b/dir/f.txt\n",
        "--- /dev/null\n",
        "+++ /dev/null\n",
        "+++ b/../escape\n",
        "--- \"a/dir/f.txt\n",
        "--- \"\n",
        "diff --git a/x b/x\n",
        "diff --git a/x\n",
        "new file mode 100755\n",
        "new mode 9\n",
        "deleted file mode 100644\n",
        "rename from dir/f.txt\n",
        "rename to /etc/passwd\n",
        "rename to \n",
        "GIT binary patch\n",
        "literal 3\n",
        "literal 0\n",
        "delta 9\n",
        "HcmV?d00001\n",
        "zcmV?d00001\n",
        "index 0000000000000000000000000000000000000000..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\n",
        "Binary files a/x and b/x differ\n",
        "\\ No newline at end of file\n",
        "\n",
    ]);
    prop_oneof![
        any::<prop::sample::Index>().prop_map(Mutation::Delete),
        any::<prop::sample::Index>().prop_map(Mutation::Duplicate),
        (any::<prop::sample::Index>(), lead).prop_map(|(i, b)| Mutation::Lead(i, b)),
        (any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0u8..10).prop_map(|(i, j, d)| Mutation::Digit(
            i,
            j,
            b'0' + d
        )),
        (any::<prop::sample::Index>(), line.clone()).prop_map(|(i, l)| Mutation::Insert(i, l.to_string())),
        (any::<prop::sample::Index>(), line).prop_map(|(i, l)| Mutation::Replace(i, l.to_string())),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(patch: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = patch.split_inclusive(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    for m in mutations {
        if lines.is_empty() {
            break;
        }
        match m {
            Mutation::Delete(i) => {
                lines.remove(i.index(lines.len()));
            }
            Mutation::Duplicate(i) => {
                let k = i.index(lines.len());
                lines.insert(k, lines[k].clone());
            }
            Mutation::Lead(i, b) => {
                let k = i.index(lines.len());
                if let Some(first) = lines[k].first_mut() {
                    *first = *b;
                }
            }
            Mutation::Digit(i, j, d) => {
                let k = i.index(lines.len());
                let digits: Vec<usize> =
                    lines[k].iter().enumerate().filter(|(_, c)| c.is_ascii_digit()).map(|(p, _)| p).collect();
                if !digits.is_empty() {
                    lines[k][digits[j.index(digits.len())]] = *d;
                }
            }
            Mutation::Insert(i, l) => lines.insert(i.index(lines.len() + 1), l.clone().into_bytes()),
            Mutation::Replace(i, l) => {
                let k = i.index(lines.len());
                lines[k] = l.clone().into_bytes();
            }
            Mutation::Truncate(i) => {
                let k = i.index(lines.len());
                let cut = lines[k].len() / 2;
                lines[k].truncate(cut);
                lines.truncate(k + 1);
            }
        }
    }
    lines.concat()
}

fn patch_name() -> impl Strategy<Value = String> {
    "[0-9]{4}-[a-zA-Z0-9 ._é-]{1,12}\\.patch"
}

proptest! {
    #[test]
    fn any_bytes(name in patch_name(), bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = parse(&name, &bytes) {
            assert_names_patch(&e, &name);
        }
    }

    #[test]
    fn a_diff_applies_to_give_the_edited_file(
        (old, new) in text_lines().prop_flat_map(edited),
        old_nl in any::<bool>(),
        new_nl in any::<bool>(),
    ) {
        let (old, new) = (join(&old, old_nl), join(&new, new_nl));
        prop_assume!(old != new);
        let patch = make_patch(&old, &new);
        let tree = Mem([("dir/f.txt".to_string(), old.clone())].into());
        let files = parse("p.patch", &patch).unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&patch)));
        prop_assert_eq!(files.len(), 1);
        let ov = super::apply::apply_in_memory(&tree, &[("p.patch".into(), patch.clone())])
            .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&patch)));
        prop_assert_eq!(ov.get("dir/f.txt").unwrap(), Some(new.clone()));
        // Applying it again fails and says the patch looks applied (unless it is its own inverse).
        let twice = Mem([("dir/f.txt".to_string(), new)].into());
        if let Err(e) = check_series_with(&twice, &[("p.patch".into(), patch)]) {
            assert_names_patch(&e, "p.patch");
        }
    }

    #[test]
    fn mutated_patches(
        (old, new) in text_lines().prop_flat_map(edited),
        mutations in proptest::collection::vec(mutation(), 1..5),
        name in patch_name(),
        onto_new in any::<bool>(),
    ) {
        let (old, new) = (join(&old, true), join(&new, true));
        let patch = mutate(&make_patch(&old, &new), &mutations);
        let tree = Mem([("dir/f.txt".to_string(), if onto_new { new } else { old }), ("x".into(), b"x\n".to_vec())].into());
        if let Err(e) = check_series_with(&tree, &[(name.clone(), patch)]) {
            assert_names_patch(&e, &name);
        }
    }
}

/// Regression: a hunk claiming a line far past the end of the file made the search for its place
/// loop once per claimed line (10^12 times), and `usize::MAX` overflowed.
#[test]
fn huge_hunk_starts_fail_fast() {
    let tree = Mem([("f".to_string(), b"a\nb\n".to_vec())].into());
    for (header, body) in [
        ("@@ -1000000000000,1 +1000000000000,1 @@", "-zz\n+y\n"),
        ("@@ -1000000000000,1 +1000000000000,1 @@", "-b\n+y\n"),
        ("@@ -18446744073709551615,0 +18446744073709551615 @@", "+y\n"),
        ("@@ -18446744073709551615 +1,0 @@", "-a\n"),
        ("@@ -18446744073709551615,1 +18446744073709551615,1 @@", "-zz\n+y\n"),
    ] {
        let patch = format!("--- a/f\n+++ b/f\n{header}\n{body}");
        let started = std::time::Instant::now();
        if let Err(e) = check_series_with(&tree, &[("h.patch".into(), patch.into_bytes())]) {
            assert_names_patch(&e, "h.patch");
        }
        assert!(started.elapsed().as_secs() < 5, "{header} took {:?}", started.elapsed());
    }
    let e = check_series_with(
        &tree,
        &[("h.patch".into(), b"--- a/f\n+++ b/f\n@@ -1000000000000,1 +1000000000000,1 @@\n-zz\n+y\n".to_vec())],
    )
    .unwrap_err();
    assert!(e.to_string().contains("file line 1000000000000"), "{e}");
}
