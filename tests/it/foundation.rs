//! The recipe model, validation messages, graph, targets and the CLI (issue: the foundation).

use std::path::Path;

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{copy_tree, fixture_tree, rocmforge, scrub};

/// A copy of the fixture tree with `edit` applied; returns (tempdir, root).
fn broken_tree(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture_tree(), dir.path());
    edit(dir.path());
    dir
}

fn replace_in(root: &Path, rel: &str, from: &str, to: &str) {
    let p = root.join(rel);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains(from), "{rel} does not contain {from:?}");
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
}

/// Runs `recipes check` on a broken tree; returns the scrubbed stderr, asserting exit code 3.
fn check_errors(edit: impl FnOnce(&Path)) -> String {
    let dir = broken_tree(edit);
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path()).arg("--recipes").arg(dir.path()).args(["recipes", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    scrub(&String::from_utf8(out.stderr).unwrap(), dir.path())
}

const F: &str = "recipes/fixture";

#[test]
fn fixture_tree_is_valid() {
    let home = tempfile::tempdir().unwrap();
    rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["recipes", "check"])
        .assert()
        .success()
        .stdout("ok: 1 stack(s), 11 recipes, no problems\n");
}

/// Every refusal the build makes for what a recipe says (not for the host or the network), as
/// recipes/README.md lists them ("What `recipes check` refuses"): `recipes check` refuses each
/// the same. One edit of the fixture tree per entry: (file, from, to, what check must say).
const REFUSED_FOR_WHAT_THE_RECIPE_SAYS: &[(&str, &str, &str, &str)] = &[
    (
        "miopen",
        "-DGPU_TARGETS={targets}",
        "-DHALF_INCLUDE_DIR={root:half/include",
        "`{root:half/include` opens a placeholder that no `}` closes: write `{name}`, or `{{` for a literal brace",
    ),
    (
        "llvm",
        "[targets]\ngpu = false\n",
        "[targets]\nsupported = []\n",
        "`[targets] supported` is empty: the recipe would build for no target, so never",
    ),
    (
        "llvm",
        "[targets]\n",
        "[host]\nversions = { boost = \">=12, <5\" }\n\n[targets]\n",
        "`[host] versions.boost = \">=12, <5\"`: `>=12, <5` holds for no version: `>=12` and `<5` exclude each other",
    ),
    (
        "miopen",
        "-DGPU_TARGETS={targets}",
        "-DGPU_TARGETS={nosuch}",
        "[build] args: `-DGPU_TARGETS={nosuch}`: unknown placeholder `{nosuch}`; known: {prefix} {targets}",
    ),
    (
        "torch",
        "MAX_JOBS = \"{jobs}\"",
        "MAX_JOBS = \"{job}\"",
        "[build] env MAX_JOBS: `{job}`: unknown placeholder `{job}`",
    ),
    (
        "clr",
        "-DHIP_COMMON_DIR={src:hip}",
        "-DHIP_COMMON_DIR={src:rocr}",
        "`{src:rocr}` names a recipe that is not among its source dependencies",
    ),
    (
        "miopen",
        "-DGPU_TARGETS={targets}",
        "-DHALF_INCLUDE_DIR={root:half}/include",
        "`{root:half}` names a recipe that is not among its build dependencies; add it to `[dependencies] build`",
    ),
    (
        "torch",
        "[build]\n",
        "[build]\nsteps = [\"echo {{literal}}\", \"  \"]\n",
        "[build] steps: an empty step runs nothing and always succeeds",
    ),
    (
        "torch",
        "[build]\n",
        "[build]\nsteps = [\"true\", \"# nothing\\n  # still nothing\"]\n",
        "[build] steps: `# nothing\n  # still nothing` is only comments: it runs nothing and always succeeds",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[check]]\nname = \"smoke\"\nsteps = [\"# compile it\"]\n\n[targets]\n",
        "check `smoke` has no steps: it would prove nothing",
    ),
    (
        "torch",
        "[build]\n",
        "[build]\nrequirements = [\"numpy=={numpy}\"]\n",
        "[build] requirements: `numpy=={numpy}`: unknown placeholder `{numpy}`",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[check]]\nname = \"smoke\"\nsteps = [\"run {nosuch}\"]\n\n[targets]\n",
        "check `smoke` steps: `run {nosuch}`: unknown placeholder `{nosuch}`",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[check]]\nname = \"smoke\"\nsteps = [\"\"]\n\n[targets]\n",
        "check `smoke` has no steps: it would prove nothing",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[check]]\nname = \"smoke\"\nfiles = \"missing\"\nsteps = [\"true\"]\n\n[targets]\n",
        "check `smoke`: no files in",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[provides]]\nwhat = \"x\"\nconsumers = [\"clr\"]\nfiles = [\"lib/x\"]\n\n[targets]\n",
        "consumer `clr` must read `<recipe>: <upstream file:line>`",
    ),
    (
        "llvm",
        "args = [\"-DLLVM_TARGETS_TO_BUILD=AMDGPU;X86\"]",
        "args = [\"-DCMAKE_INSTALL_PREFIX=/opt/x\"]",
        "`-DCMAKE_INSTALL_PREFIX=/opt/x` installs outside the stack's prefix",
    ),
    (
        "hip",
        "system = \"source-only\"",
        "system = \"source-only\"\nrequirements = [\"x\"]",
        "`requirements` are installed into a build venv, and a `source-only` recipe builds nothing",
    ),
    (
        "llvm",
        "memory-per-job-gb = 4",
        "memory-per-job-gb = 4\ninstall-wheels = [\"torch\"]",
        "`install-wheels` is for python-wheel recipes; this one is `cmake`",
    ),
    ("llvm", "system = \"cmake\"", "system = \"script\"", "a `script` recipe without `steps` builds nothing"),
    // No path a recipe writes may leave its tree: the build would run in, copy from or check a
    // host directory (`subdir = "/etc"` put /etc/shadow in the artifact).
    (
        "hip",
        "tag = \"rocm-6.2.4\"",
        "tag = \"rocm-6.2.4\"\nsubdir = \"/etc\"",
        "`subdir` `/etc` must be a relative path inside the source tree",
    ),
    (
        "llvm",
        "subdir = \"llvm\"",
        "subdir = \"llvm/../..\"",
        "`subdir` `llvm/../..` must be a relative path inside the source tree",
    ),
    ("rocblas", "sha256 = ", "subdir = \"..\"\nsha256 = ", "`subdir` `..` must be a relative path inside the source tree"),
    ("llvm", "from = \"llvm-project\"", "from = \"../llvm-project\"", "dependency `../llvm-project` does not exist"),
    (
        "llvm",
        "[targets]\n",
        "[[check]]\nname = \"smoke\"\nfiles = \"../../etc\"\nsteps = [\"true\"]\n\n[targets]\n",
        "check files `../../etc` must be a folder name under recipes/fixture/checks/ or recipes/checks/",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[check]]\nname = \"smoke\"\nfiles = \"/etc\"\nsteps = [\"true\"]\n\n[targets]\n",
        "check files `/etc` must be a folder name",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[check]]\nname = \"smoke\"\nhelpers = \"../../etc\"\nsteps = [\"true\"]\n\n[targets]\n",
        "check helpers `../../etc` must be a folder name under recipes/fixture/checks/ or recipes/checks/",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[check]]\nname = \"smoke\"\nhelpers = \"nowhere\"\nsteps = [\"true\"]\n\n[targets]\n",
        "check `smoke`: no files in",
    ),
    (
        "llvm",
        "[targets]\n",
        "[[provides]]\nwhat = \"x\"\nconsumers = [\"clr: a.cmake:1\"]\nfiles = [\"lib/../../etc/shadow\"]\n\n[targets]\n",
        "`lib/../../etc/shadow` must be a relative path inside the installed tree",
    ),
    (
        "rocblas",
        "supported = [",
        "device-code = [\"/opt/rocm/lib/librocblas.so\"]\nsupported = [",
        "`/opt/rocm/lib/librocblas.so` must be a relative path inside the installed tree",
    ),
    (
        "rocblas",
        "supported = [",
        "must-contain = { \"../share/x\" = \"y\" }\nsupported = [",
        "`../share/x` must be a relative path inside the installed tree",
    ),
    (
        "miopen",
        "\"-DMIOPEN_USE_COMPOSABLEKERNEL=OFF\"",
        "\"-DCMAKE_INSTALL_PREFIX={prefix}/../x\"",
        "`-DCMAKE_INSTALL_PREFIX={prefix}/../x` installs outside the stack's prefix",
    ),
    (
        "miopen",
        "\"-DMIOPEN_USE_COMPOSABLEKERNEL=OFF\"",
        "\"-DCMAKE_INSTALL_PREFIX={prefix}-old\"",
        "`-DCMAKE_INSTALL_PREFIX={prefix}-old` installs outside the stack's prefix",
    ),
    (
        "rocblas",
        "[targets]\n",
        "[external]\nfiles = [\"/etc/shadow\"]\n\n[targets]\n",
        "`[external] files` `/etc/shadow` must be a relative path inside the installation",
    ),
    ("stack", "default-targets = [\"gfx1010\"]", "default-targets = []", "`default-targets` is empty"),
    (
        "stack",
        "default = true",
        "default = true\nindex-path = \"simple\"",
        "`index-path` `simple` is a name the index directory's top already uses",
    ),
    (
        "stack",
        "default = true",
        "default = true\nindex-path = \"index.json\"",
        "`index-path` `index.json` is a name the index directory's top already uses",
    ),
    ("rocblas", "version = \"4.2.4\"", "version = \"\"", "`version` `` must be letters, digits and `.+-_~`, not empty"),
    ("rocblas", "version = \"4.2.4\"", "version = \"4.2/../x\"", "`version` `4.2/../x` must be letters, digits and `.+-_~`"),
];

