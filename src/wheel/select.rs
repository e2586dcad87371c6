//! Which wheel file of a project's index page a stack takes: the one whose version is the one
//! asked for and whose tags a CPython of the stack's version installs on Linux x86_64 with the
//! stack's glibc floor, the most specific first, as pip ranks tags (`packaging.tags`): the
//! interpreter and ABI (`cp312-cp312`, then `abi3`, then `none`, then `py3`), then the platform
//! (the newest `manylinux_2_N` at or below the floor, down to `manylinux1`, then
//! `linux_x86_64`, then `any`). A wildcard (`==2.9.*`) takes the newest release it matches, as
//! pip does (a pre-release or dev release only when no final release matches); two files of that release with the best rank (two local labels, or two builds)
//! are an ambiguity, never a guess.
//!
//! Pure: `lock` (`source::index_page::resolve_wheel`) reads the page and records the
//! file this picks.

use super::{Version, WheelName};

/// The version a recipe asks for: `2.9.1` or `==2.9.1` (any local label, as PEP 440's `==`
/// without one: `2.9.1+rocm7.10.0` matches), `2.9.1+rocm7.10.0` (that label only), or
/// `==2.9.*` (every release starting with 2.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSpec {
    Exact(Version),
    Prefix(Vec<String>),
}

impl VersionSpec {
    pub fn parse(text: &str) -> Result<VersionSpec, String> {
        let t = text.trim();
        let t = t.strip_prefix("==").unwrap_or(t).trim();
        if let Some(prefix) = t.strip_suffix(".*") {
            let parts: Vec<String> = prefix.split('.').map(super::trim_zeros).collect();
            if prefix.is_empty() || !prefix.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
                return Err(format!("`{text}`: a wildcard version is release numbers then `.*` (`==2.9.*`)"));
            }
            return Ok(VersionSpec::Prefix(parts));
        }
        Version::parse(t).map(VersionSpec::Exact).ok_or_else(|| {
            format!("`{text}` is not a PEP 440 version (`2.9.1`, `==2.9.1`, `2.9.1+rocm7.10.0` or `==2.9.*`)")
        })
    }

    /// Whether a file's version is the one asked for.
    pub fn matches(&self, v: &Version) -> bool {
        match self {
            VersionSpec::Exact(want) if want.local.is_empty() => {
                let mut public = v.clone();
                public.local.clear();
                want.equivalent(&public)
            }
            VersionSpec::Exact(want) => want.equivalent(v),
            VersionSpec::Prefix(p) => v.epoch == "0" && v.release.len() >= p.len() && v.release[..p.len()] == p[..],
        }
    }
}

/// Epoch, release, phase, its number, dev number: [`public_key`].
type PublicKey = (u64, Vec<u64>, u8, u64, u64);

/// The order of public versions, for a wildcard's newest release: the release numbers (trailing
/// zeros do not count), then a dev release before a pre-release before the final before a post.
fn public_key(v: &Version) -> PublicKey {
    let num = |s: &str| s.parse::<u64>().unwrap_or(u64::MAX);
    let mut release: Vec<u64> = v.release.iter().map(|r| num(r)).collect();
    while release.len() > 1 && release.last() == Some(&0) {
        release.pop();
    }
    let (phase, n) = match (&v.pre, &v.post, &v.dev) {
        (None, None, Some(d)) => (0, num(d)),
        (Some((k, n)), _, _) => (1 + ["a", "b", "rc"].iter().position(|x| x == k).unwrap_or(0) as u8, num(n)),
        (None, Some(p), _) => (5, num(p)),
        (None, None, None) => (4, 0),
    };
    (num(&v.epoch), release, phase, n, v.dev.as_deref().map(num).unwrap_or(u64::MAX))
}

