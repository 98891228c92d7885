"""The CUDA engine's bounded workspace: small budgets force many tiles without changing
a bit, the high-water mark stays within the budget, and an out-of-memory error retries
with a smaller budget and finally falls back natively with a warning.

Marked ``gpu``: skipped where CuPy or a CUDA device is missing.
"""

import warnings

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import NativeFallbackWarning
from ozaki_backend.reference.pipeline import count_choice

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

from ozaki_backend.cuda import pipeline, workspace  # noqa: E402  (needs CuPy)


def _data(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, size=shape))


#: Device memory of a product besides its workspace: per-row / per-column statistics
#: (a few dozen int32 / float64 arrays of length m or n, and the 19-count tables).
def _stats_slack(m, n):
    return 64 * 8 * 19 * (m + n) + (1 << 20)


@pytest.mark.parametrize("mode", ["accurate", "fast"])
def test_small_budgets_force_tiles_and_keep_every_bit(mode):
    A, B = _data((1100, 700), 1), _data((700, 900), 2)
    ref = ob.matmul(A, B, engine="cpu", mode=mode)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    unbounded = ob.matmul(dA, dB, engine="cuda", mode=mode).get()
    assert_same_bits(unbounded, ref)
    for budget in (64 << 20, 24 << 20, 14 << 20):
        # the smallest tiles (256 x 256) need (2 * 256 * 704 + 4 * 256^2) N bytes,
        # 12.4 MB for N = 20: 14 MiB forces them
        got = ob.matmul(dA, dB, engine="cuda", mode=mode, workspace=budget)
        assert_same_bits(got.get(), ref)
        assert_same_bits(ob.matmul(A, B, engine="cuda", mode=mode, workspace=budget), ref)


def test_the_high_water_mark_stays_within_the_budget():
    A, B = _data((1024, 2048), 3), _data((2048, 1024), 4)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    ob.matmul(dA, dB, engine="cuda")
    free_peak = workspace.last_workspace_peak()
    budget = 48 << 20      # unbounded: about 134 MB for 16 moduli; 256^2 tiles: 26 MB
    ob.matmul(dA, dB, engine="cuda", workspace=budget)
    peak = workspace.last_workspace_peak()
    assert peak <= budget + _stats_slack(1024, 1024)
    assert peak < free_peak


def test_phases_report_the_high_water_mark():
    A, B = cupy.asarray(_data((300, 200), 5)), cupy.asarray(_data((200, 100), 6))
    ph = workspace.Phases()
    out = cupy.empty((300, 100))
    pipeline.product_into(A, B, ob.plan(300, 100, 200), out, phases=ph)
    assert ph.workspace_peak and ph.workspace_peak > 0


def test_the_environment_budget_is_read_when_no_option_is_given(monkeypatch):
    monkeypatch.setenv("OZAKI_BACKEND_WORKSPACE", "5MiB")
    assert workspace.workspace_budget(free=1 << 40) == 5 << 20
    monkeypatch.setenv("OZAKI_BACKEND_WORKSPACE", "")
    assert workspace.workspace_budget(free=1 << 40) == 16 << 30


def _oom():
    return cupy.cuda.memory.OutOfMemoryError(1 << 40, 0)


def test_an_out_of_memory_error_retries_with_half_the_budget(monkeypatch):
    A, B = _data((400, 300), 7), _data((300, 200), 8)
    ref = ob.matmul(A, B, engine="cpu")
    real = pipeline._product_once
    budgets = []

    def flaky(*args, **kw):
        budgets.append(workspace.workspace_budget())
        if len(budgets) == 1:
            raise _oom()
        return real(*args, **kw)

    monkeypatch.setattr(pipeline, "_product_once", flaky)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NativeFallbackWarning)
        got = ob.matmul(cupy.asarray(A), cupy.asarray(B), engine="cuda")
    assert_same_bits(got.get(), ref)
    assert len(budgets) == 2 and budgets[1] <= budgets[0] // 2 + 1


@pytest.mark.parametrize("host", [True, False])
def test_repeated_out_of_memory_errors_fall_back_natively_with_a_warning(monkeypatch, host):
    A, B = _data((64, 48), 9), _data((48, 32), 10)

    def always(*args, **kw):
        raise _oom()

    monkeypatch.setattr(pipeline, "_product_once", always)
    with pytest.warns(NativeFallbackWarning, match="out of memory"):
        if host:
            got = ob.matmul(A, B, engine="cuda")
            np.testing.assert_array_equal(got, np.matmul(A, B))
        else:
            dA, dB = cupy.asarray(A), cupy.asarray(B)
            got = ob.matmul(dA, dB, engine="cuda")
            np.testing.assert_array_equal(got.get(), cupy.matmul(dA, dB).get())


