// Stage 3, fused: the INT8 modular products on Hopper's tensor cores with the reduction
// mod p done on the accumulators (docs/spec.md §5), mirrored by
// ozaki_backend/cuda/modprod.py. Compiled for sm_90a only (wgmma).
//
// One CTA owns one 128 x OZ_BN output tile and walks a list of "items" (one item =
// one modulus's product, or one prime x one hi/lo pass of the seed scheme): for each
// item it runs the whole k reduction through `wgmma.mma_async ... .s32.s8.s8` into
// int32 registers, reduces them mod p with a multiply-high (magic number) remainder,
// and writes one byte per element. The int32 products never reach device memory.
//
// Warp roles (288 threads):
//   warps 0-7:   two consumer warpgroups (below);
//   warp 8:      producer. One thread issues bulk tensor copies (TMA) of the A and B
//                k-blocks (128 bytes of k, 128-byte swizzle) into an OZ_STAGES-deep ring
//                of shared-memory stages, completing on "full" mbarriers. A single
//                warp rather than a warpgroup leaves registers for a second resident
//                CTA (OZ_MIN_BLOCKS = 2) whose mainloop covers this one's epilogue.
//   warpgroups 0, 1: consumers. Each owns 64 rows of the tile and issues
//                m64nOZ_BNk32 wgmmas straight from shared memory; a stage goes back to
//                the producer ("empty" mbarrier) once the wgmmas reading it retired.
// Successive items overlap: the producer runs ahead into the next item's k-blocks
// while the consumers reduce and store the previous one.
//
// Exactness (asserted by ozaki_backend/modular.py and its tests):
//   * |residue| <= 128, so |product| <= 2^14; the accumulator is folded (acc mod p in
//     [0, p)) after every OZ_FOLD_K = 65408 terms, OZ_FOLD_K * 2^14 + 255 < 2^30;
//   * u = acc + bias_p (bias_p = p ceil(2^30 / p)) lies in [0, 2^31 + 2^8): the magic
//     pair (m_p, s_p) gives floor(u / p) = umulhi(u, m_p) >> s_p exactly there.
#include "common.cuh"

#ifndef OZ_BN
#define OZ_BN 128
#endif
#ifndef OZ_STAGES
#define OZ_STAGES 6
#endif
#ifndef OZ_CLUSTER
#define OZ_CLUSTER 1
#endif
#ifndef OZ_MIN_BLOCKS
#define OZ_MIN_BLOCKS 1
#endif
#define OZ_THREADS 288
#define OZ_BM 128
// Bytes of k per stage = one swizzled row: 128 (128-byte swizzle) or 64 (64-byte
// swizzle: half the stage, twice the ring depth in the same shared memory, so more
// copies are in flight ahead of the tensor cores).
#ifndef OZ_BK
#define OZ_BK 128
#endif
#define OZ_FOLD_K 65408
#define OZ_FOLD_KB (OZ_FOLD_K / OZ_BK)

static_assert(OZ_BN == 128 || OZ_BN == 256, "tile width: 128 or 256");
static_assert(OZ_CLUSTER == 1 || OZ_CLUSTER == 2, "cluster: 1 or 2 CTAs");
// With a cluster of two CTAs (two tile rows sharing one B block), each CTA copies half
// of the B block and the bulk copy engine multicasts it into both: the L2 -> SM traffic
// per output drops by a quarter.
#if OZ_CLUSTER == 2
#define OZ_CLUSTER_ATTR __cluster_dims__(2, 1, 1)
#else
#define OZ_CLUSTER_ATTR
#endif
static_assert(OZ_BK == 128 || OZ_BK == 64, "k block: 128 or 64 bytes");
static_assert(OZ_FOLD_K % OZ_BK == 0, "fold interval in whole k blocks");
static_assert((long long)OZ_FOLD_K * 16384 + 255 < (1ll << 30), "fold interval");

// CUtensorMap is an opaque, 64-byte aligned 128-byte object (cuda.h is not available
// to NVRTC). It arrives by value as a __grid_constant__ parameter.
struct __align__(64) OzTmap {
    u64 opaque[16];
};

