// Stage 1 — scaling (docs/spec.md §2–3), mirrored by ozaki_backend/cuda/scaling.py.
//
// Every quantity is an exact integer: frexp exponents from the bit pattern, ceilings of
// power-of-two scaled magnitudes from the mantissa, sums of squares in u64 (exact and
// independent of the order the atomics land in), lambda() from the float64 bits. So
// the exponents equal the CPU reference's whatever the launch shape.
#include "common.cuh"

// Reductions over the columns of a rows x cols view: block (32, 8). rows_fast: threadIdx.x
// walks rows (unit stride there), threadIdx.y and the loop walk a KR-column range;
// otherwise threadIdx.x walks columns and each warp owns one row. blockIdx.y picks the
// column range, so long rows spread over many blocks; atomics combine them.
#define OZ_KR 256

template <int KIND, bool STATS = false>
__device__ __forceinline__ void oz_row_reduce(const double *__restrict__ X, i64 rs, i64 cs,
                                              int rows, int cols, int rows_fast,
                                              const int *__restrict__ E, int D,
                                              int *__restrict__ Emax,
                                              u64 *__restrict__ S,
                                              i64 *__restrict__ Esum = nullptr,
                                              int *__restrict__ Ecnt = nullptr) {
    // KIND 0: Emax[r] = max frexp exponent of the non-zero entries (atomicMax); with
    //         STATS also Esum[r] += their sum and Ecnt[r] += their count (the exponent
    //         spread, docs/spec.md section 1: exact integers, any order);
    // KIND 1: S[r] += sum of alpha^2 with alpha = ceil(|x| 2^(D - E[r])) (fast mode).
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
    int emax = OZ_INT_MIN;
    u64 ssum = 0;
    i64 esum = 0;
    int ecnt = 0;
    int Er = 0;
    if (KIND == 1 && live) Er = E[row];
    if (live) {
        const double *xr = X + (i64)row * rs;
        for (int k = kstart; k < k1; k += kstep) {
            double x = xr[(i64)k * cs];
            if (x == 0.0) continue;
            if (KIND == 0) {
                int e = oz_frexp_exp(x);
                emax = max(emax, e);
                if (STATS) {
                    esum += e;
                    ++ecnt;
                }
            } else {
                // alpha = max(1, ceil(|x| 2^(D-E))) exactly: |x| = mant 2^ex, so
                // alpha = ceil(mant 2^sh) with sh = ex + D - E; |x| < 2^E keeps it <= 2^D.
                OzDec d = oz_decompose(x);
                int sh = d.ex + D - Er;
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
    if (!rows_fast) {
        // One warp per row: reduce over the lanes, one atomic per warp.
        for (int off = 16; off > 0; off >>= 1) {
            if (KIND == 0) {
                emax = max(emax, __shfl_xor_sync(0xffffffffu, emax, off));
                if (STATS) {
                    esum += __shfl_xor_sync(0xffffffffu, esum, off);
                    ecnt += __shfl_xor_sync(0xffffffffu, ecnt, off);
                }
            } else {
                ssum += __shfl_xor_sync(0xffffffffu, ssum, off);
            }
        }
        if (threadIdx.x != 0) return;
    } else if constexpr (STATS) {
        // rows_fast: the 8 warps (threadIdx.y) hold partial results of the same 32 rows;
        // combine them in shared memory so that one thread per row issues the atomics.
        // (rows_fast is uniform over the block and no thread has returned yet.)
        __shared__ int sh_max[8][32];
        __shared__ i64 sh_sum[8][32];
        __shared__ int sh_cnt[8][32];
        sh_max[threadIdx.y][threadIdx.x] = emax;
        sh_sum[threadIdx.y][threadIdx.x] = esum;
        sh_cnt[threadIdx.y][threadIdx.x] = ecnt;
        __syncthreads();
        if (threadIdx.y != 0) return;
        for (int y = 1; y < 8; ++y) {
            emax = max(emax, sh_max[y][threadIdx.x]);
            esum += sh_sum[y][threadIdx.x];
            ecnt += sh_cnt[y][threadIdx.x];
        }
    }
    if (!live) return;
    if (KIND == 0) {
        if (emax != OZ_INT_MIN) {
            atomicMax(Emax + row, emax);
            if (STATS) {
                // Two's complement: adding the i64 bit pattern as u64 is exact.
                atomicAdd(reinterpret_cast<u64 *>(Esum + row), (u64)esum);
                atomicAdd(Ecnt + row, ecnt);
            }
        }
    } else {
        if (ssum) atomicAdd(S + row, ssum);
    }
}

extern "C" __global__ void __launch_bounds__(256)
oz_row_exponents(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
                 int rows_fast, int *__restrict__ Emax) {
    // Emax must hold OZ_INT_MIN on entry (meaning "no non-zero entry yet").
    oz_row_reduce<0>(X, rs, cs, rows, cols, rows_fast, nullptr, 0, Emax, nullptr);
}

extern "C" __global__ void __launch_bounds__(256)
oz_row_exponent_stats(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
                      int rows_fast, int *__restrict__ Emax, i64 *__restrict__ Esum,
                      int *__restrict__ Ecnt) {
    // The same pass as oz_row_exponents, also summing and counting the exponents of the
    // non-zero entries. Emax must hold OZ_INT_MIN, Esum and Ecnt zero on entry.
    oz_row_reduce<0, true>(X, rs, cs, rows, cols, rows_fast, nullptr, 0, Emax, nullptr, Esum,
                           Ecnt);
}

// Exponent spread (docs/spec.md section 1) of the rows of one operand, folded into
// out[0] = max over rows of Emax (above 1024: an Inf/NaN entry) and
// out[1] = max over rows with a non-zero entry of Emax - floor(Esum / Ecnt).
// out must hold {OZ_INT_MIN, 0} before the first operand; run once for A's rows and
// once for B's columns (rows of B^T), before the finalize kernels rewrite Emax.
extern "C" __global__ void __launch_bounds__(256)
oz_spread(const int *__restrict__ Emax, const i64 *__restrict__ Esum,
          const int *__restrict__ Ecnt, int rows, int *__restrict__ out) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    int e = OZ_INT_MIN, d = 0;
    if (r < rows) {
        e = Emax[r];
        int c = Ecnt[r];
        if (e != OZ_INT_MIN && c > 0) {
            i64 s = Esum[r];
            i64 q = s / c;                      // C++ truncates toward zero:
            if (s % c != 0 && s < 0) q -= 1;    // floor division
            d = (int)((i64)e - q);
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        e = max(e, __shfl_xor_sync(0xffffffffu, e, off));
        d = max(d, __shfl_xor_sync(0xffffffffu, d, off));
    }
    if ((threadIdx.x & 31) == 0) {
        if (e != OZ_INT_MIN) atomicMax(out, e);
        if (d > 0) atomicMax(out + 1, d);
    }
}

extern "C" __global__ void __launch_bounds__(256)
oz_row_sumsq(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols, int rows_fast,
             const int *__restrict__ E, int D, u64 *__restrict__ S) {
    // S must be zero on entry. Every partial sum is an integer < 2^53 (D's choice).
    oz_row_reduce<1>(X, rs, cs, rows, cols, rows_fast, E, D, nullptr, S);
}

// Fast mode: s = floor(lambda(S) / 2) + D - E; an all-zero row (Emax = INT_MIN) gets 0.
// Also rewrites Emax into E (0 for all-zero rows), which the later stages read.
extern "C" __global__ void oz_finalize_fast(int *__restrict__ E, const u64 *__restrict__ S,
                                            int rows, int D, int eh, u64 fh,
                                            int *__restrict__ s) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int e = E[r];
    if (e == OZ_INT_MIN) {
        E[r] = 0;
        s[r] = 0;
        return;
    }
    int q = oz_floor_half(oz_lambda(S[r], eh, fh));
    s[r] = q + D - e;
}

// ---------------------------------------------------------------------------------
// Accurate mode. The quantised operands alpha (rows x kpad int8, zero padded) feed the
// bound GEMM P = alpha beta^T through cuBLAS, in the residue planes' layout.
extern "C" __global__ void __launch_bounds__(256)
oz_quantize(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols, int rows_fast,
            int kpad, const int *__restrict__ E, int D, i8 *__restrict__ Q) {
    __shared__ double tile[OZ_TR][OZ_TK + 1];
    int row0 = blockIdx.y * OZ_TR, col0 = blockIdx.x * OZ_TK;
    oz_load_tile(tile, X, rs, cs, rows, cols, row0, col0, rows_fast);
    __syncthreads();
    int q = threadIdx.x & 15;
    for (int rr = threadIdx.x >> 4; rr < OZ_TR; rr += 16) {
        int gr = row0 + rr;
        int c = col0 + 4 * q;
        if (gr >= rows || c >= kpad) continue;
        int Er = E[gr];
        u32 word = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            double x = tile[rr][4 * q + j];
            u32 a = 0;
            if (x != 0.0) {
                OzDec d = oz_decompose(x);
                int sh = d.ex + D - Er;
                if (sh >= 0) {
                    a = (u32)(d.mant << sh);
                } else if (-sh >= 64) {
                    a = 1;
                } else {
                    int qq = -sh;
                    a = (u32)((d.mant >> qq) + ((d.mant & ((1ull << qq) - 1)) ? 1ull : 0ull));
                }
            }
            word |= (a & 0xffu) << (8 * j);
        }
        *reinterpret_cast<u32 *>(Q + (i64)gr * kpad + c) = word;
    }
}

// r_i = max_j P_ij over one tile of P (row-major, leading dimension ldp): one warp per row.
template <class T>
__device__ __forceinline__ void oz_p_rowmax(const T *__restrict__ P, i64 ldp, int rows, int cols,
                                            i64 *__restrict__ rmax) {
    int row = blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *pr = P + (i64)row * ldp;
    i64 m = 0;
    for (int j = lane; j < cols; j += 32) m = max(m, (i64)pr[j]);
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0 && m > 0) atomicMax((long long *)(rmax + row), (long long)m);
}

