//! Undeclared dependencies: a build that uses what a recipe it does not depend on installed.
//!
//! Every recipe of a stack deploys into one prefix, and every build searches it
//! (`CMAKE_PREFIX_PATH`, `PATH`, `PKG_CONFIG_PATH`). A build can therefore find a package it
//! never declared, and then what it builds depends on timing: rocSPARSE's QUIET
//! `find_package(rocblas)` links rocBLAS only if rocBLAS happened to finish first. This module
//! makes that a failure in every order, naming the missing edge and the fix.
//!
//! Two designs were weighed:
//!
//! - (a) Each build sees only its declared closure: a per-recipe view of its dependencies'
//!   artifacts. At another path than the prefix, the view breaks what artifacts embed: ROCm's
//!   CMake package files, pkg-config files, `hipconfig` and RPATHs name the install prefix, so a
//!   dependency's `rocblas-config.cmake` found in the view points back into the real prefix,
//!   where undeclared recipes are, and the build's own `CMAKE_INSTALL_PREFIX` (part of every cache
//!   key) would have to differ from the path it compiles against. At the prefix's own path, the
//!   view needs a mount namespace per build (privileges or user namespaces, which containers
//!   often refuse), and recipes run side by side into that one path.
//! - (b) Detect after configure (chosen). CMake records every search in `CMakeCache.txt`:
//!   `find_package(Y)` leaves `Y_DIR` (the package's folder, or `Y_DIR-NOTFOUND`), `find_library`
//!   and `find_path` leave `FILEPATH`/`PATH` entries. The engine reads the cache after the
//!   `configure` and `build` steps (and after a failed `configure`: a REQUIRED package missing
//!   because its recipe had not finished yet fails there) and fails when the build
//!   1. looked for a CMake package that a recipe of the stack provides but the build's recipe
//!      does not depend on (directly or through its dependencies), whatever came of it: found
//!      in the prefix, not found (the provider had not finished, or is not in this build), or
//!      found outside the prefix (an older copy on the host or in `--rocm-path`): the same
//!      failure in every order;
//!   2. holds a path into the prefix whose files only recipes outside its closure installed
//!      (the deploy manifests, `<prefix>/.rocmforge/manifests/`, say who installed each file):
//!      `find_library`, `find_path`, `pkg_check_modules` results, a `-D` argument.
//!
//!   Which recipe provides a package: its `[package] cmake-packages` and `[external]
//!   cmake-package` (known before it is ever built, which is what makes "not found"
//!   attributable), and every `<Name>Config.cmake` / `<name>-config.cmake` the manifests list.
//!   Artifacts and keys do not change.
//!
//! The fix is the edge (`[dependencies] build`), or keeping the build from looking: the
//! project's option, or CMake's own `-DCMAKE_DISABLE_FIND_PACKAGE_<Pkg>=ON`, which makes
//! `find_package` give up without searching and leaves no `<Pkg>_DIR` entry.
//!
//! Not checked (so still possible): a package of the stack whose name no recipe declares and
//! whose provider has not been deployed yet (not found, and nothing says whose it would be:
//! declare `[package] cmake-packages`); a `find_library`/`find_path` that found nothing (the
//! cache does not say what it looked for); tools run by name from `PATH` (`{prefix}/bin`) and
//! headers or libraries reached by a literal path (`-I{prefix}/include`, a setup.py reading
//! `ROCM_PATH`) without a cache entry; files of recipes that are not in the stack.
//!
//! python-wheel and script recipes: their venv holds only the wheels their declared closure
//! built (`install-wheels`, `--find-links`: see `outputs`) and what `requirements` name from the
//! index, so no wheel leaks between recipes. A CMake run inside their steps (PyTorch's
//! `setup.py` configures `build/`) leaves a `CMakeCache.txt`: every one found up to
//! [`SEARCH_DEPTH`] folders below the source and build dirs is checked after the steps, by the
//! same rules. A setup.py compiling against `{prefix}` directly is not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::deploy::Manifest;
use crate::recipe::{Recipe, Stack};

/// How deep below a python-wheel or script recipe's source and build dirs `CMakeCache.txt`
/// files are looked for (PyTorch's is `build/CMakeCache.txt`).
pub const SEARCH_DEPTH: usize = 3;

/// Where a package a finding names was found this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    NotFound,
    InPrefix,
    Elsewhere,
}

/// One use of what a recipe outside the build's closure provides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The recipe(s) that provide it.
    pub providers: Vec<String>,
    /// The CMake package looked for (from a `<Pkg>_DIR` entry).
    pub package: Option<String>,
    /// The cache entry and its value.
    pub entry: String,
    pub value: String,
    pub found: Found,
}

