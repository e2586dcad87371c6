//! The recipe model: typed stacks and recipes (this file), built from the TOML of a recipe
//! tree ([`tree`]) in stages, every problem reported with its file, line and column:
//!
//! - `raw`: parse, each file into `Raw*` structs that keep spans;
//! - `lower`: one file's raw form to the typed model, checking what one file can get wrong;
//! - `validate`: the checks across a stack (names, dependencies, source trees, [`find_cycles`]);
//! - `load`: reads a tree's files through these stages ([`load_stack`], [`load_all`],
//!   [`pick_stack`]).
//!
//! [`host`] is the `[host]` table: what a recipe needs from the machine that builds it.
//! [`lockfile`] pins unlocked git recipes to commits. The recipe layer depends on nothing
//! downstream (graph, plan, source, index, ...): only on `diagnostic`, `fsutil`, `target`,
//! `offload` (to check coverage patterns) and `wheel`.

mod cycles;
pub mod edit;
pub mod host;
mod load;
pub mod lockfile;
mod lower;
pub mod placeholders;
pub mod proofs;
#[cfg(test)]
mod props;
mod raw;
pub mod tree;
mod validate;

pub use cycles::find_cycles;
pub use host::{version_numbers, Bounded, HostNeeds, PackageNeed, VersionBound, VersionReq};
pub use load::{load_all, load_stack, pick_stack, pick_valid_stack, StackError};
pub use tree::{Origin, RecipeTree};
pub use validate::closest as load_closest;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::target::TargetSet;

/// A folder `recipes/<stack>/`: a consistent set of components (one ROCm release, say).
#[derive(Debug, Clone)]
pub struct Stack {
    pub name: String,
    pub rocm_version: String,
    pub summary: String,
    pub default_targets: TargetSet,
    /// The only targets the stack can serve (`supported-targets`; a prebuilt stack whose device
    /// wheels exist for these alone): `--target` outside them is refused before anything runs.
    /// `None`: any target (a source stack builds for what it is asked).
    pub supported_targets: Option<TargetSet>,
    pub is_default: bool,
    pub python: Option<String>,
    /// The oldest glibc the stack's hosts have (`glibc = "2.28"`): a wheel picked from an index
    /// by project and version may need no newer one (`manylinux_2_N`). Default 2.17.
    pub glibc: String,
    /// Requirements constraints (`numpy<2`) for the stack's venv (`pip install -c`).
    pub venv_constraints: Vec<String>,
    /// Projects the stack's wheels require that its venv never installs (`venv-skip`, PEP 503
    /// names): with any, the wheels go in with `--no-deps` after their other requirements.
    pub venv_skip: Vec<String>,
    /// Run-time profiles (`[profile.<name>]`), and the one used when none is asked for.
    pub profiles: BTreeMap<String, Profile>,
    pub default_profile: Option<String>,
    /// Publish into `<index-dir>/<index_path>/` (an index of its own) instead of `<index-dir>`.
    pub index_path: Option<String>,
    /// Where `stack.toml` is, for messages (`recipes/<stack>/stack.toml` or its full path).
    pub file: String,
    /// How much disk a whole build of the stack takes (`disk-gb`), for `doctor`.
    pub disk_gb: Option<f64>,
    /// Libraries (sonames) the host provides that the stack's wheels may need besides the
    /// system's ([`crate::wheel::closure::SYSTEM_LIBRARIES`]): `system-libraries`.
    pub system_libraries: Vec<String>,
    pub recipes: BTreeMap<String, Recipe>,
}

/// A run-time profile of a stack: the environment `env` prints and `verify` runs under, and the
/// `verify` cases known to hang or to fail with it (shown as known, not unexpected).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub env: BTreeMap<String, String>,
    #[serde(flatten)]
    pub known: KnownCases,
    /// Where each id of the known hangs and failures is written (a diagnostic there, its
    /// message empty): the ids are cases of verify's matrix, which this layer does not know, so
    /// `verify::unknown_cases` points at them.
    #[serde(skip)]
    pub case_at: BTreeMap<String, crate::diagnostic::Diagnostic>,
}

/// The `verify` cases a profile expects not to pass (`known-hangs`, `known-failures`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KnownCases {
    #[serde(rename = "known_hangs")]
    pub hangs: Vec<String>,
    /// Cases expected to end in an error or a wrong result (not a hang).
    #[serde(rename = "known_failures")]
    pub failures: Vec<String>,
    /// For some of them, the text their message must hold to count as known (`because`): the
    /// stated reason; a failure for another reason is unexpected.
    #[serde(rename = "known_failure_reasons")]
    pub failure_reasons: BTreeMap<String, String>,
}

