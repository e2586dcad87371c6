//! TOML -> typed stack, collecting every problem of the tree (syntax, unknown and missing fields,
//! bad ids, unknown dependencies, duplicates, cycles, missing patches) in one pass.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::*;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::recipe::tree::RecipeTree;
use crate::target::{GpuTarget, TargetSet};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStackFile {
    stack: RawStack,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawStack {
    name: Spanned<String>,
    rocm_version: String,
    summary: String,
    default_targets: Vec<Spanned<String>>,
    #[serde(default)]
    default: bool,
    python: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecipe {
    package: RawPackage,
    source: Option<Spanned<RawSource>>,
    #[serde(default)]
    patches: RawPatches,
    #[serde(default)]
    dependencies: RawDeps,
    build: RawBuild,
    #[serde(default)]
    targets: RawTargets,
    external: Option<RawExternal>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPackage {
    name: Spanned<String>,
    version: String,
    summary: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawSource {
    git: Option<Spanned<String>>,
    tag: Option<Spanned<String>>,
    rev: Option<Spanned<String>>,
    #[serde(default)]
    submodules: bool,
    url: Option<Spanned<String>>,
    sha256: Option<Spanned<String>>,
    strip_components: Option<u32>,
    from: Option<Spanned<String>>,
    subdir: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPatches {
    #[serde(default)]
    series: Vec<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDeps {
    #[serde(default)]
    build: Vec<Spanned<String>>,
    #[serde(default)]
    source: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawBuild {
    system: BuildSystem,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    steps: Vec<String>,
    memory_per_job_gb: Option<f64>,
    requirements: Option<Spanned<Vec<String>>>,
    install_wheels: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawTargets {
    gpu: Option<bool>,
    supported: Option<Vec<Spanned<String>>>,
    when_unsupported: Option<WhenUnsupported>,
    #[serde(default)]
    substitute: Vec<Spanned<String>>,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawExternal {
    cmake_package: Option<String>,
    #[serde(default)]
    files: Vec<String>,
}

/// Default memory a compile job of a recipe is assumed to need, when the recipe does not say.
pub const DEFAULT_MEMORY_PER_JOB_GB: f64 = 1.0;

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

/// One file's text plus where it is, for diagnostics.
struct Source<'a> {
    display: String,
    text: &'a str,
}

impl Source<'_> {
    fn at(&self, span: Range<usize>, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::at(&self.display, self.text, span, msg)
    }
}

fn toml_error(src: &Source<'_>, e: toml::de::Error) -> Diagnostic {
    let msg = e.message().trim_end().to_string();
    let help = if msg.starts_with("unknown field") {
        Some("see recipes/README.md for the fields a recipe may have".to_string())
    } else if msg.starts_with("missing field") {
        Some("add the field; see recipes/README.md".to_string())
    } else {
        None
    };
    let d = match e.span() {
        Some(span) => src.at(span, msg),
        None => Diagnostic::file(&src.display, msg),
    };
    match help {
        Some(h) => d.with_help(h),
        None => d,
    }
}

fn text_of<'a>(tree: &RecipeTree, rel: &str, bytes: &'a [u8], diags: &mut Diagnostics) -> Option<&'a str> {
    match std::str::from_utf8(bytes) {
        Ok(t) => Some(t),
        Err(e) => {
            diags.push(Diagnostic::file(&tree.display_path(rel), format!("not valid UTF-8 ({e})")));
            None
        }
    }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !s.starts_with('-')
}

/// Closest names to `wanted` among `names`, for "did you mean" hints.
pub fn closest<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(f64, &str)> = names
        .map(|n| (strsim::normalized_damerau_levenshtein(wanted, n), n))
        .filter(|(s, n)| *s >= 0.5 || n.contains(wanted) || wanted.contains(n))
        .collect();
    scored.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

fn parse_targets(src: &Source<'_>, list: &[Spanned<String>], diags: &mut Diagnostics) -> TargetSet {
    let mut out = Vec::new();
    for t in list {
        match GpuTarget::lookup(t.get_ref()) {
            Some(g) => out.push(g),
            None => diags.push(src.at(t.span(), format!("unknown GPU target `{}`", t.get_ref())).with_help(format!(
                "known targets: {}",
                GpuTarget::all().map(|g| g.name()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }
    TargetSet::from_targets(out)
}

struct Parsed {
    recipe: Recipe,
    name_span: Range<usize>,
    /// (dependency name, span) for the graph checks.
    deps: Vec<(String, Range<usize>)>,
    rel: String,
}

/// A prebuilt-wheel recipe is one verified `.whl` download, published as it is: its source must
/// be a `url` whose file name is a wheel filename (the index, pip and uv read the project,
/// version and tags from it), and nothing may change the file (no patches, no subdir).
///
/// The file name is what the source step will call the download ([`url_file_name`]) and the
/// filename grammar is the one the index reads ([`crate::wheel`]): both are pure functions, used
/// here so `recipes check` reports a bad URL at its line instead of a build failing after the
/// download.
fn check_prebuilt_wheel(src: &Source<'_>, raw: &RawRecipe, source: &SourceSpec, diags: &mut Diagnostics) {
    let url = raw.source.as_ref().and_then(|s| s.get_ref().url.as_ref());
    match (source, url) {
        (SourceSpec::Url { url: text, subdir, .. }, Some(url)) => {
            let file = url_file_name(text);
            if let Err(e) = crate::wheel::WheelName::parse(&file) {
                diags.push(src.at(url.span(), format!("a prebuilt-wheel source must be a wheel: {e}")).with_help(
                    "the last path segment of the URL, percent-decoded, is the wheel's file name \
                     (`.../torch-2.5.1%2Brocm6.2-cp311-cp311-linux_x86_64.whl` is `torch-2.5.1+rocm6.2-cp311-cp311-linux_x86_64.whl`)",
                ));
            }
            if subdir.is_some() {
                diags.push(
                    src.at(url.span(), "`subdir` does not apply to a prebuilt-wheel source (a single .whl file)"),
                );
            }
        }
        _ => {
            let d = match &raw.source {
                Some(s) => src.at(s.span(), "a prebuilt-wheel recipe takes its wheel from a `url` source"),
                None => Diagnostic::file(
                    &src.display,
                    "a prebuilt-wheel recipe needs a [source] with the wheel's `url` and `sha256`",
                ),
            };
            diags.push(d.with_help("add `[source] url = \"https://.../name-version-py3-none-any.whl\"` and `sha256 = \"...\"` (`sha256sum FILE`)"));
        }
    }
    if let Some(first) = raw.patches.series.first() {
        diags.push(
            src.at(
                first.span(),
                "a prebuilt-wheel recipe cannot have patches: the wheel is published byte for byte as downloaded",
            )
            .with_help("build it from source with a `python-wheel` recipe to patch it"),
        );
    }
}

fn parse_recipe(tree: &RecipeTree, stack: &str, rel: &str, text: &str, diags: &mut Diagnostics) -> Option<Parsed> {
    let src = Source { display: tree.display_path(rel), text };
    let raw: RawRecipe = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            diags.push(toml_error(&src, e));
            return None;
        }
    };
    let before = diags.len();
    let name = raw.package.name.get_ref().clone();
    let file_stem = rel.rsplit('/').next().unwrap_or(rel).trim_end_matches(".toml");
    if !valid_name(&name) {
        diags.push(
            src.at(raw.package.name.span(), format!("recipe name `{name}` must be lowercase letters, digits and `-`")),
        );
    } else if name != file_stem {
        diags.push(
            src.at(
                raw.package.name.span(),
                format!("recipe name `{name}` does not match its file name `{file_stem}.toml`"),
            )
            .with_help(format!("rename the file to `{name}.toml` or the package to `{file_stem}`")),
        );
    }

    let mut source_deps: Vec<(String, Range<usize>)> =
        raw.dependencies.source.iter().map(|d| (d.get_ref().clone(), d.span())).collect();
    let source = match &raw.source {
        None => SourceSpec::None,
        Some(s) => {
            let span = s.span();
            let s = s.get_ref();
            let kinds = [s.git.is_some(), s.url.is_some(), s.from.is_some()].iter().filter(|k| **k).count();
            if kinds == 0 {
                diags.push(
                    src.at(span.clone(), "source has neither `git` nor `url` (nor `from`)")
                        .with_help("add `git = \"https://...\"` with `rev`, or `url = \"https://...\"` with `sha256`; remove [source] if the recipe needs none"),
                );
                SourceSpec::None
            } else if kinds > 1 {
                diags.push(src.at(span, "source has more than one of `git`, `url` and `from`: keep one"));
                SourceSpec::None
            } else if let Some(git) = &s.git {
                for (field, present) in
                    [("sha256", s.sha256.is_some()), ("strip-components", s.strip_components.is_some())]
                {
                    if present {
                        diags.push(src.at(git.span(), format!("`{field}` belongs to `url` sources, not `git`")));
                    }
                }
                if let Some(rev) = &s.rev {
                    if !is_hex(rev.get_ref(), 40) {
                        diags.push(
                            src.at(rev.span(), format!("`rev` must be a full 40-character lowercase hex commit id, got `{}`", rev.get_ref()))
                                .with_help("write the commit the tag points at (`git rev-parse TAG^{commit}`), or remove `rev` to leave the recipe unlocked for `rocmforge lock`"),
                        );
                    }
                } else if s.tag.is_none() {
                    diags.push(
                        src.at(git.span(), "git source has neither `rev` nor `tag`")
                            .with_help("pin it: add `tag` and its 40-hex `rev`"),
                    );
                }
                SourceSpec::Git {
                    url: git.get_ref().clone(),
                    tag: s.tag.as_ref().map(|t| t.get_ref().clone()),
                    rev: s.rev.as_ref().map(|r| r.get_ref().clone()),
                    submodules: s.submodules,
                    subdir: s.subdir.clone(),
                }
            } else if let Some(url) = &s.url {
                for (field, present) in [("tag", s.tag.is_some()), ("rev", s.rev.is_some())] {
                    if present {
                        diags.push(src.at(url.span(), format!("`{field}` belongs to `git` sources, not `url`")));
                    }
                }
                let sha = match &s.sha256 {
                    Some(h) if is_hex(h.get_ref(), 64) => h.get_ref().clone(),
                    Some(h) => {
                        diags.push(
                            src.at(
                                h.span(),
                                format!("`sha256` must be 64 lowercase hex characters, got `{}`", h.get_ref()),
                            )
                            .with_help("compute it with `sha256sum FILE`"),
                        );
                        String::new()
                    }
                    None => {
                        diags.push(
                            src.at(url.span(), "url source has no `sha256`")
                                .with_help("add `sha256 = \"...\"` (`sha256sum FILE`): downloads are always verified"),
                        );
                        String::new()
                    }
                };
                SourceSpec::Url {
                    url: url.get_ref().clone(),
                    sha256: sha,
                    strip_components: s.strip_components.unwrap_or(1),
                    subdir: s.subdir.clone(),
                }
            } else {
                let from = s.from.as_ref().expect("one kind is set");
                source_deps.push((from.get_ref().clone(), from.span()));
                SourceSpec::From { recipe: from.get_ref().clone(), subdir: s.subdir.clone() }
            }
        }
    };

    let mut patches = Vec::new();
    for p in &raw.patches.series {
        let path = format!("patches/{stack}/{name}/{}", p.get_ref());
        if p.get_ref().contains('/') || p.get_ref().contains("..") {
            diags.push(src.at(
                p.span(),
                format!("patch `{}` must be a plain file name inside patches/{stack}/{name}/", p.get_ref()),
            ));
        } else if !tree.contains(&path) {
            diags.push(
                src.at(p.span(), format!("patch `{}` does not exist", p.get_ref()))
                    .with_help(format!("expected it at {}", tree.display_path(&path))),
            );
        }
        patches.push(PatchRef { name: p.get_ref().clone(), path });
    }

    if raw.build.system == BuildSystem::PrebuiltWheel {
        check_prebuilt_wheel(&src, &raw, &source, diags);
    }

    let gpu = raw.targets.gpu.unwrap_or(true);
    let supported = raw.targets.supported.as_ref().map(|l| parse_targets(&src, l, diags));
    let substitute = parse_targets(&src, &raw.targets.substitute, diags);
    let when_unsupported = raw.targets.when_unsupported.unwrap_or(WhenUnsupported::Error);
    if when_unsupported == WhenUnsupported::Substitute && substitute.is_empty() {
        diags.push(Diagnostic::file(
            &src.display,
            "`when-unsupported = \"substitute\"` needs a non-empty `substitute` target list",
        ));
    }
    if let Some(mem) = raw.build.memory_per_job_gb {
        if !(mem > 0.0 && mem < 1024.0) {
            diags.push(Diagnostic::file(
                &src.display,
                format!("`memory-per-job-gb` must be between 0 and 1024, got {mem}"),
            ));
        }
    }

    if let Some(reqs) = &raw.build.requirements {
        if matches!(raw.build.system, BuildSystem::SourceOnly | BuildSystem::PrebuiltWheel) {
            diags.push(
                src.at(
                    reqs.span(),
                    format!(
                        "`requirements` are installed into a build venv, and a `{}` recipe builds nothing",
                        raw.build.system.as_str()
                    ),
                )
                .with_help(
                    "remove `requirements`, or give the recipe a build system that runs (python-wheel, cmake, script)",
                ),
            );
        }
    }
    let mut install_wheels = Vec::new();
    if let Some(list) = &raw.build.install_wheels {
        if raw.build.system != BuildSystem::PythonWheel {
            diags.push(
                src.at(
                    list.span(),
                    format!(
                        "`install-wheels` is for python-wheel recipes; this one is `{}`",
                        raw.build.system.as_str()
                    ),
                )
                .with_help("remove it, or build this recipe with `system = \"python-wheel\"`"),
            );
        } else if raw.dependencies.build.is_empty() && !list.get_ref().is_empty() {
            diags.push(
                src.at(
                    list.span(),
                    "`install-wheels` installs wheels built by the recipe's build dependencies, but it has none",
                )
                .with_help("add the recipe that builds these wheels to `[dependencies] build`"),
            );
        }
        for w in list.get_ref() {
            if !crate::wheel::is_valid_project_name(w.get_ref()) {
                diags.push(
                    src.at(w.span(), format!("`{}` is not a Python project name", w.get_ref()))
                        .with_help("`install-wheels` takes project names only (`torch`): the version is the one the dependency built; version pins belong in `requirements`"),
                );
            } else if install_wheels.contains(w.get_ref()) {
                diags.push(src.at(w.span(), format!("`{}` is listed twice in `install-wheels`", w.get_ref())));
            } else {
                install_wheels.push(w.get_ref().clone());
            }
        }
    }

    let canonical =
        toml::from_str::<toml::Value>(text).map(|v| serde_json::to_string(&v).unwrap_or_default()).unwrap_or_default();

    let deps: Vec<(String, Range<usize>)> = raw
        .dependencies
        .build
        .iter()
        .map(|d| (d.get_ref().clone(), d.span()))
        .chain(source_deps.iter().cloned())
        .collect();
    let mut source_dep_names: Vec<String> = Vec::new();
    for (n, _) in &source_deps {
        if !source_dep_names.contains(n) {
            source_dep_names.push(n.clone());
        }
    }

    let recipe = Recipe {
        name,
        version: raw.package.version,
        summary: raw.package.summary,
        file: rel.to_string(),
        source,
        patches,
        build_deps: raw.dependencies.build.iter().map(|d| d.get_ref().clone()).collect(),
        source_deps: source_dep_names,
        build: BuildSpec {
            system: raw.build.system,
            args: raw.build.args,
            env: raw.build.env,
            steps: raw.build.steps,
            memory_per_job_gb: raw.build.memory_per_job_gb.unwrap_or(DEFAULT_MEMORY_PER_JOB_GB),
            requirements: raw.build.requirements.map(Spanned::into_inner).unwrap_or_default(),
            install_wheels,
        },
        targets: TargetPolicy { gpu, supported, when_unsupported, substitute, reason: raw.targets.reason },
        external: raw.external.map(|e| ExternalSpec { cmake_package: e.cmake_package, files: e.files }),
        canonical,
    };
    let _ = before;
    Some(Parsed { recipe, name_span: raw.package.name.span(), deps, rel: rel.to_string() })
}

struct StackHeader {
    name: String,
    rocm_version: String,
    summary: String,
    default_targets: TargetSet,
    is_default: bool,
    python: Option<String>,
}

fn parse_stack_header(tree: &RecipeTree, stack: &str, diags: &mut Diagnostics) -> Option<StackHeader> {
    let rel = format!("recipes/{stack}/stack.toml");
    let Some(bytes) = tree.get(&rel) else {
        diags.push(
            Diagnostic::file(&tree.display_path(&rel), format!("stack `{stack}` has no stack.toml")).with_help(
                "add one with [stack] name, rocm-version, summary and default-targets (see recipes/README.md)",
            ),
        );
        return None;
    };
    let text = text_of(tree, &rel, bytes, diags)?;
    let src = Source { display: tree.display_path(&rel), text };
    let raw: RawStackFile = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            diags.push(toml_error(&src, e));
            return None;
        }
    };
    let s = raw.stack;
    if s.name.get_ref() != stack {
        diags.push(src.at(
            s.name.span(),
            format!("stack name `{}` does not match its folder `recipes/{stack}/`", s.name.get_ref()),
        ));
    }
    let default_targets = parse_targets(&src, &s.default_targets, diags);
    Some(StackHeader {
        name: stack.to_string(),
        rocm_version: s.rocm_version,
        summary: s.summary,
        default_targets,
        is_default: s.default,
        python: s.python,
    })
}

/// Loads and validates one stack; every problem is reported, not only the first.
pub fn load_stack(tree: &RecipeTree, stack: &str) -> Result<Stack, Diagnostics> {
    let mut diags = Diagnostics::default();
    let header = parse_stack_header(tree, stack, &mut diags);

    let mut parsed: Vec<Parsed> = Vec::new();
    // Files that failed to parse still name a recipe: no follow-on "does not exist" errors.
    let mut unparsed: BTreeSet<String> = BTreeSet::new();
    for (rel, bytes) in tree.stack_files(stack) {
        if rel.ends_with("/stack.toml") {
            continue;
        }
        let stem = rel.rsplit('/').next().unwrap_or(rel).trim_end_matches(".toml").to_string();
        let Some(text) = text_of(tree, rel, bytes, &mut diags) else {
            unparsed.insert(stem);
            continue;
        };
        match parse_recipe(tree, stack, rel, text, &mut diags) {
            Some(p) => parsed.push(p),
            None => {
                unparsed.insert(stem);
            }
        }
    }

    // Names: duplicates.
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    let mut keep = vec![true; parsed.len()];
    for (i, p) in parsed.iter().enumerate() {
        if let Some(&first) = by_name.get(&p.recipe.name) {
            let text = std::str::from_utf8(tree.get(&p.rel).unwrap_or_default()).unwrap_or("");
            diags.push(
                Diagnostic::at(
                    &tree.display_path(&p.rel),
                    text,
                    p.name_span.clone(),
                    format!("duplicate recipe name `{}`", p.recipe.name),
                )
                .with_help(format!("also defined in {}", tree.display_path(&parsed[first].rel))),
            );
            keep[i] = false;
        } else {
            by_name.insert(p.recipe.name.clone(), i);
        }
    }
    let names: BTreeSet<&str> = by_name.keys().map(String::as_str).chain(unparsed.iter().map(String::as_str)).collect();

    // Dependencies that do not exist.
    for (i, p) in parsed.iter().enumerate() {
        if !keep[i] {
            continue;
        }
        let text = std::str::from_utf8(tree.get(&p.rel).unwrap_or_default()).unwrap_or("");
        for (dep, span) in &p.deps {
            if dep == &p.recipe.name {
                diags.push(Diagnostic::at(
                    &tree.display_path(&p.rel),
                    text,
                    span.clone(),
                    format!("recipe `{dep}` depends on itself"),
                ));
            } else if !names.contains(dep.as_str()) {
                let close = closest(dep, names.iter().copied());
                let d = Diagnostic::at(
                    &tree.display_path(&p.rel),
                    text,
                    span.clone(),
                    format!("dependency `{dep}` does not exist in stack `{stack}`"),
                );
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

    // Source dependencies and `from` must point at source-only recipes.
    for (i, p) in parsed.iter().enumerate() {
        if !keep[i] {
            continue;
        }
        let text = std::str::from_utf8(tree.get(&p.rel).unwrap_or_default()).unwrap_or("");
        for dep in &p.recipe.source_deps {
            if let Some(&j) = by_name.get(dep) {
                if !parsed[j].recipe.is_source_only() {
                    let span = p.deps.iter().find(|(n, _)| n == dep).map(|(_, s)| s.clone()).unwrap_or(0..0);
                    diags.push(
                        Diagnostic::at(
                            &tree.display_path(&p.rel),
                            text,
                            span,
                            format!("`{dep}` is used as a source tree but is not a source-only recipe"),
                        )
                        .with_help(format!(
                            "set `[build] system = \"source-only\"` in {}",
                            tree.display_path(&parsed[j].rel)
                        )),
                    );
                }
            }
        }
    }

    // Cycles.
    let recipes: BTreeMap<String, Recipe> =
        parsed.iter().zip(&keep).filter(|(_, k)| **k).map(|(p, _)| (p.recipe.name.clone(), p.recipe.clone())).collect();
    for cycle in find_cycles(&recipes) {
        let first = &cycle[0];
        let next = &cycle[1];
        let p = &parsed[by_name[first]];
        let text = std::str::from_utf8(tree.get(&p.rel).unwrap_or_default()).unwrap_or("");
        let span = p.deps.iter().find(|(n, _)| n == next).map(|(_, s)| s.clone()).unwrap_or(0..0);
        diags.push(
            Diagnostic::at(&tree.display_path(&p.rel), text, span, format!("dependency cycle: {}", cycle.join(" -> ")))
                .with_help("a recipe cannot need itself, directly or through others: remove one of these edges"),
        );
    }

    if !diags.is_empty() {
        diags.sort();
        return Err(diags);
    }
    let h = header.expect("no diagnostics means the header parsed");
    Ok(Stack {
        name: h.name,
        rocm_version: h.rocm_version,
        summary: h.summary,
        default_targets: h.default_targets,
        is_default: h.is_default,
        python: h.python,
        recipes,
    })
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
        return load_stack(tree, w).map_err(StackError::Invalid);
    }
    if names.len() == 1 {
        return load_stack(tree, &names[0]).map_err(StackError::Invalid);
    }
    // Find the default by reading only the headers, so a broken other stack does not block.
    for n in &names {
        let mut d = Diagnostics::default();
        if parse_stack_header(tree, n, &mut d).is_some_and(|h| h.is_default) {
            return load_stack(tree, n).map_err(StackError::Invalid);
        }
    }
    Err(StackError::NoDefault { tree: tree_name, available: names.join(", ") })
}