extern "C" __global__ void __launch_bounds__(256)
oz_p_rowmax_i32(const int *__restrict__ P, i64 ldp, int rows, int cols, i64 *__restrict__ rmax) {
    oz_p_rowmax<int>(P, ldp, rows, cols, rmax);
}
extern "C" __global__ void __launch_bounds__(256)
oz_p_rowmax_i64(const i64 *__restrict__ P, i64 ldp, int rows, int cols, i64 *__restrict__ rmax) {
    oz_p_rowmax<i64>(P, ldp, rows, cols, rmax);
}

// sigma_i = floor(lambda(max(1, r_i)) / 2)   (rmax is zero-initialised: max(1, .) here)
extern "C" __global__ void oz_sigma(const i64 *__restrict__ rmax, int rows, int eh, u64 fh,
                                    int *__restrict__ sigma) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    i64 v = rmax[r];
    sigma[r] = oz_floor_half(oz_lambda((u64)(v < 1 ? 1 : v), eh, fh));
}

// tau_j = min over {i : P_ij > 0} of lambda(P_ij) - sigma_i: block (32, 8), threadIdx.x
// walks columns (unit stride), threadIdx.y and the loop walk a range of rows.
#define OZ_PR 128
template <class T>
__device__ __forceinline__ void oz_p_colmin(const T *__restrict__ P, i64 ldp, int rows, int cols,
                                            const int *__restrict__ sigma, int eh, u64 fh,
                                            int *__restrict__ tau) {
    int col = blockIdx.x * 32 + threadIdx.x;
    if (col >= cols) return;
    int r0 = blockIdx.y * OZ_PR, r1 = min(rows, r0 + OZ_PR);
    int best = OZ_INT_MAX;
    for (int i = r0 + threadIdx.y; i < r1; i += 8) {
        T p = P[(i64)i * ldp + col];
        if (p > 0) best = min(best, oz_lambda((u64)p, eh, fh) - sigma[i]);
    }
    if (best != OZ_INT_MAX) atomicMin(tau + col, best);
}

