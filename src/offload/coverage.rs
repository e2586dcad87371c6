//! Coverage: whether the files a recipe installed carry what its `[targets]` declares.
//!
//! - `device-code = ["lib/libx.so", "lib/x/library/*.co"]`: each entry, a path or a glob
//!   (`*` stays inside one directory, `**` crosses them), must match at least one installed
//!   file, and the files it matches must together carry device code for every target the recipe
//!   was built for (a processor matches whatever its features: `gfx1010:xnack-` is gfx1010).
//!   Together, because Tensile ships one code object per target.
//! - `must-contain = { "lib/libx.so" = "text" }`: every file the path or glob matches must
//!   contain the text (MIOpen embeds its kernel sources: a patched kernel leaves its line there).
//!
//! - built in, for every recipe that builds something: no host library or executable asks for an
//!   executable stack ([`exec_stacks`]): glibc 2.41 and later refuse to load such a library.
//!
//! Paths are relative to the recipe's installed tree (the prefix), or, for recipes that make
//! wheels, to the root of each wheel (`torch/lib/libtorch_hip.so`), read in memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

use super::elf::{self, Stack};
use super::source::Source;
use super::{inspect_source, processor, OffloadError};

/// What a recipe declares.
#[derive(Debug, Clone, Copy)]
pub struct CoverageSpec<'a> {
    pub device_code: &'a [String],
    pub must_contain: &'a BTreeMap<String, String>,
}

impl CoverageSpec<'_> {
    pub fn is_empty(&self) -> bool {
        self.device_code.is_empty() && self.must_contain.is_empty()
    }
}

