//! Cache keys say what was built, not where or when: the same stack with other work, cache and
//! state dirs and copies of the same host tools elsewhere (other paths, inodes and mtimes) has
//! the same keys; another compiler version changes them, and `plan` says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use crate::support::{fixture_tree, rocmforge, ScriptsStack};

const TOOLS: &[&str] = &["cc", "c++", "cmake", "ninja", "hipcc", "clang"];

fn host_path() -> String {
    std::env::var("PATH").unwrap_or_default()
}

/// The recipes of `plan --json` run by `cmd`, which must succeed.
fn plan_recipes(cmd: &mut assert_cmd::Command) -> Vec<serde_json::Value> {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    plan["recipes"].as_array().unwrap().clone()
}

/// Each recipe's key (`None` for a recipe without one, e.g. blocked) and its state and reason,
/// from `plan --json`.
fn plan(cmd: &mut assert_cmd::Command) -> BTreeMap<String, (Option<String>, String)> {
    plan_recipes(cmd)
        .iter()
        .map(|r| {
            let why = format!("{}: {}", r["state"].as_str().unwrap(), r["reason"].as_str().unwrap());
            (r["name"].as_str().unwrap().to_string(), (r["key"].as_str().map(String::from), why))
        })
        .collect()
}

fn keys_of(plan: &BTreeMap<String, (Option<String>, String)>) -> BTreeMap<String, Option<String>> {
    plan.iter().map(|(n, (k, _))| (n.clone(), k.clone())).collect()
}

/// The first executable file named `tool` on `path`.
fn which(tool: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|d| d.join(tool))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// `exe --version`'s stdout with `InstalledDir:` lines left out (the only path-like line these
/// tools print), or `None` if it fails.
fn version_of(exe: &Path, path: &str) -> Option<String> {
    let run = || {
        Command::new(exe)
            .arg("--version")
            .env("PATH", path)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
    };
    // A copy just written may be busy for a moment (a process forked meanwhile holds it open).
    let out = run().or_else(|_| {
        std::thread::sleep(Duration::from_millis(100));
        run()
    });
    let out = out.ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("InstalledDir:"))
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// A real copy of `from` at `to` with an mtime of 2001 (other path, inode and mtime; same bytes).
fn copy_with_old_mtime(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::options().write(true).open(to).unwrap().set_modified(t).unwrap();
}

/// Copies into `bin` each of the host tools present on PATH, so that `<bin>:$PATH` runs the
/// copies: the resolved binaries, or for Debian's hipcc (a perl script that finds `hipcc.pl`,
/// `hipvars.pm` and, through `rocm_agent_enumerator`, its clang next to itself) those siblings
/// and the versioned clang it runs. A copy that does not answer `--version` like the original
/// (an unknown layout) is removed again. Returns the tools copied.
fn copy_host_tools(bin: &Path) -> Vec<String> {
    std::fs::create_dir_all(bin).unwrap();
    let path = host_path();
    let with_copies = format!("{}:{path}", bin.display());
    let mut copied = Vec::new();
    for tool in TOOLS {
        let Some(found) = which(tool, &path) else { continue };
        let real = std::fs::canonicalize(&found).unwrap();
        let want = version_of(&found, &path);
        let mut files: Vec<(PathBuf, String)> = vec![(real.clone(), tool.to_string())];
        let dir = real.parent().unwrap();
        if *tool == "hipcc" && dir.join("hipcc.pl").is_file() {
            for sibling in ["hipcc.pl", "hipvars.pm", "rocm_agent_enumerator"] {
                if dir.join(sibling).is_file() {
                    files.push((dir.join(sibling), sibling.to_string()));
                }
            }
            // `InstalledDir: /usr/bin` names where its clang-NN and clang++-NN lie.
            let out = Command::new(&found).arg("--version").stderr(Stdio::null()).output().unwrap();
            let out = String::from_utf8_lossy(&out.stdout).into_owned();
            if let Some(clang_dir) = out.lines().find_map(|l| l.strip_prefix("InstalledDir:")) {
                for e in std::fs::read_dir(clang_dir.trim()).unwrap().filter_map(Result::ok) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let versioned = ["clang-", "clang++-"].iter().any(|p| {
                        name.strip_prefix(p).is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    });
                    if versioned {
                        files.push((std::fs::canonicalize(e.path()).unwrap(), name));
                    }
                }
            }
        }
        for (from, name) in &files {
            copy_with_old_mtime(from, &bin.join(name));
        }
        if want.is_some() && version_of(&bin.join(tool), &with_copies) == want {
            copied.push(tool.to_string());
        } else {
            eprintln!("note: a copy of {} does not answer --version like it: left out", found.display());
            for (_, name) in &files {
                std::fs::remove_file(bin.join(name)).unwrap();
            }
        }
    }
    copied
}

