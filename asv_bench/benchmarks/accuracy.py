"""Accuracy: max relative error against the exact product, and the moduli count chosen.

Operands are the phi test matrices of ``ozaki_backend.testing.phi_matrix`` (phi = -1:
standard normal; larger phi spreads the exponents of each row and column wider), at
fixed seeds, m = n = k = 128. The reference is the exact product rounded once to
float64 (``ozaki_backend.testing``). The engine is the CPU reference engine, which the
spec makes bitwise identical to the CUDA engine, so these numbers hold for both.

Skipped while ``ozaki_backend.testing`` or the CPU engine is absent.
"""

import numpy as np

import ozaki_backend

from ._common import PHIS, SEED, require_cpu_engine, require_testing

SIZE = 128


def _problem(phi, size=SIZE):
    """A, B and their exact product (rounded once), from the suite's fixed seed."""
    testing = require_testing()
    rng = np.random.default_rng(SEED)
    a = testing.phi_matrix((size, size), phi, rng)
    b = testing.phi_matrix((size, size), phi, rng)
    return a, b, testing.exact_matmul(a, b)


def _err(c, exact):
    return float(require_testing().max_relative_error(c, exact))


class TrackAccuracyFP64:
    """``precision="fp64"`` (the default): should be no worse than native float64."""

    params = (list(PHIS), ["accurate", "fast"])
    param_names = ["phi", "mode"]
    unit = "relative error"
    timeout = 300

    def setup(self, phi, mode):
        require_cpu_engine()
        self.a, self.b, self.exact = _problem(phi)

    def track_max_rel_err(self, phi, mode):
        return _err(ozaki_backend.matmul(self.a, self.b, mode=mode, engine="cpu"),
                           self.exact)


class TrackAccuracyModuli:
    """Error against the number of moduli (accurate mode) for each phi."""

    params = (list(PHIS), [8, 10, 12, 14, 16, 18, 20])
    param_names = ["phi", "moduli"]
    unit = "relative error"
    timeout = 300

    def setup(self, phi, moduli):
        require_cpu_engine()
        self.a, self.b, self.exact = _problem(phi)

    def track_max_rel_err(self, phi, moduli):
        return _err(ozaki_backend.matmul(self.a, self.b, moduli=moduli, engine="cpu"),
                           self.exact)


class TrackAccuracyNumPy:
    """NumPy's native float64 product on the same problems (the yardstick)."""

    params = list(PHIS)
    param_names = ["phi"]
    unit = "relative error"
    timeout = 300

    def setup(self, phi):
        self.a, self.b, self.exact = _problem(phi)

    def track_max_rel_err(self, phi):
        return _err(np.matmul(self.a, self.b), self.exact)


class TrackAccuracyPhase22:
    """The seed scheme (about 34 bits kept), with and without its FP64 residual."""

    params = (list(PHIS), [False, True])
    param_names = ["phi", "residual"]
    unit = "relative error"
    timeout = 300

    def setup(self, phi, residual):
        require_cpu_engine()
        self.a, self.b, self.exact = _problem(phi)

    def track_max_rel_err(self, phi, residual):
        return _err(ozaki_backend.matmul(self.a, self.b, scheme="phase22",
                                                residual=residual, engine="cpu"),
                           self.exact)


class TrackModuliChoice:
    """How many moduli ``precision="fp64"`` picks for a reduction length k: the count for
    operands of exponent spread 4 (standard normal data) and the most it may pick."""

    params = ([128, 1024, 4096, 16384, 65536, 262144], ["accurate", "fast"])
    param_names = ["k", "mode"]
    unit = "moduli"

    def track_fp64_moduli(self, k, mode):
        return ozaki_backend.plan(1024, 1024, k, mode=mode).moduli_for_spread(4)

    def track_fp64_moduli_most(self, k, mode):
        return ozaki_backend.plan(1024, 1024, k, mode=mode).moduli_range[1]
