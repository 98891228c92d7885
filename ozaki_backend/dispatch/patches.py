"""Module-level wrappers: ``np.dot``, ``np.inner``, ``np.tensordot``, ``np.einsum``,
``np.linalg.multi_dot``, ``scipy.linalg.blas.dgemm`` and ``get_blas_funcs("gemm")``.

These functions never reach matmul's inner loop (they call BLAS directly, or, for
``einsum`` without ``optimize``, no BLAS at all), so they are intercepted by rebinding
the module attributes to wrappers. Rules every wrapper follows:

* Outside a scope (nothing enabled anywhere) a wrapper checks one module flag and
  calls the original with the original arguments.
* Inside a scope it routes only what it fully understands: plain ``numpy.ndarray``
  operands whose product is float64, a matrix-matrix core, finite data, options left at
  their defaults. Everything else (other dtypes, complex, object arrays, subclasses,
  CuPy and other array types, unusual arguments, bad input) goes to the original
  function with the original arguments, so results and exceptions are exactly
  NumPy's / SciPy's.
* A routed result has NumPy's shape, dtype and memory order (C order for ``dot``,
  ``inner``, ``tensordot``, ``multi_dot``; ``einsum``'s ``order='K'`` layout;
  Fortran order for ``dgemm``, as SciPy returns), and ``out=`` is honoured.
* Any exception in the routed path is counted as a fallback and the original runs.

Not reachable this way (pinned by tests, listed in ``docs/intercepted.md``): the
``ndarray.dot`` method (the type is immutable), names bound before installation
(``from numpy import dot`` earlier), and NumPy/SciPy internals that hold their own
reference (``np.cov``, the ``dot`` inside ``tensordot``, LAPACK's own GEMMs).
"""

from __future__ import annotations

import functools
import math
import sys
import threading

import numpy as np

from .. import _api, _native, _stats
from . import config as _config
from . import routing
from .observe import count_entry, fallback, logger

_NOT = object()  # "not routed: call the original"
_F64 = np.dtype(np.float64)

_lock = threading.RLock()
_originals: dict = {}     # (module name, attribute) -> original object
_wrappers: dict = {}      # (module name, attribute) -> wrapper installed


# --------------------------------------------------------------------------- helpers
def _scope_config():
    """The config to route with in the calling context, or None."""
    if not _config.ANY_ACTIVE or _native.SUSPENDED.get():
        return None
    node = _config.current()
    return node.config if node.enabled else None


def _native_reason(reason: str, entry: str):
    """Record a native decision made before the shape check (kept for ``explain()``)."""
    _stats.record("native", reason)
    routing.recent.append(routing.Decision(False, reason, entry=entry))
    return _NOT


def _pair_reason(a, b):
    """None if ``a``, ``b`` are plain ndarrays with a float64 product, else the reason."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray:
        return "operand is not a plain numpy.ndarray"
    da, db = a.dtype, b.dtype
    if da == _F64 and db == _F64:
        return None
    if da.kind not in "fiub" or db.kind not in "fiub" or np.promote_types(da, db) != _F64:
        return "product is not float64"
    return None


def _dims_reason(a, b) -> str:
    if a.ndim == 0 or b.ndim == 0:
        return "scalar operand"
    if a.ndim == 1 or b.ndim == 1:
        return "matrix-vector shaped (1-d operand): left to BLAS"
    return "not a matrix product (N-d second operand)"


def _finite(*xs) -> bool:
    return all(np.isfinite(x).all() for x in xs)


def _routed(cfg, a, b, entry, *, alpha=1.0, beta=0.0, c=None):
    """The routed product of ``a`` (..., m, k) and ``b`` (..., k, n), or ``_NOT``."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    d = routing.decide(cfg, m, n, k, batch, entry)
    routing.recent.append(d)
    if not d.routed:
        _stats.record("native", d.reason)
        return _NOT
    if not _finite(a, b) or (c is not None and beta != 0 and not _finite(c)):
        d.routed, d.reason = False, "non-finite operand"
        _stats.record("native", d.reason)
        return _NOT
    try:
        with _native.suspended():
            res = _api.product(a, b, dict(cfg.opts, engine=d.engine), alpha=alpha,
                                 beta=beta, c=c)
    except Exception as exc:
        fallback(entry, exc)
        return _NOT
    count_entry(entry)
    return res


