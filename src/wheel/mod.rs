//! Python wheels: the filename (PEP 427 / binary distribution format), PEP 440 versions (parsed
//! leniently, compared normalised), project names (PEP 508) and their normalisation (PEP 503), and
//! the core metadata file inside the wheel (`*.dist-info/METADATA`), which must agree with the
//! filename before a wheel may enter the index.
//!
//! Depends only on `offload`'s ELF reader ([`execstack`]), so the recipe layer (which checks
//! wheel URLs and project names) and the index (which publishes wheels) can both use it.

pub mod execstack;
pub mod closure;
pub mod rewrite;
pub mod runtime;
pub mod select;

use std::fmt;
use std::io::Read;
use std::path::Path;

/// Why a file is not a wheel the index accepts.
#[derive(Debug, thiserror::Error)]
pub enum WheelError {
    #[error("`{0}` is not a wheel filename: {1}")]
    Filename(String, &'static str),
    #[error("`{version}` in `{filename}` is not a PEP 440 version")]
    Version { filename: String, version: String },
    #[error("`{path}` does not exist: give the path of a wheel file (`*.whl`)")]
    Missing { path: String },
    #[error("cannot open `{path}`")]
    Open { path: String, source: std::io::Error },
    #[error("cannot read the wheel as a zip archive")]
    Zip(#[source] zip::result::ZipError),
    #[error("cannot read `{member}` inside the wheel")]
    Member { member: String, source: std::io::Error },
    #[error("the wheel has no `*.dist-info/METADATA` file at its top level")]
    NoMetadata,
    #[error("the wheel has several `.dist-info` directories with METADATA: {0}")]
    SeveralMetadata(String),
    #[error("the wheel has no `{0}` (every wheel carries one beside METADATA)")]
    NoWheelFile(String),
    #[error("the wheel has no `{0}`: pip refuses to install a wheel without its RECORD")]
    NoRecord(String),
    #[error("the wheel's member `{0}` is an absolute path or has a `..` component, so it would install outside the environment: pip refuses such a wheel")]
    UnsafeMember(String),
    #[error("`{member}` is larger than {limit} bytes")]
    TooLarge { member: String, limit: u64 },
    #[error("`{member}` is not UTF-8 text")]
    NotUtf8 { member: String },
    #[error("`{member}` has no `{field}:` field")]
    MissingField { member: String, field: &'static str },
    #[error("METADATA says {field} `{metadata}` but the filename says `{filename}`")]
    Mismatch { field: &'static str, metadata: String, filename: String },
}

/// PEP 503 normalisation: runs of `-`, `_`, `.` become one `-`, all lowercase.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_sep {
                out.push('-');
            }
            in_sep = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_sep = false;
        }
    }
    out
}

/// A valid project name (PEP 508): ASCII letters and digits, with `.`, `_`, `-` inside.
pub fn is_valid_project_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// A PEP 440 version, parsed with the same leniency as `packaging` (`v1.0`, `1.0-rc1`,
/// `1.0.POST2`, `1.0+Local_7` are all accepted) and kept in parts for its normalised form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    epoch: String,
    release: Vec<String>,
    pre: Option<(&'static str, String)>,
    post: Option<String>,
    dev: Option<String>,
    local: Vec<String>,
}