impl KnownCases {
    /// Both lists, each with what its ids are called in messages.
    pub fn lists(&self) -> [(&'static str, &Vec<String>); 2] {
        [("known hang", &self.hangs), ("known failure", &self.failures)]
    }
    pub fn is_known_hang(&self, case: &str) -> bool {
        self.hangs.iter().any(|h| h == case)
    }
    /// Whether case `case` failing with `message` is the failure the profile lists: known only
    /// for the stated reason, when it states one.
    pub fn is_known_failure(&self, case: &str, message: Option<&str>) -> bool {
        self.failures.iter().any(|f| f == case)
            && match (message, self.failure_reasons.get(case)) {
                (Some(m), Some(because)) => m.contains(because.as_str()),
                _ => true,
            }
    }
}

/// The one placeholder a profile's values may hold: the stack's venv, expanded by `activate`.
pub const PROFILE_VENV: &str = "{venv}";

/// The variable a native build never sets: it makes the HIP runtime load code built for another
/// GPU (10.3.0: gfx1030) on this one.
pub const GFX_OVERRIDE_VAR: &str = "HSA_OVERRIDE_GFX_VERSION";

impl Profile {
    /// The target the profile runs a card as: its `HSA_OVERRIDE_GFX_VERSION` (`10.3.0`) as a
    /// gfx name (`gfx1030`; the stepping is one hex digit: `9.0.10` is `gfx90a`).
    pub fn runs_as(&self) -> Option<String> {
        crate::target::gfx_of_dotted_version(self.env.get(GFX_OVERRIDE_VAR)?)
    }
}

/// A name a shell can `export`: letters, digits and `_`, not starting with a digit.
pub fn is_env_name(k: &str) -> bool {
    k.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The variable that runs `verify`'s cases on the CPU (`crate::verify`): it tests the case
/// programs, not a GPU, so only the caller's environment sets it, never a profile.
pub const VERIFY_DEVICE_VAR: &str = "ROCMFORGE_VERIFY_DEVICE";

impl Stack {
    /// Warnings about patch files `tree` holds for `recipes` (all when empty) that no series
    /// names: `patches/<stack>/<recipe>/<file>` is not in the series of `<recipe>`.
    pub fn unlisted_patch_warnings(&self, tree: &RecipeTree, recipes: &[&str]) -> Vec<(String, String)> {
        self.recipes
            .values()
            .filter(|r| recipes.is_empty() || recipes.contains(&r.name.as_str()))
            .flat_map(|r| {
                let series: Vec<String> = r.patches.iter().map(|p| p.name.clone()).collect();
                tree.unlisted_patches(&self.name, &r.name, &series).into_iter().map(move |f| {
                    (
                        r.name.clone(),
                        format!("`{f}` is not in the patch series of `{}` and is not applied: add it to `[patches] series`, or remove it", r.name),
                    )
                })
            })
            .collect()
    }

    pub fn recipe(&self, name: &str) -> Option<&Recipe> {
        self.recipes.get(name)
    }

    /// Does the stack build anything from source? A stack of prebuilt wheels only (a binary
    /// fallback) is not native: its wheels carry code for other GPUs and their own ROCm libraries.
    pub fn is_native(&self) -> bool {
        is_native(self.recipes.values())
    }

    /// Does the stack publish its libraries as runtime wheels (issue 38)? Then its python-wheel
    /// and runtime-wheel recipes' wheels must load wherever pip puts them, and the library
    /// closure check ([`crate::wheel::closure`]) refuses those that would not. A stack without
    /// them publishes wheels that load through `rocmforge env` only.
    pub fn has_runtime_wheels(&self) -> bool {
        self.recipes.values().any(|r| r.build.system == BuildSystem::RuntimeWheel)
    }

    /// The profile `name`, or the default one (`None` when the stack has no profiles).
    pub fn profile(&self, name: Option<&str>) -> Result<Option<&Profile>, String> {
        match name.or(self.default_profile.as_deref()) {
            None => Ok(None),
            Some(n) => self.profiles.get(n).map(Some).ok_or_else(|| {
                let known: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
                format!(
                    "stack `{}` has no profile `{n}` ({}): see {}",
                    self.name,
                    if known.is_empty() {
                        "it has none".to_string()
                    } else {
                        format!("profiles: {}", known.join(", "))
                    },
                    self.file
                )
            }),
        }
    }
}

fn is_native<'a>(mut recipes: impl Iterator<Item = &'a Recipe>) -> bool {
    recipes.any(|r| !matches!(r.build.system, BuildSystem::PrebuiltWheel | BuildSystem::SourceOnly))
}

#[derive(Debug, Clone, Serialize)]
pub struct Recipe {
    pub name: String,
    pub version: String,
    pub summary: String,
    /// Path of the recipe file inside the tree (`recipes/<stack>/<name>.toml`).
    pub file: String,
    pub source: SourceSpec,
    pub patches: Vec<PatchRef>,
    /// Recipes built and deployed before this one.
    pub build_deps: Vec<String>,
    /// Source-only recipes whose trees this one reads (`{src:<name>}`), including `from`.
    pub source_deps: Vec<String>,
    pub build: BuildSpec,
    pub targets: TargetPolicy,
    pub external: Option<ExternalSpec>,
    /// `[host]`: what the build needs from the machine (packages, commands, CMake versions).
    #[serde(skip_serializing_if = "HostNeeds::is_empty")]
    pub host: HostNeeds,
    /// CMake packages it installs (`[package] cmake-packages`), known before it is built: a
    /// build looking for one without depending on this recipe fails (`engine::undeclared`).
    pub cmake_packages: Vec<String>,
    /// Where the source's pin (`rev` or `sha256`) comes from; `None` while it is unpinned.
    pub pin_from: Option<PinFrom>,
    /// `[source] witness`: who else states the pin (a packager's file, the upstream wheel...),
    /// so a reader can confirm it. Not part of the cache key.
    pub witness: Option<String>,
    /// `[[provides]]`: what its consumers take from it, checked before its artifact is stored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub provides: Vec<Provide>,
    /// `[[check]]`: programs run after install, each a step of the build, failing the recipe.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<PostCheck>,
    /// `[estimate]`: its work in the night's model, until a build here was timed. Not part of
    /// the cache key.
    pub estimate: Option<Estimate>,
    /// `[stand-in]`: how it is built when `when-unsupported = "stand-in"` applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stand_in: Option<StandIn>,
    /// `[runtime-wheel]`: what a `runtime-wheel` recipe puts in its wheel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_wheel: Option<RuntimeWheelSpec>,
    /// The recipe's parsed content, serialised canonically (keys sorted): the cache key's input,
    /// immune to comments, whitespace and key order.
    #[serde(skip)]
    pub canonical: String,
}

impl Recipe {
    /// Every recipe that must be ready before this one (build and source dependencies).
    pub fn all_deps(&self) -> impl Iterator<Item = &str> {
        self.build_deps.iter().chain(self.source_deps.iter()).map(String::as_str)
    }

