// Stages 5-6 beyond the count search: the gathers, the a-posteriori test, the elements
// computed from their terms (docs/spec.md §10.2, §10.4-10.5). Mirrored by
// ozaki_backend/cuda/certificate.py and ozaki_backend/cuda/direct.py (and the reference's
// ozaki_backend/reference/certificate.py, direct.py); the arithmetic is certificate.cuh's,
// operation for operation the formulas of ozaki_backend/spec/certificate.py.
//
// Operands are read row-wise (A as m x k, B as its transpose n x k, any strides), the
// equilibration exponents S applied on the fly (x 2^(ks S_k), ks = -1 for A, +1 for B^T).
#include "certificate.cuh"

// ---------------------------------------------------------------------------------
// The gate of the gathers (spec.gathers_needed): out[0] = 1 when the entries below the
// bound GEMM's window (Z, per row of A and of B^T) are more than half the non-zero ones
// (n). One block; 64-bit sums.
extern "C" __global__ void __launch_bounds__(1024)
oz_gather_gate(const int *__restrict__ Za, const int *__restrict__ na, int ma,
               const int *__restrict__ Zb, const int *__restrict__ nb, int mb,
               int *__restrict__ out) {
    __shared__ long long sz[32], sn[32];
    long long z = 0, n = 0;
    for (int r = threadIdx.x; r < ma; r += blockDim.x) z += Za[r], n += na[r];
    for (int r = threadIdx.x; r < mb; r += blockDim.x) z += Zb[r], n += nb[r];
    for (int off = 16; off > 0; off >>= 1) {
        z += __shfl_xor_sync(0xffffffffu, z, off);
        n += __shfl_xor_sync(0xffffffffu, n, off);
    }
    if ((threadIdx.x & 31) == 0) sz[threadIdx.x >> 5] = z, sn[threadIdx.x >> 5] = n;
    __syncthreads();
    if (threadIdx.x == 0) {
        z = n = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) z += sz[w], n += sn[w];
        out[0] = 2 * z > n ? 1 : 0;     // GATHER_SHARE = 1/2
    }
}

// The top OZ_GATHER_H entries of each row (reference.certificate.top_indices): the
// columns of the h largest |x 2^(ks S_k)|, largest first, ties to the lower column; H
// (rows x OZ_GATHER_H) their columns, Ct (rows x OZ_GATHER_H) their codes (spec.codes,
// zero for slots past a short row). One warp per row (block (32, 8)): each lane keeps
// its own sorted list of h over the columns it reads, then h rounds of a warp argmax
// take the best head of all lanes (the columns are distinct, so the order is total).
extern "C" __global__ void __launch_bounds__(256)
oz_top_entries(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols,
               const int *__restrict__ S, int ks, const int *__restrict__ E, int h,
               int *__restrict__ H, i8 *__restrict__ Ct) {
    int row = blockIdx.x * 8 + threadIdx.y;
    if (row >= rows) return;                         // a whole warp leaves together
    double v[OZ_GATHER_H];
    int kx[OZ_GATHER_H], cd[OZ_GATHER_H];
#pragma unroll
    for (int r = 0; r < OZ_GATHER_H; ++r) v[r] = -1.0, kx[r] = OZ_INT_MAX, cd[r] = OZ_CODE_ZERO;
    int Er = E[row];
    const double *xr = X + (i64)row * rs;
    for (int k = threadIdx.x; k < cols; k += 32) {
        double x = xr[(i64)k * cs];
        if (S) x = oz_shift(x, ks * S[k]);
        double a = fabs(x);
        if (!(a > v[OZ_GATHER_H - 1])) continue;      // later columns lose ties
        int c = oz_code(x, Er);
        // insert (a, k, c) into the descending list
        double ca = a;
        int ck = k, cc = c;
#pragma unroll
        for (int r = 0; r < OZ_GATHER_H; ++r) {
            if (ca > v[r]) {
                double tv = v[r];
                int tk = kx[r], tc = cd[r];
                v[r] = ca, kx[r] = ck, cd[r] = cc;
                ca = tv, ck = tk, cc = tc;
            }
        }
    }
    for (int r = 0; r < h; ++r) {
        double bv = v[0];
        int bk = kx[0], bc = cd[0];
        for (int off = 16; off > 0; off >>= 1) {
            double ov = __shfl_xor_sync(0xffffffffu, bv, off);
            int ok = __shfl_xor_sync(0xffffffffu, bk, off);
            int oc = __shfl_xor_sync(0xffffffffu, bc, off);
            if (ov > bv || (ov == bv && ok < bk)) bv = ov, bk = ok, bc = oc;
        }
        if (kx[0] == bk && bv >= 0.0) {               // this lane's head won: pop it
#pragma unroll
            for (int q = 0; q < OZ_GATHER_H - 1; ++q) v[q] = v[q + 1], kx[q] = kx[q + 1], cd[q] = cd[q + 1];
            v[OZ_GATHER_H - 1] = -1.0, kx[OZ_GATHER_H - 1] = OZ_INT_MAX;
            cd[OZ_GATHER_H - 1] = OZ_CODE_ZERO;
        }
        if (threadIdx.x == 0) {
            H[(i64)row * OZ_GATHER_H + r] = bv >= 0.0 ? bk : 0;
            Ct[(i64)row * OZ_GATHER_H + r] = (i8)(bv >= 0.0 ? bc : OZ_CODE_ZERO);
        }
    }
}

