//! The simple repository API as files and responses: PEP 503 HTML (with PEP 592 yanks,
//! PEP 658/714 metadata links, `data-requires-python`), PEP 691 JSON (api-version 1.1, PEP 700),
//! and the atomic writes that let a reader see the old page or the new one, never half of one.

use serde::Serialize;

use super::{FileRecord, Project, State};

/// The repository API version the pages declare (PEP 629 / PEP 700).
pub const API_VERSION: &str = "1.1";

/// The PEP 691 JSON media type.
pub const JSON_MEDIA_TYPE: &str = "application/vnd.pypi.simple.v1+json";

/// Escapes text for HTML element content and double-quoted attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

/// A filename as a relative URL: everything but RFC 3986 unreserved characters is
/// percent-encoded, so the `+` of a local version label is `%2B` (as download.pytorch.org does;
/// a bare `+` in a path means a space to some object stores).
pub fn url_path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"{API_VERSION}\">\n    <title>{}</title>\n  </head>\n  <body>\n",
        escape_html(title)
    )
}

const TAIL: &str = "  </body>\n</html>\n";

/// `simple/index.html`: one link per project.
pub fn root_html(state: &State) -> String {
    let mut s = head("Simple index");
    for (normalized, _) in state.projects.iter().filter(|(_, p)| !p.files.is_empty()) {
        s.push_str(&format!("    <a href=\"{}/\">{}</a><br>\n", url_path_segment(normalized), escape_html(normalized)));
    }
    s.push_str(TAIL);
    s
}

/// `simple/<project>/index.html`: one link per file, with its hash and PEP 503/592/658 data.
pub fn project_html(normalized: &str, project: &Project) -> String {
    let mut s = head(&format!("Links for {normalized}"));
    s.push_str(&format!("    <h1>Links for {}</h1>\n", escape_html(normalized)));
    for f in &project.files {
        s.push_str(&format!("    <a href=\"{}#sha256={}\"", url_path_segment(&f.filename), f.sha256));
        if let Some(rp) = &f.requires_python {
            s.push_str(&format!(" data-requires-python=\"{}\"", escape_html(rp)));
        }
        // PEP 714 renamed the attribute; pip before 23.2 only knows the old name.
        s.push_str(&format!(
            " data-dist-info-metadata=\"sha256={0}\" data-core-metadata=\"sha256={0}\"",
            f.metadata_sha256
        ));
        if let Some(reason) = &f.yanked {
            s.push_str(&format!(" data-yanked=\"{}\"", escape_html(reason)));
        }
        s.push_str(&format!(">{}</a><br>\n", escape_html(&f.filename)));
    }
    s.push_str(TAIL);
    s
}

#[derive(Serialize)]
struct Meta {
    #[serde(rename = "api-version")]
    api_version: &'static str,
}

#[derive(Serialize)]
struct RootJson<'a> {
    meta: Meta,
    projects: Vec<NameJson<'a>>,
}

#[derive(Serialize)]
struct NameJson<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct Hashes<'a> {
    sha256: &'a str,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Yanked<'a> {
    Flag(bool),
    Reason(&'a str),
}

#[derive(Serialize)]
struct FileJson<'a> {
    filename: &'a str,
    url: String,
    hashes: Hashes<'a>,
    #[serde(rename = "requires-python", skip_serializing_if = "Option::is_none")]
    requires_python: Option<&'a str>,
    #[serde(rename = "core-metadata")]
    core_metadata: Hashes<'a>,
    #[serde(rename = "dist-info-metadata")]
    dist_info_metadata: Hashes<'a>,
    yanked: Yanked<'a>,
    size: u64,
}

#[derive(Serialize)]
struct ProjectJson<'a> {
    meta: Meta,
    name: &'a str,
    files: Vec<FileJson<'a>>,
    versions: Vec<&'a str>,
}

/// The PEP 691 root response.
pub fn root_json(state: &State) -> String {
    let projects =
        state.projects.iter().filter(|(_, p)| !p.files.is_empty()).map(|(n, _)| NameJson { name: n }).collect();
    to_json(&RootJson { meta: Meta { api_version: API_VERSION }, projects })
}

fn file_json(f: &FileRecord) -> FileJson<'_> {
    FileJson {
        filename: &f.filename,
        url: url_path_segment(&f.filename),
        hashes: Hashes { sha256: &f.sha256 },
        requires_python: f.requires_python.as_deref(),
        core_metadata: Hashes { sha256: &f.metadata_sha256 },
        dist_info_metadata: Hashes { sha256: &f.metadata_sha256 },
        yanked: match &f.yanked {
            None => Yanked::Flag(false),
            Some(r) if r.is_empty() => Yanked::Flag(true),
            Some(r) => Yanked::Reason(r),
        },
        size: f.size,
    }
}

