//! Stage 1: a parsed file ([`super::raw`]) lowered to the typed model, with a diagnostic for every
//! problem one file can have on its own (ids, source kinds, patches, targets, build options).
//! What needs the whole stack (names, dependencies, cycles) is checked by [`super::validate`].

use std::ops::Range;

use toml::Spanned;

use std::collections::BTreeMap;

use super::raw::{FileText, RawBuild, RawProfile, RawRecipe, RawSource, RawStack, RawTargets};
use super::tree::RecipeTree;
use super::{
    url_file_name, BuildSpec, BuildSystem, Estimate, ExternalSpec, PatchRef, PinFrom, Profile, Recipe, SourceSpec,
    Stack, TargetPolicy, WhenUnsupported, GFX_OVERRIDE_VAR,
};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::target::{GpuTarget, TargetSet};

/// Default memory a compile job of a recipe is assumed to need, when the recipe does not say.
pub const DEFAULT_MEMORY_PER_JOB_GB: f64 = 1.0;

/// A recipe lowered from its file, with what the stack-wide checks need to point at.
pub(super) struct Lowered<'a> {
    pub recipe: Recipe,
    pub file: FileText<'a>,
    pub name_span: Range<usize>,
    /// (dependency name, span) of every build and source dependency, for the graph checks.
    pub deps: Vec<(String, Range<usize>)>,
    /// Where `[runtime-wheel] profile` names a profile (checked against the stack's).
    pub profile_span: Option<Range<usize>>,
}

/// A stack's `stack.toml`, lowered: the stack without its recipes, and one diagnostic per
/// profile that sets the GPU override (an error if the stack turns out native).
pub(super) struct StackHeader {
    pub stack: Stack,
    pub override_diags: Vec<Diagnostic>,
}

pub(super) fn lower_stack(
    file: &FileText<'_>,
    stack: &str,
    raw: RawStack,
    raw_profiles: BTreeMap<String, toml::Spanned<RawProfile>>,
    diags: &mut Diagnostics,
) -> StackHeader {
    check_stack_name(file, stack, &raw.name, diags);
    let (default_targets, supported_targets) = lower_stack_targets(file, &raw, diags);
    let mut override_diags = Vec::new();
    let mut profiles = BTreeMap::new();
    for (name, p) in raw_profiles {
        let profile = lower_profile(file, &name, p, &mut override_diags, diags);
        profiles.insert(name, profile);
    }
    let default_profile = lower_default_profile(file, raw.default_profile, &profiles, diags);
    let venv_constraints = lower_venv_constraints(file, &raw.venv_constraints, diags);
    let venv_skip = lower_venv_skip(file, &raw.venv_skip, raw.python.is_some(), diags);
    let index_path = raw.index_path.and_then(|p| lower_index_path(file, p, diags));
    let glibc = lower_glibc(file, raw.glibc.as_ref(), diags);
    let stack = Stack {
        name: stack.to_string(),
        glibc,
        rocm_version: raw.rocm_version,
        summary: raw.summary,
        default_targets,
        supported_targets,
        is_default: raw.default,
        python: raw.python,
        venv_constraints,
        venv_skip,
        profiles,
        default_profile,
        index_path,
        file: file.display.clone(),
        disk_gb: raw.disk_gb,
        system_libraries: lower_system_libraries(file, &raw.system_libraries, diags),
        recipes: BTreeMap::new(),
    };
    StackHeader { stack, override_diags }
}

/// `[stack] name` is the stack's folder's name.
fn check_stack_name(file: &FileText<'_>, stack: &str, name: &Spanned<String>, diags: &mut Diagnostics) {
    if name.get_ref() != stack {
        diags.push(
            file.at(
                name.span(),
                format!("stack name `{}` does not match its folder `recipes/{stack}/`", name.get_ref()),
            ),
        );
    }
}

/// `default-targets` (never empty) and `supported-targets` (never empty when given, and holding
/// every default target).
fn lower_stack_targets(file: &FileText<'_>, raw: &RawStack, diags: &mut Diagnostics) -> (TargetSet, Option<TargetSet>) {
    let default_targets = lower_targets(file, raw.default_targets.get_ref(), diags);
    if raw.default_targets.get_ref().is_empty() {
        diags.push(
            file.at(
                raw.default_targets.span(),
                "`default-targets` is empty: a build without --target would build for no GPU",
            )
            .with_help("list the GPU targets the stack is for when the host's card cannot be read (`[\"gfx1010\"]`)"),
        );
    }
    let supported_targets = raw.supported_targets.as_ref().map(|list| {
        let set = lower_targets(file, list.get_ref(), diags);
        if list.get_ref().is_empty() {
            diags.push(
                file.at(list.span(), "`supported-targets` is empty: the stack would serve no GPU")
                    .with_help("list the targets its device code exists for, or remove the line (any target)"),
            );
        } else if let Some(t) = default_targets.iter().find(|t| !set.contains(*t)) {
            diags.push(file.at(
                raw.default_targets.span(),
                format!("`default-targets` names {t}, which is not among `supported-targets` ({})", set.comma_list()),
            ));
        }
        set
    });
    (default_targets, supported_targets)
}

/// `default-profile`: one of the stack's profiles; may be left out only when there is at most one.
fn lower_default_profile(
    file: &FileText<'_>,
    raw: Option<Spanned<String>>,
    profiles: &BTreeMap<String, Profile>,
    diags: &mut Diagnostics,
) -> Option<String> {
    match raw {
        Some(d) if !profiles.contains_key(d.get_ref()) => {
            diags.push(
                file.at(
                    d.span(),
                    format!("`default-profile` names `{}`, which is no `[profile.<name>]` here", d.get_ref()),
                )
                .with_help(format!(
                    "profiles: {}",
                    if profiles.is_empty() {
                        "none".to_string()
                    } else {
                        profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                    }
                )),
            );
            None
        }
        Some(d) => Some(d.into_inner()),
        None if profiles.len() == 1 => profiles.keys().next().cloned(),
        None if profiles.is_empty() => None,
        None => {
            diags.push(file.whole("the stack has several profiles but no `default-profile`").with_help(
                "add `default-profile = \"<name>\"` to [stack]: `env` and `verify` use it when no --profile is given",
            ));
            None
        }
    }
}

/// `venv-constraints`: one requirement per string, as pip's `-c` file takes it.
fn lower_venv_constraints(file: &FileText<'_>, raw: &[Spanned<String>], diags: &mut Diagnostics) -> Vec<String> {
    let mut venv_constraints = Vec::new();
    for c in raw {
        let text = c.get_ref().trim();
        let starts_with_name = text.chars().next().is_some_and(|ch| ch.is_ascii_alphanumeric());
        if !starts_with_name || text.contains(['\n', ' ']) && !text.contains(';') {
            diags.push(
                file.at(c.span(), format!("`{}` is not a requirement constraint", c.get_ref()))
                    .with_help("write one requirement per string, as pip's `-c` file takes it: `numpy<2`"),
            );
        } else {
            venv_constraints.push(text.to_string());
        }
    }
    venv_constraints
}

