#!/usr/bin/env python3
"""Post-install check for MIOpen's legacy composable-kernel kernels (patch miopen 0003-legacy-ck-gfx101x).

MIOpen compiles the kernels of its bundled legacy composable_kernel (the dynamic reduction kernels
ReduceTensor runs, which RNN backward-weights uses for the bias gradient, and the v6r1 dlops
convolution) at run time, with the GPU-target macro its get_ck_common_compiler_flag
(src/include/miopen/solver/ck_utility_common.hpp) emits for the device. With no macro for the
device, config.hpp stops with `#error Need to define (only) one GPU target` on the first LSTM/GRU
backward. This derives, from the tree's own get_ck_common_compiler_flag, the flag string MIOpen
gives each target (nothing about targets is known to this script) and compiles every legacy-CK
kernel a caller of that flag builds, once per target and per named set of build parameters.

Usage: check.py --src <MIOpen source> --clang <clang> --rocm <HIP root> --targets 'gfx1010;gfx1012'
                [--device-libs DIR] [--work DIR]
Exit: 0 all compiled, 1 a compile failed, 2 the tree (or the HIP headers) could not be read.
"""
import argparse, fnmatch, os, re, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernel-common"))
from kernelcheck import TreeError, read  # noqa: E402
import kernelcheck as kc  # noqa: E402

FLAG_HEADER = "src/include/miopen/solver/ck_utility_common.hpp"
FLAG_FUNC = "get_ck_common_compiler_flag"
KERNEL_DIR = "src/composable_kernel/composable_kernel/src/kernel_wrapper"
CMAKE = "src/CMakeLists.txt"
INCLUDES_VAR = "MIOPEN_KERNEL_INCLUDES"

# What MIOpen 6.2's hiprtc path adds to every HIP kernel's options (src/comgr.cpp, hiprtc::BuildHip,
# :1224-1267 at rocm-6.2.2), except -DMIOPEN_DONT_USE_HIP_RUNTIME_HEADERS: hiprtc puts its own
# runtime declarations before the source; plain clang has none, so hip/hip_runtime.h from --rocm
# is included first in their place (before the kernel's own includes, as hiprtc's are, so that
# WORKAROUND_ISSUE_1431's `#define warpSize 32` comes after them). Release builds add
# -Wno-everything (src/hipoc/hipoc_program.cpp:316-317).
HIPRTC_OPTS = ["-include", "hip/hip_runtime.h", "-D__HIP_PLATFORM_AMD__=1", "-Wno-cuda-compat",
               "-fno-gpu-rdc", "-O3", "-Wno-everything"]

# Build parameters the callers pass, one named set per kernel variant. Values follow the callers:
# reductions from src/reducetensor.cpp (dynamic branch: type enums, default tunable {256, 8, 2, 2}
# of reduce_tunables.hpp, op/NaN/indices options, dims); the v6r1 dlops kernel from the first
# fp32/fp16/int8 entry of generate_tunable_list_conv_igemm_fwd_v6r1_dlops_nchw_kcyx_nkhw for a
# 64-channel 3x3 convolution with a 14x14 output (GK0 = C/GK1*9, GK0PerBlock 16: main and
# double-tail loops on, C vector 4). Enum values: data_type_enum.hpp (Half 0, Float 1, Int32 2,
# Int8 3), reduction_enums.hpp (ADD 0).
TUNABLE = {"CK_PARAM_BLOCKSIZE": 256, "CK_PARAM_THREAD_BUFFER_LENGTH": 8,
           "CK_PARAM_ACCESSES_PER_THREAD_INBLOCK": 2, "CK_PARAM_ACCESSES_PER_THREAD_INWARP": 2}
FP32_ADD = {"CK_PARAM_SRC_DATATYPE": 1, "CK_PARAM_DST_DATATYPE": 1, "CK_PARAM_REDUCE_COMPTYPE": 1,
            "CK_PARAM_REDUCE_OP": 0, "CK_PARAM_NAN_PROPAGATE": 1, "CK_PARAM_REDUCE_INDICES": 0,
            "CK_PARAM_SRC2D_PADDING": 1, "CK_PARAM_DST1D_PADDING": 1}
