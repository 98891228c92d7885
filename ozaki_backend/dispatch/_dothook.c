/*
 * _dothook: ndarray.dot and NumPy's dot builtin, routed before NumPy allocates their
 * result.
 *
 * Why: NumPy's cblas_matrixproduct (behind ndarray.dot, np.dot, np.cov, tensordot's and
 * multi_dot's products) allocates its result and zero-fills it before it calls BLAS, so
 * the BLAS call-site hook (_blashook.c) gets the product only after that fill: at 8192
 * it is 512 MiB of first-touch page faults on one thread (about 94 ms on the H200's
 * host), and A.dot(B) took 176 ms where A @ B took 61. The module-level np.dot wrapper
 * routes before NumPy runs, but ndarray.dot (a method of an immutable type) and
 * references to NumPy's dot taken before installation (np.cov's own, a `from numpy
 * import dot` made early) never reach it.
 *
 * How: both are C functions reached through a PyMethodDef that CPython reads at every
 * call: ndarray.dot's method descriptor (PyMethodDescrObject.d_method) and the builtin
 * _multiarray_umath.dot (PyCFunctionObject.m_ml), which np.dot's dispatcher calls.
 * install() points each at a copy of NumPy's PyMethodDef whose ml_meth is a trampoline
 * here (same flags, name and doc); remove() puts NumPy's pointer back. One pointer
 * store each; NumPy's own method table is never written.
 *
 * The trampoline calls NumPy's function at once when no scope is active anywhere,
 * for vector-shaped products and those below every active floor (the wrappers' own C
 * verdict, counted as theirs), inside the router or the backend's own work, while a
 * module-level wrapper runs
 * (t_in_wrapper: a wrapper's own call of NumPy's dot comes through here), for operands
 * that are not plain ndarrays, and for arguments other than (b[, out]) / (a, b[, out]):
 * those keep NumPy's exact behaviour, errors included. Otherwise it hands the call to
 * its router, a dot wrapper (routes.make_wrapper: the C fast path for vector-shaped and
 * small products, then the Python decision), which routes it or calls NumPy's np.dot;
 * for plain ndarrays np.dot(a, b, out) and a.dot(b, out) are the same C function.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define PY_ARRAY_UNIQUE_SYMBOL ozb_PyArray_API
#define NO_IMPORT_ARRAY
#include <numpy/arrayobject.h>

#include "_hookstate.h"

typedef PyObject *(*fastkw_t)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

enum { DH_METHOD = 0, DH_BUILTIN = 1, DH_N = 2 };

typedef struct {
    PyObject *owner;      /* the method descriptor / builtin (a strong reference) */
    PyMethodDef **where;  /* its PyMethodDef pointer */
    PyMethodDef *orig;    /* NumPy's PyMethodDef */
    PyMethodDef ours;     /* its copy, ml_meth = the trampoline */
    PyObject *router;     /* the dot wrapper (a strong reference) */
    int installed;
} dothook_t;

static dothook_t g_dh[DH_N];
static volatile long long d_routed = 0, d_native = 0;

/* Set while a module-level wrapper runs on this thread (see _hookstate.h). */
OZB_THREAD int t_in_wrapper = 0;

/* Whether kwnames is NULL or holds "out" alone (the one keyword both take). */
static int
only_out(PyObject *kwnames)
{
    if (kwnames == NULL) return 1;
    if (PyTuple_GET_SIZE(kwnames) != 1) return 0;
    return PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "out") == 0;
}

static int
idle(void)
{
    return LOAD(g_active) == 0 || t_inside || t_in_wrapper || UNLIKELY(IS_FINALIZING());
}

static PyObject *
call_router(PyObject *router, PyObject *const *stack, size_t nargs, PyObject *kwnames)
{
    PyObject *res;
    int prev = t_in_wrapper;
    Py_INCREF(router);
    t_in_wrapper = 1;
    res = PyObject_Vectorcall(router, stack, nargs, kwnames);
    t_in_wrapper = prev;
    Py_DECREF(router);
    return res;
}

/* ndarray.dot(self, b, out=None) */
static PyObject *
dot_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    fastkw_t orig = (fastkw_t)(void (*)(void))g_dh[DH_METHOD].orig->ml_meth;
    PyObject *router = g_dh[DH_METHOD].router, *stack[4];
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames), i;

    if (idle() || router == NULL || nargs < 1 || nargs + nkw > 2 || !only_out(kwnames)
            || !PyArray_CheckExact(self) || !PyArray_CheckExact(args[0])
            || ozb_dot_verdict((PyArrayObject *)self, (PyArrayObject *)args[0])) {
        if (LOAD(g_active)) BUMP(d_native);
        return orig(self, args, nargs, kwnames);
    }
    BUMP(d_routed);
    stack[0] = self;
    for (i = 0; i < nargs + nkw; i++) stack[i + 1] = args[i];
    return call_router(router, stack, (size_t)(nargs + 1), kwnames);
}

/* _multiarray_umath.dot(a, b, out=None) */
static PyObject *
dot_builtin(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    fastkw_t orig = (fastkw_t)(void (*)(void))g_dh[DH_BUILTIN].orig->ml_meth;
    PyObject *router = g_dh[DH_BUILTIN].router;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);

    if (idle() || router == NULL || nargs < 2 || nargs + nkw > 3 || !only_out(kwnames)
            || !PyArray_CheckExact(args[0]) || !PyArray_CheckExact(args[1])
            || ozb_dot_verdict((PyArrayObject *)args[0], (PyArrayObject *)args[1])) {
        if (LOAD(g_active)) BUMP(d_native);
        return orig(module, args, nargs, kwnames);
    }
    BUMP(d_routed);
    return call_router(router, args, (size_t)nargs, kwnames);
}

