#!/usr/bin/env python3
"""The Triton check (issue 40): Triton, as the stack installs it, compiles the kernels of
kernels.py for each requested target with triton.compile(GPUTarget("hip", target, 32)), and
each code object is read back with an LLVM that has the AMDGPU target (not Triton's own):

1. its target (amdhsa.target of the metadata note) is the requested one, and every kernel's
   wave size (.wavefront_size) is the target's: 32 on GFX10 and later, 64 on GFX9;
2. its disassembly for the target (llvm-objdump --mcpu) decodes every word, and every
   instruction re-assembles for the target (llvm-mc --mcpu) to the bytes the object holds
   (a GFX10 VOP3 whose unused src2 holds 0x80, as newer LLVMs write it and LLVM up to 21
   cannot decode, is read with it cleared, and counted);
3. on GFX10 and later, no DPP row_bcast (GFX9 only) in the object or in Triton's assembly;
4. every buffer instruction's descriptor (its fourth dword, set by an s_mov_b32 of a constant
   before it) has the target's control bits: on GFX10 and later RESOURCE_LEVEL (bit 24) 1 and
   OOB_SELECT (bits 28-29) 3, as LLVM's own descriptors for GFX10 (0x31c16000) and the legacy
   composable_kernel fix (0x31014000) have them; a nonzero format (bits 12-18); type (bits
   30-31) 0. On GFX9: bits 24-31 zero and both format fields nonzero.

Triton's settings come from the environment, as in a user's process (the profile's
AMDGCN_USE_BUFFER_OPS). Exit 0 when everything holds; 1 with a FAIL line naming the target,
the kernel and the reason for each that does not. Python 3.10+.
"""

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# A wheel member may not leave the folder it is unpacked into.
def unpack_wheel(wheel: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = Path(info.filename).parts
            if info.filename.startswith("/") or ".." in parts:
                sys.exit(f"check: {wheel}: member {info.filename!r} would leave the folder it is unpacked into")
            z.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(dest / info.filename, mode)


def find_wheel(path: Path) -> Path:
    if path.is_file():
        return path
    wheels = sorted(path.glob("triton-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"check: {path}: expected one triton-*.whl, found {[w.name for w in wheels]}")
    return wheels[0]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def gfx_major(target: str) -> int:
    m = re.fullmatch(r"gfx(\d+?)(\d[0-9a-f])", target.split(":")[0])
    if not m:
        sys.exit(f"check: {target!r} is not a gfx target name")
    return int(m.group(1))


def expected_wave(target: str) -> int:
    return 64 if gfx_major(target) == 9 else 32


def descriptor_problem(target: str, word3: int) -> str | None:
    fmt = (word3 >> 12) & 0x7F
    if gfx_major(target) >= 10:
        wrong = []
        if (word3 >> 24) & 1 != 1:
            wrong.append("RESOURCE_LEVEL (bit 24) is 0, GFX10 needs 1")
        if (word3 >> 28) & 3 != 3:
            wrong.append(f"OOB_SELECT (bits 28-29) is {(word3 >> 28) & 3}, not 3 (raw: out of range iff offset >= num_records, which Triton's masked lanes rely on)")
        if fmt == 0:
            wrong.append("FORMAT (bits 12-18) is 0")
        if word3 >> 30:
            wrong.append(f"type (bits 30-31) is {word3 >> 30}, not 0")
        if wrong:
            return f"0x{word3:x} is not a GFX10 descriptor (LLVM's own for {target}: 0x31c16000): " + "; ".join(wrong)
        return None
    if word3 >> 24 or (word3 >> 12) & 7 == 0 or (word3 >> 15) & 0xF == 0:
        return f"0x{word3:x} is not a GFX9 descriptor (bits 24-31 zero, NUM_FORMAT and DATA_FORMAT nonzero)"
    return None


LINE = re.compile(r"^\s+(?P<text>\S.*?)\s*//\s*(?P<addr>[0-9A-Fa-f]+):\s*(?P<words>(?:[0-9A-F]{8}\s?)+)")
SREG = re.compile(r"^s(\d+)$")
SRANGE = re.compile(r"^s\[(\d+):(\d+)\]$")


def objdump(llvm: Path, target: str, obj: Path) -> list[tuple[str, int, bytes]]:
    """(instruction text, its address, its bytes) for each instruction of the object's .text."""
    p = run([str(llvm / "bin/llvm-objdump"), "-d", f"--mcpu={target}", str(obj)])
    if p.returncode != 0:
        raise CheckError(f"llvm-objdump failed: {p.stderr.strip()}")
    out = []
    for line in p.stdout.splitlines():
        m = LINE.match(line)
        if not m:
            if line.startswith("\t") and line.strip():
                raise CheckError(f"llvm-objdump line not understood: {line.strip()}")
            continue
        data = b"".join(int(w, 16).to_bytes(4, "little") for w in m.group("words").split())
        out.append((m.group("text"), int(m.group("addr"), 16), data))
    return out


def text_section(image: bytes) -> tuple[int, int, int]:
    """(address, file offset, size) of an ELF64 object's .text."""
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQ", image, shoff + i * shentsize)
    names = header(shstrndx)[4]
    for i in range(shnum):
        name, _, _, addr, offset, size = header(i)
        if image[names + name:image.index(b"\0", names + name)] == b".text":
            return addr, offset, size
    raise CheckError("no .text section")


# A GFX10 VOP3 word (bits 26-31 110101) whose second dword's src2 (bits 18-26) holds 0x80, the
# inline constant 0: Triton 3.7's LLVM writes it into the src2 of instructions with two sources
# (v_add_co_u32, v_lshlrev_b64, v_cmp_*_e64, ...), where LLVM 15 and 19 write 0 and decode
# nothing else (docs/triton.md).
VOP3 = 0b110101
SRC2 = 0x1FF << 18
SRC2_ZERO = 0x80 << 18


def disassemble(llvm: Path, target: str, obj: Path) -> tuple[list[tuple[str, bytes]], int]:
    """(instruction text, its bytes) for each instruction of the object's .text, and how many
    VOP3 instructions were read with their unused src2 0x80 cleared to 0. A word pair the
    disassembler cannot decode as it is is cleared when it decodes with src2 0 and not with
    src2 vcc_lo: the disassembler takes src2 as bits that must be 0, so the instruction reads
    no src2 (one that reads it decodes with vcc_lo, and is left undecodable). The cleared
    bytes are what the re-assembly compares with."""
    instrs = objdump(llvm, target, obj)
    if gfx_major(target) < 10:
        return [(t, d) for t, _, d in instrs], 0
    image = bytearray(obj.read_bytes())
    addr, offset, size = text_section(image)
    at_file = lambda at: offset + at - addr + 4
    tried, cleared = set(), set()

    def with_src2(ats, value):
        copy = bytearray(image)
        for at in ats:
            second, = struct.unpack_from("<I", copy, at_file(at))
            struct.pack_into("<I", copy, at_file(at), second & ~SRC2 | value << 18)
        return copy

    def decoded_at(copy, name):
        path = obj.with_suffix(name)
        path.write_bytes(copy)
        return path, {at: text for text, at, _ in objdump(llvm, target, path)}

    # Each pass takes the words the last one could not decode (after one, the disassembler
    # reads the next word as an instruction of its own, so a pass may show more).
    while True:
        found = []
        for text, at, data in instrs:
            if not text.startswith(".long") or len(data) != 4 or at + 8 > addr + size or at in tried:
                continue
            first, second = struct.unpack_from("<II", image, at_file(at) - 4)
            if first >> 26 == VOP3 and second & SRC2 == SRC2_ZERO:
                found.append(at)
        if not found:
            break
        tried.update(found)
        _, probe = decoded_at(with_src2(found, 0x6A), ".src2-vcc.hsaco")
        unused = [at for at in found if probe.get(at, ".long").startswith(".long")]
        if not unused:
            break
        image = with_src2(unused, 0)
        cleared.update(unused)
        read, _ = decoded_at(image, ".src2-cleared.hsaco")
        instrs = objdump(llvm, target, read)
    # A cleared pair that still does not decode counts as no clearing: it stays undecodable.
    decoded = sum(1 for t, at, _ in instrs if at in cleared and not t.startswith(".long"))
    return [(t, d) for t, _, d in instrs], decoded


class CheckError(Exception):
    pass


def reassemble(llvm: Path, target: str, instrs: list[tuple[str, bytes]]) -> tuple[list[str], int]:
    """Problems (a word the disassembler could not decode, an instruction llvm-mc refuses for
    the target), and how many instructions it encodes to other bytes."""
    problems = []
    for text, _ in instrs:
        if "<unknown>" in text or text.startswith(".long") or text.startswith(".byte"):
            problems.append(f"undecodable for {target}: {text}")
    if problems:
        return problems, 0
    src = "".join(t + "\n" for t, _ in instrs)
    p = run([str(llvm / "bin/llvm-mc"), "--triple=amdgcn-amd-amdhsa", f"--mcpu={target}", "--show-encoding"],
            input=src)
    for m in re.finditer(r"<stdin>:(\d+):\d+: error: (.*)", p.stderr):
        n = int(m.group(1))
        problems.append(f"does not assemble for {target}: `{instrs[n - 1][0]}`: {m.group(2)}")
    if problems or p.returncode != 0:
        return problems or [f"llvm-mc failed: {p.stderr.strip()[-400:]}"], 0
    encodings = re.findall(r"; encoding: \[([^\]]*)\]", p.stdout)
    if len(encodings) != len(instrs):
        return [f"llvm-mc encoded {len(encodings)} instructions of {len(instrs)}"], 0
    # Other bytes for the same text are no error: fields the instruction ignores may differ
    # between LLVM versions (LLVM 15 writes 0 where Triton's LLVM writes EXEC_LO into a GFX10
    # v_cmpx_*_e64's SDST field). They are counted in the summary.
    differ = sum(1 for (_, data), enc in zip(instrs, encodings) if bytes(int(b, 16) for b in enc.split(",")) != data)
    return problems, differ


def defining_constant(instrs: list[tuple[str, bytes]], i: int, reg: str) -> tuple[int | None, str]:
    """The constant the last write to `reg` before instruction i puts there, following
    register copies (`s_mov_b32 s31, s27`, `s_mov_b64 s[50:51], s[2:3]`); ENTRY when nothing
    before it writes the register; else (None, why)."""
    for j in range(i - 1, -1, -1):
        prev = instrs[j][0]
        mnemonic, _, ops = prev.partition(" ")
        operands = [o.strip() for o in ops.split(",")] if ops else []
        dst = operands[0] if operands else ""
        r = SRANGE.match(dst)
        n = int(reg[1:])
        if dst != reg and not (r and int(r.group(1)) <= n <= int(r.group(2))):
            continue
        if mnemonic in ("s_mov_b32", "s_movk_i32") and dst == reg and len(operands) == 2:
            src = operands[1]
            if SREG.match(src):
                return defining_constant(instrs, j, src)
            try:
                return int(src, 0) & 0xFFFFFFFF, ""
            except ValueError:
                pass
        if mnemonic == "s_mov_b64" and r and len(operands) == 2 and SRANGE.match(operands[1]):
            return defining_constant(instrs, j, f"s{int(SRANGE.match(operands[1]).group(1)) + n - int(r.group(1))}")
        return None, f"set by `{prev}`, not a constant"
    # Set before the kernel starts: the HSA runtime's private segment buffer (s[0:3] at entry),
    # which scratch spills use; not Triton's to build.
    return ENTRY, ""


ENTRY = -1


def descriptors(instrs: list[tuple[str, bytes]]) -> tuple[list[int], list[str]]:
    """The fourth dword of each buffer instruction's resource, as the constant the last write
    to that register before it puts there (Triton builds descriptors from constants; the scan
    is linear, not along the control flow). A fourth dword set otherwise is a problem, named."""
    values, problems = [], []
    for i, (text, _) in enumerate(instrs):
        mnemonic, _, ops = text.partition(" ")
        if not mnemonic.startswith("buffer_") or mnemonic.startswith(("buffer_gl", "buffer_wb", "buffer_inv")):
            continue
        quads = [m for m in (SRANGE.match(o.strip()) for o in ops.split(",")) if m and int(m.group(2)) - int(m.group(1)) == 3]
        if not quads:
            problems.append(f"`{text}`: no 4-register resource operand")
            continue
        reg = f"s{int(quads[0].group(1)) + 3}"
        value, why = defining_constant(instrs, i, reg)
        if value is None:
            problems.append(f"`{text}`: its descriptor's fourth dword {reg} is {why}")
        elif value != ENTRY:
            values.append(value)
    return values, problems


def notes(llvm: Path, obj: Path) -> tuple[str | None, dict[str, int]]:
    p = run([str(llvm / "bin/llvm-readelf"), "--notes", str(obj)])
    if p.returncode != 0:
        raise CheckError(f"llvm-readelf failed: {p.stderr.strip()}")
    target = re.search(r"amdhsa\.target:\s+'?([^'\s]+)'?", p.stdout)
    waves = {}
    # Each kernel's map lists .name and .wavefront_size (in either order).
    for block in re.split(r"\n\s*-\s+\.", p.stdout):
        name = re.search(r"(?:^|\n)\s*\.?name:\s+(\S+)", block)
        wave = re.search(r"\.wavefront_size:\s+(\d+)", block)
        if name and wave:
            waves[name.group(1)] = int(wave.group(1))
    return (target.group(1) if target else None), waves


def compile_kernel(triton, target: str, name: str, fn, types, constexprs):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    gpu = GPUTarget("hip", target, 32)
    backend = make_backend(gpu)
    params = fn.arg_names
    types = iter(types)
    signature = {a: ("constexpr" if a in constexprs else next(types)) for a in params}
    pointers = [i for i, a in enumerate(params) if signature[a].startswith("*")]
    if hasattr(backend, "get_attrs_descriptor"):
        # Triton 3.2: an AttrsDescriptor of the backend's class; pointers 16-byte aligned and
        # within 2 GiB, as the launcher specialises real tensors (what buffer ops need).
        attrs = backend.get_attrs_descriptor(None, None)
        attrs.arg_properties = {"tt.divisibility": pointers, "tt.equal_to": []}
        if "tt.pointer_range" in attrs.property_values:
            attrs.arg_properties["tt.pointer_range"] = pointers
        attrs._init_slots()
        src = ASTSource(fn, {a: t for a, t in signature.items() if t != "constexpr"}, constants=constexprs, attrs=attrs)
    else:
        # Triton 3.3 and later: constexprs in the signature, attributes per argument index.
        attrs = {(i,): [["tt.divisibility", 16], ["tt.pointer_range", 32]] for i in pointers}
        src = ASTSource(fn, signature, constexprs={(params.index(k),): v for k, v in constexprs.items()}, attrs=attrs)
    return triton.compile(src, target=gpu)


def check_kernel(llvm: Path, target: str, name: str, kernel, work: Path) -> tuple[list[str], str]:
    obj = work / target / f"{name}.hsaco"
    obj.parent.mkdir(parents=True, exist_ok=True)
    obj.write_bytes(kernel.asm["hsaco"])
    (work / target / f"{name}.s").write_text(kernel.asm["amdgcn"])
    problems = []
    got_target, waves = notes(llvm, obj)
    if got_target is None or not got_target.endswith(f"--{target}") and f"--{target}:" not in got_target:
        problems.append(f"code object target {got_target}, not {target}")
    if not waves:
        problems.append("no kernel in the metadata note")
    for k, w in waves.items():
        if w != expected_wave(target):
            problems.append(f"kernel {k} has wave size {w}, {target} runs Triton's kernels as wave{expected_wave(target)}")
    instrs, cleared = disassemble(llvm, target, obj)
    if not instrs:
        problems.append("no instructions in .text")
    asm_problems, differ = reassemble(llvm, target, instrs)
    problems += asm_problems
    if gfx_major(target) >= 10:
        for text in [t for t, _ in instrs] + kernel.asm["amdgcn"].splitlines():
            if "row_bcast" in text:
                problems.append(f"DPP row_bcast, which {target} does not have: `{text.strip()}`")
                break
    values, desc_problems = descriptors(instrs)
    problems += desc_problems
    for v in sorted(set(values)):
        bad = descriptor_problem(target, v)
        if bad:
            problems.append(f"buffer descriptor {bad}")
    desc = ", ".join(f"0x{v:x}" for v in sorted(set(values))) or "none"
    dpp = ", no row_bcast" if gfx_major(target) >= 10 else ""
    src2 = f"; {cleared} VOP3 read with their unused src2 0x80 as 0" if cleared else ""
    summary = f"{got_target} wave{','.join(str(w) for w in sorted(set(waves.values())))}, {len(instrs)} instructions re-assembled ({differ} to other bytes{src2}){dpp}, buffer descriptors: {desc}"
    return problems, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", required=True, type=Path, help="the triton wheel, or a folder holding one")
    ap.add_argument("--llvm", required=True, type=Path, help="an LLVM with the AMDGPU target: bin/ld.lld, llvm-mc, llvm-objdump, llvm-readelf")
    ap.add_argument("--targets", required=True, help="';' or ',' separated gfx targets")
    ap.add_argument("--work", required=True, type=Path)
    args = ap.parse_args()

    for tool in ("ld.lld", "llvm-mc", "llvm-objdump", "llvm-readelf"):
        if not (args.llvm / "bin" / tool).is_file():
            sys.exit(f"check: {args.llvm / 'bin' / tool} not found (the LLVM given by --llvm needs ld.lld, llvm-mc, llvm-objdump, llvm-readelf)")
    targets = [t for t in re.split(r"[;,]", args.targets) if t]
    if not targets:
        sys.exit("check: no targets")
    work = args.work.resolve()
    wheel = find_wheel(args.wheel)
    site = work / "site"
    unpack_wheel(wheel, site)
    # Triton's linker, and a cache of its own (never the user's ~/.triton).
    # Not resolved: ld.lld is a link to lld, which picks its flavour by the name it is run as.
    os.environ["TRITON_HIP_LLD_PATH"] = os.path.abspath(args.llvm / "bin/ld.lld")
    os.environ["TRITON_CACHE_DIR"] = str(work / "cache")
    os.environ["TRITON_HOME"] = str(work)
    sys.path.insert(0, str(site))
    sys.path.insert(0, str(HERE))
    import triton
    import kernels

    print(f"triton {triton.__version__} from {wheel.name}; AMDGCN_USE_BUFFER_OPS={os.environ.get('AMDGCN_USE_BUFFER_OPS', '(unset)')}; linker {os.environ['TRITON_HIP_LLD_PATH']}")
    failed = 0
    for target in targets:
        for name, (fn, types, constexprs) in kernels.KERNELS.items():
            try:
                kernel = compile_kernel(triton, target, name, fn, types, constexprs)
                problems, summary = check_kernel(args.llvm, target, name, kernel, work)
            except CheckError as e:
                problems, summary = [str(e)], ""
            except Exception as e:  # Triton's own error: the kernel did not compile
                problems, summary = [f"triton.compile failed: {type(e).__name__}: {str(e).strip()[-600:]}"], ""
            if problems:
                failed += 1
                for p in problems:
                    print(f"FAIL {target} {name}: {p}")
            else:
                print(f"PASS {target} {name}: {summary}")
    total = len(targets) * len(kernels.KERNELS)
    print(f"{'FAIL' if failed else 'PASS'}: {total - failed} of {total} kernels hold for {', '.join(targets)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
