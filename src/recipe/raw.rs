//! Stage 0: recipe and stack files as written. TOML is deserialised into these `Raw*` structs,
//! which keep the spans of the values a later message may point at; nothing here is checked
//! beyond what serde checks (syntax, types, unknown and missing fields). [`super::lower`] turns
//! them into the typed model.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use toml::Spanned;

use super::tree::RecipeTree;
use super::{BuildSystem, WhenUnsupported};
use crate::diagnostic::{Diagnostic, Diagnostics};

/// `recipes/<stack>/stack.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStackFile {
    pub stack: RawStack,
    /// `[profile.<name>]`: run-time settings `env` prints and `verify` runs under.
    #[serde(default)]
    pub profile: BTreeMap<String, Spanned<RawProfile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawProfile {
    pub description: String,
    #[serde(default)]
    pub env: BTreeMap<Spanned<String>, String>,
    #[serde(default)]
    pub known_hangs: Vec<Spanned<String>>,
    #[serde(default)]
    pub known_failures: Vec<Spanned<RawKnownFailure>>,
}

/// A `known-failures` entry: a case id, or `{ case = "...", because = "..." }`, a case known to
/// fail only with a message that says `because`.
pub(super) enum RawKnownFailure {
    Id(String),
    Because { case: String, because: String },
}

const KNOWN_FAILURE_FORMS: &str =
    "a known-failures entry is a case id (`\"sdpa\"`) or `{ case = \"sdpa\", because = \"text the case's message holds\" }`";

