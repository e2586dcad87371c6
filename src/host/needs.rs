//! Recipes' `[host]` needs checked against a host: every package (dpkg), command (`PATH`),
//! pkg-config module, header, CMake version and bounded dependency version (`versions`:
//! [`super::versions`]) they state, plus what their build systems imply
//! (`cmake` and `ninja` for cmake recipes, unless a build venv brings them) and the stack's
//! Python. `doctor` prints the result; `build` refuses to start while a need is missing and
//! lists all of them with the command that installs them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::dpkg::Installed;
use super::os::Os;
use super::{python, HostRoot};
use crate::recipe::{Bounded, BuildSystem, PackageNeed, Recipe, VersionBound, VersionReq};

/// Debian packages of the commands builds commonly run, for the install command when a command
/// itself is what is missing.
const COMMAND_PACKAGES: &[(&str, &str)] = &[
    ("cmake", "cmake"),
    ("ninja", "ninja-build"),
    ("perl", "perl"),
    ("pkg-config", "pkg-config"),
    ("g++", "g++"),
    ("c++", "g++"),
    ("gcc", "gcc"),
    ("cc", "gcc"),
    ("git", "git"),
    ("patch", "patch"),
    ("make", "make"),
    ("python3", "python3"),
    ("patchelf", "patchelf"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    Ok,
    Missing,
    /// Not checkable here (package names on a host without dpkg).
    Unchecked,
}

/// One need and what the host has for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NeedCheck {
    /// `package`, `command`, `pkg-config`, `header`, `cmake`, `version`, `python`.
    pub kind: &'static str,
    /// `libnuma-dev`, `libmsgpack-cxx-dev | libmsgpack-dev`, `perl`, `>=3.25.2, <4`,
    /// `boost >=1.71, <1.85`, `3.11`.
    pub name: String,
    /// The recipes that need it (or the stack, for its Python).
    pub recipes: Vec<String>,
    pub state: State,
    /// What satisfies it, or what was found instead (a too-old CMake).
    pub found: Option<String>,
    /// What to do when it is missing, beyond the install command (a bound's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl NeedCheck {
    pub fn describe(&self) -> String {
        let what = match self.kind {
            "cmake" => format!("CMake {}", self.name),
            "python" => format!("Python {}", self.name),
            "version" => self.name.clone(),
            k => format!("{k} {}", self.name),
        };
        let found = match (&self.found, self.state) {
            (Some(f), State::Missing) => format!(": found {f}"),
            _ => String::new(),
        };
        let fix = match (&self.fix, self.state) {
            (Some(f), State::Missing) => format!("\n      what to do: {f}"),
            _ => String::new(),
        };
        format!("{what}{found} (for {}){fix}", self.recipes.join(", "))
    }
}

/// Every need of some recipes, checked.
#[derive(Debug, Clone, Serialize)]
pub struct HostCheck {
    pub os: Os,
    pub needs: Vec<NeedCheck>,
    /// The commands that install what is missing: packages (one command for the distribution),
    /// the stack's Python, a CMake in range.
    pub fixes: Vec<String>,
    /// Why packages were not checked, or that missing headers and modules come from packages.
    pub notes: Vec<String>,
}

impl HostCheck {
    pub fn missing(&self) -> impl Iterator<Item = &NeedCheck> {
        self.needs.iter().filter(|n| n.state == State::Missing)
    }

    pub fn is_ok(&self) -> bool {
        self.missing().next().is_none()
    }

    /// Every missing need, then the commands that install them.
    pub fn problems(&self) -> String {
        let mut s = String::new();
        for n in self.missing() {
            s.push_str(&format!("\n  - {}", n.describe()));
        }
        if !self.fixes.is_empty() {
            s.push_str("\ninstall them (as root for apt-get):");
            for f in &self.fixes {
                s.push_str(&format!("\n  {f}"));
            }
        }
        for n in &self.notes {
            s.push_str(&format!("\nnote: {n}"));
        }
        s
    }
}

fn provides(r: &Recipe, project: &str) -> bool {
    r.build.requirements.iter().any(|q| {
        let n = q.find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c))).unwrap_or(q.len());
        q[..n].eq_ignore_ascii_case(project)
    })
}

