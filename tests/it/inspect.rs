//! `rocmforge inspect` against real hipcc output, with `roc-obj-ls` (Debian's hipcc package) as
//! the reference; compressed bundles built here as clang's OffloadBundler.cpp writes them
//! (Debian's clang 15 cannot); the build's coverage check naming a library that lacks a target
//! its recipe is built for; and host libraries that need an executable stack, linked by gcc,
//! with `readelf` as the reference.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::support::{hipcc, kpack, rocmforge, text, Example, HIP_KERNEL as KERNEL};

/// A FIFO named as a library or a wheel is refused at once, naming it, and the files beside it
/// are still read; a directory holding one skips it (opening it would wait for a writer for ever).
#[test]
fn inspect_refuses_a_fifo_without_waiting() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["fifo.so", "fifo.whl"] {
        crate::support::mkfifo(&dir.join(name));
    }
    std::fs::write(dir.join("notes.txt"), "not code").unwrap();
    let out = rocmforge(home.path())
        .arg("inspect")
        .arg(dir.join("fifo.so"))
        .arg(dir.join("fifo.whl"))
        .arg(&dir)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in ["fifo.so", "fifo.whl"] {
        let line = format!("cannot read `{}`: not a regular file: a FIFO (named pipe)", dir.join(name).display());
        assert!(err.contains(&line), "no `{line}`:\n{err}");
    }
    assert!(err.contains("2 file(s) could not be read"), "{err}");
}

/// The hipcc outputs every test here reads, compiled once per test run.
struct Fixtures {
    dir: PathBuf,
}

impl Fixtures {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (ci/setup.sh installs it)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Objects with one and with two targets, the libraries linked from them, and a plain code
/// object with a feature suffix: three compiles (two links), once for all tests.
fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        // Earlier runs' fixtures are stale: remove them.
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with("inspect-fixtures-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = base.join(format!("inspect-fixtures-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k.hip"), KERNEL).unwrap();
        hipcc(&dir, &["--offload-arch=gfx1010", "-fPIC", "-c", "k.hip", "-o", "one.o"]);
        hipcc(&dir, &["--offload-arch=gfx1010", "--offload-arch=gfx1030", "-fPIC", "-c", "k.hip", "-o", "two.o"]);
        hipcc(&dir, &["-shared", "one.o", "-o", "libone.so"]);
        hipcc(&dir, &["-shared", "two.o", "-o", "libtwo.so"]);
        hipcc(
            &dir,
            &[
                "--cuda-device-only",
                "--no-gpu-bundle-output",
                "--offload-arch=gfx1010:xnack-",
                "-c",
                "k.hip",
                "-o",
                "k.co",
            ],
        );
        Fixtures { dir }
    })
}

/// `roc-obj-ls`'s entry ids of a host file's device code (host entries left out).
fn roc_obj_ls(file: &Path) -> Vec<String> {
    let out = run(Command::new("roc-obj-ls").arg(file));
    let mut ids: Vec<String> = out
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|id| !id.starts_with("host-"))
        .map(str::to_string)
        .collect();
    ids.sort();
    ids
}

