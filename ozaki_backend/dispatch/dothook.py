"""``ndarray.dot`` and NumPy's ``dot`` builtin, routed before NumPy allocates the result.

NumPy's matrix product behind ``ndarray.dot``, ``np.dot``, ``np.cov`` and the products
inside ``tensordot``/``multi_dot`` allocates its result and zero-fills it before calling
BLAS; the BLAS call-site hook (``blashook``) sees the product only after that fill (at
8192, 512 MiB of first-touch page faults on one thread: ``A.dot(B)`` took 176 ms on the
H200's host where ``A @ B`` took 61). The module-level ``np.dot`` wrapper routes before
NumPy runs, but the method of an immutable type and references to NumPy's ``dot`` taken
before installation never reach it. The C side (``_dothook.c``, in the ``_loophook``
extension) points ndarray.dot's method descriptor and the builtin ``dot`` behind
``np.dot`` at trampolines that hand plain-ndarray calls, inside scopes, to a dot wrapper
(``route.make_wrapper``): the method to one counted as ``"ndarray.dot"``, the builtin to
the installed ``np.dot`` wrapper. Everything else — no scope active, other operand
types or arguments, the wrappers' own calls of NumPy's ``dot`` — goes to NumPy's
function at once, with NumPy's results and errors.

Installed by ``patches.install`` after the wrappers, removed by ``patches.restore``.
Same layer as ``blashook``: above ``route``, below ``patches``.
"""

from __future__ import annotations

import numpy as np

try:
    from . import _loophook as _C
except ImportError:  # the extension was not built: the BLAS hook covers these calls
    _C = None

_reasons: dict = {}


def _builtin_dot():
    """NumPy's C ``dot`` (the function ``np.dot``'s dispatcher calls), or None."""
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as mu
    return getattr(mu, "dot", None)


def install(method_router, builtin_router) -> bool:
    """Route ``ndarray.dot`` through ``method_router`` and NumPy's ``dot`` builtin
    through ``builtin_router`` inside scopes (idempotent: later calls replace the
    routers). False where it cannot be done (:func:`status` says why)."""
    if _C is None or not hasattr(_C, "dot_install"):
        _reasons["all"] = "the _loophook extension is not built with the dot hook"
        return False
    _reasons.clear()
    targets = (
        (_C.DOT_METHOD, "ndarray.dot", np.ndarray.__dict__.get("dot"), method_router),
        (_C.DOT_BUILTIN, "dot builtin", _builtin_dot(), builtin_router))
    ok = True
    for which, name, owner, router in targets:
        why = (f"numpy has no {name}" if owner is None else
               _C.dot_install(which, owner, router))
        if why is not None:
            _reasons[name] = why
            ok = False
    return ok


def remove() -> None:
    """Put NumPy's own ``ndarray.dot`` and ``dot`` back (a no-op where not installed)."""
    if _C is not None and hasattr(_C, "dot_remove"):
        _C.dot_remove(_C.DOT_METHOD)
        _C.dot_remove(_C.DOT_BUILTIN)


def installed() -> dict:
    """``{"ndarray.dot": bool, "dot builtin": bool}``: which trampolines are in place."""
    if _C is None or not hasattr(_C, "dot_installed"):
        return {"ndarray.dot": False, "dot builtin": False}
    return {"ndarray.dot": bool(_C.dot_installed(_C.DOT_METHOD)),
            "dot builtin": bool(_C.dot_installed(_C.DOT_BUILTIN))}


def status() -> str:
    """One line: what is hooked, or why not."""
    got = installed()
    if all(got.values()):
        return "ndarray.dot and numpy's dot builtin routed before NumPy allocates"
    if _reasons:
        return "; ".join(f"{k}: {v}" for k, v in _reasons.items())
    return "not installed"


def counters() -> dict:
    """Calls the trampolines handed to a router and left to NumPy while a scope was
    active anywhere (all threads)."""
    if _C is None or not hasattr(_C, "dot_counters"):
        return {"handed_to_router": 0, "left_to_numpy": 0}
    return dict(_C.dot_counters())
