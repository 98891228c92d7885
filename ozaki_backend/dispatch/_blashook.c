/*
 * _blashook: a hook at NumPy's BLAS call site, so that every float64 GEMM NumPy runs
 * (ndarray.dot, np.dot and references to it held anywhere, np.cov, np.corrcoef,
 * np.linalg.matrix_power, tensordot, multi_dot, matmul's BLAS path) can be routed.
 *
 * How: NumPy's _multiarray_umath calls its BLAS through imported dynamic symbols
 * (``scipy_cblas_dgemm64_`` / ``scipy_cblas_dsyrk64_`` in the NumPy 2.x wheels, ILP64;
 * ``cblas_dgemm`` / ``cblas_dsyrk`` in other builds, LP64). Each call goes through a
 * GOT slot (.got.plt for a JUMP_SLOT relocation, .got for GLOB_DAT) that the dynamic
 * linker filled with the BLAS function's address. install() finds those slots by
 * reading the loaded module's dynamic section (symbol table, string table, .rela.plt
 * and .rela.dyn), saves the function they lead to, and writes the address of a
 * replacement with the same signature; remove() writes the saved address back. This
 * is what PLT-hooking libraries do; it is Linux/ELF only (x86-64 and aarch64
 * relocation types). A static BLAS has no slot: install() then reports why.
 *
 * The replacement's fast path: when no scope is active anywhere (the same lock-free
 * g_active / g_floor the matmul loop hook reads), below the smallest routing floor,
 * for vector-shaped or empty products, or while this thread is inside the router
 * (t_inside: the engine's own products, or a product the loop hook already decided),
 * it calls the saved function without touching the GIL. Otherwise it takes the GIL,
 * builds zero-copy ndarray views from the pointers, leading dimensions, transposes and
 * storage order, and calls the Python router (blashook._route_gemm / _route_syrk).
 * Any error there is cleared and counted, and the saved BLAS function computes the
 * product. A KeyboardInterrupt (Ctrl-C during a routed product) abandons the product
 * instead: the BLAS function does not run (a native recomputation would only delay the
 * interrupt by the whole product), the output is filled with NaN (NumPy's caller gets
 * it back before the interpreter raises, so it must not pass for a result), and the
 * interrupt is re-delivered with PyErr_SetInterrupt(): NumPy's callers cannot return
 * an exception from here, the interpreter raises KeyboardInterrupt at its next check,
 * right after the NumPy call returns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define PY_ARRAY_UNIQUE_SYMBOL ozb_PyArray_API
#define NO_IMPORT_ARRAY
#include <numpy/arrayobject.h>

#include "_hookstate.h"

#ifndef OZB_ELF  /* -DOZB_ELF=0 builds the stub (how other platforms compile it) */
#if defined(__linux__) && defined(__ELF__) && (defined(__x86_64__) || defined(__aarch64__))
#define OZB_ELF 1
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>
#else
#define OZB_ELF 0
#endif
#endif

/* CBLAS enum values (cblas.h). */
enum { ROW_MAJOR = 101, COL_MAJOR = 102, NO_TRANS = 111, TRANS = 112, CONJ_TRANS = 113,
       UPPER = 121, LOWER = 122 };

enum { GEMM = 0, SYRK = 1, NKINDS = 2 };
#define MAX_SLOTS 4

/* The symbol names looked for, in order of preference, with their integer width. */
static const struct { const char *name; int kind; int ilp64; } k_wanted[] = {
    {"scipy_cblas_dgemm64_", GEMM, 1}, {"cblas_dgemm64_", GEMM, 1},
    {"cblas_dgemm_64", GEMM, 1}, {"scipy_cblas_dgemm", GEMM, 0}, {"cblas_dgemm", GEMM, 0},
    {"scipy_cblas_dsyrk64_", SYRK, 1}, {"cblas_dsyrk64_", SYRK, 1},
    {"cblas_dsyrk_64", SYRK, 1}, {"scipy_cblas_dsyrk", SYRK, 0}, {"cblas_dsyrk", SYRK, 0},
};
#define N_WANTED ((int)(sizeof(k_wanted) / sizeof(k_wanted[0])))

typedef struct {
    void **addr;      /* the GOT entry */
    int prot;         /* protection of its page outside our writes */
    const char *reloc;
} slot_t;

