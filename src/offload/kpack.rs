//! AMD's kpack form of device code (ROCm/rocm-kpack; TheRock's multi-arch wheels and tarballs):
//! the device code is moved out of a host library (its `.hip_fatbin` zeroed, the fat binary
//! wrapper's magic `HIPF` turned to `HIPK`) into `.kpack` archives, usually one per GPU
//! architecture in a device wheel or a `.kpack/` directory, and the library gets a marker
//! section saying where they are.
//!
//! - An archive (rocm-kpack python/rocm_kpack/kpack.py, `PackedKernelArchive`): a 16-byte header
//!   (`KPAK`, format version 1 as a little-endian u32, the table of contents' offset as a u64),
//!   the kernels, then the table of contents in MessagePack: `gfx_arches`, `compression_scheme`
//!   (`none`: `blobs` = `[{offset, size}]` by ordinal, absolute; `zstd-per-kernel`:
//!   `zstd_offset`/`zstd_size` of a blob that is a u32 count, then per kernel a u32 size and a
//!   zstd frame), and `toc` = `{binary: {arch: {type, ordinal, original_size}}}`, where the
//!   binary is `<path of the host file in its tree>#<code object index>` (runtime/src/loader.cpp
//!   looks kernels up as `kernel_name + "#" + index`).
//! - The marker (`.rocm_kpack_ref`, python/rocm_kpack/elf/kpack_transform.py
//!   `add_kpack_ref_section`): a MessagePack map `{kernel_name, kpack_search_paths}`; the paths
//!   are relative to the library's directory, and `@GFXARCH@` in one stands for each
//!   architecture (loader.cpp `kGfxArchPlaceholder`).
//! - The manifest marker (`.rocm_kpack_manifest`, pointing at a `.kpm` file) is described in
//!   rocm-kpack's docs/kpack-build-integration.md as the next form; this reader does not read it
//!   and says so.
//!
//! Each kernel's target is read from its code object's ELF header (only the first 64 bytes are
//! decompressed), and must agree with the architecture the table files it under.

use std::io::Read;

use serde::Serialize;

use super::{elf, msgpack, DeviceCode, OffloadError};

pub const MAGIC: &[u8; 4] = b"KPAK";
/// The section of a host file that says where its device code went.
pub const MARKER_SECTION: &str = ".rocm_kpack_ref";
/// The manifest form of that marker, which this reader does not read.
pub const MANIFEST_SECTION: &str = ".rocm_kpack_manifest";
/// Stands for an architecture in a marker's search path.
pub const ARCH_PLACEHOLDER: &str = "@GFXARCH@";

const FORMAT_VERSION: u32 = 1;
const HEADER: usize = 16;

/// What a `.rocm_kpack_ref` marker says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Marker {
    /// The name the archives' tables file this library's kernels under (with `#<index>`).
    pub kernel_name: String,
    /// Archives, relative to the library's directory (or absolute); `@GFXARCH@` stands for each
    /// architecture.
    pub search_paths: Vec<String>,
}

/// One kernel of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The table's key: `lib/libtorch_hip.so#0`.
    pub binary: String,
    /// The code object's target id (`gfx1010`, `gfx90a:xnack-`).
    pub target: String,
    /// Bytes of the code object (uncompressed, as the table or the blob says).
    pub size: u64,
}

/// A `.kpack` archive, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    pub scheme: &'static str,
    pub kernels: Vec<Kernel>,
}

impl Archive {
    /// The device code, one entry per kernel (entry: the table's key).
    pub fn code(&self) -> Vec<DeviceCode> {
        self.kernels
            .iter()
            .map(|k| DeviceCode {
                target: k.target.clone(),
                entry: Some(k.binary.clone()),
                container: super::Container::Kpack { scheme: self.scheme },
                size: k.size,
            })
            .collect()
    }

    /// The kernels a host file whose marker names `kernel_name` has in this archive.
    pub fn kernels_of<'a>(&'a self, kernel_name: &'a str) -> impl Iterator<Item = &'a Kernel> + 'a {
        self.kernels.iter().filter(move |k| is_kernel_of(&k.binary, kernel_name))
    }
}

