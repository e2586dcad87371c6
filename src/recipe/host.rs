//! `[host]`: what a recipe needs from the machine that builds it, as the recipe states it:
//! Debian/Ubuntu packages (dpkg-style `a | b` alternatives where a name differs between
//! releases), commands on `PATH`, pkg-config modules, headers, and the CMake versions its
//! `CMakeLists.txt` accepts. The stack's Python is the stack's (`stack.toml` `python`).
//!
//! Checked here: what one file can get wrong (names, duplicates, the CMake range, and a build
//! venv's pip `cmake` pin outside that range). Whether a host has them is checked by the `host` module (downstream).

use std::fmt;

use serde::Serialize;
use toml::Spanned;

use super::raw::{FileText, RawHost};
use crate::diagnostic::Diagnostics;

/// What a recipe needs from the host. Not part of the cache key: a need is checked, not built.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostNeeds {
    pub packages: Vec<PackageNeed>,
    pub commands: Vec<String>,
    pub pkg_config: Vec<String>,
    pub headers: Vec<String>,
    /// The CMake versions the project accepts (`>=3.25.2, <4`).
    pub cmake: Option<VersionReq>,
    /// The versions of other host dependencies it builds with (`[host] versions`).
    pub versions: Vec<VersionBound>,
}

/// A host dependency whose version a recipe may bound, each read on the host in one known way
/// (the `host` module): what the compile or the configure really uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bounded {
    /// `BOOST_VERSION` of `boost/version.hpp` in the compiler's include path.
    Boost,
    /// `MSGPACK_VERSION_*` of the C++ library's `msgpack/version_master.hpp` (the C library's
    /// is `version_master.h`, another version).
    MsgpackCxx,
    /// `gcc -dumpfullversion`.
    Gcc,
}

impl Bounded {
    pub const ALL: [Bounded; 3] = [Bounded::Boost, Bounded::MsgpackCxx, Bounded::Gcc];

    pub fn name(self) -> &'static str {
        match self {
            Bounded::Boost => "boost",
            Bounded::MsgpackCxx => "msgpack-cxx",
            Bounded::Gcc => "gcc",
        }
    }

    pub fn parse(name: &str) -> Option<Bounded> {
        Bounded::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// `[host] versions`: one dependency's versions the recipe builds with, and what a user whose
/// host is outside them can do (`fix`, the recipe's words: a patch, an option; else the
/// dependency's install hint is shown). `lifted_by`: the patch that makes the bound
/// unnecessary; while the recipe's series lists it, the bound is not checked (the loader drops
/// it), so a patch and a bound written apart cannot both hold at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionBound {
    pub dependency: Bounded,
    pub range: VersionReq,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifted_by: Option<String>,
}

impl HostNeeds {
    pub fn is_empty(&self) -> bool {
        self == &HostNeeds::default()
    }
}

/// One package need: any of its alternatives installed satisfies it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "String")]
pub struct PackageNeed(pub Vec<String>);

impl PackageNeed {
    pub fn alternatives(&self) -> &[String] {
        &self.0
    }
}

impl fmt::Display for PackageNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(" | "))
    }
}

impl From<PackageNeed> for String {
    fn from(p: PackageNeed) -> String {
        p.to_string()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Op {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
    /// `!=5.*`: not a version whose leading components are these.
    NotPrefix,
}

/// A version requirement: comma-separated clauses (`>=3.25.2, <4`, `!=5.*`), all of which must
/// hold. Versions compare numerically, component by component, missing ones being 0 (`4` =
/// `4.0.0`); `!=5.*` excludes every version starting with 5.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct VersionReq {
    clauses: Vec<(Op, Vec<u64>)>,
}

impl From<VersionReq> for String {
    fn from(v: VersionReq) -> String {
        v.to_string()
    }
}

/// The numeric components of `3.25.1` (`3.31.4-rc1` -> 3, 31, 4); `None` if the first is not a
/// number.
pub fn version_numbers(v: &str) -> Option<Vec<u64>> {
    let mut out = Vec::new();
    for part in v.trim().split('.') {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            break;
        }
        out.push(digits.parse().ok()?);
        if digits.len() != part.len() {
            break;
        }
    }
    (!out.is_empty()).then_some(out)
}

