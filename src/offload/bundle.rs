//! Clang offload bundles, read from bytes or as a stream: the plain form (`__CLANG_OFFLOAD_BUNDLE__`, what
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
/// header cannot make the reader work without bound. Real bundles of one translation unit are
/// megabytes; a whole torch library's device code is a few GiB spread over many bundles.
const MAX_UNCOMPRESSED: u64 = 4 << 30;
/// A bundle holds an entry per target it was compiled for (and the host's): more than this, or
/// an id longer than this, is damage. They bound what a bundle's table may make the reader keep
/// (a compressed bundle's table is not what the file holds: 143 KB of zstd inflated to 3.9 GB).
const MAX_ENTRIES: u64 = 4096;
const MAX_ID: u64 = 1024;

/// Whether `bytes` starts like a bundle (plain or compressed).
pub fn is_bundle(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC) || bytes.starts_with(COMPRESSED_MAGIC)
}

/// Every device-code entry of the bundles laid one after another in `bytes` (a `.hip_fatbin`
/// section holds one bundle per translation unit, each aligned; a `.hipfb` file holds one).
/// Host entries are left out. `bytes` must start with a bundle.
pub fn read_all(bytes: &[u8]) -> Result<Vec<DeviceCode>, OffloadError> {
    let mut r = bytes;
    read_stream(&mut r, bytes.len() as u64)
}

/// [`read_all`] of the `len` bytes a reader gives (a `.hipfb` file, a wheel's member), read as
/// they come: only the bundles' tables are kept, the entries' code is read past.
pub fn read_stream(r: &mut dyn Read, len: u64) -> Result<Vec<DeviceCode>, OffloadError> {
    read_bundles(&mut Stream::new(r, len))
}

/// [`read_stream`] of a `.hip_fatbin` section: zeros before its first bundle are read past, and
/// a section of zeros alone (`.bss`-like in some links, or zero-paged by rocm-kpack) holds
/// nothing.
pub fn read_section(r: &mut dyn Read, len: u64) -> Result<Vec<DeviceCode>, OffloadError> {
    let mut s = Stream::new(r, len);
    if !s.skip_zeros().map_err(unreadable)? {
        return Ok(Vec::new());
    }
    read_bundles(&mut s)
}

fn unreadable(e: std::io::Error) -> OffloadError {
    OffloadError::Malformed(format!("offload bundle cannot be read: {e}"))
}

fn read_bundles(s: &mut Stream<'_>) -> Result<Vec<DeviceCode>, OffloadError> {
    let mut out = Vec::new();
    let mut first = true;
    while s.remaining() > 0 {
        let start = s.pos;
        let head = s.peek(MAGIC.len()).map_err(unreadable)?;
        let (plain, compressed) = (head.starts_with(MAGIC), head.starts_with(COMPRESSED_MAGIC));
        let used = if plain {
            let limit = s.remaining();
            read_plain(s, Container::Bundle, limit, &mut out).map_err(|e| e.outer())?
        } else if compressed {
            read_compressed(s, &mut out)?
        } else if first {
            return Err(OffloadError::Malformed(
                "not an offload bundle (no `__CLANG_OFFLOAD_BUNDLE__` or `CCOB` magic)".into(),
            ));
        } else {
            0
        };
        first = false;
        // The next bundle starts at the next magic after this one (padding lies between).
        let to = start + used.max(1);
        s.skip(to.saturating_sub(s.pos)).map_err(unreadable)?;
        if !s.find_magic().map_err(unreadable)? {
            break;
        }
    }
    Ok(out)
}

fn truncated(what: &str) -> OffloadError {
    OffloadError::Malformed(format!("offload bundle is cut short in its {what}"))
}

/// Why a plain bundle could not be read: its bytes (an inflate error, inside a compressed one)
/// or its content.
enum PlainError {
    Io(std::io::Error),
    Bad(OffloadError),
}

impl PlainError {
    fn outer(self) -> OffloadError {
        match self {
            PlainError::Io(e) => unreadable(e),
            PlainError::Bad(e) => e,
        }
    }
}

impl From<OffloadError> for PlainError {
    fn from(e: OffloadError) -> Self {
        PlainError::Bad(e)
    }
}

