"""precision="fp64" on the GPU: the exponent spread computed by the CUDA engine's
kernels (``oz_row_exponent_stats``, ``oz_spread``) and the moduli count chosen from it
are bitwise those of the CPU reference (``docs/spec.md`` §1), and so are the products.

Marked ``gpu``: skipped where CuPy or a CUDA device is missing.
"""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.calibrate import case_operands
from ozaki_backend.plan import Plan
from ozaki_backend.reference import scaling as rsc
from ozaki_backend.reference.engine import product_2d as ref_2d

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu


def _bits(x):
    return np.ascontiguousarray(x, dtype=np.float64).view(np.int64)


def _views(A):
    """The same values as C order, F order and a strided (every other column) view."""
    yield "C", A
    yield "F", np.asfortranarray(A)
    wide = np.zeros((A.shape[0], 2 * A.shape[1]))
    wide[:, ::2] = A
    yield "strided", wide[:, ::2]


def _special(rng, m, k):
    """Zero rows and entries, a subnormal row, extremes, a single-entry row."""
    A = (rng.random((m, k)) - 0.5) * np.exp(3.0 * rng.standard_normal((m, k)))
    A[rng.random((m, k)) < 0.1] = 0.0
    if m > 5 and k > 2:
        A[1] = 0.0
        A[2] = (rng.random(k) - 0.5) * 1e-310
        A[3, :2] = (5e-324, -1.7e308)
        A[4, 1:] = 0.0
    return A


FAMILIES = [("phi", -1.0), ("phi", 1.0), ("phi", 4.0), ("outliers", 8), ("outliers", 20)]
SHAPES = [(1, 1, 1), (7, 3, 5), (37, 53, 29), (129, 300, 65), (64, 1000, 17), (300, 40, 270)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_row_statistics_match_reference(m, k, n):
    from ozaki_backend.cuda import scaling

    rng = np.random.default_rng(m + 3 * k + 7 * n)
    A = _special(rng, m, k)
    _, e = np.frexp(A)
    nz = A != 0
    want_sum = np.where(nz, e, 0).sum(axis=1)
    want_cnt = nz.sum(axis=1)
    want_E, want_nz = rsc.row_exponents(A)
    for name, Av in _views(A):
        Emax, Esum, Ecnt = scaling.row_exponent_stats(cupy.asarray(Av))
        Emax = Emax.get()
        assert (Esum.get() == want_sum).all(), name
        assert (Ecnt.get() == want_cnt).all(), name
        assert (Emax[want_nz] == want_E[want_nz]).all(), name
        assert (Emax[~want_nz] == -(2 ** 31)).all(), name


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("family,param", FAMILIES + [("special", None)])
def test_spread_and_moduli_match_reference(m, k, n, family, param):
    from ozaki_backend.cuda import scaling

    if family == "special":
        rng = np.random.default_rng(m * 7 + k)
        A, B = _special(rng, m, k), _special(rng, n, k).T.copy()
    else:
        A, B = case_operands(m, n, k, family, param, 1)
    want = rsc.exponent_spread(A, B)
    for name, Av in _views(A):
        for bname, Bv in (("C", B), ("T", np.ascontiguousarray(B.T).T)):
            dA, dB = cupy.asarray(Av), cupy.asarray(Bv)
            emax, spread, _, _ = scaling.spread_and_flag(dA, dB)
            assert spread == want, (name, bname)
            assert emax <= 1024
            for mode in ("fast", "accurate"):
                p = Plan(m, n, k, mode=mode)
                N, exps = scaling.choose_moduli(dA, dB, p, check_finite=True)
                assert N == p.moduli_for(A, B) == p.moduli_for(dA, dB), (name, bname, mode)
                assert exps is not None


def test_nonfinite_flag_and_fixed_plans():
    from ozaki_backend.cuda import scaling

    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((20, 30)), rng.standard_normal((30, 10))
    p = Plan(20, 10, 30)
    for bad in (np.inf, -np.inf, np.nan):
        A2 = A.copy()
        A2[3, 4] = bad
        assert scaling.choose_moduli(cupy.asarray(A2), cupy.asarray(B), p,
                                     check_finite=True) == (None, None)
        B2 = B.copy()
        B2[7, 2] = bad
        assert scaling.choose_moduli(cupy.asarray(A), cupy.asarray(B2), p,
                                     check_finite=True) == (None, None)
    fixed = Plan(20, 10, 30, moduli=13)
    assert scaling.choose_moduli(cupy.asarray(A), cupy.asarray(B), fixed)[0] == 13
    assert scaling.choose_moduli(cupy.asarray(A), cupy.asarray(B), fixed,
                                 check_finite=True)[0] == 13


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("family,param", FAMILIES)
def test_products_bitwise_equal_reference(family, param, mode, clean_dispatch):
    m, k, n = 90, 257, 70
    A, B = case_operands(m, n, k, family, param, 2)
    p = ob.plan(m, n, k, mode=mode)
    N = p.moduli_for(A, B)
    ref = ref_2d(A, B, p)
    np.testing.assert_array_equal(_bits(ref), _bits(ref_2d(A, B, p.resolve(A, B))))
    got = ob.matmul(A, B, mode=mode, engine="cuda")            # NumPy in / out
    np.testing.assert_array_equal(_bits(got), _bits(ref))
    assert ob.stats()["last_moduli"] == N
    gd = ob.matmul(cupy.asarray(A), cupy.asarray(B), mode=mode)  # CuPy in / out
    np.testing.assert_array_equal(_bits(gd.get()), _bits(ref))
    assert ob.stats()["moduli"].get(N, 0) >= 2


def test_stacked_operands_choose_per_slice():
    rng = np.random.default_rng(6)
    A = np.stack([rng.standard_normal((40, 60)),
                  case_operands(40, 30, 60, "outliers", 20, 0)[0]])
    B = rng.standard_normal((60, 30))
    p = ob.plan(40, 30, 60)
    Ns = [p.moduli_for(A[i], B) for i in range(2)]
    assert Ns[0] < Ns[1]
    got = ob.matmul(A, B, engine="cuda")
    gd = ob.matmul(cupy.asarray(A), cupy.asarray(B)).get()
    for i in range(2):
        ref = ref_2d(A[i], B, p)
        np.testing.assert_array_equal(_bits(got[i]), _bits(ref))
        np.testing.assert_array_equal(_bits(gd[i]), _bits(ref))


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_small_tiles_and_alpha_beta(mode, monkeypatch):
    """The adaptive count with the tiled path (forced small tiles) and alpha/beta."""
    from ozaki_backend.cuda import pipeline

    monkeypatch.setattr(pipeline, "TILE_OVERRIDE", (64, 64))
    A, B = case_operands(150, 170, 90, "phi", 2.0, 3)
    C0 = np.random.default_rng(7).standard_normal((150, 170))
    p = ob.plan(150, 170, 90, mode=mode)
    ref = ref_2d(A, B, p)
    out = cupy.empty((150, 170))
    pipeline.product_into(cupy.asarray(A), cupy.asarray(B), p, out, alpha=-0.5, beta=2.0,
                          C0=cupy.asarray(C0))
    from ozaki_backend.reference.crt import apply_alpha_beta

    np.testing.assert_array_equal(_bits(out.get()), _bits(apply_alpha_beta(ref, -0.5, 2.0,
                                                                           C0)))
