"""The tiling rules both engines share (``ozaki_backend/spec/tiling.py``): tiles chosen
within a workspace budget, the symmetric product's tiles and their workspace."""

import numpy as np
import pytest

from ozaki_backend.spec import tiling


def _product_bytes(kpad, N):
    """The CUDA engine's integer-product workspace of a ``tm x tn`` tile (residue planes
    and int32 products, as ``cuda/workspace._product_layout`` registers them)."""
    return lambda tm, tn: tiling.layout_bytes((N * tm * kpad, 1), (N * tn * kpad, 1),
                                              (N * tm * (-(-tn // 16) * 16), 4))


@pytest.mark.parametrize("m, n, kpad, N", [(32768, 32768, 32768, 20), (65536, 65536, 8192, 16),
                                           (1100, 900, 704, 20), (300, 5000, 64, 8)])
@pytest.mark.parametrize("budget", [12 << 30, 16 << 30, 64 << 20, 14 << 20])
def test_chosen_tiles_fit_the_budget_and_cover_the_product(m, n, kpad, N, budget):
    nbytes = _product_bytes(kpad, N)
    tiles = tiling.fit_tiles(m, n, nbytes, budget)
    if tiles is None:       # only when even the smallest tile is too large
        assert nbytes(min(m, 256), min(n, 256)) > budget
        return
    tm, tn = tiles
    assert nbytes(tm, tn) <= budget
    assert tm == m or tm >= 256 and tm % 64 == 0
    assert tn == n or tn >= 256 and tn % 64 == 0
    cover = np.zeros((min(m, 2000), min(n, 2000)), dtype=np.int64)   # a corner suffices
    for i0, i1, j0, j1 in tiling.tile_list(m, n, tm, tn):
        cover[i0:i1, j0:j1] += 1
    assert (cover == 1).all()


def test_the_issue_17_shapes_tile_coarsely_within_16_gib():
    """32768^3 with 20 moduli under 16 GiB: tiles of at least 8192 x 4096 (GEMMs that
    run at cuBLAS's full rate), against 64 GB for the whole product."""
    nbytes = _product_bytes(32768, 20)
    assert nbytes(32768, 32768) > 64e9
    tm, tn = tiling.fit_tiles(32768, 32768, nbytes, 16 << 30)
    assert tm * tn >= 8192 * 4096


def test_whole_products_are_not_cut():
    assert tiling.fit_tiles(500, 400, lambda tm, tn: tm * tn, 10 ** 6) == (500, 400)


@pytest.mark.parametrize("m, kpad, N", [(4096, 60000, 20), (60000, 4096, 16), (1000, 304, 16),
                                        (300, 64, 20)])
@pytest.mark.parametrize("budget", [16 << 30, 1 << 30, 64 << 20, 8 << 20])
def test_symmetric_plans_fit_the_budget(m, kpad, N, budget):
    plan = tiling.symmetric_plan(m, kpad, N, budget)
    if plan is None:
        assert tiling.symmetric_workspace_bytes(m, min(m, 256), min(m, 256), kpad, N,
                                                False) > budget
        return
    tiles, rows, cols, whole = plan
    assert tiling.symmetric_workspace_bytes(m, rows, cols, kpad, N, whole) <= budget
    assert rows == max(i1 - i0 for i0, i1, _, _ in tiles)
    assert cols == max(j1 - j0 for _, _, j0, j1 in tiles)
    cover = np.zeros((m, m), dtype=np.int8) if m <= 5000 else None
    if cover is not None:
        for i0, i1, j0, j1 in tiles:
            cover[i0:i1, j0:j1] += 1
        for i0, i1, j0, j1 in tiling.mirrored_blocks(tiles):
            cover[j0:j1, i0:i1] += 1
        assert (cover == 1).all()


def test_the_gram_shape_keeps_one_set_of_planes_and_large_tiles():
    """X 60000 x 4096, ``X.T @ X``: the planes of all 4096 rows (4.9 GB at 20 moduli)
    and 2048-wide tiles fit 16 GiB; the work is 0.53 of the general product's."""
    tiles, rows, cols, whole = tiling.symmetric_plan(4096, 60000, 20, 16 << 30)
    assert whole and rows == cols == 2048
    assert tiling.symmetric_work(tiles) / 4096 ** 2 <= 0.55
