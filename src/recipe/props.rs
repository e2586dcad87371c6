//! Property tests of the recipe loader: the example stack's files, mutated (lines deleted,
//! duplicated, values replaced, odd lines inserted, bytes flipped, text cut short, files added),
//! never make it panic, and every problem it reports names a file of the tree.

use std::collections::BTreeMap;
use std::path::PathBuf;

use proptest::prelude::*;

use super::{load_all, load_stack, pick_stack, Origin, RecipeTree};

const ROOT: &str = "/prop/tree é";

/// The example stack's files (recipes and patches), as the tests' starting point.
fn example_files() -> BTreeMap<String, Vec<u8>> {
    let embedded = RecipeTree::embedded();
    let mut files = BTreeMap::new();
    for stack in ["example"] {
        for (rel, bytes) in embedded.stack_files(stack) {
            files.insert(rel.to_string(), bytes.to_vec());
        }
    }
    let patch = "patches/example/hipvec/0001-report-patched-build.patch";
    files.insert(patch.to_string(), embedded.get(patch).expect("the example patch").to_vec());
    files
}

#[derive(Debug, Clone)]
enum Mutation {
    DeleteLine(prop::sample::Index),
    DuplicateLine(prop::sample::Index),
    /// Replace what follows the first `=` of a line.
    Value(prop::sample::Index, &'static str),
    InsertLine(prop::sample::Index, &'static str),
    FlipByte(prop::sample::Index, u8),
    InsertChar(prop::sample::Index, char),
    Truncate(prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let idx = any::<prop::sample::Index>;
    let value = prop::sample::select(vec![
        "\"\"",
        "\"../x\"",
        "\"/etc/passwd\"",
        "1",
        "-1",
        "1e400",
        "[]",
        "{}",
        "\"é❤\"",
        "\"gfx9999\"",
        "true",
        "\"a b\"",
        "[1, \"x\"]",
        "[\"vecmath\", \"vecmath\"]",
        "[\"pyvec\"]",
        "[\"hipvec\"]",
        "\"\\u0000\"",
        "\"0001-report-patched-build.patch\"",
        "\"${HOME}\"",
        "'''\nmulti\nline'''",
        "\"",
        "0.0000001",
        "9999999999999999999999",
    ]);
    let line = prop::sample::select(vec![
        "[package]",
        "[source]",
        "[build]",
        "[[build]]",
        "[targets]",
        "[external]",
        "[patches]",
        "[dependencies]",
        "name = \"vecmath\"",
        "unknown = 1",
        "from = \"vecmath\"",
        "from = \"pyvec\"",
        "url = \"https://example.invalid/x-1.0-py3-none-any.whl\"",
        "url = \"https://example.invalid/x.tar.gz\"",
        "subdir = \"../..\"",
        "build = [\"pyvec\"]",
        "source = [\"vecmath\"]",
        "series = [\"../../../etc/passwd\"]",
        "series = [\"0001-report-patched-build.patch\", \"0001-report-patched-build.patch\"]",
        "supported = []",
        "gpu = true",
        "system = \"prebuilt-wheel\"",
        "install-wheels = [\"Not A Name\"]",
        "\"é\" = 1",
        "a.b.c = 1",
        "# comment é",
        "=",
        "[",
        "\t",
    ]);
    prop_oneof![
        idx().prop_map(Mutation::DeleteLine),
        idx().prop_map(Mutation::DuplicateLine),
        (idx(), value).prop_map(|(i, v)| Mutation::Value(i, v)),
        (idx(), line).prop_map(|(i, l)| Mutation::InsertLine(i, l)),
        (idx(), any::<u8>()).prop_map(|(i, b)| Mutation::FlipByte(i, b)),
        (idx(), prop::sample::select(vec!['é', '❤', '\u{0}', '"', '\n', '[', '=']))
            .prop_map(|(i, c)| Mutation::InsertChar(i, c)),
        idx().prop_map(Mutation::Truncate),
    ]
}

fn mutate(text: &mut Vec<u8>, m: &Mutation) {
    let mut lines: Vec<Vec<u8>> = text.split_inclusive(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    match m {
        Mutation::DeleteLine(i) if !lines.is_empty() => {
            lines.remove(i.index(lines.len()));
        }
        Mutation::DuplicateLine(i) if !lines.is_empty() => {
            let k = i.index(lines.len());
            lines.insert(k, lines[k].clone());
        }
        Mutation::Value(i, v) if !lines.is_empty() => {
            let k = i.index(lines.len());
            if let Some(eq) = lines[k].iter().position(|b| *b == b'=') {
                lines[k].truncate(eq + 1);
                lines[k].extend_from_slice(format!(" {v}\n").as_bytes());
            }
        }
        Mutation::InsertLine(i, l) => lines.insert(i.index(lines.len() + 1), format!("{l}\n").into_bytes()),
        Mutation::FlipByte(i, b) if !text.is_empty() => {
            let k = i.index(text.len());
            text[k] = *b;
            return;
        }
        Mutation::InsertChar(i, c) => {
            let k = i.index(text.len() + 1);
            text.splice(k..k, c.to_string().into_bytes());
            return;
        }
        Mutation::Truncate(i) => {
            text.truncate(i.index(text.len() + 1));
            return;
        }
        _ => return,
    }
    *text = lines.concat();
}

/// Every problem names a file of the tree (under its root), and the report renders.
fn check(tree: &RecipeTree) {
    let files_named = |diags: &crate::diagnostic::Diagnostics| {
        let rendered = diags.to_string();
        for d in &diags.0 {
            let rel = d
                .file
                .strip_prefix(&format!("{ROOT}/"))
                .unwrap_or_else(|| panic!("`{}` is not in the tree:\n{rendered}", d.file));
            assert!(
                tree.contains(rel) || rel.ends_with("/stack.toml"),
                "`{rel}` is not a file of the tree:\n{rendered}"
            );
            assert!(d.line >= 1 && d.column >= 1, "{rendered}");
        }
    };
    match load_stack(tree, "example") {
        Ok(s) => assert_eq!(s.name, "example"),
        Err(diags) => {
            assert!(!diags.is_empty());
            files_named(&diags);
        }
    }
    if let Err(diags) = load_all(tree) {
        files_named(&diags);
    }
    if let Err(e) = pick_stack(tree, None) {
        let _ = e.to_string();
    }
}

fn tree(files: BTreeMap<String, Vec<u8>>) -> RecipeTree {
    RecipeTree::from_files(Origin::Dir(PathBuf::from(ROOT)), files)
}

#[test]
fn the_example_stack_loads() {
    load_stack(&tree(example_files()), "example").unwrap();
}

proptest! {
    #[test]
    fn mutated_recipes(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), proptest::collection::vec(mutation(), 1..4)), 1..3),
        extra in proptest::option::weighted(0.2, ("[a-z0-9é-]{0,8}(\\.toml)?", prop::sample::select(vec!["", "[package]\nname = \"x\"\n", "[stack]\n"]))),
    ) {
        let mut files = example_files();
        let names: Vec<String> = files.keys().filter(|k| k.ends_with(".toml")).cloned().collect();
        for (which, ms) in &edits {
            let text = files.get_mut(&names[which.index(names.len())]).unwrap();
            for m in ms {
                mutate(text, m);
            }
        }
        if let Some((name, text)) = extra {
            files.insert(format!("recipes/example/{name}"), text.as_bytes().to_vec());
        }
        check(&tree(files));
    }

    #[test]
    fn any_bytes_as_a_recipe(bytes in proptest::collection::vec(any::<u8>(), 0..400), as_stack in any::<bool>()) {
        let mut files = example_files();
        let rel = if as_stack { "recipes/example/stack.toml" } else { "recipes/example/vecmath.toml" };
        files.insert(rel.to_string(), bytes);
        check(&tree(files));
    }
}

#[test]
fn coverage_declarations_are_checked_where_written() {
    let mut files = example_files();
    let edit = |files: &mut BTreeMap<String, Vec<u8>>, rel: &str, from: &str, to: &str| {
        let text = String::from_utf8(files[rel].clone()).unwrap();
        assert!(text.contains(from), "{rel}: {text}");
        files.insert(rel.to_string(), text.replace(from, to).into_bytes());
    };
    edit(
        &mut files,
        "recipes/example/hipvec.toml",
        r#"device-code = ["lib/libhipvec.so"]"#,
        "device-code = [\"/abs/lib.so\", \"lib/[x\"]\nmust-contain = { \"lib/libhipvec.so\" = \"\" }",
    );
    edit(
        &mut files,
        "recipes/example/vecmath.toml",
        "gpu = false",
        "gpu = false\ndevice-code = [\"lib/libvecmath.so\"]",
    );
    let diags = load_stack(&tree(files), "example").unwrap_err().to_string();
    for want in [
        "`/abs/lib.so` must be a relative path",
        "`lib/[x` is not a valid glob",
        "gives `lib/libhipvec.so` an empty text",
        "`device-code` is declared, but the recipe is host-only",
        "hipvec.toml",
        "vecmath.toml",
    ] {
        assert!(diags.contains(want), "missing `{want}` in:\n{diags}");
    }
    let stack = load_stack(&tree(example_files()), "example").unwrap();
    assert_eq!(stack.recipes["hipvec"].targets.device_code, ["lib/libhipvec.so"]);
}
