/*
 * conv_wino16c.c — Winograd F(4x4, 3x3) and F(2x2, 3x3) in NCHW16C
 * (conv_wino16c.h).
 *
 * As tactic 6 (conv_winograd.c): an image in blocks of whole tile rows,
 * each (1) input transform, split over the threads by (channel block,
 * tile row); (2) the 36 GEMMs, claimed whole by the threads; (3) output
 * transform + bias + residual + Relu, split by (output channel block,
 * tile row).  One vector holds the 16 channels of one pixel of one
 * block, so the transforms are the same arithmetic (conv_wino_math.h) on
 * vectors of channels instead of vectors of tiles (inlined once per tile
 * size, as there); the image's edges are
 * whole zero pixels, not lanes masked off.  Products of one point:
 * P_xi^T[tile][M] = V_xi^T[tile][C] * U_xi^T[C][M], rows of the GEMM's A
 * (V^T, packed per call by the SGEMM's 12-row transposing packer) one
 * tile, B (U^T) packed at build.
 */
#include "ops/nn/conv_wino16c.h"

#include "device/cpu/sgemm.h"
#include "kiln_int.h"
#include "ops/nn/conv_wino_math.h"

#include <stdatomic.h>
#include <string.h>

#define WINO16C_MAGIC 0x43364957u /* "WI6C" */
#define BLK 16                    /* channels of a block: one vector */
#define NX(m) (((m) + 2) * ((m) + 2)) /* points of a tile */
#define L2_FLOATS (1 << 18)           /* a block's V^T and products: 1 MB, in a core's L2 */
#define MIN_TILES 64                  /* ... unless that left fewer tiles a block (GEMM rows) */

typedef kiln__wvec vec; /* BLK floats */
typedef int32_t veci __attribute__((vector_size(BLK * sizeof(int32_t))));

/* ------------------------------------------------------------ weights */

size_t kiln__wino16c_pack_bytes(int m, int64_t M, int64_t C) {
    return (KILN__WINO_HEAD_FLOATS + (size_t)NX(m) * kiln__sgemm_pack_b_floats(C, M)) * sizeof(float);
}

int kiln__wino16c_pack(int m, const float *w, int64_t M, int64_t C, void *dst) {
    float *u = kiln__wino_transform_w(m, w, M, C);
    if (!u) return KILN_ENOMEM;
    uint32_t head[KILN__WINO_HEAD_FLOATS] = {WINO16C_MAGIC, (uint32_t)M, (uint32_t)C, (uint32_t)NX(m)};
    memcpy(dst, head, sizeof head);
    const size_t per = kiln__sgemm_pack_b_floats(C, M);
    for (int xi = 0; xi < NX(m); xi++) { /* B(c, o) = U_xi[o][c] */
        kiln__gemm gm = {.K = C, .N = M, .b = u + (size_t)xi * M * C, .b_rs = 1, .b_cs = C};
        kiln__sgemm_pack_b(&gm, (float *)dst + KILN__WINO_HEAD_FLOATS + xi * per);
    }
    kiln__free(u);
    return 0;
}

const float *kiln__wino16c_packed(const void *prepacked, int m, int64_t M, int64_t C) {
    if (!prepacked) return NULL;
    uint32_t head[4];
    memcpy(head, prepacked, sizeof head);
    if (head[0] != WINO16C_MAGIC || head[1] != (uint32_t)M || head[2] != (uint32_t)C || head[3] != (uint32_t)NX(m))
        return NULL;
    return (const float *)prepacked + KILN__WINO_HEAD_FLOATS;
}

/* ------------------------------------------------------------ transforms */

typedef struct job {
    const kiln__wino16c *p;
    kiln__wino_blocks b;
    int64_t ty0, ty1, ntiles, rows; /* the block's tile rows, its tiles, its tile rows */
    float *v, *pr;                  /* V^T: NX x ld x C, products: NX x ld x M */
    _Atomic int64_t next;           /* the next GEMM to claim */
} job;

