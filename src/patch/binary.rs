//! `GIT binary patch` hunks, as `git diff --binary` writes them and `git apply` applies them:
//! lines of base85 holding zlib-deflated data, either the whole new file (`literal N`) or a git
//! delta against the old file (`delta N`), N being the inflated size; an optional second hunk is
//! the reverse change. The `index OLD..NEW` line's full blob ids are checked before and after,
//! as git does.

use std::io::Read;

/// One hunk, inflated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinaryHunk {
    /// The whole file.
    Literal(Vec<u8>),
    /// Copy and insert instructions against the old file.
    Delta(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryPatch {
    pub forward: BinaryHunk,
    pub reverse: Option<BinaryHunk>,
}

const ALPHABET: &[u8; 85] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// One data line (without its end of line): a length character (`A`-`Z`: 1-26 bytes, `a`-`z`:
/// 27-52), then 5 base85 characters per 4 bytes.
fn decode_line(line: &[u8]) -> Result<Vec<u8>, String> {
    let (&lc, rest) = line.split_first().ok_or("an empty data line")?;
    let len = match lc {
        b'A'..=b'Z' => (lc - b'A') as usize + 1,
        b'a'..=b'z' => (lc - b'a') as usize + 27,
        _ => return Err(format!("`{}` is not a line-length character", lc as char)),
    };
    if rest.len() != len.div_ceil(4) * 5 {
        return Err(format!("a line of {len} bytes needs {} characters, it has {}", len.div_ceil(4) * 5, rest.len()));
    }
    let mut out = Vec::with_capacity(len + 3);
    for group in rest.chunks(5) {
        let mut acc: u64 = 0;
        for &c in group {
            let d = ALPHABET.iter().position(|&a| a == c).ok_or_else(|| format!("`{}` is not base85", c as char))?;
            acc = acc * 85 + d as u64;
        }
        let word = u32::try_from(acc).map_err(|_| "a base85 group overflows 32 bits".to_string())?;
        out.extend_from_slice(&word.to_be_bytes());
    }
    out.truncate(len);
    Ok(out)
}

/// Parses the hunks following a `GIT binary patch` line at `lines[*i]`; `*i` ends past them.
/// Errors carry the 1-based line they are about.
pub(super) fn parse_binary(lines: &[&[u8]], i: &mut usize) -> Result<BinaryPatch, (usize, String)> {
    let forward = parse_hunk(lines, i)?
        .ok_or_else(|| (*i + 1, "`GIT binary patch` is not followed by `literal N` or `delta N`".to_string()))?;
    let reverse = parse_hunk(lines, i)?;
    Ok(BinaryPatch { forward, reverse })
}

fn parse_hunk(lines: &[&[u8]], i: &mut usize) -> Result<Option<BinaryHunk>, (usize, String)> {
    let Some(header) = lines.get(*i).map(|l| super::parse::trim_eol(l)) else { return Ok(None) };
    let header_line = *i + 1;
    let (delta, size) = if let Some(n) = header.strip_prefix(b"literal ") {
        (false, n)
    } else if let Some(n) = header.strip_prefix(b"delta ") {
        (true, n)
    } else {
        return Ok(None);
    };
    let size: u64 = std::str::from_utf8(size)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| (header_line, format!("bad binary hunk size in `{}`", String::from_utf8_lossy(header))))?;
    *i += 1;
    let mut deflated = Vec::new();
    loop {
        let Some(l) = lines.get(*i) else {
            return Err((*i, "the binary hunk ends without its blank line".into()));
        };
        let l = super::parse::trim_eol(l);
        *i += 1;
        if l.is_empty() {
            break;
        }
        deflated.extend(decode_line(l).map_err(|e| (*i, format!("corrupt binary patch: {e}")))?);
    }
    let mut data = Vec::new();
    flate2::read::ZlibDecoder::new(deflated.as_slice())
        .take(size.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| (header_line, format!("corrupt binary patch: cannot inflate its data ({e})")))?;
    if data.len() as u64 != size {
        return Err((header_line, format!("the binary hunk says {size} bytes but holds {}", data.len())));
    }
    Ok(Some(if delta { BinaryHunk::Delta(data) } else { BinaryHunk::Literal(data) }))
}

/// A little-endian base-128 number of the delta header.
fn varint(d: &[u8], p: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let b = *d.get(*p).ok_or("the delta ends in its header")?;
        *p += 1;
        if shift > 56 {
            return Err("a delta header size is too large".into());
        }
        v |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
}

