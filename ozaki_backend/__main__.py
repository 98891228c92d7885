"""Command line: ``python -m ozaki_backend {demo,bench,info,run,tune}`` (also installed
as ``ozaki-backend``).

One :mod:`argparse` parser with a sub-command each; every sub-command's options are
defined in the module that owns its subject (``add_arguments``) and run there
(``run``); this file only assembles them. ``-V``/``--version`` prints the version; no
command or an unknown one prints the usage and exits with status 2; a bad option or
value of a command is one line naming it (:class:`ozaki_backend._cli.Parser`), also
exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ._cli import Parser

#: name -> (module, options function, run function, one-line help)
COMMANDS = {
    "demo": ("ozaki_backend.demo", "add_arguments", "run",
             "multiply a few real-sized matrices: engine, moduli, error and time vs NumPy"),
    "bench": ("ozaki_backend.bench", "add_arguments", "run",
              "GPU benchmark table (native DGEMM vs emulation, phases, accuracy)"),
    "info": ("ozaki_backend.dispatch.cli", "add_info_arguments", "info",
             "GPU, CuPy, thresholds, moduli table and what is intercepted (--json: "
             "ozaki_backend.info())"),
    "run": ("ozaki_backend.dispatch.cli", "add_run_arguments", "run",
            "run a script, -m module or -c code with the backend enabled"),
    "tune": ("ozaki_backend.tune", "add_arguments", "run",
             "measure the fastest GEMM path per shape on this GPU (written to the user "
             "cache)"),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m ozaki_backend`` parser with every sub-command."""
    from ._version import __version__

    ap = Parser(
        prog="python -m ozaki_backend", usage_on_error=True,
        description="FP64 matrix products from INT8 tensor cores (Ozaki scheme II + CRT).")
    ap.add_argument("-V", "--version", action="version",
                    version=f"ozaki_backend {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True,
                            title="commands")
    for name, (module, add, _run, text) in COMMANDS.items():
        mod = importlib.import_module(module)
        doc = (mod.__doc__ or "").strip().split("\n\n")[0]
        description = getattr(mod, "DESCRIPTIONS", {}).get(name) or \
            doc.split(": ", 1)[-1].replace("``", "")
        p = sub.add_parser(name, help=text, description=description)
        if name == "run":
            p.usage = ("python -m ozaki_backend run [options] (script.py | -m MODULE | "
                       "-c CODE) [args ...]")
        getattr(mod, add)(p)
        p.set_defaults(_parser=p)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (``sys.argv[1:]`` by default) and run the sub-command.

    Returns
    -------
    int
        The sub-command's exit status (``run``: the program's); 2 for a usage error
        (argparse exits with it).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    program_args = []
    if argv and argv[0] == "run":
        # The program's own arguments are not run's: split them off before parsing.
        from .dispatch.cli import split_run_argv

        own, program_args = split_run_argv(argv[1:])
        argv = ["run"] + own
    if argv[:1] == ["bench"] and "--host" in argv[1:]:
        # The host-path benchmark has options of its own (ozaki_backend.bench_host).
        from .bench_host import main as host_main

        return host_main([a for a in argv[1:] if a != "--host"])
    if argv[:1] == ["bench"] and "--gpu-arrays" in argv[1:]:
        # So has the GPU-array benchmark (ozaki_backend.bench_gpu_arrays).
        from .bench_gpu_arrays import main as arrays_main

        return arrays_main([a for a in argv[1:] if a != "--gpu-arrays"])
    ap = build_parser()
    args, extra = ap.parse_known_args(argv)
    if extra:
        # Reported by the command's own parser: one line that names the command.
        args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    module, _add, run, _text = COMMANDS[args.command]
    fn = getattr(importlib.import_module(module), run)
    if args.command == "run":
        args.program_args = program_args
        return fn(args, args._parser) or 0
    if args.command == "bench":
        return fn(args, argv[1:]) or 0
    return fn(args) or 0


if __name__ == "__main__":
    sys.exit(main())
