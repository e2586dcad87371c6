//! The embedded `rocm-6.2` stack against what its upstream CMake files require (issue #12,
//! section 2; the audit is `docs/real-stack.md`). Each row names the upstream file and line at
//! the tag it was read at; a recipe edit that drops an edge or an option found there fails here.
//!
//! Edges are checked on the closure and the build order the engine uses (`BuildGraph`), so a
//! dependency that would only be satisfied by timing (both in one wave) fails too.

use rocmforge::graph::BuildGraph;
use rocmforge::recipe::{load_stack, RecipeTree, Stack};

const STACK: &str = "rocm-6.2";

/// (recipe, dependency it must be built after, where upstream requires it).
const EDGES: &[(&str, &str, &str)] = &[
    ("hipblaslt", "hipblas", "hipBLASLt rocm-6.2.2 CMakeLists.txt:228 find_package(hipblas REQUIRED CONFIG)"),
    ("hipblaslt", "clr", "hipBLASLt rocm-6.2.2 CMakeLists.txt:152 find_package(hip REQUIRED CONFIG)"),
    (
        "rocsolver",
        "rocsparse",
        "rocSOLVER rocm-6.2.2 CMakeLists.txt:130,196 BUILD_WITH_SPARSE ON -> find_package(rocsparse REQUIRED)",
    ),
    ("rocsolver", "rocblas", "rocSOLVER rocm-6.2.2 CMakeLists.txt:187 find_package(rocblas REQUIRED CONFIG)"),
    ("rocsolver", "rocprim", "rocSOLVER rocm-6.2.2 CMakeLists.txt:205 find_package(rocprim REQUIRED CONFIG)"),
    (
        "rocsparse",
        "rocblas",
        "rocSPARSE rocm-6.2.2 CMakeLists.txt:79,178 BUILD_WITH_ROCBLAS ON, QUIET find: decided as an edge",
    ),
    ("rocsparse", "rocprim", "rocSPARSE rocm-6.2.2 CMakeLists.txt:176 find_package(rocprim REQUIRED)"),
    (
        "hipsparse",
        "rocsparse",
        "hipSPARSE rocm-6.2.2 cmake/Dependencies.cmake:42 find_package(rocsparse REQUIRED CONFIG)",
    ),
    ("hipblas", "rocblas", "hipBLAS rocm-6.2.2 library/src/CMakeLists.txt:74 find_package(rocblas REQUIRED CONFIG)"),
    (
        "hipblas",
        "rocsolver",
        "hipBLAS rocm-6.2.2 library/src/CMakeLists.txt:92 find_package(rocsolver REQUIRED CONFIG)",
    ),
    (
        "hipsolver",
        "rocblas",
        "hipSOLVER rocm-6.2.2 library/src/CMakeLists.txt:109 find_package(rocblas REQUIRED CONFIG)",
    ),
    (
        "hipsolver",
        "rocsolver",
        "hipSOLVER rocm-6.2.2 library/src/CMakeLists.txt:120 find_package(rocsolver REQUIRED CONFIG)",
    ),
    ("hipfft", "rocfft", "hipFFT rocm-6.2.2 cmake/dependencies.cmake:48 find_package(rocfft REQUIRED)"),
    ("hiprand", "rocrand", "hipRAND rocm-6.2.2 cmake/Dependencies.cmake:62 find_package(rocrand REQUIRED CONFIG)"),
    ("hipcub", "rocprim", "hipCUB rocm-6.2.2 cmake/Dependencies.cmake:207 find_package(rocprim CONFIG REQUIRED)"),
    (
        "rocthrust",
        "rocprim",
        "rocThrust rocm-6.2.2 cmake/Dependencies.cmake:17 find_package(rocprim QUIET), else downloads it",
    ),
    ("rocblas", "tensile", "rocBLAS rocm-6.2.2 CMakeLists.txt:168 virtualenv_install(Tensile_TEST_LOCAL_PATH)"),
    ("rocblas", "llvm", "Tensile rocm-6.2.4 Tensile/Source/lib/CMakeLists.txt:55 find_package(LLVM REQUIRED CONFIG)"),
    ("miopen", "rocblas", "MIOpen rocm-6.2.2 CMakeLists.txt:334 find_package(rocblas REQUIRED)"),
    ("miopen", "comgr", "MIOpen rocm-6.2.2 CMakeLists.txt:420 find_package(amd_comgr REQUIRED CONFIG)"),
    (
        "miopen",
        "clr",
        "MIOpen rocm-6.2.2 CMakeLists.txt:218,429 find_package(hip REQUIRED), find_package(hiprtc REQUIRED)",
    ),
    ("miopen", "rocrand", "MIOpen rocm-6.2.2 CMakeLists.txt:518 MIOPEN_BUILD_DRIVER -> find_package(rocrand REQUIRED)"),
    ("miopen", "roctracer", "MIOpen rocm-6.2.2 CMakeLists.txt:495 find_library(rocTracer roctx64)"),
    ("miopen", "half", "MIOpen rocm-6.2.2 CMakeLists.txt:442 find_path(HALF_INCLUDE_DIR half/half.hpp)"),
    ("miopen", "rocm-cmake", "MIOpen rocm-6.2.2 CMakeLists.txt:70 find_package(ROCM 0.7.3 REQUIRED)"),
    ("half", "rocm-cmake", "half rocm-6.0.2 CMakeLists.txt:17 find_package(ROCM REQUIRED)"),
    ("rocminfo", "rocr", "rocminfo rocm-6.2.2 CMakeLists.txt:63 find_package(hsa-runtime64 1.0 REQUIRED)"),
    ("rocr", "roct", "ROCR-Runtime rocm-6.2.4 src/CMakeLists.txt:99 find_package(hsakmt 1.0 REQUIRED)"),
    (
        "rocr",
        "llvm",
        "ROCR-Runtime rocm-6.2.4 src/core/runtime/blit_shaders/CMakeLists.txt:48 find_package(Clang REQUIRED)",
    ),
    ("roctracer", "rocr", "roctracer rocm-6.2.2 CMakeLists.txt:53 find_package(hsa-runtime64 REQUIRED CONFIG)"),
    ("roctracer", "clr", "roctracer rocm-6.2.2 CMakeLists.txt:54 find_package(HIP REQUIRED CONFIG)"),
    (
        "roctracer",
        "comgr",
        "roctracer rocm-6.2.2 plugin/file/CMakeLists.txt:23 find_package(amd_comgr REQUIRED CONFIG)",
    ),
    ("clr", "rocr", "clr rocm-6.2.2 rocclr/cmake/ROCclrHSA.cmake:21 find_package(hsa-runtime64 1.11 REQUIRED CONFIG)"),
    ("clr", "comgr", "clr rocm-6.2.2 rocclr/cmake/ROCclrLC.cmake:21 find_package(amd_comgr 2.8 REQUIRED CONFIG)"),
    ("clr", "llvm", "clr rocm-6.2.2 hipamd/src/CMakeLists.txt:190 find_package(LLVM REQUIRED CONFIG)"),
    ("composable-kernel", "clr", "composable_kernel rocm-6.2.2 CMakeLists.txt:264 find_package(HIP REQUIRED)"),
];

