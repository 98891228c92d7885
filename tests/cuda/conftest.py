"""The CUDA engine's tests start each from no replayed plans (``cuda/graphs.py``): a
plan holds device memory, which a test of the workspace budget would otherwise see."""

import pytest


@pytest.fixture(autouse=True)
def _no_graph_plans():
    yield
    try:
        from ozaki_backend.cuda import graphs
    except ImportError:          # no CuPy: nothing was captured
        return
    graphs.clear()
