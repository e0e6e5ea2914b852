/*
 * test_prepack.c — constant inputs packed once per engine
 * (kiln_quick_op.prepack, kiln_call.prepacked).
 *
 * A test op test::wmm (Y = alpha * X * W, W a constant) packs W transposed
 * with alpha folded in and the tactic recorded; its impl uses the packed
 * form when the runtime hands it over and counts which path ran.  The
 * tests show: prepack runs once per engine (at build, again at load),
 * never per run nor per context; impl gets the blob (64-byte aligned) for
 * the constant input only; prepack sees the tactic, the attributes and
 * -1 for dynamic dims; results match a naive double reference on fresh
 * random data with poisoned outputs; a failing prepack fails the build
 * naming the layer.
 *
 * Conv packs W as the SGEMM's A operand.  Called directly for every
 * tactic (GEMM, padded GEMM, direct, auto) over shapes around the kernel
 * geometry (M not a multiple of MR, K over one KC block, groups, 1-D/3-D,
 * strides, dilations), its output with the packed W is bit-identical to
 * the output without it, and both match a naive reference.  Through the
 * engine, a Conv with constant W carries a packed W and gives the same
 * bits as the engine where W is a network input (packed per call).
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_seed = 0x9E3779B97F4A7C15ull;

static float *rnd(int64_t n) { return test_rnd_f32(&g_seed, n, -1.0f, 1.0f); }

/* ---- test::wmm ----------------------------------------------------------- */

static int g_packs, g_queries, g_impl_packed, g_impl_plain, g_saw_dynamic;

typedef struct wmm_head {
    uint32_t magic;
    int32_t tactic;
    int64_t K, N;
    float alpha;
    char pad[64 - 28];
} wmm_head;
#define WMM_MAGIC 0x57504B31u

static const kiln_attr_def wmm_attrs[] = {
    {"alpha", KILN_ATTR_FLOAT, 0, "1.0", 0, "scale"},
    {"fail", KILN_ATTR_INT, 0, "0", 0, "1: prepack fails"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int wmm_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *w = &c->in[1];
    if (x->ndim != 2 || w->ndim != 2) return kiln_set_error(KILN_ESHAPE, "wmm: rank 2 expected");
    c->out[0].dtype = KILN_DTYPE_F32;
    c->out[0].ndim = 2;
    c->out[0].dims[0] = x->dims[0];
    c->out[0].dims[1] = w->dims[1];
    return 0;
}

static int wmm_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    if (!dst) g_queries++;
    if (kiln_attrs_int(c->attrs, "fail")) return kiln_set_error(KILN_EINVAL, "wmm: asked to fail");
    /* only constants are offered; the activation has no data and its
     * dynamic dim reads -1 */
    ASSERT(c->in[input].data != NULL);
    ASSERT(c->in[0].data == NULL && c->out[0].data == NULL && c->exec == NULL);
    if (c->in[0].dims[0] == -1 && c->out[0].dims[0] == -1) g_saw_dynamic = 1;
    if (input != 1) {
        *size = 0; /* the bias: nothing to pack */
        return 0;
    }
    const kiln_tensor *w = &c->in[1];
    int64_t K = w->dims[0], N = w->dims[1];
    size_t bytes = sizeof(wmm_head) + (size_t)(K * N) * sizeof(float);
    if (!dst) {
        *size = bytes;
        return 0;
    }
    ASSERT_EQ(*size, bytes);
    ASSERT_EQ((uintptr_t)dst % 64, 0);
    g_packs++;
    wmm_head *h = dst;
    memset(h, 0, sizeof *h);
    h->magic = WMM_MAGIC;
    h->tactic = c->tactic;
    h->K = K;
    h->N = N;
    h->alpha = (float)kiln_attrs_float(c->attrs, "alpha");
    float *p = (float *)(h + 1);
    const float *wd = w->data;
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++) p[j * K + k] = h->alpha * wd[k * N + j];
    return 0;
}

