/*
 * test_cuda_fusion.c — the GPU's Linear fusions on a GPU (ctest label
 * `cuda`; exits 77, saying why, without one): a transformer feed-forward
 * block (encoder_nets.h: MatMul + bias Add + erf GELU in five layers, MatMul +
 * bias + Relu, Shape) built for CUDA with fusion (one MatMul layer with a
 * cuBLASLt bias epilogue per Linear) and without, FP32 / FP16 / BF16, run
 * at a batch inside the profile on fresh random inputs with poisoned
 * outputs, against a naive double reference; eager run, graph capture and
 * replay agree bit for bit.  The stand-in device checks the structure
 * (test_cuda_placement.c, gpu_linear_bias_gelu_fusion).  PP-LCNet blocks
 * (lcnet_nets.h: Conv + scale/shift + four-layer hardswish + scale/shift)
 * run as three Conv layers with HardSwish (+ a y + b) epilogues, against the
 * same double reference, with and without fusion, FP32 and FP16, on the
 * Conv tactics the builder picks (test_pointwise_fold.c checks the structure).
 * PP-OCR's head step (dbhead_nets.h: Resize -> grouped ConvTranspose -> Add
 * -> BatchNormalization -> Relu) runs as Resize + ConvTranspose with a Relu
 * epilogue in FP32 and FP16; the FP16 engine runs the Resize in FP16 and
 * casts only at the network's input and output.
 */
#include "device/cuda/cuda_int.h"
#include "device/device.h"
#include "kiln_int.h"
#include "ops/common/ops_cuda.h"
#include "test.h"
#include "encoder_nets.h"
#include "lcnet_nets.h"
#include "dbhead_nets.h"
#include "resid_nets.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, ROWS = B * FFN_S };

