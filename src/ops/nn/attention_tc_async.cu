/*
 * attention_tc_async.cu — kiln::attention (attention.c) for FP16/BF16 on
 * tensor cores with the K/V tiles double-buffered by cp.async (tactics 3
 * to 5 of attention_cuda.c):
 *
 *   flasha<DK>_w<NW>_<T>(p, q, k, v, mask, y): per batch-head, Y = softmax(scale Q K^T + mask) V
 *
 * A block of NW warps (8, 4 or 2) owns 16 NW query rows of one batch-head,
 * 16 per warp.  The block copies its Q tile and the first K and V tiles
 * (TA_BK = 64 keys) into shared memory with cp.async (16-byte copies
 * straight to shared memory, zero-filled past Sq, Sk and the head dims),
 * and each warp loads its Q rows once as mma A fragments with
 * ldmatrix.  Then per key tile: the copy of the next tile into the other
 * buffer is issued before this tile is computed, so the loads overlap the
 * math; S = Q K^T with mma.sync m16n8k16 (K's B fragments by ldmatrix,
 * two key groups per instruction), the online softmax in registers
 * (attention_mma.cuh: base 2, the scale folded into scale * log2 e), P
 * turned into A fragments in registers and O += P V with V's fragments by
 * ldmatrix.trans.  At the end each warp writes its normalized 16 output
 * rows into its part of the Q buffer and stores them with 16-byte moves.
 * Rows of every tile are padded by 8 elements (16 bytes): the 8 row
 * addresses of an ldmatrix phase then fall in distinct bank groups.
 *
 * Needs (attention_cuda.c checks, else tactic 1's kernel runs): head dims
 * multiples of 8 up to DK (32, 64, 128), K's head dim contiguous, Q, K, V,
 * Y 16-byte aligned with row, head and batch strides multiples of 8
 * elements.  Dynamic shared memory: ta_smem_bytes (launcher:
 * (16 NW + 4 TA_BK) (DK + 8) elements).  cp.async, ldmatrix and
 * mma.sync m16n8k16 need sm_80 or newer.
 */
#include "ops/nn/attention_mma.cuh"

#define TA_BK 64

/* 16 bytes global -> shared, asynchronously; zeros where !in (no bytes
 * read: src is any valid address then). */
__device__ __forceinline__ void ta_cp16(void *dst, const void *src, bool in) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(in ? 16 : 0) : "memory");
}
__device__ __forceinline__ void ta_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* wait until at most N of this thread's groups are in flight */
template <int N> __device__ __forceinline__ void ta_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Rows r0 .. r0 + ROWS of a [nrows, ncols] operand (row stride rs,
 * columns contiguous, ncols a multiple of 8) into S[ROWS][DK + 8] by the
 * block's NT threads; zeros outside. */
template <typename T, int DK, int ROWS, int NT>
__device__ __forceinline__ void ta_stage(T *S, const T *src, int64_t rs, int64_t r0, int64_t nrows, int ncols) {
    constexpr int CH = DK / 8; /* 16-byte chunks per row */
#pragma unroll 4
    for (int i = threadIdx.x; i < ROWS * CH; i += NT) {
        const int j = i / CH, c = (i - j * CH) * 8;
        const bool in = r0 + j < nrows && c < ncols;
        ta_cp16(S + j * (DK + 8) + c, in ? src + (r0 + j) * rs + c : src, in);
    }
}

