"""complex128 products (``docs/spec.md`` §11): the emulation against cuBLAS ZGEMM on
device operands, NumPy in / NumPy out against host NumPy, and the CPU engine.

Skipped (``NotImplementedError`` in ``setup``) where an engine, CuPy or a GPU is
missing, or where this checkout has no complex pipeline yet.
"""

import numpy as np

import ozaki_backend

from ._common import SEED, require_cpu_engine, require_gpu


def complex_operands(m, n, k, seed=SEED):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)) + 1j * rng.standard_normal((m, k))
    b = rng.standard_normal((k, n)) + 1j * rng.standard_normal((k, n))
    return a, b


def require_complex():
    try:
        from ozaki_backend.reference import complex  # noqa: F401
    except ImportError as exc:
        raise NotImplementedError(f"no complex pipeline in this checkout: {exc}") from None


class TimeComplexCUDADevice:
    """CuPy complex128 operands in, CuPy result out: emulation vs cuBLAS ZGEMM."""

    params = ([4096, 8192], ["emulated", "zgemm"])
    param_names = ["n", "impl"]
    timeout = 600

    def setup(self, n, impl):
        require_complex()
        cp = require_gpu(engine=impl == "emulated")
        self.cp = cp
        a, b = complex_operands(n, n, n)
        self.a, self.b = cp.asarray(a), cp.asarray(b)
        if impl == "emulated":
            self.run = lambda: ozaki_backend.matmul(self.a, self.b, engine="cuda")
        else:
            self.run = lambda: cp.matmul(self.a, self.b)
        self.run()
        cp.cuda.Device().synchronize()

    def time_matmul(self, n, impl):
        self.run()
        self.cp.cuda.Device().synchronize()

    def track_moduli(self, n, impl):
        """Moduli count of the emulated product (0 for ZGEMM)."""
        if impl != "emulated":
            return 0
        from ozaki_backend.cuda.complex import moduli_for

        return moduli_for(self.a, self.b, ozaki_backend.plan(n, n, n))


class TimeComplexCUDAHost:
    """NumPy complex128 operands in, NumPy result out (transfers included), next to
    host NumPy."""

    params = ([4096, 8192], ["emulated", "numpy"])
    param_names = ["n", "impl"]
    timeout = 900

    def setup(self, n, impl):
        require_complex()
        # The NumPy case is the GPU case's yardstick, not a benchmark of its own: without
        # a GPU it is skipped too (a complex 8192^3 product takes minutes on a small CPU).
        cp = require_gpu(engine=impl == "emulated")
        if impl == "emulated":
            self.cp = cp
        self.a, self.b = complex_operands(n, n, n)
        self.run = (lambda: ozaki_backend.matmul(self.a, self.b, engine="cuda")) \
            if impl == "emulated" else (lambda: self.a @ self.b)
        self.run()

    def time_matmul(self, n, impl):
        self.run()


class TimeComplexCPU:
    """The CPU reference engine on complex128 operands."""

    params = [256, 512]
    param_names = ["n"]
    timeout = 600

    def setup(self, n):
        require_complex()
        require_cpu_engine()
        self.a, self.b = complex_operands(n, n, n)

    def time_matmul(self, n):
        ozaki_backend.matmul(self.a, self.b, engine="cpu")
