"""Module-level wrappers (np.dot, inner, tensordot, einsum, linalg.multi_dot, SciPy dgemm
and get_blas_funcs) and what is deliberately *not* intercepted."""

import inspect

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.blas as blas

import ozaki_backend as ob
from ozaki_backend.dispatch import blashook, patches

CPU = dict(engine="cpu", min_size=0)
rng = np.random.default_rng(5)
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")


@pytest.fixture(autouse=True)
def clean_state(clean_dispatch):
    # clean_dispatch has run ob.disable() and ob.reset_stats(); install() counts nothing.
    ob.dispatch.install()


def M(*shape):
    return rng.standard_normal(shape)


def emu(a, b, **kw):
    return ob.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                     engine="cpu", **kw)


def same(x, y):
    return (type(x) is type(y) and x.shape == y.shape and x.dtype == y.dtype
            and np.array_equal(x, y))


def both(f, *args, **kwargs):
    """``f`` outside and inside a CPU scope: (native result, scoped result)."""
    nat = f(*args, **kwargs)
    with ob.enabled(**CPU):
        got = f(*args, **kwargs)
    return nat, got


def error_of(f, *args, **kwargs):
    with pytest.raises(Exception) as info:
        f(*args, **kwargs)
    return type(info.value), str(info.value)


def same_error(f, *args, **kwargs):
    expected = error_of(f, *args, **kwargs)
    with ob.enabled(**CPU):
        assert error_of(f, *args, **kwargs) == expected


# ----------------------------------------------------------------------- np.dot
@pytest.mark.parametrize("a, b", [
    (M(10, 14), M(14, 9)),
    (np.asfortranarray(M(10, 14)), M(9, 14).T),
    (M(20, 28)[::2, ::2], M(14, 9)[::-1]),
    (M(3, 4, 14), M(14, 9)),
], ids=["c", "fortran-transposed", "strided-negative", "3d-by-2d"])
def test_dot_routes(a, b):
    ref = emu(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + (b.shape[1],))
    nat, got = both(np.dot, a, b)
    assert not np.array_equal(nat, ref)
    assert same(got, ref) and got.flags.c_contiguous
    assert ob.stats()["routed_by_entry"] == {"np.dot": 1}


def test_dot_gram_matrix_and_out_and_alias():
    a = M(12, 12)
    ref_gram = emu(a, a.T)
    b = M(12, 12)
    ref = emu(a, b)
    with ob.enabled(**CPU):
        assert same(np.dot(a, a.T), ref_gram)          # dsyrk natively
        out = np.empty((12, 12))
        assert np.dot(a, b, out) is out and same(out, ref)
        np.dot(a, b, out=a)                            # out aliases an input
    assert same(a, ref)


def test_dot_mixed_and_other_dtypes():
    a_int = rng.integers(-5, 5, (10, 14))
    b = M(14, 9)
    nat, got = both(np.dot, a_int, b)
    assert same(got, emu(a_int.astype(np.float64), b))
    for dt in (np.float32, np.complex64, np.int64, object):
        x, y = (M(10, 14) * 3).astype(dt), (M(14, 9) * 3).astype(dt)
        nat, got = both(np.dot, x, y)
        assert got.dtype == nat.dtype and np.array_equal(got, nat)


def test_dot_passes_subclasses_and_foreign_arrays_through():
    a, b = np.asmatrix(M(10, 14)), np.asmatrix(M(14, 9))
    nat, got = both(np.dot, a, b)
    assert same(got, nat)

    class Foreign:  # stands in for CuPy: must reach its own implementation, uncopied
        def __array_function__(self, func, types, args, kwargs):
            return ("handled by", func.__name__)

    with ob.enabled(**CPU):
        assert np.dot(Foreign(), Foreign()) == ("handled by", "dot")
        assert np.einsum("ij,jk->ik", Foreign(), Foreign()) == ("handled by", "einsum")
    assert ob.stats()["routed"] == 0


def test_dot_shapes_not_routed():
    for a, b in [(M(10, 14), M(14)), (M(14), M(14)), (M(10, 14), M(2, 14, 9)), (3.0, M(4, 4))]:
        nat, got = both(np.dot, a, b)
        assert np.array_equal(got, nat)
    assert ob.stats()["routed"] == 0


def test_dot_bad_input_raises_numpys_error():
    same_error(np.dot, M(3, 4), M(5, 6))
    same_error(np.dot, M(3, 4), M(4, 5), out=np.empty((3, 5), order="F"))
    same_error(np.dot, M(3, 4), M(4, 5), out=np.empty((3, 5), dtype=np.float32))
    same_error(np.dot, M(3, 4), M(4, 5), np.empty((3, 5)), 1)
    same_error(np.dot, M(3, 4))