/// `venv-skip`: project names, normalised; only where the stack has a venv (names a `python`).
fn lower_venv_skip(
    file: &FileText<'_>,
    raw: &[Spanned<String>],
    has_python: bool,
    diags: &mut Diagnostics,
) -> Vec<String> {
    let mut venv_skip = Vec::new();
    for p in raw {
        if crate::wheel::is_valid_project_name(p.get_ref()) {
            venv_skip.push(crate::wheel::normalize_name(p.get_ref()));
        } else {
            diags.push(
                file.at(p.span(), format!("`venv-skip` names projects, and `{}` is not a project name", p.get_ref()))
                    .with_help(
                        "write the project as its wheels' Requires-Dist names it, without extras or versions: `rocm`",
                    ),
            );
        }
    }
    if let (Some(first), false) = (raw.first(), has_python) {
        diags.push(
            file.at(
                first.span(),
                "`venv-skip` is set, but the stack names no `python`, so it has no venv to skip anything in",
            )
            .with_help("add `python = \"3.N\"` to [stack], or remove `venv-skip`"),
        );
    }
    venv_skip
}

/// `index-path`: one folder name, not one the index directory's top already uses.
fn lower_index_path(file: &FileText<'_>, p: Spanned<String>, diags: &mut Diagnostics) -> Option<String> {
    let name = p.get_ref();
    let ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.']);
    if ok && super::INDEX_TOP_LEVEL_NAMES.contains(&name.as_str()) {
        diags.push(
            file.at(p.span(), format!("`index-path` `{name}` is a name the index directory's top already uses"))
                .with_help(format!(
                    "the default index keeps {} there: name the stack's own folder otherwise (e.g. its stack name)",
                    super::INDEX_TOP_LEVEL_NAMES.map(|n| format!("`{n}`")).join(" and ")
                )),
        );
        None
    } else if ok {
        Some(p.into_inner())
    } else {
        diags.push(file.at(
            p.span(),
            format!(
                "`index-path` must be one folder name of lowercase letters, digits, `.` and `-`, got `{}`",
                p.get_ref()
            ),
        ));
        None
    }
}

/// `glibc`: a version `2.N`, 2.17 when the stack does not say.
fn lower_glibc(file: &FileText<'_>, raw: Option<&Spanned<String>>, diags: &mut Diagnostics) -> String {
    match raw {
        Some(g) if crate::wheel::select::parse_glibc(g.get_ref()).is_some() => g.get_ref().trim().to_string(),
        Some(g) => {
            diags.push(
                file.at(g.span(), format!("`glibc` must be a glibc version `2.N`, got `{}`", g.get_ref()))
                    .with_help("the oldest glibc the stack's hosts have (`ldd --version`): `glibc = \"2.28\"`"),
            );
            "2.17".to_string()
        }
        None => "2.17".to_string(),
    }
}

/// `[profile.<name>]`: environment variable names (never `verify`'s CPU-mode switch), case ids of
/// `verify`'s matrix (checked there: the matrix is not the recipe layer's) in their spelling.
fn lower_profile(
    file: &FileText<'_>,
    name: &str,
    raw: toml::Spanned<RawProfile>,
    override_diags: &mut Vec<Diagnostic>,
    diags: &mut Diagnostics,
) -> Profile {
    let span = raw.span();
    let raw = raw.into_inner();
    if !valid_name(name) {
        diags.push(file.at(span.clone(), format!("profile name `{name}` must be lowercase letters, digits and `-`")));
    }
    let mut env = BTreeMap::new();
    for (k, v) in raw.env {
        let var = k.get_ref();
        if !super::is_env_name(var) {
            diags.push(file.at(k.span(), format!("`{var}` is not an environment variable name")));
        }
        if var == super::VERIFY_DEVICE_VAR {
            diags.push(
                file.at(k.span(), format!("profile `{name}` sets `{var}`, which only the caller's environment may set"))
                    .with_help("CPU mode tests the case programs, not a GPU: run `ROCMFORGE_VERIFY_DEVICE=cpu rocmforge verify` (ci/verify-cpu.sh) by hand"),
            );
        }
        if var == GFX_OVERRIDE_VAR {
            override_diags.push(
                file.at(k.span(), format!("profile `{name}` sets `{GFX_OVERRIDE_VAR}`, but this stack is built natively"))
                    .with_help("a native build carries code for its own GPU; the override makes the runtime load another GPU's code (only binary fallback stacks of prebuilt wheels may set it)"),
            );
        }
        let unknown: Vec<&str> =
            v.match_indices('{').map(|(i, _)| &v[i..]).filter(|rest| !rest.starts_with(super::PROFILE_VENV)).collect();
        if !unknown.is_empty() {
            diags.push(
                file.at(
                    k.span(),
                    format!(
                        "profile `{name}` sets `{var}` = `{v}`: only `{}` may be placed in a value",
                        super::PROFILE_VENV
                    ),
                )
                .with_help(
                    "`{venv}` is the stack's venv (a file there lives as long as the venv); write other paths out",
                ),
            );
        }
        env.insert(var.clone(), v);
    }
    let known_hangs = case_ids(file, "known-hangs", &raw.known_hangs, &[], diags);
    let mut known_failure_reasons = BTreeMap::new();
    let mut failure_ids = Vec::new();
    for f in &raw.known_failures {
        let (id, because) = match f.get_ref() {
            super::raw::RawKnownFailure::Id(id) => (id.clone(), None),
            super::raw::RawKnownFailure::Because { case, because } => (case.clone(), Some(because.clone())),
        };
        if let Some(b) = because {
            if b.trim().is_empty() {
                diags.push(file.at(f.span(), format!("known failure `{id}`: `because` is empty")).with_help(
                    "write the text the case's message must hold (e.g. `no Triton installed`), or list the bare case id",
                ));
            }
            known_failure_reasons.insert(id.clone(), b);
        }
        failure_ids.push(toml::Spanned::new(f.span(), id));
    }
    let known_failures = case_ids(file, "known-failures", &failure_ids, &known_hangs, diags);
    let case_at =
        raw.known_hangs.iter().chain(&failure_ids).map(|id| (id.get_ref().clone(), file.at(id.span(), ""))).collect();
    Profile {
        name: name.to_string(),
        description: raw.description,
        env,
        known: super::KnownCases {
            hangs: known_hangs,
            failures: known_failures,
            failure_reasons: known_failure_reasons,
        },
        case_at,
    }
}

