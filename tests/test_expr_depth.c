/* test_expr_depth.c — symbolic dims through a deep chain of the shape
 * arithmetic torch's ONNX exporter writes for every attention layer:
 *
 *   s = Shape(x); b = Gather(s, 0); n = Gather(s, 1)        (batch, seq)
 *   y = Reshape(x, Concat(Unsqueeze(b), [-1], [H], [D]))    [batch, seq, H, D]
 *   z = Reshape(y, Concat(Unsqueeze(b), Unsqueeze(n), [H*D]))
 *   x' = Add(z, 1)
 *
 * with batch and seq dynamic.  Each layer's dims are built from the
 * previous layer's, so an expression walk that treats the DAG as a tree
 * (printing, evaluation) costs exponential time in the depth: 12 layers of
 * this hung `kiln inspect`.  The test checks that the engine's expression
 * program grows at most linearly with the depth (node counts, not time),
 * that inspect prints bounded text, and that a run gives the right shape
 * and values (x + depth, computed here).  Timings are printed, never
 * asserted. */
#include "kiln_int.h"
#include "test.h"

enum { H = 2, D = 4, HD = H * D, SEQ_MAX = 6, BATCH_MAX = 5 };

static void add(kiln_network *net, const char *op, int nin, const char *const *in, const char *out) {
    char full[64];
    snprintf(full, sizeof full, "ai.onnx::%s", op);
    ASSERT(kiln_network_add_layer(net, full, 13, NULL, nin, in, 1, &out));
}

static kiln_network *chain(int layers) {
    kiln_network *net = kiln_network_create();
    int64_t xd[3] = {-1, -1, HD}, one1[1] = {1};
    const char *xn[3] = {"batch", "seq", NULL};
    ASSERT_OK(kiln_network_add_input(net, "x0", KILN_DTYPE_F32, 3, xd, xn));
    static const int64_t i0 = 0, i1 = 1, axes0[1] = {0}, m1[1] = {-1}, h[1] = {H}, d[1] = {D}, hd[1] = {HD};
    static const float onef = 1.0f;
    ASSERT_OK(kiln_network_add_constant(net, "i0", KILN_DTYPE_I64, 0, one1, &i0));
    ASSERT_OK(kiln_network_add_constant(net, "i1", KILN_DTYPE_I64, 0, one1, &i1));
    ASSERT_OK(kiln_network_add_constant(net, "axes0", KILN_DTYPE_I64, 1, one1, axes0));
    ASSERT_OK(kiln_network_add_constant(net, "m1", KILN_DTYPE_I64, 1, one1, m1));
    ASSERT_OK(kiln_network_add_constant(net, "h", KILN_DTYPE_I64, 1, one1, h));
    ASSERT_OK(kiln_network_add_constant(net, "d", KILN_DTYPE_I64, 1, one1, d));
    ASSERT_OK(kiln_network_add_constant(net, "hd", KILN_DTYPE_I64, 1, one1, hd));
    ASSERT_OK(kiln_network_add_constant(net, "one", KILN_DTYPE_F32, 0, one1, &onef));
    char t[16][32];
    for (int l = 0; l < layers; l++) {
        static const char *const names[] = {"s", "b", "n", "bu", "nu", "sh", "y", "s2", "b2", "bu2", "sh2", "z"};
        enum { S, B, N, BU, NU, SH, Y, S2, B2, BU2, SH2, Z, NT };
        for (int k = 0; k < NT; k++) snprintf(t[k], sizeof t[k], "%s_%d", names[k], l);
        char x[32], xn1[32];
        snprintf(x, sizeof x, "x%d", l);
        snprintf(xn1, sizeof xn1, "x%d", l + 1);
        add(net, "Shape", 1, (const char *[]){x}, t[S]);
        add(net, "Gather", 2, (const char *[]){t[S], "i0"}, t[B]);
        add(net, "Gather", 2, (const char *[]){t[S], "i1"}, t[N]);
        add(net, "Unsqueeze", 2, (const char *[]){t[B], "axes0"}, t[BU]);
        add(net, "Unsqueeze", 2, (const char *[]){t[N], "axes0"}, t[NU]);
        kiln_layer *c1 = kiln_network_add_layer(net, "ai.onnx::Concat", 13, NULL, 4,
                                                (const char *[]){t[BU], "m1", "h", "d"}, 1,
                                                (const char *[]){t[SH]});
        ASSERT(c1);
        ASSERT_OK(kiln_layer_set_int(c1, "axis", 0));
        add(net, "Reshape", 2, (const char *[]){x, t[SH]}, t[Y]);
        /* the second view reads the batch back from the reshaped tensor */
        add(net, "Shape", 1, (const char *[]){t[Y]}, t[S2]);
        add(net, "Gather", 2, (const char *[]){t[S2], "i0"}, t[B2]);
        add(net, "Unsqueeze", 2, (const char *[]){t[B2], "axes0"}, t[BU2]);
        kiln_layer *c2 = kiln_network_add_layer(net, "ai.onnx::Concat", 13, NULL, 3,
                                                (const char *[]){t[BU2], t[NU], "hd"}, 1,
                                                (const char *[]){t[SH2]});
        ASSERT(c2);
        ASSERT_OK(kiln_layer_set_int(c2, "axis", 0));
        add(net, "Reshape", 2, (const char *[]){t[Y], t[SH2]}, t[Z]);
        add(net, "Add", 2, (const char *[]){t[Z], "one"}, xn1);
    }
    char last[32];
    snprintf(last, sizeof last, "x%d", layers);
    ASSERT_OK(kiln_network_mark_output(net, last));
    return net;
}

