/*
 * rnn.cu — LSTM, GRU and RNN in FP32 (rnn.c semantics): one block per
 * (batch, direction) walks the time steps; its threads own hidden units k
 * (strided by blockDim) and compute their gates as dot products of x_t with
 * W's rows and of h with R's rows; h and c live in shared memory (6 H
 * floats, dynamic).  Gate order and bias folding as rnn.c: LSTM i o f c
 * (peepholes i o f), GRU z r h (linear_before_reset keeps Rb of the h gate
 * inside r * (...)).  sequence_lens SL (int32 per batch, NULL: all S):
 * a block walks its batch's first len steps (reverse: len-1 down to 0),
 * Y is zero past them and Y_h / Y_c hold the state after the last one.
 *   rnn_f32(p, X, W, R, B, SL, H0, C0, P, Y, Yh, Yc)  (absent tensors NULL)
 */
#include "ops/common/cuda_common.cuh"

__device__ __forceinline__ float kc_rnn_act(int kind, float a, float b, float x) {
    switch (kind) {
    case 0: return 1.0f / (1.0f + expf(-x));
    case 1: return tanhf(x);
    case 2: return x < 0 ? 0.0f : x;
    case 3: return a * x + b;
    case 4: return x >= 0 ? x : a * x;
    case 5: return x > a ? x : 0.0f;
    case 6: return a * tanhf(b * x);
    case 7: {
        float v = a * x + b;
        return v < 0 ? 0.0f : v > 1 ? 1.0f : v;
    }
    case 8: return x >= 0 ? x : a * (expf(x) - 1);
    case 9: return x / (1 + fabsf(x));
    case 10: return x > 20 ? x : log1pf(expf(x));
    default: return x;
    }
}

/* dot(a[0..n), b[0..n)) */
__device__ __forceinline__ float kc_dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

extern "C" __global__ void rnn_f32(kiln_cu_rnn p, const float *X, const float *W, const float *R, const float *Bias,
                                   const int32_t *SL, const float *H0, const float *C0, const float *P, float *Y,
                                   float *Yh, float *Yc) {
    extern __shared__ float sm[];
    const int64_t S = p.S, Bn = p.B, I = p.I, H = p.H, G = p.cell == 2 ? 4 : p.cell == 1 ? 3 : 1, GH = G * H;
    const int64_t b = blockIdx.x % Bn, dir = blockIdx.x / Bn;
    const int reverse = p.rev_only || dir == 1;
    float *h = sm, *c = sm + H, *hn = sm + 2 * H, *cn = sm + 3 * H, *rh = sm + 4 * H, *zs = sm + 5 * H;
    const float *w = W + dir * GH * I, *rr = R + dir * GH * H;
    const float *wb = Bias ? Bias + dir * 2 * GH : NULL, *rb = wb ? wb + GH : NULL;
    const float *pp = P ? P + dir * 3 * H : NULL;
    const int *ak = p.act + dir * p.nacts;
    const float *al = p.alpha + dir * p.nacts, *be = p.beta + dir * p.nacts;
    const float clip = p.clip;
#define KC_CLIP(v) (clip > 0 ? fminf(fmaxf((v), -clip), clip) : (v))
#define KC_ACT(j, v) kc_rnn_act(ak[j], al[j], be[j], KC_CLIP(v))
    for (int64_t k = threadIdx.x; k < H; k += blockDim.x) {
        h[k] = H0 ? H0[(dir * Bn + b) * H + k] : 0.0f;
        c[k] = C0 ? C0[(dir * Bn + b) * H + k] : 0.0f;
    }
    __syncthreads();
    const int64_t len = SL ? (SL[b] < S ? (SL[b] < 0 ? 0 : (int64_t)SL[b]) : S) : S; /* one value per block */
    for (int64_t step = 0; step < len; step++) {
        const int64_t t = reverse ? len - 1 - step : step;
        const float *x = X + (p.layout ? b * S + t : t * Bn + b) * I;
        for (int64_t k = threadIdx.x; k < H; k += blockDim.x) {
            /* gate g of unit k: x W_g^T + bias (Rb folded in except GRU lbr's h gate) */
#define KC_XW(g) (kc_dot(x, w + ((g) * H + k) * I, I) + (wb ? wb[(g) * H + k] : 0.0f) +                        \
                  (rb && !(p.cell == 1 && p.lbr && (g) == 2) ? rb[(g) * H + k] : 0.0f))
#define KC_HR(g) kc_dot(h, rr + ((g) * H + k) * H, H)
            if (p.cell == 0) {
                hn[k] = KC_ACT(0, KC_XW(0) + KC_HR(0));
            } else if (p.cell == 2) {
                float cp = c[k];
                float ig = KC_XW(0) + KC_HR(0), og = KC_XW(1) + KC_HR(1);
                float fg = KC_XW(2) + KC_HR(2), cg = KC_XW(3) + KC_HR(3);
                if (pp) {
                    ig += pp[k] * cp;
                    fg += pp[2 * H + k] * cp;
                }
                float iv = KC_ACT(0, ig);
                float fv = p.input_forget ? 1 - iv : KC_ACT(0, fg);
                float gv = KC_ACT(1, cg);
                float cv = fv * cp + iv * gv;
                if (pp) og += pp[H + k] * cv;
                float ov = KC_ACT(0, og);
                cn[k] = cv;
                hn[k] = ov * kc_rnn_act(ak[2], al[2], be[2], cv); /* the cell state is not clipped */
            } else {
                float z = KC_ACT(0, KC_XW(0) + KC_HR(0));
                float r = KC_ACT(0, KC_XW(1) + KC_HR(1));
                if (p.lbr) {
                    float n = KC_ACT(1, KC_XW(2) + r * (KC_HR(2) + (rb ? rb[2 * H + k] : 0.0f)));
                    hn[k] = (1 - z) * n + z * h[k];
                } else {
                    rh[k] = r * h[k];
                    zs[k] = z;
                    cn[k] = KC_XW(2); /* x W_h^T + biases, for the second phase */
                }
            }
        }
        if (p.cell == 1 && !p.lbr) { /* n = g(x W_h + (r .* h) R_h^T + biases) needs every r first */
            __syncthreads();
            for (int64_t k = threadIdx.x; k < H; k += blockDim.x) {
                float n = KC_ACT(1, cn[k] + kc_dot(rh, rr + (2 * H + k) * H, H));
                hn[k] = (1 - zs[k]) * n + zs[k] * h[k];
            }
        }
#undef KC_XW
#undef KC_HR
        __syncthreads();
        for (int64_t k = threadIdx.x; k < H; k += blockDim.x) {
            h[k] = hn[k];
            if (p.cell == 2) c[k] = cn[k];
            if (Y) Y[(p.layout ? (b * S + t) * p.ndir + dir : (t * p.ndir + dir) * Bn + b) * H + k] = hn[k];
        }
        __syncthreads();
    }
    for (int64_t t = len; t < S && Y; t++) /* padding steps: zeros, as the CPU op */
        for (int64_t k = threadIdx.x; k < H; k += blockDim.x)
            Y[(p.layout ? (b * S + t) * p.ndir + dir : (t * p.ndir + dir) * Bn + b) * H + k] = 0.0f;
    for (int64_t k = threadIdx.x; k < H; k += blockDim.x) {
        int64_t o = (p.layout ? b * p.ndir + dir : dir * Bn + b) * H + k;
        if (Yh) Yh[o] = h[k];
        if (Yc) Yc[o] = c[k];
    }
#undef KC_ACT
#undef KC_CLIP
}