/// A digit run without its leading zeros (`007` -> `7`, `0` -> `0`): what PEP 440 compares.
pub(crate) fn trim_zeros(d: &str) -> String {
    let t = d.trim_start_matches('0');
    if t.is_empty() {
        "0".to_string()
    } else {
        t.to_string()
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn sep(&mut self) {
        if matches!(self.peek(), Some(b'-' | b'_' | b'.')) {
            self.i += 1;
        }
    }
    fn digits(&mut self) -> Option<String> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        (self.i > start).then(|| trim_zeros(std::str::from_utf8(&self.s[start..self.i]).unwrap_or("0")))
    }
    /// Consumes the first of `words` that follows (callers list longer words first).
    fn word(&mut self, words: &[&'static str]) -> Option<&'static str> {
        for w in words {
            if self.s[self.i..].starts_with(w.as_bytes()) {
                self.i += w.len();
                return Some(w);
            }
        }
        None
    }
}

impl Version {
    /// Parses a PEP 440 version; `None` if it is not one.
    pub fn parse(text: &str) -> Option<Version> {
        let lower = text.trim().to_ascii_lowercase();
        let mut p = Cursor { s: lower.as_bytes(), i: 0 };
        p.eat(b'v');
        let first = p.digits()?;
        let (epoch, first) = if p.eat(b'!') { (first, p.digits()?) } else { ("0".to_string(), first) };
        let mut release = vec![first];
        while p.peek() == Some(b'.') && p.s.get(p.i + 1).is_some_and(|c| c.is_ascii_digit()) {
            p.i += 1;
            release.push(p.digits()?);
        }
        let save = p.i;
        p.sep();
        let pre = match p.word(&["alpha", "beta", "preview", "pre", "rc", "a", "b", "c"]) {
            Some(kind) => {
                let kind = match kind {
                    "alpha" | "a" => "a",
                    "beta" | "b" => "b",
                    _ => "rc",
                };
                p.sep();
                Some((kind, p.digits().unwrap_or_else(|| "0".into())))
            }
            None => {
                p.i = save;
                None
            }
        };
        let save = p.i;
        let post = if p.peek() == Some(b'-') && p.s.get(p.i + 1).is_some_and(|c| c.is_ascii_digit()) {
            p.i += 1;
            p.digits()
        } else {
            p.sep();
            if p.word(&["post", "rev", "r"]).is_some() {
                p.sep();
                Some(p.digits().unwrap_or_else(|| "0".into()))
            } else {
                p.i = save;
                None
            }
        };
        let save = p.i;
        p.sep();
        let dev = if p.word(&["dev"]).is_some() {
            p.sep();
            Some(p.digits().unwrap_or_else(|| "0".into()))
        } else {
            p.i = save;
            None
        };
        let mut local = Vec::new();
        if p.eat(b'+') {
            let rest = std::str::from_utf8(&p.s[p.i..]).ok()?;
            for seg in rest.split(['-', '_', '.']) {
                if seg.is_empty() || !seg.bytes().all(|c| c.is_ascii_alphanumeric()) {
                    return None;
                }
                local.push(if seg.bytes().all(|c| c.is_ascii_digit()) { trim_zeros(seg) } else { seg.to_string() });
            }
            p.i = p.s.len();
        }
        (p.i == p.s.len()).then_some(Version { epoch, release, pre, post, dev, local })
    }

    /// The public part (`2.6.0` of `2.6.0+rocm6.2.4`), normalised.
    pub fn public(&self) -> String {
        let mut s = String::new();
        if self.epoch != "0" {
            s.push_str(&format!("{}!", self.epoch));
        }
        s.push_str(&self.release.join("."));
        if let Some((k, n)) = &self.pre {
            s.push_str(&format!("{k}{n}"));
        }
        if let Some(n) = &self.post {
            s.push_str(&format!(".post{n}"));
        }
        if let Some(n) = &self.dev {
            s.push_str(&format!(".dev{n}"));
        }
        s
    }

    /// Whether PEP 440 calls the two versions equal (`1.0` and `1.0.0`: trailing zeros of the
    /// release do not count).
    pub fn equivalent(&self, other: &Version) -> bool {
        let release = |v: &Version| {
            let mut r = v.release.clone();
            while r.len() > 1 && r.last().is_some_and(|x| x == "0") {
                r.pop();
            }
            r
        };
        self.epoch == other.epoch
            && release(self) == release(other)
            && self.pre == other.pre
            && self.post == other.post
            && self.dev == other.dev
            && self.local == other.local
    }

    /// The local label (`rocm6.2.4.gfx1010`), normalised; empty if there is none.
    pub fn local(&self) -> String {
        self.local.join(".")
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.public())?;
        if !self.local.is_empty() {
            write!(f, "+{}", self.local())?;
        }
        Ok(())
    }
}

/// A parsed wheel filename:
/// `{distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    /// The whole filename.
    pub filename: String,
    /// The distribution as spelled in the filename (`torch`, `typing_extensions`).
    pub distribution: String,
    /// The version as spelled in the filename.
    pub version: String,
    pub build_tag: Option<String>,
    pub python_tags: Vec<String>,
    pub abi_tags: Vec<String>,
    pub platform_tags: Vec<String>,
}

