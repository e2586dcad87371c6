//! Small real wheels made in Rust (a zip with a module, METADATA, WHEEL and RECORD), with any
//! name, version and tags: pip and uv install them, the index publishes them.

use std::io::Write;

use sha2::Digest;

/// `(file name, bytes)` of a wheel of `dist` `version` with tag `tag` (`py3-none-any`), holding
/// the module `module` with `VALUE = value`.
pub fn make(dist: &str, version: &str, tag: &str, module: &str, value: &str) -> (String, Vec<u8>) {
    make_with(dist, version, tag, module, value, &[])
}

/// [`make`] with more members (`(path, bytes)`, a library for one).
pub fn make_with(
    dist: &str,
    version: &str,
    tag: &str,
    module: &str,
    value: &str,
    extra: &[(String, Vec<u8>)],
) -> (String, Vec<u8>) {
    make_requiring(dist, version, tag, module, value, extra, &[])
}

/// [`make_with`] whose METADATA declares `requires` (`Requires-Dist:` lines, as written).
pub fn make_requiring(
    dist: &str,
    version: &str,
    tag: &str,
    module: &str,
    value: &str,
    extra: &[(String, Vec<u8>)],
    requires: &[&str],
) -> (String, Vec<u8>) {
    let requires: String = requires.iter().map(|r| format!("Requires-Dist: {r}\n")).collect();
    let stem = format!("{}-{version}", dist.replace('-', "_"));
    let info = format!("{stem}.dist-info");
    let mut files: Vec<(String, Vec<u8>)> = extra.to_vec();
    let text_files: Vec<(String, String)> = vec![
        (format!("{module}/__init__.py"), format!("VALUE = {value:?}\n")),
        (
            format!("{info}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nSummary: test wheel\n{requires}"),
        ),
        (
            format!("{info}/WHEEL"),
            format!("Wheel-Version: 1.0\nGenerator: rocmforge-tests\nRoot-Is-Purelib: true\nTag: {tag}\n"),
        ),
    ];
    files.extend(text_files.into_iter().map(|(n, t)| (n, t.into_bytes())));
    let mut record = String::new();
    for (name, bytes) in &files {
        let digest = sha2::Sha256::digest(bytes);
        let b64 = base64_urlsafe_nopad(&digest);
        record.push_str(&format!("{name},sha256={b64},{}\n", bytes.len()));
    }
    record.push_str(&format!("{info}/RECORD,,\n"));
    files.push((format!("{info}/RECORD"), record.into_bytes()));
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut buf);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default());
        for (name, bytes) in &files {
            z.start_file(name.as_str(), opts).unwrap();
            z.write_all(bytes).unwrap();
        }
        z.finish().unwrap();
    }
    (format!("{stem}-{tag}.whl"), buf.into_inner())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn base64_urlsafe_nopad(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Raw deflate of `data` at `level` (0: stored blocks, a byte of the output per byte of `data`), ended (`last`) or byte-aligned by a sync flush so that another
/// compressor's output can follow it in one stream.
pub fn deflated(data: &[u8], level: u32, last: bool) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::new(level), false);
    let mut out = Vec::with_capacity(data.len() + 4096);
    let flush = if last { flate2::FlushCompress::Finish } else { flate2::FlushCompress::Sync };
    let status = c.compress_vec(data, &mut out, flush).unwrap();
    assert_eq!(c.total_in(), data.len() as u64);
    assert!(!last || status == flate2::Status::StreamEnd);
    out
}

/// A zip of deflated members `(name, deflated bytes, CRC-32, size)`, written as the format
/// lays it out (the zip crate writes only what it compresses itself).
pub fn zip_of(members: &[(String, Vec<u8>, u32, u64)]) -> Vec<u8> {
    let (mut out, mut dir) = (Vec::new(), Vec::new());
    for (name, data, crc, size) in members {
        let at = out.len() as u32;
        let common = |v: &mut Vec<u8>| {
            v.extend(20u16.to_le_bytes()); // version needed
            v.extend(0u16.to_le_bytes()); // flags
            v.extend(8u16.to_le_bytes()); // deflated
            v.extend(0u16.to_le_bytes()); // time
            v.extend(0x21u16.to_le_bytes()); // 1980-01-01
            v.extend(crc.to_le_bytes());
            v.extend((data.len() as u32).to_le_bytes());
            v.extend((*size as u32).to_le_bytes());
            v.extend((name.len() as u16).to_le_bytes());
            v.extend(0u16.to_le_bytes()); // extra
        };
        out.extend(0x04034b50u32.to_le_bytes());
        common(&mut out);
        out.extend(name.as_bytes());
        out.extend(data);
        dir.extend(0x02014b50u32.to_le_bytes());
        dir.extend(20u16.to_le_bytes()); // made by
        common(&mut dir);
        dir.extend([0u8; 8]); // comment, disk, internal and external attributes
        dir.extend([0u8; 2]);
        dir.extend(at.to_le_bytes());
        dir.extend(name.as_bytes());
    }
    let dir_at = out.len() as u32;
    out.extend(&dir);
    out.extend(0x06054b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((dir.len() as u32).to_le_bytes());
    out.extend(dir_at.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}
