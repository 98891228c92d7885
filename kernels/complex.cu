// The complex scheme's own stages on the GPU (docs/spec.md §11.3), mirrored by
// ozaki_backend/cuda/complex.py and ozaki_backend/reference/complex.py:
//
//   oz_cx_quantize   the bound GEMM's operands of the real embedding A^ = [Ar, -Ai],
//   oz_cx_bound_combine   B^ = [[Br, Bi], [Bi, -Br]] read from the parts in place, and
//                    its P from two INT8 GEMMs of the parts' size (the statistics of the
//                    embedding's rows are scaling.cu's oz_row_stats_part, one launch per
//                    part; nothing of the embedding is stored);
//   oz_cx_residues   trunc(x 2^s_row) of the real and imaginary part of an operand,
//                    their residues modulo each complex modulus m_l, and the Gaussian
//                    map (x + r y, x - r y) mod m_l as symmetric int8 planes in the
//                    GEMM layout (rows x kpad, k contiguous, padding zeroed);
//   oz_cx_flags      whether an operand holds Inf/NaN or a non-zero imaginary part.
//
// The recombination Re = (P1 + P2) / 2, Im = (P1 - P2) / (2 r) mod m_l from the products
// of the two maps is folded into the CRT's weights (kernels/crt.cu, oz_cx_crt).
//
// The moduli, roots and inverses come from ozaki_backend/spec/complex_moduli.py through
// a generated prelude (ozaki_backend/cuda/_prelude.py complex_table_prelude: OZ_CX_MAX,
// oz_cx_modulus, oz_cx_root, oz_cx_inv_tab) as compile-time
// constants, so that every reduction modulo a modulus is a multiply-high sequence.
// Residues are unique, so any exact computation gives the reference's bytes; the
// residues use the real kernel's float64 digits (residue_digits.cuh, whose proof holds
// for every odd modulus below 256, tests/cuda/test_cuda_complex.py checks the table).
#include "residue_digits.cuh"

// The bound GEMM of the embedding from the parts (spec §11.3): with a = alpha of a real
// part and b = alpha of the imaginary part (oz_alpha_down with the embedding row's
// exponent E: the row [Ar, -Ai] of A^, or the row [Br_j, Bi_j] of B^T, whose mirror
// [Bi_j, -Br_j] has the same exponent and entries), the embedding's P = [P1, P2] is
//   P1 = ar br' + ai bi',  P2 = ar bi' + ai br'   (sums over k),
//   P1 + P2 = (ar + ai)(br' + bi'),  P1 - P2 = (ar - ai)(br' - bi'),
// two INT8 GEMMs of m x k x n instead of one of m x 2k x 2n. ar + ai <= 254 does not fit
// int8, so the first operand is stored as ar + ai - 127 (in [-127, 127]) and the product
// corrected by the row sums: sum (x - 127)(y - 127) = sum xy - 127 SA - 127 SB + 127^2 k.
// oz_cx_quantize writes Qp = ar + ai - 127 and Qm = ar - ai (rows x kpad, zero beyond
// cols) and adds SA[r] += sum of (ar + ai), the embedding row's alpha sum (SA zero on
// entry); oz_cx_bound_combine turns [G+, G-] into [P1, P2] in place. Block 256, tiles of
// 32 x 64 through shared memory as oz_quantize_down (scaling.cu).
extern "C" __global__ void __launch_bounds__(256)
oz_cx_quantize(const double *__restrict__ Xr, const double *__restrict__ Xi, i64 rs, i64 cs,
               int rows, int cols, int rows_fast, const int *__restrict__ S, int ks, int kpad,
               const int *__restrict__ E, i8 *__restrict__ Qp, i8 *__restrict__ Qm,
               int *__restrict__ SA) {
    __shared__ double tr[OZ_TR][OZ_TK + 1], ti[OZ_TR][OZ_TK + 1];
    int row0 = blockIdx.y * OZ_TR, col0 = blockIdx.x * OZ_TK;
    oz_res_load_tile(tr, Xr, rs, cs, rows, cols, row0, col0, rows_fast, S, ks);
    oz_res_load_tile(ti, Xi, rs, cs, rows, cols, row0, col0, rows_fast, S, ks);
    __syncthreads();
    u32 wp, wm;
    oz_quantize_rows(
        row0, col0, rows, kpad, E, SA,
        [&](int rr, int tc, int c, int Er, bool live) {
            wp = wm = 0;
            int sum = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int a = live ? (int)oz_alpha_down(tr[rr][tc + j], Er) : 0;
                int b = live ? (int)oz_alpha_down(ti[rr][tc + j], Er) : 0;
                int p = c + j < cols ? a + b - 127 : 0;      // the padding stays zero
                wp |= ((u32)p & 0xffu) << (8 * j);
                wm |= ((u32)(a - b) & 0xffu) << (8 * j);
                sum += a + b;
            }
            return sum;
        },
        [&](i64 o) {
            *reinterpret_cast<u32 *>(Qp + o) = wp;
            *reinterpret_cast<u32 *>(Qm + o) = wm;
        });
}

