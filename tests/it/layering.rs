//! The module order of `src/lib.rs` is the direction data flows: a module may use only modules
//! declared above it, and no `cli` module another `cli` module; `report` never uses `engine`, and
//! `process` (the bottom floor) uses no other module. This reads every `crate::` path in `src/`
//! (outside `#[cfg(test)]` code) and fails on one against these rules.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::repo_root;

/// `pub mod x;` lines of lib.rs, in order.
fn module_order(lib: &str) -> Vec<String> {
    lib.lines().filter_map(|l| l.trim().strip_prefix("pub mod ")?.strip_suffix(';').map(String::from)).collect()
}

/// Every module a source text names through `crate::` (`crate::a::b`, `crate::{a, b::c}`).
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name: String = part.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            out.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    out
}

/// The source of `path` up to its first `#[cfg(test)]` (unit tests may use anything).
fn production_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Pairs the order allows but the floors do not (module, used), with why.
const FORBIDDEN: &[((&str, &str), &str)] = &[(
    ("report", "engine"),
    "reports read what a build recorded; finding or stopping processes is `process`'s (engine carries out a plan)",
)];

/// Modules at the bottom floor that use no other module of the crate.
const LEAVES: &[&str] = &["process"];

#[test]
fn no_module_uses_a_module_downstream_of_it() {
    let src = repo_root().join("src");
    let order = module_order(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(order.len() > 10 && order.last().map(String::as_str) == Some("cli"), "{order:?}");
    // The process module sits at the bottom floor: before every module that starts a child.
    for m in LEAVES {
        let at = order.iter().position(|o| o == m).unwrap_or_else(|| panic!("`{m}` is not declared in lib.rs"));
        for user in ["layout", "host", "key", "engine", "report", "verify"] {
            assert!(order.iter().position(|o| o == user).is_some_and(|u| at < u), "`{m}` must come before `{user}`");
        }
    }
    let rank: BTreeMap<&str, usize> = order.iter().enumerate().map(|(i, m)| (m.as_str(), i)).collect();
    let mut wrong = Vec::new();
    for entry in walkdir::WalkDir::new(&src).into_iter().map(Result::unwrap) {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") || path == src.join("lib.rs") || path == src.join("main.rs") {
            continue;
        }
        let rel = path.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs");
        let Some(&own) = rank.get(module) else {
            wrong.push(format!("{}: module `{module}` is not declared in lib.rs", rel.display()));
            continue;
        };
        for used in crate_paths(&production_code(path)) {
            match rank.get(used.as_str()) {
                Some(&r) if r > own => {
                    wrong.push(format!("{}: uses `crate::{used}`, which comes after `{module}`", rel.display()))
                }
                _ => {}
            }
            if let Some((_, why)) = FORBIDDEN.iter().find(|(pair, _)| *pair == (module, used.as_str())) {
                wrong.push(format!("{}: uses `crate::{used}`: {why}", rel.display()));
            }
            if LEAVES.contains(&module) && used != module {
                wrong.push(format!(
                    "{}: uses `crate::{used}`, but `{module}` is a leaf (it uses no module)",
                    rel.display()
                ));
            }
        }
        // Within cli, a command file uses only cli/mod.rs (`super::`), never another command.
        if module == "cli" && rel != Path::new("cli/mod.rs") {
            let text = production_code(path);
            let siblings: Vec<String> = std::fs::read_dir(src.join("cli"))
                .unwrap()
                .map(|e| e.unwrap().path().file_stem().unwrap().to_string_lossy().into_owned())
                .filter(|s| s != "mod")
                .collect();
            for s in siblings {
                if text.contains(&format!("super::{s}::")) || text.contains(&format!("crate::cli::{s}")) {
                    wrong.push(format!("{}: uses another command's module `cli::{s}`", rel.display()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the order of src/lib.rs:\n{}", wrong.join("\n"));
}

#[test]
fn the_reader_of_crate_paths_sees_grouped_and_plain_uses() {
    let text = "use crate::{plan::Plan, key};\nlet x = crate::engine::run();";
    assert_eq!(crate_paths(text), ["plan", "key", "engine"]);
}

/// lib.rs's prose names every declared module, each in its place: a module added, removed or
/// moved without its line there fails here (the prose once named a module `external` that no
/// longer existed and left out `gpu_code`).
#[test]
fn the_prose_of_lib_rs_names_each_module_in_the_declared_order() {
    let lib = std::fs::read_to_string(repo_root().join("src/lib.rs")).unwrap();
    let order = module_order(&lib);
    let prose: String = lib.lines().filter_map(|l| l.strip_prefix("//!")).collect::<Vec<_>>().join("\n");
    let mut named: Vec<String> = Vec::new();
    for (i, part) in prose.split('`').enumerate() {
        if i % 2 == 1 && order.iter().any(|m| m == part) && !named.iter().any(|n| n == part) {
            named.push(part.to_string());
        }
    }
    assert_eq!(named, order, "lib.rs's prose must name each `pub mod` once, in the order declared");
    // Each `name` (what it is) in the prose is a module: a stale name (`external`) fails.
    let described: Vec<&str> = prose
        .split('`')
        .skip(1)
        .step_by(2)
        .zip(prose.split('`').skip(2).step_by(2))
        .filter(|(_, after)| after.trim_start().starts_with('('))
        .map(|(name, _)| name)
        .collect();
    assert!(described.len() >= order.len(), "{described:?}");
    let stale: Vec<&&str> = described.iter().filter(|d| !order.iter().any(|m| m == *d)).collect();
    assert!(stale.is_empty(), "lib.rs's prose describes modules that are not declared: {stale:?}");
}
