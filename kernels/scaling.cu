// Stages 0, 1 and 5 — equilibration, scaling and the certificate (docs/spec.md §2, §10),
// mirrored by ozaki_backend/cuda/scaling.py and ozaki_backend/cuda/certificate.py.
//
// Every quantity is an exact integer: frexp exponents and trailing zeros from the bit
// pattern, floors and ceilings of power-of-two scaled magnitudes from the mantissa, sums
// in integers (exact and independent of the order the atomics land in), lambda() from
// the float64 bits; the certificate's few float64 operations are the reference's, in
// its order, with no contraction. So everything equals the CPU reference's whatever the
// launch shape.
//
// Operands are read row-wise (A as m x k, B as its transpose n x k, any strides). The
// equilibration exponents S (one per k) are applied on the fly as x 2^(ks S_k), ks = -1
// for A and +1 for B^T (S null: not applied).
#include "certificate.cuh"

// ---------------------------------------------------------------------------------
// One launch initialises a statistics buffer: row r of the (nvals x len) int32 buffer
// is set to v[r] (up to eight rows).
extern "C" __global__ void oz_init_ints(int *__restrict__ buf, i64 len, int nvals, int v0,
                                        int v1, int v2, int v3, int v4, int v5, int v6,
                                        int v7) {
    const int v[8] = {v0, v1, v2, v3, v4, v5, v6, v7};
    i64 total = len * nvals;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x)
        buf[i] = v[i / len];
}

// ---------------------------------------------------------------------------------
// Stage 0: equilibration along k (spec §2.1).

// cmax / cmin of each column of a rows x cols view: the largest / smallest frexp exponent
// of its non-zero entries (2000 for Inf/NaN: a maximum above 1024 flags a non-finite
// operand). cmax must hold OZ_INT_MIN, cmin OZ_INT_MAX on entry. Grid: one block per
// 64 columns and OZ_CE_TILES tiles of 32 rows.
#define OZ_CE_TILES 8   // row tiles per block of oz_col_exponents (fewer atomics)
extern "C" __global__ void __launch_bounds__(256)
oz_col_exponents(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
                 int rows_fast, int *__restrict__ cmax, int *__restrict__ cmin) {
    __shared__ double tile[OZ_TR][OZ_TK + 1];
    int col0 = blockIdx.x * OZ_TK;
    // 4 threads per column, 8 rows of each tile each; combined with two shuffles.
    int c = threadIdx.x >> 2, part = threadIdx.x & 3;
    int emax = OZ_INT_MIN, emin = OZ_INT_MAX;
    for (int t = 0; t < OZ_CE_TILES; ++t) {
        int row0 = (blockIdx.y * OZ_CE_TILES + t) * OZ_TR;
        if (row0 >= rows) break;                             // uniform over the block
        if (t) __syncthreads();                              // the previous tile is read
        // Eight loads in flight per thread (oz_load_tile's one at a time read ~2.9 TB/s
        // on the H200 at long k).
        oz_res_load_tile(tile, X, rs, cs, rows, cols, row0, col0, rows_fast, nullptr, 0);
        __syncthreads();
        for (int r = part; r < OZ_TR; r += 4) {
            double x = tile[r][c];
            if (x != 0.0) {
                int e = oz_frexp_exp(x);
                emax = max(emax, e);
                emin = min(emin, e);
            }
        }
    }
    for (int off = 1; off < 4; off <<= 1) {
        emax = max(emax, __shfl_xor_sync(0xffffffffu, emax, off));
        emin = min(emin, __shfl_xor_sync(0xffffffffu, emin, off));
    }
    int gc = col0 + c;
    if (part == 0 && gc < cols && emax != OZ_INT_MIN) {
        atomicMax(cmax + gc, emax);
        atomicMin(cmin + gc, emin);
    }
}

// S_k = trunc(((a_k - a) - (b_k - b)) / 2) clamped to [lo_k, hi_k] (spec §2.1), 0 where
// column k of A or row k of B is all zero; a, b: the largest a_k, b_k. One block: it
// first reduces the two maxima (an atomic per element on one address would serialise),
// then writes S.
extern "C" __global__ void __launch_bounds__(1024)
oz_equilibrate(const int *__restrict__ amax, const int *__restrict__ amin,
               const int *__restrict__ bmax, const int *__restrict__ bmin, int k,
               int *__restrict__ S) {
    __shared__ int red[2][32];
    int ta = OZ_INT_MIN, tb = OZ_INT_MIN;
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        ta = max(ta, amax[i]);
        tb = max(tb, bmax[i]);
    }
    for (int off = 16; off > 0; off >>= 1) {
        ta = max(ta, __shfl_xor_sync(0xffffffffu, ta, off));
        tb = max(tb, __shfl_xor_sync(0xffffffffu, tb, off));
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) {
        red[0][warp] = ta;
        red[1][warp] = tb;
    }
    __syncthreads();
    if (warp == 0) {
        ta = lane < nw ? red[0][lane] : OZ_INT_MIN;
        tb = lane < nw ? red[1][lane] : OZ_INT_MIN;
        for (int off = 16; off > 0; off >>= 1) {
            ta = max(ta, __shfl_xor_sync(0xffffffffu, ta, off));
            tb = max(tb, __shfl_xor_sync(0xffffffffu, tb, off));
        }
        if (lane == 0) {
            red[0][0] = ta;
            red[1][0] = tb;
        }
    }
    __syncthreads();
    ta = red[0][0];
    tb = red[1][0];
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        int a = amax[i], b = bmax[i];
        if (a == OZ_INT_MIN || b == OZ_INT_MIN || a > 1024 || b > 1024 || ta > 1024 || tb > 1024) {
            S[i] = 0;   // an empty column / row; or Inf/NaN, which the caller declines anyway
            continue;
        }
        int raw = ((a - ta) - (b - tb)) / 2;                 // C++: toward zero
        int hi = min(max(0, amin[i] + 1021), 1024 - b);
        int lo = max(-max(0, bmin[i] + 1021), a - 1024);
        S[i] = min(max(raw, lo), hi);
    }
}

