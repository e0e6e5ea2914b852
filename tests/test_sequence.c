/*
 * test_sequence.c — kiln's packed non-tensor values through the public
 * network API: the sequence ops (src/ops/sequence/sequence.c, seqmap.c) against a
 * naive list-of-matrices model written here, the string ops
 * (src/ops/text/string.c) against strtod/snprintf and a naive StringNormalizer;
 * kiln_onnx_read_sequence on good and bad files.
 */
#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "kiln/plugin.h"
#include "test.h"

#include <fcntl.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t seed = 0x5e9f00d1234abcdull;

static kiln_layer *layer(kiln_network *n, const char *op, int ver, int nin, const char **in, int nout,
                         const char **out) {
    kiln_layer *l = kiln_network_add_layer(n, op, ver, NULL, nin, in, nout, out);
    if (!l) TEST__FAIL("add_layer %s: %s", op, kiln_errmsg());
    return l;
}

static kiln_engine *build(const kiln_network *net, const char *err_part) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, NULL);
    kiln_build_config_free(cfg);
    if (err_part) {
        ASSERT(rc != 0);
        ASSERT_CONTAINS(kiln_errmsg(), err_part);
        return NULL;
    }
    ASSERT_OK(rc);
    return e;
}

/* A poisoned output buffer of the output's capacity, bound. */
static void *bind_out(kiln_context *ctx, const char *name) {
    size_t cap = 0;
    ASSERT_OK(kiln_context_output_capacity(ctx, name, &cap));
    void *p = malloc(cap ? cap : 1);
    ASSERT(p);
    memset(p, 0xA5, cap ? cap : 1);
    ASSERT_OK(kiln_context_bind(ctx, name, p, cap));
    return p;
}

/* The engine as saved to memory and loaded again (built is freed). */
static kiln_engine *reloaded(kiln_engine *built) {
    void *blob = NULL;
    size_t bsz = 0;
    ASSERT_OK(kiln_engine_serialize(built, &blob, &bsz));
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_engine_load_memory(blob, bsz, &e));
    kiln_free(blob);
    kiln_engine_free(built);
    return e;
}

/* ---------------------------------------------------------------- reference model */

enum { COLS = 3, MAXE = 6, MAXR = 16 };

typedef struct mat {
    int rows;
    float v[MAXR * COLS];
} mat;

typedef struct list {
    int n;
    mat m[MAXE];
} list;

static void l_insert(list *l, int pos, const mat *x) {
    memmove(&l->m[pos + 1], &l->m[pos], (size_t)(l->n - pos) * sizeof(mat));
    l->m[pos] = *x;
    l->n++;
}
static void l_erase(list *l, int pos) {
    memmove(&l->m[pos], &l->m[pos + 1], (size_t)(l->n - pos - 1) * sizeof(mat));
    l->n--;
}

/* ---------------------------------------------------------------- construct/insert/erase/at/concat/length
 * s = [a, b, c]; s2 = insert(s, t, pins); s3 = erase(s2, pera);
 * y = s3[pat]; cat = concat(s3, axis 0); len = length(s3).
 * Positions are network inputs (runtime: data-dependent dims) or
 * constants (build time: static dims from the shapes' symbolic values). */

static const int rows_abc[3] = {2, 4, 1}, rows_t = 3;

static kiln_network *pipeline_net(int const_pos, int64_t pins, int64_t pera, int64_t pat) {
    kiln_network *n = kiln_network_create();
    const char *abc[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        int64_t d[2] = {rows_abc[i], COLS};
        ASSERT_OK(kiln_network_add_input(n, abc[i], KILN_DTYPE_F32, 2, d, NULL));
    }
    int64_t dt[2] = {rows_t, COLS};
    ASSERT_OK(kiln_network_add_input(n, "t", KILN_DTYPE_F32, 2, dt, NULL));
    const char *pn[3] = {"pins", "pera", "pat"};
    int64_t pv[3] = {pins, pera, pat};
    for (int i = 0; i < 3; i++)
        ASSERT_OK(const_pos ? kiln_network_add_constant(n, pn[i], KILN_DTYPE_I64, 0, NULL, &pv[i])
                            : kiln_network_add_input(n, pn[i], KILN_DTYPE_I64, 0, NULL, NULL));
    const char *s[2] = {"s", "s:shapes"};
    layer(n, "ai.onnx::SequenceConstruct", 11, 3, abc, 2, s);
    const char *ins_in[4] = {"s", "s:shapes", "t", "pins"}, *s2[2] = {"s2", "s2:shapes"};
    layer(n, "ai.onnx::SequenceInsert", 11, 4, ins_in, 2, s2);
    const char *er_in[3] = {"s2", "s2:shapes", "pera"}, *s3[2] = {"s3", "s3:shapes"};
    layer(n, "ai.onnx::SequenceErase", 11, 3, er_in, 2, s3);
    const char *at_in[3] = {"s3", "s3:shapes", "pat"}, *y[1] = {"y"};
    layer(n, "ai.onnx::SequenceAt", 11, 3, at_in, 1, y);
    const char *cat[1] = {"cat"}, *len[1] = {"len"};
    kiln_layer *cl = layer(n, "ai.onnx::ConcatFromSequence", 11, 2, s3, 1, cat);
    ASSERT_OK(kiln_layer_set_int(cl, "axis", 0));
    layer(n, "ai.onnx::SequenceLength", 11, 2, s3, 1, len);
    const char *outs[5] = {"y", "cat", "len", "s3", "s3:shapes"};
    for (int i = 0; i < 5; i++) ASSERT_OK(kiln_network_mark_output(n, outs[i]));
    return n;
}