/* Build net with cfg (both freed). */
static kiln_engine *build_free(kiln_network *net, kiln_build_config *cfg) {
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

static void run_case(const ffn_w *w, unsigned flags, double tol) {
    kiln_engine *e = build_free(ffn_network(w), ffn_config(flags | KILN_BUILD_STRICT_DEVICE));
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
        worst = test_worst_rel(y, ref, ROWS * FFN_N2, worst);
        if (run == 0) memcpy(first, y, sizeof y);
        else ASSERT(!memcmp(first, y, sizeof y));
    }
    printf("  max |y - ref| / (1 + |ref|) = %.3g (tolerance %.3g)\n", worst, tol);
    ASSERT(worst <= tol);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

static void need_gpu(void) {
    if (!kiln__device_get(KILN_DEVICE_CUDA)) {
        printf("SKIP: %s\n", kiln_errmsg());
        exit(77);
    }
    if (!kiln__cuda_have_kernels()) {
        printf("SKIP: libkiln was built without CUDA kernels (nvcc not found at build)\n");
        exit(77);
    }
}

TEST_IMPL(linear_bias_gelu_on_gpu) {
    need_gpu();
    ffn_w w;
    ffn_weights(&w, 77);
    run_case(&w, 0, 1e-4);
    run_case(&w, KILN_BUILD_NO_FUSION, 1e-4);
    run_case(&w, KILN_BUILD_FP16, 2e-2);
    run_case(&w, KILN_BUILD_BF16, 1e-1);
}

static void run_attn(unsigned flags, double tol) {
    kiln_engine *e = build_free(attn_network(), attn_config(flags | KILN_BUILD_STRICT_DEVICE));
    int attn = 0, addnorm = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        attn += !strcmp(e->layers[l].op_name, "attention");
        addnorm += !strcmp(e->layers[l].op_name, "add_layernorm");
    }
    ASSERT_EQ(attn, flags & KILN_BUILD_NO_FUSION ? 0 : 2);
    ASSERT_EQ(addnorm, flags & KILN_BUILD_NO_FUSION ? 0 : 1);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    enum { NB = 3, N = NB * ATTN_N };
    static float q[N], k[N], v[N], kt[N], y[3][N], first[3][N];
    static double ref[N], ref3[N];
    int64_t d[4] = {NB, ATTN_H, ATTN_S, ATTN_D};
    uint64_t seed = 77 + flags;
    for (int i = 0; i < N; i++) {
        q[i] = test_randf(&seed, -2, 2);
        k[i] = test_randf(&seed, -2, 2);
        v[i] = test_randf(&seed, -1, 1);
    }
    attn_ref(q, k, v, NB * ATTN_H, 0.125, ref);
    attn_ln_ref(q, ref, NB * ATTN_H * ATTN_S, ref3);
    const char *in[3] = {"q", "k", "v"};
    float *data[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(kiln_context_set_input_shape(ctx, in[i], 4, d));
        ASSERT_OK(kiln_context_bind(ctx, in[i], data[i], sizeof q));
    }
    ASSERT_OK(kiln_context_bind(ctx, "y1", y[0], sizeof y[0]));
    ASSERT_OK(kiln_context_bind(ctx, "y2", y[1], sizeof y[1]));
    ASSERT_OK(kiln_context_bind(ctx, "kt", kt, sizeof kt));
    ASSERT_OK(kiln_context_bind(ctx, "y3", y[2], sizeof y[2]));
    double worst = 0;
    for (int run = 0; run < 3; run++) { /* eager, capture, replay */
        memset(y, 0xFF, sizeof y);
        ASSERT_OK(kiln_context_run(ctx));
        for (int o = 0; o < 3; o++) worst = test_worst_rel(y[o], o == 2 ? ref3 : ref, N, worst);
        if (run == 0) memcpy(first, y, sizeof y);
        else ASSERT(!memcmp(first, y, sizeof y));
    }
    printf("attention flags 0x%x: %d attention + %d add_layernorm layers, max |y - ref| / (1 + |ref|) = %.3g (tolerance %.3g)\n", flags,
           attn, addnorm, worst, tol);
    ASSERT(worst <= tol);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(attention_on_gpu) {
    need_gpu();
    run_attn(0, 1e-5);
    run_attn(KILN_BUILD_NO_FUSION, 1e-5);
    run_attn(KILN_BUILD_FP16, 1e-2);
    run_attn(KILN_BUILD_BF16, 6e-2);
}

/* The encoder on the GPU, its attention reading the projection through
 * views (test_cuda_placement checks the rewrite), against kiln's CPU engine
 * of the same file (no fusion: the ONNX ops one by one), FP32 at batches 1,
 * 3, 8, FP32, FP16 and BF16.  Batches other than the profile's opt 3 also
 * check that a GEMM tactic timed at 3 runs at 1 and 8 (on an H200 at
 * 2026-11-25 23:36 UTC the FP16 engine failed at batch 1: "cuBLASLt
 * algorithm 2 of 2 for 10x32x32 (batch 1)"; now the heuristic's first
 * algorithm for the new shape runs). */
TEST_IMPL(attention_views_on_gpu) {
    need_gpu();
    enum { NMAX = 8 * MHA_S * MHA_E };
    static float x[NMAX], ref[NMAX], y[NMAX];
    kiln_engine *cpu = mha_engine(KILN_DEVICE_CPU, KILN_BUILD_NO_FUSION);
    const unsigned flags[3] = {0, KILN_BUILD_FP16, KILN_BUILD_BF16};
    const double tols[3] = {1e-4, 2e-2, 1e-1};
    for (int f = 0; f < 3; f++) {
        kiln_engine *e = mha_engine(KILN_DEVICE_CUDA, flags[f] | KILN_BUILD_STRICT_DEVICE);
        int views = 0;
        for (int32_t l = 0; l < e->nlayers; l++) {
            if (strcmp(e->layers[l].op_name, "attention")) continue;
            kiln_attrs a = kiln__attrset_view(&e->layers[l].attrs);
            views += kiln_attrs_ints(&a, "views", NULL) > 0;
        }
        ASSERT_EQ(views, 2);
        const int64_t nbs[3] = {3, 1, 8};
        double worst = 0;
        for (int bi = 0; bi < 3; bi++) {
            int64_t n = nbs[bi] * MHA_S * MHA_E;
            uint64_t seed = 500 + 7 * (uint64_t)bi + (uint64_t)f;
            for (int64_t i = 0; i < n; i++) x[i] = test_randf(&seed, -2, 2);
            mha_run(cpu, x, nbs[bi], ref, 1);
            mha_run(e, x, nbs[bi], y, 1);
            worst = test_worst_rel(y, ref, n, worst);
        }
        printf("mha_encoder flags 0x%x: %d layers, %d attention with views, max |y - cpu| / (1 + |cpu|) = %.3g "
               "(tolerance %.3g)\n", flags[f], (int)e->nlayers, views, worst, tols[f]);
        ASSERT(worst <= tols[f]);
        kiln_engine_free(e);
    }
    kiln_engine_free(cpu);
}

/* y of mask_network on engine e for q, k, v [3, H, S, D] and mask [3, 1, 1, S]. */
static void mask_run(kiln_engine *e, float *const io[5]) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    int64_t d[4] = {3, ATTN_H, ATTN_S, ATTN_D}, md[4] = {3, 1, 1, ATTN_S};
    const char *names[5] = {"q", "k", "v", "mask", "y"};
    for (int i = 0; i < 5; i++) {
        size_t n = i == 3 ? 3 * ATTN_S : 3 * ATTN_N;
        if (i < 4) ASSERT_OK(kiln_context_set_input_shape(ctx, names[i], 4, i == 3 ? md : d));
        ASSERT_OK(kiln_context_bind(ctx, names[i], io[i], n * sizeof(float)));
    }
    memset(io[4], 0xFF, 3 * ATTN_N * sizeof(float));
    ASSERT_OK(kiln_context_run(ctx));
    kiln_context_free(ctx);
}

