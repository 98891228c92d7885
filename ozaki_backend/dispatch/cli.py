"""``python -m ozaki_backend run ...`` and ``python -m ozaki_backend info``.

The package's ``__main__`` calls :func:`run_main` and :func:`info_main` with the
arguments after the sub-command; both return the process exit status. The top of
the dispatch layers: it uses ``env`` and reads every layer below (imported inside the
functions, so that ``python -m ozaki_backend`` stays quick to start).
"""

from __future__ import annotations

import os
import sys

RUN_USAGE = """\
usage: python -m ozaki_backend run [options] (script.py | -m module | -c code) [args ...]

Run an unmodified program with the backend enabled process-wide (like OZAKI_BACKEND=1,
without relying on the .pth start-up hook). Child processes inherit the setting through
the OZAKI_BACKEND* environment variables, which this command sets.

options (override the OZAKI_BACKEND_<KEY> variables; see docs/configuration.md):
  --engine {auto,cpu,cuda}    --precision fp64         --bits N      --moduli N
  --mode {accurate,fast}      --scheme {ozaki2,phase22} --residual
  --min-size N|auto           smallest m*n*k routed (0: every eligible product)
  --stats                     print stats() to stderr when the program ends
  --log LEVEL                 log the 'ozaki_backend' logger to stderr (debug, info, ...)
  -h, --help                  show this help
"""

INFO_USAGE = """\
usage: python -m ozaki_backend info [--json]

Print the GPU, CuPy version, routing thresholds and cost model, the moduli table and
what is intercepted. Imports CuPy (to look for a GPU) and SciPy, unlike the package.
"""

_VALUE_OPTS = {"--engine": "engine", "--precision": "precision", "--bits": "bits",
               "--moduli": "moduli", "--mode": "mode", "--scheme": "scheme",
               "--min-size": "min_size", "--log": "log"}


class _UsageError(Exception):
    pass


