"""Symmetric products through the public entry points: ``ozaki_backend.matmul`` and the
routed NumPy calls (``@``, ``np.matmul``, ``np.dot``) on views of one buffer are
exactly symmetric, like NumPy's ``syrk``, and ``stats()`` shows the symmetric path."""

import numpy as np
import pytest

import ozaki_backend as ob

from bits import assert_same_bits


def _x(shape, order="C", seed=0):
    rng = np.random.default_rng(seed)
    return np.asarray(rng.standard_normal(shape) * np.exp2(rng.integers(-5, 5, size=shape)),
                      order=order)


@pytest.mark.parametrize("order", ["C", "F"])
def test_matmul_of_transposed_views_is_exactly_symmetric(order, clean_dispatch):
    X = _x((120, 37), order)
    for A, B in ((X.T, X), (X, X.T)):
        C = ob.matmul(A, B, engine="cpu")
        assert_same_bits(C, C.T)
        out = np.empty((A.shape[0], A.shape[0]))
        assert ob.matmul(A, B, engine="cpu", out=out) is out
        assert_same_bits(out, C)
    assert ob.stats()["symmetric"]["products"] == 4


def test_routed_numpy_calls_take_the_symmetric_path(clean_dispatch):
    X = _x((90, 50), seed=1)
    with ob.enabled(engine="cpu", min_size=0):
        results = [X.T @ X, np.matmul(X, X.T), np.dot(X.T, X), np.dot(X, X.T)]
    for C in results:
        assert_same_bits(C, C.T)
    s = ob.stats()
    assert s["symmetric"]["products"] == 4
    assert s["symmetric"]["work"] < s["symmetric"]["general_work"]
    from ozaki_backend.dispatch import format_stats

    assert "symmetric products: 4" in format_stats(s)


def test_a_copy_takes_the_general_path(clean_dispatch):
    X = _x((60, 20), seed=2)
    ob.matmul(np.array(X.T), X, engine="cpu")
    assert ob.stats()["symmetric"].get("products", 0) == 0


def test_stacks_of_transposed_views_are_symmetric_per_slice(clean_dispatch):
    X = _x((3, 40, 25), seed=3)
    C = ob.matmul(X.transpose(0, 2, 1), X, engine="cpu")
    for i in range(3):
        assert_same_bits(C[i], C[i].T)
    assert ob.stats()["symmetric"]["products"] == 3
