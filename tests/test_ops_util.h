/*
 * test_ops_util.h — pieces the engine tests share: the identity shape
 * function their test ops use, a one-layer engine over the sample plugin
 * library (sample::elemwise_add on two f32[6] inputs), fresh random
 * inputs, a tolerance check against a double reference, a build helper,
 * and the op tests' one-layer network harness (test_net_try over tio
 * descriptions of inputs and outputs).
 */
#ifndef KILN_TEST_OPS_UTIL_H
#define KILN_TEST_OPS_UTIL_H

#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "test.h"

/* Log messages collected one a line (kiln_log_set(level, test_log_fn, &buf)). */
typedef struct test_logbuf {
    char text[1 << 16];
    size_t n;
} test_logbuf;
static inline void test_log_fn(void *ud, kiln_log_level level, const char *msg) {
    (void)level;
    test_logbuf *b = ud;
    size_t len = strlen(msg);
    if (b->n + len + 2 < sizeof b->text) {
        memcpy(b->text + b->n, msg, len);
        b->n += len;
        b->text[b->n++] = '\n';
        b->text[b->n] = 0;
    }
}

/* out[0] = in[0]: same dtype and dims, no known contents. */
static inline int same_shape(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}

/* c = a + b through sample::elemwise_add (loads KILN_SAMPLES_LIB), built
 * without timing plus `flags`.  The caller frees the engine. */
static inline kiln_engine *build_sample_add_engine(unsigned flags) {
    ASSERT_OK(kiln_registry_load_library(KILN_SAMPLES_LIB));
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {6};
    ASSERT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_F32, 1, dims, NULL));
    ASSERT_OK(kiln_network_add_input(net, "b", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in[] = {"a", "b"}, *out[] = {"c"};
    ASSERT(kiln_network_add_layer(net, "sample::elemwise_add", 1, "add1", 2, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "c"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING | flags);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

/* e serialized and loaded back from memory (a new engine: free it). */
static inline kiln_engine *test_roundtrip(const kiln_engine *e) {
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    kiln_free(buf);
    return e2;
}

/* ---- random inputs, buffers, comparison --------------------------------- */

/* malloc(n) that fails the test instead of returning NULL (n = 0: 1 byte). */
static inline void *test_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    ASSERT(p);
    return p;
}

/* p[0..n) uniform in [lo, hi) from the xorshift stream *seed. */
static inline void test_fill_f32(uint64_t *seed, float *p, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) p[i] = test_randf(seed, lo, hi);
}

/* n fresh floats uniform in [lo, hi) (malloc'd, the caller frees). */
static inline float *test_rnd_f32(uint64_t *seed, int64_t n, float lo, float hi) {
    float *p = test_xmalloc((size_t)(n > 0 ? n : 0) * sizeof(float));
    test_fill_f32(seed, p, n, lo, hi);
    return p;
}

/* An integer uniform in [lo, hi] (both ends included). */
static inline int64_t test_rnd_int(uint64_t *seed, int64_t lo, int64_t hi) {
    return lo + (int64_t)(test_rand_u64(seed) % (uint64_t)(hi - lo + 1));
}

/* Every y[i] within atol + 1e-4 * |ref[i]| of ref[i], else the test fails
 * naming `what`, the element and both values. */
static inline void test_check_close(const char *what, const float *y, const double *ref, int64_t n,
                                    double atol) {
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)y[i] - ref[i]);
        if (!(d <= atol + 1e-4 * fabs(ref[i])))
            TEST__FAIL("%s: element %lld: got %.7g, expected %.7g", what, (long long)i,
                       (double)y[i], ref[i]);
    }
}

/* A dense f32 tensor (row-major strides) over caller-owned data, for
 * calling an op's impl directly. */
static inline kiln_tensor test_tensor_f32(void *data, int nd, const int64_t *dims) {
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = KILN_DTYPE_F32;
    t.ndim = nd;
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        t.dims[i] = dims[i];
        t.strides[i] = s;
        s *= dims[i];
    }
    return t;
}

/* ---- a naive convolution reference ---------------------------------------- */

/* Convolution geometry over 3 spatial dims (1-D and 2-D convolutions have
 * leading spatial dims of 1): batch N, C input channels, M output channels
 * in G groups; per spatial dim the input id, kernel k, stride s, begin pad
 * p, dilation d and output o. */
typedef struct test_conv_geo {
    int64_t N, C, M, G, id[3], k[3], s[3], p[3], d[3], o[3];
} test_conv_geo;

