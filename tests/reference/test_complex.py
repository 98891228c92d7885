"""The complex scheme on the CPU (``docs/spec.md`` §11), stage by stage and end to end
against the exact complex oracle.

Tolerances: the rigorous bound the pipeline returns (``return_bound``) plus the
oracle's own half-ulp rounding of each part, and the issue's accuracy goal (at most
twice native's max relative error); nothing is guessed.
"""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.plan import Plan
from ozaki_backend.reference import complex as cx
from ozaki_backend.reference import modgemm, residues, scaling
from ozaki_backend.spec.complex_moduli import MAX_COMPLEX_MODULI, complex_crt_constants
from ozaki_backend.spec.moduli import MIN_MODULI
from ozaki_backend.testing import (exact_complex_matmul, family_operands, max_relative_error,
                                   phi_matrix)

from bits import assert_same_bits
from complex_cases import DIRECT_CASES, direct_cases

PHIS = (-1.0, 0.5, 2.0)


def cmat(shape, phi, rng):
    """Complex operand with independent phi-distributed real and imaginary parts."""
    return phi_matrix(shape, phi, rng) + 1j * phi_matrix(shape, phi, rng)


def gaussian_ints(shape, rng, bound):
    return (rng.integers(-bound, bound + 1, shape).astype(np.float64)
            + 1j * rng.integers(-bound, bound + 1, shape).astype(np.float64))


def exact_int_product(A, B):
    """Exact Gaussian-integer product with Python ints: ``(Re, Im)`` as object arrays."""
    Ar, Ai = A.real.astype(np.int64).astype(object), A.imag.astype(np.int64).astype(object)
    Br, Bi = B.real.astype(np.int64).astype(object), B.imag.astype(np.int64).astype(object)
    return Ar.dot(Br) - Ai.dot(Bi), Ar.dot(Bi) + Ai.dot(Br)


def within_bound(C, b, E):
    """``|C - E| <= b + half an ulp of each part of E`` (E: the oracle, per part within
    half an ulp of the exact value; b: the rigorous bound on ``|C - AB|``)."""
    tol = b + (np.spacing(np.abs(E.real)) + np.spacing(np.abs(E.imag))) / 2
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(((np.abs(C - E) <= tol) | (C == E)).all())


# --------------------------------------------------------------------------- stages