/* The masked chain (Add(scores, mask) folded into the attention: its
 * mask input) on the GPU against kiln's CPU engine of the same network;
 * the mask random in [-3, 0] with the last 5 keys of batch item 1 at -inf
 * (padding). */
TEST_IMPL(attention_mask_on_gpu) {
    need_gpu();
    static float q[3 * ATTN_N], k[3 * ATTN_N], v[3 * ATTN_N], mask[3 * ATTN_S], y[3 * ATTN_N], ref[3 * ATTN_N];
    uint64_t seed = 9090;
    for (int i = 0; i < 3 * ATTN_N; i++) {
        q[i] = test_randf(&seed, -2, 2);
        k[i] = test_randf(&seed, -2, 2);
        v[i] = test_randf(&seed, -1, 1);
    }
    for (int i = 0; i < 3 * ATTN_S; i++) mask[i] = i >= 2 * ATTN_S - 5 && i < 2 * ATTN_S ? -INFINITY : test_randf(&seed, -3, 0);
    kiln_network *net = mask_network();
    kiln_build_config *cfg = mask_config(KILN_DEVICE_CPU, KILN_BUILD_NO_FUSION);
    kiln_engine *cpu = NULL;
    ASSERT_OK(kiln_build(net, cfg, &cpu, NULL));
    kiln_build_config_free(cfg);
    mask_run(cpu, (float *const[5]){q, k, v, mask, ref});
    const unsigned flags[3] = {0, KILN_BUILD_FP16, KILN_BUILD_BF16};
    const double tols[3] = {1e-5, 1e-2, 6e-2};
    for (int f = 0; f < 3; f++) {
        cfg = mask_config(KILN_DEVICE_CUDA, flags[f] | KILN_BUILD_STRICT_DEVICE);
        kiln_engine *e = NULL;
        ASSERT_OK(kiln_build(net, cfg, &e, NULL));
        kiln_build_config_free(cfg);
        int attn = 0;
        for (int32_t l = 0; l < e->nlayers; l++) attn += !strcmp(e->layers[l].op_name, "attention") && e->layers[l].nin == 4;
        ASSERT_EQ(attn, 1);
        mask_run(e, (float *const[5]){q, k, v, mask, y});
        double worst = test_worst_rel(y, ref, 3 * ATTN_N, 0);
        printf("masked attention flags 0x%x: max |y - cpu| / (1 + |cpu|) = %.3g (tolerance %.3g)\n", flags[f], worst,
               tols[f]);
        ASSERT(worst <= tols[f]);
        kiln_engine_free(e);
    }
    kiln_engine_free(cpu);
    kiln_network_free(net);
}

/* Residual + LayerNorm blocks (encoder_nets.h, res_*) built with timing:
 * FP32 and FP16 against the double reference; the FP16 engine runs both
 * add_layernorm layers in FP16 and casts only at the network's input and
 * output (no FP32 LayerNorm between casts, BERT's 96 casts per run). */
