//! Prebuilt wheels whose libraries ask for an executable stack, which glibc 2.41 and later refuse
//! to `dlopen` (PyTorch 1.13.1+rocm5.2's `libamdhip64.so`, for one): the copy rocmforge publishes
//! has the request cleared in each such library ([`crate::offload::elf::clear_exec_stack`]) and
//! says so in its version, a local label segment [`LABEL`] (`1.13.1+rocm5.2` becomes
//! `1.13.1+rocm5.2.noexecstack`). The `.dist-info` (and `.data`) folder and METADATA's `Version`
//! follow the new version and RECORD is rewritten with the new hashes, so pip, uv and
//! `python -m wheel unpack` take it as any other wheel. Every other member is copied unchanged
//! (its bytes, name, order and permissions). The download itself is left as it is: the lock file
//! keeps pinning its digest.

use std::path::{Path, PathBuf};

use super::WheelName;
use crate::offload::elf;

/// The local version label segment of a rewritten wheel.
pub const LABEL: &str = "noexecstack";

#[derive(Debug, thiserror::Error)]
pub enum ExecStackError {
    #[error("cannot read wheel {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("cannot write wheel {path}: {message}")]
    Write { path: PathBuf, message: String },
    #[error("{wheel}: {member} {why}; it cannot be made loadable on glibc 2.41+ by clearing a flag")]
    Unfixable { wheel: String, member: String, why: &'static str },
}

/// What [`clear`] did to one wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleared {
    /// The rewritten wheel (beside the original, which is removed).
    pub wheel: PathBuf,
    /// The original file name.
    pub original: String,
    /// The members whose request was cleared.
    pub members: Vec<String>,
}

/// The members of `wheel` that ask for an executable stack (or have no `PT_GNU_STACK`), read
/// as far as their program headers.
fn needing(wheel: &Path) -> Result<Vec<String>, ExecStackError> {
    let read = |message: String| ExecStackError::Read { path: wheel.to_path_buf(), message };
    let mut zip = open(wheel)?;
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let mut m = zip.by_index(i).map_err(|e| read(e.to_string()))?;
        if m.is_dir() {
            continue;
        }
        let name = m.name().to_string();
        let stack = elf::stream_stack(&mut m).map_err(|e| read(format!("{name}: {e}")))?;
        if stack.and_then(elf::Stack::problem).is_some() {
            out.push(name);
        }
    }
    Ok(out)
}

/// Rewrites `wheel` (in its folder) when a library in it asks for an executable stack, and
/// removes the original; `None` when none does (the wheel is left byte for byte). On an error
/// the original is left as it was and nothing else is.
pub fn clear(wheel: &Path) -> Result<Option<Cleared>, ExecStackError> {
    let members = needing(wheel)?;
    if members.is_empty() {
        return Ok(None);
    }
    let filename = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let read = |message: String| ExecStackError::Read { path: wheel.to_path_buf(), message };
    let name = WheelName::parse(&filename).map_err(|e| read(e.to_string()))?;
    let version = labelled(&name.version);
    let new_name = filename.replacen(&format!("-{}-", name.version), &format!("-{version}-"), 1);
    let out_path = wheel.with_file_name(&new_name);
    let write = |message: String| ExecStackError::Write { path: out_path.clone(), message };

    let names: Vec<String> = open(wheel)?.file_names().map(str::to_string).collect();
    let dist_info = names
        .iter()
        .find_map(|n| n.strip_suffix("/METADATA").filter(|d| d.ends_with(".dist-info") && !d.contains('/')))
        .ok_or_else(|| read("no *.dist-info/METADATA".into()))?
        .to_string();
    let stem = dist_info.trim_end_matches(".dist-info");
    let base = stem.rsplit_once('-').map(|(b, _)| b).unwrap_or(stem);
    let (old_stem, new_stem) = (stem.to_string(), format!("{base}-{version}"));
    let rename = |n: &str| -> String {
        for suffix in [".dist-info/", ".data/"] {
            if let Some(rest) = n.strip_prefix(&format!("{old_stem}{suffix}")) {
                return format!("{new_stem}{suffix}{rest}");
            }
        }
        n.to_string()
    };
    let mut edit = |old: &str, bytes: &[u8]| -> Result<Option<Vec<u8>>, ExecStackError> {
        if members.iter().any(|m| m == old) {
            let mut bytes = bytes.to_vec();
            elf::clear_exec_stack(&mut bytes).map_err(|why| ExecStackError::Unfixable {
                wheel: filename.clone(),
                member: old.to_string(),
                why,
            })?;
            return Ok(Some(bytes));
        }
        Ok((old == format!("{dist_info}/METADATA")).then(|| with_version(bytes, &version)))
    };
    let rewritten = super::rewrite::rewrite(wheel, &out_path, &format!("{new_stem}.dist-info"), &rename, &mut edit)
        .map_err(|e| match e {
            super::rewrite::RewriteError::Read { message, .. } => read(message),
            super::rewrite::RewriteError::Write { message, .. } => write(message),
        })?;
    rewritten?;
    std::fs::remove_file(wheel).map_err(|e| read(format!("cannot remove the original: {e}")))?;
    Ok(Some(Cleared { wheel: out_path, original: filename, members }))
}

