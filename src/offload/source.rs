//! What the readers read from ([`Source`]): a file on disk, a wheel's member ([`Member`]) or
//! bytes in memory (a `Cursor`), by seeking to the parts they need and reading those, so a
//! multi-gigabyte library, or a wheel's member whose directory entry says it inflates to
//! gigabytes (a 3 MB wheel of deflated zeros held 3 GB read whole), is never held whole.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

/// Bytes a reader seeks in and reads: its length is where `SeekFrom::End(0)` lands.
pub trait Source: Read + Seek {}

impl<T: Read + Seek> Source for T {}

/// A source's length in bytes.
pub fn len_of(src: &mut dyn Source) -> io::Result<u64> {
    src.seek(SeekFrom::End(0))
}

/// A member of a wheel (a zip), stored or deflated, as a [`Source`]: its bytes are read from
/// the wheel by offset and inflated as reads ask for them. A seek only records where the next
/// read starts: a read there past the stream's position reads past what lies between; one
/// before it is served from the last [`BACK_WINDOW`] bytes read when it lies there, else starts
/// inflating again from the member's start, at most [`MAX_RESTARTS`] times (then the read
/// fails, naming why).
///
/// Which reads verify the CRC-32 the wheel's directory gives (zip's own check, which a damaged
/// deflate stream that still inflates fails): the first read that reaches the member's end,
/// whatever the reader did before. The member's bytes are hashed in order from its start as
/// streams pass them ([`Hashed`]): bytes a seek skips forward are read through, not skipped (a
/// stored member's too: its first stream starts at the member's start, and its stream after a
/// read back starts no later than where hashing stopped), and a stream started again for a read
/// back hashes only what lies past that point. A reader that never reads up to the end (an ELF
/// file's headers and sections when its section table is not last) gets no check. Only what a
/// read asks for, and the window, is held.
pub struct Member<'a> {
    wheel: &'a File,
    data_start: u64,
    compressed: u64,
    deflated: bool,
    /// What the wheel's directory says it inflates to: its length as a source.
    size: u64,
    /// The CRC-32 the wheel's directory gives.
    crc32: u32,
    /// Where the next read starts.
    want: u64,
    /// The stream, and how far into the member it has read.
    stream: Option<Stream<'a>>,
    /// The last bytes the stream read, up to its position (at most twice [`BACK_WINDOW`]).
    back: Vec<u8>,
    /// How often the stream was started again from the member's start for a read before it.
    restarts: u32,
    failed: Option<String>,
}

/// Bytes before a member's stream's position kept to serve a read a little way back (an ELF
/// reader reads a section's name table after the section headers that follow it) without
/// inflating the member again.
pub const BACK_WINDOW: usize = 256 << 10;

/// How often a member's stream may start again from its start for a read before its position:
/// each time the member is inflated again up to there. Inspecting a library or archive takes a
/// few (its headers at the start, its tables near the end, its device code between).
pub const MAX_RESTARTS: u32 = 32;

struct Stream<'a> {
    read: Box<dyn Read + 'a>,
    /// How far into the member it has read.
    at: u64,
    /// The member's bytes hashed so far, handed on to the stream that replaces this one.
    hashed: Hashed,
}

/// The CRC-32 of a member's first `upto` bytes, in order: a stream's bytes extend it when they
/// begin at or before `upto` and go past it.
#[derive(Default)]
struct Hashed {
    upto: u64,
    crc: flate2::Crc,
    /// The sum matched the directory's (a later read to the end is not checked again).
    checked: bool,
}

impl Hashed {
    /// `bytes` read at `start` into the member.
    fn feed(&mut self, start: u64, bytes: &[u8]) {
        let end = start + bytes.len() as u64;
        if start <= self.upto && self.upto < end {
            self.crc.update(&bytes[(self.upto - start) as usize..]);
            self.upto = end;
        }
    }
}

impl Read for Stream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read.read(buf)?;
        self.hashed.feed(self.at, &buf[..n]);
        self.at += n as u64;
        Ok(n)
    }
}

