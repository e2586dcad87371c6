#!/usr/bin/env python3
"""Does rocPRIM's look-back fence invalidate L0 after L1 on gfx10/gfx11?

Compiles lookback_scan.hip (rocPRIM's device inclusive_scan over 8-byte
types) for each target, disassembles the code object and follows every
agent-scope cache invalidate sequence. On gfx10/gfx11 the acquire half of
an agent-scope fence must invalidate L1 (buffer_gl1_inv) and then L0
(buffer_gl0_inv): compilers before llvm/llvm-project PR 81450 emit them the
other way round, so L0 can refill from L1 lines that are about to be
invalidated, and the look-back reads a stale prefix value. rocPRIM's
memory_fence_device() adds a buffer_gl0_inv after the fence to repair it
(rocPRIM 598ab028; this stack's patch for ROCm 5.4).

The rule checked: from each buffer_gl1_inv, along every path of the
function's control flow (branches followed), a buffer_gl0_inv must come
before the next vector-memory load that may read L0 (global_load*,
buffer_load*, flat_load* without glc; a glc load misses L0 on gfx10/gfx11,
as atomic loads do). Other instructions (scalar, LDS, waits, atomics, which
are performed in L2) may sit between. A path that reaches another
buffer_gl1_inv stops there (that one is checked on its own), a path that
ends the program (s_endpgm, s_setpc_b64) passes.

gfx6 to gfx9 have one vector cache level per CU (the acquire is a single
buffer_wbinvl1 / buffer_wbinvl1_vol / buffer_inv): nothing can be ordered
wrongly, so for them the check only requires that the fence was compiled.
Other targets (gfx12 and later) are refused (exit 2): their invalidates are
not known to this script.

Exit status: 0 when every target passes, 1 when a target fails (the
kernel, the buffer_gl1_inv and the load reached without buffer_gl0_inv are
named) or no look-back fence was found in its code, 2 on a usage error, an
unknown target or a tool that fails. Needs Python 3 (standard library).
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "kernel-common"))
from kernelcheck import ERROR, FAILED, PASSED  # noqa: E402
import kernelcheck as kc  # noqa: E402
PROGRAM = os.path.join(HERE, "lookback_scan.hip")

VMEM_LOAD = re.compile(r"^(global_load|buffer_load|flat_load)")
FUNC = re.compile(r"^([0-9a-fA-F]+) <(.+)>:\s*$")
INSN = re.compile(r"^\s+(\S+)(.*?)//\s*([0-9a-fA-F]+):")
SIMM = re.compile(r"^\s*(-?\d+)")
GLC = re.compile(r"(^|\s)glc(\s|$)")
GFX9_ACQUIRE = ("buffer_wbinvl1", "buffer_wbinvl1_vol", "buffer_inv")


def family(target):
    """'gfx1010:xnack-' -> ('gfx1010', 'gl0gl1' | 'one-level' | None)."""
    name = target.split(":", 1)[0].strip()
    m = re.match(r"^gfx(\d+)[0-9a-f]{2}$", name)
    if not m:
        return name, None
    major = int(m.group(1))
    if major in (10, 11):
        return name, "gl0gl1"
    if 6 <= major <= 9:
        return name, "one-level"
    return name, None


def parse(disasm):
    """Functions of an llvm-objdump -d listing: {symbol: [(addr, mnemonic, operands)]}."""
    funcs = {}
    order = []
    current = None
    for line in disasm.splitlines():
        m = FUNC.match(line)
        if m:
            current = m.group(2)
            funcs[current] = []
            order.append(current)
            continue
        if current is None:
            continue
        m = INSN.match(line)
        if m:
            funcs[current].append((int(m.group(3), 16), m.group(1), m.group(2).strip()))
    return [(name, funcs[name]) for name in order]


def successors(insns, i, index_of):
    addr, mnem, ops = insns[i]
    if mnem in ("s_endpgm", "s_setpc_b64", "s_trap"):
        return []
    nxt = [i + 1] if i + 1 < len(insns) else []
    if mnem.startswith("s_branch") or mnem.startswith("s_cbranch"):
        m = SIMM.match(ops)
        if m is None:
            raise ValueError("cannot read the branch offset of %r at 0x%x" % (mnem + " " + ops, addr))
        simm = int(m.group(1))
        if simm >= 0x8000:  # llvm-objdump prints the 16-bit offset unsigned
            simm -= 0x10000
        target = addr + 4 + 4 * simm
        j = index_of.get(target)
        taken = [j] if j is not None else []
        return taken if mnem.startswith("s_branch") else nxt + taken
    return nxt


def unrepaired_paths(insns):
    """For each buffer_gl1_inv: the first vector load some path reaches before a buffer_gl0_inv."""
    index_of = {addr: i for i, (addr, _, _) in enumerate(insns)}
    found = []
    sequences = 0
    for i, (addr, mnem, _) in enumerate(insns):
        if mnem != "buffer_gl1_inv":
            continue
        sequences += 1
        stack = successors(insns, i, index_of)
        seen = set()
        while stack:
            j = stack.pop()
            if j in seen:
                continue
            seen.add(j)
            a, m, ops = insns[j]
            if m == "buffer_gl0_inv" or m == "buffer_gl1_inv":
                continue
            if VMEM_LOAD.match(m) and not GLC.search(ops):
                found.append((addr, a, "%s %s" % (m, ops)))
                break
            stack.extend(successors(insns, j, index_of))
    return sequences, found


def compiler_order(funcs):
    """How the compiler itself orders the pair (informational): counts of gl0 right before gl1
    (before llvm/llvm-project PR 81450) and of gl1 right before gl0 (after it)."""
    before = after = 0
    for _, insns in funcs:
        for i, (_, m, _) in enumerate(insns):
            if m != "buffer_gl1_inv":
                continue
            if i > 0 and insns[i - 1][1] == "buffer_gl0_inv":
                before += 1
            elif i + 1 < len(insns) and insns[i + 1][1] == "buffer_gl0_inv":
                after += 1
    return before, after


def run(cmd, log):
    log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
    log.flush()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    log.write(p.stdout)
    log.flush()
    return p


def check_target(args, target, work, log):
    name, kind = family(target)
    if kind is None:
        print("ERROR %s: no rule for this target's cache invalidates (gfx6-gfx11 only)" % target)
        return ERROR
    obj = os.path.join(work, "lookback_scan-%s.o" % name)
    cmd = [args.cxx] + ["-I" + inc for inc in args.include] + args.cxx_arg + [
        "-x", "hip", "--offload-arch=" + target, "--cuda-device-only", "--no-gpu-bundle-output",
        "-O3", "-std=c++17", "-c", PROGRAM, "-o", obj,
    ]
    t0 = time.time()
    p = run(cmd, log)
    if p.returncode != 0:
        print("ERROR %s: the compile failed (exit %d); its output is in %s" % (target, p.returncode, log.name))
        print("\n".join("    " + l for l in p.stdout.splitlines()[-15:]))
        return ERROR
    t1 = time.time()
    p = subprocess.run([args.objdump, "-d", "--mcpu=" + name, obj],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        print("ERROR %s: %s failed (exit %d): %s" % (target, args.objdump, p.returncode, p.stderr.strip()))
        return ERROR
    with open(os.path.join(work, "lookback_scan-%s.s" % name), "w") as f:
        f.write(p.stdout)
    funcs = parse(p.stdout)
    secs = "compile %.1f s, check %.1f s" % (t1 - t0, time.time() - t1)
    if kind == "one-level":
        fences = sum(1 for _, insns in funcs for _, m, _ in insns if m in GFX9_ACQUIRE)
        if fences == 0:
            print("FAIL %s: no agent-scope invalidate (%s) in %d functions: the look-back fence "
                  "was not compiled (are the device libraries linked?)" % (target, "/".join(GFX9_ACQUIRE), len(funcs)))
            return FAILED
        print("PASS %s: one cache level per CU, nothing to order (%d agent-scope invalidates in %d "
              "functions; %s)" % (target, fences, len(funcs), secs))
        return PASSED
    before, after = compiler_order(funcs)
    order = "pairs as emitted: %d gl0_inv;gl1_inv (the order before PR 81450), %d gl1_inv;gl0_inv" % (before, after)
    total = 0
    bad = 0
    for fname, insns in funcs:
        try:
            seqs, found = unrepaired_paths(insns)
        except ValueError as e:
            print("ERROR %s: %s in %s" % (target, e, fname))
            return ERROR
        total += seqs
        for gl1, load_addr, load in found:
            bad += 1
            print("FAIL %s: %s: buffer_gl1_inv at 0x%x reaches `%s` at 0x%x with no buffer_gl0_inv "
                  "after it (L0 may serve stale look-back data)" % (target, fname, gl1, load, load_addr))
    if total == 0:
        print("FAIL %s: no buffer_gl1_inv in %d functions: the look-back fence was not compiled "
              "(are the device libraries linked?)" % (target, len(funcs)))
        return FAILED
    if bad:
        print("FAIL %s: %d of %d agent-scope invalidate sequences leave L0 stale (%s; %s)" % (target, bad, total, order, secs))
        return FAILED
    print("PASS %s: %d agent-scope invalidate sequences, each followed by buffer_gl0_inv before the "
          "next vector load (%s; %s)" % (target, total, order, secs))
    return PASSED


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cxx", required=True, help="HIP compiler: hipcc or clang++")
    ap.add_argument("--cxx-arg", action="append", default=[],
                    help="extra compiler argument (repeat; write --cxx-arg=--rocm-path=DIR)")
    ap.add_argument("--include", action="append", default=[],
                    help="include directory holding rocprim/ (and hip/ if the compiler does not find it)")
    ap.add_argument("--targets", required=True, help="';' or ',' separated GPU targets")
    ap.add_argument("--objdump", required=True, help="llvm-objdump with the AMDGPU target")
    ap.add_argument("--work", help="directory for objects, listings and the log (default: a new temporary one)")
    args = ap.parse_args(argv)
    targets = kc.split_targets(args.targets)
    if not targets:
        print("ERROR: no targets given")
        return ERROR
    work = str(kc.work_dir(args.work, "rocprim-lookback-fence-"))
    worst = PASSED
    with open(os.path.join(work, "commands.log"), "w") as log:
        for t in targets:
            worst = max(worst, check_target(args, t, work, log))
    print("%s: %d target(s); objects, listings and commands in %s" %
          ({PASSED: "PASSED", FAILED: "FAILED"}.get(worst, "ERROR"), len(targets), work))
    return worst


if __name__ == "__main__":
    sys.exit(main())
