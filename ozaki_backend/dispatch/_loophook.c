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
 * the routed path is cleared, counted, and the original loop computes the result. Two
 * exceptions stay set, and NumPy raises them from the ufunc call once the loop returns:
 * a warning raised as an error (the user's filters, e.g. -W error on a FallbackWarning;
 * the original loop computes the product first, as NumPy would before raising), and a
 * KeyboardInterrupt (Ctrl-C during a routed product). The interrupt abandons the
 * product: the original loop does not run (recomputing natively would only delay the
 * interrupt by the whole native product), the output is left unwritten, and the
 * loop's further invocations of the same ufunc call return at once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fenv.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

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

/* call_router's result when a KeyboardInterrupt abandoned the product (left set). */
#define ABANDONED 3

/* Set on a thread whose ufunc call was abandoned by a KeyboardInterrupt, so that the
 * loop's further invocations for the same call return without computing; cleared by
 * the next invocation that finds no exception pending (a new call). */
static _Thread_local int t_abandoned = 0;

static int
call_router(char **args, npy_intp const *dims, npy_intp const *steps, int typenum)
{
    /* Returns 1 when the router computed the product into args[2], 2 when it did and
     * some element overflowed to +-inf (finite operands), ABANDONED when a
     * KeyboardInterrupt stopped it (the exception is left set for NumPy to raise), else
     * 0. Called with the GIL held; leaves no new exception set otherwise. */
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
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        /* Ctrl-C while the product was routed: it propagates from the ufunc call, and
         * the product is abandoned (ABANDONED: the caller does not run the original
         * loop). An exception pending from before the call gives way to it, as a new
         * exception replaces a pending one in Python. Not an error of the hook. */
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(etb);
        PyErr_Fetch(&et, &ev, &etb);
        handled = ABANDONED;
        goto done;
    }
    if (et == NULL && PyErr_ExceptionMatches(PyExc_Warning)) {
        /* A warning the user's filters turned into an error (-W error): counted on the
         * Python side; keep it set so that NumPy raises it from the ufunc call once
         * its own loop has computed the product. */
        PyErr_Fetch(&et, &ev, &etb);
        handled = 0;
        goto done;
    }
    BUMP(g_errors);
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
    if (UNLIKELY(t_abandoned)) {
        /* A KeyboardInterrupt abandoned an earlier invocation on this thread: if it is
         * still pending, this invocation belongs to the same ufunc call, which NumPy
         * is about to fail with it. */
        PyGILState_STATE st = PyGILState_Ensure();
        int pending = PyErr_Occurred() != NULL;
        PyGILState_Release(st);
        if (pending) {
            return;
        }
        t_abandoned = 0;
    }
    if (UNLIKELY(IS_FINALIZING()) || t_inside) {
        /* No Python calls while the interpreter shuts down (enable() is still in
         * force then, and objects being torn down may still multiply), nor for the
         * products the router itself makes in this thread (the engine's own). */
        orig(args, dimensions, steps, data);
        return;
    }
    {
        int handled;
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
        handled = call_router(args, dimensions, steps, typenum);
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
        if (handled == ABANDONED) {
            t_abandoned = 1;
        } else if (!handled) {
            /* Already decided (and counted) in Python: NumPy's loop calls BLAS for
             * this very product, which the BLAS hook must not decide again. */
            orig(args, dimensions, steps, data);
        }
        t_inside = was_inside;
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

/* ------------------------------------------------------------ the wrappers' fast path
 *
 * NumPy's module-level products (np.dot, np.inner, np.tensordot, np.einsum) and SciPy's
 * dgemm are rebound to wrappers (numpy_wrappers.py, scipy_blas.py). A wrapper is a
 * FastWrapper: a callable that decides in C, without building a Python frame, the
 * products no scope can route (vector shaped, or below the smallest floor of the active
 * scopes, the same two integers the loop hook reads) and calls NumPy's function for
 * them at once; everything else goes to the Python wrapper (`slow`), which decides,
 * routes and counts as before. Inside a scope a declined small product then costs a
 * few tens of nanoseconds instead of the Python path's tens of microseconds (3 million
 * matrix-vector np.dot calls in a statsmodels test suite). It only ever decides
 * "native": anything it does not fully understand goes to `slow`.
 */

enum { FW_DOT = 0, FW_INNER = 1, FW_TENSORDOT = 2, FW_EINSUM = 3, FW_GEMM = 4,
       FW_OTHER = 5 };
enum { FW_SLOW = 0, FW_VECTOR = 1, FW_BELOW = 2 };

/* Statistics like the loop hook's (only while some scope is active). */
static volatile long long w_below = 0, w_vector = 0;

typedef struct {
    PyObject_HEAD
    PyObject *original;   /* NumPy's / SciPy's function */
    PyObject *slow;       /* the Python wrapper: decides, routes, counts */
    PyObject *dict;       /* functools.wraps' attributes, SciPy's, ours */
    int kind;
    vectorcallfunc vectorcall;
} FastWrapper;

/* prod(shape[lo:hi]) as a double (the counts are compared with the floor only). */
static double
dims_prod(PyArrayObject *x, int lo, int hi)
{
    double p = 1.0;
    int i;
    for (i = lo; i < hi; i++) p *= (double)PyArray_DIM(x, i);
    return p;
}

/* m, n, k of a matrix product of a and b as `kind` reads them; FW_SLOW when not sure. */
static int
fw_shape(int kind, PyArrayObject *a, PyArrayObject *b, PyObject *const *args,
         Py_ssize_t nargs, double *mnk)
{
    int na = PyArray_NDIM(a), nb = PyArray_NDIM(b);
    double m, n, k;
    switch (kind) {
    case FW_DOT:       /* N-d a against 2-d b */
        if (na < 2 || nb < 2) return FW_VECTOR;
        if (nb != 2) return FW_SLOW;
        m = dims_prod(a, 0, na - 1);
        k = (double)PyArray_DIM(a, na - 1);
        n = (double)PyArray_DIM(b, 1);
        break;
    case FW_INNER:     /* contraction over the last axes */
        if (na < 2 || nb < 2) return FW_VECTOR;
        m = dims_prod(a, 0, na - 1);
        n = dims_prod(b, 0, nb - 1);
        k = (double)PyArray_DIM(a, na - 1);
        break;
    case FW_TENSORDOT: { /* axes=int only: the last `ax` of a with the first of b */
        long ax = 2;
        if (nargs >= 3) {
            if (!PyLong_CheckExact(args[2])) return FW_SLOW;
            ax = PyLong_AsLong(args[2]);
            if (ax == -1 && PyErr_Occurred()) { PyErr_Clear(); return FW_SLOW; }
        }
        if (ax < 0 || ax > na || ax > nb) return FW_SLOW;
        m = dims_prod(a, 0, na - (int)ax);
        k = dims_prod(a, na - (int)ax, na);
        n = dims_prod(b, (int)ax, nb);
        break;
    }
    case FW_GEMM: {    /* SciPy's dgemm(alpha, a, b, ...): k is one side of a */
        double a0, a1, kmin;
        if (na != 2 || nb != 2) return FW_SLOW;
        a0 = (double)PyArray_DIM(a, 0);
        a1 = (double)PyArray_DIM(a, 1);
        kmin = a0 < a1 ? a0 : a1;
        if (kmin < 1.0) return FW_SLOW;
        /* m*n*k = |a| |b| / k at most |a| |b| / min(a's sides), whatever the trans_a */
        *mnk = a0 * a1 * dims_prod(b, 0, 2) / kmin;
        return *mnk < (double)LOAD(g_floor) ? FW_BELOW : FW_SLOW;
    }
    default:
        return FW_SLOW;
    }
    if (m < 2.0 || n < 2.0) return FW_VECTOR;
    *mnk = m * n * k;
    return *mnk < (double)LOAD(g_floor) ? FW_BELOW : FW_SLOW;
}

/* The wrappers' fast-path verdict on np.dot(a, b) (FW_SLOW, FW_VECTOR or FW_BELOW),
 * counted as theirs: the dot hook's trampolines (_dothook.c) leave vector-shaped and
 * small products to NumPy without going through a wrapper. */
int
ozb_dot_verdict(PyArrayObject *a, PyArrayObject *b)
{
    double mnk = 0.0;
    int verdict = fw_shape(FW_DOT, a, b, NULL, 0, &mnk);
    if (verdict == FW_VECTOR) {
        BUMP(w_vector);
    } else if (verdict == FW_BELOW) {
        BUMP(w_below);
    }
    return verdict;
}

/* einsum("subscripts", a, b): m*n*k of its core product, the product of the sizes of
 * every label that is not a batch label (in both operands and in the output). Only
 * plain letters, one comma and an optional "->"; anything else (ellipsis, a repeated
 * label in one operand, sizes that differ) is the Python side's. */
static int
fw_einsum(PyObject *subs, PyArrayObject *a, PyArrayObject *b)
{
    Py_ssize_t len, i;
    const char *p;
    long long size[128];
    char where[128];  /* bit 1: in a, 2: in b, 4: in the output, 8: named in it */
    int part = 0, pos[2] = {0, 0}, arrow = 0, lab;
    double mnk = 1.0;
    PyArrayObject *ops[2] = {a, b};

    p = PyUnicode_AsUTF8AndSize(subs, &len);
    if (p == NULL) { PyErr_Clear(); return FW_SLOW; }
    memset(where, 0, sizeof(where));
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == ' ') continue;
        if (c == ',') {
            if (arrow || part == 1) return FW_SLOW;
            part = 1;
            continue;
        }
        if (c == '-') {
            if (arrow || i + 1 >= len || p[i + 1] != '>' || part != 1) return FW_SLOW;
            arrow = 1;
            i++;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return FW_SLOW;
        if (arrow) {
            if (where[c] & 8) return FW_SLOW;
            where[c] |= 8 | 4;
            continue;
        }
        if (where[c] & (1 << part)) return FW_SLOW;   /* a trace: Python's */
        if (pos[part] >= PyArray_NDIM(ops[part])) return FW_SLOW;
        {
            long long d = (long long)PyArray_DIM(ops[part], pos[part]++);
            if (where[c] & 3) {
                if (size[c] != d) return FW_SLOW;     /* broadcasting: Python's */
            } else {
                size[c] = d;
            }
        }
        where[c] |= (char)(1 << part);
    }
    if (part != 1 || pos[0] != PyArray_NDIM(a) || pos[1] != PyArray_NDIM(b)) {
        return FW_SLOW;
    }
    if (!arrow) {  /* implicit output: the labels that appear once */
        for (lab = 0; lab < 128; lab++) {
            if ((where[lab] & 3) == 1 || (where[lab] & 3) == 2) where[lab] |= 4;
        }
    }
    for (lab = 0; lab < 128; lab++) {
        if ((where[lab] & 8) && !(where[lab] & 3)) return FW_SLOW;  /* NumPy raises */
        if (!(where[lab] & 3)) continue;
        if ((where[lab] & 7) == 7) continue;  /* a batch label */
        mnk *= (double)size[lab];
    }
    return mnk < (double)LOAD(g_floor) ? FW_BELOW : FW_SLOW;
}

