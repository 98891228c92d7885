"""``ozaki_backend.dask`` on real local clusters: routing enabled on every current and
future worker by ``register``, the workers' counters summed by ``stats``, the assembled
result's accuracy, ``unregister`` and a clean shutdown.

One process cluster (two single-threaded workers, CPU engine) serves the module; its
workers inherit this process's environment, so they import the same ``ozaki_backend``.
Skipped where dask or distributed is missing (the ``[dask]`` extra).
"""

import os
import warnings
from collections import Counter

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import ozaki_backend.dask as od  # noqa: E402
from ozaki_backend import NativeFallbackWarning  # noqa: E402
from ozaki_backend.testing import exact_matmul, max_relative_error  # noqa: E402

#: The issue's case: (400 x 900) @ (900 x 300) in (200, 300) / (300, 150) chunks is
#: 2 x 3 x 2 = 12 block products.
M, K, N = 400, 900, 300
CHUNKS_A, CHUNKS_B = (200, 300), (300, 150)
BLOCKS = 12


def _routing_enabled():
    from ozaki_backend.dispatch import config

    return config.current().enabled


def _min_size():
    from ozaki_backend.dispatch import config

    return config.current().config.min_size


def _pid():
    return os.getpid()


def _operands(seed=0, scale=10):
    """The issue's case (``scale=1``), or the same 12-block layout ``scale`` times
    smaller in every dimension (the CPU engine is slow; CI time matters)."""
    # Positive entries: no cancellation, so every element's relative error is the
    # arithmetic's (the comparison with native below is then about rounding, not luck).
    rng = np.random.default_rng(seed)
    x, y = rng.random((M // scale, K // scale)), rng.random((K // scale, N // scale))
    ca = tuple(c // scale for c in CHUNKS_A)
    cb = tuple(c // scale for c in CHUNKS_B)
    return x, y, da.from_array(x, chunks=ca), da.from_array(y, chunks=cb)


@pytest.fixture(scope="module")
def cluster_client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        yield cluster, client


@pytest.fixture
def registered(cluster_client):
    cluster, client = cluster_client
    od.register(client, engine="cpu")
    od.reset_stats(client)
    yield cluster, client
    if od.PLUGIN_NAME in _plugins(client):
        od.unregister(client)
    _scale(cluster, client, 2)


def _scale(cluster, client, n, timeout=60):
    """Scale to exactly ``n`` workers and wait until the scheduler sees exactly ``n``
    (``wait_for_workers`` returns as soon as there are at least ``n``, while a retiring
    worker may still be listed and a broadcast to it fails)."""
    import time

    cluster.scale(n)
    deadline = time.monotonic() + timeout
    while len(client.scheduler_info()["workers"]) != n or len(cluster.workers) != n:
        assert time.monotonic() < deadline, f"cluster did not reach {n} workers"
        time.sleep(0.05)


def _plugins(client):
    return client.run_on_scheduler(
        lambda dask_scheduler: list(dask_scheduler.worker_plugins))


def test_register_routes_every_block_product_and_stats_count_them(registered):
    _, client = registered
    x, y, a, b = _operands(scale=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NativeFallbackWarning)
        c = (a @ b).compute()
    s = od.stats(client)
    assert (s["routed"], s["native"], s["fallback"]) == (BLOCKS, 0, 0)
    assert s["reasons"]["routed"] == {"engine=cpu": BLOCKS}
    assert s["routed_by_entry"] == {"@/np.matmul": BLOCKS}
    assert sum(s["moduli"].values()) == BLOCKS
    assert od.explain(a @ b, client=client).routed == BLOCKS
    # Accuracy: routed blocks summed by dask against the same dask product computed
    # natively (this process has routing off), both against the exact oracle.
    exact = exact_matmul(x, y)
    native = (a @ b).compute(scheduler="sync")
    err, err_native = max_relative_error(c, exact), max_relative_error(native, exact)
    assert err <= 2 * err_native, (err, err_native)


def test_stats_sum_is_the_sum_of_the_workers(registered):
    _, client = registered
    _, _, a, b = _operands(1)
    (a @ b).compute()
    (a[:, :60] @ b[:60]).compute()              # 8 more block products
    total = od.stats(client)
    per = od.stats(client, per_worker=True)
    assert set(per) == set(client.scheduler_info()["workers"])
    for key in ("routed", "native", "fallback"):
        assert total[key] == sum(s[key] for s in per.values())
    assert total["routed"] == BLOCKS + 8
    for outcome in ("routed", "native", "fallback"):
        summed = Counter()
        for s in per.values():
            summed.update(s["reasons"][outcome])
        assert total["reasons"][outcome] == dict(summed)
    summed = Counter()
    for s in per.values():
        summed.update(s["moduli"])
    assert total["moduli"] == dict(summed)
    assert total["last_moduli"] is None


def test_a_worker_added_after_register_routes(registered):
    cluster, client = registered
    before = set(client.scheduler_info()["workers"])
    _scale(cluster, client, 3)
    (new,) = set(client.scheduler_info()["workers"]) - before
    assert client.run(_routing_enabled, workers=[new]) == {new: True}
    x = np.random.default_rng(2).random((64, 64))
    fut = client.submit(np.matmul, x, x, workers=[new], allow_other_workers=False,
                        pure=False)
    np.testing.assert_allclose(fut.result(), x @ x, rtol=64 * 2.0**-52)
    per = od.stats(client, per_worker=True)
    assert per[new]["routed"] == 1 and per[new]["reasons"]["routed"] == {"engine=cpu": 1}


def test_unregister_turns_routing_off_now_and_for_later_workers(registered):
    cluster, client = registered
    od.unregister(client)
    assert set(client.run(_routing_enabled).values()) == {False}
    assert od.PLUGIN_NAME not in _plugins(client)
    _, _, a, b = _operands(3)
    (a @ b).compute()
    assert od.stats(client)["routed"] == 0
    assert od.explain(a @ b, client=client).routed == 0
    _scale(cluster, client, 3)
    assert set(client.run(_routing_enabled).values()) == {False}
    with pytest.raises(ValueError, match="no ozaki_backend plugin"):
        od.unregister(client)


def test_register_rejects_bad_config_at_the_call(cluster_client):
    _, client = cluster_client
    with pytest.raises(TypeError, match="unexpected keyword argument 'engin'"):
        od.register(client, engin="cpu")
    with pytest.raises(ValueError):
        od.register(client, engine="tpu")
    assert od.PLUGIN_NAME not in _plugins(client)


def test_register_again_replaces_the_configuration(registered):
    _, client = registered
    od.register(client, engine="cpu", min_size=10**9)    # nothing here reaches it
    _, _, a, b = _operands(4)
    (a @ b).compute()
    assert set(client.run(_min_size).values()) == {10**9}
    s = od.stats(client)
    # Below the floor the C hook leaves each block product to NumPy without calling
    # Python: counted there, not as a native decision.
    assert s["routed"] == 0 and s["c_fast_path"]["below_floor"] >= BLOCKS
    assert od.explain(a @ b, client=client).reasons == {
        ("native", "below min_size (m*n*k < 1000000000)"): BLOCKS}


def test_threads_cluster_counts_the_shared_process_once(clean_dispatch_scopes):
    # processes=False: both workers run in this process, so its counters are theirs.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        od.register(client, engine="cpu")
        od.reset_stats(client)
        _, _, a, b = _operands(5)
        (a @ b).compute()
        s = od.stats(client)
        assert s["routed"] == BLOCKS
        per = od.stats(client, per_worker=True)
        assert len(per) == 1 and next(iter(per.values()))["routed"] == BLOCKS
        assert next(iter(per)).count("tcp://") + next(iter(per)).count("inproc://") == 2
        od.unregister(client)
        assert not _routing_enabled()


def _visible_devices():
    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("NCCL_NVLS_ENABLE")


def test_gpu_cluster_fallback_routes_and_shuts_down_cleanly(monkeypatch):
    """``local_gpu_cluster`` without dask-cuda: worker i sees only GPU i (no GPU is
    touched here; the CPU engine computes); routing works there, and closing the
    cluster leaves no worker process and no warning of ours."""
    import psutil

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with od.local_gpu_cluster(2, use_dask_cuda=False) as cluster, \
                distributed.Client(cluster) as client:
            client.wait_for_workers(2)
            assert sorted(client.run(_visible_devices).values()) == [("0", "0"), ("1", "0")]
            pids = set(client.run(_pid).values())
            od.register(client, engine="cpu")
            _, _, a, b = _operands(6)
            (a @ b).compute()
            assert od.stats(client)["routed"] == BLOCKS
            od.unregister(client)
    assert len(pids) == 2 and os.getpid() not in pids
    alive = [p for p in pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"worker processes left running: {alive}"
    ours = [w for w in caught if issubclass(w.category, (NativeFallbackWarning,
                                                         RuntimeWarning))]
    assert not ours, [str(w.message) for w in ours]
    with pytest.raises(ValueError, match="positive int"):
        od.local_gpu_cluster(0, use_dask_cuda=False)


def _exit_report(dask_worker=None):
    from ozaki_backend.dispatch import env

    return env.exit_report()


def test_each_workers_exit_report_is_labelled(registered):
    # Under OZAKI_BACKEND_STATS=1 every worker process prints a report at exit: each
    # names its worker, so that the reports of a cluster can be told apart.
    _, client = registered
    reports = client.run(_exit_report)
    assert len(reports) == 2
    for address, text in reports.items():
        head, body = text.split("\n", 1)
        assert head.startswith(f"[dask worker {address}, pid ") and "ozaki_backend stats" in body
