"""``OZAKI_BACKEND=1`` with a GPU-array library imported first (no GPU needed): CuPy
and torch import NumPy at the start of their own import, which is when the start-up
hook activates the backend. For CuPy the activation waits until CuPy's import is done
(activating earlier probes a half-imported CuPy, and the engine would remember it as
unavailable); a stand-in ``cupy`` package records what it saw."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_CUPY = """\
import sys
import numpy
SEEN_DURING_IMPORT = "ozaki_backend" in sys.modules
"""


def test_activation_waits_for_cupys_import_to_finish(tmp_path):
    if importlib.util.find_spec("_ozaki_backend_start") is None:
        pytest.skip("the start-up hook (.pth) is not installed here")
    hook, fake = tmp_path / "hook", tmp_path / "fake"
    (fake / "cupy").mkdir(parents=True)
    hook.mkdir()
    (fake / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    # this checkout's start-up module first on the path (the .pth imports it by name)
    (hook / "_ozaki_backend_start.py").write_text(
        (REPO / "ozaki_backend" / "dispatch" / "_start.py").read_text())
    code = ("import cupy\n"
            "from ozaki_backend.dispatch import config\n"
            "print(cupy.SEEN_DURING_IMPORT, config.ANY_ACTIVE)\n")
    env = dict(os.environ, OZAKI_BACKEND="1",
               PYTHONPATH=os.pathsep.join([str(hook), str(fake), str(REPO)]))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True"], res.stdout + res.stderr
