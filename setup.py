"""Build glue that pyproject.toml cannot express: the loop-hook C extension, the
mapping of the top-level kernels/ folder into the package (it ships in the wheel as
``ozaki_backend.kernels``), and the start-up hook files that must sit at the top level
of site-packages (a ``.pth`` file is only read there)."""

import os
import sys

import numpy
from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

packages = find_packages(include=["ozaki_backend", "ozaki_backend.*"]) + ["ozaki_backend.kernels"]

ext_modules = []
_hook_dir = os.path.join("ozaki_backend", "dispatch")
_hook = os.path.join(_hook_dir, "_loophook.c")
if os.path.exists(_hook):
    # One extension, two hooks sharing the lock-free routing state (_hookstate.h): the
    # matmul inner-loop hook and the BLAS call-site hook (GOT patching, Linux ELF; it
    # compiles to a stub elsewhere and says so at run time).
    ext_modules.append(Extension(
        "ozaki_backend.dispatch._loophook", [_hook, os.path.join(_hook_dir, "_blashook.c"),
         os.path.join(_hook_dir, "_dothook.c")],
        include_dirs=[numpy.get_include()],
        depends=[os.path.join(_hook_dir, "_hookstate.h")],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_22_API_VERSION")],
        libraries=["dl"] if sys.platform.startswith("linux") else [],
    ))

# OZAKI_BACKEND=1 start-up hook (ozaki_backend/dispatch/env.py explains it): a one-line
# .pth (Python <= 3.14), its PEP 829 .start twin (3.15+), and the tiny top-level module
# both call (source: ozaki_backend/dispatch/_start.py). All three are installed at the
# top of site-packages. The two one-liners are written from here rather than copied
# from data files, so that a wheel built from the sdist has them too.
_PTH_LINE = ('import os; (os.environ.get("OZAKI_BACKEND") or "").strip().lower() in '
             '("", "0", "false", "no", "off") or __import__("_ozaki_backend_start").main()\n')
_START_LINE = "_ozaki_backend_start:main\n"
_START_MODULE = os.path.join("ozaki_backend", "dispatch", "_start.py")


class build_py_with_startup(build_py):
    """build_py that also places the start-up hook files at the wheel's top level.

    A regular build puts them at the root of build_lib (the wheel root = site-packages).
    An editable install (PEP 660) does not copy build_lib into its wheel; there the
    files go straight into the unpacked editable wheel (the install command's
    install_lib), so ``pip install -e .`` installs them too.
    """

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            root = self.get_finalized_command("install").install_lib
        else:
            root = self.build_lib
        self.mkpath(root)
        outputs = []
        for name, text in (("ozaki_backend.pth", _PTH_LINE), ("ozaki_backend.start", _START_LINE)):
            dst = os.path.join(root, name)
            with open(dst, "w", encoding="utf-8") as f:
                f.write(text)
            outputs.append(dst)
        dst = os.path.join(root, "_ozaki_backend_start.py")
        self.copy_file(_START_MODULE, dst, preserve_mode=False)
        outputs.append(dst)
        self._startup_outputs = outputs

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + list(getattr(self, "_startup_outputs", []))


setup(packages=packages, package_dir={"ozaki_backend.kernels": "kernels"},
      ext_modules=ext_modules, cmdclass={"build_py": build_py_with_startup})
