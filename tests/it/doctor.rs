//! `doctor` and `build`'s host check on fake hosts (a folder given as the host's root with
//! `ROCMFORGE_HOST_ROOT`, its own `PATH`): an RX 5700 host with `HSA_OVERRIDE_GFX_VERSION` set, a
//! host without the needs, a host without a GPU (and without dpkg); the stack's Python found
//! through pyenv and through uv; no `--target` on a host with one RDNA1 card. Their glibc is
//! read from the release line of their `libc.so.6`: Debian 12's 2.36 loads libraries that ask for
//! an executable stack, Fedora 42's 2.41 does not, the Ubuntu host has none to read.

use std::path::Path;

use crate::support::host::{build_tools, real_python, real_uv, FakeHost};

/// A small stack whose recipes state host needs; default target gfx1030, so a target taken
/// from the host's card shows.
fn tree(dir: &Path) -> std::path::PathBuf {
    let t = dir.join("tree");
    let r = t.join("recipes/hosty");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::create_dir_all(t.join("patches")).unwrap();
    std::fs::write(
        r.join("stack.toml"),
        "[stack]\nname = \"hosty\"\nrocm-version = \"6.2.4\"\nsummary = \"host needs\"\ndefault-targets = [\"gfx1030\"]\ndefault = true\npython = \"3.11\"\ndisk-gb = 1\n",
    )
    .unwrap();
    std::fs::write(
        r.join("runtime.toml"),
        "[package]\nname = \"runtime\"\nversion = \"1\"\nsummary = \"r\"\n[build]\nsystem = \"cmake\"\nmemory-per-job-gb = 4\n[targets]\ngpu = false\n\
         [host]\npackages = [\"g++\", \"libnuma-dev\", \"libmsgpack-cxx-dev | libmsgpack-dev\"]\ncommands = [\"perl\"]\npkg-config = [\"libdrm\"]\nheaders = [\"numa.h\"]\ncmake = \">=3.16, <4\"\n",
    )
    .unwrap();
    std::fs::write(
        r.join("kernels.toml"),
        "[package]\nname = \"kernels\"\nversion = \"1\"\nsummary = \"k\"\n[dependencies]\nbuild = [\"runtime\"]\n[build]\nsystem = \"cmake\"\nargs = [\"-DGPU_TARGETS={targets}\", \"-DPython3_EXECUTABLE={python}\"]\n\
         [host]\npackages = [\"libpng-dev\"]\ncmake = \">=3.25.2, <4\"\n",
    )
    .unwrap();
    t
}

/// Every need of the stack met, files and packages included.
fn provide_needs(h: &FakeHost) {
    h.dpkg(&["g++", "libnuma-dev", "libmsgpack-cxx-dev", "libpng-dev", "cmake", "ninja-build"])
        .file("/usr/include/numa.h", "")
        .file("/usr/lib/x86_64-linux-gnu/pkgconfig/libdrm.pc", "");
}

