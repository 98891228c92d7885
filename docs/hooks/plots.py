"""MkDocs hook: draw the plots from ``docs/data/*.json`` at every build.

The site's ``img/*.png`` plots are redrawn by ``scripts/make_plots.py`` from the
committed benchmark files into a temporary folder, and those drawings replace the
committed PNGs in the build: a plot on the site can never disagree with the data it
claims to show (a committed PNG may lag behind a new data file; run
``python scripts/make_plots.py`` to refresh the copies in ``docs/img/`` for readers of
the repository). Registered in ``mkdocs.yml`` under ``hooks:``; needs matplotlib
(the ``docs`` extra).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import tempfile
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[2]
_tmp: tempfile.TemporaryDirectory | None = None


def _make_plots():
    spec = importlib.util.spec_from_file_location(
        "_make_plots", REPO / "scripts" / "make_plots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_files(files, config):
    """Replace ``img/<plot>.png`` with a drawing from the data, made now."""
    global _tmp
    if _tmp is not None:
        _tmp.cleanup()
    _tmp = tempfile.TemporaryDirectory(prefix="ozaki-plots-")
    out = Path(_tmp.name) / "img"
    plots = _make_plots()
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        plots.main(["--data", str(Path(config["docs_dir"]) / "data"), "--out", str(out)])
    for name in plots.PLOTS:
        if not (out / name).is_file():  # no data for it: the committed copy stays
            continue
        old = files.get_file_from_path(f"img/{name}")
        if old is not None:
            files.remove(old)
        files.append(File(f"img/{name}", str(Path(_tmp.name)), config["site_dir"],
                          config["use_directory_urls"]))
    return files


def on_shutdown():
    if _tmp is not None:
        _tmp.cleanup()