# ---------------------------------------------------------------- out of core

@pytest.fixture
def out_of_core(monkeypatch):
    from ozaki_backend.cuda import outofcore

    monkeypatch.setattr(outofcore, "FORCE", True)
    return outofcore


@pytest.mark.parametrize("mode", ["accurate", "fast"])
@pytest.mark.parametrize("budget", [None, 20 << 20])
def test_out_of_core_products_match_the_cpu_engine(out_of_core, mode, budget):
    """Out of core there is no a-posteriori test (it needs the whole result on the
    device): a product whose count leaves elements to it runs at the count every
    element passes a priori, bitwise the CPU engine's product at that count; one that
    leaves none is bitwise the CPU engine's certified product."""
    A, B = _data((900, 600), 11), _data((600, 700), 12)
    A[:, 5] *= 2.0 ** 40                      # a k-scaling pattern: S != 0
    B[5, :] *= 2.0 ** -40
    ch = count_choice(A, B, mode)
    assert ch.failing and ch.all_pass > ch.n_moduli     # these data need the test
    ref = ob.matmul(A, B, engine="cpu", mode=mode, moduli=ch.all_pass)
    ob.reset_stats()
    got = ob.matmul(A, B, engine="cuda", mode=mode, workspace=budget)
    assert_same_bits(got, ref)
    assert ob.stats()["certificate"].get("certified") == 1
    F = np.asfortranarray(A)
    assert_same_bits(ob.matmul(F, B, engine="cuda", mode=mode, workspace=budget), ref)
    N = np.random.default_rng(18).standard_normal
    A, B = N((900, 600)), N((600, 700))
    assert count_choice(A, B, mode).failing == 0
    assert_same_bits(ob.matmul(A, B, engine="cuda", mode=mode, workspace=budget),
                     ob.matmul(A, B, engine="cpu", mode=mode))


def test_out_of_core_symmetric_products_keep_the_symmetric_scaling(out_of_core):
    X = _data((700, 300), 13)
    ch = count_choice(X.T, X, "accurate")      # a transposed pair: symmetric
    ref = ob.matmul(X.T, X, engine="cpu", moduli=ch.all_pass if ch.failing else None)
    got = ob.matmul(X.T, X, engine="cuda", workspace=16 << 20)
    assert_same_bits(got, ref)
    assert_same_bits(got, got.T)


def test_out_of_core_fixed_counts_and_non_finite_operands(out_of_core):
    A, B = _data((300, 200), 14), _data((200, 250), 15)
    plan = ob.plan(300, 250, 200, moduli=9)
    assert_same_bits(plan.matmul(A, B, engine="cuda"), plan.matmul(A, B, engine="cpu"))
    A[3, 3] = np.nan
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(ob.matmul(A, B, engine="cuda"), np.matmul(A, B))


@pytest.mark.parametrize("mode", ["accurate", "fast"])
def test_budgets_below_the_smallest_tile_split_k_without_changing_a_bit(mode):
    """k = 20000: a 256 x 256 tile's planes need about 16 * 2 * 256 * 20000 = 164 MB,
    the bound GEMM's about 12 MB: 40 MB forces chunks of k, whose products accumulate
    exactly mod p."""
    A, B = _data((300, 20000), 16), _data((20000, 280), 17)
    ref = ob.matmul(A, B, engine="cpu", mode=mode)
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NativeFallbackWarning)
        got = ob.matmul(dA, dB, engine="cuda", mode=mode, workspace=40 * 10 ** 6)
    assert_same_bits(got.get(), ref)
    assert workspace.last_workspace_peak() <= 40 * 10 ** 6 + _stats_slack(300, 280)


def test_one_memory_query_follows_the_pool():
    """Inside a product the driver is asked for free memory once; afterwards the pool's
    own allocations are subtracted. A fresh 1 GiB allocation (a multiple of the driver's
    2 MiB page, so the driver takes exactly that) moves the answer by exactly 1 GiB, and
    it agrees with a fresh query to within one page."""
    from ozaki_backend.cuda._common import free_device_bytes, one_memory_query

    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    page = 2 << 20
    with one_memory_query():
        before = free_device_bytes()
        with one_memory_query():              # nested: the outer query is kept
            x = cupy.empty(1 << 30, dtype=np.uint8)
            during = free_device_bytes()
        fresh = int(cupy.cuda.runtime.memGetInfo()[0]) + int(pool.free_bytes())
        del x
    assert before - during == 1 << 30
    assert abs(during - fresh) <= page
    outside = free_device_bytes()           # a real query again (the block is cached)
    assert abs(outside - before) <= page
