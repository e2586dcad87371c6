//! ELF files: AMDGPU code objects (the target in the header's `e_flags`) and host objects and
//! libraries (their device code in the `.hip_fatbin` section, as offload bundles, or, for
//! `-fgpu-rdc` objects, in `__CLANG_OFFLOAD_BUNDLE__<entry id>` sections). Parsing is the
//! `object` crate's, from a file on disk, a wheel's member or bytes ([`Source`]), reading only
//! the headers, tables and sections it needs (a `.hip_fatbin` section as a stream), never the
//! whole file; the AMDGPU flag values are from LLVM's `llvm/BinaryFormat/ELF.h`.
//!
//! Also the stack a host library or executable asks the loader for (its `PT_GNU_STACK` program
//! header, [`Stack`]), read from the header and the program header table alone, so a
//! multi-gigabyte library costs a few hundred bytes.

use std::io::{Read, Seek, SeekFrom};

use object::elf::{ELFCLASS64, ELFDATA2LSB, ET_DYN, ET_EXEC, PF_R, PF_W, PF_X, PN_XNUM, PT_GNU_STACK, PT_NULL};
use object::read::elf::{ElfFile, FileHeader};
use object::{Endianness, Object, ObjectSection, ObjectSegment};
use serde::Serialize;

use super::source::Source;
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
    /// A host file; the device code found in it (maybe none), and its kpack marker.
    Host { code: Vec<DeviceCode>, marker: Option<super::kpack::Marker> },
}

/// The target id (`gfx1010`, `gfx1010:xnack-`, `gfx90a:sramecc+:xnack-`) of an AMDGPU code
/// object, or `None` when `bytes` is not one.
pub fn code_object_target(bytes: &[u8]) -> Option<String> {
    match read(&mut std::io::Cursor::new(bytes)) {
        Ok(ElfContent::CodeObject(t)) => Some(t),
        _ => None,
    }
}

/// The target of an AMDGPU code object from its ELF header alone (its first 64 bytes): what a
/// reader of a container holding code objects reads of each, never the whole.
pub(super) fn code_object_header(h: &[u8]) -> Result<String, OffloadError> {
    if h.len() < 52 || !h.starts_with(b"\x7fELF") || h[4] != 2 || h[5] != 1 {
        return Err(OffloadError::Malformed("not an AMDGPU code object (no 64-bit little-endian ELF header)".into()));
    }
    let machine = u16::from_le_bytes([h[18], h[19]]);
    if machine != EM_AMDGPU {
        return Err(OffloadError::Malformed(format!("not an AMDGPU code object (ELF machine {machine})")));
    }
    amdgpu_target(u32::from_le_bytes(h[48..52].try_into().expect("4 bytes")), h[7], h[8])
}

/// [`code_object_header`], `None` when `h` is not one's.
pub fn header_target(h: &[u8]) -> Option<String> {
    code_object_header(h).ok()
}

/// Reads an ELF file from `src`: its headers, section table and section names through
/// `object` (which reads from a [`ReadCache`](object::ReadCache) only the ranges it asks for),
/// then the sections that can hold device code, a `.hip_fatbin` section as a stream.
pub(super) fn read(src: &mut dyn Source) -> Result<ElfContent, OffloadError> {
    let parsed = {
        let cache = object::ReadCache::new(&mut *src);
        match object::FileKind::parse(&cache) {
            Ok(object::FileKind::Elf64) => read_elf::<object::elf::FileHeader64<Endianness>, _>(&cache),
            Ok(object::FileKind::Elf32) => read_elf::<object::elf::FileHeader32<Endianness>, _>(&cache),
            _ => Err(OffloadError::Malformed("not an ELF file".into())),
        }
    };
    match parsed? {
        Parsed::CodeObject(target) => Ok(ElfContent::CodeObject(target)),
        Parsed::Host(sections) => host_sections(src, sections),
    }
}

/// What the section table says of an ELF file.
enum Parsed {
    CodeObject(String),
    /// A host file's sections that can hold device code, in the table's order.
    Host(Vec<DeviceSection>),
}

