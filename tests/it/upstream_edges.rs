//! The embedded source stacks against what their upstream CMake files require: `rocm-6.2`
//! (issue #12, section 2; the audit is `docs/real-stack.md`) and `rocm-5.4` (issue #22;
//! `docs/rocm-5.4-audit.md`). Each row names the upstream file and line at the tag it was read
//! at; a recipe edit that drops an edge or an option found there fails here.
//!
//! Edges are checked on the closure and the build order the engine uses (`BuildGraph`), so a
//! dependency that would only be satisfied by timing (both in one wave) fails too.

use rocmforge::graph::BuildGraph;
use rocmforge::recipe::{load_stack, RecipeTree, Stack};

/// What a stack's upstream requires of its recipes.
struct Audit {
    stack: &'static str,
    /// (recipe, dependency it must be built after, where upstream requires it).
    edges: &'static [(&'static str, &'static str, &'static str)],
    /// (recipe, argument it must pass, why).
    args: &'static [(&'static str, &'static str, &'static str)],
    /// (recipe, option prefix it must not pass: the option does not exist at the tag read).
    absent: &'static [(&'static str, &'static str, &'static str)],
    /// (recipe, Python package its build venv must bring, why).
    requirements: &'static [(&'static str, &'static str, &'static str)],
    /// (recipe, `[host]` field, need, why): what a host must have that the upstream build finds
    /// with a REQUIRED find or runs, so `doctor` and `build` catch it before the night, not its
    /// configure.
    host: &'static [(&'static str, &'static str, &'static str, &'static str)],
}

const ROCM_6_2: Audit = Audit {
    stack: "rocm-6.2",
    edges: EDGES_6_2,
    args: ARGS_6_2,
    absent: ABSENT_6_2,
    requirements: REQUIREMENTS_6_2,
    host: HOST_6_2,
};

