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
from complex_cases import DIRECT_CASES, direct_cases


def cmat(shape, phi, rng):
    return phi_matrix(shape, phi, rng) + 1j * phi_matrix(shape, phi, rng)


# --------------------------------------------------------------------------- anywhere

def test_complex_source_assembles():
    src = loader.read_source("complex.cu")
    for name in ("oz_cx_quantize", "oz_cx_bound_combine_i32", "oz_cx_bound_combine_i64",
                 "oz_cx_residues", "oz_cx_flags"):
        assert f"\n{name}(" in src or f" {name}(" in src, name
    assert '#line 1 "kernels/residue_digits.cuh"' in src
    assert '#line 1 "kernels/common.cuh"' in src
    crt = loader.read_source("crt.cu")
    assert "#ifdef OZ_CX_MAX" in crt and "oz_cx_crt(" in crt


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


def test_complex_table_prelude_matches_the_spec_and_the_residue_proof():
    """The generated table is the spec's (moduli, roots, inverses of 2 and 2r), and every
    ``fl(1/m)`` meets step (2) of ``residue_digits.cuh``'s proof exactly:
    ``2^52 |fl(1/m) - 1/m| < 1/(2m)`` (the float64 residue path for any odd m < 256)."""
    from fractions import Fraction
    text = _prelude.complex_table_prelude()
    cc = complex_crt_constants(MAX_COMPLEX_MODULI)

    def table(name):
        body = re.search(rf"{name}\(int l\) {{ return (.*?); }}", text).group(1)
        return [int(x) for x in re.findall(r"(\d+)u", body)]     # "l == i ? <m>u : ..."

    assert table("oz_cx_modulus") == list(cc.moduli)
    assert table("oz_cx_root") == list(cc.roots)
    body = re.search(r"oz_cx_inv_tab\[OZ_CX_MAX\] = \{([^}]*)\}", text).group(1)
    invs = [float.fromhex(h.strip()) for h in body.split(",")]
    assert len(invs) == MAX_COMPLEX_MODULI
    for p, inv in zip(cc.moduli, invs):
        assert p % 2 == 1 and p < 256
        assert inv == 1.0 / p
        assert 2 ** 52 * abs(Fraction(inv) - Fraction(1, p)) < Fraction(1, 2 * p)
    for p, r in zip(cc.moduli, cc.roots):
        assert (r * r + 1) % p == 0


@pytest.mark.parametrize("n", [MIN_MODULI, 16, MAX_COMPLEX_MODULI])
def test_complex_crt_weights_fold_the_recombination(n):
    """``OZ_W2``/``OZ_W2R`` (the weights oz_cx_crt multiplies ``c1 + c2`` and
    ``c1 - c2 + m`` by) are ``w_l 2^-1`` and ``w_l (2r)^-1`` modulo ``M``: congruent to
    the recombined residue's CRT term modulo every modulus, for every residue pair."""
    cc = complex_crt_constants(n)
    text = _prelude.complex_crt_prelude(n)
    L = int(re.search(r"#define OZ_L (\d+)", text).group(1))

    def table(name):
        body = re.search(rf"{name}\[OZ_N\]\[OZ_L\] = \{{(.*)\}};", text).group(1)
        rows = re.findall(r"\{([^{}]*)\}", body)
        return [sum(int(v.strip().rstrip("u")) << (32 * t) for t, v in
                    enumerate(r.split(","))) for r in rows]

    w2, w2r = table("OZ_W2"), table("OZ_W2R")
    assert len(w2) == len(w2r) == n
    for l, p in enumerate(cc.moduli):
        assert w2[l] < cc.M and w2r[l] < cc.M
        for q in cc.moduli:          # w_l is 1 modulo m_l and 0 modulo the others
            want2 = pow(2, -1, p) if q == p else 0
            want2r = pow(2 * cc.roots[l], -1, p) if q == p else 0
            assert w2[l] % q == want2 % q and w2r[l] % q == want2r % q
    assert 2 * max(cc.moduli) * n * cc.M < 2 ** (32 * L - 1)