static PyObject *
fw_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastWrapper *self = (FastWrapper *)self_;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int verdict = FW_SLOW;
    double mnk = 0.0;

    if (LOAD(g_active) == 0 || t_inside || t_in_backend > 0) {
        /* Nothing enabled anywhere, or the backend's own product: NumPy's function. */
        return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    }
    switch (self->kind) {
    case FW_DOT: case FW_INNER: case FW_TENSORDOT:
        /* Operands by position, plain ndarrays; np.dot's out= keyword is allowed. */
        if (nargs >= 2 && PyArray_CheckExact(args[0]) && PyArray_CheckExact(args[1])
                && (kwnames == NULL || self->kind == FW_DOT)) {
            verdict = fw_shape(self->kind, (PyArrayObject *)args[0],
                               (PyArrayObject *)args[1], args, nargs, &mnk);
        }
        break;
    case FW_EINSUM:
        if (nargs == 3 && kwnames == NULL && PyUnicode_CheckExact(args[0])
                && PyArray_CheckExact(args[1]) && PyArray_CheckExact(args[2])) {
            verdict = fw_einsum(args[0], (PyArrayObject *)args[1],
                                (PyArrayObject *)args[2]);
        }
        break;
    case FW_GEMM:
        if (nargs >= 3 && PyArray_CheckExact(args[1]) && PyArray_CheckExact(args[2])) {
            verdict = fw_shape(FW_GEMM, (PyArrayObject *)args[1],
                               (PyArrayObject *)args[2], args, nargs, &mnk);
        }
        break;
    default:
        break;
    }
    if (verdict == FW_VECTOR) {
        BUMP(w_vector);
    } else if (verdict == FW_BELOW) {
        BUMP(w_below);
    }
    {
        /* NumPy's dot, called by the function wrapped (tensordot's, multi_dot's) or by
         * the Python wrapper, reaches the dot hook's trampoline (_dothook.c): it goes
         * to NumPy's own function while a wrapper runs, not back to a wrapper (each
         * product is decided once; what is left undecided reaches the BLAS hook). */
        PyObject *res;
        int prev = t_in_wrapper;
        t_in_wrapper = 1;
        res = PyObject_Vectorcall(verdict == FW_SLOW ? self->slow : self->original, args,
                                  nargsf, kwnames);
        t_in_wrapper = prev;
        return res;
    }
}

