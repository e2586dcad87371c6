# One case of `rocmforge verify`, run by the stack's Python in a process of its own (rocmforge
# kills the process group when the case outlives its timeout: a hang is the bug RDNA1 users hit).
# argv[1]: the case as JSON. Prints one line `ROCMFORGE-RESULT {"first": s, "cached": s}`; an
# error is a traceback on stderr and a non-zero exit.
import json
import sys
import time

case = json.loads(sys.argv[1])
import torch  # noqa: E402  (after reading the case: a broken torch is this case's error)

if not torch.cuda.is_available():
    raise SystemExit("torch.cuda.is_available() is False: no GPU visible to the HIP runtime")
dev = torch.device("cuda")
torch.manual_seed(0)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def check(name, got, want, tol):
    if not torch.isfinite(got).all():
        raise SystemExit(f"{name}: the GPU result holds NaN or Inf")
    err = (got - want).abs().max().item()
    scale = max(1.0, want.abs().max().item())
    if err > tol * scale:
        raise SystemExit(f"{name}: the GPU result differs from the CPU's by {err:.3g} (max |x| {scale:.3g})")


op = case["op"]
if op == "conv":
    x = torch.randn(case["batch"], case["cin"], case["size"], case["size"])
    conv = torch.nn.Conv2d(case["cin"], case["cout"], case["kernel"], padding=case["kernel"] // 2)
    want = conv(x).detach()
    xg, cg = x.to(dev), conv.to(dev)
    with torch.no_grad():
        got, first = timed(lambda: cg(xg))
        _, cached = timed(lambda: cg(xg))
    check("conv2d", got.cpu(), want, 1e-2)
elif op == "batchnorm":
    x = torch.randn(case["batch"], case["channels"], case["size"], case["size"])
    bn = torch.nn.BatchNorm2d(case["channels"])
    want = bn(x.clone().requires_grad_(True))
    bng = bn.to(dev)

    def fwd_bwd():
        xg = x.to(dev).requires_grad_(True)
        y = bng(xg)
        y.sum().backward()
        return y

    got, first = timed(fwd_bwd)
    _, cached = timed(fwd_bwd)
    check("batchnorm", got.detach().cpu(), want.detach(), 1e-2)
elif op == "matmul":
    a = torch.randn(case["n"], case["n"])
    b = torch.randn(case["n"], case["n"])
    want = a @ b
    ag, bg = a.to(dev), b.to(dev)
    got, first = timed(lambda: ag @ bg)
    _, cached = timed(lambda: ag @ bg)
    check("matmul", got.cpu(), want, 1e-2)
else:
    raise SystemExit(f"unknown case op {op!r}")

print("ROCMFORGE-RESULT " + json.dumps({"first": first, "cached": cached}), flush=True)
