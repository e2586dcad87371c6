//! A result never depends on timing: recipes whose CMake looks for a package another recipe of
//! the stack installs, built in both forced orders (`ROCMFORGE_SCHEDULE=name` starts `x*`
//! before `y`, `reverse-name` starts `y` first) with real cmake/ninja, in cmake recipes and in
//! a script recipe running CMake itself. Undeclared: the same failure naming the missing edge in
//! both orders; declared, or kept from looking: the same artifacts, byte for byte.

use std::path::{Path, PathBuf};

use crate::support::archive::{gz, tar_of};
use crate::support::{rocmforge, tree_bytes};

/// `y` installs a real CMake package `Y` (`lib/cmake/Y/YConfig.cmake`) and says so
/// (`[package] cmake-packages`). Every `x*` recipe builds one project that runs
/// `find_package(Y ${Y_MODE})` and installs which Y it saw: `x` QUIET and `xr` REQUIRED without
/// depending on `y`; `xd` QUIET depending on `y`; `xo` QUIET without the edge but with
/// `-DCMAKE_DISABLE_FIND_PACKAGE_Y=ON`; `xs`, a script recipe, QUIET from its own steps.
struct Stack {
    dir: tempfile::TempDir,
}

const X_CMAKE: &str = r#"cmake_minimum_required(VERSION 3.16)
project(x LANGUAGES NONE)
find_package(Y ${Y_MODE})
if(Y_FOUND)
  set(uses "with Y ${Y_VERSION}")
else()
  set(uses "without Y")
endif()
file(WRITE ${CMAKE_BINARY_DIR}/uses.txt "${uses}\n")
install(FILES ${CMAKE_BINARY_DIR}/uses.txt DESTINATION share/${OUT})
"#;

const Y_CMAKE: &str = r#"cmake_minimum_required(VERSION 3.16)
project(y VERSION 1.0 LANGUAGES NONE)
install(FILES YConfig.cmake DESTINATION lib/cmake/Y)
install(FILES y.txt DESTINATION share/y)
"#;

fn tarball(dir: &Path, name: &str, files: &[(&str, &str)]) -> (String, String) {
    let entries: Vec<(String, &[u8])> = files.iter().map(|(n, t)| (format!("{name}/{n}"), t.as_bytes())).collect();
    let refs: Vec<(&str, tar::EntryType, Option<&str>, &[u8])> =
        entries.iter().map(|(n, d)| (n.as_str(), tar::EntryType::Regular, None, *d)).collect();
    let bytes = gz(&tar_of(&refs));
    let path = dir.join(format!("{name}.tar.gz"));
    std::fs::write(&path, &bytes).unwrap();
    (format!("file://{}", path.display()), hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)))
}