// ---------------------------------------------------------------------------------
// Stage 1: row statistics.

// Reductions over the columns of a rows x cols view: block (32, 8). rows_fast: threadIdx.x
// walks rows (unit stride there), threadIdx.y and the loop walk a KR-column range;
// otherwise threadIdx.x walks columns and each warp owns one row. blockIdx.y picks the
// column range, so long rows spread over many blocks; atomics combine them.
#define OZ_KR 256
#define OZ_RR_BATCH 8   // loads a thread issues before using them

template <int KIND>
__device__ __forceinline__ void oz_row_reduce(const double *__restrict__ X, i64 rs, i64 cs,
                                              int rows, int cols, int rows_fast,
                                              const int *__restrict__ S, int ks,
                                              const int *__restrict__ E, int D,
                                              int *__restrict__ Emax, int *__restrict__ Xthr,
                                              int *__restrict__ Cnt, u64 *__restrict__ Sq,
                                              int *__restrict__ Klo = nullptr,
                                              int *__restrict__ Khi = nullptr,
                                              int *__restrict__ Gmax = nullptr,
                                              int koff = 0, int *__restrict__ Klo2 = nullptr,
                                              int *__restrict__ Khi2 = nullptr,
                                              int koff2 = 0, int *__restrict__ Any = nullptr) {
    // KIND 0: Emax[r] = max frexp exponent of the non-zero entries (atomicMax);
    // KIND 1: also Xthr[r] = max exact threshold (spec §10.1), Cnt[r] += their count and
    //         Klo[r] / Khi[r] = their first / last column (atomicMin / atomicMax);
    // KIND 2: Sq[r] += sum of alpha^2, alpha = ceil(|x| 2^(D - E[r])) (fast mode).
    // A row made of several views side by side along k (the complex embedding's rows,
    // read from the parts in place) takes one launch per view: koff is the view's first
    // column in the row, and with Klo2 / Khi2 the same non-zero columns are also recorded
    // at offset koff2 (the mirrored rows [Bi, -Br] of the embedding's B^T: the same
    // entries, the views swapped). Any (KIND 1): set when the view has a non-zero entry.
    int k0 = blockIdx.y * OZ_KR;
    int k1 = min(cols, k0 + OZ_KR);
    int row, kstart, kstep;
    if (rows_fast) {
        row = blockIdx.x * 32 + threadIdx.x;
        kstart = k0 + threadIdx.y;
        kstep = 8;
    } else {
        row = blockIdx.x * 8 + threadIdx.y;
        kstart = k0 + threadIdx.x;
        kstep = 32;
    }
    bool live = row < rows;
    int emax = OZ_INT_MIN, xthr = OZ_INT_MIN, cnt = 0, klo = OZ_INT_MAX, khi = -1;
    u64 ssum = 0;
    int Er = 0;
    if (KIND == 2 && live) Er = E[row];
    if (live) {
        const double *xr = X + (i64)row * rs;
        // Eight loads in flight per thread before any is used (one at a time, the
        // statistics passes read ~2.6 TB/s on the H200; the order the entries are
        // combined in does not matter: integer maxima, minima and sums).
        int iters = kstart < k1 ? (k1 - kstart + kstep - 1) / kstep : 0;
        for (int b = 0; b < iters; b += OZ_RR_BATCH) {
            double xv[OZ_RR_BATCH];
#pragma unroll
            for (int j = 0; j < OZ_RR_BATCH; ++j)
                xv[j] = b + j < iters ? xr[(i64)(kstart + (b + j) * kstep) * cs] : 0.0;
#pragma unroll
            for (int j = 0; j < OZ_RR_BATCH; ++j) {
                double x = xv[j];
                if (x == 0.0) continue;
                int k = kstart + (b + j) * kstep;
                int sk = S ? ks * S[k] : 0;
                if (KIND <= 1) {
                    int e = oz_frexp_exp(x);
                    emax = max(emax, e + (e > 1024 ? 0 : sk));
                    if (KIND == 1) {
                        xthr = max(xthr, oz_exact_threshold(x) - sk);
                        ++cnt;
                        klo = min(klo, k);
                        khi = max(khi, k);
                    }
                } else {
                    // alpha = max(1, ceil(|x 2^sk| 2^(D-E))) exactly: |x| = mant 2^ex, so
                    // alpha = ceil(mant 2^sh), sh = ex + sk + D - E; |x 2^sk| < 2^E keeps it
                    // <= 2^D.
                    OzDec d = oz_decompose(x);
                    int sh = d.ex + sk + D - Er;
                    u64 a;
                    if (sh >= 0) {
                        a = d.mant << sh;
                    } else if (-sh >= 64) {
                        a = 1;
                    } else {
                        int q = -sh;
                        a = (d.mant >> q) + ((d.mant & ((1ull << q) - 1)) ? 1ull : 0ull);
                    }
                    ssum += a * a;
                }
            }
        }
    }
    if (!rows_fast) {
        // One warp per row: reduce over the lanes, one atomic per warp.
        for (int off = 16; off > 0; off >>= 1) {
            if (KIND <= 1) {
                emax = max(emax, __shfl_xor_sync(0xffffffffu, emax, off));
                if (KIND == 1) {
                    xthr = max(xthr, __shfl_xor_sync(0xffffffffu, xthr, off));
                    cnt += __shfl_xor_sync(0xffffffffu, cnt, off);
                    klo = min(klo, __shfl_xor_sync(0xffffffffu, klo, off));
                    khi = max(khi, __shfl_xor_sync(0xffffffffu, khi, off));
                }
            } else {
                ssum += __shfl_xor_sync(0xffffffffu, ssum, off);
            }
        }
        if (threadIdx.x != 0) return;
    } else if constexpr (KIND == 1) {
        // rows_fast: the 8 warps (threadIdx.y) hold partial results of the same 32 rows;
        // combine them in shared memory so that one thread per row issues the atomics.
        // (rows_fast is uniform over the block and no thread has returned yet.)
        __shared__ int sh_max[8][32];
        __shared__ int sh_thr[8][32];
        __shared__ int sh_cnt[8][32];
        __shared__ int sh_klo[8][32];
        __shared__ int sh_khi[8][32];
        sh_max[threadIdx.y][threadIdx.x] = emax;
        sh_thr[threadIdx.y][threadIdx.x] = xthr;
        sh_cnt[threadIdx.y][threadIdx.x] = cnt;
        sh_klo[threadIdx.y][threadIdx.x] = klo;
        sh_khi[threadIdx.y][threadIdx.x] = khi;
        __syncthreads();
        if (threadIdx.y != 0) return;
        for (int y = 1; y < 8; ++y) {
            emax = max(emax, sh_max[y][threadIdx.x]);
            xthr = max(xthr, sh_thr[y][threadIdx.x]);
            cnt += sh_cnt[y][threadIdx.x];
            klo = min(klo, sh_klo[y][threadIdx.x]);
            khi = max(khi, sh_khi[y][threadIdx.x]);
        }
    }
    if (!live) return;
    if (KIND <= 1) {
        if (emax != OZ_INT_MIN) {
            atomicMax(Emax + row, emax);
            if (KIND == 1) {
                atomicMax(Xthr + row, xthr);
                atomicAdd(Cnt + row, cnt);
                atomicMin(Klo + row, klo + koff);
                atomicMax(Khi + row, khi + koff);
                if (Klo2) {
                    atomicMin(Klo2 + row, klo + koff2);
                    atomicMax(Khi2 + row, khi + koff2);
                }
                if (emax > 1024) atomicMax(Gmax, emax);   // Inf/NaN only: no contention
                // Read first: once set, the flag costs the other rows a cached load.
                if (Any && !*((volatile int *)Any)) atomicOr(Any, 1);
            }
        }
    } else {
        if (ssum) atomicAdd(Sq + row, ssum);
    }
}