/// Checks the needs of `recipes` (the ones that will build) and, when `python` is given, the
/// stack's Python, against the host under `root` and `PATH`.
pub fn check(root: &HostRoot, recipes: &[&Recipe], python: Option<(&str, &str)>) -> HostCheck {
    let os = Os::read(root);
    let dpkg = Installed::read(root);
    let Wanted { packages, commands, modules, headers, cmake, bounds } = Wanted::of(recipes);
    let mut needs = Vec::new();
    let mut notes = Vec::new();
    let mut to_install: Vec<PackageNeed> = Vec::new();
    for (p, rs) in &packages {
        let (state, found) = match &dpkg {
            Some(i) => match i.satisfying(p) {
                Some(a) => (State::Ok, Some(a.to_string())),
                None => (State::Missing, None),
            },
            None => (State::Unchecked, None),
        };
        if state == State::Missing {
            to_install.push(p.clone());
        }
        needs.push(NeedCheck { kind: "package", name: p.to_string(), recipes: rs.clone(), state, found, fix: None });
    }
    if dpkg.is_none() && !packages.is_empty() {
        notes.push(format!(
            "packages were not checked: no dpkg database ({}) on this host ({}); recipes name Debian/Ubuntu packages: install what provides them here",
            super::dpkg::STATUS,
            os.describe()
        ));
    }
    for (c, rs) in &commands {
        let found = super::which(c);
        if found.is_none() {
            if let Some((_, pkg)) = COMMAND_PACKAGES.iter().find(|(cmd, _)| cmd == c) {
                let need = PackageNeed(vec![pkg.to_string()]);
                if !to_install.contains(&need) {
                    to_install.push(need);
                }
            }
        }
        needs.push(NeedCheck {
            kind: "command",
            name: c.clone(),
            recipes: rs.clone(),
            state: if found.is_some() { State::Ok } else { State::Missing },
            found: found.map(|p| p.display().to_string()),
            fix: None,
        });
    }
    let mut fixes = Vec::new();
    needs.extend(cmake_need(&cmake, &mut fixes));
    for (dep, list) in &bounds {
        needs.push(check_bound(root, *dep, list));
    }
    for (kind, list, find) in
        [("pkg-config", &modules, find_pc as fn(&HostRoot, &str) -> Option<PathBuf>), ("header", &headers, find_header)]
    {
        for (name, rs) in list {
            let found = find(root, name);
            needs.push(NeedCheck {
                kind,
                name: name.clone(),
                recipes: rs.clone(),
                state: if found.is_some() { State::Ok } else { State::Missing },
                found: found.map(|p| p.display().to_string()),
                fix: None,
            });
        }
    }
    if needs.iter().any(|n| n.state == State::Missing && (n.kind == "header" || n.kind == "pkg-config")) {
        notes
            .push("headers and pkg-config modules come with -dev packages: `apt-file search <name>` says which".into());
    }
    if let Some((version, stack)) = python {
        let found = python::locate_python(version);
        if found.is_none() {
            fixes.push(python::install_hint(version));
        }
        needs.push(NeedCheck {
            kind: "python",
            name: version.to_string(),
            recipes: vec![format!("stack {stack}")],
            state: if found.is_some() { State::Ok } else { State::Missing },
            found: found.map(|f| format!("{} ({})", f.path.display(), f.via)),
            fix: None,
        });
    }
    let refs: Vec<&PackageNeed> = to_install.iter().collect();
    match os.install_command(&refs) {
        Some(cmd) => fixes.insert(0, cmd),
        None if !to_install.is_empty() => notes.push(format!(
            "rocmforge knows no package names for {}: install the equivalents of the Debian packages {}",
            os.describe(),
            refs.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
        )),
        None => {}
    }
    HostCheck { os, needs, fixes, notes }
}

/// What the recipes need, each need with the recipes that state it (sorted, once each).
struct Wanted<'a> {
    packages: BTreeMap<PackageNeed, Vec<String>>,
    commands: BTreeMap<String, Vec<String>>,
    modules: BTreeMap<String, Vec<String>>,
    headers: BTreeMap<String, Vec<String>>,
    cmake: Vec<(&'a VersionReq, &'a str)>,
    bounds: BTreeMap<Bounded, Vec<(&'a VersionBound, &'a str)>>,
}

