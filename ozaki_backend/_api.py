"""Public signatures: ``matmul`` (and ``Plan.matmul``), from the operands to an engine.

A call goes one way down: NumPy's semantics decide whether it can be emulated
(:mod:`.semantics`), the plan fixes the bits (:mod:`.plan`), the registry picks the
engine (:mod:`.registry`), the engine computes (:class:`.engine.Engine`), and the
semantics deliver the result. Everything the engines do not take is computed by the
array library itself, so bad input raises exactly what NumPy (or CuPy) raises.
"""

from __future__ import annotations

import operator
import threading
from functools import lru_cache
from typing import Any, Iterable, Literal, overload

import numpy as np
from numpy.typing import NDArray

from . import _native, _options, _stats, registry, semantics
from .engine import OVERFLOW, workspace_limit
from .plan import Plan, bind

#: Returned by :func:`product` called with ``declined=DECLINED`` when the engine declined
#: the product (an operand holds NaN or infinity): the caller computes it natively.
DECLINED = object()


# The result's type follows the operands: NumPy arrays give NumPy arrays; CuPy, PyTorch,
# JAX ... arrays give arrays of their own library, which a type checker cannot name
# without importing those libraries (Any). return_bound=True adds the bound.
@overload
def matmul(a: NDArray[Any], b: NDArray[Any], *, precision: str = ..., bits: int | None = ...,
           moduli: int | None = ..., mode: str = ..., scheme: str = ..., engine: str = ...,
           out: NDArray[Any] | None = ..., residual: bool = ...,
           return_bound: Literal[False] = ..., workspace: int | str | None = ...,
           emulation: str | None = ...
           ) -> NDArray[Any]: ...
@overload
def matmul(a: NDArray[Any], b: NDArray[Any], *, precision: str = ..., bits: int | None = ...,
           moduli: int | None = ..., mode: str = ..., scheme: str = ..., engine: str = ...,
           out: NDArray[Any] | None = ..., residual: bool = ..., return_bound: Literal[True],
           workspace: int | str | None = ...,
           emulation: str | None = ...) -> tuple[NDArray[Any], NDArray[Any]]: ...
@overload
def matmul(a: Any, b: Any, *, precision: str = ..., bits: int | None = ...,
           moduli: int | None = ..., mode: str = ..., scheme: str = ..., engine: str = ...,
           out: Any = ..., residual: bool = ..., return_bound: Literal[True],
           workspace: int | str | None = ..., emulation: str | None = ...) -> tuple[Any, Any]: ...
@overload
def matmul(a: Any, b: Any, *, precision: str = ..., bits: int | None = ...,
           moduli: int | None = ..., mode: str = ..., scheme: str = ..., engine: str = ...,
           out: Any = ..., residual: bool = ..., return_bound: bool = ...,
           workspace: int | str | None = ..., emulation: str | None = ...) -> Any: ...


