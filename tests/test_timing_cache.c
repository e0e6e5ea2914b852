/*
 * test_timing_cache.c — the timing cache: in-memory put/get, file round
 * trip, builds that reuse a cache file time nothing (counted by the op's own
 * call counter, not only by the stats), corrupt files and files of another
 * device are ignored with a warning, never a crash; on the stand-in GPU, a
 * cache's cuDNN entries made without cuDNN are not reused where cuDNN is,
 * and a build without a cuDNN tactic never asks for cuDNN.
 */
#include "builder/build_int.h"
#include "device/cuda/cuda_int.h"
#include "device/cuda/cudnn.h"
#include "test.h"

#include <pthread.h>
#include <unistd.h>

/* y = a + b with two tactics; counts its calls. */
static int g_calls;
static int add_shape(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}
static int add_impl(const kiln_call *c) {
    g_calls++;
    const float *a = c->in[0].data, *b = c->in[1].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = a[i] + b[i];
    return 0;
}
static const kiln_combo formats[] = {{"FP32", NULL, {1, 2, 3}}, {NULL, NULL, {0}}};
static const kiln_attr_def attrs[] = {{"k", KILN_ATTR_INT, 0, "0", 0, "changes timing"},
                                      {"note", KILN_ATTR_STRING, 0, "", 0, "does not"},
                                      {NULL, 0, 0, NULL, 0, NULL}};
static const kiln_quick_op add_op = {.ns = "test", .name = "tc_add", .version = 1, .min_inputs = 2,
                                     .max_inputs = 2, .num_outputs = 1, .attrs = attrs, .shape = add_shape,
                                     .impl = add_impl, .formats = formats, .timing_id = "k"};
KILN_OP(add_op)

/* The same op with a (stand-in) CUDA side whose tactic 10 needs a library
 * that is optional at run time, as the Conv's cuDNN tactics need cuDNN (the
 * stand-in GPU takes tactics 10..17 of any op for cuDNN's): without it
 * (g_have_lib = 0) tactic 10 fails, as a cuDNN tactic fails its timing
 * where cuDNN is missing.  test::tc_add_gpu_plain has no such tactic. */
static int g_have_lib, g_lib_calls;
static int add_cuda(const kiln_call *c) {
    if (c->tactic == 10 && !g_have_lib) return kiln_set_error(KILN_EUNSUPPORTED, "tc_add_gpu: no library here");
    g_lib_calls += c->tactic == 10;
    return kiln__cuda_fake_kernel(add_impl, c);
}
static const kiln_combo cuda_formats[] = {{"FP32", NULL, {1, 10}}, {NULL, NULL, {0}}};
static const kiln_combo plain_formats[] = {{"FP32", NULL, {1, 2, 3}}, {NULL, NULL, {0}}};
static const kiln_combo cpu_formats[] = {{"FP32", NULL, {1}}, {NULL, NULL, {0}}};
static const kiln_quick_op add_gpu_op = {.ns = "test", .name = "tc_add_gpu", .version = 1, .min_inputs = 2,
                                         .max_inputs = 2, .num_outputs = 1, .shape = add_shape, .impl = add_impl,
                                         .formats = cpu_formats, .cuda_impl = add_cuda,
                                         .cuda_formats = cuda_formats};
KILN_OP(add_gpu_op)
static const kiln_quick_op add_plain_op = {.ns = "test", .name = "tc_add_gpu_plain", .version = 1,
                                           .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
                                           .shape = add_shape, .impl = add_impl, .formats = cpu_formats,
                                           .cuda_impl = add_cuda, .cuda_formats = plain_formats};
KILN_OP(add_plain_op)

static char g_path[512];
static uint64_t g_seed = 0xBEEF;

static void make_path(const char *tag) {
    snprintf(g_path, sizeof g_path, "%s/b1_tc_%s_%ld.txt", KILN_BINARY_DIR, tag, (long)getpid());
    remove(g_path);
}

static char g_log[1 << 15];
static void log_fn(void *ud, kiln_log_level level, const char *msg) {
    (void)ud;
    if (level <= KILN_LOG_WARN && strlen(g_log) + strlen(msg) + 2 < sizeof g_log) {
        strcat(g_log, msg);
        strcat(g_log, "\n");
    }
}