impl<'a> Wanted<'a> {
    fn of(recipes: &[&'a Recipe]) -> Wanted<'a> {
        let mut packages: BTreeMap<PackageNeed, Vec<String>> = BTreeMap::new();
        let mut commands: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut modules: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut cmake: Vec<(&VersionReq, &str)> = Vec::new();
        let mut bounds: BTreeMap<Bounded, Vec<(&VersionBound, &str)>> = BTreeMap::new();
        let add = |m: &mut BTreeMap<String, Vec<String>>, k: &str, r: &str| {
            m.entry(k.to_string()).or_default().push(r.to_string())
        };
        for r in recipes {
            let h = &r.host;
            for p in &h.packages {
                packages.entry(p.clone()).or_default().push(r.name.clone());
            }
            for c in &h.commands {
                add(&mut commands, c, &r.name);
            }
            if r.build.system == BuildSystem::RuntimeWheel {
                // It sets the RUNPATH of the libraries it puts in its wheel (`wheel::runtime`).
                add(&mut commands, "patchelf", &r.name);
            }
            if r.build.system == BuildSystem::Cmake {
                for (tool, project) in [("cmake", "cmake"), ("ninja", "ninja")] {
                    if !provides(r, project) {
                        add(&mut commands, tool, &r.name);
                    }
                }
            }
            for m in &h.pkg_config {
                add(&mut modules, m, &r.name);
            }
            for i in &h.headers {
                add(&mut headers, i, &r.name);
            }
            if let Some(range) = &h.cmake {
                if !provides(r, "cmake") {
                    cmake.push((range, &r.name));
                }
            }
            for b in &h.versions {
                bounds.entry(b.dependency).or_default().push((b, &r.name));
            }
        }

        for list in
            packages.values_mut().chain(commands.values_mut()).chain(modules.values_mut()).chain(headers.values_mut())
        {
            list.sort();
            list.dedup();
        }
        Wanted { packages, commands, modules, headers, cmake, bounds }
    }
}

/// The CMake on `PATH` against every recipe's range (the recipes it is outside of, else all of
/// them), with the install line when it is outside; `None` when no recipe states a range or no
/// CMake is on `PATH` (the command check says so).
fn cmake_need(cmake: &[(&VersionReq, &str)], fixes: &mut Vec<String>) -> Option<NeedCheck> {
    if cmake.is_empty() {
        return None;
    }
    let path = super::which("cmake")?;
    let version = super::tool_version(&path).and_then(|l| super::version_in(&l));
    // The recipes whose range this CMake is outside of, else all of them.
    let refusing: Vec<&(&VersionReq, &str)> =
        cmake.iter().filter(|(r, _)| !version.as_deref().is_some_and(|v| r.matches(v))).collect();
    let ok = refusing.is_empty();
    let shown: Vec<&(&VersionReq, &str)> = if ok { cmake.iter().collect() } else { refusing };
    let range = VersionReq::all_of(shown.iter().map(|(r, _)| *r)).expect("at least one range");
    let mut rs: Vec<String> = shown.iter().map(|(_, n)| n.to_string()).collect();
    rs.sort();
    rs.dedup();
    if !ok {
        fixes.push(format!(
            "uv tool install \"cmake{}\"   # then put ~/.local/bin first on PATH",
            range.to_string().replace(' ', "")
        ));
    }
    Some(NeedCheck {
        kind: "cmake",
        name: range.to_string(),
        recipes: rs,
        state: if ok { State::Ok } else { State::Missing },
        found: Some(format!("{} at {}", version.as_deref().unwrap_or("an unknown version"), path.display())),
        fix: None,
    })
}

/// One dependency's bounds, of every recipe stating one, against its version on the host: the
/// recipes whose range it is outside of (else all of them), their ranges together, what was
/// found where, and what to do (each refusing recipe's `fix`, else, or when none is found, how
/// to install one).
fn check_bound(root: &HostRoot, dep: Bounded, list: &[(&VersionBound, &str)]) -> NeedCheck {
    let found = super::versions::read(root, dep);
    let refusing: Vec<&(&VersionBound, &str)> =
        list.iter().filter(|(b, _)| !found.as_ref().is_ok_and(|f| b.range.matches(&f.version))).collect();
    let ok = refusing.is_empty();
    let shown: Vec<&(&VersionBound, &str)> = if ok { list.iter().collect() } else { refusing };
    let range = VersionReq::all_of(shown.iter().map(|(b, _)| &b.range)).expect("at least one bound");
    let mut recipes: Vec<String> = shown.iter().map(|(_, n)| n.to_string()).collect();
    recipes.sort();
    recipes.dedup();
    let mut fixes: Vec<String> = Vec::new();
    for (b, name) in &shown {
        // A recipe's fix speaks of a version outside its range; with none found, installing
        // one is what to do.
        let f = match (&b.fix, &found) {
            (Some(f), Ok(_)) => format!("{name}: {f}"),
            _ => install_hint(dep),
        };
        if !fixes.contains(&f) {
            fixes.push(f);
        }
    }
    NeedCheck {
        kind: "version",
        name: format!("{} {range}", dep.name()),
        recipes,
        state: if ok { State::Ok } else { State::Missing },
        found: Some(match &found {
            Ok(f) => format!("{} ({})", f.version, f.from),
            Err(e) => format!("none ({e})"),
        }),
        fix: (!ok).then(|| fixes.join("; ")),
    }
}

/// How to get another version of `dep` when no recipe says more.
fn install_hint(dep: Bounded) -> String {
    match dep {
        Bounded::Boost => "install a Boost inside the range: Debian/Ubuntu libboost-dev and libboost-filesystem-dev (Debian 12: 1.74; Ubuntu 24.04 and Debian 13: 1.83), or one built from boost.org into /usr/local (its headers come first)".into(),
        Bounded::MsgpackCxx => "install a msgpack-cxx inside the range: Debian/Ubuntu libmsgpack-cxx-dev (Debian 12: 4.1.3; Ubuntu 24.04: 6.1.0; Debian 13: 7.0.0), or one built from msgpack-c's cpp tags into /usr/local".into(),
        Bounded::Gcc => "put a GCC inside the range first on PATH as `gcc` (and `g++`): Debian/Ubuntu gcc-N and g++-N packages, linked or aliased".into(),
    }
}

/// Where pkg-config looks by default on Debian/Ubuntu, plus `PKG_CONFIG_PATH`.
fn find_pc(root: &HostRoot, module: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PKG_CONFIG_PATH")
        .map(|v| std::env::split_paths(&v).map(|p| root.path(p)).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/lib/pkgconfig",
        "/usr/local/share/pkgconfig",
        "/usr/lib/pkgconfig",
        "/usr/share/pkgconfig",
        "/usr/lib64/pkgconfig",
    ] {
        dirs.push(root.path(d));
    }
    dirs.extend(multiarch(root, "/usr/lib").into_iter().map(|d| d.join("pkgconfig")));
    let file = format!("{module}.pc");
    dirs.into_iter().map(|d| d.join(&file)).find(|p| p.is_file())
}

/// Where the compiler looks for `#include <...>` on Debian/Ubuntu.
fn find_header(root: &HostRoot, header: &str) -> Option<PathBuf> {
    let mut dirs = vec![root.path("/usr/local/include"), root.path("/usr/include")];
    dirs.extend(multiarch(root, "/usr/include"));
    dirs.into_iter().map(|d| d.join(header)).find(|p| p.is_file())
}

/// The `<dir>/<triplet>` folder of this machine's own architecture (`/usr/lib/x86_64-linux-gnu`),
/// when there is one: the only one the native compiler and pkg-config search. The folders of
/// other architectures are not (Debian's linux-libc-dev puts 20 or so in `/usr/include`, one per
/// architecture, and a cross package's headers there are not the ones a native build includes).
pub(super) fn multiarch(root: &HostRoot, dir: &str) -> Vec<PathBuf> {
    let d = root.path(dir).join(super::multiarch_triplet());
    if d.is_dir() {
        vec![d]
    } else {
        Vec::new()
    }
}