def _bind(args, kwargs, names, required):
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


def _ok_out(out, shape, c_order=True):
    return (type(out) is np.ndarray and out.dtype == _F64 and out.shape == tuple(shape)
            and out.flags.writeable and (out.flags.c_contiguous or not c_order))


def _make_wrapper(original, impl, entry):
    """A function that looks like ``original`` and calls ``impl`` inside a scope."""

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if _config.ANY_ACTIVE:
            cfg = _scope_config()
            if cfg is not None:
                try:
                    res = impl(cfg, args, kwargs)
                except Exception as exc:  # a bug here must not cost the user a result
                    fallback(entry, exc)
                    res = _NOT
                if res is not _NOT:
                    return res
        return original(*args, **kwargs)

    impl_attr = getattr(original, "_implementation", None)
    if impl_attr is not None:  # NumPy's dispatcher attribute, used by some libraries
        wrapper._implementation = impl_attr
    wrapper._ozaki_backend_original = original
    wrapper._ozaki_backend_entry = entry
    return wrapper


# --------------------------------------------------------------------------- numpy
def _dot(cfg, args, kwargs):
    bound = _bind(args, kwargs, ("a", "b", "out"), 2)
    if bound is None:
        return _NOT
    a, b, out = bound
    why = _pair_reason(a, b)
    if why:
        return _native_reason(why, "np.dot")
    if a.ndim < 2 or b.ndim != 2:
        return _native_reason(_dims_reason(a, b), "np.dot")
    k = a.shape[-1]
    if b.shape[0] != k:
        return _NOT  # NumPy raises its own error
    shape = a.shape[:-1] + (b.shape[1],)
    if out is not None and not _ok_out(out, shape):
        return _NOT
    # Explicit row count: reshape(-1, 0) is ambiguous and raises for k == 0.
    res = _routed(cfg, a.reshape(math.prod(a.shape[:-1]), k), b, "np.dot")
    if res is _NOT:
        return _NOT
    res = res.reshape(shape)
    if out is not None:
        out[...] = res
        return out
    return np.ascontiguousarray(res)


def _inner(cfg, args, kwargs):
    bound = _bind(args, kwargs, ("a", "b"), 2) if not kwargs else None
    if bound is None:
        return _NOT
    a, b = bound
    why = _pair_reason(a, b)
    if why:
        return _native_reason(why, "np.inner")
    if a.ndim < 2 or b.ndim < 2:
        return _native_reason(_dims_reason(a, b), "np.inner")
    k = a.shape[-1]
    if b.shape[-1] != k:
        return _NOT
    res = _routed(cfg, a.reshape(math.prod(a.shape[:-1]), k),
                  b.reshape(math.prod(b.shape[:-1]), k).T, "np.inner")
    if res is _NOT:
        return _NOT
    return np.ascontiguousarray(res.reshape(a.shape[:-1] + b.shape[:-1]))