typedef struct {
    const char *name;     /* NULL: not found */
    int ilp64;
    void *volatile orig;  /* the BLAS function the slots led to */
    void *hook;           /* our replacement (depends on ilp64) */
    slot_t slots[MAX_SLOTS];
    int nslots;
    int installed;
} sym_t;

static sym_t g_sym[NKINDS];
static PyObject *g_cb[NKINDS] = {NULL, NULL};  /* _route_gemm, _route_syrk */
static char g_reason[512] = "not installed yet";
static char g_module[1024] = "";

/* Counted only while some scope is active (an idle process pays nothing). */
static volatile long long b_below = 0, b_shape = 0, b_inside = 0, b_pycalls = 0,
                          b_errors = 0, b_routed = 0;

/* ------------------------------------------------------------------ views + router */

static PyObject *
view2d(void *data, npy_intp rows, npy_intp cols, npy_intp rs, npy_intp cs, int writeable)
{
    /* rs, cs: element strides. Returns a new reference (or NULL with an exception). */
    npy_intp dims[2] = {rows, cols};
    npy_intp strides[2] = {rs * (npy_intp)sizeof(double), cs * (npy_intp)sizeof(double)};
    PyObject *v = PyArray_New(&PyArray_Type, 2, dims, NPY_DOUBLE, strides, data, 0,
                              writeable ? NPY_ARRAY_WRITEABLE : 0, NULL);
    if (v == NULL) return NULL;
    if (!writeable) PyArray_CLEARFLAGS((PyArrayObject *)v, NPY_ARRAY_WRITEABLE);
    PyArray_UpdateFlags((PyArrayObject *)v, NPY_ARRAY_UPDATE_ALL);
    return v;
}

/* op(X) (rows x cols) stored with leading dimension ld in `order`, transposed or not:
 * element (r, c) is X[r*ld + c] when the effective layout is row-major, X[r + c*ld]
 * otherwise. Returns 0 when ld is too small (BLAS itself reports that error). */
static int
op_strides(int order, int trans, long long rows, long long cols, long long ld,
           npy_intp *rs, npy_intp *cs)
{
    int row_major = (order == ROW_MAJOR) != (trans != NO_TRANS);
    long long inner = row_major ? cols : rows;
    if (ld < 1 || ld < inner) return 0;
    *rs = row_major ? (npy_intp)ld : 1;
    *cs = row_major ? 1 : (npy_intp)ld;
    return 1;
}

static int
valid_enums(int order, int trans)
{
    return (order == ROW_MAJOR || order == COL_MAJOR)
        && (trans == NO_TRANS || trans == TRANS || trans == CONJ_TRANS);
}

/* The part of the fast path common to both kinds: shape, floor, inside, shutdown.
 * Returns 1 when the product may be handed to Python. */
static int
wanted(int kind, long long m, long long n, long long k, double alpha)
{
    if (m < 2 || n < 2 || k < 1 || alpha == 0.0) {
        /* Vector shaped, empty, or alpha == 0 (BLAS only scales C): never routed. */
        BUMP(b_shape);
        return 0;
    }
    if ((double)m * (double)n * (double)k < (double)LOAD(g_floor)) {
        BUMP(b_below);
        return 0;
    }
    if (t_inside) {
        BUMP(b_inside);
        return 0;
    }
    if (UNLIKELY(IS_FINALIZING()) || g_cb[kind] == NULL) {
        return 0;
    }
    return 1;
}

/* Call the Python router with the GIL taken. `args` is a new tuple (stolen).
 * Returns 1 (handled), 2 (handled, an element overflowed) or 0 (run the BLAS). */
static int
call_python(int kind, PyObject *args, int *interrupted)
{
    PyObject *et, *ev, *etb, *cb, *res;
    int handled = 0;

    PyErr_Fetch(&et, &ev, &etb);
    cb = g_cb[kind];
    Py_XINCREF(cb);
    if (args == NULL || cb == NULL) goto fail;
    BUMP(b_pycalls);
    res = PyObject_CallObject(cb, args);
    if (res == NULL) goto fail;
    if (res == Py_True) {
        handled = 1;
    } else if (PyLong_Check(res)) {
        long v = PyLong_AsLong(res);
        handled = (v == 1 || v == 2) ? (int)v : 0;
        if (PyErr_Occurred()) PyErr_Clear();
    }
    Py_DECREF(res);
    goto done;
fail:
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        *interrupted = 1;   /* abandoned, re-delivered by the caller: not an error */
    } else {
        BUMP(b_errors);
    }
    PyErr_Clear();
    handled = 0;
