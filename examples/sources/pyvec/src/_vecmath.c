#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "vecmath.h"
#include "hipvec.h"

static PyObject *dot(PyObject *self, PyObject *args) {
    PyObject *a, *b;
    if (!PyArg_ParseTuple(args, "OO", &a, &b)) return NULL;
    Py_ssize_t n = PySequence_Size(a);
    if (n < 0 || n != PySequence_Size(b)) {
        PyErr_SetString(PyExc_ValueError, "sequences must have the same length");
        return NULL;
    }
    double s = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_GetItem(a, i), *y = PySequence_GetItem(b, i);
        double xa = PyFloat_AsDouble(x), yb = PyFloat_AsDouble(y);
        Py_XDECREF(x);
        Py_XDECREF(y);
        s += vecmath_dot(&xa, &yb, 1);
    }
    return PyFloat_FromDouble(s);
}

/* The GPU library's host entry points: (patched build?, the vecmath version it links). */
static PyObject *hipvec_info(PyObject *self, PyObject *args) {
    return Py_BuildValue("(ii)", hipvec_patched(), hipvec_uses_vecmath());
}

static PyMethodDef methods[] = {
    {"dot", dot, METH_VARARGS, "Dot product."},
    {"hipvec_info", hipvec_info, METH_NOARGS, "hipvec's host entry points: (patched, vecmath version)."},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_vecmath", NULL, -1, methods};
PyMODINIT_FUNC PyInit__vecmath(void) { return PyModule_Create(&mod); }
