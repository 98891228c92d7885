"""NumPy's module-level products: ``np.dot``, ``np.inner``, ``np.tensordot``,
``np.einsum`` and ``np.linalg.multi_dot``, routed.

These functions never reach matmul's inner loop (they call BLAS directly, or, for
``einsum`` without ``optimize``, no BLAS at all), so they are intercepted by rebinding
the module attributes to wrappers (``patches`` does that, with
:func:`route.make_wrapper`). This module holds what a wrapper does inside a scope: one
``route_<name>(cfg, args, kwargs)`` per function, which returns the routed result or
:data:`route.NOT_ROUTED`. ``wrap`` calls the same functions for ``OzakiArray`` operands.
It sits on the routing helper (``route``) and is below ``patches`` and ``wrap``.

Rules every implementation follows:

* It routes only what it fully understands: plain ``numpy.ndarray`` operands whose
  product is float64 or complex128, a matrix-matrix core, options left at their
  defaults (NaN/Inf are found by the engine, which then hands the call back). Everything
  else (other dtypes such as complex64, object arrays, subclasses, CuPy and
  other array types, unusual arguments, bad input) returns ``NOT_ROUTED``, so the
  original function runs with the original arguments and results and exceptions are
  exactly NumPy's.
* A routed result has NumPy's shape, dtype and memory order (C order for ``dot``,
  ``inner``, ``tensordot``, ``multi_dot``; ``einsum``'s ``order='K'`` layout), and
  ``out=`` is honoured.

Not reachable this way: the ``ndarray.dot`` method (the type is immutable), names
bound before installation (``from numpy import dot`` earlier), and NumPy internals
that hold their own reference (``np.cov``, the ``dot`` inside ``tensordot``). Those
reach NumPy's BLAS, where the call-site hook (``blashook``) routes their float64
products where it can be installed (``docs/intercepted.md``).
"""

from __future__ import annotations

import math

import numpy as np

from .route import (C128, F64, NOT_ROUTED, bind, call_decided, dims_reason, native, ok_out,
                    pair_reason, result_dtype, routed)


def _original_dot(x, y):
    """NumPy's own ``np.dot`` (behind the wrapper if installed) for a native sub-product
    (already decided: the BLAS call-site hook lets it through)."""
    dot = np.dot
    return call_decided(getattr(dot, "_ozaki_backend_original", dot), x, y)


def route_dot(cfg, args, kwargs, entry="np.dot"):
    """``np.dot(a, b, out=None)`` routed: N-d ``a`` against a 2-d ``b``.

    Parameters
    ----------
    cfg : Config
        The scope's configuration.
    args, kwargs
        The call's arguments, as the wrapper received them.
    entry : str
        The entry point's name in counts and logs (``"ndarray.dot"`` for the method,
        whose calls the dot hook hands over as ``np.dot(self, b, out)``).

    Returns
    -------
    numpy.ndarray or NOT_ROUTED
        A C-ordered result (``out`` when given), or ``NOT_ROUTED``: call ``np.dot``.
    """
    bound = bind(args, kwargs, ("a", "b", "out"), 2)
    if bound is None:
        return NOT_ROUTED
    a, b, out = bound
    why = pair_reason(a, b)
    if why:
        return native(why, entry)
    if a.ndim < 2 or b.ndim != 2:
        return native(dims_reason(a, b), entry)
    k = a.shape[-1]
    if b.shape[0] != k:
        return NOT_ROUTED  # NumPy raises its own error
    shape = a.shape[:-1] + (b.shape[1],)
    if out is not None and not ok_out(out, shape, dtype=result_dtype(a, b)):
        return NOT_ROUTED
    # Explicit row count: reshape(-1, 0) is ambiguous and raises for k == 0. The
    # reshape of `a` is a view for C-ordered stacks and any 2-d `a`; `out` (C order,
    # see ok_out) is written by the engine directly (one copy if it overlaps a or b).
    rows = math.prod(a.shape[:-1])
    res = routed(cfg, a.reshape(rows, k), b, entry,
                 out=None if out is None else out.reshape(rows, b.shape[1]))
    if res is NOT_ROUTED:
        return NOT_ROUTED
    return out if out is not None else res.reshape(shape)


def route_ndarray_dot(cfg, args, kwargs):
    """``a.dot(b, out=None)``, handed over by the dot hook as ``np.dot(a, b, out)``
    (the same C function for plain ndarrays): :func:`route_dot` counted as
    ``"ndarray.dot"``."""
    return route_dot(cfg, args, kwargs, entry="ndarray.dot")


