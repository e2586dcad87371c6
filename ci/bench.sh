#!/usr/bin/env bash
# The benchmarks (not tests): every figure is a ratio of two things measured side by side in this
# one run, because absolute times on shared 2-core machines are noisy. Results are printed and
# written to <target-dir>/bench/results.md; BENCHMARKS.md keeps the figures of a recorded run.
# Works with CARGO_TARGET_DIR (or a configured target dir) set.
#
#   ci/bench.sh                      all of them (about 12 minutes on 2 cores)
#   BENCH_GB=4 ci/bench.sh           a bigger artifact for the store/restore pairs (default 2)
#   NOOP_PAIRS=200 ci/bench.sh       more no-op pairs (default 100)
#   NIGHT_UNIT=5 ci/bench.sh         seconds per unit of the 16-recipe sleep graph (default 3)
#   BENCH_SECTIONS="1 5" ci/bench.sh  only these sections (numbered below)
#   RF_BEFORE=/path/to/rocmforge ci/bench.sh   section 5 also times that binary (a build of an
#                                    earlier commit), interleaved with this one
#
# 1. no-op `build` of the example stack vs `rocmforge --version`, timed in interleaved pairs
#    (one of each, repeated); per-pair ratio min / median / max                 target <= 2x
# 2. storing a multi-GB artifact vs `tar -cf` and vs `tar -I 'zstd -T0' -cf`     target <= 1.0x (zstd)
#    restoring it into a prefix vs `tar -xf` and `tar -I 'zstd -T0' -xf`        target <= 0.25x (zstd)
#    link-mode copy restore, as measured                                          no target
#    (per run ratios, min / median / max over the runs)
# 3. the schedule: the 16-recipe graph in simulation and with real sleeps, against the lower
#    bound max(critical path, work / jobs)                                        target <= 1.05x
#    and the rocm-6.2 stack in simulation (the recipes' [estimate], docs/night-estimate.md) against
#    the bound and a sequential build
# 4. rocmforge's peak RSS while a step prints 1 GiB of log                        target <= 64 MB
#    (plain lines, live bars on a pseudo-terminal, and `rocmforge log` of that log)
# 5. a chain of 4 recipes built with a shared cache whose uploads are slow, vs the same build
#    without one, timed in interleaved pairs                                     target <= 1.5x
# 6. `fetch` of a 1 GiB plain file from a local HTTP server vs curl -o + sha256sum + fdatasync,
#    and of a 512 MiB .tar.gz vs the same plus tar -x, in interleaved pairs     target <= 1.0x
# 7. per-recipe overhead: 30 script recipes of one `true` step, as a chain and flat, built with
#    -j 2 from a fresh state (wall time / 30)                                    target < 50 ms
#    and the 16-recipe sleep graph with -j 2 against its bound (18 units)       target <= 1.12x
#    with RF_BEFORE, each run interleaved with that binary's (per-pair ratio new / before)
#    PER_RECIPE_PAIRS=5 (default), NIGHT2_PAIRS=3, NIGHT2_UNIT=3 (seconds a unit)
# 8. `inspect` of a wheel whose member is a big host library (clang-15's libLLVM, deflated):
#    the member is inflated as a stream, again from its start for a read before where it is
#    (section headers at the end, program headers at the start), vs `unzip -p` of the member
#    (one inflate), in interleaved pairs                                          target <= 2x
#    INSPECT_PAIRS=5 (default)
set -euo pipefail
cd "$(dirname "$0")/.."
need() { command -v "$1" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }
need /usr/bin/time time
need script bsdutils
need zstd zstd
ci/setup.sh >/dev/null
cargo build --quiet --release
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
out=$target/bench
rm -rf "$out" && mkdir -p "$out"
results=$out/results.md
rf=$target/release/rocmforge
echo "# ci/bench.sh $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null || echo '?')" | tee "$results"
on() { [[ " ${BENCH_SECTIONS:-1 2 3 4 5 6 7 8} " == *" $1 "* ]]; }
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$1" "$2"; }

