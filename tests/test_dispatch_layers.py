"""The dispatch package is layered: no import circles, each module imports only from
the layers below it (function-local imports included); decisions are immutable; the
cost model pushes its changes to listeners instead of importing config."""

import ast
from pathlib import Path

import numpy as np
import pytest

import ozaki_backend as ob
from ozaki_backend.dispatch import config, costmodel, routing

PKG_DIR = Path(ob.__file__).parent
DISPATCH = "ozaki_backend.dispatch"

#: Bottom up; a module may import from strictly lower layers only.
LAYERS = [
    {"log"},
    {"costmodel"},
    {"config"},
    {"routing"},
    {"route"},
    {"loophook", "numpy_wrappers", "scipy_blas"},
    {"wrap", "patches"},
    {"scopes"},
    {"observe"},
    {"env"},
    {"cli", "_start"},
]


def _modules():
    """``{dotted name: (path, is_package)}`` of the package's Python modules."""
    mods = {}
    for p in PKG_DIR.rglob("*.py"):
        parts = list(p.relative_to(PKG_DIR.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (p, is_pkg)
    return mods


def _extensions():
    """Dotted names of compiled extension modules (built, or with their C source)."""
    exts = set()
    for p in list(PKG_DIR.rglob("*.so")) + list(PKG_DIR.rglob("*.pyd")) \
            + list(PKG_DIR.rglob("*.c")):
        parts = list(p.relative_to(PKG_DIR.parent).parts)
        parts[-1] = parts[-1].split(".")[0]
        exts.add(".".join(parts))
    return exts


def _import_graph():
    """Edges between the package's modules, from every import statement (module level
    and inside functions). A compiled extension is a leaf; importing a submodule does
    not count as importing its parent packages (Python runs their ``__init__`` first,
    but that is not a dependency of the importer's code)."""
    mods, exts = _modules(), _extensions()
    root = PKG_DIR.name
    edges = {}
    for name, (path, is_pkg) in mods.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            found = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name.split(".")[0] == root]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                    if mod.split(".")[0] != root:
                        continue
                for a in node.names:
                    cand = f"{mod}.{a.name}"
                    found.append(cand if cand in mods or cand in exts else mod)
            for t in found:
                if t in exts:
                    continue  # a leaf: it imports nothing of the package
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    targets.add(t)
        edges[name] = targets
    return edges


def _cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_involves_dispatch():
    cycles = [c for c in _cycles(_import_graph()) if any(m.startswith(DISPATCH) for m in c)]
    assert cycles == []


def test_dispatch_modules_import_only_lower_layers():
    edges = _import_graph()
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
    edges = _import_graph()[f"{DISPATCH}.config"]
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
