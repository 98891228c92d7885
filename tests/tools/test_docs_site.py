"""The user guide and the asv dashboard render in a real browser, with no network.

Builds the MkDocs site with ``mkdocs build --strict``, serves it on 127.0.0.1 from a
thread, and renders pages in headless Chromium (Debian's ``chromium`` package): the
formulae must come out as KaTeX markup (with the KaTeX fonts fetched from the site
itself) and the plots must be fetched by the browser. The same for the asv dashboard
built by ``asv publish`` (through ``asv_bench/publish.py``, which makes it offline).

Every built page is also opened in Chromium with a small probe injected by the test
server: a console error, an uncaught exception, a resource that fails to load, an image
with ``naturalWidth == 0`` or a code block cut off on the right fails the test. The
built HTML must hold no raw Sphinx role (``:func:`` ...): the docstrings' roles are
converted at build time (``docs/hooks/sphinx_roles.py``), and the plots are drawn from
``docs/data/`` at build time (``docs/hooks/plots.py``).

Skipped when Chromium, MkDocs or asv is missing here; CI installs them (``.ci/docs``).
"""

from __future__ import annotations

import functools
import io
import html as html_lib
import http.server
import importlib.util
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


# Injected first into every HTML page when the server is asked to probe: records console
# errors, uncaught exceptions, failed resource loads, the images' natural widths and the
# code blocks wider than their box, then writes them as JSON into the page for
# --dump-dom to read.
PROBE = """<script>(function () {
  var errors = [];
  var origError = console.error;
  console.error = function () {
    errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    return origError.apply(console, arguments);
  };
  window.addEventListener("error", function (e) {
    var t = e.target;
    if (t && t !== window && (t.src || t.href)) {
      errors.push("failed to load: " + (t.src || t.href));
    } else {
      errors.push("uncaught: " + e.message);
    }
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    errors.push("unhandled rejection: " + e.reason);
  });
  window.addEventListener("load", function () {
    setTimeout(function () {
      var images = Array.prototype.map.call(document.images, function (i) {
        return {src: i.currentSrc || i.src, naturalWidth: i.naturalWidth};
      });
      var cut = Array.prototype.filter.call(
        document.querySelectorAll("pre > code"),
        function (c) { return c.scrollWidth > c.clientWidth + 1; }
      ).map(function (c) { return c.textContent.slice(0, 80); });
      var out = document.createElement("script");
      out.type = "application/json";
      out.id = "__probe_report";
      out.textContent = JSON.stringify({errors: errors, images: images, cut: cut});
      document.body.appendChild(out);
    }, 500);
  });
})();</script>"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files; remembers every (path, status) it answered. With
    ``server.probe`` set, HTML pages are served with :data:`PROBE` injected."""

    def send_head(self):
        if getattr(self.server, "probe", False):
            path = Path(self.translate_path(self.path))
            if path.is_dir() and self.path.split("?")[0].endswith("/"):
                path = path / "index.html"
            if path.suffix == ".html" and path.is_file():
                body = path.read_bytes().replace(b"<head>", b"<head>" + PROBE.encode(), 1)
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return io.BytesIO(body)
        return super().send_head()

    def log_request(self, code="-", size="-"):
        self.server.requests.append((self.path.split("?")[0], int(code)))

    def log_message(self, *args):  # keep pytest's output clean
        pass


