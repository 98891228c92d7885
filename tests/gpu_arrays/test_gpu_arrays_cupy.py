"""CuPy code inside ``enabled()`` on the GPU: every entry point that reaches cuBLAS's
float64/complex128 GEMM is routed, with the bits of ``ozaki_backend.matmul`` on the same
operands; declined products, other dtypes and code outside scopes are CuPy's own; and
unmodified code (a block conjugate-gradient loop, ``cupyx.scipy.linalg.expm``, a script
under ``OZAKI_BACKEND=1``) is switched over with its products counted."""

import operator
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import cupy_hook, device_routing

pytestmark = pytest.mark.gpu

ROUTE_ALL = {"min_size": 0}


def same_bits(got, want):
    import cupy

    g, w = cupy.asnumpy(got), cupy.asnumpy(want)
    assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
    np.testing.assert_array_equal(np.ascontiguousarray(g).view(np.uint8),
                                  np.ascontiguousarray(w).view(np.uint8))


def _operands(cupy, dtype, *shapes, seed=0):
    rng = cupy.random.default_rng(seed)
    out = []
    for s in shapes:
        x = rng.standard_normal(s)
        if dtype == "complex128":
            x = x + 1j * rng.standard_normal(s)
        out.append(x)
    return out


def _bits_equal(got, want) -> bool:
    import cupy

    g, w = cupy.asnumpy(got), cupy.asnumpy(want)
    return (g.dtype == w.dtype and g.shape == w.shape
            and np.array_equal(np.ascontiguousarray(g).view(np.uint8),
                               np.ascontiguousarray(w).view(np.uint8)))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_every_entry_point_is_routed_with_the_explicit_calls_bits(cupy, gpu_dispatch,
                                                                   dtype):
    """Each routed cuBLAS call has the bits of ``ozaki_backend.matmul`` on the operands
    CuPy handed cuBLAS. A CuPy routine may hand it ``C^T = B^T A^T`` instead of ``A B``
    (its result is then a transposed view), and the accurate scaling splits the bits
    of each product rows first (``sigma`` before ``tau``, spec §2, accurate mode), so the two
    orientations can differ in the last bit: each entry point's result has the bits of
    one of them."""
    a, b, sa, sb = _operands(cupy, dtype, (300, 200), (200, 120), (3, 64, 48), (3, 48, 40))
    with device_routing.recording() as calls, ob.enabled(**ROUTE_ALL):
        got = {"@": a @ b, "matmul": cupy.matmul(a, b), "dot": cupy.dot(a, b),
               "ndarray.dot": a.dot(b), "tensordot": cupy.tensordot(a, b, axes=1),
               "inner": cupy.inner(a, cupy.ascontiguousarray(b.T)),
               "einsum": cupy.einsum("ik,kj->ij", a, b),
               "transposed": cupy.asfortranarray(a) @ b.T.copy().T}
        stacked = sa @ sb
    assert cupy_hook.installed()
    by_entry = ob.stats()["routed_by_entry"]
    # einsum may issue its product as a stack of one: either function
    assert sum(by_entry.values()) == len(got) + 1, by_entry
    assert by_entry.get("CuPy gemmEx", 0) >= len(got) - 1, by_entry
    assert by_entry.get("CuPy gemmStridedBatchedEx", 0) >= 1, by_entry
    assert len(calls) == len(got) + 1
    for c in calls:
        same_bits(c.result, ob.matmul(c.x, c.y))
    want, want_t = ob.matmul(a, b), ob.matmul(b.T, a.T).T
    for name, r in got.items():
        assert _bits_equal(r, want) or _bits_equal(r, want_t), name
    assert (_bits_equal(stacked, ob.matmul(sa, sb))
            or _bits_equal(stacked, ob.matmul(sb.transpose(0, 2, 1),
                                              sa.transpose(0, 2, 1)).transpose(0, 2, 1)))


