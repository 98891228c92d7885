"""``python -m ozaki_backend run ...`` and ``python -m ozaki_backend info``.

The package's ``__main__`` calls :func:`run_main` and :func:`info_main` with the
arguments after the sub-command; both return the process exit status. The top of
the dispatch layers: it uses ``env`` and reads every layer below (imported inside the
functions, so that ``python -m ozaki_backend`` stays quick to start).
"""

from __future__ import annotations

import argparse
import os
import sys

RUN_DESCRIPTION = """\
Run an unmodified program with the backend enabled process-wide (like OZAKI_BACKEND=1,
without relying on the .pth start-up hook). Child processes inherit the setting through
the OZAKI_BACKEND* environment variables, which this command sets. The options override
the OZAKI_BACKEND_<KEY> variables (docs/configuration.md); everything after the script
(or -m module, -c code) goes to the program. The exit status is the program's."""

INFO_DESCRIPTION = """\
Print the GPU, CuPy version, routing thresholds and cost model, the moduli table and
what is intercepted. Imports CuPy (to look for a GPU) and SciPy, unlike the package."""

#: Sub-command descriptions for ``python -m ozaki_backend``.
DESCRIPTIONS = {"run": RUN_DESCRIPTION, "info": INFO_DESCRIPTION}

_ENGINES = ("auto", "cpu", "cuda")
#: ``run`` options that take a value (the program's own arguments start after them).
_RUN_VALUE_OPTS = ("--engine", "--precision", "--bits", "--moduli", "--mode", "--scheme",
                   "--emulation", "--min-size", "--workspace", "--log")