fn tag_set(part: &str, filename: &str, what: &'static str) -> Result<Vec<String>, WheelError> {
    let tags: Vec<String> = part.split('.').map(str::to_string).collect();
    if tags.iter().any(|t| t.is_empty() || !t.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')) {
        return Err(WheelError::Filename(filename.to_string(), what));
    }
    Ok(tags)
}

impl WheelName {
    pub fn parse(filename: &str) -> Result<WheelName, WheelError> {
        let bad = |why| WheelError::Filename(filename.to_string(), why);
        let stem = filename.strip_suffix(".whl").ok_or_else(|| bad("it does not end in `.whl`"))?;
        let parts: Vec<&str> = stem.split('-').collect();
        let (dist, version, build, py, abi, plat) = match parts.as_slice() {
            [d, v, p, a, pl] => (*d, *v, None, *p, *a, *pl),
            [d, v, b, p, a, pl] => (*d, *v, Some(*b), *p, *a, *pl),
            _ => return Err(bad("it needs 5 or 6 `-`-separated parts: name-version(-build)-python-abi-platform.whl")),
        };
        if !is_valid_project_name(dist) {
            return Err(bad("the distribution name is not a valid project name"));
        }
        if Version::parse(version).is_none() {
            return Err(WheelError::Version { filename: filename.to_string(), version: version.to_string() });
        }
        if let Some(b) = build {
            if !b.starts_with(|c: char| c.is_ascii_digit())
                || !b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
            {
                return Err(bad("the build tag must start with a digit"));
            }
        }
        Ok(WheelName {
            filename: filename.to_string(),
            distribution: dist.to_string(),
            version: version.to_string(),
            build_tag: build.map(str::to_string),
            python_tags: tag_set(py, filename, "the python tag is malformed")?,
            abi_tags: tag_set(abi, filename, "the abi tag is malformed")?,
            platform_tags: tag_set(plat, filename, "the platform tag is malformed")?,
        })
    }

    /// The PEP 503 name of the project this wheel belongs to.
    pub fn project(&self) -> String {
        normalize_name(&self.distribution)
    }

    /// Whether `other` is the same wheel for pip under another filename: the same project
    /// (PEP 503), an equal version (PEP 440), the same build tag and the same tags.
    pub fn same_wheel_as(&self, other: &WheelName) -> bool {
        let tags = |n: &WheelName| {
            let set = |t: &[String]| {
                let mut v: Vec<String> = t.iter().map(|s| s.to_ascii_lowercase()).collect();
                v.sort();
                v
            };
            (set(&n.python_tags), set(&n.abi_tags), set(&n.platform_tags), n.build_tag.clone())
        };
        let equal = match (Version::parse(&self.version), Version::parse(&other.version)) {
            (Some(a), Some(b)) => a.equivalent(&b),
            _ => false,
        };
        self.project() == other.project() && equal && tags(self) == tags(other)
    }

    /// The version, normalised.
    pub fn normalized_version(&self) -> String {
        Version::parse(&self.version).map(|v| v.to_string()).unwrap_or_else(|| self.version.clone())
    }
}

/// What the index needs from a wheel's core metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMetadata {
    pub name: String,
    pub version: String,
    pub requires_python: Option<String>,
    /// The METADATA file, byte for byte: served as the PEP 658 `.metadata` file.
    pub raw: Vec<u8>,
}

/// METADATA bigger than this is refused rather than read into memory.
const METADATA_LIMIT: u64 = 16 << 20;

