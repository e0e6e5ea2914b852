/*
 * test_hardening.c — library entry points given bad input by a user:
 * each fails with a status and a message that names what and where.
 * Regressions for defects found by acceptance testing.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kiln/kiln.h>
#include <kiln/plugin.h>

#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

/* x[2,3] -> Relu -> y, built (timing_cache: the config's cache file, or NULL) */
static kiln_engine *relu_engine_cached(const char *timing_cache) {
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t dims[2] = {2, 3};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    const char *in[1] = {"x"}, *out[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    ASSERT(cfg);
    if (timing_cache) ASSERT_OK(kiln_build_config_set_timing_cache(cfg, timing_cache));
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

static kiln_engine *relu_engine(void) { return relu_engine_cached(NULL); }

/* Saving over a directory used to fail only at the final rename with a
 * message naming the temporary file. */
TEST_IMPL(save_to_directory) {
    kiln_engine *e = relu_engine();
    char dir[] = "/tmp/kiln_hardening_XXXXXX";
    ASSERT(mkdtemp(dir));
    ASSERT_EQ(kiln_engine_save(e, dir), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), dir);
    ASSERT_CONTAINS(kiln_errmsg(), "is a directory");
    char bad[512];
    snprintf(bad, sizeof bad, "%s/missing/e.kiln", dir);
    ASSERT_EQ(kiln_engine_save(e, bad), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "cannot save engine to");
    ASSERT_CONTAINS(kiln_errmsg(), bad);
    /* the directory is untouched and a real path still works */
    struct stat st;
    ASSERT_EQ(stat(dir, &st), 0);
    ASSERT(S_ISDIR(st.st_mode));
    char ok[512];
    snprintf(ok, sizeof ok, "%s/e.kiln", dir);
    ASSERT_OK(kiln_engine_save(e, ok));
    ASSERT_EQ(unlink(ok), 0);
    ASSERT_EQ(rmdir(dir), 0);
    kiln_engine_free(e);
}

/* A shared library that registers no op is not a plugin library: loading
 * it used to succeed silently.  A library already mapped in the process
 * (its constructors ran before) is not refused. */
TEST_IMPL(library_without_ops) {
    char dir[] = "/tmp/kiln_hardening_XXXXXX";
    ASSERT(mkdtemp(dir));
    char so[512], cmd[1200];
    snprintf(so, sizeof so, "%s/noops.so", dir);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -x c /dev/null -o '%s'", so);
    if (system(cmd) != 0) {
        printf("no C compiler: skipped\n");
        rmdir(dir);
        return;
    }
    int before = 0;
    while (kiln__registry_at(before)) before++;
    ASSERT_EQ(kiln_registry_load_library(so), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), so);
    ASSERT_CONTAINS(kiln_errmsg(), "registered no ops");
    ASSERT_EQ(kiln_registry_load_library(so), KILN_EINVAL); /* remembered */
    int after = 0;
    while (kiln__registry_at(after)) after++;
    ASSERT_EQ(after, before);
    /* the samples library registers ops: accepted, twice */
    ASSERT_OK(kiln_registry_load_library(KILN_SAMPLES_LIB));
    ASSERT_OK(kiln_registry_load_library(KILN_SAMPLES_LIB));
    ASSERT(kiln__registry_find("sample", "circ_pad", 1));
    unlink(so);
    rmdir(dir);
}

/* A plugin whose shape function fails without kiln_set_error: the build
 * message names the layer and says no message was given (it said only
 * "invalid argument"). */
static int silent_shape(kiln_shape_ctx *c) {
    (void)c;
    return KILN_EINVAL;
}
static int silent_impl(const kiln_call *c) {
    (void)c;
    return 0;
}
static const kiln_quick_op silent_op = {
    .ns = "hardening", .name = "silent", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .shape = silent_shape, .impl = silent_impl,
};

