"""Every float64 GEMM NumPy runs: the hook at NumPy's BLAS call site.

NumPy's ``_multiarray_umath`` calls its BLAS through imported dynamic symbols
(``scipy_cblas_dgemm64_`` / ``scipy_cblas_dsyrk64_`` in the NumPy 2.x wheels, ILP64;
``cblas_dgemm`` / ``cblas_dsyrk`` in other builds). The C side (``_blashook.c``, built
into the ``_loophook`` extension) patches the module's GOT slots for those symbols, so
every float64 matrix-matrix product NumPy hands to BLAS arrives here, whatever the
Python entry point: ``ndarray.dot``, ``np.dot`` (also a ``from numpy import dot``
reference bound before installation), ``np.cov``, ``np.corrcoef``,
``np.linalg.matrix_power``, ``tensordot``, ``multi_dot`` and matmul's BLAS path. The
``dsyrk`` slot catches NumPy's symmetric products (``A.T @ A``, ``a.dot(a.T)``).

Installed by the first ``enabled()`` / ``enable()`` (``patches.install``) and removed
by ``disable()`` when nothing is enabled any more. The C fast path forwards to the
original BLAS without the GIL when no scope is active anywhere, below the smallest
floor, for vector-shaped or empty products, and while the calling thread is inside
the router (the engine's own products, or a product the matmul loop hook or a wrapper
has already decided about: each product is decided and counted once). Otherwise it
calls :func:`_route_gemm` / :func:`_route_syrk` with zero-copy views of the BLAS
operands, and they route through ``route.routed`` (the calling context's scope, the
cost model, the stats) like every other entry point. Any error becomes a counted
fallback to the original BLAS.

Where the hook cannot be installed (not Linux x86-64/aarch64 ELF, a statically linked
BLAS, symbols under other names) :func:`status` says why and the module-level wrappers
(``numpy_wrappers``) still cover ``np.dot`` and friends.

Same layer as ``loophook``: above ``route`` and ``config``, below ``patches``.
"""

from __future__ import annotations

import traceback

import numpy as np

from .. import _native
from . import config as _config
from . import route
from .log import fallback, logger

ENTRY_GEMM = "BLAS dgemm"
ENTRY_SYRK = "BLAS dsyrk"

try:
    from . import _loophook as _C
except ImportError as exc:  # the extension was not built
    _C = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

#: True once :func:`install` has patched the slots, or found that it cannot (then it
#: is not retried); :func:`remove` clears it. ``patches.install`` reads it.
settled = False
_unavailable_reason = None


def available() -> bool:
    """Whether this build can patch NumPy's BLAS call site (extension built, ELF)."""
    return _C is not None and bool(getattr(_C, "BLAS_HOOK_PLATFORM", 0))


def _numpy_module_path():
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as mu
    return mu.__file__


def install() -> bool:
    """Patch NumPy's BLAS GOT slots (idempotent). False, with the reason in
    :func:`status`, where it cannot be done; the wrappers then stay the only way in."""
    global settled, _unavailable_reason
    if _C is None or not hasattr(_C, "blas_install"):
        _unavailable_reason = f"the _loophook extension is not built ({IMPORT_ERROR})"
        settled = True
        return False
    ok = _C.blas_install(_numpy_module_path(), _route_gemm, _route_syrk)
    settled = True
    if not ok:
        _unavailable_reason = _C.blas_status()["reason"]
        logger().info("NumPy's BLAS call site is not hooked (%s): ndarray.dot, np.cov and "
                      "names bound before installation are not routed; the module-level "
                      "wrappers still are", _unavailable_reason)
    return bool(ok)


def remove() -> bool:
    """Write the original BLAS addresses back (``disable()`` with nothing enabled)."""
    global settled
    settled = False
    if _C is None or not hasattr(_C, "blas_remove"):
        return True
    return bool(_C.blas_remove())


def installed() -> bool:
    """Whether NumPy's BLAS slots currently lead to the hook."""
    return _C is not None and hasattr(_C, "blas_status") and _C.blas_status()["installed"]


