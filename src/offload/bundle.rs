//! Clang offload bundles, read from bytes: the plain form (`__CLANG_OFFLOAD_BUNDLE__`, what
//! hipcc puts in a host object's `.hip_fatbin` section) and the compressed form (`CCOB`, which
//! clang writes with `--offload-compress`). Layouts, from LLVM's
//! `clang/lib/Driver/OffloadBundler.cpp` (all integers little-endian):
//!
//! - plain: the 24-byte magic, the number of entries (u64), then per entry its offset from the
//!   bundle's start (u64), its size (u64), the length of its id (u64) and the id; the entries'
//!   bytes follow. An id is `<kind>-<arch>-<vendor>-<os>-<env>[-<target id>]`, e.g.
//!   `hipv4-amdgcn-amd-amdhsa--gfx1010:xnack-`; `host-x86_64-unknown-linux` is the (empty)
//!   host entry.
//! - compressed: `CCOB`, version (u16), method (u16: 0 zlib, 1 zstd), then by version:
//!   1: uncompressed size (u32), hash (u64); 2: total size (u32), uncompressed size (u32),
//!   hash (u64); 3: total size (u64), uncompressed size (u64), hash (u64). The compressed data
//!   follows (to the total size; for version 1, to the next `CCOB` or the end) and inflates to
//!   a plain bundle. The hash (the low half of an MD5) is not checked here: the decoders' own
//!   checks and the size check catch damage.

use std::io::Read;

use super::{Container, DeviceCode, OffloadError};

pub const MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
pub const COMPRESSED_MAGIC: &[u8] = b"CCOB";

/// Bundles larger than this (uncompressed) are refused rather than inflated: a corrupt or hostile
/// header cannot make the reader allocate without bound. Real bundles of one translation unit
/// are megabytes; a whole torch library's device code is a few GiB spread over many bundles.
const MAX_UNCOMPRESSED: u64 = 4 << 30;

/// Whether `bytes` starts like a bundle (plain or compressed).
pub fn is_bundle(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC) || bytes.starts_with(COMPRESSED_MAGIC)
}

/// Every device-code entry of the bundles laid one after another in `bytes` (a `.hip_fatbin`
/// section holds one bundle per translation unit, each aligned; a `.hipfb` file holds one).
/// Host entries are left out. `bytes` must start with a bundle.
pub fn read_all(bytes: &[u8]) -> Result<Vec<DeviceCode>, OffloadError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let used = if rest.starts_with(MAGIC) {
            read_plain(rest, Container::Bundle, &mut out)?
        } else if rest.starts_with(COMPRESSED_MAGIC) {
            read_compressed(rest, &mut out)?
        } else if at == 0 {
            return Err(OffloadError::Malformed(
                "not an offload bundle (no `__CLANG_OFFLOAD_BUNDLE__` or `CCOB` magic)".into(),
            ));
        } else {
            0
        };
        // The next bundle starts at the next magic after this one (padding lies between).
        let from = at + used.max(1);
        match next_magic(&bytes[from.min(bytes.len())..]) {
            Some(off) => at = from + off,
            None => break,
        }
    }
    Ok(out)
}

fn next_magic(bytes: &[u8]) -> Option<usize> {
    let plain = find(bytes, MAGIC);
    let compressed = find(bytes, COMPRESSED_MAGIC);
    match (plain, compressed) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes(s.try_into().ok()?))
}

fn truncated(what: &str) -> OffloadError {
    OffloadError::Malformed(format!("offload bundle is cut short in its {what}"))
}

