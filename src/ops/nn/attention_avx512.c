/*
 * attention_avx512.c — kiln::attention tactic 3 (attention_avx512.h): per
 * head, K^T [D, Skp] and V [Sk, Dvp] (Skp, Dvp: Sk, Dv rounded up to 16,
 * zero-padded) copied into contiguous scratch; then per block of `rows`
 * query rows
 *
 *   S = log2(e) (scale Q K^T + mask)   6 x 64 tiles, Q's values broadcast
 *                              from its (strided) rows, K^T's rows as 4
 *                              vectors; the scores in base 2
 *   P = 2^(S - rowmax)         in place (all rows' maxima first); 1 / rowsum
 *                              kept per row
 *   Y = (P V) / rowsum         6 x 64 tiles, P broadcast, V's rows as 4
 *                              vectors, the division in the store
 *
 * Why the copies: Q, K and V are usually views of a packed QKV projection
 * whose rows are 3 x 768 floats apart (BERT), a stride that maps the 128
 * rows of one head's K or V into a quarter of L1's sets; contiguous they
 * stay in L1/L2 for all the head's row tiles.  24 accumulators + 4 B
 * vectors + a broadcast fill 29 of the 32 zmm registers.  Built for
 * AVX-512 F + DQ targets (vreduceps); elsewhere a stub, and the op runs
 * tactic 3 as tactic 1.
 */
#include "ops/nn/attention_avx512.h"
#include "device/cpu/transpose16.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { MR = 6, NV = 4 }; /* tile: MR rows x NV vectors of 16 */

static int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }

int kiln__attn_tile_available(void) { return 1; }

size_t kiln__attn_tile_scratch(const kiln_cu_flash *p, int64_t rows) {
    int64_t skp = up16(p->sk);
    return (size_t)(p->d * skp + p->sk * up16(p->dv) + rows * skp + 3 * up16(rows));
}

/* C[mr, 16 nv] = rs[r] * (A[mr, K] B[K, 16 nv]), K >= 1: A's rows at a + r lda
 * (columns contiguous), B's rows at b + k ldb (aligned); the last vector
 * of each C row is stored under `last`.  mr, nv are constants where
 * inlined, so acc[][] lives in registers. */
static inline __attribute__((always_inline)) void tile(const int mr, const int nv, int64_t K, const float *a,
                                                       int64_t lda, const float *b, int64_t ldb, float *c,
                                                       int64_t ldc, const float *rs, __mmask16 last) {
    __m512 acc[MR][NV];
    const float *ar[MR];
    for (int r = 0; r < mr; r++) {
        ar[r] = a + r * lda;
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    do { /* K >= 1: no path around the loop, so acc[][] needs no home in memory */
        __m512 bv[NV];
        for (int v = 0; v < nv; v++) bv[v] = _mm512_load_ps(b + k * ldb + 16 * v);
        for (int r = 0; r < mr; r++) {
            const __m512 av = _mm512_set1_ps(ar[r][k]);
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
        }
    } while (++k < K);
    for (int r = 0; r < mr; r++) {
        const __m512 s = _mm512_set1_ps(rs[r]);
        for (int v = 0; v + 1 < nv; v++) _mm512_storeu_ps(c + r * ldc + 16 * v, _mm512_mul_ps(acc[r][v], s));
        _mm512_mask_storeu_ps(c + r * ldc + 16 * (nv - 1), last, _mm512_mul_ps(acc[r][nv - 1], s));
    }
}

typedef void tile_fn(int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                     const float *rs, __mmask16 last);
#define TILE_FN(mr, nv)                                                                                            \
    static void tile_##mr##_##nv(int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb, float *c,  \
                                 int64_t ldc, const float *rs, __mmask16 last) {                                  \
        tile(mr, nv, K, a, lda, b, ldb, c, ldc, rs, last);                                                         \
    }
#define TILE_ROW(mr) TILE_FN(mr, 1) TILE_FN(mr, 2) TILE_FN(mr, 3) TILE_FN(mr, 4)
TILE_ROW(1) TILE_ROW(2) TILE_ROW(3) TILE_ROW(4) TILE_ROW(5) TILE_ROW(6)
#define TILE_REF(mr) {tile_##mr##_1, tile_##mr##_2, tile_##mr##_3, tile_##mr##_4}
static tile_fn *const tiles[MR][NV] = {TILE_REF(1), TILE_REF(2), TILE_REF(3), TILE_REF(4), TILE_REF(5), TILE_REF(6)};

