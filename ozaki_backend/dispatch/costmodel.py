"""Cost model layer: host BLAS time against transfer + GPU time, and routing floors.

Sits above ``log`` and below ``config``: it knows configurations only by their
``engine`` and ``min_size`` attributes and imports nothing of the dispatch layer. The
engine that ``engine="auto"`` means comes from ``ozaki_backend.registry``; the moduli
counts of a product from ``ozaki_backend.plan`` (in ``routing``).

The floor of a configuration (:func:`floor`) is the smallest ``m*n*k`` it may route;
the C loop hook skips every smaller product without calling Python. The floor of a
config with ``min_size="auto"`` and the CUDA engine depends on the model's parameters,
so a change of them is pushed to the listeners registered with
:meth:`CostModel.subscribe` (``config`` registers one that refreshes the floor of
``enable()``'s default) instead of this module calling upwards.
"""

from __future__ import annotations

import math
import os
import threading
import time

from .. import registry

#: A floor no product reaches (also the C hook's "never route").
NEVER = 2**63 - 1


def _positive(text):
    """``float(text)`` when it is a finite number > 0, else None."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


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

    #: The adjustable parameters besides ``host_gflops``.
    PARAMS = ("h2d_gbps", "d2h_gbps", "int8_tops", "device_gbps", "overhead_s")

    def __init__(self, host_gflops=None, h2d_gbps=2.6, d2h_gbps=2.6, int8_tops=800.0,
                 device_gbps=3000.0, overhead_s=5e-3):
        object.__setattr__(self, "_host_gflops", host_gflops)
        object.__setattr__(self, "host_source", "given" if host_gflops is not None else None)
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_listeners", [])
        for name, v in zip(self.PARAMS, (h2d_gbps, d2h_gbps, int8_tops, device_gbps,
                                         overhead_s)):
            object.__setattr__(self, name, float(v))

    def __setattr__(self, name, value):
        if name in ("host_gflops", "h2d_gbps", "d2h_gbps", "int8_tops", "device_gbps") \
                and _positive(value) is None:
            raise ValueError(f"CostModel.{name} must be a finite number > 0; got {value!r}")
        if name == "host_gflops":
            object.__setattr__(self, "_host_gflops", float(value))
            object.__setattr__(self, "host_source", "set")
        elif name in self.PARAMS:
            object.__setattr__(self, name, float(value))
        else:
            raise AttributeError(f"CostModel has no parameter {name!r}")
        # The C hook's floor of enable()'s default depends on these parameters; the
        # layer that holds that floor listens (this module must not import it).
        for listener in list(self._listeners):
            listener()

    def subscribe(self, listener) -> None:
        """Call ``listener()`` after every change of a parameter (in the changing thread).

        Parameters
        ----------
        listener : callable
            Takes no arguments. ``config`` registers one that recomputes the floor of
            ``enable()``'s default.
        """
        self._listeners.append(listener)

    @property
    def host_gflops(self) -> float:
        """Native float64 GEMM rate of this host (GFLOP/s), measured once."""
        if self._host_gflops is None:
            with self._lock:
                if self._host_gflops is None:
                    env = os.environ.get("OZAKI_BACKEND_HOST_GFLOPS", "").strip()
                    rate = _positive(env)
                    if rate is not None:
                        src = "OZAKI_BACKEND_HOST_GFLOPS"
                    else:
                        if env:  # a typo must not stop the program: warn, measure
                            from .._warnings import warn_config

                            warn_config(f"OZAKI_BACKEND_HOST_GFLOPS={env!r} must be a "
                                        "positive number of GFLOP/s; the host rate is "
                                        "measured instead")
                        rate = measure_host_gflops()
                        src = "measured (native DGEMM, n = 256..2048)"
                    object.__setattr__(self, "host_source", src)
                    object.__setattr__(self, "_host_gflops", rate)
        return self._host_gflops

    def host_seconds(self, m, n, k, batch=1) -> float:
        """Estimated native BLAS time of ``batch`` products ``(m, k) @ (k, n)``."""
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
    """The process-wide :class:`CostModel` (its attributes may be adjusted).

    Returns
    -------
    CostModel
        The one instance every routing decision and floor uses.
    """
    return _model


def floor(config) -> int:
    """Smallest ``m*n*k`` that ``config`` may route (:data:`NEVER` if it routes nothing).

    Parameters
    ----------
    config : Config
        Read for its ``engine`` and ``min_size``.

    Returns
    -------
    int
        An explicit ``min_size`` as given; with ``min_size="auto"``: 0 for
        ``engine="cpu"`` (every eligible product), :data:`NEVER` for ``engine="auto"``
        without a GPU, else the cost model's floor.
    """
    eng, _ = registry.resolve_name(config.engine)
    if config.min_size is not None:
        return config.min_size
    if eng == "cpu":
        return 0 if config.engine == "cpu" else NEVER
    return _model.floor()
