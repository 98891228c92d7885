"""Command line: ``python -m ozaki_backend {demo,bench,info,run,tune}``.

Each sub-command lives in the module that owns its subject; this file only routes.
"""

from __future__ import annotations

import sys

USAGE = """usage: python -m ozaki_backend COMMAND [ARGS]

commands:
  demo        multiply a few real-sized matrices; engine, moduli, error and time vs NumPy
  bench       GPU benchmark table (native DGEMM vs emulation, phases, accuracy)
  info        GPU, CuPy, thresholds, moduli table and what is intercepted
  run         run a script / -m module / -c code with the backend enabled
  tune        measure the fastest GEMM path (cuBLAS or fused kernel) per shape on this GPU
"""


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        from .demo import main as run
    elif cmd == "bench":
        from .bench import main as run
    elif cmd == "info":
        from .dispatch.cli import info_main as run
    elif cmd == "run":
        from .dispatch.cli import run_main as run
    elif cmd == "tune":
        from .tune import main as run
    else:
        print(f"unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