/// A section that can hold device code.
enum DeviceSection {
    /// A `.rocm_kpack_ref` marker's bytes.
    Marker(Vec<u8>),
    Manifest(String),
    /// A `.hip_fatbin` section's place in the file (`None`: it has no bytes there).
    Fatbin(Option<(u64, u64)>),
    /// A `__CLANG_OFFLOAD_BUNDLE__<entry id>` section: the id and the section's size.
    Rdc(String, u64),
}

/// The most a `.rocm_kpack_ref` marker may hold: rocm-kpack writes a kernel name and a few
/// search paths, some hundred bytes.
const MAX_MARKER: u64 = 1 << 20;

fn read_elf<'a, H: FileHeader<Endian = Endianness>, R: object::ReadRef<'a>>(data: R) -> Result<Parsed, OffloadError> {
    // Read through the cache, whose buffers are the allocator's, a section header table at an
    // offset that is not a multiple of 8 (where rocm-kpack's transform leaves it; glibc never
    // reads it, so such a library loads) is read like any other.
    let file = ElfFile::<H, _>::parse(data)
        .map_err(|e| OffloadError::Malformed(format!("truncated or damaged ELF file: {e}")))?;
    let len = object::ReadRef::len(data).map_err(|()| OffloadError::Malformed("its length cannot be read".into()))?;
    whole(&file, len)?;
    let header = file.elf_header();
    let endian = file.endian();
    if header.e_machine(endian) == EM_AMDGPU {
        let ident = header.e_ident();
        return amdgpu_target(header.e_flags(endian), ident.os_abi, ident.abi_version).map(Parsed::CodeObject);
    }
    let mut sections = Vec::new();
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        if name == super::kpack::MARKER_SECTION {
            if section.size() > MAX_MARKER {
                return Err(OffloadError::Malformed(format!(
                    "section {name} holds {} bytes, more than the {MAX_MARKER} of a rocm-kpack marker",
                    section.size()
                )));
            }
            let data = section.data().map_err(|e| OffloadError::Malformed(format!("section {name}: {e}")))?;
            sections.push(DeviceSection::Marker(data.to_vec()));
        } else if name == super::kpack::MANIFEST_SECTION {
            sections.push(DeviceSection::Manifest(name.to_string()));
        } else if name == ".hip_fatbin" {
            sections.push(DeviceSection::Fatbin(section.file_range()));
        } else if let Some(id) = name.strip_prefix("__CLANG_OFFLOAD_BUNDLE__") {
            sections.push(DeviceSection::Rdc(id.to_string(), section.size()));
        }
    }
    Ok(Parsed::Host(sections))
}

/// Whether every section has a name and every section and segment lies inside the file's `len`
/// bytes: a file cut short or overwritten is refused, not read as one without device code.
fn whole<'a, H: FileHeader<Endian = Endianness>, R: object::ReadRef<'a>>(
    file: &ElfFile<'a, H, R>,
    len: u64,
) -> Result<(), OffloadError> {
    let past = |what: String, (off, size): (u64, u64)| match off.checked_add(size) {
        Some(end) if end <= len => Ok(()),
        end => Err(OffloadError::Malformed(format!(
            "truncated or damaged: {what} takes bytes {off} to {}, and the file has {len}",
            end.map(|e| e.to_string()).unwrap_or_else(|| "past 2^64".into())
        ))),
    };
    for section in file.sections() {
        let name = section.name().map_err(|e| {
            OffloadError::Malformed(format!(
                "damaged: the name of section {} cannot be read ({e}), so its section name table is not whole",
                section.index().0
            ))
        })?;
        if let Some(range) = section.file_range() {
            past(format!("section `{name}`"), range)?;
        }
    }
    for (i, segment) in file.segments().enumerate() {
        past(format!("program segment {i}"), segment.file_range())?;
    }
    Ok(())
}