/// Reads one plain bundle at the start of `b`; returns how many bytes it spans (header and
/// entries).
fn read_plain(b: &[u8], container: Container, out: &mut Vec<DeviceCode>) -> Result<usize, OffloadError> {
    let count = u64_at(b, MAGIC.len()).ok_or_else(|| truncated("entry count"))?;
    let mut at = MAGIC.len() + 8;
    let mut end = at;
    let mut i = 0u64;
    while i < count {
        let offset = u64_at(b, at).ok_or_else(|| truncated("entry table"))?;
        let size = u64_at(b, at + 8).ok_or_else(|| truncated("entry table"))?;
        let id_len = u64_at(b, at + 16).ok_or_else(|| truncated("entry table"))?;
        at += 24;
        let id_end = usize::try_from(id_len).ok().and_then(|l| at.checked_add(l)).filter(|e| *e <= b.len());
        let Some(id_end) = id_end else { return Err(truncated("entry ids")) };
        let id = String::from_utf8_lossy(&b[at..id_end]).into_owned();
        at = id_end;
        let data = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| Some(o..o.checked_add(s)?))
            .filter(|r| r.end <= b.len());
        let Some(range) = data else {
            return Err(OffloadError::Malformed(format!(
                "offload bundle entry `{id}` lies outside the bundle (offset {offset}, size {size}, bundle {} bytes)",
                b.len()
            )));
        };
        end = end.max(range.end);
        i += 1;
        if id.starts_with("host-") {
            continue;
        }
        let payload = &b[range];
        let target = target_of_entry(&id).or_else(|| super::elf::code_object_target(payload));
        let Some(target) = target else {
            return Err(OffloadError::Malformed(format!("offload bundle entry `{id}` names no GPU target")));
        };
        out.push(DeviceCode { target, entry: Some(id), container, size });
    }
    Ok(end.max(at))
}

/// The target id of a bundle entry id: its sixth `-`-separated field (the rest of the id, so
/// feature suffixes like `:xnack-` stay whole), as clang's bundler splits it. Ids of older
/// compilers without the empty environment field (`hip-amdgcn-amd-amdhsa-gfx906`) carry the
/// processor in the fifth.
pub fn target_of_entry(id: &str) -> Option<String> {
    let parts: Vec<&str> = id.splitn(6, '-').collect();
    let candidate = match parts.as_slice() {
        [_, _, _, _, _, t] => *t,
        [_, _, _, _, t] => *t,
        _ => return None,
    };
    candidate.starts_with("gfx").then(|| candidate.to_string())
}

/// Reads one compressed bundle at the start of `b`; returns how many bytes it spans.
fn read_compressed(b: &[u8], out: &mut Vec<DeviceCode>) -> Result<usize, OffloadError> {
    let version = u16_at(b, 4).ok_or_else(|| truncated("compressed header"))?;
    let method = u16_at(b, 6).ok_or_else(|| truncated("compressed header"))?;
    let (header, total, uncompressed) = match version {
        1 => (20usize, None, u32_at(b, 8).map(u64::from)),
        2 => (24, u32_at(b, 8).map(u64::from), u32_at(b, 12).map(u64::from)),
        3 => (32, u64_at(b, 8), u64_at(b, 16)),
        v => {
            return Err(OffloadError::Malformed(format!(
                "compressed offload bundle has version {v}; this rocmforge reads versions 1, 2 and 3"
            )))
        }
    };
    if b.len() < header {
        return Err(truncated("compressed header"));
    }
    let uncompressed = uncompressed.ok_or_else(|| truncated("compressed header"))?;
    let end = match total {
        Some(t) => usize::try_from(t).ok().filter(|t| *t >= header && *t <= b.len()).ok_or_else(|| {
            OffloadError::Malformed(format!(
                "compressed offload bundle says it is {t} bytes long, but {} bytes are there",
                b.len()
            ))
        })?,
        // Version 1 records no length: its data runs to the next bundle.
        None => find(&b[4..], COMPRESSED_MAGIC).map(|p| p + 4).unwrap_or(b.len()),
    };
    if uncompressed > MAX_UNCOMPRESSED {
        return Err(OffloadError::Malformed(format!(
            "compressed offload bundle claims {uncompressed} bytes uncompressed, more than the {MAX_UNCOMPRESSED} this reader inflates"
        )));
    }
    let data = &b[header..end];
    let (inflated, method_name) = match method {
        0 => (inflate(flate2::read::ZlibDecoder::new(data), uncompressed), "zlib"),
        1 => {
            let decoder = zstd::stream::read::Decoder::with_buffer(data)
                .map_err(|e| OffloadError::Malformed(format!("compressed offload bundle (zstd): {e}")))?;
            (inflate(decoder, uncompressed), "zstd")
        }
        m => {
            return Err(OffloadError::Malformed(format!(
                "compressed offload bundle uses compression method {m}; known are 0 (zlib) and 1 (zstd)"
            )))
        }
    };
    let inflated = inflated.map_err(|e| {
        OffloadError::Malformed(format!("compressed offload bundle ({method_name}) does not inflate: {e}"))
    })?;
    if inflated.len() as u64 != uncompressed {
        return Err(OffloadError::Malformed(format!(
            "compressed offload bundle ({method_name}) inflates to {} bytes, its header says {uncompressed}",
            inflated.len()
        )));
    }
    if !inflated.starts_with(MAGIC) {
        return Err(OffloadError::Malformed(format!(
            "compressed offload bundle ({method_name}) does not hold a plain bundle"
        )));
    }
    let container = Container::CompressedBundle { version, method: method_name };
    read_plain(&inflated, container, out)?;
    Ok(end)
}

