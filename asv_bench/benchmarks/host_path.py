"""The host path (issue 17): NumPy operands in, NumPy result out, inside ``enabled()``,
through every entry point, next to plain NumPy (the same call outside any scope).

The routed rows are GPU only (skipped without CuPy and a GPU): on the CPU engine every
routed call is orders of magnitude slower than NumPy by design. ``python -m
ozaki_backend bench --host`` prints the same rows with the phase breakdown and the grid.

The declined products (issue 29: declining must cost nothing) run everywhere:
``TrackDeclined`` tracks the worst ratio, inside ``enabled()`` over plain NumPy, of the
cube products the cost model keeps native (timed alternately, one call each way in
turn), and the time of a small matrix-vector ``np.dot`` a scope declines, which the C
fast path leaves to NumPy.
"""

import importlib

import numpy as np

from ._common import SEED, gaussian, require_dispatch, require_gpu

#: n of the entry-point rows (issue 17's target: <= 60 ms each at 8192 on the H200).
SIZES = [4096, 8192]
ENTRIES = ["matmul", "dot", "scipy_dgemm_fortran"]


def _call(entry, a, b):
    if entry == "matmul":
        return lambda: a @ b
    if entry == "dot":
        return lambda: np.dot(a, b)
    from scipy.linalg import blas

    af, bf = np.asfortranarray(a), np.asfortranarray(b)
    return lambda: blas.dgemm(1.0, af, bf)


class TimeHostEntryPoints:
    """``A @ B``, ``np.dot``, SciPy ``dgemm`` (Fortran operands), routed and native."""

    params = (SIZES, ENTRIES, ["routed", "native"])
    param_names = ["n", "entry", "how"]
    timeout = 600
    number = 1
    repeat = 5

    def setup(self, n, entry, how):
        require_gpu()
        ob = require_dispatch()
        if entry == "scipy_dgemm_fortran":
            try:
                importlib.import_module("scipy.linalg.blas")
            except ImportError as exc:
                raise NotImplementedError(f"SciPy missing: {exc}") from None
        ob.dispatch.install()
        a, b = gaussian((n, n), SEED), gaussian((n, n), SEED + 1)
        self.fn = _call(entry, a, b)
        self.scope = ob.enabled if how == "routed" else ob.disabled
        with self.scope():
            self.fn()  # warm-up: kernels, pinned staging buffers

    def time_call(self, n, entry, how):
        with self.scope():
            self.fn()


class TimeHostGram:
    """``X.T @ X`` (X 60000 x 4096, C order) routed and native, and a general product
    of the same shape (``X.T @ Y``) routed."""

    params = (["gram", "general"], ["routed", "native"])
    param_names = ["product", "how"]
    timeout = 600
    number = 1
    repeat = 5

    def setup(self, product, how):
        require_gpu()
        ob = require_dispatch()
        ob.dispatch.install()
        X = gaussian((60000, 4096), SEED)
        Y = X if product == "gram" else gaussian((60000, 4096), SEED + 1)
        self.fn = lambda: X.T @ Y
        self.scope = ob.enabled if how == "routed" else ob.disabled
        with self.scope():
            self.fn()

    def time_product(self, product, how):
        with self.scope():
            self.fn()


class TimeHostRidge:
    """``sklearn.linear_model.Ridge(solver="cholesky").fit(X, y)``, X 60000 x 4096."""

    params = ["routed", "native"]
    param_names = ["how"]
    timeout = 600
    number = 1
    repeat = 3

    def setup(self, how):
        require_gpu()
        ob = require_dispatch()
        try:
            from sklearn.linear_model import Ridge
        except ImportError as exc:
            raise NotImplementedError(f"scikit-learn missing: {exc}") from None
        ob.dispatch.install()
        self.X = gaussian((60000, 4096), SEED)
        self.y = gaussian((60000,), SEED + 1)
        self.Ridge = Ridge
        self.scope = ob.enabled if how == "routed" else ob.disabled

    def time_fit(self, how):
        with self.scope():
            self.Ridge(solver="cholesky").fit(self.X, self.y)


class TrackDeclined:
    """Declined products inside ``enabled()`` against plain NumPy (issue 29: at most
    1.03x; a declined small call at most 1 us more)."""

    timeout = 600
    #: Cubes whose decision is taken (those the cost model routes are left out);
    #: without a GPU ``engine="auto"`` routes nothing and only the small ones are timed.
    GPU_CUBES = (256, 512, 768, 1024, 1536, 2048, 3072)
    CPU_CUBES = (256, 512, 1024)

    def setup(self):
        ob = require_dispatch()
        ob.dispatch.install()
        try:
            require_gpu()
            self.cubes = self.GPU_CUBES
        except NotImplementedError:
            self.cubes = self.CPU_CUBES
        self.scope = ob.enabled
        self.A = gaussian((64, 64), SEED)
        self.v = gaussian((64,), SEED + 1)

    def track_worst_declined_ratio(self):
        from ozaki_backend import bench_host

        ratios = bench_host.declined_ratios([(n, n, n) for n in self.cubes], 5,
                                            self.scope)
        return max(ratios.values()) if ratios else 1.0

    track_worst_declined_ratio.unit = "ratio"

    def track_declined_small_dot_extra_us(self):
        """Microseconds a 64 x 64 matrix-vector ``np.dot`` costs more inside a scope."""
        import time

        A, v, calls = self.A, self.v, 20000

        def per_call():
            t0 = time.perf_counter()
            for _ in range(calls):
                np.dot(A, v)
            return (time.perf_counter() - t0) / calls

        best_out = min(per_call() for _ in range(3))
        with self.scope():
            best_in = min(per_call() for _ in range(3))
        return (best_in - best_out) * 1e6

    track_declined_small_dot_extra_us.unit = "us"