done:
    Py_XDECREF(args);
    Py_XDECREF(cb);
    PyErr_Restore(et, ev, etb);
    if (handled) BUMP(b_routed);
    return handled;
}

static PyObject *
gemm_args(int order, int ta, int tb, long long M, long long N, long long K, double alpha,
          const double *A, long long lda, const double *B, long long ldb, double beta,
          double *C, long long ldc)
{
    npy_intp ars, acs, brs, bcs, crs, ccs;
    PyObject *a, *b, *c;
    if (!op_strides(order, ta, M, K, lda, &ars, &acs)
            || !op_strides(order, tb, K, N, ldb, &brs, &bcs)
            || !op_strides(order, NO_TRANS, M, N, ldc, &crs, &ccs)) {
        return NULL;
    }
    a = view2d((void *)A, M, K, ars, acs, 0);
    b = a ? view2d((void *)B, K, N, brs, bcs, 0) : NULL;
    c = b ? view2d(C, M, N, crs, ccs, 1) : NULL;
    if (c == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    return Py_BuildValue("(NNNdd)", a, b, c, alpha, beta);
}

static PyObject *
syrk_args(int order, int uplo, int trans, long long N, long long K, double alpha,
          const double *A, long long lda, double beta, double *C, long long ldc)
{
    npy_intp ars, acs, crs, ccs;
    PyObject *a, *c;
    if (!op_strides(order, trans, N, K, lda, &ars, &acs)
            || !op_strides(order, NO_TRANS, N, N, ldc, &crs, &ccs)) {
        return NULL;
    }
    a = view2d((void *)A, N, K, ars, acs, 0);
    c = a ? view2d(C, N, N, crs, ccs, 1) : NULL;
    if (c == NULL) {
        Py_XDECREF(a);
        return NULL;
    }
    return Py_BuildValue("(NNddO)", a, c, alpha, beta, uplo == UPPER ? Py_True : Py_False);
}

/* The slow path of both kinds: the GIL, the floating-point flags, the router. */
#define ROUTE_BODY(KIND, BUILD)                                                        \
    int interrupted = 0, handled;                                                      \
    PyGILState_STATE st = PyGILState_Ensure();                                         \
    fexcept_t fpflags;                                                                 \
    /* NumPy reads the floating-point flags after the product to report overflow as  \
     * its own ("overflow encountered in dot"): only the product may speak for it. */ \
    fegetexceptflag(&fpflags, FE_ALL_EXCEPT);                                          \
    t_inside = 1;                                                                      \
    {                                                                                  \
        PyObject *args = BUILD;                                                        \
        if (args == NULL && PyErr_Occurred() == NULL) {                                \
            /* arguments BLAS itself rejects: its own error report */                 \
            t_inside = 0;                                                              \
            fesetexceptflag(&fpflags, FE_ALL_EXCEPT);                                  \
            PyGILState_Release(st);                                                    \
            return 0;                                                                  \
        }                                                                              \
        handled = call_python(KIND, args, &interrupted);                               \
    }                                                                                  \
    t_inside = 0;                                                                      \
    fesetexceptflag(&fpflags, FE_ALL_EXCEPT);                                          \
    if (handled == 2) feraiseexcept(FE_OVERFLOW);                                      \
    PyGILState_Release(st);                                                            \
    if (interrupted) {                                                                 \
        ABANDON;                                                                       \
        PyErr_SetInterrupt();  /* async-signal-safe: needs no GIL */                   \
        return 1;              /* abandoned: the caller must not run the BLAS */       \
    }                                                                                  \
    return handled != 0;

/* The output of an abandoned product: NaN in the rows x cols matrix C (leading
 * dimension ldc, `order`), or in its `uplo` triangle for dsyrk (uplo 0: all of it). */
static void
fill_nan(int order, long long rows, long long cols, double *C, long long ldc, int uplo)
{
    long long i, j;
    const double nan = NAN;
    for (i = 0; i < rows; i++) {
        for (j = 0; j < cols; j++) {
            if ((uplo == UPPER && j < i) || (uplo == LOWER && j > i)) continue;
            C[order == ROW_MAJOR ? i * ldc + j : i + j * ldc] = nan;
        }
    }
}

static int
route_gemm(int order, int ta, int tb, long long M, long long N, long long K, double alpha,
           const double *A, long long lda, const double *B, long long ldb, double beta,
           double *C, long long ldc)
{
    /* 1 when the router wrote the product into C, else 0 (the caller runs the BLAS).
     * KeyboardInterrupt is re-delivered by PyErr_SetInterrupt after the caller's BLAS
     * ran: it only sets a flag that the interpreter checks later. */
    if (!valid_enums(order, ta) || !valid_enums(order, tb) || !wanted(GEMM, M, N, K, alpha)) {
        return 0;
    }
    {
#define ABANDON fill_nan(order, M, N, C, ldc, 0)
        ROUTE_BODY(GEMM, gemm_args(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                   ldc))
#undef ABANDON
    }
}

static int
route_syrk(int order, int uplo, int trans, long long N, long long K, double alpha,
           const double *A, long long lda, double beta, double *C, long long ldc)
{
    if (!valid_enums(order, trans) || (uplo != UPPER && uplo != LOWER)
            || !wanted(SYRK, N, N, K, alpha)) {
        return 0;
    }
    {
#define ABANDON fill_nan(order, N, N, C, ldc, uplo)
        ROUTE_BODY(SYRK, syrk_args(order, uplo, trans, N, K, alpha, A, lda, beta, C, ldc))
#undef ABANDON
    }
}

/* The replacements, one per integer width. The idle path is one relaxed load and a
 * tail call of the saved function: both branches are tail calls with the caller's own
 * arguments, so nothing is spilled (the slow half is a separate, never-inlined
 * function). */
#if defined(__GNUC__) || defined(__clang__)
#define OZB_NOINLINE __attribute__((noinline))
#else
#define OZB_NOINLINE
#endif
#define DEFINE_HOOKS(SUFFIX, INT)                                                      \
    typedef void (*gemm_##SUFFIX##_t)(int, int, int, INT, INT, INT, double,            \
                                      const double *, INT, const double *, INT,        \
                                      double, double *, INT);                          \
    typedef void (*syrk_##SUFFIX##_t)(int, int, int, INT, INT, double, const double *, \
                                      INT, double, double *, INT);                     \
    static OZB_NOINLINE void                                                           \
    slow_gemm_##SUFFIX(int order, int ta, int tb, INT M, INT N, INT K, double alpha,   \
                       const double *A, INT lda, const double *B, INT ldb,             \
                       double beta, double *C, INT ldc)                                \
    {                                                                                  \
        if (!route_gemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) {\
            ((gemm_##SUFFIX##_t)g_sym[GEMM].orig)(order, ta, tb, M, N, K, alpha, A,    \
                                                   lda, B, ldb, beta, C, ldc);         \
        }                                                                              \
    }                                                                                  \
    static void                                                                        \
    hook_gemm_##SUFFIX(int order, int ta, int tb, INT M, INT N, INT K, double alpha,   \
                       const double *A, INT lda, const double *B, INT ldb,             \
                       double beta, double *C, INT ldc)                                \
    {                                                                                  \
        if (UNLIKELY(LOAD(g_active) != 0)) {                                           \
            slow_gemm_##SUFFIX(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, \
                               ldc);                                                   \
            return;                                                                    \
        }                                                                              \
        ((gemm_##SUFFIX##_t)g_sym[GEMM].orig)(order, ta, tb, M, N, K, alpha, A, lda,   \
                                               B, ldb, beta, C, ldc);                  \
    }                                                                                  \
    static OZB_NOINLINE void                                                           \
    slow_syrk_##SUFFIX(int order, int uplo, int trans, INT N, INT K, double alpha,     \
                       const double *A, INT lda, double beta, double *C, INT ldc)      \
    {                                                                                  \
        if (!route_syrk(order, uplo, trans, N, K, alpha, A, lda, beta, C, ldc)) {      \
            ((syrk_##SUFFIX##_t)g_sym[SYRK].orig)(order, uplo, trans, N, K, alpha, A,  \
                                                   lda, beta, C, ldc);                 \
        }                                                                              \
    }                                                                                  \
    static void                                                                        \
    hook_syrk_##SUFFIX(int order, int uplo, int trans, INT N, INT K, double alpha,     \
                       const double *A, INT lda, double beta, double *C, INT ldc)      \
    {                                                                                  \
        if (UNLIKELY(LOAD(g_active) != 0)) {                                           \
            slow_syrk_##SUFFIX(order, uplo, trans, N, K, alpha, A, lda, beta, C, ldc); \
            return;                                                                    \
        }                                                                              \
        ((syrk_##SUFFIX##_t)g_sym[SYRK].orig)(order, uplo, trans, N, K, alpha, A, lda, \
                                               beta, C, ldc);                          \
    }

DEFINE_HOOKS(ilp64, int64_t)
DEFINE_HOOKS(lp64, int32_t)

static void *
hook_for(int kind, int ilp64)
{
    if (kind == GEMM) return ilp64 ? (void *)hook_gemm_ilp64 : (void *)hook_gemm_lp64;
    return ilp64 ? (void *)hook_syrk_ilp64 : (void *)hook_syrk_lp64;
}

/* ------------------------------------------------------------------------ ELF side */
#if OZB_ELF

static uintptr_t
dyn_ptr(uintptr_t base, ElfW(Addr) v)
{
    /* glibc relocates the dynamic section's addresses in place, musl does not (and
     * glibc does not on some targets): an address below the load base is an offset. */
    return (uintptr_t)v < base ? base + (uintptr_t)v : (uintptr_t)v;
}

static const char *
reloc_kind(unsigned long type)
{
#if defined(__x86_64__)
    if (type == R_X86_64_JUMP_SLOT) return "JUMP_SLOT";
    if (type == R_X86_64_GLOB_DAT) return "GLOB_DAT";
    if (type == R_X86_64_64) return "ABS64";
#elif defined(__aarch64__)
    if (type == R_AARCH64_JUMP_SLOT) return "JUMP_SLOT";
    if (type == R_AARCH64_GLOB_DAT) return "GLOB_DAT";
    if (type == R_AARCH64_ABS64) return "ABS64";
#endif
    return NULL;
}

/* Protection of the page holding `addr`, from /proc/self/maps; -1 if unknown. */
static int
page_prot(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int prot = -1;
    if (f == NULL) return -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (addr >= lo && addr < hi) {
            prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0)
                 | (perms[2] == 'x' ? PROT_EXEC : 0);
            break;
        }
    }
    fclose(f);
    return prot;
}

