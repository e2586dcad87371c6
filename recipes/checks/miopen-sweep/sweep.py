#!/usr/bin/env python3
"""Compile every MIOpen kernel file a target can reach, ahead of time.

MIOpen compiles its kernels (OpenCL .cl, HIP .cpp, GCN assembly .s) at run time, so a build
for gfx101x "succeeds" while a kernel that cannot be compiled for gfx101x only fails on the
user's first call. This sweep reads the MIOpen tree (not a list of its own) to find:

- the kernel files: each .cl/.cpp/.s under src/kernels whose name the host code spells, either
  as one string literal or as a concatenation of the host file's literals (names built at run
  time, e.g. "Conv_Winograd" + "_v30_3_1" + "_fp32" + "_f2x3" + "_stride1" + ".s");
- who builds each (the "users": host .cpp files outside src/kernels) and whether a user can
  run on the target: the device-name tests in its IsApplicable (and the helpers it calls,
  found in the tree) are evaluated for the target; a kernel all of whose users refuse the
  target is skipped, naming the user's file:line;
- the build parameters each user passes (`{"NAME", v}`, `-DNAME=`, `GenerateClangDefsym(s,
  "NAME", v)`), given sample values (fp32; see SAMPLE), and the data-type switches of
  GetDataTypeKBP (src/include/miopen/datatype.hpp).

Each reachable kernel is compiled for each --targets entry and for a --control target
(gfx900 by default). A compile that fails on a target and passes on the control is a
target-specific failure; one that fails on both is a defect of the sweep's sample values
("inconclusive"), not of the kernel. Target failures named in a --known file are reported as
known; any other target failure makes the exit status 1.

Usage: sweep.py --src <MIOpen tree> --clang <clang> --targets 'gfx1010;gfx1012'
                [--device-libs DIR] [--rocm-path DIR] [--control gfx900] [--known FILE]...
                [--exclusions FILE] [--work DIR] [--jobs N] [--only REGEX]
Exit: 0 no unexpected target failure, 1 a target-specific failure not named as known (or a
known failure that no longer fails: the list is stale), 2 the tree or a list could not be read.
"""
import argparse, fnmatch, os, re, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernel-common"))
from kernelcheck import TreeError, read  # noqa: E402
import kernelcheck as kc  # noqa: E402

# OpenCL: what MIOpen's comgr path passes (src/comgr.cpp ocl::AddCompilerOptions; release
# builds add -Wno-everything in hipoc_program.cpp BuildCodeObject); the OpenCL version is the
# tree's OCL_STANDARD (cl_std: 120 at rocm-5.4.3, 200 at rocm-6.2.x).
CL_FLAGS = ["-x", "cl", "-target", "amdgcn-amd-amdhsa", "-cl-kernel-arg-info",
            "-D__IMAGE_SUPPORT__=1", "-O3", "-Wno-everything",
            "-mllvm", "-amdgpu-early-inline-all", "-mllvm", "-amdgpu-internalize-symbols"]
# HIP: the options hiprtc::BuildHip adds (src/comgr.cpp), device code only. hiprtc supplies
# the HIP runtime declarations itself; a clang compile gets them from hip_runtime.h (the
# comgr::BuildHip path, MIOPEN_DEBUG_USE_HIPRTC=0), so MIOPEN_DONT_USE_HIP_RUNTIME_HEADERS
# is not defined and hip_runtime.h is included first.
HIP_FLAGS = ["-x", "hip", "--cuda-device-only", "-O3", "-std=c++17", "-fno-gpu-rdc",
             "-D__HIP_PLATFORM_AMD__=1", "-Wno-everything", "-include", "hip/hip_runtime.h"]
# Assembly: comgr's ASSEMBLE_SOURCE_TO_RELOCATABLE (src/comgr.cpp BuildAsm).
ASM_FLAGS = ["-x", "assembler", "-target", "amdgcn-amd-amdhsa"]

