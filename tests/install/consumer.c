/* consumer.c — a program outside the tree: includes <kiln/kiln.h> and
 * <kiln/plugin.h> from an installed prefix, links -lkiln through pkg-config,
 * defines its own quick op and runs it after a built-in op (ai.onnx::Relu).
 * Checks the result against a naive reference; exit 0 on success. */
#include <kiln/kiln.h>
#include <kiln/plugin.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int scale_shape(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}
static int scale_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    float *y = c->out[0].data, k = (float)kiln_attrs_float(c->attrs, "k");
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = k * x[i];
    return 0;
}
static const kiln_attr_def scale_attrs[] = {{"k", KILN_ATTR_FLOAT, 0, "2.0", 0, "factor"}, {NULL}};
static const kiln_quick_op scale = {
    .ns = "consumer", .name = "scale", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = scale_attrs, .shape = scale_shape, .impl = scale_impl,
};
KILN_OP(scale)

#define CHECK(call)                                                            \
    do {                                                                       \
        if ((call) != 0) {                                                     \
            fprintf(stderr, "%s failed: %s\n", #call, kiln_errmsg());         \
            return 1;                                                          \
        }                                                                      \
    } while (0)

int main(void) {
    enum { N = 37 };
    const int64_t dims[1] = {N};
    kiln_network *net = kiln_network_create();
    CHECK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in0[] = {"x"}, *out0[] = {"r"}, *in1[] = {"r"}, *out1[] = {"y"};
    if (!kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, in0, 1, out0)) {
        fprintf(stderr, "add Relu: %s\n", kiln_errmsg());
        return 1;
    }
    kiln_layer *l = kiln_network_add_layer(net, "consumer::scale", 1, "scale", 1, in1, 1, out1);
    if (!l) {
        fprintf(stderr, "add scale: %s\n", kiln_errmsg());
        return 1;
    }
    CHECK(kiln_layer_set_float(l, "k", 3.0));
    CHECK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_engine *e = NULL;
    CHECK(kiln_build(net, cfg, &e, NULL));
    kiln_context *ctx = NULL;
    CHECK(kiln_context_create(e, 1, &ctx));
    float x[N], y[N];
    srand(12345);
    for (int i = 0; i < N; i++) {
        x[i] = (float)rand() / RAND_MAX * 2 - 1;
        y[i] = NAN;
    }
    CHECK(kiln_context_bind(ctx, "x", x, sizeof x));
    CHECK(kiln_context_bind(ctx, "y", y, sizeof y));
    CHECK(kiln_context_run(ctx));
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (fabsf(y[i] - 3.0f * (x[i] > 0 ? x[i] : 0)) > 1e-6f) bad++;
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    printf("%s: %d mismatches\n", bad ? "FAIL" : "PASS", bad);
    return bad != 0;
}
