/*
 * conv_wino16c.c — Winograd F(4x4, 3x3) and F(2x2, 3x3) in NCHW16C
 * (conv_wino16c.h).
 *
 * As tactic 6 (conv_winograd.c): an image in blocks of whole tile rows,
 * each (1) input transform, split over the threads by (channel block,
 * tile row); (2) the 36 GEMMs, whole ones a thread (parallel_for); (3) output
 * transform + bias + residual + Relu, split by (output channel block,
 * tile row).  One vector holds the 16 channels of one pixel of one
 * block, so the transforms are the same arithmetic (conv_wino_math.h) on
 * vectors of channels instead of vectors of tiles (inlined once per tile
 * size, as there); the image's edges are
 * whole zero pixels, not lanes masked off.  Products of one point:
 * P_xi^T[tile][M] = V_xi^T[tile][C] * U_xi^T[C][M], rows of the GEMM's A
 * (V^T, packed per call by the SGEMM's 12-row transposing packer) one
 * tile, B (U^T) packed at build.
 *
 * Split mode (tactics 18, 19): one dispatch a block, each thread its
 * contiguous share of the block's tiles, in pieces of at most an L2's
 * worth, each piece through all three phases on that thread alone (its
 * rows of V^T and of the products are its own, so no barrier between
 * the phases).  On ResNet-50's 56x56 convs at 2 threads a conv took 0.31
 * against 0.53 ms when the two vCPUs sat on two dies (V^T and the
 * products no longer cross them), level on one die.
 */
#include "ops/nn/conv_wino16c.h"

#include "device/cpu/sgemm.h"
#include "kiln_int.h"
#include "ops/nn/conv_wino_math.h"

#include <string.h>

#define WINO16C_MAGIC 0x43364957u /* "WI6C" */
#define BLK 16                    /* channels of a block: one vector */
#define NX(m) (((m) + 2) * ((m) + 2)) /* points of a tile */
#define L2_FLOATS (1 << 18)           /* a block's V^T and products: 1 MB, in a core's L2 */
#define MIN_TILES 64                  /* ... unless that left fewer tiles a block (GEMM rows) */
/* Split mode only where each thread gets at least one of the SGEMM's
 * 12-row strips of tiles and its V^T and products, which would otherwise
 * cross between the cores, outweigh the U each further thread then reads
 * again (see kiln__wino16c_run); elsewhere the phases split as tactics 14
 * and 15.  ResNet-50 at 2 threads (bench/README.md): split won on its
 * 56x56 convs (U 0.6 MB, V^T and products 3.6 MB) and its 28x28 ones
 * (2.4 MB against 1.8), lost on the 14x14 ones with F(2x2) (4.2 against
 * 1.6: 4% slower) and F(4x4) (9.4 against 0.6: 1.4x as long). */
#define SPLIT_TILES 12

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

/* Where the rows of V^T and of the products are: tile t's of point xi at
 * v + xi * vs + (t - t0) * C and pr + xi * ps + (t - t0) * M, the points
 * ld rows and one cache line (PAD floats) apart: at exactly ld rows (16
 * KB on a 16-tile 256-channel block) the 36 lines a tile's transform
 * writes, and the output transform reads, fell into one L1 set. */
#define PAD 16
typedef struct kiln__wino16c_buf {
    float *v, *pr;
    int64_t vs, ps, t0;
} kiln__wino16c_buf;

static kiln__wino16c_buf buf_at(float *ws, int m, int64_t ld, int64_t C, int64_t M, int64_t t0) {
    const int64_t vs = ld * C + PAD;
    return (kiln__wino16c_buf){.v = ws, .pr = ws + NX(m) * vs, .vs = vs, .ps = ld * M + PAD, .t0 = t0};
}

/* Floats of buf_at's buffers (kiln__wino_ws_bytes counts the pads). */
static size_t buf_floats(int m, int64_t ld, int64_t C, int64_t M) {
    return (size_t)(NX(m) * (ld * (C + M) + 2 * PAD));
}