def test_gaussian_map_round_trip():
    """(x, y) -> (x + r y, x - r y) -> recombination gives (x, y) mod m back."""
    rng = np.random.default_rng(0)
    cc = complex_crt_constants(MAX_COMPLEX_MODULI)
    N = cc.n
    h = np.array([(p - 1) // 2 for p in cc.moduli])[:, None, None]
    x = (rng.integers(-10**6, 10**6, (N, 9, 11)) % (2 * h + 1) - h).astype(np.int8)
    y = (rng.integers(-10**6, 10**6, (N, 9, 11)) % (2 * h + 1) - h).astype(np.int8)
    U, V = cx.gaussian_residues(x, y, cc.moduli, cc.roots)
    assert U.dtype == np.int8 and (np.abs(U.astype(int)) <= h).all()
    p = np.array(cc.moduli)[:, None, None]
    re, im = cx.recombine((U.astype(np.int16) % p).astype(np.int16),
                          (V.astype(np.int16) % p).astype(np.int16), cc)
    assert (re == x.astype(int) % p).all() and (im == y.astype(int) % p).all()


@pytest.mark.parametrize("l", [0, 3, 4, MAX_COMPLEX_MODULI - 1])
def test_one_modulus_against_python_ints(l):
    """Two real modular products and the recombination give Re and Im of the exact
    Gaussian-integer product modulo m_l (221 = 13*17 and 205 = 5*41 included)."""
    rng = np.random.default_rng(l)
    cc = complex_crt_constants(MAX_COMPLEX_MODULI)
    A = gaussian_ints((6, 37), rng, 10**9)
    B = gaussian_ints((37, 5), rng, 10**9)
    mods = cc.moduli
    RAr, RAi = residues.residues(A.real, mods), residues.residues(A.imag, mods)
    RBr, RBi = residues.residues(B.real, mods), residues.residues(B.imag, mods)
    UA, VA = cx.gaussian_residues(RAr, RAi, mods, cc.roots)
    UB, VB = cx.gaussian_residues(RBr, RBi, mods, cc.roots)
    c1 = modgemm.modular_products(UA, UB, mods)
    c2 = modgemm.modular_products(VA, VB, mods)
    re, im = cx.recombine(c1, c2, cc)
    Re, Im = exact_int_product(A, B)
    p = mods[l]
    assert (re[l].astype(object) == Re % p).all()
    assert (im[l].astype(object) == Im % p).all()


@pytest.mark.parametrize("N", [MIN_MODULI, 9, MAX_COMPLEX_MODULI])
def test_crt_recovers_the_exact_gaussian_integer_product(N):
    """With zero shifts the pipeline returns the exact integer product (every part
    below 2^53 here, and within H)."""
    rng = np.random.default_rng(N)
    H = complex_crt_constants(N).H
    k = 23
    bound = int(np.sqrt(H / (2 * k)))
    bound = min(bound, 2**20)
    A = gaussian_ints((7, k), rng, bound)
    B = gaussian_ints((k, 4), rng, bound)
    z = np.zeros(7, np.int64), np.zeros(4, np.int64)
    re, im = cx.integer_product(A.real, A.imag, B.real, B.imag, z[0], z[1], N)
    Re, Im = exact_int_product(A, B)
    assert (re.astype(np.int64).astype(object) == Re).all()
    assert (im.astype(np.int64).astype(object) == Im).all()


@pytest.mark.parametrize("mode", ["accurate", "fast"])
@pytest.mark.parametrize("N", [MIN_MODULI, 8, 16, MAX_COMPLEX_MODULI])
def test_tied_shifts_keep_the_invariant(mode, N):
    """|Re A'B'| and |Im A'B'| sums of magnitudes stay <= H (spec §11.1), exactly."""
    rng = np.random.default_rng(N)
    A, B = cmat((5, 40), 2.0, rng), cmat((40, 6), 2.0, rng)
    Ar, Ai, Br, Bi = cx.equilibrate_parts(A.real, A.imag, B.real, B.imag)
    st = scaling.statistics(*cx.embed(Ar, Ai, Br, Bi), mode)
    s, t = cx.shifts(st, N, mode)
    assert (t[:6] == t[6:]).all()
    tr = [scaling.truncate(X, s).astype(object) for X in (Ar, Ai)]
    tb = [scaling.truncate(X.T, t[:6]).T.astype(object) for X in (Br, Bi)]
    ar, ai = [np.vectorize(abs)(x) for x in tr]
    br, bi = [np.vectorize(abs)(x) for x in tb]
    H = complex_crt_constants(N).H
    assert ((ar.dot(br) + ai.dot(bi)) <= H).all()
    assert ((ar.dot(bi) + ai.dot(br)) <= H).all()


def test_shifts_are_monotone_in_the_count():
    rng = np.random.default_rng(5)
    A, B = cmat((8, 30), 0.5, rng), cmat((30, 7), 0.5, rng)
    st = scaling.statistics(*cx.embed(A.real, A.imag, B.real, B.imag), "accurate")
    prev = None
    for N in range(MIN_MODULI, MAX_COMPLEX_MODULI + 1):
        s, t = cx.shifts(st, N, "accurate")
        if prev is not None:
            assert (s >= prev[0]).all() and (t >= prev[1]).all()
        prev = (s, t)


# --------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 7, 5), (17, 33, 9), (64, 129, 31)])
def test_end_to_end_within_bound_and_native_accuracy(phi, shape):
    m, k, n = shape
    rng = np.random.default_rng(m * 1000 + k)
    A, B = cmat((m, k), phi, rng), cmat((k, n), phi, rng)
    ob.reset_stats()
    C, b = ob.matmul(A, B, engine="cpu", return_bound=True)
    assert "native fallback" not in ob.stats()["certificate"]      # emulated, not NumPy's
    assert C.dtype == np.complex128
    E = exact_complex_matmul(A, B)
    assert within_bound(C, b, E)
    assert max_relative_error(C, E) <= 2 * max(max_relative_error(A @ B, E), 2.0**-53)


@pytest.mark.parametrize("mode", ["accurate", "fast"])
@pytest.mark.parametrize("kw", [dict(moduli=MIN_MODULI), dict(moduli=7), dict(bits=30),
                                dict(moduli=20)])
def test_fixed_counts_are_within_their_bound(mode, kw):
    rng = np.random.default_rng(11)
    A, B = cmat((9, 50), 0.5, rng), cmat((50, 8), 0.5, rng)
    C, b = ob.matmul(A, B, engine="cpu", return_bound=True, mode=mode, **kw)
    assert within_bound(C, b, exact_complex_matmul(A, B))
    p = Plan(9, 8, 50, mode=mode, **kw)
    assert cx.moduli_for(A, B, p) == cx.fixed_count(p, 50)


@pytest.mark.parametrize("which", ["A", "B"])
def test_real_times_complex_is_the_promoted_product(which):
    rng = np.random.default_rng(3)
    A, B = cmat((12, 40), 0.5, rng), cmat((40, 10), 0.5, rng)
    if which == "A":
        A = A.real.copy()
    else:
        B = B.real.copy()
    C, b = ob.matmul(A, B, engine="cpu", return_bound=True)
    assert C.dtype == np.complex128
    E = exact_complex_matmul(A, B)
    assert within_bound(C, b, E)
    assert max_relative_error(C, E) <= 2 * max(max_relative_error(A @ B, E), 2.0**-53)


def test_scale_invariance():
    """Scaling A by 2^e scales every output bit pattern's exponent by e (spec §2.1)."""
    rng = np.random.default_rng(4)
    A, B = cmat((10, 60), 2.0, rng), cmat((60, 12), 2.0, rng)
    C = ob.matmul(A, B, engine="cpu")
    C2 = ob.matmul(A * 2.0**37, B, engine="cpu")
    assert_same_bits(C2, C * 2.0**37)


def test_stacks_and_empty():
    rng = np.random.default_rng(6)
    A, B = cmat((3, 8, 20), 0.5, rng), cmat((20, 5), 0.5, rng)
    C = ob.matmul(A, B, engine="cpu")
    for i in range(3):
        assert_same_bits(C[i], ob.matmul(A[i], B, engine="cpu"))
    Z = ob.matmul(np.zeros((4, 0), complex), np.zeros((0, 3), complex), engine="cpu")
    assert Z.dtype == np.complex128 and Z.shape == (4, 3) and not Z.any()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, complex(0, np.nan),
                                 complex(np.inf, 1)])
