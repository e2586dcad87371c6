//! Fake hosts for `doctor` and `build`'s host checks: a folder laid out like a machine's `/`
//! (os-release, dpkg status, KFD topology, PCI devices, /proc/meminfo, /etc/passwd and group,
//! headers, pkg-config files), given to rocmforge with `ROCMFORGE_HOST_ROOT`, and a `bin/` of
//! tools that answer `--version` like the real ones, used as the whole `PATH`.

use std::path::{Path, PathBuf};

pub struct FakeHost {
    pub dir: tempfile::TempDir,
}

impl FakeHost {
    pub fn new() -> FakeHost {
        let h = FakeHost { dir: tempfile::tempdir().unwrap() };
        std::fs::create_dir_all(h.bin()).unwrap();
        h
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// The `PATH` of this host (only what was put there).
    pub fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    pub fn file(&self, abs: &str, text: &str) -> &FakeHost {
        let p = self.root().join(abs.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    pub fn os(&self, text: &str) -> &FakeHost {
        self.file("/etc/os-release", text)
    }

    /// dpkg's status with these packages installed.
    pub fn dpkg(&self, packages: &[&str]) -> &FakeHost {
        let text: String =
            packages.iter().map(|p| format!("Package: {p}\nStatus: install ok installed\nVersion: 1.0\n\n")).collect();
        self.file("/var/lib/dpkg/status", &text)
    }

    pub fn meminfo(&self, total_gb: u64, available_gb: u64) -> &FakeHost {
        self.file(
            "/proc/meminfo",
            &format!("MemTotal: {} kB\nMemFree: 1000 kB\nMemAvailable: {} kB\n", total_gb << 20, available_gb << 20),
        )
    }

    /// KFD node `n` with these properties (`gfx_target_version 100100`...).
    pub fn kfd_node(&self, n: u32, props: &str) -> &FakeHost {
        self.file(&format!("/sys/class/kfd/kfd/topology/nodes/{n}/properties"), props)
    }

    pub fn pci(&self, slot: &str, vendor: &str, device: &str, class: &str) -> &FakeHost {
        let d = format!("/sys/bus/pci/devices/{slot}");
        self.file(&format!("{d}/vendor"), &format!("{vendor}\n"));
        self.file(&format!("{d}/device"), &format!("{device}\n"));
        self.file(&format!("{d}/class"), &format!("{class}\n"))
    }

    /// User alice (uid 1000) and the groups, `render` with alice in it when `in_render`.
    pub fn users(&self, in_render: bool, in_video: bool) -> &FakeHost {
        self.file("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:Alice:/home/alice:/bin/bash\n");
        self.file(
            "/etc/group",
            &format!(
                "root:x:0:\nvideo:x:44:{}\nrender:x:105:{}\nalice:x:1000:\n",
                if in_video { "alice" } else { "" },
                if in_render { "bob,alice" } else { "bob" }
            ),
        )
    }

    /// A tool on this host's PATH printing `version` for `--version`.
    pub fn tool(&self, name: &str, version: &str) -> &FakeHost {
        let p = self.bin().join(name);
        std::fs::write(&p, format!("#!/bin/sh\necho '{version}'\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        self
    }

    /// A real executable of the machine running the tests, linked into this host's PATH.
    pub fn link(&self, name: &str, real: &Path) -> &FakeHost {
        std::os::unix::fs::symlink(real, self.bin().join(name)).unwrap();
        self
    }

    /// `rocmforge` (clean environment, dirs in `home`) on this host.
    pub fn rocmforge(&self, home: &Path) -> assert_cmd::Command {
        let mut c = super::rocmforge(home);
        c.env("PATH", self.bin()).env("ROCMFORGE_HOST_ROOT", self.root()).env("USER", "alice");
        c
    }

    /// Replaces this host's paths in `text` with `[HOST]`.
    pub fn scrub(&self, text: &str) -> String {
        text.replace(&self.dir.path().display().to_string(), "[HOST]")
    }
}

/// The usual tools of a build host (CMake as Ubuntu 24.04 has it).
pub fn build_tools(h: &FakeHost) {
    h.tool("cc", "cc (Debian 12.2.0-14) 12.2.0")
        .tool("c++", "c++ (Debian 12.2.0-14) 12.2.0")
        .tool("cmake", "cmake version 3.28.3")
        .tool("ninja", "1.11.1")
        .tool("git", "git version 2.39.5")
        .tool("perl", "This is perl 5, version 36, subversion 0 (v5.36.0)")
        .tool("python3", "Python 3.11.2")
        .tool("python3.11", "Python 3.11.2");
}

/// The real executable of Python `version` on the test machine (`python3.11` on PATH: its
/// `sys.executable`; else the newest pyenv `versions/<version>.*`), failing loudly when there is none.
pub fn real_python(version: &str) -> PathBuf {
    let out = std::process::Command::new(format!("python{version}"))
        .args(["-c", "import sys; print(sys.executable)"])
        .output();
    if let Ok(out) = &out {
        if out.status.success() {
            return PathBuf::from(String::from_utf8(out.stdout.clone()).unwrap().trim());
        }
    }
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".pyenv"));
    let mut found: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().starts_with(&format!("{version}.")))
        .map(|d| d.path().join(format!("bin/python{version}")))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!("Python {version} is needed for this test (pyenv or PATH; ci/setup.sh): python{version} gave {out:?}")
    })
}