#[test]
fn check_refuses_what_the_build_would_refuse_for_what_the_recipe_says() {
    for (recipe, from, to, said) in REFUSED_FOR_WHAT_THE_RECIPE_SAYS {
        let e = check_errors(|r| replace_in(r, &format!("{F}/{recipe}.toml"), from, to));
        assert!(e.contains(said), "{recipe}: `{to}` must be refused with `{said}`:\n{e}");
        assert!(e.contains(&format!("{recipe}.toml")), "{e}");
        assert!(!e.contains("{literal}"), "literal braces are not placeholders: {e}");
    }
}

/// A path that would leave its tree is refused at its own line and column, as a patch name is.
#[test]
fn a_subdir_leaving_the_source_tree_is_refused_at_its_line() {
    let e = check_errors(|r| {
        replace_in(r, &format!("{F}/hip.toml"), "tag = \"rocm-6.2.4\"", "tag = \"rocm-6.2.4\"\nsubdir = \"/etc\"");
        replace_in(r, &format!("{F}/llvm.toml"), "subdir = \"llvm\"", "subdir = \"../..\"");
    });
    assert!(e.contains("`subdir` `/etc` must be a relative path inside the source tree\n  --> [ROOT]/recipes/fixture/hip.toml:9:10"), "{e}");
    assert!(e.contains("`subdir` `../..` must be a relative path inside the source tree\n  --> [ROOT]/recipes/fixture/llvm.toml:8:10"), "{e}");
    assert!(e.contains("2 problems found"), "nothing else is refused: {e}");
}

