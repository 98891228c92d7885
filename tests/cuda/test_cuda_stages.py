"""CUDA engine, stage by stage, bitwise against the CPU reference (``docs/spec.md``).

Marked ``gpu``: skipped where CuPy or a CUDA device is missing.
"""

import numpy as np
import pytest

from ozaki_backend.spec.moduli import MAX_MODULI, MIN_MODULI, MODULI, crt_constants
from ozaki_backend.plan import Plan
from ozaki_backend.reference import crt as rcrt
from ozaki_backend.reference import modgemm as rmod
from ozaki_backend.reference import residues as rres
from ozaki_backend.reference import scaling as rsc

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu


def _data(rng, m, k, phi=2.0, zero_rows=True, extremes=False):
    """Wide exponent spread, zero rows/entries, optionally subnormals and huge values."""
    A = (rng.random((m, k)) - 0.5) * np.exp(phi * rng.standard_normal((m, k)))
    A[rng.random((m, k)) < 0.05] = 0.0
    if zero_rows and m > 2:
        A[1] = 0.0
    if extremes and m > 4 and k > 2:
        A[2] = (rng.random(k) - 0.5) * 1e-310      # subnormal row
        A[3] = (rng.random(k) - 0.5) * 1e300       # huge row
        A[4, 0] = 5e-324
        A[4, 1] = -1.7e308
    return A


def _shapes():
    return [(1, 1, 1), (37, 53, 29), (65, 130, 67), (128, 64, 96), (3, 300, 5)]


def _views(A):
    """The same values as C order, F order and a strided (every other column) view."""
    yield "C", A
    yield "F", np.asfortranarray(A)
    wide = np.zeros((A.shape[0], 2 * A.shape[1]))
    wide[:, ::2] = A
    yield "strided", wide[:, ::2]


def _b_views(B):
    yield "C", B
    yield "T", np.ascontiguousarray(B.T).T


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("m,k,n", _shapes())
def test_exponents_match_reference(m, k, n, mode):
    from ozaki_backend.cuda import scaling

    rng = np.random.default_rng(m * 1000 + k + n)
    A = _data(rng, m, k, extremes=True)
    B = _data(rng, n, k, extremes=True).T.copy()
    for N in (2, 9, 16, 20):
        plan = Plan(m, n, k, moduli=N, mode=mode)
        s_ref, t_ref = rsc.exponents(A, B, plan)
        for (_, Av), (_, Bv) in zip(_views(A), _views(B)):
            s, t = scaling.exponents(cupy.asarray(Av), cupy.asarray(Bv), plan)
            np.testing.assert_array_equal(s.get(), s_ref)
            np.testing.assert_array_equal(t.get(), t_ref)


def test_exponents_with_tiled_bound_matrix():
    """Accurate mode with P computed tile by tile (as when it does not fit)."""
    from ozaki_backend.cuda import scaling
    from ozaki_backend.cuda._common import round_up

    rng = np.random.default_rng(7)
    m, k, n = 150, 70, 130
    A, B = _data(rng, m, k), _data(rng, k, n)
    plan = Plan(m, n, k, moduli=14, mode="accurate")
    s_ref, t_ref = rsc.exponents(A, B, plan)
    s, t = scaling.exponents(cupy.asarray(A), cupy.asarray(B), plan, tile=(64, 48))
    np.testing.assert_array_equal(s.get(), s_ref)
    np.testing.assert_array_equal(t.get(), t_ref)
    assert round_up(k, 16) == 80


