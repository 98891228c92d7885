// The complex scheme's own stages on the GPU (docs/spec.md §11.3), mirrored by
// ozaki_backend/cuda/complex.py and ozaki_backend/reference/complex.py:
//
//   oz_cx_embed_a    the real embedding's A^ = [Ar, -Ai] 2^-S (m x 2k, row-major);
//   oz_cx_embed_b    its B^ = [[Br, Bi], [Bi, -Br]] 2^S, stored transposed (2n x 2k,
//                    row-major: the rows the real scaling kernels and the residues read);
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

// A^ = [Ar, -Ai] scaled by 2^-S_c (S: the complex rule's exponents, one per inner index,
// shared by both parts; ldexp of an entry the rule keeps exact is exact, and the
// reference scales the same way). Ar, Ai: element strides (rs, cs), e.g. the two parts
// of a complex128 array read in place (rs = 2k, cs = 2).
// The flags of the operand read (flags: two ints, or null): flags[0] |= 1 when an entry is
// Inf/NaN, flags[1] |= 1 when an imaginary part is non-zero (-0.0 counts as zero), so
// that the caller learns both at the certificate's one read-back instead of in a pass of
// its own. One atomic per warp that finds one; every thread reaches the end.
__device__ __forceinline__ void oz_cx_flag(int *__restrict__ flags, int bad, int im) {
    bad = __any_sync(0xffffffffu, bad);
    im = __any_sync(0xffffffffu, im);
    if (flags && (threadIdx.x & 31) == 0) {
        if (bad) atomicOr(flags, 1);
        if (im) atomicOr(flags + 1, 1);
    }
}

extern "C" __global__ void __launch_bounds__(256)
oz_cx_embed_a(const double *__restrict__ Ar, const double *__restrict__ Ai, i64 rs, i64 cs,
              int rows, int k, const int *__restrict__ S, double *__restrict__ out,
              int *__restrict__ flags) {
    i64 total = (i64)rows * k;
    int bad = 0, im = 0;
    for (i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int i = (int)(idx / k), c = (int)(idx - (i64)i * k);
        i64 in = (i64)i * rs + (i64)c * cs;
        int e = -S[c];
        double xr = Ar[in], xi = Ai[in];
        bad |= !(isfinite(xr) && isfinite(xi));
        im |= xi != 0.0;
        out[(i64)i * 2 * k + c] = ldexp(xr, e);
        out[(i64)i * 2 * k + k + c] = -ldexp(xi, e);
    }
    oz_cx_flag(flags, bad, im);
}

// B^T (2n x 2k) of B = Br + i Bi (k x n, element strides rs, cs for both parts), scaled
// by 2^S_c: row j = [Br[:, j], Bi[:, j]], row n + j = [Bi[:, j], -Br[:, j]]. A 32 x 32
// tile of (c, j) goes through shared memory so that both the reads (j fastest, as B is
// stored) and the writes (c fastest) coalesce. Block (32, 8). flags: as oz_cx_embed_a's.
extern "C" __global__ void __launch_bounds__(256)
oz_cx_embed_b(const double *__restrict__ Br, const double *__restrict__ Bi, i64 rs, i64 cs,
              int k, int n, const int *__restrict__ S, double *__restrict__ out,
              int *__restrict__ flags) {
    __shared__ double tr[32][33], ti[32][33];
    int c0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
    int bad = 0, im = 0;
    for (int y = threadIdx.y; y < 32; y += 8) {
        int c = c0 + y, j = j0 + threadIdx.x;
        if (c < k && j < n) {
            i64 in = (i64)c * rs + (i64)j * cs;
            double xr = Br[in], xi = Bi[in];
            bad |= !(isfinite(xr) && isfinite(xi));
            im |= xi != 0.0;
            tr[y][threadIdx.x] = ldexp(xr, S[c]);
            ti[y][threadIdx.x] = ldexp(xi, S[c]);
        }
    }
    oz_cx_flag(flags, bad, im);
    __syncthreads();
    i64 ld = 2 * (i64)k;
    for (int y = threadIdx.y; y < 32; y += 8) {
        int j = j0 + y, c = c0 + threadIdx.x;
        if (c < k && j < n) {
            double br = tr[threadIdx.x][y], bi = ti[threadIdx.x][y];
            out[(i64)j * ld + c] = br;
            out[(i64)j * ld + k + c] = bi;
            out[((i64)n + j) * ld + c] = bi;
            out[((i64)n + j) * ld + k + c] = -br;
        }
    }
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
// operand read row-wise (A's rows, or B's columns as rows of B^T); shift[row]: the
// exponents s. U, V: nmod planes of rows x kpad int8 each (plane stride `plane`),
// k contiguous, padding zeroed. neg_imag: Xi holds the negated imaginary part (the
// embedding's right half of A^). A 32 x 64 tile of each part goes through shared memory
// (loaded by the first 2 x OZ_RES_THREADS threads, as residues.cu loads one); warp w owns
// tile row w, lane q the two k at 2q (one 64-byte segment per plane and warp), and takes
// the path its warp votes (residue_digits.cuh; one digit only below 2^51, see above).
#define OZ_CX_THREADS 1024
extern "C" __global__ void __launch_bounds__(OZ_CX_THREADS, 1)
oz_cx_residues(const double *__restrict__ Xr, const double *__restrict__ Xi, i64 rs, i64 cs,
               int rows, int cols, int rows_fast, int kpad, const int *__restrict__ shift,
               i8 *__restrict__ U, i8 *__restrict__ V, i64 plane, int nmod, int neg_imag) {
    __shared__ double tile[2][OZ_TR][OZ_TK + 1];
    int row0 = blockIdx.y * OZ_TR, col0 = blockIdx.x * OZ_TK;
    int part = threadIdx.x / OZ_RES_THREADS;
    if (part < 2)
        oz_res_load_tile(tile[part], part ? Xi : Xr, rs, cs, rows, cols, row0, col0,
                         rows_fast, nullptr, 0, threadIdx.x - part * OZ_RES_THREADS);
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
