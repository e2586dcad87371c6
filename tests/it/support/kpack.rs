//! rocm-kpack's forms, written here (tests/it/inspect.rs, tests/it/verify.rs): `.kpack` archives
//! laid out as rocm-kpack's `PackedKernelArchive.write` lays them out, MessagePack as the msgpack
//! package writes it, and host libraries built by clang-15 with a marker section.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A MessagePack value for the kpack writer below (the subset rocm-kpack's tables use).
pub enum Mp {
    U(u64),
    S(String),
    A(Vec<Mp>),
    M(Vec<(String, Mp)>),
}

pub fn s(v: &str) -> Mp {
    Mp::S(v.to_string())
}

/// MessagePack, as the msgpack package writes it (smallest form of each value).
pub fn pack(v: &Mp, out: &mut Vec<u8>) {
    let len = |n: usize, small: u8, tags: [u8; 2], out: &mut Vec<u8>| {
        if n < 16 {
            out.push(small | n as u8);
        } else if n < 1 << 16 {
            out.push(tags[0]);
            out.extend((n as u16).to_be_bytes());
        } else {
            out.push(tags[1]);
            out.extend((n as u32).to_be_bytes());
        }
    };
    match v {
        Mp::U(n) if *n < 128 => out.push(*n as u8),
        Mp::U(n) => {
            out.push(0xcf);
            out.extend(n.to_be_bytes());
        }
        Mp::S(t) => {
            assert!(t.len() < 256);
            if t.len() < 32 {
                out.push(0xa0 | t.len() as u8);
            } else {
                out.extend([0xd9, t.len() as u8]);
            }
            out.extend(t.as_bytes());
        }
        Mp::A(items) => {
            len(items.len(), 0x90, [0xdc, 0xdd], out);
            items.iter().for_each(|i| pack(i, out));
        }
        Mp::M(pairs) => {
            len(pairs.len(), 0x80, [0xde, 0xdf], out);
            for (k, v) in pairs {
                pack(&s(k), out);
                pack(v, out);
            }
        }
    }
}

