/*
 * conv_dw.cu — depthwise 2-D convolution (one input channel per group:
 * PP-LCNet's and MobileNet's 3x3 / 5x5 convs, stride 1 or 2), Conv tactic 3
 * of conv_cuda.c.
 *
 * One CTA of 256 threads computes a DW_TH x DW_TW tile of one output plane
 * (image n, output channel k): it stages the input window the tile reads
 * (rows (DW_TH - 1) * sh + (kh - 1) * dh + 1, likewise columns; zeros where
 * the padding is) and the plane's weights in shared memory as float, then
 * each thread computes DW_R consecutive outputs of one column from shared
 * memory; bias, a fused residual and the activation epilogue (kc_act) are
 * applied in float before the one rounding store.  conv_direct
 * recomputes every index with 64-bit divisions and reads each input
 * kh * kw times from global memory (L1 permitting); here a plane's inputs
 * are read about once.  Index arithmetic is 32-bit within a plane (the
 * launcher checks that a plane has fewer than 2^31 elements).
 *
 * Kernels conv_dw<K>s<S>_<T> (K = 3 or 5, stride S = 1 or 2, undilated)
 * unroll the window with the weights in registers and read each staged
 * input row once for the DW_R outputs that use it; conv_dw0_<T> takes any
 * kh x kw, stride and dilation whose window fits DW_SMEM (conv_dw_math.h;
 * the launcher checks: dw_fits in conv_cuda.c).
 */
#include "ops/common/cuda_common.cuh"
#include "ops/nn/conv_dw_math.h"

/* The plane and tile of CTA blk: output plane (n * k + oc), its input
 * plane, the tile's first output row and column. */
struct kc_dw_tile {
    int64_t plane, oc, in_plane;
    int oy0, ox0, in_h, in_w;
};

__device__ __forceinline__ kc_dw_tile kc_dw_locate(const kiln_cu_conv &p, int64_t blk) {
    kc_dw_tile t;
    const int tiles_w = (int)((p.ow + DW_TW - 1) / DW_TW), tiles = tiles_w * (int)((p.oh + DW_TH - 1) / DW_TH);
    t.plane = blk / tiles;
    const int tile = (int)(blk - t.plane * tiles);
    t.oc = t.plane % p.k;
    t.in_plane = t.plane / p.k * p.c + t.oc / (p.k / p.c); /* the group's one input channel */
    t.oy0 = tile / tiles_w * DW_TH;
    t.ox0 = tile % tiles_w * DW_TW;
    t.in_h = (DW_TH - 1) * p.sh + (p.kh - 1) * p.dh + 1;
    t.in_w = (DW_TW - 1) * p.sw + (p.kw - 1) * p.dw + 1;
    return t;
}

/* Thread tid's share of staging: the plane's weights into ws, the tile's
 * input window into xs (in_h x in_w floats, zeros outside the image), rows
 * split over the 8 warps, columns over the lanes (coalesced, no division). */
template <typename T>
__device__ __forceinline__ void kc_dw_stage(const kiln_cu_conv &p, const kc_dw_tile &t, const T *__restrict__ x,
                                            const T *__restrict__ w, float *xs, float *ws, int tid) {
    const int kk = p.kh * p.kw, h = (int)p.h, wd = (int)p.w;
    for (int i = tid; i < kk; i += DW_THREADS) ws[i] = kc_ldf(w[t.oc * kk + i]);
    const T *xp = x + t.in_plane * (int64_t)h * wd;
    const int iy0 = t.oy0 * p.sh - p.ph, ix0 = t.ox0 * p.sw - p.pw;
    for (int r = tid / DW_TW; r < t.in_h; r += DW_THREADS / DW_TW) {
        const int iy = iy0 + r;
        const bool row = iy >= 0 && iy < h;
        for (int q = tid % DW_TW; q < t.in_w; q += DW_TW) {
            const int ix = ix0 + q;
            xs[r * t.in_w + q] = row && ix >= 0 && ix < wd ? kc_ldf(xp[iy * wd + ix]) : 0.0f;
        }
    }
}

