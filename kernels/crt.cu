// Stage 4 — one fused pass over the output (docs/spec.md §6–7), mirrored by
// ozaki_backend/cuda/crt.py: read the N int32 products of an element and reduce them
// (oz_crt), or read its N residue bytes from the fused product kernel (oz_crt_u8),
// reconstruct the exact integer X by the CRT in 32-bit limbs, round X 2^-(s_i + t_j)
// once to float64 (ties to even, gradual underflow, overflow to inf), apply alpha/beta
// without contraction, write the float64 once.
//
// The per-N constants come from a generated prelude (ozaki_backend/cuda/crt.py, from
// the exact integers of ozaki_backend/moduli.py), compiled per moduli count:
//   OZ_N                 number of moduli
//   OZ_L                 32-bit limbs of the accumulator (Y' < 2^(32 L - 1))
//   OZ_W[OZ_N][OZ_L]     w_l = (M/p_l) ((M/p_l)^-1 mod p_l) mod M   (w_l = 1 mod p_l, 0 mod the rest)
//   OZ_M[OZ_L], OZ_MH[OZ_L], OZ_MHN[OZ_L]   M, M/2 (floor) and M - M/2
//   OZ_INVM              1/M rounded to float64 (only estimates a quotient)
#include "common.cuh"

#ifndef OZ_N
#error "crt.cu is compiled with a generated prelude (ozaki_backend/cuda/crt.py)"
#endif

// RN(|X| 2^-e) with the sign applied, |X| in OZ_L little-endian limbs.
__device__ __forceinline__ double oz_round_scaled(const u32 (&x)[OZ_L], bool neg, int e) {
    // Window (w2, w1, w0): the highest non-zero limb and the two below it; sticky: OR of
    // the limbs below the window. Indices are compile-time (no local memory).
    u32 w2 = 0, w1 = 0, w0 = 0, sticky = 0;
    int top = -1;
#pragma unroll
    for (int T = OZ_L - 1; T >= 0; --T) {
        if (top < 0 && x[T] != 0) {
            top = T;
            w2 = x[T];
            w1 = T >= 1 ? x[T >= 1 ? T - 1 : 0] : 0u;
            w0 = T >= 2 ? x[T >= 2 ? T - 2 : 0] : 0u;
            u32 st = 0;
#pragma unroll
            for (int u = 0; u < OZ_L; ++u)
                if (u < T - 2) st |= x[u];
            sticky = st;
        }
    }
    if (top < 0) return 0.0;  // X = 0 gives +0.0
    int lz = __clz(w2);
    int nb = 32 * top + 32 - lz;  // bit length of |X|
    u64 hi = ((u64)w2 << 32) | w1;
    u64 mw;  // bits nb-1 .. nb-64 of |X| (zeros below bit 0)
    if (lz == 0) {
        mw = hi;
        sticky |= w0;
    } else {
        mw = (hi << lz) | (w0 >> (32 - lz));
        sticky |= w0 << lz;
    }
    // Lowest kept bit r (in units of X): 53 significant bits, or the 2^-1074 position.
    int r = max(nb - 53, e - 1074);
    int kb = nb - r;  // kept bits, <= 53
    u64 q;
    if (kb < 0) {
        q = 0;  // below half of the smallest subnormal
    } else if (kb == 0) {
        q = ((mw << 1) != 0 || sticky != 0) ? 1 : 0;  // >= half; a tie goes to 0 (even)
    } else {
        q = mw >> (64 - kb);
        u64 guard = (mw >> (63 - kb)) & 1ull;
        bool st = (mw & ((1ull << (63 - kb)) - 1)) != 0 || sticky != 0;
        q += guard & (u64)(st || (q & 1ull));
    }
    // Value q 2^(r - e). If kb = 53 (normal), q in [2^52, 2^53]; otherwise r - e = -1074
    // and q <= 2^52. In both cases the bit pattern is ((r - e + 1074) << 52) + q: the
    // implicit bit of q carries into the exponent field (2^53 carries once more).
    int e0 = r - e + 1074;  // >= 0 by the choice of r
    u64 bits;
    if (q == 0) {
        bits = 0;
    } else if (e0 > 2046) {
        bits = 0x7FF0000000000000ull;
    } else {
        bits = ((u64)e0 << 52) + q;
        if (bits >= 0x7FF0000000000000ull) bits = 0x7FF0000000000000ull;
    }
    if (neg) bits |= 1ull << 63;
    return __longlong_as_double((long long)bits);
}

