/*
 * grid_sample_math.h — GridSample's sampling arithmetic, one source for
 * both devices: grid_sample.c (CPU) and grid_sample.cu (the GPU kernel)
 * include it, so the two cannot drift apart (unnormalization, padding by
 * reflection, round-half-even nearest, bicubic with A = -0.75, all in
 * double as torch.nn.functional.grid_sample's reference).  Plain C; under
 * nvcc the functions are __host__ __device__.  The geometry is a
 * kiln_cu_grid_sample (device/cuda/cuda_kernel_args.h).
 */
#ifndef KILN_GRID_SAMPLE_MATH_H
#define KILN_GRID_SAMPLE_MATH_H

#include "device/cuda/cuda_kernel_args.h"

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define GS_FN static __host__ __device__ __forceinline__
#else
#define GS_FN static inline
#endif

enum { GS_BILINEAR, GS_NEAREST, GS_BICUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

GS_FN double gs_unnorm(double g, int64_t size, int align) {
    return align ? (g + 1) / 2 * (double)(size - 1) : ((g + 1) * (double)size - 1) / 2;
}

GS_FN double gs_reflect(double v, double twice_lo, double twice_hi) {
    if (twice_lo == twice_hi) return 0;
    double mn = twice_lo / 2, span = (twice_hi - twice_lo) / 2;
    v = fabs(v - mn);
    double extra = fmod(v, span);
    double flips = floor(v / span);
    return fmod(flips, 2.0) == 0 ? extra + mn : span - extra + mn;
}

GS_FN double gs_clip(double v, int64_t size) {
    return v < 0 ? 0 : v > (double)(size - 1) ? (double)(size - 1) : v;
}

/* Padding applied to a coordinate (border / reflection). */
GS_FN double gs_coord(const kiln_cu_grid_sample *j, double v, int64_t size) {
    if (j->pad == GS_BORDER) return gs_clip(v, size);
    if (j->pad == GS_REFLECTION) {
        v = j->align ? gs_reflect(v, 0, 2.0 * (double)(size - 1)) : gs_reflect(v, -1, 2.0 * (double)size - 1);
        return gs_clip(v, size);
    }
    return v;
}

/* Float coordinate -> index without undefined conversions (NaN and huge
 * values land outside the image). */
GS_FN int64_t gs_idx(double v) {
    if (!(v > -1e15 && v < 1e15)) return -1000000000000000LL;
    return (int64_t)v;
}

GS_FN float gs_at(const kiln_cu_grid_sample *j, const float *plane, int64_t yy, int64_t xx) {
    return yy >= 0 && yy < j->H && xx >= 0 && xx < j->W ? plane[yy * j->W + xx] : 0.0f;
}

GS_FN double gs_cubic1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
GS_FN double gs_cubic2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }
GS_FN void gs_coeffs(double t, double *w) {
    const double A = -0.75;
    w[0] = gs_cubic2(t + 1, A);
    w[1] = gs_cubic1(t, A);
    w[2] = gs_cubic1(1 - t, A);
    w[3] = gs_cubic2(2 - t, A);
}

/* The value of one [H, W] plane at normalized grid point (gx, gy). */
GS_FN float gs_sample(const kiln_cu_grid_sample *j, const float *plane, double gx, double gy) {
    double ix = gs_unnorm(gx, j->W, j->align), iy = gs_unnorm(gy, j->H, j->align);
    if (j->mode == GS_BICUBIC) {
        double fx = floor(ix), fy = floor(iy), wx[4], wy[4];
        gs_coeffs(ix - fx, wx);
        gs_coeffs(iy - fy, wy);
        double acc = 0;
        for (int r = 0; r < 4; r++) {
            double row = 0;
            for (int k = 0; k < 4; k++) {
                double tx = gs_coord(j, fx - 1 + k, j->W), ty = gs_coord(j, fy - 1 + r, j->H);
                row += wx[k] * gs_at(j, plane, gs_idx(ty), gs_idx(tx));
            }
            acc += wy[r] * row;
        }
        return (float)acc;
    }
    ix = gs_coord(j, ix, j->W);
    iy = gs_coord(j, iy, j->H);
    if (j->mode == GS_NEAREST)
        return gs_at(j, plane, gs_idx(nearbyint(iy)), gs_idx(nearbyint(ix)));
    double x0 = floor(ix), y0 = floor(iy), tx = ix - x0, ty = iy - y0;
    int64_t X0 = gs_idx(x0), Y0 = gs_idx(y0);
    return (float)((1 - ty) * ((1 - tx) * gs_at(j, plane, Y0, X0) + tx * gs_at(j, plane, Y0, X0 + 1)) +
                   ty * ((1 - tx) * gs_at(j, plane, Y0 + 1, X0) + tx * gs_at(j, plane, Y0 + 1, X0 + 1)));
}

#endif /* KILN_GRID_SAMPLE_MATH_H */
