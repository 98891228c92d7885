"""The CuPy interception is on unless ``OZAKI_BACKEND_CUPY`` turns it off: by default
the first scope's install waits for CuPy's cuBLAS module (or patches it); with
``OZAKI_BACKEND_CUPY=0`` it installs no hook and does not even watch for the module, so
CuPy code runs untouched. Each case runs in a fresh
process, since installing is once per process."""

import os
import subprocess
import sys

import pytest

CODE = """
from ozaki_backend.dispatch import cupy_hook, patches
patches.install()
print(cupy_hook._watcher is not None or cupy_hook.installed())
"""


def _hooked(value):
    env = {k: v for k, v in os.environ.items() if k != "OZAKI_BACKEND_CUPY"}
    if value is not None:
        env["OZAKI_BACKEND_CUPY"] = value
    res = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize("value, hooked", [
    (None, True), ("", True), ("1", True), ("yes", True),
    ("0", False), ("no", False), (" OFF ", False), ("False", False),
])
def test_the_cupy_hook_is_installed_unless_turned_off(value, hooked):
    assert _hooked(value) is hooked