typedef struct job {
    const kiln__wino16c *p;
    kiln__wino_blocks b;
    int64_t ty0, ty1, ntiles, rows; /* the block's tile rows, its tiles, its tile rows */
    int64_t chunk;                  /* split mode: tiles of a thread's piece */
    kiln__wino16c_buf buf;          /* the phases' split: in the workspace */
} job;

/* 16 floats at any address: a macro, not a function returning a vector
 * (that changes the ABI in builds without AVX-512: -Wpsabi) */
typedef float vecu __attribute__((vector_size(BLK * sizeof(float)), aligned(4)));
#define load(p) (*(const vecu *)(const void *)(p))

/* Channel block cb of the block's tiles [t0, t1) (tile r * TW + tx): each
 * tile's a x a input pixels (zero outside the image) into its NX rows of
 * V^T. */
KILN__WINO_INLINE void input_tiles(const int m, const job *j, const kiln__wino16c_buf *B, int64_t cb, int64_t t0,
                                   int64_t t1) {
    const int a = m + 2;
    const kiln__wino *w = &j->p->w;
    const int64_t C = w->C, H = w->H, W = w->W, TW = j->b.TW, vs = B->vs;
    const float *xc = w->x + cb * H * W * BLK;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t iy0 = (j->ty0 + t / TW) * m - w->pt, ix0 = t % TW * m - w->pl;
        float *vc = B->v + (t - B->t0) * C + cb * BLK;
        vec d[36], v[36];
        if (iy0 >= 0 && iy0 + a <= H && ix0 >= 0 && ix0 + a <= W) {
            /* inside the image (most tiles): a row pointer each, the
             * columns constant offsets; the bounds tested per pixel took
             * ~10 scalar instructions a load (an imul among them) */
            const float *r = xc + (iy0 * W + ix0) * BLK;
            for (int i = 0; i < a; i++, r += W * BLK)
                for (int k = 0; k < a; k++) d[i * a + k] = load(r + k * BLK);
        } else {
            for (int i = 0; i < a; i++) {
                const int64_t iy = iy0 + i;
                for (int k = 0; k < a; k++) {
                    const int64_t ix = ix0 + k;
                    d[i * a + k] = iy >= 0 && iy < H && ix >= 0 && ix < W ? load(xc + (iy * W + ix) * BLK) : (vec){0};
                }
            }
        }
        kiln__wino_in_tile(a, d, v);
        for (int xi = 0; xi < a * a; xi++) memcpy(vc + xi * vs, &v[xi], sizeof v[xi]);
    }
}

/* One output pixel's 16 channels at yb + off: bias, residual, Relu, store. */
KILN__WINO_INLINE void out_px(const kiln__wino16c *p, vec y, vec bias, float *yb, const float *rb, int64_t off) {
    y += bias;
    if (rb) y += load(rb + off);
    if (p->relu) y = (vec)((veci)y & ~(y < (vec){0})); /* NaN stays NaN */
    memcpy(yb + off, &y, sizeof y);
}

/* Output channel block mb of the block's tiles [t0, t1): each tile's NX
 * products into its m x m output pixels inside the image, bias, residual
 * and Relu added there; a fused chain the kernel does not apply itself
 * then runs on the tile's pixels. */
