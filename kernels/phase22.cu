// Seed scheme `scheme="phase22"` (docs/spec.md §9), mirrored by ozaki_backend/cuda/phase22.py
// and, stage by stage, by ozaki_backend/reference/phase22.py. Everything before the
// float64 accumulation is exact integer arithmetic, so these kernels agree with the CPU
// reference bit for bit whatever the launch shape or the order atomics land in.
//
// Compiled with a generated prelude (ozaki_backend/cuda/phase22.py, from the exact
// integers of ozaki_backend/phase22_tables.py):
//   OZ22_NP, oz22_prime(i)        the primes, compile-time (x % p becomes a multiply-high)
//   OZ22_SHIFT_HI, OZ22_SHIFT_LO  hi = RN(v 2^17), lo = RN((v - hi 2^-17) 2^34)
//   OZ22_TILE_M, OZ22_TILE_N      output tile of the adaptive prime count
//   OZ22_M[8], OZ22_MU[8]         prefix products M_nl, Barrett constants floor(2^64 / M_nl)
//   OZ22_COEF[29], OZ22_OFF[8]    the flat CRT coefficient table and its offsets
//   OZ22_PASS_A/B[4], OZ22_PASS_SCALE[4]   slices (0 = hi, 1 = lo) and scales of the passes
//   OZ22_INV_HI, OZ22_INV_LO      2^-17, 2^-34
#include "common.cuh"

#ifndef OZ22_NP
#error "phase22.cu is compiled with a generated prelude (ozaki_backend/cuda/phase22.py)"
#endif

#define OZ22_NPASS 4
#define OZ22_NPLANES (2 * OZ22_NP)  // residue planes per operand: slice * NP + prime

__device__ __forceinline__ u64 oz22_umulhi(u64 a, u64 b) { return __umul64hi(a, b); }

// RN(mant 2^sh), ties to even, for mant < 2^53. Callers keep the result below 2^63.
__device__ __forceinline__ u64 oz22_rne_shift(u64 mant, int sh) {
    if (sh >= 0) return sh >= 64 ? 0ull : mant << sh;
    int q = -sh;
    if (q >= 54) return 0ull;  // mant < 2^53 <= 2^(q-1): below one half
    u64 r = mant >> q;
    u64 rem = mant & ((1ull << q) - 1);
    u64 half = 1ull << (q - 1);
    return r + ((rem > half || (rem == half && (r & 1ull))) ? 1ull : 0ull);
}

// hi, lo of x 2^-E (|x| < 2^E) from the bit pattern, exactly as the reference's float64
// steps. With V = x 2^(SHIFT_LO - E) as an exact rational:
//   hi = RN(V / 2^(LO-HI))   (the reference's rint(v 2^17): v 2^17 is exact)
//   lo = RN(V) - hi 2^(LO-HI) (the reference's rint((v - hi 2^-17) 2^34): both steps are
//        exact, and subtracting an even integer keeps the half-to-even parity).
// v = ldexp(x, -E) rounds only when |v| < 2^-1022, where hi = lo = 0 either way.
struct Oz22Split {
    int hi, lo;
};

__device__ __forceinline__ Oz22Split oz22_split(double x, int E) {
    OzDec d = oz_decompose(x);
    int t = d.ex - E + OZ22_SHIFT_LO;
    long long h = (long long)oz22_rne_shift(d.mant, t - (OZ22_SHIFT_LO - OZ22_SHIFT_HI));
    long long n = (long long)oz22_rne_shift(d.mant, t);
    long long l = n - (h << (OZ22_SHIFT_LO - OZ22_SHIFT_HI));
    Oz22Split s;
    s.hi = (int)(d.neg ? -h : h);
    s.lo = (int)(d.neg ? -l : l);
    return s;
}

// x mod P in [0, P) (the reference's np.mod: the sign of the divisor).
template <int P>
__device__ __forceinline__ u32 oz22_mod(int x) {
    int r = x % P;
    return (u32)(r < 0 ? r + P : r);
}