/// Parses the header block of a METADATA file (RFC 822 style; the body is the description).
pub fn parse_metadata(raw: Vec<u8>) -> Result<CoreMetadata, WheelError> {
    let member = "METADATA".to_string();
    let text = std::str::from_utf8(&raw).map_err(|_| WheelError::NotUtf8 { member: member.clone() })?;
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(last) = fields.last_mut() {
                last.1.push('\n');
                last.1.push_str(line.trim());
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
    let name = get("name").ok_or(WheelError::MissingField { member: member.clone(), field: "Name" })?;
    let version = get("version").ok_or(WheelError::MissingField { member, field: "Version" })?;
    let requires_python = get("requires-python").filter(|v| !v.is_empty());
    Ok(CoreMetadata { name, version, requires_python, raw })
}

/// Whether a wheel member's name stays inside the directory it is installed into: relative,
/// no `..` component (`/` or `\\` separated), no drive letter.
fn is_safe_member(name: &str) -> bool {
    let drive = name.as_bytes().get(1) == Some(&b':');
    !(name.starts_with(['/', '\\']) || drive || name.split(['/', '\\']).any(|c| c == ".."))
}

/// Reads `*.dist-info/METADATA` from the wheel at `path` and checks it against the filename;
/// also refuses what pip would refuse to install: no `*.dist-info/RECORD`, or a member that
/// leaves the install directory.
pub fn read_metadata(path: &Path, name: &WheelName) -> Result<CoreMetadata, WheelError> {
    let file = crate::fsutil::open_regular(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => WheelError::Missing { path: path.display().to_string() },
        _ => WheelError::Open { path: path.display().to_string(), source },
    })?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(WheelError::Zip)?;
    let found: Vec<String> = zip
        .file_names()
        .filter(|n| n.ends_with(".dist-info/METADATA") && n.matches('/').count() == 1)
        .map(str::to_string)
        .collect();
    let member = match found.as_slice() {
        [] => return Err(WheelError::NoMetadata),
        [one] => one.clone(),
        several => return Err(WheelError::SeveralMetadata(several.join(", "))),
    };
    let wheel_file = member.replace("/METADATA", "/WHEEL");
    if zip.index_for_name(&wheel_file).is_none() {
        return Err(WheelError::NoWheelFile(wheel_file));
    }
    let record = member.replace("/METADATA", "/RECORD");
    if zip.index_for_name(&record).is_none() {
        return Err(WheelError::NoRecord(record));
    }
    if let Some(bad) = zip.file_names().find(|n| !is_safe_member(n)) {
        return Err(WheelError::UnsafeMember(bad.to_string()));
    }
    let entry = zip.by_name(&member).map_err(WheelError::Zip)?;
    if entry.size() > METADATA_LIMIT {
        return Err(WheelError::TooLarge { member, limit: METADATA_LIMIT });
    }
    let mut raw = Vec::with_capacity(entry.size() as usize);
    entry
        .take(METADATA_LIMIT + 1)
        .read_to_end(&mut raw)
        .map_err(|source| WheelError::Member { member: member.clone(), source })?;
    let meta = parse_metadata(raw).map_err(|e| match e {
        WheelError::NotUtf8 { .. } => WheelError::NotUtf8 { member: member.clone() },
        WheelError::MissingField { field, .. } => WheelError::MissingField { member: member.clone(), field },
        e => e,
    })?;
    if normalize_name(&meta.name) != name.project() {
        return Err(WheelError::Mismatch { field: "name", metadata: meta.name, filename: name.distribution.clone() });
    }
    let same_version = Version::parse(&meta.version).is_some_and(|v| v.to_string() == name.normalized_version());
    if !same_version {
        return Err(WheelError::Mismatch { field: "version", metadata: meta.version, filename: name.version.clone() });
    }
    Ok(meta)
}

