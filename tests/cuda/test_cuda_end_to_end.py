"""CUDA engine end to end: bitwise equal to the CPU reference, both array worlds.

Marked ``gpu``: skipped where CuPy or a CUDA device is missing.
"""

import threading

import numpy as np
import pytest

import ozaki_backend
from ozaki_backend.plan import Plan
from ozaki_backend.semantics import apply_alpha_beta
from ozaki_backend.reference.engine import product_2d as ref_2d

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu


def _data(rng, m, k, phi=1.0):
    A = (rng.random((m, k)) - 0.5) * np.exp(phi * rng.standard_normal((m, k)))
    A[rng.random((m, k)) < 0.03] = 0.0
    if m > 3:
        A[m // 2] = 0.0
    return A


def _ref(a, b, plan):
    return ref_2d(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), plan)


SHAPES = [(1, 1, 1), (7, 3, 5), (37, 53, 29), (129, 65, 255), (64, 300, 17), (200, 16, 190)]


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_numpy_and_cupy_match_reference(m, k, n, mode):
    rng = np.random.default_rng(m + 7 * k + 13 * n)
    a, b = _data(rng, m, k), _data(rng, k, n)
    for N in (3, 8, 15, 16):
        plan = Plan(m, n, k, moduli=N, mode=mode)
        ref = _ref(a, b, plan)
        got = plan.matmul(a, b, engine="cuda")
        assert isinstance(got, np.ndarray) and got.flags.c_contiguous
        assert_same_bits(got, ref)
        gd = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda")
        assert isinstance(gd, cupy.ndarray)
        assert_same_bits(gd.get(), ref)


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_every_moduli_count(mode):
    rng = np.random.default_rng(2)
    a, b = _data(rng, 45, 61, phi=2.0), _data(rng, 61, 38, phi=2.0)
    da, db = cupy.asarray(a), cupy.asarray(b)
    for N in range(2, 21):
        plan = Plan(45, 38, 61, moduli=N, mode=mode)
        got = plan.matmul(da, db, engine="cuda").get()
        assert_same_bits(got, _ref(a, b, plan), what=f"N={N}")


def test_default_precision_plan():
    rng = np.random.default_rng(3)
    a, b = _data(rng, 100, 90), _data(rng, 90, 80)
    got = ozaki_backend.matmul(a, b, engine="cuda")
    plan = ozaki_backend.plan(100, 80, 90)
    assert_same_bits(got, _ref(a, b, plan))


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_k_beyond_int32_split(mode):
    """k > 131071: the GEMMs run in 65536-long chunks folded mod p."""
    rng = np.random.default_rng(4)
    m, k, n = 9, 140001, 7
    a, b = _data(rng, m, k), _data(rng, k, n)
    plan = Plan(m, n, k, moduli=16, mode=mode)
    assert plan.k_split == 3
    got = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda").get()
    assert_same_bits(got, _ref(a, b, plan))


def test_k_beyond_int32_bound_gemm():
    """Accurate mode's bound GEMM beyond k 64^2 < 2^31 accumulates chunks in int64."""
    rng = np.random.default_rng(5)
    m, k, n = 3, 600001, 4
    a, b = rng.random((m, k)), rng.random((k, n))
    plan = Plan(m, n, k, moduli=18, mode="accurate")
    got = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda").get()
    assert_same_bits(got, _ref(a, b, plan))


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_transposed_and_strided_operands(mode):
    rng = np.random.default_rng(6)
    m, k, n = 70, 50, 60
    a, b = _data(rng, m, k), _data(rng, k, n)
    plan = Plan(m, n, k, moduli=14, mode=mode)
    ref = _ref(a, b, plan)
    aT = np.ascontiguousarray(a.T).T           # F order
    bT = np.ascontiguousarray(b.T).T
    wide = np.zeros((m, 3 * k))
    wide[:, ::3] = a
    a_str = wide[:, ::3]                        # non-contiguous
    b_rev = np.ascontiguousarray(b[::-1])[::-1]  # negative strides
    for x, y in ((aT, b), (a, bT), (aT, bT), (a_str, b), (a, b_rev)):
        assert_same_bits(plan.matmul(x, y, engine="cuda"), ref)
        dx, dy = cupy.asarray(x), cupy.asarray(y)
        for gx, gy in ((dx, dy), (cupy.asfortranarray(dx), dy), (dx, cupy.asfortranarray(dy))):
            assert_same_bits(plan.matmul(gx, gy, engine="cuda").get(), ref)
    dwide = cupy.asarray(wide)
    got = plan.matmul(dwide[:, ::3], cupy.asarray(b)[::-1][::-1], engine="cuda").get()
    assert_same_bits(got, ref)


