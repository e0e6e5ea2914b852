/*
 * sgemm.c — packed, cache-blocked single-precision GEMM for the float kernels (sgemm.h).
 *
 * Loop order (BLIS): jc over N in NC blocks, pc over K in KC blocks (pack B
 * block: NR-wide strips), ic over M in MC blocks (pack A block: MR-tall
 * strips, alpha folded in), then micro-tiles MR x NR computed by a
 * register-resident micro-kernel.  AVX-512: 12 x 32 (24 zmm accumulators),
 * AVX2+FMA: 6 x 16, otherwise a portable 4 x 8 kernel the compiler
 * vectorizes; tiles of at most 4 or 8 rows get kernels of their own, and
 * (AVX-512) strips of 16 columns or fewer a one-vector kernel, of 1..4 or
 * 17..20 columns narrow ones for the last 1..4 (micro_narrow).
 * Threads share C's micro-tiles, a contiguous run each (par_task; the
 * column split of a prepacked B in runs claimed as they go, dyn_task), split
 * along the side whose operand is not packed already (rows where a
 * column split would leave few, unequal strips; columns for a prepacked
 * weight B over 1 MiB that is wider than A is tall, rows for a prepacked
 * weight A taller than B is wide: each thread streams its share of the
 * weights); each thread packs
 * its own panels into thread-local scratch that is kept between calls and
 * freed when the thread exits.  A constant operand
 * (Conv's W as A, a Gemm/MatMul weight as B) may come packed once per
 * engine (kiln__sgemm_pack_a/_b, through kiln_quick_op.prepack): the
 * blocks then read their panels from it and skip that packing; a
 * prepacked B (weights, cold in cache at every inference) is prefetched
 * into L2 a strip ahead by the tiles of the strip before.
 */
#pragma GCC optimize("O3")
#include "device/cpu/sgemm.h"

#include "kiln_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define MR 12
#define NR 32
#elif defined(__AVX2__) && defined(__FMA__)
#define MR 6
#define NR 16
#else
#define MR 4
#define NR 8
#endif

#ifndef KC
#define KC 256
#endif
#define MC (MR * 12)
#define NC 2048

/* ------------------------------------------------------------ scratch */

typedef struct scratch {
    float *buf[KILN__CPU_SCRATCH_SLOTS];
    size_t cap[KILN__CPU_SCRATCH_SLOTS]; /* floats */
} scratch;

static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p) {
    scratch *s = p;
    if (!s) return;
    for (int i = 0; i < KILN__CPU_SCRATCH_SLOTS; i++) kiln__aligned_free(s->buf[i]);
    kiln__free(s);
}
static int g_key_made;
static void key_init(void) { g_key_made = pthread_key_create(&g_key, scratch_free) == 0; }

/* Worker threads free their scratch when they exit (the key's destructor);
 * the thread that unloads the library (the main thread at exit) does not
 * get that call, so free its scratch here: no memory outlives the process
 * unaccounted (valgrind-clean). */
__attribute__((destructor)) static void scratch_at_unload(void) {
    if (!g_key_made) return;
    scratch *s = pthread_getspecific(g_key);
    pthread_setspecific(g_key, NULL);
    scratch_free(s);
}

float *kiln__cpu_scratch(int slot, size_t floats) {
    pthread_once(&g_once, key_init);
    scratch *s = pthread_getspecific(g_key);
    if (!s) {
        s = kiln__calloc(1, sizeof *s);
        if (!s) return NULL;
        pthread_setspecific(g_key, s);
    }
    if (s->cap[slot] < floats) {
        kiln__aligned_free(s->buf[slot]);
        s->buf[slot] = kiln__aligned_alloc(floats * sizeof(float));
        s->cap[slot] = s->buf[slot] ? floats : 0;
    }
    return s->buf[slot];
}

float *kiln__cpu_scratch_or_fail(int slot, size_t floats, const char *what) {
    float *p = kiln__cpu_scratch(slot, floats);
    if (!p) kiln__misuse("%s: out of memory for %zu bytes of per-thread scratch", what, floats * sizeof(float));
    return p;
}

int kiln__sgemm_nr(void) { return NR; }
int kiln__sgemm_kc(void) { return KC; }

/* What the packed forms of built-in ops depend on, for engine files
 * (kiln_int.h): this GEMM's MR, NR and KC, the integer GEMM's layout
 * (ops/quantization/qlinear.c, fixed; bump "qgemm1" when it changes) and
 * the few-channel direct kernels' blocks (ops/nn/conv_fewc.c: 16 output
 * channels for the stem, PW_MB = 12 for mbconv tactic 3's expand conv;
 * a static assertion there keeps "fewc16x12" true; "fewcw16": tactic
 * 12's W is stored packed). */
const char *kiln__prepack_layout(void) {
#define KILN__STR_(x) #x
#define KILN__STR(x) KILN__STR_(x)
    return "sgemm mr" KILN__STR(MR) " nr" KILN__STR(NR) " kc" KILN__STR(KC) "; qgemm1; fewc16x12; fewcw16";
#undef KILN__STR
#undef KILN__STR_
}

/* ------------------------------------------------------------ packing */

#if defined(__AVX512F__)
/* One full strip of MR = 12 rows with contiguous rows (a_cs == 1): 16
 * columns at a time, a 12 x 16 block transposed in registers (unpack
 * pairs of rows, then pairs of pairs, then 128-bit lanes) and each column
 * written as the 12 floats of one k; the K tail through masked loads.
 * A transformer's activations (128 x 1024) packed ~4x faster than
 * through scalar transposes. */
static void pack_a_strip12(const float *a, int64_t a_rs, int64_t kc, float alpha, float *d) {
    const __m512 va = _mm512_set1_ps(alpha);
    for (int64_t k = 0; k < kc; k += 16) {
        int64_t n = kc - k < 16 ? kc - k : 16;
        __mmask16 lm = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1u);
        __m512 r[12];
        for (int i = 0; i < 12; i++) r[i] = _mm512_maskz_loadu_ps(lm, a + i * a_rs + k);
        __m512 t[12], u[12];
        for (int i = 0; i < 12; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        /* u[4g + j]: 128-bit lane L holds column 4L + j of rows 4g .. 4g+3 */
        for (int g4 = 0; g4 < 12; g4 += 4) {
            __m512d p0 = _mm512_castps_pd(t[g4]), p1 = _mm512_castps_pd(t[g4 + 1]);
            __m512d p2 = _mm512_castps_pd(t[g4 + 2]), p3 = _mm512_castps_pd(t[g4 + 3]);
            u[g4] = _mm512_castpd_ps(_mm512_unpacklo_pd(p0, p2));
            u[g4 + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p0, p2));
            u[g4 + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(p1, p3));
            u[g4 + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(p1, p3));
        }
        for (int j = 0; j < 4; j++) {
            __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
            __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
            __m512 w0 = _mm512_shuffle_f32x4(u[8 + j], u[8 + j], 0x88);
            __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[8 + j], 0xdd);
            __m512 col[4] = {_mm512_shuffle_f32x4(v0, w0, 0x88), _mm512_shuffle_f32x4(v1, w1, 0x88),
                             _mm512_shuffle_f32x4(v0, w0, 0xdd), _mm512_shuffle_f32x4(v1, w1, 0xdd)};
            for (int q = 0; q < 4; q++) { /* column 4q + j: rows 0..11 in elements 0..11 */
                int64_t kk = 4 * q + j;
                if (kk < n)
                    _mm512_mask_storeu_ps(d + (k + kk) * 12, 0x0FFF, _mm512_mul_ps(col[q], va));
            }
        }
    }
}
#endif