// Per item: planes of A and B, the modulus and its magic pair, the bias, the level
// (prefix index of the modulus, for the per-tile `need` skip).
struct OzItem {
    int a, b;
    u32 p, magic;
    int shift;
    u32 bias;
    int level, pad;
};

#define OZ_A_BYTES (OZ_BM * OZ_BK)
#define OZ_B_BYTES (OZ_BN * OZ_BK)
#define OZ_STAGE_BYTES (OZ_A_BYTES + OZ_B_BYTES)

__device__ __forceinline__ u32 oz_smem_u32(const void *p) {
    return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void oz_mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void oz_mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n .reg .pred p;\n"
            " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            " selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

__device__ __forceinline__ void oz_mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Arrive on the barrier at the same offset in CTA `rank` of the cluster.
__device__ __forceinline__ void oz_mbar_arrive_cluster(u32 bar, u32 rank) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote)
                 : "memory");
}

__device__ __forceinline__ void oz_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ void oz_mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void oz_tma_load_3d(u32 dst, const OzTmap *map, int c0, int c1,
                                               int c2, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void oz_tma_load_3d_mc(u32 dst, const OzTmap *map, int c0, int c1,
                                                  int c2, u32 bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
        : "memory");
}

// Shared-memory matrix descriptor of a K-major tile stored in OZ_BK-byte swizzled rows:
// 8-row core groups 8 * OZ_BK bytes apart (SBO), leading offset unused with swizzling;
// layout type 1 = 128-byte swizzle, 2 = 64-byte swizzle.
__device__ __forceinline__ u64 oz_desc(u32 addr) {
    u64 d = (u64)((addr & 0x3FFFF) >> 4);
    d |= (u64)1 << 16;
    d |= (u64)((8 * OZ_BK) >> 4) << 32;
    d |= (u64)(OZ_BK == 128 ? 1 : 2) << 62;
    return d;
}

__device__ __forceinline__ void oz_wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void oz_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void oz_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across the async wgmmas.
template <int R>
__device__ __forceinline__ void oz_fence_regs(int (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

#if OZ_BN == 128
#define OZ_ACC 64
__device__ __forceinline__ void oz_wgmma(int (&d)[64], u64 da, u64 db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]),
          "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]),
          "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]),
          "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]),
          "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]),
          "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]),
          "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]),
          "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]),
          "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(da), "l"(db));
}
#else
#define OZ_ACC 128
__device__ __forceinline__ void oz_wgmma(int (&d)[128], u64 da, u64 db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "
        "%110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
        "%123, %124, %125, %126, %127}, "
        "%128, %129, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]),
          "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]),
          "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]),
          "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]),
          "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]),
          "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]),
          "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]),
          "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]),
          "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]), "+r"(d[65]),
          "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
          "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]),
          "+r"(d[78]), "+r"(d[79]), "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]),
          "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]), "+r"(d[89]),
          "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
          "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]),
          "+r"(d[102]), "+r"(d[103]), "+r"(d[104]), "+r"(d[105]), "+r"(d[106]),
          "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
          "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]),
          "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]), "+r"(d[121]),
          "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]),
          "+r"(d[127])
        : "l"(da), "l"(db));
}
#endif

// x mod p in [0, p) for |x| <= 2^30 (see the exactness note at the top).
__device__ __forceinline__ u32 oz_mod_magic(int x, const OzItem &it) {
    u32 u = (u32)x + it.bias;
    u32 q = __umulhi(u, it.magic) >> it.shift;
    return u - q * it.p;
}

// Does this CTA compute item `q`? Same answer in every thread (and in the producer).
__device__ __forceinline__ bool oz_wanted(const OzItem &it, int need_max) {
    return it.level < need_max;
}

// Release stage `s` to the producers of every CTA whose copies fill it.
__device__ __forceinline__ void oz_release(u32 bar) {
#if OZ_CLUSTER > 1
#pragma unroll
    for (int r = 0; r < OZ_CLUSTER; ++r) oz_mbar_arrive_cluster(bar, (u32)r);
#else
    oz_mbar_arrive(bar);
#endif
}

