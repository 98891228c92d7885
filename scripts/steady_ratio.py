"""Native DGEMM and the emulation side by side in one loop, by entry point (issue 18).

    python scripts/steady_ratio.py [n | m,k,n ...]        (default: 4096 8192)

For N(0, 1) device operands of each shape: cuBLAS DGEMM, ``ob.matmul`` (the default
precision) and ``Plan(m, n, k, mode="accurate").matmul`` (what the bench times), each
with ``out=``, after kernel_timeline's warm-up, by ``provenance.median_device_time``
(5 warm-up calls, 7 timed), in three rounds that alternate them, so that clock drift touches all three alike. Printed
per round: the three times, the ratios to native, and the count guesses that were right
and wrong (cuda/pipeline.py GUESSES) and the prepare-stage graphs replayed.
"""

import sys

import cupy

import ozaki_backend as ob
from kernel_timeline import _warm_operands      # scripts/ is on sys.path
from ozaki_backend.cuda import graphs, pipeline
from ozaki_backend.provenance import median_device_time


def main(specs):
    for spec in specs or ["4096", "8192"]:
        (m, k, n), A, B, C = _warm_operands(spec)
        plan = ob.Plan(m, n, k, mode="accurate")
        for rnd in range(3):
            g0, r0 = dict(pipeline.GUESSES), graphs.COUNTS["replayed"]
            t_nat = median_device_time(lambda: cupy.matmul(A, B, out=C), 7, warmup=5)
            t_api = median_device_time(lambda: ob.matmul(A, B, out=C), 7, warmup=5)
            t_plan = median_device_time(lambda: plan.matmul(A, B, out=C), 7, warmup=5)
            right = pipeline.GUESSES["right"] - g0["right"]
            wrong = pipeline.GUESSES["wrong"] - g0["wrong"]
            print(f"{m}x{k}x{n} round {rnd}: native {t_nat * 1e3:.3f} ms, ob.matmul "
                  f"{t_api * 1e3:.3f} ({t_nat / t_api:.3f}x), Plan.matmul {t_plan * 1e3:.3f} "
                  f"({t_nat / t_plan:.3f}x); guesses right {right} wrong {wrong}, graph "
                  f"replays {graphs.COUNTS['replayed'] - r0}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
