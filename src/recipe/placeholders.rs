//! `{name}` placeholders in a recipe's args, env, steps and checks: how a text splits into
//! literal parts and placeholders (`{{` and `}}` are literal braces), and which names exist. The
//! engine expands them (`engine::systems::Vars::expand`); the loader refuses an unknown one, so
//! `recipes check` says what the build would say only after the checkout.

/// The placeholders every recipe may use (`{src:<recipe>}` besides, for its source dependencies,
/// and `{root:<recipe>}`, for its build dependencies: the root that holds a dependency's files,
/// the installation given by `--rocm-path` when the plan takes it from there, else `{prefix}`).
pub const KNOWN: &[&str] = &[
    "prefix",
    "targets",
    "targets_comma",
    "jobs",
    "src",
    "build",
    "stage",
    "installed",
    "rocm",
    "rocm_llvm",
    "rocm_device_libs",
    "python",
    "version",
    "wheel_version",
];

/// `{prefix} {targets} ... {src:<recipe>}`: every placeholder, for messages.
pub fn known_list() -> String {
    let mut all: Vec<String> = KNOWN.iter().map(|k| format!("{{{k}}}")).collect();
    all.push("{src:<recipe>}".into());
    all.push("{root:<recipe>}".into());
    all.join(" ")
}

/// A part of a text: literal text, or the name inside `{...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    Name(&'a str),
    /// A `{` no `}` closes, and the rest of the text: a placeholder cut short (`{root:vecmath`),
    /// refused by [`check`] (the engine, given one anyway, takes it as text).
    Unclosed(&'a str),
}

/// Splits `text` into its literal parts and placeholders. A lone `}` is literal.
pub fn pieces(text: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        if i > 0 {
            out.push(Piece::Text(&rest[..i]));
        }
        if rest[i..].starts_with("{{") || rest[i..].starts_with("}}") {
            out.push(Piece::Text(&rest[i..i + 1]));
            rest = &rest[i + 2..];
            continue;
        }
        if rest.as_bytes()[i] == b'}' {
            out.push(Piece::Text("}"));
            rest = &rest[i + 1..];
            continue;
        }
        let Some(end) = rest[i..].find('}') else {
            out.push(Piece::Unclosed(&rest[i..]));
            return out;
        };
        out.push(Piece::Name(&rest[i + 1..i + end]));
        rest = &rest[i + end + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    out
}

/// Why `text` would not expand for a recipe whose source dependencies are `source_deps` and
/// build dependencies `build_deps`.
pub fn check(text: &str, source_deps: &[String], build_deps: &[String]) -> Result<(), String> {
    for p in pieces(text) {
        if let Piece::Unclosed(rest) = p {
            return Err(format!(
                "`{rest}` opens a placeholder that no `}}` closes: write `{{name}}`, or `{{{{` for a literal brace"
            ));
        }
        let Piece::Name(name) = p else { continue };
        if let Some(dep) = name.strip_prefix("root:") {
            if !build_deps.iter().any(|d| d == dep) {
                return Err(format!(
                    "`{{root:{dep}}}` names a recipe that is not among its build dependencies; add it to `[dependencies] build`"
                ));
            }
            continue;
        }
        match name.strip_prefix("src:") {
            Some(dep) if source_deps.iter().any(|d| d == dep) => {}
            Some(dep) => {
                return Err(format!(
                    "`{{src:{dep}}}` names a recipe that is not among its source dependencies; add it to `[dependencies] source`"
                ))
            }
            None if KNOWN.contains(&name) => {}
            None => {
                return Err(format!(
                    "unknown placeholder `{{{name}}}`; known: {} (write `{{{{` and `}}}}` for literal braces)",
                    known_list()
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_names_and_literal_braces() {
        assert_eq!(
            pieces("a {prefix}/x {{lit}} ${{HOME}} {open"),
            vec![
                Piece::Text("a "),
                Piece::Name("prefix"),
                Piece::Text("/x "),
                Piece::Text("{"),
                Piece::Text("lit"),
                Piece::Text("}"),
                Piece::Text(" $"),
                Piece::Text("{"),
                Piece::Text("HOME"),
                Piece::Text("}"),
                Piece::Text(" "),
                Piece::Unclosed("{open"),
            ]
        );
        let e = check("-DV={root:vecmath/include", &[], &["vecmath".into()]).unwrap_err();
        assert_eq!(
            e,
            "`{root:vecmath/include` opens a placeholder that no `}` closes: write `{name}`, or `{{` for a literal brace"
        );
        assert!(check("-DX={targets} {src:hip}", &["hip".into()], &[]).is_ok());
        let e = check("make {nosuch}", &[], &[]).unwrap_err();
        assert!(e.starts_with("unknown placeholder `{nosuch}`; known: {prefix}"), "{e}");
        assert!(check("{src:rocr}", &["hip".into()], &[]).unwrap_err().contains("not among its source dependencies"));
    }

    #[test]
    fn a_dependency_root_must_name_a_build_dependency() {
        assert!(check("-DHALF_INCLUDE_DIR={root:half}/include", &[], &["half".into()]).is_ok());
        let e = check("{root:half}/include", &["half".into()], &["rocblas".into()]).unwrap_err();
        assert!(e.contains("`{root:half}` names a recipe that is not among its build dependencies"), "{e}");
        assert!(known_list().contains("{root:<recipe>}"), "{}", known_list());
    }
}
