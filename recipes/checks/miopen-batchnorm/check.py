#!/usr/bin/env python3
"""Post-install check for patch miopen/0001-batchnorm-gfx101x (MIOpen 2.19 of ROCm 5.4, 3.2 of 6.2).

MIOpen compiles its batchnorm OpenCL kernels at run time, so a build that "succeeds" can still
fail on the first batchnorm call: on gfx10 the GCN DPP reduction (inline asm with `row_bcast`)
does not assemble ("not a valid operand"). This compiles, ahead of time, every batchnorm kernel
that can reach that asm, once per target and per MIO_BN_VARIANT its builder uses, with the
MIO_BN_GFX* defines evaluated from the tree itself (not from this script), so a tree whose
kernels are patched but whose solvers or fusion descriptors are not fails too. Each object is
then disassembled: a target whose ISA has no `row_bcast` (gfx10 and later) must hold none, and a
gfx9 object whose guards picked the DPP reduction must show it (else the disassembly was not read).

Builders read from the tree: the batchnorm solvers (`kernel_file = "...cl"`, build parameters as
`{"NAME", value}`) and, at MIOpen 2.19, the fused batchnorm + activation kernels: their kernel
files are named in src/md_graph.cpp (MDGraph_vertex per fusion op), and their build parameters
come from the op descriptors' GetCompileParms/calcBNParams (`" -DNAME=" + value`, e.g.
src/ocl/fusionopbiasbnactivocl.cpp), found through the op kinds in src/include/miopen/fusion.hpp.
MIOpen 3.x has no such graph (its fused solvers are solvers). The OpenCL flags follow the tree's
own src/comgr.cpp (OCL_STANDARD: 120 at 2.19, 200 at 3.2).

Usage: check.py --src <MIOpen source> --clang <clang> --targets 'gfx1010;gfx1012'
                [--work DIR] [--device-libs DIR] [--objdump llvm-objdump]
Exit: 0 all compiled, 1 a compile or a kernel/builder mismatch failed, 2 the tree could not be read.
"""
import argparse, itertools, os, re, shutil, subprocess, sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernel-common"))
from kernelcheck import TreeError, read  # noqa: E402
import kernelcheck as kc  # noqa: E402

# What MIOpen passes for .cl kernels through comgr (src/comgr.cpp AddCompilerOptions: rocm-5.4.3
# :211-248, rocm-6.2.2 :196-222; release builds add -Wno-everything in hipoc_program.cpp). The
# OpenCL version is the tree's OCL_STANDARD (cl_flags). `-c`: the inline asm is assembled in the
# backend, so producing an object is enough to hit the gfx10 error.
CL_FLAGS = ["-x", "cl", "-target", "amdgcn-amd-amdhsa", "-cl-kernel-arg-info",
            "-D__IMAGE_SUPPORT__=1", "-O3", "-Wno-everything",
            "-mllvm", "-amdgpu-early-inline-all", "-mllvm", "-amdgpu-prelink",
            "-mllvm", "-amdgpu-internalize-symbols"]

# The DPP broadcast the gfx9 reduction uses; gfx10 and later cannot encode it (the assembler
# rejects it), so their objects must hold none.
DPP_BCAST = "row_bcast"

