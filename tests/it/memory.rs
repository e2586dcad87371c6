//! Hostile inputs whose length fields say far more than the file holds: `inspect` reads each
//! under an address-space limit a few times the input's size (`ulimit -v`), so a reader that
//! allocates what a length field says, or a whole member of a wheel, dies for want of memory
//! instead of answering. Each must answer with the error naming the damage (or the targets).

use std::path::Path;

use crate::support::text;

/// `rocmforge inspect FILE` with its address space limited to `mib` MiB (the debug binary
/// itself runs in under 100).
fn inspect_limited(home: &Path, file: &Path, mib: u64) -> std::process::Output {
    std::process::Command::new("bash")
        .args(["-c", &format!("ulimit -v {} && exec \"$0\" inspect \"$1\"", mib * 1024)])
        .arg(assert_cmd::cargo::cargo_bin("rocmforge"))
        .arg(file)
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
