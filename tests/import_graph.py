"""The package's import graph, read from its source with :mod:`ast` (nothing is imported).

Shared by ``tests/dispatch/test_dispatch_layers.py`` (the dispatch package's own layers)
and ``tests/tools/test_import_layers.py`` (the whole package's layers). Every import
statement counts, at module level or inside a function, absolute or relative
(``from . import x``, ``from ..spec import y``, ``from .x import y``), and so does
``importlib.import_module("...")`` with a literal name; imports under
``if TYPE_CHECKING:`` do not (they never run). A compiled extension is a leaf; importing
a submodule does not count as importing its parent packages (Python runs their
``__init__`` first, but that is not a dependency of the importer's code).
"""

from __future__ import annotations

import ast
from pathlib import Path

import ozaki_backend

PKG_DIR = Path(ozaki_backend.__file__).parent


def modules(pkg_dir=PKG_DIR):
    """``{dotted name: (path, is_package)}`` of the package's Python modules."""
    mods = {}
    for p in sorted(Path(pkg_dir).rglob("*.py")):
        parts = list(p.relative_to(Path(pkg_dir).parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (p, is_pkg)
    return mods


def extensions(pkg_dir=PKG_DIR):
    """Dotted names of compiled extension modules (built, or with their C source)."""
    pkg_dir = Path(pkg_dir)
    exts = set()
    for p in list(pkg_dir.rglob("*.so")) + list(pkg_dir.rglob("*.pyd")) \
            + list(pkg_dir.rglob("*.c")):
        parts = list(p.relative_to(pkg_dir.parent).parts)
        parts[-1] = parts[-1].split(".")[0]
        exts.add(".".join(parts))
    return exts


def _is_type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree):
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:``."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _resolve(name, is_pkg, level, module):
    """The absolute name of ``from <level dots><module> import ...`` in ``name``."""
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_sites(pkg_dir=PKG_DIR):
    """``{module: {imported module: [line numbers]}}`` within the package."""
    mods, exts = modules(pkg_dir), extensions(pkg_dir)
    root = Path(pkg_dir).name
    sites = {}
    for name, (path, is_pkg) in mods.items():
        targets = {}
        for node in _nodes(ast.parse(path.read_text(), filename=str(path))):
            found = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name.split(".")[0] == root]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    mod = _resolve(name, is_pkg, node.level, node.module)
                else:
                    mod = node.module or ""
                    if mod.split(".")[0] != root:
                        continue
                for a in node.names:
                    cand = f"{mod}.{a.name}"
                    found.append(cand if cand in mods or cand in exts else mod)
            elif (isinstance(node, ast.Call) and node.args
                  and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and ((isinstance(node.func, ast.Attribute)
                        and node.func.attr == "import_module")
                       or (isinstance(node.func, ast.Name)
                           and node.func.id == "import_module"))):
                target = node.args[0].value
                if target.startswith("."):
                    level = len(target) - len(target.lstrip("."))
                    found = [_resolve(name, is_pkg, level, target[level:])]
                elif target.split(".")[0] == root:
                    found = [target]
            for t in found:
                if t in exts:
                    continue  # a leaf: it imports nothing of the package
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    targets.setdefault(t, []).append(node.lineno)
        sites[name] = {t: sorted(lines) for t, lines in targets.items()}
    return sites


def import_graph(pkg_dir=PKG_DIR):
    """``{module: set of modules it imports}`` within the package."""
    return {name: set(t) for name, t in import_sites(pkg_dir).items()}


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def path(edges, start, goal, within=None):
    """A shortest import chain ``[start, ..., goal]`` (``None`` if there is none),
    optionally through the modules of ``within`` only."""
    prev, todo = {start: None}, [start]
    while todo:
        nxt = []
        for v in todo:
            for w in sorted(edges.get(v, ())):
                if within is not None and w not in within:
                    continue
                if w == goal:
                    chain = [w, v]
                    while prev[chain[-1]] is not None:
                        chain.append(prev[chain[-1]])
                    return chain[::-1]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        todo = nxt
    return None


def cycle_through(edges, comp):
    """One import circle inside the strongly connected component ``comp``, as the
    chain ``[a, b, ..., a]``."""
    return path(edges, comp[0], comp[0], within=set(comp))
