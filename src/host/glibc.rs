//! The host's C library: glibc's version, read from its `libc.so.6` (every glibc carries the
//! line `GNU C Library (Debian GLIBC 2.36-9+deb12u10) stable release version 2.36.`), not by
//! running a tool, so a fake host root can hold one; and what it means for a library that asks
//! for an executable stack: glibc 2.41 and later refuse to `dlopen` it.

use std::path::PathBuf;

use serde::Serialize;

use super::HostRoot;

/// The first glibc that refuses to `dlopen` a library asking for an executable stack.
pub const REFUSES_EXEC_STACK: (u32, u32) = (2, 41);

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Glibc {
    /// `2.36`.
    pub version: String,
    /// The host's path of the `libc.so.6` it was read from.
    pub path: PathBuf,
}

impl Glibc {
    /// glibc 2.41 or later: a library that asks for an executable stack does not load.
    pub fn refuses_exec_stack(&self) -> bool {
        let mut parts = self.version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= REFUSES_EXEC_STACK
    }

    /// What it means for libraries that ask for an executable stack.
    pub fn describe(&self) -> String {
        let what = if self.refuses_exec_stack() {
            "libraries that ask for an executable stack do not load (dlopen: cannot enable executable stack); rocmforge builds none, refuses to store one, and publishes prebuilt wheels with the request cleared (version label `noexecstack`)"
        } else {
            "libraries that ask for an executable stack still load (2.41 and later refuse them; rocmforge builds none and publishes prebuilt wheels with the request cleared)"
        };
        format!("glibc {} ({}): {what}", self.version, self.path.display())
    }
}

/// Where distributions keep it: Debian and Ubuntu (multiarch), Fedora (`lib64`), Arch.
fn candidates() -> Vec<String> {
    let triplet = super::multiarch_triplet();
    let mut out = vec![format!("/lib/{triplet}/libc.so.6"), format!("/usr/lib/{triplet}/libc.so.6")];
    out.extend(["/lib64/libc.so.6", "/usr/lib64/libc.so.6", "/usr/lib/libc.so.6", "/lib/libc.so.6"].map(String::from));
    out
}

/// The host's glibc, from the first `libc.so.6` found under `root` that names its release;
/// `None` when there is none (musl, or a fake root without one).
pub fn detect(root: &HostRoot) -> Option<Glibc> {
    candidates().into_iter().find_map(|abs| {
        let bytes = std::fs::read(root.path(&abs)).ok()?;
        Some(Glibc { version: release_in(&bytes)?, path: PathBuf::from(abs) })
    })
}

/// The version in glibc's release line (`... stable release version 2.36.`, `... development
/// release version 2.41.9000.`).
fn release_in(bytes: &[u8]) -> Option<String> {
    const MARK: &[u8] = b"release version ";
    let at = memchr::memmem::find_iter(bytes, MARK)
        .find(|&i| bytes[..i].ends_with(b"stable ") || bytes[..i].ends_with(b"development "))?;
    let rest = &bytes[at + MARK.len()..];
    let end = rest.iter().position(|b| !(b.is_ascii_digit() || *b == b'.')).unwrap_or(rest.len());
    let version = std::str::from_utf8(&rest[..end]).ok()?.trim_end_matches('.');
    version.contains('.').then(|| version.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_line_and_what_it_means() {
        let line = |v: &str| format!("\0\0GNU C Library (Debian GLIBC {v}-9+deb12u10) stable release version {v}.\n\0");
        assert_eq!(release_in(line("2.36").as_bytes()), Some("2.36".into()));
        assert_eq!(
            release_in(b"GNU C Library (GNU libc) development release version 2.41.9000.\n"),
            Some("2.41.9000".into())
        );
        assert_eq!(release_in(b"no such line"), None);
        let g = |v: &str| Glibc { version: v.into(), path: "/lib64/libc.so.6".into() };
        assert!(!g("2.36").refuses_exec_stack() && !g("2.40").refuses_exec_stack());
        assert!(g("2.41").refuses_exec_stack() && g("2.42").refuses_exec_stack() && g("3.0").refuses_exec_stack());
        assert!(g("2.41").describe().contains("do not load (dlopen: cannot enable executable stack)"));

        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::new(d.path());
        assert_eq!(detect(&root), None);
        std::fs::create_dir_all(d.path().join("usr/lib64")).unwrap();
        std::fs::write(d.path().join("usr/lib64/libc.so.6"), line("2.41")).unwrap();
        assert_eq!(detect(&root), Some(g("2.41")).map(|g| Glibc { path: "/usr/lib64/libc.so.6".into(), ..g }));
    }
}
