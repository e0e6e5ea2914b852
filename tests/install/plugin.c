/* plugin.c — a plugin library built outside the tree against an installed
 * kiln (pkg-config --cflags kiln; not linked with -lkiln: its kiln_* calls
 * bind to the libkiln of the process that loads it).  outside::negate:
 * y = -x. */
#include <kiln/plugin.h>

static int negate_shape(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}
static int negate_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = -x[i];
    return 0;
}
static const kiln_quick_op negate = {
    .ns = "outside", .name = "negate", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .shape = negate_shape, .impl = negate_impl, .doc = "y = -x",
};
KILN_OP(negate)
