/*
 * _loophook: replaces NumPy matmul's float64 (``dd->d``) inner loop so that ``A @ B``
 * and ``np.matmul`` on plain float64 ndarrays can be routed to ozaki_backend; the
 * complex128 (``DD->D``) loop is replaced the same way (complex products, spec §11).
 *
 * Why a C extension: the hook runs on every float64 matmul in the process, including
 * tiny ones and ones made while no scope is active. Its fast path (no scope active
 * anywhere, a vector-shaped product, or a product below the smallest routing
 * threshold of any active scope) is a couple of integer compares in C that never
 * touch the GIL; only products that *may* be routed take the GIL and call Python.
 *
 * Installation uses NumPy's public ``PyUFunc_ReplaceLoopBySignature`` exactly once
 * per process and is never undone: NumPy documents that replacing a loop while the
 * ufunc runs in another thread is unsafe, so toggling per scope would be a race.
 * ``np.matmul`` stays the same object (libraries compare ``ufunc is np.matmul``).
 *
 * Loop arguments (numpy/_core/src/umath/matmul.c.src):
 *   dimensions = [N_outer, m, n, p]           (A is m x n, B is n x p, out is m x p)
 *   steps      = [sA, sB, sOut, a_m, a_n, b_n, b_p, out_m, out_p]   (bytes)
 * A broadcast operand arrives with an outer stride of 0; views may have negative or
 * non-contiguous strides. The Python callback receives 3-D ndarrays built over these
 * exact buffers (inputs read-only), valid only for the duration of the call.
 *
 * Error policy: the hook never lets a Python exception escape into NumPy. Any error in
 * the routed path is cleared, counted, and the original loop computes the result. The
 * one exception: a warning raised as an error (the user's filters, e.g. -W error on a
 * FallbackWarning) stays set after the original loop, and NumPy raises it.
 * A KeyboardInterrupt is re-delivered with PyErr_SetInterrupt() after the original
 * loop has produced a correct result, so Ctrl-C still works.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fenv.h>
#include <math.h>

/* One NumPy API table for both sources of the extension (_blashook.c uses it too). */
#define PY_ARRAY_UNIQUE_SYMBOL ozb_PyArray_API
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#include "_hookstate.h"

static PyUFuncGenericFunction g_orig = NULL; /* NumPy's own dd->d matmul loop */
/* NumPy's own DD->D (complex128) matmul loop, hooked the same way (docs/spec.md §11);
 * NULL when this NumPy has none to replace (then complex `@` is simply not routed). */
static PyUFuncGenericFunction g_orig_cplx = NULL;
static PyObject *g_matmul = NULL;            /* keeps np.matmul alive */
static PyObject *g_callback = NULL;          /* route(a, b, out) -> bool */

/* Routing state, written by ozaki_backend.dispatch.config under its lock; the BLAS
 * hook (_blashook.c) reads the same two integers (see _hookstate.h). */
volatile long long g_active = 0;   /* active scopes anywhere (+1 for enable()) */
volatile long long g_floor = LLONG_MAX; /* smallest m*n*k any active scope routes */
OZB_THREAD int t_inside = 0;

/* Statistics, only counted while some scope is active (an idle process pays nothing).
 * The C side cannot tell whose product it sees, so these include other threads and
 * the backend's own native products. */
static volatile long long g_below = 0;   /* below the routing floor: C fast path */
static volatile long long g_vector = 0;  /* m == 1 or p == 1: matrix-vector shaped */
static volatile long long g_pycalls = 0; /* calls into the Python router */
static volatile long long g_errors = 0;  /* exceptions cleared in the routed path */
/* Depth of backend work on this thread (the router's call, and the dispatch layer's
 * routed products): the backend's own native products made there (its matrix-vector
 * scaling steps ...) are not the user's and are not counted above. */
static _Thread_local long t_in_backend = 0;
#define COUNT(x) do { if (t_in_backend == 0) BUMP(x); } while (0)