/// The text users read, with the host's paths and the machine's real free disk scrubbed.
fn scrubbed(h: &FakeHost, home: &Path, out: &std::process::Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let text = h.scrub(&text).replace(&home.display().to_string(), "[HOME]");
    text.lines()
        .map(|l| if l.starts_with("disk ") || l.contains(" free at [HOME]") { "[disk line]" } else { l })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A `libc.so.6` as far as doctor reads it: glibc's release line among other bytes.
fn libc(vendor: &str, version: &str) -> String {
    format!("\x7fELF\x02\x01\x01\0GNU C Library ({vendor}) stable release version {version}.\nCopyright (C)\0")
}

fn rx5700_with_override() -> FakeHost {
    let h = FakeHost::new();
    h.os("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n")
        .file("/lib/x86_64-linux-gnu/libc.so.6", &libc("Debian GLIBC 2.36-9+deb12u10", "2.36"))
        .meminfo(16, 12)
        .users(true, false)
        .kfd_node(0, "cpu_cores_count 8\nsimd_count 0\ngfx_target_version 0\nvendor_id 0\ndevice_id 0\n")
        .kfd_node(1, "cpu_cores_count 0\nsimd_count 80\ngfx_target_version 100100\nvendor_id 4098\ndevice_id 29471\n");
    h.tool("ccache", "ccache version 4.8+ds");
    build_tools(&h);
    provide_needs(&h);
    h
}

#[test]
fn doctor_on_an_rx5700_host_with_the_override_set() {
    let home = tempfile::tempdir().unwrap();
    let h = rx5700_with_override();
    let t = tree(home.path());
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "4"])
        .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0")
        .output()
        .unwrap();
    let text = scrubbed(&h, home.path(), &out);
    assert!(out.status.success(), "{text}");
    insta::assert_snapshot!("doctor_rx5700_override", text);
    // The same in JSON: the card, its target, the override.
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "4", "--json"])
        .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gpus"][0]["gfx"], "gfx1010");
    assert_eq!(v["gpus"][0]["pci_id"], "1002:731f");
    assert_eq!(v["targets"], serde_json::json!(["gfx1010"]));
    assert_eq!(v["hsa_override"], "10.3.0");
    assert_eq!(v["memory"]["jobs_that_fit"], 3);
    assert_eq!(v["glibc"], serde_json::json!({"version": "2.36", "path": "/lib/x86_64-linux-gnu/libc.so.6"}));
}

#[test]
fn doctor_on_a_host_without_the_needs_and_build_lists_them_all_before_anything() {
    let home = tempfile::tempdir().unwrap();
    let h = FakeHost::new();
    h.os("PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nID=ubuntu\nID_LIKE=debian\n")
        .meminfo(8, 6)
        .users(true, true)
        .dpkg(&["cmake"])
        .tool("cc", "cc (Ubuntu 13.2.0-23ubuntu4) 13.2.0")
        .tool("c++", "c++ (Ubuntu 13.2.0-23ubuntu4) 13.2.0")
        .tool("cmake", "cmake version 4.0.2")
        .tool("python3", "Python 3.12.3");
    let t = tree(home.path());
    let doctor = |extra: &[&str]| {
        h.rocmforge(home.path())
            .args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "2"])
            .args(extra)
            .env("PYENV_ROOT", home.path().join("no-pyenv"))
            .output()
            .unwrap()
    };
    let out = doctor(&[]);
    let text = scrubbed(&h, home.path(), &out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    insta::assert_snapshot!("doctor_without_needs", text);
    // Only the closure asked for: kernels' own needs and runtime's (its dependency).
    let out = doctor(&["runtime"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("host needs of 1 recipe(s)") && !text.contains("libpng-dev"), "{text}");

    // build: every missing need at once, with the install command, before anything is fetched.
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "build", "kernels", "--target", "gfx1010"])
        .env("PYENV_ROOT", home.path().join("no-pyenv"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for want in [
        "this host lacks what the recipes to build need; nothing was fetched or built",
        "package g++ (for runtime)",
        "package libmsgpack-cxx-dev | libmsgpack-dev (for runtime)",
        "package libpng-dev (for kernels)",
        "command ninja (for kernels, runtime)",
        "command perl (for runtime)",
        "CMake >=3.25.2, <4: found 4.0.2 at",
        "header numa.h (for runtime)",
        "pkg-config libdrm (for runtime)",
        "Python 3.11 (for stack hosty)",
        "apt-get satisfy -y g++ \"libmsgpack-cxx-dev | libmsgpack-dev\" libnuma-dev libpng-dev ninja-build perl",
        "python3 -m pip install --user uv && uv python install 3.11",
        "uv tool install \"cmake>=3.25.2,<4\"",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
    assert!(!home.path().join("cache/rocmforge/work/runtime").exists(), "nothing may be prepared");
}

#[test]
fn doctor_on_a_host_without_a_gpu_or_dpkg() {
    let home = tempfile::tempdir().unwrap();
    let h = FakeHost::new();
    h.os("NAME=\"Fedora Linux\"\nVERSION_ID=42\nID=fedora\nPRETTY_NAME=\"Fedora Linux 42 (Workstation Edition)\"\n")
        .file("/usr/lib64/libc.so.6", &libc("GNU libc", "2.41"))
        .meminfo(32, 30)
        .users(false, false);
    build_tools(&h);
    // Debian 12's sccache: too old for a server per recipe, so `auto` has no compiler cache.
    h.tool("sccache", "sccache 0.4.0-pre.6");
    h.file("/usr/include/numa.h", "").file("/usr/lib64/pkgconfig/libdrm.pc", "");
    let t = tree(home.path());
    let out = h.rocmforge(home.path()).args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "8"]).output().unwrap();
    let text = scrubbed(&h, home.path(), &out);
    // Packages cannot be checked here, and nothing else is missing: not a failure.
    assert!(out.status.success(), "{text}");
    insta::assert_snapshot!("doctor_no_gpu_no_dpkg", text);
}