# Sample values for build parameters (a solver derives them from the problem; one small fp32
# problem is enough to compile). Names not listed get 1; *_TYPE names a type.
SAMPLE = {
    # batchnorm (as the miopen-batchnorm check): N=4 C=8 HW=64, 256-wide groups
    "MIO_BN_N": 4, "MIO_BN_C": 8, "MIO_BN_HW": 64, "MIO_BN_NHW": 256, "MIO_BN_CHW": 512,
    "MIO_BN_NCHW": 2048, "MIO_BN_GRP0": 256, "MIO_BN_LDS_SIZE": 256, "MIO_BN_LDSGCN_SIZE": 4,
    "MIO_WAVESIZE": 64, "MIO_BN_CBA_WRITE_INTERMEDIATE": 0, "MIO_LAYOUT_NHWC": 0,
    "MIOPEN_READ_UNIT": 4, "MIOPEN_READ_TYPE": "_FLOAT4",
    # asm kernels: metadata v3 (code object v3+), which every 6.2 asm solver requires
    "ROCM_METADATA_VERSION": 5,
    # direct conv / generic: 3x3, stride 1, pad 1, 64-wide groups
    "MLO_FILTER_SIZE0": 3, "MLO_FILTER_SIZE1": 3, "MLO_FILTER_PAD0": 1, "MLO_FILTER_PAD1": 1,
    "MLO_GRP_SZ": 64, "MLO_GRP_SZ0": 64, "MLO_GRP_SZ1": 1, "MLO_GRP_SZ2": 1,
    "MLO_GRP_TILE0": 8, "MLO_GRP_TILE1": 8, "MLO_OUT_TILE0": 2, "MLO_OUT_TILE1": 2,
    "MLO_IN_TILE0": 16, "MLO_IN_TILE1": 16, "MLO_N_STACKS": 1, "MLO_N_OUT_TILES": 1,
    "MLO_N_OUT_TILES_PERSTACK": 1, "MLO_N_IN_TILES_PERSTACK": 1, "MLO_N_READ_PROCS": 64,
    "MLO_LG2_WAVE_SZ": 6, "MLO_WAVE_SZ": 64, "MLO_READ_UNIT": 4,
    "MLO_N_LCL_IN_MAPS": 1, "MLO_N_LCL_OUT_MAPS": 1, "MLO_IN_WIDTH": 32, "MLO_IN_HEIGHT": 32,
    "MLO_OUT_WIDTH": 32, "MLO_OUT_HEIGHT": 32, "MLO_N_INPUTS": 8, "MLO_N_OUTPUTS": 8,
    "MLO_BATCH_SZ": 2, "MLO_IN_STRIDE": 32, "MLO_OUT_STRIDE": 32,
    "MLO_IN_CHANNEL_STRIDE": 1024, "MLO_OUT_CHANNEL_STRIDE": 1024,
    "MLO_IN_BATCH_STRIDE": 8192, "MLO_OUT_BATCH_STRIDE": 8192,
    "MLO_CONV_BIAS": 0, "MLO_DIR_FORWARD": 1,
    # pooling, LRN
    "MLO_POOLING_OP_ID": 1, "MLO_POOLING_GROUP_SZ0": 8, "MLO_POOLING_GROUP_SZ1": 8,
    "MLO_LRN_GROUP_SZ0": 8, "MLO_LRN_GROUP_SZ1": 8, "MLO_LRN_KERNEL_SZ": 5,
    "MLO_LRN_PAD": 2, "MLO_LRN_PRE_PAD": 2,
    # activation: ReLU
    "MIOPEN_NRN_OP_ID": 3, "MLO_NRN_OP_ID": 3,
}
TYPE_SAMPLE = "float"


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


# ---------------------------------------------------------------- device-name gates