/// (recipe, argument it must pass, why).
const ARGS: &[(&str, &str, &str)] = &[
    ("rocsparse", "-DBUILD_WITH_ROCBLAS=ON", "rocSPARSE CMakeLists.txt:79: decided, not left to a QUIET find"),
    ("rocsolver", "-DBUILD_WITH_SPARSE=ON", "rocSOLVER CMakeLists.txt:130: stated with its rocsparse edge"),
    ("hipsolver", "-DBUILD_WITH_SPARSE=OFF", "hipSOLVER: sparse API needs SuiteSparse, not in the stack"),
    ("rocrand", "-DROCRAND_USE_TBB=OFF", "rocRAND library/CMakeLists.txt:126-128: QUIET find of the host's TBB"),
    (
        "rocr",
        "-DCMAKE_DISABLE_FIND_PACKAGE_rocprofiler-register=ON",
        "ROCR src/CMakeLists.txt:304: optional find outside the stack",
    ),
    (
        "clr",
        "-DHIP_ENABLE_ROCPROFILER_REGISTER=OFF",
        "clr hipamd/src/CMakeLists.txt:302-306: REQUIRED find, not in the stack",
    ),
    (
        "llvm",
        "-DLLVM_ENABLE_RUNTIMES=compiler-rt;openmp",
        "compiler-rt: clr hipamd/hip-config-amd.cmake:159-189 links its builtins into hip::host/hip::device; \
         openmp: Tensile Source/CMakeLists.txt:39,67-74 compiles with -fopenmp by the stack's clang",
    ),
    (
        "llvm",
        "-DLLVM_ENABLE_PER_TARGET_RUNTIME_DIR=OFF",
        "ROCm's layout: builtins in llvm/lib/clang/18/lib/linux, libomp in llvm/lib",
    ),
    ("llvm", "-DCOMPILER_RT_BUILD_BUILTINS=ON", "the builtins are what clr's hip-config and hipcc link"),
    (
        "rocminfo",
        "-DROCRTST_BLD_TYPE=Release",
        "rocminfo CMakeLists.txt:65-72,116: its build type comes from ROCRTST_BLD_TYPE (Debug otherwise)",
    ),
    ("rocfft", "-DSQLITE_USE_SYSTEM_PACKAGE=ON", "rocFFT cmake/sqlite.cmake:27: else downloads SQLite at configure"),
    ("miopen", "-DMIOPEN_USE_COMPOSABLEKERNEL=OFF", "gfx10: composable_kernel 6.2 has no gfx101 buffer resource"),
];

