/*
 * conv.cu — Conv and ConvTranspose kernels (2-D; 1-D convs come as h = 1).
 *
 * Tactics of the Conv launcher (conv_cuda.c):
 *   - conv_direct_<T>: one thread per output element, the full window in
 *     registers; every geometry (grouped, depthwise, dilated, padded,
 *     strided).  The depthwise tactic (c / group == 1) is this kernel: its
 *     window is kh * kw taps, memory bound, and a GEMM would only add an
 *     im2col pass.
 *   - im2col_<T> + kiln__cuda_gemm (cuBLASLt) + bias_act_<T>: the GEMM
 *     tactic for the dense convs; 1x1 stride-1 unpadded convs skip im2col.
 *     im2col writes several images at once, so one strided batched GEMM
 *     (the weights shared: stride 0) covers them.
 * Bias, a fused residual (conv_direct; the GEMM tactic adds it as
 * cuBLASLt's C operand) and the activation epilogue (kiln_cu_act) are
 * applied in float before the single rounding store.
 *
 * conv_transpose_<T>: gather form (each output sums the inputs that hit
 * it), so no atomics and a deterministic order; conv_transpose1_<T> where
 * the kernel equals the stride (one tap per output), conv_transpose1c_<T>
 * the same with a group's input channels (at most 32) loaded once per
 * output position for all its output channels.
 */
#include "ops/common/cuda_common.cuh"

/* weights [k, c/group, kh, kw] */
template <typename T>
__device__ __forceinline__ void kc_conv_direct(const kiln_cu_conv &p, const T *x, const T *w, const T *bias,
                                               const T *res, T *y) {
    const int64_t cpg = p.c / p.group, kpg = p.k / p.group, osp = p.oh * p.ow;
    KC_FOR(i, p.n * p.k * osp, int64_t) {
        int64_t ox = i % p.ow, oy = (i / p.ow) % p.oh, k = (i / osp) % p.k, n = i / (osp * p.k);
        int64_t g = k / kpg;
        const T *xg = x + (n * p.c + g * cpg) * p.h * p.w;
        const T *wk = w + k * cpg * p.kh * p.kw;
        int64_t ys = oy * p.sh - p.ph, xs = ox * p.sw - p.pw;
        float acc = bias ? kc_ldf(bias[k]) : 0.0f;
        for (int64_t ci = 0; ci < cpg; ci++) {
            const T *xc = xg + ci * p.h * p.w;
            const T *wc = wk + ci * p.kh * p.kw;
            for (int a = 0; a < p.kh; a++) {
                int64_t iy = ys + (int64_t)a * p.dh;
                if (iy < 0 || iy >= p.h) continue;
                for (int b = 0; b < p.kw; b++) {
                    int64_t ix = xs + (int64_t)b * p.dw;
                    if (ix < 0 || ix >= p.w) continue;
                    acc += kc_ldf(xc[iy * p.w + ix]) * kc_ldf(wc[a * p.kw + b]);
                }
            }
        }
        if (res) acc += kc_ldf(res[i]); /* a fused residual Add, before the activation */
        y[i] = kc_stf<T>(kc_act(p.act, acc, p.act_a, p.act_b));
    }
}

/* col[c * kh * kw, oh * ow] of each of nimg images (image j's matrix at
 * col + j * col_stride; rows ordered c, a, b: group g's rows are the
 * contiguous block g * cpg * kh * kw ...). */
template <typename T>
__device__ __forceinline__ void kc_im2col(const kiln_cu_conv &p, int64_t nimg, int64_t col_stride, const T *x,
                                          T *col) {
    const int64_t osp = p.oh * p.ow, kk = (int64_t)p.kh * p.kw, per = p.c * kk * osp;
    KC_FOR(i, nimg * per, int64_t) {
        int64_t j = i / per, e = i - j * per;
        int64_t o = e % osp, r = e / osp;
        int64_t ox = o % p.ow, oy = o / p.ow;
        int64_t b = r % p.kw, a = (r / p.kw) % p.kh, c = r / kk;
        int64_t iy = oy * p.sh - p.ph + a * p.dh, ix = ox * p.sw - p.pw + b * p.dw;
        col[j * col_stride + e] = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w
                                      ? x[((j * p.c + c) * p.h + iy) * p.w + ix]
                                      : kc_stf<T>(0.0f);
    }
}