static int wmm_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *w = &c->in[1];
    int64_t M = x->dims[0], K = x->dims[1], N = w->dims[1];
    float alpha = (float)kiln_attrs_float(c->attrs, "alpha");
    const float *xd = x->data, *bias = c->nin > 2 ? c->in[2].data : NULL;
    float *y = c->out[0].data;
    const wmm_head *h = c->prepacked ? c->prepacked[1] : NULL;
    if (c->prepacked) {
        if (c->prepacked[0] || (c->nin > 2 && c->prepacked[2]))
            return kiln_set_error(KILN_EINTERNAL, "wmm: a packed form for an input that has none");
    }
    if (h) {
        if (h->magic != WMM_MAGIC || h->tactic != c->tactic || h->K != K || h->N != N || h->alpha != alpha)
            return kiln_set_error(KILN_EINTERNAL, "wmm: packed W does not match this call");
        const float *p = (const float *)(h + 1);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float s = 0;
                for (int64_t k = 0; k < K; k++) s += xd[i * K + k] * p[j * K + k];
                y[i * N + j] = s + (bias ? bias[j] : 0.0f);
            }
        g_impl_packed++;
        return 0;
    }
    const float *wd = w->data;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0;
            for (int64_t k = 0; k < K; k++) s += xd[i * K + k] * wd[k * N + j];
            y[i * N + j] = alpha * s + (bias ? bias[j] : 0.0f);
        }
    g_impl_plain++;
    return 0;
}

static const kiln_combo wmm_formats[] = {
    {"FP32", NULL, {3, 5}},
    {NULL, NULL, {0}},
};

static const kiln_quick_op wmm_op = {
    .ns = "test", .name = "wmm", .version = 1,
    .min_inputs = 2, .max_inputs = 3, .num_outputs = 1,
    .attrs = wmm_attrs, .shape = wmm_shape, .impl = wmm_impl, .formats = wmm_formats,
    .prepack = wmm_prepack,
    .doc = "Y = alpha * X * W (+ bias), W packed once",
};
KILN_OP(wmm_op)

enum { K_ = 37, N_ = 19, MMAX = 8 };

/* X [-1, K] (profile 1..8, opt 3), W [K, N], bias [N] constants. */
static kiln_engine *build_wmm(const float *w, const float *b, float alpha, int fail, unsigned flags) {
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t xd[2] = {-1, K_}, wd[2] = {K_, N_}, bd[1] = {N_};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 2, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 2, wd, w));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, b));
    const char *ins[3] = {"X", "W", "B"}, *outs[1] = {"Y"};
    kiln_layer *l = kiln_network_add_layer(net, "test::wmm", 1, "mm", 3, ins, 1, outs);
    if (!l) TEST__FAIL("add_layer: %s", kiln_errmsg());
    ASSERT_OK(kiln_layer_set_float(l, "alpha", alpha));
    ASSERT_OK(kiln_layer_set_int(l, "fail", fail));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, flags);
    kiln_build_config_set_timing_reps(cfg, 1);
    int64_t mn[2] = {1, K_}, op[2] = {3, K_}, mx[2] = {MMAX, K_};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "X", 2, mn, op, mx));
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, NULL);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    if (rc) return NULL;
    return e;
}

/* Run ctx on M fresh random rows; compare with the naive reference. */
static void run_wmm(kiln_context *ctx, int64_t M, const float *w, const float *b, float alpha) {
    float *x = rnd(M * K_), y[MMAX * N_];
    int64_t xd[2] = {M, K_};
    ASSERT_OK(kiln_context_set_input_shape(ctx, "X", 2, xd));
    ASSERT_OK(kiln_context_bind(ctx, "X", x, (size_t)(M * K_) * sizeof(float)));
    memset(y, 0xA5, sizeof y); /* poison: a NaN pattern */
    ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)(M * N_) * sizeof(float)));
    int rc = kiln_context_run(ctx);
    if (rc) TEST__FAIL("run: %s", kiln_errmsg());
    double ref[MMAX * N_];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N_; j++) {
            double s = 0;
            for (int64_t k = 0; k < K_; k++) s += (double)x[i * K_ + k] * w[k * N_ + j];
            ref[i * N_ + j] = alpha * s + b[j];
        }
    test_check_close("test::wmm", y, ref, M * N_, 1e-5 * K_);
    free(x);
}

