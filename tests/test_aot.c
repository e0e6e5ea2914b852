/*
 * test_aot.c — AOT kernels: compile to bytes, load from memory, signature
 * checks, engine records, launch on the thread pool; so_load from bytes
 * and tampered bytes.
 */
#include "kiln_int.h"
#include "test.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A private compile cache for this test process, removed at exit. */
static char g_cache[256];
static char g_log[8192];

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

static void cleanup(void) {
    if (g_cache[0]) nftw(g_cache, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void capture(void *ud, kiln_log_level level, const char *msg) {
    (void)ud;
    (void)level;
    size_t n = strlen(g_log);
    snprintf(g_log + n, sizeof g_log - n, "%s\n", msg);
}

static void setup(void) {
    if (!g_cache[0]) {
        atexit(cleanup);
        snprintf(g_cache, sizeof g_cache, "%s/kiln-test-aot-XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        ASSERT(mkdtemp(g_cache) != NULL);
        setenv("KILN_CACHE_DIR", g_cache, 1);
    }
    g_log[0] = 0;
    kiln_log_set(KILN_LOG_VERBOSE, capture, NULL);
}

/* y[i] = x[i] * s + b (f32 scalar s, i64 scalar b), over [0, extent) split
 * by (ith, nth); also counts calls in a global to tell instances apart. */
static const char axpb_src[] =
    "#include <kiln/plugin.h>\n"
    "int calls;\n"
    "int axpb_calls(void) { return calls; }\n"
    "void axpb(const kiln_aot_args *a, int ith, int nth) {\n"
    "    const float *x = a->in[0];\n"
    "    float *y = a->out[0];\n"
    "    float s = (float)a->f64[0];\n"
    "    float b = (float)a->i64[1];\n"
    "    int64_t lo, hi;\n"
    "    kiln_split_range(a->extent, ith, nth, &lo, &hi);\n"
    "    for (int64_t i = lo; i < hi; i++) y[i] = x[i] * s + b;\n"
    "    __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);\n"
    "}\n";

static const char other_src[] =
    "#include <kiln/plugin.h>\n"
    "int axpb_calls(void) { return 1000; }\n"
    "void axpb(const kiln_aot_args *a, int ith, int nth) { (void)a; (void)ith; (void)nth; }\n";

static void compile_axpb(uint8_t **so, size_t *n) {
    char *flags = NULL;
    ASSERT_OK(kiln__aot_compile(axpb_src, "axpb", so, n, &flags));
    ASSERT(*n > 64);
    ASSERT(flags != NULL);
    ASSERT_CONTAINS(flags, "-O2");
    ASSERT_CONTAINS(flags, "-fPIC");
    ASSERT_CONTAINS(flags, "-shared");
    kiln__free(flags);
}

TEST_IMPL(aot_compile_load_bytes) {
    setup();
    uint8_t *so = NULL;
    size_t n = 0;
    compile_axpb(&so, &n);
    void *h = NULL;
    ASSERT_OK(kiln__so_load_bytes(so, n, "test kernel", &h));
    ASSERT(h != NULL);
    void (*fn)(const kiln_aot_args *, int, int) =
        (void (*)(const kiln_aot_args *, int, int))dlsym(h, "axpb");
    ASSERT(fn != NULL);
    enum { N = 1000 };
    float x[N], y[N];
    uint64_t seed = 12345;
    for (int i = 0; i < N; i++) {
        x[i] = test_randf(&seed, -4, 4);
        y[i] = NAN;
    }
    int64_t i64[2] = {0, -3};
    double f64[2] = {1.75, 0};
    void *in[1] = {x}, *out[1] = {y};
    kiln_aot_args a = {in, out, i64, f64, N};
    /* Three slices in any order cover everything exactly once. */
    fn(&a, 2, 3);
    fn(&a, 0, 3);
    fn(&a, 1, 3);
    for (int i = 0; i < N; i++) ASSERT_NEAR(y[i], x[i] * 1.75f - 3.0f, 1e-6);

    /* A second copy of the same bytes is an independent object (its own
     * globals), and the names of live objects never collide. */
    void *h2 = NULL;
    ASSERT_OK(kiln__so_load_bytes(so, n, "test kernel 2", &h2));
    ASSERT(h2 != h);
    int (*calls1)(void) = (int (*)(void))dlsym(h, "axpb_calls");
    int (*calls2)(void) = (int (*)(void))dlsym(h2, "axpb_calls");
    ASSERT(calls1 && calls2);
    ASSERT_EQ(calls1(), 3);
    ASSERT_EQ(calls2(), 0);
    kiln__so_unload(h);
    kiln__so_unload(h2);

    /* Unload, then load different bytes: we must get the new object, not
     * the old one by a reused fd name. */
    uint8_t *so2 = NULL;
    size_t n2 = 0;
    ASSERT_OK(kiln__aot_compile(other_src, "axpb", &so2, &n2, NULL));
    void *h3 = NULL;
    ASSERT_OK(kiln__so_load_bytes(so2, n2, "other kernel", &h3));
    int (*calls3)(void) = (int (*)(void))dlsym(h3, "axpb_calls");
    ASSERT(calls3 != NULL);
    ASSERT_EQ(calls3(), 1000);
    kiln__so_unload(h3);
    kiln__free(so);
    kiln__free(so2);
}

/* Without memfd, the object goes through a private directory that is
 * gone right after dlopen. */
TEST_IMPL(aot_so_load_file_fallback) {
    setup();
    uint8_t *so = NULL;
    size_t n = 0;
    compile_axpb(&so, &n);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/rt-XXXXXX", g_cache);
    ASSERT(mkdtemp(dir) != NULL);
    const char *old_rt = getenv("XDG_RUNTIME_DIR");
    char saved[512] = "";
    if (old_rt) snprintf(saved, sizeof saved, "%s", old_rt);
    setenv("XDG_RUNTIME_DIR", dir, 1);
    setenv("KILN_SO_NO_MEMFD", "1", 1);
    void *h1 = NULL, *h2 = NULL;
    ASSERT_OK(kiln__so_load_bytes(so, n, "fallback", &h1));
    ASSERT_OK(kiln__so_load_bytes(so, n, "fallback 2", &h2));
    ASSERT(h1 != h2);
    unsetenv("KILN_SO_NO_MEMFD");
    if (old_rt) setenv("XDG_RUNTIME_DIR", saved, 1);
    else unsetenv("XDG_RUNTIME_DIR");
    /* Nothing left in the directory. */
    DIR *d = opendir(dir);
    ASSERT(d != NULL);
    struct dirent *e;
    int entries = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) entries++;
    closedir(d);
    ASSERT_EQ(entries, 0);
    int (*calls1)(void) = (int (*)(void))dlsym(h1, "axpb_calls");
    void (*fn)(const kiln_aot_args *, int, int) =
        (void (*)(const kiln_aot_args *, int, int))dlsym(h1, "axpb");
    ASSERT(calls1 && fn);
    float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
    void *in[1] = {x}, *out[1] = {y};
    int64_t i64[2] = {0, 1};
    double f64[2] = {2, 0};
    kiln_aot_args a = {in, out, i64, f64, 3};
    fn(&a, 0, 1);
    ASSERT_NEAR(y[2], 7, 0);
    ASSERT_EQ(calls1(), 1);
    kiln__so_unload(h1);
    kiln__so_unload(h2);
    rmdir(dir);
    kiln__free(so);
}

TEST_IMPL(aot_tampered_bytes) {
    setup();
    uint8_t *so = NULL;
    size_t n = 0;
    compile_axpb(&so, &n);
    uint8_t *bad = malloc(n);
    void *h = (void *)1;

    /* Magic. */
    memcpy(bad, so, n);
    bad[1] = 'X';
    ASSERT_EQ(kiln__so_load_bytes(bad, n, "kernel k", &h), KILN_EFORMAT);
    ASSERT(h == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "kernel k: not an ELF object");

    /* Class / machine / type. */
    memcpy(bad, so, n);
    bad[EI_CLASS] = bad[EI_CLASS] == ELFCLASS64 ? ELFCLASS32 : ELFCLASS64;
    ASSERT_EQ(kiln__so_load_bytes(bad, n, "kernel k", &h), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "ELF class");
    memcpy(bad, so, n);
    bad[18] ^= 0x5a; /* e_machine (low byte) */
    ASSERT_EQ(kiln__so_load_bytes(bad, n, "kernel k", &h), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "machine");
    memcpy(bad, so, n);
    bad[16] = ET_EXEC;
    ASSERT_EQ(kiln__so_load_bytes(bad, n, "kernel k", &h), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "shared object");

    /* Truncated at many lengths: always an error, never a crash. */
    for (size_t len = 0; len < n; len += (len < 256 ? 7 : n / 13 + 1)) {
        h = (void *)1;
        int rc = kiln__so_load_bytes(so, len, "truncated", &h);
        ASSERT(rc == KILN_EFORMAT || rc == KILN_EIO);
        ASSERT(h == NULL);
        ASSERT_CONTAINS(kiln_errmsg(), "truncated: ");
    }

    /* Program headers pointing outside the bytes. */
    memcpy(bad, so, n);
    Elf64_Ehdr eh;
    memcpy(&eh, bad, sizeof eh);
    eh.e_phoff = (Elf64_Off)n - 8;
    memcpy(bad, &eh, sizeof eh);
    ASSERT_EQ(kiln__so_load_bytes(bad, n, "kernel k", &h), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "program headers");

    ASSERT_EQ(kiln__so_load_bytes(NULL, 10, "null", &h), KILN_EINVAL);
    free(bad);
    kiln__free(so);
}

TEST_IMPL(aot_compile_errors) {
    setup();
    uint8_t *so = (uint8_t *)1;
    size_t n = 1;
    /* Syntax error: the compiler's file:line message comes back. */
    int rc = kiln__aot_compile("#include <kiln/plugin.h>\n"
                               "void k(const kiln_aot_args *a, int ith, int nth) {\n"
                               "    int x = ;\n"
                               "}\n",
                               "k", &so, &n, NULL);
    ASSERT_EQ(rc, KILN_ECOMPILE);
    ASSERT(so == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "AOT kernel k: compiler failed");
    ASSERT_CONTAINS(kiln_errmsg(), ".c:3:"); /* the kept source, line 3 */
    ASSERT_CONTAINS(kiln_errmsg(), "(the kernel source stays in ");
    ASSERT_CONTAINS(kiln_errmsg(), "error");

    /* Entry missing (static). */
    rc = kiln__aot_compile("#include <kiln/plugin.h>\n"
                           "static void k(const kiln_aot_args *a, int ith, int nth) {"
                           " (void)a; (void)ith; (void)nth; }\n"
                           "void other(void) { k(0, 0, 1); }\n",
                           "k", &so, &n, NULL);
    ASSERT_EQ(rc, KILN_ECOMPILE);
    ASSERT_CONTAINS(kiln_errmsg(), "defines no function 'k'");

    /* Not self-contained: a call into something that only a plugin
     * library would provide is caught at build time. */
    rc = kiln__aot_compile("#include <kiln/plugin.h>\n"
                           "void k(const kiln_aot_args *a, int ith, int nth) {\n"
                           "    (void)ith; (void)nth;\n"
                           "    kiln_set_error(1, \"%d\", (int)a->extent);\n"
                           "}\n",
                           "k", &so, &n, NULL);
    ASSERT_EQ(rc, KILN_ECOMPILE);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_set_error");

    rc = kiln__aot_compile("void k(void) {}", "not an ident", &so, &n, NULL);
    ASSERT_EQ(rc, KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "not a C identifier");
}

static kiln__op fake_op(const kiln_quick_op *q) {
    kiln__op op;
    memset(&op, 0, sizeof op);
    op.ns = (char *)q->ns;
    op.name = (char *)q->name;
    op.version = q->version;
    op.quick = q;
    return op;
}

TEST_IMPL(aot_signature_check) {
    setup();
    kiln_exprs *x = kiln__exprs_create();
    kiln_quick_op q = {.ns = "sample", .name = "circ_pad", .version = 1,
                       .aot_signature = "i64, i64,f32"};
    kiln__op op = fake_op(&q);
    kiln_aot_kernel k;
    memset(&k, 0, sizeof k);
    k.source = axpb_src;
    k.entry = "axpb";
    k.extent = kiln_expr_sym(x, "N");
    k.nscalars = 3;
    k.scalar_types[0] = KILN_SCALAR_I64;
    k.scalar_types[1] = KILN_SCALAR_I64;
    k.scalar_types[2] = KILN_SCALAR_F32;
    k.scalars[0] = kiln_expr_const(x, 4);
    k.scalars[1] = kiln_expr_sym(x, "N");
    k.fscalars[2] = 0.5;
    ASSERT_OK(kiln__aot_check(&op, &k));

    /* Wrong type at index 2. */
    k.scalar_types[2] = KILN_SCALAR_I64;
    k.scalars[2] = kiln_expr_const(x, 1);
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_STR_EQ(kiln_errmsg(), "op sample::circ_pad v1: aot kernel scalar 2 is i64, "
                                 "signature says f32");
    k.scalar_types[2] = KILN_SCALAR_F32;
    k.scalar_types[0] = KILN_SCALAR_F32;
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "scalar 0 is f32, signature says i64");
    k.scalar_types[0] = KILN_SCALAR_I32;
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "scalar 0 is i32, signature says i64");
    k.scalar_types[0] = (kiln_scalar_type)9;
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "not a kiln_scalar_type");
    k.scalar_types[0] = KILN_SCALAR_I64;

    /* Count. */
    k.nscalars = 2;
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "op sample::circ_pad v1: aot kernel has 2 scalars, "
                                   "signature \"i64, i64,f32\" says 3");
    k.nscalars = 3;

    /* Missing expression, extent, entry. */
    k.scalars[1] = NULL;
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "scalar 1 (i64) has no expression");
    k.scalars[1] = kiln_expr_sym(x, "N");
    k.extent = NULL;
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "no extent");
    k.extent = kiln_expr_sym(x, "N");
    k.entry = "9x";
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "entry '9x'");
    k.entry = "axpb";
    ASSERT_OK(kiln__aot_check(&op, &k));

    /* A malformed signature names the bad token. */
    q.aot_signature = "i64,double";
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "argument 1 is 'double', expected i32, i64 or f32");
    /* No signature = no scalars. */
    q.aot_signature = NULL;
    ASSERT_EQ(kiln__aot_check(&op, &k), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "has 3 scalars, signature \"\" says 0");
    kiln__exprs_free(x);
}

