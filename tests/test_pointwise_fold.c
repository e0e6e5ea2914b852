/*
 * test_pointwise_fold.c — builder/pointwise_fold.c and the GPU's scalar
 * steps after an activation (fuse.c, engine/epilogue.c) on PP-LCNet blocks
 * as Paddle exports them (lcnet_nets.h: Conv -> Mul -> Add -> the four-layer
 * hardswish -> Mul -> Add, a per-channel scale, the 1/6 on the Clip first,
 * HardSigmoid(1/6, 1/2) * x):
 *
 * - CPU: the 20 layers become 3 (each Conv with its HardSwish and the
 *   steps after it as epilogues); the results match a naive double
 *   reference on fresh random inputs (and so does the engine built without
 *   fusion, which keeps every layer); a Conv whose output is also a network
 *   output keeps its Mul.
 * - The stand-in GPU (device/cuda/fake.c): the same 3 Conv layers on the
 *   GPU; the scale and shift are in the new weights (W * s, B * s + c,
 *   checked against the network's constants), the activations are
 *   HardSwish codes, with a y + b after them where scalar steps followed
 *   (KILN_CU_ACT_THEN_AFFINE), also after a save and load.
 * - PP-OCR's head step (dbhead_nets.h: Resize, grouped ConvTranspose,
 *   bias Add, BatchNormalization, Relu): on the CPU the ConvTranspose takes
 *   the Add and BN into its weights and the Relu as its epilogue (2 layers
 *   left), both engines match a double reference; on the stand-in GPU the
 *   folded weights and bias are checked against the network's constants.
 * test_cuda_fusion.c runs both networks on a GPU.
 */
#include "device/cuda/cuda_int.h"
#include "kiln_int.h"
#include "ops/common/ops_cuda.h"
#include "test.h"
#include "test_cuda_util.h"
#include "test_ops_util.h"
#include "kiln/onnx.h"
#include "lcnet_nets.h"
#include "dbhead_nets.h"
#include "resid_nets.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { NX = LC_N * LC_C * LC_HW, NY = LC_N * LC_M * LC_HW };

static const kiln__elayer *find_layer(const kiln_engine *e, const char *name) {
    for (int32_t l = 0; l < e->nlayers; l++)
        if (!strcmp(e->layers[l].name, name)) return &e->layers[l];
    return NULL;
}

/* Run e on x (xbytes) into y (n floats, poisoned first); y against ref
 * within tol (relative to 1 + |ref|). */
static void run_xy(const kiln_engine *e, const float *x, size_t xbytes, float *y, const double *ref, int64_t n,
                   double tol) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", (void *)x, xbytes));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, (size_t)n * sizeof *y));
    memset(y, 0xFF, (size_t)n * sizeof *y); /* NaN: a value not written shows */
    ASSERT_OK(kiln_context_run(ctx));
    double worst = test_worst_rel(y, ref, n, 0);
    printf("  %d layers: max |y - ref| / (1 + |ref|) = %.3g (tolerance %.3g)\n", (int)e->nlayers, worst, tol);
    ASSERT(worst <= tol);
    kiln_context_free(ctx);
}

/* Run e on fresh x; y against lc_ref within tol. */
static void run_check(const kiln_engine *e, const lc_w *w, uint64_t seed, double tol) {
    static float x[NX], y[NY];
    static double ref[NY];
    for (int i = 0; i < NX; i++) x[i] = test_randf(&seed, -3, 3);
    lc_ref(w, x, ref);
    run_xy(e, x, sizeof x, y, ref, NY, tol);
}

/* Fused op k of layer el is ns::name. */
static int epi_is(const kiln__elayer *el, int k, const char *name) {
    return k < el->nepi && el->epi[k].op_name && !strcmp(el->epi[k].op_name, name);
}