def test_stacked_and_broadcast_operands():
    rng = np.random.default_rng(7)
    a = _data(rng, 3 * 20, 30).reshape(3, 20, 30)
    b = _data(rng, 30, 25)
    got = ozaki_backend.matmul(a, b, moduli=12, engine="cuda")
    plan = Plan(20, 25, 30, moduli=12)
    for i in range(3):
        assert_same_bits(got[i], _ref(a[i], b, plan))
    gd = ozaki_backend.matmul(cupy.asarray(a), cupy.asarray(b), moduli=12, engine="cuda")
    assert_same_bits(gd.get(), got)
    # 1-D operands
    v = rng.random(30)
    got = ozaki_backend.matmul(a[0], v, moduli=12, engine="cuda")
    assert got.shape == (20,)
    gd = ozaki_backend.matmul(cupy.asarray(a[0]), cupy.asarray(v), moduli=12, engine="cuda")
    assert_same_bits(gd.get(), got)


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_poisoned_output_every_element_written(mode):
    from ozaki_backend.cuda import workspace

    rng = np.random.default_rng(8)
    m, k, n = 150, 40, 170
    a, b = _data(rng, m, k), _data(rng, k, n)
    plan = Plan(m, n, k, moduli=13, mode=mode)
    ref = _ref(a, b, plan)
    for tile in (None, (64, 48), (150, 32)):
        workspace.TILE_OVERRIDE = tile
        try:
            out = cupy.full((m, n), np.nan)
            res = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda", out=out)
            assert res is out
            got = out.get()
        finally:
            workspace.TILE_OVERRIDE = None
        assert not np.isnan(got).any()
        assert_same_bits(got, ref)
    # a strided out= view, poisoned around it
    big = cupy.full((m, 2 * n), np.nan)
    plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda", out=big[:, ::2])
    got = big.get()
    assert_same_bits(got[:, ::2], ref)
    assert np.isnan(got[:, 1::2]).all()


def test_alpha_beta_on_device():
    rng = np.random.default_rng(9)
    m, k, n = 40, 30, 50
    a, b, c = _data(rng, m, k), _data(rng, k, n), rng.standard_normal((m, n))
    plan = Plan(m, n, k, moduli=15)
    C = _ref(a, b, plan)
    for alpha, beta in ((1.0, 0.0), (2.5, 0.0), (1.0, -1.5), (0.3, 0.7), (-1.0, 1.0)):
        want = apply_alpha_beta(C, alpha, beta, c)
        got = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda", alpha=alpha,
                          beta=beta, c=cupy.asarray(c)).get()
        assert_same_bits(got, want)
        got = plan.matmul(a, b, engine="cuda", alpha=alpha, beta=beta, c=c)
        assert_same_bits(got, want)


def test_special_values():
    """Zero rows/columns, subnormal and huge operands, products that underflow to
    subnormals or overflow to inf: still the reference's bits."""
    rng = np.random.default_rng(10)
    m, k, n = 12, 20, 11
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    a[0] = 0.0
    b[:, 0] = 0.0
    a[1] *= 1e-160
    b[:, 1] *= 1e-160            # product row 1 x column 1 ~ 1e-320: subnormal
    a[2] *= 1e-300
    a[3] *= 1e200
    b[:, 2] *= 1e200             # product ~ 1e400: inf
    a[4] = -0.0
    a[5, :3] = 5e-324
    for mode in ("fast", "accurate"):
        plan = Plan(m, n, k, moduli=16, mode=mode)
        ref = _ref(a, b, plan)
        assert np.isinf(ref).any() and (np.abs(ref[1, 1]) < 2.3e-308)
        got = plan.matmul(a, b, engine="cuda")
        assert_same_bits(got, ref)
        got = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda").get()
        assert_same_bits(got, ref)


def test_non_finite_takes_native_path():
    a = np.ones((5, 4))
    b = np.ones((4, 3))
    a[1, 2] = np.nan
    b[0, 0] = np.inf
    da, db = cupy.asarray(a), cupy.asarray(b)
    got = ozaki_backend.matmul(da, db, engine="cuda")
    assert_same_bits(got.get(), cupy.matmul(da, db).get())
    got = ozaki_backend.matmul(a, b, engine="cuda")
    assert_same_bits(got, np.matmul(a, b))


def test_empty_and_k_zero():
    for m, k, n in ((0, 5, 3), (4, 0, 3), (4, 5, 0)):
        a, b = np.ones((m, k)), np.ones((k, n))
        got = ozaki_backend.matmul(a, b, engine="cuda")
        assert got.shape == (m, n) and not got.any()
        gd = ozaki_backend.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda")
        assert gd.shape == (m, n) and not gd.get().any()


def test_repeated_calls_identical():
    rng = np.random.default_rng(11)
    a, b = _data(rng, 300, 200), _data(rng, 200, 250)
    first = ozaki_backend.matmul(a, b, engine="cuda", moduli=16, mode="fast")
    da, db = cupy.asarray(a), cupy.asarray(b)
    for _ in range(3):
        assert_same_bits(ozaki_backend.matmul(a, b, engine="cuda", moduli=16, mode="fast"), first)
        assert_same_bits(ozaki_backend.matmul(da, db, engine="cuda", moduli=16, mode="fast").get(),
                         first)