/// The real uv binary (from the `uv` package on PyPI, which ci/setup.sh installs).
pub fn real_uv() -> PathBuf {
    let out =
        std::process::Command::new("python3").args(["-c", "import uv; print(uv.find_uv_bin())"]).output().unwrap();
    assert!(
        out.status.success(),
        "uv (PyPI) is needed for this test (ci/setup.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A host root (Debian 12) on which every `[host]` need of the recipes in `dir` is met: each
/// package (the first of alternatives) in dpkg's status, each pkg-config module and header in
/// place, each bounded version (`versions`) as Debian 12's headers say it. Commands are not faked: they stay on the real `PATH`. For tests that take a real stack
/// past `build`'s host check on a machine without its build dependencies.
pub fn meeting_needs_of(dir: &Path) -> FakeHost {
    let (mut packages, mut modules, mut headers, mut bounded) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let Ok(v) = text.parse::<toml::Table>() else { continue };
        let Some(host) = v.get("host").and_then(|h| h.as_table()) else { continue };
        let list = |k: &str| -> Vec<String> {
            host.get(k)
                .and_then(|a| a.as_array())
                .map(|a| a.iter().filter_map(|s| s.as_str()).map(str::to_string).collect())
                .unwrap_or_default()
        };
        packages.extend(list("packages").iter().map(|p| p.split('|').next().unwrap().trim().to_string()));
        modules.extend(list("pkg-config"));
        headers.extend(list("headers"));
        bounded.extend(host.get("versions").and_then(|v| v.as_table()).into_iter().flat_map(|t| t.keys().cloned()));
    }
    assert!(!packages.is_empty(), "no [host] packages in {}", dir.display());
    let h = FakeHost::new();
    h.os("ID=debian\nVERSION_ID=\"12\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n");
    h.dpkg(&packages.iter().map(String::as_str).collect::<Vec<_>>());
    for m in modules {
        h.file(&format!("/usr/lib/pkgconfig/{m}.pc"), &format!("Name: {m}\nVersion: 1.0\nDescription: stand-in\n"));
    }
    for hd in headers {
        h.file(&format!("/usr/include/{hd}"), "/* stand-in */\n");
    }
    // Bounded versions as Debian 12 has them.
    for b in bounded {
        match b.as_str() {
            "boost" => h.file("/usr/include/boost/version.hpp", "#define BOOST_VERSION 107400\n"),
            "msgpack-cxx" => h.file(
                "/usr/include/msgpack/version_master.hpp",
                "#define MSGPACK_VERSION_MAJOR 4\n#define MSGPACK_VERSION_MINOR 1\n#define MSGPACK_VERSION_REVISION 3\n",
            ),
            other => panic!("meeting_needs_of: no stand-in for [host] versions.{other} (add Debian 12's here)"),
        };
    }
    h
}
