//! What a recipe answers for, as written in its file: `[[provides]]` (what its consumers take
//! from it, checked in its installed tree before its artifact is stored) and `[[check]]`
//! (programs run after install that prove the output works: a toolchain that links, a patched
//! kernel that compiles). Lowered here; carried out by `engine::proofs`.

use toml::Spanned;

use super::raw::{FileText, RawCheck, RawProvide};
use super::tree::RecipeTree;
use super::{CheckEstimate, PostCheck, Provide};
use crate::diagnostic::Diagnostics;

/// The placeholders a `[[provides]] files` path may hold, expanded once per requested target.
pub const TARGET_PLACEHOLDERS: [&str; 2] = ["{target}", "{target_isa}"];

/// The folder of `recipes/` that holds the checks every stack may use (`recipes/checks/<dir>/`);
/// no stack may take its name.
pub const SHARED_CHECKS: &str = "checks";

/// Where a check's files are looked up, in order: the stack's own `recipes/<stack>/checks/<dir>/`
/// (a stack that needs its own version of a check), then the shared `recipes/checks/<dir>/`.
pub fn checks_dirs(stack: &str, dir: &str) -> [String; 2] {
    [format!("recipes/{stack}/checks/{dir}/"), format!("recipes/{SHARED_CHECKS}/{dir}/")]
}

pub(super) fn lower_provides(
    file: &FileText<'_>,
    raw: Vec<Spanned<RawProvide>>,
    diags: &mut Diagnostics,
) -> Vec<Provide> {
    let mut out = Vec::new();
    for p in raw {
        let span = p.span();
        let p = p.into_inner();
        if p.files.is_empty() && p.query.is_empty() {
            diags.push(
                file.at(span.clone(), format!("`[[provides]]` `{}` names no `files` and no `query`: nothing would be checked", p.what))
                    .with_help("list the installed files the consumers need (`files = [\"lib/libx.so\"]`), or a program that prints one (`query = [...]`)"),
            );
        }
        if p.consumers.is_empty() {
            diags.push(file.at(span.clone(), format!("`[[provides]]` `{}` names no consumer", p.what)).with_help(
                "add `consumers = [\"<recipe>: <upstream file:line>\"]`: who needs it, and where that is written",
            ));
        }
        for c in &p.consumers {
            if !c.get_ref().split_once(':').is_some_and(|(r, why)| !r.trim().is_empty() && !why.trim().is_empty()) {
                diags.push(
                    file.at(c.span(), format!("consumer `{}` must read `<recipe>: <upstream file:line>`", c.get_ref()))
                        .with_help("e.g. `clr: hipamd/hip-config-amd.cmake:159-185 (rocm-6.2.2)`"),
                );
            }
        }
        for f in &p.files {
            let plain = TARGET_PLACEHOLDERS.iter().fold(f.get_ref().clone(), |s, ph| s.replace(ph, "gfx1010"));
            if let Err(e) = crate::offload::coverage::matcher(&plain) {
                diags.push(file.at(f.span(), e));
            }
        }
        if let Some(program) = p.query.first() {
            if crate::offload::coverage::matcher(program).is_err() || program.contains('*') {
                diags.push(file.at(
                    span.clone(),
                    format!("`query` starts with `{program}`: it must be a program the recipe installs, as a path relative to the prefix"),
                ));
            }
        }
        out.push(Provide {
            what: p.what,
            consumers: p.consumers.into_iter().map(Spanned::into_inner).collect(),
            files: p.files.into_iter().map(Spanned::into_inner).collect(),
            query: p.query,
        });
    }
    out
}