#[test]
fn without_target_a_host_with_one_rdna1_card_builds_for_it() {
    let home = tempfile::tempdir().unwrap();
    let t = tree(home.path());
    // An RX 5500 seen on PCI only (no KFD node): gfx1012.
    let h = FakeHost::new();
    h.os("ID=debian\nVERSION_ID=12\n").pci("0000:03:00.0", "0x1002", "0x7340", "0x030000").pci(
        "0000:00:02.0",
        "0x8086",
        "0x3e92",
        "0x030000",
    );
    build_tools(&h);
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "plan", "kernels", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("note: no --target given: building for gfx1012, from the GPU this host has, gfx1012 (Navi 14 (RX 5500)): PCI 0000:03:00.0"), "{err}");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kernels = plan["recipes"].as_array().unwrap().iter().find(|e| e["name"] == "kernels").unwrap().clone();
    assert!(kernels.to_string().contains("gfx1012") && !kernels.to_string().contains("gfx1030"), "{kernels}");
    // --target wins, and a host without an RDNA1 card keeps the stack's default (no note).
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "plan", "kernels", "--target", "gfx1010"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("note:"));
    let bare = FakeHost::new();
    build_tools(&bare);
    let out = bare
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "plan", "kernels", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("gfx1030"));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("note:"));
}

