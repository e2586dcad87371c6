//! The stack's venv: a virtual environment of the stack's Python (`python` in stack.toml) at
//! `<state-dir>/venvs/<stack>`, which `build` fills at its end with the wheels the stack
//! deployed, each installed as the exact file of the stack's own index (never another build
//! of the same project from any index), under the stack's `venv-constraints` (`pip -c`).
//! Their own requirements (torch's typing-extensions, sympy, ...) come from the index pip or uv
//! is configured with (PyPI, or `PIP_INDEX_URL` / `UV_INDEX_URL`...), bounded by those
//! constraints. `rocmforge env` activates it; `rocmforge verify` runs its Python.
//!
//! A stack with `venv-skip` (AMD's multi-arch wheels: torch requires `rocm[libraries]`, whose
//! `rocm` is an sdist that picks its dependencies when it runs) is filled in two steps so that
//! pip or uv never resolves the skipped projects: first the requirements the stack's wheels
//! declare (their METADATA's `Requires-Dist`), less those on projects the stack's own wheels are
//! and those on skipped projects (and those of extras), with their own dependencies, from the
//! configured index; then the stack's wheels themselves with `--no-deps`.
//!
//! uv makes the venv and installs when it is on PATH (it can also find or fetch the stack's
//! Python version); otherwise `python<version> -m venv` and the venv's pip.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::recipe::Stack;

#[derive(Debug, thiserror::Error)]
pub enum VenvError {
    #[error("stack `{stack}` names no Python (`python = \"3.x\"` in {file}), so it has no venv to fill")]
    NoPython { stack: String, file: String },
    #[error("no Python {version} found for the venv of stack `{stack}` (looked for python{version} on PATH and in pyenv; set ROCMFORGE_PYTHON, or install uv, which can fetch it)")]
    PythonNotFound { stack: String, version: String },
    #[error("wheel `{file}` of the prefix is not in the stack's index `{index}`: run the build again to publish it")]
    NotPublished { file: String, index: String },
    #[error(
        "the stack's wheels do not go together, and the venv installs them with --no-deps (`venv-skip` in {file}), so nothing else would notice:\n{}\nset each named recipe's `version` to what is required and run `rocmforge lock --update`",
        .unmet.iter().map(|(w, r, have)| format!("  - {w} requires `{r}`, but the stack's is {have}")).collect::<Vec<_>>().join("\n")
    )]
    Unmet { file: String, unmet: Vec<(String, String, String)> },
    #[error("`venv-skip` in {file} names {}, which no wheel of the stack requires (outside extras), so skipping means nothing; the wheels require: {}. Remove it, or name the project as their `Requires-Dist` does", .unused.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", "), if .required.is_empty() { "nothing".to_string() } else { .required.join(", ") })]
    SkipUnused { file: String, unused: Vec<String>, required: Vec<String> },
    #[error("cannot read the requirements of wheel `{file}`: {message}")]
    Metadata { file: String, message: String },
    #[error("cannot {what} `{}`", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("filling the venv `{}` failed: `{command}` {status}\n{output}", dir.display())]
    Command { dir: PathBuf, command: String, status: String, output: String },
}

/// The venv of `stack`.
pub fn dir(state_dir: &Path, stack: &str) -> PathBuf {
    state_dir.join("venvs").join(stack)
}

/// Its interpreter.
pub fn python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// What `fill` did.
#[derive(Debug, Clone)]
pub struct Filled {
    pub dir: PathBuf,
    /// The wheel files installed (file names).
    pub wheels: Vec<String>,
    /// `uv` or `pip`.
    pub tool: &'static str,
    /// With `venv-skip`: the requirements installed before the wheels (`--no-deps`).
    pub requirements: Option<Vec<String>>,
}

/// The file names of the wheels deployed into `prefix`, sorted (none: no wheel dir yet).
pub fn deployed_wheels(prefix: &Path) -> Result<Vec<String>, VenvError> {
    let dir = prefix.join(crate::engine::systems::WHEEL_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(VenvError::Io { what: "read", path: dir, source }),
    };
    let mut files: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".whl"))
        .collect();
    files.sort();
    Ok(files)
}

/// The wheels deployed into `prefix`, as their copies in the stack's index `index` (the
/// published bytes, verified when published).
pub fn stack_wheels(prefix: &Path, index: &Path) -> Result<Vec<PathBuf>, VenvError> {
    let files = deployed_wheels(prefix)?;
    let mut out = Vec::new();
    for f in files {
        let Ok(name) = crate::wheel::WheelName::parse(&f) else { continue };
        let copy = index.join("simple").join(crate::wheel::normalize_name(&name.distribution)).join(&f);
        if !copy.is_file() {
            return Err(VenvError::NotPublished { file: f, index: index.display().to_string() });
        }
        out.push(copy);
    }
    Ok(out)
}

/// The record of what the venv was last filled with (wheel paths and constraints).
fn record_path(state_dir: &Path, stack: &str) -> PathBuf {
    beside(&dir(state_dir, stack), "filled")
}

