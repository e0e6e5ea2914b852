/*
 * reverse_sequence.c — ReverseSequence: reverse the first seq_lens[b]
 * elements of each batch entry along the time axis.
 */
#include "ops/common/ops_util.h"

static const kiln_attr_def revseq_attrs[] = {
    {.name = "batch_axis", .type = KILN_ATTR_INT, .def = "1"},
    {.name = "time_axis", .type = KILN_ATTR_INT, .def = "0"},
    {NULL}};
static int revseq_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int64_t ba = kiln_attrs_int(c->attrs, "batch_axis"), ta = kiln_attrs_int(c->attrs, "time_axis");
    if (x->ndim < 2 || !((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
        return kiln_set_error(KILN_EATTR, "ReverseSequence: batch_axis/time_axis must be 0/1 or 1/0 "
                              "(found %lld/%lld) on a tensor of rank >= 2 (rank %d)",
                              (long long)ba, (long long)ta, x->ndim);
    int r = kiln__ops_check_type(c, "ReverseSequence", 1, kiln__ops_is_int, "int64");
    if (r) return r;
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    return 0;
}
static int revseq_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int ba = (int)kiln_attrs_int(c->attrs, "batch_axis");
    int64_t T = x->dims[ba ? 0 : 1], B = x->dims[ba ? 1 : 0], inner = 1;
    for (int i = 2; i < x->ndim; i++) inner *= x->dims[i];
    size_t es = kiln_dtype_size(x->dtype), row = (size_t)inner * es;
    const char *xp = x->data;
    char *y = c->out[0].data;
    for (int64_t b = 0; b < B; b++) {
        int64_t L = kiln__ops_get_i64(c->in[1].data, c->in[1].dtype, b);
        if (L < 0 || L > T)
            return kiln_set_error(KILN_EINVAL, "ReverseSequence: sequence_lens[%lld] = %lld is out of "
                                  "range [0, %lld]", (long long)b, (long long)L, (long long)T);
        for (int64_t t = 0; t < T; t++) {
            int64_t src = t < L ? L - 1 - t : t;
            int64_t di = ba ? t * B + b : b * T + t, si = ba ? src * B + b : b * T + src;
            memcpy(y + di * row, xp + si * row, row);
        }
    }
    return 0;
}
static const kiln_quick_op revseq_op = {
    .ns = OPS_NS, .name = "ReverseSequence", .version = 10, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = revseq_attrs, .shape = revseq_shape, .impl = revseq_impl,
    .doc = "reverse the first sequence_lens[b] steps of each batch entry",
};
KILN_OP(revseq_op)
