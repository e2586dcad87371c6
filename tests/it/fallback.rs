//! The binary fallback stacks as shipped (recipes/rocm-5.2-binary, recipes/rocm-5.7-binary):
//! their recipes name download.pytorch.org's wheels and index without a sha256; a stand-in for
//! that index runs on 127.0.0.1 (the test HTTP server, serving PEP 503 pages whose links carry
//! `#sha256=`, and small real wheels under the same file names), reached through a URL rewrite.
//! `plan` shows them unlocked, `lock` reads the digests from the pages into the lock file,
//! `build` verifies each wheel against them and publishes it into the stack's own index.

use std::path::{Path, PathBuf};

use crate::support::http::HttpServer;
use crate::support::wheel::{make_with, sha256_hex};
use crate::support::{copy_tree, hip_library, kpack, repo_root, rocmforge, text};

const TAG: &str = "cp310-cp310-linux_x86_64";

struct Fallbacks {
    home: tempfile::TempDir,
    tree: PathBuf,
    http: HttpServer,
    config: PathBuf,
    /// (stack, file name, bytes) of every served wheel.
    wheels: Vec<(String, String, Vec<u8>)>,
}

impl Fallbacks {
    fn new() -> Fallbacks {
        Fallbacks::with_5_2_torch_library(None)
    }

    /// The fallbacks, the 5.2 torch wheel holding `torch/lib/libk.so` when given (GPU code).
    fn with_5_2_torch_library(library: Option<Vec<u8>>) -> Fallbacks {
        let home = tempfile::tempdir().unwrap();
        let tree = home.path().join("tree");
        for stack in ["rocm-5.2-binary", "rocm-5.7-binary"] {
            let dst = tree.join("recipes").join(stack);
            copy_tree(&repo_root().join("recipes").join(stack), &dst);
            // The venv needs the stack's Python 3.10, which CI machines lack; the venv step is
            // tested on its own (env.rs). Everything else is the shipped stack.
            let st = dst.join("stack.toml");
            let t = std::fs::read_to_string(&st).unwrap();
            assert!(t.contains("python = \"3.10\"\n"));
            std::fs::write(&st, t.replace("python = \"3.10\"\n", "")).unwrap();
        }
        let http = HttpServer::start();
        let mut wheels = Vec::new();
        for (stack, rocm, torch, vision) in
            [("rocm-5.2-binary", "rocm5.2", "1.13.1", "0.14.1"), ("rocm-5.7-binary", "rocm5.7", "2.2.2", "0.17.2")]
        {
            for (dist, version) in [("torch", torch), ("torchvision", vision)] {
                let extra: Vec<(String, Vec<u8>)> = match (&library, dist, rocm) {
                    (Some(lib), "torch", "rocm5.2") => vec![("torch/lib/libk.so".into(), lib.clone())],
                    _ => Vec::new(),
                };
                let (name, bytes) =
                    make_with(dist, &format!("{version}+{rocm}"), TAG, dist, &format!("{dist} {rocm}"), &extra);
                let served = name.replace('+', "%2B");
                http.add(&format!("whl/{rocm}/{served}"), bytes.clone());
                // As download.pytorch.org writes its pages: absolute links, `#sha256=`.
                let page = format!(
                    "<!DOCTYPE html>\n<html><body><h1>Links for {dist}</h1>\n<a href=\"/whl/{rocm}/{served}#sha256={}\">{name}</a><br/>\n</body></html>\n",
                    sha256_hex(&bytes)
                );
                http.add(&format!("whl/{rocm}/{dist}/"), page.into_bytes());
                wheels.push((stack.to_string(), name, bytes));
            }
        }
        let config = home.path().join("config.toml");
        std::fs::write(&config, format!("[url-rewrite]\n\"https://download.pytorch.org/\" = \"{}\"\n", http.url("")))
            .unwrap();
        Fallbacks { home, tree, http, config, wheels }
    }

    fn cmd(&self, stack: &str) -> assert_cmd::Command {
        let mut c = rocmforge(self.home.path());
        c.env("ROCMFORGE_CONFIG", &self.config)
            .env("ROCMFORGE_RETRIES", "1")
            .env("ROCMFORGE_RETRY_BASE_MS", "10")
            .env("ROCMFORGE_HTTP_TIMEOUT_SECS", "5")
            .timeout(std::time::Duration::from_secs(60))
            .arg("--recipes")
            .arg(&self.tree)
            .arg("--stack")
            .arg(stack);
        c
    }