/// `{prefix}/<path>` for a file a build dependency may bring from an installation is refused at
/// its line, naming `{root:<dep>}` (the night: clr's `-DHIPCC_BIN_DIR={prefix}/bin` held no
/// hipconfig with hipcc taken from /usr). The same path of a dependency that is always built, and
/// `{root:hipcc}/bin`, pass.
#[test]
fn a_prefix_path_to_a_file_an_installation_may_bring_is_refused_naming_root() {
    let taken = |r: &Path| {
        replace_in(r, &format!("{F}/hipcc.toml"), "[targets]\n", "[external]\nfiles = [\"bin/hipcc\"]\n\n[targets]\n")
    };
    let e = check_errors(|r| {
        taken(r);
        replace_in(
            r,
            &format!("{F}/clr.toml"),
            "\"-DCLR_BUILD_HIP=ON\"",
            "\"-DCLR_BUILD_HIP=ON\", \"-DHIPCC_BIN_DIR={prefix}/bin\"",
        );
    });
    assert!(
        e.contains("`{prefix}/bin` is where `hipcc` puts `bin/hipcc` only when it is built: taken from an installation ([external] of `hipcc`), it lies there\n  --> [ROOT]/recipes/fixture/clr.toml:17:"),
        "{e}"
    );
    assert!(e.contains("help: write `{root:hipcc}/bin`"), "{e}");
    assert!(e.contains("1 problem found"), "nothing else is refused: {e}");

    for (edit_hipcc, arg) in [(false, "{prefix}/bin"), (true, "{root:hipcc}/bin")] {
        let dir = broken_tree(|r| {
            if edit_hipcc {
                taken(r);
            }
            replace_in(
                r,
                &format!("{F}/clr.toml"),
                "\"-DCLR_BUILD_HIP=ON\"",
                &format!("\"-DCLR_BUILD_HIP=ON\", \"-DHIPCC_BIN_DIR={arg}\""),
            );
        });
        let home = tempfile::tempdir().unwrap();
        rocmforge(home.path()).arg("--recipes").arg(dir.path()).args(["recipes", "check"]).assert().success();
    }
}