# Sample values for the build parameters a builder passes (it derives them from the tensor
# shape). Compile-only, so one small consistent fp32 shape is enough: N=4 C=8 H*W=64, one
# 256-wide work-group per channel (4 wave64s), saving mean/variance and running stats.
SAMPLE = {"MIO_BN_N": 4, "MIO_BN_C": 8, "MIO_BN_HW": 64, "MIO_BN_NHW": 256, "MIO_BN_CHW": 512,
          "MIO_BN_NCHW": 2048, "MIO_BN_NGRPS": 1, "MIO_BN_GRP0": 256, "MIO_BN_GRP1": 1,
          "MIO_BN_GRP2": 1, "MIO_BN_LDS_SIZE": 256, "MIO_BN_LDSGCN_SIZE": 4, "MIO_BN_USESAVED": 1,
          "MIO_SAVE_MEAN_VARIANCE": 1, "MIO_RUNNING_RESULT": 1, "MIO_LAYOUT_NHWC": 0,
          "MIO_WAVESIZE": 64, "MIO_BN_CBA_WRITE_INTERMEDIATE": 0, "MIOPEN_USE_FP16": 0,
          "MIOPEN_USE_FP32": 1, "MIOPEN_USE_FPMIX": 0, "MIOPEN_READ_UNIT": 4,
          "MIOPEN_READ_TYPE": "_FLOAT4", "MIOPEN_YES_ACTIV": 1, "MIOPEN_NRN_OP_ID": 3}
# Variant 2 spreads a channel over y work-groups (solvers: xlocal 1, ylocal 1024).
VARIANT_SAMPLE = {2: {"MIO_BN_GRP0": 1, "MIO_BN_GRP1": 1024, "MIO_BN_LDS_SIZE": 1024,
                      "MIO_BN_LDSGCN_SIZE": 16}}

# A build parameter as a solver writes it, `{"MIO_BN_GFX103X", <expr>}`, and as a fusion op
# descriptor of MIOpen 2.19 writes it, `" -DMIO_BN_GFX103X=" + <expr>` (up to `;` or `+ "`).
KV_PARAM = r'"(%s)"\s*,([^{};]*)'
D_PARAM = r'-D(%s)="\s*\+\s*(.*?)(?=\s*;|\s*\+\s*")'


def include_closure(path, kdir, seen):
    """Files reached through `#include "..."` (MIOpen resolves them in src/kernels)."""
    if path in seen or not path.is_file():
        return seen
    seen.add(path)
    for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', read(path), re.M):
        include_closure(kdir / inc, kdir, seen)
    return seen


def dpp_kernels(kdir):
    """{kernel file: MIO_BN_GFX* names it tests} for the batchnorm kernels that can reach the
    row_bcast DPP asm or guard it with a MIO_BN_GFX* define."""
    out = {}
    for cl in sorted(kdir.glob("MIOpenBatchNorm*.cl")):
        text = "".join(read(f) for f in include_closure(cl, kdir, set()))
        if "row_bcast" in text or "MIO_BN_GFX" in read(cl):
            out[cl.name] = sorted(set(re.findall(r"\bMIO_BN_GFX\w+", text)))
    return out


def pp_eval(expr, macros):
    """Value of a #if condition from the file's own numeric #defines; None if unknown."""
    expr = re.sub(r"defined\s*\(?\s*(\w+)\s*\)?", lambda m: "1" if m[1] in macros else "X", expr)
    expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: macros.get(m[0], m[0]), expr.split("//")[0])
    expr = re.sub(r"!(?!=)", " not ", expr).replace("&&", " and ").replace("||", " or ")
    if re.search(r"[A-Za-z_]\w*", re.sub(r"\b(not|and|or)\b", "", expr)):
        return None
    try:
        return bool(eval(expr, {"__builtins__": {}}))
    except Exception:
        return None


def active_text(text):
    """The source with #if branches dropped that its own #defines rule out (e.g. the variant 4
    path behind WORKAROUND_SWDEV_253606); unknown conditions keep every branch."""
    macros = dict(re.findall(r"^\s*#\s*define\s+(\w+)\s+(\d+)\s*$", text, re.M))
    out, stack, active = [], [], True
    for line in text.splitlines():
        m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", line)
        if not m:
            out.append(line if active else "")
            continue
        d, cond = m.groups()
        if d in ("if", "ifdef", "ifndef"):
            v = pp_eval(cond if d == "if" else "defined(%s)" % cond.strip(), macros)
            v = (not v) if d == "ifndef" and v is not None else v
            stack.append([active, v])
        elif d == "elif" and stack:
            taken = stack[-1][1]
            v = False if taken else pp_eval(cond, macros)
            stack[-1][1] = True if (taken or v) else (None if None in (taken, v) else False)
        elif d == "else" and stack:
            v = None if stack[-1][1] is None else not stack[-1][1]
        elif d == "endif" and stack:
            active = stack.pop()[0]
            continue
        else:
            continue
        active = stack[-1][0] and v is not False
    return "\n".join(out)