fn inspect_json(home: &Path, paths: &[PathBuf]) -> serde_json::Value {
    let out = rocmforge(home).arg("inspect").arg("--json").args(paths).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

fn entries(file: &serde_json::Value) -> Vec<String> {
    let mut ids: Vec<String> =
        file["code"].as_array().unwrap().iter().map(|c| c["entry"].as_str().unwrap().to_string()).collect();
    ids.sort();
    ids
}

#[test]
fn inspect_agrees_with_roc_obj_ls_on_hipcc_objects_and_libraries() {
    let f = fixtures();
    let home = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = ["one.o", "two.o", "libone.so", "libtwo.so"].iter().map(|n| f.path(n)).collect();
    let json = inspect_json(home.path(), &files);
    let got = json["files"].as_array().unwrap();
    assert_eq!(got.len(), 4, "{json:#}");
    for (file, found) in files.iter().zip(got) {
        let reference = roc_obj_ls(file);
        assert!(!reference.is_empty(), "roc-obj-ls lists nothing in {}", file.display());
        assert_eq!(entries(found), reference, "{}", file.display());
        // By file name: the checkout's own path may hold "one" (a clone in `.../clone/`).
        let one = file.file_name().is_some_and(|n| n.to_string_lossy().contains("one"));
        let want: &[&str] = if one { &["gfx1010"] } else { &["gfx1010", "gfx1030"] };
        assert_eq!(strings(&found["targets"]), want, "{}", file.display());
        assert_eq!(found["kind"], "elf");
    }
    // Text: one line per file.
    let out = rocmforge(home.path()).arg("inspect").arg(f.path("libtwo.so")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("libtwo.so: gfx1010 gfx1030 (offload bundle)"), "{text}");
}

#[test]
fn inspect_reads_a_plain_code_object_with_its_feature_suffix() {
    let f = fixtures();
    let home = tempfile::tempdir().unwrap();
    let json = inspect_json(home.path(), &[f.path("k.co")]);
    let file = &json["files"][0];
    assert_eq!(file["kind"], "code-object", "{json:#}");
    // The id clang was asked for, feature suffix included (from the header's e_flags).
    assert_eq!(strings(&file["targets"]), ["gfx1010:xnack-"]);
    assert_eq!(file["code"][0]["container"]["kind"], "code-object");
}

#[test]
fn inspect_reads_the_library_inside_a_wheel_without_unpacking_it() {
    let f = fixtures();
    let home = tempfile::tempdir().unwrap();
    let wheel = home.path().join("whl/demo-1.0-cp311-cp311-linux_x86_64.whl");
    std::fs::create_dir_all(wheel.parent().unwrap()).unwrap();
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("demo/__init__.py", opts).unwrap();
    zip.write_all(b"").unwrap();
    zip.start_file("demo/lib/libdemo_hip.so", opts).unwrap();
    zip.write_all(&std::fs::read(f.path("libtwo.so")).unwrap()).unwrap();
    zip.start_file("demo-1.0.dist-info/RECORD", opts).unwrap();
    zip.write_all(b"").unwrap();
    zip.finish().unwrap();
    // Named, and found in a directory.
    for arg in [wheel.clone(), wheel.parent().unwrap().to_path_buf()] {
        let json = inspect_json(home.path(), &[arg]);
        let files = json["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{json:#}");
        assert!(files[0]["path"].as_str().unwrap().ends_with(".whl!demo/lib/libdemo_hip.so"), "{json:#}");
        assert_eq!(strings(&files[0]["targets"]), ["gfx1010", "gfx1030"]);
        assert_eq!(entries(&files[0]), roc_obj_ls(&f.path("libtwo.so")));
    }
    // Nothing was unpacked beside it.
    assert_eq!(std::fs::read_dir(wheel.parent().unwrap()).unwrap().count(), 1);
}

/// `plain` as clang's bundler writes a compressed bundle: `CCOB`, version, method (0 zlib,
/// 1 zstd), sizes by version, the low 8 bytes of the MD5 of `plain`, the compressed bytes.
fn compressed(plain: &[u8], version: u16, zstd: bool, md5_low: &[u8]) -> Vec<u8> {
    let data = if zstd {
        zstd::encode_all(plain, 3).unwrap()
    } else {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
        e.write_all(plain).unwrap();
        e.finish().unwrap()
    };
    let mut out = b"CCOB".to_vec();
    out.extend(version.to_le_bytes());
    out.extend(u16::from(zstd).to_le_bytes());
    match version {
        1 => out.extend((plain.len() as u32).to_le_bytes()),
        2 => {
            out.extend(((4 + 2 + 2 + 4 + 4 + 8 + data.len()) as u32).to_le_bytes());
            out.extend((plain.len() as u32).to_le_bytes());
        }
        _ => {
            out.extend(((4 + 2 + 2 + 8 + 8 + 8 + data.len()) as u64).to_le_bytes());
            out.extend((plain.len() as u64).to_le_bytes());
        }
    }
    out.extend(md5_low);
    out.extend(data);
    out
}

#[test]
fn inspect_reads_compressed_bundles_built_from_a_hipcc_bundle() {
    let f = fixtures();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("bundles");
    std::fs::create_dir_all(&dir).unwrap();
    // The plain bundle hipcc embedded in the two-target library.
    let plain = dir.join("plain.hipfb");
    run(Command::new("objcopy")
        .arg("-O")
        .arg("binary")
        .arg("--only-section=.hip_fatbin")
        .arg(f.path("libtwo.so"))
        .arg(&plain));
    let plain_bytes = std::fs::read(&plain).unwrap();
    assert!(plain_bytes.starts_with(b"__CLANG_OFFLOAD_BUNDLE__"));
    let md5 = run(Command::new("md5sum").arg(&plain));
    let md5_low = hex::decode(&md5[..16]).unwrap();
    let mut files = vec![plain.clone()];
    for (name, version, zstd) in
        [("v1-zstd", 1, true), ("v2-zlib", 2, false), ("v2-zstd", 2, true), ("v3-zlib", 3, false), ("v3-zstd", 3, true)]
    {
        let p = dir.join(format!("{name}.hipfb"));
        std::fs::write(&p, compressed(&plain_bytes, version, zstd, &md5_low)).unwrap();
        files.push(p);
    }
    let json = inspect_json(home.path(), &files);
    let got = json["files"].as_array().unwrap();
    assert_eq!(got.len(), files.len(), "{json:#}");
    let reference = roc_obj_ls(&f.path("libtwo.so"));
    for (i, file) in got.iter().enumerate() {
        assert_eq!(file["kind"], "bundle");
        assert_eq!(strings(&file["targets"]), ["gfx1010", "gfx1030"], "{}", file["path"]);
        assert_eq!(entries(file), reference, "{}", file["path"]);
        let container = &file["code"][0]["container"];
        if i == 0 {
            assert_eq!(container["kind"], "bundle");
        } else {
            assert_eq!(container["kind"], "compressed-bundle", "{container}");
            let name = file["path"].as_str().unwrap();
            assert_eq!(container["method"], if name.contains("zstd") { "zstd" } else { "zlib" }, "{name}");
        }
    }
    // A damaged one is named, and the others are still read.
    let bad = dir.join("v3-zstd.hipfb");
    let mut b = std::fs::read(&bad).unwrap();
    b.truncate(b.len() - 10);
    std::fs::write(&bad, b).unwrap();
    let out = rocmforge(home.path()).arg("inspect").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("v3-zstd.hipfb") && err.contains("compressed offload bundle"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("v2-zlib.hipfb: gfx1010 gfx1030"));
}

/// `build <args> --prefix <home>/prefix` of the example stack: success, and what it printed.
fn build(e: &Example, args: &[&str]) -> (bool, String) {
    let out = e.build(e.home.path(), &e.prefix(), args);
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn report_of(e: &Example) -> serde_json::Value {
    let p = e.home.path().join("state/rocmforge/reports/example/latest/report.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
}

fn coverage_of<'a>(report: &'a serde_json::Value, recipe: &str) -> &'a serde_json::Value {
    let r = report["recipes"].as_array().unwrap().iter().find(|r| r["name"] == recipe).unwrap();
    &r["coverage"][0]
}

#[test]
fn build_names_the_library_that_lacks_a_target_the_recipe_is_built_for() {
    let e = Example::new();
    // hipvec's build compiles for gfx1010 alone, whatever it is asked for.
    let recipe = e.tree.join("recipes/example/hipvec.toml");
    let text = std::fs::read_to_string(&recipe).unwrap();
    assert!(text.contains("\"-DAMDGPU_TARGETS={targets}\""), "{text}");
    std::fs::write(&recipe, text.replace("\"-DAMDGPU_TARGETS={targets}\"", "\"-DAMDGPU_TARGETS=gfx1010\"")).unwrap();

    let (ok, out) = build(&e, &["hipvec", "--target", "gfx1010,gfx1030"]);
    assert!(!ok, "{out}");
    assert!(out.contains("device-code `lib/libhipvec.so`: lib/libhipvec.so lacks gfx1030 (found: gfx1010)"), "{out}");
    assert!(out.contains("recipes/example/hipvec.toml"), "the error names the recipe file: {out}");
    assert!(out.contains("nothing was stored"), "{out}");
    let report = report_of(&e);
    let c = coverage_of(&report, "hipvec");
    assert_eq!(c["ok"], false, "{report:#}");
    assert_eq!(strings(&c["missing"]), ["gfx1030"]);
    assert_eq!(strings(&c["files"][0]["targets"]), ["gfx1010"]);

    // Built for what it is asked, it passes, and the report lists what it carries.
    std::fs::write(&recipe, text).unwrap();
    let (ok, out) = build(&e, &["hipvec", "--target", "gfx1010,gfx1030"]);
    assert!(ok, "{out}");
    let report = report_of(&e);
    let c = coverage_of(&report, "hipvec");
    assert_eq!(c["ok"], true, "{report:#}");
    assert_eq!(strings(&c["files"][0]["targets"]), ["gfx1010", "gfx1030"]);
}

/// `readelf -lW`'s GNU_STACK line of `file` (flags last), or `None` when it has none.
fn readelf_stack(file: &Path) -> Option<String> {
    let out = run(Command::new("readelf").arg("-lW").arg(file));
    out.lines().find(|l| l.trim_start().starts_with("GNU_STACK")).map(|l| l.trim().to_string())
}

/// A copy of `from` whose PT_GNU_STACK program header is turned into PT_NULL: a library as a
/// linker that writes no such header leaves it (GNU ld always writes one on x86_64).
fn without_gnu_stack(from: &Path, to: &Path) {
    let mut b = std::fs::read(from).unwrap();
    let phoff = u64::from_le_bytes(b[32..40].try_into().unwrap()) as usize;
    let (size, count) = (u16::from_le_bytes([b[54], b[55]]) as usize, u16::from_le_bytes([b[56], b[57]]) as usize);
    let at = (0..count).map(|i| phoff + i * size).find(|&o| b[o..o + 4] == 0x6474_e551u32.to_le_bytes()).unwrap();
    b[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
    std::fs::write(to, b).unwrap();
}

#[test]
fn inspect_names_the_host_libraries_that_need_an_executable_stack() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("libs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("x.c"), "int x(void) { return 1; }\n").unwrap();
    for (name, flag) in [("libexec.so", "-Wl,-z,execstack"), ("libnoexec.so", "-Wl,-z,noexecstack")] {
        run(Command::new("gcc").current_dir(&dir).args(["-shared", "-fPIC", "x.c", "-o", name, flag]));
    }
    without_gnu_stack(&dir.join("libnoexec.so"), &dir.join("libbare.so"));
    // readelf agrees on what was made.
    assert!(readelf_stack(&dir.join("libexec.so")).unwrap().ends_with("RWE 0x10"));
    assert!(readelf_stack(&dir.join("libnoexec.so")).unwrap().ends_with("RW  0x10"));
    assert_eq!(readelf_stack(&dir.join("libbare.so")), None);
    // An object is not loaded by itself: no stack to ask for.
    run(Command::new("gcc").current_dir(&dir).args(["-c", "x.c", "-o", "x.o"]));

    let out = rocmforge(home.path()).arg("inspect").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let d = dir.display();
    for want in [
        format!("{d}/libexec.so: no GPU code\n{d}/libexec.so: needs an executable stack (PT_GNU_STACK RWE): glibc 2.41+ refuses to load it\n"),
        format!("{d}/libbare.so: has no PT_GNU_STACK header: glibc 2.41+ treats it as needing an executable stack\n"),
        "0 file(s) with GPU code, 4 without, 2 needing an executable stack, 1 other file(s) skipped".into(),
    ] {
        assert!(text.contains(&want), "missing `{want}` in:\n{text}");
    }
    assert!(!text.contains("libnoexec.so: needs") && !text.contains("libnoexec.so: has no"), "{text}");
    assert!(!text.contains("x.o: needs") && !text.contains("x.o: has no"), "{text}");

    let json = inspect_json(home.path(), std::slice::from_ref(&dir));
    let stack_of = |name: &str| {
        let f = json["files"].as_array().unwrap().iter().find(|f| f["path"].as_str().unwrap().ends_with(name));
        f.unwrap_or_else(|| panic!("{name} in {json:#}"))["stack"].clone()
    };
    assert_eq!(stack_of("/libexec.so"), "executable");
    assert_eq!(stack_of("/libnoexec.so"), "non-executable");
    assert_eq!(stack_of("/libbare.so"), "missing");
    assert_eq!(stack_of("/x.o"), serde_json::Value::Null);

    // Inside a wheel, read in memory.
    let wheel = home.path().join("demo-1.0-cp311-cp311-linux_x86_64.whl");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("demo/_demo.cpython-311-x86_64-linux-gnu.so", opts).unwrap();
    zip.write_all(&std::fs::read(dir.join("libexec.so")).unwrap()).unwrap();
    zip.finish().unwrap();
    let json = inspect_json(home.path(), &[wheel]);
    assert_eq!(json["files"][0]["stack"], "executable", "{json:#}");
}

/// A library cut short anywhere, or whose section name table points outside it, is an error
/// naming the file and what is wrong (exit 1), never "no GPU code"; so is the odd-offset form
/// (read field by field) cut by one byte.
#[test]
fn inspect_refuses_a_truncated_or_garbled_library_naming_it() {
    let f = fixtures();
    let home = tempfile::tempdir().unwrap();
    let lib = std::fs::read(f.path("libtwo.so")).unwrap();
    let dir = home.path().join("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let mut bad = Vec::new();
    let mut put = |name: String, bytes: &[u8]| {
        let p = dir.join(&name);
        std::fs::write(&p, bytes).unwrap();
        bad.push((name, p));
    };
    let step = lib.len() / 40;
    for cut in (64..lib.len()).step_by(step).chain([lib.len() - 1]) {
        put(format!("cut-{cut}.so"), &lib[..cut]);
    }
    let shoff = u64::from_le_bytes(lib[0x28..0x30].try_into().unwrap()) as usize;
    let shstrndx = u16::from_le_bytes([lib[0x3e], lib[0x3f]]) as usize;
    let mut garbled = lib.clone();
    let at = shoff + shstrndx * 64 + 0x18;
    garbled[at..at + 8].copy_from_slice(&(lib.len() as u64 * 4).to_le_bytes());
    put("garbled-names.so".into(), &garbled);
    let odd = section_headers_at_an_odd_offset(&lib);
    put("odd-cut.so".into(), &odd[..odd.len() - 1]);

    let paths: Vec<&PathBuf> = bad.iter().map(|(_, p)| p).collect();
    let out = rocmforge(home.path()).arg("inspect").args(&paths).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("error: {} file(s) could not be read", bad.len())), "{err}");
    for (name, _) in &bad {
        let line = err.lines().find(|l| l.contains(&format!("{name}`: "))).unwrap_or_else(|| panic!("{name}: {err}"));
        assert!(line.contains("truncated or damaged") || line.contains("damaged: "), "{line}");
    }
    assert!(err.contains("garbled-names.so`: damaged: the name of section 1 cannot be read"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 file(s) with GPU code, 0 without"), "{}", text(&out));
    // The whole library still reads, in both forms.
    std::fs::write(dir.join("odd.so"), &odd).unwrap();
    let json = inspect_json(home.path(), &[f.path("libtwo.so"), dir.join("odd.so")]);
    for file in json["files"].as_array().unwrap() {
        assert_eq!(strings(&file["targets"]), ["gfx1010", "gfx1030"], "{json:#}");
    }
}

/// The library with its section header table copied to the end at an offset that is not a
/// multiple of 8 (`e_shoff` pointing there), as rocm-kpack's ELF surgery leaves the libraries it
/// transforms (its own transform of a hipcc library put it at 20789); the loader never reads it.
fn section_headers_at_an_odd_offset(lib: &[u8]) -> Vec<u8> {
    let shoff = u64::from_le_bytes(lib[0x28..0x30].try_into().unwrap()) as usize;
    let (entsize, num) =
        (u16::from_le_bytes([lib[0x3a], lib[0x3b]]) as usize, u16::from_le_bytes([lib[0x3c], lib[0x3d]]) as usize);
    let mut out = lib.to_vec();
    while out.len() % 8 != 5 {
        out.push(0);
    }
    let at = out.len() as u64;
    out.extend_from_slice(&lib[shoff..shoff + entsize * num]);
    out[0x28..0x30].copy_from_slice(&at.to_le_bytes());
    out
}

/// AMD's multi-arch form: a torch tree whose `libtorch_hip.so` (built by clang with a real
/// `.rocm_kpack_ref` section) points at `../.kpack/torch_@GFXARCH@.kpack`, and two archives
/// written here as rocm-kpack writes them (one zstd-per-kernel, one uncompressed) holding its
/// kernel for gfx1010 and gfx1030, real hipcc code objects. `inspect` reads the archives' targets
/// from the code objects, gives the library the targets of the archives its marker names (among
/// what it was given), and names a damaged archive and the
/// manifest form it does not read; a torch wheel and a device wheel read together (as `build`
/// reads a stack's wheels) give the torch wheel the device wheel's gfx1010.
#[test]
fn inspect_follows_a_kpack_marker_to_the_archives_and_names_a_damaged_one() {
    let home = tempfile::tempdir().unwrap();
    let (gfx1010, gfx1030) = kpack::code_objects();
    let tree = home.path().join("site-packages");
    let lib = kpack::marked_library(
        &tree.join("torch/lib"),
        "libtorch_hip.so",
        ".rocm_kpack_ref",
        &kpack::marker("torch/lib/libtorch_hip.so", &["../.kpack/torch_@GFXARCH@.kpack"]),
    );
    std::fs::create_dir_all(tree.join("torch/.kpack")).unwrap();
    let a1010 = kpack::kpack_archive(&["gfx1010"], &[("torch/lib/libtorch_hip.so#0", "gfx1010", gfx1010)], true);
    let a1030 = kpack::kpack_archive(
        &["gfx1030"],
        &[("torch/lib/libtorch_hip.so#0", "gfx1030", gfx1030), ("torch/lib/libother.so#0", "gfx1030", gfx1030)],
        false,
    );
    std::fs::write(tree.join("torch/.kpack/torch_gfx1010.kpack"), &a1010).unwrap();
    std::fs::write(tree.join("torch/.kpack/torch_gfx1030.kpack"), &a1030).unwrap();

    let report = inspect_json(home.path(), std::slice::from_ref(&tree));
    let files = report["files"].as_array().unwrap();
    let file = |end: &str| {
        files.iter().find(|f| f["path"].as_str().unwrap().ends_with(end)).unwrap_or_else(|| panic!("{end}: {report}"))
    };
    assert_eq!(strings(&file("torch_gfx1010.kpack")["targets"]), ["gfx1010"]);
    assert_eq!(file("torch_gfx1010.kpack")["code"][0]["container"]["scheme"], "zstd-per-kernel");
    assert_eq!(strings(&file("torch_gfx1030.kpack")["targets"]), ["gfx1030"]);
    let host = file("libtorch_hip.so");
    assert_eq!(strings(&host["targets"]), ["gfx1010", "gfx1030"], "{host}");
    assert_eq!(host["kpack"]["kernel_name"], "torch/lib/libtorch_hip.so");
    assert_eq!(host["kpack"]["archives"].as_array().unwrap().len(), 2, "{host}");
    // Only its own kernels: libother.so's is not counted as the library's.
    assert_eq!(host["code"].as_array().unwrap().len(), 2, "{host}");

    // The library and its archives' directory given: the archives are among what was read.
    let kpacks = tree.join("torch/.kpack");
    let out = rocmforge(home.path()).arg("inspect").arg(&lib).arg(&kpacks).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("libtorch_hip.so: gfx1010 gfx1030 (kpack archives, via .rocm_kpack_ref: ")
            && stdout.contains("torch_gfx1010.kpack"),
        "{stdout}"
    );
    // The library alone: its marker leads out of what was given, so it is not followed.
    let out = rocmforge(home.path()).arg("inspect").arg(&lib).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("none of them in what was given (a marker is followed only inside it: give the directory that holds the library and its archives)"),
        "{}",
        text(&out)
    );
    // As rocm-kpack's transform leaves it: the section header table at an odd offset.
    let odd = tree.join("torch/lib/libodd.so");
    std::fs::write(&odd, section_headers_at_an_odd_offset(&std::fs::read(&lib).unwrap())).unwrap();
    let out = rocmforge(home.path()).arg("inspect").arg(&odd).arg(&kpacks).output().unwrap();
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("libodd.so: gfx1010 gfx1030 (kpack archives"),
        "{}",
        text(&out)
    );
    // Without the archives, it says where the code went.
    let lone = kpack::marked_library(
        &home.path().join("lone"),
        "libx.so",
        ".rocm_kpack_ref",
        &kpack::marker("lib/libx.so", &["../.kpack/x.kpack"]),
    );
    let out = rocmforge(home.path()).arg("inspect").arg(&lone).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "libx.so: device code moved out into kpack archives (.rocm_kpack_ref: kernels `lib/libx.so`, search paths ../.kpack/x.kpack), none of them in what was given"
        ),
        "{}",
        text(&out)
    );

    // Damage: a table cut short, a kernel filed under another architecture, the manifest form.
    let damaged = home.path().join("damaged");
    std::fs::create_dir_all(&damaged).unwrap();
    std::fs::write(damaged.join("cut.kpack"), &a1010[..a1010.len() - 5]).unwrap();
    std::fs::write(
        damaged.join("liar.kpack"),
        kpack::kpack_archive(&["gfx1030"], &[("x#0", "gfx1030", gfx1010)], true),
    )
    .unwrap();
    let mut frame_gone = a1010.clone();
    frame_gone[64 + 8..64 + 12].copy_from_slice(b"XXXX");
    std::fs::write(damaged.join("frame.kpack"), frame_gone).unwrap();
    kpack::marked_library(&damaged, "libm.so", ".rocm_kpack_manifest", b".kpack/torch.kpm");
    let out = rocmforge(home.path()).arg("inspect").arg(&damaged).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for msg in [
        "cut.kpack`: kpack archive (rocm-kpack's KPAK format, version 1): table of contents at offset",
        "MessagePack ends early",
        "liar.kpack`: kpack archive (rocm-kpack's KPAK format, version 1): kernel `x#0` for gfx1030: its code object is for gfx1010, not gfx1030",
        "frame.kpack`: kpack archive (rocm-kpack's KPAK format, version 1): kernel `torch/lib/libtorch_hip.so#0` for gfx1010: cannot decompress its zstd frame",
        "libm.so`: its device code was moved out by rocm-kpack, and section .rocm_kpack_manifest (the manifest form",
    ] {
        assert!(err.contains(msg), "{msg}\n{err}");
    }

    // Wheels: the torch wheel holds the marked library, the device wheel the archive; read
    // together, as a stack's build reads them, the torch wheel carries gfx1010.
    let wheels = home.path().join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let (tname, twheel) = crate::support::wheel::make_with(
        "torch",
        "2.9.1+rocm7.14",
        "cp312-cp312-linux_x86_64",
        "torch",
        "x",
        &[("torch/lib/libtorch_hip.so".into(), std::fs::read(&lib).unwrap())],
    );
    let (dname, dwheel) = crate::support::wheel::make_with(
        "amd-torch-device-gfx1010",
        "2.9.1+rocm7.14",
        "py3-none-linux_x86_64",
        "amd_torch_device_gfx1010",
        "x",
        &[("torch/.kpack/torch_gfx1010.kpack".into(), a1010.clone())],
    );
    std::fs::write(wheels.join(&tname), twheel).unwrap();
    std::fs::write(wheels.join(&dname), dwheel).unwrap();
    let code = rocmforge::gpu_code::read(&[wheels.join(&tname), wheels.join(&dname)], &[]).unwrap();
    let got: Vec<(&str, Vec<&str>)> =
        code.iter().map(|c| (c.wheel.as_str(), c.targets.iter().map(String::as_str).collect())).collect();
    assert_eq!(got, [(tname.as_str(), vec!["gfx1010"]), (dname.as_str(), vec!["gfx1010"])]);
    // The torch wheel alone: its library's code is elsewhere, so no targets are recorded for it.
    assert!(rocmforge::gpu_code::read(&[wheels.join(&tname)], &[]).unwrap().is_empty());
}