// The codes of every entry, transposed: Ck[k][r] (ldc >= rows) = spec.codes of row r's
// entry k. Tiles of 32 rows x 64 columns through shared memory, both sides coalesced.
extern "C" __global__ void __launch_bounds__(256)
oz_codes_t(const double *__restrict__ X, i64 rs, i64 cs, int rows, int cols, int rows_fast,
           const int *__restrict__ S, int ks, const int *__restrict__ E, i8 *__restrict__ Ck,
           i64 ldc) {
    __shared__ double tile[OZ_TR][OZ_TK + 1];
    int row0 = blockIdx.y * OZ_TR, col0 = blockIdx.x * OZ_TK;
    oz_load_tile(tile, X, rs, cs, rows, cols, row0, col0, rows_fast, S, ks);
    __syncthreads();
    for (int idx = threadIdx.x; idx < OZ_TR * OZ_TK; idx += blockDim.x) {
        int r = idx & (OZ_TR - 1), c = idx / OZ_TR;
        int gr = row0 + r, gc = col0 + c;
        if (gr < rows && gc < cols) Ck[(i64)gc * ldc + gr] = (i8)oz_code(tile[r][c], E[gr]);
    }
}

// The gathered lower bound of every element of one tile (reference.certificate.gathered):
// G[i][j] (int16, certificate.cuh) = the largest product of code values over row i's top
// entries (with B's codes in those rows) and column j's (with A's codes in those
// columns), times 2^14. Rows i0 .. i0 + rows of A, columns j0 .. j0 + cols of B; the
// tile's rows of the output start at G. Block (32, 8) per 32 x 32 elements: the block's
// top-entry columns and codes are staged in shared memory first, then the codes they
// point at, with the loads unrolled so that many are in flight (each thread's loads are
// independent). The products are compared as integer keys (oz_g16_key), exactly as their
// values order, so no double is formed; equal values have equal codes, so the code kept
// is the one the reference keeps.
extern "C" __global__ void __launch_bounds__(256)
oz_gather(const int *__restrict__ HA, const i8 *__restrict__ CtA, const i8 *__restrict__ CkA,
          i64 lda, int i0, int rows, const int *__restrict__ HB, const i8 *__restrict__ CtB,
          const i8 *__restrict__ CkB, i64 ldb, int j0, int cols, int h,
          short *__restrict__ G, i64 ldg) {
    __shared__ i8 sA[32][OZ_GATHER_H][32];   // [col][r][row]: A's codes at column j's tops
    __shared__ i8 sB[32][OZ_GATHER_H][32];   // [row][r][col]: B's codes at row i's tops
    __shared__ int hA[32][OZ_GATHER_H], hB[32][OZ_GATHER_H];    // the tops' columns
    __shared__ i8 cA[32][OZ_GATHER_H], cB[32][OZ_GATHER_H];     // the tops' own codes
    int tid = threadIdx.y * 32 + threadIdx.x;
    int ib = blockIdx.y * 32, jb = blockIdx.x * 32;
    {
        int y = tid >> 3, r = tid & (OZ_GATHER_H - 1);          // 256 = 32 x OZ_GATHER_H
        bool ra = ib + y < rows, rb = jb + y < cols;
        hA[y][r] = ra ? HA[(i64)(i0 + ib + y) * OZ_GATHER_H + r] : 0;
        cA[y][r] = ra ? CtA[(i64)(i0 + ib + y) * OZ_GATHER_H + r] : (i8)OZ_CODE_ZERO;
        hB[y][r] = rb ? HB[(i64)(j0 + jb + y) * OZ_GATHER_H + r] : 0;
        cB[y][r] = rb ? CtB[(i64)(j0 + jb + y) * OZ_GATHER_H + r] : (i8)OZ_CODE_ZERO;
    }
    __syncthreads();
#pragma unroll 8
    for (int it = 0; it < 32 * OZ_GATHER_H * 32 / 256; ++it) {
        int idx = tid + it * 256;
        int x = idx & 31, r = (idx >> 5) % OZ_GATHER_H, y = idx / (32 * OZ_GATHER_H);
        // y: the tile's column (sA) / row (sB); x: the row (sA) / column (sB)
        i8 a = OZ_CODE_ZERO, b = OZ_CODE_ZERO;
        if (r < h && jb + y < cols && ib + x < rows)
            a = CkA[(i64)hB[y][r] * lda + i0 + ib + x];
        if (r < h && ib + y < rows && jb + x < cols)
            b = CkB[(i64)hA[y][r] * ldb + j0 + jb + x];
        sA[y][r][x] = a;
        sB[y][r][x] = b;
    }
    __syncthreads();
    int jj = threadIdx.x, j = jb + jj;
    if (j >= cols) return;
    for (int ii = threadIdx.y; ii < 32; ii += 8) {
        int i = ib + ii;
        if (i >= rows) break;
        int best = OZ_INT_MIN;
        for (int r = 0; r < h; ++r) {
            best = max(best, oz_g16_key(cA[ii][r], sB[ii][r][jj]));
            best = max(best, oz_g16_key(sA[jj][r][ii], cB[jj][r]));
        }
        G[(i64)i * ldg + j] = oz_g16_of_key(best);
    }
}

