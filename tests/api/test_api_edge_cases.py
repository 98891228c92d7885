"""Edge cases of the public API and the oracle: beta without c, NumPy integer shapes,
empty reductions in the wrappers, and an oracle that never routes through the engine
it judges."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import testing


@pytest.fixture(autouse=True)
def clean_state(clean_dispatch):
    yield


def _ab(m=6, k=7, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


def test_plan_matmul_beta_without_c_raises_instead_of_nan():
    a, b = _ab()
    p = ob.plan(6, 5, 7, engine="cpu")
    with pytest.raises(ValueError, match="beta"):
        p.matmul(a, b, beta=0.5)
    # beta == 0 still ignores c (BLAS convention), alpha alone still works
    ref = p.matmul(a, b)
    assert np.array_equal(p.matmul(a, b, beta=0.0), ref)
    assert np.array_equal(p.matmul(a, b, alpha=2.0), 2.0 * ref)
    c = np.ones((6, 5))
    got = p.matmul(a, b, alpha=1.0, beta=0.5, c=c)
    assert np.isfinite(got).all() and np.array_equal(got, ref + 0.5 * c)


def test_plan_accepts_numpy_integer_shapes():
    p = ob.plan(np.int64(4), np.int32(3), np.intp(5))
    assert (p.m, p.n, p.k) == (4, 3, 5) and type(p.m) is int
    assert p == ob.plan(4, 3, 5)
    with pytest.raises(ValueError):
        ob.plan(np.bool_(True), 3, 5)
    with pytest.raises(ValueError):
        ob.plan(np.int64(-1), 3, 5)


@pytest.mark.parametrize("f, a, b", [
    (np.dot, np.zeros((3, 0)), np.zeros((0, 4))),
    (np.dot, np.zeros((2, 3, 0)), np.zeros((0, 4))),
    (np.inner, np.zeros((3, 0)), np.zeros((4, 0))),
])
def test_empty_reduction_is_not_a_fallback(f, a, b):
    expected = f(a, b)
    with ob.enabled(engine="cpu"):
        got = f(a, b)
    assert got.shape == expected.shape and np.array_equal(got, expected)
    assert ob.stats()["fallback"] == 0


def test_oracle_and_bound_are_never_routed():
    a, b = _ab(40, 50, 30)
    exact = testing.exact_matmul(a, b)
    bound = testing.error_bound(a, b)
    ob.reset_stats()
    with ob.enabled(engine="cpu", min_size=0):
        assert np.array_equal(testing.exact_matmul(a, b), exact)
        assert np.array_equal(testing.exact_matmul(a, b, method="split"), exact)
        assert np.array_equal(testing.error_bound(a, b), bound)
    s = ob.stats()
    assert s["routed"] == 0 and s["routed_by_entry"] == {}


def test_c_that_would_widen_the_result_is_rejected():
    A, B = _ab()
    p = ob.plan(6, 5, 7)
    with pytest.raises(ValueError, match="does not broadcast"):
        p.matmul(A, B, beta=1.0, c=np.ones((3, 6, 5)), engine="cpu")
    row = np.arange(5.0)                  # broadcasts along rows: allowed
    got = p.matmul(A, B, beta=2.0, c=row, engine="cpu")
    np.testing.assert_array_equal(got, ob.matmul(A, B, engine="cpu") + 2.0 * row)
