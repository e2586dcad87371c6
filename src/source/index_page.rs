//! The sha256 of a file as a PEP 503 "simple" index gives it: the project's page
//! (`<index>/<normalized-name>/`) links each file with `#sha256=<hex>` in its URL, as
//! download.pytorch.org and PyPI do. `lock` records what the page says, so a url source whose
//! recipe names only its index is still verified on every download.

use std::time::Duration;

use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum IndexPageError {
    #[error("cannot read the index page `{page}`{via}: {message}")]
    Fetch { page: String, via: String, message: String },
    #[error("the index page `{page}` has no link to `{file}`{others}")]
    NoLink { page: String, file: String, others: String },
    #[error("the index page `{page}` links `{file}` without a `#sha256=` digest: write the file's `sha256` into the recipe yourself (`sha256sum FILE`)")]
    NoDigest { page: String, file: String },
    #[error("the index page {at} has no file of `{project}` version `{version}` (it links {})", list(.files))]
    NoVersion { at: String, project: String, version: String, files: Vec<String> },
    #[error("the index page {at} has `{project}` `{version}`, but no file of it installs on {on} (the stack's `python` and `glibc`); the files of that version: {}", list(.files))]
    NoTags { at: String, project: String, version: String, on: String, files: Vec<String> },
    #[error("the index page {at} has {} equally fitting files of `{project}` `{version}` for {on}: {}; name the one you mean (its local version label, `version = \"==X+label\"`), or give its `url`", .candidates.len(), list(.candidates))]
    Ambiguous { at: String, project: String, version: String, on: String, candidates: Vec<String> },
    #[error("the index page {at} links `{file}`, the file of `{project}` `{version}` for the stack, without a `#sha256=` digest, so nothing could verify its download: name it in the recipe with `url` and its `sha256` instead (`sha256sum FILE`)")]
    PickedNoDigest { at: String, project: String, version: String, file: String },
    #[error("the index page {at} links `{file}`, the file of `{project}` `{version}` for the stack, as `{url}`, which is not on the web: a remote page's links are remote, so it is not taken (a page must not make the build use this machine's files); name the wheel in the recipe with `url` and its `sha256` instead")]
    NotRemote { at: String, project: String, version: String, file: String, url: String },
    #[error("the index `{index}` serves no project `{project}` ({message} at {at}; an index answers 404, or 403 as repo.amd.com does, for a project it lacks): check the recipe's `project` and `index`")]
    NoProject { index: String, project: String, at: String, message: String },
    #[error("`{file}` is not a wheel file name, so its project page in `{index}` is unknown: {message}")]
    NotAWheel { file: String, index: String, message: String },
}

fn list(files: &[String]) -> String {
    match files.len() {
        0 => "no files".to_string(),
        n if n > 12 => format!("{}, and {} more", files[..12].join(", "), n - 12),
        _ => files.join(", "),
    }
}

/// One `<a href>` of a page: the file name its URL ends in (percent-decoded) and its sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub file: String,
    pub sha256: Option<String>,
    /// The link as written, without its `#` fragment (relative to the page, or absolute).
    pub href: String,
}

