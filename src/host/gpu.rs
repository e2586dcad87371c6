//! The GPUs this host has: the KFD topology ROCm itself reads
//! (`/sys/class/kfd/kfd/topology/nodes/*/properties`: `gfx_target_version`, `vendor_id`,
//! `device_id`), and, where the kernel driver gives no KFD node, the PCI ids of AMD display
//! devices (`/sys/bus/pci/devices/*/{vendor,device,class}`) of the RDNA1 cards this project is for.

use std::path::Path;

use serde::Serialize;

use super::HostRoot;
use crate::target::GpuTarget;

const KFD_NODES: &str = "/sys/class/kfd/kfd/topology/nodes";
const PCI_DEVICES: &str = "/sys/bus/pci/devices";
const AMD: u32 = 0x1002;

/// PCI device ids of RDNA1 chips (the `pciidlist` of Linux's
/// `drivers/gpu/drm/amd/amdgpu/amdgpu_drv.c`: CHIP_NAVI10, CHIP_NAVI14, CHIP_NAVI12) and their
/// targets.
const RDNA1_PCI: &[(u32, &str, &str)] = &[
    (0x7310, "gfx1010", "Navi 10"),
    (0x7312, "gfx1010", "Navi 10"),
    (0x7318, "gfx1010", "Navi 10"),
    (0x7319, "gfx1010", "Navi 10"),
    (0x731a, "gfx1010", "Navi 10"),
    (0x731b, "gfx1010", "Navi 10"),
    (0x731e, "gfx1010", "Navi 10"),
    (0x731f, "gfx1010", "Navi 10"),
    (0x7340, "gfx1012", "Navi 14"),
    (0x7341, "gfx1012", "Navi 14"),
    (0x7347, "gfx1012", "Navi 14"),
    (0x734f, "gfx1012", "Navi 14"),
    (0x7360, "gfx1011", "Navi 12"),
    (0x7362, "gfx1011", "Navi 12"),
];

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// `gfx1010` (from KFD's `gfx_target_version`, or from the PCI id).
    pub gfx: String,
    /// A known target (`None` for a gfx name the target table does not have).
    #[serde(skip)]
    pub target: Option<GpuTarget>,
    /// `1002:731f`, when known.
    pub pci_id: Option<String>,
    /// Where it was seen: `kfd node 1`, `pci 0000:03:00.0`.
    pub seen: String,
}

impl Gpu {
    pub fn is_rdna1(&self) -> bool {
        self.target.is_some_and(|t| t.family() == "RDNA1")
    }

    pub fn describe(&self) -> String {
        let cards = self.target.map(|t| format!(" ({})", t.cards())).unwrap_or_default();
        let pci = self.pci_id.as_deref().map(|p| format!(", PCI {p}")).unwrap_or_default();
        format!("{}{cards}: {}{pci}", self.gfx, self.seen)
    }
}

fn properties(text: &str, key: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next()? == key).then(|| w.next()?.parse().ok()).flatten()
    })
}

fn sorted_entries(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| e.ok().map(|e| e.path())).collect();
    v.sort();
    v
}

/// The GPUs of the host: every KFD node with a gfx target; else every AMD PCI display device
/// whose id is an RDNA1 chip.
pub fn detect(root: &HostRoot) -> Vec<Gpu> {
    let mut gpus = Vec::new();
    let mut nodes = sorted_entries(&root.path(KFD_NODES));
    nodes.sort_by_key(|p| p.file_name().and_then(|n| n.to_str()?.parse::<u32>().ok()).unwrap_or(u32::MAX));
    for node in nodes {
        let Ok(text) = std::fs::read_to_string(node.join("properties")) else { continue };
        let Some(gfx) = properties(&text, "gfx_target_version").and_then(crate::target::gfx_of_kfd_version) else {
            continue;
        };
        let pci_id = match (properties(&text, "vendor_id"), properties(&text, "device_id")) {
            (Some(v), Some(d)) if v != 0 => Some(format!("{v:04x}:{d:04x}")),
            _ => None,
        };
        let seen = format!("KFD node {}", node.file_name().unwrap_or_default().to_string_lossy());
        gpus.push(Gpu { target: GpuTarget::lookup(&gfx), gfx, pci_id, seen });
    }
    if !gpus.is_empty() {
        return gpus;
    }
    for dev in sorted_entries(&root.path(PCI_DEVICES)) {
        let hex = |f: &str| {
            std::fs::read_to_string(dev.join(f))
                .ok()
                .and_then(|t| u32::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok())
        };
        // Class 0x03xxxx: display controllers.
        if hex("vendor") != Some(AMD) || hex("class").is_none_or(|c| c >> 16 != 0x03) {
            continue;
        }
        let Some(device) = hex("device") else { continue };
        let Some((_, gfx, _)) = RDNA1_PCI.iter().find(|(id, _, _)| *id == device) else { continue };
        gpus.push(Gpu {
            gfx: gfx.to_string(),
            target: GpuTarget::lookup(gfx),
            pci_id: Some(format!("{AMD:04x}:{device:04x}")),
            seen: format!(
                "PCI {} (no KFD node: is the amdgpu driver loaded?)",
                dev.file_name().unwrap_or_default().to_string_lossy()
            ),
        });
    }
    gpus
}

