/*
 * conv_winograd.c — Winograd F(4x4, 3x3) convolution (conv_winograd.h).
 *
 * Transforms (Lavin & Gray, points 0, +-1, +-2, inf):
 *   B^T = [4  0 -5  0 1 0]   G = [ 1/4     0    0 ]   A^T = [1 1  1 1  1 0]
 *         [0 -4 -4  1 1 0]       [-1/6 -1/6 -1/6]         [0 1 -1 2 -2 0]
 *         [0  4 -4 -1 1 0]       [-1/6  1/6 -1/6]         [0 1  1 4  4 0]
 *         [0 -2 -1  2 1 0]       [1/24 1/12  1/6]         [0 1 -1 8 -8 1]
 *         [0  2 -1 -2 1 0]       [1/24 -1/12 1/6]
 *         [0  4  0 -5 0 1]       [   0    0    1]
 *
 * An image is done in blocks of whole tile rows, sized so that the
 * transformed input V (36 x C x tiles) and the products (36 x M x tiles)
 * stay within a few MB: (1) the input transform, channels split over the
 * threads; (2) the 36 GEMMs, claimed whole by the threads (each reads its
 * own U_xi, so the weights are streamed once whatever the thread count);
 * (3) the output transform + bias + fused epilogue, output channels split
 * over the threads.  The transforms work on 16 consecutive tiles of the
 * block at once, one per lane of a vector (GCC vector extension: AVX-512
 * or two AVX2 halves); with AVX-512 the tiles are gathered from X and
 * the results scattered into Y by masked gathers/scatters (zero outside
 * the image), elsewhere by scalar loops.
 *
 * Accuracy: the transforms' constants are exact in binary except G's
 * sixths and twenty-fourths (computed in double at prepack); the output
 * differs from the direct sum by a few float ulps of its magnitude times
 * the (up to 8x) transform gains, well inside the conformance tolerance.
 */
#include "ops/nn/conv_winograd.h"

#include "device/cpu/sgemm.h"
#include "kiln_int.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define WINO_MAGIC 0x4f4e4957u /* "WINO" */
#define HEAD_FLOATS 16         /* the header keeps the operands 64-byte aligned */
#define LANES 16               /* tiles transformed at once */
#define BLOCK_FLOATS (1 << 20) /* V + products of one block of tile rows */

typedef float vlane __attribute__((vector_size(LANES * sizeof(float))));

/* ------------------------------------------------------------ weights */

size_t kiln__wino_pack_bytes(int64_t M, int64_t C) {
    return (HEAD_FLOATS + 36 * kiln__sgemm_pack_a_floats(M, C)) * sizeof(float);
}

