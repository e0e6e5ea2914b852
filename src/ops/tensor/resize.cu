/*
 * resize.cu — Resize (and Upsample) on contiguous tensors of up to 8 dims:
 * resize_<T>(kiln_cu_resize, x, y), one thread per output element.  Every
 * dim maps its output index to a source coordinate with resize.c's
 * formulas (double precision, the float32 scale as the ONNX reference),
 * then to 1 (nearest), 2 (linear) or 4 (cubic) taps; the output is the
 * weighted sum over the product of the dims' taps (identity dims take one
 * tap).  tf_crop_and_resize writes the extrapolation value outside.
 * resize_rows_<T>: nearest mode resizing H and W only (the common
 * upsampling of detection necks), by rows with the taps in shared memory.
 */
#include "ops/common/cuda_common.cuh"

__device__ __forceinline__ double kc_rz_source(const kiln_cu_resize &p, int ax, int64_t o) {
    const double s = p.scale[ax], x = (double)o, in = (double)p.in_dims[ax];
    const double out = p.have_sizes ? (double)p.out_dims[ax] : s * in;
    switch (p.coord) {
    case 0: return (x + 0.5) / s - 0.5;
    case 1: return out > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case 2: return out == 1 ? 0.0 : x * (in - 1) / (out - 1);
    case 3: return x / s;
    case 4: return (x + 0.5) / s;
    case 5: {
        float st = p.roi_start[ax], en = p.roi_end[ax];
        double start = (double)(st * (float)(p.in_dims[ax] - 1));
        if (out > 1) return start + x * (double)(en - st) * (in - 1) / (out - 1);
        return start + (double)(en - st) * (in - 1) / 2;
    }
    case 6: {
        double ow = s * in, adj = (double)p.out_dims[ax] / ow;
        double center = in / 2.0, off = center * (1.0 - adj);
        return off + (x + 0.5) / s - 0.5;
    }
    default: return x / s;
    }
}

__device__ __forceinline__ int64_t kc_rz_nearest(int nm, double x, double scale) {
    double f = floor(x);
    switch (nm) {
    case 0: return (int64_t)(x - f == 0.5 ? f : floor(x + 0.5));
    case 1: return (int64_t)(x - f == 0.5 ? f + 1 : floor(x + 0.5));
    case 2: return (int64_t)f;
    case 3: return (int64_t)ceil(x);
    default: return (int64_t)(scale < 1.0 ? ceil(x) : f);
    }
}

__device__ __forceinline__ int64_t kc_clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Taps of dim ax for output index o; returns their count, 0 when outside
 * (tf_crop_and_resize). */
__device__ __forceinline__ int kc_rz_taps(const kiln_cu_resize &p, int ax, int64_t o, int64_t *ii, float *ww) {
    const int64_t in = p.in_dims[ax];
    if (in == p.out_dims[ax] && p.scale[ax] == 1.0 && p.coord != 5) {
        ii[0] = o;
        ww[0] = 1.0f;
        return 1;
    }
    double x = kc_rz_source(p, ax, o);
    if (p.coord == 5 && (x < 0 || x > (double)(in - 1))) return 0;
    if (p.mode == 0) {
        ii[0] = kc_clamp(kc_rz_nearest(p.nearest, x, p.scale[ax]), 0, in - 1);
        ww[0] = 1.0f;
        return 1;
    }
    if (p.mode == 1) {
        if (x < 0) x = 0;
        if (x > (double)(in - 1)) x = (double)(in - 1);
        int64_t x0 = (int64_t)floor(x), x1 = x0 + 1 < in ? x0 + 1 : in - 1;
        double f = x - (double)x0;
        ii[0] = x0;
        ww[0] = (float)(1 - f);
        ii[1] = x1;
        ww[1] = (float)f;
        return 2;
    }
    int64_t x0 = (int64_t)floor(x);
    double t = x - (double)x0, a = p.cubic_a, cw[4], sum = 0, v;
    v = t + 1;
    cw[0] = ((a * v - 5 * a) * v + 8 * a) * v - 4 * a;
    v = t;
    cw[1] = ((a + 2) * v - (a + 3)) * v * v + 1;
    v = 1 - t;
    cw[2] = ((a + 2) * v - (a + 3)) * v * v + 1;
    v = 2 - t;
    cw[3] = ((a * v - 5 * a) * v + 8 * a) * v - 4 * a;
    for (int k = 0; k < 4; k++) {
        int64_t s = x0 - 1 + k;
        if (p.exclude_outside && (s < 0 || s >= in)) cw[k] = 0;
        sum += cw[k];
        ii[k] = kc_clamp(s, 0, in - 1);
    }
    for (int k = 0; k < 4; k++) ww[k] = (float)(p.exclude_outside && sum != 0 ? cw[k] / sum : cw[k]);
    return 4;
}