if on 1; then
# 1. No-op build. The example stack is built once (ci/example.sh), then the two commands are
#    timed in pairs, one right after the other (5 pairs of warm-up), each spawned directly
#    (no shell) and timed from spawn to exit.
export ROCMFORGE_EXAMPLE_DIR=$out/example
ci/example.sh >/dev/null 2>&1
export ROCMFORGE_CONFIG=$ROCMFORGE_EXAMPLE_DIR/config.toml
"$rf" --stack example build pyvec --target gfx1010 2>&1 | grep -q "nothing to build" || { echo "the second build of the example stack was not a no-op" >&2; exit 1; }
python3 - "${NOOP_PAIRS:-100}" "$rf" <<'PY' | tee -a "$results"
import os, statistics, sys, time
pairs, rf = int(sys.argv[1]), sys.argv[2]
a = [rf, "--version"]
b = [rf, "--quiet", "--stack", "example", "build", "pyvec", "--target", "gfx1010"]
null = os.open(os.devnull, os.O_WRONLY)
def run(argv):
    t = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, null, 1)])
    _, status = os.waitpid(pid, 0)
    t = time.perf_counter_ns() - t
    assert os.waitstatus_to_exitcode(status) == 0, argv
    return t / 1e6
for _ in range(5):
    run(a), run(b)
ta, tb = [], []
for _ in range(pairs):
    ta.append(run(a))
    tb.append(run(b))
r = sorted(y / x for x, y in zip(ta, tb))
med = statistics.median
print(f"- no-op build vs rocmforge --version, {pairs} interleaved pairs: per-pair ratio "
      f"{r[0]:.2f}x / {med(r):.2f}x / {r[-1]:.2f}x (min / median / max; medians {med(tb):.1f} ms vs "
      f"{med(ta):.1f} ms; target <= 2x)")
PY
unset ROCMFORGE_CONFIG
fi

if on 2; then
# 2. Artifact store and restore (benches/artifacts.rs drives the library's cache and deploy).
ROCMFORGE_BENCH_GB=${BENCH_GB:-2} ROCMFORGE_BENCH_DIR=$out/artifacts cargo bench --quiet --bench artifacts 2>/dev/null | tee "$out/artifacts.txt"
rm -rf "$out/artifacts"
grep '^ratio ' "$out/artifacts.txt" | sed 's/^ratio \([^ ]*\) /- \1: /' | tee -a "$results"
fi

if on 3; then
# 3. The schedule. In simulation (benches/schedule.rs): the 16-recipe graph and the rocm-6.2
#    stack. With real sleeps: the tests/fixtures/night stack (the same graph) on 3 jobs, each
#    order from a fresh state (estimates from the recipes), timed in pairs; the bound is the
#    sleeps' (12 units), so rocmforge's own overhead per recipe counts against it.
cargo bench --quiet --bench schedule 2>/dev/null | tee "$out/schedule.txt"
grep '^sched ' "$out/schedule.txt" | sed 's/^sched /- schedule, simulated: /' | tee -a "$results"
unit=${NIGHT_UNIT:-3}
night_all="zeta-4 a b c d e f g h i j k l"
for pair in $(seq "${NIGHT_PAIRS:-1}"); do
  for order in critical-path name; do
    home=$out/night-$order
    rm -rf "$home" && mkdir -p "$home/out" && echo "$unit" > "$home/out/unit"
    start=$(date +%s%N)
    env -u ROCMFORGE_CONFIG HOME="$home" XDG_STATE_HOME="$home/state" XDG_CACHE_HOME="$home/cache" ROCMFORGE_SCHEDULE=$order \
      "$rf" --quiet --recipes tests/fixtures/night --stack night build $night_all -j 3 --prefix "$home/out/prefix"
    end=$(date +%s%N)
    python3 -c "import sys; t = (int(sys.argv[2]) - int(sys.argv[1])) / 1e9; b = 12 * float(sys.argv[3]); print(f'- schedule, real sleeps (pair $pair), $order: {t / b:.3f}x the bound ({t:.1f} s vs {b:.0f} s, 3 jobs, {sys.argv[3]} s a unit; target <= 1.05x for critical-path)')" "$start" "$end" "$unit" | tee -a "$results"
    rm -rf "$home"
  done