// Steps 2-6 of the element whose step-1 sum is acc: RN(X 2^-e).
__device__ __forceinline__ double oz_crt_finish(const u64 (&acc)[OZ_L], int e) {
    // 2. Carry-propagate into 32-bit limbs y.
    u32 y[OZ_L];
    u64 carry = 0;
#pragma unroll
    for (int u = 0; u < OZ_L; ++u) {
        u64 v = acc[u] + carry;
        y[u] = (u32)v;
        carry = v >> 32;
    }

    // 3. Quotient estimate Qe in {Q, Q+1}, Q = floor(Y'/M): the float64 value of Y'/M
    //    has relative error < 2^-49, and the 2^-40 nudge makes Qe never too small.
    double yf = 0.0;
#pragma unroll
    for (int u = OZ_L - 1; u >= 0; --u) yf = yf * 4294967296.0 + (double)y[u];
    u32 Qe = (u32)(yf * OZ_INVM * (1.0 + 0x1p-40));

    // 4. X' = Y' - Qe M in [-M, M) (two's complement over the limbs, signed top limb).
    u32 x[OZ_L];
    i64 a = 0;
#pragma unroll
    for (int u = 0; u < OZ_L; ++u) {
        a += (i64)y[u] - (i64)((u64)Qe * OZ_M[u]);
        x[u] = (u32)a;
        a >>= 32;
    }
    bool negp = a < 0;

    // 5. X = X' - M/2 if X' >= 0 (Qe = Q), else X' + (M - M/2) (Qe = Q + 1,
    //    X' + M = X''; OZ_MHN = M - M/2, which is M/2 for an even M and one more for
    //    the complex table's odd M). X is the representative in (-M/2, M/2): |X| <= H
    //    by the scaling invariant.
    a = 0;
#pragma unroll
    for (int u = 0; u < OZ_L; ++u) {
        i64 xu = (u == OZ_L - 1) ? (i64)(int)x[u] : (i64)x[u];
        a += xu + (negp ? (i64)OZ_MHN[u] : -(i64)OZ_MH[u]);
        x[u] = (u32)a;
        a >>= 32;
    }
    bool negx = (int)x[OZ_L - 1] < 0;
    if (negx) {  // magnitude: two's complement negation across the limbs
        u64 cy = 1;
#pragma unroll
        for (int u = 0; u < OZ_L; ++u) {
            u64 v = (u64)(~x[u]) + cy;
            x[u] = (u32)v;
            cy = v >> 32;
        }
    }

    // 6. The one rounding.
    return oz_round_scaled(x, negx, e);
}

