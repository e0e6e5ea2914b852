/*
 * attention_tc.cu — kiln::attention (attention.c) for FP16/BF16 on tensor
 * cores, flash-attention-2 style:
 *
 *   flash<DK>_<T>(p, q, k, v, mask, y): per batch-head, Y = softmax(scale Q K^T + mask) V
 *
 * A block of 4 warps owns TC_BQ = 64 query rows of one batch-head (16 per
 * warp, kept in registers as mma A fragments) and walks the keys in tiles
 * of TC_BK = 64: the block stages K and V of the tile in shared memory
 * (rows padded by 8 elements: the fragment loads hit 32 distinct banks),
 * then each warp computes its 16 x 64 scores with mma.sync m16n8k16 (FP32
 * accumulate), scales them (scale * log2 e: exp2), updates the running
 * row max and sum (online softmax: the output so far is rescaled by
 * exp2(m_old - m_new)), turns the probabilities into A fragments in
 * registers (the m16n8 accumulator layout of two neighbouring key groups is
 * the m16k16 A layout) and accumulates P V with mma.sync, V's B fragments
 * read transposed by ldmatrix.trans.  Scores and probabilities never leave
 * the registers.  DK (32, 64, 128) is the head dim rounded up: Q, K and V
 * are zero-padded to it.  Every row stride comes from kiln_cu_flash, so Q,
 * K, V may be strided views (heads of a packed QKV projection).
 *
 * mma.sync m16n8k16 (FP16 and BF16) and ldmatrix need sm_80 or newer, the
 * oldest GPU kiln's fatbin targets; fragment layouts and the softmax step
 * are in attention_mma.cuh (shared with attention_tc_async.cu: tactics 3
 * to 5, which take over where Q, K, V, Y allow 16-byte copies).
 */
#include "ops/nn/attention_mma.cuh"

#define TC_BQ 64
#define TC_BK 64
#define TC_PAD 8

/* Rows j0 .. j0 + TC_BK of a [rows, cols] operand (row stride rs, column
 * stride cs) into S[TC_BK][DK + TC_PAD], zeros outside rows < nrows and
 * cols < ncols.  vec: 16-byte moves (cs == 1, see kiln_cu_flash). */
template <typename T, int DK>
__device__ __forceinline__ void tc_stage(T (*S)[DK + TC_PAD], const T *src, int64_t rs, int64_t cs, int64_t j0,
                                         int64_t nrows, int ncols, int vec) {
    const int tid = threadIdx.x;
    if (vec) {
        for (int i = tid; i < TC_BK * DK / 8; i += blockDim.x) {
            const int j = i / (DK / 8), c = (i - j * (DK / 8)) * 8;
            uint4 w = make_uint4(0, 0, 0, 0);
            if (j0 + j < nrows && c < ncols) w = *reinterpret_cast<const uint4 *>(src + (j0 + j) * rs + c);
            *reinterpret_cast<uint4 *>(&S[j][c]) = w;
        }
    } else if (cs == 1) { /* neighbouring threads read neighbouring columns */
        for (int i = tid; i < TC_BK * DK; i += blockDim.x) {
            const int j = i / DK, c = i - j * DK;
            S[j][c] = j0 + j < nrows && c < ncols ? src[(j0 + j) * rs + c] : kc_stf<T>(0.0f);
        }
    } else { /* K^T: neighbouring threads read neighbouring rows */
        for (int i = tid; i < TC_BK * DK; i += blockDim.x) {
            const int c = i / TC_BK, j = i - c * TC_BK;
            S[j][c] = j0 + j < nrows && c < ncols ? src[(j0 + j) * rs + c * cs] : kc_stf<T>(0.0f);
        }
    }
}

