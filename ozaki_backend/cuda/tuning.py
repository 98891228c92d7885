"""Which GEMM path the CUDA engine takes for a shape: a recorded measurement.

Two paths compute the same bits (``docs/spec.md`` §5):

``"cublas"``
    N ``cublasGemmEx`` INT8 products into int32 planes, then the CRT pass folds them;
``"wgmma"``
    the fused Hopper kernel (``kernels/modprod.cu``): products reduced mod p on the
    accumulators, one byte per element and modulus, then the CRT pass.

The choice per shape comes from the tuning tables (``tuning_files``: the package's
``_data/gemm_tuning.json`` and the user's cache), written by
``python -m ozaki_backend tune`` on the GPU it describes: for each measured shape the
whole product was timed both ways (and both wgmma tile widths), on random data, and
the fastest recorded. A shape takes the choice of the nearest measured one (in log
m·n and log k). A device with no table of its own uses the table of a device with the
same compute capability, else the cuBLAS path. ``OZAKI_BACKEND_CUDA_PATH=cublas|wgmma``
(optionally ``wgmma:128``/``wgmma:256``) forces a path.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache

import cupy

from .capability import wgmma_available, wgmma_unavailable_reason
from .tuning_files import table_text

PATHS = ("cublas", "wgmma")


@lru_cache(maxsize=None)
def _table_text():
    return table_text()


def clear_cache():
    """Drop the cached table, so that the next product reads the file again (for the
    writer of the table, :func:`ozaki_backend.tune.write_table`)."""
    _table_text.cache_clear()
    _entries_for.cache_clear()
    _choice.cache_clear()


@lru_cache(maxsize=None)
def device_name(device_id: int) -> str:
    """The GPU's name (cached: the property query takes a noticeable fraction of a
    millisecond, and every product asks)."""
    name = cupy.cuda.runtime.getDeviceProperties(device_id)["name"]
    return name.decode() if isinstance(name, bytes) else name


@lru_cache(maxsize=None)
def _entries_for(device_id: int, text: str):
    name = device_name(device_id)
    devices = (json.loads(text) if text else {"devices": {}})["devices"]
    if name in devices:
        return name, tuple(devices[name]["entries"])
    cc = cupy.cuda.Device(device_id).compute_capability
    for other, rec in devices.items():
        if rec.get("compute_capability") == cc:
            return other, tuple(rec["entries"])
    return None, ()


def _device_entries():
    """``(device name used, entries)`` for the current GPU, or ``(None, ())``."""
    return _entries_for(cupy.cuda.runtime.getDevice(), _table_text())


def _forced():
    v = os.environ.get("OZAKI_BACKEND_CUDA_PATH", "").strip()
    if not v:
        return None
    path, _, width = v.partition(":")
    if path not in PATHS or (width and width not in ("128", "256")):
        raise ValueError(f"OZAKI_BACKEND_CUDA_PATH must be cublas, wgmma, wgmma:128 or "
                         f"wgmma:256; got {v!r}")
    return path, int(width) if width else None


def _nearest(entries, m, n, k):
    def dist(e):
        return (abs(math.log2(max(e["m"] * e["n"], 1)) - math.log2(max(m * n, 1)))
                + abs(math.log2(max(e["k"], 1)) - math.log2(max(k, 1))))
    return min(entries, key=dist) if entries else None


def _fused_width(entry) -> int:
    """The faster fused tile width measured for a table entry (256 if none was)."""
    fused = {int(key.partition(":")[2]): t for key, t in entry["seconds"].items()
             if key.startswith("wgmma:")}
    return min(fused, key=fused.get) if fused else 256


def choice(m, n, k, n_moduli):
    """``(path, width, reason)`` for an ``m x k x n`` product with ``n_moduli`` moduli.

    ``width`` is the fused kernel's tile width for this shape (used when ``path`` is
    ``"wgmma"``).
    """
    # Cached per shape, device, forcing variable and table: the answer depends on
    # nothing else, and the search took ~0.1 ms of host time before every product's
    # GEMMs (4096^3 on the H200: 3 % of the call).
    return _choice(cupy.cuda.runtime.getDevice(), m, n, k, n_moduli,
                   os.environ.get("OZAKI_BACKEND_CUDA_PATH", ""), _table_text())


@lru_cache(maxsize=1024)
def _choice(_device, m, n, k, n_moduli, _forced_env, _text):
    forced = _forced()
    if forced is not None:
        path, width = forced
        if path == "wgmma" and not wgmma_available():
            raise ValueError("OZAKI_BACKEND_CUDA_PATH=wgmma, but "
                             + wgmma_unavailable_reason())
        if width is None:
            e = _nearest(_device_entries()[1], m, n, k)
            width = _fused_width(e) if e else 256
        return path, width, "forced by OZAKI_BACKEND_CUDA_PATH"
    if not wgmma_available():
        return "cublas", 256, "fused kernel unavailable: " + wgmma_unavailable_reason()
    dev, entries = _device_entries()
    e = _nearest(entries, m, n, k)
    if e is None:
        return "cublas", 256, "no tuning table for this GPU"
    return (e["choice"], _fused_width(e),
            f"tuning table ({dev}): nearest measured {e['m']}x{e['k']}x{e['n']}, "
            f"{e['choice']} {e['seconds'][e['choice_key']] * 1e3:.2f} ms")


def modprod_choice(rows, cols, kc, n_items):
    """``(backend, width)`` for :func:`~ozaki_backend.cuda.modprod.mod_products`: the
    fused kernel wherever it runs (callers of ``mod_products`` want the residues, which
    the cuBLAS backend only produces with an extra reduction pass per product), at the
    tile width measured fastest for the nearest shape."""
    path, width, _ = choice(rows, cols, kc, n_items)
    forced = _forced()
    if forced is not None:
        return path, width
    return ("wgmma" if wgmma_available() else "cublas"), width