/* y = a + b of n floats by op (test::tc_add: k and note set). */
static kiln_network *make_net_op(const char *op, int64_t n, int k, const char *note) {
    kiln_network *net = kiln_network_create();
    int64_t d[1] = {n};
    ASSERT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_F32, 1, d, NULL));
    ASSERT_OK(kiln_network_add_input(net, "b", KILN_DTYPE_F32, 1, d, NULL));
    const char *in[] = {"a", "b"}, *out[] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, op, 1, "add", 2, in, 1, out);
    ASSERT(l);
    if (!strcmp(op, "test::tc_add")) {
        ASSERT_OK(kiln_layer_set_int(l, "k", k));
        ASSERT_OK(kiln_layer_set_string(l, "note", note));
    }
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}
static kiln_network *make_net(int64_t n, int k, const char *note) { return make_net_op("test::tc_add", n, k, note); }

/* y = a + b whose tactic 2 refuses the case (KILN_EUNSUPPORTED: holds
 * wherever the key does) and tactic 3 runs out of memory while g_oom is
 * set (may pass next time); counts tactic 3's calls. */
static int g_oom, g_t3_calls;
static int flaky_impl(const kiln_call *c) {
    if (c->tactic == 2) return kiln_set_error(KILN_EUNSUPPORTED, "tc_flaky: tactic 2 never takes this");
    if (c->tactic == 3) {
        g_t3_calls++;
        if (g_oom) return kiln_set_error(KILN_ENOMEM, "tc_flaky: out of memory (this time)");
    }
    return add_impl(c);
}
static const kiln_quick_op flaky_op = {.ns = "test", .name = "tc_flaky", .version = 1, .min_inputs = 2,
                                       .max_inputs = 2, .num_outputs = 1, .shape = add_shape,
                                       .impl = flaky_impl, .formats = formats};
KILN_OP(flaky_op)

/* The device build_check builds for (the CUDA tests set it). */
static kiln_device_kind g_device = KILN_DEVICE_CPU;

static void build_check(kiln_network *net, const char *cache, int64_t n, kiln_build_stats *st) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_threads(cfg, 1);
    kiln_build_config_set_timing_reps(cfg, 2);
    kiln_build_config_set_device(cfg, g_device);
    ASSERT_OK(kiln_build_config_set_timing_cache(cfg, cache));
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, st));
    /* the engine computes the right thing whatever tactic won */
    float a[256], b[256], y[256];
    for (int i = 0; i < n; i++) {
        a[i] = test_randf(&g_seed, -1, 1);
        b[i] = test_randf(&g_seed, -1, 1);
    }
    memset(y, 0xA5, sizeof y);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "a", a, (size_t)n * 4));
    ASSERT_OK(kiln_context_bind(ctx, "b", b, (size_t)n * 4));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, (size_t)n * 4));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < n; i++) ASSERT_NEAR(y[i], a[i] + b[i], 1e-6);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
}

TEST_IMPL(memory_cache) {
    kiln__tcache *c = kiln__tcache_create();
    double ms;
    int fb;
    ASSERT_EQ(kiln__tcache_get(c, "k1", &ms, &fb), 0);
    for (int i = 0; i < 500; i++) {
        char key[64];
        snprintf(key, sizeof key, "op v1|key %d", i);
        ASSERT_OK(kiln__tcache_put(c, key, i * 0.5));
    }
    ASSERT_EQ(kiln__tcache_count(c), 500);
    ASSERT_EQ(kiln__tcache_get(c, "op v1|key 321", &ms, &fb), 1);
    ASSERT_NEAR(ms, 160.5, 0);
    ASSERT_EQ(fb, 1);
    ASSERT_OK(kiln__tcache_put(c, "op v1|key 321", 7.0)); /* replace, no duplicate */
    ASSERT_EQ(kiln__tcache_count(c), 500);
    ASSERT_EQ(kiln__tcache_put(c, "bad\nkey", 1.0), KILN_EINVAL);
    make_path("mem");
    ASSERT_OK(kiln__tcache_save(c, g_path));
    kiln__tcache *d = kiln__tcache_create();
    kiln__tcache_load(d, g_path);
    ASSERT_EQ(kiln__tcache_count(d), 500);
    ASSERT_EQ(kiln__tcache_get(d, "op v1|key 321", &ms, &fb), 1);
    ASSERT_NEAR(ms, 7.0, 0);
    ASSERT_EQ(fb, 0); /* loaded, not measured in this build */
    ASSERT_EQ(kiln__tcache_get(d, "op v1|key 7", &ms, &fb), 1);
    ASSERT_NEAR(ms, 3.5, 0);
    kiln__tcache_free(c);
    kiln__tcache_free(d);
    remove(g_path);
}