/* 16 floats at any address: a macro, not a function returning a vector
 * (that changes the ABI in builds without AVX-512: -Wpsabi) */
typedef float vecu __attribute__((vector_size(BLK * sizeof(float)), aligned(4)));
#define load(p) (*(const vecu *)(const void *)(p))

/* Units [u0, u1) of (channel block, tile row of the block): each tile's
 * a x a input pixels (zero outside the image) into its NX rows of V^T. */
KILN__WINO_INLINE void input_units(const int m, const job *j, int64_t u0, int64_t u1) {
    const int a = m + 2;
    const kiln__wino *w = &j->p->w;
    const int64_t C = w->C, H = w->H, W = w->W, TW = j->b.TW, ld = j->b.ld;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t cb = u / j->rows, r = u % j->rows, iy0 = (j->ty0 + r) * m - w->pt;
        const float *xc = w->x + cb * H * W * BLK;
        float *vc = j->v + (r * TW) * C + cb * BLK;
        for (int64_t tx = 0; tx < TW; tx++) {
            const int64_t ix0 = tx * m - w->pl;
            vec d[36], v[36];
            for (int i = 0; i < a; i++) {
                const int64_t iy = iy0 + i;
                for (int k = 0; k < a; k++) {
                    const int64_t ix = ix0 + k;
                    d[i * a + k] = iy >= 0 && iy < H && ix >= 0 && ix < W ? load(xc + (iy * W + ix) * BLK) : (vec){0};
                }
            }
            kiln__wino_in_tile(a, d, v);
            for (int xi = 0; xi < a * a; xi++) memcpy(vc + (xi * ld + tx) * C, &v[xi], sizeof v[xi]);
        }
    }
}

/* Units [u0, u1) of (output channel block, tile row of the block): each
 * tile's NX products into its m x m output pixels inside the image, bias,
 * residual and Relu added there; a fused chain the kernel does not apply
 * itself then runs on the tile row's pixels. */
KILN__WINO_INLINE void output_units(const int m, const job *j, int64_t u0, int64_t u1) {
    const int a = m + 2;
    const kiln__wino16c *p = j->p;
    const kiln__wino *w = &p->w;
    const int64_t M = w->M, OH = w->OH, OW = w->OW, TW = j->b.TW, ld = j->b.ld;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t mb = u / j->rows, r = u % j->rows, oy0 = (j->ty0 + r) * m;
        const int64_t oy1 = oy0 + m < OH ? oy0 + m : OH;
        const float *pc = j->pr + (r * TW) * M + mb * BLK;
        const vec bias = w->bias ? load(w->bias + mb * BLK) : (vec){0};
        float *yb = w->y + mb * OH * OW * BLK;
        const float *rb = p->res ? p->res + mb * OH * OW * BLK : NULL;
        for (int64_t tx = 0; tx < TW; tx++) {
            vec pt[36], o[16];
            for (int xi = 0; xi < a * a; xi++) pt[xi] = load(pc + (xi * ld + tx) * M);
            kiln__wino_out_tile(m, pt, o);
            for (int64_t oy = oy0; oy < oy1; oy++)
                for (int64_t q = 0; q < m && tx * m + q < OW; q++) {
                    const int64_t off = (oy * OW + tx * m + q) * BLK;
                    vec y = o[(oy - oy0) * m + q] + bias;
                    if (rb) y += load(rb + off);
                    if (p->relu) y = (vec)((veci)y & ~(y < (vec){0})); /* NaN stays NaN */
                    memcpy(yb + off, &y, sizeof y);
                }
        }
        if (w->call) /* one pixel a run: its values are 16 consecutive channels */
            for (int64_t px = oy0 * OW; px < oy1 * OW; px++)
                kiln_call_epilogue(w->call, 0, yb + px * BLK, BLK, mb * BLK, 1);
    }
}

static void input_range(void *ud, int64_t u0, int64_t u1) {
    const job *j = ud;
    if (j->p->w.m == 4) input_units(4, j, u0, u1);
    else input_units(2, j, u0, u1);
}