def matmul(a: Any, b: Any, *, precision: str = "fp64", bits: int | None = None,
           moduli: int | None = None, mode: str = "accurate", scheme: str = "ozaki2",
           engine: str = "auto", out: Any = None, residual: bool = False,
           return_bound: bool = False, workspace: int | str | None = None,
           emulation: str | None = None) -> Any:
    """Matrix product of float64 operands computed with INT8 GEMMs (Ozaki scheme II).

    Same semantics as :func:`numpy.matmul`: 1-D operands are promoted and the added
    axis removed, leading (stack) dimensions broadcast, ``out=`` is honoured.

    Parameters
    ----------
    a, b : array_like
        Operands. NumPy arrays give a NumPy result; CuPy arrays give a CuPy result
        computed on their device with no host copies. Arrays of any other array-API
        library with DLPack (PyTorch, JAX, ``array_api_strict`` ...) give an array of
        that library on their device: CPU arrays are computed by NumPy's engine,
        CUDA arrays by CuPy's (converted through DLPack, no copies where the library
        allows); other devices raise ``TypeError``.
    precision : {"fp64"}
        Target accuracy when neither ``bits`` nor ``moduli`` is given: per product, the
        fewest moduli whose certificate meets the native-level target
        (``docs/precision.md``, ``docs/spec.md`` §10): every element's error within
        ``gamma_{k_ij} (|A||B|)_ij``, ``k_ij`` the number of terms the element has
        (native DGEMM's own guarantee), and the truncation error's size at most
        native's typical rounding error on those terms; elements of one or two terms
        are computed from their terms. Elements failing a priori (at most 1/16 of
        them; or at most half at one modulus fewer, for outputs of 2^16 elements or
        more) are tested after the product, and a few recomputed as compensated dot
        products (as accurate as the rounding of the exact value) if need be;
        otherwise more moduli, the exact residual pass, and last the native float64
        product (counted in ``stats()`` and warned with ``NativeFallbackWarning``).
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
    return_bound : bool
        Also return a rigorous per-element bound on ``|C - a @ b|`` (``scheme="ozaki2"``
        only): the product's certificate (``docs/spec.md`` §10), ``gamma_k |a||b|`` for
        a product computed natively by the fallback, ``inf`` where NumPy computed the
        product itself (non-finite or non-float64 operands).
    workspace : int or str, optional
        Device-memory budget of the CUDA engine's workspace, in bytes or as a string
        like ``"16GiB"`` (default: ``OZAKI_BACKEND_WORKSPACE``, else 85 % of the free
        device memory, at most 16 GiB). Larger products are tiled; the bits never
        change.
    emulation : {"performant", "eager"}, optional
        ``"performant"`` (the default, or ``OZAKI_BACKEND_EMULATION``): on the CUDA
        engine a ``precision="fp64"`` product that this GPU's native DGEMM runs faster
        is computed by DGEMM (outcome ``"native (faster)"`` in :func:`stats`), and an
        escalation stops at native as soon as it is the cheaper step; ``"eager"``:
        always emulate (the CPU engine always does).

    Returns
    -------
    ndarray, or (ndarray, ndarray) with ``return_bound``
        float64 product (or ``out``), and the bound of the same shape.

    Raises
    ------
    FloatingPointError
        Under ``np.errstate(over="raise")``, when finite operands give an infinite
        element, as NumPy's own ``matmul`` does (``"warn"`` warns, and so on).
    TypeError
        For operands of an unsupported array type, of two different array libraries,
        or on a device that is neither the CPU nor a CUDA GPU (the message names the
        type and the supported libraries).
    EngineUnavailableError
        ``engine="cuda"`` where CuPy or a GPU is missing (a ``RuntimeError``
        whose message says how to install the CUDA extra).

    Notes
    -----
    Operands that are not real floating or integer arrays whose product NumPy would
    compute in float64, and operands containing NaN or infinity, are computed by
    NumPy itself (the result is exactly NumPy's); so are calls NumPy would reject,
    which therefore raise NumPy's own exception.

    An ``ndarray`` subclass comes back as :func:`numpy.matmul` returns it: the product
    is computed on the arrays' data and handed to the subclass's ``__array_wrap__`` as
    NumPy's ufunc does, so an ``np.matrix`` stays a matrix, and a masked array gets
    the mask (or the error) NumPy's ``matmul`` gives it.
    """
    opts = _options.normalize(precision=precision, bits=bits, moduli=moduli, mode=mode,
                              scheme=scheme, engine=engine, residual=residual,
                              workspace=workspace, emulation=emulation)
    if return_bound:
        if opts["scheme"] != "ozaki2":
            raise ValueError("return_bound=True needs scheme='ozaki2' (the seed scheme "
                             "has no certificate)")
        res, bound = product(a, b, opts, out=out, return_bound=True)
        wrapper = _subclass_wrapper(a, b, out)
        if wrapper is None:
            return res, bound
        return _wrap(wrapper, res, a, b), _wrap(wrapper, bound, a, b)
    res = product(a, b, opts, out=out)
    wrapper = _subclass_wrapper(a, b, out)
    return res if wrapper is None else _wrap(wrapper, res, a, b)


def _subclass_wrapper(a: Any, b: Any, out: Any) -> np.ndarray | None:
    """The operand whose ``__array_wrap__`` :func:`numpy.matmul` calls on its result,
    or None: NumPy's rule, the ``ndarray`` subclass operand of highest
    ``__array_priority__`` (the first on a tie); none when ``out=`` is given (NumPy
    returns ``out`` as it is) or when the subclass takes over ufuncs itself
    (``__array_ufunc__``: the array-API path handles those)."""
    if out is not None:
        return None
    subs = [x for x in (a, b) if isinstance(x, np.ndarray) and type(x) is not np.ndarray
            and type(x).__array_ufunc__ is np.ndarray.__array_ufunc__]
    if not subs:
        return None
    return max(subs, key=lambda x: float(getattr(x, "__array_priority__", 0.0)))


