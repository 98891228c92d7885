"""The BLAS call-site hook on a module that is not NumPy's: an LP64 ``cblas_dgemm`` /
``cblas_dsyrk`` import, as conda/MKL NumPy builds have (the pip wheels import the
ILP64 ``scipy_cblas_dgemm64_``, which the other tests exercise).

Two tiny shared libraries are compiled for the test: ``libozbfakeblas.so`` defines a
naive row/column-major ``cblas_dgemm`` and ``cblas_dsyrk`` with 32-bit integers, and
``libozbcaller.so`` calls them through its PLT (lazily bound, like NumPy's module). The
hook is installed on the caller's GOT slots in a separate process (the process-wide
hook state must not touch this process's NumPy hook) and the results are checked
there: routed calls reach the Python callbacks with the right views, alpha and beta;
calls below the floor, with no scope active, or that a callback declines reach the
fake BLAS; removal writes the original addresses back.

Linux x86-64/aarch64 with a C compiler only (CI has one: it builds the extension).
"""

import shutil
import subprocess
import sys
import textwrap

import pytest

from ozaki_backend.dispatch import blashook

pytestmark = pytest.mark.skipif(
    not blashook.available() or shutil.which("cc") is None,
    reason="needs the ELF BLAS hook and a C compiler")

FAKE_BLAS = r"""
/* Naive CBLAS with 32-bit integers (LP64): enough for the test's small products. */
enum { RowMajor = 101, ColMajor = 102, NoTrans = 111, Trans = 112, Upper = 121 };
int ozb_fake_calls = 0;

static double at(const double *X, int ld, int i, int j, int order) {
    return order == RowMajor ? X[i * ld + j] : X[j * ld + i];
}
static double *ref(double *X, int ld, int i, int j, int order) {
    return order == RowMajor ? &X[i * ld + j] : &X[j * ld + i];
}
void cblas_dgemm(int order, int ta, int tb, int M, int N, int K, double alpha,
                 const double *A, int lda, const double *B, int ldb, double beta,
                 double *C, int ldc) {
    ozb_fake_calls++;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int p = 0; p < K; p++)
                s += (ta == Trans ? at(A, lda, p, i, order) : at(A, lda, i, p, order))
                   * (tb == Trans ? at(B, ldb, j, p, order) : at(B, ldb, p, j, order));
            double *c = ref(C, ldc, i, j, order);
            *c = alpha * s + (beta == 0.0 ? 0.0 : beta * *c);
        }
}
void cblas_dsyrk(int order, int uplo, int trans, int N, int K, double alpha,
                 const double *A, int lda, double beta, double *C, int ldc) {
    ozb_fake_calls++;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            if ((uplo == Upper) ? (j < i) : (j > i)) continue;
            double s = 0.0;
            for (int p = 0; p < K; p++)
                s += (trans == Trans ? at(A, lda, p, i, order) * at(A, lda, p, j, order)
                                     : at(A, lda, i, p, order) * at(A, lda, j, p, order));
            double *c = ref(C, ldc, i, j, order);
            *c = alpha * s + (beta == 0.0 ? 0.0 : beta * *c);
        }
}
"""

CALLER = r"""
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int,
                 const double *, int, double, double *, int);
void cblas_dsyrk(int, int, int, int, int, double, const double *, int, double,
                 double *, int);
void call_gemm(int order, int ta, int tb, int M, int N, int K, double alpha,
               const double *A, int lda, const double *B, int ldb, double beta,
               double *C, int ldc) {
    cblas_dgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void call_syrk(int order, int uplo, int trans, int N, int K, double alpha,
               const double *A, int lda, double beta, double *C, int ldc) {
    cblas_dsyrk(order, uplo, trans, N, K, alpha, A, lda, beta, C, ldc);
}
"""