/// Reads at most `expected + 1` bytes (one more shows a header that lies about the size).
fn inflate(r: impl Read, expected: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    r.take(expected.saturating_add(1)).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let owned: Vec<(String, Vec<u8>)> = entries.iter().map(|(i, d)| (i.to_string(), d.to_vec())).collect();
        super::super::props::plain_bundle(&owned)
    }

    #[test]
    fn target_ids() {
        assert_eq!(target_of_entry("hipv4-amdgcn-amd-amdhsa--gfx1010").as_deref(), Some("gfx1010"));
        assert_eq!(target_of_entry("hipv4-amdgcn-amd-amdhsa--gfx1010:xnack-").as_deref(), Some("gfx1010:xnack-"));
        assert_eq!(
            target_of_entry("hip-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-").as_deref(),
            Some("gfx90a:sramecc+:xnack-")
        );
        assert_eq!(target_of_entry("hip-amdgcn-amd-amdhsa-gfx906").as_deref(), Some("gfx906"));
        assert_eq!(target_of_entry("host-x86_64-unknown-linux"), None);
        assert_eq!(target_of_entry("garbage"), None);
    }

    #[test]
    fn plain_bundle_lists_device_entries() {
        let b = plain(&[("host-x86_64-unknown-linux", b""), ("hipv4-amdgcn-amd-amdhsa--gfx1010", b"abcd")]);
        let got = read_all(&b).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].target, "gfx1010");
        assert_eq!(got[0].size, 4);
    }

    #[test]
    fn bundles_one_after_another_with_padding() {
        let mut b = plain(&[("hipv4-amdgcn-amd-amdhsa--gfx1010", b"x")]);
        b.resize(4096, 0);
        b.extend(plain(&[("hipv4-amdgcn-amd-amdhsa--gfx1030", b"y")]));
        let got: Vec<String> = read_all(&b).unwrap().into_iter().map(|d| d.target).collect();
        assert_eq!(got, ["gfx1010", "gfx1030"]);
    }

    #[test]
    fn entry_outside_the_bundle_is_an_error() {
        let mut b = plain(&[("hipv4-amdgcn-amd-amdhsa--gfx1010", b"abcd")]);
        b.truncate(b.len() - 2);
        let e = read_all(&b).unwrap_err().to_string();
        assert!(e.contains("lies outside the bundle"), "{e}");
    }

    #[test]
    fn unknown_compression_version_and_method_are_named() {
        let mut b = b"CCOB".to_vec();
        b.extend(9u16.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b.extend([0u8; 40]);
        assert!(read_all(&b).unwrap_err().to_string().contains("version 9"));
        let mut b = b"CCOB".to_vec();
        b.extend(3u16.to_le_bytes());
        b.extend(7u16.to_le_bytes());
        b.extend(40u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend([0u8; 16]);
        assert!(read_all(&b).unwrap_err().to_string().contains("method 7"));
    }

    #[test]
    fn lying_uncompressed_size_is_refused() {
        let inner = plain(&[("hipv4-amdgcn-amd-amdhsa--gfx1010", b"abcd")]);
        let z = zstd::encode_all(&inner[..], 3).unwrap();
        let mut b = b"CCOB".to_vec();
        b.extend(3u16.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(((32 + z.len()) as u64).to_le_bytes());
        b.extend((inner.len() as u64 - 1).to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(&z);
        let e = read_all(&b).unwrap_err().to_string();
        assert!(e.contains("its header says"), "{e}");
    }
}