static void pack_a(const kiln__gemm *g, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                   float *dst) {
    const float alpha = g->alpha;
    for (int64_t s = 0; s < mc; s += MR) {
        int mr = (int)(mc - s < MR ? mc - s : MR);
        float *d = dst + s * kc;
        const float *a = g->a + (i0 + s) * g->a_rs + k0 * g->a_cs;
#if defined(__AVX512F__)
        if (g->a_cs == 1 && mr == MR) {
            pack_a_strip12(a, g->a_rs, kc, alpha, d);
            continue;
        }
        if (g->a_rs == 1) {
            /* A^T row-major (kiln::mbconv's X^T, an NCHW plane's pixels as
             * rows): a column's mr rows are contiguous, one masked load (the
             * generic loop below gathers them one float at a time: 10% of a
             * 14x14 -> 7x7 block's time, 5% after this) */
            const __m512 va = _mm512_set1_ps(alpha);
            const __mmask16 lm = (__mmask16)((1u << mr) - 1u);
            for (int64_t k = 0; k < kc; k++) {
                __m512 v = _mm512_maskz_loadu_ps(lm, a + k * g->a_cs);
                _mm512_mask_storeu_ps(d + k * MR, 0x0FFF, _mm512_mul_ps(v, va)); /* rows mr.. zero */
            }
            continue;
        }
#endif
        if (g->a_cs == 1 && mr == MR) {
            /* 8 columns at a time: 8 contiguous reads per row, then MR-wide
             * contiguous writes (an 8 x MR transpose through registers) */
            int64_t k = 0;
            for (; k + 8 <= kc; k += 8) {
                float t[MR][8];
                for (int i = 0; i < MR; i++) {
                    const float *ar = a + i * g->a_rs + k;
                    for (int q = 0; q < 8; q++) t[i][q] = ar[q];
                }
                for (int q = 0; q < 8; q++)
                    for (int i = 0; i < MR; i++) d[(k + q) * MR + i] = alpha * t[i][q];
            }
            for (; k < kc; k++)
                for (int i = 0; i < MR; i++) d[k * MR + i] = alpha * a[i * g->a_rs + k];
        } else if (g->a_cs == 1) {
            for (int i = 0; i < mr; i++) {
                const float *ar = a + i * g->a_rs;
                for (int64_t k = 0; k < kc; k++) d[k * MR + i] = alpha * ar[k];
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const float *ak = a + k * g->a_cs;
                for (int i = 0; i < mr; i++) d[k * MR + i] = alpha * ak[i * g->a_rs];
            }
        }
        if (mr < MR) {
#if defined(__AVX512F__)
            /* one masked store a column (the loop over rows mr.. became a
             * call to memset per column: 2% of a 14x14 Winograd conv) */
            const __mmask16 zm = (__mmask16)(((1u << MR) - 1u) & ~((1u << mr) - 1u));
            for (int64_t k = 0; k < kc; k++) _mm512_mask_storeu_ps(d + k * MR, zm, _mm512_setzero_ps());
#else
            for (int64_t k = 0; k < kc; k++)
                for (int i = mr; i < MR; i++) d[k * MR + i] = 0.0f;
#endif
        }
    }
}

/* The whole of A packed once: K block pc (kc deep) starts at
 * pc * round_up(M, MR); in it, the strip of rows [i, i + MR) at i * kc,
 * exactly what pack_a writes for one block.  gemm_block only starts row
 * blocks at multiples of MR, so a block's panels are a slice of this.
 * (B likewise, with columns and NR.) */
static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
/* Floats of a whole packed operand: `padded` rows (or columns) of K, in
 * whole 64-byte lines. */
static size_t whole_floats(int64_t padded, int64_t K) {
    size_t n = (size_t)padded * (size_t)K;
    return (n + 15) / 16 * 16;
}

size_t kiln__sgemm_pack_a_floats(int64_t M, int64_t K) { return whole_floats(round_up(M, MR), K); }

/* The floats after the panels, up to whole_floats, are zeroed: a packed
 * operand goes into engine files, which must hold no leftover heap bytes
 * (and must come out the same from the same weights). */
static void zero_tail(float *dst, int64_t padded, int64_t K) {
    size_t used = (size_t)padded * (size_t)K;
    memset(dst + used, 0, (whole_floats(padded, K) - used) * sizeof(float));
}

void kiln__sgemm_pack_a(const kiln__gemm *g, float *dst) {
    const int64_t mp = round_up(g->M, MR);
    for (int64_t pc = 0; pc < g->K; pc += KC) {
        int64_t kc = g->K - pc < KC ? g->K - pc : KC;
        pack_a(g, 0, g->M, pc, kc, dst + pc * mp);
    }
    zero_tail(dst, mp, g->K);
}

static void pack_b_matrix(const kiln__gemm *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                          float *dst) {
    for (int64_t s = 0; s < nc; s += NR) {
        int nr = (int)(nc - s < NR ? nc - s : NR);
        float *d = dst + s * kc;
        const float *b = g->b + k0 * g->b_rs + (n0 + s) * g->b_cs;
        if (g->b_cs == 1) {
            if (nr == NR) {
                for (int64_t k = 0; k < kc; k++) memcpy(d + k * NR, b + k * g->b_rs, NR * sizeof(float));
            } else {
                for (int64_t k = 0; k < kc; k++) {
                    const float *bk = b + k * g->b_rs;
                    int j = 0;
                    for (; j < nr; j++) d[k * NR + j] = bk[j];
                    for (; j < NR; j++) d[k * NR + j] = 0.0f;
                }
            }
        } else {
            for (int j = 0; j < nr; j++) {
                const float *bj = b + j * g->b_cs;
                for (int64_t k = 0; k < kc; k++) d[k * NR + j] = bj[k * g->b_rs];
            }
            for (int64_t k = 0; k < kc; k++)
                for (int j = nr; j < NR; j++) d[k * NR + j] = 0.0f;
        }
    }
}

/* The whole of a B matrix packed once: K block pc at pc * round_up(N, NR);
 * in it, the strip of columns [j, j + NR) at j * kc (what pack_b_matrix
 * writes for one block).  Column blocks start at multiples of NR. */
size_t kiln__sgemm_pack_b_floats(int64_t K, int64_t N) { return whole_floats(round_up(N, NR), K); }

void kiln__sgemm_pack_b(const kiln__gemm *g, float *dst) {
    const int64_t np = round_up(g->N, NR);
    for (int64_t pc = 0; pc < g->K; pc += KC) {
        int64_t kc = g->K - pc < KC ? g->K - pc : KC;
        pack_b_matrix(g, pc, kc, 0, g->N, dst + pc * np);
    }
    zero_tail(dst, np, g->K);
}

static void pack_b_shift(const kiln__gemm *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                         float *dst) {
    for (int64_t s = 0; s < nc; s += NR) {
        int nr = (int)(nc - s < NR ? nc - s : NR);
        float *d = dst + s * kc;
        if (nr == NR) {
            for (int64_t k = 0; k < kc; k++)
                memcpy(d + k * NR, g->b_shift + g->b_off[k0 + k] + n0 + s, NR * sizeof(float));
            continue;
        }
        for (int64_t k = 0; k < kc; k++) {
            const float *src = g->b_shift + g->b_off[k0 + k] + n0 + s;
            int j = 0;
            for (; j < nr; j++) d[k * NR + j] = src[j];
            for (; j < NR; j++) d[k * NR + j] = 0.0f;
        }
    }
}

/* ------------------------------------------------------------ micro-kernels */

/* acc = A_panel * B_panel over kc; then stored into c (mr x nr valid):
 * first != 0: c = acc + bias (or c + acc if accumulate), else c += acc. */
typedef struct store_info {
    int load;          /* add existing C */
    const float *bias; /* per row, already offset to the tile, or NULL */
    const float *res;  /* the residual (kiln__gemm.res) at the tile, or NULL */
    int64_t ldr;
    int relu;
    /* A prepacked B's next strip, from memory into L2 while this tile
     * computes: a line every 4 k (micro), or NULL. */
    const float *pf;
    /* 1: B is a prepacked panel this tile reads first and at most one
     * more tile follows (pf then covers little of the next strip): its own
     * stream is prefetched into L2 B_PF_FAR floats ahead (micro,
     * micro_short; packed strips lie one after the other). */
    int pf_far;
} store_info;

static inline void store_tile(float *acc, float *c, int64_t ldc, int mr, int nr,
                              const store_info *si) {
    for (int i = 0; i < mr; i++) {
        float *cr = c + i * ldc;
        const float *ar = acc + i * NR;
        float bi = si->bias ? si->bias[i] : 0.0f;
        for (int j = 0; j < nr; j++) {
            float v = ar[j] + bi + (si->load ? cr[j] : 0.0f);
            if (si->res) v += si->res[i * si->ldr + j];
            if (si->relu && v < 0.0f) v = 0.0f;
            cr[j] = v;
        }
    }
}

#if defined(__AVX512F__)
#define HAVE_SHIFT_KERNEL 1
#ifndef A_PF
#define A_PF (MR * 48)
#endif
#define A_PF_FAR (MR * 256)
#define B_PF_FAR (NR * 128)
/* B read in place (shifted rows): row k + SHIFT_PF into L1 at step k.  Its
 * rows lie a row pitch apart, which the hardware prefetchers do not follow,
 * and a strip's rows (kc x 2-3 lines: 48 KB at kc 256) do not stay in L1
 * from one row tile to the next, so every tile waited on L2 for each k
 * (ResNet-50's in-place 1x1 convs, 512 -> 128 at 28x28: 1.3-1.6x hot,
 * 256 -> 64 at 56x56 1.2-1.4x).  The index stops at the panel's last row. */
#ifndef SHIFT_PF
#define SHIFT_PF 8
#endif
/* The 12 x 32 tile's 24 accumulators (ACC_DECL), one k step into them
 * (K_STEP: B's two vectors B0, B1 times the 12 floats of A at ak, each
 * broadcast), and their store into C (ACC_STORE): a full tile's rows
 * straight from the registers (store_row); through the rows[] array GCC
 * spilled all 24 to the stack and loaded them back, 48 memory operations
 * per tile, 3-7% of a K = 64 GEMM (ResNet-50's 64 -> 256 1x1 convs). */
#define ACC_DECL                                                               \
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();               \
    __m512 c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;   \
    __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00;   \
    __m512 c70 = c00, c71 = c00, c80 = c00, c81 = c00, c90 = c00, c91 = c00;   \
    __m512 ca0 = c00, ca1 = c00, cb0 = c00, cb1 = c00;
