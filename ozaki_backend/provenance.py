"""Where, with what and how a measurement was made: the shared part of the tools.

``python -m ozaki_backend bench`` and ``tune`` and ``scripts/measure.py``
write files that say which machine and which checkout produced them
(``docs/data/README.md``), and time device work the same way. This module is that
common part; it belongs to the tools, and nothing in the library core imports it.

Functions
---------
machine(name, gpu=None, cupy=None, cuda_runtime=None)
    The ``machine`` object of the benchmark schema for this host.
gpu_machine(name=None), cpu_machine(name=None)
    :func:`machine` for this host with its current CuPy GPU, or with no GPU used.
commit(paths)
    The checkout's short commit id, marked when its files differ from it.
median_device_time(fn, reps), median_wall_time(fn, reps, sync)
    Median time of repeated calls after one warm-up (CUDA events / wall clock).
"""

from __future__ import annotations

import os
import platform
import subprocess
import time

import numpy as np

__all__ = ["machine", "gpu_machine", "cpu_machine", "commit", "median_device_time",
           "median_wall_time"]

#: The directory holding the package: the root of a source checkout, if this is one.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What a measurement of the package depends on: the Python sources and the kernels.
CODE_PATHS = ("ozaki_backend", "kernels")


# ----------------------------------------------------------------------------- machine

def _cpu_model():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):  # not Linux, or no model line
        pass
    return cpu


def _blas():
    try:
        b = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{b.get('name')} {b.get('version')}"
    except Exception:  # noqa: BLE001 - informational only; unknown fields are null
        return None


def machine(name, *, gpu=None, cupy=None, cuda_runtime=None):
    """The ``machine`` object of ``docs/data/README.md`` for this host.

    Parameters
    ----------
    name : str
        Short human name (shown on the docs' plots).
    gpu : str or None
        GPU name; None when no GPU was used.
    cupy : str or None
        CuPy version.
    cuda_runtime : int or None
        ``cupy.cuda.runtime.runtimeGetVersion()``; the key is left out when None.

    Returns
    -------
    dict
        ``name``, ``cpu``, ``cpu_count``, ``gpu``, ``os``, ``python``, ``numpy``,
        ``blas`` (None when NumPy does not say), ``cupy`` and possibly
        ``cuda_runtime``.
    """
    out = {"name": name, "cpu": _cpu_model(), "cpu_count": os.cpu_count(), "gpu": gpu,
           "os": f"{platform.system()} {platform.release()}",
           "python": platform.python_version(), "numpy": np.__version__, "blas": _blas(),
           "cupy": cupy}
    if cuda_runtime is not None:
        out["cuda_runtime"] = cuda_runtime
    return out


def gpu_machine(name=None):
    """:func:`machine` for this host and CuPy's current GPU.

    ``name`` defaults to ``"<GPU> (<host name>)"``.
    """
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    gpu = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return machine(name or f"{gpu} ({platform.node() or 'unknown host'})", gpu=gpu,
                   cupy=cp.__version__, cuda_runtime=cp.cuda.runtime.runtimeGetVersion())


def cpu_machine(name=None):
    """:func:`machine` for this host with no GPU used.

    ``name`` defaults to ``"<logical CPUs>-core <CPU model>"``.
    """
    return machine(name or f"{os.cpu_count()}-core {_cpu_model()}")


# ----------------------------------------------------------------------------- commit

def commit(paths=CODE_PATHS):
    """``git rev-parse --short HEAD`` of the checkout this package runs from.

    Parameters
    ----------
    paths : sequence of str
        The checkout's paths (relative to its root) the measurement depends on: when
        any of them differs from the commit, ``+uncommitted changes`` is appended.

    Returns
    -------
    str or None
        None outside a git checkout (an installed package).
    """
    try:
        head = subprocess.run(["git", "-C", _ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", _ROOT, "status", "--porcelain", "--", *paths],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


# ----------------------------------------------------------------------------- timers

def device_times(fn, reps, warmup=1):
    """Seconds of each of ``reps`` calls of ``fn`` after ``warmup`` calls, by CUDA
    events on the current stream (CuPy)."""
    import cupy as cp

    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ts.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return ts


def median_device_time(fn, reps, warmup=1):
    """Median of :func:`device_times`."""
    return float(np.median(device_times(fn, reps, warmup)))


def wall_times(fn, calls, sync=None):
    """Wall seconds of each of ``calls`` calls of ``fn``, no warm-up (``sync`` waits
    before the first call and after each: a cold call's host share counts)."""
    if sync:
        sync()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        ts.append(time.perf_counter() - t0)
    return ts


def median_wall_time(fn, reps, sync=None):
    """Median wall time of ``reps`` calls of ``fn`` after one warm-up (``sync`` waits)."""
    fn()
    return float(np.median(wall_times(fn, reps, sync)))
