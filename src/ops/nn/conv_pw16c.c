/*
 * conv_pw16c.c — 1x1 convs in NCHW16C (conv_pw16c.h says why).
 *
 * A unit is a tile of up to PT pixels x one block of 32 output channels
 * (16 for M's last block when M % 32 == 16): 2 x PT accumulators, each
 * input channel one broadcast per pixel from X's 16-channel line and two
 * weight vectors, 2 x PT FMAs.  The sum over C runs whole in registers
 * (no split of C: the bits do not depend on the threads), then bias,
 * residual and Relu are applied before the one store of each pixel.
 * Tactic 20 (kiln__pw16c_ksplit) runs the same units on a share of C per
 * thread and adds the shares after.
 */
#include "ops/nn/conv_pw16c.h"
#include "ops/nn/conv_direct16c.h"

#include "device/cpu/sgemm.h"
#include "kiln_int.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define PT KILN__16C_PT /* pixels per tile (conv_pw16c.h) */
#define OB KILN__16C_OB /* output channels per block */
#define PF_W KILN__16C_PF_W
/* Lines of kiln__pw16c.next prefetched per 16 input channels of a unit: at
 * 2 threads on ResNet-50 (a Winograd conv's U after each 1x1 conv) 4 won
 * nothing, 12 -1.3%, 32 +2% (the 1x1 conv's own W and X then lost L2):
 * bench/README.md, session 20. */
#define NEXT_STEP 12
/* W larger than this is also prefetched to L2 (16 KB ahead): from memory
 * in the network, the hardware prefetch did not keep up (layer4's 1x1
 * convs -0.33 ms, session 14); smaller W stays in L2, where the prefetch
 * only cost issue slots (-2..-4% a conv without it, session 27). */
#define FAR_W_BYTES (512 * 1024)

int64_t kiln__pw16c_packed(int64_t M, int64_t C) { return M * C; }

/* (tactic 16's packing of a one-tap kernel) */
void kiln__pw16c_pack(const float *w, int64_t M, int64_t C, float *dst) { kiln__d16c_pack(w, M, C, 1, dst); }

static int64_t tiles(const kiln__pw16c *p) { return (p->P + PT - 1) / PT; }
static int64_t oblocks(const kiln__pw16c *p) { return (p->M + OB - 1) / OB; }

int64_t kiln__pw16c_units(const kiln__pw16c *p) { return tiles(p) * oblocks(p); }

void kiln__pw16c_unit(const kiln__pw16c *p, int64_t u, int64_t *p0, int64_t *p1, int64_t *m0, int64_t *m1) {
    const int64_t nt = tiles(p), nb = oblocks(p);
    const int64_t t = p->wmajor ? u % nt : u / nb, b = p->wmajor ? u / nt : u % nb;
    *p0 = t * p->P / nt; /* balanced: 49 pixels are 10 + 10 + 10 + 10 + 9, not 4 x 12 + 1 */
    *p1 = (t + 1) * p->P / nt;
    *m0 = b * OB;
    *m1 = *m0 + OB < p->M ? *m0 + OB : p->M;
}

#if defined(__AVX512F__)
/* Column j of the accumulators (channels m0..m0+15 of np pixels from p0):
 * residual, Relu, store (j a constant: no accumulator goes to memory). */
static inline __attribute__((always_inline)) void store(const kiln__pw16c *p, int64_t p0, int np, int64_t m0,
                                                        __m512 acc[][2], int j) {
    const int64_t off = (m0 / 16 * p->P + p0) * 16;
    float *y = p->y + off;
    const float *r = p->res ? p->res + off : NULL;
#pragma GCC unroll 12
    for (int i = 0; i < np; i++) {
        __m512 v = acc[i][j];
        if (r) v = _mm512_add_ps(v, _mm512_loadu_ps(r + i * 16));
        if (p->relu) v = _mm512_max_ps(_mm512_setzero_ps(), v); /* NaN stays (maxps: 2nd operand) */
        if (p->clamp) v = _mm512_min_ps(_mm512_set1_ps(p->hi), _mm512_max_ps(_mm512_set1_ps(p->lo), v));
        _mm512_storeu_ps(y + i * 16, v);
    }
}