TEST_IMPL(cpu_fold) {
    lc_w w;
    lc_weights(&w, 31);
    for (int fuse = 1; fuse >= 0; fuse--) {
        kiln_network *net = lc_network(&w);
        kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING | (fuse ? 0 : KILN_BUILD_NO_FUSION), 1, NULL);
        kiln_network_free(net);
        if (fuse) {
            ASSERT_EQ(e->nlayers, 3);
            for (int32_t l = 0; l < 3; l++) {
                const kiln__elayer *el = &e->layers[l];
                ASSERT_CONTAINS(el->op_name, "Conv");
                ASSERT(epi_is(el, 0, "HardSwish"));
            }
            ASSERT(epi_is(&e->layers[0], 1, "Mul") && epi_is(&e->layers[0], 2, "Add"));
            ASSERT(epi_is(&e->layers[1], 1, "Div"));
            ASSERT_EQ(e->layers[2].nepi, 1);
        } else {
            ASSERT_EQ(e->nlayers, 20);
        }
        run_check(e, &w, 100 + (uint64_t)fuse, 1e-5);
        kiln_engine_free(e);
    }
    /* conv1's output also read by the network: its scale stays a layer */
    kiln_network *net = lc_network(&w);
    ASSERT_OK(kiln_network_mark_output(net, "v1"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, NULL);
    kiln_network_free(net);
    ASSERT(find_layer(e, "mul1"));
    ASSERT_EQ(find_layer(e, "conv1")->nepi, 0);
    kiln_context *ctx = NULL;
    static float x[NX], y[NY], v1[NY];
    static double ref[NY], vref[NY];
    uint64_t seed = 7;
    for (int i = 0; i < NX; i++) x[i] = test_randf(&seed, -3, 3);
    lc_ref(&w, x, ref);
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_bind(ctx, "v1", v1, sizeof v1));
    memset(y, 0xFF, sizeof y);
    memset(v1, 0xFF, sizeof v1);
    ASSERT_OK(kiln_context_run(ctx));
    lc_conv_ref(x, LC_C, w.w1, w.b1, 3, 1, vref);
    ASSERT(test_worst_rel(v1, vref, NY, 0) <= 1e-5);
    ASSERT(test_worst_rel(y, ref, NY, 0) <= 1e-5);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* The constant input p of layer el, as floats. */
static const float *const_in(const kiln_engine *e, const kiln__elayer *el, int p) {
    const kiln__etensor *t = &e->tensors[el->in[p]];
    ASSERT_EQ(t->kind, KILN__ET_CONST);
    ASSERT_EQ(t->dtype, KILN_DTYPE_F32);
    return (const float *)(e->weights + t->const_off);
}

static void check_gpu_engine(const kiln_engine *e, const lc_w *w) {
    ASSERT_EQ(e->nlayers - 2, 3); /* + the copies of x in and y out */
    const kiln__elayer *c[3] = {find_layer(e, "conv1"), find_layer(e, "conv2"), find_layer(e, "conv3")};
    for (int i = 0; i < 3; i++) {
        ASSERT(c[i]);
        ASSERT_EQ(c[i]->device, KILN_DEVICE_CUDA);
    }
    /* conv1: W * s1, B * s1 + c1; conv2: W * k (per channel), bias -d */
    const float *w1 = const_in(e, c[0], 1), *b1 = const_in(e, c[0], 2);
    const float *w2 = const_in(e, c[1], 1), *b2 = const_in(e, c[1], 2);
    for (int i = 0; i < LC_M * LC_C * 9; i++) ASSERT_NEAR(w1[i], (double)w->w1[i] * w->s1, 1e-6);
    for (int m = 0; m < LC_M; m++) {
        ASSERT_NEAR(b1[m], (double)w->b1[m] * w->s1 + w->c1, 1e-6);
        ASSERT_NEAR(b2[m], -(double)w->d, 1e-6);
        for (int c2 = 0; c2 < LC_M; c2++) ASSERT_NEAR(w2[m * LC_M + c2], (double)w->w2[m * LC_M + c2] * w->k[m], 1e-6);
    }
    float a, b;
    ASSERT_EQ(kiln__epi_cuda_act(c[0]->epi_rt, &a, &b), KILN_CU_ACT_HARDSWISH + KILN_CU_ACT_THEN_AFFINE);
    ASSERT_NEAR(a, w->s2, 1e-6);
    ASSERT_NEAR(b, w->c2, 1e-6);
    ASSERT_EQ(kiln__epi_cuda_act(c[1]->epi_rt, &a, &b), KILN_CU_ACT_HARDSWISH + KILN_CU_ACT_THEN_AFFINE);
    ASSERT_NEAR(a, 0.5, 1e-7);
    ASSERT_NEAR(b, 0.0, 1e-7);
    ASSERT_EQ(kiln__epi_cuda_act(c[2]->epi_rt, &a, &b), KILN_CU_ACT_HARDSWISH);
}