template <typename T> __device__ __forceinline__ void kc_resize(const kiln_cu_resize &p, const T *x, T *y) {
    int64_t numel = 1;
    for (int d = 0; d < p.ndim; d++) numel *= p.out_dims[d];
    KC_FOR(i, numel, int64_t) {
        int64_t ii[KILN_CU_MAX_DIMS][4], st[KILN_CU_MAX_DIMS];
        float ww[KILN_CU_MAX_DIMS][4];
        int nt[KILN_CU_MAX_DIMS];
        int64_t rem = i, s = 1, combos = 1;
        bool outside = false;
        for (int d = p.ndim - 1; d >= 0; d--) {
            int64_t o = rem % p.out_dims[d];
            rem /= p.out_dims[d];
            st[d] = s;
            s *= p.in_dims[d];
            nt[d] = kc_rz_taps(p, d, o, ii[d], ww[d]);
            if (!nt[d]) outside = true;
            combos *= nt[d] ? nt[d] : 1;
        }
        if (outside) {
            y[i] = kc_stf<T>((float)p.extrapolation);
            continue;
        }
        float acc = 0.0f;
        for (int64_t c = 0; c < combos; c++) {
            int64_t r = c, off = 0;
            float w = 1.0f;
            for (int d = p.ndim - 1; d >= 0; d--) {
                int k = (int)(r % nt[d]);
                r /= nt[d];
                off += ii[d][k] * st[d];
                w *= ww[d][k];
            }
            acc += w * kc_ldf(x[off]);
        }
        y[i] = kc_stf<T>(acc);
    }
}

#define KC_RESIZE(S, T)                                                                       \
    extern "C" __global__ void resize_##S(kiln_cu_resize p, const T *x, T *y) { kc_resize<T>(p, x, y); }
KC_FLOATS(KC_RESIZE)

/* Nearest mode where only the last two dims (H, W) resize: the source
 * row of every output row and the source column of every output column
 * come from kc_rz_taps once per block into shared memory (sy[out_h],
 * sx[out_w]), and each thread of a (blockDim.x columns, blockDim.y rows)
 * block copies one element per step: a gather from one source row to
 * one coalesced output row.  resize_<T> does the same arithmetic per
 * element and per dim (64-bit divisions, double coordinates): PP-OCRv4
 * det's 2x upsampling of [32, 96, 80, 80] FP16 took 2.1 ms there. */
template <typename T> __device__ __forceinline__ void kc_resize_rows(const kiln_cu_resize &p, const T *x, T *y) {
    extern __shared__ int32_t kc_rz_sh[];
    const int h = p.ndim - 2, w = p.ndim - 1;
    const int32_t oh = (int32_t)p.out_dims[h], ow = (int32_t)p.out_dims[w];
    const int64_t ih = p.in_dims[h], iw = p.in_dims[w];
    int32_t *sy = kc_rz_sh, *sx = kc_rz_sh + oh;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    int64_t ii[4];
    float ww[4];
    for (int32_t o = tid; o < oh + ow; o += nt) {
        const int ax = o < oh ? h : w;
        kc_rz_taps(p, ax, o < oh ? o : o - oh, ii, ww);
        kc_rz_sh[o] = (int32_t)ii[0];
    }
    __syncthreads();
    int64_t planes = 1;
    for (int d = 0; d < h; d++) planes *= p.out_dims[d];
    const uint32_t rows = (uint32_t)(planes * oh);
    for (uint32_t r = blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += gridDim.x * blockDim.y) {
        const uint32_t plane = r / (uint32_t)oh, oy = r - plane * (uint32_t)oh;
        const T *src = x + ((int64_t)plane * ih + sy[oy]) * iw;
        T *dst = y + (int64_t)r * ow;
        for (int32_t ox = threadIdx.x; ox < ow; ox += blockDim.x) dst[ox] = src[sx[ox]];
    }
}

#define KC_RESIZE_ROWS(S, T)                                                                  \
    extern "C" __global__ void resize_rows_##S(kiln_cu_resize p, const T *x, T *y) { kc_resize_rows<T>(p, x, y); }
KC_FLOATS(KC_RESIZE_ROWS)