/// Hostile markers: a library's `.rocm_kpack_ref` naming an archive by an absolute path, by a
/// path that climbs out of the directory given, through a symlink leading out of it, and `/etc`
/// with `@GFXARCH@`. Each names a real archive holding the library's kernel for gfx1030 outside
/// the directory; none may credit the library with it, open it, or list a directory outside.
#[test]
fn inspect_follows_a_kpack_marker_only_inside_what_it_was_given() {
    let home = tempfile::tempdir().unwrap();
    let (_, gfx1030) = kpack::code_objects();
    let outside = home.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let archive = kpack::kpack_archive(&["gfx1030"], &[("lib/libx.so#0", "gfx1030", gfx1030)], true);
    std::fs::write(outside.join("x_gfx1030.kpack"), &archive).unwrap();
    let given = home.path().join("given");
    std::fs::create_dir_all(given.join("lib")).unwrap();
    std::os::unix::fs::symlink(&outside, given.join("link")).unwrap();
    let abs = outside.join("x_gfx1030.kpack").display().to_string();
    let abs_arch = outside.join("x_@GFXARCH@.kpack").display().to_string();
    for (name, search) in [
        ("libabs.so", abs.as_str()),
        ("libabsarch.so", abs_arch.as_str()),
        ("libclimb.so", "../../outside/x_@GFXARCH@.kpack"),
        ("liblink.so", "../link/x_gfx1030.kpack"),
        ("libetc.so", "/etc/@GFXARCH@"),
    ] {
        kpack::marked_library(&given.join("lib"), name, ".rocm_kpack_ref", &kpack::marker("lib/libx.so", &[search]));
    }
    // The same marker inside the directory is followed (the control).
    std::fs::create_dir_all(given.join("lib/.kpack")).unwrap();
    std::fs::write(given.join("lib/.kpack/x_gfx1030.kpack"), &archive).unwrap();
    kpack::marked_library(
        &given.join("lib"),
        "libinside.so",
        ".rocm_kpack_ref",
        &kpack::marker("lib/libx.so", &[".kpack/x_@GFXARCH@.kpack"]),
    );
    let report = inspect_json(home.path(), std::slice::from_ref(&given));
    let files = report["files"].as_array().unwrap();
    let file = |end: &str| {
        files.iter().find(|f| f["path"].as_str().unwrap().ends_with(end)).unwrap_or_else(|| panic!("{end}: {report}"))
    };
    assert_eq!(strings(&file("libinside.so")["targets"]), ["gfx1030"], "{report:#}");
    for name in ["libabs.so", "libabsarch.so", "libclimb.so", "liblink.so", "libetc.so"] {
        let f = file(name);
        assert!(f["targets"].as_array().unwrap().is_empty(), "{name} credited from outside: {f}");
        assert!(f["kpack"]["archives"].as_array().unwrap().is_empty(), "{name}: {f}");
    }
    assert!(report["errors"].as_array().unwrap().is_empty(), "nothing outside was opened: {report:#}");
    assert!(!files.iter().any(|f| f["path"].as_str().unwrap().starts_with(&outside.display().to_string())));
}

