/*
 * test_loop.c — ONNX Loop and Scan (src/ops/controlflow/loop.c, scan.c) built through
 * the public network API, against naive loops written here; kiln_network_append.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "test.h"

#include <stdint.h>
#include <string.h>

static uint64_t seed = 0x1234abcd5678ef01ull;

static void fill_rand(float *p, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) p[i] = test_randf(&seed, lo, hi);
}

static kiln_layer *add(kiln_network *n, const char *op, int ver, const char *a, const char *b, const char *y) {
    const char *in[2] = {a, b}, *out[1] = {y};
    kiln_layer *l = kiln_network_add_layer(n, op, ver, NULL, b ? 2 : 1, in, 1, out);
    if (!l) TEST__FAIL("add_layer %s: %s", op, kiln_errmsg());
    return l;
}

static kiln_engine *build_flags(const kiln_network *net, unsigned flags) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, flags);
    kiln_build_config_set_threads(cfg, 2);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    return e;
}

static kiln_engine *build(const kiln_network *net) { return build_flags(net, KILN_BUILD_NO_TIMING); }

/* ---------------------------------------------------------------- Loop with scan outputs
 * v = v * 0.5 + x, M = 5 times; scan outputs: every v, and the iteration number. */

enum { R = 2, C = 3, LOOP_M = 5 };

static kiln_network *net_affine_loop(void) {
    kiln_network *body = kiln_network_create();
    int64_t d[2] = {R, C};
    ASSERT_OK(kiln_network_add_input(body, "i", KILN_DTYPE_I64, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "c", KILN_DTYPE_BOOL, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "v", KILN_DTYPE_F32, 2, d, NULL));
    ASSERT_OK(kiln_network_add_input(body, "xo", KILN_DTYPE_F32, 2, d, NULL));
    float half = 0.5f;
    ASSERT_OK(kiln_network_add_constant(body, "half", KILN_DTYPE_F32, 0, NULL, &half));
    add(body, "ai.onnx::Mul", 7, "v", "half", "m");
    add(body, "ai.onnx::Add", 7, "m", "xo", "vo");
    add(body, "ai.onnx::Identity", 1, "c", NULL, "co");
    add(body, "ai.onnx::Identity", 1, "vo", NULL, "so");
    add(body, "ai.onnx::Identity", 1, "i", NULL, "io");
    ASSERT_OK(kiln_network_mark_output(body, "co"));
    ASSERT_OK(kiln_network_mark_output(body, "vo"));
    ASSERT_OK(kiln_network_mark_output(body, "so"));
    ASSERT_OK(kiln_network_mark_output(body, "io"));

    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, d, NULL));
    ASSERT_OK(kiln_network_add_input(net, "v0", KILN_DTYPE_F32, 2, d, NULL));
    int64_t m = LOOP_M;
    ASSERT_OK(kiln_network_add_constant(net, "M", KILN_DTYPE_I64, 0, NULL, &m));
    const char *in[4] = {"M", "", "v0", "x"}, *out[3] = {"vf", "s1", "s2"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Loop", 16, "loop", 4, in, 3, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_layer_set_int(l, "num_outer", 1));
    ASSERT_OK(kiln_layer_set_int(l, "num_outputs", 3));
    ASSERT_OK(kiln_network_mark_output(net, "vf"));
    ASSERT_OK(kiln_network_mark_output(net, "s1"));
    ASSERT_OK(kiln_network_mark_output(net, "s2"));
    return net;
}