/* Node indices for the test: "N" -> 0, const -> 1 + value (tiny table). */
static int32_t test_node_of(void *ud, const kiln_expr *e) {
    (void)ud;
    int64_t v;
    if (kiln_expr_is_const(e, &v)) return (int32_t)(1 + v);
    if (e->op == KILN_EXPR_SYM && strcmp(e->name, "N") == 0) return 0;
    kiln__err(KILN_EINVAL, "unexpected expression");
    return -1;
}

static void build_axpb_aot(kiln__aot *a, kiln_exprs *x) {
    kiln_quick_op q = {.ns = "test", .name = "axpb", .version = 2, .aot_signature = "f32,i64"};
    kiln__op op = fake_op(&q);
    kiln_aot_kernel k;
    memset(&k, 0, sizeof k);
    k.source = axpb_src;
    k.entry = "axpb";
    k.extent = kiln_expr_sym(x, "N");
    k.nscalars = 2;
    k.scalar_types[0] = KILN_SCALAR_F32;
    k.fscalars[0] = -0.5;
    k.scalar_types[1] = KILN_SCALAR_I64;
    k.scalars[1] = kiln_expr_const(x, 5);
    ASSERT_OK(kiln__aot_from_kernel(&op, &k, test_node_of, NULL, a));
    ASSERT_STR_EQ(a->entry, "axpb");
    ASSERT_EQ(a->extent, 0);
    ASSERT_EQ(a->scalars[1], 6);
    ASSERT_STR_EQ(a->cpu_sig, kiln_cpu_signature());

    /* A failing check is prefixed by nothing but names the op. */
    k.scalar_types[0] = KILN_SCALAR_I64;
    k.scalars[0] = kiln_expr_const(x, 1);
    kiln__aot bad;
    ASSERT_EQ(kiln__aot_from_kernel(&op, &k, test_node_of, NULL, &bad), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "op test::axpb v2: aot kernel scalar 0 is i64, signature "
                                   "says f32");
}