# --------------------------------------------------------------------------- GPU

gpu = pytest.mark.gpu


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@gpu
@pytest.mark.parametrize("N", [MIN_MODULI, 16, MAX_COMPLEX_MODULI])
@pytest.mark.parametrize("scale,shifts", [(0, (-5, 40)), (40, (-20, 30)), (60, (20, 60)),
                                          (100, (20, 40)), (0, (-1700, -1600))],
                         ids=["1digit", "2-3digits", "3digits", "integer", "huge-shift"])
@pytest.mark.parametrize("negate", [False, True])
def test_residue_planes_and_gaussian_map(cupy, N, scale, shifts, negate):
    """Every path of the residue kernel (one, two, three float64 digits, the integer
    path; its warp vote), both signs of the imaginary part, against the reference."""
    from ozaki_backend.cuda import complex as ccx
    rng = np.random.default_rng(N)
    Xr = phi_matrix((45, 77), 4.0, rng) * 2.0 ** scale
    Xi = phi_matrix((45, 77), 4.0, rng) * 2.0 ** scale
    Xr[2, 3] = 5e-324
    Xi[4] = 0.0
    Xr[7, :9] = -Xr[7, :9]
    s = rng.integers(shifts[0], shifts[1], 45)
    if negate:
        Xi_dev = -Xi
    else:
        Xi_dev = Xi
    cc = complex_crt_constants(N)
    from ozaki_backend.reference import scaling
    Rr = rres.residues(scaling.truncate(Xr, s), cc.moduli)
    Ri = rres.residues(scaling.truncate(Xi, s), cc.moduli)
    U, V = rcx.gaussian_residues(Rr, Ri, cc.moduli, cc.roots)
    dU, dV = ccx.residue_planes(cupy.asarray(Xr), cupy.asarray(Xi_dev), cupy.asarray(s), N,
                                negate_imag=negate)
    assert_same_bits(dU[:, :, :77].get(), U)
    assert_same_bits(dV[:, :, :77].get(), V)
    assert not dU[:, :, 77:].any() and not dV[:, :, 77:].any()


@gpu
@pytest.mark.parametrize("N", [MIN_MODULI, 16, MAX_COMPLEX_MODULI])
def test_recombine_and_crt(cupy, N):
    """The fused recombination + CRT against the reference's two stages, from raw int32
    products (negative ones included), into a strided complex view."""
    from ozaki_backend.cuda import complex as ccx
    rng = np.random.default_rng(3)
    cc = complex_crt_constants(N)
    C1 = rng.integers(-2**30, 2**30, (N, 9, 16)).astype(np.int32)
    C2 = rng.integers(-2**30, 2**30, (N, 9, 16)).astype(np.int32)
    p = np.array(cc.moduli)[:, None, None]
    re, im = rcx.recombine((C1 % p).astype(np.int16), (C2 % p).astype(np.int16), cc)
    s = rng.integers(-10, 10, 9)
    t = rng.integers(-10, 10, 11)
    ref = rcx.compose(rcrt.reconstruct_round(re[:, :, :11], cc.moduli, s, t),
                      rcrt.reconstruct_round(im[:, :, :11], cc.moduli, s, t))
    big = cupy.zeros((9, 22), dtype=np.complex128)
    out = big[:, ::2]
    ccx.recombine_crt_into(cupy.asarray(C1), cupy.asarray(C2), N, 9, 11,
                           cupy.asarray(s, dtype=np.int32), cupy.asarray(t, dtype=np.int32),
                           out)
    assert_same_bits(out.get(), ref)
    assert not big[:, 1::2].any()


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


# --------------------------------------------------------------------------- scaling stage

def _complex_family(name, m, k, n, seed, shared=True):
    """Complex operands of one accuracy family. ``shared``: the family's operands times
    random unit phases, so that both parts carry the same structure (k-scaling,
    grading, ...), as in a complex matrix with that structure; otherwise real and
    imaginary parts drawn independently (parts of unrelated scales)."""
    from ozaki_backend.testing import family_operands
    rng = np.random.default_rng(seed)
    Ar, Br = family_operands(name, m, k, n, rng)
    if shared:
        return (Ar * np.exp(2j * np.pi * rng.random(Ar.shape)),
                Br * np.exp(2j * np.pi * rng.random(Br.shape)))
    Ai, Bi = family_operands(name, m, k, n, rng)
    return Ar + 1j * Ai, Br + 1j * Bi