/// The device code of a host file from its sections that can hold some, a `.hip_fatbin`
/// section's bundles read from `src` as a stream.
fn host_sections(src: &mut dyn Source, sections: Vec<DeviceSection>) -> Result<ElfContent, OffloadError> {
    let mut found = Vec::new();
    let mut marker = None;
    for section in sections {
        match section {
            DeviceSection::Marker(data) => marker = Some(super::kpack::read_marker(&data)?),
            DeviceSection::Manifest(name) => {
                return Err(OffloadError::Malformed(format!(
                    "its device code was moved out by rocm-kpack, and section {name} (the manifest form, pointing at a `.kpack/*.kpm` manifest) says where; this rocmforge reads only the `.rocm_kpack_ref` form: read the `.kpack` archives themselves (`rocmforge inspect <dir>/.kpack`)"
                )));
            }
            DeviceSection::Fatbin(None) => {}
            DeviceSection::Fatbin(Some((offset, size))) => {
                let bad = |e: OffloadError| OffloadError::Malformed(format!("section .hip_fatbin: {e}"));
                let unreadable = |e: std::io::Error| bad(OffloadError::Malformed(format!("cannot be read: {e}")));
                src.seek(SeekFrom::Start(offset)).map_err(unreadable)?;
                found.extend(bundle::read_section(&mut (&mut *src).take(size), size).map_err(bad)?);
            }
            DeviceSection::Rdc(id, size) => {
                if let Some(target) = bundle::target_of_entry(&id) {
                    found.push(DeviceCode { target, entry: Some(id), container: Container::RdcSection, size });
                }
            }
        }
    }
    Ok(ElfContent::Host { code: found, marker })
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

/// The stack a host ELF library or executable asks the loader for. glibc 2.41 and later refuse
/// to `dlopen` a library that asks for an executable stack ("cannot enable executable stack"),
/// and on x86_64 take one without a `PT_GNU_STACK` header as asking for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    /// `PT_GNU_STACK` without `PF_X` (`readelf -lW` shows `RW`).
    NonExecutable,
    /// `PT_GNU_STACK` with `PF_X` (`RWE`).
    Executable,
    /// No `PT_GNU_STACK` header.
    Missing,
}

impl Stack {
    /// What is wrong with it, for people (after the file's name); `None` when nothing is.
    pub fn problem(self) -> Option<&'static str> {
        match self {
            Stack::NonExecutable => None,
            Stack::Executable => Some("needs an executable stack (PT_GNU_STACK RWE): glibc 2.41+ refuses to load it"),
            Stack::Missing => Some("has no PT_GNU_STACK header: glibc 2.41+ treats it as needing an executable stack"),
        }
    }
}

/// Bytes of an ELF64 header, all [`program_headers`] reads.
pub const ELF64_HEADER: usize = 64;
/// Bytes of an ELF64 program header (`Elf64_Phdr`).
const PHDR64: usize = 56;

/// Where a host library's or executable's program header table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramHeaders {
    /// Its offset in the file.
    pub offset: u64,
    count: usize,
}

impl ProgramHeaders {
    /// Its length in bytes.
    pub fn size(&self) -> usize {
        PHDR64 * self.count
    }

    /// The stack the table (its [`size`](Self::size) bytes) asks for.
    pub fn stack(&self, table: &[u8]) -> Stack {
        let word = |p: &[u8], at: usize| u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
        match table.chunks_exact(PHDR64).take(self.count).find(|p| word(p, 0) == PT_GNU_STACK) {
            None => Stack::Missing,
            Some(p) if word(p, 4) & PF_X != 0 => Stack::Executable,
            Some(_) => Stack::NonExecutable,
        }
    }
}

/// The program header table of a host ELF64 little-endian shared library or executable
/// (`ET_DYN`, `ET_EXEC`), from the file's first [`ELF64_HEADER`] bytes; `None` for anything the
/// stack question does not apply to: not ELF, another class or byte order, objects (`ET_REL`),
/// AMDGPU code objects, files without program headers.
pub fn program_headers(head: &[u8]) -> Option<ProgramHeaders> {
    let h = head.get(..ELF64_HEADER)?;
    if !h.starts_with(b"\x7fELF") || h[4] != ELFCLASS64 || h[5] != ELFDATA2LSB {
        return None;
    }
    let half = |at: usize| u16::from_le_bytes([h[at], h[at + 1]]);
    if !matches!(half(16), ET_DYN | ET_EXEC) || half(18) == EM_AMDGPU {
        return None;
    }
    let offset = u64::from_le_bytes(h[32..40].try_into().ok()?);
    let count = half(56);
    // An entry is an Elf64_Phdr (glibc refuses another size), so a table is at most 3.6 MB.
    // PN_XNUM: more headers than 16 bits count, their number in section 0 (no library has them).
    if usize::from(half(54)) != PHDR64 || count == 0 || count == PN_XNUM {
        return None;
    }
    Some(ProgramHeaders { offset, count: usize::from(count) })
}