/// A profile's list `field` of verify case ids, each once and in no `other` list.
fn case_ids(
    file: &FileText<'_>,
    field: &str,
    raw: &[toml::Spanned<String>],
    other: &[String],
    diags: &mut Diagnostics,
) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for h in raw {
        let id = h.get_ref();
        if !valid_name(id) {
            diags.push(
                file.at(h.span(), format!("`{id}` is not a verify case id"))
                    .with_help("case ids look like `conv-16-32-s48-k3-b1`: see `rocmforge verify --list`"),
            );
        } else if ids.contains(id) {
            diags.push(file.at(h.span(), format!("`{id}` is listed twice in `{field}`")));
        } else if other.contains(id) {
            diags.push(
                file.at(h.span(), format!("`{id}` is listed in both `known-hangs` and `known-failures`"))
                    .with_help("a case is expected to hang or to fail, not both: keep it in one list"),
            );
        } else {
            ids.push(id.clone());
        }
    }
    ids
}

/// Lowers the recipe file `rel` of `stack`; every problem goes to `diags`, and what can be
/// lowered is, so the stack-wide checks still see the recipe.
pub(super) fn lower_recipe<'a>(
    tree: &RecipeTree,
    stack: &str,
    rel: &str,
    file: FileText<'a>,
    raw: RawRecipe,
    diags: &mut Diagnostics,
) -> Lowered<'a> {
    check_name(&file, rel, &raw.package.name, diags);
    check_version(&file, &raw.package.version, diags);
    let name = raw.package.name.get_ref().clone();
    let source = match &raw.source {
        None => SourceSpec::None,
        Some(s) => lower_source(&file, s, diags),
    };
    let source_deps = source_deps(&raw, &source);
    let patches = lower_patches(tree, &file, stack, &name, &raw.patches.series, diags);
    if raw.build.system == BuildSystem::PrebuiltWheel {
        check_prebuilt_wheel(&file, &raw, &source, diags);
    } else if let (SourceSpec::Url { wheel: Some(_), .. }, Some(s)) = (&source, &raw.source) {
        diags.push(
            file.at(
                s.span(),
                "a wheel named by `project` and `version` is the source of a `prebuilt-wheel` recipe only",
            ),
        );
    }
    let targets = lower_target_policy(&file, raw.targets, diags);
    let patch_dir = format!("patches/{stack}/{name}/");
    let has_patch = |p: &str| tree.contains(&format!("{patch_dir}{p}"));
    let mut host = super::host::lower_host(&file, raw.host, raw.build.requirements.as_ref(), &has_patch, diags);
    // A bound the series' own patch makes unnecessary is not checked.
    host.versions.retain(|b| !b.lifted_by.as_ref().is_some_and(|l| patches.iter().any(|p| &p.name == l)));
    let build = lower_build(&file, raw.build, !raw.dependencies.build.is_empty(), diags);
    let provides = super::proofs::lower_provides(&file, raw.provides, diags);
    let checks = super::proofs::lower_checks(tree, &file, stack, raw.check, diags);
    let estimate = raw.estimate.map(|e| lower_estimate(&file, e, diags));
    let profile_span = raw.runtime_wheel.as_ref().and_then(|w| w.get_ref().profile.as_ref().map(Spanned::span));
    let runtime_wheel =
        lower_runtime_wheel(&file, &name, build.system, raw.runtime_wheel, &raw.dependencies.build, diags);
    let mut stand_in = lower_stand_in(tree, &file, stack, &targets, raw.stand_in, &checks, diags);
    if let Some(s) = &mut stand_in {
        s.canonical = canonical(file.text, true) + &super::proofs::files_digest(&s.checks);
    }

    let deps = raw.dependencies.build.iter().map(name_and_span).chain(source_deps.iter().cloned()).collect();
    let mut source_dep_names: Vec<String> = Vec::new();
    for (n, _) in &source_deps {
        if !source_dep_names.contains(n) {
            source_dep_names.push(n.clone());
        }
    }
    let build_dep_names: Vec<String> = raw.dependencies.build.iter().map(|d| d.get_ref().clone()).collect();
    let stand_in_texts = stand_in.as_ref().map(|s| (s.args.clone(), s.checks.clone())).unwrap_or_default();
    let mut texts_build = build.clone();
    texts_build.args.extend(stand_in_texts.0);
    let all_checks: Vec<super::PostCheck> = checks.iter().cloned().chain(stand_in_texts.1).collect();
    check_texts(&file, &texts_build, &all_checks, &source_dep_names, &build_dep_names, diags);
    let recipe = Recipe {
        name,
        version: raw.package.version.into_inner(),
        summary: raw.package.summary,
        file: rel.to_string(),
        source: source.clone(),
        patches,
        build_deps: raw.dependencies.build.iter().map(|d| d.get_ref().clone()).collect(),
        source_deps: source_dep_names,
        build,
        targets,
        external: raw.external.map(|e| lower_external(&file, e, diags)),
        host,
        cmake_packages: raw.package.cmake_packages,
        pin_from: (!source.is_unlocked() && source.pin().is_some()).then_some(PinFrom::Recipe),
        witness: raw.source.as_ref().and_then(|s| s.get_ref().witness.clone()),
        canonical: canonical(file.text, false) + &super::proofs::files_digest(&checks),
        provides,
        checks,
        estimate,
        stand_in,
        runtime_wheel,
    };
    Lowered { recipe, name_span: raw.package.name.span(), deps, file, profile_span }
}

/// What the build would refuse in the texts it runs, said when the recipe is loaded: an unknown
/// placeholder (or `{src:x}` of a recipe that is not a source dependency), and an empty step
/// (which "succeeds" doing nothing). `{root:x}` must name a build dependency.
fn check_texts(
    file: &FileText<'_>,
    build: &BuildSpec,
    checks: &[super::PostCheck],
    source_deps: &[String],
    build_deps: &[String],
    diags: &mut Diagnostics,
) {
    let mut texts: Vec<(String, &str)> = Vec::new();
    texts.extend(build.args.iter().map(|a| ("[build] args".to_string(), a.as_str())));
    texts.extend(build.env.iter().map(|(k, v)| (format!("[build] env {k}"), v.as_str())));
    texts.extend(build.steps.iter().map(|t| ("[build] steps".to_string(), t.as_str())));
    texts.extend(build.requirements.iter().map(|t| ("[build] requirements".to_string(), t.as_str())));
    for c in checks {
        texts.extend(c.steps.iter().map(|t| (format!("check `{}` steps", c.name), t.as_str())));
    }
    for (place, text) in texts {
        if place.ends_with("steps") && text.trim().is_empty() {
            diags.push(
                file.whole(format!("{place}: an empty step runs nothing and always succeeds"))
                    .with_help("remove it, or write the command it should run"),
            );
        } else if place.ends_with("steps") && runs_nothing(text) {
            diags.push(
                file.whole(format!("{place}: `{text}` is only comments: it runs nothing and always succeeds"))
                    .with_help(
                        "remove it, or write the command it should run (a comment belongs beside the step in the TOML)",
                    ),
            );
        } else if let Err(e) = super::placeholders::check(text, source_deps, build_deps) {
            diags.push(file.whole(format!("{place}: `{text}`: {e}")));
        }
    }
}

