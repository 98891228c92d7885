"""``A @ B`` and ``np.matmul`` on plain float64 ndarrays: the C inner-loop hook.

The C extension ``_loophook`` replaces NumPy matmul's ``dd->d`` inner loop through the
public ``PyUFunc_ReplaceLoopBySignature`` (once per process, never undone; see the
comment at the top of ``_loophook.c``). Everything that reaches that loop arrives
here: 2-D, stacked and broadcast operands, strided / negative-stride / transposed
views, ``out=`` (also aliasing an input), and float32 x float64 (NumPy casts to
float64 before the loop). The complex128 (``DD->D``) loop is replaced the same way and
arrives here too (complex products, ``docs/spec.md`` §11). float32, complex64, integer
and object products use other loops and are never seen.

The C side stays in C (no GIL) when no scope is active anywhere, for matrix-vector
shapes, and below the smallest floor of the active scopes; ``config`` publishes those
two integers to the extension directly. Otherwise it calls :func:`_route` with 3-D
views over the loop's buffers, once per loop invocation (one ufunc call can invoke the
loop several times). ``_route`` returns True after writing the product into ``out``
(through the routing helper ``route``, like every other entry point); False makes the
C side run NumPy's original loop. Nothing raised here reaches NumPy: exceptions become
a counted fallback to the original loop, except a warning that the user's filters
raise as an error (``-W error``), which NumPy raises after its loop.

Same layer as ``numpy_wrappers``: above ``route`` and ``config``, below ``patches``
(which installs it) and ``observe`` (which reads its counters).
"""

from __future__ import annotations

import traceback

from .. import _native
from . import config as _config
from . import route
from .costmodel import NEVER
from .log import fallback, logger

ENTRY = "@/np.matmul"

try:
    from . import _loophook as _C
except ImportError as exc:  # the extension was not built: `@` cannot be intercepted
    _C = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None


def available() -> bool:
    """Whether the C extension is importable (``@`` can be intercepted)."""
    return _C is not None


def extension_path():
    """The C extension's file, or None when it is not built."""
    return getattr(_C, "__file__", None)


def installed() -> bool:
    """Whether matmul's float64 loop has been replaced in this process."""
    return _C is not None and _C.installed()


def installed_complex() -> bool:
    """Whether matmul's complex128 (``DD->D``) loop has been replaced too (complex
    products, ``docs/spec.md`` §11)."""
    return _C is not None and hasattr(_C, "installed_complex") and _C.installed_complex()


def install() -> bool:
    """Replace matmul's float64 loop (once; later calls do nothing). False if unavailable."""
    if _C is None:
        logger().warning("the _loophook extension is not built (%s); `@` and "
                         "np.matmul are not intercepted", IMPORT_ERROR)
        return False
    _C.install(_route)
    return True


def state() -> tuple[int, int]:
    """``(active scopes, floor)`` as the C side sees them."""
    return _C.state() if _C is not None else (0, NEVER)


def counters() -> dict:
    """C-side counts (products skipped in C, Python calls, cleared errors)."""
    if _C is None:
        return {"below_floor": 0, "vector_shaped": 0, "python_calls": 0, "errors": 0}
    return _C.counters()


def wrapper_counters() -> dict:
    """Products the wrappers' C fast path (``route.make_wrapper``) left to NumPy
    without calling Python: ``below_floor``, ``vector_shaped``."""
    if _C is None or not hasattr(_C, "wrapper_counters"):
        return {"below_floor": 0, "vector_shaped": 0}
    return _C.wrapper_counters()


def reset_counters() -> None:
    """Zero the C-side counts of :func:`counters` and :func:`wrapper_counters`."""
    if _C is not None:
        _C.reset_counters()


def _route(a, b, out):
    """Called by the C hook with ``a`` (N, m, k), ``b`` (N, k, n), ``out`` (N, m, n).

    The arrays are views over NumPy's loop buffers, valid only during this call: keep
    no reference to them. Returns True when ``out`` holds the routed product, 2 when it
    does and an element overflowed (finite operands), False to run NumPy's loop.
    """
    try:
        if _native.SUSPENDED.get():
            return False  # the backend's own native products (and recursion)
        node = _config.current()
        if not node.enabled:
            return False
        # Keep no reference to the scope node in this frame: a traceback kept by a
        # log record would keep the node, and with it the C hook's activity, alive.
        cfg, node = node.config, None
        overflowed = []
        if route.routed(cfg, a, b, ENTRY, out=out, overflowed=overflowed) is route.NOT_ROUTED:
            return False
        # 2: the C side raises the overflow flag, which NumPy reports as its own loop's.
        return 2 if overflowed else True
    except Warning as exc:
        # Raised as an error by the user's warning filters (-W error): the C side keeps
        # it set, and NumPy raises it after its own loop computed the product.
        a = b = out = None  # noqa: F841
        traceback.clear_frames(exc.__traceback__)
        raise
    except Exception as exc:  # fall back to NumPy's loop, never raise into NumPy
        # a, b, out (and views of them in deeper frames) point into NumPy's loop
        # buffers, freed when the loop returns: the traceback that a log record keeps
        # must not leave them reachable.
        a = b = out = None  # noqa: F841
        traceback.clear_frames(exc.__traceback__)
        fallback(ENTRY, exc)
        return False