/// By hand, not `untagged`: serde's untagged enums say only "data did not match any variant",
/// and take keys they do not know.
impl<'de> Deserialize<'de> for RawKnownFailure {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = RawKnownFailure;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(KNOWN_FAILURE_FORMS)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawKnownFailure, E> {
                Ok(RawKnownFailure::Id(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RawKnownFailure, A::Error> {
                use serde::de::Error;
                let (mut case, mut because) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    let slot = match key.as_str() {
                        "case" => &mut case,
                        "because" => &mut because,
                        other => return Err(A::Error::custom(format!("unknown key `{other}`: {KNOWN_FAILURE_FORMS}"))),
                    };
                    if slot.is_some() {
                        return Err(A::Error::custom(format!("`{key}` is given twice: {KNOWN_FAILURE_FORMS}")));
                    }
                    *slot = Some(map.next_value::<String>()?);
                }
                match (case, because) {
                    (Some(case), Some(because)) => Ok(RawKnownFailure::Because { case, because }),
                    (None, _) => Err(A::Error::custom(format!("the entry has no `case`: {KNOWN_FAILURE_FORMS}"))),
                    (Some(case), None) => Err(A::Error::custom(format!(
                        "the entry for `{case}` has no `because` (write the bare id `\"{case}\"` when any failure counts): {KNOWN_FAILURE_FORMS}"
                    ))),
                }
            }
        }
        d.deserialize_any(Entry)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawStack {
    pub name: Spanned<String>,
    pub rocm_version: String,
    pub summary: String,
    pub default_targets: Spanned<Vec<Spanned<String>>>,
    pub supported_targets: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub default: bool,
    pub python: Option<String>,
    pub glibc: Option<Spanned<String>>,
    #[serde(default)]
    pub venv_constraints: Vec<Spanned<String>>,
    #[serde(default)]
    pub venv_skip: Vec<Spanned<String>>,
    pub default_profile: Option<Spanned<String>>,
    pub index_path: Option<Spanned<String>>,
    pub disk_gb: Option<f64>,
    #[serde(default)]
    pub system_libraries: Vec<Spanned<String>>,
}

/// `recipes/<stack>/<name>.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRecipe {
    pub package: RawPackage,
    pub source: Option<Spanned<RawSource>>,
    #[serde(default)]
    pub patches: RawPatches,
    #[serde(default)]
    pub dependencies: RawDeps,
    pub build: RawBuild,
    #[serde(default)]
    pub targets: RawTargets,
    pub external: Option<RawExternal>,
    #[serde(default)]
    pub host: RawHost,
    /// `[[provides]]`: what consumers take from this recipe, checked before its artifact is stored.
    #[serde(default)]
    pub provides: Vec<Spanned<RawProvide>>,
    /// `[[check]]`: programs run after install that prove the output works.
    #[serde(default)]
    pub check: Vec<Spanned<RawCheck>>,
    /// `[estimate]`: how long it builds and what it takes, for `plan`.
    pub estimate: Option<Spanned<RawEstimate>>,
    /// `[stand-in]`: what changes when `when-unsupported = "stand-in"` applies.
    #[serde(rename = "stand-in")]
    pub stand_in: Option<Spanned<RawStandIn>>,
    /// `[runtime-wheel]`: the files of a `runtime-wheel` recipe's wheel.
    #[serde(rename = "runtime-wheel")]
    pub runtime_wheel: Option<Spanned<RawRuntimeWheel>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRuntimeWheel {
    pub project: Option<Spanned<String>>,
    pub root: Option<Spanned<String>>,
    pub files: Spanned<BTreeMap<String, Vec<Spanned<String>>>>,
    pub profile: Option<Spanned<String>>,
}

/// `[stand-in]`: the build of a library without device code, for targets it has no kernels for.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawStandIn {
    /// Appended to `[build] args`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Run after install, after the recipe's own `[[check]]`s.
    #[serde(default)]
    pub check: Vec<Spanned<RawCheck>>,
    /// Replaces `[estimate]`.
    pub estimate: Option<Spanned<RawEstimate>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawProvide {
    pub what: String,
    pub consumers: Vec<Spanned<String>>,
    #[serde(default)]
    pub files: Vec<Spanned<String>>,
    #[serde(default)]
    pub query: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawCheck {
    pub name: Spanned<String>,
    pub files: Option<Spanned<String>>,
    /// A folder of code several checks share, looked up as `files` is and laid out beside the
    /// check's own folder (`../<helpers>/` from it), as the two sit in the recipe tree.
    pub helpers: Option<Spanned<String>>,
    pub steps: Vec<String>,
    #[serde(default)]
    pub device_code: Vec<Spanned<String>>,
    pub estimate: Option<Spanned<RawCheckEstimate>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawCheckEstimate {
    #[serde(default)]
    pub serial_seconds: f64,
    #[serde(default)]
    pub core_seconds_per_target: f64,
    pub source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawEstimate {
    pub serial_minutes: f64,
    #[serde(default)]
    pub parallel_core_hours: f64,
    pub download_mb: Option<f64>,
    pub disk_gb: Option<f64>,
    pub source: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPackage {
    pub name: Spanned<String>,
    pub version: Spanned<String>,
    pub summary: String,
    #[serde(default, rename = "cmake-packages")]
    pub cmake_packages: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawSource {
    pub git: Option<Spanned<String>>,
    pub tag: Option<Spanned<String>>,
    pub rev: Option<Spanned<String>>,
    #[serde(default)]
    pub submodules: bool,
    pub url: Option<Spanned<String>>,
    pub sha256: Option<Spanned<String>>,
    pub strip_components: Option<u32>,
    pub from: Option<Spanned<String>>,
    pub subdir: Option<Spanned<String>>,
    pub index: Option<Spanned<String>>,
    pub project: Option<Spanned<String>>,
    pub version: Option<Spanned<String>>,
    pub witness: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPatches {
    #[serde(default)]
    pub series: Vec<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDeps {
    #[serde(default)]
    pub build: Vec<Spanned<String>>,
    #[serde(default)]
    pub source: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawBuild {
    pub system: BuildSystem,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub steps: Vec<String>,
    pub memory_per_job_gb: Option<f64>,
    pub requirements: Option<Spanned<Vec<String>>>,
    pub install_wheels: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawTargets {
    pub gpu: Option<bool>,
    pub supported: Option<Spanned<Vec<Spanned<String>>>>,
    pub when_unsupported: Option<WhenUnsupported>,
    #[serde(default)]
    pub substitute: Vec<Spanned<String>>,
    pub reason: Option<String>,
    pub device_code: Option<Spanned<Vec<Spanned<String>>>>,
    pub must_contain: Option<Spanned<BTreeMap<String, String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawExternal {
    pub cmake_package: Option<Spanned<String>>,
    #[serde(default)]
    pub files: Vec<Spanned<String>>,
}

/// `[host]`: what the recipe needs from the machine that builds it.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawHost {
    #[serde(default)]
    pub packages: Vec<Spanned<String>>,
    #[serde(default)]
    pub commands: Vec<Spanned<String>>,
    #[serde(default)]
    pub pkg_config: Vec<Spanned<String>>,
    #[serde(default)]
    pub headers: Vec<Spanned<String>>,
    pub cmake: Option<Spanned<String>>,
    /// `versions = { boost = ">=1.71, <1.85", msgpack-cxx = { range = "!=5.*", fix = "..." } }`.
    pub versions: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
}

/// One file's text plus where it is, for diagnostics.
pub(super) struct FileText<'a> {
    pub display: String,
    pub text: &'a str,
}

impl<'a> FileText<'a> {
    /// The text of `rel` (whose content is `bytes`), or a diagnostic if it is not UTF-8.
    pub fn decode(tree: &RecipeTree, rel: &str, bytes: &'a [u8], diags: &mut Diagnostics) -> Option<FileText<'a>> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Some(FileText { display: tree.display_path(rel), text }),
            Err(e) => {
                diags.push(Diagnostic::file(&tree.display_path(rel), format!("not valid UTF-8 ({e})")));
                None
            }
        }
    }

    /// A problem at byte range `span` of this file.
    pub fn at(&self, span: Range<usize>, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::at(&self.display, self.text, span, msg)
    }

    /// A problem about the whole file.
    pub fn whole(&self, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::file(&self.display, msg)
    }
}

/// Deserialises the file, or reports why it cannot be (syntax, types, unknown or missing
/// fields) at the place TOML points at.
pub(super) fn parse<T: DeserializeOwned>(file: &FileText<'_>, diags: &mut Diagnostics) -> Option<T> {
    match toml::from_str(file.text) {
        Ok(raw) => Some(raw),
        Err(e) => {
            diags.push(toml_error(file, e));
            None
        }
    }
}

fn toml_error(file: &FileText<'_>, e: toml::de::Error) -> Diagnostic {
    let msg = e.message().trim_end().to_string();
    let help = if msg.starts_with("unknown field") {
        Some("see recipes/README.md for the fields a recipe may have".to_string())
    } else if msg.starts_with("missing field") {
        Some("add the field; see recipes/README.md".to_string())
    } else {
        None
    };
    let d = match e.span() {
        Some(span) => file.at(span, msg),
        None => file.whole(msg),
    };
    match help {
        Some(h) => d.with_help(h),
        None => d,
    }
}