#define ROW(r, x0, x1)                                                         \
    av = _mm512_set1_ps(ak[r]);                                                \
    x0 = _mm512_fmadd_ps(av, b0, x0);                                          \
    x1 = _mm512_fmadd_ps(av, b1, x1);
#define K_STEP(B0, B1, AK)                                                     \
    {                                                                          \
        const float *ak = (AK);                                                \
        __m512 b0 = B0, b1 = B1, av;                                           \
        ROW(0, c00, c01) ROW(1, c10, c11) ROW(2, c20, c21) ROW(3, c30, c31)    \
        ROW(4, c40, c41) ROW(5, c50, c51) ROW(6, c60, c61) ROW(7, c70, c71)    \
        ROW(8, c80, c81) ROW(9, c90, c91) ROW(10, ca0, ca1) ROW(11, cb0, cb1)  \
    }
#define ACC_STORE                                                              \
    if (mr == MR && nr == NR) {                                                \
        store_row(c, c00, c01, si, 0);                                         \
        store_row(c + ldc, c10, c11, si, 1);                                   \
        store_row(c + 2 * ldc, c20, c21, si, 2);                               \
        store_row(c + 3 * ldc, c30, c31, si, 3);                               \
        store_row(c + 4 * ldc, c40, c41, si, 4);                               \
        store_row(c + 5 * ldc, c50, c51, si, 5);                               \
        store_row(c + 6 * ldc, c60, c61, si, 6);                               \
        store_row(c + 7 * ldc, c70, c71, si, 7);                               \
        store_row(c + 8 * ldc, c80, c81, si, 8);                               \
        store_row(c + 9 * ldc, c90, c91, si, 9);                               \
        store_row(c + 10 * ldc, ca0, ca1, si, 10);                             \
        store_row(c + 11 * ldc, cb0, cb1, si, 11);                             \
    } else {                                                                   \
        __m512 rows[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},  \
                              {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71},  \
                              {c80, c81}, {c90, c91}, {ca0, ca1}, {cb0, cb1}}; \
        store_rows(rows, c, ldc, mr, nr, si);                                  \
    }
/* B rows come from `bload(k)`: packed panel or shifted rows in place. */
#define MICRO_BODY(BLOAD0, BLOAD1, BSTEP)                                      \
    ACC_DECL                                                                   \
    for (int64_t k = 0; k < kc; k++) {                                         \
        _mm_prefetch((const char *)(a + A_PF), _MM_HINT_T0);                   \
        K_STEP(BLOAD0, BLOAD1, a)                                              \
        a += MR;                                                               \
        BSTEP;                                                                 \
    }                                                                          \
    ACC_STORE

/* Row i of a full tile: v0, v1 plus bias, C, residual; relu; stored. */
static inline __attribute__((always_inline)) void store_row(float *cr, __m512 v0, __m512 v1,
                                                            const store_info *si, int i) {
    if (si->bias) {
        __m512 bb = _mm512_set1_ps(si->bias[i]);
        v0 = _mm512_add_ps(v0, bb);
        v1 = _mm512_add_ps(v1, bb);
    }
    if (si->load) {
        v0 = _mm512_add_ps(v0, _mm512_loadu_ps(cr));
        v1 = _mm512_add_ps(v1, _mm512_loadu_ps(cr + 16));
    }
    if (si->res) {
        v0 = _mm512_add_ps(v0, _mm512_loadu_ps(si->res + i * si->ldr));
        v1 = _mm512_add_ps(v1, _mm512_loadu_ps(si->res + i * si->ldr + 16));
    }
    if (si->relu) { /* max(0, v): maxps returns its second operand for NaN, so NaN stays */
        v0 = _mm512_max_ps(_mm512_setzero_ps(), v0);
        v1 = _mm512_max_ps(_mm512_setzero_ps(), v1);
    }
    _mm512_storeu_ps(cr, v0);
    _mm512_storeu_ps(cr + 16, v1);
}

static inline void store_rows(__m512 rows[MR][2], float *c, int64_t ldc, int mr, int nr,
                              const store_info *si) {
    if (nr == NR) {
        for (int i = 0; i < mr; i++) store_row(c + i * ldc, rows[i][0], rows[i][1], si, i);
        return;
    }
    float acc[MR * NR] __attribute__((aligned(64)));
    for (int i = 0; i < MR; i++) {
        _mm512_store_ps(acc + i * NR, rows[i][0]);
        _mm512_store_ps(acc + i * NR + 16, rows[i][1]);
    }
    store_tile(acc, c, ldc, mr, nr, si);
}

/* Packed B: its two lines 16 k-steps ahead are prefetched too (a weight
 * panel's first tile reads it from memory; transformer encoder -3%).
 * micro_far (si->pf_far) also its own stream B_PF_FAR ahead: a copy of the
 * loop, so that the common one carries no test per k. */
#define MICRO_PACKED(FAR_PF)                                                   \
    const float *pf = si->pf ? si->pf : b;                                    \
    MICRO_BODY(_mm512_load_ps(b), _mm512_load_ps(b + 16),                     \
               _mm_prefetch((const char *)(b + 16 * NR), _MM_HINT_T0);        \
               _mm_prefetch((const char *)(b + 16 * NR + 16), _MM_HINT_T0);   \
               _mm_prefetch((const char *)(pf + (k >> 2) * 16), _MM_HINT_T1); \
               FAR_PF; b += NR)
static void micro(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int mr,
                  int nr, const store_info *si) {
    MICRO_PACKED((void)0)
}
static void micro_far(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int mr,
                      int nr, const store_info *si) {
    MICRO_PACKED(_mm_prefetch((const char *)(b + B_PF_FAR), _MM_HINT_T1);
                 _mm_prefetch((const char *)(b + B_PF_FAR + 16), _MM_HINT_T1))
}
#undef MICRO_PACKED

/* B row k at base + off[k] (unaligned, in place). */
static void micro_shift(int64_t kc, const float *a, const float *base, const int64_t *off, float *c,
                        int64_t ldc, int mr, int nr, const store_info *si) {
    const int64_t kl = kc - 1;
    MICRO_BODY(_mm512_loadu_ps(base + off[k]), _mm512_loadu_ps(base + off[k] + 16),
               const float *pr = base + off[k + SHIFT_PF < kl ? k + SHIFT_PF : kl];
               _mm_prefetch((const char *)pr, _MM_HINT_T0); /* the 2-3 lines of 32 floats */
               _mm_prefetch((const char *)(pr + 16), _MM_HINT_T0);
               _mm_prefetch((const char *)(pr + 31), _MM_HINT_T0))
}
#undef ROW

/* A tile of at most R rows and W vectors of 16 columns, short of the full
 * MR x NR tile: the last row tile of M = 64 (4 of 12 rows) or the last
 * strip of N = 196 (4 of 32 columns), which the full kernel computes at
 * the cost of a whole tile.  B from the packed panel (off == NULL) or
 * shifted rows; the A panel keeps its MR-float stride per k. */
static inline __attribute__((always_inline)) void
micro_short(const int R, const int W, const int FAR, int64_t kc, const float *a, const float *b, const float *base,
            const int64_t *off, float *c, int64_t ldc, int mr, int nr, const store_info *si) {
    __m512 x0[MR], x1[MR];
    for (int i = 0; i < R; i++) x0[i] = x1[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        _mm_prefetch((const char *)(a + A_PF), _MM_HINT_T0);
        /* and ~256 k ahead into L2: a tile of 16 or fewer columns does too
         * little work per A panel for the hardware prefetch to keep up
         * with weights streamed from memory (Winograd's GEMMs on 7x7 and
         * 14x14 planes: 9-17 MB of transformed weights a layer) */
        _mm_prefetch((const char *)(a + A_PF_FAR), _MM_HINT_T1);
        __m512 b0, b1 = _mm512_setzero_ps();
        if (off) {
            b0 = _mm512_loadu_ps(base + off[k]);
            if (W == 2) b1 = _mm512_loadu_ps(base + off[k] + 16);
            const float *pr = base + off[k + SHIFT_PF < kc - 1 ? k + SHIFT_PF : kc - 1];
            _mm_prefetch((const char *)pr, _MM_HINT_T0);
            _mm_prefetch((const char *)(pr + 16 * W - 1), _MM_HINT_T0);
            if (W == 2) _mm_prefetch((const char *)(pr + 16), _MM_HINT_T0);
        } else {
            b0 = _mm512_load_ps(b);
            if (W == 2) b1 = _mm512_load_ps(b + 16);
            _mm_prefetch((const char *)(b + 16 * NR), _MM_HINT_T0);
            if (W == 2) _mm_prefetch((const char *)(b + 16 * NR + 16), _MM_HINT_T0);
            if (FAR) {
                _mm_prefetch((const char *)(b + B_PF_FAR), _MM_HINT_T1);
                if (W == 2) _mm_prefetch((const char *)(b + B_PF_FAR + 16), _MM_HINT_T1);
            }
            b += NR;
        }
        for (int i = 0; i < R; i++) {
            __m512 av = _mm512_set1_ps(a[i]);
            x0[i] = _mm512_fmadd_ps(av, b0, x0[i]);
            if (W == 2) x1[i] = _mm512_fmadd_ps(av, b1, x1[i]);
        }
        a += MR;
    }
    if (W == 2 && nr == NR) { /* from the registers, as ACC_STORE */
        for (int i = 0; i < R; i++)
            if (i < mr) store_row(c + i * ldc, x0[i], x1[i], si, i);
        return;
    }
    __m512 rows[MR][2];
    for (int i = 0; i < MR; i++) {
        rows[i][0] = i < R ? x0[i] : _mm512_setzero_ps();
        rows[i][1] = i < R && W == 2 ? x1[i] : _mm512_setzero_ps();
    }
    store_rows(rows, c, ldc, mr, nr, si);
}