extern "C" __global__ void __launch_bounds__(256)
oz_row_exponents(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
                 int rows_fast, int *__restrict__ Emax) {
    // Emax must hold OZ_INT_MIN on entry (meaning "no non-zero entry yet").
    oz_row_reduce<0>(X, rs, cs, rows, cols, rows_fast, nullptr, 0, nullptr, 0, Emax, nullptr,
                     nullptr, nullptr);
}

extern "C" __global__ void __launch_bounds__(256)
oz_row_stats(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols, int rows_fast,
             const int *__restrict__ S, int ks, int *__restrict__ Emax,
             int *__restrict__ Xthr, int *__restrict__ Cnt, int *__restrict__ Klo,
             int *__restrict__ Khi, int *__restrict__ Gmax) {
    // Row exponent, exact threshold, non-zero count and non-zero column range of the
    // equilibrated rows; Gmax[0] is raised above 1024 when a row holds Inf/NaN. Emax and
    // Xthr must hold OZ_INT_MIN, Cnt zero, Klo cols and Khi -1 on entry.
    oz_row_reduce<1>(X, rs, cs, rows, cols, rows_fast, S, ks, nullptr, 0, Emax, Xthr, Cnt,
                     nullptr, Klo, Khi, Gmax);
}

extern "C" __global__ void __launch_bounds__(256)
oz_row_stats_part(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
                  int rows_fast, const int *__restrict__ S, int ks, int *__restrict__ Emax,
                  int *__restrict__ Xthr, int *__restrict__ Cnt, int *__restrict__ Klo,
                  int *__restrict__ Khi, int *__restrict__ Gmax, int koff,
                  int *__restrict__ Klo2, int *__restrict__ Khi2, int koff2,
                  int *__restrict__ Any) {
    // oz_row_stats for one view of rows made of several (see oz_row_reduce): the same
    // statistics accumulate over the views' launches.
    oz_row_reduce<1>(X, rs, cs, rows, cols, rows_fast, S, ks, nullptr, 0, Emax, Xthr, Cnt,
                     nullptr, Klo, Khi, Gmax, koff, Klo2, Khi2, koff2, Any);
}

extern "C" __global__ void __launch_bounds__(256)
oz_row_sumsq(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols, int rows_fast,
             const int *__restrict__ S, int ks, const int *__restrict__ E, int D,
             u64 *__restrict__ Sq) {
    // Sq must be zero on entry. Every partial sum is an integer < 2^53 (D's choice).
    oz_row_reduce<2>(X, rs, cs, rows, cols, rows_fast, S, ks, E, D, nullptr, nullptr, nullptr,
                     Sq);
}

// E = 0 for an all-zero row (Emax = OZ_INT_MIN), as the reference's row_exponents.
extern "C" __global__ void oz_zero_rows(int *__restrict__ E, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows && E[r] == OZ_INT_MIN) E[r] = 0;
}