template <typename T, int DK>
__device__ __forceinline__ void kc_flash_tc(const kiln_cu_flash &p, const T *q, const T *k, const T *v, const T *mask,
                                            T *y) {
    typedef tc_ops<T> O;
    __shared__ __align__(16) T Ks[TC_BK][DK + TC_PAD];
    __shared__ __align__(16) T Vs[TC_BK][DK + TC_PAD];
    const kc_flash_bases<T> cta = kc_flash_cta(p, TC_BQ, q, k, v, mask, y);
    const int64_t q0 = cta.q0;
    const T *qb = cta.q, *kb = cta.k, *vb = cta.v, *mb = cta.m;
    T *yb = cta.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t r0 = q0 + warp * 16 + g, r1 = r0 + 8; /* this thread's two query rows */
    const int D = p.d, Dv = p.dv, kd_used = (D + 15) / 16, nv_used = (Dv + 7) / 8;

    /* Q as A fragments (rows past Sq and columns past D are zeros) */
    uint32_t qa[DK / 16][4];
#pragma unroll
    for (int kk = 0; kk < DK / 16; kk++)
#pragma unroll
        for (int f = 0; f < 4; f++) {
            const int64_t r = f & 1 ? r1 : r0;
            const int c = kk * 16 + 2 * t + (f & 2 ? 8 : 0);
            float lo = 0.0f, hi = 0.0f;
            if (r < p.sq && c < D) lo = kc_ldf(qb[r * p.qs[2] + c]);
            if (r < p.sq && c + 1 < D) hi = kc_ldf(qb[r * p.qs[2] + c + 1]);
            qa[kk][f] = O::pack(lo, hi);
        }
    float o[DK / 8][4];
#pragma unroll
    for (int n = 0; n < DK / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    tc_rows rs = {-INFINITY, -INFINITY, 0.0f, 0.0f};

    for (int64_t j0 = 0; j0 < p.sk; j0 += TC_BK) {
        __syncthreads(); /* the previous tile consumed */
        tc_stage<T, DK>(Ks, kb, p.ks[2], p.kd, j0, p.sk, D, p.vec && p.kd == 1);
        tc_stage<T, DK>(Vs, vb, p.vs[2], 1, j0, p.sk, Dv, p.vec);
        __syncthreads();
        const int nk = p.sk - j0 < TC_BK ? (int)(p.sk - j0) : TC_BK;

        /* S = Q K^T for this warp's 16 rows x 64 keys */
        float s[TC_BK / 8][4];
#pragma unroll
        for (int n = 0; n < TC_BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DK / 16; kk++) {
            if (kk >= kd_used) break;
#pragma unroll
            for (int n = 0; n < TC_BK / 8; n++) {
                const T *kr = &Ks[n * 8 + g][kk * 16 + 2 * t];
                O::mma(s[n], qa[kk], *reinterpret_cast<const uint32_t *>(kr),
                       *reinterpret_cast<const uint32_t *>(kr + 8));
            }
        }
        tc_softmax_tile<T, TC_BK, DK / 8>(p, s, o, rs, nk, j0, r0, mb);
        /* O += P V: key groups 2kk, 2kk + 1 of S are the A fragment of keys 16kk.. */
#pragma unroll
        for (int kk = 0; kk < TC_BK / 16; kk++) {
            uint32_t pa[4];
            tc_pfrag<T>(pa, s, kk);
#pragma unroll
            for (int n = 0; n < DK / 8; n++) {
                if (n >= nv_used) break;
                /* lanes 0-15 address rows 16kk + 0..15 of V at column 8n: the two
                 * 8 x 8 matrices, transposed, are the B fragment */
                uint32_t b0, b1;
                const unsigned addr = (unsigned)__cvta_generic_to_shared(&Vs[kk * 16 + (lane & 15)][n * 8]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                             : "=r"(b0), "=r"(b1)
                             : "r"(addr));
                O::mma(o[n], pa, b0, b1);
            }
        }
    }
    float inv0, inv1;
    tc_row_inv(rs, inv0, inv1);
#pragma unroll
    for (int n = 0; n < DK / 8; n++) {
        const int c = n * 8 + 2 * t;
        if (c >= Dv) break;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (c + e >= Dv) break;
            if (r0 < p.sq) yb[r0 * p.ys[2] + c + e] = kc_stf<T>(o[n][e] * inv0);
            if (r1 < p.sq) yb[r1 * p.ys[2] + c + e] = kc_stf<T>(o[n][2 + e] * inv1);
        }
    }
}

#define KC_FLASH_TC(S, T, DK)                                                                              \
    extern "C" __global__ void __launch_bounds__(128)                                                    \
        flash##DK##_##S(kiln_cu_flash p, const T *q, const T *k, const T *v, const T *mask, T *y) {     \
        kc_flash_tc<T, DK>(p, q, k, v, mask, y);                                                         \
    }
#define KC_FLASH_TC_ALL(S, T) KC_FLASH_TC(S, T, 32) KC_FLASH_TC(S, T, 64) KC_FLASH_TC(S, T, 128)
KC_FLASH_TC_ALL(f16, kc_f16)
KC_FLASH_TC_ALL(bf16, kc_bf16)
