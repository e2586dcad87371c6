# What torch a Python has, for `rocmforge verify --python PY` on a torch rocmforge did not
# install (src/verify/probe.rs reads the line it prints). It imports torch and reports, without
# touching a GPU:
#   ROCMFORGE-PROBE {"python", "python_version", "torch", "torch_dir", "hip", "cuda",
#                    "arch_flags", "arch_flags_error", "libraries", "miopen", "miopen_library",
#                    "override", "error"}
# arch_flags: torch._C._cuda_getArchFlags(), the list the build was compiled for (what
# torch.cuda.get_arch_list() returns only when a device is visible), or null when this torch has
# no such function. libraries: the shared libraries the process has mapped after `import torch`
# (/proc/self/maps). miopen: miopenGetVersion() of the libMIOpen already loaded (ctypes; nothing
# new is loaded). Runs on Python 3.7+ and torch 1.13+.
import json
import os
import sys

out = {
    "python": sys.executable,
    "python_version": sys.version.split()[0],
    "override": os.environ.get("HSA_OVERRIDE_GFX_VERSION"),
}


def say():
    print("ROCMFORGE-PROBE " + json.dumps(out), flush=True)


try:
    import torch
except BaseException as e:  # a broken torch is what this run reports
    lines = str(e).strip().splitlines()
    out["error"] = "`import torch`: %s: %s" % (type(e).__name__, lines[-1] if lines else "")
    say()
    sys.exit(0)

out["torch"] = torch.__version__
out["torch_dir"] = os.path.dirname(os.path.realpath(torch.__file__))
version = getattr(torch, "version", None)
out["hip"] = getattr(version, "hip", None)
out["cuda"] = getattr(version, "cuda", None)
flags = getattr(torch._C, "_cuda_getArchFlags", None)
out["arch_flags"] = None
if flags is not None:
    try:
        got = flags()
        out["arch_flags"] = got.split() if isinstance(got, str) else list(got or [])
    except Exception as e:
        out["arch_flags_error"] = "%s: %s" % (type(e).__name__, e)

libraries = []
try:
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6:
                path = parts[5].strip()
                name = os.path.basename(path)
                if path.startswith("/") and (name.endswith(".so") or ".so." in name) and path not in libraries:
                    libraries.append(path)
except OSError:
    pass
out["libraries"] = libraries

miopen = [p for p in libraries if os.path.basename(p).startswith("libMIOpen.so")]
if miopen:
    out["miopen_library"] = miopen[0]
    try:
        import ctypes

        lib = ctypes.CDLL(miopen[0])
        v = [ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()]
        status = lib.miopenGetVersion(*[ctypes.byref(x) for x in v])
        if status == 0:
            out["miopen"] = "%d.%d.%d" % tuple(x.value for x in v)
        else:
            out["miopen_error"] = "miopenGetVersion returned status %d" % status
    except Exception as e:
        out["miopen_error"] = "%s: %s" % (type(e).__name__, e)
say()
