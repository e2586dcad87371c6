//! The short night (`--rocm-path`): an installed ROCm stands in for a recipe only when its
//! version matches, the recipe is unpatched and its installed device code carries the requested
//! targets. The stand-in installation is made of real parts: libraries compiled by hipcc for
//! chosen targets, CMake package files, `.info/version`; the recipe rebuilt on top of it finds
//! the installation's packages in CMake, links against them and runs.

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use serde_json::Value;

use crate::support::rocmforge;

const STACK: &str = "[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\ndefault = true\n";

fn run(cmd: &mut Process) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The C source of library `name`: a kernel, and `<name>_origin()` saying which copy it is.
fn lib_source(name: &str, origin: &str) -> String {
    format!(
        "#include <hip/hip_runtime.h>\n__global__ void {name}_kernel(float* x) {{ x[threadIdx.x] *= 2.0f; }}\nextern \"C\" const char* {name}_origin() {{ return \"{origin}\"; }}\n"
    )
}

/// `lib/cmake/<name>/<name>-config.cmake`: an imported `<name>::<name>` target.
fn cmake_config(name: &str) -> String {
    format!(
        "get_filename_component(_root \"${{CMAKE_CURRENT_LIST_DIR}}/../../..\" ABSOLUTE)\nadd_library({name}::{name} SHARED IMPORTED)\nset_target_properties({name}::{name} PROPERTIES IMPORTED_LOCATION \"${{_root}}/lib/lib{name}.so\" INTERFACE_INCLUDE_DIRECTORIES \"${{_root}}/include\")\nset({name}_FOUND TRUE)\n"
    )
}

/// Installs library `name` into `root` as a ROCm would: compiled by hipcc for `targets`.
fn install_lib(root: &Path, name: &str, targets: &[&str], origin: &str) {
    let src = root.join(format!("src-{name}.hip"));
    std::fs::create_dir_all(root.join("lib/cmake").join(name)).unwrap();
    std::fs::create_dir_all(root.join("include")).unwrap();
    std::fs::write(&src, lib_source(name, origin)).unwrap();
    let mut c = Process::new("hipcc");
    for t in targets {
        c.arg(format!("--offload-arch={t}"));
    }
    run(c.args(["-shared", "-fPIC", "-o"]).arg(root.join(format!("lib/lib{name}.so"))).arg(&src));
    std::fs::remove_file(&src).unwrap();
    std::fs::write(root.join(format!("include/{name}.h")), format!("extern \"C\" const char* {name}_origin();\n"))
        .unwrap();
    std::fs::write(root.join(format!("lib/cmake/{name}/{name}-config.cmake")), cmake_config(name)).unwrap();
}

/// A ROCm installation of `version`: blas for gfx1030 only, fft and dnn for gfx1010 and gfx1030.
fn installation(root: &Path, version: &str) {
    install_lib(root, "blas", &["gfx1030"], "installed");
    install_lib(root, "fft", &["gfx1010", "gfx1030"], "installed");
    install_lib(root, "dnn", &["gfx1010", "gfx1030"], "installed");
    std::fs::create_dir_all(root.join(".info")).unwrap();
    std::fs::write(root.join(".info/version"), format!("{version}-77\n")).unwrap();
}

/// A recipe that compiles library `name` for `{targets}` with hipcc and installs it with its
/// CMake package; from a tarball, so `dnn` can carry a patch.
fn lib_recipe(name: &str, source: &str, patched: bool) -> String {
    let patches = if patched { "[patches]\nseries = [\"0001-rebuilt-with-the-fix.patch\"]\n" } else { "" };
    format!(
        r#"[package]
name = "{name}"
version = "1.0"
summary = "{name}"
cmake-packages = ["{name}"]

{source}
{patches}
[build]
system = "script"
steps = [
  "mkdir -p {{stage}}/lib/cmake/{name} {{stage}}/include",
  "for t in $(echo '{{targets}}' | tr ';' ' '); do echo --offload-arch=$t; done > archs",
  "hipcc $(cat archs) -shared -fPIC -o {{stage}}/lib/lib{name}.so {{src}}/{name}.hip",
  "cp {{src}}/{name}.h {{stage}}/include/ && cp {{src}}/{name}-config.cmake {{stage}}/lib/cmake/{name}/",
]

[targets]
gpu = true
supported = ["gfx1010", "gfx1030"]
device-code = ["lib/lib{name}.so"]

[external]
cmake-package = "{name}"
files = ["lib/lib{name}.so", "include/{name}.h"]
"#
    )
}

/// The consumer: a CMake project that puts `{rocm}` first in its own CMAKE_PREFIX_PATH (as
/// PyTorch does with ROCM_PATH), finds all three packages, links them and prints their origins.
const APP: &str = r#"[package]
name = "app"
version = "1.0"
summary = "app"