// ---------------------------------------------------------------------------------
// The a-posteriori test (spec.posterior) over one tile, in two launches: oz_post_level
// raises level[0] (the double's bits: non-negative doubles order as unsigned integers)
// to the tile's max nu / |C| over the reliable elements; oz_post_test then writes every
// element's bound (bound non-null) and, for the elements failing the a-priori test at
// the count (fa, fb: its factor rows), applies the a-posteriori test: out[0] += the
// unsettled ones, whose indices (i * n_total + j as i64) go to idx while out[0] < cap,
// out[1] += those near the overflow threshold (spec.big: never repaired).
// Block (32, 8) per 32 columns x OZ_PR rows, as the count search (kernels/scaling.cu
// oz_cert_counts): the block's rows' statistics staged in shared memory, each thread's
// column's in registers, so an element reads only P, G and C; C (and bound) with any
// strides.
#define OZ_PR 64

struct OzElem {
    OzPrior q;
    double x, w;
    int EF, ov;
};

// One operand side's statistics of one row (of A) or column (of B).
struct OzSide {
    double f, q, r;
    int lo, hi, n, E, z;
};

__device__ __forceinline__ OzSide oz_side(const double *f, const double *q, const double *r,
                                          const int *lo, const int *hi, const int *n,
                                          const int *E, const int *Z, int at) {
    return OzSide{f[at], q[at], r[at], lo[at], hi[at], n[at], E[at], Z ? Z[at] : 0};
}