static void
add_slot(sym_t *s, void **addr, const char *reloc)
{
    int i;
    for (i = 0; i < s->nslots; i++) {
        if (s->slots[i].addr == addr) return;  /* .rela.dyn may include .rela.plt */
    }
    if (s->nslots < MAX_SLOTS) {
        s->slots[s->nslots].addr = addr;
        s->slots[s->nslots].reloc = reloc;
        s->slots[s->nslots].prot = -1;
        s->nslots++;
    }
}

/* One relocation table (RELA when is_rela, else REL). */
static void
scan_relocs(uintptr_t base, const char *table, size_t size, int is_rela,
            const ElfW(Sym) *symtab, const char *strtab, size_t strsz, sym_t found[NKINDS])
{
    size_t ent = is_rela ? sizeof(ElfW(Rela)) : sizeof(ElfW(Rel));
    size_t off;
    for (off = 0; off + ent <= size; off += ent) {
        const ElfW(Rel) *r = (const ElfW(Rel) *)(table + off);
        unsigned long type = ELF64_R_TYPE(r->r_info);  /* 64-bit targets only */
        unsigned long si = ELF64_R_SYM(r->r_info);
        const char *kind = reloc_kind(type), *name;
        int w;
        if (kind == NULL || si == 0) continue;
        if (is_rela && ((const ElfW(Rela) *)r)->r_addend != 0) continue;
        if (symtab[si].st_name >= strsz) continue;
        name = strtab + symtab[si].st_name;
        for (w = 0; w < N_WANTED; w++) {
            sym_t *s = &found[k_wanted[w].kind];
            if (strcmp(name, k_wanted[w].name) != 0) continue;
            if (s->name != NULL && strcmp(s->name, k_wanted[w].name) != 0) continue;
            s->name = k_wanted[w].name;
            s->ilp64 = k_wanted[w].ilp64;
            add_slot(s, (void **)(base + r->r_offset), kind);
        }
    }
}

