//! The shared batchnorm check (recipes/checks/miopen-batchnorm/check.py) against a stand-in
//! MIOpen tree written here: a kernel whose guard picks the DPP `row_bcast` reduction unless a
//! `MIO_BN_GFX*` define says otherwise, and a solver that sets those defines from the device
//! name, as MIOpen's do. Compiled with this machine's clang-15 (the stack's clang in a night),
//! each object disassembled with the llvm-objdump beside it.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::repo_root;

const REDUCTION_H: &str = r#"// stand-in of the DPP reduction: a broadcast only gfx8/gfx9 can encode
#if MIOPEN_USE_AMDGCN
static inline float reduce_step(float x)
{
    float r;
    __asm__ volatile("v_add_f32 %0, %1, %1 row_bcast:15 row_mask:0xa" : "=v"(r) : "v"(x));
    return r;
}
#else
static inline float reduce_step(float x) { return x + x; }
#endif
"#;

/// The kernel; `GUARD` is the condition that takes the LDS path.
const KERNEL: &str = r#"#if GUARD
#define MIOPEN_USE_AMDGCN 0
#else
#define MIOPEN_USE_AMDGCN 1
#endif
#include "reduction_functions.h"
__kernel void MIOpenBatchNormFwdTrainSpatial(__global float* x, __global float* y)
{
    int i = get_global_id(0);
    y[i] = CALL * (float)(MIO_BN_VARIANT + MIO_BN_N);
}
"#;

/// The solver; `EXTRA` is where the patch adds its define.
const SOLVER: &str = r#"namespace miopen { namespace solver { namespace batchnorm {
ConvSolution BnFwdTrainingSpatialSingle::GetSolution(const ExecutionContext& context,
                                                     const miopen::batchnorm::ProblemDescription& problem) const
{
    auto kernel        = KernelInfo{};
    kernel.kernel_file = "MIOpenBatchNormFwdTrainSpatial.cl";
    int n              = problem.GetXDesc().GetLengths()[0];
    int variant        = (n >= 32) ? 1 : 3;
    auto build_params  = KernelBuildParameters{
        {"MIO_BN_N", n},
        {"MIO_BN_VARIANT", variant},EXTRA
        {"MIO_BN_GFX103X", (StartsWith(context.GetStream().GetDeviceName(), "gfx103") ? "1" : "0")},
    };
    return result;
}
}}}
"#;

const SOLVER_PATCH: &str =
    "\n        {\"MIO_BN_GFX101X\", (StartsWith(context.GetStream().GetDeviceName(), \"gfx101\") ? \"1\" : \"0\")},";

struct Tree {
    _home: tempfile::TempDir,
    src: PathBuf,
    work: PathBuf,
}

/// A stand-in tree: `kernel_guard` decides the LDS path, `solver_sets_101x` adds the patch's
/// define to the solver, `calls_reduction` whether the kernel calls the DPP function at all.
fn tree(kernel_guard: &str, solver_sets_101x: bool, calls_reduction: bool) -> Tree {
    let home = tempfile::tempdir().unwrap();
    let src = home.path().join("MIOpen");
    let write = |rel: &str, text: &str| {
        let p = src.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("src/comgr.cpp", "#define OCL_EARLY_INLINE 1\n\n#define OCL_STANDARD 200\n");
    write("src/kernels/reduction_functions.h", REDUCTION_H);
    let call = if calls_reduction { "reduce_step(x[i])" } else { "x[i]" };
    write(
        "src/kernels/MIOpenBatchNormFwdTrainSpatial.cl",
        &KERNEL.replace("GUARD", kernel_guard).replace("CALL", call),
    );
    write(
        "src/solver/batchnorm/forward_spatial_single.cpp",
        &SOLVER.replace("EXTRA", if solver_sets_101x { SOLVER_PATCH } else { "" }),
    );
    let work = home.path().join("kernels");
    Tree { _home: home, src, work }
}

fn check(t: &Tree, targets: &str) -> (Output, String) {
    let device_libs = Path::new("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode");
    assert!(
        device_libs.join("ockl.bc").exists(),
        "Debian's device libs (package rocm-device-libs, via hipcc) are missing"
    );
    let out = std::process::Command::new("python3")
        .arg(repo_root().join("recipes/checks/miopen-batchnorm/check.py"))
        .arg("--src")
        .arg(&t.src)
        .args(["--clang", "clang-15", "--targets", targets, "--device-libs"])
        .arg(device_libs)
        .arg("--work")
        .arg(&t.work)
        .output()
        .expect("python3 runs the check");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out, text)
}