#define MICRO_SHORT(name, R, W, FAR)                                                   \
    static void name(int64_t kc, const float *a, const float *b, const float *base,    \
                     const int64_t *off, float *c, int64_t ldc, int mr, int nr,        \
                     const store_info *si) {                                           \
        micro_short(R, W, FAR, kc, a, b, base, off, c, ldc, mr, nr, si);               \
    }
MICRO_SHORT(micro_r4, 4, 2, 0)
MICRO_SHORT(micro_r8, 8, 2, 0)
MICRO_SHORT(micro_r4_far, 4, 2, 1)
MICRO_SHORT(micro_r8_far, 8, 2, 1)
MICRO_SHORT(micro_r4_w1, 4, 1, 0)
MICRO_SHORT(micro_r8_w1, 8, 1, 0)
MICRO_SHORT(micro_r12_w1, 12, 1, 0)
#undef MICRO_SHORT

/* Columns [j0, j0 + w) of a strip, w <= NARROW, for all MR rows: one
 * accumulator per column holds the MR rows of it (the A panel's k-th MR
 * floats, one load), times B(k, j) broadcast.  A strip of 17..20 columns
 * (N = 49: a 7x7 plane; ResNet-50's layer4 1x1 convs, its 28x28 Winograd
 * GEMMs) is then 16 + w columns of work instead of the full kernel's 32,
 * and a last strip of 1..4 (N = 196) w instead of 16.  k is unrolled by
 * four with separate accumulators so the FMA chains overlap. */
#define NARROW 4
static inline __attribute__((always_inline)) void
narrow_w(const int w, const int shifted, int64_t kc, const float *a, const float *b, const float *base,
         const int64_t *off, int j0, float *c, int64_t ldc, int mr, const store_info *si) {
    const __mmask16 rows = (__mmask16)((1u << MR) - 1u);
    __m512 x[4][NARROW]; /* [k % 4][column] */
    for (int u = 0; u < 4; u++)
        for (int q = 0; q < NARROW; q++) x[u][q] = _mm512_setzero_ps();
#define NARROW_B(kk, q) (shifted ? base[off[kk] + j0 + (q)] : b[(kk) * NR + j0 + (q)])
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        _mm_prefetch((const char *)(a + A_PF), _MM_HINT_T0);
        for (int u = 0; u < 4; u++) {
            __m512 av = _mm512_maskz_loadu_ps(rows, a + u * MR);
            for (int q = 0; q < w; q++) x[u][q] = _mm512_fmadd_ps(av, _mm512_set1_ps(NARROW_B(k + u, q)), x[u][q]);
        }
        a += 4 * MR;
    }
    for (; k < kc; k++, a += MR) {
        __m512 av = _mm512_maskz_loadu_ps(rows, a);
        for (int q = 0; q < w; q++) x[0][q] = _mm512_fmadd_ps(av, _mm512_set1_ps(NARROW_B(k, q)), x[0][q]);
    }
#undef NARROW_B
    float acc[NARROW][16] __attribute__((aligned(64)));
    for (int q = 0; q < w; q++)
        _mm512_store_ps(acc[q], _mm512_add_ps(_mm512_add_ps(x[0][q], x[1][q]), _mm512_add_ps(x[2][q], x[3][q])));
    for (int i = 0; i < mr; i++) {
        float *cr = c + i * ldc + j0;
        float bi = si->bias ? si->bias[i] : 0.0f;
        for (int q = 0; q < w; q++) {
            float v = acc[q][i] + bi + (si->load ? cr[q] : 0.0f);
            if (si->res) v += si->res[i * si->ldr + j0 + q];
            if (si->relu && v < 0.0f) v = 0.0f;
            cr[q] = v;
        }
    }
}

/* narrow_w with w and the B form as constants (the accumulators stay in
 * registers). */
static void micro_narrow(int64_t kc, const float *a, const float *b, const float *base,
                         const int64_t *off, int j0, int w, float *c, int64_t ldc, int mr,
                         const store_info *si) {
#define NARROW_CASE(W)                                                              \
    case W:                                                                         \
        if (off) narrow_w(W, 1, kc, a, b, base, off, j0, c, ldc, mr, si);          \
        else narrow_w(W, 0, kc, a, b, base, off, j0, c, ldc, mr, si);              \
        return;
    switch (w) {
        NARROW_CASE(1)
        NARROW_CASE(2)
        NARROW_CASE(3)
        NARROW_CASE(4)
    }
#undef NARROW_CASE
}

/* The kernel for a tile of mr rows and nr columns: B packed (off == NULL:
 * b) or shifted rows (base + off[k]). */
static inline void micro_rows(int64_t kc, const float *a, const float *b, const float *base,
                              const int64_t *off, float *c, int64_t ldc, int mr, int nr,
                              const store_info *si) {
    if (mr > 8 && (nr <= NARROW || (nr > 16 && nr <= 16 + NARROW))) {
        /* 16 columns on the one-vector kernel (if as many), the rest narrow */
        if (nr > 16) micro_r12_w1(kc, a, b, base, off, c, ldc, mr, 16, si);
        micro_narrow(kc, a, b, base, off, nr > 16 ? 16 : 0, nr > 16 ? nr - 16 : nr, c, ldc, mr, si);
        return;
    }
    if (nr <= 16) {
        if (mr <= 4)
            micro_r4_w1(kc, a, b, base, off, c, ldc, mr, nr, si);
        else if (mr <= 8)
            micro_r8_w1(kc, a, b, base, off, c, ldc, mr, nr, si);
        else
            micro_r12_w1(kc, a, b, base, off, c, ldc, mr, nr, si);
    } else if (mr <= 4 && si->pf_far)
        micro_r4_far(kc, a, b, base, off, c, ldc, mr, nr, si);
    else if (mr <= 4)
        micro_r4(kc, a, b, base, off, c, ldc, mr, nr, si);
    else if (mr <= 8 && si->pf_far)
        micro_r8_far(kc, a, b, base, off, c, ldc, mr, nr, si);
    else if (mr <= 8)
        micro_r8(kc, a, b, base, off, c, ldc, mr, nr, si);
    else if (off)
        micro_shift(kc, a, base, off, c, ldc, mr, nr, si);
    else if (si->pf_far)
        micro_far(kc, a, b, c, ldc, mr, nr, si);
    else
        micro(kc, a, b, c, ldc, mr, nr, si);
}
#elif defined(__AVX2__) && defined(__FMA__)
static void micro(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int mr,
                  int nr, const store_info *si) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        __m256 av;
#define ROW(r, x0, x1)                                                         \
    av = _mm256_broadcast_ss(a + r);                                           \
    x0 = _mm256_fmadd_ps(av, b0, x0);                                          \
    x1 = _mm256_fmadd_ps(av, b1, x1);
        ROW(0, c00, c01) ROW(1, c10, c11) ROW(2, c20, c21)
        ROW(3, c30, c31) ROW(4, c40, c41) ROW(5, c50, c51)
#undef ROW
        a += MR;
        b += NR;
    }
    float acc[MR * NR] __attribute__((aligned(64)));
    __m256 rows[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    for (int i = 0; i < MR; i++) {
        _mm256_store_ps(acc + i * NR, rows[i][0]);
        _mm256_store_ps(acc + i * NR + 8, rows[i][1]);
    }
    store_tile(acc, c, ldc, mr, nr, si);
}
#else
static void micro(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int mr,
                  int nr, const store_info *si) {
    float acc[MR * NR];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i * NR + j] += a[i] * b[j];
        a += MR;
        b += NR;
    }
    store_tile(acc, c, ldc, mr, nr, si);
}
#endif

/* ------------------------------------------------------------ driver */

static inline float dot_strided(const float *x, int64_t xs, const float *y, int64_t ys, int64_t n) {
    if (xs == 1 && ys == 1) {
        typedef float v8 __attribute__((vector_size(32)));
        v8 a0 = {0}, a1 = {0};
        int64_t k = 0;
        for (; k + 16 <= n; k += 16) {
            v8 x0, x1, y0, y1;
            memcpy(&x0, x + k, 32);
            memcpy(&x1, x + k + 8, 32);
            memcpy(&y0, y + k, 32);
            memcpy(&y1, y + k + 8, 32);
            a0 += x0 * y0;
            a1 += x1 * y1;
        }
        a0 += a1;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int i = 0; i < 8; i += 4) {
            s0 += a0[i];
            s1 += a0[i + 1];
            s2 += a0[i + 2];
            s3 += a0[i + 3];
        }
        for (; k + 4 <= n; k += 4) {
            s0 += x[k] * y[k];
            s1 += x[k + 1] * y[k + 1];
            s2 += x[k + 2] * y[k + 2];
            s3 += x[k + 3] * y[k + 3];
        }
        for (; k < n; k++) s0 += x[k] * y[k];
        return (s0 + s1) + (s2 + s3);
    }
    float s = 0;
    for (int64_t k = 0; k < n; k++) s += x[k * xs] * y[k * ys];
    return s;
}

