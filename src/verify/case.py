# One case of `rocmforge verify`, run by the stack's Python in a process of its own (rocmforge
# kills the process group when the case outlives its timeout: a hang is the bug RDNA1 users hit).
# argv[1]: the case as JSON. Every case builds its inputs in float64 on the CPU from a fixed seed
# (rounded to the case's dtype, so both sides start from the same numbers), computes the float64
# CPU reference, then runs the same program on the device twice (the first call compiles
# kernels, the second finds them cached) and compares outputs and gradients with the reference.
#
# Lines on stdout, read by rocmforge (src/verify/run.rs):
#   ROCMFORGE-TORCH {"torch": v, "hip": v, "device": d}   as soon as torch imports
#   ROCMFORGE-WRONG <tensor (call)>: <the difference>      a result differs (then exit 1)
#   ROCMFORGE-RESULT {"first": s, "cached": s}             the case passed
# Any other error is a traceback (or a SystemExit message) on stderr and a non-zero exit.
#
# ROCMFORGE_VERIFY_DEVICE=cpu (from the caller's environment only; ci/verify-cpu.sh) runs the
# device side on the CPU: it proves these programs, not a GPU.
#
# Runs on torch 1.13 through 2.x and Python 3.7+: no newer syntax, and ops a torch lacks are an
# error saying so.
import copy
import json
import os
import sys
import time

case = json.loads(sys.argv[1])
import torch  # noqa: E402  (after reading the case: a broken torch is this case's error)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# The tolerances, in one place (src/verify/mod.rs and docs/verify.md repeat them). A floating
# tensor passes when max |got - want| <= ATOL + RTOL x max |want|, both maxima over the whole
# tensor: scaled by the tensor's largest value, not element by element, so an element that a long
# sum cancels to near zero does not fail on rounding alone. Integer results (indices, counts)
# must be equal.
TOLERANCE = {
    # dtype: (RTOL, ATOL)
    "float32": (1e-3, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (4e-2, 1e-2),
}

DEVICE_VAR = "ROCMFORGE_VERIFY_DEVICE"
asked = os.environ.get(DEVICE_VAR, "")
if asked not in ("", "cpu"):
    raise SystemExit(f"{DEVICE_VAR}={asked!r}: the only value it takes is `cpu`")
print(
    "ROCMFORGE-TORCH "
    + json.dumps(
        {"torch": torch.__version__, "hip": getattr(torch.version, "hip", None), "device": asked or "cuda"}
    ),
    flush=True,
)
if asked == "cpu":
    dev = torch.device("cpu")
else:
    if not torch.cuda.is_available():
        raise SystemExit("torch.cuda.is_available() is False: no GPU visible to the HIP runtime")
    dev = torch.device("cuda")
    # float32 means float32 everywhere (NVIDIA GPUs would use TF32 otherwise; gfx1010 has none).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

DTYPE_NAME = case.get("dtype", "float32")
DTYPE = getattr(torch, DTYPE_NAME)
REF = torch.float64
CPU = torch.device("cpu")
torch.manual_seed(0)
GEN = torch.Generator().manual_seed(0)


def data(*shape):
    """Normal values, float64 on the CPU, rounded to the case's dtype."""
    return torch.randn(*shape, dtype=REF, generator=GEN).to(DTYPE).to(REF)


def integers(high, *shape):
    return torch.randint(0, high, shape, generator=GEN)


def module(m):
    """`m` in float64 with parameters rounded to the case's dtype (its buffers are 0 and 1)."""
    m = m.to(REF)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.to(DTYPE).to(REF))
    return m


def put(t, dev, dtype):
    return t.to(dev, dtype) if t.is_floating_point() else t.to(dev)


def leaf(t, dev, dtype):
    return put(t, dev, dtype).detach().requires_grad_(True)


def grads(prefix, m):
    return {f"{prefix}{n}": p.grad for n, p in m.named_parameters()}


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn):
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def wrong(what):
    print("ROCMFORGE-WRONG " + what, flush=True)
    raise SystemExit(what)