#[test]
fn error_toml_syntax() {
    let e = check_errors(|r| replace_in(r, &format!("{F}/rocblas.toml"), "version = \"4.2.4\"", "version = \"4.2.4"));
    insta::assert_snapshot!(e);
}

#[test]
fn error_unknown_field() {
    let e = check_errors(|r| replace_in(r, &format!("{F}/rocblas.toml"), "summary = \"BLAS\"", "sumary = \"BLAS\""));
    insta::assert_snapshot!(e);
}

#[test]
fn error_missing_field() {
    let e = check_errors(|r| replace_in(r, &format!("{F}/rocblas.toml"), "version = \"4.2.4\"\n", ""));
    insta::assert_snapshot!(e);
}

#[test]
fn error_wrong_type() {
    let e = check_errors(|r| {
        replace_in(r, &format!("{F}/rocblas.toml"), "memory-per-job-gb = 3", "memory-per-job-gb = \"three\"")
    });
    insta::assert_snapshot!(e);
}

#[test]
fn error_unknown_build_system() {
    let e = check_errors(|r| replace_in(r, &format!("{F}/rocblas.toml"), "system = \"cmake\"", "system = \"meson\""));
    insta::assert_snapshot!(e);
}

#[test]
fn error_missing_dependency_suggests_closest() {
    let e = check_errors(|r| {
        replace_in(r, &format!("{F}/miopen.toml"), "build = [\"clr\", \"rocblas\"]", "build = [\"clr\", \"rocblsa\"]")
    });
    assert!(e.contains("did you mean `rocblas`?"), "{e}");
    insta::assert_snapshot!(e);
}

#[test]
fn error_duplicate_name() {
    let e = check_errors(|r| {
        let text = std::fs::read_to_string(r.join(format!("{F}/miopen.toml"))).unwrap();
        // A second file that claims the same name (its file name differs, which is reported too).
        std::fs::write(r.join(format!("{F}/miopen2.toml")), text).unwrap();
    });
    assert!(e.contains("duplicate recipe name `miopen`"), "{e}");
    insta::assert_snapshot!(e);
}

#[test]
fn error_cycle_prints_the_cycle() {
    let e = check_errors(|r| {
        replace_in(r, &format!("{F}/llvm.toml"), "[build]", "[dependencies]\nbuild = [\"clr\"]\n\n[build]");
    });
    assert!(e.contains("dependency cycle: clr -> comgr -> llvm -> clr"), "{e}");
    insta::assert_snapshot!(e);
}

#[test]
fn error_missing_patch() {
    let e =
        check_errors(|r| std::fs::remove_file(r.join("patches/fixture/miopen/0001-batchnorm-gfx101x.patch")).unwrap());
    insta::assert_snapshot!(e);
}

#[test]
fn error_malformed_rev_and_sha256() {
    let e = check_errors(|r| {
        replace_in(r, &format!("{F}/clr.toml"), "65d174c3e35423bf25c9c369513780c9d9ca760c", "65d174c3e354");
        replace_in(r, &format!("{F}/rocblas.toml"), "sha256 = \"aaaa", "sha256 = \"zzzz");
    });
    assert!(e.contains("2 problems found"), "{e}");
    insta::assert_snapshot!(e);
}