/* Find the slots of `path` (an already loaded module). Fills found[] (names, slots,
 * originals); returns 0, or -1 with g_reason set. */
static int
scan_module(const char *path, sym_t found[NKINDS])
{
    void *h;
    struct link_map *lm = NULL;
    uintptr_t base;
    const ElfW(Dyn) *d;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    size_t strsz = 0, relasz = 0, relsz = 0, pltsz = 0;
    uintptr_t rela = 0, rel = 0, jmprel = 0;
    long pltrel = DT_RELA;
    int bind_now = 0, k, i;

    memset(found, 0, sizeof(sym_t) * NKINDS);
    h = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
    if (h == NULL) {
        snprintf(g_reason, sizeof(g_reason), "dlopen(%s, RTLD_NOLOAD) failed: %s", path,
                 dlerror());
        return -1;
    }
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL || lm->l_ld == NULL) {
        snprintf(g_reason, sizeof(g_reason), "dlinfo(RTLD_DI_LINKMAP) failed for %s", path);
        dlclose(h);
        return -1;
    }
    base = (uintptr_t)lm->l_addr;
    for (d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
            case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(base, d->d_un.d_ptr); break;
            case DT_STRTAB: strtab = (const char *)dyn_ptr(base, d->d_un.d_ptr); break;
            case DT_STRSZ: strsz = d->d_un.d_val; break;
            case DT_RELA: rela = dyn_ptr(base, d->d_un.d_ptr); break;
            case DT_RELASZ: relasz = d->d_un.d_val; break;
            case DT_REL: rel = dyn_ptr(base, d->d_un.d_ptr); break;
            case DT_RELSZ: relsz = d->d_un.d_val; break;
            case DT_JMPREL: jmprel = dyn_ptr(base, d->d_un.d_ptr); break;
            case DT_PLTRELSZ: pltsz = d->d_un.d_val; break;
            case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
            case DT_BIND_NOW: bind_now = 1; break;
            case DT_FLAGS: if (d->d_un.d_val & DF_BIND_NOW) bind_now = 1; break;
            default: break;
        }
    }
    (void)bind_now;  /* full RELRO is handled by mprotect below */
    if (symtab == NULL || strtab == NULL) {
        snprintf(g_reason, sizeof(g_reason), "%s has no dynamic symbol table", path);
        dlclose(h);
        return -1;
    }
    if (jmprel) scan_relocs(base, (const char *)jmprel, pltsz, pltrel == DT_RELA, symtab,
                            strtab, strsz, found);
    if (rela) scan_relocs(base, (const char *)rela, relasz, 1, symtab, strtab, strsz, found);
    if (rel) scan_relocs(base, (const char *)rel, relsz, 0, symtab, strtab, strsz, found);

    for (k = 0; k < NKINDS; k++) {
        sym_t *s = &found[k];
        void *cur, *resolved;
        Dl_info info;
        if (s->name == NULL) continue;
        s->hook = hook_for(k, s->ilp64);
        /* A slot not yet bound (lazy binding) leads to the module's own PLT stub, and
         * calling that would re-bind the slot over our hook: resolve the symbol
         * ourselves then, as the dynamic linker would for this module. */
        resolved = dlsym(h, s->name);
        for (i = 0; i < s->nslots; i++) {
            cur = __atomic_load_n(s->slots[i].addr, __ATOMIC_RELAXED);
            if (cur == NULL || cur == s->hook) continue;
            if (dladdr(cur, &info) && info.dli_fname && lm->l_name
                    && strcmp(info.dli_fname, lm->l_name) == 0) {
                continue;  /* the module's own lazy-binding stub */
            }
            s->orig = cur;
            break;
        }
        if (s->orig == NULL) s->orig = resolved;
        if (s->orig == NULL) {
            snprintf(g_reason, sizeof(g_reason), "%s: cannot resolve %s", path, s->name);
            s->name = NULL;
            continue;
        }
        for (i = 0; i < s->nslots; i++) {
            s->slots[i].prot = page_prot((uintptr_t)s->slots[i].addr);
        }
    }
    dlclose(h);  /* NOLOAD took a reference; NumPy's own keeps the module loaded */
    return 0;
}