int kiln__wino_pack(const float *w, int64_t M, int64_t C, void *dst) {
    static const double G[6][3] = {{0.25, 0, 0},
                                   {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                   {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                   {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                   {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                   {0, 0, 1}};
    float *u = kiln__malloc((size_t)(36 * M * C) * sizeof(float));
    if (!u) return kiln_set_error(KILN_ENOMEM, "Conv (Winograd): out of memory transforming W");
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < C; c++) {
            const float *g = w + (m * C + c) * 9;
            double t[6][3]; /* G g */
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 3; j++)
                    t[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
            for (int i = 0; i < 6; i++)
                for (int k = 0; k < 6; k++) /* (G g) G^T */
                    u[((i * 6 + k) * M + m) * C + c] =
                        (float)(t[i][0] * G[k][0] + t[i][1] * G[k][1] + t[i][2] * G[k][2]);
        }
    uint32_t head[HEAD_FLOATS] = {WINO_MAGIC, (uint32_t)M, (uint32_t)C, 36};
    memcpy(dst, head, sizeof head);
    size_t per = kiln__sgemm_pack_a_floats(M, C);
    for (int xi = 0; xi < 36; xi++) {
        kiln__gemm gm = {.M = M, .K = C, .a = u + (size_t)xi * M * C, .a_rs = C, .a_cs = 1, .alpha = 1.0f};
        kiln__sgemm_pack_a(&gm, (float *)dst + HEAD_FLOATS + xi * per);
    }
    kiln__free(u);
    return 0;
}

const float *kiln__wino_packed(const void *prepacked, int64_t M, int64_t C) {
    if (!prepacked) return NULL;
    uint32_t head[4];
    memcpy(head, prepacked, sizeof head);
    if (head[0] != WINO_MAGIC || head[1] != (uint32_t)M || head[2] != (uint32_t)C || head[3] != 36)
        return NULL;
    return (const float *)prepacked + HEAD_FLOATS;
}

/* ------------------------------------------------------------ geometry */

typedef struct blockgeom {
    int64_t TH, TW, rows, ld; /* tile rows and columns; tile rows per block; V/product row stride */
} blockgeom;

static blockgeom block_geom(int64_t C, int64_t M, int64_t OH, int64_t OW) {
    blockgeom b;
    b.TH = (OH + 3) / 4;
    b.TW = (OW + 3) / 4;
    b.rows = BLOCK_FLOATS / (36 * (C + M) * b.TW);
    if (b.rows < 1) b.rows = 1;
    if (b.rows > b.TH) b.rows = b.TH;
    b.ld = (b.rows * b.TW + LANES - 1) / LANES * LANES;
    return b;
}

int kiln__wino_fits(int64_t M, int64_t OW) {
    /* the GEMMs' matrix-vector paths (one row or column) read A unpacked */
    return M >= 2 && (OW + 3) / 4 >= 2;
}

size_t kiln__wino_ws_bytes(int64_t C, int64_t M, int64_t OH, int64_t OW) {
    blockgeom b = block_geom(C, M, OH, OW);
    return (size_t)(36 * (C + M) * b.ld) * sizeof(float) + 64;
}

/* ------------------------------------------------------------ transforms */

typedef struct job {
    const kiln__wino *w;
    blockgeom b;
    int64_t ty0, ty1, ntiles; /* the block's tile rows, its tiles */
    float *v, *p;             /* 36 x C x ld, 36 x M x ld */
    _Atomic int64_t next;     /* the next GEMM to claim */
} job;

/* B^T applied to six values (a row or a column of a tile). */
#define BT6(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5) \
    do {                                                    \
        o0 = 4 * (d0) - 5 * (d2) + (d4);                    \
        o1 = -4 * ((d1) + (d2)) + (d3) + (d4);              \
        o2 = 4 * ((d1) - (d2)) - (d3) + (d4);               \
        o3 = 2 * ((d3) - (d1)) - (d2) + (d4);               \
        o4 = 2 * ((d1) - (d3)) - (d2) + (d4);               \
        o5 = 4 * (d1) - 5 * (d3) + (d5);                    \
    } while (0)

/* A^T applied to six values. */
#define AT6(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3)        \
    do {                                                   \
        o0 = (m0) + ((m1) + (m2)) + ((m3) + (m4));         \
        o1 = ((m1) - (m2)) + 2 * ((m3) - (m4));            \
        o2 = ((m1) + (m2)) + 4 * ((m3) + (m4));            \
        o3 = ((m1) - (m2)) + 8 * ((m3) - (m4)) + (m5);     \
    } while (0)

/* The tiles of one lane group: tiles [t0, t0 + n) of the block (row-major
 * over its tile rows), lane l holding tile t0 + l.  row[l], col[l]: the
 * top-left input (and output, without the pads) element of its tile. */
typedef struct lanes {
    int n;
    int32_t row[LANES], col[LANES];
} lanes;

static void lanes_of(const job *j, int64_t t0, lanes *ln) {
    const int64_t TW = j->b.TW;
    ln->n = (int)(j->ntiles - t0 < LANES ? j->ntiles - t0 : LANES);
    for (int l = 0; l < LANES; l++) {
        int64_t t = t0 + (l < ln->n ? l : 0);
        ln->row[l] = (int32_t)((j->ty0 + t / TW) * 4);
        ln->col[l] = (int32_t)(t % TW * 4);
    }
}

#if defined(__AVX512F__)

/* 6x6 input tiles (zero outside the image), one per lane. */
static void gather(const kiln__wino *w, const float *xc, const lanes *ln, vlane d[36]) {
    const __m512i vr = _mm512_loadu_si512(ln->row), vc = _mm512_loadu_si512(ln->col);
    const __m512i H = _mm512_set1_epi32((int)w->H), W = _mm512_set1_epi32((int)w->W);
    const __mmask16 live = (__mmask16)((1u << ln->n) - 1);
    __mmask16 cm[6];
    __m512i cx[6];
    for (int k = 0; k < 6; k++) {
        cx[k] = _mm512_add_epi32(vc, _mm512_set1_epi32(k - (int)w->pl));
        cm[k] = _mm512_cmpge_epi32_mask(cx[k], _mm512_setzero_si512()) & _mm512_cmplt_epi32_mask(cx[k], W);
    }
    for (int i = 0; i < 6; i++) {
        __m512i iy = _mm512_add_epi32(vr, _mm512_set1_epi32(i - (int)w->pt));
        __mmask16 rm = live & _mm512_cmpge_epi32_mask(iy, _mm512_setzero_si512()) &
                       _mm512_cmplt_epi32_mask(iy, H);
        __m512i base = _mm512_mullo_epi32(iy, W);
        for (int k = 0; k < 6; k++)
            d[i * 6 + k] = (vlane)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), rm & cm[k],
                                                           _mm512_add_epi32(base, cx[k]), xc, 4);
    }
}

/* o[r * 4 + q] + bias into output (row + r, col + q) of each lane's tile,
 * inside the image. */
static void scatter(const kiln__wino *w, float *ym, const lanes *ln, const vlane o[16], float bias) {
    const __m512i vr = _mm512_loadu_si512(ln->row), vc = _mm512_loadu_si512(ln->col);
    const __m512i OH = _mm512_set1_epi32((int)w->OH), OW = _mm512_set1_epi32((int)w->OW);
    const __mmask16 live = (__mmask16)((1u << ln->n) - 1);
    for (int r = 0; r < 4; r++) {
        __m512i oy = _mm512_add_epi32(vr, _mm512_set1_epi32(r));
        __mmask16 rm = live & _mm512_cmplt_epi32_mask(oy, OH);
        __m512i base = _mm512_mullo_epi32(oy, OW);
        for (int q = 0; q < 4; q++) {
            __m512i ox = _mm512_add_epi32(vc, _mm512_set1_epi32(q));
            __mmask16 m = rm & _mm512_cmplt_epi32_mask(ox, OW);
            _mm512_mask_i32scatter_ps(ym, m, _mm512_add_epi32(base, ox),
                                      _mm512_add_ps((__m512)o[r * 4 + q], _mm512_set1_ps(bias)), 4);
        }
    }
}

/* The first n floats at p into *v, zeros after (never reads past them). */
static void load_n(vlane *v, const float *p, int n) {
    *v = (vlane)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}
#else
static void gather(const kiln__wino *w, const float *xc, const lanes *ln, vlane d[36]) {
    float (*s)[LANES] = (float (*)[LANES])d;
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 6; k++)
            for (int l = 0; l < LANES; l++) {
                int64_t iy = ln->row[l] + i - w->pt, ix = ln->col[l] + k - w->pl;
                s[i * 6 + k][l] = l < ln->n && iy >= 0 && iy < w->H && ix >= 0 && ix < w->W
                                      ? xc[iy * w->W + ix] : 0.0f;
            }
}