/// Reads one plain bundle at the stream's position, `limit` bytes at most; returns how many bytes
/// it spans (header and entries). Only its table and, for an entry whose id names no target, the
/// header of its code object are read; the stream is left inside or at the end of it.
fn read_plain(
    s: &mut Stream<'_>,
    container: Container,
    limit: u64,
    out: &mut Vec<DeviceCode>,
) -> Result<u64, PlainError> {
    let start = s.pos;
    let want = |s: &mut Stream<'_>, n: usize, what: &str| -> Result<Vec<u8>, PlainError> {
        let at = s.pos - start;
        if at + n as u64 > limit {
            return Err(truncated(what).into());
        }
        let b = s.peek(n).map_err(PlainError::Io)?;
        if b.len() < n {
            return Err(truncated(what).into());
        }
        let b = b.to_vec();
        s.skip(n as u64).map_err(PlainError::Io)?;
        Ok(b)
    };
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    want(s, MAGIC.len(), "magic")?;
    let count = u64_of(&want(s, 8, "entry count")?);
    if count > MAX_ENTRIES {
        return Err(OffloadError::Malformed(format!(
            "offload bundle lists {count} entries, more than the {MAX_ENTRIES} of any real bundle (one per target)"
        ))
        .into());
    }
    let mut entries: Vec<(String, u64, u64)> = Vec::new();
    let mut end = 0u64;
    for _ in 0..count {
        let e = want(s, 24, "entry table")?;
        let (offset, size, id_len) = (u64_of(&e[0..8]), u64_of(&e[8..16]), u64_of(&e[16..24]));
        if id_len > limit.saturating_sub(s.pos - start) {
            return Err(truncated("entry ids").into());
        }
        if id_len > MAX_ID {
            return Err(OffloadError::Malformed(format!(
                "offload bundle entry id of {id_len} bytes, longer than the {MAX_ID} this reader takes"
            ))
            .into());
        }
        let id = String::from_utf8_lossy(&want(s, id_len as usize, "entry ids")?).into_owned();
        let Some(range_end) = offset.checked_add(size).filter(|e| *e <= limit) else {
            return Err(OffloadError::Malformed(format!(
                "offload bundle entry `{id}` lies outside the bundle (offset {offset}, size {size}, bundle {limit} bytes)"
            ))
            .into());
        };
        end = end.max(range_end);
        entries.push((id, offset, size));
    }
    let table_end = s.pos - start;
    // Targets from the ids; an id without one (an old compiler's) from its code object's
    // header, read in the order the entries lie.
    let mut targets: Vec<Option<String>> = entries.iter().map(|(id, _, _)| target_of_entry(id)).collect();
    let mut heads: Vec<usize> =
        (0..entries.len()).filter(|&i| targets[i].is_none() && !entries[i].0.starts_with("host-")).collect();
    heads.sort_by_key(|&i| entries[i].1);
    for i in heads {
        let (_, offset, size) = &entries[i];
        if start + offset < s.pos {
            continue;
        }
        s.skip(start + offset - s.pos).map_err(PlainError::Io)?;
        let n = (*size).min(64) as usize;
        let head = s.peek(n).map_err(PlainError::Io)?.to_vec();
        targets[i] = super::elf::header_target(&head);
    }
    for ((id, _, size), target) in entries.into_iter().zip(targets) {
        if id.starts_with("host-") {
            continue;
        }
        let Some(target) = target else {
            return Err(OffloadError::Malformed(format!("offload bundle entry `{id}` names no GPU target")).into());
        };
        out.push(DeviceCode { target, entry: Some(id), container, size });
    }
    Ok(end.max(table_end))
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