def test_non_finite_gives_numpys_answer(bad):
    rng = np.random.default_rng(8)
    A, B = cmat((6, 9), -1.0, rng), cmat((9, 4), -1.0, rng)
    A[2, 3] = bad
    with np.errstate(invalid="ignore"):
        assert_same_bits(ob.matmul(A, B, engine="cpu"), np.matmul(A, B))
        assert_same_bits(ob.matmul(B.T, A.T, engine="cpu"), np.matmul(B.T, A.T))


def test_cancellation_falls_back_or_certifies_a_posteriori():
    """Exactly cancelling real parts: every element still within its bound."""
    rng = np.random.default_rng(9)
    A = cmat((8, 64), -1.0, rng)
    Y = cmat((32, 6), -1.0, rng)
    B = np.vstack([Y, -Y + 1e-12 * cmat((32, 6), -1.0, rng)])
    with np.errstate(all="ignore"):
        C, b = ob.matmul(A, B, engine="cpu", return_bound=True)
    assert within_bound(C, b, exact_complex_matmul(A, B))


@pytest.mark.slow
@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("k", [1024, 4096, 16384])
def test_accuracy_long_k(phi, k):
    rng = np.random.default_rng(k)
    A, B = cmat((24, k), phi, rng), cmat((k, 20), phi, rng)
    ob.reset_stats()
    C, b = ob.matmul(A, B, engine="cpu", return_bound=True)
    assert "native fallback" not in ob.stats()["certificate"]
    E = exact_complex_matmul(A, B)
    assert within_bound(C, b, E)
    assert max_relative_error(C, E) <= 2 * max_relative_error(A @ B, E)