static void scatter(const kiln__wino *w, float *ym, const lanes *ln, const vlane o[16], float bias) {
    const float (*s)[LANES] = (const float (*)[LANES])o;
    for (int l = 0; l < ln->n; l++)
        for (int r = 0; r < 4 && ln->row[l] + r < w->OH; r++)
            for (int q = 0; q < 4 && ln->col[l] + q < w->OW; q++)
                ym[(ln->row[l] + r) * w->OW + ln->col[l] + q] = s[r * 4 + q][l] + bias;
}

static void load_n(vlane *v, const float *p, int n) {
    *v = (vlane){0};
    memcpy(v, p, (size_t)n * sizeof(float));
}
#endif

static void input_range(void *ud, int64_t c0, int64_t c1) {
    const job *j = ud;
    const kiln__wino *w = j->w;
    const int64_t ld = j->b.ld, C = w->C;
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = w->x + c * w->H * w->W;
        for (int64_t t0 = 0; t0 < j->ntiles; t0 += LANES) {
            lanes ln;
            vlane d[36], t[36];
            lanes_of(j, t0, &ln);
            gather(w, xc, &ln, d);
            for (int k = 0; k < 6; k++) /* columns: B^T d */
                BT6(d[k], d[6 + k], d[12 + k], d[18 + k], d[24 + k], d[30 + k], t[k], t[6 + k],
                    t[12 + k], t[18 + k], t[24 + k], t[30 + k]);
            for (int i = 0; i < 6; i++) { /* rows: (B^T d) B; t0 + LANES <= ld */
                vlane o[6];
                const vlane *r = t + i * 6;
                BT6(r[0], r[1], r[2], r[3], r[4], r[5], o[0], o[1], o[2], o[3], o[4], o[5]);
                for (int k = 0; k < 6; k++)
                    memcpy(j->v + ((int64_t)(i * 6 + k) * C + c) * ld + t0, &o[k], sizeof o[k]);
            }
        }
    }
}