def route_inner(cfg, args, kwargs):
    """``np.inner(a, b)`` routed (both at least 2-d); see :func:`route_dot`."""
    bound = bind(args, kwargs, ("a", "b"), 2) if not kwargs else None
    if bound is None:
        return NOT_ROUTED
    a, b = bound
    why = pair_reason(a, b)
    if why:
        return native(why, "np.inner")
    if a.ndim < 2 or b.ndim < 2:
        return native(dims_reason(a, b), "np.inner")
    k = a.shape[-1]
    if b.shape[-1] != k:
        return NOT_ROUTED
    res = routed(cfg, a.reshape(math.prod(a.shape[:-1]), k),
                  b.reshape(math.prod(b.shape[:-1]), k).T, "np.inner")
    if res is NOT_ROUTED:
        return NOT_ROUTED
    return np.ascontiguousarray(res.reshape(a.shape[:-1] + b.shape[:-1]))


def route_tensordot(cfg, args, kwargs):
    """``np.tensordot(a, b, axes=2)`` routed as one matrix product; see :func:`route_dot`.

    The axes are normalised as NumPy does; any doubt returns ``NOT_ROUTED``.
    """
    bound = bind(args, kwargs, ("a", "b", "axes"), 2)
    if bound is None:
        return NOT_ROUTED
    a, b, axes = bound
    if axes is None and len(args) < 3 and "axes" not in kwargs:
        axes = 2
    why = pair_reason(a, b)
    if why:
        return native(why, "np.tensordot")
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
            return NOT_ROUTED
        axes_a = [int(x) + (a.ndim if int(x) < 0 else 0) for x in axes_a]
        axes_b = [int(x) + (b.ndim if int(x) < 0 else 0) for x in axes_b]
        if any(not 0 <= x < a.ndim for x in axes_a) or any(not 0 <= x < b.ndim for x in axes_b):
            return NOT_ROUTED
        if any(a.shape[i] != b.shape[j] for i, j in zip(axes_a, axes_b)):
            return NOT_ROUTED
    except Exception:
        return NOT_ROUTED
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [j for j in range(b.ndim) if j not in axes_b]
    K = math.prod(a.shape[i] for i in axes_a)
    at = a.transpose(free_a + axes_a).reshape(math.prod(a.shape[i] for i in free_a), K)
    bt = b.transpose(axes_b + free_b).reshape(K, math.prod(b.shape[j] for j in free_b))
    res = routed(cfg, at, bt, "np.tensordot")
    if res is NOT_ROUTED:
        return NOT_ROUTED
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


def route_multi_dot(cfg, args, kwargs):
    """``np.linalg.multi_dot(arrays, *, out=None)`` routed, product by product.

    Follows NumPy's multiplication order; a sub-product that is not routed is computed
    by NumPy's own ``dot``. See :func:`route_dot` for parameters and result.
    """
    bound = bind(args, kwargs, ("arrays", "out"), 1)
    if bound is None or (len(args) > 1):  # out is keyword-only in NumPy
        return NOT_ROUTED
    arrays, out = bound
    try:
        arrays = list(arrays)
    except TypeError:
        return NOT_ROUTED
    if len(arrays) < 2:
        return NOT_ROUTED
    if any(type(x) is not np.ndarray for x in arrays):
        return native("operand is not a plain numpy.ndarray", "np.linalg.multi_dot")
    if any(x.dtype not in (F64, C128) for x in arrays):
        return native("product is not float64 or complex128", "np.linalg.multi_dot")
    if len(arrays) == 2:
        return route_dot(cfg, (arrays[0], arrays[1]), {"out": out})
    nd_first, nd_last = arrays[0].ndim, arrays[-1].ndim
    if nd_first == 1:
        arrays[0] = arrays[0][np.newaxis, :]
    if nd_last == 1:
        arrays[-1] = arrays[-1][:, np.newaxis]
    if any(x.ndim != 2 for x in arrays):
        return NOT_ROUTED
    if any(x.shape[1] != y.shape[0] for x, y in zip(arrays, arrays[1:])):
        return NOT_ROUTED
    final_shape = (arrays[0].shape[0], arrays[-1].shape[1])
    if out is not None and not ok_out(out, final_shape, dtype=result_dtype(*arrays)):
        return NOT_ROUTED

    def prod(x, y):
        r = routed(cfg, x, y, "np.linalg.multi_dot")
        return _original_dot(x, y) if r is NOT_ROUTED else r

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