static void run_pipeline(int const_pos, int64_t pins, int64_t pera, int64_t pat) {
    kiln_network *net = pipeline_net(const_pos, pins, pera, pat);
    kiln_engine *built = build(net, NULL);
    kiln_network_free(net);
    /* the engine as saved and reloaded (shape program, size tensors, bounds) */
    kiln_engine *e = reloaded(built);
    /* reference */
    list L = {0};
    mat x[4];
    for (int i = 0; i < 4; i++) {
        x[i].rows = i < 3 ? rows_abc[i] : rows_t;
        for (int k = 0; k < x[i].rows * COLS; k++) x[i].v[k] = test_randf(&seed, -2, 2);
        if (i < 3) l_insert(&L, L.n, &x[i]);
    }
    l_insert(&L, (int)(pins < 0 ? pins + L.n : pins), &x[3]);
    l_erase(&L, (int)(pera < 0 ? pera + L.n : pera));
    const mat *want_y = &L.m[pat < 0 ? pat + L.n : pat];

    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    const char *abc[4] = {"a", "b", "c", "t"};
    for (int i = 0; i < 4; i++)
        ASSERT_OK(kiln_context_bind(ctx, abc[i], x[i].v, sizeof(float) * (size_t)(x[i].rows * COLS)));
    int64_t pv[3] = {pins, pera, pat};
    const char *pn[3] = {"pins", "pera", "pat"};
    if (!const_pos)
        for (int i = 0; i < 3; i++) ASSERT_OK(kiln_context_bind(ctx, pn[i], &pv[i], sizeof pv[i]));
    /* Outputs with data-dependent dims need their upper bound's capacity.
     * y's dims are each bounded by the sequence's length (30 floats), and so
     * is their product (kiln_shape_numel_bound): 30 floats, not 30 * 30. */
    size_t ycap = 0;
    ASSERT_OK(kiln_context_output_capacity(ctx, "y", &ycap));
    int64_t total_in = (rows_abc[0] + rows_abc[1] + rows_abc[2] + rows_t) * COLS;
    if (!const_pos) ASSERT(ycap >= sizeof(float) * (size_t)(4 * COLS)); /* the largest element fits */
    ASSERT(ycap <= sizeof(float) * (size_t)total_in);
    float *y = bind_out(ctx, "y"), *cat = bind_out(ctx, "cat"), *s3 = bind_out(ctx, "s3");
    int64_t *shp = bind_out(ctx, "s3:shapes"), *lenp = bind_out(ctx, "len");
    ASSERT_OK(kiln_context_run(ctx));
    int64_t len = *lenp;

    int nd;
    int64_t dims[KILN_MAX_DIMS];
    ASSERT_OK(kiln_context_shape(ctx, "y", &nd, dims));
    ASSERT_EQ(nd, 2);
    ASSERT_EQ(dims[0], want_y->rows);
    ASSERT_EQ(dims[1], COLS);
    for (int k = 0; k < want_y->rows * COLS; k++) ASSERT_EQ(y[k], want_y->v[k]);
    ASSERT_EQ(len, L.n);
    ASSERT_OK(kiln_context_shape(ctx, "s3:shapes", &nd, dims));
    ASSERT_EQ(nd, 2);
    ASSERT_EQ(dims[0], L.n);
    ASSERT_EQ(dims[1], 2);
    int total = 0;
    for (int i = 0; i < L.n; i++) {
        ASSERT_EQ(shp[2 * i], L.m[i].rows);
        ASSERT_EQ(shp[2 * i + 1], COLS);
        for (int k = 0; k < L.m[i].rows * COLS; k++) {
            ASSERT_EQ(s3[total + k], L.m[i].v[k]);
            ASSERT_EQ(cat[total + k], L.m[i].v[k]); /* axis 0 concat = the packed data */
        }
        total += L.m[i].rows * COLS;
    }
    ASSERT_OK(kiln_context_shape(ctx, "cat", &nd, dims));
    ASSERT_EQ(nd, 2);
    ASSERT_EQ(dims[0] * COLS, total);
    ASSERT_OK(kiln_context_shape(ctx, "s3", &nd, dims));
    ASSERT_EQ(dims[0], total);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    free(y);
    free(cat);
    free(s3);
    free(shp);
    free(lenp);
}

