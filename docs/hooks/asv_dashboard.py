"""MkDocs hook: publish the asv dashboard with the site, under ``asv/``.

``.ci/docs`` runs the asv suite on the commit it builds and ``asv_bench/publish.py``
turns the results into the dashboard (``asv_bench/.asv/html``, or the folder named by
``ASV_HTML_DIR``); this hook adds every file of it to the site as ``asv/...``, so the
[Development](../development.md) page can link to ``asv/index.html``. Where no
dashboard was published (a plain ``mkdocs serve``), ``asv/index.html`` is a short page
saying how to make one, so the link is never dead. Registered in ``mkdocs.yml`` under
``hooks:``.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[2]
PREFIX = "asv"

PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>asv dashboard: not built</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>asv dashboard: not built</h1>
<p>This build of the site has no asv results ({where} holds no dashboard). To publish
one, run the suite and the publisher from <code>asv_bench/</code>, then build the site
again:</p>
<pre>cd asv_bench
asv machine --yes
asv run --quick --python=same --set-commit-hash $(git rev-parse HEAD)
python publish.py
cd .. &amp;&amp; mkdocs build</pre>
</body></html>
"""


def dashboard_dir() -> Path:
    """Where the published dashboard is looked for."""
    return Path(os.environ.get("ASV_HTML_DIR") or REPO / "asv_bench" / ".asv" / "html")


def on_files(files, config):
    """Add the dashboard's files (or the placeholder page) under ``asv/``."""
    src = dashboard_dir()
    if (src / "index.html").is_file():
        found = {f"{PREFIX}/{p.relative_to(src).as_posix()}": p
                 for p in sorted(src.rglob("*")) if p.is_file()}
    else:
        found = {f"{PREFIX}/index.html": None}
    for rel, path in found.items():
        old = files.get_file_from_path(rel)
        if old is not None:
            files.remove(old)
        if path is None:
            page = PLACEHOLDER.format(where=html.escape(str(src)))
            files.append(File.generated(config, rel, content=page))
        else:
            files.append(File.generated(config, rel, abs_src_path=str(path)))
    return files