static int
write_slot(slot_t *s, void *value)
{
    long pagesize = sysconf(_SC_PAGESIZE);
    void *page = (void *)((uintptr_t)s->addr & ~((uintptr_t)pagesize - 1));
    int prot = s->prot;
    if (prot < 0) return -1;
    if (!(prot & PROT_WRITE)) {
        /* Full RELRO (or a GLOB_DAT slot in .got): read-only after start-up. */
        if (mprotect(page, (size_t)pagesize, PROT_READ | PROT_WRITE) != 0) return -1;
    }
    __atomic_store_n(s->addr, value, __ATOMIC_SEQ_CST);
    if (!(prot & PROT_WRITE)) {
        mprotect(page, (size_t)pagesize, prot);
    }
    return 0;
}

#endif /* OZB_ELF */

/* --------------------------------------------------------------------- Python API */

static PyObject *
bh_install(PyObject *self, PyObject *args)
{
    /* blas_install(module_path, route_gemm, route_syrk) -> bool */
    const char *path;
    PyObject *cbg, *cbs;
    if (!PyArg_ParseTuple(args, "sOO:blas_install", &path, &cbg, &cbs)) return NULL;
    if (!PyCallable_Check(cbg) || !PyCallable_Check(cbs)) {
        PyErr_SetString(PyExc_TypeError, "blas_install() needs two callables");
        return NULL;
    }
    Py_INCREF(cbg);
    Py_XSETREF(g_cb[GEMM], cbg);
    Py_INCREF(cbs);
    Py_XSETREF(g_cb[SYRK], cbs);
#if OZB_ELF
    {
        int k, i, any = 0;
        if (!g_sym[GEMM].installed && !g_sym[SYRK].installed) {
            sym_t found[NKINDS];
            if (scan_module(path, found) != 0) Py_RETURN_FALSE;
            memcpy(g_sym, found, sizeof(found));
            snprintf(g_module, sizeof(g_module), "%s", path);
        }
        for (k = 0; k < NKINDS; k++) {
            sym_t *s = &g_sym[k];
            if (s->name == NULL || s->installed) {
                any |= s->installed;
                continue;
            }
            for (i = 0; i < s->nslots; i++) {
                if (write_slot(&s->slots[i], s->hook) != 0) break;
            }
            if (i < s->nslots) {
                /* put back the ones written */
                while (--i >= 0) write_slot(&s->slots[i], s->orig);
                snprintf(g_reason, sizeof(g_reason),
                         "could not write the GOT slot of %s (mprotect refused)", s->name);
                continue;
            }
            s->installed = 1;
            any = 1;
        }
        if (!any) {
            if (g_sym[GEMM].name == NULL && g_sym[SYRK].name == NULL) {
                snprintf(g_reason, sizeof(g_reason),
                         "%s imports no cblas dgemm/dsyrk symbol (BLAS linked statically, "
                         "or under other names)", path);
            }
            Py_RETURN_FALSE;
        }
        g_reason[0] = '\0';
        Py_RETURN_TRUE;
    }
#else
    (void)path;
    snprintf(g_reason, sizeof(g_reason),
             "not a Linux x86-64/aarch64 ELF build: GOT slots cannot be patched here");
    Py_RETURN_FALSE;
#endif
}