KILN__WINO_INLINE void output_tiles(const int m, const job *j, const kiln__wino16c_buf *B, int64_t mb, int64_t t0,
                                    int64_t t1) {
    const int a = m + 2;
    const kiln__wino16c *p = j->p;
    const kiln__wino *w = &p->w;
    const int64_t M = w->M, OH = w->OH, OW = w->OW, TW = j->b.TW, ps = B->ps;
    const vec bias = w->bias ? load(w->bias + mb * BLK) : (vec){0};
    float *yb = w->y + mb * OH * OW * BLK;
    const float *rb = p->res ? p->res + mb * OH * OW * BLK : NULL;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t oy0 = (j->ty0 + t / TW) * m, ox0 = t % TW * m;
        const int64_t oy1 = oy0 + m < OH ? oy0 + m : OH, ox1 = ox0 + m < OW ? ox0 + m : OW;
        const float *pc = B->pr + (t - B->t0) * M + mb * BLK;
        vec pt[36], o[16];
        for (int xi = 0; xi < a * a; xi++) pt[xi] = load(pc + xi * ps);
        kiln__wino_out_tile(m, pt, o);
        if (oy1 - oy0 == m && ox1 - ox0 == m) /* a whole tile (most): constant trip counts and offsets */
            for (int i = 0; i < m; i++)
                for (int k = 0; k < m; k++)
                    out_px(p, o[i * m + k], bias, yb, rb, ((oy0 + i) * OW + ox0 + k) * BLK);
        else
            for (int64_t oy = oy0; oy < oy1; oy++)
                for (int64_t ox = ox0; ox < ox1; ox++)
                    out_px(p, o[(oy - oy0) * m + ox - ox0], bias, yb, rb, (oy * OW + ox) * BLK);
        if (w->call) /* one pixel a run: its values are 16 consecutive channels */
            for (int64_t oy = oy0; oy < oy1; oy++)
                for (int64_t ox = ox0; ox < ox1; ox++)
                    kiln_call_epilogue(w->call, 0, yb + (oy * OW + ox) * BLK, BLK, mb * BLK, 1);
    }
}

/* Units [u0, u1) of (channel block, tile row of the block). */
KILN__WINO_INLINE void input_units(const int m, const job *j, int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; u++)
        input_tiles(m, j, &j->buf, u / j->rows, u % j->rows * j->b.TW, (u % j->rows + 1) * j->b.TW);
}

/* Units [u0, u1) of (output channel block, tile row of the block). */
KILN__WINO_INLINE void output_units(const int m, const job *j, int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; u++)
        output_tiles(m, j, &j->buf, u / j->rows, u % j->rows * j->b.TW, (u % j->rows + 1) * j->b.TW);
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

/* Point xi's GEMM on the tiles [t0, t0 + rows): P_xi^T = V_xi^T U_xi^T. */
static void gemm_rows(const job *j, const kiln__wino16c_buf *B, int64_t xi, int64_t t0, int64_t rows) {
    const kiln__wino *w = &j->p->w;
    const float *b = w->u + xi * kiln__sgemm_pack_b_floats(w->C, w->M);
    kiln__gemm gm = {.M = rows, .N = w->M, .K = w->C, .a = B->v + xi * B->vs + (t0 - B->t0) * w->C, .a_rs = w->C,
                     .a_cs = 1, .alpha = 1.0f, .b = b, .b_rs = 1, .b_cs = w->C, .b_packed = b,
                     .c = B->pr + xi * B->ps + (t0 - B->t0) * w->M, .ldc = w->M};
    kiln__sgemm_serial(&gm);
}

/* GEMMs [x0, x1) of the NX (kiln_exec_parallel_for: thread i the i-th
 * share first, so at each layer the same thread writes the same points'
 * products into the workspace, which stays in its cache instead of being
 * taken from the other core's): a lone tile is computed as two rows (the
 * second zero), as the SGEMM's one-row path would read B unpacked. */
static void gemm_range(void *ud, int64_t x0, int64_t x1) {
    const job *j = ud;
    for (int64_t xi = x0; xi < x1; xi++) gemm_rows(j, &j->buf, xi, 0, j->ntiles < 2 ? 2 : j->ntiles);
}

