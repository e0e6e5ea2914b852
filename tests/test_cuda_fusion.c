/*
 * test_cuda_fusion.c — the GPU's Linear fusions on a GPU (ctest label
 * `cuda`; exits 77, saying why, without one): a transformer feed-forward
 * block (ffn_net.h: MatMul + bias Add + erf GELU in five layers, MatMul +
 * bias + Relu, Shape) built for CUDA with fusion (one MatMul layer with a
 * cuBLASLt bias epilogue per Linear) and without, FP32 / FP16 / BF16, run
 * at a batch inside the profile on fresh random inputs with poisoned
 * outputs, against a naive double reference; eager run, graph capture and
 * replay agree bit for bit.  The stand-in device checks the structure
 * (test_cuda_placement.c, gpu_linear_bias_gelu_fusion).
 */
#include "device/cuda/cuda_int.h"
#include "device/device.h"
#include "kiln_int.h"
#include "test.h"
#include "ffn_net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, ROWS = B * FFN_S };

static void run_case(const ffn_w *w, unsigned flags, double tol) {
    kiln_network *net = ffn_network(w);
    kiln_build_config *cfg = ffn_config(flags | KILN_BUILD_STRICT_DEVICE);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    int fused = 0;
    for (int32_t l = 0; l < e->nlayers; l++) fused += e->layers[l].nepi;
    printf("flags 0x%x: %d layers, %d fused ops\n", flags, (int)e->nlayers, fused);
    if (flags & KILN_BUILD_NO_FUSION) ASSERT_EQ(fused, 0);
    else if (!(flags & (KILN_BUILD_FP16 | KILN_BUILD_BF16))) ASSERT_EQ(fused, 4); /* 16-bit: per the timed types */
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    static float x[ROWS * FFN_K], y[ROWS * FFN_N2], first[ROWS * FFN_N2];
    static double ref[ROWS * FFN_N2];
    int64_t s[3], xd[3] = {B, FFN_S, FFN_K};
    uint64_t seed = 1000 + flags;
    for (int i = 0; i < ROWS * FFN_K; i++) x[i] = test_randf(&seed, -1.5f, 1.5f);
    ffn_ref(w, x, ROWS, ref);
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 3, xd));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_bind(ctx, "s", s, sizeof s));
    double worst = 0;
    for (int run = 0; run < 3; run++) { /* eager, capture, replay */
        memset(y, 0xFF, sizeof y);
        memset(s, 0xFF, sizeof s);
        ASSERT_OK(kiln_context_run(ctx));
        for (int d = 0; d < 3; d++) ASSERT_EQ(s[d], xd[d]);
        for (int i = 0; i < ROWS * FFN_N2; i++) {
            double err = fabs(y[i] - ref[i]) / (1 + fabs(ref[i]));
            if (!(err <= worst)) worst = err; /* NaN too */
        }
        if (run == 0) memcpy(first, y, sizeof y);
        else ASSERT(!memcmp(first, y, sizeof y));
    }
    printf("  max |y - ref| / (1 + |ref|) = %.3g (tolerance %.3g)\n", worst, tol);
    ASSERT(worst <= tol);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(linear_bias_gelu_on_gpu) {
    if (!kiln__device_get(KILN_DEVICE_CUDA)) {
        printf("SKIP: %s\n", kiln_errmsg());
        exit(77);
    }
    if (!kiln__cuda_have_kernels()) {
        printf("SKIP: libkiln was built without CUDA kernels (nvcc not found at build)\n");
        exit(77);
    }
    ffn_w w;
    ffn_weights(&w, 77);
    run_case(&w, 0, 1e-4);
    run_case(&w, KILN_BUILD_NO_FUSION, 1e-4);
    run_case(&w, KILN_BUILD_FP16, 2e-2);
    run_case(&w, KILN_BUILD_BF16, 1e-1);
}

TEST_LIST(TEST_ENTRY(linear_bias_gelu_on_gpu))
