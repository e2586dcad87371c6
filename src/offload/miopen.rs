//! The kernel sources a libMIOpen carries. MIOpen compiles its kernels on the user's machine,
//! from sources built into the library: its build (`add_kernels` in src/CMakeLists.txt and the
//! `addkernels` tool, MIOpen rocm-6.2.2) turns each kernel file into two exported data symbols,
//!
//! ```c
//! const size_t MIOPEN_KERNEL_<STEM>_SIZE = <bytes>;
//! const char MIOPEN_KERNEL_<STEM>[] = { 0x.., ..., 0x00, };   // the text, then a NUL
//! ```
//!
//! `<STEM>` being the file's name without its extension, in upper case, and the include files
//! (`.hpp`, `.h`, `.inc`, handed to the kernel compiler by base name) marked `<STEM>_INCLUDE`.
//! `.cl` and `.s` kernels are stored with their includes inlined, HIP `.cpp` kernels as written.
//! The file names themselves (`MIOpenBatchNormFwdTrainSpatial.cl`) are string literals of the
//! library's kernel map; they are found among the strings of `.rodata` whose stem gives the
//! symbol. The MIOpen version is the literal `, MIOpen version 3.5.1.` of its logging.
//!
//! Everything is read through the file's own tables and checked against the file: a symbol
//! must lie inside a section with data, its `_SIZE` must be 8 bytes and agree with the text's
//! length (plus the NUL), no two texts overlap, so nothing is read or allocated beyond the
//! file's length, and a table that says otherwise is refused naming the symbol.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSection, ObjectSymbol, SectionKind};
use serde::Serialize;

use super::OffloadError;

/// Prefix of every embedded kernel symbol.
pub const SYMBOL_PREFIX: &str = "MIOPEN_KERNEL_";
const SIZE_SUFFIX: &str = "_SIZE";
const INCLUDE_SUFFIX: &str = "_INCLUDE";
/// Extensions of the files MIOpen embeds as kernels (`MIOPEN_KERNELS`) and as includes
/// (`MIOPEN_KERNEL_INCLUDES`), src/CMakeLists.txt at rocm-6.2.2.
const KERNEL_EXTS: [&str; 3] = ["cl", "cpp", "s"];
const INCLUDE_EXTS: [&str; 3] = ["hpp", "h", "inc"];
/// `.rodata` larger than this is not searched for names or the version (a real one is a few MB).
const MAX_RODATA: u64 = 512 << 20;
/// The name of the file, in a kernel tree, that says where the tree came from.
pub const MANIFEST: &str = "miopen-embedded.json";
/// Where the kernels and includes go in a kernel tree: as in MIOpen's source tree.
pub const KERNEL_DIR: &str = "src/kernels";
/// Build-parameter literals (`-DNAME...`) of the host code kept, at most.
const MAX_DEFINES: usize = 4096;

/// One embedded file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EmbeddedFile {
    /// Its file name (`MIOpenBatchNormFwdTrainSpatial.cl`), or `None` when the library's
    /// strings do not give it.
    pub name: Option<String>,
    /// The data symbol (`MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL`).
    pub symbol: String,
    /// An include file (`..._INCLUDE`), not a kernel.
    pub include: bool,
    /// The text, as stored (without the NUL).
    #[serde(skip)]
    pub text: Vec<u8>,
    pub bytes: usize,
}

/// What a libMIOpen carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Embedded {
    /// `3.5.1`, from the library's `, MIOpen version ...` literal.
    pub miopen_version: Option<String>,
    /// The HIP version it was built with (`7.2.53211`), from `, HIP version ...`.
    pub hip_version: Option<String>,
    pub files: Vec<EmbeddedFile>,
    /// The host code's build-parameter literals (`-DCK_AMD_GPU_GFX1030`, ` -DCK_AMD_GPU_GFX`):
    /// what of the defines MIOpen passes can be read from the library.
    pub host_defines: Vec<String>,
    /// Whole strings of the host code that name a build parameter (`MIO_BN_GFX103X`, as a
    /// solver passes `{"MIO_BN_GFX103X", ...}`).
    pub host_names: Vec<String>,
}

impl Embedded {
    /// Files whose name was not recovered.
    pub fn unnamed(&self) -> impl Iterator<Item = &EmbeddedFile> {
        self.files.iter().filter(|f| f.name.is_none())
    }
}

/// Whether `path` looks like a libMIOpen by its name (`libMIOpen.so`, `libMIOpen.so.1.0`).
pub fn is_miopen_name(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n == "libMIOpen.so" || n.starts_with("libMIOpen.so."))
}