def params(text, name):
    """(name, value expression) of every build parameter matching `name` in either form."""
    return (re.findall(KV_PARAM % name, text) +
            re.findall(D_PARAM % name, text, re.S))


def parse_gfx(text, where):
    """{define: (kind, value, polarity)} for each MIO_BN_GFX* parameter's test of the device name."""
    out = {}
    for d, expr in params(text, r"MIO_BN_GFX\w*"):
        m = re.search(r'StartsWith\(\s*[^,]*GetDeviceName\(\)\s*,\s*"([^"]+)"\s*\)', expr)
        e = re.search(r'GetDeviceName\(\)\s*==\s*"([^"]+)"', expr)
        one_zero = re.search(r'\?\s*"?1"?\s*:\s*"?0"?', expr)
        zero_one = re.search(r'\?\s*"?0"?\s*:\s*"?1"?', expr)
        if not (m or e) or re.search(r"&&|\|\||!(?!=)", expr) or ("?" in expr and not (one_zero or zero_one)):
            raise TreeError("%s: cannot evaluate %s = %s" % (where, d, " ".join(expr.split())))
        rule = ("prefix" if m else "equal", (m or e)[1], not zero_one)
        if out.get(d, rule) != rule:
            raise TreeError("%s: %s is set two different ways" % (where, d))
        out[d] = rule
    return out


def parse_variants(text, where):
    """The MIO_BN_VARIANT values a builder can pass: literals assigned to the variable it uses."""
    found = params(text, "MIO_BN_VARIANT")
    if not found:
        return [None]
    vals = set()
    for _, raw in found:
        expr = re.sub(r"static_cast<int>|std::to_string", "", raw).strip(" ()}")
        if expr.isdigit():
            vals.add(int(expr))
            continue
        assigned = re.findall(r"\b%s\s*=(?!=)\s*([^;]+);" % re.escape(expr), text)
        if not assigned:
            raise TreeError("%s: MIO_BN_VARIANT comes from `%s`, which is never assigned" % (where, expr))
        for rhs in assigned:
            rhs = rhs.split("?", 1)[1] if "?" in rhs else rhs  # `(n >= 32) ? 1 : 3` -> 1, 3
            if not re.fullmatch(r"[\s\d:()]+", rhs):
                raise TreeError("%s: cannot evaluate %s = %s" % (where, expr, rhs.strip()))
            vals.update(int(v) for v in re.findall(r"\d+", rhs))
    return sorted(vals)


def param_names(text, gfx):
    """Names of the other build parameters a builder passes (both forms), variant excluded."""
    names = set(re.findall(r'[{(]\s*"((?:MIO|MIOPEN)_\w+)"\s*,', text))
    names |= set(re.findall(r'-D((?:MIO|MIOPEN)_\w+)=', text))
    return sorted(names - set(gfx) - {"MIO_BN_VARIANT"})


def solver_builds(src, kernels):
    """Every .cpp under src/ that builds one of `kernels` through `kernel_file` (the solvers):
    its kernel files, MIO_BN_GFX* tests, other build-parameter names and variants."""
    builds = []
    for cpp in sorted((src / "src").rglob("*.cpp")):
        text = read(cpp)
        if "kernel_file" not in text:
            continue
        text = active_text(text)
        bases = re.findall(r'kernel_file\s*=\s*"([^"]+)"', text)
        sufs = re.findall(r'kernel_file\s*\+=\s*"([^"]+)"', text)
        files = {b for b in bases if b.endswith(".cl")} | {b + s for b in bases for s in sufs}
        files = sorted(files & set(kernels))
        if files:
            where = str(cpp.relative_to(src))
            gfx = parse_gfx(text, where)
            builds.append((where, files, gfx, param_names(text, gfx), parse_variants(text, where)))
    return builds