fn compare(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| a.get(i).unwrap_or(&0).cmp(b.get(i).unwrap_or(&0)))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

impl VersionReq {
    pub fn parse(text: &str) -> Result<VersionReq, String> {
        let mut clauses = Vec::new();
        for c in text.split(',').map(str::trim) {
            if let Some(rest) = c.strip_prefix("!=") {
                let prefix = rest
                    .trim()
                    .strip_suffix(".*")
                    .ok_or_else(|| format!("`{c}`: `!=` takes a version prefix ending in `.*` (`!=5.*`: no 5.x)"))?;
                let v = version_numbers(prefix)
                    .filter(|_| prefix.chars().all(|ch| ch.is_ascii_digit() || ch == '.'))
                    .ok_or_else(|| format!("`{prefix}` is not a version (digits and dots, like `3.25.2`)"))?;
                clauses.push((Op::NotPrefix, v));
                continue;
            }
            let (op, rest) = [(">=", Op::Ge), ("<=", Op::Le), ("==", Op::Eq), (">", Op::Gt), ("<", Op::Lt)]
                .iter()
                .find_map(|(p, op)| c.strip_prefix(p).map(|r| (*op, r.trim())))
                .ok_or_else(|| format!("`{c}` is not a version clause (`>=3.25.2`, `<4`, `!=5.*`)"))?;
            let v = version_numbers(rest)
                .filter(|_| rest.chars().all(|ch| ch.is_ascii_digit() || ch == '.'))
                .ok_or_else(|| format!("`{rest}` is not a version (digits and dots, like `3.25.2`)"))?;
            clauses.push((op, v));
        }
        let req = VersionReq { clauses };
        match req.contradiction() {
            Some(why) => Err(format!("`{text}` holds for no version: {why}")),
            None => Ok(req),
        }
    }

    /// Two clauses no version meets at once (`>=12` and `<5`), said; `None` when some version
    /// meets them all.
    fn contradiction(&self) -> Option<String> {
        let show = |c: &(Op, Vec<u64>)| VersionReq { clauses: vec![c.clone()] }.to_string();
        // An exact version either meets every clause or none can.
        if let Some(eq) = self.clauses.iter().find(|(op, _)| *op == Op::Eq) {
            let v = eq.1.iter().map(u64::to_string).collect::<Vec<_>>().join(".");
            return self
                .clauses
                .iter()
                .find(|c| !VersionReq { clauses: vec![(*c).clone()] }.matches(&v))
                .map(|c| format!("`{}` and `{}` exclude each other", show(eq), show(c)));
        }
        let lower = self.clauses.iter().filter(|(op, _)| matches!(op, Op::Ge | Op::Gt));
        let upper: Vec<&(Op, Vec<u64>)> = self.clauses.iter().filter(|(op, _)| matches!(op, Op::Lt | Op::Le)).collect();
        for lo in lower {
            for hi in &upper {
                let o = compare(&lo.1, &hi.1);
                if o.is_gt() || (o.is_eq() && (lo.0 == Op::Gt || hi.0 == Op::Lt)) {
                    return Some(format!("`{}` and `{}` exclude each other", show(lo), show(hi)));
                }
            }
        }
        None
    }

    /// Whether `version` (`3.25.1`, as `cmake --version` prints it) satisfies every clause.
    pub fn matches(&self, version: &str) -> bool {
        let Some(v) = version_numbers(version) else { return false };
        self.clauses.iter().all(|(op, want)| {
            let o = compare(&v, want);
            match op {
                Op::Ge => o.is_ge(),
                Op::Gt => o.is_gt(),
                Op::Le => o.is_le(),
                Op::Lt => o.is_lt(),
                Op::Eq => o.is_eq(),
                Op::NotPrefix => v.len() < want.len() || v[..want.len()] != want[..],
            }
        })
    }

    /// Whether some clause bounds the version from above.
    pub fn has_upper_bound(&self) -> bool {
        self.clauses.iter().any(|(op, _)| matches!(op, Op::Lt | Op::Le | Op::Eq))
    }

