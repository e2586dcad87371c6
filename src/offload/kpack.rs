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

use std::io::{Read, SeekFrom};

use serde::Serialize;

use super::source::{self, Source};
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

/// The most of an archive's table of contents that is read: a table lists a few short names
/// and numbers per kernel (rocm-kpack's torch archives' tables are a few hundred KB), and it is
/// the one part of an archive held whole.
pub const TOC_LIMIT: u64 = 64 << 20;

/// Reads an archive's table of contents (from its offset to the end, at most [`TOC_LIMIT`])
/// and the header of each kernel's code object, seeking to each: the kernels themselves are
/// never read, so an archive (or a wheel's member) of any size costs its table.
pub fn read(src: &mut dyn Source) -> Result<Archive, OffloadError> {
    let len = source::len_of(src).map_err(io)?;
    let toc_offset = read_header(src, len)?;
    let mut toc_bytes = Vec::new();
    src.seek(SeekFrom::Start(toc_offset)).map_err(io)?;
    (&mut *src).take(len - toc_offset).read_to_end(&mut toc_bytes).map_err(io)?;
    let toc = msgpack::decode(&toc_bytes).map_err(|e| bad(format!("table of contents at offset {toc_offset}: {e}")))?;
    let field = |k: &str| toc.get(k).ok_or_else(|| bad(format!("the table of contents has no `{k}`")));
    if field("gfx_arches")?.as_array().ok_or_else(|| bad("`gfx_arches` is not a list"))?.any(|a| a.as_str().is_none()) {
        return Err(bad("`gfx_arches` holds a non-string"));
    }
    let scheme = field("compression_scheme")?.as_str().ok_or_else(|| bad("`compression_scheme` is not a string"))?;
    let zstd = match scheme {
        "none" => false,
        "zstd-per-kernel" => true,
        other => return Err(bad(format!("compression scheme `{other}`, which this reader does not know"))),
    };
    let entries = toc_entries(&field("toc")?, len)?;
    let wanted: std::collections::BTreeSet<u64> = entries.iter().map(|e| e.ordinal).collect();
    let (frames, count) = if zstd {
        let (o, s) = (field("zstd_offset")?.as_u64(), field("zstd_size")?.as_u64());
        let (Some(o), Some(s)) = (o, s) else { return Err(bad("`zstd_offset`/`zstd_size` are not numbers")) };
        if o.checked_add(s).is_none_or(|end| end > len) {
            return Err(bad(format!("the zstd blob ({s} bytes at {o}) lies outside the file")));
        }
        zstd_frames(src, o, s, &wanted).map_err(|e| bad(format!("the zstd blob at {o}: {e}")))?
    } else {
        blob_frames(&field("blobs")?, &wanted, len)?
    };
    let heads = read_heads(src, &frames, zstd)?;
    let mut kernels = Vec::new();
    for e in entries {
        let at = format!("kernel `{}` for {}", e.binary, e.arch);
        let (Some(&(_, frame_size)), Some(head)) = (frames.get(&e.ordinal), heads.get(&e.ordinal)) else {
            return Err(bad(format!("{at}: ordinal {}, but the archive holds {count} kernels", e.ordinal)));
        };
        let head = head.as_ref().map_err(|m| bad(format!("{at}: {m}")))?;
        let target = elf::code_object_header(head).map_err(|m| bad(format!("{at}: {m}")))?;
        if super::processor(&target) != e.arch {
            return Err(bad(format!("{at}: its code object is for {target}, not {}", e.arch)));
        }
        kernels.push(Kernel { binary: e.binary.to_string(), target, size: e.size.unwrap_or(frame_size) });
    }
    let scheme: &'static str = if zstd { "zstd-per-kernel" } else { "none" };
    Ok(Archive { scheme, kernels })
}

/// The 16-byte header: magic, format version and the table of contents' offset, which must lie
/// in the file with at most [`TOC_LIMIT`] bytes after it.
fn read_header(src: &mut dyn Source, len: u64) -> Result<u64, OffloadError> {
    let mut head = [0u8; HEADER];
    if len < HEADER as u64 || at(src, 0, &mut head).is_err() || !is_kpack(&head) {
        return Err(bad("no 16-byte header starting with `KPAK`"));
    }
    let version = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(bad(format!("format version {version}, which this reader does not know")));
    }
    let toc_offset = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    if toc_offset < HEADER as u64 || toc_offset >= len {
        return Err(bad(format!("table of contents at offset {toc_offset}, outside the file ({len} bytes)")));
    }
    if len - toc_offset > TOC_LIMIT {
        return Err(bad(format!(
            "table of contents at offset {toc_offset} runs {} bytes to the end of the file, more than the {} MiB a table is read to",
            len - toc_offset,
            TOC_LIMIT >> 20
        )));
    }
    Ok(toc_offset)
}

/// A kernel as the table files it: under its binary's name and architecture, with its ordinal.
struct Entry<'t> {
    binary: &'t str,
    arch: &'t str,
    ordinal: u64,
    size: Option<u64>,
}

