// Shared definitions of the CUDA engine's kernels (docs/spec.md is the contract).
//
// Compiled by NVRTC through ozaki_backend/cuda/loader.py, which inlines this file in
// place of `#include "common.cuh"` with #line markers, so no include path is needed
// and no host header is ever included (NVRTC has none).
#ifndef OZ_COMMON_CUH
#define OZ_COMMON_CUH

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
typedef signed char i8;

#define OZ_INT_MIN (-2147483647 - 1)
#define OZ_INT_MAX 2147483647
#define OZ_MASK52 0x000FFFFFFFFFFFFFull

// The moduli of ozaki_backend/spec/moduli.py, in order (tests/cuda/test_cuda_sources.py checks
// that the two tables agree).
#define OZ_MAX_MODULI 20
__host__ __device__ constexpr u32 oz_modulus(int l) {
    return l == 0 ? 256u : l == 1 ? 255u : l == 2 ? 253u : l == 3 ? 251u : l == 4 ? 247u
         : l == 5 ? 241u : l == 6 ? 239u : l == 7 ? 233u : l == 8 ? 229u : l == 9 ? 227u
         : l == 10 ? 223u : l == 11 ? 217u : l == 12 ? 211u : l == 13 ? 199u
         : l == 14 ? 197u : l == 15 ? 193u : l == 16 ? 191u : l == 17 ? 181u
         : l == 18 ? 179u : 173u;
}

// Compile-time loop: f(IC<L>{}) for L = B..E-1. Gives every modulus a constant p so
// that `x % p` compiles to a multiply-high sequence instead of a division.
template <int V> struct IC { static constexpr int value = V; };
template <int B, int E, class F>
__device__ __forceinline__ void oz_static_for(F &&f) {
    if constexpr (B < E) {
        f(IC<B>{});
        oz_static_for<B + 1, E>(f);
    }
}

// |x| = mant * 2^ex exactly (mant < 2^53; mant == 0 for x == 0). Subnormals keep
// their unnormalised mantissa with ex = -1074.
struct OzDec {
    u64 mant;
    int ex;
    bool neg;
};

__device__ __forceinline__ OzDec oz_decompose(double x) {
    u64 b = (u64)__double_as_longlong(x);
    int f = (int)((b >> 52) & 0x7ff);
    OzDec d;
    d.neg = (b >> 63) != 0;
    d.mant = b & OZ_MASK52;
    if (f) {
        d.mant |= 1ull << 52;
        d.ex = f - 1075;
    } else {
        d.ex = -1074;
    }
    return d;
}

// frexp exponent of a non-zero finite x (|x| < 2^e <= 2|x|); 2000 for Inf/NaN, so that
// a row maximum above 1024 flags a non-finite operand.
__device__ __forceinline__ int oz_frexp_exp(double x) {
    u64 b = (u64)__double_as_longlong(x);
    int f = (int)((b >> 52) & 0x7ff);
    if (f == 0x7ff) return 2000;
    if (f) return f - 1022;
    u64 m = b & OZ_MASK52;
    return (64 - __clzll((long long)m)) - 1074;
}

// The smallest shift s with x 2^s an integer (docs/spec.md §10.1) for a non-zero finite
// x: with |x| = mant 2^ex, the lowest set bit of x is at 2^(ex + tz(mant)).
__device__ __forceinline__ int oz_exact_threshold(double x) {
    OzDec d = oz_decompose(x);
    return -(d.ex + __ffsll((long long)d.mant) - 1);
}

// x 2^e for an exponent the equilibration clamp keeps exact (docs/spec.md §2.1).
__device__ __forceinline__ double oz_shift(double x, int e) { return e ? ldexp(x, e) : x; }

// spec §1: lambda(x) = eh - ex - (mx > mh) for an exact integer 0 < x < 2^53. The
// frexp mantissas share their leading bit, so comparing them is comparing the 52-bit
// fraction fields.
__device__ __forceinline__ int oz_lambda(u64 x, int eh, u64 fh) {
    double d = (double)x;
    u64 b = (u64)__double_as_longlong(d);
    int ex = (int)((b >> 52) & 0x7ff) - 1022;
    return eh - ex - ((b & OZ_MASK52) > fh ? 1 : 0);
}

// floor(a / 2) for any int (arithmetic shift).
__device__ __forceinline__ int oz_floor_half(int a) { return a >> 1; }

// The bound GEMM's quantisation (spec §2.3): alpha = floor(|x| 2^(OZ_BOUND_D - E)) in
// [0, 127] for an entry of a row whose exponent is E (|x| < 2^E), exactly from the bit
// pattern; 0 for x == 0.
#define OZ_BOUND_D 7
__device__ __forceinline__ u32 oz_alpha_down(double x, int E) {
    if (x == 0.0) return 0;
    OzDec d = oz_decompose(x);
    int sh = d.ex + OZ_BOUND_D - E;
    if (sh >= 0) return (u32)(d.mant << sh);
    return -sh < 64 ? (u32)(d.mant >> (-sh)) : 0u;
}

// ---------------------------------------------------------------------------------
// Operand views. Every kernel reads an operand as `rows x cols` float64 with element
// strides (rs, cs): A (m x k) is rows = m; B (k x n) is read as its transpose, rows = n,
// so that both operands are handled row-wise (spec §3: B via truncate(B.T, t).T).
// Tiles of 32 rows x 64 columns go through shared memory so that the global reads are
// coalesced whichever stride is 1 (`rows_fast`: the row index is the unit-stride one),
// and the int8 writes (along k) are coalesced too.
#define OZ_TR 32
#define OZ_TK 64