static void run_res(const res_w *w, unsigned flags, double tol) {
    kiln_engine *e = build_free(res_network(w), res_config(flags | KILN_BUILD_STRICT_DEVICE));
    int addnorm = 0, casts = 0, f16norm = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *L = &e->layers[l];
        if (!strcmp(L->op_name, "add_layernorm")) {
            addnorm++;
            f16norm += e->tensors[L->in[0]].dtype == KILN_DTYPE_F16 && e->tensors[L->in[1]].dtype == KILN_DTYPE_F16 &&
                       e->tensors[L->out[0]].dtype == KILN_DTYPE_F16;
        }
        if (!strcmp(L->op_name, "reformat"))
            casts += e->tensors[L->in[0]].dtype != e->tensors[L->out[0]].dtype;
    }
    printf("residual blocks flags 0x%x: %d add_layernorm (%d in FP16), %d casts\n", flags, addnorm, f16norm, casts);
    if (flags & KILN_BUILD_FP16) kiln_engine_inspect(e, stdout);
    ASSERT_EQ(addnorm, 2);
    ASSERT_EQ(f16norm, flags & KILN_BUILD_FP16 ? 2 : 0);
    ASSERT_EQ(casts, flags & KILN_BUILD_FP16 ? 2 : 0);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    enum { NB = 3, N = RES_S * NB * RES_K };
    static float x[N], y[N];
    static double ref[N];
    int64_t xd[3] = {RES_S, NB, RES_K};
    uint64_t seed = 31 + flags;
    for (int i = 0; i < N; i++) x[i] = test_randf(&seed, -1, 1);
    res_ref(w, x, RES_S * NB, ref);
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 3, xd));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    memset(y, 0xFF, sizeof y);
    ASSERT_OK(kiln_context_run(ctx));
    double worst = test_worst_rel(y, ref, N, 0);
    printf("  max |y - ref| / (1 + |ref|) = %.3g (tolerance %.3g)\n", worst, tol);
    ASSERT(worst <= tol);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(residual_layernorm_fp16_without_casts) {
    need_gpu();
    static res_w w;
    res_weights(&w, 99);
    run_res(&w, 0, 1e-4);
    run_res(&w, KILN_BUILD_FP16, 3e-2);
}

/* Three runs of ctx (eager, capture, replay) into bound output y of n
 * floats, poisoned before each: bit-identical, within tol of ref (relative
 * to 1 + |ref|); frees ctx. */
static void runs_agree(kiln_engine *e, float *x, int64_t nx, float *y, float *first, const double *ref,
                       int64_t n, double tol) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, (size_t)nx * sizeof *x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, (size_t)n * sizeof *y));
    double worst = 0;
    for (int run = 0; run < 3; run++) {
        memset(y, 0xFF, (size_t)n * sizeof *y);
        ASSERT_OK(kiln_context_run(ctx));
        worst = test_worst_rel(y, ref, n, worst);
        if (run == 0) memcpy(first, y, (size_t)n * sizeof *y);
        else ASSERT(!memcmp(first, y, (size_t)n * sizeof *y));
    }
    printf("  max |y - ref| / (1 + |ref|) = %.3g (tolerance %.3g)\n", worst, tol);
    ASSERT(worst <= tol);
    kiln_context_free(ctx);
}

static void run_lcnet(const lc_w *w, unsigned flags, double tol) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, flags);
    kiln_engine *e = build_free(lc_network(w), cfg);
    int convs = 0, fused = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *el = &e->layers[l];
        if (strcmp(el->op_name, "Conv")) continue;
        convs++;
        fused += el->nepi;
        ASSERT_EQ(el->device, KILN_DEVICE_CUDA);
        float a, b;
        int act = kiln__epi_cuda_act(el->epi_rt, &a, &b);
        if (!(flags & (KILN_BUILD_NO_FUSION | KILN_BUILD_FP16)))
            ASSERT(act == KILN_CU_ACT_HARDSWISH || act == KILN_CU_ACT_HARDSWISH + KILN_CU_ACT_THEN_AFFINE);
        printf("  %s: tactic %d, act %d (a %g, b %g)\n", el->name, (int)el->tactic, act, a, b);
    }
    printf("lcnet flags 0x%x: %d layers, %d Conv, %d fused ops\n", flags, (int)e->nlayers, convs, fused);
    ASSERT_EQ(convs, 3);
    if (!(flags & (KILN_BUILD_NO_FUSION | KILN_BUILD_FP16))) ASSERT_EQ(fused, 6); /* 16-bit: per the timed types */
    enum { NX = LC_N * LC_C * LC_HW, NY = LC_N * LC_M * LC_HW };
    static float x[NX], y[NY], first[NY];
    static double ref[NY];
    uint64_t seed = 300 + flags;
    for (int i = 0; i < NX; i++) x[i] = test_randf(&seed, -3, 3);
    lc_ref(w, x, ref);
    runs_agree(e, x, NX, y, first, ref, NY, tol);
    kiln_engine_free(e);
}

TEST_IMPL(lcnet_hswish_on_gpu) {
    need_gpu();
    lc_w w;
    lc_weights(&w, 41);
    run_lcnet(&w, 0, 1e-5);
    run_lcnet(&w, KILN_BUILD_NO_FUSION, 1e-5);
    run_lcnet(&w, KILN_BUILD_FP16, 2e-2);
}