def _wrap(wrapper: np.ndarray, res: Any, a: Any, b: Any) -> Any:
    # NumPy's ufunc wraps with the inputs as context and returns a scalar for a 0-d
    # result (1-D @ 1-D); the subclass decides (a masked array computes its mask here
    # from the inputs' masks, and raises where NumPy's matmul raises).
    arr = np.asarray(res)
    return wrapper.__array_wrap__(arr, (np.matmul, (a, b), 0), arr.ndim == 0)


def product(a, b, opts, *, out=None, alpha=1.0, beta=0.0, c=None, plan=None,
            return_bound=False, fp_name="matmul", overflowed=None, declined=None,
            _bound_out=None):
    """``alpha * (a @ b) + beta * c`` with validated options ``opts`` (as
    :func:`ozaki_backend._options.normalize` returns them): the one path every entry
    point takes (``matmul``, ``Plan.matmul``, the dispatch layer).

    Parameters
    ----------
    a, b : array_like
        NumPy arrays (or anything NumPy converts), or two CuPy arrays.
    opts : dict
    out : array, optional
    alpha, beta : float
        BLAS scaling; ``c`` is read only when ``beta != 0`` and must broadcast to the
        result.
    c : array, optional
    plan : Plan, optional
        Use this plan (its shape must be the product's).
    return_bound : bool
        Also return the per-element error bound (``alpha == 1``, ``beta == 0`` only).
    fp_name : str or None
        Name in NumPy's floating-point overflow report (``"matmul"``, ``"dot"``), or
        None where the native function reports none (``einsum``, SciPy's ``dgemm``).
    overflowed : list, optional
        When given, an emulated NumPy result with an infinite element appends True to it
        instead of being reported (the loop hook reports through NumPy's loop).
    declined : object, optional
        Returned instead of NumPy's native result when the engine declines the product
        (NaN or infinity in an operand; the dispatch layer then runs the caller's own
        function, whose NaN/Inf answer is the one to give).

    Returns
    -------
    array, or (array, array) with ``return_bound``
        The result (or ``out``), as :func:`numpy.matmul` would return it.
    """
    if return_bound:
        if alpha != 1.0 or beta != 0.0:
            raise ValueError("return_bound needs alpha == 1 and beta == 0")
        return _product_with_bound(a, b, opts, out=out, plan=plan, fp_name=fp_name)
    if "workspace" in opts:          # a budget, not a numerical option: the plan never sees it
        opts = dict(opts)
        with workspace_limit(opts.pop("workspace")):
            return product(a, b, opts, out=out, alpha=alpha, beta=beta, c=c, plan=plan,
                           fp_name=fp_name, overflowed=overflowed, declined=declined,
                           _bound_out=_bound_out)
    plain = c is None and alpha == 1.0 and beta == 0.0 and _bound_out is None
    if plain and _local.__dict__.get("shortcuts"):
        res = _shortcut(a, b, out, opts, plan)
        if res is not None:
            return res
    f = semantics.foreign(a, b, out, c)
    if f is not None:
        return _foreign_product(f, a, b, opts, out=out, alpha=alpha, beta=beta, c=c,
                                plan=plan, fp_name=fp_name, _bound_out=_bound_out)
    if c is None and beta != 0:
        semantics.check_c(beta, c, ())   # raises: alpha A B + beta C needs C
    xp = semantics.namespace(a, b)
    if xp is None:
        # A NumPy/CuPy mix: CuPy's own matmul decides (and raises its own error).
        _stats.record("native", "mixed NumPy/CuPy operands")
        return semantics.native(None, a, b, out, alpha, beta, c)
    if xp is np:
        a, b = np.asarray(a), np.asarray(b)
    out = semantics.unwrap_out(out)
    ms = semantics.matmul_shape(a.shape, b.shape)
    dtype = semantics.product_dtype(a.dtype, b.dtype)
    if dtype == np.complex128 and opts["scheme"] != "ozaki2":
        dtype = None                      # the seed scheme has no complex pipeline
    if ms is None or dtype is None:
        _stats.record("native", "operands NumPy would not compute in float64 or complex128"
                      if ms is not None else "shape rejected by NumPy")
        return semantics.native(xp, a, b, out, alpha, beta, c)
    semantics.check_c(beta, c, ms.shape)
    if out is not None and not semantics.valid_out(out, ms.shape, type(a), dtype):
        return semantics.native(xp, a, b, out, alpha, beta, c)  # the library's own error
    p = plan if plan is not None else _plan_of(ms.m, ms.n, ms.k, opts)
    semantics.check_plan(p, ms.m, ms.n, ms.k)
    eng, _why = registry.resolve(opts["engine"], on_device=xp is not np)
    a3, b3 = semantics.stacks(xp, a, b, ms)
    full = ms.batch + (ms.m, ms.n)
    # Write straight into out= when it is a plain float64 result buffer that does not
    # overlap the operands (chunked transfers would otherwise read results); a
    # Fortran-ordered matrix too (SciPy's result), which the engines fill in place.
    one = all(d == 1 for d in ms.batch)
    direct = (out is not None and (xp is not np or (alpha == 1.0 and beta == 0.0))
              and out.dtype == dtype
              and (out.flags.c_contiguous
                   or (dtype == np.float64 and one and out.flags.f_contiguous
                       and out.shape == full))
              and not xp.may_share_memory(out, a) and not xp.may_share_memory(out, b))
    res = out.reshape(full) if direct else xp.empty(full, dtype=dtype)
    c3 = None
    if beta != 0.0:
        c3 = xp.broadcast_to(xp.asarray(c, dtype=dtype), ms.shape).reshape(full)
    bound3 = xp.empty(full, dtype=np.float64) if _bound_out is not None else None
    with _stats.timer() as t, _native.suspended():
        done = eng.product(a3, b3, p, res, alpha=alpha, beta=beta, c3=c3, bound3=bound3)
    if not done:
        _stats.record("native", "non-finite operand")
        if declined is not None:
            return declined
        return semantics.native(xp, a, b, out, alpha, beta, c)
    _stats.record("routed", f"engine={eng.name}" + (
        "" if xp is np else f" (CuPy operands{', via host' if eng is registry.HOST_COPY else ''})"),
        seconds=t.seconds)
    if plain and xp is not np and not ms.batch and (out is None or direct):
        _remember_shortcut(eng, p, a, b, out, opts, plan)
    if bound3 is not None:
        _bound_out.append(bound3.reshape(ms.shape))
    if done == OVERFLOW and xp is np:
        if overflowed is not None:
            overflowed.append(True)
        elif fp_name:
            semantics.report_overflow(fp_name)
    return semantics.deliver(res, out, ms.shape, direct=direct)