TEST_IMPL(plugin_error_without_message) {
    ASSERT_OK(kiln_register_quick_op(&silent_op));
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {4};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in[1] = {"x"}, *out[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "hardening::silent", 1, "quiet_layer", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_engine *e = NULL;
    ASSERT_EQ(kiln_build(net, cfg, &e, NULL), KILN_EINVAL);
    ASSERT(e == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "quiet_layer");
    ASSERT_CONTAINS(kiln_errmsg(), "hardening::silent");
    ASSERT_CONTAINS(kiln_errmsg(), "returned without a message");
    kiln_build_config_free(cfg);
    kiln_network_free(net);
}

/* A 2,000,000-character tensor name used to build, then the engine failed
 * to load ("string length 2000000 exceeds 1048576"): the network refuses
 * names longer than KILN__MAX_NAME, and the longest allowed one builds
 * (the builder used to truncate names at 300-1200 bytes), saves and loads. */
TEST_IMPL(name_length_limit) {
    size_t n = 2000000;
    char *big = malloc(n + 1);
    ASSERT(big);
    for (size_t i = 0; i < n; i++) big[i] = (char)('a' + i % 26);
    big[n] = 0;
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {2, 3};
    ASSERT_EQ(kiln_network_add_input(net, big, KILN_DTYPE_F32, 2, dims, NULL), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "tensor name 'abcdefghij");
    ASSERT_CONTAINS(kiln_errmsg(), "is 2000000 bytes long, at most 4096 expected");
    const char *dn[2] = {big, NULL};
    int64_t ddims[2] = {-1, 3};
    ASSERT_EQ(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, ddims, dn), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "dim name");
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    const char *in[1] = {"x"}, *out[1] = {big};
    ASSERT(!kiln_network_add_layer(net, "ai.onnx::Relu", 14, big, 1, in, 1, out));
    ASSERT_CONTAINS(kiln_errmsg(), "layer name");
    big[KILN__MAX_NAME] = 0; /* the longest name allowed */
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, big));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_engine *e = NULL, *e2 = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    kiln_io_info info;
    ASSERT_OK(kiln_engine_io(e2, 1, &info));
    ASSERT_EQ(strlen(info.name), KILN__MAX_NAME);
    kiln_engine_free(e2);
    kiln_free(buf);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    free(big);
}

/* Range with constant start 0, limit 2^62, delta 1 is folded at build
 * time: it used to overflow the heap in the folding buffer.  Folding obeys
 * the size limit of a run: a clear build error naming the layer. */