/* np pixels from p0 x nv vectors of 16 output channels from m0, W
 * prefetched to L2 too if far (all constants where it is inlined: the
 * accumulators stay in registers). */
static inline __attribute__((always_inline)) void tile(const kiln__pw16c *p, int64_t p0, int np, int64_t m0,
                                                       int nv, int far, const char *pf, int64_t pfl,
                                                       const char *hp, int64_t hn) {
    const int64_t P = p->P, ws = 16 * nv, cb0 = p->k0 / 16, CB = p->k1 ? p->k1 / 16 : p->C / 16;
    const float *wb = p->wp + m0 * p->C;
    __m512 acc[PT][2];
    __m512 b0 = p->bias ? _mm512_loadu_ps(p->bias + m0) : _mm512_setzero_ps();
    __m512 b1 = nv == 2 && p->bias ? _mm512_loadu_ps(p->bias + m0 + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < np; i++) acc[i][0] = b0, acc[i][1] = b1;
    for (int64_t cb = cb0; cb < CB; cb++) {
        for (int j = 0; j < 8 && pfl > 0; j++, pf += 64, pfl--) /* the next block's W (kiln__pw16c_run) */
            _mm_prefetch(pf, _MM_HINT_T1);
        for (int j = 0; j < NEXT_STEP && hn > 0; j++, hp += 64, hn--) /* the next layer's (p->next) */
            _mm_prefetch(hp, _MM_HINT_T2);
        const float *xb = p->x + (cb * P + p0) * 16, *wc = wb + cb * 16 * ws;
        for (int ci = 0; ci < 16; ci++) { /* W streams: to L1 2 KB ahead, to L2 16 KB ahead */
            _mm_prefetch((const char *)(wc + ci * ws) + PF_W, _MM_HINT_T0);
            if (nv == 2) _mm_prefetch((const char *)(wc + ci * ws) + PF_W + 64, _MM_HINT_T0);
            if (far) {
                _mm_prefetch((const char *)(wc + ci * ws) + 8 * PF_W, _MM_HINT_T1);
                if (nv == 2) _mm_prefetch((const char *)(wc + ci * ws) + 8 * PF_W + 64, _MM_HINT_T1);
            }
            const __m512 w0 = _mm512_loadu_ps(wc + ci * ws);
            const __m512 w1 = nv == 2 ? _mm512_loadu_ps(wc + ci * ws + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
            for (int i = 0; i < np; i++) kiln__16c_px(acc[i], xb + i * 16 + ci, i, nv, w0, w1);
        }
    }
    store(p, p0, np, m0, acc, 0);
    if (nv == 2) store(p, p0, np, m0 + 16, acc, 1);
}

#define TILE_CASE(n)                                                                                                   \
    case n:                                                                                                            \
        if (nv == 2 && far)                                                                                            \
            tile(p, p0, n, m0, 2, 1, pf, pfl, hp, hn);                                                                 \
        else if (nv == 2)                                                                                              \
            tile(p, p0, n, m0, 2, 0, pf, pfl, hp, hn);                                                                 \
        else if (far)                                                                                                  \
            tile(p, p0, n, m0, 1, 1, pf, pfl, hp, hn);                                                                 \
        else                                                                                                           \
            tile(p, p0, n, m0, 1, 0, pf, pfl, hp, hn);                                                                 \
        break;

static void unit(const kiln__pw16c *p, int64_t p0, int np, int64_t m0, int nv, const char *pf, int64_t pfl,
                 const char *hp, int64_t hn) {
    const int far = p->M * p->C * (int64_t)sizeof(float) > FAR_W_BYTES;
    switch (np) {
        TILE_CASE(12) TILE_CASE(11) TILE_CASE(10) TILE_CASE(9) TILE_CASE(8) TILE_CASE(7)
        TILE_CASE(6) TILE_CASE(5) TILE_CASE(4) TILE_CASE(3) TILE_CASE(2) TILE_CASE(1)
    default: break;
    }
}
#else
/* Portable: the same sums in the same order per output (C ascending from
 * the bias), one output channel at a time. */
static void unit(const kiln__pw16c *p, int64_t p0, int np, int64_t m0, int nv, const char *pf, int64_t pfl,
                 const char *hp, int64_t hn) {
    const int64_t P = p->P, ws = 16 * nv, c1 = p->k1 ? p->k1 : p->C;
    const float *wb = p->wp + m0 * p->C;
    for (int i = 0; i < np; i++)
        for (int j = 0; j < ws; j++) {
            float s = p->bias ? p->bias[m0 + j] : 0.0f;
            for (int64_t c = p->k0; c < c1; c++) s += p->x[((c / 16) * P + p0 + i) * 16 + c % 16] * wb[c * ws + j];
            const int64_t off = (((m0 + j) / 16) * P + p0 + i) * 16 + j % 16;
            if (p->res) s += p->res[off];
            if (p->relu && s < 0.0f) s = 0.0f;
            if (p->clamp) s = s < p->lo ? p->lo : s > p->hi ? p->hi : s;
            p->y[off] = s;
        }
    (void)pf, (void)pfl, (void)hp, (void)hn;
}
#endif

void kiln__pw16c_run(const kiln__pw16c *p, int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; u++) {
        int64_t p0, p1, m0, m1;
        kiln__pw16c_unit(p, u, &p0, &p1, &m0, &m1);
        /* output blocks outer: each tile fetches its share of the next
         * block's W into L2 (tactic 16's reason: in the network W comes
         * from memory, faster than one core streams it) */
        const int64_t nt = tiles(p), t = u % nt;
        const int64_t lines = p->wmajor && m1 < p->M ? (p->M - m1 < OB ? p->M - m1 : OB) * p->C / 16 : 0;
        /* and this unit's share of p->next's lines */
        const int64_t h0 = (u - u0) * p->next_lines / (u1 - u0), h1 = (u - u0 + 1) * p->next_lines / (u1 - u0);
        unit(p, p0, (int)(p1 - p0), m0, (int)((m1 - m0) / 16), (const char *)(p->wp + m1 * p->C) + t * lines / nt * 64,
             (t + 1) * lines / nt - t * lines / nt, p->next ? p->next + h0 * 64 : NULL, h1 - h0);
    }
}