#if defined(__AVX512F__)
/* y[j .. j + n) of gemv_cols: n columns per pass share each load of x
 * and keep n independent FMA chains (each column's sum in the same order
 * whatever n). */
static inline __attribute__((always_inline)) void gemv_cols_n(const int n, const float *x, const float *b,
                                                              int64_t ldb, int64_t K, int64_t j, float *y) {
    const float *bp = b + j * ldb;
    __m512 s[8];
    for (int c = 0; c < n; c++) s[c] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 xv = _mm512_loadu_ps(x + k);
        for (int c = 0; c < n; c++) s[c] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(bp + c * ldb + k), s[c]);
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1u);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
        for (int c = 0; c < n; c++) s[c] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, bp + c * ldb + k), s[c]);
    }
    for (int c = 0; c < n; c++) y[j + c] = _mm512_reduce_add_ps(s[c]);
}
#endif

/* y[j] = dot(x, B column j) for j in [n0, n1), column j contiguous at
 * b + j * ldb (Gemm with transB = 1: the weights as stored).  Eight
 * columns per pass (then four): eight streams of B in flight, where four
 * left MobileNetV2's 1280 x 1000 classifier waiting on memory (Zen 5 VM:
 * 108-124 -> 82-114 us), so the loop streams B at memory speed. */
static void gemv_cols(const float *x, const float *b, int64_t ldb, int64_t K, int64_t n0,
                      int64_t n1, float *y) {
    int64_t j = n0;
#if defined(__AVX512F__)
    for (; j + 8 <= n1; j += 8) gemv_cols_n(8, x, b, ldb, K, j, y);
    for (; j + 4 <= n1; j += 4) gemv_cols_n(4, x, b, ldb, K, j, y);
#elif defined(__AVX2__) && defined(__FMA__)
    for (; j + 4 <= n1; j += 4) {
        const float *b0 = b + j * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) {
            __m256 xv = _mm256_loadu_ps(x + k);
            s0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(b0 + k), s0);
            s1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(b1 + k), s1);
            s2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(b2 + k), s2);
            s3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(b3 + k), s3);
        }
        float t[4][8];
        _mm256_storeu_ps(t[0], s0);
        _mm256_storeu_ps(t[1], s1);
        _mm256_storeu_ps(t[2], s2);
        _mm256_storeu_ps(t[3], s3);
        for (int c = 0; c < 4; c++) {
            float v = ((t[c][0] + t[c][1]) + (t[c][2] + t[c][3])) +
                      ((t[c][4] + t[c][5]) + (t[c][6] + t[c][7]));
            for (int64_t kk = k; kk < K; kk++) v += x[kk] * b[(j + c) * ldb + kk];
            y[j + c] = v;
        }
    }
#endif
    for (; j < n1; j++) y[j] = dot_strided(x, 1, b + j * ldb, 1, K);
}

/* y[n0:n1] = x * B[:, n0:n1] for a row-major B (rows at b + k * ldb):
 * register blocks of columns accumulate over all of K, so y is written
 * once and B is read once. */
static void gemv_rows(const float *x, const float *b, int64_t ldb, int64_t K, int64_t n0,
                      int64_t n1, float *y) {
    int64_t j = n0;
#if defined(__AVX512F__)
    for (; j + 64 <= n1; j += 64) {
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        const float *bp = b + j;
        for (int64_t k = 0; k < K; k++, bp += ldb) {
            __m512 xv = _mm512_set1_ps(x[k]);
            s0 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(bp), s0);
            s1 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(bp + 16), s1);
            s2 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(bp + 32), s2);
            s3 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(bp + 48), s3);
        }
        _mm512_storeu_ps(y + j, s0);
        _mm512_storeu_ps(y + j + 16, s1);
        _mm512_storeu_ps(y + j + 32, s2);
        _mm512_storeu_ps(y + j + 48, s3);
    }
    for (; j + 16 <= n1; j += 16) {
        __m512 s0 = _mm512_setzero_ps();
        const float *bp = b + j;
        for (int64_t k = 0; k < K; k++, bp += ldb)
            s0 = _mm512_fmadd_ps(_mm512_set1_ps(x[k]), _mm512_loadu_ps(bp), s0);
        _mm512_storeu_ps(y + j, s0);
    }
#elif defined(__AVX2__) && defined(__FMA__)
    for (; j + 32 <= n1; j += 32) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        const float *bp = b + j;
        for (int64_t k = 0; k < K; k++, bp += ldb) {
            __m256 xv = _mm256_set1_ps(x[k]);
            s0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(bp), s0);
            s1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(bp + 8), s1);
            s2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(bp + 16), s2);
            s3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(bp + 24), s3);
        }
        _mm256_storeu_ps(y + j, s0);
        _mm256_storeu_ps(y + j + 8, s1);
        _mm256_storeu_ps(y + j + 16, s2);
        _mm256_storeu_ps(y + j + 24, s3);
    }
#endif
    if (j < n1) {
        for (int64_t jj = j; jj < n1; jj++) y[jj] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float xv = x[k];
            const float *br = b + k * ldb;
            for (int64_t jj = j; jj < n1; jj++) y[jj] += xv * br[jj];
        }
    }
}

/* Matrix-vector shapes (M == 1 or N == 1): packing would triple the memory
 * traffic of what is a bandwidth-bound loop, so stream the matrix once.
 * Returns 1 if handled. */
static int gemv_block(const kiln__gemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    int64_t K = g->K;
    if (g->M == 1 && !g->packb && !g->b_shift) {
        float *y = g->c;
        float bias = g->bias_row ? g->bias_row[0] : 0.0f;
        int cols = g->b_rs == 1 && g->b_cs != 1, rows = g->b_cs == 1;
        if (!cols && !rows) return 0;
        /* x = the A row, contiguous (a strided row is copied to the stack;
         * too long a one takes the packed path) */
        float xs[2048];
        const float *x = g->a;
        if (g->a_cs != 1) {
            if (K > 2048) return 0;
            for (int64_t k = 0; k < K; k++) xs[k] = g->a[k * g->a_cs];
            x = xs;
        }
        float alpha = g->alpha;
        if (!g->accumulate) {
            if (cols) gemv_cols(x, g->b, g->b_cs, K, n0, n1, y);
            else gemv_rows(x, g->b, g->b_rs, K, n0, n1, y);
            for (int64_t j = n0; j < n1; j++) {
                float v = alpha * y[j] + bias;
                y[j] = g->relu && v < 0 ? 0 : v;
            }
            if (g->done) g->done(g->done_ud, 0, 1, n0, n1 - n0);
            return 1;
        }
        /* C += x * B: compute a block into a small buffer, then add */
        float t[256];
        for (int64_t j0 = n0; j0 < n1; j0 += 256) {
            int64_t j1 = n1 - j0 < 256 ? n1 : j0 + 256;
            if (cols) gemv_cols(x, g->b + j0 * g->b_cs, g->b_cs, K, 0, j1 - j0, t);
            else gemv_rows(x, g->b + j0, g->b_rs, K, 0, j1 - j0, t);
            for (int64_t j = j0; j < j1; j++) {
                float v = y[j] + alpha * t[j - j0] + bias;
                y[j] = g->relu && v < 0 ? 0 : v;
            }
            if (g->done) g->done(g->done_ud, 0, 1, j0, j1 - j0);
        }
        return 1;
    }
    if (g->N == 1 && !g->packb && !g->b_shift && g->a_cs == 1) {
        for (int64_t i = m0; i < m1; i++) {
            float v = g->alpha * dot_strided(g->a + i * g->a_rs, 1, g->b, g->b_rs, K);
            if (g->bias_row) v += g->bias_row[i];
            if (g->accumulate) v += g->c[i * g->ldc];
            g->c[i * g->ldc] = g->relu && v < 0 ? 0 : v;
        }
        if (g->done) g->done(g->done_ud, m0, m1, 0, 1);
        return 1;
    }
    return 0;
}

/* Columns [n0, n0 + nc) x rows [k0, k0 + kc) of B (not prepacked) packed
 * into dst, whatever form B has. */
static void pack_b(const kiln__gemm *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    if (g->b_shift)
        pack_b_shift(g, k0, kc, n0, nc, dst);
    else if (g->packb)
        g->packb(g->packb_ud, k0, kc, n0, nc, NR, dst);
    else
        pack_b_matrix(g, k0, kc, n0, nc, dst);
}

