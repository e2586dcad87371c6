// Device code the check compiles for every requested target; `rocmforge` reads the targets in
// libhipcheck.so afterwards (the check's `device-code`).
#include <hip/hip_runtime.h>

__global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

// Half-precision arithmetic on the host side of a HIP translation unit is what needs the
// compiler-rt builtins (__truncsfhf2 and friends) at link time.
extern "C" float hipcheck_half_roundtrip(float v) {
    _Float16 h = static_cast<_Float16>(v);
    return static_cast<float>(h);
}

extern "C" int hipcheck_launch(float a, const float* x, float* y, int n) {
    hipLaunchKernelGGL(saxpy, dim3((n + 255) / 256), dim3(256), 0, 0, a, x, y, n);
    return hipGetLastError() == hipSuccess ? 0 : 1;
}
