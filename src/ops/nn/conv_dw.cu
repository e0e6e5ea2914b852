/*
 * conv_dw.cu — depthwise 2-D convolution (one input channel per group:
 * PP-LCNet's and MobileNet's 3x3 / 5x5 convs, stride 1 or 2), Conv tactic 3
 * of conv_cuda.c.
 *
 * One CTA of 256 threads computes a DW_TH x DW_TW tile of one output plane
 * (image n, output channel k): it stages the input window the tile reads
 * (rows (DW_TH - 1) * sh + (kh - 1) * dh + 1, likewise columns; zeros where
 * the padding is) and the plane's weights in shared memory as float, then
 * each thread computes DW_R outputs of one column, DW_TH / DW_R rows apart,
 * from shared memory; bias, a fused residual and the activation epilogue
 * (kc_act) are applied in float before the one rounding store.  conv_direct
 * recomputes every index with 64-bit divisions and reads each input
 * kh * kw times from global memory (L1 permitting); here a plane's inputs
 * are read about once.  Index arithmetic is 32-bit within a plane (the
 * launcher checks that a plane has fewer than 2^31 elements).
 *
 * Kernels conv_dw<K>_<T>: K = 3 or 5 unrolls a K x K undilated window
 * with the weights in registers; K = 0 takes any kh x kw (dilated too)
 * whose window fits DW_SMEM (conv_dw_math.h; the launcher checks: dw_fits in
 * conv_cuda.c).
 */
#include "ops/common/cuda_common.cuh"
#include "ops/nn/conv_dw_math.h"

template <typename T, int K>
__device__ __forceinline__ void kc_conv_dw(const kiln_cu_conv &p, const T *__restrict__ x, const T *__restrict__ w,
                                           const T *__restrict__ bias, const T *__restrict__ res, T *__restrict__ y) {
    __shared__ float xs[DW_SMEM];
    __shared__ float ws[DW_KMAX];
    const int kh = K ? K : p.kh, kw = K ? K : p.kw, dh = K ? 1 : p.dh, dw = K ? 1 : p.dw;
    const int oh = (int)p.oh, ow = (int)p.ow, h = (int)p.h, wd = (int)p.w;
    const int tiles_w = (ow + DW_TW - 1) / DW_TW, tiles = tiles_w * ((oh + DW_TH - 1) / DW_TH);
    const int64_t plane = blockIdx.x / tiles; /* n * k + output channel */
    const int tile = (int)(blockIdx.x - plane * tiles);
    const int64_t oc = plane % p.k, n = plane / p.k;
    const int64_t ic = oc / (p.k / p.c); /* the group's one input channel */
    const int oy0 = tile / tiles_w * DW_TH, ox0 = tile % tiles_w * DW_TW;
    const int iy0 = oy0 * p.sh - p.ph, ix0 = ox0 * p.sw - p.pw;
    const int in_w = (DW_TW - 1) * p.sw + (kw - 1) * dw + 1, in_h = (DW_TH - 1) * p.sh + (kh - 1) * dh + 1;
    const T *xp = x + (n * p.c + ic) * (int64_t)h * wd;
    for (int i = threadIdx.x; i < kh * kw; i += blockDim.x) ws[i] = kc_ldf(w[oc * kh * kw + i]);
    for (int i = threadIdx.x; i < in_h * in_w; i += blockDim.x) {
        int r = i / in_w, q = i - r * in_w, iy = iy0 + r, ix = ix0 + q;
        xs[i] = iy >= 0 && iy < h && ix >= 0 && ix < wd ? kc_ldf(xp[iy * wd + ix]) : 0.0f;
    }
    __syncthreads();
    const int tx = threadIdx.x % DW_TW, ty = threadIdx.x / DW_TW, ox = ox0 + tx;
    if (ox >= ow) return;
    const float b = bias ? kc_ldf(bias[oc]) : 0.0f;
    float wr[K ? K * K : 1];
#pragma unroll
    for (int i = 0; i < (K ? K * K : 0); i++) wr[i] = ws[i];
    const int64_t ybase = plane * (int64_t)oh * ow;
#pragma unroll
    for (int r = 0; r < DW_R; r++) {
        const int ly = ty + r * (DW_TH / DW_R), oy = oy0 + ly;
        if (oy >= oh) break;
        const float *xr = xs + ly * p.sh * in_w + tx * p.sw;
        float acc = b;
        if (K) {
#pragma unroll
            for (int a = 0; a < K; a++)
#pragma unroll
                for (int c = 0; c < K; c++) acc += xr[a * in_w + c] * wr[a * K + c];
        } else {
            for (int a = 0; a < kh; a++)
                for (int c = 0; c < kw; c++) acc += xr[a * dh * in_w + c * dw] * ws[a * kw + c];
        }
        const int64_t o = ybase + (int64_t)oy * ow + ox;
        if (res) acc += kc_ldf(res[o]); /* a fused residual Add, before the activation */
        y[o] = kc_stf<T>(kc_act(p.act, acc, p.act_a, p.act_b));
    }
}

#define KC_CONV_DW(S, T)                                                                                    \
    extern "C" __global__ void __launch_bounds__(DW_THREADS) conv_dw3_##S(kiln_cu_conv p, const T *x, const T *w,  \
                                                                   const T *bias, const T *res, T *y) {    \
        kc_conv_dw<T, 3>(p, x, w, bias, res, y);                                                            \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(DW_THREADS) conv_dw5_##S(kiln_cu_conv p, const T *x, const T *w,  \
                                                                   const T *bias, const T *res, T *y) {    \
        kc_conv_dw<T, 5>(p, x, w, bias, res, y);                                                            \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(DW_THREADS) conv_dw0_##S(kiln_cu_conv p, const T *x, const T *w,  \
                                                                   const T *bias, const T *res, T *y) {    \
        kc_conv_dw<T, 0>(p, x, w, bias, res, y);                                                            \
    }
KC_FLOATS(KC_CONV_DW)
