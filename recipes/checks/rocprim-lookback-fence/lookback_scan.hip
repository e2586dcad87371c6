// Instantiates rocPRIM's decoupled look-back device scan for 8-byte prefix
// types. rocPRIM keeps prefixes of 4 bytes or less packed with their flag in
// one atomic word; wider ones take the lookback_scan_state specialisation
// that orders value and flag with detail::memory_fence_device(). Only that
// path is what check.py inspects, so the types here must be wider than 4
// bytes. The host functions exist to make the compiler emit the kernels:
// with --cuda-device-only only device code is kept.
#include <hip/hip_runtime.h>
#include <rocprim/device/device_scan.hpp>

hipError_t lookback_scan_int64(void* temp, size_t& bytes, const long long* in, long long* out,
                               size_t n, hipStream_t stream)
{
    return rocprim::inclusive_scan(temp, bytes, in, out, n, rocprim::plus<long long>(), stream);
}

hipError_t lookback_scan_double(void* temp, size_t& bytes, const double* in, double* out,
                                size_t n, hipStream_t stream)
{
    return rocprim::inclusive_scan(temp, bytes, in, out, n, rocprim::plus<double>(), stream);
}
