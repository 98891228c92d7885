"""The certificate's a-posteriori stage on the device, product by product (issue 32).

    python scripts/certificate_repairs.py [n:phi ...]      (default: 8192:2 16384:2)

For each ``n:phi`` (phi data ``(rand - 0.5) exp(phi randn)``, phi < 0: N(0, 1); CuPy
operands of n x n x n), one ``emulation="eager"`` product: the counts it was computed
with (``stats()["moduli"]``: more than one is an escalation, the product computed
again), its outcome, and the unsettled elements the a-posteriori test left against the
repair cap (``spec.repair_cap``; recorded by wrapping ``spec.repairable``, the one place
the pipeline asks). Then the eager and the default product's time next to cuBLAS DGEMM
(CUDA events, median of 3 after a warm-up). Where the unsettled elements exceed the cap
the product escalates: that is the cost the cap's share of the output avoids.
"""

import sys

import cupy

import ozaki_backend as ob
from ozaki_backend.provenance import median_device_time
from ozaki_backend.spec import certificate as spec

_asked = []
_repairable = spec.repairable


def _recording(n_elements, k, near_overflow=False, elements=0):
    _asked.append((n_elements, spec.repair_cap(k, elements)))
    return _repairable(n_elements, k, near_overflow, elements)


def main(args):
    spec.repairable = _recording
    for arg in args or ["8192:2", "16384:2"]:
        n_text, phi_text = arg.split(":")
        n, phi = int(n_text), float(phi_text)
        rng = cupy.random.default_rng(0)

        def draw(shape):
            if phi < 0:
                return rng.standard_normal(shape)
            return (rng.random(shape) - 0.5) * cupy.exp(phi * rng.standard_normal(shape))
        A, B = draw((n, n)), draw((n, n))
        out = cupy.empty((n, n))
        _asked.clear()
        ob.reset_stats()
        ob.matmul(A, B, out=out, engine="cuda", emulation="eager")
        cupy.cuda.Device().synchronize()
        st = ob.stats()
        asked = _asked[0] if _asked else (0, None)
        t_eager = median_device_time(
            lambda: ob.matmul(A, B, out=out, engine="cuda", emulation="eager"), 3)
        t_default = median_device_time(lambda: ob.matmul(A, B, out=out, engine="cuda"), 3)
        t_dgemm = median_device_time(lambda: cupy.matmul(A, B, out=out), 3)
        print(f"{n}^3 phi {phi:g}: counts {st['moduli']} outcome {st['certificate']} "
              f"unsettled {asked[0]} (cap {asked[1]}); eager {1e3 * t_eager:.2f} ms, "
              f"default {1e3 * t_default:.2f} ms, DGEMM {1e3 * t_dgemm:.2f} ms "
              f"({t_dgemm / t_default:.2f}x)", flush=True)
    spec.repairable = _repairable


if __name__ == "__main__":
    main(sys.argv[1:])