/* The geometry of a convolution with nsp spatial dims, given per dim (in,
 * k, s, d, begin pad pb, output o), as the last nsp of 3. */
static inline test_conv_geo test_conv_geo_make(int64_t N, int64_t C, int64_t M, int64_t G, int nsp,
                                               const int64_t *in, const int64_t *k, const int64_t *s,
                                               const int64_t *d, const int64_t *pb, const int64_t *o) {
    test_conv_geo g = {N, C, M, G, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}};
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        g.id[j] = in[i];
        g.k[j] = k[i];
        g.s[j] = s[i];
        g.d[j] = d[i];
        g.p[j] = pb[i];
        g.o[j] = o[i];
    }
    return g;
}

/* Naive grouped convolution accumulated in double: X [N, C, id...],
 * W [M, C/G, k...], bias b [M] (NULL: none) -> y [N, M, o...]. */
static inline void test_conv_ref(const test_conv_geo *g, const float *x, const float *w, const float *b,
                                 double *y) {
    int64_t Cg = g->C / g->G, Mg = g->M / g->G;
    for (int64_t n = 0; n < g->N; n++)
    for (int64_t m = 0; m < g->M; m++)
    for (int64_t oz = 0; oz < g->o[0]; oz++)
    for (int64_t oy = 0; oy < g->o[1]; oy++)
    for (int64_t ox = 0; ox < g->o[2]; ox++) {
        double acc = b ? b[m] : 0;
        int64_t gi = m / Mg;
        for (int64_t ci = 0; ci < Cg; ci++)
        for (int64_t kz = 0; kz < g->k[0]; kz++)
        for (int64_t ky = 0; ky < g->k[1]; ky++)
        for (int64_t kx = 0; kx < g->k[2]; kx++) {
            int64_t iz = oz * g->s[0] - g->p[0] + kz * g->d[0];
            int64_t iy = oy * g->s[1] - g->p[1] + ky * g->d[1];
            int64_t ix = ox * g->s[2] - g->p[2] + kx * g->d[2];
            if (iz < 0 || iz >= g->id[0] || iy < 0 || iy >= g->id[1] || ix < 0 || ix >= g->id[2]) continue;
            acc += (double)x[(((n * g->C + gi * Cg + ci) * g->id[0] + iz) * g->id[1] + iy) * g->id[2] + ix] *
                   w[(((m * Cg + ci) * g->k[0] + kz) * g->k[1] + ky) * g->k[2] + kx];
        }
        y[(((n * g->M + m) * g->o[0] + oz) * g->o[1] + oy) * g->o[2] + ox] = acc;
    }
}

/* ---- building ------------------------------------------------------------- */

/* A build config: build `flags` (KILN_BUILD_*), `threads` threads (0: the
 * builder's default, all cores), one timing repetition. */
static inline kiln_build_config *test_build_config(unsigned flags, int threads) {
    kiln_build_config *cfg = kiln_build_config_create();
    ASSERT(cfg);
    kiln_build_config_set_flags(cfg, flags);
    kiln_build_config_set_threads(cfg, threads);
    kiln_build_config_set_timing_reps(cfg, 1);
    return cfg;
}

/* kiln_build of `net` with test_build_config(flags, threads); returns
 * kiln_build's status (message in kiln_errmsg()), the engine in *e.  `st`
 * may be NULL.  net is kept. */
static inline int test_build_net(const kiln_network *net, unsigned flags, int threads, kiln_engine **e,
                                 kiln_build_stats *st) {
    kiln_build_config *cfg = test_build_config(flags, threads);
    *e = NULL;
    int rc = kiln_build(net, cfg, e, st);
    kiln_build_config_free(cfg);
    return rc;
}

/* test_build_net that must succeed; returns the engine. */
static inline kiln_engine *test_build_ok(const kiln_network *net, unsigned flags, int threads,
                                         kiln_build_stats *st) {
    kiln_engine *e;
    int rc = test_build_net(net, flags, threads, &e, st);
    if (rc) TEST__FAIL("build: %s", kiln_errmsg());
    return e;
}

/* Build `net` with test_build_config(flags, threads) and free it; the
 * build must succeed.  `pname`, when not NULL, gets the optimization
 * profile mn/op/mx (rank nd). */
static inline kiln_engine *test_build_profiled(kiln_network *net, unsigned flags, int threads,
                                               const char *pname, int nd, const int64_t *mn,
                                               const int64_t *op, const int64_t *mx) {
    kiln_build_config *cfg = test_build_config(flags, threads);
    if (pname) ASSERT_OK(kiln_build_config_set_profile(cfg, pname, nd, mn, op, mx));
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, NULL);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    if (rc) TEST__FAIL("build: %s", kiln_errmsg());
    return e;
}

