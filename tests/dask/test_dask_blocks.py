"""``ozaki_backend.dask`` without a cluster: ``explain`` of a dask product, the block
size rule ``chunks_for`` / ``rechunk_for_product``, and ``matmul`` with explicit
emulated block products (threads scheduler).

Skipped where dask is missing (the ``[dask]`` extra).
"""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

import ozaki_backend  # noqa: E402
import ozaki_backend.dask as od  # noqa: E402
from ozaki_backend.dispatch import costmodel  # noqa: E402
from ozaki_backend.testing import exact_matmul, max_relative_error  # noqa: E402

GiB = 2**30


def _arrays(m=400, k=900, n=300, ca=(200, 300), cb=(300, 150), seed=0):
    rng = np.random.default_rng(seed)
    x, y = rng.random((m, k)), rng.random((k, n))
    return x, y, da.from_array(x, chunks=ca), da.from_array(y, chunks=cb)


# ------------------------------------------------------------------ explain
def test_explain_counts_block_products_by_shape_and_decision():
    _, _, a, b = _arrays(m=500, ca=(200, 300))          # rows 200, 200, 100
    e = od.explain(a, b, engine="cpu")
    assert (e.blocks, e.routed, e.native) == (18, 18, 0)
    assert {s: c for s, (c, _) in e.shapes.items()} == {(200, 300, 150): 12,
                                                         (100, 300, 150): 6}
    # A floor between the two block sizes: only the larger blocks route.
    e = od.explain(a, b, engine="cpu", min_size=200 * 300 * 150)
    assert (e.routed, e.native) == (12, 6)
    assert e.reasons[("native", f"below min_size (m*n*k < {200 * 300 * 150})")] == 6
    assert "18 block products, 12 routed, 6 native" in str(e)


def test_explain_of_a_product_reads_its_graph():
    _, _, a, b = _arrays()
    assert od.explain(a @ b, engine="cpu").routed == 12
    assert od.explain(da.matmul(a, b) + 1.0, engine="cpu").blocks == 12
    e = od.explain(od.matmul(a, b, engine="cpu"))
    assert e.routed == 12
    assert set(r for _, r in e.reasons) == {"explicit ozaki_backend.dask.matmul"}
    with pytest.raises(ValueError, match="no matrix product"):
        od.explain(a + 1.0)


def test_explain_uses_the_calling_context_without_a_registered_client(clean_dispatch):
    _, _, a, b = _arrays()
    e = od.explain(a, b)
    assert e.routed == 0 and "not enabled" in next(iter(e.reasons))[1]
    with ozaki_backend.enabled(engine="cpu"):
        assert od.explain(a, b).routed == 12


def test_explain_unifies_contraction_chunks_and_rejects_bad_operands():
    _, _, a, b = _arrays(cb=(450, 150))                 # k chunks 300 vs 450
    e = od.explain(a, b, engine="cpu")
    # dask's matmul splits k at 300, 450, 600: (300, 150, 150, 300), as explain does.
    assert e.blocks == 2 * 2 * 4 == od.explain(a @ b, engine="cpu").blocks
    with pytest.raises(ValueError, match="mismatch"):
        od.explain(a, b[:600], engine="cpu")
    with pytest.raises(ValueError, match="2-d"):
        od.explain(a[0], b, engine="cpu")
    f32 = od.explain(a.astype(np.float32), b.astype(np.float32), engine="cpu")
    assert f32.routed == 0 and "not float64" in next(iter(f32.reasons))[1]


# ------------------------------------------------------------------ block sizes
@pytest.mark.parametrize("shape,workers", [((65536, 65536, 65536), 4),
                                           ((32768, 32768, 32768), 1),
                                           ((32768, 32768, 32768), 2),
                                           ((4096, 65536, 4096), 8),
                                           ((3000, 5000, 7000), 1)])