/* Where `owner` keeps its PyMethodDef pointer, or NULL (with the reason in *why). */
static PyMethodDef **
def_slot(int which, PyObject *owner, const char **why)
{
    PyMethodDef **where;
    if (which == DH_METHOD) {
        if (!Py_IS_TYPE(owner, &PyMethodDescr_Type)) {
            *why = "ndarray.dot is not a method descriptor";
            return NULL;
        }
        where = &((PyMethodDescrObject *)owner)->d_method;
    } else {
        if (!PyCFunction_Check(owner)) {
            *why = "numpy's dot is not a builtin function";
            return NULL;
        }
        where = &((PyCFunctionObject *)owner)->m_ml;
    }
    if (((*where)->ml_flags & ~METH_COEXIST) != (METH_FASTCALL | METH_KEYWORDS)) {
        *why = "numpy's dot does not take METH_FASTCALL | METH_KEYWORDS arguments";
        return NULL;
    }
    return where;
}

/* The hook `which` names (DH_METHOD, DH_BUILTIN), or NULL with a ValueError set. */
static dothook_t *
hook_of(long which)
{
    if (which < 0 || which >= DH_N) {
        PyErr_SetString(PyExc_ValueError, "unknown dot hook");
        return NULL;
    }
    return &g_dh[which];
}

/* The hook named by a Python int argument (dot_remove, dot_installed), or NULL with
 * the error set. */
static dothook_t *
hook_arg(PyObject *arg)
{
    long which = PyLong_AsLong(arg);
    if (which == -1 && PyErr_Occurred()) return NULL;
    return hook_of(which);
}

static PyObject *
dh_install(PyObject *self, PyObject *args)
{
    /* dot_install(which, owner, router) -> str or None: None when installed (or the
     * router replaced), else why it cannot be. */
    int which;
    PyObject *owner, *router;
    const char *why = NULL;
    PyMethodDef **where;
    dothook_t *h;

    if (!PyArg_ParseTuple(args, "iOO:dot_install", &which, &owner, &router)) return NULL;
    if ((h = hook_of(which)) == NULL) return NULL;
    if (!PyCallable_Check(router)) {
        PyErr_SetString(PyExc_TypeError, "dot_install: the router must be callable");
        return NULL;
    }
    if (h->installed) {
        if (owner != h->owner) return PyUnicode_FromString("installed on another object");
        Py_INCREF(router);
        Py_XSETREF(h->router, router);
        Py_RETURN_NONE;
    }
    where = def_slot(which, owner, &why);
    if (where == NULL) return PyUnicode_FromString(why);
    h->orig = *where;
    h->ours = *h->orig;
    h->ours.ml_meth = which == DH_METHOD ? (PyCFunction)(void (*)(void))dot_method
                                         : (PyCFunction)(void (*)(void))dot_builtin;
    Py_INCREF(owner);
    Py_INCREF(router);
    h->owner = owner;
    h->router = router;
    h->where = where;
    *where = &h->ours;       /* from here on every call comes through the trampoline */
    h->installed = 1;
    Py_RETURN_NONE;
}

static PyObject *
dh_remove(PyObject *self, PyObject *arg)
{
    /* dot_remove(which) -> bool: NumPy's PyMethodDef put back (False: not installed). */
    dothook_t *h = hook_arg(arg);
    if (h == NULL) return NULL;
    if (!h->installed) Py_RETURN_FALSE;
    /* A call already past the pointer read finishes in the trampoline, which reads
     * h->orig (never cleared) and a router it holds a reference to. */
    *h->where = h->orig;
    h->installed = 0;
    Py_CLEAR(h->router);
    Py_CLEAR(h->owner);
    Py_RETURN_TRUE;
}

static PyObject *
dh_installed(PyObject *self, PyObject *arg)
{
    dothook_t *h = hook_arg(arg);
    if (h == NULL) return NULL;
    return PyBool_FromLong(h->installed);
}

static PyObject *
dh_counters(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("{s:L,s:L}", "handed_to_router", (long long)LOAD(d_routed),
                         "left_to_numpy", (long long)LOAD(d_native));
}

static PyObject *
dh_reset(PyObject *self, PyObject *noargs)
{
    STORE(d_routed, 0);
    STORE(d_native, 0);
    Py_RETURN_NONE;
}

PyMethodDef ozb_dothook_methods[] = {
    {"dot_install", dh_install, METH_VARARGS,
     "dot_install(which, owner, router) -> str or None\n\nRoute `owner` (which = "
     "DOT_METHOD: ndarray.dot's descriptor; DOT_BUILTIN: numpy's dot builtin) through "
     "`router` inside scopes. None when installed, else the reason it cannot be."},
    {"dot_remove", dh_remove, METH_O,
     "dot_remove(which) -> bool: NumPy's own function put back."},
    {"dot_installed", dh_installed, METH_O, "dot_installed(which) -> bool"},
    {"dot_counters", dh_counters, METH_NOARGS,
     "dot_counters() -> dict: calls handed to the router and left to NumPy while some "
     "scope was active"},
    {"dot_reset_counters", dh_reset, METH_NOARGS, "dot_reset_counters()"},
    {NULL, NULL, 0, NULL},
};

int
ozb_dothook_init(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "DOT_METHOD", DH_METHOD) < 0
            || PyModule_AddIntConstant(module, "DOT_BUILTIN", DH_BUILTIN) < 0) {
        return -1;
    }
    return 0;
}
