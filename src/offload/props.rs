//! Property tests of the device-code reader: arbitrary bytes, damaged bundles (plain and
//! compressed) and damaged ELF files never make it panic; well-formed bundles in a host ELF
//! file, plain or compressed, give back exactly the targets put in.

use proptest::prelude::*;

use super::{bundle, inspect_bytes};

/// A minimal little-endian ELF64 file: header, the sections' bytes, a section-name table and
/// the section headers.
pub(crate) fn elf(machine: u16, flags: u32, os_abi: u8, abi_version: u8, sections: &[(&str, &[u8])]) -> Vec<u8> {
    let mut names = vec![0u8];
    let mut name_offsets = Vec::new();
    for (n, _) in sections {
        name_offsets.push(names.len() as u32);
        names.extend(n.as_bytes());
        names.push(0);
    }
    let shstrtab_name = names.len() as u32;
    names.extend(b".shstrtab\0");
    let mut body = Vec::new();
    let mut offsets = Vec::new();
    for (_, data) in sections {
        while (64 + body.len()) % 16 != 0 {
            body.push(0);
        }
        offsets.push((64 + body.len()) as u64);
        body.extend(*data);
    }
    let names_offset = (64 + body.len()) as u64;
    body.extend(&names);
    while (64 + body.len()) % 8 != 0 {
        body.push(0);
    }
    let shoff = (64 + body.len()) as u64;
    let shnum = sections.len() as u16 + 2;
    let mut out = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, os_abi, abi_version, 0, 0, 0, 0, 0, 0, 0];
    out.extend(3u16.to_le_bytes()); // ET_DYN
    out.extend(machine.to_le_bytes());
    out.extend(1u32.to_le_bytes());
    out.extend(0u64.to_le_bytes()); // entry
    out.extend(0u64.to_le_bytes()); // phoff
    out.extend(shoff.to_le_bytes());
    out.extend(flags.to_le_bytes());
    out.extend(64u16.to_le_bytes());
    out.extend(56u16.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out.extend(64u16.to_le_bytes());
    out.extend(shnum.to_le_bytes());
    out.extend((shnum - 1).to_le_bytes());
    out.extend(&body);
    let header = |out: &mut Vec<u8>, name: u32, kind: u32, offset: u64, size: u64| {
        out.extend(name.to_le_bytes());
        out.extend(kind.to_le_bytes());
        out.extend(0u64.to_le_bytes()); // flags
        out.extend(0u64.to_le_bytes()); // addr
        out.extend(offset.to_le_bytes());
        out.extend(size.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend(1u64.to_le_bytes());
        out.extend(0u64.to_le_bytes());
    };
    header(&mut out, 0, 0, 0, 0);
    for (i, (_, data)) in sections.iter().enumerate() {
        header(&mut out, name_offsets[i], 1, offsets[i], data.len() as u64); // SHT_PROGBITS
    }
    header(&mut out, shstrtab_name, 3, names_offset, names.len() as u64); // SHT_STRTAB
    out
}

/// A little-endian ELF file with the ELF64 layout, of `class` (2: ELFCLASS64), type `e_type` and
/// machine `machine`, whose program headers `(p_type, p_flags)` start `gap` bytes past the
/// header; a body follows.
pub(crate) fn with_program_headers(
    class: u8,
    e_type: u16,
    machine: u16,
    gap: usize,
    headers: &[(u32, u32)],
) -> Vec<u8> {
    let mut out = vec![0x7f, b'E', b'L', b'F', class, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    out.extend(e_type.to_le_bytes());
    out.extend(machine.to_le_bytes());
    out.extend(1u32.to_le_bytes());
    out.extend(0u64.to_le_bytes()); // entry
    out.extend((64 + gap as u64).to_le_bytes()); // phoff
    out.extend(0u64.to_le_bytes()); // shoff
    out.extend(0u32.to_le_bytes()); // flags
    out.extend(64u16.to_le_bytes());
    out.extend(56u16.to_le_bytes());
    out.extend((headers.len() as u16).to_le_bytes());
    out.extend([0u8; 6]); // shentsize, shnum, shstrndx
    out.resize(64 + gap, 0xaa);
    for (kind, flags) in headers {
        out.extend(kind.to_le_bytes());
        out.extend(flags.to_le_bytes());
        out.extend([0u8; 48]);
    }
    out.extend([0u8; 100]);
    out
}

/// A plain bundle of (entry id, bytes), laid out as clang's bundler writes it.
pub(crate) fn plain_bundle(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut header = bundle::MAGIC.to_vec();
    header.extend((entries.len() as u64).to_le_bytes());
    let table: usize = entries.iter().map(|(id, _)| 24 + id.len()).sum();
    let mut offset = (header.len() + table) as u64;
    let mut body: Vec<u8> = Vec::new();
    for (id, data) in entries {
        header.extend(offset.to_le_bytes());
        header.extend((data.len() as u64).to_le_bytes());
        header.extend((id.len() as u64).to_le_bytes());
        header.extend(id.as_bytes());
        body.extend(data);
        offset += data.len() as u64;
    }
    header.extend(body);
    header
}

/// `plain` compressed as clang's bundler writes it (`version` 2 or 3; `zstd` or zlib).
pub(crate) fn compressed_bundle(plain: &[u8], version: u16, zstd: bool) -> Vec<u8> {
    let data = if zstd {
        zstd::encode_all(plain, 3).unwrap()
    } else {
        use std::io::Write;
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(plain).unwrap();
        e.finish().unwrap()
    };
    let mut out = bundle::COMPRESSED_MAGIC.to_vec();
    out.extend(version.to_le_bytes());
    out.extend(u16::from(zstd).to_le_bytes());
    if version == 2 {
        out.extend(((24 + data.len()) as u32).to_le_bytes());
        out.extend((plain.len() as u32).to_le_bytes());
    } else {
        out.extend(((32 + data.len()) as u64).to_le_bytes());
        out.extend((plain.len() as u64).to_le_bytes());
    }
    out.extend(0u64.to_le_bytes());
    out.extend(data);
    out
}

/// MessagePack of a string, an unsigned number, a list or a map of strings to values.
fn mp_str(s: &str) -> Vec<u8> {
    let mut o = vec![0xd9, s.len() as u8];
    o.extend(s.as_bytes());
    o
}

fn mp_u(n: u64) -> Vec<u8> {
    let mut o = vec![0xcf];
    o.extend(n.to_be_bytes());
    o
}

fn mp_array(items: Vec<Vec<u8>>) -> Vec<u8> {
    let mut o = vec![0xdc];
    o.extend((items.len() as u16).to_be_bytes());
    items.into_iter().for_each(|i| o.extend(i));
    o
}

fn mp_map(pairs: Vec<(&str, Vec<u8>)>) -> Vec<u8> {
    let mut o = vec![0xde];
    o.extend((pairs.len() as u16).to_be_bytes());
    for (k, v) in pairs {
        o.extend(mp_str(k));
        o.extend(v);
    }
    o
}

/// A `.kpack` archive (rocm-kpack's layout) holding one code object per target, filed under
/// `lib/x.so#0`, zstd-compressed or stored.
pub(crate) fn kpack_archive(targets: &[(String, Vec<u8>)], zstd: bool) -> Vec<u8> {
    let mut out = b"KPAK".to_vec();
    out.extend(1u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.resize(64, 0);
    let start = out.len() as u64;
    let mut scheme = Vec::new();
    if zstd {
        let mut blob = (targets.len() as u32).to_le_bytes().to_vec();
        for (_, code) in targets {
            let frame = zstd::encode_all(code.as_slice(), 1).unwrap();
            blob.extend((frame.len() as u32).to_le_bytes());
            blob.extend(frame);
        }
        scheme.push(("compression_scheme", mp_str("zstd-per-kernel")));
        scheme.push(("zstd_offset", mp_u(start)));
        scheme.push(("zstd_size", mp_u(blob.len() as u64)));
        out.extend(blob);
    } else {
        let mut blobs = Vec::new();
        for (_, code) in targets {
            blobs.push(mp_map(vec![("offset", mp_u(out.len() as u64)), ("size", mp_u(code.len() as u64))]));
            out.extend(code);
        }
        scheme.push(("compression_scheme", mp_str("none")));
        scheme.push(("blobs", mp_array(blobs)));
    }
    let per_arch: Vec<(&str, Vec<u8>)> = targets
        .iter()
        .enumerate()
        .map(|(i, (t, _))| (super::processor(t), mp_map(vec![("type", mp_str("hsaco")), ("ordinal", mp_u(i as u64))])))
        .collect();
    let mut table = vec![
        ("gfx_arches", mp_array(targets.iter().map(|(t, _)| mp_str(super::processor(t))).collect())),
        ("toc", mp_map(vec![("lib/x.so#0", mp_map(per_arch))])),
    ];
    table.extend(scheme);
    let toc = out.len() as u64;
    out.extend(mp_map(table));
    out[8..16].copy_from_slice(&toc.to_le_bytes());
    out
}

/// Code objects (ELF headers with the target's flags) for distinct processors.
fn code_objects(t: &[String]) -> Vec<(String, Vec<u8>)> {
    let mut seen = std::collections::BTreeSet::new();
    t.iter()
        .filter(|t| seen.insert(super::processor(t).to_string()))
        .map(|t| {
            let (mach, xnack) = match super::processor(t) {
                "gfx803" => (0x02a, 0),
                "gfx906" => (0x02f, 0),
                "gfx90a" => (0x03f, 0x200),
                "gfx1010" => (0x033, if t.ends_with("xnack-") { 0x200 } else { 0x100 }),
                _ => (0x036, 0x100),
            };
            (t.clone(), elf(224, mach | xnack, 64, 2, &[(".text", b"\0\0\0\0")]))
        })
        .collect()
}

fn targets() -> impl Strategy<Value = Vec<String>> {
    let one = prop::sample::select(vec!["gfx803", "gfx906", "gfx90a:xnack-", "gfx1010", "gfx1010:xnack-", "gfx1030"]);
    proptest::collection::btree_set(one, 1..4).prop_map(|s| s.into_iter().map(str::to_string).collect())
}

fn entries(targets: &[String]) -> Vec<(String, Vec<u8>)> {
    let mut e = vec![("host-x86_64-unknown-linux".to_string(), Vec::new())];
    e.extend(targets.iter().map(|t| (format!("hipv4-amdgcn-amd-amdhsa--{t}"), vec![7u8; 40])));
    e
}

/// Damages `bytes`: overwrites a few bytes, or cuts it short.
fn damage(bytes: Vec<u8>, edits: Vec<(usize, u8)>, cut: Option<usize>) -> Vec<u8> {
    let mut b = bytes;
    for (at, v) in edits {
        if !b.is_empty() {
            let i = at % b.len();
            b[i] = v;
        }
    }
    if let Some(c) = cut {
        let keep = c % (b.len() + 1);
        b.truncate(keep);
    }
    b
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), lead in 0u8..5) {
        let mut b = match lead {
            0 => Vec::new(),
            1 => bundle::MAGIC.to_vec(),
            2 => bundle::COMPRESSED_MAGIC.to_vec(),
            3 => b"KPAK\x01\x00\x00\x00".to_vec(),
            _ => b"\x7fELF\x02\x01\x01".to_vec(),
        };
        b.extend(bytes);
        let _ = inspect_bytes("x", &b);
        let _ = super::elf::host_stack(&b);
        let _ = super::elf::stream_stack(&mut b.as_slice());
        let _ = super::elf::read_stack(&mut std::io::Cursor::new(&b));
    }

    #[test]
    fn damaged_bundles_and_elf_files_never_panic(
        t in targets(),
        form in 0u8..5,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let plain = plain_bundle(&entries(&t));
        let b = match form {
            0 => plain,
            1 => compressed_bundle(&plain, 2, false),
            2 => compressed_bundle(&plain, 3, true),
            3 => elf(62, 0, 0, 0, &[(".hip_fatbin", &plain)]),
            _ => elf(224, 0x233, 64, 2, &[(".text", b"\0\0\0\0")]),
        };
        let _ = inspect_bytes("x", &damage(b, edits, cut));
    }

    /// `.kpack` archives and `.rocm_kpack_ref` markers, damaged: an error or a result, never a
    /// panic; whole, the archive gives back the targets of its code objects.
    #[test]
    fn kpack_archives_and_markers_give_back_their_targets_and_damage_never_panics(
        t in targets(),
        zstd in any::<bool>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let code = code_objects(&t);
        let archive = kpack_archive(&code, zstd);
        let got = inspect_bytes("x.kpack", &archive).unwrap().unwrap();
        let mut want: Vec<String> = code.iter().map(|(t, _)| t.clone()).collect();
        want.sort_by_key(|s| (super::processor(s).len(), s.clone()));
        prop_assert_eq!(got.targets, want);
        let _ = inspect_bytes("x.kpack", &damage(archive, edits.clone(), cut));
        let marker = mp_map(vec![("kernel_name", mp_str("lib/x.so")), ("kpack_search_paths", mp_array(vec![mp_str("../.kpack/x_@GFXARCH@.kpack")]))]);
        let lib = elf(62, 0, 0, 0, &[(".text", b"\xc3"), (".rocm_kpack_ref", &damage(marker, edits, cut))]);
        let _ = inspect_bytes("lib.so", &lib);
    }

    #[test]
    fn bundles_in_a_host_library_give_back_their_targets(t in targets(), form in 0u8..5) {
        let plain = plain_bundle(&entries(&t));
        let section = match form {
            0 => plain,
            1 => compressed_bundle(&plain, 2, false),
            2 => compressed_bundle(&plain, 2, true),
            3 => compressed_bundle(&plain, 3, false),
            _ => compressed_bundle(&plain, 3, true),
        };
        let file = elf(62, 0, 0, 0, &[(".text", b"\xc3"), (".hip_fatbin", &section)]);
        let got = inspect_bytes("lib.so", &file).unwrap().unwrap();
        let mut want = t.clone();
        want.sort_by_key(|s| (super::processor(s).len(), s.clone()));
        prop_assert_eq!(got.targets, want);
    }
}

#[test]
fn amdgpu_code_object_header_names_its_target() {
    let co = elf(224, 0x233, 64, 2, &[(".text", b"\0\0\0\0")]);
    let got = inspect_bytes("k.co", &co).unwrap().unwrap();
    assert_eq!(got.kind, super::FileKind::CodeObject);
    assert_eq!(got.targets, ["gfx1010:xnack-"]);
}

#[test]
fn version_1_compressed_bundle_runs_to_the_next_one() {
    let a = plain_bundle(&entries(&["gfx1010".to_string()]));
    let b = plain_bundle(&entries(&["gfx1030".to_string()]));
    let v1 = |plain: &[u8]| {
        let mut out = bundle::COMPRESSED_MAGIC.to_vec();
        out.extend(1u16.to_le_bytes());
        out.extend(1u16.to_le_bytes());
        out.extend((plain.len() as u32).to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend(zstd::encode_all(plain, 3).unwrap());
        out
    };
    let mut section = v1(&a);
    section.extend(v1(&b));
    let got = inspect_bytes("x.hipfb", &section).unwrap().unwrap();
    assert_eq!(got.targets, ["gfx1010", "gfx1030"]);
}

/// A table naming one long binary for many kernels (the same architecture over and over, all
/// one code object): each kernel would copy the name, so the names would cost many times what
/// the archive holds. Refused before they do.
#[test]
fn a_kpack_table_naming_its_kernels_many_times_over_is_refused() {
    let co = elf(224, 0x233, 64, 2, &[(".text", b"\0\0\0\0")]);
    let mut out = b"KPAK".to_vec();
    out.extend(1u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.resize(64, 0);
    out.extend(&co);
    let name = "x".repeat(250);
    let again: Vec<(&str, Vec<u8>)> = (0..200).map(|_| ("gfx1010", mp_map(vec![("ordinal", mp_u(0))]))).collect();
    let table = vec![
        ("gfx_arches", mp_array(vec![mp_str("gfx1010")])),
        ("compression_scheme", mp_str("none")),
        ("blobs", mp_array(vec![mp_map(vec![("offset", mp_u(64)), ("size", mp_u(co.len() as u64))])])),
        ("toc", mp_map(vec![(name.as_str(), mp_map(again))])),
    ];
    let toc = out.len() as u64;
    out.extend(mp_map(table));
    out[8..16].copy_from_slice(&toc.to_le_bytes());
    let e = inspect_bytes("x.kpack", &out).unwrap_err().to_string();
    assert!(e.contains("the table names its kernels over more bytes than the whole archive holds"), "{e}");
    // Named once, the same archive is read.
    let once = kpack_archive(&[("gfx1010".to_string(), co)], false);
    assert_eq!(inspect_bytes("y.kpack", &once).unwrap().unwrap().targets, ["gfx1010:xnack-"]);
}
