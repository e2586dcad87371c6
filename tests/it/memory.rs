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