    pub fn is_source_only(&self) -> bool {
        self.build.system == BuildSystem::SourceOnly
    }

    /// The recipe as it is built for `decision`: for a stand-in, with its `[stand-in]` args
    /// appended, its checks after the recipe's own, its estimate, and no device code declared.
    pub fn as_built(&self, decision: &TargetDecision) -> std::borrow::Cow<'_, Recipe> {
        match (decision, &self.stand_in) {
            (TargetDecision::StandIn { .. }, Some(s)) => {
                let mut r = self.clone();
                r.build.args.extend(s.args.iter().cloned());
                r.checks.extend(s.checks.iter().cloned());
                r.estimate = s.estimate.clone();
                r.canonical.push_str("\nstand-in ");
                r.canonical.push_str(&s.canonical);
                r.targets.device_code.clear();
                r.targets.must_contain.clear();
                std::borrow::Cow::Owned(r)
            }
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// Does building it run the stack's Python: a venv made from it (python-wheel, or
    /// `requirements`) or `{python}` in a text it runs? A build of recipes that do not need
    /// it (MIOpen on an installation) does not ask the host for that Python.
    pub fn uses_stack_python(&self) -> bool {
        let b = &self.build;
        let texts =
            b.args.iter().chain(b.env.values()).chain(&b.steps).chain(self.checks.iter().flat_map(|c| &c.steps));
        b.system == BuildSystem::PythonWheel
            || !b.requirements.is_empty()
            || texts.into_iter().any(|t| {
                placeholders::pieces(t).iter().any(|p| matches!(p, placeholders::Piece::Name(n) if *n == "python"))
            })
    }
}

/// Where a recipe's pin comes from (`plan` shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PinFrom {
    /// The recipe file's own `rev` or `sha256`.
    Recipe,
    /// The stack's lock file (written by `build` or `lock`).
    LockFile { path: String },
}

/// A 40-hex git commit id.
pub type CommitId = String;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SourceSpec {
    /// A git repository pinned to a commit; `rev: None` means unlocked (tag only, not yet resolved).
    Git { url: String, tag: Option<String>, rev: Option<CommitId>, submodules: bool, subdir: Option<String> },
    /// A tarball or file, verified by sha256; `sha256: None` means unpinned (the first `build`
    /// or `lock` records its digest in the lock file: read from the PEP 503 page of `index` that
    /// links the file with `#sha256=` when there is one, else by downloading and hashing it).
    /// With `wheel` (a prebuilt wheel named by project and version in `index`, no `url` in the
    /// recipe), `url` is the project's page until the lock file gives the file `lock` picked.
    Url {
        url: String,
        sha256: Option<String>,
        strip_components: u32,
        subdir: Option<String>,
        index: Option<String>,
        wheel: Option<WheelRequest>,
    },
    /// The checked-out tree of another recipe (one repository, several recipes).
    From { recipe: String, subdir: Option<String> },
    /// No source (a script that needs none).
    None,
}

/// A prebuilt wheel named by its project and version in an index (`[source] index`, `project`,
/// `version`): `lock` picks the file for the stack's Python and glibc floor from the project's
/// PEP 503 page ([`crate::wheel::select`]) and records its URL and sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WheelRequest {
    pub project: String,
    /// As written (`2.9.1`, `==2.9.1+rocm7.10.0`, `==2.9.*`).
    pub version: String,
}

