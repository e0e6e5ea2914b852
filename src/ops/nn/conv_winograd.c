/*
 * conv_winograd.c — Winograd F(mxm, 3x3) convolution, m = 4 or 2
 * (conv_winograd.h).
 *
 * F(4x4, 3x3) transforms (Lavin & Gray, points 0, +-1, +-2, inf):
 *   B^T = [4  0 -5  0 1 0]   G = [ 1/4     0    0 ]   A^T = [1 1  1 1  1 0]
 *         [0 -4 -4  1 1 0]       [-1/6 -1/6 -1/6]         [0 1 -1 2 -2 0]
 *         [0  4 -4 -1 1 0]       [-1/6  1/6 -1/6]         [0 1  1 4  4 0]
 *         [0 -2 -1  2 1 0]       [1/24 1/12  1/6]         [0 1 -1 8 -8 1]
 *         [0  2 -1 -2 1 0]       [1/24 -1/12 1/6]
 *         [0  4  0 -5 0 1]       [   0    0    1]
 *
 * F(2x2, 3x3) (points 0, +-1, inf):
 *   B^T = [1  0 -1  0]   G = [  1    0   0 ]   A^T = [1 1  1  0]
 *         [0  1  1  0]       [1/2  1/2 1/2]         [0 1 -1 -1]
 *         [0 -1  1  0]       [1/2 -1/2 1/2]
 *         [0  1  0 -1]       [  0    0   1]
 * F(2x2) does 4 multiplications per output against F(4x4)'s 2.25 (the
 * direct sum's 9), but with NX = 16 GEMMs instead of 36 its transformed
 * weights are 16/9 of W, not 4x, and a 7x7 output is 16 tiles of 2x2, not
 * 4 of 4x4: where the GEMMs have few columns and stream large weights
 * (ResNet's 7x7 layers, 512 channels) it is the one that pays.
 *
 * An image is done in blocks of whole tile rows, sized so that the
 * transformed input V (36 x C x tiles) and the products (36 x M x tiles)
 * stay within a few MB: (1) the input transform, channels split over the
 * threads; (2) the NX GEMMs, each whole by one thread (each reads its
 * own U_xi, so the weights are streamed once whatever the thread count);
 * (3) the output transform + bias + fused epilogue, output channels split
 * over the threads (tactics 21 and 22: each thread all three on a band of
 * tile rows, split_band).  The transforms work on 16 consecutive tiles of the
 * block at once, one per lane of a vector (GCC vector extension: AVX-512
 * or two AVX2 halves); with AVX-512 the tiles are gathered from X and
 * the results scattered into Y by masked gathers/scatters (zero outside
 * the image), elsewhere by scalar loops.  The hardware prefetchers do not
 * follow gathers and scatters, so each lane group prefetches what the
 * group two ahead reads and writes (input rows, V lines, product rows,
 * output rows): PP-OCRv4 det's 96 -> 24 convs at 160x160, whose 96 input
 * planes come from L3, spent 74% of their time waiting in the input
 * transform without it (2.3x slower).
 *
 * Accuracy: the transforms' constants are exact in binary except G's
 * sixths and twenty-fourths (computed in double at prepack); the output
 * differs from the direct sum by a few float ulps of its magnitude times
 * the (up to 8x) transform gains, well inside the conformance tolerance.
 */
#include "ops/nn/conv_winograd.h"
#include "ops/nn/conv_wino_math.h"

#include "device/cpu/sgemm.h"
#include "kiln_int.h"

#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define WINO_MAGIC 0x4f4e4957u /* "WINO" */
#define LANES 16 /* tiles transformed at once */
#define BLOCK_FLOATS (1 << 20) /* V + products of one block of tile rows */
/* STRIDES: in split mode a point's V (C x ld) and products (M x ld)
 * start a line (16 floats) past the previous point's end.  The transforms
 * touch the same tile in all NX points at once; without the line the NX
 * addresses lie a multiple of 2 KB apart (ld a multiple of 16 floats) and
 * share one or two of L1's 64 sets, 12 lines each (PP-OCRv4 det's 96 -> 24
 * convs in pieces of 120 tiles, ld 128: every point in one set, 9-16%
 * slower than pieces of 80 or 240 tiles; with the line all three within
 * 0.1 ms of 1.8). */

typedef kiln__wvec vlane; /* LANES floats */

/* ------------------------------------------------------------ weights */

/* The tile's input side (m + 2) and its point count, NX. */
#define SIDE(m) ((m) + 2)
#define NX(m) (SIDE(m) * SIDE(m))