/// Whether a step's every line is blank or a shell comment: the shell runs nothing.
pub(super) fn runs_nothing(step: &str) -> bool {
    step.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
}

/// The recipe's content serialised canonically (keys sorted), immune to comments, whitespace
/// and key order, to `[estimate]`, `[stand-in] estimate` and a check's `estimate` (a guess of how
/// long it takes changes nothing built), to `[stand-in]` (`stand_in`: only that table, the
/// content of the stand-in's build, which the recipe's own build does not see), to
/// `source.witness` (who else states the pin changes nothing built), to the words of
/// `[[provides]]` (`what`, `consumers`: only its `files` and `query` decide what passes) and to
/// `[host]` (what the machine must have is checked before a build, not built; the host's tools
/// are in the key through their identities).
fn canonical(text: &str, stand_in: bool) -> String {
    toml::from_str::<toml::Value>(text)
        .map(|mut v| {
            if let Some(t) = v.as_table_mut() {
                t.remove("host");
                t.remove("estimate");
                // The stand-in's table is an input only of the stand-in's build ([`super::StandIn`]).
                let s = t.remove("stand-in");
                if stand_in {
                    let Some(mut s) = s else { return String::new() };
                    if let Some(s) = s.as_table_mut() {
                        s.remove("estimate");
                    }
                    for c in s.get_mut("check").and_then(|b| b.as_array_mut()).into_iter().flatten() {
                        if let Some(c) = c.as_table_mut() {
                            c.remove("estimate");
                        }
                    }
                    return serde_json::to_string(&s).unwrap_or_default();
                }
            }
            if let Some(checks) = v.get_mut("check").and_then(|b| b.as_array_mut()) {
                for c in checks.iter_mut().filter_map(|c| c.as_table_mut()) {
                    c.remove("estimate");
                }
            }
            if let Some(provides) = v.get_mut("provides").and_then(|b| b.as_array_mut()) {
                for p in provides.iter_mut().filter_map(|p| p.as_table_mut()) {
                    p.remove("what");
                    p.remove("consumers");
                }
            }
            if let Some(source) = v.get_mut("source").and_then(|b| b.as_table_mut()) {
                source.remove("witness");
            }
            serde_json::to_string(&v).unwrap_or_default()
        })
        .unwrap_or_default()
}

fn name_and_span(s: &Spanned<String>) -> (String, Range<usize>) {
    (s.get_ref().clone(), s.span())
}

pub(super) fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(super) fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !s.starts_with('-')
}

/// A recipe is named like its file, in lowercase letters, digits and `-`.
fn check_name(file: &FileText<'_>, rel: &str, name: &Spanned<String>, diags: &mut Diagnostics) {
    let span = name.span();
    let name = name.get_ref();
    let file_stem = rel.rsplit('/').next().unwrap_or(rel).trim_end_matches(".toml");
    if !valid_name(name) {
        diags.push(file.at(span, format!("recipe name `{name}` must be lowercase letters, digits and `-`")));
    } else if name != file_stem {
        diags.push(
            file.at(span, format!("recipe name `{name}` does not match its file name `{file_stem}.toml`"))
                .with_help(format!("rename the file to `{name}.toml` or the package to `{file_stem}`")),
        );
    }
}

/// `[external]`: paths inside the installation (relative to its root) and a CMake package name,
/// neither leaving it: what is read there is taken into the prefix.
fn lower_external(file: &FileText<'_>, raw: super::raw::RawExternal, diags: &mut Diagnostics) -> ExternalSpec {
    let mut files = Vec::new();
    for f in raw.files {
        if stays_inside(f.get_ref()) {
            files.push(f.into_inner());
        } else {
            diags.push(
                file.at(f.span(), format!("`[external] files` `{}` must be a relative path inside the installation", f.get_ref()))
                    .with_help("write it as ROCm lays it out, relative to its root (`lib/libamdhip64.so`): no leading `/`, no `..`"),
            );
        }
    }
    let cmake_package = raw.cmake_package.and_then(|p| {
        if stays_inside(p.get_ref()) && !p.get_ref().contains('/') {
            Some(p.into_inner())
        } else {
            diags.push(file.at(
                p.span(),
                format!("`cmake-package` `{}` must be a CMake package name (a folder of lib/cmake/)", p.get_ref()),
            ));
            None
        }
    });
    ExternalSpec { cmake_package, files }
}

/// `[package] version`: it names the recipe's wheels and its `{version}` in steps, so it must be
/// a word: letters, digits and `.+-_~`, nothing empty and no `/` that would make it a path.
fn check_version(file: &FileText<'_>, version: &Spanned<String>, diags: &mut Diagnostics) {
    let v = version.get_ref();
    let ok = !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b".+-_~".contains(&b));
    if !ok {
        diags.push(
            file.at(version.span(), format!("`version` `{v}` must be letters, digits and `.+-_~`, not empty"))
                .with_help("write the upstream release the source is (`6.2.4`, `2.6.0`)"),
        );
    }
}

/// `[source]`: exactly one of `git`, `url` and `from`, with the fields of that kind.
fn lower_source(file: &FileText<'_>, source: &Spanned<RawSource>, diags: &mut Diagnostics) -> SourceSpec {
    let span = source.span();
    let s = source.get_ref();
    let kinds = [s.git.is_some(), s.url.is_some(), s.from.is_some()].iter().filter(|k| **k).count();
    if kinds == 0 && (s.project.is_some() || s.version.is_some()) {
        lower_wheel_request(file, span, s, diags)
    } else if kinds == 0 {
        diags.push(
            file.at(span, "source has neither `git` nor `url` (nor `from`)")
                .with_help("add `git = \"https://...\"` with `rev`, or `url = \"https://...\"` with `sha256`; remove [source] if the recipe needs none"),
        );
        SourceSpec::None
    } else if kinds > 1 {
        diags.push(file.at(span, "source has more than one of `git`, `url` and `from`: keep one"));
        SourceSpec::None
    } else if let Some(git) = &s.git {
        lower_git(file, git, s, diags)
    } else if let Some(url) = &s.url {
        lower_url(file, url, s, diags)
    } else {
        let from = s.from.as_ref().expect("one kind is set");
        SourceSpec::From { recipe: from.get_ref().clone(), subdir: lower_subdir(file, s, diags) }
    }
}

