"""Probe (issue 18): the CUTLASS INT8 GEMM with the mod-p epilogue (modp_gemm.cu) next to
the engine's cuBLAS products and CRT, on the device.

    python probe.py [LIB] [n | m,k,n ...]        (default: 4096 8192 16384, 15 moduli)

For each shape: N random int8 residue planes of A and B; first the bits — the CUTLASS
kernel's uint8 residues against (cuBLAS int32 products) mod p — then, medians of CUDA
events after warm-up: the N cuBLAS GEMMs into int32 planes, the CUTLASS batched GEMM
into uint8 residues (both tile configurations), and each followed by its CRT pass
(oz_crt2 on int32, oz_crt_u8 on uint8) into a float64 output — the quantity the product
pays.
"""
import ctypes
import sys

import cupy
import numpy as np

from ozaki_backend.cuda import crt, modgemm
from ozaki_backend.provenance import median_device_time
from ozaki_backend.spec.moduli import MODULI

lib_path = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].endswith(".so") else "./liboz_cutlass_modp.so"
specs = [a for a in sys.argv[1:] if not a.endswith(".so")] or ["4096", "8192", "16384"]
N = 15
lib = ctypes.CDLL(lib_path)
lib.oz_cutlass_modp_workspace.restype = ctypes.c_size_t
lib.oz_cutlass_modp_workspace.argtypes = [ctypes.c_int] * 5
lib.oz_cutlass_modp.restype = ctypes.c_int
i64, vp = ctypes.c_int64, ctypes.c_void_p
lib.oz_cutlass_modp.argtypes = [ctypes.c_int] * 3 + [vp, i64, i64, vp, i64, i64, vp, i64, i64,
                                                   vp] + [ctypes.c_int] * 4 + [vp, vp]
CONFIGS = ((0, "128x256x128 c2x1"), (1, "128x256x128 c1x2"), (2, "128x256x64 c2x1"))
SWIZZLES = (1, 2, 4, 8)
RASTERS = ((0, "heur"), (1, "M"), (2, "N"))


def cutlass_modp(config, RA, RB, D, moduli, m, n, k, swizzle=1, raster=0):
    ws_bytes = lib.oz_cutlass_modp_workspace(config, m, n, k, N)
    ws = cupy.empty(max(ws_bytes, 1), dtype=np.uint8)
    rc = lib.oz_cutlass_modp(config, swizzle, raster, RA.data.ptr, k, RA.strides[0],
                             RB.data.ptr, k, RB.strides[0], D.data.ptr, D.strides[1],
                             D.strides[0], moduli.data.ptr, m, n, k, N, ws.data.ptr,
                             cupy.cuda.get_current_stream().ptr)
    if rc:
        raise RuntimeError(f"oz_cutlass_modp returned {rc}")


def probe(spec):
    v = [int(x) for x in spec.split(",")]
    m, k, n = (v[0], v[0], v[0]) if len(v) == 1 else v
    rng = cupy.random.default_rng(0)
    RA = rng.integers(-128, 128, size=(N, m, k), dtype=np.int8)
    RB = rng.integers(-128, 128, size=(N, n, k), dtype=np.int8)
    moduli = cupy.asarray(np.array(MODULI[:N], dtype=np.int32))
    ldc = -(-n // 16) * 16
    C32 = cupy.empty((N, m, ldc), dtype=np.int32)
    D8 = cupy.empty((N, m, ldc), dtype=np.uint8)
    s = cupy.zeros(m, dtype=np.int32)
    t = cupy.zeros(n, dtype=np.int32)
    out = cupy.empty((m, n))
    modgemm.products_into(RA, RB, C32, N, m, n, k, strategy="loop")
    want = (C32[:, :, :n].astype(np.int64) % moduli[:, None, None]).astype(np.uint8)
    line = [f"{m}x{k}x{n}, {N} moduli:"]
    t_c = median_device_time(lambda: modgemm.products_into(RA, RB, C32, N, m, n, k,
                                                           strategy="loop"), 5, warmup=2)
    ops = 2.0 * m * n * k * N
    line.append(f"  cuBLAS loop GEMMs {t_c * 1e3:.3f} ms ({ops / t_c / 1e12:.0f} TOPS)")
    best = None
    for config, name in CONFIGS:
        try:
            D8.fill(0)
            cutlass_modp(config, RA, RB, D8, moduli, m, n, k)
            same = bool((D8[:, :, :n] == want).all())
        except Exception as exc:            # noqa: BLE001 — report and go on
            line.append(f"  CUTLASS {name}: {exc}")
            continue
        times = []
        for swz in SWIZZLES:
            for ras, rname in RASTERS:
                t_g = median_device_time(
                    lambda: cutlass_modp(config, RA, RB, D8, moduli, m, n, k, swz, ras), 5,
                    warmup=2)
                times.append(f"s{swz}{rname} {t_g * 1e3:.3f}")
                if best is None or t_g < best[0]:
                    best = (t_g, config, swz, ras, name)
        line.append(f"  CUTLASS {name}: bits {'equal' if same else 'DIFFER'}; GEMMs ms: "
                    + ", ".join(times))
    t_crt32 = median_device_time(lambda: crt.crt_into(C32, N, m, n, s, t, out), 5, warmup=2)
    t_crt8 = median_device_time(lambda: crt.crt_into(D8, N, m, n, s, t, out), 5, warmup=2)
    line.append(f"  CRT alone: int32 planes {t_crt32 * 1e3:.3f} ms, uint8 {t_crt8 * 1e3:.3f} ms")
    if best is not None:
        t_g, config, swz, ras, name = best
        t_gc = median_device_time(
            lambda: (cutlass_modp(config, RA, RB, D8, moduli, m, n, k, swz, ras),
                     crt.crt_into(D8, N, m, n, s, t, out)), 5, warmup=2)
        line.append(f"  best CUTLASS {name} swizzle {swz} raster {ras}: GEMMs "
                    f"{t_g * 1e3:.3f} ms ({t_c / t_g:.3f}x cuBLAS), GEMMs + CRT(u8) "
                    f"{t_gc * 1e3:.3f} ms")
    t_cc = median_device_time(lambda: (modgemm.products_into(RA, RB, C32, N, m, n, k,
                                                             strategy="loop"),
                                       crt.crt_into(C32, N, m, n, s, t, out)), 5, warmup=2)
    line.append(f"  cuBLAS GEMMs + CRT(int32) {t_cc * 1e3:.3f} ms")
    print("\n".join(line), flush=True)


for spec in specs:
    probe(spec)