def status() -> dict:
    """``installed``, ``symbols`` (name -> kind, integer width, relocation kinds,
    installed), ``reason`` (why not, or empty) and ``module`` (the patched file)."""
    if _C is None or not hasattr(_C, "blas_status"):
        return {"installed": False, "symbols": {}, "module": "",
                "reason": _unavailable_reason or f"extension not built ({IMPORT_ERROR})"}
    s = _C.blas_status()
    if not s["installed"] and _unavailable_reason and not s["reason"]:
        s["reason"] = _unavailable_reason
    return s


def describe() -> str:
    """One line for ``explain()`` / ``info()``."""
    s = status()
    if s["installed"]:
        names = ", ".join(f"{k} ({v['int_bits']}-bit ints, {'/'.join(v['relocations'])})"
                          for k, v in s["symbols"].items() if v["installed"])
        return f"BLAS call-site hook installed: {names}"
    return f"BLAS call-site hook not installed: {s['reason'] or 'no scope enabled yet'}"


def counters() -> dict:
    """C-side counts of the BLAS hook (made only while some scope is active)."""
    if _C is None or not hasattr(_C, "blas_counters"):
        return {"below_floor": 0, "not_routable_shape": 0, "inside_router": 0,
                "python_calls": 0, "routed": 0, "errors": 0}
    return _C.blas_counters()


def reset_counters() -> None:
    """Zero :func:`counters`."""
    if _C is not None and hasattr(_C, "blas_reset_counters"):
        _C.blas_reset_counters()


def _scope_config():
    if _native.SUSPENDED.get():
        return None  # the backend's own native products
    node = _config.current()
    return node.config if node.enabled else None


def _route_gemm(a, b, c, alpha, beta):
    """``c = alpha * a @ b + beta * c`` routed; called by the C hook (GIL taken).

    ``a`` (m, k) and ``b`` (k, n) are read-only views, ``c`` (m, n) a writable view of
    the BLAS operands, valid only during this call. Returns True when ``c`` holds the
    result, 2 when it does and an element overflowed (the C side raises the overflow
    flag, which NumPy reports as its own), False to run the original BLAS.
    """
    try:
        cfg = _scope_config()
        if cfg is None:
            return False
        overflowed = []
        res = route.routed(cfg, a, b, ENTRY_GEMM, alpha=alpha, beta=beta,
                           c=c if beta != 0 else None, out=c, overflowed=overflowed)
        if res is route.NOT_ROUTED:
            return False
        return 2 if overflowed else True
    except Exception as exc:
        a = b = c = None  # noqa: F841  (views of BLAS buffers: keep none alive)
        traceback.clear_frames(exc.__traceback__)
        fallback(ENTRY_GEMM, exc)
        return False


def _route_syrk(a, c, alpha, beta, upper):
    """The ``upper`` (else lower) triangle of ``c = alpha * a @ a.T + beta * c``, routed.

    The product is computed as ``a @ a.T`` over views of one buffer (``b`` is literally
    the transposed view of ``a``), so that a symmetric-product path recognises it.
    Only the requested triangle of ``c`` is written, as ``dsyrk`` does; NumPy mirrors
    it afterwards. Returns as :func:`_route_gemm`.
    """
    try:
        cfg = _scope_config()
        if cfg is None:
            return False
        overflowed = []
        res = route.routed(cfg, a, a.T, ENTRY_SYRK, alpha=alpha, beta=beta,
                           c=c if beta != 0 else None, overflowed=overflowed)
        if res is route.NOT_ROUTED:
            return False
        n = c.shape[0]
        mask = np.tri(n, dtype=bool)
        np.copyto(c, res, where=mask.T if upper else mask)
        return 2 if overflowed else True
    except Exception as exc:
        a = c = None  # noqa: F841
        traceback.clear_frames(exc.__traceback__)
        fallback(ENTRY_SYRK, exc)
        return False
