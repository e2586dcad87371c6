//! Hostile inputs whose length fields say far more than the file holds: `inspect` reads each
//! under an address-space limit a few times the input's size (`ulimit -v`), so a reader that
//! allocates what a length field says, or a whole member of a wheel, dies for want of memory
//! instead of answering. Each must answer with the error naming the damage (or the targets).

use std::path::Path;

use crate::support::text;
use crate::support::wheel::{deflated, zip_of};

/// `rocmforge inspect FILE` with its address space limited to `mib` MiB (the debug binary
/// itself runs in under 100).
fn inspect_limited(home: &Path, file: &Path, mib: u64) -> std::process::Output {
    limited(home, &["inspect".as_ref(), file.as_os_str()], mib)
}

/// `rocmforge ARGS` with its address space limited to `mib` MiB.
fn limited(home: &Path, args: &[&std::ffi::OsStr], mib: u64) -> std::process::Output {
    std::process::Command::new("bash")
        .args(["-c", &format!("ulimit -v {} && exec \"$0\" \"$@\"", mib * 1024)])
        .arg(assert_cmd::cargo::cargo_bin("rocmforge"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// A kpack archive whose table of contents lists 30 million `gfx_arches`, one byte each
/// (rocm-kpack's MessagePack: 32 bytes each once decoded into a tree, 951 MB for 30 MB).
#[test]
fn a_kpack_table_of_one_byte_elements_is_read_in_bounded_memory() {
    let home = tempfile::tempdir().unwrap();
    let n: u32 = 30_000_000;
    let mut a = b"KPAK".to_vec();
    a.extend(1u32.to_le_bytes());
    a.extend(16u64.to_le_bytes());
    // {"gfx_arches": [nil; n]}
    a.push(0x81);
    a.push(0xaa);
    a.extend(b"gfx_arches");
    a.push(0xdd);
    a.extend(n.to_be_bytes());
    a.resize(a.len() + n as usize, 0xc0);
    let file = home.path().join("hostile.kpack");
    std::fs::write(&file, &a).unwrap();
    let out = inspect_limited(home.path(), &file, 200);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        err.contains(
            "hostile.kpack`: kpack archive (rocm-kpack's KPAK format, version 1): `gfx_arches` holds a non-string"
        ),
        "{err}"
    );
}

/// A compressed offload bundle (clang's `CCOB`, version 3, zstd) of a few hundred KB that
/// inflates to 512 MiB: a plain bundle whose one gfx1010 entry is zeros. Read under 200 MiB of
/// address space it answers with its target: the data is inflated as a stream and only the
/// bundle's table kept (a 143 KB bundle took 3.9 GB inflated whole).
#[test]
fn a_compressed_bundle_is_inflated_as_a_stream_in_bounded_memory() {
    use std::io::Write;
    let home = tempfile::tempdir().unwrap();
    let id = b"hipv4-amdgcn-amd-amdhsa--gfx1010";
    let mut table = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    table.extend(1u64.to_le_bytes());
    let table_len = (table.len() + 24 + id.len()) as u64;
    let uncompressed: u64 = 512 << 20;
    table.extend(table_len.to_le_bytes());
    table.extend((uncompressed - table_len).to_le_bytes());
    table.extend((id.len() as u64).to_le_bytes());
    table.extend(id);
    let mut z = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    z.write_all(&table).unwrap();
    let zeros = vec![0u8; 1 << 20];
    let mut left = uncompressed - table_len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        z.write_all(&zeros[..n]).unwrap();
        left -= n as u64;
    }
    let data = z.finish().unwrap();
    let mut b = b"CCOB".to_vec();
    b.extend(3u16.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend((32 + data.len() as u64).to_le_bytes());
    b.extend(uncompressed.to_le_bytes());
    b.extend([0u8; 8]);
    b.extend(&data);
    assert!(b.len() < 1 << 20, "the file is small: {} bytes", b.len());
    let file = home.path().join("big.hipfb");
    std::fs::write(&file, &b).unwrap();
    let out = inspect_limited(home.path(), &file, 200);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("big.hipfb: gfx1010"), "{}", text(&out));
}

/// A wheel member `head`, then `mib` MiB of zeros, then `tail`: deflated (a few KB for each
/// GiB: the zeros' deflated MiB repeated), its CRC-32 and its size, never held inflated.
fn inflating(head: &[u8], mib: u64, tail: &[u8]) -> (Vec<u8>, u32, u64) {
    let zeros = vec![0u8; 1 << 20];
    let chunk = deflated(&zeros, 9, false);
    let mut data = deflated(head, 9, false);
    let mut crc = flate2::Crc::new();
    crc.update(head);
    for _ in 0..mib {
        data.extend(&chunk);
        crc.update(&zeros);
    }
    data.extend(deflated(tail, 9, true));
    crc.update(tail);
    (data, crc.sum(), head.len() as u64 + (mib << 20) + tail.len() as u64)
}

/// A wheel of a few MB whose three members with device code or a place for it each inflate to
/// about 1 GiB: a host library (clang) padded with zeros, a plain offload bundle whose gfx1010
/// entry is zeros, and a `.kpack` archive (a hipcc gfx1010 code object, then zeros, then its
/// table at the end). `inspect` reads it under 200 MiB of address space and answers with each
/// member's targets (the library's headers, the bundle's table, the archive's table and its
/// kernel's header are read, the members inflated as a stream); `index publish` publishes it
/// under the same limit (it reads the wheel's METADATA only).
#[test]
fn a_wheel_whose_members_inflate_to_a_gibibyte_each_is_read_in_bounded_memory() {
    use crate::support::kpack;
    let home = tempfile::tempdir().unwrap();
    let lib =
        std::fs::read(kpack::c_library(&home.path().join("c"), "libbig.so", "int big(void) { return 1; }\n")).unwrap();
    let id = b"hipv4-amdgcn-amd-amdhsa--gfx1010";
    let mut bundle = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    bundle.extend(1u64.to_le_bytes());
    let table_len = (bundle.len() + 24 + id.len()) as u64;
    bundle.extend(table_len.to_le_bytes());
    bundle.extend((1023u64 << 20).to_le_bytes());
    bundle.extend((id.len() as u64).to_le_bytes());
    bundle.extend(id);
    let co = kpack::code_object("gfx1010");
    let archive = kpack::kpack_archive(&["gfx1010"], &[("big/libbig.so#0", "gfx1010", &co)], false);
    let toc_at = u64::from_le_bytes(archive[8..16].try_into().unwrap());
    let (mut before, table) = (archive[..toc_at as usize].to_vec(), &archive[toc_at as usize..]);
    before[8..16].copy_from_slice(&(toc_at + (1023 << 20)).to_le_bytes());
    let mut members = vec![
        ("big/libbig.so".to_string(), inflating(&lib, 1023, b"")),
        ("big/big.hipfb".to_string(), inflating(&bundle, 1023, b"")),
        ("big/.kpack/big_gfx1010.kpack".to_string(), inflating(&before, 1023, table)),
    ];
    let info = "big-1.0.dist-info";
    for (name, text) in [
        (format!("{info}/METADATA"), "Metadata-Version: 2.1\nName: big\nVersion: 1.0\n".to_string()),
        (format!("{info}/WHEEL"), "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_string()),
        (
            format!("{info}/RECORD"),
            members.iter().map(|(n, _)| format!("{n},,\n")).collect::<String>()
                + &format!("{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n"),
        ),
    ] {
        members.push((name, inflating(text.as_bytes(), 0, b"")));
    }
    let members: Vec<_> = members.into_iter().map(|(n, (d, c, s))| (n, d, c, s)).collect();
    assert_eq!(members.iter().filter(|m| m.3 > 1000 << 20).count(), 3, "three members of about 1 GiB");
    let wheel = home.path().join("big-1.0-py3-none-any.whl");
    std::fs::write(&wheel, zip_of(&members)).unwrap();
    let small = std::fs::metadata(&wheel).unwrap().len();
    assert!(small < 8 << 20, "the wheel is small: {small} bytes");

    let out = inspect_limited(home.path(), &wheel, 200);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in ["whl!big/big.hipfb: gfx1010", "whl!big/.kpack/big_gfx1010.kpack: gfx1010"] {
        assert!(stdout.contains(line), "{line}: {}", text(&out));
    }
    assert!(stdout.contains("whl!big/libbig.so"), "{}", text(&out));

    let index = home.path().join("idx");
    let out = limited(
        home.path(),
        &["index".as_ref(), "--index".as_ref(), index.as_os_str(), "publish".as_ref(), wheel.as_os_str()],
        200,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(index.join("simple/big/big-1.0-py3-none-any.whl").is_file(), "{}", text(&out));
}

/// A host library whose `.rocm_kpack_ref` marker names an archive beside it of 1 GiB (sparse:
/// its kernel, a hole, its table at the end), as a marker can name any file of what was given
/// (one named a 3 GiB file, read whole). `inspect` of the folder under 200 MiB of address space
/// credits the library with the archive's target: the archive is read by its table and its
/// kernel's header.
#[test]
fn an_archive_a_marker_names_is_read_by_its_table_in_bounded_memory() {
    use crate::support::kpack;
    use std::io::{Seek, SeekFrom, Write};
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("given");
    let marker = kpack::marker("lib/libx.so", &[".kpack/x_@GFXARCH@.kpack"]);
    kpack::marked_library(&dir.join("lib"), "libx.so", ".rocm_kpack_ref", &marker);
    let co = kpack::code_object("gfx1010");
    let archive = kpack::kpack_archive(&["gfx1010"], &[("lib/libx.so#0", "gfx1010", &co)], true);
    let toc_at = u64::from_le_bytes(archive[8..16].try_into().unwrap());
    let mut before = archive[..toc_at as usize].to_vec();
    before[8..16].copy_from_slice(&(toc_at + (1 << 30)).to_le_bytes());
    std::fs::create_dir_all(dir.join("lib/.kpack")).unwrap();
    let mut f = std::fs::File::create(dir.join("lib/.kpack/x_gfx1010.kpack")).unwrap();
    f.write_all(&before).unwrap();
    f.seek(SeekFrom::Current(1 << 30)).unwrap();
    f.write_all(&archive[toc_at as usize..]).unwrap();
    drop(f);
    let out = inspect_limited(home.path(), &dir, 200);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find(|l| l.contains("lib/libx.so")).unwrap_or_else(|| panic!("{}", text(&out)));
    assert!(line.contains("gfx1010"), "{}", text(&out));
}