const EDGES_6_2: &[(&str, &str, &str)] = &[
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

const ARGS_6_2: &[(&str, &str, &str)] = &[
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
         openmp: composable_kernel CMakeLists.txt:243-247 -fopenmp=libomp (Tensile's -fopenmp is its client's only)",
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
    (
        "rocfft",
        "-DROCFFT_KERNEL_CACHE_ENABLE=OFF",
        "issue 33: rocFFT rocm-6.2.2 library/src/CMakeLists.txt:484,505-521: the 21,396-kernel AOT cache; run-time compile serves",
    ),
    (
        "miopen",
        "-DMIOPEN_BUILD_DRIVER=OFF",
        "issue 33: MIOpen rocm-6.2.2 CMakeLists.txt:185-186,777-779: MIOpenDriver, run by nobody (and :516-521 its rocrand)",
    ),
    (
        "roctracer",
        "-DBUILD_TESTING=OFF",
        "with patch 0001: roctracer rocm-6.2.2 CMakeLists.txt:63-66 puts test/ (test/CMakeLists.txt:35-198) in `all`",
    ),
];

const ABSENT_6_2: &[(&str, &str, &str)] = &[(
    "hipsparse",
    "-DBUILD_CLIENTS_BENCHMARKS",
    "hipSPARSE rocm-6.2.2 has only BUILD_CLIENTS_TESTS and BUILD_CLIENTS_SAMPLES (CMakeLists.txt:76-77)",
)];

const REQUIREMENTS_6_2: &[(&str, &str, &str)] = &[
    ("clr", "CppHeaderParser", "clr hipamd/src/CMakeLists.txt:239-251: FATAL_ERROR without it (USE_PROF_API ON)"),
    ("roctracer", "CppHeaderParser", "roctracer rocm-6.2.2 src/CMakeLists.txt:36-44: FATAL_ERROR without it"),
    ("hipblaslt", "cmake", "hipBLASLt CMakeLists.txt:24: cmake_minimum_required(VERSION 3.25.2 FATAL_ERROR)"),
];

fn stack(name: &str) -> Stack {
    load_stack(&RecipeTree::embedded(), name).unwrap_or_else(|d| panic!("the embedded {name} stack: {d}"))
}

fn args(stack: &Stack, recipe: &str) -> Vec<String> {
    stack.recipe(recipe).unwrap_or_else(|| panic!("no recipe {recipe}")).build.args.clone()
}

#[test]
fn every_upstream_edge_orders_the_build() {
    edges_order_the_build(&ROCM_6_2);
}

#[test]
fn every_rocm_5_4_upstream_edge_orders_the_build() {
    edges_order_the_build(&ROCM_5_4);
}

fn edges_order_the_build(audit: &Audit) {
    let stack = stack(audit.stack);
    let mut failures = Vec::new();
    for (recipe, dep, why) in audit.edges {
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
    let stack = stack("rocm-6.2");
    let graph = BuildGraph::closure(&stack, &["pytorch".to_string()]).unwrap();
    let order = graph.order();
    let at = |n: &str| order.iter().position(|o| *o == n).unwrap_or_else(|| panic!("{n} not in {order:?}"));
    assert!(at("hipblas") < at("hipblaslt"), "{order:?}");
    assert!(at("rocsparse") < at("rocsolver"), "{order:?}");
    assert!(at("rocblas") < at("rocsparse"), "{order:?}");
    assert!(graph.deps_of("hipblaslt").contains(&"hipblas"), "{:?}", graph.deps_of("hipblaslt"));
}

/// The configure command the engine runs for a recipe of an embedded stack (placeholders
/// expanded for gfx1010 in a stand-in prefix).
fn configure_command(stack: &Stack, recipe: &str) -> String {
    use rocmforge::engine::systems::{steps, Vars};
    let r = stack.recipe(recipe).unwrap_or_else(|| panic!("no recipe {recipe}"));
    let prefix = std::path::PathBuf::from("/opt/rf");
    let vars = Vars {
        prefix: prefix.clone(),
        targets: Some(rocmforge::target::TargetSet::parse("gfx1010").unwrap()),
        jobs: 16,
        src: "/w/src".into(),
        build: "/w/build".into(),
        stage: "/w/stage".into(),
        tmp: "/w/tmp".into(),
        installed: "/w/stage/opt/rf".into(),
        requested: None,
        work_dir: "/w".into(),
        python: None,
        host_python: None,
        version: r.version.clone(),
        wheel_version: r.version.clone(),
        source_trees: Default::default(),
        rocm_path: None,
        rocm: prefix.clone(),
        rocm_llvm: prefix.join("llvm"),
        rocm_device_libs: prefix.join("amdgcn/bitcode"),
        package_roots: Vec::new(),
        package_dirs: Default::default(),
        dep_roots: r.build_deps.iter().map(|d| (d.clone(), prefix.clone())).collect(),
        find_links: None,
        install_wheels: Vec::new(),
    };
    let steps = steps(r, &vars, &Default::default()).unwrap_or_else(|e| panic!("{recipe}: {e}"));
    steps.into_iter().find(|s| s.name == "configure").unwrap_or_else(|| panic!("{recipe}: no configure step")).command
}

/// Issue 33's cuts for a gfx101x night: what is no longer built is switched off in the command
/// the engine runs (not only in the recipe's text), and MIOpen no longer waits for rocRAND
/// (only MIOpenDriver asked for it), while PyTorch still gets rocRAND before it.
#[test]
fn the_gfx101x_night_cuts_reach_the_configure_command_and_miopen_no_longer_waits_for_rocrand() {
    let cuts = [
        ("rocm-6.2", "rocfft", "-DROCFFT_KERNEL_CACHE_ENABLE=OFF"),
        ("rocm-6.2", "miopen", "-DMIOPEN_BUILD_DRIVER=OFF"),
        ("rocm-5.4", "miopen", "-DMIOPEN_BUILD_DRIVER=OFF"),
    ];
    let mut failures = Vec::new();
    for (name, recipe, option) in cuts {
        let command = configure_command(&stack(name), recipe);
        if !command.split(' ').any(|a| a == option) {
            failures.push(format!("{name}/{recipe}: the configure command lacks {option}: {command}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let stack = stack("rocm-6.2");
    let miopen = BuildGraph::closure(&stack, &["miopen".to_string()]).unwrap();
    assert!(
        !miopen.order().contains(&"rocrand"),
        "miopen's closure still builds rocrand (MIOpenDriver is off, nothing else of MIOpen finds it): {:?}",
        miopen.order()
    );
    let pytorch = BuildGraph::closure(&stack, &["pytorch".to_string()]).unwrap();
    assert!(pytorch.deps_of("pytorch").contains(&"rocrand"), "{:?}", pytorch.deps_of("pytorch"));

    // The night's model no longer counts what is not built: rocFFT's 21,396-kernel cache (5.9
    // core-h) and MIOpenDriver's 31 TUs (~0.2 core-h) (docs/night-estimate.md, "Issue 33's cuts").
    let core_hours = |r: &str| stack.recipe(r).and_then(|r| r.estimate.as_ref()).unwrap().parallel_core_hours;
    assert!(core_hours("rocfft") < 1.0, "rocfft still estimates its kernel cache: {} core-h", core_hours("rocfft"));
    assert!(core_hours("miopen") < 1.25, "miopen still estimates MIOpenDriver: {} core-h", core_hours("miopen"));

    // The first-use cost moved to the user is said where `env` and `verify` say what runs.
    let native = stack.profile(Some("native")).unwrap().unwrap();
    assert!(
        native.description.contains("torch.fft")
            && native.env.get("ROCFFT_RTC_CACHE_PATH").map(String::as_str) == Some("{venv}/rocfft-kernel-cache.db"),
        "the native profile does not say rocFFT compiles on first use, or keeps no kernels: {}",
        native.description
    );
}

#[test]
fn every_decided_option_is_passed_and_no_missing_option_is() {
    options_are_passed(&ROCM_6_2);
}

#[test]
fn every_rocm_5_4_decided_option_is_passed_and_no_missing_option_is() {
    options_are_passed(&ROCM_5_4);
}

fn options_are_passed(audit: &Audit) {
    let stack = stack(audit.stack);
    let mut failures = Vec::new();
    for (recipe, arg, why) in audit.args {
        if !args(&stack, recipe).iter().any(|a| a == arg) {
            failures.push(format!("{recipe} must pass {arg}: {why}"));
        }
    }
    for (recipe, prefix, why) in audit.absent {
        let bad: Vec<String> = args(&stack, recipe).into_iter().filter(|a| a.starts_with(prefix)).collect();
        if !bad.is_empty() {
            failures.push(format!("{recipe} passes {bad:?}: {why}"));
        }
    }
    for (recipe, package, why) in audit.requirements {
        let reqs = &stack.recipe(recipe).unwrap().build.requirements;
        let name = |r: &str| r.split(['=', '<', '>', '~', '!', ' ', '[']).next().unwrap_or("").to_lowercase();
        if !reqs.iter().any(|r| name(r) == package.to_lowercase()) {
            failures.push(format!("{recipe} must list {package} in requirements ({reqs:?}): {why}"));
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
}

const HOST_6_2: &[(&str, &str, &str, &str)] = &[
    (
        "hipblas",
        "packages",
        "gfortran",
        "hipBLAS rocm-6.2.4 (f4095274efb0) CMakeLists.txt:45-52 project(... Fortran) on Linux",
    ),
    ("hipblas", "commands", "gfortran", "hipBLAS rocm-6.2.4 CMakeLists.txt:47 CMAKE_Fortran_COMPILER gfortran"),
    (
        "hipsparse",
        "packages",
        "gfortran",
        "hipSPARSE rocm-6.2.4 (f5098a0ed51a) CMakeLists.txt:59-67 project(... Fortran)",
    ),
    ("hipsparse", "commands", "gfortran", "hipSPARSE rocm-6.2.4 CMakeLists.txt:61 CMAKE_Fortran_COMPILER gfortran"),
    (
        "hipsolver",
        "packages",
        "gfortran",
        "hipSOLVER rocm-6.2.2 (be19fb7aed08) CMakeLists.txt:46-49 enable_language(Fortran)",
    ),
    ("hipsolver", "commands", "gfortran", "hipSOLVER rocm-6.2.2 CMakeLists.txt:43 CMAKE_Fortran_COMPILER gfortran"),
    ("rocr", "packages", "xxd", "ROCR rocm-6.2.4 trap_handler/create_trap_handler_header.sh:46-67 runs xxd -i"),
    ("rocr", "commands", "xxd", "ROCR rocm-6.2.4 src/CMakeLists.txt:206,210 add the xxd-run blit and trap targets"),
    ("rocr", "headers", "libelf.h", "ROCR rocm-6.2.4 src/cmake_modules/FindLibElf.cmake:20-22 find_path(libelf.h)"),
    (
        "rocfft",
        "commands",
        "python3",
        "rocFFT 6.2.4 (7b4fa44f6cf6) library/src/device/CMakeLists.txt:101 kernel generator",
    ),
    ("rocfft", "packages", "python3", "rocFFT 6.2.4 library/src/CMakeLists.txt:80-81 PYTHON3_EXE python3"),
    (
        "rocfft",
        "packages",
        "libsqlite3-dev",
        "rocFFT 6.2.4 cmake/sqlite.cmake:30 find_package(SQLite3 3.36 REQUIRED) with SQLITE_USE_SYSTEM_PACKAGE",
    ),
    ("rocfft", "headers", "sqlite3.h", "the SQLite3 rocFFT 6.2.4 finds, on hosts without dpkg"),
    ("llvm", "commands", "python3", "LLVM's CMake: find_package(Python3 REQUIRED COMPONENTS Interpreter)"),
    ("composable-kernel", "cmake", ">=3.21, <4", "CK rocm-6.2.4 (6d90a7cf2eb6) CMakeLists.txt:26 LANGUAGES CXX HIP"),
    ("composable-kernel", "commands", "python3", "CK rocm-6.2.4 CMakeLists.txt:29 find_package(Python3 3.6 REQUIRED)"),
    ("composable-kernel", "commands", "git", "CK rocm-6.2.4 CMakeLists.txt:87 find_package(Git REQUIRED)"),
    (
        "rocblas",
        "commands",
        "git",
        "rocBLAS 6.2.4 (3171316ae7f6) library/CMakeLists.txt:146 find_package(Git REQUIRED)",
    ),
    ("rocblas", "packages", "git", "rocBLAS 6.2.4 library/CMakeLists.txt:146"),
    ("hipblas", "commands", "git", "hipBLAS rocm-6.2.4 library/CMakeLists.txt:48 find_package(Git REQUIRED)"),
    ("hipblas", "packages", "git", "hipBLAS rocm-6.2.4 library/CMakeLists.txt:48"),
    (
        "hipblaslt",
        "commands",
        "git",
        "hipBLASLt 6.2.4 (b805079704ec) cmake/Dependencies.cmake:27 find_package(Git REQUIRED)",
    ),
    ("hipblaslt", "packages", "git", "hipBLASLt 6.2.4 cmake/Dependencies.cmake:27, included at CMakeLists.txt:60"),
    ("clr", "packages", "python3-venv", "clr's requirements (CppHeaderParser) build in a venv of the stack's Python"),
    ("clr", "headers", "X11/Xlib.h", "clr rocm-6.2.2 rocclr/include/GL/glx.h:38, included by rocglinterop.hpp:26"),
    ("clr", "headers", "GL/gl.h", "clr rocm-6.2.2 rocclr/include/GL/glx.h:45"),
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
        "libmsgpack-cxx-dev | libmsgpack-dev",
        "tensilelite CMakeLists.txt:105 find_package(msgpack), with patch 0002 any msgpack-cxx config",
    ),
    ("rocblas", "headers", "msgpack.hpp", "Tensile MessagePack.hpp:35 includes <msgpack.hpp>"),
    (
        "rocblas",
        "versions",
        "msgpack-cxx !=5.*",
        "Tensile rocm-6.2.4 lib/CMakeLists.txt:101 NAMES msgpack msgpack-cxx msgpack-c: not 5.x's msgpackc-cxx",
    ),
];

#[test]
fn every_host_need_upstream_requires_is_declared() {
    host_needs_are_declared(&ROCM_6_2);
}

#[test]
fn every_rocm_5_4_host_need_upstream_requires_is_declared() {
    host_needs_are_declared(&ROCM_5_4);
}

fn host_needs_are_declared(audit: &Audit) {
    let stack = stack(audit.stack);
    let mut failures = Vec::new();
    for (recipe, field, need, why) in audit.host {
        let host = &stack.recipe(recipe).unwrap().host;
        let have: Vec<String> = match *field {
            "commands" => host.commands.clone(),
            "headers" => host.headers.clone(),
            "cmake" => host.cmake.iter().map(|r| r.to_string()).collect(),
            "versions" => host.versions.iter().map(|b| format!("{} {}", b.dependency.name(), b.range)).collect(),
            _ => host.packages.iter().map(|p| p.to_string()).collect(),
        };
        if !have.iter().any(|h| h == need) {
            failures.push(format!("{recipe} [host] {field} must have {need} ({have:?}): {why}"));
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
}

/// rocm-5.4: no recipe claims to provide an OpenMP runtime, and none builds one. Tensile
/// rocm-5.4.3 links `-fopenmp` only into its client (Tensile/Source/client/CMakeLists.txt:79,92),
/// which rocBLAS leaves off (TensileConfig.cmake:53-64); the audit of every other hit is in
/// docs/rocm-5.4-audit.md, "The OpenMP runtime".
#[test]
fn rocm_5_4_builds_and_claims_no_openmp_runtime() {
    let stack = stack("rocm-5.4");
    let mut found = Vec::new();
    for recipe in stack.recipes.values() {
        for p in &recipe.provides {
            if p.files.iter().any(|f| f.contains("libomp")) || p.what.contains("OpenMP") {
                found.push(format!("{} provides {:?}", recipe.name, p.what));
            }
        }
        for a in &recipe.build.args {
            if a.starts_with("-DLLVM_ENABLE_RUNTIMES=") && a.split(['=', ';']).any(|r| r == "openmp") {
                found.push(format!("{} builds the openmp runtime: {a}", recipe.name));
            }
        }
    }
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn hipblaslt_build_venv_cmake_is_new_enough_and_below_4() {
    // hipBLASLt 6.2 declares cmake_minimum_required(VERSION 3.25.2 FATAL_ERROR); CMake 4 drops
    // compatibility with projects declaring < 3.5, which PyTorch's third_party still has.
    let stack = stack("rocm-6.2");
    let reqs = &stack.recipe("hipblaslt").unwrap().build.requirements;
    let pin = reqs.iter().find_map(|r| r.strip_prefix("cmake==")).unwrap_or_else(|| panic!("{reqs:?}"));
    let v: Vec<u32> = pin.split('.').map(|p| p.parse().unwrap()).collect();
    assert!(v.as_slice() >= [3, 25, 2].as_slice() && v[0] < 4, "cmake=={pin}");
}

// ---------------------------------------------------------------------------------------------
// rocm-5.4: read at tag rocm-5.4.3 of each repository (docs/rocm-5.4-audit.md).

const ROCM_5_4: Audit = Audit {
    stack: "rocm-5.4",
    edges: EDGES_5_4,
    args: ARGS_5_4,
    absent: &[
        ("hipamd", "-DHIP_ENABLE_ROCPROFILER_REGISTER", "a 6.2 clr option; hipamd rocm-5.4.3 has none"),
        ("hipamd", "-DCLR_BUILD_HIP", "a 6.2 clr option; hipamd rocm-5.4.3 is HIP only"),
        (
            "llvm",
            "-DOPENMP_",
            "no openmp runtime: nothing of the 5.4 night links -fopenmp by the stack's clang (docs/rocm-5.4-audit.md)",
        ),
    ],
    requirements: REQUIREMENTS_5_4,
    host: HOST_5_4,
};

const EDGES_5_4: &[(&str, &str, &str)] = &[
    ("device-libs", "llvm", "ROCm-Device-Libs rocm-5.4.3 CMakeLists.txt:38-39 find_package(LLVM REQUIRED), Clang"),
    (
        "comgr",
        "llvm",
        "ROCm-CompilerSupport rocm-5.4.3 lib/comgr/CMakeLists.txt:72-73 find_package(Clang|LLD REQUIRED CONFIG)",
    ),
    (
        "comgr",
        "device-libs",
        "ROCm-CompilerSupport rocm-5.4.3 lib/comgr/CMakeLists.txt:71 find_package(AMDDeviceLibs REQUIRED)",
    ),
    ("rocr", "roct", "ROCR-Runtime rocm-5.4.3 src/CMakeLists.txt:100 find_package(hsakmt 1.0 REQUIRED)"),
    (
        "rocr",
        "llvm",
        "ROCR-Runtime rocm-5.4.3 src/core/runtime/trap_handler/CMakeLists.txt:46-47 find_package(Clang REQUIRED)",
    ),
    ("rocminfo", "rocr", "rocminfo rocm-5.4.3 CMakeLists.txt:60 find_package(hsa-runtime64 1.0 REQUIRED)"),
    ("half", "rocm-cmake", "half 37742ce CMakeLists.txt:17 find_package(ROCM REQUIRED)"),
    ("hipamd", "rocr", "ROCclr rocm-5.4.3 cmake/ROCclrHSA.cmake:21 find_package(hsa-runtime64 1.6 REQUIRED CONFIG)"),
    ("hipamd", "comgr", "ROCclr rocm-5.4.3 cmake/ROCclrLC.cmake:21 find_package(amd_comgr REQUIRED CONFIG)"),
    ("hipamd", "llvm", "hipamd rocm-5.4.3 src/CMakeLists.txt:176 find_package(LLVM REQUIRED CONFIG)"),
    ("hipamd", "hipcc", "hipamd rocm-5.4.3 CMakeLists.txt:386-396 installs HIPCC_BIN_DIR/hipcc.bin"),
    ("hipamd", "hip", "hipamd rocm-5.4.3 CMakeLists.txt:40,63-66 HIP_COMMON_DIR"),
    ("hipamd", "rocclr", "hipamd rocm-5.4.3 src/cmake/FindROCclr.cmake:25-51 ROCCLR_PATH"),
    ("hipamd", "opencl", "ROCclr rocm-5.4.3 cmake/FindAMD_OPENCL.cmake:25-46 AMD_OPENCL_PATH"),
    ("roctracer", "hipamd", "roctracer rocm-5.4.3 CMakeLists.txt:47 find_package(HIP REQUIRED CONFIG)"),
    ("roctracer", "rocr", "roctracer rocm-5.4.3 CMakeLists.txt:46 find_package(hsa-runtime64 REQUIRED CONFIG)"),
    ("rocprim", "hipamd", "rocPRIM rocm-5.4.3 CMakeLists.txt:84 find_package(hip REQUIRED CONFIG)"),
    (
        "rocprim",
        "rocm-cmake",
        "rocPRIM rocm-5.4.3 cmake/Dependencies.cmake:176 find_package(ROCM QUIET), else downloads it",
    ),
    (
        "hipcub",
        "rocprim",
        "hipCUB rocm-5.4.3 cmake/Dependencies.cmake:95 find_package(rocprim QUIET), else downloads it",
    ),
    ("hipcub", "hipamd", "hipCUB rocm-5.4.3 cmake/VerifyCompiler.cmake:35 find_package(hip REQUIRED)"),
    (
        "rocthrust",
        "rocprim",
        "rocThrust rocm-5.4.3 cmake/Dependencies.cmake:17 find_package(rocprim QUIET), else downloads it",
    ),
    ("rocthrust", "hipamd", "rocThrust rocm-5.4.3 cmake/VerifyCompiler.cmake:24 find_package(hip REQUIRED)"),
    ("rocrand", "hipamd", "rocRAND rocm-5.4.3 cmake/VerifyCompiler.cmake:35 find_package(hip REQUIRED)"),
    ("rocrand", "rocm-cmake", "rocRAND rocm-5.4.3 cmake/Dependencies.cmake:115 find_package(ROCM), else downloads it"),
    ("hiprand", "rocrand", "hipRAND rocm-5.4.3 CMakeLists.txt:107,112 find_package(rocrand CONFIG REQUIRED)"),
    (
        "rocfft",
        "hipamd",
        "rocFFT rocm-5.4.3 CMakeLists.txt:165 find_package(HIP REQUIRED); library/src/CMakeLists.txt:49 hiprtc",
    ),
    ("hipfft", "rocfft", "hipFFT rocm-5.4.3 cmake/dependencies.cmake:51 find_package(rocfft REQUIRED)"),
    ("hipfft", "hipamd", "hipFFT rocm-5.4.3 cmake/dependencies.cmake:44 find_package(HIP MODULE REQUIRED)"),
    (
        "rocblas",
        "tensile",
        "rocBLAS rocm-5.4.3 CMakeLists.txt:143-145,159 Tensile_TEST_LOCAL_PATH, find_package(Tensile 4.35.0 EXACT)",
    ),
    ("rocblas", "hipamd", "rocBLAS rocm-5.4.3 CMakeLists.txt:166 find_package(hip REQUIRED)"),
    (
        "rocblas",
        "llvm",
        "Tensile rocm-5.4.3 Tensile/Common.py:1975-1993 assembler and clang-offload-bundler of ROCM_PATH/llvm",
    ),
    ("hipblas", "rocblas", "hipBLAS rocm-5.4.3 library/src/CMakeLists.txt:82 find_package(rocblas REQUIRED CONFIG)"),
    (
        "hipblas",
        "rocsolver",
        "hipBLAS rocm-5.4.3 library/src/CMakeLists.txt:97 find_package(rocsolver REQUIRED CONFIG)",
    ),
    ("rocsparse", "rocprim", "rocSPARSE rocm-5.4.3 CMakeLists.txt:175 find_package(rocprim REQUIRED)"),
    ("rocsparse", "hipamd", "rocSPARSE rocm-5.4.3 CMakeLists.txt:178 find_package(hip REQUIRED)"),
    (
        "hipsparse",
        "rocsparse",
        "hipSPARSE rocm-5.4.3 cmake/Dependencies.cmake:46 find_package(rocsparse REQUIRED CONFIG)",
    ),
    ("rocsolver", "rocblas", "rocSOLVER rocm-5.4.3 CMakeLists.txt:146 find_package(rocblas REQUIRED CONFIG)"),
    ("rocsolver", "llvm", "rocSOLVER rocm-5.4.3 library/src/CMakeLists.txt:241 links --rtlib=compiler-rt"),
    (
        "hipsolver",
        "rocblas",
        "hipSOLVER rocm-5.4.3 library/src/CMakeLists.txt:100 find_package(rocblas REQUIRED CONFIG)",
    ),
    (
        "hipsolver",
        "rocsolver",
        "hipSOLVER rocm-5.4.3 library/src/CMakeLists.txt:109 find_package(rocsolver REQUIRED CONFIG)",
    ),
    ("miopen", "rocm-cmake", "MIOpen rocm-5.4.3 CMakeLists.txt:53 find_package(ROCM 0.7.3 REQUIRED)"),
    ("miopen", "hipamd", "MIOpen rocm-5.4.3 CMakeLists.txt:192 find_package(hip REQUIRED)"),
    ("miopen", "comgr", "MIOpen rocm-5.4.3 CMakeLists.txt:396-397 find_package(amd_comgr REQUIRED CONFIG)"),
    ("miopen", "rocblas", "MIOpen rocm-5.4.3 CMakeLists.txt:280-282 find_package(rocblas REQUIRED)"),
    ("miopen", "half", "MIOpen rocm-5.4.3 CMakeLists.txt:414 find_path(HALF_INCLUDE_DIR half.hpp)"),
    ("pytorch", "miopen", "Spack py_torch/package.py:332-349 at 1e8cf059e35d: miopen-hip for +rocm"),
    ("pytorch", "rocm-core", "PyTorch 2.x LoadHIP.cmake reads rocm_version.h (docs/rocm-5.4-audit.md)"),
    ("torchvision", "pytorch", "Spack py_torchvision/package.py:105 depends_on py-torch@2.2.2 when @0.17.2"),
];

const ARGS_5_4: &[(&str, &str, &str)] = &[
    (
        "llvm",
        "-DLLVM_ENABLE_RUNTIMES=compiler-rt",
        "hipamd rocm-5.4.3 hip-config.cmake.in:294-311 FATAL_ERROR without the builtins; HIP bin/hipcc.pl:731-737; \
         no openmp: Tensile rocm-5.4.3 links -fopenmp only into its client (Source/client/CMakeLists.txt:79,92), \
         off unless Client is asked for (TensileConfig.cmake:53-64)",
    ),
    ("rocminfo", "-DROCRTST_BLD_TYPE=Release", "rocminfo rocm-5.4.3 CMakeLists.txt:62-69: Debug otherwise"),
    ("rocm-core", "-DROCM_VERSION=5.4.3", "rocm-core rocm-5.5.0 CMakeLists.txt:39-40: no 5.4 source exists"),
    ("hipamd", "-DHIP_COMMON_DIR={src:hip}", "hipamd rocm-5.4.3 CMakeLists.txt:63-66"),
    ("hipamd", "-DROCCLR_PATH={src:rocclr}", "hipamd rocm-5.4.3 src/cmake/FindROCclr.cmake:25-27"),
    ("hipamd", "-DAMD_OPENCL_PATH={src:opencl}", "ROCclr rocm-5.4.3 cmake/FindAMD_OPENCL.cmake:25-27"),
    (
        "hipamd",
        "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-z,noexecstack",
        "hipamd rocm-5.4.3 src/hip_embed_pch.sh:113: the PCH object has no .note.GNU-stack (with patch 0001)",
    ),
    ("rocprim", "-DAMDGPU_TARGETS={targets}", "rocPRIM rocm-5.4.3 CMakeLists.txt:63-76: the default list lacks gfx1010"),
    ("rocfft", "-DAMDGPU_TARGETS={targets}", "rocFFT rocm-5.4.3 CMakeLists.txt:148-151: the default list lacks gfx1010"),
    ("rocsparse", "-DAMDGPU_TARGETS={targets}", "rocSPARSE rocm-5.4.3 CMakeLists.txt:148-170: the default list lacks gfx1010"),
    ("rocthrust", "-DAMDGPU_TARGETS={targets}", "rocThrust rocm-5.4.3 CMakeLists.txt:60-72: the default list lacks gfx1010"),
    ("rocrand", "-DBUILD_HIPRAND=OFF", "rocRAND rocm-5.4.3 CMakeLists.txt:222-233: FATAL_ERROR without the hipRAND submodule"),
    ("rocfft", "-DSQLITE_USE_SYSTEM_PACKAGE=ON", "rocFFT rocm-5.4.3 library/src/CMakeLists.txt:152-172: else downloads SQLite"),
    (
        "rocblas",
        "-DTensile_SEPARATE_ARCHITECTURES=OFF",
        "Tensile rocm-5.4.3 TensileCreateLibrary.py:1054-1060: with it, a target without logic (gfx1012) gets no library",
    ),
    ("rocblas", "-DTensile_LAZY_LIBRARY_LOADING=OFF", "the same, TensileCreateLibrary.py:1353-1372"),
    ("rocblas", "-DTensile_TEST_LOCAL_PATH={src:tensile}", "rocBLAS rocm-5.4.3 CMakeLists.txt:139-145: else pip-installs from GitHub"),
    ("hipblas", "-DBUILD_WITH_SOLVER=ON", "hipBLAS rocm-5.4.3 CMakeLists.txt:100: stated with its rocsolver edge"),
    ("miopen", "-DMIOPEN_USE_COMPOSABLEKERNEL=OFF", "composable_kernel 5.4.3 ck.hpp:32-34 #error on gfx1010"),
    ("miopen", "-DMIOPEN_USE_MLIR=OFF", "MIOpen rocm-5.4.3 CMakeLists.txt:328-345: ON needs rocMLIR, no gfx101x solver"),
    ("miopen", "-DBUILD_TESTING=OFF", "with patch 0003: test/ would git-clone googletest at configure"),
    ("miopen", "-DMIOPEN_BUILD_DRIVER=OFF", "issue 33: MIOpen rocm-5.4.3 CMakeLists.txt:150,748-750: MIOpenDriver, run by nobody"),
    (
        "roctracer",
        "-DBUILD_TESTING=OFF",
        "with patch 0001: roctracer rocm-5.4.3 CMakeLists.txt:56-59 puts test/ (test/CMakeLists.txt:45-173) in `all`",
    ),
];

const REQUIREMENTS_5_4: &[(&str, &str, &str)] = &[
    (
        "hipamd",
        "CppHeaderParser",
        "hipamd rocm-5.4.3 src/CMakeLists.txt:223-234: FATAL_ERROR without it (USE_PROF_API ON)",
    ),
    ("roctracer", "CppHeaderParser", "roctracer rocm-5.4.3 src/CMakeLists.txt:34-45: FATAL_ERROR without it"),
];

const HOST_5_4: &[(&str, &str, &str, &str)] = &[
    ("rocr", "commands", "xxd", "ROCR-Runtime rocm-5.4.3 trap_handler/create_trap_handler_header.sh:46-67 runs xxd"),
    ("hipamd", "commands", "perl", "hipamd rocm-5.4.3 CMakeLists.txt:81 find_package(Perl REQUIRED); hipcc is perl"),
    ("roct", "packages", "libnuma-dev", "ROCT rocm-5.4.3 CMakeLists.txt:163 find_library(NUMA numa REQUIRED)"),
    (
        "miopen",
        "packages",
        "libboost-filesystem-dev",
        "MIOpen rocm-5.4.3 CMakeLists.txt:409-412 find_package(Boost REQUIRED)",
    ),
    (
        "miopen",
        "packages",
        "nlohmann-json3-dev",
        "MIOpen rocm-5.4.3 CMakeLists.txt:73 find_package(nlohmann_json 3.9.1 REQUIRED)",
    ),
    (
        "miopen",
        "packages",
        "libsqlite3-dev",
        "MIOpen rocm-5.4.3 CMakeLists.txt:69-70 pkg_check_modules(SQLITE3 REQUIRED)",
    ),
    ("rocblas", "headers", "msgpack.hpp", "Tensile rocm-5.4.3 Source/lib: MessagePack.cpp includes <msgpack.hpp>"),
    ("rocblas", "packages", "python3-venv", "rocBLAS rocm-5.4.3 cmake/virtualenv.cmake:20"),
    (
        "rocfft",
        "packages",
        "libsqlite3-dev",
        "rocFFT rocm-5.4.3 library/src/CMakeLists.txt:154 find_package(SQLite3 3.36 REQUIRED)",
    ),
    ("rocsolver", "packages", "libfmt-dev", "rocSOLVER rocm-5.4.3 CMakeLists.txt:43 find_package(fmt REQUIRED)"),
    ("hipblas", "packages", "gfortran", "hipBLAS rocm-5.4.3 CMakeLists.txt:46-53 enables Fortran"),
    ("rocsparse", "packages", "gfortran", "rocSPARSE rocm-5.4.3 CMakeLists.txt:54 project(... Fortran)"),
    ("hipsparse", "packages", "gfortran", "hipSPARSE rocm-5.4.3 CMakeLists.txt:67 project(... Fortran)"),
    ("hipsolver", "packages", "gfortran", "hipSOLVER rocm-5.4.3 CMakeLists.txt:46-49 enable_language(Fortran)"),
    // Re-read for issue 37 (docs/host-needs-audit.md): declared already, kept.
    ("hipfft", "commands", "git", "hipFFT rocm-5.4.3 cmake/dependencies.cmake:25 find_package(Git REQUIRED)"),
    ("hipsparse", "commands", "git", "hipSPARSE rocm-5.4.3 cmake/Dependencies.cmake:27 find_package(Git REQUIRED)"),
    ("rocsparse", "commands", "git", "rocSPARSE rocm-5.4.3 cmake/Dependencies.cmake:27 find_package(Git REQUIRED)"),
    ("rocfft", "commands", "python3", "rocFFT rocm-5.4.3 library/src/device/CMakeLists.txt:101 kernel generator"),
    ("rocfft", "headers", "sqlite3.h", "rocFFT rocm-5.4.3 library/src/CMakeLists.txt:154 SQLite3 3.36"),
    ("hipamd", "headers", "X11/Xlib.h", "ROCclr rocm-5.4.3 include/GL/glx.h:38, by device/rocm/rocglinterop.hpp:26"),
    ("hipamd", "packages", "python3-venv", "hipamd rocm-5.4.3 src/CMakeLists.txt:223-235 CppHeaderParser, the venv"),
    ("llvm", "commands", "python3", "LLVM 15's CMake requires a Python 3 interpreter"),
];

/// (stack, the header MIOpen's `find_path(HALF_INCLUDE_DIR <header>)` names, where upstream says
/// so). A value given on the command line skips that find_path and goes on MIOpen's include path
/// as it is, so it must be the folder where the half recipe puts that header, wherever the plan
/// takes half from: `{root:half}` (the prefix, or the installation under `--rocm-path`).
const HALF_HEADER: &[(&str, &str, &str)] = &[
    (
        "rocm-5.4",
        "half.hpp",
        "MIOpen rocm-5.4.3 CMakeLists.txt:414; half 37742ce CMakeLists.txt:23 installs include/half.hpp",
    ),
    ("rocm-6.2", "half/half.hpp", "MIOpen rocm-6.2.2 CMakeLists.txt:442; half rocm-6.0.2 CMakeLists.txt:27"),
];

#[test]
fn miopen_half_include_dir_is_the_folder_the_half_recipe_puts_its_header_in() {
    let mut failures = Vec::new();
    for (name, header, why) in HALF_HEADER {
        let stack = stack(name);
        let given: Vec<String> = args(&stack, "miopen")
            .into_iter()
            .filter_map(|a| a.strip_prefix("-DHALF_INCLUDE_DIR=").map(str::to_string))
            .collect();
        let [dir] = given.as_slice() else {
            failures.push(format!("{name}: miopen must pass -DHALF_INCLUDE_DIR once ({given:?}): {why}"));
            continue;
        };
        // Relative to where half lies, never to the prefix: under --rocm-path half may be taken.
        let Some(rel) = dir.strip_prefix("{root:half}/") else {
            failures.push(format!("{name}: -DHALF_INCLUDE_DIR={dir} is not under {{root:half}}: {why}"));
            continue;
        };
        let wanted = format!("{}/{header}", rel.trim_end_matches('/'));
        let half = stack.recipe("half").unwrap();
        let provided: Vec<&String> = half.provides.iter().flat_map(|p| &p.files).collect();
        if !provided.iter().any(|f| **f == wanted) {
            failures.push(format!("{name}: {dir}/{header} is not a file half provides ({provided:?}): {why}"));
        }
        let external = half.external.as_ref().map(|x| x.files.clone()).unwrap_or_default();
        if !external.contains(&wanted) {
            failures.push(format!("{name}: half's [external] files {external:?} lack {wanted}, so an installation without it would be taken: {why}"));
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
}

/// roctracer 5.4.3 and 6.2.2 put test/ in `all` (CMakeLists.txt:56-59 and :63-66; test/CMakeLists.txt
/// builds and installs HIP programs, host programs and copy.hsaco per target). The recipe's patch gates
/// it on BUILD_TESTING and the recipe passes `-DBUILD_TESTING=OFF`: configured for real with the
/// patch's own post-image of that block (and its pre-image as the control), with the recipe's
/// arguments, test/ is added upstream and not with the recipe.
#[test]
fn roctracer_leaves_its_tests_out_of_the_build() {
    for s in ["rocm-5.4", "rocm-6.2"] {
        roctracer_leaves_its_tests_out(s);
    }
}

fn roctracer_leaves_its_tests_out(stack_name: &str) {
    let stack = stack(stack_name);
    let r = stack.recipe("roctracer").unwrap();
    let patch = r
        .patches
        .iter()
        .find(|p| p.name.contains("no-tests"))
        .unwrap_or_else(|| panic!("{stack_name}: roctracer carries no patch leaving test/ out: {:?}", r.patches));
    let diff = std::fs::read_to_string(crate::support::repo_root().join(&patch.path)).unwrap();
    let hunk = diff
        .split("\n@@ ")
        .find(|h| h.contains("add_subdirectory(test)"))
        .unwrap_or_else(|| panic!("{}: no hunk gates add_subdirectory(test)", patch.path));
    let image = |keep: char| -> String {
        let lines = hunk.lines().skip(1).take_while(|l| !l.starts_with("diff --git"));
        lines.filter_map(|l| l.strip_prefix(' ').or_else(|| l.strip_prefix(keep))).collect::<Vec<_>>().join("\n")
    };
    let cmake_args: Vec<String> = args(&stack, "roctracer").into_iter().filter(|a| !a.contains('{')).collect();
    let tests_added = |block: &str| -> bool {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src-tree");
        for d in ["src", "test"] {
            std::fs::create_dir_all(src.join(d)).unwrap();
        }
        std::fs::write(src.join("src/CMakeLists.txt"), "").unwrap();
        std::fs::write(src.join("test/CMakeLists.txt"), "file(WRITE ${CMAKE_BINARY_DIR}/tests-added \"\")\n").unwrap();
        // As upstream sets it (CMakeLists.txt:49-51) before the block.
        let top = format!(
            "cmake_minimum_required(VERSION 3.18)\nproject(roctracer NONE)\nset(LIBRARY_TYPE SHARED)\n{block}\n"
        );
        std::fs::write(src.join("CMakeLists.txt"), top).unwrap();
        let build = dir.path().join("build");
        let out = std::process::Command::new("cmake")
            .arg("-S")
            .arg(&src)
            .arg("-B")
            .arg(&build)
            .args(&cmake_args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", crate::support::text(&out));
        build.join("tests-added").exists()
    };
    assert!(tests_added(&image('-')), "control: upstream's block adds test/ with {cmake_args:?}");
    assert!(!tests_added(&image('+')), "the patched block still adds test/ with {cmake_args:?}:\n{}", image('+'));
}

/// A msgpack package as a distribution lays it out: the config file's directory and name under
/// `lib/cmake/`, and the imported target it defines.
struct MsgpackLayout {
    what: &'static str,
    dir: &'static str,
    config: &'static str,
    target: &'static str,
}

/// Read in each package's files (docs/rocm-5.4-audit.md, "msgpack").
const MSGPACK_LAYOUTS: &[MsgpackLayout] = &[
    MsgpackLayout {
        what: "msgpack-cxx 4.1.3 (Debian 12 libmsgpack-cxx-dev)",
        dir: "msgpackc-cxx",
        config: "msgpack-config.cmake",
        target: "msgpackc-cxx",
    },
    MsgpackLayout {
        what: "msgpack-c 4.0.0 (Ubuntu 24.04 libmsgpack-dev)",
        dir: "msgpack",
        config: "msgpack-config.cmake",
        target: "msgpackc",
    },
    MsgpackLayout {
        what: "msgpack-cxx 5.0.0 (msgpack-c cpp-5.0.0 CMakeLists.txt:215-220)",
        dir: "msgpackc-cxx",
        config: "msgpackc-cxx-config.cmake",
        target: "msgpackc-cxx",
    },
    MsgpackLayout {
        what: "msgpack-cxx 6.1.0 (Ubuntu 24.04 libmsgpack-cxx-dev)",
        dir: "msgpack-cxx",
        config: "msgpack-cxx-config.cmake",
        target: "msgpack-cxx",
    },
    MsgpackLayout {
        what: "msgpack-cxx 9.0.0 (Debian unstable libmsgpack-cxx-dev)",
        dir: "msgpack-cxx",
        config: "msgpack-cxx-config.cmake",
        target: "msgpack-cxx",
    },
];

/// The C library's 6.x+ config (Debian 13 libmsgpack-c-dev), installed beside msgpack-cxx there:
/// it holds no C++ header, so finding it instead would be no fix.
const MSGPACK_C_6: MsgpackLayout = MsgpackLayout {
    what: "msgpack-c 6.0.1 (Debian 13 libmsgpack-c-dev)",
    dir: "msgpack-c",
    config: "msgpack-c-config.cmake",
    target: "msgpack-c",
};

/// Tensile's msgpack lookup, from `find_package(msgpack` to the `endif()` that closes its target
/// chain, out of one image (pre or post) of the series' hunk on Tensile/Source/lib/CMakeLists.txt.
fn msgpack_lookup(image: &[String]) -> String {
    let start = image
        .iter()
        .position(|l| l.trim_start().starts_with("find_package(msgpack"))
        .expect("find_package(msgpack in the hunk");
    let len = image[start..].iter().position(|l| l == "    endif()").expect("the target chain's endif() in the hunk");
    let lines = image[start..=start + len].iter().filter(|l| !l.contains("target_compile_definitions(TensileHost"));
    lines.map(|l| format!("{l}\n")).collect()
}

/// Configures a project running `lookup` with `layouts` installed in one prefix: the include
/// directory it took from the package's target, or cmake's error.
fn msgpack_found(lookup: &str, layouts: &[&MsgpackLayout], dir: &std::path::Path) -> Result<String, String> {
    let prefix = dir.join("usr");
    for l in layouts {
        let d = prefix.join("lib/cmake").join(l.dir);
        std::fs::create_dir_all(&d).unwrap();
        let body = format!(
            "add_library({t} INTERFACE IMPORTED)\nset_target_properties({t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES \"{inc}\")\n",
            t = l.target,
            inc = prefix.join("include").join(l.target).display()
        );
        std::fs::write(d.join(l.config), body).unwrap();
    }
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("CMakeLists.txt"),
        format!("cmake_minimum_required(VERSION 3.16)\nproject(lookup NONE)\n{lookup}message(STATUS \"msgpack_inc=${{msgpack_inc}}\")\n"),
    )
    .unwrap();
    let out = std::process::Command::new("cmake")
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(dir.join("build"))
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .output()
        .expect("cmake runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    match text.lines().find_map(|l| l.strip_prefix("-- msgpack_inc=")) {
        Some(inc) if out.status.success() && !inc.is_empty() => Ok(inc.to_string()),
        _ => Err(text),
    }
}

#[test]
fn rocm_5_4_tensile_finds_msgpack_cxx_of_every_major_version() {
    // Tensile rocm-5.4.3 Tensile/Source/lib/CMakeLists.txt:106 find_package(msgpack REQUIRED)
    // finds only the 4.x name; Debian 13+ and Ubuntu 24.04's libmsgpack-cxx-dev ship 6.x+. The
    // tensile recipe's series must make rocBLAS's configure find each, and take the include
    // directory from the target that version defines.
    let stack = stack("rocm-5.4");
    let tensile = stack.recipe("tensile").expect("rocm-5.4 recipe tensile");
    let texts: Vec<String> = tensile
        .patches
        .iter()
        .map(|p| std::fs::read_to_string(crate::support::repo_root().join(&p.path)).unwrap())
        .collect();
    let (pre, post) = hunk_images(&texts, "Tensile/Source/lib/CMakeLists.txt");
    assert!(
        !post.is_empty(),
        "no patch of tensile's series ({:?}) changes Tensile/Source/lib/CMakeLists.txt",
        tensile.patches
    );
    assert_msgpack_lookup_finds_every_major(&pre, &post);
}

#[test]
fn rocm_6_2_tensilelite_finds_msgpack_cxx_of_every_major_version() {
    // hipBLASLt rocm-6.2.2 (and the release/rocm-rel-6.2 head, one blob)
    // tensilelite/Tensile/Source/lib/CMakeLists.txt:105 find_package(msgpack REQUIRED): Tensile
    // 5.4.3's lookup, 4.x names only. Patch 0002 of the hipblaslt recipe's directory is the same
    // fix; the recipe's series lists it after 0001 (issue 30).
    let path =
        crate::support::repo_root().join("patches/rocm-6.2/hipblaslt/0002-tensilelite-msgpack-cxx-any-major.patch");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (pre, post) = hunk_images(&[text], "tensilelite/Tensile/Source/lib/CMakeLists.txt");
    assert!(!post.is_empty(), "{} changes no tensilelite/Tensile/Source/lib/CMakeLists.txt", path.display());
    assert_msgpack_lookup_finds_every_major(&pre, &post);
}

/// The pre- and post-image lines of every hunk the patch `texts` make on `file`.
fn hunk_images(texts: &[String], file: &str) -> (Vec<String>, Vec<String>) {
    let (mut pre, mut post) = (Vec::new(), Vec::new());
    for text in texts {
        let mut in_file = false;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("diff --git ") {
                in_file = rest.ends_with(&format!(" b/{file}"));
            } else if !in_file || line.starts_with("---") || line.starts_with("+++") || line.starts_with("@@") {
            } else if let Some(l) = line.strip_prefix('+') {
                post.push(l.to_string());
            } else if let Some(l) = line.strip_prefix('-') {
                pre.push(l.to_string());
            } else if let Some(l) = line.strip_prefix(' ') {
                pre.push(l.to_string());
                post.push(l.to_string());
            }
        }
    }
    (pre, post)
}

/// The patched lookup (`post`) must find every msgpack layout, alone and beside a msgpack-c 6
/// config, and take the include dir of its C++ target; upstream's (`pre`) must fail for 5.x
/// and 6.x+.
fn assert_msgpack_lookup_finds_every_major(pre: &[String], post: &[String]) {
    let (unpatched, patched) = (msgpack_lookup(pre), msgpack_lookup(post));
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, l) in MSGPACK_LAYOUTS.iter().enumerate() {
        let c_beside = [l, &MSGPACK_C_6];
        let cases: Vec<(&str, &[&MsgpackLayout])> =
            vec![("alone", &c_beside[..1]), ("beside msgpack-c 6", &c_beside[..])];
        for (j, (how, layouts)) in cases.into_iter().enumerate() {
            let want = tmp.path().join(format!("p{i}-{j}")).join("usr/include").join(l.target);
            match msgpack_found(&patched, layouts, &tmp.path().join(format!("p{i}-{j}"))) {
                Ok(inc) if inc == want.display().to_string() => {}
                Ok(inc) => failures.push(format!("{} {how}: include dir {inc}, not {}", l.what, want.display())),
                Err(e) => failures.push(format!("{} {how}: no include dir from a C++ target:\n{e}", l.what)),
            }
        }
    }
    assert!(failures.is_empty(), "the patched lookup:\n{patched}\n{}", failures.join("\n"));
    // The patch is what makes the difference: upstream's line finds no 5.x or 6.x+ package.
    for (i, l) in MSGPACK_LAYOUTS.iter().enumerate().skip(2) {
        let found = msgpack_found(&unpatched, &[l], &tmp.path().join(format!("u{i}")));
        assert!(found.is_err(), "upstream's lookup found {}: {found:?}", l.what);
    }
}

/// Boost.Filesystem headers as a release lays them out, written here: where `filesystem_error`
/// is declared and whether `operations.hpp` (the one header MIOpen 2.19's lock_file.hpp:35
/// includes) brings it.
struct BoostLayout {
    what: &'static str,
    exception_hpp: &'static str,
    operations_hpp: &'static str,
}

/// `filesystem_error` declared, as `exception.hpp` has it from Boost 1.72 on.
const DECLARES_FILESYSTEM_ERROR: &str = "#pragma once\nnamespace boost { namespace filesystem {\n\
    class filesystem_error { public: const char* what() const; };\n} }\n";

/// Read in boostorg/filesystem at each tag (docs/rocm-5.4-audit.md, "Boost").
const BOOST_LAYOUTS: &[BoostLayout] = &[
    BoostLayout {
        what: "Boost 1.71 (exception.hpp an empty header, operations.hpp declares the class)",
        exception_hpp: "#pragma once\n",
        operations_hpp: DECLARES_FILESYSTEM_ERROR,
    },
    BoostLayout {
        what: "Boost 1.84 (operations.hpp:25 includes exception.hpp)",
        exception_hpp: DECLARES_FILESYSTEM_ERROR,
        operations_hpp: "#pragma once\nnamespace boost { namespace filesystem { class path; } }\n\
            #include <boost/filesystem/exception.hpp>\n",
    },
    BoostLayout {
        what: "Boost 1.85 (Boost.Filesystem 5df060e: operations.hpp no longer includes exception.hpp)",
        exception_hpp: DECLARES_FILESYSTEM_ERROR,
        operations_hpp: "#pragma once\nnamespace boost { namespace filesystem { class path; } }\n",
    },
];

/// Compiles (syntax only, the host's C++ compiler) MIOpen's lock_file.cpp head: upstream's
/// includes up to :28 (lock_file.hpp, here a stand-in including only
/// `<boost/filesystem/operations.hpp>` as its :35 does), then `image` (one image of the series'
/// hunk, which ends inside `namespace miopen {`), then a use of `fs::filesystem_error` as :36 has.
fn lock_file_compiles(image: &str, boost: &BoostLayout, dir: &std::path::Path) -> Result<(), String> {
    let inc = dir.join("include");
    for (path, text) in [
        ("boost/filesystem/exception.hpp", boost.exception_hpp),
        ("boost/filesystem/operations.hpp", boost.operations_hpp),
        ("miopen/errors.hpp", "#pragma once\n"),
        ("miopen/lock_file.hpp", "#pragma once\n#include <boost/filesystem/operations.hpp>\n"),
        ("miopen/logger.hpp", "#pragma once\n"),
        ("miopen/md5.hpp", "#pragma once\n"),
    ] {
        let p = inc.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let tu = dir.join("lock_file.cpp");
    let head = "#include <miopen/errors.hpp>\n#include <miopen/lock_file.hpp>\n";
    let tail = "\ninline const char* LogFsError(const fs::filesystem_error& ex) { return ex.what(); }\n} // namespace miopen\n";
    std::fs::write(&tu, format!("{head}{image}{tail}")).unwrap();
    let out = std::process::Command::new("c++")
        .args(["-std=c++17", "-fsyntax-only", "-I"])
        .arg(&inc)
        .arg(&tu)
        .output()
        .expect("the host's C++ compiler `c++` runs (apt-get install g++)");
    if out.status.success() {
        Ok(())
    } else {
        Err(crate::support::text(&out))
    }
}

#[test]
fn rocm_5_4_miopen_lock_file_compiles_with_boost_before_and_after_1_85() {
    // MIOpen rocm-5.4.3 src/lock_file.cpp:36 names fs::filesystem_error, reached only through
    // operations.hpp, which stopped including exception.hpp in Boost 1.85 (Debian 13 ships 1.88,
    // unstable 1.90 and 1.92). The miopen recipe's series must make it compile with both layouts.
    let stack = stack("rocm-5.4");
    let miopen = stack.recipe("miopen").expect("rocm-5.4 recipe miopen");
    let (mut pre, mut post) = (String::new(), String::new());
    for p in &miopen.patches {
        let text = std::fs::read_to_string(crate::support::repo_root().join(&p.path)).unwrap();
        let mut in_file = false;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("diff --git ") {
                in_file = rest.ends_with(" b/src/lock_file.cpp");
            } else if !in_file || line.starts_with("---") || line.starts_with("+++") || line.starts_with("@@") {
            } else if let Some(l) = line.strip_prefix('+') {
                post.push_str(&format!("{l}\n"));
            } else if let Some(l) = line.strip_prefix('-') {
                pre.push_str(&format!("{l}\n"));
            } else if let Some(l) = line.strip_prefix(' ') {
                pre.push_str(&format!("{l}\n"));
                post.push_str(&format!("{l}\n"));
            }
        }
    }
    assert!(!post.is_empty(), "no patch of miopen's series ({:?}) changes src/lock_file.cpp", miopen.patches);
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, b) in BOOST_LAYOUTS.iter().enumerate() {
        if let Err(e) = lock_file_compiles(&post, b, &tmp.path().join(format!("p{i}"))) {
            failures.push(format!("{}:\n{e}", b.what));
        }
    }
    assert!(failures.is_empty(), "the patched lock_file.cpp head:\n{post}\nfails with\n{}", failures.join("\n"));
    // Control: upstream's head compiles with Boost 1.84's layout and not with 1.85's.
    let layouts = BOOST_LAYOUTS;
    assert!(lock_file_compiles(&pre, &layouts[1], &tmp.path().join("u1")).is_ok(), "upstream, {}", layouts[1].what);
    let e = lock_file_compiles(&pre, &layouts[2], &tmp.path().join("u2"))
        .expect_err("upstream compiled with 1.85's layout");
    assert!(e.contains("filesystem_error"), "upstream with 1.85's layout failed, but not on filesystem_error:\n{e}");
}

/// PyTorch's build takes an MPI back end from whatever MPI the host has installed, and the wheel
/// then needs that host's libmpi: both stacks turn it off, as AMD's TheRock does
/// (external-builds/pytorch/build_prod_wheels.py:1103 at 89553ce3746e), so the wheel is the
/// same on every host.
#[test]
fn pytorch_builds_no_mpi_back_end_whatever_the_host_has() {
    for name in ["rocm-6.2", "rocm-5.4"] {
        let stack = stack(name);
        let env = &stack.recipe("pytorch").unwrap().build.env;
        assert_eq!(env.get("USE_MPI").map(String::as_str), Some("0"), "{name}: pytorch's env {env:?}");
    }
}

/// Host code that names fixed-width integers without including `<cstdint>`: GCC 13 and later
/// (Ubuntu 24.04's 13, Debian 13's 14, unstable's 16) no longer bring it in through the other
/// standard headers, so the recipe compiles with `CXXFLAGS=-include cstdint`. Found by the
/// real night on GCC 16.2 (docs/real-night.md), as the 5.4 audit had found it for 5.4.3.
#[test]
fn host_code_without_cstdint_compiles_with_gcc_13_and_later() {
    const NEEDS: &[(&str, &str, &str)] = &[
        ("rocm-6.2", "rocr", "ROCR-Runtime rocm-6.2.4 src/core/inc/amd_elf_image.hpp:62-66"),
        ("rocm-5.4", "rocr", "ROCR-Runtime rocm-5.4.3 src/core/inc/amd_elf_image.hpp:62-64"),
    ];
    let mut failures = Vec::new();
    for (name, recipe, why) in NEEDS {
        let r = stack(name).recipe(recipe).unwrap().clone();
        let flags = r.build.env.get("CXXFLAGS").cloned().unwrap_or_default();
        if !flags.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w == ["-include", "cstdint"]) {
            failures.push(format!("{name}/{recipe}: CXXFLAGS `{flags}` lacks `-include cstdint`: {why}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every recipe of the source stacks compiles and links against the HIP of the recipe that makes
/// it (`{root:clr}`, `{root:hipamd}`): the prefix's when HIP is rebuilt, the installation's when it
/// is taken. `HIP_PATH={rocm}` and `CXX={rocm}/bin/hipcc` took the installation's HIP (and a
/// distribution's libamdhip64) beside a rebuilt clr on the night.
#[test]
fn every_recipe_compiles_against_the_hip_of_the_recipe_that_makes_it() {
    let mut failures = Vec::new();
    for (name, hip) in [("rocm-6.2", "clr"), ("rocm-5.4", "hipamd")] {
        let stack = stack(name);
        let mut users = 0;
        for r in stack.recipes.values() {
            let texts: Vec<(String, &String)> = r
                .build
                .env
                .iter()
                .map(|(k, v)| (format!("env {k}"), v))
                .chain(r.checks.iter().flat_map(|c| c.steps.iter().map(move |s| (format!("check {}", c.name), s))))
                .collect();
            for (place, text) in texts {
                for needle in ["{rocm}/bin/hipcc", "{prefix}/bin/hipcc"] {
                    if text.contains(needle) {
                        failures
                            .push(format!("{name}/{}: {place} names {needle}; write {{root:{hip}}}/bin/hipcc", r.name));
                    }
                }
            }
            if let Some(v) = r.build.env.get("HIP_PATH") {
                users += 1;
                if v != &format!("{{root:{hip}}}") {
                    failures.push(format!("{name}/{}: HIP_PATH = {v:?}; write {{root:{hip}}}", r.name));
                }
            }
            // hipcc.pl (HIP rocm-5.4.3 bin/hipcc.pl:221-223) adds `-isystem $HSA_PATH/include`:
            // the HSA headers of the ROCr the stack builds, not the installation's.
            if let Some(v) = r.build.env.get("HSA_PATH") {
                if v != "{root:rocr}" {
                    failures.push(format!("{name}/{}: HSA_PATH = {v:?}; write {{root:rocr}}", r.name));
                }
            }
        }
        assert!(users >= 10, "{name}: only {users} recipe(s) set HIP_PATH");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Tensile finds its assembler and offload bundler in `$ROCM_PATH/llvm/bin`, then on PATH (Tensile
/// rocm-6.2.4 Common.py:2282-2300, rocm-5.4.3 Common.py:1975-1993). A compiler layer taken from an
/// installation keeps them elsewhere (Debian: `lib/llvm-21/bin`): the real night's rocBLAS stopped
/// with "No assembler available; set TENSILE_ROCM_ASSEMBLER_PATH". Every recipe that runs Tensile
/// names both in the stack's LLVM.
#[test]
fn every_recipe_that_runs_tensile_names_its_assembler_and_bundler_in_the_stacks_llvm() {
    let mut failures = Vec::new();
    let mut users = 0;
    for name in ["rocm-6.2", "rocm-5.4"] {
        let stack = stack(name);
        for r in stack.recipes.values() {
            if !r.source_deps.iter().any(|d| d == "tensile") {
                continue;
            }
            users += 1;
            for (var, tool) in [
                ("TENSILE_ROCM_ASSEMBLER_PATH", "clang++"),
                ("TENSILE_ROCM_OFFLOAD_BUNDLER_PATH", "clang-offload-bundler"),
            ] {
                let want = format!("{{rocm_llvm}}/bin/{tool}");
                if r.build.env.get(var) != Some(&want) {
                    failures.push(format!("{name}/{}: env {var} = {:?}; write {want:?}", r.name, r.build.env.get(var)));
                }
            }
        }
    }
    assert!(users >= 2, "only {users} recipe(s) run Tensile");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// composable_kernel rocm-6.2 (tag rocm-6.2.2 and release/rocm-rel-6.2 head 6d90a7cf2eb6): with
/// `INSTANCES_ONLY` true every instance compiles for CK's own default targets instead of
/// `GPU_TARGETS` (library/src/tensor_operation_instance/gpu/CMakeLists.txt:40-41, 71-72, 161-162),
/// which the real night showed: a gfx1010 build ran clang for seven other targets. Defined (to a
/// false value) still keeps out the examples and ckProfiler (CMakeLists.txt:495).
#[test]
fn composable_kernels_instances_compile_for_the_requested_targets_only() {
    let a = args(&stack("rocm-6.2"), "composable-kernel");
    assert!(a.iter().any(|x| x == "-DGPU_TARGETS={targets}"), "{a:?}");
    let value = a
        .iter()
        .find_map(|x| x.strip_prefix("-DINSTANCES_ONLY=").or_else(|| x.strip_prefix("-DINSTANCES_ONLY:BOOL=")))
        .unwrap_or_else(|| panic!("INSTANCES_ONLY is not defined: the examples and ckProfiler are built too: {a:?}"));
    assert!(
        matches!(value.to_ascii_uppercase().as_str(), "OFF" | "0" | "FALSE" | "NO" | "N"),
        "INSTANCES_ONLY={value}: the instances would compile for CK's default targets, not {{targets}}"
    );
}