impl SourceSpec {
    /// A git source without `rev` or a url source without `sha256`: nothing pins its content yet.
    pub fn is_unlocked(&self) -> bool {
        matches!(self, SourceSpec::Git { rev: None, .. } | SourceSpec::Url { sha256: None, .. })
    }

    /// The pin, as `plan` shows it: `rev <40 hex>` or `sha256 <64 hex>`.
    pub fn pin(&self) -> Option<String> {
        match self {
            SourceSpec::Git { rev: Some(r), .. } => Some(format!("rev {r}")),
            SourceSpec::Url { sha256: Some(h), .. } => Some(format!("sha256 {h}")),
            _ => None,
        }
    }

    /// One line for people: `https://x.git @ rocm-6.2.4 (0123abcd...)`.
    pub fn describe(&self) -> String {
        match self {
            SourceSpec::Git { url, tag, rev, .. } => {
                let tag = tag.as_deref().map(|t| format!(" @ {t}")).unwrap_or_default();
                match rev {
                    Some(r) => format!("{url}{tag} ({})", &r[..12]),
                    None => format!("{url}{tag} (unpinned: `rocmforge build` pins it)"),
                }
            }
            SourceSpec::Url { url, sha256: Some(sha256), index: Some(index), wheel: Some(w), .. } => {
                format!("{} {} from index {index}: {url} (sha256 {})", w.project, w.version, &sha256[..12])
            }
            SourceSpec::Url { url, sha256: Some(sha256), .. } => format!("{url} (sha256 {})", &sha256[..12]),
            SourceSpec::Url { index: Some(index), wheel: Some(w), sha256: None, .. } => format!(
                "{} {} from index {index} (unpinned: `rocmforge lock` or `build` picks the file)",
                w.project, w.version
            ),
            SourceSpec::Url { url, sha256: None, .. } => format!("{url} (unpinned: `rocmforge build` pins it)"),
            SourceSpec::From { recipe, subdir } => match subdir {
                Some(s) => format!("tree of {recipe}, {s}/"),
                None => format!("tree of {recipe}"),
            },
            SourceSpec::None => "none".to_string(),
        }
    }
}

/// What the top of an index directory holds besides the stacks' own indexes (`index-path`):
/// its `simple/` folder and its state file (`crate::index`'s layout). A stack's `index-path`
/// may take none of these names, or its index would nest inside the default one.
pub const INDEX_TOP_LEVEL_NAMES: [&str; 2] = ["simple", "index.json"];

/// The file name a [`SourceSpec::Url`] downloads to (`.../x.whl?y` -> `x.whl`), kept when the
/// content is not an archive: the last path segment, percent-decoded, because the name can carry
/// meaning (a wheel's `1.0+rocm6.2` is served as `1.0%2Brocm6.2`). A segment that decodes to
/// something that is not a plain file name (`..`, a `/`, a NUL, not UTF-8) is not used.
pub fn url_file_name(url: &str) -> String {
    match url_last_segment(url) {
        Some((_, Ok(n))) => n,
        _ => "download".into(),
    }
}