/// A `.kpack` archive as rocm-kpack's `PackedKernelArchive.write` lays it out: the `KPAK`
/// header (version 1, the table's offset), padding to 64, the kernels (`zstd`: a u32 count, then
/// a u32 size and a zstd frame each; else each as it is, listed in `blobs`), then the table.
/// `kernels`: (table key, architecture, code object).
pub fn kpack_archive(arches: &[&str], kernels: &[(&str, &str, &[u8])], zstd: bool) -> Vec<u8> {
    let mut out = b"KPAK".to_vec();
    out.extend(1u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.resize(64, 0);
    let start = out.len() as u64;
    let mut scheme = vec![];
    if zstd {
        let mut blob = (kernels.len() as u32).to_le_bytes().to_vec();
        for (_, _, code) in kernels {
            let frame = zstd::encode_all(*code, 3).unwrap();
            blob.extend((frame.len() as u32).to_le_bytes());
            blob.extend(frame);
        }
        scheme.push(("compression_scheme".into(), s("zstd-per-kernel")));
        scheme.push(("zstd_offset".into(), Mp::U(start)));
        scheme.push(("zstd_size".into(), Mp::U(blob.len() as u64)));
        out.extend(blob);
    } else {
        let mut blobs = vec![];
        for (_, _, code) in kernels {
            blobs.push(Mp::M(vec![
                ("offset".into(), Mp::U(out.len() as u64)),
                ("size".into(), Mp::U(code.len() as u64)),
            ]));
            out.extend(*code);
        }
        scheme.push(("compression_scheme".into(), s("none")));
        scheme.push(("blobs".into(), Mp::A(blobs)));
    }
    let mut toc: Vec<(String, Mp)> = vec![];
    for (i, (key, arch, code)) in kernels.iter().enumerate() {
        let entry = Mp::M(vec![
            ("type".into(), s("hsaco")),
            ("ordinal".into(), Mp::U(i as u64)),
            ("original_size".into(), Mp::U(code.len() as u64)),
        ]);
        match toc.iter_mut().find(|(k, _)| k == key) {
            Some((_, Mp::M(m))) => m.push((arch.to_string(), entry)),
            _ => toc.push((key.to_string(), Mp::M(vec![(arch.to_string(), entry)]))),
        }
    }
    let mut table = vec![
        ("format_version".into(), Mp::U(1)),
        ("group_name".into(), s("torch")),
        ("gfx_arch_family".into(), s("gfx101X")),
        ("gfx_arches".into(), Mp::A(arches.iter().map(|a| s(a)).collect())),
        ("toc".into(), Mp::M(toc)),
    ];
    table.extend(scheme);
    let toc_offset = out.len() as u64;
    pack(&Mp::M(table), &mut out);
    out[8..16].copy_from_slice(&toc_offset.to_le_bytes());
    out
}

/// A host library (clang-15, C) whose section `section` holds `content`, as rocm-kpack's
/// transform leaves one: no `.hip_fatbin` code, a marker saying where the code went.
pub fn marked_library(dir: &Path, name: &str, section: &str, content: &[u8]) -> PathBuf {
    let bytes: Vec<String> = content.iter().map(|b| format!("{b:#04x}")).collect();
    let c = format!(
        "__attribute__((section(\"{section}\"), used)) static const unsigned char marker[] = {{{}}};\nint host_only(void) {{ return 1; }}\n",
        bytes.join(",")
    );
    c_library(dir, name, &c)
}

/// A shared library `dir/name` compiled from C source `c` by clang-15.
pub fn c_library(dir: &Path, name: &str, c: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, c).unwrap();
    let lib = dir.join(name);
    let out = Command::new("clang-15")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run clang-15: {e} (ci/setup.sh installs it)"));
    assert!(out.status.success(), "clang-15 failed: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(src).unwrap();
    lib
}

/// `{kernel_name, kpack_search_paths}`, as rocm-kpack's `add_kpack_ref_section` packs it.
pub fn marker(kernel_name: &str, paths: &[&str]) -> Vec<u8> {
    let mut out = vec![];
    pack(
        &Mp::M(vec![
            ("kpack_search_paths".into(), Mp::A(paths.iter().map(|p| s(p)).collect())),
            ("kernel_name".into(), s(kernel_name)),
        ]),
        &mut out,
    );
    out
}

/// The code object of the test kernel for `target` (hipcc), made once per test run and target.
pub fn code_object(target: &str) -> Vec<u8> {
    static C: std::sync::Mutex<Vec<(String, Vec<u8>)>> = std::sync::Mutex::new(Vec::new());
    let mut made = C.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, co)) = made.iter().find(|(t, _)| t == target) {
        return co.clone();
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kpack-co-{target}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("k.hip"), super::HIP_KERNEL).unwrap();
    let arch = format!("--offload-arch={target}");
    let out = format!("{target}.co");
    super::hipcc(&dir, &["--cuda-device-only", "--no-gpu-bundle-output", &arch, "-c", "k.hip", "-o", &out]);
    let co = std::fs::read(dir.join(out)).unwrap();
    made.push((target.to_string(), co.clone()));
    co
}

/// Code objects of the test kernel for gfx1010 and gfx1030 (hipcc), made once.
pub fn code_objects() -> &'static (Vec<u8>, Vec<u8>) {
    static C: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    C.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kpack-co-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k.hip"), super::HIP_KERNEL).unwrap();
        for t in ["gfx1010", "gfx1030"] {
            super::hipcc(
                &dir,
                &[
                    "--cuda-device-only",
                    "--no-gpu-bundle-output",
                    &format!("--offload-arch={t}"),
                    "-c",
                    "k.hip",
                    "-o",
                    &format!("{t}.co"),
                ],
            );
        }
        (std::fs::read(dir.join("gfx1010.co")).unwrap(), std::fs::read(dir.join("gfx1030.co")).unwrap())
    })
}
