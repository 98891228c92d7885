"""The host path (issue 17): NumPy operands in, NumPy result out, inside ``enabled()``,
through every entry point, next to plain NumPy (the same call outside any scope).

GPU only (skipped without CuPy and a GPU): on the CPU engine every routed call is
orders of magnitude slower than NumPy by design. ``python -m ozaki_backend bench
--host`` prints the same rows with the phase breakdown and the grid.
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