impl<'a> Member<'a> {
    /// The member `name` of `zip` (opened on `wheel`, which is read from), as its entry
    /// describes it; why it cannot be read otherwise (the zip reader's words).
    pub fn of(zip: &mut zip::ZipArchive<File>, wheel: &'a File, name: &str) -> Result<Member<'a>, String> {
        let f = zip.by_name(name).map_err(|e| e.to_string())?;
        let deflated = match f.compression() {
            zip::CompressionMethod::Stored => false,
            zip::CompressionMethod::Deflated => true,
            other => return Err(format!("compressed with {other}, which a wheel does not use")),
        };
        let (data_start, compressed, size, crc32) = (f.data_start(), f.compressed_size(), f.size(), f.crc32());
        Ok(Member {
            wheel,
            data_start,
            compressed,
            deflated,
            size,
            crc32,
            want: 0,
            stream: None,
            back: Vec::new(),
            restarts: 0,
            failed: None,
        })
    }

    /// Why a read of it failed (the stream's damage, not a reader's), if one did: what to
    /// report for the member rather than what a reader made of the failure.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// How often its stream started again from its start for a read before its position.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// A stream of the member for a read at `from`, carrying on `hashed`: from its start
    /// (deflated), or (stored) from `from` or where hashing stopped, whichever comes first, so
    /// no byte is skipped unhashed.
    fn open(&self, from: u64, hashed: Hashed) -> Stream<'a> {
        let end = self.data_start.saturating_add(self.compressed);
        let (read, at): (Box<dyn Read + 'a>, u64) = if self.deflated {
            let raw = At { file: self.wheel, pos: self.data_start, end };
            (Box::new(flate2::read::DeflateDecoder::new(raw)), 0)
        } else {
            let at = from.min(hashed.upto);
            (Box::new(At { file: self.wheel, pos: self.data_start.saturating_add(at), end }), at)
        };
        Stream { read, at, hashed }
    }

    fn read_on(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.want >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let mut stream = match self.stream.take() {
            Some(s) if s.at <= self.want => s,
            Some(s) if s.at - self.want <= self.back.len() as u64 => {
                // In the window: served from it, the stream left where it is.
                let from = self.back.len() - (s.at - self.want) as usize;
                let n = buf.len().min(self.back.len() - from);
                buf[..n].copy_from_slice(&self.back[from..from + n]);
                self.stream = Some(s);
                self.want += n as u64;
                return Ok(n);
            }
            before => {
                if before.is_some() && self.deflated {
                    self.restarts += 1;
                    if self.restarts > MAX_RESTARTS {
                        return Err(io::Error::other(format!(
                            "read back to an earlier part more than {MAX_RESTARTS} times, each time inflating it again from its start: \
                             no library or archive is laid out so; unzip the wheel and inspect the file"
                        )));
                    }
                }
                self.back.clear();
                self.open(self.want, before.map(|s| s.hashed).unwrap_or_default())
            }
        };
        let short = || {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("it ends before the {} bytes the wheel's directory says it holds", self.size),
            )
        };
        let gap = self.want - stream.at;
        if gap > 0 {
            self.back.clear();
            let keep = gap.min(BACK_WINDOW as u64);
            let past = io::copy(&mut (&mut stream).take(gap - keep), &mut io::sink())?;
            (&mut stream).take(keep).read_to_end(&mut self.back)?;
            if past + (self.back.len() as u64) < gap {
                return Err(short());
            }
        }
        let n = buf.len().min(usize::try_from(self.size - self.want).unwrap_or(usize::MAX));
        let got = stream.read(&mut buf[..n])?;
        if got == 0 {
            return Err(short());
        }
        self.back.extend_from_slice(&buf[..got]);
        if self.back.len() > 2 * BACK_WINDOW {
            self.back.drain(..self.back.len() - BACK_WINDOW);
        }
        let hashed = &mut stream.hashed;
        if hashed.upto == self.size && !hashed.checked {
            if hashed.crc.sum() != self.crc32 {
                // (The stream and what it hashed go: a read again from the start checks again.)
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "its bytes do not match the wheel's directory: their CRC-32 is {:08x}, the directory says {:08x} \
                         (the wheel is damaged: download or build it again)",
                        hashed.crc.sum(),
                        self.crc32
                    ),
                ));
            }
            hashed.checked = true;
        }
        self.stream = Some(stream);
        self.want += got as u64;
        Ok(got)
    }
}