#[derive(Debug, thiserror::Error)]
#[error("{}", render(self))]
pub struct UndeclaredError {
    pub recipe: String,
    /// The recipe file (`recipes/<stack>/<name>.toml`).
    pub file: String,
    pub cache: PathBuf,
    pub findings: Vec<Finding>,
}

fn render(e: &UndeclaredError) -> String {
    let r = &e.recipe;
    let mut s = format!(
        "{r}: its build looks for what other recipes of the stack install without depending on them: whether it finds them would depend on which recipe happened to finish first, and so would what it builds:"
    );
    for f in &e.findings {
        let by = f.providers.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(" or ");
        let what = match &f.package {
            Some(p) => format!("CMake package `{p}`, which recipe {by} installs"),
            None => format!("`{}`, which recipe {by} installed into the prefix", f.value),
        };
        let how = match f.found {
            Found::NotFound => "not found this time",
            Found::InPrefix => "found in the prefix this time",
            Found::Elsewhere => "found outside the prefix this time",
        };
        s.push_str(&format!("\n  - {what} ({how}; CMakeCache.txt: {}={})", f.entry, f.value));
    }
    let deps: BTreeSet<&str> = e.findings.iter().filter_map(|f| f.providers.first()).map(String::as_str).collect();
    let deps = deps.iter().map(|d| format!("\"{d}\"")).collect::<Vec<_>>().join(", ");
    let packages: BTreeSet<&str> = e.findings.iter().filter_map(|f| f.package.as_deref()).collect();
    let disable = if packages.is_empty() {
        String::new()
    } else {
        format!(
            ", or add {} to its [build] args",
            packages.iter().map(|p| format!("\"-DCMAKE_DISABLE_FIND_PACKAGE_{p}=ON\"")).collect::<Vec<_>>().join(", ")
        )
    };
    s.push_str(&format!(
        "\nfix: add {deps} to [dependencies] build in {}; or, if {r} must do without: turn off the option that looks for it{disable}\n(read from `{}`)",
        e.file,
        e.cache.display()
    ));
    s
}

/// One `NAME:TYPE=VALUE` line of a `CMakeCache.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    pub name: String,
    pub kind: String,
    pub value: String,
}

/// The entries of a `CMakeCache.txt` (comments and malformed lines skipped).
pub fn parse_cache(text: &str) -> Vec<CacheEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with("//") || line.starts_with('#') {
            continue;
        }
        // A quoted name may hold `:` and `=`.
        let (name, rest) = match line.strip_prefix('"') {
            Some(q) => match q.split_once('"') {
                Some((n, rest)) => (n, rest),
                None => continue,
            },
            None => match line.find(':') {
                Some(i) => (&line[..i], &line[i..]),
                None => continue,
            },
        };
        let Some((kind, value)) = rest.strip_prefix(':').and_then(|r| r.split_once('=')) else { continue };
        out.push(CacheEntry { name: name.to_string(), kind: kind.to_string(), value: value.to_string() });
    }
    out
}

/// The recipe and every recipe it depends on, directly or not (build and source dependencies).
pub fn closure<'s>(stack: &'s Stack, recipe: &'s str) -> BTreeSet<&'s str> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![recipe];
    while let Some(n) = todo.pop() {
        if !seen.insert(n) {
            continue;
        }
        if let Some(r) = stack.recipes.get(n) {
            todo.extend(r.all_deps());
        }
    }
    seen
}

/// The CMake package a config file defines: `<Name>Config.cmake` or `<name>-config.cmake`.
fn config_package(file: &str) -> Option<&str> {
    let base = file.rsplit('/').next()?;
    base.strip_suffix("Config.cmake").or_else(|| base.strip_suffix("-config.cmake")).filter(|n| !n.is_empty())
}

/// What the stack's recipes provide: CMake packages by lowercased name, and the prefix's files
/// by path relative to it.
struct Provided<'s> {
    packages: BTreeMap<String, BTreeSet<&'s str>>,
    owners: BTreeMap<&'s str, &'s str>,
}

