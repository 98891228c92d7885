"""Dispatch layer: overhead of interception, and what a mixed workload routes.

All of it is skipped while ``ozaki_backend.enabled`` does not exist. The products here
are small on purpose: below the routing threshold the backend must cost (almost)
nothing, in a scope or outside one.
"""

import numpy as np

from ._common import gaussian, require_dispatch


class TimeDispatchOverhead:
    """Small products that are never routed: the price of the installed hooks."""

    params = [4, 64]
    param_names = ["n"]

    def setup(self, n):
        self.ob = require_dispatch()
        with self.ob.enabled():  # installs the hooks (once per process)
            pass
        self.a, self.b = gaussian((n, n), 1), gaussian((n, n), 2)

    def teardown(self, n):
        ob = getattr(self, "ob", None)  # teardown runs after a skipped setup too
        if ob is not None:
            ob.disable()

    def time_matmul_outside_scope(self, n):
        self.a @ self.b

    def time_matmul_in_scope(self, n):
        with self.ob.enabled():
            self.a @ self.b

    def time_dot_in_scope(self, n):
        with self.ob.enabled():
            np.dot(self.a, self.b)

    def time_matmul_process_wide(self, n):
        self.ob.enable()
        self.a @ self.b
        self.ob.disable()


class TimeScope:
    def setup(self):
        self.ob = require_dispatch()

    def time_enter_exit(self):
        with self.ob.enabled():
            pass


def _mixed_workload(n):
    """Eight calls of which three are eligible for routing (marked), given n >= the floor."""
    import scipy.linalg.blas as blas

    a, b = gaussian((n, n), 11), gaussian((n, n), 12)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    bad = a.copy()
    bad[0, 0] = np.nan
    ints = np.arange(16).reshape(4, 4)
    small = gaussian((4, 4), 1)
    return [
        lambda: small @ small,                  # too small
        lambda: a @ b,                          # eligible
        lambda: a32 @ b32,                      # float32
        lambda: np.dot(a, b),                   # eligible
        lambda: a @ b[:, 0],                    # matrix @ vector
        lambda: ints @ ints,                    # integer
        lambda: blas.dgemm(1.0, a, b),          # eligible
        lambda: bad @ b,                        # NaN: NumPy computes it
    ]


class TrackRouting:
    """Fraction of a mixed workload's calls that the backend computed.

    ``forced``: ``enabled(engine="cpu", min_size=256**3)`` routes every eligible call
    of size >= 256**3 to the CPU engine, on any machine: expected 3/8 = 0.375; a change
    means the eligibility rules (dtypes, shapes, NaN, entry points) changed.
    ``default``: ``enabled()`` with the cost model, n = 2048: 0 without a GPU; on a GPU
    machine it shows what the cost model routes.
    """

    params = ["forced", "default"]
    param_names = ["config"]
    unit = "fraction"
    timeout = 300

    def setup(self, config):
        self.ob = require_dispatch()
        if config == "forced":
            self.scope = lambda: self.ob.enabled(engine="cpu", min_size=256 ** 3)
            self.calls = _mixed_workload(256)
        else:
            self.scope = self.ob.enabled
            self.calls = _mixed_workload(2048)

    def track_routed_fraction(self, config):
        before = self.ob.stats()["routed"]
        with self.scope():
            for call in self.calls:
                call()
        return (self.ob.stats()["routed"] - before) / len(self.calls)