@contextmanager
def serve(directory, *, probe=False):
    """An HTTP server for ``directory`` on 127.0.0.1 (free port), in a thread; with
    ``probe``, HTML pages get :data:`PROBE`."""
    handler = functools.partial(_Handler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requests = []
    server.probe = probe
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
    pytest.importorskip("matplotlib")  # docs/hooks/plots.py draws the plots
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                          "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stderr[-4000:]}"
    return out


def _guide_pages(site):
    """The site's own HTML pages: everything but the asv dashboard published under
    ``asv/`` (asv's pages, checked by the dashboard's own test below)."""
    return [p for p in site.rglob("*.html") if p.relative_to(site).parts[0] != "asv"]


# The guide pages users look for, by their exact titles (mkdocs.yml's nav).
TITLED_PAGES = {
    "gpu-requirements": "GPU requirements",
    "limitations": "Limitations and FAQ",
    "comparison": "Comparison with other libraries",
}


def test_site_has_every_page_and_loads_nothing_from_outside(site):
    for page in ("index.html", "how-it-works/index.html", "precision/index.html",
                 "performance/index.html", "configuration/index.html",
                 "intercepted/index.html", "seed-scheme/index.html",
                 "reproducibility/index.html", "troubleshooting/index.html",
                 "api/index.html", "spec/index.html", "changelog/index.html",
                 "data/index.html", "gpu-kernels/index.html",
                 "architecture/index.html", "development/index.html",
                 "benchmark-log/index.html", "asv/index.html",
                 *(f"{slug}/index.html" for slug in TITLED_PAGES)):
        assert (site / page).is_file(), page
    for html in _guide_pages(site):
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


def test_guide_pages_have_their_titles_in_page_and_nav(site):
    home = (site / "index.html").read_text(encoding="utf-8")
    for slug, title in TITLED_PAGES.items():
        page = (site / slug / "index.html").read_text(encoding="utf-8")
        h1 = re.search(r"<h1[^>]*>(.*?)</h1>", page, flags=re.S)
        assert h1, slug
        text = re.sub(r'<a class="headerlink".*?</a>', "", h1.group(1), flags=re.S)
        assert html_lib.unescape(re.sub(r"<[^>]+>", "", text)).strip() == title, slug
        # the navigation links the page under exactly that title
        link = re.search(rf'href="{slug}/"[^>]*>\s*<span class="md-ellipsis">\s*'
                         rf"{re.escape(title)}\s*</span>", home)
        assert link, f"no nav entry {title!r} -> {slug}/"


# A Sphinx role as Markdown renders it (":func:" then a code span), or left raw.
RAW_ROLE = re.compile(r":(?:py:)?[a-z]+:(?:<code>|`)")


def _prose(text):
    """A page without its code blocks (a role shown *as code* is fine there)."""
    return re.sub(r"<pre\b.*?</pre>", "", text, flags=re.S)


def test_no_raw_sphinx_role_in_the_site(site):
    raw = {}
    for page in _guide_pages(site):
        found = RAW_ROLE.findall(_prose(page.read_text(encoding="utf-8")))
        if found:
            raw[str(page.relative_to(site))] = found[:5]
    assert not raw, f"raw Sphinx roles in the built site: {raw}"
    # ... and the roles became links to the objects the API page documents
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for anchor in ("#ozaki_backend.matmul", "#ozaki_backend.enable",
                   "#ozaki_backend.testing.exact_matmul"):
        assert re.search(rf'<a class="autorefs autorefs-internal"[^>]*href="{anchor}"',
                         api), anchor


def _load_script(path, name):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sphinx_role_conversion():
    pytest.importorskip("griffe")
    roles = _load_script("docs/hooks/sphinx_roles.py", "_sphinx_roles")
    full = {"matmul": "pkg.api.matmul", "Plan.resolve": "pkg.plan.Plan.resolve",
            ".tuning": "pkg.cuda.tuning"}.get
    conv = lambda text: roles.convert_roles(text, lambda t: full(t, t))  # noqa: E731
    assert conv("see :func:`matmul`.") == (
        'see <autoref identifier="pkg.api.matmul" optional><code>matmul</code>'
        "</autoref>.")
    assert conv(":meth:`Plan.resolve`") == (
        '<autoref identifier="pkg.plan.Plan.resolve" optional>'
        "<code>Plan.resolve</code></autoref>")
    # ~ shows the last component, a leading dot is dropped from the text
    assert ">resolve</code>" in conv(":py:meth:`~Plan.resolve`")
    assert conv(":mod:`.tuning`") == (
        '<autoref identifier="pkg.cuda.tuning" optional><code>tuning</code></autoref>')
    assert conv(":class:`!NoLink`") == "<code>NoLink</code>"
    assert conv(":func:`the product <matmul>`") == (
        '<autoref identifier="pkg.api.matmul" optional><code>the product</code>'
        "</autoref>")
    assert conv(":math:`2^{k}`") == "$2^{k}$"
    assert conv(":ref:`Precision <precision-guide>`") == "<code>Precision</code>"
    assert conv(":envvar:`OZAKI_BACKEND`") == "<code>OZAKI_BACKEND</code>"
    assert conv("a :data:`x<y>` b") == (
        'a <autoref identifier="y" optional><code>x</code></autoref> b')
    assert conv("no roles: a:b `c` ::") == "no roles: a:b `c` ::"
    assert not RAW_ROLE.search(conv(":func:`a` :class:`b` :attr:`c` :exc:`d`"))


def test_numpydoc_entries_are_tidied_for_griffe():
    pytest.importorskip("griffe")
    roles = _load_script("docs/hooks/sphinx_roles.py", "_sphinx_roles")
    doc = "\n".join([
        "Summary.", "", "Parameters", "----------",
        "m, n : int", "    Shape.", "", "    More.",
        "precision, bits", "    As for :func:`matmul`.",
        "a : :class:`~.scaling.Side` of rows", "    Side.",
        "", "Returns", "-------", "ndarray, or (ndarray, ndarray) with ``bound``",
        "    Product.", "", "Attributes", "----------", "m, n : int", "    Kept.", ""])
    assert roles.tidy_numpydoc(doc).split("\n") == [
        "Summary.", "", "Parameters", "----------",
        "m : int", "    Shape.", "", "    More.",
        "n : int", "    Shape.", "", "    More.",
        "precision", "    As for :func:`matmul`.",
        "bits", "    As for :func:`matmul`.",
        "a : Side of rows", "    Side.",
        "", "Returns", "-------", "ndarray, or (ndarray, ndarray) with bound",
        "    Product.", "", "Attributes", "----------", "m, n : int", "    Kept.", ""]


def test_api_page_parameter_defaults_and_types(site):
    """Each parameter of ``plan`` shows its own default (griffe gives every name of a
    combined ``a, b : T`` entry the first one's), and no type shows raw backticks."""
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    start = api.index('id="ozaki_backend.plan.plan"')
    rows = re.findall(r'<tr class="doc-section-item">(.*?)</tr>',
                      api[start:start + 20000], flags=re.S)
    cells = {}
    for row in rows:
        text = [html_lib.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        cells.setdefault(text[0], text)
    assert cells["precision"][-1] == "'fp64'" and cells["bits"][-1] == "None"
    assert cells["mode"][-1] == "'accurate'" and cells["engine"][-1] == "'auto'"
    types = re.findall(r'<td[^>]*>\s*<code>(.*?)</code>', api, flags=re.S)
    assert not [t for t in types if "`" in t], "raw backticks in a type"


def test_sphinx_roles_resolve_like_sphinx():
    griffe = pytest.importorskip("griffe")
    roles = _load_script("docs/hooks/sphinx_roles.py", "_sphinx_roles")
    pkg = griffe.load("ozaki_backend", search_paths=[str(REPO)],
                      resolve_aliases=False)
    resolver = roles.ScopeResolver(pkg)
    cert = pkg["spec.certificate"]
    # a leading dot: relative to the module's package
    assert resolver.resolve(cert, ".rules.guaranteed_bits") == \
        "ozaki_backend.spec.rules.guaranteed_bits"
    # a method named from its class's scope
    plan = pkg["plan.Plan"]
    assert resolver.resolve(plan["matmul"], "moduli_for") == \
        "ozaki_backend.plan.Plan.moduli_for"
    # outside the package: unchanged
    assert resolver.resolve(plan, "numpy.matmul") == "numpy.matmul"


def _newest_with(kind_of):
    """The newest docs/data file (date, then the run letter of the day) that
    ``kind_of(document)`` accepts, found here independently of make_plots.py."""
    import re as _re

    found = []
    for path in sorted((REPO / "docs" / "data").glob("*.json")):
        doc = json.loads(path.read_text())
        if kind_of(doc):
            letter = _re.search(r"\d{4}-\d{2}-\d{2}-([a-z])\.json$", path.name)
            found.append(((str(doc["date"]), letter.group(1) if letter else "",
                           len(doc.get("records", ()))), path.name))
    return max(found)[1] if found else None


def _is_gpu_bench(doc):
    return doc.get("schema") == "ozaki_backend-bench/1" and doc["machine"].get("gpu") and any(
        r["kind"] == "time" and r.get("io") == "device" and r["impl"] == "ozaki_backend"
        and r["m"] == r["n"] == r["k"] for r in doc["records"])


def _is_host_bench(doc):
    return doc.get("schema") == "ozaki_backend-bench-host/1" and any(
        len(set(r["shape"])) == 1 for r in doc.get("grid", ()))


def test_plots_are_drawn_from_the_data(site, tmp_path):
    """The site's plots are what make_plots.py draws from docs/data now; each from one
    run, the newest holding its data, and its legend names the moduli counts that run
    used."""
    pytest.importorskip("matplotlib")
    plots = _load_script("scripts/make_plots.py", "_make_plots")
    assert plots.main(["--out", str(tmp_path)]) == 0
    for name in plots.PLOTS:
        fresh = tmp_path / name
        if fresh.is_file():
            assert (site / "img" / name).read_bytes() == fresh.read_bytes(), name
    assert plots.SOURCES["gpu_tflops_vs_size.png"] == _newest_with(_is_gpu_bench)
    assert plots.SOURCES["end_to_end_vs_numpy.png"] == _newest_with(_is_host_bench)
    gpu = json.loads((REPO / "docs" / "data" /
                      plots.SOURCES["gpu_tflops_vs_size.png"]).read_text())
    counts = sorted({r["moduli"] for r in gpu["records"] if r["kind"] == "time"
                     and r["impl"] == "ozaki_backend" and r.get("precision") == "fp64"
                     and r.get("io") == "device" and r["m"] == r["n"] == r["k"]})
    note = f"({counts[0]} moduli)" if len(counts) == 1 else f"({counts[0]}-{counts[-1]} moduli)"
    legend = plots.LEGENDS["gpu_tflops_vs_size.png"]
    assert any("precision=fp64" in t and note in t for t in legend), (note, legend)
    # one run per plot: no legend entry carries a date of its own
    for name, texts in plots.LEGENDS.items():
        assert not any(re.search(r"\d{4}-\d{2}-\d{2}", t) for t in texts), (name, texts)


def _code_blocks(text):
    """(info string, lines) of every fenced code block of a Markdown text."""
    return [(m.group(1).strip(), m.group(2).splitlines())
            for m in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, flags=re.S | re.M)]


def test_doc_code_lines_fit_88_columns():
    """Code in the guide stays readable without scrolling: every line of a code
    block is at most 88 columns (``text`` blocks and a doctest's expected output are
    program output, verbatim)."""
    long = []
    for path in sorted((REPO / "docs").rglob("*.md")):
        for info, lines in _code_blocks(path.read_text(encoding="utf-8")):
            if info == "text":
                continue
            if lines and lines[0].startswith(">>>"):
                lines = [line for line in lines if line.startswith((">>>", "..."))]
            long += [f"{path.relative_to(REPO)}: {line}" for line in lines
                     if len(line) > 88]
    assert not long, "\n".join(long)


def test_readme_and_getting_started_agree_on_the_install_commands():
    def commands(path):
        text = (REPO / path).read_text(encoding="utf-8")
        return {line.strip() for _, lines in _code_blocks(text) for line in lines
                if "pip install" in line}
    readme, start = commands("README.md"), commands("docs/index.md")
    assert readme and readme == start, (readme, start)


def _probe(url, profile_dir):
    dom = render(url, profile_dir)
    m = re.search(r'<script type="application/json" id="__probe_report">(.*?)</script>',
                  dom, flags=re.S)
    assert m, f"{url}: the page's probe never reported (scripts blocked?)"
    return json.loads(m.group(1))  # a script element's text is serialised verbatim


@needs_chromium
def test_every_page_renders_without_errors_in_chromium(site, tmp_path):
    """Each built page in headless Chromium: no console error, no uncaught exception,
    no resource that fails to load, no image with naturalWidth 0, no code block cut
    off on the right."""
    from concurrent.futures import ThreadPoolExecutor

    pages = sorted(str(p.parent.relative_to(site)).replace(".", "") for p in
                   _guide_pages(site) if p.name == "index.html")
    pages = [p + "/" if p else "" for p in pages]
    assert len(pages) >= 18, pages
    with serve(site, probe=True) as (server, url):
        with ThreadPoolExecutor(max_workers=3) as pool:
            reports = dict(zip(pages, pool.map(
                lambda p: _probe(url + p, tmp_path / ("prof-" + p.replace("/", "_"))),
                pages)))
        failed = [(path, code) for path, code in server.requests if code >= 400]
    problems = {}
    for page, rep in reports.items():
        bad = list(rep["errors"])
        bad += [f"image not drawn: {i['src']}" for i in rep["images"]
                if i["naturalWidth"] == 0]
        bad += [f"code block cut off: {c!r}" for c in rep["cut"]]
        if bad:
            problems[page or "/"] = bad
    assert not problems, json.dumps(problems, indent=1)
    assert not failed, failed
    # the pages with plots really showed them
    plotted = {p: [i["src"].rsplit("/", 1)[-1] for i in r["images"]]
               for p, r in reports.items()}
    assert "accuracy_vs_moduli.png" in plotted["precision/"]
    assert {"gpu_tflops_vs_size.png", "end_to_end_vs_numpy.png",
            "cpu_time_vs_size.png"} <= set(plotted["performance/"])


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
        "--set-commit-hash", head.stdout.strip(),
        "--bench", "TrackModuliChoice|TrackExpectedModuli|TimePlan")
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
