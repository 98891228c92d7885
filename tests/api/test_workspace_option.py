"""The device workspace budget: ``workspace=`` / ``OZAKI_BACKEND_WORKSPACE`` parsing, the
default budget, and the pure tiling rules the CUDA engine uses to honour it (tile lists
covering the output exactly once, tiles that fit the budget). The GPU side is in
``tests/cuda/test_cuda_workspace.py``."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend import _options
from ozaki_backend.engine import requested_workspace, workspace_limit
from ozaki_backend.spec import tiling

from bits import assert_same_bits


@pytest.mark.parametrize("text, nbytes", [
    ("16GiB", 16 << 30), ("16 GiB", 16 << 30), ("16gib", 16 << 30), ("12GB", 12 * 10 ** 9),
    ("512MiB", 512 << 20), ("1.5GiB", 3 << 29), ("4096", 4096), ("64kB", 64000),
    ("2TiB", 2 << 40), (" 7 b ", 7)])
def test_sizes_parse_with_decimal_and_binary_units(text, nbytes):
    assert tiling.parse_bytes(text) == nbytes
    assert _options.normalize(workspace=text)["workspace"] == nbytes


def test_ints_pass_through_and_none_means_the_default():
    assert tiling.parse_bytes(1 << 33) == 1 << 33
    assert tiling.parse_bytes(np.int64(1000)) == 1000
    assert tiling.parse_bytes(None) is None and tiling.parse_bytes("  ") is None
    assert "workspace" not in _options.normalize()


@pytest.mark.parametrize("bad", ["16 parsecs", "GiB", "-1GiB", "1e9", "0", 0, -5])
def test_bad_sizes_are_value_errors_naming_the_option(bad):
    with pytest.raises(ValueError, match="workspace"):
        _options.normalize(workspace=bad)


@pytest.mark.parametrize("bad", [True, 1.5, [16]])
def test_wrong_types_are_type_errors(bad):
    with pytest.raises(TypeError, match="workspace"):
        _options.normalize(workspace=bad)


def test_the_default_budget_is_a_capped_fraction_of_free_memory():
    assert tiling.default_budget(10 << 30) == int((10 << 30) * tiling.DEFAULT_FRACTION)
    assert tiling.default_budget(140 << 30) == tiling.DEFAULT_CAP
    # an explicit budget is honoured up to what is free, never beyond
    assert tiling.effective_budget(4 << 30, 140 << 30) == 4 << 30
    assert tiling.effective_budget(200 << 30, 100 << 30) == int((100 << 30) * 0.85)


@pytest.mark.parametrize("m, n, tm, tn", [(1, 1, 1, 1), (100, 37, 32, 16), (64, 64, 64, 64),
                                          (1000, 3, 7, 5), (5, 1000, 256, 64)])
def test_tile_lists_cover_the_output_exactly_once(m, n, tm, tn):
    cover = np.zeros((m, n), dtype=np.int64)
    for i0, i1, j0, j1 in tiling.tile_list(m, n, tm, tn):
        assert 0 <= i0 < i1 <= m and 0 <= j0 < j1 <= n
        assert i1 - i0 <= tm and j1 - j0 <= tn
        cover[i0:i1, j0:j1] += 1
    assert (cover == 1).all()


def test_the_budget_reaches_the_engines_as_a_scoped_value():
    seen = []

    class Probe:
        def __init__(self):
            seen.append(requested_workspace())

    assert requested_workspace() is None
    with workspace_limit(123):
        Probe()
        with workspace_limit(None):
            Probe()
        Probe()
    Probe()
    assert seen == [123, None, 123, None]


def test_matmul_and_scopes_accept_workspace_and_results_do_not_change():
    X = np.random.default_rng(0).standard_normal((40, 30))
    Y = np.random.default_rng(1).standard_normal((30, 20))
    ref = ob.matmul(X, Y, engine="cpu")
    assert_same_bits(ob.matmul(X, Y, engine="cpu", workspace="1MiB"), ref)
    with ob.enabled(engine="cpu", workspace=1 << 20, min_size=0):
        assert_same_bits(X @ Y, ref)
    with pytest.raises(ValueError, match="workspace"):
        ob.matmul(X, Y, engine="cpu", workspace="lots")


def test_the_environment_variable_sets_the_scope_budget():
    from ozaki_backend.dispatch import env

    cfg = env.config_from_environ({"OZAKI_BACKEND_WORKSPACE": "8GiB"})
    assert cfg == {"workspace": "8GiB"}
    from ozaki_backend.dispatch.config import Config

    assert Config.build(None, cfg).workspace == 8 << 30
    with pytest.raises(ValueError, match="OZAKI_BACKEND_WORKSPACE"):
        env.config_from_environ({"OZAKI_BACKEND_WORKSPACE": "huge"})
