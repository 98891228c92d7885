"""ozaki_backend: FP64 matrix products from INT8 tensor cores (Ozaki scheme II + CRT).

Importing this package is cheap: it imports NumPy, but never CuPy, SciPy or a CUDA
context; the CUDA engine loads on first use.

Public API
----------
matmul(a, b, *, precision, bits, moduli, mode, scheme, engine, out)
    Explicit emulated product with NumPy ``matmul`` semantics.
plan(m, n, k, **options)
    The printable :class:`~ozaki_backend.plan.Plan` for a shape (``ozaki_backend.plan``
    is also the module that defines it; calling it builds a plan).
enabled(**config), disabled(), enable(**config), disable()
    Route existing NumPy/SciPy code through the backend (see the dispatch guide).
stats(), reset_stats(), explain(...)
    What was routed and why.
wrap(x), unwrap(x)
    Per-array opt-in through NumPy's protocols.

Layers, bottom up (``docs/architecture.md``): ``spec`` (constants and rules) →
``plan``, ``semantics`` → the engines (``reference``, ``cuda``) → ``registry`` →
``_api`` → ``dispatch`` → tools (``bench``, ``tune``, ``demo``).
"""

from . import plan
from ._api import matmul
from ._version import __version__
from ._warnings import NativeFallbackWarning
from .dispatch import (disable, disabled, enable, enabled, explain, reset_stats, stats,
                       unwrap, wrap)
from .plan import Plan

__all__ = ["matmul", "plan", "Plan", "NativeFallbackWarning", "__version__", "enabled",
           "disabled", "enable", "disable", "stats", "reset_stats", "explain", "wrap",
           "unwrap"]


def __getattr__(name):
    # `ozaki_backend.testing` is imported on demand (it pulls in the exact oracle).
    if name == "testing":
        import importlib

        return importlib.import_module(".testing", __name__)
    raise AttributeError(f"module 'ozaki_backend' has no attribute {name!r}")
