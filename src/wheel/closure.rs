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
