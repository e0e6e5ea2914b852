/*
 * test_samples_net.c — the sample plugin library through the public API,
 * against naive references written here, plus the CLI's .npy codec.
 *
 *   - circ_pad for 1..4 padded dims, each tactic version, FP32/FP16, checked
 *     against torch semantics written as index arithmetic on coordinates;
 *   - circ_pad errors (pads larger than the dim, odd pads count);
 *   - non_zero with N from the data, incl. N = 0 and N = numel;
 *   - inplace_add through two chained aliased layers;
 *   - npy write/read round trip for every dtype, v2 headers, malformed files.
 */
#include <dlfcn.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "test.h"

#include "../samples/samples.h"
#include "../tools/npy.c"

static kiln_samples_network_fn net_fn;

static void load_samples(void) {
    if (net_fn) return;
    ASSERT_OK(kiln_registry_load_library(KILN_SAMPLES_LIB));
    void *h = dlopen(KILN_SAMPLES_LIB, RTLD_NOW | RTLD_NOLOAD);
    ASSERT(h != NULL);
    *(void **)&net_fn = dlsym(h, KILN_SAMPLES_NETWORK_SYMBOL);
    ASSERT(net_fn != NULL);
}

static int g_unforced; /* build(): leave an op with JIT and AOT to the timed choice */
static kiln_engine *build(const char *name, const char *opts, unsigned flags) {
    kiln_network *net = NULL;
    ASSERT_OK(net_fn(name, opts, &net));
    kiln_build_config *cfg = kiln_build_config_create();
    /* circ_pad has JIT and AOT implementations: the tests force JIT unless
     * they ask otherwise (network option "aot" chooses per layer). */
    if (!g_unforced && (!opts || !strstr(opts, "aot")) &&
        !(flags & (KILN_BUILD_PREFER_AOT | KILN_BUILD_PREFER_JIT)))
        flags |= KILN_BUILD_PREFER_JIT;
    kiln_build_config_set_flags(cfg, flags);
    kiln_build_config_set_threads(cfg, 2);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

static float *random_floats(size_t n, uint64_t *s) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = test_randf(s, -3.0f, 3.0f);
    return v;
}

/* torch CircularPad: out[o] = in[(o - before) mod n] in every padded dim. */
static void circ_ref(const float *x, int ndim, const int64_t *dims, const int64_t *pads, int npads,
                     float *y, int64_t *odims) {
    int64_t before[8] = {0};
    for (int d = 0; d < ndim; d++) odims[d] = dims[d];
    for (int j = 0; j < npads / 2; j++) {
        before[ndim - 1 - j] = pads[2 * j];
        odims[ndim - 1 - j] += pads[2 * j] + pads[2 * j + 1];
    }
    int64_t total = 1, c[8] = {0};
    for (int d = 0; d < ndim; d++) total *= odims[d];
    for (int64_t k = 0; k < total; k++) {
        int64_t src = 0;
        for (int d = 0; d < ndim; d++) {
            int64_t i = c[d] - before[d];
            while (i < 0) i += dims[d];
            while (i >= dims[d]) i -= dims[d];
            src = src * dims[d] + i;
        }
        y[k] = x[src];
        for (int d = ndim - 1; d >= 0; d--) {
            if (++c[d] < odims[d]) break;
            c[d] = 0;
        }
    }
}