/// Where the installed files are.
#[derive(Debug, Clone)]
pub enum Installed<'a> {
    /// A tree (the recipe's staged prefix).
    Tree(&'a Path),
    /// The wheels the recipe made.
    Wheels(&'a [PathBuf]),
}

/// One declaration checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoverageCheck {
    /// `device-code`, `must-contain`, `provides` or `stack`.
    pub kind: String,
    /// The path or glob as declared (`provides`: the need; `stack`: the file that needs an
    /// executable stack, or how many files were read when none does).
    pub pattern: String,
    /// device-code: the targets required; must-contain: the text.
    pub wants: Vec<String>,
    /// Each file it matched, with the targets found in it (device-code) or whether it holds the
    /// text (must-contain).
    pub files: Vec<CoveredFile>,
    /// device-code: the targets no matched file carries; must-contain: the files without the
    /// text. With no file matched, every wanted thing.
    pub missing: Vec<String>,
    pub ok: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoveredFile {
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<bool>,
}

impl CoverageCheck {
    /// One line for people: what is covered, or what is missing where.
    pub fn describe(&self) -> String {
        match (self.kind.as_str(), self.ok) {
            ("stack", true) => return format!("stack: {} read, none needs an executable stack", self.pattern),
            ("stack", false) => return format!("{}: {}", self.pattern, self.missing.join("; ")),
            _ => {}
        }
        if self.files.is_empty() && self.kind != "provides" {
            return format!("{} `{}`: no installed file matches it", self.kind, self.pattern);
        }
        let files = self.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>();
        let shown = if files.len() > 3 {
            format!("{}, ... ({} files)", files[..3].join(", "), files.len())
        } else {
            files.join(", ")
        };
        match (self.kind.as_str(), self.ok) {
            ("device-code", true) => {
                let verb = if files.len() == 1 { "carries" } else { "carry" };
                format!("device-code `{}`: {} {verb} {}", self.pattern, shown, self.wants.join(", "))
            }
            ("device-code", false) => {
                let mut found: Vec<&str> =
                    self.files.iter().flat_map(|f| f.targets.iter().map(String::as_str)).collect();
                found.sort();
                found.dedup();
                let found = if found.is_empty() { "no GPU code".to_string() } else { found.join(", ") };
                format!(
                    "device-code `{}`: {shown} lack{} {} (found: {found})",
                    self.pattern,
                    if files.len() == 1 { "s" } else { "" },
                    self.missing.join(", ")
                )
            }
            ("provides", true) => format!("provides {}: {shown}", self.pattern),
            ("provides", false) => {
                format!("{} (needed by {}): {}", self.pattern, self.wants.join("; "), self.missing.join("; "))
            }
            (_, true) => format!(
                "must-contain `{}`: {shown} contain{} the text",
                self.pattern,
                if files.len() == 1 { "s" } else { "" }
            ),
            (_, false) => format!(
                "must-contain `{}`: {} do{} not contain `{}`",
                self.pattern,
                self.missing.join(", "),
                if self.missing.len() == 1 { "es" } else { "" },
                self.wants.join("")
            ),
        }
    }
}

/// Every host library and executable installed (a tree's regular files, symlinks not followed;
/// every member of the wheels), each read only as far as its program headers: one `stack` check
/// per file that needs an executable stack, or, when none does, one saying how many were read;
/// none when no file is a host library or executable.
pub fn exec_stacks(installed: &Installed<'_>) -> Result<Vec<CoverageCheck>, OffloadError> {
    let mut read = 0usize;
    let mut out = Vec::new();
    let mut seen = |path: String, stack: Option<Stack>| {
        let Some(stack) = stack else { return };
        read += 1;
        if let Some(problem) = stack.problem() {
            out.push(CoverageCheck {
                kind: "stack".into(),
                pattern: path.clone(),
                wants: Vec::new(),
                files: vec![CoveredFile { path, targets: Vec::new(), contains: None }],
                missing: vec![problem.to_string()],
                ok: false,
            });
        }
    };
    match installed {
        Installed::Tree(root) => {
            for e in walkdir::WalkDir::new(root).min_depth(1).follow_links(false).sort_by_file_name() {
                let e = e.map_err(|e| OffloadError::Io {
                    path: e.path().unwrap_or(root).to_path_buf(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                if !e.file_type().is_file() {
                    continue;
                }
                let io = |source| OffloadError::Io { path: e.path().to_path_buf(), source };
                let stack = std::fs::File::open(e.path()).and_then(|mut f| elf::read_stack(&mut f)).map_err(io)?;
                let rel = e.path().strip_prefix(root).unwrap_or(e.path()).to_string_lossy().replace('\\', "/");
                seen(rel, stack);
            }
        }
        Installed::Wheels(wheels) => {
            for w in *wheels {
                let name = w.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let mut zip = super::open_wheel(w)?;
                for i in 0..zip.len() {
                    let mut member = zip.by_index(i).map_err(|e| OffloadError::File {
                        path: format!("{}!#{i}", w.display()),
                        message: format!("cannot read: {e}"),
                    })?;
                    if member.is_dir() {
                        continue;
                    }
                    let shown = format!("{name}!{}", member.name());
                    let stack = elf::stream_stack(&mut member).map_err(|e| OffloadError::File {
                        path: format!("{}!{}", w.display(), member.name()),
                        message: format!("cannot read: {e}"),
                    })?;
                    seen(shown, stack);
                }
            }
        }
    }
    if out.is_empty() && read > 0 {
        out.push(CoverageCheck {
            kind: "stack".into(),
            pattern: if read == 1 {
                "1 ELF library or executable".into()
            } else {
                format!("{read} ELF libraries and executables")
            },
            wants: Vec::new(),
            files: Vec::new(),
            missing: Vec::new(),
            ok: true,
        });
    }
    Ok(out)
}

/// A path or glob of a declaration, or why it is not one.
pub fn matcher(pattern: &str) -> Result<GlobMatcher, String> {
    if pattern.starts_with('/') || pattern.split('/').any(|c| c == "..") {
        return Err(format!("`{pattern}` must be a relative path inside the installed tree (no leading `/`, no `..`)"));
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("`{pattern}` is not a valid glob: {e}"))
}

/// Checks every declaration of `spec` against the installed files; `required` are the targets
/// built (processors: `gfx1010`).
pub fn check(
    spec: CoverageSpec<'_>,
    required: &[&str],
    installed: &Installed<'_>,
) -> Result<Vec<CoverageCheck>, OffloadError> {
    let mut out = Vec::new();
    for pattern in spec.device_code {
        let m = matcher(pattern).map_err(OffloadError::Malformed)?;
        let mut files = Vec::new();
        read_matching(installed, &m, &mut |path, src| {
            let targets = inspect_source(path, src)?.map(|i| i.targets).unwrap_or_default();
            files.push(CoveredFile { path: path.to_string(), targets, contains: None });
            Ok(())
        })?;
        let missing: Vec<String> = required
            .iter()
            .filter(|t| !files.iter().any(|f| f.targets.iter().any(|ft| processor(ft) == **t)))
            .map(|t| t.to_string())
            .collect();
        let ok = !files.is_empty() && missing.is_empty();
        out.push(CoverageCheck {
            kind: "device-code".into(),
            pattern: pattern.clone(),
            wants: required.iter().map(|t| t.to_string()).collect(),
            files,
            missing,
            ok,
        });
    }
    for (pattern, text) in spec.must_contain {
        let m = matcher(pattern).map_err(OffloadError::Malformed)?;
        let finder = memchr::memmem::Finder::new(text.as_bytes());
        let mut files = Vec::new();
        read_matching(installed, &m, &mut |path, src| {
            let contains = holds(src, &finder)
                .map_err(|e| OffloadError::File { path: path.to_string(), message: format!("cannot read: {e}") })?;
            files.push(CoveredFile { path: path.to_string(), targets: Vec::new(), contains: Some(contains) });
            Ok(())
        })?;
        let missing: Vec<String> = files.iter().filter(|f| f.contains == Some(false)).map(|f| f.path.clone()).collect();
        let ok = !files.is_empty() && missing.is_empty();
        out.push(CoverageCheck {
            kind: "must-contain".into(),
            pattern: pattern.clone(),
            wants: vec![text.clone()],
            files,
            missing: if ok || !missing.is_empty() { missing } else { vec![pattern.clone()] },
            ok,
        });
    }
    Ok(out)
}

/// The installed files `pattern` matches (paths as [`read_matching`] shows them), without
/// reading a tree's files.
pub fn matching(installed: &Installed<'_>, pattern: &str) -> Result<Vec<String>, OffloadError> {
    let m = matcher(pattern).map_err(OffloadError::Malformed)?;
    match installed {
        Installed::Tree(root) => Ok(tree_matches(root, &m)?.into_iter().map(|(rel, _)| rel).collect()),
        Installed::Wheels(_) => {
            let mut out = Vec::new();
            read_matching(installed, &m, &mut |path, _| {
                out.push(path.to_string());
                Ok(())
            })?;
            Ok(out)
        }
    }
}

/// The files below `root` that `m` matches: (path relative to `root`, full path), symlinks to
/// files included, directories (and symlinks to them) left out.
fn tree_matches(root: &Path, m: &GlobMatcher) -> Result<Vec<(String, PathBuf)>, OffloadError> {
    let mut paths = Vec::new();
    // Only below the pattern's literal directories: an installation under `/usr` is not walked
    // whole for `lib/x86_64-linux-gnu/rocblas/*/library/*.co`.
    let pattern = m.glob().glob();
    let start = root.join(literal_dirs(pattern));
    if !start.is_dir() {
        return Ok(paths);
    }
    let walk = walkdir::WalkDir::new(&start).min_depth(1).sort_by_file_name();
    // No deeper than a match can lie: `lib/librocblas.so` reads one folder, not `/usr/lib`.
    let walk = match walk_depth(pattern) {
        Some(d) => walk.max_depth(d),
        None => walk,
    };
    for e in walk {
        let e = e.map_err(|e| OffloadError::Io {
            path: e.path().unwrap_or(root).to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        if e.file_type().is_dir() {
            continue;
        }
        let rel = e.path().strip_prefix(root).unwrap_or(e.path()).to_string_lossy().replace('\\', "/");
        if m.is_match(&rel) && !e.path().is_dir() {
            paths.push((rel, e.into_path()));
        }
    }
    Ok(paths)
}

/// The leading directories of a glob that hold no glob syntax (`lib/x/*/library/*.co` gives
/// `lib/x`): every match lies below them.
pub fn literal_dirs(pattern: &str) -> String {
    let parts: Vec<&str> = pattern.split('/').collect();
    let dirs = &parts[..parts.len().saturating_sub(1)];
    let literal = dirs.iter().take_while(|c| !c.contains(['*', '?', '[', '{', '\\'])).copied().collect::<Vec<_>>();
    literal.join("/")
}

/// How deep below its [`literal_dirs`] a match of `pattern` can lie (`*` never crosses a `/`,
/// [`matcher`]); `None` when any depth can (`**`, or braces that may hold a `/`).
pub fn walk_depth(pattern: &str) -> Option<usize> {
    if pattern.contains("**") || pattern.contains('{') {
        return None;
    }
    let literal = literal_dirs(pattern);
    Some(pattern.split('/').count() - literal.split('/').filter(|p| !p.is_empty()).count())
}

/// Hands every installed file `m` matches to `f`, with the path to show (relative to the tree;
/// `<wheel file name>!<member>` in a wheel). Symlinks in a tree are read through.
fn read_matching(
    installed: &Installed<'_>,
    m: &GlobMatcher,
    f: &mut super::ReadMember<'_>,
) -> Result<(), OffloadError> {
    match installed {
        Installed::Tree(root) => {
            let paths = tree_matches(root, m)?;
            for (rel, path) in paths {
                let mut file = std::fs::File::open(&path).map_err(|source| OffloadError::Io { path, source })?;
                f(&rel, &mut file)?;
            }
            Ok(())
        }
        Installed::Wheels(wheels) => {
            for w in *wheels {
                let name = w.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                super::for_each_member(w, &|n| m.is_match(n), &mut |member, src| f(&format!("{name}!{member}"), src))?;
            }
            Ok(())
        }
    }
}

/// Whether `src` holds what `finder` looks for, read a piece at a time (the end of each piece
/// kept, so a text cut by a piece's end is found).
fn holds(src: &mut dyn Source, finder: &memchr::memmem::Finder<'_>) -> std::io::Result<bool> {
    let keep = finder.needle().len().saturating_sub(1);
    let mut buf = vec![0u8; (1 << 20) + keep];
    let mut kept = 0;
    src.seek(std::io::SeekFrom::Start(0))?;
    loop {
        let got = src.read(&mut buf[kept..])?;
        let end = kept + got;
        if finder.find(&buf[..end]).is_some() {
            return Ok(true);
        }
        if got == 0 {
            return Ok(false);
        }
        kept = keep.min(end);
        buf.copy_within(end - kept..end, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(targets: &[&str]) -> Vec<u8> {
        let entries: Vec<(String, Vec<u8>)> =
            targets.iter().map(|t| (format!("hipv4-amdgcn-amd-amdhsa--{t}"), vec![1u8; 8])).collect();
        super::super::props::elf(62, 0, 0, 0, &[(".hip_fatbin", &super::super::props::plain_bundle(&entries))])
    }

    #[test]
    fn device_code_names_the_file_and_the_missing_target() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("lib/k")).unwrap();
        std::fs::write(d.path().join("lib/libx.so.1"), lib(&["gfx1010:xnack-"])).unwrap();
        std::os::unix::fs::symlink("libx.so.1", d.path().join("lib/libx.so")).unwrap();
        std::fs::write(d.path().join("lib/k/a-gfx1010.co"), super::super::props::elf(224, 0x133, 64, 2, &[])).unwrap();
        std::fs::write(d.path().join("lib/k/a-gfx1030.co"), super::super::props::elf(224, 0x136, 64, 2, &[])).unwrap();
        let device_code = vec!["lib/libx.so".to_string(), "lib/k/*.co".to_string(), "lib/none*.so".to_string()];
        let must_contain = BTreeMap::from([("lib/libx.so.1".to_string(), "amdhsa--gfx1010".to_string())]);
        let spec = CoverageSpec { device_code: &device_code, must_contain: &must_contain };
        let checks = check(spec, &["gfx1010", "gfx1030"], &Installed::Tree(d.path())).unwrap();
        assert!(!checks[0].ok);
        assert_eq!(checks[0].missing, ["gfx1030"]);
        let line = checks[0].describe();
        assert!(line.contains("lib/libx.so lacks gfx1030 (found: gfx1010:xnack-)"), "{line}");
        assert!(checks[1].ok, "{}", checks[1].describe());
        assert_eq!(checks[1].files.len(), 2);
        assert!(!checks[2].ok);
        assert!(checks[2].describe().contains("no installed file matches"), "{}", checks[2].describe());
        assert!(checks[3].ok, "{}", checks[3].describe());
        let must_contain = BTreeMap::from([("lib/libx.so".to_string(), "MIO_BN_GFX101X".to_string())]);
        let spec = CoverageSpec { device_code: &[], must_contain: &must_contain };
        let c = &check(spec, &[], &Installed::Tree(d.path())).unwrap()[0];
        assert!(!c.ok);
        assert!(c.describe().contains("lib/libx.so does not contain `MIO_BN_GFX101X`"), "{}", c.describe());
    }

    #[test]
    fn exec_stacks_names_each_file_that_needs_one_in_a_tree_and_in_wheels() {
        use super::super::props::with_program_headers;
        let (gnu_stack, load) = (object::elf::PT_GNU_STACK, (1, 5));
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("lib/k")).unwrap();
        std::fs::create_dir_all(d.path().join("bin")).unwrap();
        let lib = |stack: &[(u32, u32)]| [&[load], stack].concat();
        std::fs::write(d.path().join("lib/libok.so.1"), with_program_headers(2, 3, 62, 0, &lib(&[(gnu_stack, 6)])))
            .unwrap();
        std::fs::write(d.path().join("bin/tool"), with_program_headers(2, 2, 62, 0, &lib(&[(gnu_stack, 6)]))).unwrap();
        std::os::unix::fs::symlink("libok.so.1", d.path().join("lib/libok.so")).unwrap();
        std::fs::write(d.path().join("lib/k/a.co"), super::super::props::elf(224, 0x133, 64, 2, &[])).unwrap();
        std::fs::write(d.path().join("lib/x.o"), with_program_headers(2, 1, 62, 0, &[])).unwrap();
        std::fs::write(d.path().join("lib/notes.txt"), "hello").unwrap();
        let checks = exec_stacks(&Installed::Tree(d.path())).unwrap();
        assert_eq!(checks.len(), 1, "{checks:?}");
        assert!(checks[0].ok);
        // The symlink is not read twice; the code object, the object and the text not at all.
        assert_eq!(checks[0].describe(), "stack: 2 ELF libraries and executables read, none needs an executable stack");

        std::fs::write(d.path().join("lib/libexec.so"), with_program_headers(2, 3, 62, 0, &lib(&[(gnu_stack, 7)])))
            .unwrap();
        std::fs::write(d.path().join("lib/libbare.so"), with_program_headers(2, 3, 62, 0, &lib(&[]))).unwrap();
        let checks = exec_stacks(&Installed::Tree(d.path())).unwrap();
        let lines: Vec<String> = checks.iter().map(|c| c.describe()).collect();
        assert_eq!(
            lines,
            [
                "lib/libbare.so: has no PT_GNU_STACK header: glibc 2.41+ treats it as needing an executable stack",
                "lib/libexec.so: needs an executable stack (PT_GNU_STACK RWE): glibc 2.41+ refuses to load it",
            ]
        );
        assert!(checks.iter().all(|c| !c.ok && c.kind == "stack"));

        // In a wheel: every member is read, as it is decompressed.
        use std::io::Write;
        let wheel = d.path().join("demo-1.0-cp311-cp311-linux_x86_64.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        zip.add_directory("demo/", opts).unwrap();
        zip.start_file("demo/__init__.py", opts).unwrap();
        zip.write_all(b"").unwrap();
        zip.start_file("demo/_C.cpython-311-x86_64-linux-gnu.so", opts).unwrap();
        zip.write_all(&with_program_headers(2, 3, 62, 3000, &lib(&[(gnu_stack, 7)]))).unwrap();
        zip.start_file("demo/bin/helper", opts).unwrap();
        zip.write_all(&with_program_headers(2, 3, 62, 0, &lib(&[(gnu_stack, 6)]))).unwrap();
        zip.finish().unwrap();
        let wheels = [wheel];
        let checks = exec_stacks(&Installed::Wheels(&wheels)).unwrap();
        assert_eq!(checks.len(), 1, "{checks:?}");
        assert_eq!(checks[0].pattern, "demo-1.0-cp311-cp311-linux_x86_64.whl!demo/_C.cpython-311-x86_64-linux-gnu.so");
        // A tree without host ELF files has no stack entry at all.
        let empty = tempfile::tempdir().unwrap();
        std::fs::write(empty.path().join("h.h"), "#define X 1").unwrap();
        assert!(exec_stacks(&Installed::Tree(empty.path())).unwrap().is_empty());
    }

    #[test]
    fn bad_patterns_are_named() {
        assert!(matcher("/abs").unwrap_err().contains("relative"));
        assert!(matcher("a/../b").unwrap_err().contains("relative"));
        assert!(matcher("a/[").unwrap_err().contains("not a valid glob"));
        assert!(matcher("lib/*.so").unwrap().is_match("lib/x.so"));
        assert!(!matcher("lib/*.so").unwrap().is_match("lib/sub/x.so"));
        assert!(matcher("lib/**/*.co").unwrap().is_match("lib/a/b/x.co"));
        assert!(matcher("lib/x/*.{co,hsaco}").unwrap().is_match("lib/x/k-gfx1010.hsaco"));
    }
}