static void output_range(void *ud, int64_t m0, int64_t m1) {
    const job *j = ud;
    const kiln__wino *w = j->w;
    const int64_t ld = j->b.ld, M = w->M, OH = w->OH, OW = w->OW;
    for (int64_t m = m0; m < m1; m++) {
        float *ym = w->y + m * OH * OW;
        for (int64_t t0 = 0; t0 < j->ntiles; t0 += LANES) {
            lanes ln;
            lanes_of(j, t0, &ln);
            vlane p[36], t[24], o[16];
            for (int xi = 0; xi < 36; xi++) load_n(&p[xi], j->p + ((int64_t)xi * M + m) * ld + t0, ln.n);
            for (int k = 0; k < 6; k++) /* columns: A^T p */
                AT6(p[k], p[6 + k], p[12 + k], p[18 + k], p[24 + k], p[30 + k], t[k], t[6 + k],
                    t[12 + k], t[18 + k]);
            for (int r = 0; r < 4; r++) { /* rows: (A^T p) A */
                const vlane *s = t + r * 6;
                AT6(s[0], s[1], s[2], s[3], s[4], s[5], o[r * 4], o[r * 4 + 1], o[r * 4 + 2],
                    o[r * 4 + 3]);
            }
            scatter(w, ym, &ln, o, w->bias ? w->bias[m] : 0.0f);
        }
        int64_t r0 = j->ty0 * 4, r1 = j->ty1 * 4 < OH ? j->ty1 * 4 : OH;
        kiln_call_epilogue(w->call, 0, ym + r0 * OW, (r1 - r0) * OW, m, 0);
    }
}

/* The 36 GEMMs, claimed one at a time: a thread that starts late or is
 * preempted (a shared machine) leaves its share to the others.  Each GEMM
 * is computed whole by one thread, so the result does not depend on which. */
static void gemm_task(void *ud, int ith, int nth) {
    (void)ith;
    (void)nth;
    job *j = ud;
    const kiln__wino *w = j->w;
    const size_t per = kiln__sgemm_pack_a_floats(w->M, w->C);
    for (int64_t xi; (xi = atomic_fetch_add(&j->next, 1)) < 36;) {
        const float *a = w->u + xi * per;
        kiln__gemm gm = {.M = w->M, .N = j->ntiles, .K = w->C, .a = a, .a_rs = w->C, .a_cs = 1,
                         .alpha = 1.0f, .a_packed = a, .b = j->v + xi * w->C * j->b.ld,
                         .b_rs = j->b.ld, .b_cs = 1, .c = j->p + xi * w->M * j->b.ld, .ldc = j->b.ld};
        kiln__sgemm_serial(&gm);
    }
}

void kiln__wino_run(const kiln__wino *w) {
    job j = {.w = w, .b = block_geom(w->C, w->M, w->OH, w->OW)};
    j.v = w->ws;
    j.p = w->ws + 36 * w->C * j.b.ld;
    int threads = kiln_exec_threads(w->exec);
    for (j.ty0 = 0; j.ty0 < j.b.TH; j.ty0 += j.b.rows) {
        j.ty1 = j.ty0 + j.b.rows < j.b.TH ? j.ty0 + j.b.rows : j.b.TH;
        j.ntiles = (j.ty1 - j.ty0) * j.b.TW;
        atomic_store(&j.next, 0);
        kiln_exec_parallel_for(w->exec, w->C, 1, input_range, &j);
        kiln_exec_parallel(w->exec, threads < 36 ? threads : 36, gemm_task, &j);
        kiln_exec_parallel_for(w->exec, w->M, 1, output_range, &j);
    }
}