def route_einsum(cfg, args, kwargs):
    """``np.einsum(subscripts, a, b)`` routed when it is a (batched) matrix product.

    Only NumPy's default options are routed; the result has ``einsum``'s own
    ``order='K'`` layout. See :func:`route_dot` for parameters and result.
    """
    if len(args) != 3 or not isinstance(args[0], str):
        return NOT_ROUTED
    subs, a, b = args
    out = kwargs.get("out")
    for key, val in kwargs.items():
        # Only NumPy's defaults are routed; optimize=... computes through np.matmul,
        # i.e. the loop hook, and dtype/order/casting change the result's rules.
        if not ((key == "out") or (key == "optimize" and val is False)
                or (key == "dtype" and val is None) or (key == "order" and val == "K")
                or (key == "casting" and val == "safe")):
            return NOT_ROUTED
    why = pair_reason(a, b)
    if why:
        return native(why, "np.einsum")
    spec = subs.replace(" ", "")
    if "->" in spec:
        ins, outs = spec.split("->", 1)
    else:
        ins, outs = spec, None
    parts = ins.split(",")
    if len(parts) != 2:
        return NOT_ROUTED
    sa, sb = parts
    if not set(sa + sb + (outs or "")) <= _LETTERS:
        return NOT_ROUTED  # ellipsis or invalid: NumPy decides
    if len(set(sa)) != len(sa) or len(set(sb)) != len(sb) or len(sa) != a.ndim \
            or len(sb) != b.ndim:
        return NOT_ROUTED
    if outs is None:
        counts = {c: (sa + sb).count(c) for c in set(sa + sb)}
        outs = "".join(sorted(c for c, v in counts.items() if v == 1))
    if len(set(outs)) != len(outs) or not set(outs) <= set(sa + sb):
        return NOT_ROUTED
    size = {}
    for s, x in ((sa, a), (sb, b)):
        for c, d in zip(s, x.shape):
            if size.setdefault(c, d) != d:
                return NOT_ROUTED  # size-1 broadcasting: leave to NumPy
    batch = [c for c in outs if c in sa and c in sb]
    free_a = [c for c in outs if c in sa and c not in sb]
    free_b = [c for c in outs if c in sb and c not in sa]
    contr = [c for c in sa if c in sb and c not in outs]
    if any(c not in outs and c not in contr for c in sa + sb) or not contr:
        return native("not a matrix product (einsum subscripts)", "np.einsum")
    shape = [size[c] for c in outs]
    if out is not None and not ok_out(out, shape, c_order=False, dtype=result_dtype(a, b)):
        return NOT_ROUTED
    nb, ni, nj, nk = (math.prod(size[c] for c in g) for g in (batch, free_a, free_b, contr))
    at = a.transpose([sa.index(c) for c in batch + free_a + contr]).reshape(nb, ni, nk)
    bt = b.transpose([sb.index(c) for c in batch + contr + free_b]).reshape(nb, nk, nj)
    order = batch + free_a + free_b
    if out is None:
        out = _einsum_output(a, b, sa, sb, outs)
    # The engine writes straight into `out` when `out`, viewed in the product's axis
    # order, is a (nb, ni, nj) stack (C order, or one Fortran-ordered matrix); else one
    # copy of the routed result.
    view = _stack_view(out.transpose([outs.index(c) for c in order]), (nb, ni, nj))
    res = routed(cfg, at, bt, "np.einsum", fp_name=None, out=view)
    if res is NOT_ROUTED:
        return NOT_ROUTED
    if view is None:
        res = res.reshape([size[c] for c in order])
        np.copyto(out, res.transpose([order.index(c) for c in outs]))
    return out


def _stack_view(x, shape):
    """``x`` reshaped to ``shape`` without a copy, or None when that needs one (or the
    view is neither a C-ordered stack nor a single Fortran-ordered matrix)."""
    # Not by assigning to .shape (deprecated in NumPy 2.5): reshape(copy=False) raises
    # where a view is impossible; before NumPy 2.1 (no copy=) a reshape that had to
    # copy shares no memory with x.
    try:
        v = np.reshape(x, shape, copy=False)
    except TypeError:
        v = x.reshape(shape)
        if v.size and not np.may_share_memory(v, x):
            return None
    except ValueError:
        return None
    if v.flags.c_contiguous or (shape[0] == 1 and v.flags.f_contiguous):
        return v
    return None


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
        order="K", op_dtypes=[None, None, result_dtype(a, b)], casting="safe")
    return it.operands[2]


#: Entry points whose every matrix product NumPy hands to BLAS as one 2-D GEMM that the
#: BLAS call-site hook (``blashook``) sees, so that ``patches`` need not wrap them
#: while it is installed. Empty: the hook patches the float64 GEMM/SYRK slots only, and
#: ``np.tensordot`` / ``np.linalg.multi_dot`` of complex128 operands reach ``zgemm``,
#: which only their wrappers route. ``np.dot`` and ``np.inner`` stay wrapped anyway (an
#: N-d operand is not a GEMM in NumPy), and so does ``np.einsum`` (no BLAS without
#: ``optimize``).
COVERED_BY_BLAS_HOOK: frozenset = frozenset()

#: ``(module, attribute, implementation, entry point)`` of every NumPy function
#: ``patches.install()`` rebinds to a wrapper.
TARGETS = (
    ("numpy", "dot", route_dot, "np.dot"),
    ("numpy", "inner", route_inner, "np.inner"),
    ("numpy", "tensordot", route_tensordot, "np.tensordot"),
    ("numpy", "einsum", route_einsum, "np.einsum"),
    ("numpy.linalg", "multi_dot", route_multi_dot, "np.linalg.multi_dot"),
)
