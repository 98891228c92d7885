"""Whether the fused Hopper product kernel (``kernels/modprod.cu``) can run on a device.

Both the kernel's launcher (:mod:`.modprod`) and the GEMM-path choice (:mod:`.tuning`)
ask; the answer depends on the device and the driver only, so it lives apart from both.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import cupy


@lru_cache(maxsize=None)
def _wgmma_reason(device_id: int) -> str:
    """Empty when the wgmma backend can run on this device, else why not."""
    cc = cupy.cuda.Device(device_id).compute_capability
    if cc != "90":
        return f"compute capability {cc[:-1]}.{cc[-1]} (the fused kernel needs 9.0, Hopper)"
    try:
        # The kernel reads its operands through tensor maps the driver encodes.
        ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    except (OSError, AttributeError) as exc:
        return f"the driver has no cuTensorMapEncodeTiled ({exc})"
    return ""


def wgmma_available() -> bool:
    """Whether the fused Hopper kernel can run on the current device."""
    return not _wgmma_reason(cupy.cuda.runtime.getDevice())


def wgmma_unavailable_reason() -> str:
    """Why the fused Hopper kernel cannot run on the current device ("" if it can)."""
    return _wgmma_reason(cupy.cuda.runtime.getDevice())


__all__ = ["wgmma_available", "wgmma_unavailable_reason"]
