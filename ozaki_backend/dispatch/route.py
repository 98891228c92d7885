"""The one routing helper: what every entry point does with a product it may route.

Shared by the loop hook (``loophook``), the module-level wrappers (``numpy_wrappers``,
``scipy_blas``) and the per-array opt-in (``wrap``). Above ``routing`` (the decision)
and ``config`` (the calling context's scope), below every module that intercepts. For
one product it

1. asks :func:`routing.decide` (shape, engine, size),
2. computes a routed one with ``ozaki_backend._api.product`` with interception
   suspended (the engine's own native products are never routed back), counts it per
   entry point, and turns any exception into a counted, logged fallback: the caller
   then computes the product natively,
3. turns a product the engine declined (an operand holds NaN or infinity) into a
   native one: the caller runs the original function, so the result is exactly
   NumPy's. There is no host pass over the operands here: the CUDA engine finds
   NaN/Inf on the device in its scaling pass, the CPU engine checks on the host itself,
4. keeps the final decision in ``routing.recent`` (for ``explain()``) and counts a
   native one under its reason.

The operands are handed on as they come (C- or Fortran-ordered, transposed or strided
views, never copied here), and ``out`` is written once, by the engine, when it does not
overlap the operands (``_api.product`` decides).

Entry points signal "not routed: call the original" by returning :data:`NOT_ROUTED`.
The module-level wrappers are made by :func:`make_wrapper`: outside a scope (nothing
enabled anywhere) a wrapper checks one module flag and calls the original with the
original arguments; inside one, any exception in its implementation is counted as a
fallback and the original runs.
"""

from __future__ import annotations

import functools
import math
import threading
import traceback

import numpy as np

from .. import _api, _native, _stats, _warnings, semantics
from . import config as _config
from . import routing
from .log import count_entry, decision, fallback

try:
    # The C extension itself (a leaf): this thread's "inside the router" flag, which
    # makes the BLAS call-site hook and the loop hook let a call through untouched.
    from ._loophook import blas_set_inside as _set_inside
except ImportError:  # not built (or built before the BLAS hook): nothing to suppress
    _set_inside = None
try:
    # The wrappers' fast path in C (see make_wrapper).
    from . import _loophook as _C
    _FastWrapper = _C.FastWrapper
except (ImportError, AttributeError):  # not built, or built before it existed
    _C = _FastWrapper = None

#: Entry point -> the argument convention the C fast path reads for it (the
#: extension's FW_* constants); entry points not named only get its idle check.
FAST_KINDS = {"np.dot": "FW_DOT", "ndarray.dot": "FW_DOT", "np.inner": "FW_INNER",
              "np.tensordot": "FW_TENSORDOT", "np.einsum": "FW_EINSUM",
              "scipy dgemm": "FW_GEMM", "scipy zgemm": "FW_GEMM"}

#: Per thread: whether a decision about the current call was recorded in Python, so
#: that the original function, if it runs, must not have the same product decided (and
#: counted) again by the BLAS call-site hook.
_decided = threading.local()

#: Returned by the routing helpers and the wrappers' implementations when the call is
#: not routed and the original function must run with the original arguments.
NOT_ROUTED = object()

#: The reason a routed decision becomes native when an operand holds NaN or infinity.
NON_FINITE = "non-finite operand"

F64 = np.dtype(np.float64)
C128 = np.dtype(np.complex128)


def scope_config():
    """The config to route with in the calling context, or None.

    Returns
    -------
    Config or None
        None when nothing is enabled anywhere, interception is suspended (the
        backend's own products) or the calling context is not enabled.
    """
    if not _config.ANY_ACTIVE or _native.SUSPENDED.get():
        return None
    node = _config.current()
    return node.config if node.enabled else None


def native(reason: str, entry: str):
    """Record a native decision made before the shape check (kept for ``explain()``).

    Returns
    -------
    NOT_ROUTED
    """
    _decided.flag = True
    _stats.record("native", reason)
    d = routing.Decision(False, reason, entry=entry)
    routing.recent.append(d)
    decision(d)
    return NOT_ROUTED


def call_decided(original, *args, **kwargs):
    """``original(*args, **kwargs)`` for a product already decided (and counted) here:
    NumPy's BLAS calls it makes in this thread are not routed or counted again."""
    if _set_inside is None:
        return original(*args, **kwargs)
    prev = _set_inside(True)
    try:
        return original(*args, **kwargs)
    finally:
        _set_inside(prev)