/* Run the affine loop engine on fresh inputs and check against a naive loop. */
static void check_affine(kiln_engine *e) {
    float x[R * C], v0[R * C], vf[R * C], s1[LOOP_M * R * C];
    int64_t s2[LOOP_M];
    fill_rand(x, R * C, -1, 1);
    fill_rand(v0, R * C, -2, 2);
    memset(vf, 0xff, sizeof vf); /* poison (NaN) */
    memset(s1, 0xff, sizeof s1);
    memset(s2, 0xff, sizeof s2);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 0, &ctx));
    kiln_context_set_debug(ctx, 1); /* every output element must be written */
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "v0", v0, sizeof v0));
    ASSERT_OK(kiln_context_bind(ctx, "vf", vf, sizeof vf));
    ASSERT_OK(kiln_context_bind(ctx, "s1", s1, sizeof s1));
    ASSERT_OK(kiln_context_bind(ctx, "s2", s2, sizeof s2));
    ASSERT_OK(kiln_context_run(ctx));
    int nd = 0;
    int64_t dims[KILN_MAX_DIMS];
    ASSERT_OK(kiln_context_shape(ctx, "s1", &nd, dims));
    ASSERT_EQ(nd, 3);
    ASSERT_EQ(dims[0], LOOP_M);
    ASSERT_EQ(dims[1], R);
    ASSERT_EQ(dims[2], C);
    float v[R * C];
    memcpy(v, v0, sizeof v);
    for (int it = 0; it < LOOP_M; it++) {
        for (int k = 0; k < R * C; k++) {
            v[k] = v[k] * 0.5f + x[k];
            ASSERT_NEAR(s1[it * R * C + k], v[k], 1e-6);
        }
        ASSERT_EQ(s2[it], it);
    }
    for (int k = 0; k < R * C; k++) ASSERT_NEAR(vf[k], v[k], 1e-6);
    kiln_context_free(ctx);
}

TEST_IMPL(loop_scan_outputs) {
    kiln_network *net = net_affine_loop();
    kiln_engine *e = build(net);
    kiln_network_free(net);
    kiln_io_info info;
    ASSERT_OK(kiln_engine_io(e, kiln_engine_num_inputs(e) + 1, &info));
    ASSERT_STR_EQ(info.name, "s1");
    ASSERT_EQ(info.dims[0], LOOP_M); /* M constant, no cond: a fixed trip count */
    check_affine(e);
    check_affine(e); /* fresh inputs, a new context */
    kiln_engine_free(e);
}

TEST_IMPL(loop_engine_roundtrip) {
    kiln_network *net = net_affine_loop();
    kiln_engine *e = build(net);
    kiln_network_free(net);
    void *buf = NULL;
    size_t n = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &n));
    kiln_engine_free(e);
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, n, &e2));
    FILE *f = tmpfile();
    ASSERT(f);
    ASSERT_OK(kiln_engine_inspect(e2, f));
    fclose(f);
    /* Two contexts of the loaded engine, each with its own body context. */
    check_affine(e2);
    kiln_context *c1 = NULL, *c2 = NULL;
    ASSERT_OK(kiln_context_create(e2, 1, &c1));
    ASSERT_OK(kiln_context_create(e2, 1, &c2));
    float x[R * C], v0[R * C];
    fill_rand(x, R * C, -1, 1);
    fill_rand(v0, R * C, -1, 1);
    for (int k = 0; k < 2; k++) {
        kiln_context *c = k ? c2 : c1;
        ASSERT_OK(kiln_context_bind(c, "x", x, sizeof x));
        ASSERT_OK(kiln_context_bind(c, "v0", v0, sizeof v0));
        ASSERT_OK(kiln_context_run(c));
    }
    ASSERT(memcmp(kiln_context_output(c1, "s1"), kiln_context_output(c2, "s1"), sizeof(float) * LOOP_M * R * C) == 0);
    kiln_context_free(c1);
    kiln_context_free(c2);
    kiln_engine_free(e2);
    /* A corrupted Loop state is an error, never a crash: flip bytes in the
     * second half of the file (where layer blobs live) and load. */
    uint8_t *bytes = buf;
    for (size_t off = n / 2; off < n; off += n / 16 + 1) {
        uint8_t save = bytes[off];
        bytes[off] ^= 0x5a;
        kiln_engine *bad = NULL;
        int rc = kiln_engine_load_memory(buf, n, &bad);
        if (rc == 0) kiln_engine_free(bad);
        bytes[off] = save;
    }
    kiln_free(buf);
}

/* ---------------------------------------------------------------- Loop with early exit
 * s = s + inc while s + inc < 6 (cond from the body), at most 20 times;
 * the scan output's length is known only after the run (a size tensor). */

enum { EXIT_M = 20 };

