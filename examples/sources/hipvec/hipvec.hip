#include <hip/hip_runtime.h>
#include "hipvec.h"
extern "C" {
#include "vecmath.h"
}

__global__ void scale_kernel(double *x, int n, double factor) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

extern "C" int hipvec_scale(double *x, int n, double factor) {
    double *d = nullptr;
    if (hipMalloc(&d, n * sizeof(double)) != hipSuccess) return -1;
    hipMemcpy(d, x, n * sizeof(double), hipMemcpyHostToDevice);
    hipLaunchKernelGGL(scale_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, d, n, factor);
    hipMemcpy(x, d, n * sizeof(double), hipMemcpyDeviceToHost);
    hipFree(d);
    return 0;
}

extern "C" int hipvec_uses_vecmath(void) { return vecmath_version(); }