def split_top(expr, op):
    """Split `expr` at top-level occurrences of `op` ("&&" or "||")."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(expr):
        c = expr[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth == 0 and expr.startswith(op, i):
            parts.append("".join(cur))
            cur, i = [], i + len(op)
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def strip_parens(e):
    e = e.strip()
    while e.startswith("(") and e.endswith(")"):
        depth = 0
        for i, c in enumerate(e):
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and i < len(e) - 1:
                return e
        e = e[1:-1].strip()
    return e


class Gates:
    """Three-valued evaluation (True/False/None = unknown) of a C++ condition for a device,
    knowing only device-name tests and helper functions of the tree that test it."""

    def __init__(self, helpers):
        self.helpers = helpers  # name -> body text of a bool helper found in the tree

    def cond(self, e, dev, depth=0):
        e = strip_parens(e)
        ors = split_top(e, "||")
        if len(ors) > 1:
            vals = [self.cond(x, dev, depth) for x in ors]
            return True if True in vals else (None if None in vals else False)
        ands = split_top(e, "&&")
        if len(ands) > 1:
            vals = [self.cond(x, dev, depth) for x in ands]
            return False if False in vals else (None if None in vals else True)
        if e.startswith("!") and not e.startswith("!="):
            v = self.cond(e[1:], dev, depth)
            return None if v is None else not v
        return self.atom(e, dev, depth)

    def atom(self, e, dev, depth):
        m = re.fullmatch(r'(?:miopen::)?StartsWith\(\s*[^,]*,\s*"(gfx\w*)"\s*\)', e, re.S)
        if m:
            return dev.startswith(m[1])
        m = re.fullmatch(r'[\w.:()>\-]*\.find\(\s*"(gfx\w*)"\s*\)\s*(==|!=)\s*std::string::npos', e, re.S)
        if m:
            return (m[1] in dev) == (m[2] == "!=")
        m = re.fullmatch(r'[\w.:()>\-]*\s*(==|!=)\s*"(gfx\w*)"', e, re.S)
        if m:
            return (dev == m[2]) == (m[1] == "==")
        m = re.fullmatch(r'(?:[\w:]+::)?(\w+)\s*(?:<[^()]*>)?\s*\([^()]*(?:\([^()]*\)[^()]*)*\)', e, re.S)
        if m and m[1] in self.helpers and depth < 4:
            return self.body(self.helpers[m[1]], dev, depth + 1)[0]
        if re.fullmatch(r"\w+", e) and e in self.helpers.get("__locals__", {}):
            return self.cond(self.helpers["__locals__"][e], dev, depth)
        return None

    def body(self, text, dev, depth=0):
        """(value, line) for a function body: False if an `if(c) return false;` has c true or
        the final `return e;` is false for `dev`; else None (may be applicable)."""
        saved = self.helpers.get("__locals__")
        self.helpers["__locals__"] = dict(
            re.findall(r'(?:const\s+)?(?:auto|bool)\s+(\w+)\s*=\s*([^;]*\bgfx[^;]*);', text))
        try:
            for m in re.finditer(r"\bif\s*\(", text):
                c, end = balanced(text, m.end() - 1)
                rest = text[end:end + 80]
                if re.match(r"\s*\{?\s*return\s+false\s*;", rest) and "gfx" in self.expand(c):
                    if self.cond(c, dev, depth) is True:
                        return False, line_of(text, m.start())
            rets = list(re.finditer(r"\breturn\s+([^;]+);", text))
            if rets and "gfx" in self.expand(rets[-1][1]):
                if self.cond(rets[-1][1], dev, depth) is False:
                    return False, line_of(text, rets[-1].start())
            return None, 0
        finally:
            self.helpers["__locals__"] = saved

    def expand(self, c):
        """The condition with the helpers it calls (one level), to see if it tests a device."""
        out = c
        for name in re.findall(r"(\w+)\s*\(", c):
            if name in self.helpers and isinstance(self.helpers[name], str):
                out += self.helpers[name]
        for name in re.findall(r"\b\w+\b", c):
            loc = self.helpers.get("__locals__") or {}
            if name in loc:
                out += loc[name]
        return out


def balanced(text, i):
    """(inside, end) of the bracket group starting at text[i]."""
    pairs = {"(": ")", "{": "}"}
    open_, close, depth = text[i], pairs[text[i]], 0
    for j in range(i, len(text)):
        depth += text[j] == open_
        depth -= text[j] == close
        if depth == 0:
            return text[i + 1:j], j + 1
    return text[i + 1:], len(text)


def functions(text, name_re):
    """{name: [(body, line of its opening brace)]} of function definitions whose name matches
    name_re."""
    out = {}
    for m in re.finditer(r"\b(%s)\s*\(" % name_re, text):
        _, end = balanced(text, m.end() - 1)
        tail = re.match(r"\s*(?:const\s*)?(?:override\s*)?\{", text[end:end + 40])
        if tail:
            brace = end + tail.end() - 1
            body, _ = balanced(text, brace)
            # the body's first line is the brace's (MIOpen puts `{` on a line of its own)
            out.setdefault(m[1], []).append((body, line_of(text, brace)))
    return out


# ---------------------------------------------------------------- reading the tree

def literals(text):
    return set(re.findall(r'"((?:[^"\\\n]|\\.)*)"', text))


def segmentable(name, lits):
    """Can `name` be written as a concatenation of the strings in `lits`?"""
    ok = [True] + [False] * len(name)
    for i in range(len(name)):
        if ok[i]:
            for l in lits:
                if l and name.startswith(l, i):
                    ok[i + len(l)] = True
    return ok[len(name)]


def read_tree(src):
    kdir = src / "src" / "kernels"
    if not kdir.is_dir():
        raise TreeError("%s: no src/kernels directory" % src)
    kernels = {}
    # src/kernels, and the bundled legacy composable_kernel's kernel wrappers, which MIOpen
    # embeds the same way (src/CMakeLists.txt COMPOSABLE_KERNEL_SOURCE).
    roots = [kdir] + [d for d in [src / "src" / "composable_kernel" / "composable_kernel" / "src"] if d.is_dir()]
    for p in sorted(q for r in roots for q in r.rglob("*")):
        if p.suffix in (".cl", ".cpp", ".s") and p.is_file():
            kernels.setdefault(p.name, p)
    hosts = {}
    for p in sorted((src / "src").rglob("*")):
        if p.suffix in (".cpp", ".hpp") and kdir not in p.parents and "composable_kernel" not in p.parts:
            hosts[p] = read(p)
    if not hosts:
        raise TreeError("%s: no host sources under src/" % src)
    # bool helpers that test a device name (IsXdlopsSupport, is_ck_supported_hardware ...)
    helpers = {}
    for p, text in hosts.items():
        for m in re.finditer(r"\bbool\s+(\w+)\s*\(", text):
            _, end = balanced(text, m.end() - 1)
            tail = re.match(r"\s*(?:const\s*)?\{", text[end:end + 20])
            if tail:
                body, _ = balanced(text, end + tail.end() - 1)
                if "gfx" in body and m[1] != "IsApplicable":
                    helpers.setdefault(m[1], body)
    return kdir, kernels, hosts, helpers


def users_of(kname, hosts, lits_of):
    """Host files that spell `kname`: as one literal, or as a concatenation of their literals
    (the first piece a literal at least 6 characters long)."""
    out = []
    for p, lits in lits_of.items():
        if kname in lits:
            out.append((p, "literal"))
        elif any(len(l) >= 6 and kname.startswith(l) for l in lits) and segmentable(kname, [l for l in lits if l and l in kname]):
            out.append((p, "built"))
    return out


def gate(path, text, gates, dev):
    """(False, reason) if every IsApplicable in the file refuses `dev`, else (None, '')."""
    fns = functions(text, "IsApplicable\\w*")
    bodies = [b for v in fns.values() for b in v]
    if not bodies:
        return None, ""
    refusals = []
    for body, line in bodies:
        v, l = gates.body(body, dev)
        if v is not False:
            return None, ""
        stmt = body.splitlines()[l - 1].strip() if l else ""
        refusals.append("%s:%d `%s`" % (path.name, line + l - 1, stmt[:90]))
    return False, "; ".join(refusals[:2])


def build_params(text):
    names = set(re.findall(r'[{(]\s*"([A-Z][A-Z0-9_]*[A-Z0-9])"\s*,', text))
    names |= set(re.findall(r'-D([A-Za-z_]\w*)=', text))
    names |= set(re.findall(r'GenerateClangDefsym\(\s*\w+\s*,\s*"(\w+)"', text))
    return names


def device_flag_chains(hosts):
    """{function: [(device prefix, define)]} for host functions that pick a compiler flag by
    device name (`if(StartsWith(device_name, "gfx900")) flag << " -DCK_AMD_GPU_GFX900";`,
    get_ck_common_compiler_flag): a user calling one gets the define its target picks."""
    out = {}
    for text in hosts.values():
        for m in re.finditer(r"\b(?:auto|std::string)\s+(\w+)\s*\([^;{]*\)\s*\{", text):
            body, _ = balanced(text, m.end() - 1)
            chain = re.findall(r'StartsWith\(\s*\w+\s*,\s*"(gfx\w+)"\s*\)\s*\)\s*\w+\s*<<\s*"\s*-D(\w+)"', body)
            if chain:
                out.setdefault(m[1], chain)
    return out


def mode_options(text):
    """Code-generation options a user spells as whole literals (" -mcumode -mwavefrontsize64")."""
    out = []
    for l in literals(text):
        opts = l.split()
        if opts and all(re.fullmatch(r"-m(?:wavefrontsize64|cumode|no-cumode)", o) for o in opts):
            out += [o for o in opts if o not in out]
    return sorted(set(out))


def dtype_params(src):
    p = src / "src" / "include" / "miopen" / "datatype.hpp"
    text = read(p) if p.is_file() else ""
    names = set(re.findall(r'"(MIOPEN_USE_\w+)"', text))
    if not names:
        raise TreeError("%s: no MIOPEN_USE_* data-type switches (GetDataTypeKBP)" % p)
    return {n: int(n == "MIOPEN_USE_FP32") for n in names}


def cl_std(src):
    """-cl-std and __OPENCL_VERSION__ of the tree's src/comgr.cpp `#define OCL_STANDARD 120|200`."""
    comgr = src / "src" / "comgr.cpp"
    m = re.search(r"^\s*#\s*define\s+OCL_STANDARD\s+(\d+)", read(comgr), re.M) if comgr.is_file() else None
    if not m or m[1] not in ("120", "200"):
        raise TreeError("%s: no `#define OCL_STANDARD 120|200` to take the OpenCL version from" % comgr)
    return ["-cl-std=" + ("CL2.0" if m[1] == "200" else "CL1.2"), "-D__OPENCL_VERSION__=" + m[1]]


