"""Symmetric products on the GPU: bitwise the CPU engine's, exactly symmetric, one set of
residue planes and the upper block triangle only.

Marked ``gpu``: skipped where CuPy or a CUDA device is missing.
"""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import _stats
from ozaki_backend.plan import Plan

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu


def _x(shape, order="C", seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, size=shape))
    X[rng.random(shape) < 0.05] = 0.0
    return np.asarray(X, order=order)


SHAPES = [(1, 1), (1, 9), (9, 1), (3, 300), (130, 5), (67, 131), (300, 257), (700, 40)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("mode", ["accurate", "fast"])
def test_symmetric_products_match_the_cpu_engine_bit_for_bit(shape, order, mode):
    X = _x(shape, order, seed=sum(shape))
    D = cupy.asarray(X, order=order)
    for A, B, dA, dB in ((X.T, X, D.T, D), (X, X.T, D, D.T)):
        ref = ob.matmul(A, B, engine="cpu", mode=mode)
        assert_same_bits(ref, ref.T)
        host = ob.matmul(A, B, engine="cuda", mode=mode)          # NumPy in, NumPy out
        assert_same_bits(host, ref)
        dev = ob.matmul(dA, dB, engine="cuda", mode=mode)         # CuPy in, CuPy out
        assert_same_bits(dev.get(), ref)


@pytest.mark.parametrize("N", [2, 7, 16, 20])
def test_every_fixed_count_matches(N):
    X = _x((257, 90), seed=N)
    plan = Plan(257, 257, 90, moduli=N)
    assert_same_bits(plan.matmul(X, X.T, engine="cuda"), plan.matmul(X, X.T, engine="cpu"))


def test_large_products_take_the_triangle_and_count_it():
    # 4096 rows: 16 panels of 256 rows (the GPU's smallest), 17/32 of the work
    X = _x((4096, 96), seed=1)
    _stats.reset()
    D = cupy.asarray(X)
    C = ob.matmul(D, D.T, engine="cuda")
    work, general = _stats.last_symmetric_work()
    assert work / general <= 0.55
    assert_same_bits(C.get(), C.T.get())
    assert_same_bits(C.get(), ob.matmul(X, X.T, engine="cpu"))


def test_alpha_beta_with_an_asymmetric_c_is_applied_after_the_mirror():
    X = _x((64, 20), seed=2)
    c = _x((64, 64), seed=3)
    ref = ob.plan(64, 64, 20).matmul(X, X.T, engine="cpu", alpha=0.5, beta=2.0, c=c)
    D = cupy.asarray(X)
    got = ob.plan(64, 64, 20).matmul(D, D.T, engine="cuda", alpha=0.5, beta=2.0,
                                     c=cupy.asarray(c))
    assert_same_bits(got.get(), ref)


def test_small_budgets_tile_the_triangle_without_changing_a_bit():
    X = _x((1000, 300), seed=4)
    ref = ob.matmul(X, X.T, engine="cpu")
    D = cupy.asarray(X)
    # 64 MiB: one set of planes, whole rows; 12 MiB: narrower tiles; 8 MiB: the planes
    # no longer fit, each tile makes its own.
    for budget in (None, 64 << 20, 12 << 20, 8 << 20):
        got = ob.matmul(D, D.T, engine="cuda", workspace=budget)
        assert_same_bits(got.get(), ref)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_operands_give_the_librarys_answer(bad):
    X = _x((50, 30), seed=5)
    X[7, 3] = bad
    with np.errstate(invalid="ignore"):
        got = ob.matmul(X.T, X, engine="cuda")
        np.testing.assert_array_equal(got, np.matmul(X.T, X))


def test_routed_numpy_calls_are_symmetric_and_match_the_cpu_engine(clean_dispatch):
    X = _x((3000, 257), seed=6)
    ref = ob.matmul(X.T, X, engine="cpu")
    with ob.enabled(engine="cuda", min_size=0):
        results = [X.T @ X, np.matmul(X.T, X), np.dot(X.T, X)]
    for C in results:
        assert_same_bits(C, ref)
    assert ob.stats()["symmetric"]["products"] >= 3
