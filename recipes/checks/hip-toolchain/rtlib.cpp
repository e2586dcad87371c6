// Linked with `--rtlib=compiler-rt --unwindlib=libgcc` by the stack's clang, as rocSOLVER links
// its library (rocm-6.2.2 library/src/CMakeLists.txt:355-356; rocm-5.4.3 :241-242): fails when
// the compiler has no builtins. 128-bit division and half-precision conversions are calls into
// them.
#include <cstdio>

int main(int argc, char**) {
    __int128 big = static_cast<__int128>(argc) << 100;
    _Float16 h = static_cast<_Float16>(static_cast<float>(argc) * 1.5f);
    std::printf("%d %d\n", static_cast<int>(big / (argc + 2)), static_cast<int>(static_cast<float>(h)));
    return 0;
}