/// (recipe, option prefix it must not pass: the option does not exist at the tag read).
const ABSENT: &[(&str, &str, &str)] = &[(
    "hipsparse",
    "-DBUILD_CLIENTS_BENCHMARKS",
    "hipSPARSE rocm-6.2.2 has only BUILD_CLIENTS_TESTS and BUILD_CLIENTS_SAMPLES (CMakeLists.txt:76-77)",
)];

/// (recipe, Python package its build venv must bring, why).
const REQUIREMENTS: &[(&str, &str, &str)] = &[
    ("clr", "CppHeaderParser", "clr hipamd/src/CMakeLists.txt:239-251: FATAL_ERROR without it (USE_PROF_API ON)"),
    ("roctracer", "CppHeaderParser", "roctracer rocm-6.2.2 src/CMakeLists.txt:36-44: FATAL_ERROR without it"),
    ("hipblaslt", "cmake", "hipBLASLt CMakeLists.txt:24: cmake_minimum_required(VERSION 3.25.2 FATAL_ERROR)"),
];

fn stack() -> Stack {
    load_stack(&RecipeTree::embedded(), STACK).unwrap_or_else(|d| panic!("the embedded {STACK} stack: {d}"))
}

fn args(stack: &Stack, recipe: &str) -> Vec<String> {
    stack.recipe(recipe).unwrap_or_else(|| panic!("no recipe {recipe}")).build.args.clone()
}

