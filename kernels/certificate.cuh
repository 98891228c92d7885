// The certificate's element-wise arithmetic (docs/spec.md §10), shared by the count
// search of kernels/scaling.cu and the passes of kernels/certificate.cu. Each function
// is ozaki_backend/spec/certificate.py's formula of the same name, operation for
// operation: every double operation is an explicit round-to-nearest intrinsic (NVRTC
// contracts a * b + c into a fused multiply-add otherwise, which NumPy never does), so
// both engines reach the same bits.
#ifndef OZ_CERTIFICATE_CUH
#define OZ_CERTIFICATE_CUH

#include "common.cuh"

#define OZ_ETA 4.9406564584124654e-324
#define OZ_INF __longlong_as_double(0x7ff0000000000000ll)
// spec/rules.py NATIVE_K, GATHER_H; spec/certificate.py _TARGET = KAPPA sqrt(2) / 16,
// SQRT2, the exponents of KAPPA u (-53), POST_KAPPA NATIVE_TYPICAL u (-58), POST_CAP (10).
#define OZ_NATIVE_K 4096.0
#define OZ_GATHER_H 8
#define OZ_SQRT2 1.4142135623730951
#define OZ_TARGET (OZ_SQRT2 / 16.0)
#define OZ_LOG2_OWN (-53)
#define OZ_LOG2_POST (-58)
#define OZ_LOG2_CAP 10
// spec/certificate.py CODE_ZERO, CODE_MIN
#define OZ_CODE_ZERO (-128)
#define OZ_CODE_MIN (-126)

__device__ __forceinline__ double oz_up(double x) { return nextafter(x, OZ_INF); }
__device__ __forceinline__ double oz_down(double x) { return nextafter(x, 0.0); }
__device__ __forceinline__ int oz_clip_exp(int e) { return min(max(e, -4000), 4000); }
__device__ __forceinline__ double oz_scaled(double x, int e) { return ldexp(x, oz_clip_exp(e)); }
// NumPy's maximum / minimum of two non-NaN doubles.
__device__ __forceinline__ double oz_max(double a, double b) { return a > b ? a : b; }
__device__ __forceinline__ double oz_min(double a, double b) { return a < b ? a : b; }

// spec.terms: k_ij = min(overlap, nA_i, nB_j).
__device__ __forceinline__ int oz_terms(int lo, int hi, int na, int lob, int hib, int nb) {
    return min(min(hi, hib) - max(lo, lob) + 1, min(na, nb));
}

// spec.codes of one non-zero or zero entry x (already equilibrated) of a row of exponent E.
__device__ __forceinline__ int oz_code(double x, int E) {
    if (x == 0.0) return OZ_CODE_ZERO;
    OzDec d = oz_decompose(x);
    int L = 63 - __clzll((long long)d.mant);            // the leading bit's position
    int e = d.ex + L + 1;                               // frexp exponent
    int m1 = L >= 1 ? (int)((d.mant >> (L - 1)) & 1ull) : 0;   // |f| >= 3/4
    int c = 2 * (e - E) + m1;
    return c < OZ_CODE_MIN ? OZ_CODE_ZERO : c;
}

// The gathered lower bound G14 is stored per element as an int16: -1 for 0, else
// ((e + 256) << 2) | i for the value mant_i 2^e, mant = 4, 6, 9 (the products of two
// codes' (2 + m1); e >= -116 for codes >= CODE_MIN).
__device__ __forceinline__ double oz_g16_value(short g) {
    if (g < 0) return 0.0;
    int i = g & 3;
    return ldexp(i == 0 ? 4.0 : i == 1 ? 6.0 : 9.0, (g >> 2) - 256);
}