# ----------------------------------------------------------------------- inner, tensordot
def test_inner_routes_and_errors():
    a, b = M(10, 14), M(9, 14)
    nat, got = both(np.inner, a, b)
    assert same(got, emu(a, b.T)) and not np.array_equal(nat, got)
    a3 = M(2, 5, 14)
    nat, got = both(np.inner, a3, b)
    assert same(got, emu(a3.reshape(10, 14), b.T).reshape(2, 5, 9))
    same_error(np.inner, M(3, 4), M(3, 5))
    nat, got = both(np.inner, M(14), M(14))
    assert got == nat


@pytest.mark.parametrize("shapes, axes, core", [
    (((4, 3, 8), (3, 8, 9)), 2, ((4, 24), (24, 9))),
    (((10, 14), (14, 9)), 1, ((10, 14), (14, 9))),
    (((3, 4, 5), (4, 3, 6)), ([1, 0], [0, 1]), None),
    (((3, 4, 5), (5, 4, 6)), ([-1, -2], [0, 1]), None),
])
def test_tensordot_routes(shapes, axes, core):
    a, b = M(*shapes[0]), M(*shapes[1])
    nat, got = both(np.tensordot, a, b, axes)
    assert got.shape == nat.shape and got.flags.c_contiguous
    assert not np.array_equal(got, nat)
    if core is not None:
        ref = emu(a.reshape(core[0]), b.reshape(core[1])).reshape(nat.shape)
        assert same(got, ref)
    # Counted once, by the wrapper that decided it (the BLAS hook lets that GEMM through).
    assert ob.stats()["routed_by_entry"] == {"np.tensordot": 1}


def test_tensordot_default_axes_and_errors():
    a, b = M(4, 3, 8), M(3, 8, 9)
    with ob.enabled(**CPU):
        got = np.tensordot(a, b)
    assert same(got, emu(a.reshape(4, 24), b.reshape(24, 9)))
    same_error(np.tensordot, M(3, 4), M(5, 6), 1)
    same_error(np.tensordot, M(3, 4), M(4, 6), ([1, 1], [0, 0]))
    same_error(np.tensordot, M(3, 4), M(4, 6), ([1], [0, 1]))


# ----------------------------------------------------------------------- einsum
@pytest.mark.parametrize("subs, sa, sb, core", [
    ("ij,jk->ik", (10, 14), (14, 9), lambda a, b: emu(a, b)),
    ("ij,kj->ik", (10, 14), (9, 14), lambda a, b: emu(a, b.T)),
    ("ji,jk->ik", (14, 10), (14, 9), lambda a, b: emu(a.T, b)),
    ("ij,jk->ki", (10, 14), (14, 9), lambda a, b: emu(a, b).T),
    ("ij,jk", (10, 14), (14, 9), lambda a, b: emu(a, b)),
    ("bij,bjk->bik", (3, 10, 14), (3, 14, 9), lambda a, b: emu(a, b)),
    ("abc,bcd->ad", (10, 2, 7), (2, 7, 9), lambda a, b: emu(a.reshape(10, 14), b.reshape(14, 9))),
    ("Bi,iA", (10, 14), (14, 9), lambda a, b: emu(a, b).T),
])
def test_einsum_routes_with_numpys_layout(subs, sa, sb, core):
    a, b = M(*sa), M(*sb)
    for x, y in ((a, b), (np.asfortranarray(a), np.asfortranarray(b))):
        nat, got = both(np.einsum, subs, x, y)
        assert same(got, core(x, y))
        assert got.strides == nat.strides
    assert ob.stats()["routed_by_entry"] == {"np.einsum": 2}


def test_einsum_out_and_options():
    a, b = M(10, 14), M(14, 9)
    ref = emu(a, b)
    with ob.enabled(**CPU):
        out = np.empty((10, 9))
        assert np.einsum("ij,jk->ik", a, b, out=out) is out and same(out, ref)
        assert same(np.einsum("ij,jk->ik", a, b, optimize=False, order="K"), ref)
    # dtype= / a third operand / ellipsis / a single-operand sum: NumPy's own einsum
    for args, kw in [(("ij,jk->ik", a, b), {"dtype": np.float64}),
                     (("ij,jk,kl->il", a, b, M(9, 5)), {}),
                     (("...ij,...jk->...ik", a, b), {}),
                     (("ij,jk->i", a, b), {})]:
        nat, got = both(np.einsum, *args, **kw)
        assert same(got, nat)