TEST_IMPL(aot_launch_threads) {
    setup();
    kiln_exprs *x = kiln__exprs_create();
    kiln__aot a;
    build_axpb_aot(&a, x);
    kiln__exprs_free(x);

    enum { N = 10007 };
    float *in = malloc(N * sizeof *in), *out = malloc(N * sizeof *out);
    uint64_t seed = 99;
    for (int i = 0; i < N; i++) in[i] = test_randf(&seed, -10, 10);
    int64_t nodes[8] = {N, 0, 0, 0, 0, 0, 5, 0};
    void *ins[1] = {in}, *outs[1] = {out};
    for (int threads = 1; threads <= 4; threads += 3) {
        kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = kiln__pool_create(threads)};
        memset(out, 0xff, N * sizeof *out); /* NaN poison */
        ASSERT_OK(kiln__aot_launch(&a, &ex, ins, outs, nodes));
        for (int i = 0; i < N; i++) ASSERT_NEAR(out[i], in[i] * -0.5f + 5.0f, 1e-5);
        /* A shorter extent touches only its prefix. */
        memset(out, 0xff, N * sizeof *out);
        int64_t nodes2[8] = {17, 0, 0, 0, 0, 0, 5, 0};
        ASSERT_OK(kiln__aot_launch(&a, &ex, ins, outs, nodes2));
        for (int i = 0; i < 17; i++) ASSERT_NEAR(out[i], in[i] * -0.5f + 5.0f, 1e-5);
        ASSERT(isnan(out[17]));
        kiln__pool_free(ex.pool);
    }
    /* Negative extent is an error naming the kernel. */
    int64_t neg[8] = {-1, 0, 0, 0, 0, 0, 5, 0};
    ASSERT_EQ(kiln__aot_launch(&a, NULL, ins, outs, neg), KILN_EKERNEL);
    ASSERT_CONTAINS(kiln_errmsg(), "axpb");
    kiln__aot_free(&a);
    free(in);
    free(out);
}