/// The tools' paths on PATH as the memo in `state` recorded them.
fn memo_paths(state: &Path) -> BTreeMap<String, String> {
    let memo: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("tool-identities.json")).unwrap()).unwrap();
    memo["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["tool"].as_str().unwrap().to_string(), e["invoked"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn example_stack_keys_do_not_depend_on_dirs_tool_paths_or_mtimes() {
    let shared = tempfile::tempdir().unwrap();
    let prefix = shared.path().join("prefix");
    let plan_cmd = |home: &Path| {
        let mut c = rocmforge(home);
        c.args(["--stack", "example", "plan", "pyvec", "--target", "gfx1010", "--json", "--prefix"]).arg(&prefix);
        c
    };

    // Defaults: work, cache and state dirs under one home, the host's tools.
    let a = tempfile::tempdir().unwrap();
    let keys_a = keys_of(&plan(plan_cmd(a.path()).env("USER", "alice")));
    assert_eq!(keys_a.len(), 4, "{keys_a:?}");
    assert!(keys_a.values().all(Option::is_some), "{keys_a:?}");

    // Other dirs from the environment, another user, and copies of the tools first on PATH.
    let b = tempfile::tempdir().unwrap();
    let bin = b.path().join("elsewhere/bin");
    let copied = copy_host_tools(&bin);
    assert!(!copied.is_empty(), "none of {TOOLS:?} is installed: run ci/setup.sh");
    if which("hipcc", &host_path()).is_some_and(|h| h.with_file_name("hipcc.pl").is_file()) {
        assert!(copied.contains(&"hipcc".to_string()), "Debian's hipcc was not copied faithfully: {copied:?}");
    }
    let state_b = b.path().join("s");
    let mut cmd_b = plan_cmd(b.path());
    cmd_b
        .env("PATH", format!("{}:{}", bin.display(), host_path()))
        .env("USER", "bob")
        .env("ROCMFORGE_WORK_DIR", b.path().join("w"))
        .env("ROCMFORGE_CACHE_DIR", b.path().join("c"))
        .env("ROCMFORGE_STATE_DIR", &state_b);
    let keys_b = keys_of(&plan(&mut cmd_b));
    // The copies were the tools asked.
    let asked = memo_paths(&state_b);
    for t in &copied {
        assert_eq!(asked[t], bin.join(t).display().to_string(), "{asked:?}");
    }
    assert_eq!(keys_a, keys_b, "copied tools: {copied:?}");
    // Again, from the memo.
    assert_eq!(keys_of(&plan(&mut cmd_b)), keys_a);

    // Dirs from a config file.
    let c = tempfile::tempdir().unwrap();
    let config = c.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "cache-dir = \"{0}/cache-c\"\nwork-dir = \"{0}/work-c\"\nstate-dir = \"{0}/state-c\"\n",
            c.path().display()
        ),
    )
    .unwrap();
    let keys_c = keys_of(&plan(plan_cmd(c.path()).env("ROCMFORGE_CONFIG", &config)));
    assert!(c.path().join("state-c/tool-identities.json").is_file());
    assert_eq!(keys_a, keys_c);
}