#[test]
fn error_source_without_git_or_url() {
    let e = check_errors(|r| {
        replace_in(r, &format!("{F}/hipblaslt.toml"), "git = \"https://github.com/ROCm/hipBLASLt.git\"\n", "")
    });
    insta::assert_snapshot!(e);
}

#[test]
fn error_unknown_target_in_recipe() {
    let e = check_errors(|r| replace_in(r, &format!("{F}/rocblas.toml"), "\"gfx906\"", "\"gfx907\""));
    insta::assert_snapshot!(e);
}

#[test]
fn all_problems_are_reported_in_one_run() {
    let e = check_errors(|r| {
        replace_in(r, &format!("{F}/rocblas.toml"), "summary = \"BLAS\"", "sumary = \"BLAS\"");
        replace_in(r, &format!("{F}/miopen.toml"), "\"rocblas\"]", "\"rocblsa\"]");
        replace_in(r, &format!("{F}/clr.toml"), "65d174c3e35423bf25c9c369513780c9d9ca760c", "nothex");
        std::fs::remove_file(r.join("patches/fixture/miopen/0001-batchnorm-gfx101x.patch")).unwrap();
    });
    assert!(e.contains("4 problems found in the recipe tree"), "{e}");
    for needle in [
        "unknown field `sumary`",
        "dependency `rocblsa` does not exist",
        "`rev` must be a full 40-character",
        "patch `0001-batchnorm-gfx101x.patch` does not exist",
    ] {
        assert!(e.contains(needle), "missing {needle:?} in {e}");
    }
}

