/*
 * State shared by the two C hooks of the ``_loophook`` extension: the matmul inner-loop
 * hook (_loophook.c) and the BLAS call-site hook (_blashook.c). Both are compiled into
 * one shared object so that they read the same lock-free routing summary and the same
 * per-thread "inside the router" flag without any indirection.
 */
#ifndef OZB_HOOKSTATE_H
#define OZB_HOOKSTATE_H

#include <Python.h>
#include <limits.h>

#if defined(__GNUC__) || defined(__clang__)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define BUMP(x) __atomic_fetch_add(&(x), 1, __ATOMIC_RELAXED)
#define UNLIKELY(c) __builtin_expect(!!(c), 0)
#define OZB_HIDDEN __attribute__((visibility("hidden")))
#define OZB_THREAD __thread
#else
/* Aligned 64-bit loads and stores are atomic on the platforms NumPy supports; the
 * counters are statistics, so a lost increment under contention is acceptable. */
#define LOAD(x) (x)
#define STORE(x, v) ((x) = (v))
#define BUMP(x) ((x)++)
#define UNLIKELY(c) (c)
#define OZB_HIDDEN
#if defined(_MSC_VER)
#define OZB_THREAD __declspec(thread)
#else
#define OZB_THREAD _Thread_local
#endif
#endif

#if PY_VERSION_HEX >= 0x030D0000
#define IS_FINALIZING() Py_IsFinalizing()
#else
#define IS_FINALIZING() _Py_IsFinalizing()
#endif

/* Routing state, written by ozaki_backend.dispatch.config (set_state) under its lock. */
OZB_HIDDEN extern volatile long long g_active;  /* active scopes anywhere (+1 for enable()) */
OZB_HIDDEN extern volatile long long g_floor;   /* smallest m*n*k any active scope routes */

/* Non-zero while this thread runs the Python router, or runs NumPy's own matmul loop
 * after the loop hook has already decided about the product: BLAS calls made then are
 * the engine's own products or the same product again, never routed (or counted). */
OZB_HIDDEN extern OZB_THREAD int t_inside;

/* Non-zero while a module-level wrapper (FastWrapper) runs on this thread: NumPy's dot
 * called then (by the wrapper, or inside tensordot / multi_dot) reaches the dot hook's
 * trampoline (_dothook.c) and goes to NumPy's function, not back to a wrapper. */
OZB_HIDDEN extern OZB_THREAD int t_in_wrapper;

/* The module-level wrappers' C verdict on np.dot(a, b): 0 when the wrapper must decide
 * (it may route), else the product is vector shaped or below every active floor
 * (counted in the wrappers' fast-path statistics). */
OZB_HIDDEN int ozb_dot_verdict(PyArrayObject *a, PyArrayObject *b);

/* Methods and initialisation of the BLAS hook, added to the _loophook module. */
OZB_HIDDEN extern PyMethodDef ozb_blashook_methods[];
OZB_HIDDEN int ozb_blashook_init(PyObject *module);

/* Methods and initialisation of the dot hook (ndarray.dot, NumPy's dot builtin). */
OZB_HIDDEN extern PyMethodDef ozb_dothook_methods[];
OZB_HIDDEN int ozb_dothook_init(PyObject *module);

#endif
