#ifndef HIPVEC_H
#define HIPVEC_H
#ifdef __cplusplus
extern "C" {
#endif
/* Scales a vector on the GPU; returns 0 on success, -1 when no GPU is present. */
int hipvec_scale(double *x, int n, double factor);
int hipvec_uses_vecmath(void);
#ifdef __cplusplus
}
#endif
#endif
