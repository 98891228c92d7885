"""CPU reference engine: time and peak memory of ``matmul(engine="cpu")``.

The CPU engine is the exact NumPy implementation of docs/spec.md; these numbers track
its cost (it is the test oracle and the engine on machines without a GPU), next to
NumPy's own float64 product on the same operands.
"""

import numpy as np

import ozaki_backend

from ._common import operands, require_cpu_engine


class TimeCPUEngine:
    """Square products, the moduli count chosen by ``precision="fp64"``."""

    params = ([64, 256, 512], ["accurate", "fast"])
    param_names = ["n", "mode"]
    timeout = 300

    def setup(self, n, mode):
        require_cpu_engine()
        self.a, self.b = operands(n, n, n)
        self.plan = ozaki_backend.plan(n, n, n, mode=mode, engine="cpu")

    def time_matmul(self, n, mode):
        ozaki_backend.matmul(self.a, self.b, mode=mode, engine="cpu")

    def time_plan_matmul(self, n, mode):
        self.plan.matmul(self.a, self.b)


class TimeCPUModuli:
    """Cost against the number of moduli at a fixed shape (n = 256)."""

    params = [4, 8, 12, 16, 20]
    param_names = ["moduli"]
    timeout = 300

    def setup(self, moduli):
        require_cpu_engine()
        self.a, self.b = operands(256, 256, 256)

    def time_matmul(self, moduli):
        ozaki_backend.matmul(self.a, self.b, moduli=moduli, engine="cpu")


class TimeCPUPhase22:
    """The seed blog's scheme (7 primes, 4 passes) on the CPU engine."""

    params = ([256], [False, True])
    param_names = ["n", "residual"]
    timeout = 300

    def setup(self, n, residual):
        require_cpu_engine()
        self.a, self.b = operands(n, n, n)

    def time_matmul(self, n, residual):
        ozaki_backend.matmul(self.a, self.b, scheme="phase22", residual=residual,
                             engine="cpu")


class TimeNumPyBaseline:
    """NumPy's native float64 product on the same operands (the yardstick)."""

    params = [64, 256, 512]
    param_names = ["n"]

    def setup(self, n):
        self.a, self.b = operands(n, n, n)

    def time_numpy_matmul(self, n):
        np.matmul(self.a, self.b)


class TimePlan:
    """Building a plan (moduli choice, CRT constants); cached constants after the first."""

    def time_plan(self):
        ozaki_backend.plan(4096, 4096, 4096)


class PeakMemCPUEngine:
    """Peak resident memory of one CPU-engine product (process peak, in bytes)."""

    params = ([512], ["accurate", "fast"])
    param_names = ["n", "mode"]
    timeout = 300

    def setup(self, n, mode):
        require_cpu_engine()
        self.a, self.b = operands(n, n, n)

    def peakmem_matmul(self, n, mode):
        ozaki_backend.matmul(self.a, self.b, mode=mode, engine="cpu")
