"""CUDA engine: time of ``matmul(engine="cuda")`` on device and host operands.

Skipped (``NotImplementedError`` in ``setup``) where CuPy or a GPU is missing. Kernel
compilation and workspace allocation happen in ``setup`` (one warm-up product), and
every timed function waits for the GPU before returning, so the figure is the whole
product, not the time to enqueue it.
"""

import ozaki_backend

from ._common import SEED, operands, require_gpu, require_testing

SIZES = [1024, 4096, 8192]


def _flops(n):
    return 2.0 * n ** 3


def _median_event_seconds(fn, reps=5):
    """Median seconds of ``reps`` synchronised calls of ``fn`` by CUDA events, no
    warm-up (``setup`` warmed up): the package's own timer."""
    from ozaki_backend.provenance import median_device_time

    return median_device_time(fn, reps, warmup=0)


class TimeCUDADevice:
    """CuPy operands in, CuPy result out (no host transfers)."""

    params = (SIZES, ["accurate", "fast"])
    param_names = ["n", "mode"]
    timeout = 600

    def setup(self, n, mode):
        cp = require_gpu()
        self.cp = cp
        a, b = operands(n, n, n)
        self.a, self.b = cp.asarray(a), cp.asarray(b)
        self.plan = ozaki_backend.plan(n, n, n, mode=mode, engine="cuda")
        self.plan.matmul(self.a, self.b)  # compile kernels, size the workspace
        cp.cuda.Device().synchronize()

    def time_matmul(self, n, mode):
        self.plan.matmul(self.a, self.b)
        self.cp.cuda.Device().synchronize()

    def track_tflops(self, n, mode):
        """2n^3 / median time of 5 synchronised products (CUDA events)."""
        return _flops(n) / _median_event_seconds(
            lambda: self.plan.matmul(self.a, self.b)) / 1e12

    track_tflops.unit = "TFLOPS"


class TimeCUDAHost:
    """NumPy operands in, NumPy result out: transfers included (end to end)."""

    params = ([4096, 8192], ["accurate"])
    param_names = ["n", "mode"]
    timeout = 600

    def setup(self, n, mode):
        cp = require_gpu()
        self.cp = cp
        self.a, self.b = operands(n, n, n)
        ozaki_backend.matmul(self.a, self.b, mode=mode, engine="cuda")  # warm-up
        cp.cuda.Device().synchronize()

    def time_matmul(self, n, mode):
        ozaki_backend.matmul(self.a, self.b, mode=mode, engine="cuda")
        self.cp.cuda.Device().synchronize()


class TimeCUDANative:
    """cuBLAS native DGEMM through CuPy on the same operands (the yardstick)."""

    params = SIZES
    param_names = ["n"]
    timeout = 600

    def setup(self, n):
        cp = require_gpu(engine=False)
        self.cp = cp
        a, b = operands(n, n, n)
        self.a, self.b = cp.asarray(a), cp.asarray(b)
        cp.matmul(self.a, self.b)
        cp.cuda.Device().synchronize()

    def time_dgemm(self, n):
        self.cp.matmul(self.a, self.b)
        self.cp.cuda.Device().synchronize()


class TimeCUDAPhase22:
    """The seed scheme on the GPU (4 passes x 7 INT8 products per k chunk of 4096)."""

    params = [4096]
    param_names = ["n"]
    timeout = 600

    def setup(self, n):
        cp = require_gpu()
        self.cp = cp
        a, b = operands(n, n, n)
        self.a, self.b = cp.asarray(a), cp.asarray(b)
        ozaki_backend.matmul(self.a, self.b, scheme="phase22", engine="cuda")
        cp.cuda.Device().synchronize()

    def time_matmul(self, n):
        ozaki_backend.matmul(self.a, self.b, scheme="phase22", engine="cuda")
        self.cp.cuda.Device().synchronize()


class TimeCUDAGemmPath:
    """One product along each GEMM path: cuBLAS INT8 GEMMs into int32 planes, or the
    fused Hopper kernel (products reduced mod p in registers, one byte out). Both give
    the same bits; ``python -m ozaki_backend tune`` records which is faster per shape.
    The fused path is skipped on GPUs other than Hopper."""

    params = ([4096, 8192], ["cublas", "wgmma"])
    param_names = ["n", "path"]
    timeout = 600

    def setup(self, n, path):
        cp = require_gpu()
        from ozaki_backend.cuda.capability import wgmma_available, wgmma_unavailable_reason
        from ozaki_backend.cuda.pipeline import product_into

        if path == "wgmma" and not wgmma_available():
            raise NotImplementedError(wgmma_unavailable_reason())
        self.cp = cp
        a, b = operands(n, n, n)
        self.a, self.b = cp.asarray(a), cp.asarray(b)
        self.out = cp.empty((n, n))
        self.plan = ozaki_backend.plan(n, n, n, moduli=15, mode="fast")
        self.run = lambda: product_into(self.a, self.b, self.plan, self.out, strategy=path)
        self.run()
        cp.cuda.Device().synchronize()

    def time_product(self, n, path):
        self.run()
        self.cp.cuda.Device().synchronize()


class TrackCUDAWideRange:
    """cuBLAS DGEMM's time over ours on phi data (``testing.phi_matrix`` on the device:
    phi = -1 N(0, 1), 1 and 2 rows spanning many binades) under ``precision="fp64"``:
    ``performant`` (the default: native DGEMM where the cost model prices it faster,
    never much below 1) and ``eager`` (the certified emulation at its count, gathers
    and a-posteriori test included: what the certificate's passes cost). Issue 32's
    targets read from it: the default at 1.0 or above on every row, the eager rows
    rising as the certificate gets cheaper."""

    params = ([4096, 8192], [-1.0, 1.0, 2.0], ["performant", "eager"])
    param_names = ["n", "phi", "emulation"]
    timeout = 900

    def setup(self, n, phi, emulation):
        cp = require_gpu()
        testing = require_testing()
        self.cp = cp
        rng = cp.random.default_rng(SEED)
        self.a = testing.phi_matrix((n, n), phi, rng)
        self.b = testing.phi_matrix((n, n), phi, rng)
        self.out = cp.empty((n, n))
        self.params_emulation = emulation
        for _ in range(3):                     # kernels, workspace, the shape's count
            self._ours()
            cp.matmul(self.a, self.b, out=self.out)
        cp.cuda.Device().synchronize()

    def _ours(self):
        ozaki_backend.matmul(self.a, self.b, out=self.out, engine="cuda",
                             emulation=self.params_emulation)

    def track_ratio_to_dgemm(self, n, phi, emulation):
        native = _median_event_seconds(
            lambda: self.cp.matmul(self.a, self.b, out=self.out))
        ours = _median_event_seconds(self._ours)
        return native / ours

    track_ratio_to_dgemm.unit = "x DGEMM"
