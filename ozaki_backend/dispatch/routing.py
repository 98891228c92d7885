"""Routing: whether one product goes to the backend, which engine, and why.

Order of the checks (each native outcome names its reason, see :class:`Decision`):

1. Shape: only matrix-matrix products are eligible (``m >= 2``, ``n >= 2``, ``k >= 1``);
   matrix-vector shapes are memory bound and stay with BLAS.
2. Engine: ``engine="cpu"`` / ``"cuda"`` as configured; ``"auto"`` picks the GPU when
   CuPy and a device are usable, else the CPU reference engine.
3. Size: an explicit ``min_size`` routes every product with ``m*n*k >= min_size``.
   With ``min_size="auto"``: ``engine="cpu"`` routes everything eligible (the user
   asked for the reference engine's results); ``engine="auto"`` without a GPU routes
   nothing (emulation on the host is always slower than native BLAS); with the CUDA
   engine the :class:`CostModel` compares the host BLAS time with transfer + GPU time.
4. Operands with NaN or infinity are checked by the caller (they take the native
   path, so the result is exactly NumPy's).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from functools import lru_cache

from .. import registry
from .config import NEVER


class Decision:
    """The routing decision for one product; truthy when routed.

    Attributes
    ----------
    routed : bool
    reason : str
        Why (also the key it is counted under in ``stats()``).
    engine : str or None
        ``"cpu"`` or ``"cuda"`` when routed.
    entry : str
        The entry point (``"@/matmul"``, ``"np.dot"``, ``"scipy dgemm"`` ...).
    m, n, k, batch : int
        Core shape ``(m, k) @ (k, n)`` and the number of such products.
    est_host_s, est_emulated_s : float or None
        The cost model's estimates, when it was consulted.
    """

    __slots__ = ("routed", "reason", "engine", "entry", "m", "n", "k", "batch",
                 "est_host_s", "est_emulated_s")

    def __init__(self, routed, reason, *, engine=None, entry="", m=0, n=0, k=0, batch=1,
                 est_host_s=None, est_emulated_s=None):
        self.routed = routed
        self.reason = reason
        self.engine = engine
        self.entry = entry
        self.m, self.n, self.k, self.batch = m, n, k, batch
        self.est_host_s = est_host_s
        self.est_emulated_s = est_emulated_s

    def __bool__(self):
        return self.routed

    def __repr__(self):
        what = f"routed to engine={self.engine}" if self.routed else "native"
        shape = f"({self.m} x {self.k}) @ ({self.k} x {self.n})"
        if self.batch != 1:
            shape = f"{self.batch} x {shape}"
        est = ""
        if self.est_host_s is not None:
            est = (f" [est. host BLAS {self.est_host_s * 1e3:.3g} ms, emulated "
                   f"{self.est_emulated_s * 1e3:.3g} ms]")
        entry = f"{self.entry}: " if self.entry else ""
        return f"{entry}{shape} {what}: {self.reason}{est}"

    __str__ = __repr__


# --------------------------------------------------------------------------- cost model
class CostModel:
    """Host BLAS time against transfer + GPU time for one float64 product.

    ``host_gflops`` is measured once per process on first use
    (:func:`measure_host_gflops`) unless ``OZAKI_BACKEND_HOST_GFLOPS`` gives it. The GPU
    side uses documented defaults fitted to end-to-end routed ``A @ B`` times of NumPy
    operands on the H200 machine (n = 512 ... 8192: 7.5, 18.5, 52, 161, 640 ms, i.e. a
    fixed ~5 ms plus ~2.6 GB/s for operands in and result out); adjust the attributes
    of :func:`cost_model` to fit another machine or a faster engine.

    Attributes
    ----------
    h2d_gbps, d2h_gbps : float
        Effective host->device / device->host rate (GB/s) of a routed call, staging
        and conversions included. Default 2.6 (fitted, see above).
    int8_tops : float
        Sustained INT8 GEMM rate (TOPS) for the modular products. Default 800.
    device_gbps : float
        Device memory bandwidth (GB/s) for scaling, residues and CRT. Default 3000.
    overhead_s : float
        Fixed cost per routed call: planning, workspace, launches, synchronisation.
        Default 5e-3 (fitted, see above).
    """

    _PARAMS = ("h2d_gbps", "d2h_gbps", "int8_tops", "device_gbps", "overhead_s")

    def __init__(self, host_gflops=None, h2d_gbps=2.6, d2h_gbps=2.6, int8_tops=800.0,
                 device_gbps=3000.0, overhead_s=5e-3):
        object.__setattr__(self, "_host_gflops", host_gflops)
        object.__setattr__(self, "host_source", "given" if host_gflops is not None else None)
        object.__setattr__(self, "_lock", threading.Lock())
        for name, v in zip(self._PARAMS, (h2d_gbps, d2h_gbps, int8_tops, device_gbps,
                                          overhead_s)):
            object.__setattr__(self, name, float(v))

    def __setattr__(self, name, value):
        if name == "host_gflops":
            object.__setattr__(self, "_host_gflops", float(value))
            object.__setattr__(self, "host_source", "set")
        elif name in self._PARAMS:
            object.__setattr__(self, name, float(value))
        else:
            raise AttributeError(f"CostModel has no parameter {name!r}")
        # The C hook's floor of enable()'s default depends on these parameters.
        from . import config

        config.refresh_floors()

    @property
    def host_gflops(self) -> float:
        """Native float64 GEMM rate of this host (GFLOP/s), measured once."""
        if self._host_gflops is None:
            with self._lock:
                if self._host_gflops is None:
                    env = os.environ.get("OZAKI_BACKEND_HOST_GFLOPS", "").strip()
                    if env:
                        rate, src = float(env), "OZAKI_BACKEND_HOST_GFLOPS"
                    else:
                        rate = measure_host_gflops()
                        src = "measured (native DGEMM, n = 256..2048)"
                    object.__setattr__(self, "host_source", src)
                    object.__setattr__(self, "_host_gflops", rate)
        return self._host_gflops

    def host_seconds(self, m, n, k, batch=1) -> float:
        return 2.0 * m * n * k * batch / (self.host_gflops * 1e9)

    def emulated_seconds(self, m, n, k, batch=1, n_gemms=16, n_moduli=15) -> float:
        """Transfers + modular GEMMs + memory-bound stages + fixed overhead."""
        xfer = 8.0 * (m * k + k * n) / (self.h2d_gbps * 1e9) + 8.0 * m * n / (self.d2h_gbps * 1e9)
        gemm = n_gemms * 2.0 * m * n * k / (self.int8_tops * 1e12)
        mem = (8.0 + n_moduli) * (m * k + k * n) + (4.0 * n_moduli + 8.0) * m * n
        return self.overhead_s + batch * (xfer + gemm + mem / (self.device_gbps * 1e9))

    def floor(self) -> int:
        """A lower bound of ``m*n*k`` below which routing can never pay off.

        The emulated time is at least ``overhead_s``; the host time is
        ``2*m*n*k / rate``. The C hook uses this to skip smaller products in C.
        """
        return int(self.overhead_s * self.host_gflops * 1e9 / 2.0)

    def __repr__(self):
        host = (f"{self._host_gflops:.1f} GFLOP/s ({self.host_source})"
                if self._host_gflops is not None else "not measured yet")
        return (f"CostModel(host BLAS {host}; H2D {self.h2d_gbps} GB/s, D2H "
                f"{self.d2h_gbps} GB/s, INT8 {self.int8_tops} TOPS, device "
                f"{self.device_gbps} GB/s, overhead {self.overhead_s * 1e6:.0f} us)")


def measure_host_gflops(max_n: int = 2048, target_s: float = 0.02, repeats: int = 3) -> float:
    """Native float64 GEMM rate of this host (GFLOP/s); never routed.

    Times square products from n = 256 upwards, doubling n while one product takes
    less than ``target_s`` (small products underrate a many-core BLAS: on the H200 host
    512^3 ran at 93 GFLOP/s, 4096^3 at 600), up to ``max_n``; returns the best rate
    seen, each size the best of ``repeats``. About 0.1 s on a 16-core host, less on a
    small one (it stops at the size that takes ``target_s``).
    """
    import numpy as np

    from .._native import suspended

    rng = np.random.default_rng(0)
    best_rate, n = 0.0, 256
    with suspended():
        while True:
            a = rng.standard_normal((n, n))
            np.matmul(a, a)  # warm up: thread pool start, page faults
            best = math.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                np.matmul(a, a)
                best = min(best, time.perf_counter() - t0)
            best_rate = max(best_rate, 2.0 * n ** 3 / best / 1e9)
            if best >= target_s or n >= max_n:
                return best_rate
            n *= 2


_model = CostModel()


def cost_model() -> CostModel:
    """The process-wide :class:`CostModel` (its attributes may be adjusted)."""
    return _model


# --------------------------------------------------------------------------- engine
def resolve_engine(config) -> tuple[str, str]:
    """``(engine, why)``: the engine a routed product of this config would use."""
    return registry.resolve_name(config.engine)


def floor(config) -> int:
    """Smallest ``m*n*k`` this config may route (``NEVER`` if it routes nothing)."""
    eng, _ = resolve_engine(config)
    if config.min_size is not None:
        return config.min_size
    if eng == "cpu":
        return 0 if config.engine == "cpu" else NEVER
    return _model.floor()


@lru_cache(maxsize=256)
def _plan_counts(k: int, opts_key: tuple) -> tuple[int, int]:
    from ..plan import Plan

    p = Plan(1, 1, k, **dict(opts_key))
    # precision="fp64" picks its count per product (from the operands' exponent
    # spread): the estimate assumes ordinary data, i.e. the fewest of the range.
    lo, hi = p.moduli_range
    return p.n_gemms - (hi - lo) * p.k_split, lo


def decide(config, m: int, n: int, k: int, batch: int = 1, entry: str = "") -> Decision:
    """The decision for ``batch`` products ``(m, k) @ (k, n)`` under ``config``.

    Does not look at the data (see the module docstring for the non-finite check).
    """
    kw = dict(entry=entry, m=m, n=n, k=k, batch=batch)
    if m < 2 or n < 2:
        return Decision(False, "matrix-vector shaped (m or n < 2): left to BLAS", **kw)
    if k < 1 or batch < 1:
        return Decision(False, "empty product", **kw)
    eng, why = resolve_engine(config)
    size = m * n * k
    if config.min_size is not None:
        if size < config.min_size:
            return Decision(False, f"below min_size (m*n*k < {config.min_size})", **kw)
        return Decision(True, f"min_size={config.min_size}", engine=eng, **kw)
    if eng == "cpu":
        if config.engine == "cpu":
            return Decision(True, "engine='cpu', min_size='auto' routes all eligible",
                            engine="cpu", **kw)
        return Decision(False, f"engine='auto' with {why} and min_size='auto': emulation "
                        "on the host is slower than BLAS; set min_size to route anyway", **kw)
    n_gemms, n_mod = _plan_counts(k, tuple(sorted(config.opts.items())))
    t_host = _model.host_seconds(m, n, k, batch)
    t_emu = _model.emulated_seconds(m, n, k, batch, n_gemms, n_mod)
    kw.update(est_host_s=t_host, est_emulated_s=t_emu)
    if t_emu < t_host:
        return Decision(True, "cost model: emulated faster", engine=eng, **kw)
    return Decision(False, "cost model: host BLAS faster", **kw)


# --------------------------------------------------------------------------- history
#: The most recent decisions made in Python (``explain()`` shows them). Products the
#: C hook skipped without calling Python are not in it (they are counted in stats()).
recent: deque = deque(maxlen=32)
