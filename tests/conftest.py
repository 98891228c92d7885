"""Shared pytest configuration: GPU tests skip cleanly where CuPy or a GPU is missing."""

import pytest


def _gpu_reason():
    from ozaki_backend.cuda import availability

    ok, why = availability()
    return None if ok else why


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if "gpu" in it.keywords]
    if not gpu_items:
        return
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for it in gpu_items:
        it.add_marker(skip)
