//! Recipes that answer for their output (`tests/fixtures/proofs`): what consumers need,
//! declared at the producer (`[[provides]]`), and checks after install (`[[check]]`), run with
//! this machine's real compilers (Debian's hipcc and clang-15 stand in for the stack's clang);
//! and the built-in one: no library or program built needs an executable stack (gcc and ld).

use std::path::PathBuf;

use crate::support::{copy_tree, repo_root, rocmforge, text};

struct Proofs {
    home: tempfile::TempDir,
    tree: PathBuf,
}

impl Proofs {
    /// The fixture tree in a temp home, with the real stack's toolchain check copied in.
    fn new() -> Proofs {
        let home = tempfile::tempdir().unwrap();
        let tree = home.path().join("tree");
        copy_tree(&repo_root().join("tests/fixtures/proofs"), &tree);
        copy_tree(&repo_root().join("recipes/checks/hip-toolchain"), &tree.join("recipes/checks/hip-toolchain"));
        std::fs::create_dir_all(home.path().join("out")).unwrap();
        Proofs { home, tree }
    }
    fn build(&self, args: &[&str]) -> std::process::Output {
        rocmforge(self.home.path())
            .arg("--recipes")
            .arg(&self.tree)
            .args(["--stack", "proofs", "build", "--prefix"])
            .arg(self.home.path().join("out/prefix"))
            .args(args)
            .output()
            .unwrap()
    }
    fn edit(&self, recipe: &str, from: &str, to: &str) {
        let p = self.tree.join(format!("recipes/proofs/{recipe}.toml"));
        let t = std::fs::read_to_string(&p).unwrap();
        assert!(t.contains(from), "{from} not in {}", p.display());
        std::fs::write(&p, t.replace(from, to)).unwrap();
    }
    fn report(&self) -> serde_json::Value {
        let p = self.home.path().join("state/rocmforge/reports/proofs/latest/report.json");
        serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
    }
    fn cached(&self) -> String {
        let mut c = rocmforge(self.home.path());
        c.arg("--recipes").arg(&self.tree).args(["--stack", "proofs", "cache", "list"]);
        text(&c.output().unwrap())
    }
    fn work(&self, recipe: &str) -> PathBuf {
        self.home.path().join("cache/rocmforge/work/proofs").join(recipe)
    }
}

fn recipe_of<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["recipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {report}"))
}

#[test]
fn a_producer_missing_what_its_consumers_need_fails_at_its_own_end_naming_them() {
    let p = Proofs::new();
    // A clang whose resource dir has no compiler-rt: it prints a builtins path that is not there.
    p.edit("compiler", "CLANG_FLAGS", "-resource-dir=/nonexistent/clang-resource");
    let out = p.build(&["app", "--target", "gfx1010,gfx1012"]);
    let err = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("compiler: does not install what its consumers need (`[[provides]]` in"), "{err}");
    assert!(
        err.contains("compiler-rt builtins (needed by app: its link passes --rtlib=compiler-rt")
            && err.contains("toolchain: hip-config links the builtins into hip::host")
            && err.contains("`llvm/bin/clang -print-libgcc-file-name --rtlib=compiler-rt` printed `/nonexistent/clang-resource/lib/linux/libclang_rt.builtins-x86_64.a`, which does not exist"),
        "{err}"
    );
    // Both needs at once: the per-target bitcode is missing for gfx1012 only.
    assert!(err.contains("`amdgcn/bitcode/oclc_isa_version_1012.bc`: no installed file matches"), "{err}");
    assert!(!err.contains("oclc_isa_version_1010.bc`: no installed"), "{err}");
    // Nothing stored, and the consumer never started.
    assert!(!p.cached().contains("compiler"), "{}", p.cached());
    assert!(!p.home.path().join("out/app-ran").exists());
    let report = p.report();
    let checks = recipe_of(&report, "compiler")["coverage"].as_array().unwrap().clone();
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert!(checks.iter().all(|c| c["kind"] == "provides" && c["ok"] == false), "{checks:?}");

    // The compiler fixed (its own clang-15 resource dir, which has the builtins): both pass
    // for gfx1010 and the consumer builds.
    p.edit("compiler", "-resource-dir=/nonexistent/clang-resource", "");
    let out = p.build(&["app", "--target", "gfx1010"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("provides compiler-rt builtins: /usr/lib/llvm-15/lib/clang/"), "{}", text(&out));
    assert!(p.home.path().join("out/app-ran").exists());
    let report = p.report();
    let checks = recipe_of(&report, "compiler")["coverage"].as_array().unwrap().clone();
    assert!(checks.iter().all(|c| c["ok"] == true), "{checks:?}");
    assert_eq!(checks[1]["files"][0]["path"], "amdgcn/bitcode/oclc_isa_version_1010.bc");
}

