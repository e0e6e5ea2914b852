/*
 * attention.cu — kiln::attention (attention.c) as one flash-style kernel:
 *
 *   attention_<T>(p, q, k, v, y): per batch-head, Y = softmax(scale Q K^T) V.
 *
 * A block of 4 warps takes KA_BQ = 16 query rows of one batch-head (4 per
 * warp; scaled Q rows in shared memory) and walks the keys in tiles of
 * KA_BK = 32: the block stages the K and V tile in shared memory (K padded
 * to D + 1 floats a row: lane j reads key j's row without bank conflicts),
 * then each warp, row by row, has lane j compute score j, updates the row's
 * running max and sum (online softmax: earlier partial sums rescaled by
 * exp(m_old - m_new)) and adds p_j V_j into its output slice (lane c holds
 * columns c, c + 32, ...; p_j broadcast by shuffle).  The Sq x Sk score
 * matrix never exists in memory.  All math in float; D, Dv <= 128.
 */
#include "ops/common/cuda_common.cuh"

#define KA_BQ 16
#define KA_BK 32
#define KA_RPW (KA_BQ / 4) /* rows per warp */
#define KA_CPL (KILN_CU_ATTN_DMAX / 32) /* output columns per lane */

__device__ __forceinline__ float ka_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float ka_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T>
__device__ __forceinline__ void kc_attention(const kiln_cu_attn &p, const T *q, const T *k, const T *v, T *y) {
    __shared__ float Qs[KA_BQ][KILN_CU_ATTN_DMAX];
    __shared__ float Ks[KA_BK][KILN_CU_ATTN_DMAX + 1];
    __shared__ float Vs[KA_BK][KILN_CU_ATTN_DMAX];
    const int64_t qtiles = (p.sq + KA_BQ - 1) / KA_BQ;
    const int64_t bh = blockIdx.x / qtiles, q0 = (blockIdx.x - bh * qtiles) * KA_BQ;
    const int D = p.d, Dv = p.dv, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const T *qb = q + bh * p.sq * D, *kb = k + bh * p.sk * D, *vb = v + bh * p.sk * Dv;
    T *yb = y + bh * p.sq * Dv;
    for (int i = tid; i < KA_BQ * D; i += blockDim.x) {
        int r = i / D, c = i - r * D;
        Qs[r][c] = q0 + r < p.sq ? kc_ldf(qb[(q0 + r) * D + c]) * p.scale : 0.0f;
    }
    float m[KA_RPW], l[KA_RPW], o[KA_RPW][KA_CPL];
#pragma unroll
    for (int r = 0; r < KA_RPW; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < KA_CPL; c++) o[r][c] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < p.sk; j0 += KA_BK) {
        __syncthreads(); /* Qs written; the previous tile consumed */
        const int nk = p.sk - j0 < KA_BK ? (int)(p.sk - j0) : KA_BK;
        if (p.k_trans) { /* K^T [D, Sk]: neighbouring threads read neighbouring keys */
            for (int i = tid; i < KA_BK * D; i += blockDim.x) {
                int d = i / KA_BK, j = i - d * KA_BK;
                Ks[j][d] = j < nk ? kc_ldf(kb[(int64_t)d * p.sk + j0 + j]) : 0.0f;
            }
        } else {
            for (int i = tid; i < KA_BK * D; i += blockDim.x) {
                int j = i / D, d = i - j * D;
                Ks[j][d] = j < nk ? kc_ldf(kb[(j0 + j) * D + d]) : 0.0f;
            }
        }
        for (int i = tid; i < KA_BK * Dv; i += blockDim.x) {
            int j = i / Dv, c = i - j * Dv;
            Vs[j][c] = j < nk ? kc_ldf(vb[(j0 + j) * Dv + c]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < KA_RPW; rr++) {
            const int r = warp * KA_RPW + rr;
            float s = 0.0f;
            for (int d = 0; d < D; d++) s += Qs[r][d] * Ks[lane][d];
            s = lane < nk ? s : -INFINITY;
            const float mn = fmaxf(m[rr], ka_warp_max(s)); /* finite: key 0 of the tile is valid */
            const float pj = lane < nk ? expf(s - mn) : 0.0f, alpha = expf(m[rr] - mn);
            l[rr] = l[rr] * alpha + ka_warp_sum(pj);
            m[rr] = mn;
#pragma unroll
            for (int c = 0; c < KA_CPL; c++) o[rr][c] *= alpha;
            for (int j = 0; j < nk; j++) {
                const float pb = __shfl_sync(0xffffffffu, pj, j);
#pragma unroll
                for (int c = 0; c < KA_CPL; c++)
                    if (lane + 32 * c < Dv) o[rr][c] += pb * Vs[j][lane + 32 * c];
            }
        }
    }
#pragma unroll
    for (int rr = 0; rr < KA_RPW; rr++) {
        const int64_t row = q0 + warp * KA_RPW + rr;
        if (row >= p.sq) continue;
        const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f; /* Sk = 0: zeros, as MatMul over an empty dim */
#pragma unroll
        for (int c = 0; c < KA_CPL; c++)
            if (lane + 32 * c < Dv) yb[row * Dv + lane + 32 * c] = kc_stf<T>(o[rr][c] * inv);
    }
}

#define KC_ATTENTION(S, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(128) attention_##S(kiln_cu_attn p, const T *q, const T *k, \
                                                                    const T *v, T *y) {        \
        kc_attention<T>(p, q, k, v, y);                                                        \
    }
KC_FLOATS(KC_ATTENTION)
