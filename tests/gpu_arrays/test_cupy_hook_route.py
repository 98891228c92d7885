"""The CuPy hook end to end without a GPU: its wrappers of CuPy's cuBLAS functions,
called the way CuPy calls them (raw pointers, column-major, host alpha/beta), route a
float64/complex128 GEMM inside a scope and write exactly what the explicit call gives
into the caller's C buffer; everything else reaches the original function.

Host memory stands in for device memory and a minimal stand-in for the few CuPy names
the hook uses (memory wrappers, the current stream) makes NumPy arrays over it, which
the CPU engine computes on (``engine="cpu"``). Skipped where the real CuPy is
importable: the GPU tests cover it there."""

import ctypes
import importlib.util
import sys
import types

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import cupy_hook, device_routing
from ozaki_backend.dispatch.cupy_hook import CUDA_C_64F, CUDA_R_64F, OP_C, OP_N, OP_T

CPU = {"engine": "cpu", "min_size": 0}


def _fake_cupy():
    """The CuPy names ``cupy_hook._route`` uses, over host memory."""
    cupy = types.ModuleType("cupy")
    cuda = types.SimpleNamespace()

    class UnownedMemory:
        def __init__(self, ptr, size, owner, device_id=-1):
            self.ptr, self.size = ptr, size

    class MemoryPointer:
        def __init__(self, mem, offset):
            self.mem, self.offset = mem, offset

    class ndarray:   # a class (array_api_compat asks issubclass): makes NumPy arrays
        def __new__(cls, shape, dtype, memptr, strides):
            buf = (ctypes.c_char * memptr.mem.size).from_address(memptr.mem.ptr)
            return np.ndarray(shape, dtype, buffer=buf, offset=memptr.offset,
                              strides=strides)

    cuda.UnownedMemory, cuda.MemoryPointer = UnownedMemory, MemoryPointer
    cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=0)
    cuda.runtime = types.SimpleNamespace(streamIsCapturing=lambda ptr: False,
                                         getDevice=lambda: 0)
    cupy.cuda, cupy.ndarray, cupy.conj = cuda, ndarray, np.conj
    return cupy


@pytest.fixture
def hooked(monkeypatch, clean_dispatch_scopes):
    """CuPy's cuBLAS module (a stand-in whose functions record their calls) with the
    hook's wrappers installed, and the stand-in CuPy importable."""
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed: the GPU tests run the real thing")
    calls = []
    mod = types.ModuleType(cupy_hook.MODULE)
    for name in cupy_hook.TARGETS:
        setattr(mod, name, lambda *a, _n=name, **k: calls.append((_n, a)))
    mod.getPointerMode = lambda handle: cupy_hook.POINTER_MODE_HOST
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setitem(sys.modules, cupy_hook.MODULE, mod)
    cupy_hook.uninstall()
    cupy_hook.install()
    assert cupy_hook.installed()
    yield mod, calls
    cupy_hook.uninstall()
    monkeypatch.delitem(sys.modules, cupy_hook.MODULE)
    cupy_hook.install()        # waiting for the real module again


def _colmajor(rng, rows, cols, ld, dtype):
    buf = rng.standard_normal(ld * cols)
    if dtype == np.complex128:
        buf = buf + 1j * rng.standard_normal(ld * cols)
    return buf


def _matrix(buf, rows, cols, ld):
    return np.lib.stride_tricks.as_strided(buf, (rows, cols), (buf.itemsize,
                                                               ld * buf.itemsize))


def _scalar(value, dtype):
    if dtype == np.complex128:
        return (ctypes.c_double * 2)(value.real, value.imag)
    return ctypes.c_double(value)


def _op(x, t):
    return x if t == OP_N else (x.T if t == OP_T else x.conj().T)


