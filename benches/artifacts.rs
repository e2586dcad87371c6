//! Artifact store and restore, side by side with `tar -I 'zstd -T0'` on the same tree.
//!
//!   cargo bench --bench artifacts            (ROCMFORGE_BENCH_GB=2 by default; ci/bench.sh runs it)
//!
//! A tree shaped like a ROCm library's install (a few big shared objects, many code-object
//! files, thousands of headers; compressible about 3x like real binaries) is made in a scratch
//! dir on the cache's filesystem. Then, in one run:
//! - store: `LocalStore::store` of the stage vs `tar -cf` and `tar -I 'zstd -T0' -cf` of
//!   identical stages (each fresh from "the build": its pages dirty, as after `cmake --install`);
//! - restore: `Prefix::deploy` into an empty prefix vs `tar -xf` and `tar -I 'zstd -T0' -xf`
//!   into an empty dir (default link mode; `link-mode = "copy"` is measured too), and the same
//!   deploy as a build does it: every file re-hashed first (`LocalStore::check_whole`).
//!
//! Each run (`ROCMFORGE_BENCH_RUNS`, default 3) measures all of them back to back; each ratio is
//! taken within a run, and its min / median / max over the runs is printed as `ratio ...` lines
//! that ci/bench.sh collects.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rocmforge::cache::LocalStore;
use rocmforge::config::LinkMode;
use rocmforge::deploy::Prefix;
use rocmforge::key::KeyInputs;

fn main() {
    // `cargo bench` passes `--bench`; there are no other options.
    let gb: f64 = env_or("ROCMFORGE_BENCH_GB", 2.0);
    let runs: usize = env_or("ROCMFORGE_BENCH_RUNS", 3.0) as usize;
    let scratch = std::env::var_os("ROCMFORGE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-scratch"));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).unwrap();
    let scratch = tempfile::tempdir_in(&scratch).unwrap();
    let root = scratch.path();

    let template = root.join("template");
    let (files, bytes) = make_tree(&template, (gb * 1024.0 * 1024.0 * 1024.0) as u64);
    println!("tree: {files} files, {:.2} GiB (scratch {})", bytes as f64 / (1u64 << 30) as f64, root.display());

    let link_mode =
        if std::env::var("ROCMFORGE_LINK_MODE").as_deref() == Ok("copy") { LinkMode::Copy } else { LinkMode::Auto };
    let cache = LocalStore::new(&root.join("cache"));
    // One row per run; every figure is a ratio within one run (pairs measured back to back).
    let mut rows: Vec<BTreeMap<&str, f64>> = Vec::new();
    for run in 0..runs {
        let mut t = BTreeMap::new();
        // Store: each side gets a fresh copy of the tree, written just before it is measured
        // (after a `sync`, so none pays for another's writeback).
        let stage = root.join("stage");
        let archive = root.join("tree.tar.zst");
        let plain = root.join("tree.tar");
        sync();
        copy(&template, &stage);
        t.insert("tar -cf", time(|| sh(Command::new("tar").arg("-cf").arg(&plain).arg("-C").arg(&stage).arg("."))));
        fs::remove_dir_all(&stage).unwrap();
        sync();
        copy(&template, &stage);
        t.insert(
            "tar+zstd -cf",
            time(|| {
                sh(Command::new("tar").args(["-I", "zstd -T0", "-cf"]).arg(&archive).arg("-C").arg(&stage).arg("."))
            }),
        );
        fs::remove_dir_all(&stage).unwrap();
        sync();
        copy(&template, &stage);
        let inputs = inputs(run);
        let key = inputs.key();
        let _lock = cache.lock(&key).unwrap();
        t.insert(
            "store",
            time(|| {
                cache.store(&key, &inputs, &stage).unwrap();
            }),
        );
        let artifact = cache.get(&key).unwrap();

        // Restore: into empty dirs.
        let out = root.join("untar");
        for (name, file, args) in
            [("tar -xf", &plain, vec!["-xf"]), ("tar+zstd -xf", &archive, vec!["-I", "zstd -T0", "-xf"])]
        {
            fs::create_dir_all(&out).unwrap();
            sync();
            t.insert(name, time(|| sh(Command::new("tar").args(&args).arg(file).arg("-C").arg(&out))));
            fs::remove_dir_all(&out).unwrap();
        }
        let prefix = Prefix::new(&root.join("prefix"), link_mode);
        sync();
        t.insert(
            "deploy",
            time(|| {
                prefix.deploy("bench", &artifact, false).unwrap();
            }),
        );
        fs::remove_dir_all(root.join("prefix")).unwrap();
        // What a build does to deploy a cached artifact into a prefix that lacks it: every file
        // re-hashed first (`check_whole`), the deploy, the fingerprints recorded again.
        sync();
        t.insert(
            "deploy re-hashed",
            time(|| {
                cache.check_whole(&artifact).unwrap();
                prefix.deploy("bench", &artifact, false).unwrap();
                cache.fingerprint(&artifact).unwrap();
            }),
        );
        fs::remove_dir_all(root.join("prefix")).unwrap();
        // For comparison (not a target): the same deploy with `link-mode = "copy"`.
        let copied = Prefix::new(&root.join("copied"), LinkMode::Copy);
        sync();
        t.insert(
            "deploy copy-mode",
            time(|| {
                copied.deploy("bench", &artifact, false).unwrap();
            }),
        );
        fs::remove_dir_all(root.join("copied")).unwrap();
        cache.remove_entry(&artifact.dir).unwrap();
        fs::remove_file(&archive).unwrap();
        fs::remove_file(&plain).unwrap();
        println!("run {}: {}", run + 1, t.iter().map(|(k, v)| format!("{k} {v:.2}s")).collect::<Vec<_>>().join(" | "));
        rows.push(t);
    }
    // Each ratio per run, then min / median / max over the runs (and every run's seconds).
    let ratio = |label: &str, a: &str, b: &str, target: &str| {
        let r: Vec<f64> = rows.iter().map(|t| t[a] / t[b]).collect();
        let secs = |k: &str| rows.iter().map(|t| format!("{:.2}", t[k])).collect::<Vec<_>>().join("/");
        println!(
            "ratio {label} {:.3} / {:.3} / {:.3} (min / median / max of {} runs; {a} {} s vs {b} {} s; {target})",
            min(&r),
            median(&r),
            max(&r),
            r.len(),
            secs(a),
            secs(b)
        );
    };
    ratio("store-vs-tar-zstd", "store", "tar+zstd -cf", "target <= 1.0");
    ratio("store-vs-tar", "store", "tar -cf", "no target: tar without compression");
    ratio("restore-vs-tar-zstd", "deploy", "tar+zstd -xf", "target <= 0.25");
    ratio("restore-vs-tar", "deploy", "tar -xf", "no target: tar without compression");
    ratio("restore-re-hashed-vs-tar-zstd", "deploy re-hashed", "tar+zstd -xf", "target <= 0.25: what a build does");
    ratio("restore-re-hashed-vs-restore", "deploy re-hashed", "deploy", "no target: the cost of the re-hash");
    ratio("restore-copy-mode-vs-tar-zstd", "deploy copy-mode", "tar+zstd -xf", "no target");
    ratio("restore-copy-mode-vs-tar", "deploy copy-mode", "tar -xf", "no target");
}

fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn inputs(run: usize) -> KeyInputs {
    KeyInputs {
        format: 1,
        recipe: "bench".into(),
        recipe_content: format!("run {run}"),
        source: "none".into(),
        patches: vec![],
        targets: vec!["gfx1010".into()],
        prefix: "/opt/rocm".into(),
        env: BTreeMap::new(),
        toolchain: "bench".into(),
        host_os: String::new(),
        deps: BTreeMap::new(),
    }
}

fn time(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn sh(c: &mut Command) {
    let st = c.status().unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    assert!(st.success(), "{c:?} failed: {st}");
}

fn sync() {
    sh(&mut Command::new("sync"));
}

fn copy(from: &Path, to: &Path) {
    sh(Command::new("cp").arg("-a").arg("--reflink=never").arg(from).arg(to));
}

/// Writes about `total` bytes: 45% in 6 big libraries, 45% in code objects of 1 MiB, the rest
/// in 8 KiB headers, plus a symlink per library as installs have. Returns (files, bytes).
fn make_tree(root: &Path, total: u64) -> (usize, u64) {
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut files = 0;
    let mut bytes = 0;
    let mut write = |path: PathBuf, size: u64| {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut f = std::io::BufWriter::with_capacity(1 << 20, fs::File::create(&path).unwrap());
        let mut left = size;
        let mut block = [0u8; 4096];
        while left > 0 {
            // Half random, half a repeated run: zstd gets about 2-3x, like real binaries.
            for chunk in block[..2048].chunks_mut(8) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                chunk.copy_from_slice(&rng.to_le_bytes());
            }
            let fill = (rng & 0xff) as u8;
            block[2048..].fill(fill);
            let n = left.min(4096) as usize;
            f.write_all(&block[..n]).unwrap();
            left -= n as u64;
        }
        f.flush().unwrap();
        files += 1;
        bytes += size;
    };
    let big = total * 45 / 100 / 6;
    for i in 0..6 {
        write(root.join(format!("lib/librocbench{i}.so.6.2.0")), big);
        std::os::unix::fs::symlink(format!("librocbench{i}.so.6.2.0"), root.join(format!("lib/librocbench{i}.so")))
            .unwrap();
    }
    let code_objects = (total * 45 / 100 / (1 << 20)).max(1);
    for i in 0..code_objects {
        write(root.join(format!("lib/rocbench/library/Kernels_{:03}/k{i}-gfx1010.co", i % 64)), 1 << 20);
    }
    let headers = ((total / 10) / 8192).max(1);
    for i in 0..headers {
        write(root.join(format!("include/rocbench/d{:02}/h{i}.hpp", i % 50)), 8192);
    }
    (files, bytes)
}