    /// The requirement every one of `reqs` makes at once (their clauses together).
    pub fn all_of<'a>(reqs: impl IntoIterator<Item = &'a VersionReq>) -> Option<VersionReq> {
        let clauses: Vec<(Op, Vec<u64>)> = reqs.into_iter().flat_map(|r| r.clauses.iter().cloned()).collect();
        if clauses.is_empty() {
            return None;
        }
        // Keep only the tightest lower and upper bounds, so the text stays short.
        let lower = clauses
            .iter()
            .filter(|(op, _)| matches!(op, Op::Ge | Op::Gt))
            .max_by(|a, b| compare(&a.1, &b.1).then((a.0 == Op::Gt).cmp(&(b.0 == Op::Gt))));
        let upper = clauses
            .iter()
            .filter(|(op, _)| matches!(op, Op::Lt | Op::Le))
            .min_by(|a, b| compare(&a.1, &b.1).then((a.0 == Op::Le).cmp(&(b.0 == Op::Le))));
        let mut exact: Vec<&(Op, Vec<u64>)> =
            clauses.iter().filter(|(op, _)| matches!(op, Op::Eq | Op::NotPrefix)).collect();
        exact.dedup();
        let kept = lower.into_iter().chain(exact).chain(upper).cloned().collect();
        Some(VersionReq { clauses: kept })
    }
}

impl fmt::Display for VersionReq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .clauses
            .iter()
            .map(|(op, v)| {
                let wild = if *op == Op::NotPrefix { ".*" } else { "" };
                let op = match op {
                    Op::Ge => ">=",
                    Op::Gt => ">",
                    Op::Le => "<=",
                    Op::Lt => "<",
                    Op::Eq => "==",
                    Op::NotPrefix => "!=",
                };
                format!("{op}{}{wild}", v.iter().map(u64::to_string).collect::<Vec<_>>().join("."))
            })
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// A patch file name as a series lists it: no folder, ends in `.patch`.
fn is_patch_name(s: &str) -> bool {
    s.ends_with(".patch") && s.len() > 6 && !s.contains('/') && !s.starts_with('.')
}

/// A Debian package name (Debian policy 5.6.1): lowercase letters, digits, `+`, `-`, `.`,
/// starting with a letter or digit, at least two characters.
fn is_debian_package(s: &str) -> bool {
    s.len() >= 2
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

/// Lowers `[host]`; `requirements` is `[build] requirements`, whose pip `cmake` (a build venv's,
/// first on `PATH`) must stay inside the `cmake` range.
/// `has_patch` says whether the recipe's patch folder holds a file (a bound's `lifted-by`).
pub(super) fn lower_host(
    file: &FileText<'_>,
    raw: RawHost,
    requirements: Option<&Spanned<Vec<String>>>,
    has_patch: &dyn Fn(&str) -> bool,
    diags: &mut Diagnostics,
) -> HostNeeds {
    let mut packages: Vec<PackageNeed> = Vec::new();
    for p in &raw.packages {
        let alts: Vec<String> = p.get_ref().split('|').map(|a| a.trim().to_string()).collect();
        if let Some(bad) = alts.iter().find(|a| !is_debian_package(a)) {
            diags.push(
                file.at(p.span(), format!("`{bad}` is not a Debian package name"))
                    .with_help("lowercase letters, digits, `+`, `-` and `.` (`libnuma-dev`); separate alternatives with `|` (`libmsgpack-cxx-dev | libmsgpack-dev`)"),
            );
            continue;
        }
        let need = PackageNeed(alts);
        if packages.contains(&need) {
            diags.push(file.at(p.span(), format!("package `{need}` is listed twice in `[host] packages`")));
        } else {
            packages.push(need);
        }
    }
    let commands = names(file, "commands", &raw.commands, diags, |s| {
        (!s.is_empty() && !s.contains('/') && !s.chars().any(char::is_whitespace))
            .then_some(())
            .ok_or("a command is a name looked up on PATH (`perl`), without `/` or spaces")
    });
    let pkg_config = names(file, "pkg-config", &raw.pkg_config, diags, |s| {
        (!s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c)))
            .then_some(())
            .ok_or("a pkg-config module name (`libdrm`), as `pkg-config --exists` takes it")
    });
    let headers = names(file, "headers", &raw.headers, diags, |s| {
        (!s.is_empty()
            && !s.starts_with('/')
            && !s.split('/').any(|c| c == ".." || c.is_empty())
            && !s.chars().any(char::is_whitespace))
        .then_some(())
        .ok_or("a header as `#include <...>` names it (`numa.h`, `gelf.h`, `nlohmann/json.hpp`)")
    });
    let cmake = raw.cmake.as_ref().and_then(|c| match VersionReq::parse(c.get_ref()) {
        Ok(r) => Some(r),
        Err(e) => {
            diags
                .push(file.at(c.span(), format!("`cmake = \"{}\"`: {e}", c.get_ref())).with_help(
                    "write the range the project's CMakeLists.txt accepts, e.g. `cmake = \">=3.25.2, <4\"`",
                ));
            None
        }
    });
    if let (Some(range), Some(reqs)) = (&cmake, requirements) {
        check_pip_cmake(file, range, reqs, diags);
    }
    let versions =
        raw.versions.as_ref().map(|v| lower_versions(file, v.get_ref(), has_patch, diags)).unwrap_or_default();
    HostNeeds { packages, commands, pkg_config, headers, cmake, versions }
}

