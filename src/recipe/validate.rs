//! The checks across the recipes of one stack, once each is lowered: duplicate names,
//! dependencies that do not exist, source trees that are not source-only recipes, cycles, and
//! `{prefix}/<path>` written for a file a dependency may bring from an installation.

use std::collections::{BTreeMap, BTreeSet};

use super::cycles::find_cycles;
use super::lower::Lowered;
use super::Recipe;
use crate::diagnostic::Diagnostics;

/// Closest names to `wanted` among `names`, for "did you mean" hints.
pub fn closest<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(f64, &str)> = names
        .map(|n| (strsim::normalized_damerau_levenshtein(wanted, n), n))
        .filter(|(s, n)| *s >= 0.5 || n.contains(wanted) || wanted.contains(n))
        .collect();
    scored.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

/// Checks the lowered recipes of `stack` against each other and returns the recipes of the stack
/// (the first of each name). `unparsed`: names of recipe files that did not parse, which still
/// count as existing (no follow-on "does not exist" errors).
pub(super) fn check_stack(
    stack: &str,
    lowered: &[Lowered<'_>],
    unparsed: &BTreeSet<String>,
    diags: &mut Diagnostics,
) -> BTreeMap<String, Recipe> {
    let kept = unique_names(lowered, diags);
    let by_name: BTreeMap<&str, &Lowered<'_>> = kept.iter().map(|l| (l.recipe.name.as_str(), *l)).collect();
    let names: BTreeSet<&str> = by_name.keys().copied().chain(unparsed.iter().map(String::as_str)).collect();
    for l in &kept {
        check_deps_exist(stack, l, &names, diags);
    }
    for l in &kept {
        check_source_trees(l, &by_name, diags);
        check_prefix_paths(l, &by_name, diags);
    }
    let recipes: BTreeMap<String, Recipe> = kept.iter().map(|l| (l.recipe.name.clone(), l.recipe.clone())).collect();
    check_cycles(&recipes, &by_name, diags);
    recipes
}

/// The recipes whose name no earlier file took; each later one is a duplicate.
fn unique_names<'l, 'a>(lowered: &'l [Lowered<'a>], diags: &mut Diagnostics) -> Vec<&'l Lowered<'a>> {
    let mut first: BTreeMap<&str, &Lowered<'_>> = BTreeMap::new();
    let mut kept = Vec::new();
    for l in lowered {
        match first.get(l.recipe.name.as_str()) {
            Some(earlier) => diags.push(
                l.file
                    .at(l.name_span.clone(), format!("duplicate recipe name `{}`", l.recipe.name))
                    .with_help(format!("also defined in {}", earlier.file.display)),
            ),
            None => {
                first.insert(&l.recipe.name, l);
                kept.push(l);
            }
        }
    }
    kept
}

/// Every dependency names another recipe of the stack.
fn check_deps_exist(stack: &str, l: &Lowered<'_>, names: &BTreeSet<&str>, diags: &mut Diagnostics) {
    for (dep, span) in &l.deps {
        if dep == &l.recipe.name {
            diags.push(l.file.at(span.clone(), format!("recipe `{dep}` depends on itself")));
        } else if !names.contains(dep.as_str()) {
            let close = closest(dep, names.iter().copied());
            let d = l.file.at(span.clone(), format!("dependency `{dep}` does not exist in stack `{stack}`"));
            diags.push(if close.is_empty() {
                d.with_help(format!("add recipes/{stack}/{dep}.toml or remove the dependency"))
            } else {
                d.with_help(format!(
                    "did you mean {}?",
                    close.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
                ))
            });
        }
    }
}

/// Source dependencies and `from` point at source-only recipes.
fn check_source_trees(l: &Lowered<'_>, by_name: &BTreeMap<&str, &Lowered<'_>>, diags: &mut Diagnostics) {
    for dep in &l.recipe.source_deps {
        let Some(tree) = by_name.get(dep.as_str()) else { continue };
        if !tree.recipe.is_source_only() {
            diags.push(
                l.file
                    .at(span_of(l, dep), format!("`{dep}` is used as a source tree but is not a source-only recipe"))
                    .with_help(format!("set `[build] system = \"source-only\"` in {}", tree.file.display)),
            );
        }
    }
}

/// `{prefix}/<path>` in an arg, env value or step, where `<path>` is (or holds) a file a build
/// dependency's `[external]` names: that dependency may be taken from an installation, and its
/// files then lie there, not in the prefix (clr's `-DHIPCC_BIN_DIR={prefix}/bin` found no hipconfig
/// with hipcc taken from /usr). `{root:<dep>}` is where they lie either way.
fn check_prefix_paths(l: &Lowered<'_>, by_name: &BTreeMap<&str, &Lowered<'_>>, diags: &mut Diagnostics) {
    let b = &l.recipe.build;
    let texts =
        b.args.iter().chain(b.env.values()).chain(&b.steps).chain(l.recipe.checks.iter().flat_map(|c| &c.steps));
    let mut seen = BTreeSet::new();
    for text in texts {
        for (at, _) in text.match_indices("{prefix}/") {
            let rest = &text[at + "{prefix}/".len()..];
            let path = rest[..rest.find(|c: char| c.is_whitespace() || "'\";:,)=".contains(c)).unwrap_or(rest.len())]
                .trim_end_matches('/');
            for dep in &l.recipe.build_deps {
                let Some(ext) = by_name.get(dep.as_str()).and_then(|d| d.recipe.external.as_ref()) else { continue };
                let Some(file) = ext.files.iter().find(|f| *f == path || f.starts_with(&format!("{path}/"))) else {
                    continue;
                };
                if path.is_empty() || !seen.insert((path.to_string(), dep.clone())) {
                    continue;
                }
                let written = format!("{{prefix}}/{path}");
                let span = code_span(l.file.text, &written);
                diags.push(
                    l.file
                        .at(span, format!(
                            "`{written}` is where `{dep}` puts `{file}` only when it is built: taken from an installation ([external] of `{dep}`), it lies there"
                        ))
                        .with_help(format!("write `{{root:{dep}}}/{path}`: the prefix or the installation, wherever `{dep}` comes from")),
                );
            }
        }
    }
}

/// Where `needle` first occurs outside a comment line of `text` (else the whole file's start).
fn code_span(text: &str, needle: &str) -> std::ops::Range<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if !line.trim_start().starts_with('#') {
            if let Some(i) = line.find(needle) {
                return offset + i..offset + i + needle.len();
            }
        }
        offset += line.len();
    }
    0..0
}

/// Each cycle, reported at its first edge.
fn check_cycles(recipes: &BTreeMap<String, Recipe>, by_name: &BTreeMap<&str, &Lowered<'_>>, diags: &mut Diagnostics) {
    for cycle in find_cycles(recipes) {
        let l = by_name[cycle[0].as_str()];
        diags.push(
            l.file
                .at(span_of(l, &cycle[1]), format!("dependency cycle: {}", cycle.join(" -> ")))
                .with_help("a recipe cannot need itself, directly or through others: remove one of these edges"),
        );
    }
}

/// Where `l` first names the dependency `dep`.
fn span_of(l: &Lowered<'_>, dep: &str) -> std::ops::Range<usize> {
    l.deps.iter().find(|(n, _)| n == dep).map(|(_, s)| s.clone()).unwrap_or(0..0)
}