# ReducAddBias (src/ocl/rnnocl.cpp): {1, batch, 4*hidden} -> {1, 1, 4*hidden}: dims 0 and 1 reduced.
RNN_BIAS = dict(TUNABLE, **FP32_ADD, CK_PARAM_IN_DIMS=3, CK_PARAM_OUT_DIMS=1,
                CK_PARAM_NUM_TOREDUCE_DIMS=2)
ALL_DIMS = dict(TUNABLE, **FP32_ADD, CK_PARAM_IN_DIMS=3, CK_PARAM_OUT_DIMS=1)


def v6r1(ab, acc, c, gk1, gk0_per_block, a_slice, b_slice):
    d = {"CK_PARAM_ABDataTypeEnum": ab, "CK_PARAM_AccDataTypeEnum": acc, "CK_PARAM_CDataTypeEnum": c,
         "CK_PARAM_BlockSize": 256, "CK_PARAM_GN0": 1, "CK_PARAM_GK1": gk1,
         "CK_PARAM_GM1PerBlockGM11": 128, "CK_PARAM_GN1PerBlockGN11": 128,
         "CK_PARAM_GK0PerBlock": gk0_per_block, "CK_PARAM_BM1PerThreadBM11": 4,
         "CK_PARAM_BN1PerThreadBN11": 4, "CK_PARAM_BK0PerThread": 1,
         "CK_PARAM_BM10BN10ThreadClusterBM10Xs": "8,2", "CK_PARAM_BM10BN10ThreadClusterBN10Xs": "8,2",
         "CK_PARAM_ABlockTransferThreadSliceLengths_GK0_GM0_GM10_GM11_GK1": a_slice,
         "CK_PARAM_ABlockTransferThreadClusterLengths_GK0_GM0_GM10_GM11_GK1": "4,1,1,64,1",
         "CK_PARAM_ABlockTransferSrcVectorTensorLengths_GK0_GM0_GM10_GM11_GK1": "4,1,1,1,1",
         "CK_PARAM_ABlockTransferDstVectorTensorLengths_GK0_GM0_GM10_GM11_GK1": "1,1,1,1,1",
         "CK_PARAM_BBlockTransferThreadSliceLengths_GK0_GN0_GN10_GN11_GK1": b_slice,
         "CK_PARAM_BBlockTransferThreadClusterLengths_GK0_GN0_GN10_GN11_GK1": "8,1,1,32,1",
         "CK_PARAM_BBlockTransferSrcVectorTensorLengths_GK0_GN0_GN10_GN11_GK1": "1,1,1,4,1",
         "CK_PARAM_BBlockTransferDstVectorTensorLengths_GK0_GN0_GN10_GN11_GK1": "1,1,1,4,1",
         "CK_PARAM_CThreadTransferDstScalarPerVector": 4, "CK_PARAM_HasMainKBlockLoop": 1,
         "CK_PARAM_HasDoubleTailKBlockLoop": 1}
    return d