/// A stack that serves only some targets (`supported-targets`): `doctor` refuses another one as
/// `plan` and `build` do (exit 2, the same words), since all three choose targets in one place.
#[test]
fn doctor_refuses_a_target_the_stack_does_not_serve_as_plan_does() {
    let home = tempfile::tempdir().unwrap();
    let t = tree(home.path());
    let st = t.join("recipes/hosty/stack.toml");
    let text = std::fs::read_to_string(&st).unwrap();
    std::fs::write(&st, text.replace("default = true\n", "default = true\nsupported-targets = [\"gfx1030\"]\n"))
        .unwrap();
    let h = FakeHost::new();
    h.os("ID=debian\nVERSION_ID=12\n");
    build_tools(&h);
    for args in [&["doctor", "--target", "gfx1010"][..], &["plan", "kernels", "--target", "gfx1010"]] {
        let out = h.rocmforge(home.path()).args(["--recipes", t.to_str().unwrap()]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("stack `hosty` serves gfx1030 only ("), "{args:?}: {err}");
        assert!(err.contains("`supported-targets`), not gfx1010"), "{args:?}: {err}");
    }
    // A target it serves passes.
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "doctor", "--target", "gfx1030"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("supported-targets"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn stack_python_is_found_through_pyenv_and_through_uv() {
    let home = tempfile::tempdir().unwrap();
    let t = tree(home.path());
    let python = real_python("3.11");
    let python_json = |h: &FakeHost, envs: &[(&str, &Path)]| {
        let mut c = h.rocmforge(home.path());
        c.args(["--recipes", t.to_str().unwrap(), "doctor", "--json"]);
        for (k, v) in envs {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["check"]["needs"].as_array().unwrap().iter().find(|n| n["kind"] == "python").unwrap().clone()
    };

    // pyenv: $PYENV_ROOT/versions/3.11.x/bin/python3.11, nothing on PATH; the newest 3.11 wins.
    let h = FakeHost::new();
    let pyenv = h.dir.path().join("pyenv");
    for v in ["3.11.4", "3.11.10", "3.12.1"] {
        let bin = pyenv.join(format!("versions/{v}/bin"));
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(&python, bin.join(format!("python{}", &v[..4]))).unwrap();
    }
    let need = python_json(&h, &[("PYENV_ROOT", &pyenv)]);
    assert_eq!(need["state"], "ok", "{need}");
    let found = pyenv.join("versions/3.11.10/bin/python3.11");
    assert_eq!(need["found"], format!("{} (pyenv)", found.display()));
    // It is a real interpreter.
    let out = std::process::Command::new(&found).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Python 3.11"));

    // uv: a uv-managed install (`uv python install` lays them out so), found by `uv python find`.
    let h = FakeHost::new();
    h.link("uv", &real_uv());
    let managed = h.dir.path().join("uv-python");
    let bin = managed.join("cpython-3.11.9-linux-x86_64-gnu/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&python, bin.join("python3.11")).unwrap();
    let need = python_json(&h, &[("PYENV_ROOT", &h.dir.path().join("none")), ("UV_PYTHON_INSTALL_DIR", &managed)]);
    assert_eq!(need["state"], "ok", "{need}");
    assert_eq!(need["found"], format!("{} (uv)", bin.join("python3.11").display()));

    // Neither: missing, with the one command that gets it (uv is on PATH here).
    let empty = h.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "doctor"])
        .env("PYENV_ROOT", h.dir.path().join("none"))
        .env("UV_PYTHON_INSTALL_DIR", &empty)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("MISSING python     3.11") && text.contains("\n  uv python install 3.11\n"), "{text}");
}

#[test]
fn doctor_checks_the_free_space_where_the_state_and_cache_dirs_live_too() {
    let home = tempfile::tempdir().unwrap();
    let h = rx5700_with_override();
    let t = tree(home.path());
    // The state dir on a small disk of its own, the cache dir beside the work dir.
    let small = crate::support::SmallDisk::mount(home.path().join("small"), "4m");
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "4"])
        .env("ROCMFORGE_STATE_DIR", small.0.join("state"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let state = small.0.join("state");
    assert!(text.contains(&format!(" free at {} (state dir)", state.display())), "{text}");
    assert!(text.contains("; the cache dir there too"), "{text}");
    assert!(
        text.contains(&format!("free at {} (state dir): rocmforge writes there for the whole build; free space there, or set `state-dir` in the config to a larger disk", state.display())),
        "{text}"
    );
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "4", "--json"])
        .env("ROCMFORGE_STATE_DIR", small.0.join("state"))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["other_disks"][0]["what"], "state dir", "{v}");
    assert!(v["other_disks"][0]["free"].as_u64().unwrap() <= 4 << 20, "{v}");
    assert_eq!(v["disk"]["also"], serde_json::json!(["cache dir"]));
}

/// A stack whose recipes bound host dependencies' versions (`[host] versions`), its one source
/// served by `server` (pinned, so nothing is fetched to pin it).
fn bounded_tree(dir: &Path, server: &crate::support::http::HttpServer) -> std::path::PathBuf {
    let t = dir.join("bounded-tree");
    let r = t.join("recipes/bounded");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::create_dir_all(t.join("patches")).unwrap();
    std::fs::write(
        r.join("stack.toml"),
        "[stack]\nname = \"bounded\"\nrocm-version = \"6.2.4\"\nsummary = \"bounds\"\ndefault-targets = [\"gfx1030\"]\ndefault = true\ndisk-gb = 1\n",
    )
    .unwrap();
    let bytes = b"not fetched".to_vec();
    let sha = crate::support::wheel::sha256_hex(&bytes);
    server.add("miopenish.tar.gz", bytes);
    std::fs::write(
        r.join("miopenish.toml"),
        format!(
            "[package]\nname = \"miopenish\"\nversion = \"1\"\nsummary = \"m\"\n[source]\nurl = \"{}\"\nsha256 = \"{sha}\"\n\
             [dependencies]\nbuild = [\"tensileish\"]\n[build]\nsystem = \"cmake\"\n[targets]\ngpu = false\n\
             [host]\npackages = [\"g++\"]\nversions = {{ boost = {{ range = \">=1.71, <1.85\", fix = \"its patch 0005 makes it build with Boost 1.85 to 1.92: add it to the series\" }}, gcc = \"<16\" }}\n",
            server.url("miopenish.tar.gz")
        ),
    )
    .unwrap();
    std::fs::write(
        r.join("tensileish.toml"),
        "[package]\nname = \"tensileish\"\nversion = \"1\"\nsummary = \"t\"\n[build]\nsystem = \"script\"\nsteps = [\"true\"]\n[targets]\ngpu = false\n\
         [host]\nversions = { msgpack-cxx = \"!=5.*\", boost = \">=1.66\" }\n",
    )
    .unwrap();
    t
}

