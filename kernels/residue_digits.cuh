// Truncation and residues, the machinery shared by kernels/residues.cu (the real
// moduli) and kernels/complex.cu (the complex moduli): docs/spec.md §3–4.
//
// Reads the float64 operand once (rows x cols view, any strides) and writes all N int8
// planes in the layout the TN GEMM wants: plane l is rows x kpad, row-major (k
// contiguous), columns cols..kpad-1 zeroed. The residues are unique integers, so this
// is bit-for-bit the reference whatever the method; the method is chosen for speed:
// float64 arithmetic, exact by the argument below, with an integer fallback.
//
// Float64 path (all but pathological inputs). v = x 2^s, A' = trunc(v) (spec §3).
//
//   Digits. With |A'| < 2^(43 ND) (ND = 1, 2, 3 digits; one digit only when |A'| < 2^52),
//   A' = sum_k X_k 2^(43 k) with X_k = trunc(R_(k+1) / 2^(43 k)), R_ND = v,
//   R_k = R_(k+1) - X_k 2^(43 k) (so R_k = v - trunc(v / 2^(43 k)) 2^(43 k): |R_k| <
//   2^(43 k), the sign of v, and X_0 = trunc(R_1)). All X_k carry the sign of v and
//   |X_k| < 2^43 (< 2^52 for the single digit). They are computed exactly in float64:
//   * u = x 2^s1 (s = s1 + s2, |s1|, |s2| <= 800). If u is normal the product is exact
//     (no overflow: |u| = |v| 2^-s2 < 2^(128 + 800)); otherwise |x 2^s1| < 2^-1022, so
//     |u| <= 2^-1022 (rounding is monotone), |v| < 2^-222 and A' = 0, and the steps below
//     give 0 digits and leave u unchanged, since |u 2^(s2 - 43 k)| <= 2^-222 < 1.
//   * a_k = fma_rz(u, 2^(s2 - 43 k), m) with m = copysign(2^52, x). |R_(k+1)| 2^-(43 k)
//     < 2^52 (top digit: the digit count's bound on |v|; below: |R_(k+1)| < 2^(43 k + 43)),
//     so the exact sum m + R_(k+1) 2^-(43 k) lies in [2^52, 2^53) (x >= 0) or
//     (-2^53, -2^52] (x < 0), where the doubles are the integers, and rounding toward
//     zero gives a_k = m + X_k exactly. X_k = a_k - m exactly (an integer below 2^52).
//   * u = fma(X_k, -2^(43 k - s2), u) = R_k 2^-s2 exactly: R_k is a multiple of the
//     last bit of v and |R_k| <= |v|, so R_k 2^-s2 has at most 53 significant bits, all
//     at or above the last bit of the normal u (2^-1074 at least): representable.
//   * The fraction field of a_k is |X_k|, so X_k mod 2^32 is its low word, negated
//     for x < 0 (w_k below).
//
//   Remainder, for each odd modulus p (c_k: the symmetric residue of 2^(43 k)):
//   (1) y = X_0 + c_1 X_1 + c_2 X_2 ≡ A' (mod p), an integer with |y| < 2^52: one
//       digit: |y| < 2^52; two: |y| < 2^43 (1 + 127) = 2^50; three: |y| < 2^43 +
//       127 (2^43 + 2^42) < 2^51. Each partial sum is such an integer: each fma exact.
//   (2) t = fma(y, inv, 1.5 2^52), inv = fl(1/p) (the table oz_inv_tab, checked by
//       tests/cuda/test_cuda_residues_fast.py). 2^-8 < 1/p < 2^-7, so |inv - 1/p| <= 2^-61
//       and |y inv - y/p| < 2^52 2^-61 = 2^-9 < 1/(2p). Write y/p = n + j/p with j the
//       symmetric residue, |j| <= (p-1)/2: y/p is at least 1/2 - (p-1)/(2p) = 1/(2p)
//       from every half-integer, so the exact y inv lies strictly inside
//       (n - 1/2, n + 1/2). The fma rounds y inv + 1.5 2^52 once, and that sum is in
//       [2^52, 2^53) (|y inv| < 2^45), where the doubles are the integers: t =
//       1.5 2^52 + n exactly (no tie can occur).
//   (3) The fraction field of t is 2^51 + n: the low 32 bits of t are n mod 2^32.
//   (4) With w_k = X_k mod 2^32, yw = w_0 + c_1 w_1 + c_2 w_2 ≡ y (mod 2^32), and
//       r = yw - n p ≡ y - n p = j (mod 2^32): the low byte of r is j as int8, the
//       stored residue (|j| <= 127).
//   For p = 256 the residue in [-128, 127] is A' mod 256 read as int8: the low byte of
//   w_0 (2^43 ≡ 0 mod 2^32, so w_0 ≡ A' mod 2^32).
//   Per element and modulus: ND fma (FP64 pipe) and ND integer multiply-adds.
//
// The number of digits is voted per warp (uniform, no divergence) from the largest
// exponent field of the warp's elements: |x| < 2^E with E = max(f, 1) - 1022, so
// |A'| < 2^(E + s). Rows with |s| > 1600 (far outside anything the scaling stage
// produces) or |A'| possibly >= 2^128 take the integer path (oz_int_residue).
#ifndef OZ_RESIDUE_DIGITS_CUH
#define OZ_RESIDUE_DIGITS_CUH
#include "common.cuh"