TEST_IMPL(gpu_fold_structure) {
    kiln__cuda_fake(1);
    lc_w w;
    lc_weights(&w, 32);
    kiln_network *net = lc_network(&w);
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE);
    if (!e) TEST__FAIL("build: %s", kiln_errmsg());
    kiln_network_free(net);
    check_gpu_engine(e, &w);
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    check_gpu_engine(e2, &w);
    kiln_free(buf);
    kiln_engine_free(e2);
    kiln_engine_free(e);
    /* HardSigmoid's default alpha (0.2) is no HardSwish: it stays a Mul after it */
    kiln_network *n2 = kiln_network_create();
    int64_t xd[2] = {3, 5};
    const char *hi[1] = {"x"}, *ho[1] = {"g"}, *mi[2] = {"g", "x"}, *mo[1] = {"y"};
    ASSERT_OK(kiln_network_add_input(n2, "x", KILN_DTYPE_F32, 2, xd, NULL));
    ASSERT(kiln_network_add_layer(n2, "ai.onnx::HardSigmoid", 6, "hsig", 1, hi, 1, ho));
    ASSERT(kiln_network_add_layer(n2, "ai.onnx::Mul", 7, "mul", 2, mi, 1, mo));
    ASSERT_OK(kiln_network_mark_output(n2, "y"));
    e = build_cuda(n2, KILN_BUILD_NO_TIMING);
    if (!e) TEST__FAIL("build: %s", kiln_errmsg());
    ASSERT(find_layer(e, "hsig") && find_layer(e, "mul"));
    kiln_engine_free(e);
    kiln_network_free(n2);
    kiln__cuda_fake(0);
}

/* PP-OCRv4's detector (../shared/models, skipped without it) on the
 * stand-in GPU: the layers by op, with and without fusion. */
static int ppocr_layers(unsigned flags, int *clip, int *div, int *mul, int *add) {
    kiln_network *net = NULL;
    ASSERT_OK(kiln_onnx_import(KILN_SOURCE_DIR "/../shared/models/ppocrv4_det/model.onnx", NULL, &net));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, flags | KILN_BUILD_NO_TIMING);
    int64_t d[4] = {1, 3, 64, 64};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 4, d, d, d));
    kiln_engine *e = NULL;
    if (kiln_build(net, cfg, &e, NULL)) TEST__FAIL("build: %s", kiln_errmsg());
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    *clip = *div = *mul = *add = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const char *op = e->layers[l].op_name;
        *clip += !strcmp(op, "Clip");
        *div += !strcmp(op, "Div");
        *mul += !strcmp(op, "Mul");
        *add += !strcmp(op, "Add");
    }
    int n = (int)e->nlayers;
    printf("  flags 0x%x: %d layers: %d Clip, %d Div, %d Mul, %d Add\n", flags, n, *clip, *div, *mul, *add);
    kiln_engine_free(e);
    return n;
}