/// The kernel sources embedded in the library at `path`. An error when it is not a 64-bit ELF
/// file, carries no `MIOPEN_KERNEL_*` symbol, or its tables disagree with each other or with
/// the file (each named).
pub fn read_embedded(path: &Path) -> Result<Embedded, OffloadError> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|source| OffloadError::Io { path: path.to_path_buf(), source })?;
    if !meta.is_file() {
        return Err(OffloadError::File { path: shown, message: "not a regular file".into() });
    }
    let file = std::fs::File::open(path).map_err(|source| OffloadError::Io { path: path.to_path_buf(), source })?;
    read_from(file, meta.len()).map_err(|e| e.in_file(&shown))
}

/// [`read_embedded`] of bytes in memory.
pub fn read_embedded_bytes(bytes: &[u8]) -> Result<Embedded, OffloadError> {
    read_from(std::io::Cursor::new(bytes), bytes.len() as u64)
}

fn malformed(message: impl Into<String>) -> OffloadError {
    OffloadError::Malformed(message.into())
}

struct Sym {
    address: u64,
    size: u64,
    section: object::SectionIndex,
}

fn read_from<R: object::ReadCacheOps>(file: R, len: u64) -> Result<Embedded, OffloadError> {
    let cache = object::ReadCache::new(file);
    let elf = ElfFile64::<Endianness, _>::parse(&cache)
        .map_err(|e| malformed(format!("not a 64-bit ELF library MIOpen's kernels could be read from: {e}")))?;
    check_sections_inside(&elf, len)?;
    let syms = kernel_symbols(&elf)?;
    let mut files = embedded_files(&elf, &syms, len)?;
    let rodata = elf
        .section_by_name(".rodata")
        .filter(|s| s.kind() != SectionKind::UninitializedData && s.size() <= MAX_RODATA)
        .and_then(|s| s.data().ok())
        .unwrap_or(&[]);
    let strings = Strings::of(rodata);
    name_files(&mut files, &strings);
    Ok(Embedded {
        miopen_version: strings.version(", MIOpen version "),
        hip_version: strings.version(", HIP version "),
        files,
        host_defines: strings.defines(),
        host_names: strings.names(),
    })
}

type Elf<'data, Rd> = ElfFile64<'data, Endianness, Rd>;

/// Every section with data lies inside the file (checked before any is read).
fn check_sections_inside<'data, Rd: object::ReadRef<'data>>(
    elf: &Elf<'data, Rd>,
    len: u64,
) -> Result<(), OffloadError> {
    for s in elf.sections() {
        if let Some((offset, size)) = s.file_range() {
            if offset.checked_add(size).is_none_or(|end| end > len) {
                return Err(malformed(format!(
                    "section {} claims bytes {offset}..{} of a file of {len}: truncated or damaged",
                    s.name().unwrap_or("?"),
                    offset.saturating_add(size)
                )));
            }
        }
    }
    Ok(())
}

/// The `MIOPEN_KERNEL_*` symbols of the dynamic symbol table, each defined once, in a section.
fn kernel_symbols<'data, Rd: object::ReadRef<'data>>(
    elf: &Elf<'data, Rd>,
) -> Result<BTreeMap<String, Sym>, OffloadError> {
    let mut syms: BTreeMap<String, Sym> = BTreeMap::new();
    for s in elf.dynamic_symbols() {
        let Ok(name) = s.name() else { continue };
        if !name.starts_with(SYMBOL_PREFIX) {
            continue;
        }
        let Some(section) = s.section_index() else {
            return Err(malformed(format!("symbol {name} is not defined in a section")));
        };
        if syms.insert(name.to_string(), Sym { address: s.address(), size: s.size(), section }).is_some() {
            return Err(malformed(format!("symbol {name} is defined twice")));
        }
    }
    if syms.is_empty() {
        return Err(malformed(format!(
            "no {SYMBOL_PREFIX}* symbol in its dynamic symbol table: not a libMIOpen that embeds its kernels"
        )));
    }
    Ok(syms)
}