fn plan_json(args: &[&str]) -> Value {
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        .arg("plan")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn plan_json_order_respects_every_edge_and_closure_is_exact() {
    let plan = plan_json(&["torch", "--target", "gfx1010"]);
    let recipes = plan["recipes"].as_array().unwrap();
    let order: Vec<&str> = recipes.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(order.len(), 11);
    for r in recipes {
        let me = order.iter().position(|n| *n == r["name"].as_str().unwrap()).unwrap();
        for d in r["deps"].as_array().unwrap() {
            let dep = order.iter().position(|n| *n == d.as_str().unwrap()).expect("dep in closure");
            assert!(dep < me, "{} comes before its dependency {}", order[me], order[dep]);
        }
        let want = if r["name"] == "hip" { "blocked" } else { "not-built" };
        assert_eq!(r["state"], want, "{}", r["name"]);
    }
    // Deterministic: the same order every time, alphabetical among ready recipes.
    assert_eq!(
        order,
        [
            "hip",
            "llvm-project",
            "llvm",
            "device-libs",
            "comgr",
            "hipcc",
            "clr",
            "hipblaslt",
            "rocblas",
            "miopen",
            "torch"
        ]
    );
    // A smaller closure holds exactly what is needed.
    let plan = plan_json(&["comgr"]);
    let names: Vec<&str> = plan["recipes"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["llvm-project", "llvm", "device-libs", "comgr"]);
}

#[test]
fn plan_shows_target_decisions() {
    let plan = plan_json(&["torch", "--target", "gfx1010,gfx1012"]);
    let by_name = |n: &str| plan["recipes"].as_array().unwrap().iter().find(|r| r["name"] == n).unwrap().clone();
    assert_eq!(by_name("rocblas")["targets"]["targets"], serde_json::json!(["gfx1010", "gfx1012"]));
    assert_eq!(by_name("hipblaslt")["targets"]["decision"], "substitute");
    assert_eq!(by_name("hipblaslt")["targets"]["targets"], serde_json::json!(["gfx90a"]));
    assert_eq!(by_name("clr")["targets"]["decision"], "host-only");
    assert_eq!(by_name("hip")["state"], "blocked");
    assert_eq!(by_name("hip")["locked"], false);
    assert_eq!(by_name("miopen")["patches"], serde_json::json!(["0001-batchnorm-gfx101x.patch"]));
    // Only some targets supported: built for those, the rest named.
    let plan = plan_json(&["rocblas", "--target", "gfx1010,gfx1011"]);
    let r = plan["recipes"].as_array().unwrap().iter().find(|r| r["name"] == "rocblas").unwrap().clone();
    assert_eq!(r["targets"]["targets"], serde_json::json!(["gfx1010"]));
    assert_eq!(r["targets"]["dropped"], serde_json::json!(["gfx1011"]));
}

#[test]
fn plan_text_snapshot() {
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        // One job: the night's estimate depends neither on the cores nor on the memory here.
        .args(["plan", "miopen", "--target", "gfx1010", "--jobs", "1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}

#[test]
fn waves_group_independent_recipes() {
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["graph", "torch", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let g: Value = serde_json::from_slice(&out.stdout).unwrap();
    let waves = g["waves"].as_array().unwrap();
    assert_eq!(waves[0], serde_json::json!(["hip", "llvm-project"]));
    assert!(waves.iter().any(|w| w == &serde_json::json!(["hipblaslt", "rocblas"])), "{waves:?}");
    assert_eq!(g["edges"].as_array().unwrap().iter().filter(|e| e["to"] == "clr").count(), 3);
}

#[test]
fn graph_dot() {
    let home = tempfile::tempdir().unwrap();
    rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["graph", "clr"])
        .assert()
        .success()
        .stdout(predicate::str::starts_with("digraph rocmforge {"))
        .stdout(predicate::str::contains("\"hip\" -> \"clr\";"))
        .stdout(predicate::str::contains("\"llvm\" -> \"comgr\";"));
}

#[test]
fn unknown_target_is_refused_with_the_list() {
    let home = tempfile::tempdir().unwrap();
    rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["plan", "torch", "--target", "gfx9999", "--json"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("error: unknown GPU target `gfx9999`"))
        .stderr(predicate::str::contains("known targets: gfx803, gfx900"))
        .stderr(predicate::str::contains("gfx1010, gfx1011, gfx1012"));
}

#[test]
fn zero_jobs_and_an_empty_target_in_a_list_are_refused_before_anything_runs() {
    let home = tempfile::tempdir().unwrap();
    for cmd in ["build", "plan", "doctor"] {
        for n in ["0", "-1"] {
            // `-1` is our own refusal, not clap's tip to write `-- -1` (which makes it a recipe).
            rocmforge(home.path())
                .arg("--recipes")
                .arg(fixture_tree())
                .args([cmd, "torch", "-j", n])
                .assert()
                .code(2)
                .stderr(predicate::str::contains(format!(
                    "invalid value '{n}' for '--jobs <JOBS>': {n} jobs would build nothing: the job count must be at least 1"
                )))
                .stderr(predicate::str::contains("-- -1").not());
        }
    }
    rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["plan", "torch", "--memory-gb", "-5"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--memory-gb -5: give the machine's memory in GiB, more than 0"))
        .stderr(predicate::str::contains("-- -5").not());
    rocmforge(home.path())
        .args(["verify", "--timeout", "-5"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--timeout must be a positive number of seconds"));
    for cmd in ["build", "plan"] {
        rocmforge(home.path())
            .arg("--recipes")
            .arg(fixture_tree())
            .args([cmd, "torch", "--target", "gfx1010,,"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("error: `gfx1010,,` has an empty target between its separators"));
    }
    assert!(!home.path().join("state/rocmforge").join("builds").exists());
}

#[test]
fn a_cache_dir_that_is_a_file_is_named_as_unusable_with_the_setting_that_moves_it() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("cache-file");
    std::fs::write(&file, "not a directory").unwrap();
    for cmd in [&["build", "torch"][..], &["fetch", "torch"], &["lock"]] {
        let out = rocmforge(home.path())
            .env("ROCMFORGE_CACHE_DIR", &file)
            .arg("--recipes")
            .arg(fixture_tree())
            .args(cmd)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{cmd:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "the cache dir `{}` is unusable: it is a file, not a directory. Set `cache-dir` in the config file",
                file.display()
            )) && err.contains("(or ROCMFORGE_CACHE_DIR)"),
            "{cmd:?}: {err}"
        );
        assert!(!err.contains("Not a directory (os error 20)"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a directory", "nothing written over it");
}

#[test]
fn unknown_recipe_and_stack_suggest() {
    let home = tempfile::tempdir().unwrap();
    rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["plan", "miopn"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no recipe named `miopen`").not())
        .stderr(predicate::str::contains("no recipe named `miopn` in stack `fixture` (did you mean `miopen`?)"));
    rocmforge(home.path())
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["--stack", "fixtur", "plan", "miopen"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no stack named `fixtur`"))
        .stderr(predicate::str::contains("(did you mean `fixture`?)"));
}

#[test]
fn recipes_dir_from_environment_and_list_show() {
    let home = tempfile::tempdir().unwrap();
    rocmforge(home.path())
        .env("ROCMFORGE_RECIPES", fixture_tree())
        .args(["recipes", "list"])
        .assert()
        .success()
        .stdout(predicate::str::contains("fixture (default)  ROCm 6.2.4  default targets gfx1010  (11 recipes)"))
        .stdout(predicate::str::contains("hip ").and(predicate::str::contains("[unlocked]")));
    rocmforge(home.path())
        .env("ROCMFORGE_RECIPES", fixture_tree())
        .args(["recipes", "show", "hipblaslt"])
        .assert()
        .success()
        .stdout(predicate::str::contains("targets:  gfx90a,gfx940,gfx941,gfx942,gfx1100"))
        .stdout(predicate::str::contains("note  no gfx10 kernels"));
}

#[test]
fn embedded_recipes_work_from_any_directory() {
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path()).current_dir(home.path()).args(["recipes", "list"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("example"), "{text}");
}

#[test]
fn not_a_recipe_tree_is_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    rocmforge(home.path())
        .args(["--recipes", "/nonexistent/tree", "recipes", "list"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("has no `recipes/` folder"));
}

#[test]
fn help_on_every_command() {
    let home = tempfile::tempdir().unwrap();
    for cmd in [
        &["--help"][..],
        &["plan", "--help"],
        &["graph", "--help"],
        &["recipes", "--help"],
        &["recipes", "list", "--help"],
        &["recipes", "show", "--help"],
    ] {
        rocmforge(home.path()).args(cmd).assert().success().stdout(predicate::str::contains("Usage: rocmforge"));
    }
    rocmforge(home.path()).arg("--help").assert().stdout(predicate::str::contains("Exit codes: 0 success"));
}

/// A numeric setting from the environment that does not parse, or means nothing (a timeout of
/// 0 s fails every download), is refused naming the variable, never taken silently.
#[test]
fn a_numeric_env_setting_that_means_nothing_is_refused_naming_it() {
    let home = tempfile::tempdir().unwrap();
    for (name, value, unit, min) in [
        ("ROCMFORGE_HTTP_TIMEOUT_SECS", "0", "seconds", 1),
        ("ROCMFORGE_HTTP_TIMEOUT_SECS", "60s", "seconds", 1),
        ("ROCMFORGE_RETRIES", "0", "attempts", 1),
        ("ROCMFORGE_RETRIES", "-1", "attempts", 1),
        ("ROCMFORGE_RETRY_BASE_MS", "ten", "milliseconds", 0),
        ("ROCMFORGE_CACHE_CONNECT_TIMEOUT_SECS", "0", "seconds", 1),
        ("ROCMFORGE_CACHE_BLOB_TIMEOUT_SECS", "1e3", "seconds", 1),
    ] {
        rocmforge(home.path())
            .env(name, value)
            .arg("--recipes")
            .arg(fixture_tree())
            .args(["plan", "miopen"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!(
                "{name}=`{value}` is not valid: use a whole number of {unit}, at least {min}"
            )));
    }
    rocmforge(home.path())
        .env("ROCMFORGE_CACHE_READ_ONLY", "ture")
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["plan", "miopen"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("ROCMFORGE_CACHE_READ_ONLY=`ture` is not valid: use `1`, `true`"));
    rocmforge(home.path())
        .env("ROCMFORGE_CACHE_READ_ONLY", "yes")
        .env("ROCMFORGE_HTTP_TIMEOUT_SECS", "7")
        .env("ROCMFORGE_RETRY_BASE_MS", "0")
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["plan", "miopen"])
        .assert()
        .success();
}

/// A recipe file that is a link leading nowhere is an error naming it (it was skipped without a
/// word, the stack building without that recipe); a link to a file is read like the file, and an
/// editor's lock link (`.#x.toml`) is no recipe.
#[test]
fn a_dangling_link_in_the_recipe_tree_is_named() {
    let home = tempfile::tempdir().unwrap();
    let dir = broken_tree(|r| {
        let d = r.join(F);
        std::fs::rename(d.join("hip.toml"), r.join("hip.toml")).unwrap();
        std::os::unix::fs::symlink(r.join("hip.toml"), d.join("hip.toml")).unwrap();
        std::os::unix::fs::symlink("user@host.1234", d.join(".#clr.toml")).unwrap();
    });
    rocmforge(home.path())
        .arg("--recipes")
        .arg(dir.path())
        .args(["recipes", "check"])
        .assert()
        .success()
        .stdout("ok: 1 stack(s), 11 recipes, no problems\n");
    let gone = dir.path().join(F).join("gone.toml");
    std::os::unix::fs::symlink(dir.path().join("moved-away.toml"), &gone).unwrap();
    for cmd in [&["recipes", "check"][..], &["plan", "miopen"]] {
        rocmforge(home.path()).arg("--recipes").arg(dir.path()).args(cmd).assert().failure().stderr(
            predicate::str::contains(format!(
                "`{}` is a symbolic link to `{}`, which does not exist",
                gone.display(),
                dir.path().join("moved-away.toml").display()
            )),
        );
    }
}

#[test]
fn a_config_file_named_by_rocmforge_config_must_exist() {
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("nowhere/config.toml");
    rocmforge(home.path())
        .env("ROCMFORGE_CONFIG", &missing)
        .arg("--recipes")
        .arg(fixture_tree())
        .args(["plan", "miopen"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "the config file `{}` named by ROCMFORGE_CONFIG does not exist",
            missing.display()
        )));
    // Without the variable, no config file is fine.
    rocmforge(home.path()).arg("--recipes").arg(fixture_tree()).args(["plan", "miopen"]).assert().success();
}

#[test]
fn a_patch_file_no_series_names_is_a_warning() {
    let dir = broken_tree(|root| {
        std::fs::create_dir_all(root.join("patches/fixture/miopen")).unwrap();
        std::fs::write(root.join("patches/fixture/miopen/0099-forgotten.patch"), "--- a/x\n+++ b/x\n").unwrap();
    });
    let out = rocmforge(dir.path()).arg("--recipes").arg(dir.path()).args(["recipes", "check"]).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("0099-forgotten.patch` is not in the patch series of `miopen` and is not applied"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no problems, 1 warning(s)"));
}

#[test]
fn settings_that_would_build_nothing_are_refused() {
    let err = check_errors(|root| {
        replace_in(
            root,
            &format!("{F}/rocblas.toml"),
            "args = [\"-DAMDGPU_TARGETS={targets}\"]",
            "args = [\"-DAMDGPU_TARGETS={targets}\", \"-DCMAKE_INSTALL_PREFIX=/opt/elsewhere\"]",
        );
    });
    assert!(
        err.contains("rocblas.toml")
            && err.contains("`-DCMAKE_INSTALL_PREFIX=/opt/elsewhere` installs outside the stack's prefix"),
        "{err}"
    );
    let err = check_errors(|root| {
        replace_in(
            root,
            &format!("{F}/rocblas.toml"),
            "system = \"cmake\"\nargs = [\"-DAMDGPU_TARGETS={targets}\"]",
            "system = \"script\"",
        );
    });
    assert!(err.contains("rocblas.toml") && err.contains("a `script` recipe without `steps` builds nothing"), "{err}");
}

#[test]
fn every_command_refuses_the_tree_recipes_check_refuses() {
    // Two stacks that both say `default = true`: `recipes check` refuses the tree, and so does
    // every command that reads it, with the same words (not only when that stack is asked for).
    let dir = broken_tree(|root| {
        copy_tree(&root.join(F), &root.join("recipes/second"));
        copy_tree(&root.join("patches/fixture"), &root.join("patches/second"));
        replace_in(root, "recipes/second/stack.toml", "name = \"fixture\"", "name = \"second\"");
    });
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| rocmforge(home.path()).arg("--recipes").arg(dir.path()).args(args).output().unwrap();
    let check = run(&["recipes", "check"]);
    assert_eq!(check.status.code(), Some(3));
    let check_err = String::from_utf8_lossy(&check.stderr).into_owned();
    assert!(check_err.contains("more than one stack says `default = true`"), "{check_err}");
    for args in [&["plan", "miopen"][..], &["--stack", "fixture", "plan", "miopen"], &["graph", "miopen"]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), check_err, "{args:?}");
    }
}