static PyObject *
bh_remove(PyObject *self, PyObject *noargs)
{
    /* blas_remove() -> bool: True when every slot holds the original again. */
    int ok = 1;
#if OZB_ELF
    int k, i;
    for (k = 0; k < NKINDS; k++) {
        sym_t *s = &g_sym[k];
        if (!s->installed) continue;
        for (i = 0; i < s->nslots; i++) {
            void *cur = __atomic_load_n(s->slots[i].addr, __ATOMIC_RELAXED);
            if (cur != s->hook) {
                /* Someone hooked on top of us (and may forward to our hook): leave
                 * it; our replacement stays valid and forwards to the original. */
                ok = 0;
                continue;
            }
            if (write_slot(&s->slots[i], s->orig) != 0) ok = 0;
        }
        s->installed = 0;
    }
    if (!ok) {
        snprintf(g_reason, sizeof(g_reason),
                 "removed with a slot left as found (another hook was installed over it)");
    } else {
        snprintf(g_reason, sizeof(g_reason), "removed (disable() with nothing enabled)");
    }
#endif
    return PyBool_FromLong(ok);
}

static PyObject *
bh_status(PyObject *self, PyObject *noargs)
{
    PyObject *d = PyDict_New(), *syms, *v;
    int k, i, installed = 0;
    if (d == NULL) return NULL;
    syms = PyDict_New();
    if (syms == NULL) goto fail;
    for (k = 0; k < NKINDS; k++) {
        sym_t *s = &g_sym[k];
        PyObject *relocs;
        installed |= s->installed;
        if (s->name == NULL) continue;
        relocs = PyList_New(0);
        if (relocs == NULL) goto fail_syms;
        for (i = 0; i < s->nslots; i++) {
            PyObject *r = PyUnicode_FromString(s->slots[i].reloc);
            if (r == NULL || PyList_Append(relocs, r) < 0) {
                Py_XDECREF(r);
                Py_DECREF(relocs);
                goto fail_syms;
            }
            Py_DECREF(r);
        }
        v = Py_BuildValue("{s:s,s:i,s:N,s:O}", "kind", k == GEMM ? "gemm" : "syrk",
                          "int_bits", s->ilp64 ? 64 : 32, "relocations", relocs,
                          "installed", s->installed ? Py_True : Py_False);
        if (v == NULL || PyDict_SetItemString(syms, s->name, v) < 0) {
            Py_XDECREF(v);
            goto fail_syms;
        }
        Py_DECREF(v);
    }
    v = Py_BuildValue("{s:O,s:N,s:s,s:s}", "installed", installed ? Py_True : Py_False,
                      "symbols", syms, "reason", g_reason, "module", g_module);
    Py_DECREF(d);
    return v;
fail_syms:
    Py_DECREF(syms);
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *
bh_counters(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L}",
                         "below_floor", (long long)LOAD(b_below),
                         "not_routable_shape", (long long)LOAD(b_shape),
                         "inside_router", (long long)LOAD(b_inside),
                         "python_calls", (long long)LOAD(b_pycalls),
                         "routed", (long long)LOAD(b_routed),
                         "errors", (long long)LOAD(b_errors));
}