done
fi

if on 4; then
# 4. Peak memory while a step prints 1 GiB of log. GNU time's %M is the largest resident set of
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
export ROCMFORGE_CACHE_DIR=$tree/cache ROCMFORGE_WORK_DIR=$tree/work ROCMFORGE_STATE_DIR=$tree/state
peak() { # label, command...
  local label=$1; shift
  /usr/bin/time -f %M -o "$out/rss" "$@" >/dev/null 2>&1
  local kb; kb=$(tail -1 "$out/rss")
  echo "- peak RSS, $label: $((kb / 1024)) MB (target <= 64 MB)" | tee -a "$results"
}
# The first plan asks each host tool for its `--version` (hipcc runs perl and clang, tens of MB)
# and remembers the answers: ask once before measuring, so %M is rocmforge's, not clang's.
"$rf" --recipes "$tree" plan spew >/dev/null
peak "build, plain lines" "$rf" --recipes "$tree" build spew --rebuild spew
log=$(ls "$tree"/work/spew/spew/logs/step1.log)
test "$(stat -c %s "$log")" -eq 1073741824 || { echo "the step did not log 1 GiB" >&2; exit 1; }
peak "build, live bars on a terminal" script -qec "$rf --recipes $tree build spew --rebuild spew" /dev/null
peak "rocmforge log of the 1 GiB log" "$rf" --recipes "$tree" log spew --step step1
rm -rf "$tree"
fi

# 5. Uploads beside the build. The tests/fixtures/night chain zeta-1 .. zeta-4 (3 s each, one
#    after another), from a fresh state each time, with and without a shared cache whose
#    blob uploads each take UPLOAD_DELAY seconds (a slow uplink; a small Python WebDAV-like
#    server on 127.0.0.1). Uploads that held each recipe's slot would add every upload to the
#    chain; run beside the build, only the last one.
if on 5; then
  unset ROCMFORGE_CACHE_DIR ROCMFORGE_WORK_DIR ROCMFORGE_STATE_DIR ROCMFORGE_CONFIG
  delay=${UPLOAD_DELAY:-3}
  srv=$out/slow-cache
  mkdir -p "$srv/root"
  python3 - "$srv" "$delay" <<'PY' &
