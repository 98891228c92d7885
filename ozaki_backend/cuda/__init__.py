"""CUDA engine (CuPy + NVRTC kernels from the top-level ``kernels/`` folder).

Nothing here imports CuPy at module import time; :func:`availability` does, on demand.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def availability():
    """``(ok, reason)``: whether the CUDA engine can run in this process, and why."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA install
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"CUDA runtime error ({type(exc).__name__}: {exc})"
    if n < 1:
        return False, "no CUDA device"
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    return True, f"GPU {name} via CuPy {cupy.__version__}"


from .errors import CudaEngineError  # noqa: E402  (CuPy-free)

__all__ = ["availability", "CudaEngineError"]
