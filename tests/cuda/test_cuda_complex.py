"""The CUDA engine's complex products (``docs/spec.md`` §11), bitwise against the CPU
engine: the kernels of ``kernels/complex.cu`` stage by stage, the CRT with the complex
table's constants, and whole products (φ families, odd shapes, stacks, mixes, NumPy and
CuPy operands, NaN/Inf).

The source/prelude checks run anywhere; everything else is marked ``gpu``.
"""

import re

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.cuda import _prelude, loader
from ozaki_backend.reference import complex as rcx
from ozaki_backend.reference import crt as rcrt
from ozaki_backend.reference import residues as rres
from ozaki_backend.spec.complex_moduli import MAX_COMPLEX_MODULI, complex_crt_constants
from ozaki_backend.spec.moduli import MIN_MODULI
from ozaki_backend.testing import phi_matrix

from bits import assert_same_bits


def cmat(shape, phi, rng):
    return phi_matrix(shape, phi, rng) + 1j * phi_matrix(shape, phi, rng)


# --------------------------------------------------------------------------- anywhere

def test_complex_source_assembles():
    src = loader.read_source("complex.cu")
    assert "oz_cx_residues" in src and "oz_cx_recombine" in src
    assert '#line 1 "kernels/common.cuh"' in src


@pytest.mark.parametrize("n", [MIN_MODULI, 9, MAX_COMPLEX_MODULI])
def test_complex_crt_prelude_constants_are_exact(n):
    cc = complex_crt_constants(n)
    text = _prelude.complex_crt_prelude(n)
    L = _prelude.n_limbs(n, cc.M)

    def limbs(name):
        m = re.search(rf"{name}\[[^=]*=\s*(\{{.*\}});", text)
        groups = re.findall(r"\{([^{}]*)\}", m.group(1))
        return [sum(int(v) << (32 * t) for t, v in enumerate(re.findall(r"(\d+)u", g)))
                for g in groups]

    assert limbs("OZ_M")[0] == cc.M
    assert limbs("OZ_MH")[0] == cc.M // 2
    assert limbs("OZ_MHN")[0] == cc.M - cc.M // 2 == cc.M // 2 + 1   # odd M
    W = limbs("OZ_W")
    assert len(W) == n
    for l, w in enumerate(W):
        assert all(w % q == (1 if i == l else 0) for i, q in enumerate(cc.moduli))
    assert cc.M // 2 + n * _prelude.C_BOUND * cc.M < 1 << (32 * L - 1)


def test_real_prelude_keeps_its_constants():
    """The real table's OZ_MHN is M/2 itself (even M): the real kernel is unchanged."""
    from ozaki_backend.spec.moduli import crt_constants
    text = _prelude.crt_prelude(16)
    M = crt_constants(16).M
    mh = re.search(r"OZ_MH\[[^=]*=\s*(\{[^}]*\})", text).group(1)
    mhn = re.search(r"OZ_MHN\[[^=]*=\s*(\{[^}]*\})", text).group(1)
    assert mh == mhn and M % 2 == 0


# --------------------------------------------------------------------------- GPU

gpu = pytest.mark.gpu


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@gpu
@pytest.mark.parametrize("N", [MIN_MODULI, 16, MAX_COMPLEX_MODULI])
def test_residue_planes_and_gaussian_map(cupy, N):
    from ozaki_backend.cuda import complex as ccx
    rng = np.random.default_rng(N)
    Xr = phi_matrix((13, 37), 4.0, rng) * 2.0 ** 40
    Xi = phi_matrix((13, 37), 4.0, rng) * 2.0 ** 40
    Xr[2, 3] = 5e-324
    Xi[4] = 0.0
    s = rng.integers(-20, 30, 13)
    cc = complex_crt_constants(N)
    from ozaki_backend.reference import scaling
    Rr = rres.residues(scaling.truncate(Xr, s), cc.moduli)
    Ri = rres.residues(scaling.truncate(Xi, s), cc.moduli)
    U, V = rcx.gaussian_residues(Rr, Ri, cc.moduli, cc.roots)
    dU, dV = ccx.residue_planes(cupy.asarray(Xr), cupy.asarray(Xi), cupy.asarray(s), N)
    assert_same_bits(dU[:, :, :37].get(), U)
    assert_same_bits(dV[:, :, :37].get(), V)
    assert not dU[:, :, 37:].any() and not dV[:, :, 37:].any()


