"""Asking for an engine that cannot run here: a clear error that says how to install
what is missing, never a bare ModuleNotFoundError."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.cuda import availability


@pytest.fixture
def no_gpu():
    ok, why = availability()
    if ok:
        pytest.skip("a GPU is usable here")
    return why


def test_engine_cuda_without_cupy_says_how_to_install(no_gpu):
    a = np.ones((4, 4))
    with pytest.raises(ob.EngineUnavailableError) as info:
        ob.matmul(a, a, engine="cuda")
    assert isinstance(info.value, RuntimeError)
    assert not isinstance(info.value, ImportError)
    if no_gpu.startswith("CuPy is not importable"):
        assert "pip install 'ozaki_backend[cuda13]'" in str(info.value)
    assert "engine='cpu'" in str(info.value)


def test_engine_names_are_case_insensitive():
    a = np.arange(16.0).reshape(4, 4)
    assert np.array_equal(ob.matmul(a, a, engine="CPU"), ob.matmul(a, a, engine="cpu"))
    with ob.enabled(engine="Cpu", mode="FAST"):
        from ozaki_backend.dispatch import config

        assert config.current().config.engine == "cpu"
        assert config.current().config.mode == "fast"
    with pytest.raises(ValueError, match="engine must be one of"):
        ob.matmul(a, a, engine="gpu")
