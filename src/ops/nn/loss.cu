/*
 * loss.cu — NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (loss.c
 * semantics), for every float type, accumulating in double like the CPU op:
 *
 *   sce_logp_<T>(N, C, D, x, logp, logp_out): per (n, d) the log-softmax
 *     over the C classes (stride D) into logp (double workspace) and, if
 *     logp_out is not NULL, into the op's second output;
 *   nll_<T>_<i32|i64>(ck, red, N, C, D, has_ii, ii, src, src_f64, target,
 *     weight, y): loss[n, d] = -src[n, t, d] * weight[t] (0 where t ==
 *     ignore_index); red 0 writes [N, D], red 1 (sum) / 2 (mean over the
 *     weights used) runs as ONE block reducing everything.  src is the
 *     input (T) or, src_f64 = 1, the double log-probabilities.  A target
 *     outside [0, C) is reported in the fault record ck (the run fails
 *     naming the layer) and counts as ignored.
 */
#include "ops/common/cuda_common.cuh"

template <typename T> __device__ __forceinline__ double kc_ldd(T v) { return (double)kc_t<T>::ld(v); }

template <typename T>
__device__ __forceinline__ void kc_sce_logp(int64_t N, int64_t C, int64_t D, const T *x, double *logp, T *out) {
    KC_FOR(i, N * D, int64_t) {
        int64_t n = i / D, d = i % D;
        const T *p = x + n * C * D + d;
        double mx = -INFINITY, s = 0;
        for (int64_t k = 0; k < C; k++) mx = fmax(mx, kc_ldd(p[k * D]));
        for (int64_t k = 0; k < C; k++) s += exp(kc_ldd(p[k * D]) - mx);
        double ls = log(s);
        for (int64_t k = 0; k < C; k++) {
            int64_t j = (n * C + k) * D + d;
            double v = kc_ldd(x[j]) - mx - ls;
            logp[j] = v;
            if (out) out[j] = kc_t<T>::st((typename kc_t<T>::C)v);
        }
    }
}

template <typename T, typename I>
__device__ __forceinline__ void kc_nll(const kiln_cu_check &ck, int red, int64_t N, int64_t C, int64_t D, int has_ii,
                                       int64_t ii, const void *src, int src_f64, const I *target, const T *w, T *y) {
    typedef typename kc_t<T>::C CT;
    double sum = 0, wsum = 0;
    KC_FOR(i, N * D, int64_t) {
        int64_t n = i / D, d = i % D, t = (int64_t)target[i];
        double loss = 0, wt = 0;
        if (!(has_ii && t == ii)) {
            if (t < 0 || t >= C) {
                kc_fault(ck, 1, t, 0, C, i);
            } else {
                int64_t j = (n * C + t) * D + d;
                double v = src_f64 ? ((const double *)src)[j] : kc_ldd(((const T *)src)[j]);
                wt = w ? kc_ldd(w[t]) : 1.0;
                loss = -v * wt;
            }
        }
        if (red == 0) y[i] = kc_t<T>::st((CT)loss);
        sum += loss;
        wsum += wt;
    }
    if (red == 0) return;
    /* one block: reduce both sums in shared memory */
    __shared__ double ps[256], pw[256];
    ps[threadIdx.x] = sum;
    pw[threadIdx.x] = wsum;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) {
            ps[threadIdx.x] += ps[threadIdx.x + h];
            pw[threadIdx.x] += pw[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) y[0] = kc_t<T>::st((CT)(red == 1 ? ps[0] : ps[0] / pw[0]));
}

#define KC_NLL(S, T, IS, I)                                                                   \
    extern "C" __global__ void nll_##S##_##IS(kiln_cu_check ck, int red, int64_t N, int64_t C, int64_t D, \
                                              int has_ii, int64_t ii, const void *src, int src_f64, \
                                              const I *target, const T *w, T *y) {            \
        kc_nll<T, I>(ck, red, N, C, D, has_ii, ii, src, src_f64, target, w, y);                \
    }
#define KC_LOSS(S, T)                                                                         \
    extern "C" __global__ void sce_logp_##S(int64_t N, int64_t C, int64_t D, const T *x, double *logp, T *out) { \
        kc_sce_logp<T>(N, C, D, x, logp, out);                                                 \
    }                                                                                          \
    KC_NLL(S, T, i32, int32_t)                                                                 \
    KC_NLL(S, T, i64, int64_t)
KC_FLOATS64(KC_LOSS)