/// `[host] versions`: each key a [`Bounded`] name, each value a range or `{ range, fix }`.
fn lower_versions(
    file: &FileText<'_>,
    table: &std::collections::BTreeMap<String, Spanned<toml::Value>>,
    has_patch: &dyn Fn(&str) -> bool,
    diags: &mut Diagnostics,
) -> Vec<VersionBound> {
    let known = || Bounded::ALL.iter().map(|b| format!("`{}`", b.name())).collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    for (name, value) in table {
        let at = value.span();
        let Some(dependency) = Bounded::parse(name) else {
            let help = if name == "cmake" {
                "the CMake range is its own field: `cmake = \">=3.16, <4\"` in `[host]`".to_string()
            } else {
                format!("rocmforge knows how to read the version of {} on a host", known())
            };
            diags.push(file.at(at, format!("`[host] versions`: unknown dependency `{name}`")).with_help(help));
            continue;
        };
        let (range, fix, lifted_by) = match value.get_ref() {
            toml::Value::String(r) => (r.as_str(), None, None),
            toml::Value::Table(t) => {
                if let Some(k) = t.keys().find(|k| !["range", "fix", "lifted-by"].contains(&k.as_str())) {
                    diags.push(
                        file.at(at, format!("`[host] versions.{name}`: unknown key `{k}`"))
                            .with_help("keys of the table: `range`, `fix`, `lifted-by`"),
                    );
                    continue;
                }
                // A name that is no file there would leave the bound on for good, silently.
                let lifted = t.get("lifted-by").map(|l| l.as_str().filter(|l| is_patch_name(l) && has_patch(l)));
                match (t.get("range").and_then(|r| r.as_str()), t.get("fix").map(|f| f.as_str()), lifted) {
                    (_, _, Some(None)) => {
                        diags.push(
                            file.at(at, format!("`[host] versions.{name}`: `lifted-by` names a patch file of this recipe's directory, and `{}` is none", t.get("lifted-by").map(|l| l.to_string()).unwrap_or_default()))
                                .with_help("a plain file name as `[patches] series` writes it, of a file in patches/<stack>/<recipe>/: `lifted-by = \"0005-boost-1.85.patch\"`"),
                        );
                        continue;
                    }
                    (Some(r), None, l) => (r, None, l.flatten()),
                    (Some(r), Some(Some(f)), l) if !f.trim().is_empty() => (r, Some(f.trim().to_string()), l.flatten()),
                    _ => {
                        diags.push(
                            file.at(
                                at,
                                format!(
                                    "`[host] versions.{name}`: `range` must be a string and `fix` a non-empty string"
                                ),
                            )
                            .with_help(format!(
                                "`{name} = {{ range = \">=1.71, <1.85\", fix = \"what to do outside it\" }}`"
                            )),
                        );
                        continue;
                    }
                }
            }
            _ => {
                diags.push(
                    file.at(at, format!("`[host] versions.{name}`: a range (`\">=1.71, <1.85\"`) or `{{ range = \"...\", fix = \"...\" }}`"))
                        .with_help("`{ range = \">=1.71, <1.85\", fix = \"what to do outside it\" }`"),
                );
                continue;
            }
        };
        match VersionReq::parse(range) {
            Ok(range) => out.push(VersionBound { dependency, range, fix, lifted_by: lifted_by.map(str::to_string) }),
            Err(e) => diags.push(
                file.at(at, format!("`[host] versions.{name} = \"{range}\"`: {e}"))
                    .with_help("clauses separated by commas, all of which must hold: `>=1.71, <1.85`, `!=5.*`"),
            ),
        }
    }
    out
}

