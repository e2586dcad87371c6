//! The sha256 of a file as a PEP 503 "simple" index gives it: the project's page
//! (`<index>/<normalized-name>/`) links each file with `#sha256=<hex>` in its URL, as
//! download.pytorch.org and PyPI do. `lock` records what the page says, so a url source whose
//! recipe names only its index is still verified on every download.

use std::io::Read;

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
    #[error("the index page {at} has `{project}` `{version}` for {on} only in files it marks as not for the stack: {}; ask for another version, or name the file with `url` and its `sha256` if you mean it", list(.excluded))]
    Excluded { at: String, project: String, version: String, on: String, excluded: Vec<String> },
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
    /// Its `data-requires-python` (PEP 503): the Pythons the file is for.
    pub requires_python: Option<String>,
    /// Its `data-yanked` (PEP 592): the reason given (empty when none); `None`: not yanked.
    pub yanked: Option<String>,
}

/// Picks the one wheel file of `want.project` at `want.version` for the stack's Python and
/// glibc floor from the project's page of `want.index` (through the config's URL rewrites),
/// and returns its URL (a relative link resolved against the page as the recipe names it, so a
/// rewrite applies to the download as to the page; after a redirect, against where the page
/// was found, or its `<base href>`) and the page's `#sha256=` digest. A file whose
/// `data-requires-python` excludes the stack's Python is never taken; a yanked one (PEP 592)
/// only when the recipe's exact version names it and nothing else fits, and the pick says so.
pub fn resolve_wheel(
    cfg: &Config,
    want: &crate::recipe::lockfile::WheelAsked<'_>,
) -> Result<crate::recipe::lockfile::PickedWheel, IndexPageError> {
    use crate::wheel::select::{self, PickError, VersionSpec};
    let page = format!("{}/{}/", want.index.trim_end_matches('/'), crate::wheel::normalize_name(want.project));
    let fetch_url = cfg.rewrite_url(&page);
    let via = if fetch_url == page { String::new() } else { format!(" (via `{fetch_url}`)") };
    let fetched = read_page(cfg, &fetch_url).map_err(|message| {
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
    let Page { links, base } = parse(&fetched.html);
    let bad_input = |message: String| IndexPageError::Fetch { page: page.clone(), via: via.clone(), message };
    let spec = VersionSpec::parse(want.version).map_err(bad_input)?;
    let py = select::parse_python(want.python)
        .ok_or_else(|| bad_input(format!("the stack's python `{}` is not `3.N`", want.python)))?;
    let glibc = select::parse_glibc(want.glibc)
        .ok_or_else(|| bad_input(format!("the stack's glibc `{}` is not `2.N`", want.glibc)))?;
    let (project, version) = (want.project.to_string(), want.version.to_string());
    let at = format!("`{page}`{via}");
    let on = format!("CPython {} on Linux x86_64 with glibc {}", want.python, want.glibc);
    let for_python =
        |l: &Link| l.requires_python.as_deref().is_none_or(|r| select::python_satisfies(r, py) != Some(false));
    let pick_among = |usable: &dyn Fn(&Link) -> bool| {
        let at: Vec<usize> = (0..links.len()).filter(|i| usable(&links[*i])).collect();
        let files: Vec<String> = at.iter().map(|i| links[*i].file.clone()).collect();
        select::pick(&files, want.project, &spec, py, glibc).map(|j| at[j])
    };
    let picked = pick_among(&|l| for_python(l) && l.yanked.is_none()).or_else(|_| match spec {
        // PEP 592: an exact version may take a yanked file, when no other fits.
        VersionSpec::Exact(_) => pick_among(&for_python),
        VersionSpec::Prefix(_) => Err(PickError::NoVersion),
    });
    let i = match picked {
        Ok(i) => i,
        Err(_) => {
            let files: Vec<String> = links.iter().map(|l| l.file.clone()).collect();
            match select::pick(&files, want.project, &spec, py, glibc) {
                // Files that would fit, but the page marks them not for the stack.
                Ok(_) => {
                    let excluded = links
                        .iter()
                        .filter(|l| select::pick(std::slice::from_ref(&l.file), want.project, &spec, py, glibc).is_ok())
                        .map(|l| match (&l.requires_python, &l.yanked) {
                            (Some(r), _) if !for_python(l) => format!("{} (requires Python `{r}`)", l.file),
                            (_, Some(why)) if why.is_empty() => format!("{} (yanked)", l.file),
                            (_, Some(why)) => format!("{} (yanked: {why})", l.file),
                            _ => l.file.clone(),
                        })
                        .collect();
                    return Err(IndexPageError::Excluded { at, project, version, on, excluded });
                }
                Err(PickError::NoVersion) => return Err(IndexPageError::NoVersion { at, project, version, files }),
                Err(PickError::NoTags { of_version }) => {
                    return Err(IndexPageError::NoTags { at, project, version, on, files: of_version })
                }
                Err(PickError::Ambiguous { candidates }) => {
                    return Err(IndexPageError::Ambiguous { at, project, version, on, candidates })
                }
            }
        }
    };
    let link = &links[i];
    let Some(sha256) = link.sha256.clone() else {
        return Err(IndexPageError::PickedNoDigest { at, project, version, file: link.file.clone() });
    };
    // Where the page was found: as the recipe names it, unless a redirect moved it.
    let same = |a: &str, b: &str| url::Url::parse(a).ok().zip(url::Url::parse(b).ok()).is_some_and(|(a, b)| a == b);
    let found_at = if same(&fetched.url, &fetch_url) { page.clone() } else { cfg.unrewrite_url(&fetched.url) };
    let url = url::Url::parse(&found_at)
        .and_then(|u| match &base {
            Some(b) => u.join(b.trim()),
            None => Ok(u),
        })
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
    Ok(crate::recipe::lockfile::PickedWheel { url: url.to_string(), sha256, page, yanked: link.yanked.clone() })
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
    let links = parse(&read_page(cfg, &fetch_url).map_err(fail)?.html).links;
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

/// The most an index page may hold: PyPI's and download.pytorch.org's largest project pages
/// are a few MB; more is no index page, and is not read into memory.
pub const MAX_PAGE_BYTES: u64 = 32 << 20;

/// A page as it arrived: its text and the URL it came from (after redirects).
struct Fetched {
    html: String,
    url: String,
}

/// Reads a page, within the downloads' timeout (`download-timeout-secs`, or
/// `ROCMFORGE_HTTP_TIMEOUT_SECS`) and [`MAX_PAGE_BYTES`].
fn read_page(cfg: &Config, url: &str) -> Result<Fetched, String> {
    let too_big =
        || format!("the page is larger than {} MiB, more than any index page: not read", MAX_PAGE_BYTES >> 20);
    if let Some(path) = url.strip_prefix("file://") {
        let path = percent_encoding::percent_decode_str(path).decode_utf8_lossy().into_owned();
        let p = std::path::Path::new(&path);
        let p = if p.is_dir() { p.join("index.html") } else { p.to_path_buf() };
        let mut bytes = Vec::new();
        std::fs::File::open(&p)
            .and_then(|f| f.take(MAX_PAGE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if bytes.len() as u64 > MAX_PAGE_BYTES {
            return Err(too_big());
        }
        let html = String::from_utf8(bytes).map_err(|e| format!("{}: {e}", p.display()))?;
        return Ok(Fetched { html, url: url.to_string() });
    }
    let timeout = super::download::RetryPolicy::for_config(cfg).timeout;
    let timed_out = || {
        format!(
            "no answer within {} s (`download-timeout-secs` in the config, or ROCMFORGE_HTTP_TIMEOUT_SECS, sets how long to wait)",
            timeout.as_secs()
        )
    };
    let fail = |e: reqwest::Error| if e.is_timeout() { timed_out() } else { super::http::explain(&e) };
    let client = super::http::client(timeout, timeout).map_err(fail)?;
    let resp = client.get(url).header("Accept", "text/html").send().map_err(fail)?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    if resp.content_length().is_some_and(|n| n > MAX_PAGE_BYTES) {
        return Err(too_big());
    }
    let final_url = resp.url().to_string();
    let mut bytes = Vec::new();
    resp.take(MAX_PAGE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| {
        let timeout = e.kind() == std::io::ErrorKind::TimedOut
            || e.get_ref().and_then(|i| i.downcast_ref::<reqwest::Error>()).is_some_and(reqwest::Error::is_timeout);
        if timeout {
            timed_out()
        } else {
            format!("the page broke off: {}", crate::diagnostic::one_line(&e))
        }
    })?;
    if bytes.len() as u64 > MAX_PAGE_BYTES {
        return Err(too_big());
    }
    Ok(Fetched { html: String::from_utf8_lossy(&bytes).into_owned(), url: final_url })
}

/// What a page says: its file links, in order, and its `<base href>` (which relative links
/// are resolved against, as pip does).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub links: Vec<Link>,
    pub base: Option<String>,
}

/// Reads a PEP 503 page with html5ever's tokenizer, the WHATWG rules browsers follow:
/// comments, scripts and other raw text hold no links; attributes quoted either way, unquoted,
/// or spaced around `=`; character references (`&amp;`, `&#43;`) decoded.
pub fn parse(html: &str) -> Page {
    use html5ever::tokenizer::{BufferQueue, Tokenizer, TokenizerOpts};
    let input = BufferQueue::default();
    input.push_back(html5ever::tendril::StrTendril::from_slice(html));
    let tok = Tokenizer::new(PageSink(std::cell::RefCell::new(Page::default())), TokenizerOpts::default());
    // The sink never asks for a script to run, so one feed reads everything.
    let _ = tok.feed(&input);
    tok.end();
    tok.sink.0.into_inner()
}

struct PageSink(std::cell::RefCell<Page>);

impl html5ever::tokenizer::TokenSink for PageSink {
    type Handle = ();

    fn process_token(
        &self,
        token: html5ever::tokenizer::Token,
        _line: u64,
    ) -> html5ever::tokenizer::TokenSinkResult<()> {
        use html5ever::tokenizer::states::RawKind;
        use html5ever::tokenizer::{TagKind, Token, TokenSinkResult};
        let Token::TagToken(tag) = token else { return TokenSinkResult::Continue };
        if tag.kind != TagKind::StartTag {
            return TokenSinkResult::Continue;
        }
        let attr = |name: &str| tag.attrs.iter().find(|a| &*a.name.local == name).map(|a| a.value.to_string());
        let mut page = self.0.borrow_mut();
        match &*tag.name {
            "a" => {
                if let Some(link) = attr("href")
                    .and_then(|href| Link::of(href.trim(), attr("data-requires-python"), attr("data-yanked")))
                {
                    page.links.push(link);
                }
            }
            "base" if page.base.is_none() => page.base = attr("href"),
            // What the tree builder would switch the tokenizer to: their text holds no tags.
            "script" => return TokenSinkResult::RawData(RawKind::ScriptData),
            "style" | "xmp" | "iframe" | "noembed" | "noframes" => return TokenSinkResult::RawData(RawKind::Rawtext),
            "textarea" | "title" => return TokenSinkResult::RawData(RawKind::Rcdata),
            "plaintext" => return TokenSinkResult::Plaintext,
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

impl Link {
    /// The link of an `href` (entities already decoded); `None` for one naming no file.
    fn of(href: &str, requires_python: Option<String>, yanked: Option<String>) -> Option<Link> {
        let (url, fragment) = href.split_once('#').unwrap_or((href, ""));
        let sha256 = fragment
            .strip_prefix("sha256=")
            .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_ascii_lowercase);
        let segment = url.split('?').next().unwrap_or(url).rsplit('/').next().unwrap_or("");
        let file = percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned();
        let requires_python = requires_python.map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
        (!file.is_empty()).then(|| Link { file, sha256, href: url.to_string(), requires_python, yanked })
    }
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
        let l = parse(&html).links;
        let link = |file: &str, sha256: Option<String>, href: &str| Link {
            file: file.into(),
            sha256,
            href: href.into(),
            requires_python: None,
            yanked: None,
        };
        assert_eq!(
            l,
            vec![
                link(
                    "torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl",
                    Some(d),
                    "/whl/rocm5.2/torch-1.13.1%2Brocm5.2-cp310-cp310-linux_x86_64.whl"
                ),
                link("x-1.0-py3-none-any.whl", None, "../x-1.0-py3-none-any.whl"),
                Link {
                    requires_python: Some(">=3.8".into()),
                    ..link("y-2.0-py3-none-any.whl", None, "y-2.0-py3-none-any.whl")
                },
            ]
        );
    }

    #[test]
    fn pages_are_read_as_browsers_read_them() {
        let html = "<!DOCTYPE html><html><head><title><a href=\"t-0-py3-none-any.whl\"></title>\n\
            <base href = 'https://files.example/pkgs/'>\n\
            <script>document.write('<a href=\"s-0-py3-none-any.whl\">')</script></head><body>\n\
            <!-- <a href=\"old-1.0-py3-none-any.whl#sha256=00\">old</a> -->\n\
            <a href=a-1.0-py3-none-any.whl>unquoted</a>\n\
            <a\n  href = \"b-1.0-py3-none-any.whl\" data-yanked=\"broken &amp; withdrawn\">spaced</a>\n\
            <a href=\"c-1.0&#43;x-py3-none-any.whl?x=1&amp;y=2\" data-yanked>entities</a>\n\
            <a href=\"d-1.0-py3-none-any.whl\" data-requires-python=\"&gt;=3.13\">d</a>\n\
            <a name=\"no-href\">none</a></body></html>";
        let page = parse(html);
        let files: Vec<&str> = page.links.iter().map(|l| l.file.as_str()).collect();
        assert_eq!(
            files,
            ["a-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl", "c-1.0+x-py3-none-any.whl", "d-1.0-py3-none-any.whl"]
        );
        assert_eq!(page.base.as_deref(), Some("https://files.example/pkgs/"));
        assert_eq!(page.links[1].yanked.as_deref(), Some("broken & withdrawn"));
        assert_eq!(page.links[2].yanked.as_deref(), Some(""));
        assert_eq!(page.links[2].href, "c-1.0+x-py3-none-any.whl?x=1&y=2");
        assert_eq!(page.links[0].yanked, None);
        assert_eq!(page.links[3].requires_python.as_deref(), Some(">=3.13"));
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