/// The last non-empty path segment of `url` as written, and what it percent-decodes to: `Ok`
/// with a plain file name, `Err` with why it is not one (it decodes to a path, a dot segment, a
/// NUL, or not UTF-8), for messages. `None`: no URL or no segment.
pub fn url_last_segment(url: &str) -> Option<(String, Result<String, String>)> {
    let segment = url::Url::parse(url)
        .ok()
        .and_then(|u| u.path_segments().and_then(|mut s| s.rfind(|s| !s.is_empty()).map(str::to_string)))?;
    let decoded = match percent_encoding::percent_decode_str(&segment).decode_utf8() {
        Ok(n) if n == ".." || n == "." => Err(format!("decodes to `{n}`, a dot segment")),
        Ok(n) if n.contains(['/', '\\']) => Err(format!("decodes to `{n}`, a path")),
        Ok(n) if n.contains('\0') => Err("decodes to a name with a NUL byte".to_string()),
        Ok(n) => Ok(n.into_owned()),
        Err(_) => Err("does not decode to UTF-8".to_string()),
    };
    Some((segment, decoded))
}

/// One patch of a recipe's series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchRef {
    /// File name as written in the series (`0001-x.patch`).
    pub name: String,
    /// Path inside the tree (`patches/<stack>/<recipe>/0001-x.patch`).
    pub path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuildSystem {
    Cmake,
    PythonWheel,
    Script,
    PrebuiltWheel,
    SourceOnly,
    /// The stack's libraries as a wheel (`[runtime-wheel]`): files its build dependencies
    /// installed, laid out as in the prefix below one folder of `site-packages`.
    RuntimeWheel,
}

impl BuildSystem {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildSystem::Cmake => "cmake",
            BuildSystem::PythonWheel => "python-wheel",
            BuildSystem::Script => "script",
            BuildSystem::PrebuiltWheel => "prebuilt-wheel",
            BuildSystem::SourceOnly => "source-only",
            BuildSystem::RuntimeWheel => "runtime-wheel",
        }
    }

    /// Does the recipe publish wheels it makes (rather than prefix files only)?
    pub fn makes_wheels(self) -> bool {
        matches!(self, BuildSystem::PythonWheel | BuildSystem::PrebuiltWheel | BuildSystem::RuntimeWheel)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BuildSpec {
    pub system: BuildSystem,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub steps: Vec<String>,
    pub memory_per_job_gb: f64,
    pub requirements: Vec<String>,
    /// python-wheel: projects (by name) whose wheels, built by the recipe's build dependencies,
    /// are installed into the build venv before the build; never taken from an index.
    pub install_wheels: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WhenUnsupported {
    Error,
    Skip,
    Substitute,
    /// Built for the requested targets as the recipe's `[stand-in]` says: a library without
    /// device code of its own (hipBLASLt without Tensile), so dependents configure and link.
    StandIn,
}

/// Which GPU targets a component can be built for, and what happens when none requested is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetPolicy {
    pub gpu: bool,
    /// `None`: every known target.
    pub supported: Option<TargetSet>,
    pub when_unsupported: WhenUnsupported,
    pub substitute: TargetSet,
    pub reason: Option<String>,
    /// Installed files (paths or globs) that must carry device code for every target built
    /// (checked after the build: [`crate::offload::coverage`]).
    pub device_code: Vec<String>,
    /// Installed files (paths or globs) that must contain a text: path -> text.
    pub must_contain: BTreeMap<String, String>,
}

/// What a component will really be built for, given the requested targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum TargetDecision {
    /// Host code only: targets do not apply.
    HostOnly,
    /// A source tree only: nothing is compiled.
    SourceOnly,
    /// Built for these; `dropped` were requested but are not supported.
    Build { targets: TargetSet, dropped: TargetSet },
    /// None requested is supported: built for other targets so dependents can link.
    Substitute { targets: TargetSet, reason: String },
    /// None requested is supported: built for them as the recipe's `[stand-in]` says (its args,
    /// checks and estimate), a library without the device code it has none of for them.
    StandIn { targets: TargetSet, reason: String },
    /// None requested is supported: not built.
    Skip { reason: String },
    /// None requested is supported and the recipe has no fallback.
    Unsupported { reason: String },
}

impl Serialize for TargetSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.names().serialize(s)
    }
}

impl TargetPolicy {
    pub fn decide(&self, requested: &TargetSet) -> TargetDecision {
        if !self.gpu {
            return TargetDecision::HostOnly;
        }
        let Some(supported) = &self.supported else {
            return TargetDecision::Build { targets: requested.clone(), dropped: TargetSet::default() };
        };
        let targets = requested.intersection(supported);
        if !targets.is_empty() {
            let dropped = TargetSet::from_targets(requested.iter().filter(|t| !targets.contains(*t)));
            return TargetDecision::Build { targets, dropped };
        }
        let reason = self.reason.clone().unwrap_or_else(|| format!("supports only {}", supported.comma_list()));
        match self.when_unsupported {
            WhenUnsupported::Error => TargetDecision::Unsupported { reason },
            WhenUnsupported::Skip => TargetDecision::Skip { reason },
            WhenUnsupported::Substitute => TargetDecision::Substitute { targets: self.substitute.clone(), reason },
            WhenUnsupported::StandIn => TargetDecision::StandIn { targets: requested.clone(), reason },
        }
    }
}