TEST_IMPL(prepack_once_per_engine) {
    float *w = rnd(K_ * N_), *b = rnd(N_);
    const float alpha = -1.75f;
    g_packs = g_queries = g_impl_packed = g_impl_plain = g_saw_dynamic = 0;
    kiln_engine *e = build_wmm(w, b, alpha, 0, KILN_BUILD_NO_TIMING);
    if (!e) TEST__FAIL("build: %s", kiln_errmsg());
    /* packed once when the engine was made; W only (the bias asked for 0) */
    ASSERT_EQ(g_packs, 1);
    ASSERT_EQ(g_queries, 2);
    ASSERT(g_saw_dynamic);
    const kiln__elayer *el = &e->layers[0];
    ASSERT(el->prepacked && !el->prepacked[0] && el->prepacked[1] && !el->prepacked[2]);
    ASSERT_EQ(((const wmm_head *)el->prepacked[1])->tactic, 3); /* the first tactic (no timing) */

    /* two contexts, several runs and shapes each: no more packing */
    kiln_context *c1, *c2;
    ASSERT_OK(kiln_context_create(e, 1, &c1));
    ASSERT_OK(kiln_context_create(e, 2, &c2));
    const int64_t ms[3] = {3, 1, MMAX};
    for (int r = 0; r < 3; r++) {
        run_wmm(c1, ms[r], w, b, alpha);
        run_wmm(c2, ms[2 - r], w, b, alpha);
    }
    ASSERT_EQ(g_packs, 1);
    ASSERT_EQ(g_impl_packed, 6);
    ASSERT_EQ(g_impl_plain, 0);
    kiln_context_free(c1);
    kiln_context_free(c2);

    /* A loaded engine (weights mapped from the file) packs once more: the
     * file stores only built-in ops' packed forms (section PACKED), and
     * test::wmm is a plugin here (this binary links kiln statically, so
     * its ops count as built in unless told otherwise). */
    kiln__op *wmm = (kiln__op *)kiln__registry_find("test", "wmm", 1);
    ASSERT(wmm);
    const int was_builtin = wmm->builtin;
    wmm->builtin = 0;
    char path[512];
    snprintf(path, sizeof path, "%s/test_prepack.kiln", KILN_BINARY_DIR);
    ASSERT_OK(kiln_engine_save(e, path));
    kiln_engine_free(e);
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load(path, &e2));
    remove(path);
    wmm->builtin = was_builtin;
    ASSERT_EQ(g_packs, 2);
    ASSERT_EQ(e2->layers[0].prepacked_stored, 0);
    ASSERT_OK(kiln_context_create(e2, 1, &c1));
    run_wmm(c1, 5, w, b, alpha);
    run_wmm(c1, 2, w, b, alpha);
    ASSERT_EQ(g_packs, 2);
    ASSERT_EQ(g_impl_packed, 8);
    kiln_context_free(c1);
    kiln_engine_free(e2);
    free(w);
    free(b);
}

/* Timing measures what the engine runs: every timed call gets the packed
 * W of the tactic it times (wmm's impl checks the tactic recorded in it);
 * the engine then holds the chosen tactic's packed W, and runs pack
 * nothing. */
TEST_IMPL(prepack_with_timing) {
    float *w = rnd(K_ * N_), *b = rnd(N_);
    g_packs = g_impl_packed = g_impl_plain = 0;
    kiln_engine *e = build_wmm(w, b, 0.5f, 0, 0);
    if (!e) TEST__FAIL("build: %s", kiln_errmsg());
    ASSERT(g_packs >= 3); /* tactics 3 and 5 timed, then the engine */
    ASSERT(g_impl_packed >= 2);
    ASSERT_EQ(g_impl_plain, 0);
    int t = ((const wmm_head *)e->layers[0].prepacked[1])->tactic;
    ASSERT(t == 3 || t == 5);
    ASSERT_EQ(t, e->layers[0].tactic);
    kiln_context *c;
    ASSERT_OK(kiln_context_create(e, 1, &c));
    int before = g_impl_packed, packs = g_packs;
    run_wmm(c, 4, w, b, 0.5f);
    run_wmm(c, 7, w, b, 0.5f);
    ASSERT_EQ(g_impl_packed, before + 2);
    ASSERT_EQ(g_packs, packs);
    kiln_context_free(c);
    kiln_engine_free(e);
    free(w);
    free(b);
}