// ---------------------------------------------------------------------------------
// The bound GEMM's operand (spec §2.3): alpha = floor(|x| 2^(7 - E)) in [0, 127] as int8,
// rows x kpad (zero padded), in the residue planes' layout; SA[r] += sum of the row's
// alpha (SA zero on entry), Z[r] += the row's non-zero entries whose alpha is 0 (Z
// zero on entry, or null) and S2[r] += the sum of the row's alpha^2 (spec §10.1: the
// bound of the row's 2-norm; zero on entry, or null). Each block walks `tiles`
// consecutive tiles along k and adds its rows' sums once: with one atomic per row and
// tile, a 4096 x 65536 operand (1024 tiles per row; the blocks running at once share
// their rows) read only 1.7 TB/s, against 3.5 for the residue kernel's same loads and
// stores (H200).
extern "C" __global__ void __launch_bounds__(256)
oz_quantize_down(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
                 int rows_fast, const int *__restrict__ S, int ks, int kpad,
                 const int *__restrict__ E, i8 *__restrict__ Q, int *__restrict__ SA,
                 int *__restrict__ Z, u64 *__restrict__ S2, int tiles) {
    __shared__ double tile[OZ_TR][OZ_TK + 1];
    int row0 = blockIdx.y * OZ_TR;
    u64 acc[OZ_QROWS] = {};
    u32 word;
    for (int t = 0; t < tiles; ++t) {
        int col0 = (blockIdx.x * tiles + t) * OZ_TK;
        if (col0 >= kpad) break;                          // uniform over the block
        if (t) __syncthreads();                           // the previous tile is read
        // The residue kernels' tile load (eight loads in flight per thread): with
        // oz_load_tile's one-at-a-time loop this pass read only ~1.6 TB/s on the H200.
        oz_res_load_tile(tile, X, rs, cs, rows, cols, row0, col0, rows_fast, S, ks);
        __syncthreads();
        oz_quantize_rows(
            row0, col0, rows, kpad, E, SA,
            [&](int rr, int tc, int, int Er, bool live) {
                word = 0;
                u64 sum = 0;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    double x = live ? tile[rr][tc + j] : 0.0;
                    u32 a = live ? oz_alpha_down(x, Er) : 0u;
                    word |= (a & 0xffu) << (8 * j);
                    // the alpha sum in the low 20 bits, the entries below the window
                    // (x != 0, alpha = 0) in bits 20-30, the sum of alpha^2 in the high
                    // 32: each stays within its field over 16 lanes and 16 tiles (8128 *
                    // 16 < 2^20, 64 * 16 < 2^11, 64 * 16 * 127^2 < 2^32)
                    sum += (u64)a + ((x != 0.0 && a == 0u) ? (1ull << 20) : 0ull) +
                           ((u64)(a * a) << 32);
                }
                return sum;
            },
            [&](i64 o) { *reinterpret_cast<u32 *>(Q + o) = word; }, acc);
    }
    if ((threadIdx.x & 15) != 0) return;
#pragma unroll
    for (int i = 0; i < OZ_QROWS; ++i) {
        int gr = row0 + (threadIdx.x >> 4) + 16 * i;
        if (gr < rows && acc[i]) {
            int sa = (int)(acc[i] & 0xfffffu), z = (int)((acc[i] >> 20) & 0x7ffu);
            u64 s2 = acc[i] >> 32;
            if (sa) atomicAdd(SA + gr, sa);
            if (Z && z) atomicAdd(Z + gr, z);
            if (S2 && s2) atomicAdd(S2 + gr, s2);
        }
    }
}

// U_ij = P_ij + SA_i + SB_j + min(nA_i, nB_j), 0 where row i or column j is all zero
// (spec §2.3): an upper bound of (|A||B|)_ij in units of 2^(E_i + F_j - 14).
template <class T>
__device__ __forceinline__ i64 oz_upper(T p, int sa, int na, int sb, int nb) {
    if (na == 0 || nb == 0) return 0;
    return (i64)p + sa + sb + min(na, nb);
}

// r_i = max_j U_ij over one tile of P (row-major, leading dimension ldp): one warp per row.
// Each lane issues OZ_UB loads of P (and of the columns' SB, nB) before using any: one
// load in flight per lane left the pass at ~2 TB/s, latency-bound. An all-zero row (its
// U is 0 everywhere) reads nothing.
#define OZ_UB 8
template <class T>
__device__ __forceinline__ void oz_u_rowmax(const T *__restrict__ P, i64 ldp, int rows, int cols,
                                            const int *__restrict__ SA, const int *__restrict__ nA,
                                            const int *__restrict__ SB, const int *__restrict__ nB,
                                            i64 *__restrict__ rmax) {
    int row = blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *pr = P + (i64)row * ldp;
    int sa = SA[row], na = nA[row];
    i64 m = 0;
    if (na != 0) {
        int j = lane;
        for (; j + 32 * (OZ_UB - 1) < cols; j += 32 * OZ_UB) {
            T p[OZ_UB];
            int sb[OZ_UB], nb[OZ_UB];
#pragma unroll
            for (int b = 0; b < OZ_UB; ++b) {
                p[b] = pr[j + 32 * b];
                sb[b] = SB[j + 32 * b];
                nb[b] = nB[j + 32 * b];
            }
#pragma unroll
            for (int b = 0; b < OZ_UB; ++b) m = max(m, oz_upper(p[b], sa, na, sb[b], nb[b]));
        }
        for (; j < cols; j += 32) m = max(m, oz_upper(pr[j], sa, na, SB[j], nB[j]));
    }
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0 && m > 0) atomicMax((long long *)(rmax + row), (long long)m);
}

