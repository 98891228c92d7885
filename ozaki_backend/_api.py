"""Public signatures: ``matmul`` and ``plan``; argument checks and engine choice.

The numerical work lives in the engines (``reference/`` for the CPU, ``cuda/`` for the
GPU). This module only decides *whether* a call can be emulated and hands everything
it cannot handle back to NumPy, so that bad input raises exactly what NumPy raises.
"""

from __future__ import annotations

import numpy as np

from . import _native, _options, _stats
from .plan import Plan


def plan(m, n, k, *, precision="fp64", bits=None, moduli=None, mode="accurate",
         scheme="ozaki2", engine="auto", residual=False):
    """The plan for an ``(m, k) @ (k, n)`` product.

    Parameters
    ----------
    m, n, k : int
        Problem shape.
    precision, bits, moduli, mode, scheme, engine, residual
        As for :func:`matmul`.

    Returns
    -------
    Plan
        Printable; ``plan.matmul(a, b)`` multiplies with it.
    """
    return Plan(m, n, k, precision=precision, bits=bits, moduli=moduli, mode=mode,
                scheme=scheme, engine=engine, residual=residual)


def matmul(a, b, *, precision="fp64", bits=None, moduli=None, mode="accurate",
           scheme="ozaki2", engine="auto", out=None, residual=False):
    """Matrix product of float64 operands computed with INT8 GEMMs (Ozaki scheme II).

    Same semantics as :func:`numpy.matmul`: 1-D operands are promoted and the added
    axis removed, leading (stack) dimensions broadcast, ``out=`` is honoured.

    Parameters
    ----------
    a, b : array_like
        Operands. NumPy arrays give a NumPy result; CuPy arrays give a CuPy result
        computed on their device with no host copies.
    precision : {"fp64"}
        Target accuracy when neither ``bits`` nor ``moduli`` is given: the fewest
        moduli whose result is at least as accurate as native float64.
    bits : int, optional
        Keep at least this many bits of each row's (column's) largest element.
    moduli : int, optional
        Use exactly this many moduli (2..20).
    mode : {"accurate", "fast"}
        Scaling rule: ``accurate`` bounds the product with an extra INT8 GEMM (usually
        one or two moduli fewer for the same accuracy); ``fast`` uses norms.
    scheme : {"ozaki2", "phase22"}
        ``phase22`` is the seed blog's scheme (hi/lo 17-bit split, 7 primes < 128).
    engine : {"auto", "cpu", "cuda"}
        ``cpu`` is the exact NumPy reference; ``auto`` picks CUDA when a GPU and CuPy
        are usable, else the CPU.
    out : ndarray, optional
        Where to put the result (any dtype float64 casts to under ``same_kind``).
    residual : bool
        ``phase22`` only: add the seed's Phase 24 FP64 correction of the truncated
        tails.

    Returns
    -------
    ndarray
        float64 product (or ``out``).

    Notes
    -----
    Operands that are not real floating or integer arrays whose product NumPy would
    compute in float64, and operands containing NaN or infinity, are computed by
    NumPy itself (the result is exactly NumPy's); so are calls NumPy would reject,
    which therefore raise NumPy's own exception.
    """
    opts = _options.normalize(precision=precision, bits=bits, moduli=moduli, mode=mode,
                              scheme=scheme, engine=engine, residual=residual)
    return _dispatch(a, b, opts, out=out)


def _is_cupy(x) -> bool:
    import sys

    if "cupy" not in sys.modules:
        return False
    from array_api_compat import is_cupy_array

    return is_cupy_array(x)


def _matmul_shape(sa, sb):
    """Result shape and the 2-D core shapes, or None when NumPy would reject it."""
    if len(sa) == 0 or len(sb) == 0:
        return None
    a_vec, b_vec = len(sa) == 1, len(sb) == 1
    sa2 = (1,) + tuple(sa) if a_vec else tuple(sa)
    sb2 = tuple(sb) + (1,) if b_vec else tuple(sb)
    if sa2[-1] != sb2[-2]:
        return None
    try:
        batch = np.broadcast_shapes(sa2[:-2], sb2[:-2])
    except ValueError:
        return None
    shape = batch + (() if a_vec else (sa2[-2],)) + (() if b_vec else (sb2[-1],))
    return shape, batch, sa2, sb2


def _routable_dtype(a, b) -> bool:
    for x in (a, b):
        if x.dtype.kind not in "fiub":
            return False
    return np.result_type(a, b) == np.float64


def choose_engine(engine: str):
    """``(engine, reason)`` for a NumPy call: the engine ``auto`` resolves to, and why."""
    if engine == "cpu":
        return "cpu", "engine='cpu' requested"
    from .cuda import availability

    ok, why = availability()
    if engine == "cuda":
        return "cuda", "engine='cuda' requested" + ("" if ok else f" ({why})")
    if ok:
        return "cuda", why
    return "cpu", f"no usable GPU: {why}"


