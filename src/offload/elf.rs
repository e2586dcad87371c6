//! ELF files: AMDGPU code objects (the target in the header's `e_flags`) and host objects and
//! libraries (their device code in the `.hip_fatbin` section, as offload bundles, or, for
//! `-fgpu-rdc` objects, in `__CLANG_OFFLOAD_BUNDLE__<entry id>` sections). Parsing is the
//! `object` crate's; the AMDGPU flag values are from LLVM's `llvm/BinaryFormat/ELF.h`.

use object::read::elf::{ElfFile, FileHeader};
use object::{Endianness, Object, ObjectSection};

use super::{bundle, Container, DeviceCode, OffloadError};

/// `e_machine` of AMD GPU code objects.
pub const EM_AMDGPU: u16 = 224;
/// `EI_OSABI` of code objects for the HSA runtime (ROCm).
const ELFOSABI_AMDGPU_HSA: u8 = 64;

/// `EF_AMDGPU_MACH` values (the low byte of `e_flags`) and the processor each names.
const MACH: &[(u32, &str)] = &[
    (0x020, "gfx600"),
    (0x021, "gfx601"),
    (0x022, "gfx700"),
    (0x023, "gfx701"),
    (0x024, "gfx702"),
    (0x025, "gfx703"),
    (0x026, "gfx704"),
    (0x028, "gfx801"),
    (0x029, "gfx802"),
    (0x02a, "gfx803"),
    (0x02b, "gfx810"),
    (0x02c, "gfx900"),
    (0x02d, "gfx902"),
    (0x02e, "gfx904"),
    (0x02f, "gfx906"),
    (0x030, "gfx908"),
    (0x031, "gfx909"),
    (0x032, "gfx90c"),
    (0x033, "gfx1010"),
    (0x034, "gfx1011"),
    (0x035, "gfx1012"),
    (0x036, "gfx1030"),
    (0x037, "gfx1031"),
    (0x038, "gfx1032"),
    (0x039, "gfx1033"),
    (0x03a, "gfx602"),
    (0x03b, "gfx705"),
    (0x03c, "gfx805"),
    (0x03d, "gfx1035"),
    (0x03e, "gfx1034"),
    (0x03f, "gfx90a"),
    (0x040, "gfx940"),
    (0x041, "gfx1100"),
    (0x042, "gfx1013"),
    (0x043, "gfx1150"),
    (0x044, "gfx1103"),
    (0x045, "gfx1036"),
    (0x046, "gfx1101"),
    (0x047, "gfx1102"),
    (0x048, "gfx1200"),
    (0x04a, "gfx1151"),
    (0x04b, "gfx941"),
    (0x04c, "gfx942"),
    (0x04e, "gfx1201"),
    (0x04f, "gfx950"),
    (0x051, "gfx9-generic"),
    (0x052, "gfx10-1-generic"),
    (0x053, "gfx10-3-generic"),
    (0x054, "gfx11-generic"),
    (0x055, "gfx1152"),
    (0x058, "gfx1153"),
    (0x059, "gfx12-generic"),
    (0x05f, "gfx9-4-generic"),
];

/// What one ELF file carries.
pub(super) enum ElfContent {
    /// An AMDGPU code object for this target id.
    CodeObject(String),
    /// A host file; the device code found in it (maybe none).
    Host(Vec<DeviceCode>),
}

/// The target id (`gfx1010`, `gfx1010:xnack-`, `gfx90a:sramecc+:xnack-`) of an AMDGPU code
/// object, or `None` when `bytes` is not one.
pub fn code_object_target(bytes: &[u8]) -> Option<String> {
    match read(bytes) {
        Ok(ElfContent::CodeObject(t)) => Some(t),
        _ => None,
    }
}

pub(super) fn read(bytes: &[u8]) -> Result<ElfContent, OffloadError> {
    match object::FileKind::parse(bytes) {
        Ok(object::FileKind::Elf64) => read_elf::<object::elf::FileHeader64<Endianness>>(bytes),
        Ok(object::FileKind::Elf32) => read_elf::<object::elf::FileHeader32<Endianness>>(bytes),
        _ => Err(OffloadError::Malformed("not an ELF file".into())),
    }
}