/// Reads one compressed bundle at the stream's position; returns how many bytes it spans. The
/// data is inflated as a stream: only the inner bundle's table is kept.
fn read_compressed(s: &mut Stream<'_>, out: &mut Vec<DeviceCode>) -> Result<u64, OffloadError> {
    let b = s.peek(32).map_err(unreadable)?.to_vec();
    let u16_at = |at: usize| b.get(at..at + 2).map(|x| u16::from_le_bytes([x[0], x[1]]));
    let u32_at = |at: usize| b.get(at..at + 4).map(|x| u32::from_le_bytes(x.try_into().expect("4 bytes")));
    let u64_at = |at: usize| b.get(at..at + 8).map(|x| u64::from_le_bytes(x.try_into().expect("8 bytes")));
    let version = u16_at(4).ok_or_else(|| truncated("compressed header"))?;
    let method = u16_at(6).ok_or_else(|| truncated("compressed header"))?;
    let (header, total, uncompressed) = match version {
        1 => (20u64, None, u32_at(8).map(u64::from)),
        2 => (24, u32_at(8).map(u64::from), u32_at(12).map(u64::from)),
        3 => (32, u64_at(8), u64_at(16)),
        v => {
            return Err(OffloadError::Malformed(format!(
                "compressed offload bundle has version {v}; this rocmforge reads versions 1, 2 and 3"
            )))
        }
    };
    if s.remaining() < header || (b.len() as u64) < header {
        return Err(truncated("compressed header"));
    }
    let uncompressed = uncompressed.ok_or_else(|| truncated("compressed header"))?;
    let bounded = match total {
        Some(t) if t < header || t > s.remaining() => {
            return Err(OffloadError::Malformed(format!(
                "compressed offload bundle says it is {t} bytes long, but {} bytes are there",
                s.remaining()
            )))
        }
        Some(t) => Some(t - header),
        // Version 1 records no length: its data runs to the next bundle.
        None => None,
    };
    if uncompressed > MAX_UNCOMPRESSED {
        return Err(OffloadError::Malformed(format!(
            "compressed offload bundle claims {uncompressed} bytes uncompressed, more than the {MAX_UNCOMPRESSED} this reader inflates"
        )));
    }
    let start = s.pos;
    s.skip(header).map_err(unreadable)?;
    let method_name = match method {
        0 => "zlib",
        1 => "zstd",
        m => {
            return Err(OffloadError::Malformed(format!(
                "compressed offload bundle uses compression method {m}; known are 0 (zlib) and 1 (zstd)"
            )))
        }
    };
    let inflate_err = |e: std::io::Error| {
        OffloadError::Malformed(format!("compressed offload bundle ({method_name}) does not inflate: {e}"))
    };
    let container = Container::CompressedBundle { version, method: method_name };
    let mut found = Vec::new();
    let (parsed, inflated) = {
        let mut data = Data { s: &mut *s, left: bounded };
        let mut decoder: Box<dyn Read + '_> = if method == 0 {
            Box::new(flate2::read::ZlibDecoder::new(&mut data))
        } else {
            Box::new(zstd::stream::read::Decoder::new(&mut data).map_err(inflate_err)?)
        };
        // At most one byte more than the header says: that shows a header that lies.
        let mut limited = (&mut decoder).take(uncompressed.saturating_add(1));
        let mut inner = Stream::new(&mut limited, uncompressed.saturating_add(1));
        let plain = inner.peek(MAGIC.len()).map_err(inflate_err)?.starts_with(MAGIC);
        let parsed = plain.then(|| read_plain(&mut inner, container, uncompressed, &mut found));
        // The rest is inflated and counted, not kept: damage shows in the decoder or the count.
        let rest = inner.remaining();
        inner.skip(rest).map_err(inflate_err)?;
        (parsed, inner.pos)
    };
    if inflated != uncompressed {
        return Err(OffloadError::Malformed(format!(
            "compressed offload bundle ({method_name}) inflates to {inflated} bytes, its header says {uncompressed}"
        )));
    }
    match parsed {
        None => {
            return Err(OffloadError::Malformed(format!(
                "compressed offload bundle ({method_name}) does not hold a plain bundle"
            )))
        }
        Some(Err(PlainError::Io(e))) => return Err(inflate_err(e)),
        Some(Err(PlainError::Bad(e))) => return Err(e),
        Some(Ok(_)) => {}
    }
    out.extend(found);
    // What the decoder left of the data (a frame's end, or version 1's run to the next bundle).
    match bounded {
        Some(len) => {
            let to = start + header + len;
            s.skip(to.saturating_sub(s.pos)).map_err(unreadable)?;
        }
        None => while s.read_until_magic(&mut [0u8; 4096], COMPRESSED_MAGIC).map_err(unreadable)? > 0 {},
    }
    Ok(s.pos - start)
}

/// A compressed bundle's data, from the stream: `left` bytes, or (version 1) to the next
/// compressed bundle's magic.
struct Data<'a, 'r> {
    s: &'a mut Stream<'r>,
    left: Option<u64>,
}

impl Read for Data<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.left {
            None => self.s.read_until_magic(buf, COMPRESSED_MAGIC),
            Some(0) => Ok(0),
            Some(left) => {
                let n = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let got = self.s.read(&mut buf[..n])?;
                *left -= got as u64;
                Ok(got)
            }
        }
    }
}