// In place on one tile of P (rows x cols of each half; the right half `half` columns
// after the left, leading dimension ldp): [G+, G-] -> [P1, P2] (see oz_cx_quantize), with
// SA, SB the tile's embedding row sums and K the parts' k. a + b and a - b are 2 P1 and
// 2 P2, even; in int64, as G+ and the corrections may exceed int32 where P1 does not.
template <class T>
__device__ __forceinline__ void oz_cx_combine(T *__restrict__ P, i64 ldp, int rows, int cols,
                                              i64 half, const int *__restrict__ SA,
                                              const int *__restrict__ SB, int K) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    i64 sb = 127 * (i64)SB[j] - 16129 * (i64)K;
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        T *p = P + (i64)i * ldp + j;
        i64 a = (i64)p[0] + 127 * (i64)SA[i] + sb, b = (i64)p[half];
        p[0] = (T)((a + b) / 2);
        p[half] = (T)((a - b) / 2);
    }
}

extern "C" __global__ void __launch_bounds__(256)
oz_cx_bound_combine_i32(int *__restrict__ P, i64 ldp, int rows, int cols, i64 half,
                        const int *__restrict__ SA, const int *__restrict__ SB, int K) {
    oz_cx_combine<int>(P, ldp, rows, cols, half, SA, SB, K);
}
extern "C" __global__ void __launch_bounds__(256)
oz_cx_bound_combine_i64(i64 *__restrict__ P, i64 ldp, int rows, int cols, i64 half,
                        const int *__restrict__ SA, const int *__restrict__ SB, int K) {
    oz_cx_combine<i64>(P, ldp, rows, cols, half, SA, SB, K);
}

// The Gaussian map, float64 path (the proof of residue_digits.cuh, extended): with y the
// digit sum of the real part (|y| < 2^51: one digit only when |A'| < 2^51, two or three
// digits give |y| < 2^51 anyway) and ji the symmetric residue of the imaginary part
// (|ji| <= 120), y ± r ji is an integer below 2^51 + 2^15 < 2^52, computed exactly by one
// fma, congruent to x ± r y (mod m); its word yw ± r ji stays congruent modulo 2^32; so
// steps (2)-(4) give U and V directly: two reductions of a sum instead of two residues
// and two reductions of their combination.
template <int L, int ND>
__device__ __forceinline__ void oz_cx_map_fp(const double (&dr)[ND], const u32 (&wr)[ND],
                                             const double (&di)[ND], const u32 (&wi)[ND],
                                             int neg, u32 &u, u32 &v) {
    constexpr u32 P = oz_cx_modulus(L), R = oz_cx_root(L);
    const double inv = oz_cx_inv_tab[L];
    int ji = (int)oz_fp_residue_of<P, ND>(di, wi, inv);
    if (neg) ji = -ji;
    double y;
    u32 yw;
    oz_digit_sum<P, ND>(dr, wr, y, yw);
    int rj = (int)R * ji;
    u = oz_fp_reduce<P>(__fma_rn((double)ji, (double)R, y), yw + (u32)rj, inv);
    v = oz_fp_reduce<P>(__fma_rn((double)ji, -(double)R, y), yw - (u32)rj, inv);
}