static PyObject *
fw_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"original", "slow", "kind", NULL};
    PyObject *original, *slow;
    int kind;
    FastWrapper *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOi:FastWrapper", kwlist, &original,
                                     &slow, &kind)) {
        return NULL;
    }
    if (!PyCallable_Check(original) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "FastWrapper(original, slow, kind) needs callables");
        return NULL;
    }
    if (kind < 0 || kind > FW_OTHER) {
        PyErr_SetString(PyExc_ValueError, "unknown FastWrapper kind");
        return NULL;
    }
    self = (FastWrapper *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(original);
    Py_INCREF(slow);
    self->original = original;
    self->slow = slow;
    self->kind = kind;
    self->vectorcall = fw_vectorcall;
    return (PyObject *)self;
}

static int
fw_traverse(FastWrapper *self, visitproc visit, void *arg)
{
    Py_VISIT(self->original);
    Py_VISIT(self->slow);
    Py_VISIT(self->dict);
    return 0;
}

static int
fw_clear(FastWrapper *self)
{
    Py_CLEAR(self->original);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->dict);
    return 0;
}

static void
fw_dealloc(FastWrapper *self)
{
    PyObject_GC_UnTrack(self);
    fw_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
fw_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    /* Bound like a function (and like NumPy's own dispatchers) when it is a class
     * attribute. */
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *
fw_reduce(PyObject *self, PyObject *noargs)
{
    /* Pickled by reference, as the function it stands for (module + qualified name). */
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyObject *
fw_get_original(FastWrapper *self, void *closure)
{
    Py_INCREF(self->original);
    return self->original;
}

static PyObject *
fw_get_slow(FastWrapper *self, void *closure)
{
    Py_INCREF(self->slow);
    return self->slow;
}

static PyObject *
fw_get_kind(FastWrapper *self, void *closure)
{
    return PyLong_FromLong(self->kind);
}

static PyMethodDef fw_methods[] = {
    {"__reduce__", fw_reduce, METH_NOARGS, "Pickled by reference (module and name)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef fw_getset[] = {
    {"original", (getter)fw_get_original, NULL, "The function wrapped.", NULL},
    {"slow", (getter)fw_get_slow, NULL, "The Python wrapper (decides and routes).", NULL},
    {"kind", (getter)fw_get_kind, NULL, "Which argument convention the fast path reads.",
     NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastWrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ozaki_backend.dispatch._loophook.FastWrapper",
    .tp_basicsize = sizeof(FastWrapper),
    .tp_dealloc = (destructor)fw_dealloc,
    .tp_vectorcall_offset = offsetof(FastWrapper, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "FastWrapper(original, slow, kind): calls `original` for the products no "
              "active scope can route (decided in C), `slow` for the others.",
    .tp_traverse = (traverseproc)fw_traverse,
    .tp_clear = (inquiry)fw_clear,
    .tp_methods = fw_methods,
    .tp_getset = fw_getset,
    .tp_descr_get = fw_descr_get,
    .tp_dictoffset = offsetof(FastWrapper, dict),
    .tp_new = fw_new,
};

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
lh_wrapper_counters(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("{s:L,s:L}", "below_floor", (long long)LOAD(w_below),
                         "vector_shaped", (long long)LOAD(w_vector));
}

static PyObject *
lh_reset_counters(PyObject *self, PyObject *noargs)
{
    STORE(w_below, 0);
    STORE(w_vector, 0);
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
    {"wrapper_counters", lh_wrapper_counters, METH_NOARGS,
     "wrapper_counters() -> dict: products the wrappers' C fast path left to NumPy"},
    {"reset_counters", lh_reset_counters, METH_NOARGS,
     "reset_counters() (the loop hook's and the wrappers' fast-path counts)"},
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
    if (PyType_Ready(&FastWrapperType) < 0) return NULL;
    m = PyModule_Create(&lh_module);
    if (m == NULL) return NULL;
    Py_INCREF(&FastWrapperType);
    if (PyModule_AddObject(m, "FastWrapper", (PyObject *)&FastWrapperType) < 0
            || PyModule_AddIntConstant(m, "FW_DOT", FW_DOT) < 0
            || PyModule_AddIntConstant(m, "FW_INNER", FW_INNER) < 0
            || PyModule_AddIntConstant(m, "FW_TENSORDOT", FW_TENSORDOT) < 0
            || PyModule_AddIntConstant(m, "FW_EINSUM", FW_EINSUM) < 0
            || PyModule_AddIntConstant(m, "FW_GEMM", FW_GEMM) < 0
            || PyModule_AddIntConstant(m, "FW_OTHER", FW_OTHER) < 0) {
        Py_DECREF(&FastWrapperType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddFunctions(m, ozb_blashook_methods) < 0 || ozb_blashook_init(m) < 0
            || PyModule_AddFunctions(m, ozb_dothook_methods) < 0
            || ozb_dothook_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
