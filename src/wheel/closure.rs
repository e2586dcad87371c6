//! The check a stack's wheels pass before they are published (auditwheel's policy, for a set of
//! wheels installed together): every `DT_NEEDED` of every host ELF file in them is found where
//! the loader looks, through the file's RUNPATH (each entry relative to `$ORIGIN`, inside
//! `site-packages`), in one of the wheels, or is a library of the system ([`SYSTEM_LIBRARIES`],
//! plus the stack's `system-libraries`). Read with rocmforge's ELF reader
//! ([`crate::offload::elf`]): only each member's header, then the dynamic section of the host
//! libraries and executables.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::runtime::{installed_path, resolve_entry, Provided};
use crate::offload::elf;

/// The libraries every Linux host the stacks build on has, by soname, with where they come
/// from: glibc's, GCC's runtimes, and the few that ROCm's runtime links from the system on
/// every distribution (libdrm, libnuma, libelf, zlib). Anything else a wheel needs comes from a
/// wheel of the stack, or from the stack's own `system-libraries` list.
pub const SYSTEM_LIBRARIES: &[(&str, &str)] = &[
    ("libc.so.6", "glibc"),
    ("libm.so.6", "glibc"),
    ("libdl.so.2", "glibc"),
    ("libpthread.so.0", "glibc"),
    ("librt.so.1", "glibc"),
    ("libutil.so.1", "glibc"),
    ("libresolv.so.2", "glibc"),
    ("ld-linux-x86-64.so.2", "glibc"),
    ("libstdc++.so.6", "GCC's C++ runtime"),
    ("libgcc_s.so.1", "GCC's runtime"),
    ("libdrm.so.2", "libdrm"),
    ("libdrm_amdgpu.so.1", "libdrm"),
    ("libnuma.so.1", "libnuma"),
    ("libelf.so.1", "elfutils"),
    ("libz.so.1", "zlib"),
];