def _dispatch(a, b, opts, *, out=None, alpha=1.0, beta=0.0, c=None, plan_=None):
    if c is None and beta != 0:
        # alpha*A@B + beta*C needs C: without it apply_alpha_beta would read
        # np.asarray(None) (NaN) and return NaNs silently.
        raise ValueError("beta != 0 needs c (the matrix that beta scales)")
    if _is_cupy(a) or _is_cupy(b):
        from .cuda.engine import matmul_cupy

        # The engine's own products must never be routed back into the backend.
        with _native.suspended():
            return matmul_cupy(a, b, opts, out=out, alpha=alpha, beta=beta, c=c, plan=plan_)

    a = np.asarray(a)
    b = np.asarray(b)
    if type(out) is tuple and len(out) == 1:   # NumPy's ufunc form: out=(array,)
        out = out[0]
    shapes = _matmul_shape(a.shape, b.shape)
    if shapes is None or not _routable_dtype(a, b):
        _stats.record("native", "operands NumPy would not compute in float64"
                      if shapes is not None else "shape rejected by NumPy")
        return _native_gemm(a, b, out, alpha, beta, c)
    shape, batch, sa2, sb2 = shapes
    if beta != 0 and np.broadcast_shapes(np.shape(c), shape) != shape:
        # c may broadcast to the result, never widen it.
        raise ValueError(f"c of shape {np.shape(c)} does not broadcast to the product's "
                         f"shape {shape}")
    if out is not None and not _valid_out(out, shape):
        return _native_gemm(a, b, out, alpha, beta, c)  # NumPy raises its own error
    a = a.astype(np.float64, copy=False)
    b = b.astype(np.float64, copy=False)
    m, k, n = sa2[-2], sa2[-1], sb2[-1]
    p = plan_ if plan_ is not None else Plan(m, n, k, **opts)
    if (p.m, p.n, p.k) != (m, n, k):
        raise ValueError(f"plan is for ({p.m} x {p.k}) @ ({p.k} x {p.n}); "
                         f"operands are ({m} x {k}) @ ({k} x {n})")
    eng, _why = choose_engine(opts["engine"])
    # The CUDA engine detects NaN/Inf on the device during scaling (free there; a
    # host-side isfinite pass costs more than the whole GPU product at n = 8192).
    if eng != "cuda" and not (np.isfinite(a).all() and np.isfinite(b).all()):
        _stats.record("native", "non-finite operand")
        return _native_gemm(a, b, out, alpha, beta, c)
    a3 = np.broadcast_to(a.reshape(sa2), batch + sa2[-2:])
    b3 = np.broadcast_to(b.reshape(sb2), batch + sb2[-2:])
    with _stats.timer() as t, _native.suspended():
        if eng == "cuda":
            from .cuda.engine import matmul_numpy

            # Write straight into out= when it is a plain result buffer that does
            # not overlap the operands (chunked copies would otherwise read results).
            direct = (out is not None and alpha == 1.0 and beta == 0.0
                      and out.dtype == np.float64 and out.flags.c_contiguous
                      and out.shape == batch + (m, n)
                      and not np.may_share_memory(out, a)
                      and not np.may_share_memory(out, b))
            res = matmul_numpy(a3, b3, p, check_finite=True, out=out if direct else None)
            if res is None:
                _stats.record("native", "non-finite operand")
                return _native_gemm(a, b, out, alpha, beta, c)
            if direct:
                _stats.record("routed", f"engine={eng}", seconds=t.elapsed())
                return out
        else:
            from .reference.pipeline import matmul_2d

            res = np.empty(batch + (m, n), dtype=np.float64)
            for idx in np.ndindex(*batch):
                res[idx] = matmul_2d(a3[idx], b3[idx], p)
    _stats.record("routed", f"engine={eng}", seconds=t.seconds)
    res = res.reshape(shape)
    if alpha != 1.0 or beta != 0.0:
        from .reference.crt import apply_alpha_beta

        res = apply_alpha_beta(res, alpha, beta, c)
    if out is not None:
        np.copyto(out, res, casting="same_kind")
        return out
    return res[()] if res.ndim == 0 else res   # vector @ vector is a scalar, as in NumPy


def _valid_out(out, shape) -> bool:
    return (type(out) is np.ndarray and out.shape == shape
            and np.can_cast(np.float64, out.dtype, casting="same_kind"))


def _native_gemm(a, b, out, alpha, beta, c):
    if alpha == 1.0 and beta == 0.0:
        return _native.matmul(a, b, out=out)
    from .reference.crt import apply_alpha_beta

    res = apply_alpha_beta(_native.matmul(a, b), alpha, beta, c)
    if out is not None:
        np.copyto(out, res, casting="same_kind")
        return out
    return res


def _matmul_with_plan(p, a, b, *, engine, out=None, alpha=1.0, beta=0.0, c=None):
    opts = dict(p.options)
    opts["engine"] = engine
    return _dispatch(a, b, opts, out=out, alpha=alpha, beta=beta, c=c, plan_=p)
