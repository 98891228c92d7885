"""The dispatch package is layered: no import circles, each module imports only from
the layers below it (function-local imports included); decisions are immutable; the
cost model pushes its changes to listeners instead of importing config.

The import graph is ``tests/import_graph.py``'s; the layers of the package as a whole
(spec, engines, dispatch) are checked in ``tests/tools/test_import_layers.py``."""

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import config, costmodel, routing

from import_graph import PKG_DIR, cycles, import_graph

DISPATCH = "ozaki_backend.dispatch"

#: Bottom up; a module may import from strictly lower layers only.
LAYERS = [
    {"log"},
    {"costmodel", "import_watch"},
    {"config"},
    {"routing"},
    {"route"},
    {"device_routing"},
    {"loophook", "blashook", "dothook", "numpy_wrappers", "scipy_blas", "cupy_hook",
     "torch_hook"},
    {"wrap", "patches"},
    {"scopes"},
    {"observe"},
    {"env"},
    {"cli", "_start"},
]


def test_no_import_cycle_involves_dispatch():
    found = [c for c in cycles(import_graph()) if any(m.startswith(DISPATCH) for m in c)]
    assert found == []


def test_dispatch_modules_import_only_lower_layers():
    edges = import_graph()
    layer = {m: i for i, group in enumerate(LAYERS) for m in group}
    dispatch = {n[len(DISPATCH) + 1:] for n in edges if n.startswith(DISPATCH + ".")}
    assert dispatch == set(layer), "a dispatch module is missing from LAYERS (or gone)"
    wrong = []
    for short in dispatch:
        for target in edges[f"{DISPATCH}.{short}"]:
            if target == DISPATCH:
                wrong.append(f"{short} imports the package {DISPATCH} itself")
            elif target.startswith(DISPATCH + "."):
                t = target[len(DISPATCH) + 1:]
                if layer[t] >= layer[short]:
                    wrong.append(f"{short} (layer {layer[short]}) imports {t} "
                                 f"(layer {layer[t]})")
    assert wrong == []


def test_config_publishes_to_the_extension_not_to_loophook_py():
    edges = import_graph()[f"{DISPATCH}.config"]
    assert {e for e in edges if e.startswith(DISPATCH)} == {f"{DISPATCH}.costmodel"}
    src = (PKG_DIR / "dispatch" / "config.py").read_text()
    assert "_loophook" in src


def test_decisions_are_immutable():
    cfg = config.Config.build(None, {"engine": "cpu", "min_size": 0})
    d = routing.decide(cfg, 8, 8, 8, entry="np.dot")
    assert d and d.engine == "cpu"
    for name in ("routed", "reason", "engine", "m"):
        with pytest.raises(AttributeError):
            setattr(d, name, None)
    with pytest.raises(AttributeError):
        del d.reason
    e = d.replace(routed=False, reason="non-finite operand")
    assert d.routed and d.reason == "min_size=0"              # the original is unchanged
    assert not e and e.reason == "non-finite operand" and (e.m, e.n, e.k) == (8, 8, 8)
    assert e.entry == "np.dot" and e.engine == "cpu"
    with pytest.raises(TypeError):
        d.replace(colour="red")


@pytest.mark.usefixtures("clean_dispatch")
def test_a_non_finite_operand_keeps_a_new_native_decision_in_the_history():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 7)), rng.standard_normal((7, 5))
    a[2, 3] = np.inf
    with ob.enabled(engine="cpu", min_size=0):
        a @ b
        np.dot(a, b)
    last = list(routing.recent)[-2:]
    assert [d.entry for d in last] == ["@/np.matmul", "np.dot"]
    assert all(not d and d.reason == "non-finite operand" for d in last)


def test_cost_model_pushes_changes_to_listeners():
    model = costmodel.CostModel(host_gflops=100.0)
    seen = []
    model.subscribe(lambda: seen.append(model.floor()))
    model.overhead_s = 1e-3
    model.host_gflops = 200.0
    assert seen == [int(1e-3 * 100e9 / 2), int(1e-3 * 200e9 / 2)]
    with pytest.raises(AttributeError):
        model.nonsense = 1
    assert len(seen) == 2


@pytest.mark.usefixtures("clean_dispatch")
def test_stats_has_no_bytes():
    s = ob.stats()
    assert "bytes" not in s
    assert "bytes" not in ob.dispatch.format_stats(s)