/// `(3, 12)` of `3.12`.
pub fn parse_python(text: &str) -> Option<(u32, u32)> {
    let (a, b) = text.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Whether CPython `py` satisfies a file's `Requires-Python` (PEP 503's `data-requires-python`,
/// PEP 440 clauses: `>=3.9, <3.14`, `!=3.0.*`, `~=3.8`, `===3.11`), the stack's `3.11` taken as
/// the version 3.11, as `packaging` takes it. `None` when a clause is unreadable (pip then
/// ignores the attribute).
pub fn python_satisfies(spec: &str, py: (u32, u32)) -> Option<bool> {
    let have = Version::parse(&format!("{}.{}", py.0, py.1))?;
    let key = public_key(&have);
    let mut all = true;
    for clause in spec.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let (op, rest) = ["===", "~=", "==", "!=", "<=", ">=", "<", ">"]
            .iter()
            .find_map(|op| clause.strip_prefix(op).map(|r| (*op, r.trim())))?;
        if op == "===" {
            all &= rest == format!("{}.{}", py.0, py.1);
            continue;
        }
        if let Some(prefix) = rest.strip_suffix(".*").filter(|_| op == "==" || op == "!=") {
            let want: Vec<u64> = prefix.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
            let got: Vec<u64> = (0..want.len()).map(|i| [py.0, py.1].get(i).map_or(0, |n| u64::from(*n))).collect();
            all &= (got == want) == (op == "==");
            continue;
        }
        let want = Version::parse(rest)?;
        if !want.local.is_empty() {
            return None;
        }
        let wk = public_key(&want);
        all &= match op {
            "==" => key == wk,
            "!=" => key != wk,
            "<=" => key <= wk,
            ">=" => key >= wk,
            "<" => key < wk,
            ">" => key > wk,
            _ => {
                // `~=3.8` is `>=3.8, ==3.*`; it needs two release numbers.
                if want.release.len() < 2 || key < wk {
                    false
                } else {
                    let n = want.release.len() - 1;
                    let got = [u64::from(py.0), u64::from(py.1)];
                    (0..n)
                        .all(|i| got.get(i).copied().unwrap_or(0) == want.release[i].parse::<u64>().unwrap_or(u64::MAX))
                }
            }
        };
    }
    Some(all)
}

/// `(2, 28)` of `2.28`.
pub fn parse_glibc(text: &str) -> Option<(u32, u32)> {
    parse_python(text)
}

/// The glibc a platform tag needs on Linux x86_64 (`None`: not a Linux x86_64 platform);
/// `linux_x86_64` and `any` need none.
fn platform_rank(tag: &str, glibc: (u32, u32)) -> Option<u32> {
    let tag = tag.to_ascii_lowercase();
    let needs = match tag.as_str() {
        "any" => return Some(0),
        "linux_x86_64" => return Some(1),
        "manylinux1_x86_64" => (2, 5),
        "manylinux2010_x86_64" => (2, 12),
        "manylinux2014_x86_64" => (2, 17),
        t => {
            let rest = t.strip_prefix("manylinux_")?.strip_suffix("_x86_64")?;
            let (a, b) = rest.split_once('_')?;
            (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)
        }
    };
    // Newer floors rank higher: 2 + the minor (a major other than 2 does not exist for glibc).
    (needs.0 == 2 && needs <= glibc).then_some(2 + needs.1)
}

/// The rank of an interpreter/ABI pair for CPython `py` (higher is more specific).
fn python_rank(python: &str, abi: &str, py: (u32, u32)) -> Option<u32> {
    let (python, abi) = (python.to_ascii_lowercase(), abi.to_ascii_lowercase());
    let cp = format!("cp{}{}", py.0, py.1);
    match (python.as_str(), abi.as_str()) {
        (p, a) if p == cp && a == cp => Some(5),
        (p, "abi3") => {
            let minor = p.strip_prefix(&format!("cp{}", py.0))?.parse::<u32>().ok()?;
            (minor <= py.1).then_some(4)
        }
        (p, "none") if p == cp => Some(3),
        (p, "none") if p == format!("py{}{}", py.0, py.1) => Some(2),
        (p, "none") if p == format!("py{}", py.0) => Some(1),
        _ => None,
    }
}

/// How well CPython `py` on Linux x86_64 with glibc `glibc` fits the wheel (`None`: not at all),
/// over every tag its compressed tag sets expand to.
pub fn rank(name: &WheelName, py: (u32, u32), glibc: (u32, u32)) -> Option<(u32, u32)> {
    let mut best = None;
    for p in &name.python_tags {
        for a in &name.abi_tags {
            let Some(pr) = python_rank(p, a, py) else { continue };
            for pl in &name.platform_tags {
                if let Some(plr) = platform_rank(pl, glibc) {
                    best = best.max(Some((pr, plr)));
                }
            }
        }
    }
    best
}

/// Why no file was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickError {
    /// No file of the project has the version asked for.
    NoVersion,
    /// Files have the version, but none installs on the stack's Python and platform.
    NoTags { of_version: Vec<String> },
    /// Several files of the best rank.
    Ambiguous { candidates: Vec<String> },
}