/// `subdir`: a relative path inside the source tree. The build runs its steps in it and stores
/// what they install, so an absolute one or one climbing out with `..` would build in (and copy
/// from) a host directory.
fn lower_subdir(file: &FileText<'_>, s: &RawSource, diags: &mut Diagnostics) -> Option<String> {
    let sub = s.subdir.as_ref()?;
    if !stays_inside(sub.get_ref()) {
        diags.push(
            file.at(sub.span(), format!("`subdir` `{}` must be a relative path inside the source tree", sub.get_ref()))
                .with_help("name a folder of the source (`llvm`, `projects/rocprim`): no leading `/`, no `..`"),
        );
        return None;
    }
    Some(sub.get_ref().clone())
}

/// Whether `path`, joined to a directory, stays below it ([`crate::fsutil::is_safe_rel`]), and
/// holds no NUL or backslash (which could stand for a separator elsewhere) and not only blanks.
pub(super) fn stays_inside(path: &str) -> bool {
    !path.trim().is_empty() && !path.contains(['\\', '\0']) && crate::fsutil::is_safe_rel(path)
}

/// `[source] index`, `project` and `version` (no `url`): a prebuilt wheel `lock` picks from the
/// index's page for the stack's Python and glibc floor ([`crate::wheel::select`]). Until the lock
/// file names the file, `url` is the project's page.
fn lower_wheel_request(file: &FileText<'_>, span: Range<usize>, s: &RawSource, diags: &mut Diagnostics) -> SourceSpec {
    let (Some(index), Some(project), Some(version)) = (&s.index, &s.project, &s.version) else {
        diags.push(
            file.at(span, "a wheel named by project and version needs all of `index`, `project` and `version`")
                .with_help("`index = \"https://host/whl/\"` (a PEP 503 index), `project = \"torch\"`, `version = \"2.9.1\"`; or give the file's `url` instead"),
        );
        return SourceSpec::None;
    };
    for (field, present) in [
        ("sha256", s.sha256.is_some()),
        ("tag", s.tag.is_some()),
        ("rev", s.rev.is_some()),
        ("strip-components", s.strip_components.is_some()),
    ] {
        if present {
            diags.push(file.at(span.clone(), format!("`{field}` does not apply to a wheel named by project and version: `rocmforge lock` records the file's sha256")));
        }
    }
    let ok = url::Url::parse(index.get_ref()).is_ok_and(|u| matches!(u.scheme(), "http" | "https" | "file"));
    if !ok {
        diags.push(file.at(index.span(), format!("`index` must be an http(s) or file URL, got `{}`", index.get_ref())));
    }
    if !crate::wheel::is_valid_project_name(project.get_ref()) {
        diags.push(file.at(project.span(), format!("`project` `{}` is not a valid project name", project.get_ref())));
    }
    if let Err(e) = crate::wheel::select::VersionSpec::parse(version.get_ref()) {
        diags.push(file.at(version.span(), format!("`version` {e}")));
    }
    let page =
        format!("{}/{}/", index.get_ref().trim_end_matches('/'), crate::wheel::normalize_name(project.get_ref()));
    SourceSpec::Url {
        url: page,
        sha256: None,
        strip_components: 1,
        subdir: lower_subdir(file, s, diags),
        index: Some(index.get_ref().clone()),
        wheel: Some(super::WheelRequest {
            project: project.get_ref().clone(),
            version: version.get_ref().trim().to_string(),
        }),
    }
}

fn lower_git(file: &FileText<'_>, git: &Spanned<String>, s: &RawSource, diags: &mut Diagnostics) -> SourceSpec {
    for (field, present) in [
        ("sha256", s.sha256.is_some()),
        ("strip-components", s.strip_components.is_some()),
        ("index", s.index.is_some()),
        ("project", s.project.is_some()),
        ("version", s.version.is_some()),
    ] {
        if present {
            diags.push(file.at(git.span(), format!("`{field}` belongs to `url` sources, not `git`")));
        }
    }
    if let Some(rev) = &s.rev {
        if !is_hex(rev.get_ref(), 40) {
            diags.push(
                file.at(rev.span(), format!("`rev` must be a full 40-character lowercase hex commit id, got `{}`", rev.get_ref()))
                    .with_help("write the commit the tag points at (`git rev-parse TAG^{commit}`), or remove `rev` to leave the recipe unlocked for `rocmforge lock`"),
            );
        }
    } else if s.tag.is_none() {
        diags.push(
            file.at(git.span(), "git source has neither `rev` nor `tag`")
                .with_help("pin it: add `tag` and its 40-hex `rev`"),
        );
    }
    SourceSpec::Git {
        url: git.get_ref().clone(),
        tag: s.tag.as_ref().map(|t| t.get_ref().clone()),
        rev: s.rev.as_ref().map(|r| r.get_ref().clone()),
        submodules: s.submodules,
        subdir: lower_subdir(file, s, diags),
    }
}

fn lower_url(file: &FileText<'_>, url: &Spanned<String>, s: &RawSource, diags: &mut Diagnostics) -> SourceSpec {
    // Refused here, at its line, not by the download's "relative URL without a base".
    let parsed = url::Url::parse(url.get_ref());
    if !parsed.as_ref().is_ok_and(|u| matches!(u.scheme(), "http" | "https" | "file")) {
        let why = match &parsed {
            _ if url.get_ref().trim().is_empty() => "it is empty".to_string(),
            Ok(u) => format!("`{}` is not a scheme rocmforge downloads", u.scheme()),
            Err(e) => e.to_string(),
        };
        diags.push(
            file.at(
                url.span(),
                format!("`url` must be an absolute http(s) or file URL, got `{}`: {why}", url.get_ref()),
            )
            .with_help(
                "write the whole address (`https://host/path/name-1.0.tar.gz`, or `file:///abs/path` for a local file)",
            ),
        );
    }
    for (field, present) in [("tag", s.tag.is_some()), ("rev", s.rev.is_some())] {
        if present {
            diags.push(file.at(url.span(), format!("`{field}` belongs to `git` sources, not `url`")));
        }
    }
    for (field, present) in [("project", s.project.is_some()), ("version", s.version.is_some())] {
        if present {
            diags.push(
                file.at(url.span(), format!("`{field}` names a wheel in `index` instead of a `url`: keep one of them")),
            );
        }
    }
    if let Some(index) = &s.index {
        let ok = url::Url::parse(index.get_ref()).is_ok_and(|u| matches!(u.scheme(), "http" | "https" | "file"));
        if !ok {
            diags.push(
                file.at(index.span(), format!("`index` must be an http(s) or file URL, got `{}`", index.get_ref())),
            );
        }
    }
    // Without `sha256` the source is unpinned: the first `build` (or `lock`) records its digest in
    // the lock file, read from `index`'s page when there is one, else by downloading and hashing it;
    // `--locked` refuses it.
    let sha = match &s.sha256 {
        Some(h) if is_hex(h.get_ref(), 64) => Some(h.get_ref().clone()),
        Some(h) => {
            diags.push(
                file.at(h.span(), format!("`sha256` must be 64 lowercase hex characters, got `{}`", h.get_ref()))
                    .with_help("compute it with `sha256sum FILE`"),
            );
            Some("0".repeat(64))
        }
        None => None,
    };
    SourceSpec::Url {
        url: url.get_ref().clone(),
        sha256: sha,
        strip_components: s.strip_components.unwrap_or(1),
        subdir: lower_subdir(file, s, diags),
        index: s.index.as_ref().map(|i| i.get_ref().clone()),
        wheel: None,
    }
}