#define OZ_FP_SMAX 1600        // |s| bound of the float64 path
#define OZ_DIGIT 43            // bits per digit of the float64 path

// The symmetric residue of 2^e modulo an odd p (compile time).
__host__ __device__ constexpr int oz_sym_pow2(u32 p, int e) {
    u32 r = 1u % p;
    for (int i = 0; i < e; ++i) r = (2u * r) % p;
    return r > (p - 1) / 2 ? (int)r - (int)p : (int)r;
}

// ±2^e as a double, for -1022 <= e <= 1023 (neg: the sign bit, 0 or 0x80000000).
__device__ __forceinline__ double oz_pow2d(int e, u32 neg = 0u) {
    return __hiloint2double((int)(((u32)(e + 1023) << 20) | neg), 0);
}

// ---------------------------------------------------------------------------------
// The float64 path: the header's proof.

// Per-row factors of the digit extraction, for |s| <= OZ_FP_SMAX:
// u = x p1, X_k from u 2^(s2 - 43 k) (sc[k]), u -= X_k 2^(43 k - s2) (isc[k], negated).
template <int ND>
struct OzScale {
    double p1, sc[ND], isc[ND];
    __device__ __forceinline__ explicit OzScale(int s) {
        int s1 = s >> 1, s2 = s - s1;
        p1 = oz_pow2d(s1);
#pragma unroll
        for (int k = 0; k < ND; ++k) {
            sc[k] = oz_pow2d(s2 - OZ_DIGIT * k);
            isc[k] = oz_pow2d(OZ_DIGIT * k - s2, 0x80000000u);
        }
    }
};

// Signed digits of A' = trunc(x 2^s): d[k] = X_k exactly as a double, w[k] = X_k mod 2^32.
template <int ND>
__device__ __forceinline__ void oz_digits(double x, const OzScale<ND> &f, double (&d)[ND],
                                          u32 (&w)[ND]) {
    u32 xhi = (u32)__double2hiint(x);
    u32 sm = (u32)((int)xhi >> 31);                              // 0 or ~0: the sign
    double m = __hiloint2double((int)((xhi & 0x80000000u) | 0x43300000u), 0);  // ±2^52
    double u = __dmul_rn(x, f.p1);
#pragma unroll
    for (int k = ND - 1; k >= 0; --k) {
        double a = __fma_rz(u, f.sc[k], m);                      // m + X_k
        d[k] = __dsub_rn(a, m);
        w[k] = ((u32)__double2loint(a) ^ sm) - sm;               // ±|X_k| mod 2^32
        if (k > 0) u = __fma_rn(d[k], f.isc[k], u);              // R_k 2^-s2
    }
}

// Step (1) of the header for the odd P: y = X_0 + c_1 X_1 + c_2 X_2 (exact, |y| < 2^52)
// and yw = the same sum of the words w_k, congruent to y modulo 2^32.
template <u32 P, int ND>
__device__ __forceinline__ void oz_digit_sum(const double (&d)[ND], const u32 (&w)[ND],
                                             double &y, u32 &yw) {
    y = d[0];
    yw = w[0];
    if constexpr (ND >= 2) {
        constexpr int c1 = oz_sym_pow2(P, OZ_DIGIT);
        y = __fma_rn(d[1], (double)c1, y);
        yw += w[1] * (u32)c1;
    }
    if constexpr (ND >= 3) {
        constexpr int c2 = oz_sym_pow2(P, 2 * OZ_DIGIT);
        y = __fma_rn(d[2], (double)c2, y);
        yw += w[2] * (u32)c2;
    }
}

// Steps (2)-(4) for an integer y, |y| < 2^52, with yw = y mod 2^32: the symmetric residue
// j of y modulo the odd P, as a u32 congruent to j modulo 2^32 (so its int value is j,
// and its low byte is j as int8); inv = fl(1/P).
template <u32 P>
__device__ __forceinline__ u32 oz_fp_reduce(double y, u32 yw, double inv) {
    double t = __fma_rn(y, inv, 0x1.8p52);                       // 1.5 2^52 + n
    return yw - (u32)__double2loint(t) * P;
}