    fn ok(&self, stack: &str, args: &[&str]) -> String {
        let out = self.cmd(stack).args(args).output().unwrap();
        assert!(out.status.success(), "rocmforge --stack {stack} {}: {}", args.join(" "), text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn index(&self) -> PathBuf {
        self.home.path().join("state/rocmforge/index")
    }

    fn served(&self, stack: &str) -> Vec<&(String, String, Vec<u8>)> {
        self.wheels.iter().filter(|w| w.0 == stack).collect()
    }
}

fn published(index: &Path, project: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(index.join("simple").join(project))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.retain(|n| n.ends_with(".whl"));
    v.sort();
    v
}

#[test]
fn fallback_stacks_plan_lock_from_the_index_pages_and_publish_into_their_own_index() {
    let f = Fallbacks::new();
    for stack in ["rocm-5.2-binary", "rocm-5.7-binary"] {
        // Before the lock: the wheels have no digest; `build --locked` refuses to pin one.
        let plan = f.ok(stack, &["plan", "torchvision"]);
        assert!(plan.contains("unpinned"), "{plan}");
        let out = f.cmd(stack).args(["build", "torchvision", "--locked"]).output().unwrap();
        assert!(!out.status.success(), "an unpinned wheel must not be built under --locked: {}", text(&out));
        assert!(text(&out).contains("has no `sha256`"), "{}", text(&out));
        assert!(published(&f.index().join(stack), "torch").is_empty());

        let lock = f.ok(stack, &["lock"]);
        let lock_file = std::fs::read_to_string(f.tree.join("recipes").join(stack).join("rocmforge.lock")).unwrap();
        for (_, name, bytes) in f.served(stack) {
            let digest = sha256_hex(bytes);
            let dist = name.split('-').next().unwrap();
            assert!(lock.contains(&format!("{dist}: sha256 {}", &digest[..12])), "{lock}");
            assert!(lock_file.contains(&format!("sha256 = \"{digest}\"")), "{lock_file}");
            let rocm = if stack == "rocm-5.2-binary" { "rocm5.2" } else { "rocm5.7" };
            assert!(
                lock_file.contains(&format!("page = \"https://download.pytorch.org/whl/{rocm}/{dist}/\"")),
                "the lock names the page as the recipe does: {lock_file}"
            );
        }

        let plan = f.ok(stack, &["plan", "torchvision"]);
        assert!(!plan.contains("unpinned"), "{plan}");
        let out = f.ok(stack, &["build", "torchvision", "--locked"]);
        assert!(out.contains("built 2 recipe(s)"), "{out}");

        // Published byte for byte into the stack's own index, with the recorded digests.
        let own = f.index().join(stack);
        for (_, name, bytes) in f.served(stack) {
            let dist = name.split('-').next().unwrap();
            assert_eq!(published(&own, dist), std::slice::from_ref(name), "{stack}");
            assert!(std::fs::read(own.join("simple").join(dist).join(name)).unwrap() == *bytes);
            let page = std::fs::read_to_string(own.join("simple").join(dist).join("index.html")).unwrap();
            assert!(page.contains(&format!("#sha256={}", sha256_hex(bytes))), "{page}");
        }
        // The index commands mean the stack's own index: the `--stack` one, else the one built
        // last.
        let url = f.ok(stack, &["index", "url"]);
        assert!(url.trim().ends_with(&format!("/index/{stack}/simple/")), "{url}");
        let listed = f.ok(stack, &["index", "list"]);
        assert!(listed.contains("torchvision"), "{listed}");
        let mut last = rocmforge(f.home.path());
        let out = last.env("ROCMFORGE_CONFIG", &f.config).arg("--recipes").arg(&f.tree).args(["index", "url"]);
        let out = out.output().unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).trim().ends_with(&format!("/index/{stack}/simple/")),
            "{}",
            text(&out)
        );
    }
    // Never mixed: the shared index holds none of them, and each stack's index only its own.
    assert!(published(&f.index(), "torch").is_empty());
    assert_eq!(
        published(&f.index().join("rocm-5.2-binary"), "torch"),
        ["torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl"]
    );
    assert_eq!(
        published(&f.index().join("rocm-5.7-binary"), "torch"),
        ["torch-2.2.2+rocm5.7-cp310-cp310-linux_x86_64.whl"]
    );
}

/// A binary fallback's lines: no prefix variables (its wheels carry their own ROCm), the
/// profile's override and GEMM-only knobs.
#[test]
fn env_of_the_rocm_5_7_fallback_sets_its_profile() {
    let f = Fallbacks::new();
    // An RX 5700 XT (PCI 1002:731f) whose driver gives no KFD node: the card line says so.
    let host = f.home.path().join("host");
    for (file, text) in [("vendor", "0x1002\n"), ("device", "0x731f\n"), ("class", "0x030000\n")] {
        std::fs::create_dir_all(host.join("sys/bus/pci/devices/0000:03:00.0")).unwrap();
        std::fs::write(host.join("sys/bus/pci/devices/0000:03:00.0").join(file), text).unwrap();
    }
    let out =
        f.cmd("rocm-5.7-binary").args(["env", "--shell", "bash"]).env("ROCMFORGE_HOST_ROOT", &host).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(lines.contains("export HSA_OVERRIDE_GFX_VERSION='10.3.0'"), "{lines}");
    assert!(!lines.contains("ROCM_PATH"), "{lines}");
    insta::assert_snapshot!("env_rocm_5_7_binary", lines);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no venv at"), "the missing venv is named: {err}");
}