def sample(name):
    if name in SAMPLE:
        return SAMPLE[name]
    if name.endswith("INDEX_TYPE"):
        return "uint"
    if name.endswith("_TYPE") or name.startswith("_FLOAT"):
        return TYPE_SAMPLE
    return 1


def variants(defines, dtypes):
    """One define set per kernel variant: flags of one family (USE_SOFTMAX_LOG, _FAST,
    _ACCURATE: names that share all but their last `_` part and start with USE_) are one-hot,
    so a kernel is compiled once per member of its largest family, the others cycling."""
    fams = {}
    for n in sorted(defines):
        head, _, tail = n.rpartition("_")
        if n.startswith("USE_") and head and n not in dtypes:
            fams.setdefault(head, []).append(n)
    fams = {h: m for h, m in fams.items() if len(m) > 1}
    count = max([len(m) for m in fams.values()] or [1])
    out = []
    for i in range(count):
        d = dict(defines)
        for members in fams.values():
            for j, n in enumerate(members):
                d[n] = int(j == i % len(members))
        label = "+".join(m[i % len(m)].rpartition("_")[2].lower() for m in fams.values())
        out.append((label or "-", d))
    return out


def data_lines(paths):
    """(file, line number, text) of each line of the list files that is not blank or a comment."""
    for p in paths:
        for n, line in enumerate(read(p).splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                yield p, n, line


def read_known(paths):
    out = []
    for p, n, line in data_lines(paths):
        parts = line.split(None, 2)
        if len(parts) < 3:
            raise TreeError("%s:%d: want `<kernel glob> <target glob> <reason>`" % (p, n))
        out.append((parts[0], parts[1], parts[2], "%s:%d" % (Path(p).name, n)))
    return out


def read_exclusions(paths, src):
    """`<kernel glob> TAB <target glob> TAB <file under src> TAB <regex> TAB <reason>`: kernels
    a solver only builds for other devices in a way the gate reader cannot see (a data-type or
    kernel-version choice inside the solver); the regex must still match the file."""
    out = []
    for p, n, line in data_lines(paths):
        parts = line.split("\t")
        if len(parts) != 5:
            raise TreeError("%s:%d: want 5 tab-separated fields" % (p, n))
        glob, tglob, rel, rx, reason = parts
        f = src / rel
        if not f.is_file():
            raise TreeError("%s:%d: %s is not in the tree (stale exclusion)" % (p, n, rel))
        m = re.search(rx, read(f))
        if not m:
            raise TreeError("%s:%d: `%s` no longer in %s (stale exclusion)" % (p, n, rx, rel))
        out.append((glob, tglob, "%s:%d %s" % (rel, line_of(read(f), m.start()), reason)))
    return out


# ---------------------------------------------------------------- compiling

def asm_target(t):
    """The target ID a dGPU reports (xnack off): comgr assembles for it, and MIOpen's asm
    metadata (.amdhsa_reserve_xnack_mask) must match it (comgr.cpp BuildAsm, WORKAROUND_ISSUE_3001)."""
    return t if ":" in t else t + ":xnack-"


def compile_cmd(a, kdir, kpath, defines, target, out, mopts=()):
    incs = ["-I" + str(kpath.parent), "-I" + str(kdir)] + ["-I" + str(d) for d in a.incdirs if d != kdir]
    if kpath.suffix == ".cl":
        cmd = [a.clang, "-mcpu=" + target] + CL_FLAGS + a.clstd + a.libflags + incs
        cmd += ["-D%s=%s" % kv for kv in sorted(defines.items())]
    elif kpath.suffix == ".cpp":
        cmd = [a.clang, "--offload-arch=" + target] + HIP_FLAGS + a.libflags + a.rocmflags + incs
        cmd += ["-D%s=%s" % kv for kv in sorted(defines.items())]
    else:
        cmd = [a.clang, "-mcpu=" + asm_target(target)] + ASM_FLAGS + incs
        cmd += ["-Wa,-defsym,%s=%s" % kv for kv in sorted(defines.items()) if str(kv[1]).lstrip("-").isdigit()]
    return cmd + list(mopts) + ["-c", str(kpath), "-o", str(out)]


def run_compile(cmd, log):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(" ".join(cmd) + "\n\n" + r.stderr)
    lines = [l for l in r.stderr.splitlines() if "error" in l]
    return r.returncode == 0, lines[:3], time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, type=Path, help="MIOpen source tree (has src/kernels)")
    ap.add_argument("--clang", required=True, help="clang with the AMDGPU target")
    ap.add_argument("--targets", required=True, help="e.g. 'gfx1010;gfx1012'")
    ap.add_argument("--control", default="gfx900", help="control target (default gfx900)")
    ap.add_argument("--device-libs", help="ROCm device-libs bitcode dir (default: -nogpulib)")
    ap.add_argument("--rocm-path", help="where HIP's include/hip is, for .cpp kernels")
    ap.add_argument("--known", action="append", default=[], help="known target failures")
    ap.add_argument("--exclusions", action="append", default=[], help="kernels out of reach")
    ap.add_argument("--work", type=Path, help="objects and logs (default: a new temp dir)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", help="regex: sweep only kernel files whose name matches")
    a = ap.parse_args()
    targets = kc.targets_arg(ap, a.targets)
    a.libflags = ["--rocm-device-lib-path=" + a.device_libs] if a.device_libs else ["-nogpulib"]
    a.rocmflags = ["--rocm-path=" + a.rocm_path] if a.rocm_path else []
    src = a.src.resolve()
    work = kc.work_dir(a.work, "miopen-sweep-")
    t_start = time.time()
    try:
        kdir, kernels, hosts, helpers = read_tree(src)
        known = read_known(a.known)
        exclusions = read_exclusions(a.exclusions, src)
        dtypes = dtype_params(src)
        a.clstd = cl_std(src)
        compiler = kc.compiler_version(a.clang)
    except (TreeError, OSError) as e:
        return kc.error(e, "sweep")
    gates = Gates(helpers)
    chains = device_flag_chains(hosts)
    # MIOpen hands every kernel include file to the compiler by its bare name (hiprtc's
    # include list, GetKernelIncList), so each directory holding headers is on the path.
    ckinc = src / "src" / "composable_kernel" / "composable_kernel" / "include"
    a.incdirs = sorted({p.parent for r in (kdir, ckinc) if r.is_dir() for p in r.rglob("*")
                        if p.suffix in (".h", ".hpp", ".inc")})
    lits_of = {p: literals(t) for p, t in hosts.items()}
    print("compiler: %s" % compiler)
    print("tree: %s: %d kernel files, %d host files, %d device-testing helpers"
          % (src, len(kernels), len(hosts), len(helpers)))

    rows, jobs = [], []   # rows: [kernel, variant, target, status, detail, errors, seconds]
    unnamed = []
    for kname, kpath in sorted(kernels.items()):
        if a.only and not re.search(a.only, kname):
            continue
        users = users_of(kname, hosts, lits_of)
        if not users:
            unnamed.append(kname)
            continue
        params, mopts = set(), set()
        for p, _ in users:
            params |= build_params(hosts[p])
            mopts |= set(mode_options(hosts[p]))
        defines = {n: sample(n) for n in params}
        defines.update(dtypes)
        users_s = ", ".join("%s (%s)" % (p.relative_to(src / "src"), how) for p, how in users[:3])
        reached = False
        for t in targets + [a.control]:
            dev = t.split(":")[0]
            excl = next((r for g, tg, r in exclusions if fnmatch.fnmatch(kname, g) and fnmatch.fnmatch(dev, tg)), None)
            refusals = [why for v, why in (gate(p.relative_to(src), hosts[p], gates, dev) for p, _ in users) if v is False]
            if t != a.control and (len(refusals) == len(users) or excl):
                rows.append([kname, "-", t, "skipped", "not applicable: " + (excl or refusals[0]), [], 0])
                continue
            if t == a.control and not reached:
                continue  # no target compile to compare with
            reached = True
            tdefs = dict(defines)
            for p, _ in users:
                for fn, chain in chains.items():
                    if re.search(r"\b%s\s*\(" % fn, hosts[p]):
                        hit = next((d for pre, d in chain if dev.startswith(pre)), None)
                        if hit:
                            tdefs[hit] = 1
            for label, d in variants(tdefs, dtypes):
                row = [kname, label, t, None, users_s]
                rows.append(row)
                stem = "%s.%s.%s" % (t.replace(":", "_"), kname, label)
                jobs.append((row, compile_cmd(a, kdir, kpath, d, t, work / (stem + ".o"), sorted(mopts)), work / (stem + ".log")))
    for (row, _, _), (ok, err, secs) in zip(jobs, kc.parallel(run_compile, [(cmd, log) for _, cmd, log in jobs], a.jobs)):
        row[3] = "ok" if ok else "FAILED"
        row += [err, secs]
    # classify target failures against the control compile of the same variant
    ctl = {(r[0], r[1]): r[3] for r in rows if r[2] == a.control}
    counts, unexpected, stale = {}, [], []
    print("\n%-12s %-8s %-46s %-10s %s" % ("status", "target", "kernel", "variant", "detail"))
    for r in rows:
        kname, label, t, st = r[:4]
        if t == a.control:
            continue
        k = next((k for k in known if fnmatch.fnmatch(kname, k[0]) and fnmatch.fnmatch(t, k[1])), None)
        if st == "FAILED":
            if k and ctl.get((kname, label)) != "FAILED":
                st, r[4] = "known", "%s (%s)" % (k[2], k[3])
            elif ctl.get((kname, label)) == "FAILED":
                st = "inconclusive"
                r[4] = "fails on the control %s too: the sweep's sample defines, not the target" % a.control
            else:
                unexpected.append(r)
        elif st == "ok" and k:
            stale.append("%s %s compiles now; %s names it as failing" % (kname, t, k[3]))
        counts[st] = counts.get(st, 0) + 1
        print("%-12s %-8s %-46s %-10s %s" % (st, t, kname, label, r[4]))
        if st in ("FAILED", "known", "inconclusive"):
            for line in r[5]:
                print("             | " + line.replace(str(src) + "/", ""))
    core_s = sum(r[6] for r in rows)
    print("\nkernel files no host file names (names built in ways the sweep does not read, or "
          "unused): %d%s" % (len(unnamed), (": " + " ".join(unnamed[:30]) + (" ..." if len(unnamed) > 30 else "")) if unnamed else ""))
    for s_ in stale:
        print("STALE   " + s_)
    print("summary: %s: %s; control %s: %d compiles; %d compiles in all, %.0f core-s, %.0f s wall; logs in %s"
          % (";".join(targets), ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())),
             a.control, sum(1 for r in rows if r[2] == a.control), len(jobs), core_s,
             time.time() - t_start, work))
    bad = unexpected or stale
    return kc.verdict(bad)


if __name__ == "__main__":
    sys.exit(main())