/// A forward-only stream of `len` bytes with a window read ahead: what the bundle reader needs
/// of a section it must not hold (peek, skip, find the next magic).
struct Stream<'r> {
    r: &'r mut dyn Read,
    /// Bytes of the stream consumed so far (the window starts here).
    pos: u64,
    len: u64,
    window: Vec<u8>,
    /// Bytes the underlying reader gave so far.
    fetched: u64,
}

impl<'r> Stream<'r> {
    fn new(r: &'r mut dyn Read, len: u64) -> Stream<'r> {
        Stream { r, pos: 0, len, window: Vec::new(), fetched: 0 }
    }

    fn remaining(&self) -> u64 {
        self.len - self.pos
    }

    /// Reads ahead until the window holds `n` bytes or the stream ends.
    fn fill(&mut self, n: usize) -> std::io::Result<()> {
        while self.window.len() < n && self.fetched < self.len {
            let want = (n - self.window.len())
                .max(1 << 16)
                .min(usize::try_from(self.len - self.fetched).unwrap_or(usize::MAX));
            let at = self.window.len();
            self.window.resize(at + want, 0);
            let got = self.r.read(&mut self.window[at..])?;
            self.window.truncate(at + got);
            if got == 0 {
                // The reader ends before `len`: so does the stream.
                self.len = self.fetched;
                break;
            }
            self.fetched += got as u64;
        }
        Ok(())
    }

    /// The next `n` bytes (fewer at the end), not consumed.
    fn peek(&mut self, n: usize) -> std::io::Result<&[u8]> {
        self.fill(n)?;
        Ok(&self.window[..n.min(self.window.len())])
    }

    fn consume(&mut self, n: usize) {
        self.window.drain(..n);
        self.pos += n as u64;
    }

    /// Reads past `n` bytes (fewer at the end); returns how many.
    fn skip(&mut self, n: u64) -> std::io::Result<u64> {
        let mut done = 0;
        while done < n {
            self.fill(1)?;
            if self.window.is_empty() {
                break;
            }
            let k = self.window.len().min(usize::try_from(n - done).unwrap_or(usize::MAX));
            self.consume(k);
            done += k as u64;
        }
        Ok(done)
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.fill(buf.len().min(1 << 16))?;
        let k = buf.len().min(self.window.len());
        buf[..k].copy_from_slice(&self.window[..k]);
        self.consume(k);
        Ok(k)
    }

    /// Reads up to the next `magic` (not consumed) or the end; 0 there.
    fn read_until_magic(&mut self, buf: &mut [u8], magic: &[u8]) -> std::io::Result<usize> {
        self.fill(buf.len().max(magic.len()))?;
        let avail = match memchr::memmem::find(&self.window, magic) {
            Some(at) => at,
            // A magic may begin in the last bytes: keep them until more is read (or the end).
            None if self.fetched < self.len => {
                self.window.len().saturating_sub(magic.len() - 1).max(1).min(self.window.len())
            }
            None => self.window.len(),
        };
        let k = buf.len().min(avail);
        buf[..k].copy_from_slice(&self.window[..k]);
        self.consume(k);
        Ok(k)
    }

    /// Reads past zero bytes; `false` when nothing else follows.
    fn skip_zeros(&mut self) -> std::io::Result<bool> {
        loop {
            self.fill(1 << 16)?;
            if self.window.is_empty() {
                return Ok(false);
            }
            match self.window.iter().position(|b| *b != 0) {
                Some(at) => {
                    self.consume(at);
                    return Ok(true);
                }
                None => self.consume(self.window.len()),
            }
        }
    }

    /// Reads up to the next bundle magic (plain or compressed); `false` when none follows.
    fn find_magic(&mut self) -> std::io::Result<bool> {
        loop {
            self.fill(1 << 16)?;
            let at = [MAGIC, COMPRESSED_MAGIC].iter().filter_map(|m| memchr::memmem::find(&self.window, m)).min();
            if let Some(at) = at {
                self.consume(at);
                return Ok(true);
            }
            if self.fetched >= self.len {
                let n = self.window.len();
                self.consume(n);
                return Ok(false);
            }
            // Keep what could be the start of a magic cut by the window's end.
            let keep = MAGIC.len() - 1;
            let n = self.window.len().saturating_sub(keep);
            self.consume(n);
        }
    }
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