static kiln_network *net_exit_loop(void) {
    kiln_network *body = kiln_network_create();
    int64_t d1[1] = {1};
    ASSERT_OK(kiln_network_add_input(body, "i", KILN_DTYPE_I64, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "c", KILN_DTYPE_BOOL, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "s", KILN_DTYPE_F32, 1, d1, NULL));
    ASSERT_OK(kiln_network_add_input(body, "inc", KILN_DTYPE_F32, 1, d1, NULL));
    float lim = 6.0f;
    ASSERT_OK(kiln_network_add_constant(body, "lim", KILN_DTYPE_F32, 1, d1, &lim));
    add(body, "ai.onnx::Add", 7, "s", "inc", "so");
    add(body, "ai.onnx::Less", 7, "so", "lim", "co");
    add(body, "ai.onnx::Identity", 1, "so", NULL, "ss");
    ASSERT_OK(kiln_network_mark_output(body, "co"));
    ASSERT_OK(kiln_network_mark_output(body, "so"));
    ASSERT_OK(kiln_network_mark_output(body, "ss"));

    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "s0", KILN_DTYPE_F32, 1, d1, NULL));
    ASSERT_OK(kiln_network_add_input(net, "inc", KILN_DTYPE_F32, 1, d1, NULL));
    int64_t m = EXIT_M;
    uint8_t t = 1;
    ASSERT_OK(kiln_network_add_constant(net, "M", KILN_DTYPE_I64, 0, NULL, &m));
    ASSERT_OK(kiln_network_add_constant(net, "cond", KILN_DTYPE_BOOL, 0, NULL, &t));
    const char *in[4] = {"M", "cond", "s0", "inc"}, *out[2] = {"sf", "trace"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Loop", 13, "loop", 4, in, 2, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_layer_set_int(l, "num_outer", 1));
    ASSERT_OK(kiln_layer_set_int(l, "num_outputs", 2));
    ASSERT_OK(kiln_network_mark_output(net, "sf"));
    ASSERT_OK(kiln_network_mark_output(net, "trace"));
    return net;
}

TEST_IMPL(loop_early_exit) {
    kiln_network *net = net_exit_loop();
    /* With timing: the builder also runs the Loop on its own inputs. */
    kiln_engine *e = build_flags(net, 0);
    kiln_network_free(net);
    kiln_io_info info;
    ASSERT_OK(kiln_engine_io(e, kiln_engine_num_inputs(e) + 1, &info));
    ASSERT_STR_EQ(info.name, "trace");
    ASSERT(info.data_dependent);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 0, &ctx));
    kiln_context_set_debug(ctx, 1);
    /* Big steps: exits early; tiny steps: stops at M. */
    const float lo[2] = {0.5f, 0.1f}, hi[2] = {1.5f, 0.2f};
    for (int run = 0; run < 2; run++) {
        float s0, inc, sf, trace[EXIT_M];
        fill_rand(&s0, 1, 0, 1);
        fill_rand(&inc, 1, lo[run], hi[run]);
        memset(&sf, 0xff, sizeof sf);
        memset(trace, 0xff, sizeof trace);
        ASSERT_OK(kiln_context_bind(ctx, "s0", &s0, sizeof s0));
        ASSERT_OK(kiln_context_bind(ctx, "inc", &inc, sizeof inc));
        ASSERT_OK(kiln_context_bind(ctx, "sf", &sf, sizeof sf));
        ASSERT_OK(kiln_context_bind(ctx, "trace", trace, sizeof trace));
        ASSERT_OK(kiln_context_run(ctx));
        /* Naive: ONNX Loop semantics (cond checked before each iteration). */
        float s = s0, want[EXIT_M];
        int n = 0, cond = 1;
        while (n < EXIT_M && cond) {
            s = s + inc;
            want[n++] = s;
            cond = s < 6.0f;
        }
        int nd = 0;
        int64_t dims[KILN_MAX_DIMS];
        ASSERT_OK(kiln_context_shape(ctx, "trace", &nd, dims));
        ASSERT_EQ(nd, 2);
        ASSERT_EQ(dims[0], n);
        ASSERT_EQ(dims[1], 1);
        if (run == 0) ASSERT(n < EXIT_M);
        else ASSERT_EQ(n, EXIT_M);
        for (int i = 0; i < n; i++) ASSERT_NEAR(trace[i], want[i], 1e-6);
        ASSERT_NEAR(sf, s, 1e-6);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* ---------------------------------------------------------------- unrolled Loop
 * v = Concat(v, x * i) grows by one row every iteration: a fixed-shape body
 * cannot run it, so with M known at build the Loop is unrolled.  The body's
 * cond_out = (i + 1 < stop): with the cond input the loop exits after `stop`
 * iterations (kiln::if_select at run time); without it cond_out is ignored
 * and all M iterations run. */

enum { UNROLL_M = 5 };

static kiln_network *net_growing_loop(int with_cond) {
    kiln_network *body = kiln_network_create();
    int64_t dv[2] = {-1, C}, dx[2] = {1, C};
    ASSERT_OK(kiln_network_add_input(body, "i", KILN_DTYPE_I64, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "c", KILN_DTYPE_BOOL, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "v", KILN_DTYPE_F32, 2, dv, NULL));
    ASSERT_OK(kiln_network_add_input(body, "xo", KILN_DTYPE_F32, 2, dx, NULL));
    ASSERT_OK(kiln_network_add_input(body, "stop", KILN_DTYPE_I64, 0, NULL, NULL));
    int64_t one = 1;
    ASSERT_OK(kiln_network_add_constant(body, "one", KILN_DTYPE_I64, 0, NULL, &one));
    ASSERT_OK(kiln_layer_set_int(add(body, "ai.onnx::Cast", 13, "i", NULL, "fi"), "to", KILN_DTYPE_F32));
    add(body, "ai.onnx::Mul", 7, "xo", "fi", "xi");
    ASSERT_OK(kiln_layer_set_int(add(body, "ai.onnx::Concat", 13, "v", "xi", "vo"), "axis", 0));
    add(body, "ai.onnx::Add", 7, "i", "one", "i1");
    add(body, "ai.onnx::Less", 9, "i1", "stop", "co");
    ASSERT_OK(kiln_network_mark_output(body, "co"));
    ASSERT_OK(kiln_network_mark_output(body, "vo"));

    kiln_network *net = kiln_network_create();
    int64_t d0[2] = {2, C}, m = UNROLL_M;
    ASSERT_OK(kiln_network_add_input(net, "v0", KILN_DTYPE_F32, 2, d0, NULL));
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dx, NULL));
    ASSERT_OK(kiln_network_add_input(net, "stop", KILN_DTYPE_I64, 0, NULL, NULL));
    if (with_cond) ASSERT_OK(kiln_network_add_input(net, "cond", KILN_DTYPE_BOOL, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "M", KILN_DTYPE_I64, 0, NULL, &m));
    const char *in[5] = {"M", with_cond ? "cond" : "", "v0", "x", "stop"}, *out[1] = {"vf"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Loop", 13, "grow", 5, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_layer_set_int(l, "num_outer", 2));
    ASSERT_OK(kiln_layer_set_int(l, "num_outputs", 1));
    ASSERT_OK(kiln_network_mark_output(net, "vf"));
    return net;
}

