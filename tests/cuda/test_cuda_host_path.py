"""The host path on the CUDA engine (issue 17, item 1): NumPy operands in every layout,
through every entry point, bitwise equal to the CPU engine; results written straight
into C- and Fortran-ordered destinations; NaN/Inf found on the device give NumPy's own
answer; the per-step timing of the benchmark.

Marked ``gpu``: skipped where CuPy or a CUDA device is missing.
"""

import numpy as np
import pytest
from bits import assert_same_bits

import ozaki_backend as ob
from ozaki_backend.plan import Plan
from layouts import layouts

cupy = pytest.importorskip("cupy")
pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

GPU = dict(engine="cuda", min_size=0)
M_, K_, N_ = 300, 257, 190


@pytest.fixture(autouse=True)
def clean_state(clean_dispatch):
    ob.dispatch.install()


def operands(seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.random((M_, K_)) - 0.5) * np.exp(rng.standard_normal((M_, K_)))
    b = (rng.random((K_, N_)) - 0.5) * np.exp(rng.standard_normal((K_, N_)))
    return a, b


def cpu(a, b):
    return ob.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), engine="cpu")


@pytest.mark.parametrize("la", ["C", "F", "T", "strided", "rows", "cols"])
@pytest.mark.parametrize("lb", ["C", "F", "strided", "rows", "cols"])
@pytest.mark.parametrize("entry", ["@", "np.dot", "einsum"])
def test_layouts_match_the_cpu_engine(entry, la, lb):
    a0, b0 = operands(1)
    a, b = layouts(a0)[la], layouts(b0)[lb]
    call = {"@": lambda: a @ b, "np.dot": lambda: np.dot(a, b),
            "einsum": lambda: np.einsum("ij,jk->ik", a, b)}[entry]
    with ob.enabled(**GPU):
        got = call()
    assert ob.stats()["reasons"]["routed"] == {"engine=cuda": 1}
    assert_same_bits(got, cpu(a0, b0))


@pytest.mark.parametrize("order", ["C", "F"])
def test_out_in_either_order_matches_the_cpu_engine(order):
    a, b = operands(2)
    out = np.full((M_, N_), np.nan, order=order)
    with ob.enabled(**GPU):
        assert np.matmul(a, b, out=out) is out
    assert_same_bits(out, cpu(a, b))


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 2])
def test_scipy_dgemm_fortran_operands_match_the_cpu_engine(trans_a, trans_b):
    blas = pytest.importorskip("scipy.linalg.blas")
    a0, b0 = operands(3)
    a = np.asfortranarray(a0.T if trans_a else a0)
    b = np.asfortranarray(b0.T if trans_b else b0)
    with ob.enabled(**GPU):
        got = blas.dgemm(1.0, a, b, trans_a=trans_a, trans_b=trans_b)
    assert got.flags.f_contiguous
    assert ob.stats()["routed"] == 1
    assert_same_bits(got, cpu(a0, b0))


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_found_on_the_device_gives_numpys_answer(value):
    a, b = operands(4)
    a[17, 5] = value
    with np.errstate(all="ignore"):
        want = a @ b
        with ob.enabled(**GPU):
            got = a @ b
    assert_same_bits(got, want)
    assert ob.stats()["reasons"]["native"] == {"non-finite operand": 1}


def test_matmul_numpy_fortran_out_and_steps():
    from ozaki_backend.cuda import engine

    a, b = operands(5)
    plan = Plan(M_, N_, K_)
    out = np.full((M_, N_), np.nan, order="F")
    steps = {}
    assert engine.matmul_numpy(a, b, plan, out=out, steps=steps) is out
    assert_same_bits(out, cpu(a, b))
    assert set(steps) == {"upload", "engine", "download"}
    assert all(v > 0 for v in steps.values())
    with pytest.raises(ValueError):
        engine.matmul_numpy(a, b, plan, out=np.empty((M_, 2 * N_))[:, ::2])


