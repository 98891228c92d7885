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

Two numpydoc habits that griffe's numpy parser renders wrongly are tidied first
(:func:`tidy_numpydoc`): backticks and roles in the *type* of a section entry (shown
verbatim in the type column) become plain text, and a ``Parameters`` entry naming
several parameters (``a, b : int``) is split into one entry per name (griffe gives
all of them the default of the first).

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


# numpydoc section headers ("Parameters" underlined with dashes) and entries.
SECTION_RE = re.compile(r"^(?P<indent>[ \t]*)(?P<title>[A-Z][A-Za-z ]+)\n(?P=indent)-{3,}[ \t]*$",
                        re.M)
TYPED_SECTIONS = frozenset({"Parameters", "Other Parameters", "Attributes", "Returns",
                            "Yields", "Receives", "Raises", "Warns"})
SPLIT_SECTIONS = frozenset({"Parameters", "Other Parameters"})
ENTRY_RE = re.compile(r"^(?P<names>[\w*]+(?:, *[\w*]+)*)(?P<sep> *: *)(?P<type>.*)$")
NAMES_ONLY_RE = re.compile(r"^[\w*]+(?:, *[\w*]+)+$")


def _plain_type(text: str) -> str:
    """A type as plain text: roles become their display text, backticks go."""
    def role_text(match: re.Match) -> str:
        titled = TITLED_RE.match(match["text"])
        if titled:
            return titled["title"]
        target = match["text"].strip()
        short = target.startswith("~")
        target = target.lstrip("!~")
        return target.rsplit(".", 1)[-1] if short else target.lstrip(".")
    return ROLE_RE.sub(role_text, text).replace("`", "")


def tidy_numpydoc(text: str) -> str:
    """``text`` with section entries griffe would render wrongly rewritten.

    In the typed sections (Parameters, Returns, Raises, ...) an entry line's type loses
    its backticks and roles (griffe shows a type verbatim). In Parameters sections an
    entry naming several parameters is repeated once per name with the same type and
    description (griffe would give every name the first one's default).
    """
    lines = text.split("\n")
    headers = {text[:m.start()].count("\n"): m for m in SECTION_RE.finditer(text)}
    out, section, base = [], None, None
    i = 0
    while i < len(lines):
        if i in headers:
            m = headers[i]
            section, base = m["title"].strip(), None
            out += lines[i:i + 2]
            i += 2
            continue
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if section in TYPED_SECTIONS and line.strip():
            if base is None:
                base = indent
            if indent < base:  # dedented: the section is over
                section = None
        if section in TYPED_SECTIONS and line.strip() and indent == base:
            entry = line.strip()
            m = ENTRY_RE.match(entry)
            if m:
                entry = m["names"] + m["sep"] + _plain_type(m["type"])
            elif not NAMES_ONLY_RE.match(entry):
                entry = _plain_type(entry)  # a Returns/Raises type without a name
            names = (m["names"] if m else entry).split(",")
            if section in SPLIT_SECTIONS and len(names) > 1 and (
                    m or NAMES_ONLY_RE.match(entry)):
                rest = m["sep"] + _plain_type(m["type"]) if m else ""
                j = i + 1
                while j < len(lines) and (not lines[j].strip() or
                                          len(lines[j]) - len(lines[j].lstrip()) > base):
                    j += 1
                while j > i + 1 and not lines[j - 1].strip():  # keep trailing blanks
                    j -= 1
                body = lines[i + 1:j]
                for name in names:
                    out.append(" " * base + name.strip() + rest)
                    out += body
                i = j
                continue
            line = " " * indent + entry
        out.append(line)
        i += 1
    return "\n".join(out)


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
                tidy_numpydoc(obj.docstring.value),
                lambda target: resolver.resolve(obj, target))
        for member in obj.members.values():
            if not member.is_alias:
                self._rewrite(member, resolver)
