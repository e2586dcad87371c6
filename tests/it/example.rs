//! The example stack end to end with real parts: sources from a git daemon and an HTTP server
//! on 127.0.0.1, cmake/ninja, Debian's hipcc compiling gfx1010 code, a wheel installed by pip
//! from the local index; plus crash-and-resume at every phase.

use std::path::Path;
use std::process::Command;

use crate::support::{snapshot, text, Example};

fn gpu_targets(lib: &Path) -> String {
    let o = Command::new("roc-obj-ls").arg(lib).output().expect("roc-obj-ls (Debian package hipcc) is installed");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn example_stack_builds_gfx1010_code_and_publishes_its_wheels() {
    let e = Example::new();
    let home = e.home.path();
    let out = e.build(home, &e.prefix(), &["pyvec", "--target", "gfx1010"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("built 4 recipe(s): vecmath, hipvec, example-runtime, pyvec"), "{}", text(&out));
    let objs = gpu_targets(&e.prefix().join("lib/libhipvec.so"));
    assert!(objs.contains("gfx1010") && !objs.contains("gfx1030"), "{objs}");
    // The patch was applied.
    assert!(std::fs::read_to_string(e.prefix().join("include/hipvec.h")).unwrap().contains("hipvec_patched"));

    // The wheel is in the index with its local label (rocm label, build serial, cache key).
    let page = std::fs::read_to_string(home.join("state/rocmforge/index/simple/pyvec/index.html")).unwrap();
    let label = page.split("pyvec-1.0.0+rocm5.2.3.").nth(1).unwrap_or_else(|| panic!("{page}"));
    let (serial, rest) = label.split_once('.').unwrap();
    assert!(serial.parse::<u64>().is_ok() && rest.starts_with('k'), "{page}");

    // Nothing to do the second time.
    let again = e.build(home, &e.prefix(), &["pyvec", "--target", "gfx1010"]);
    assert!(text(&again).contains("nothing to build: 4 recipe(s) up to date"), "{}", text(&again));

    // A changed patch: plan says why, and only hipvec and what depends on it rebuild.
    let patch = e.tree.join("patches/example/hipvec/0001-report-patched-build.patch");
    let p = std::fs::read_to_string(&patch).unwrap();
    std::fs::write(
        &patch,
        p.replace("this build carries rocmforge's example patch", "this build carries the example patch"),
    )
    .unwrap();
    let plan = e.cmd(home).args(["plan", "pyvec", "--json", "--prefix"]).arg(e.prefix()).output().unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let reason = |n: &str| {
        let r = plan["recipes"].as_array().unwrap().iter().find(|r| r["name"] == n).unwrap();
        format!("{}: {}", r["state"].as_str().unwrap(), r["reason"].as_str().unwrap())
    };
    assert!(reason("vecmath").starts_with("cached"), "{}", reason("vecmath"));
    assert_eq!(reason("hipvec"), "rebuild: patch 0001-report-patched-build.patch changed");
    assert_eq!(reason("example-runtime"), "rebuild: dependency hipvec rebuilt");
    assert_eq!(reason("pyvec"), "rebuild: dependency example-runtime rebuilt, dependency hipvec rebuilt");
    let out = e.build(home, &e.prefix(), &["pyvec", "--target", "gfx1010"]);
    assert!(
        text(&out).contains("built 3 recipe(s): hipvec, example-runtime, pyvec; 1 from the cache"),
        "{}",
        text(&out)
    );

    // Two targets: both in the library; host-only vecmath is not rebuilt.
    let out = e.build(home, &e.prefix(), &["hipvec", "--target", "gfx1010,gfx1030"]);
    assert!(text(&out).contains("built 1 recipe(s): hipvec; 1 from the cache"), "{}", text(&out));
    let objs = gpu_targets(&e.prefix().join("lib/libhipvec.so"));
    assert!(objs.contains("gfx1010") && objs.contains("gfx1030"), "{objs}");
}

/// `cmd` as a new user's shell would run it outside any activation: `env -i` with only PATH
/// and HOME (no LD_LIBRARY_PATH, no VIRTUAL_ENV, no ROCm variable); its stdout, trimmed.
fn outside(cmd: &mut Command, home: &Path, what: &str) -> String {
    let out = cmd
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", home)
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (install it: ci/setup.sh)"));
    assert!(out.status.success(), "{what}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Issue 38's example: pyvec's wheel requires the runtime wheel holding libvecmath and libhipvec
/// exactly, and finds them through RUNPATH relative to `$ORIGIN`; installed from the index by pip
/// and by uv into fresh venvs, it imports and calls hipvec's host entry points (which call
/// libvecmath) with no activation, the prefix moved away, `pip check` content, and again from
/// the venv moved to another directory.
#[test]
fn pyvec_from_the_index_runs_in_any_venv_without_activation() {
    let e = Example::new();
    let home = e.home.path();
    let out = e.build(home, &e.prefix(), &["pyvec", "--target", "gfx1010"]);
    assert!(out.status.success(), "{}", text(&out));
    let index = home.join("state/rocmforge/index/simple");
    let runtime = std::fs::read_to_string(index.join("rocmforge-example-runtime/index.html")).unwrap();
    let runtime_version = runtime
        .split("rocmforge_example_runtime-")
        .nth(1)
        .and_then(|r| r.split('-').next())
        .unwrap_or_else(|| panic!("{runtime}"))
        .replace("%2B", "+");
    assert!(runtime_version.starts_with("1.0.0+rocm5.2.3.gfx1010."), "{runtime_version}");
    // The libraries can come from the wheels only.
    let moved_prefix = home.join("prefix-moved-away");
    std::fs::rename(e.prefix(), &moved_prefix).unwrap();
    let user = home.join("user");
    std::fs::create_dir_all(&user).unwrap();
    let index_url = format!("file://{}/", index.display());
    let script = "import importlib.metadata as m, pyvec; \
                  print(pyvec.dot([1.0, 2.0], [3.0, 4.0]), pyvec.hipvec_info(), m.requires('pyvec'))";
    let want = format!("11.0 (1, 100) ['rocmforge-example-runtime=={runtime_version}']");

    // pip, into a fresh venv.
    let pip_venv = user.join("pip-venv");
    outside(Command::new("python3").args(["-m", "venv"]).arg(&pip_venv), &user, "python3 -m venv");
    let py = pip_venv.join("bin/python");
    outside(
        Command::new(&py)
            .args(["-m", "pip", "install", "--isolated", "--no-cache-dir", "--disable-pip-version-check", "--no-input"])
            .args(["--index-url", &index_url, "pyvec"]),
        &user,
        "pip install",
    );
    assert_eq!(outside(Command::new(&py).args(["-c", script]), &user, "pyvec under pip"), want);
    let check =
        outside(Command::new(&py).args(["-m", "pip", "check", "--disable-pip-version-check"]), &user, "pip check");
    assert_eq!(check, "No broken requirements found.");
    // The installed extension searches only folders relative to itself.
    let runpath = Command::new("readelf")
        .arg("-d")
        .arg(
            std::fs::read_dir(pip_venv.join("lib/python3.11/site-packages/pyvec"))
                .unwrap()
                .map(|f| f.unwrap().path())
                .find(|p| p.extension().is_some_and(|x| x == "so"))
                .unwrap(),
        )
        .output()
        .unwrap();
    let runpath = String::from_utf8_lossy(&runpath.stdout).into_owned();
    assert!(runpath.contains("(RUNPATH)") && runpath.contains("[$ORIGIN/../rocmforge_example/lib]"), "{runpath}");
    assert!(!runpath.contains(&home.display().to_string()), "{runpath}");

    // The venv moved to another directory.
    let moved = user.join("elsewhere/pip-venv");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&pip_venv, &moved).unwrap();
    assert_eq!(outside(Command::new(moved.join("bin/python")).args(["-c", script]), &user, "moved venv"), want);

    // uv, into another fresh venv.
    let uv_venv = user.join("uv-venv");
    let uv = |args: &[&str]| {
        let mut c = Command::new("uv");
        c.env("UV_CACHE_DIR", user.join("uv-cache")).env("UV_PYTHON_DOWNLOADS", "never").env("UV_NO_CONFIG", "1");
        c.args(args);
        c
    };
    outside(&mut uv(&["venv", "-q", "--python", "python3", uv_venv.to_str().unwrap()]), &user, "uv venv");
    let py = uv_venv.join("bin/python");
    outside(
        &mut uv(&["pip", "install", "-q", "--python", py.to_str().unwrap(), "--index-url", &index_url, "pyvec"]),
        &user,
        "uv pip install",
    );
    assert_eq!(outside(Command::new(&py).args(["-c", script]), &user, "pyvec under uv"), want);
    outside(&mut uv(&["pip", "check", "--python", py.to_str().unwrap()]), &user, "uv pip check");
}

/// The library check before a wheel is stored or published: a library that no wheel of the
/// stack holds and that is no system library is refused, naming the wheel, its file and the
/// library, and nothing is published.
#[test]
fn a_wheel_needing_a_library_no_wheel_provides_is_refused_naming_both() {
    let e = Example::new();
    let home = e.home.path();
    let edit = |file: &str, from: &str, to: &str| {
        let f = e.tree.join("recipes/example").join(file);
        let t = std::fs::read_to_string(&f).unwrap();
        assert!(t.contains(from), "{file}: {t}");
        std::fs::write(&f, t.replace(from, to)).unwrap();
    };
    let index = home.join("state/rocmforge/index/simple");
    // Debian's HIP runtime, which libhipvec links, no longer allowed from the host.
    let allowed = "system-libraries = [\"libamdhip64.so.5\"]";
    edit("stack.toml", allowed, "");
    let out = e.build(home, &e.prefix(), &["pyvec", "--target", "gfx1010"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("`rocmforge_example/lib/libhipvec.so` needs `libamdhip64.so.5`, which no wheel of the stack provides and which is not a system library"),
        "{t}"
    );
    assert!(
        t.contains("The system libraries allowed: libc.so.6,") && t.contains("stack.toml's `system-libraries`"),
        "{t}"
    );
    assert!(!index.join("rocmforge-example-runtime").exists() && !index.join("pyvec").exists(), "{t}");

    // Allowed again, but libhipvec left out of the runtime wheel: pyvec's extension is refused.
    edit("stack.toml", "python = \"3.11\"", &format!("python = \"3.11\"\n{allowed}"));
    edit("example-runtime.toml", ", hipvec = [\"lib/libhipvec.so\"]", "");
    let out = e.build(home, &e.prefix(), &["pyvec", "--target", "gfx1010"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("`pyvec/_vecmath.cpython-311-x86_64-linux-gnu.so` needs `libhipvec.so`, which no wheel of the stack provides"),
        "{t}"
    );
    assert!(t.contains("error: pyvec: `pyvec-1.0.0+rocm5.2.3."), "the wheel is named: {t}");
    assert!(index.join("rocmforge-example-runtime").exists() && !index.join("pyvec").exists(), "{t}");
}

#[test]
fn sigkill_at_every_phase_then_resume_gives_the_same_prefix() {
    let e = Example::new();
    // One prefix path for every run (it is part of the cache keys), emptied between runs.
    let prefix = e.home.path().join("shared-prefix");
    let clean_home = e.home.path().join("clean");
    let out = e
        .cmd(&clean_home)
        .env("ROCMFORGE_WORK_DIR", e.shared_work())
        .args(["build", "pyvec", "--prefix"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let want = snapshot(&prefix, &[]);
    let want_wheels = snapshot(&clean_home.join("state/rocmforge/index/simple/pyvec"), &[]);

    for point in ["fetch:hipvec", "patch:hipvec", "step:build:hipvec", "store:hipvec", "deploy:hipvec", "store:pyvec"] {
        std::fs::remove_dir_all(&prefix).unwrap();
        let home = e.home.path().join(point.replace(':', "-"));
        let work = e.shared_work();
        let crashed = e
            .cmd(&home)
            .env("ROCMFORGE_WORK_DIR", &work)
            .env("ROCMFORGE_FAULT", point)
            .args(["build", "pyvec", "--prefix"])
            .arg(&prefix)
            .output()
            .unwrap();
        assert_eq!(crashed.status.code(), None, "{point}: expected SIGKILL\n{}", text(&crashed));
        let resumed = e
            .cmd(&home)
            .env("ROCMFORGE_WORK_DIR", &work)
            .args(["build", "pyvec", "--prefix"])
            .arg(&prefix)
            .output()
            .unwrap();
        let t = text(&resumed);
        assert!(resumed.status.success(), "{point}: {t}");
        // vecmath finished before every crash point: never rebuilt.
        assert!(!t.contains("vecmath: building"), "{point}: finished recipe rebuilt\n{t}");
        if point == "store:pyvec" {
            assert!(!t.contains("hipvec: building"), "{point}: {t}");
        }
        if point == "store:hipvec" || point == "deploy:hipvec" {
            assert!(!t.contains("hipvec: build ("), "{point}: finished compile re-run\n{t}");
        }
        let got = snapshot(&prefix, &[]);
        let differ: Vec<&String> = got.iter().filter(|f| !want.contains(f)).map(|(p, _)| p).collect();
        let manifests: Vec<String> = differ
            .iter()
            .filter(|p| p.ends_with(".json"))
            .map(|p| std::fs::read_to_string(prefix.join(p)).unwrap())
            .collect();
        assert!(
            differ.is_empty() && got.len() == want.len(),
            "{point}: prefix differs from an uninterrupted build: {differ:?} {manifests:?}"
        );
        assert_eq!(
            snapshot(&home.join("state/rocmforge/index/simple/pyvec"), &[]),
            want_wheels,
            "{point}: published wheel differs"
        );
        let verify = e.cmd(&home).args(["cache", "verify"]).output().unwrap();
        assert!(verify.status.success(), "{point}: {}", text(&verify));
    }
}

/// No step of any recipe ran: no work dir has step logs, and the prefix holds no file.
fn assert_nothing_ran(home: &Path, prefix: &Path) {
    let work = home.join("cache/rocmforge/work/example");
    for r in ["vecmath", "hipvec", "pyvec"] {
        assert!(!work.join(r).join("logs").exists(), "a step of {r} ran");
    }
    // (The build's lock of the prefix, `.rocmforge/build.lock`, is not a deployed file.)
    let files = walkdir::WalkDir::new(prefix)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && !e.path().starts_with(prefix.join(".rocmforge")))
        .count();
    assert_eq!(files, 0, "something was deployed into {}", prefix.display());
}

#[test]
fn build_checks_every_source_before_the_first_step_and_lists_every_problem() {
    let e = Example::new();
    let home = e.home.path();
    // hipvec's patch no longer matches its tarball, and pyvec names a subdir its commit lacks;
    // vecmath, first in the order, is fine.
    let patch = e.tree.join("patches/example/hipvec/0001-report-patched-build.patch");
    let p = std::fs::read_to_string(&patch).unwrap();
    std::fs::write(&patch, p.replace(" int hipvec_uses_vecmath(void);", " int hipvec_uses_something_else(void);"))
        .unwrap();
    let pyvec = e.tree.join("recipes/example/pyvec.toml");
    let t = std::fs::read_to_string(&pyvec).unwrap();
    std::fs::write(&pyvec, t.replace("tag = \"v1.0.0\"", "tag = \"v1.0.0\"\nsubdir = \"python\"")).unwrap();

    let out = e.build(home, &e.prefix(), &["pyvec", "--target", "gfx1010"]);
    let text = text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("2 of the 3 source(s) this build would prepare cannot be used; nothing was built"), "{text}");
    assert!(text.contains("hipvec: ") && text.contains("0001-report-patched-build.patch"), "{text}");
    assert!(text.contains("hipvec.h"), "the patch error names the file: {text}");
    assert!(
        text.contains(
            "pyvec: recipe `pyvec`: its source `https://example.invalid/rocmforge/pyvec.git` has no directory `python`"
        ),
        "{text}"
    );
    assert_nothing_ran(home, &e.prefix());

    // The build report names each failure and its reason; the timeline marks them red.
    let report = home.join("state/rocmforge/reports/example/latest");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(report.join("report.json")).unwrap()).unwrap();
    let rec = |n: &str| json["recipes"].as_array().unwrap().iter().find(|r| r["name"] == n).unwrap().clone();
    assert_eq!(rec("hipvec")["outcome"], "failed");
    assert!(rec("hipvec")["error"].as_str().unwrap().contains("0001-report-patched-build.patch"), "{json}");
    assert!(rec("pyvec")["error"].as_str().unwrap().contains("no directory `python`"), "{json}");
    let html = std::fs::read_to_string(report.join("timeline.html")).unwrap();
    assert!(html.contains("failed: recipe `pyvec`: its source"), "the timeline labels the failure");

    // `fetch` finds the same problems.
    let fetch = e.cmd(home).args(["fetch", "pyvec"]).output().unwrap();
    let ftext = String::from_utf8_lossy(&fetch.stdout).into_owned() + &String::from_utf8_lossy(&fetch.stderr);
    assert_eq!(fetch.status.code(), Some(1), "{ftext}");
    assert!(ftext.contains("2 of 3 sources and patch series failed"), "{ftext}");
}

#[test]
fn build_refuses_a_hostile_archive_before_the_first_step() {
    use crate::support::archive::{gz, tar_of};
    let e = Example::new();
    let home = e.home.path();
    // hipvec's tarball replaced by one with an entry leading out of the tree, its digest pinned.
    let evil = gz(&tar_of(&[
        ("hipvec-1.0.0/CMakeLists.txt", tar::EntryType::Regular, None, b"project(x)\n"),
        ("hipvec-1.0.0/../../escaped.txt", tar::EntryType::Regular, None, b"x"),
    ]));
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&evil));
    e.upstream.http.add("evil-1.0.0.tar.gz", evil);
    let recipe = e.tree.join("recipes/example/hipvec.toml");
    let t = std::fs::read_to_string(&recipe).unwrap();
    let old_sha = t.lines().find_map(|l| l.strip_prefix("sha256 = \"")).unwrap().trim_end_matches('"').to_string();
    std::fs::write(
        &recipe,
        t.replace(&old_sha, &sha).replace(
            "url = \"https://example.invalid/rocmforge/hipvec-1.0.0.tar.gz\"",
            &format!("url = \"{}\"", e.upstream.http.url("evil-1.0.0.tar.gz")),
        ),
    )
    .unwrap();
    let out = e.build(home, &e.prefix(), &["pyvec", "--target", "gfx1010"]);
    let text = text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("1 of the 3 source(s) this build would prepare cannot be used"), "{text}");
    assert!(text.contains("refusing entry `hipvec-1.0.0/../../escaped.txt`: its path contains `..`"), "{text}");
    assert_nothing_ran(home, &e.prefix());
    assert!(!home.join("cache/rocmforge/escaped.txt").exists() && !home.join("cache/escaped.txt").exists());
}

/// The example stack through a shared cache (nginx as README's "A team's shared cache" sets it
/// up): machine B, with its own cache, work and state dirs and its own PATH to the same tools,
/// downloads every artifact A uploaded into the same (emptied) prefix, compiles nothing, gets
/// the same files, and publishes the wheel to its own index.
#[test]
fn a_second_machine_gets_the_example_stack_from_a_shared_cache_and_compiles_nothing() {
    use crate::remote::{cache_server, cache_url, other_path, PASSWORD};
    let e = Example::new();
    let nginx = cache_server(&e.home.path().join("nginx"));
    let base = std::fs::read_to_string(&e.config).unwrap();
    let machine = |name: &str| {
        let home = e.home.path().join(name);
        std::fs::create_dir_all(&home).unwrap();
        home
    };
    let (a, b) = (machine("a"), machine("b"));
    let keygen = e.cmd(&a).args(["cache", "keygen", "--name", "machine-a"]).output().unwrap();
    assert!(keygen.status.success(), "{}", text(&keygen));
    let a_pub = String::from_utf8(keygen.stdout).unwrap().trim().to_string();
    let trusted = format!("cache-url = \"{}\"\ntrusted-keys = [\"{a_pub}\"]\n", cache_url(&nginx));
    std::fs::write(a.join("config.toml"), format!("{trusted}cache-user = \"lab\"\n{base}")).unwrap();
    std::fs::write(b.join("config.toml"), format!("{trusted}cache-read-only = true\n{base}")).unwrap();

    // `build pyvec` on a machine (its home, its config), with these variables.
    let build_on = |home: &Path, vars: &[(&str, String)]| {
        let mut c = e.cmd(home);
        c.env("ROCMFORGE_CONFIG", home.join("config.toml"));
        for (k, v) in vars {
            c.env(k, v);
        }
        c.args(["build", "pyvec", "--target", "gfx1010", "--prefix"]).arg(e.prefix()).output().unwrap()
    };
    let out = build_on(&a, &[("ROCMFORGE_CACHE_PASSWORD", PASSWORD.to_string())]);
    assert!(out.status.success(), "{}", text(&out));
    for r in ["vecmath", "hipvec", "example-runtime", "pyvec"] {
        assert!(text(&out).contains(&format!("{r}: uploaded artifact")), "{r}:\n{}", text(&out));
    }
    assert!(!text(&out).contains(PASSWORD));
    let built = crate::support::tree_bytes(&e.prefix());
    std::fs::remove_dir_all(e.prefix()).unwrap();

    let out = build_on(&b, &[("PATH", other_path(&e.home.path().join("b-bin")))]);
    assert!(out.status.success(), "{}", text(&out));
    for r in ["vecmath", "hipvec", "example-runtime", "pyvec"] {
        assert!(text(&out).contains(&format!("{r}: downloaded artifact")), "{r}:\n{}", text(&out));
    }
    let line = "nothing to build: 4 recipe(s) up to date in the cache (4 downloaded from the shared cache)";
    assert!(text(&out).contains(line), "{}", text(&out));
    let report = std::fs::read(b.join("state/rocmforge/reports/example/latest/report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report).unwrap();
    let outcomes: Vec<&str> =
        report["recipes"].as_array().unwrap().iter().map(|r| r["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["downloaded"; 4], "{report}");
    // Nothing compiled: no work dir was even made, and the prefix is A's, byte for byte.
    assert!(!b.join("cache/rocmforge/work").exists(), "{}", text(&out));
    assert!(crate::support::tree_bytes(&e.prefix()) == built, "B's prefix differs from A's");
    let page = std::fs::read_to_string(b.join("state/rocmforge/index/simple/pyvec/index.html")).unwrap();
    // A's wheel, under A's label (its first build: serial 1).
    assert!(page.contains("pyvec-1.0.0+rocm5.2.3.1.k"), "{page}");
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Issue 42: a SIGKILL of the build (its whole process group) while `pyvec: venv` runs, with
/// pip's files in the step's temp dir, leaves nothing in the user's `$TMPDIR` and nothing
/// running; the next build clears the step's temp dir, finishes, and `cache verify` is clean.
#[test]
fn a_build_killed_during_pyvecs_venv_step_leaves_nothing_in_tmpdir_and_resumes() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use rustix::process::{Pid, Signal};

    use crate::support::procs;

    let e = Example::new();
    let home = e.home.path();
    let user_tmp = home.join("user-tmp");
    std::fs::create_dir_all(&user_tmp).unwrap();
    let work = home.join("cache/rocmforge/work/example/pyvec");
    let step_tmp = work.join("tmp");
    let venv_log = work.join("logs/venv.log");
    let pip_files = |dir: &Path| {
        std::fs::read_dir(dir)
            .is_ok_and(|mut d| d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("pip-"))))
    };
    let mut child = e
        .process(home)
        .env("TMPDIR", &user_tmp)
        .env("TMP", &user_tmp)
        .env("TEMP", &user_tmp)
        .args(["build", "pyvec", "--target", "gfx1010", "--prefix"])
        .arg(e.prefix())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    // The venv step runs, and pip (which ensurepip runs to install pip into the venv) has made
    // its temp dirs: in the step's temp dir, or (were the user's `$TMPDIR` passed on) there.
    // Only a hang reaches the bound: the steps before take a minute or two on a loaded machine.
    let start = Instant::now();
    while !(venv_log.exists() && (pip_files(&step_tmp) || pip_files(&user_tmp))) {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the build ended ({st}) before its venv step made pip's temp files; step dir {:?}", entries(&work));
        }
        assert!(start.elapsed() < Duration::from_secs(600), "timed out waiting for pyvec's venv step to run pip");
        std::thread::sleep(Duration::from_millis(20));
    }
    let running = std::fs::read_to_string(work.join("running.pid")).expect("the venv step records itself as running");
    let step_group: i32 = running.lines().next().unwrap().parse().unwrap();
    assert!(!procs::processes_naming(home).is_empty());
    rustix::process::kill_process_group(Pid::from_child(&child), Signal::KILL).unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(9), "the build died of the SIGKILL");
    // Nothing of the build is left: not rocmforge, not the step's supervisor, not python or pip.
    let start = Instant::now();
    while !procs::processes_naming(home).is_empty()
        || rustix::process::test_kill_process_group(Pid::from_raw(step_group).unwrap()).is_ok()
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "left running after the build's group was killed: {:?}",
            procs::described(&procs::processes_naming(home))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(entries(&user_tmp), Vec::<String>::new(), "the killed build left these in the user's TMPDIR");
    let stale = entries(&step_tmp);
    assert!(
        stale.iter().any(|n| n.starts_with("pip-")),
        "the kill landed while pip's files were in the step's temp dir: {stale:?}"
    );

    // The next build clears them, finishes, and leaves nothing behind either.
    let out = e
        .cmd(home)
        .env("TMPDIR", &user_tmp)
        .env("TMP", &user_tmp)
        .env("TEMP", &user_tmp)
        .args(["build", "pyvec", "--target", "gfx1010", "--prefix"])
        .arg(e.prefix())
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("built 1 recipe(s): pyvec; 3 from the cache"), "{t}");
    assert_eq!(entries(&user_tmp), Vec::<String>::new(), "{t}");
    assert!(!step_tmp.exists(), "pyvec's temp dir stays after its artifact was stored: {:?}", entries(&step_tmp));
    let verify = e.cmd(home).args(["cache", "verify"]).output().unwrap();
    assert!(verify.status.success() && text(&verify).contains("ok: "), "{}", text(&verify));
    assert!(!text(&verify).contains("left by"), "{}", text(&verify));
}