/* Asks for part [k0, k1) of the rows of the NR-column strip of B at
 * column n0 (B in place or a plain row-major matrix), into L2: its rows lie
 * one row pitch apart, which the hardware prefetchers do not follow (a
 * 1x1 conv's 256 input channels, 12.5 KB apart at 56x56). */
static void prefetch_b_strip(const kiln__gemm *g, int64_t k0, int64_t k1, int64_t n0) {
    if (g->b_shift)
        for (int64_t k = k0; k < k1; k++) {
            const float *r = g->b_shift + g->b_off[k] + n0;
            for (int q = 0; q < NR; q += 16) __builtin_prefetch(r + q, 0, 2);
        }
    else if (!g->packb && g->b_cs == 1)
        for (int64_t k = k0; k < k1; k++) {
            const float *r = g->b + k * g->b_rs + n0;
            for (int q = 0; q < NR; q += 16) __builtin_prefetch(r + q, 0, 2);
        }
}

/* The GEMM restricted to rows [m0, m1) and columns [n0, n1).  n_after:
 * the column where this thread's next block (the same rows) starts, or
 * -1 (none, or unknown): this block's last tiles prefetch the first strip
 * of B and the C lines of that block. */
static void gemm_block_(const kiln__gemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                        int64_t n_after) {
    int64_t K = g->K;
    if (m1 <= m0 || n1 <= n0) return;
    if (K > 0 && !g->res && gemv_block(g, m0, m1, n0, n1)) return;
    if (K == 0) {
        for (int64_t i = m0; i < m1; i++) {
            float bi = g->bias_row ? g->bias_row[i] : 0.0f;
            for (int64_t j = n0; j < n1; j++) {
                float v = (g->accumulate ? g->c[i * g->ldc + j] : 0.0f) + bi;
                if (g->res) v += g->res[i * g->ldr + j];
                if (g->relu && v < 0.0f) v = 0.0f;
                g->c[i * g->ldc + j] = v;
            }
        }
        if (g->done) g->done(g->done_ud, m0, m1, n0, n1 - n0);
        return;
    }
    int64_t kcmax = K < KC ? K : KC;
    /* With a `done` hook (a fused epilogue, a conv's copy into Y) and one K
     * block, column blocks of at most ~64K floats of C, so that the hook
     * finds the block still in L2 (MobileNetV2's 16->96 1x1 conv at 112x112
     * wrote blocks of 96 x 2048, larger than a core's L2, and its Clip read
     * them back from memory).  Not for a long K: each column block streams
     * all of A again (ResNet-18's 3x3 convs at 28x28: 2.4 MB each). */
    int64_t ncb = NC;
    if (g->done && K <= KC) {
        int64_t mrows = (m1 - m0) < MC ? (m1 - m0) : MC;
        ncb = (1 << 16) / (mrows > 0 ? mrows : 1) / NR * NR;
        if (ncb < 4 * NR) ncb = 4 * NR;
        if (ncb > NC) ncb = NC;
    }
    int64_t ncmax = (n1 - n0) < ncb ? (n1 - n0) : ncb;
    ncmax = (ncmax + NR - 1) / NR * NR;
    /* K <= 64 (one short K block): a block of one row tile, swept over
     * all strips, not MC rows.  Every row of C (and of a residual) is a
     * separate stream a plane apart; MC rows kept 144 C rows and 144
     * residual rows in flight, more pages than the L2 streamer follows
     * (the likely cause: this VM has no PMU counters to show it), and a
     * tile's 768 FMA cycles waited on its rows.  One row tile keeps 12 +
     * 12 streams and reads B's packed block (<= 512 KB) from L2 once per
     * row tile.  ResNet-50's 64 -> 256 1x1 convs at 56x56 (+ residual +
     * relu) 1.04-1.15x in sgemm_ab, its K = 64 convs -0.27..-0.51 ms at
     * 1 thread in the network (-0.2 ms at 2 threads, where their
     * readers lose about as much); K = 128 (128 -> 512 at 28x28) no
     * change, so not there. */
    const int64_t mcb = K <= 64 ? MR : MC;
    int64_t mcmax = (m1 - m0) < mcb ? (m1 - m0) : mcb;
    mcmax = (mcmax + MR - 1) / MR * MR;
    float *buf = kiln__cpu_scratch_or_fail(0, (size_t)(kcmax * ncmax + kcmax * mcmax) + 64, "SGEMM");
    if (!buf) return;
    float *pb = buf, *pa = buf + kcmax * ncmax;
    for (int64_t jc = n0; jc < n1; jc += ncb) {
        int64_t nc = n1 - jc < ncb ? n1 - jc : ncb;
        for (int64_t pc = 0; pc < K; pc += KC) {
            int64_t kc = K - pc < KC ? K - pc : KC;
#ifdef HAVE_SHIFT_KERNEL
            const int in_place = g->b_shift != NULL && !g->b_shift_pack;
#else
            const int in_place = 0;
#endif
            const float *pb_use = pb;
            /* With one block of rows, B is packed a strip at a time just
             * before its tiles use it (from L1), not the whole column
             * block first (2 MB at kc 256: written out and read back from
             * L3; ResNet-50's 1x1 convs at 56x56) */
            const int by_strip = !in_place && !g->b_packed && m1 - m0 <= mcb;
            if (in_place || by_strip)
                ; /* the micro-kernel reads B where it lies / packed below */
            else if (g->b_packed && !g->b_shift && !g->packb) {
                KILN__ASSERT(jc % NR == 0);
                pb_use = g->b_packed + pc * round_up(g->N, NR) + jc * kc;
            } else
                pack_b(g, pc, kc, jc, nc, pb);
            store_info si = {.load = pc > 0 || g->accumulate, .bias = NULL,
                             .relu = g->relu && pc + kc >= K};
            for (int64_t ic = m0; ic < m1; ic += mcb) {
                int64_t mc = m1 - ic < mcb ? m1 - ic : mcb;
                const float *pa_use = pa;
                if (g->a_packed) {
                    KILN__ASSERT(ic % MR == 0);
                    pa_use = g->a_packed + pc * round_up(g->M, MR) + ic * kc;
                } else {
                    pack_a(g, ic, mc, pc, kc, pa);
                }
                const int64_t ntiles = (mc + MR - 1) / MR;
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    int nr = (int)(nc - jr < NR ? nc - jr : NR);
                    const float *pbs = by_strip ? pb : pb_use + jr * kc; /* the strip, packed */
                    if (by_strip) pack_b(g, pc, kc, jc + jr, nr, pb);
                    /* the strip these tiles prefetch: the next one of this
                     * K block, after the block's last one the next K
                     * block's first (of this column block: the strips
                     * after it may be another thread's), none at the end */
                    const float *pnext = pbs + kc * NR;
                    const int last = jr + NR >= nc && ic + mc >= m1; /* this block's last strip */
                    const int64_t n_next = jc + nc < n1 ? jc + nc : n_after; /* after the last K block */
                    if (last && pb_use != pb) {
                        const int64_t kn = K - pc - kc < KC ? K - pc - kc : KC;
                        pnext = kn > 0        ? g->b_packed + (pc + kc) * round_up(g->N, NR) + jc * kn
                                : n_next >= 0 ? g->b_packed + n_next * kcmax
                                              : NULL;
                    }
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        int mr = (int)(mc - ir < MR ? mc - ir : MR);
                        /* the next strip's rows, a share per tile */
                        if ((in_place || by_strip) && jr + 2 * NR <= nc)
                            prefetch_b_strip(g, pc + kc * (ir / MR) / ntiles, pc + kc * (ir / MR + 1) / ntiles,
                                             jc + jr + NR);
                        /* A prepacked B (a weight: read from memory once
                         * per inference) has its next strip brought into L2
                         * by this strip's tiles, kc / 4 lines each (the
                         * first NR / 4 tiles cover it), where it is
                         * contiguous: the same K block's next strip, or the
                         * next K block's first.  Otherwise the next strip's
                         * first tile waits on memory (128 B per k at
                         * 3.5 ns): cold weights 140 -> 165-177 GFLOP/s on
                         * BERT's MatMuls (M = 128, 11 tiles a strip). */
                        si.pf = pb_use != pb && ir / MR < NR / 4 && pnext ? pnext + (ir / MR) * (kc / 4) * 16
                                                                             : NULL;
                        /* ... and where one or two row tiles share a strip
                         * (pf then covers an eighth or a quarter of the
                         * next one), the first tile also prefetches its own
                         * stream, 128 k ahead: the NCHW16C Winograd's GEMMs
                         * (transformed weights as B, 4 or 16 tiles of a 7x7
                         * plane) -10..-12% on ResNet-50's 512 -> 512 7x7
                         * (bench/wino16c_ab, 1 thread, in one process) */
                        si.pf_far = pb_use != pb && ir == 0 && ntiles <= 2;
                        si.bias = (pc == 0 && g->bias_row) ? g->bias_row + ic + ir : NULL;
                        si.res = g->res && pc + kc >= K ? g->res + (ic + ir) * g->ldr + jc + jr : NULL;
                        si.ldr = g->ldr;
                        float *ct = g->c + (ic + ir) * g->ldc + jc + jr;
                        /* C rows of the tile one strip to the right, which this
                         * thread writes next time round: ask for those lines
                         * now (an output larger than the caches otherwise
                         * stalls every store of a short-K tile on a read for
                         * ownership: 16->96 1x1 conv at 112x112 890 -> 465 us).
                         * The residual's rows two strips ahead, into L2: one
                         * strip ahead into L1 left the prefetches waiting on
                         * memory behind C's (ResNet-50's layer1 conv3, 64 ->
                         * 256 at 56x56 + residual + Relu: -0.06 ms of ~1.0). */
                        for (int i = 0; jr + NR < nc && i < mr; i++)
                            for (int q = NR; q < 2 * NR; q += 16) /* 64-byte lines */
                                __builtin_prefetch(ct + i * g->ldc + q, 1, 3);
                        if (last && pc + kc >= K && n_next >= 0) /* or the next block's (its first rows) */
                            for (int i = 0; i < mr && m0 + ir + i < m1; i++)
                                for (int q = 0; q < NR; q += 16)
                                    __builtin_prefetch(g->c + (m0 + ir + i) * g->ldc + n_next + q, 1, 3);
                        for (int i = 0; si.res && jr + 2 * NR < nc && i < mr; i++)
                            for (int q = 2 * NR; q < 3 * NR; q += 16) __builtin_prefetch(si.res + i * g->ldr + q, 0, 2);
#ifdef HAVE_SHIFT_KERNEL
                        if (in_place && nr == NR) {
                            micro_rows(kc, pa_use + ir * kc, NULL, g->b_shift + jc + jr, g->b_off + pc,
                                       ct, g->ldc, mr, nr, &si);
                            continue;
                        }
                        if (in_place) { /* the last, partial strip: packed (no read past B) */
                            if (ir == 0) pack_b_shift(g, pc, kc, jc + jr, nr, pb);
                            micro_rows(kc, pa_use + ir * kc, pb, NULL, NULL, ct, g->ldc, mr, nr, &si);
                            continue;
                        }
#endif
#ifdef HAVE_SHIFT_KERNEL
                        micro_rows(kc, pa_use + ir * kc, pbs, NULL, NULL, ct, g->ldc, mr,
                                   nr, &si);
#else
                        micro(kc, pa_use + ir * kc, pbs, ct, g->ldc, mr, nr, &si);
#endif
                    }
                }
                if (g->done && pc + kc >= K) /* rows [ic, ic + mc) x [jc, jc + nc) are final */
                    g->done(g->done_ud, ic, ic + mc, jc, nc);
            }
        }
    }
}