@gpu
def test_recombine_and_crt(cupy):
    from ozaki_backend.cuda import complex as ccx
    from ozaki_backend.cuda import crt as ccrt
    rng = np.random.default_rng(3)
    N = 16
    cc = complex_crt_constants(N)
    C1 = rng.integers(-2**30, 2**30, (N, 9, 16)).astype(np.int32)
    C2 = rng.integers(-2**30, 2**30, (N, 9, 16)).astype(np.int32)
    p = np.array(cc.moduli)[:, None, None]
    re, im = rcx.recombine((C1 % p).astype(np.int16), (C2 % p).astype(np.int16), cc)
    RE, IM = ccx.recombine(cupy.asarray(C1), cupy.asarray(C2), N, 9, 11)
    assert_same_bits(RE[:, :, :11].get().astype(np.int16), re[:, :, :11])
    assert_same_bits(IM[:, :, :11].get().astype(np.int16), im[:, :, :11])
    s = rng.integers(-10, 10, 9)
    t = rng.integers(-10, 10, 11)
    ref = rcrt.reconstruct_round(re[:, :, :11], cc.moduli, s, t)
    out = cupy.empty((9, 11))
    ccrt.crt_into(RE, N, 9, 11, cupy.asarray(s, dtype=np.int32),
                  cupy.asarray(t, dtype=np.int32), out,
                  table_prelude=_prelude.complex_crt_prelude(N))
    assert_same_bits(out.get(), ref)


@gpu
@pytest.mark.parametrize("phi", [-1.0, 0.5, 2.0])
@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 33, 9), (64, 129, 31), (200, 300, 150)])
@pytest.mark.parametrize("kw", [{}, {"mode": "fast"}, {"moduli": 7}])
def test_products_bitwise_equal_to_cpu(cupy, phi, shape, kw):
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    A, B = cmat((m, k), phi, rng), cmat((k, n), phi, rng)
    ref, rb = ob.matmul(A, B, engine="cpu", return_bound=True, **kw)
    got, gb = ob.matmul(A, B, engine="cuda", return_bound=True, **kw)
    assert_same_bits(got, ref)
    assert_same_bits(gb, rb)
    dev = ob.matmul(cupy.asarray(A), cupy.asarray(B), engine="cuda", **kw)
    assert_same_bits(dev.get(), ref)


@gpu
@pytest.mark.parametrize("which", ["A", "B", "both"])
def test_mixes_and_zero_imaginary_parts(cupy, which):
    rng = np.random.default_rng(5)
    A, B = cmat((20, 40), 0.5, rng), cmat((40, 12), 0.5, rng)
    if which in ("A", "both"):
        A = A.real.copy()
    if which in ("B", "both"):
        B = B.real + 0j
    ref = ob.matmul(A, B, engine="cpu")
    assert_same_bits(ob.matmul(A, B, engine="cuda"), ref)


@gpu
def test_stacks_structured_and_non_finite(cupy):
    rng = np.random.default_rng(6)
    A, B = cmat((3, 30, 50), 2.0, rng), cmat((50, 20), 2.0, rng)
    A.real[:, :, :10] = 0
    A[1, 4] = 0
    B.imag[5:9] = 0
    assert_same_bits(ob.matmul(A, B, engine="cuda"), ob.matmul(A, B, engine="cpu"))
    A[0, 0, 0] = np.nan
    with np.errstate(invalid="ignore"):
        assert_same_bits(ob.matmul(A, B, engine="cuda"), np.matmul(A, B))


@gpu
@pytest.mark.slow
@pytest.mark.parametrize("k", [4096, 16384, 70000])
def test_long_k_bitwise(cupy, k):
    """70000 > KSPLIT: the k chunks are reduced modulo the complex moduli."""
    rng = np.random.default_rng(k)
    m, n = (64, 48) if k <= 16384 else (8, 6)
    A, B = cmat((m, k), 0.5, rng), cmat((k, n), 0.5, rng)
    assert_same_bits(ob.matmul(A, B, engine="cuda"), ob.matmul(A, B, engine="cpu"))


@gpu
def test_residual_pass_bitwise(cupy):
    """phi = 3 at k = 4096 takes the residual pass on the CPU (tests/reference); the
    GPU takes it too, with the same bits and bound."""
    rng = np.random.default_rng(0)
    A, B = cmat((64, 4096), 3.0, rng), cmat((4096, 64), 3.0, rng)
    ob.reset_stats()
    ref, rb = ob.matmul(A, B, engine="cpu", return_bound=True)
    assert ob.stats()["certificate"] == {"residual pass": 1}
    got, gb = ob.matmul(A, B, engine="cuda", return_bound=True)
    assert_same_bits(got, ref)
    assert_same_bits(gb, rb)