TEST_IMPL(loop_unrolled_growing) {
    for (int with_cond = 0; with_cond < 2; with_cond++) {
        kiln_network *net = net_growing_loop(with_cond);
        kiln_engine *e = build(net);
        kiln_network_free(net);
        kiln_context *ctx = NULL;
        ASSERT_OK(kiln_context_create(e, 0, &ctx));
        const int64_t stops[3] = {3, 10, 1};
        for (int run = 0; run < 4; run++) {
            float v0[2 * C], x[C];
            fill_rand(v0, 2 * C, -1, 1);
            fill_rand(x, C, -1, 1);
            int64_t stop = stops[run % 3];
            uint8_t cond = run != 3; /* run 3: the loop does not start */
            size_t cap = 0;
            ASSERT_OK(kiln_context_bind(ctx, "v0", v0, sizeof v0));
            ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
            ASSERT_OK(kiln_context_bind(ctx, "stop", &stop, sizeof stop));
            if (with_cond) ASSERT_OK(kiln_context_bind(ctx, "cond", &cond, 1));
            ASSERT_OK(kiln_context_output_capacity(ctx, "vf", &cap));
            float vf[(2 + UNROLL_M) * C * 8];
            ASSERT(cap >= sizeof(float) * (2 + UNROLL_M) * C && cap <= sizeof vf);
            memset(vf, 0xff, sizeof vf);
            ASSERT_OK(kiln_context_bind(ctx, "vf", vf, cap));
            ASSERT_OK(kiln_context_run(ctx));
            /* naive ONNX Loop: without a cond input, cond_out is ignored */
            int n = 0, c = with_cond ? cond : 1;
            while (n < UNROLL_M && c) {
                n++;
                if (with_cond) c = n < stop;
            }
            int nd = 0;
            int64_t dims[KILN_MAX_DIMS];
            ASSERT_OK(kiln_context_shape(ctx, "vf", &nd, dims));
            ASSERT_EQ(nd, 2);
            ASSERT_EQ(dims[0], 2 + n);
            ASSERT_EQ(dims[1], C);
            for (int k = 0; k < 2 * C; k++) ASSERT_EQ(vf[k], v0[k]);
            for (int it = 0; it < n; it++)
                for (int k = 0; k < C; k++) ASSERT_NEAR(vf[(2 + it) * C + k], x[k] * (float)it, 1e-6);
        }
        kiln_context_free(ctx);
        kiln_engine_free(e);
    }
}