// The product of two non-zero codes' values (spec.code_value: (2 + m1) 2^(c/2 - 2),
// c/2 rounded down) is mant 2^(e - 4) with e = (ca >> 1) + (cb >> 1), mant = (2 + ma)
// (2 + mb) = 4, 6, 9. Its order key: 4 2^x = 2^(x+2), 6 2^x = 1.5 2^(x+2),
// 9 2^x = 1.125 2^(x+3), so key = 4 (exponent) + rank of the mantissa (1, 1.125, 1.5
// -> 0, 1, 2), shifted by a constant: e 4 + (0, 2, 5) for mant 4, 6, 9. Distinct values
// have distinct keys in the values' order (the keys are distinct mod 4); OZ_INT_MIN for
// a zero code (value 0, below every product).
__device__ __forceinline__ int oz_g16_key(int ca, int cb) {
    if (ca == OZ_CODE_ZERO || cb == OZ_CODE_ZERO) return OZ_INT_MIN;
    int i = (ca & 1) + (cb & 1);                       // mant 4, 6, 9 -> 0, 1, 2
    return 4 * ((ca >> 1) + (cb >> 1)) + (i == 0 ? 0 : i == 1 ? 2 : 5);
}
// The int16 code of the product (its value times 2^14, as oz_g16_value reads it) whose
// key is `key`; -1 for OZ_INT_MIN.
__device__ __forceinline__ short oz_g16_of_key(int key) {
    if (key == OZ_INT_MIN) return -1;
    int q = key & 3;                                   // 0, 2, 1 for mant 4, 6, 9
    int i = q == 0 ? 0 : q == 2 ? 1 : 2;
    int e = (key - (i == 0 ? 0 : i == 1 ? 2 : 5)) >> 2;
    return (short)(((e - 4 + 14 + 256) << 2) | i);
}

// spec.prior for one element: the a-priori test's count-independent part.
struct OzPrior {
    int ke;
    bool exempt, big;
    double cap, nu, target;
};

// spec.window_terms: max(1, min(ke, wA, wB)) with wA = nA - ZA (the row's entries inside
// the bound GEMM's window), ke alone where the side has no window counts (ZA null: the
// complex embedding).
__device__ __forceinline__ int oz_window_terms(int ke, const int *ZA, int na, int ra,
                                               const int *ZB, int nb, int cb) {
    int kw = max(ke, 1);
    if (ZA != nullptr) kw = min(kw, max(min(na - ZA[ra], nb - ZB[cb]), 1));
    return kw;
}

// with_direct: elements of one or two terms are computed directly (exempt); the host
// passes 1 for every product, the complex embedding's included.
// kw: oz_window_terms, the terms P sums at most.
__device__ __forceinline__ OzPrior oz_prior(int ke, int kw, int Ei, int Fj, int kbits, double P,
                                            double G14, bool have_g, bool with_direct) {
    OzPrior q;
    q.ke = ke;
    q.exempt = ke <= (with_direct ? 2 : 0);
    q.big = Ei + Fj + kbits >= 1022;
    double lam = have_g ? oz_max(P, G14) : P;
    double kk = (double)max(ke, 1);
    q.cap = oz_down(__dmul_rn(kk - 1.0, lam));
    double S = __ddiv_rn(P, __dsqrt_rn((double)kw));
    if (have_g) S = oz_max(S, G14);
    double g = __dsqrt_rn(ldexp(oz_min(kk, OZ_NATIVE_K), -1));
    q.nu = __dmul_rn(g, S);
    q.target = __dmul_rn(q.nu, OZ_TARGET);
    return q;
}

// spec.excess / spread of one element from its operands' factors at one count.
__device__ __forceinline__ double oz_x(double fa, double qb, double qa, double fb) {
    return __dadd_rn(__dmul_rn(fa, qb), __dmul_rn(qa, fb));
}

// spec.passes for one element (x: excess, already 0 where the ranges do not meet).
__device__ __forceinline__ bool oz_passes(const OzPrior &q, double x, double w) {
    if (q.exempt || x == 0.0) return true;      // x == 0: the integer product is exact
    if (q.big) return false;
    return x < q.cap && w <= q.target;
}

// spec.truncation_bound of one element.
__device__ __forceinline__ double oz_trunc_bound(double x, int EF) {
    return x == 0.0 ? 0.0 : oz_up(__dadd_rn(oz_scaled(oz_up(x), EF - 67), OZ_ETA));
}

// spec.rounding_bound.
__device__ __forceinline__ double oz_round_bound(double c) {
    return oz_up(__dadd_rn(ldexp(fabs(c), -53), OZ_ETA));
}

// spec.lower_product: 2^(EF - 14) Lambda rounded down, 0 where it overflows.
__device__ __forceinline__ double oz_lower(double lam, int EF) {
    double L = oz_scaled(lam, EF - 14);
    return isinf(L) ? 0.0 : oz_down(L);
}

// spec.upper_product: U = P + SA + SB + min(nA, nB) (0 where a row or column is empty),
// scaled by 2^(EF - 14), rounded up.
__device__ __forceinline__ double oz_upper_abs(double P, int sa, int na, int sb, int nb, int EF) {
    if (na <= 0 || nb <= 0) return 0.0;
    double U = __dadd_rn(__dadd_rn(__dadd_rn(P, (double)sa), (double)sb), (double)min(na, nb));
    return U > 0.0 ? oz_up(__dadd_rn(oz_scaled(U, EF - 14), OZ_ETA)) : 0.0;
}

