"""PyTorch code inside ``enabled()`` on the GPU: float64/complex128 products of CUDA
tensors (operators, ``nn.Linear``, autograd's backward pass in PyTorch's device thread,
scikit-learn's array-API mode) are routed with the bits of ``ozaki_backend.matmul`` on
the same operands; other dtypes are PyTorch's own; an unmodified script under
``OZAKI_BACKEND=1`` reports its routed products."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import device_routing, torch_hook

pytestmark = pytest.mark.gpu

ROUTE_ALL = {"min_size": 0}


@pytest.fixture
def cuda_torch(torch, cupy):
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device here")
    return torch


def same_bits(got, want):
    """Two CUDA tensors (or CuPy arrays) hold the same bits."""
    g, w = (np.asarray(x.detach().cpu()) if hasattr(x, "detach") else x.get()
            for x in (got, want))
    assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
    np.testing.assert_array_equal(np.ascontiguousarray(g).view(np.uint8),
                                  np.ascontiguousarray(w).view(np.uint8))


def check_recorded(calls):
    """Every recorded routed product equals the explicit call on its own operands
    (``alpha * x @ y + beta * c`` with one rounding per operation)."""
    assert calls
    for c in calls:
        want = ob.matmul(c.x, c.y)
        if c.alpha != 1:
            want = c.alpha * want
        if c.beta != 0:
            want = want + c.beta * c.c
        same_bits(c.result, want)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_every_operator_is_routed_with_the_explicit_calls_bits(cuda_torch, gpu_dispatch,
                                                                dtype):
    torch = cuda_torch
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(1)

    def rand(*s):
        return torch.randn(*s, dtype=dt, device="cuda", generator=g)

    a, b, bias = rand(300, 200), rand(200, 120), rand(120)
    sa, sb = rand(3, 64, 48), rand(3, 48, 40)
    with ob.enabled(**ROUTE_ALL):
        got = {"mm": torch.mm(a, b), "@": a @ b, "matmul": torch.matmul(a, b),
               "einsum": torch.einsum("ik,kj->ij", a, b),
               "tensordot": torch.tensordot(a, b, dims=1)}
        addmm = torch.addmm(bias, a, b)
        linear = torch.nn.functional.linear(a, b.T, bias)
        bmm = torch.bmm(sa, sb)
        baddbmm = torch.baddbmm(bmm, sa, sb, beta=0.5, alpha=2.0)
    want = ob.matmul(a, b)
    assert isinstance(want, torch.Tensor) and want.is_cuda
    for name, r in got.items():
        same_bits(r, want)
    same_bits(addmm, want + bias)
    same_bits(linear, want + bias)
    st = ob.matmul(sa, sb)
    same_bits(bmm, st)
    same_bits(baddbmm, 2.0 * st + 0.5 * st)
    by_entry = ob.stats()["routed_by_entry"]
    assert by_entry["torch mm"] >= 4 and by_entry["torch addmm"] == 2, by_entry
    assert by_entry["torch bmm"] >= 1 and by_entry["torch baddbmm"] == 1, by_entry


def _stashes_context(torch) -> bool:
    import inspect

    try:
        return "_stash_obj_in_tls" in inspect.getsource(
            torch.autograd.graph._engine_run_backward)
    except (AttributeError, OSError, TypeError):
        return False


def test_a_float64_model_forward_and_backward_is_routed(cuda_torch, gpu_dispatch):
    """The backward pass runs in PyTorch's CUDA device thread: its products are routed
    because the scope reaches that thread through the context PyTorch stashes."""
    torch = cuda_torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 192), torch.nn.GELU(),
                                torch.nn.Linear(192, 128), torch.nn.Tanh(),
                                torch.nn.Linear(128, 10)).double().cuda()
    x = torch.randn(512, 256, dtype=torch.float64, device="cuda")
    target = torch.randn(512, 10, dtype=torch.float64, device="cuda")
    with device_routing.recording() as calls, ob.enabled(**ROUTE_ALL):
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
    torch.cuda.synchronize()
    by_entry = ob.stats()["routed_by_entry"]
    # forward: an addmm per layer; backward: each weight's gradient and the two hidden
    # activations' (the input needs none) — where PyTorch carries the scope into its
    # device thread (it stashes the caller's context from 2.12 on)
    assert by_entry["torch addmm"] == 3, by_entry
    if _stashes_context(torch):
        assert by_entry["torch mm"] >= 5, by_entry
    else:
        assert "torch mm" not in by_entry, by_entry
    assert len(calls) == sum(by_entry.values())
    check_recorded(calls)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x), target).backward()
    for g, p in zip(grads, model.parameters()):
        assert torch.allclose(g, p.grad, rtol=1e-10, atol=1e-12)


def test_other_dtypes_and_code_outside_scopes_are_pytorchs_own(cuda_torch, gpu_dispatch):
    torch = cuda_torch
    a = torch.randn(256, 256, device="cuda")
    h = a.half()
    a64 = a.double()
    want = {"f32": a @ a, "f16": h @ h, "f64": a64 @ a64}
    with ob.enabled(**ROUTE_ALL):
        got = {"f32": a @ a, "f16": h @ h}
        with ob.disabled():
            got["f64"] = a64 @ a64
    for k in want:
        assert torch.equal(got[k], want[k]), k
    assert ob.stats()["routed"] == 0


def test_cpu_float64_tensors_take_the_host_path(cuda_torch, gpu_dispatch):
    torch = cuda_torch
    a = torch.randn(512, 384, dtype=torch.float64)
    b = torch.randn(384, 256, dtype=torch.float64)
    with ob.enabled(**ROUTE_ALL):
        got = a @ b
    assert ob.stats()["routed_by_entry"] == {"torch mm (CPU)": 1}
    same_bits(got, torch.from_numpy(ob.matmul(a.numpy(), b.numpy())))


def test_scikit_learn_array_api_mode_on_cuda_tensors(cuda_torch, gpu_dispatch):
    pytest.importorskip("array_api_compat")
    sklearn = pytest.importorskip("sklearn")
    from sklearn.decomposition import PCA

    if os.environ.get("SCIPY_ARRAY_API") != "1":
        # SciPy reads SCIPY_ARRAY_API once, at import, and scikit-learn's array-API
        # mode needs it: this test again in a process that has it.
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
             f"{__file__}::test_scikit_learn_array_api_mode_on_cuda_tensors"],
            capture_output=True, text=True, timeout=300,
            env=dict(os.environ, SCIPY_ARRAY_API="1"))
        tail = (res.stdout + res.stderr)[-3000:]
        if res.returncode == 0 and " passed" in res.stdout:
            return
        if res.returncode == 0 and " skipped" in res.stdout:
            pytest.skip(f"skipped with SCIPY_ARRAY_API=1 too: {tail}")
        pytest.fail(f"with SCIPY_ARRAY_API=1: {tail}")
    torch = cuda_torch
    g = torch.Generator(device="cuda").manual_seed(2)
    X = torch.randn(4096, 256, dtype=torch.float64, device="cuda", generator=g)
    try:
        with sklearn.config_context(array_api_dispatch=True):
            with device_routing.recording() as calls, ob.enabled(**ROUTE_ALL):
                pca = PCA(n_components=16, svd_solver="randomized", random_state=0)
                Y = pca.fit(X).transform(X)
    except Exception as exc:  # noqa: BLE001 - only a missing array-API mode skips
        text = str(exc)
        if "SCIPY_ARRAY_API" in text:
            pytest.skip(f"scikit-learn's array-API mode needs SCIPY_ARRAY_API=1: {text}")
        if "array" in text.lower() and "api" in text.lower():
            pytest.skip(f"this scikit-learn's PCA has no array-API support: {text}")
        raise
    assert isinstance(Y, torch.Tensor) and Y.is_cuda and Y.shape == (4096, 16)
    s = ob.stats()
    assert s["routed"] == len(calls) > 0, s
    check_recorded(calls)


SCRIPT = """
import torch
a = torch.randn(512, 512, dtype=torch.float64, device="cuda")
w = torch.randn(512, 512, dtype=torch.float64, device="cuda", requires_grad=True)
loss = (a @ w).tanh().sum()
loss.backward()
torch.cuda.synchronize()
"""


def test_an_unmodified_torch_script_reports_routed_products_at_exit(cuda_torch, tmp_path):
    import importlib.util

    (tmp_path / "script.py").write_text(SCRIPT)
    env = dict(os.environ, OZAKI_BACKEND="1", OZAKI_BACKEND_MIN_SIZE="0",
               OZAKI_BACKEND_STATS="1")
    cmds = [[sys.executable, "-m", "ozaki_backend", "run", "script.py"]]
    if importlib.util.find_spec("_ozaki_backend_start") is not None:
        cmds.append([sys.executable, "script.py"])    # the .pth hook: torch imports NumPy
    for cmd in cmds:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                             cwd=tmp_path, env=env)
        assert res.returncode == 0, res.stderr
        # the forward product and the weight's gradient (process default: the device
        # thread sees enable()'s default too)
        assert "routed by entry point: torch mm 2" in res.stderr, res.stderr
    assert torch_hook.OPS == ("mm", "addmm", "bmm", "baddbmm")