// The bound GEMM's quantisation walks one 32 x 64 tile (OZ_TR x OZ_TK, in shared memory)
// with 16 threads per row and 4 columns each, so that a half warp holds one row:
// quantise(tile_row, tile_col, E_row, live) packs the thread's 4 bytes (its own captured
// words) and returns their alpha sum; the half warp's sums meet by shuffles, then
// store(offset) writes the words at the element offset row * kpad + col, and the row's
// sum is added to acc[i] (the thread's i-th row, i < OZ_QROWS) when acc is given, else
// one lane adds it to SA (zero on entry). Threads past the last row or kpad only shuffle.
#define OZ_QROWS (OZ_TR / 16)   // rows of a tile per thread
// `quantise` returns the sum its row adds (an int, or a wider packed sum when `acc`
// collects the block's sums: Acc is its type); without `acc` the sum is added to SA.
template <class Quantise, class Store, class Acc = int>
__device__ __forceinline__ void oz_quantize_rows(int row0, int col0, int rows, int kpad,
                                                 const int *__restrict__ E,
                                                 int *__restrict__ SA, Quantise quantise,
                                                 Store store, Acc *acc = nullptr) {
    int q = threadIdx.x & 15;
#pragma unroll
    for (int i = 0; i < OZ_QROWS; ++i) {
        int rr = (threadIdx.x >> 4) + 16 * i;
        int gr = row0 + rr;
        int c = col0 + 4 * q;
        bool live = gr < rows && c < kpad;
        auto sum = quantise(rr, 4 * q, c, live ? E[gr] : 0, live);
        for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (!live) continue;
        store((long long)gr * kpad + c);
        if (acc)
            acc[i] += sum;
        else if (q == 0 && sum)
            atomicAdd(SA + gr, (int)sum);
    }
}

// ks_S: the equilibration exponents (docs/spec.md §2.1; null: none), applied to column c
// as x 2^(ks S_c) (ks = -1 for A, +1 for B read as its transpose).
__device__ __forceinline__ void oz_load_tile(double (*tile)[OZ_TK + 1], const double *__restrict__ X,
                                             i64 rs, i64 cs, int rows, int cols, int row0,
                                             int col0, int rows_fast,
                                             const int *__restrict__ S = nullptr, int ks = 0) {
    for (int idx = threadIdx.x; idx < OZ_TR * OZ_TK; idx += blockDim.x) {
        int r, c;
        if (rows_fast) {
            r = idx & (OZ_TR - 1);
            c = idx / OZ_TR;
        } else {
            r = idx / OZ_TK;
            c = idx & (OZ_TK - 1);
        }
        int gr = row0 + r, gc = col0 + c;
        double v = 0.0;
        if (gr < rows && gc < cols) {
            v = X[(i64)gr * rs + (i64)gc * cs];
            if (S) v = oz_shift(v, ks * S[gc]);
        }
        tile[r][c] = v;
    }
}

#define OZ_RES_THREADS 256     // the block size of the launches that load with oz_res_load_tile
                               // (ozaki_backend/cuda/residues.py, scaling.py: oz_quantize_down)

// The 32 x 64 tile through shared memory (zero outside the operand, so the k padding
// gets residue 0), as oz_load_tile above but with the eight loads of a thread
// issued back to back (more bytes in flight), the address stepped by a pointer
// increment, and the bounds tests dropped for interior tiles (a block-uniform branch).
__device__ __forceinline__ void oz_res_load_tile(double (*tile)[OZ_TK + 1],
                                                 const double *__restrict__ X, i64 rs, i64 cs,
                                                 int rows, int cols, int row0, int col0,
                                                 int rows_fast, const int *__restrict__ S,
                                                 int ks, int tid = threadIdx.x) {
    // tid: this thread's index among the OZ_RES_THREADS that load the tile (the
    // residue kernels' and oz_quantize_down's blocks)
    constexpr int PER = OZ_TR * OZ_TK / OZ_RES_THREADS;
    // lanes along the rows (unit stride: rows_fast) or along the columns; each thread
    // then steps along the other index: tile (r + i dr, c + i dc), i < PER
    int r, c, dr, dc;
    if (rows_fast) {
        r = tid & (OZ_TR - 1), c = tid / OZ_TR;
        dr = 0, dc = OZ_RES_THREADS / OZ_TR;
    } else {
        r = tid / OZ_TK, c = tid & (OZ_TK - 1);
        dr = OZ_RES_THREADS / OZ_TK, dc = 0;
    }
    int gr = row0 + r, gc = col0 + c;
    const double *p = X + (i64)gr * rs + (i64)gc * cs;
    i64 step = (i64)dr * rs + (i64)dc * cs;
    double v[PER];
    if (row0 + OZ_TR <= rows && col0 + OZ_TK <= cols) {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            v[i] = *p;
            p += step;
        }
    } else {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            v[i] = (gr + i * dr < rows && gc + i * dc < cols) ? *p : 0.0;
            p += step;
        }
    }
    if (S) {
        // The equilibration exponents (docs/spec.md §2.1): x 2^(ks S_k), exact.
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            int gci = gc + i * dc;
            if (gci < cols) v[i] = oz_shift(v[i], ks * S[gci]);
        }
    }
    double *t = &tile[r][c];
    int tstep = dr * (OZ_TK + 1) + dc;
#pragma unroll
    for (int i = 0; i < PER; ++i) t[i * tstep] = v[i];
}

#endif  // OZ_COMMON_CUH