/// A directory with one fake tool `name` printing `banner` for `--version`.
fn fake_tool(dir: &Path, name: &str, banner: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\necho '{banner}'\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{}", dir.display(), host_path())
}

#[test]
fn another_compiler_version_changes_the_keys_and_plan_says_why() {
    let e = ScriptsStack::new();
    e.cmd().args(["build", "top", "--prefix"]).arg(e.prefix()).assert().success();
    let plan_cmd = || {
        let mut c = e.cmd();
        c.args(["plan", "top", "--json", "--prefix"]).arg(e.prefix());
        c
    };
    let before = plan(&mut plan_cmd());
    assert!(before.values().all(|(_, why)| why.starts_with("cached")), "{before:?}");

    let path = fake_tool(&e.home.path().join("fake"), "cc", "cc (Fake) 99.1");
    let after = plan(plan_cmd().env("PATH", path));
    assert_eq!(after.len(), 4);
    for (name, (key, why)) in &after {
        assert_ne!(key, &before[name].0, "{name}");
        assert!(why.starts_with("rebuild: host toolchain changed: cc \""), "{name}: {why}");
        assert!(why.contains("\" -> \"cc (Fake) 99.1\""), "{name}: {why}");
    }
}

#[test]
fn another_hipcc_changes_every_key_but_source_only_ones() {
    let home = tempfile::tempdir().unwrap();
    let plan_cmd = || {
        let mut c = rocmforge(home.path());
        c.arg("--recipes").arg(fixture_tree()).args(["plan", "torch", "--target", "gfx1010", "--json"]);
        c
    };
    let before = keys_of(&plan(&mut plan_cmd()));
    let path = fake_tool(&home.path().join("fake"), "hipcc", "HIP version: 9.9.99999-fake");
    let after = keys_of(&plan(plan_cmd().env("PATH", path)));
    // `llvm-project` and `hip` are source trees only: no compiler touches them.
    let source_only = ["llvm-project", "hip"];
    for name in source_only {
        assert!(before[name].is_some(), "{name}");
        assert_eq!(before[name], after[name], "{name}");
    }
    let mut changed = 0;
    for (name, key) in &after {
        if !source_only.contains(&name.as_str()) && key.is_some() {
            assert_ne!(key, &before[name], "{name}");
            changed += 1;
        }
    }
    assert!(changed >= 8, "{after:?}");
}

/// A `--recipes` copy of the shipped tree (recipes/ and patches/) in `home/tree`.
fn shipped_tree_copy(home: &Path) -> PathBuf {
    let tree = home.join("tree");
    let repo = crate::support::repo_root();
    std::fs::create_dir_all(&tree).unwrap();
    for top in ["recipes", "patches"] {
        let out = std::process::Command::new("cp").arg("-r").arg(repo.join(top)).arg(tree.join(top)).output().unwrap();
        assert!(out.status.success(), "cp {top}: {}", String::from_utf8_lossy(&out.stderr));
    }
    tree
}

/// Python's bytecode cache, which running a check by hand writes beside it, is never read into
/// a recipe tree: a stray `__pycache__` (or `.pyc`) in a `--recipes` copy of the shipped tree
/// changes no key of the rocm-6.2 night, MIOpen's (whose sweep check is Python) included.
#[test]
fn a_stray_python_bytecode_cache_in_the_recipe_tree_changes_no_key() {
    let home = tempfile::tempdir().unwrap();
    let tree = shipped_tree_copy(home.path());
    let keys = || {
        let mut c = rocmforge(home.path());
        c.arg("--recipes").arg(&tree).args(["--stack", "rocm-6.2", "plan", "miopen", "--target", "gfx1010", "--json"]);
        keys_of(&plan(&mut c))
    };
    let before = keys();
    assert!(before.get("miopen").is_some_and(Option::is_some), "{before:?}");
    let sweep = tree.join("recipes/checks/miopen-sweep");
    assert!(sweep.is_dir(), "the sweep check moved: {}", sweep.display());
    std::fs::create_dir_all(sweep.join("__pycache__")).unwrap();
    std::fs::write(sweep.join("__pycache__/sweep.cpython-311.pyc"), b"\x6f\x0d\x0d\x0a stray").unwrap();
    std::fs::write(sweep.join("helper.pyc"), b"stray").unwrap();
    std::fs::create_dir_all(tree.join("recipes/rocm-6.2/__pycache__")).unwrap();
    std::fs::write(tree.join("recipes/rocm-6.2/__pycache__/x.pyc"), b"stray").unwrap();
    assert_eq!(keys(), before);
    // The control: a real change beside the check does re-key MIOpen.
    std::fs::write(sweep.join("notes.txt"), b"a file of the check").unwrap();
    assert_ne!(keys().get("miopen"), before.get("miopen"));
}