/// Whether table key `binary` (`lib/x.so#0`) files a kernel of the host file whose marker names
/// `kernel_name` (`lib/x.so`).
pub fn is_kernel_of(binary: &str, kernel_name: &str) -> bool {
    binary == kernel_name
        || binary
            .strip_prefix(kernel_name)
            .and_then(|r| r.strip_prefix('#'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

pub fn is_kpack(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

fn bad(what: impl std::fmt::Display) -> OffloadError {
    OffloadError::Malformed(format!("kpack archive (rocm-kpack's KPAK format, version 1): {what}"))
}

/// Reads an archive's table and the header of each kernel's code object.
pub fn read(bytes: &[u8]) -> Result<Archive, OffloadError> {
    if bytes.len() < HEADER || !is_kpack(bytes) {
        return Err(bad("no 16-byte header starting with `KPAK`"));
    }
    let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(bad(format!("format version {version}, which this reader does not know")));
    }
    let toc_offset = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let toc_bytes =
        usize::try_from(toc_offset).ok().filter(|&o| o >= HEADER && o < bytes.len()).map(|o| &bytes[o..]).ok_or_else(
            || bad(format!("table of contents at offset {toc_offset}, outside the file ({} bytes)", bytes.len())),
        )?;
    let toc = msgpack::decode(toc_bytes).map_err(|e| bad(format!("table of contents at offset {toc_offset}: {e}")))?;
    let field = |k: &str| toc.get(k).ok_or_else(|| bad(format!("the table of contents has no `{k}`")));
    if field("gfx_arches")?.as_array().ok_or_else(|| bad("`gfx_arches` is not a list"))?.any(|a| a.as_str().is_none()) {
        return Err(bad("`gfx_arches` holds a non-string"));
    }
    let scheme = field("compression_scheme")?.as_str().ok_or_else(|| bad("`compression_scheme` is not a string"))?;
    let frames: Vec<&[u8]> = match scheme {
        "none" => field("blobs")?
            .as_array()
            .ok_or_else(|| bad("`blobs` is not a list"))?
            .enumerate()
            .map(|(i, b)| {
                let (o, s) = (b.get("offset").and_then(|v| v.as_u64()), b.get("size").and_then(|v| v.as_u64()));
                let (Some(o), Some(s)) = (o, s) else { return Err(bad(format!("blob {i} has no offset and size"))) };
                slice(bytes, o, s).ok_or_else(|| bad(format!("blob {i} ({s} bytes at {o}) lies outside the file")))
            })
            .collect::<Result<_, _>>()?,
        "zstd-per-kernel" => {
            let (o, s) = (field("zstd_offset")?.as_u64(), field("zstd_size")?.as_u64());
            let (Some(o), Some(s)) = (o, s) else { return Err(bad("`zstd_offset`/`zstd_size` are not numbers")) };
            let blob = slice(bytes, o, s)
                .ok_or_else(|| bad(format!("the zstd blob ({s} bytes at {o}) lies outside the file")))?;
            zstd_frames(blob).map_err(|e| bad(format!("the zstd blob at {o}: {e}")))?
        }
        other => return Err(bad(format!("compression scheme `{other}`, which this reader does not know"))),
    };
    let scheme: &'static str = if scheme == "none" { "none" } else { "zstd-per-kernel" };
    let table = field("toc")?.as_map().ok_or_else(|| bad("`toc` is not a map"))?;
    let mut kernels = Vec::new();
    // Each kernel keeps its binary's name: a table naming one long name for many kernels would
    // make the names cost more than the archive holds, which no archive written by rocm-kpack
    // does (each kernel has a code object of its own, far longer than its name).
    let mut named: usize = 0;
    for (binary, per_arch) in table {
        let binary = binary.as_str().ok_or_else(|| bad("a `toc` key is not a string"))?;
        for (arch, entry) in per_arch.as_map().ok_or_else(|| bad(format!("`toc` entry `{binary}` is not a map")))? {
            let arch = arch.as_str().ok_or_else(|| bad(format!("`{binary}`: an architecture is not a string")))?;
            let at = format!("kernel `{binary}` for {arch}");
            named = named.saturating_add(binary.len() + arch.len());
            if named > bytes.len() {
                return Err(bad(format!(
                    "{at}: the table names its kernels over more bytes than the whole archive holds ({}): it lists them many times over",
                    bytes.len()
                )));
            }
            let ordinal =
                entry.get("ordinal").and_then(|v| v.as_u64()).ok_or_else(|| bad(format!("{at} has no ordinal")))?;
            let frame = usize::try_from(ordinal).ok().and_then(|o| frames.get(o)).ok_or_else(|| {
                bad(format!("{at}: ordinal {ordinal}, but the archive holds {} kernels", frames.len()))
            })?;
            let head =
                if scheme == "none" { Ok(frame.get(..64).unwrap_or(frame).to_vec()) } else { zstd_head(frame, 64) }
                    .map_err(|e| bad(format!("{at}: {e}")))?;
            let target = elf::code_object_header(&head).map_err(|e| bad(format!("{at}: {e}")))?;
            if super::processor(&target) != arch {
                return Err(bad(format!("{at}: its code object is for {target}, not {arch}")));
            }
            let size = entry.get("original_size").and_then(|v| v.as_u64()).unwrap_or(frame.len() as u64);
            kernels.push(Kernel { binary: binary.to_string(), target, size });
        }
    }
    Ok(Archive { scheme, kernels })
}

fn slice(bytes: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    let o = usize::try_from(offset).ok()?;
    let end = o.checked_add(usize::try_from(size).ok()?)?;
    bytes.get(o..end)
}

/// The frames of a `zstd-per-kernel` blob: a u32 count, then a u32 size and a frame each.
fn zstd_frames(blob: &[u8]) -> Result<Vec<&[u8]>, String> {
    let u32_at = |at: usize| blob.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize);
    let n = u32_at(0).ok_or("shorter than its 4-byte count")?;
    let mut at = 4;
    let mut out = Vec::with_capacity(n.min(1 << 16));
    for i in 0..n {
        let size = u32_at(at).ok_or(format!("ends before frame {i} of {n}"))?;
        let frame =
            blob.get(at + 4..at + 4 + size).ok_or(format!("frame {i} of {n} ({size} bytes) runs past its end"))?;
        out.push(frame);
        at += 4 + size;
    }
    Ok(out)
}

/// The first `n` bytes of a zstd frame's content.
fn zstd_head(frame: &[u8], n: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(frame)
        .and_then(|d| d.take(n).read_to_end(&mut out))
        .map_err(|e| format!("cannot decompress its zstd frame: {e}"))?;
    Ok(out)
}

/// Reads a `.rocm_kpack_ref` section.
pub fn read_marker(data: &[u8]) -> Result<Marker, OffloadError> {
    let bad = |what: String| {
        OffloadError::Malformed(format!(
            "section {MARKER_SECTION} (rocm-kpack's marker: a MessagePack map of kernel_name and kpack_search_paths): {what}"
        ))
    };
    let v = msgpack::decode(data).map_err(bad)?;
    let kernel_name =
        v.get("kernel_name").and_then(|k| k.as_str()).ok_or_else(|| bad("no `kernel_name` string".into()))?.to_string();
    let search_paths = v
        .get("kpack_search_paths")
        .and_then(|p| p.as_array())
        .ok_or_else(|| bad("no `kpack_search_paths` list".into()))?
        .map(|p| p.as_str().map(str::to_string).ok_or_else(|| bad("a search path is not a string".into())))
        .collect::<Result<_, _>>()?;
    Ok(Marker { kernel_name, search_paths })
}

/// `a/b/../c/./d` -> `a/c/d` (lexically; a `..` past the start is kept).
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." if !parts.is_empty() || !path.starts_with('/') => {}
            ".." if parts.last().is_some_and(|l| *l != ".." && !l.is_empty()) => {
                parts.pop();
            }
            _ => parts.push(p),
        }
    }
    let joined = parts.join("/");
    if path.starts_with('/') && !joined.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

