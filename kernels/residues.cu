// Stage 2 — truncation and residues in one pass (docs/spec.md §3–4), mirrored by
// ozaki_backend/cuda/residues.py.
//
// Reads the float64 operand once (rows x cols view, any strides) and writes all N int8
// planes in the layout the TN GEMM wants: plane l is rows x kpad, row-major (k
// contiguous), columns cols..kpad-1 zeroed. The residues are unique integers, so this
// is bit-for-bit the reference whatever the method; the method (float64 digits with an
// integer fallback, chosen per warp) and its proof are in residue_digits.cuh.
#include "residue_digits.cuh"

// fl(1/p_l), round to nearest (exact for 256), in the order of oz_modulus. Hex literals,
// so that the values do not depend on how a compiler evaluates a division; in constant
// memory, so that each fma reads its factor from the constant bank.
__constant__ double oz_inv_tab[OZ_MAX_MODULI] = {
    0x1p-8,               0x1.0101010101010p-8, 0x1.03091b51f5e1ap-8, 0x1.05197f7d73404p-8,
    0x1.0953f39010954p-8, 0x1.0fef010fef011p-8, 0x1.12358e75d3033p-8, 0x1.19453808ca29cp-8,
    0x1.1e2ef3b3fb874p-8, 0x1.20b470c67c0d9p-8, 0x1.25e22708092f1p-8, 0x1.2e025c04b8097p-8,
    0x1.3698df3de0748p-8, 0x1.49539e3b2d067p-8, 0x1.4cab88725af6ep-8, 0x1.5390948f40febp-8,
    0x1.571ed3c506b3ap-8, 0x1.6a13cd1537290p-8, 0x1.6e1f76b4337c7p-8, 0x1.7ad2208e0ecc3p-8,
};

// The residue modulo p_L of the real table (oz_modulus, oz_inv_tab).
template <int L, int ND>
__device__ __forceinline__ u32 oz_fp_residue(const double (&d)[ND], const u32 (&w)[ND]) {
    return oz_fp_residue_of<oz_modulus(L), ND>(d, w, oz_inv_tab[L]);
}

// Residues of the J consecutive elements xs[0..J-1] of one row, all planes.
template <int ND, int J>
__device__ __forceinline__ void oz_write_fp(const double *xs, const OzScale<ND> &f, i8 *dst,
                                            i64 plane, int nmod) {
    double d[J][ND];
    u32 w[J][ND];
#pragma unroll
    for (int j = 0; j < J; ++j) oz_digits<ND>(xs[j], f, d[j], w[j]);
    oz_static_for<0, OZ_MAX_MODULI>([&](auto L) {
        constexpr int l = decltype(L)::value;
        if (l < nmod) {
            u32 r[J];
#pragma unroll
            for (int j = 0; j < J; ++j) r[j] = oz_fp_residue<l, ND>(d[j], w[j]);
            oz_store_bytes<J>(dst, r);
        }
        dst += plane;
    });
}

// Residues of the 4 consecutive elements xs[0..3] of one row, all planes.
__device__ __forceinline__ void oz_write_int(const double *xs, int s, i8 *dst, i64 plane,
                                             int nmod) {
    OzInt v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = oz_trunc_int(xs[j], s);
    oz_static_for<0, OZ_MAX_MODULI>([&](auto L) {
        constexpr int l = decltype(L)::value;
        constexpr u32 P = oz_modulus(l);
        if (l < nmod) {
            u32 word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                word |= ((u32)oz_int_residue<P>(v[j]) & 0xffu) << (8 * j);
            *reinterpret_cast<u32 *>(dst) = word;
        }
        dst += plane;
    });
}

// 4 blocks (32 warps) per SM: 64 registers. ptxas then spills ~40 bytes per thread, once,
// around the path branch (outside the per-modulus loops). (OZ_RES_THREADS, 3) would
// avoid that at 72-96 registers and 24 warps per SM.
extern "C" __global__ void __launch_bounds__(OZ_RES_THREADS, 4)
oz_residues(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols, int rows_fast,
            const int *__restrict__ S, int ks, int kpad, const int *__restrict__ shift,
            i8 *__restrict__ R, i64 plane, int nmod) {
    // shift may be null (the operand already holds integers: s = 0); S null: no
    // equilibration exponents.
    __shared__ double tile[OZ_TR][OZ_TK + 1];
    int row0 = blockIdx.y * OZ_TR, col0 = blockIdx.x * OZ_TK;
    oz_res_load_tile(tile, X, rs, cs, rows, cols, row0, col0, rows_fast, S, ks);
    __syncthreads();
    // Thread -> (row rr, 8 consecutive k at cl = 32 h + 8 q): one 8-byte store per plane.
    // A warp covers 8 rows x 32 columns: its shared reads tile[rr][cl + j] (row stride 65
    // doubles: bank pair (rr + 8 q + j) mod 16) hit 16 distinct bank pairs, two lanes
    // each, i.e. conflict-free; its stores are eight full 32-byte sectors per plane.
    int q = threadIdx.x & 3;
    int rr = ((threadIdx.x >> 2) & 7) + 8 * ((threadIdx.x >> 5) & 3);
    int cl = 32 * (threadIdx.x >> 7) + 8 * q;
    int gr = row0 + rr, c = col0 + cl;
    int s = (gr < rows && shift) ? shift[gr] : 0;
    double xs[8];
    u32 hmax = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        xs[j] = tile[rr][cl + j];                       // 0 outside the operand
        hmax = max(hmax, (u32)__double2hiint(xs[j]) & 0x7fffffffu);
    }
    int tier = oz_res_tier(hmax, s);
    // The path is voted per warp (uniform, no divergence); every lane takes part.
    bool t1 = __any_sync(0xffffffffu, tier >= 1);
    bool t2 = __any_sync(0xffffffffu, tier >= 2);
    bool t3 = __any_sync(0xffffffffu, tier >= 3);
    if (gr >= rows || c >= kpad) return;                // kpad % 8 == 0: all 8 or none
    i8 *dst = R + (i64)gr * kpad + c;
    if (t3) {
        oz_write_int(xs, s, dst, plane, nmod);
        oz_write_int(xs + 4, s, dst + 4, plane, nmod);
    } else if (t2) {
        OzScale<3> f(s);
        oz_write_fp<3, 4>(xs, f, dst, plane, nmod);
        oz_write_fp<3, 4>(xs + 4, f, dst + 4, plane, nmod);
    } else if (t1) {
        oz_write_fp<2, 8>(xs, OzScale<2>(s), dst, plane, nmod);
    } else {
        oz_write_fp<1, 8>(xs, OzScale<1>(s), dst, plane, nmod);
    }
}
