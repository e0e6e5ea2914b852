/*
 * attention_f32.cu — kiln::attention (attention.c) in FP32, tiled and
 * register-blocked (CUDA cores; exact FP32, no TF32):
 *
 *   flash_f32(p, q, k, v, mask, y): per batch-head, Y = softmax(scale Q K^T + mask) V,
 *   head dims D, Dv <= 64 (attention_cuda.c takes the older kernel above).
 *
 * A block of 256 threads (16 x 16) owns F_BQ = 64 query rows of one
 * batch-head; Q (transposed, [d][row]) stays in shared memory while the
 * block walks the keys in tiles of F_BK = 64 (K transposed, [d][key]; V
 * [key][col]).  Thread (ty, tx) computes the 4 x 4 scores of rows 4ty..
 * and keys 4tx.. (two 16-byte shared loads per 16 FMAs), the 16 threads
 * of a row group share the row max and sum by shuffles (online softmax,
 * base 2), write the probabilities transposed over K's tile (K is used up
 * by then), and accumulate the 4 x 4 outputs of rows 4ty.. and columns
 * 4tx.. from P and V.  Rows of the tiles are padded to 68 floats (16-byte
 * aligned).  Strides from kiln_cu_flash: Q, K, V, Y may be strided views.
 * Dynamic shared memory: F_SMEM bytes (more than 48 KiB: opted into).
 */
#include "ops/nn/attention_flash.cuh"

#define F_BQ 64
#define F_BK 64
#define F_DK 64
#define F_LD 68
#define F_LOG2E 1.4426950408889634f

extern "C" __global__ void __launch_bounds__(256) flash_f32(kiln_cu_flash p, const float *q, const float *k,
                                                            const float *v, const float *mask, float *y) {
    extern __shared__ __align__(16) float f_smem[];
    float(*QsT)[F_LD] = reinterpret_cast<float(*)[F_LD]>(f_smem);            /* [F_DK][F_LD] */
    float(*KsT)[F_LD] = reinterpret_cast<float(*)[F_LD]>(f_smem + F_DK * F_LD); /* [F_DK][F_LD], then P^T */
    float(*Vs)[F_LD] = reinterpret_cast<float(*)[F_LD]>(f_smem + 2 * F_DK * F_LD); /* [F_BK][F_LD] */
    const kc_flash_bases<float> cta = kc_flash_cta(p, F_BQ, q, k, v, mask, y);
    const int64_t q0 = cta.q0;
    const float *qb = cta.q, *kb = cta.k, *vb = cta.v, *mb = cta.m;
    float *yb = cta.y;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4, D = p.d, Dv = p.dv;

    for (int i = tid; i < F_BQ * F_DK; i += 256) {
        const int r = i / F_DK, d = i - r * F_DK;
        QsT[d][r] = q0 + r < p.sq && d < D ? qb[(q0 + r) * p.qs[2] + d] : 0.0f;
    }
    float o[4][4], m[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) o[i][j] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < p.sk; j0 += F_BK) {
        __syncthreads(); /* Q staged; the previous tile's P and V consumed */
        if (p.kd == 1) {
            for (int i = tid; i < F_BK * F_DK; i += 256) {
                const int j = i / F_DK, d = i - j * F_DK;
                KsT[d][j] = j0 + j < p.sk && d < D ? kb[(j0 + j) * p.ks[2] + d] : 0.0f;
            }
        } else {
            for (int i = tid; i < F_BK * F_DK; i += 256) {
                const int d = i / F_BK, j = i - d * F_BK;
                KsT[d][j] = j0 + j < p.sk && d < D ? kb[(j0 + j) * p.ks[2] + d * p.kd] : 0.0f;
            }
        }
        for (int i = tid; i < F_BK * F_DK; i += 256) {
            const int j = i / F_DK, c = i - j * F_DK;
            Vs[j][c] = j0 + j < p.sk && c < Dv ? vb[(j0 + j) * p.vs[2] + c] : 0.0f;
        }
        __syncthreads();
        const int nk = p.sk - j0 < F_BK ? (int)(p.sk - j0) : F_BK;
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < F_DK; d++) {
            const float4 a = *reinterpret_cast<const float4 *>(&QsT[d][4 * ty]);
            const float4 b = *reinterpret_cast<const float4 *>(&KsT[d][4 * tx]);
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
        }
        float alpha[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t r = q0 + 4 * ty + i, key = j0 + 4 * tx + j;
                const bool in = 4 * tx + j < nk;
                s[i][j] = in ? s[i][j] * p.scale_log2 : -INFINITY;
                if (p.has_mask && in && r < p.sq) s[i][j] += F_LOG2E * mb[r * p.ms[2] + key * p.ms[3]];
                mx = fmaxf(mx, s[i][j]);
            }
#pragma unroll
            for (int sh = 1; sh < 16; sh <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, sh));
            const float mn = fmaxf(m[i], mx), z = mn == -INFINITY ? 0.0f : mn; /* masked out so far: terms 0 */
            alpha[i] = exp2f(m[i] - z);
            m[i] = mn;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) sum += s[i][j] = exp2f(s[i][j] - z);
#pragma unroll
            for (int sh = 1; sh < 16; sh <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, sh);
            l[i] = l[i] * alpha[i] + sum;
        }
        __syncthreads(); /* every thread is done with K: P^T goes over it */
        float(*PsT)[F_LD] = KsT;
#pragma unroll
        for (int j = 0; j < 4; j++)
            *reinterpret_cast<float4 *>(&PsT[4 * tx + j][4 * ty]) = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) o[i][j] *= alpha[i];
#pragma unroll 8
        for (int j = 0; j < F_BK; j++) {
            const float4 a = *reinterpret_cast<const float4 *>(&PsT[j][4 * ty]);
            const float4 b = *reinterpret_cast<const float4 *>(&Vs[j][4 * tx]);
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int c = 0; c < 4; c++) o[i][c] = fmaf(av[i], bv[c], o[i][c]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t r = q0 + 4 * ty + i;
        if (r >= p.sq) continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f; /* Sk = 0: zeros */
#pragma unroll
        for (int c = 0; c < 4; c++)
            if (4 * tx + c < Dv) yb[r * p.ys[2] + 4 * tx + c] = o[i][c] * inv;
    }
}