TEST_IMPL(sequence_pipeline_runtime_positions) {
    const int64_t cases[][3] = {{0, 0, 0}, {3, -1, 2}, {-1, 2, -1}, {1, 1, 1}, {2, -4, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_pipeline(0, cases[i][0], cases[i][1], cases[i][2]);
}

TEST_IMPL(sequence_pipeline_build_time_positions) {
    const int64_t cases[][3] = {{0, 0, 0}, {3, -1, 2}, {-1, 2, -1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_pipeline(1, cases[i][0], cases[i][1], cases[i][2]);
}

/* ---------------------------------------------------------------- SplitToSequence + ConcatFromSequence */

TEST_IMPL(sequence_split_concat) {
    enum { H = 2, W = 7 };
    kiln_network *n = kiln_network_create();
    int64_t dx[2] = {H, W}, ds[1] = {3};
    ASSERT_OK(kiln_network_add_input(n, "x", KILN_DTYPE_F32, 2, dx, NULL));
    ASSERT_OK(kiln_network_add_input(n, "split", KILN_DTYPE_I64, 1, ds, NULL));
    const char *sin[2] = {"x", "split"}, *s[2] = {"s", "s:shapes"};
    kiln_layer *l = layer(n, "ai.onnx::SplitToSequence", 11, 2, sin, 2, s);
    ASSERT_OK(kiln_layer_set_int(l, "axis", 1));
    const char *back[1] = {"back"}, *stk[1] = {"stk"};
    l = layer(n, "ai.onnx::ConcatFromSequence", 11, 2, s, 1, back);
    ASSERT_OK(kiln_layer_set_int(l, "axis", -1));
    /* split along axis 0 without split input, keepdims 0: W rows of [W]... then stack back */
    const char *s0in[1] = {"x"}, *r[2] = {"r", "r:shapes"};
    l = layer(n, "ai.onnx::SplitToSequence", 11, 1, s0in, 2, r);
    ASSERT_OK(kiln_layer_set_int(l, "keepdims", 0));
    l = layer(n, "ai.onnx::ConcatFromSequence", 11, 2, r, 1, stk);
    ASSERT_OK(kiln_layer_set_int(l, "axis", 1));
    ASSERT_OK(kiln_layer_set_int(l, "new_axis", 1));
    ASSERT_OK(kiln_network_mark_output(n, "back"));
    ASSERT_OK(kiln_network_mark_output(n, "stk"));
    ASSERT_OK(kiln_network_mark_output(n, "s:shapes"));
    kiln_engine *e = build(n, NULL);
    kiln_network_free(n);
    float x[H * W];
    int64_t split[3] = {2, 4, 1};
    for (int i = 0; i < H * W; i++) x[i] = test_randf(&seed, -5, 5);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "split", split, sizeof split));
    float *back_v = bind_out(ctx, "back"), *stk_v = bind_out(ctx, "stk");
    int64_t *shp = bind_out(ctx, "s:shapes");
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < H * W; i++) ASSERT_EQ(back_v[i], x[i]);
    /* stacking the rows of x along a new axis 1: stk[w][h] = x[h][w] */
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    ASSERT_OK(kiln_context_shape(ctx, "stk", &nd, dims));
    ASSERT_EQ(nd, 2);
    ASSERT_EQ(dims[0], W);
    ASSERT_EQ(dims[1], H);
    for (int h = 0; h < H; h++)
        for (int w = 0; w < W; w++) ASSERT_EQ(stk_v[w * H + h], x[h * W + w]);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(shp[2 * i], H);
        ASSERT_EQ(shp[2 * i + 1], split[i]);
    }
    /* a split that does not cover the axis: an error naming the op, not a crash */
    int64_t bad[3] = {2, 2, 1};
    ASSERT_OK(kiln_context_bind(ctx, "split", bad, sizeof bad));
    ASSERT(kiln_context_run(ctx) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "SplitToSequence");
    kiln_context_free(ctx);
    kiln_engine_free(e);
    free(back_v);
    free(stk_v);
    free(shp);
}