TEST_IMPL(range_fold_too_large) {
    kiln_network *net = kiln_network_create();
    int64_t s = 0, l = (int64_t)1 << 62, d = 1;
    ASSERT_OK(kiln_network_add_constant(net, "s", KILN_DTYPE_I64, 0, NULL, &s));
    ASSERT_OK(kiln_network_add_constant(net, "l", KILN_DTYPE_I64, 0, NULL, &l));
    ASSERT_OK(kiln_network_add_constant(net, "d", KILN_DTYPE_I64, 0, NULL, &d));
    const char *in[3] = {"s", "l", "d"}, *out[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Range", 11, "huge_range", 3, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_engine *e = NULL;
    ASSERT_EQ(kiln_build(net, cfg, &e, NULL), KILN_ESHAPE);
    ASSERT(e == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "huge_range");
    ASSERT_CONTAINS(kiln_errmsg(), "too large (dim 0 = 4611686018427387904");
    /* the same layer with a length that fits folds and is right */
    kiln_network_free(net);
    net = kiln_network_create();
    l = 1000, d = 7, s = -3;
    ASSERT_OK(kiln_network_add_constant(net, "s", KILN_DTYPE_I64, 0, NULL, &s));
    ASSERT_OK(kiln_network_add_constant(net, "l", KILN_DTYPE_I64, 0, NULL, &l));
    ASSERT_OK(kiln_network_add_constant(net, "d", KILN_DTYPE_I64, 0, NULL, &d));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Range", 11, "range", 3, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_run(ctx));
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    ASSERT_OK(kiln_context_shape(ctx, "y", &nd, dims));
    ASSERT_EQ(dims[0], (1000 + 3 + 6) / 7);
    const int64_t *y = kiln_context_output(ctx, "y");
    for (int64_t i = 0; i < dims[0]; i++) ASSERT_EQ(y[i], -3 + 7 * i);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
}

/* Saving to something that is not a regular file.  A temporary file renamed
 * over the path replaced it: as root, `kiln build -o /dev/null` (and a
 * timing cache at /dev/null) turned /dev/null into a regular file for the
 * whole machine, and a symlink became a file.  A FIFO stands in for the
 * device here: it must stay a FIFO and its read end get the engine's bytes;
 * a symlink must stay a link, its target replaced. */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ASSERT(f);
    ASSERT_EQ(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    ASSERT(len > 0);
    rewind(f);
    unsigned char *b = test_xmalloc((size_t)len);
    ASSERT_EQ(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* link is still a symlink and file holds the n bytes of want */
static void check_link_wrote(const char *link, const char *file, const unsigned char *want, size_t n) {
    struct stat st;
    ASSERT_EQ(lstat(link, &st), 0);
    ASSERT(S_ISLNK(st.st_mode));
    size_t got_n;
    unsigned char *got = slurp(file, &got_n);
    ASSERT_EQ(got_n, n);
    ASSERT(memcmp(got, want, n) == 0);
    free(got);
}

TEST_IMPL(save_to_fifo_and_symlink) {
    kiln_engine *e = relu_engine();
    char dir[] = "/tmp/kiln_hardening_XXXXXX";
    ASSERT(mkdtemp(dir));
    char ref[512], pipe[512], link[512], cache[512], clink[512];
    snprintf(ref, sizeof ref, "%s/ref.kiln", dir);
    snprintf(pipe, sizeof pipe, "%s/pipe", dir);
    snprintf(link, sizeof link, "%s/link.kiln", dir);
    snprintf(cache, sizeof cache, "%s/cache.txt", dir);
    snprintf(clink, sizeof clink, "%s/cache-link", dir);
    ASSERT_OK(kiln_engine_save(e, ref));
    size_t nref;
    unsigned char *want = slurp(ref, &nref);

    /* The read end is held open (non-blocking) so that the save's open
     * does not wait for a reader; the engine fits the pipe's buffer. */
    ASSERT(nref < 65536);
    ASSERT_EQ(mkfifo(pipe, 0600), 0);
    int rfd = open(pipe, O_RDONLY | O_NONBLOCK);
    ASSERT(rfd >= 0);
    ASSERT_OK(kiln_engine_save(e, pipe));
    struct stat st;
    ASSERT_EQ(lstat(pipe, &st), 0);
    ASSERT(S_ISFIFO(st.st_mode));
    unsigned char *fifo_got = test_xmalloc(nref + 1);
    size_t nfifo = 0;
    ssize_t k;
    while (nfifo <= nref && (k = read(rfd, fifo_got + nfifo, nref + 1 - nfifo)) > 0) nfifo += (size_t)k;
    close(rfd);
    ASSERT_EQ(nfifo, nref);
    ASSERT(memcmp(fifo_got, want, nref) == 0);
    free(fifo_got);

    /* a link to a regular file: the file is replaced, the link stays */
    FILE *f = fopen(ref, "wb");
    ASSERT(f);
    fputs("old contents", f);
    fclose(f);
    ASSERT_EQ(symlink(ref, link), 0);
    ASSERT_OK(kiln_engine_save(e, link));
    check_link_wrote(link, ref, want, nref);

    /* a dangling link (relative): its target is created, the link kept */
    char dang[512], made[512];
    snprintf(dang, sizeof dang, "%s/dangling.kiln", dir);
    snprintf(made, sizeof made, "%s/made.kiln", dir);
    ASSERT_EQ(symlink("made.kiln", dang), 0);
    ASSERT_OK(kiln_engine_save(e, dang));
    check_link_wrote(dang, made, want, nref);
    ASSERT_EQ(unlink(dang), 0);
    ASSERT_EQ(unlink(made), 0);

    /* the timing cache: written through a link the same way */
    f = fopen(cache, "wb");
    ASSERT(f);
    fclose(f);
    ASSERT_EQ(symlink(cache, clink), 0);
    kiln_engine *e2 = relu_engine_cached(clink);
    ASSERT_EQ(lstat(clink, &st), 0);
    ASSERT(S_ISLNK(st.st_mode));
    size_t nc;
    unsigned char *c = slurp(cache, &nc);
    ASSERT(nc > 17 && memcmp(c, "kiln-timing-cache", 17) == 0);

    free(c);
    free(want);
    kiln_engine_free(e2);
    kiln_engine_free(e);
    ASSERT_EQ(unlink(ref), 0);
    ASSERT_EQ(unlink(pipe), 0);
    ASSERT_EQ(unlink(link), 0);
    ASSERT_EQ(unlink(cache), 0);
    ASSERT_EQ(unlink(clink), 0);
    ASSERT_EQ(rmdir(dir), 0);
}

TEST_LIST(TEST_ENTRY(save_to_directory), TEST_ENTRY(save_to_fifo_and_symlink), TEST_ENTRY(library_without_ops),
          TEST_ENTRY(plugin_error_without_message), TEST_ENTRY(name_length_limit),
          TEST_ENTRY(range_fold_too_large))
