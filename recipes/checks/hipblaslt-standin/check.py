#!/usr/bin/env python3
"""The hipBLASLt stand-in's check (issue 33): a program calling the functions of hipBLASLt
6.2.4's public headers listed in symbols.txt (67 of the 69 they declare: not GemmInstance's move
constructor and move assignment, hipblaslt-ext.hpp:206-207), links against the installed library and gets a
clean status from each (no abort, no crash, no hang; a hipblasStatus_t value; never an
algorithm), each call in its own process. Then the configure probes (probes.txt) take the
branch they take against the real 6.2.4 headers.

Exit 0 when all holds; 1 naming every symbol, call or probe that does not. Python 3.10+.
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The names the calls in symbols.txt use, set up in every process before its one call. What the
# setup creates may fail (no GPU: hipblasLtCreate answers an error and `h` stays null); the calls
# must answer that cleanly too.
PRELUDE = r"""
#include <hipblaslt/hipblaslt.h>
#include <hipblaslt/hipblaslt-ext.hpp>
#include <hipblaslt/hipblaslt-ext-op.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// GemmInstance's constructor is protected: reached as a derived class would.
struct Instance : hipblaslt_ext::GemmInstance {
    explicit Instance(hipblasLtHandle_t h) : GemmInstance(h, hipblaslt_ext::GemmType::HIPBLASLT_GEMM) {}
};