#[test]
fn every_upstream_edge_orders_the_build() {
    let stack = stack();
    let mut failures = Vec::new();
    for (recipe, dep, why) in EDGES {
        let graph = BuildGraph::closure(&stack, &[recipe.to_string()]).unwrap();
        let order = graph.order();
        let at = |n: &str| order.iter().position(|o| *o == n);
        match (at(dep), at(recipe)) {
            (Some(d), Some(r)) if d < r => {}
            _ => failures.push(format!("{recipe} must build after {dep}: {why} (order: {order:?})")),
        }
        // Never side by side: a dependency in the same wave would make the result depend on timing.
        let waves = graph.waves();
        if waves.iter().any(|w| w.contains(recipe) && w.contains(dep)) {
            failures.push(format!("{recipe} and {dep} share a wave: {why}"));
        }
    }
    assert!(failures.is_empty(), "{} edge(s) missing:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn pytorch_closure_builds_hipblas_before_hipblaslt_and_rocsparse_before_rocsolver() {
    // The two edges the first read found missing, in the closure a user builds.
    let stack = stack();
    let graph = BuildGraph::closure(&stack, &["pytorch".to_string()]).unwrap();
    let order = graph.order();
    let at = |n: &str| order.iter().position(|o| *o == n).unwrap_or_else(|| panic!("{n} not in {order:?}"));
    assert!(at("hipblas") < at("hipblaslt"), "{order:?}");
    assert!(at("rocsparse") < at("rocsolver"), "{order:?}");
    assert!(at("rocblas") < at("rocsparse"), "{order:?}");
    assert!(graph.deps_of("hipblaslt").contains(&"hipblas"), "{:?}", graph.deps_of("hipblaslt"));
}

#[test]
fn every_decided_option_is_passed_and_no_missing_option_is() {
    let stack = stack();
    let mut failures = Vec::new();
    for (recipe, arg, why) in ARGS {
        if !args(&stack, recipe).iter().any(|a| a == arg) {
            failures.push(format!("{recipe} must pass {arg}: {why}"));
        }
    }
    for (recipe, prefix, why) in ABSENT {
        let bad: Vec<String> = args(&stack, recipe).into_iter().filter(|a| a.starts_with(prefix)).collect();
        if !bad.is_empty() {
            failures.push(format!("{recipe} passes {bad:?}: {why}"));
        }
    }
    for (recipe, package, why) in REQUIREMENTS {
        let reqs = &stack.recipe(recipe).unwrap().build.requirements;
        let name = |r: &str| r.split(['=', '<', '>', '~', '!', ' ', '[']).next().unwrap_or("").to_lowercase();
        if !reqs.iter().any(|r| name(r) == package.to_lowercase()) {
            failures.push(format!("{recipe} must list {package} in requirements ({reqs:?}): {why}"));
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
}

/// (recipe, `[host]` field, need, why): what a host must have that the upstream build finds with
/// a REQUIRED find or runs, so `doctor` and `build` catch it before the night, not its configure.
const HOST: &[(&str, &str, &str, &str)] = &[
    ("miopen", "commands", "bzcat", "MIOpen CMakeLists.txt:542 find_program(UNZIPPER lbzcat bzcat REQUIRED)"),
    ("miopen", "packages", "bzip2", "Debian's bzcat; libbz2-dev does not bring it"),
    ("rocminfo", "commands", "python3", "rocm_agent_enumerator starts #!/usr/bin/env python3"),
    (
        "hipblaslt",
        "headers",
        "msgpack.hpp",
        "tensilelite MessagePack.hpp:35 includes <msgpack.hpp> (the C library has none)",
    ),
    (
        "hipblaslt",
        "packages",
        "libmsgpack-dev",
        "tensilelite CMakeLists.txt:105 find_package(msgpack): the config named `msgpack`",
    ),
    ("rocblas", "headers", "msgpack.hpp", "Tensile MessagePack.hpp:35 includes <msgpack.hpp>"),
];

#[test]
fn every_host_need_upstream_requires_is_declared() {
    let stack = stack();
    let mut failures = Vec::new();
    for (recipe, field, need, why) in HOST {
        let host = &stack.recipe(recipe).unwrap().host;
        let have: Vec<String> = match *field {
            "commands" => host.commands.clone(),
            "headers" => host.headers.clone(),
            _ => host.packages.iter().map(|p| p.to_string()).collect(),
        };
        if !have.iter().any(|h| h == need) {
            failures.push(format!("{recipe} [host] {field} must have {need} ({have:?}): {why}"));
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn hipblaslt_build_venv_cmake_is_new_enough_and_below_4() {
    // hipBLASLt 6.2 declares cmake_minimum_required(VERSION 3.25.2 FATAL_ERROR); CMake 4 drops
    // compatibility with projects declaring < 3.5, which PyTorch's third_party still has.
    let stack = stack();
    let reqs = &stack.recipe("hipblaslt").unwrap().build.requirements;
    let pin = reqs.iter().find_map(|r| r.strip_prefix("cmake==")).unwrap_or_else(|| panic!("{reqs:?}"));
    let v: Vec<u32> = pin.split('.').map(|p| p.parse().unwrap()).collect();
    assert!(v.as_slice() >= [3, 25, 2].as_slice() && v[0] < 4, "cmake=={pin}");
}
