//! The shell lines that activate a stack (`rocmforge env`): its prefix (`ROCM_PATH`, `PATH`,
//! `LD_LIBRARY_PATH`), its venv (`VIRTUAL_ENV`, `PATH`) and the run-time settings of a profile
//! (MIOpen knobs), for bash, zsh and fish. The same [`Activation`] is applied to the processes
//! `verify` runs, so what is verified is what `env` activates.
//!
//! A native build carries code for its own GPU: it never sets `HSA_OVERRIDE_GFX_VERSION` (the
//! stack loader refuses a profile of a native stack that does), and when the caller's
//! environment has one, the lines unset it and a warning says why. A binary fallback stack's
//! wheels carry their own ROCm libraries, so its lines leave `ROCM_PATH` and the library path
//! alone.

use std::collections::BTreeMap;
use std::path::Path;

use crate::recipe::{Profile, Stack, GFX_OVERRIDE_VAR};
use crate::target::TargetSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// One line of an activation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Comment(String),
    Set(String, String),
    /// Put a directory first in a colon-separated list variable.
    Prepend(String, String),
    Unset(String),
}

#[derive(Debug, Clone, Default)]
pub struct Activation {
    pub lines: Vec<Line>,
    /// For stderr: the caller's environment fights the stack, the venv is missing, ...
    pub warnings: Vec<String>,
}

/// What an activation is made from.
pub struct Request<'a> {
    pub stack: &'a Stack,
    pub prefix: &'a Path,
    /// The stack's venv (used when it exists).
    pub venv: &'a Path,
    pub profile: Option<&'a Profile>,
    pub targets: &'a TargetSet,
    /// The caller's `HSA_OVERRIDE_GFX_VERSION`, if set.
    pub caller_override: Option<String>,
    /// The installed ROCm the stack was built on (`--rocm-path`): after the prefix.
    pub installation: Option<&'a crate::installation::Installation>,
    /// The card the host has and how it was found (`gpu::card_line`), said after the first line.
    pub card: Option<&'a str>,
    /// Why this profile (a binary stack's wheels chose it: `gpu_code::choose`), said before it.
    pub profile_why: Option<&'a str>,
}

/// The lines that activate `req.stack`.
pub fn activation(req: &Request<'_>) -> Activation {
    let mut a = Activation::default();
    let native = req.stack.is_native();
    let kind = if native {
        format!("native build for {}", req.targets.comma_list())
    } else {
        "binary fallback: prebuilt wheels carrying their own ROCm libraries".to_string()
    };
    a.lines.push(Line::Comment(format!("rocmforge env: stack {} ({kind})", req.stack.name)));
    if let Some(card) = req.card {
        a.lines.push(Line::Comment(format!("card: {card}")));
    }
    let prefix = req.prefix.display().to_string();
    if native {
        if !req.prefix.is_dir() {
            a.warnings.push(format!(
                "the prefix {prefix} does not exist yet: run `rocmforge build` for stack `{}` first",
                req.stack.name
            ));
        }
        match req.installation {
            None => a.lines.push(Line::Set("ROCM_PATH".into(), prefix.clone())),
            Some(inst) => {
                // The runtime and the toolchain are the installation's; what was rebuilt comes
                // first (a Prepend puts its directory before those already there).
                let root = inst.root.display().to_string();
                a.lines.push(Line::Comment(format!(
                    "built on the installed ROCm at {}: its programs and libraries after the prefix's",
                    inst.describe()
                )));
                a.lines.push(Line::Set("ROCM_PATH".into(), root.clone()));
                a.lines.push(Line::Prepend("PATH".into(), format!("{root}/bin")));
                a.lines.push(Line::Prepend("LD_LIBRARY_PATH".into(), inst.lib_dir().display().to_string()));
            }
        }
        a.lines.push(Line::Prepend("PATH".into(), format!("{prefix}/bin")));
        a.lines.push(Line::Prepend("LD_LIBRARY_PATH".into(), format!("{prefix}/lib")));
        if let Some(inst) = req.installation {
            let (lines, warnings) = crate::installation::loads(&req.prefix.join("lib"), &inst.lib_dir());
            a.lines.extend(lines.into_iter().map(Line::Comment));
            a.warnings.extend(warnings);
        }
    }
    if crate::venv::python(req.venv).is_file() {
        let venv = req.venv.display().to_string();
        a.lines.push(Line::Set("VIRTUAL_ENV".into(), venv.clone()));
        a.lines.push(Line::Prepend("PATH".into(), format!("{venv}/bin")));
    } else {
        a.warnings.push(format!(
            "no venv at {} yet (a build that publishes wheels fills it): the lines activate the prefix only",
            req.venv.display()
        ));
    }
    let profile_override = req.profile.and_then(|p| p.env.get(GFX_OVERRIDE_VAR));
    match (&req.caller_override, profile_override) {
        (Some(v), None) if native => {
            a.warnings.push(format!(
                "{GFX_OVERRIDE_VAR}={v} is set in your environment: a native build runs its own gfx code, and the \
                 override makes the runtime look for another GPU's; these lines unset it"
            ));
            a.lines.push(Line::Comment(format!("a native build never uses {GFX_OVERRIDE_VAR}")));
            a.lines.push(Line::Unset(GFX_OVERRIDE_VAR.into()));
        }
        (Some(v), Some(p)) if v != p => a.warnings.push(format!(
            "{GFX_OVERRIDE_VAR}={v} is set in your environment; profile `{}` sets it to {p}",
            req.profile.map(|p| p.name.as_str()).unwrap_or_default()
        )),
        _ => {}
    }
    if let Some(why) = req.profile_why {
        a.lines.push(Line::Comment(why.to_string()));
    }
    if let Some(p) = req.profile {
        a.lines.push(Line::Comment(format!("profile {}: {}", p.name, p.description)));
        let venv = req.venv.display().to_string();
        for (k, v) in &p.env {
            a.lines.push(Line::Set(k.clone(), v.replace(crate::recipe::PROFILE_VENV, &venv)));
        }
    }
    a
}