#[test]
fn the_toolchain_check_builds_hip_code_for_every_requested_target_the_way_consumers_do() {
    let p = Proofs::new();
    let out = p.build(&["toolchain", "--target", "gfx1010,gfx900"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    // Each line of the check is a step of its own, in the log and the report.
    let report = p.report();
    let r = recipe_of(&report, "toolchain");
    let steps: Vec<&str> = r["steps"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert!(steps.ends_with(&["check-hip-toolchain.1", "check-hip-toolchain.2", "check-hip-toolchain.3"]), "{steps:?}");
    // A host-only recipe's check compiles for the requested targets, and its device code is read.
    let cov = r["coverage"].as_array().unwrap();
    assert_eq!(cov.len(), 1, "{cov:?}");
    assert_eq!(cov[0]["pattern"], "check hip-toolchain: build/libhipcheck.so");
    assert_eq!(cov[0]["ok"], true, "{cov:?}");
    let mut found: Vec<String> =
        cov[0]["files"][0]["targets"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    found.sort();
    assert_eq!(found, ["gfx1010", "gfx900"]);
    // The configure really found HIP's CMake package and linked hip::host / hip::device.
    let configure = std::fs::read_to_string(p.work("toolchain").join("logs/check-hip-toolchain.1.log")).unwrap();
    assert!(configure.contains("hip found at /usr/lib/x86_64-linux-gnu/cmake/hip"), "{configure}");
    assert!(p.work("toolchain").join("build/checks/hip-toolchain/build/hostcheck").exists());
}

#[test]
fn a_check_is_taken_from_the_stacks_own_folder_before_the_shared_one() {
    let p = Proofs::new();
    // The fixture has hip-toolchain only in the shared recipes/checks/ (the build of the shared
    // copy is the test above). A stack's own copy of the folder is taken instead, whole.
    let own = p.tree.join("recipes/proofs/checks/hip-toolchain");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.16)\nproject(own NONE)\nmessage(FATAL_ERROR \"the stack's own copy ran\")\n",
    )
    .unwrap();
    let out = p.build(&["toolchain", "--target", "gfx1010"]);
    let err = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("the stack's own copy ran"), "{err}");
    // Its files are the check's files: the shared ones were not copied beside them.
    let dir = p.work("toolchain").join("build/checks/hip-toolchain");
    assert!(dir.join("CMakeLists.txt").exists() && !dir.join("saxpy.hip").exists());

    // Neither folder has it: `recipes check` names both places.
    std::fs::remove_dir_all(&own).unwrap();
    std::fs::remove_dir_all(p.tree.join("recipes/checks/hip-toolchain")).unwrap();
    let mut c = rocmforge(p.home.path());
    c.arg("--recipes").arg(&p.tree).args(["--stack", "proofs", "recipes", "check"]);
    let out = c.output().unwrap();
    let err = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("check `hip-toolchain`: no files in"), "{err}");
    assert!(
        err.contains("recipes/proofs/checks/hip-toolchain/ nor in") && err.contains("recipes/checks/hip-toolchain/"),
        "{err}"
    );
}

/// Two checks of one recipe naming the same `helpers` folder: it is laid out once per build, by
/// the first check, and the second finds it as the first left it (rewritten for each check, the
/// second would find only its own line in `runs`).
#[test]
fn a_helpers_folder_two_checks_share_is_laid_out_once_per_build() {
    let p = Proofs::new();
    let common = p.tree.join("recipes/proofs/checks/common");
    std::fs::create_dir_all(&common).unwrap();
    std::fs::write(common.join("helper.txt"), "shared\n").unwrap();
    std::fs::write(
        p.tree.join("recipes/proofs/pair.toml"),
        r#"[package]
name = "pair"
version = "1.0"
summary = "two checks sharing one helpers folder"

[build]
system = "script"
steps = ["mkdir -p {stage}/share && touch {stage}/share/pair"]

[[check]]
name = "first"
helpers = "common"
steps = ["test -f ../common/helper.txt && echo first >> ../common/runs"]

[[check]]
name = "second"
helpers = "common"
steps = ["test -f ../common/helper.txt && echo second >> ../common/runs"]

[targets]
gpu = false
"#,
    )
    .unwrap();
    let out = p.build(&["pair"]);
    assert!(out.status.success(), "{}", text(&out));
    let checks = p.work("pair").join("build/checks");
    assert_eq!(std::fs::read_to_string(checks.join("common/helper.txt")).unwrap(), "shared\n");
    assert_eq!(std::fs::read_to_string(checks.join("common/runs")).unwrap(), "first\nsecond\n");
}

#[test]
fn a_check_that_fails_names_the_check_its_command_and_the_compilers_error() {
    let p = Proofs::new();
    // gfx9 has DPP row_bcast: the check passes and the artifact is stored.
    let out = p.build(&["dpp", "--target", "gfx900"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(p.cached().contains("dpp"), "{}", p.cached());
    // gfx10 has none: the check's step fails the recipe; nothing is stored for gfx1010.
    let out = p.build(&["dpp", "--target", "gfx1010"]);
    let err = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("dpp: step `check-dpp-row-bcast` failed (exit status 1)"), "{err}");
    assert!(err.contains("hipcc --offload-arch=$t -c row_bcast.hip"), "{err}");
    assert!(err.contains("error: not a valid operand."), "{err}");
    assert!(err.contains("row_bcast:15"), "{err}");
    assert_eq!(p.cached().matches("dpp").count(), 1, "only the gfx900 artifact: {}", p.cached());
}

#[test]
fn a_library_that_needs_an_executable_stack_fails_its_recipe_naming_the_file_and_the_fix() {
    let p = Proofs::new();
    p.edit("hostlib", "libanswer.so -Wl,-z,noexecstack", "libanswer.so -Wl,-z,execstack");
    let out = p.build(&["hostlib"]);
    let err = text(&out);
    assert!(!out.status.success(), "{err}");
    for want in [
        "hostlib: installs ELF files that need an executable stack, which glibc 2.41 and later refuse to load (dlopen: cannot enable executable stack); nothing was stored:",
        "\n  - lib/libanswer.so: needs an executable stack (PT_GNU_STACK RWE): glibc 2.41+ refuses to load it\n",
        "Fix its build in recipes/proofs/hostlib.toml: link each with `-Wl,-z,noexecstack`, or add `-Wa,--noexecstack` for assembly sources",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
    // The program linked with -z noexecstack is fine: only the library is named.
    assert!(!err.contains("bin/answer"), "{err}");
    assert!(!p.cached().contains("hostlib"), "{}", p.cached());
    let report = p.report();
    let checks = recipe_of(&report, "hostlib")["coverage"].as_array().unwrap().clone();
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0]["kind"], "stack");
    assert_eq!(checks[0]["pattern"], "lib/libanswer.so");
    assert_eq!(checks[0]["ok"], false);

    // Linked as the recipe says, it builds; the report says how many files were read.
    p.edit("hostlib", "libanswer.so -Wl,-z,execstack", "libanswer.so -Wl,-z,noexecstack");
    let out = p.build(&["hostlib"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("stack: 2 ELF libraries and executables read, none needs an executable stack"),
        "{}",
        text(&out)
    );
    assert!(p.cached().contains("hostlib"), "{}", p.cached());
    let report = p.report();
    let checks = recipe_of(&report, "hostlib")["coverage"].as_array().unwrap().clone();
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!((checks[0]["kind"].as_str(), checks[0]["ok"].as_bool()), (Some("stack"), Some(true)));
}