// ldexp(x, s) rounded to nearest even, as C's ldexp (NumPy's np.ldexp): exact unless the
// result is subnormal (one rounding, gradual underflow) or overflows (+-inf). Done on
// the bits so that no multiplication by a power of two can round twice.
__device__ __forceinline__ double oz22_ldexp(double x, int s) {
    u64 b = (u64)__double_as_longlong(x);
    u64 sign = b & 0x8000000000000000ull;
    int f = (int)((b >> 52) & 0x7ff);
    if (f == 0x7ff || (b << 1) == 0) return x;  // +-inf, NaN, +-0
    u64 mant = b & OZ_MASK52;
    int ex;  // |x| = mant 2^ex with 2^52 <= mant < 2^53
    if (f) {
        mant |= 1ull << 52;
        ex = f - 1075;
    } else {
        int lz = __clzll((long long)mant) - 11;
        mant <<= lz;
        ex = -1074 - lz;
    }
    int e2 = ex + s;  // exponent of the result's last mantissa bit
    u64 out;
    if (e2 > 971) {
        out = 0x7FF0000000000000ull;  // >= 2^1024
    } else if (e2 >= -1074) {
        out = ((u64)(e2 + 1075) << 52) | (mant & OZ_MASK52);
    } else {
        // subnormal: one rounding; a carry into 2^52 gives the smallest normal's pattern
        out = oz22_rne_shift(mant, e2 + 1074);
    }
    return __longlong_as_double((long long)(sign | out));
}

// (sum_i c_i f_i) mod M_nl by Barrett, folded at M_nl / 2. Exact for every s < 2^64:
// mu = floor(2^64 / M) gives s mu / 2^64 in (s/M - 1, s/M], so q = umulhi(s, mu) is
// floor(s/M) or one less, s - q M lies in [0, 2M) and one subtraction finishes. (The
// kernel's sums are below 7 * 126 * M_7 < 2^58.) M_nl is odd: "s > M/2" is "2s > M".
__device__ __forceinline__ i64 oz22_fold(u64 s, int nl) {
    u64 M = OZ22_M[nl];
    u64 q = oz22_umulhi(s, OZ22_MU[nl]);
    u64 r = s - q * M;
    if (r >= M) r -= M;
    return 2 * r > M ? (i64)r - (i64)M : (i64)r;
}