/// The stack a host library or executable in memory asks for; `None` when not applicable
/// (see [`program_headers`]) or its table lies outside `bytes`.
pub fn host_stack(bytes: &[u8]) -> Option<Stack> {
    let ph = program_headers(bytes)?;
    let table = bytes.get(usize::try_from(ph.offset).ok()?..)?.get(..ph.size())?;
    Some(ph.stack(table))
}

/// [`host_stack`] of a file, reading its header and then, after a seek, its program header
/// table, nothing else. A file too short for either is `None`.
pub fn read_stack<R: Read + Seek + ?Sized>(f: &mut R) -> std::io::Result<Option<Stack>> {
    let mut head = [0u8; ELF64_HEADER];
    if !fill(f, &mut head)? {
        return Ok(None);
    }
    let Some(ph) = program_headers(&head) else { return Ok(None) };
    f.seek(SeekFrom::Start(ph.offset))?;
    let mut table = vec![0u8; ph.size()];
    Ok(fill(f, &mut table)?.then(|| ph.stack(&table)))
}

/// [`host_stack`] of a stream (a wheel member as it is decompressed): the bytes between the
/// header and the program header table are read past, not kept.
pub fn stream_stack(r: &mut impl Read) -> std::io::Result<Option<Stack>> {
    let mut head = [0u8; ELF64_HEADER];
    if !fill(r, &mut head)? {
        return Ok(None);
    }
    let Some(ph) = program_headers(&head) else { return Ok(None) };
    let Some(gap) = ph.offset.checked_sub(ELF64_HEADER as u64) else { return Ok(None) };
    if std::io::copy(&mut r.by_ref().take(gap), &mut std::io::sink())? < gap {
        return Ok(None);
    }
    let mut table = vec![0u8; ph.size()];
    Ok(fill(r, &mut table)?.then(|| ph.stack(&table)))
}

/// Makes a host library or executable in memory ask for a non-executable stack: clears `PF_X`
/// of its `PT_GNU_STACK` header, or, when it has none, turns an unused (`PT_NULL`) header into
/// one (`RW`), which is what `-z noexecstack` would have written. `Ok(false)`: nothing to do
/// (already non-executable, or not a host ELF file); an error when it has neither header to
/// change.
pub fn clear_exec_stack(bytes: &mut [u8]) -> Result<bool, &'static str> {
    let Some(ph) = program_headers(bytes) else { return Ok(false) };
    let Some(start) = usize::try_from(ph.offset).ok() else { return Ok(false) };
    let Some(table) = bytes.get_mut(start..).and_then(|t| t.get_mut(..ph.size())) else { return Ok(false) };
    let word = |p: &[u8], at: usize| u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
    let headers = table.chunks_exact_mut(PHDR64);
    let mut unused = None;
    for p in headers {
        match word(p, 0) {
            PT_GNU_STACK => {
                let flags = word(p, 4);
                if flags & PF_X == 0 {
                    return Ok(false);
                }
                p[4..8].copy_from_slice(&(flags & !PF_X).to_le_bytes());
                return Ok(true);
            }
            PT_NULL if unused.is_none() => unused = Some(p),
            _ => {}
        }
    }
    let Some(p) = unused else {
        return Err("has no PT_GNU_STACK header and no unused program header to make one of");
    };
    p.fill(0);
    p[0..4].copy_from_slice(&PT_GNU_STACK.to_le_bytes());
    p[4..8].copy_from_slice(&(PF_R | PF_W).to_le_bytes());
    Ok(true)
}

/// Fills `buf` from `r`; `false` when `r` ends first.
fn fill<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> std::io::Result<bool> {
    match r.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// What a shared library or executable asks of the dynamic loader: the sonames it needs and
/// where it says to look (`DT_RPATH` is searched before `LD_LIBRARY_PATH`, `DT_RUNPATH` after).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dynamic {
    pub soname: Option<String>,
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
}

