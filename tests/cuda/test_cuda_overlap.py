"""The overlapped schedule (issue 18, ``cuda/overlap.py``, docs/performance.md): residues and
CRT passes on a side stream beside the GEMMs, which leave SMs free. Forced onto small
shapes with a small block, every product gives the CPU engine's bits — ragged blocks,
alpha/beta, an in-place update, reductions past ``KSPLIT``, guesses right and wrong —
and the cuBLAS handle's SM target is restored. Marked ``gpu``."""

import ctypes
import warnings

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.plan import Plan
from ozaki_backend.reference.engine import product_2d as ref_2d
from ozaki_backend.semantics import apply_alpha_beta
from ozaki_backend.spec.moduli import KSPLIT
from ozaki_backend.testing import family_operands

from bits import assert_same_bits

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

from ozaki_backend.cuda import modgemm, overlap, pipeline  # noqa: E402  (needs CuPy)
from ozaki_backend.cuda import shape_memory  # noqa: E402


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 64 outputs, the cuBLAS per-modulus path, whatever the size."""
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_OVERLAP_BLOCK", "64")
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_GEMM", "loop")
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_PATH", "cublas")
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_SIDE_SMS", "16")


def _sm_target():
    _set, get = overlap._cublas_sm_target()
    v = ctypes.c_int(-1)
    assert get(modgemm.handle(), ctypes.byref(v)) == 0
    return v.value


def _product(A, B, plan, **kw):
    """``(C, overlapped)``: one device product and whether the schedule ran."""
    before = overlap.RUNS["overlapped"]
    m, n = A.shape[0], B.shape[1]
    C = kw.pop("C", None)
    C = cupy.empty((m, n)) if C is None else C
    pipeline.product_into(cupy.asarray(A), cupy.asarray(B), plan, C, check_finite=True,
                          **kw)
    return C, overlap.RUNS["overlapped"] > before


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("shape", [(200, 300, 150), (64, 96, 130), (129, 40, 65)])
@pytest.mark.parametrize("family", ["phi1", "graded", "kscaled2_300", "cancellation"])
def test_overlapped_blocks_give_the_reference_bits(mode, shape, family):
    m, k, n = shape
    A, B = family_operands(family, m, k, n, np.random.default_rng(m + k + n))
    plan = Plan(m, n, k, mode=mode)
    target = _sm_target()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ob.NativeFallbackWarning)
        C, used = _product(A, B, plan)
    assert used
    assert _sm_target() == target          # the handle's SM target is restored
    assert_same_bits(C, ref_2d(A, B, plan))


def test_alpha_beta_and_in_place_update():
    """``C = alpha AB + beta C0`` into a separate output and in place (C0 is out): each
    block's CRT reads its own block of C0 before writing it."""
    m, k, n = 190, 70, 140
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    C0 = rng.standard_normal((m, n))
    plan = Plan(m, n, k)
    want = apply_alpha_beta(ref_2d(A, B, plan), 0.5, -2.0, C0)
    dC0 = cupy.asarray(C0)
    C, used = _product(A, B, plan, alpha=0.5, beta=-2.0, C0=dC0)
    assert used
    assert_same_bits(C, want)
    C, used = _product(A, B, plan, alpha=0.5, beta=-2.0, C0=dC0, C=dC0)
    assert used and C is dC0
    assert_same_bits(C, want)


@pytest.mark.parametrize("side_residues", [True, False])
def test_workspace_tiles_each_overlapped(monkeypatch, side_residues):
    """Workspace tiles of 100 x 90 (ragged), blocks of 64 inside each, in place: each
    tile's blocks run on the streams, the next tile waits for them (it reuses the
    planes); residues beside the GEMMs or all first."""
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_TILE", "100,90")
    monkeypatch.setattr(overlap, "SIDE_RESIDUES", side_residues)
    m, k, n = 230, 120, 200
    rng = np.random.default_rng(8)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    C0 = rng.standard_normal((m, n))
    plan = Plan(m, n, k)
    before = overlap.RUNS["overlapped"]
    dC = cupy.asarray(C0)
    C, used = _product(A, B, plan, alpha=-1.5, beta=0.25, C0=dC, C=dC)
    assert overlap.RUNS["overlapped"] - before == 3 * 3     # every tile overlapped
    assert_same_bits(C, apply_alpha_beta(ref_2d(A, B, plan), -1.5, 0.25, C0))


def test_a_reduction_past_ksplit():
    """k > KSPLIT: each block's GEMMs fold their first chunk before the second."""
    m, n, k = 100, 70, KSPLIT + 48
    rng = np.random.default_rng(6)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    plan = Plan(m, n, k)
    C, used = _product(A, B, plan)
    assert used
    assert_same_bits(C, ref_2d(A, B, plan))


def test_wrong_guesses_abandon_queued_blocks():
    """A shape whose count changes: the guessed count is abandoned after the first
    block's GEMMs were queued on the other streams; the bits are still the reference's
    (and an in-place update still reads the original C)."""
    m, k, n = 150, 260, 130
    plan = Plan(m, n, k)
    before = dict(shape_memory.GUESSES)
    for i, name in enumerate(["phi0.5", "phi0.5", "phi2", "phi2", "phi0.5"]):
        A, B = family_operands(name, m, k, n, np.random.default_rng(40 + i))
        C0 = np.random.default_rng(i).standard_normal((m, n))
        want = apply_alpha_beta(ref_2d(A, B, plan), 0.5, -2.0, C0)
        dC = cupy.asarray(C0)
        C, used = _product(A, B, plan, alpha=0.5, beta=-2.0, C0=dC, C=dC)
        assert used
        assert_same_bits(C, want)
    assert shape_memory.GUESSES["right"] > before["right"]
    assert shape_memory.GUESSES["wrong"] > before["wrong"]


def test_switched_off_and_small_products_take_the_tile_loop(monkeypatch):
    m, k, n = 200, 50, 150
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    plan = Plan(m, n, k)
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_SIDE_SMS", "0")
    C, used = _product(A, B, plan)
    assert not used
    assert_same_bits(C, ref_2d(A, B, plan))
    monkeypatch.delenv("OZAKI_BACKEND_CUDA_OVERLAP_BLOCK")
    monkeypatch.delenv("OZAKI_BACKEND_CUDA_SIDE_SMS")
    assert overlap.block_for(8192, 8192) is None           # off by default (SIDE_SMS)
    monkeypatch.setenv("OZAKI_BACKEND_CUDA_SIDE_SMS", "8")
    assert overlap.block_for(m, n) is None                 # below MIN_OUTPUTS
    assert overlap.block_for(8192, 8192) == 4096
    assert overlap.block_for(4096, 4096) == 2048