// The element's prior, excess and spread from its row's and column's statistics (have_z:
// the window counts Z exist, oz_window_terms).
__device__ __forceinline__ OzElem oz_elem(double P, short g16, bool have_g, const OzSide &a,
                                          const OzSide &b, bool have_z, int kbits,
                                          int with_direct) {
    OzElem e;
    e.ov = min(a.hi, b.hi) - max(a.lo, b.lo) + 1;
    int ke = min(e.ov, min(a.n, b.n));
    double g14 = have_g ? oz_g16_value(g16) : 0.0;
    int kw = max(ke, 1);
    if (have_z) kw = min(kw, max(min(a.n - a.z, b.n - b.z), 1));
    e.q = oz_prior(ke, kw, a.E, b.E, kbits, P, g14, have_g, with_direct);
    e.EF = a.E + b.E;
    double x = oz_x(a.f, b.q, a.q, b.f);
    e.x = e.ov > 0 ? x : 0.0;
    e.w = oz_x(a.f, b.r, a.r, b.f);
    return e;
}

#define OZ_ELEM_PARAMS                                                                           \
    const short *__restrict__ G, i64 ldg, int rows, int cols, const double *__restrict__ fa,     \
        const double *__restrict__ qa, const double *__restrict__ ra, const int *__restrict__ loA, \
        const int *__restrict__ hiA, const int *__restrict__ nA, const int *__restrict__ EA,      \
        const double *__restrict__ fb, const double *__restrict__ qb, const double *__restrict__ rb, \
        const int *__restrict__ loB, const int *__restrict__ hiB, const int *__restrict__ nB,     \
        const int *__restrict__ FB, int kbits, int with_direct, const int *__restrict__ ZA,       \
        const int *__restrict__ ZB, const double *__restrict__ C, i64 cr, i64 cc

// Stage the block's rows r0 .. r1 of A's statistics in shared memory.
#define OZ_STAGE_ROWS(sh, r0, r1)                                                               \
    for (int r = threadIdx.y * 32 + threadIdx.x; r < (r1) - (r0); r += 256)                      \
        sh[r] = oz_side(fa, qa, ra, loA, hiA, nA, EA, ZA, (r0) + r);                             \
    __syncthreads();

template <class T>
__device__ __forceinline__ void oz_post_level(const T *__restrict__ P, i64 ldp, OZ_ELEM_PARAMS,
                                              u64 *__restrict__ level) {
    __shared__ OzSide sa[OZ_PR];
    __shared__ double wbest[8];
    int col = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * OZ_PR, r1 = min(rows, r0 + OZ_PR);
    OZ_STAGE_ROWS(sa, r0, r1)
    double best = 0.0;
    if (col < cols) {
        OzSide b = oz_side(fb, qb, rb, loB, hiB, nB, FB, ZB, col);
        for (int row = r0 + threadIdx.y; row < r1; row += 8) {
            OzElem e = oz_elem((double)P[(i64)row * ldp + col], G ? G[(i64)row * ldg + col] : 0,
                               G != nullptr, sa[row - r0], b, ZA != nullptr, kbits, with_direct);
            double c = fabs(C[(i64)row * cr + (i64)col * cc]);
            double W = oz_scaled(__dmul_rn(e.w, OZ_SQRT2), e.EF - 64);
            double nu = oz_scaled(e.q.nu, e.EF - 14);
            if (e.q.ke >= 3 && c > ldexp(W, 2) && nu < OZ_INF) best = oz_max(best, __ddiv_rn(nu, c));
        }
    }
    for (int off = 16; off > 0; off >>= 1) best = oz_max(best, __shfl_xor_sync(0xffffffffu, best, off));
    if (threadIdx.x == 0) wbest[threadIdx.y] = best;
    __syncthreads();
    if (threadIdx.y == 0 && threadIdx.x == 0) {
        for (int w = 1; w < 8; ++w) best = oz_max(best, wbest[w]);
        if (best > 0.0) atomicMax(level, (u64)__double_as_longlong(best));
    }
}