/* ------------------------------------------------------------ Conv tactic 13 */

typedef struct pw16c_job {
    const kiln_call *c;
    kiln__pw16c p;         /* image 0's pointers */
    int64_t units, xs, ys; /* units and floats per image */
    int fused;             /* the chain (if any) is in the kernel's store */
    int64_t n;             /* images */
} pw16c_job;

/* Units [b, e) of `of`: their share of the next layer's weights
 * (kiln_exec.next_w) into p->next. */
static void next_share(kiln__pw16c *p, const kiln_exec *x, int64_t b, int64_t e, int64_t of) {
    p->next = NULL, p->next_lines = 0;
    if (!x || !x->next_w || of <= 0) return;
    const int64_t lines = (int64_t)(x->next_w_bytes / 64);
    p->next = x->next_w + b * lines / of * 64, p->next_lines = e * lines / of - b * lines / of;
}

/* Work units [b, e) over the images. */
static void pw16c_range(void *ud, int64_t b, int64_t e) {
    const pw16c_job *f = ud;
    while (b < e) {
        const int64_t n = b / f->units, u0 = b % f->units, u1 = e - n * f->units < f->units ? e - n * f->units : f->units;
        kiln__pw16c p = f->p;
        next_share(&p, f->c->exec, b, n * f->units + u1, f->n * f->units);
        p.x += n * f->xs;
        p.y += n * f->ys;
        if (p.res) p.res += n * f->ys;
        kiln__pw16c_run(&p, u0, u1);
        for (int64_t u = u0; u < u1 && !f->fused; u++) { /* a chain of 16 channels per pixel */
            int64_t p0, p1, m0, m1;
            kiln__pw16c_unit(&p, u, &p0, &p1, &m0, &m1);
            for (int64_t m = m0; m < m1; m += 16)
                for (int64_t q = p0; q < p1; q++) kiln_call_epilogue(f->c, 0, p.y + (m * p.P + q * 16), 16, m, 1);
        }
        b = (n + 1) * f->units < e ? (n + 1) * f->units : e;
    }
}

