"""The modular products (``ozaki_backend.cuda.modprod``) and the fused GEMM path.

Both backends (the fused Hopper kernel and cuBLAS + a reduction) must give the exact
residues ``(RA_a RB_b^T) mod p`` computed here with NumPy integers; and the whole CUDA
product through the fused path must be bitwise equal to the cuBLAS path and to the CPU
reference. Marked ``gpu``; the wgmma cases also skip on GPUs other than Hopper.
"""

import numpy as np
import pytest

from ozaki_backend.spec import remainders
from ozaki_backend.plan import Plan
from ozaki_backend.spec.seed import PRIMES as PHASE22_PRIMES
from ozaki_backend.reference.engine import product_2d as ref_2d

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu


def _backends():
    from ozaki_backend.cuda import capability

    out = [("cublas", 128, 1)]
    if capability.wgmma_available():
        out += [("wgmma", bn, cl) for bn in (128, 256) for cl in (1, 2)]
    return out


def _planes(rng, P, rows, k, lo=-128, hi=127):
    kpad = -(-k // 16) * 16
    R = np.zeros((P, rows, kpad), dtype=np.int8)
    R[:, :, :k] = rng.integers(lo, hi + 1, size=(P, rows, k))
    return R


def _expect(RA, RB, items, rows, cols, k0, kc):
    out = np.empty((len(items), rows, cols), dtype=np.uint8)
    for q, (a, b, p, _lvl) in enumerate(items):
        x = RA[a, :rows, k0:k0 + kc].astype(np.int64) @ RB[b, :cols, k0:k0 + kc].astype(np.int64).T
        out[q] = np.mod(x, p)
    return out


def _run(RA, RB, items, rows, cols, k0=0, kc=None, backend="cublas", bn=128, need=None,
         cluster=1):
    from ozaki_backend.cuda import modprod

    ldo = -(-cols // 16) * 16
    out = cupy.full((len(items), rows, ldo), 0xEE, dtype=np.uint8)
    modprod.mod_products(cupy.asarray(RA), cupy.asarray(RB), items, out, rows, cols, k0, kc,
                         need=None if need is None else cupy.asarray(need),
                         backend=backend, bn=bn, cluster=cluster)
    return cupy.asnumpy(out)[:, :rows, :cols]


SHAPES = [(1, 1, 1), (5, 7, 33), (127, 129, 130), (128, 256, 128), (129, 257, 255),
          (300, 520, 1000), (256, 512, 4096)]


@pytest.mark.parametrize("rows,cols,k", SHAPES)
def test_mod_products_ozaki2_moduli(rows, cols, k):
    rng = np.random.default_rng(rows * 7 + cols + k)
    N = 6
    RA = _planes(rng, N, rows, k)
    RB = _planes(rng, N, cols, k)
    moduli = (256, 255, 253, 217, 199, 173)
    items = [(l, l, p, l) for l, p in enumerate(moduli)]
    want = _expect(RA, RB, items, rows, cols, 0, RA.shape[2])
    for backend, bn, cl in _backends():
        got = _run(RA, RB, items, rows, cols, backend=backend, bn=bn, cluster=cl)
        np.testing.assert_array_equal(got, want, err_msg=f"{backend}:{bn}:{cl}")


@pytest.mark.parametrize("rows,cols,k", [(129, 257, 255), (300, 520, 1000)])
def test_mod_products_64_byte_k_blocks(rows, cols, k, monkeypatch):
    # The 64-byte-swizzle variant (OZAKI_BACKEND_CUDA_BK=64: half-size stages, twice the
    # ring depth) must give the same residues as the default.
    from ozaki_backend.cuda import capability

    if not capability.wgmma_available():
        pytest.skip(capability.wgmma_unavailable_reason())
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_BK", "64")
    rng = np.random.default_rng(rows + cols + k)
    RA = _planes(rng, 3, rows, k)
    RB = _planes(rng, 3, cols, k)
    items = [(l, l, p, l) for l, p in enumerate((256, 241, 173))]
    want = _expect(RA, RB, items, rows, cols, 0, RA.shape[2])
    for bn in (128, 256):
        got = _run(RA, RB, items, rows, cols, backend="wgmma", bn=bn)
        np.testing.assert_array_equal(got, want, err_msg=f"bk=64 bn={bn}")


def test_mod_products_phase22_pairs_and_k_range():
    # Seed-scheme items: 4 passes (hi/lo x hi/lo) x 7 primes, residues in [0, p), a
    # k range in the middle of the planes.
    rng = np.random.default_rng(5)
    rows, cols, k = 200, 136, 1000
    RA = _planes(rng, 14, rows, k, 0, 96)
    RB = _planes(rng, 14, cols, k, 0, 96)
    items = [(sa * 7 + i, sb * 7 + i, p, i) for sa in (0, 1) for sb in (0, 1)
             for i, p in enumerate(PHASE22_PRIMES)]
    want = _expect(RA, RB, items, rows, cols, 128, 512)
    for backend, bn, cl in _backends():
        got = _run(RA, RB, items, rows, cols, 128, 512, backend=backend, bn=bn, cluster=cl)
        np.testing.assert_array_equal(got, want, err_msg=f"{backend}:{bn}:{cl}")


def test_largest_accumulators_and_folds():
    # All residues -128 (products 2^14) over more than two fold intervals: the
    # accumulator reaches the largest value the kernel's remainder must handle.
    rows, cols = 130, 70
    k = 2 * remainders.FOLD_K + 300
    RA = np.full((2, rows, -(-k // 16) * 16), -128, dtype=np.int8)
    RA[:, :, k:] = 0
    RB = RA[:, :cols].copy()
    RB[1] = 127
    RB[1, :, k:] = 0
    items = [(0, 0, 256, 0), (0, 0, 255, 1), (0, 1, 173, 2), (1, 1, 127, 3), (0, 1, 97, 4)]
    want = _expect(RA, RB, items, rows, cols, 0, RA.shape[2])
    for backend, bn, cl in _backends():
        got = _run(RA, RB, items, rows, cols, backend=backend, bn=bn, cluster=cl)
        np.testing.assert_array_equal(got, want, err_msg=f"{backend}:{bn}:{cl}")


def test_need_skips_tiles():
    from ozaki_backend.cuda import capability

    if not capability.wgmma_available():
        pytest.skip(capability.wgmma_unavailable_reason())
    rng = np.random.default_rng(9)
    rows, cols, k = 300, 600, 256
    RA = _planes(rng, 3, rows, k)
    RB = _planes(rng, 3, cols, k)
    items = [(l, l, p, l) for l, p in enumerate((251, 241, 239))]
    need = rng.integers(0, 4, size=(-(-rows // 128), -(-cols // 64))).astype(np.int8)
    want = _expect(RA, RB, items, rows, cols, 0, RA.shape[2])
    for bn, cl in ((128, 1), (256, 1), (128, 2), (256, 2)):
        got = _run(RA, RB, items, rows, cols, backend="wgmma", bn=bn, need=need, cluster=cl)
        tiles = np.repeat(np.repeat(need, 128, 0)[:rows], 64, 1)[:, :cols]
        for q in range(3):
            mask = tiles > q
            np.testing.assert_array_equal(got[q][mask], want[q][mask])


def test_bad_arguments():
    from ozaki_backend.cuda import modprod

    RA = cupy.zeros((1, 8, 16), dtype=np.int8)
    out = cupy.zeros((1, 8, 16), dtype=np.uint8)
    with pytest.raises(ValueError):
        modprod.mod_products(RA, RA, [(0, 0, 257, 0)], out, 8, 8)
    with pytest.raises(ValueError):
        modprod.mod_products(RA, RA, [(1, 0, 255, 0)], out, 8, 8)
    with pytest.raises(ValueError):
        modprod.mod_products(RA.astype(np.int16), RA, [(0, 0, 255, 0)], out, 8, 8)
    with pytest.raises(ValueError):
        modprod.mod_products(RA, RA, [(0, 0, 255, 0)], out, 8, 8, 0, 48, backend="nope")


def _data(rng, m, k, phi=1.0):
    A = (rng.random((m, k)) - 0.5) * np.exp(phi * rng.standard_normal((m, k)))
    A[rng.random((m, k)) < 0.03] = 0.0
    return A


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("m,k,n,N", [(1, 1, 1, 2), (129, 130, 257, 9), (256, 4096, 384, 15),
                                     (300, 777, 200, 20), (64, 70000, 96, 16)])
def test_fused_path_end_to_end(m, k, n, N, mode):
    from ozaki_backend.cuda import capability
    from ozaki_backend.cuda.pipeline import product_into

    if not capability.wgmma_available():
        pytest.skip(capability.wgmma_unavailable_reason())
    rng = np.random.default_rng(m + k + n + N)
    A = _data(rng, m, k)
    B = _data(rng, k, n)
    plan = Plan(m, n, k, moduli=N, mode=mode)
    outs = {}
    for strategy in ("cublas", "wgmma"):
        out = cupy.empty((m, n))
        product_into(cupy.asarray(A), cupy.asarray(B), plan, out, strategy=strategy)
        outs[strategy] = cupy.asnumpy(out)
    ref = ref_2d(A, B, plan)
    assert_same_bits(outs["wgmma"], outs["cublas"])
    assert_same_bits(outs["wgmma"], ref)


def test_tuning_choice_is_reported():
    from ozaki_backend.cuda import tuning

    path, width, reason = tuning.choice(4096, 4096, 4096, 15)
    assert path in tuning.PATHS and reason
    if path == "wgmma":
        assert width in (128, 256)


def test_tuning_choice_is_cached_but_follows_the_forcing_variable(monkeypatch):
    from ozaki_backend.cuda import tuning

    monkeypatch.delenv("OZAKI_BACKEND_CUDA_PATH", raising=False)
    first = tuning.choice(4096, 4096, 4096, 15)
    assert tuning.choice(4096, 4096, 4096, 15) is first       # cached
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_PATH", "cublas")
    assert tuning.choice(4096, 4096, 4096, 15)[::2] == ("cublas",
                                                        "forced by OZAKI_BACKEND_CUDA_PATH")
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_PATH", "bogus")
    with pytest.raises(ValueError):
        tuning.choice(4096, 4096, 4096, 15)
    monkeypatch.delenv("OZAKI_BACKEND_CUDA_PATH")
    assert tuning.choice(4096, 4096, 4096, 15) == first


def test_plan_says_which_gemm_path():
    import ozaki_backend
    from ozaki_backend.cuda import tuning

    from ozaki_backend.cuda.engine import gemm_path

    p = ozaki_backend.plan(4096, 4096, 4096, moduli=15)
    text = gemm_path(p)
    path, _, _ = tuning.choice(4096, 4096, 4096, 15)
    assert ("fused" in text) == (path == "wgmma")
    from ozaki_backend import registry

    assert "GEMM path" in registry.describe(p, "cuda")
    assert "GEMM path" not in repr(p)        # the plan holds no engine's choices
