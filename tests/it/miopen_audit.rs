//! Issue 39: the MIOpen you did not build. The reader of the kernel sources a libMIOpen embeds
//! (`MIOPEN_KERNEL_*` data symbols), against shared libraries built here the way MIOpen's
//! `addkernels` lays them out, and the audit that compiles them with the stack's gfx101x checks
//! (clang-15 from Debian 12, the host's), against Debian's real libmiopen1 packages
//! (`ci/debian-miopen.sh`: unstable's 6.4.3, experimental's 7.2.4).

use std::path::{Path, PathBuf};

use rocmforge::offload::miopen;

use crate::support::{kpack, rocmforge, text};

/// One file embedded as MIOpen's build does: `const char MIOPEN_KERNEL_<KEY>[]` holding the
/// text and a NUL, and `const size_t MIOPEN_KERNEL_<KEY>_SIZE` its length (`size` overrides
/// it, to lie); includes get `_INCLUDE` after their key.
pub fn embed(name: &str, text: &[u8], include: bool, size: Option<usize>) -> String {
    let key = format!("MIOPEN_KERNEL_{}{}", miopen::symbol_key(name), if include { "_INCLUDE" } else { "" });
    let bytes: Vec<String> = text.iter().chain([&0u8]).map(|b| format!("0x{b:02x}")).collect();
    format!(
        "const unsigned long {key}_SIZE = {};\nconst char {key}[] = {{ {} }};\n",
        size.unwrap_or(text.len()),
        bytes.join(", ")
    )
}

/// A shared library embedding `files` (`(name, text, include)`), with the kernel map's file
/// names, the logging's `, MIOpen version 3.5.1.`, and the build parameters batchnorm's
/// solvers name (`MIO_BN_GFX103X`, ...) among its strings, and `extra` C code.
pub fn library(dir: &Path, lib_name: &str, files: &[(&str, &[u8], bool)], extra: &str) -> PathBuf {
    let mut c = String::from("#include <stddef.h>\n");
    c.push_str("const char *miopen_names[] = {");
    for (name, _, _) in files {
        c.push_str(&format!("{name:?}, "));
    }
    c.push_str("\", MIOpen version 3.5.1.\", \", HIP version 7.2.53211\", \" -DCK_AMD_GPU_GFX\", ");
    c.push_str("\"MIO_BN_GFX103X\", \"MIO_BN_GFX110X\", \"MIO_BN_GFX115X\", \"MIO_BN_GFX120X\" };\n");
    for (name, body, include) in files {
        c.push_str(&embed(name, body, *include, None));
    }
    c.push_str(extra);
    kpack::c_library(dir, lib_name, &c)
}

/// A kernel with every byte value but NUL, a `.cl` whose include is inlined, a HIP `.cpp` and
/// the include it names only in an `#include` line, and an assembly kernel.
fn sample_files() -> Vec<(&'static str, Vec<u8>, bool)> {
    let every: Vec<u8> = (1..=255u8).cycle().take(3000).collect();
    vec![
        (
            "MIOpenBatchNormFwdTrainSpatial.cl",
            b"__kernel void bn(__global float *x) { x[0] = 1.0f; }\n".to_vec(),
            false,
        ),
        (
            "gridwise_generic_reduction_x.cpp",
            b"#include \"reduction_common.hpp\"\nextern \"C\" __global__ void r() {}\n".to_vec(),
            false,
        ),
        ("conv1x1u-bias.s", every, false),
    ]
}