/// Whether archive path `archive` is one that search path `pattern` (already joined to the
/// library's directory and normalised) names; `@GFXARCH@` matches one architecture name.
pub fn names(pattern: &str, archive: &str) -> bool {
    match pattern.split_once(ARCH_PLACEHOLDER) {
        None => pattern == archive,
        Some((before, after)) => archive
            .strip_prefix(before)
            .and_then(|r| r.strip_suffix(after))
            .is_some_and(|arch| arch.starts_with("gfx") && !arch.contains('/')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::msgpack::{decode, Value};

    #[test]
    fn msgpack_values_and_damage() {
        // {"a": [1, -1, 300, "x"], "b": true}
        let v = decode(b"\x82\xa1a\x94\x01\xff\xcd\x01\x2c\xa1x\xa1b\xc3").unwrap();
        let a: Vec<Value<'_>> = v.get("a").unwrap().as_array().unwrap().collect();
        assert_eq!(a, [Value::Int(1), Value::Int(-1), Value::Int(300), Value::Str("x")]);
        assert_eq!(v.get("b"), Some(Value::Bool(true)));
        assert!(decode(b"\x82\xa1a").unwrap_err().contains("ends early"));
        assert!(decode(b"\xdd\xff\xff\xff\xff").unwrap_err().contains("longer than the data left"));
    }

    #[test]
    fn search_paths_resolve_lexically_and_with_the_arch_placeholder() {
        assert_eq!(normalize("torch/lib/../.kpack/t.kpack"), "torch/.kpack/t.kpack");
        assert_eq!(normalize("/a/./b/../c"), "/a/c");
        assert_eq!(normalize("../x"), "../x");
        assert!(names("torch/.kpack/torch_@GFXARCH@.kpack", "torch/.kpack/torch_gfx1010.kpack"));
        assert!(!names("torch/.kpack/torch_@GFXARCH@.kpack", "torch/.kpack/sub/torch_gfx1010.kpack"));
        assert!(names("a/b.kpack", "a/b.kpack") && !names("a/b.kpack", "a/c.kpack"));
    }

    #[test]
    fn a_marker_is_read_or_named_as_damaged() {
        // {"kernel_name": "lib/x.so", "kpack_search_paths": ["../.kpack/x.kpack"]}
        let mut m = vec![0x82, 0xab];
        m.extend(b"kernel_name");
        m.push(0xa8);
        m.extend(b"lib/x.so");
        m.push(0xb2);
        m.extend(b"kpack_search_paths");
        m.extend([0x91, 0xb1]);
        m.extend(b"../.kpack/x.kpack");
        let r = read_marker(&m).unwrap();
        assert_eq!(
            (r.kernel_name.as_str(), r.search_paths.as_slice()),
            ("lib/x.so", &["../.kpack/x.kpack".to_string()][..])
        );
        let e = read_marker(&m[..10]).unwrap_err().to_string();
        assert!(e.contains(".rocm_kpack_ref") && e.contains("ends early"), "{e}");
    }
}