// ---------------------------------------------------------------------------------
// split_hi_lo + residues_01, straight into the GEMM layout, plus the per-tile maxima of
// |hi|, |lo| that choose_nl needs.
//
// X: the operand read row-wise (A, or B through its transpose), rows x cols, any
// strides; E: row exponents (null: 0, X already prescaled). R (may be null): int8 planes,
// plane index slice * NP + prime, each rows x kpad (k contiguous, plane stride `plane`),
// columns cols..kpad-1 written as zeros. smax (may be null): u32 (2, nch, ntiles) zeroed
// by the caller; smax[slice][chunk][row / tile_rows] = max |slice| over the tile's rows
// and the chunk's columns (kchunk a multiple of 16, so a 64-column block meets at most 4
// chunks and 4 consecutive columns never straddle two). hi_out, lo_out (may be null):
// int64 rows x cols, row-major (stage outputs for tests).
extern "C" __global__ void __launch_bounds__(256)
oz22_split_residues(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
                    int rows_fast, int kpad, const int *__restrict__ E, i8 *__restrict__ R,
                    i64 plane, int kchunk, int tile_rows, u32 *__restrict__ smax, int nch,
                    int ntiles, i64 *__restrict__ hi_out, i64 *__restrict__ lo_out) {
    __shared__ double tile[OZ_TR][OZ_TK + 1];
    __shared__ u32 bmax[2][4];
    int row0 = blockIdx.y * OZ_TR, col0 = blockIdx.x * OZ_TK;
    if (threadIdx.x < 8) bmax[threadIdx.x >> 2][threadIdx.x & 3] = 0u;
    oz_load_tile(tile, X, rs, cs, rows, cols, row0, col0, rows_fast);
    __syncthreads();
    int ch0 = col0 / kchunk;
    // Thread -> (row, 4 consecutive k): one 32-bit word per plane.
    int q = threadIdx.x & 15;
#pragma unroll 1
    for (int it = 0; it < 2; ++it) {
        int rr = (threadIdx.x >> 4) + 16 * it;
        int gr = row0 + rr;
        int c = col0 + 4 * q;
        if (gr >= rows || c >= kpad) continue;
        int e = E ? E[gr] : 0;
        int hi[4], lo[4];
        u32 mh = 0, ml = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            Oz22Split s = oz22_split(tile[rr][4 * q + j], e);  // padding reads 0.0
            hi[j] = s.hi;
            lo[j] = s.lo;
            mh = max(mh, (u32)abs(s.hi));
            ml = max(ml, (u32)abs(s.lo));
        }
        if (hi_out) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (c + j < cols) {
                    hi_out[(i64)gr * cols + c + j] = hi[j];
                    lo_out[(i64)gr * cols + c + j] = lo[j];
                }
            }
        }
        if (R) {
            i8 *dst = R + (i64)gr * kpad + c;
            oz_static_for<0, OZ22_NP>([&](auto L) {
                constexpr int l = decltype(L)::value;
                constexpr int P = oz22_prime(l);
                u32 wh = 0, wl = 0;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    wh |= oz22_mod<P>(hi[j]) << (8 * j);
                    wl |= oz22_mod<P>(lo[j]) << (8 * j);
                }
                *reinterpret_cast<u32 *>(dst + (i64)l * plane) = wh;
                *reinterpret_cast<u32 *>(dst + (i64)(OZ22_NP + l) * plane) = wl;
            });
        }
        if (smax && (mh | ml)) {
            int s = c / kchunk - ch0;
            atomicMax(&bmax[0][s], mh);
            atomicMax(&bmax[1][s], ml);
        }
    }
    __syncthreads();
    if (smax && threadIdx.x < 8) {
        int sl = threadIdx.x >> 2, s = threadIdx.x & 3;
        int ch = ch0 + s;
        u32 v = bmax[sl][s];
        if (v && ch < nch)
            atomicMax(smax + ((i64)sl * nch + ch) * ntiles + row0 / tile_rows, v);
    }
}

// ---------------------------------------------------------------------------------
// choose_nl_tiles for every chunk and pass at once. amax: u32 (2, nch, ntr) maxima of
// the A slices per 128-row tile; bmax: u32 (2, nch, ntc) of the B slices per 64-column
// tile. nl[c][P][ti][tj] = the smallest prefix with kc max|a| max|b| < M_nl / 2, i.e.
// 1 + #{nl : M_nl <= 2 kc max|a| max|b|} (M_nl odd), with kc the chunk's true length:
// the reference's searchsorted. 2 kc a b <= 2^13 2^34 < 2^63: exact in u64. A value
// above NP means "out of the 7-prime range" (impossible for kc <= 4096, |hi| <= 2^17:
// 2 kc 2^34 = 2^47 < M_7); the driver reads nlmax once, after the product, and raises.
// need[c][ti][tj] = max over the passes (what the modular products must cover);
// nlmax[c] (zeroed by the caller) = max over the chunk's tiles.
extern "C" __global__ void oz22_choose_nl(const u32 *__restrict__ amax,
                                          const u32 *__restrict__ bmax, int nch, int ntr,
                                          int ntc, int k, int kchunk, i8 *__restrict__ nl,
                                          i8 *__restrict__ need, int *__restrict__ nlmax) {
    i64 per = (i64)ntr * ntc;
    i64 total = (i64)nch * per;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int c = (int)(idx / per);
        int rem = (int)(idx - (i64)c * per);
        int ti = rem / ntc, tj = rem - ti * ntc;
        i64 k0 = (i64)c * kchunk;
        u64 kc = (u64)(min((i64)k, k0 + kchunk) - k0);
        int best = 0;
#pragma unroll
        for (int P = 0; P < OZ22_NPASS; ++P) {
            u64 a = amax[((i64)OZ22_PASS_A[P] * nch + c) * ntr + ti];
            u64 b = bmax[((i64)OZ22_PASS_B[P] * nch + c) * ntc + tj];
            u64 thr2 = 2ull * kc * a * b;
            int n = 1;
#pragma unroll
            for (int l = 1; l <= OZ22_NP; ++l)
                if (OZ22_M[l] <= thr2) n = l + 1;
            nl[((i64)c * OZ22_NPASS + P) * per + rem] = (i8)n;
            best = max(best, n);
        }
        need[idx] = (i8)best;
        atomicMax(nlmax + c, best);
    }
}

