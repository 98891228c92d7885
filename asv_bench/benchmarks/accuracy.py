"""Accuracy: max relative error against the exact product, and the moduli count chosen.

Operands are the phi test matrices of ``ozaki_backend.testing.phi_matrix`` (phi = -1:
standard normal; larger phi spreads the exponents of each row and column wider), at
fixed seeds, m = n = k = 128, and one operand family that scales along k
(``ozaki_backend.testing.family_operands("kscaled2_30", ...)``). The reference is the
exact product rounded once to float64 (``ozaki_backend.testing``). The engine is the
CPU reference engine, which the spec makes bitwise identical to the CUDA engine, so
these numbers hold for both.

``precision="fp64"`` picks the moduli count per product from its error certificate
(``docs/spec.md`` §10), so the count depends on the data: :class:`TrackModuliChoice`
records it for standard normal and phi = 4 operands.

Skipped while ``ozaki_backend.testing`` or the CPU engine is absent.
"""

import numpy as np

import ozaki_backend

from ._common import PHIS, SEED, require_cpu_engine, require_testing

SIZE = 128
#: m = n of the moduli-count benchmark (m n = 2**16: the certificate's ordinary target).
SIZE_MODULI = 256


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


class TrackAccuracyKScaled:
    """``precision="fp64"`` on operands scaled along k (``A = X D``, ``B = D^-1 Y``,
    ``D = diag(2^e)``, ``e`` uniform in [-30, 30]; m = n = 128, k = 1024), both modes,
    and NumPy's native product on the same operands (``impl="numpy"``)."""

    params = ["accurate", "fast", "numpy"]
    param_names = ["impl"]
    unit = "relative error"
    timeout = 300

    def setup(self, impl):
        testing = require_testing("family_operands", "relative_errors")
        if impl != "numpy":
            require_cpu_engine()
        self.a, self.b = testing.family_operands("kscaled2_30", 128, 1024, 128,
                                                 np.random.default_rng(SEED))
        self.exact = testing.exact_matmul(self.a, self.b)

    def track_max_rel_err(self, impl):
        if impl == "numpy":
            c = np.matmul(self.a, self.b)
        else:
            c = ozaki_backend.matmul(self.a, self.b, mode=impl, engine="cpu")
        return float(require_testing().relative_errors(c, self.exact).max())


class TrackModuliChoice:
    """How many moduli ``precision="fp64"`` picks for a reduction length k (m = n = 256).

    ``track_fp64_moduli``: the count the certificate chooses for standard normal
    (``data="normal"``) and phi = 4 operands (``Plan.moduli_for``, computed by the CPU
    engine). 20 also when some element is not certified a priori by any count (the
    product is then tested a posteriori, and may take the residual pass or the native
    GEMM); 21 stands for "none" should ``moduli_for`` return None.
    """

    params = ([128, 1024, 4096, 16384], ["accurate", "fast"], ["normal", "phi4"])
    param_names = ["k", "mode", "data"]
    unit = "moduli"
    timeout = 300

    def setup(self, k, mode, data):
        require_cpu_engine()
        testing = require_testing()
        rng = np.random.default_rng(SEED)
        phi = -1.0 if data == "normal" else 4.0
        self.a = testing.phi_matrix((SIZE_MODULI, k), phi, rng)
        self.b = testing.phi_matrix((k, SIZE_MODULI), phi, rng)
        self.plan = ozaki_backend.plan(SIZE_MODULI, SIZE_MODULI, k, mode=mode,
                                       engine="cpu")

    def track_fp64_moduli(self, k, mode, data):
        n = self.plan.moduli_for(self.a, self.b)
        return self.plan.moduli_range[1] + 1 if n is None else n


class TrackExpectedModuli:
    """The count the plan expects for ordinary data at a reduction length k (m = n = 256;
    ``Plan.expected_moduli``, the cost model's estimate). Needs no operands: its own
    class, so that the quick run does not draw TrackModuliChoice's sixteen operand sets
    again for it."""

    params = ([128, 1024, 4096, 16384], ["accurate", "fast"])
    param_names = ["k", "mode"]
    unit = "moduli"

    def setup(self, k, mode):
        self.plan = ozaki_backend.plan(SIZE_MODULI, SIZE_MODULI, k, mode=mode,
                                       engine="cpu")

    def track_expected_moduli(self, k, mode):
        return self.plan.expected_moduli
