"""The CuPy hook's reading of cuBLAS arguments, checked without a GPU: the views it
builds from a column-major ``C = alpha op(A) op(B) + beta C`` call are the row-major
product ``C^T = op(B)^T op(A)^T`` the engine computes, for every transpose, leading
dimension and batch stride (NumPy buffers stand in for device memory)."""

import itertools

import numpy as np
import pytest

from ozaki_backend.dispatch import cupy_hook
from ozaki_backend.dispatch.cupy_hook import OP_C, OP_N, OP_T, gemm_layouts


def _colmajor(buf, rows, cols, ld, offset=0):
    """The column-major ``rows x cols`` matrix of leading dimension ``ld`` at ``offset``
    of the flat buffer (BLAS's own definition)."""
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return buf[offset + i + j * ld]


def _op(x, trans):
    return x if trans == OP_N else (x.T if trans == OP_T else x.conj().T)


def _view(buf, layout):
    """What the hook's ``_cupy_view`` makes of a layout, on a NumPy buffer."""
    shape, strides, extent, conj = layout
    assert extent <= buf.size
    v = np.lib.stride_tricks.as_strided(buf, shape, tuple(s * buf.itemsize for s in strides))
    return v.conj() if conj else v


def _buffer(rng, size, dtype):
    # Small integers: every product and sum is exact, so the comparison is bitwise.
    re = rng.integers(-4, 5, size).astype(np.float64)
    if dtype == np.complex128:
        return re + 1j * rng.integers(-4, 5, size)
    return re


# (the conjugate transpose is the transpose for real data: complex cases only)
CASES = [c for c in itertools.product((OP_N, OP_T, OP_C), (OP_N, OP_T, OP_C), (1, 3),
                                      (np.float64, np.complex128))
         if c[3] == np.complex128 or OP_C not in c[:2]]


@pytest.mark.parametrize("transa, transb, batch, dtype", CASES)
def test_views_compute_what_cublas_computes(transa, transb, batch, dtype):
    rng = np.random.default_rng(transa * 10 + transb + batch)
    m, n, k = 5, 4, 3
    # Stored shapes (column-major) and leading dimensions with padding.
    ar, ac = (m, k) if transa == OP_N else (k, m)
    br, bc = (k, n) if transb == OP_N else (n, k)
    lda, ldb, ldc = ar + 2, br + 1, m + 3
    sa, sb, sc = lda * ac + 5, ldb * bc + 2, ldc * n + 1
    A = _buffer(rng, sa * batch, dtype)
    B = _buffer(rng, sb * batch, dtype)
    C = _buffer(rng, sc * batch, dtype)
    alpha, beta = 2.0, -1.0
    want = []
    for i in range(batch):
        opa = _op(_colmajor(A, ar, ac, lda, i * sa), transa)
        opb = _op(_colmajor(B, br, bc, ldb, i * sb), transb)
        want.append(alpha * (opa @ opb) + beta * _colmajor(C, m, n, ldc, i * sc))
    lx, ly, lc = gemm_layouts(transa, transb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch)
    x, y, out = _view(B, lx), _view(A, ly), _view(C, lc)
    got = alpha * (x @ y) + beta * out
    for i in range(batch):
        g = got[i] if batch > 1 else got
        np.testing.assert_array_equal(g, want[i].T)
    # The output view is the memory cuBLAS writes, as the engine writes it (no copy).
    assert lc[3] is False
    for i in range(batch):
        o = out[i] if batch > 1 else out
        np.testing.assert_array_equal(o, _colmajor(C, m, n, ldc, i * sc).T)


def test_extent_covers_exactly_the_elements_read():
    shape, strides, extent, _ = cupy_hook.operand_layout(OP_N, 4, 3, 6, stride=20, batch=2)
    last = sum((s - 1) * st for s, st in zip(shape, strides))
    assert extent == last + 1 == 20 + 2 * 6 + 4
    shape, strides, extent, _ = cupy_hook.operand_layout(OP_T, 4, 3, 5)
    assert shape == (3, 4) and strides == (1, 5) and extent == 3 * 5 + 3


def test_wrappers_pass_everything_through_outside_scopes(clean_dispatch):
    """The replacement functions call CuPy's with the original arguments when nothing
    is enabled (no CuPy needed: a stand-in original records its call)."""
    seen = []

    def original(*args, **kwargs):
        seen.append((args, kwargs))
        return "native"

    for name, make in cupy_hook.TARGETS.items():
        seen.clear()
        w = make(original)
        args = tuple(range(30))[:{"gemmEx": 19, "gemmStridedBatchedEx": 23}.get(
            name, 14 if "Strided" not in name else 18)]
        assert w(*args) == "native" and seen == [(args, {})], name
        assert w(*args, algo=1) == "native" and seen[-1] == (args, {"algo": 1}), name


def test_installing_without_cupy_waits_for_its_cublas_module(gpu_dispatch):
    import sys

    if cupy_hook.MODULE in sys.modules:
        pytest.skip("CuPy's cuBLAS module is imported here: the hook is installed")
    assert cupy_hook.waiting() and not cupy_hook.installed()
    assert any(isinstance(f, type(cupy_hook._watcher)) for f in sys.meta_path)
    cupy_hook.uninstall()
    assert not cupy_hook.waiting()
    assert not any(getattr(f, "name", None) == cupy_hook.MODULE for f in sys.meta_path)
    cupy_hook.install()
    assert cupy_hook.waiting()


def test_the_hook_patches_the_module_when_it_is_imported(gpu_dispatch, tmp_path,
                                                         monkeypatch):
    """A stand-in for CuPy's cuBLAS module (under a name of its own, so that a real CuPy
    is never disturbed), imported after install(): its GEMM functions are replaced on
    import and put back by uninstall()."""
    import sys

    name = "ozaki_fake_cupy_cublas"
    (tmp_path / f"{name}.py").write_text(
        "def gemmEx(*a, **k):\n    return 'native'\n"
        "def dgemm(*a, **k):\n    return 'native'\n"
        "def sgemm(*a, **k):\n    return 'native'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cupy_hook.uninstall()
    monkeypatch.setattr(cupy_hook, "MODULE", name)
    try:
        cupy_hook.install()
        assert cupy_hook.waiting() and not cupy_hook.installed()
        import ozaki_fake_cupy_cublas as fake

        assert cupy_hook.installed() and not cupy_hook.waiting()
        assert fake.gemmEx._ozaki_backend_original is not None
        assert not hasattr(fake.sgemm, "_ozaki_backend_original")   # float32: untouched
        assert fake.dgemm(*range(14)) == "native"                    # outside scopes
        cupy_hook.uninstall()
        assert not hasattr(fake.gemmEx, "_ozaki_backend_original")
    finally:
        sys.modules.pop(name, None)
        cupy_hook.uninstall()
        monkeypatch.undo()
        cupy_hook.install()      # the real module again (now or on its import)