size_t kiln__wino_pack_bytes(int m, int64_t M, int64_t C) {
    return (KILN__WINO_HEAD_FLOATS + (size_t)NX(m) * kiln__sgemm_pack_a_floats(M, C)) * sizeof(float);
}

float *kiln__wino_transform_w(int m, const float *w, int64_t M, int64_t C) {
    static const double G4[6][3] = {{0.25, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}};
    static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    const double (*G)[3] = m == 4 ? G4 : G2;
    const int a = SIDE(m), nx = NX(m);
    float *u = kiln__malloc((size_t)(nx * M * C) * sizeof(float));
    if (!u) {
        kiln_set_error(KILN_ENOMEM, "Conv (Winograd): out of memory transforming W");
        return NULL;
    }
    for (int64_t o = 0; o < M; o++)
        for (int64_t c = 0; c < C; c++) {
            const float *g = w + (o * C + c) * 9;
            double t[6][3]; /* G g */
            for (int i = 0; i < a; i++)
                for (int j = 0; j < 3; j++)
                    t[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
            for (int i = 0; i < a; i++)
                for (int k = 0; k < a; k++) /* (G g) G^T */
                    u[((i * a + k) * M + o) * C + c] =
                        (float)(t[i][0] * G[k][0] + t[i][1] * G[k][1] + t[i][2] * G[k][2]);
        }
    return u;
}

int kiln__wino_pack(int m, const float *w, int64_t M, int64_t C, void *dst) {
    const int nx = NX(m);
    float *u = kiln__wino_transform_w(m, w, M, C);
    if (!u) return KILN_ENOMEM;
    uint32_t head[KILN__WINO_HEAD_FLOATS] = {WINO_MAGIC, (uint32_t)M, (uint32_t)C, (uint32_t)nx};
    memcpy(dst, head, sizeof head);
    size_t per = kiln__sgemm_pack_a_floats(M, C);
    for (int xi = 0; xi < nx; xi++) {
        kiln__gemm gm = {.M = M, .K = C, .a = u + (size_t)xi * M * C, .a_rs = C, .a_cs = 1, .alpha = 1.0f};
        kiln__sgemm_pack_a(&gm, (float *)dst + KILN__WINO_HEAD_FLOATS + xi * per);
    }
    kiln__free(u);
    return 0;
}

const float *kiln__wino_packed(const void *prepacked, int m, int64_t M, int64_t C) {
    if (!prepacked) return NULL;
    uint32_t head[4];
    memcpy(head, prepacked, sizeof head);
    if (head[0] != WINO_MAGIC || head[1] != (uint32_t)M || head[2] != (uint32_t)C ||
        (m ? head[3] != (uint32_t)NX(m) : head[3] != NX(2) && head[3] != NX(4)))
        return NULL;
    return (const float *)prepacked + KILN__WINO_HEAD_FLOATS;
}

/* ------------------------------------------------------------ geometry */

kiln__wino_blocks kiln__wino_block_geom(int m, int64_t C, int64_t M, int64_t OH, int64_t OW) {
    kiln__wino_blocks b;
    b.TH = (OH + m - 1) / m;
    b.TW = (OW + m - 1) / m;
    b.rows = BLOCK_FLOATS / (NX(m) * (C + M) * b.TW);
    if (b.rows < 1) b.rows = 1;
    if (b.rows > b.TH) b.rows = b.TH;
    b.ld = (b.rows * b.TW + LANES - 1) / LANES * LANES;
    return b;
}

int kiln__wino_fits(int m, int64_t M, int64_t OW) {
    /* the GEMMs' matrix-vector paths (one row or column) read A unpacked */
    return M >= 2 && (OW + m - 1) / m >= 2;
}

size_t kiln__wino_ws_bytes(int m, int64_t C, int64_t M, int64_t OH, int64_t OW) {
    kiln__wino_blocks b = kiln__wino_block_geom(m, C, M, OH, OW);
    /* + a line per point and operand: conv_wino16c.c's pads between points */
    return (size_t)(NX(m) * ((C + M) * b.ld + 32)) * sizeof(float) + 64;
}

/* ------------------------------------------------------------ transforms */

typedef struct job {
    const kiln__wino *w;
    kiln__wino_blocks b;
    int64_t ty0, ty1, ntiles; /* the block's tile rows, its tiles */
    float *v, *p;             /* NX x C x ld, NX x M x ld, a point's every vs, ps floats */
    int64_t vs, ps;           /* split mode: C ld + 16, M ld + 16 (STRIDES); else C ld, M ld */
    /* the first lane group's tile corners (lanes_of), written once per block */
    int32_t row0[LANES] __attribute__((aligned(64))), col0[LANES] __attribute__((aligned(64)));
} job;

/* Tile t of the block (row-major over its tile rows): the top-left input
 * (and output, without the pads) element of its tile. */
static void tile_corner(const job *j, int64_t t, int32_t *row, int32_t *col) {
    *row = (int32_t)((j->ty0 + t / j->b.TW) * j->w->m);
    *col = (int32_t)(t % j->b.TW * j->w->m);
}

static void block_lanes(job *j) {
    for (int l = 0; l < LANES; l++) tile_corner(j, l < j->ntiles ? l : 0, &j->row0[l], &j->col0[l]);
}

/* The tiles of one lane group: tiles [t0, t0 + n) of the block, lane l
 * holding tile t0 + l (lanes past n hold anything: masked off). */
#if defined(__AVX512F__)
/* The corners as vectors: advanced from the previous group's (lanes_of is
 * called for t0 = 0, LANES, 2 LANES, ... in turn), never stored as 16
 * ints and read back as one vector, which stalls on the store forwarding
 * (22% of the input transform's time when it did). */
typedef struct lanes {
    int n;
    __m512i row, col;
} lanes;

static void lanes_of(const job *j, int64_t t0, lanes *ln) {
    ln->n = (int)(j->ntiles - t0 < LANES ? j->ntiles - t0 : LANES);
    if (t0 == 0) {
        ln->row = _mm512_load_si512(j->row0);
        ln->col = _mm512_load_si512(j->col0);
        return;
    }
    const __m512i span = _mm512_set1_epi32((int)(j->b.TW * j->w->m)), m = _mm512_set1_epi32(j->w->m);
    ln->col = _mm512_add_epi32(ln->col, _mm512_set1_epi32(LANES * j->w->m));
    for (__mmask16 k; (k = _mm512_cmpge_epi32_mask(ln->col, span));) { /* wrap to the next tile row */
        ln->col = _mm512_mask_sub_epi32(ln->col, k, ln->col, span);
        ln->row = _mm512_mask_add_epi32(ln->row, k, ln->row, m);
    }
}
#else
typedef struct lanes {
    int n;
    int32_t row[LANES], col[LANES];
} lanes;

static void lanes_of(const job *j, int64_t t0, lanes *ln) {
    ln->n = (int)(j->ntiles - t0 < LANES ? j->ntiles - t0 : LANES);
    for (int l = 0; l < ln->n; l++) tile_corner(j, t0 + l, &ln->row[l], &ln->col[l]);
}
#endif

/* The kernels below take the tile size as a constant argument (always
 * inlined into one copy per size): a = m + 2 input points a side. */
#define INLINE KILN__WINO_INLINE

#if defined(__AVX512F__)

/* a x a input tiles (zero outside the image), one per lane. */
INLINE void gather(const int a, const kiln__wino *w, const float *xc, const lanes *ln, vlane d[36]) {
    const __m512i vr = ln->row, vc = ln->col;
    const __m512i H = _mm512_set1_epi32((int)w->H), W = _mm512_set1_epi32((int)w->W);
    const __mmask16 live = (__mmask16)((1u << ln->n) - 1);
    __mmask16 cm[6];
    __m512i cx[6];
    for (int k = 0; k < a; k++) {
        cx[k] = _mm512_add_epi32(vc, _mm512_set1_epi32(k - (int)w->pl));
        cm[k] = _mm512_cmpge_epi32_mask(cx[k], _mm512_setzero_si512()) & _mm512_cmplt_epi32_mask(cx[k], W);
    }
    for (int i = 0; i < a; i++) {
        __m512i iy = _mm512_add_epi32(vr, _mm512_set1_epi32(i - (int)w->pt));
        __mmask16 rm = live & _mm512_cmpge_epi32_mask(iy, _mm512_setzero_si512()) &
                       _mm512_cmplt_epi32_mask(iy, H);
        __m512i base = _mm512_mullo_epi32(iy, W);
        for (int k = 0; k < a; k++)
            d[i * a + k] = (vlane)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), rm & cm[k],
                                                           _mm512_add_epi32(base, cx[k]), xc, 4);
    }
}

