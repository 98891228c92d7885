"""Test utilities: the φ matrix generator, an exact matrix-product oracle, error metrics
and the a-priori error bound of Ozaki scheme II.

Everything here is independent of the emulation pipeline (it never calls the engines),
so it can judge them. Only :func:`error_bound` reads the pipeline's scaling exponents,
because the bound is a statement about those exponents.

Functions
---------
phi_matrix(shape, phi, rng)
    The literature's test matrices ``(U(0,1) - 0.5) * exp(phi * N(0,1))``.
exact_matmul(A, B)
    ``A @ B`` computed exactly and rounded once to float64 (round to nearest even).
relative_errors(C, C_exact), max_relative_error(C, C_exact)
    Element-wise relative error and its maximum.
error_bound(A, B, plan, C)
    Rigorous per-element bound on ``|C - A B|`` for an Ozaki-II product ``C``.
sampled_rows_reference(A_rows, B), sampled_rows_error(C_rows, ref)
    A double-double reference for a few rows of a large product, on the operands'
    own device (NumPy or CuPy), and the max relative error against it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._native import suspended

__all__ = ["phi_matrix", "family_operands", "FAMILIES", "exact_matmul", "exact_complex_matmul",
           "relative_errors", "reference_blas_matmul", "native_error_level",
           "max_relative_error", "error_bound", "sampled_rows_reference", "sampled_rows_error"]

#: Unit roundoff of float64 (round to nearest).
U64 = 2.0**-53
#: Smallest positive subnormal float64.
ETA = 2.0**-1074


def _native_products(func):
    """Run ``func`` with interception suspended: its float64 GEMMs (the exact digit
    products, the bound's error GEMMs, the reference pipeline's own products) must be
    NumPy's even inside an ``enabled()`` scope or under ``OZAKI_BACKEND=1``, or the
    oracle would judge the engine with the engine (and the bound's float64 GEMM error
    model would not hold)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with suspended():
            return func(*args, **kwargs)

    return wrapper


# --------------------------------------------------------------------------- phi


def phi_matrix(shape, phi, rng=None):
    """Random test matrix with a controllable exponent spread.

    ``(U(0,1) - 0.5) * exp(phi * N(0,1))`` element-wise, the generator of Ozaki,
    Uchino and Imamura (and of GEMMul8's accuracy tables); ``phi = -1`` means plain
    standard normal entries. Larger ``phi`` widens the spread of magnitudes:
    ``log|x|`` has mean ``-1 - ln 2`` and variance ``1 + phi**2``.

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the result.
    phi : float
        Spread parameter, or ``-1`` for N(0,1) entries.
    rng : numpy.random.Generator or cupy.random.Generator or int or None
        Source of randomness (an int or None is passed to
        :func:`numpy.random.default_rng`; a CuPy generator draws the matrix on the
        device, as a CuPy array). The uniform draws are taken first, then the normal
        ones, so a seed fixes the matrix.

    Returns
    -------
    ndarray of float64
    """
    xp = np
    if type(rng).__module__.split(".")[0] == "cupy":
        import cupy as xp
    elif not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    if phi == -1:
        return rng.standard_normal(shape)
    u = rng.random(shape)
    z = rng.standard_normal(shape)
    return (u - 0.5) * xp.exp(phi * z)


#: The operand families of :func:`family_operands`: the ones that break per-row scaling
#: (scaling along k, grading, wide exponent ranges) and the special values.
FAMILIES = ("kscaled2_30", "kscaled2_300", "kscaled2_1000", "kscaled1", "graded",
            "kscaled_graded", "phi0.5", "phi1", "phi2", "phi3", "phi4", "phi6",
            "cancellation", "subnormal", "huge", "triangular", "banded", "outliers",
            "diagonal", "lagged")