/* Thread tid's outputs: DW_R consecutive rows (ty * DW_R ...) of column tx.
 * K, S > 0 (undilated K x K window, stride S): each staged input row is
 * read once into registers and added to every output whose window holds
 * it (the branches fold away when unrolled); K = 0: any window, output by
 * output.  Per output the sum runs bias, then rows, then columns, as
 * conv_direct's. */
template <typename T, int K, int S>
__device__ __forceinline__ void kc_dw_compute(const kiln_cu_conv &p, const kc_dw_tile &t, const T *__restrict__ bias,
                                              const T *__restrict__ res, T *__restrict__ y, const float *xs,
                                              const float *ws, int tid) {
    const int tx = tid % DW_TW, ly0 = tid / DW_TW * DW_R, ox = t.ox0 + tx;
    if (ox >= (int)p.ow) return;
    const float b = bias ? kc_ldf(bias[t.oc]) : 0.0f;
    float acc[DW_R];
#pragma unroll
    for (int j = 0; j < DW_R; j++) acc[j] = b;
    if (K > 0) {
        float wr[K > 0 ? K * K : 1];
#pragma unroll
        for (int i = 0; i < K * K; i++) wr[i] = ws[i];
        const float *xc = xs + ly0 * S * t.in_w + tx * S;
#pragma unroll
        for (int r = 0; r < (DW_R - 1) * S + K; r++) {
            float v[K > 0 ? K : 1];
#pragma unroll
            for (int c = 0; c < K; c++) v[c] = xc[r * t.in_w + c];
#pragma unroll
            for (int j = 0; j < DW_R; j++) {
                const int a = r - j * S;
                if (a >= 0 && a < K)
#pragma unroll
                    for (int c = 0; c < K; c++) acc[j] += v[c] * wr[a * K + c];
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < DW_R; j++) {
            const float *xr = xs + (ly0 + j) * p.sh * t.in_w + tx * p.sw;
            for (int a = 0; a < p.kh; a++)
                for (int c = 0; c < p.kw; c++) acc[j] += xr[a * p.dh * t.in_w + c * p.dw] * ws[a * p.kw + c];
        }
    }
    const int64_t ybase = t.plane * p.oh * p.ow;
#pragma unroll
    for (int j = 0; j < DW_R; j++) {
        const int oy = t.oy0 + ly0 + j;
        if (oy >= (int)p.oh) break;
        const int64_t o = ybase + (int64_t)oy * p.ow + ox;
        float v = acc[j];
        if (res) v += kc_ldf(res[o]); /* a fused residual Add, before the activation */
        y[o] = kc_stf<T>(kc_act(p.act, v, p.act_a, p.act_b));
    }
}

template <typename T, int K, int S>
__device__ __forceinline__ void kc_conv_dw(const kiln_cu_conv &p, const T *__restrict__ x, const T *__restrict__ w,
                                           const T *__restrict__ bias, const T *__restrict__ res, T *__restrict__ y) {
    __shared__ float xs[DW_SMEM];
    __shared__ float ws[DW_KMAX];
    const kc_dw_tile t = kc_dw_locate(p, blockIdx.x);
    kc_dw_stage<T>(p, t, x, w, xs, ws, threadIdx.x);
    __syncthreads();
    kc_dw_compute<T, K, S>(p, t, bias, res, y, xs, ws, threadIdx.x);
}

#define KC_DW_KERNEL(NAME, S, T, K, ST)                                                                    \
    extern "C" __global__ void __launch_bounds__(DW_THREADS) NAME##_##S(kiln_cu_conv p, const T *x, const T *w, \
                                                                       const T *bias, const T *res, T *y) { \
        kc_conv_dw<T, K, ST>(p, x, w, bias, res, y);                                                       \
    }
#define KC_CONV_DW(S, T)                                                                                   \
    KC_DW_KERNEL(conv_dw3s1, S, T, 3, 1)                                                                   \
    KC_DW_KERNEL(conv_dw3s2, S, T, 3, 2)                                                                   \
    KC_DW_KERNEL(conv_dw5s1, S, T, 5, 1)                                                                   \
    KC_DW_KERNEL(conv_dw5s2, S, T, 5, 2)                                                                   \
    KC_DW_KERNEL(conv_dw0, S, T, 0, 0)
KC_FLOATS(KC_CONV_DW)
