//! Property tests of the archive extractor: tar, tar.gz and zip archives built in memory with odd
//! names, sizes, link targets and truncated streams never panic, an error names the archive, and
//! nothing is ever written outside the destination.

use std::path::{Component, Path, PathBuf};

use proptest::prelude::*;

use super::{extract, ArchiveFormat};

#[derive(Debug, Clone)]
enum Kind {
    File(Vec<u8>),
    Dir,
    Symlink(Vec<u8>),
    HardLink(Vec<u8>),
    Fifo,
    Char,
}

#[derive(Debug, Clone)]
struct Entry {
    name: Vec<u8>,
    kind: Kind,
    mode: u32,
    /// Tar only: the size the header claims, when it is not the data's.
    claimed_size: Option<u64>,
}

/// Paths made of a few odd components: `..`, `.`, empty, absolute, spaces, non-UTF-8, long.
fn path() -> impl Strategy<Value = Vec<u8>> {
    let usual = prop::sample::select(vec![b"a".to_vec(), b"b".to_vec(), b"pkg-1.0".to_vec(), b"l".to_vec()]);
    let odd = prop::sample::select(vec![
        b"..".to_vec(),
        b".".to_vec(),
        b"".to_vec(),
        b"x y".to_vec(),
        "é".as_bytes().to_vec(),
        vec![0xff, 0xfe],
        b"\\".to_vec(),
        vec![b'n'; 60],
    ]);
    let component = prop_oneof![8 => usual, 1 => odd];
    (
        prop::sample::select(vec!["", "", "", "", "", "", "", "/", "./"]),
        proptest::collection::vec(component, 1..4),
        any::<bool>(),
    )
        .prop_map(|(lead, parts, trailing)| {
            let mut p = lead.as_bytes().to_vec();
            p.extend(parts.join(&b'/'));
            if trailing {
                p.push(b'/');
            }
            p
        })
}

fn entry() -> impl Strategy<Value = Entry> {
    let kind = prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..600).prop_map(Kind::File),
        2 => Just(Kind::Dir),
        3 => path().prop_map(Kind::Symlink),
        2 => path().prop_map(Kind::HardLink),
        1 => prop_oneof![Just(Kind::Fifo), Just(Kind::Char)],
    ];
    (
        path(),
        kind,
        prop::sample::select(vec![0, 0o644, 0o755, 0o4777, 0o000, 0o7777]),
        proptest::option::weighted(0.1, 0u64..2000),
    )
        .prop_map(|(name, kind, mode, claimed_size)| Entry { name, kind, mode, claimed_size })
}

fn tar_bytes(entries: &[Entry], gnu: bool) -> Vec<u8> {
    use tar::{EntryType, Header};
    let mut out = Vec::new();
    for e in entries {
        let mut h = if gnu { Header::new_gnu() } else { Header::new_ustar() };
        let name = &e.name[..e.name.len().min(100)];
        h.as_old_mut().name = [0; 100];
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_mode(e.mode);
        let (ty, data, link): (EntryType, &[u8], &[u8]) = match &e.kind {
            Kind::File(d) => (EntryType::Regular, d, b""),
            Kind::Dir => (EntryType::Directory, b"", b""),
            Kind::Symlink(t) => (EntryType::Symlink, b"", t),
            Kind::HardLink(t) => (EntryType::Link, b"", t),
            Kind::Fifo => (EntryType::Fifo, b"", b""),
            Kind::Char => (EntryType::Char, b"", b""),
        };
        let link = &link[..link.len().min(100)];
        h.as_old_mut().linkname = [0; 100];
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        h.set_entry_type(ty);
        h.set_size(e.claimed_size.unwrap_or(data.len() as u64));
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().next_multiple_of(512), 0);
    }
    out.extend_from_slice(&[0; 1024]);
    out
}

