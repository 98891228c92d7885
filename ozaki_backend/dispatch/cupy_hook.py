"""CuPy's float64 and complex128 GEMMs, routed where CuPy calls cuBLAS.

How CuPy 14 reaches cuBLAS (found in the ``cupy-cuda13x`` 14.2 wheel and its source):
``cupy_backends/cuda/libs/cublas.*.so`` links ``libcublas.so.13`` directly (its
``cublasDgemm_v2``, ``cublasGemmEx``, ``cublasGemmStridedBatchedEx`` ... are
``JUMP_SLOT`` imports of a partial-RELRO module, as NumPy's BLAS imports are), and every
CuPy routine that multiplies matrices calls that module's Python-level functions,
looked up on the module object at each call (``from cupy_backends.cuda.libs import
cublas`` inside the function, then ``cublas.gemmEx(...)``): ``@``, ``cupy.matmul``,
``cupy.dot``, ``tensordot``, ``inner``, ``einsum`` (all through
``cupy._core._routines_linalg``: ``tensordot_core_v11`` calls ``gemmEx``, a stacked
``matmul`` ``gemmStridedBatchedEx``, one with broadcast stacks ``dgemmBatched``),
``cupy.cublas.gemm`` (``dgemm``/``zgemm``), and through them ``cupy.linalg`` (``lstsq``,
``pinv``, ``matrix_power``, ``multi_dot``) and ``cupyx.scipy`` (``expm``, ``lobpcg``,
the Krylov solvers' block products). No CuPy module ``cimport``-s the cuBLAS module, so
none bypasses those names.

So the hook replaces those functions in the module ``cupy_backends.cuda.libs.cublas``
(which ``cupy.cuda.cublas`` is): a Python-level wrap, like ``mkl_fft``'s NumPy patch,
chosen over patching the ELF import slots because these names are CuPy's documented
low-level API (stable across CuPy releases, whatever CuPy does about loading
libcublas: CuPy 14 already loads cuFFT through ``cuda.pathfinder`` instead of linking
it), and because routing needs Python anyway (the engine is CuPy code). The wrappers
see cuBLAS's own arguments (column-major, device pointers): a float64 (complex128)
call inside a scope becomes CuPy views of the caller's buffers, decided by the device
cost model (``device_routing``) and computed by ``ozaki_backend._api.product`` on
CuPy's current stream (the one CuPy's wrapper would have put the cuBLAS handle on),
with no host synchronisation beyond the engine's own; everything else goes to the
original function with the original arguments, untouched.

Not routed (left to cuBLAS): other dtypes, ``CUBLAS_COMPUTE_64F_PEDANTIC``, calls with
keyword arguments, alpha/beta in device memory (``CUBLAS_POINTER_MODE_DEVICE``), a
stream being captured into a CUDA graph, the pointer-array batched GEMMs
(``dgemmBatched``/``zgemmBatched``: ``matmul`` of stacks that broadcast; reading the
pointer arrays would synchronise), ``syrk``, GEMMs inside cuSOLVER/cuSPARSE/cuTENSOR
(``cupy.linalg.solve``, ``eigh``, ``qr`` ..., einsum with the cuTENSOR accelerator), and
Cython code that would ``cimport`` the cuBLAS module.

Installed by :func:`install` (``patches.install``, the first ``enabled()``): now if the
cuBLAS module is imported, else as soon as it is (CuPy imports it lazily, at the first
product); :func:`uninstall` puts the originals back. Nothing here imports CuPy.
"""

from __future__ import annotations

import ctypes
import threading

from . import config as _config
from . import device_routing
from .import_watch import ImportWatcher
from .log import fallback
from .route import scope_config

#: The module whose functions are replaced.
MODULE = "cupy_backends.cuda.libs.cublas"
LIBRARY = "CuPy"

# cuBLAS / CUDA enumerations (library_types.h, cublas_api.h): fixed by the C API.
CUDA_R_64F, CUDA_C_64F = 1, 5
CUBLAS_COMPUTE_64F = 70
OP_N, OP_T, OP_C = 0, 1, 2
POINTER_MODE_HOST = 0