def _min_size(text):
    """``--min-size``: an int, or ``"auto"`` (the cost model)."""
    from .env import _parse

    try:
        value = _parse("min_size", text.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return "auto" if value is None else value


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``run`` options (shared by :func:`run_main` and ``python -m ozaki_backend``)."""
    ap.add_argument("--engine", type=str.lower, choices=_ENGINES,
                    help="engine of routed products (default auto)")
    ap.add_argument("--precision", type=str.lower, choices=("fp64",),
                    help="target accuracy (default fp64: native-level, per product)")
    ap.add_argument("--bits", type=int, metavar="N",
                    help="keep at least N bits of each row's largest element instead")
    ap.add_argument("--moduli", type=int, metavar="N",
                    help="use exactly N moduli (2..20) instead")
    ap.add_argument("--mode", type=str.lower, choices=("accurate", "fast"),
                    help="scaling rule (default accurate)")
    ap.add_argument("--scheme", type=str.lower, choices=("ozaki2", "phase22"),
                    help="emulation scheme (default ozaki2)")
    ap.add_argument("--emulation", type=str.lower, choices=("performant", "eager"),
                    help="CUDA engine: performant (default) takes the GPU's DGEMM where "
                         "it is cheaper than the emulation; eager always emulates")
    ap.add_argument("--residual", action="store_const", const=True, default=None,
                    help="phase22 only: add the seed's FP64 correction of the tails")
    ap.add_argument("--min-size", type=_min_size, metavar="N|auto",
                    help="smallest m*n*k routed (0: every eligible product; auto: the "
                         "cost model decides)")
    ap.add_argument("--workspace", metavar="SIZE",
                    help="device workspace budget: bytes or a size like 16GiB")
    ap.add_argument("--stats", action="store_true",
                    help="print stats() to stderr when the program ends")
    ap.add_argument("--log", metavar="LEVEL",
                    help="log the 'ozaki_backend' logger to stderr at LEVEL (debug shows "
                         "every routing decision)")
    target = ap.add_mutually_exclusive_group()
    target.add_argument("-m", dest="module", metavar="MODULE",
                        help="run a module as a script, like python -m")
    target.add_argument("-c", dest="code", metavar="CODE",
                        help="run a code string, like python -c")
    ap.add_argument("script", nargs="?", help="the program file to run")


def split_run_argv(argv):
    """``(run's own arguments, the program's arguments)``: the program's start after
    the script, ``-m MODULE`` or ``-c CODE`` (``--`` ends run's options)."""
    argv = list(argv)
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-m", "-c"):
            return argv[:i + 2], argv[i + 2:]
        if a == "--":
            return argv[:i + 2], argv[i + 2:]
        if a.startswith("-") and a != "-":
            i += 2 if (a in _RUN_VALUE_OPTS) else 1
            continue
        return argv[:i + 1], argv[i + 1:]
    return argv, []


def _run_parser():
    ap = argparse.ArgumentParser(prog="python -m ozaki_backend run",
                                 usage="%(prog)s [options] (script.py | -m MODULE | -c CODE)"
                                       " [args ...]",
                                 description=RUN_DESCRIPTION)
    add_run_arguments(ap)
    return ap


def run_main(argv) -> int:
    """Run a script, module or code string with the backend enabled.

    Parameters
    ----------
    argv : list of str
        The arguments after ``run``: ``[options] (script.py | -m module | -c code)
        [args ...]``.

    Returns
    -------
    int
        The program's exit status (``SystemExit`` codes are returned, not raised);
        2 for a usage error; 0 after ``--help``. An exception escaping the program
        propagates (the interpreter prints its traceback, status 1).
    """
    own, rest = split_run_argv(argv)
    ap = _run_parser()
    try:
        args = ap.parse_args(own)
    except SystemExit as exc:   # --help (0) or a usage error (2, printed by argparse)
        return 0 if not exc.code else 2
    args.program_args = rest
    return run(args, ap)


def run(args, parser=None) -> int:
    """``run`` with parsed arguments (:func:`add_run_arguments`'s, plus
    ``program_args``); returns the program's exit status.

    Notes
    -----
    Process-wide: calls :func:`ozaki_backend.enable` (installing the interception
    layer), sets ``OZAKI_BACKEND=1`` and ``OZAKI_BACKEND_<KEY>`` in ``os.environ`` so
    that child processes are routed too, and replaces ``sys.argv`` / ``sys.path[0]``
    as ``python script.py`` would. Invalid ``OZAKI_BACKEND_*`` variables are warned
    about (:class:`~ozaki_backend.ConfigurationWarning`) and the program runs natively.
    """
    from . import config as _config
    from . import env as _env
    from .scopes import enable

    def usage_error(msg):
        if parser is not None:
            parser.print_usage(sys.stderr)
        sys.stderr.write(f"python -m ozaki_backend run: error: {msg}\n")
        return 2

    chosen = [k for k in ("module", "code", "script") if getattr(args, k) is not None]
    if not chosen:
        return usage_error("nothing to run: give script.py, -m MODULE or -c CODE")
    if len(chosen) > 1:
        return usage_error("give one of script.py, -m MODULE and -c CODE")
    kind = {"module": "-m", "code": "-c", "script": "script"}[chosen[0]]
    target = getattr(args, chosen[0])
    if kind == "script" and not os.path.exists(target):
        return usage_error(f"can't open file {target!r}")
    over = {k: getattr(args, k) for k in ("engine", "precision", "bits", "moduli", "mode",
                                          "scheme", "emulation", "residual", "workspace")
            if getattr(args, k) is not None}
    if args.min_size is not None:
        over["min_size"] = None if args.min_size == "auto" else args.min_size
    try:
        _config.Config.build(None, over, "run")
        if args.log:
            _env.setup_logging(args.log)
    except (TypeError, ValueError) as exc:
        return usage_error(str(exc))
    found = _env.report_problems()
    if any(name in ("config", _env.ENV) for name, _ in found):
        cfg = None   # warned: the program runs natively
    else:
        cfg = dict(_env.config_from_environ(), **over)
        try:
            _config.Config.build(None, cfg, "run")
        except (TypeError, ValueError) as exc:
            return usage_error(str(exc))
    if cfg is not None:
        enable(**cfg)
        os.environ.update(_env.environ_for(cfg))
    want_stats = args.stats or (os.environ.get("OZAKI_BACKEND_STATS") or "").strip().lower() \
        in ("1", "true", "yes", "on")
    try:
        return _run_target(kind, target, args.program_args)
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


def add_info_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``info`` options (shared by :func:`info_main` and ``python -m ozaki_backend``)."""
    ap.add_argument("--json", action="store_true",
                    help="print ozaki_backend.info() as JSON instead of the text report")


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
    ap = argparse.ArgumentParser(prog="python -m ozaki_backend info",
                                 description=INFO_DESCRIPTION)
    add_info_arguments(ap)
    try:
        args = ap.parse_args(list(argv))
    except SystemExit as exc:
        return 0 if not exc.code else 2
    return info(args)


def info(args) -> int:
    """``info`` with parsed arguments; returns 0."""
    from .observe import info as _info

    info = _info()
    if args.json:
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
    bh = info["blas_hook"]
    w(f"BLAS hook   : {'installed' if bh.get('installed') else 'not installed'}"
      f" ({bh.get('reason') or ', '.join(bh.get('symbols') or []) or 'idle'})\n")
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
