//! The versions of host dependencies recipes bound (`[host] versions`), each read the one way
//! that tells what the build will use: Boost's and msgpack-cxx's from the header the compiler
//! includes (the first in its system search path: `/usr/local/include`, the multiarch folder,
//! `/usr/include`; steps run in a clean environment, so `CPATH` and `CPLUS_INCLUDE_PATH` do not
//! reach them), GCC's from `gcc -dumpfullversion`. A package manager's version is not used: a
//! Boost installed by hand in `/usr/local` wins over the distribution's at compile time, and
//! the header says so.

use std::path::PathBuf;
use std::time::Duration;

use super::HostRoot;
use crate::recipe::{version_numbers, Bounded};

/// A version read on the host, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub version: String,
    /// `BOOST_VERSION 108300 in /usr/include/boost/version.hpp`, `gcc -dumpfullversion (/usr/bin/gcc)`.
    pub from: String,
}

/// The version of `dep` on the host, or where it was looked for (`Err`).
pub fn read(root: &HostRoot, dep: Bounded) -> Result<Found, String> {
    match dep {
        Bounded::Boost => header(root, "boost/version.hpp", |text| {
            let n: u64 = define(text, "BOOST_VERSION")?.parse().ok()?;
            // boost/version.hpp: major * 100000 + minor * 100 + patch.
            Some((format!("{}.{}.{}", n / 100000, n / 100 % 1000, n % 100), format!("BOOST_VERSION {n}")))
        }),
        Bounded::MsgpackCxx => {
            let read = |text: &str| {
                let part = |k: &str| define(text, k).filter(|v| v.chars().all(|c| c.is_ascii_digit()));
                let v = format!(
                    "{}.{}.{}",
                    part("MSGPACK_VERSION_MAJOR")?,
                    part("MSGPACK_VERSION_MINOR")?,
                    part("MSGPACK_VERSION_REVISION")?
                );
                Some((v, "MSGPACK_VERSION_*".to_string()))
            };
            header(root, "msgpack/version_master.hpp", read).or_else(|e| {
                // msgpack-c 3.x and older were C and C++ in one release, whose only version
                // header is version_master.h (cpp-3.3.0; Ubuntu 22.04's libmsgpack-dev 3.3):
                // read it where the C++ headers are beside it.
                let dir = include_dirs(root).into_iter().find(|d| d.join("msgpack.hpp").is_file()).ok_or(e.clone())?;
                let h = dir.join("msgpack/version_master.h");
                let text = std::fs::read_to_string(&h).map_err(|_| e.clone())?;
                match read(&text) {
                    Some((v, what)) if version_numbers(&v).is_some_and(|n| n[0] <= 3) => {
                        Ok(Found { version: v, from: format!("{what} in {}", h.display()) })
                    }
                    _ => Err(e),
                }
            })
        }
        Bounded::Gcc => {
            // From `PATH`, as doctor's other tools (cc, cmake) are: a test's stand-in host puts
            // its own `gcc` there; the headers above are read through the host root instead.
            let gcc = super::which("gcc").ok_or("no `gcc` on PATH")?;
            let out = crate::process::bounded(
                std::process::Command::new(&gcc).arg("-dumpfullversion"),
                Duration::from_secs(10),
            )
            .map_err(|e| format!("`{} -dumpfullversion` {e}", gcc.display()))?;
            let text = String::from_utf8_lossy(&out.1[0]).trim().to_string();
            match version_numbers(&text) {
                Some(_) if out.0.success() => {
                    Ok(Found { version: text, from: format!("`{} -dumpfullversion`", gcc.display()) })
                }
                _ => Err(format!("`{} -dumpfullversion` printed no version ({text:?})", gcc.display())),
            }
        }
    }
}

/// What `#define name value` sets in `text` (the first token after the name).
fn define<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let mut w = l.trim_start().strip_prefix('#')?.split_whitespace();
        (w.next()? == "define" && w.next()? == name).then_some(())?;
        w.next()
    })
}

