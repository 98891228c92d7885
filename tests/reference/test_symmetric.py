"""Symmetric products ``x.T @ x`` / ``x @ x.T`` on the CPU engine: detection, exact
symmetry, the error certificate, the work saved, and the cases that must stay NumPy's.

The symmetric path uses ``t = s`` (``reference/scaling.py``'s ``shifts``): in fast mode
that is the general rule's own choice, so the result is bitwise the general product's;
in accurate mode the general rule may keep one more bit of a column, so the two differ
in the last bits, and what holds instead is that the symmetric result meets the same
certificate (every element within its rigorous bound, the same native-level target).
"""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import _stats
from ozaki_backend.plan import Plan
from ozaki_backend.reference import pipeline, symmetric
from ozaki_backend.semantics import transpose_pair
from ozaki_backend.spec.tiling import (mirrored_blocks, symmetric_tiles, symmetric_work,
                                       symmetric_work_fraction)
from ozaki_backend.testing import exact_matmul

from bits import assert_same_bits

ENGINE = "cpu"


def _x(shape, order="C", seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, size=shape))
    return np.asarray(X, order=order)


def _pairs(X):
    return [("x.T @ x", X.T, X), ("x @ x.T", X, X.T)]


# ---------------------------------------------------------------- detection

def test_transposed_views_of_one_buffer_are_a_symmetric_pair():
    X = _x((7, 5))
    assert transpose_pair(X.T, X) and transpose_pair(X, X.T)
    F = np.asfortranarray(X)
    assert transpose_pair(F.T, F) and transpose_pair(F, F.T)
    S = X[::2, 1:]                                  # strided views too
    assert transpose_pair(S, S.T)


def test_equal_copies_and_other_views_are_not_a_symmetric_pair():
    X = _x((6, 6))
    assert not transpose_pair(X.T.copy(), X)        # equal values, another buffer
    assert not transpose_pair(X, X)                 # same buffer, not transposed
    assert not transpose_pair(X[1:].T, X[:-1])      # shifted
    assert not transpose_pair(X[0], X[0])           # not 2-D
    assert not transpose_pair(X.T, X.astype(np.float32))


# ---------------------------------------------------------------- panels and work

@pytest.mark.parametrize("m", [1, 63, 64, 65, 130, 1000, 1024, 4097])
@pytest.mark.parametrize("max_tile", [None, 100])
def test_tiles_cover_the_upper_triangle_once_and_mirror_the_rest(m, max_tile):
    tiles = symmetric_tiles(m, max_tile=max_tile)
    cover = np.zeros((m, m), dtype=np.int64)
    for i0, i1, j0, j1 in tiles:
        assert 0 <= i0 < i1 <= m and i0 <= j0 < j1 <= m
        if max_tile:
            assert i1 - i0 <= max_tile and j1 - j0 <= max_tile
        cover[i0:i1, j0:j1] += 1
    assert (cover <= 1).all()
    assert (np.triu(cover) == np.triu(np.ones_like(cover))).all()   # upper: once
    mirrored = cover.copy()
    for i0, i1, j0, j1 in mirrored_blocks(tiles):
        mirrored[j0:j1, i0:i1] += 1
    assert (mirrored == 1).all()                   # with the mirrors: everything once
    assert symmetric_work(tiles) == cover.sum()


@pytest.mark.parametrize("m", [1024, 2048, 4096, 8192, 30000, 65536])
def test_large_products_do_at_most_055_of_the_general_work(m):
    assert symmetric_work_fraction(m) <= 0.55


def test_the_work_counter_records_the_triangle():
    X = _x((40, 1024))
    _stats.reset()
    C = ob.matmul(X.T, X, engine=ENGINE, moduli=4)
    work, general = _stats.last_symmetric_work()
    assert general == 1024 * 1024 * 40 * 4
    assert work / general <= 0.55
    assert _stats.snapshot()["symmetric"]["products"] == 1
    assert_same_bits(C, C.T)


# ---------------------------------------------------------------- exact symmetry

