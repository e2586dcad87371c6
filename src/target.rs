//! GPU targets: the one table of known gfx names, parsing `--target`, and the one place that
//! renders a target set into each build system's spelling.

use std::collections::BTreeSet;
use std::fmt;

/// A known AMD GPU architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuTarget(u8);

/// (name, family, cards) — gfx1010/1011/1012 (RDNA1) are what this project exists for.
const KNOWN: &[(&str, &str, &str)] = &[
    ("gfx803", "GCN3", "Fiji / Polaris (RX 470-590)"),
    ("gfx900", "GCN5", "Vega 10 (RX Vega 56/64)"),
    ("gfx902", "GCN5", "Raven Ridge APU"),
    ("gfx904", "GCN5", "Vega 12"),
    ("gfx906", "GCN5", "Vega 20 (Radeon VII, MI50/60)"),
    ("gfx908", "CDNA1", "MI100"),
    ("gfx909", "GCN5", "Raven 2 APU"),
    ("gfx90a", "CDNA2", "MI200"),
    ("gfx90c", "GCN5", "Renoir APU"),
    ("gfx940", "CDNA3", "MI300"),
    ("gfx941", "CDNA3", "MI300"),
    ("gfx942", "CDNA3", "MI300X/A"),
    ("gfx1010", "RDNA1", "Navi 10 (RX 5600/5700, W5700)"),
    ("gfx1011", "RDNA1", "Navi 12 (Pro 5600M)"),
    ("gfx1012", "RDNA1", "Navi 14 (RX 5500)"),
    ("gfx1013", "RDNA1", "Cyan Skillfish APU"),
    ("gfx1030", "RDNA2", "Navi 21 (RX 6800/6900)"),
    ("gfx1031", "RDNA2", "Navi 22 (RX 6700)"),
    ("gfx1032", "RDNA2", "Navi 23 (RX 6600)"),
    ("gfx1033", "RDNA2", "Van Gogh APU"),
    ("gfx1034", "RDNA2", "Navi 24 (RX 6500)"),
    ("gfx1035", "RDNA2", "Rembrandt APU"),
    ("gfx1036", "RDNA2", "Raphael iGPU"),
    ("gfx1100", "RDNA3", "Navi 31 (RX 7900)"),
    ("gfx1101", "RDNA3", "Navi 32 (RX 7800/7700)"),
    ("gfx1102", "RDNA3", "Navi 33 (RX 7600)"),
    ("gfx1103", "RDNA3", "Phoenix APU"),
    ("gfx1150", "RDNA3.5", "Strix Point APU"),
    ("gfx1151", "RDNA3.5", "Strix Halo APU"),
    ("gfx1200", "RDNA4", "Navi 44 (RX 9060)"),
    ("gfx1201", "RDNA4", "Navi 48 (RX 9070)"),
];

impl GpuTarget {
    pub fn name(self) -> &'static str {
        KNOWN[self.0 as usize].0
    }
    pub fn family(self) -> &'static str {
        KNOWN[self.0 as usize].1
    }
    pub fn cards(self) -> &'static str {
        KNOWN[self.0 as usize].2
    }
    /// Every known target, in table order (which is also the sort order of targets).
    pub fn all() -> impl Iterator<Item = GpuTarget> {
        (0..KNOWN.len()).map(|i| GpuTarget(i as u8))
    }
    pub fn lookup(name: &str) -> Option<GpuTarget> {
        let name = name.trim().to_ascii_lowercase();
        KNOWN.iter().position(|k| k.0 == name).map(|i| GpuTarget(i as u8))
    }
}