/* ---- one-layer networks (the op tests' harness) ---------------------------- */

/* One tensor of a one-layer test network. */
typedef struct tio {
    const char *name; /* inputs: "" = an absent optional input */
    kiln_dtype t;
    int nd;
    int64_t dims[KILN_MAX_DIMS]; /* outputs: the expected shape */
    void *data;                  /* caller-owned; outputs are poisoned before a run */
    int is_const; /* a network constant (build-time value) instead of an input */
    size_t cap;   /* outputs: buffer bytes when larger than the expected shape (DDS) */
} tio;

/* Sets the layer's attributes; ud is the harness caller's. */
typedef void (*attr_fn)(kiln_layer *l, const void *ud);

/* How test_net_try builds and runs. */
typedef struct test_net_opts {
    unsigned flags;  /* build flags (KILN_BUILD_NO_TIMING: no tactic timing) */
    int threads;     /* builder and context threads */
    int bytes_twice; /* 1-byte outputs: see test_net_try */
} test_net_opts;

/* Elements of a tio's expected shape. */
static inline int64_t tio_numel(const tio *t) {
    int64_t n = 1;
    for (int i = 0; i < t->nd; i++) n *= t->dims[i];
    return n;
}

/* Build and run a network of one layer `op` (version ver, named "L") over
 * in[] (inputs or constants) giving out[]; returns 0 or the first error
 * (build or run) with kiln_errmsg() set.  Runs in debug mode (every output
 * element must be written, canaries intact) with outputs poisoned (0xA5);
 * after a successful run the output shapes must equal out[i].dims.
 * Debug mode calls an element still holding 0xA5 unwritten: a false alarm
 * for 1-byte outputs, where 0xA5 is a value like any other.  With
 * o->bytes_twice, a network with a 1-byte output runs twice instead,
 * without debug mode, poisoned with 0xA5 then 0x5A, and both runs must
 * agree. */
static inline int test_net_try(const test_net_opts *o, const char *op, int ver, int nin, const tio *in,
                               int nout, tio *out, attr_fn attrs, const void *ud) {
    enum { MAXIO = 16 };
    ASSERT(nin <= MAXIO && nout <= MAXIO);
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    const char *inames[MAXIO], *onames[MAXIO];
    for (int i = 0; i < nin; i++) {
        inames[i] = in[i].name;
        if (!in[i].name[0]) continue;
        if (in[i].is_const)
            ASSERT_OK(kiln_network_add_constant(net, in[i].name, in[i].t, in[i].nd, in[i].dims,
                                                in[i].data));
        else
            ASSERT_OK(kiln_network_add_input(net, in[i].name, in[i].t, in[i].nd, in[i].dims, NULL));
    }
    for (int i = 0; i < nout; i++) onames[i] = out[i].name;
    kiln_layer *l = kiln_network_add_layer(net, op, ver, "L", nin, inames, nout, onames);
    if (!l) TEST__FAIL("add_layer %s: %s", op, kiln_errmsg());
    if (attrs) attrs(l, ud);
    for (int i = 0; i < nout; i++) ASSERT_OK(kiln_network_mark_output(net, out[i].name));
    kiln_engine *e;
    int rc = test_build_net(net, o->flags, o->threads, &e, NULL);
    kiln_network_free(net);
    if (rc) return rc;
    int twice = 0;
    for (int i = 0; i < nout && o->bytes_twice; i++) twice |= kiln_dtype_size(out[i].t) == 1;
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, o->threads, &ctx));
    kiln_context_set_debug(ctx, !twice);
    for (int i = 0; i < nin; i++)
        if (in[i].name[0] && !in[i].is_const)
            ASSERT_OK(kiln_context_bind(ctx, in[i].name, in[i].data,
                                        (size_t)tio_numel(&in[i]) * kiln_dtype_size(in[i].t)));
    void *first[MAXIO] = {NULL};
    for (int run = 0; run < (twice ? 2 : 1) && !rc; run++) {
        for (int i = 0; i < nout; i++) {
            size_t bytes = (size_t)tio_numel(&out[i]) * kiln_dtype_size(out[i].t);
            if (out[i].cap > bytes) bytes = out[i].cap;
            memset(out[i].data, run ? 0x5A : 0xA5, bytes);
            ASSERT_OK(kiln_context_bind(ctx, out[i].name, out[i].data, bytes));
        }
        rc = kiln_context_run(ctx);
        for (int i = 0; i < nout && !rc && twice; i++) {
            size_t bytes = (size_t)tio_numel(&out[i]) * kiln_dtype_size(out[i].t);
            if (!run) {
                first[i] = test_xmalloc(bytes);
                memcpy(first[i], out[i].data, bytes);
            } else if (memcmp(first[i], out[i].data, bytes)) {
                TEST__FAIL("%s: output '%s' differs between two runs (elements not written)", op,
                           out[i].name);
            }
        }
    }
    for (int i = 0; i < nout; i++) free(first[i]);
    for (int i = 0; i < nout && !rc; i++) {
        int nd;
        int64_t d[KILN_MAX_DIMS];
        ASSERT_OK(kiln_context_shape(ctx, out[i].name, &nd, d));
        ASSERT_EQ(nd, out[i].nd);
        for (int k = 0; k < nd; k++) ASSERT_EQ(d[k], out[i].dims[k]);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
    return rc;
}