/// Orders version strings the way a reader expects in a listing: digit runs compare as numbers
/// (`1.10` after `1.9`). Not full PEP 440 ordering; only used to sort what `list` shows.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn runs(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let b = s.as_bytes();
        for i in 1..=b.len() {
            if i == b.len() || b[i].is_ascii_digit() != b[start].is_ascii_digit() {
                out.push((b[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ra, rb) = (runs(a), runs(b));
    for (x, y) in ra.iter().zip(rb.iter()) {
        let ord = match (x, y) {
            ((true, x), (true, y)) => {
                let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                x.len().cmp(&y.len()).then_with(|| x.cmp(y))
            }
            ((_, x), (_, y)) => x.cmp(y),
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    ra.len().cmp(&rb.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_wheel_is_one_release_and_one_set_of_tags_under_any_spelling() {
        let w = |f: &str| WheelName::parse(f).unwrap();
        let a = w("Foo_Bar-1.0-py3-none-any.whl");
        assert!(a.same_wheel_as(&w("foo_bar-1.0-py3-none-any.whl")));
        assert!(a.same_wheel_as(&w("foo.bar-1.0.0-py3-none-any.whl")));
        assert!(a.same_wheel_as(&w("foo_bar-1.0.0.0-PY3-none-any.whl")));
        // Another release, build or set of tags is another file of the project, as PyPI has.
        assert!(!a.same_wheel_as(&w("foo_bar-1.0.1-py3-none-any.whl")));
        assert!(!a.same_wheel_as(&w("foo_bar-1.0-1-py3-none-any.whl")));
        assert!(!a.same_wheel_as(&w("foo_bar-1.0-cp310-cp310-linux_x86_64.whl")));
        assert!(!a.same_wheel_as(&w("foo_bar-1.0+rocm6.2-py3-none-any.whl")));
        assert!(!w("t-1.0rc1-py3-none-any.whl").same_wheel_as(&w("t-1.0-py3-none-any.whl")));
        assert!(!w("t-10-py3-none-any.whl").same_wheel_as(&w("t-1-py3-none-any.whl")));
    }

    #[test]
    fn members_that_leave_the_install_directory_are_unsafe() {
        for ok in ["a/b.py", "a.dist-info/RECORD", "a/..b/c", "a/b..py"] {
            assert!(is_safe_member(ok), "{ok}");
        }
        for bad in ["../x", "a/../../x", "/etc/x", "\\x", "a\\..\\x", "C:/x", ".."] {
            assert!(!is_safe_member(bad), "{bad}");
        }
    }

    #[test]
    fn normalizes_like_pep_503() {
        assert_eq!(normalize_name("Friendly-Bard"), "friendly-bard");
        assert_eq!(normalize_name("FRIENDLY._-BARD"), "friendly-bard");
        assert_eq!(normalize_name("typing_extensions"), "typing-extensions");
        assert_eq!(normalize_name("torch"), "torch");
    }

    #[test]
    fn parses_versions_leniently_and_normalizes() {
        for (input, norm) in [
            ("2.6.0", "2.6.0"),
            ("2.6.0+rocm6.2.4.gfx1010", "2.6.0+rocm6.2.4.gfx1010"),
            ("v1.0", "1.0"),
            ("1.0-RC1", "1.0rc1"),
            ("1.0alpha", "1.0a0"),
            ("1.0.post2.dev3", "1.0.post2.dev3"),
            ("1.0-1", "1.0.post1"),
            ("1!2.01", "1!2.1"),
            ("1.0+Local_007-x", "1.0+local.7.x"),
            ("2.6.0.dev20240101", "2.6.0.dev20240101"),
        ] {
            assert_eq!(Version::parse(input).map(|v| v.to_string()).as_deref(), Some(norm), "{input}");
        }
        for bad in ["", "abc", "1.0+", "1.0+a..b", "1.0 beta 2", "1..0", "1.0-", "1.0+a/b"] {
            assert!(Version::parse(bad).is_none(), "{bad:?} should not parse");
        }
        let v = Version::parse("2.6.0rc1+rocm6.2.4").unwrap();
        assert_eq!((v.public().as_str(), v.local().as_str()), ("2.6.0rc1", "rocm6.2.4"));
    }

    #[test]
    fn parses_wheel_filenames() {
        let w = WheelName::parse("torch-2.6.0+rocm6.2.4.gfx1010-cp311-cp311-linux_x86_64.whl").unwrap();
        assert_eq!(w.distribution, "torch");
        assert_eq!(w.version, "2.6.0+rocm6.2.4.gfx1010");
        assert_eq!(w.build_tag, None);
        assert_eq!(w.python_tags, ["cp311"]);
        assert_eq!(w.platform_tags, ["linux_x86_64"]);
        let w = WheelName::parse("Typing_Extensions-4.0-1b-py2.py3-none-any.whl").unwrap();
        assert_eq!(w.project(), "typing-extensions");
        assert_eq!(w.build_tag.as_deref(), Some("1b"));
        assert_eq!(w.python_tags, ["py2", "py3"]);
        for bad in [
            "torch-2.6.0-cp311-cp311-linux_x86_64.tar.gz",
            "torch-2.6.0-cp311-linux_x86_64.whl",
            "torch-2.6.0-x-y-cp311-cp311-linux_x86_64.whl",
            "torch-notaversion-cp311-cp311-linux_x86_64.whl",
            "torch-2.6.0-b1-cp311-cp311-linux_x86_64.whl",
            "_torch-2.6.0-cp311-cp311-linux_x86_64.whl",
            "torch-2.6.0-cp311-cp311-linux/x86_64.whl",
            "../x-1.0-py3-none-any.whl",
            "torch-2.6.0-cp311--linux_x86_64.whl",
        ] {
            assert!(WheelName::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn reads_metadata_headers() {
        let raw = b"Metadata-Version: 2.1\nName: Rf_Pure\nVersion: 1.0.0+rocm6.2.4\nRequires-Python: >=3.8\nLicense: MIT\n  continued\n\nName: not-a-header\n".to_vec();
        let m = parse_metadata(raw).unwrap();
        assert_eq!(m.name, "Rf_Pure");
        assert_eq!(m.version, "1.0.0+rocm6.2.4");
        assert_eq!(m.requires_python.as_deref(), Some(">=3.8"));
        let e = parse_metadata(b"Metadata-Version: 2.1\nName: x\n".to_vec()).unwrap_err();
        assert!(e.to_string().contains("no `Version:` field"), "{e}");
    }

    #[test]
    fn natural_order_for_listing() {
        let mut v = vec!["1.10.0", "1.9.0", "1.9.0+rocm6.2.4", "0.1"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["0.1", "1.9.0", "1.9.0+rocm6.2.4", "1.10.0"]);
    }
}

/// Property tests (`PROPTEST_CASES` sets how many cases; `ci/proptest-long.sh` runs many).
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// Wheel filenames from a grammar of their parts, sometimes with odd characters mixed in.
    fn wheel_filename() -> impl Strategy<Value = String> {
        let dist = "[A-Za-z0-9]([A-Za-z0-9._-]{0,6}[A-Za-z0-9])?";
        let version = "v?[0-9]{1,3}(\\.[0-9]{1,3}){0,3}((a|b|rc|c|pre|alpha|beta)[0-9]{0,2})?([.-]post[0-9]{0,2})?(\\.dev[0-9]{0,2})?(\\+[A-Za-z0-9]([A-Za-z0-9._-]{0,6}[A-Za-z0-9])?)?";
        let build = proptest::option::of("[0-9][A-Za-z0-9_.]{0,3}");
        let tags = "[a-z0-9_]{1,6}(\\.[a-z0-9_]{1,6}){0,2}";
        let odd = proptest::option::of((any::<prop::sample::Index>(), "[-._+!/ \\\\\u{0}é❤@]{1,3}"));
        (dist, version, build, tags, tags, tags, any::<bool>(), odd).prop_map(|(d, v, b, py, abi, plat, whl, odd)| {
            let mut parts = vec![d, v];
            parts.extend(b);
            parts.extend([py, abi, plat]);
            let mut s = parts.join("-");
            if whl {
                s.push_str(".whl");
            }
            if let Some((at, junk)) = odd {
                let cut = s.char_indices().map(|(i, _)| i).nth(at.index(s.chars().count())).unwrap_or(0);
                s.insert_str(cut, &junk);
            }
            s
        })
    }

    fn check_name(name: &str) {
        match WheelName::parse(name) {
            Ok(w) => {
                let mut parts = vec![w.distribution.clone(), w.version.clone()];
                parts.extend(w.build_tag.clone());
                parts.extend([w.python_tags.join("."), w.abi_tags.join("."), w.platform_tags.join(".")]);
                assert_eq!(format!("{}.whl", parts.join("-")), name);
                assert!(is_valid_project_name(&w.distribution));
                let norm = w.normalized_version();
                let again = Version::parse(&norm).map(|v| v.to_string());
                assert_eq!(again.as_deref(), Some(norm.as_str()), "normalising `{}` is not idempotent", w.version);
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains(&format!("`{name}`")), "the error does not name `{name}`: {msg}");
            }
        }
    }

    proptest! {
        #[test]
        fn wheel_names_from_a_grammar(name in wheel_filename()) {
            check_name(&name);
        }

        #[test]
        fn wheel_names_from_any_string(name in any::<String>()) {
            check_name(&name);
        }

        #[test]
        fn versions_from_any_string(text in "[0-9vV!.+_a-zA-Z-]{0,24}|\\PC{0,24}") {
            if let Some(v) = Version::parse(&text) {
                let norm = v.to_string();
                prop_assert_eq!(Version::parse(&norm).map(|v| v.to_string()), Some(norm.clone()));
                prop_assert_eq!(format!("{}{}", v.public(), if v.local().is_empty() { String::new() } else { format!("+{}", v.local()) }), norm);
            }
            let _ = natural_cmp(&text, "1.0");
        }

        #[test]
        fn metadata_from_any_bytes(raw in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_metadata(raw);
        }
    }
}