impl fmt::Display for GpuTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The gfx name of a GPU version (major, minor, stepping; minor and stepping one hex digit
/// each): 10.3.0 is gfx1030, 9.0.10 gfx90a. The name need not be in the table: the runtime and
/// the driver spell versions of cards this project does not know.
pub fn gfx_name(major: u32, minor: u32, stepping: u32) -> Option<String> {
    (minor < 16 && stepping < 16).then(|| format!("gfx{major}{minor:x}{stepping:x}"))
}

/// `HSA_OVERRIDE_GFX_VERSION`'s spelling: `10.3.0` → `gfx1030`, `9.0.10` → `gfx90a`; `None`
/// for anything else.
pub fn gfx_of_dotted_version(v: &str) -> Option<String> {
    let parts: Vec<u32> = v.trim().split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    match parts[..] {
        [major, minor, stepping] => gfx_name(major, minor, stepping),
        _ => None,
    }
}

/// The KFD's `gfx_target_version`: major * 10000 + minor * 100 + stepping (libhsakmt's
/// `HSA_GET_GFX_VERSION_*`): 100100 is gfx1010, 90010 gfx90a. 0 is a CPU node.
pub fn gfx_of_kfd_version(version: u32) -> Option<String> {
    if version == 0 {
        return None;
    }
    gfx_name(version / 10000 % 100, version / 100 % 100, version % 100)
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("unknown GPU target `{name}`{hint}\nknown targets: {known}")]
    Unknown { name: String, hint: String, known: String },
    #[error("no GPU target given: pass --target, e.g. --target gfx1010")]
    Empty,
    #[error("`{spec}` has an empty target between its separators: list targets like `gfx1010,gfx1012`")]
    EmptyItem { spec: String },
}

fn known_list() -> String {
    KNOWN.iter().map(|k| k.0).collect::<Vec<_>>().join(", ")
}

/// An ordered, duplicate-free set of targets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct TargetSet(BTreeSet<GpuTarget>);

impl TargetSet {
    /// Parses `gfx1010,gfx1012` (also `;` or space separated, as PYTORCH_ROCM_ARCH users type it).
    pub fn parse(spec: &str) -> Result<TargetSet, TargetError> {
        let mut set = BTreeSet::new();
        let items: Vec<&str> = spec.split([',', ';']).map(str::trim).collect();
        // `gfx1010,,` or `,gfx1010`: a typo, not a list (a lone empty spec is `Empty` below).
        if items.iter().any(|i| i.is_empty()) && items.iter().any(|i| !i.is_empty()) {
            return Err(TargetError::EmptyItem { spec: spec.to_string() });
        }
        for raw in items.iter().flat_map(|i| i.split_whitespace()) {
            match GpuTarget::lookup(raw) {
                Some(t) => {
                    set.insert(t);
                }
                None => {
                    let best = GpuTarget::all()
                        .map(|t| (strsim::levenshtein(raw, t.name()), t))
                        .min_by_key(|(d, _)| *d)
                        .filter(|(d, _)| *d <= 2)
                        .map(|(_, t)| format!(" (did you mean `{t}`?)"))
                        .unwrap_or_default();
                    return Err(TargetError::Unknown { name: raw.to_string(), hint: best, known: known_list() });
                }
            }
        }
        if set.is_empty() {
            return Err(TargetError::Empty);
        }
        Ok(TargetSet(set))
    }

    pub fn from_targets(ts: impl IntoIterator<Item = GpuTarget>) -> TargetSet {
        TargetSet(ts.into_iter().collect())
    }
    pub fn iter(&self) -> impl Iterator<Item = GpuTarget> + '_ {
        self.0.iter().copied()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn contains(&self, t: GpuTarget) -> bool {
        self.0.contains(&t)
    }
    pub fn intersection(&self, other: &TargetSet) -> TargetSet {
        TargetSet(self.0.intersection(&other.0).copied().collect())
    }
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|t| t.name()).collect()
    }

    /// `gfx1010;gfx1012`: CMake lists (`GPU_TARGETS`, `AMDGPU_TARGETS`,
    /// `CMAKE_HIP_ARCHITECTURES`) and `PYTORCH_ROCM_ARCH`.
    pub fn cmake_list(&self) -> String {
        self.names().join(";")
    }
    /// `gfx1010,gfx1012`, as some tools (Tensile's `--architecture`) want it.
    pub fn comma_list(&self) -> String {
        self.names().join(",")
    }
    /// `--offload-arch=gfx1010 --offload-arch=gfx1012` for hipcc/clang.
    pub fn offload_arch_flags(&self) -> String {
        self.names().iter().map(|n| format!("--offload-arch={n}")).collect::<Vec<_>>().join(" ")
    }

    /// Every build-system form of this set, by the variable name each tool reads.
    pub fn build_variables(&self) -> Vec<(&'static str, String)> {
        let list = self.cmake_list();
        vec![
            ("GPU_TARGETS", list.clone()),
            ("AMDGPU_TARGETS", list.clone()),
            ("CMAKE_HIP_ARCHITECTURES", list.clone()),
            ("PYTORCH_ROCM_ARCH", list),
        ]
    }
}