fn read_elf<H: FileHeader<Endian = Endianness>>(bytes: &[u8]) -> Result<ElfContent, OffloadError> {
    let file = ElfFile::<H>::parse(bytes).map_err(|e| OffloadError::Malformed(format!("bad ELF file: {e}")))?;
    let header = file.elf_header();
    let endian = file.endian();
    if header.e_machine(endian) == EM_AMDGPU {
        let ident = header.e_ident();
        return amdgpu_target(header.e_flags(endian), ident.os_abi, ident.abi_version).map(ElfContent::CodeObject);
    }
    let mut found = Vec::new();
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        if name == ".hip_fatbin" {
            let data = section.data().map_err(|e| OffloadError::Malformed(format!("section .hip_fatbin: {e}")))?;
            // An empty or zero-filled section (`.bss`-like in some links) holds nothing.
            let Some(start) = data.iter().position(|b| *b != 0) else { continue };
            let data = &data[start..];
            found.extend(
                bundle::read_all(data).map_err(|e| OffloadError::Malformed(format!("section .hip_fatbin: {e}")))?,
            );
        } else if let Some(id) = name.strip_prefix("__CLANG_OFFLOAD_BUNDLE__") {
            if let Some(target) = bundle::target_of_entry(id) {
                found.push(DeviceCode {
                    target,
                    entry: Some(id.to_string()),
                    container: Container::RdcSection,
                    size: section.size(),
                });
            }
        }
    }
    Ok(ElfContent::Host(found))
}

/// The target id an AMDGPU code object's header names: the processor from `EF_AMDGPU_MACH`,
/// and, from code object v3 on, the `sramecc` and `xnack` settings (alphabetical, as clang
/// writes target ids). "any" and "unsupported" add no suffix.
pub fn amdgpu_target(flags: u32, os_abi: u8, abi_version: u8) -> Result<String, OffloadError> {
    let mach = flags & 0xff;
    let Some((_, name)) = MACH.iter().find(|(m, _)| *m == mach) else {
        return Err(OffloadError::Malformed(format!(
            "AMDGPU code object names processor {mach:#04x} (e_flags {flags:#x}), which this rocmforge does not know"
        )));
    };
    let mut target = name.to_string();
    if os_abi != ELFOSABI_AMDGPU_HSA {
        return Ok(target);
    }
    let setting = |bits: u32, on: u32, off: u32| match bits {
        b if b == on => Some('+'),
        b if b == off => Some('-'),
        _ => None,
    };
    let (sramecc, xnack) = match abi_version {
        // Code object v2 carries no target features.
        0 => (None, None),
        // v3: a bit each, set for "on".
        1 => ((flags & 0x200 != 0).then_some('+'), (flags & 0x100 != 0).then_some('+')),
        // v4 and later: two bits each, unsupported / any / off / on.
        _ => (setting(flags & 0xc00, 0xc00, 0x800), setting(flags & 0x300, 0x300, 0x200)),
    };
    if let Some(s) = sramecc {
        target.push_str(&format!(":sramecc{s}"));
    }
    if let Some(x) = xnack {
        target.push_str(&format!(":xnack{x}"));
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_to_target_ids() {
        // hipcc --offload-arch=gfx1010 writes 0x133 (xnack "any") with ABI version 2 (v4).
        assert_eq!(amdgpu_target(0x133, 64, 2).unwrap(), "gfx1010");
        assert_eq!(amdgpu_target(0x233, 64, 2).unwrap(), "gfx1010:xnack-");
        assert_eq!(amdgpu_target(0x336, 64, 3).unwrap(), "gfx1030:xnack+");
        assert_eq!(amdgpu_target(0xe3f, 64, 3).unwrap(), "gfx90a:sramecc+:xnack-");
        assert_eq!(amdgpu_target(0x32f, 64, 1).unwrap(), "gfx906:sramecc+:xnack+");
        assert_eq!(amdgpu_target(0x02f, 64, 1).unwrap(), "gfx906");
        assert_eq!(amdgpu_target(0x12c, 64, 0).unwrap(), "gfx900");
        let e = amdgpu_target(0x0fe, 64, 2).unwrap_err().to_string();
        assert!(e.contains("0xfe"), "{e}");
    }
}