fn rows<'a>(text: &'a str, status: &str, target: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(&format!("{status:<7} {target:<8} "))).collect()
}

#[test]
fn unpatched_the_gfx1010_compiles_fail_naming_the_kernel_and_the_assemblers_error() {
    let t = tree("MIO_BN_GFX103X", false, true);
    let (out, text) = check(&t, "gfx1010;gfx900");
    assert_eq!(out.status.code(), Some(1), "{text}");
    // Both variants the solver can pass, for gfx1010: DPP path, the assembler refuses it.
    let failed = rows(&text, "FAILED", "gfx1010");
    assert_eq!(failed.len(), 2, "{text}");
    assert!(
        failed.iter().all(|l| l.contains("MIOpenBatchNormFwdTrainSpatial.cl") && l.contains("reduction=dpp")),
        "{text}"
    );
    assert!(text.contains("not a valid operand") && text.contains("row_bcast:15"), "{text}");
    // gfx900 can: its objects compile and their disassembly shows the broadcast.
    let ok = rows(&text, "ok", "gfx900");
    assert_eq!(ok.len(), 2, "{text}");
    assert!(ok.iter().all(|l| l.contains("row_bcast=1 ")), "{text}");
    assert!(text.contains("summary: 4 compiles for gfx1010;gfx900: 2 ok, 2 FAILED"), "{text}");
}

#[test]
fn patched_every_gfx1010_object_takes_the_lds_path_and_holds_no_row_bcast() {
    let t = tree("(MIO_BN_GFX101X || MIO_BN_GFX103X)", true, true);
    let (out, text) = check(&t, "gfx1010;gfx900");
    assert_eq!(out.status.code(), Some(0), "{text}");
    let ok = rows(&text, "ok", "gfx1010");
    assert_eq!(ok.len(), 2, "{text}");
    assert!(ok.iter().all(|l| l.contains("reduction=lds row_bcast=0 ") && l.contains("MIO_BN_GFX101X=1")), "{text}");
    assert!(rows(&text, "ok", "gfx900").iter().all(|l| l.contains("reduction=dpp row_bcast=1 ")), "{text}");
    // The OpenCL version came from the tree's comgr.cpp, and each object's disassembly is kept.
    let log =
        std::fs::read_to_string(t.work.join("gfx1010.MIOpenBatchNormFwdTrainSpatial.v1.forward_spatial_single.log"))
            .unwrap();
    assert!(log.contains("-cl-std=CL2.0 -D__OPENCL_VERSION__=200"), "{log}");
    let asm =
        std::fs::read_to_string(t.work.join("gfx1010.MIOpenBatchNormFwdTrainSpatial.v1.forward_spatial_single.s"))
            .unwrap();
    assert!(asm.contains("MIOpenBatchNormFwdTrainSpatial") && !asm.contains("row_bcast"), "{asm}");
}

#[test]
fn kernels_patched_without_their_solver_fail_as_a_mismatch() {
    // The kernel tests MIO_BN_GFX101X, the solver never sets it: gfx1010 would still take the
    // DPP path on the card.
    let t = tree("(MIO_BN_GFX101X || MIO_BN_GFX103X)", false, true);
    let (out, text) = check(&t, "gfx1010");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("MIOpenBatchNormFwdTrainSpatial.cl tests MIO_BN_GFX101X but src/solver/batchnorm/forward_spatial_single.cpp never sets it"),
        "{text}"
    );
}

#[test]
fn a_gfx9_dpp_object_without_row_bcast_means_the_disassembly_was_not_read() {
    // The guards pick DPP for gfx900 but nothing calls it: the objects hold no broadcast, which
    // the check cannot tell from a reader that saw nothing, so it fails rather than pass gfx10.
    let t = tree("(MIO_BN_GFX101X || MIO_BN_GFX103X)", true, false);
    let (out, text) = check(&t, "gfx900");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("gfx900: 2 objects took the DPP reduction and their disassembly shows no row_bcast"),
        "{text}"
    );
    // A tree without an OpenCL version to read is refused, not guessed.
    std::fs::write(t.src.join("src/comgr.cpp"), "// nothing\n").unwrap();
    let (out, text) = check(&t, "gfx900");
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("src/comgr.cpp: no `#define OCL_STANDARD 120|200`"), "{text}");
}