/// Reads `path`'s dynamic section, reading only the headers and the sections it needs (a
/// ROCm library can be a gigabyte). `None`: not a 64-bit ELF file with one. `$ORIGIN` in its
/// search paths is replaced by `path`'s folder.
pub fn dynamic(path: &std::path::Path) -> Option<Dynamic> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let d = read_dynamic(&cache)?;
    let origin = path.parent().map(|p| p.display().to_string()).unwrap_or_default();
    let expand = |dirs: Vec<String>| -> Vec<String> {
        dirs.into_iter().map(|x| x.replace("$ORIGIN", &origin).replace("${ORIGIN}", &origin)).collect()
    };
    Some(Dynamic { rpath: expand(d.rpath), runpath: expand(d.runpath), ..d })
}

/// [`dynamic_of`] of a file on disk (a host ELF file only), read as [`dynamic`] reads it (the
/// headers and the sections it needs), its search paths as written.
pub fn dynamic_as_written(path: &std::path::Path) -> Option<Dynamic> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = [0u8; ELF64_HEADER];
    fill(&mut file, &mut head).ok().filter(|&full| full)?;
    program_headers(&head)?;
    read_dynamic(&object::ReadCache::new(file))
}

/// The dynamic section of a host shared library or executable in memory (a wheel member), its
/// search paths as written (`$ORIGIN/../lib`). `None`: not a 64-bit little-endian host ELF
/// file with a dynamic section (an AMDGPU code object, a static archive, a script).
pub fn dynamic_of(bytes: &[u8]) -> Option<Dynamic> {
    program_headers(bytes)?;
    read_dynamic(bytes)
}