TEST_IMPL(loop_errors) {
    /* Scan outputs with M known only at run time: a clear KILN_EUNSUPPORTED. */
    kiln_network *body = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(body, "i", KILN_DTYPE_I64, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "c", KILN_DTYPE_BOOL, 0, NULL, NULL));
    add(body, "ai.onnx::Identity", 1, "c", NULL, "co");
    add(body, "ai.onnx::Identity", 1, "i", NULL, "io");
    ASSERT_OK(kiln_network_mark_output(body, "co"));
    ASSERT_OK(kiln_network_mark_output(body, "io"));
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "M", KILN_DTYPE_I64, 0, NULL, NULL));
    const char *in[2] = {"M", ""}, *out[1] = {"its"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Loop", 11, "loop", 2, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_network_mark_output(net, "its"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    ASSERT_EQ(kiln_build(net, cfg, &e, NULL), KILN_EUNSUPPORTED);
    ASSERT_CONTAINS(kiln_errmsg(), "trip count M");
    ASSERT(e == NULL);
    kiln_network_free(net);
    kiln_build_config_free(cfg);
}

/* ---------------------------------------------------------------- Scan */

enum { SN = 3, ST = 5 };

/* s = s + a_t + b_t with a [ST, SN] scanned along axis 0 forward and b
 * [SN, ST] along axis 1 in reverse; outputs: every s stacked along axis 0
 * (forward) and along axis 1 (prepended: reverse). */
TEST_IMPL(scan_cumsum_axes) {
    kiln_network *body = kiln_network_create();
    int64_t d[1] = {SN};
    ASSERT_OK(kiln_network_add_input(body, "s", KILN_DTYPE_F32, 1, d, NULL));
    ASSERT_OK(kiln_network_add_input(body, "at", KILN_DTYPE_F32, 1, d, NULL));
    ASSERT_OK(kiln_network_add_input(body, "bt", KILN_DTYPE_F32, 1, d, NULL));
    add(body, "ai.onnx::Add", 7, "s", "at", "t");
    add(body, "ai.onnx::Add", 7, "t", "bt", "so");
    add(body, "ai.onnx::Identity", 1, "so", NULL, "y1");
    add(body, "ai.onnx::Identity", 1, "so", NULL, "y2");
    ASSERT_OK(kiln_network_mark_output(body, "so"));
    ASSERT_OK(kiln_network_mark_output(body, "y1"));
    ASSERT_OK(kiln_network_mark_output(body, "y2"));
    kiln_network *net = kiln_network_create();
    int64_t da[2] = {ST, SN}, db[2] = {SN, ST};
    ASSERT_OK(kiln_network_add_input(net, "s0", KILN_DTYPE_F32, 1, d, NULL));
    ASSERT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_F32, 2, da, NULL));
    ASSERT_OK(kiln_network_add_input(net, "b", KILN_DTYPE_F32, 2, db, NULL));
    const char *in[3] = {"s0", "a", "b"}, *out[3] = {"sf", "y1", "y2"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Scan", 16, "scan", 3, in, 3, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_layer_set_int(l, "num_scan_inputs", 2));
    int64_t in_axes[2] = {0, -1}, in_dirs[2] = {0, 1}, out_axes[2] = {0, 1}, out_dirs[2] = {0, 1};
    ASSERT_OK(kiln_layer_set_ints(l, "scan_input_axes", in_axes, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "scan_input_directions", in_dirs, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "scan_output_axes", out_axes, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "scan_output_directions", out_dirs, 2));
    for (int i = 0; i < 3; i++) ASSERT_OK(kiln_network_mark_output(net, out[i]));
    kiln_engine *e = build(net);
    kiln_network_free(net);

    float s0[SN], a[ST * SN], b[SN * ST], sf[SN], y1[ST * SN], y2[SN * ST];
    fill_rand(s0, SN, -1, 1);
    fill_rand(a, ST * SN, -1, 1);
    fill_rand(b, SN * ST, -1, 1);
    memset(sf, 0xff, sizeof sf);
    memset(y1, 0xff, sizeof y1);
    memset(y2, 0xff, sizeof y2);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 0, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "s0", s0, sizeof s0));
    ASSERT_OK(kiln_context_bind(ctx, "a", a, sizeof a));
    ASSERT_OK(kiln_context_bind(ctx, "b", b, sizeof b));
    ASSERT_OK(kiln_context_bind(ctx, "sf", sf, sizeof sf));
    ASSERT_OK(kiln_context_bind(ctx, "y1", y1, sizeof y1));
    ASSERT_OK(kiln_context_bind(ctx, "y2", y2, sizeof y2));
    ASSERT_OK(kiln_context_run(ctx));
    float s[SN];
    memcpy(s, s0, sizeof s);
    for (int t = 0; t < ST; t++) {
        int tb = ST - 1 - t;
        for (int k = 0; k < SN; k++) {
            s[k] += a[t * SN + k] + b[k * ST + tb];
            ASSERT_NEAR(y1[t * SN + k], s[k], 1e-5);
            ASSERT_NEAR(y2[k * ST + (ST - 1 - t)], s[k], 1e-5);
        }
    }
    for (int k = 0; k < SN; k++) ASSERT_NEAR(sf[k], s[k], 1e-5);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* Opset 8: a leading batch axis on states, scan inputs and scan outputs. */