static void output_range(void *ud, int64_t u0, int64_t u1) {
    const job *j = ud;
    if (j->p->w.m == 4) output_units(4, j, u0, u1);
    else output_units(2, j, u0, u1);
}

/* The NX GEMMs, claimed one at a time (see conv_winograd.c's gemm_task):
 * a lone tile is computed as two rows (the second zero), as the SGEMM's
 * one-row path would read B unpacked. */
static void gemm_task(void *ud, int ith, int nth) {
    (void)ith;
    (void)nth;
    job *j = ud;
    const kiln__wino *w = &j->p->w;
    const size_t per = kiln__sgemm_pack_b_floats(w->C, w->M);
    const int64_t rows = j->ntiles < 2 ? 2 : j->ntiles;
    for (int64_t xi; (xi = atomic_fetch_add(&j->next, 1)) < NX(w->m);) {
        const float *b = w->u + xi * per;
        kiln__gemm gm = {.M = rows, .N = w->M, .K = w->C, .a = j->v + xi * j->b.ld * w->C, .a_rs = w->C,
                         .a_cs = 1, .alpha = 1.0f, .b = b, .b_rs = 1, .b_cs = w->C, .b_packed = b,
                         .c = j->pr + xi * j->b.ld * w->M, .ldc = w->M};
        kiln__sgemm_serial(&gm);
    }
}

void kiln__wino16c_run(const kiln__wino16c *p) {
    const kiln__wino *w = &p->w;
    const int nx = NX(w->m);
    job j = {.p = p, .b = kiln__wino_block_geom(w->m, w->C, w->M, w->OH, w->OW)};
    const int threads = kiln_exec_threads(w->exec);
    /* At 1 thread, blocks smaller than tactic 6's (4 MB) where the image is
     * large and its weights small: V^T and the products then stay in L2
     * between the transforms and the GEMMs, for the weights read again per
     * block (64 -> 64 at 56x56: 5 tile rows a block, 3 blocks;
     * bench/wino16c_ab: 0.86 against 1.01 ms in whole-image blocks, t6
     * 1.03-1.07 in both runs; ResNet-18's layer1 in the network 0.82-0.88
     * against 0.95-1.06 ms a conv).  Not at 2 threads: the phases' data
     * moves between the cores' L2s anyway, and three blocks are three times
     * the barriers and the GEMM calls (layer1 in the network 0.56-0.64
     * against 0.49-0.59 ms a conv with them).  The workspace
     * (kiln__wino_ws_bytes) covers either. */
    int64_t rows = L2_FLOATS / (nx * (w->C + w->M) * j.b.TW), rmin = (MIN_TILES + j.b.TW - 1) / j.b.TW;
    if (rows < rmin) rows = rmin;
    if (threads == 1 && rows < j.b.rows) {
        j.b.rows = rows;
        j.b.ld = (rows * j.b.TW + 15) / 16 * 16;
    }
    j.v = w->ws;
    j.pr = w->ws + nx * w->C * j.b.ld;
    for (j.ty0 = 0; j.ty0 < j.b.TH; j.ty0 += j.b.rows) {
        j.ty1 = j.ty0 + j.b.rows < j.b.TH ? j.ty0 + j.b.rows : j.b.TH;
        j.rows = j.ty1 - j.ty0;
        j.ntiles = j.rows * j.b.TW;
        if (j.ntiles == 1) /* the second GEMM row (ld >= 16 rows) */
            for (int xi = 0; xi < nx; xi++) memset(j.v + (xi * j.b.ld + 1) * w->C, 0, (size_t)w->C * sizeof(float));
        atomic_store(&j.next, 0);
        kiln_exec_parallel_for(w->exec, w->C / BLK * j.rows, 1, input_range, &j);
        kiln_exec_parallel(w->exec, threads < nx ? threads : nx, gemm_task, &j);
        kiln_exec_parallel_for(w->exec, w->M / BLK * j.rows, 1, output_range, &j);
    }
}