@gpu
@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("name", ["phi2", "kscaled2_300", "kscaled1", "graded",
                                  "kscaled_graded", "triangular"])
@pytest.mark.parametrize("tile", [None, (8, 5)])
def test_embedding_statistics_and_tied_shifts(cupy, name, mode, tile):
    """The embedding's statistics read from the parts in place, its bound GEMM from the
    two GEMMs of the parts' size (whole, and in tiles of both halves), the tied shifts
    at every count and the certificate's count over the complex table are the
    reference's, which embeds the parts and applies the real rules."""
    from ozaki_backend.cuda import workspace
    from ozaki_backend.cuda import complex as ccx
    from ozaki_backend.cuda._common import COMPLEX_TABLE
    from ozaki_backend.reference import scaling as rsc
    A, B = _complex_family(name, 23, 70, 19, 11)
    parts = rcx.equilibrate_parts(A.real.copy(), A.imag.copy(), B.real.copy(),
                                  B.imag.copy())
    st = rsc.statistics(*rcx.embed(*parts), mode, squares=False)   # as reference/complex.py
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    workspace.TILE_OVERRIDE = tile
    try:
        dparts, prep = ccx.prepare(dA.real, dA.imag, dB.real, dB.imag, mode)
        d = prep.data()
    finally:
        workspace.TILE_OVERRIDE = None
    for got, ref in zip(dparts.scaled(), parts):
        assert_same_bits(got.get(), ref)
    a, b = prep.a, prep.b
    np.testing.assert_array_equal(a.E.get(), st.E)
    np.testing.assert_array_equal(b.E.get(), st.F)
    np.testing.assert_array_equal(a.X.get()[st.nzA], st.xA[st.nzA])
    np.testing.assert_array_equal(b.X.get()[st.nzB], st.yB[st.nzB])
    for side, S, n, lo, hi in ((a, st.SA, st.nA, st.loA, st.hiA),
                               (b, st.SB, st.nB, st.loB, st.hiB)):
        np.testing.assert_array_equal(side.SA.get(), S)
        np.testing.assert_array_equal(side.n.get(), n)
        nz = n > 0
        np.testing.assert_array_equal(side.lo.get()[nz], lo[nz])
        np.testing.assert_array_equal(side.hi.get()[nz], hi[nz])
    assert_same_bits(d.P.get(), st.P)
    window = prep.window[2] if prep.window else range(len(COMPLEX_TABLE.counts))
    for full in (False, True):      # the window's counts (accurate mode), then all
        if full:
            prep.widen()
        for N in range(MIN_MODULI, MAX_COMPLEX_MODULI + 1):
            if not full and N - MIN_MODULI not in window:
                continue
            s_ref, t_ref = rcx.shifts(st, N, mode)
            s, t = prep.shifts(N)
            np.testing.assert_array_equal(s.get(), s_ref)
            np.testing.assert_array_equal(t.get(), t_ref)
    ch = rcx.choose_count(st, mode)
    host = prep.status(True).get()
    assert host[0] <= 1024
    dec = prep.count(host)
    assert (dec.n_moduli, dec.failing) == (ch.n_moduli, ch.failing)


@gpu
@pytest.mark.parametrize("k", [69000, 140000])
def test_wide_bound_gemm_bitwise(cupy, k):
    """2k beyond the int32 bound GEMM (int64 P through int32 chunks: one chunk of k at
    69000, two at 140000): the embedding's P and the product are the reference's."""
    from ozaki_backend.cuda import complex as ccx
    from ozaki_backend.reference import scaling as rsc
    rng = np.random.default_rng(k)
    A, B = cmat((5, k), 0.5, rng), cmat((k, 3), 0.5, rng)
    parts = rcx.equilibrate_parts(A.real.copy(), A.imag.copy(), B.real.copy(),
                                  B.imag.copy())
    st = rsc.statistics(*rcx.embed(*parts), "accurate")
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    _, prep = ccx.prepare(dA.real, dA.imag, dB.real, dB.imag, "accurate")
    assert prep.bm.P.dtype == np.int64
    assert_same_bits(prep.data().P.get(), st.P)
    assert_same_bits(ob.matmul(A, B, engine="cuda"), ob.matmul(A, B, engine="cpu"))