TEST_IMPL(prepack_error_names_layer) {
    float *w = rnd(K_ * N_), *b = rnd(N_);
    kiln_engine *e = build_wmm(w, b, 1.0f, 1, KILN_BUILD_NO_TIMING);
    ASSERT(e == NULL);
    const char *m = kiln_errmsg();
    if (!strstr(m, "'mm'") || !strstr(m, "prepack") || !strstr(m, "asked to fail"))
        TEST__FAIL("message: %s", m);
    free(w);
    free(b);
}

/* ---- Conv ---------------------------------------------------------------- */

typedef struct conv_case {
    int nsp;
    int64_t N, C, M, G, sp[3], k[3], s, d, p;
} conv_case;

static void set_ints(kiln__attrset *a, const char *name, const int64_t *v, int64_t n) {
    kiln_attr_value val = {.type = KILN_ATTR_ARRAY, .present = 1, .elem = KILN_DTYPE_I64, .count = n,
                           .data = v};
    ASSERT_OK(kiln__attrset_set(a, name, &val));
}

/* A conv case's tensors: dims of X, W, Y (rank nd), element counts, the
 * output's spatial dims, fresh random X, W, bias and two result buffers
 * (the callers poison them) with room for the reference. */
typedef struct conv_io {
    int nd;
    int64_t xd[5], wd[5], yd[5], o[3], xn, wn, yn;
    float *x, *w, *b, *y0, *y1;
    double *ref;
} conv_io;

static void conv_io_init(conv_io *io, const conv_case *cc) {
    io->nd = cc->nsp + 2;
    io->xd[0] = io->yd[0] = cc->N;
    io->xd[1] = cc->C;
    io->wd[0] = io->yd[1] = cc->M;
    io->wd[1] = cc->C / cc->G;
    io->xn = cc->N * cc->C;
    io->wn = cc->M * (cc->C / cc->G);
    io->yn = cc->N * cc->M;
    for (int i = 0; i < cc->nsp; i++) {
        io->o[i] = (cc->sp[i] + 2 * cc->p - cc->d * (cc->k[i] - 1) - 1) / cc->s + 1;
        io->xd[2 + i] = cc->sp[i];
        io->wd[2 + i] = cc->k[i];
        io->yd[2 + i] = io->o[i];
        io->xn *= cc->sp[i];
        io->wn *= cc->k[i];
        io->yn *= io->o[i];
    }
    io->x = rnd(io->xn);
    io->w = rnd(io->wn);
    io->b = rnd(cc->M);
    io->y0 = test_xmalloc((size_t)io->yn * sizeof(float));
    io->y1 = test_xmalloc((size_t)io->yn * sizeof(float));
    io->ref = test_xmalloc((size_t)io->yn * sizeof(double));
}

static void conv_io_free(conv_io *io) {
    free(io->x); free(io->w); free(io->b); free(io->y0); free(io->y1); free(io->ref);
}

/* Naive conv, double accumulation. */
static void conv_ref(const conv_case *cc, const int64_t *o, const float *x, const float *w, const float *b,
                     double *ref) {
    int64_t s[3] = {cc->s, cc->s, cc->s}, d[3] = {cc->d, cc->d, cc->d}, p[3] = {cc->p, cc->p, cc->p};
    test_conv_geo g = test_conv_geo_make(cc->N, cc->C, cc->M, cc->G, cc->nsp, cc->sp, cc->k, s, d, p, o);
    test_conv_ref(&g, x, w, b, ref);
}