/* o[r * m + q] + bias into output (row + r, col + q) of each lane's tile,
 * inside the image. */
INLINE void scatter(const int m, const kiln__wino *w, float *ym, const lanes *ln, const vlane o[16], float bias) {
    const __m512i vr = ln->row, vc = ln->col;
    const __m512i OH = _mm512_set1_epi32((int)w->OH), OW = _mm512_set1_epi32((int)w->OW);
    const __mmask16 live = (__mmask16)((1u << ln->n) - 1);
    for (int r = 0; r < m; r++) {
        __m512i oy = _mm512_add_epi32(vr, _mm512_set1_epi32(r));
        __mmask16 rm = live & _mm512_cmplt_epi32_mask(oy, OH);
        __m512i base = _mm512_mullo_epi32(oy, OW);
        for (int q = 0; q < m; q++) {
            __m512i ox = _mm512_add_epi32(vc, _mm512_set1_epi32(q));
            __mmask16 k = rm & _mm512_cmplt_epi32_mask(ox, OW);
            _mm512_mask_i32scatter_ps(ym, k, _mm512_add_epi32(base, ox),
                                      _mm512_add_ps((__m512)o[r * m + q], _mm512_set1_ps(bias)), 4);
        }
    }
}

/* The first n floats at p into *v, zeros after (never reads past them). */
static void load_n(vlane *v, const float *p, int n) {
    *v = (vlane)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}
