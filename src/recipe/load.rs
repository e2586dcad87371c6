//! Loading a stack from a recipe tree: each file is parsed ([`super::raw`]) and lowered
//! ([`super::lower`]), then the recipes are checked against each other ([`super::validate`]).
//! Every problem of the tree (syntax, unknown and missing fields, bad ids, unknown dependencies,
//! duplicates, cycles, missing patches) is collected in one pass.

use std::collections::BTreeSet;

use super::lower::{lower_recipe, lower_stack, Lowered, StackHeader};
use super::raw::{parse, FileText, RawRecipe, RawStackFile};
use super::tree::{Origin, RecipeTree};
use super::validate::{check_stack, closest};
use super::Stack;
use crate::diagnostic::{Diagnostic, Diagnostics};

/// Errors choosing or loading a stack.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("no stack named `{name}` in {tree}{hint}\navailable stacks: {available}")]
    Unknown { name: String, tree: String, hint: String, available: String },
    #[error("no stack is marked `default = true` in {tree}: pick one with --stack (available: {available})")]
    NoDefault { tree: String, available: String },
    #[error("{0}")]
    Invalid(Diagnostics),
}

/// Loads and validates one stack; every problem is reported, not only the first.
pub fn load_stack(tree: &RecipeTree, stack: &str) -> Result<Stack, Diagnostics> {
    let mut diags = Diagnostics::default();
    let header = read_stack_header(tree, stack, &mut diags);

    let mut lowered: Vec<Lowered<'_>> = Vec::new();
    // Files that failed to parse still name a recipe: no follow-on "does not exist" errors.
    let mut unparsed: BTreeSet<String> = BTreeSet::new();
    for (rel, bytes) in tree.stack_files(stack) {
        if rel.ends_with("/stack.toml") {
            continue;
        }
        match read_recipe(tree, stack, rel, bytes, &mut diags) {
            Some(l) => lowered.push(l),
            None => {
                unparsed.insert(rel.rsplit('/').next().unwrap_or(rel).trim_end_matches(".toml").to_string());
            }
        }
    }
    let recipes = check_stack(stack, &lowered, &unparsed, &mut diags);
    if let Some(h) = &header {
        for l in &lowered {
            let (Some(w), Some(span)) = (&l.recipe.runtime_wheel, &l.profile_span) else { continue };
            let Some(p) = &w.profile else { continue };
            if !h.stack.profiles.contains_key(p) {
                let known: Vec<&str> = h.stack.profiles.keys().map(String::as_str).collect();
                diags.push(
                    l.file
                        .at(
                            span.clone(),
                            format!(
                                "`[runtime-wheel] profile` names `{p}`, which is no `[profile.<name>]` of {}",
                                h.stack.file
                            ),
                        )
                        .with_help(format!(
                            "profiles: {}",
                            if known.is_empty() { "none".to_string() } else { known.join(", ") }
                        )),
                );
            }
        }
        if super::is_native(recipes.values()) {
            for d in &h.override_diags {
                diags.push(d.clone());
            }
        }
    }
    if !diags.is_empty() {
        diags.sort();
        return Err(diags);
    }
    let h = header.expect("no diagnostics means the header parsed");
    Ok(Stack { recipes, ..h.stack })
}

/// Parses and lowers one recipe file; `None` if it is not UTF-8 TOML of a recipe's shape.
fn read_recipe<'a>(
    tree: &RecipeTree,
    stack: &str,
    rel: &str,
    bytes: &'a [u8],
    diags: &mut Diagnostics,
) -> Option<Lowered<'a>> {
    let file = FileText::decode(tree, rel, bytes, diags)?;
    let raw: RawRecipe = parse(&file, diags)?;
    Some(lower_recipe(tree, stack, rel, file, raw, diags))
}

/// Parses and lowers `recipes/<stack>/stack.toml`.
fn read_stack_header(tree: &RecipeTree, stack: &str, diags: &mut Diagnostics) -> Option<StackHeader> {
    let rel = format!("recipes/{stack}/stack.toml");
    let Some(bytes) = tree.get(&rel) else {
        diags.push(
            Diagnostic::file(&tree.display_path(&rel), format!("stack `{stack}` has no stack.toml")).with_help(
                "add one with [stack] name, rocm-version, summary and default-targets (see recipes/README.md)",
            ),
        );
        return None;
    };
    let file = FileText::decode(tree, &rel, bytes, diags)?;
    let raw: RawStackFile = parse(&file, diags)?;
    Some(lower_stack(&file, stack, raw.stack, raw.profile, diags))
}

/// Loads every stack of the tree (for `recipes check` and `recipes list`), with all problems.
pub fn load_all(tree: &RecipeTree) -> Result<Vec<Stack>, Diagnostics> {
    let mut diags = Diagnostics::default();
    let mut stacks = Vec::new();
    for name in tree.stack_names() {
        match load_stack(tree, &name) {
            Ok(s) => stacks.push(s),
            Err(d) => diags.extend(d),
        }
    }
    let defaults: Vec<&Stack> = stacks.iter().filter(|s| s.is_default).collect();
    if defaults.len() > 1 {
        for s in &defaults[1..] {
            let rel = format!("recipes/{}/stack.toml", s.name);
            diags.push(Diagnostic::file(
                &tree.display_path(&rel),
                format!(
                    "more than one stack says `default = true` ({})",
                    defaults.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    if diags.is_empty() {
        Ok(stacks)
    } else {
        diags.sort();
        Err(diags)
    }
}

/// Chooses the stack: `--stack NAME`, else the stack marked default, else the only one.
pub fn pick_stack(tree: &RecipeTree, wanted: Option<&str>) -> Result<Stack, StackError> {
    load_stack(tree, &choose_stack(tree, wanted)?).map_err(StackError::Invalid)
}

/// `pick_stack` for a tree that must be valid as a whole, as `recipes check` sees it: every
/// stack is loaded once and a problem anywhere is `StackError::Invalid`.
pub fn pick_valid_stack(tree: &RecipeTree, wanted: Option<&str>) -> Result<Stack, StackError> {
    let stacks = load_all(tree).map_err(StackError::Invalid)?;
    let name = choose_stack(tree, wanted)?;
    Ok(stacks.into_iter().find(|s| s.name == name).expect("load_all loads every stack of the tree"))
}

/// The name of the stack `pick_stack` loads.
fn choose_stack(tree: &RecipeTree, wanted: Option<&str>) -> Result<String, StackError> {
    let names = tree.stack_names();
    let tree_name = match &tree.origin {
        Origin::Embedded => "the embedded recipes".to_string(),
        Origin::Dir(p) => p.display().to_string(),
    };
    if let Some(w) = wanted {
        if !names.iter().any(|n| n == w) {
            let close = closest(w, names.iter().map(String::as_str));
            return Err(StackError::Unknown {
                name: w.to_string(),
                tree: tree_name,
                hint: close.first().map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default(),
                available: names.join(", "),
            });
        }
        return Ok(w.to_string());
    }
    if names.len() == 1 {
        return Ok(names[0].clone());
    }
    // Find the default by reading only the headers, so a broken other stack does not block.
    for n in &names {
        let mut d = Diagnostics::default();
        if read_stack_header(tree, n, &mut d).is_some_and(|h| h.stack.is_default) {
            return Ok(n.clone());
        }
    }
    Err(StackError::NoDefault { tree: tree_name, available: names.join(", ") })
}