/// Plain names of one list, each checked by `valid`, once each.
fn names(
    file: &FileText<'_>,
    field: &str,
    list: &[Spanned<String>],
    diags: &mut Diagnostics,
    valid: impl Fn(&str) -> Result<(), &'static str>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in list {
        let s = item.get_ref();
        if let Err(help) = valid(s) {
            diags.push(file.at(item.span(), format!("`{s}` is not valid in `[host] {field}`")).with_help(help));
        } else if out.contains(s) {
            diags.push(file.at(item.span(), format!("`{s}` is listed twice in `[host] {field}`")));
        } else {
            out.push(s.clone());
        }
    }
    out
}

/// A build venv's `cmake` from PyPI comes first on `PATH`: its pin must satisfy `range` (an
/// unpinned one is whatever PyPI has newest, CMake 4 today).
fn check_pip_cmake(file: &FileText<'_>, range: &VersionReq, reqs: &Spanned<Vec<String>>, diags: &mut Diagnostics) {
    for r in reqs.get_ref() {
        let name_len = r.find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c))).unwrap_or(r.len());
        if !r[..name_len].eq_ignore_ascii_case("cmake") {
            continue;
        }
        let spec = r[name_len..].split(';').next().unwrap_or("").trim();
        let pinned = spec.strip_prefix("==").map(str::trim);
        let problem = match pinned {
            Some(v) if !range.matches(v) => Some(format!(
                "requirement `{r}` installs CMake {v}, outside this recipe's `[host] cmake` range `{range}`"
            )),
            Some(_) => None,
            None if range.has_upper_bound() => Some(format!(
                "requirement `{r}` does not pin CMake, and this recipe needs `{range}`: pip would install the newest"
            )),
            None => None,
        };
        if let Some(msg) = problem {
            diags.push(
                file.at(reqs.span(), msg)
                    .with_help("pin a CMake inside the range (`cmake==3.31.4`); CMake 4 refuses projects declaring `cmake_minimum_required` below 3.5"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ranges() {
        let r = VersionReq::parse(">=3.25.2, <4").unwrap();
        assert!(r.matches("3.25.2") && r.matches("3.31.4") && r.matches("3.28.3"));
        assert!(!r.matches("3.25.1") && !r.matches("4.0.0") && !r.matches("4") && !r.matches("junk"));
        assert!(r.matches("3.30.0-rc1"));
        assert_eq!(r.to_string(), ">=3.25.2, <4");
        assert!(r.has_upper_bound() && !VersionReq::parse(">=3").unwrap().has_upper_bound());
        assert!(VersionReq::parse("3.25").is_err());
        assert!(VersionReq::parse(">=3.x").is_err());
        assert_eq!(
            VersionReq::parse(">=12, <5").unwrap_err(),
            "`>=12, <5` holds for no version: `>=12` and `<5` exclude each other"
        );
        assert!(VersionReq::parse(">=1.85, <1.85").is_err() && VersionReq::parse(">1.85, <=1.85").is_err());
        assert!(VersionReq::parse("==1.74, >=1.80").unwrap_err().contains("`==1.74` and `>=1.80` exclude each other"));
        assert!(VersionReq::parse("==5.1, !=5.*").is_err());
        assert!(VersionReq::parse(">=1.85, <=1.85").unwrap().matches("1.85"));
        assert!(VersionReq::parse("==1.74, >=1.71, <1.85").is_ok());
        let a = VersionReq::parse(">=3.16, <4").unwrap();
        let b = VersionReq::parse(">=3.25.2").unwrap();
        assert_eq!(VersionReq::all_of([&a, &b]).unwrap().to_string(), ">=3.25.2, <4");
        assert!(VersionReq::all_of([]).is_none());
    }

    #[test]
    fn not_prefix_clauses() {
        let r = VersionReq::parse("!=5.*").unwrap();
        assert!(r.matches("4.1.3") && r.matches("6.1.0") && r.matches("50.0") && r.matches("4"));
        assert!(!r.matches("5") && !r.matches("5.0.0") && !r.matches("5.9"));
        let r = VersionReq::parse(">=4, !=5.*, <10").unwrap();
        assert_eq!(r.to_string(), ">=4, !=5.*, <10");
        assert!(r.matches("9.0.0") && !r.matches("5.0.0") && !r.matches("3.3.0") && !r.matches("10.0"));
        let r = VersionReq::parse("!=1.85.*").unwrap();
        assert!(!r.matches("1.85.0") && r.matches("1.86.0") && r.matches("1.8"));
        assert!(VersionReq::parse("!=5").unwrap_err().contains("`!=` takes a version prefix ending in `.*`"));
        let both =
            VersionReq::all_of([&VersionReq::parse("!=5.*, <10").unwrap(), &VersionReq::parse("!=5.*").unwrap()]);
        assert_eq!(both.unwrap().to_string(), "!=5.*, <10");
    }

    #[test]
    fn a_bound_its_own_patch_lifts_is_not_checked() {
        let bound = "[host]\nversions = { boost = { range = \"<1.85\", fix = \"f\", lifted-by = \"0005-boost.patch\" }, gcc = \"<16\" }\n";
        let patch = [("patches/t/a/0005-boost.patch", "--- a/x\n+++ b/x\n")];
        let s = load_with(bound, &patch).unwrap();
        let v = &s.recipes["a"].host.versions;
        assert_eq!(v[0].lifted_by.as_deref(), Some("0005-boost.patch"));
        assert_eq!(v.iter().map(|b| b.dependency).collect::<Vec<_>>(), [Bounded::Boost, Bounded::Gcc]);
        let s = load_with(&format!("[patches]\nseries = [\"0005-boost.patch\"]\n{bound}"), &patch).unwrap();
        assert_eq!(s.recipes["a"].host.versions.iter().map(|b| b.dependency).collect::<Vec<_>>(), [Bounded::Gcc]);
        let e = load("[host]\nversions = { boost = { range = \"<1.85\", lifted-by = \"../x.patch\" } }\n").unwrap_err();
        assert!(
            e.contains("`lifted-by` names a patch file of this recipe's directory") && e.contains("a.toml:8:"),
            "{e}"
        );
        // A name no file of the folder has (a typo) would keep the bound on for good: refused.
        let typo = bound.replace("0005-boost.patch", "0005-bost.patch");
        let e = load_with(&format!("[patches]\nseries = [\"0005-boost.patch\"]\n{typo}"), &patch).unwrap_err();
        assert!(e.contains("and `\"0005-bost.patch\"` is none") && e.contains("a.toml:"), "{e}");
    }

    #[test]
    fn package_names() {
        assert!(
            is_debian_package("g++")
                && is_debian_package("libmsgpack-cxx-dev")
                && is_debian_package("nlohmann-json3-dev")
        );
        assert!(
            !is_debian_package("Libfoo")
                && !is_debian_package("a")
                && !is_debian_package("-x")
                && !is_debian_package("a b")
        );
        assert_eq!(PackageNeed(vec!["a1".into(), "b2".into()]).to_string(), "a1 | b2");
    }

    fn load(recipe: &str) -> Result<crate::recipe::Stack, String> {
        load_with(recipe, &[])
    }

    fn load_with(recipe: &str, extra: &[(&str, &str)]) -> Result<crate::recipe::Stack, String> {
        let mut files = std::collections::BTreeMap::from([
            (
                "recipes/t/stack.toml".to_string(),
                b"[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n"
                    .to_vec(),
            ),
            (
                "recipes/t/a.toml".to_string(),
                format!(
                    "[package]\nname = \"a\"\nversion = \"1\"\nsummary = \"a\"\n[build]\nsystem = \"cmake\"\n{recipe}"
                )
                .into_bytes(),
            ),
        ]);
        files.extend(extra.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())));
        let tree = crate::recipe::RecipeTree::from_files(crate::recipe::Origin::Embedded, files);
        crate::recipe::load_stack(&tree, "t").map_err(|d| d.to_string())
    }

    #[test]
    fn host_table_is_lowered_and_checked_with_positions() {
        let s = load("requirements = [\"cmake==3.31.4\"]\n[host]\npackages = [\"libnuma-dev\", \"libmsgpack-cxx-dev | libmsgpack-dev\"]\ncommands = [\"perl\"]\npkg-config = [\"libdrm\"]\nheaders = [\"nlohmann/json.hpp\"]\ncmake = \">=3.25.2, <4\"\n").unwrap();
        let h = &s.recipes["a"].host;
        assert_eq!(h.packages[1].alternatives(), ["libmsgpack-cxx-dev", "libmsgpack-dev"]);
        assert_eq!(
            (h.commands.as_slice(), h.pkg_config.as_slice(), h.headers.as_slice()),
            (&["perl".to_string()][..], &["libdrm".to_string()][..], &["nlohmann/json.hpp".to_string()][..])
        );
        assert_eq!(h.cmake.as_ref().unwrap().to_string(), ">=3.25.2, <4");
        // [host] is not in the cache key's canonical content.
        let plain = load("requirements = [\"cmake==3.31.4\"]\n").unwrap();
        assert_eq!(s.recipes["a"].canonical, plain.recipes["a"].canonical);

        let e = load("[host]\npackages = [\"libNuma\", \"g++\", \"g++\"]\ncommands = [\"/usr/bin/perl\"]\nheaders = [\"../x.h\"]\ncmake = \"3.25\"\n").unwrap_err();
        for want in [
            "`libNuma` is not a Debian package name",
            "--> <embedded>/recipes/t/a.toml:8:13",
            "package `g++` is listed twice",
            "`/usr/bin/perl` is not valid in `[host] commands`",
            "`../x.h` is not valid in `[host] headers`",
            "`cmake = \"3.25\"`: `3.25` is not a version clause",
        ] {
            assert!(e.contains(want), "{want}\n{e}");
        }
        let s = load("[host]\nversions = { boost = \">=1.71, <1.85\", msgpack-cxx = { range = \"!=5.*\", fix = \"apply patch 0002\" } }\n").unwrap();
        let v = &s.recipes["a"].host.versions;
        assert_eq!(v.len(), 2);
        assert_eq!(
            (v[0].dependency, v[0].range.to_string(), v[0].fix.as_deref()),
            (Bounded::Boost, ">=1.71, <1.85".into(), None)
        );
        assert_eq!(
            (v[1].dependency, v[1].range.to_string(), v[1].fix.as_deref()),
            (Bounded::MsgpackCxx, "!=5.*".into(), Some("apply patch 0002"))
        );
        let e = load("[host]\nversions = { bost = \"<1.85\", cmake = \"<4\", gcc = \"1.2\", boost = { range = \"<2\", why = \"x\" }, msgpack-cxx = 5 }\n").unwrap_err();
        for want in [
            "`[host] versions`: unknown dependency `bost`",
            "a.toml:8:21",
            "`boost`, `msgpack-cxx`, `gcc`",
            "`[host] versions`: unknown dependency `cmake`",
            "the CMake range is its own field",
            "`[host] versions.gcc = \"1.2\"`: `1.2` is not a version clause",
            "`[host] versions.boost`: unknown key `why`",
            "`[host] versions.msgpack-cxx`: a range",
        ] {
            assert!(e.contains(want), "{want}\n{e}");
        }
        let e = load("requirements = [\"cmake==4.0.2\"]\n[host]\ncmake = \">=3.16, <4\"\n").unwrap_err();
        assert!(e.contains("requirement `cmake==4.0.2` installs CMake 4.0.2, outside this recipe's `[host] cmake` range `>=3.16, <4`") && e.contains("a.toml:7:16"), "{e}");
        let e = load("requirements = [\"cmake\"]\n[host]\ncmake = \">=3.16, <4\"\n").unwrap_err();
        assert!(e.contains("does not pin CMake"), "{e}");
    }
}