#else
INLINE void gather(const int a, const kiln__wino *w, const float *xc, const lanes *ln, vlane d[36]) {
    float (*s)[LANES] = (float (*)[LANES])d;
    for (int i = 0; i < a; i++)
        for (int k = 0; k < a; k++)
            for (int l = 0; l < LANES; l++) {
                int64_t iy = ln->row[l] + i - w->pt, ix = ln->col[l] + k - w->pl;
                s[i * a + k][l] = l < ln->n && iy >= 0 && iy < w->H && ix >= 0 && ix < w->W
                                      ? xc[iy * w->W + ix] : 0.0f;
            }
}

INLINE void scatter(const int m, const kiln__wino *w, float *ym, const lanes *ln, const vlane o[16], float bias) {
    const float (*s)[LANES] = (const float (*)[LANES])o;
    for (int l = 0; l < ln->n; l++)
        for (int r = 0; r < m && ln->row[l] + r < w->OH; r++)
            for (int q = 0; q < m && ln->col[l] + q < w->OW; q++)
                ym[(ln->row[l] + r) * w->OW + ln->col[l] + q] = s[r * m + q][l] + bias;
}

static void load_n(vlane *v, const float *p, int n) {
    *v = (vlane){0};
    memcpy(v, p, (size_t)n * sizeof(float));
}
#endif

/* Into L1 (the gathers and scatters of the transforms are not followed by
 * the hardware prefetchers): the rows of plane `base` (H x W) that the
 * lane group of tiles [t, t + LANES) reads (X: a = m + 2 rows from the
 * tile's corner less the pads) or writes (Y: m rows, no pads; rw 1). */
static void prefetch_group(const job *j, const float *base, int64_t t, int64_t H, int64_t W, int64_t pt,
                           int64_t pl, int64_t a, int rw) {
    const int64_t TW = j->b.TW, m = j->w->m;
    int64_t end = t + LANES < j->ntiles ? t + LANES : j->ntiles;
    while (t < end) {
        int64_t row = (j->ty0 + t / TW) * m - pt, q0 = t % TW;
        int64_t q1 = end - (t - q0) < TW ? end - (t - q0) : TW; /* tiles [q0, q1) of this tile row */
        int64_t x0 = q0 * m - pl, x1 = (q1 - 1) * m - pl + a;
        if (x0 < 0) x0 = 0;
        if (x1 > W) x1 = W;
        for (int64_t r = row < 0 ? 0 : row; r < row + a && r < H; r++) {
            const char *p = (const char *)(base + r * W + x0), *e = (const char *)(base + r * W + x1);
            for (; p < e; p += 64) {
                if (rw) __builtin_prefetch(p, 1, 3);
                else __builtin_prefetch(p, 0, 3);
            }
        }
        t += q1 - q0;
    }
}

/* The first tile of the lane group two ahead of t0: in this plane of
 * ntiles (*next = 0) or, past its end, in the next plane (*next = 1); -1
 * where there is none (a block of one or two groups). */
static int64_t group_ahead(const job *j, int64_t t0, int *next) {
    int64_t ahead = t0 + 2 * LANES;
    *next = ahead >= j->ntiles;
    if (*next) ahead -= (j->ntiles + LANES - 1) / LANES * LANES;
    return ahead < j->ntiles ? ahead : -1;
}