# Per thread: device products that the engine computes natively without reading their
# operands (``Engine.native_shortcut``: native DGEMM modelled faster at any count, or the
# shape went native for its count and is not due for a probe; docs/spec.md §10.4), keyed
# by everything that decided it. A hit goes straight to the engine's native function:
# the semantics, the plan and the driver it skips cost ~0.2 ms a call on the H200 host,
# 4-8 % of the 4096^3 DGEMM it would run anyway.
_local = threading.local()

#: Shapes a thread keeps a shortcut for before it forgets them all.
SHORTCUTS_KEPT = 64


def _shortcut_key(a, b, out, opts, plan):
    """What decides a native shortcut: the operands' (and ``out``'s) types, layouts and
    device, the options, and the shape of a given plan (which the full path checked when
    the shortcut was kept); None for operands without them, e.g. lists."""
    try:
        where = None if out is None else (type(out), out.shape, out.strides, out.dtype)
        planned = None if plan is None else (plan.m, plan.n, plan.k)
        return (type(a), type(b), a.shape, b.shape, a.strides, b.strides, a.dtype,
                b.dtype, getattr(getattr(a, "device", None), "id", None), where, planned,
                tuple(opts.items()))
    except (AttributeError, TypeError):     # not an array, or an unhashable option
        return None


def _shortcut(a, b, out, opts, plan):
    """The product by this thread's shortcut for operands like ``a``, ``b`` (and
    ``out``, ``plan``), or None (none kept, or the engine says the full path is due:
    the shortcut is dropped)."""
    key = _shortcut_key(a, b, out, opts, plan)
    table = _local.shortcuts
    entry = table.get(key) if key is not None else None
    if entry is None:
        return None
    fn, reason = entry
    with _stats.timer() as t, _native.suspended():
        res = fn(a, b, out)
    if res is None:
        del table[key]
        return None
    _stats.record("routed", reason, seconds=t.seconds)
    return res


