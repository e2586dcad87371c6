#!/usr/bin/env bash
# The benchmarks (not tests): every figure is a ratio of two things measured side by side in this
# one run, because absolute times on shared 2-core machines are noisy. Results are printed and
# written to target/bench/results.md; BENCHMARKS.md keeps the figures of a recorded run.
#
#   ci/bench.sh                      all of them (about 6 minutes on 2 cores)
#   BENCH_GB=4 ci/bench.sh           a bigger artifact for the store/restore pair (default 2)
#
# 1. no-op `build` of the example stack vs `rocmforge --version`        target <= 3x
# 2. storing a multi-GB artifact vs `tar -I 'zstd -T0' -cf` of it         target <= 1.0x
#    restoring it into a prefix vs `tar -I 'zstd -T0' -xf`                target <= 0.25x
# 3. rocmforge's peak RSS while a step prints 1 GiB of log                 target <= 64 MB
#    (plain lines, live bars on a pseudo-terminal, and `rocmforge log` of that log)
set -euo pipefail
cd "$(dirname "$0")/.."
need() { command -v "$1" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }
need hyperfine hyperfine
need /usr/bin/time time
need script bsdutils
need zstd zstd
ci/setup.sh >/dev/null
cargo build --quiet --release
out=target/bench
rm -rf "$out" && mkdir -p "$out"
results=$out/results.md
rf=$PWD/target/release/rocmforge
echo "# ci/bench.sh $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null || echo '?')" | tee "$results"
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$1" "$2"; }

# 1. No-op build. The example stack is built once (ci/example.sh), then both commands are timed
#    by hyperfine, interleaved in one run.
export ROCMFORGE_EXAMPLE_DIR=$PWD/$out/example
ci/example.sh >/dev/null 2>&1
export ROCMFORGE_CONFIG=$ROCMFORGE_EXAMPLE_DIR/config.toml
"$rf" --stack example build pyvec --target gfx1010 2>&1 | grep -q "nothing to build" || { echo "the second build of the example stack was not a no-op" >&2; exit 1; }
hyperfine -N --warmup 5 --runs 100 --export-json "$out/noop.json" \
  "$rf --version" "$rf --quiet --stack example build pyvec --target gfx1010" >/dev/null
read -r version noop < <(python3 -c "import json; r=json.load(open('$out/noop.json'))['results']; print(r[0]['median'], r[1]['median'])")
echo "- no-op build: $(ratio "$noop" "$version")x rocmforge --version (median $(ratio "$noop" 0.001) ms vs $(ratio "$version" 0.001) ms; target <= 3x)" | tee -a "$results"
unset ROCMFORGE_CONFIG

# 2. Artifact store and restore (benches/artifacts.rs drives the library's cache and deploy).
ROCMFORGE_BENCH_GB=${BENCH_GB:-2} ROCMFORGE_BENCH_DIR=$PWD/$out/artifacts cargo bench --quiet --bench artifacts 2>/dev/null | tee "$out/artifacts.txt"
rm -rf "$out/artifacts"
grep '^ratio store' "$out/artifacts.txt" | sed 's/^ratio store /- store: /; s/ (/x (/' | tee -a "$results"
grep '^ratio restore ' "$out/artifacts.txt" | sed 's/^ratio restore /- restore: /; s/ (/x (/' | tee -a "$results"
grep '^ratio restore-copy-mode' "$out/artifacts.txt" | sed 's/^ratio restore-copy-mode /- restore with link-mode copy: /; s/ (/x (/' | tee -a "$results"

# 3. Peak memory while a step prints 1 GiB of log. GNU time's %M is the largest resident set of
#    rocmforge and its children (bash, yes, head: all a few MB), so it bounds rocmforge's own.
tree=$out/spew
mkdir -p "$tree/recipes/spew"
cat > "$tree/recipes/spew/stack.toml" <<'TOML'
[stack]
name = "spew"
rocm-version = "0.0"
summary = "A step that prints 1 GiB of log"
default-targets = ["gfx1010"]
default = true
TOML
cat > "$tree/recipes/spew/spew.toml" <<'TOML'
[package]
name = "spew"
version = "1.0"
summary = "prints 1 GiB like a very chatty compiler, then installs one file"

[build]
system = "script"
steps = [
  "( yes '[1234/5678] /usr/bin/clang++ -O3 -DNDEBUG -I/opt/rocm/include -c library/src/blas3/Tensile/gemm.cpp -o gemm.o  warning: loop not unrolled' || true ) | head -c 1073741824",
  "mkdir -p {stage}/share && echo done > {stage}/share/spew.txt",
]
TOML
export ROCMFORGE_CACHE_DIR=$PWD/$tree/cache ROCMFORGE_WORK_DIR=$PWD/$tree/work ROCMFORGE_STATE_DIR=$PWD/$tree/state
peak() { # label, command...
  local label=$1; shift
  /usr/bin/time -f %M -o "$out/rss" "$@" >/dev/null 2>&1
  local kb; kb=$(tail -1 "$out/rss")
  echo "- peak RSS, $label: $((kb / 1024)) MB (target <= 64 MB)" | tee -a "$results"
}
peak "build, plain lines" "$rf" --recipes "$tree" build spew --rebuild spew
log=$(ls "$tree"/work/spew/spew/logs/step1.log)
test "$(stat -c %s "$log")" -eq 1073741824 || { echo "the step did not log 1 GiB" >&2; exit 1; }
peak "build, live bars on a terminal" script -qec "$rf --recipes $tree build spew --rebuild spew" /dev/null
peak "rocmforge log of the 1 GiB log" "$rf" --recipes "$tree" log spew --step step1
rm -rf "$tree"
echo "results: $results"