// spec.gamma(n) = up(up(n u) / down(1 - n u)).
__device__ __forceinline__ double oz_gamma(int n) {
    double nu = __dmul_rn((double)n, 1.1102230246251565e-16);
    return oz_up(__ddiv_rn(oz_up(nu), oz_down(__dsub_rn(1.0, nu))));
}

// spec.repair_bound: gamma_h U + h eta with h roundings per term, rounded up.
__device__ __forceinline__ double oz_repair_bound(int h, double Uabs) {
    int n = max(h, 0);
    return oz_up(__dadd_rn(oz_up(__dmul_rn(oz_gamma(n), Uabs)), __dmul_rn((double)n, OZ_ETA)));
}

// ----------------------------------------------------------------- direct elements
// spec.direct_values: Veltkamp's split, Dekker's product, Knuth's two-sum, Dot2.
__device__ __forceinline__ bool oz_in_range(double x) {
    double a = fabs(x);
    return a == 0.0 || (a >= 0x1p-480 && a < 0x1p480);
}
__device__ __forceinline__ void oz_split(double a, double &hi, double &lo) {
    double c = __dmul_rn(134217729.0, a);
    hi = __dsub_rn(c, __dsub_rn(c, a));
    lo = __dsub_rn(a, hi);
}
__device__ __forceinline__ void oz_two_prod(double a, double b, double &h, double &l) {
    h = __dmul_rn(a, b);
    double ah, al, bh, bl;
    oz_split(a, ah, al);
    oz_split(b, bh, bl);
    l = __dadd_rn(__dadd_rn(__dadd_rn(__dsub_rn(__dmul_rn(ah, bh), h), __dmul_rn(ah, bl)),
                            __dmul_rn(al, bh)),
                  __dmul_rn(al, bl));
}
__device__ __forceinline__ void oz_two_sum(double x, double y, double &s, double &e) {
    s = __dadd_rn(x, y);
    double z = __dsub_rn(s, x);
    e = __dadd_rn(__dsub_rn(x, __dsub_rn(s, z)), __dsub_rn(y, z));
}

// spec.two_prod_scaled: p = RN(a b) and its error e, from Dekker's product of the frexp
// fractions scaled back (exact wherever p is normal and e representable).
__device__ __forceinline__ void oz_two_prod_scaled(double a, double b, double &p, double &e) {
    int ea, eb;
    double fa = frexp(a, &ea), fb = frexp(b, &eb);
    double h, l;
    oz_two_prod(fa, fb, h, l);
    p = __dmul_rn(a, b);
    e = ldexp(l, ea + eb);
}

// (C, bound) of a direct element; g2 = spec's up(gamma_2 up(gamma_2)) from the host.
__device__ __forceinline__ void oz_direct_values(double a1, double b1, double a2, double b2,
                                                 bool two, double g2, double &C, double &bd) {
    double p1 = __dmul_rn(a1, b1), p2 = __dmul_rn(a2, b2);
    bool safe = oz_in_range(a1) && oz_in_range(b1) && oz_in_range(a2) && oz_in_range(b2);
    double h1, l1, h2, l2, s, e;
    oz_two_prod(safe ? a1 : 0.0, safe ? b1 : 0.0, h1, l1);
    oz_two_prod(safe ? a2 : 0.0, safe ? b2 : 0.0, h2, l2);
    oz_two_sum(h1, h2, s, e);
    double dot2 = __dadd_rn(s, __dadd_rn(e, __dadd_rn(l1, l2)));
    double plain = __dadd_rn(p1, p2);
    C = two ? (safe ? dot2 : plain) : p1;
    double r = oz_round_bound(C);
    double S = oz_up(__dmul_rn(oz_up(__dadd_rn(fabs(h1), fabs(h2))), 1.0 + 0x1p-52));
    double b_dot2 = oz_up(__dadd_rn(
        oz_up(__dmul_rn(oz_up(__dadd_rn(r, oz_up(__dmul_rn(g2, S)))), 1.0 + 0x1p-51)),
        2.0 * OZ_ETA));
    double b_plain = oz_up(__dadd_rn(
        oz_up(__dadd_rn(r, oz_round_bound(oz_up(__dadd_rn(fabs(p1), fabs(p2)))))), 2.0 * OZ_ETA));
    bd = two ? (safe ? b_dot2 : b_plain) : r;
}

#endif  // OZ_CERTIFICATE_CUH
