/*
 * conv3d.cu — 3-D Conv and ConvTranspose, direct (one thread per output
 * element, float accumulation), for the volumetric layers the 1-D/2-D
 * kernels of conv.cu do not take:
 *
 *   conv3d_<T>(p, x, w, bias, y): kiln_cu_conv3d's geometry; bias may be
 *     NULL; the fused activation p.act applied before the one rounding
 *     store.  Conv: y[n,m,z] = sum_{ci,a} x[n, g*cg+ci, z*s-pb+a*d] *
 *     w[m, ci, a]; ConvTranspose: y[n,m,z] = sum_{ci,a} x[n, g*cg+ci,
 *     (z+pb-a*d)/s] * w[g*cg+ci, m%mg, a] (gather form: no atomics).
 */
#include "ops/common/cuda_common.cuh"

/* The input index that output index o reads through tap a, or -1. */
__device__ __forceinline__ int64_t kc_c3_in(const kiln_cu_conv3d &p, int j, int64_t o, int a) {
    if (!p.transpose) {
        int64_t i = o * p.s[j] - p.pb[j] + (int64_t)a * p.d[j];
        return i >= 0 && i < p.id[j] ? i : -1;
    }
    int64_t t = o + p.pb[j] - (int64_t)a * p.d[j];
    if (t < 0 || t % p.s[j]) return -1;
    t /= p.s[j];
    return t < p.id[j] ? t : -1;
}

template <typename T>
__device__ __forceinline__ void kc_conv3d(const kiln_cu_conv3d &p, const T *x, const T *w, const T *bias, T *y) {
    const int64_t osp = p.od[0] * p.od[1] * p.od[2], isp = p.id[0] * p.id[1] * p.id[2];
    const int64_t kvol = (int64_t)p.k[0] * p.k[1] * p.k[2], cg = p.c / p.group, mg = p.m / p.group;
    KC_FOR(i, p.n * p.m * osp, int64_t) {
        int64_t r = i;
        const int64_t ox = r % p.od[2], oy = (r /= p.od[2]) % p.od[1], oz = (r /= p.od[1]) % p.od[0];
        r /= p.od[0];
        const int64_t mo = r % p.m, n = r / p.m, g = mo / mg;
        float acc = bias ? kc_ldf(bias[mo]) : 0.0f;
        for (int64_t ci = 0; ci < cg; ci++) {
            const int64_t cin = g * cg + ci;
            const T *xb = x + (n * p.c + cin) * isp;
            const T *wb = w + (p.transpose ? cin * mg + mo % mg : mo * cg + ci) * kvol;
            for (int a = 0; a < p.k[0]; a++) {
                int64_t iz = kc_c3_in(p, 0, oz, a);
                if (iz < 0) continue;
                for (int b = 0; b < p.k[1]; b++) {
                    int64_t iy = kc_c3_in(p, 1, oy, b);
                    if (iy < 0) continue;
                    for (int e = 0; e < p.k[2]; e++) {
                        int64_t ix = kc_c3_in(p, 2, ox, e);
                        if (ix < 0) continue;
                        acc += kc_ldf(xb[(iz * p.id[1] + iy) * p.id[2] + ix]) *
                               kc_ldf(wb[((int64_t)a * p.k[1] + b) * p.k[2] + e]);
                    }
                }
            }
        }
        y[i] = kc_stf<T>(kc_act(p.act, acc, p.act_a, p.act_b));
    }
}

#define KC_CONV3D(S, T)                                                                              \
    extern "C" __global__ void conv3d_##S(kiln_cu_conv3d p, const T *x, const T *w, const T *bias, T *y) { \
        kc_conv3d<T>(p, x, w, bias, y);                                                               \
    }
KC_FLOATS(KC_CONV3D)