def _remember_shortcut(eng, plan, a, b, out, opts, given):
    """Keep ``eng``'s native shortcut (for ``plan``) for operands like ``a``, ``b`` (and
    ``out``, the caller's plan ``given``) if it offers one."""
    key = _shortcut_key(a, b, out, opts, given)
    offer = getattr(eng, "native_shortcut", None)
    fn = offer(plan, a, b, out) if key is not None and offer is not None else None
    if fn is None:
        return
    table = _local.__dict__.setdefault("shortcuts", {})
    if len(table) >= SHORTCUTS_KEPT and key not in table:
        table.clear()
    table[key] = (fn, f"engine={eng.name} (CuPy operands)")


def _plan_of(m, n, k, opts):
    """The plan of a call that brought none: made once per shape and options (a plan is
    a function of them only, and making one evaluates the moduli rules, a noticeable part
    of a call's host time), then reused."""
    try:
        key = (m, n, k, tuple(sorted(opts.items())))
        hash(key)
    except TypeError:                   # an unhashable option value: no reuse
        return Plan(m, n, k, **opts)
    return _cached_plan(key)


@lru_cache(maxsize=256)
def _cached_plan(key):
    m, n, k, items = key
    return Plan(m, n, k, **dict(items))


def _foreign_product(f, a, b, opts, *, out, alpha, beta, c, plan, fp_name, _bound_out):
    """``product`` on arrays of another array library ``f``
    (``semantics.Foreign``): converted to NumPy or CuPy where they
    live, computed, and the result (and bound) converted back to ``f``'s library."""
    conv = [semantics.to_engine_array(f, x) for x in (a, b, c)]
    holder = [] if _bound_out is not None else None
    res = product(conv[0], conv[1], opts, alpha=alpha, beta=beta, c=conv[2], plan=plan,
                  fp_name=fp_name, _bound_out=holder)
    if holder:
        _bound_out.append(semantics.from_engine_array(f, holder[0]))
    res = semantics.from_engine_array(f, res)
    if out is None:
        return res
    out[...] = res   # the library's own assignment rules (dtype, shape) apply
    return out


def _product_with_bound(a, b, opts, *, out, plan, fp_name):
    """:func:`product` with ``return_bound``: ``(result, bound)``."""
    f = semantics.foreign(a, b, out)
    holder = []
    res = product(a, b, opts, out=out, plan=plan, fp_name=fp_name, _bound_out=holder)
    if f is not None:   # bound converted back with the result (or inf, computed natively)
        if holder:
            bound = holder[0]
        else:   # computed natively: no certificate; inf where the operands live
            xp = np
            if f.on_cuda:
                import cupy as xp
            bound = semantics.from_engine_array(f, xp.full(tuple(res.shape), np.inf))
        return res, bound
    if holder:
        bound = holder[0]
    else:   # computed by the array library itself: no certificate
        xp = np if not semantics.is_cupy(res) else semantics.namespace(res, res)
        bound = xp.full(np.shape(res), np.inf)
    if np.ndim(res) == 0:
        bound = bound[()] if hasattr(bound, "ndim") else bound
    return res, bound


#: The warm-up's products (m, k, n): one on the INT8 kernels' tiles, one off them in
#: every dimension (the padded path loads kernels of its own).
WARM_UP_SHAPES = ((256, 256, 256), (200, 264, 136))