TEST_IMPL(build_round_trip) {
    make_path("rt");
    kiln_network *net = make_net(64, 3, "first");
    kiln_build_stats st;
    g_calls = 0;
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(st.candidates, 3);
    ASSERT_EQ(st.timed, 3);
    ASSERT_EQ(st.cache_hits, 0);
    int calls_first = g_calls;
    ASSERT(calls_first >= 3 * 3); /* warm-up + 2 reps per tactic, + the run */
    ASSERT_EQ(access(g_path, R_OK), 0);
    /* Second build: zero timing, answered by the file. */
    g_calls = 0;
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(st.timed, 0);
    ASSERT_EQ(st.cache_hits, 3);
    ASSERT_EQ(st.cache_dedup, 0);
    ASSERT_EQ(g_calls, 1); /* only the test's own run */
    kiln_network_free(net);
    /* An attribute outside timing_id does not change the key... */
    net = make_net(64, 3, "other note");
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(st.timed, 0);
    kiln_network_free(net);
    /* ...one inside does, and so do shapes. */
    net = make_net(64, 4, "first");
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(st.timed, 3);
    kiln_network_free(net);
    net = make_net(128, 3, "first");
    build_check(net, g_path, 128, &st);
    ASSERT_EQ(st.timed, 3);
    kiln_network_free(net);
    /* all three shapes/attrs now cached */
    net = make_net(64, 4, "first");
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(st.timed, 0);
    kiln_network_free(net);
    remove(g_path);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    ASSERT(f);
    fputs(text, f);
    fclose(f);
}

TEST_IMPL(corrupt_and_foreign_files) {
    make_path("bad");
    kiln_network *net = make_net(32, 1, "");
    kiln_build_stats st;
    const char *bad[] = {
        "garbage\x01\x02\n",
        "kiln-timing-cache 1\n",
        "kiln-timing-cache 1\ndevice %s\nentries 5\n1.0 only one\n",
        "kiln-timing-cache 1\ndevice %s\nentries 1\nnot-a-number key\n",
        "kiln-timing-cache 1\ndevice %s\nentries 1\n-3 negative\n",
        "kiln-timing-cache 1\ndevice %s\nentries 0\nextra\n",
        "kiln-timing-cache 1\ndevice some-other-cpu:sse2\nentries 0\n",
        "kiln-timing-cache 99\ndevice %s\nentries 0\n",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, bad[i], kiln_cpu_signature());
        write_file(g_path, text);
        g_log[0] = 0;
        kiln_log_set(KILN_LOG_WARN, log_fn, NULL);
        build_check(net, g_path, 32, &st);
        kiln_log_set(KILN_LOG_WARN, NULL, NULL);
        ASSERT_EQ(st.timed, 3); /* ignored: everything timed again */
        ASSERT_EQ(st.cache_hits, 0);
        ASSERT_CONTAINS(g_log, "timing cache");
        ASSERT_CONTAINS(g_log, g_path);
        /* and the file was rewritten, valid: the next build times nothing */
        build_check(net, g_path, 32, &st);
        ASSERT_EQ(st.timed, 0);
    }
    /* random bytes never crash */
    for (int iter = 0; iter < 20; iter++) {
        char text[300];
        snprintf(text, 40, "kiln-timing-cache 1\ndevice %s\n", kiln_cpu_signature());
        size_t n = strlen(text);
        for (size_t i = n; i < sizeof text - 1; i++) text[i] = (char)(1 + test_rand_u64(&g_seed) % 255);
        text[sizeof text - 1] = 0;
        write_file(g_path, text);
        kiln_log_set(KILN_LOG_ERROR, NULL, NULL);
        build_check(net, g_path, 32, &st);
        kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    }
    /* an unwritable path: the build still succeeds (cache write is a warning) */
    kiln_log_set(KILN_LOG_ERROR, NULL, NULL);
    build_check(net, "/nonexistent-dir/kiln/cache.txt", 32, &st);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    ASSERT_EQ(st.timed, 3);
    kiln_network_free(net);
    remove(g_path);
}

