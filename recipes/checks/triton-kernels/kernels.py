"""The kernels the Triton check compiles: the operations Inductor's kernels for verify's
`torch-compile` case (a small MLP: matmul, bias add, GELU, a loss reduction; its backward adds
atomics) are made of. Each entry: the kernel, its argument types (pointers and scalars, in
order) and its constexpr arguments.
"""

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # erf goes through the device library (ocml), as Inductor's GELU does.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, stride, cols, BLOCK: tl.constexpr):
    # A row reduction (max, then sum) across the wave and the workgroup.
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def atomic_add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # A sum into one value by atomics, as Inductor's split reductions and scatter_add do.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))


_MM = ["i32"] * 9
_MM_BLOCKS = {"BM": 32, "BN": 32, "BK": 32}

# name -> (kernel, argument types, constexprs)
KERNELS = {
    "add-fp32": (add_kernel, ["*fp32", "*fp32", "*fp32", "i32"], {"BLOCK": 1024}),
    "gelu-fp16": (gelu_kernel, ["*fp16", "*fp16", "i32"], {"BLOCK": 1024}),
    "softmax-fp32": (softmax_kernel, ["*fp32", "*fp32", "i32", "i32"], {"BLOCK": 1024}),
    "matmul-fp16": (matmul_kernel, ["*fp16", "*fp16", "*fp16"] + _MM, _MM_BLOCKS),
    "matmul-fp32": (matmul_kernel, ["*fp32", "*fp32", "*fp32"] + _MM, _MM_BLOCKS),
    "atomic-add-fp32": (atomic_add_kernel, ["*fp32", "*fp32", "i32"], {"BLOCK": 1024}),
}
