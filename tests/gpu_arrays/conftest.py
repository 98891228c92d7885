"""Shared fixtures of the GPU-array tests (CuPy and PyTorch products inside scopes).

The tests of this folder that need CuPy and a GPU are marked ``gpu`` (the top-level
conftest skips them without one); those that need PyTorch skip where it is not
installed (it is not a test dependency of the project: the CPU build is enough for the
dispatcher tests here)."""

import pytest


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture
def gpu_dispatch(clean_dispatch_scopes):
    """Routing off and stats zeroed around the test, the GPU-array hooks installed (the
    first ``enabled()`` does that in real code)."""
    from ozaki_backend.dispatch import cupy_hook, patches, torch_hook

    patches.install()
    cupy_hook.install()     # again, where a test took a hook out
    torch_hook.install()
    yield