// ---------------------------------------------------------------------------------
// crt_reconstruct_nl for a group of k chunks, summed over the chunks, and (when C is
// given) accumulate_passes + finalize: one read of the group's residue planes, and no
// int64 pass sums in memory unless the chunks need more than one group.
//
// Rp: uint8 residue planes (from the modular products), plane stride `plane`, rows x ldo
// (ldo a multiple of 16): chunk g's pass P, prime l is plane (g * npass + P) * NP + l.
// nl: int8 prime counts, chunk g's pass P map at nl + g * nl_chunk + P * nl_pass,
// (ceil(rows/128), ntc). Only planes l < nl(tile) are read: the products guarantee
// nothing else. A count above NP (out of the CRT range; the driver raises afterwards) is
// taken as NP, so that nothing outside the tables is read.
// X: int64 pass sums (X + P * xplane, rows x ldx); xin: start from X (else 0);
// xout: store the sums into X. x_P = [X_P +] sum_g fold_g, exact in int64, as the
// reference's chunk loop.
// C (may be null; needs npass = 4): acc = 0; acc += RN(x_P) 2^s_P for the passes in order
// (no contraction), C = ldexp(acc, E_i + F_j) (E, F may be null: 0), strides (crs, ccs);
// acc_out (may be null): acc, rows x cols row-major (stage output for tests).
// nchunks = 0 with xin: accumulate_passes + finalize of given pass sums.
// Each thread takes 4 consecutive columns (one 32-bit load per plane, a group never
// straddles a 64-column tile) and keeps one pass's 4 sums at a time.
extern "C" __global__ void __launch_bounds__(256)
oz22_crt_finalize(const unsigned char *__restrict__ Rp, i64 plane, i64 ldo, int rows,
                  int cols, int nchunks, int npass, const i8 *__restrict__ nl, i64 nl_chunk,
                  i64 nl_pass, int ntc, i64 *X, i64 xplane, i64 ldx, int xin, int xout,
                  const int *__restrict__ E, const int *__restrict__ F,
                  double *__restrict__ C, i64 crs, i64 ccs, double *__restrict__ acc_out) {
    int ncg = (cols + 3) >> 2;
    i64 total = (i64)rows * ncg;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int r = (int)(idx / ncg);
        int j = 4 * (int)(idx - (i64)r * ncg);
        int w = min(4, cols - j);  // valid columns of this group
        i64 cell = (i64)(r / OZ22_TILE_M) * ntc + j / OZ22_TILE_N;
        const unsigned char *rp = Rp + (i64)r * ldo + j;
        double acc[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll 1
        for (int P = 0; P < npass; ++P) {
            i64 *xp = X + P * xplane + (i64)r * ldx + j;
            i64 x[4] = {0, 0, 0, 0};
            if (xin) {
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (u < w) x[u] = xp[u];
            }
#pragma unroll 1
            for (int g = 0; g < nchunks; ++g) {
                int n = min((int)nl[g * nl_chunk + P * nl_pass + cell], OZ22_NP);
                int off = OZ22_OFF[n];
                const unsigned char *pp = rp + (i64)(g * npass + P) * OZ22_NP * plane;
                u64 s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma unroll
                for (int l = 0; l < OZ22_NP; ++l) {
                    if (l < n) {
                        u32 v = *reinterpret_cast<const u32 *>(pp + (i64)l * plane);
                        u64 f = OZ22_COEF[off + l];
                        s0 += (u64)(v & 0xffu) * f;
                        s1 += (u64)((v >> 8) & 0xffu) * f;
                        s2 += (u64)((v >> 16) & 0xffu) * f;
                        s3 += (u64)(v >> 24) * f;
                    }
                }
                x[0] += oz22_fold(s0, n);
                x[1] += oz22_fold(s1, n);
                x[2] += oz22_fold(s2, n);
                x[3] += oz22_fold(s3, n);
            }
            if (xout) {
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (u < w) xp[u] = x[u];
            }
            if (C) {
                double sc = OZ22_PASS_SCALE[P];
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    acc[u] = __dadd_rn(acc[u], __dmul_rn(__ll2double_rn(x[u]), sc));
            }
        }
        if (C) {
            int er = E ? E[r] : 0;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                if (u < w) {
                    if (acc_out) acc_out[(i64)r * cols + j + u] = acc[u];
                    C[(i64)r * crs + (i64)(j + u) * ccs] =
                        oz22_ldexp(acc[u], er + (F ? F[j + u] : 0));
                }
            }
        }
    }
}

