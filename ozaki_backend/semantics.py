"""NumPy's ``matmul`` semantics, written once for every array library the engines take.

Shapes and broadcasting, which dtypes give a float64 product, ``out=`` validation and
delivery, BLAS-style ``alpha``/``beta``, the plan/shape check and the native product
that everything the backend cannot emulate falls back to. The API layer and the
dispatch layer call these; the engines only ever see 2-D float64 slices that passed
them. Functions take NumPy or CuPy arrays alike (``xp`` is the array's module);
nothing here imports CuPy or ``array_api_compat`` unless CuPy is already loaded.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import numpy as np

from . import _native
from .spec.seed import K_CHUNK_MAX


class MatmulShape(NamedTuple):
    """The shapes of one ``matmul(a, b)`` call.

    Attributes
    ----------
    shape : tuple of int
        Result shape (1-D operands' added axes removed).
    batch : tuple of int
        Broadcast stack shape.
    a2, b2 : tuple of int
        Operand shapes with 1-D operands promoted to matrices.
    m, k, n : int
        The core product ``(m, k) @ (k, n)``.
    """

    shape: tuple
    batch: tuple
    a2: tuple
    b2: tuple
    m: int
    k: int
    n: int


def matmul_shape(sa, sb) -> MatmulShape | None:
    """:class:`MatmulShape` of ``matmul`` on operands of shapes ``sa``, ``sb``, or None
    when NumPy would reject the call (0-d operand, core mismatch, stacks that do not
    broadcast)."""
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
    return MatmulShape(shape, batch, sa2, sb2, sa2[-2], sa2[-1], sb2[-1])


def float64_product(da, db) -> bool:
    """Whether NumPy computes the product of dtypes ``da``, ``db`` in float64 (real
    floating, integer or bool operands whose result type is float64)."""
    da, db = np.dtype(da), np.dtype(db)
    return da.kind in "fiub" and db.kind in "fiub" and np.result_type(da, db) == np.float64


def complex128_product(da, db) -> bool:
    """Whether NumPy computes the product of dtypes ``da``, ``db`` in complex128 with at
    least one complex operand (complex128, or complex64 with a float64 partner; the
    other operand real floating, integer, bool or complex). complex64 products stay
    NumPy's own (``docs/spec.md`` §11.5)."""
    da, db = np.dtype(da), np.dtype(db)
    return (da.kind in "fiubc" and db.kind in "fiubc" and "c" in (da.kind, db.kind)
            and np.result_type(da, db) == np.complex128)


def product_dtype(da, db):
    """``float64`` or ``complex128``: the result dtype of an emulated product of
    ``da``, ``db`` (None when the backend does not emulate it)."""
    if float64_product(da, db):
        return np.dtype(np.float64)
    if complex128_product(da, db):
        return np.dtype(np.complex128)
    return None


# --------------------------------------------------------------------------- arrays

def is_cupy(x) -> bool:
    """Whether ``x`` is a CuPy array (never imports CuPy)."""
    if "cupy" not in sys.modules:
        return False
    from array_api_compat import is_cupy_array

    return is_cupy_array(x)


def namespace(a, b):
    """The array module of a pair of operands: ``numpy`` for NumPy arrays and anything
    NumPy converts, ``cupy`` for two CuPy arrays, None for a NumPy/CuPy mix (CuPy's own
    ``matmul`` then decides, and raises its own error)."""
    ca, cb = is_cupy(a), is_cupy(b)
    if not (ca or cb):
        return np
    if ca and cb:
        import cupy

        return cupy
    return None


# --------------------------------------------------------------------------- foreign arrays
#: The array libraries the engines compute on; any other array-API library's arrays
#: are converted to one of them (where they live) and the result converted back.
ENGINE_LIBRARIES = "NumPy (CPU) and CuPy (CUDA)"
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


class Foreign(NamedTuple):
    """Operands of another array library: how to convert them in and the result out.

    Attributes
    ----------
    xp : module
        The operands' array-API namespace (``array_api_strict``, torch's, JAX's ...).
    type_name : str
        The operands' type, for messages.
    on_cuda : bool
        The operands live on a CUDA device: they are converted to CuPy (zero copy
        through DLPack) and the product is computed there; else to NumPy.
    device : object
        The operands' device (``x.device``), where the result is put back.
    """

    xp: object
    type_name: str
    on_cuda: bool
    device: object


def _type_name(x) -> str:
    t = type(x)
    return f"{t.__module__}.{t.__qualname__}"


def _is_foreign(x) -> bool:
    """Whether ``x`` is an array of a library other than NumPy and CuPy (it has the
    array-API or DLPack protocol and is not a NumPy or CuPy array or scalar)."""
    if x is None or isinstance(x, (np.ndarray, np.generic)) or is_cupy(x):
        return False
    return hasattr(x, "__array_namespace__") or hasattr(x, "__dlpack__")


def foreign(*xs) -> Foreign | None:
    """The :class:`Foreign` description of the arrays among ``xs`` that belong to
    another array library, or None when there are none (NumPy, CuPy, lists, scalars).

    Raises
    ------
    TypeError
        For arrays of two different foreign libraries, arrays on a device that is
        neither the CPU nor a CUDA GPU, or an array without a usable namespace; the
        message names the type and the supported libraries.
    """
    found = [x for x in xs if _is_foreign(x)]
    if not found:
        return None
    x = found[0]
    names = {_type_name(y) for y in found}
    if len(names) > 1:
        raise TypeError(f"ozaki_backend: operands of different array libraries "
                        f"({', '.join(sorted(names))}); give arrays of one library")
    xp = _foreign_namespace(x)
    if xp is None or not hasattr(x, "__dlpack__"):
        raise TypeError(f"ozaki_backend: unsupported array type {_type_name(x)} (no "
                        f"array-API namespace with DLPack); supported: {ENGINE_LIBRARIES} "
                        "arrays, and arrays of any array-API library with DLPack on the "
                        "CPU or a CUDA GPU")
    try:
        kind = int(x.__dlpack_device__()[0])
    except Exception:  # noqa: BLE001 - no DLPack device: say so below
        kind = None
    if kind not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        raise TypeError(f"ozaki_backend: {_type_name(x)} on a device of DLPack type "
                        f"{kind}: the engines compute on the CPU (NumPy) or a CUDA GPU "
                        f"(CuPy); move the operands to one of them")
    return Foreign(xp, _type_name(x), kind == _DL_CUDA, getattr(x, "device", None))


def _foreign_namespace(x):
    try:
        from array_api_compat import array_namespace

        return array_namespace(x)
    except Exception:  # noqa: BLE001 - not known to array_api_compat: the protocol
        get = getattr(x, "__array_namespace__", None)
        return get() if get is not None else None


def to_engine_array(f: Foreign, x):
    """``x`` (an array of ``f``'s library, or anything NumPy converts) as a NumPy or
    CuPy array: through DLPack (no copy where the library allows it)."""
    if x is None or not _is_foreign(x):
        return x
    if f.on_cuda:
        try:
            cupy = _cupy()
        except ImportError as exc:
            from ._warnings import EngineUnavailableError

            raise EngineUnavailableError(
                f"{f.type_name} operands on a CUDA device need CuPy ({exc}); install the "
                "CUDA extra: pip install 'ozaki_backend[cuda13]' (or [cuda12])") from None
        return cupy.from_dlpack(x)
    try:
        return np.from_dlpack(x)
    except (BufferError, TypeError, RuntimeError):
        # e.g. a tensor that requires grad or is read-only for DLPack: an explicit copy
        return np.asarray(x)


def from_engine_array(f: Foreign, res):
    """A NumPy or CuPy result as an array of ``f``'s library, on the operands' device."""
    if isinstance(res, np.generic) or not hasattr(res, "__dlpack__"):
        res = np.asarray(res)   # NumPy's scalar result of vector @ vector: 0-d
    try:
        if f.device is not None:
            try:
                return f.xp.from_dlpack(res, device=f.device)
            except TypeError:  # a namespace without the 2023.12 `device` keyword
                pass
        return f.xp.from_dlpack(res)
    except (BufferError, TypeError, RuntimeError, AttributeError):
        return f.xp.asarray(res) if f.device is None else f.xp.asarray(res, device=f.device)


def data_pointer(x):
    """The address of ``x``'s first element: a NumPy array's (``__array_interface__``)
    or a CuPy array's (``x.data.ptr``), None for anything else."""
    iface = getattr(x, "__array_interface__", None)
    if iface is not None:
        return iface["data"][0]
    data = getattr(x, "data", None)
    return getattr(data, "ptr", None)


def transpose_pair(a, b) -> bool:
    """Whether ``a @ b`` is a symmetric product ``x.T @ x`` or ``x @ x.T``: two 2-D
    views of one buffer, ``b`` the transpose of ``a`` (same first element, shapes
    ``(m, k)`` / ``(k, m)``, strides swapped, same dtype).

    This is NumPy's own rule for calling ``syrk`` instead of ``gemm`` (a product of two
    equal but separate arrays is not detected, in NumPy or here). NumPy or CuPy arrays
    alike; never copies or reads the data.
    """
    if getattr(a, "ndim", None) != 2 or getattr(b, "ndim", None) != 2:
        return False
    if type(a) is not type(b) or a.dtype != b.dtype:
        return False
    if tuple(a.shape) != tuple(b.shape)[::-1] or tuple(a.strides) != tuple(b.strides)[::-1]:
        return False
    pa = data_pointer(a)
    return pa is not None and pa == data_pointer(b)


def unwrap_out(out):
    """``out=`` as a single array: the ufunc form ``out=(array,)`` is accepted too."""
    if type(out) is tuple and len(out) == 1:
        return out[0]
    return out


def valid_out(out, shape, array_type, dtype=np.float64) -> bool:
    """Whether ``out`` can receive a ``dtype`` (float64 or complex128) result of
    ``shape`` (else NumPy's own call decides and raises its own error)."""
    return (type(out) is array_type and tuple(out.shape) == tuple(shape)
            and np.can_cast(dtype, out.dtype, casting="same_kind"))


def check_c(beta, c, shape) -> None:
    """The BLAS ``C`` operand: required when ``beta != 0``, and it may broadcast to the
    product's shape but never widen it.

    Raises
    ------
    ValueError
        ``beta != 0`` without ``c`` (``alpha A B + beta C`` would read nothing: NaN), or
        a ``c`` that does not broadcast to ``shape``.
    """
    if beta == 0:
        return
    if c is None:
        raise ValueError("beta != 0 needs c (the matrix that beta scales)")
    if np.broadcast_shapes(np.shape(c), tuple(shape)) != tuple(shape):
        raise ValueError(f"c of shape {np.shape(c)} does not broadcast to the product's "
                         f"shape {tuple(shape)}")


def check_plan(plan, m, n, k) -> None:
    """A plan must be for the product's core shape.

    Raises
    ------
    ValueError
        Naming both shapes.
    """
    if (plan.m, plan.n, plan.k) != (m, n, k):
        raise ValueError(f"plan is for ({plan.m} x {plan.k}) @ ({plan.k} x {plan.n}); "
                         f"operands are ({m} x {k}) @ ({k} x {n})")


def check_plan_and_shapes(A, B, plan) -> None:
    """The seed scheme's argument check in both engines: a ``phase22`` plan for these
    2-D shapes with a valid k chunk (``A``, ``B``: any arrays with ``ndim`` and
    ``shape``)."""
    if getattr(plan, "scheme", None) != "phase22":
        raise ValueError(f"plan.scheme must be 'phase22'; got {getattr(plan, 'scheme', None)!r}")
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"need 2-D operands (m, k) @ (k, n); got {A.shape} @ {B.shape}")
    check_plan(plan, A.shape[0], B.shape[1], A.shape[1])
    if not 1 <= plan.k_chunk <= K_CHUNK_MAX:
        raise ValueError(f"plan.k_chunk must be in [1, {K_CHUNK_MAX}]")