static void *build_thread(void *arg) {
    kiln_network *net = arg;
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_threads(cfg, 1);
    kiln_build_config_set_timing_reps(cfg, 1);
    if (kiln_build_config_set_timing_cache(cfg, g_path)) return (void *)1;
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, NULL);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    return rc ? (void *)1 : NULL;
}

TEST_IMPL(concurrent_builds_share_a_file) {
    make_path("conc");
    kiln_network *a = make_net(48, 5, ""), *b = make_net(96, 6, "");
    for (int round = 0; round < 3; round++) {
        pthread_t t1, t2;
        void *r1, *r2;
        ASSERT_EQ(pthread_create(&t1, NULL, build_thread, a), 0);
        ASSERT_EQ(pthread_create(&t2, NULL, build_thread, b), 0);
        pthread_join(t1, &r1);
        pthread_join(t2, &r2);
        ASSERT(r1 == NULL && r2 == NULL);
    }
    /* the file is whole: one of the writers won, and it loads cleanly */
    kiln__tcache *c = kiln__tcache_create();
    g_log[0] = 0;
    kiln_log_set(KILN_LOG_WARN, log_fn, NULL);
    kiln__tcache_load(c, g_path);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    ASSERT_EQ(g_log[0], 0);
    ASSERT(kiln__tcache_count(c) >= 3);
    kiln__tcache_free(c);
    kiln_network_free(a);
    kiln_network_free(b);
    remove(g_path);
}

/* The count of lines of the cache file that contain `s`. */
static int file_lines_with(const char *s) { return test_file_lines_with(g_path, s); }

/* A failed candidate is saved as -1 when it refuses the case, and not at
 * all when it ran out of memory: the next build times that one again. */
TEST_IMPL(transient_failures_not_saved) {
    make_path("flaky");
    kiln_network *net = make_net_op("test::tc_flaky", 32, 0, "");
    kiln_build_stats st;
    g_oom = 1, g_t3_calls = 0;
    kiln_log_set(KILN_LOG_ERROR, NULL, NULL);
    build_check(net, g_path, 32, &st);
    ASSERT_EQ(st.timed, 3);
    ASSERT_EQ(g_t3_calls, 1); /* failed at its first call */
    ASSERT_EQ(file_lines_with("tactic=1"), 1);
    ASSERT_EQ(file_lines_with("-1 test::tc_flaky"), 1);
    ASSERT_EQ(file_lines_with("tactic=2"), 1);
    ASSERT_EQ(file_lines_with("tactic=3"), 0);
    ASSERT_EQ(file_lines_with("entries 2"), 1);
    /* memory again: tactic 3 is timed, the refusal is not retried */
    g_oom = 0, g_t3_calls = 0;
    build_check(net, g_path, 32, &st);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    ASSERT_EQ(st.timed, 1);
    ASSERT_EQ(st.cache_hits, 2);
    ASSERT(g_t3_calls >= 2); /* warm-up + samples */
    ASSERT_EQ(file_lines_with("tactic=3"), 1);
    kiln_network_free(net);
    remove(g_path);
}

/* The file's device line (line 2), for the assertions below. */
static void device_line(char *buf, size_t size) {
    FILE *f = fopen(g_path, "rb");
    ASSERT(f);
    ASSERT(fgets(buf, (int)size, f) && fgets(buf, (int)size, f));
    fclose(f);
}

/* A cache made on a GPU machine without cuDNN holds cuDNN's tactics as
 * failed; reused where cuDNN exists, they would never be tried.  The
 * cuDNN version keys the entries of cuDNN's tactics (not the file's device
 * line): there they are timed again, while the other tactics' entries are
 * reused. */
/* Builds on the stand-in GPU (on = 1) with that cuDNN version, or back to the CPU. */
static void fake_gpu(int on, int cudnn) {
    kiln__cuda_fake(on);
    kiln__cuda_fake_cudnn(cudnn);
    g_device = on ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU;
}