#: dtype name and element size of the result types routed.
_TYPES = {CUDA_R_64F: ("float64", 8), CUDA_C_64F: ("complex128", 16)}
#: Compute types routed per result type: CUBLAS_COMPUTE_64F, and the legacy form that
#: passes the data type as compute type (CuPy's stacked matmul does).
_COMPUTE = {CUDA_R_64F: (CUBLAS_COMPUTE_64F, CUDA_R_64F),
            CUDA_C_64F: (CUBLAS_COMPUTE_64F, CUDA_C_64F)}

_lock = threading.RLock()
_originals: dict = {}       # function name -> CuPy's function
_wrappers: dict = {}        # function name -> our wrapper
_watcher = None             # waiting for the module's import


# --------------------------------------------------------------------------- layout
def operand_layout(trans, rows, cols, ld, stride=0, batch=1):
    """The row-major view of ``op(X)^T`` for a cuBLAS operand ``X``.

    cuBLAS computes ``C = op(A) op(B)`` on column-major matrices; the same memory read
    row-major is ``C^T = op(B)^T op(A)^T``, which is what the engine computes.

    Parameters
    ----------
    trans : int
        ``OP_N``, ``OP_T`` or ``OP_C`` (``op(X)`` is ``X``, ``X^T`` or ``X^H``).
    rows, cols : int
        The shape of ``op(X)`` (column-major).
    ld : int
        Leading dimension of ``X``.
    stride, batch : int
        Elements between consecutive matrices, and their number.

    Returns
    -------
    shape : tuple of int
        ``(cols, rows)``, with ``(batch,)`` in front when ``batch > 1``.
    strides : tuple of int
        In elements.
    extent : int
        Elements from the first one the view reads to one past its last.
    conj : bool
        Whether the view must be conjugated (``OP_C``).
    """
    if trans == OP_N:   # X stored rows x cols: its row-major reading is op(X)^T
        strides, extent = (ld, 1), (cols - 1) * ld + rows
    else:               # X stored cols x rows: read row-major it is op(X), transpose
        strides, extent = (1, ld), (rows - 1) * ld + cols
    shape = (cols, rows)
    if batch > 1:
        shape, strides = (batch,) + shape, (stride,) + strides
        extent += (batch - 1) * stride
    return shape, strides, extent, trans == OP_C


def gemm_layouts(transa, transb, m, n, k, lda, ldb, ldc, sa=0, sb=0, sc=0, batch=1):
    """The three views of a cuBLAS GEMM as the engine's row-major product
    ``x @ y -> out``: ``x = op(B)^T`` (``n x k``), ``y = op(A)^T`` (``k x m``),
    ``out = C^T`` (``n x m``), each as :func:`operand_layout` returns it (``out``
    never conjugated). Returns ``(x, y, out)``."""
    x = operand_layout(transb, k, n, ldb, sb, batch)
    y = operand_layout(transa, m, k, lda, sa, batch)
    out = operand_layout(OP_N, m, n, ldc, sc, batch)
    return x, y, out


def _cupy_view(cupy, ptr, layout, dtype, itemsize, device_id):
    """A CuPy array over ``layout`` at device pointer ``ptr`` (memory CuPy does not own:
    the caller's, alive for the whole call)."""
    shape, strides, extent, conj = layout
    mem = cupy.cuda.UnownedMemory(ptr, max(extent, 1) * itemsize, None, device_id)
    arr = cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(mem, 0),
                       tuple(s * itemsize for s in strides))
    return cupy.conj(arr) if conj else arr


def _host_scalar(ptr, dtype):
    """The BLAS scalar at host address ``ptr`` (a double or a complex double)."""
    if dtype == "float64":
        return ctypes.c_double.from_address(ptr).value
    re, im = (ctypes.c_double * 2).from_address(ptr)
    return complex(re, im)