/// A marker naming a FIFO inside what was given (by its exact path, and through `@GFXARCH@` as a
/// directory listing finds it): each is refused at once, naming it, never waited on for a writer
/// (and not passed over as an archive not installed).
#[test]
fn inspect_refuses_a_fifo_a_kpack_marker_names_without_waiting() {
    let home = tempfile::tempdir().unwrap();
    let given = home.path().join("given");
    std::fs::create_dir_all(given.join("lib/.kpack")).unwrap();
    let exact = given.join("lib/.kpack/y.kpack");
    let by_arch = given.join("lib/.kpack/x_gfx1030.kpack");
    crate::support::mkfifo(&exact);
    crate::support::mkfifo(&by_arch);
    let lib = given.join("lib");
    kpack::marked_library(&lib, "liby.so", ".rocm_kpack_ref", &kpack::marker("lib/liby.so", &[".kpack/y.kpack"]));
    kpack::marked_library(
        &lib,
        "libx.so",
        ".rocm_kpack_ref",
        &kpack::marker("lib/libx.so", &[".kpack/x_@GFXARCH@.kpack"]),
    );
    let out =
        rocmforge(home.path()).arg("inspect").arg(&given).timeout(std::time::Duration::from_secs(60)).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for fifo in [&exact, &by_arch] {
        let line = format!("cannot read `{}`: not a regular file: a FIFO (named pipe)", fifo.display());
        assert!(err.contains(&line), "no `{line}`:\n{err}");
    }
}

