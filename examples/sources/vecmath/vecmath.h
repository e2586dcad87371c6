#ifndef VECMATH_H
#define VECMATH_H
/* Host-side helpers used by hipvec and pyvec. */
double vecmath_dot(const double *a, const double *b, int n);
int vecmath_version(void);
#endif