static int
call_router(char **args, npy_intp const *dims, npy_intp const *steps, int *interrupted,
            int typenum)
{
    /* Returns 1 when the router computed the product into args[2], 2 when it did and
     * some element overflowed to +-inf (finite operands), else 0.
     * Called with the GIL held; leaves no exception set. */
    PyObject *cb = g_callback, *a = NULL, *b = NULL, *o = NULL, *res = NULL;
    PyObject *et, *ev, *etb;
    int handled = 0;
    npy_intp N = dims[0], m = dims[1], n = dims[2], p = dims[3];
    npy_intp da[3] = {N, m, n}, sa[3] = {steps[0], steps[3], steps[4]};
    npy_intp db[3] = {N, n, p}, sb[3] = {steps[1], steps[5], steps[6]};
    npy_intp dout[3] = {N, m, p}, sout[3] = {steps[2], steps[7], steps[8]};

    if (cb == NULL) {
        return 0;
    }
    /* An exception already pending here would make the call below misbehave; keep it
     * aside and put it back untouched. */
    PyErr_Fetch(&et, &ev, &etb);
    Py_INCREF(cb);
    BUMP(g_pycalls);
    t_in_backend++;

    a = PyArray_New(&PyArray_Type, 3, da, typenum, sa, args[0], 0, 0, NULL);
    if (a == NULL) goto fail;
    PyArray_CLEARFLAGS((PyArrayObject *)a, NPY_ARRAY_WRITEABLE);
    PyArray_UpdateFlags((PyArrayObject *)a, NPY_ARRAY_UPDATE_ALL);
    b = PyArray_New(&PyArray_Type, 3, db, typenum, sb, args[1], 0, 0, NULL);
    if (b == NULL) goto fail;
    PyArray_CLEARFLAGS((PyArrayObject *)b, NPY_ARRAY_WRITEABLE);
    PyArray_UpdateFlags((PyArrayObject *)b, NPY_ARRAY_UPDATE_ALL);
    o = PyArray_New(&PyArray_Type, 3, dout, typenum, sout, args[2], 0,
                    NPY_ARRAY_WRITEABLE, NULL);
    if (o == NULL) goto fail;
    PyArray_UpdateFlags((PyArrayObject *)o, NPY_ARRAY_UPDATE_ALL);

    res = PyObject_CallFunctionObjArgs(cb, a, b, o, NULL);
    if (res == NULL) goto fail;
    if (res == Py_True) {
        handled = 1;
    } else if (PyLong_Check(res)) {
        long v = PyLong_AsLong(res);
        handled = (v == 1 || v == 2) ? (int)v : 0;
        if (PyErr_Occurred()) PyErr_Clear();
    }
    goto done;

fail:
    if (et == NULL && PyErr_ExceptionMatches(PyExc_Warning)) {
        /* A warning the user's filters turned into an error (-W error): counted on the
         * Python side; keep it set so that NumPy raises it from the ufunc call once
         * its own loop has computed the product. */
        PyErr_Fetch(&et, &ev, &etb);
        handled = 0;
        goto done;
    }
    BUMP(g_errors);
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        *interrupted = 1;
    }
    PyErr_Clear();
    handled = 0;
done:
    Py_XDECREF(res);
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(o);
    Py_DECREF(cb);
    t_in_backend--;
    PyErr_Restore(et, ev, etb);
    return handled;
}