TEST_IMPL(ppocr_det_gpu_layers) {
    if (access(KILN_SOURCE_DIR "/../shared/models/ppocrv4_det/model.onnx", R_OK)) {
        printf("SKIP: ../shared/models/ppocrv4_det/model.onnx is missing\n");
        return;
    }
    kiln__cuda_fake(1);
    int clip, div, mul, add, n0 = ppocr_layers(KILN_BUILD_NO_FUSION, &clip, &div, &mul, &add);
    ASSERT_EQ(clip, 24); /* the export: 24 hardswish of four layers */
    ASSERT_EQ(div, 24);
    int n1 = ppocr_layers(0, &clip, &div, &mul, &add);
    ASSERT_EQ(clip, 0);
    ASSERT_EQ(div, 0);
    ASSERT_EQ(mul, 10); /* the 10 squeeze-excitation gates (HardSigmoid(s) * x): two activations */
    ASSERT(n1 < n0);
    kiln__cuda_fake(0);
}

/* Run e on fresh x; y against db_ref within tol. */
static void db_check(const kiln_engine *e, const db_w *w, uint64_t seed, double tol) {
    static float x[DB_NX], y[DB_NY];
    static double ref[DB_NY];
    for (int i = 0; i < DB_NX; i++) x[i] = test_randf(&seed, -2, 2);
    db_ref(w, x, ref);
    run_xy(e, x, sizeof x, y, ref, DB_NY, tol);
}

TEST_IMPL(convtranspose_fold) {
    db_w w;
    db_weights(&w, 57);
    for (int fuse = 1; fuse >= 0; fuse--) {
        kiln_network *net = db_network(&w);
        kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING | (fuse ? 0 : KILN_BUILD_NO_FUSION), 1, NULL);
        kiln_network_free(net);
        ASSERT_EQ(e->nlayers, fuse ? 2 : 5);
        if (fuse) {
            const kiln__elayer *ct = find_layer(e, "convt");
            ASSERT(ct && ct->nin == 3 && ct->nepi == 1 && epi_is(ct, 0, "Relu"));
        }
        db_check(e, &w, 200 + (uint64_t)fuse, 1e-5);
        kiln_engine_free(e);
    }
    kiln__cuda_fake(1);
    kiln_network *net = db_network(&w);
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE);
    if (!e) TEST__FAIL("build: %s", kiln_errmsg());
    kiln_network_free(net);
    const kiln__elayer *ct = find_layer(e, "convt");
    ASSERT(ct && ct->device == KILN_DEVICE_CUDA && ct->nin == 3);
    ASSERT(!find_layer(e, "add") && !find_layer(e, "bn") && !find_layer(e, "relu"));
    float a, b;
    ASSERT_EQ(kiln__epi_cuda_act(ct->epi_rt, &a, &b), KILN_CU_ACT_RELU);
    const float *wf = const_in(e, ct, 1), *bf = const_in(e, ct, 2);
    const int mpg = DB_M / DB_G, cpg = DB_C / DB_G;
    double k[DB_M];
    for (int m = 0; m < DB_M; m++) {
        k[m] = w.scale[m] / sqrt((double)w.var[m] + DB_EPS);
        ASSERT_NEAR(bf[m], (w.b[m] - (double)w.mean[m]) * k[m] + w.shift[m], 1e-5);
    }
    for (int i = 0; i < DB_C * mpg * 9; i++) /* W [C, M/G, 3, 3]: channel c of group c / cpg */
        ASSERT_NEAR(wf[i], w.w[i] * k[i / (mpg * 9) / cpg * mpg + i / 9 % mpg], 1e-5);
    kiln_engine_free(e);
    kiln__cuda_fake(0);
}

/* An epilogue Add whose other operand is a network input (resid_nets.h):
 * the CPU engines, fused or not, match a double reference; on the stand-in
 * GPU, FP32 and FP16, the Conv takes the Add as a residual epilogue that
 * reads the input's host-to-device copy, and the engine prepares (build)
 * and loads (the residual Add once named the host tensor while the Conv
 * read the copy: "4 inputs, its op takes at most 3"). */