/* y[i] = act(y[i] + bias[(i / S) % C]) in place (bias may be NULL). */
template <typename T>
__device__ __forceinline__ void kc_bias_act(int64_t n, int64_t C, int64_t S, T *y, const T *bias, int act,
                                            float a, float b) {
    KC_FOR(i, n, int64_t) {
        float v = kc_ldf(y[i]);
        if (bias) v += kc_ldf(bias[(i / S) % C]);
        y[i] = kc_stf<T>(kc_act(act, v, a, b));
    }
}

/* ConvTranspose: x [n, c, h, w], weights [c, k / group, kh, kw], y [n, k,
 * oh, ow]; output (oy, ox) receives x(iy, ix) when oy = iy * sh - ph + a * dh. */
template <typename T>
__device__ __forceinline__ void kc_conv_transpose(const kiln_cu_conv &p, const T *x, const T *w, const T *bias,
                                                  T *y) {
    const int64_t cpg = p.c / p.group, kpg = p.k / p.group, osp = p.oh * p.ow;
    KC_FOR(i, p.n * p.k * osp, int64_t) {
        int64_t ox = i % p.ow, oy = (i / p.ow) % p.oh, k = (i / osp) % p.k, n = i / (osp * p.k);
        int64_t g = k / kpg, kk = k - g * kpg;
        float acc = bias ? kc_ldf(bias[k]) : 0.0f;
        for (int a = 0; a < p.kh; a++) {
            int64_t ty = oy + p.ph - (int64_t)a * p.dh;
            if (ty < 0 || ty % p.sh) continue;
            int64_t iy = ty / p.sh;
            if (iy >= p.h) continue;
            for (int b = 0; b < p.kw; b++) {
                int64_t tx = ox + p.pw - (int64_t)b * p.dw;
                if (tx < 0 || tx % p.sw) continue;
                int64_t ix = tx / p.sw;
                if (ix >= p.w) continue;
                for (int64_t ci = 0; ci < cpg; ci++) {
                    int64_t c = g * cpg + ci;
                    acc += kc_ldf(x[((n * p.c + c) * p.h + iy) * p.w + ix]) *
                           kc_ldf(w[((c * kpg + kk) * p.kh + a) * p.kw + b]);
                }
            }
        }
        y[i] = kc_stf<T>(kc_act(p.act, acc, p.act_a, p.act_b));
    }
}

/* ConvTranspose whose kernel equals its stride (kh == sh, kw == sw,
 * undilated: PP-OCR's 2x2 stride-2 upsampling), 32-bit indices (the
 * launcher checks): each output reads one tap, a = (oy + ph) % sh, so the
 * tap loops and their 64-bit divisions go; the sum over the group's input
 * channels is the gather kernel's, in the same order. */
template <typename T>
__device__ __forceinline__ void kc_conv_transpose1(const kiln_cu_conv &p, const T *x, const T *w, const T *bias,
                                                   T *y) {
    const uint32_t C = (uint32_t)p.c, K = (uint32_t)p.k, cpg = C / p.group, kpg = K / p.group;
    const uint32_t h = (uint32_t)p.h, wd = (uint32_t)p.w, oh = (uint32_t)p.oh, ow = (uint32_t)p.ow;
    const uint32_t kk = (uint32_t)(p.kh * p.kw), hw = h * wd, wstep = kpg * kk;
    KC_FOR(i, (uint32_t)(p.n * p.k * p.oh * p.ow), uint32_t) {
        uint32_t ox = i % ow, t = i / ow, oy = t % oh;
        t /= oh;
        const uint32_t k = t % K, n = t / K, g = k / kpg, kg = k - g * kpg;
        const uint32_t ty = oy + (uint32_t)p.ph, tx = ox + (uint32_t)p.pw;
        const uint32_t iy = ty / (uint32_t)p.sh, ix = tx / (uint32_t)p.sw;
        float acc = bias ? kc_ldf(bias[k]) : 0.0f;
        if (iy < h && ix < wd) {
            const uint32_t a = ty - iy * (uint32_t)p.sh, b = tx - ix * (uint32_t)p.sw;
            const T *xp = x + ((n * C + g * cpg) * h + iy) * wd + ix;
            const T *wp = w + (g * cpg * kpg + kg) * kk + a * (uint32_t)p.kw + b;
            for (uint32_t ci = 0; ci < cpg; ci++) acc += kc_ldf(xp[ci * hw]) * kc_ldf(wp[ci * wstep]);
        }
        y[i] = kc_stf<T>(kc_act(p.act, acc, p.act_a, p.act_b));
    }
}