/* ---------------------------------------------------------------- errors */

TEST_IMPL(sequence_errors) {
    /* position out of range at run time */
    kiln_network *net = pipeline_net(0, 0, 0, 0);
    kiln_engine *e = build(net, NULL);
    kiln_network_free(net);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    static float buf[4][MAXR * COLS];
    const char *abc[4] = {"a", "b", "c", "t"};
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < MAXR * COLS; k++) buf[i][k] = test_randf(&seed, -1, 1);
        ASSERT_OK(kiln_context_bind(ctx, abc[i], buf[i], sizeof(float) * (size_t)((i < 3 ? rows_abc[i] : rows_t) * COLS)));
    }
    int64_t pins = 9, pera = 0, pat = 0;
    ASSERT_OK(kiln_context_bind(ctx, "pins", &pins, sizeof pins));
    ASSERT_OK(kiln_context_bind(ctx, "pera", &pera, sizeof pera));
    ASSERT_OK(kiln_context_bind(ctx, "pat", &pat, sizeof pat));
    const char *outs[5] = {"y", "cat", "s3", "s3:shapes", "len"};
    void *ob[5];
    for (int i = 0; i < 5; i++) ob[i] = bind_out(ctx, outs[i]);
    ASSERT(kiln_context_run(ctx) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "position 9 is out of range");
    pins = 0;
    pat = -5; /* s3 has 3 elements */
    ASSERT(kiln_context_run(ctx) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "SequenceAt");
    pat = 2;
    ASSERT_OK(kiln_context_run(ctx));
    kiln_context_free(ctx);
    for (int i = 0; i < 5; i++) free(ob[i]);
    kiln_engine_free(e);

    /* mixed ranks and types are refused at build time */
    kiln_network *n = kiln_network_create();
    int64_t d1[1] = {3}, d2[2] = {1, 3};
    ASSERT_OK(kiln_network_add_input(n, "p", KILN_DTYPE_F32, 1, d1, NULL));
    ASSERT_OK(kiln_network_add_input(n, "q", KILN_DTYPE_F32, 2, d2, NULL));
    const char *pq[2] = {"p", "q"}, *s[2] = {"s", "s:shapes"};
    layer(n, "ai.onnx::SequenceConstruct", 11, 2, pq, 2, s);
    ASSERT_OK(kiln_network_mark_output(n, "s"));
    ASSERT_OK(kiln_network_mark_output(n, "s:shapes"));
    build(n, "one rank");
    kiln_network_free(n);
    n = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(n, "p", KILN_DTYPE_F32, 1, d1, NULL));
    ASSERT_OK(kiln_network_add_input(n, "q", KILN_DTYPE_I64, 1, d1, NULL));
    layer(n, "ai.onnx::SequenceConstruct", 11, 2, pq, 2, s);
    ASSERT_OK(kiln_network_mark_output(n, "s"));
    build(n, "one element type");
    kiln_network_free(n);
    /* a tensor where a sequence is expected */
    n = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(n, "p", KILN_DTYPE_F32, 1, d1, NULL));
    const char *pp[2] = {"p", "p"}, *ln[1] = {"n"};
    layer(n, "ai.onnx::SequenceLength", 11, 2, pp, 1, ln);
    ASSERT_OK(kiln_network_mark_output(n, "n"));
    build(n, "must be a sequence");
    kiln_network_free(n);
}

/* ---------------------------------------------------------------- SequenceMap
 * s = [a (2x3), b (4x3), c (2x3)]; body(x, t) = (x * 2 + t, Shape(x)) with t
 * a [3] tensor; run from the built engine and from a serialized copy. */

static kiln_network *map_body(void) {
    kiln_network *body = kiln_network_create();
    int64_t dx[2] = {-1, COLS}, dt[1] = {COLS};
    const char *nm[2] = {"rows", NULL};
    ASSERT_OK(kiln_network_add_input(body, "x", KILN_DTYPE_F32, 2, dx, nm));
    ASSERT_OK(kiln_network_add_input(body, "t", KILN_DTYPE_F32, 1, dt, NULL));
    float two = 2;
    ASSERT_OK(kiln_network_add_constant(body, "two", KILN_DTYPE_F32, 0, NULL, &two));
    const char *mi[2] = {"x", "two"}, *mo[1] = {"m"}, *ai[2] = {"m", "t"}, *ao[1] = {"y"};
    const char *si[1] = {"x"}, *so[1] = {"shp"};
    layer(body, "ai.onnx::Mul", 7, 2, mi, 1, mo);
    layer(body, "ai.onnx::Add", 7, 2, ai, 1, ao);
    layer(body, "ai.onnx::Shape", 1, 1, si, 1, so);
    ASSERT_OK(kiln_network_mark_output(body, "y"));
    ASSERT_OK(kiln_network_mark_output(body, "shp"));
    return body;
}

