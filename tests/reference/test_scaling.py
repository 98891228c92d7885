"""Stage 1 (scaling): exponents, quantisation, and the exactness invariant."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.spec.moduli import crt_constants, lambda_exponent
from ozaki_backend.reference import scaling


def _max_abs_dot(Ai, Bi):
    """max_ij sum_k |A'_ik| |B'_kj| with Python integers (exact)."""
    a = np.abs(Ai).astype(object)
    b = np.abs(Bi).astype(object)
    a = np.vectorize(int, otypes=[object])(a)
    b = np.vectorize(int, otypes=[object])(b)
    return max(max(row) for row in (a @ b).tolist())


def test_lambda_is_exact():
    H_f = crt_constants(5).H_f
    for x in [1.0, 3.0, 2.0**40 + 1, H_f, H_f * 0.75, 12345.0]:
        lam = int(lambda_exponent(np.array([x]), H_f)[0])
        assert np.ldexp(x, lam) <= H_f < np.ldexp(x, lam + 1)


def test_row_exponents_bound_every_entry():
    A = np.array([[0.0, 0.0], [1.0, -0.75], [5e-324, 0.0], [1e300, -3e-300]])
    E, nz = scaling.row_exponents(A)
    assert list(nz) == [False, True, True, True]
    assert E[0] == 0
    for i in (1, 2, 3):
        assert (np.abs(A[i]) < np.ldexp(1.0, int(E[i]))).all()
        assert np.abs(A[i]).max() >= np.ldexp(1.0, int(E[i]) - 1)


def test_quantize_is_an_upper_bound_and_tight():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((6, 50)) * 2.0 ** rng.integers(-1000, 1000, (6, 1))
    A[0, :3] = [5e-324, -1e-310, 0.0]
    E, _ = scaling.row_exponents(A)
    for D in (6, 16):
        alpha = scaling.quantize(A, E, D)
        bound = np.ldexp(alpha, (E - D)[:, None])
        assert (np.abs(A) <= bound).all()
        assert ((alpha == 0) == (A == 0)).all()
        assert alpha.max() <= 2**D
        # tight: removing one unit would break the bound for every entry above 2^(E-D)
        big = alpha > 1
        assert (np.abs(A)[big] > np.ldexp(alpha - 1, (E - D)[:, None])[big]).all()


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("n_moduli", [2, 5, 8, 13, 20])
def test_invariant_holds_exactly(mode, n_moduli):
    rng = np.random.default_rng(n_moduli)
    A = np.abs(rng.standard_normal((7, 33))) * np.exp(4 * rng.standard_normal((7, 33)))
    B = np.abs(rng.standard_normal((33, 5))) * np.exp(4 * rng.standard_normal((33, 5)))
    A[2] = 0.0
    B[:, 3] = 0.0
    p = ob.plan(7, 5, 33, moduli=n_moduli, mode=mode)
    s, t = scaling.exponents(A, B, p)
    Ai, Bi = scaling.truncate(A, s), scaling.truncate(B.T, t).T
    assert _max_abs_dot(Ai, Bi) <= crt_constants(n_moduli).H


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_scale_invariance(mode):
    rng = np.random.default_rng(3)
    A = rng.standard_normal((5, 20))
    B = rng.standard_normal((20, 4))
    p = ob.plan(5, 4, 20, moduli=14, mode=mode)
    s, t = scaling.exponents(A, B, p)
    A2 = A.copy()
    A2[1] *= 2.0**-600
    B2 = B * 2.0**300
    s2, t2 = scaling.exponents(A2, B2, p)
    np.testing.assert_array_equal(s2 - s, [0, 600, 0, 0, 0])
    np.testing.assert_array_equal(t2 - t, -300)
    np.testing.assert_array_equal(scaling.truncate(A2, s2), scaling.truncate(A, s))


def test_guaranteed_bits_are_kept():
    from ozaki_backend.spec.rules import guaranteed_bits

    rng = np.random.default_rng(4)
    for mode in ("fast", "accurate"):
        for n_moduli, k in [(8, 64), (14, 1000), (20, 5000)]:
            A = rng.standard_normal((4, k))
            B = rng.standard_normal((k, 3))
            p = ob.plan(4, 3, k, moduli=n_moduli, mode=mode)
            s, t = scaling.exponents(A, B, p)
            E, _ = scaling.row_exponents(A)
            F, _ = scaling.row_exponents(B.T)
            assert ((s + E) >= guaranteed_bits(n_moduli, k)).all()
            assert ((t + F) >= guaranteed_bits(n_moduli, k)).all()


@pytest.mark.parametrize("seed", range(3))
def test_the_transposed_product_orientation(seed):
    """Fast mode scales each side on its own, so ``(B^T A^T)^T`` has ``A B``'s bits;
    accurate mode serves the rows first (spec §2, accurate mode), so the transposed
    product may keep other bits — and both orientations stay within the rigorous
    bound of the count they used (plus half an ulp: the bound is on ``|C - A B|``,
    the comparison against the rounded exact product)."""
    from ozaki_backend.testing import error_bound, exact_matmul

    rng = np.random.default_rng(seed)
    A = rng.standard_normal((40, 300)) * np.exp2(rng.integers(-12, 12, (40, 1)))
    B = rng.standard_normal((300, 24))
    fast = ob.matmul(A, B, mode="fast", engine="cpu")
    np.testing.assert_array_equal(
        fast, ob.matmul(B.T.copy(), A.T.copy(), mode="fast", engine="cpu").T)
    exact = exact_matmul(A, B)
    for X, Y, E in ((A, B, exact), (B.T.copy(), A.T.copy(), exact.T)):
        C = ob.matmul(X, Y, engine="cpu")
        used = ob.plan(X.shape[0], Y.shape[1], X.shape[1],
                       moduli=ob.stats()["last_moduli"])
        bound = error_bound(X, Y, used, C)
        assert np.all(np.abs(C - E) <= bound + np.spacing(np.abs(E)) / 2)
