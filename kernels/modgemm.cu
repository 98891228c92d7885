// Stage 3 helpers around the cuBLAS INT8 GEMMs (docs/spec.md §5), mirrored by
// ozaki_backend/cuda/modgemm.py. The products themselves come from cuBLAS.
#include "common.cuh"

// Grid-stride loop over a rows x cols block of int32 products (leading dimension ldc):
// f(r, c, idx, v) with v = C[r][c] mod p in [0, p) and idx = r * cols + c.
template <class F>
__device__ __forceinline__ void oz_each_mod(const int *__restrict__ C, i64 ldc, int rows,
                                            int cols, int p, F &&f) {
    i64 total = (i64)rows * cols;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        int r = (int)(idx / cols), c = (int)(idx - (i64)r * cols);
        int v = C[(i64)r * ldc + c] % p;
        f(r, c, idx, v < 0 ? v + p : v);
    }
}

// Between k chunks: C_l <- C_l mod p_l in [0, p_l), so that the next chunk's GEMM
// (beta = 1) adds at most 65536 * 2^14 = 2^30 and nothing overflows int32.
// grid.y = modulus index; C plane l is rows x ldc int32 at C + l * plane.
extern "C" __global__ void oz_fold_products(int *__restrict__ C, i64 plane, int rows, int cols,
                                            i64 ldc) {
    int l = blockIdx.y;
    int *Cl = C + (i64)l * plane;
    oz_each_mod(Cl, ldc, rows, cols, (int)oz_modulus(l),
                [&](int r, int c, i64, int v) { Cl[(i64)r * ldc + c] = v; });
}

// Stage output for tests: c_l = C_l mod p_l in [0, p_l) as int16 (N, rows, cols), the
// CPU reference's modular_products layout.
extern "C" __global__ void oz_reduce_products(const int *__restrict__ C, i64 plane, int rows,
                                              int cols, i64 ldc, short *__restrict__ out) {
    int l = blockIdx.y;
    short *ol = out + (i64)l * rows * cols;
    oz_each_mod(C + (i64)l * plane, ldc, rows, cols, (int)oz_modulus(l),
                [&](int, int, i64 idx, int v) { ol[idx] = (short)v; });
}

// The cuBLAS backend of ozaki_backend/cuda/modprod.py, for any modulus p <= 256:
// C <- C mod p in [0, p) in place (between k chunks), and the final bytes.
extern "C" __global__ void oz_fold_mod(int *__restrict__ C, i64 ldc, int rows, int cols, u32 p) {
    oz_each_mod(C, ldc, rows, cols, (int)p,
                [&](int r, int c, i64, int v) { C[(i64)r * ldc + c] = v; });
}

extern "C" __global__ void oz_reduce_u8(const int *__restrict__ C, i64 ldc, int rows, int cols,
                                        u32 p, unsigned char *__restrict__ out, i64 ldo) {
    oz_each_mod(C, ldc, rows, cols, (int)p,
                [&](int r, int c, i64, int v) { out[(i64)r * ldo + c] = (unsigned char)v; });
}
