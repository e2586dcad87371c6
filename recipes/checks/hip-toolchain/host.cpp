// A host program that links hip::host and the device library, as an application does. It is
// linked, not run: the build machine need not have a GPU.
#include <hip/hip_runtime_api.h>
#include <cstdio>

extern "C" float hipcheck_half_roundtrip(float v);

int main() {
    int devices = 0;
    if (hipGetDeviceCount(&devices) != hipSuccess) {
        devices = 0;
    }
    std::printf("devices: %d, half roundtrip of 1.5: %g\n", devices, hipcheck_half_roundtrip(1.5f));
    return 0;
}
