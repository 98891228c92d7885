"""Shared helpers for the asv suite: fixed-seed inputs and lazy capability checks.

Every benchmark builds its inputs in ``setup`` from the seeds below, so two runs (two
commits, two machines) multiply exactly the same matrices. A benchmark whose engine is
not available here raises ``NotImplementedError`` in ``setup``, which asv records as
"skipped" rather than failed.

Nothing here imports CuPy or ``ozaki_backend.testing`` at import time: ``asv check``
must pass on a machine without a GPU, and while a part of the package is still absent.
"""

import numpy as np

import ozaki_backend

#: Seed of every operand in the suite (A from SEED; B from SEED + 1, or drawn after A
#: from the same generator for the phi matrices).
SEED = 20260101

#: The phi values of the accuracy suite (phi = -1 means standard normal entries;
#: larger phi widens the exponent range of each row and column).
PHIS = (-1.0, 0.5, 1.0, 2.0, 4.0)


def gaussian(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def operands(m, n, k, seed=SEED):
    """Standard-normal ``(m, k)`` and ``(k, n)`` float64 operands."""
    return gaussian((m, k), seed), gaussian((k, n), seed + 1)


def require_cpu_engine():
    """Skip unless ``matmul(engine="cpu")`` works in this checkout."""
    try:
        from ozaki_backend.reference import pipeline  # noqa: F401

        ozaki_backend.matmul(np.eye(2), np.eye(2), engine="cpu")
    except (ImportError, NotImplementedError, AttributeError) as exc:
        raise NotImplementedError(f"CPU engine unavailable: {exc}") from None


def require_gpu(engine=True):
    """Return the ``cupy`` module, or skip without CuPy and a GPU (and, when ``engine``,
    without the CUDA engine in this checkout)."""
    try:
        from ozaki_backend.cuda import availability
    except ImportError as exc:
        raise NotImplementedError(f"no CUDA support in this checkout: {exc}") from None
    ok, why = availability()
    if not ok:
        raise NotImplementedError(why)
    if engine:
        try:
            from ozaki_backend.cuda import engine as _engine  # noqa: F401
        except ImportError as exc:
            raise NotImplementedError(f"CUDA engine not in this checkout: {exc}") from None
    import cupy

    return cupy


def require_testing(*extra):
    """Return ``ozaki_backend.testing`` (phi matrices, exact products), or skip; also
    skip when one of the ``extra`` function names is missing from it."""
    try:
        testing = ozaki_backend.testing
    except (ImportError, AttributeError) as exc:
        raise NotImplementedError(f"ozaki_backend.testing unavailable: {exc}") from None
    for name in ("phi_matrix", "exact_matmul", "max_relative_error") + extra:
        if not hasattr(testing, name):
            raise NotImplementedError(f"ozaki_backend.testing has no {name}()")
    return testing


def require_dispatch():
    """Skip unless the dispatch layer (``enabled``/``disabled``/``stats``) is present."""
    if not hasattr(ozaki_backend, "enabled"):
        raise NotImplementedError("dispatch layer (ozaki_backend.enabled) not present")
    return ozaki_backend