/// A wheel's deflated `.kpack` member with one byte of its kernel flipped (deflated as stored
/// blocks, so the stream still inflates, to other bytes): its table and its kernel's header read
/// as before, but the member is inflated to its end to reach the table, and its CRC-32 is not
/// the one the wheel's directory gives. `inspect` names the wheel, the member and the damage;
/// the same wheel undamaged reads.
#[test]
fn inspect_names_a_wheel_member_whose_bytes_fail_its_crc() {
    use crate::support::wheel::{deflated, zip_of};
    let home = tempfile::tempdir().unwrap();
    let co = kpack::code_object("gfx1010");
    let archive = kpack::kpack_archive(&["gfx1010"], &[("lib/libx.so#0", "gfx1010", &co)], false);
    let mut crc = flate2::Crc::new();
    crc.update(&archive);
    let member = "x/.kpack/x_gfx1010.kpack".to_string();
    let good = zip_of(&[(member.clone(), deflated(&archive, 0, true), crc.sum(), archive.len() as u64)]);
    let tail = &co[co.len() - 32..];
    let at = good.windows(32).position(|w| w == tail).expect("the kernel's bytes in the wheel");
    let mut bad = good.clone();
    bad[at] ^= 0x01;
    let (good_path, bad_path) = (home.path().join("good.whl"), home.path().join("bad.whl"));
    std::fs::write(&good_path, &good).unwrap();
    std::fs::write(&bad_path, &bad).unwrap();
    let out = rocmforge(home.path()).arg("inspect").arg(&good_path).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("good.whl!{member}: gfx1010")), "{}", text(&out));
    let out = rocmforge(home.path()).arg("inspect").arg(&bad_path).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "`{}!{member}`: cannot read: its bytes do not match the wheel's directory: their CRC-32 is",
            bad_path.display()
        )),
        "{err}"
    );
    assert!(err.contains("(the wheel is damaged: download or build it again)"), "{err}");
}