/// The source-only recipes this one reads: `[dependencies] source`, then `from`.
fn source_deps(raw: &RawRecipe, source: &SourceSpec) -> Vec<(String, Range<usize>)> {
    let mut deps: Vec<(String, Range<usize>)> = raw.dependencies.source.iter().map(name_and_span).collect();
    if let SourceSpec::From { .. } = source {
        if let Some(from) = raw.source.as_ref().and_then(|s| s.get_ref().from.as_ref()) {
            deps.push(name_and_span(from));
        }
    }
    deps
}

/// `[patches] series`: plain file names that exist in `patches/<stack>/<recipe>/`.
fn lower_patches(
    tree: &RecipeTree,
    file: &FileText<'_>,
    stack: &str,
    name: &str,
    series: &[Spanned<String>],
    diags: &mut Diagnostics,
) -> Vec<PatchRef> {
    let mut patches = Vec::new();
    for p in series {
        let path = format!("patches/{stack}/{name}/{}", p.get_ref());
        if p.get_ref().contains('/') || p.get_ref().contains("..") {
            diags.push(file.at(
                p.span(),
                format!("patch `{}` must be a plain file name inside patches/{stack}/{name}/", p.get_ref()),
            ));
        } else if !tree.contains(&path) {
            diags.push(
                file.at(p.span(), format!("patch `{}` does not exist", p.get_ref()))
                    .with_help(format!("expected it at {}", tree.display_path(&path))),
            );
        }
        patches.push(PatchRef { name: p.get_ref().clone(), path });
    }
    patches
}

/// A prebuilt-wheel recipe is one verified `.whl` download, published as it is: its source must
/// be a `url` whose file name is a wheel filename (the index, pip and uv read the project,
/// version and tags from it), and nothing may change the file (no patches, no subdir).
///
/// The file name is what the source step will call the download ([`url_file_name`]) and the
/// filename grammar is the one the index reads ([`crate::wheel`]): both are pure functions, used
/// here so `recipes check` reports a bad URL at its line instead of a build failing after the
/// download.
fn check_prebuilt_wheel(file: &FileText<'_>, raw: &RawRecipe, source: &SourceSpec, diags: &mut Diagnostics) {
    let url = raw.source.as_ref().and_then(|s| s.get_ref().url.as_ref());
    match (source, url) {
        // Named by project and version: `lock` picks a wheel file; the subdir check stays.
        (SourceSpec::Url { wheel: Some(_), subdir, .. }, None) => {
            if subdir.is_some() {
                let span = raw.source.as_ref().map(|s| s.span()).unwrap_or_default();
                diags.push(file.at(span, "`subdir` does not apply to a prebuilt-wheel source (a single .whl file)"));
            }
        }
        (SourceSpec::Url { url: text, subdir, .. }, Some(url)) => {
            if let Some((segment, Err(why))) = crate::recipe::url_last_segment(text) {
                diags.push(
                    file.at(url.span(), format!("a prebuilt-wheel source must be a wheel: the URL's last segment `{segment}` {why}, not a file name")).with_help(
                        "the last path segment of the URL, percent-decoded, is the wheel's file name: serve the wheel under its plain name (`.../name-1.0-py3-none-any.whl`)",
                    ),
                );
            } else if let Err(e) = crate::wheel::WheelName::parse(&url_file_name(text)) {
                diags.push(file.at(url.span(), format!("a prebuilt-wheel source must be a wheel: {e}")).with_help(
                    "the last path segment of the URL, percent-decoded, is the wheel's file name \
                     (`.../torch-2.5.1%2Brocm6.2-cp311-cp311-linux_x86_64.whl` is `torch-2.5.1+rocm6.2-cp311-cp311-linux_x86_64.whl`)",
                ));
            }
            if subdir.is_some() {
                diags.push(
                    file.at(url.span(), "`subdir` does not apply to a prebuilt-wheel source (a single .whl file)"),
                );
            }
        }
        _ => {
            let d = match &raw.source {
                Some(s) => file.at(s.span(), "a prebuilt-wheel recipe takes its wheel from a `url` source"),
                None => file.whole("a prebuilt-wheel recipe needs a [source] with the wheel's `url` and `sha256`"),
            };
            diags.push(d.with_help("add `[source] url = \"https://.../name-version-py3-none-any.whl\"` and `sha256 = \"...\"` (`sha256sum FILE`)"));
        }
    }
    if let Some(first) = raw.patches.series.first() {
        diags.push(
            file.at(
                first.span(),
                "a prebuilt-wheel recipe cannot have patches: the wheel is published byte for byte as downloaded",
            )
            .with_help("build it from source with a `python-wheel` recipe to patch it"),
        );
    }
}

