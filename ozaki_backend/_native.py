"""The native (un-emulated) NumPy paths, reachable even while interception is active.

Anything inside the backend that wants NumPy's own result (fallbacks, non-finite
operands, unsupported dtypes) calls through here, so that the interception layer can
recognise it and not route it back into the backend.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

#: True while the backend itself is running native code; the interception layer
#: never routes a call made while this is set.
SUSPENDED: ContextVar[bool] = ContextVar("ozaki_backend_suspended", default=False)


@contextmanager
def suspended():
    """Run the body with interception suspended in this context."""
    token = SUSPENDED.set(True)
    try:
        yield
    finally:
        SUSPENDED.reset(token)


def matmul(a, b, out=None):
    """NumPy's own ``matmul`` (never routed)."""
    import numpy as np

    with suspended():
        if out is None:
            return np.matmul(a, b)
        return np.matmul(a, b, out=out)
