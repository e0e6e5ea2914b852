/*
 * pool.cu — MaxPool (with Indices), AveragePool, LpPool over 1 to 3 spatial
 * dims: pool_<T>(kiln_cu_pool, x, y, indices), one thread per output
 * element, the window walk of pool.c's general path (same tap order, same
 * divisor rules, NaN never replaces a max).  Sums in float.  NCHW, or NHWC
 * (kiln_cu_pool.chans): adjacent threads then take adjacent channels.
 */
#include "ops/common/cuda_common.cuh"

template <typename T>
__device__ __forceinline__ void kc_pool(const kiln_cu_pool &g, const T *x, T *y, int64_t *ind) {
    const int64_t ID = g.id[0], IH = g.id[1], IW = g.id[2], OD = g.o[0], OH = g.o[1], OW = g.o[2];
    const int64_t isp = ID * IH * IW, osp = OD * OH * OW;
    const int64_t C = g.chans > 0 ? g.chans : 1;
    KC_FOR(i, g.planes * osp, int64_t) {
        // NCHW: i = pl * osp + oi; NHWC: i = (n * osp + oi) * C + ch, pl = n * C + ch
        int64_t pl, oi, xbase;
        if (g.chans > 0) {
            int64_t ch = i % C, r = i / C, n = r / osp;
            oi = r - n * osp;
            pl = n * C + ch;
            xbase = n * isp * C + ch;
        } else {
            pl = i / osp;
            oi = i - pl * osp;
            xbase = pl * isp;
        }
        int64_t ox = oi % OW, oy = (oi / OW) % OH, oz = oi / (OW * OH);
        const T *xp = x + xbase;
        int64_t zs = oz * g.s[0] - g.pb[0], ys = oy * g.s[1] - g.pb[1], xs = ox * g.s[2] - g.pb[2];
        float best = -INFINITY, sum = 0.0f;
        int64_t bi = -1, cnt = 0, cnt_pad = 0;
        for (int kz = 0; kz < g.k[0]; kz++) {
            int64_t iz = zs + (int64_t)kz * g.d[0];
            if (iz >= ID + g.pe[0]) break;
            bool zin = iz >= 0 && iz < ID;
            for (int ky = 0; ky < g.k[1]; ky++) {
                int64_t iy = ys + (int64_t)ky * g.d[1];
                if (iy >= IH + g.pe[1]) break;
                bool yin = zin && iy >= 0 && iy < IH;
                for (int kx = 0; kx < g.k[2]; kx++) {
                    int64_t ix = xs + (int64_t)kx * g.d[2];
                    if (ix >= IW + g.pe[2]) break;
                    cnt_pad++;
                    if (!yin || ix < 0 || ix >= IW) continue;
                    float v = kc_ldf(xp[((iz * IH + iy) * IW + ix) * C]);
                    cnt++;
                    if (g.kind == 0) {
                        if (v > best || bi < 0) {
                            best = v;
                            bi = g.order ? iz * IH * IW + ix * IH + iy : (iz * IH + iy) * IW + ix;
                        }
                    } else if (g.kind == 1) {
                        sum += v;
                    } else {
                        sum += g.p == 1.0f ? fabsf(v) : g.p == 2.0f ? v * v : powf(fabsf(v), g.p);
                    }
                }
            }
        }
        float r;
        if (g.kind == 0) {
            r = best;
            if (ind) ind[i] = bi < 0 ? -1 : pl * isp + bi; // in y's layout; the NCHW numbering
        } else if (g.kind == 1) {
            int64_t dv = g.count_pad ? cnt_pad : cnt;
            r = dv ? sum / (float)dv : 0.0f;
        } else {
            r = g.p == 1.0f ? sum : g.p == 2.0f ? sqrtf(sum) : powf(sum, 1.0f / g.p);
        }
        y[i] = kc_stf<T>(r);
    }
}

#define KC_POOL(S, T)                                                                         \
    extern "C" __global__ void pool_##S(kiln_cu_pool g, const T *x, T *y, int64_t *ind) {     \
        kc_pool<T>(g, x, y, ind);                                                              \
    }
KC_FLOATS(KC_POOL)