/// GPU target names, each known.
fn lower_targets(file: &FileText<'_>, list: &[Spanned<String>], diags: &mut Diagnostics) -> TargetSet {
    let mut out = Vec::new();
    for t in list {
        match GpuTarget::lookup(t.get_ref()) {
            Some(g) => out.push(g),
            None => diags.push(file.at(t.span(), format!("unknown GPU target `{}`", t.get_ref())).with_help(format!(
                "known targets: {}",
                GpuTarget::all().map(|g| g.name()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }
    TargetSet::from_targets(out)
}

/// `[stand-in]`: present exactly when `when-unsupported = "stand-in"` (a table no decision
/// reads, or a mode without its table, is a mistake); its checks are lowered as `[[check]]`s and
/// named apart from them.
fn lower_stand_in(
    tree: &RecipeTree,
    file: &FileText<'_>,
    stack: &str,
    targets: &TargetPolicy,
    raw: Option<Spanned<super::raw::RawStandIn>>,
    checks: &[super::PostCheck],
    diags: &mut Diagnostics,
) -> Option<super::StandIn> {
    let wants = targets.when_unsupported == WhenUnsupported::StandIn;
    let Some(raw) = raw else {
        if wants {
            diags.push(
                file.whole("`when-unsupported = \"stand-in\"` needs a `[stand-in]` table")
                    .with_help("add `[stand-in]` with the `args` that build the library without device code"),
            );
        }
        return None;
    };
    let span = raw.span();
    let raw = raw.into_inner();
    if !wants {
        diags.push(
            file.at(span.clone(), "`[stand-in]` is declared, but `[targets] when-unsupported` is not \"stand-in\"")
                .with_help("set `when-unsupported = \"stand-in\"` in `[targets]`, or remove `[stand-in]`"),
        );
    }
    if raw.args.is_empty() && raw.check.is_empty() {
        diags.push(
            file.at(
                span,
                "`[stand-in]` adds no `args` and no `check`: the stand-in would be the real build, unchecked",
            ),
        );
    }
    let own = super::proofs::lower_checks(tree, file, stack, raw.check, diags);
    for c in &own {
        if checks.iter().any(|o| o.name == c.name) {
            diags
                .push(file.whole(format!("check `{}` is declared in `[[check]]` and in `[[stand-in.check]]`", c.name)));
        }
    }
    let estimate = raw.estimate.map(|e| lower_estimate(file, e, diags));
    Some(super::StandIn { args: raw.args, checks: own, estimate, canonical: String::new() })
}

/// `[targets]`: known targets, and a substitute list when `when-unsupported` asks for one.
fn lower_target_policy(file: &FileText<'_>, raw: RawTargets, diags: &mut Diagnostics) -> TargetPolicy {
    let gpu = raw.gpu.unwrap_or(true);
    let supported = raw.supported.as_ref().map(|l| {
        if l.get_ref().is_empty() {
            diags.push(
                file.at(l.span(), "`[targets] supported` is empty: the recipe would build for no target, so never")
                    .with_help("list the GPU targets its device code exists for, or remove the line (any target)"),
            );
        }
        lower_targets(file, l.get_ref(), diags)
    });
    let substitute = lower_targets(file, &raw.substitute, diags);
    let when_unsupported = raw.when_unsupported.unwrap_or(WhenUnsupported::Error);
    if when_unsupported == WhenUnsupported::Substitute && substitute.is_empty() {
        diags.push(file.whole("`when-unsupported = \"substitute\"` needs a non-empty `substitute` target list"));
    }
    let mut device_code = Vec::new();
    if let Some(list) = &raw.device_code {
        if !gpu {
            diags.push(
                file.at(list.span(), "`device-code` is declared, but the recipe is host-only (`gpu = false`)")
                    .with_help("remove `device-code`, or drop `gpu = false` if the recipe compiles GPU code"),
            );
        }
        for p in list.get_ref() {
            if let Err(e) = crate::offload::coverage::matcher(p.get_ref()) {
                diags.push(file.at(p.span(), e).with_help(COVERAGE_HELP));
            }
            device_code.push(p.get_ref().clone());
        }
    }
    let mut must_contain = std::collections::BTreeMap::new();
    if let Some(map) = &raw.must_contain {
        for (p, text) in map.get_ref() {
            if let Err(e) = crate::offload::coverage::matcher(p) {
                diags.push(file.at(map.span(), e).with_help(COVERAGE_HELP));
            }
            if text.is_empty() {
                diags.push(
                    file.at(map.span(), format!("`must-contain` gives `{p}` an empty text: every file contains it")),
                );
            }
            must_contain.insert(p.clone(), text.clone());
        }
    }
    TargetPolicy { gpu, supported, when_unsupported, substitute, reason: raw.reason, device_code, must_contain }
}

const COVERAGE_HELP: &str =
    "paths are relative to the installed prefix (for wheel recipes, to the wheel's root), e.g. `lib/libx.so` or `lib/x/library/*.co`";

/// `[build]`: a sane memory estimate, and `requirements` and `install-wheels` only where the build
/// system uses them. `has_build_deps`: whether `[dependencies] build` names any recipe.
fn lower_build(file: &FileText<'_>, raw: RawBuild, has_build_deps: bool, diags: &mut Diagnostics) -> BuildSpec {
    if let Some(mem) = raw.memory_per_job_gb {
        if !(mem > 0.0 && mem < 1024.0) {
            diags.push(file.whole(format!("`memory-per-job-gb` must be between 0 and 1024, got {mem}")));
        }
    }
    if let Some(reqs) = &raw.requirements {
        if matches!(raw.system, BuildSystem::SourceOnly | BuildSystem::PrebuiltWheel | BuildSystem::RuntimeWheel) {
            diags.push(
                file.at(
                    reqs.span(),
                    format!(
                        "`requirements` are installed into a build venv, and a `{}` recipe builds nothing",
                        raw.system.as_str()
                    ),
                )
                .with_help(
                    "remove `requirements`, or give the recipe a build system that runs (python-wheel, cmake, script)",
                ),
            );
        }
    }
    // Settings that would make a build succeed with nothing in its artifact.
    if raw.system == BuildSystem::Script && raw.steps.is_empty() {
        diags.push(
            file.whole("a `script` recipe without `steps` builds nothing")
                .with_help("add the steps that install into {stage}, or make it `source-only`"),
        );
    }
    if raw.system == BuildSystem::Cmake {
        for a in &raw.args {
            let Some(dir) =
                a.strip_prefix("-DCMAKE_INSTALL_PREFIX=").or_else(|| a.strip_prefix("-DCMAKE_INSTALL_PREFIX:PATH="))
            else {
                continue;
            };
            let inside = match dir.strip_prefix("{prefix}") {
                Some("" | "/") => true,
                Some(rest) => rest.strip_prefix('/').is_some_and(stays_inside),
                None => false,
            };
            if !inside {
                diags.push(
                    file.whole(format!(
                        "`{a}` installs outside the stack's prefix: the recipe's artifact would be empty"
                    ))
                    .with_help("install under the prefix (`-DCMAKE_INSTALL_PREFIX={prefix}/...`) or drop the argument"),
                );
            }
        }
    }
    let install_wheels = match &raw.install_wheels {
        Some(list) => lower_install_wheels(file, raw.system, list, has_build_deps, diags),
        None => Vec::new(),
    };
    BuildSpec {
        system: raw.system,
        args: raw.args,
        env: raw.env,
        steps: raw.steps,
        memory_per_job_gb: raw.memory_per_job_gb.unwrap_or(DEFAULT_MEMORY_PER_JOB_GB),
        requirements: raw.requirements.map(Spanned::into_inner).unwrap_or_default(),
        install_wheels,
    }
}

/// `system-libraries`: sonames (`libsqlite3.so.0`), as DT_NEEDED names them.
fn lower_system_libraries(file: &FileText<'_>, raw: &[Spanned<String>], diags: &mut Diagnostics) -> Vec<String> {
    let mut out = Vec::new();
    for l in raw {
        let name = l.get_ref();
        if name.contains(".so") && !name.contains('/') && !name.contains(char::is_whitespace) {
            out.push(name.clone());
        } else {
            diags.push(
                file.at(l.span(), format!("`system-libraries` lists sonames, and `{name}` is not one"))
                    .with_help("write the name a library's DT_NEEDED gives (`readelf -d`): `libsqlite3.so.0`"),
            );
        }
    }
    out
}

/// `[runtime-wheel]`, which a `runtime-wheel` recipe needs and no other may have: a valid project
/// name and root folder, and files of its build dependencies only, as valid globs.
fn lower_runtime_wheel(
    file: &FileText<'_>,
    name: &str,
    system: BuildSystem,
    raw: Option<Spanned<super::raw::RawRuntimeWheel>>,
    build_deps: &[Spanned<String>],
    diags: &mut Diagnostics,
) -> Option<super::RuntimeWheelSpec> {
    let raw = match (raw, system) {
        (Some(r), BuildSystem::RuntimeWheel) => r,
        (None, BuildSystem::RuntimeWheel) => {
            diags.push(
                file.whole("a `runtime-wheel` recipe needs a `[runtime-wheel]` table")
                    .with_help("name the files of its build dependencies that go in: `[runtime-wheel] files = { clr = [\"lib/libamdhip64.so*\"] }`"),
            );
            return None;
        }
        (Some(r), _) => {
            diags.push(file.at(
                r.span(),
                format!(
                    "`[runtime-wheel]` is for `system = \"runtime-wheel\"` recipes; this one is `{}`",
                    system.as_str()
                ),
            ));
            return None;
        }
        (None, _) => return None,
    };
    let raw = raw.into_inner();
    let project = match &raw.project {
        Some(p) if crate::wheel::is_valid_project_name(p.get_ref()) => p.get_ref().clone(),
        Some(p) => {
            diags.push(file.at(p.span(), format!("`{}` is not a project name", p.get_ref())));
            name.to_string()
        }
        None => name.to_string(),
    };
    let root = match &raw.root {
        Some(r) => {
            let ok = r.get_ref().chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && r.get_ref().chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                diags.push(
                    file.at(
                        r.span(),
                        format!("`root` must be one folder name of letters, digits and `_`, got `{}`", r.get_ref()),
                    )
                    .with_help("it becomes a folder of site-packages: `rocmforge_rocm`"),
                );
            }
            r.get_ref().clone()
        }
        None => crate::wheel::normalize_name(&project).replace('-', "_"),
    };
    let deps: Vec<&str> = build_deps.iter().map(|d| d.get_ref().as_str()).collect();
    if raw.files.get_ref().is_empty() {
        diags.push(file.at(raw.files.span(), "`[runtime-wheel] files` names no files: the wheel would be empty"));
    }
    let mut files = BTreeMap::new();
    for (dep, globs) in raw.files.get_ref() {
        if !deps.contains(&dep.as_str()) {
            diags.push(
                file.at(
                    raw.files.span(),
                    format!(
                        "`[runtime-wheel] files` takes files of `{dep}`, which is not among its build dependencies"
                    ),
                )
                .with_help(format!("add `{dep}` to `[dependencies] build`")),
            );
        }
        for g in globs {
            if let Err(e) = crate::offload::coverage::matcher(&g.get_ref().replace("{target}", "gfx1010")) {
                diags.push(file.at(g.span(), e));
            }
        }
        files.insert(dep.clone(), globs.iter().map(|g| g.get_ref().clone()).collect());
    }
    Some(super::RuntimeWheelSpec { project, root, files, profile: raw.profile.map(Spanned::into_inner) })
}

/// `[estimate]`: figures in sane ranges (a minute to ten weeks; up to a thousand core-days).
fn lower_estimate(file: &FileText<'_>, raw: Spanned<super::raw::RawEstimate>, diags: &mut Diagnostics) -> Estimate {
    let span = raw.span();
    let e = raw.into_inner();
    let ranges = [
        ("serial-minutes", e.serial_minutes, 100_000.0),
        ("parallel-core-hours", e.parallel_core_hours, 24_000.0),
        ("download-mb", e.download_mb.unwrap_or(0.0), 1_000_000.0),
        ("disk-gb", e.disk_gb.unwrap_or(0.0), 100_000.0),
    ];
    for (field, v, max) in ranges {
        if !(0.0..=max).contains(&v) {
            diags.push(file.at(span.clone(), format!("`[estimate] {field}` must be between 0 and {max}, got {v}")));
        }
    }
    Estimate {
        serial_minutes: e.serial_minutes,
        parallel_core_hours: e.parallel_core_hours,
        download_mb: e.download_mb.unwrap_or(0.0),
        disk_gb: e.disk_gb.unwrap_or(0.0),
        source: e.source,
    }
}

/// `install-wheels`: Python project names, once each, of a python-wheel recipe with build
/// dependencies (whose wheels they are).
fn lower_install_wheels(
    file: &FileText<'_>,
    system: BuildSystem,
    list: &Spanned<Vec<Spanned<String>>>,
    has_build_deps: bool,
    diags: &mut Diagnostics,
) -> Vec<String> {
    if system != BuildSystem::PythonWheel {
        diags.push(
            file.at(
                list.span(),
                format!("`install-wheels` is for python-wheel recipes; this one is `{}`", system.as_str()),
            )
            .with_help("remove it, or build this recipe with `system = \"python-wheel\"`"),
        );
    } else if !has_build_deps && !list.get_ref().is_empty() {
        diags.push(
            file.at(
                list.span(),
                "`install-wheels` installs wheels built by the recipe's build dependencies, but it has none",
            )
            .with_help("add the recipe that builds these wheels to `[dependencies] build`"),
        );
    }
    let mut install_wheels = Vec::new();
    for w in list.get_ref() {
        if !crate::wheel::is_valid_project_name(w.get_ref()) {
            diags.push(
                file.at(w.span(), format!("`{}` is not a Python project name", w.get_ref()))
                    .with_help("`install-wheels` takes project names only (`torch`): the version is the one the dependency built; version pins belong in `requirements`"),
            );
        } else if install_wheels.contains(w.get_ref()) {
            diags.push(file.at(w.span(), format!("`{}` is listed twice in `install-wheels`", w.get_ref())));
        } else {
            install_wheels.push(w.get_ref().clone());
        }
    }
    install_wheels
}