/* (conv_pw16c.h) */
int kiln__16c_inplace_check(const kiln_call *c, int fused) {
    int ri = -1, relu = 0;
    if (fused || !c->epilogue) return 0; /* (the common case: no second look at the chain) */
    kiln__epi_residual_relu(c->epilogue, &ri, &relu);
    if (ri >= 0 && ri < c->nin && c->in[ri].data && c->nout > 0 && c->in[ri].data == c->out[0].data)
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic %d: output 0 shares its residual's buffer, which "
                              "only a residual Add (and Relu) applied in the kernel's store takes", c->tactic);
    return 0;
}

/* The fused chain (conv_pw16c.h). */
int kiln__16c_fused_chain(const kiln_call *c, const float **res, int *relu) {
    int ri = -1;
    *res = NULL, *relu = 0;
    if (c->epilogue && !kiln__epi_residual_relu(c->epilogue, &ri, relu)) return 0;
    if (ri < 0) return 1;
    const kiln_tensor *r = ri < c->nin ? &c->in[ri] : NULL; /* a residual of Y's layout and size */
    if (r && r->data && r->dtype == KILN_DTYPE_F32 && r->format == KILN_FORMAT_NCHW16C &&
        kiln_tensor_numel(r) == kiln_tensor_numel(&c->out[0])) {
        *res = r->data;
        return 1;
    }
    *relu = 0;
    return 0;
}

void kiln__pw16c_exec(const kiln_call *c, const kiln__pw16c *p, int64_t N, int64_t xs, int64_t ys, int fused) {
    pw16c_job f = {.c = c, .p = *p, .units = kiln__pw16c_units(p), .xs = xs, .ys = ys, .fused = fused, .n = N};
    kiln_exec_parallel_for(c->exec, N * f.units, 1, pw16c_range, &f);
}

/* Call c's image-0 operands into *p (W packed, bias, the fused residual
 * and Relu; *fused: 1 when the chain is in the store) after checking its
 * layouts: 0, or KILN_EUNSUPPORTED naming c's tactic (13, 20). */
static int pw16c_operands(const kiln_call *c, int64_t C, int64_t M, int64_t P, kiln__pw16c *p, int *fused) {
    const kiln_tensor *x = &c->in[0], *y = &c->out[0];
    if (x->dtype != KILN_DTYPE_F32 || y->dtype != KILN_DTYPE_F32 || y->format != KILN_FORMAT_NCHW16C ||
        !c->prepacked || !c->prepacked[1] || (c->nin > 2 && c->in[2].data && !kiln__ops_dense(&c->in[2])))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic %d: needs F32 NCHW16C X and Y, W packed at build",
                              c->tactic);
    *p = (kiln__pw16c){.C = C, .M = M, .P = P, .x = x->data, .wp = c->prepacked[1], .y = y->data,
                       .bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL};
    *fused = kiln__16c_fused_chain(c, &p->res, &p->relu);
    return kiln__16c_inplace_check(c, *fused && c->tactic != 20);
}

int kiln__pw16c_conv(const kiln_call *c, int64_t N, int64_t C, int64_t M, int64_t P) {
    kiln__pw16c p;
    int fused = 0, rc = pw16c_operands(c, C, M, P, &p, &fused);
    if (rc || N * M * P == 0) return rc;
    p.wmajor = kiln__d16c_wmajor(C, M, 1, P, c->exec ? kiln_exec_threads(c->exec) : 1);
    kiln__pw16c_exec(c, &p, N, C * P, M * P, fused);
    return 0;
}

/* ------------------------------------------------------------ Conv tactic 20 */

typedef struct ksplit_job {
    const kiln_call *c;
    kiln__pw16c p;   /* this image's */
    float *part;     /* tasks 1..nth-1's partials, M x P floats each */
    int64_t mp;      /* M x P */
    int nth, fused;
} ksplit_job;

/* Share t of k->nth: input channel blocks [t * CB / nth, (t + 1) * CB /
 * nth) into its partial (share 0: Y, from the bias; the others: from 0).
 * Task ith of ntasks runs shares ith, ith + ntasks, ... (one each, unless
 * the pool ran the job serially). */
