/*
 * grid_sample.cu — GridSample-16 (2-D, FP32):
 *   grid_sample_f32(geo, C, Ho, Wo, total, x, grid, y): one thread per
 *   output element of y [N, C, Ho, Wo]; the value is gs_sample of
 *   grid_sample_math.h, the very code the CPU op runs.
 */
#include "ops/common/cuda_common.cuh"
#include "ops/tensor/grid_sample_math.h"

extern "C" __global__ void grid_sample_f32(kiln_cu_grid_sample geo, int64_t C, int64_t Ho, int64_t Wo, int64_t total,
                                           const float *x, const float *grid, float *y) {
    KC_FOR(i, total, int64_t) {
        const int64_t o = i % (Ho * Wo), p = i / (Ho * Wo), n = p / C;
        const float *g = grid + (n * Ho * Wo + o) * 2;
        y[i] = gs_sample(&geo, x + p * geo.H * geo.W, g[0], g[1]);
    }
}