__device__ __forceinline__ void oz_consume(const OzItem *__restrict__ items, int n_items,
                                           int need_max, unsigned char *__restrict__ out,
                                           i64 plane, int ldo, int rows, int cols, int nkb,
                                           int row0, int col0, int wg, u32 sbase, u32 full0,
                                           u32 empty0) {

    // Consumers.
    const int c = wg;                 // which 64-row half of the tile
    const int t = threadIdx.x % 128;  // thread in the warpgroup
    const int warp = t / 32, lane = t % 32;
    int d[OZ_ACC];
    int it = 0;
    for (int q = blockIdx.z; q < n_items; q += gridDim.z) {
        const OzItem item = items[q];
        if (!oz_wanted(item, need_max)) continue;
#pragma unroll
        for (int i = 0; i < OZ_ACC; ++i) d[i] = 0;
        int prev = -1;
        for (int kb = 0; kb < nkb; ++kb, ++it) {
            int s = it % OZ_STAGES;
            u32 ph = (u32)(it / OZ_STAGES) & 1u;
            oz_mbar_wait(full0 + 8 * s, ph);
            u32 a = sbase + s * OZ_STAGE_BYTES + c * (64 * OZ_BK);
            u32 b = sbase + s * OZ_STAGE_BYTES + OZ_A_BYTES;
            oz_fence_regs(d);
            oz_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < OZ_BK / 32; ++kk) oz_wgmma(d, oz_desc(a + 32 * kk), oz_desc(b + 32 * kk));
            oz_wgmma_commit();
            // Keep one stage of wgmmas in flight; the one before it has retired.
            oz_wgmma_wait<1>();
            oz_fence_regs(d);
            if (prev >= 0 && t == 0) oz_release(empty0 + 8 * prev);
            prev = s;
            if ((kb + 1) % OZ_FOLD_KB == 0 && kb + 1 < nkb) {
                oz_wgmma_wait<0>();
                oz_fence_regs(d);
#pragma unroll
                for (int i = 0; i < OZ_ACC; ++i) d[i] = (int)oz_mod_magic(d[i], item);
            }
        }
        oz_wgmma_wait<0>();
        oz_fence_regs(d);
        if (prev >= 0 && t == 0) oz_release(empty0 + 8 * prev);

        // Epilogue: d[i] holds row 16 warp + lane/4 + 8 ((i/2) % 2), column
        // 8 (i/4) + 2 (lane % 4) + (i % 2) of this warpgroup's 64 x OZ_BN block.
        unsigned char *o = out + (i64)q * plane;
        const int rbase = row0 + 64 * c + 16 * warp + lane / 4;
        const int cbase = col0 + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < OZ_ACC; i += 2) {
            int r = rbase + 8 * ((i / 2) % 2);
            int cc = cbase + 8 * (i / 4);
            if (r >= rows) continue;
            u32 v0 = oz_mod_magic(d[i], item), v1 = oz_mod_magic(d[i + 1], item);
            unsigned char *dst = o + (i64)r * ldo + cc;
            if (cc + 1 < cols) {
                *(unsigned short *)dst = (unsigned short)(v0 | (v1 << 8));
            } else if (cc < cols) {
                dst[0] = (unsigned char)v0;
            }
        }
    }
}