extern "C" __global__ void __launch_bounds__(256)
oz_u_rowmax_i32(const int *__restrict__ P, i64 ldp, int rows, int cols, const int *__restrict__ SA,
                const int *__restrict__ nA, const int *__restrict__ SB, const int *__restrict__ nB,
                i64 *__restrict__ rmax) {
    oz_u_rowmax<int>(P, ldp, rows, cols, SA, nA, SB, nB, rmax);
}
extern "C" __global__ void __launch_bounds__(256)
oz_u_rowmax_i64(const i64 *__restrict__ P, i64 ldp, int rows, int cols, const int *__restrict__ SA,
                const int *__restrict__ nA, const int *__restrict__ SB, const int *__restrict__ nB,
                i64 *__restrict__ rmax) {
    oz_u_rowmax<i64>(P, ldp, rows, cols, SA, nA, SB, nB, rmax);
}

// The moduli counts a product may use: N = OZ_NLO .. OZ_NLO + OZ_NN - 1; eh[c], fh[c]
// are the frexp exponent and fraction field of H_f for count OZ_NLO + c (spec §1). The
// real table's counts 2 .. 20 by default; the complex table (2 .. 22) compiles this file
// with -DOZ_NN=21 (cuda/_common.py, CountTable: host and device read one definition).
#define OZ_NLO 2
#ifndef OZ_NN
#define OZ_NN 19
#endif

// sigma[c][i] = floor(lambda_c(max(1, r_i)) / 2) for every count (rmax zero-initialised).
extern "C" __global__ void oz_sigma_all(const i64 *__restrict__ rmax, int rows,
                                        const int *__restrict__ eh, const u64 *__restrict__ fh,
                                        int *__restrict__ sigma) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    i64 v = rmax[r];
    u64 x = (u64)(v < 1 ? 1 : v);
    for (int c = 0; c < OZ_NN; ++c)
        sigma[(i64)c * rows + r] = oz_floor_half(oz_lambda(x, eh[c], fh[c]));
}

// p[b] = P[i + 8b][col] for the OZ_UB rows i, i + 8, ... of a thread (0 at and past r1),
// all loads issued before any is used: the passes over P below walk a column with a
// stride of 8 rows, and one load in flight per thread left them latency-bound.
template <class T>
__device__ __forceinline__ void oz_load_column_batch(const T *__restrict__ P, i64 ldp, int col,
                                                     int i, int r1, T (&p)[OZ_UB]) {
#pragma unroll
    for (int b = 0; b < OZ_UB; ++b) {
        int r = i + 8 * b;
        p[b] = r < r1 ? P[(i64)r * ldp + col] : T(0);
    }
}

// tau[c][j] = min over {i : U_ij > 0} of lambda_c(U_ij) - sigma[c][i], for NC counts c:
// all of them (oz_u_colmin_*: the counts 0 .. OZ_NN-1), or the OZ_NW of a window
// (oz_u_colmin_w_*: cidx[w], the counts the certificate's search is expected to visit,
// see oz_cert_counts; the other counts' tau stay untouched). The counts are one
// straight-line loop (skipping counts with a runtime guard serialised the independent
// loads and measured 1.4x slower than computing them all): block (32, 8), threadIdx.x
// walks columns (unit stride), threadIdx.y and the loop walk OZ_PR rows; the 8 partial
// minima of a column meet in shared memory, one atomic each.
// The pass is memory-bound: a thread issues OZ_UB loads of P before using any, and a
// window's kernel first copies its rows' SA, nA and sigma into shared memory, so that
// the loop's only global loads are P's (one load in flight per thread, each followed by
// seven dependent broadcast loads, read P at ~0.5 TB/s on the H200). Minima of integers:
// the order does not change the result.
#define OZ_PR 512
#ifndef OZ_NW
#define OZ_NW 5   // ozaki_backend/spec/certificate.py WINDOW (tests/spec/test_count_search.py)
#endif
template <class T, int NC>
__device__ __forceinline__ void oz_u_colmin(const T *__restrict__ P, i64 ldp, int rows, int cols,
                                            const int *__restrict__ SA, const int *__restrict__ nA,
                                            const int *__restrict__ SB, const int *__restrict__ nB,
                                            const int *__restrict__ sigma, int srows,
                                            const int *__restrict__ eh, const u64 *__restrict__ fh,
                                            int *__restrict__ tau, int tcols,
                                            const int *__restrict__ cidx) {
    // A window's few counts keep their H_f parameters in registers and their rows'
    // sigma in shared memory; all of them would take too many (163 registers, 1.3x
    // slower than loading them in the loop; 39 KB of sigma per block).
    constexpr bool hold = NC <= OZ_NW;
    constexpr int SR = hold ? OZ_PR : 1;
    __shared__ int best_sh[8][NC][32];
    __shared__ int sa_sh[SR], na_sh[SR], sg_sh[hold ? NC : 1][SR];
    int col = blockIdx.x * 32 + threadIdx.x;
    int best[NC], cc[NC], ec[hold ? NC : 1];
    u64 fc[hold ? NC : 1];
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        best[c] = OZ_INT_MAX;
        cc[c] = cidx ? cidx[c] : c;
        if constexpr (hold) {
            ec[c] = eh[cc[c]];
            fc[c] = fh[cc[c]];
        }
    }
    int r0 = blockIdx.y * OZ_PR, r1 = min(rows, r0 + OZ_PR);
    if constexpr (hold) {
        for (int r = threadIdx.y * 32 + threadIdx.x; r < r1 - r0; r += 256) {
            sa_sh[r] = SA[r0 + r];
            na_sh[r] = nA[r0 + r];
#pragma unroll
            for (int c = 0; c < NC; ++c) sg_sh[c][r] = sigma[(i64)cc[c] * srows + r0 + r];
        }
        __syncthreads();
    }
    if (col < cols && nB[col] != 0) {       // a zero column: every U_ij is 0
        int sb = SB[col], nb = nB[col];
        for (int i = r0 + threadIdx.y; i < r1; i += 8 * OZ_UB) {
            T p[OZ_UB];
            oz_load_column_batch(P, ldp, col, i, r1, p);
#pragma unroll
            for (int b = 0; b < OZ_UB; ++b) {
                int r = i + 8 * b;
                if (r >= r1) continue;
                int sa = hold ? sa_sh[hold ? r - r0 : 0] : SA[r];
                int na = hold ? na_sh[hold ? r - r0 : 0] : nA[r];
                i64 u = oz_upper(p[b], sa, na, sb, nb);
                if (u <= 0) continue;
                u64 bits = (u64)__double_as_longlong((double)u);
                int ex = (int)((bits >> 52) & 0x7ff) - 1022;
                u64 frac = bits & OZ_MASK52;
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    int e = hold ? ec[hold ? c : 0] : eh[cc[c]];
                    u64 f = hold ? fc[hold ? c : 0] : fh[cc[c]];
                    int sg = hold ? sg_sh[hold ? c : 0][hold ? r - r0 : 0]
                                  : sigma[(i64)cc[c] * srows + r];
                    int lam = e - ex - (frac > f ? 1 : 0);
                    best[c] = min(best[c], lam - sg);
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) best_sh[threadIdx.y][c][threadIdx.x] = best[c];
    __syncthreads();
    if (threadIdx.y != 0 || col >= cols) return;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        int v = best[c];
        for (int y = 1; y < 8; ++y) v = min(v, best_sh[y][c][threadIdx.x]);
        if (v != OZ_INT_MAX) atomicMin(tau + (i64)cc[c] * tcols + col, v);
    }
}