def test_two_threads_concurrently():
    rng = np.random.default_rng(12)
    jobs = []
    for i in range(4):
        a, b = _data(rng, 200 + i, 150), _data(rng, 150, 170 - i)
        plan = Plan(a.shape[0], b.shape[1], 150, moduli=12 + i, mode=("fast", "accurate")[i % 2])
        jobs.append((a, b, plan, _ref(a, b, plan)))
    errors = []

    def worker(use_cupy):
        try:
            for _ in range(3):
                for a, b, plan, ref in jobs:
                    if use_cupy:
                        got = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda").get()
                    else:
                        got = plan.matmul(a, b, engine="cuda")
                    try:
                        assert_same_bits(got, ref, what=f"cupy={use_cupy} {plan!r}")
                    except AssertionError as exc:
                        errors.append(exc)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(u,)) for u in (False, True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_phase22_on_the_gpu_matches_reference():
    from ozaki_backend.reference import phase22

    rng = np.random.default_rng(13)
    a, b = rng.uniform(-1, 1, (40, 50)), rng.uniform(-1, 1, (50, 30))
    plan = Plan(40, 30, 50, scheme="phase22")
    ref = phase22.matmul_2d(a, b, plan)
    assert_same_bits(plan.matmul(a, b, engine="cuda"), ref)
    got = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda").get()
    assert_same_bits(got, ref)


def test_out_of_memory_falls_back_with_a_warning_and_recovers():
    # Out of memory: the engine retries with smaller tiles, then (nothing fits) the
    # product is NumPy's own, with a FallbackWarning; never a wrong number or a crash.
    rng = np.random.default_rng(14)
    a, b = rng.random((256, 512)), rng.random((512, 256))
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    used = pool.used_bytes()
    pool.set_limit(size=used + (1 << 20))   # 1 MiB more than what is held now
    try:
        with pytest.warns(ozaki_backend.FallbackWarning):
            got = ozaki_backend.matmul(a, b, engine="cuda", moduli=16)
    finally:
        pool.set_limit(size=0)
    assert_same_bits(got, np.matmul(a, b))
    plan = Plan(256, 256, 512, moduli=16)
    assert_same_bits(plan.matmul(a, b, engine="cuda"), _ref(a, b, plan))


def test_compile_error_names_the_kernel_file():
    from ozaki_backend.cuda import CudaEngineError, loader

    with pytest.raises(CudaEngineError, match=r"kernels/crt\.cu"):
        loader.get_module("crt.cu", prelude="#define OZ_N 3\n")  # constants missing
    # the engine still works afterwards
    a = np.random.default_rng(15).random((8, 8))
    plan = Plan(8, 8, 8, moduli=6)
    assert_same_bits(plan.matmul(a, a, engine="cuda"), _ref(a, a, plan))


@pytest.mark.parametrize("strategy,colblock,rowblock", [
    ("batched", "", ""), ("loop", "48", ""), ("loop", "", "40"), ("loop", "48", "40")])
def test_gemm_issue_strategies_and_blocks(monkeypatch, strategy, colblock, rowblock):
    """Every way of issuing the INT8 GEMMs (batched, per modulus, blocked over the
    output columns and rows) gives the same bits."""
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_GEMM", strategy)
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_COLBLOCK", colblock)
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_ROWBLOCK", rowblock)
    rng = np.random.default_rng(16)
    a, b = _data(rng, 101, 70), _data(rng, 70, 133)
    for mode in ("fast", "accurate"):
        plan = Plan(101, 133, 70, moduli=15, mode=mode)
        got = plan.matmul(cupy.asarray(a), cupy.asarray(b), engine="cuda").get()
        assert_same_bits(got, _ref(a, b, plan))


def test_engine_checks_finiteness_on_device():
    """``matmul_numpy(check_finite=True)`` sees Inf/NaN in the scaling pass (so the API
    can skip its host-side isfinite) and returns None; finite operands are unaffected."""
    from ozaki_backend.cuda import engine

    rng = np.random.default_rng(17)
    a, b = _data(rng, 30, 20), _data(rng, 20, 25)
    plan = Plan(30, 25, 20, moduli=14)
    got = engine.matmul_numpy(a, b, plan, check_finite=True)
    assert_same_bits(got, _ref(a, b, plan))
    for bad in (np.nan, np.inf, -np.inf):
        a2 = a.copy()
        a2[3, 4] = bad
        assert engine.matmul_numpy(a2, b, plan, check_finite=True) is None
        b2 = b.copy()
        b2[7, 0] = bad
        assert engine.matmul_numpy(a, b2, plan, check_finite=True) is None


def test_engine_writes_into_out():
    """``matmul_numpy(out=)`` fills the caller's array (every element) and returns it."""
    from ozaki_backend.cuda import engine

    rng = np.random.default_rng(18)
    a, b = _data(rng, 2 * 30, 20).reshape(2, 30, 20), _data(rng, 20, 25)
    plan = Plan(30, 25, 20, moduli=14)
    out = np.full((2, 30, 25), np.nan)
    res = engine.matmul_numpy(a, np.broadcast_to(b, (2, 20, 25)), plan, out=out)
    assert res is out
    for i in range(2):
        assert_same_bits(out[i], _ref(a[i], b, plan))
    with pytest.raises(ValueError):
        engine.matmul_numpy(a, np.broadcast_to(b, (2, 20, 25)), plan, out=np.empty((2, 25, 30)))