template <class T>
__device__ __forceinline__ void oz_post_test(const T *__restrict__ P, i64 ldp, OZ_ELEM_PARAMS,
                                             double level, int test, double *__restrict__ bound,
                                             i64 br, i64 bc, int r_total, int c_total, int i0,
                                             int j0, int cap, int *__restrict__ out,
                                             i64 *__restrict__ idx) {
    __shared__ OzSide sa[OZ_PR];
    int col = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * OZ_PR, r1 = min(rows, r0 + OZ_PR);
    OZ_STAGE_ROWS(sa, r0, r1)
    if (col >= cols) return;
    OzSide b = oz_side(fb, qb, rb, loB, hiB, nB, FB, ZB, col);
    for (int row = r0 + threadIdx.y; row < r1; row += 8) {
        T pv = P[(i64)row * ldp + col];
        short g16 = G ? G[(i64)row * ldg + col] : 0;
        OzElem e = oz_elem((double)pv, g16, G != nullptr, sa[row - r0], b, ZA != nullptr, kbits,
                           with_direct);
        double c = C[(i64)row * cr + (i64)col * cc];
        double absC = fabs(c);
        double Tb = oz_trunc_bound(e.x, e.EF);
        double bd = oz_up(__dadd_rn(Tb, oz_round_bound(c)));
        if (bound) bound[(i64)row * br + (i64)col * bc] = bd;
        if (!test || oz_passes(e.q, e.x, e.w)) continue;
        double W = oz_scaled(__dmul_rn(e.w, OZ_SQRT2), e.EF - 64);
        double nu = oz_scaled(e.q.nu, e.EF - 14);
        double lam = G ? oz_max((double)pv, oz_g16_value(g16)) : (double)pv;
        double L1 = oz_max(oz_lower(lam, e.EF), oz_down(__dsub_rn(absC, bd)));
        double kk = (double)max(e.q.ke, 1);
        double capabs = oz_down(ldexp(oz_down(__dmul_rn(kk - 1.0, L1)), -53));
        double own = ldexp(nu, OZ_LOG2_OWN);
        double rel = ldexp(__dmul_rn(level, absC), OZ_LOG2_POST);
        double allow = oz_max(own, oz_min(rel, ldexp(own, OZ_LOG2_CAP)));
        bool ok = bd < OZ_INF && Tb <= capabs && W <= allow;
        if (!ok) {
            int slot = atomicAdd(out, 1);
            if (slot < cap) idx[slot] = (i64)(i0 + row) * c_total + (j0 + col);
            if (e.q.big) atomicAdd(out + 1, 1);     // not repairable: its dot product may overflow
        }
    }
}

#define OZ_POST(NAME, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        NAME##_level(const T *__restrict__ P, i64 ldp, OZ_ELEM_PARAMS, u64 *__restrict__ level) { \
        oz_post_level<T>(P, ldp, G, ldg, rows, cols, fa, qa, ra, loA, hiA, nA, EA, fb, qb, rb, \
                         loB, hiB, nB, FB, kbits, with_direct, ZA, ZB, C, cr, cc, level);                            \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        NAME##_test(const T *__restrict__ P, i64 ldp, OZ_ELEM_PARAMS, double level, int test,  \
                    double *__restrict__ bound, i64 br, i64 bc, int r_total, int c_total,      \
                    int i0, int j0, int cap, int *__restrict__ out, i64 *__restrict__ idx) {   \
        oz_post_test<T>(P, ldp, G, ldg, rows, cols, fa, qa, ra, loA, hiA, nA, EA, fb, qb, rb,  \
                        loB, hiB, nB, FB, kbits, with_direct, ZA, ZB, C, cr, cc, level, test,    \
                        bound, br, bc,        \
                        r_total, c_total, i0, j0, cap, out, idx);                               \
    }
OZ_POST(oz_post_i32, int)
OZ_POST(oz_post_i64, i64)

// ---------------------------------------------------------------------------------
// Elements computed from their terms (reference/direct.py).

// Whether the element of row (lo, hi, na) and column (lob, hib, nb) is direct (one or two
// terms, spec.direct), and then its terms' indices k1 <= k2 (spec.direct_indices: the
// column's support when nb <= 2, else the row's when na <= 2, else the overlap).
__device__ __forceinline__ bool oz_direct_indices(int lo, int hi, int na, int lob, int hib,
                                                  int nb, int &k1, int &k2) {
    int ke = oz_terms(lo, hi, na, lob, hib, nb);
    if (ke < 1 || ke > 2) return false;
    if (nb <= 2) k1 = lob, k2 = hib;
    else if (na <= 2) k1 = lo, k2 = hi;
    else k1 = max(lo, lob), k2 = min(hi, hib);
    return true;
}