static void ksplit_task(void *ud, int ith, int ntasks) {
    const ksplit_job *k = ud;
    const int64_t CB = k->p.C / 16;
    for (int t = ith; t < k->nth; t += ntasks) {
        kiln__pw16c s = k->p;
        s.k0 = t * CB / k->nth * 16, s.k1 = (t + 1) * CB / k->nth * 16;
        s.res = NULL, s.relu = 0, s.clamp = 0;
        if (t > 0) s.bias = NULL, s.y = k->part + (t - 1) * k->mp;
        next_share(&s, k->c->exec, t, t + 1, k->nth);
        s.wmajor = kiln__d16c_wmajor(s.k1 - s.k0, s.M, 1, s.P, 1);
        kiln__pw16c_run(&s, 0, kiln__pw16c_units(&s));
    }
}

/* Output channel blocks [b0, b1): Y += the other partials and the
 * residual, then Relu, or the chain per pixel. */
static void ksplit_sum(void *ud, int64_t b0, int64_t b1) {
    const ksplit_job *k = ud;
    const kiln__pw16c *p = &k->p;
    const int64_t n = (b1 - b0) * p->P * 16, off = b0 * p->P * 16;
    float *y = p->y + off;
    const float *r = p->res ? p->res + off : NULL, *q1 = k->part + off;
    const float lo = p->relu ? 0.0f : -INFINITY;
    if (k->nth == 2) /* one pass (2 threads: one other partial) */
        for (int64_t i = 0; i < n; i++) {
            const float v = y[i] + q1[i] + (r ? r[i] : 0.0f);
            y[i] = v < lo ? lo : v; /* NaN stays NaN */
        }
    else
        for (int64_t i = 0; i < n; i++) {
            float v = y[i] + (r ? r[i] : 0.0f);
            for (int t = 1; t < k->nth; t++) v += k->part[(t - 1) * k->mp + off + i];
            y[i] = v < lo ? lo : v;
        }
    if (!k->fused)
        for (int64_t b = b0; b < b1; b++)
            for (int64_t q = 0; q < p->P; q++) kiln_call_epilogue(k->c, 0, p->y + (b * p->P + q) * 16, 16, b * 16, 1);
}

void kiln__pw16c_sum_parts(const kiln_call *c, const kiln__pw16c *p, const float *part, int nparts, int fused) {
    ksplit_job k = {.c = c, .p = *p, .part = (float *)part, .mp = p->M * p->P, .nth = nparts + 1, .fused = fused};
    kiln_exec_parallel_for(c->exec, p->M / 16, 1, ksplit_sum, &k);
}

int kiln__pw16c_ksplit(const kiln_call *c, int64_t N, int64_t C, int64_t M, int64_t P) {
    int nth = c->exec ? kiln_exec_threads(c->exec) : 1;
    if (nth > C / 32) nth = (int)(C / 32); /* 2 blocks of 16 channels a thread */
    /* where 13 splits the pixels (kiln__d16c_wmajor 0: many pixels against
     * M), its threads read only the pixels they wrote already */
    if (nth < 2 || !kiln__d16c_wmajor(C, M, 1, P, nth)) return kiln__pw16c_conv(c, N, C, M, P);
    ksplit_job k = {.c = c, .mp = M * P, .nth = nth};
    int rc = pw16c_operands(c, C, M, P, &k.p, &k.fused);
    if (rc || N * M * P == 0) return rc;
    k.part = kiln__cpu_scratch(1, (size_t)(nth - 1) * (size_t)k.mp); /* (the calling thread: the error returned) */
    if (!k.part) return kiln_set_error(KILN_ENOMEM, "Conv tactic 20: out of memory for its partial sums");
    const float *x = k.p.x, *res = k.p.res;
    float *y = k.p.y;
    for (int64_t n = 0; n < N; n++) {
        k.p.x = x + n * C * P;
        k.p.y = y + n * M * P;
        k.p.res = res ? res + n * M * P : NULL;
        kiln_exec_parallel(c->exec, nth, ksplit_task, &k);
        kiln__pw16c_sum_parts(c, &k.p, k.part, nth - 1, k.fused);
    }
    return 0;
}
