"""``asv publish``, then make the dashboard work offline.

asv 0.6's dashboard (index.html) loads jQuery, flot, bootstrap and a few plugins from
public CDNs; on a machine without internet it shows only "Can not determine continental
origin of swallow". This script runs ``asv publish`` with the arguments it is given,
copies the copies shipped in ``asv_bench/vendor/`` into the published folder and points
every CDN ``<script>`` / ``<link>`` at them.

    cd asv_bench && python publish.py                 # = asv publish, offline-ready
    python asv_bench/publish.py --config PATH.json     # any asv publish arguments

It fails (exit 1) if a CDN reference is left that it has no local copy for, so an asv
upgrade that changes its dependencies is noticed instead of silently going online.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENDOR = os.path.join(HERE, "vendor")

#: CDN address (as asv 0.6.x writes it) -> file in vendor/.
LOCAL = {
    "https://code.jquery.com/jquery-3.3.1.min.js": "jquery-3.3.1.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js":
        "jquery.flot-0.8.3.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js":
        "jquery.flot.time-0.8.3.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js":
        "jquery.flot.selection-0.8.3.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js":
        "jquery.flot.categories-0.8.3.js",
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js":
        "jquery.flot.orderBars-1.0.0.js",
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js":
        "stupidtable-1.1.3.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js":
        "md5-2.19.0.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js":
        "bootstrap-3.1.1.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css":
        "bootstrap-3.1.1.min.css",
}

# A <script src=...> or <link href=...> tag that loads from http(s).
_TAG = re.compile(r'<(script|link)\b[^>]*?\b(?:src|href)="(https?://[^"]+)"[^>]*>', re.S)


def _html_dir(argv):
    """The html_dir of the asv config that ``asv publish argv`` will use."""
    conf = "asv.conf.json"
    if "--config" in argv:
        conf = argv[argv.index("--config") + 1]
    with open(conf) as f:
        text = re.sub(r"^\s*//.*$", "", f.read(), flags=re.M)  # asv allows // comments
    html = json.loads(text).get("html_dir", "html")
    return os.path.join(os.path.dirname(os.path.abspath(conf)), html)


def localize(html_dir):
    """Point the CDN tags of every .html file in ``html_dir`` at ``vendor/`` copies."""
    dest = os.path.join(html_dir, "vendor")
    os.makedirs(dest, exist_ok=True)
    missing = set()
    for name in sorted(os.listdir(html_dir)):
        if not name.endswith(".html"):
            continue
        path = os.path.join(html_dir, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()

        def repl(m):
            tag, url = m.group(1), m.group(2)
            local = LOCAL.get(url)
            if local is None:
                missing.add(url)
                return m.group(0)
            shutil.copy2(os.path.join(VENDOR, local), os.path.join(dest, local))
            if tag == "link":
                return f'<link rel="stylesheet" href="vendor/{local}">'
            # keep the onerror handler: a missing local file still shows asv's error page
            return f'<script src="vendor/{local}" onerror="js_load_failure()">'

        new = _TAG.sub(repl, text)
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    return missing


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    subprocess.run([sys.executable, "-m", "asv", "publish", *argv], check=True)
    missing = localize(_html_dir(argv))
    if missing:
        print("publish.py: no local copy for:\n  " + "\n  ".join(sorted(missing)),
              file=sys.stderr)
        return 1
    print("publish.py: dashboard uses local copies of its scripts (works offline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