impl fmt::Display for TargetSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.comma_list())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_versions_name_targets_in_both_spellings() {
        assert_eq!(gfx_of_dotted_version("10.3.0").as_deref(), Some("gfx1030"));
        assert_eq!(gfx_of_dotted_version("9.0.10").as_deref(), Some("gfx90a"));
        assert_eq!(gfx_of_dotted_version("11.0.0").as_deref(), Some("gfx1100"));
        assert_eq!(gfx_of_dotted_version("10.3"), None);
        assert_eq!(gfx_of_dotted_version("10.16.0"), None);
        assert_eq!(gfx_of_dotted_version("ten"), None);
        assert_eq!(gfx_of_kfd_version(100100).as_deref(), Some("gfx1010"));
        assert_eq!(gfx_of_kfd_version(100102).as_deref(), Some("gfx1012"));
        assert_eq!(gfx_of_kfd_version(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_of_kfd_version(110000).as_deref(), Some("gfx1100"));
        assert_eq!(gfx_of_kfd_version(0), None);
    }

    #[test]
    fn parses_and_sorts_and_dedups() {
        let t = TargetSet::parse("gfx1012, gfx1010,gfx1012").unwrap();
        assert_eq!(t.names(), vec!["gfx1010", "gfx1012"]);
        assert_eq!(t.cmake_list(), "gfx1010;gfx1012");
        assert_eq!(t.comma_list(), "gfx1010,gfx1012");
        assert_eq!(t.offload_arch_flags(), "--offload-arch=gfx1010 --offload-arch=gfx1012");
        let vars = t.build_variables();
        assert!(vars.contains(&("PYTORCH_ROCM_ARCH", "gfx1010;gfx1012".to_string())));
        assert!(vars.contains(&("CMAKE_HIP_ARCHITECTURES", "gfx1010;gfx1012".to_string())));
    }

    #[test]
    fn semicolon_form_is_accepted() {
        assert_eq!(TargetSet::parse("gfx1010;gfx1030").unwrap().names(), vec!["gfx1010", "gfx1030"]);
    }

    #[test]
    fn unknown_is_refused_with_list_and_hint() {
        let e = TargetSet::parse("gfx1010,gfx9999").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("unknown GPU target `gfx9999`"), "{msg}");
        assert!(msg.contains("gfx1010, gfx1011, gfx1012"), "{msg}");
        let e = TargetSet::parse("gfx101").unwrap_err().to_string();
        assert!(e.contains("did you mean `gfx1010`?") || e.contains("did you mean `gfx1011`?"), "{e}");
    }

    #[test]
    fn empty_is_refused() {
        assert_eq!(TargetSet::parse(" , ").unwrap_err(), TargetError::Empty);
        for typo in ["gfx1010,,", ",gfx1010", "gfx1010,;gfx1030", "gfx1010, ,gfx1030"] {
            let e = TargetSet::parse(typo).unwrap_err();
            assert_eq!(e, TargetError::EmptyItem { spec: typo.into() }, "{typo}");
            assert!(e.to_string().contains(&format!("`{typo}` has an empty target")), "{e}");
        }
    }

    #[test]
    fn table_has_rdna1_and_gfx12() {
        for n in ["gfx803", "gfx1010", "gfx1011", "gfx1012", "gfx1200", "gfx1201"] {
            assert!(GpuTarget::lookup(n).is_some(), "{n}");
        }
        assert_eq!(GpuTarget::lookup("GFX1010").unwrap().family(), "RDNA1");
        // Sorted by architecture, not by string: gfx90a before gfx1010.
        assert_eq!(TargetSet::parse("gfx1100,gfx90a").unwrap().cmake_list(), "gfx90a;gfx1100");
    }
}