def _parse_run(argv):
    """``(config overrides, flags, kind, target, args)`` from the ``run`` arguments."""
    cfg, flags = {}, {"stats": False, "log": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            raise SystemExit(0)
        if arg in ("-m", "-c"):
            if i + 1 >= len(argv):
                raise _UsageError(f"argument {arg}: expected one argument")
            return cfg, flags, arg, argv[i + 1], argv[i + 2:]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("--"):
            break
        name, eq, value = arg.partition("=")
        if name == "--stats" and not eq:
            flags["stats"] = True
        elif name == "--residual" and not eq:
            cfg["residual"] = True
        elif name in _VALUE_OPTS:
            if not eq:
                if i + 1 >= len(argv):
                    raise _UsageError(f"argument {name}: expected one argument")
                i += 1
                value = argv[i]
            key = _VALUE_OPTS[name]
            if key == "log":
                flags["log"] = value
            else:
                from .env import _parse

                try:
                    cfg[key] = _parse(key, value.strip())
                except ValueError as exc:
                    raise _UsageError(f"argument {name}: {exc}") from None
        else:
            raise _UsageError(f"unrecognized option {arg!r}")
        i += 1
    if i >= len(argv):
        raise _UsageError("nothing to run: give script.py, -m module or -c code")
    return cfg, flags, "script", argv[i], argv[i + 1:]


def run_main(argv) -> int:
    """Run a script, module or code string with the backend enabled.

    Parameters
    ----------
    argv : list of str
        The arguments after ``run``: ``[options] (script.py | -m module | -c code)
        [args ...]`` (see ``RUN_USAGE``).

    Returns
    -------
    int
        The program's exit status (``SystemExit`` codes are returned, not raised);
        2 for a usage or configuration error. An exception escaping the program
        propagates (the interpreter prints its traceback, status 1).

    Notes
    -----
    Process-wide: calls :func:`ozaki_backend.enable` (installing the interception
    layer), sets ``OZAKI_BACKEND=1`` and ``OZAKI_BACKEND_<KEY>`` in ``os.environ`` so
    that child processes are routed too, and replaces ``sys.argv`` / ``sys.path[0]``
    as ``python script.py`` would.
    """
    argv = list(argv)
    try:
        over, flags, kind, target, args = _parse_run(argv)
    except SystemExit:
        sys.stdout.write(RUN_USAGE)
        return 0
    except _UsageError as exc:
        sys.stderr.write(RUN_USAGE + f"\nozaki_backend run: error: {exc}\n")
        return 2

    from . import config as _config
    from . import env as _env
    from .scopes import enable

    if kind == "script" and not os.path.exists(target):
        sys.stderr.write(f"ozaki_backend run: error: can't open file {target!r}\n")
        return 2
    try:
        base = _env.config_from_environ()
        cfg = dict(base, **over)
        _config.Config.build(None, cfg, "run")
        _env.setup_logging(flags["log"])
    except (TypeError, ValueError) as exc:
        sys.stderr.write(f"ozaki_backend run: error: {exc}\n")
        return 2
    enable(**cfg)
    os.environ.update(_env.environ_for(cfg))
    want_stats = flags["stats"] or (os.environ.get("OZAKI_BACKEND_STATS") or "").strip().lower() \
        in ("1", "true", "yes", "on")
    try:
        return _run_target(kind, target, args)
    finally:
        if want_stats:
            from .observe import format_stats

            sys.stderr.write(format_stats() + "\n")


def _run_target(kind, target, args) -> int:
    import runpy

    try:
        if kind == "script":
            sys.argv = [target] + list(args)
            sys.path[0:0] = [os.path.dirname(os.path.abspath(target))]
            runpy.run_path(target, run_name="__main__")
        elif kind == "-m":
            sys.argv = [target] + list(args)  # runpy replaces argv[0] with the file
            sys.path[0:0] = [os.getcwd()]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c"] + list(args)
            sys.path[0:0] = [""]
            import types

            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            saved = sys.modules.get("__main__")
            sys.modules["__main__"] = main
            try:
                exec(compile(target, "<string>", "exec"), main.__dict__)
            finally:
                if saved is not None:
                    sys.modules["__main__"] = saved
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        sys.stderr.write(f"{code}\n")
        return 1
    return 0


def _info() -> dict:
    import importlib.util
    import platform

    import numpy as np

    from .._version import __version__
    from ..plan import Plan
    from ..registry import cuda_availability as availability
    from ..spec.moduli import MODULI
    from ..spec.rules import CERT_C, CERT_DIV, CERT_SMALL, CERT_SMALL_DIV, EXPECTED_BITS
    from . import config as _config
    from . import costmodel, loophook, numpy_wrappers, patches, routing
    from . import env as _env

    ok, why = availability()
    cupy = None
    if "cupy" in sys.modules:
        cupy = getattr(sys.modules["cupy"], "__version__", "?")
    try:
        import scipy

        scipy_version = scipy.__version__
    except ImportError:
        scipy_version = None
    node = _config.current()
    model = costmodel.cost_model()
    eng_auto, eng_why = routing.resolve_engine(_config.DEFAULT_CONFIG)
    cross = []
    for n in (256, 512, 1024, 2048, 4096, 8192, 16384):
        p = Plan(n, n, n)
        N = p.expected_moduli     # the estimate assumes ordinary data
        t_h = model.host_seconds(n, n, n)
        t_e = model.emulated_seconds(n, n, n, 1, p.n_gemms - (p.n_moduli - N) * p.k_split,
                                     N)
        cross.append({"n": n, "moduli": N, "host_ms": t_h * 1e3,
                      "emulated_ms": t_e * 1e3, "routed": model.routes(t_h, t_e)})
    env_vars = {k: v for k, v in os.environ.items() if k.startswith("OZAKI_BACKEND")}
    known = {_env.ENV, *_env.VARS.values(), *_env.EXTRA_VARS}
    return {
        "ozaki_backend": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy_version,
        "gpu": {"usable": ok, "detail": why},
        "cupy": cupy,
        "engine_auto": {"engine": eng_auto, "why": eng_why},
        "loop_hook": {"extension": loophook.available(),
                      "extension_path": loophook.extension_path(),
                      "installed_in_this_process": loophook.installed()},
        "state": {"enabled_here": node.enabled, "config": node.config.as_dict(),
                  "c_state": dict(zip(("active_scopes", "floor"), loophook.state()))},
        "cost_model": {"host_gflops": model.host_gflops, "host_source": model.host_source,
                       "rates": model.rates_source, "margin": model.margin,
                       **{k: getattr(model, k) for k in model.PARAMS},
                       "floor_mnk": model.floor(), "cubes": cross},
        "moduli": {"table": list(MODULI),
                   "fp64": {"rule": "per product, the fewest moduli whose certificate "
                                    "bounds the truncation error by c u |A||B|, c = "
                                    f"min(k-1, {CERT_C}, isqrt(k)/{CERT_DIV}) ("
                                    f"isqrt(k)/{CERT_SMALL_DIV} below {CERT_SMALL} "
                                    "elements); then the residual pass, then native",
                            "expected": {str(k): Plan(256, 256, k).expected_moduli
                                         for k in (64, 1024, 8192, 65536)},
                            "expected_bits": EXPECTED_BITS}},
        "intercepted": {
            "@ / np.matmul": "C inner-loop hook (float64 dd->d loop)",
            **{f"{m}.{a}": "module-level wrapper" for m, a, _, _ in numpy_wrappers.TARGETS},
            "scipy.linalg.blas.dgemm": "module-level wrapper (also scipy.linalg._fblas.dgemm)",
            "scipy.linalg.get_blas_funcs('gemm')": "returns the dgemm wrapper (memo cleared)",
        },
        "installed_wrappers": patches.installed_wrappers(),
        "not_intercepted": [
            "ndarray.dot (method of an immutable type)",
            "names bound before installation (from numpy import dot)",
            "NumPy/SciPy internals holding their own reference (np.cov, tensordot's dot)",
            "GEMMs inside LAPACK (solve, eig, qr, ...) and compiled extensions",
            "get_blas_funcs('gemm', ilp64=True) (scipy.linalg._fblas_64)",
            "float32, complex, integer, object products; ndarray subclasses",
        ],
        "environment": {k: {"value": v, "known": k in known} for k, v in env_vars.items()},
        "start_hook": {"pth_installed": importlib.util.find_spec("_ozaki_backend_start")
                       is not None},
    }


def info_main(argv) -> int:
    """Print what this process would do: GPU, CuPy, thresholds, moduli, interception.

    Parameters
    ----------
    argv : list of str
        The arguments after ``info``: ``[--json]``.

    Returns
    -------
    int
        0, or 2 for a usage error.
    """
    argv = list(argv)
    if argv and argv[0] in ("-h", "--help"):
        sys.stdout.write(INFO_USAGE)
        return 0
    as_json = "--json" in argv
    extra = [a for a in argv if a != "--json"]
    if extra:
        sys.stderr.write(INFO_USAGE + f"\nozaki_backend info: error: unrecognized "
                         f"arguments: {' '.join(extra)}\n")
        return 2
    info = _info()
    if as_json:
        import json

        sys.stdout.write(json.dumps(info, indent=2, default=str) + "\n")
        return 0
    w = sys.stdout.write
    w(f"ozaki_backend {info['ozaki_backend']}  (Python {info['python']}, NumPy "
      f"{info['numpy']}, SciPy {info['scipy'] or 'not installed'})\n")
    w(f"GPU         : {'yes' if info['gpu']['usable'] else 'no'} - {info['gpu']['detail']}\n")
    w(f"CuPy        : {info['cupy'] or 'not importable'}\n")
    w(f"engine=auto : {info['engine_auto']['engine']} ({info['engine_auto']['why']})\n")
    lh = info["loop_hook"]
    w(f"loop hook   : extension {'built' if lh['extension'] else 'MISSING'}"
      f"{' (' + lh['extension_path'] + ')' if lh['extension_path'] else ''}; installed in "
      f"this process: {lh['installed_in_this_process']}\n")
    w(f"start hook  : OZAKI_BACKEND=1 .pth hook "
      f"{'installed' if info['start_hook']['pth_installed'] else 'NOT installed'}\n")
    st = info["state"]
    w(f"this process: enabled={st['enabled_here']}  config={st['config']}\n")
    cm = info["cost_model"]
    w("\nrouting thresholds (min_size='auto', CUDA engine; docs/configuration.md)\n")
    w(f"  host BLAS {cm['host_gflops']:.1f} GFLOP/s ({cm['host_source']}); H2D "
      f"{cm['h2d_gbps']:g} GB/s, D2H {cm['d2h_gbps']:g} GB/s, INT8 {cm['int8_tops']:g} TOPS, "
      f"overhead {cm['overhead_s'] * 1e6:.0f} us\n")
    w(f"  rates: {cm['rates'] or 'defaults (python -m ozaki_backend tune measures them)'}; "
      f"routed when estimated {cm['margin']:.0%} faster\n")
    w(f"  floor (no product below is ever routed): m*n*k >= {cm['floor_mnk']}\n")
    w("      n  moduli   host ms  emulated ms  routed\n")
    for c in cm["cubes"]:
        w(f"  {c['n']:5d}  {c['moduli']:6d}  {c['host_ms']:8.2f}  {c['emulated_ms']:11.2f}  "
          f"{'yes' if c['routed'] else 'no'}\n")
    w("  with engine='cpu': every eligible product (you asked for the reference engine);\n"
      "  with engine='auto' and no GPU: none, unless min_size is set.\n")
    mod = info["moduli"]
    w(f"\nmoduli table ({len(mod['table'])}): {', '.join(map(str, mod['table']))}\n")
    fp = mod["fp64"]
    w(f"  precision='fp64': {fp['rule']}\n")
    w("    ordinary data, 256 x 256 outputs and larger (expected count): "
      + ", ".join(f"k={k}: {n}" for k, n in fp["expected"].items()) + "\n")
    w("\nintercepted inside a scope:\n")
    for k, v in info["intercepted"].items():
        w(f"  {k:40s} {v}\n")
    w("not intercepted:\n")
    for v in info["not_intercepted"]:
        w(f"  {v}\n")
    if info["environment"]:
        w("\nenvironment:\n")
        for k, v in info["environment"].items():
            w(f"  {k}={v['value']!r}{'' if v['known'] else '   (unknown variable: typo?)'}\n")
    return 0
