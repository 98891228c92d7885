"""Which engine computes a call: the one resolver of ``engine="auto"``, the host copy
that lets the CPU engine take CuPy operands, and the moduli count where the operands live.

The CPU engine is always there; the CUDA engine is imported on first use only (it
imports CuPy), so that ``import ozaki_backend`` never creates a CUDA context. Everything
that needs to know which engine runs — the API, the dispatch layer's routing and cost
model, ``Plan.moduli_for`` — asks here.
"""

from __future__ import annotations

import numpy as np

from ._warnings import EngineUnavailableError
from .engine import Engine
from .reference.engine import ENGINE as CPU
from .semantics import is_cupy

ENGINES = ("cpu", "cuda")


_cuda_package = None     # ozaki_backend.cuda, once imported


def cuda_availability() -> tuple[bool, str]:
    """``(ok, reason)``: whether the CUDA engine can run in this process (CuPy importable
    and a device present), without importing CuPy twice."""
    global _cuda_package
    if _cuda_package is None:   # (an import statement costs microseconds a call)
        from . import cuda

        _cuda_package = cuda
    return _cuda_package.availability()


def get(name: str) -> Engine:
    """The engine called ``name`` (``"cpu"`` or ``"cuda"``).

    Raises
    ------
    ValueError
        For another name.
    EngineUnavailableError
        ``"cuda"`` when CuPy is not importable or no device is usable (a
        :class:`RuntimeError`; the message says why and how to install the extra).
    """
    if name == "cpu":
        return CPU
    if name == "cuda":
        ok, why = cuda_availability()
        if not ok:
            hint = ("install the CUDA extra: pip install 'ozaki_backend[cuda13]' (CUDA 13) "
                    "or 'ozaki_backend[cuda12]' (CUDA 12)"
                    if why.startswith("CuPy is not importable") else
                    "the CUDA engine needs an NVIDIA GPU with a working driver")
            raise EngineUnavailableError(f"engine='cuda' is unavailable: {why}; {hint}; "
                                         "or use engine='cpu'")
        from .cuda.engine import ENGINE as CUDA

        return CUDA
    raise ValueError(f"unknown engine {name!r}; engines are {', '.join(ENGINES)}")


def resolve_name(requested: str) -> tuple[str, str]:
    """``(engine name, why)`` that ``engine=requested`` means for NumPy operands:
    ``"auto"`` is the GPU when CuPy and a device are usable, else the CPU engine."""
    if requested == "cpu":
        return "cpu", "engine='cpu'"
    if requested == "cuda":
        return "cuda", "engine='cuda'"
    ok, why = cuda_availability()
    return ("cuda", why) if ok else ("cpu", f"no usable GPU ({why})")


def resolve(requested: str, on_device: bool = False) -> tuple[Engine, str]:
    """``(engine, why)`` for a call with ``engine=requested``.

    Parameters
    ----------
    requested : {"auto", "cpu", "cuda"}
    on_device : bool
        The operands are CuPy arrays: ``"auto"`` is then the CUDA engine, and the CPU
        engine takes them through host copies (:class:`HostCopy`).
    """
    if on_device:
        if requested == "cpu":
            return HOST_COPY, "engine='cpu' (CuPy operands via host)"
        return get("cuda"), f"engine={requested!r} (CuPy operands)"
    name, why = resolve_name(requested)
    return get(name), why


class HostCopy(Engine):
    """The CPU engine for CuPy operands: host copies in, the result copied back."""

    name = "cpu"
    array_types = ("cupy",)

    def availability(self):
        return CPU.availability()

    def product(self, a3, b3, plan, out3, *, alpha=1.0, beta=0.0, c3=None,
                bound3=None) -> int:
        import cupy

        host = np.empty(out3.shape)
        hbound = None if bound3 is None else np.empty(bound3.shape)
        done = CPU.product(cupy.asnumpy(a3), cupy.asnumpy(b3), plan, host, alpha=alpha,
                           beta=beta, c3=None if c3 is None else cupy.asnumpy(c3),
                           bound3=hbound)
        if done:
            out3[...] = cupy.asarray(host)
            if bound3 is not None:
                bound3[...] = cupy.asarray(hbound)
        return done

    def moduli_for(self, A, B, plan):
        import cupy

        return CPU.moduli_for(cupy.asnumpy(A), cupy.asnumpy(B), plan)


HOST_COPY = HostCopy()


def engine_of(a, b) -> Engine:
    """The engine that computes data statistics of these operands where they live."""
    return get("cuda") if (is_cupy(a) or is_cupy(b)) else CPU


def moduli_for(a, b, plan):
    """The moduli count ``plan`` uses for the 2-D product ``a @ b``, computed where the
    operands live (NumPy: the CPU reference; CuPy: the CUDA engine's kernels, bit for
    bit the same integer): ``plan``'s own count when fixed; for ``precision="fp64"`` the
    fewest whose certificate meets the target a priori, or 20 when some element passes
    at no count (``docs/spec.md`` §10.3)."""
    sa, sb = tuple(np.shape(a)), tuple(np.shape(b))
    if len(sa) != 2 or len(sb) != 2 or sa[1] != sb[0]:
        raise ValueError(f"moduli_for needs 2-D operands (m, k) @ (k, n); got {sa} and {sb}")
    if (sa[0], sb[1], sa[1]) != (plan.m, plan.n, plan.k):
        raise ValueError(f"plan is for ({plan.m} x {plan.k}) @ ({plan.k} x {plan.n}); "
                         f"operands are ({sa[0]} x {sa[1]}) @ ({sb[0]} x {sb[1]})")
    eng = engine_of(a, b)
    # complex operands stay complex128 (their count is the complex table's, spec §11)
    da = np.complex128 if np.iscomplexobj(a) else np.float64
    db = np.complex128 if np.iscomplexobj(b) else np.float64
    if eng is CPU:
        a = np.asarray(a, dtype=da)
        b = np.asarray(b, dtype=db)
    else:
        import cupy

        a = cupy.asarray(a, dtype=da)
        b = cupy.asarray(b, dtype=db)
    return eng.moduli_for(a, b, plan)


def describe(plan, requested: str = "auto") -> str:
    """How ``plan`` would be computed here with ``engine=requested`` (engine, and on a
    GPU the GEMM path), one line."""
    name, why = resolve_name(requested)
    if name == "cuda":
        ok, reason = cuda_availability()
        if not ok:
            return f"engine cuda: unavailable ({reason})"
    eng = get(name)
    text = eng.describe(plan)
    return f"engine {name} ({why})" + (f"; {text}" if text else "")