typedef struct figures {
    int32_t nodes;      /* engine expression nodes */
    size_t inspect_len; /* bytes kiln_engine_inspect wrote */
    double build_ms, inspect_ms;
} figures;

/* lo: the profile's min for batch and seq.  At 1 the builder knows the
 * dims are >= 1 and folds the chain to [batch, seq, 8]; at 0 a dim may be
 * 0 (Reshape then copies it) and the selects stay: the expression program
 * is then a DAG whose tree form doubles per layer. */
static void build_and_check(int layers, int64_t lo, figures *f) {
    kiln_network *net = chain(layers);
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    int64_t mn[3] = {lo, lo, HD}, opt[3] = {2, 3, HD}, mx[3] = {BATCH_MAX, SEQ_MAX, HD};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x0", 3, mn, opt, mx));
    kiln_engine *e = NULL;
    double t0 = kiln__now_ms();
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    f->build_ms = kiln__now_ms() - t0;
    f->nodes = e->nnodes;

    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    ASSERT(mf);
    t0 = kiln__now_ms();
    ASSERT_OK(kiln_engine_inspect(e, mf));
    fclose(mf);
    f->inspect_ms = kiln__now_ms() - t0;
    f->inspect_len = len;
    /* the output keeps its symbolic dims by name */
    char want[64];
    snprintf(want, sizeof want, "'x%d' f32 LINEAR [batch, %s", layers, lo >= 1 ? "seq, 8]" : "");
    ASSERT_CONTAINS(text, want);
    if (lo == 0) ASSERT_CONTAINS(text, "shape expressions (");
    /* bounded lines: big shared subexpressions are named, not expanded
     * (the tree form of dim 1 at 12 layers is over 10^5 characters) */
    size_t longest = 0;
    for (const char *l = text; *l;) {
        const char *nl = strchr(l, '\n');
        size_t ll = nl ? (size_t)(nl - l) : strlen(l);
        if (ll > longest) longest = ll;
        l += ll + (nl != NULL);
    }
    ASSERT(longest <= 400);
    if (getenv("KILN_TEST_SHOW_INSPECT")) fputs(text, stderr); /* for a reader */
    free(text);

    /* a run at a shape other than opt: x + layers, shape [b, s, HD] */
    uint64_t seed = 0x5eed0000u + (uint64_t)layers;
    int64_t b = 3, s = 5, shp[3] = {b, s, HD}, n = b * s * HD;
    float *x = malloc((size_t)n * sizeof *x);
    ASSERT(x);
    for (int64_t i = 0; i < n; i++) x[i] = test_randf(&seed, -2, 2);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x0", 3, shp));
    ASSERT_OK(kiln_context_bind(ctx, "x0", x, (size_t)n * sizeof *x));
    char out[32];
    snprintf(out, sizeof out, "x%d", layers);
    size_t cap = 0;
    ASSERT_OK(kiln_context_output_capacity(ctx, out, &cap));
    ASSERT(cap >= (size_t)n * sizeof(float));
    float *y = malloc(cap);
    ASSERT(y);
    memset(y, 0xff, cap); /* poison: NaN */
    ASSERT_OK(kiln_context_bind(ctx, out, y, cap));
    ASSERT_OK(kiln_context_run(ctx));
    int ndim = 0;
    int64_t yd[KILN_MAX_DIMS];
    ASSERT_OK(kiln_context_shape(ctx, out, &ndim, yd));
    ASSERT_EQ(ndim, 3);
    ASSERT_EQ(yd[0], b);
    ASSERT_EQ(yd[1], s);
    ASSERT_EQ(yd[2], HD);
    for (int64_t i = 0; i < n; i++) {
        /* one float add per layer, in order: the same rounding here */
        float r = x[i];
        for (int l = 0; l < layers; l++) r += 1.0f;
        ASSERT_EQ(y[i], r);
    }
    free(x);
    free(y);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
}

