"""Stages 0-2 replayed as a CUDA graph (issue 18, ``cuda/graphs.py``): a shape's first
call with a guessed count runs eagerly, the next is captured, the later ones replay.
Every call, whichever way it ran, gives the CPU engine's bits for its own operands (the
replay reads the plan's copies of them); a call that leaves the ordinary path (another
count) drops its plan; plans are per stream, bounded, and can be turned off. Marked
``gpu``."""

import warnings

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.plan import Plan
from ozaki_backend.reference.engine import product_2d as ref_2d
from ozaki_backend.semantics import apply_alpha_beta
from ozaki_backend.testing import family_operands

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

from ozaki_backend.cuda import graphs, pipeline, scaling  # noqa: E402  (needs CuPy)


@pytest.fixture(autouse=True)
def fresh_plans():
    graphs.clear()
    yield
    graphs.clear()


def _counts():
    return dict(graphs.COUNTS)


def _delta(before):
    return {k: graphs.COUNTS[k] - before[k] for k in before}


def _random_calls(m, k, n, seed, calls, before_each=None):
    """``calls`` products of fresh N(0, 1) operands with a 12-moduli plan, each checked
    against the CPU engine's bits (``before_each(i)`` runs first); the graph counts'
    change."""
    plan = Plan(m, n, k, moduli=12)
    rng = np.random.default_rng(seed)
    before = _counts()
    for i in range(calls):
        if before_each is not None:
            before_each(i)
        A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        assert_same_bits(_device_product(A, B, plan), ref_2d(A, B, plan))
    return _delta(before)


def _device_product(A, B, plan, *, out=None, **kw):
    dA = A if isinstance(A, cupy.ndarray) else cupy.asarray(A)
    dB = B if isinstance(B, cupy.ndarray) else cupy.asarray(B)
    C = cupy.empty((dA.shape[0], dB.shape[1])) if out is None else out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ob.NativeFallbackWarning)
        pipeline.product_into(dA, dB, plan, C, check_finite=True, **kw)
    return C


@pytest.mark.parametrize("moduli", [None, 16])
@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("shape", [(96, 200, 80), (33, 70, 129)])
@pytest.mark.parametrize("family", ["phi1", "graded", "kscaled2_300", "cancellation"])
def test_replayed_calls_give_each_calls_reference_bits(moduli, mode, shape, family):
    """Five calls of one shape with new operands each time: eager, eager with a guess,
    captured, replayed twice — each equal to the CPU engine on its own operands. (With
    the certificate's count a seed may change the count: its plan is then dropped.)"""
    m, k, n = shape
    plan = Plan(m, n, k, mode=mode, moduli=moduli)
    before = _counts()
    for i in range(5):
        A, B = family_operands(family, m, k, n, np.random.default_rng(1000 * i + m))
        assert_same_bits(_device_product(A, B, plan), ref_2d(A, B, plan))
    if moduli is not None:      # a fixed count: the guess is always right
        d = _delta(before)
        assert d["captured"] >= 1 and d["captured"] + d["replayed"] == 4, d


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_fixed_count_plans_replay(mode):
    """A fixed count is always guessed right: the second call is captured, the later
    ones replay, and the replay reads each call's operands (scaled by 2^300 every other
    call)."""
    m, k, n = 120, 300, 90
    plan = Plan(m, n, k, moduli=14, mode=mode)
    rng = np.random.default_rng(7)
    before = _counts()
    for i in range(5):
        A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        if i % 2:
            A = np.ldexp(A, 300)
        assert_same_bits(_device_product(A, B, plan), ref_2d(A, B, plan))
    d = _delta(before)
    # Every call after the first ran through a plan (staged, or direct where the memory
    # pool handed the same addresses again).
    assert d["captured"] >= 1 and d["captured"] + d["replayed"] == 4, d
    assert d["failed"] == 0, d


def test_strided_fortran_and_transposed_operands():
    """F-ordered A, B a transposed view, then sliced (non-contiguous) operands: each
    layout has its own plan and every call the reference bits."""
    m, k, n = 70, 150, 60
    plan = Plan(m, n, k, moduli=15)
    rng = np.random.default_rng(3)
    layouts = [
        lambda A, B: (cupy.asfortranarray(cupy.asarray(A)), cupy.asarray(B)),
        lambda A, B: (cupy.asarray(A), cupy.ascontiguousarray(cupy.asarray(B).T).T),
        lambda A, B: (cupy.asarray(np.pad(A, ((0, 0), (0, 5))))[:, :k],
                      cupy.asarray(np.pad(B, ((0, 3), (0, 0))))[:k]),
    ]
    for make in layouts:
        for _ in range(4):
            A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
            dA, dB = make(A, B)
            assert_same_bits(_device_product(dA, dB, plan), ref_2d(A, B, plan))
    assert graphs.COUNTS["replayed"] + graphs.COUNTS["captured"] >= 3 * 3