impl Stack {
    fn new() -> Stack {
        let dir = tempfile::tempdir().unwrap();
        let sources = dir.path().join("sources");
        std::fs::create_dir_all(&sources).unwrap();
        let x = tarball(&sources, "x-1.0", &[("CMakeLists.txt", X_CMAKE)]);
        let y = tarball(
            &sources,
            "y-1.0",
            &[("CMakeLists.txt", Y_CMAKE), ("YConfig.cmake", "set(Y_VERSION 1.0)\n"), ("y.txt", "y\n")],
        );
        let recipes = dir.path().join("tree/recipes/undeclared");
        std::fs::create_dir_all(&recipes).unwrap();
        std::fs::write(
            recipes.join("stack.toml"),
            "[stack]\nname = \"undeclared\"\nrocm-version = \"0.0\"\nsummary = \"find_package of another recipe's package\"\ndefault-targets = [\"gfx1010\"]\n",
        )
        .unwrap();
        let recipe = |name: &str, source: &(String, String), deps: &str, args: &str, extra: &str| {
            std::fs::write(
                recipes.join(format!("{name}.toml")),
                format!(
                    "[package]\nname = \"{name}\"\nversion = \"1.0\"\nsummary = \"s\"\n\n[source]\nurl = \"{}\"\nsha256 = \"{}\"\n\n[dependencies]\nbuild = [{deps}]\n\n[build]\nsystem = \"cmake\"\nargs = [{args}]\n\n[targets]\ngpu = false\n{extra}",
                    source.0, source.1
                ),
            )
            .unwrap();
        };
        recipe("x", &x, "", "\"-DY_MODE=QUIET\", \"-DOUT=x\"", "");
        recipe("xr", &x, "", "\"-DY_MODE=REQUIRED\", \"-DOUT=xr\"", "");
        recipe("xd", &x, "\"y\"", "\"-DY_MODE=QUIET\", \"-DOUT=xd\"", "");
        recipe("xo", &x, "", "\"-DY_MODE=QUIET\", \"-DOUT=xo\", \"-DCMAKE_DISABLE_FIND_PACKAGE_Y=ON\"", "");
        // A script recipe whose steps run CMake (as PyTorch's setup.py does): its cache is
        // checked after the steps.
        std::fs::write(
            recipes.join("xs.toml"),
            format!(
                "[package]\nname = \"xs\"\nversion = \"1.0\"\nsummary = \"s\"\n\n[source]\nurl = \"{}\"\nsha256 = \"{}\"\n\n[build]\nsystem = \"script\"\nsteps = [\"cmake -G Ninja -S {{src}} -B {{build}}/cmake -DY_MODE=QUIET -DOUT=xs\", \"cmake --build {{build}}/cmake\", \"cmake --install {{build}}/cmake --prefix {{stage}}\"]\n\n[targets]\ngpu = false\n",
                x.0, x.1
            ),
        )
        .unwrap();
        // y says it installs CMake package Y, so a search for Y is known to be y's even before y
        // is built. Its installed-ROCm spec names a file an old copy of Y lacks: y is built.
        recipe("y", &y, "", "", "\n[external]\nfiles = [\"lib/cmake/Y/YConfig.cmake\", \"share/y/y.txt\"]\n");
        let y_toml = recipes.join("y.toml");
        let text = std::fs::read_to_string(&y_toml).unwrap();
        std::fs::write(&y_toml, text.replacen("summary = \"s\"\n", "summary = \"s\"\ncmake-packages = [\"Y\"]\n", 1))
            .unwrap();
        Stack { dir }
    }

    /// The prefix every build uses (the same path, so the same keys), emptied first.
    fn prefix(&self) -> PathBuf {
        self.dir.path().join("prefix")
    }

    /// `build <recipes> --jobs 1 --keep-going` in a fresh home (cache, work, state) with the
    /// start order forced, into the emptied prefix. Returns (exit code, stderr with the home
    /// scrubbed).
    fn build(&self, order: &str, recipes: &[&str], extra: &[&str]) -> (Option<i32>, String) {
        let home = tempfile::tempdir().unwrap();
        let _ = std::fs::remove_dir_all(self.prefix());
        let out = rocmforge(home.path())
            .env("ROCMFORGE_SCHEDULE", order)
            .arg("--recipes")
            .arg(self.dir.path().join("tree"))
            .args(["--stack", "undeclared", "build", "--jobs", "1", "--keep-going", "--prefix"])
            .arg(self.prefix())
            .args(extra)
            .args(recipes)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).replace(&home.path().display().to_string(), "[HOME]");
        (out.status.code(), err)
    }
}