// C: N planes of rows x ldc int32 (plane stride `plane` elements), each value congruent
// to the product mod p_l with |value| <= 2^30 + 255. s (rows), t (cols): exponents.
// ab_mode 0: out = C; 1: out = alpha*C; 2: out = alpha*C + beta*C0 (spec §7).
// T = int: raw int32 products from cuBLAS; T = unsigned char: residues in [0, p_l) from
// the fused product kernel (kernels/modprod.cu), already reduced.
template <typename T>
__device__ __forceinline__ void oz_crt_body(
    const T *__restrict__ C, i64 plane, i64 ldc, int rows, int cols, const int *__restrict__ s,
    const int *__restrict__ t, double *__restrict__ out, i64 ors, i64 ocs, int ab_mode,
    double alpha, double beta, const double *__restrict__ C0, i64 crs, i64 ccs) {
    // grid.x covers the columns (coalesced), grid.y strides over the rows: no division.
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    int tj = t[j];
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        const T *cp = C + (i64)i * ldc + j;

        // 1. Y' = M/2 + sum_l c_l w_l, with c_l = C_l mod p_l up to a multiple of p_l:
        //    u = C_l + p_l floor(2^31 / p_l) is a non-negative u32, then one folding step
        //    (u >> 16) (2^16 mod p_l) + (u & 0xffff) keeps c_l < 2^25, so every limb
        //    column sum stays below 2^62.
        u64 acc[OZ_L];
#pragma unroll
        for (int u = 0; u < OZ_L; ++u) acc[u] = OZ_MH[u];
        oz_static_for<0, OZ_N>([&](auto L) {
            constexpr int l = decltype(L)::value;
            u32 c;
            if constexpr (sizeof(T) == 1) {
                c = cp[(i64)l * plane];
            } else {
                constexpr u32 P = oz_modulus(l);
                constexpr u32 bias = (u32)((2147483648ull / P) * P);
                constexpr u32 c16 = (1u << 16) % P;
                u32 u = (u32)cp[(i64)l * plane] + bias;
                c = (u >> 16) * c16 + (u & 0xffffu);
            }
#pragma unroll
            for (int v = 0; v < OZ_L; ++v) acc[v] += (u64)c * OZ_W[l][v];
        });

        // 2.-6. X and its one rounding, then alpha / beta with no contraction.
        double val = oz_crt_finish(acc, s[i] + tj);
        if (ab_mode >= 1) val = __dmul_rn(alpha, val);
        if (ab_mode == 2) val = __dadd_rn(val, __dmul_rn(beta, C0[(i64)i * crs + (i64)j * ccs]));
        out[(i64)i * ors + (i64)j * ocs] = val;
    }
}

// oz_crt for two adjacent columns per thread (the host picks it when every plane's
// rows start 8-byte aligned): one int2 load per plane reads both products, twice the
// bytes per load instruction, and the two elements' sums are independent work in flight
// while the loads of the next row wait. Per element the arithmetic is oz_crt_body's
// (the same step-1 sums and oz_crt_finish), so the bits are the same.
extern "C" __global__ void __launch_bounds__(256)
oz_crt2(const int *__restrict__ C, i64 plane, i64 ldc, int rows, int cols,
        const int *__restrict__ s, const int *__restrict__ t, double *__restrict__ out, i64 ors,
        i64 ocs, int ab_mode, double alpha, double beta, const double *__restrict__ C0, i64 crs,
        i64 ccs) {
    int j = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= cols) return;
    const bool pair = j + 1 < cols;
    int tj0 = t[j], tj1 = pair ? t[j + 1] : 0;
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        const int *cp = C + (i64)i * ldc + j;
        u64 acc0[OZ_L], acc1[OZ_L];
#pragma unroll
        for (int u = 0; u < OZ_L; ++u) acc0[u] = acc1[u] = OZ_MH[u];
        oz_static_for<0, OZ_N>([&](auto L) {
            constexpr int l = decltype(L)::value;
            constexpr u32 P = oz_modulus(l);
            constexpr u32 bias = (u32)((2147483648ull / P) * P);
            constexpr u32 c16 = (1u << 16) % P;
            int v0, v1 = 0;
            if (pair) {
                int2 v = *reinterpret_cast<const int2 *>(cp + (i64)l * plane);
                v0 = v.x;
                v1 = v.y;
            } else {
                v0 = cp[(i64)l * plane];
            }
            u32 u0 = (u32)v0 + bias, u1 = (u32)v1 + bias;
            u32 c0 = (u0 >> 16) * c16 + (u0 & 0xffffu), c1 = (u1 >> 16) * c16 + (u1 & 0xffffu);
#pragma unroll
            for (int v = 0; v < OZ_L; ++v) {
                acc0[v] += (u64)c0 * OZ_W[l][v];
                acc1[v] += (u64)c1 * OZ_W[l][v];
            }
        });
        int si = s[i];
        double val = oz_crt_finish(acc0, si + tj0);
        if (ab_mode >= 1) val = __dmul_rn(alpha, val);
        if (ab_mode == 2) val = __dadd_rn(val, __dmul_rn(beta, C0[(i64)i * crs + (i64)j * ccs]));
        out[(i64)i * ors + (i64)j * ocs] = val;
        if (pair) {
            val = oz_crt_finish(acc1, si + tj1);
            if (ab_mode >= 1) val = __dmul_rn(alpha, val);
            if (ab_mode == 2)
                val = __dadd_rn(val, __dmul_rn(beta, C0[(i64)i * crs + (i64)(j + 1) * ccs]));
            out[(i64)i * ors + (i64)(j + 1) * ocs] = val;
        }
    }
}

