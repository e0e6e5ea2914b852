/*
 * test_engine_cuda_crafted.c — engine files with CUDA layers, crafted, on a
 * machine without a GPU.  Engines built on the stand-in GPU (device/cuda/
 * fake.c: a Conv with a fused residual of a network input and HardSwish, a
 * MatMul + Add of an input + Relu, PP-OCR's Resize + ConvTranspose head,
 * each fused and not; host<->device copies are layers too) are
 * serialized, then loaded as they are and after deterministic mutations
 * (a byte set, a u32 field overwritten with an edge value, a truncation;
 * every checksum resealed, as a tamperer would), each loaded with no GPU
 * and again with the stand-in GPU on: load, inspect, make a context, bind
 * every input, run.  Each step may fail, but with an error code and a
 * message; never a crash, an abort or a sanitizer report (ctest runs this
 * under ASan+UBSan too).  Unmutated, the no-GPU context must say why:
 * "no CUDA device".
 *
 * `test_engine_cuda_crafted --write DIR` writes the unmutated engines to DIR
 * (fuzz/make_engine_corpus.sh: seeds for the engine fuzzer).
 */
#include "device/cuda/cuda_int.h"
#include "kiln_int.h"
#include "test.h"
#include "test_cuda_util.h"
#include "test_engine_util.h"
#include "test_ops_util.h"
#include "dbhead_nets.h"
#include "resid_nets.h"

#include <stdio.h>
#include <string.h>

enum { NENG = 6, MUTATIONS = 150 };

typedef struct image {
    void *p;
    size_t n;
    const char *name;
} image;

/* The engines, built once on the stand-in GPU. */
static image g_img[NENG];

static void free_images(void) {
    for (int k = 0; k < NENG; k++) kiln_free(g_img[k].p);
}

static void build_images(void) {
    if (g_img[0].p) return;
    atexit(free_images);
    rs_w rw;
    rs_weights(&rw, 5);
    db_w dw;
    db_weights(&dw, 6);
    static const char *names[NENG] = {"conv_residual_hswish", "conv_residual_hswish_unfused", "matmul_residual",
                                      "matmul_residual_unfused", "dbhead", "dbhead_unfused"};
    kiln__cuda_fake(1);
    for (int k = 0; k < NENG; k++) {
        kiln_network *net = k < 2 ? rs_network(&rw, RS_HSWISH_X2) : k < 4 ? rs_network(&rw, RS_MATMUL_X2)
                                                                        : db_network(&dw);
        kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | (k & 1 ? KILN_BUILD_NO_FUSION : 0));
        kiln_network_free(net);
        if (!e) TEST__FAIL("%s: build on the stand-in GPU: %s", names[k], kiln_errmsg());
        int gpu = 0;
        kiln_engine_placement(e, &gpu, NULL);
        ASSERT(gpu > 0);
        ASSERT_OK(kiln_engine_serialize(e, &g_img[k].p, &g_img[k].n));
        g_img[k].name = names[k];
        kiln_engine_free(e);
    }
    kiln__cuda_fake(0);
}

/* A failed call must leave a message saying what went wrong. */
static void check_failure(const char *what, int rc) {
    if (rc && !*kiln_errmsg()) TEST__FAIL("%s failed (%d: %s) without a message", what, rc, kiln_err_name(rc));
}

/* Load, inspect, make a context, bind every input (min dims, data from
 * seed), run; returns the context's creation status. */