@pytest.mark.slow
def test_residual_pass():
    """phi = 3 at k = 4096: no count certifies a priori or a posteriori; the residual
    pass does (spec §11.4), and its bound holds."""
    rng = np.random.default_rng(0)
    A, B = cmat((64, 4096), 3.0, rng), cmat((4096, 64), 3.0, rng)
    res = cx.complex_2d(A, B, Plan(64, 64, 4096), want_bound=True)
    assert res.outcome == "residual pass" and res.n_moduli == MAX_COMPLEX_MODULI
    E = exact_complex_matmul(A, B)
    assert within_bound(res.C, res.bound, E)
    assert max_relative_error(res.C, E) <= 2 * max_relative_error(A @ B, E)


def test_native_fallback_is_numpys_and_warned():
    """Real and imaginary parts with unrelated row (A) and column (B) scalings, 2^±60:
    the cross terms leave elements uncertifiable; the product is NumPy's own, warned."""
    rng = np.random.default_rng(1)
    A1, B1 = family_operands("graded", 40, 300, 30, rng)
    A2, B2 = family_operands("graded", 40, 300, 30, rng)
    A, B = A1 + 1j * A2, B1 + 1j * B2
    with pytest.warns(ob.NativeFallbackWarning):
        C = ob.matmul(A, B, engine="cpu")
    assert_same_bits(C, np.matmul(A, B))


# --------------------------------------------------------------------------- direct elements

@pytest.mark.parametrize("name", DIRECT_CASES)
def test_elements_of_one_or_two_terms_are_computed_directly(name):
    """§11.4: the embedding's elements of at most two terms are the real scheme's
    direct values (``spec.direct_values`` of their terms: the one product, or the
    compensated two-term sum), certified without a warning — no native fallback, not
    the 22 moduli and residual pass a truncation would need for ``d`` over ten decades;
    the other elements are the integer product's."""
    import warnings
    from ozaki_backend.spec import certificate as spec
    A, B = direct_cases(np.random.default_rng(3))[name]
    ob.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C, b = ob.matmul(A, B, engine="cpu", return_bound=True)
    st = ob.stats()
    assert st["certificate"] == {"certified": 1}
    assert within_bound(C, b, exact_complex_matmul(A, B))
    # the direct elements' values, term by term (B's column j has at most one entry
    # per part in the direct columns; Re = ar br - ai bi, Im = ar bi + ai br)
    cols = np.nonzero((B != 0).sum(axis=0) == 1)[0]
    rows = np.nonzero((A != 0).sum(axis=1) == 1)[0]
    for j in cols:
        q = int(np.nonzero(B[:, j])[0][0])
        a, bq = A[:, q], np.full(A.shape[0], B[q, j])
        re, _ = spec.direct_values(a.real, bq.real, -a.imag, bq.imag, np.ones(len(a), bool))
        im, _ = spec.direct_values(a.real, bq.imag, a.imag, bq.real, np.ones(len(a), bool))
        assert_same_bits(C[:, j].real, re)
        assert_same_bits(C[:, j].imag, im)
    direct_only = name != "mixed"
    assert bool(st["moduli"]) != direct_only
    P = ob.plan(A.shape[0], B.shape[1], A.shape[1], engine="cpu")
    assert (P.moduli_for(A, B) == 0) == direct_only
    if len(rows) == A.shape[0]:
        assert direct_only


def test_a_fixed_count_reports_direct_elements_uncertified():
    """A fixed count computes every element by the integer product, so elements that
    ``precision="fp64"`` would compute directly leave it uncertified (as the real
    scheme's, §10.6)."""
    A, B = direct_cases(np.random.default_rng(4))["diagonal"]
    ob.reset_stats()
    ob.matmul(A, B, engine="cpu", moduli=20)
    assert ob.stats()["certificate"] == {"uncertified": 1}
