// Does hipBLASLt declare a data type enum of its own (as it did before ROCm 6.0), not hipDataType?
#include <hipblaslt/hipblaslt.h>
int main() {
    hipblasltDatatype_t t = HIPBLASLT_R_16F;
    return static_cast<int>(t) == 0 ? 0 : 1;
}
