"""The one kernel loader: CUDA C++ from ``kernels/`` compiled by NVRTC via ``cupy.RawModule``.

* Sources are found through :mod:`importlib.resources` as the package
  ``ozaki_backend.kernels`` (the top-level ``kernels/`` folder ships in the wheel
  under that name, and ``setup.py`` maps it for editable installs); a plain checkout on
  ``PYTHONPATH`` falls back to ``<checkout>/kernels``.
* ``#include "x.cuh"`` lines are inlined here (NVRTC has no include path to our files),
  each file wrapped in ``#line`` markers, so a compile error names ``kernels/x.cu`` and
  its real line.
* Options: ``--std=c++17`` and any ``-D`` defines. The architecture option
  ``-arch=sm_XY`` is the device's compute capability; CuPy appends exactly that flag to
  every NVRTC compilation itself (``cupy.cuda.compiler``), so it is not passed twice.
  It is part of the cache key all the same.
* Compiled modules are cached per (device, compute capability, source hash, options),
  and CuPy additionally caches the binaries on disk. A failed compilation is not cached
  and raises :class:`~ozaki_backend.cuda.errors.CudaEngineError` with NVRTC's log.
* Kernel arguments must be given with explicit NumPy scalar types (``np.int32``,
  ``np.int64``, ``np.float64``, ``np.uint64``) matching the C signature: CuPy passes
  Python ints as 64-bit, which would silently shift every later argument.
"""

from __future__ import annotations

import hashlib
import re
import threading
from functools import lru_cache
from importlib import resources
from pathlib import Path

from .errors import CudaEngineError

OPTIONS = ("--std=c++17",)

_lock = threading.Lock()
_modules: dict = {}
_functions: dict = {}
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


@lru_cache(maxsize=None)
def _kernel_dir():
    try:
        root = resources.files("ozaki_backend.kernels")
        if root.joinpath("crt.cu").is_file():
            return root
    except ModuleNotFoundError:
        pass
    here = Path(__file__).resolve().parents[2] / "kernels"
    if (here / "crt.cu").is_file():
        return here
    raise CudaEngineError("CUDA kernel sources not found: neither the package "
                          "ozaki_backend.kernels nor <checkout>/kernels holds crt.cu")


@lru_cache(maxsize=None)
def read_source(name: str) -> str:
    """Text of ``kernels/<name>`` with its includes inlined between ``#line`` markers."""
    text = _kernel_dir().joinpath(name).read_text()
    out = [f'#line 1 "kernels/{name}"']
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _INCLUDE.match(line)
        if m:
            out.append(read_source(m.group(1)))
            out.append(f'#line {lineno + 1} "kernels/{name}"')
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def device_arch() -> str:
    """``sm_XY`` of the current device."""
    import cupy

    return "sm_" + cupy.cuda.Device().compute_capability


def get_module(name: str, *, prelude: str = "", defines=()):
    """Compiled :class:`cupy.RawModule` of ``kernels/<name>`` (cached).

    Parameters
    ----------
    name : str
        File name in ``kernels/``.
    prelude : str
        Generated code placed before the file (e.g. per-moduli-count constants).
    defines : sequence of str
        Extra ``NAME=VALUE`` preprocessor definitions.
    """
    import cupy

    code = prelude + read_source(name)
    options = OPTIONS + tuple(f"-D{d}" for d in defines)
    dev = cupy.cuda.Device()
    key = (dev.id, dev.compute_capability, name,
           hashlib.sha256(code.encode()).hexdigest(), options)
    mod = _modules.get(key)
    if mod is not None:
        return mod
    with _lock:
        mod = _modules.get(key)
        if mod is not None:
            return mod
        mod = cupy.RawModule(code=code, options=options)
        try:
            mod.compile()
        except cupy.cuda.compiler.CompileException as exc:
            raise CudaEngineError(
                f"NVRTC failed to compile kernels/{name} for {device_arch()}:\n{exc}") from exc
        _modules[key] = mod
        return mod


def _compile_for_arch(code: str, options, arch: str, name: str):
    """A :class:`cupy.cuda.function.Module` compiled by NVRTC for an explicit target.

    CuPy's own compiler path appends ``-arch=sm_XY`` from the compute capability and
    cannot name an "a" target (``sm_90a``: wgmma, setmaxnreg), so these kernels go
    through NVRTC directly. They are cached in memory only.
    """
    from cupy.cuda import function
    from cupy_backends.cuda.libs import nvrtc

    prog = nvrtc.createProgram(code, f"kernels/{name}", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(options) + [f"--gpu-architecture={arch}",
                                                        "--device-as-default-execution-space"])
        except nvrtc.NVRTCError as exc:
            raise CudaEngineError(f"NVRTC failed to compile kernels/{name} for {arch}:\n"
                                  f"{nvrtc.getProgramLog(prog)}") from exc
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    mod = function.Module()
    mod.load(cubin)
    return mod


def get_function(name: str, function: str, *, prelude: str = "", defines=(), arch=None):
    """A kernel (``cupy.RawKernel``) of ``kernels/<name>`` (cached with its module).

    The fast path is one dictionary lookup (launch overhead matters: a product issues
    a few dozen launches), keyed by the device and the exact inputs of the source.
    ``arch`` (e.g. ``"sm_90a"``) compiles for that target through NVRTC directly and
    returns a :class:`cupy.cuda.function.Function` (same call signature).
    """
    import cupy

    fkey = (cupy.cuda.runtime.getDevice(), name, prelude, tuple(defines), function, arch)
    fn = _functions.get(fkey)
    if fn is None:
        if arch is None:
            mod = get_module(name, prelude=prelude, defines=defines)
        else:
            code = prelude + read_source(name)
            options = OPTIONS + tuple(f"-D{d}" for d in defines)
            with _lock:
                mod = _compile_for_arch(code, options, arch, name)
        try:
            fn = mod.get_function(function)
        except Exception as exc:
            raise CudaEngineError(f"kernels/{name} has no kernel {function!r}: {exc}") from exc
        _functions[fkey] = fn
    return fn


def clear_cache() -> None:
    """Forget compiled modules (tests; CuPy's on-disk cache is untouched)."""
    with _lock:
        _modules.clear()
        _functions.clear()