/// The reader recovers each file byte for byte with its name and the library's version; a file
/// cut short anywhere, a `_SIZE` that disagrees with its text, and a symbol whose size the
/// dynamic symbol table inflates are refused with an error naming what is wrong, never a panic
/// or a read past the file.
#[test]
fn the_reader_recovers_embedded_kernels_byte_for_byte_and_refuses_lying_tables() {
    let d = tempfile::tempdir().unwrap();
    let mut files = sample_files();
    files.push(("reduction_common.hpp", b"#pragma once\nstruct R {};\n".to_vec(), true));
    let refs: Vec<(&str, &[u8], bool)> = files.iter().map(|(n, t, i)| (*n, t.as_slice(), *i)).collect();
    // The include's name is not among the strings: only the `.cpp`'s #include line gives it.
    let mut c = String::from("const char *miopen_names[] = { \"MIOpenBatchNormFwdTrainSpatial.cl\", \"gridwise_generic_reduction_x.cpp\", \"conv1x1u-bias.s\", \", MIOpen version 3.5.1.\" };\n");
    for (n, t, i) in &refs {
        c.push_str(&embed(n, t, *i, None));
    }
    let lib = kpack::c_library(d.path(), "libMIOpen.so.1.0", &c);
    let e = miopen::read_embedded(&lib).unwrap();
    assert_eq!(e.miopen_version.as_deref(), Some("3.5.1"));
    assert_eq!(e.files.len(), 4, "{:?}", e.files);
    for (name, body, include) in &files {
        let f = e
            .files
            .iter()
            .find(|f| f.name.as_deref() == Some(*name))
            .unwrap_or_else(|| panic!("no {name}: {:?}", e.files));
        assert_eq!(&f.text, body, "{name}");
        assert_eq!(f.include, *include, "{name}");
    }
    // The tree: kernels and includes side by side in src/kernels, as MIOpen hands them over.
    let tree = d.path().join("tree");
    miopen::write_tree(&e, &lib, &tree).unwrap();
    for (name, body, _) in &files {
        assert_eq!(&std::fs::read(tree.join("src/kernels").join(name)).unwrap(), body, "{name}");
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tree.join(miopen::MANIFEST)).unwrap()).unwrap();
    assert_eq!(manifest["miopen_version"], "3.5.1");

    // Cut short anywhere: an error, never a panic.
    let bytes = std::fs::read(&lib).unwrap();
    for cut in (0..bytes.len()).step_by(97).chain([bytes.len() - 1]) {
        let r = std::panic::catch_unwind(|| miopen::read_embedded_bytes(&bytes[..cut]));
        assert!(matches!(r, Ok(Err(_))), "{cut} of {} bytes read as {r:?}", bytes.len());
    }
    // A _SIZE that says more than its text.
    let mut lying = String::new();
    lying.push_str(&embed("MIOpenBatchNormFwdTrainSpatial.cl", b"__kernel void f() {}", false, Some(1 << 40)));
    let liar = kpack::c_library(&d.path().join("liar"), "libMIOpen.so", &lying);
    let err = miopen::read_embedded(&liar).unwrap_err().to_string();
    assert!(
        err.contains("MIOPEN_KERNEL_MIOPENBATCHNORMFWDTRAINSPATIAL_SIZE says 1099511627776 bytes")
            && err.contains("a lying symbol table")
            && err.contains(&liar.display().to_string()),
        "{err}"
    );
    // The dynamic symbol table's st_size of the text inflated past its section.
    let mut inflated = bytes.clone();
    let entry = dynsym_entry(&bytes, "MIOPEN_KERNEL_CONV1X1U_BIAS");
    inflated[entry + 16..entry + 24].copy_from_slice(&(1u64 << 20).to_le_bytes());
    let err = miopen::read_embedded_bytes(&inflated).unwrap_err().to_string();
    assert!(err.contains("MIOPEN_KERNEL_CONV1X1U_BIAS") && err.contains("lying symbol table"), "{err}");
}

/// The file offset of `name`'s 24-byte Elf64_Sym in `.dynsym` (st_size at +16).
fn dynsym_entry(elf: &[u8], name: &str) -> usize {
    use object::{Object, ObjectSection};
    let f = object::File::parse(elf).unwrap();
    let dynsym = f.section_by_name(".dynsym").unwrap();
    let dynstr = f.section_by_name(".dynstr").unwrap().data().unwrap();
    let (offset, size) = dynsym.file_range().unwrap();
    (0..size as usize / 24)
        .map(|i| offset as usize + i * 24)
        .find(|&at| {
            let n = u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
            dynstr[n..].split(|b| *b == 0).next() == Some(name.as_bytes())
        })
        .unwrap_or_else(|| panic!("no {name} in .dynsym"))
}