def fusion_builds(src, kernels):
    """The fused kernels of MIOpen 2.19's fusion metadata graph: src/md_graph.cpp names a kernel
    file per fusion op (MDGraph_vertex), src/include/miopen/fusion.hpp maps each op kind to its
    descriptor struct, and the descriptor's member functions (GetCompileParms, calcBNParams, in
    any src/**/*.cpp) give the build parameters. Nothing for trees without that graph (6.x)."""
    graph, header = src / "src" / "md_graph.cpp", src / "src" / "include" / "miopen" / "fusion.hpp"
    if not graph.is_file() or not header.is_file():
        return []
    kind = {}
    for chunk in re.split(r"^struct\s+", read(header), flags=re.M)[1:]:
        m = re.search(r"kind\(\)\s*const\s*override\s*\{\s*return\s+(miopenFusionOp\w+)\s*;", chunk)
        if m:
            kind[m[1]] = re.match(r"\w+", chunk)[0]
    uses = {}
    for op, kfile in re.findall(r'MDGraph_vertex>\(\s*(miopenFusionOp\w+)\s*,\s*"([^"]+)"', read(graph)):
        uses.setdefault(kfile, set()).add(op)
    # Member function definitions start in column 0: `ret\nStruct::Name(` or `ret Struct::Name(`.
    members, files_of = {}, {}
    for cpp in sorted((src / "src").rglob("*.cpp")):
        text = active_text(read(cpp))
        starts = [(m.start(), m[1]) for m in
                  re.finditer(r"^(?=[A-Za-z_])[^\n;{}]*?\b(\w+)::~?\w+\s*\(", text, re.M)]
        for (pos, struct), nxt in zip(starts, [s[0] for s in starts[1:]] + [len(text)]):
            if struct in kind.values():
                members[struct] = members.get(struct, "") + text[pos:nxt] + "\n"
                files_of.setdefault(struct, set()).add(str(cpp.relative_to(src)))
    fusion_cpp = src / "src" / "fusion.cpp"
    common = set(re.findall(r'-D((?:MIO|MIOPEN)_\w+)=', read(fusion_cpp))) if fusion_cpp.is_file() else set()
    builds = []
    for kfile in sorted(set(uses) & set(kernels)):
        ops = sorted(uses[kfile])
        missing = [op for op in ops if op not in kind or kind[op] not in members]
        if missing:
            raise TreeError("src/md_graph.cpp: %s builds %s, but no descriptor code was found for %s"
                            % (kfile, ", ".join(ops), ", ".join(missing)))
        structs = [kind[op] for op in ops]
        text = "\n".join(members[s] for s in structs)
        where = "%s via %s" % (" ".join(sorted(set().union(*(files_of[s] for s in structs)))),
                               "+".join(structs))
        gfx = parse_gfx(text, where)
        names = sorted(set(param_names(text, gfx)) | (common - set(gfx)))
        builds.append((where, [kfile], gfx, names, parse_variants(text, where)))
    return builds