def test_chunks_for_fits_the_budget_and_reaches_the_floor(shape, workers):
    m, k, n = shape
    mem, fraction = 140 * GiB, 0.85
    bm, bk, bn = od.chunks_for(m, k, n, memory_bytes=mem, workers=workers,
                               fraction=fraction, min_size=10**9)
    assert od._block_bytes(bm, bk, bn, {}) <= fraction * mem
    assert bm * bk * bn >= 10**9
    for d, b in ((m, bm), (k, bk), (n, bn)):
        assert b == d or b % 256 == 0
    # As large as fits: doubling the block (where the dimensions allow) overflows.
    bigger = tuple(min(d, 2 * b) for d, b in ((m, bm), (k, bk), (n, bn)))
    if workers == 1 and bigger != (bm, bk, bn):
        assert od._block_bytes(*bigger, {}) > fraction * mem
    blocks = -(-m // bm) * -(-n // bn)
    assert blocks >= workers or bm * bn * bk // 2 < 10**9


def test_chunks_for_keeps_enough_output_blocks_for_the_workers():
    bm, bk, bn = od.chunks_for(8192, 8192, 8192, memory_bytes=140 * GiB, workers=4,
                               engine="cpu")
    assert (8192 // bm) * (8192 // bn) >= 4


def test_chunks_for_default_floor_is_the_routing_floor():
    floor = costmodel.cost_model().floor()
    small = int(round(floor ** (1 / 3))) // 2
    with pytest.raises(ValueError, match="below the routing floor"):
        od.chunks_for(small, small, small, memory_bytes=140 * GiB)
    assert od.chunks_for(small, small, small, memory_bytes=140 * GiB,
                         engine="cpu") == (small, small, small)


def test_chunks_for_rejects_bad_input():
    with pytest.raises(ValueError, match="m must be a positive int"):
        od.chunks_for(0, 5, 5, memory_bytes=GiB)
    with pytest.raises(ValueError, match="fraction"):
        od.chunks_for(5, 5, 5, memory_bytes=GiB, fraction=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        od.chunks_for(5, 5, 5, memory_bytes=GiB, engin="cpu")
    with pytest.raises(ValueError, match="no block of 256 fits"):
        od.chunks_for(4096, 4096, 4096, memory_bytes=2**20, engine="cpu")


def test_rechunk_for_product():
    _, _, a, b = _arrays(m=1024, k=2048, n=512, ca=(100, 100), cb=(100, 100))
    a2, b2 = od.rechunk_for_product(a, b, memory_bytes=60 * 2**20, engine="cpu")
    assert a2.chunks[1] == b2.chunks[0]
    bm, bk, bn = a2.chunksize[0], a2.chunksize[1], b2.chunksize[1]
    assert od._block_bytes(bm, bk, bn, {}) <= 0.85 * 60 * 2**20
    with pytest.raises(ValueError, match="mismatch"):
        od.rechunk_for_product(a, b[:100], memory_bytes=GiB)


# ------------------------------------------------------------------ matmul
def test_matmul_is_the_sum_of_emulated_block_products(clean_dispatch):
    x, y, a, b = _arrays(40, 90, 30, (20, 30), (30, 15))
    c = od.matmul(a, b, engine="cpu").compute(scheduler="threads")
    assert ozaki_backend.stats()["routed"] == 12
    # Block by block: the emulated products of the chunks, summed over k in order.
    expect = np.zeros((40, 30))
    for i in range(2):
        for j in range(2):
            parts = [ozaki_backend.matmul(x[20 * i:20 * (i + 1), 30 * l:30 * (l + 1)],
                                          y[30 * l:30 * (l + 1), 15 * j:15 * (j + 1)],
                                          engine="cpu") for l in range(3)]
            expect[20 * i:20 * (i + 1), 15 * j:15 * (j + 1)] = (parts[0] + parts[1]) \
                + parts[2]
    np.testing.assert_array_equal(c, expect)
    exact = exact_matmul(x, y)
    assert max_relative_error(c, exact) <= 2 * max_relative_error(
        (a @ b).compute(scheduler="sync"), exact)


def test_matmul_stacks_and_broadcasts_like_dask():
    rng = np.random.default_rng(3)
    x, y = rng.random((3, 40, 50)), rng.random((50, 30))
    c = od.matmul(da.from_array(x, chunks=(1, 20, 25)), da.from_array(y, chunks=(25, 15)),
                  engine="cpu")
    assert c.shape == (3, 40, 30) and c.chunks == ((1, 1, 1), (20, 20), (15, 15))
    np.testing.assert_allclose(c.compute(scheduler="sync"), x @ y,
                               rtol=4 * 50 * 2.0**-53)


def test_matmul_rejects_bad_input():
    _, _, a, b = _arrays()
    with pytest.raises(ValueError, match="at least 2"):
        od.matmul(a[0], b)
    with pytest.raises(ValueError, match="mismatch"):
        od.matmul(a, b[:600])
    with pytest.raises(ValueError, match="rechunk"):
        od.matmul(a, b.rechunk((450, 150)))
    with pytest.raises(ValueError):
        od.matmul(a, b, precision="fp128")


def test_import_ozaki_backend_does_not_import_dask():
    import subprocess
    import sys

    code = ("import sys, ozaki_backend; print(sorted(m for m in ('dask', 'distributed', "
            "'dask_cuda') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
