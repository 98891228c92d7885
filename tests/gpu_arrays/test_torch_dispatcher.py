"""The PyTorch hook on CPU tensors (the CPU build of PyTorch is enough; skipped where
PyTorch is not installed): the dispatcher kernels route float64/complex128 products of
unmodified code (operators, nn.Linear, autograd's backward products) through the NumPy
host path's rules, with the explicit call's bits, and leave everything else to
PyTorch's own kernels, results and errors."""

import contextvars
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import torch_hook

CPU = {"engine": "cpu", "min_size": 0}


def _explicit(a, b):
    return ob.matmul(a.detach().numpy(), b.detach().numpy(), engine="cpu")


def _same_bits(t, arr):
    got = t.detach().numpy()
    assert got.dtype == arr.dtype and got.shape == arr.shape
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(arr).view(np.uint8))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_every_product_operator_is_routed_with_the_explicit_calls_bits(torch, gpu_dispatch,
                                                                        dtype):
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(1)
    a = torch.randn(40, 24, dtype=dt, generator=g)
    b = torch.randn(24, 16, dtype=dt, generator=g)
    bias = torch.randn(16, dtype=dt, generator=g)
    sa = torch.randn(3, 40, 24, dtype=dt, generator=g)
    sb = torch.randn(3, 24, 16, dtype=dt, generator=g)
    with ob.enabled(**CPU):
        results = {
            "mm": torch.mm(a, b), "@": a @ b, "matmul": torch.matmul(a, b),
            "einsum": torch.einsum("ik,kj->ij", a, b),
            "addmm": torch.addmm(bias, a, b),
            "linear": torch.nn.functional.linear(a, b.T, bias),
            "bmm": torch.bmm(sa, sb), "stacked @": sa @ sb,
            "baddbmm": torch.baddbmm(sa @ sb, sa, sb, beta=0.5, alpha=2.0),
        }
    ab = _explicit(a, b)
    for name in ("mm", "@", "matmul", "einsum"):
        _same_bits(results[name], ab)
    _same_bits(results["addmm"], ab + bias.numpy())        # alpha*AB + beta*C, one
    _same_bits(results["linear"], ab + bias.numpy())       # rounding per operation
    st = ob.matmul(sa.numpy(), sb.numpy(), engine="cpu")
    _same_bits(results["bmm"], st)
    _same_bits(results["stacked @"], st)
    _same_bits(results["baddbmm"], 2.0 * st + 0.5 * st)
    by_entry = ob.stats()["routed_by_entry"]
    assert by_entry["torch mm (CPU)"] >= 3 and by_entry["torch addmm (CPU)"] == 2
    assert by_entry["torch bmm (CPU)"] >= 3 and by_entry["torch baddbmm (CPU)"] == 1


def test_other_products_stay_pytorchs_own(torch, gpu_dispatch):
    a32 = torch.randn(32, 32)
    a = torch.randn(32, 32, dtype=torch.float64)
    with ob.enabled(**CPU):
        r32 = a32 @ a32
        rv = a @ a[0]                                   # matrix-vector: aten::mv
        with ob.disabled():
            rd = a @ a
    assert torch.equal(r32, torch.mm(a32, a32)) and torch.equal(rd, torch.mm(a, a))
    assert torch.equal(rv, torch.mv(a, a[0]))
    r = a @ a                                              # outside every scope
    assert torch.equal(r, rd)
    assert ob.stats()["routed"] == 0


def test_errors_are_pytorchs_own(torch, gpu_dispatch):
    a = torch.randn(4, 3, dtype=torch.float64)
    outside = {}
    for case, call in {"shapes": lambda: a @ a, "dtypes": lambda: torch.mm(a, a.T.float()),
                       "rank": lambda: torch.bmm(a, a.T)}.items():
        with pytest.raises(RuntimeError) as exc:
            call()
        outside[case] = str(exc.value)
    with ob.enabled(**CPU):
        for case, call in {"shapes": lambda: a @ a,
                           "dtypes": lambda: torch.mm(a, a.T.float()),
                           "rank": lambda: torch.bmm(a, a.T)}.items():
            with pytest.raises(RuntimeError) as exc:
                call()
            assert str(exc.value) == outside[case]


