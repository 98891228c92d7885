"""Layer 5: whole products against the exact product, within a derived a-priori bound.

Exact reference: every float64 is an integer multiple of 2^-1074, so ``A @ B`` is
computed exactly as Python integers in units of 2^-2148 (small sizes only).

Error bound of ``scheme="phase22"`` (``residual=False``), element (i, j). With the
prescaled ``v = A 2^-E``, ``w = B 2^-F`` (``|v|, |w| < 1``), ``Â = hi 2^-17 + lo 2^-34``
and ``Ta = v - Â`` (``|Ta| <= 2^-35``, likewise ``B̂``, ``Tb``):

* truncation: ``|sum_k v w - sum_k Â B̂| = |sum_k Ta w + Â Tb|
  <= 2^-35 sum_k (|w_kj| + |Â_ik|)``;
* the four pass integers are exact, and ``sum_l x_l 2^{s_l} = sum_k Â B̂`` exactly;
  the float64 accumulation (``RN(x_l)``, exact scaling, three rounded additions)
  errs by at most ``gamma_4 S`` with
  ``S = sum_k (|hiA| 2^-17 + |loA| 2^-34)(|hiB| 2^-17 + |loB| 2^-34) >= sum_l |x_l| 2^{s_l}``
  (Higham, recursive summation; ``gamma_n = n u / (1 - n u)``, ``u = 2^-53``);
* the prescale ldexp rounds only below 2^-1022, by at most 2^-1075 per entry in the
  scaled domain: at most ``2k 2^-1075 = k 2^-1074`` on the sum;
* the final ``ldexp(acc, E_i + F_j)`` is exact unless the result is subnormal, where
  it adds at most 2^-1075 (we never test overflow).

So ``|C - AB| <= 2^{E_i+F_j} (2^-35 sum_k(|w|+|Â|) + gamma_4 S + k 2^-1074) + 2^-1075``.

With ``residual=True`` the dropped ``sum_k Ta w + Â Tb`` is added back, computed by
the native float64 GEMM: two dot products of length k (error ``<= gamma_k`` times
their absolute sums, each ``<= 2^-35 sum_k |w|`` resp. ``2^-35 sum_k |Â|``), one
addition, one ldexp, then one addition to the main result. Writing
``tau = 2^-35 sum_k(|w|+|Â|)``:
``|C - AB| <= 2^{E+F} (gamma_4 S + gamma_{k+1} tau + k 2^-1074) + 2 * 2^-1075
+ u/(1-u) |C|``: the truncation term is gone, float64 level remains.

The bounds are evaluated in float64 (sums of at most k + 4 non-negative terms and
products: relative error at most gamma_{k+4} <= 2 (k+4) u) and inflated by
``1 + 4 (k + 4) u``; the comparison itself is exact (Fractions).
"""

from fractions import Fraction

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.spec import seed as T
from ozaki_backend.reference import phase22 as P

from bits import assert_same_bits

U = 2.0 ** -53


def gamma(n):
    return n * U / (1 - n * U)


