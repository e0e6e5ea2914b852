/*
 * test_engine_file.c — the .kiln file: save/load round trips (bit-exact
 * results, against a naive reference), serialize/load_memory, mmapped
 * aligned weights, atomic save, inspect, missing plugins.
 */
#include "kiln_int.h"
#include "test.h"
#include "test_engine_util.h"
#include "test_ops_util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>


/* ------------------------------------------------------------ test ops */


/* y = x * w + bias   (x [N, K] f32, w [K] f32, bias float attribute) */
static int scale_impl(const kiln_call *c) {
    const float *x = c->in[0].data, *w = c->in[1].data;
    float *y = c->out[0].data;
    float bias = (float)kiln_attrs_float(c->attrs, "bias");
    int64_t n = c->in[0].dims[0], k = c->in[0].dims[1];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) y[i * k + j] = x[i * k + j] * w[j] + bias;
    return 0;
}
static const kiln_attr_def scale_attrs[] = {{"bias", KILN_ATTR_FLOAT, 0, NULL, 1, NULL},
                                            {NULL, 0, 0, NULL, 0, NULL}};
static const kiln_quick_op scale_op = {.ns = "test", .name = "scale", .version = 1,
                                       .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
                                       .attrs = scale_attrs, .shape = same_shape,
                                       .impl = scale_impl};
KILN_OP(scale_op)

/* y = tanh-free squash: x / (1 + |x|) */
static int squash_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++)
        y[i] = x[i] / (1.0f + (x[i] < 0 ? -x[i] : x[i]));
    return 0;
}
static const kiln_quick_op squash_op = {.ns = "test", .name = "squash", .version = 1,
                                        .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
                                        .shape = same_shape, .impl = squash_impl};
KILN_OP(squash_op)

#define K 16
static float g_w1[K], g_w2[K];

static const char *g_dim0_name; /* build_net: the name of x's dynamic dim (NULL: none) */
static kiln_engine *build_net(void) {
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {-1, K};
    const char *dn[2] = {g_dim0_name, NULL};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, dn));
    uint64_t s = 1234;
    for (int j = 0; j < K; j++) g_w1[j] = test_randf(&s, -2, 2), g_w2[j] = test_randf(&s, -2, 2);
    int64_t wd[1] = {K};
    ASSERT_OK(kiln_network_add_constant(net, "w1", KILN_DTYPE_F32, 1, wd, g_w1));
    ASSERT_OK(kiln_network_add_constant(net, "w2", KILN_DTYPE_F32, 1, wd, g_w2));
    const char *i1[] = {"x", "w1"}, *o1[] = {"a"};
    kiln_layer *l = kiln_network_add_layer(net, "test::scale", 1, "scale1", 2, i1, 1, o1);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_float(l, "bias", 0.25));
    const char *i2[] = {"a"}, *o2[] = {"b"};
    ASSERT(kiln_network_add_layer(net, "test::squash", 1, "squash1", 1, i2, 1, o2));
    const char *i3[] = {"b", "w2"}, *o3[] = {"y"};
    l = kiln_network_add_layer(net, "test::scale", 1, "scale2", 2, i3, 1, o3);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_float(l, "bias", -0.5));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    int64_t mn[2] = {1, K}, op[2] = {8, K}, mx[2] = {32, K};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 2, mn, op, mx));
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

static void ref(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < K; j++) {
            float a = x[i * K + j] * g_w1[j] + 0.25f;
            float b = a / (1.0f + (a < 0 ? -a : a));
            y[i * K + j] = b * g_w2[j] + -0.5f;
        }
}

/* Run with n rows of fresh random input; compare with the reference. */
static void run_check(const kiln_engine *e, int64_t n, uint64_t seed, float *out) {
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float x[32 * K], r[32 * K];
    for (int64_t i = 0; i < n * K; i++) x[i] = test_randf(&seed, -3, 3);
    memset(out, 0xCD, (size_t)n * K * 4);
    int64_t d[2] = {n, K};
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 2, d));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, (size_t)n * K * 4));
    ASSERT_OK(kiln_context_bind(ctx, "y", out, (size_t)n * K * 4));
    ASSERT_OK(kiln_context_run(ctx));
    ref(x, n, r);
    ASSERT(memcmp(out, r, (size_t)n * K * 4) == 0);
    kiln_context_free(ctx);
}

static char g_dir[256];
static void rm_tmpdir(void) { rmdir(g_dir); }
static const char *tmpdir(void) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "%s/engine_file_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        ASSERT(mkdtemp(g_dir) != NULL);
        atexit(rm_tmpdir);
    }
    return g_dir;
}

