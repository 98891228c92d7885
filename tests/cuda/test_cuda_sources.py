"""CUDA engine pieces that need no GPU: kernel sources, generated constants, imports.

These run everywhere (CI included); the GPU behaviour is in ``test_cuda_*`` files
marked ``gpu``.
"""

import re
import subprocess
import sys

import pytest

from ozaki_backend.spec.moduli import MAX_MODULI, MIN_MODULI, MODULI, crt_constants
from ozaki_backend.cuda import _prelude
from ozaki_backend.cuda.loader import read_source

KERNELS = ("scaling.cu", "residues.cu", "modgemm.cu", "crt.cu", "modprod.cu", "phase22.cu")


def test_kernels_ship_as_package():
    from importlib import resources

    root = resources.files("ozaki_backend.kernels")
    for name in KERNELS + ("common.cuh",):
        assert root.joinpath(name).is_file(), name


def test_moduli_table_in_kernels_matches_python():
    text = read_source("common.cuh")
    body = text[text.index("oz_modulus(int l)"):text.index("template <int V>")]
    values = tuple(int(v) for v in re.findall(r"\?\s*(\d+)u", body))
    last = int(re.findall(r":\s*(\d+)u;", body)[-1])
    assert values + (last,) == MODULI


@pytest.mark.parametrize("name", KERNELS)
def test_includes_are_inlined_with_line_markers(name):
    src = read_source(name)
    assert not re.search(r"^\s*#\s*include", src, re.M)
    assert src.startswith(f'#line 1 "kernels/{name}"')
    assert '#line 1 "kernels/common.cuh"' in src
    # after the inlined header, line numbers resume in the including file
    assert re.search(rf'#line \d+ "kernels/{re.escape(name)}"', src.split("common.cuh", 1)[1])


@pytest.mark.parametrize("n", range(MIN_MODULI, MAX_MODULI + 1))
def test_crt_prelude_constants_are_exact(n):
    cc = crt_constants(n)
    L = _prelude.n_limbs(n)
    text = _prelude.crt_prelude(n)

    def arrays(name):
        m = re.search(rf"{name}\[[^=]*=\s*(\{{.*\}});", text)
        return [[int(v) for v in re.findall(r"(\d+)u", grp)]
                for grp in re.findall(r"\{([^{}]*)\}", m.group(1))]

    def value(limbs):
        return sum(v << (32 * t) for t, v in enumerate(limbs))

    W = arrays("OZ_W")
    assert len(W) == n and all(len(w) == L for w in W)
    for l, (p, w) in enumerate(zip(cc.moduli, W)):
        x = value(w)
        assert x < cc.M
        assert all(x % q == (1 if i == l else 0) for i, q in enumerate(cc.moduli))
    assert value(arrays("OZ_M")[0]) == cc.M
    assert value(arrays("OZ_MH")[0]) == cc.M // 2
    # the accumulator bound of kernels/crt.cu: Y' < 2^(32 L - 1)
    assert cc.M // 2 + n * _prelude.C_BOUND * cc.M < 1 << (32 * L - 1)
    # every limb column sum stays below 2^64
    assert cc.M // 2 >= 0 and n * _prelude.C_BOUND * (2 ** 32) + 2 ** 32 < 2 ** 64


def test_import_does_not_import_cupy():
    code = ("import sys, ozaki_backend, ozaki_backend.cuda, ozaki_backend.cuda.loader;"
            "import ozaki_backend.cuda._prelude, ozaki_backend.cuda.errors;"
            "print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_bench_help_needs_no_gpu(capsys):
    from ozaki_backend import bench

    with pytest.raises(SystemExit) as exc:
        bench.main(["--help"])
    assert exc.value.code == 0
    assert "--sizes" in capsys.readouterr().out