// The driver's exponents, in place: E = 0 for an all-zero row (the scaling kernel's
// INT_MIN), as the reference; *flag = 1 where some row holds Inf/NaN (exponent 2000:
// finite exponents are <= 1024). The driver reads the flag once, after the product.
extern "C" __global__ void oz22_fix_exponents(int *__restrict__ E, int n,
                                              u32 *__restrict__ flag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int e = E[i];
        if (e == (int)0x80000000) E[i] = 0;
        if (e > 1024) atomicMax(flag, 1u);
    }
}

// finalize alone: C = ldexp(A, sign (E_i + F_j)) for a rows x cols float64 view A (any
// strides); E, F may be null (0). sign = -1 is the prescale v = ldexp(A, -E).
extern "C" __global__ void __launch_bounds__(256)
oz22_ldexp_2d(const double *__restrict__ A, i64 ars, i64 acs, int rows, int cols,
              const int *__restrict__ E, const int *__restrict__ F, int sign,
              double *__restrict__ C, i64 crs, i64 ccs) {
    i64 total = (i64)rows * cols;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int r = (int)(idx / cols), j = (int)(idx - (i64)r * cols);
        int e = (E ? E[r] : 0) + (F ? F[j] : 0);
        C[(i64)r * crs + (i64)j * ccs] = oz22_ldexp(A[(i64)r * ars + (i64)j * acs], sign * e);
    }
}

// The residual correction's operands: Ahat = hi 2^-17 + lo 2^-34 of ldexp(X, -E_row)
// (exact: both terms are multiples of 2^-34 below 2 in magnitude), rows x cols row-major.
extern "C" __global__ void __launch_bounds__(256)
oz22_recombine(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
               const int *__restrict__ E, double *__restrict__ ahat) {
    i64 total = (i64)rows * cols;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int r = (int)(idx / cols), j = (int)(idx - (i64)r * cols);
        Oz22Split s = oz22_split(X[(i64)r * rs + (i64)j * cs], E ? E[r] : 0);
        ahat[idx] = __dadd_rn(__dmul_rn((double)s.hi, OZ22_INV_HI),
                              __dmul_rn((double)s.lo, OZ22_INV_LO));
    }
}

// Test hook for the exactness range of oz22_fold: out_i = fold(s_i, nl_i) for any u64 s.
extern "C" __global__ void oz22_fold_test(const u64 *__restrict__ s, const int *__restrict__ nl,
                                          i64 *__restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = oz22_fold(s[i], nl[i]);
}