def _tensordot(cfg, args, kwargs):
    bound = _bind(args, kwargs, ("a", "b", "axes"), 2)
    if bound is None:
        return _NOT
    a, b, axes = bound
    if axes is None and len(args) < 3 and "axes" not in kwargs:
        axes = 2
    why = _pair_reason(a, b)
    if why:
        return _native_reason(why, "np.tensordot")
    # NumPy's own axes normalisation (numpy/_core/numeric.py); any doubt -> original.
    try:
        try:
            iter(axes)
        except Exception:
            axes_a, axes_b = list(range(-axes, 0)), list(range(axes))
        else:
            axes_a, axes_b = axes
        axes_a = list(axes_a) if hasattr(axes_a, "__len__") else [axes_a]
        axes_b = list(axes_b) if hasattr(axes_b, "__len__") else [axes_b]
        if len(axes_a) != len(axes_b) or len(set(axes_a)) != len(axes_a) \
                or len(set(axes_b)) != len(axes_b):
            return _NOT
        axes_a = [int(x) + (a.ndim if int(x) < 0 else 0) for x in axes_a]
        axes_b = [int(x) + (b.ndim if int(x) < 0 else 0) for x in axes_b]
        if any(not 0 <= x < a.ndim for x in axes_a) or any(not 0 <= x < b.ndim for x in axes_b):
            return _NOT
        if any(a.shape[i] != b.shape[j] for i, j in zip(axes_a, axes_b)):
            return _NOT
    except Exception:
        return _NOT
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [j for j in range(b.ndim) if j not in axes_b]
    K = math.prod(a.shape[i] for i in axes_a)
    at = a.transpose(free_a + axes_a).reshape(math.prod(a.shape[i] for i in free_a), K)
    bt = b.transpose(axes_b + free_b).reshape(K, math.prod(b.shape[j] for j in free_b))
    res = _routed(cfg, at, bt, "np.tensordot")
    if res is _NOT:
        return _NOT
    return np.ascontiguousarray(res.reshape([a.shape[i] for i in free_a]
                                            + [b.shape[j] for j in free_b]))