// The Gaussian map on the integer path: from the symmetric residues jr, ji,
// jr ± r ji reduced into [-h, h], h = (p-1)/2. |jr ± r ji| <= h (1 + r) < K p, so adding
// K p + h makes the dividend non-negative and (x + K p + h) mod p - h is the symmetric
// residue of x.
template <int L>
__device__ __forceinline__ void oz_cx_map_int(int jr, int ji, u32 &u, u32 &v) {
    constexpr u32 P = oz_cx_modulus(L), R = oz_cx_root(L), H = (P - 1) / 2;
    constexpr int OFF = (int)((H * (1 + R)) / P + 1) * (int)P + (int)H;
    int a = jr + (int)R * ji, b = jr - (int)R * ji;
    u = (u32)((int)((u32)(a + OFF) % P) - (int)H);
    v = (u32)((int)((u32)(b + OFF) % P) - (int)H);
}

// Two consecutive bytes (the low bytes of r0, r1) as one 2-byte store.
__device__ __forceinline__ void oz_cx_store2(i8 *p, u32 r0, u32 r1) {
    *reinterpret_cast<unsigned short *>(p) = (unsigned short)__byte_perm(r0, r1, 0x0040);
}

template <int ND>
__device__ __forceinline__ void oz_cx_write_fp(const double (&xr)[2], const double (&xi)[2],
                                               int s, int neg, i8 *du, i8 *dv, i64 plane,
                                               int nmod) {
    OzScale<ND> f(s);
    double dr[2][ND], di[2][ND];
    u32 wr[2][ND], wi[2][ND];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        oz_digits<ND>(xr[j], f, dr[j], wr[j]);
        oz_digits<ND>(xi[j], f, di[j], wi[j]);
    }
    oz_static_for<0, OZ_CX_MAX>([&](auto Lc) {
        constexpr int l = decltype(Lc)::value;
        if (l < nmod) {
            u32 u0, v0, u1, v1;
            oz_cx_map_fp<l, ND>(dr[0], wr[0], di[0], wi[0], neg, u0, v0);
            oz_cx_map_fp<l, ND>(dr[1], wr[1], di[1], wi[1], neg, u1, v1);
            oz_cx_store2(du, u0, u1);
            oz_cx_store2(dv, v0, v1);
        }
        du += plane;
        dv += plane;
    });
}

__device__ __forceinline__ void oz_cx_write_int(const double (&xr)[2], const double (&xi)[2],
                                                int s, int neg, i8 *du, i8 *dv, i64 plane,
                                                int nmod) {
    OzInt vr[2], vi[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        vr[j] = oz_trunc_int(xr[j], s);
        vi[j] = oz_trunc_int(xi[j], s);
    }
    oz_static_for<0, OZ_CX_MAX>([&](auto Lc) {
        constexpr int l = decltype(Lc)::value;
        constexpr u32 P = oz_cx_modulus(l);
        if (l < nmod) {
            u32 u[2], v[2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                int ji = oz_int_residue<P>(vi[j]);
                oz_cx_map_int<l>(oz_int_residue<P>(vr[j]), neg ? -ji : ji, u[j], v[j]);
            }
            oz_cx_store2(du, u[0], u[1]);
            oz_cx_store2(dv, v[0], v[1]);
        }
        du += plane;
        dv += plane;
    });
}