def warm_up(engine: str = "auto",
            shapes: Iterable[int | tuple[int, int, int]] = ()) -> str:
    """Pay a process's one-time costs of the GPU engine now rather than in its first
    product.

    The first emulated product of a process imports the CUDA engine, loads its kernels
    (compiled once per machine by NVRTC and cached on disk; loaded in every process),
    creates cuBLAS's INT8 handles and grows CuPy's memory pool: on an H100 that made
    the first 8191³ product take 151 ms against 18.6 for the next ones. ``warm_up``
    computes a few small products of each kind (both scaling modes, data of ordinary
    and of wide range, device and host operands, a size on and one off the kernels'
    tiles) with ``emulation="eager"``, and launches once the cuBLAS kernels that large
    products use (INT8 GEMMs up to 8192 × 8192, DGEMM), so that these costs fall
    outside the products that follow (a new shape still plans its own: on an H100 the
    first 8192³ product of a fresh process took 28-30 ms after the small products
    alone, 201 ms without, 19 ms steady; with ``shapes`` naming it, 18.8 ms). Its products
    are not counted in :func:`~ozaki_backend.stats` and warn of nothing. Call it once,
    at start-up, in the thread that will use the GPU, after choosing the device
    (``cupy.cuda.Device``).

    Parameters
    ----------
    engine : {"auto", "cuda", "cpu"}
        ``"auto"`` warms the CUDA engine where CuPy and a GPU are usable; ``"cpu"``
        (and ``"auto"`` without a GPU) does nothing: the CPU engine has no one-time
        costs worth moving.
    shapes : iterable of (m, k, n) or int, optional
        Products the program will make, ``(m, k) @ (k, n)`` (an int ``n``: the cube):
        each is also computed once, on N(0, 1) device operands with the default
        options, so that the first product of that shape finds its kernels loaded,
        CuPy's memory pool grown to its workspace (the pool keeps it, as after any
        product of that size) and its count remembered. A shape not given still pays
        its own first call.

    Returns
    -------
    str
        The engine warmed, ``"cuda"``, or ``"cpu"`` when nothing was to be done.

    Raises
    ------
    ValueError
        For an unknown engine name, or a shape that is not positive.
    TypeError
        For a shape that is neither an int nor three ints.
    ozaki_backend.EngineUnavailableError
        For ``engine="cuda"`` where CuPy or a GPU is not usable.

    Examples
    --------
    >>> import ozaki_backend as ob
    >>> ob.warm_up() in ("cuda", "cpu")
    True
    """
    name = _options.normalize(engine=engine)["engine"]
    wanted = _warm_up_shapes(shapes)
    eng, _why = registry.resolve(name)
    if eng.name != "cuda":
        return eng.name
    import warnings

    import cupy

    rng = cupy.random.default_rng(0)
    with _stats.not_counted(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m, k, n in WARM_UP_SHAPES:
            A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
            # rows over many binades: the a-posteriori test and its gathers
            W = (rng.random((m, k)) - 0.5) * cupy.exp(2.0 * rng.standard_normal((m, k)))
            for mode in ("accurate", "fast"):
                for X in (A, W):
                    matmul(X, B, engine="cuda", mode=mode, emulation="eager",
                           return_bound=True)
            matmul(A.get(), B.get(), engine="cuda", emulation="eager")
        # the large products' own kernels (cuBLAS picks its kernels by size); a GPU
        # without the ~0.8 GB they take loads them at their first use instead
        try:
            eng.load_kernels()
        except cupy.cuda.memory.OutOfMemoryError:
            pass
        for m, k, n in wanted:
            A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
            C = cupy.empty((m, n))
            matmul(A, B, engine="cuda", out=C)
            # the shape's second call: the one that captures the prepare stage's graph
            matmul(A, B, engine="cuda", out=C)
            A = B = C = None
        cupy.cuda.Device().synchronize()
    return "cuda"


def _warm_up_shapes(shapes):
    """``shapes`` of :func:`warm_up` as a list of ``(m, k, n)``, checked."""
    out = []
    for s in shapes if shapes is not None else ():
        dims = (s, s, s) if isinstance(s, (int, np.integer)) else s
        try:
            m, k, n = (operator.index(d) for d in dims)
        except (TypeError, ValueError):
            raise TypeError(f"warm_up: each shape must be an int n or (m, k, n) of ints; "
                            f"got {s!r}") from None
        if min(m, k, n) < 1:
            raise ValueError(f"warm_up: shape dimensions must be >= 1; got {s!r}")
        out.append((m, k, n))
    return out


def _execute(plan, a, b, *, engine, out=None, alpha=1.0, beta=0.0, c=None):
    """:meth:`Plan.matmul`: the product with a given plan and engine."""
    opts = dict(plan.options)
    opts["engine"] = _options.normalize(**dict(opts, engine=engine))["engine"]
    return product(a, b, opts, out=out, alpha=alpha, beta=beta, c=c, plan=plan)


bind(execute=_execute, moduli_for=registry.moduli_for)