/// The wheel's GPU code decides the profile: torch carrying only gfx1030 code makes `env` for a
/// gfx1010 card take the 5.2 fallback's override profile and say why; torch carrying neither
/// gfx1010 nor gfx1030 code fails the build naming what it carries, and nothing is published.
#[test]
fn the_5_2_fallback_runs_a_gfx1010_as_the_gfx1030_its_wheel_carries_and_refuses_one_with_neither() {
    let stack = "rocm-5.2-binary";
    let f = Fallbacks::with_5_2_torch_library(Some(hip_library(&["gfx1030"])));
    f.ok(stack, &["lock"]);
    let out = f.cmd(stack).args(["build", "torch", "--target", "gfx1010"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("GPU code: torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl: gfx1030"),
        "{}",
        text(&out)
    );
    let env = f.ok(stack, &["env", "--shell", "bash", "--target", "gfx1010"]);
    assert!(env.contains("export HSA_OVERRIDE_GFX_VERSION='10.3.0'"), "{env}");
    assert!(
        env.contains("# the wheels carry no gfx1010 code (torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl: gfx1030); profile gfx1030-override runs the card as gfx1030 (HSA_OVERRIDE_GFX_VERSION=10.3.0)"),
        "{env}"
    );
    let doctor = f.cmd(stack).args(["doctor", "--target", "gfx1010"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&doctor.stdout).contains("profile gfx1030-override: the wheels carry no gfx1010 code"),
        "{}",
        text(&doctor)
    );
    // verify runs its cases under that profile and says why (a stand-in Python passes the case).
    let python = f.home.path().join("stand-in-python");
    std::fs::write(
        &python,
        "#!/bin/sh\necho \"ROCMFORGE-RESULT {\\\"first\\\": 1.0, \\\"cached\\\": 0.5}\"\nenv > \"$0.env\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let verify = f
        .cmd(stack)
        .args(["verify", "--case", "matmul-1024", "--target", "gfx1010", "--python"])
        .arg(&python)
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", text(&verify));
    assert!(
        String::from_utf8_lossy(&verify.stdout)
            .contains("profile: gfx1030-override (the wheels carry no gfx1010 code (torch-1.13.1+rocm5.2"),
        "{}",
        text(&verify)
    );
    let case_env = std::fs::read_to_string(f.home.path().join("stand-in-python.env")).unwrap();
    assert!(case_env.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0\n"), "{case_env}");
    // A profile asked for by name is kept, with a warning that the card finds no code.
    let out = f
        .cmd(stack)
        .args(["env", "--shell", "bash", "--target", "gfx1010", "--profile", "implicit-gemm"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("HSA_OVERRIDE_GFX_VERSION"), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hipErrorNoBinaryForGpu"), "{}", text(&out));

    let g = Fallbacks::with_5_2_torch_library(Some(hip_library(&["gfx900"])));
    g.ok(stack, &["lock"]);
    let out = g.cmd(stack).args(["build", "torch", "--target", "gfx1010"]).output().unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("torch: the wheels carry GPU code for gfx900 only (torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl: gfx900), and no profile of stack `rocm-5.2-binary` runs a gfx1010 as one of those targets"),
        "{err}"
    );
    assert!(published(&g.index().join(stack), "torch").is_empty(), "nothing published");
}

#[test]
fn a_wheel_that_differs_from_its_index_digest_is_refused() {
    let f = Fallbacks::new();
    let stack = "rocm-5.7-binary";
    f.ok(stack, &["lock"]);
    // The server now hands out other bytes under the locked file name.
    let (_, name, _) = f.served(stack).into_iter().find(|w| w.1.starts_with("torch-")).unwrap().clone();
    f.http.add(&format!("whl/rocm5.7/{}", name.replace('+', "%2B")), b"not the wheel the page promised".to_vec());
    let out = f.cmd(stack).args(["build", "torch"]).output().unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sha256"), "the failure names the digest: {}", text(&out));
    assert!(published(&f.index().join(stack), "torch").is_empty(), "nothing published");
}

#[test]
fn lock_names_the_page_when_the_index_does_not_link_the_file() {
    let f = Fallbacks::new();
    f.http.add(
        "whl/rocm5.2/torch/",
        b"<html><body><a href=\"/whl/rocm5.2/torch-1.0-py3-none-any.whl\">x</a></body></html>".to_vec(),
    );
    let out = f.cmd("rocm-5.2-binary").arg("lock").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("https://download.pytorch.org/whl/rocm5.2/torch/"), "{err}");
    assert!(err.contains("has no link to `torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl`"), "{err}");
    assert!(err.contains("torch-1.0-py3-none-any.whl"), "the links it has are listed: {err}");
}

/// AMD's multi-arch wheels (recipes/rocm-7.14-binary) as shipped, against a stand-in of
/// repo.amd.com/rocm/whl-multi-arch/ on 127.0.0.1: our own small wheels under the real project
/// names, per-Python files (cp311, cp312) and an older release beside each, torch requiring
/// `rocm[libraries]==7.14.0` (the sdist the index here does not even serve), triton and
/// filelock. A stand-in PyPI serves filelock. The venv's Python is 3.11 here (CI's); the stack's
/// 3.12 is swapped, nothing else.
///
/// The device code is in AMD's kpack form, laid out as rocm-kpack's wheel splitter lays out
/// torch's wheels (ROCm/rocm-systems shared/kpack/python/rocm_kpack/wheel_splitter.py, commit
/// 2d9bbf45: `_compute_kpack_search_pattern`, `_create_single_kpack`, `_create_device_wheel`)
/// with the overlay roots TheRock gives it (`torch/`, `torchvision/`:
/// multi_arch_build_portable_linux_pytorch_wheels.yml:355, :367 at therock-7.14): the host
/// library (`torch/lib/libtorch_hip.so`, clang-15) carries no device code and a
/// `.rocm_kpack_ref` marker naming kernels `lib/libtorch_hip.so` (its path under the overlay
/// root) in `../.kpack/torch_@GFXARCH@.kpack`; the device wheel holds
/// `torch/.kpack/torch_<arch>.kpack` (zstd per kernel, the key `lib/libtorch_hip.so#0`, a
/// hipcc code object). The SDK's as its artifact splitter and TheRock's packaging lay it out
/// (rocm-kpack python/rocm_kpack/artifact_splitter.py `compute_kpack_search_pattern`,
/// `inject_kpack_references` at e3483286; TheRock py_packaging.py:253-266 at therock-7.14: the
/// device wheel overlays the libraries package's directory): `_rocm_sdk_libraries/lib/
/// librocblas.so.5`, kernels `math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5` in
/// `../.kpack/blas_lib_@GFXARCH@.kpack`. Assumed, not read from a real wheel: the directory
/// name `_rocm_sdk_libraries` (its nonce suffix, `get_py_package_name`, taken as empty), the
/// artifact prefix `blas_lib` and the stage path in the kernel name.
struct AmdIndex {
    home: tempfile::TempDir,
    tree: PathBuf,
    http: HttpServer,
    config: PathBuf,
}

const AMD_STACK: &str = "rocm-7.14-binary";

/// What a stand-in wheel carries besides its module.
#[derive(Clone, Copy, PartialEq)]
enum Carries {
    Nothing,
    /// A host library without device code, its marker naming `(overlay, library under the
    /// overlay, kernel name, search path)`.
    Marked(&'static str, &'static str, &'static str, &'static str),
    /// The archive `<overlay>/.kpack/<group>_<arch>.kpack` of the kernels of `kernel name`:
    /// `(overlay, group, kernel name)`.
    Archive(&'static str, &'static str, &'static str),
}

const TORCH_LIB: Carries =
    Carries::Marked("torch", "lib/libtorch_hip.so", "lib/libtorch_hip.so", "../.kpack/torch_@GFXARCH@.kpack");
const TORCH_KPACK: Carries = Carries::Archive("torch", "torch", "lib/libtorch_hip.so");
const VISION_LIB: Carries = Carries::Marked("torchvision", "_C.so", "_C.so", ".kpack/torchvision_@GFXARCH@.kpack");
const VISION_KPACK: Carries = Carries::Archive("torchvision", "torchvision", "_C.so");
const SDK_LIB: Carries = Carries::Marked(
    "_rocm_sdk_libraries",
    "lib/librocblas.so.5",
    "math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5",
    "../.kpack/blas_lib_@GFXARCH@.kpack",
);
const SDK_KPACK: Carries =
    Carries::Archive("_rocm_sdk_libraries", "blas_lib", "math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5");

/// `(project, version, per Python, requires, what it carries)` of the stand-in wheels: the
/// host wheels, then each gfx101X target's three device wheels.
const AMD_WHEELS: [(&str, &str, bool, &[&str], Carries); 14] = [
    ("rocm-sdk-core", "7.14.0", false, &[], Carries::Nothing),
    ("rocm-sdk-libraries", "7.14.0", false, &["rocm-sdk-core==7.14.0"], SDK_LIB),
    ("triton", "3.7.1+rocm7.14.0", true, &[], Carries::Nothing),
    (
        "torch",
        "2.12.0+rocm7.14.0",
        true,
        // As rocm-kpack's splitter rewrites the host wheel's METADATA (`_rewrite_host_metadata`):
        // each device wheel behind an extra.
        &[
            "filelock",
            "rocm[libraries]==7.14.0",
            "triton==3.7.1+rocm7.14.0",
            "numpy>=2; extra == \"numpy\"",
            "rocm-sdk-core==7.14.0; python_version >= \"3.8\"",
            "amd-torch-device-gfx1010 == 2.12.0+rocm7.14.0; extra == \"device-gfx1010\"",
            "amd-torch-device-gfx1011 == 2.12.0+rocm7.14.0; extra == \"device-gfx1011\"",
            "amd-torch-device-gfx1012 == 2.12.0+rocm7.14.0; extra == \"device-gfx1012\"",
        ],
        TORCH_LIB,
    ),
    ("torchvision", "0.27.0+rocm7.14.0", true, &["torch==2.12.0+rocm7.14.0", "rocm[libraries]==7.14.0"], VISION_LIB),
    ("rocm-sdk-device-gfx1010", "7.14.0", false, &["rocm-sdk-libraries==7.14.0"], SDK_KPACK),
    (
        "amd-torch-device-gfx1010",
        "2.12.0+rocm7.14.0",
        true,
        &["torch==2.12.0+rocm7.14.0", "rocm-sdk-device-gfx1010==7.14.0"],
        TORCH_KPACK,
    ),
    ("amd-torchvision-device-gfx1010", "0.27.0+rocm7.14.0", true, &["torchvision==0.27.0+rocm7.14.0"], VISION_KPACK),
    ("rocm-sdk-device-gfx1011", "7.14.0", false, &["rocm-sdk-libraries==7.14.0"], SDK_KPACK),
    (
        "amd-torch-device-gfx1011",
        "2.12.0+rocm7.14.0",
        true,
        &["torch==2.12.0+rocm7.14.0", "rocm-sdk-device-gfx1011==7.14.0"],
        TORCH_KPACK,
    ),
    ("amd-torchvision-device-gfx1011", "0.27.0+rocm7.14.0", true, &["torchvision==0.27.0+rocm7.14.0"], VISION_KPACK),
    ("rocm-sdk-device-gfx1012", "7.14.0", false, &["rocm-sdk-libraries==7.14.0"], SDK_KPACK),
    (
        "amd-torch-device-gfx1012",
        "2.12.0+rocm7.14.0",
        true,
        &["torch==2.12.0+rocm7.14.0", "rocm-sdk-device-gfx1012==7.14.0"],
        TORCH_KPACK,
    ),
    ("amd-torchvision-device-gfx1012", "0.27.0+rocm7.14.0", true, &["torchvision==0.27.0+rocm7.14.0"], VISION_KPACK),
];

/// Whether a build for `target` fetches `project` (the host wheels, and `target`'s device wheels).
fn fetched_for(project: &str, target: &str) -> bool {
    !project.contains("-device-") || project.ends_with(target)
}

/// The target a device project is named for (`amd-torch-device-gfx1010`: gfx1010).
fn named_target(project: &str) -> &str {
    project.rsplit('-').next().filter(|t| t.starts_with("gfx")).unwrap_or_else(|| panic!("{project}: no target"))
}

/// The members `carries` adds to a stand-in wheel of `project`, whose device archives hold code
/// for `arch` (the target the project is named for, unless a test says otherwise).
fn carried(dir: &Path, project: &str, carries: Carries, arch: &str) -> Vec<(String, Vec<u8>)> {
    match carries {
        Carries::Nothing => Vec::new(),
        Carries::Marked(overlay, lib, kernels, search) => {
            let file = lib.rsplit('/').next().unwrap();
            let built =
                kpack::marked_library(&dir.join(project), file, ".rocm_kpack_ref", &kpack::marker(kernels, &[search]));
            vec![(format!("{overlay}/{lib}"), std::fs::read(built).unwrap())]
        }
        Carries::Archive(overlay, group, kernels) => {
            let code = kpack::code_object(arch);
            let archive = kpack::kpack_archive(&[arch], &[(&format!("{kernels}#0"), arch, &code)], true);
            vec![(format!("{overlay}/.kpack/{group}_{}.kpack", named_target(project)), archive)]
        }
    }
}

impl AmdIndex {
    fn new() -> AmdIndex {
        AmdIndex::with(&AMD_WHEELS, "triton==3.7.1+rocm7.14.0", None)
    }

    /// The stand-in index, torch requiring `triton` (its Requires-Dist on triton).
    fn with_torch_requiring(triton: &str) -> AmdIndex {
        AmdIndex::with(&AMD_WHEELS, triton, None)
    }

    /// The stand-in index serving `wheels`, torch requiring `triton`, the device wheels'
    /// archives holding code for `archive_arch` instead of the target they are named for.
    fn with(wheels: &[(&str, &str, bool, &[&str], Carries)], triton: &str, archive_arch: Option<&str>) -> AmdIndex {
        let home = tempfile::tempdir().unwrap();
        let tree = home.path().join("tree");
        let dst = tree.join("recipes").join(AMD_STACK);
        copy_tree(&repo_root().join("recipes").join(AMD_STACK), &dst);
        let st = dst.join("stack.toml");
        let t = std::fs::read_to_string(&st).unwrap();
        assert!(t.contains("python = \"3.12\"\n"));
        std::fs::write(&st, t.replace("python = \"3.12\"\n", "python = \"3.11\"\n")).unwrap();
        let http = HttpServer::start();
        for &(project, version, per_python, requires, carries) in wheels {
            let module = project.replace('-', "_");
            let requires: Vec<&str> =
                requires.iter().map(|r| if r.starts_with("triton==") { triton } else { *r }).collect();
            let arch = match carries {
                Carries::Archive(..) => archive_arch.unwrap_or(named_target(project)),
                _ => "",
            };
            let extra = carried(&home.path().join("libs"), project, carries, arch);
            let tags: &[&str] = if per_python {
                &["cp311-cp311-manylinux_2_28_x86_64", "cp312-cp312-manylinux_2_28_x86_64"]
            } else {
                &["py3-none-linux_x86_64"]
            };
            // An older release beside the one the recipe names.
            let older = if version.starts_with("7.14") { "7.13.0".to_string() } else { format!("0.1+{version}") };
            let mut page = format!("<!DOCTYPE html>\n<html><body><h1>Links for {project}</h1>\n");
            for v in [older.as_str(), version] {
                for tag in tags {
                    let (name, bytes) = crate::support::wheel::make_requiring(
                        project,
                        v,
                        tag,
                        &module,
                        &format!("{project} {v} {tag}"),
                        &extra,
                        &requires,
                    );
                    let served = name.replace('+', "%2B");
                    http.add(&format!("rocm/whl-multi-arch/files/{served}"), bytes.clone());
                    page.push_str(&format!(
                        "<a href=\"../files/{served}#sha256={}\">{name}</a><br/>\n",
                        sha256_hex(&bytes)
                    ));
                }
            }
            http.add(&format!("rocm/whl-multi-arch/{project}/"), format!("{page}</body></html>\n").into_bytes());
        }
        // The stand-in PyPI: filelock only.
        let (name, bytes) = crate::support::wheel::make("filelock", "3.20.0", "py3-none-any", "filelock", "lock");
        http.add(&format!("pypi/files/{name}"), bytes.clone());
        http.add(
            "pypi/simple/filelock/",
            format!("<a href=\"../../files/{name}#sha256={}\">{name}</a>\n", sha256_hex(&bytes)).into_bytes(),
        );
        let config = home.path().join("config.toml");
        std::fs::write(&config, format!("[url-rewrite]\n\"https://repo.amd.com/\" = \"{}\"\n", http.url(""))).unwrap();
        AmdIndex { home, tree, http, config }
    }

    fn cmd(&self) -> assert_cmd::Command {
        let mut c = rocmforge(self.home.path());
        let pypi = self.http.url("pypi/simple/");
        c.env("ROCMFORGE_CONFIG", &self.config)
            .env("ROCMFORGE_RETRIES", "1")
            .env("ROCMFORGE_RETRY_BASE_MS", "10")
            .env("ROCMFORGE_HTTP_TIMEOUT_SECS", "5")
            .env("PIP_INDEX_URL", &pypi)
            .env("UV_INDEX_URL", &pypi)
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("PIP_CONFIG_FILE", "/dev/null")
            .timeout(std::time::Duration::from_secs(300))
            .arg("--recipes")
            .arg(&self.tree)
            .arg("--stack")
            .arg(AMD_STACK);
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "rocmforge --stack {AMD_STACK} {}: {}", args.join(" "), text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[test]
fn amd_wheels_lock_from_a_pep_503_index_build_and_fill_the_venv_without_the_rocm_sdist() {
    let a = AmdIndex::new();
    let index = "https://repo.amd.com/rocm/whl-multi-arch/";
    let plan = a.ok(&["plan", "torchvision"]);
    assert!(plan.contains(&format!("stack {AMD_STACK} (ROCm 7.14.0)")), "{plan}");
    // Nothing is compiled: no recipe counts as a night's unknown build.
    assert!(!plan.contains("without `[estimate]`"), "{plan}");
    for (project, version, ..) in AMD_WHEELS {
        let asked = if project == "triton" { "==3.7.*" } else { version };
        assert!(
            plan.contains(&format!("source:  {project} {asked} from index {index} (unpinned")),
            "{project}: {plan}"
        );
    }

    let lock = a.ok(&["lock"]);
    for (project, version, per_python, ..) in AMD_WHEELS {
        let tag = if per_python { "cp311-cp311-manylinux_2_28_x86_64" } else { "py3-none-linux_x86_64" };
        let file = format!("{}-{version}-{tag}.whl", project.replace('-', "_"));
        assert!(lock.contains(&format!("{project}: {file} sha256 ")), "{project}: {lock}");
    }
    // Once locked, plan lists each wheel with its index, release and file.
    let plan = a.ok(&["plan", "torchvision"]);
    assert!(
        plan.contains(&format!(
            "source:  torch 2.12.0+rocm7.14.0 from index {index}: {index}files/torch-2.12.0%2Brocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl (sha256 "
        )),
        "{plan}"
    );
    assert!(plan.contains("witness: ROCm/pytorch issue 3518"), "{plan}");

    let out = a.cmd().args(["build", "torchvision", "--locked"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("built 8 recipe(s)"), "{}", text(&out));
    assert!(text(&out).contains("amd-torch-device-gfx1012: skipped: the gfx1012 device wheel"), "{}", text(&out));
    assert!(stdout.contains("--no-deps after their requirements filelock"), "{}", text(&out));
    // Published into the stack's own index.
    let own = a.home.path().join("state/rocmforge/index").join(AMD_STACK);
    for (project, version, per_python, ..) in AMD_WHEELS {
        let tag = if per_python { "cp311-cp311-manylinux_2_28_x86_64" } else { "py3-none-linux_x86_64" };
        if fetched_for(project, "gfx1010") {
            assert_eq!(published(&own, project), [format!("{}-{version}-{tag}.whl", project.replace('-', "_"))]);
        } else {
            assert!(published(&own, project).is_empty(), "{project}: another card's device wheel");
        }
    }
    // The venv holds every wheel and filelock, and never asked any index for `rocm`.
    let py = a.home.path().join("state/rocmforge/venvs").join(AMD_STACK).join("bin/python");
    let got = std::process::Command::new(&py)
        .args([
            "-c",
            "import torch, torchvision, triton, filelock, amd_torch_device_gfx1010, rocm_sdk_core; print(torch.VALUE)",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "torch 2.12.0+rocm7.14.0 cp311-cp311-manylinux_2_28_x86_64\n",
        "{}",
        text(&got)
    );
    let requests: Vec<String> = a.http.with(|s| s.requests.iter().map(|r| r.0.clone()).collect());
    assert!(requests.iter().any(|p| p == "/pypi/simple/filelock/"), "{requests:?}");
    assert!(!requests.iter().any(|p| p.contains("/rocm/") && p.ends_with("/rocm/")), "{requests:?}");
    assert!(!requests.iter().any(|p| p.contains("simple/rocm") || p.contains("/numpy")), "{requests:?}");

    // The device wheels' kpack archives carry gfx1010 code, and the host libraries' markers
    // lead there: every wheel with device code is recorded as gfx1010, so the card runs
    // natively, no override.
    for wheel in [
        "rocm_sdk_device_gfx1010-7.14.0-py3-none-linux_x86_64.whl",
        "rocm_sdk_libraries-7.14.0-py3-none-linux_x86_64.whl",
        "amd_torch_device_gfx1010-2.12.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.12.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "amd_torchvision_device_gfx1010-0.27.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torchvision-0.27.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    ] {
        assert!(text(&out).contains(&format!("GPU code: {wheel}: gfx1010\n")), "{wheel}: {}", text(&out));
    }
    let records = a.home.path().join("state/rocmforge/prefix").join(AMD_STACK).join("share/rocmforge/gpu-targets");
    let torch: serde_json::Value = serde_json::from_slice(&std::fs::read(records.join("torch.json")).unwrap()).unwrap();
    assert_eq!(torch[0]["targets"], serde_json::json!(["gfx1010"]), "{torch}");
    let env = a.ok(&["env", "--shell", "bash", "--target", "gfx1010"]);
    assert!(!env.contains("HSA_OVERRIDE_GFX_VERSION"), "{env}");
    assert!(env.contains("the wheels carry gfx1010 code"), "{env}");
    // And a second build does nothing.
    let again = a.ok(&["build", "torchvision", "--locked"]);
    assert!(!again.contains("built 8"), "{again}");
}

/// The same wheels whose kpack archives hold gfx1030 code only (the device wheels' names and the
/// markers unchanged): the stack has no profile that runs a gfx1010 as a gfx1030, so the first
/// device wheel stops the build, naming what it carries, and is not published.
#[test]
fn amd_wheels_whose_kpack_archives_hold_gfx1030_only_are_refused_for_a_gfx1010() {
    let a = AmdIndex::with(&AMD_WHEELS, "triton==3.7.1+rocm7.14.0", Some("gfx1030"));
    a.ok(&["lock"]);
    let out = a.cmd().args(["build", "torchvision", "--locked", "--target", "gfx1010"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rocm-sdk-device-gfx1010: the wheels carry GPU code for gfx1030 only (rocm_sdk_device_gfx1010-7.14.0-py3-none-linux_x86_64.whl: gfx1030), and no profile of stack `rocm-7.14-binary` runs a gfx1010 as one of those targets"),
        "{err}"
    );
    let own = a.home.path().join("state/rocmforge/index").join(AMD_STACK);
    assert!(published(&own, "rocm-sdk-device-gfx1010").is_empty(), "nothing published");
    assert!(published(&own, "torch").is_empty(), "nothing after it built");
}

/// An RX 5500 (gfx1012) on the same stack and lock file: `plan` and `build` take gfx1012's three
/// device wheels and skip gfx1010's and gfx1011's (never downloaded), every host library's
/// marker leads to gfx1012's archives, and the card runs natively.
#[test]
fn amd_wheels_for_a_gfx1012_fetch_only_its_device_wheels_and_run_it_natively() {
    let a = AmdIndex::new();
    let lock = a.ok(&["lock"]);
    assert!(lock.contains("wrote ") && lock.contains(": 14 new"), "one lock file pins every card's wheels: {lock}");
    let plan = a.ok(&["plan", "torchvision", "--target", "gfx1012", "--locked"]);
    for (project, ..) in AMD_WHEELS {
        // Its entry: from `N. <project> ` to the next entry.
        let entry: Vec<&str> = plan
            .lines()
            .skip_while(|l| {
                !l.trim_start().split_once(". ").is_some_and(|(_, r)| r.starts_with(&format!("{project} ")))
            })
            .take_while({
                let mut first = true;
                move |l| std::mem::take(&mut first) || !l.trim_start().starts_with(|c: char| c.is_ascii_digit())
            })
            .collect();
        let skipped = entry.iter().any(|l| l.trim_start().starts_with("state:   skipped"));
        assert_eq!(skipped, !fetched_for(project, "gfx1012"), "{project}: {}", entry.join("\n"));
    }
    let out = a.cmd().args(["build", "torchvision", "--locked", "--target", "gfx1012"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("built 8 recipe(s)"), "{}", text(&out));
    let own = a.home.path().join("state/rocmforge/index").join(AMD_STACK);
    for (project, ..) in AMD_WHEELS {
        assert_eq!(!published(&own, project).is_empty(), fetched_for(project, "gfx1012"), "{project}");
    }
    let requests: Vec<String> = a.http.with(|s| s.requests.iter().map(|r| r.0.clone()).collect());
    let files: Vec<&String> = requests.iter().filter(|p| p.contains("/files/") && p.contains("_device_")).collect();
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(files.iter().all(|p| p.contains("gfx1012")), "{files:?}");
    for wheel in [
        "rocm_sdk_device_gfx1012-7.14.0-py3-none-linux_x86_64.whl",
        "rocm_sdk_libraries-7.14.0-py3-none-linux_x86_64.whl",
        "amd_torch_device_gfx1012-2.12.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.12.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torchvision-0.27.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    ] {
        assert!(text(&out).contains(&format!("GPU code: {wheel}: gfx1012\n")), "{wheel}: {}", text(&out));
    }
    let env = a.ok(&["env", "--shell", "bash", "--target", "gfx1012"]);
    assert!(!env.contains("HSA_OVERRIDE_GFX_VERSION"), "{env}");
    assert!(env.contains("the wheels carry gfx1012 code"), "{env}");
    let py = a.home.path().join("state/rocmforge/venvs").join(AMD_STACK).join("bin/python");
    let got = std::process::Command::new(&py)
        .args(["-c", "import torch, amd_torch_device_gfx1012, amd_torchvision_device_gfx1012, rocm_sdk_device_gfx1012; print('ok')"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&got.stdout), "ok\n", "{}", text(&got));
    let site = py.parent().unwrap().parent().unwrap().join("lib/python3.11/site-packages");
    assert!(site.join("torch/.kpack/torch_gfx1012.kpack").is_file(), "the archive lies where torch's marker looks");
    assert!(!site.join("torch/.kpack/torch_gfx1010.kpack").exists());
}

/// Two cards in one build (`--target gfx1010,gfx1012`): each device wheel is checked against its
/// own target, both cards' device wheels are built, and `env` runs either card natively, its
/// code being split across the per-target wheels.
#[test]
fn amd_wheels_for_two_cards_build_both_device_wheels_and_run_each_natively() {
    let a = AmdIndex::new();
    a.ok(&["lock"]);
    let out = a.cmd().args(["build", "torchvision", "--locked", "--target", "gfx1010,gfx1012"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("built 11 recipe(s)"), "{}", text(&out));
    assert!(
        text(&out)
            .contains("GPU code: torch-2.12.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl: gfx1010, gfx1012\n"),
        "{}",
        text(&out)
    );
    for t in ["gfx1010", "gfx1012"] {
        let env = a.ok(&["env", "--shell", "bash", "--target", t]);
        assert!(!env.contains("HSA_OVERRIDE_GFX_VERSION"), "{env}");
        assert!(env.contains(&format!("the wheels carry {t} code")), "{t}: {env}");
    }
}

/// A card none of the device wheels is for (gfx1030): every device recipe is skipped, and the
/// first host wheel whose libraries' markers lead nowhere stops the build, saying why and what
/// to do; it is not published.
#[test]
fn amd_wheels_for_a_target_without_device_wheels_stop_at_the_first_host_library_without_code() {
    let a = AmdIndex::new();
    a.ok(&["lock"]);
    // The stack serves gfx101X only: another target is refused before anything is fetched.
    let asked = |a: &AmdIndex| a.http.with(|s| s.requests.len());
    let requests = asked(&a);
    for cmd in ["plan", "build"] {
        let out = a.cmd().args([cmd, "torchvision", "--locked", "--target", "gfx1030"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("stack `rocm-7.14-binary` serves gfx1010, gfx1011, gfx1012 only (")
                && err.contains("`supported-targets`), not gfx1030"),
            "{err}"
        );
    }
    assert_eq!(asked(&a), requests, "nothing fetched");
    // Without that line, the engine's own rule stops the build at the first host library.
    let st = a.tree.join("recipes").join(AMD_STACK).join("stack.toml");
    let t = std::fs::read_to_string(&st).unwrap();
    std::fs::write(&st, t.replace("supported-targets = [\"gfx1010\", \"gfx1011\", \"gfx1012\"]\n", "")).unwrap();
    let out = a.cmd().args(["build", "torchvision", "--locked", "--target", "gfx1030"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rocm-sdk-libraries: the device code of _rocm_sdk_libraries/lib/librocblas.so.5 was moved into kpack archives (.rocm_kpack_ref), and no wheel of its build dependencies holds one for gfx1030: no device-wheel recipe of stack `rocm-7.14-binary` is built for it"),
        "{err}"
    );
    assert!(err.contains("recipes/rocm-7.14-binary/stack.toml"), "{err}");
    assert!(published(&a.home.path().join("state/rocmforge/index").join(AMD_STACK), "rocm-sdk-libraries").is_empty());
}

/// With --no-deps nothing would notice torch pinning another Triton than the stack's: the fill
/// refuses, naming both files and what to change.
#[test]
fn amd_wheels_that_pin_another_of_the_stacks_wheels_are_refused_before_the_venv_holds_them() {
    let a = AmdIndex::with_torch_requiring("triton (==3.7.0+rocm7.14.0)");
    a.ok(&["lock"]);
    let out = a.cmd().args(["build", "torchvision", "--locked"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the build succeeded, but its venv was not filled"), "{err}");
    assert!(
        err.contains("  - torch-2.12.0+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl requires `triton (==3.7.0+rocm7.14.0)`, but the stack's is triton-3.7.1+rocm7.14.0-cp311-cp311-manylinux_2_28_x86_64.whl"),
        "{err}"
    );
    assert!(err.contains("recipes/rocm-7.14-binary/stack.toml"), "{err}");
    let site = a.home.path().join("state/rocmforge/venvs").join(AMD_STACK).join("lib/python3.11/site-packages");
    assert!(!site.join("torch").exists(), "nothing installed");
}

/// A `venv-skip` name no wheel of the stack requires means nothing: the fill refuses it, naming
/// it, the stack file and what the wheels do require.
#[test]
fn a_venv_skip_no_wheel_requires_is_refused_before_the_venv_is_filled() {
    let a = AmdIndex::new();
    let st = a.tree.join("recipes").join(AMD_STACK).join("stack.toml");
    let t = std::fs::read_to_string(&st).unwrap();
    assert!(t.contains("venv-skip = [\"rocm\"]"));
    std::fs::write(&st, t.replace("venv-skip = [\"rocm\"]", "venv-skip = [\"rocm\", \"rocm-nothing\"]")).unwrap();
    a.ok(&["lock"]);
    let out = a.cmd().args(["build", "torchvision", "--locked"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`venv-skip` in ")
            && err.contains(
                "recipes/rocm-7.14-binary/stack.toml names `rocm-nothing`, which no wheel of the stack requires"
            )
            && err.contains("the wheels require: ")
            && err.contains("rocm, "),
        "{err}"
    );
    let site = a.home.path().join("state/rocmforge/venvs").join(AMD_STACK).join("lib/python3.11/site-packages");
    assert!(!site.join("torch").exists(), "nothing installed");
}

/// Without uv, pip fills the venv the same way: requirements first, then the wheels with
/// --no-deps, and no index is asked for `rocm`.
#[test]
fn amd_wheels_fill_the_venv_with_pip_without_the_rocm_sdist() {
    let a = AmdIndex::new();
    a.ok(&["lock"]);
    let out = a.cmd().env("ROCMFORGE_VENV_NO_UV", "1").args(["build", "torchvision", "--locked"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(pip, --no-deps after their requirements filelock)"),
        "{}",
        text(&out)
    );
    let py = a.home.path().join("state/rocmforge/venvs").join(AMD_STACK).join("bin/python");
    let got = std::process::Command::new(&py)
        .args(["-c", "import torch, triton, filelock, amd_torchvision_device_gfx1010; print(triton.VALUE)"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "triton 3.7.1+rocm7.14.0 cp311-cp311-manylinux_2_28_x86_64\n",
        "{}",
        text(&got)
    );
    let requests: Vec<String> = a.http.with(|s| s.requests.iter().map(|r| r.0.clone()).collect());
    assert!(requests.iter().any(|p| p == "/pypi/simple/filelock/"), "{requests:?}");
    assert!(!requests.iter().any(|p| p.ends_with("/rocm/") || p.contains("simple/rocm")), "{requests:?}");
}