TEST_IMPL(sequence_map) {
    static const int rows[3] = {2, 4, 2};
    kiln_network *n = kiln_network_create(), *body = map_body();
    const char *abc[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        int64_t d[2] = {rows[i], COLS};
        ASSERT_OK(kiln_network_add_input(n, abc[i], KILN_DTYPE_F32, 2, d, NULL));
    }
    int64_t dt[1] = {COLS};
    ASSERT_OK(kiln_network_add_input(n, "t", KILN_DTYPE_F32, 1, dt, NULL));
    const char *s[2] = {"s", "s:shapes"};
    layer(n, "ai.onnx::SequenceConstruct", 11, 3, abc, 2, s);
    const char *mi[3] = {"s", "s:shapes", "t"}, *mo[4] = {"y", "y:shapes", "z", "z:shapes"};
    kiln_layer *l = layer(n, "ai.onnx::SequenceMap", 17, 3, mi, 4, mo);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    int64_t parts[2] = {2, 1};
    ASSERT_OK(kiln_layer_set_ints(l, "input_parts", parts, 2));
    for (int i = 0; i < 4; i++) ASSERT_OK(kiln_network_mark_output(n, mo[i]));
    kiln_engine *built = build(n, NULL);
    kiln_network_free(n); /* the layer owns body */
    void *blob = NULL;
    size_t bsz = 0;
    ASSERT_OK(kiln_engine_serialize(built, &blob, &bsz));
    kiln_engine *loaded = NULL;
    ASSERT_OK(kiln_engine_load_memory(blob, bsz, &loaded));
    kiln_free(blob);
    kiln_engine *es[2] = {built, loaded};
    for (int r = 0; r < 2; r++) {
        float x[3][4 * COLS], t[COLS];
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < rows[i] * COLS; k++) x[i][k] = test_randf(&seed, -3, 3);
        for (int k = 0; k < COLS; k++) t[k] = test_randf(&seed, -3, 3);
        kiln_context *ctx = NULL;
        ASSERT_OK(kiln_context_create(es[r], 1, &ctx));
        for (int i = 0; i < 3; i++)
            ASSERT_OK(kiln_context_bind(ctx, abc[i], x[i], sizeof(float) * (size_t)(rows[i] * COLS)));
        ASSERT_OK(kiln_context_bind(ctx, "t", t, sizeof t));
        float *y = bind_out(ctx, "y");
        int64_t *ys = bind_out(ctx, "y:shapes"), *z = bind_out(ctx, "z"), *zs = bind_out(ctx, "z:shapes");
        ASSERT_OK(kiln_context_run(ctx));
        int off = 0;
        for (int i = 0; i < 3; i++) {
            ASSERT_EQ(ys[2 * i], rows[i]);
            ASSERT_EQ(ys[2 * i + 1], COLS);
            ASSERT_EQ(zs[i], 2);
            ASSERT_EQ(z[2 * i], rows[i]);
            ASSERT_EQ(z[2 * i + 1], COLS);
            for (int k = 0; k < rows[i] * COLS; k++) ASSERT_NEAR(y[off + k], x[i][k] * 2 + t[k % COLS], 1e-6);
            off += rows[i] * COLS;
        }
        kiln_context_free(ctx);
        free(y);
        free(ys);
        free(z);
        free(zs);
    }
    kiln_engine_free(built);
    kiln_engine_free(loaded);

    /* element shapes known only at run time: a clear build error */
    n = kiln_network_create();
    body = map_body();
    int64_t d1[1] = {-1}, d2[2] = {-1, 2};
    ASSERT_OK(kiln_network_add_input(n, "s", KILN_DTYPE_F32, 1, d1, NULL));
    ASSERT_OK(kiln_network_add_input(n, "s:shapes", KILN_DTYPE_I64, 2, d2, NULL));
    ASSERT_OK(kiln_network_add_input(n, "t", KILN_DTYPE_F32, 1, dt, NULL));
    l = layer(n, "ai.onnx::SequenceMap", 17, 3, mi, 4, mo);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_layer_set_ints(l, "input_parts", parts, 2));
    ASSERT_OK(kiln_network_mark_output(n, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    int64_t lo1[1] = {1}, hi1[1] = {64}, lo2[2] = {1, 2}, hi2[2] = {8, 2};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "s", 1, lo1, hi1, hi1));
    ASSERT_OK(kiln_build_config_set_profile(cfg, "s:shapes", 2, lo2, hi2, hi2));
    kiln_engine *e = NULL;
    ASSERT(kiln_build(n, cfg, &e, NULL) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "known only at run time");
    kiln_build_config_free(cfg);
    kiln_network_free(n);
}