# --------------------------------------------------------------------------- routing
def _route(name, handle, transa, transb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta,
           C, ldc, sc, batch, ctype) -> bool:
    """Route one cuBLAS GEMM call made inside a scope; False: call the original."""
    cfg = scope_config()
    if cfg is None:
        return False
    dtype, itemsize = _TYPES[ctype]
    entry = f"CuPy {name}"
    try:
        # The engine's product is the row-major (n x k) @ (k x m) (module docstring).
        d = device_routing.decide(cfg, n, m, k, batch, entry,
                                  complex_=dtype == "complex128")
        if not d.routed:
            device_routing.native(d, LIBRARY)
            return False
        import cupy

        cublas = _module()
        if cublas.getPointerMode(handle) != POINTER_MODE_HOST:
            device_routing.native(d.replace(routed=False, engine=None, reason=(
                "alpha and beta in device memory (reading them would synchronise)")),
                LIBRARY)
            return False
        stream = cupy.cuda.get_current_stream()
        if cupy.cuda.runtime.streamIsCapturing(stream.ptr):
            device_routing.native(d.replace(routed=False, engine=None, reason=(
                "stream capture in progress (the engine synchronises)")), LIBRARY)
            return False
        dev = cupy.cuda.runtime.getDevice()
        lx, ly, lc = gemm_layouts(transa, transb, m, n, k, lda, ldb, ldc, sa, sb, sc,
                                  batch)
        x = _cupy_view(cupy, B, lx, dtype, itemsize, dev)
        y = _cupy_view(cupy, A, ly, dtype, itemsize, dev)
        out = _cupy_view(cupy, C, lc, dtype, itemsize, dev)
        a_, b_ = _host_scalar(alpha, dtype), _host_scalar(beta, dtype)
        return device_routing.route_product(cfg, d, x, y, out, alpha=a_, beta=b_,
                                            c=out if b_ != 0 else None)
    except Warning:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug here must not cost the result
        fallback(entry, exc)
        return False


def _wrap_gemm_ex(original):
    """``gemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
    beta, C, Ctype, ldc, computeType, algo)``."""
    def gemmEx(*args, **kwargs):
        if _config.ANY_ACTIVE and not kwargs and len(args) == 19:
            (h, ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, C, ct, ldc, comp,
             _algo) = args
            if (ct in _TYPES and at == ct and bt == ct and comp in _COMPUTE[ct]
                    and _route("gemmEx", h, ta, tb, m, n, k, al, A, lda, 0, B, ldb, 0,
                               be, C, ldc, 0, 1, ct)):
                return None
        return original(*args, **kwargs)
    return gemmEx


def _wrap_gemm_strided_batched_ex(original):
    """``gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda,
    strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount,
    computeType, algo)``."""
    def gemmStridedBatchedEx(*args, **kwargs):
        if _config.ANY_ACTIVE and not kwargs and len(args) == 23:
            (h, ta, tb, m, n, k, al, A, at, lda, sa, B, bt, ldb, sb, be, C, ct, ldc, sc,
             batch, comp, _algo) = args
            if (ct in _TYPES and at == ct and bt == ct and comp in _COMPUTE[ct]
                    and _route("gemmStridedBatchedEx", h, ta, tb, m, n, k, al, A, lda,
                               sa, B, ldb, sb, be, C, ldc, sc, batch, ct)):
                return None
        return original(*args, **kwargs)
    return gemmStridedBatchedEx


def _wrap_typed_gemm(original, name, ctype):
    """``dgemm``/``zgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
    C, ldc)``."""
    def gemm(*args, **kwargs):
        if _config.ANY_ACTIVE and not kwargs and len(args) == 14:
            h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc = args
            if _route(name, h, ta, tb, m, n, k, al, A, lda, 0, B, ldb, 0, be, C, ldc, 0, 1,
                      ctype):
                return None
        return original(*args, **kwargs)
    gemm.__name__ = gemm.__qualname__ = name
    return gemm