/* The body of both hooked loops: `orig` is NumPy's loop of element type `typenum`. */
static inline void
hook_body(char **args, npy_intp const *dimensions, npy_intp const *steps, void *data,
          PyUFuncGenericFunction orig, int typenum)
{
    npy_intp m = dimensions[1], n = dimensions[2], p = dimensions[3];
    long long floor_;

    if (LOAD(g_active) == 0) {
        orig(args, dimensions, steps, data);
        return;
    }
    if (UNLIKELY(m < 2 || p < 2 || n < 1 || dimensions[0] < 1)) {
        /* Matrix-vector shaped (or empty): memory bound, never routed. */
        COUNT(g_vector);
        orig(args, dimensions, steps, data);
        return;
    }
    floor_ = LOAD(g_floor);
    /* double: m*n*p can overflow 64 bits; precision near 2**53 does not matter. */
    if ((double)m * (double)n * (double)p < (double)floor_) {
        COUNT(g_below);
        orig(args, dimensions, steps, data);
        return;
    }
    if (UNLIKELY(IS_FINALIZING()) || t_inside) {
        /* No Python calls while the interpreter shuts down (enable() is still in
         * force then, and objects being torn down may still multiply), nor for the
         * products the router itself makes in this thread (the engine's own). */
        orig(args, dimensions, steps, data);
        return;
    }
    {
        int interrupted = 0, handled;
        /* NumPy may have released the GIL around this loop (N*m*p > 500). */
        PyGILState_STATE st = PyGILState_Ensure();
        /* NumPy reads the floating-point status flags after the loop to raise its
         * "invalid value encountered in matmul" style warnings. The routed path runs
         * many operations of its own (some under np.errstate, which leaves flags set),
         * so restore the flags as they were before it: only the loop's own arithmetic
         * may speak for matmul. */
        fexcept_t fpflags;
        int was_inside = t_inside;
        fegetexceptflag(&fpflags, FE_ALL_EXCEPT);
        /* The router (and the engine it runs) may call NumPy's BLAS: the BLAS hook
         * must let those calls through untouched. */
        t_inside = 1;
        handled = call_router(args, dimensions, steps, &interrupted, typenum);
        fesetexceptflag(&fpflags, FE_ALL_EXCEPT);
        /* A routed product that overflowed reports it as NumPy's own loop would: the
         * overflow flag, which NumPy turns into its "overflow encountered in matmul"
         * warning or FloatingPointError under np.errstate. */
        if (handled == 2) {
            feraiseexcept(FE_OVERFLOW);
        }
        /* Back to NumPy's own GIL state before its GEMM runs, so that a declined
         * large product does not stall every other Python thread. */
        PyGILState_Release(st);
        if (!handled) {
            /* Already decided (and counted) in Python: NumPy's loop calls BLAS for
             * this very product, which the BLAS hook must not decide again. */
            orig(args, dimensions, steps, data);
        }
        t_inside = was_inside;
        if (interrupted) {
            PyErr_SetInterrupt();   /* async-signal-safe: needs no GIL */
        }
    }
}

static void
hooked_loop(char **args, npy_intp const *dimensions, npy_intp const *steps, void *data)
{
    hook_body(args, dimensions, steps, data, g_orig, NPY_DOUBLE);
}

static void
hooked_loop_cplx(char **args, npy_intp const *dimensions, npy_intp const *steps,
                 void *data)
{
    hook_body(args, dimensions, steps, data, g_orig_cplx, NPY_CDOUBLE);
}

static PyObject *
lh_install(PyObject *self, PyObject *callback)
{
    /* install(callback) -> bool: True when the loop was replaced by this call. */
    int sig[3] = {NPY_DOUBLE, NPY_DOUBLE, NPY_DOUBLE};
    int sigc[3] = {NPY_CDOUBLE, NPY_CDOUBLE, NPY_CDOUBLE};
    PyObject *np, *mm;

    if (!PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "install() needs a callable");
        return NULL;
    }
    Py_INCREF(callback);
    Py_XSETREF(g_callback, callback);
    if (g_orig != NULL) {
        Py_RETURN_FALSE;
    }
    np = PyImport_ImportModule("numpy");
    if (np == NULL) return NULL;
    mm = PyObject_GetAttrString(np, "matmul");
    Py_DECREF(np);
    if (mm == NULL) return NULL;
    if (!PyObject_TypeCheck(mm, &PyUFunc_Type)) {
        Py_DECREF(mm);
        PyErr_SetString(PyExc_RuntimeError, "numpy.matmul is not a ufunc");
        return NULL;
    }
    if (PyUFunc_ReplaceLoopBySignature((PyUFuncObject *)mm, hooked_loop, sig, &g_orig) != 0
            || g_orig == NULL) {
        g_orig = NULL;
        Py_DECREF(mm);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError,
                            "numpy.matmul has no float64 (dd->d) loop to replace");
        }
        return NULL;
    }
    /* complex128 too; optional: without it only complex `@` stays NumPy's. */
    if (PyUFunc_ReplaceLoopBySignature((PyUFuncObject *)mm, hooked_loop_cplx, sigc,
                                       &g_orig_cplx) != 0 || g_orig_cplx == NULL) {
        g_orig_cplx = NULL;
        PyErr_Clear();
    }
    g_matmul = mm; /* owned reference, kept for the life of the process */
    Py_RETURN_TRUE;
}