def test_einsum_optimize_goes_through_the_loop_hook():
    a, b = M(10, 14), M(14, 9)
    nat, got = both(np.einsum, "ij,jk->ik", a, b, optimize=True)
    # NumPy's optimized path may compute the transposed product (B.T @ A.T).T; in
    # "accurate" mode the scaling is not symmetric, so either can be the emulated bits.
    assert same(got, emu(a, b)) or same(got, np.ascontiguousarray(emu(b.T, a.T).T))
    assert not np.array_equal(got, nat)
    assert ob.stats()["routed_by_entry"] == {"@/np.matmul": 1}


def test_einsum_errors():
    same_error(np.einsum, "ij,jk->ik", M(3, 4), M(5, 6))
    same_error(np.einsum, "ij,jk->iz", M(3, 4), M(4, 6))
    same_error(np.einsum, "ij,jk->ii", M(3, 4), M(4, 6))
    same_error(np.einsum, "ijk,jk->ik", M(3, 4), M(4, 6))


# ----------------------------------------------------------------------- multi_dot
def _chain_reference(arrays):
    from numpy.linalg._linalg import _multi_dot_matrix_chain_order

    order = _multi_dot_matrix_chain_order(arrays)

    def rec(i, j):
        return arrays[i] if i == j else emu(rec(i, order[i, j]), rec(order[i, j] + 1, j))

    return rec(0, len(arrays) - 1)


def test_multi_dot_three_and_four():
    A, B, C = M(20, 5), M(5, 30), M(30, 4)        # NumPy picks A @ (B @ C)
    nat, got = both(np.linalg.multi_dot, [A, B, C])
    assert same(got, emu(A, emu(B, C))) and not np.array_equal(nat, got)
    arrays = [M(8, 30), M(30, 5), M(5, 12), M(12, 9)]
    nat, got = both(np.linalg.multi_dot, arrays)
    assert same(got, _chain_reference(arrays))
    out = np.empty((8, 9))
    with ob.enabled(**CPU):
        assert np.linalg.multi_dot(arrays, out=out) is out
    assert same(out, got)


def test_multi_dot_vector_ends_and_errors():
    v, A, B, w = M(20), M(20, 6), M(6, 7), M(7)
    nat, got = both(np.linalg.multi_dot, [v, A, B])
    assert got.shape == nat.shape == (7,)
    nat, got = both(np.linalg.multi_dot, [v, A, B, w])
    assert np.ndim(got) == 0
    same_error(np.linalg.multi_dot, [A])
    same_error(np.linalg.multi_dot, [A, M(5, 5), B])
    same_error(np.linalg.multi_dot, [A, M(6, 2, 2), B])


# ----------------------------------------------------------------------- SciPy
def test_dgemm_full_blas_semantics():
    a, b, c = M(10, 14), M(14, 9), M(10, 9)
    p = ob.plan(10, 9, 14, engine="cpu")
    ref = p.matmul(a, b, alpha=1.5, beta=-0.5, c=c)
    nat, got = both(blas.dgemm, 1.5, a, b, -0.5, c)
    assert same(got, ref) and got.flags.f_contiguous and not np.array_equal(nat, got)
    with ob.enabled(**CPU):
        assert same(blas.dgemm(1.0, a.T.copy(), b, trans_a=1), emu(a, b))
        assert same(blas.dgemm(1.0, a, b.T.copy(), trans_b=2), emu(a, b))
        assert same(blas.dgemm(2.0, a, b), ob.plan(10, 9, 14, engine="cpu").matmul(
            a, b, alpha=2.0))
        cf = np.asfortranarray(c)
        r = blas.dgemm(1.5, a, b, beta=-0.5, c=cf, overwrite_c=1)
        assert r is cf and same(np.asarray(r), ref)
        cc = c.copy()
        r = blas.dgemm(1.5, a, b, beta=-0.5, c=cc, overwrite_c=1)
        assert r is not cc and np.array_equal(cc, c) and same(r, ref)
        cn = np.full((10, 9), np.nan)
        assert same(blas.dgemm(1.0, a, b, beta=0.0, c=cn), emu(a, b))  # beta=0 ignores c
    assert ob.stats()["routed_by_entry"]["scipy dgemm"] == 7