/// `<venvs>/<stack>.<what>`: a file beside the venv. Not `with_extension`, which would take a
/// stack's `.14-binary` for an extension and give `rocm-7.13-binary` and `rocm-7.14-binary` one
/// file.
fn beside(venv: &Path, what: &str) -> PathBuf {
    let mut name = venv.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{what}"));
    venv.with_file_name(name)
}

fn record_text(stack: &Stack, wheels: &[PathBuf]) -> String {
    let mut t = String::new();
    for w in wheels {
        t.push_str(&format!("wheel {}\n", w.display()));
    }
    for c in &stack.venv_constraints {
        t.push_str(&format!("constraint {c}\n"));
    }
    for p in &stack.venv_skip {
        t.push_str(&format!("skip {p}\n"));
    }
    t
}

/// What the venv installs before the wheels go in with `--no-deps` ([`requirements_of`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    /// From the index: the wheels' requirements not on a project one of the wheels is (it is
    /// installed as that exact file), not on a skipped project and not of an extra; in order,
    /// once each.
    pub from_index: Vec<String>,
    /// `(wheel file, requirement, the stack's file of that project)`: an `==` pin of one wheel
    /// on another project of the stack that the stack's file does not meet. `--no-deps` would
    /// install them side by side silently; the fill refuses.
    pub unmet: Vec<(String, String, String)>,
    /// The skipped projects no requirement names: a `venv-skip` that means nothing.
    pub unused_skips: Vec<String>,
    /// Every project the wheels require (outside extras), in order, once each.
    pub required: Vec<String>,
}

/// The requirements of `wheels` (their METADATA's `Requires-Dist`), sorted as [`Requirements`]
/// says.
pub fn requirements_of(wheels: &[PathBuf], skip: &[String]) -> Result<Requirements, VenvError> {
    let mut names = Vec::new();
    let mut metas = Vec::new();
    for w in wheels {
        let file = w.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let name = crate::wheel::WheelName::parse(&file)
            .map_err(|e| VenvError::Metadata { file: w.display().to_string(), message: e.to_string() })?;
        let meta = crate::wheel::read_metadata(w, &name)
            .map_err(|e| VenvError::Metadata { file: w.display().to_string(), message: e.to_string() })?;
        metas.push((file, meta.raw));
        names.push(name);
    }
    let mut out = Requirements::default();
    for (file, raw) in &metas {
        let text = String::from_utf8_lossy(raw);
        // Headers end at the first blank line (the description follows).
        for line in text.lines().take_while(|l| !l.trim().is_empty()) {
            let Some(req) = line.strip_prefix("Requires-Dist:") else { continue };
            let req = req.trim();
            let (spec, marker) = req.split_once(';').unwrap_or((req, ""));
            if marker.contains("extra") {
                continue;
            }
            let end =
                spec.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))).unwrap_or(spec.len());
            let project = crate::wheel::normalize_name(&spec[..end]);
            if !project.is_empty() && !out.required.contains(&project) {
                out.required.push(project.clone());
            }
            if project.is_empty() || skip.contains(&project) {
                continue;
            }
            if let Some(have) = names.iter().find(|n| n.project() == project) {
                if !meets_pins(&spec[end..], &have.version) {
                    out.unmet.push((file.clone(), req.to_string(), have.filename.clone()));
                }
                continue;
            }
            if !out.from_index.iter().any(|r| r == req) {
                out.from_index.push(req.to_string());
            }
        }
    }
    out.unused_skips = skip.iter().filter(|p| !out.required.contains(p)).cloned().collect();
    Ok(out)
}

/// Whether `version` meets every `==` clause of a requirement's specifier (`[extras]` and
/// parentheses allowed: `(==2.12.0+rocm7.14.0)`, `==3.7.*`, `>=1,==1.2`); other operators are
/// not checked here.
fn meets_pins(spec: &str, version: &str) -> bool {
    let spec = spec.trim();
    let spec = match spec.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map(|(_, r)| r).unwrap_or(""),
        None => spec,
    };
    let spec = spec.trim().trim_start_matches('(').trim_end_matches(')');
    let Some(have) = crate::wheel::Version::parse(version) else { return true };
    spec.split(',')
        .map(str::trim)
        .filter(|c| c.starts_with("==") && !c.starts_with("==="))
        .all(|c| crate::wheel::select::VersionSpec::parse(c).map(|want| want.matches(&have)).unwrap_or(true))
}
/// Does the venv hold exactly `wheels` (filled by an earlier build, and still there)?
pub fn holds(state_dir: &Path, stack: &Stack, wheels: &[PathBuf]) -> bool {
    python(&dir(state_dir, &stack.name)).is_file()
        && std::fs::read_to_string(record_path(state_dir, &stack.name)).is_ok_and(|t| t == record_text(stack, wheels))
}