@gpu
@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_families_bitwise_equal_to_cpu(cupy, mode):
    """Every accuracy family (shared structure, and parts drawn independently), with
    bounds: the same outcome as the CPU engine and its bits, except that a native
    fallback is the native product of each engine (ZGEMM vs NumPy): there the bound is
    the same and both results lie within it."""
    import warnings
    from ozaki_backend.testing import FAMILIES, exact_complex_matmul
    for i, name in enumerate(FAMILIES):
        for shared in (True, False):
            A, B = _complex_family(name, 33, 150, 29, 100 + i, shared)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ob.NativeFallbackWarning)
                ob.reset_stats()
                ref, rb = ob.matmul(A, B, engine="cpu", return_bound=True, mode=mode)
                st_ref = ob.stats()["certificate"]
                ob.reset_stats()
                got, gb = ob.matmul(A, B, engine="cuda", return_bound=True, mode=mode)
                st = ob.stats()["certificate"]
            what = f"{name} shared={shared}"
            assert st == st_ref, what
            assert_same_bits(gb, rb, what)
            if "native fallback" in st:
                E = exact_complex_matmul(A, B)
                fin = np.isfinite(E)        # an overflowing exact product: no bound
                assert (np.abs(got - E) <= gb)[fin].all(), what
            else:
                assert_same_bits(got, ref, what)


@gpu
def test_interleaved_views_and_transposes(cupy):
    """Complex operands as transposed / non-contiguous device views: the parts are read
    in place with their strides, same bits."""
    rng = np.random.default_rng(8)
    A, B = cmat((40, 70), 1.0, rng), cmat((70, 30), 1.0, rng)
    ref = ob.matmul(A, B, engine="cpu")
    dA = cupy.asfortranarray(cupy.asarray(A))
    dB = cupy.asarray(np.ascontiguousarray(B.T)).T
    assert_same_bits(ob.matmul(dA, dB, engine="cuda").get(), ref)
    big = cupy.asarray(cmat((80, 140), 1.0, rng))
    view = big[::2, ::2]
    assert_same_bits(ob.matmul(view, dB, engine="cuda").get(),
                     ob.matmul(view.get(), B, engine="cpu"))


# --------------------------------------------------------------------------- memory

@gpu
@pytest.mark.parametrize("tile", [(16, 8), (40, 64)])
@pytest.mark.parametrize("kw", [{}, {"mode": "fast"}])
def test_tiled_integer_product_bitwise(cupy, tile, kw):
    """Output tiles (forced small) give the same bits and bounds: every element is
    computed alone."""
    from ozaki_backend.cuda import workspace
    rng = np.random.default_rng(21)
    A, B = cmat((70, 90), 2.0, rng), cmat((90, 50), 2.0, rng)
    ref, rb = ob.matmul(A, B, engine="cpu", return_bound=True, **kw)
    workspace.TILE_OVERRIDE = tile
    try:
        got, gb = ob.matmul(A, B, engine="cuda", return_bound=True, **kw)
        dev = ob.matmul(cupy.asarray(A), cupy.asarray(B), engine="cuda", **kw)
    finally:
        workspace.TILE_OVERRIDE = None
    assert_same_bits(got, ref)
    assert_same_bits(gb, rb)
    assert_same_bits(dev.get(), ref)


