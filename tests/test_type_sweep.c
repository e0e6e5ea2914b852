/*
 * test_type_sweep.c — an engine whose tensor types were changed must fail
 * cleanly, never make a kernel read or write past a tensor.
 *
 * For small models of the ONNX node tests (ops with several float inputs,
 * weights, indices, states), every position of every layer in turn gets a
 * tensor type of another width — BOOL (1 byte: a kernel that reads it as
 * f32 or i64 would overrun it) and F64 (8 bytes) — and the layers' records
 * of their chosen types say the same, as a crafted file would; the engine
 * is then loaded and run on fresh data, each case in a child process.
 * Under ASan (scripts/test.sh) an overrun aborts the child, which fails the
 * test naming model, layer, position and type; an error code is the
 * expected outcome (the load checks each layer's combination, the shape
 * function its types before the first run).  Found this way: LSTM weights
 * (fuzz/open, issue 12), Gemm's C, InstanceNormalization and
 * LayerNormalization scale and bias read as f32 whatever their type.
 * Exits 77 (skipped) without the ONNX test data.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kiln/kiln.h>
#include <kiln/onnx.h>

#include "kiln_int.h"
#include "test.h"

#define NODE_DATA "/usr/share/libonnx-testdata/data/node"

static const char *const k_models[] = {
    "gemm_all_attributes", "gemm_default_vector_bias", "matmul_3d", "instancenorm_example",
    "layer_normalization_2d_axis0", "batchnorm_example", "lstm_defaults", "gru_defaults", "rnn_seq_length",
    "conv_with_strides_padding", "convtranspose", "prelu_broadcast", "where_example", "gather_elements_0",
    "scatternd", "gathernd_example_int32", "roialign_aligned_false", "gridsample", "einsum_batch_matmul",
    "clip", "cumsum_2d_axis_1", "mean_example", "pow_bcast_array", "det_2d", "dequantizelinear",
    "qlinearmatmul_2D", "nonmaxsuppression_two_batches", "reversesequence_batch", "tile", "expand_dim_changed",
    "compress_0", "onehot_with_axis", "top_k", "range_float_type_positive_delta", "resize_upsample_sizes_cubic",
    "lrn", "mvn", "maxpool_2d_pads", "averagepool_2d_pads", "dft", "stft",
};

static void fill(uint8_t *b, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (uint8_t)((seed >> 16) & 3); /* small values: valid indices are likely */
    }
}

/* Load and run the image (in the child); errors are fine. */
static void load_and_run(const void *img, size_t n, uint32_t seed) {
    kiln_engine *e = NULL;
    if (kiln_engine_load_memory(img, n, &e)) return;
    kiln_context *c = NULL;
    if (kiln_context_create(e, 1, &c)) {
        kiln_engine_free(e);
        return;
    }
    int ni = kiln_engine_num_inputs(e);
    void *bufs[16] = {0};
    for (int i = 0; i < ni && i < 16; i++) {
        kiln_io_info info;
        if (kiln_engine_io(e, i, &info)) goto out;
        size_t bytes = kiln_dtype_size(info.dtype);
        for (int d = 0; d < info.ndim; d++) bytes *= (size_t)(info.dims[d] >= 0 ? info.dims[d] : info.opt[d]);
        if (bytes > (16u << 20) || !(bufs[i] = malloc(bytes ? bytes : 1))) goto out;
        fill(bufs[i], bytes, seed + (uint32_t)i);
        if (kiln_context_bind(c, info.name, bytes ? bufs[i] : NULL, bytes)) goto out;
    }
    kiln_context_run(c);
out:
    for (int i = 0; i < 16; i++) free(bufs[i]);
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* Tensor t set to dtype dt, with every layer's record of it; serialized. */
static int retyped_image(kiln_engine *e, int32_t t, kiln_dtype dt, void **img, size_t *n) {
    uint8_t orig = e->tensors[t].dtype;
    e->tensors[t].dtype = (uint8_t)dt;
    kiln_dtype saved[64][KILN_MAX_IO];
    for (int32_t m = 0; m < e->nlayers && m < 64; m++) {
        kiln__elayer *M = &e->layers[m];
        for (int q = 0; q < M->io.n; q++) {
            saved[m][q] = M->io.dtype[q];
            if ((q < M->nin ? M->in[q] : M->out[q - M->nin]) == t) M->io.dtype[q] = dt;
        }
    }
    int rc = kiln_engine_serialize(e, img, n);
    for (int32_t m = 0; m < e->nlayers && m < 64; m++)
        for (int q = 0; q < e->layers[m].io.n; q++) e->layers[m].io.dtype[q] = saved[m][q];
    e->tensors[t].dtype = orig;
    return rc;
}

TEST_IMPL(retyped_tensors_fail_cleanly) {
    if (access(NODE_DATA, R_OK)) {
        fprintf(stderr, "skipped: no ONNX node test data in %s (Debian package libonnx-testdata)\n", NODE_DATA);
        exit(77);
    }
    kiln_log_set(KILN_LOG_ERROR, NULL, NULL);
    static const kiln_dtype dts[] = {KILN_DTYPE_BOOL, KILN_DTYPE_F64};
    int models = 0, cases = 0;
    for (size_t mi = 0; mi < sizeof k_models / sizeof k_models[0]; mi++) {
        char path[512];
        snprintf(path, sizeof path, "%s/test_%s/model.onnx", NODE_DATA, k_models[mi]);
        kiln_network *net = NULL;
        if (access(path, R_OK) || kiln_onnx_import(path, NULL, &net)) continue;
        kiln_build_config *cfg = kiln_build_config_create();
        kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
        kiln_engine *e = NULL;
        int rc = kiln_build(net, cfg, &e, NULL);
        kiln_build_config_free(cfg);
        kiln_network_free(net);
        if (rc) continue; /* built by the conformance tests; here only engines that exist */
        models++;
        for (int32_t l = 0; l < e->nlayers && e->nlayers <= 64; l++) {
            const kiln__elayer *L = &e->layers[l];
            if (L->aot_kernel >= 0) continue;
            for (int p = 0; p < L->nin + L->nout; p++) {
                int32_t t = p < L->nin ? L->in[p] : L->out[p - L->nin];
                if (t < 0) continue;
                for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
                    if (e->tensors[t].dtype == dts[k]) continue;
                    void *img = NULL;
                    size_t n = 0;
                    ASSERT_OK(retyped_image(e, t, dts[k], &img, &n));
                    cases++;
                    fflush(NULL);
                    pid_t pid = fork();
                    ASSERT(pid >= 0);
                    if (pid == 0) {
                        load_and_run(img, n, (uint32_t)cases);
                        _exit(0);
                    }
                    int st = 0;
                    ASSERT_EQ(waitpid(pid, &st, 0), pid);
                    if (!WIFEXITED(st) || WEXITSTATUS(st))
                        TEST__FAIL("%s: layer '%s' (%s) position %d, tensor '%s' as %s: the run %s %d", k_models[mi],
                                   L->name, L->op_name, p, e->tensors[t].name, kiln_dtype_name(dts[k]),
                                   WIFEXITED(st) ? "exited with" : "died of signal",
                                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                    kiln_free(img);
                }
            }
        }
        kiln_engine_free(e);
    }
    fprintf(stderr, "%d models, %d retyped engines, all refused or run cleanly\n", models, cases);
    ASSERT(models >= 20);
}

TEST_LIST(TEST_ENTRY(retyped_tensors_fail_cleanly))