/// The PEP 691 project response (api-version 1.1: with `versions` and `size`).
pub fn project_json(normalized: &str, project: &Project) -> String {
    let mut versions: Vec<&str> = Vec::new();
    for f in &project.files {
        if !versions.contains(&f.version.as_str()) {
            versions.push(&f.version);
        }
    }
    to_json(&ProjectJson {
        meta: Meta { api_version: API_VERSION },
        name: normalized,
        files: project.files.iter().map(file_json).collect(),
        versions,
    })
}

fn to_json<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        let mut state = State::default();
        state.projects.insert(
            "rf-pure".into(),
            Project {
                name: "RF_Pure".into(),
                files: vec![
                    FileRecord {
                        filename: "rf_pure-1.0.0+rocm6.2.4.gfx1010-py3-none-any.whl".into(),
                        version: "1.0.0+rocm6.2.4.gfx1010".into(),
                        sha256: "aa".repeat(32),
                        size: 1234,
                        requires_python: Some(">=3.8,<4".into()),
                        metadata_sha256: "bb".repeat(32),
                        yanked: None,
                    },
                    FileRecord {
                        filename: "rf_pure-1.1.0-py3-none-any.whl".into(),
                        version: "1.1.0".into(),
                        sha256: "cc".repeat(32),
                        size: 99,
                        requires_python: None,
                        metadata_sha256: "dd".repeat(32),
                        yanked: Some("broken <build> & \"more\"".into()),
                    },
                ],
            },
        );
        state
    }

    #[test]
    fn root_page_lists_projects() {
        assert_eq!(
            root_html(&sample()),
            "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Simple index</title>\n  </head>\n  <body>\n    <a href=\"rf-pure/\">rf-pure</a><br>\n  </body>\n</html>\n"
        );
    }

    #[test]
    fn project_page_links_with_hash_metadata_yank() {
        let state = sample();
        let html = project_html("rf-pure", &state.projects["rf-pure"]);
        let a = "aa".repeat(32);
        let b = "bb".repeat(32);
        let c = "cc".repeat(32);
        let d = "dd".repeat(32);
        assert_eq!(
            html,
            format!(
                "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Links for rf-pure</title>\n  </head>\n  <body>\n    <h1>Links for rf-pure</h1>\n\
                 \x20   <a href=\"rf_pure-1.0.0%2Brocm6.2.4.gfx1010-py3-none-any.whl#sha256={a}\" data-requires-python=\"&gt;=3.8,&lt;4\" data-dist-info-metadata=\"sha256={b}\" data-core-metadata=\"sha256={b}\">rf_pure-1.0.0+rocm6.2.4.gfx1010-py3-none-any.whl</a><br>\n\
                 \x20   <a href=\"rf_pure-1.1.0-py3-none-any.whl#sha256={c}\" data-dist-info-metadata=\"sha256={d}\" data-core-metadata=\"sha256={d}\" data-yanked=\"broken &lt;build&gt; &amp; &quot;more&quot;\">rf_pure-1.1.0-py3-none-any.whl</a><br>\n\
                 \x20 </body>\n</html>\n"
            )
        );
    }

    #[test]
    fn json_follows_pep_691_and_700() {
        let state = sample();
        let v: serde_json::Value = serde_json::from_str(&project_json("rf-pure", &state.projects["rf-pure"])).unwrap();
        assert_eq!(v["meta"]["api-version"], "1.1");
        assert_eq!(v["name"], "rf-pure");
        assert_eq!(v["versions"], serde_json::json!(["1.0.0+rocm6.2.4.gfx1010", "1.1.0"]));
        let f0 = &v["files"][0];
        assert_eq!(f0["url"], "rf_pure-1.0.0%2Brocm6.2.4.gfx1010-py3-none-any.whl");
        assert_eq!(f0["hashes"]["sha256"], "aa".repeat(32));
        assert_eq!(f0["requires-python"], ">=3.8,<4");
        assert_eq!(f0["core-metadata"]["sha256"], "bb".repeat(32));
        assert_eq!(f0["yanked"], false);
        assert_eq!(f0["size"], 1234);
        assert_eq!(v["files"][1]["yanked"], "broken <build> & \"more\"");
        assert!(v["files"][1].get("requires-python").is_none());
        let r: serde_json::Value = serde_json::from_str(&root_json(&state)).unwrap();
        assert_eq!(r, serde_json::json!({"meta": {"api-version": "1.1"}, "projects": [{"name": "rf-pure"}]}));
    }
}