static void check_circ_pad(const char *shape, const char *pads_s, const char *version_opt,
                           unsigned flags) {
    char opts[256];
    snprintf(opts, sizeof opts, "shape=%s,pads=%s%s%s", shape, pads_s, version_opt ? "," : "",
             version_opt ? version_opt : "");
    fprintf(stderr, "   circ_pad %s%s\n", opts, flags & KILN_BUILD_FP16 ? " fp16" : "");
    int64_t dims[8], pads[8];
    int ndim = 0, npads = 0;
    for (const char *p = shape; *p;) dims[ndim++] = strtoll(p, (char **)&p, 10), p += *p == 'x';
    for (const char *p = pads_s; *p;) pads[npads++] = strtoll(p, (char **)&p, 10), p += *p == ':';
    kiln_engine *e = build("circ_pad", opts, flags);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 2, &ctx));
    uint64_t seed = (uint64_t)getpid() * 7919u + 17;
    size_t n = 1, on = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
    float *a = random_floats(n, &seed), *b = random_floats(n, &seed);
    int64_t odims[8];
    float *ra = malloc(n * 64 * sizeof(float)), *rb = malloc(n * 64 * sizeof(float));
    circ_ref(a, ndim, dims, pads, npads, ra, odims);
    circ_ref(b, ndim, dims, pads, npads, rb, odims);
    for (int d = 0; d < ndim; d++) on *= (size_t)odims[d];
    float *ya = malloc(on * sizeof(float)), *yb = malloc(on * sizeof(float));
    memset(ya, 0xFF, on * sizeof(float));
    memset(yb, 0xFF, on * sizeof(float));
    ASSERT_OK(kiln_context_bind(ctx, "a", a, n * sizeof(float)));
    ASSERT_OK(kiln_context_bind(ctx, "b", b, n * sizeof(float)));
    ASSERT_OK(kiln_context_bind(ctx, "pa", ya, on * sizeof(float)));
    ASSERT_OK(kiln_context_bind(ctx, "pb", yb, on * sizeof(float)));
    ASSERT_OK(kiln_context_run(ctx));
    int ond = 0;
    int64_t got[8];
    ASSERT_OK(kiln_context_shape(ctx, "pa", &ond, got));
    ASSERT_EQ(ond, ndim);
    for (int d = 0; d < ndim; d++) ASSERT_EQ(got[d], odims[d]);
    double tol = flags & KILN_BUILD_FP16 ? 3e-3 : 0;
    for (size_t k = 0; k < on; k++) {
        /* fp16: relative rounding 2^-11, absolute 2^-25 for subnormals */
        ASSERT_NEAR(ya[k], ra[k], tol * (fabs(ra[k]) + 1e-4));
        ASSERT_NEAR(yb[k], rb[k], tol * (fabs(rb[k]) + 1e-4));
    }
    free(a), free(b), free(ra), free(rb), free(ya), free(yb);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(circ_pad_dims) {
    load_samples();
    check_circ_pad("9", "4:9", NULL, 0);
    check_circ_pad("5x7", "3:7", "multi-tactic", 0);
    check_circ_pad("3x4x6", "0:2:4:1", "multi-tactic", 0);
    check_circ_pad("2x3x4x5", "1:0:2:3:3:1", "per-format-tactics", 0);
    check_circ_pad("2x3x4x5", "1:1:2:0:1:1:0:2", "multi-tactic", 0);
    check_circ_pad("1x2x3x4x5", "2:2:1:1:1:0:0:1", NULL, 0);
}

TEST_IMPL(circ_pad_fp16) {
    load_samples();
    check_circ_pad("2x3x8x10", "1:2:2:1", NULL, KILN_BUILD_FP16);
    check_circ_pad("2x3x8x10", "1:2:2:1", "multi-tactic", KILN_BUILD_FP16);
    check_circ_pad("2x3x8x10", "1:2:2:1", "per-format-tactics", KILN_BUILD_FP16);
}

static void expect_build_error(const char *opts, const char *needle) {
    kiln_network *net = NULL;
    kiln_engine *e = NULL;
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_PREFER_JIT);
    int rc = net_fn("circ_pad", opts, &net);
    if (rc == 0) rc = kiln_build(net, cfg, &e, NULL);
    ASSERT(rc < 0);
    ASSERT(e == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), needle);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
}

TEST_IMPL(circ_pad_errors) {
    load_samples();
    expect_build_error("shape=3x4,pads=5:0", "exceed its size 4");
    expect_build_error("shape=3x4,pads=1:1:1", "pads");
    expect_build_error("shape=3x4,pads=1:1:1:1:1:1", "rank 2");
}

/* circ_pad has both a JIT impl and an AOT kernel: with no choice the build
 * times both and takes the faster, which must match the naive reference
 * whichever it is; --prefer-aot builds the kernel, which must match too. */
TEST_IMPL(circ_pad_jit_or_aot) {
    load_samples();
    g_unforced = 1;
    check_circ_pad("3x4x6", "0:2:4:1", NULL, 0);
    check_circ_pad("2x3x4x5", "1:1:2:0:1:1:0:2", "multi-tactic", 0);
    g_unforced = 0;
    kiln_network *net = NULL;
    kiln_engine *e = NULL;
    ASSERT_OK(net_fn("circ_pad", NULL, &net));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_PREFER_AOT | KILN_BUILD_PREFER_JIT);
    ASSERT_EQ(kiln_build(net, cfg, &e, NULL), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "both set");
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    /* The AOT engine really holds kernels (inspect says so per layer). */
    kiln_engine *ea = build("circ_pad", NULL, KILN_BUILD_PREFER_AOT);
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    ASSERT(f != NULL);
    ASSERT_OK(kiln_engine_inspect(ea, f));
    fclose(f);
    ASSERT_CONTAINS(text, "sample::circ_pad v1  AOT");
    free(text);
    kiln_engine_free(ea);
    check_circ_pad("3x4x6", "0:2:4:1", NULL, KILN_BUILD_PREFER_AOT);
    check_circ_pad("2x3x4x5", "1:1:2:0:1:1:0:2", "multi-tactic", KILN_BUILD_PREFER_AOT);
}