TEST_IMPL(aot_record_roundtrip) {
    setup();
    kiln_exprs *x = kiln__exprs_create();
    kiln__aot a;
    build_axpb_aot(&a, x);
    kiln__exprs_free(x);
    size_t size = 0;
    ASSERT_OK(kiln__aot_serialize(&a, NULL, &size));
    ASSERT(size > a.so_size);
    uint8_t *buf = malloc(size);
    size_t got = size;
    ASSERT_OK(kiln__aot_serialize(&a, buf, &got));
    ASSERT_EQ(got, size);

    kiln__aot b;
    ASSERT_OK(kiln__aot_deserialize(&b, buf, size, 8));
    ASSERT_STR_EQ(b.entry, "axpb");
    ASSERT_STR_EQ(b.cpu_sig, a.cpu_sig);
    ASSERT_EQ(b.extent, a.extent);
    ASSERT_EQ(b.nscalars, 2);
    ASSERT_EQ(b.scalar_types[0], KILN_SCALAR_F32);
    ASSERT_NEAR(b.fscalars[0], -0.5, 0);
    ASSERT_EQ(b.scalars[1], 6);
    ASSERT_EQ(b.so_size, a.so_size);
    ASSERT(memcmp(b.so, a.so, a.so_size) == 0);
    /* The reloaded kernel runs. */
    float in[5] = {1, 2, 3, 4, 5}, out[5];
    memset(out, 0xff, sizeof out);
    void *ins[1] = {in}, *outs[1] = {out};
    int64_t nodes[8] = {5, 0, 0, 0, 0, 0, 5, 0};
    ASSERT_OK(kiln__aot_launch(&b, NULL, ins, outs, nodes));
    for (int i = 0; i < 5; i++) ASSERT_NEAR(out[i], in[i] * -0.5f + 5, 1e-6);
    kiln__aot_free(&b);

    /* Every truncation is an error naming the record. */
    for (size_t len = 0; len < size; len += (len < 200 ? 1 : 997)) {
        ASSERT_EQ(kiln__aot_deserialize(&b, buf, len, 8), KILN_EFORMAT);
        ASSERT_CONTAINS(kiln_errmsg(), "AOT kernel record");
        ASSERT(b.so == NULL && b.entry == NULL);
    }
    /* Trailing bytes, node index out of range. */
    uint8_t *big = malloc(size + 3);
    memcpy(big, buf, size);
    ASSERT_EQ(kiln__aot_deserialize(&b, big, size + 3, 8), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "3 unexpected bytes");
    ASSERT_EQ(kiln__aot_deserialize(&b, buf, size, 6), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "scalar 1 node 6");
    ASSERT_CONTAINS(kiln_errmsg(), "out of range [0, 6)");
    /* A flipped byte anywhere in the object (header, code, dynamic
     * section) is caught before the loader sees it. */
    size_t so_at = size - a.so_size;
    for (size_t off = 0; off < a.so_size; off += a.so_size / 7 + 1) {
        memcpy(big, buf, size);
        big[so_at + off] ^= 0x01;
        ASSERT_EQ(kiln__aot_deserialize(&b, big, size, 8), KILN_ECHECKSUM);
        ASSERT_CONTAINS(kiln_errmsg(), "axpb object");
        ASSERT_CONTAINS(kiln_errmsg(), "does not match the SHA-256 stored beside it: the file is damaged");
        ASSERT(b.so == NULL);
    }
    /* Bytes that are not a shared object (hash made to match) fail at
     * load with KILN_EFORMAT, not in the loader. */
    ASSERT_OK(kiln__aot_deserialize(&b, buf, size, 8));
    b.so[0] ^= 0x01;
    ASSERT_EQ(kiln__aot_launch(&b, NULL, ins, outs, nodes), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "AOT kernel axpb: not an ELF object");
    kiln__aot_free(&b);
    /* Another CPU's kernel is refused with a clear message. */
    ASSERT_OK(kiln__aot_deserialize(&b, buf, size, 8));
    kiln__free(b.cpu_sig);
    b.cpu_sig = kiln__strdup("riscv64:v");
    ASSERT_EQ(kiln__aot_load(&b), KILN_EDEVICE);
    ASSERT_CONTAINS(kiln_errmsg(), "compiled for CPU \"riscv64:v\"");
    kiln__aot_free(&b);

    free(big);
    free(buf);
    kiln__aot_free(&a);
}

