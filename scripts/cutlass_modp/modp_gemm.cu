// Probe (issue 18): a CUTLASS sm90 INT8 GEMM whose epilogue reduces each int32 product
// modulo its batch's modulus and stores uint8 residues in [0, p): the int32 planes the
// CRT pass reads today never reach memory. One launch covers every modulus (batch l
// multiplies A_l B_l^T and reduces mod moduli[l]). Built as a shared library with a C
// entry point for ctypes (build.sh); timed against cuBLAS by probe.py.
#include <cstdint>
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"

using namespace cute;

// acc mod p in [0, p) for every element of a fragment (Sm90Compute applies it to
// Array<int32_t, N> fragments of the accumulator and of the broadcast modulus, one
// modulus per batch: the same p across a fragment). No integer division per element:
// a = hi 2^16 + lo folds to c = hi (2^16 mod p) + lo, |c| < 2^24 (exact in float),
// whose float quotient estimate is within one of floor(c / p); one correction each way.
template <class T>
struct OzModP {
  CUTLASS_HOST_DEVICE T operator()(T const &acc, T const &p) const {
    T r;
    int P = p[0];
    int c16 = (1 << 16) % P;
    float inv = 1.0f / float(P);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < int(T::kElements); ++i) {
      int a = acc[i];
      int c = (a >> 16) * c16 + (a & 0xffff);
      int q = int(floorf(float(c) * inv));
      int v = c - q * P;
      v = v < 0 ? v + P : v;
      r[i] = v >= P ? v - P : v;
    }
    return r;
  }
};

template <class TileShape, class ClusterShape,
          class MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative,
          class EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative>
struct ModPGemm {
  using EVT = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<OzModP, uint8_t, int32_t,
                                             cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::fusion::Sm90AccFetch,
      cutlass::epilogue::fusion::Sm90ScalarBroadcast<int32_t, Stride<_0, _0, int64_t>>>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, int32_t,
      void, cutlass::layout::RowMajor, 16,
      uint8_t, cutlass::layout::RowMajor, 16,
      EpilogueSchedule, EVT>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      int8_t, cutlass::layout::RowMajor, 16,
      int8_t, cutlass::layout::ColumnMajor, 16,
      int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                      CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments args(const int8_t *A, int64_t lda, int64_t sa,
                                       const int8_t *B, int64_t ldb, int64_t sb, uint8_t *D,
                                       int64_t ldd, int64_t sd, const int32_t *moduli, int m,
                                       int n, int k, int batches, int swizzle = 1,
                                       int raster = 0) {
    using SA = typename Gemm::GemmKernel::StrideA;
    using SB = typename Gemm::GemmKernel::StrideB;
    using SD = typename Gemm::GemmKernel::StrideD;
    SA stride_a = make_stride(lda, Int<1>{}, sa);
    SB stride_b = make_stride(ldb, Int<1>{}, sb);
    SD stride_d = make_stride(ldd, Int<1>{}, sd);
    typename Gemm::Arguments a{cutlass::gemm::GemmUniversalMode::kBatched,
                               {m, n, k, batches},
                               {A, stride_a, B, stride_b},
                               {{}, nullptr, stride_d, D, stride_d}};
    // The modulus of batch l: moduli[l] (a scalar broadcast with a batch stride of 1).
    auto &p = a.epilogue.thread.op_1;
    p.scalar_ptrs[0] = moduli;
    p.dScalar[0] = make_stride(_0{}, _0{}, int64_t(1));
    // The persistent scheduler's walk over the output tiles: swizzle groups of 1-8
    // tiles (L2 reuse of the operand panels), raster 0 heuristic, 1 along M, 2 along N.
    using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
    a.scheduler.max_swizzle_size = swizzle;
    a.scheduler.raster_order = raster == 1 ? Raster::AlongM : raster == 2 ? Raster::AlongN
                                                                           : Raster::Heuristic;
    return a;
  }

  static size_t workspace(int m, int n, int k, int batches) {
    auto a = args(nullptr, k, 0, nullptr, k, 0, nullptr, n, 0, nullptr, m, n, k, batches);
    return Gemm::get_workspace_size(a);
  }

  static int run(const int8_t *A, int64_t lda, int64_t sa, const int8_t *B, int64_t ldb,
                 int64_t sb, uint8_t *D, int64_t ldd, int64_t sd, const int32_t *moduli, int m,
                 int n, int k, int batches, int swizzle, int raster, void *ws,
                 cudaStream_t stream) {
    Gemm gemm;
    auto a = args(A, lda, sa, B, ldb, sb, D, ldd, sd, moduli, m, n, k, batches, swizzle, raster);
    cutlass::Status st = gemm.can_implement(a);
    if (st != cutlass::Status::kSuccess) return 1;
    st = gemm.initialize(a, ws, stream);
    if (st != cutlass::Status::kSuccess) return 2;
    st = gemm.run(stream);
    return st == cutlass::Status::kSuccess ? 0 : 3;
  }
};

using Wide = ModPGemm<Shape<_128, _256, _128>, Shape<_2, _1, _1>>;   // cuBLAS's pick at 16384
using WideN = ModPGemm<Shape<_128, _256, _128>, Shape<_1, _2, _1>>;  // B's panel multicast
using WideK64 = ModPGemm<Shape<_128, _256, _64>, Shape<_2, _1, _1>>; // more, shorter stages

// Workspace bytes of configuration `config` (0: Wide, 1: WideN, 2: WideK64).
extern "C" size_t oz_cutlass_modp_workspace(int config, int m, int n, int k, int batches) {
  switch (config) {
    case 0: return Wide::workspace(m, n, k, batches);
    case 1: return WideN::workspace(m, n, k, batches);
    default: return WideK64::workspace(m, n, k, batches);
  }
}

// D_l = (A_l B_l^T) mod moduli[l], l < batches: A (m x k) and B (n x k) int8 rows of
// lda / ldb bytes, planes sa / sb bytes apart; D uint8 rows of ldd, planes sd apart;
// `moduli` a device int32 array. 0 on success, 1 cannot implement, 2 init, 3 launch.
extern "C" int oz_cutlass_modp(int config, int swizzle, int raster, const int8_t *A,
                               int64_t lda, int64_t sa, const int8_t *B, int64_t ldb,
                               int64_t sb, uint8_t *D, int64_t ldd, int64_t sd,
                               const int32_t *moduli, int m, int n, int k, int batches,
                               void *ws, void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (config) {
    case 0: return Wide::run(A, lda, sa, B, ldb, sb, D, ldd, sd, moduli, m, n, k, batches,
                             swizzle, raster, ws, s);
    case 1: return WideN::run(A, lda, sa, B, ldb, sb, D, ldd, sd, moduli, m, n, k, batches,
                              swizzle, raster, ws, s);
    default: return WideK64::run(A, lda, sa, B, ldb, sb, D, ldd, sd, moduli, m, n, k,
                                 batches, swizzle, raster, ws, s);
  }
}