import http.server, os, sys, time
root, delay = os.path.join(sys.argv[1], "root"), float(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def path_of(self): return os.path.join(root, self.path.lstrip("/").replace("..", ""))
    def do_GET(self, body=True):
        if "/ac/" in self.path and os.path.exists(os.path.join(sys.argv[1], "get-delay")):
            time.sleep(float(open(os.path.join(sys.argv[1], "get-delay")).read()))
        p = self.path_of()
        if not os.path.isfile(p):
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        data = open(p, "rb").read()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        if body: self.wfile.write(data)
    def do_HEAD(self): self.do_GET(body=False)
    def do_PUT(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        if "/cas/" in self.path: time.sleep(delay)
        p = self.path_of(); os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p, "wb").write(data)
        self.send_response(201); self.send_header("Content-Length", "0"); self.end_headers()
class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # socketserver's 5 would drop SYNs of side-by-side requests (1 s retry)
s = Server(("127.0.0.1", 0), H)
open(os.path.join(sys.argv[1], "port"), "w").write(str(s.server_address[1]))
s.serve_forever()
PY
  server=$!
  while [ ! -s "$srv/port" ]; do sleep 0.1; done
  url="http://127.0.0.1:$(cat "$srv/port")/"
  chain() { # binary, label, with-cache (0/1): prints the seconds from start to exit
    local home=$out/chain-$2
    rm -rf "$home" && mkdir -p "$home/out" && echo 1 > "$home/out/unit"
    local cfg=$home/config.toml
    : > "$cfg"
    if [ "$3" = 1 ]; then
      rm -rf "$srv/root" && mkdir -p "$srv/root"
      local pub
      pub=$(env HOME="$home" XDG_STATE_HOME="$home/state" ROCMFORGE_CONFIG="$cfg" "$1" cache keygen --name bench 2>/dev/null)
      printf 'cache-url = "%s"\ntrusted-keys = ["%s"]\n' "$url" "$pub" > "$cfg"
    fi
    local start end
    start=$(date +%s%N)
    env HOME="$home" XDG_STATE_HOME="$home/state" XDG_CACHE_HOME="$home/cache" ROCMFORGE_CONFIG="$cfg" \
      "$1" --quiet --recipes tests/fixtures/night --stack night build zeta-4 -j 3 --compiler-cache none --prefix "$home/out/prefix" 2>/dev/null
    end=$(date +%s%N)
    if [ "$3" = 1 ] && [ "$(find "$srv/root/ac" -type f | wc -l)" != 4 ]; then
      echo "the build did not upload its 4 artifacts" >&2; exit 1
    fi
    rm -rf "$home"
    python3 -c "import sys; print((int(sys.argv[2]) - int(sys.argv[1])) / 1e9)" "$start" "$end"
  }
  pairs=${UPLOAD_PAIRS:-3}
  : > "$out/chain.txt"
  for pair in $(seq "$pairs"); do
    line="$(chain "$rf" none 0) $(chain "$rf" slow 1)"
    if [ -n "${RF_BEFORE:-}" ]; then line="$line $(chain "$RF_BEFORE" before 1)"; fi
    echo "$line" >> "$out/chain.txt"
  done
  # `plan` of the 16-recipe night graph against a shared cache whose manifest requests each take
  # 0.2 s (a far server; none has the artifacts), vs `plan` without one.
  echo 0.2 > "$srv/get-delay"
  home=$out/plan-home
  rm -rf "$home" && mkdir -p "$home"
  : > "$home/none.toml"
  pub=$(env HOME="$home" XDG_STATE_HOME="$home/state" ROCMFORGE_CONFIG="$home/none.toml" "$rf" cache keygen --name bench 2>/dev/null)
  printf 'cache-url = "%s"\ntrusted-keys = ["%s"]\n' "$url" "$pub" > "$home/remote.toml"
  plan_secs() { # binary, config
    local start end
    start=$(date +%s%N)
    env HOME="$home" XDG_STATE_HOME="$home/state" XDG_CACHE_HOME="$home/cache" ROCMFORGE_CONFIG="$2" \
      "$1" --quiet --recipes tests/fixtures/night --stack night plan $night_all >/dev/null 2>&1
    end=$(date +%s%N)
    python3 -c "import sys; print((int(sys.argv[2]) - int(sys.argv[1])) / 1e9)" "$start" "$end"
  }
  night_all="zeta-4 a b c d e f g h i j k l"
  plan_secs "$rf" "$home/none.toml" >/dev/null   # remembers the host tools' identities
  : > "$out/plan.txt"
  for pair in $(seq "${PLAN_PAIRS:-5}"); do
    line="$(plan_secs "$rf" "$home/none.toml") $(plan_secs "$rf" "$home/remote.toml")"
    if [ -n "${RF_BEFORE:-}" ]; then line="$line $(plan_secs "$RF_BEFORE" "$home/remote.toml")"; fi
    echo "$line" >> "$out/plan.txt"
  done
  rm -f "$srv/get-delay"
  kill "$server"
  python3 - "$out/plan.txt" "${RF_BEFORE:+before}" <<'PY' | tee -a "$results"
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
def fig(i):
    r = sorted(row[i] / row[0] for row in rows)
    return f"{r[0]:.1f}x / {statistics.median(r):.1f}x / {r[-1]:.1f}x"
med = lambda i: statistics.median(row[i] for row in rows)
print(f"- plan of 16 recipes, manifests 0.2 s each, vs no shared cache, {len(rows)} interleaved pairs: {fig(1)} "
      f"(medians {med(1):.2f} s vs {med(0):.2f} s)")
if len(sys.argv) > 2 and sys.argv[2]:
    print(f"- the same with RF_BEFORE (one manifest after another): {fig(2)} (median {med(2):.2f} s)")
    r = sorted(row[1] / row[2] for row in rows)
    print(f"- plan with this binary vs RF_BEFORE, same server: {r[0]:.3f}x / {statistics.median(r):.3f}x / {r[-1]:.3f}x")
PY
  python3 - "$out/chain.txt" "$delay" "${RF_BEFORE:+before}" <<'PY' | tee -a "$results"
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
def fig(i):
    r = sorted(row[i] / row[0] for row in rows)
    return f"{r[0]:.2f}x / {statistics.median(r):.2f}x / {r[-1]:.2f}x"
base = statistics.median(row[0] for row in rows)
print(f"- chain of 4 recipes (3 s each) with uploads of {sys.argv[2]} s each vs without a shared cache, "
      f"{len(rows)} interleaved pairs: {fig(1)} (min / median / max; without: median {base:.1f} s; target <= 1.5x)")
if len(sys.argv) > 3 and sys.argv[3]:
    print(f"- the same with RF_BEFORE (uploads holding each recipe's slot): {fig(2)}")
PY
fi

if on 6; then
  unset ROCMFORGE_CACHE_DIR ROCMFORGE_WORK_DIR ROCMFORGE_STATE_DIR ROCMFORGE_CONFIG
  dl=$out/download && mkdir -p "$dl/srv" "$dl/tree/recipes/dl"
  head -c $((1024 * 1024 * 1024)) /dev/urandom > "$dl/srv/blob.bin"
  head -c $((512 * 1024 * 1024)) /dev/urandom > "$dl/payload" && tar -C "$dl" -czf "$dl/srv/pkg-1.0.tar.gz" payload --transform 's,^,pkg-1.0/,' && rm "$dl/payload"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  python3 -m http.server --bind 127.0.0.1 --directory "$dl/srv" "$port" >/dev/null 2>&1 &
  server=$!
  printf '[stack]\nname = "dl"\nrocm-version = "6.2.4"\nsummary = "downloads"\ndefault-targets = ["gfx1010"]\n' > "$dl/tree/recipes/dl/stack.toml"
  for r in blob:blob.bin pkg:pkg-1.0.tar.gz; do
    name=${r%%:*} file=${r#*:}
    printf '[package]\nname = "%s"\nversion = "1.0"\nsummary = "s"\n\n[source]\nurl = "http://127.0.0.1:%s/%s"\nsha256 = "%s"\n\n[build]\nsystem = "script"\nsteps = ["true"]\n\n[targets]\ngpu = false\n' \
      "$name" "$port" "$file" "$(sha256sum "$dl/srv/$file" | cut -d' ' -f1)" > "$dl/tree/recipes/dl/$name.toml"
  done
  sleep 1
  python3 - "$rf" "$dl" "$port" "${DOWNLOAD_PAIRS:-3}" <<'PY' | tee -a "$results"
import os, shutil, statistics, subprocess, sys, time
rf, dl, port, pairs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
env = dict(os.environ, HOME=dl, XDG_STATE_HOME=f"{dl}/state", XDG_CONFIG_HOME=f"{dl}/config")
def timed(argv, **kw):
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t
def fresh():
    for d in (f"{dl}/cache", f"{dl}/work", f"{dl}/curl"):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(f"{dl}/curl")
def baseline(file, untar):
    cmd = f"curl -sS -o {dl}/curl/f http://127.0.0.1:{port}/{file} && sha256sum {dl}/curl/f >/dev/null && sync -d {dl}/curl/f"
    if untar:
        cmd += f" && tar -C {dl}/curl -xzf {dl}/curl/f"
    return timed(["bash", "-c", cmd])
before = os.environ.get("RF_BEFORE")
def ours(recipe, binary=rf):
    return timed([binary, "--quiet", "--recipes", f"{dl}/tree", "--stack", "dl", "fetch", recipe],
                 env=dict(env, ROCMFORGE_CACHE_DIR=f"{dl}/cache", ROCMFORGE_WORK_DIR=f"{dl}/work"))
med = statistics.median
fig = lambda r: f"{r[0]:.2f}x / {med(r):.2f}x / {r[-1]:.2f}x"
for recipe, file, untar, what in [("blob", "blob.bin", False, "1 GiB plain file"), ("pkg", "pkg-1.0.tar.gz", True, "512 MiB .tar.gz (baseline with tar -x)")]:
    a, b, c = [], [], []
    for _ in range(pairs):
        fresh(); a.append(baseline(file, untar))
        fresh(); b.append(ours(recipe))
        if before:
            fresh(); c.append(ours(recipe, before))
    print(f"- fetch of a {what} vs curl -o + sha256sum + fdatasync, {pairs} interleaved pairs: "
          f"{fig(sorted(y / x for x, y in zip(a, b)))} (min / median / max; medians {med(b):.2f} s vs {med(a):.2f} s; target <= 1.0x)")
    if before:
        print(f"  - RF_BEFORE, the same pairs: {fig(sorted(y / x for x, y in zip(a, c)))} (median {med(c):.2f} s)")
PY
  kill "$server"
fi

if on 7; then
  # 7. Per-recipe overhead. Each build starts from an empty home but for the host tools'
  #    identities (tool-identities.json, asked once here: a build asks them once, not per
  #    recipe), so the figure is the recipes' own cost: source, steps, store, deploy, records.
  unset ROCMFORGE_CACHE_DIR ROCMFORGE_WORK_DIR ROCMFORGE_STATE_DIR ROCMFORGE_CONFIG
  pr=$out/per-recipe
  for kind in chain flat; do
    t=$pr/$kind/recipes/perrecipe
    mkdir -p "$t"
    printf '[stack]\nname = "perrecipe"\nrocm-version = "0.0"\nsummary = "30 recipes of one true step"\ndefault-targets = ["gfx1010"]\n' > "$t/stack.toml"
    for i in $(seq -w 0 29); do
      dep=""
      if [ "$kind" = chain ] && [ "$i" != 00 ]; then dep=$(printf '\n[dependencies]\nbuild = ["r%02d"]\n' $((10#$i - 1))); fi
      printf '[package]\nname = "r%s"\nversion = "1.0"\nsummary = "one true step"\n%s\n[build]\nsystem = "script"\nsteps = ["true"]\n\n[targets]\ngpu = false\n' "$i" "$dep" > "$t/r$i.toml"
    done
  done
  seed=$pr/seed && mkdir -p "$seed"
  env HOME="$seed" XDG_STATE_HOME="$seed/state" XDG_CACHE_HOME="$seed/cache" XDG_CONFIG_HOME="$seed/config" \
    "$rf" --quiet --recipes "$pr/chain" --stack perrecipe plan r29 >/dev/null
  python3 - "$rf" "$pr" "${PER_RECIPE_PAIRS:-5}" "${NIGHT2_PAIRS:-3}" "${NIGHT2_UNIT:-3}" "$PWD/tests/fixtures/night" <<'PY' | tee -a "$results"
import os, shutil, statistics, subprocess, sys, time
rf, pr, pairs, npairs, unit, night = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
before = os.environ.get("RF_BEFORE")
ids = f"{pr}/seed/state/rocmforge/tool-identities.json"
def build(binary, tree, stack, recipes, home, extra=()):
    shutil.rmtree(home, ignore_errors=True)
    os.makedirs(f"{home}/state/rocmforge")
    if os.path.exists(ids):
        shutil.copy(ids, f"{home}/state/rocmforge/")
    os.makedirs(f"{home}/out")
    with open(f"{home}/out/unit", "w") as f:
        f.write(f"{unit:g}")
    env = dict(os.environ, HOME=home, XDG_STATE_HOME=f"{home}/state", XDG_CACHE_HOME=f"{home}/cache", XDG_CONFIG_HOME=f"{home}/config")
    argv = [binary, "--quiet", "--recipes", tree, "--stack", stack, "build", *recipes, "-j", "2", "--compiler-cache", "none", "--prefix", f"{home}/out/prefix", *extra]
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.perf_counter() - t
    shutil.rmtree(home, ignore_errors=True)
    return t
med = statistics.median
fig = lambda r: f"{min(r):.2f}x / {med(r):.2f}x / {max(r):.2f}x"
ms = lambda v: f"{min(v):.1f} / {med(v):.1f} / {max(v):.1f} ms"
all30 = [f"r{i:02d}" for i in range(30)]
for kind, recipes in [("chain", ["r29"]), ("flat", all30)] if pairs else []:
    new, old = [], []
    for _ in range(pairs):
        new.append(build(rf, f"{pr}/{kind}", "perrecipe", recipes, f"{pr}/home-new") / 30 * 1000)
        if before:
            old.append(build(before, f"{pr}/{kind}", "perrecipe", recipes, f"{pr}/home-before") / 30 * 1000)
    line = f"- per recipe, 30 recipes of one `true` step, {kind}, -j 2, {pairs} runs: {ms(new)} (min / median / max; target < 50 ms)"
    if before:
        line += f"; RF_BEFORE {ms(old)}; per-pair ratio new / before {fig(sorted(n / o for n, o in zip(new, old)))}"
    print(line)
bound = 18 * unit
nights = "zeta-4 a b c d e f g h i j k l".split()
new, old = [], []
for _ in range(npairs):
    new.append(build(rf, night, "night", nights, f"{pr}/night-new") / bound)
    if before:
        old.append(build(before, night, "night", nights, f"{pr}/night-before") / bound)
if not npairs:
    sys.exit(0)
line = f"- the 16-recipe sleep graph, -j 2, {unit:g} s a unit, vs its bound ({bound:g} s), {npairs} runs: {fig(new)} (target <= 1.12x)"
if before:
    line += f"; RF_BEFORE {fig(old)}; per-pair ratio new / before {fig(sorted(n / o for n, o in zip(new, old)))}"
print(line)
PY
  rm -rf "$pr"
fi

if on 8; then
# 8. A wheel member read back and forth. The library is clang-15's (ci/setup.sh installs it),
#    put in a wheel here by Python's zipfile.
lib=$(readlink -f /usr/lib/llvm-15/lib/libLLVM-15.so)
iw=$out/inspect && mkdir -p "$iw"
python3 - "$lib" "$iw/big-1.0-py3-none-any.whl" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as z:
    z.write(sys.argv[1], "big/libLLVM.so")
PY
python3 - "${INSPECT_PAIRS:-5}" "$rf" "$iw/big-1.0-py3-none-any.whl" "$(stat -c %s "$lib")" <<'PY' | tee -a "$results"
import os, statistics, subprocess, sys, time
pairs, rf, wheel, size = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
def run(argv):
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t
ours, unzip = [], []
for _ in range(pairs):
    ours.append(run([rf, "inspect", wheel]))
    unzip.append(run(["unzip", "-p", wheel, "big/libLLVM.so"]))
r = sorted(a / b for a, b in zip(ours, unzip))
print(f"- inspect of a wheel's {size / 2**20:.0f} MiB deflated library vs unzip -p of it, {pairs} pairs: "
      f"{r[0]:.2f}x / {statistics.median(r):.2f}x / {r[-1]:.2f}x "
      f"(medians {statistics.median(ours):.2f} s vs {statistics.median(unzip):.2f} s; target <= 2x)")
PY
rm -rf "$iw"
fi

echo "results: $results"