def difference(got, want):
    """None when `got` (device, case dtype) matches `want` (CPU, float64 or integer); else what differs."""
    if got is None:
        return "missing (None)"
    got = got.detach().to(CPU)
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, the reference's {tuple(want.shape)}"
    if not want.is_floating_point():
        got = got.to(want.dtype)
        bad = (got != want).flatten()
        n = int(bad.sum())
        if n == 0:
            return None
        i = int(bad.nonzero()[0])
        return (
            f"{n} of {want.numel()} values differ from the reference (exact comparison), the first at flat "
            f"index {i}: {got.flatten()[i].item()} instead of {want.flatten()[i].item()}"
        )
    if want.numel() == 0:
        return None
    got = got.to(REF)
    if not bool(torch.isfinite(got).all()) and bool(torch.isfinite(want).all()):
        return f"holds {int((~torch.isfinite(got)).sum())} NaN or Inf value(s), the reference none"
    rtol, atol = TOLERANCE[DTYPE_NAME]
    scale = want.abs().max().item()
    tol = atol + rtol * scale
    diff = (got - want).abs().max().item()
    if not diff <= tol:
        return (
            f"max abs diff {diff:.3g} > tolerance {tol:.3g} "
            f"({DTYPE_NAME}: atol {atol:g} + rtol {rtol:g} x largest reference magnitude {scale:.3g})"
        )
    return None


def check(got, want, call):
    """WRONG on the first result (in the case's order) that differs, naming how many others do."""
    bad = [(name, d) for name, d in ((n, difference(got.get(n), w)) for n, w in want.items()) if d is not None]
    if bad:
        name, d = bad[0]
        others = [n for n, _ in bad[1:]]
        more = ""
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            more = f" [{len(others)} more of the {len(want)} results differ: {shown}]"
        wrong(f"{name} ({call}): {d}" + more)


# The cases: each takes the case's JSON and returns `make(dev, dtype)`, which prepares the inputs
# on `dev` and returns `run()`, the timed part, returning {name: tensor}. The reference is
# make(cpu, float64)().