@pytest.mark.parametrize("blocks", [1, 7])
@pytest.mark.parametrize("m,k,n", [(37, 1000, 29), (65, 300, 67), (130, 2100, 40)])
def test_exponents_with_quantisation_tiles_along_k(monkeypatch, blocks, m, k, n):
    """The bound GEMM's quantisation with several tiles along k per block (the row sums
    added once per block; chosen for large grids only, forced here): 16 tiles or as
    many as there are, and a few per block with a ragged last block."""
    from ozaki_backend.cuda import scaling

    monkeypatch.setattr(scaling, "_QUANTIZE_BLOCKS", blocks)
    kt, rt = -(-k // 64), -(-m // 32)
    assert scaling.quantize_tiles(kt, rt) > 1
    rng = np.random.default_rng(m + k + n)
    A, B = _data(rng, m, k), _data(rng, k, n)
    plan = Plan(m, n, k, moduli=15, mode="accurate")
    s_ref, t_ref = rsc.exponents(A, B, plan)
    for (_, Av), (_, Bv) in zip(_views(A), _b_views(B)):
        s, t = scaling.exponents(cupy.asarray(Av), cupy.asarray(Bv), plan)
        np.testing.assert_array_equal(s.get(), s_ref)
        np.testing.assert_array_equal(t.get(), t_ref)


def test_truncate_matches_reference():
    from ozaki_backend.cuda import scaling

    rng = np.random.default_rng(3)
    A = _data(rng, 40, 70, extremes=True)
    plan = Plan(40, 40, 70, moduli=16)
    s, _ = rsc.exponents(A, A.T.copy(), plan)
    for _, Av in _views(A):
        got = scaling.truncate(cupy.asarray(Av), cupy.asarray(s)).get()
        assert_same_bits(got, rsc.truncate(A, s))


@pytest.mark.parametrize("N", [2, 5, 12, 16, 20])
def test_residues_match_reference(N):
    from ozaki_backend.cuda import residues

    rng = np.random.default_rng(N)
    # integers of every magnitude up to 2^170, both signs, as exact float64
    mant = rng.integers(-(2 ** 53) + 1, 2 ** 53, size=(23, 77)).astype(np.float64)
    Aint = np.ldexp(mant, rng.integers(-60, 118, size=mant.shape))
    Aint = np.trunc(Aint)
    Aint[0, :5] = [0.0, -0.0, 1.0, -1.0, 128.0]
    ref = rres.residues(Aint, MODULI[:N])
    for _, Av in _views(Aint):
        got = residues.residues(cupy.asarray(Av), MODULI[:N]).get()
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_fused_residue_planes_match_reference(mode):
    """The production pass (truncation fused, B read through its transpose, padding)."""
    from ozaki_backend.cuda import residues
    from ozaki_backend.cuda._common import round_up

    rng = np.random.default_rng(11)
    m, k, n, N = 45, 83, 38, 16
    A, B = _data(rng, m, k, extremes=True), _data(rng, k, n)
    plan = Plan(m, n, k, moduli=N, mode=mode)
    s, t = rsc.exponents(A, B, plan)
    refA = rres.residues(rsc.truncate(A, s), plan.moduli)
    refB = rres.residues(rsc.truncate(B.T, t).T, plan.moduli)
    kpad = round_up(k, 16)
    for (_, Av), (_, Bv) in zip(_views(A), _b_views(B)):
        RA = cupy.full((N, m, kpad), 99, dtype=np.int8)
        RB = cupy.full((N, n, kpad), 99, dtype=np.int8)
        residues.residue_planes_into(cupy.asarray(Av), cupy.asarray(s, dtype=np.int32), RA, N)
        residues.residue_planes_into(cupy.asarray(Bv).T, cupy.asarray(t, dtype=np.int32), RB, N)
        RA, RB = RA.get(), RB.get()
        np.testing.assert_array_equal(RA[:, :, :k], refA)
        np.testing.assert_array_equal(RB[:, :, :k], refB.transpose(0, 2, 1))
        assert not RA[:, :, k:].any() and not RB[:, :, k:].any()  # padding zeroed


@pytest.mark.parametrize("N", [2, 7, 16, 20])
@pytest.mark.parametrize("m,k,n", [(33, 47, 29), (130, 200, 70), (5, 140000, 6)])
def test_modular_products_match_reference(m, k, n, N):
    from ozaki_backend.cuda import modgemm

    if k > 100000 and N not in (2, 16):
        pytest.skip("long k: two moduli counts are enough")
    rng = np.random.default_rng(m + n + N)
    moduli = MODULI[:N]
    lo = np.array([-(p // 2) if p % 2 else -128 for p in moduli])[:, None, None]
    hi = np.array([p // 2 if p % 2 else 127 for p in moduli])[:, None, None]
    RA = rng.integers(lo, hi + 1, size=(N, m, k)).astype(np.int8)
    RB = rng.integers(lo, hi + 1, size=(N, k, n)).astype(np.int8)
    RA[:, 0, :] = lo[:, :, 0]     # extreme products: k * 128^2 for p = 256
    RB[:, :, 0] = lo[:, 0, :]
    ref = rmod.modular_products(RA, RB, moduli)
    for strategy in ("batched", "loop"):
        import os

        os.environ["OZAKI_BACKEND_CUDA_GEMM"] = strategy
        try:
            got = modgemm.modular_products(cupy.asarray(RA), cupy.asarray(RB), moduli).get()
        finally:
            del os.environ["OZAKI_BACKEND_CUDA_GEMM"]
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("N", range(MIN_MODULI, MAX_MODULI + 1))
def test_reconstruct_round_matches_reference(N):
    from ozaki_backend.cuda import crt

    cc = crt_constants(N)
    rng = np.random.default_rng(100 + N)
    m, n = 31, 45
    # X spread over the whole range |X| <= H, plus 0 and the extremes
    c = np.stack([rng.integers(0, p, size=(m, n)) for p in cc.moduli]).astype(np.int16)
    vals = [0, 1, -1, cc.H, -cc.H, cc.H - 1, 2 ** 53 + 1, -(2 ** 53 + 1)]
    for idx, x in enumerate(vals):
        for l, p in enumerate(cc.moduli):
            c[l, 0, idx] = x % p
    # small |X| too (the CRT's high limbs all zero)
    for j in range(n):
        x = int(rng.integers(-2 ** 40, 2 ** 40))
        for l, p in enumerate(cc.moduli):
            c[l, 1, j] = x % p
    for s_range in ((-40, 40), (-1100, -900), (900, 1200), (-2000, 2000)):
        s = rng.integers(*s_range, size=m)
        t = rng.integers(*s_range, size=n)
        ref = rcrt.reconstruct_round(c, cc.moduli, s, t)
        got = crt.reconstruct_round(cupy.asarray(c), cc.moduli, cupy.asarray(s),
                                    cupy.asarray(t)).get()
        assert_same_bits(got, ref)


def test_reconstruct_from_raw_int32_products():
    """The fused pass takes unreduced int32 products (any representative)."""
    from ozaki_backend.cuda import crt

    N = 16
    cc = crt_constants(N)
    rng = np.random.default_rng(5)
    c = np.stack([rng.integers(0, p, size=(20, 30)) for p in cc.moduli]).astype(np.int64)
    raw = c + np.array(cc.moduli)[:, None, None] * rng.integers(
        -(2 ** 30) // 256, (2 ** 30) // 256, size=c.shape)
    s, t = rng.integers(-60, 60, 20), rng.integers(-60, 60, 30)
    ref = rcrt.reconstruct_round(c.astype(np.int16), cc.moduli, s, t)
    got = crt.reconstruct_round(cupy.asarray(raw.astype(np.int32)), cc.moduli,
                                cupy.asarray(s), cupy.asarray(t)).get()
    assert_same_bits(got, ref)