INLINE void input_tiles(const int m, const job *j, int64_t c0, int64_t c1) {
    const int a = SIDE(m);
    const kiln__wino *w = j->w;
    const int64_t ld = j->b.ld, plane = w->H * w->W;
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = w->x + c * plane;
        lanes ln = {0};
        for (int64_t t0 = 0; t0 < j->ntiles; t0 += LANES) {
            vlane d[36], v[36];
            int next;
            int64_t ahead = group_ahead(j, t0, &next);
            if (ahead >= 0 && (!next || c + 1 < c1)) {
                prefetch_group(j, xc + next * plane, ahead, w->H, w->W, w->pt, w->pl, a, 0);
                float *va = j->v + (c + next) * ld + ahead; /* and the 36 V lines it writes */
                for (int xi = 0; xi < a * a; xi++) __builtin_prefetch(va + xi * j->vs, 1, 3);
            }
            lanes_of(j, t0, &ln);
            gather(a, w, xc, &ln, d);
            kiln__wino_in_tile(a, d, v);
            for (int xi = 0; xi < a * a; xi++) /* t0 + LANES <= ld */
                memcpy(j->v + xi * j->vs + c * ld + t0, &v[xi], sizeof v[xi]);
        }
    }
}

INLINE void output_tiles(const int m, const job *j, int64_t m0, int64_t m1) {
    const int a = SIDE(m);
    const kiln__wino *w = j->w;
    const int64_t ld = j->b.ld, OH = w->OH, OW = w->OW;
    for (int64_t oc = m0; oc < m1; oc++) {
        float *ym = w->y + oc * OH * OW;
        lanes ln = {0};
        for (int64_t t0 = 0; t0 < j->ntiles; t0 += LANES) {
            int next;
            int64_t ahead = group_ahead(j, t0, &next);
            if (ahead >= 0 && (!next || oc + 1 < m1)) {
                const float *pa = j->p + (oc + next) * ld + ahead;
                for (int xi = 0; xi < a * a; xi++) __builtin_prefetch(pa + xi * j->ps, 0, 3);
                prefetch_group(j, ym + next * OH * OW, ahead, OH, OW, 0, 0, m, 1);
            }
            lanes_of(j, t0, &ln);
            vlane p[36], o[16];
            for (int xi = 0; xi < a * a; xi++) load_n(&p[xi], j->p + xi * j->ps + oc * ld + t0, ln.n);
            kiln__wino_out_tile(m, p, o);
            scatter(m, w, ym, &ln, o, w->bias ? w->bias[oc] : 0.0f);
        }
        int64_t r0 = j->ty0 * m, r1 = j->ty1 * m < OH ? j->ty1 * m : OH;
        kiln_call_epilogue(w->call, 0, ym + r0 * OW, (r1 - r0) * OW, oc, 0);
    }
}

static void input_range(void *ud, int64_t c0, int64_t c1) {
    const job *j = ud;
    if (j->w->m == 4) input_tiles(4, j, c0, c1);
    else input_tiles(2, j, c0, c1);
}

static void output_range(void *ud, int64_t m0, int64_t m1) {
    const job *j = ud;
    if (j->w->m == 4) output_tiles(4, j, m0, m1);
    else output_tiles(2, j, m0, m1);
}

/* GEMM xi of the block: products_xi = U_xi V_xi. */
static void gemm_one(const job *j, int64_t xi) {
    const kiln__wino *w = j->w;
    const float *a = w->u + xi * kiln__sgemm_pack_a_floats(w->M, w->C);
    kiln__gemm gm = {.M = w->M, .N = j->ntiles, .K = w->C, .a = a, .a_rs = w->C, .a_cs = 1,
                     .alpha = 1.0f, .a_packed = a, .b = j->v + xi * j->vs,
                     .b_rs = j->b.ld, .b_cs = 1, .c = j->p + xi * j->ps, .ldc = j->b.ld};
    kiln__sgemm_serial(&gm);
}

/* The NX GEMMs over the threads (kiln_exec_parallel_for: each thread its
 * own share first, then what is left of the others', so one that starts
 * late or is preempted leaves its share to them).  Each GEMM is computed
 * whole by one thread, so the result does not depend on which; owned
 * shares give a thread the same points' products at every inference (in
 * arrival order from one counter they changed hands from run to run, and
 * across two dies a thread then wrote lines the other die's cache held). */