#define OZ_COLMIN(NAME, T, NC)                                                                  \
    extern "C" __global__ void __launch_bounds__(256)                                           \
    NAME(const T *__restrict__ P, i64 ldp, int rows, int cols, const int *__restrict__ SA,      \
         const int *__restrict__ nA, const int *__restrict__ SB, const int *__restrict__ nB,    \
         const int *__restrict__ sigma, int srows, const int *__restrict__ eh,                  \
         const u64 *__restrict__ fh, int *__restrict__ tau, int tcols,                          \
         const int *__restrict__ cidx) {                                                        \
        oz_u_colmin<T, NC>(P, ldp, rows, cols, SA, nA, SB, nB, sigma, srows, eh, fh, tau, tcols, \
                           cidx);                                                               \
    }
OZ_COLMIN(oz_u_colmin_i32, int, OZ_NN)
OZ_COLMIN(oz_u_colmin_i64, i64, OZ_NN)
OZ_COLMIN(oz_u_colmin_w_i32, int, OZ_NW)
OZ_COLMIN(oz_u_colmin_w_i64, i64, OZ_NW)

// Bits kept of each row's largest element, for every count (spec §2): accurate mode
// b = v + 7 with v = sigma (rows of A) or tau (columns of B; OZ_INT_MAX, an empty set,
// becomes empty[c]); fast mode b = floor(lambda_c(S) / 2) + D. Then s = b - E (0 for an
// all-zero row, whose b is never read).
extern "C" __global__ void oz_kept_accurate(const int *__restrict__ v, int rows,
                                            const int *__restrict__ empty,
                                            int *__restrict__ kept) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    for (int c = 0; c < OZ_NN; ++c) {
        int x = v[(i64)c * rows + r];
        kept[(i64)c * rows + r] = (x == OZ_INT_MAX ? empty[c] : x) + OZ_BOUND_D;
    }
}
extern "C" __global__ void oz_kept_fast(const u64 *__restrict__ Sq, int rows, int D,
                                        const int *__restrict__ eh, const u64 *__restrict__ fh,
                                        int *__restrict__ kept) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    u64 x = Sq[r] ? Sq[r] : 1ull;
    for (int c = 0; c < OZ_NN; ++c)
        kept[(i64)c * rows + r] = oz_floor_half(oz_lambda(x, eh[c], fh[c])) + D;
}

// s = kept[c] - E for the chosen count (0 for an all-zero row: Cnt = 0).
extern "C" __global__ void oz_shifts_for(const int *__restrict__ kept, int rows, int c,
                                         const int *__restrict__ E, const int *__restrict__ Cnt,
                                         int *__restrict__ s) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    s[r] = Cnt[r] ? kept[(i64)c * rows + r] - E[r] : 0;
}

// ---------------------------------------------------------------------------------
// Stage 5: the certificate (spec §10; the element-wise arithmetic in certificate.cuh).