/// Picks the one wheel file of `want.project` at `want.version` for the stack's Python and
/// glibc floor from the project's page of `want.index` (through the config's URL rewrites),
/// and returns its URL (a relative link resolved against the page as the recipe names it, so a
/// rewrite applies to the download as to the page) and the page's `#sha256=` digest.
pub fn resolve_wheel(
    cfg: &Config,
    want: &crate::recipe::lockfile::WheelAsked<'_>,
) -> Result<crate::recipe::lockfile::PickedWheel, IndexPageError> {
    use crate::wheel::select::{self, PickError, VersionSpec};
    let page = format!("{}/{}/", want.index.trim_end_matches('/'), crate::wheel::normalize_name(want.project));
    let fetch_url = cfg.rewrite_url(&page);
    let via = if fetch_url == page { String::new() } else { format!(" (via `{fetch_url}`)") };
    let html = read_page(&fetch_url).map_err(|message| {
        // A PEP 503 index answers 404 for a project it does not serve; AMD's answers 403.
        if message.starts_with("HTTP 404") || message.starts_with("HTTP 403") {
            IndexPageError::NoProject {
                index: want.index.to_string(),
                project: want.project.to_string(),
                at: format!("`{page}`{via}"),
                message,
            }
        } else {
            IndexPageError::Fetch { page: page.clone(), via: via.clone(), message }
        }
    })?;
    let links = links(&html);
    let files: Vec<String> = links.iter().map(|l| l.file.clone()).collect();
    let bad_input = |message: String| IndexPageError::Fetch { page: page.clone(), via: via.clone(), message };
    let spec = VersionSpec::parse(want.version).map_err(bad_input)?;
    let py = select::parse_python(want.python)
        .ok_or_else(|| bad_input(format!("the stack's python `{}` is not `3.N`", want.python)))?;
    let glibc = select::parse_glibc(want.glibc)
        .ok_or_else(|| bad_input(format!("the stack's glibc `{}` is not `2.N`", want.glibc)))?;
    let (project, version) = (want.project.to_string(), want.version.to_string());
    let at = format!("`{page}`{via}");
    let on = format!("CPython {} on Linux x86_64 with glibc {}", want.python, want.glibc);
    let i = select::pick(&files, want.project, &spec, py, glibc).map_err(|e| match e {
        PickError::NoVersion => IndexPageError::NoVersion { at: at.clone(), project, version, files },
        PickError::NoTags { of_version } => {
            IndexPageError::NoTags { at: at.clone(), project, version, on: on.clone(), files: of_version }
        }
        PickError::Ambiguous { candidates } => {
            IndexPageError::Ambiguous { at: at.clone(), project, version, on: on.clone(), candidates }
        }
    })?;
    let link = &links[i];
    let Some(sha256) = link.sha256.clone() else {
        return Err(IndexPageError::PickedNoDigest {
            at,
            project: want.project.to_string(),
            version: want.version.to_string(),
            file: link.file.clone(),
        });
    };
    let url = url::Url::parse(&page)
        .and_then(|base| base.join(&link.href))
        .map_err(|e| IndexPageError::Fetch {
            page: page.clone(),
            via: via.clone(),
            message: format!("its link `{}` is not a URL: {e}", link.href),
        })?;
    // The page as the recipe names it decides (a rewrite to a local mirror changes nothing).
    if !page.starts_with("file://") && !matches!(url.scheme(), "http" | "https") {
        return Err(IndexPageError::NotRemote {
            at,
            project: want.project.to_string(),
            version: want.version.to_string(),
            file: link.file.clone(),
            url: url.to_string(),
        });
    }
    Ok(crate::recipe::lockfile::PickedWheel { url: url.to_string(), sha256, page })
}

/// The page of the project that `file` (a wheel file name) belongs to, in the index `index`.
pub fn project_page(index: &str, file: &str) -> Result<String, IndexPageError> {
    let name = crate::wheel::WheelName::parse(file).map_err(|e| IndexPageError::NotAWheel {
        file: file.to_string(),
        index: index.to_string(),
        message: e.to_string(),
    })?;
    let project = crate::wheel::normalize_name(&name.distribution);
    Ok(format!("{}/{project}/", index.trim_end_matches('/')))
}

/// Reads the sha256 of `file` from its project's page in `index` (through the config's URL
/// rewrites). Returns the digest and the page's URL (as the recipe names it).
pub fn digest_of(cfg: &Config, index: &str, file: &str) -> Result<(String, String), IndexPageError> {
    let page = project_page(index, file)?;
    let fetch_url = cfg.rewrite_url(&page);
    let via = if fetch_url == page { String::new() } else { format!(" (via `{fetch_url}`)") };
    let fail = |message: String| IndexPageError::Fetch { page: page.clone(), via: via.clone(), message };
    let html = read_page(&fetch_url).map_err(fail)?;
    let links = links(&html);
    match links.iter().find(|l| l.file == file) {
        Some(Link { sha256: Some(d), .. }) => Ok((d.clone(), page)),
        Some(_) => Err(IndexPageError::NoDigest { page, file: file.to_string() }),
        None => {
            let mut names: Vec<&str> = links.iter().map(|l| l.file.as_str()).collect();
            names.truncate(8);
            let others = if names.is_empty() {
                " (it links no files)".to_string()
            } else {
                format!(" (it links: {})", names.join(", "))
            };
            Err(IndexPageError::NoLink { page, file: file.to_string(), others })
        }
    }
}