[source]
url = "@APP_URL@"
sha256 = "@APP_SHA@"
strip-components = 1

[dependencies]
build = ["blas", "fft", "dnn"]

[build]
system = "cmake"
args = ["-DCMAKE_PREFIX_PATH={rocm}", "-DROCM_ROOT_SEEN={rocm}", "-DFFT_ROOT_SEEN={root:fft}", "-DBLAS_ROOT_SEEN={root:blas}"]

[targets]
gpu = false
"#;

const APP_CMAKE: &str = r#"cmake_minimum_required(VERSION 3.16)
project(app CXX)
find_package(blas REQUIRED)
find_package(fft REQUIRED)
find_package(dnn REQUIRED)
add_executable(app main.cpp)
target_link_libraries(app blas::blas fft::fft dnn::dnn)
set_target_properties(app PROPERTIES INSTALL_RPATH "")
install(TARGETS app DESTINATION bin)
file(WRITE "${CMAKE_BINARY_DIR}/found.txt" "blas ${blas_DIR}\nfft ${fft_DIR}\ndnn ${dnn_DIR}\nrocm ${ROCM_ROOT_SEEN}\nroot:fft ${FFT_ROOT_SEEN}\nroot:blas ${BLAS_ROOT_SEEN}\n")
install(FILES "${CMAKE_BINARY_DIR}/found.txt" DESTINATION share/app)
"#;

const APP_MAIN: &str = "#include <cstdio>\n#include <blas.h>\n#include <fft.h>\n#include <dnn.h>\nint main() { std::printf(\"blas %s\\nfft %s\\ndnn %s\\n\", blas_origin(), fft_origin(), dnn_origin()); }\n";

fn tarball(dir: &Path, name: &str, files: &[(&str, String)]) -> (String, String) {
    let top = dir.join(format!("{name}-1.0"));
    std::fs::create_dir_all(&top).unwrap();
    for (f, text) in files {
        std::fs::write(top.join(f), text).unwrap();
    }
    let tgz = dir.join(format!("{name}-1.0.tar.gz"));
    run(Process::new("tar").arg("-czf").arg(&tgz).arg("-C").arg(dir).arg(format!("{name}-1.0")));
    let sha = crate::support::wheel::sha256_hex(&std::fs::read(&tgz).unwrap());
    (format!("file://{}", tgz.display()), sha)
}

struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("home")).unwrap();
        let recipes = d.join("tree/recipes/t");
        std::fs::create_dir_all(&recipes).unwrap();
        std::fs::write(recipes.join("stack.toml"), STACK).unwrap();
        let sources = d.join("sources");
        std::fs::create_dir_all(&sources).unwrap();
        for (name, patched) in [("blas", false), ("fft", false), ("dnn", true)] {
            let (url, sha) = tarball(
                &sources,
                name,
                &[
                    (&format!("{name}.hip"), lib_source(name, "rebuilt")),
                    (&format!("{name}.h"), format!("extern \"C\" const char* {name}_origin();\n")),
                    (&format!("{name}-config.cmake"), cmake_config(name)),
                ],
            );
            let source = format!("[source]\nurl = \"{url}\"\nsha256 = \"{sha}\"\nstrip-components = 1\n");
            std::fs::write(recipes.join(format!("{name}.toml")), lib_recipe(name, &source, patched)).unwrap();
        }
        let patches = d.join("tree/patches/t/dnn");
        std::fs::create_dir_all(&patches).unwrap();
        std::fs::write(
            patches.join("0001-rebuilt-with-the-fix.patch"),
            "The fix an installed dnn lacks.\n--- a/dnn.hip\n+++ b/dnn.hip\n@@ -1,3 +1,3 @@\n #include <hip/hip_runtime.h>\n __global__ void dnn_kernel(float* x) { x[threadIdx.x] *= 2.0f; }\n-extern \"C\" const char* dnn_origin() { return \"rebuilt\"; }\n+extern \"C\" const char* dnn_origin() { return \"rebuilt, patched\"; }\n",
        )
        .unwrap();
        let (url, sha) =
            tarball(&sources, "app", &[("CMakeLists.txt", APP_CMAKE.to_string()), ("main.cpp", APP_MAIN.to_string())]);
        std::fs::write(recipes.join("app.toml"), APP.replace("@APP_URL@", &url).replace("@APP_SHA@", &sha)).unwrap();
        World { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn cmd(&self, args: &[&str]) -> assert_cmd::Command {
        let mut c = rocmforge(&self.path("home"));
        c.arg("--recipes").arg(self.path("tree")).args(args);
        c
    }

    fn plan(&self, args: &[&str]) -> Value {
        let mut all = vec!["plan", "app", "--json"];
        all.extend_from_slice(args);
        let out = self.cmd(&all).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn entry<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["recipes"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("{name} in {plan}"))
}

fn reason(plan: &Value, name: &str) -> String {
    entry(plan, name)["reason"].as_str().unwrap().to_string()
}

#[test]
fn the_installation_stands_in_only_where_it_may_and_the_rebuilt_recipes_build_against_it() {
    let w = World::new();
    let rocm = w.path("opt/rocm-6.2.4");
    installation(&rocm, "6.2.4");
    let r = rocm.to_str().unwrap();
    let plan = w.plan(&["--rocm-path", r]);

    // fft: unpatched, 6.2, carries gfx1010: taken.
    assert_eq!(entry(&plan, "fft")["state"], "external");
    assert_eq!(
        reason(&plan, "fft"),
        format!("provided by {r} (fft 6.2.4, .info/version): lib/libfft.so, include/fft.h, lib/cmake/fft")
    );
    // blas: no gfx1010 code in the installed library: built, and the plan says why.
    assert_eq!(entry(&plan, "blas")["state"], "not-built");
    assert!(
        reason(&plan, "blas")
            .contains("built: the installed blas has no gfx1010 code in lib/libblas.so (1 file(s) carry gfx1030)"),
        "{}",
        reason(&plan, "blas")
    );
    // dnn: patched: built, never taken silently.
    assert_eq!(entry(&plan, "dnn")["state"], "not-built");
    assert!(
        reason(&plan, "dnn").contains("built: patched (0001-rebuilt-with-the-fix.patch)"),
        "{}",
        reason(&plan, "dnn")
    );
    assert_eq!(entry(&plan, "app")["on_installation"], true);
    // The key of a taken recipe is what it is: version and file digests, not where it lies.
    let source = entry(&plan, "fft")["inputs"]["source"].as_str().unwrap().to_string();
    assert!(source.starts_with("installed:6.2.4@sha256:") && !source.contains(r), "{source}");

    // The text plan says the same.
    let out = w.cmd(&["plan", "app", "--rocm-path", r]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("built: patched (0001-rebuilt-with-the-fix.patch)"), "{text}");
    assert!(
        text.contains(&format!(
            "the short night on {r}: 1 recipe(s) taken from it; the full night (nothing taken) would be"
        )),
        "{text}"
    );
    // doctor tells the same story.
    let out = w.cmd(&["doctor", "--rocm-path", r]).output().unwrap();
    let doc = String::from_utf8_lossy(&out.stdout);
    assert!(
        doc.contains(&format!("rocm       {r} (ROCm's layout, release 6.2.4 from .info/version) (--rocm-path)")),
        "{doc}"
    );
    assert!(
        doc.contains("takes 1 recipe(s) from it (fft); builds 2 it has: blas (the installed blas has no gfx1010"),
        "{doc}"
    );
    assert!(doc.contains("dnn (patched (0001-rebuilt-with-the-fix.patch)"), "{doc}");

    // Build: blas and dnn rebuilt for gfx1010, app finds them in the prefix (through
    // <pkg>_ROOT, although it puts the installation first itself) and fft in the installation.
    let prefix = w.path("prefix");
    let p = prefix.to_str().unwrap();
    let out = w.cmd(&["build", "app", "--rocm-path", r, "--prefix", p, "-j", "2"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!prefix.join("lib/libfft.so").exists(), "fft was built although the installation provides it");
    let objs = run(Process::new("roc-obj-ls").arg(prefix.join("lib/libblas.so")));
    assert!(objs.contains("gfx1010"), "{objs}");
    let found = std::fs::read_to_string(prefix.join("share/app/found.txt")).unwrap();
    assert!(found.contains(&format!("blas {p}/lib/cmake/blas")), "{found}");
    assert!(found.contains(&format!("dnn {p}/lib/cmake/dnn")), "{found}");
    assert!(found.contains(&format!("fft {r}/lib/cmake/fft")), "{found}");
    assert!(found.contains(&format!("rocm {r}")), "{{rocm}} is the installation for a recipe built on it: {found}");
    // {root:<dep>}: where that dependency's files lie (MIOpen's -DHALF_INCLUDE_DIR={root:half}/include).
    assert!(found.contains(&format!("root:fft {r}\n")), "{{root:fft}} is the installation fft is taken from: {found}");
    assert!(found.contains(&format!("root:blas {p}\n")), "{{root:blas}} is the prefix blas is built into: {found}");
    let needed = run(Process::new("readelf").arg("-d").arg(prefix.join("bin/app")));
    for lib in ["libblas.so", "libfft.so", "libdnn.so"] {
        assert!(needed.contains(lib), "{needed}");
    }

    // env puts the prefix's libraries ahead of the installation's, and says which copy loads.
    let out = w.cmd(&["env", "--rocm-path", r, "--prefix", p]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    let ld = run(Process::new("bash").arg("-c").arg(format!("{lines}\necho \"$LD_LIBRARY_PATH\"")));
    assert!(ld.starts_with(&format!("{p}/lib:{r}/lib")), "prefix first: {ld}\n{lines}");
    assert!(lines.contains(&format!("libblas.so: {p}/lib's copy loads")), "{lines}");
    let script = format!("{lines}\napp");
    let ran = run(Process::new("bash").arg("-c").arg(&script).env("PATH", format!("{p}/bin:/usr/bin:/bin")));
    assert_eq!(ran, "blas rebuilt\nfft installed\ndnn rebuilt, patched\n");

    // `--take-installed dnn`: taken, and the plan says the fix is missing; `--from-source fft`:
    // built although provided.
    let plan = w.plan(&["--rocm-path", r, "--take-installed", "dnn", "--from-source", "fft"]);
    assert_eq!(entry(&plan, "dnn")["state"], "external");
    assert!(reason(&plan, "dnn").contains("WITHOUT its patches (0001-rebuilt-with-the-fix.patch): the fix is missing"));
    assert_eq!(entry(&plan, "fft")["state"], "not-built");
    assert!(reason(&plan, "fft").contains("--from-source"), "{}", reason(&plan, "fft"));
}

#[test]
fn an_installation_of_another_version_is_refused_unless_accepted() {
    let w = World::new();
    let rocm = w.path("opt/rocm-6.4.3");
    installation(&rocm, "6.4.3");
    let r = rocm.to_str().unwrap();
    let plan = w.plan(&["--rocm-path", r]);
    assert_eq!(entry(&plan, "fft")["state"], "blocked");
    assert_eq!(
        reason(&plan, "fft"),
        format!("the installation at {r} has fft 6.4.3 (.info/version); the stack needs 6.2.x. Pass `--accept-rocm-version 6.4` to take it anyway, or `--from-source fft` to build it")
    );
    // dnn is patched: built whatever the installation's version; it is never taken silently.
    assert_eq!(entry(&plan, "dnn")["state"], "not-built");
    // One flag for every refused component, in the plan's JSON and text.
    assert_eq!(plan["accept_versions"], serde_json::json!(["6.4"]));
    let text = w.cmd(&["plan", "app", "--rocm-path", r]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let refused: Vec<&str> = plan["recipes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["state"] == "blocked")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        text.contains(&format!(
            "the installation holds {} in other versions: `--accept-rocm-version 6.4` takes them all, `--from-source {}` builds them",
            refused.join(", "),
            refused.join(",")
        )),
        "{text}"
    );
    let out = w.cmd(&["build", "app", "--rocm-path", r]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the installed ROCm does not match the stack; nothing was built") && err.contains("fft 6.4.3"),
        "{err}"
    );

    let plan = w.plan(&["--rocm-path", r, "--accept-rocm-version", "6.3,6.4"]);
    assert_eq!(entry(&plan, "fft")["state"], "external");
    assert_eq!(entry(&plan, "dnn")["state"], "not-built", "accepting a version never takes a patched recipe");
}

/// With `--rocm-path`, a patched recipe is never taken silently: every patched recipe of the
/// real 6.2 stack, against an installation that has all of them for every target.
#[test]
fn no_patched_recipe_of_the_real_stack_is_taken_from_an_installation() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("home")).unwrap();
    let rocm = d.path().join("rocm");
    let plan0 = {
        let out = rocmforge(&d.path().join("home"))
            .args(["--stack", "rocm-6.2", "plan", "pytorch", "composable-kernel", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    // Every [external] file of every recipe, present (empty files: no device code is needed to
    // see the patched ones refused before coverage is read).
    let stack = crate::support::repo_root().join("recipes/rocm-6.2");
    let mut external = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(&stack).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let v: toml::Value = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let Some(ext) = v.get("external") else { continue };
        external.insert(v["package"]["name"].as_str().unwrap().to_string());
        for f in ext.get("files").and_then(|f| f.as_array()).into_iter().flatten() {
            let f = rocm.join(f.as_str().unwrap());
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, "").unwrap();
        }
        if let Some(pkg) = ext.get("cmake-package").and_then(|p| p.as_str()) {
            std::fs::create_dir_all(rocm.join("lib/cmake").join(pkg)).unwrap();
        }
    }
    std::fs::create_dir_all(rocm.join(".info")).unwrap();
    std::fs::write(rocm.join(".info/version"), "6.2.4-1\n").unwrap();
    let out = rocmforge(&d.path().join("home"))
        .args(["--stack", "rocm-6.2", "plan", "pytorch", "composable-kernel", "--json", "--rocm-path"])
        .arg(&rocm)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut patched = 0;
    for e in plan0["recipes"].as_array().unwrap() {
        if e["patches"].as_array().unwrap().is_empty() || !external.contains(e["name"].as_str().unwrap()) {
            continue;
        }
        patched += 1;
        let name = e["name"].as_str().unwrap();
        let now = entry(&plan, name);
        assert_ne!(now["state"], "external", "{name} is patched and was taken: {}", now["reason"]);
        assert!(now["reason"].as_str().unwrap().contains("built: patched ("), "{name}: {}", now["reason"]);
    }
    assert!(patched >= 2, "MIOpen and composable_kernel are patched and in the installation: {patched}");
    // The source-only LLVM tree is not fetched when its consumers all come from the installation.
    assert_eq!(entry(&plan, "llvm-project")["state"], "skipped", "{}", entry(&plan, "llvm-project")["reason"]);
}

/// A tempdir with `home/` and a recipe tree holding stack `deb` of ROCm `rocm_version`; returns
/// it and the stack's recipe folder.
fn deb_stack(rocm_version: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("home")).unwrap();
    let recipes = d.path().join("tree/recipes/deb");
    std::fs::create_dir_all(&recipes).unwrap();
    std::fs::write(
        recipes.join("stack.toml"),
        format!("[stack]\nname = \"deb\"\nrocm-version = \"{rocm_version}\"\nsummary = \"s\"\ndefault-targets = [\"gfx1010\"]\ndefault = true\n"),
    )
    .unwrap();
    (d, recipes)
}