/// The kernel checks' shared helper folder (`[[check]] helpers`) is part of the key of each
/// recipe whose check names it, as its own `files` are: a change to it re-keys those recipes
/// (and what is built after them, whose keys hold theirs) and no other recipe of the rocm-6.2
/// night.
#[test]
fn a_change_to_a_checks_shared_helpers_rekeys_the_recipes_that_use_them_and_no_other() {
    let home = tempfile::tempdir().unwrap();
    let tree = shipped_tree_copy(home.path());
    // Every recipe of the stack, and those whose checks name the helpers, read from their files.
    let (mut all, mut users) = (Vec::new(), std::collections::BTreeSet::new());
    for e in std::fs::read_dir(tree.join("recipes/rocm-6.2")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.extension().is_none_or(|x| x != "toml") || name == "stack" {
            continue;
        }
        if std::fs::read_to_string(&p).unwrap().lines().any(|l| l.trim() == r#"helpers = "kernel-common""#) {
            users.insert(name.clone());
        }
        all.push(name);
    }
    let run = || {
        let mut c = rocmforge(home.path());
        c.arg("--recipes").arg(&tree).args(["--stack", "rocm-6.2", "plan", "--target", "gfx1010", "--json"]).args(&all);
        plan_recipes(&mut c)
            .iter()
            .map(|r| {
                let deps: Vec<String> =
                    r["deps"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_string()).collect();
                (r["name"].as_str().unwrap().to_string(), (r["key"].as_str().map(String::from), deps))
            })
            .collect::<BTreeMap<_, _>>()
    };
    let before = run();
    assert_eq!(before.len(), all.len(), "{before:?}");
    assert!(users.contains("miopen") && users.contains("rocprim"), "{users:?}");
    // Those and everything whose build depends on them, directly or not.
    let mut expected = users.clone();
    loop {
        let more: Vec<String> = before
            .iter()
            .filter(|(n, (_, deps))| !expected.contains(*n) && deps.iter().any(|d| expected.contains(d)))
            .map(|(n, _)| n.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        expected.extend(more);
    }
    assert!(expected.len() < before.len(), "every recipe depends on the helpers' users: {expected:?}");

    // Python's bytecode cache beside the helpers is not part of them.
    let common = tree.join("recipes/checks/kernel-common");
    std::fs::create_dir_all(common.join("__pycache__")).unwrap();
    std::fs::write(common.join("__pycache__/kernelcheck.cpython-311.pyc"), b"stray").unwrap();
    std::fs::write(common.join("kernelcheck.pyc"), b"stray").unwrap();
    assert_eq!(run(), before);
    let helper = common.join("kernelcheck.py");
    let mut text = std::fs::read_to_string(&helper).unwrap();
    text.push_str("\n# a change to the shared helpers\n");
    std::fs::write(&helper, text).unwrap();
    let after = run();
    let changed: std::collections::BTreeSet<String> =
        before.iter().filter(|(n, (k, _))| after.get(*n).map(|a| &a.0) != Some(k)).map(|(n, _)| n.clone()).collect();
    assert_eq!(changed, expected);
}