/// Debian's libmiopen1 of `version` (`6.4.3`, `7.2.4`), unpacked by `ci/debian-miopen.sh`.
pub fn debian_miopen(version: &str) -> PathBuf {
    let lib = crate::support::repo_root()
        .join("target/debian-miopen")
        .join(version)
        .join("usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0");
    assert!(
        lib.is_file(),
        "{} is missing: run `bash ci/debian-miopen.sh` (ci/setup.sh does) to download Debian's libmiopen1 packages",
        lib.display()
    );
    lib
}

/// The failing compiles of a check on `target`, as (kernel, first message line).
fn failures(check: &serde_json::Value, target: &str) -> Vec<(String, String)> {
    check["compiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["target"] == target && c["ok"] == false)
        .map(|c| {
            let msg = c["message"].as_array().and_then(|m| m.first()).and_then(|m| m.as_str()).unwrap_or("");
            (c["kernel"].as_str().unwrap().to_string(), msg.to_string())
        })
        .collect()
}

/// `rocmforge inspect` on Debian's real libmiopen1 7.2.4 (MIOpen 3.5.1) and 6.4.3 (MIOpen
/// 3.4.0), for gfx1010 with clang-15: both fail batchnorm on gfx1010 where gfx900 compiles
/// (the assembler rejects the DPP `row_bcast` operand in the four spatial kernels that reach
/// the DPP reduction), and both fail every legacy-CK reduction on gfx1010: 6.4.3 with the old
/// `#error Need to define (only) one GPU target` (its host code names no CK_AMD_GPU_GFX1010),
/// 7.2.4 with config.hpp's new `No CK_AMD_GPU_GFX* macro defined` (its host code completes
/// ` -DCK_AMD_GPU_GFX` with the device name, and config.hpp lists no gfx101x). Each failure is
/// printed with its kernel, target, compiler message and what to do. The kernel sweep runs too,
/// bounded here to five kernel files (`--sweep-only`; the whole library is some 130 files, about
/// 12 minutes on 2 cores: docs/miopen-audit.md): Softmax (three `USE_SOFTMAX_*` variants),
/// CTCLoss (its parameters read from its text and the library's strings), Neuron compile on gfx1010; Conv1x1J1 fails on
/// gfx900 too (lower-case parameters the sweep does not guess: not proved); the legacy-CK
/// reduction fails on gfx1010 alone with the same `#error` as the legacy-CK check. All three
/// checks ran, so `inspect` exits 0. docs/miopen-audit.md records the same runs.
#[test]
fn debians_libmiopen_7_2_4_and_6_4_3_fail_batchnorm_and_legacy_ck_on_gfx1010() {
    let home = tempfile::tempdir().unwrap();
    for (version, miopen_version, ck_error) in [
        ("7.2.4", "3.5.1", "error: No CK_AMD_GPU_GFX* macro defined. Exactly one target must be defined."),
        ("6.4.3", "3.4.0", "error: Need to define (only) one GPU target"),
    ] {
        let lib = debian_miopen(version);
        let work = home.path().join(version);
        let out = rocmforge(home.path())
            .args(["inspect", "--target", "gfx1010", "--sweep-only", SWEEP_SUBSET, "--kernels-dir"])
            .arg(&work)
            .arg(&lib)
            .timeout(std::time::Duration::from_secs(3600))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let tree = work.join("0-libMIOpen.so.1.0");
        // The text: the version from the library, the compiler that ran, each failure with its
        // target, kernel and the compiler's message, and what to do.
        for want in [
            format!("MIOpen {miopen_version}, built with HIP "),
            "  compiler: /usr/lib/llvm-15/bin/clang (a distribution's clang (/usr/lib/llvm-15), Debian clang version 15.0.6)".into(),
            "  batchnorm (batchnorm's OpenCL kernels (DPP `row_bcast` reduction)): FAIL: ".into(),
            format!("    FAILED gfx1010 MIOpenBatchNormFwdTrainSpatial.cl: {}", tree.join("tree/src/kernels/MIOpenBatchNormFwdTrainSpatial.cl").display()),
            "    what to do: build MIOpen with the rocm-6.2 stack (its patch 0001".into(),
            "    assumed: MIO_BN_GFXnnnX=1 only on gfxnnn* targets".into(),
            "  legacy-ck (the legacy composable-kernel reductions (target macro, buffer resource dword)): FAIL: 12 of 12 compiles for gfx1010 fail, and compile for gfx900".into(),
            format!("    FAILED gfx1010 gridwise_generic_reduction_first_call_blockwise_reduce_all_dims.cpp: {}", tree.join("tree/src/kernels/config.hpp").display()),
            "    what to do: build MIOpen with the rocm-6.2 stack (its patch 0003 gives gfx101x a target macro); with this MIOpen, `MIOPEN_RNNWRW_REDUCTION=0`".into(),
        ] {
            assert!(stdout.lines().any(|l| l.starts_with(&want)), "no line `{want}`:\n{}", text(&out));
        }
        let json = |name: &str| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(tree.join(format!("{name}.json"))).unwrap()).unwrap()
        };
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tree.join("tree").join(miopen::MANIFEST)).unwrap()).unwrap();
        assert_eq!(manifest["miopen_version"], miopen_version);
        assert!(manifest["files"].as_array().unwrap().len() > 200, "{manifest}");

        let bn = json("batchnorm");
        assert_eq!(bn["pass"], false, "{bn}");
        let failed: std::collections::BTreeSet<String> = failures(&bn, "gfx1010")
            .into_iter()
            .filter(|(_, m)| m.contains("error: not a valid operand."))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            failed.into_iter().collect::<Vec<_>>(),
            [
                "MIOpenBatchNormActivBwdSpatial.cl",
                "MIOpenBatchNormActivFwdTrainSpatial.cl",
                "MIOpenBatchNormBwdSpatial.cl",
                "MIOpenBatchNormFwdTrainSpatial.cl"
            ],
            "{bn}"
        );
        // The control compiles the DPP path, and row_bcast is in its code.
        let control_dpp: u64 = bn["compiles"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["target"] == "gfx900" && c["ok"] == true)
            .filter_map(|c| c["row_bcast"].as_u64())
            .sum();
        assert!(control_dpp > 0, "{bn}");

        let ck = json("legacy-ck");
        assert_eq!(ck["pass"], false, "{ck}");
        let f = failures(&ck, "gfx1010");
        assert_eq!(f.len(), 12, "{ck}");
        assert!(f.iter().all(|(k, m)| k.starts_with("gridwise_generic_reduction_") && m.contains(ck_error)), "{f:?}");
        assert!(failures(&ck, "gfx900").is_empty(), "{ck}");

        // The sweep: every check ran (exit 0), and the subset's outcomes.
        assert!(out.status.success(), "{}", text(&out));
        let sweep = json("sweep");
        let mut got: Vec<(String, String)> = sweep["compiles"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["target"] == "gfx1010")
            .map(|c| (c["kernel"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string()))
            .collect();
        got.sort();
        let want: Vec<(String, String)> = [
            ("MIOpenCTCLoss.cl", "ok"),
            ("MIOpenConv1x1J1.cl", "inconclusive"),
            ("MIOpenNeuron.cl", "ok"),
            ("MIOpenSoftmax.cl", "ok"),
            ("MIOpenSoftmax.cl", "ok"),
            ("MIOpenSoftmax.cl", "ok"),
            (REDUCTION, "FAILED"),
        ]
        .iter()
        .map(|(k, s)| (k.to_string(), s.to_string()))
        .collect();
        assert_eq!(got, want, "{sweep}");
        let reduction = failures(&sweep, "gfx1010").into_iter().find(|(k, _)| k == REDUCTION).unwrap();
        assert!(reduction.1.contains(ck_error), "{reduction:?}");
        assert!(failures(&sweep, "gfx900").iter().all(|(k, _)| k == "MIOpenConv1x1J1.cl"), "{sweep}");
        for want in [
            "  sweep (every embedded kernel file (.cl, .cpp, .s) compiled, against the gfx900 control): FAIL: 1 of 7 compiles for gfx1010 fail, and compile for gfx900; 1 fail on the gfx900 control too".to_string(),
            format!("    FAILED gfx1010 {REDUCTION}: {}", tree.join("tree/src/kernels/config.hpp").display()),
            "    assumed: MIOpenCTCLoss.cl: ALPHA_OFFSET=1 BATCH_SZ=1 ".into(),
            "    assumed: exclusion not applied (no host code to check it against): bugzilla_34765_detect.s *, exclusions-rocm-6.2.tsv:".into(),
            "    what to do: build MIOpen with the rocm-6.2 stack, whose kernels pass this sweep".into(),
        ] {
            assert!(stdout.lines().any(|l| l.starts_with(&want)), "no line `{want}`:\n{}", text(&out));
        }
    }
}