extern "C" __global__ void __launch_bounds__(256)
oz_p_colmin_i32(const int *__restrict__ P, i64 ldp, int rows, int cols,
                const int *__restrict__ sigma, int eh, u64 fh, int *__restrict__ tau) {
    oz_p_colmin<int>(P, ldp, rows, cols, sigma, eh, fh, tau);
}
extern "C" __global__ void __launch_bounds__(256)
oz_p_colmin_i64(const i64 *__restrict__ P, i64 ldp, int rows, int cols,
                const int *__restrict__ sigma, int eh, u64 fh, int *__restrict__ tau) {
    oz_p_colmin<i64>(P, ldp, rows, cols, sigma, eh, fh, tau);
}

// s = sigma + D - E (rows of A) or t = tau + D - F (columns of B; tau = INT_MAX, i.e. an
// empty set, becomes `empty`); 0 for an all-zero row / column (Emax = INT_MIN), whose
// exponent is then rewritten to 0.
extern "C" __global__ void oz_finalize_accurate(int *__restrict__ E, const int *__restrict__ st,
                                                int rows, int D, int empty,
                                                int *__restrict__ out) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int e = E[r];
    if (e == OZ_INT_MIN) {
        E[r] = 0;
        out[r] = 0;
        return;
    }
    int v = st[r];
    if (v == OZ_INT_MAX) v = empty;
    out[r] = v + D - e;
}

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
