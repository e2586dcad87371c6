//! The packages dpkg has installed (`/var/lib/dpkg/status`): names, and the virtual names they
//! provide (`Provides:`), which satisfy a need as apt would.

use std::collections::BTreeSet;

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
        for para in status.split("\n\n") {
            let field =
                |k: &str| para.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix(':')).map(str::trim).unwrap_or("");
            // `install ok installed`; `deinstall ok config-files` is a removed package.
            if field("Status").split_whitespace().nth(2) != Some("installed") {
                continue;
            }
            names.insert(field("Package").to_string());
            for p in field("Provides").split(',') {
                let name = p.split_whitespace().next().unwrap_or("");
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