static void gemm_block(const kiln__gemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    gemm_block_(g, m0, m1, n0, n1, -1);
}

void kiln__sgemm_serial(const kiln__gemm *g) { gemm_block(g, 0, g->M, 0, g->N); }

/* Threads share the micro-tiles of C: tile t of nt_m x nt_n, numbered
 * along the split side first (by_rows: t = tile_row * nt_n + strip, else
 * t = strip * nt_m + tile_row), and each thread takes a contiguous run of
 * them: whole rows (columns) of tiles plus at most one partial one at each
 * end.  Threads then differ by at most one tile of work (split by whole
 * strips, 27 strips of a 28x30 conv grid gave one thread 14 and the other
 * 13).  Every element of C is still computed by one thread with the same
 * K blocking, so results do not depend on the thread count. */
typedef struct par {
    const kiln__gemm *g;
    int by_rows;
    int64_t nt_m, nt_n;
} par;

/* Tiles [t0, t1) of one row of tiles (by_rows) or one strip: tile line
 * `line`, positions [p0, p1) along it. */
static void par_piece(const par *p, int64_t line, int64_t p0, int64_t p1) {
    const kiln__gemm *g = p->g;
    if (p->by_rows) {
        int64_t m0 = line * MR, m1 = m0 + MR < g->M ? m0 + MR : g->M;
        int64_t n1 = p1 * NR < g->N ? p1 * NR : g->N;
        gemm_block(g, m0, m1, p0 * NR, n1);
    } else {
        int64_t n0 = line * NR, n1 = n0 + NR < g->N ? n0 + NR : g->N;
        int64_t m1 = p1 * MR < g->M ? p1 * MR : g->M;
        gemm_block(g, p0 * MR, m1, n0, n1);
    }
}

static void par_task(void *ud, int ith, int nth) {
    const par *p = ud;
    const kiln__gemm *g = p->g;
    int64_t per = p->by_rows ? p->nt_n : p->nt_m; /* tiles along one line */
    int64_t t0, t1;
    kiln_split_range(p->nt_m * p->nt_n, ith, nth, &t0, &t1);
    if (t1 <= t0) return;
    int64_t l0 = t0 / per, l1 = t1 / per; /* first line, line of the end */
    if (t0 % per) { /* a partial line first */
        int64_t end = l0 == l1 ? t1 % per : per;
        par_piece(p, l0, t0 % per, end);
        if (l0 == l1) return;
        l0++;
    }
    if (l1 > l0) { /* whole lines [l0, l1) */
        if (p->by_rows) {
            int64_t m1 = l1 * MR < g->M ? l1 * MR : g->M;
            gemm_block(g, l0 * MR, m1, 0, g->N);
        } else {
            int64_t n1 = l1 * NR < g->N ? l1 * NR : g->N;
            gemm_block(g, 0, g->M, l0 * NR, n1);
        }
    }
    if (t1 % per) par_piece(p, l1, 0, t1 % per); /* a partial line last */
}

/* The split over K (kiln__gemm.split_k): task ith multiplies K blocks
 * [kb0, kb1) of nkb into part[ith] (task 0 straight into C, with the
 * bias); then, after the join, each task adds the partials into its band
 * of C's rows and applies the residual, relu and `done` there.  The
 * partials are one buffer of the dispatching thread's (a thread may run
 * more than one task). */
#define KSPLIT_MAX 16
typedef struct ksplit {
    const kiln__gemm *g;
    int64_t nkb, ldp; /* K blocks; partials' row pitch */
    int serial;       /* ksplit_mul ran as one task: C is final */
    float *part[KSPLIT_MAX];
} ksplit;

/* A packing callback over K rows [k0, ...) of the whole GEMM's B. */
typedef struct ksplit_b {
    kiln__packb_fn packb;
    const void *ud;
    int64_t k0;
} ksplit_b;

static void ksplit_packb(const void *ud, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr, float *dst) {
    const ksplit_b *kb = ud;
    kb->packb(kb->ud, kb->k0 + k0, kc, n0, nc, nr, dst);
}

static void ksplit_mul(void *ud, int ith, int nth) {
    ksplit *s = ud;
    const kiln__gemm *g = s->g;
    if (nth == 1) { /* run serially (nested in another kernel's task) */
        gemm_block(g, 0, g->M, 0, g->N);
        s->serial = 1;
        return;
    }
    int64_t b0, b1;
    kiln_split_range(s->nkb, ith, nth, &b0, &b1);
    const int64_t k0 = b0 * KC, k1 = b1 * KC < g->K ? b1 * KC : g->K;
    kiln__gemm sub = *g;
    sub.K = k1 - k0;
    sub.a = g->a + k0 * g->a_cs;
    if (g->a_packed) sub.a_packed = g->a_packed + k0 * round_up(g->M, MR); /* K block b0's panels */
    ksplit_b kb = {g->packb, g->packb_ud, k0};
    if (g->packb)
        sub.packb = ksplit_packb, sub.packb_ud = &kb;
    else if (g->b_shift)
        sub.b_off = g->b_off + k0;
    else
        sub.b = g->b + k0 * g->b_rs;
    sub.res = NULL;
    sub.relu = 0;
    sub.done = NULL;
    sub.split_k = 0;
    if (ith > 0) {
        sub.c = s->part[ith];
        sub.ldc = s->ldp;
        sub.bias_row = NULL;
    }
    gemm_block(&sub, 0, g->M, 0, g->N);
}

static void ksplit_sum(void *ud, int ith, int nth) {
    const ksplit *s = ud;
    const kiln__gemm *g = s->g;
    int64_t i0, i1;
    kiln_split_range(g->M, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        float *c = g->c + i * g->ldc;
        for (int t = 1; t < KSPLIT_MAX && s->part[t]; t++) {
            const float *p = s->part[t] + i * s->ldp;
            for (int64_t j = 0; j < g->N; j++) c[j] += p[j];
        }
        if (g->res) {
            const float *r = g->res + i * g->ldr;
            for (int64_t j = 0; j < g->N; j++) c[j] += r[j];
        }
        if (g->relu) /* v < 0 is false for NaN: NaN stays, as in store_rows */
            for (int64_t j = 0; j < g->N; j++) c[j] = c[j] < 0.0f ? 0.0f : c[j];
    }
    if (g->done && i1 > i0) g->done(g->done_ud, i0, i1, 0, g->N);
}

/* 1 when it ran g split over K (see kiln__gemm.split_k; kiln__sgemm asks
 * only where it would split C's rows). */
