// Does hipBLASLt declare a compute type enum of its own, not hipblasComputeType_t?
#include <hipblaslt/hipblaslt.h>
int main() {
    hipblasLtComputeType_t t = HIPBLASLT_COMPUTE_F32;
    return static_cast<int>(t) == 0 ? 0 : 1;
}
