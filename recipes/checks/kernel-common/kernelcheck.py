"""What the kernel checks share (miopen-batchnorm, miopen-legacy-ck, miopen-sweep,
rocprim-lookback-fence): their exit codes, the --targets list, the work folder, reading the tree,
the compiler's version, compiling on a thread pool, and the end of a run (verdict, JSON results).

A check finds this folder beside its own (`../kernel-common/`): so it sits in the recipe tree,
and so a recipe's `[[check]] helpers = "kernel-common"` lays it out in the build.
Needs Python 3 (standard library).
"""
import concurrent.futures, json, os, re, subprocess, sys, tempfile
from pathlib import Path

# Exit codes: every compile passed; a compile or a rule failed; the check could not run (a tree,
# a list or a tool that could not be read, a usage error).
PASSED, FAILED, ERROR = 0, 1, 2

# The manifest `rocmforge inspect` writes into a kernel tree it reads out of a libMIOpen.
EMBEDDED = "miopen-embedded.json"


class TreeError(Exception):
    """The tree (or a list, or a tool) could not be read: the check ends with ERROR."""


def read(p):
    return Path(p).read_text(encoding="utf-8", errors="replace")


def split_targets(text):
    """'gfx1010;gfx1012' (or ',' or blanks between) -> ['gfx1010', 'gfx1012']."""
    return [t for t in re.split(r"[;,\s]+", text) if t]


def targets_arg(ap, text):
    """--targets as a list; a usage error (exit 2) when it names none."""
    return split_targets(text) or ap.error("no --targets")


def work_dir(path, prefix):
    """--work (made if absent), else a new temporary folder named `prefix...`."""
    work = Path(path) if path else Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    return work


def embedded_manifest(src):
    """The manifest of a kernel tree read out of a libMIOpen, or None for a source tree."""
    m = Path(src) / EMBEDDED
    return json.loads(read(m)) if m.is_file() else None


def embedded_ck_flag(manifest, device):
    """The legacy composable kernel's target macro of a library's host code (miopen-legacy-ck,
    miopen-sweep), from its strings: a bare ` -DCK_AMD_GPU_GFX` literal is completed with the device name at run time (MIOpen 3.5: gfx1010 ->
    -DCK_AMD_GPU_GFX1010); otherwise the literal naming the device, if any (3.4 lists each
    target it knows; one it does not list gets none), else a family literal whose stem begins
    the device's name (-DCK_AMD_GPU_GFX101X for gfx1010). Returns (flag, how it was assumed)."""
    defines = set(manifest.get("host_defines", []))
    listed = sorted(d for d in defines if re.fullmatch(r"-DCK_AMD_GPU_GFX\w+", d))
    if "-DCK_AMD_GPU_GFX" in defines:
        macro = "CK_AMD_GPU_" + device.upper()
        return " -D" + macro, "-D%s (the library's ` -DCK_AMD_GPU_GFX` literal, completed with the device name)" % macro
    own = "-DCK_AMD_GPU_" + device.upper()
    if own in defines:
        return " " + own, "%s (named by the library's strings)" % own
    # A family macro (the rocm-6.2 stack's patch 0003: `StartsWith(device_name, "gfx101")` gives
    # -DCK_AMD_GPU_GFX101X): the literal ending in X whose stem begins the device's name.
    family = [d for d in listed if d.endswith("X") and device.upper().startswith(d[len("-DCK_AMD_GPU_"):-1])]
    if family:
        return " " + family[0], "%s (named by the library's strings: a family macro, taken for every %s* device)" % (
            family[0], family[0][len("-DCK_AMD_GPU_"):-1].lower())
    return "", "no CK_AMD_GPU_* macro (the library's strings name only %s)" % (
        " ".join(d[2:] for d in listed) or "none")


def compiler_version(clang):
    """The first line of `clang --version` ('?' when it prints none); OSError when it cannot run."""
    out = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout
    return (out.splitlines() or ["?"])[0]


def parallel(fn, jobs, workers=None):
    """fn(*job) for every job on a pool of `workers` threads (default: one per core), the
    results in the jobs' order."""
    with concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 2) as pool:
        futs = [pool.submit(fn, *job) for job in jobs]
        return [f.result() for f in futs]


def error(e, who="check"):
    """Say why the check could not run; its exit code."""
    print("%s error: %s" % (who, e), file=sys.stderr)
    return ERROR


def verdict(failed):
    """The last line (PASS or FAIL) and the exit code."""
    print("FAIL" if failed else "PASS")
    return FAILED if failed else PASSED


def write_json(path, check, rows, problems, assumed, compiler, passed):
    """The results as `rocmforge` reads them: one object per compile, the other problems, what was
    assumed, the compiler, the verdict. Nothing when `path` is None."""
    if path is not None:
        Path(path).write_text(json.dumps({"check": check, "compiles": rows, "problems": problems,
                                          "assumed": assumed, "compiler": compiler,
                                          "pass": passed}, indent=1))
