/*
 * test_corrupt.c — loading damaged engine files.  A real engine is saved,
 * then bytes are flipped at many positions and the file truncated at many
 * lengths: every load must fail with an error (never crash, never read out
 * of bounds: run this under ASan too), and specific damage must give the
 * specific error: bad magic, newer format version, checksum mismatch
 * naming the section, structural damage behind a valid checksum, another
 * device.
 */
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"
#include "test_engine_util.h"

#include <stdlib.h>
#include <unistd.h>


static int addc_impl(const kiln_call *c) {
    const float *x = c->in[0].data, *w = c->in[1].data;
    float *y = c->out[0].data;
    int64_t k = kiln_attrs_int(c->attrs, "k");
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = x[i] + w[i] * (float)k;
    return 0;
}
static const kiln_attr_def addc_attrs[] = {{"k", KILN_ATTR_INT, 0, "1", 0, NULL},
                                           {"tag", KILN_ATTR_STRING, 0, "none", 0, NULL},
                                           {NULL, 0, 0, NULL, 0, NULL}};
static const kiln_quick_op addc_op = {.ns = "test", .name = "addc", .version = 2,
                                      .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
                                      .attrs = addc_attrs, .shape = same_shape,
                                      .impl = addc_impl};
KILN_OP(addc_op)

static float g_w[2 * 4];

static kiln_engine *build_small(void) {
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {-1, 4};
    const char *dn[2] = {"batch", NULL}; /* a named dim: the file has a DIMNAMES section */
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, dn));
    uint64_t s = 31;
    for (int i = 0; i < 8; i++) g_w[i] = test_randf(&s, -1, 1);
    int64_t wd[2] = {2, 4};
    ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 2, wd, g_w));
    const char *i1[] = {"x", "w"}, *o1[] = {"a"};
    kiln_layer *l = kiln_network_add_layer(net, "test::addc", 2, "add1", 2, i1, 1, o1);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_int(l, "k", 3));
    ASSERT_OK(kiln_layer_set_string(l, "tag", "first"));
    const char *i2[] = {"a", "w"}, *o2[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "test::addc", 2, "add2", 2, i2, 1, o2));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    int64_t mn[2] = {1, 4}, op[2] = {2, 4}, mx[2] = {2, 4}; /* a range: a pinned dim would be a constant */
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 2, mn, op, mx));
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

static void serialize(uint8_t **buf, size_t *n) {
    kiln_engine *e = build_small();
    void *b;
    ASSERT_OK(kiln_engine_serialize(e, &b, n));
    *buf = malloc(*n);
    memcpy(*buf, b, *n);
    kiln_free(b);
    kiln_engine_free(e);
}