def test_dgemm_cases_left_to_scipy():
    a, b = M(10, 14), M(14, 9)
    a_nan = a.copy()
    a_nan[0, 0] = np.nan
    for args, kw in [((0.0, a_nan, b), dict(beta=1.0, c=M(10, 9))),      # alpha = 0
                     ((1.0, a.astype(np.float32), b), {}),                # cast by SciPy
                     ((1.0, a_nan, b), {}),                               # non-finite
                     ((1.0, a.tolist(), b), {})]:                         # not an ndarray
        nat, got = both(blas.dgemm, *args, **kw)
        assert np.array_equal(got, nat, equal_nan=True) and got.flags.f_contiguous
    assert ob.stats()["routed"] == 0
    same_error(blas.dgemm, 1.0, a, a)
    same_error(blas.dgemm, 1.0, a, b, c=np.zeros((2, 2)), beta=1.0)
    same_error(blas.dgemm, 1.0, a, b, trans_a=5)
    same_error(blas.dgemm, "x", a, b)
    same_error(blas.dgemm, 1.0, a, b, foo=1)
    same_error(blas.dgemm, 1.0)


def test_get_blas_funcs_gemm():
    a, b = M(10, 14), M(14, 9)
    gemm = scipy.linalg.get_blas_funcs("gemm", (a, b))
    assert gemm is blas.dgemm is scipy.linalg._fblas.dgemm
    assert getattr(gemm, "_ozaki_backend_entry", None) == "scipy dgemm"
    assert gemm.typecode == "d" and gemm.module_name and gemm.dtype == np.float64
    with ob.enabled(**CPU):
        g2 = scipy.linalg.get_blas_funcs(("gemm",), (a, b))[0]
        assert same(g2(1.0, a, b), emu(a, b))
        s = scipy.linalg.get_blas_funcs("gemm", (a.astype(np.float32),))
        z = scipy.linalg.get_blas_funcs("gemm", (a + 0j,))
    assert s.typecode == "s" and z.typecode == "z"
    assert not hasattr(s, "_ozaki_backend_entry")
    # zgemm is routed too (complex128 products, docs/spec.md §11)
    assert getattr(z, "_ozaki_backend_entry", None) == "scipy zgemm" and z.dtype == np.complex128


# ----------------------------------------------------------------------- wrappers as objects
def test_wrappers_look_like_the_originals_and_are_inert_outside():
    names = ["dot", "inner", "einsum"] + ([] if blashook.installed() else ["tensordot"])
    for name in names:
        w, orig = getattr(np, name), patches.original(f"numpy.{name}")
        assert w is not orig and w.__name__ == orig.__name__ and w.__doc__ == orig.__doc__
        assert inspect.signature(w) == inspect.signature(orig)
    a, b = M(10, 14), M(14, 9)
    assert same(np.dot(a, b), patches.original("numpy.dot")(a, b))
    assert ob.stats()["routed"] == ob.stats()["native"] == 0


def test_restore_and_reinstall():
    a, b = M(10, 14), M(14, 9)
    patches.restore()
    try:
        assert np.dot is patches.original("numpy.dot")
        assert blas.dgemm is patches.original("scipy.linalg.blas.dgemm")
        assert patches.installed_wrappers() == []
    finally:
        with ob.enabled(**CPU):                     # the next scope re-installs
            assert same(np.dot(a, b), emu(a, b))
    assert "numpy.dot" in patches.installed_wrappers()
    assert "scipy.linalg.blas.dgemm" in patches.installed_wrappers()


# ----------------------------------------------------------------------- not intercepted
def test_not_intercepted_is_pinned():
    """If one of these starts being routed, update docs/intercepted.md."""
    a, b = M(12, 12), M(12, 12)
    spd = a @ a.T + 12 * np.eye(12)
    # ndarray.dot, a `from numpy import dot` bound earlier and np.cov are routed through
    # NumPy's BLAS call site (tests/dispatch/test_blashook.py); without that hook they
    # are not intercepted.
    cases = [] if blashook.available() else [
        lambda: a.dot(b),                             # ndarray.dot: immutable type
        lambda: patches.original("numpy.dot")(a, b),  # `from numpy import dot` earlier
        lambda: np.cov(a, b),                         # NumPy internal holds its own dot
    ]
    cases += [
        lambda: np.linalg.solve(spd, b),              # LAPACK
        lambda: scipy.linalg.solve(spd, b),
        lambda: scipy.linalg.qr(a)[1],
        lambda: scipy.linalg.expm(a / 10),           # SciPy internals, compiled code
    ]
    native = [f() for f in cases]
    with ob.enabled(**CPU):
        ob.reset_stats()
        scoped = [f() for f in cases]
        s = ob.stats()
    for n, g in zip(native, scoped):
        assert np.array_equal(n, g)
    assert s["routed"] == 0