def test_cupy_cublas_gemm_with_alpha_beta_and_transposes(cupy, gpu_dispatch):
    a, b, c = _operands(cupy, "float64", (200, 150), (90, 200), (150, 90))
    c0 = cupy.asfortranarray(c)
    out = c0.copy(order="F")
    import cupy.cublas     # a submodule `import cupy` does not load

    with ob.enabled(**ROUTE_ALL):
        cupy.cublas.gemm("T", "T", a, b, out=out, alpha=2.0, beta=0.5)
    by_entry = ob.stats()["routed_by_entry"]
    assert sum(by_entry.values()) == 1, by_entry       # dgemm, or gemmEx
    # C = 2 a^T b^T + C0 / 2 as asked, or its transpose computed as 2 b a + C0^T / 2
    # (the hook computes cuBLAS's C^T; test_every_entry_point says why the bits of the
    # two orientations may differ)
    assert (_bits_equal(out, 2.0 * ob.matmul(a.T, b.T) + 0.5 * c0)
            or _bits_equal(out, (2.0 * ob.matmul(b, a) + 0.5 * c0.T).T))


def test_declined_products_are_cupys_own(cupy, gpu_dispatch):
    a, b = _operands(cupy, "float64", (256, 256), (256, 256))
    a32, b32 = a.astype(cupy.float32), b.astype(cupy.float32)
    v = b[:, 0].copy()
    sa = cupy.stack([a, a])
    native = {"f32": a32 @ b32, "mv": a @ v, "bcast": sa @ b, "plain": a @ b}
    with ob.enabled(**ROUTE_ALL):
        got = {"f32": a32 @ b32, "mv": a @ v, "bcast": sa @ b}   # broadcast: pointer arrays
        with ob.disabled():
            got["plain"] = a @ b
    for k, r in got.items():
        same_bits(r, native[k])
    s = ob.stats()
    assert s["routed"] == 0 and s["fallback"] == 0
    assert "CuPy: matrix-vector shaped" in s["reasons"]["native"], s


def test_non_finite_operands_give_cupys_own_answer(cupy, gpu_dispatch):
    a, b = _operands(cupy, "float64", (128, 96), (96, 64))
    a[3, 5] = cupy.nan
    b[7, 2] = cupy.inf
    native = a @ b
    with ob.enabled(**ROUTE_ALL):
        got = a @ b
    same_bits(got, native)
    assert ob.stats()["routed"] == 0


def test_the_default_cost_model_decides_per_shape(cupy, gpu_dispatch):
    def shaped(m, k):   # operands of a shape without memory: explain() reads no data
        return cupy.broadcast_to(cupy.zeros((1, 1)), (m, k))

    assert cupy_hook.state() in ("installed", "waiting for its import")

    with ob.enabled():
        long_k = ob.explain(shaped(16384, 16384), shaped(16384, 16384))
        short_k = ob.explain(shaped(16384, 1024), shaped(1024, 16384))
        small = ob.explain(shaped(512, 512), shaped(512, 512))
    for d in (long_k, short_k, small):
        assert d.reason.startswith("CuPy: device cost model: "), d
    assert not short_k and not small
    model = device_routing.device_cost_model()
    print(model, long_k, short_k, sep="\n")
    if model.rates.name == "NVIDIA H200":
        assert long_k


def block_cg(A, B, iters, mm=operator.matmul):
    """Block conjugate gradients for A X = B (A symmetric positive definite), as a
    user writes it: every product through ``mm`` (``@`` in user code)."""
    import cupy

    X = cupy.zeros_like(B)
    R = B - mm(A, X)
    P = R
    for _ in range(iters):
        AP = mm(A, P)
        alpha = cupy.linalg.solve(mm(P.T, AP), mm(P.T, R))
        X = X + mm(P, alpha)
        R_new = R - mm(AP, alpha)
        beta = cupy.linalg.solve(mm(R.T, R), mm(R_new.T, R_new))
        P = R_new + mm(P, beta)
        R = R_new
    return X