def _f2i(x):
    p, q = float(x).as_integer_ratio()
    return p * ((1 << 1074) // q)


_to_int = np.frompyfunc(_f2i, 1, 1)


def exact_product(A, B):
    """A @ B exactly, as Python ints in units of 2^-2148 (object array)."""
    if A.shape[1] == 0:
        return np.zeros((A.shape[0], B.shape[1]), dtype=object)
    return np.dot(_to_int(A), _to_int(B))


def bounds_scaled(A, B, residual):
    """Per-element bound in the prescaled domain (float64, inflated), and E, F."""
    k = A.shape[1]
    v, w, E, F = P.prescale(A, B)
    hiA, loA = P.split_hi_lo(v)
    hiB, loB = P.split_hi_lo(w)
    Ah = P.recombine(hiA, loA)
    tau = 2.0 ** -35 * (np.abs(w).sum(axis=0)[None, :] + np.abs(Ah).sum(axis=1)[:, None])
    Sa = np.abs(hiA) * 2.0 ** -17 + np.abs(loA) * 2.0 ** -34
    Sb = np.abs(hiB) * 2.0 ** -17 + np.abs(loB) * 2.0 ** -34
    S = Sa @ Sb
    trunc = gamma(k + 1) * tau if residual else tau
    bnd = trunc + gamma(4) * S + k * 2.0 ** -1074
    return bnd * (1 + 4 * (k + 4) * U), E, F


def max_error_and_check(C, A, B, residual=False):
    """Assert |C - AB| <= bound elementwise (exactly); return (max error, max bound)."""
    assert np.isfinite(C).all()
    ex = exact_product(A, B)
    bnd, E, F = bounds_scaled(A, B, residual)
    tiny = Fraction(1, 2 ** 1075)
    worst_err, worst_bnd = Fraction(0), Fraction(0)
    for i in range(C.shape[0]):
        for j in range(C.shape[1]):
            c = Fraction(C[i, j])
            err = abs(c - Fraction(int(ex[i, j]), 1 << 2148))
            b = Fraction(bnd[i, j]) * Fraction(2) ** (int(E[i]) + int(F[j])) + tiny
            if residual:
                b += tiny + Fraction(U) / (1 - Fraction(U)) * abs(c)
            assert err <= b, (i, j, float(err), float(b))
            worst_err = max(worst_err, err)
            worst_bnd = max(worst_bnd, b)
    return float(worst_err), float(worst_bnd)


def run(A, B, residual=False, **kw):
    m, k = A.shape
    n = B.shape[1]
    return P.matmul_2d(A, B, ob.plan(m, n, k, scheme="phase22", residual=residual), **kw)


# -------------------------------------------------------------------------- tests


def test_plan_is_the_seeds():
    p = ob.plan(10, 20, 10000, scheme="phase22")
    assert p.scheme == "phase22" and p.moduli == T.PRIMES
    assert p.k_chunk == T.K_CHUNK_MAX == 4096 and p.k_split == 3
    assert p.n_gemms == 28


@pytest.mark.parametrize("m,k,n", [(37, 300, 29), (130, 65, 70)])
def test_uniform_random_within_bound(m, k, n):
    rng = np.random.default_rng(m * 1000 + n)
    A = rng.uniform(-1, 1, (m, k))
    B = rng.uniform(-1, 1, (k, n))
    C = run(A, B)
    err, bnd = max_error_and_check(C, A, B)
    assert err > 0  # the scheme keeps ~34 bits: it is not exact on random data
    # the result is a pure function of the data: forcing all 7 primes changes no bit
    assert_same_bits(C, run(A, B, force_nl=7))


def test_integer_inputs_are_exact():
    A = np.array([[3.0, -5.0], [-7.0, 11.0]])
    B = np.array([[-13.0, 17.0], [19.0, -23.0]])
    C = run(A, B)
    assert C.tolist() == [[-134.0, 166.0], [300.0, -372.0]]
    # integers of <= 17 bits per row/column are split exactly (lo = 0): exact product
    rng = np.random.default_rng(1)
    Ai = rng.integers(-2 ** 16, 2 ** 16, (9, 50))
    Bi = rng.integers(-2 ** 16, 2 ** 16, (50, 8))
    C = run(Ai.astype(float), Bi.astype(float))
    assert np.array_equal(C, (Ai @ Bi).astype(float))


def test_long_k_does_not_overflow():
    # k = 10000 > the seed's ~4900 limit: chunks of 4096, 4096, 1808
    k = 10000
    rng = np.random.default_rng(10000)
    A = rng.uniform(-1, 1, (3, k))
    B = rng.uniform(-1, 1, (k, 4))
    max_error_and_check(run(A, B), A, B)
    # worst case for the CRT range: every hi = 2^17 - 1 or close, all of one sign.
    # unchunked, 10000 * 2^34 > M/2 would wrap around
    A = np.full((2, k), 1.0 - 2.0 ** -20)
    B = np.full((k, 3), 1.0 - 2.0 ** -19)
    C = run(A, B)
    max_error_and_check(C, A, B)
    assert abs(C[0, 0] - k * (1.0 - 2.0 ** -20) * (1.0 - 2.0 ** -19)) < 1e-6
    # chunk length is invisible in the result (chunk integers are exact)
    p = ob.plan(2, 3, k, scheme="phase22")
    p.k_chunk = 1000
    assert_same_bits(P.matmul_2d(A, B, p), C)


def test_huge_and_tiny_magnitudes_thanks_to_prescale():
    rng = np.random.default_rng(300)
    m, k, n = 6, 40, 5
    A = rng.uniform(-1, 1, (m, k)) * np.array([1e300, 1e-300, 1.0, 2.0 ** 1000,
                                               2.0 ** -1000, 1e-310])[:, None]
    B = rng.uniform(-1, 1, (k, n)) * np.array([1e-300, 1.0, 1e-8, 2.0 ** -1020,
                                               1e-20])[None, :]
    # keep the result finite: the 1e300 and 2^1000 rows meet column 1 only at 1e-10
    B[:, 1] *= 1e-10
    C = run(A, B)
    assert np.isfinite(C).all()
    # without the prescale, v = 1e300 would give hi ~ 1e305: far outside int64 and
    # the CRT range; with it every row keeps ~34 bits, so the bound (relative to
    # 2^(E_i+F_j)) holds at every magnitude, including the 1e300 x 1e-300 entry ~ 1
    assert 0.01 < abs(C[0, 0]) < 100
    max_error_and_check(C, A, B)


def test_mixed_magnitudes_in_a_row_subnormals_and_zero_lines():
    A = np.array([[1.0, 5e-324, -2.0 ** -1060, 0.0],
                  [0.0, 0.0, 0.0, 0.0],
                  [3e-320, -5e-324, 1e-315, 2.0 ** -1022],
                  [1e200, -1.0, 1e-200, 0.5]])
    B = np.array([[2.0 ** -60, 0.0, 1.0],
                  [1.0, 0.0, -3.0],
                  [7.0, 0.0, 1e-300],
                  [-1.0, 0.0, 2.0 ** 70]])
    C = run(A, B)
    max_error_and_check(C, A, B)
    assert np.all(C[1] == 0) and np.all(C[:, 1] == 0)
    assert not np.signbit(C[1]).any()  # zero products give +0.0


def test_empty_and_k_zero():
    for m, k, n in [(3, 0, 4), (0, 5, 2), (2, 5, 0), (0, 0, 0)]:
        A = np.ones((m, k))
        B = np.ones((k, n))
        for residual in (False, True):
            C = run(A, B, residual=residual)
            assert C.shape == (m, n) and C.dtype == np.float64
            assert np.all(C == 0) and not np.signbit(C).any()


def test_adaptive_nl_small_tile_same_bits_as_nl7():
    # tile (0, 0) = rows 0..127 x columns 0..63 holds values whose lo slice is tiny
    # (|lo| <= 3): its lo passes need only a couple of primes
    rng = np.random.default_rng(128)
    m, k, n = 200, 20, 100
    A = rng.uniform(-1, 1, (m, k))
    B = rng.uniform(-1, 1, (k, n))
    A[:128] = rng.integers(-2 ** 17, 2 ** 17, (128, k)) / 2.0 ** 17 \
        + rng.integers(-3, 4, (128, k)) / 2.0 ** 34
    A[:128, 0] = 0.75  # row exponent 0, so v = A and lo is exactly the small part
    B[:, :64] = rng.integers(-2 ** 17, 2 ** 17, (k, 64)) / 2.0 ** 17 \
        + rng.integers(-3, 4, (k, 64)) / 2.0 ** 34
    B[0, :64] = -0.75
    C, tr = P.matmul_2d_trace(A, B, ob.plan(m, n, k, scheme="phase22"))
    nl_hh, nl_hl, nl_lh, nl_ll = (t[0] for t in tr["nl"])  # one chunk each
    assert nl_hh.shape == (2, 2)
    # lo x lo: k * 3 * 3 = 180 < M_2 / 2 -> nl = 2 (M_1 = 127 is too small)
    assert nl_ll[0, 0] == 2
    # hi x lo: k * 2^17 * 3 ~ 7.9e6 < M_4 / 2 ~ 8.4e7 -> nl = 4
    assert nl_hl[0, 0] == 4 and nl_lh[0, 0] == 4
    # full-precision tiles: 2 k 2^16 2^16 ~ 1.7e11 and (hi x hi) 2 k 2^34 ~ 6.9e11 are
    # both below M_6 ~ 1.74e12 (and above M_5 ~ 1.7e10) at k = 20
    assert nl_ll[1, 1] == 6 and nl_hh.tolist() == [[6, 6], [6, 6]]
    assert int(np.abs(tr["loA"][:128]).max()) <= 3
    forced = run(A, B, force_nl=7)
    assert_same_bits(C, forced)
    max_error_and_check(C[:40, :40], A[:40], B[:, :40])


def test_residual_reaches_float64_level():
    rng = np.random.default_rng(24)
    m, k, n = 40, 200, 30
    A = rng.uniform(-1, 1, (m, k))
    B = rng.uniform(-1, 1, (k, n))
    C0 = run(A, B)
    C1 = run(A, B, residual=True)
    err0, _ = max_error_and_check(C0, A, B)
    err1, bnd1 = max_error_and_check(C1, A, B, residual=True)
    # the residual guarantee (float64 level) is smaller than what the 34-bit scheme
    # actually loses on this data: residual=True is strictly more accurate
    assert err1 <= bnd1 < err0
    # main part of the residual result is the bitwise main result
    _, tr = P.matmul_2d_trace(A, B, ob.plan(m, n, k, scheme="phase22", residual=True))
    assert_same_bits(tr["C_main"], C0)


def test_input_validation():
    A = np.ones((2, 3))
    B = np.ones((3, 4))
    with pytest.raises(ValueError):
        P.matmul_2d(A, B, ob.plan(2, 4, 3))  # an ozaki2 plan
    with pytest.raises(ValueError):
        P.matmul_2d(A, B, ob.plan(2, 4, 5, scheme="phase22"))
    Bn = B.copy()
    Bn[0, 0] = np.nan
    with pytest.raises(ValueError):
        P.matmul_2d(A, Bn, ob.plan(2, 4, 3, scheme="phase22"))


def test_public_api_routes_phase22_to_this_engine():
    # fails loudly until the lead routes scheme="phase22" plans to reference.phase22
    rng = np.random.default_rng(5)
    A = rng.uniform(-1, 1, (7, 33))
    B = rng.uniform(-1, 1, (33, 6))
    for residual in (False, True):
        got = ob.matmul(A, B, scheme="phase22", engine="cpu", residual=residual)
        want = run(A, B, residual=residual)
        if residual:
            # the tail GEMM is native float64: same machine and call, same bits
            assert np.array_equal(got, want)
        else:
            assert_same_bits(got, want)