/* Node counts at 6, 12 and 24 layers: the program may grow by a fixed
 * number of nodes per layer, not more (a tree copy per layer would at
 * least double it). */
static void depth_linear(int64_t lo) {
    figures f6, f12, f24;
    build_and_check(6, lo, &f6);
    build_and_check(12, lo, &f12);
    build_and_check(24, lo, &f24);
    fprintf(stderr, "  expression nodes: %d / %d / %d at 6 / 12 / 24 layers; inspect %zu / %zu / %zu bytes\n",
            (int)f6.nodes, (int)f12.nodes, (int)f24.nodes, f6.inspect_len, f12.inspect_len, f24.inspect_len);
    int32_t per12 = f12.nodes - f6.nodes, per24 = f24.nodes - f12.nodes;
    ASSERT(per12 >= 0 && per12 <= 6 * 8); /* at most 8 nodes per layer */
    ASSERT(per24 <= 2 * per12);           /* linear: 12 more layers cost twice 6 more */
    /* inspect prints a few lines per layer: linear too */
    ASSERT(f24.inspect_len <= 2 * f12.inspect_len + 4096);
    if (lo >= 1) ASSERT_EQ(per24, 0); /* the dims fold to batch, seq: nothing per layer */
}

TEST_IMPL(depth_linear_min1) { depth_linear(1); }
TEST_IMPL(depth_linear_min0) { depth_linear(0); }

/* Build and inspect times at 4, 6, 12 layers (printed for the record). */
TEST_IMPL(depth_figures) {
    static const int depths[] = {4, 6, 12};
    for (int64_t lo = 0; lo <= 1; lo++)
        for (int i = 0; i < 3; i++) {
            figures f;
            build_and_check(depths[i], lo, &f);
            fprintf(stderr,
                    "  profile min %d, %2d layers: build %.1f ms, inspect %.1f ms, %d expression nodes, "
                    "inspect %zu bytes\n",
                    (int)lo, depths[i], f.build_ms, f.inspect_ms, (int)f.nodes, f.inspect_len);
        }
}

TEST_LIST(TEST_ENTRY(depth_figures), TEST_ENTRY(depth_linear_min1), TEST_ENTRY(depth_linear_min0))