impl Read for Member<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_on(buf).inspect_err(|e| {
            self.failed.get_or_insert_with(|| e.to_string());
        })
    }
}

impl Seek for Member<'_> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let to = match pos {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.want.checked_add_signed(d),
        };
        self.want = to.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a seek before the start"))?;
        Ok(self.want)
    }
}

/// The bytes `pos..end` of a file, read by offset (the file's own position is not used, so
/// another reader of the same file does not move it).
struct At<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX));
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reads_forward_and_back_stored_or_deflated() {
        use std::io::Write;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("w.whl");
        let body: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let mut z = zip::ZipWriter::new(File::create(&path).unwrap());
        for (name, method) in [("a.so", zip::CompressionMethod::Deflated), ("b.so", zip::CompressionMethod::Stored)] {
            z.start_file(name, zip::write::SimpleFileOptions::default().compression_method(method)).unwrap();
            z.write_all(&body).unwrap();
        }
        z.finish().unwrap();
        let file = File::open(&path).unwrap();
        let mut zip = zip::ZipArchive::new(File::open(&path).unwrap()).unwrap();
        for name in ["a.so", "b.so"] {
            let mut m = Member::of(&mut zip, &file, name).unwrap();
            assert_eq!(len_of(&mut m).unwrap(), body.len() as u64);
            for at in [400_000u64, 8, 799_996, 12] {
                let mut b = [0u8; 4];
                m.seek(SeekFrom::Start(at)).unwrap();
                m.read_exact(&mut b).unwrap();
                assert_eq!(&b[..], &body[at as usize..at as usize + 4], "{name} at {at}");
            }
            let mut b = [0u8; 8];
            m.seek(SeekFrom::Start(799_996)).unwrap();
            assert_eq!(m.read_exact(&mut b).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
            let mut all = Vec::new();
            m.seek(SeekFrom::Start(100)).unwrap();
            (&mut m).take(1000).read_to_end(&mut all).unwrap();
            assert_eq!(all, &body[100..1100]);
            assert_eq!(m.failure(), None);
        }
    }

    /// A wheel of one member `m.so` of `body`, stored or deflated.
    fn one_member(path: &std::path::Path, body: &[u8], method: zip::CompressionMethod) {
        use std::io::Write;
        let mut z = zip::ZipWriter::new(File::create(path).unwrap());
        let o = zip::write::SimpleFileOptions::default().compression_method(method);
        z.start_file("m.so", o).unwrap();
        z.write_all(body).unwrap();
        z.finish().unwrap();
    }

    #[test]
    fn a_member_read_to_its_end_is_checked_against_its_crc() {
        // Stored, so a byte of the wheel is a byte of the member (a deflated member's damage:
        // tests/it/inspect.rs).
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("w.whl");
        let body: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        one_member(&path, &body, zip::CompressionMethod::Stored);
        let mut wheel = std::fs::read(&path).unwrap();
        let at = wheel.windows(8).position(|w| w == &body[200_000..200_008]).unwrap();
        wheel[at] ^= 0x40;
        std::fs::write(&path, &wheel).unwrap();
        let file = File::open(&path).unwrap();
        let mut zip = zip::ZipArchive::new(File::open(&path).unwrap()).unwrap();
        let mut m = Member::of(&mut zip, &file, "m.so").unwrap();
        // Read up to the damage and past it, but not to the end: nothing to check yet.
        let mut part = vec![0u8; 300_000];
        m.read_exact(&mut part).unwrap();
        assert_ne!(part[200_000], body[200_000]);
        let e = m.read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("do not match the wheel's directory: their CRC-32 is"), "{e}");
        assert!(m.failure().is_some_and(|f| f.contains("the wheel is damaged")));
        // The whole member, read again from its start, fails the same way; the undamaged (here
        // deflated) does not.
        m.seek(SeekFrom::Start(0)).unwrap();
        assert!(m.read_to_end(&mut Vec::new()).unwrap_err().to_string().contains("CRC-32"));
        one_member(&path, &body, zip::CompressionMethod::Deflated);
        let mut zip = zip::ZipArchive::new(File::open(&path).unwrap()).unwrap();
        let file = File::open(&path).unwrap();
        let mut m = Member::of(&mut zip, &file, "m.so").unwrap();
        let mut all = Vec::new();
        m.read_to_end(&mut all).unwrap();
        assert_eq!(all, body);
    }

    /// A stored member's reads that skip the damage by seeking (a first read past it, a read
    /// back past the window after a read over it) still end in the CRC check when they reach
    /// the member's end: the skipped bytes are read through and hashed.
    #[test]
    fn a_stored_member_skipped_through_by_seeking_is_checked_when_a_read_reaches_its_end() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("w.whl");
        let body: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        one_member(&path, &body, zip::CompressionMethod::Stored);
        let good = std::fs::read(&path).unwrap();
        let mut bad = good.clone();
        let at = bad.windows(8).position(|w| w == &body[200_000..200_008]).unwrap();
        bad[at] ^= 0x40;
        let bad_path = d.path().join("bad.whl");
        std::fs::write(&bad_path, &bad).unwrap();
        // Each way of reading: the bytes it read, from where to the end.
        type Way<'a> = (&'a str, &'a dyn Fn(&mut Member<'_>) -> io::Result<Vec<u8>>);
        let ways: [Way<'_>; 2] = [
            ("a first read past the damage", &|m| {
                m.seek(SeekFrom::Start(700_000))?;
                let mut v = Vec::new();
                m.read_to_end(&mut v).map(|_| v)
            }),
            ("a read over it, then a read back past the window", &|m| {
                let mut part = vec![0u8; 300_000];
                m.read_exact(&mut part)?;
                m.seek(SeekFrom::Start(10))?;
                let mut v = Vec::new();
                m.read_to_end(&mut v).map(|_| v)
            }),
        ];
        for (what, read) in ways {
            let file = File::open(&path).unwrap();
            let mut zip = zip::ZipArchive::new(File::open(&path).unwrap()).unwrap();
            let mut m = Member::of(&mut zip, &file, "m.so").unwrap();
            let got = read(&mut m).unwrap_or_else(|e| panic!("{what}, undamaged: {e}"));
            assert_eq!(got, &body[body.len() - got.len()..], "{what}");
            assert_eq!(m.failure(), None, "{what}");

            let file = File::open(&bad_path).unwrap();
            let mut zip = zip::ZipArchive::new(File::open(&bad_path).unwrap()).unwrap();
            let mut m = Member::of(&mut zip, &file, "m.so").unwrap();
            let e = read(&mut m).expect_err(what);
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{what}: {e}");
            assert!(e.to_string().contains("their CRC-32 is"), "{what}: {e}");
            assert!(m.failure().is_some_and(|f| f.contains("the wheel is damaged")), "{what}");
        }
    }

    #[test]
    fn a_read_back_is_served_from_the_window_or_restarts_a_bounded_number_of_times() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("w.whl");
        let body: Vec<u8> = (0..1_000_000u32).flat_map(|i| i.to_le_bytes()).collect();
        one_member(&path, &body, zip::CompressionMethod::Deflated);
        let file = File::open(&path).unwrap();
        let mut zip = zip::ZipArchive::new(File::open(&path).unwrap()).unwrap();
        let mut m = Member::of(&mut zip, &file, "m.so").unwrap();
        let mut b = [0u8; 4];
        let mut at = |m: &mut Member<'_>, to: u64| {
            m.seek(SeekFrom::Start(to)).unwrap();
            m.read_exact(&mut b).map(|_| assert_eq!(&b[..], &body[to as usize..to as usize + 4], "at {to}"))
        };
        // Back and forth within the window behind the stream: no restart.
        for to in [3_000_000u64, 3_000_000 - BACK_WINDOW as u64, 2_900_000, 3_100_000, 3_050_000] {
            at(&mut m, to).unwrap();
        }
        assert_eq!(m.restarts(), 0);
        // Further back: each is a restart, until the bound.
        for i in 0..MAX_RESTARTS {
            at(&mut m, 3_999_000).unwrap();
            at(&mut m, 1000).unwrap();
            assert_eq!(m.restarts(), i + 1);
        }
        at(&mut m, 3_999_000).unwrap();
        let e = at(&mut m, 1000).unwrap_err();
        assert!(e.to_string().contains(&format!("more than {MAX_RESTARTS} times")), "{e}");
    }
}