static int sgemm_ksplit(const kiln__gemm *g, kiln_exec *exec, int threads) {
    const int64_t nkb = (g->K + KC - 1) / KC;
    if (!g->split_k || nkb < 2 || g->accumulate || g->b_packed || g->N < 2 ||
        (!g->packb && (g->b_shift ? !g->b_off : !g->b)))
        return 0;
    ksplit s = {.g = g, .nkb = nkb, .ldp = round_up(g->N, 16)};
    int tasks = threads < nkb ? threads : (int)nkb;
    if (tasks > KSPLIT_MAX) tasks = KSPLIT_MAX;
    const size_t per = (size_t)(g->M * s.ldp);
    float *buf = kiln__cpu_scratch(3, per * (size_t)(tasks - 1));
    if (!buf) return 0;
    for (int t = 1; t < tasks; t++) s.part[t] = buf + (size_t)(t - 1) * per;
    kiln_exec_parallel(exec, tasks, ksplit_mul, &s);
    if (!s.serial) kiln_exec_parallel(exec, tasks, ksplit_sum, &s);
    return 1;
}

/* The column split of a prepacked B (kiln__sgemm: wide weights), its
 * strips claimed as the threads go (each its own share of them first,
 * dyn_claim), in runs of about DYN_FLOPS (BERT-base:
 * 3 strips at K = 768, 1 at K = 3072; ~0.1 ms of one core), at least 4
 * runs a thread (a few rows: the flops alone would make one).  Split into
 * fixed halves, the thread whose core a neighbour's work slowed was waited
 * for: BERT's MatMuls at 2 threads on the shared 2-vCPU VM, the faster
 * thread idle at the end for 17-39% of their wall, 8-9.5% with the runs
 * (where the neighbour's load is sustained the wall stays the same: our
 * two threads get the same CPU share either way; it pays where the load
 * comes and goes; bench/README, session 16).  Each thread packs all of A
 * once into scratch slot 3 (the fixed
 * split packed it a K block at a time, also in every thread), only where
 * that is small (DYN_A_FLOATS); every element of C is computed as before
 * (whole strips, the same K blocks and kernels), whichever thread takes
 * it. */
#ifndef DYN_FLOPS
#define DYN_FLOPS 16000000
#endif
#define DYN_A_FLOATS (1 << 20)
typedef struct dyn {
    const kiln__gemm *g;
    int64_t nt_n, chunk; /* strips; strips a run */
    kiln__shares runs;   /* run r: strips [r chunk, (r + 1) chunk) */
} dyn;

/* The first strip of task ith's next run, or -1 when none is left: its
 * own share of the runs first, then the others' from their backs
 * (kiln__shares).  Owned runs give each thread the same columns of C at
 * every inference (claimed from one counter in arrival order, which thread
 * wrote a strip changed from run to run, and with the two vCPUs on two
 * dies half of C's lines sat dirty in the other die's cache: BERT-base at
 * 2 threads 54 ms against 51). */
static int64_t dyn_claim(dyn *d, int ith) {
    const int64_t r = kiln__shares_take(&d->runs, ith);
    return r < 0 ? -1 : r * d->chunk;
}

static void dyn_task(void *ud, int ith, int nth) {
    (void)nth;
    dyn *d = ud;
    kiln__gemm ga = *d->g;
    int64_t s0 = dyn_claim(d, ith);
    if (s0 < 0) return;
    float *pa = kiln__cpu_scratch(3, kiln__sgemm_pack_a_floats(ga.M, ga.K));
    if (pa) { /* else each run packs A itself */
        kiln__sgemm_pack_a(&ga, pa);
        ga.a_packed = pa;
    }
    while (s0 >= 0) {
        /* the next run claimed before this one starts: its last tiles
         * prefetch the next run's first strip (a claimed run is one
         * this thread will do; at most one run ahead of the others) */
        const int64_t s1 = s0 + d->chunk < d->nt_n ? s0 + d->chunk : d->nt_n, s2 = dyn_claim(d, ith);
        gemm_block_(&ga, 0, ga.M, s0 * NR, s1 * NR < ga.N ? s1 * NR : ga.N, s2 >= 0 ? s2 * NR : -1);
        s0 = s2;
    }
}

void kiln__sgemm(const kiln__gemm *g, kiln_exec *exec) {
    int threads = exec ? kiln_exec_threads(exec) : 1;
    double flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    if (threads <= 1 || flops < 2e5) {
        kiln__sgemm_serial(g);
        return;
    }
    par p = {.g = g, .nt_m = (g->M + MR - 1) / MR, .nt_n = (g->N + NR - 1) / NR};
    /* Split the side whose operand every thread would otherwise pack in
     * full: a thread packs the A rows and B columns of its own part, so
     * with A packed already (Conv's weights) and B not, threads take
     * columns, and the other way round (a MatMul's activations against
     * prepacked weights) rows.  Otherwise the side with more tiles. */
#ifdef HAVE_SHIFT_KERNEL
    int b_free = g->b_packed != NULL || (g->b_shift != NULL && !g->b_shift_pack);
#else
    int b_free = g->b_packed != NULL;
#endif
    int a_free = g->a_packed != NULL;
    if (g->b_packed && !a_free && g->N >= 2 * g->M && p.nt_n >= 2 * threads &&
        (double)g->K * (double)g->N > (double)(1 << 18))
        /* Except a prepacked B (a weight) wider than A is tall and larger
         * than 1 MiB (it comes from memory at every inference, not from a
         * core's L2): a row split has every thread stream all of B with
         * half the row tiles to reuse each strip, and a partial row of
         * tiles that streams half of it again; a column split packs A
         * (M rows, small) in every thread instead.  BERT's MatMuls (M =
         * 128, N = 768..3072), the slower thread's CPU time at 2 threads:
         * QKV 1539 -> 1273 us, FFN1 2110 -> 1731, FFN2 2007 -> 1790 (1
         * thread: 2600, 3500, 3500).  Smaller weights stay split by rows:
         * each thread then reads the activation rows it wrote in the layer
         * before from its own L2 (the 256-wide Transformer encoder, whose
         * weights are <= 1 MiB, measured slower with columns). */
        p.by_rows = 0;
    else if (a_free && !b_free && g->M > g->N)
        /* Except a prepacked A (a conv's weights, from memory at every
         * inference) larger than B: rows, each thread streaming its share
         * of the weights and packing all of B, rather than columns, each
         * streaming all of the weights for half of B.  ResNet-50 at 2
         * threads, per-layer minima in one process: layer3's 256 -> 1024
         * 1x1 convs at 14x14 (1 MB of weights, 200 KB of input) 0.415 ->
         * 0.382 ms, layer4.0/conv1 (1024 -> 512) -0.02..-0.03 ms,
         * layer3.0's downsample (B packed by tactic 9's callback)
         * -0.02..-0.05 ms, layer3's 1024 -> 256 (1 MB against 800 KB)
         * -0.003..-0.010 ms each (sums of five, four runs). */
        p.by_rows = 1;
    else if (a_free != b_free)
        p.by_rows = b_free;
    else
        p.by_rows = !(p.nt_n >= p.nt_m || p.nt_n >= 4 * threads);
    if ((p.by_rows ? p.nt_m : p.nt_n) < threads && (p.by_rows ? p.nt_n : p.nt_m) >= threads)
        p.by_rows = !p.by_rows;
    /* A few column strips, the last one partial (N = 49: 32 + 17 columns,
     * the 17 computed as 16 + 1 at about 7/12 of a full strip's cost): a
     * column split gives one thread the cheap strip, and each thread
     * streams all of A (a conv's weights); split rows instead, each thread
     * packing B (small: N columns). */
    if (!p.by_rows && p.nt_n < 2 * threads && g->N % NR != 0 && p.nt_m >= 2 * threads) p.by_rows = 1;
    /* split_k replaces a split by rows, where every thread reads all of B;
     * split by columns, each reads only its columns already (and a layer
     * before on the same plane split them the same way: ResNet-50's
     * 512 -> 128 1x1 convs at 28x28 +0.04 ms each split over K) */
    if (p.by_rows && sgemm_ksplit(g, exec, threads)) return;
    if (!p.by_rows && g->b_packed && !g->a_packed && !g->b_shift && !g->packb && p.nt_n >= 2 * threads &&
        g->M > 1 && kiln__sgemm_pack_a_floats(g->M, g->K) <= DYN_A_FLOATS) { /* (M = 1: gemv_block) */
        const int64_t per = 2 * g->M * g->K * NR; /* flops a strip */
        int64_t chunk = (DYN_FLOPS + per - 1) / per, most = p.nt_n / (4 * threads); /* 4 runs a thread */
        dyn d = {.g = g, .nt_n = p.nt_n, .chunk = chunk < most ? chunk : most > 0 ? most : 1};
        kiln__shares_init(&d.runs, (p.nt_n + d.chunk - 1) / d.chunk, threads);
        kiln_exec_parallel(exec, threads, dyn_task, &d);
        return;
    }
    int64_t tiles = p.nt_m * p.nt_n;
    int tasks = tiles < threads ? (int)tiles : threads;
    kiln_exec_parallel(exec, tasks, par_task, &p);
}