TEST_IMPL(save_load_roundtrip) {
    kiln_engine *e = build_net();
    char path[400];
    snprintf(path, sizeof path, "%s/net.kiln", tmpdir());
    ASSERT_OK(kiln_engine_save(e, path));
    kiln_engine *l = NULL;
    ASSERT_OK(kiln_engine_load(path, &l));
    ASSERT(l->map != NULL);
    ASSERT_EQ(l->nlayers, e->nlayers);
    ASSERT_EQ(l->ntensors, e->ntensors);
    ASSERT_EQ(l->weights_size, e->weights_size);
    /* weights used in place from the mapping, 64-byte aligned */
    if (l->weights_size) {
        ASSERT((uintptr_t)l->weights % 64 == 0);
        ASSERT(l->weights >= (uint8_t *)l->map &&
               l->weights + l->weights_size <= (uint8_t *)l->map + l->map_size);
        ASSERT(memcmp(l->weights, e->weights, (size_t)e->weights_size) == 0);
    }
    const int64_t ns[] = {8, 1, 32, 5};
    for (size_t k = 0; k < 4; k++) {
        float y1[32 * K], y2[32 * K];
        run_check(e, ns[k], 99 + k, y1);
        run_check(l, ns[k], 99 + k, y2);
        ASSERT(memcmp(y1, y2, (size_t)ns[k] * K * 4) == 0);
    }
    kiln_io_info a, b;
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(kiln_engine_io(e, i, &a));
        ASSERT_OK(kiln_engine_io(l, i, &b));
        ASSERT_STR_EQ(a.name, b.name);
        ASSERT_EQ(a.ndim, b.ndim);
        for (int d = 0; d < a.ndim; d++) {
            ASSERT_EQ(a.dims[d], b.dims[d]);
            ASSERT_EQ(a.min[d], b.min[d]);
            ASSERT_EQ(a.max[d], b.max[d]);
        }
    }
    /* The saved file re-serializes to the same bytes. */
    void *b1, *b2;
    size_t n1, n2;
    ASSERT_OK(kiln_engine_serialize(e, &b1, &n1));
    ASSERT_OK(kiln_engine_serialize(l, &b2, &n2));
    ASSERT_EQ(n1, n2);
    ASSERT(memcmp(b1, b2, n1) == 0);
    kiln_free(b1);
    kiln_free(b2);
    kiln_engine_free(l);
    kiln_engine_free(e);
    unlink(path);
}

TEST_IMPL(memory_roundtrip) {
    kiln_engine *e = build_net();
    void *buf;
    size_t n;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &n));
    ASSERT(n > 64);
    ASSERT(memcmp(buf, "KILNENG", 8) == 0);
    /* load from an unaligned copy: the engine copies what it keeps */
    uint8_t *odd = malloc(n + 1);
    memcpy(odd + 1, buf, n);
    kiln_engine *l = NULL;
    ASSERT_OK(kiln_engine_load_memory(odd + 1, n, &l));
    memset(odd, 0, n + 1);
    free(odd);
    ASSERT(l->map == NULL);
    if (l->weights_size) ASSERT((uintptr_t)l->weights % 64 == 0);
    float y1[32 * K], y2[32 * K];
    run_check(e, 13, 5, y1);
    run_check(l, 13, 5, y2);
    ASSERT(memcmp(y1, y2, 13 * K * 4) == 0);
    kiln_free(buf);
    kiln_engine_free(l);
    kiln_engine_free(e);
}

TEST_IMPL(save_is_atomic) {
    kiln_engine *e = build_net();
    char path[400];
    snprintf(path, sizeof path, "%s/atomic.kiln", tmpdir());
    FILE *f = fopen(path, "wb");
    ASSERT(f);
    fputs("old contents", f);
    fclose(f);
    /* a directory that does not exist: fails, nothing written */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.kiln", tmpdir());
    ASSERT_EQ(kiln_engine_save(e, bad), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "no/such/dir");
    /* replace the old file; no temporary left behind */
    ASSERT_OK(kiln_engine_save(e, path));
    kiln_engine *l = NULL;
    ASSERT_OK(kiln_engine_load(path, &l));
    kiln_engine_free(l);
    char tmp[450];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    struct stat st;
    ASSERT(stat(tmp, &st) != 0);
    ASSERT_EQ(kiln_engine_load("/nonexistent/engine.kiln", &l), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "/nonexistent/engine.kiln");
    ASSERT(l == NULL);
    unlink(path);
    kiln_engine_free(e);
}


