"""The package is layered: no import circles anywhere in ``ozaki_backend``, and the
numerical core sits below the rest.

* ``spec`` (moduli, remainders, seed tables, rules, certificate formulas) is the floor:
  it imports nothing else of the package.
* The engines, ``reference`` (the CPU engine, the executable spec) and ``cuda``, import
  only the floor, their own modules, and the few modules every engine shares: the
  engine interface (``engine``), NumPy's call semantics (``semantics``), the native
  product (``_native``), the counters (``_stats``) and the fallback warning
  (``_warnings``) -- and those import nothing above the floor. The engines never import
  each other; the registry above them picks one.
* Nothing in ``spec``, ``reference`` or ``cuda`` reaches ``ozaki_backend.dispatch``,
  directly or through another module.

Function-level imports count like module-level ones (the graph is
``tests/import_graph.py``'s). The dispatch package's inner layers are checked in
``tests/dispatch/test_dispatch_layers.py``.
"""

import pytest

from import_graph import cycle_through, cycles, import_graph, import_sites, path

ROOT = "ozaki_backend"
SPEC = f"{ROOT}.spec"
DISPATCH = f"{ROOT}.dispatch"
ENGINES = (f"{ROOT}.reference", f"{ROOT}.cuda")

#: What every engine may use besides the spec floor and its own modules.
ENGINE_FLOOR = {f"{ROOT}.{m}" for m in ("engine", "semantics", "_native", "_stats",
                                        "_warnings")}


def _within(name, package):
    return name == package or name.startswith(package + ".")


def _members(edges, package):
    found = sorted(n for n in edges if _within(n, package))
    assert found, f"no module under {package}"
    return found


def _reachable(edges, start):
    seen, todo = set(), [start]
    while todo:
        for w in edges[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def _wrong_imports(allowed, packages):
    """``["module imports target (line n)", ...]`` for the direct imports of every
    module under ``packages`` that ``allowed(target)`` rejects."""
    sites = import_sites()
    wrong = []
    for package in packages:
        for name in _members(sites, package):
            for target, lines in sorted(sites[name].items()):
                if not allowed(target):
                    wrong.append(f"{name} imports {target} (line {', '.join(map(str, lines))})")
    return wrong


def test_the_package_has_no_import_cycle():
    edges = import_graph()
    found = cycles(edges)
    assert not found, "import circles:\n" + "\n".join(
        " -> ".join(cycle_through(edges, comp)) for comp in found)


def test_spec_imports_nothing_else_of_the_package():
    wrong = _wrong_imports(lambda t: _within(t, SPEC), [SPEC])
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_import_only_the_spec_floor_and_the_shared_engine_modules(engine):
    def allowed(target):
        return _within(target, engine) or _within(target, SPEC) or target in ENGINE_FLOOR

    wrong = _wrong_imports(allowed, [engine])
    assert not wrong, "\n".join(wrong)


def test_the_shared_engine_modules_sit_on_the_spec_floor():
    """What the engines may import imports nothing above the floor itself (so the
    engines' rule holds for everything they pull in, not only their direct imports)."""
    edges = import_graph()
    wrong = {m: sorted(t for t in _reachable(edges, m)
                       if not (_within(t, SPEC) or t in ENGINE_FLOOR))
             for m in sorted(ENGINE_FLOOR)}
    wrong = {m: t for m, t in wrong.items() if t}
    assert not wrong, "\n".join(f"{m} reaches {', '.join(t)}" for m, t in wrong.items())


def test_the_numerical_core_never_reaches_dispatch():
    edges = import_graph()
    chains = []
    for package in (SPEC,) + ENGINES:
        for name in _members(edges, package):
            hits = sorted(t for t in _reachable(edges, name) if _within(t, DISPATCH))
            if hits:
                chains.append(" -> ".join(path(edges, name, hits[0])))
    assert not chains, "\n".join(chains)


def test_the_dask_integration_sits_on_top():
    """``ozaki_backend.dask`` (needs the ``[dask]`` extra) is imported by no module of
    the package, so ``import ozaki_backend`` never pulls in dask."""
    dask_mod = f"{ROOT}.dask"
    sites = import_sites()
    assert dask_mod in sites
    wrong = [f"{name} imports {dask_mod}" for name, targets in sorted(sites.items())
             if name != dask_mod and dask_mod in targets]
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------- the graph builder itself

def _write(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "ozaki_backend"


def test_graph_sees_relative_function_level_and_dynamic_imports(tmp_path):
    """A toy package: every import form the rules rely on is an edge, and a circle
    closed only by a function-level relative import is found."""
    pkg = _write(tmp_path, {
        "ozaki_backend/__init__.py": (
            "import importlib\n"
            "def __getattr__(name):\n"
            "    return importlib.import_module('.tool', __name__)\n"),
        "ozaki_backend/tool.py": "from .engine import run\n",
        "ozaki_backend/engine.py": "from .spec import rules\n",
        "ozaki_backend/spec/__init__.py": "",
        "ozaki_backend/spec/rules.py": "import numpy\n",
        "ozaki_backend/spec/moduli.py": "from . import rules\n",
        "ozaki_backend/reference/__init__.py": "from . import crt\n",
        "ozaki_backend/reference/crt.py": (
            "from ..spec.moduli import P\n"
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from ..dispatch import config\n"
            "def late():\n"
            "    from ..dispatch.config import C\n"),
        "ozaki_backend/dispatch/__init__.py": "",
        "ozaki_backend/dispatch/config.py": "import ozaki_backend.reference.crt as crt\n",
    })
    g = import_graph(pkg)
    assert g["ozaki_backend"] == {"ozaki_backend.tool"}
    assert g["ozaki_backend.tool"] == {"ozaki_backend.engine"}
    assert g["ozaki_backend.engine"] == {"ozaki_backend.spec.rules"}
    assert g["ozaki_backend.spec.rules"] == set()
    assert g["ozaki_backend.spec.moduli"] == {"ozaki_backend.spec.rules"}
    assert g["ozaki_backend.reference"] == {"ozaki_backend.reference.crt"}
    assert g["ozaki_backend.reference.crt"] == {"ozaki_backend.spec.moduli",
                                                "ozaki_backend.dispatch.config"}
    assert import_sites(pkg)["ozaki_backend.reference.crt"]["ozaki_backend.dispatch.config"] \
        == [6]                                       # not the TYPE_CHECKING import
    comps = cycles(g)
    assert comps == [["ozaki_backend.dispatch.config", "ozaki_backend.reference.crt"]]
    chain = cycle_through(g, comps[0])
    assert chain[0] == chain[-1] and len(chain) == 3