def pair_reason(a, b):
    """None if ``a``, ``b`` are plain ndarrays with a float64 or complex128 product
    (``docs/spec.md`` §11), else the reason."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray:
        return "operand is not a plain numpy.ndarray"
    da, db = a.dtype, b.dtype
    if da == F64 and db == F64:
        return None
    if semantics.product_dtype(da, db) is None:
        return "product is not float64 or complex128"
    return None


def result_dtype(*arrays):
    """The dtype of the emulated product of ``arrays`` (float64 or complex128)."""
    return C128 if any(x.dtype.kind == "c" for x in arrays) else F64


def dims_reason(a, b) -> str:
    """The native reason for operands that are not both at least 2-d."""
    if a.ndim == 0 or b.ndim == 0:
        return "scalar operand"
    if a.ndim == 1 or b.ndim == 1:
        return "matrix-vector shaped (1-d operand): left to BLAS"
    return "not a matrix product (N-d second operand)"


def finite(*xs) -> bool:
    """Whether every element of every array in ``xs`` is finite."""
    return all(np.isfinite(x).all() for x in xs)


def ok_out(out, shape, c_order=True, dtype=F64) -> bool:
    """Whether ``out`` can take a routed ``dtype`` result of ``shape`` (else NumPy
    decides)."""
    return (type(out) is np.ndarray and out.dtype == dtype and out.shape == tuple(shape)
            and out.flags.writeable and (out.flags.c_contiguous or not c_order))


def bind(args, kwargs, names, required):
    """Bind ``args``/``kwargs`` to ``names`` like a Python signature; None on mismatch."""
    if len(args) > len(names):
        return None
    vals = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in vals:
            return None
        vals[k] = v
    if any(n not in vals for n in names[:required]):
        return None
    return [vals.get(n) for n in names]


def routed(cfg, a, b, entry, *, alpha=1.0, beta=0.0, c=None, out=None, fp_name="dot",
           overflowed=None):
    """``alpha * (a @ b) + beta * c`` through the backend, or :data:`NOT_ROUTED`.

    Parameters
    ----------
    cfg : Config
        The configuration to decide and compute with.
    a, b : numpy.ndarray
        ``(..., m, k)`` and ``(..., k, n)`` float64 operands; stacks broadcast.
    entry : str
        The entry point, for the decision, the counts and the log.
    alpha, beta, c
        BLAS scaling (``c`` is checked for non-finite values only when ``beta != 0``).
    out : numpy.ndarray, optional
        Receives the result: written directly by the engine when it is C- or
        Fortran-contiguous and overlaps neither operand, else with one copy after the
        product is complete (it may alias ``a`` or ``b``: the loop hook's buffer).
    fp_name, overflowed
        How an overflow of the result is reported (:func:`ozaki_backend._api.product`):
        under NumPy's name for the entry point (``"dot"`` for the dot family), not at
        all (None: ``einsum`` and SciPy's ``dgemm`` report none natively), or through
        the list ``overflowed`` (the loop hook raises NumPy's own flag).

    Returns
    -------
    numpy.ndarray or NOT_ROUTED
        The result (``out`` when given), or :data:`NOT_ROUTED` when the decision is
        native, the engine declined (NaN/Inf in an operand) or the routed path failed
        (counted as a fallback and logged).
    """
    _decided.flag = True
    m, k = a.shape[-2:]
    n = b.shape[-1]
    # (2-D operands, the common case, skip NumPy's broadcast_shapes: microseconds a call)
    # (the loop hook's (N, m, k) @ (N, k, n) views too)
    if a.ndim == 2 and b.ndim == 2:
        batch = 1
    elif a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
        batch = a.shape[0]
    else:
        batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    d = routing.decide(cfg, m, n, k, batch, entry)
    if d.routed and c is not None and beta != 0 and not finite(c):
        # C is read on the host (alpha/beta are applied there); BLAS's NaN/Inf rules
        # for it are the caller's own.
        d = d.replace(routed=False, reason=NON_FINITE)
    decision(d)
    if not d.routed:
        routing.recent.append(d)
        _stats.record("native", d.reason)
        return NOT_ROUTED
    flag = [] if overflowed is None else overflowed
    _stats.begin_product()
    try:
        # intercepted(): a certificate miss computed natively inside is logged and
        # counted, not warned (``_warnings``: nothing the user's code can change).
        with _native.suspended(), _config.uncounted(), _warnings.intercepted():
            # `out` is written straight by the engine when it overlaps no operand, else
            # through one copy of a fresh result (the loop hook's `out` may alias a, b).
            res = _api.product(a, b, dict(cfg.opts, engine=d.engine), out=out,
                               alpha=alpha, beta=beta, c=c, fp_name=fp_name,
                               overflowed=flag, declined=_api.DECLINED)
    except Warning as exc:
        # A warning the user's filters raise as an error (-W error): theirs to see.
        a = b = c = out = None  # noqa: F841
        traceback.clear_frames(exc.__traceback__)
        routing.recent.append(d)
        raise
    except Exception as exc:
        # The operands may be views of NumPy's loop buffers (the loop hook), freed when
        # the loop returns: the traceback that a log record keeps must not leave them
        # reachable, neither in this frame nor in the engine's.
        a = b = c = out = None  # noqa: F841
        traceback.clear_frames(exc.__traceback__)
        routing.recent.append(d)
        fallback(entry, exc)
        return NOT_ROUTED
    if res is _api.DECLINED:
        # NaN or infinity in an operand, found by the engine (counted there under
        # NON_FINITE): the caller's original function gives NumPy's own answer.
        routing.recent.append(d.replace(routed=False, reason=NON_FINITE, engine=None))
        return NOT_ROUTED
    routing.recent.append(d)
    count_entry(entry)
    if flag and overflowed is None and fp_name:
        # Reported by the entry point once its result is complete (report_pending), so
        # that a FloatingPointError reaches the caller instead of counting as a fallback.
        _pending.name = fp_name
    return res


_pending = threading.local()


def report_pending() -> None:
    """Report an overflow of the routed product just returned, as NumPy reports its own
    (``np.errstate``: raise, warn, ...); nothing when there was none."""
    name = getattr(_pending, "name", None)
    if name is not None:
        _pending.name = None
        semantics.report_overflow(name)


def make_wrapper(original, impl, entry):
    """A function that looks like ``original`` and calls ``impl`` inside a scope.

    Parameters
    ----------
    original : callable
        The function replaced; called with the original arguments whenever ``impl``
        returns :data:`NOT_ROUTED`, raises, or no scope is enabled here.
    impl : callable
        ``impl(cfg, args, kwargs)`` -> result or :data:`NOT_ROUTED`.
    entry : str
        The entry point's name in counts and logs.

    Returns
    -------
    callable
        Carries ``_ozaki_backend_original`` and ``_ozaki_backend_entry``. With the C
        extension built, a ``_loophook.FastWrapper`` around the Python wrapper: it
        calls ``original`` itself, without entering Python, for every product while
        nothing is enabled and for the products no active scope can route
        (matrix-vector shaped, or below the smallest floor; counted in ``stats()``'s
        ``c_fast_path``), so that a declined small product costs tens of nanoseconds.
    """

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if _config.ANY_ACTIVE:
            cfg = scope_config()
            if cfg is not None:
                _pending.name = None
                _decided.flag = False
                try:
                    res = impl(cfg, args, kwargs)
                except Warning:   # raised as an error by the user's warning filters
                    raise
                except Exception as exc:  # a bug here must not cost the user a result
                    fallback(entry, exc)
                    _decided.flag = True
                    res = NOT_ROUTED
                if res is not NOT_ROUTED:
                    report_pending()
                    return res
                if _decided.flag:
                    # Decided here already: count the product once, not again at
                    # NumPy's BLAS call site.
                    return call_decided(original, *args, **kwargs)
        return original(*args, **kwargs)

    impl_attr = getattr(original, "_implementation", None)
    if impl_attr is not None:  # NumPy's dispatcher attribute, used by some libraries
        wrapper._implementation = impl_attr
    wrapper._ozaki_backend_original = original
    wrapper._ozaki_backend_entry = entry
    if _FastWrapper is None:
        return wrapper
    # In front of the Python wrapper, the C fast path: products no active scope can
    # route (matrix-vector shaped, or below every active floor) go straight to
    # `original` without a Python frame, and so does everything while nothing is
    # enabled; the rest reaches `wrapper`. It carries the same attributes.
    fast = _FastWrapper(original, wrapper, getattr(_C, FAST_KINDS.get(entry, "FW_OTHER")))
    fast.__dict__.update(wrapper.__dict__)   # functools.wraps' and ours
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(fast, name, getattr(wrapper, name))
    fast.__wrapped__ = original
    return fast