@gpu
def test_a_budget_below_the_smallest_tile_falls_back_natively(cupy):
    """The integer product within a budget: a small one tiles it (same bits), one below
    the smallest tile computes ZGEMM, counted and warned."""
    import warnings
    rng = np.random.default_rng(22)
    A, B = cmat((600, 200), 1.0, rng), cmat((200, 520), 1.0, rng)
    ref = ob.matmul(A, B, engine="cpu")
    dA, dB = cupy.asarray(A), cupy.asarray(B)
    # 16 MiB: the whole integer product needs about 51 MB, tiles of 256 x 320 fit
    with warnings.catch_warnings():
        warnings.simplefilter("error", ob.NativeFallbackWarning)
        assert_same_bits(ob.matmul(dA, dB, engine="cuda", workspace=16 << 20).get(), ref)
    ob.reset_stats()
    with pytest.warns(ob.NativeFallbackWarning, match="out of memory"):
        got = ob.matmul(dA, dB, engine="cuda", workspace=1 << 10)
    assert ob.stats()["certificate"] == {"native fallback": 1}
    assert_same_bits(got.get(), cupy.matmul(dA, dB).get())


@gpu
def test_out_of_memory_retries_then_falls_back(cupy, monkeypatch):
    """An out-of-memory error retries with half the budget (same bits); repeated ones end
    in ZGEMM with a warning."""
    from ozaki_backend.cuda import complex as ccx
    from ozaki_backend.cuda import workspace
    rng = np.random.default_rng(23)
    A, B = cmat((40, 60), 1.0, rng), cmat((60, 30), 1.0, rng)
    ref = ob.matmul(A, B, engine="cpu")
    real = ccx._complex_once
    budgets = []

    def flaky(*args, **kw):
        budgets.append(workspace.workspace_budget())
        if len(budgets) == 1:
            raise cupy.cuda.memory.OutOfMemoryError(1 << 40, 0)
        return real(*args, **kw)

    monkeypatch.setattr(ccx, "_complex_once", flaky)
    assert_same_bits(ob.matmul(A, B, engine="cuda"), ref)
    assert len(budgets) == 2 and budgets[1] <= budgets[0] // 2 + 1

    def always(*args, **kw):
        raise cupy.cuda.memory.OutOfMemoryError(1 << 40, 0)

    monkeypatch.setattr(ccx, "_complex_once", always)
    with pytest.warns(ob.NativeFallbackWarning, match="out of memory"):
        got = ob.matmul(A, B, engine="cuda")
    np.testing.assert_array_equal(got, cupy.matmul(cupy.asarray(A), cupy.asarray(B)).get())


@gpu
@pytest.mark.parametrize("name", DIRECT_CASES)
def test_direct_elements_bitwise_equal_to_cpu(cupy, name):
    """The embedding's elements of one or two terms (``oz_cx_direct``, from the parts in
    place): the CPU engine's bits and bound, its outcome and counts — host and device
    operands, a strided ``out``."""
    A, B = direct_cases(np.random.default_rng(3))[name]
    ob.reset_stats()
    ref, rb = ob.matmul(A, B, engine="cpu", return_bound=True)
    st_ref = ob.stats()
    ob.reset_stats()
    got, gb = ob.matmul(A, B, engine="cuda", return_bound=True)
    st = ob.stats()
    assert st["certificate"] == st_ref["certificate"] == {"certified": 1}
    # the CPU engine records the count it ends with, the GPU every count it computes
    # (mixed: 16, then all_pass = 17 after the a-posteriori test)
    assert max(st["moduli"], default=0) == max(st_ref["moduli"], default=0)
    assert_same_bits(got, ref)
    assert_same_bits(gb, rb)
    out = cupy.zeros((A.shape[0], 2 * B.shape[1]), dtype=np.complex128)[:, ::2]
    dev = ob.matmul(cupy.asarray(A), cupy.asarray(B), engine="cuda", out=out)
    assert dev is out
    assert_same_bits(out.get(), ref)
    P = ob.plan(A.shape[0], B.shape[1], A.shape[1], engine="cuda")
    assert P.moduli_for(cupy.asarray(A), cupy.asarray(B)) == \
        ob.plan(A.shape[0], B.shape[1], A.shape[1], engine="cpu").moduli_for(A, B)
