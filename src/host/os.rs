//! The distribution (`/etc/os-release`) and how packages are installed there.

use serde::Serialize;

use super::HostRoot;
use crate::recipe::PackageNeed;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Os {
    /// `debian`, `ubuntu`, `fedora`, ... (`ID`); empty when os-release is missing.
    pub id: String,
    /// `ID_LIKE`, split (`ubuntu debian` on Linux Mint).
    pub id_like: Vec<String>,
    /// `12`, `24.04` (`VERSION_ID`).
    pub version_id: String,
    /// `Debian GNU/Linux 12 (bookworm)` (`PRETTY_NAME`).
    pub pretty_name: String,
}

impl Os {
    /// Reads `/etc/os-release` (else `/usr/lib/os-release`) under `root`.
    pub fn read(root: &HostRoot) -> Os {
        let text = root.read("/etc/os-release").or_else(|| root.read("/usr/lib/os-release")).unwrap_or_default();
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
                .unwrap_or_default()
        };
        Os {
            id: field("ID"),
            id_like: field("ID_LIKE").split_whitespace().map(str::to_string).collect(),
            version_id: field("VERSION_ID"),
            pretty_name: field("PRETTY_NAME"),
        }
    }

    /// Debian, Ubuntu, or a derivative of either: dpkg and apt, and the package names recipes use.
    pub fn is_debian_like(&self) -> bool {
        ["debian", "ubuntu"].iter().any(|d| self.id == *d || self.id_like.iter().any(|l| l == d))
    }

    pub fn describe(&self) -> String {
        match (self.pretty_name.is_empty(), self.id.is_empty()) {
            (false, _) => self.pretty_name.clone(),
            (true, false) => format!("{} {}", self.id, self.version_id).trim().to_string(),
            (true, true) => "unknown (no /etc/os-release)".to_string(),
        }
    }

    /// The one command that installs `missing` here (run as root), or `None` where rocmforge
    /// knows no package names (recipes name Debian/Ubuntu packages).
    ///
    /// A need with alternatives (`libmsgpack-cxx-dev | libmsgpack-dev`, one name per release)
    /// goes through `apt-get satisfy` (apt 1.9+: Debian 11+, Ubuntu 20.04+), which takes
    /// dependency lines and installs the first alternative the release has.
    pub fn install_command(&self, missing: &[&PackageNeed]) -> Option<String> {
        if !self.is_debian_like() || missing.is_empty() {
            return None;
        }
        if missing.iter().all(|p| p.alternatives().len() == 1) {
            let names: Vec<&str> = missing.iter().map(|p| p.alternatives()[0].as_str()).collect();
            return Some(format!("apt-get install -y {}", names.join(" ")));
        }
        let args: Vec<String> = missing
            .iter()
            .map(|p| if p.alternatives().len() == 1 { p.to_string() } else { format!("\"{p}\"") })
            .collect();
        Some(format!("apt-get satisfy -y {}", args.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(text: &str) -> Os {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        std::fs::write(d.path().join("etc/os-release"), text).unwrap();
        Os::read(&HostRoot::new(d.path()))
    }

    #[test]
    fn distributions_and_their_install_command() {
        let mint = os("NAME=\"Linux Mint\"\nID=linuxmint\nID_LIKE=\"ubuntu debian\"\nVERSION_ID=\"21.3\"\n");
        assert!(mint.is_debian_like());
        assert_eq!(mint.describe(), "linuxmint 21.3");
        let numa = PackageNeed(vec!["libnuma-dev".into()]);
        let msgpack = PackageNeed(vec!["libmsgpack-cxx-dev".into(), "libmsgpack-dev".into()]);
        assert_eq!(mint.install_command(&[&numa]).unwrap(), "apt-get install -y libnuma-dev");
        assert_eq!(
            mint.install_command(&[&numa, &msgpack]).unwrap(),
            "apt-get satisfy -y libnuma-dev \"libmsgpack-cxx-dev | libmsgpack-dev\""
        );
        let fedora = os("ID=fedora\nVERSION_ID=41\nPRETTY_NAME='Fedora Linux 41'\n");
        assert!(!fedora.is_debian_like());
        assert_eq!(fedora.describe(), "Fedora Linux 41");
        assert_eq!(fedora.install_command(&[&numa]), None);
        assert_eq!(Os::read(&HostRoot::new("/nonexistent")).describe(), "unknown (no /etc/os-release)");
    }
}
