"""The user guide and the asv dashboard render in a real browser, with no network.

Builds the MkDocs site with ``mkdocs build --strict``, serves it on 127.0.0.1 from a
thread, and renders pages in headless Chromium (Debian's ``chromium`` package): the
formulae must come out as KaTeX markup (with the KaTeX fonts fetched from the site
itself) and the plots must be fetched by the browser. The same for the asv dashboard
built by ``asv publish`` (through ``asv_bench/publish.py``, which makes it offline).

Skipped when Chromium, MkDocs or asv is missing here; CI installs them (``.ci/docs``).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "")
                 if p and os.access(p, os.X_OK)), None)

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files; remembers every (path, status) it answered."""

    def log_request(self, code="-", size="-"):
        self.server.requests.append((self.path.split("?")[0], int(code)))

    def log_message(self, *args):  # keep pytest's output clean
        pass


@contextmanager
def serve(directory):
    """An HTTP server for ``directory`` on 127.0.0.1 (free port), in a thread."""
    handler = functools.partial(_Handler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def render(url, profile_dir, *, screenshot=None):
    """The DOM of ``url`` after its scripts ran (or a PNG screenshot), via Chromium."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile_dir}", "--virtual-time-budget=10000",
           "--window-size=1280,2000"]
    cmd += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _external_assets(html):
    """Scripts and stylesheets a page would load from another host."""
    tags = re.findall(r"<(?:script|link)\b[^>]*>", html)
    return [t for t in tags if re.search(r'\b(?:src|href)="(?:https?:)?//', t)
            and ("<script" in t or "stylesheet" in t)]


# --------------------------------------------------------------------------- docs site

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                          "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stderr[-4000:]}"
    return out


def test_site_has_every_page_and_loads_nothing_from_outside(site):
    for page in ("index.html", "how-it-works/index.html", "precision/index.html",
                 "performance/index.html", "configuration/index.html",
                 "intercepted/index.html", "seed-scheme/index.html",
                 "reproducibility/index.html", "troubleshooting/index.html",
                 "api/index.html", "spec/index.html", "changelog/index.html",
                 "data/index.html"):
        assert (site / page).is_file(), page
    for html in site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        assert not _external_assets(text), html
        # a '$' left outside code and math means a formula that was not recognised
        prose = re.sub(r"<(pre|code|script)\b.*?</\1>", "", text, flags=re.S)
        prose = re.sub(r'<(span|div) class="arithmatex">.*?</\1>', "", prose, flags=re.S)
        assert "$" not in prose, f"unrendered formula in {html}"
    # the API reference really was generated from the docstrings
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("ozaki_backend.matmul", "precision", "Plan"):
        assert name in api


@needs_chromium
def test_formulae_and_plot_render_in_chromium(site, tmp_path):
    with serve(site) as (server, url):
        dom = render(url + "how-it-works/", tmp_path / "p1")
        n_math = dom.count('class="arithmatex"')
        n_katex = len(re.findall(r'class="katex"', dom))
        assert n_math >= 20, "formulae missing from the page"
        assert n_katex >= n_math, f"only {n_katex} of {n_math} formulae rendered by KaTeX"
        assert "katex-error" not in dom
        assert "3\\cdot5\\cdot7" in dom or "105" in dom  # the 3-5-7 -> 23 example

        dom = render(url + "precision/", tmp_path / "p2")
        assert re.search(r'<img[^>]+src="[^"]*img/accuracy_vs_moduli\.png"', dom)
        assert 'class="katex"' in dom
        served = dict(server.requests)
        assert served.get("/img/accuracy_vs_moduli.png") == 200, server.requests
        fonts = [p for p, code in server.requests if p.endswith(".woff2") and code == 200]
        assert fonts, "the browser fetched no KaTeX font from the site"
        assert all(code == 200 for _, code in server.requests), server.requests

        shot = tmp_path / "precision.png"
        render(url + "precision/", tmp_path / "p3", screenshot=shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_are_committed_pngs():
    for name in ("accuracy_vs_moduli.png", "cpu_time_vs_size.png"):
        data = (REPO / "docs" / "img" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name


# ----------------------------------------------------------------------- asv dashboard

def _asv_conf(tmp):
    text = (REPO / "asv_bench" / "asv.conf.json").read_text()
    conf = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
    conf.update(repo=str(REPO), benchmark_dir=str(REPO / "asv_bench" / "benchmarks"),
                results_dir=str(tmp / "results"), html_dir=str(tmp / "html"),
                env_dir=str(tmp / "env"))
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


@needs_chromium
def test_asv_dashboard_renders_in_chromium(tmp_path):
    pytest.importorskip("asv")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout: asv needs the commit history")
    conf = _asv_conf(tmp_path)
    env = dict(os.environ, HOME=str(tmp_path / "home"))  # asv's machine file goes there
    (tmp_path / "home").mkdir()

    def asv(*args):
        res = subprocess.run([sys.executable, "-m", "asv", *args, "--config", str(conf)],
                             capture_output=True, text=True, env=env, cwd=tmp_path,
                             timeout=600)
        assert res.returncode == 0, f"asv {args[0]} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"

    asv("machine", "--yes", "--machine", "docs-test")
    asv("run", "--python=same", "--quick", "--machine", "docs-test",
        "--set-commit-hash", head.stdout.strip(), "--bench", "TrackModuliChoice|TimePlan")
    res = subprocess.run([sys.executable, str(REPO / "asv_bench" / "publish.py"),
                          "--config", str(conf)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    html = tmp_path / "html"
    assert not _external_assets((html / "index.html").read_text(encoding="utf-8"))

    with serve(html) as (server, url):
        dom = render(url, tmp_path / "p1")
        assert "continental origin of swallow" not in dom, "dashboard scripts failed to load"
        assert "TrackModuliChoice.track_fp64_moduli" in dom
        assert dom.count("benchmark-container") >= 5
        dom = render(url + "#accuracy.TrackModuliChoice.track_fp64_moduli", tmp_path / "p2")
        assert "<canvas" in dom, "no graph drawn"
        assert "mode-accurate" in dom  # the graph legend
        # benchmarks that were not run have no graph files (404): asv expects that
        failed = [(p, code) for p, code in server.requests
                  if code not in (200, 304) and not p.startswith("/graphs/")]
        assert not failed, failed