/* Kernels are cached like plugins: the second compile of the same source
 * and flags reads the cache; a damaged entry is recompiled, not loaded. */
TEST_IMPL(aot_compile_cache) {
    setup();
    uint8_t *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    static const char src[] = "#include <kiln/plugin.h>\n"
                              "void cached_k(const kiln_aot_args *a, int ith, int nth) {\n"
                              "    (void)ith; (void)nth; ((float *)a->out[0])[0] = 7.5f;\n"
                              "}\n";
    ASSERT_OK(kiln__aot_compile(src, "cached_k", &a, &na, NULL));
    ASSERT_CONTAINS(g_log, "compile cache miss");
    g_log[0] = 0;
    ASSERT_OK(kiln__aot_compile(src, "cached_k", &b, &nb, NULL));
    ASSERT_CONTAINS(g_log, "compile cache hit");
    ASSERT_EQ(na, nb);
    ASSERT(memcmp(a, b, na) == 0);
    /* Damage the entry (one byte deep inside the object). */
    DIR *d = opendir(g_cache);
    ASSERT(d != NULL);
    struct dirent *e;
    char path[1024] = "";
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "aot-cached_k-", 13) && strstr(e->d_name, ".bin")) /* not the kept .c */
            snprintf(path, sizeof path, "%s/%s", g_cache, e->d_name);
    closedir(d);
    ASSERT(path[0] != 0);
    FILE *f = fopen(path, "r+b");
    ASSERT(f != NULL);
    ASSERT(fseek(f, (long)(32 + na / 2), SEEK_SET) == 0);
    int ch = fgetc(f);
    ASSERT(fseek(f, (long)(32 + na / 2), SEEK_SET) == 0);
    fputc(ch ^ 0x40, f);
    fclose(f);
    g_log[0] = 0;
    ASSERT_OK(kiln__aot_compile(src, "cached_k", &c, &nc, NULL));
    ASSERT_CONTAINS(g_log, "is damaged; recompiling");
    ASSERT_EQ(nc, na);
    ASSERT(memcmp(a, c, na) == 0);
    void *h = NULL;
    ASSERT_OK(kiln__so_load_bytes(c, nc, "cached", &h));
    void (*fn)(const kiln_aot_args *, int, int) =
        (void (*)(const kiln_aot_args *, int, int))dlsym(h, "cached_k");
    ASSERT(fn != NULL);
    float y = 0;
    void *outs[1] = {&y};
    kiln_aot_args args = {NULL, outs, NULL, NULL, 1};
    fn(&args, 0, 1);
    ASSERT_NEAR(y, 7.5, 0);
    kiln__so_unload(h);
    kiln__free(a);
    kiln__free(b);
    kiln__free(c);
}

