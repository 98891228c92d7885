"""ozaki_backend.warm_up: the GPU engine's one-time costs paid ahead of the first
product, with nothing counted (its speed is measured by the bench, not here)."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import _stats
from bits import assert_same_bits


def test_warm_up_on_the_cpu_engine_does_nothing():
    ob.reset_stats()
    assert ob.warm_up("cpu") == "cpu"
    assert _stats.snapshot()["counts"] == {}


def test_warm_up_names_an_unknown_engine():
    with pytest.raises(ValueError, match="engine must be one of"):
        ob.warm_up("gpu")


def test_products_inside_not_counted_are_not_recorded_and_others_are():
    ob.reset_stats()
    A = np.arange(12.0).reshape(3, 4)
    with _stats.not_counted():
        ob.matmul(A, A.T, engine="cpu")
    assert _stats.snapshot()["counts"] == {} and _stats.last_moduli() is None
    ob.matmul(A, A.T, engine="cpu")
    snap = _stats.snapshot()
    assert sum(snap["counts"].values()) == 1 and sum(snap["moduli"].values()) == 1


@pytest.mark.gpu
def test_warm_up_on_the_gpu_counts_nothing_and_changes_no_bit():
    import cupy

    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((300, 200)), rng.standard_normal((200, 100))
    ob.reset_stats()
    assert ob.warm_up("cuda") == "cuda"
    snap = _stats.snapshot()
    assert snap["counts"] == {} and snap["moduli"] == {} and snap["certificate"] == {}
    got = ob.matmul(cupy.asarray(A), cupy.asarray(B), engine="cuda", emulation="eager")
    assert_same_bits(cupy.asnumpy(got), ob.matmul(A, B, engine="cpu"))


def test_warm_up_checks_its_shapes_before_anything_else():
    # checked on every engine: a typo fails where it is written, not on the GPU machine
    assert ob.warm_up("cpu", shapes=[8, (2, 3, 4), np.int64(5)]) == "cpu"
    with pytest.raises(TypeError, match="int n or"):
        ob.warm_up("cpu", shapes=[(2, 3)])
    with pytest.raises(TypeError, match="int n or"):
        ob.warm_up("cpu", shapes=[(2.0, 3, 4)])
    with pytest.raises(ValueError, match=">= 1"):
        ob.warm_up("cpu", shapes=[0])


@pytest.mark.gpu
def test_warm_up_with_a_shape_counts_nothing_and_changes_no_bit():
    import cupy

    ob.reset_stats()
    assert ob.warm_up("cuda", shapes=[(300, 200, 100)]) == "cuda"
    snap = _stats.snapshot()
    assert snap["counts"] == {} and snap["moduli"] == {} and snap["certificate"] == {}
    rng = np.random.default_rng(4)
    A, B = rng.standard_normal((300, 200)), rng.standard_normal((200, 100))
    got = ob.matmul(cupy.asarray(A), cupy.asarray(B), engine="cuda", emulation="eager")
    assert_same_bits(cupy.asnumpy(got), ob.matmul(A, B, engine="cpu"))