/// The bytes of a symbol, checked to lie inside its section's data.
fn symbol_bytes<'data, Rd: object::ReadRef<'data>>(
    elf: &Elf<'data, Rd>,
    name: &str,
    sym: &Sym,
) -> Result<&'data [u8], OffloadError> {
    let section = elf
        .section_by_index(sym.section)
        .map_err(|e| malformed(format!("symbol {name}: its section {}: {e}", sym.section.0)))?;
    let (offset, size) = section
        .file_range()
        .ok_or_else(|| malformed(format!("symbol {name} lies in a section without data in the file")))?;
    let start = sym.address.checked_sub(section.address());
    match start.and_then(|s| Some((s, s.checked_add(sym.size)?))) {
        Some((s, e)) if e <= size => section
            .data_range(section.address() + s, sym.size)
            .ok()
            .flatten()
            .filter(|d| d.len() as u64 == sym.size)
            .ok_or_else(|| malformed(format!("symbol {name}: its {} bytes cannot be read", sym.size))),
        _ => Err(malformed(format!(
            "symbol {name} ({} bytes at {:#x}) lies outside its section {} ({size} bytes at file offset {offset}): a lying symbol table",
            sym.size,
            sym.address,
            section.name().unwrap_or("?")
        ))),
    }
}

/// Each kernel symbol's text (not yet named), checked against its `_SIZE` symbol, the NUL after
/// it, the file's length and the other symbols (no two overlap).
fn embedded_files<'data, Rd: object::ReadRef<'data>>(
    elf: &Elf<'data, Rd>,
    syms: &BTreeMap<String, Sym>,
    len: u64,
) -> Result<Vec<EmbeddedFile>, OffloadError> {
    let big_endian = elf.endian() == Endianness::Big;
    let mut files = Vec::new();
    let mut claimed: Vec<(u64, u64, String)> = Vec::new();
    let mut total: u64 = 0;
    for (name, sym) in syms {
        if name.ends_with(SIZE_SUFFIX) && syms.contains_key(name.trim_end_matches(SIZE_SUFFIX)) {
            continue;
        }
        let size_name = format!("{name}{SIZE_SUFFIX}");
        let Some(size_sym) = syms.get(&size_name) else {
            return Err(malformed(format!("symbol {name} has no {size_name} beside it")));
        };
        if size_sym.size != 8 {
            return Err(malformed(format!("symbol {size_name} is {} bytes, not the 8 of a size_t", size_sym.size)));
        }
        let raw: [u8; 8] = symbol_bytes(elf, &size_name, size_sym)?.try_into().map_err(|_| malformed("8 bytes"))?;
        let stated = if big_endian { u64::from_be_bytes(raw) } else { u64::from_le_bytes(raw) };
        if stated.checked_add(1) != Some(sym.size) {
            return Err(malformed(format!(
                "symbol {size_name} says {stated} bytes, but {name} is {} (MIOpen stores the text and a NUL): a lying symbol table",
                sym.size
            )));
        }
        total = total.saturating_add(sym.size);
        if total > len {
            return Err(malformed(format!(
                "the {SYMBOL_PREFIX}* symbols claim more bytes than the file holds ({len})"
            )));
        }
        claimed.push((sym.address, sym.size, name.clone()));
        let data = symbol_bytes(elf, name, sym)?;
        let (text, nul) = data.split_at(data.len() - 1);
        if nul != [0] {
            return Err(malformed(format!("symbol {name} does not end in the NUL MIOpen stores after the text")));
        }
        let key = &name[SYMBOL_PREFIX.len()..];
        files.push(EmbeddedFile {
            name: None,
            symbol: name.clone(),
            include: key.ends_with(INCLUDE_SUFFIX),
            bytes: text.len(),
            text: text.to_vec(),
        });
    }
    claimed.sort();
    for w in claimed.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(malformed(format!("symbols {} and {} overlap: a lying symbol table", w[0].2, w[1].2)));
        }
    }
    Ok(files)
}

/// The NUL-terminated strings of a section.
struct Strings<'a>(Vec<&'a [u8]>);

impl<'a> Strings<'a> {
    fn of(data: &'a [u8]) -> Strings<'a> {
        Strings(data.split(|b| *b == 0).filter(|s| !s.is_empty()).collect())
    }

    /// `3.5.1` from `, MIOpen version 3.5.1.` (the tweak, empty in release builds, dropped).
    fn version(&self, lead: &str) -> Option<String> {
        self.0.iter().find_map(|s| {
            let rest = s.strip_prefix(lead.as_bytes())?;
            let v: String =
                String::from_utf8_lossy(rest).chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '.').collect();
            let v = v.trim_end_matches('.').to_string();
            v.split('.').next().is_some_and(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_digit())).then_some(v)
        })
    }

    fn names(&self) -> Vec<String> {
        let param = |s: &&&[u8]| {
            (s.starts_with(b"MIO_") || s.starts_with(b"MIOPEN_") || s.starts_with(b"CK_"))
                && s.len() <= 120
                && s.iter().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
        };
        let set: BTreeSet<String> =
            self.0.iter().filter(param).map(|s| String::from_utf8_lossy(s).into_owned()).take(MAX_DEFINES).collect();
        set.into_iter().collect()
    }

    fn defines(&self) -> Vec<String> {
        let mut out = BTreeSet::new();
        for s in &self.0 {
            let text = String::from_utf8_lossy(s);
            for (i, _) in text.match_indices("-D") {
                let name: String =
                    text[i + 2..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').take(120).collect();
                if name.starts_with(|c: char| c.is_ascii_uppercase()) && out.len() < MAX_DEFINES {
                    out.insert(format!("-D{name}"));
                }
            }
        }
        out.into_iter().collect()
    }
}