/* The one-tap case with a group's input channels in registers (cpg <=
 * KC_CT_CMAX): a thread per output position loads x[n, the group's
 * channels, iy, ix] once and writes every output channel of the group
 * there (conv_transpose1_<T> loads them again for each of the kpg output
 * channels: PP-OCRv4 det's 2x2/2 ConvTranspose of [32, 24, 160, 160] FP16
 * took 1.7 ms on an H100).  The same sums in the same order. */
#define KC_CT_CMAX 32
template <typename T>
__device__ __forceinline__ void kc_conv_transpose1c(const kiln_cu_conv &p, const T *x, const T *w, const T *bias,
                                                    T *y) {
    const uint32_t C = (uint32_t)p.c, K = (uint32_t)p.k, G = (uint32_t)p.group, cpg = C / G, kpg = K / G;
    const uint32_t h = (uint32_t)p.h, wd = (uint32_t)p.w, oh = (uint32_t)p.oh, ow = (uint32_t)p.ow;
    const uint32_t kk = (uint32_t)(p.kh * p.kw), hw = h * wd, wstep = kpg * kk, ohw = oh * ow;
    KC_FOR(i, (uint32_t)(p.n * p.oh * p.ow), uint32_t) {
        const uint32_t ox = i % ow, t = i / ow, oy = t % oh, n = t / oh;
        const uint32_t ty = oy + (uint32_t)p.ph, tx = ox + (uint32_t)p.pw;
        const uint32_t iy = ty / (uint32_t)p.sh, ix = tx / (uint32_t)p.sw;
        const bool inside = iy < h && ix < wd;
        const uint32_t a = inside ? ty - iy * (uint32_t)p.sh : 0, b = inside ? tx - ix * (uint32_t)p.sw : 0;
        T *yp = y + (size_t)n * K * ohw + oy * ow + ox;
        for (uint32_t g = 0; g < G; g++) {
            float xv[KC_CT_CMAX];
            if (inside) {
                const T *xp = x + ((n * C + g * cpg) * h + iy) * wd + ix;
#pragma unroll
                for (uint32_t ci = 0; ci < KC_CT_CMAX; ci++)
                    if (ci < cpg) xv[ci] = kc_ldf(xp[ci * hw]);
            }
            for (uint32_t kg = 0; kg < kpg; kg++) {
                const uint32_t k = g * kpg + kg;
                float acc = bias ? kc_ldf(bias[k]) : 0.0f;
                if (inside) {
                    const T *wp = w + (g * cpg * kpg + kg) * kk + a * (uint32_t)p.kw + b;
#pragma unroll
                    for (uint32_t ci = 0; ci < KC_CT_CMAX; ci++)
                        if (ci < cpg) acc += xv[ci] * kc_ldf(wp[ci * wstep]);
                }
                yp[(size_t)k * ohw] = kc_stf<T>(kc_act(p.act, acc, p.act_a, p.act_b));
            }
        }
    }
}

#define KC_CONV(S, T)                                                                         \
    extern "C" __global__ void conv_direct_##S(kiln_cu_conv p, const T *x, const T *w, const T *bias, const T *res, \
                                               T *y) {                                         \
        kc_conv_direct<T>(p, x, w, bias, res, y);                                              \
    }                                                                                          \
    extern "C" __global__ void im2col_##S(kiln_cu_conv p, int64_t nimg, int64_t col_stride, const T *x, T *col) { \
        kc_im2col<T>(p, nimg, col_stride, x, col);                                             \
    }                                                                                          \
    extern "C" __global__ void bias_act_##S(int64_t n, int64_t C, int64_t Sp, T *y, const T *bias, int act, \
                                            float a, float b) {                               \
        kc_bias_act<T>(n, C, Sp, y, bias, act, a, b);                                          \
    }                                                                                          \
    extern "C" __global__ void conv_transpose_##S(kiln_cu_conv p, const T *x, const T *w, const T *bias, T *y) { \
        kc_conv_transpose<T>(p, x, w, bias, y);                                                \
    }                                                                                          \
    extern "C" __global__ void conv_transpose1_##S(kiln_cu_conv p, const T *x, const T *w, const T *bias, T *y) { \
        kc_conv_transpose1<T>(p, x, w, bias, y);                                               \
    }                                                                                          \
    extern "C" __global__ void conv_transpose1c_##S(kiln_cu_conv p, const T *x, const T *w, const T *bias, T *y) { \
        kc_conv_transpose1c<T>(p, x, w, bias, y);                                              \
    }
KC_FLOATS(KC_CONV)