/* The hash that guards embedded objects and keys the compile cache, on
 * the FIPS 180-2 vectors (one, two and many blocks). */
TEST_IMPL(aot_sha256_vectors) {
    setup();
    static const struct { const char *in; int rep; const char *hex; } v[] = {
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        size_t len = strlen(v[i].in) * (size_t)v[i].rep;
        char *buf = malloc(len + 1);
        for (int r = 0; r < v[i].rep; r++) memcpy(buf + r * strlen(v[i].in), v[i].in, strlen(v[i].in));
        uint8_t d[32];
        kiln__sha256(buf, len, d);
        char hex[65];
        for (int j = 0; j < 32; j++) snprintf(hex + 2 * j, 3, "%02x", d[j]);
        ASSERT_STR_EQ(hex, v[i].hex);
        free(buf);
    }
}

/* ------------------------------------------------------------ end to end */

/* gtest::affine: y = x * alpha + beta, JIT and AOT. */
static int affine_shape(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    return 0;
}
static int affine_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    float alpha = (float)kiln_attrs_float(c->attrs, "alpha");
    int64_t beta = kiln_attrs_int(c->attrs, "beta");
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = x[i] * alpha + (float)beta;
    return 0;
}
static int affine_aot(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic,
                      kiln_aot_kernel *k) {
    (void)io;
    (void)tactic;
    const kiln_expr *n = kiln_expr_const(c->x, 1);
    for (int i = 0; i < c->in[0].ndim; i++) n = kiln_expr_mul(c->x, n, c->in[0].dims[i]);
    k->source = axpb_src;
    k->entry = "axpb";
    k->extent = n;
    k->nscalars = 2;
    k->scalar_types[0] = KILN_SCALAR_F32;
    k->fscalars[0] = kiln_attrs_float(c->attrs, "alpha");
    k->scalar_types[1] = KILN_SCALAR_I64;
    k->scalars[1] = kiln_expr_const(c->x, kiln_attrs_int(c->attrs, "beta"));
    return 0;
}
static const kiln_attr_def affine_attrs[] = {
    {.name = "alpha", .type = KILN_ATTR_FLOAT, .def = "1.0"},
    {.name = "beta", .type = KILN_ATTR_INT, .def = "0"},
    {NULL},
};
static const kiln_quick_op affine_op = {
    .ns = "gtest", .name = "affine", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = affine_attrs, .shape = affine_shape, .impl = affine_impl,
    .aot = affine_aot, .aot_signature = "f32,i64",
};
static const kiln_quick_op badsig_op = {
    .ns = "gtest", .name = "badsig", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = affine_attrs, .shape = affine_shape, .impl = affine_impl,
    .aot = affine_aot, .aot_signature = "i64,i64", /* wrong: scalar 0 is f32 */
};

static int affine_timed; /* build_affine times candidates (else KILN_BUILD_NO_TIMING) */
static int build_affine(const char *op, int aot_flag, unsigned flags, int64_t beta,
                        kiln_engine **out) {
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {-1, 33};
    const char *names[2] = {"B", NULL};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, names));
    const char *ins[1] = {"x"}, *outs[1] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, op, 1, "aff", 1, ins, 1, outs);
    ASSERT(l != NULL);
    ASSERT_OK(kiln_layer_set_float(l, "alpha", 0.25));
    ASSERT_OK(kiln_layer_set_int(l, "beta", beta));
    if (aot_flag >= 0) ASSERT_OK(kiln_layer_set_aot(l, aot_flag));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, flags | (affine_timed ? 0 : KILN_BUILD_NO_TIMING));
    kiln_build_config_set_threads(cfg, 2);
    int64_t mn[2] = {1, 33}, opt[2] = {4, 33}, mx[2] = {64, 33};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 2, mn, opt, mx));
    int rc = kiln_build(net, cfg, out, NULL);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return rc;
}

static void run_affine(const kiln_engine *e, int64_t B, int64_t beta) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 3, &ctx));
    int64_t dims[2] = {B, 33};
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 2, dims));
    int64_t n = B * 33;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    uint64_t seed = 4242 + (uint64_t)B;
    for (int64_t i = 0; i < n; i++) x[i] = test_randf(&seed, -3, 3);
    memset(y, 0xff, (size_t)n * sizeof *y);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, (size_t)n * sizeof *x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, (size_t)n * sizeof *y));
    ASSERT_OK(kiln_context_run(ctx));
    for (int64_t i = 0; i < n; i++) ASSERT_NEAR(y[i], x[i] * 0.25f + (float)beta, 1e-6);
    kiln_context_free(ctx);
    free(x);
    free(y);
}