/// `s` as one word of a POSIX shell (bash, zsh).
fn posix_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `s` as one word of fish.
fn fish_quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', r"\\").replace('\'', r"\'"))
}

/// The lines for `shell`, to `eval` (bash, zsh) or `| source` (fish).
pub fn render(a: &Activation, shell: Shell) -> String {
    let mut out = String::new();
    for line in &a.lines {
        let text = match (line, shell) {
            (Line::Comment(c), _) => format!("# {c}"),
            (Line::Set(k, v), Shell::Bash | Shell::Zsh) => format!("export {k}={}", posix_quote(v)),
            (Line::Set(k, v), Shell::Fish) => format!("set -gx {k} {}", fish_quote(v)),
            (Line::Prepend(k, v), Shell::Bash | Shell::Zsh) => {
                format!("export {k}={}\"${{{k}:+:${k}}}\"", posix_quote(v))
            }
            // fish splits variables named *PATH on colons and joins them when exporting.
            (Line::Prepend(k, v), Shell::Fish) => format!("set -gx {k} {} ${k}", fish_quote(v)),
            (Line::Unset(k), Shell::Bash | Shell::Zsh) => format!("unset {k}"),
            (Line::Unset(k), Shell::Fish) => format!("set -e {k}"),
        };
        out.push_str(&text);
        out.push('\n');
    }
    out
}

/// `base` (a process environment) with the activation applied, as `verify` runs its cases.
pub fn apply(a: &Activation, mut base: BTreeMap<String, String>) -> BTreeMap<String, String> {
    for line in &a.lines {
        match line {
            Line::Comment(_) => {}
            Line::Set(k, v) => {
                base.insert(k.clone(), v.clone());
            }
            Line::Prepend(k, v) => {
                let joined = match base.get(k).filter(|old| !old.is_empty()) {
                    Some(old) => format!("{v}:{old}"),
                    None => v.clone(),
                };
                base.insert(k.clone(), joined);
            }
            Line::Unset(k) => {
                base.remove(k);
            }
        }
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_backslashes() {
        assert_eq!(posix_quote("a'b"), r"'a'\''b'");
        assert_eq!(fish_quote(r"a'b\c"), r"'a\'b\\c'");
    }

    #[test]
    fn apply_prepends_sets_and_unsets() {
        let a = Activation {
            lines: vec![
                Line::Prepend("PATH".into(), "/p/bin".into()),
                Line::Prepend("LD_LIBRARY_PATH".into(), "/p/lib".into()),
                Line::Set("X".into(), "1".into()),
                Line::Unset("HSA_OVERRIDE_GFX_VERSION".into()),
            ],
            ..Default::default()
        };
        let base: BTreeMap<String, String> =
            [("PATH", "/usr/bin"), ("HSA_OVERRIDE_GFX_VERSION", "10.3.0")].map(|(k, v)| (k.into(), v.into())).into();
        let env = apply(&a, base);
        assert_eq!(env["PATH"], "/p/bin:/usr/bin");
        assert_eq!(env["LD_LIBRARY_PATH"], "/p/lib");
        assert_eq!(env["X"], "1");
        assert!(!env.contains_key("HSA_OVERRIDE_GFX_VERSION"));
    }
}