// Per row (of A, or of B^T) and count: f[c][r] = [s < x] 2^(60 - b) with b = kept[c][r]
// and s = b - E (0 for an all-zero row); q[r] = SA + n and rq[r] = sqrt(min(q,
// (S2 + 2 SA + n) / 128)) (correctly rounded; sqrt(q) where S2 is null): the factors of
// each term of the element's excess x (f q) and spread w (f rq), so that the
// per-element test is four products and two rounded additions (spec §10.1).
extern "C" __global__ void oz_cert_factors(const int *__restrict__ kept, int rows,
                                           const int *__restrict__ E, const int *__restrict__ X,
                                           const int *__restrict__ n, const int *__restrict__ SA,
                                           const u64 *__restrict__ S2,
                                           double *__restrict__ f, double *__restrict__ q,
                                           double *__restrict__ rq) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int Er = E[r], xr = X[r], nr = n[r];
    double qr = (double)(SA[r] + nr);
    q[r] = qr;
    // sum over the non-zero entries of (alpha + 1)^2, an integer below 2^53: exact
    double q2 = S2 ? ldexp((double)(S2[r] + 2ull * (u64)SA[r] + (u64)nr), -7) : qr;
    rq[r] = __dsqrt_rn(fmin(qr, q2));
    for (int c = 0; c < OZ_NN; ++c) {
        int b = kept[(i64)c * rows + r];
        int sr = nr ? b - Er : 0;
        f[(i64)c * rows + r] = sr < xr ? ldexp(1.0, 60 - b) : 0.0;
    }
}

// For every element of one P tile, the fewest count (OZ_NLO + c) whose a-priori test it
// passes (spec §10.2-10.3), as a histogram: out[0] += elements passing none, out[1] +=
// undecided elements (below), out[2] += direct elements (one or two terms), out[4] +=
// exempt elements (at most two terms: direct or exactly zero), out[5 + c] += elements
// whose fewest count is c (exempt elements pass at every count: c = 0). out[3] is the
// gathers' gate (kernels/certificate.cu oz_gather_gate).
// The test is monotone in the count: the search starts at `guess` (the count ordinary
// data certifies with) and walks down while it passes or up until it does. With fixed >= 0
// only that count is tested (a fixed moduli= plan): out[0] += elements failing it.
// with_direct = 0: only exact zeros are exempt (the host passes 1 for every product).
// The search stays within the counts lo .. hi and the largest (OZ_NN - 1), those whose
// kept bits were computed (oz_u_colmin_w): an element passing at lo counts at lo (its
// count is at most lo: spec.window_choice tells when that settles the product's count);
// one failing at hi but passing at the largest is undecided; one failing at the largest
// passes none. lo = 0, hi = OZ_NN - 1: the full search.
// fa, fb: the c-major factor tables of oz_cert_factors (row strides arows, bcols); qa/ra,
// qb/rb their q and rq; G: the tile's gathered lower bounds (int16, row stride ldg), or
// null where the gathers did not run. Block (32, 8), grid (cols / 32, rows / OZ_CR): a
// thread owns one column and walks OZ_CR / 8 rows; the block first copies into shared
// memory its rows' statistics and their factors at the counts lo .. lo + OZ_NW - 1, and
// the factors of its 32 columns at those counts, and a thread issues OZ_UB loads of P
// before testing any. Its histogram meets in shared memory (a thread adds a run of equal
// bins at once: ordinary data puts almost every element in one bin) before one atomic
// per bin and block. ozaki_backend/cuda/certificate.py _CR is OZ_CR.
#define OZ_CR 256
#define OZ_HIST (5 + OZ_NN)

