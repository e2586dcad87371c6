#include "vecmath.h"
double vecmath_dot(const double *a, const double *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
int vecmath_version(void) { return 100; }