static void gemm_range(void *ud, int64_t x0, int64_t x1) {
    for (int64_t xi = x0; xi < x1; xi++) gemm_one(ud, xi);
}

/* Split mode (kiln__wino.split): thread ith's band of the image's tile
 * rows, in pieces of `rows` tile rows, each piece transformed (all C
 * channels), multiplied (all NX GEMMs) and transformed back (all M) before
 * the next, its V and products in the thread's own scratch (slot 1; the
 * SGEMM's is 0).  Nothing crosses between the cores but the rows either
 * side of a band, and the band's output rows are those the thread's input
 * rows lie under: a layer before or after that splits the image's rows
 * (or each plane's pixels) the same way keeps them in its cache.  Every
 * thread reads all of U, so this pays where U is small beside V and the
 * products (PP-OCRv4 det's 96 -> 24 convs at 160x160: U 0.3 MB, V 22 MB). */
KILN__WINO_INLINE void split_band(const int m, const job *img, int64_t r0, int64_t r1) {
    const kiln__wino *w = img->w;
    const int64_t rows = img->b.rows, ld = (rows * img->b.TW + 15) / 16 * 16;
    float *ws = kiln__cpu_scratch_or_fail(1, (size_t)(NX(m) * ((w->C + w->M) * ld + 32)),
                                          "Winograd's split-mode buffers");
    if (!ws) return; /* (the layer fails with the message) */
    job j = {.w = w, .b = img->b, .v = ws, .vs = w->C * ld + 16, .ps = w->M * ld + 16};
    j.p = ws + NX(m) * j.vs;
    j.b.ld = ld;
    for (j.ty0 = r0; j.ty0 < r1; j.ty0 += rows) {
        j.ty1 = j.ty0 + rows < r1 ? j.ty0 + rows : r1;
        j.ntiles = (j.ty1 - j.ty0) * j.b.TW;
        block_lanes(&j);
        input_tiles(m, &j, 0, w->C);
        for (int64_t xi = 0; xi < NX(m); xi++) gemm_one(&j, xi);
        output_tiles(m, &j, 0, w->M);
    }
}

static void split_task(void *ud, int ith, int nth) {
    const job *img = ud;
    const int64_t r0 = ith * img->b.TH / nth, r1 = (ith + 1) * img->b.TH / nth;
    if (r0 >= r1) return;
    if (img->w->m == 4) split_band(4, img, r0, r1);
    else split_band(2, img, r0, r1);
}

/* Split mode's pieces: tile rows whose V and products take at most
 * SPLIT_FLOATS (1 MB), but at least SPLIT_TILES tiles (the GEMMs' columns)
 * where the image has them: det's convs above in pieces of 80 tiles ran as
 * fast as in 240 and faster than in 40 (the GEMM calls' overhead).  The
 * shared workspace (kiln__wino_ws_bytes) is then left unused. */
#define SPLIT_FLOATS (1 << 18)
#define SPLIT_TILES 64

void kiln__wino_run(const kiln__wino *w) {
    const int nx = NX(w->m);
    job j = {.w = w, .b = kiln__wino_block_geom(w->m, w->C, w->M, w->OH, w->OW)};
    j.v = w->ws;
    j.vs = w->C * j.b.ld; /* (the line apart measured 4% slower here, det's 96 -> 24 convs on one die) */
    j.ps = w->M * j.b.ld;
    j.p = w->ws + nx * j.vs;
    int threads = kiln_exec_threads(w->exec);
    if (w->split && threads > 1 && j.b.TH > 1) {
        int64_t rows = SPLIT_FLOATS / (nx * (w->C + w->M) * j.b.TW), rmin = (SPLIT_TILES + j.b.TW - 1) / j.b.TW;
        j.b.rows = rows < rmin ? rmin : rows;
        kiln_exec_parallel(w->exec, threads < j.b.TH ? threads : (int)j.b.TH, split_task, &j);
        return;
    }
    for (j.ty0 = 0; j.ty0 < j.b.TH; j.ty0 += j.b.rows) {
        j.ty1 = j.ty0 + j.b.rows < j.b.TH ? j.ty0 + j.b.rows : j.b.TH;
        j.ntiles = (j.ty1 - j.ty0) * j.b.TW;
        block_lanes(&j);
        kiln_exec_parallel_for(w->exec, w->C, 1, input_range, &j);
        kiln_exec_parallel_for(w->exec, nx, 1, gemm_range, &j);
        kiln_exec_parallel_for(w->exec, w->M, 1, output_range, &j);
    }
}
