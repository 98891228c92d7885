"""Per-array opt-in: :func:`wrap` / :func:`unwrap` and the :class:`OzakiArray` subclass.

For library authors who want emulated products on chosen arrays only, whatever the
scope (also inside ``disabled()``), without touching the process: NumPy's protocols
hand ``@`` / ``np.matmul`` to ``__array_ufunc__`` and ``np.dot``, ``np.inner``,
``np.tensordot``, ``np.einsum``, ``np.linalg.multi_dot`` to ``__array_function__``.
Nothing is installed for this; it works without the loop hook or the wrappers.

Limits (NumPy's, not ours): ``ndarray.dot`` (the method) bypasses both protocols;
functions that call ``np.asarray`` drop the subclass (so do SciPy's); arrays created
by other code are plain. Products follow the scope's numerical options (engine,
moduli, ...) with ``min_size=0``: every eligible matrix-matrix product of a wrapped
array is emulated; matrix-vector shapes, non-finite data and non-float64 products
are computed by NumPy.

Above the routing helper (``route``) and the NumPy wrappers' implementations
(``numpy_wrappers``), which it calls for the unwrapped operands with ``min_size=0``.
It installs nothing; only the package's ``__init__`` imports it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import _native
from . import config as _config
from . import numpy_wrappers, route
from .log import fallback
from .route import NOT_ROUTED


class OzakiArray(np.ndarray):
    """A float64 ndarray whose matrix products always go through ozaki_backend.

    Create with :func:`wrap`; get a plain ndarray back with :func:`unwrap`. Results of
    NumPy operations stay ``OzakiArray`` when they are float64 arrays; other results
    (booleans from comparisons, integer arrays, scalars) are returned plain.
    """

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        for x in inputs + (out or ()):
            # Defer to other array types that override ufuncs (e.g. CuPy, pint).
            handler = getattr(type(x), "__array_ufunc__", None)
            if handler is not None and not isinstance(x, np.ndarray):
                return NotImplemented
        plain = tuple(_plain(x) for x in inputs)
        plain_out = tuple(_plain(x) for x in out) if out is not None else None
        if ufunc is np.matmul and method == "__call__" and not kwargs:
            res = _matmul(plain[0], plain[1], None if plain_out is None else plain_out[0])
        else:
            if plain_out is not None:
                kwargs["out"] = plain_out
            res = getattr(ufunc, method)(*plain, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _rewrap(res)

    def __array_function__(self, func, types, args, kwargs):
        impl = _IMPLS.get(func)
        if impl is None:
            return super().__array_function__(func, types, args, kwargs)
        pargs = tuple(_plain_deep(x) for x in args)
        pkw = {k: _plain_deep(v) for k, v in kwargs.items()}
        out = kwargs.get("out")
        cfg = _forced_config(_config.current().config)
        try:
            res = impl(cfg, pargs, pkw)
        except Warning:   # raised as an error by the user's warning filters
            raise
        except Exception as exc:
            fallback(f"wrap: {getattr(func, '__name__', func)}", exc)
            res = NOT_ROUTED
        if res is NOT_ROUTED:
            with _native.suspended():
                res = func(*pargs, **pkw)
        else:
            route.report_pending()
        if out is not None:
            return out
        return _rewrap(res)


def _plain(x):
    return x.view(np.ndarray) if isinstance(x, OzakiArray) else x


def _plain_deep(x):
    if isinstance(x, OzakiArray):
        return x.view(np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain_deep(v) for v in x)
    return x


def _rewrap(res):
    if type(res) is np.ndarray and res.dtype == route.F64:
        return res.view(OzakiArray)
    if isinstance(res, tuple):
        return tuple(_rewrap(r) for r in res)
    return res


@lru_cache(maxsize=64)
def _forced_config(cfg):
    return _config.Config.build(cfg, {"min_size": 0}, "wrap")


def _matmul(a, b, out):
    """``a @ b`` for unwrapped operands: routed when eligible, else NumPy's matmul."""
    cfg = _forced_config(_config.current().config)
    res = NOT_ROUTED
    try:
        if (route.pair_reason(a, b) is None and a.ndim >= 2 and b.ndim >= 2
                and a.shape[-1] == b.shape[-2]):
            shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
            if out is None or route.ok_out(out, shape, c_order=False):
                res = route.routed(cfg, a, b, "wrap: @", fp_name="matmul")
    except ValueError:
        res = NOT_ROUTED  # stacks do not broadcast: NumPy raises below
    except Warning:   # raised as an error by the user's warning filters
        raise
    except Exception as exc:
        fallback("wrap: @", exc)
        res = NOT_ROUTED
    if res is NOT_ROUTED:
        return _native.matmul(a, b, out=out)
    route.report_pending()
    if out is not None:
        out[...] = res
        return out
    return res


def _original(name):
    obj = getattr(np, name) if name != "multi_dot" else np.linalg.multi_dot
    return getattr(obj, "_ozaki_backend_original", obj)


_IMPLS = {
    _original("dot"): numpy_wrappers.route_dot,
    _original("inner"): numpy_wrappers.route_inner,
    _original("tensordot"): numpy_wrappers.route_tensordot,
    _original("einsum"): numpy_wrappers.route_einsum,
    _original("multi_dot"): numpy_wrappers.route_multi_dot,
}


def wrap(x) -> OzakiArray:
    """``x`` as a float64 :class:`OzakiArray` (no copy when it already is float64).

    Its ``@``, ``np.matmul``, ``np.dot``, ``np.inner``, ``np.tensordot``, ``np.einsum``
    and ``np.linalg.multi_dot`` products are emulated whatever the scope (see the
    module docstring for what NumPy's protocols cannot reach).
    """
    return np.asarray(x, dtype=np.float64).view(OzakiArray)


def unwrap(x) -> np.ndarray:
    """A plain ``numpy.ndarray`` view of ``x`` (``np.asarray`` for anything else)."""
    if isinstance(x, OzakiArray):
        return x.view(np.ndarray)
    return np.asarray(x)