TEST_IMPL(non_zero_counts) {
    load_samples();
    kiln_engine *e = build("non_zero", "shape=5x9", 0);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    uint64_t seed = (uint64_t)getpid() + 99;
    float x[45];
    for (int mode = 0; mode < 3; mode++) { /* random, none nonzero, all nonzero */
        for (int k = 0; k < 45; k++) {
            float v = test_randf(&seed, 0.5f, 2.0f);
            x[k] = mode == 1 ? 0.0f : mode == 2 ? v : (test_rand_u64(&seed) % 2 ? v : 0.0f);
        }
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
        ASSERT_OK(kiln_context_run(ctx));
        const int32_t *idx = kiln_context_output(ctx, "indices");
        const int64_t *cnt = kiln_context_output(ctx, "count");
        int64_t want = 0;
        for (int k = 0; k < 45; k++) want += x[k] != 0.0f;
        ASSERT(cnt != NULL);
        ASSERT_EQ(*cnt, want);
        int nd = 0;
        int64_t dims[8];
        ASSERT_OK(kiln_context_shape(ctx, "indices", &nd, dims));
        ASSERT_EQ(nd, 2);
        ASSERT_EQ(dims[0], want);
        ASSERT_EQ(dims[1], 2);
        for (int k = 0, n = 0; k < 45; k++)
            if (x[k] != 0.0f) {
                ASSERT_EQ(idx[2 * n], k / 9);
                ASSERT_EQ(idx[2 * n + 1], k % 9);
                n++;
            }
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(inplace_chain) {
    load_samples();
    kiln_engine *e = build("inplace_add", NULL, 0);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    uint64_t seed = (uint64_t)getpid() + 3;
    float x[64], y[64], z[64], x0[64];
    for (int k = 0; k < 64; k++) x0[k] = x[k] = test_randf(&seed, -1, 1), y[k] = test_randf(&seed, -1, 1);
    memset(z, 0xFF, sizeof z);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_bind(ctx, "z", z, sizeof z));
    ASSERT_OK(kiln_context_run(ctx));
    for (int k = 0; k < 64; k++) {
        ASSERT_NEAR(z[k], (x0[k] + y[k]) + y[k], 1e-6);
        ASSERT_EQ(memcmp(&x[k], &x0[k], sizeof(float)), 0); /* the user's input is untouched */
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(npy_roundtrip) {
    static const kiln_dtype types[] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_F64, KILN_DTYPE_I8,
                                       KILN_DTYPE_I16, KILN_DTYPE_I32, KILN_DTYPE_I64, KILN_DTYPE_U8,
                                       KILN_DTYPE_U16, KILN_DTYPE_U32, KILN_DTYPE_U64, KILN_DTYPE_BOOL};
    char path[256];
    snprintf(path, sizeof path, "%s/test_npy_%d.npy", KILN_BINARY_DIR, (int)getpid());
    uint64_t seed = (uint64_t)getpid() * 31 + 5;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        int64_t dims[3] = {2, 3, 5};
        size_t es = kiln_dtype_size(types[t]);
        unsigned char data[30 * 8];
        for (size_t k = 0; k < sizeof data; k++) data[k] = (unsigned char)test_rand_u64(&seed);
        if (types[t] == KILN_DTYPE_BOOL)
            for (int k = 0; k < 30; k++) data[k] &= 1;
        if (types[t] == KILN_DTYPE_F16) /* avoid NaN payloads: compare bytes */
            for (int k = 0; k < 30; k++) data[2 * k + 1] &= 0x3F;
        for (int nd = 0; nd <= 3; nd++) {
            ASSERT_EQ(npy_write(path, types[t], nd, dims, data), 0);
            cli_tensor r;
            char err[256];
            ASSERT(npy_read(path, &r, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
            ASSERT_EQ(r.dtype, types[t]);
            ASSERT_EQ(r.ndim, nd);
            size_t n = 1;
            for (int d = 0; d < nd; d++) {
                ASSERT_EQ(r.dims[d], dims[d]);
                n *= (size_t)dims[d];
            }
            ASSERT_EQ(r.bytes, n * es);
            ASSERT_EQ(memcmp(r.data, data, n * es), 0);
            free(r.data);
            /* data starts 64-byte aligned */
            FILE *f = fopen(path, "rb");
            fseek(f, 0, SEEK_END);
            ASSERT_EQ((ftell(f) - (long)(n * es)) % 64, 0);
            fclose(f);
        }
    }
    unlink(path);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ASSERT(f != NULL);
    ASSERT_EQ(fwrite(p, 1, n, f), n);
    fclose(f);
}

TEST_IMPL(npy_v2_and_errors) {
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/test_npy2_%d.npy", KILN_BINARY_DIR, (int)getpid());
    /* A version 2.0 header written by hand: '<i8', shape (3,). */
    const char *dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
    unsigned char buf[256];
    size_t hl = strlen(dict) + 1, pre = 12;
    size_t pad = (64 - (pre + hl) % 64) % 64;
    memcpy(buf, "\x93NUMPY\x02\x00", 8);
    uint32_t len = (uint32_t)(hl + pad);
    for (int i = 0; i < 4; i++) buf[8 + i] = (unsigned char)(len >> (8 * i));
    memcpy(buf + pre, dict, hl - 1);
    memset(buf + pre + hl - 1, ' ', pad);
    buf[pre + hl - 1 + pad] = '\n';
    int64_t vals[3] = {-5, 1LL << 40, 7};
    memcpy(buf + pre + len, vals, sizeof vals);
    write_bytes(path, buf, pre + len + sizeof vals);
    cli_tensor t;
    ASSERT_EQ(npy_read(path, &t, err, sizeof err), 0);
    ASSERT_EQ(t.dtype, KILN_DTYPE_I64);
    ASSERT_EQ(t.ndim, 1);
    ASSERT_EQ(t.dims[0], 3);
    ASSERT_EQ(((int64_t *)t.data)[1], 1LL << 40);
    free(t.data);
    /* truncated data */
    write_bytes(path, buf, pre + len + 8);
    ASSERT_EQ(npy_read(path, &t, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "needs 24 data bytes, the file has 8 after the");
    /* big-endian, Fortran order, unknown dtype, bad magic */
    const char *bad[][2] = {
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "little-endian"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "fortran_order"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", "unsupported"},
    };
    for (int k = 0; k < 3; k++) {
        ASSERT_EQ(npy_write(path, KILN_DTYPE_F32, 1, (int64_t[]){1}, "\0\0\0\0"), 0);
        FILE *f = fopen(path, "r+b");
        fseek(f, 10, SEEK_SET);
        fwrite(bad[k][0], 1, strlen(bad[k][0]), f);
        fclose(f);
        ASSERT_EQ(npy_read(path, &t, err, sizeof err), -1);
        ASSERT_CONTAINS(err, bad[k][1]);
    }
    write_bytes(path, "PK\3\4 not npy", 12);
    ASSERT_EQ(npy_read(path, &t, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "not a .npy file");
    unlink(path);
}

/* Mutated headers and truncations never crash (ASan checks the reads). */
TEST_IMPL(npy_mutations) {
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/test_npy3_%d.npy", KILN_BINARY_DIR, (int)getpid());
    float v[6] = {1, 2, 3, 4, 5, 6};
    ASSERT_EQ(npy_write(path, KILN_DTYPE_F32, 2, (int64_t[]){2, 3}, v), 0);
    unsigned char orig[256];
    FILE *f = fopen(path, "rb");
    size_t n = fread(orig, 1, sizeof orig, f);
    fclose(f);
    ASSERT(n > 64);
    uint64_t seed = (uint64_t)getpid() * 13 + 1;
    static const char alphabet[] = "()',:<>|=fiub0123456789 TrueFals{}xL";
    int ok = 0;
    for (int it = 0; it < 2000; it++) {
        unsigned char m[256];
        memcpy(m, orig, n);
        size_t len = n;
        int edits = 1 + (int)(test_rand_u64(&seed) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(test_rand_u64(&seed) % n);
            m[at] = test_rand_u64(&seed) % 2 ? (unsigned char)alphabet[test_rand_u64(&seed) % (sizeof alphabet - 1)]
                                              : (unsigned char)test_rand_u64(&seed);
        }
        if (test_rand_u64(&seed) % 4 == 0) len = (size_t)(test_rand_u64(&seed) % n);
        write_bytes(path, m, len);
        cli_tensor t;
        int rc = npy_read(path, &t, err, sizeof err);
        ASSERT(rc == 0 || rc == -1);
        if (rc == 0) {
            ok++;
            free(t.data);
        } else {
            ASSERT(err[0] != 0);
        }
    }
    fprintf(stderr, "   %d of 2000 mutated files still parsed\n", ok);
    unlink(path);
}

TEST_LIST(TEST_ENTRY(circ_pad_dims), TEST_ENTRY(circ_pad_fp16), TEST_ENTRY(circ_pad_errors),
          TEST_ENTRY(circ_pad_jit_or_aot),
          TEST_ENTRY(non_zero_counts), TEST_ENTRY(inplace_chain), TEST_ENTRY(npy_roundtrip),
          TEST_ENTRY(npy_v2_and_errors), TEST_ENTRY(npy_mutations))
