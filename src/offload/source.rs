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
/// read starts: a read there past the stream's position reads past what lies between, one
/// before it starts inflating again from the member's start. Only what a read asks for is held.
pub struct Member<'a> {
    wheel: &'a File,
    data_start: u64,
    compressed: u64,
    deflated: bool,
    /// What the wheel's directory says it inflates to: its length as a source.
    size: u64,
    /// Where the next read starts.
    want: u64,
    /// The stream, and how far into the member it has read.
    stream: Option<(Box<dyn Read + 'a>, u64)>,
    failed: Option<String>,
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
        let (data_start, compressed, size) = (f.data_start(), f.compressed_size(), f.size());
        Ok(Member { wheel, data_start, compressed, deflated, size, want: 0, stream: None, failed: None })
    }

    /// Why a read of it failed (the stream's damage, not a reader's), if one did: what to
    /// report for the member rather than what a reader made of the failure.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// A stream of the member from `from` (stored) or from its start (deflated): where it starts.
    fn open(&self, from: u64) -> (Box<dyn Read + 'a>, u64) {
        if self.deflated {
            let raw =
                At { file: self.wheel, pos: self.data_start, end: self.data_start.saturating_add(self.compressed) };
            (Box::new(flate2::read::DeflateDecoder::new(raw)), 0)
        } else {
            let start = self.data_start.saturating_add(from);
            (Box::new(At { file: self.wheel, pos: start, end: self.data_start.saturating_add(self.compressed) }), from)
        }
    }

    fn read_on(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.want >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let (mut stream, mut at) = match self.stream.take() {
            Some((s, at)) if at <= self.want => (s, at),
            _ => self.open(self.want),
        };
        let short = || {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("it ends before the {} bytes the wheel's directory says it holds", self.size),
            )
        };
        let gap = self.want - at;
        if gap > 0 {
            let past = io::copy(&mut (&mut stream).take(gap), &mut io::sink())?;
            at += past;
            if past < gap {
                return Err(short());
            }
        }
        let n = buf.len().min(usize::try_from(self.size - self.want).unwrap_or(usize::MAX));
        let got = stream.read(&mut buf[..n])?;
        if got == 0 {
            return Err(short());
        }
        self.stream = Some((stream, at + got as u64));
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
}