/* Split mode (kiln__wino16c.split): thread ith's share of the block's
 * tiles, in pieces of at most `chunk` tiles, each piece transformed,
 * multiplied and transformed back before the next, its V^T and products
 * in the thread's own scratch (slot 1; the SGEMM's is 0): memory no other
 * core wrote last (the shared workspace is every layer's, and across two
 * dies taking its lines from the core that wrote them in another layer
 * cost ResNet-50's 56x56 convs 0.2 ms of 0.5).  Every piece has 2 tiles
 * or more (split_on). */
KILN__WINO_INLINE void split_tiles(const int m, const job *j, int ith, int nth) {
    const kiln__wino *w = &j->p->w;
    const int64_t s0 = ith * j->ntiles / nth, s1 = (ith + 1) * j->ntiles / nth;
    const int64_t pieces = (s1 - s0 + j->chunk - 1) / j->chunk, ld = (s1 - s0 + pieces - 1) / pieces;
    float *ws = kiln__cpu_scratch_or_fail(1, buf_floats(m, ld, w->C, w->M), "Winograd's split-mode buffers");
    if (!ws) return; /* (the layer fails with the message) */
    for (int64_t q = 0; q < pieces; q++) {
        const int64_t t0 = s0 + q * (s1 - s0) / pieces, t1 = s0 + (q + 1) * (s1 - s0) / pieces;
        const kiln__wino16c_buf B = buf_at(ws, m, ld, w->C, w->M, t0);
        for (int64_t cb = 0; cb < w->C / BLK; cb++) input_tiles(m, j, &B, cb, t0, t1);
        for (int xi = 0; xi < NX(m); xi++) gemm_rows(j, &B, xi, t0, t1 - t0);
        for (int64_t mb = 0; mb < w->M / BLK; mb++) output_tiles(m, j, &B, mb, t0, t1);
    }
}

static void split_task(void *ud, int ith, int nth) {
    const job *j = ud;
    if (j->p->w.m == 4) split_tiles(4, j, ith, nth);
    else split_tiles(2, j, ith, nth);
}

/* Does a block of ntiles tiles run in split mode at `threads`? */
static int split_on(const kiln__wino16c *p, int64_t ntiles, int threads) {
    const kiln__wino *w = &p->w;
    return p->split && threads > 1 && ntiles >= SPLIT_TILES * threads &&
           2 * ntiles * (w->C + w->M) >= (threads - 1) * w->C * w->M;
}

int kiln__wino16c_splits(const kiln__wino16c *p, int threads) {
    const kiln__wino *w = &p->w;
    const kiln__wino_blocks b = kiln__wino_block_geom(w->m, w->C, w->M, w->OH, w->OW);
    return split_on(p, (b.rows < b.TH ? b.rows : b.TH) * b.TW, threads);
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
    j.buf = buf_at(w->ws, w->m, j.b.ld, w->C, w->M, 0);
    j.chunk = L2_FLOATS / (nx * (w->C + w->M));
    if (j.chunk < MIN_TILES) j.chunk = MIN_TILES;
    for (j.ty0 = 0; j.ty0 < j.b.TH; j.ty0 += j.b.rows) {
        j.ty1 = j.ty0 + j.b.rows < j.b.TH ? j.ty0 + j.b.rows : j.b.TH;
        j.rows = j.ty1 - j.ty0;
        j.ntiles = j.rows * j.b.TW;
        if (split_on(p, j.ntiles, threads)) {
            kiln_exec_parallel(w->exec, threads, split_task, &j);
            continue;
        }
        if (j.ntiles == 1) /* the second GEMM row (ld >= 16 rows) */
            for (int xi = 0; xi < nx; xi++) memset(j.buf.v + xi * j.buf.vs + w->C, 0, (size_t)w->C * sizeof(float));
        kiln_exec_parallel_for(w->exec, w->C / BLK * j.rows, 1, input_range, &j);
        kiln_exec_parallel_for(w->exec, nx, 1, gemm_range, &j);
        kiln_exec_parallel_for(w->exec, w->M / BLK * j.rows, 1, output_range, &j);
    }
}