def test_fixed_buffers_get_a_direct_plan():
    """A loop that refills the same device buffers: after a staged plan has seen the
    same addresses twice in a row, a direct plan reads them in place (no copies) — and
    still reads each call's values."""
    m, k, n = 100, 180, 70
    plan = Plan(m, n, k, moduli=14)
    rng = np.random.default_rng(4)
    dA, dB, C = cupy.empty((m, k)), cupy.empty((k, n)), cupy.empty((m, n))
    before = _counts()
    for _ in range(6):
        A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        dA[...] = cupy.asarray(A)
        dB[...] = cupy.asarray(B)
        assert_same_bits(_device_product(dA, dB, plan, out=C), ref_2d(A, B, plan))
    d = _delta(before)
    # eager, staged capture, staged replay, direct capture, two direct replays
    assert (d["captured"], d["replayed"]) == (2, 3), d
    assert [p["staged"] for p in graphs.info()] == [True, False]


def test_alpha_beta_and_output_aliasing_an_operand():
    """``C = alpha AB + beta C0`` on replayed calls, and an output that is the operand
    A itself (the replay read A's copy; the CRT writes only after the GEMMs)."""
    m = k = n = 64
    plan = Plan(m, n, k, moduli=13)
    rng = np.random.default_rng(11)
    for _ in range(4):
        A, B, C0 = (rng.standard_normal((m, m)) for _ in range(3))
        out = _device_product(A, B, plan, alpha=0.5, beta=-2.0, C0=cupy.asarray(C0))
        assert_same_bits(out, apply_alpha_beta(ref_2d(A, B, plan), 0.5, -2.0, C0))
    for _ in range(4):
        A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        dA = cupy.asarray(A)
        _device_product(dA, B, plan, out=dA)
        assert_same_bits(dA, ref_2d(A, B, plan))
    assert graphs.COUNTS["replayed"] >= 2


def test_a_changed_count_drops_the_plan():
    """N(0,1) operands (one count) until the plan replays, then phi4 operands, whose
    count differs: the replayed call's guess is wrong, the plan is dropped, and the call
    still has the reference bits; the shape's next calls go on correctly."""
    m, k, n = 64, 400, 48
    plan = Plan(m, n, k, mode="accurate")
    seq = ["phi0.5"] * 4 + ["phi4", "phi4", "phi0.5", "phi0.5", "phi0.5"]
    before = _counts()
    for i, name in enumerate(seq):
        A, B = family_operands(name, m, k, n, np.random.default_rng(i))
        C = _device_product(A, B, plan)
        if name != "phi4":          # phi4 may escalate to cuBLAS (not bitwise)
            assert_same_bits(C, ref_2d(A, B, plan))
    d = _delta(before)
    assert d["replayed"] >= 1 and d["dropped"] >= 1, d


def test_each_stream_has_its_own_plan():
    m, k, n = 80, 120, 72
    plan = Plan(m, n, k, moduli=14)
    rng = np.random.default_rng(5)
    streams = [cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream()]
    for _ in range(3):
        for s in streams:
            with s:
                A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
                C = _device_product(A, B, plan)
                s.synchronize()
                assert_same_bits(C, ref_2d(A, B, plan))
    assert len(graphs.info()) == 2


def test_plans_are_bounded(monkeypatch):
    monkeypatch.setattr(graphs, "MAX_PLANS", 2)
    rng = np.random.default_rng(9)
    before = _counts()
    for m in (40, 50, 60):
        plan = Plan(m, m, m, moduli=12)
        for _ in range(3):
            A, B = rng.standard_normal((m, m)), rng.standard_normal((m, m))
            assert_same_bits(_device_product(A, B, plan), ref_2d(A, B, plan))
    assert len(graphs.info()) == 2
    assert _delta(before)["dropped"] == 1


@pytest.mark.parametrize("env", [{"OZAKI_BACKEND_CUDA_GRAPHS": "0"},
                                 {"OZAKI_BACKEND_CUDA_GRAPH_MAX": "1000"}])
def test_off_switch_and_size_limit(monkeypatch, env):
    for name, v in env.items():
        monkeypatch.setenv(name, v)
    # 40 x 50 and 50 x 30: 3500 operand elements > 1000
    d = _random_calls(40, 50, 30, seed=1, calls=4)
    assert d == {"captured": 0, "replayed": 0, "failed": 0, "dropped": 0}


def test_a_failed_capture_leaves_the_call_eager(monkeypatch):
    """A device table first made inside the capture would be filled only by the graph:
    the capture refuses it (``not_capturing``), the call runs eagerly and makes the
    table itself, and after :data:`~graphs.CAPTURE_TRIES` failures the key stays eager."""
    def fresh_tables(i):
        if i >= 1:
            monkeypatch.setattr(scaling, "_tables", {})   # every table made anew

    d = _random_calls(56, 90, 44, seed=2, calls=5, before_each=fresh_tables)
    assert d["failed"] == graphs.CAPTURE_TRIES and d["captured"] == 0, d


def test_a_plan_the_budget_cannot_use_is_not_captured_again_and_again(monkeypatch):
    """When the workspace budget cannot hold the bound GEMM beside the product, the
    product reads its count first and the replayed plan is dropped. That counts as a
    failed capture: after :data:`~graphs.CAPTURE_TRIES` of them the key runs eagerly
    instead of capturing and dropping a plan (a device synchronisation) on every call.
    Every call keeps the reference bits."""
    monkeypatch.setattr(pipeline, "_guess", lambda *a, **kw: None)   # a budget too small
    d = _random_calls(60, 110, 52, seed=11, calls=7)
    assert d["captured"] == graphs.CAPTURE_TRIES == d["failed"] == d["dropped"], d
    assert graphs.info() == []