static void report(hipblasStatus_t s) { std::printf("status=%d\n", static_cast<int>(s)); }
template <class T> static void report(const T&) { std::printf("returned\n"); }
template <class F> static void call(F f) {
    if constexpr (std::is_void_v<decltype(f())>) {
        f();
        std::printf("returned\n");
    } else {
        report(f());
    }
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const int which = std::atoi(argv[1]);
    hipblasLtHandle_t h = nullptr;
    hipblasLtCreate(&h);
    hipblasLtMatmulDesc_t md = nullptr;
    hipblasLtMatmulDescCreate(&md, HIPBLAS_COMPUTE_32F, HIP_R_32F);
    hipblasLtMatrixLayout_t la = nullptr;
    hipblasLtMatrixLayoutCreate(&la, HIP_R_32F, 4, 4, 4);
    hipblasLtMatmulPreference_t pref = nullptr;
    hipblasLtMatmulPreferenceCreate(&pref);
    hipblasLtMatrixTransformDesc_t td = nullptr;
    hipblasLtMatrixTransformDescCreate(&td, HIP_R_32F);
    hipblasLtHandle_t h2 = nullptr;
    hipblasLtMatrixLayout_t la2 = nullptr;
    hipblasLtMatmulDesc_t md2 = nullptr;
    hipblasLtMatmulPreference_t pref2 = nullptr;
    hipblasLtMatrixTransformDesc_t td2 = nullptr;
    int ver = 0, cnt = 0;
    char rev[256] = {};
    char* arch = nullptr;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    size_t sz = 0;
    float one = 1, zero = 0;
    hipStream_t stream = nullptr;
    hipblasLtMatmulAlgo_t algo{};
    hipblasLtMatmulHeuristicResult_t res[4]{};
    std::vector<hipblasLtMatmulHeuristicResult_t> results;
    std::vector<int> index{0};
    hipblaslt_ext::GemmPreference gp;
    hipblaslt_ext::GemmEpilogue epi;
    hipblaslt_ext::GemmInputs inputs;
    hipblaslt_ext::GemmTuning tuning;
    hipblaslt_ext::GemmProblemType ptype{HIPBLAS_OP_N, HIPBLAS_OP_N, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIPBLAS_COMPUTE_32F};
    std::vector<int64_t> sizes{4};
    std::vector<hipblaslt_ext::GemmEpilogue> epis{epi};
    std::vector<hipblaslt_ext::GemmInputs> inputss{inputs};
    std::vector<hipblasLtMatmulDesc_t> mds{md};
    std::vector<void*> ptrs{nullptr};
    std::vector<hipblasLtMatrixLayout_t> las{la};
    hipblaslt_ext::Gemm gemm(h, HIPBLAS_OP_N, HIPBLAS_OP_N, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIPBLAS_COMPUTE_32F);
    hipblaslt_ext::Gemm gemm2(h, HIPBLAS_OP_N, HIPBLAS_OP_N, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIPBLAS_COMPUTE_32F);
    hipblaslt_ext::GroupedGemm grouped(h, HIPBLAS_OP_N, HIPBLAS_OP_N, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIPBLAS_COMPUTE_32F);
    hipblaslt_ext::GroupedGemm grouped2(h, HIPBLAS_OP_N, HIPBLAS_OP_N, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIP_R_32F, HIPBLAS_COMPUTE_32F);
    std::printf("setup\n");
    std::fflush(stdout);
    switch (which) {
"""

EPILOGUE = r"""
    default: return 2;
    }
    std::printf("results=%zu count=%d\n", results.size(), cnt);
    return 0;
}
"""

# hipblasStatus_t: HIPBLAS_STATUS_SUCCESS (0) .. HIPBLAS_STATUS_UNKNOWN (11) (hipBLAS 2.2's
# hipblas.h); anything else is not a status.
STATUSES = range(0, 12)
CALL_TIMEOUT = 60


class Entry:
    def __init__(self, line_no, header, symbol, call, no_success):
        self.line_no, self.header, self.symbol, self.call, self.no_success = line_no, header, symbol, call, no_success

    def where(self, listing):
        return f"{listing.name}:{self.line_no}"


def read_list(path):
    entries, problems = [], []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) not in (3, 4) or not all(parts[:3]) or (len(parts) == 4 and parts[3] != "no-success"):
            problems.append(f"{path.name}:{n}: want `header | symbol | call [| no-success]`, got `{line}`")
            continue
        entries.append(Entry(n, parts[0], parts[1], parts[2], len(parts) == 4))
    return entries, problems


def read_probes(path):
    probes, problems = [], []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 4 or parts[2] not in ("compile", "link") or parts[3] not in ("ON", "OFF"):
            problems.append(f"{path.name}:{n}: want `flag | file | compile|link | ON|OFF`, got `{line}`")
            continue
        probes.append((n, parts[0], parts[1], parts[2], parts[3]))
    return probes, problems


def defined_symbols(nm, library):
    out = subprocess.run([nm, "-DC", "--defined-only", str(library)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"hipblaslt-standin: `{nm} -DC --defined-only {library}` failed: {out.stderr.strip()}")
    names = set()
    for line in out.stdout.splitlines():
        m = re.match(r"^[0-9a-fA-F]+ [A-Za-z] (.*)$", line)
        if m:
            names.add(m.group(1).strip())
    return names


def compile_cmd(args, source, output, link):
    cmd = [args.cxx, "-std=c++17", "-w", "-D__HIP_PLATFORM_AMD__", f"-I{args.prefix}/include"]
    cmd += [f"-I{root}/include" for root in args.rocm]
    cmd += [str(source), "-o", str(output)]
    if link:
        cmd += [f"-L{args.prefix}/lib", "-lhipblaslt", f"-Wl,-rpath,{args.prefix}/lib"]
        for root in args.rocm:
            if Path(root, "lib").is_dir():
                cmd += [f"-L{root}/lib", f"-Wl,-rpath,{root}/lib"]
    else:
        cmd.insert(1, "-c")
    return cmd


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cxx", default="c++", help="the C++ compiler (PyTorch's probes use its host compiler)")
    p.add_argument("--prefix", required=True, help="where hipBLASLt is installed (include/, lib/)")
    p.add_argument(
        "--rocm",
        action="append",
        default=[],
        help="a root whose include/ holds headers hipBLASLt's include (hip/, hipblas/); repeat for each",
    )
    p.add_argument("--nm", default="nm")
    p.add_argument("--work", default="out")
    p.add_argument("--list", default=str(HERE / "symbols.txt"))
    p.add_argument("--probes", default=str(HERE / "probes.txt"))
    args = p.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    listing = Path(args.list)
    library = Path(args.prefix, "lib", "libhipblaslt.so")
    if not library.exists():
        sys.exit(f"hipblaslt-standin: {library} does not exist: the recipe installed no libhipblaslt.so")

    entries, problems = read_list(listing)
    probes, probe_problems = read_probes(Path(args.probes))
    problems += probe_problems
    if problems:
        sys.exit("hipblaslt-standin: malformed list:\n  " + "\n  ".join(problems))

    # 1. Every listed function is defined by the library, under the name the headers give it.
    defined = defined_symbols(args.nm, library)
    missing = [e for e in entries if e.symbol not in defined]
    if missing:
        print(f"hipblaslt-standin: {library} lacks {len(missing)} of the {len(entries)} public functions:")
        for e in missing:
            print(f"  {e.symbol} ({e.header}; {e.where(listing)})")
        return 1

    # 2. One program calls them all; it must link.
    source = work / "calls.cpp"
    cases = "".join(f"    case {i}: call([&] {{ return {e.call}; }}); break;\n" for i, e in enumerate(entries))
    source.write_text(PRELUDE + cases + EPILOGUE)
    program = work / "calls"
    built = subprocess.run(compile_cmd(args, source, program, link=True), capture_output=True, text=True)
    if built.returncode != 0:
        text = built.stdout + built.stderr
        undefined = sorted(set(re.findall(r"undefined reference to [`']([^']+)'", text)))
        print("hipblaslt-standin: the program calling the listed public functions does not build:")
        for u in undefined:
            print(f"  unresolved: {u}")
        print("\n".join(text.splitlines()[-30:]))
        return 1

    # 3. Each call in its own process: a status, no crash, no algorithm.
    failed = []
    for i, e in enumerate(entries):
        try:
            run = subprocess.run([str(program), str(i)], capture_output=True, text=True, timeout=CALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            failed.append(f"{e.symbol}: hung (no answer in {CALL_TIMEOUT} s) ({e.where(listing)})")
            continue
        out = run.stdout
        if "setup\n" not in out:
            failed.append(f"{e.symbol}: the setup before it did not finish (exit {run.returncode}): {run.stderr.strip()[-300:]}")
        elif run.returncode != 0:
            how = f"signal {-run.returncode}" if run.returncode < 0 else f"exit {run.returncode}"
            failed.append(f"{e.symbol}: {how}, not a status ({e.where(listing)}): {run.stderr.strip()[-300:]}")
        else:
            status = re.search(r"^status=(-?\d+)$", out, re.M)
            found = re.search(r"^results=(\d+) count=(-?\d+)$", out, re.M)
            if status and int(status.group(1)) not in STATUSES:
                failed.append(f"{e.symbol}: answered {status.group(1)}, not a hipblasStatus_t ({e.where(listing)})")
            elif status and e.no_success and int(status.group(1)) == 0:
                failed.append(f"{e.symbol}: answered HIPBLAS_STATUS_SUCCESS for work a library without kernels cannot do ({e.where(listing)})")
            elif not found:
                failed.append(f"{e.symbol}: returned, but the program did not finish ({e.where(listing)})")
            elif found.group(1) != "0" or found.group(2) != "0":
                failed.append(f"{e.symbol}: offered an algorithm ({found.group(1)} results, count {found.group(2)}) ({e.where(listing)})")
            else:
                shown = f"status {status.group(1)}" if status else "returned"
                print(f"  ok {e.symbol}: {shown}")

    # 4. PyTorch's configure probes take the branch they take against the real headers.
    for n, flag, name, how, want in probes:
        obj = work / (Path(name).stem + (".bin" if how == "link" else ".o"))
        r = subprocess.run(compile_cmd(args, HERE / name, obj, link=how == "link"), capture_output=True, text=True)
        got = "ON" if r.returncode == 0 else "OFF"
        verb = "compiles and links" if how == "link" else "compiles"
        print(f"  probe {flag}: {got} ({name} {verb}: {'yes' if got == 'ON' else 'no'}); against hipBLASLt 6.2.4's headers: {want}")
        if got != want:
            failed.append(f"probe {flag} ({name}, probes.txt:{n}) is {got}, {want} against hipBLASLt 6.2.4: {(r.stdout + r.stderr).strip()[-400:]}")

    if failed:
        print(f"hipblaslt-standin: {len(failed)} problem(s):")
        for f in failed:
            print(f"  {f}")
        return 1
    print(f"hipblaslt-standin: {len(entries)} public functions called, each a clean status; {len(probes)} probes as against 6.2.4")
    return 0


if __name__ == "__main__":
    sys.exit(main())