TEST_IMPL(inspect) {
    kiln_engine *e = build_net();
    char *text = test_inspect_text(e);
    ASSERT_CONTAINS(text, "'scale1' test::scale v1");
    ASSERT_CONTAINS(text, "'squash1' test::squash v1");
    ASSERT_CONTAINS(text, "'scale2' test::scale v1");
    ASSERT_CONTAINS(text, "'x' f32 LINEAR [x.dim0, 16]");
    ASSERT_CONTAINS(text, "profile: min [1, 16] opt [8, 16] max [32, 16]");
    ASSERT_CONTAINS(text, "memory plan");
    ASSERT_CONTAINS(text, "arena total");
    ASSERT_CONTAINS(text, "weights: ");
    ASSERT_CONTAINS(text, "required plugins");
    ASSERT_CONTAINS(text, kiln_cpu_signature());
    free(text);
    kiln_engine_free(e);
}

/* A dim the network names (ONNX dim_param) is shown by that name, through
 * the engine file too (optional section DIMNAMES); a file without the
 * section (as written before it existed) loads and shows x.dim0. */
TEST_IMPL(dim_names) {
    g_dim0_name = "batch";
    kiln_engine *e = build_net();
    g_dim0_name = NULL;
    char *text = test_inspect_text(e);
    ASSERT_CONTAINS(text, "'x' f32 LINEAR [batch, 16]");
    ASSERT_CONTAINS(text, "'y' f32 LINEAR [batch, 16]");
    ASSERT(strstr(text, "x.dim0") == NULL);
    free(text);
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    kiln_free(buf);
    text = test_inspect_text(e2);
    ASSERT_CONTAINS(text, "'x' f32 LINEAR [batch, 16]");
    free(text);
    float out[5 * K];
    run_check(e2, 5, 99, out);
    kiln_engine_free(e2);
    /* No names: the engine has no DIMNAMES section, i.e. the bytes an
     * engine of this format version had before the section existed. */
    for (int32_t i = 0; i < e->ndimnames; i++) kiln__free(e->dimnames[i].name);
    kiln__free(e->dimnames);
    e->dimnames = NULL;
    e->ndimnames = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    ASSERT(memmem(buf, size, "batch", 5) == NULL);
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    kiln_free(buf);
    text = test_inspect_text(e2);
    ASSERT_CONTAINS(text, "'x' f32 LINEAR [x.dim0, 16]");
    free(text);
    run_check(e2, 3, 7, out);
    kiln_engine_free(e2);
    kiln_engine_free(e);
}

/* Replace `from` by `to` (same length) inside section LAYERS and fix its
 * checksum: an engine that needs an op nobody registered. */
static void rename_op(uint8_t *p, size_t n, const char *from, const char *to) {
    uint32_t siglen, nsec;
    memcpy(&nsec, p + 20, 4);
    memcpy(&siglen, p + 24, 4);
    size_t table = 40 + ((siglen + 7u) & ~7u);
    int done = 0;
    for (uint32_t i = 0; i < nsec; i++) {
        uint8_t *ent = p + table + 32 * i;
        uint32_t id;
        uint64_t off, size;
        memcpy(&id, ent, 4);
        memcpy(&off, ent + 8, 8);
        memcpy(&size, ent + 16, 8);
        if (id != 4) continue; /* LAYERS */
        ASSERT(off + size <= n);
        for (uint64_t k = off; k + strlen(from) <= off + size; k++)
            if (!memcmp(p + k, from, strlen(from))) {
                memcpy(p + k, to, strlen(to));
                done++;
            }
    }
    ASSERT(done > 0);
    kiln__file_reseal(p, n);
}

TEST_IMPL(missing_plugin) {
    kiln_engine *e = build_net();
    void *buf;
    size_t n;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &n));
    kiln_engine *l = NULL;
    rename_op(buf, n, "squash", "squish");
    ASSERT_EQ(kiln_engine_load_memory(buf, n, &l), KILN_EPLUGIN);
    ASSERT(l == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "engine needs plugin test::squish version 1");
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_registry_load_library");
    /* two missing ops: both named in one message, each once */
    rename_op(buf, n, "scale", "scalf");
    ASSERT_EQ(kiln_engine_load_memory(buf, n, &l), KILN_EPLUGIN);
    const char *m = kiln_errmsg();
    ASSERT_CONTAINS(m, "test::squish version 1");
    ASSERT_CONTAINS(m, "test::scalf version 1");
    ASSERT(strstr(strstr(m, "test::scalf") + 1, "test::scalf") == NULL);
    /* the same through a file */
    char path[400];
    snprintf(path, sizeof path, "%s/missing.kiln", tmpdir());
    FILE *f = fopen(path, "wb");
    ASSERT(f && fwrite(buf, 1, n, f) == n);
    fclose(f);
    ASSERT_EQ(kiln_engine_load(path, &l), KILN_EPLUGIN);
    ASSERT_CONTAINS(kiln_errmsg(), "test::squish version 1");
    unlink(path);
    kiln_free(buf);
    kiln_engine_free(e);
}

