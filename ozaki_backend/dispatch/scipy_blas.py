"""SciPy's ``dgemm``: ``scipy.linalg.blas.dgemm`` and ``get_blas_funcs("gemm")``, routed.

``scipy.linalg.blas.dgemm`` calls BLAS directly, so it is intercepted by rebinding the
module attribute (and ``scipy.linalg._fblas.dgemm``, where ``get_blas_funcs`` looks
routines up) to a wrapper; ``patches`` does the rebinding, now when SciPy is already
imported, else from an ``import_watch.ImportWatcher`` right after ``scipy.linalg.blas``
has loaded. This module never imports SciPy itself.

It holds what the wrapper does inside a scope (:func:`route_dgemm`), how the wrapper
is made to pass for SciPy's routine (:func:`dgemm_wrapper`), where SciPy keeps
``dgemm`` (:func:`dgemm_modules`) and the memo to clear (:func:`clear_memo`). Same
layer as ``numpy_wrappers``: above the routing helper (``route``), below ``patches``.
The rules of ``numpy_wrappers`` apply (anything not fully understood goes to SciPy with
the original arguments); a routed result is Fortran-ordered, as SciPy returns it.
"""

from __future__ import annotations

import sys

import numpy as np

from .route import C128, F64, NOT_ROUTED, bind, make_wrapper, native, routed

#: The module whose import the post-import hook waits for.
MODULE = "scipy.linalg.blas"
#: The entry point's name in counts and logs.
ENTRY = "scipy dgemm"
#: The complex128 routine's (``docs/spec.md`` §11).
ENTRY_Z = "scipy zgemm"
#: The routines patched: name -> (operand dtype, entry point).
ROUTINES = {"dgemm": (F64, ENTRY), "zgemm": (C128, ENTRY_Z)}

_DGEMM_ARGS = ("alpha", "a", "b", "beta", "c", "trans_a", "trans_b", "overwrite_c")


def _real_scalar(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _scalar(x, dtype) -> bool:
    """A real scalar (or, for zgemm, a complex one)."""
    return _real_scalar(x) or (dtype == C128 and isinstance(x, (complex, np.complexfloating)))


def route_dgemm(cfg, args, kwargs):
    """``scipy.linalg.blas.dgemm`` routed (see :func:`route_gemm`)."""
    return route_gemm(cfg, args, kwargs, "dgemm")


def route_zgemm(cfg, args, kwargs):
    """``scipy.linalg.blas.zgemm`` routed (see :func:`route_gemm`; ``trans=2`` is the
    conjugate transpose)."""
    return route_gemm(cfg, args, kwargs, "zgemm")


def route_gemm(cfg, args, kwargs, name="dgemm"):
    """``scipy.linalg.blas.dgemm(alpha, a, b, beta=0, c=None, trans_a=0, trans_b=0,
    overwrite_c=0)`` (or ``zgemm``, ``name``) routed.

    Parameters
    ----------
    cfg : Config
        The scope's configuration.
    args, kwargs
        The call's arguments, as the wrapper received them.

    Returns
    -------
    numpy.ndarray or NOT_ROUTED
        A Fortran-ordered result as SciPy returns it (``c`` itself when SciPy would
        compute in place), or ``NOT_ROUTED``: call SciPy's routine.
    """
    dtype, entry = ROUTINES[name]
    bound = bind(args, kwargs, _DGEMM_ARGS, 3)
    if bound is None:
        return NOT_ROUTED
    alpha, a, b, beta, c, trans_a, trans_b, overwrite_c = bound
    beta = 0.0 if beta is None else beta
    trans_a = 0 if trans_a is None else trans_a
    trans_b = 0 if trans_b is None else trans_b
    overwrite_c = 0 if overwrite_c is None else overwrite_c
    if not (_scalar(alpha, dtype) and _scalar(beta, dtype)):
        return NOT_ROUTED
    for t in (trans_a, trans_b, overwrite_c):
        if not isinstance(t, (int, np.integer)):
            return NOT_ROUTED
    if trans_a not in (0, 1, 2) or trans_b not in (0, 1, 2):
        return NOT_ROUTED
    if type(a) is not np.ndarray or type(b) is not np.ndarray or (
            c is not None and type(c) is not np.ndarray):
        return native("operand is not a plain numpy.ndarray", entry)
    if a.dtype != dtype or b.dtype != dtype or (c is not None and c.dtype != dtype):
        return native(f"product is not {dtype}", entry)
    if a.ndim != 2 or b.ndim != 2:
        return NOT_ROUTED
    # 2 (conjugate transpose) is a transpose for reals.
    op_a = (a.T.conj() if trans_a == 2 and dtype == C128 else a.T) if trans_a else a
    op_b = (b.T.conj() if trans_b == 2 and dtype == C128 else b.T) if trans_b else b
    m, k = op_a.shape
    n = op_b.shape[1]
    if op_b.shape[0] != k or min(m, n, k) < 1:
        return NOT_ROUTED  # SciPy raises / handles empty products itself
    if c is not None and (c.shape != (m, n) or not c.flags.writeable):
        return NOT_ROUTED
    conv = complex if dtype == C128 else float
    alpha, beta = conv(alpha), conv(beta)
    if alpha == 0.0:
        return NOT_ROUTED  # BLAS does not read A, B then (NaN in them is ignored)
    use_c = c if (c is not None and beta != 0.0) else None
    in_place = c is not None and bool(overwrite_c) and c.flags.f_contiguous
    # The result is written once, by the engine, straight into its Fortran-ordered
    # destination: c itself when SciPy computes in place and c is not read (beta == 0),
    # else a new Fortran array (never a C result transposed on the host).
    target = c if (in_place and use_c is None) else np.empty((m, n), dtype, order="F")
    res = routed(cfg, op_a, op_b, entry, alpha=alpha,
                 beta=beta if use_c is not None else 0.0, c=use_c, out=target,
                 fp_name=None)
    if res is NOT_ROUTED:
        return NOT_ROUTED
    if in_place and res is not c:
        c[...] = res  # SciPy computes in place and returns c itself
        return c
    return res


def dgemm_wrapper(original, name="dgemm"):
    """The wrapper that replaces SciPy's ``dgemm`` (or ``zgemm``, ``name``) routine
    ``original``.

    ``get_blas_funcs`` sets ``module_name``, ``typecode``, ``dtype``, ``int_dtype`` and
    ``prefix`` on the routine it returns, which a Python function accepts.
    """
    w = make_wrapper(original, lambda cfg, args, kwargs: route_gemm(cfg, args, kwargs, name),
                     ROUTINES[name][1])
    w.__name__ = w.__qualname__ = name
    w.__doc__ = getattr(original, "__doc__", None)
    return w


def dgemm_modules(blas, original, name="dgemm") -> list:
    """The loaded modules that hold ``original`` as ``dgemm`` (or ``name``).

    ``scipy.linalg.blas`` itself, and ``scipy.linalg._fblas`` where
    ``get_blas_funcs`` looks routines up with ``getattr(_fblas, name)``.
    """
    fblas = sys.modules.get("scipy.linalg._fblas") or getattr(blas, "_fblas", None)
    mods = [blas]
    if fblas is not None and getattr(fblas, name, None) is original:
        mods.append(fblas)
    return mods


def clear_memo() -> None:
    """Empty ``get_blas_funcs.memo``, so its next lookup finds the current ``dgemm``."""
    blas = sys.modules.get(MODULE)
    memo = getattr(getattr(blas, "get_blas_funcs", None), "memo", None)
    if isinstance(memo, dict):
        memo.clear()