/* Run engine e once on a new context (threads, debug mode on or off) with
 * input "X" and output "Y", the output poisoned first; a failed run fails
 * the test, naming the tactic. */
static inline void test_run_xy(kiln_engine *e, int threads, int debug, float *x, int64_t nx, float *y,
                               int64_t ny, int tactic) {
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, threads, &ctx));
    kiln_context_set_debug(ctx, debug);
    ASSERT_OK(kiln_context_bind(ctx, "X", x, (size_t)nx * sizeof(float)));
    memset(y, 0xA5, (size_t)ny * sizeof(float));
    ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof(float)));
    if (kiln_context_run(ctx)) TEST__FAIL("run (tactic %d): %s", tactic, kiln_errmsg());
    kiln_context_free(ctx);
}

#ifdef KILN_INT_H
/* For tests that include kiln_int.h: force `tactic` on layer l of a built
 * engine and redo its packed inputs for it, as a load of an engine built
 * with that tactic would; returns what preparing the engine returned
 * (its validation may refuse the tactic). */
/* A LINEAR C x S plane set (one image, C a multiple of 16) into NCHW16C
 * (C/16 x S x 16), and back: the tests' own reformat. */
static inline void test_to16c(const float *x, int64_t C, int64_t S, float *y) {
    for (int64_t c = 0; c < C; c++)
        for (int64_t s = 0; s < S; s++) y[((c / 16) * S + s) * 16 + c % 16] = x[c * S + s];
}
static inline void test_from16c(const float *x, int64_t C, int64_t S, float *y) {
    for (int64_t c = 0; c < C; c++)
        for (int64_t s = 0; s < S; s++) y[c * S + s] = x[((c / 16) * S + s) * 16 + c % 16];
}

/* net built with blocked CPU candidates ranked first ($KILN_CPU_BLOCKED=force,
 * select.c), as test_build_ok; the 16c tests' way into NCHW16C kernels. */
static inline kiln_engine *test_build_forced16c(const kiln_network *net, unsigned flags, int threads,
                                                kiln_build_stats *st) {
    ASSERT_OK(setenv("KILN_CPU_BLOCKED", "force", 1));
    kiln_engine *e = test_build_ok(net, flags, threads, st);
    unsetenv("KILN_CPU_BLOCKED");
    return e;
}

/* Layers of e whose op is `name`, and the last of them (-1: none). */
static inline int test_count_op(const kiln_engine *e, const char *name) {
    int n = 0;
    for (int32_t l = 0; l < e->nlayers; l++) n += !strcmp(e->layers[l].op->name, name);
    return n;
}
static inline int test_last_op(const kiln_engine *e, const char *name) {
    int at = -1;
    for (int32_t l = 0; l < e->nlayers; l++)
        if (!strcmp(e->layers[l].op->name, name)) at = l;
    return at;
}

static inline int test_force_tactic(kiln_engine *e, int32_t l, int tactic) {
    kiln__elayer *L = &e->layers[l];
    L->tactic = tactic;
    for (int32_t k = 0; L->prepacked && k < L->nin; k++)
        if (!(L->prepacked_stored >> k & 1)) kiln__aligned_free(L->prepacked[k]);
    kiln__free(L->prepacked);
    kiln__free(L->prepacked_size);
    L->prepacked = NULL;
    L->prepacked_size = NULL;
    L->prepacked_stored = 0;
    L->prepacked_bytes = 0;
    L->prepack_done = 0;
    return kiln__engine_prepare(e);
}

#endif

#endif