TEST_IMPL(input_residual) {
    rs_w w;
    rs_weights(&w, 71);
    for (int mode = 0; mode < RS_NMODES; mode++) {
        for (int fuse = 1; fuse >= 0; fuse--) {
            kiln_network *net = rs_network(&w, (rs_mode)mode);
            kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING | (fuse ? 0 : KILN_BUILD_NO_FUSION), 1, NULL);
            kiln_network_free(net);
            double worst = rs_run(e, &w, (rs_mode)mode, 200 + (uint64_t)(mode * 2 + fuse));
            printf("  CPU mode %d fusion %d: %d layers, max |y - ref| / (1 + |ref|) = %.3g\n", mode, fuse,
                   (int)e->nlayers, worst);
            ASSERT(worst <= 1e-5);
            if (fuse && mode == RS_MATMUL_X2) { /* the CPU MatMul takes the Add, then the Relu */
                const kiln__elayer *mm = find_layer(e, "matmul");
                ASSERT(mm && mm->nin == 3 && mm->nepi == 2 && epi_is(mm, 0, "Add") && epi_is(mm, 1, "Relu"));
            }
            kiln_engine_free(e);
        }
    }
    kiln__cuda_fake(1);
    for (int mode = 0; mode < RS_NMODES; mode++) {
        for (int h = 0; h < 2; h++) {
            kiln_network *net = rs_network(&w, (rs_mode)mode);
            kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE | (h ? KILN_BUILD_FP16 : 0));
            kiln_network_free(net);
            if (!e) TEST__FAIL("mode %d %s: build: %s", mode, h ? "FP16" : "FP32", kiln_errmsg());
            const kiln__elayer *conv = find_layer(e, "conv");
            if (mode != RS_MATMUL_X2) { /* the Conv reads the copy, and so does its residual Add */
                ASSERT(conv && conv->nin == 4 && epi_is(conv, 0, "Add") && conv->nepi == 2);
                ASSERT_EQ(conv->epi[0].in[1 - conv->epi[0].x], conv->in[3]);
                ASSERT_EQ(e->tensors[conv->in[3]].loc, KILN_DEVICE_CUDA);
            }
            kiln_engine_free(test_roundtrip(e)); /* loads (prepares) again */
            kiln_engine_free(e);
        }
    }
    kiln__cuda_fake(0);
}

/* Only the GPU Conv launcher reads a fused residual (kiln__epi_cuda_residual):
 * an engine (a crafted file) whose GPU layer of another op carries one is
 * refused at load, not run with the Add silently dropped.  The Conv of a
 * built engine is relabelled ConvTranspose (same inputs, also accepts
 * epilogues) and its chain prepared again. */
TEST_IMPL(gpu_residual_only_on_conv) {
    rs_w w;
    rs_weights(&w, 73);
    kiln__cuda_fake(1);
    kiln_network *net = rs_network(&w, RS_HSWISH_X2);
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE);
    kiln_network_free(net);
    if (!e) TEST__FAIL("build: %s", kiln_errmsg());
    kiln__elayer *conv = (kiln__elayer *)find_layer(e, "conv");
    ASSERT(conv && conv->nin == 4 && conv->device == KILN_DEVICE_CUDA);
    ASSERT_EQ(kiln__epi_cuda_residual(conv->epi_rt), 3);
    const kiln__op *own = conv->op;
    void *rt = conv->epi_rt;
    conv->op = kiln__registry_find("ai.onnx", "ConvTranspose", 1);
    ASSERT(conv->op);
    conv->epi_rt = NULL;
    ASSERT_EQ(kiln__epi_prepare(e, conv), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'conv' runs on the GPU with 2 fused ops (first ai.onnx::Add");
    ASSERT_CONTAINS(kiln_errmsg(), "residual Add (Conv)");
    ASSERT(!conv->epi_rt);
    conv->op = own;
    conv->epi_rt = rt;
    kiln_engine_free(e);
    kiln__cuda_fake(0);
}

TEST_LIST(TEST_ENTRY(cpu_fold), TEST_ENTRY(gpu_fold_structure), TEST_ENTRY(ppocr_det_gpu_layers),
          TEST_ENTRY(convtranspose_fold), TEST_ENTRY(input_residual),
          TEST_ENTRY(gpu_residual_only_on_conv))