impl<'s> Provided<'s> {
    fn of(stack: &'s Stack, manifests: &'s [Manifest]) -> Provided<'s> {
        let mut packages: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        for r in stack.recipes.values() {
            let external = r.external.as_ref().and_then(|e| e.cmake_package.as_ref());
            for p in r.cmake_packages.iter().chain(external) {
                packages.entry(p.to_lowercase()).or_default().insert(&r.name);
            }
        }
        let mut owners = BTreeMap::new();
        for m in manifests.iter().filter(|m| stack.recipes.contains_key(&m.recipe)) {
            for f in &m.files {
                owners.insert(f.as_str(), m.recipe.as_str());
                if let Some(p) = config_package(f) {
                    packages.entry(p.to_lowercase()).or_default().insert(&m.recipe);
                }
            }
        }
        Provided { packages, owners }
    }

    /// The recipes that installed `rel` (a file) or the files below it (a folder).
    fn owners_of(&self, rel: &str) -> BTreeSet<&'s str> {
        let mut out: BTreeSet<&str> = self.owners.get(rel).copied().into_iter().collect();
        let dir = format!("{}/", rel.trim_end_matches('/'));
        out.extend(self.owners.range(dir.as_str()..).take_while(|(f, _)| f.starts_with(&dir)).map(|(_, r)| *r));
        out
    }
}

/// `path` relative to `prefix`, when it lies strictly inside it.
fn in_prefix<'p>(path: &'p str, prefix: &str) -> Option<&'p str> {
    let rel = path.strip_prefix(prefix)?.strip_prefix('/')?;
    let rel = rel.trim_end_matches('/');
    (!rel.is_empty()).then_some(rel)
}

/// What the cache `text` of `recipe`'s build shows it using from recipes outside its closure.
pub fn findings(text: &str, recipe: &str, stack: &Stack, prefix: &Path, manifests: &[Manifest]) -> Vec<Finding> {
    let mine = closure(stack, recipe);
    let provided = Provided::of(stack, manifests);
    let prefix = prefix.display().to_string();
    let prefix = prefix.trim_end_matches('/');
    let outside = |set: &BTreeSet<&str>| !set.is_empty() && set.is_disjoint(&mine);
    let mut out = Vec::new();
    for e in parse_cache(text) {
        // INTERNAL and STATIC entries are CMake's own bookkeeping, never a search result.
        if !matches!(e.kind.as_str(), "PATH" | "FILEPATH" | "STRING" | "UNINITIALIZED" | "BOOL") {
            continue;
        }
        // `<Pkg>_DIR` is a package's folder only once find_package(<Pkg>) has typed it `PATH`:
        // one left `UNINITIALIZED` was given on the command line and never looked up (rocminfo's
        // `-DROCM_DIR=<ROCm root>`, its own variable, is no search for rocm-cmake's `ROCM`).
        let package = e.name.strip_suffix("_DIR").filter(|p| !p.is_empty() && e.kind != "UNINITIALIZED");
        let found = if e.value.is_empty() || e.value.ends_with("-NOTFOUND") {
            Found::NotFound
        } else if in_prefix(&e.value, prefix).is_some() {
            Found::InPrefix
        } else {
            Found::Elsewhere
        };
        // 1. A package the stack provides, however the search ended.
        if let Some(p) = package {
            if let Some(by) = provided.packages.get(&p.to_lowercase()).filter(|by| outside(by)) {
                out.push(Finding {
                    providers: by.iter().map(|s| s.to_string()).collect(),
                    package: Some(p.to_string()),
                    entry: e.name.clone(),
                    value: e.value.clone(),
                    found,
                });
                continue;
            }
        }
        // 2. A path into the prefix holding only files of recipes outside the closure.
        let mut by: BTreeSet<&str> = BTreeSet::new();
        for item in e.value.split(';') {
            if let Some(rel) = in_prefix(item, prefix) {
                let owners = provided.owners_of(rel);
                if outside(&owners) {
                    by.extend(owners);
                }
            }
        }
        if !by.is_empty() {
            out.push(Finding {
                providers: by.iter().map(|s| s.to_string()).collect(),
                package: package.filter(|_| e.kind == "PATH").map(str::to_string),
                entry: e.name.clone(),
                value: e.value.clone(),
                found,
            });
        }
    }
    out
}

/// Checks the `CMakeCache.txt` at `cache` (if there is one) of `recipe`'s build.
pub fn check(
    cache: &Path,
    recipe: &Recipe,
    stack: &Stack,
    prefix: &Path,
    manifests: &[Manifest],
) -> Result<(), UndeclaredError> {
    let Ok(text) = std::fs::read_to_string(cache) else { return Ok(()) };
    let findings = findings(&text, &recipe.name, stack, prefix, manifests);
    if findings.is_empty() {
        return Ok(());
    }
    Err(UndeclaredError {
        recipe: recipe.name.clone(),
        file: recipe.file.clone(),
        cache: cache.to_path_buf(),
        findings,
    })
}

