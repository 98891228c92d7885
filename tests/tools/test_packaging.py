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


def _metadata(wheel):
    """The wheel's METADATA as (field, value) pairs (the e-mail header form)."""
    from email.parser import HeaderParser

    z = zipfile.ZipFile(wheel)
    (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
    return HeaderParser().parsestr(z.read(name).decode())


def test_wheel_metadata_license_version_and_typing(wheel):
    from ozaki_backend._version import __version__

    meta = _metadata(wheel)
    # PEP 639: an SPDX expression and the licence text inside the wheel
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert "LICENSE" in meta.get_all("License-File")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    # one version, read from ozaki_backend/_version.py
    assert meta["Version"] == __version__
    assert "Typing :: Typed" in meta.get_all("Classifier")
    assert "ozaki_backend/py.typed" in names   # PEP 561: type checkers read the hints
    entry = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert entry and "ozaki-backend = ozaki_backend.__main__:main" in \
        zipfile.ZipFile(wheel).read(entry[0]).decode()


def test_license_and_citation_agree_with_the_package():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "Neither the name" in text
    cff = (ROOT / "CITATION.cff").read_text()
    from ozaki_backend._version import __version__

    fields = dict(line.split(":", 1) for line in cff.splitlines()
                  if line and not line.startswith((" ", "#", "-")))
    assert fields["cff-version"].strip() == "1.2.0"
    assert fields["version"].strip() == __version__
    assert fields["license"].strip() == "BSD-3-Clause"
    assert "authors" in fields and "title" in fields
    # the version is written once: pyproject.toml reads it from _version.py
    project = (ROOT / "pyproject.toml").read_text().split("[project]", 1)[1]
    project = project.split("\n[", 1)[0]          # the [project] table alone
    assert 'dynamic = ["version"]' in project
    assert not any(line.startswith("version") for line in project.splitlines())