CASES = [(OP_N, OP_N, np.float64, 1.0, 0.0), (OP_T, OP_N, np.float64, 1.0, 0.0),
         (OP_N, OP_T, np.float64, 2.0, 0.5), (OP_T, OP_T, np.float64, -1.0, 1.0),
         (OP_C, OP_N, np.complex128, 1.0, 0.0), (OP_T, OP_C, np.complex128, 1 + 1j, 0.5j)]


@pytest.mark.parametrize("transa, transb, dtype, alpha, beta", CASES)
@pytest.mark.parametrize("name", ["gemmEx", "typed"])
def test_a_gemm_inside_a_scope_writes_the_explicit_calls_bits(hooked, transa, transb,
                                                               dtype, alpha, beta, name):
    mod, calls = hooked
    rng = np.random.default_rng(7)
    m, n, k = 37, 23, 29
    ar, ac = (m, k) if transa == OP_N else (k, m)
    br, bc = (k, n) if transb == OP_N else (n, k)
    lda, ldb, ldc = ar + 3, br + 1, m + 2
    A = _colmajor(rng, ar, ac, lda, dtype)
    B = _colmajor(rng, br, bc, ldb, dtype)
    C = _colmajor(rng, m, n, ldc, dtype)
    C0 = C.copy()
    al, be = _scalar(alpha, dtype), _scalar(beta, dtype)
    ct = CUDA_C_64F if dtype == np.complex128 else CUDA_R_64F
    ptrs = (ctypes.addressof(al), A.ctypes.data, B.ctypes.data, ctypes.addressof(be),
            C.ctypes.data)
    with device_routing.recording() as rec, ob.enabled(**CPU):
        if name == "gemmEx":
            got = mod.gemmEx(9, transa, transb, m, n, k, ptrs[0], ptrs[1], ct, lda,
                             ptrs[2], ct, ldb, ptrs[3], ptrs[4], ct, ldc,
                             cupy_hook.CUBLAS_COMPUTE_64F, 0)
        else:
            f = mod.zgemm if dtype == np.complex128 else mod.dgemm
            got = f(9, transa, transb, m, n, k, ptrs[0], ptrs[1], lda, ptrs[2], ldb,
                    ptrs[3], ptrs[4], ldc)
    assert got is None and calls == [], "routed: CuPy's function was not called"
    assert len(rec) == 1
    opa = np.ascontiguousarray(_op(_matrix(A, ar, ac, lda), transa))
    opb = np.ascontiguousarray(_op(_matrix(B, br, bc, ldb), transb))
    # The engine's product is the row-major C^T = op(B)^T op(A)^T (cupy_hook).
    prod = ob.matmul(np.ascontiguousarray(opb.T), np.ascontiguousarray(opa.T),
                     engine="cpu").T
    want = prod if alpha == 1 else alpha * prod
    if beta != 0:
        want = want + beta * _matrix(C0, m, n, ldc)
    got = _matrix(C, m, n, ldc)
    np.testing.assert_array_equal(got.view(np.uint8) if got.flags.c_contiguous else
                                  np.ascontiguousarray(got).view(np.uint8),
                                  np.ascontiguousarray(want).view(np.uint8))
    # padding rows below each column are untouched
    np.testing.assert_array_equal(C.reshape(n, ldc)[:, m:], C0.reshape(n, ldc)[:, m:])
    entry = "CuPy gemmEx" if name == "gemmEx" else (
        "CuPy zgemm" if dtype == np.complex128 else "CuPy dgemm")
    assert ob.stats()["routed_by_entry"] == {entry: 1}