def test_a_float64_model_forward_and_backward_is_routed(torch, gpu_dispatch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 40), torch.nn.Tanh(),
                                torch.nn.Linear(40, 8)).double()
    x = torch.randn(64, 48, dtype=torch.float64)
    with ob.enabled(**CPU):
        out = model(x)
        out.pow(2).sum().backward()
    s = ob.stats()["routed_by_entry"]
    # forward: one addmm per layer; backward: grad of each weight and of the hidden
    # activation (the input needs none)
    assert s == {"torch addmm (CPU)": 2, "torch mm (CPU)": 3}
    l1, l2 = model[0], model[2]
    h = torch.tanh(torch.from_numpy(
        ob.matmul(x.numpy(), l1.weight.detach().numpy().T, engine="cpu")
        + l1.bias.detach().numpy())).numpy()          # PyTorch's tanh, not NumPy's
    _same_bits(out, ob.matmul(h, l2.weight.detach().numpy().T, engine="cpu")
               + l2.bias.detach().numpy())
    # the gradients are those of the routed products (the explicit call on the
    # backward's own operands)
    g_out = 2 * out.detach().numpy()
    _same_bits(l2.weight.grad, ob.matmul(g_out.T, h, engine="cpu"))


def test_cpu_tensors_follow_the_host_paths_cost_model(torch, gpu_dispatch):
    a = torch.randn(256, 256, dtype=torch.float64)
    with ob.enabled(engine="auto", min_size="auto"):
        d = ob.explain(a, a)
        a @ a
    assert d.reason.startswith("torch (CPU): ")
    s = ob.stats()
    if not d:
        assert s["routed"] == 0 and s["native"] == 1
        reason = d.reason.removeprefix("torch (CPU): ")
        assert list(s["reasons"]["native"]) == [reason.split(" (", 1)[0]]


def test_a_backward_pass_in_another_thread_sees_the_scope_it_was_started_in(torch,
                                                                            gpu_dispatch):
    """PyTorch's device threads run a CUDA backward pass with the context that
    torch.autograd.backward stashed: the kernels read the scope from it (simulated here
    with a plain thread and the same stash)."""
    if not hasattr(torch._C, "_stash_obj_in_tls"):
        pytest.skip("this PyTorch does not stash the caller's context")
    with ob.enabled(**CPU):
        ctx = contextvars.copy_context()
    got = {}

    def device_thread(stash):
        if stash:
            torch._C._stash_obj_in_tls("context", stash)
        try:
            got[bool(stash)] = torch_hook._scope_config()
        finally:
            if stash:
                torch._C._remove_obj_from_tls("context")

    for stash in (ctx, None):
        t = threading.Thread(target=device_thread, args=(stash,))
        t.start()
        t.join()
    assert got[True] is not None and got[True].engine == "cpu" and got[True].min_size == 0
    assert got[False] is None


def test_uninstall_restores_pytorchs_kernels(torch, gpu_dispatch):
    a = torch.randn(32, 32, dtype=torch.float64)
    torch_hook.uninstall()
    try:
        assert not torch_hook.installed()
        with ob.enabled(**CPU):
            a @ a
        assert ob.stats()["routed"] == 0
    finally:
        torch_hook.install()
    assert torch_hook.installed()
    with ob.enabled(**CPU):
        a @ a
    assert ob.stats()["routed"] == 1


SCRIPT = """
import torch
a = torch.randn(64, 48, dtype=torch.float64)
b = torch.randn(48, 32, dtype=torch.float64)
(a @ b).sum()
"""


def _run(cmd, env, cwd):
    import os

    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=dict(os.environ, **env))


def test_an_unmodified_script_is_switched_over_from_the_environment(torch, tmp_path):
    """``OZAKI_BACKEND=1``: the backend is enabled when torch imports NumPy, half-way
    through torch's own import, and the kernels are registered once torch is complete
    (the start-up hook of this checkout, put first on the path); ``python -m
    ozaki_backend run`` without the start-up hook."""
    import importlib.util

    (tmp_path / "script.py").write_text(SCRIPT)
    env = {"OZAKI_BACKEND_ENGINE": "cpu", "OZAKI_BACKEND_MIN_SIZE": "0",
           "OZAKI_BACKEND_STATS": "1"}
    res = _run([sys.executable, "-m", "ozaki_backend", "run", "script.py"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "torch mm (CPU) 1" in res.stderr, res.stderr
    if importlib.util.find_spec("_ozaki_backend_start") is None:
        pytest.skip("the start-up hook (.pth) is not installed here")
    start = Path(__file__).resolve().parents[2] / "ozaki_backend" / "dispatch" / "_start.py"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "_ozaki_backend_start.py").write_text(start.read_text())
    res = _run([sys.executable, "script.py"],
               dict(env, OZAKI_BACKEND="1", PYTHONPATH=str(hook)), tmp_path)
    assert res.returncode == 0, res.stderr
    assert "torch mm (CPU) 1" in res.stderr, res.stderr


def test_importing_the_package_imports_neither_torch_nor_cupy():
    res = subprocess.run([sys.executable, "-c", "import sys, ozaki_backend as ob\n"
                          "with ob.enabled(engine='cpu'):\n    pass\n"
                          "print('torch' in sys.modules, 'cupy' in sys.modules)"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False"]