/* Conv's impl for one tactic, without and with its packed W. */
static void conv_direct_call(const conv_case *cc, int tactic, kiln_exec *ex) {
    const kiln__op *op = kiln__registry_find("ai.onnx", "Conv", 1);
    ASSERT(op && op->quick && op->quick->prepack);
    kiln__attrset as;
    ASSERT_OK(kiln__attrset_init(&as, op));
    int64_t s[3] = {cc->s, cc->s, cc->s}, d[3] = {cc->d, cc->d, cc->d}, p[6];
    for (int i = 0; i < 6; i++) p[i] = cc->p;
    set_ints(&as, "strides", s, cc->nsp);
    set_ints(&as, "dilations", d, cc->nsp);
    set_ints(&as, "pads", p, 2 * cc->nsp);
    kiln_attr_value gv = {.type = KILN_ATTR_INT, .present = 1, .i = cc->G};
    ASSERT_OK(kiln__attrset_set(&as, "group", &gv));
    kiln_attrs attrs = kiln__attrset_view(&as);

    conv_io io;
    conv_io_init(&io, cc);
    int64_t yn = io.yn;
    float *y0 = io.y0, *y1 = io.y1;
    int64_t bd[1] = {cc->M};
    kiln_tensor in[3] = {test_tensor_f32(io.x, io.nd, io.xd), test_tensor_f32(io.w, io.nd, io.wd),
                         test_tensor_f32(io.b, 1, bd)};
    kiln_tensor out[1] = {test_tensor_f32(y0, io.nd, io.yd)};
    kiln_call c = {.in = in, .nin = 3, .out = out, .nout = 1, .attrs = &attrs, .tactic = tactic, .exec = ex,
                   .layer = "conv"};
    size_t ws = op->quick->workspace ? op->quick->workspace(&c) : 0;
    void *wsp = ws ? kiln__aligned_alloc(ws) : NULL;
    c.workspace = wsp;
    c.workspace_size = ws;

    memset(y0, 0xA5, (size_t)yn * sizeof(float));
    ASSERT_OK(op->quick->impl(&c));

    /* prepack as the engine calls it: only W's data, no exec */
    kiln_tensor pin[3] = {in[0], in[1], in[2]}, pout[1] = {out[0]};
    pin[0].data = NULL;
    pout[0].data = NULL;
    kiln_call pc = {.in = pin, .nin = 3, .out = pout, .nout = 1, .attrs = &attrs, .tactic = tactic};
    size_t n = 0;
    ASSERT_OK(op->quick->prepack(&pc, 0, NULL, &n));
    ASSERT_EQ(n, 0); /* X is not a weight */
    ASSERT_OK(op->quick->prepack(&pc, 1, NULL, &n));
    void *blob = n ? kiln__aligned_alloc(n) : NULL;
    if (n) {
        memset(blob, 0x5A, n);
        size_t m = n;
        ASSERT_OK(op->quick->prepack(&pc, 1, blob, &m));
        ASSERT_EQ(m, n);
    }
    const void *pp[3] = {NULL, blob, NULL};
    c.prepacked = pp;
    out[0].data = y1;
    memset(y1, 0xA5, (size_t)yn * sizeof(float));
    ASSERT_OK(op->quick->impl(&c));

    char what[160];
    snprintf(what, sizeof what, "Conv %dD N%lld C%lld M%lld G%lld k%lld s%lld d%lld p%lld tactic %d (%s)",
             cc->nsp, (long long)cc->N, (long long)cc->C, (long long)cc->M, (long long)cc->G,
             (long long)cc->k[0], (long long)cc->s, (long long)cc->d, (long long)cc->p, tactic,
             n ? "prepacked" : "not prepacked");
    if (memcmp(y0, y1, (size_t)yn * sizeof(float)) != 0) TEST__FAIL("%s: packed W changed the result", what);
    conv_ref(cc, io.o, io.x, io.w, io.b, io.ref);
    test_check_close(what, y1, io.ref, yn, 1e-5 * (double)(io.wn / cc->M));
    /* direct (tactic 3) on a 1-D/2-D conv does not use a GEMM (no blob)
     * where the direct kernel runs: at most 16 products per output or at
     * most 4 output channels per group (conv.c pick_tactic, dad955f);
     * elsewhere it runs the padded GEMM */
    int64_t kvol = cc->k[0] * (cc->nsp > 1 ? cc->k[1] : 1) * (cc->nsp > 2 ? cc->k[2] : 1);
    if (tactic == 3 && cc->nsp < 3) ASSERT_EQ(n > 0, (cc->C / cc->G) * kvol > 16 && cc->M / cc->G > 4);
    if (tactic == 2 || tactic == 4) ASSERT(n > 0);
    kiln__aligned_free(blob);
    kiln__aligned_free(wsp);
    kiln__attrset_free(&as);
    conv_io_free(&io);
}