// Direct elements (one or two terms: spec.direct_indices, spec.direct_values) of the
// whole product, in place in C (and bound when non-null), from the caller's operands
// (A: m x k rows, Bt: n x k rows). Block (32, 8) per 32 x 8 elements.
extern "C" __global__ void __launch_bounds__(256)
oz_direct(const double *__restrict__ A, i64 ars, i64 acs, const double *__restrict__ Bt,
          i64 brs, i64 bcs, int rows, int cols, const int *__restrict__ loA,
          const int *__restrict__ hiA, const int *__restrict__ nA, const int *__restrict__ loB,
          const int *__restrict__ hiB, const int *__restrict__ nB, double g2,
          double *__restrict__ C, i64 cr, i64 cc, double *__restrict__ bound, i64 br, i64 bc) {
    int col = blockIdx.x * 32 + threadIdx.x, row = blockIdx.y * 8 + threadIdx.y;
    if (row >= rows || col >= cols) return;
    int k1, k2;
    if (!oz_direct_indices(loA[row], hiA[row], nA[row], loB[col], hiB[col], nB[col], k1, k2))
        return;
    bool two = k1 != k2;
    const double *ar = A + (i64)row * ars, *br_ = Bt + (i64)col * brs;
    double a1 = ar[(i64)k1 * acs], b1 = br_[(i64)k1 * bcs];
    double a2 = two ? ar[(i64)k2 * acs] : 0.0, b2 = two ? br_[(i64)k2 * bcs] : 0.0;
    double v, bd;
    oz_direct_values(a1, b1, a2, b2, two, g2, v, bd);
    C[(i64)row * cr + (i64)col * cc] = v;
    if (bound) bound[(i64)row * br + (i64)col * bc] = bd;
}

// Direct elements of the complex scheme's real embedding (docs/spec.md §11.4): as
// oz_direct on A^ = [Ar, -Ai] (rows x 2k) and B^ = [[Br, Bi], [Bi, -Br]] (2k x 2n), whose
// entries are read from the caller's parts in place (reference/complex.py embeds them):
// A^[i, q] is Ar[i, q] for q < k and -Ai[i, q - k] beyond; column j < n of B^ is
// [Br_j; Bi_j], column n + j is [Bi_j; -Br_j] (Brt, Bit: B's parts with its columns as
// rows). loA/hiA/nA describe the embedding's rows, loB/hiB/nB its 2n columns (the
// statistics the certificate read). C and bound are the embedding's layout [Re, Im]
// (rows x 2n). Block (32, 8) per 32 x 8 elements.
__device__ __forceinline__ double oz_cx_a(const double *ar, const double *ai, i64 acs, int k,
                                          int q) {
    return q < k ? ar[(i64)q * acs] : -ai[(i64)(q - k) * acs];
}

__device__ __forceinline__ double oz_cx_b(const double *br, const double *bi, i64 bcs, int k,
                                          bool im, int q) {
    if (q < k) return (im ? bi : br)[(i64)q * bcs];
    return im ? -br[(i64)(q - k) * bcs] : bi[(i64)(q - k) * bcs];
}

extern "C" __global__ void __launch_bounds__(256)
oz_cx_direct(const double *__restrict__ Ar, const double *__restrict__ Ai, i64 ars, i64 acs,
             const double *__restrict__ Brt, const double *__restrict__ Bit, i64 brs, i64 bcs,
             int rows, int n, int k, const int *__restrict__ loA, const int *__restrict__ hiA,
             const int *__restrict__ nA, const int *__restrict__ loB,
             const int *__restrict__ hiB, const int *__restrict__ nB, double g2,
             double *__restrict__ C, i64 cr, i64 cc, double *__restrict__ bound, i64 br, i64 bc) {
    int col = blockIdx.x * 32 + threadIdx.x, row = blockIdx.y * 8 + threadIdx.y;
    if (row >= rows || col >= 2 * n) return;
    int k1, k2;
    if (!oz_direct_indices(loA[row], hiA[row], nA[row], loB[col], hiB[col], nB[col], k1, k2))
        return;
    bool two = k1 != k2, im = col >= n;
    int j = im ? col - n : col;
    const double *ar = Ar + (i64)row * ars, *ai = Ai + (i64)row * ars;
    const double *b_r = Brt + (i64)j * brs, *b_i = Bit + (i64)j * brs;
    double a1 = oz_cx_a(ar, ai, acs, k, k1), b1 = oz_cx_b(b_r, b_i, bcs, k, im, k1);
    double a2 = two ? oz_cx_a(ar, ai, acs, k, k2) : 0.0;
    double b2 = two ? oz_cx_b(b_r, b_i, bcs, k, im, k2) : 0.0;
    double v, bd;
    oz_direct_values(a1, b1, a2, b2, two, g2, v, bd);
    C[(i64)row * cr + (i64)col * cc] = v;
    if (bound) bound[(i64)row * br + (i64)col * bc] = bd;
}