/// The one file of `files` (links of the project's page, any names) for `project`, `version`,
/// Python `py` and glibc floor `glibc`: the index into `files`.
pub fn pick(
    files: &[String],
    project: &str,
    version: &VersionSpec,
    py: (u32, u32),
    glibc: (u32, u32),
) -> Result<usize, PickError> {
    let project = super::normalize_name(project);
    let mut of_version = Vec::new();
    let mut ranked: Vec<(usize, PublicKey, (u32, u32))> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let Ok(name) = WheelName::parse(f) else { continue };
        let Some(v) = Version::parse(&name.version) else { continue };
        if name.project() != project || !version.matches(&v) {
            continue;
        }
        of_version.push(f.clone());
        if let Some(r) = rank(&name, py, glibc) {
            ranked.push((i, public_key(&v), r));
        }
    }
    // A wildcard takes a pre-release (`3.7.1rc1`) or a dev release only when no final release
    // matches, as pip does (packaging's `SpecifierSet.filter`); an exact version asks for what
    // it names.
    let is_final = |(_, (_, _, phase, _, _), _): &(usize, PublicKey, (u32, u32))| *phase >= 4;
    if matches!(version, VersionSpec::Prefix(_)) && ranked.iter().any(is_final) {
        ranked.retain(is_final);
    }
    let Some(newest) = ranked.iter().map(|(_, v, _)| v.clone()).max() else {
        return Err(if of_version.is_empty() { PickError::NoVersion } else { PickError::NoTags { of_version } });
    };
    ranked.retain(|(_, v, _)| *v == newest);
    let best = ranked.iter().map(|(_, _, r)| *r).max().unwrap_or_default();
    let top: Vec<usize> = ranked.iter().filter(|(_, _, r)| *r == best).map(|(i, _, _)| *i).collect();
    match top.as_slice() {
        [one] => Ok(*one),
        _ => Err(PickError::Ambiguous { candidates: top.iter().map(|i| files[*i].clone()).collect() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requires_python_as_packaging_reads_it() {
        let on = |spec: &str, py| python_satisfies(spec, py);
        assert_eq!(on(">=3.13", (3, 11)), Some(false));
        assert_eq!(on(">=3.9, <3.14", (3, 11)), Some(true));
        assert_eq!(on(">=3.9,<3.11", (3, 11)), Some(false));
        assert_eq!(on("!=3.0.*,!=3.1.*,>=2.7", (3, 11)), Some(true));
        assert_eq!(on("!=3.11.*", (3, 11)), Some(false));
        assert_eq!(on("==3.*", (3, 11)), Some(true));
        assert_eq!(on("~=3.8", (3, 11)), Some(true));
        assert_eq!(on("~=3.8", (4, 0)), Some(false));
        assert_eq!(on("~=3.12.1", (3, 12)), Some(false));
        assert_eq!(on("==3.11.0", (3, 11)), Some(true));
        assert_eq!(on(">3.11", (3, 11)), Some(false));
        assert_eq!(on(">=3.13.0a1", (3, 11)), Some(false));
        assert_eq!(on("<=3.11", (3, 11)), Some(true));
        assert_eq!(on("", (3, 11)), Some(true));
        assert_eq!(on(">=three", (3, 11)), None);
        assert_eq!(on("3.11", (3, 11)), None);
    }

    fn files() -> Vec<String> {
        [
            "torch-2.9.1+rocm7.10.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch-2.9.1+rocm7.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torch-2.9.1+rocm7.10.0-cp312-cp312-manylinux_2_34_x86_64.whl",
            "torch-2.9.1+rocm7.10.0-cp312-cp312-win_amd64.whl",
            "torch-2.9.1+rocm7.10.0-cp312-cp312-linux_x86_64.whl",
            "torch-2.8.0+rocm7.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torch-2.10.0+rocm7.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torchvision-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torch-2.9.1.tar.gz",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn the_most_specific_file_of_the_version_for_the_python_and_glibc() {
        let f = files();
        let v = VersionSpec::parse("2.9.1").unwrap();
        // glibc 2.28: the 2_34 file needs a newer one; manylinux beats linux_x86_64.
        assert_eq!(pick(&f, "torch", &v, (3, 12), (2, 28)), Ok(2 - 1));
        // glibc 2.36: the newer manylinux floor is the more specific.
        assert_eq!(pick(&f, "Torch", &v, (3, 12), (2, 36)), Ok(2));
        assert_eq!(pick(&f, "torch", &v, (3, 11), (2, 28)), Ok(0));
        // glibc 2.17: only linux_x86_64 is left.
        assert_eq!(pick(&f, "torch", &v, (3, 12), (2, 17)), Ok(4));
        assert_eq!(pick(&f, "torch", &v, (3, 10), (2, 28)), Err(PickError::NoTags { of_version: f[..5].to_vec() }));
        assert_eq!(
            pick(&f, "torch", &VersionSpec::parse("2.9.2").unwrap(), (3, 12), (2, 28)),
            Err(PickError::NoVersion)
        );
        assert_eq!(pick(&f, "torch", &VersionSpec::parse("==2.10.*").unwrap(), (3, 12), (2, 28)), Ok(6));
        // A wildcard takes the newest release it matches (2.10.0 is newer than 2.9.1).
        assert_eq!(pick(&f, "torch", &VersionSpec::parse("==2.*").unwrap(), (3, 12), (2, 28)), Ok(6));
        let pre: Vec<String> =
            ["t-3.7.0rc1-py3-none-any.whl", "t-3.7.0-py3-none-any.whl", "t-3.7.0.post1-py3-none-any.whl"]
                .map(String::from)
                .to_vec();
        assert_eq!(pick(&pre[..2], "t", &VersionSpec::parse("3.7.*").unwrap(), (3, 12), (2, 28)), Ok(1));
        assert_eq!(pick(&pre, "t", &VersionSpec::parse("3.7.*").unwrap(), (3, 12), (2, 28)), Ok(2));
        // A newer pre-release or dev release is not taken while a final release matches.
        let newer_pre: Vec<String> =
            ["t-3.7.0-py3-none-any.whl", "t-3.7.1rc1-py3-none-any.whl", "t-3.7.2.dev3-py3-none-any.whl"]
                .map(String::from)
                .to_vec();
        assert_eq!(pick(&newer_pre, "t", &VersionSpec::parse("==3.7.*").unwrap(), (3, 12), (2, 28)), Ok(0));
        assert_eq!(pick(&newer_pre[1..], "t", &VersionSpec::parse("==3.7.*").unwrap(), (3, 12), (2, 28)), Ok(1));
        assert_eq!(pick(&newer_pre, "t", &VersionSpec::parse("3.7.1rc1").unwrap(), (3, 12), (2, 28)), Ok(1));
        assert_eq!(
            pick(&f, "torch", &VersionSpec::parse("==2.9.1+rocm7.9.0").unwrap(), (3, 12), (2, 28)),
            Err(PickError::NoVersion),
            "a local label asked for must be the file's"
        );
    }

    #[test]
    fn two_files_of_the_best_rank_are_ambiguous() {
        let f: Vec<String> = [
            "torch-2.9.1+rocm7.9.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torch-2.9.1+rocm7.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torch-2.9.1+rocm7.10.0-py3-none-any.whl",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            pick(&f, "torch", &VersionSpec::parse("2.9.1").unwrap(), (3, 12), (2, 28)),
            Err(PickError::Ambiguous { candidates: f[..2].to_vec() })
        );
        // The label settles it.
        assert_eq!(pick(&f, "torch", &VersionSpec::parse("2.9.1+ROCm7.10.0").unwrap(), (3, 12), (2, 28)), Ok(1));
    }

    #[test]
    fn interpreter_and_abi_rank_before_the_platform() {
        let f: Vec<String> = [
            "x-1.0-py3-none-any.whl",
            "x-1.0-cp39-abi3-manylinux2014_x86_64.whl",
            "x-1.0-cp312-cp312-linux_x86_64.whl",
            "x-1.0-cp313-abi3-manylinux2014_x86_64.whl",
        ]
        .map(String::from)
        .to_vec();
        let v = VersionSpec::parse("1").unwrap();
        assert_eq!(pick(&f, "x", &v, (3, 12), (2, 28)), Ok(2));
        assert_eq!(pick(&f, "x", &v, (3, 11), (2, 28)), Ok(1));
        assert_eq!(pick(&f[..1], "x", &v, (3, 11), (2, 28)), Ok(0));
        assert!(VersionSpec::parse("==2.x.*").is_err() && VersionSpec::parse("latest").is_err());
    }
}