fn zip_bytes(entries: &[Entry]) -> Vec<u8> {
    use std::io::Write;
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for e in entries {
        let name = String::from_utf8_lossy(&e.name).to_string();
        let opts = zip::write::SimpleFileOptions::default().unix_permissions(e.mode);
        let ok = match &e.kind {
            Kind::File(d) => z.start_file(name, opts).and_then(|()| Ok(z.write_all(d)?)),
            Kind::Dir => z.add_directory(name, opts),
            Kind::Symlink(t) => z.add_symlink(name, String::from_utf8_lossy(t), opts),
            Kind::HardLink(_) | Kind::Fifo | Kind::Char => continue,
        };
        // The writer refuses some names (duplicates): such an entry is left out.
        if ok.is_err() {
            continue;
        }
    }
    z.finish().map(std::io::Cursor::into_inner).unwrap_or_default()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    g.write_all(bytes).unwrap();
    g.finish().unwrap()
}

/// `p` with `.` and `..` resolved lexically.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Every path under `dir` (not following symlinks).
fn walk(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir).follow_links(false).into_iter().filter_map(Result::ok).map(|e| e.into_path()).collect()
}

/// Extracts archive after archive into one destination; checks the properties after each.
fn check(archives: Vec<(Vec<u8>, ArchiveFormat)>, strip: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let outer = base.join("outer");
    let dest = outer.join("dest");
    std::fs::create_dir_all(&dest).unwrap();
    for (i, (bytes, format)) in archives.into_iter().enumerate() {
        let archive = base.join(format!("src-{i}.archive"));
        std::fs::write(&archive, &bytes).unwrap();
        if let Err(e) = extract(&archive, format, &dest, strip) {
            let msg = e.to_string();
            assert!(msg.contains(&archive.display().to_string()), "the error does not name the archive: {msg}");
        }
        // Nothing beside the destination, nothing beside the archives.
        for (dir, allowed) in [(&base, "outer"), (&outer, "dest")] {
            for e in std::fs::read_dir(dir).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().to_string();
                assert!(name == allowed || name.starts_with("src-"), "`{name}` was written in {}", dir.display());
            }
        }
        // Every symlink in the destination stays inside it.
        for p in walk(&dest) {
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                let target = std::fs::read_link(&p).unwrap();
                let resolved = lexical(&p.parent().unwrap().join(&target));
                assert!(resolved.starts_with(&dest), "{} -> {} leaves the destination", p.display(), target.display());
            }
            if m.is_file() {
                use std::os::unix::fs::MetadataExt;
                assert_eq!(m.nlink() > 1, has_twin(&dest, &p), "{} is linked outside the destination", p.display());
            }
        }
    }
}

/// Whether another file under `dest` is the same inode as `p`.
fn has_twin(dest: &Path, p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::symlink_metadata(p).unwrap().ino();
    walk(dest).iter().any(|q| q != p && std::fs::symlink_metadata(q).is_ok_and(|m| m.is_file() && m.ino() == ino))
}

#[derive(Debug, Clone, Copy)]
enum Wrap {
    Tar,
    GnuTar,
    TarGz,
    Zip,
}

fn archive() -> impl Strategy<Value = (Vec<u8>, ArchiveFormat)> {
    let wrap = prop::sample::select(vec![Wrap::Tar, Wrap::GnuTar, Wrap::TarGz, Wrap::Zip]);
    (proptest::collection::vec(entry(), 0..8), wrap, proptest::option::weighted(0.2, any::<prop::sample::Index>()))
        .prop_map(|(entries, wrap, cut)| {
            let (mut bytes, format) = match wrap {
                Wrap::Tar => (tar_bytes(&entries, false), ArchiveFormat::Tar),
                Wrap::GnuTar => (tar_bytes(&entries, true), ArchiveFormat::Tar),
                Wrap::TarGz => (gzip(&tar_bytes(&entries, false)), ArchiveFormat::TarGz),
                Wrap::Zip => (zip_bytes(&entries), ArchiveFormat::Zip),
            };
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            (bytes, format)
        })
}

proptest! {
    #[test]
    fn generated_archives(archives in proptest::collection::vec(archive(), 1..3), strip in 0u32..3) {
        check(archives, strip);
    }

    #[test]
    fn any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048), format in prop::sample::select(vec![
        ArchiveFormat::Tar, ArchiveFormat::TarGz, ArchiveFormat::TarXz, ArchiveFormat::TarBz2, ArchiveFormat::TarZst, ArchiveFormat::Zip,
    ])) {
        check(vec![(bytes, format)], 0);
    }
}