/// Debian unstable's own ROCm 6.4 packages, unpacked by `ci/debian-rocm.sh` into a root with
/// their dpkg records: recognised as a distribution's layout, each component's version read
/// from its own package (they differ), and the GPU targets read from the files, cross-checked
/// with the packages' `X-Rocm-Gpu-Architecture` field.
#[test]
fn debian_packages_are_recognised_with_their_versions_and_gpu_targets() {
    let base = crate::support::repo_root().join("target/debian-rocm");
    assert!(
        base.join("done").is_file(),
        "{} is missing: run `bash ci/debian-rocm.sh` (ci/setup.sh does) to download Debian unstable's ROCm packages",
        base.display()
    );
    let field = |pkg: &str, f: &str| {
        let deb = std::fs::read_dir(base.join("debs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{pkg}_")))
            .unwrap_or_else(|| panic!("{pkg}.deb"));
        run(Process::new("dpkg-deb").arg("-f").arg(&deb).arg(f)).trim().to_string()
    };
    let upstream = |v: &str| v.split('-').next().unwrap().split('+').next().unwrap().to_string();
    let (d, recipes) = deb_stack("6.4.0");
    let recipe = |name: &str, gpu: bool, device_code: &str, external: &str, deps: &str| {
        format!(
            "[package]\nname = \"{name}\"\nversion = \"1\"\nsummary = \"s\"\n{deps}\n[build]\nsystem = \"script\"\nsteps = [\"mkdir -p {{stage}}/share && touch {{stage}}/share/{name}\"]\n[targets]\ngpu = {gpu}\n{device_code}\n[external]\n{external}\n"
        )
    };
    let write = |name: &str, text: String| std::fs::write(recipes.join(format!("{name}.toml")), text).unwrap();
    let all = "supported = [\"gfx1010\", \"gfx1012\", \"gfx1030\"]\n";
    write(
        "hip",
        recipe(
            "hip",
            false,
            "",
            "cmake-package = \"hip\"\nfiles = [\"lib/libamdhip64.so\", \"include/hip/hip_runtime.h\"]",
            "",
        ),
    );
    write(
        "rocblas",
        recipe(
            "rocblas",
            true,
            &format!("{all}device-code = [\"lib/rocblas/library/*.{{co,hsaco}}\"]"),
            "cmake-package = \"rocblas\"\nfiles = [\"include/rocblas/rocblas.h\"]",
            "",
        ),
    );
    write(
        "rocfft",
        recipe(
            "rocfft",
            true,
            &format!("{all}device-code = [\"lib/librocfft.so.0\"]"),
            "files = [\"lib/librocfft.so.0\"]",
            "",
        ),
    );
    write(
        "app",
        recipe(
            "app",
            false,
            "",
            "files = [\"bin/nothing-provides-app\"]",
            "[dependencies]\nbuild = [\"hip\", \"rocblas\", \"rocfft\"]\n",
        ),
    );
    let usr = base.join("root/usr");
    let plan = |target: &str| -> Value {
        let out = rocmforge(&d.path().join("home"))
            .arg("--recipes")
            .arg(d.path().join("tree"))
            .args(["plan", "app", "--json", "--target", target, "--rocm-path"])
            .arg(&usr)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let p = plan("gfx1010");
    let u = usr.display();
    // Each component's version is its own package's: HIP and rocBLAS differ.
    let (hip, blas) = (field("libamdhip64-dev", "Version"), field("librocblas-dev", "Version"));
    assert_eq!(
        reason(&p, "hip"),
        format!(
            "provided by {u} (hip {}, dpkg: libamdhip64-dev {hip}): lib/x86_64-linux-gnu/libamdhip64.so, include/hip/hip_runtime.h, lib/x86_64-linux-gnu/cmake/hip",
            upstream(&hip)
        )
    );
    assert_eq!(entry(&p, "rocblas")["state"], "external", "{}", reason(&p, "rocblas"));
    assert!(
        reason(&p, "rocblas")
            .starts_with(&format!("provided by {u} (rocblas {}, dpkg: librocblas-dev {blas})", upstream(&blas))),
        "{}",
        reason(&p, "rocblas")
    );
    assert_eq!(entry(&p, "rocfft")["state"], "external");
    // A target the packages were not built for: what the files carry is named, and it is what
    // the package says it carries.
    let p = plan("gfx1012");
    let why = reason(&p, "rocfft");
    let carried = why.split("carry ").nth(1).unwrap_or_else(|| panic!("{why}")).trim_end_matches(')').to_string();
    let mut found: Vec<&str> = carried.split(", ").collect();
    let declared = field("librocfft0", "X-Rocm-Gpu-Architecture");
    let mut declared: Vec<&str> = declared.split_whitespace().collect();
    found.sort();
    declared.sort();
    assert_eq!(found, declared, "{why}");
    assert!(why.contains("has no gfx1012 code in lib/x86_64-linux-gnu/librocfft.so.0"), "{why}");
    assert!(declared.contains(&"gfx1010"));
}