def test_a_block_conjugate_gradient_loop_is_switched_over(cupy, gpu_dispatch):
    n, s, iters = 1024, 16, 6
    M, B = _operands(cupy, "float64", (n, n), (n, s), seed=3)
    A = M @ M.T / n + cupy.eye(n)
    with ob.enabled(**ROUTE_ALL):
        X = block_cg(A, B, iters)
    routed = ob.stats()["routed"]
    assert routed == 1 + 8 * iters                   # every product of the loop
    same_bits(X, block_cg(A, B, iters, mm=ob.matmul))
    with ob.disabled():
        native = block_cg(A, B, iters)

        def residual(Y):
            return float(cupy.linalg.norm(A @ Y - B) / cupy.linalg.norm(B))

        got, ref = residual(X), residual(native)
    # Six iterations do not converge (A's spectrum lies in [1, 5]: CG's error shrinks by
    # at most (sqrt(5) - 1) / (sqrt(5) + 1) ~ 0.38 per step, ~3e-3 after six), so the
    # test is that the routed loop follows CuPy's own: the two differ by rounding in
    # each product (a few u relative), amplified at most by the condition number 5 per
    # iteration.
    eps = float(np.finfo(np.float64).eps)
    assert abs(got - ref) <= 8 * eps * np.sqrt(n) * 5.0 ** iters, (got, ref)


def test_cupyx_scipy_expm_is_switched_over(cupy, gpu_dispatch):
    import cupyx.scipy.linalg

    (a,) = _operands(cupy, "float64", (512, 512), seed=5)
    a /= 40.0
    with device_routing.recording() as calls, ob.enabled(**ROUTE_ALL):
        e = cupyx.scipy.linalg.expm(a)
    assert len(calls) >= 5 and ob.stats()["routed"] == len(calls)
    for c in calls:
        assert c.alpha == 1.0 and c.beta == 0.0
        same_bits(c.result, ob.matmul(c.x, c.y))
    with ob.disabled():
        ref = cupyx.scipy.linalg.expm(a)
    assert float(cupy.abs(e - ref).max()) < 1e-12 * float(cupy.abs(ref).max())


def test_products_on_a_stream_of_the_users_stay_on_it(cupy, gpu_dispatch):
    a, b = _operands(cupy, "float64", (512, 384), (384, 256))
    want = ob.matmul(a, b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        with ob.enabled(**ROUTE_ALL):
            got = a @ b
        s.synchronize()
    same_bits(got, want)
    assert sum(ob.stats()["routed_by_entry"].values()) == 1   # (the explicit call too
    # is a routed product, with no entry point)


def test_threads_have_their_own_scopes(cupy, gpu_dispatch):
    a, b = _operands(cupy, "float64", (256, 256), (256, 256))
    native = a @ b
    out = {}

    def worker(name, enabled):
        if enabled:
            with ob.enabled(**ROUTE_ALL):
                out[name] = a @ b
        else:
            out[name] = a @ b
        cupy.cuda.Device().synchronize()

    ts = [threading.Thread(target=worker, args=(n, e)) for n, e in (("on", 1), ("off", 0))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    routed_by_entry = sum(ob.stats()["routed_by_entry"].values())
    same_bits(out["on"], ob.matmul(a, b))
    same_bits(out["off"], native)
    assert routed_by_entry == 1


SCRIPT = """
import cupy
a = cupy.random.default_rng(0).standard_normal((512, 512))
b = a @ a
c = cupy.dot(b, a)
cupy.cuda.Device().synchronize()
"""


def test_an_unmodified_cupy_script_reports_routed_products_at_exit(cupy, tmp_path):
    import importlib.util

    (tmp_path / "script.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "OZAKI_BACKEND_CUPY"}
    env.update(OZAKI_BACKEND_MIN_SIZE="0", OZAKI_BACKEND_STATS="1")   # CuPy: on by default
    cmds = [[sys.executable, "-m", "ozaki_backend", "run", "script.py"]]
    if importlib.util.find_spec("_ozaki_backend_start") is not None:
        cmds.append([sys.executable, "script.py"])    # OZAKI_BACKEND=1 (the .pth hook)
    for cmd in cmds:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                             cwd=tmp_path, env=dict(env, OZAKI_BACKEND="1"))
        assert res.returncode == 0, res.stderr
        assert "routed by entry point: CuPy gemmEx 2" in res.stderr, res.stderr