/// Applies a git delta (source size, result size, then copy and insert instructions) to `base`.
pub fn apply_delta(base: &[u8], delta: &[u8]) -> Result<Vec<u8>, String> {
    let mut p = 0;
    let src = varint(delta, &mut p)?;
    let dst = varint(delta, &mut p)?;
    if src != base.len() as u64 {
        return Err(format!("the delta is for a file of {src} bytes, this one has {}", base.len()));
    }
    let mut out = Vec::new();
    let byte = |p: &mut usize| -> Result<u64, String> {
        let b = *delta.get(*p).ok_or("the delta ends inside an instruction")?;
        *p += 1;
        Ok(u64::from(b))
    };
    while p < delta.len() {
        let cmd = delta[p];
        p += 1;
        let piece: &[u8] = if cmd & 0x80 != 0 {
            let (mut off, mut size) = (0u64, 0u64);
            for k in 0..4 {
                if cmd & (1 << k) != 0 {
                    off |= byte(&mut p)? << (8 * k);
                }
            }
            for k in 0..3 {
                if cmd & (0x10 << k) != 0 {
                    size |= byte(&mut p)? << (8 * k);
                }
            }
            if size == 0 {
                size = 0x10000;
            }
            let end = off + size;
            if end > base.len() as u64 {
                return Err(format!("the delta copies bytes {off}..{end} of a {}-byte file", base.len()));
            }
            &base[off as usize..end as usize]
        } else if cmd != 0 {
            let end = p + cmd as usize;
            let piece = delta.get(p..end).ok_or("the delta ends inside inserted data")?;
            p = end;
            piece
        } else {
            return Err("the delta has the reserved instruction 0".into());
        };
        if (out.len() + piece.len()) as u64 > dst {
            return Err(format!("the delta makes more than the {dst} bytes it announces"));
        }
        out.extend_from_slice(piece);
    }
    if out.len() as u64 != dst {
        return Err(format!("the delta makes {} bytes, it announces {dst}", out.len()));
    }
    Ok(out)
}

/// The file a hunk makes from `old`.
pub fn apply_hunk(old: &[u8], hunk: &BinaryHunk) -> Result<Vec<u8>, String> {
    match hunk {
        BinaryHunk::Literal(d) => Ok(d.clone()),
        BinaryHunk::Delta(d) => apply_delta(old, d),
    }
}

/// Git's blob id of `data` (what `index OLD..NEW` names).
pub fn blob_id(data: &[u8]) -> String {
    git2::Oid::hash_object(git2::ObjectType::Blob, data).map(|o| o.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

    use crate::patch::{apply_series, check_series, PatchError};

    fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.autocrlf=false"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    fn noise(n: usize, mut seed: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    fn write_tree(dir: &Path, files: &BTreeMap<&str, Vec<u8>>) {
        for (rel, bytes) in files {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
    }

    fn read_tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        walkdir::WalkDir::new(dir)
            .into_iter()
            .map(Result::unwrap)
            .filter(|e| e.file_type().is_file() && !e.path().components().any(|c| c.as_os_str() == ".git"))
            .map(|e| {
                let rel = e.path().strip_prefix(dir).unwrap().to_string_lossy().to_string();
                (rel, std::fs::read(e.path()).unwrap())
            })
            .collect()
    }

    /// `git diff --binary` output of edits (literal, delta, new, deleted, renamed and changed,
    /// text beside binary) applied by rocmforge and by `git apply` onto the same tree: identical.
    #[test]
    fn applies_git_binary_patches_as_git_does() {
        let tmp = tempfile::tempdir().unwrap();
        let (repo, ours, theirs) = (tmp.path().join("repo"), tmp.path().join("ours"), tmp.path().join("theirs"));
        for d in [&repo, &ours, &theirs] {
            std::fs::create_dir(d).unwrap();
        }
        let mut before: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        before.insert("small.bin", (0u8..100).collect());
        before.insert("dir/big.bin", noise(20000, 1));
        before.insert("gone.bin", b"\0gone\0".to_vec());
        before.insert("moved.bin", noise(3000, 2));
        before.insert("text.txt", b"a\nb\n".to_vec());
        before.insert("grow.bin", noise(70000, 5));
        git(&repo, &["init", "-q"]);
        write_tree(&repo, &before);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "base"]);

        let mut after = before.clone();
        after.insert("small.bin", noise(80, 3));
        let big = after.get_mut("dir/big.bin").unwrap();
        big[10000..10010].copy_from_slice(b"0123456789");
        big.extend(noise(100, 4));
        after.remove("gone.bin");
        let mut moved = after.remove("moved.bin").unwrap();
        moved[5] ^= 0xff;
        after.insert("renamed.bin", moved);
        after.insert("new.bin", b"\0\x01\x02new".to_vec());
        after.insert("text.txt", b"a\nB\n".to_vec());
        // A copy of more than 64 KiB (size 0 in a copy instruction means 0x10000).
        let grow = after.get_mut("grow.bin").unwrap();
        grow.insert(0, 7);
        std::fs::remove_file(repo.join("gone.bin")).unwrap();
        std::fs::remove_file(repo.join("moved.bin")).unwrap();
        write_tree(&repo, &after);
        git(&repo, &["add", "-A"]);
        let patch = git(&repo, &["diff", "--cached", "--binary", "-M", "HEAD"]);
        let text = String::from_utf8_lossy(&patch);
        assert!(text.contains("\nliteral ") && text.contains("\ndelta ") && text.contains("rename to"), "{text}");

        write_tree(&ours, &before);
        write_tree(&theirs, &before);
        std::fs::write(tmp.path().join("p.patch"), &patch).unwrap();
        git(&theirs, &["apply", tmp.path().join("p.patch").to_str().unwrap()]);
        let series = [("0001-binary.patch".to_string(), patch.clone())];
        apply_series(&ours, &series).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let expected: BTreeMap<String, Vec<u8>> = after.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        assert_eq!(read_tree(&theirs), expected, "git apply");
        assert_eq!(read_tree(&ours), read_tree(&theirs));

        // Again: already applied. Onto another tree: the preimage check names the patch and file.
        let e = check_series(&ours, &series).unwrap_err();
        assert!(
            matches!(
                &e,
                PatchError::BinaryFailed { already_applied: true, .. }
                    | PatchError::FileMissing { already_applied: true, .. }
            ),
            "{e}"
        );
        let other = tmp.path().join("other");
        let mut changed = before.clone();
        changed.insert("dir/big.bin", noise(20000, 9));
        write_tree(&other, &changed);
        let e = check_series(&other, &series).unwrap_err().to_string();
        assert!(e.starts_with("`0001-binary.patch` does not apply: the binary change to `dir/big.bin` fails: the file is not the one the patch was made from"), "{e}");
    }

    #[test]
    fn corrupt_binary_patches_are_malformed() {
        let head = "diff --git a/x b/x\nindex 0123456789012345678901234567890123456789..0123456789012345678901234567890123456789 100644\nGIT binary patch\n";
        for body in [
            "literal 3\nzzzzz\n\n",
            "literal 3\nA~~~~~\n\n",
            "delta x\n\n",
            "literal 5\nHcmV?d00001\n\n",
            "literal 0\nHcmV?d00001\n",
            "nothing\n",
        ] {
            let e = crate::patch::parse("b.patch", format!("{head}{body}").as_bytes()).unwrap_err();
            assert!(matches!(e, PatchError::Malformed { .. }), "{body}: {e}");
            assert!(e.to_string().starts_with("`b.patch` line "), "{e}");
        }
    }

    #[test]
    fn deltas() {
        let base = b"hello world";
        // src 11, dst 8, copy 5 bytes from 6, insert "!!!".
        let delta = [11, 8, 0x91, 6, 5, 3, b'!', b'!', b'!'];
        assert_eq!(super::apply_delta(base, &delta).unwrap(), b"world!!!");
        for bad in [
            &[12u8, 8][..],
            &[11, 9, 0x91, 6, 5, 3, b'!', b'!', b'!'],
            &[11, 1, 0x91, 9, 5],
            &[11, 1, 0],
            &[11, 3, 5, b'x'],
            &[11],
        ] {
            assert!(super::apply_delta(base, bad).is_err(), "{bad:?}");
        }
    }
}