/* ---------------------------------------------------------------- strings
 * x (random floats, special values) -> cast_to_string -> cast_from_string:
 * every string reads back to its float, no shorter one would, and the
 * round trip is exact. */

TEST_IMPL(string_cast_round_trip) {
    enum { N = 64 };
    kiln_network *n = kiln_network_create();
    int64_t d[2] = {4, N / 4};
    ASSERT_OK(kiln_network_add_input(n, "x", KILN_DTYPE_F32, 2, d, NULL));
    const char *xi[1] = {"x"}, *so[3] = {"s", "s:lens", "s:n"}, *bi[2] = {"s", "s:lens"}, *bo[1] = {"back"};
    layer(n, "kiln::cast_to_string", 1, 1, xi, 3, so);
    kiln_layer *l = layer(n, "kiln::cast_from_string", 1, 2, bi, 1, bo);
    ASSERT_OK(kiln_layer_set_int(l, "to", KILN_DTYPE_F32));
    ASSERT_OK(kiln_network_mark_output(n, "s"));
    ASSERT_OK(kiln_network_mark_output(n, "s:lens"));
    ASSERT_OK(kiln_network_mark_output(n, "back"));
    kiln_engine *e = build(n, NULL);
    kiln_network_free(n);
    float x[N];
    for (int i = 0; i < N; i++) {
        float m = test_randf(&seed, -1, 1);
        int ex = (int)test_randf(&seed, -40, 40);
        x[i] = ldexpf(m, ex);
    }
    x[0] = 1.0f, x[1] = -3.0f, x[2] = 1e-5f, x[3] = 0.1f, x[4] = INFINITY, x[5] = -INFINITY, x[6] = NAN;
    x[7] = 0.0f, x[8] = 16777216.0f, x[9] = 1.17549435e-38f;
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    char *sb = bind_out(ctx, "s");
    int64_t *lens = bind_out(ctx, "s:lens");
    float *back = bind_out(ctx, "back");
    ASSERT_OK(kiln_context_run(ctx));
    int64_t off = 0;
    for (int i = 0; i < N; i++) {
        char str[64];
        ASSERT(lens[i] > 0 && lens[i] < 40);
        memcpy(str, sb + off, (size_t)lens[i]);
        str[lens[i]] = 0;
        off += lens[i];
        if (isnan(x[i])) {
            ASSERT_STR_EQ(str, "nan");
            ASSERT(isnan(back[i]));
            continue;
        }
        ASSERT_EQ((float)strtod(str, NULL), x[i]);
        ASSERT_EQ(back[i], x[i]);
        if (isinf(x[i])) continue;
        /* shortest: one significant digit fewer does not read back */
        int sig = 0, lead = 1;
        size_t sl = strlen(str);
        if (sl > 2 && !strcmp(str + sl - 2, ".0")) str[sl - 2] = 0; /* NumPy's integral ".0" */
        for (const char *p = str; *p && *p != 'e'; p++) {
            if (!isdigit((unsigned char)*p) || (lead && *p == '0')) continue;
            lead = 0;
            sig++;
        }
        if (sig > 1) {
            char shorter[64];
            snprintf(shorter, sizeof shorter, "%.*g", sig - 1, (double)x[i]);
            ASSERT((float)strtod(shorter, NULL) != x[i]);
        }
    }
    ASSERT_STR_EQ(memcpy((char[4]){0}, sb, 3), "1.0"); /* NumPy's str(1.0) */
    kiln_context_free(ctx);
    free(sb);
    free(lens);
    free(back);
    kiln_engine_free(e);
}