/// One thing wrong in one file of one wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The wheel's file name.
    pub wheel: String,
    /// The member (`pyvec/_vecmath.cpython-311-x86_64-linux-gnu.so`).
    pub member: String,
    pub what: ProblemKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProblemKind {
    /// A library it needs that its RUNPATH finds in no wheel and that is no system library;
    /// `elsewhere`: the wheels' paths that do hold a file of that name (its RUNPATH misses them).
    Missing { library: String, elsewhere: Vec<String> },
    /// A search path entry that is not relative to `$ORIGIN`, or leads out of `site-packages`.
    NotRelative { entry: String },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.what {
            ProblemKind::Missing { library, elsewhere } if elsewhere.is_empty() => write!(
                f,
                "{}: `{}` needs `{library}`, which no wheel of the stack provides and which is not a system library",
                self.wheel, self.member
            ),
            ProblemKind::Missing { library, elsewhere } => write!(
                f,
                "{}: `{}` needs `{library}`, which its RUNPATH does not reach (the wheels hold it at {})",
                self.wheel,
                self.member,
                elsewhere.join(", ")
            ),
            ProblemKind::NotRelative { entry } => write!(
                f,
                "{}: `{}` searches `{entry}`, which is not a folder relative to `$ORIGIN` inside site-packages",
                self.wheel, self.member
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClosureError {
    #[error("cannot read wheel `{}`: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{} of the stack's wheels would not load wherever pip puts them:\n{}\nThe system libraries allowed: {allowed}. A library a recipe of the stack installs belongs in a runtime wheel (`[runtime-wheel] files` of a `runtime-wheel` recipe this one depends on); one the host provides goes in stack.toml's `system-libraries`", count(.problems), .problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Unresolved { problems: Vec<Problem>, allowed: String },
}

fn count(problems: &[Problem]) -> String {
    let mut wheels: Vec<&str> = problems.iter().map(|p| p.wheel.as_str()).collect();
    wheels.sort();
    wheels.dedup();
    match wheels.as_slice() {
        [one] => format!("`{one}`, one"),
        many => format!("{}", many.len()),
    }
}

/// What the check read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    /// Host ELF files read.
    pub files: usize,
    /// Their `DT_NEEDED` entries, all resolved.
    pub needed: usize,
}

/// Checks the wheels `wheels` as they would be installed together with `beside` (the wheels
/// they are installed with, already checked: the runtime wheels they require), allowing the
/// system libraries and `system` (sonames).
pub fn check(wheels: &[PathBuf], beside: &[PathBuf], system: &[String]) -> Result<Checked, ClosureError> {
    let mut members = Vec::new();
    for w in wheels {
        members.extend(
            crate::offload::wheel_members(w).map_err(read_error(w))?.into_iter().filter_map(|m| installed_path(&m)),
        );
    }
    let provided = Provided::of(members.iter().map(String::as_str), beside)
        .map_err(|e| ClosureError::Read { path: PathBuf::new(), message: e.to_string() })?;
    let allowed = |lib: &str| SYSTEM_LIBRARIES.iter().any(|(s, _)| *s == lib) || system.iter().any(|s| s == lib);
    let mut checked = Checked::default();
    let mut problems = Vec::new();
    for w in wheels {
        let shown = w.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for_each_host_elf(w, &mut |member, d| {
            let Some(at) = installed_path(member) else { return };
            checked.files += 1;
            let problem = |what| Problem { wheel: shown.clone(), member: member.to_string(), what };
            let mut dirs = Vec::new();
            for entry in d.rpath.iter().chain(&d.runpath) {
                match resolve_entry(&at, entry) {
                    Some(dir) => dirs.push(dir),
                    None => problems.push(problem(ProblemKind::NotRelative { entry: entry.clone() })),
                }
            }
            for lib in &d.needed {
                checked.needed += 1;
                let holders = provided.dirs_of(lib);
                if holders.is_some_and(|h| dirs.iter().any(|d| h.contains(d))) || allowed(lib) {
                    continue;
                }
                let elsewhere = holders
                    .into_iter()
                    .flatten()
                    .map(|d| if d.is_empty() { lib.clone() } else { format!("{d}/{lib}") })
                    .collect();
                problems.push(problem(ProblemKind::Missing { library: lib.clone(), elsewhere }));
            }
        })?;
    }
    if problems.is_empty() {
        return Ok(checked);
    }
    let mut allowed: Vec<String> = SYSTEM_LIBRARIES.iter().map(|(s, _)| s.to_string()).collect();
    allowed.extend(system.iter().cloned());
    Err(ClosureError::Unresolved { problems, allowed: allowed.join(", ") })
}

fn read_error(w: &Path) -> impl Fn(crate::offload::OffloadError) -> ClosureError + '_ {
    move |e| ClosureError::Read { path: w.to_path_buf(), message: e.to_string() }
}

/// Hands the dynamic section of each host shared library or executable in `wheel` to `f`,
/// reading every other member only as far as its ELF header.
fn for_each_host_elf(wheel: &Path, f: &mut dyn FnMut(&str, &elf::Dynamic)) -> Result<(), ClosureError> {
    let err = |message: String| ClosureError::Read { path: wheel.to_path_buf(), message };
    let file = std::fs::File::open(wheel).map_err(|e| err(e.to_string()))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| err(format!("not a zip: {e}")))?;
    for i in 0..zip.len() {
        let mut m = zip.by_index(i).map_err(|e| err(e.to_string()))?;
        if m.is_dir() {
            continue;
        }
        let name = m.name().to_string();
        let mut bytes = Vec::new();
        m.by_ref().take(elf::ELF64_HEADER as u64).read_to_end(&mut bytes).map_err(|e| err(format!("{name}: {e}")))?;
        if elf::program_headers(&bytes).is_none() {
            continue;
        }
        m.read_to_end(&mut bytes).map_err(|e| err(format!("{name}: {e}")))?;
        if let Some(d) = elf::dynamic_of(&bytes) {
            f(&name, &d);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::path::{Path, PathBuf};

    use super::super::rewrite::{self, Body, Member};
    use super::super::runtime::{assemble, relink, Chosen, RuntimeWheel};
    use super::*;

    /// Compiles `source` (C) with the host's `cc` into the shared library `out`, with these
    /// linker arguments.
    fn cc(dir: &Path, out: &str, source: &str, args: &[&str]) -> PathBuf {
        let c = dir.join(format!("{out}.c"));
        std::fs::write(&c, source).unwrap();
        let path = dir.join(out);
        let o = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&path)
            .arg(&c)
            .arg(format!("-L{}", dir.display()))
            .args(args)
            .output()
            .expect("cc (build-essential) is installed: ci/setup.sh");
        assert!(o.status.success(), "cc {out}: {}", String::from_utf8_lossy(&o.stderr));
        path
    }

    fn member(wheel: &Path, name: &str) -> Vec<u8> {
        let mut zip = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
        let mut bytes = Vec::new();
        zip.by_name(name).unwrap_or_else(|e| panic!("{name}: {e}")).read_to_end(&mut bytes).unwrap();
        bytes
    }

    /// A stand-in torch wheel, laid out as torch's (`torch/_C*.so` searching `$ORIGIN/lib`,
    /// `torch/lib/libtorch_hip.so` linked against the HIP runtime with the absolute RPATH
    /// PyTorch's CMake gives it), beside a runtime wheel holding `libamdhip64.so.6`: before the
    /// relink the check refuses it naming the absolute entry and the library; after it, every
    /// search path is relative to `$ORIGIN`, reaches `rocmforge_rocm/lib`, and the check passes.
    #[test]
    fn a_stand_in_torch_wheel_finds_the_runtime_wheel_through_runpath_relative_to_origin() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let hip = cc(
            d,
            "libamdhip64.so.6",
            "int hipGetDeviceCount(int *n) { *n = 0; return 0; }\n",
            &["-Wl,-soname,libamdhip64.so.6"],
        );
        std::os::unix::fs::symlink(&hip, d.join("libamdhip64.so")).unwrap();
        let torch_hip = cc(
            d,
            "libtorch_hip.so",
            "int hipGetDeviceCount(int *);\nint torch_devices(void) { int n = -1; hipGetDeviceCount(&n); return n; }\n",
            &["-lamdhip64", "-Wl,--enable-new-dtags,-rpath,/opt/rocmforge/rocm-6.2.4/lib:$ORIGIN"],
        );
        let c_ext = cc(
            d,
            "_C.so",
            "int torch_devices(void);\nint init(void) { return torch_devices(); }\n",
            &["-ltorch_hip", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"],
        );
        let runtime = assemble(
            &RuntimeWheel {
                project: "rocmforge-rocm-runtime".into(),
                version: "6.2.4+rocm6.2.4.gfx1010.1.kabc".into(),
                summary: "runtime".into(),
                root: "rocmforge_rocm".into(),
                requires: vec![],
                startup_env: Default::default(),
            },
            &[Chosen { path: d.join("libamdhip64.so"), rel: "lib/libamdhip64.so".into() }],
            &[],
            &d.join("out"),
        )
        .unwrap();
        let hip_member = "rocmforge_rocm/lib/libamdhip64.so.6";
        assert!(crate::offload::wheel_members(&runtime).unwrap().contains(&hip_member.to_string()));

        let torch = d.join("torch-2.6.0+rocm6.2.4.gfx1010.1.kdef-cp311-cp311-linux_x86_64.whl");
        let so = "torch/_C.cpython-311-x86_64-linux-gnu.so";
        let lib = "torch/lib/libtorch_hip.so";
        let dist_info = "torch-2.6.0+rocm6.2.4.gfx1010.1.kdef.dist-info";
        let meta = |n: &str, text: &str| Member {
            name: format!("{dist_info}/{n}"),
            body: Body::Bytes(text.into()),
            mode: 0o644,
        };
        rewrite::write(
            &torch,
            dist_info,
            &[
                Member { name: so.into(), body: Body::File(c_ext.clone()), mode: 0o755 },
                Member { name: lib.into(), body: Body::File(torch_hip.clone()), mode: 0o755 },
                meta("METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.6.0+rocm6.2.4.gfx1010.1.kdef\nRequires-Dist: filelock\n"),
                meta("WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"),
            ],
        )
        .unwrap();

        // As PyTorch's build leaves it: the prefix's absolute path, the HIP runtime unreachable.
        let err = check(std::slice::from_ref(&torch), std::slice::from_ref(&runtime), &[]).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "`{lib}` searches `/opt/rocmforge/rocm-6.2.4/lib`, which is not a folder relative to `$ORIGIN`"
            )),
            "{err}"
        );
        assert!(
            err.contains(&format!("`{lib}` needs `libamdhip64.so.6`, which its RUNPATH does not reach (the wheels hold it at {hip_member})")),
            "{err}"
        );

        let requirement = "rocmforge-rocm-runtime==6.2.4+rocm6.2.4.gfx1010.1.kabc".to_string();
        let done = relink(&torch, std::slice::from_ref(&requirement), std::slice::from_ref(&runtime)).unwrap();
        assert_eq!(done.runpaths, [(lib.to_string(), "$ORIGIN:$ORIGIN/../../rocmforge_rocm/lib".to_string())]);
        let metadata = String::from_utf8(member(&torch, &format!("{dist_info}/METADATA"))).unwrap();
        assert!(
            metadata.contains(&format!("Requires-Dist: {requirement}\n"))
                && metadata.contains("Requires-Dist: filelock\n"),
            "{metadata}"
        );
        for (name, want) in [(so, vec!["$ORIGIN/lib"]), (lib, vec!["$ORIGIN", "$ORIGIN/../../rocmforge_rocm/lib"])] {
            let dynamic = elf::dynamic_of(&member(&torch, name)).unwrap();
            assert!(dynamic.rpath.is_empty(), "{name}: {dynamic:?}");
            assert_eq!(dynamic.runpath, want, "{name}");
        }
        let checked = check(&[torch], &[runtime], &[]).unwrap();
        assert_eq!(checked.files, 2);
        assert!(checked.needed >= 2, "libtorch_hip.so and libamdhip64.so.6 at least: {checked:?}");
    }

    /// `assemble` streams each file into the runtime wheel (and a relinked library from its
    /// patched copy): the wheel is byte for byte the one written from the same members held in
    /// memory (the files' bytes, patchelf's output for the relinked), RECORD and digests alike.
    #[test]
    fn a_runtime_wheel_streamed_from_its_files_is_the_wheel_written_from_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let relinked =
            cc(d, "libfoo.so.1", "int foo(void) { return 1; }\n", &["-Wl,-soname,libfoo.so.1,-rpath,/opt/x/lib"]);
        std::os::unix::fs::symlink(&relinked, d.join("libfoo.so")).unwrap();
        let kept = cc(
            d,
            "libkeep.so.3",
            "int keep(void) { return 3; }\n",
            &["-Wl,-soname,libkeep.so.3,--enable-new-dtags,-rpath,$ORIGIN"],
        );
        let data = d.join("data.txt");
        std::fs::write(&data, "x".repeat(300_000)).unwrap();
        let w = RuntimeWheel {
            project: "rocmforge-t".into(),
            version: "1.0".into(),
            summary: "t".into(),
            root: "rocmforge_t".into(),
            requires: vec!["other==1".into()],
            startup_env: [("A".to_string(), "{venv}/a".to_string())].into(),
        };
        let chosen = |p: &Path, rel: &str| Chosen { path: p.to_path_buf(), rel: rel.into() };
        let wheel = assemble(
            &w,
            &[
                chosen(&d.join("libfoo.so"), "lib/libfoo.so"),
                chosen(&relinked, "lib/libfoo.so.1"),
                chosen(&kept, "lib/libkeep.so.3"),
                chosen(&data, "share/t/data.txt"),
            ],
            &[],
            &d.join("out"),
        )
        .unwrap();
        let names = crate::offload::wheel_members(&wheel).unwrap();
        let dist_info = "rocmforge_t-1.0.dist-info";
        assert_eq!(
            names,
            [
                "rocmforge_t/lib/libfoo.so.1",
                "rocmforge_t/lib/libkeep.so.3",
                "rocmforge_t/share/t/data.txt",
                "rocmforge_t.pth",
                &format!("{dist_info}/METADATA"),
                &format!("{dist_info}/WHEEL"),
                &format!("{dist_info}/RECORD"),
            ]
        );
        assert_eq!(elf::dynamic_of(&member(&wheel, &names[0])).unwrap().runpath, ["$ORIGIN"]);
        assert!(std::fs::read_dir(d.join("out")).unwrap().count() == 1, "no patched copy left beside the wheel");

        let mut foo = std::fs::read(&relinked).unwrap();
        let given = elf::dynamic_of(&foo).unwrap();
        assert!([given.rpath, given.runpath].concat() == ["/opt/x/lib"], "the input has a search path to replace");
        foo = super::super::runtime::tests_set_runpath(&names[0], &foo, "$ORIGIN");
        let held = |name: &str, bytes: Vec<u8>, mode: u32| Member { name: name.into(), body: Body::Bytes(bytes), mode };
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode();
        let reference = d.join("reference.whl");
        rewrite::write(
            &reference,
            dist_info,
            &[
                held(&names[0], foo, mode(&relinked)),
                held(&names[1], std::fs::read(&kept).unwrap(), mode(&kept)),
                held(&names[2], std::fs::read(&data).unwrap(), mode(&data)),
                held(&names[3], member(&wheel, &names[3]), 0o644),
                held(&names[4], member(&wheel, &names[4]), 0o644),
                held(&names[5], member(&wheel, &names[5]), 0o644),
            ],
        )
        .unwrap();
        assert_eq!(member(&wheel, &names[6]), member(&reference, &names[6]), "RECORD");
        assert!(std::fs::read(&wheel).unwrap() == std::fs::read(&reference).unwrap(), "the wheels' bytes differ");
    }
}