/* The intact engine loads and computes y = x + 4 w. */
static void check_intact(const uint8_t *buf, size_t n) {
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, n, &e));
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float x[8], y[8];
    uint64_t s = 8;
    for (int i = 0; i < 8; i++) x[i] = test_randf(&s, -5, 5);
    int64_t d[2] = {2, 4};
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 2, d));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < 8; i++) {
        float a = x[i] + g_w[i] * 3.0f;
        ASSERT(y[i] == a + g_w[i] * 1.0f);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(flip_every_byte) {
    uint8_t *buf;
    size_t n;
    serialize(&buf, &n);
    check_intact(buf, n);
    uint8_t *c = malloc(n);
    /* every byte if the file is small, else >= 4000 positions spread over it
     * (plus the whole header) */
    size_t step = n <= 8192 ? 1 : n / 4000;
    uint64_t s = 12345;
    int tried = 0;
    for (size_t pos = 0; pos < n; pos += (pos < 512 ? 1 : step)) {
        memcpy(c, buf, n);
        uint8_t x = (uint8_t)(1u << (test_rand_u64(&s) % 8));
        if (tried % 3 == 0) x = 0xFF;
        c[pos] ^= x;
        kiln_engine *e = NULL;
        int rc = kiln_engine_load_memory(c, n, &e);
        if (rc == 0)
            TEST__FAIL("flipping byte %zu (^0x%02x) of %zu was not detected", pos, x, n);
        ASSERT(e == NULL);
        ASSERT(kiln_errmsg()[0] != 0);
        tried++;
    }
    ASSERT(tried >= (int)(n < 2000 ? n : 2000));
    fprintf(stderr, "   %d corrupted images of %zu bytes rejected\n", tried, n);
    free(c);
    free(buf);
}

TEST_IMPL(truncate_everywhere) {
    uint8_t *buf;
    size_t n;
    serialize(&buf, &n);
    size_t step = n <= 8192 ? 1 : n / 3000;
    int tried = 0;
    for (size_t len = 0; len < n; len += step) {
        /* a fresh allocation of exactly len bytes: ASan sees any overread */
        uint8_t *c = malloc(len ? len : 1);
        memcpy(c, buf, len);
        kiln_engine *e = NULL;
        int rc = kiln_engine_load_memory(c, len, &e);
        if (rc == 0) TEST__FAIL("truncation to %zu of %zu bytes was not detected", len, n);
        free(c);
        tried++;
    }
    /* trailing garbage is an error too */
    uint8_t *c = malloc(n + 1);
    memcpy(c, buf, n);
    c[n] = 0;
    kiln_engine *e = NULL;
    ASSERT_EQ(kiln_engine_load_memory(c, n + 1, &e), KILN_EFORMAT);
    free(c);
    fprintf(stderr, "   %d truncations rejected\n", tried);
    free(buf);
}

TEST_IMPL(files_on_disk) {
    /* the mmap path: a sample of corruptions and truncations through files */
    uint8_t *buf;
    size_t n;
    serialize(&buf, &n);
    char path[300];
    snprintf(path, sizeof path, "%s/corrupt_%ld.kiln", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid());
    uint64_t s = 99;
    for (int i = 0; i < 200; i++) {
        size_t len = n, pos = (size_t)(test_rand_u64(&s) % n);
        FILE *f = fopen(path, "wb");
        ASSERT(f);
        if (i % 4 == 3) {
            len = (size_t)(test_rand_u64(&s) % n);
            ASSERT(fwrite(buf, 1, len, f) == len);
        } else {
            buf[pos] ^= 0x40;
            ASSERT(fwrite(buf, 1, n, f) == n);
            buf[pos] ^= 0x40;
        }
        fclose(f);
        kiln_engine *e = NULL;
        int rc = kiln_engine_load(path, &e);
        if (rc == 0) TEST__FAIL("damaged file (case %d, pos %zu, len %zu) loaded", i, pos, len);
        ASSERT_CONTAINS(kiln_errmsg(), path);
    }
    FILE *f = fopen(path, "wb");
    fclose(f);
    kiln_engine *e = NULL;
    ASSERT_EQ(kiln_engine_load(path, &e), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "not a kiln engine file");
    unlink(path);
    free(buf);
}


TEST_IMPL(specific_errors) {
    uint8_t *buf;
    size_t n;
    serialize(&buf, &n);
    uint8_t *c = malloc(n);
    kiln_engine *e = NULL;

    memcpy(c, buf, n);
    memcpy(c, "GGUF", 4);
    ASSERT_EQ(kiln_engine_load_memory(c, n, &e), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "not a kiln engine file");

    memcpy(c, buf, n);
    c[8] = 7;
    ASSERT_EQ(kiln_engine_load_memory(c, n, &e), KILN_EVERSION);
    ASSERT_CONTAINS(kiln_errmsg(), "engine file format version 7, this kiln reads version 5");
    ASSERT_CONTAINS(kiln_errmsg(), "the file is newer");
    c[8] = 4; /* the version before the chunked checksum (and 3: a raw copy of every constant) */
    ASSERT_EQ(kiln_engine_load_memory(c, n, &e), KILN_EVERSION);
    ASSERT_CONTAINS(kiln_errmsg(), "engine file format version 4, this kiln reads version 5");
    ASSERT_CONTAINS(kiln_errmsg(), "the file is older, rebuild the engine");

    /* a flipped byte inside LAYERS: checksum error naming the section */
    uint64_t off, size;
    memcpy(c, buf, n);
    test_file_section(c, 4, &off, &size);
    c[off + size / 2] ^= 1;
    ASSERT_EQ(kiln_engine_load_memory(c, n, &e), KILN_ECHECKSUM);
    char want[128];
    snprintf(want, sizeof want, "section LAYERS (offset %llu, %llu bytes): checksum mismatch",
             (unsigned long long)off, (unsigned long long)size);
    ASSERT_CONTAINS(kiln_errmsg(), want);

    /* a valid checksum over bad structure: the first layer's first input
     * tensor index (after name, ns, op name, version, nin, nout) */
    memcpy(c, buf, n);
    test_file_section(c, 4, &off, &size);
    size_t at = (size_t)off + 4;
    for (int k = 0; k < 3; k++) {
        uint32_t len;
        memcpy(&len, c + at, 4);
        at += 4 + len;
    }
    at += 12;
    int32_t bogus = 1000000;
    memcpy(c + at, &bogus, 4);
    test_file_reseal(c, 4);
    ASSERT_EQ(kiln_engine_load_memory(c, n, &e), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "section LAYERS (file offset");
    ASSERT_CONTAINS(kiln_errmsg(), "input tensor = 1000000");

    /* the node count, huge: rejected before allocating */
    memcpy(c, buf, n);
    test_file_section(c, 2, &off, &size);
    uint32_t huge = 0x7FFFFFFF;
    memcpy(c + off, &huge, 4);
    test_file_reseal(c, 2);
    ASSERT_EQ(kiln_engine_load_memory(c, n, &e), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "section NODES");

    /* DIMNAMES (id 13: u32 count, i32 node, name): a node out of range,
     * and another node than the named one (the network has a single
     * symbol, x's dim 0, so any other node is not an input-dim symbol) */
    int32_t nodes[2] = {1000000, 0};
    for (int k = 0; k < 2; k++) {
        memcpy(c, buf, n);
        test_file_section(c, 13, &off, &size);
        int32_t was;
        memcpy(&was, c + off + 4, 4);
        if (k == 1 && was == 0) nodes[1] = 1;
        memcpy(c + off + 4, &nodes[k], 4);
        test_file_reseal(c, 13);
        ASSERT_EQ(kiln_engine_load_memory(c, n, &e), KILN_EFORMAT);
        ASSERT_CONTAINS(kiln_errmsg(), "section DIMNAMES (file offset");
        ASSERT_CONTAINS(kiln_errmsg(), k ? "not an input dim symbol" : "dim name node");
    }

    /* another device: patch the signature's architecture */
    memcpy(c, buf, n);
    uint32_t siglen;
    memcpy(&siglen, c + 24, 4);
    ASSERT(siglen >= 3);
    c[40] = c[40] == 'Q' ? 'R' : 'Q';
    kiln__file_reseal(c, n);
    ASSERT_EQ(kiln_engine_load_memory(c, n, &e), KILN_EDEVICE);
    ASSERT_CONTAINS(kiln_errmsg(), "engine built for device");

    /* intact copy still fine */
    check_intact(buf, n);
    free(c);
    free(buf);
}

/* An engine with a PLUGINS section holding an embedded plugin library
 * (tens of KiB): >= 2000 flips spread over it, all rejected. */
TEST_IMPL(flip_embedded_plugin) {
    if (access(KILN_SAMPLES_LIB, R_OK) != 0) {
        fprintf(stderr, "   skipped: %s not built\n", KILN_SAMPLES_LIB);
        return;
    }
    kiln_engine *e = build_sample_add_engine(KILN_BUILD_EMBED_PLUGINS);
    void *b;
    size_t n;
    ASSERT_OK(kiln_engine_serialize(e, &b, &n));
    kiln_engine_free(e);
    uint8_t *buf = malloc(n), *c = malloc(n);
    memcpy(buf, b, n);
    kiln_free(b);
    ASSERT_OK(kiln_engine_load_memory(buf, n, &e));
    kiln_engine_free(e);
    size_t step = n / 2500 ? n / 2500 : 1;
    uint64_t s = 555;
    int tried = 0;
    for (size_t pos = (size_t)(test_rand_u64(&s) % step); pos < n; pos += step) {
        memcpy(c, buf, n);
        c[pos] ^= (uint8_t)(1u << (test_rand_u64(&s) % 8));
        e = NULL;
        if (kiln_engine_load_memory(c, n, &e) == 0)
            TEST__FAIL("flipping byte %zu of %zu was not detected", pos, n);
        tried++;
    }
    ASSERT(tried >= 2000);
    fprintf(stderr, "   %d corrupted images of %zu bytes rejected\n", tried, n);
    free(c);
    free(buf);
}

TEST_LIST(TEST_ENTRY(flip_every_byte), TEST_ENTRY(truncate_everywhere), TEST_ENTRY(files_on_disk),
          TEST_ENTRY(specific_errors), TEST_ENTRY(flip_embedded_plugin))