static PyObject *
bh_reset_counters(PyObject *self, PyObject *noargs)
{
    STORE(b_below, 0);
    STORE(b_shape, 0);
    STORE(b_inside, 0);
    STORE(b_pycalls, 0);
    STORE(b_routed, 0);
    STORE(b_errors, 0);
    Py_RETURN_NONE;
}

static PyObject *
bh_set_inside(PyObject *self, PyObject *arg)
{
    /* blas_set_inside(flag) -> previous flag: this thread's "inside the router". */
    int prev = t_inside, v = PyObject_IsTrue(arg);
    if (v < 0) return NULL;
    t_inside = v;
    return PyBool_FromLong(prev);
}

static PyObject *
bh_hook_address(PyObject *self, PyObject *args)
{
    /* blas_hook_address(kind, ilp64) -> int: the replacement function itself, so that
     * tests can call it through ctypes with arguments NumPy never passes (column-major
     * order, lower triangle, alpha/beta). */
    const char *kind;
    int ilp64;
    if (!PyArg_ParseTuple(args, "sp:blas_hook_address", &kind, &ilp64)) return NULL;
    if (strcmp(kind, "gemm") != 0 && strcmp(kind, "syrk") != 0) {
        PyErr_SetString(PyExc_ValueError, "kind must be 'gemm' or 'syrk'");
        return NULL;
    }
    if (g_sym[strcmp(kind, "gemm") == 0 ? GEMM : SYRK].orig == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the BLAS hook was never installed");
        return NULL;
    }
    return PyLong_FromVoidPtr(hook_for(strcmp(kind, "gemm") == 0 ? GEMM : SYRK, ilp64));
}

OZB_HIDDEN PyMethodDef ozb_blashook_methods[] = {
    {"blas_hook_address", bh_hook_address, METH_VARARGS,
     "blas_hook_address(kind, ilp64) -> int (for tests)"},
    {"blas_install", bh_install, METH_VARARGS,
     "blas_install(module_path, route_gemm, route_syrk) -> bool\n\nPatch the GOT slots of "
     "the cblas dgemm/dsyrk symbols imported by the loaded module at module_path. The "
     "callbacks get (a, b, c, alpha, beta) and (a, c, alpha, beta, upper) views and "
     "return 1 (routed), 2 (routed, overflow) or 0 (run the BLAS). False when nothing "
     "could be patched (blas_status()['reason'] says why)."},
    {"blas_remove", bh_remove, METH_NOARGS,
     "blas_remove() -> bool\n\nWrite the original BLAS addresses back."},
    {"blas_status", bh_status, METH_NOARGS,
     "blas_status() -> dict(installed, symbols, reason, module)"},
    {"blas_counters", bh_counters, METH_NOARGS, "blas_counters() -> dict of C-side counts"},
    {"blas_reset_counters", bh_reset_counters, METH_NOARGS, "blas_reset_counters()"},
    {"blas_set_inside", bh_set_inside, METH_O,
     "blas_set_inside(flag) -> bool\n\nSet this thread's 'inside the router' flag (BLAS "
     "calls made while it is set go straight to the original); returns the old value."},
    {NULL, NULL, 0, NULL},
};

OZB_HIDDEN int
ozb_blashook_init(PyObject *module)
{
    return PyModule_AddIntConstant(module, "BLAS_HOOK_PLATFORM", OZB_ELF);
}