/* StringNormalizer against a naive reference; a non-number cast is an error. */
TEST_IMPL(string_normalizer_and_errors) {
    static const char *vocab[] = {"Monday", "tuesday", "WEDNESDAY", "thursday", "friday", "a", "", "Sunday"};
    enum { C = 12 };
    const char *words[C];
    char bytes[256];
    int64_t lens[C], off = 0;
    for (int i = 0; i < C; i++) {
        words[i] = vocab[(int)test_randf(&seed, 0, 7.999f)];
        lens[i] = (int64_t)strlen(words[i]);
        memcpy(bytes + off, words[i], (size_t)lens[i]);
        off += lens[i];
    }
    for (int cs = 0; cs < 2; cs++) {
        kiln_network *n = kiln_network_create();
        int64_t db[1] = {off}, dl[2] = {1, C};
        ASSERT_OK(kiln_network_add_input(n, "s", KILN_DTYPE_U8, 1, db, NULL));
        ASSERT_OK(kiln_network_add_input(n, "s:lens", KILN_DTYPE_I64, 2, dl, NULL));
        const char *si[2] = {"s", "s:lens"}, *yo[2] = {"y", "y:lens"};
        kiln_layer *l = layer(n, "ai.onnx::StringNormalizer", 10, 2, si, 2, yo);
        ASSERT_OK(kiln_layer_set_string(l, "case_change_action", "UPPER"));
        ASSERT_OK(kiln_layer_set_int(l, "is_case_sensitive", cs));
        static const char stop[] = "monday\0friday";
        ASSERT_OK(kiln_layer_set_bytes(l, "stopwords", stop, sizeof stop));
        ASSERT_OK(kiln_network_mark_output(n, "y"));
        ASSERT_OK(kiln_network_mark_output(n, "y:lens"));
        kiln_engine *built = build(n, NULL);
        kiln_network_free(n);
        /* run from a saved and reloaded engine: the attributes (stopwords as
         * BYTES) go through the engine file */
        kiln_engine *e = reloaded(built);
        kiln_context *ctx = NULL;
        ASSERT_OK(kiln_context_create(e, 1, &ctx));
        ASSERT_OK(kiln_context_bind(ctx, "s", bytes, (size_t)off));
        ASSERT_OK(kiln_context_bind(ctx, "s:lens", lens, sizeof lens));
        char *y = bind_out(ctx, "y");
        int64_t *yl = bind_out(ctx, "y:lens");
        ASSERT_OK(kiln_context_run(ctx));
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        ASSERT_OK(kiln_context_shape(ctx, "y:lens", &nd, dims));
        ASSERT_EQ(nd, 2);
        ASSERT_EQ(dims[0], 1);
        int k = 0;
        int64_t yo2 = 0;
        for (int i = 0; i < C; i++) {
            int stopped = 0;
            for (int w = 0; w < 2; w++) {
                const char *sw = w ? "friday" : "monday";
                stopped |= cs ? !strcmp(words[i], sw) : !strcasecmp(words[i], sw);
            }
            if (stopped) continue;
            ASSERT(k < dims[1]);
            ASSERT_EQ(yl[k], (int64_t)strlen(words[i]));
            for (size_t q = 0; q < strlen(words[i]); q++) ASSERT_EQ(y[yo2 + (int64_t)q], toupper(words[i][q]));
            yo2 += yl[k++];
        }
        if (k == 0) { ASSERT_EQ(dims[1], 1); ASSERT_EQ(yl[0], 0); }
        else ASSERT_EQ(dims[1], k);
        kiln_context_free(ctx);
        free(y);
        free(yl);
        kiln_engine_free(e);
    }
    /* not a number */
    kiln_network *n = kiln_network_create();
    int64_t db[1] = {-1}, dl[1] = {2};
    ASSERT_OK(kiln_network_add_input(n, "s", KILN_DTYPE_U8, 1, db, NULL));
    ASSERT_OK(kiln_network_add_input(n, "s:lens", KILN_DTYPE_I64, 1, dl, NULL));
    const char *si[2] = {"s", "s:lens"}, *yo[1] = {"y"};
    kiln_layer *l = layer(n, "kiln::cast_from_string", 1, 2, si, 1, yo);
    ASSERT_OK(kiln_layer_set_int(l, "to", KILN_DTYPE_I32));
    ASSERT_OK(kiln_network_mark_output(n, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    int64_t lo[1] = {0}, hi[1] = {64};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "s", 1, lo, hi, hi));
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(n, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(n);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    char in[] = "12abc";
    int64_t il[2] = {2, 3};
    int64_t shp[1] = {5};
    int32_t out[2] = {-1, -1};
    ASSERT_OK(kiln_context_set_input_shape(ctx, "s", 1, shp));
    ASSERT_OK(kiln_context_bind(ctx, "s", in, 5));
    ASSERT_OK(kiln_context_bind(ctx, "s:lens", il, sizeof il));
    ASSERT_OK(kiln_context_bind(ctx, "y", out, sizeof out));
    ASSERT(kiln_context_run(ctx) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "element 1 'abc' is not an integer");
    il[0] = 4; /* lengths past the data */
    ASSERT(kiln_context_run(ctx) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "past the 5 bytes");
    memcpy(in, "12 34", 5);
    il[0] = 2;
    ASSERT_OK(kiln_context_run(ctx));
    ASSERT_EQ(out[0], 12);
    ASSERT_EQ(out[1], 34);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* ---------------------------------------------------------------- importer: the parts as network inputs */

TEST_IMPL(sequence_import_parts) {
    const char *m = "/usr/share/libonnx-testdata/data/node/test_sequence_insert_at_front/model.onnx";
    if (access(m, R_OK)) {
        printf("skip: %s not installed\n", m);
        return;
    }
    kiln_network *net = NULL;
    ASSERT_OK(kiln_onnx_import(m, NULL, &net));
    /* sequence (int64, element shape undeclared), tensor [3], position [1] */
    ASSERT_EQ(kiln_network_num_inputs(net), 4);
    static const char *names[4] = {"sequence", "sequence:shapes", "tensor", "position"};
    static const int nds[4] = {1, 2, 1, 1};
    static const int64_t d0[4] = {-1, -1, 3, 1};
    kiln_io_info info;
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(kiln_network_input_info(net, i, &info));
        ASSERT_STR_EQ(info.name, names[i]);
        ASSERT_EQ(info.dtype, KILN_DTYPE_I64);
        ASSERT_EQ(info.ndim, nds[i]);
        ASSERT_EQ(info.dims[0], d0[i]);
    }
    ASSERT_EQ(info.is_input, 1);
    ASSERT_EQ(kiln_network_input_info(net, 4, &info), KILN_EINVAL);
    ASSERT_EQ(kiln_network_num_outputs(net), 2);
    ASSERT_STR_EQ(kiln_network_output_name(net, 0), "output_sequence");
    ASSERT_STR_EQ(kiln_network_output_name(net, 1), "output_sequence:shapes");
    kiln_network_free(net);
}

/* ---------------------------------------------------------------- test data reader */

TEST_IMPL(sequence_read_files) {
    kiln_onnx_sequence q;
    ASSERT_EQ(kiln_onnx_read_sequence("/nonexistent/kiln/seq.pb", &q), KILN_EIO);
    char path[] = "/tmp/kiln_seq_XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    /* field 3 (tensor_values) claims 100 bytes, 2 present: truncated */
    const unsigned char junk[] = {0x1a, 0x64, 0x08, 0x01};
    ASSERT_EQ(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
    close(fd);
    ASSERT_EQ(kiln_onnx_read_sequence(path, &q), KILN_EFORMAT);
    kiln_onnx_sequence_free(&q);
    /* a sequence of two int64 tensors [2] and [1]: elem_type 1, tensor dims/type/int64_data */
    const unsigned char two[] = {0x10, 0x01,
                                 0x1a, 0x08, 0x08, 0x02, 0x10, 0x07, 0x3a, 0x02, 0x05, 0x06,
                                 0x1a, 0x07, 0x08, 0x01, 0x10, 0x07, 0x3a, 0x01, 0x09};
    fd = open(path, O_WRONLY | O_TRUNC);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, two, sizeof two), (ssize_t)sizeof two);
    close(fd);
    ASSERT_OK(kiln_onnx_read_sequence(path, &q));
    ASSERT_EQ(q.count, 2);
    ASSERT_EQ(q.rank, 1);
    ASSERT_EQ(q.dtype, KILN_DTYPE_I64);
    ASSERT_EQ(q.shapes[0], 2);
    ASSERT_EQ(q.shapes[1], 1);
    ASSERT_EQ(q.bytes, 3 * sizeof(int64_t));
    const int64_t *v = q.data;
    ASSERT_EQ(v[0], 5);
    ASSERT_EQ(v[1], 6);
    ASSERT_EQ(v[2], 9);
    kiln_onnx_sequence_free(&q);
    unlink(path);
}

TEST_LIST(TEST_ENTRY(sequence_pipeline_runtime_positions), TEST_ENTRY(sequence_pipeline_build_time_positions),
          TEST_ENTRY(sequence_split_concat), TEST_ENTRY(sequence_errors), TEST_ENTRY(sequence_map),
          TEST_ENTRY(sequence_read_files), TEST_ENTRY(string_cast_round_trip),
          TEST_ENTRY(string_normalizer_and_errors), TEST_ENTRY(sequence_import_parts))