def test_strided_batched_gemm_is_routed_per_matrix(hooked):
    mod, calls = hooked
    rng = np.random.default_rng(3)
    m, n, k, batch = 16, 12, 20, 4
    lda, ldb, ldc = m, k, m
    sa, sb, sc = m * k, k * n, m * n
    A, B = rng.standard_normal(sa * batch), rng.standard_normal(sb * batch)
    C = np.full(sc * batch, np.nan)
    al, be = ctypes.c_double(1.0), ctypes.c_double(0.0)   # C is not read: NaN stays out
    with ob.enabled(**CPU):
        mod.gemmStridedBatchedEx(1, OP_N, OP_N, m, n, k, ctypes.addressof(al),
                                 A.ctypes.data, CUDA_R_64F, lda, sa, B.ctypes.data,
                                 CUDA_R_64F, ldb, sb, ctypes.addressof(be), C.ctypes.data,
                                 CUDA_R_64F, ldc, sc, batch, CUDA_R_64F, 0)
    assert calls == []
    for i in range(batch):
        a = _matrix(A[i * sa:], m, k, lda)
        b = _matrix(B[i * sb:], k, n, ldb)
        want = ob.matmul(np.ascontiguousarray(b.T), np.ascontiguousarray(a.T),
                         engine="cpu").T
        np.testing.assert_array_equal(_matrix(C[i * sc:], m, n, ldc), want)


def test_calls_the_hook_leaves_alone_reach_cupys_function(hooked):
    mod, calls = hooked
    A = np.ones(64)
    al = ctypes.c_double(1.0)
    p = ctypes.addressof(al)
    args = (1, OP_N, OP_N, 8, 8, 8, p, A.ctypes.data, CUDA_R_64F, 8, A.ctypes.data,
            CUDA_R_64F, 8, p, A.ctypes.data, CUDA_R_64F, 8, cupy_hook.CUBLAS_COMPUTE_64F, 0)
    mod.gemmEx(*args)                                  # outside every scope
    with ob.enabled(**CPU):
        f32 = args[:8] + (0,) + args[9:11] + (0,) + args[12:15] + (0,) + args[16:]
        mod.gemmEx(*f32)                               # float32 (CUDA_R_32F = 0)
        pedantic = args[:17] + (71,) + args[18:]       # CUBLAS_COMPUTE_64F_PEDANTIC
        mod.gemmEx(*pedantic)
        mv = args[:4] + (1,) + args[5:]                # n = 1: matrix-vector
        mod.gemmEx(*mv)
        mod.gemmEx(*args[:-1], algo=0)                 # keywords: passed through
        with ob.disabled():
            mod.gemmEx(*args)
    assert [c[1] for c in calls] == [args, f32, pedantic, mv, args[:-1], args]
    s = ob.stats()
    assert s["routed"] == 0 and s["fallback"] == 0
    assert list(s["reasons"]["native"]) == ["CuPy: matrix-vector shaped"]


def test_device_pointer_mode_is_left_to_cublas(hooked):
    mod, calls = hooked
    mod.getPointerMode = lambda handle: 1             # CUBLAS_POINTER_MODE_DEVICE
    A = np.ones(64)
    args = (1, OP_N, OP_N, 8, 8, 8, 0, A.ctypes.data, 8, A.ctypes.data, 8, 0,
            A.ctypes.data, 8)
    with ob.enabled(**CPU):
        mod.dgemm(*args)
    assert [c[1] for c in calls] == [args]
    assert list(ob.stats()["reasons"]["native"]) == [
        "CuPy: alpha and beta in device memory"]


def test_a_failure_in_the_routed_path_is_a_counted_fallback(hooked, monkeypatch):
    mod, calls = hooked

    def broken(*a, **k):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(device_routing._api, "product", broken)
    A = np.ones(64)
    al, be = ctypes.c_double(1.0), ctypes.c_double(0.0)
    args = (1, OP_N, OP_N, 8, 8, 8, ctypes.addressof(al), A.ctypes.data, 8, A.ctypes.data,
            8, ctypes.addressof(be), A.ctypes.data + 0, 8)
    C = np.zeros(64)
    args = args[:12] + (C.ctypes.data, 8)
    with ob.enabled(**CPU):
        mod.dgemm(*args)
    assert [c[1] for c in calls] == [args]            # CuPy computed it
    assert ob.stats()["fallback"] == 1
