// The complex scheme's own stages on the GPU (docs/spec.md §11.3), mirrored by
// ozaki_backend/cuda/complex.py and ozaki_backend/reference/complex.py:
//
//   oz_cx_residues   trunc(x 2^s_row) of the real and imaginary part of an operand,
//                    their residues modulo each complex modulus m_l, and the Gaussian
//                    map (x + r y, x - r y) mod m_l as symmetric int8 planes in the
//                    GEMM layout (rows x kpad, k contiguous, padding zeroed);
//   oz_cx_recombine  from the int32 products of the two maps (congruent mod m_l),
//                    Re = (P1 + P2) / 2 and Im = (P1 - P2) / (2 r) mod m_l as bytes in
//                    [0, m_l), the layout the CRT kernel (crt.cu, oz_crt_u8) reads.
//
// The moduli, roots and inverses come from ozaki_backend/spec/complex_moduli.py as
// small device arrays. Residues are unique, so any exact computation gives the
// reference's bytes; this one uses integer arithmetic only after one exact truncation.
#include "common.cuh"

// 2^e mod p for e >= 0, p <= 255.
__device__ __forceinline__ u32 oz_cx_pow2(int e, u32 p) {
    u32 r = 1u % p, b = 2u % p;
    while (e > 0) {
        if (e & 1) r = (r * b) % p;
        b = (b * b) % p;
        e >>= 1;
    }
    return r;
}

// a mod p in [0, p) for an integer-valued double a (any magnitude below 2^1024).
// |a| < 2^63: the exact u64 value, split into 32-bit halves (2^32 mod p folds the high
// half). Otherwise |a| = mant 2^sh with mant = the 53-bit significand (an integer).
__device__ __forceinline__ u32 oz_cx_mod(double a, u32 p) {
    if (a == 0.0) return 0u;
    double x = fabs(a);
    int e;
    frexp(x, &e);  // x = f 2^e, 0.5 <= f < 1
    u64 mant;
    int sh = 0;
    if (e <= 63) {
        mant = (u64)x;  // exact: an integer below 2^63
    } else {
        mant = (u64)ldexp(x, 53 - e);  // exact: the significand as an integer
        sh = e - 53;
    }
    u32 hi = (u32)(mant >> 32), lo = (u32)mant;
    u32 r = ((hi % p) * (u32)(4294967296ull % p) + lo % p) % p;
    if (sh) r = (r * oz_cx_pow2(sh, p)) % p;
    if (a < 0.0 && r) r = p - r;
    return r;
}

// X* (rows x cols, leading dimension ld, row-major): the two parts of the operand read
// row-wise (A's rows, or B's columns as rows of B^T). shift[row]: the exponents.
// U, V: N planes of rows x kpad int8 each (plane stride `plane`).
extern "C" __global__ void __launch_bounds__(256)
oz_cx_residues(const double *__restrict__ Xr, const double *__restrict__ Xi, i64 ld,
               int rows, int cols, int kpad, const int *__restrict__ shift, int N,
               const int *__restrict__ mods, const int *__restrict__ roots,
               i8 *__restrict__ U, i8 *__restrict__ V, i64 plane) {
    i64 total = (i64)rows * kpad;
    for (i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int i = (int)(idx / kpad), kk = (int)(idx - (i64)i * kpad);
        i64 o = (i64)i * kpad + kk;
        if (kk >= cols) {
            for (int l = 0; l < N; ++l) {
                U[l * plane + o] = 0;
                V[l * plane + o] = 0;
            }
            continue;
        }
        int s = shift[i];
        // trunc(x 2^s): ldexp is exact unless the result is below 2^-1022 (then trunc
        // gives 0 whatever the rounding), as in the reference.
        double ar = trunc(ldexp(Xr[(i64)i * ld + kk], s));
        double ai = trunc(ldexp(Xi[(i64)i * ld + kk], s));
        for (int l = 0; l < N; ++l) {
            u32 p = (u32)mods[l], r = (u32)roots[l], h = (p - 1u) / 2u;
            u32 ra = oz_cx_mod(ar, p), ri = oz_cx_mod(ai, p);
            u32 u = (ra + r * ri) % p;            // r ri < 2^16
            u32 v = (ra + r * (p - ri)) % p;
            U[l * plane + o] = (i8)(u > h ? (int)u - (int)p : (int)u);
            V[l * plane + o] = (i8)(v > h ? (int)v - (int)p : (int)v);
        }
    }
}

// C1, C2: N int32 planes (rows x ldc, plane stride `plane`) congruent to the products of
// the two maps mod m_l. RE, IM: the same layout in bytes.
extern "C" __global__ void __launch_bounds__(256)
oz_cx_recombine(const int *__restrict__ C1, const int *__restrict__ C2, i64 plane, int rows,
                int cols, i64 ldc, int N, const int *__restrict__ mods,
                const int *__restrict__ inv2, const int *__restrict__ inv2r,
                unsigned char *__restrict__ RE, unsigned char *__restrict__ IM) {
    i64 total = (i64)rows * cols;
    for (i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int i = (int)(idx / cols), j = (int)(idx - (i64)i * cols);
        i64 o = (i64)i * ldc + j;
        for (int l = 0; l < N; ++l) {
            int p = mods[l];
            int c1 = C1[l * plane + o] % p, c2 = C2[l * plane + o] % p;
            c1 += c1 < 0 ? p : 0;
            c2 += c2 < 0 ? p : 0;
            RE[l * plane + o] = (unsigned char)(((c1 + c2) * inv2[l]) % p);
            IM[l * plane + o] = (unsigned char)(((c1 - c2 + p) * inv2r[l]) % p);
        }
    }
}