/* An engine using a plugin library, loaded in a process that did not load
 * the library: the error names the op, its version and the library. */
static void build_sample_engine(const char *path, unsigned flags);
static void run_child(const char *path, int embedded, char *text, size_t size);

TEST_IMPL(missing_sample_plugin) {
    if (access(KILN_SAMPLES_LIB, R_OK) != 0) {
        fprintf(stderr, "   skipped: %s not built\n", KILN_SAMPLES_LIB);
        return;
    }
    char path[400], text[4096];
    snprintf(path, sizeof path, "%s/sample.kiln", tmpdir());
    build_sample_engine(path, 0);
    kiln_engine *e = NULL;
    /* in this process the plugin is loaded: the engine loads */
    ASSERT_OK(kiln_engine_load(path, &e));
    kiln_engine_free(e);
    run_child(path, 0, text, sizeof text);
    char want[600];
    snprintf(want, sizeof want,
             "engine needs plugin sample::elemwise_add version 1 (built with %s", KILN_SAMPLES_LIB);
    ASSERT_CONTAINS(text, want);
    ASSERT_CONTAINS(text, "load it first with kiln_registry_load_library"); /* API words, not CLI options */
    fprintf(stderr, "   child said: %s", text);
    unlink(path);
}

static void build_sample_engine(const char *path, unsigned flags) {
    kiln_engine *e = build_sample_add_engine(flags);
    ASSERT_OK(kiln_engine_save(e, path));
    kiln_engine_free(e);
}

static void run_child(const char *path, int embedded, char *text, size_t size) {
    char cmd[1200], log[450], self[300];
    snprintf(log, sizeof log, "%s/child.log", tmpdir());
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT(k > 0);
    self[k] = 0;
    snprintf(cmd, sizeof cmd, "KILN_TEST_ENGINE='%s' %s '%s' child_load > '%s' 2>&1", path,
             embedded ? "KILN_TEST_EMBEDDED=1" : "", self, log);
    int rc = system(cmd);
    FILE *f = fopen(log, "r");
    ASSERT(f);
    size_t n = fread(text, 1, size - 1, f);
    text[n] = 0;
    fclose(f);
    unlink(log);
    if (rc != 0) TEST__FAIL("child failed: %s", text);
}

/* The engine carries the plugin library: it loads and runs in a process
 * that never loaded the library. */
TEST_IMPL(embedded_plugin) {
    if (access(KILN_SAMPLES_LIB, R_OK) != 0) {
        fprintf(stderr, "   skipped: %s not built\n", KILN_SAMPLES_LIB);
        return;
    }
    char path[400], text[4096];
    snprintf(path, sizeof path, "%s/embedded.kiln", tmpdir());
    build_sample_engine(path, KILN_BUILD_EMBED_PLUGINS);
    run_child(path, 1, text, sizeof text);
    ASSERT_CONTAINS(text, "embedded plugin engine ran");
    unlink(path);
}

/* Run by missing_sample_plugin / embedded_plugin in a child process (a
 * no-op otherwise). */
TEST_IMPL(child_load) {
    const char *path = getenv("KILN_TEST_ENGINE");
    if (!path) return;
    kiln_engine *e = NULL;
    if (!getenv("KILN_TEST_EMBEDDED")) {
        ASSERT_EQ(kiln_engine_load(path, &e), KILN_EPLUGIN);
        fprintf(stderr, "%s\n", kiln_errmsg());
        return;
    }
    /* the engine carries the library: it loads and runs here */
    ASSERT_OK(kiln_engine_load(path, &e));
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float a[6], b[6], c[6];
    uint64_t s = 17;
    for (int i = 0; i < 6; i++) a[i] = test_randf(&s, -1, 1), b[i] = test_randf(&s, -1, 1);
    memset(c, 0xCD, sizeof c);
    ASSERT_OK(kiln_context_bind(ctx, "a", a, sizeof a));
    ASSERT_OK(kiln_context_bind(ctx, "b", b, sizeof b));
    ASSERT_OK(kiln_context_bind(ctx, "c", c, sizeof c));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < 6; i++) ASSERT(c[i] == a[i] + b[i]);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    fprintf(stderr, "embedded plugin engine ran\n");
}

TEST_LIST(TEST_ENTRY(save_load_roundtrip), TEST_ENTRY(memory_roundtrip), TEST_ENTRY(save_is_atomic),
          TEST_ENTRY(inspect), TEST_ENTRY(dim_names), TEST_ENTRY(missing_plugin),
          TEST_ENTRY(missing_sample_plugin), TEST_ENTRY(embedded_plugin), TEST_ENTRY(child_load))
