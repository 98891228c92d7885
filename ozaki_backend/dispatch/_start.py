"""Interpreter start-up hook for ``OZAKI_BACKEND=1`` (installed as ``_ozaki_backend_start``).

``pip install`` puts a copy of this file at the top level of site-packages as
``_ozaki_backend_start.py``, next to ``ozaki_backend.pth`` (one line, run by ``site`` at
every interpreter start on Python <= 3.14) and ``ozaki_backend.start`` (its PEP 829
twin for Python 3.15+). The ``.pth`` line only imports this module when the
``OZAKI_BACKEND`` variable is set to a true value, so an unset variable costs nothing.

It must stay importable without the ``ozaki_backend`` package (importing that would
import NumPy at start-up, before the user's script had a chance to set
``OMP_NUM_THREADS`` and friends), so it imports nothing but ``os`` and ``sys``. When
the variable is set it registers a one-shot ``sys.meta_path`` finder that waits for
``import numpy``; right after NumPy has finished importing it calls
:func:`ozaki_backend.dispatch.env.activate_from_environ`, which enables the backend
process-wide from the ``OZAKI_BACKEND_*`` variables.
"""

import os
import sys

_FALSE = ("", "0", "false", "no", "off")


def requested(environ=None) -> bool:
    """True when ``OZAKI_BACKEND`` asks for activation (anything but empty/0/false/no/off)."""
    env = os.environ if environ is None else environ
    return (env.get("OZAKI_BACKEND") or "").strip().lower() not in _FALSE


def _activate():
    try:
        from ozaki_backend.dispatch import env

        env.activate_from_environ()
    except Exception as exc:  # never break the user's `import numpy`
        sys.stderr.write(f"ozaki_backend: OZAKI_BACKEND is set but the backend was not "
                         f"activated: {type(exc).__name__}: {exc}\n")


_deferred = False


def _activate_after_numpy():
    # CuPy imports NumPy first thing: activating then would probe CuPy (the engine's
    # availability, which the package remembers) while CuPy is half imported. Wait for
    # CuPy's import to finish (_cupy_loaded); torch, whose import also brings NumPy in,
    # does not stop the activation (its hook waits for it instead: _torch_loaded).
    global _deferred
    cupy = sys.modules.get("cupy")
    if cupy is not None and getattr(getattr(cupy, "__spec__", None), "_initializing", False):
        _deferred = True
        return
    _activate()


def _cupy_loaded():
    global _deferred
    if _deferred:
        _deferred = False
        _activate()


def _torch_loaded():
    # torch imports NumPy while it is itself importing, so an activation triggered by
    # that import found a half-imported torch: the GPU-array hook registers its kernels
    # now that torch is complete (nothing to do when the backend was not activated).
    hook = sys.modules.get("ozaki_backend.dispatch.torch_hook")
    if hook is not None:
        try:
            hook.library_loaded()
        except Exception as exc:  # never break the user's `import torch`
            sys.stderr.write(f"ozaki_backend: the PyTorch hook was not installed: "
                             f"{type(exc).__name__}: {exc}\n")


class _NumpyWatcher:
    """One-shot meta-path finder: activates the backend right after NumPy is imported
    (``name``/``after`` set otherwise: calls ``after()`` right after that module is).

    It finds NumPy's real spec through the other finders and wraps that spec's loader
    so that activation runs after NumPy's own module code. A plain class rather than
    ``importlib.abc.MetaPathFinder``: importing ``importlib.abc`` costs ~10 ms at start-up.
    """

    name = "numpy"

    def __init__(self, name=None, after=None):
        if name is not None:
            self.name, self.after = name, after

    @staticmethod
    def after():
        _activate_after_numpy()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        self.remove()
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ActivatingLoader(spec.loader, self.after)
        return spec

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class _ActivatingLoader:
    """Delegates to NumPy's loader; activates the backend once NumPy's code has run
    (calls ``after``)."""

    def __init__(self, loader, after=_activate):
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._after()

    def __getattr__(self, name):  # get_resource_reader, is_package, get_filename ...
        return getattr(self._loader, name)


def main():
    """Entry point of the ``.pth`` line and of the ``.start`` file."""
    if not requested():
        return
    if "numpy" in sys.modules:
        _activate()
        return
    if not any(isinstance(f, _NumpyWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _NumpyWatcher())
        for name, after in (("torch", _torch_loaded), ("cupy", _cupy_loaded)):
            if name not in sys.modules:
                sys.meta_path.insert(0, _NumpyWatcher(name, after))