/// The failure report from `what` on, with how each search ended this time cut from its line.
fn failure(stderr: &str, what: &str) -> String {
    let at = stderr.find(what).unwrap_or_else(|| panic!("no `{what}` in:\n{stderr}"));
    stderr[at..]
        .lines()
        .map(|l| match l.find(" (not found this time").or(l.find(" (found ")) {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn an_undeclared_package_fails_the_same_in_both_orders_and_declared_ones_build_the_same_bytes() {
    let s = Stack::new();
    let all = ["x", "xd", "xo", "xr", "xs", "y"];
    let mut results = Vec::new();
    for order in ["name", "reverse-name"] {
        let (code, err) = s.build(order, &all, &[]);
        assert_eq!(code, Some(1), "{order}:\n{err}");
        // The order really differed: x searched before y was built, or after.
        let how = if order == "name" { "not found this time" } else { "found in the prefix this time" };
        assert!(
            err.contains(&format!("  - CMake package `Y`, which recipe `y` installs ({how}; CMakeCache.txt: Y_DIR=")),
            "{order}:\n{err}"
        );
        let report = failure(&err, "3 recipe(s) failed: x, xr, xs");
        for (r, cache) in [("x", "x/build"), ("xr", "xr/build"), ("xs", "xs/build/cmake")] {
            assert!(
                report.contains(&format!(
                    "{r}: its build looks for what other recipes of the stack install without depending on them: whether it finds them would depend on which recipe happened to finish first, and so would what it builds:\n  - CMake package `Y`, which recipe `y` installs\nfix: add \"y\" to [dependencies] build in recipes/undeclared/{r}.toml; or, if {r} must do without: turn off the option that looks for it, or add \"-DCMAKE_DISABLE_FIND_PACKAGE_Y=ON\" to its [build] args\n(read from `[HOME]/cache/rocmforge/work/undeclared/{cache}/CMakeCache.txt`)"
                )),
                "{order}:\n{report}"
            );
        }
        let prefix = s.prefix();
        assert_eq!(std::fs::read_to_string(prefix.join("share/xd/uses.txt")).unwrap(), "with Y 1.0\n");
        assert_eq!(std::fs::read_to_string(prefix.join("share/xo/uses.txt")).unwrap(), "without Y\n");
        assert!(
            !prefix.join("share/x").exists() && !prefix.join("share/xr").exists(),
            "{order}: a failed recipe deployed"
        );
        results.push((report, tree_bytes(&prefix)));
    }
    // The same failure, and the same artifacts (their manifests hold the keys) byte for byte.
    assert_eq!(results[0].0, results[1].0);
    assert_eq!(results[0].1, results[1].1);
    let manifests: Vec<&str> =
        results[0].1.iter().map(|(p, _)| p.as_str()).filter(|p| p.starts_with(".rocmforge/manifests/")).collect();
    assert_eq!(
        manifests,
        [".rocmforge/manifests/xd.json", ".rocmforge/manifests/xo.json", ".rocmforge/manifests/y.json"]
    );
}

#[test]
fn a_required_package_found_outside_the_prefix_first_fails_the_same_as_found_inside() {
    // An installed ROCm (`--rocm-path`, searched after the prefix) holding an older Y: built
    // before y, xr would silently use it; after y, the prefix's.
    let s = Stack::new();
    let rocm = s.dir.path().join("old-rocm");
    std::fs::create_dir_all(rocm.join("lib/cmake/Y")).unwrap();
    std::fs::write(rocm.join("lib/cmake/Y/YConfig.cmake"), "set(Y_VERSION 0.9)\n").unwrap();
    let rocm_arg = format!("--rocm-path={}", rocm.display());
    let mut reports = Vec::new();
    for (order, how) in
        [("name", "found outside the prefix this time"), ("reverse-name", "found in the prefix this time")]
    {
        let (code, err) = s.build(order, &["xr", "y"], &[&rocm_arg]);
        assert_eq!(code, Some(1), "{order}:\n{err}");
        assert!(err.contains(&format!("which recipe `y` installs ({how}; CMakeCache.txt: Y_DIR=")), "{order}:\n{err}");
        reports.push(failure(&err, "xr: its build looks for"));
        assert_eq!(std::fs::read_to_string(s.prefix().join("share/y/y.txt")).unwrap(), "y\n", "{order}: y was built");
    }
    assert_eq!(reports[0], reports[1]);
}