def embedded_builds(kdir, kernels, manifest):
    """Builders for a tree without host code (kernels read out of a library): every variant the
    kernel's own `#if`s test (`MIO_BN_VARIANT == N`), each `MIO_BN_GFXnnnX` it tests set as its
    name says (device name starts with gfxnnn, as every builder of MIOpen 2.19 to 3.5 sets it),
    the sample values for the other parameters it uses. Returns (builds, assumptions)."""
    named = set(manifest.get("host_names", [])) | {d[2:] for d in manifest.get("host_defines", [])}
    builds, assumed = [], []
    for kfile, tested in sorted(kernels.items()):
        text = read(kdir / kfile)
        gfx = {}
        for d in tested:
            m = re.fullmatch(r"MIO_BN_GFX(\d+)X", d)
            if not m:
                raise TreeError("%s tests %s, whose target this script cannot tell from its name" % (kfile, d))
            gfx[d] = ("prefix", "gfx" + m[1], True)
        variants = sorted({int(v) for v in re.findall(r"\bMIO_BN_VARIANT\s*==\s*(\d+)", text)}) or [None]
        names = sorted(n for n in SAMPLE if re.search(r"\b%s\b" % n, text))
        builds.append(("embedded", [kfile], gfx, names, variants))
        assumed.append("%s: variants %s (its #ifs)" % (kfile, ",".join("-" if v is None else str(v) for v in variants)))
    tested = sorted({d for t in kernels.values() for d in t})
    if tested:
        assumed.insert(0, "MIO_BN_GFXnnnX=1 only on gfxnnn* targets, as MIOpen's builders set them; the library's strings name %s%s" % (
            " ".join(d for d in tested if d in named) or "none of them",
            "; not " + " ".join(d for d in tested if d not in named) if any(d not in named for d in tested) else ""))
    assumed.insert(0, "the other build parameters: this script's sample values (fp32, N=4 C=8 HW=64)")
    return builds, assumed


def cl_flags(src, manifest=None):
    """CL_FLAGS with the OpenCL version of the tree's src/comgr.cpp (`#define OCL_STANDARD 120`
    or `200`; 2.19 compiles 1.2, 3.2 compiles 2.0 and says so with -cl-std=CL2.0). A tree read
    out of a library has no comgr.cpp: MIOpen 3 and later compile 2.0, 2.x 1.2."""
    if manifest is not None:
        major = (manifest.get("miopen_version") or "3").split(".")[0]
        std = "200" if not major.isdigit() or int(major) >= 3 else "120"
        return CL_FLAGS + ["-cl-std=" + ("CL2.0" if std == "200" else "CL1.2"), "-D__OPENCL_VERSION__=" + std]
    comgr = src / "src" / "comgr.cpp"
    if not comgr.is_file():
        raise TreeError("%s: no src/comgr.cpp to read the OpenCL version from" % src)
    m = re.search(r"^\s*#\s*define\s+OCL_STANDARD\s+(\d+)", read(comgr), re.M)
    if not m or m[1] not in ("120", "200"):
        raise TreeError("src/comgr.cpp: no `#define OCL_STANDARD 120|200`")
    std = "CL2.0" if m[1] == "200" else "CL1.2"
    return CL_FLAGS + ["-cl-std=" + std, "-D__OPENCL_VERSION__=" + m[1]]


def has_row_bcast(target):
    """gfx8/gfx9 have DPP row_bcast; gfx10, gfx11 and gfx12 do not."""
    return not re.match(r"gfx1\d\d", target.split(":")[0])


def log_tag(where):
    """Short name of a builder for its log file: the source's stem (and the descriptors)."""
    first, _, structs = where.partition(" via ")
    return re.sub(r"\W+", "_", Path(first).stem + ("_" + structs if structs else ""))


def gfx_value(rule, target):
    kind, arg, positive = rule
    device = target.split(":")[0]  # target ID gfx90a:xnack- -> device name gfx90a
    hit = device.startswith(arg) if kind == "prefix" else device == arg
    return int(hit == positive)