/// The kernel files the Debian test sweeps (`inspect --sweep-only`): a few seconds each but the
/// reduction (about a minute for gfx1010 and gfx900 on 2 cores).
const SWEEP_SUBSET: &str = r"^(MIOpenSoftmax\.cl|MIOpenCTCLoss\.cl|MIOpenConv1x1J1\.cl|MIOpenNeuron\.cl|gridwise_generic_reduction_first_call_blockwise_reduce_all_dims\.cpp)$";
const REDUCTION: &str = "gridwise_generic_reduction_first_call_blockwise_reduce_all_dims.cpp";

/// `doctor --rocm-path DIR` audits the installation's libMIOpen (found through `lib/`, the
/// versioned file behind `libMIOpen.so`): an installation whose library embeds Debian 7.2.4's
/// real MIOpenBatchNormFwdTrainSpatial.cl fails batchnorm on the requested gfx1012, naming the
/// kernel, the target, the assembler's message and what to do; `--no-kernel-checks` skips it.
#[test]
fn doctor_rocm_path_audits_the_installations_libmiopen() {
    let home = tempfile::tempdir().unwrap();
    let real = miopen::read_embedded(&debian_miopen("7.2.4")).unwrap();
    let kernel = real.files.iter().find(|f| f.name.as_deref() == Some("MIOpenBatchNormFwdTrainSpatial.cl")).unwrap();
    let rocm = home.path().join("opt/rocm-7.2.4");
    let lib = library(
        &rocm.join("lib"),
        "libMIOpen.so.1.0",
        &[("MIOpenBatchNormFwdTrainSpatial.cl", &kernel.text, false)],
        "",
    );
    std::os::unix::fs::symlink("libMIOpen.so.1.0", rocm.join("lib/libMIOpen.so")).unwrap();
    let out = rocmforge(home.path())
        .args(["doctor", "--target", "gfx1012", "--rocm-path"])
        .arg(&rocm)
        .timeout(std::time::Duration::from_secs(1800))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    for want in [
        format!("MIOpen kernels of the --rocm-path: MIOpen 3.5.1, built with HIP 7.2.53211: {}", lib.display()),
        "  batchnorm (batchnorm's OpenCL kernels (DPP `row_bcast` reduction)): FAIL: ".into(),
        "    FAILED gfx1012 MIOpenBatchNormFwdTrainSpatial.cl: ".into(),
        "    what to do: build MIOpen with the rocm-6.2 stack (its patch 0001".into(),
    ] {
        assert!(stdout.lines().any(|l| l.starts_with(&want)), "no line `{want}`:\n{}", text(&out));
    }
    let failed =
        stdout.lines().find(|l| l.starts_with("    FAILED gfx1012 MIOpenBatchNormFwdTrainSpatial.cl: ")).unwrap();
    assert!(failed.contains("error: not a valid operand."), "{failed}");
    let out = rocmforge(home.path())
        .args(["doctor", "--no-kernel-checks", "--target", "gfx1012", "--rocm-path"])
        .arg(&rocm)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("MIOpen kernels"), "{}", text(&out));
}