// Xr, Xi (rows x cols, element strides rs, cs, the same for both): the two parts of the
// operand read row-wise (A's rows, or B's columns as rows of B^T), in place, scaled by
// 2^(ks S_c) on the fly (the equilibration: S null for none); shift[row]: the exponents
// s. U, V: nmod planes of rows x kpad int8 each (plane stride `plane`), k contiguous,
// padding zeroed. neg_imag: map -Xi (A's imaginary part enters the embedding negated).
// A 32 x 64 tile of each part goes through shared memory (loaded by the first
// 2 x OZ_RES_THREADS threads, as residues.cu loads one); warp w owns tile row w, lane q
// the two k at 2q (one 64-byte segment per plane and warp), and takes the path its warp
// votes (residue_digits.cuh; one digit only below 2^51, see above).
#define OZ_CX_THREADS 1024
extern "C" __global__ void __launch_bounds__(OZ_CX_THREADS, 1)
oz_cx_residues(const double *__restrict__ Xr, const double *__restrict__ Xi, i64 rs, i64 cs,
               int rows, int cols, int rows_fast, const int *__restrict__ S, int ks, int kpad,
               const int *__restrict__ shift, i8 *__restrict__ U, i8 *__restrict__ V,
               i64 plane, int nmod, int neg_imag) {
    __shared__ double tile[2][OZ_TR][OZ_TK + 1];
    int row0 = blockIdx.y * OZ_TR, col0 = blockIdx.x * OZ_TK;
    int part = threadIdx.x / OZ_RES_THREADS;
    if (part < 2)
        oz_res_load_tile(tile[part], part ? Xi : Xr, rs, cs, rows, cols, row0, col0,
                         rows_fast, S, ks, threadIdx.x - part * OZ_RES_THREADS);
    __syncthreads();
    int rr = threadIdx.x >> 5, cl = 2 * (threadIdx.x & 31);
    int gr = row0 + rr, c = col0 + cl;
    int s = gr < rows ? shift[gr] : 0;
    double xr[2] = {tile[0][rr][cl], tile[0][rr][cl + 1]};
    double xi[2] = {tile[1][rr][cl], tile[1][rr][cl + 1]};
    u32 hmax = 0;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        hmax = max(hmax, (u32)__double2hiint(xr[j]) & 0x7fffffffu);
        hmax = max(hmax, (u32)__double2hiint(xi[j]) & 0x7fffffffu);
    }
    int tier = oz_res_tier(hmax, s, 51);
    bool t1 = __any_sync(0xffffffffu, tier >= 1);
    bool t2 = __any_sync(0xffffffffu, tier >= 2);
    bool t3 = __any_sync(0xffffffffu, tier >= 3);
    if (gr >= rows || c >= kpad) return;                // kpad even: both k or none
    i64 o = (i64)gr * kpad + c;
    if (t3) oz_cx_write_int(xr, xi, s, neg_imag, U + o, V + o, plane, nmod);
    else if (t2) oz_cx_write_fp<3>(xr, xi, s, neg_imag, U + o, V + o, plane, nmod);
    else if (t1) oz_cx_write_fp<2>(xr, xi, s, neg_imag, U + o, V + o, plane, nmod);
    else oz_cx_write_fp<1>(xr, xi, s, neg_imag, U + o, V + o, plane, nmod);
}

// Two flags of a complex operand (rows x cols, element strides rs, cs in complex units, the
// column index the unit-stride one as the caller arranges it), in one pass: flags[0] = 1
// when an entry is Inf/NaN, flags[1] = 1 when an imaginary part is non-zero (-0.0 counts
// as zero, as `.any()` does). Block-uniform loops; one atomic per warp that finds one.
extern "C" __global__ void __launch_bounds__(256)
oz_cx_flags(const double2 *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
            int *__restrict__ flags) {
    int bad = 0, im = 0;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const double2 *x = X + (i64)r * rs;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols;
             c += gridDim.x * blockDim.x) {
            double2 v = x[(i64)c * cs];
            bad |= !(isfinite(v.x) && isfinite(v.y));
            im |= v.y != 0.0;
        }
    }
    bad = __any_sync(0xffffffffu, bad);
    im = __any_sync(0xffffffffu, im);
    if ((threadIdx.x & 31) == 0) {
        if (bad) atomicOr(flags, 1);
        if (im) atomicOr(flags + 1, 1);
    }
}