template <typename T, int DK, int NW>
__device__ __forceinline__ void kc_flash_async(const kiln_cu_flash &p, const T *q, const T *k, const T *v,
                                               const T *mask, T *y) {
    typedef tc_ops<T> O;
    constexpr int BQ = 16 * NW, LD = DK + 8, NT = 32 * NW;
    extern __shared__ __align__(16) unsigned char ta_smem[];
    T *Qs = reinterpret_cast<T *>(ta_smem); /* [BQ][LD]; at the end, Y's rows */
    T *Ks = Qs + BQ * LD;                   /* [2][TA_BK][LD] */
    T *Vs = Ks + 2 * TA_BK * LD;            /* [2][TA_BK][LD] */
    const kc_flash_bases<T> cta = kc_flash_cta(p, BQ, q, k, v, mask, y);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t q0 = cta.q0, r0 = q0 + warp * 16 + g;
    const int D = p.d, Dv = p.dv, kd_used = (D + 15) / 16, nv_pairs = (Dv + 15) / 16;
    const int64_t ntiles = (p.sk + TA_BK - 1) / TA_BK;

    ta_stage<T, DK, BQ, NT>(Qs, cta.q, p.qs[2], q0, p.sq, D);
    if (ntiles > 0) {
        ta_stage<T, DK, TA_BK, NT>(Ks, cta.k, p.ks[2], 0, p.sk, D);
        ta_stage<T, DK, TA_BK, NT>(Vs, cta.v, p.vs[2], 0, p.sk, Dv);
    }
    ta_commit();

    uint32_t qa[DK / 16][4];
    float o[DK / 8][4];
#pragma unroll
    for (int n = 0; n < DK / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    tc_rows rs = {-INFINITY, -INFINITY, 0.0f, 0.0f};

    for (int64_t it = 0; it < ntiles; it++) {
        const T *Kt = Ks + (it & 1) * TA_BK * LD, *Vt = Vs + (it & 1) * TA_BK * LD;
        if (it + 1 < ntiles) { /* the other buffer was consumed: the block synced after it */
            const int nb = (int)((it + 1) & 1);
            ta_stage<T, DK, TA_BK, NT>(Ks + nb * TA_BK * LD, cta.k, p.ks[2], (it + 1) * TA_BK, p.sk, D);
            ta_stage<T, DK, TA_BK, NT>(Vs + nb * TA_BK * LD, cta.v, p.vs[2], (it + 1) * TA_BK, p.sk, Dv);
        }
        ta_commit(); /* possibly empty: the wait below counts groups */
        ta_wait<1>(); /* this tile (and Q) landed, the next may be in flight */
        __syncthreads();
        if (it == 0) { /* lanes 0-15: rows 0..15 at column 16kk, lanes 16-31: the same rows at 16kk + 8 */
#pragma unroll
            for (int kk = 0; kk < DK / 16; kk++)
                tc_ldsm4(qa[kk], Qs + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
        }
        const int64_t j0 = it * TA_BK;
        const int nk = p.sk - j0 < TA_BK ? (int)(p.sk - j0) : TA_BK;

        /* S = Q K^T, this warp's 16 rows x 64 keys.  One ldmatrix.x4 per
         * 16 keys x 16 dims: matrices (keys +0..7, dims +0..7), (+0..7,
         * +8..15), (+8..15, +0..7), (+8..15, +8..15) = b0, b1 of key group
         * 2np and b0, b1 of group 2np + 1. */
        float s[TA_BK / 8][4];
#pragma unroll
        for (int n = 0; n < TA_BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DK / 16; kk++) {
            if (kk >= kd_used) break;
#pragma unroll
            for (int np = 0; np < TA_BK / 16; np++) {
                uint32_t b[4];
                tc_ldsm4(b, Kt + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
                O::mma(s[2 * np], qa[kk], b[0], b[1]);
                O::mma(s[2 * np + 1], qa[kk], b[2], b[3]);
            }
        }
        tc_softmax_tile<T, TA_BK, DK / 8>(p, s, o, rs, nk, j0, r0, cta.m);

        /* O += P V.  One ldmatrix.x4.trans per 16 keys x 16 columns: lanes
         * 0-15 address keys 16kk + 0..15 at column 16np, lanes 16-31 at
         * 16np + 8; transposed, b0, b1 of column groups 2np and 2np + 1. */
#pragma unroll
        for (int kk = 0; kk < TA_BK / 16; kk++) {
            uint32_t pa[4];
            tc_pfrag<T>(pa, s, kk);
#pragma unroll
            for (int np = 0; np < DK / 16; np++) {
                if (np >= nv_pairs) break;
                uint32_t b[4];
                tc_ldsm4_trans(b, Vt + (kk * 16 + (lane & 15)) * LD + np * 16 + (lane >> 4) * 8);
                O::mma(o[2 * np], pa, b[0], b[1]);
                O::mma(o[2 * np + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); /* this buffer consumed before the next iteration refills it */
    }
    ta_wait<0>(); /* Sk = 0: Q's copies may still land in the buffer Y reuses */
    __syncthreads();

    float inv0, inv1;
    tc_row_inv(rs, inv0, inv1);
    T *Ys = Qs + warp * 16 * LD; /* this warp's own rows: only it read them */
#pragma unroll
    for (int n = 0; n < DK / 8; n++) {
        if (n >= 2 * nv_pairs) break;
        const int c = n * 8 + 2 * t;
        *reinterpret_cast<uint32_t *>(Ys + g * LD + c) = O::pack(o[n][0] * inv0, o[n][1] * inv0);
        *reinterpret_cast<uint32_t *>(Ys + (g + 8) * LD + c) = O::pack(o[n][2] * inv1, o[n][3] * inv1);
    }
    __syncwarp();
    const int ch = Dv / 8;
    for (int i = lane; i < 16 * ch; i += 32) {
        const int r = i / ch, c = (i - r * ch) * 8;
        const int64_t row = q0 + warp * 16 + r;
        if (row < p.sq)
            *reinterpret_cast<uint4 *>(cta.y + row * p.ys[2] + c) = *reinterpret_cast<const uint4 *>(Ys + r * LD + c);
    }
}

#define KC_FLASH_ASYNC(S, T, DK, NW)                                                                      \
    extern "C" __global__ void __launch_bounds__(32 * NW)                                               \
        flasha##DK##_w##NW##_##S(kiln_cu_flash p, const T *q, const T *k, const T *v, const T *mask, T *y) { \
        kc_flash_async<T, DK, NW>(p, q, k, v, mask, y);                                                 \
    }
/* head dim 128 with 8 warps would need 104 KB of shared memory, more than
 * sm_86/89 give a block (99 KB): not built, tactic 1's kernel runs */
#define KC_FLASH_ASYNC_DK(S, T, NW) KC_FLASH_ASYNC(S, T, 32, NW) KC_FLASH_ASYNC(S, T, 64, NW)
#define KC_FLASH_ASYNC_ALL(S, T)                                                                        \
    KC_FLASH_ASYNC_DK(S, T, 2) KC_FLASH_ASYNC(S, T, 128, 2) KC_FLASH_ASYNC_DK(S, T, 4)                  \
    KC_FLASH_ASYNC(S, T, 128, 4) KC_FLASH_ASYNC_DK(S, T, 8)
KC_FLASH_ASYNC_ALL(f16, kc_f16)
KC_FLASH_ASYNC_ALL(bf16, kc_bf16)