/// The symbol key of a file name: its stem (to the first dot) in upper case, other characters
/// than letters and digits as `_` (CMake's `string(TOUPPER)` and `MAKE_C_IDENTIFIER`).
pub fn symbol_key(file_name: &str) -> String {
    let stem = file_name.split('.').next().unwrap_or("");
    stem.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

fn name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_+-.".contains(&b)
}

/// Names each file from the strings that end in one of its kind's extensions and whose stem
/// gives its symbol; then an include without one from the `#include "..."` lines of the
/// texts. Among several candidates (a string and a tail of another), the first sorted.
fn name_files(files: &mut [EmbeddedFile], strings: &Strings<'_>) {
    // (stem key, include?) -> file
    let wanted: HashMap<(String, bool), usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let key = &f.symbol[SYMBOL_PREFIX.len()..];
            let stem = if f.include { key.strip_suffix(INCLUDE_SUFFIX).unwrap_or(key) } else { key };
            ((stem.to_string(), f.include), i)
        })
        .collect();
    let mut found: Vec<BTreeSet<String>> = vec![BTreeSet::new(); files.len()];
    let mut offer = |name: &str| {
        let Some((stem, ext)) = name.split_once('.') else { return };
        if stem.is_empty() || ext.contains('.') {
            return;
        }
        let include = if INCLUDE_EXTS.contains(&ext) {
            true
        } else if KERNEL_EXTS.contains(&ext) {
            false
        } else {
            return;
        };
        if let Some(&i) = wanted.get(&(symbol_key(name), include)) {
            found[i].insert(name.to_string());
        }
    };
    for s in &strings.0 {
        // The file-name characters at the end of a string; a name merged into a longer string
        // (`type.hpp` as the tail of `data_type.hpp`) is one of its suffixes.
        let start = s.iter().rposition(|b| !name_char(*b)).map_or(0, |p| p + 1);
        let tail = &s[start..];
        if tail.len() > 255 || !tail.contains(&b'.') {
            continue;
        }
        for i in 0..tail.len() {
            offer(&String::from_utf8_lossy(&tail[i..]));
        }
    }
    // Includes the strings did not name: as the texts include them.
    let included: BTreeSet<String> = files.iter().flat_map(|f| included_names(&f.text)).collect();
    for name in &included {
        let ext = name.split_once('.').map(|x| x.1).unwrap_or("");
        if let Some(&i) = wanted.get(&(symbol_key(name), true)).filter(|_| INCLUDE_EXTS.contains(&ext)) {
            if found[i].is_empty() {
                found[i].insert(name.clone());
            }
        }
    }
    let mut taken = BTreeSet::new();
    for (f, names) in files.iter_mut().zip(found) {
        if let Some(n) = names.into_iter().find(|n| !taken.contains(n)) {
            taken.insert(n.clone());
            f.name = Some(n);
        }
    }
}