static const conv_case g_convs[] = {
    /* nsp N  C   M   G  spatial       kernel     s  d  p */
    {2, 1, 3, 13, 1, {11, 9, 0}, {3, 3, 0}, 1, 1, 1},     /* M below one MR strip */
    {2, 2, 40, 50, 1, {8, 7, 0}, {3, 3, 0}, 1, 1, 1},     /* K = 360 > KC: two K blocks */
    {2, 1, 64, 70, 1, {9, 9, 0}, {1, 1, 0}, 1, 1, 0},     /* pointwise: a plain GEMM */
    {2, 1, 300, 33, 1, {5, 5, 0}, {1, 1, 0}, 1, 1, 0},    /* pointwise, K = 300 */
    {2, 1, 12, 24, 4, {10, 10, 0}, {3, 3, 0}, 2, 1, 1},   /* groups, stride 2 */
    {2, 1, 8, 8, 8, {12, 12, 0}, {3, 3, 0}, 1, 1, 1},     /* depthwise */
    {2, 1, 16, 20, 2, {13, 11, 0}, {5, 5, 0}, 1, 2, 2},   /* dilation */
    {2, 2, 24, 160, 1, {7, 7, 0}, {3, 3, 0}, 2, 1, 1},    /* M spans several MC blocks */
    {1, 2, 10, 17, 1, {30, 0, 0}, {5, 0, 0}, 2, 1, 2},    /* 1-D */
    {3, 1, 6, 14, 2, {5, 6, 7}, {3, 2, 3}, 1, 1, 1},      /* 3-D */
};

TEST_IMPL(prepack_conv_identical) {
    kiln__pool *p1 = kiln__pool_create(1), *p3 = kiln__pool_create(3);
    ASSERT(p1 && p3);
    kiln_exec e1 = {.device = KILN_DEVICE_CPU, .pool = p1}, e3 = {.device = KILN_DEVICE_CPU, .pool = p3};
    const int tactics[] = {0, 1, 2, 3, 4};
    for (size_t i = 0; i < sizeof g_convs / sizeof g_convs[0]; i++)
        for (size_t t = 0; t < sizeof tactics / sizeof tactics[0]; t++) {
            conv_direct_call(&g_convs[i], tactics[t], &e1);
            conv_direct_call(&g_convs[i], tactics[t], &e3);
        }
    kiln__pool_free(p1);
    kiln__pool_free(p3);
}

/* Build `net` (freed here) without timing on `threads` threads, *packed:
 * whether a layer holds its input 1 (the weights) packed.  Run it twice
 * (the second run reuses everything) on input `an` (na floats) and, when
 * `bn` is set, input `bn` (nb floats), into output "Y" (ny floats,
 * poisoned before). */
static void run_packed(kiln_network *net, int threads, const char *an, const float *a, int64_t na,
                       const char *bn, const float *b, int64_t nb, float *y, int64_t ny, int *packed) {
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, NULL);
    kiln_network_free(net);
    *packed = 0;
    for (int32_t i = 0; i < e->nlayers; i++)
        if (e->layers[i].prepacked && e->layers[i].prepacked[1]) *packed = 1;
    kiln_context *c;
    ASSERT_OK(kiln_context_create(e, threads, &c));
    ASSERT_OK(kiln_context_bind(c, an, (void *)a, (size_t)na * sizeof(float)));
    if (bn) ASSERT_OK(kiln_context_bind(c, bn, (void *)b, (size_t)nb * sizeof(float)));
    memset(y, 0xA5, (size_t)ny * sizeof(float));
    ASSERT_OK(kiln_context_bind(c, "Y", y, (size_t)ny * sizeof(float)));
    for (int r = 0; r < 2; r++) {
        int rc = kiln_context_run(c);
        if (rc) TEST__FAIL("run: %s", kiln_errmsg());
    }
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* Through the engine: W constant (packed once) vs W a network input
 * (packed per call): the same bits, close to the naive reference. */
