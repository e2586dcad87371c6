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

A tree `rocmforge inspect` read out of a libMIOpen (miopen-embedded.json beside src/, the MIOpen
audit) has no host code: there every embedded kernel is compiled for every target, with the
build parameters read from its own text (see read_embedded_tree; every choice is printed as
`assumed:`), and an exclusion, whose cited host file such a tree lacks, is not applied: a
kernel it names that fails on a target alone is "unverified" (not proved either way), and a
known line that compiles is not stale (the list is about the stack's tree, not this library).

Without --device-libs nothing is linked: a HIP kernel stops at the GPU assembly (-S), which is
assembled (a code object would need the device libraries' __ockl_* functions).

Usage: sweep.py --src <MIOpen tree> --clang <clang> --targets 'gfx1010;gfx1012'
                [--device-libs DIR] [--rocm-path DIR] [--control gfx900] [--known FILE]...
                [--exclusions FILE] [--work DIR] [--jobs N] [--only REGEX] [--json FILE]
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


def read_exclusions(paths, src, embedded=False):
    """`<kernel glob> TAB <target glob> TAB <file under src> TAB <regex> TAB <reason>`: kernels
    a solver only builds for other devices in a way the gate reader cannot see (a data-type or
    kernel-version choice inside the solver); the regex must still match the file. A tree read
    out of a library (`embedded`) has no host code to check them against: there they are not
    applied but returned apart, as (kernel glob, target glob, where and why), "unverified"."""
    out, unverified = [], []
    for p, n, line in data_lines(paths):
        parts = line.split("\t")
        if len(parts) != 5:
            raise TreeError("%s:%d: want 5 tab-separated fields" % (p, n))
        glob, tglob, rel, rx, reason = parts
        f = src / rel
        if embedded and not f.is_file():
            unverified.append((glob, tglob, "%s:%d (%s): %s" % (Path(p).name, n, rel, reason)))
            continue
        if not f.is_file():
            raise TreeError("%s:%d: %s is not in the tree (stale exclusion)" % (p, n, rel))
        m = re.search(rx, read(f))
        if not m:
            raise TreeError("%s:%d: `%s` no longer in %s (stale exclusion)" % (p, n, rx, rel))
        out.append((glob, tglob, "%s:%d %s" % (rel, line_of(read(f), m.start()), reason)))
    return (out, unverified) if embedded else out


# ---------------------------------------------------------------- a tree read out of a library

# A tree `rocmforge inspect` read out of a libMIOpen (kernelcheck.EMBEDDED beside src/) holds
# the kernels and their includes and no host code: no solver says which kernels a target
# reaches or which build parameters they get. So every embedded kernel is compiled for every
# target, with the parameters read from the kernel's own text (and its includes'): each name of
# a build parameter's shape (PARAM_PREFIXES, or one the library's strings name) that the code
# uses as a value (in code, in an #if's value or a #define's body) and no text #defines gets its
# sample value; one only tested by #ifdef/#ifndef/defined() is left undefined, the kernel's own
# default (defining it would switch on a path, e.g. XDLOPS, that no host passes everywhere).
# Every such choice is printed ("assumed:") and written to --json.
PARAM_PREFIXES = ("MIO_", "MLO_", "MIOPEN_", "CK_PARAM_", "USE_")
NAME = re.compile(r"\b[A-Z][A-Z0-9_]*[A-Z0-9]\b")


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def includes_of(text):
    return [Path(n).name for n in re.findall(r'^\s*(?:#\s*include|\.include)\s*[<"]([^">]+)[">]', text, re.M)]


def include_closure(kdir, name):
    """The texts of `name` and of every file of kdir it includes, transitively (by bare name,
    as MIOpen hands includes over)."""
    seen, todo, texts = set(), [name], []
    while todo:
        n = todo.pop()
        if n in seen or not (kdir / n).is_file():
            continue
        seen.add(n)
        t = strip_comments(read(kdir / n))
        texts.append(t)
        todo += includes_of(t)
    return texts


def embedded_params(texts, named, asm):
    """(parameters to give a value, names tested only for being defined) of a kernel whose
    include closure is `texts`."""
    code = "\n".join(texts).replace("\\\n", " ")
    defined = set(re.findall(r"^\s*#\s*define\s+(\w+)", code, re.M))
    # A one-hot flag family with defaults (`#ifndef USE_SOFTMAX_LOG` / `#define USE_SOFTMAX_LOG 0`)
    # is the host's to set: a parameter, so that `variants` sets one member at a time.
    defined -= {n for n in re.findall(r"^\s*#\s*ifndef\s+(USE_\w+)\s*\n\s*#\s*define\s+\1\b", code, re.M)}
    if asm:
        defined |= set(re.findall(r"^\s*\.set\s+(\w+)", code, re.M)) | set(re.findall(r"^\s*(\w+)\s*=", code, re.M))
    valued, tested = set(), set()
    for line in code.splitlines():
        m = re.match(r"\s*(?:#\s*|\.)(ifdef|ifndef|ifnotdef|if|elif|elseif|define|undef|include|pragma|error|warning|line)\b(.*)", line)
        kind, rest = (m[1], m[2]) if m else (None, line)
        if kind in ("ifdef", "ifndef", "ifnotdef", "undef"):
            tested |= set(NAME.findall(rest))
            continue
        if kind in ("include", "pragma", "error", "warning", "line"):
            continue
        if kind == "define":
            rest = re.sub(r"^\s*\w+(?:\([^)]*\))?", "", rest)
        tested |= set(re.findall(r"\bdefined\s*\(?\s*(\w+)", rest))
        valued |= set(NAME.findall(re.sub(r"\bdefined\s*\(?\s*\w+\s*\)?", " ", rest)))
    shape = lambda n: n.startswith(PARAM_PREFIXES) or n in named or n == "ROCM_METADATA_VERSION"
    params = {n for n in valued if shape(n) and not n.startswith("MIOPEN_USE_")} - defined
    return params, {n for n in tested - valued - defined if shape(n)}


def read_embedded_tree(src, manifest):
    """(kernel dir, {kernel name: path}, data-type switches, what was assumed) of a tree read out
    of a library: the kernels its manifest lists (not the includes) that are .cl/.cpp/.s files."""
    kdir = src / "src" / "kernels"
    if not kdir.is_dir():
        raise TreeError("%s: no src/kernels directory" % src)
    kernels = {}
    for f in manifest.get("files", []):
        name = f.get("name")
        if name and not f.get("include") and Path(name).suffix in (".cl", ".cpp", ".s") and (kdir / name).is_file():
            kernels[name] = kdir / name
    if not kernels:
        raise TreeError("%s: the library embeds no .cl, .cpp or .s kernel" % src)
    # The data-type switches GetDataTypeKBP passes (src/include/miopen/datatype.hpp), as the
    # kernels spell them; the other MIOPEN_USE_* (MIOPEN_USE_AMDGCN ...) stay undefined.
    seen = set()
    for p in kdir.iterdir():
        if p.is_file():
            seen |= set(re.findall(r"\bMIOPEN_USE_(?:FP16|FP32|FP64|BFP16|INT8|INT8x4|INT32|FP8|BFP8)\b", read(p)))
    dtypes = {n: int(n == "MIOPEN_USE_FP32") for n in seen | {"MIOPEN_USE_FP32"}}
    major = (manifest.get("miopen_version") or "3").split(".")[0]
    std = "200" if not major.isdigit() or int(major) >= 3 else "120"
    clstd = ["-cl-std=" + ("CL2.0" if std == "200" else "CL1.2"), "-D__OPENCL_VERSION__=" + std]
    assumed = [
        "no host code: every embedded kernel is taken as built for every target (no solver's IsApplicable to read)",
        "data type fp32: MIOPEN_USE_FP32=1, the other data-type switches (%s) 0; other MIOPEN_USE_* undefined" % " ".join(sorted(n[len("MIOPEN_USE_"):] for n in dtypes if n != "MIOPEN_USE_FP32")),
        "OpenCL %s (MIOpen %s: 3 and later compile 2.0, 2.x 1.2)" % (std, manifest.get("miopen_version") or "of unknown version"),
        "build parameters: the names of a parameter's shape (%s..., or named by the library's strings) a kernel uses "
        "as a value and does not #define, at this script's sample values (fp32, 3x3 direct conv, N=4 C=8 HW=64 "
        "batchnorm; any other 1, *_TYPE float); names only tested with #ifdef/defined() left undefined" % "..., ".join(PARAM_PREFIXES),
        "assembly for gfx10 and later with -mwavefrontsize64 -mcumode (what MIOpen's asm solvers pass there)",
    ]
    return kdir, kernels, dtypes, clstd, assumed


def embedded_jobs(a, kdir, kernels, manifest, targets):
    """{kernel: (defines, {target: extra defines}, modes, user text)} for a tree without host code,
    and the per-kernel assumption lines."""
    named = set(manifest.get("host_names", [])) | {d[2:] for d in manifest.get("host_defines", [])}
    out, lines = {}, []
    for kname, kpath in sorted(kernels.items()):
        texts = include_closure(kdir, kname)
        params, undefined = embedded_params(texts, named, kpath.suffix == ".s")
        defines = {n: sample(n) for n in params}
        per_target = {}
        if kpath.suffix == ".cpp" and any("CK_AMD_GPU_" in t for t in texts):
            for t in targets:
                flag, how = kc.embedded_ck_flag(manifest, t.split(":")[0])
                per_target[t] = {m: 1 for m in re.findall(r"-D(\w+)", flag)}
                lines.append("%s: %s: %s" % (kname, t, how))
        if params:
            lines.append("%s: %s" % (kname, " ".join("%s=%s" % kv for kv in sorted(defines.items()))))
        if undefined:
            lines.append("%s: left undefined: %s" % (kname, " ".join(sorted(undefined))))
        out[kname] = (defines, per_target, "the library (no host code)")
    return out, lines


# ---------------------------------------------------------------- compiling

def asm_target(t):
    """The target ID a dGPU reports (xnack off): comgr assembles for it, and MIOpen's asm
    metadata (.amdhsa_reserve_xnack_mask) must match it (comgr.cpp BuildAsm, WORKAROUND_ISSUE_3001)."""
    return t if ":" in t else t + ":xnack-"


def compile_cmd(a, kdir, kpath, defines, target, out, mopts=()):
    """The commands that compile one kernel, run in turn. A HIP kernel compiled to a code object
    links it, which needs the device libraries (`__ockl_*`); without --device-libs it stops at
    the GPU assembly (-S) and that is assembled (inline asm is checked only by the assembler),
    as comgr links the device libraries later. OpenCL and assembly make relocatable objects."""
    incs = ["-I" + str(kpath.parent), "-I" + str(kdir)] + ["-I" + str(d) for d in a.incdirs if d != kdir]
    if kpath.suffix == ".cl":
        cmd = [a.clang, "-mcpu=" + target] + CL_FLAGS + a.clstd + a.libflags + incs
        cmd += ["-D%s=%s" % kv for kv in sorted(defines.items())]
    elif kpath.suffix == ".cpp":
        cmd = [a.clang, "--offload-arch=" + target] + HIP_FLAGS + a.libflags + a.rocmflags + incs
        cmd += ["-D%s=%s" % kv for kv in sorted(defines.items())]
        if not a.device_libs:
            s = out.with_suffix(".s")
            asm = [a.clang, "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=" + target.split(":")[0]]
            return [cmd + list(mopts) + ["-S", str(kpath), "-o", str(s)], asm + ["-c", str(s), "-o", str(out)]]
    else:
        cmd = [a.clang, "-mcpu=" + asm_target(target)] + ASM_FLAGS + incs
        cmd += ["-Wa,-defsym,%s=%s" % kv for kv in sorted(defines.items()) if str(kv[1]).lstrip("-").isdigit()]
    return [cmd + list(mopts) + ["-c", str(kpath), "-o", str(out)]]


# What the compiler names as missing: in a tree without host code, a parameter the text
# reading did not find (one without a parameter's prefix: LOCAL_SIZE, INPUT_TYPE).
MISSING = [(re.compile(r"unknown type name '([A-Z][A-Z0-9_]*)'"), "type"),
           (re.compile(r"use of undeclared identifier '([A-Z][A-Z0-9_]*)'"), "value")]


def run_compile(make, log, fill=False):
    """Compiles with the commands make(extra defines) gives. With `fill` (a tree without host
    code), a compile the compiler fails for ALL-CAPS names it does not know is retried with them
    defined (a type name as TYPE_SAMPLE, a value as its sample value or 1), at most 4 times.
    Returns (ok, first error lines, seconds, {name: value} added)."""
    t0 = time.time()
    extra, text = {}, ""
    for _ in range(5):
        for cmd in make(extra):
            r = subprocess.run(cmd, capture_output=True, text=True)
            text += " ".join(cmd) + "\n\n" + r.stderr + "\n"
            if r.returncode != 0:
                break
        new = {}
        if r.returncode != 0 and fill:
            for rx, kind in MISSING:
                for n in rx.findall(r.stderr):
                    v = sample(n)
                    new.setdefault(n, TYPE_SAMPLE if kind == "type" else (v if str(v).lstrip("-").isdigit() else 1))
            new = {n: v for n, v in new.items() if n not in extra}
        if not new:
            break
        extra.update(new)
        text += "retried with %s (named by the compiler as unknown)\n\n" % " ".join("-D%s=%s" % kv for kv in sorted(new.items()))
    log.write_text(text)
    lines = [l for l in r.stderr.splitlines() if "error" in l]
    return r.returncode == 0, lines[:3], time.time() - t0, extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, type=Path, help="MIOpen source tree (has src/kernels)")
    ap.add_argument("--clang", required=True, help="clang with the AMDGPU target")
    ap.add_argument("--targets", required=True, help="e.g. 'gfx1010;gfx1012'")
    ap.add_argument("--control", default="gfx900", help="control target (default gfx900)")
    ap.add_argument("--device-libs", help="ROCm device-libs bitcode dir (default: -nogpulib, and HIP kernels "
                    "stop at the GPU assembly, which is assembled)")
    ap.add_argument("--rocm-path", help="where HIP's include/hip is, for .cpp kernels")
    ap.add_argument("--known", action="append", default=[], help="known target failures")
    ap.add_argument("--exclusions", action="append", default=[], help="kernels out of reach")
    ap.add_argument("--work", type=Path, help="objects and logs (default: a new temp dir)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", help="regex: sweep only kernel files whose name matches")
    ap.add_argument("--json", type=Path, help="also write the results here, one object per compile")
    a = ap.parse_args()
    # The control among the targets (the MIOpen audit passes the same list to every check) is
    # compiled once, as the control.
    targets = [t for t in kc.targets_arg(ap, a.targets) if t != a.control] or ap.error("no --targets but the control")
    a.libflags = ["--rocm-device-lib-path=" + a.device_libs] if a.device_libs else ["-nogpulib"]
    a.rocmflags = ["--rocm-path=" + a.rocm_path] if a.rocm_path else []
    src = a.src.resolve()
    work = kc.work_dir(a.work, "miopen-sweep-").resolve()
    t_start = time.time()
    assumed, unverified = [], []
    try:
        manifest = kc.embedded_manifest(src)
        known = read_known(a.known)
        if manifest is None:
            kdir, kernels, hosts, helpers = read_tree(src)
            exclusions = read_exclusions(a.exclusions, src)
            dtypes = dtype_params(src)
            a.clstd = cl_std(src)
        else:
            kdir, kernels, dtypes, a.clstd, assumed = read_embedded_tree(src, manifest)
            exclusions, unverified = read_exclusions(a.exclusions, src, embedded=True)
            hosts, helpers = {}, {}
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
    if manifest is None:
        print("tree: %s: %d kernel files, %d host files, %d device-testing helpers"
              % (src, len(kernels), len(hosts), len(helpers)))
        embedded = {}
    else:
        swept = {k: p for k, p in kernels.items() if not a.only or re.search(a.only, k)}
        embedded, lines = embedded_jobs(a, kdir, swept, manifest, targets + [a.control])
        for g, tg, why in unverified:
            assumed.append("exclusion not applied (no host code to check it against): %s %s, %s" % (g, tg, why))
        assumed += lines
        print("tree read out of %s (MIOpen %s): %d kernel files, no host code, so the defines are assumed:"
              % (manifest.get("library"), manifest.get("miopen_version") or "?", len(kernels)))
        for line in assumed:
            print("assumed: " + line)

    rows, jobs = [], []   # rows: [kernel, variant, target, status, detail, errors, seconds]
    unnamed = []
    for kname, kpath in sorted(kernels.items()):
        if a.only and not re.search(a.only, kname):
            continue
        if manifest is None:
            users = users_of(kname, hosts, lits_of)
            if not users:
                unnamed.append(kname)
                continue
            params, mopts = set(), set()
            for p, _ in users:
                params |= build_params(hosts[p])
                mopts |= set(mode_options(hosts[p]))
            defines = {n: sample(n) for n in params}
            users_s = ", ".join("%s (%s)" % (p.relative_to(src / "src"), how) for p, how in users[:3])
        else:
            users, mopts = [], set()
            defines, per_target, users_s = embedded[kname]
            defines = dict(defines)
        defines.update(dtypes)
        reached = False
        for t in targets + [a.control]:
            dev = t.split(":")[0]
            excl = next((r for g, tg, r in exclusions if fnmatch.fnmatch(kname, g) and fnmatch.fnmatch(dev, tg)), None)
            refusals = [why for v, why in (gate(p.relative_to(src), hosts[p], gates, dev) for p, _ in users) if v is False]
            if t != a.control and ((users and len(refusals) == len(users)) or excl):
                rows.append([kname, "-", t, "skipped", "not applicable: " + (excl or refusals[0]), [], 0])
                continue
            if t == a.control and not reached:
                continue  # no target compile to compare with
            reached = True
            tdefs = dict(defines)
            tmodes = sorted(mopts)
            if manifest is None:
                for p, _ in users:
                    for fn, chain in chains.items():
                        if re.search(r"\b%s\s*\(" % fn, hosts[p]):
                            hit = next((d for pre, d in chain if dev.startswith(pre)), None)
                            if hit:
                                tdefs[hit] = 1
            else:
                tdefs.update(per_target.get(t, {}))
                if kpath.suffix == ".s" and re.match(r"gfx1\d", dev):
                    tmodes = ["-mcumode", "-mwavefrontsize64"]
            for label, d in variants(tdefs, dtypes):
                row = [kname, label, t, None, users_s]
                rows.append(row)
                stem = "%s.%s.%s" % (t.replace(":", "_"), kname, label)
                make = (lambda d, t, kpath, out, tmodes: lambda extra: compile_cmd(a, kdir, kpath, dict(d, **extra), t, out, tmodes))(
                    d, t, kpath, work / (stem + ".o"), tmodes)
                jobs.append((row, make, work / (stem + ".log")))
    filled = {}
    for (row, _, _), (ok, err, secs, extra) in zip(jobs, kc.parallel(run_compile, [(make, log, manifest is not None) for _, make, log in jobs], a.jobs)):
        row[3] = "ok" if ok else "FAILED"
        row += [err, secs]
        if extra:
            filled.setdefault(row[0], {}).update(extra)
    for kname, extra in sorted(filled.items()):
        assumed.append("%s: named unknown by the compiler, so defined: %s" % (kname, " ".join("%s=%s" % kv for kv in sorted(extra.items()))))
        print("assumed: " + assumed[-1])
    # classify target failures against the control compile of the same variant
    ctl = {(r[0], r[1]): r[3] for r in rows if r[2] == a.control}
    counts, unexpected, stale, out = {}, [], [], []
    print("\n%-12s %-8s %-46s %-10s %s" % ("status", "target", "kernel", "variant", "detail"))
    for r in rows:
        kname, label, t, st = r[:4]
        if t == a.control:
            if st != "skipped":
                out.append({"target": t, "kernel": kname, "variant": label, "ok": st == "ok", "status": "control",
                            "message": r[5], "detail": r[4]})
            continue
        k = next((k for k in known if fnmatch.fnmatch(kname, k[0]) and fnmatch.fnmatch(t, k[1])), None)
        u = next((u for u in unverified if fnmatch.fnmatch(kname, u[0]) and fnmatch.fnmatch(t.split(":")[0], u[1])), None)
        if st == "FAILED":
            if k and ctl.get((kname, label)) != "FAILED":
                st, r[4] = "known", "%s (%s)" % (k[2], k[3])
            elif ctl.get((kname, label)) == "FAILED":
                st = "inconclusive"
                r[4] = "fails on the control %s too: the sweep's sample defines, not the target" % a.control
            elif u:
                st = "unverified"
                r[4] = ("fails on %s alone, but the rocm-6.2 host code never builds it there (%s); this tree has "
                        "no host code to confirm that: not proved either way" % (t, u[2]))
            else:
                unexpected.append(r)
        elif st == "ok" and k:
            stale.append("%s %s compiles now; %s names it as failing" % (kname, t, k[3]))
        counts[st] = counts.get(st, 0) + 1
        print("%-12s %-8s %-46s %-10s %s" % (st, t, kname, label, r[4]))
        if st in ("FAILED", "known", "inconclusive", "unverified"):
            for line in r[5]:
                print("             | " + line.replace(str(src) + "/", ""))
        if st != "skipped":
            out.append({"target": t, "kernel": kname, "variant": label, "ok": st == "ok", "status": st,
                        "message": r[5], "detail": r[4]})
    core_s = sum(r[6] for r in rows)
    if manifest is None:
        print("\nkernel files no host file names (names built in ways the sweep does not read, or "
              "unused): %d%s" % (len(unnamed), (": " + " ".join(unnamed[:30]) + (" ..." if len(unnamed) > 30 else "")) if unnamed else ""))
    for s_ in stale:
        print("STALE   " + s_)
    print("summary: %s: %s; control %s: %d compiles; %d compiles in all, %.0f core-s, %.0f s wall; logs in %s"
          % (";".join(targets), ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())),
             a.control, sum(1 for r in rows if r[2] == a.control), len(jobs), core_s,
             time.time() - t_start, work))
    # A known list is about the stack's own tree: on a library's tree a line that compiles is
    # news of that library, not a stale list.
    problems = stale if manifest is None else []
    bad = unexpected or problems
    kc.write_json(a.json, "miopen-sweep", out, problems, assumed, compiler, not bad)
    return kc.verdict(bad)


if __name__ == "__main__":
    sys.exit(main())