TEST_IMPL(scan8_batch) {
    enum { B = 2 };
    kiln_network *body = kiln_network_create();
    int64_t d[1] = {SN};
    ASSERT_OK(kiln_network_add_input(body, "s", KILN_DTYPE_F32, 1, d, NULL));
    ASSERT_OK(kiln_network_add_input(body, "xt", KILN_DTYPE_F32, 1, d, NULL));
    add(body, "ai.onnx::Mul", 7, "s", "xt", "so");
    add(body, "ai.onnx::Identity", 1, "so", NULL, "y");
    ASSERT_OK(kiln_network_mark_output(body, "so"));
    ASSERT_OK(kiln_network_mark_output(body, "y"));
    kiln_network *net = kiln_network_create();
    int64_t ds[2] = {B, SN}, dx[3] = {B, ST, SN};
    ASSERT_OK(kiln_network_add_input(net, "s0", KILN_DTYPE_F32, 2, ds, NULL));
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, dx, NULL));
    const char *in[3] = {"", "s0", "x"}, *out[2] = {"sf", "y"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Scan", 8, "scan", 3, in, 2, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_layer_set_int(l, "num_scan_inputs", 1));
    int64_t dirs[1] = {1};
    ASSERT_OK(kiln_layer_set_ints(l, "directions", dirs, 1));
    ASSERT_OK(kiln_network_mark_output(net, "sf"));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float s0[B * SN], x[B * ST * SN], sf[B * SN], y[B * ST * SN];
    fill_rand(s0, B * SN, 0.5f, 1.5f);
    fill_rand(x, B * ST * SN, 0.5f, 1.5f);
    memset(sf, 0xff, sizeof sf);
    memset(y, 0xff, sizeof y);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 0, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "s0", s0, sizeof s0));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "sf", sf, sizeof sf));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    for (int bi = 0; bi < B; bi++) {
        float s[SN];
        memcpy(s, s0 + bi * SN, sizeof s);
        for (int t = 0; t < ST; t++) {
            int tx = ST - 1 - t; /* reverse input direction, outputs forward */
            for (int k = 0; k < SN; k++) {
                s[k] *= x[(bi * ST + tx) * SN + k];
                ASSERT_NEAR(y[(bi * ST + t) * SN + k], s[k], 1e-5);
            }
        }
        for (int k = 0; k < SN; k++) ASSERT_NEAR(sf[bi * SN + k], s[k], 1e-5);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* A Scan whose inputs are all constants is folded at build time (run
 * without an attached context); the engine then holds constants only. */
TEST_IMPL(scan_folded) {
    kiln_network *body = kiln_network_create();
    int64_t d[1] = {SN};
    ASSERT_OK(kiln_network_add_input(body, "s", KILN_DTYPE_F32, 1, d, NULL));
    ASSERT_OK(kiln_network_add_input(body, "xt", KILN_DTYPE_F32, 1, d, NULL));
    add(body, "ai.onnx::Add", 7, "s", "xt", "so");
    add(body, "ai.onnx::Identity", 1, "so", NULL, "y");
    ASSERT_OK(kiln_network_mark_output(body, "so"));
    ASSERT_OK(kiln_network_mark_output(body, "y"));
    kiln_network *net = kiln_network_create();
    int64_t dx[2] = {ST, SN};
    float s0[SN], x[ST * SN];
    fill_rand(s0, SN, -1, 1);
    fill_rand(x, ST * SN, -1, 1);
    ASSERT_OK(kiln_network_add_constant(net, "s0", KILN_DTYPE_F32, 1, d, s0));
    ASSERT_OK(kiln_network_add_constant(net, "x", KILN_DTYPE_F32, 2, dx, x));
    ASSERT_OK(kiln_network_add_input(net, "z", KILN_DTYPE_F32, 1, d, NULL));
    const char *in[2] = {"s0", "x"}, *out[2] = {"sf", "y"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Scan", 9, "scan", 2, in, 2, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_layer_set_int(l, "num_scan_inputs", 1));
    add(net, "ai.onnx::Add", 7, "sf", "z", "r");
    ASSERT_OK(kiln_network_mark_output(net, "r"));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    kiln_build_stats st;
    ASSERT_OK(kiln_build(net, cfg, &e, &st));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    ASSERT(st.folded >= 1);
    float z[SN], r[SN], y[ST * SN];
    fill_rand(z, SN, -1, 1);
    memset(r, 0xff, sizeof r);
    memset(y, 0xff, sizeof y);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 0, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "z", z, sizeof z));
    ASSERT_OK(kiln_context_bind(ctx, "r", r, sizeof r));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    float s[SN];
    memcpy(s, s0, sizeof s);
    for (int t = 0; t < ST; t++)
        for (int k = 0; k < SN; k++) {
            s[k] += x[t * SN + k];
            ASSERT_NEAR(y[t * SN + k], s[k], 1e-5);
        }
    for (int k = 0; k < SN; k++) ASSERT_NEAR(r[k], s[k] + z[k], 1e-5);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* A Loop whose body holds a Scan: sub-engines nest (also through save/load). */
TEST_IMPL(loop_nested_scan) {
    enum { OUTER = 3 };
    float x[ST * SN];
    fill_rand(x, ST * SN, -1, 1);
    int64_t d[1] = {SN}, dx[2] = {ST, SN};
    kiln_network *sb = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(sb, "s", KILN_DTYPE_F32, 1, d, NULL));
    ASSERT_OK(kiln_network_add_input(sb, "xt", KILN_DTYPE_F32, 1, d, NULL));
    add(sb, "ai.onnx::Add", 7, "s", "xt", "so");
    ASSERT_OK(kiln_network_mark_output(sb, "so"));
    kiln_network *body = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(body, "i", KILN_DTYPE_I64, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "c", KILN_DTYPE_BOOL, 0, NULL, NULL));
    ASSERT_OK(kiln_network_add_input(body, "v", KILN_DTYPE_F32, 1, d, NULL));
    ASSERT_OK(kiln_network_add_constant(body, "x", KILN_DTYPE_F32, 2, dx, x));
    const char *sin[2] = {"v", "x"}, *sout[1] = {"vs"};
    kiln_layer *sl = kiln_network_add_layer(body, "ai.onnx::Scan", 11, "inner", 2, sin, 1, sout);
    ASSERT(sl);
    ASSERT_OK(kiln_layer_set_graph(sl, "body", sb));
    ASSERT_OK(kiln_layer_set_int(sl, "num_scan_inputs", 1));
    add(body, "ai.onnx::Identity", 1, "c", NULL, "co");
    ASSERT_OK(kiln_network_mark_output(body, "co"));
    ASSERT_OK(kiln_network_mark_output(body, "vs"));
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "v0", KILN_DTYPE_F32, 1, d, NULL));
    int64_t m = OUTER;
    ASSERT_OK(kiln_network_add_constant(net, "M", KILN_DTYPE_I64, 0, NULL, &m));
    const char *in[3] = {"M", "", "v0"}, *out[1] = {"vf"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Loop", 16, "outer", 3, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_graph(l, "body", body));
    ASSERT_OK(kiln_network_mark_output(net, "vf"));
    kiln_engine *e0 = build(net);
    kiln_network_free(net);
    void *buf = NULL;
    size_t n = 0;
    ASSERT_OK(kiln_engine_serialize(e0, &buf, &n));
    kiln_engine_free(e0);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, n, &e));
    kiln_free(buf);
    float v0[SN], vf[SN];
    fill_rand(v0, SN, -1, 1);
    memset(vf, 0xff, sizeof vf);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 0, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "v0", v0, sizeof v0));
    ASSERT_OK(kiln_context_bind(ctx, "vf", vf, sizeof vf));
    ASSERT_OK(kiln_context_run(ctx));
    for (int k = 0; k < SN; k++) {
        float v = v0[k];
        for (int it = 0; it < OUTER; it++)
            for (int t = 0; t < ST; t++) v += x[t * SN + k];
        ASSERT_NEAR(vf[k], v, 1e-5);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* ---------------------------------------------------------------- kiln_network_append
 * What Loop unrolling is made of: src (y = a * b + a) appended twice into dst,
 * the second copy reading the first copy's result, against the formula. */

TEST_IMPL(network_append) {
    int64_t d[2] = {R, C};
    kiln_network *src = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(src, "a", KILN_DTYPE_F32, 2, d, NULL));
    ASSERT_OK(kiln_network_add_input(src, "b", KILN_DTYPE_F32, 2, d, NULL));
    add(src, "ai.onnx::Mul", 14, "a", "b", "t");
    add(src, "ai.onnx::Add", 14, "t", "a", "y");
    ASSERT_OK(kiln_network_mark_output(src, "y"));

    kiln_network *dst = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(dst, "x", KILN_DTYPE_F32, 2, d, NULL));
    ASSERT_OK(kiln_network_add_input(dst, "w", KILN_DTYPE_F32, 2, d, NULL));
    const char *in1[2] = {"x", "w"}, *out1[1] = {"h"};
    const char *in2[2] = {"h", "w"}, *out2[1] = {"z"};
    ASSERT_OK(kiln_network_append(dst, src, "c0/", in1, out1));
    ASSERT_OK(kiln_network_append(dst, src, "c1/", in2, out2));
    ASSERT_EQ(kiln_network_num_layers(dst), 4);
    ASSERT_OK(kiln_network_mark_output(dst, "z"));

    /* misuse: an error code with a message, dst left usable */
    ASSERT_EQ(kiln_network_append(NULL, src, "p/", in1, out1), KILN_EINVAL);
    ASSERT_EQ(kiln_network_append(dst, src, "p/", NULL, out1), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_network_append");
    ASSERT_EQ(kiln_network_append(dst, dst, "p/", in1, out1), KILN_EINVAL);
    const char *none[1] = {NULL};
    ASSERT_EQ(kiln_network_append(dst, src, "p/", in1, none), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "out_names[0]");
    ASSERT_EQ(kiln_network_num_layers(dst), 4);
    /* inlining is the builder's: outside a build the network is freed, not leaked */
    ASSERT_EQ(kiln_shape_inline_owned(NULL, kiln_network_create()), KILN_EUNSUPPORTED);

    kiln_engine *e = build(dst);
    float x[R * C], w[R * C], z[R * C];
    fill_rand(x, R * C, -2, 2);
    fill_rand(w, R * C, -2, 2);
    memset(z, 0xff, sizeof z);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "w", w, sizeof w));
    ASSERT_OK(kiln_context_bind(ctx, "z", z, sizeof z));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < R * C; i++) {
        float h = x[i] * w[i] + x[i];
        ASSERT_NEAR(z[i], h * w[i] + h, 1e-5);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_network_free(dst);
    kiln_network_free(src);
}

TEST_LIST(TEST_ENTRY(loop_scan_outputs), TEST_ENTRY(loop_engine_roundtrip), TEST_ENTRY(loop_early_exit),
          TEST_ENTRY(loop_errors), TEST_ENTRY(loop_unrolled_growing), TEST_ENTRY(scan_cumsum_axes), TEST_ENTRY(scan8_batch), TEST_ENTRY(scan_folded),
          TEST_ENTRY(loop_nested_scan), TEST_ENTRY(network_append))