def test_staging_buffers_are_kept_across_calls():
    from ozaki_backend.cuda import staging

    a, b = operands(6)
    with ob.enabled(**GPU):
        a @ b
    st = staging._get_staging()
    made = st._made
    with ob.enabled(**GPU):
        a @ b
    assert st._made == made and made >= 1


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("scheme_moduli", [None, 8])
def test_tiles_download_while_the_rest_computes(monkeypatch, order, scheme_moduli):
    """Small thresholds force the overlapped download (row blocks for a C result,
    column blocks for a Fortran one): the bits are the CPU engine's, every tile came
    down through the overlap, and the whole result is written."""
    from ozaki_backend.cuda import engine, staging

    monkeypatch.setattr(engine, "OVERLAP_BYTES", 0)
    monkeypatch.setattr(engine, "OVERLAP_MIN_SIDE", 1)
    seen = []
    real = staging.TileDownloads.tile_done
    monkeypatch.setattr(staging.TileDownloads, "tile_done",
                        lambda self, *t: seen.append(t) or real(self, *t))
    a, b = operands(7)
    plan = Plan(M_, N_, K_) if scheme_moduli is None else Plan(M_, N_, K_, moduli=8)
    out = np.full((M_, N_), np.nan, order=order)
    assert engine.matmul_numpy(a, b, plan, out=out, check_finite=True) is out
    assert len(seen) >= 2       # 64-aligned blocks: 3 of rows (C) or columns (F) here
    want = ob.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), engine="cpu",
                     **({} if scheme_moduli is None else {"moduli": 8}))
    assert_same_bits(out, want)


def test_large_results_come_down_in_blocks_of_at_most_the_block_bytes():
    """Only the last block's download is not hidden behind the compute: a 512 MiB
    result comes down in 8 blocks of 64 MiB, a 128 MiB one still in 4, a 2 GiB one in 8,
    and a result below the threshold in one piece."""
    from ozaki_backend.cuda import engine

    assert engine.download_blocks(8192, 8192) == 8
    assert engine.download_blocks(4096, 4096) == 4
    assert engine.download_blocks(16384, 16384) == engine.OVERLAP_MAX_BLOCKS
    assert engine.download_blocks(1024, 1024) == 1      # 8 MiB
    assert engine.download_blocks(65536, 256) == 1      # a narrow side


@pytest.mark.parametrize("la", ["C", "F", "T", "rows", "cols"])
def test_upload_makes_no_host_copy(monkeypatch, la):
    """C- and F-ordered operands and views with contiguous rows (columns) go into the
    pinned chunks as they lie: no host-side packing or transposing copy."""
    from ozaki_backend.cuda import engine

    a0, b0 = operands(8)
    a, b = layouts(a0)[la], layouts(b0)[la]
    copies = []
    for name in ("ascontiguousarray", "asfortranarray", "copy"):
        real = getattr(np, name)
        monkeypatch.setattr(np, name, lambda x, *args, _r=real, **kw:
                            copies.append(np.shape(x)) or _r(x, *args, **kw))
    got = engine.matmul_numpy(a, b, Plan(M_, N_, K_), check_finite=True)
    monkeypatch.undo()
    assert (M_, K_) not in copies and (K_, N_) not in copies
    assert (K_, M_) not in copies and (N_, K_) not in copies
    assert_same_bits(got, cpu(a0, b0))


# ------------------------------------------------------- interrupts and page faults
def test_an_interrupted_wait_leaves_no_job_touching_the_caller_buffers():
    # Ctrl-C while a staged transfer runs: wait() re-raises only once no job reads or
    # writes the caller's arrays any more (NumPy frees its result right after), and
    # every pinned slot is back in the pool (cancelled jobs give theirs back).
    from concurrent.futures import Future

    from ozaki_backend.cuda import staging

    host = np.random.default_rng(5).standard_normal(6 * staging.CHUNK_BYTES // 8 * 4)
    stream = staging.thread_stream()
    dev, up = staging.upload_start(host, stream)
    staging.wait(up)
    back = np.empty_like(host)
    futs = staging.download_start(dev, back, stream)
    interrupted = Future()
    interrupted.set_exception(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        staging.wait([interrupted] + futs)
    assert all(f.done() for f in futs)
    st = staging._get_staging()
    assert st._free.qsize() == st._made          # every slot given back
    staging.download(dev, back, stream)          # and the pool still works
    assert np.array_equal(back.view(np.int64), host.view(np.int64))


def test_prefault_populates_without_writing():
    from ozaki_backend.cuda import staging

    x = np.random.default_rng(6).standard_normal(staging.PREFAULT_BYTES // 8 * 2)
    ref = x.copy()
    staging.wait(staging.prefault(x))
    assert np.array_equal(x.view(np.int64), ref.view(np.int64))
    fresh = np.empty(staging.PREFAULT_BYTES // 8 * 2)
    futs = staging.prefault(fresh)
    assert futs and staging.prefault(fresh[:10]) == []
    staging.wait(futs)