SHAPES = [(1, 1), (1, 9), (9, 1), (3, 300), (130, 5), (67, 131), (200, 70)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("mode", ["accurate", "fast"])
def test_symmetric_products_are_exactly_symmetric(shape, order, mode):
    X = _x(shape, order)
    for name, A, B in _pairs(X):
        C = ob.matmul(A, B, engine=ENGINE, mode=mode)
        assert C.shape == (A.shape[0], A.shape[0]), name
        assert_same_bits(C, C.T)


@pytest.mark.parametrize("mode", ["accurate", "fast"])
def test_the_symmetric_result_meets_its_certificate(mode):
    X = _x((90, 70), seed=3)
    for name, A, B in _pairs(X):
        _stats.reset()
        C, bound = ob.matmul(A, B, engine=ENGINE, mode=mode, return_bound=True)
        E = exact_matmul(np.array(A), np.array(B))
        err = np.abs(C - E)
        assert (err <= bound + np.spacing(np.abs(E)) / 2).all(), name
        assert _stats.snapshot()["certificate"] == {"certified": 1}, name
        assert_same_bits(bound, bound.T)


def test_fast_mode_gives_the_general_products_bits():
    """Fast mode's general rule already scales both sides alike (``E = F``, equal sums
    of squares), so the triangle-and-mirror path changes nothing but the work."""
    X = _x((120, 45), seed=4)
    for name, A, B in _pairs(X):
        C = ob.matmul(A, B, engine=ENGINE, mode="fast")
        G = ob.matmul(np.array(A), np.array(B), engine=ENGINE, mode="fast")
        assert_same_bits(C, G)


@pytest.mark.parametrize("mode", ["accurate", "fast"])
def test_the_triangle_equals_the_full_product_with_the_symmetric_scaling(mode):
    """Tiling never changes a bit: the mirrored triangle is the integer product of the
    whole matrix with ``t = s``, for any tiling of the upper triangle."""
    X = _x((150, 33), seed=5)
    A, B = X, X.T
    plan = Plan(150, 150, 33, moduli=9, mode=mode)
    res = pipeline.ozaki2_2d(A, B, plan)
    from ozaki_backend.reference import scaling
    st = scaling.statistics(A, B, mode, symmetric=True)
    s, t = scaling.shifts(st, 9, mode)
    assert_same_bits(s, t)
    full = pipeline.integer_product(A, np.array(B), s, t, 9)        # general loop
    assert_same_bits(res.C, full)
    for tiles in ([(0, 150, 0, 150)], symmetric_tiles(150, min_rows=1),
                  symmetric_tiles(150, max_tile=7),
                  [(i, i + 1, j, j + 1) for i in range(150) for j in range(i, 150)]):
        assert_same_bits(symmetric.integer_product(A, s, 9, tiles), full)


def test_the_moduli_count_is_the_symmetric_products_own():
    X = _x((80, 60), seed=6)
    _stats.reset()
    ob.matmul(X, X.T, engine=ENGINE)
    assert pipeline.moduli_for(X, X.T, Plan(80, 80, 60)) == _stats.last_moduli()


# ---------------------------------------------------------------- the rare paths

@pytest.mark.filterwarnings("ignore::ozaki_backend.NativeFallbackWarning")
def test_a_crossed_pattern_takes_the_residual_pass_and_stays_symmetric():
    """Row scaling truncates the small entries of ``[[1e30, 1e-30], [1e-30, 1e30]]``:
    the off-diagonal element (exactly 2) needs the residual pass, whose remainder
    products are not symmetric; the result is mirrored and still certified."""
    X = np.array([[1e30, 1e-30, 1.0], [1e-30, 1e30, 1.0], [3.0, 1.0, 2.0]])
    _stats.reset()
    C, bound = ob.matmul(X, X.T, engine=ENGINE, return_bound=True)
    assert_same_bits(C, C.T)
    E = exact_matmul(X, X.T)
    assert (np.abs(C - E) <= bound + np.spacing(np.abs(E)) / 2).all()
    assert set(_stats.snapshot()["certificate"]) <= {"certified", "residual pass",
                                                     "native fallback"}


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_operands_give_numpys_answer(bad):
    X = _x((30, 20))
    X[3, 4] = bad
    for name, A, B in _pairs(X):
        with np.errstate(invalid="ignore"):
            C = ob.matmul(A, B, engine=ENGINE)
            np.testing.assert_array_equal(C, np.matmul(A, B), err_msg=name)


def test_symmetrize_keeps_the_upper_triangle():
    C = np.arange(16.0).reshape(4, 4)
    S = symmetric.symmetrize(C.copy())
    assert_same_bits(np.triu(S), np.triu(C))
    assert_same_bits(S, S.T)