impl TargetDecision {
    /// The targets compiled for, if any.
    pub fn targets(&self) -> Option<&TargetSet> {
        match self {
            TargetDecision::Build { targets, .. }
            | TargetDecision::Substitute { targets, .. }
            | TargetDecision::StandIn { targets, .. } => Some(targets),
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            TargetDecision::HostOnly => "host only".into(),
            TargetDecision::SourceOnly => "none (source tree only)".into(),
            TargetDecision::Build { targets, dropped } if dropped.is_empty() => targets.comma_list(),
            TargetDecision::Build { targets, dropped } => {
                format!("{} (not {}: unsupported)", targets.comma_list(), dropped.comma_list())
            }
            TargetDecision::Substitute { targets, reason } => format!("{} instead ({reason})", targets.comma_list()),
            TargetDecision::StandIn { targets, reason } => {
                format!("{}, as a stand-in without kernels (`[stand-in]`: {reason})", targets.comma_list())
            }
            TargetDecision::Skip { reason } => format!("skipped ({reason})"),
            TargetDecision::Unsupported { reason } => format!("UNSUPPORTED ({reason})"),
        }
    }
}

/// One need of a recipe's consumers (`[[provides]]`): files it must install, or a path one of
/// its programs must print, each matched in the installed tree before the artifact is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provide {
    pub what: String,
    /// `<recipe>: <upstream file:line>` of each consumer that takes it.
    pub consumers: Vec<String>,
    /// Paths or globs relative to the prefix; `{target}` / `{target_isa}` expand per target.
    pub files: Vec<String>,
    /// A program the recipe installs (prefix-relative) and its arguments: the last line it prints
    /// is a path that must exist.
    pub query: Vec<String>,
}

/// The files of a check's folder: (path relative to it, content).
pub type FolderFiles = Vec<(String, Vec<u8>)>;

/// A check after install (`[[check]]`): shell lines run as a step of the recipe's build, in a
/// fresh copy of `recipes/<stack>/checks/<files>/`, and files there whose device code must
/// carry every target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostCheck {
    pub name: String,
    /// The files copied into the check's directory: (path relative to it, content).
    #[serde(skip)]
    pub files: FolderFiles,
    /// `helpers`: the shared folder's name and its files, copied beside the check's directory
    /// (`<check dir>/../<name>/`).
    #[serde(skip)]
    pub helpers: Option<(String, FolderFiles)>,
    pub steps: Vec<String>,
    pub device_code: Vec<String>,
    pub estimate: Option<CheckEstimate>,
}

impl PostCheck {
    /// Where the helpers of a check run in `dir` are laid out, and their files: beside it
    /// (`<dir>/../<helpers>/`), where the check's code finds them as in the recipe tree.
    pub fn helpers_beside(&self, dir: &std::path::Path) -> Option<(std::path::PathBuf, &FolderFiles)> {
        self.helpers.as_ref().map(|(name, files)| (dir.parent().unwrap_or(dir).join(name), files))
    }
}

/// A check's work in the night's model (`[[check]] estimate`): seconds it takes whatever the jobs
/// (a configure, one long compile), and core-seconds per requested target spread over the jobs.
/// It lengthens its recipe: the check runs after the install, before the recipe counts as built.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckEstimate {
    pub serial_seconds: f64,
    pub core_seconds_per_target: f64,
    pub source: String,
}

/// `[stand-in]`: what the build of a stand-in adds to (args, checks) or replaces in (estimate)
/// the recipe; its device-code declarations (`[targets] device-code`, `must-contain`) do not
/// apply to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StandIn {
    pub args: Vec<String>,
    pub checks: Vec<PostCheck>,
    pub estimate: Option<Estimate>,
    /// What of `[stand-in]` enters the stand-in build's key (its table without estimates, its
    /// checks' files), added to the recipe's own [`Recipe::canonical`] by [`Recipe::as_built`];
    /// the real build's key does not hold it.
    #[serde(skip)]
    pub canonical: String,
}