static void conv_engine(const conv_case *cc, const conv_io *io, int w_const, float *y, int *packed) {
    int64_t bd[1] = {cc->M};
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, io->nd, io->xd, NULL));
    if (w_const) ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, io->nd, io->wd, io->w));
    else ASSERT_OK(kiln_network_add_input(net, "W", KILN_DTYPE_F32, io->nd, io->wd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, io->b));
    const char *ins[3] = {"X", "W", "B"}, *outs[1] = {"Y"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", 3, ins, 1, outs);
    if (!l) TEST__FAIL("add_layer: %s", kiln_errmsg());
    int64_t s[3] = {cc->s, cc->s, cc->s}, d[3] = {cc->d, cc->d, cc->d}, p[6];
    for (int i = 0; i < 6; i++) p[i] = cc->p;
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s, cc->nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "dilations", d, cc->nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p, 2 * cc->nsp));
    ASSERT_OK(kiln_layer_set_int(l, "group", cc->G));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    run_packed(net, 2, "X", io->x, io->xn, w_const ? NULL : "W", io->w, io->wn, y, io->yn, packed);
}

TEST_IMPL(prepack_conv_engine) {
    for (size_t i = 0; i < sizeof g_convs / sizeof g_convs[0]; i++) {
        const conv_case *cc = &g_convs[i];
        conv_io io;
        conv_io_init(&io, cc);
        int packed0, packed1;
        conv_engine(cc, &io, 0, io.y0, &packed0);
        conv_engine(cc, &io, 1, io.y1, &packed1);
        ASSERT_EQ(packed0, 0);
        /* the auto tactic runs depthwise-like convs directly: nothing to pack */
        int depthwise = cc->nsp < 3 && ((cc->C / cc->G) * cc->k[0] * (cc->nsp > 1 ? cc->k[1] : 1) <= 16 ||
                                        cc->M / cc->G == 1);
        ASSERT_EQ(packed1, !depthwise);
        if (memcmp(io.y0, io.y1, (size_t)io.yn * sizeof(float)) != 0)
            TEST__FAIL("Conv case %zu: constant W (packed once) differs from W as an input", i);
        conv_ref(cc, io.o, io.x, io.w, io.b, io.ref);
        test_check_close("Conv engine", io.y1, io.ref, io.yn, 1e-5 * (double)(io.wn / cc->M));
        conv_io_free(&io);
    }
}

/* ---- Gemm / MatMul: a constant B packed once as the SGEMM's B ----------- */

typedef struct mm_case {
    int gemm;            /* 1 Gemm, 0 MatMul */
    int64_t batch, M, K, N; /* MatMul: A [batch, M, K] when batch > 0, else [M, K] */
    int ta, tb;
    float alpha, beta;   /* Gemm; C is [N] when beta != 0 */
} mm_case;

/* Y for case mc with B a constant (packed once) or a network input. */
static void mm_engine(const mm_case *mc, int b_const, int threads, const float *a, const float *bm,
                      const float *cv, float *y, int64_t yn, int *packed) {
    int64_t rows = mc->batch > 0 ? mc->batch * mc->M : mc->M;
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t ad3[3] = {mc->batch, mc->M, mc->K}, ad2[2] = {mc->ta ? mc->K : mc->M, mc->ta ? mc->M : mc->K};
    int64_t bd[2] = {mc->tb ? mc->N : mc->K, mc->tb ? mc->K : mc->N}, cd[1] = {mc->N};
    if (mc->batch > 0) ASSERT_OK(kiln_network_add_input(net, "A", KILN_DTYPE_F32, 3, ad3, NULL));
    else ASSERT_OK(kiln_network_add_input(net, "A", KILN_DTYPE_F32, 2, ad2, NULL));
    if (b_const) ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 2, bd, bm));
    else ASSERT_OK(kiln_network_add_input(net, "B", KILN_DTYPE_F32, 2, bd, NULL));
    const char *ins[3] = {"A", "B", "C"}, *outs[1] = {"Y"};
    int nin = 2;
    if (mc->gemm && mc->beta != 0.0f) {
        ASSERT_OK(kiln_network_add_constant(net, "C", KILN_DTYPE_F32, 1, cd, cv));
        nin = 3;
    }
    kiln_layer *l = kiln_network_add_layer(net, mc->gemm ? "ai.onnx::Gemm" : "ai.onnx::MatMul",
                                           mc->gemm ? 11 : 13, "mm", nin, ins, 1, outs);
    if (!l) TEST__FAIL("add_layer: %s", kiln_errmsg());
    if (mc->gemm) {
        ASSERT_OK(kiln_layer_set_int(l, "transA", mc->ta));
        ASSERT_OK(kiln_layer_set_int(l, "transB", mc->tb));
        ASSERT_OK(kiln_layer_set_float(l, "alpha", mc->alpha));
        ASSERT_OK(kiln_layer_set_float(l, "beta", mc->beta));
    }
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    run_packed(net, threads, "A", a, rows * mc->K, b_const ? NULL : "B", bm, mc->K * mc->N, y, yn, packed);
}