// The unsettled elements idx[0 .. count) (i * cols + j) recomputed as compensated dot
// products (Dot2) in reference.direct.dot2_in_order's order: one warp per element, lane l
// takes the terms k = l, l + 32, ... (p = RN(a b) and its error e, spec.two_prod_scaled:
// Dekker's product of the frexp fractions, scaled back; (s, r) = TwoSum(s, p);
// c = RN(c + RN(r + e)); no fused multiply-add), then the lanes meet pairwise
// ((s_l, r) = TwoSum(s_l, s_{l+h}), c_l = RN(RN(c_l + c_{l+h}) + r), h = 16 .. 1), the
// result RN(s + c); with the bound of
// spec.repair_bound when bound is non-null, from the bound GEMM's tile that starts at row
// i0, column j0 (P, or P64 for k beyond int32: the elements listed all lie in it).
// Block (32, 8): eight elements per block.
extern "C" __global__ void __launch_bounds__(256)
oz_repair(const i64 *__restrict__ idx, int count, int cols, const double *__restrict__ A,
          i64 ars, i64 acs, const double *__restrict__ Bt, i64 brs, i64 bcs, int k,
          const int *__restrict__ loA, const int *__restrict__ hiA, const int *__restrict__ nA,
          const int *__restrict__ SA, const int *__restrict__ EA, const int *__restrict__ loB,
          const int *__restrict__ hiB, const int *__restrict__ nB, const int *__restrict__ SB,
          const int *__restrict__ FB, const int *__restrict__ P,
          const long long *__restrict__ P64, i64 ldp, int i0, int j0,
          double *__restrict__ C, i64 cr, i64 cc, double *__restrict__ bound, i64 br, i64 bc) {
    int t = blockIdx.x * 8 + threadIdx.y;
    if (t >= count) return;                      // a whole warp leaves together
    i64 e = idx[t];
    int row = (int)(e / cols), col = (int)(e - (i64)row * cols);
    const double *ar = A + (i64)row * ars, *b_ = Bt + (i64)col * brs;
    double s = 0.0, c = 0.0;
    for (int q = threadIdx.x; q < k; q += 32) {
        double p, e, s2, r;
        oz_two_prod_scaled(ar[(i64)q * acs], b_[(i64)q * bcs], p, e);
        oz_two_sum(s, p, s2, r);
        c = __dadd_rn(c, __dadd_rn(r, e));
        s = s2;
    }
    for (int h = 16; h > 0; h >>= 1) {
        double os = __shfl_down_sync(0xffffffffu, s, h);
        double oc = __shfl_down_sync(0xffffffffu, c, h);
        if (threadIdx.x < h) {
            double s2, r;
            oz_two_sum(s, os, s2, r);
            c = __dadd_rn(__dadd_rn(c, oc), r);
            s = s2;
        }
    }
    if (threadIdx.x != 0) return;
    C[(i64)row * cr + (i64)col * cc] = __dadd_rn(s, c);
    if (bound) {
        int ke = oz_terms(loA[row], hiA[row], nA[row], loB[col], hiB[col], nB[col]);
        i64 o = (i64)(row - i0) * ldp + (col - j0);    // P: the tile from row i0, column j0
        double p = P64 ? (double)P64[o] : (double)P[o];
        double U = oz_upper_abs(p, SA[row], nA[row], SB[col], nB[col], EA[row] + FB[col]);
        int h = min(max(ke, 0), (k + 31) / 32) + 6;
        bound[(i64)row * br + (i64)col * bc] = oz_repair_bound(h, U);
    }
}