/// The first `rel` in the include search path, read by `parse` into (version, what was read).
fn header(root: &HostRoot, rel: &str, parse: impl Fn(&str) -> Option<(String, String)>) -> Result<Found, String> {
    let dirs = include_dirs(root);
    let Some(path) = dirs.iter().map(|d| d.join(rel)).find(|p| p.is_file()) else {
        return Err(format!(
            "no {rel} in {}",
            dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("{} cannot be read: {}", path.display(), e.kind()))?;
    let (version, what) =
        parse(&text).ok_or_else(|| format!("{} has no version this rocmforge can read", path.display()))?;
    Ok(Found { version, from: format!("{what} in {}", path.display()) })
}

/// Where the compiler looks for `#include <...>`, in its order (Debian/Ubuntu layout, as
/// `gcc -v` lists it).
fn include_dirs(root: &HostRoot) -> Vec<PathBuf> {
    let mut dirs = vec![root.path("/usr/local/include")];
    dirs.extend(super::needs::multiarch(root, "/usr/include"));
    dirs.push(root.path("/usr/include"));
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_versions_are_read_from_the_first_header_found() {
        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::new(d.path());
        let put = |abs: &str, text: &str| {
            let p = root.path(abs);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        assert!(read(&root, Bounded::Boost).unwrap_err().contains("no boost/version.hpp in"));
        put(
            "/usr/include/boost/version.hpp",
            "// c\n#define BOOST_VERSION 107400\n#define BOOST_LIB_VERSION \"1_74\"\n",
        );
        let f = read(&root, Bounded::Boost).unwrap();
        assert_eq!(f.version, "1.74.0");
        assert!(f.from.starts_with("BOOST_VERSION 107400 in ") && f.from.ends_with("usr/include/boost/version.hpp"));
        // A Boost in /usr/local is what the compiler includes first.
        put("/usr/local/include/boost/version.hpp", "#  define BOOST_VERSION 109200\n");
        assert_eq!(read(&root, Bounded::Boost).unwrap().version, "1.92.0");
        put(
            "/usr/include/msgpack/version_master.hpp",
            "#define MSGPACK_VERSION_MAJOR    6\n#define MSGPACK_VERSION_MINOR    1\n#define MSGPACK_VERSION_REVISION 0\n",
        );
        // The C library's header is another version, and is not read.
        put("/usr/include/msgpack/version_master.h", "#define MSGPACK_VERSION_MAJOR    4\n");
        assert_eq!(read(&root, Bounded::MsgpackCxx).unwrap().version, "6.1.0");
        // msgpack-c 3.3 (C and C++ in one, Ubuntu 22.04): only version_master.h, beside msgpack.hpp.
        let old = tempfile::tempdir().unwrap();
        let old_root = HostRoot::new(old.path());
        let put_old = |abs: &str, text: &str| {
            let p = old_root.path(abs);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        put_old(
            "/usr/include/msgpack/version_master.h",
            "#define MSGPACK_VERSION_MAJOR 3\n#define MSGPACK_VERSION_MINOR 3\n#define MSGPACK_VERSION_REVISION 0\n",
        );
        assert!(read(&old_root, Bounded::MsgpackCxx).unwrap_err().contains("no msgpack/version_master.hpp in"));
        put_old("/usr/include/msgpack.hpp", "");
        let f = read(&old_root, Bounded::MsgpackCxx).unwrap();
        assert_eq!(f.version, "3.3.0");
        assert!(f.from.ends_with("usr/include/msgpack/version_master.h"), "{}", f.from);
        put("/usr/include/x86_64-linux-gnu/msgpack/version_master.hpp", "#define MSGPACK_VERSION_MAJOR x\n");
        assert!(read(&root, Bounded::MsgpackCxx).unwrap_err().contains("has no version this rocmforge can read"));
    }
}