/* C[m, n] = rs[r] * (A[m, K] B[K, n]) in MR x 16 NV tiles; B's rows hold
 * up16(n) floats (aligned); C's columns past n are not written. */
static void product(int64_t m, int64_t n, int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc, const float *rs) {
    const int64_t nvec = up16(n) / 16;
    const __mmask16 tail = n % 16 ? (__mmask16)((1u << (n % 16)) - 1) : (__mmask16)0xFFFF;
    for (int64_t v0 = 0; v0 < nvec; v0 += NV) {
        const int nv = nvec - v0 < NV ? (int)(nvec - v0) : NV;
        const __mmask16 last = v0 + nv == nvec ? tail : (__mmask16)0xFFFF;
        for (int64_t i = 0; i < m; i += MR) {
            const int mr = m - i < MR ? (int)(m - i) : MR;
            tiles[mr - 1][nv - 1](K, a + i * lda, lda, b + 16 * v0, ldb, c + i * ldc + 16 * v0, ldc,
                                  rs + i, last);
        }
    }
}


/* K^T [D, skp] from K (key j, dim e at k[j ks + e kd]), zero-padded:
 * 16 x 16 transposes where a key's dims are contiguous (K as a view of
 * the projection), row copies where the keys are (K^T given), else
 * gathers. */
static void pack_kt(const kiln_cu_flash *p, const float *k, float *kt, int64_t skp) {
    const int64_t ks = p->ks[2], kd = p->kd;
    for (int64_t j0 = 0; j0 < skp; j0 += 16) {
        const int64_t n = p->sk - j0 < 16 ? p->sk - j0 : 16;
        const __mmask16 m = (__mmask16)((1u << n) - 1);
        const float *kj = k + j0 * ks;
        if (kd == 1 && ks != 1) {
            for (int64_t e0 = 0; e0 < p->d; e0 += 16) {
                const int64_t ne = p->d - e0 < 16 ? p->d - e0 : 16;
                const __mmask16 me = (__mmask16)((1u << ne) - 1);
                __m512 r[16];
                for (int j = 0; j < 16; j++)
                    r[j] = j < n ? _mm512_maskz_loadu_ps(me, kj + j * ks + e0) : _mm512_setzero_ps();
                kiln__tr16(r);
                for (int e = 0; e < ne; e++) _mm512_store_ps(kt + (e0 + e) * skp + j0, r[e]);
            }
        } else if (ks == 1) {
            for (int64_t e = 0; e < p->d; e++) _mm512_store_ps(kt + e * skp + j0, _mm512_maskz_loadu_ps(m, kj + e * kd));
        } else if (ks > 0 && ks <= INT32_MAX / 16) {
            const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                   _mm512_set1_epi32((int32_t)ks));
            for (int64_t e = 0; e < p->d; e++)
                _mm512_store_ps(kt + e * skp + j0, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, kj + e * kd, 4));
        } else {
            for (int64_t e = 0; e < p->d; e++)
                for (int64_t j = 0; j < 16; j++) kt[e * skp + j0 + j] = j < n ? kj[j * ks + e * kd] : 0.0f;
        }
    }
}

/* V [Sk, dvp] from V's rows (vs[2] apart), zero-padded. */
static void pack_v(const kiln_cu_flash *p, const float *v, float *vp, int64_t dvp) {
    for (int64_t j = 0; j < p->sk; j++)
        for (int64_t c = 0; c < dvp; c += 16) {
            const int64_t n = p->dv - c < 16 ? p->dv - c : 16;
            _mm512_store_ps(vp + j * dvp + c, _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), v + j * p->vs[2] + c));
        }
}

/* 2^x on 16 lanes for x <= 0 (the scores less their row's maximum, in
 * base 2: the first product's store scales by log2(e)): r = x - floor(x)
 * in [0, 1) by vreduceps, 2^r = 1 + r P(r) (P of degree 5, fitted for
 * relative error: 9e-8 in float), times 2^floor(x) by scalef's own
 * floor; 0 below -126, so that no subnormal reaches the second product
 * (its FMAs would take microcode assists); NaN stays NaN.  9 operations
 * against fexp_f32x16's 22. */