/// Every `CMakeCache.txt` at most [`SEARCH_DEPTH`] folders below `dir`, sorted.
pub fn caches_below(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .max_depth(SEARCH_DEPTH + 1)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.file_name() == "CMakeCache.txt")
        .map(|e| e.into_path())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack() -> Stack {
        let recipe = |name: &str, deps: &str, package: &str| {
            let external = if package.is_empty() {
                String::new()
            } else {
                format!("[external]\ncmake-package = \"{package}\"\nfiles = []\n")
            };
            let packages = if name == "tool" { "cmake-packages = [\"Tool\", \"ToolExtra\"]\n" } else { "" };
            (
                format!("recipes/t/{name}.toml"),
                format!(
                    "[package]\nname = \"{name}\"\nversion = \"1\"\nsummary = \"s\"\n{packages}[dependencies]\nbuild = [{deps}]\n[build]\nsystem = \"cmake\"\n[targets]\ngpu = false\n{external}"
                )
                .into_bytes(),
            )
        };
        let files = BTreeMap::from([
            (
                "recipes/t/stack.toml".to_string(),
                b"[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n"
                    .to_vec(),
            ),
            recipe("rocblas", "", "rocblas"),
            recipe("rocsparse", "", "rocsparse"),
            recipe("hipsparse", "\"rocsparse\"", "hipsparse"),
            recipe("tool", "", ""),
        ]);
        let tree = crate::recipe::RecipeTree::from_files(crate::recipe::Origin::Embedded, files);
        crate::recipe::load_stack(&tree, "t").unwrap_or_else(|d| panic!("{d}"))
    }

    fn manifest(recipe: &str, files: &[&str]) -> Manifest {
        Manifest {
            recipe: recipe.into(),
            key: "k".into(),
            files: files.iter().map(|f| f.to_string()).collect(),
            complete: true,
        }
    }

    const HEAD: &str = "# This is the CMakeCache file.\n//Path to a program.\nCMAKE_AR:FILEPATH=/usr/bin/ar\nCMAKE_INSTALL_PREFIX:PATH=/p\nCMAKE_PREFIX_PATH:UNINITIALIZED=/p\nrocsparse_BINARY_DIR:STATIC=/w/build\nCMAKE_FIND_PACKAGE_REDIRECTS_DIR:STATIC=/w/build/CMakeFiles/pkgRedirects\n";

    #[test]
    fn parses_cache_lines_with_quoted_names() {
        let e = parse_cache("// doc\n\"A:B=C\":STRING=x=y\nY_DIR:PATH=Y_DIR-NOTFOUND\nbroken line\n");
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].name.as_str(), e[0].kind.as_str(), e[0].value.as_str()), ("A:B=C", "STRING", "x=y"));
        assert_eq!((e[1].name.as_str(), e[1].value.as_str()), ("Y_DIR", "Y_DIR-NOTFOUND"));
    }

    #[test]
    fn a_package_the_stack_provides_is_a_finding_in_every_order() {
        let s = stack();
        let rocblas = manifest("rocblas", &["lib/cmake/rocblas/rocblas-config.cmake", "lib/librocblas.so"]);
        // rocblas finished first: found in the prefix.
        let found = findings(
            &format!("{HEAD}rocblas_DIR:PATH=/p/lib/cmake/rocblas\n"),
            "rocsparse",
            &s,
            "/p".as_ref(),
            &[rocblas],
        );
        // rocsparse first: not found, and the name still says whose it is.
        let missed =
            findings(&format!("{HEAD}rocblas_DIR:PATH=rocblas_DIR-NOTFOUND\n"), "rocsparse", &s, "/p".as_ref(), &[]);
        // An older rocblas outside the prefix.
        let host = findings(
            &format!("{HEAD}rocblas_DIR:PATH=/opt/rocm/lib/cmake/rocblas\n"),
            "rocsparse",
            &s,
            "/p".as_ref(),
            &[],
        );
        for (f, how) in [(&found, Found::InPrefix), (&missed, Found::NotFound), (&host, Found::Elsewhere)] {
            assert_eq!(f.len(), 1, "{f:?}");
            assert_eq!(
                (f[0].providers.as_slice(), f[0].package.as_deref(), &f[0].found),
                (&["rocblas".to_string()][..], Some("rocblas"), &how)
            );
        }
        let e = UndeclaredError {
            recipe: "rocsparse".into(),
            file: "recipes/t/rocsparse.toml".into(),
            cache: "/w/CMakeCache.txt".into(),
            findings: found,
        };
        let text = e.to_string();
        assert!(text.contains("  - CMake package `rocblas`, which recipe `rocblas` installs (found in the prefix this time; CMakeCache.txt: rocblas_DIR=/p/lib/cmake/rocblas)"), "{text}");
        assert!(text.contains("fix: add \"rocblas\" to [dependencies] build in recipes/t/rocsparse.toml; or, if rocsparse must do without: turn off the option that looks for it, or add \"-DCMAKE_DISABLE_FIND_PACKAGE_rocblas=ON\" to its [build] args"), "{text}");
    }

    /// Found by the real night: rocminfo's recipe passes `-DROCM_DIR={rocm}`, a variable of
    /// rocminfo's own (CMakeLists.txt:8,25 at rocm-6.2.2), and rocminfo never calls
    /// find_package(ROCM): the entry stays `UNINITIALIZED` and names no package search.
    #[test]
    fn a_dir_variable_given_on_the_command_line_and_never_searched_is_no_package() {
        let s = stack();
        let given = format!("{HEAD}rocblas_DIR:UNINITIALIZED=/opt/rocm\n");
        assert_eq!(findings(&given, "rocsparse", &s, "/p".as_ref(), &[]), vec![]);
        // Once find_package(rocblas) ran, CMake typed it PATH: a search, and a finding.
        let searched = format!("{HEAD}rocblas_DIR:PATH=/opt/rocm/lib/cmake/rocblas\n");
        assert_eq!(findings(&searched, "rocsparse", &s, "/p".as_ref(), &[]).len(), 1);
    }

    #[test]
    fn declared_dependencies_direct_or_not_and_host_packages_are_fine() {
        let s = stack();
        let ms = [
            manifest("rocsparse", &["lib/cmake/rocsparse/rocsparse-config.cmake", "include/rocsparse.h"]),
            manifest("tool", &["include/tool.h"]),
        ];
        let text = format!("{HEAD}rocsparse_DIR:PATH=/p/lib/cmake/rocsparse\nfmt_DIR:PATH=/usr/lib/cmake/fmt\nZLIB_LIBRARY:FILEPATH=/usr/lib/libz.so\nhipsparse_DIR:PATH=/p/lib/cmake/hipsparse\nINC:PATH=/p/include\n");
        // hipsparse depends on rocsparse; its own package is its own; /p/include also holds a
        // file of rocsparse (in the closure).
        assert_eq!(findings(&text, "hipsparse", &s, "/p".as_ref(), &ms), []);
    }

    #[test]
    fn a_path_into_the_prefix_is_traced_to_the_recipe_that_installed_it() {
        let s = stack();
        let ms = [manifest("tool", &["lib/libtool.so", "lib/cmake/Gadget/GadgetConfig.cmake", "include/tool/tool.h"])];
        let text = format!("{HEAD}TOOL_LIB:FILEPATH=/p/lib/libtool.so\nTOOL_INC:PATH=/p/include/tool\nGadget_DIR:PATH=/p/lib/cmake/Gadget\nOTHER:FILEPATH=/p/lib/libother.so\n");
        let f = findings(&text, "rocblas", &s, "/p".as_ref(), &ms);
        let got: Vec<(&str, Option<&str>)> = f.iter().map(|f| (f.entry.as_str(), f.package.as_deref())).collect();
        // Gadget, which no recipe declares, is known by its config file once tool is deployed;
        // a file nobody installed is nobody's.
        assert_eq!(got, [("TOOL_LIB", None), ("TOOL_INC", None), ("Gadget_DIR", Some("Gadget"))]);
        assert!(f.iter().all(|f| f.providers == ["tool"]));
        // Before it is deployed, only the names it declares are known.
        let text = format!("{HEAD}Gadget_DIR:PATH=Gadget_DIR-NOTFOUND\ntoolextra_DIR:PATH=toolextra_DIR-NOTFOUND\n");
        let f = findings(&text, "rocblas", &s, "/p".as_ref(), &[]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].entry.as_str(), &f[0].found, f[0].providers.as_slice()),
            ("toolextra_DIR", &Found::NotFound, &["tool".to_string()][..])
        );
    }

    #[test]
    fn config_file_names_give_the_package() {
        assert_eq!(config_package("lib/cmake/hip/hip-config.cmake"), Some("hip"));
        assert_eq!(config_package("lib/cmake/LLVM/LLVMConfig.cmake"), Some("LLVM"));
        assert_eq!(config_package("lib/cmake/hip/hip-config-version.cmake"), None);
        assert_eq!(config_package("lib/cmake/LLVM/LLVMConfigVersion.cmake"), None);
    }
}
