"""Run a function right after a module has been imported, without importing it.

The hooks that patch other libraries (SciPy's ``dgemm``, CuPy's cuBLAS functions,
PyTorch's kernels) must never import those libraries themselves: where the library is
not imported yet, they wait for its import with an :class:`ImportWatcher`. Only the
logger is below it.
"""

from __future__ import annotations

import sys

from .log import logger


class ImportWatcher:
    """One-shot meta-path finder: calls ``on_import(module)`` right after the module
    ``name`` has been imported.

    It finds the real spec through the other finders and wraps that spec's loader, so
    that ``on_import`` runs after the library's own module code; it then removes itself.
    A failure of ``on_import`` is logged, never raised into the user's ``import``.

    Parameters
    ----------
    name : str
        The module's dotted name.
    on_import : callable
        Called with the module once its code has run.
    purpose : str, optional
        What ``on_import`` does, for the warning if it fails (default: "install the
        ``name`` hook").
    """

    def __init__(self, name, on_import, purpose=None):
        self.name = name
        self.on_import = on_import
        self.purpose = purpose or f"install the {name} hook"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or getattr(finder, "find_spec", None) is None:
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _CallingLoader(spec.loader, self)
        return spec

    def insert(self) -> None:
        """Put the watcher first in ``sys.meta_path`` (once)."""
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        """Take the watcher out of ``sys.meta_path`` (nothing if it is not there)."""
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class _CallingLoader:
    def __init__(self, loader, watcher):
        self._loader, self._watcher = loader, watcher

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._watcher.remove()
        try:
            self._watcher.on_import(module)
        except Exception as exc:  # never break the user's import
            logger().warning("could not %s: %r", self._watcher.purpose, exc)

    def __getattr__(self, name):
        return getattr(self._loader, name)