static int exercise(const uint8_t *p, size_t n, uint64_t seed) {
    kiln_load_options opt = {.code = KILN_CODE_DENY};
    kiln_engine *e = NULL;
    int rc = kiln_engine_load_memory_ex(p, n, &opt, &e);
    check_failure("load", rc);
    if (rc) return rc;
    FILE *devnull = fopen("/dev/null", "w");
    ASSERT(devnull);
    check_failure("inspect", kiln_engine_inspect(e, devnull));
    fclose(devnull);
    kiln_context *c = NULL;
    int crc = kiln_context_create(e, 1, &c);
    check_failure("context", crc);
    void *bufs[KILN_MAX_IO] = {0};
    int ni = kiln_engine_num_inputs(e);
    for (int i = 0; !crc && i < ni && i < KILN_MAX_IO; i++) {
        kiln_io_info info;
        if (kiln_engine_io(e, i, &info)) break;
        int64_t dims[KILN_MAX_DIMS];
        size_t bytes = kiln_dtype_size(info.dtype);
        for (int d = 0; d < info.ndim; d++) {
            dims[d] = info.dims[d] >= 0 ? info.dims[d] : info.min[d] > 0 ? info.min[d] : 0;
            bytes = dims[d] > 0 && bytes <= ((size_t)1 << 24) / (size_t)dims[d] ? bytes * (size_t)dims[d] : 0;
        }
        if (!bytes || kiln_context_set_input_shape(c, info.name, info.ndim, dims)) break;
        bufs[i] = malloc(bytes);
        ASSERT(bufs[i]);
        for (size_t b = 0; b < bytes; b++) ((uint8_t *)bufs[i])[b] = (uint8_t)(test_rand_u64(&seed) >> 56 & 0x3f);
        if (kiln_context_bind(c, info.name, bufs[i], bytes)) break;
    }
    if (!crc) check_failure("run", kiln_context_run(c));
    kiln_context_free(c);
    for (int i = 0; i < KILN_MAX_IO; i++) free(bufs[i]);
    kiln_engine_free(e);
    return crc;
}

/* As is, with no GPU: the engine loads, and its context says why it cannot run. */
TEST_IMPL(cuda_engines_without_gpu) {
    build_images();
    if (kiln__device_get(KILN_DEVICE_CUDA)) {
        fprintf(stderr, "a real GPU is present: the no-GPU errors are not reachable here\n");
        return;
    }
    for (int k = 0; k < NENG; k++) {
        int rc = exercise(g_img[k].p, g_img[k].n, 1);
        printf("  %s (%zu bytes): %s\n", g_img[k].name, g_img[k].n, rc ? kiln_errmsg() : "ran");
        ASSERT_EQ(rc, KILN_EDEVICE);
        ASSERT_CONTAINS(kiln_errmsg(), "no CUDA device");
    }
}

/* Mutated, with no GPU and on the stand-in GPU: errors, never a crash. */
TEST_IMPL(cuda_engines_mutated) {
    build_images();
    static const uint32_t edges[] = {0, 1, 2, 3, 0x7f, 0xff, 0xffff, 0x7fffffff, 0x80000000u, 0xffffffffu};
    uint64_t seed = 0xC0DAC0DA;
    int loaded = 0, ran = 0;
    for (int k = 0; k < NENG; k++) {
        const size_t n = g_img[k].n;
        uint8_t *m = malloc(n);
        ASSERT(m);
        for (int t = 0; t < MUTATIONS; t++) {
            memcpy(m, g_img[k].p, n);
            size_t len = n, at = (size_t)(test_rand_u64(&seed) % n);
            switch (test_rand_u64(&seed) % 3) {
            case 0: m[at] = (uint8_t)test_rand_u64(&seed); break;
            case 1: {
                uint32_t v = edges[test_rand_u64(&seed) % (sizeof edges / sizeof edges[0])];
                at &= ~(size_t)3;
                if (at + 4 <= n) memcpy(m + at, &v, 4);
                break;
            }
            default: len = at; break;
            }
            kiln__file_reseal(m, len);
            for (int fake = 0; fake <= 1; fake++) {
                kiln__cuda_fake(fake);
                int rc = exercise(m, len, seed + (uint64_t)t);
                loaded += rc != KILN_EFORMAT && rc != KILN_ECHECKSUM;
                ran += rc == 0;
                kiln__cuda_fake(0);
            }
        }
        free(m);
    }
    printf("  %d mutated loads past the parser, %d made a context\n", loaded, ran);
    ASSERT(ran > 0); /* the mutations reach the runtime, not only the parser */
}

static int write_images(const char *dir) {
    build_images();
    for (int k = 0; k < NENG; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/cuda_%s.engine", dir, g_img[k].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(g_img[k].p, 1, g_img[k].n, f) != g_img[k].n || fclose(f)) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
    }
    return 0;
}

#define main tests_main
TEST_LIST(TEST_ENTRY(cuda_engines_without_gpu), TEST_ENTRY(cuda_engines_mutated))
#undef main

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write")) return write_images(argv[2]);
    return tests_main(argc, argv);
}