pub(super) fn lower_checks(
    tree: &RecipeTree,
    file: &FileText<'_>,
    stack: &str,
    raw: Vec<Spanned<RawCheck>>,
    diags: &mut Diagnostics,
) -> Vec<PostCheck> {
    let mut out: Vec<PostCheck> = Vec::new();
    for c in raw {
        let span = c.span();
        let c = c.into_inner();
        let name = c.name.get_ref().clone();
        if !super::lower::valid_name(&name) {
            diags
                .push(file.at(c.name.span(), format!("check name `{name}` must be lowercase letters, digits and `-`")));
        } else if out.iter().any(|o| o.name == name) {
            diags.push(file.at(c.name.span(), format!("check `{name}` is declared twice")));
        }
        if c.steps.iter().all(|s| super::lower::runs_nothing(s)) {
            diags.push(
                file.at(span.clone(), format!("check `{name}` has no steps: it would prove nothing"))
                    .with_help("add the shell lines that build or run the check (`steps = [\"...\"]`)"),
            );
        }
        let files =
            c.files.as_ref().map(|dir| check_folder(tree, file, stack, &name, "files", dir, diags)).unwrap_or_default();
        let helpers = c.helpers.as_ref().map(|dir| {
            if c.files.as_ref().is_some_and(|f| f.get_ref() == dir.get_ref()) {
                diags.push(file.at(dir.span(), format!("check `{name}`: `helpers` names its own `files` folder")));
            }
            (dir.get_ref().clone(), check_folder(tree, file, stack, &name, "helpers", dir, diags))
        });
        if let Some(h) =
            c.helpers.as_ref().filter(|h| out.iter().any(|o| &o.name == h.get_ref()) || h.get_ref() == &name)
        {
            diags.push(file.at(
                h.span(),
                format!(
                    "check `{name}`: `helpers` `{}` is also a check's name: both would be laid out in build/checks/{}/",
                    h.get_ref(),
                    h.get_ref()
                ),
            ));
        }
        for d in &c.device_code {
            if let Err(e) = crate::offload::coverage::matcher(d.get_ref()) {
                diags.push(file.at(d.span(), format!("{e} (relative to the check's directory)")));
            }
        }
        let estimate = c.estimate.map(|e| {
            let span = e.span();
            let e = e.into_inner();
            for (field, v) in
                [("serial-seconds", e.serial_seconds), ("core-seconds-per-target", e.core_seconds_per_target)]
            {
                if !(0.0..=86_400.0).contains(&v) {
                    diags.push(file.at(
                        span.clone(),
                        format!("check `{name}`: `estimate` `{field}` must be between 0 and 86400, got {v}"),
                    ));
                }
            }
            if e.source.trim().is_empty() {
                diags.push(
                    file.at(span.clone(), format!("check `{name}`: `estimate` `source` is empty"))
                        .with_help("say where the figures come from (a measured run, a count of compiles)"),
                );
            }
            CheckEstimate {
                serial_seconds: e.serial_seconds,
                core_seconds_per_target: e.core_seconds_per_target,
                source: e.source,
            }
        });
        out.push(PostCheck {
            name,
            files,
            helpers,
            steps: c.steps,
            device_code: c.device_code.into_iter().map(Spanned::into_inner).collect(),
            estimate,
        });
    }
    out
}

/// The files of the folder a check's `files` or `helpers` names: the stack's own
/// `recipes/<stack>/checks/<dir>/` if it has files, else the shared one (see [`checks_dirs`]).
/// A name that is not one folder, or a folder with no files, is an error on `file`.
fn check_folder(
    tree: &RecipeTree,
    file: &FileText<'_>,
    stack: &str,
    name: &str,
    field: &str,
    dir: &Spanned<String>,
    diags: &mut Diagnostics,
) -> super::FolderFiles {
    let d = dir.get_ref();
    if d.is_empty() || d.contains("..") || d.starts_with('/') {
        diags.push(file.at(
            dir.span(),
            format!(
                "check {field} `{d}` must be a folder name under recipes/{stack}/checks/ or recipes/{SHARED_CHECKS}/"
            ),
        ));
        return Vec::new();
    }
    let [own, shared] = checks_dirs(stack, d);
    for base in [&own, &shared] {
        let files: super::FolderFiles =
            tree.files_under(base).map(|(rel, bytes)| (rel.to_string(), bytes.to_vec())).collect();
        if !files.is_empty() {
            return files;
        }
    }
    diags.push(
        file.at(
            dir.span(),
            format!("check `{name}`: no files in {} nor in {}", tree.display_path(&own), tree.display_path(&shared)),
        )
        .with_help(format!(
            "put the check's files in one of them (the shared folder serves every stack), or remove `{field}`"
        )),
    );
    Vec::new()
}

/// What of the checks' files enters the cache key (their steps are in the recipe's content):
/// each file's path and sha256, one line each.
pub(super) fn files_digest(checks: &[PostCheck]) -> String {
    let mut s = String::new();
    for c in checks {
        for (rel, bytes) in &c.files {
            s.push_str(&format!("\ncheck {} {rel} {}", c.name, crate::digest::sha256_hex(bytes)));
        }
        if let Some((dir, files)) = &c.helpers {
            for (rel, bytes) in files {
                s.push_str(&format!("\ncheck {} ../{dir}/{rel} {}", c.name, crate::digest::sha256_hex(bytes)));
            }
        }
    }
    s
}