/// A recipe's work in the night's model (`[estimate]`): wall minutes more jobs do not shorten,
/// and core-hours of compiling spread over its jobs; what it downloads and the disk it takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub serial_minutes: f64,
    pub parallel_core_hours: f64,
    pub download_mb: f64,
    pub disk_gb: f64,
    pub source: Option<String>,
}

/// `[runtime-wheel]`: the wheel of a `runtime-wheel` recipe (issue 38): the files its build
/// dependencies installed that the stack's other wheels load (libraries, their data), laid out
/// below `root` in `site-packages` as they lie below the prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuntimeWheelSpec {
    /// The wheel's project name (`rocmforge-rocm-runtime`).
    pub project: String,
    /// Its folder in `site-packages` (`rocmforge_rocm`); wheels of one stack may share one.
    pub root: String,
    /// Per build dependency, the paths or globs of its installed files (prefix-relative; a dependency
    /// taken from an installation: relative to it) that go in; `{target}` in an entry repeats it
    /// for each requested target, and such an entry may match nothing (no database for gfx1010).
    pub files: BTreeMap<String, Vec<String>>,
    /// The stack profile whose settings the wheel makes at interpreter start (a `.pth` file).
    pub profile: Option<String>,
}

/// How to recognise this component in an installed ROCm (`--rocm-path`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExternalSpec {
    pub cmake_package: Option<String>,
    pub files: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stand_in_stack(recipe: &str) -> Result<Stack, String> {
        let files = BTreeMap::from([
            (
                "recipes/t/stack.toml".to_string(),
                b"[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n"
                    .to_vec(),
            ),
            ("recipes/checks/probe/check.sh".to_string(), b"true\n".to_vec()),
            (
                "recipes/t/a.toml".to_string(),
                format!(
                    "[package]\nname = \"a\"\nversion = \"1\"\nsummary = \"a\"\n[build]\nsystem = \"cmake\"\nargs = [\"-DX=1\"]\n{recipe}"
                )
                .into_bytes(),
            ),
        ]);
        load_stack(&RecipeTree::from_files(Origin::Embedded, files), "t").map_err(|d| d.to_string())
    }

    const STAND_IN: &str =
        "[targets]\nsupported = [\"gfx90a\"]\nwhen-unsupported = \"stand-in\"\ndevice-code = [\"lib/x/*.co\"]\n\
        [estimate]\nserial-minutes = 10.0\nparallel-core-hours = 12.0\n\
        [stand-in]\nargs = [\"-DWITH_KERNELS=OFF\"]\n\
        [[stand-in.check]]\nname = \"probe\"\nfiles = \"probe\"\nsteps = [\"sh check.sh\"]\n\
        [stand-in.estimate]\nserial-minutes = 4.0\nparallel-core-hours = 0.1\n";

    #[test]
    fn a_stand_in_is_built_with_its_args_checks_and_estimate_and_no_device_code() {
        let s = stand_in_stack(STAND_IN).unwrap();
        let r = &s.recipes["a"];
        let gfx10 = TargetSet::parse("gfx1010").unwrap();
        let decision = r.targets.decide(&gfx10);
        assert!(matches!(&decision, TargetDecision::StandIn { targets, .. } if *targets == gfx10), "{decision:?}");
        let built = r.as_built(&decision);
        assert_eq!(built.build.args, ["-DX=1", "-DWITH_KERNELS=OFF"]);
        assert_eq!(built.checks.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["probe"]);
        assert_eq!(built.estimate.as_ref().map(|e| e.parallel_core_hours), Some(0.1));
        assert!(built.targets.device_code.is_empty());
        // A target with kernels: the recipe as written.
        let real = r.targets.decide(&TargetSet::parse("gfx1010,gfx90a").unwrap());
        assert!(matches!(real, TargetDecision::Build { .. }), "{real:?}");
        let built = r.as_built(&real);
        assert_eq!((built.build.args.len(), built.checks.len()), (1, 0));
        assert_eq!(built.estimate.as_ref().map(|e| e.parallel_core_hours), Some(12.0));
        assert_eq!(built.targets.device_code, ["lib/x/*.co"]);
        // What each build's key holds (`as_built(..).canonical`): the stand-in's estimate is no
        // cache input; its args are, of the stand-in's build only.
        let content = |s: &Stack, d: &TargetDecision| s.recipes["a"].as_built(d).canonical.clone();
        let other_estimate =
            stand_in_stack(&STAND_IN.replace("parallel-core-hours = 0.1", "parallel-core-hours = 0.3")).unwrap();
        assert_eq!(content(&other_estimate, &decision), content(&s, &decision));
        // Nor is a stand-in check's estimate, as a `[[check]]`'s is not.
        let check_estimate = |secs: u32| {
            STAND_IN.replace(
                "steps = [\"sh check.sh\"]\n",
                &format!("steps = [\"sh check.sh\"]\nestimate = {{ serial-seconds = {secs}, source = \"s\" }}\n"),
            )
        };
        assert_eq!(
            content(&stand_in_stack(&check_estimate(6)).unwrap(), &decision),
            content(&stand_in_stack(&check_estimate(60)).unwrap(), &decision)
        );
        let other_args = stand_in_stack(&STAND_IN.replace("WITH_KERNELS=OFF", "WITH_KERNELS=NO")).unwrap();
        assert_ne!(content(&other_args, &decision), content(&s, &decision));
        assert_ne!(content(&s, &decision), content(&s, &real), "the two builds differ in content too");
        // The real build does not see the stand-in's table: changing it rebuilds no real library.
        assert_eq!(content(&other_args, &real), content(&s, &real));
    }

    #[test]
    fn supported_targets_hold_the_default_ones() {
        let stack = |extra: &str| {
            let files = BTreeMap::from([(
                "recipes/t/stack.toml".to_string(),
                format!("[stack]\nname = \"t\"\nrocm-version = \"7\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n{extra}")
                    .into_bytes(),
            )]);
            load_stack(&RecipeTree::from_files(Origin::Embedded, files), "t").map_err(|d| d.to_string())
        };
        let s = stack("supported-targets = [\"gfx1010\", \"gfx1012\"]\n").unwrap();
        assert_eq!(s.supported_targets.map(|t| t.comma_list()).as_deref(), Some("gfx1010,gfx1012"));
        assert_eq!(stack("").unwrap().supported_targets, None, "without the line: any target");
        let e = stack("supported-targets = [\"gfx1030\"]\n").unwrap_err();
        assert!(e.contains("`default-targets` names gfx1010, which is not among `supported-targets` (gfx1030)"), "{e}");
        let e = stack("supported-targets = []\n").unwrap_err();
        assert!(e.contains("`supported-targets` is empty") && e.contains("stack.toml:6:"), "{e}");
    }

    #[test]
    fn the_stand_in_mode_and_its_table_come_together() {
        let e = stand_in_stack("[targets]\nsupported = [\"gfx90a\"]\nwhen-unsupported = \"stand-in\"\n").unwrap_err();
        assert!(e.contains("`when-unsupported = \"stand-in\"` needs a `[stand-in]` table"), "{e}");
        let e = stand_in_stack("[targets]\nsupported = [\"gfx90a\"]\n[stand-in]\nargs = [\"-DX=0\"]\n").unwrap_err();
        assert!(e.contains("`[stand-in]` is declared, but `[targets] when-unsupported` is not \"stand-in\""), "{e}");
        let e = stand_in_stack("[targets]\nwhen-unsupported = \"stand-in\"\n[stand-in]\n").unwrap_err();
        assert!(e.contains("`[stand-in]` adds no `args` and no `check`"), "{e}");
        let e = stand_in_stack(&STAND_IN.replace("sh check.sh", "sh {nope}")).unwrap_err();
        assert!(e.contains("nope"), "a stand-in check's steps are checked like the others: {e}");
    }

    #[test]
    fn url_file_names() {
        assert_eq!(url_file_name("https://x.org/a/b-1.0.tar.gz?x=1"), "b-1.0.tar.gz");
        assert_eq!(url_file_name("https://x.org/"), "download");
        // Wheel names keep their local label, however the URL spells the `+`.
        assert_eq!(
            url_file_name("https://d.org/whl/torch-2.5.1%2Brocm6.2-cp311-cp311-linux_x86_64.whl"),
            "torch-2.5.1+rocm6.2-cp311-cp311-linux_x86_64.whl"
        );
        assert_eq!(
            url_file_name("https://d.org/whl/torch-2.5.1+rocm6.2-cp311-cp311-linux_x86_64.whl"),
            "torch-2.5.1+rocm6.2-cp311-cp311-linux_x86_64.whl"
        );
        assert_eq!(url_file_name("file:///srv/mirror/a%20b.whl"), "a b.whl");
        // Never a path: escaped separators, dot segments and bad escapes are not names.
        assert_eq!(url_file_name("https://x.org/a/..%2F..%2Fetc%2Fpasswd"), "download");
        assert_eq!(url_file_name("https://x.org/a/%2E%2E"), "download");
        assert_eq!(url_file_name("https://x.org/a/b%5Cc"), "download");
        assert_eq!(url_file_name("https://x.org/a/b%00c"), "download");
        assert_eq!(url_file_name("https://x.org/a/%FF.whl"), "download");
    }
}
