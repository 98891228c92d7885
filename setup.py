"""Build glue that pyproject.toml cannot express: the loop-hook C extension and the
mapping of the top-level kernels/ folder into the package (it ships in the wheel as
``ozaki_backend.kernels``)."""

import os

import numpy
from setuptools import Extension, find_packages, setup

packages = find_packages(include=["ozaki_backend", "ozaki_backend.*"]) + ["ozaki_backend.kernels"]

ext_modules = []
_hook = os.path.join("ozaki_backend", "dispatch", "_loophook.c")
if os.path.exists(_hook):
    ext_modules.append(Extension(
        "ozaki_backend.dispatch._loophook", [_hook],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_22_API_VERSION")],
    ))

setup(packages=packages, package_dir={"ozaki_backend.kernels": "kernels"},
      ext_modules=ext_modules)
