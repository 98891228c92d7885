"""complex128 products inside ``enabled()``: ``@``/``np.matmul`` (the loop hook's
``DD->D`` loop), ``np.dot``, ``np.tensordot``, ``np.einsum``, ``multi_dot`` are routed
and equal to ``ozaki_backend.matmul``; complex64 stays NumPy's (``docs/spec.md`` §11)."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import loophook

from bits import assert_same_bits


def cmat(shape, rng):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def test_complex_matmul_operator_is_routed():
    rng = np.random.default_rng(0)
    A, B = cmat((20, 30), rng), cmat((30, 10), rng)
    ref = ob.matmul(A, B, engine="cpu")
    with ob.enabled(engine="cpu", min_size=0):
        loophook.install()
        if not loophook.installed_complex():
            pytest.skip("this NumPy has no DD->D matmul loop to hook")
        ob.reset_stats()
        C1 = A @ B
        C2 = np.matmul(A, B)
        routed = ob.stats()["routed"]
    assert routed == 2
    assert_same_bits(C1, ref)
    assert_same_bits(C2, ref)


def test_real_times_complex_operator_equals_matmul():
    """NumPy promotes the real operand before its loop; the zero imaginary parts make
    the routed product take the real-operand path, so the bits are matmul's."""
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((12, 25)), cmat((25, 9), rng)
    ref = ob.matmul(A, B, engine="cpu")
    with ob.enabled(engine="cpu", min_size=0):
        loophook.install()
        if not loophook.installed_complex():
            pytest.skip("this NumPy has no DD->D matmul loop to hook")
        C = A @ B
    assert_same_bits(C, ref)


def test_dot_tensordot_einsum_multi_dot():
    rng = np.random.default_rng(2)
    A, B, D = cmat((16, 24), rng), cmat((24, 8), rng), cmat((8, 5), rng)
    ref = ob.matmul(A, B, engine="cpu")
    with ob.enabled(engine="cpu", min_size=0):
        ob.reset_stats()
        d = np.dot(A, B)
        t = np.tensordot(A, B, axes=1)
        e = np.einsum("ik,kj->ij", A, B)
        md = np.linalg.multi_dot([A, B, D])
        out = np.empty((16, 8), complex)
        np.dot(A, B, out=out)
        routed = ob.stats()["routed"]
    for r in (d, t, e, out):
        assert_same_bits(np.ascontiguousarray(r), ref)
    assert routed >= 6
    exact = ob.matmul(ob.matmul(A, B, engine="cpu"), D, engine="cpu")
    exact2 = ob.matmul(A, ob.matmul(B, D, engine="cpu"), engine="cpu")
    assert np.array_equal(md, exact) or np.array_equal(md, exact2)


def test_complex64_is_left_alone():
    rng = np.random.default_rng(3)
    A, B = cmat((10, 12), rng).astype(np.complex64), cmat((12, 7), rng).astype(np.complex64)
    with ob.enabled(engine="cpu", min_size=0):
        ob.reset_stats()
        C = A @ B
        d = np.dot(A, B)
        assert ob.stats()["routed"] == 0
    with ob.disabled():
        assert_same_bits(C, np.matmul(A, B))
        assert_same_bits(d, np.dot(A, B))


def test_scipy_zgemm_is_routed():
    blas = pytest.importorskip("scipy.linalg.blas")
    rng = np.random.default_rng(4)
    A, B = cmat((14, 22), rng), cmat((22, 9), rng)
    C0 = np.asfortranarray(cmat((14, 9), rng))
    ref = ob.matmul(A, B, engine="cpu")
    refh = ob.matmul(A.conj().T.conj().T, B, engine="cpu")      # the same product
    with ob.enabled(engine="cpu", min_size=0):
        ob.reset_stats()
        r1 = blas.zgemm(1.0, A, B)
        r2 = blas.zgemm(1.0, A.conj().T, B, trans_a=2)          # (A^H)^H = A
        r3 = blas.zgemm(2.0 - 1j, A, B, beta=0.5, c=C0)
        gemm = blas.get_blas_funcs("gemm", (A, B))
        r4 = gemm(1.0, A, B)
        routed = ob.stats()["routed_by_entry"].get("scipy zgemm", 0)
    assert routed == 4
    assert r1.flags.f_contiguous
    assert_same_bits(np.ascontiguousarray(r1), ref)
    assert_same_bits(np.ascontiguousarray(r2), refh)
    assert_same_bits(np.ascontiguousarray(r4), ref)
    with np.errstate(all="ignore"):
        expect = (2.0 - 1j) * ref + 0.5 * C0
    assert_same_bits(np.ascontiguousarray(r3), np.ascontiguousarray(expect))
    with ob.disabled():
        assert blas.zgemm.__name__ == "zgemm"