def stacks(xp, a, b, ms: MatmulShape):
    """``(a3, b3)``: float64 operands as ``batch + (m, k)`` and ``batch + (k, n)``
    (broadcast views, no copies); complex operands as complex128 (a complex product,
    ``docs/spec.md`` §11: its real operand stays float64)."""
    a = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64,
                 copy=False).reshape(ms.a2)
    b = b.astype(np.complex128 if b.dtype.kind == "c" else np.float64,
                 copy=False).reshape(ms.b2)
    ta, tb = ms.batch + ms.a2[-2:], ms.batch + ms.b2[-2:]
    # An operand that already has its stack shape (every 2-D product) is used as it is:
    # broadcast_to would only make another view of it, at a few microseconds a call.
    return (a if a.shape == ta else xp.broadcast_to(a, ta),
            b if b.shape == tb else xp.broadcast_to(b, tb))


def apply_alpha_beta(C, alpha, beta, C0=None):
    """Spec §7: ``alpha*C + beta*C0`` with BLAS conventions (``C0`` unread when
    ``beta == 0``), one rounding per operation (two array operations, never a fused
    multiply-add). NumPy or CuPy arrays."""
    cplx = C.dtype.kind == "c"
    alpha = complex(alpha) if cplx and isinstance(alpha, complex) else float(alpha)
    beta = complex(beta) if cplx and isinstance(beta, complex) else float(beta)
    dt = np.complex128 if cplx else np.float64
    out = C if alpha == 1.0 else alpha * C
    if beta != 0.0:
        C0 = C0.astype(dt, copy=False) if hasattr(C0, "astype") \
            else np.asarray(C0, dtype=dt)
        out = out + beta * C0
    return out