/// Makes (if needed) and fills the venv of `stack` with `wheels` (see [`stack_wheels`]).
/// Returns `None` when there is nothing to install.
pub fn fill(state_dir: &Path, stack: &Stack, wheels: &[PathBuf]) -> Result<Option<Filled>, VenvError> {
    if wheels.is_empty() {
        return Ok(None);
    }
    let version = stack
        .python
        .clone()
        .ok_or_else(|| VenvError::NoPython { stack: stack.name.clone(), file: stack.file.clone() })?;
    let venv = dir(state_dir, &stack.name);
    let host = crate::host::python::find_python(&version);
    let uv = crate::host::which("uv").filter(|_| std::env::var_os("ROCMFORGE_VENV_NO_UV").is_none());
    let constraints = beside(&venv, "constraints.txt");
    if let Some(parent) = venv.parent() {
        std::fs::create_dir_all(parent).map_err(|source| VenvError::Io {
            what: "create",
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let mut text = String::from("# venv-constraints of the stack (stack.toml)\n");
    for c in &stack.venv_constraints {
        text.push_str(c);
        text.push('\n');
    }
    crate::fsutil::write_atomic(&constraints, text.as_bytes()).map_err(|source| VenvError::Io {
        what: "write",
        path: constraints.clone(),
        source,
    })?;
    let tool = if uv.is_some() { "uv" } else { "pip" };
    if !python(&venv).is_file() {
        let mut make = match (&uv, &host) {
            (Some(uv), host) => {
                let mut c = Command::new(uv);
                let py = host.as_ref().map(|h| h.display().to_string()).unwrap_or_else(|| version.clone());
                c.args(["venv", "--quiet", "--python"]).arg(py).arg(&venv);
                c
            }
            (None, Some(host)) => {
                let mut c = Command::new(host);
                c.args(["-m", "venv"]).arg(&venv);
                c
            }
            (None, None) => return Err(VenvError::PythonNotFound { stack: stack.name.clone(), version }),
        };
        run(&venv, &mut make)?;
    }
    let installer = || match &uv {
        Some(uv) => {
            let mut c = Command::new(uv);
            c.args(["pip", "install", "--quiet", "--python"]).arg(python(&venv));
            c
        }
        None => {
            let mut c = Command::new(python(&venv));
            c.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input"]);
            c
        }
    };
    let requirements = if stack.venv_skip.is_empty() {
        None
    } else {
        let Requirements { from_index: reqs, unmet, unused_skips, required } =
            requirements_of(wheels, &stack.venv_skip)?;
        if !unused_skips.is_empty() {
            return Err(VenvError::SkipUnused { file: stack.file.clone(), unused: unused_skips, required });
        }
        if !unmet.is_empty() {
            return Err(VenvError::Unmet { file: stack.file.clone(), unmet });
        }
        if !reqs.is_empty() {
            let mut first = installer();
            first.arg("--constraint").arg(&constraints).args(&reqs);
            run(&venv, &mut first)?;
        }
        Some(reqs)
    };
    let mut install = installer();
    if requirements.is_some() {
        install.arg("--no-deps");
    }
    install.arg("--constraint").arg(&constraints).args(wheels);
    run(&venv, &mut install)?;
    let record = record_path(state_dir, &stack.name);
    crate::fsutil::write_atomic(&record, record_text(stack, wheels).as_bytes()).map_err(|source| VenvError::Io {
        what: "write",
        path: record,
        source,
    })?;
    let names = wheels.iter().filter_map(|w| w.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
    Ok(Some(Filled { dir: venv, wheels: names, tool, requirements }))
}

fn run(venv: &Path, cmd: &mut Command) -> Result<(), VenvError> {
    let shown = format!(
        "{} {}",
        cmd.get_program().to_string_lossy(),
        cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    );
    let out = cmd.stdin(std::process::Stdio::null()).output().map_err(|source| VenvError::Io {
        what: "run",
        path: PathBuf::from(cmd.get_program()),
        source,
    })?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = output.lines().collect();
    let tail = lines[lines.len().saturating_sub(30)..].join("\n");
    Err(VenvError::Command { dir: venv.to_path_buf(), command: shown, status: out.status.to_string(), output: tail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_equal_pin_is_met_by_the_version_it_names() {
        assert!(meets_pins("==2.12.0+rocm7.14.0", "2.12.0+rocm7.14.0"));
        assert!(meets_pins(" (==2.12.0)", "2.12.0+rocm7.14.0"));
        assert!(meets_pins("[libraries]==7.14.0", "7.14"));
        assert!(meets_pins(">=3,==3.7.*", "3.7.1+rocm7.14.0"));
        assert!(meets_pins("", "1.0") && meets_pins(">=9", "1.0"), "only == is checked");
        assert!(!meets_pins("==3.7.0+rocm7.14.0", "3.7.1+rocm7.14.0"));
        assert!(!meets_pins("==2.12.0+rocm7.14.0", "2.12.0+rocm7.13.0"));
    }

    #[test]
    fn the_files_beside_a_venv_keep_a_dotted_stack_name_whole() {
        let state = Path::new("/s");
        assert_eq!(record_path(state, "rocm-7.14-binary"), Path::new("/s/venvs/rocm-7.14-binary.filled"));
        assert_ne!(record_path(state, "rocm-7.14-binary"), record_path(state, "rocm-7.13-binary"));
        assert_eq!(beside(&dir(state, "rocm-6.2"), "constraints.txt"), Path::new("/s/venvs/rocm-6.2.constraints.txt"));
    }
}