// items[z], items[z + gridDim.z], ... for one output tile. blockIdx.x enumerates the
// tiles in groups of `group` tile rows, column by column inside a group, so that the
// CTAs resident at one time share A row blocks and B column blocks in L2 (one modulus's
// B plane alone can exceed the L2 at n = 8192).
// need (optional): per 128 x 64 output tile, the number of levels it needs.
extern "C" __global__ void __launch_bounds__(OZ_THREADS, OZ_MIN_BLOCKS) OZ_CLUSTER_ATTR
oz_modprod(const __grid_constant__ OzTmap tmA, const __grid_constant__ OzTmap tmB,
           const OzItem *__restrict__ items, int n_items, const signed char *__restrict__ need,
           int need_ld, unsigned char *__restrict__ out, i64 plane, int ldo, int rows, int cols,
           int k0, int nkb, int tiles_m, int tiles_n, int group) {
    extern __shared__ unsigned char oz_smem_raw[];
    // 128-byte swizzled stages need 1024-byte alignment.
    unsigned char *smem =
        (unsigned char *)(((size_t)oz_smem_raw + 1023) & ~(size_t)1023);
    u64 *bars = (u64 *)(smem + OZ_STAGES * OZ_STAGE_BYTES);
    const u32 sbase = oz_smem_u32(smem);
    const u32 full0 = oz_smem_u32(bars), empty0 = full0 + 8 * OZ_STAGES;

    const int wg = threadIdx.x / 128;
    // Rank in the cluster; a cluster owns OZ_CLUSTER consecutive tile rows (the last
    // one may lie past the matrix: it still copies its half of B for its partner).
    const int rank = blockIdx.x % OZ_CLUSTER;
    int tile_m, tile_n;
    {
        const int units_m = (tiles_m + OZ_CLUSTER - 1) / OZ_CLUSTER;
        const int unit = blockIdx.x / OZ_CLUSTER;
        const int per_group = group * tiles_n;
        const int g = unit / per_group, first = g * group;
        const int gm = min(group, units_m - first);
        const int r = unit - g * per_group;
        tile_m = (first + r % gm) * OZ_CLUSTER + rank;
        tile_n = r / gm;
    }
    const int row0 = tile_m * OZ_BM, col0 = tile_n * OZ_BN;

    int need_max = 1 << 30;
    if (need != nullptr) {
        need_max = 0;
        // Both CTAs of a cluster walk the same items (they share the B copies).
        const int tm0 = tile_m - rank;
        for (int u = 0; u < OZ_CLUSTER; ++u) {
            if ((tm0 + u) * OZ_BM >= rows) break;
            const signed char *nr = need + (i64)(tm0 + u) * need_ld;
#pragma unroll
            for (int t = 0; t < OZ_BN / 64; ++t) {
                int c = tile_n * (OZ_BN / 64) + t;
                if (c * 64 < cols) need_max = max(need_max, (int)nr[c]);
            }
        }
    }

    if (threadIdx.x == 0) {
        for (int s = 0; s < OZ_STAGES; ++s) {
            oz_mbar_init(full0 + 8 * s, 1);
            // one arrival per consumer warpgroup of every CTA the copies land in
            oz_mbar_init(empty0 + 8 * s, 2 * OZ_CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
#if OZ_CLUSTER > 1
    oz_cluster_sync();  // the partner's copies may target our barriers from now on
#else
    __syncthreads();
#endif

    if (wg == 2) {
        // Producer: a single thread keeps the ring full.
        if (threadIdx.x == 256) {
            int it = 0;
            for (int q = blockIdx.z; q < n_items; q += gridDim.z) {
                const OzItem item = items[q];
                if (!oz_wanted(item, need_max)) continue;
                for (int kb = 0; kb < nkb; ++kb, ++it) {
                    int s = it % OZ_STAGES;
                    u32 ph = (u32)(it / OZ_STAGES) & 1u;
                    oz_mbar_wait(empty0 + 8 * s, ph ^ 1u);
                    u32 full = full0 + 8 * s;
                    oz_mbar_expect_tx(full, OZ_STAGE_BYTES);
                    u32 dst = sbase + s * OZ_STAGE_BYTES;
                    int kx = k0 + kb * OZ_BK;
                    oz_tma_load_3d(dst, &tmA, kx, row0, item.a, full);
#if OZ_CLUSTER > 1
                    const int half = OZ_BN / OZ_CLUSTER;
                    oz_tma_load_3d_mc(dst + OZ_A_BYTES + rank * half * OZ_BK, &tmB, kx,
                                      col0 + rank * half, item.b, full,
                                      (unsigned short)((1u << OZ_CLUSTER) - 1));
#else
                    oz_tma_load_3d(dst + OZ_A_BYTES, &tmB, kx, col0, item.b, full);
#endif
                }
            }
        }
    } else {
        oz_consume(items, n_items, need_max, out, plane, ldo, rows, cols, nkb, row0, col0, wg,
                   sbase, full0, empty0);
    }
#if OZ_CLUSTER > 1
    oz_cluster_sync();  // no CTA leaves while its partner may still signal its barriers
#endif
}