def family_operands(name, m, k, n, rng=None):
    """Operands ``(A (m, k), B (k, n))`` of one accuracy family (``docs/precision.md``).

    Parameters
    ----------
    name : str
        One of :data:`FAMILIES`: ``kscaled2_<r>`` — ``A = X D``, ``B = D^-1 Y`` with
        ``D = diag(2^e)``, ``e`` uniform in ``[-r, r]`` (mixed units, balancing);
        ``kscaled1`` — ``A = X D`` only; ``graded`` — rows of A and columns of B scaled
        by ``2^U[-60, 60]``; ``kscaled_graded`` — both; ``phi<x>`` — :func:`phi_matrix`;
        ``cancellation`` — ``B = [Y; -Y + 1e-9 Z]``; ``subnormal`` / ``huge`` — results
        near the ends of the float64 range; ``triangular`` — an upper triangular A with
        graded rows times a lower triangular B; ``banded`` — A non-zero within 40 of its
        scaled diagonal; ``outliers`` — three entries per row of A and column of B a
        million times larger; ``diagonal`` — ``X @ diag(d)``, d over ten decades (one
        term per element); ``lagged`` — differences of a random walk's columns (two
        terms of opposite sign per element).
    m, k, n : int
    rng : numpy.random.Generator or int or None

    Returns
    -------
    (ndarray, ndarray)
    """
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    X, Y = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if name.startswith("kscaled2_"):
        r = int(name.split("_")[1])
        D = np.ldexp(1.0, rng.integers(-r, r + 1, k))
        return X * D, Y / D[:, None]
    if name == "kscaled1":
        return X * np.ldexp(1.0, rng.integers(-40, 41, k)), Y
    if name == "graded":
        return (X * np.ldexp(1.0, rng.integers(-60, 61, m))[:, None],
                Y * np.ldexp(1.0, rng.integers(-60, 61, n)))
    if name == "kscaled_graded":
        D = np.ldexp(1.0, rng.integers(-40, 41, k))
        return (X * D * np.ldexp(1.0, rng.integers(-30, 31, m))[:, None],
                Y / D[:, None] * np.ldexp(1.0, rng.integers(-30, 31, n)))
    if name.startswith("phi"):
        phi = float(name[3:])
        return phi_matrix((m, k), phi, rng), phi_matrix((k, n), phi, rng)
    if name == "cancellation":
        H = Y[: (k + 1) // 2]      # odd k: one row more, cut below (k rows, not k - 1)
        return X, np.vstack([H, -H + 1e-9 * rng.standard_normal(H.shape)])[:k]
    if name == "subnormal":
        return X * 2.0 ** -540, Y * 2.0 ** -540
    if name == "huge":
        return X * 2.0 ** 500, Y * 2.0 ** 490
    if name == "banded":
        i, kk = np.arange(m)[:, None], np.arange(k)[None, :]
        return np.where(np.abs(i * (k / max(m, 1)) - kk) <= 40, X, 0.0), Y
    if name == "outliers":
        for M in (X, Y.T):
            idx = rng.integers(0, M.shape[1], (M.shape[0], 3))
            np.put_along_axis(M, idx, rng.standard_normal(idx.shape) * 1e6, axis=1)
        return X, Y
    if name == "diagonal":
        d = 10.0 ** rng.uniform(-5, 5, k) * rng.choice([-1.0, 1.0], k)
        D = np.zeros((k, n))
        j = np.arange(min(k, n))
        D[j, j] = d[j]
        return X, D
    if name == "lagged":
        W = X.cumsum(axis=1)
        D = np.zeros((k, n))
        j = np.arange(min(k - 1, n))
        D[j, j] = -1.0
        D[j + 1, j] = 1.0
        return W, D
    if name == "triangular":
        T = np.triu(rng.standard_normal((m, k))) * np.ldexp(1.0, rng.integers(-20, 21, m))[:, None]
        return T, np.tril(Y)
    raise ValueError(f"unknown family {name!r}; families are {', '.join(FAMILIES)}")


# --------------------------------------------------------------------------- oracle


def _check_operand(x, name):
    x = np.asarray(x)
    if x.dtype.kind not in "fiub" or x.dtype.itemsize > 8:
        raise TypeError(f"{name} must be a real float64-representable array; got {x.dtype}")
    x = x.astype(np.float64)
    if not np.isfinite(x).all():
        raise ValueError(f"{name} has non-finite entries: the exact product is undefined")
    return x


@_native_products
def exact_matmul(A, B, *, method="auto"):
    """The exact product ``A @ B`` rounded once to float64.

    Every element is the float64 nearest to the exact real value
    ``sum_k A_ik B_kj`` (ties to even, gradual underflow, ``±inf`` beyond the range);
    an exact zero gives ``+0.0``. Nothing is approximated, so the error is at most half
    an ulp of the result (``<= 2**-53 |C|``, or ``2**-1075`` in the subnormal range)
    whatever the cancellation.

    Parameters
    ----------
    A : array_like, shape (..., m, k) or (k,)
    B : array_like, shape (..., k, n) or (k,)
        Finite real operands (integer and bool arrays are converted to float64
        exactly only when their values fit; use float64 inputs). Leading dimensions
        broadcast and 1-D operands are promoted as in :func:`numpy.matmul`.
    method : {"auto", "python", "split"}
        ``"python"``: Python integers (mantissa × 2^exponent) summed exactly per
        element — slow, for small products. ``"split"``: error-free splitting into
        integer digit matrices whose float64 GEMMs are exact, then an exact multi-limb
        sum and one rounding — vectorised. ``"auto"`` picks ``"python"`` when
        ``m*n*k <= 4096``. Both give identical results (they are exact).

    Returns
    -------
    ndarray of float64
        Shape as :func:`numpy.matmul` would give.

    Raises
    ------
    ValueError
        For non-finite entries or shapes :func:`numpy.matmul` rejects.

    Notes
    -----
    Method ``"split"`` (an Ozaki scheme I style error-free transformation). Write every
    row ``i`` of ``A`` in base ``2^w`` relative to the row's top exponent ``E_i``
    (``|A_ik| < 2^E_i``): ``A_ik = sum_p a^(p)_ik 2^(E_i - w(p+1))`` with integer
    digits ``|a^(p)_ik| < 2^w`` carrying the sign of ``A_ik`` (extracted exactly from
    the 53-bit integer mantissa with shifts; digits below the lowest set bit are zero,
    so the expansion is finite and exact, subnormals included). Columns of ``B``
    likewise with ``F_j`` and digits ``b^(q)``. With ``w`` the largest width for
    which ``k (2^w - 1)^2 <= 2^53``, every partial sum of ``a^(p) @ b^(q)`` is an
    integer of magnitude at most ``2^53``, so each float64 GEMM of digit matrices is
    exact in any summation order, blocking or FMA use. The exact product is then
    ``2^(E_i+F_j-w(D+2)) * sum_{p,q} G_pq 2^(w(D-p-q))`` (``D`` = largest ``p+q``),
    accumulated in int64 limbs of base ``2^w`` (each limb receives at most
    ``#digits`` terms below ``2^53``: no overflow for fewer than 1024 digits) and
    rounded once from the limbs with guard and sticky bits. Digit matrices that are
    entirely zero are skipped, so rows mixing 1e300 with 1e-300 cost a few digits, not
    a hundred.
    """
    if method not in ("auto", "python", "split"):
        raise ValueError(f"method must be 'auto', 'python' or 'split'; got {method!r}")
    A = _check_operand(A, "A")
    B = _check_operand(B, "B")
    if A.ndim == 0 or B.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    a_vec, b_vec = A.ndim == 1, B.ndim == 1
    A2 = A[None, :] if a_vec else A
    B2 = B[:, None] if b_vec else B
    if A2.shape[-1] != B2.shape[-2]:
        raise ValueError(f"inner dimensions differ: {A2.shape[-1]} != {B2.shape[-2]}")
    batch = np.broadcast_shapes(A2.shape[:-2], B2.shape[:-2])
    m, k = A2.shape[-2:]
    n = B2.shape[-1]
    A3 = np.broadcast_to(A2, batch + (m, k))
    B3 = np.broadcast_to(B2, batch + (k, n))
    out = np.empty(batch + (m, n))
    if method == "auto":
        method = "python" if m * n * k <= 4096 else "split"
    core = _exact_python if method == "python" else _exact_split
    for idx in np.ndindex(*batch):
        out[idx] = core(np.ascontiguousarray(A3[idx]), np.ascontiguousarray(B3[idx]))
    if a_vec:
        out = out[..., 0, :]
    if b_vec:
        out = out[..., 0]
    return out


def exact_complex_matmul(A, B, *, method="auto"):
    """The exact complex product ``A @ B``, real and imaginary parts each rounded once.

    ``Re = [Ar, -Ai] @ [Br; Bi]`` and ``Im = [Ar, Ai] @ [Bi; Br]`` are real products of
    ``2k`` terms, each computed by :func:`exact_matmul` (exact, one rounding).

    Parameters
    ----------
    A : array_like, shape (..., m, k) or (k,)
    B : array_like, shape (..., k, n) or (k,)
        Finite real or complex operands (complex64/complex128; real ones as in
        :func:`exact_matmul`).
    method : {"auto", "python", "split"}
        As :func:`exact_matmul`.

    Returns
    -------
    ndarray of complex128
    """
    A, B = np.asarray(A), np.asarray(B)
    if A.dtype.kind == "c" and A.dtype.itemsize > 16 or B.dtype.kind == "c" and B.dtype.itemsize > 16:
        raise TypeError("A and B must be complex128-representable")
    Ar, Ai = np.real(A).astype(np.float64), np.imag(A).astype(np.float64)
    Br, Bi = np.real(B).astype(np.float64), np.imag(B).astype(np.float64)
    if Ar.ndim == 0 or Br.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    bvec = Br.ndim == 1
    cat = (lambda x, y: np.concatenate([x, y])) if bvec else \
        (lambda x, y: np.concatenate([x, y], axis=-2))
    re = exact_matmul(np.concatenate([Ar, -Ai], axis=-1), cat(Br, Bi), method=method)
    im = exact_matmul(np.concatenate([Ar, Ai], axis=-1), cat(Bi, Br), method=method)
    out = np.empty(np.shape(re), dtype=np.complex128)
    out.real = re
    out.imag = im
    return out


def _int_ratio_to_float(num: int, log2_den: int) -> float:
    """Correctly rounded ``num / 2**log2_den`` (ties to even, gradual underflow).

    CPython's int/int true division and int->float conversion are correctly rounded
    and raise OverflowError exactly when the rounded value is out of range.
    """
    if num == 0:
        return 0.0
    try:
        if log2_den <= 0:
            return float(num << -log2_den)
        return num / (1 << log2_den)
    except OverflowError:
        return math.inf if num > 0 else -math.inf


def _exact_python(A, B):
    """Exact product with Python integers: slow, independent of the split method."""
    m, k = A.shape
    n = B.shape[1]

    def parts(x):
        # x = mant * 2**ex exactly, mant an int (|mant| < 2**53).
        f, e = math.frexp(float(x))
        return int(f * 2**53), e - 53

    pa = [[parts(A[i, l]) for l in range(k)] for i in range(m)]
    pb = [[parts(B[l, j]) for j in range(n)] for l in range(k)]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            terms = [(ma * mb, ea + eb) for (ma, ea), (mb, eb) in
                     ((pa[i][l], pb[l][j]) for l in range(k)) if ma and mb]
            if not terms:
                continue
            emin = min(e for _, e in terms)
            num = sum(v << (e - emin) for v, e in terms)
            out[i, j] = _int_ratio_to_float(num, -emin)
    return out


def _digit_width(k: int) -> int:
    """Largest ``w`` with ``k (2^w - 1)^2 <= 2^53`` (exact digit GEMMs), capped at 26."""
    w = 26
    while w > 1 and k * ((1 << w) - 1) ** 2 > 1 << 53:
        w -= 1
    return w


def _digits(X, w):
    """Base-``2^w`` digit planes of the rows of ``X`` relative to each row's top.

    Returns ``(E, planes)``: ``E`` (rows,) int64 with ``|X_rk| < 2^E_r`` and a dict
    ``{p: float64 plane}`` of the non-zero planes, with
    ``X_rk = sum_p plane_p[r, k] 2^(E_r - w(p+1))`` exactly; digits are integers,
    ``|digit| < 2^w``, with the sign of ``X_rk``.

    Every step is exact in float64: the remainder ``R`` (``X`` less its leading
    digits) is a subset of the bits of ``X``, so it and each digit times its weight are
    representable; ``ldexp(R, w(p+1) - E)`` is below ``2^w`` in magnitude (no overflow)
    and exact unless it is below ``2^-1022``, where ``trunc`` gives 0 either way.
    """
    _, e = np.frexp(X)
    nz = X != 0
    e = e.astype(np.int64)
    lowest = np.iinfo(np.int64).min
    E = np.where(nz, e, lowest).max(axis=1) if X.shape[1] else np.zeros(X.shape[0], np.int64)
    E = np.where(E == lowest, 0, E)
    if not nz.any():
        return E, {}
    # The lowest mantissa bit of X_rk sits at 2^(e - 53), i.e. E_r - e + 53 below the
    # row's top: that many bits, w per plane, describe every entry exactly.
    depth = int(np.where(nz, E[:, None] - e, 0).max()) + 53
    n_planes = -(-depth // w)
    if n_planes >= 1024:                                       # int64 limb sums could overflow
        raise ValueError("exponent spread too wide for the int64 limb accumulator")
    planes = {}
    R = X.copy()
    for p in range(n_planes):
        sh = (w * (p + 1) - E)[:, None]
        # Multiplying by a power of two that is itself a normal float64 is ldexp (same
        # rounding, only in the subnormal range) and several times faster.
        fast = np.abs(sh).max() <= 1000
        d = np.trunc(R * np.ldexp(1.0, sh) if fast else np.ldexp(R, sh))  # |d| < 2^w
        if d.any():
            planes[p] = d
            R -= d * np.ldexp(1.0, -sh) if fast else np.ldexp(d, -sh)     # exact
            if not R.any():
                break
    return E, planes


def _exact_split(A, B):
    """Exact product by error-free digit splitting; see :func:`exact_matmul`."""
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        return np.zeros((m, n))
    w = _digit_width(k)
    E, pa = _digits(A, w)
    F, pb = _digits(np.ascontiguousarray(B.T), w)
    if not pa or not pb:
        return np.zeros((m, n))
    ka, kb = sorted(pa), sorted(pb)
    D = ka[-1] + kb[-1]
    # One GEMM of stacked digit planes: (|pa| m x k) @ (k x |pb| n); exact (see Notes).
    SA = np.concatenate([pa[p] for p in ka], axis=0)
    SB = np.concatenate([pb[q] for q in kb], axis=0).T
    G = (SA @ SB).reshape(len(ka), m, len(kb), n)
    # |Z| < k 2^(w(D+2)): limbs 0 .. D+2 plus room for the factor k and a sign limb.
    nlimb = D + 4 + -(-k.bit_length() // w)
    L = np.zeros((nlimb, m, n), dtype=np.int64)                # little-endian limbs, base 2^w
    for a, p in enumerate(ka):
        for b, q in enumerate(kb):
            L[D - p - q] += G[a, :, b, :].astype(np.int64)     # |G| <= 2^53: exact
    L = L.reshape(nlimb, m * n)
    # value = Z * 2^(E_i + F_j - w(D+2)),  Z = sum_l L_l 2^(w l)
    scale_exp = (E[:, None] + F[None, :]).reshape(-1) - w * (D + 2)
    return _round_limbs(L, w, -scale_exp).reshape(m, n)


def _normalize(L, w):
    """Carry-propagate int64 limbs (base ``2^w``) in place; top limb keeps the sign."""
    for j in range(L.shape[0] - 1):
        c = L[j] >> w                                          # floor division by 2^w
        L[j] -= c << w
        L[j + 1] += c
    return L


def _round_limbs(L, w, e):
    """``RN(Z 2^-e)`` for ``Z = sum_l L_l 2^(w l)`` (int64 limbs) and int64 ``e``."""
    L = _normalize(L.copy(), w)
    neg = L[-1] < 0
    L = _normalize(np.where(neg, -L, L), w)                    # magnitude, all limbs >= 0
    nl = L.shape[0]
    # Bit length nb of |Z|.
    top = np.where(L != 0, np.arange(nl)[:, None], -1).max(axis=0)
    ltop = np.take_along_axis(L, np.maximum(top, 0)[None, :], axis=0)[0]
    nb = np.where(top >= 0, w * top + np.frexp(ltop.astype(np.float64))[1], 0)
    # Keep bits from position r up: 53 significant bits, but never below 2^-1074.
    r = np.maximum(np.maximum(nb - 53, e - 1074), 0).astype(np.int64)
    Y = np.zeros_like(r)                                       # floor(|Z| / 2^r) < 2^54
    for j in range(nl):
        sh = w * j - r
        part = np.where(sh >= 0, L[j] << np.clip(sh, 0, 62), L[j] >> np.clip(-sh, 0, 63))
        Y += np.where(sh < 54, part, 0)                        # limbs above nb are zero
    # Guard bit r-1 and sticky (any bit below r-1), from the limb holding bit r-1.
    g = np.maximum(r - 1, 0)
    gl, go = g // w, g % w
    lg = np.take_along_axis(L, np.minimum(gl, nl - 1)[None, :], axis=0)[0]
    # gl >= nl: bit r-1 lies above every limb, so |Z| < 2^(r-1): guard 0, Y 0 -> 0.
    guard = np.where((r >= 1) & (gl < nl), (lg >> go) & 1, 0)
    below = np.logical_or.accumulate(L != 0, axis=0)           # any non-zero limb <= l
    lower = np.where(gl >= 1, np.take_along_axis(below, np.clip(gl - 1, 0, nl - 1)[None, :],
                                                 axis=0)[0], False)
    sticky = (r >= 1) & (((lg & ((np.int64(1) << go) - 1)) != 0) | lower)
    Y = Y + (guard & (sticky | (Y & 1)).astype(np.int64))
    with np.errstate(over="ignore"):
        out = np.ldexp(Y.astype(np.float64), np.clip(r - e, -2200, 2200).astype(np.int32))
    return np.where(neg, -out, out)


# --------------------------------------------------------------------------- errors


def relative_errors(C, C_exact):
    """Element-wise relative error ``|C - E| / |E|``.

    Parameters
    ----------
    C : array_like
        Computed result.
    C_exact : array_like
        Reference (e.g. :func:`exact_matmul`), same shape.

    Returns
    -------
    ndarray of float64
        ``|C - E| / |E|``, with these conventions where the quotient is undefined:
        ``E == 0``: 0 if ``C == 0`` (either sign), else ``inf`` (a non-zero answer to
        an exactly zero product is infinitely wrong in the relative sense);
        ``E = ±inf`` (the exact product overflows): 0 if ``C == E``, else ``inf``;
        NaN in ``C``: ``inf``. The difference is formed without spurious overflow
        (halved operands when ``|C - E|`` would exceed the float64 range).
    """
    if np.iscomplexobj(C) or np.iscomplexobj(C_exact):
        return _complex_relative_errors(C, C_exact)
    C = np.asarray(C, dtype=np.float64)
    E = np.asarray(C_exact, dtype=np.float64)
    C, E = np.broadcast_arrays(C, E)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        d = np.abs(C - E)
        big = np.isinf(d) & np.isfinite(C) & np.isfinite(E)
        d = np.where(big, np.inf, d)
        rel = np.where(big, np.abs(C * 0.5 - E * 0.5) / np.abs(E * 0.5), d / np.abs(E))
    fin = np.isfinite(E)
    rel = np.where(E == 0, np.where(C == 0, 0.0, np.inf), rel)
    rel = np.where(~fin, np.where(C == E, 0.0, np.inf), rel)
    rel = np.where(np.isnan(C), np.inf, rel)
    return rel


def _complex_relative_errors(C, C_exact):
    """``|C - E| / |E|`` with the complex modulus (the conventions of
    :func:`relative_errors`; the difference is formed part by part, the modulus with
    :func:`numpy.hypot`, so nothing overflows spuriously)."""
    C = np.asarray(C, dtype=np.complex128)
    E = np.asarray(C_exact, dtype=np.complex128)
    C, E = np.broadcast_arrays(C, E)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        h = 0.5
        d = np.hypot(C.real * h - E.real * h, C.imag * h - E.imag * h)
        e = np.hypot(E.real * h, E.imag * h)
        rel = d / e
    fin = np.isfinite(E)
    rel = np.where(E == 0, np.where(C == 0, 0.0, np.inf), rel)
    rel = np.where(~fin, np.where(C == E, 0.0, np.inf), rel)
    rel = np.where(np.isnan(C), np.inf, rel)
    return rel


@_native_products
def reference_blas_matmul(A, B):
    """``A @ B`` in float64 in the reference BLAS's loop order: netlib's ``dgemm``
    (no transposes) runs, for each column ``j`` and ``l = 1 .. k``,
    ``C(:, j) += B(l, j) * A(:, l)`` — every element summed in order along ``k``, each
    product and sum rounded. A second native DGEMM beside the BLAS NumPy links.

    Parameters
    ----------
    A : ndarray (m, k), B : ndarray (k, n)
        Real operands (computed in float64).

    Returns
    -------
    ndarray (m, n) float64
    """
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    C = np.zeros((A.shape[0], B.shape[1]))
    for l in range(A.shape[1]):
        C += A[:, l:l + 1] * B[l:l + 1, :]
    return C


@_native_products
def native_error_level(A, B, C_exact=None):
    """Native DGEMM's max relative error on ``A @ B``: the larger of the linked BLAS's
    (``np.matmul`` with interception suspended) and the reference BLAS's loop order
    (:func:`reference_blas_matmul`), over the elements whose exact value is finite and
    non-zero.

    Why two: native's max relative error is decided at the output's most cancelling
    element, where one implementation's rounding is a single draw; on a small output
    that draw moves by more than 30x between summation orders (OpenBLAS's Haswell and
    SkylakeX kernels, for one). "At least as accurate as native" means as accurate as
    native DGEMM is, not as one build happened to be on one element (docs/precision.md).

    Parameters
    ----------
    A, B : ndarray
        Real 2-D operands.
    C_exact : ndarray, optional
        ``exact_matmul(A, B)`` if already computed.

    Returns
    -------
    float
    """
    E = exact_matmul(A, B) if C_exact is None else C_exact
    level = 0.0
    with np.errstate(all="ignore"):
        for C in (np.matmul(A, B), reference_blas_matmul(A, B)):
            r = relative_errors(C, E)
            r = r[np.isfinite(r)]
            if r.size:
                level = max(level, float(r.max()))
    return level


def max_relative_error(C, C_exact):
    """``max |C - E| / |E|`` over all elements (conventions of :func:`relative_errors`).

    Parameters
    ----------
    C, C_exact : array_like
        Computed and exact results of the same shape.

    Returns
    -------
    float
        0.0 for empty arrays.
    """
    rel = relative_errors(C, C_exact)
    return float(rel.max()) if rel.size else 0.0


# --------------------------------------------------------------------------- bound


def _up(x):
    """Round a round-to-nearest result up to a value >= the exact one.

    If ``fl(x) < x`` the exact ``x`` lies within half a spacing above ``fl(x)``, so the
    next float up is ``>= x``; for non-negative finite values this is rigorous.
    """
    return np.nextafter(x, np.inf)


@_native_products
def error_bound(A, B, plan=None, C=None):
    """Rigorous per-element bound on ``|C - A B|`` for an Ozaki-II product, computed
    independently of the engines' certificate (from the exact truncation errors).

    With the equilibrated operands (``docs/spec.md`` §2.1; ``A_e B_e = A B`` exactly), the
    exponents ``s, t`` of the count the product used, ``A' = trunc(A_e 2^s)``,
    ``B' = trunc(B_e 2^t)`` and the truncation errors ``dA = A_e - A' 2^-s``,
    ``dB = B_e - B' 2^-t``:

        A B - A' B' 2^-(s+t) = dA B_e + (A' 2^-s) dB,

    and the pipeline returns ``C = RN(A'B' 2^-(s+t))`` exactly rounded once, whose
    error is at most ``u |C| + 2^-1075`` (``u = 2^-53``). Hence

        |C - A B|_ij <= sum_k (|dA_ik| |B_e,kj| + |A'_ik 2^-s_i| |dB_kj|) + u |C_ij| + 2^-1075.

    The truncation errors enter exactly (they are computable without rounding, see
    Notes) rather than through ``2^-s_i``: for operands of one sign every term pushes
    the same way and the bound is then attained up to ``O(k u)``.

    Parameters
    ----------
    A : array_like, shape (m, k)
    B : array_like, shape (k, n)
        The finite float64 operands.
    plan : Plan, optional
        The plan the product was computed with (``scheme="ozaki2"``); default
        ``ozaki_backend.plan(m, n, k)``.
    C : array_like, shape (m, n), optional
        The computed product; default: computed with ``plan`` on the CPU engine.

    Returns
    -------
    ndarray of float64, shape (m, n)
        An upper bound on ``|C - A B|`` for every element (``inf`` only where the
        bound itself exceeds the float64 range).

    Raises
    ------
    ValueError
        For a ``precision="fp64"`` product that the certificate sent to the residual pass
        or the native GEMM (this bound describes the integer product only; use
        ``matmul(..., return_bound=True)`` for those).

    Notes
    -----
    Evaluation is rigorous although it runs in float64 round-to-nearest. Everything
    is computed in the scaled domain, where no intermediate overflows:
    ``a = |frac(A_e 2^s)| = |dA| 2^s`` (exact: ``x - trunc(x)`` is exact in IEEE
    arithmetic; ``A_e 2^s`` is exact unless it is subnormal), ``|B_e 2^t|``, ``|A'|``
    and ``b = |dB| 2^t``, all non-negative. Then

        T = a @ |B_e 2^t| + |A'| @ b,      bound = T 2^-(s+t) + u|C| + 2^-1075.

    * A float64 GEMM of non-negative data of inner length ``k``, in any order and with
      or without FMA, returns ``G >= (1 - γ_k) G_exact - k η`` (``γ_k = ku/(1-ku)``,
      ``η = 2^-1074`` covering underflowed products), so
      ``T <= (G_1 + G_2 + 2kη)/(1 - γ_k) <= (G_1 + G_2 + 2kη)(1 + 2(k+2)u)`` for
      ``ku <= 1/4``. The factor ``1 + 2(k+2)u`` is an exact float64.
    * Subnormal scaled operands: rounding ``A_e 2^s`` (or ``B_e 2^t``) loses at most
      ``η/2`` per entry; its effect on ``T`` is at most ``k η (max|B_e 2^t| + max|A'| +
      2)`` per element, added as an explicit slack (it is about 2^-900 or less).
    * Every other step (the additions, the product with the factor) is rounded to
      nearest and then moved one float up (``nextafter(·, +inf)``), which makes it an
      upper bound; ``ldexp`` is exact except for subnormal results (error ``<= η/2``,
      covered by adding ``η``) and overflows to ``+inf`` (still a bound).
    """
    from .plan import Plan
    from .reference import equilibrate, pipeline, scaling

    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"error_bound needs 2-D operands (m, k) @ (k, n); "
                         f"got {A.shape} and {B.shape}")
    m, k = A.shape
    n = B.shape[1]
    if plan is None:
        plan = Plan(m, n, k)
    if plan.scheme != "ozaki2":
        raise NotImplementedError("error_bound covers scheme='ozaki2' only")
    res = None
    if C is None or plan.adaptive:
        res = pipeline.ozaki2_2d(A, B, plan) if k and m and n else None
        if res is not None and res.outcome in (pipeline.RESIDUAL, pipeline.NATIVE):
            raise ValueError(f"the product took the {res.outcome}: error_bound describes "
                             "the integer product only")
        if C is None:
            C = res.C if res is not None else np.zeros((m, n))
    C = np.asarray(C, dtype=np.float64)
    if C.shape != (m, n):
        raise ValueError(f"C has shape {C.shape}; expected {(m, n)}")
    # The one rounding: u|C| + 2^-1075. ldexp(|C|, -53) is exact unless subnormal
    # (then it errs by <= η/2), so u|C| + 2^-1075 <= ldexp(|C|, -53) + η.
    rounding = _up(np.ldexp(np.abs(C), -53) + ETA)
    if k == 0 or m == 0 or n == 0:
        return rounding
    A0, B0 = A, B
    A, B, _ = equilibrate.equilibrate(A, B)
    st = scaling.statistics(A, B, plan.mode)
    N = res.n_moduli if plan.adaptive and res is not None else plan.n_moduli
    N = max(N, 2)     # 0: every element computed from its terms (bounded below)
    s, t = scaling.shifts(st, N, plan.mode)
    As = np.ldexp(A, s[:, None])                   # exact unless subnormal
    Bs = np.ldexp(B, t[None, :])
    Ai = np.trunc(As)                              # A' (spec §3)
    Bi = np.trunc(Bs)
    a = np.abs(As - Ai)                            # |dA| 2^s   (exact subtraction)
    b = np.abs(Bs - Bi)
    G = _up(np.abs(Ai) @ b + a @ np.abs(Bs))
    big = max(float(np.abs(Bs).max()), float(np.abs(Ai).max()), 1.0)
    slack = _up(_up((2.0 * k * ETA) * _up(big + 2.0)) + 2.0 * k * ETA)  # underflow terms
    factor = 1.0 + 2.0 * (k + 2) * U64             # exact for k < 2^50
    T = _up(_up(G + slack) * factor)
    with np.errstate(over="ignore"):
        W = np.ldexp(T, -(s[:, None] + t[None, :]).astype(np.int64).clip(-4000, 4000))
    out = _up(_up(W + ETA) + rounding)
    patched = None if res is None else res.patched
    if patched is not None and patched.any():
        # Elements computed from their terms (a float64 dot product, the one- or
        # two-term direct formula): within every DGEMM's gamma_k (|A||B|) + k eta.
        AB = exact_matmul(np.abs(A0), np.abs(B0))
        g = _up(_up(k * U64) / (1 - k * U64))
        with np.errstate(over="ignore"):
            nat = _up(_up(_up(g * _up(AB * (1 + 2 * U64))) + k * ETA) + rounding)
        out = np.where(patched, nat, out)
    return out


# --------------------------------------------------------------------------- sampled rows


def _array_module(x):
    """NumPy, or CuPy for a CuPy array (CuPy is imported only then)."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


@_native_products
def sampled_rows_reference(A_rows, B):
    """Double-double ``(hi, lo)`` of ``A_rows @ B`` from exact slice products.

    The oracle of ``python -m ozaki_backend bench``: products too large for
    :func:`exact_matmul` are judged on a sample of rows, on the device that holds them.
    Each row of ``A_rows`` and each column of ``B`` is scaled by a power of two to a
    largest magnitude in ``[1/2, 1)`` and cut into 5 integer slices of
    ``b = (53 - ceil(log2 k)) // 2`` bits; every slice product is then an exact float64
    GEMM (integer sums below 2^53), and the 25 products are added, smallest
    magnitudes first, in double-double (TwoSum).

    Parameters
    ----------
    A_rows : numpy or cupy float64 (r, k)
        The sampled rows of A (a few: the slices hold five copies of ``B``).
    B : numpy or cupy float64 (k, n)
        Same array module as ``A_rows``. Both finite.

    Returns
    -------
    hi, lo : float64 (r, n), the operands' array module
        ``hi + lo`` is the product. Entries more than ``5 b`` bits below the largest
        of their row (of A) or column (of B) are truncated there, and the
        double-double sum rounds in ``lo``: far below float64's unit roundoff for the
        benchmark's matrices, but not a proof (:func:`exact_matmul` is exact).
    """
    xp = _array_module(A_rows)
    A = A_rows
    k = A.shape[1]
    b = (53 - int(np.ceil(np.log2(max(k, 2))))) // 2
    nslices = 5

    def scale_rows(X):
        _, e = xp.frexp(X)
        e = xp.where(X != 0, e, -1100).max(axis=1)
        e = xp.where(e == -1100, 0, e)
        return xp.ldexp(X, -e[:, None]), e

    As, ea = scale_rows(A)
    Bs, eb = scale_rows(B.T)
    Bs = Bs.T

    def slices(X):
        out = []
        r = X
        for _ in range(nslices):
            r = xp.ldexp(r, b)
            h = xp.trunc(r)
            out.append(h)
            r = r - h
        return out

    SA, SB = slices(As), slices(Bs)
    terms = []
    for p in range(nslices):
        for q in range(nslices):
            terms.append((p + q, SA[p] @ SB[q]))   # exact: integer sums < 2^53
    terms.sort(key=lambda t: -t[0])                # smallest magnitudes first
    hi = xp.zeros((A.shape[0], B.shape[1]))
    lo = xp.zeros_like(hi)
    for d, P in terms:
        x = xp.ldexp(P, -b * (d + 2))
        s = hi + x                                 # TwoSum
        bb = s - hi
        err = (hi - (s - bb)) + (x - bb)
        hi, lo = s, lo + err
    s = hi + lo
    lo = lo - (s - hi)
    hi = s
    sc = (ea[:, None] + eb[None, :])
    return xp.ldexp(hi, sc), xp.ldexp(lo, sc)


def sampled_rows_error(C_rows, ref):
    """``max |C - (hi + lo)| / |hi|`` over the elements where ``hi != 0``.

    Parameters
    ----------
    C_rows : numpy or cupy float64 (r, n)
        The computed rows, same array module as ``ref``.
    ref : (hi, lo)
        From :func:`sampled_rows_reference`.

    Returns
    -------
    float
        0.0 when every ``hi`` is zero (elements with ``hi == 0`` are not counted).
    """
    hi, lo = ref
    xp = _array_module(hi)
    nz = hi != 0
    diff = xp.abs((C_rows - hi) - lo)
    if not bool(nz.any()):
        return 0.0
    return float(xp.max(xp.where(nz, diff / xp.abs(xp.where(nz, hi, 1.0)), 0.0)))