def deliver(res, out, shape, *, direct=False):
    """The result in the caller's form: ``res`` reshaped to ``shape`` (a 0-d NumPy
    result becomes a scalar, as ``vector @ vector`` is in NumPy), or ``out`` filled
    from it (unless ``direct``: ``res`` already is a view of ``out``)."""
    res = res.reshape(shape)
    if out is None:
        return res[()] if (res.ndim == 0 and type(res) is np.ndarray) else res
    if not direct:
        if type(out) is np.ndarray:
            np.copyto(out, res, casting="same_kind")
        else:
            out[...] = res
    return out


def native(xp, a, b, out=None, alpha=1.0, beta=0.0, c=None):
    """The product as the array library itself computes it (NumPy's own ``matmul``,
    never routed back into the backend; CuPy's ``matmul``), with ``alpha``/``beta``
    applied afterwards. Used for everything the engines do not take, so results and
    exceptions are the library's own."""
    if xp is not np:
        mm = (xp or _cupy()).matmul
        if alpha == 1.0 and beta == 0.0:
            return mm(a, b, out=out)
        return _native_ab(mm(a, b), out, alpha, beta, c)
    if alpha == 1.0 and beta == 0.0:
        return _native.matmul(a, b, out=out)
    return _native_ab(_native.matmul(a, b), out, alpha, beta, c)


def _native_ab(res, out, alpha, beta, c):
    res = apply_alpha_beta(res, alpha, beta, c)
    if out is None:
        return res
    if type(out) is np.ndarray:
        np.copyto(out, res, casting="same_kind")
    else:
        out[...] = res
    return out


def _cupy():
    import cupy

    return cupy


def report_overflow(name: str) -> None:
    """Report an overflow of a product the way NumPy reports its own: under
    ``np.errstate(over=...)`` — ``"raise"`` raises :class:`FloatingPointError`,
    ``"warn"`` warns (RuntimeWarning), ``"call"``/``"print"``/``"log"`` as configured —
    with NumPy's message ``"overflow encountered in <name>"`` (``name``: ``"matmul"`` or
    ``"dot"``). It makes NumPy's own function overflow on a 1-element product, so the
    report is exactly NumPy's, whatever the error state."""
    big = np.array([[np.finfo(np.float64).max]])
    two = np.array([[2.0]])
    with _native.suspended():
        if name == "dot":
            np.dot(big, two)
        else:
            np.matmul(big, two)