#define OZ_CRT_ENTRY(NAME, T)                                                                  \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        NAME(const T *__restrict__ C, i64 plane, i64 ldc, int rows, int cols,                  \
             const int *__restrict__ s, const int *__restrict__ t, double *__restrict__ out,   \
             i64 ors, i64 ocs, int ab_mode, double alpha, double beta,                         \
             const double *__restrict__ C0, i64 crs, i64 ccs) {                                \
        oz_crt_body<T>(C, plane, ldc, rows, cols, s, t, out, ors, ocs, ab_mode, alpha, beta,   \
                       C0, crs, ccs);                                                          \
    }
OZ_CRT_ENTRY(oz_crt, int)
OZ_CRT_ENTRY(oz_crt_u8, unsigned char)

#ifdef OZ_CX_MAX
// The complex scheme's recombination and CRT in one pass (compiled with the complex
// table's prelude, ozaki_backend/cuda/_prelude.py complex_table_prelude, before its CRT
// constants): for every element, from the int32 products C1 = phi_+(A')phi_+(B') and
// C2 = phi_-(A')phi_-(B') (congruent mod m_l), the residues of Re = (P1 + P2)/2 and
// Im = (P1 - P2)/(2 r) in [0, m_l) (the bytes kernels/complex.cu oz_cx_recombine writes),
// both step-1 sums, and both values RN(X 2^-(s_i + t_j)), written as the real and
// imaginary part of the complex128 output (element strides ors, ocs in doubles).
// Y' is congruent modulo M to the Y' of the recombined residues followed by oz_crt_u8
// (the reference's stages), so X and its rounding are the same bits, without the
// residue bytes going through memory.
extern "C" __global__ void __launch_bounds__(256)
oz_cx_crt(const int *__restrict__ C1, const int *__restrict__ C2, i64 plane, i64 ldc, int rows,
          int cols, const int *__restrict__ s, const int *__restrict__ t,
          double *__restrict__ out, i64 ors, i64 ocs) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    int tj = t[j];
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        const int *p1 = C1 + (i64)i * ldc + j, *p2 = C2 + (i64)i * ldc + j;
        u64 ar[OZ_L], ai[OZ_L];
#pragma unroll
        for (int u = 0; u < OZ_L; ++u) ar[u] = ai[u] = OZ_MH[u];
        oz_static_for<0, OZ_N>([&](auto L) {
            constexpr int l = decltype(L)::value;
            constexpr int P = (int)oz_cx_modulus(l);
            int c1 = p1[(i64)l * plane] % P, c2 = p2[(i64)l * plane] % P;
            c1 += c1 < 0 ? P : 0;
            c2 += c2 < 0 ? P : 0;
            // (c1 + c2) OZ_W2[l] = ((c1 + c2) / 2 mod m_l) w_l and (c1 - c2 + m_l) OZ_W2R[l]
            // = ((c1 - c2) / (2 r) mod m_l) w_l modulo M: the recombined residues' terms
            // (ozaki_backend/cuda/_prelude.py complex_crt_prelude), values below 2 m_l.
            u32 re = (u32)(c1 + c2), im = (u32)(c1 - c2 + P);
#pragma unroll
            for (int v = 0; v < OZ_L; ++v) {
                ar[v] += (u64)re * OZ_W2[l][v];
                ai[v] += (u64)im * OZ_W2R[l][v];
            }
        });
        double *o = out + (i64)i * ors + (i64)j * ocs;
        int e = s[i] + tj;
        o[0] = oz_crt_finish(ar, e);
        o[1] = oz_crt_finish(ai, e);
    }
}
#endif  // OZ_CX_MAX