TEST_IMPL(aot_engine_end_to_end) {
    setup();
    static int registered;
    if (!registered) {
        ASSERT_OK(kiln_register_quick_op(&affine_op));
        ASSERT_OK(kiln_register_quick_op(&badsig_op));
        registered = 1;
    }
    /* Both implementations and no choice: the builder times the AOT kernel
     * against the JIT tactic and takes the faster (either is right: the
     * run checks the numbers); the verbose log shows both times. */
    kiln_engine *e = NULL;
    affine_timed = 1;
    g_log[0] = 0;
    ASSERT_OK(build_affine("gtest::affine", -1, 0, 2, &e));
    affine_timed = 0;
    ASSERT_CONTAINS(g_log, "layer 'aff' (gtest::affine v1): JIT tactic 0 ");
    ASSERT_CONTAINS(g_log, " ms vs AOT kernel ");
    ASSERT(strstr(g_log, "ms: chose JIT") || strstr(g_log, "ms: chose AOT"));
    ASSERT_EQ(e->naot, strstr(g_log, "ms: chose AOT") ? 1 : 0);
    ASSERT(e->layers[0].time_ms > 0);
    run_affine(e, 3, 2);
    kiln_engine_free(e);
    /* Forced AOT with timing: the kernel itself is timed, and its time is
     * what the engine records (kiln inspect prints it). */
    affine_timed = 1;
    g_log[0] = 0;
    ASSERT_OK(build_affine("gtest::affine", -1, KILN_BUILD_PREFER_AOT, 2, &e));
    affine_timed = 0;
    ASSERT_CONTAINS(g_log, "layer 'aff' (gtest::affine v1): AOT kernel (forced) ");
    ASSERT(strstr(g_log, "vs AOT kernel") == NULL);
    ASSERT_EQ(e->naot, 1);
    ASSERT(e->layers[0].time_ms > 0);
    run_affine(e, 3, 2);
    kiln_engine_free(e);
    /* Without timing and no choice: the JIT impl. */
    ASSERT_OK(build_affine("gtest::affine", -1, 0, 2, &e));
    ASSERT_EQ(e->naot, 0);
    kiln_engine_free(e);
    /* Both build flags at once: an error. */
    ASSERT_EQ(build_affine("gtest::affine", -1, KILN_BUILD_PREFER_JIT | KILN_BUILD_PREFER_AOT, 2, &e),
              KILN_EINVAL);
    ASSERT(e == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "KILN_BUILD_PREFER_AOT and KILN_BUILD_PREFER_JIT are both set");
    /* ... even when a per-layer choice would make the flags moot. */
    ASSERT_EQ(build_affine("gtest::affine", 1, KILN_BUILD_PREFER_JIT | KILN_BUILD_PREFER_AOT, 2, &e),
              KILN_EINVAL);
    /* PREFER_JIT: the JIT impl, no kernel; and per layer aot = 0 under
     * PREFER_AOT. */
    ASSERT_OK(build_affine("gtest::affine", -1, KILN_BUILD_PREFER_JIT, 2, &e));
    ASSERT_EQ(e->naot, 0);
    run_affine(e, 3, 2);
    kiln_engine_free(e);
    ASSERT_OK(build_affine("gtest::affine", 0, KILN_BUILD_PREFER_AOT, 2, &e));
    ASSERT_EQ(e->naot, 0);
    kiln_engine_free(e);
    /* PREFER_AOT, and per layer: the kernel is compiled and embedded. */
    ASSERT_OK(build_affine("gtest::affine", -1, KILN_BUILD_PREFER_AOT, -2, &e));
    ASSERT_EQ(e->naot, 1);
    ASSERT_STR_EQ(e->aot[0].entry, "axpb");
    run_affine(e, 5, -2);
    /* Through the engine file: same results at other batch sizes. */
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine_free(e);
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    ASSERT_EQ(e2->naot, 1);
    run_affine(e2, 1, -2);
    run_affine(e2, 64, -2);
    kiln_engine_free(e2);
    kiln_free(buf);
    ASSERT_OK(build_affine("gtest::affine", 1, KILN_BUILD_PREFER_JIT, 3, &e));
    ASSERT_EQ(e->naot, 1);
    run_affine(e, 7, 3);
    kiln_engine_free(e);

    /* A kernel that breaks its signature fails the build, naming layer,
     * op and argument. */
    ASSERT_EQ(build_affine("gtest::badsig", 1, 0, 0, &e), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "aff");
    ASSERT_CONTAINS(kiln_errmsg(), "op gtest::badsig v1: aot kernel scalar 0 is f32, "
                                   "signature says i64");
}

/* A byte of an embedded kernel changed in an engine file: loading fails
 * with a checksum error (the section's; with the section re-sealed, the
 * kernel's SHA-256), before the bytes reach the dynamic loader. */
