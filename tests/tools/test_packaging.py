"""The built wheel carries what the package needs at run time (not just the checkout)."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = sorted(p.name for p in (ROOT / "kernels").iterdir() if p.suffix in (".cu", ".cuh"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the build requirements are the test environment's own, so the
    # test needs no network and checks this checkout's setup.py as it is.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True)
    (whl,) = out.glob("ozaki_backend-*.whl")
    return whl


def test_kernels_and_data_are_inside_the_wheel(wheel):
    assert KERNELS, "no kernel sources found in kernels/"
    names = set(zipfile.ZipFile(wheel).namelist())
    for k in KERNELS:
        assert f"ozaki_backend/kernels/{k}" in names, k
    assert "ozaki_backend/_data/gemm_tuning.json" in names
    # the start-up hook must sit at the top level of site-packages
    assert "ozaki_backend.pth" in names and "_ozaki_backend_start.py" in names
    assert any(n.startswith("ozaki_backend/dispatch/_loophook") for n in names)


def test_installed_wheel_reads_kernels_from_the_package(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--target", str(target), str(wheel)], check=True,
                   capture_output=True, text=True)
    code = ("import ozaki_backend, ozaki_backend.cuda.loader as L;"
            "print(ozaki_backend.__file__);"
            "print(L._kernel_dir());"
            "print(len(L.read_source('crt.cu')))")
    env = dict(os.environ, PYTHONPATH=str(target))
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         check=True, capture_output=True, text=True)
    pkg, kdir, n = res.stdout.split()
    assert pkg.startswith(str(target)) and str(target) in kdir
    assert int(n) > 1000