static PyObject *
lh_installed(PyObject *self, PyObject *noargs)
{
    return PyBool_FromLong(g_orig != NULL);
}

static PyObject *
lh_installed_complex(PyObject *self, PyObject *noargs)
{
    return PyBool_FromLong(g_orig_cplx != NULL);
}

static PyObject *
lh_set_state(PyObject *self, PyObject *args)
{
    long long active, floor_;
    if (!PyArg_ParseTuple(args, "LL:set_state", &active, &floor_)) return NULL;
    if (active < 0 || floor_ < 0) {
        PyErr_SetString(PyExc_ValueError, "active and floor must be >= 0");
        return NULL;
    }
    /* Floor first: a reader that sees the new count also sees a valid floor. */
    STORE(g_floor, floor_);
    STORE(g_active, active);
    Py_RETURN_NONE;
}

static PyObject *
lh_state(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("(LL)", (long long)LOAD(g_active), (long long)LOAD(g_floor));
}

static PyObject *
lh_counters(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("{s:L,s:L,s:L,s:L}",
                         "below_floor", (long long)LOAD(g_below),
                         "vector_shaped", (long long)LOAD(g_vector),
                         "python_calls", (long long)LOAD(g_pycalls),
                         "errors", (long long)LOAD(g_errors));
}

static PyObject *
lh_reset_counters(PyObject *self, PyObject *noargs)
{
    STORE(g_below, 0);
    STORE(g_vector, 0);
    STORE(g_pycalls, 0);
    STORE(g_errors, 0);
    Py_RETURN_NONE;
}

static PyObject *
lh_backend_depth(PyObject *self, PyObject *arg)
{
    /* backend_depth(delta) -> depth: add delta (+1 entering, -1 leaving) to this
     * thread's backend depth; products made at depth > 0 are not counted. */
    long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred()) return NULL;
    t_in_backend += d;
    if (t_in_backend < 0) t_in_backend = 0;
    return PyLong_FromLong(t_in_backend);
}

static PyMethodDef lh_methods[] = {
    {"backend_depth", lh_backend_depth, METH_O,
     "backend_depth(delta) -> int\n\nAdd delta to this thread's backend depth (the "
     "backend's own products made at depth > 0 are not counted in counters())."},
    {"install", lh_install, METH_O,
     "install(callback) -> bool\n\nReplace np.matmul's dd->d loop (once per process) and "
     "set the router callback(a, b, out) -> bool. Returns True when this call replaced "
     "the loop, False when it was already replaced (only the callback changes)."},
    {"installed", lh_installed, METH_NOARGS, "installed() -> bool"},
    {"installed_complex", lh_installed_complex, METH_NOARGS,
     "installed_complex() -> bool: whether the DD->D (complex128) loop is hooked too"},
    {"set_state", lh_set_state, METH_VARARGS,
     "set_state(active, floor)\n\nNumber of active scopes anywhere in the process and the "
     "smallest m*n*k any of them may route (the C fast path skips smaller products)."},
    {"state", lh_state, METH_NOARGS, "state() -> (active, floor)"},
    {"counters", lh_counters, METH_NOARGS, "counters() -> dict of C-side counts"},
    {"reset_counters", lh_reset_counters, METH_NOARGS, "reset_counters()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lh_module = {
    PyModuleDef_HEAD_INIT, "_loophook",
    "C hooks: numpy.matmul's inner loop (ozaki_backend.dispatch.loophook) and NumPy's "
    "BLAS call site (ozaki_backend.dispatch.blashook).", -1,
    lh_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__loophook(void)
{
    PyObject *m;
    import_array();
    import_umath();
    m = PyModule_Create(&lh_module);
    if (m == NULL) return NULL;
    if (PyModule_AddFunctions(m, ozb_blashook_methods) < 0 || ozb_blashook_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