TEST_IMPL(aot_engine_tampered_kernel) {
    setup();
    static int registered;
    if (!registered) {
        ASSERT_OK(kiln_register_quick_op(&affine_op));
        ASSERT_OK(kiln_register_quick_op(&badsig_op));
        registered = 1;
    }
    kiln_engine *e = NULL;
    ASSERT_OK(build_affine("gtest::affine", -1, KILN_BUILD_PREFER_AOT, 4, &e));
    ASSERT_EQ(e->naot, 1);
    void *img = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &img, &size));
    uint8_t *buf = malloc(size);
    memcpy(buf, img, size);
    kiln_free(img);
    /* Where the kernel object lies in the file. */
    size_t at = SIZE_MAX;
    for (size_t i = 0; i + e->aot[0].so_size <= size; i++)
        if (!memcmp(buf + i, e->aot[0].so, e->aot[0].so_size)) {
            at = i;
            break;
        }
    ASSERT(at != SIZE_MAX);
    size_t so_size = e->aot[0].so_size;
    kiln_engine_free(e);
    uint8_t *c = malloc(size);
    uint64_t seed = 0x7a3d;
    for (int k = 0; k < 8; k++) {
        size_t off = at + (size_t)(test_rand_u64(&seed) % so_size);
        memcpy(c, buf, size);
        c[off] ^= (uint8_t)(1u << (k % 8));
        kiln_engine *t = NULL;
        ASSERT_EQ(kiln_engine_load_memory(c, size, &t), KILN_ECHECKSUM);
        ASSERT(t == NULL);
        ASSERT_CONTAINS(kiln_errmsg(), "section AOT");
        ASSERT_CONTAINS(kiln_errmsg(), "checksum mismatch");
        kiln__file_reseal(c, size); /* as a deliberate tamperer would */
        ASSERT_EQ(kiln_engine_load_memory(c, size, &t), KILN_ECHECKSUM);
        ASSERT(t == NULL);
        ASSERT_CONTAINS(kiln_errmsg(), "axpb object");
        ASSERT_CONTAINS(kiln_errmsg(), "does not match the SHA-256 stored beside it: the file is damaged");
    }
    /* The untouched image still loads and runs. */
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e));
    run_affine(e, 6, 4);
    kiln_engine_free(e);
    free(c);
    free(buf);
}

/* An AOT source that does not compile (issue 12 friction 4): the build
 * error names the layer, the op once and the kernel; the compiler's
 * file:line points at a kept copy of the source (it used to name a deleted
 * temporary file), with lines counted from the source's first line. */
static const char broken_src[] = "#include <kiln/plugin.h>\n"
                                 "void broken_k(const kiln_aot_args *a, int ith, int nth) {\n"
                                 "    int x = ;\n"
                                 "}\n";
static int broken_aot(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic, kiln_aot_kernel *k) {
    (void)io;
    (void)tactic;
    k->source = broken_src;
    k->entry = "broken_k";
    k->extent = c->in[0].dims[0];
    return 0;
}
static const kiln_quick_op broken_op = {
    .ns = "gtest", .name = "broken", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = affine_attrs, .shape = affine_shape, .aot = broken_aot,
};

TEST_IMPL(aot_compile_error_names_and_keeps) {
    setup();
    ASSERT_OK(kiln_register_quick_op(&broken_op));
    kiln_engine *e = NULL;
    ASSERT_EQ(build_affine("gtest::broken", -1, KILN_BUILD_PREFER_AOT, 2, &e), KILN_ECOMPILE);
    const char *m = kiln_errmsg();
    ASSERT_CONTAINS(m, "layer 'aff' (gtest::broken v1): AOT kernel broken_k: compiler failed");
    const char *first = strstr(m, "gtest::broken");
    ASSERT(first && !strstr(first + 1, "gtest::broken")); /* the op once */
    const char *kept = strstr(m, "(the kernel source stays in ");
    ASSERT(kept);
    char path[600];
    ASSERT_EQ(sscanf(kept, "(the kernel source stays in %599[^ ]", path), 1);
    ASSERT_CONTAINS(path, "/aot-broken_k-");
    char loc[700];
    snprintf(loc, sizeof loc, "%s:3:", path); /* 'int x = ;' is line 3 of the source */
    ASSERT_CONTAINS(m, loc);
    FILE *f = fopen(path, "r");
    ASSERT(f);
    char text[sizeof broken_src + 8] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    ASSERT_STR_EQ(text, broken_src);
}

TEST_LIST(TEST_ENTRY(aot_sha256_vectors), TEST_ENTRY(aot_compile_load_bytes), TEST_ENTRY(aot_compile_cache), TEST_ENTRY(aot_so_load_file_fallback), TEST_ENTRY(aot_tampered_bytes),
          TEST_ENTRY(aot_compile_errors), TEST_ENTRY(aot_signature_check),
          TEST_ENTRY(aot_launch_threads), TEST_ENTRY(aot_record_roundtrip),
          TEST_ENTRY(aot_engine_end_to_end), TEST_ENTRY(aot_engine_tampered_kernel),
          TEST_ENTRY(aot_compile_error_names_and_keeps))
