"""ozaki_backend: FP64 matrix products from INT8 tensor cores (Ozaki scheme II + CRT).

Importing this package is cheap: it imports NumPy, but never CuPy, SciPy or a CUDA
context; the CUDA engine loads on first use.

Public API
----------
matmul(a, b, *, precision, bits, moduli, mode, scheme, engine, out)
    Explicit emulated product with NumPy ``matmul`` semantics.
plan(m, n, k, **options)
    The printable :class:`~ozaki_backend.plan.Plan` for a shape.
enabled(**config), disabled(), enable(**config), disable()
    Route existing NumPy/SciPy code through the backend (see the dispatch guide).
stats(), reset_stats(), explain(...)
    What was routed and why.
wrap(x), unwrap(x)
    Per-array opt-in through NumPy's protocols.
"""

from ._api import matmul, plan
from .plan import Plan

__version__ = "0.1.0"

__all__ = ["matmul", "plan", "Plan", "__version__"]

# The dispatch layer (scopes, patches, stats) is optional at import time: it may be
# absent while it is being built, and it must never make `import ozaki_backend` fail.
try:  # pragma: no cover - exercised by the dispatch tests
    from .dispatch import (disable, disabled, enable, enabled, explain,  # noqa: F401
                           reset_stats, stats, unwrap, wrap)

    __all__ += ["enabled", "disabled", "enable", "disable", "stats", "reset_stats",
                "explain", "wrap", "unwrap"]
except ImportError:  # pragma: no cover
    pass


def __getattr__(name):
    # `ozaki_backend.testing` is imported on demand (it pulls in the exact oracle).
    if name == "testing":
        import importlib

        return importlib.import_module(".testing", __name__)
    raise AttributeError(f"module 'ozaki_backend' has no attribute {name!r}")