/// Property tests: deltas and binary hunks from any bytes never panic; literal hunks encoded as
/// git encodes them (zlib, base85 lines of up to 52 bytes) decode to the same bytes.
#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::{apply_delta, parse_binary, BinaryHunk, ALPHABET};

    /// `data` as git writes a `literal` hunk.
    fn encode_literal(data: &[u8]) -> String {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(data).unwrap();
        let deflated = z.finish().unwrap();
        let mut out = format!("literal {}\n", data.len());
        for chunk in deflated.chunks(52) {
            out.push(if chunk.len() <= 26 {
                (b'A' + chunk.len() as u8 - 1) as char
            } else {
                (b'a' + chunk.len() as u8 - 27) as char
            });
            for group in chunk.chunks(4) {
                let mut word = [0u8; 4];
                word[..group.len()].copy_from_slice(group);
                let mut v = u32::from_be_bytes(word);
                let mut digits = [0u8; 5];
                for d in digits.iter_mut().rev() {
                    *d = ALPHABET[(v % 85) as usize];
                    v /= 85;
                }
                out.push_str(std::str::from_utf8(&digits).unwrap());
            }
            out.push('\n');
        }
        out.push('\n');
        out
    }

    proptest! {
        #[test]
        fn literal_round_trip(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let text = encode_literal(&data);
            let lines: Vec<&[u8]> = text.as_bytes().split_inclusive(|b| *b == b'\n').collect();
            let mut i = 0;
            let bin = parse_binary(&lines, &mut i).unwrap();
            prop_assert_eq!(bin.forward, BinaryHunk::Literal(data));
            prop_assert_eq!(i, lines.len());
        }

        #[test]
        fn any_delta(base in proptest::collection::vec(any::<u8>(), 0..64), delta in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = apply_delta(&base, &delta);
        }

        #[test]
        fn any_binary_hunk(name in "[a-z]{1,8}\\.patch", header in "(literal|delta) [0-9]{1,3}", body in proptest::collection::vec("[A-Za-z][0-9A-Za-z!#$%&()*+;<=>?@^_`{|}~-]{0,20}|", 0..4)) {
            let patch = format!(
                "diff --git a/x b/x\nindex 0000000000000000000000000000000000000000..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\nGIT binary patch\n{header}\n{}\n",
                body.join("\n")
            );
            if let Err(e) = crate::patch::parse(&name, patch.as_bytes()) {
                prop_assert!(e.to_string().contains(&format!("`{name}`")), "{}", e);
            }
        }
    }
}