TEST_IMPL(prepack_gemm_matmul) {
    static const mm_case cases[] = {
        /* gemm batch  M    K    N   ta tb alpha  beta */
        {1, 0, 37, 300, 77, 0, 1, 1.0f, 1.0f},   /* weights as stored (transB), K over one block */
        {1, 0, 5, 64, 1000, 0, 0, 0.5f, 0.0f},   /* row-major B, alpha, no C */
        {1, 0, 200, 33, 45, 1, 1, -1.0f, 2.0f},  /* transA, M over several MC blocks */
        {1, 0, 13, 600, 2100, 0, 1, 1.0f, 1.0f}, /* N over one NC block (2048), K three blocks */
        {1, 0, 1, 128, 50, 0, 1, 1.0f, 1.0f},    /* one row: matrix-vector path, not packed */
        {0, 0, 29, 257, 31, 0, 0, 1.0f, 0.0f},   /* MatMul 2-D */
        {0, 4, 9, 70, 130, 0, 0, 1.0f, 0.0f},    /* MatMul 3-D A, 2-D B: batch folded into M */
        {0, 0, 1, 40, 16, 0, 0, 1.0f, 0.0f},     /* MatMul one row: not packed */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int threads = 1; threads <= 2; threads++) {
            const mm_case *mc = &cases[i];
            int64_t rows = mc->batch > 0 ? mc->batch * mc->M : mc->M, yn = rows * mc->N;
            float *a = rnd(rows * mc->K), *bm = rnd(mc->K * mc->N), *cv = rnd(mc->N);
            float *y0 = malloc((size_t)yn * sizeof(float)), *y1 = malloc((size_t)yn * sizeof(float));
            double *ref = malloc((size_t)yn * sizeof(double));
            ASSERT(y0 && y1 && ref);
            int p0, p1;
            mm_engine(mc, 0, threads, a, bm, cv, y0, yn, &p0);
            mm_engine(mc, 1, threads, a, bm, cv, y1, yn, &p1);
            ASSERT_EQ(p0, 0);
            ASSERT_EQ(p1, rows > 1);
            char what[128];
            snprintf(what, sizeof what, "%s case %zu threads %d", mc->gemm ? "Gemm" : "MatMul", i, threads);
            if (memcmp(y0, y1, (size_t)yn * sizeof(float)) != 0)
                TEST__FAIL("%s: constant B (packed once) differs from B as an input", what);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < mc->N; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < mc->K; k++) {
                        double av = mc->ta ? a[k * rows + r] : a[r * mc->K + k];
                        double bv = mc->tb ? bm[j * mc->K + k] : bm[k * mc->N + j];
                        s += av * bv;
                    }
                    if (mc->gemm) s = mc->alpha * s + (mc->beta != 0.0f ? (double)mc->beta * cv[j] : 0.0);
                    ref[r * mc->N + j] = s;
                }
            test_check_close(what, y1, ref, yn, 2e-6 * (double)mc->K);
            free(a); free(bm); free(cv); free(y0); free(y1); free(ref);
        }
}

TEST_LIST(TEST_ENTRY(prepack_once_per_engine), TEST_ENTRY(prepack_with_timing),
          TEST_ENTRY(prepack_error_names_layer), TEST_ENTRY(prepack_conv_identical),
          TEST_ENTRY(prepack_conv_engine), TEST_ENTRY(prepack_gemm_matmul))
