// Does the library give an algorithm's index (hipblaslt_ext::getIndexFromAlgo), and link?
#include <string>
#include <hipblaslt/hipblaslt.h>
#include <hipblaslt/hipblaslt-ext.hpp>
int main() {
    hipblasLtMatmulAlgo_t algo{};
    return hipblaslt_ext::getIndexFromAlgo(algo) == 0 ? 0 : 1;
}
