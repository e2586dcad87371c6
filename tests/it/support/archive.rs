//! Archives for tests: tar entries with raw (also hostile) names, gzip.

/// A tar entry with a raw name (the tar crate refuses to write hostile names itself).
pub fn raw_entry(b: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, link: Option<&str>, data: &[u8]) {
    let mut h = tar::Header::new_old();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    if let Some(l) = link {
        h.as_old_mut().linkname[..l.len()].copy_from_slice(l.as_bytes());
    }
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

pub fn tar_of(entries: &[(&str, tar::EntryType, Option<&str>, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (n, k, l, d) in entries {
        raw_entry(&mut b, n, *k, *l, d);
    }
    b.into_inner().unwrap()
}

pub fn gz(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}