# (kernel file pattern, [(set name, defines)]): every kernel a caller builds must match one; the
# first match counts. An empty list names a kernel file MIOpen never builds, with the reason.
VARIANTS = [
    # getReductionMethod (src/reducetensor.cpp:139-178 at rocm-6.2.2): with every dimension reduced
    # (invariantLength 1) the first call is blockwise or multiblock, never threadwise or warpwise.
    # Both files also fail to compile upstream for every target (a `dstdDesc` typo under
    # CK_PARAM_DST1D_PADDING, a `using X typename ...` missing its `=`): dead code.
    (r"gridwise_generic_reduction_first_call_(threadwise|warpwise)_reduce_all_dims\.cpp$", []),
    (r"gridwise_generic_reduction_.*_reduce_partial_dims\.cpp$", [("rnn-bias-fp32", RNN_BIAS)]),
    (r"gridwise_generic_reduction_.*_reduce_all_dims\.cpp$", [("all-dims-fp32", ALL_DIMS)]),
    (r"convolution_forward_implicit_gemm_v6r1_dlops_nchw_kcyx_nkhw\.cpp$", [
        # fp32: inner_product float (v_mac/v_fmac asm); fp16: half2 (v_dot2 when the config
        # defines it). A config that promises an instruction the target lacks fails here. (int8,
        # v_dot4, is left out: its compile alone takes 3 minutes on 2 cores.)
        ("v6r1-fp32", v6r1(1, 1, 1, 1, 16, "4,1,1,2,1", "2,1,1,4,1")),
        ("v6r1-fp16", v6r1(0, 1, 0, 2, 16, "4,1,1,2,2", "2,1,1,4,2")),
    ]),
]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def balanced(text, i, open_="(", close=")"):
    """text[i] is `open_`: (inside, index after the matching `close`)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return text[i + 1:j], j + 1
    raise TreeError("unbalanced %s in %s" % (open_, text[i:i + 60]))


def split_top(text, sep):
    """Split at `sep` outside parentheses and string literals."""
    out, depth, cur, i, quote = [], 0, "", 0, None
    while i < len(text):
        ch = text[i]
        if quote:
            cur += ch
            if ch == "\\":
                cur += text[i + 1]
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote, cur = ch, cur + ch
        elif ch == "(":
            depth, cur = depth + 1, cur + ch
        elif ch == ")":
            depth, cur = depth - 1, cur + ch
        elif depth == 0 and text.startswith(sep, i):
            out.append(cur)
            cur, i = "", i + len(sep)
            continue
        else:
            cur += ch
        i += 1
    return out + [cur]


class FlagFunction:
    """get_ck_common_compiler_flag of a tree, evaluated for a device name."""

    def __init__(self, path):
        self.where = str(path)
        text = strip_comments(read(path))
        m = re.search(r"\b%s\s*\([^)]*\)\s*\{" % FLAG_FUNC, text)
        if not m:
            raise TreeError("%s: no %s(...) { ... }" % (path, FLAG_FUNC))
        self.body, _ = balanced(text, m.end() - 1, "{", "}")
        # bool helpers of the same file: static inline bool f(const std::string& x) { return ...; }
        self.helpers = {}
        for h in re.finditer(r"\bbool\s+(\w+)\s*\(\s*const\s+std::string\s*&\s*(\w+)\s*\)\s*\{", text):
            inner, _ = balanced(text, h.end() - 1, "{", "}")
            r = re.fullmatch(r"\s*return\s+(.*);\s*", inner, re.S)
            if r:
                self.helpers[h[1]] = (h[2], r[1])

    def cond(self, expr, device, var="device_name"):
        expr = expr.strip()
        ors = split_top(expr, "||")
        if len(ors) > 1:
            return any(self.cond(e, device, var) for e in ors)
        ands = split_top(expr, "&&")
        if len(ands) > 1:
            return all(self.cond(e, device, var) for e in ands)
        if expr.startswith("!"):
            return not self.cond(expr[1:], device, var)
        if expr.startswith("("):
            inner, end = balanced(expr, 0)
            if not expr[end:].strip():
                return self.cond(inner, device, var)
        m = re.fullmatch(r'StartsWith\(\s*(\w+)\s*,\s*"([^"]*)"\s*\)', expr)
        if m and m[1] == var:
            return device.startswith(m[2])
        m = re.fullmatch(r'(\w+)\s*==\s*"([^"]*)"', expr)
        if m and m[1] == var:
            return device == m[2]
        # MIOPEN_DEBUG_* environment switches: unset, as in a default run
        if re.fullmatch(r"(miopen::)?env::(disabled|enabled)\(\s*\w+\s*\)", expr):
            return False
        m = re.fullmatch(r"(\w+)\(\s*(\w+)\s*\)", expr)
        if m and m[1] in self.helpers and m[2] == var:
            param, body = self.helpers[m[1]]
            return self.cond(body, device, param)
        raise TreeError("%s: cannot evaluate `%s` in %s" % (self.where, " ".join(expr.split()), FLAG_FUNC))

    def item(self, item, device):
        item = item.strip()
        if re.fullmatch(r'"(?:[^"\\]|\\.)*"', item):
            return item[1:-1]
        if item.startswith("("):
            item, _ = balanced(item, 0)
        m = re.fullmatch(r"(.*)\?\s*('[^']*'|\"[^\"]*\")\s*:\s*('[^']*'|\"[^\"]*\")\s*", item, re.S)
        if m:
            return (m[2] if self.cond(m[1], device) else m[3])[1:-1]
        raise TreeError("%s: cannot evaluate `%s` in %s" % (self.where, " ".join(item.split()), FLAG_FUNC))

    def statement(self, stmt, device):
        parts = split_top(stmt, "<<")
        if parts[0].strip() != "compiler_flag":
            raise TreeError("%s: unexpected statement `%s`" % (self.where, " ".join(stmt.split())))
        return "".join(self.item(p, device) for p in parts[1:])

    def flags(self, device):
        out, body, i = [], self.body, 0
        chain_taken = None
        tok = re.compile(r"\belse\s+if\s*\(|\bif\s*\(|\belse\b|\bcompiler_flag\s*<<")
        while True:
            m = tok.search(body, i)
            if not m:
                break
            word = m[0]
            if word.startswith("compiler_flag"):
                end = body.index(";", m.start())
                out.append(self.statement(body[m.start():end], device))
                i, chain_taken = end + 1, None
                continue
            if word.startswith("else") and "if" not in word:
                active, j = not chain_taken, m.end()
                chain_taken = True
            else:
                cond, j = balanced(body, m.end() - 1)
                val = self.cond(cond, device)
                if word.startswith("else"):
                    active = (not chain_taken) and val
                    chain_taken = chain_taken or val
                else:
                    active = chain_taken = val
            rest = body[j:].lstrip()
            j = len(body) - len(rest)
            if rest.startswith("{"):
                block, i = balanced(body, j, "{", "}")
                stmts = [s for s in block.split(";") if s.strip()]
            else:
                end = body.index(";", j)
                stmts, i = [body[j:end]], end + 1
            if active:
                out += [self.statement(s, device) for s in stmts]
            if not re.match(r"\s*else\b", body[i:]):
                chain_taken = None
        return "".join(out)


def callers(src):
    """{caller .cpp: string literals} for the sources that call get_ck_common_compiler_flag."""
    out = {}
    for cpp in sorted((src / "src").rglob("*.cpp")):
        rel = cpp.relative_to(src).as_posix()
        if rel.startswith(("src/composable_kernel/", "src/kernels/")):
            continue
        text = strip_comments(read(cpp))
        if re.search(r"\b%s\s*\(" % FLAG_FUNC, text):
            out[rel] = set(re.findall(r'"([^"\\]*)"', text))
    return out


def kernels_built(src, calls):
    """{kernel file: [callers]}: legacy-CK kernel sources a caller names, whole (`x.cpp`) or by a
    name prefix it completes at run time (`gridwise_generic_reduction_first_call_` + ...)."""
    kdir = src / KERNEL_DIR
    if not kdir.is_dir():
        raise TreeError("%s: no %s directory" % (src, KERNEL_DIR))
    built, unused = {}, []
    for k in sorted(p.name for p in kdir.glob("*.cpp")):
        users = [c for c, lits in calls.items()
                 if k in lits or any(len(l) >= 8 and l.endswith("_") and k.startswith(l) for l in lits)]
        if users:
            built[k] = users
        else:
            unused.append(k)
    return built, unused


def kernel_includes(src, work):
    """MIOpen hands hiprtc its kernel headers by base name (MIOPEN_KERNEL_INCLUDES of
    src/CMakeLists.txt, GetKernelIncList): the same flat set, as links in one directory."""
    text = strip_comments(re.sub(r"#[^\n]*", "", read(src / CMAKE)))
    globs = {v: (kind, pat) for kind, v, pat in
             re.findall(r'file\(\s*(GLOB_RECURSE|GLOB)\s+(\w+)\s+"([^"]+)"\s*\)', text)}
    m = re.search(r"set\(\s*%s\b([^)]*)\)" % INCLUDES_VAR, text)
    if not m:
        raise TreeError("%s: no set(%s ...)" % (CMAKE, INCLUDES_VAR))
    base, files = src / "src", []
    for tok in m[1].split():
        v = re.fullmatch(r"\$\{(\w+)\}", tok)
        if not v:
            files.append(base / tok)
            continue
        if v[1] not in globs:
            raise TreeError("%s: %s uses ${%s}, not a file(GLOB...) of that file" % (CMAKE, INCLUDES_VAR, v[1]))
        kind, pat = globs[v[1]]
        if kind == "GLOB":
            files += sorted(base.glob(pat))
        else:  # GLOB_RECURSE: any depth below the pattern's literal directory
            root = base / pat.split("*")[0].rsplit("/", 1)[0]
            files += sorted(p for p in root.rglob("*") if p.is_file()
                            and fnmatch.fnmatch(p.relative_to(base).as_posix(), pat))
    inc = work / "include"
    inc.mkdir(parents=True, exist_ok=True)
    seen, dup, missing = {}, [], 0
    for f in files:
        if not f.is_file():
            missing += 1
            continue
        if f.name in seen:
            if seen[f.name] != f:
                dup.append(f.name)
            continue
        seen[f.name] = f
        link = inc / f.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(f.resolve())
    return inc, len(seen), dup, missing


def variants_for(kernel, text):
    for pat, sets in VARIANTS:
        if re.search(pat, kernel):
            if not sets:
                return None
            used = set(re.findall(r"\bCK_PARAM_\w+", text))
            for name, defs in sets:
                lacking = sorted(used - set(defs))
                if lacking:
                    raise TreeError("%s uses %s, which set %s has no value for" % (kernel, ", ".join(lacking), name))
            return sets
    raise TreeError("%s: built with %s but this script has no build parameters for it" % (kernel, FLAG_FUNC))


def buffer_dwords(inc):
    """{value: [CK_AMD_GPU_* macros of its branch]} for CK_BUFFER_RESOURCE_3RD_DWORD in the
    tree's config.hpp (the legacy CK buffer resource's third dword, per target family)."""
    cfg = inc / "config.hpp"
    if not cfg.is_file():
        return {}
    out, cond = {}, ""
    for line in strip_comments(read(cfg)).replace("\\\n", " ").splitlines():
        m = re.match(r"\s*#\s*(if|elif|else)\b(.*)", line)
        if m:
            cond = m[2]
        d = re.match(r"\s*#\s*define\s+CK_BUFFER_RESOURCE_3RD_DWORD\s+(0x[0-9a-fA-F]+)", line)
        if d:
            out.setdefault(int(d[1], 16), []).extend(re.findall(r"CK_AMD_GPU_(GFX\w+)", cond))
    return out


def dword_problem(dwords, target, asm):
    """Whether a gfx10+ target's code holds the gfx9 buffer resource dword instead of the one
    config.hpp gives gfx103x (the GFX10 descriptor layout). Returns (found, problem)."""
    found = sorted(v for v in dwords if re.search(r"\b0x0*%x\b" % v, asm, re.I))
    gfx10 = [v for v, macros in dwords.items() if any(m.startswith("GFX103") for m in macros)]
    gfx9 = [v for v, macros in dwords.items() if any(m.startswith("GFX9") for m in macros)]
    if not re.match(r"gfx1\d\d", target) or not gfx10:
        return found, None
    if any(v in found for v in gfx9) and not any(v in found for v in gfx10):
        return found, "the code builds buffer resources with dword %#010x (the gfx9 value), not %#010x (config.hpp's gfx10 value)" % (
            gfx9[0], gfx10[0])
    return found, None


def compile_one(a, inc, kfile, target, flag, defs, log):
    device = target.split(":")[0]
    cmd = [a.clang, "-x", "hip", "--cuda-device-only", "--offload-arch=" + target,
           "--rocm-path=" + str(a.rocm)] + flag.split() + HIPRTC_OPTS
    # hiprtc::BuildHip adds it on gfx10/gfx11 (wave32), where the kernels then define warpSize 32
    if device.startswith(("gfx10", "gfx11")):
        cmd.append("-DWORKAROUND_ISSUE_1431=1")
    cmd += ["-D%s=%s" % kv for kv in sorted(defs.items())] + ["-I" + str(inc)]
    if a.device_libs:
        cmd += ["--rocm-device-lib-path=" + a.device_libs, "-c", str(kfile), "-o", str(log.with_suffix(".hsaco"))]
    else:  # no device libraries: stop at the GPU assembly, then assemble it (inline asm is
        # only checked by the assembler: a `-S` alone passes an instruction the target lacks)
        cmd += ["-nogpulib", "-S", str(kfile), "-o", str(log.with_suffix(".s"))]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    out, cmds = r.stderr, " ".join(cmd)
    if r.returncode == 0 and not a.device_libs:
        asm = [a.clang, "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=" + device,
               "-c", str(log.with_suffix(".s")), "-o", str(log.with_suffix(".o"))]
        r = subprocess.run(asm, capture_output=True, text=True)
        out, cmds = out + r.stderr, cmds + "\n" + " ".join(asm)
    log.write_text(cmds + "\n\n" + out)
    asm_path = log.with_suffix(".s")
    asm = asm_path.read_text(errors="replace") if r.returncode == 0 and asm_path.is_file() else ""
    lines = out.splitlines()
    errs = [i for i, l in enumerate(lines) if "error" in l]
    shown = []
    for i in errs[:3]:
        shown += lines[i:i + 2]
    return r.returncode == 0, shown[:6], time.time() - t0, asm


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, type=Path, help="MIOpen source tree")
    ap.add_argument("--clang", required=True, help="clang with the AMDGPU target")
    ap.add_argument("--rocm", required=True, type=Path, help="root holding include/hip/hip_runtime.h")
    ap.add_argument("--targets", required=True, help="e.g. 'gfx1010;gfx1012'")
    ap.add_argument("--work", type=Path, help="include links, outputs and logs (default: a new temp dir)")
    ap.add_argument("--device-libs", help="device-libs bitcode dir: link a code object "
                    "(default: -nogpulib, stop at the GPU assembly)")
    ap.add_argument("--json", type=Path, help="also write the results here, one object per compile")
    a = ap.parse_args()
    targets = kc.targets_arg(ap, a.targets)
    src = a.src.resolve()
    work = kc.work_dir(a.work, "miopen-legacy-ck-").resolve()
    t0 = time.time()
    try:
        if not (a.rocm / "include" / "hip" / "hip_runtime.h").is_file():
            raise TreeError("%s: no include/hip/hip_runtime.h (the HIP headers the kernels include)" % a.rocm)
        manifest = kc.embedded_manifest(src)
        assumed = []
        if manifest is None:
            func = FlagFunction(src / FLAG_HEADER)
            flags = {t: func.flags(t.split(":")[0]) for t in targets}
            calls = callers(src)
            if not calls:
                raise TreeError("%s: no .cpp under src/ calls %s" % (src, FLAG_FUNC))
            built, unused = kernels_built(src, calls)
            if not built:
                raise TreeError("%s: no kernel in %s is named by a caller of %s" % (src, KERNEL_DIR, FLAG_FUNC))
            kdir = src / KERNEL_DIR
        else:
            # A tree read out of a library: no host code. The reductions ReduceTensor builds
            # (what RNN backward reaches); the flag from the library's strings.
            kdir = src / "src" / "kernels"
            flags = {}
            for t in targets:
                flags[t], how = kc.embedded_ck_flag(manifest, t.split(":")[0])
                # hiprtc adds -std=c++17 to options without one (src/comgr.cpp:1285-1288 at 6.2.2)
                flags[t] += " --std=c++17"
                assumed.append("%s: %s" % (t, how))
            assumed.append("--std=c++17 (hiprtc's default); the other parts of get_ck_common_compiler_flag left to config.hpp's defaults")
            built = {p.name: ["the library (no host code)"] for p in sorted(kdir.glob("gridwise_generic_reduction_*.cpp"))}
            unused = []
            if not built:
                raise TreeError("%s: no gridwise_generic_reduction_*.cpp among the library's kernels" % kdir)
        jobs, dead = [], []
        for k, users in built.items():
            sets = variants_for(k, read(kdir / k))
            if sets is None:
                dead.append(k)
                continue
            for name, defs in sets:
                for t in targets:
                    jobs.append((t, k, name, defs, users))
        if manifest is None:
            inc, n_inc, dup, missing = kernel_includes(src, work)
        else:  # MIOpen's flat include folder, as the library hands it over
            inc, n_inc, dup, missing = kdir, len(list(kdir.iterdir())), [], 0
        compiler = kc.compiler_version(a.clang)
    except (TreeError, OSError, ValueError) as e:
        return kc.error(e)
    print("compiler: %s" % compiler)
    if manifest is None:
        print("callers of %s: %s" % (FLAG_FUNC, ", ".join(sorted(calls))))
    else:
        print("tree read out of %s (MIOpen %s): no host code, so the flag is assumed:" % (
            manifest.get("library"), manifest.get("miopen_version") or "?"))
        for line in assumed:
            print("assumed: " + line)
    dwords = buffer_dwords(inc)
    print("kernel headers: %d by base name from %s%s%s" % (
        n_inc, INCLUDES_VAR, "; %d listed but absent" % missing if missing else "",
        "; same name twice, first kept: %s" % ", ".join(sorted(set(dup))) if dup else ""))
    for t in targets:
        macro = re.findall(r"-D(CK_AMD_GPU_\w+)", flags[t])
        print("flag for %s:%s   [%s]" % (t, flags[t], ", ".join(macro) if macro else "NO CK_AMD_GPU_* target macro"))
    for k in unused:
        print("not built with the flag (no caller names it): %s" % k)
    for k in dead:
        print("not built by MIOpen (never selected, see VARIANTS in check.py): %s" % k)
    results = kc.parallel(compile_one, [(a, inc, kdir / k, t, flags[t], defs,
                                         work / ("%s.%s.%s.log" % (t.replace(":", "_"), Path(k).stem, name)))
                                        for t, k, name, defs, _ in jobs])
    failed, rows = 0, []
    for (t, k, name, defs, users), (ok, err, secs, asm) in zip(jobs, results):
        found, problem = dword_problem(dwords, t.split(":")[0], asm) if ok else ([], None)
        if problem:
            ok, err = False, [problem]
        print("%-7s %-8s %-66s %-14s %5.1fs  [%s]%s" % ("ok" if ok else "FAILED", t, k, name, secs, ", ".join(users),
                                                 "  dword " + " ".join("%#x" % v for v in found) if found else ""))
        rows.append({"target": t, "kernel": k, "variant": name, "ok": ok, "message": err,
                     "buffer_dwords": ["%#010x" % v for v in found], "flag": flags[t].strip()})
        if not ok:
            failed += 1
            for line in err:
                print("          | " + line)
    print("summary: %d compiles (%d kernels) for %s: %d ok, %d FAILED in %.0f s; logs in %s" % (
        len(jobs), len(built) - len(dead), ";".join(targets), len(jobs) - failed, failed, time.time() - t0, work))
    kc.write_json(a.json, "miopen-legacy-ck", rows, [], assumed, compiler, not failed)
    return kc.verdict(failed)


if __name__ == "__main__":
    sys.exit(main())
