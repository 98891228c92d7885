"""Griffe extension: Sphinx roles in numpydoc docstrings become cross-references.

The package's docstrings are numpydoc, written for Sphinx: ``:func:`matmul```,
``:class:`~ozaki_backend.plan.Plan```, ``:mod:`.tuning```, ``:ref:`label``` ...
mkdocstrings renders docstrings as Markdown, where such a role would show up raw. This
extension rewrites them when the package is loaded for the docs build (the source files
are left alone):

* object roles (``func``, ``meth``, ``class``, ``mod``, ``data``, ``attr``, ``exc``,
  ``obj``, ``const``, ``type``; with or without the ``py:`` domain) become an
  mkdocs-autorefs cross-reference to the object, resolved the way Sphinx resolves it
  (the docstring's scope, then a leading ``.`` as a suffix search over the package). The
  reference is *optional*: an object the API page does not render (a private helper,
  ``numpy.matmul``) comes out as a code span, without a warning, instead of a dead link.
  ``~`` shows the last component only, ``!`` suppresses the link, ``title <target>``
  sets the text;
* ``:math:`x``` becomes ``$x$`` (rendered by KaTeX like the rest of the site);
* ``:ref:`` and every other role become their text in a code span.

Registered in ``mkdocs.yml`` under the python handler's ``extensions``;
``tests/tools/test_docs_site.py`` fails on any role left in the built site.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

import griffe

OBJECT_ROLES = frozenset(
    {"func", "meth", "class", "mod", "data", "attr", "exc", "obj", "const", "type"})

# :role:`text`, :py:role:`text`; the text cannot contain a backtick.
ROLE_RE = re.compile(r":(?:py:)?(?P<role>[a-z][a-z0-9_-]*):`(?P<text>[^`]+)`")
# "title <target>"
TITLED_RE = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


def convert_roles(text: str, resolve: Callable[[str], str]) -> str:
    """``text`` with every Sphinx role replaced by Markdown/HTML that mkdocs renders.

    Parameters
    ----------
    text : str
        A docstring (Markdown with Sphinx roles).
    resolve : callable
        ``resolve(target) -> identifier``: the full dotted path a role's target names
        (targets already full, or not found, come back unchanged).

    Returns
    -------
    str
        The docstring without roles. Object roles become
        ``<autoref identifier="..." optional><code>text</code></autoref>``, which
        mkdocs-autorefs turns into a link, or into the bare code span when the object
        is not rendered anywhere on the site.
    """
    def replace(match: re.Match) -> str:
        role, body = match["role"], match["text"]
        titled = TITLED_RE.match(body)
        title, target = (titled["title"], titled["target"]) if titled else (None, body)
        target = target.strip()
        if role == "math":
            return f"${body}$"
        if role not in OBJECT_ROLES:
            return f"<code>{html.escape(title or target)}</code>"
        nolink = target.startswith("!")
        short = target.startswith("~")
        target = target.lstrip("!~")
        if title is None:
            title = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
        code = f"<code>{html.escape(title)}</code>"
        if nolink:
            return code
        identifier = html.escape(resolve(target), quote=True)
        return f'<autoref identifier="{identifier}" optional>{code}</autoref>'

    return ROLE_RE.sub(replace, text)


def _module_of(obj: griffe.Object) -> griffe.Object:
    while not obj.is_module and obj.parent is not None:
        obj = obj.parent
    return obj


class ScopeResolver:
    """Sphinx's name resolution for one package, on griffe's object tree."""

    def __init__(self, package: griffe.Module):
        self.package = package
        self.paths: list[str] = []  # every object defined in the package
        self._collect(package)

    def _collect(self, obj: griffe.Object) -> None:
        self.paths.append(obj.path)
        for member in obj.members.values():
            if not member.is_alias:
                self._collect(member)

    def _exists(self, path: str) -> bool:
        try:
            self.package.modules_collection.get_member(path)
        except (KeyError, ValueError, AttributeError, griffe.AliasResolutionError,
                griffe.CyclicAliasError):
            return False
        return True

    def resolve(self, obj: griffe.Object, target: str) -> str:
        """The full path ``target`` names in the docstring of ``obj``.

        As Sphinx: a dotted name is looked up from the innermost scope outwards (the
        first component through the scope's members and imports); a name with a
        leading dot is taken relative to the docstring's module and its packages, then
        as a suffix of any object in the package. Unknown names come back unchanged.
        """
        if target.startswith("."):
            rel = target.lstrip(".")
            scope = _module_of(obj)
            while scope is not None:
                if self._exists(f"{scope.path}.{rel}"):
                    return f"{scope.path}.{rel}"
                scope = scope.parent
            hits = [p for p in self.paths if p.endswith("." + rel)]
            return hits[0] if len(hits) == 1 else rel
        head, _, rest = target.partition(".")
        try:
            base = obj.resolve(head)
        except griffe.NameResolutionError:
            return target
        return f"{base}.{rest}" if rest else base


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        resolver = ScopeResolver(pkg)
        self._rewrite(pkg, resolver)

    def _rewrite(self, obj: griffe.Object, resolver: ScopeResolver) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert_roles(
                obj.docstring.value, lambda target: resolver.resolve(obj, target))
        for member in obj.members.values():
            if not member.is_alias:
                self._rewrite(member, resolver)