template <class T>
__device__ __forceinline__ void oz_cert_counts(
    const T *__restrict__ P, i64 ldp, int rows, int cols, const short *__restrict__ G, i64 ldg,
    const double *__restrict__ fa, const double *__restrict__ qa, const double *__restrict__ ra,
    int arows, const double *__restrict__ fb, const double *__restrict__ qb,
    const double *__restrict__ rb, int bcols, const int *__restrict__ loA,
    const int *__restrict__ hiA, const int *__restrict__ nA, const int *__restrict__ EA,
    const int *__restrict__ loB, const int *__restrict__ hiB, const int *__restrict__ nB,
    const int *__restrict__ FB, const int *__restrict__ ZA, const int *__restrict__ ZB, int kbits,
    int with_direct, int guess, int fixed, int lo, int hi, int *__restrict__ out) {
    __shared__ int lo_sh[OZ_CR], hi_sh[OZ_CR], n_sh[OZ_CR], e_sh[OZ_CR], z_sh[OZ_CR];
    __shared__ double qa_sh[OZ_CR], ra_sh[OZ_CR], fa_sh[OZ_NW][OZ_CR], fb_sh[OZ_NW][32];
    __shared__ int hist_sh[OZ_HIST];
    int col = blockIdx.x * 32 + threadIdx.x;
    int g = fixed >= 0 ? fixed : min(max(guess, lo), hi);
    int nw = min(hi - lo + 1, OZ_NW);       // counts lo .. lo + nw - 1 staged
    int r0 = blockIdx.y * OZ_CR, r1 = min(rows, r0 + OZ_CR);
    int tid = threadIdx.y * 32 + threadIdx.x;
    for (int r = tid; r < OZ_HIST; r += 256) hist_sh[r] = 0;
    for (int r = tid; r < r1 - r0; r += 256) {
        lo_sh[r] = loA[r0 + r];
        hi_sh[r] = hiA[r0 + r];
        n_sh[r] = nA[r0 + r];
        e_sh[r] = EA[r0 + r];
        z_sh[r] = ZA ? ZA[r0 + r] : 0;
        qa_sh[r] = qa[r0 + r];
        ra_sh[r] = ra[r0 + r];
    }
    for (int e = tid; e < nw * (r1 - r0); e += 256) {
        int c = e / (r1 - r0), r = e - c * (r1 - r0);
        fa_sh[c][r] = fa[(i64)(lo + c) * arows + r0 + r];
    }
    if (col < cols)
        for (int c = threadIdx.y; c < nw; c += 8) fb_sh[c][threadIdx.x] = fb[(i64)(lo + c) * bcols + col];
    __syncthreads();
    int run_bin = -1, run = 0;
    auto add = [&](int bin) {
        if (bin == run_bin) {
            ++run;
            return;
        }
        if (run && run_bin >= 0) atomicAdd(&hist_sh[run_bin], run);
        run_bin = bin;
        run = 1;
    };
    if (col < cols) {
        double qbj = qb[col], rbj = rb[col];
        int lob = loB[col], hib = hiB[col], nbj = nB[col], Fj = FB[col];
        for (int i = r0 + threadIdx.y; i < r1; i += 8 * OZ_UB) {
            T p[OZ_UB];
            oz_load_column_batch(P, ldp, col, i, r1, p);
#pragma unroll
            for (int b = 0; b < OZ_UB; ++b) {
                int row = i + 8 * b;
                if (row >= r1) continue;
                int rl = row - r0;
                int ke = oz_terms(lo_sh[rl], hi_sh[rl], n_sh[rl], lob, hib, nbj);
                if (ke <= (with_direct ? 2 : 0)) {
                    if (ke >= 1) atomicAdd(&hist_sh[2], 1);
                    atomicAdd(&hist_sh[4], 1);
                    add(fixed >= 0 ? -2 : 5);           // exempt: passes at every count
                    continue;
                }
                double g14 = G ? oz_g16_value(G[(i64)row * ldg + col]) : 0.0;
                int kw = oz_window_terms(ke, ZA ? z_sh : nullptr, n_sh[rl], rl, ZB, nbj, col);
                OzPrior q = oz_prior(ke, kw, e_sh[rl], Fj, kbits, (double)p[b], g14,
                                     G != nullptr, with_direct);
                double qai = qa_sh[rl], rai = ra_sh[rl];
                // The staged counts from shared memory, any other (the largest, a fixed
                // count outside them, the rest of a full search) from the tables.
                auto test = [&](int c) {
                    bool in = c >= lo && c < lo + nw;
                    double fac = in ? fa_sh[in ? c - lo : 0][rl] : fa[(i64)c * arows + row];
                    double fbc = in ? fb_sh[in ? c - lo : 0][threadIdx.x]
                                    : fb[(i64)c * bcols + col];
                    return oz_passes(q, oz_x(fac, qbj, qai, fbc), oz_x(fac, rbj, rai, fbc));
                };
                int bin;
                if (fixed >= 0) {
                    bin = test(g) ? -2 : 0;             // -2: no bin (passes the count)
                } else if (test(g)) {
                    int c = g;
                    while (c > lo && test(c - 1)) --c;
                    bin = 5 + c;
                } else {
                    int c = g + 1;
                    while (c <= hi && !test(c)) ++c;
                    if (c <= hi)
                        bin = 5 + c;
                    else if (hi == OZ_NN - 1 || !test(OZ_NN - 1))
                        bin = 0;
                    else
                        bin = 1;
                }
                add(bin);
            }
        }
    }
    if (run && run_bin >= 0) atomicAdd(&hist_sh[run_bin], run);
    __syncthreads();
    for (int r = tid; r < OZ_HIST; r += 256)
        if (hist_sh[r]) atomicAdd(out + r, hist_sh[r]);
}

#define OZ_CERT_COUNTS(NAME, T)                                                                  \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                      \
        const T *__restrict__ P, i64 ldp, int rows, int cols, const short *__restrict__ G,       \
        i64 ldg, const double *__restrict__ fa, const double *__restrict__ qa,                   \
        const double *__restrict__ ra, int arows, const double *__restrict__ fb,                 \
        const double *__restrict__ qb, const double *__restrict__ rb, int bcols,                 \
        const int *__restrict__ loA, const int *__restrict__ hiA, const int *__restrict__ nA,    \
        const int *__restrict__ EA, const int *__restrict__ loB, const int *__restrict__ hiB,    \
        const int *__restrict__ nB, const int *__restrict__ FB, const int *__restrict__ ZA,      \
        const int *__restrict__ ZB, int kbits, int with_direct, int guess, int fixed, int lo,    \
        int hi, int *__restrict__ out) {                                                         \
        oz_cert_counts<T>(P, ldp, rows, cols, G, ldg, fa, qa, ra, arows, fb, qb, rb, bcols, loA, \
                          hiA, nA, EA, loB, hiB, nB, FB, ZA, ZB, kbits, with_direct, guess,      \
                          fixed, lo, hi, out);                                                   \
    }
OZ_CERT_COUNTS(oz_cert_counts_i32, int)
OZ_CERT_COUNTS(oz_cert_counts_i64, i64)

// ---------------------------------------------------------------------------------

// Bound GEMM for k beyond the exact int32 range: P64 += P32 (chunks of the reduction).
extern "C" __global__ void oz_accumulate_i64(const int *__restrict__ src, i64 *__restrict__ dst,
                                             i64 count) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < count;
         i += (i64)gridDim.x * blockDim.x)
        dst[i] += (i64)src[i];
}

// Stage function for tests and the teaching path: trunc(x 2^s_row), row-major output.
// ldexp is exact unless the result underflows, where trunc gives 0 either way (spec §3).
extern "C" __global__ void oz_truncate(const double *__restrict__ X, i64 rs, i64 cs, int rows,
                                       int cols, const int *__restrict__ s,
                                       double *__restrict__ out) {
    i64 total = (i64)rows * cols;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int r = (int)(idx / cols), c = (int)(idx - (i64)r * cols);
        out[idx] = trunc(ldexp(X[(i64)r * rs + (i64)c * cs], s[r]));
    }
}
