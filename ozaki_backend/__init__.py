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
    What was routed and why (``print(stats())`` is a table).
info()
    Version, engines and their availability, configuration, hooks installed (a dict).
FallbackWarning, NativeFallbackWarning, ConfigurationWarning, EngineUnavailableError
    A product computed natively because something failed; an invalid
    ``OZAKI_BACKEND*`` variable; ``engine="cuda"`` where it cannot run.
wrap(x), unwrap(x)
    Per-array opt-in through NumPy's protocols.

Layers, bottom up (``docs/architecture.md``): ``spec`` (constants and rules) →
``plan``, ``semantics`` → the engines (``reference``, ``cuda``) → ``registry`` →
``_api`` → ``dispatch`` → tools (``bench``, ``tune``, ``demo``).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # To a type checker ``ozaki_backend.plan`` is the factory it is called as (a module
    # is not callable to it); at run time it is the module, made callable
    # (ozaki_backend/plan.py, _CallableModule), so ``import ozaki_backend.plan`` works.
    from .plan import plan as plan
else:
    from . import plan
from ._api import matmul, warm_up
from ._version import __version__
from ._warnings import (ConfigurationWarning, EngineUnavailableError, FallbackWarning,
                        NativeFallbackWarning)
from .dispatch import (disable, disabled, enable, enabled, explain, info, reset_stats,
                       stats, unwrap, wrap)
from .plan import Plan

__all__ = ["matmul", "plan", "Plan", "FallbackWarning", "NativeFallbackWarning",
           "ConfigurationWarning", "EngineUnavailableError", "__version__", "enabled",
           "disabled", "enable", "disable", "stats", "reset_stats", "explain", "info",
           "wrap", "unwrap", "warm_up"]


def _check_environment():
    # Only when some OZAKI_BACKEND* variable is set (nothing is imported otherwise):
    # report unknown names and invalid values, and honour OZAKI_BACKEND_LOG.
    import os

    if any(k.startswith("OZAKI_BACKEND") for k in os.environ):
        from .dispatch import env

        env.check_at_import()


_check_environment()


def __getattr__(name):
    # `ozaki_backend.testing` is imported on demand (it pulls in the exact oracle).
    if name == "testing":
        import importlib

        return importlib.import_module(".testing", __name__)
    raise AttributeError(f"module 'ozaki_backend' has no attribute {name!r}")