/// The table's `toc` map (binary -> architecture -> entry), one [`Entry`] per kernel.
fn toc_entries<'t>(toc: &msgpack::Value<'t>, len: u64) -> Result<Vec<Entry<'t>>, OffloadError> {
    let table = toc.as_map().ok_or_else(|| bad("`toc` is not a map"))?;
    let mut entries = Vec::new();
    // Each kernel keeps its binary's name: a table naming one long name for many kernels would
    // make the names cost more than the archive holds, which no archive written by rocm-kpack
    // does (each kernel has a code object of its own, far longer than its name).
    let mut named: u64 = 0;
    for (binary, per_arch) in table {
        let binary = binary.as_str().ok_or_else(|| bad("a `toc` key is not a string"))?;
        for (arch, entry) in per_arch.as_map().ok_or_else(|| bad(format!("`toc` entry `{binary}` is not a map")))? {
            let arch = arch.as_str().ok_or_else(|| bad(format!("`{binary}`: an architecture is not a string")))?;
            named = named.saturating_add((binary.len() + arch.len()) as u64);
            if named > len {
                return Err(bad(format!(
                    "kernel `{binary}` for {arch}: the table names its kernels over more bytes than the whole archive holds ({len}): it lists them many times over"
                )));
            }
            let ordinal = entry
                .get("ordinal")
                .and_then(|v| v.as_u64())
                .ok_or_else(|| bad(format!("kernel `{binary}` for {arch} has no ordinal")))?;
            let size = entry.get("original_size").and_then(|v| v.as_u64());
            entries.push(Entry { binary, arch, ordinal, size });
        }
    }
    Ok(entries)
}

/// An uncompressed archive's frames: its `blobs` list's (offset, size) at the ordinals
/// `wanted`, each inside the file, and the list's length.
fn blob_frames(
    blobs: &msgpack::Value<'_>,
    wanted: &std::collections::BTreeSet<u64>,
    len: u64,
) -> Result<Frames, OffloadError> {
    let blobs = blobs.as_array().ok_or_else(|| bad("`blobs` is not a list"))?;
    let mut count = 0;
    let mut frames = std::collections::BTreeMap::new();
    for (i, b) in (0..).zip(blobs) {
        count = i + 1;
        if !wanted.contains(&i) {
            continue;
        }
        let (o, s) = (b.get("offset").and_then(|v| v.as_u64()), b.get("size").and_then(|v| v.as_u64()));
        let (Some(o), Some(s)) = (o, s) else { return Err(bad(format!("blob {i} has no offset and size"))) };
        if o.checked_add(s).is_none_or(|end| end > len) {
            return Err(bad(format!("blob {i} ({s} bytes at {o}) lies outside the file")));
        }
        frames.insert(i, (o, s));
    }
    Ok((frames, count))
}

/// The first 64 bytes of each frame's code object (decompressed when `zstd`), by ordinal, read
/// in the order the frames lie (a wheel's member is inflated forward); a frame that cannot be
/// read is its kernel's error, not the archive's.
type Heads = std::collections::BTreeMap<u64, Result<Vec<u8>, String>>;

fn read_heads(
    src: &mut dyn Source,
    frames: &std::collections::BTreeMap<u64, (u64, u64)>,
    zstd: bool,
) -> Result<Heads, OffloadError> {
    let mut by_offset: Vec<(u64, u64, u64)> = frames.iter().map(|(&i, &(o, s))| (o, s, i)).collect();
    by_offset.sort_unstable();
    let mut heads = std::collections::BTreeMap::new();
    for (o, s, i) in by_offset {
        src.seek(SeekFrom::Start(o)).map_err(io)?;
        let frame = (&mut *src).take(s);
        let head = if zstd {
            let mut out = Vec::new();
            zstd::stream::read::Decoder::new(frame)
                .and_then(|d| d.take(64).read_to_end(&mut out))
                .map(|_| out)
                .map_err(|e| format!("cannot decompress its zstd frame: {e}"))
        } else {
            let mut out = Vec::new();
            frame.take(64).read_to_end(&mut out).map(|_| out).map_err(|e| format!("cannot read it: {e}"))
        };
        heads.insert(i, head);
    }
    Ok(heads)
}

fn io(e: std::io::Error) -> OffloadError {
    bad(format!("cannot read it: {e}"))
}

/// Reads `buf.len()` bytes at `offset`.
fn at(src: &mut dyn Source, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
    src.seek(SeekFrom::Start(offset))?;
    src.read_exact(buf)
}

/// The frames a `zstd-per-kernel` blob (`size` bytes at `offset`: a u32 count, then a u32 size
/// and a frame each) holds at the ordinals `wanted`, as (offset, size) by ordinal, and its
/// count. The blob is walked by its sizes, forward, keeping only those frames.
type Frames = (std::collections::BTreeMap<u64, (u64, u64)>, u64);

fn zstd_frames(
    src: &mut dyn Source,
    offset: u64,
    size: u64,
    wanted: &std::collections::BTreeSet<u64>,
) -> Result<Frames, String> {
    let end = offset + size;
    let mut word = [0u8; 4];
    let mut u32_at = |src: &mut dyn Source, pos: u64, what: &str| {
        if pos + 4 > end {
            return Err(what.to_string());
        }
        at(src, pos, &mut word).map_err(|e| format!("cannot read it: {e}"))?;
        Ok(u64::from(u32::from_le_bytes(word)))
    };
    let n = u32_at(src, offset, "shorter than its 4-byte count")?;
    let stop = wanted.range(..n).next_back().map_or(0, |l| l + 1);
    let mut frames = std::collections::BTreeMap::new();
    let mut pos = offset + 4;
    for i in 0..stop {
        let s = u32_at(src, pos, &format!("ends before frame {i} of {n}"))?;
        if pos + 4 + s > end {
            return Err(format!("frame {i} of {n} ({s} bytes) runs past its end"));
        }
        if wanted.contains(&i) {
            frames.insert(i, (pos + 4, s));
        }
        pos += 4 + s;
    }
    Ok((frames, n))
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