// The symmetric residue of A' modulo the odd P (or 256): the int value of the result for
// an odd P, its low byte as int8 for both; inv = fl(1/P) (step (2) of the header).
template <u32 P, int ND>
__device__ __forceinline__ u32 oz_fp_residue_of(const double (&d)[ND], const u32 (&w)[ND],
                                                double inv) {
    if constexpr (P == 256u) {
        return w[0];
    } else {
        double y;
        u32 yw;
        oz_digit_sum<P, ND>(d, w, y, yw);
        return oz_fp_reduce<P>(y, yw, inv);
    }
}

// The path of a thread's elements (header): 0, 1, 2 = the float64 path with that many
// digits minus one, 3 = the integer path; hmax is the largest high word (sign cleared)
// of the elements, s the row's shift. Callers vote it per warp.
// One digit holds |A'| < 2^b1 (52 for the header's proof; less where the caller adds to
// the digit sum before reducing it).
__device__ __forceinline__ int oz_res_tier(u32 hmax, int s, int b1 = 52) {
    // |A'| < 2^b for every element of the thread: the largest exponent field.
    int b = max((int)(hmax >> 20), 1) - 1022 + s;
    return (s < -OZ_FP_SMAX || s > OZ_FP_SMAX) ? 3
         : b <= b1 ? 0 : b <= 2 * OZ_DIGIT ? 1 : b <= 128 ? 2 : 3;
}

// J = 4 or 8 consecutive int8 of one plane: one 4- or 8-byte store.
template <int J>
__device__ __forceinline__ void oz_store_bytes(i8 *p, const u32 (&r)[J]) {
    u32 w0 = __byte_perm(__byte_perm(r[0], r[1], 0x0040), __byte_perm(r[2], r[3], 0x0040),
                         0x5410);
    if constexpr (J == 4) {
        *reinterpret_cast<u32 *>(p) = w0;
    } else {
        u32 w1 = __byte_perm(__byte_perm(r[4], r[5], 0x0040), __byte_perm(r[6], r[7], 0x0040),
                             0x5410);
        *reinterpret_cast<uint2 *>(p) = make_uint2(w0, w1);
    }
}

// ---------------------------------------------------------------------------------
// The integer path: exact for any x and s (|A'| of any size).

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

// 2^e mod P for odd P and e >= 0 (the |x| >= 2^128 case).
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
// The 128-bit integer is cut into seven digits of 21 bits; one modulus then costs a few
// multiply-adds with the constants 2^(digit position) mod P (the sum stays below 2^32),
// the sign as B - sum with B a multiple of P above any sum, and one reduction that
// lands directly in the symmetric range: (x + h) mod P - h. Beyond 2^128:
// (mant mod P) (2^big mod P).
template <u32 P>
__device__ __forceinline__ int oz_int_residue(const OzInt &x) {
    if constexpr (P == 256u) {
        // the low byte of the two's complement value (beyond 2^64: a multiple of 256)
        u32 lo = x.big ? 0u : (u32)x.lo;
        if (x.neg) lo = 0u - lo;
        return (int)(signed char)(lo & 0xffu);
    } else {
        constexpr u32 h = (P - 1) / 2;
        constexpr u32 M21 = 0x1fffffu;
        constexpr u32 c1 = (u32)((1ull << 21) % P);
        constexpr u32 c2 = (u32)((1ull << 42) % P);
        constexpr u32 c3 = (u32)((1ull << 63) % P);
        constexpr u32 c4 = (u32)(((1ull << 63) % P) * ((1ull << 21) % P) % P);
        constexpr u32 c5 = (u32)(((1ull << 63) % P) * ((1ull << 42) % P) % P);
        constexpr u32 c6 = (u32)(((1ull << 63) % P) * ((1ull << 63) % P) % P);
        constexpr u32 smax = (1u << 21) * (1u + 6u * (P - 1));
        constexpr u32 B = P * ((smax + P - 1) / P);
        u64 lo = x.lo, hi = x.hi;
        u32 sum = ((u32)lo & M21) + ((u32)(lo >> 21) & M21) * c1 + ((u32)(lo >> 42) & M21) * c2
            + ((u32)((lo >> 63) | (hi << 1)) & M21) * c3 + ((u32)(hi >> 20) & M21) * c4
            + ((u32)(hi >> 41) & M21) * c5 + (u32)(hi >> 62) * c6;
        if (x.big) sum = ((u32)(x.lo % P)) * oz_pow2_mod<P>(x.big);
        u32 sp = x.neg ? B - sum : sum;
        return (int)((sp + h) % P) - (int)h;
    }
}

// ---------------------------------------------------------------------------------

#endif  // OZ_RESIDUE_DIGITS_CUH