static inline __m512 exp2_neg(__m512 x) {
    static const float c[7] = {2.1611690019328054e-4f, 1.2468163344293995e-3f, 9.67542181388692e-3f,
                               5.548529284885358e-2f,  2.40229303482465e-1f,   6.931470445449863e-1f, 1.0f};
    const __m512 r = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 q = _mm512_set1_ps(c[0]);
    for (int k = 1; k < 7; k++) q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(c[k]));
    return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ), q, x);
}

/* Rows r < m of base-2 scores s (ld apart; + log2(e) mask rows mask, ms
 * apart) -> 2^(s - max) in place over their n keys; inv[r] = 1 / sum, 0
 * for a row of -inf (every key masked: zeros out).  The maxima first, in
 * their own pass, so that each row's exponentials wait on no reduction. */
static void softmax_rows(float *s, int64_t m, int64_t ld, int64_t n, const float *mask, const int64_t ms[4],
                         float *mx, float *inv) {
    const __mmask16 tail = n % 16 ? (__mmask16)((1u << (n % 16)) - 1) : (__mmask16)0xFFFF;
    const int64_t nf = n - (n % 16 ? n % 16 : 16); /* full vectors before the last */
    for (int64_t r = 0; r < m; r++) {
        float *sr = s + r * ld;
        if (mask)
            for (int64_t j = 0; j < n; j++) sr[j] += 1.44269504088896341f * mask[r * ms[2] + j * ms[3]];
        __m512 vm = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, sr + nf);
        for (int64_t j = 0; j < nf; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(sr + j));
        mx[r] = _mm512_reduce_max_ps(vm);
    }
    for (int64_t r = 0; r < m; r++) {
        float *sr = s + r * ld;
        if (mx[r] == -INFINITY) {
            memset(sr, 0, (size_t)n * sizeof *sr);
            inv[r] = 0.0f;
            continue;
        }
        const __m512 vmx = _mm512_set1_ps(mx[r]);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < nf; j += 16) {
            const __m512 e = exp2_neg(_mm512_sub_ps(_mm512_loadu_ps(sr + j), vmx));
            _mm512_storeu_ps(sr + j, e);
            sum = _mm512_add_ps(sum, e);
        }
        const __m512 e = exp2_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, sr + nf), vmx));
        _mm512_mask_storeu_ps(sr + nf, tail, e);
        sum = _mm512_mask_add_ps(sum, tail, sum, e);
        inv[r] = 1.0f / _mm512_reduce_add_ps(sum);
    }
}

void kiln__attn_tile_head(const kiln_cu_flash *p, const kiln__attn_head *h, float scale,
                          int64_t i0, int64_t i1, int64_t rows, float *scratch) {
    const int64_t skp = up16(p->sk), dvp = up16(p->dv);
    float *kt = scratch, *vp = kt + p->d * skp, *s = vp + p->sk * dvp, *inv = s + rows * skp,
          *sc = inv + up16(rows), /* the scale per row, for the first product's store */
        *mx = sc + up16(rows);
    for (int64_t r = 0; r < rows; r++) sc[r] = scale * 1.44269504088896341f; /* base-2 scores */
    pack_kt(p, h->k, kt, skp);
    pack_v(p, h->v, vp, dvp);
    for (int64_t i = i0; i < i1; i += rows) {
        const int64_t m = i1 - i < rows ? i1 - i : rows;
        if (p->d > 0) product(m, skp, p->d, h->q + i * p->qs[2], p->qs[2], kt, skp, s, skp, sc);
        else memset(s, 0, (size_t)(m * skp) * sizeof *s); /* Q K^T of empty rows */
        softmax_rows(s, m, skp, p->sk, h->mask ? h->mask + i * p->ms[2] : NULL, p->ms, mx, inv);
        product(m, p->dv, p->sk, s, skp, vp, dvp, h->y + i * p->ys[2], p->ys[2], inv);
    }
}

#else
int kiln__attn_tile_available(void) { return 0; }
size_t kiln__attn_tile_scratch(const kiln_cu_flash *p, int64_t rows) {
    (void)p, (void)rows;
    return 0;
}
void kiln__attn_tile_head(const kiln_cu_flash *p, const kiln__attn_head *h, float scale,
                          int64_t i0, int64_t i1, int64_t rows, float *scratch) {
    (void)p, (void)h, (void)scale, (void)i0, (void)i1, (void)rows, (void)scratch;
}
#endif