CHECK = r"""
import ctypes, sys
import numpy as np
from ozaki_backend.dispatch import blashook

C = blashook._C
libdir = sys.argv[1]
blas = ctypes.CDLL(libdir + "/libozbfakeblas.so", mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(libdir + "/libozbcaller.so")
I, D, P = ctypes.c_int, ctypes.c_double, ctypes.c_void_p
lib.call_gemm.argtypes = [I, I, I, I, I, I, D, P, I, P, I, D, P, I]
lib.call_syrk.argtypes = [I, I, I, I, I, D, P, I, D, P, I]
fake_calls = ctypes.c_int.in_dll(blas, "ozb_fake_calls")
seen = []

def route_gemm(a, b, c, alpha, beta):
    seen.append(("gemm", a.shape, b.shape, alpha, beta))
    if alpha == 7.0:
        return 0                        # declined: the original BLAS must run
    c[...] = alpha * (a @ b) + (beta * c if beta != 0 else 0)
    return 1

def route_syrk(a, c, alpha, beta, upper):
    seen.append(("syrk", a.shape, alpha, beta, upper))
    full = alpha * (a @ a.T) + (beta * c if beta != 0 else 0)
    c[...] = np.triu(full) + np.tril(c, -1) if upper else np.tril(full) + np.triu(c, 1)
    return 1

assert C.blas_install(libdir + "/libozbcaller.so", route_gemm, route_syrk), C.blas_status()
st = C.blas_status()
widths = {name: v["int_bits"] for name, v in st["symbols"].items()}
assert widths == {"cblas_dgemm": 32, "cblas_dsyrk": 32}, st

rng = np.random.default_rng(0)
m, n, k = 5, 4, 3
A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
ptr = lambda x: x.ctypes.data

def gemm(order, ta, tb, alpha, beta, C0):
    # Operands stored as the call describes them (row- or column-major, transposed).
    store = np.ascontiguousarray if order == 101 else np.asfortranarray
    a = store(A.T) if ta == 112 else store(A)
    b = store(B.T) if tb == 112 else store(B)
    c = store(C0.copy())
    ld = (lambda x: x.shape[1]) if order == 101 else (lambda x: x.shape[0])
    lib.call_gemm(order, ta, tb, m, n, k, alpha, ptr(a), ld(a), ptr(b), ld(b), beta,
                  ptr(c), ld(c))
    return c

C0 = rng.standard_normal((m, n))
want = 1.5 * (A @ B) - 0.5 * C0
for active, floor, routed in ((0, 0, False), (1, 10**9, False), (1, 0, True)):
    C.set_state(active, floor)
    for order in (101, 102):
        for ta in (111, 112):
            for tb in (111, 112):
                before, n_seen = fake_calls.value, len(seen)
                got = gemm(order, ta, tb, 1.5, -0.5, C0)
                assert np.allclose(got, want, rtol=1e-13, atol=1e-13), (order, ta, tb)
                assert (len(seen) > n_seen) == routed, (active, floor)
                assert (fake_calls.value > before) == (not routed), (active, floor)
                if routed:
                    assert seen[-1] == ("gemm", (m, k), (k, n), 1.5, -0.5)

# A callback that declines: the original BLAS computes the product.
before = fake_calls.value
got = gemm(101, 111, 111, 7.0, 0.0, np.zeros((m, n)))
assert fake_calls.value == before + 1 and np.allclose(got, 7.0 * (A @ B))

# syrk: A A^T (NoTrans) and A^T A (Trans), both triangles requested.
for trans, X, N_, K_ in ((111, A, m, k), (112, A, k, m)):
    for uplo in (121, 122):
        c = np.zeros((N_, N_))
        lib.call_syrk(101, uplo, trans, N_, K_, 1.0, ptr(X), X.shape[1], 0.0, ptr(c), N_)
        full = X @ X.T if trans == 111 else X.T @ X
        tri = np.triu if uplo == 121 else np.tril
        assert np.allclose(tri(c), tri(full), rtol=1e-13, atol=1e-13), (trans, uplo)
        assert seen[-1][0] == "syrk" and seen[-1][4] == (uplo == 121)

# Removal: the original addresses are back, nothing reaches the callbacks.
assert C.blas_remove()
C.set_state(1, 0)
n_seen, before = len(seen), fake_calls.value
got = gemm(102, 112, 111, 1.5, -0.5, C0)
assert np.allclose(got, want) and len(seen) == n_seen and fake_calls.value == before + 1
C.set_state(0, 2**63 - 1)
print("ok")
"""


@pytest.fixture(scope="module", params=["lazy", "now"])
def libdir(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("lp64")
    (d / "fakeblas.c").write_text(FAKE_BLAS)
    (d / "caller.c").write_text(CALLER)
    cc = ["cc", "-O1", "-fPIC", "-shared"]
    subprocess.run(cc + ["-o", str(d / "libozbfakeblas.so"), str(d / "fakeblas.c")],
                   check=True)
    # "lazy": lazy binding and partial RELRO, like NumPy's module (the hook must resolve
    # a slot that still points at the PLT stub); "now": full RELRO, the GOT read-only
    # after start-up (the hook must make the slot's page writable).
    link = ["-Wl,-z,lazy"] if request.param == "lazy" else ["-Wl,-z,now", "-Wl,-z,relro"]
    subprocess.run(cc + ["-o", str(d / "libozbcaller.so"), str(d / "caller.c"),
                         f"-L{d}", "-lozbfakeblas", "-Wl,-rpath," + str(d), *link],
                   check=True)
    return d


def test_lp64_cblas_imports_of_another_module_are_hooked_and_removed(libdir):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(CHECK), str(libdir)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
