"""What a call reuses from the calls before it (issue 18: host time per call): the plan
of a shape and its options, and 2-D operands passed on without new views. Reuse must
never change which plan — hence which bits — a call gets."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import _api, semantics

from bits import assert_same_bits


@pytest.fixture
def fresh_plans():
    _api._cached_plan.cache_clear()
    yield
    _api._cached_plan.cache_clear()


def _operands(m=24, k=40, n=16, seed=0):
    rng = np.random.default_rng(seed)
    # An exponent spread, so that the fixed counts below give different bits (and
    # the default precision still certifies: no native fallback).
    A = rng.standard_normal((m, k)) * np.exp2(rng.integers(-8, 8, (m, k)))
    B = rng.standard_normal((k, n)) * np.exp2(rng.integers(-8, 8, (k, n)))
    return A, B


def test_a_shape_and_options_make_one_plan_and_later_calls_reuse_it(fresh_plans):
    A, B = _operands()
    ob.matmul(A, B, engine="cpu")
    info = _api._cached_plan.cache_info()
    assert (info.misses, info.hits) == (1, 0)
    ob.matmul(A, B, engine="cpu")
    ob.matmul(A, B, engine="cpu", mode="accurate")      # the default, said aloud
    info = _api._cached_plan.cache_info()
    assert (info.misses, info.hits) == (1, 2)
    ob.matmul(A, B, engine="cpu", bits=20)              # other options: another plan
    ob.matmul(A[:, :-1], B[:-1], engine="cpu")          # another shape: another plan
    assert _api._cached_plan.cache_info().misses == 3


OPTION_SETS = ({}, {"bits": 20}, {"moduli": 9}, {"bits": 20, "mode": "fast"},
               {"moduli": 9, "mode": "fast"}, {"mode": "fast"})


def test_reused_plans_give_the_bits_of_a_plan_made_for_the_call(fresh_plans):
    # Every option set in turn, twice, in one process: a plan keyed on too little
    # would hand one option set's plan to another and change the bits.
    A, B = _operands()
    want = [ob.plan(24, 16, 40, engine="cpu", **o).matmul(A, B) for o in OPTION_SETS]
    for _ in range(2):
        for o, w in zip(OPTION_SETS, want):
            assert_same_bits(ob.matmul(A, B, engine="cpu", **o), w)


def test_the_options_that_change_bits_all_change_the_plan(fresh_plans):
    A, B = _operands()
    # The default precision certifies native-level accuracy in either mode, and on
    # this data both give the same bits: the last option set is left out here.
    outs = [ob.matmul(A, B, engine="cpu", **o) for o in OPTION_SETS[:-1]]
    # The plans differ in their bits on this data: a shared plan would make two of
    # these equal.
    for i in range(len(outs)):
        for j in range(i):
            assert not np.array_equal(outs[i], outs[j]), (i, j)


def test_2d_operands_pass_on_as_they_are_and_stacks_broadcast():
    a, b = np.ones((3, 4)), np.ones((4, 5))
    ms = semantics.matmul_shape(a.shape, b.shape)
    a3, b3 = semantics.stacks(np, a, b, ms)
    # Views of the operands themselves, not broadcast (read-only) views.
    assert a3.shape == a.shape and b3.shape == b.shape
    assert np.shares_memory(a3, a) and np.shares_memory(b3, b)
    assert a3.flags.writeable and b3.flags.writeable
    # Broadcast stacks and promoted 1-D operands still get their stack shapes.
    a = np.ones((2, 1, 3, 4))
    b = np.ones((5, 4, 6))
    ms = semantics.matmul_shape(a.shape, b.shape)
    a3, b3 = semantics.stacks(np, a, b, ms)
    assert a3.shape == (2, 5, 3, 4) and b3.shape == (2, 5, 4, 6)
    v = np.ones(4)
    ms = semantics.matmul_shape(v.shape, b.shape)
    a3, b3 = semantics.stacks(np, v, b, ms)
    assert a3.shape == (5, 1, 4) and b3.shape == (5, 4, 6)
    assert ob.matmul(v, b, engine="cpu").shape == np.matmul(v, b).shape == (5, 6)