/// The legacy-CK check reads the buffer resource's third dword in the compiled code: on Debian
/// 7.2.4's real kernel tree, cut to one reduction, with config.hpp given a gfx1010 target macro
/// (as a patch would), gfx1010 placed in the gfx9 dword branch compiles but its code builds
/// buffer resources with 0x00020000, which the check fails naming both values; placed in the
/// gfx10 branch its code holds config.hpp's 0x31014000 and the check passes.
#[test]
fn the_legacy_ck_check_fails_gfx10_code_holding_the_gfx9_buffer_dword() {
    let home = tempfile::tempdir().unwrap();
    let lib = debian_miopen("7.2.4");
    let real = miopen::read_embedded(&lib).unwrap();
    const KEEP: &str = "gridwise_generic_reduction_first_call_blockwise_reduce_all_dims.cpp";
    for (branch, passes) in [("defined(CK_AMD_GPU_GFX900) ||", false), ("defined(CK_AMD_GPU_GFX1030) ||", true)] {
        let tree = home.path().join(if passes { "gfx10" } else { "gfx9" });
        miopen::write_tree(&real, &lib, &tree).unwrap();
        let kernels = tree.join(miopen::KERNEL_DIR);
        for e in std::fs::read_dir(&kernels).unwrap() {
            let n = e.unwrap().file_name().into_string().unwrap();
            if n.starts_with("gridwise_generic_reduction_") && n.ends_with(".cpp") && n != KEEP {
                std::fs::remove_file(kernels.join(n)).unwrap();
            }
        }
        let config = kernels.join("config.hpp");
        let original = std::fs::read_to_string(&config).unwrap();
        // The target list's first test, then the chosen dword branch's first.
        let list = "#if !(defined(CK_AMD_GPU_GFX803) ||";
        assert!(original.contains(list), "{}", config.display());
        let mut edited =
            original.replacen(list, "#if !(defined(CK_AMD_GPU_GFX1010) || defined(CK_AMD_GPU_GFX803) ||", 1);
        let dword = edited.find("// buffer resourse").expect("config.hpp's buffer resource section");
        let at = dword
            + edited[dword..].find(branch).unwrap_or_else(|| panic!("no `{branch}` after the buffer resource comment"));
        edited.insert_str(at, "defined(CK_AMD_GPU_GFX1010) || ");
        std::fs::write(&config, edited).unwrap();
        let json = home.path().join(format!("{passes}.json"));
        let out = std::process::Command::new("python3")
            .arg(crate::support::repo_root().join("recipes/checks/miopen-legacy-ck/check.py"))
            .arg("--src")
            .arg(&tree)
            .args(["--clang", "/usr/lib/llvm-15/bin/clang", "--rocm", "/usr", "--targets", "gfx1010", "--work"])
            .arg(home.path().join(format!("work-{passes}")))
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        let result: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))).unwrap();
        let compiles = result["compiles"].as_array().unwrap();
        assert!(!compiles.is_empty() && compiles.iter().all(|c| c["kernel"] == KEEP), "{result}");
        assert_eq!(result["pass"], passes, "{}", text(&out));
        for c in compiles {
            if passes {
                assert_eq!(c["buffer_dwords"], serde_json::json!(["0x31014000"]), "{c}");
            } else {
                assert_eq!(c["ok"], false, "{c}");
                assert_eq!(
                    c["message"][0],
                    "the code builds buffer resources with dword 0x00020000 (the gfx9 value), not 0x31014000 (config.hpp's gfx10 value)",
                    "{c}"
                );
            }
        }
    }
}
