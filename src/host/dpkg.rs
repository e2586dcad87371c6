//! The packages dpkg has installed (`/var/lib/dpkg/status`): names, and the virtual names they
//! provide (`Provides:`), which satisfy a need as apt would.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::HostRoot;
use crate::recipe::PackageNeed;

pub const STATUS: &str = "/var/lib/dpkg/status";

#[derive(Debug, Clone, Default)]
pub struct Installed {
    names: BTreeSet<String>,
}

impl Installed {
    /// The installed packages, or `None` where there is no dpkg database (not a Debian-like host).
    pub fn read(root: &HostRoot) -> Option<Installed> {
        Some(Installed::parse(&root.read(STATUS)?))
    }

    pub fn parse(status: &str) -> Installed {
        let mut names = BTreeSet::new();
        for p in installed(status) {
            names.insert(p.field("Package").to_string());
            for provided in p.field("Provides").split(',') {
                let name = provided.split_whitespace().next().unwrap_or("");
                if !name.is_empty() {
                    names.insert(name.to_string());
                }
            }
        }
        names.remove("");
        Installed { names }
    }

    pub fn has(&self, name: &str) -> bool {
        self.names.contains(name) || name.split_once(':').is_some_and(|(n, _)| self.names.contains(n))
    }

    /// The installed alternative of `need`, if any.
    pub fn satisfying<'n>(&self, need: &'n PackageNeed) -> Option<&'n str> {
        need.alternatives().iter().find(|a| self.has(a)).map(String::as_str)
    }
}

/// One paragraph of a dpkg status file.
struct Paragraph<'a>(&'a str);

impl<'a> Paragraph<'a> {
    fn field(&self, k: &str) -> &'a str {
        self.0.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix(':')).map(str::trim).unwrap_or("")
    }
}

/// The paragraphs of packages that are installed (`install ok installed`; `deinstall ok
/// config-files` is a removed package).
fn installed(status: &str) -> impl Iterator<Item = Paragraph<'_>> {
    status.split("\n\n").map(Paragraph).filter(|p| p.field("Status").split_whitespace().nth(2) == Some("installed"))
}

/// A dpkg database read whole (`<admin>/status` and `<admin>/info/*.list`): each installed
/// package's version, and which package owns a path.
#[derive(Debug, Default)]
pub struct Database {
    pub versions: BTreeMap<String, String>,
    /// Absolute path, as dpkg lists it -> package.
    owners: BTreeMap<String, String>,
}

impl Database {
    /// `None`: no status file there.
    pub fn read(admin: &Path) -> Option<Database> {
        let status = std::fs::read_to_string(admin.join("status")).ok()?;
        let mut d = Database::default();
        for p in installed(&status).filter(|p| !p.field("Package").is_empty()) {
            d.versions.insert(p.field("Package").to_string(), p.field("Version").to_string());
        }
        for e in std::fs::read_dir(admin.join("info")).ok()?.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pkg) = name.strip_suffix(".list") else { continue };
            let pkg = pkg.split(':').next().unwrap_or(pkg);
            if !d.versions.contains_key(pkg) {
                continue;
            }
            for line in std::fs::read_to_string(e.path()).unwrap_or_default().lines() {
                d.owners.insert(line.to_string(), pkg.to_string());
            }
        }
        Some(d)
    }

    /// The package whose file list names `path` (absolute, as dpkg lists it).
    pub fn owner(&self, path: &str) -> Option<&String> {
        self.owners.get(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_and_provided_names() {
        let status = "Package: libnuma-dev\nStatus: install ok installed\nVersion: 2.0.16-1\n\n\
                      Package: libelf-dev\nStatus: deinstall ok config-files\n\n\
                      Package: libmsgpack-cxx-dev\nStatus: install ok installed\nProvides: libmsgpack-cxx (= 4.1.3)\n";
        let i = Installed::parse(status);
        assert!(i.has("libnuma-dev") && i.has("libmsgpack-cxx") && i.has("libnuma-dev:amd64"));
        assert!(!i.has("libelf-dev"));
        let msgpack = PackageNeed(vec!["libmsgpack-dev".into(), "libmsgpack-cxx-dev".into()]);
        assert_eq!(i.satisfying(&msgpack), Some("libmsgpack-cxx-dev"));
    }
}