TEST_IMPL(cudnn_version_in_key) {
    fake_gpu(1, 0);
    make_path("cudnn");
    kiln_network *net = make_net_op("test::tc_add_gpu", 64, 0, "");
    kiln_build_stats st;
    char line[512];
    /* no cuDNN: tactic 10 fails its timing, and the file says so */
    g_have_lib = 0, g_lib_calls = 0;
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(g_lib_calls, 0);
    ASSERT_EQ(st.timed, 2);
    device_line(line, sizeof line);
    ASSERT_CONTAINS(line, "cuda:fake GPU");
    ASSERT(!strstr(line, "cudnn"));
    ASSERT_EQ(file_lines_with("tactic=10|cudnn none"), 1);
    ASSERT_EQ(file_lines_with("-1 cuda|test::tc_add_gpu"), 1);
    /* the same machine reuses the file, its failed entry too: nothing timed */
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(st.timed, 0);
    ASSERT_EQ(st.cache_hits, 2);
    /* cuDNN 9.19.0 here: tactic 10 is timed again, tactic 1 reused */
    kiln__cuda_fake_cudnn(91900);
    g_have_lib = 1;
    g_log[0] = 0;
    kiln_log_set(KILN_LOG_WARN, log_fn, NULL);
    build_check(net, g_path, 64, &st);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    ASSERT_EQ(g_log[0], 0); /* the file itself is still this machine's */
    ASSERT_EQ(st.timed, 1);
    ASSERT_EQ(st.cache_hits, 1);
    ASSERT(g_lib_calls > 0);
    ASSERT_EQ(file_lines_with("tactic=10|cudnn 9.19.0"), 1);
    /* and another cuDNN version is another key again */
    kiln__cuda_fake_cudnn(90800);
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(st.timed, 1);
    ASSERT_EQ(st.cache_hits, 1);
    ASSERT_EQ(file_lines_with("tactic=10|cudnn 9.8.0"), 1);
    kiln_network_free(net);
    remove(g_path);
    fake_gpu(0, 0);
}

/* cuDNN is loaded lazily: a CUDA build of a network none of whose tactics
 * runs cuDNN never asks for its version (where a real GPU would load it),
 * one with such a tactic does; and only Conv's tactics 10..17 are cuDNN's. */
TEST_IMPL(cudnn_loaded_only_when_needed) {
    ASSERT_EQ(kiln__cudnn_tactic("ai.onnx", "Conv", KILN_CUDNN_TACTIC0), 1);
    ASSERT_EQ(kiln__cudnn_tactic("ai.onnx", "Conv", KILN_CUDNN_TACTIC0 + KILN_CUDNN_ALGOS - 1), 1);
    ASSERT_EQ(kiln__cudnn_tactic("ai.onnx", "Conv", KILN_CUDNN_TACTIC0 + KILN_CUDNN_ALGOS), 0);
    ASSERT_EQ(kiln__cudnn_tactic("ai.onnx", "Conv", 2), 0);
    ASSERT_EQ(kiln__cudnn_tactic("ai.onnx", "ConvTranspose", KILN_CUDNN_TACTIC0), 0);
    ASSERT_EQ(kiln__cudnn_tactic("test", "Conv", KILN_CUDNN_TACTIC0), 0);
    fake_gpu(1, 91900);
    make_path("lazy");
    kiln__cuda_fake_cudnn_asked(1);
    kiln_network *net = make_net_op("test::tc_add_gpu_plain", 64, 0, "");
    kiln_build_stats st;
    build_check(net, g_path, 64, &st);
    ASSERT_EQ(st.timed, 3);
    ASSERT_EQ(kiln__cuda_fake_cudnn_asked(1), 0);
    ASSERT_EQ(file_lines_with("cudnn"), 0);
    kiln_network_free(net);
    net = make_net_op("test::tc_add_gpu", 64, 0, "");
    g_have_lib = 1;
    build_check(net, g_path, 64, &st);
    ASSERT(kiln__cuda_fake_cudnn_asked(1) > 0);
    ASSERT_EQ(file_lines_with("tactic=10|cudnn 9.19.0"), 1);
    kiln_network_free(net);
    remove(g_path);
    fake_gpu(0, 0);
}

TEST_LIST(TEST_ENTRY(memory_cache), TEST_ENTRY(build_round_trip), TEST_ENTRY(corrupt_and_foreign_files),
          TEST_ENTRY(concurrent_builds_share_a_file), TEST_ENTRY(transient_failures_not_saved),
          TEST_ENTRY(cudnn_version_in_key),
          TEST_ENTRY(cudnn_loaded_only_when_needed))