fn boost_header(v: u32) -> String {
    format!("// Boost version.hpp\n#ifndef BOOST_VERSION_HPP\n#define BOOST_VERSION {v}\n#define BOOST_LIB_VERSION \"x\"\n#endif\n")
}

fn msgpack_header(major: u32, minor: u32, rev: u32) -> String {
    format!("#define MSGPACK_VERSION_MAJOR    {major}\n#define MSGPACK_VERSION_MINOR    {minor}\n#define MSGPACK_VERSION_REVISION {rev}\n")
}

#[test]
fn doctor_and_build_name_a_dependency_version_outside_a_recipes_bound() {
    let home = tempfile::tempdir().unwrap();
    let server = crate::support::http::HttpServer::start();
    let t = bounded_tree(home.path(), &server);
    // A rolling host: Boost 1.92, a msgpack-cxx 5.0.0 built by hand, GCC 16.
    let h = FakeHost::new();
    h.os("ID=debian\nVERSION_ID=\"13\"\nPRETTY_NAME=\"Debian GNU/Linux forky/sid\"\n")
        .meminfo(16, 12)
        .users(true, true)
        .dpkg(&["g++", "cmake", "ninja-build"])
        .file("/usr/include/boost/version.hpp", &boost_header(109200))
        .file("/usr/local/include/msgpack/version_master.hpp", &msgpack_header(5, 0, 0))
        // The C library's header beside it says 6: not the one read.
        .file("/usr/include/msgpack/version_master.h", &msgpack_header(6, 0, 1));
    build_tools(&h);
    h.tool("gcc", "16.1.0");
    let out = h.rocmforge(home.path()).args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "2"]).output().unwrap();
    let text = scrubbed(&h, home.path(), &out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for want in [
        "MISSING version    boost >=1.71, <1.85 [1.92.0 (BOOST_VERSION 109200 in [HOST]/root/usr/include/boost/version.hpp)]  (miopenish)",
        "what to do: miopenish: its patch 0005 makes it build with Boost 1.85 to 1.92: add it to the series",
        "MISSING version    msgpack-cxx !=5.* [5.0.0 (MSGPACK_VERSION_* in [HOST]/root/usr/local/include/msgpack/version_master.hpp)]  (tensileish)",
        "what to do: install a msgpack-cxx inside the range: Debian/Ubuntu libmsgpack-cxx-dev",
        "MISSING version    gcc <16 [16.1.0 (`[HOST]/bin/gcc -dumpfullversion`)]  (miopenish)",
        "what to do: put a GCC inside the range first on PATH",
        "3 missing",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    // tensileish's own Boost bound (>=1.66) holds: only miopenish's is named.
    assert!(!text.contains("boost >=1.71, <1.85 [1.92.0 (BOOST_VERSION 109200 in [HOST]/root/usr/include/boost/version.hpp)]  (miopenish, tensileish)"), "{text}");
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "2", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let boost = v["check"]["needs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["kind"] == "version" && n["name"].as_str().unwrap().starts_with("boost"))
        .unwrap()
        .clone();
    assert_eq!(boost["state"], "missing", "{boost}");
    assert_eq!(boost["recipes"], serde_json::json!(["miopenish"]), "{boost}");

    // build: refused with the same words, before anything is fetched.
    let out = h
        .rocmforge(home.path())
        .args(["--recipes", t.to_str().unwrap(), "build", "miopenish", "--target", "gfx1010"])
        .output()
        .unwrap();
    let err = h.scrub(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{err}");
    for want in [
        "this host lacks what the recipes to build need; nothing was fetched or built",
        "boost >=1.71, <1.85: found 1.92.0 (BOOST_VERSION 109200 in [HOST]/root/usr/include/boost/version.hpp) (for miopenish)",
        "what to do: miopenish: its patch 0005",
        "msgpack-cxx !=5.*: found 5.0.0",
        "gcc <16: found 16.1.0",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
    assert_eq!(server.with(|s| s.requests.len()), 0, "fetched before the host check");
    assert!(!home.path().join("cache/rocmforge/work/miopenish").exists(), "nothing may be prepared");
}

/// The multiarch folders of Debian unstable's linux-libc-dev besides x86_64-linux-gnu.
const FOREIGN_TRIPLETS: [&str; 21] = [
    "aarch64-linux-gnu",
    "alpha-linux-gnu",
    "arm-linux-gnueabi",
    "arm-linux-gnueabihf",
    "hppa-linux-gnu",
    "i386-linux-gnu",
    "loongarch64-linux-gnu",
    "m68k-linux-gnu",
    "mips-linux-gnu",
    "mips64-linux-gnuabi64",
    "mips64el-linux-gnuabi64",
    "mipsel-linux-gnu",
    "mipsisa64r6el-linux-gnuabi64",
    "powerpc-linux-gnu",
    "powerpc64-linux-gnu",
    "powerpc64le-linux-gnu",
    "riscv64-linux-gnu",
    "s390x-linux-gnu",
    "sh4-linux-gnu",
    "sparc64-linux-gnu",
    "x86_64-linux-gnux32",
];

#[test]
fn bounds_a_host_meets_pass() {
    let home = tempfile::tempdir().unwrap();
    let server = crate::support::http::HttpServer::start();
    let t = bounded_tree(home.path(), &server);
    // Ubuntu 24.04's Boost 1.83 and msgpack-cxx 6.1.0 (multiarch folder), GCC 13.
    let h = FakeHost::new();
    h.os("PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n")
        .meminfo(16, 12)
        .users(true, true)
        .dpkg(&["g++", "cmake", "ninja-build"])
        .file("/usr/include/boost/version.hpp", &boost_header(108300))
        .file("/usr/include/x86_64-linux-gnu/msgpack/version_master.hpp", &msgpack_header(6, 1, 0))
        // Another architecture's -dev package (a msgpack-cxx 5.0.0 that sorts first) is not what
        // the native compiler includes, and is not read.
        .file("/usr/include/aarch64-linux-gnu/msgpack/version_master.hpp", &msgpack_header(5, 0, 0));
    // Debian unstable's linux-libc-dev puts an `asm/` folder for each of 22 architectures under
    // /usr/include (its file list in a debootstrapped unstable root): doctor searches only this
    // machine's own, so "none found" below names three folders, not two dozen.
    for triplet in FOREIGN_TRIPLETS {
        h.file(&format!("/usr/include/{triplet}/asm/types.h"), "");
    }
    build_tools(&h);
    h.tool("gcc", "13.3.0");
    let out = h.rocmforge(home.path()).args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "2"]).output().unwrap();
    let text = scrubbed(&h, home.path(), &out);
    assert!(out.status.success(), "{text}");
    for want in [
        "ok      version    boost >=1.71, <1.85 [1.83.0 (BOOST_VERSION 108300 in [HOST]/root/usr/include/boost/version.hpp)]  (miopenish, tensileish)",
        "ok      version    msgpack-cxx !=5.* [6.1.0 (MSGPACK_VERSION_* in [HOST]/root/usr/include/x86_64-linux-gnu/msgpack/version_master.hpp)]  (tensileish)",
        "ok      version    gcc <16 [13.3.0",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    assert!(!text.contains("what to do"), "{text}");
    // No Boost at all: the bound is not met, and says where it looked.
    std::fs::remove_file(h.root().join("usr/include/boost/version.hpp")).unwrap();
    let out = h.rocmforge(home.path()).args(["--recipes", t.to_str().unwrap(), "doctor", "-j", "2"]).output().unwrap();
    let text = scrubbed(&h, home.path(), &out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("MISSING version    boost >=1.71, <1.85 [none (no boost/version.hpp in [HOST]/root/usr/local/include, [HOST]/root/usr/include/x86_64-linux-gnu, [HOST]/root/usr/include)]  (miopenish, tensileish)"), "{text}");
    for other in FOREIGN_TRIPLETS {
        assert!(!text.contains(&format!("/{other}")), "{other} in:\n{text}");
    }
    // What to do is to install one, not the recipe's words about a version outside the range.
    assert!(text.contains("what to do: install a Boost inside the range: Debian/Ubuntu libboost-dev"), "{text}");
    assert!(!text.contains("its patch 0005"), "{text}");
}

#[test]
fn rocm_5_4_miopen_takes_any_boost_with_its_patch_and_names_the_bound_without_it() {
    // The shipped rocm-5.4 stack on a host meeting every need, but with Debian unstable's
    // Boost 1.92: MIOpen 2.19's src/lock_file.cpp needs Boost < 1.85 unless patch 0005 is in
    // its series (recipes/rocm-5.4/miopen.toml `lifted-by`), which it is: doctor passes.
    let home = tempfile::tempdir().unwrap();
    let h = crate::support::host::meeting_needs_of(&crate::support::repo_root().join("recipes/rocm-5.4"));
    h.file("/usr/include/boost/version.hpp", &boost_header(109200));
    let doctor = |recipes: Option<&std::path::Path>| {
        let mut c = crate::support::rocmforge(home.path());
        c.env("ROCMFORGE_HOST_ROOT", h.root());
        if let Some(dir) = recipes {
            c.arg("--recipes").arg(dir);
        }
        c.args(["--stack", "rocm-5.4", "doctor", "miopen", "-j", "2"]).output().unwrap()
    };
    let out = doctor(None);
    let text = scrubbed(&h, home.path(), &out);
    // (The stand-in host has no Python 3.10, the stack's: that line is not this test's.)
    assert!(!text.contains("boost <1.85") && !text.contains("MISSING version"), "the series lifts the bound: {text}");

    // The same recipes without patch 0005 in miopen's series: the bound is checked and named.
    let copy = tempfile::tempdir().unwrap();
    for dir in ["recipes", "patches"] {
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(crate::support::repo_root().join(dir))
            .arg(copy.path())
            .status()
            .unwrap();
        assert!(st.success());
    }
    let toml = copy.path().join("recipes/rocm-5.4/miopen.toml");
    let t = std::fs::read_to_string(&toml).unwrap();
    let without = t.replace("  \"0005-boost-1.85-filesystem-exception.patch\",\n", "");
    assert_ne!(without, t, "the series lists patch 0005 on a line of its own");
    std::fs::write(&toml, without).unwrap();
    let out = doctor(Some(copy.path()));
    let text = scrubbed(&h, home.path(), &out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for want in [
        "MISSING version    boost <1.85 [1.92.0 (BOOST_VERSION 109200 in [HOST]/root/usr/include/boost/version.hpp)]  (miopen)",
        "what to do: miopen: MIOpen 2.19's src/lock_file.cpp does not compile against Boost 1.85 and later",
        "0005-boost-1.85-filesystem-exception.patch",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
}

/// A Debian 12 host with compilers, CMake, ninja and git on `PATH` and `packages` in dpkg's
/// database.
fn debian_12(packages: &[&str]) -> FakeHost {
    let h = FakeHost::new();
    h.os("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n")
        .file("/lib/x86_64-linux-gnu/libc.so.6", &libc("Debian GLIBC 2.36-9+deb12u10", "2.36"))
        .meminfo(24, 20)
        .users(true, true)
        .dpkg(packages);
    build_tools(&h);
    h
}

/// `doctor <recipes>` of the shipped rocm-6.2 stack, as users read it.
fn doctor_6_2(h: &FakeHost, home: &Path, recipes: &[&str]) -> String {
    let out =
        h.rocmforge(home).args(["--stack", "rocm-6.2", "doctor"]).args(recipes).args(["-j", "2"]).output().unwrap();
    scrubbed(h, home, &out)
}

/// The words of doctor's `apt-get` line.
fn install_words(text: &str) -> Vec<&str> {
    let line = text.lines().find(|l| l.trim_start().starts_with("apt-get ")).unwrap_or_else(|| panic!("{text}"));
    line.split_whitespace().collect()
}

const DEBIAN_12_BASE: [&str; 6] = ["g++", "cmake", "ninja-build", "perl", "python3", "python3-venv"];

/// hipBLAS 6.2.4 enables Fortran on every Linux host (CMakeLists.txt:45-52), so without
/// gfortran the night stops at its configure, hours in: `doctor hipblas` of the shipped stack
/// names it before anything runs, with the line that installs it; with it, nothing about it.
#[test]
fn doctor_hipblas_on_a_host_without_gfortran_names_it_with_the_install_line() {
    let home = tempfile::tempdir().unwrap();
    let host = |with_gfortran: bool| {
        let mut packages = DEBIAN_12_BASE.to_vec();
        if with_gfortran {
            packages.push("gfortran");
        }
        let h = debian_12(&packages);
        if with_gfortran {
            h.tool("gfortran", "GNU Fortran (Debian 12.2.0-14+deb12u1) 12.2.0");
        }
        h
    };
    let without = doctor_6_2(&host(false), home.path(), &["hipblas"]);
    for want in ["MISSING package    gfortran  (hipblas)", "MISSING command    gfortran  (hipblas)"] {
        assert!(without.contains(want), "missing `{want}` in:\n{without}");
    }
    assert!(install_words(&without).contains(&"gfortran"), "{without}");
    let with = doctor_6_2(&host(true), home.path(), &["hipblas"]);
    assert!(!with.lines().any(|l| l.contains("MISSING") && l.contains("gfortran")), "{with}");
}

/// The needs issue 37's re-read of the rocm-6.2 sources added (docs/host-needs-audit.md): on a
/// Debian 12 host with compilers, CMake, perl, Python and gfortran only, `doctor hipblas rocfft`
/// names each with the recipes that need it and puts every package in its one install line;
/// with them installed, none is missing.
#[test]
fn doctor_names_the_host_needs_the_rocm_6_2_reread_found() {
    let home = tempfile::tempdir().unwrap();
    let added_packages = ["xxd", "git", "libsqlite3-dev", "libx11-dev", "libelf-dev"];
    let host = |complete: bool| {
        let mut packages = DEBIAN_12_BASE.to_vec();
        packages.push("gfortran");
        if complete {
            packages.extend(added_packages);
        }
        let h = debian_12(&packages);
        h.tool("gfortran", "GNU Fortran (Debian 12.2.0-14+deb12u1) 12.2.0");
        if complete {
            h.tool("xxd", "xxd 2023-10-25 by Juergen Weigert et al.");
            for header in ["sqlite3.h", "X11/Xlib.h", "libelf.h"] {
                h.file(&format!("/usr/include/{header}"), "");
            }
        }
        h
    };
    let added = [
        ("package    xxd", "(rocr)"),
        ("command    xxd", "(rocr)"),
        ("header     libelf.h", "(rocr)"),
        ("package    git", "(hipblas, rocblas)"),
        ("package    libsqlite3-dev", "(rocfft)"),
        ("header     sqlite3.h", "(rocfft)"),
        ("package    libx11-dev", "(clr)"),
        ("header     X11/Xlib.h", "(clr)"),
    ];
    let without = doctor_6_2(&host(false), home.path(), &["hipblas", "rocfft"]);
    for (need, recipes) in added {
        let want = format!("MISSING {need}  {recipes}");
        assert!(without.lines().any(|l| l.trim() == want), "missing `{want}` in:\n{without}");
    }
    let words = install_words(&without);
    for pkg in added_packages {
        assert!(words.contains(&pkg), "{pkg} not in {words:?}");
    }
    let with = doctor_6_2(&host(true), home.path(), &["hipblas", "rocfft"]);
    for (need, _) in added {
        assert!(!with.lines().any(|l| l.contains("MISSING") && l.contains(need)), "{need}:\n{with}");
    }
}