fn read_dynamic<'a, R: object::ReadRef<'a>>(data: R) -> Option<Dynamic> {
    use object::read::elf::{Dyn as _, ElfFile64};
    let elf = ElfFile64::<Endianness, R>::parse(data).ok()?;
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let (entries, strtab) = sections.dynamic(endian, data).ok()??;
    let strings = sections.strings(endian, data, strtab).ok()?;
    let mut d = Dynamic::default();
    let dirs = |s: &str| -> Vec<String> { s.split(':').filter(|x| !x.is_empty()).map(str::to_string).collect() };
    for e in entries {
        let tag = e.d_tag(endian) as u32;
        let text = || {
            let offset = u32::try_from(Into::<u64>::into(e.d_val(endian))).ok()?;
            strings.get(offset).ok().map(|b| String::from_utf8_lossy(b).into_owned())
        };
        match tag {
            object::elf::DT_NEEDED => d.needed.extend(text()),
            object::elf::DT_SONAME => d.soname = text(),
            object::elf::DT_RPATH => d.rpath.extend(text().map(|t| dirs(&t)).unwrap_or_default()),
            object::elf::DT_RUNPATH => d.runpath.extend(text().map(|t| dirs(&t)).unwrap_or_default()),
            _ => {}
        }
    }
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::super::props::with_program_headers;
    use super::*;

    const LOAD: (u32, u32) = (1, 5);

    #[test]
    fn the_stack_a_library_asks_for() {
        let stack = |e_type: u16, headers: &[(u32, u32)]| {
            let bytes = with_program_headers(2, e_type, 62, 0, headers);
            let from_file = read_stack(&mut std::io::Cursor::new(&bytes)).unwrap();
            let streamed = stream_stack(&mut bytes.as_slice()).unwrap();
            assert_eq!(from_file, host_stack(&bytes));
            assert_eq!(streamed, host_stack(&bytes));
            host_stack(&bytes)
        };
        assert_eq!(stack(ET_DYN, &[LOAD, (PT_GNU_STACK, 6)]), Some(Stack::NonExecutable));
        assert_eq!(stack(ET_DYN, &[LOAD, (PT_GNU_STACK, 7)]), Some(Stack::Executable));
        assert_eq!(stack(ET_EXEC, &[LOAD, (PT_GNU_STACK, 7)]), Some(Stack::Executable));
        assert_eq!(stack(ET_DYN, &[LOAD]), Some(Stack::Missing));
        assert!(Stack::Missing.problem().unwrap().contains("no PT_GNU_STACK header"));
        assert!(Stack::Executable.problem().unwrap().contains("glibc 2.41+ refuses to load it"));
        assert_eq!(Stack::NonExecutable.problem(), None);
        // Not applicable: objects, core files, no program headers.
        assert_eq!(stack(1, &[]), None);
        assert_eq!(stack(4, &[LOAD]), None);
        assert_eq!(stack(ET_DYN, &[]), None);
    }

    #[test]
    fn an_executable_stack_request_is_cleared_in_place() {
        let cleared = |headers: &[(u32, u32)]| {
            let mut bytes = with_program_headers(2, ET_DYN, 62, 0, headers);
            let before = bytes.len();
            let r = clear_exec_stack(&mut bytes).map(|changed| (changed, host_stack(&bytes)));
            assert_eq!(bytes.len(), before);
            r
        };
        assert_eq!(cleared(&[LOAD, (PT_GNU_STACK, 7)]), Ok((true, Some(Stack::NonExecutable))));
        assert_eq!(cleared(&[LOAD, (PT_GNU_STACK, 6)]), Ok((false, Some(Stack::NonExecutable))));
        // No PT_GNU_STACK: an unused header becomes one.
        assert_eq!(cleared(&[LOAD, (PT_NULL, 0)]), Ok((true, Some(Stack::NonExecutable))));
        assert!(cleared(&[LOAD]).unwrap_err().contains("no PT_GNU_STACK header"));
        // Not a host library: untouched.
        let mut text = b"#!/bin/sh\n".to_vec();
        assert_eq!(clear_exec_stack(&mut text), Ok(false));
        assert_eq!(text, b"#!/bin/sh\n");
    }

    #[test]
    fn a_table_away_from_the_header_is_found_by_a_seek_or_read_past() {
        // patchelf may move the program headers to the end of a file.
        let bytes = with_program_headers(2, ET_DYN, 62, 5000, &[LOAD, (PT_GNU_STACK, 7)]);
        assert_eq!(host_stack(&bytes), Some(Stack::Executable));
        assert_eq!(read_stack(&mut std::io::Cursor::new(&bytes)).unwrap(), Some(Stack::Executable));
        assert_eq!(stream_stack(&mut bytes.as_slice()).unwrap(), Some(Stack::Executable));
        // Cut inside the table: not read, not a failure.
        let cut = &bytes[..64 + 5000 + 60];
        assert_eq!(host_stack(cut), None);
        assert_eq!(read_stack(&mut std::io::Cursor::new(cut)).unwrap(), None);
        assert_eq!(stream_stack(&mut &cut[..]).unwrap(), None);
    }

    #[test]
    fn not_a_host_elf64_file_is_not_applicable() {
        assert_eq!(host_stack(b"#!/bin/sh\necho hello\n"), None);
        assert_eq!(host_stack(b"\x7fELF"), None);
        assert_eq!(stream_stack(&mut &b"\x7fELF\x02"[..]).unwrap(), None);
        // 32-bit (ELFCLASS32) and big-endian files are not read.
        assert_eq!(host_stack(&with_program_headers(1, ET_DYN, 3, 0, &[(PT_GNU_STACK, 7)])), None);
        let mut big = with_program_headers(2, ET_DYN, 62, 0, &[(PT_GNU_STACK, 7)]);
        big[5] = 2;
        assert_eq!(host_stack(&big), None);
        // An AMDGPU code object is GPU code, not a host library.
        assert_eq!(host_stack(&with_program_headers(2, ET_DYN, EM_AMDGPU, 0, &[LOAD])), None);
        assert_eq!(host_stack(&super::super::props::elf(224, 0x133, 64, 2, &[])), None);
    }

    /// A section header table placed at the end of the address space (damage) is refused: an
    /// error, never an overflow.
    #[test]
    fn a_section_table_offset_near_the_end_of_memory_is_an_error() {
        let mut b = super::super::props::elf(62, 0, 0, 0, &[(".hip_fatbin", b"\0\0\0\0")]);
        let shstrndx = u64::from(u16::from_le_bytes([b[0x3e], b[0x3f]]));
        // The string table's header then starts 2, 0x1c (its offset field) or 0x20 bytes short.
        for short in [2, 0x1c, 0x20, 64] {
            let shoff = u64::MAX - shstrndx * 64 - short;
            b[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
            assert!(read(&mut std::io::Cursor::new(&b)).is_err(), "{shoff:#x}");
        }
    }

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
