//! The machine a stack is built on, read through a root directory: `/`, or the folder of a fake
//! host that tests (and anyone curious) name with `ROCMFORGE_HOST_ROOT`. Its files are read
//! under that root (`/etc/os-release`, `/var/lib/dpkg/status`, `/sys/class/kfd`,
//! `/sys/bus/pci/devices`, `/proc/meminfo`, `/etc/group`, `/etc/passwd`, headers, pkg-config
//! files, `libc.so.6`); commands are looked up on `PATH`, as the build runs them.
//!
//! - [`os`]: the distribution and the one command that installs packages there;
//! - [`dpkg`]: the packages installed (Debian, Ubuntu and their derivatives);
//! - [`glibc`]: the C library's version (2.41 and later refuse executable-stack libraries);
//! - [`gpu`]: the GPUs the kernel sees (KFD topology, PCI ids of RDNA1 cards);
//! - [`python`]: the stack's Python, wherever it is (PATH, pyenv, uv);
//! - [`versions`]: the versions of the dependencies recipes bound (Boost, msgpack-cxx, GCC);
//! - [`needs`]: a set of recipes' `[host]` needs checked against all of that.

pub mod dpkg;
pub mod glibc;
pub mod gpu;
pub mod needs;
pub mod os;
pub mod python;
pub mod versions;

use std::path::{Path, PathBuf};

/// Debian's multiarch triplet for the architecture rocmforge runs on (`x86_64-linux-gnu`,
/// `aarch64-linux-gnu`): the folder under `/usr/include` and `/usr/lib` a native build uses.
pub fn multiarch_triplet() -> String {
    match std::env::consts::ARCH {
        "x86" => "i386-linux-gnu".into(),
        "arm" => "arm-linux-gnueabihf".into(),
        "powerpc64" if cfg!(target_endian = "little") => "powerpc64le-linux-gnu".into(),
        arch => format!("{arch}-linux-gnu"),
    }
}

/// The environment variable naming the root the host is read through (default `/`).
pub const ROOT_ENV: &str = "ROCMFORGE_HOST_ROOT";

/// Where the host's files are read from.
#[derive(Debug, Clone)]
pub struct HostRoot(PathBuf);

impl HostRoot {
    pub fn new(root: impl Into<PathBuf>) -> HostRoot {
        HostRoot(root.into())
    }

    /// `$ROCMFORGE_HOST_ROOT`, else `/`.
    pub fn from_env() -> HostRoot {
        HostRoot(std::env::var_os(ROOT_ENV).filter(|v| !v.is_empty()).map(PathBuf::from).unwrap_or_else(|| "/".into()))
    }

    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// The host's absolute path `abs` under the root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.0.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    pub fn read(&self, abs: impl AsRef<Path>) -> Option<String> {
        std::fs::read_to_string(self.path(abs)).ok()
    }
}

/// Memory of the host (`/proc/meminfo`), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Memory {
    pub total: u64,
    pub available: u64,
}

pub fn memory(root: &HostRoot) -> Option<Memory> {
    let text = root.read("/proc/meminfo")?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some(Memory { total: field("MemTotal")?, available: field("MemAvailable").or(field("MemFree"))? })
}

/// The groups that open the GPU: `/dev/kfd` and `/dev/dri/renderD*` belong to `render` (older
/// systems: `video`), and ROCm's install guide adds users to both.
pub const GPU_GROUPS: &[&str] = &["render", "video"];

/// The user who builds (`$USER`, else the passwd entry of this process's uid), and the groups of [`GPU_GROUPS`] it is a member of
/// (`/etc/passwd` primary group or `/etc/group` member list).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Account {
    pub user: String,
    pub uid: u32,
    /// (group, exists on the host, the user is a member)
    pub groups: Vec<(String, bool, bool)>,
}

pub fn account(root: &HostRoot) -> Account {
    let real_uid = rustix::process::getuid().as_raw();
    let passwd = root.read("/etc/passwd").unwrap_or_default();
    let entries: Vec<Vec<&str>> =
        passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).filter(|f| f.len() > 3).collect();
    let env_user = std::env::var("USER").ok().filter(|u| !u.is_empty());
    let entry = env_user
        .as_deref()
        .and_then(|u| entries.iter().find(|f| f[0] == u))
        .or_else(|| entries.iter().find(|f| f[2] == real_uid.to_string()));
    let uid = entry.and_then(|f| f[2].parse().ok()).unwrap_or(real_uid);
    let user = entry.map(|f| f[0].to_string()).or(env_user).unwrap_or_else(|| format!("uid {uid}"));
    let primary_gid = entry.map(|f| f[3].to_string());
    let group = root.read("/etc/group").unwrap_or_default();
    let groups = GPU_GROUPS
        .iter()
        .map(|g| {
            let line = group.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| f.len() > 2 && f[0] == *g);
            let member = line.as_ref().is_some_and(|f| {
                Some(f[2].to_string()) == primary_gid
                    || f.get(3).is_some_and(|m| m.split(',').any(|u| u.trim() == user))
            });
            (g.to_string(), line.is_some(), member)
        })
        .collect();
    Account { user, uid, groups }
}

/// `name` found on `PATH` (an executable file), as the build's steps would find it.
pub fn which(name: &str) -> Option<PathBuf> {
    which_in(name, &std::env::var_os("PATH")?)
}

/// `name` found on the search path `path_var` (an executable file).
pub fn which_in(name: &str, path_var: impl AsRef<std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&path_var)
        .map(|d| d.join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// The first line of `<tool> --version` (`cmake version 3.25.1`), if it runs.
pub fn tool_version(tool: &Path) -> Option<String> {
    let out = std::process::Command::new(tool).arg("--version").stdin(std::process::Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(if out.stdout.is_empty() { &out.stderr } else { &out.stdout }).into_owned();
    text.lines().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string())
}

/// The version number in a `--version` line, its last (`cmake version 3.25.1` -> `3.25.1`,
/// `g++ (Debian 12.2.0-14) 12.2.0` -> `12.2.0`).
pub fn version_in(line: &str) -> Option<String> {
    line.split_whitespace()
        .rfind(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_under_the_root() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("proc")).unwrap();
        std::fs::write(
            d.path().join("proc/meminfo"),
            "MemTotal:       16314640 kB\nMemFree: 1 kB\nMemAvailable:   12000000 kB\n",
        )
        .unwrap();
        let root = HostRoot::new(d.path());
        assert_eq!(root.path("/proc/meminfo"), d.path().join("proc/meminfo"));
        assert_eq!(memory(&root), Some(Memory { total: 16314640 * 1024, available: 12000000 * 1024 }));
        assert_eq!(version_in("cmake version 3.25.1"), Some("3.25.1".into()));
        assert_eq!(version_in("g++ (Debian 12.2.0-14) 12.2.0"), Some("12.2.0".into()));
    }
}