/// The base names a text includes (`#include "x.hpp"`, `#include <x.hpp>`, `.include "x.inc"`).
fn included_names(text: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim_start();
        let rest = l
            .strip_prefix('#')
            .map(|r| r.trim_start())
            .and_then(|r| r.strip_prefix("include"))
            .or_else(|| l.strip_prefix(".include"));
        let Some(rest) = rest.map(str::trim) else { continue };
        let inner = rest
            .strip_prefix('"')
            .and_then(|r| r.split('"').next())
            .or_else(|| rest.strip_prefix('<').and_then(|r| r.split('>').next()));
        if let Some(name) = inner.and_then(|p| p.rsplit('/').next()) {
            if !name.is_empty() && name.bytes().all(name_char) && name != "." && name != ".." {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// The manifest of a kernel tree: where it came from and what is in it.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest<'a> {
    pub library: String,
    #[serde(flatten)]
    pub embedded: &'a Embedded,
}

/// Lays the files out as a kernel tree under `dir` (made anew): each named file in
/// [`KERNEL_DIR`], as MIOpen hands them to its compiler (one flat folder), the unnamed ones in
/// `unnamed/<symbol>`, and [`MANIFEST`] at the top with the version, the host's defines and
/// every file's symbol.
pub fn write_tree(embedded: &Embedded, library: &Path, dir: &Path) -> std::io::Result<()> {
    crate::fsutil::remove_dir_all_if_exists(dir)?;
    let kernels = dir.join(KERNEL_DIR);
    std::fs::create_dir_all(&kernels)?;
    for f in &embedded.files {
        // Names are checked file-name characters, never a path (`name_char`, no `/`).
        let path = match &f.name {
            Some(n) if n != "." && n != ".." => kernels.join(n),
            _ => {
                std::fs::create_dir_all(dir.join("unnamed"))?;
                dir.join("unnamed").join(&f.symbol)
            }
        };
        std::fs::write(&path, &f.text)?;
    }
    let manifest = Manifest { library: library.display().to_string(), embedded };
    let json = serde_json::to_string_pretty(&manifest).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(MANIFEST), json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbol_keys_follow_cmake() {
        assert_eq!(symbol_key("MIOpenBatchNormFwdTrainSpatial.cl"), "MIOPENBATCHNORMFWDTRAINSPATIAL");
        assert_eq!(symbol_key("static_kernel_amd_buffer_addressing.hpp"), "STATIC_KERNEL_AMD_BUFFER_ADDRESSING");
        assert_eq!(symbol_key("conv1x1u-bias.s"), "CONV1X1U_BIAS");
    }

    #[test]
    fn names_come_from_whole_strings_and_tails_of_others() {
        let text = |s: &str| s.as_bytes().to_vec();
        let file = |symbol: &str, body: &str| EmbeddedFile {
            name: None,
            symbol: symbol.into(),
            include: symbol.ends_with(INCLUDE_SUFFIX),
            bytes: body.len(),
            text: text(body),
        };
        let mut files = vec![
            file("MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL", "__kernel void f() {}"),
            file("MIOPEN_KERNEL_TYPE_INCLUDE", ""),
            file("MIOPEN_KERNEL_GRIDWISE_X", "#include \"utility.hpp\""),
            file("MIOPEN_KERNEL_GRIDWISE_X_INCLUDE", ""),
            file("MIOPEN_KERNEL_UTILITY_INCLUDE", ""),
            file("MIOPEN_KERNEL_NOWHERE", ""),
        ];
        // `type.hpp` only as the tail of `data_type.hpp` (string merging); `utility.hpp` only
        // in an #include line.
        let rodata = b"x\0MIOpenBatchNormFwdTrainSpatial.cl\0data_type.hpp\0gridwise_x.hpp\0gridwise_x.cpp\0some text: gridwise_x.cl?\0";
        name_files(&mut files, &Strings::of(rodata));
        let names: Vec<Option<&str>> = files.iter().map(|f| f.name.as_deref()).collect();
        assert_eq!(
            names,
            [
                Some("MIOpenBatchNormFwdTrainSpatial.cl"),
                Some("type.hpp"),
                Some("gridwise_x.cpp"),
                Some("gridwise_x.hpp"),
                Some("utility.hpp"),
                None
            ]
        );
    }

    #[test]
    fn the_version_and_the_defines_are_read_from_strings() {
        let s = Strings::of(
            b"\0, HIP version 7.2.53211\0, MIOpen version 3.5.1.\0 -DCK_AMD_GPU_GFX\0-DMIO_BN_GFX103X=\0-Dlower\0",
        );
        assert_eq!(s.version(", MIOpen version ").as_deref(), Some("3.5.1"));
        assert_eq!(s.version(", HIP version ").as_deref(), Some("7.2.53211"));
        assert_eq!(s.defines(), ["-DCK_AMD_GPU_GFX", "-DMIO_BN_GFX103X"]);
        assert_eq!(Strings::of(b"MIO_BN_GFX103X\0MIO_BN_gfx\0CK_X\0OTHER\0").names(), ["CK_X", "MIO_BN_GFX103X"]);
        assert_eq!(Strings::of(b", MIOpen version .\0").version(", MIOpen version "), None);
    }

    #[test]
    fn not_an_elf_library_is_an_error_not_a_panic() {
        for bytes in
            [&b""[..], b"\x7fELF", b"#!/bin/sh\n", &[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
        {
            assert!(read_embedded_bytes(bytes).is_err());
        }
    }
}
