"""Shared pytest configuration for every folder under ``tests/``: GPU tests skip cleanly
where CuPy or a GPU is missing; the dispatch tests' clean-state fixtures.

The tests sit in one folder per layer (``spec``, ``reference``, ``cuda``, ``dispatch``,
``api``, ``tools``) without ``__init__.py`` files, so test module names are unique
across folders. Pytest's default import mode puts this folder on ``sys.path``, so the
shared helpers beside this file import by name: ``from bits import assert_same_bits``,
``from import_graph import import_graph``."""

import pytest


def _gpu_reason():
    from ozaki_backend.cuda import availability

    ok, why = availability()
    return None if ok else why


def pytest_configure(config):
    """The GPU tests compare the CUDA engine's bits with the CPU reference's: the
    emulation runs even where this GPU's native DGEMM is faster (``emulation="eager"``;
    set before anything reads it, the process default of ``enabled()`` included). A test
    of that choice passes ``emulation="performant"`` itself."""
    import os

    os.environ.setdefault("OZAKI_BACKEND_EMULATION", "eager")


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


def _clean_dispatch(check_hook):
    import ozaki_backend as ob
    from ozaki_backend.dispatch import config, loophook

    ob.disable()
    ob.reset_stats()
    yield
    ob.disable()
    assert config._STATE.get() is None, "a scope leaked out of the test"
    if check_hook:
        assert loophook.state()[0] == 0, "the C hook still counts an active scope"


@pytest.fixture
def clean_dispatch():
    """Routing off and stats zeroed around the test; afterwards no scope may be left
    open, neither in the ContextVar nor in the C hook's count of active scopes."""
    yield from _clean_dispatch(check_hook=True)


@pytest.fixture
def clean_dispatch_scopes():
    """:func:`clean_dispatch` without the check of the C hook's count."""
    yield from _clean_dispatch(check_hook=False)