def _wrap_typed_strided(original, name, ctype):
    """``dgemmStridedBatched``/``zgemmStridedBatched(handle, transa, transb, m, n, k,
    alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batchCount)``."""
    def gemm(*args, **kwargs):
        if _config.ANY_ACTIVE and not kwargs and len(args) == 18:
            h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C, ldc, sc, batch = args
            if _route(name, h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C, ldc, sc,
                      batch, ctype):
                return None
        return original(*args, **kwargs)
    gemm.__name__ = gemm.__qualname__ = name
    return gemm


#: The functions replaced: name -> wrapper factory (of the original).
TARGETS = {
    "gemmEx": _wrap_gemm_ex,
    "gemmStridedBatchedEx": _wrap_gemm_strided_batched_ex,
    "dgemm": lambda f: _wrap_typed_gemm(f, "dgemm", CUDA_R_64F),
    "zgemm": lambda f: _wrap_typed_gemm(f, "zgemm", CUDA_C_64F),
    "dgemmStridedBatched": lambda f: _wrap_typed_strided(f, "dgemmStridedBatched",
                                                         CUDA_R_64F),
    "zgemmStridedBatched": lambda f: _wrap_typed_strided(f, "zgemmStridedBatched",
                                                         CUDA_C_64F),
}


# --------------------------------------------------------------------------- installing
def _module():
    import sys

    return sys.modules[MODULE]


def _patch(module) -> None:
    with _lock:
        for name, make in TARGETS.items():
            current = getattr(module, name, None)
            if current is None or current is _wrappers.get(name):
                continue
            _originals[name] = current
            w = make(current)
            w.__doc__ = getattr(current, "__doc__", None)
            w._ozaki_backend_original = current
            _wrappers[name] = w
            setattr(module, name, w)


#: The variable that turns the CuPy interception off (``0``/false/no/off). On by
#: default: on the H200 every routed cuBLAS call gave the bits of ``matmul`` on the
#: operands CuPy handed cuBLAS, and unmodified CuPy code (a block CG loop,
#: ``cupyx.scipy.linalg.expm``) ran as with CuPy alone (tests/gpu_arrays/).
SWITCH = "OZAKI_BACKEND_CUPY"


def wanted() -> bool:
    """Whether the CuPy interception is wanted: unless ``OZAKI_BACKEND_CUPY`` says
    0/false/no/off (any other value, or none, leaves it on)."""
    import os

    return os.environ.get(SWITCH, "").strip().lower() not in ("0", "false", "no", "off")


def install() -> None:
    """Route CuPy's float64/complex128 GEMMs inside scopes: patch the cuBLAS module now
    if it is imported, else as soon as it is (never imports it)."""
    global _watcher
    with _lock:
        mod = device_routing.fully_imported(MODULE)
        if mod is not None:
            _patch(mod)
        elif _watcher is None:
            _watcher = ImportWatcher(MODULE, _patch_imported)
            _watcher.insert()


def _patch_imported(module) -> None:
    """The watcher's callback: the module has just been imported."""
    global _watcher
    with _lock:
        _watcher = None
        _patch(module)


def uninstall() -> None:
    """Put CuPy's functions back and stop waiting for the module's import."""
    global _watcher
    import sys

    with _lock:
        if _watcher is not None:
            _watcher.remove()
            _watcher = None
        mod = sys.modules.get(MODULE)
        for name, w in list(_wrappers.items()):
            if mod is not None and getattr(mod, name, None) is w:
                setattr(mod, name, _originals[name])
        _wrappers.clear()


def installed() -> bool:
    """Whether CuPy's cuBLAS functions currently hold the wrappers."""
    import sys

    mod = sys.modules.get(MODULE)
    return bool(_wrappers) and mod is not None and all(
        getattr(mod, n, None) is w for n, w in _wrappers.items())


def waiting() -> bool:
    """Whether the hook waits for CuPy's cuBLAS module to be imported."""
    return _watcher is not None


def state() -> str:
    """``"installed"``, ``"waiting for its import"`` or ``"not installed"``."""
    if installed():
        return "installed"
    return "waiting for its import" if waiting() else "not installed"


device_routing.register_hook(LIBRARY, state)