/// One line naming the cards [`detect`] found and where it saw each (`env` and `verify` print it).
pub fn card_line(gpus: &[Gpu]) -> String {
    if gpus.is_empty() {
        return "no AMD GPU found (no KFD node with a GPU, no RDNA1 display device on PCI)".into();
    }
    gpus.iter().map(Gpu::describe).collect::<Vec<_>>().join("; ")
}

const AMDGPU_VERSION: &str = "/sys/module/amdgpu/version";
const OS_RELEASE: &str = "/proc/sys/kernel/osrelease";

/// The GPU driver, saying where that was read: the amdgpu module's version where it states one
/// (AMD's packaged amdgpu-dkms does), else the kernel's release (the driver is the kernel's).
pub fn driver(root: &HostRoot) -> String {
    let read = |abs: &str| root.read(abs).map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
    match (read(AMDGPU_VERSION), read(OS_RELEASE)) {
        (Some(v), _) => format!("amdgpu {v} ({AMDGPU_VERSION})"),
        (None, Some(r)) => format!(
            "Linux {r} ({OS_RELEASE}; there is no {AMDGPU_VERSION}: amdgpu states no version of its own, or is not loaded)"
        ),
        (None, None) => format!("unknown (neither {AMDGPU_VERSION} nor {OS_RELEASE} can be read)"),
    }
}

/// The target to build for when none is asked: the gfx of the host's RDNA1 card, when every
/// RDNA1 card it has is of one kind.
pub fn single_rdna1_target(gpus: &[Gpu]) -> Option<(GpuTarget, &Gpu)> {
    let rdna1: Vec<&Gpu> = gpus.iter().filter(|g| g.is_rdna1()).collect();
    let first = *rdna1.first()?;
    rdna1.iter().all(|g| g.gfx == first.gfx).then(|| (first.target.expect("RDNA1 means a known target"), first))
}

/// The targets a build chooses without `--target`: the host's RDNA1 card's when it has one kind,
/// else the stack's `default-targets`; with the reason.
pub fn default_targets(stack: &crate::recipe::Stack, gpus: &[Gpu]) -> (crate::target::TargetSet, String) {
    match single_rdna1_target(gpus) {
        Some((t, g)) => {
            (crate::target::TargetSet::from_targets([t]), format!("the GPU this host has, {}", g.describe()))
        }
        None => (stack.default_targets.clone(), format!("stack `{}`'s default-targets", stack.name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_line_and_the_driver_say_where_they_come_from() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        assert_eq!(
            card_line(&detect(&root)),
            "no AMD GPU found (no KFD node with a GPU, no RDNA1 display device on PCI)"
        );
        assert!(driver(&root).starts_with("unknown (neither /sys/module/amdgpu/version nor"), "{}", driver(&root));
        let write = |abs: &str, text: &str| {
            let p = root.path(abs);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(OS_RELEASE, "6.1.0-18-amd64\n");
        assert!(driver(&root).starts_with("Linux 6.1.0-18-amd64 (/proc/sys/kernel/osrelease; there is no"));
        write(AMDGPU_VERSION, "6.8.5\n");
        assert_eq!(driver(&root), "amdgpu 6.8.5 (/sys/module/amdgpu/version)");
        write(
            "/sys/class/kfd/kfd/topology/nodes/1/properties",
            "gfx_target_version 100100\nvendor_id 4098\ndevice_id 29471\n",
        );
        assert_eq!(card_line(&detect(&root)), "gfx1010 (Navi 10 (RX 5600/5700, W5700)): KFD node 1, PCI 1002:731f");
    }

    #[test]
    fn pci_table_targets_are_rdna1() {
        for (_, gfx, _) in RDNA1_PCI {
            assert_eq!(GpuTarget::lookup(gfx).unwrap().family(), "RDNA1");
        }
    }
}