def _chain_order(dims):
    """Optimal multiplication order (NumPy's ``_multi_dot_matrix_chain_order``)."""
    n = len(dims) - 1
    cost = [[0.0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                q = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if q < cost[i][j]:
                    cost[i][j] = q
                    split[i][j] = k
    return split


def _multi_dot(cfg, args, kwargs):
    bound = _bind(args, kwargs, ("arrays", "out"), 1)
    if bound is None or (len(args) > 1):  # out is keyword-only in NumPy
        return _NOT
    arrays, out = bound
    try:
        arrays = list(arrays)
    except TypeError:
        return _NOT
    if len(arrays) < 2:
        return _NOT
    if any(type(x) is not np.ndarray for x in arrays):
        return _native_reason("operand is not a plain numpy.ndarray", "np.linalg.multi_dot")
    if any(x.dtype != _F64 for x in arrays):
        return _native_reason("product is not float64", "np.linalg.multi_dot")
    if len(arrays) == 2:
        return _dot(cfg, (arrays[0], arrays[1]), {"out": out})
    nd_first, nd_last = arrays[0].ndim, arrays[-1].ndim
    if nd_first == 1:
        arrays[0] = arrays[0][np.newaxis, :]
    if nd_last == 1:
        arrays[-1] = arrays[-1][:, np.newaxis]
    if any(x.ndim != 2 for x in arrays):
        return _NOT
    if any(x.shape[1] != y.shape[0] for x, y in zip(arrays, arrays[1:])):
        return _NOT
    final_shape = (arrays[0].shape[0], arrays[-1].shape[1])
    if out is not None and not _ok_out(out, final_shape):
        return _NOT

    def prod(x, y):
        r = _routed(cfg, x, y, "np.linalg.multi_dot")
        return _originals[("numpy", "dot")](x, y) if r is _NOT else r

    n = len(arrays)
    if n == 3:  # NumPy's _multi_dot_three rule
        A, B, C = arrays
        cost1 = A.shape[0] * C.shape[0] * (A.shape[1] + C.shape[1])
        cost2 = A.shape[1] * C.shape[1] * (A.shape[0] + C.shape[0])
        res = prod(prod(A, B), C) if cost1 < cost2 else prod(A, prod(B, C))
    else:
        split = _chain_order([x.shape[0] for x in arrays] + [arrays[-1].shape[1]])

        def rec(i, j):
            if i == j:
                return arrays[i]
            return prod(rec(i, split[i][j]), rec(split[i][j] + 1, j))

        res = rec(0, n - 1)
    res = np.ascontiguousarray(res)
    if out is not None:
        out[...] = res
        res = out
    if nd_first == 1 and nd_last == 1:
        return res[0, 0]
    if nd_first == 1 or nd_last == 1:
        return res.ravel()
    return res


_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _einsum(cfg, args, kwargs):
    if len(args) != 3 or not isinstance(args[0], str):
        return _NOT
    subs, a, b = args
    out = kwargs.get("out")
    for key, val in kwargs.items():
        # Only NumPy's defaults are routed; optimize=... computes through np.matmul,
        # i.e. the loop hook, and dtype/order/casting change the result's rules.
        if not ((key == "out") or (key == "optimize" and val is False)
                or (key == "dtype" and val is None) or (key == "order" and val == "K")
                or (key == "casting" and val == "safe")):
            return _NOT
    why = _pair_reason(a, b)
    if why:
        return _native_reason(why, "np.einsum")
    spec = subs.replace(" ", "")
    if "->" in spec:
        ins, outs = spec.split("->", 1)
    else:
        ins, outs = spec, None
    parts = ins.split(",")
    if len(parts) != 2:
        return _NOT
    sa, sb = parts
    if not set(sa + sb + (outs or "")) <= _LETTERS:
        return _NOT  # ellipsis or invalid: NumPy decides
    if len(set(sa)) != len(sa) or len(set(sb)) != len(sb) or len(sa) != a.ndim \
            or len(sb) != b.ndim:
        return _NOT
    if outs is None:
        counts = {c: (sa + sb).count(c) for c in set(sa + sb)}
        outs = "".join(sorted(c for c, v in counts.items() if v == 1))
    if len(set(outs)) != len(outs) or not set(outs) <= set(sa + sb):
        return _NOT
    size = {}
    for s, x in ((sa, a), (sb, b)):
        for c, d in zip(s, x.shape):
            if size.setdefault(c, d) != d:
                return _NOT  # size-1 broadcasting: leave to NumPy
    batch = [c for c in outs if c in sa and c in sb]
    free_a = [c for c in outs if c in sa and c not in sb]
    free_b = [c for c in outs if c in sb and c not in sa]
    contr = [c for c in sa if c in sb and c not in outs]
    if any(c not in outs and c not in contr for c in sa + sb) or not contr:
        return _native_reason("not a matrix product (einsum subscripts)", "np.einsum")
    shape = [size[c] for c in outs]
    if out is not None and not _ok_out(out, shape, c_order=False):
        return _NOT
    nb, ni, nj, nk = (math.prod(size[c] for c in g) for g in (batch, free_a, free_b, contr))
    at = a.transpose([sa.index(c) for c in batch + free_a + contr]).reshape(nb, ni, nk)
    bt = b.transpose([sb.index(c) for c in batch + contr + free_b]).reshape(nb, nk, nj)
    res = _routed(cfg, at, bt, "np.einsum")
    if res is _NOT:
        return _NOT
    res = res.reshape([size[c] for c in batch + free_a + free_b])
    order = batch + free_a + free_b
    res = res.transpose([order.index(c) for c in outs])
    if out is None:
        out = _einsum_output(a, b, sa, sb, outs)
    np.copyto(out, res)
    return out


def _einsum_output(a, b, sa, sb, outs):
    """An empty output laid out as ``np.einsum(..., order='K')`` lays out its own.

    NumPy's einsum allocates its output through an iterator over all labels with
    ``order='K'``; the same iterator built here gives the same memory layout.
    """
    labels = list(outs) + [c for c in dict.fromkeys(sa + sb) if c not in outs]
    it = np.nditer(
        [a, b, None],
        flags=["reduce_ok", "external_loop", "buffered", "delay_bufalloc", "grow_inner",
               "zerosize_ok", "refs_ok"],
        op_flags=[["readonly"], ["readonly"], ["readwrite", "allocate", "no_subtype"]],
        op_axes=[[sa.index(c) if c in sa else -1 for c in labels],
                 [sb.index(c) if c in sb else -1 for c in labels],
                 [outs.index(c) if c in outs else -1 for c in labels]],
        order="K", op_dtypes=[None, None, _F64], casting="safe")
    return it.operands[2]


# --------------------------------------------------------------------------- scipy
_DGEMM_ARGS = ("alpha", "a", "b", "beta", "c", "trans_a", "trans_b", "overwrite_c")


def _real_scalar(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _dgemm(cfg, args, kwargs):
    bound = _bind(args, kwargs, _DGEMM_ARGS, 3)
    if bound is None:
        return _NOT
    alpha, a, b, beta, c, trans_a, trans_b, overwrite_c = bound
    beta = 0.0 if beta is None else beta
    trans_a = 0 if trans_a is None else trans_a
    trans_b = 0 if trans_b is None else trans_b
    overwrite_c = 0 if overwrite_c is None else overwrite_c
    if not (_real_scalar(alpha) and _real_scalar(beta)):
        return _NOT
    for t in (trans_a, trans_b, overwrite_c):
        if not isinstance(t, (int, np.integer)):
            return _NOT
    if trans_a not in (0, 1, 2) or trans_b not in (0, 1, 2):
        return _NOT
    if type(a) is not np.ndarray or type(b) is not np.ndarray or (
            c is not None and type(c) is not np.ndarray):
        return _native_reason("operand is not a plain numpy.ndarray", "scipy dgemm")
    if a.dtype != _F64 or b.dtype != _F64 or (c is not None and c.dtype != _F64):
        return _native_reason("product is not float64", "scipy dgemm")
    if a.ndim != 2 or b.ndim != 2:
        return _NOT
    op_a = a.T if trans_a else a  # 2 (conjugate transpose) is a transpose for reals
    op_b = b.T if trans_b else b
    m, k = op_a.shape
    n = op_b.shape[1]
    if op_b.shape[0] != k or min(m, n, k) < 1:
        return _NOT  # SciPy raises / handles empty products itself
    if c is not None and (c.shape != (m, n) or not c.flags.writeable):
        return _NOT
    alpha, beta = float(alpha), float(beta)
    if alpha == 0.0:
        return _NOT  # BLAS does not read A, B then (NaN in them is ignored)
    use_c = c if (c is not None and beta != 0.0) else None
    res = _routed(cfg, op_a, op_b, "scipy dgemm", alpha=alpha,
                  beta=beta if use_c is not None else 0.0, c=use_c)
    if res is _NOT:
        return _NOT
    if c is not None and overwrite_c and c.flags.f_contiguous:
        c[...] = res  # SciPy computes in place and returns c itself
        return c
    return np.asfortranarray(res)


# --------------------------------------------------------------------------- install
_NUMPY_TARGETS = (
    ("numpy", "dot", _dot, "np.dot"),
    ("numpy", "inner", _inner, "np.inner"),
    ("numpy", "tensordot", _tensordot, "np.tensordot"),
    ("numpy", "einsum", _einsum, "np.einsum"),
    ("numpy.linalg", "multi_dot", _multi_dot, "np.linalg.multi_dot"),
)
_SCIPY_MODULE = "scipy.linalg.blas"


def _patch(modname, attr, impl, entry):
    mod = sys.modules[modname]
    key = (modname, attr)
    if key in _wrappers and getattr(mod, attr) is _wrappers[key]:
        return
    original = getattr(mod, attr)
    w = _make_wrapper(original, impl, entry)
    _originals[key] = original
    _wrappers[key] = w
    setattr(mod, attr, w)


def _patch_scipy():
    """Patch ``dgemm`` in ``scipy.linalg.blas`` and ``scipy.linalg._fblas``; clear the memo.

    ``get_blas_funcs`` looks routines up with ``getattr(_fblas, name)`` and memoises
    them in ``get_blas_funcs.memo``; it then sets ``module_name``, ``typecode``,
    ``dtype``, ``int_dtype`` and ``prefix`` on the returned object, which a Python
    function accepts.
    """
    with _lock:
        blas = sys.modules[_SCIPY_MODULE]
        fblas = sys.modules.get("scipy.linalg._fblas") or getattr(blas, "_fblas", None)
        if ("scipy.linalg.blas", "dgemm") in _wrappers and blas.dgemm is _wrappers[
                ("scipy.linalg.blas", "dgemm")]:
            return
        original = blas.dgemm
        w = _make_wrapper(original, _dgemm, "scipy dgemm")
        w.__name__ = w.__qualname__ = "dgemm"
        w.__doc__ = getattr(original, "__doc__", None)
        _originals[(_SCIPY_MODULE, "dgemm")] = original
        _wrappers[(_SCIPY_MODULE, "dgemm")] = w
        blas.dgemm = w
        if fblas is not None and getattr(fblas, "dgemm", None) is original:
            _originals[(fblas.__name__, "dgemm")] = original
            _wrappers[(fblas.__name__, "dgemm")] = w
            fblas.dgemm = w
        memo = getattr(getattr(blas, "get_blas_funcs", None), "memo", None)
        if isinstance(memo, dict):
            memo.clear()


class _PostImportHook:
    """One-shot meta-path finder: patches SciPy right after ``scipy.linalg.blas`` loads."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _SCIPY_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or getattr(finder, "find_spec", None) is None:
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, self)
        return spec


class _PatchingLoader:
    def __init__(self, loader, hook):
        self._loader, self._hook = loader, hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            sys.meta_path.remove(self._hook)
        except ValueError:
            pass
        try:
            _patch_scipy()
        except Exception as exc:  # never break the user's `import scipy.linalg`
            logger().warning("could not patch scipy.linalg.blas.dgemm: %r", exc)

    def __getattr__(self, name):
        return getattr(self._loader, name)


_hook = None


def install():
    """Install all wrappers (idempotent). SciPy now if imported, else on its import."""
    global _hook
    with _lock:
        import numpy.linalg  # noqa: F401  (multi_dot's module)

        for modname, attr, impl, entry in _NUMPY_TARGETS:
            _patch(modname, attr, impl, entry)
        if _SCIPY_MODULE in sys.modules:
            _patch_scipy()
        elif _hook is None:
            _hook = _PostImportHook()
            sys.meta_path.insert(0, _hook)


def restore():
    """Put every original back (``np.dot`` etc. and SciPy's ``dgemm``); clear SciPy's memo.

    The matmul loop hook is not affected (it is never undone). Scopes opened later
    install the wrappers again. Code that took a reference to a wrapper keeps it (it
    stays correct: a wrapper outside a scope is the original).
    """
    global _hook
    with _lock:
        for (modname, attr), w in list(_wrappers.items()):
            mod = sys.modules.get(modname)
            if mod is not None and getattr(mod, attr, None) is w:
                setattr(mod, attr, _originals[(modname, attr)])
        _wrappers.clear()
        if _hook is not None:
            try:
                sys.meta_path.remove(_hook)
            except ValueError:
                pass
            _hook = None
        blas = sys.modules.get(_SCIPY_MODULE)
        memo = getattr(getattr(blas, "get_blas_funcs", None), "memo", None)
        if isinstance(memo, dict):
            memo.clear()
        _config._installed = False  # the next scope re-installs the wrappers


def installed_wrappers() -> list:
    """``module.attr`` names that currently hold a wrapper."""
    with _lock:
        return [f"{m}.{a}" for (m, a), w in _wrappers.items()
                if getattr(sys.modules.get(m), a, None) is w]


def original(name: str):
    """The original object behind a wrapper, e.g. ``original("numpy.dot")``."""
    mod, _, attr = name.rpartition(".")
    return _originals[(mod, attr)]