/// `1.13.1+rocm5.2` → `1.13.1+rocm5.2.noexecstack`; `2.0` → `2.0+noexecstack`.
fn labelled(version: &str) -> String {
    match version.contains('+') {
        true => format!("{version}.{LABEL}"),
        false => format!("{version}+{LABEL}"),
    }
}

/// Does this wheel file name carry the label (a rewritten copy)?
pub fn is_labelled(filename: &str) -> bool {
    WheelName::parse(filename)
        .is_ok_and(|w| w.version.split_once('+').is_some_and(|(_, local)| local.split('.').any(|s| s == LABEL)))
}

fn open(wheel: &Path) -> Result<zip::ZipArchive<std::io::BufReader<std::fs::File>>, ExecStackError> {
    let read = |message: String| ExecStackError::Read { path: wheel.to_path_buf(), message };
    let f = std::fs::File::open(wheel).map_err(|e| read(e.to_string()))?;
    zip::ZipArchive::new(std::io::BufReader::new(f)).map_err(|e| read(format!("not a readable wheel (zip): {e}")))
}

/// METADATA with its `Version:` header set to `version` (the rest byte for byte).
fn with_version(metadata: &[u8], version: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(metadata);
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_headers = true;
    for line in text.split_inclusive('\n') {
        if in_headers && line.trim().is_empty() {
            in_headers = false;
        }
        if in_headers && line.to_ascii_lowercase().starts_with("version:") {
            let end = if line.ends_with("\r\n") { "\r\n" } else { "\n" };
            out.push_str(&format!("Version: {version}{end}"));
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_joins_the_local_version() {
        assert_eq!(labelled("1.13.1+rocm5.2"), "1.13.1+rocm5.2.noexecstack");
        assert_eq!(labelled("2.0"), "2.0+noexecstack");
        assert!(is_labelled("torch-1.13.1+rocm5.2.noexecstack-cp310-cp310-linux_x86_64.whl"));
        assert!(!is_labelled("torch-1.13.1+rocm5.2-cp310-cp310-linux_x86_64.whl"));
        assert!(!is_labelled("noexecstack-1.0-py3-none-any.whl"));
    }

    #[test]
    fn metadata_version_is_replaced_in_the_headers_only() {
        let m = b"Metadata-Version: 2.1\r\nName: torch\r\nVersion: 1.13.1+rocm5.2\r\n\r\nVersion: 1 in the text\r\n";
        let got = String::from_utf8(with_version(m, "1.13.1+rocm5.2.noexecstack")).unwrap();
        assert_eq!(
            got,
            "Metadata-Version: 2.1\r\nName: torch\r\nVersion: 1.13.1+rocm5.2.noexecstack\r\n\r\nVersion: 1 in the text\r\n"
        );
    }
}
