"""``ozaki_backend.dask`` on a GPU worker (one worker per GPU, ``local_gpu_cluster``):
block products routed to the CUDA engine from NumPy chunks, and ``matmul`` on CuPy
chunks, both bitwise equal to the same dask product on the CPU engine.

Marked ``gpu`` (skipped without CuPy and a device) and skipped without dask.
"""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import ozaki_backend  # noqa: E402
import ozaki_backend.dask as od  # noqa: E402

pytestmark = pytest.mark.gpu


def _to_host(x):
    return x.get() if hasattr(x, "get") else x


def _to_device(x):
    import cupy

    return cupy.asarray(x)


def _operands():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((400, 900)), rng.standard_normal((900, 300))
    return da.from_array(x, chunks=(200, 300)), da.from_array(y, chunks=(300, 150))


@pytest.fixture(scope="module")
def gpu_client():
    with od.local_gpu_cluster(1) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(1)
        yield client


def test_numpy_chunks_route_to_the_cuda_engine_bitwise_as_the_cpu_engine(gpu_client):
    from bits import assert_same_bits

    a, b = _operands()
    od.register(gpu_client, engine="cuda", min_size=0)
    try:
        od.reset_stats(gpu_client)
        c = (a @ b).compute()
        s = od.stats(gpu_client)
    finally:
        od.unregister(gpu_client)
    assert s["routed"] == 12 and s["reasons"]["routed"] == {"engine=cuda": 12}
    with ozaki_backend.enabled(engine="cpu", min_size=0):
        ref = (a @ b).compute(scheduler="sync")    # same graph, same sums, this thread
    assert_same_bits(c, ref)


def test_cupy_chunks_stay_on_the_device_and_match_the_cpu_engine(gpu_client):
    from bits import assert_same_bits

    a, b = _operands()
    ac = a.map_blocks(_to_device, dtype=np.float64)
    bc = b.map_blocks(_to_device, dtype=np.float64)
    od.reset_stats(gpu_client)
    prod = od.matmul(ac, bc, engine="cuda")
    kinds = set(prod.map_blocks(lambda x: np.array([[type(x).__module__.split(".")[0]]]),
                                dtype=object, chunks=(1, 1)).compute().ravel())
    assert kinds == {"cupy"}
    c = prod.map_blocks(_to_host, dtype=np.float64).compute()
    s = od.stats(gpu_client)
    assert s["routed"] == 2 * 12
    assert set(s["reasons"]["routed"]) == {"engine=cuda (CuPy operands)"}
    # Each block product is the CPU engine's bits; the partial products along k are
    # then summed by dask with CuPy here and NumPy there, whose summation orders may
    # differ: each sum of the 3 partials P_b errs by at most 2u sum_b |P_b| <=
    # 2u (|a| @ |b|), so the two assembled results differ by at most twice that.
    ref = od.matmul(a, b, engine="cpu").compute(scheduler="sync")
    absprod = np.abs(a.compute()) @ np.abs(b.compute())
    assert np.all(np.abs(c - ref) <= 4 * np.finfo(float).eps / 2 * absprod)
    # With k in one chunk there is no sum: every element is a block product's, bitwise.
    a1, b1 = a.rechunk((200, 900)), b.rechunk((900, 150))
    c1 = od.matmul(a1.map_blocks(_to_device, dtype=np.float64),
                   b1.map_blocks(_to_device, dtype=np.float64),
                   engine="cuda").map_blocks(_to_host, dtype=np.float64).compute()
    assert_same_bits(c1, od.matmul(a1, b1, engine="cpu").compute(scheduler="sync"))
