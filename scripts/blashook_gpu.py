"""Issue 12 on a GPU machine: ``np.cov`` of 4096 x 50000 and ``X.dot(Y)`` at 8192, natively
and inside ``enabled()``, routed through NumPy's BLAS call-site hook to the CUDA engine.
Prints the times (best of ``--repeat``), the routed entry points and engines, and the
largest relative difference from NumPy's own result.

    python scripts/blashook_gpu.py [--repeat 3] [--engine auto]
"""

import argparse
import time

import numpy as np


def best(f, repeat):
    t, r = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = f()
        t = min(t, time.perf_counter() - t0)
    return t, r


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--engine", default="auto")
    args = p.parse_args()

    import ozaki_backend as ob
    from ozaki_backend.dispatch import blashook

    rng = np.random.default_rng(0)
    cases = {
        "np.cov 4096x50000": (lambda X: (lambda: np.cov(X)))(
            rng.standard_normal((4096, 50000))),
        "X.dot(Y) 8192": (lambda X, Y: (lambda: X.dot(Y)))(
            rng.standard_normal((8192, 8192)), rng.standard_normal((8192, 8192))),
    }
    ob.dispatch.install()
    print(blashook.describe())
    for name, f in cases.items():
        t_nat, r_nat = best(f, args.repeat)
        with ob.enabled(engine=args.engine):
            f()                      # warm-up (plans, kernels, transfers)
            ob.reset_stats()
            t_emu, r_emu = best(f, args.repeat)
            s = ob.stats()
        rel = float(np.max(np.abs(r_emu - r_nat)) / np.max(np.abs(r_nat)))
        print(f"{name}: native {t_nat:.3f} s, enabled() {t_emu:.3f} s "
              f"(x{t_nat / t_emu:.2f}); routed {s['routed']} by {s['routed_by_entry']}; "
              f"engines {sorted(s['reasons']['routed'])}; max |diff|/max|native| {rel:.2e}")


if __name__ == "__main__":
    main()