def conv(c, backward=False):
    b, cin, cout, s, k = c["batch"], c["cin"], c["cout"], c["size"], c["kernel"]
    x = data(b, cin, s, s)
    master = module(nn.Conv2d(cin, cout, k, padding=k // 2))
    gy = data(b, cout, s, s)

    def make(dev, dtype):
        xd, m, gyd = put(x, dev, dtype), copy.deepcopy(master).to(dev, dtype), put(gy, dev, dtype)

        def run():
            if not backward:
                with torch.no_grad():
                    return {"output": m(xd)}
            xi = xd.detach().requires_grad_(True)
            m.zero_grad(set_to_none=True)
            y = m(xi)
            y.backward(gyd)
            return {"output": y, "grad input": xi.grad, "grad weight": m.weight.grad, "grad bias": m.bias.grad}

        return run

    return make


def conv_backward(c):
    return conv(c, backward=True)


def normalization(layer, shape):
    """Forward and backward of `layer` (affine, weights made random) on data of `shape`."""
    master = module(layer)
    with torch.no_grad():
        master.weight.copy_(1.0 + 0.25 * data(*master.weight.shape))
        master.bias.copy_(0.25 * data(*master.bias.shape))
    x, gy = data(*shape), data(*shape)

    def make(dev, dtype):
        xd, gyd = put(x, dev, dtype), put(gy, dev, dtype)

        def run():
            # A fresh copy: batchnorm's running statistics change with every forward.
            m = copy.deepcopy(master).to(dev, dtype)
            xi = xd.detach().requires_grad_(True)
            y = m(xi)
            y.backward(gyd)
            out = {"output": y, "grad input": xi.grad, "grad weight": m.weight.grad, "grad bias": m.bias.grad}
            if isinstance(m, nn.BatchNorm2d):
                out["running mean"], out["running var"] = m.running_mean, m.running_var
            return out

        return run

    return make


def batchnorm(c):
    return normalization(nn.BatchNorm2d(c["channels"]), (c["batch"], c["channels"], c["size"], c["size"]))


def groupnorm(c):
    return normalization(
        nn.GroupNorm(c["groups"], c["channels"]), (c["batch"], c["channels"], c["size"], c["size"])
    )


def layernorm(c):
    return normalization(nn.LayerNorm(c["hidden"]), (c["batch"], c["seq"], c["hidden"]))


def nonzero(c):
    n = c["n"]
    x = data(n, n) * (data(n, n) > 0.3)  # about 62% zeros

    def make(dev, dtype):
        xd = put(x, dev, dtype)
        return lambda: {"indices": torch.nonzero(xd), "indices of the mask": torch.nonzero(xd > 0.5)}

    return make


def unique(c):
    n = c["n"]
    ints = integers(n // 10, n)
    floats = torch.round(data(n) * 50)  # integral values: equal in every dtype, many repeats

    def make(dev, dtype):
        i, f = put(ints, dev, dtype), put(floats, dev, dtype)

        def run():
            out = {}
            for name, t in (("int64", i), ("float", f)):
                v, inv, cnt = torch.unique(t, sorted=True, return_inverse=True, return_counts=True)
                out.update({f"{name} values": v, f"{name} inverse": inv, f"{name} counts": cnt})
            return out

        return run

    return make


def scatter_add(c):
    n, bins = c["n"], c["bins"]
    src, index, gy = data(n), integers(bins, n), data(bins)
    src2, index2, gy2 = data(64, n // 64), integers(bins, 64, n // 64), data(64, bins)

    def make(dev, dtype):
        s, i, g = put(src, dev, dtype), index.to(dev), put(gy, dev, dtype)
        s2, i2, g2 = put(src2, dev, dtype), index2.to(dev), put(gy2, dev, dtype)

        def run():
            a, a2 = s.detach().requires_grad_(True), s2.detach().requires_grad_(True)
            y = torch.zeros(bins, device=s.device, dtype=s.dtype).scatter_add(0, i, a)
            y2 = torch.zeros(64, bins, device=s.device, dtype=s.dtype).scatter_add(1, i2, a2)
            torch.autograd.backward([y, y2], [g, g2])
            return {"output 1d": y, "output 2d": y2, "grad src 1d": a.grad, "grad src 2d": a2.grad}

        return run

    return make


def sort_topk(c):
    n, rows, cols, k = c["n"], c["rows"], c["cols"], c["k"]
    # Distinct values (a permutation), so the indices are unique and compared exactly.
    x = torch.randperm(n, generator=GEN).to(REF)
    x2 = torch.randperm(rows * cols, generator=GEN).to(REF).reshape(rows, cols)
    g, g2, gk = data(n), data(rows, cols), data(rows, k)

    def make(dev, dtype):
        xd, x2d = put(x, dev, dtype), put(x2, dev, dtype)
        gd, g2d, gkd = put(g, dev, dtype), put(g2, dev, dtype), put(gk, dev, dtype)

        def run():
            a, b = xd.detach().requires_grad_(True), x2d.detach().requires_grad_(True)
            v, i = torch.sort(a)
            v2, i2 = torch.sort(b, dim=1, descending=True)
            tv, ti = torch.topk(b, k, dim=1)
            torch.autograd.backward([v, v2, tv], [gd, g2d, gkd])
            return {
                "sorted values": v,
                "sorted indices": i,
                "row-sorted values": v2,
                "row-sorted indices": i2,
                "topk values": tv,
                "topk indices": ti,
                "grad 1d": a.grad,
                "grad 2d": b.grad,
            }

        return run

    return make


def cumsum(c):
    n, rows = c["n"], c["rows"]
    x, x2, ints = data(n), data(rows, n // rows), integers(1000, n).to(torch.int32)
    g, g2 = data(n), data(rows, n // rows)

    def make(dev, dtype):
        xd, x2d, i = put(x, dev, dtype), put(x2, dev, dtype), ints.to(dev)
        gd, g2d = put(g, dev, dtype), put(g2, dev, dtype)

        def run():
            a, b = xd.detach().requires_grad_(True), x2d.detach().requires_grad_(True)
            y, y2 = torch.cumsum(a, 0), torch.cumsum(b, 1)
            torch.autograd.backward([y, y2], [gd, g2d])
            return {"1d": y, "rows": y2, "int32": torch.cumsum(i, 0), "grad 1d": a.grad, "grad rows": b.grad}

        return run

    return make


def fft(c):
    if not hasattr(torch, "fft") or not hasattr(torch.fft, "rfft"):
        raise SystemExit(f"torch.fft is not in this torch ({torch.__version__}): it came with torch 1.7")
    rows, n, h, w = c["rows"], c["n"], c["height"], c["width"]
    x, image = data(rows, n), data(h, w)
    g = data(rows, n // 2 + 1, 2)

    def make(dev, dtype):
        xd, imaged, gd = put(x, dev, dtype), put(image, dev, dtype), put(g, dev, dtype)

        def run():
            a = xd.detach().requires_grad_(True)
            spectrum = torch.fft.rfft(a, dim=-1)
            back = torch.fft.irfft(spectrum.detach(), n=n, dim=-1)
            plane = torch.fft.fft2(imaged.to(spectrum.dtype))
            spectrum_real = torch.view_as_real(spectrum)
            spectrum_real.backward(gd)
            return {
                "rfft": spectrum_real,
                "irfft": back,
                "fft2": torch.view_as_real(plane),
                "grad rfft": a.grad,
            }

        return run

    return make


def rnn(c):
    cell = {"lstm": nn.LSTM, "gru": nn.GRU}[c["cell"]]
    b, t, layers, hidden = c["batch"], c["seq"], c["layers"], c["hidden"]
    # With biases: MIOpen's backward weights sums the bias gradient over batch and time with
    # ReduceTensor (MIOPEN_RNNWRW_REDUCTION, default 1), whose kernels do not build for gfx101x
    # in MIOpen 6.2 as released; the bias gradients are checked with every other one below.
    master = module(cell(c["input"], hidden, num_layers=layers, bias=c["bias"], batch_first=True))
    biases = [n for n, _ in master.named_parameters() if n.startswith("bias_")]
    if c["bias"] and len(biases) != 2 * layers:
        raise SystemExit(f"the {c['cell']} has bias parameters {biases}, not 2 per layer")
    x, gy, h0, gh = data(b, t, c["input"]), data(b, t, hidden), data(layers, b, hidden), data(layers, b, hidden)
    c0 = data(layers, b, hidden)
    lstm = c["cell"] == "lstm"

    def make(dev, dtype):
        m = copy.deepcopy(master).to(dev, dtype)
        m.flatten_parameters()
        xd, gyd, h0d, ghd, c0d = (put(v, dev, dtype) for v in (x, gy, h0, gh, c0))

        def run():
            m.zero_grad(set_to_none=True)
            xi, hi, ci = (v.detach().requires_grad_(True) for v in (xd, h0d, c0d))
            if lstm:
                y, (hn, cn) = m(xi, (hi, ci))
            else:
                y, hn = m(xi, hi)
            torch.autograd.backward([y, hn], [gyd, ghd])
            out = {"output": y, "h_n": hn, "grad input": xi.grad, "grad h0": hi.grad}
            if lstm:
                out.update({"c_n": cn, "grad c0": ci.grad})
            out.update(grads("grad ", m))
            return out

        return run

    return make


def sdpa(c):
    if not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit(
            f"torch.nn.functional.scaled_dot_product_attention is not in this torch ({torch.__version__}): "
            "it came with torch 2.0"
        )
    shape = (c["batch"], c["heads"], c["seq"], c["dim"])
    q, k, v, g, gc = data(*shape), data(*shape), data(*shape), data(*shape), data(*shape)

    def attention(q, k, v, causal):
        """The reference: softmax(q k^T / sqrt(d) + mask) v, written out."""
        s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    def make(dev, dtype):
        ins = [put(t, dev, dtype) for t in (q, k, v)]
        gd, gcd = put(g, dev, dtype), put(gc, dev, dtype)
        reference = dtype == REF

        def run():
            qi, ki, vi = (t.detach().requires_grad_(True) for t in ins)
            if reference:
                y, yc = attention(qi, ki, vi, False), attention(qi, ki, vi, True)
            else:
                y = F.scaled_dot_product_attention(qi, ki, vi)
                yc = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True)
            torch.autograd.backward([y, yc], [gd, gcd])
            return {"output": y, "causal output": yc, "grad q": qi.grad, "grad k": ki.grad, "grad v": vi.grad}

        return run

    return make


def matmul(c):
    n = c["n"]
    a, b, g = data(n, n), data(n, n), data(n, n)

    def make(dev, dtype):
        ad, bd, gd = put(a, dev, dtype), put(b, dev, dtype), put(g, dev, dtype)

        def run():
            x, y = ad.detach().requires_grad_(True), bd.detach().requires_grad_(True)
            out = x @ y
            out.backward(gd)
            return {"output": out, "grad a": x.grad, "grad b": y.grad}

        return run

    return make


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def adamw(c):
    master = module(small_cnn())
    x, labels = data(c["batch"], 3, c["size"], c["size"]), integers(10, c["batch"])

    def make(dev, dtype):
        xd, yd = put(x, dev, dtype), labels.to(dev)

        def run():
            m = copy.deepcopy(master).to(dev, dtype)
            # eps 1e-3: the update is then a smooth function of the gradient. With the default
            # 1e-8 it is +-lr for any gradient element far above 1e-8, and a float32 gradient
            # element near zero flips its sign on rounding alone: a difference that is no error.
            opt = torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-3, weight_decay=1e-2)
            losses, out = [], {}
            for step in range(c["steps"]):
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(m(xd), yd)
                loss.backward()
                if step == 0:
                    out.update({k: v.clone() for k, v in grads("step 1 grad ", m).items()})
                opt.step()
                losses.append(loss.detach())
            out["losses"] = torch.stack(losses)
            out.update({f"after {c['steps']} steps {n}": p for n, p in m.named_parameters()})
            return out

        return run

    return make


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + self.short(x))


def train_resnet(c):
    master = module(
        nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            Block(16, 16, 1),
            Block(16, 32, 2),
            Block(32, 64, 2),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        )
    )
    x, labels = data(c["batch"], 3, c["size"], c["size"]), integers(10, c["batch"])

    def make(dev, dtype):
        xd, yd = put(x, dev, dtype), labels.to(dev)

        def run():
            m = copy.deepcopy(master).to(dev, dtype)
            opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
            losses = []
            for _ in range(c["steps"]):
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(m(xd), yd)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            losses = torch.stack(losses)
            first, last = losses[0].item(), losses[-1].item()
            if not last < first:
                wrong(f"losses (on {dev.type}, {dtype}): the loss did not fall over {c['steps']} steps: {first:.4g} -> {last:.4g}")
            out = {"losses": losses}
            out.update({f"after {c['steps']} steps {n}": p for n, p in m.named_parameters()})
            return out

        return run

    return make


# The repeated cases: rocPRIM's decoupled look-back with a prefix type over 4 bytes gives wrong
# results on GFX10 only now and then (the compiler ordered the cache invalidates wrongly, llvm PR
# 81450; rocPRIM's hotfix is in ROCm 6.2, not 5.4), so one correct result proves little. Each
# repetition is its own result, compared exactly: a WRONG line names the one that differed.
def repeated_cumsum(n):
    v = torch.randint(-(1 << 40), 1 << 40, (n,), generator=GEN)  # sums leave the int32 range
    return "int64 cumsum", (v,), lambda v: torch.cumsum(v, 0)


def repeated_masked_select(n):
    v = torch.randint(-(1 << 40), 1 << 40, (n,), generator=GEN)
    mask = torch.rand(n, generator=GEN) < 0.5
    return "masked_select", (v, mask), torch.masked_select


def repeated_nonzero(n):
    v = torch.randint(-(1 << 40), 1 << 40, (n,), generator=GEN) * (integers(3, n) == 0)  # 2/3 zeros
    return "nonzero", (v,), torch.nonzero


REPEATED = {
    "cumsum-int64": repeated_cumsum,
    "masked-select": repeated_masked_select,
    "nonzero": repeated_nonzero,
}


def repeated(c):
    reps = c["reps"]
    name, inputs, op = REPEATED[c["what"]](c["n"])

    def make(dev, dtype):
        args = [t.to(dev) for t in inputs]
        # The CPU reference is computed once and stands for every repetition.
        once = dev.type == "cpu" and dtype == REF

        def run():
            out = {}
            for i in range(reps):
                if i == 0 or not once:
                    result = op(*args)
                out[f"{name}, repetition {i + 1} of {reps}"] = result
            return out

        return run

    return make


class Mlp(nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.inp, self.norm, self.out = nn.Linear(features, hidden), nn.LayerNorm(hidden), nn.Linear(hidden, 10)

    def forward(self, x):
        y = self.out(self.norm(F.gelu(self.inp(x))))
        return torch.log_softmax(y, dim=-1) + x.square().mean(dim=-1, keepdim=True)


def one_line(text, limit=160):
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    t = " / ".join(lines[:2]) if lines else "(no message)"
    return t if len(t) <= limit else t[: limit - 3] + "..."


def triton_state():
    """What `import triton` finds in this Python: (version or None, what to say)."""
    try:
        import triton
    except ImportError as e:
        return None, f"`import triton`: {one_line(e, 80)}"
    except Exception as e:  # a broken install raising anything else
        return None, f"`import triton`: {one_line(f'{type(e).__name__}: {e}', 80)}"
    v = getattr(triton, "__version__", "of unknown version")
    return v, f"Triton {v} is installed"


def compile_failure(e, device):
    """One line saying why torch.compile failed: the reason first, then what torch raised.

    torch 2.2 and 2.6 raise RuntimeError("Cannot find a working triton installation. ...") from
    Inductor's scheduler (create_backend) for a GPU device when torch.utils._triton.has_triton()
    is false; Dynamo wraps it in BackendCompilerFailed (its inner_exception). Newer torch raises
    torch._inductor.exc.TritonMissing, wrapped in InductorError."""
    chain, x = [], e
    while x is not None and all(x is not y for y in chain):
        chain.append(x)
        x = getattr(x, "inner_exception", None) or x.__cause__
    inner = chain[-1]
    raised = one_line(f"{type(inner).__name__}: {inner}")
    if inner is not e:
        raised = f"{type(e).__name__}: {raised}"
    if device.type == "cpu":
        return f"torch.compile failed on the CPU (Inductor's C++ backend, not Triton): {raised}"
    missing = any(type(x).__name__ == "TritonMissing" for x in chain) or any(
        "working triton installation" in str(x).lower() for x in chain
    )
    version, state = triton_state()
    if missing and version is None:
        return f"no Triton installed (torch.compile's GPU backend, Inductor, needs it; {state}): {raised}"
    if missing:
        return f"Triton unusable ({state}, but torch {torch.__version__} finds no working one): {raised}"
    return f"torch.compile failed ({state}): {raised}"


def compiled(c):
    """torch.compile (Inductor, the default backend) of a small MLP, forward and backward:
    generated kernels for the GPU come from Triton (on the CPU, from a C++ compiler)."""
    if not hasattr(torch, "compile"):
        raise SystemExit(f"torch.compile is not in this torch ({torch.__version__}): it came with torch 2.0")
    from torch._dynamo.utils import counters  # imports torch._dynamo

    # An error must not fall back to eager code and pass as compiled.
    torch._dynamo.config.suppress_errors = False
    master = module(Mlp(c["features"], c["hidden"]))
    x, gy = data(c["batch"], c["features"]), data(c["batch"], 10)

    def make(dev, dtype):
        m = copy.deepcopy(master).to(dev, dtype)
        xd, gyd = put(x, dev, dtype), put(gy, dev, dtype)
        reference = dev.type == "cpu" and dtype == REF  # eager float64, never compiled
        program = [m if reference else None]

        def run():
            try:
                if program[0] is None:
                    program[0] = torch.compile(m, fullgraph=True)
                m.zero_grad(set_to_none=True)
                xi = xd.detach().requires_grad_(True)
                y = program[0](xi)
                y.backward(gyd)
            except Exception as e:
                raise SystemExit(compile_failure(e, dev))
            if not reference and counters["stats"]["unique_graphs"] < 1:
                raise SystemExit("torch.compile compiled no graph: the program ran uncompiled")
            out = {"output": y, "grad input": xi.grad}
            out.update(grads("grad ", m))
            return out

        return run

    return make


CASES = {
    "conv": conv,
    "conv-backward": conv_backward,
    "batchnorm": batchnorm,
    "group-norm": groupnorm,
    "layer-norm": layernorm,
    "nonzero": nonzero,
    "unique": unique,
    "scatter-add": scatter_add,
    "sort-topk": sort_topk,
    "cumsum": cumsum,
    "fft": fft,
    "rnn": rnn,
    "sdpa": sdpa,
    "matmul": matmul,
    "adamw": adamw,
    "train-resnet": train_resnet,
    "repeated": repeated,
    "compile": compiled,
}

op = case["op"]
if op not in CASES:
    raise SystemExit(f"unknown case op {op!r}")
make = CASES[op](case)
want = make(CPU, REF)()
run = make(dev, DTYPE)
got, first = timed(run)
check(got, want, "first call")
got, cached = timed(run)
check(got, want, "cached call")
print("ROCMFORGE-RESULT " + json.dumps({"first": first, "cached": cached}), flush=True)