/// A CMake package a distribution keeps where `CMAKE_PREFIX_PATH` does not look (Debian's
/// device libraries: `lib/llvm-21/lib/cmake/AMDDeviceLibs`) is still found by a recipe built on
/// the installation: the plan names the folder and the steps get `<package>_DIR` (the night:
/// clr's hip-config asks for AMDDeviceLibs in every consumer). A real CMake configure finds it.
#[test]
fn a_taken_cmake_package_is_found_where_the_distribution_keeps_it() {
    let base = crate::support::repo_root().join("target/debian-rocm");
    let usr = base.join("root/usr");
    assert!(
        usr.join("lib/llvm-21/lib/cmake/AMDDeviceLibs").is_dir(),
        "{} lacks rocm-device-libs-21: run `bash ci/debian-rocm.sh` (ci/setup.sh does)",
        base.display()
    );
    let (d, recipes) = deb_stack("7.0.0");
    std::fs::write(
        recipes.join("device-libs.toml"),
        "[package]\nname = \"device-libs\"\nversion = \"1\"\nsummary = \"s\"\n\n[build]\nsystem = \"script\"\nsteps = [\"mkdir -p {stage}/share && touch {stage}/share/dl\"]\n\n[targets]\ngpu = false\n\n[external]\ncmake-package = \"AMDDeviceLibs\"\nfiles = [\"amdgcn/bitcode/ocml.bc\"]\n",
    )
    .unwrap();
    let (url, sha) = tarball(
        d.path(),
        "user",
        &[(
            "CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.16)\nproject(user NONE)\nfind_package(AMDDeviceLibs REQUIRED CONFIG)\n\
             file(WRITE \"${CMAKE_BINARY_DIR}/found.txt\" \"${AMDDeviceLibs_DIR}\")\n\
             install(FILES \"${CMAKE_BINARY_DIR}/found.txt\" DESTINATION share/user)\n"
                .to_string(),
        )],
    );
    std::fs::write(
        recipes.join("user.toml"),
        format!(
            "[package]\nname = \"user\"\nversion = \"1\"\nsummary = \"s\"\n\n[source]\nurl = \"{url}\"\nsha256 = \"{sha}\"\nstrip-components = 1\n\n[dependencies]\nbuild = [\"device-libs\"]\n\n[build]\nsystem = \"cmake\"\n\n[targets]\ngpu = false\n"
        ),
    )
    .unwrap();
    let cmd = |args: &[&str]| {
        let mut c = rocmforge(&d.path().join("home"));
        c.arg("--recipes").arg(d.path().join("tree")).args(args).arg("--rocm-path").arg(&usr);
        c
    };
    let out = cmd(&["plan", "user", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(entry(&plan, "device-libs")["state"], "external", "{}", reason(&plan, "device-libs"));
    let dir = usr.join("lib/llvm-21/lib/cmake/AMDDeviceLibs");
    assert_eq!(plan["taken_cmake_dirs"]["AMDDeviceLibs"], dir.display().to_string(), "{plan}");
    let prefix = d.path().join("prefix");
    let out = cmd(&["build", "user", "--prefix", prefix.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(prefix.join("share/user/found.txt")).unwrap(), dir.display().to_string());
}

/// Debian 12's own LLVM 15 and device libraries (this host's `/usr`: clang-15 15.0.6 and
/// rocm-device-libs 5.2.3, which ci/setup.sh's hipcc brings) stand in for the rocm-5.4 stack's
/// `llvm` and `device-libs` (the rocm-5.4 night). Before LLVM 16 clang's resource folder is
/// the full version: the recipe names ROCm 5.4.3's `llvm/lib/clang/15.0.0/...`, Debian has
/// `lib/llvm-15/lib/clang/15.0.6/...`. And Debian 12 keeps AMDDeviceLibs in `lib/cmake/`, not
/// under `lib/<multiarch>/` or LLVM's folder.
#[test]
fn debian_12s_llvm_15_and_device_libraries_stand_in_for_rocm_5_4s() {
    let usr = Path::new("/usr");
    let builtins = usr.join("lib/llvm-15/lib/clang/15.0.6/lib/linux/libclang_rt.builtins-x86_64.a");
    let dl = usr.join("lib/cmake/AMDDeviceLibs/AMDDeviceLibsConfig.cmake");
    assert!(
        builtins.is_file() && dl.is_file(),
        "{} or {} missing: this test reads Debian 12's clang-15 and rocm-device-libs (ci/setup.sh installs hipcc, which brings them)",
        builtins.display(),
        dl.display()
    );
    let (d, recipes) = deb_stack("5.4.3");
    let recipe = |name: &str, external: &str, deps: &str| {
        format!(
            "[package]\nname = \"{name}\"\nversion = \"1\"\nsummary = \"s\"\n{deps}\n[build]\nsystem = \"script\"\nsteps = [\"mkdir -p {{stage}}/share && touch {{stage}}/share/{name}\"]\n[targets]\ngpu = false\n[external]\n{external}\n"
        )
    };
    let write = |name: &str, text: String| std::fs::write(recipes.join(format!("{name}.toml")), text).unwrap();
    // The external specs of recipes/rocm-5.4/llvm.toml and device-libs.toml.
    write(
        "llvm",
        recipe(
            "llvm",
            "files = [\"llvm/bin/clang\", \"llvm/lib/cmake/llvm/LLVMConfig.cmake\", \"llvm/lib/clang/15.0.0/lib/linux/libclang_rt.builtins-x86_64.a\"]",
            "",
        ),
    );
    write(
        "device-libs",
        recipe("device-libs", "cmake-package = \"AMDDeviceLibs\"\nfiles = [\"amdgcn/bitcode/ocml.bc\"]", ""),
    );
    write(
        "app",
        recipe(
            "app",
            "files = [\"bin/nothing-provides-app\"]",
            "[dependencies]\nbuild = [\"llvm\", \"device-libs\"]\n",
        ),
    );
    let out = rocmforge(&d.path().join("home"))
        .arg("--recipes")
        .arg(d.path().join("tree"))
        .args(["plan", "app", "--json", "--accept-rocm-version", "any", "--rocm-path", "/usr"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(entry(&plan, "llvm")["state"], "external", "{}", reason(&plan, "llvm"));
    assert!(
        reason(&plan, "llvm").contains("lib/llvm-15/lib/clang/15.0.6/lib/linux/libclang_rt.builtins-x86_64.a"),
        "{}",
        reason(&plan, "llvm")
    );
    assert_eq!(entry(&plan, "device-libs")["state"], "external", "{}", reason(&plan, "device-libs"));
    assert_eq!(plan["taken_cmake_dirs"]["AMDDeviceLibs"], "/usr/lib/cmake/AMDDeviceLibs", "{plan}");
}

/// The compiler taken from an installation, the device libraries built into the prefix (the
/// rocm-5.4 night: Debian 12's clang-15 taken, ROCm-Device-Libs 5.4.3 built): clang looks for
/// the bitcode beside its own installation (`lib/llvm-15/..`) and under `--rocm-path`, never in
/// the prefix, so ROCR's blit kernels stopped with "cannot find ROCm device library"
/// (ROCR-Runtime rocm-5.4.3 src/image/blit_src/CMakeLists.txt runs plain `clang -x cl -target
/// amdgcn-amd-amdhsa`). A real clang-15 compile of an OpenCL kernel against device libraries a
/// recipe installed into the prefix.
#[test]
fn a_taken_compiler_finds_device_libraries_built_into_the_prefix() {
    let usr = Path::new("/usr");
    let bitcode = usr.join("lib/x86_64-linux-gnu/amdgcn/bitcode");
    assert!(
        usr.join("lib/llvm-15/bin/clang").is_file() && bitcode.join("ocml.bc").is_file(),
        "this test runs Debian 12's clang-15 with the device libraries of rocm-device-libs (ci/setup.sh installs hipcc, which brings both)"
    );
    let (d, recipes) = deb_stack("5.4.3");
    let write = |name: &str, text: String| std::fs::write(recipes.join(format!("{name}.toml")), text).unwrap();
    write(
        "llvm",
        "[package]\nname = \"llvm\"\nversion = \"1\"\nsummary = \"s\"\n[build]\nsystem = \"script\"\nsteps = [\"false\"]\n[targets]\ngpu = false\n[external]\nfiles = [\"llvm/bin/clang\"]\n".into(),
    );
    // Built, never taken (no [external]): the bitcode copied into the prefix's amdgcn/bitcode,
    // where the stack's device-libs installs it.
    write(
        "device-libs",
        format!(
            "[package]\nname = \"device-libs\"\nversion = \"1\"\nsummary = \"s\"\n[build]\nsystem = \"script\"\nsteps = [\"mkdir -p {{stage}}/amdgcn && cp -r {} {{stage}}/amdgcn/bitcode\"]\n[targets]\ngpu = false\n",
            bitcode.display()
        ),
    );
    write(
        "kernels",
        "[package]\nname = \"kernels\"\nversion = \"1\"\nsummary = \"s\"\n[dependencies]\nbuild = [\"llvm\", \"device-libs\"]\n[build]\nsystem = \"script\"\nsteps = [\"printf '__kernel void k(__global float* x) {{ x[get_global_id(0)] = sqrt(x[0]); }}' > k.cl && {rocm_llvm}/bin/clang -O2 -x cl -Xclang -finclude-default-header -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=gfx1010 -o k.co k.cl && mkdir -p {stage}/share && cp k.co {stage}/share/k.co\"]\n[targets]\ngpu = false\n".into(),
    );
    let prefix = d.path().join("prefix");
    let out = rocmforge(&d.path().join("home"))
        .arg("--recipes")
        .arg(d.path().join("tree"))
        .args(["build", "kernels", "--accept-rocm-version", "any", "--rocm-path", "/usr", "--prefix"])
        .arg(&prefix)
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(log.contains("llvm: provided by /usr"), "{log}");
    assert!(out.status.success(), "{log}");
    assert!(prefix.join("share/k.co").is_file(), "{log}");
}

/// An installation's clang without clang-offload-bundler is not taken for the rocm-5.4 stack's
/// llvm: Debian 12 keeps the bundler in clang-tools-15, and with clang-15 alone taken the night
/// stopped at hipamd's hip-toolchain check (`Executable "clang-offload-bundler" doesn't
/// exist!`). A distribution's layout with every other file of the recipe's `[external]`.
#[test]
fn an_installed_clang_without_its_offload_bundler_does_not_stand_in_for_rocm_5_4s_llvm() {
    let d = tempfile::tempdir().unwrap();
    let usr = d.path().join("usr");
    let llvm = usr.join("lib/llvm-15");
    for f in [
        "bin/clang",
        "bin/ld.lld",
        "lib/cmake/llvm/LLVMConfig.cmake",
        "lib/clang/15.0.6/lib/linux/libclang_rt.builtins-x86_64.a",
    ] {
        std::fs::create_dir_all(llvm.join(f).parent().unwrap()).unwrap();
        std::fs::write(llvm.join(f), "").unwrap();
    }
    std::fs::create_dir_all(usr.join("lib/x86_64-linux-gnu")).unwrap();
    std::fs::create_dir_all(d.path().join("home")).unwrap();
    let plan = || -> Value {
        let out = rocmforge(&d.path().join("home"))
            .args([
                "--stack",
                "rocm-5.4",
                "plan",
                "device-libs",
                "--json",
                "--accept-rocm-version",
                "any",
                "--rocm-path",
            ])
            .arg(&usr)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let p = plan();
    assert_ne!(entry(&p, "llvm")["state"], "external", "{}", reason(&p, "llvm"));
    assert!(reason(&p, "llvm").contains("clang-offload-bundler absent"), "{}", reason(&p, "llvm"));
    std::fs::write(llvm.join("bin/clang-offload-bundler"), "").unwrap();
    let p = plan();
    assert_eq!(entry(&p, "llvm")["state"], "external", "{}", reason(&p, "llvm"));
}