static void run_db(const db_w *w, unsigned flags, double tol) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, flags | KILN_BUILD_STRICT_DEVICE);
    kiln_engine *e = build_free(db_network(w), cfg);
    int casts = 0, f16resize = 0, convt_relu = 0, ops = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *L = &e->layers[l];
        float a, b;
        ops += strcmp(L->op_name, "reformat") != 0;
        if (!strcmp(L->op_name, "Resize"))
            f16resize = e->tensors[L->in[0]].dtype == KILN_DTYPE_F16 && e->tensors[L->out[0]].dtype == KILN_DTYPE_F16;
        if (!strcmp(L->op_name, "ConvTranspose")) convt_relu = kiln__epi_cuda_act(L->epi_rt, &a, &b) == KILN_CU_ACT_RELU;
        if (!strcmp(L->op_name, "reformat")) casts += e->tensors[L->in[0]].dtype != e->tensors[L->out[0]].dtype;
    }
    printf("db head flags 0x%x: %d layers, Resize in FP16 %d, ConvTranspose + Relu %d, %d casts\n", flags,
           (int)e->nlayers, f16resize, convt_relu, casts);
    kiln_engine_inspect(e, stdout);
    ASSERT_EQ(ops, 2); /* Resize, ConvTranspose (+ the copies and casts) */
    ASSERT(convt_relu);
    /* FP16 is a timed choice on a real GPU: for this small net the H200
     * timed FP32 faster (the casts cost more than they save), so only the
     * consistency is checked here; that FP16 is offered and taken where it
     * wins is test_pointwise_fold's stand-in check. */
    if (!(flags & KILN_BUILD_FP16)) {
        ASSERT_EQ(f16resize, 0);
        ASSERT_EQ(casts, 0);
    } else {
        ASSERT(casts == 0 || casts == 2); /* all FP32, or one cast in and one out */
    }
    static float x[DB_NX], y[DB_NY], first[DB_NY];
    static double ref[DB_NY];
    uint64_t seed = 500 + flags;
    for (int i = 0; i < DB_NX; i++) x[i] = test_randf(&seed, -2, 2);
    db_ref(w, x, ref);
    runs_agree(e, x, DB_NX, y, first, ref, DB_NY, tol);
    kiln_engine_free(e);
}

TEST_IMPL(dbhead_convtranspose_resize_on_gpu) {
    need_gpu();
    db_w w;
    db_weights(&w, 61);
    run_db(&w, 0, 1e-5);
    run_db(&w, KILN_BUILD_FP16, 2e-2);
}

/* An epilogue Add whose other operand is a network input (resid_nets.h):
 * the GPU engine (the Conv's residual epilogue reads the input's copy in
 * device memory), FP32 and FP16, against the CPU engine and a double
 * reference on the same fresh inputs (rs_run: same seed, same inputs). */
TEST_IMPL(input_residual_on_gpu) {
    need_gpu();
    rs_w w;
    rs_weights(&w, 81);
    for (int mode = 0; mode < RS_NMODES; mode++) {
        kiln_network *net = rs_network(&w, (rs_mode)mode);
        kiln_engine *cpu = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, NULL);
        kiln_network_free(net);
        double cpu_err = rs_run(cpu, &w, (rs_mode)mode, 300 + (uint64_t)mode);
        kiln_engine_free(cpu);
        ASSERT(cpu_err <= 1e-5);
        for (int h = 0; h < 2; h++) {
            kiln_build_config *cfg = kiln_build_config_create();
            kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
            kiln_build_config_set_flags(cfg, KILN_BUILD_STRICT_DEVICE | (h ? KILN_BUILD_FP16 : 0));
            kiln_engine *e = build_free(rs_network(&w, (rs_mode)mode), cfg);
            double err = rs_run(e, &w, (rs_mode)mode, 300 + (uint64_t)mode), tol = h ? 2e-2 : 1e-5;
            printf("mode %d %s: %d layers, max |y - ref| / (1 + |ref|) GPU %.3g, CPU %.3g (tolerance %.3g)\n", mode,
                   h ? "FP16" : "FP32", (int)e->nlayers, err, cpu_err, tol);
            kiln_engine_free(e);
            ASSERT(err <= tol);
        }
    }
}

TEST_LIST(TEST_ENTRY(input_residual_on_gpu), TEST_ENTRY(linear_bias_gelu_on_gpu), TEST_ENTRY(attention_on_gpu), TEST_ENTRY(attention_views_on_gpu),
          TEST_ENTRY(attention_mask_on_gpu), TEST_ENTRY(residual_layernorm_fp16_without_casts), TEST_ENTRY(lcnet_hswish_on_gpu),
          TEST_ENTRY(dbhead_convtranspose_resize_on_gpu))