fn read_page(url: &str) -> Result<String, String> {
    if let Some(path) = url.strip_prefix("file://") {
        let path = percent_encoding::percent_decode_str(path).decode_utf8_lossy().into_owned();
        let p = std::path::Path::new(&path);
        let p = if p.is_dir() { p.join("index.html") } else { p.to_path_buf() };
        return std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()));
    }
    let client = reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(120))
        .user_agent(concat!("rocmforge/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())?;
    let resp = client.get(url).header("Accept", "text/html").send().map_err(|e| e.to_string())?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    resp.text().map_err(|e| e.to_string())
}

/// The links of a PEP 503 page (`<a href="...">`, either quote), in order.
pub fn links(html: &str) -> Vec<Link> {
    let mut out = Vec::new();
    let lower = html.to_ascii_lowercase();
    let mut at = 0;
    while let Some(found) = lower[at..].find("href=") {
        let start = at + found + "href=".len();
        at = start;
        let Some(quote) = html[start..].chars().next().filter(|c| *c == '"' || *c == '\'') else { continue };
        let Some(len) = html[start + 1..].find(quote) else { break };
        let href = html[start + 1..start + 1 + len].replace("&amp;", "&");
        at = start + 1 + len;
        let (url, fragment) = href.split_once('#').unwrap_or((&href, ""));
        let sha256 = fragment
            .strip_prefix("sha256=")
            .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_ascii_lowercase);
        let segment = url.split('?').next().unwrap_or(url).rsplit('/').next().unwrap_or("");
        let file = percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned();
        if !file.is_empty() {
            out.push(Link { file, sha256, href: url.to_string() });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_links_and_digests_as_pep_503_pages_write_them() {
        let d = "ab".repeat(32);
        let html = format!(
            "<html><body>\n<a href=\"/whl/rocm5.2/torch-1.13.1%2Brocm5.2-cp310-cp310-linux_x86_64.whl#sha256={d}\">torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl</a><br/>\n\
             <A HREF='../x-1.0-py3-none-any.whl'>x</A>\n<a href=\"y-2.0-py3-none-any.whl#md5=00\" data-requires-python=\"&gt;=3.8\">y</a></body></html>"
        );
        let l = links(&html);
        assert_eq!(
            l,
            vec![
                Link {
                    file: "torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl".into(),
                    sha256: Some(d),
                    href: "/whl/rocm5.2/torch-1.13.1%2Brocm5.2-cp310-cp310-linux_x86_64.whl".into()
                },
                Link { file: "x-1.0-py3-none-any.whl".into(), sha256: None, href: "../x-1.0-py3-none-any.whl".into() },
                Link { file: "y-2.0-py3-none-any.whl".into(), sha256: None, href: "y-2.0-py3-none-any.whl".into() },
            ]
        );
    }

    #[test]
    fn the_project_page_of_a_wheel() {
        assert_eq!(
            project_page(
                "https://download.pytorch.org/whl/rocm5.2/",
                "torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl"
            )
            .unwrap(),
            "https://download.pytorch.org/whl/rocm5.2/torch/"
        );
        assert_eq!(
            project_page("http://h/simple", "typing_extensions-4.12.2-py3-none-any.whl").unwrap(),
            "http://h/simple/typing-extensions/"
        );
        assert!(project_page("http://h/simple", "x.tar.gz").is_err());
    }
}
