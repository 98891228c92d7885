// Stage 2 — truncation and residues in one pass (docs/spec.md §3–4), mirrored by
// ozaki_backend/cuda/residues.py.
//
// Reads the float64 operand once (rows x cols view, any strides) and writes all N int8
// planes in the layout the TN GEMM wants: plane l is rows x kpad, row-major (k
// contiguous), columns cols..kpad-1 zeroed. A' = trunc(x 2^s_row) is formed exactly from
// the bit pattern (|A'| = mant 2^sh, or mant >> -sh), and reduced modulo each p with
// 32-bit arithmetic on compile-time constants.
#include "common.cuh"

// |trunc(x 2^s)| as a 128-bit integer hi:lo, or (beyond 2^128, which the invariant makes
// all but impossible) lo = mantissa and big = its shift.
struct OzInt {
    u64 lo, hi;
    int big;
    bool neg;
};

__device__ __forceinline__ OzInt oz_trunc_int(double x, int s) {
    OzDec d = oz_decompose(x);
    OzInt r;
    r.neg = d.neg;
    r.big = 0;
    r.hi = 0;
    int sh = d.ex + s;
    if (d.mant == 0) {
        r.lo = 0;
    } else if (sh >= 0) {
        if (sh <= 11) {                       // < 2^64
            r.lo = d.mant << sh;
        } else if (sh < 64) {                 // < 2^117
            r.lo = d.mant << sh;
            r.hi = d.mant >> (64 - sh);
        } else if (sh <= 75) {                // < 2^128
            r.lo = 0;
            r.hi = d.mant << (sh - 64);
        } else {
            r.lo = d.mant;
            r.big = sh;
        }
    } else {
        int q = -sh;
        r.lo = q >= 64 ? 0ull : (d.mant >> q);
    }
    return r;
}

// 2^e mod P for odd P and e >= 0 (the |x| >= 2^128 path).
template <u32 P>
__device__ __noinline__ u32 oz_pow2_mod(int e) {
    constexpr u32 c32 = (u32)((1ull << 32) % P);
    u32 f = 1;
    while (e >= 32) {
        f = (f * c32) % P;
        e -= 32;
    }
    return (u32)(((u64)f << e) % P);
}

// Symmetric residue (spec §4): [-(P-1)/2, (P-1)/2] for odd P, [-128, 127] for P = 256.
// The integer is cut into digits (22/21/21 bits for the narrow case |x| < 2^64, seven
// of 21 bits for 128 bits), shared by all moduli; one modulus then costs a few
// multiply-adds with the constants 2^(digit position) mod P (the sum stays below 2^32),
// the sign as B - sum with B a multiple of P above any sum, and one reduction that
// lands directly in the symmetric range: (x + h) mod P - h.
template <u32 P, bool WIDE>
__device__ __forceinline__ int oz_sym_residue(const OzInt &x) {
    if constexpr (P == 256u) {
        // the low byte of the two's complement value (beyond 2^64: a multiple of 256)
        u32 lo = x.big ? 0u : (u32)x.lo;
        if (x.neg) lo = 0u - lo;
        return (int)(signed char)(lo & 0xffu);
    } else {
        constexpr u32 h = (P - 1) / 2;
        u32 sum;
        u32 B;
        if constexpr (!WIDE) {
            constexpr u32 c1 = (1u << 22) % P;
            constexpr u32 c2 = (u32)((1ull << 43) % P);
            constexpr u32 smax = (1u << 22) + 2u * (1u << 21) * (P - 1);
            B = P * ((smax + P - 1) / P);
            u32 d0 = (u32)x.lo & 0x3fffffu;
            u32 d1 = (u32)(x.lo >> 22) & 0x1fffffu;
            u32 d2 = (u32)(x.lo >> 43);
            sum = d0 + d1 * c1 + d2 * c2;
        } else {
            constexpr u32 M21 = 0x1fffffu;
            constexpr u32 c1 = (u32)((1ull << 21) % P);
            constexpr u32 c2 = (u32)((1ull << 42) % P);
            constexpr u32 c3 = (u32)((1ull << 63) % P);
            constexpr u32 c4 = (u32)(((1ull << 63) % P) * ((1ull << 21) % P) % P);
            constexpr u32 c5 = (u32)(((1ull << 63) % P) * ((1ull << 42) % P) % P);
            constexpr u32 c6 = (u32)(((1ull << 63) % P) * ((1ull << 63) % P) % P);
            constexpr u32 smax = (1u << 21) * (1u + 6u * (P - 1));
            B = P * ((smax + P - 1) / P);
            u64 lo = x.lo, hi = x.hi;
            sum = ((u32)lo & M21) + ((u32)(lo >> 21) & M21) * c1 + ((u32)(lo >> 42) & M21) * c2
                + ((u32)((lo >> 63) | (hi << 1)) & M21) * c3 + ((u32)(hi >> 20) & M21) * c4
                + ((u32)(hi >> 41) & M21) * c5 + (u32)(hi >> 62) * c6;
            if (x.big) sum = ((u32)(x.lo % P)) * oz_pow2_mod<P>(x.big);
        }
        u32 sp = x.neg ? B - sum : sum;
        return (int)((sp + h) % P) - (int)h;
    }
}

template <bool WIDE>
__device__ __forceinline__ void oz_write_residues(const OzInt (&v)[4], i8 *dst, i64 plane,
                                                  int nmod) {
    oz_static_for<0, OZ_MAX_MODULI>([&](auto L) {
        constexpr int l = decltype(L)::value;
        constexpr u32 P = oz_modulus(l);
        if (l < nmod) {
            u32 word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                word |= ((u32)oz_sym_residue<P, WIDE>(v[j]) & 0xffu) << (8 * j);
            *reinterpret_cast<u32 *>(dst + (i64)l * plane) = word;
        }
    });
}

extern "C" __global__ void __launch_bounds__(256)
oz_residues(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols, int rows_fast,
            int kpad, const int *__restrict__ shift, i8 *__restrict__ R, i64 plane, int nmod) {
    // shift may be null (the operand already holds integers: s = 0).
    __shared__ double tile[OZ_TR][OZ_TK + 1];
    int row0 = blockIdx.y * OZ_TR, col0 = blockIdx.x * OZ_TK;
    oz_load_tile(tile, X, rs, cs, rows, cols, row0, col0, rows_fast);
    __syncthreads();
    // Thread -> (row, 4 consecutive k): each thread writes one 32-bit word per plane.
    // All threads run both iterations so that the warp can vote on the wide path (any
    // |x| >= 2^64, common from ~17 moduli on): warp-uniform, no divergence.
    int q = threadIdx.x & 15;
#pragma unroll 1
    for (int it = 0; it < 2; ++it) {
        int rr = (threadIdx.x >> 4) + 16 * it;
        int gr = row0 + rr;
        int c = col0 + 4 * q;
        bool live = gr < rows && c < kpad;
        int s = (live && shift) ? shift[gr] : 0;
        OzInt v[4];
        bool wide = false;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = oz_trunc_int(live ? tile[rr][4 * q + j] : 0.0, s);
            wide |= (v[j].hi != 0) || (v[j].big != 0);
        }
        wide = __any_sync(0xffffffffu, wide);
        if (!live) continue;
        i8 *dst = R + (i64)gr * kpad + c;
        if (wide) oz_write_residues<true>(v, dst, plane, nmod);
        else oz_write_residues<false>(v, dst, plane, nmod);
    }
}