def compile_one(clang, flags, objdump, kdir, kfile, defines, target, log):
    base = [clang, "-mcpu=" + target] + flags + ["-I" + str(kdir)]
    base += ["-D%s=%s" % kv for kv in sorted(defines.items())]
    r = subprocess.run(base + ["-c", str(kdir / kfile), "-o", str(log.with_suffix(".o"))],
                       capture_output=True, text=True)
    log.write_text(" ".join(base) + "\n\n" + r.stderr)
    # Which reduction the guards picked: the final MIOPEN_USE_AMDGCN (1 = DPP, 0 = LDS).
    pp = subprocess.run(base + ["-E", "-dM", str(kdir / kfile)], capture_output=True, text=True)
    m = re.search(r"^#define MIOPEN_USE_AMDGCN (\d)", pp.stdout, re.M)
    path = {"1": "dpp", "0": "lds"}.get(m and m[1], "?")
    lines = r.stderr.splitlines()
    first = next((i for i, l in enumerate(lines) if "error" in l), 0)
    if r.returncode != 0:
        return False, path, None, lines[first:first + 5]
    # The code object itself: how many DPP broadcasts it holds.
    d = subprocess.run([objdump, "-d", "--mcpu=" + target.split(":")[0], str(log.with_suffix(".o"))],
                       capture_output=True, text=True)
    if d.returncode != 0 or "Disassembly of section" not in d.stdout:
        return False, path, None, ["%s -d failed: %s" % (objdump, (d.stderr.strip() or "no disassembly")[:300])]
    log.with_suffix(".s").write_text(d.stdout)
    bcasts = [l.strip() for l in d.stdout.splitlines() if DPP_BCAST in l]
    return True, path, bcasts, []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, type=Path, help="MIOpen source tree (has src/kernels)")
    ap.add_argument("--clang", required=True, help="clang with the AMDGPU target")
    ap.add_argument("--targets", required=True, help="e.g. 'gfx1010;gfx1012'")
    ap.add_argument("--work", type=Path, help="objects and logs (default: a new temp dir)")
    ap.add_argument("--device-libs", help="ROCm device-libs bitcode dir (default: -nogpulib; "
                    "an object needs no device libs, comgr links them later)")
    ap.add_argument("--objdump", help="llvm-objdump for the objects (default: the one beside --clang)")
    ap.add_argument("--json", type=Path, help="also write the results here, one object per compile")
    a = ap.parse_args()
    targets = kc.targets_arg(ap, a.targets)
    kdir = a.src.resolve() / "src" / "kernels"
    work = kc.work_dir(a.work, "miopen-bn-check-")
    libflags = ["--rocm-device-lib-path=" + a.device_libs] if a.device_libs else ["-nogpulib"]
    objdump = a.objdump or str(Path(shutil.which(a.clang) or a.clang).resolve().parent / "llvm-objdump")
    assumed = []
    try:
        manifest = kc.embedded_manifest(a.src.resolve())
        flags = cl_flags(a.src.resolve(), manifest) + libflags
        if not shutil.which(objdump):
            raise TreeError("no llvm-objdump at %s (give --objdump)" % objdump)
        if not kdir.is_dir():
            raise TreeError("%s: no src/kernels directory" % a.src)
        kernels = dpp_kernels(kdir)
        if not kernels:
            raise TreeError("%s: no MIOpenBatchNorm*.cl reaches the DPP reduction" % kdir)
        if manifest is None:
            builds = solver_builds(a.src.resolve(), kernels) + fusion_builds(a.src.resolve(), kernels)
        else:
            builds, assumed = embedded_builds(kdir, kernels, manifest)
            assumed.insert(0, "OpenCL %s (MIOpen %s)" % (next(f for f in flags if f.startswith("-D__OPENCL_VERSION__=")).split("=")[1], manifest.get("miopen_version") or "of unknown version"))
        compiler = kc.compiler_version(a.clang)
    except (TreeError, OSError) as e:
        return kc.error(e)
    print("compiler: %s" % compiler)
    print("kernels reaching the DPP reduction: %s" % ", ".join(kernels))
    if manifest is not None:
        print("tree read out of %s (MIOpen %s): no host code, so the defines are assumed:" % (
            manifest.get("library"), manifest.get("miopen_version") or "?"))
        for line in assumed:
            print("assumed: " + line)
    problems = []
    # A kernel guard that tests a define no builder sets is always 0: that target silently
    # keeps the DPP path (e.g. kernels patched for MIO_BN_GFX101X, solvers not).
    for kfile, tested in kernels.items():
        users = [b for b in builds if kfile in b[1]]
        if not users:
            problems.append("%s: nothing in the tree builds it, cannot check it" % kfile)
        for where, _, gfx, _, variants in users:
            print("builder %s: %s variants %s sets %s" % (where, kfile, variants, " ".join(sorted(gfx)) or "no MIO_BN_GFX*"))
            for d in tested:
                if d not in gfx:
                    problems.append("%s tests %s but %s never sets it" % (kfile, d, where))
    if manifest is not None:
        named = set(manifest.get("host_names", [])) | {d[2:] for d in manifest.get("host_defines", [])}
        for d in sorted({d for tested in kernels.values() for d in tested} - named):
            problems.append("the kernels test %s, which no string of the library names: its host code never sets it" % d)
    jobs = []
    for where, files, gfx, names, variants in builds:
        for kfile, v, t in itertools.product(files, variants, targets):
            defs = {n: SAMPLE.get(n, 1) for n in names}  # unknown name: 1
            defs.update({n: x for n, x in VARIANT_SAMPLE.get(v, {}).items() if n in defs})
            defs.update({d: gfx_value(rule, t) for d, rule in gfx.items()})
            if v is not None:
                defs["MIO_BN_VARIANT"] = v
            jobs.append((t, kfile, v, where, defs))
    results = kc.parallel(compile_one, [(a.clang, flags, objdump, kdir, k, d, t,
                                         work / ("%s.%s.v%s.%s.log" % (t.replace(":", "_"), Path(k).stem, v, log_tag(w))))
                                        for t, k, v, w, d in jobs])
    failed = 0
    rows = []
    for (t, kfile, v, where, defs), (ok, path, bcasts, err) in zip(jobs, results):
        gfx = " ".join("%s=%s" % kv for kv in sorted(defs.items()) if kv[0].startswith("MIO_BN_GFX"))
        if ok and bcasts and not has_row_bcast(t):
            ok, err = False, ["the code object holds %d %s instruction(s), which %s cannot run: %s"
                              % (len(bcasts), DPP_BCAST, t, bcasts[0])]
        print("%-7s %-8s %-40s variant=%-3s reduction=%s %s=%s  [%s] %s" % (
            "ok" if ok else "FAILED", t, kfile, "-" if v is None else v, path, DPP_BCAST,
            "-" if bcasts is None else len(bcasts), where, gfx))
        rows.append({"target": t, "kernel": kfile, "variant": v, "ok": ok, "reduction": path,
                     "row_bcast": None if bcasts is None else len(bcasts), "builder": where,
                     "defines": {k: x for k, x in sorted(defs.items())}, "message": err})
        if not ok:
            failed += 1
            for line in err:
                print("          | " + line)
    # The reader's control: where a gfx9 target took the DPP reduction, its objects together must
    # show row_bcast (one kernel may include the DPP functions and never call them), or the
    # disassembly was not read and the gfx10 rows above prove nothing.
    for t in targets:
        dpp = [r for j, r in zip(jobs, results) if j[0] == t and r[0] and r[1] == "dpp"]
        if has_row_bcast(t) and dpp and not any(r[2] for r in dpp):
            problems.append("%s: %d objects took the DPP reduction and their disassembly shows no %s: "
                            "the code objects were not read" % (t, len(dpp), DPP_BCAST))
    for p in problems:
        print("FAILED  " + p)
    print("summary: %d compiles for %s: %d ok, %d FAILED; %d other problems (kernel/builder "
          "mismatches, disassembly not read); logs in %s"
          % (len(jobs), ";".join(targets), len(jobs) - failed, failed, len(problems), work))
    kc.write_json(a.json, "miopen-batchnorm", rows, problems, assumed, compiler, not (failed or problems))
    return kc.verdict(failed or problems)


if __name__ == "__main__":
    sys.exit(main())
