/*
 * elementwise_cuda.c — CUDA launchers of elementwise.c's ops: the
 * broadcasting binary ops (binary_<T>, compare_<T> of elementwise.cu),
 * the variadic Sum/Mean/Max/Min (a chain of binary launches into the
 * output) and Where.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <string.h>

typedef struct bin_entry {
    const char *op;
    int code;
    int compare; /* bool output (compare_<T>) */
} bin_entry;

static const bin_entry bins[] = {
    {"Add", KILN_CU_ADD, 0}, {"Sub", KILN_CU_SUB, 0}, {"Mul", KILN_CU_MUL, 0},
    {"Div", KILN_CU_DIV, 0}, {"Pow", KILN_CU_POW, 0}, {"Max", KILN_CU_MAX, 0},
    {"Min", KILN_CU_MIN, 0}, {"Sum", KILN_CU_ADD, 0}, {"Mean", KILN_CU_ADD, 0},
    {"PRelu", KILN_CU_PRELU, 0}, {"BitwiseAnd", KILN_CU_BAND, 0}, {"BitwiseOr", KILN_CU_BOR, 0},
    {"BitwiseXor", KILN_CU_BXOR, 0}, {"Equal", KILN_CU_EQ, 1}, {"Less", KILN_CU_LT, 1},
    {"Greater", KILN_CU_GT, 1}, {"LessOrEqual", KILN_CU_LE, 1}, {"GreaterOrEqual", KILN_CU_GE, 1},
    {"And", KILN_CU_AND, 1}, {"Or", KILN_CU_OR, 1}, {"Xor", KILN_CU_XOR, 1},
};

static const bin_entry *bin_find(const char *op) {
    for (size_t i = 0; i < sizeof bins / sizeof bins[0]; i++)
        if (strcmp(bins[i].op, op) == 0) return &bins[i];
    return NULL;
}

/* y = a OP b with numpy broadcasting into y's dims, each operand walked by
 * its own strides (any layout); the walk follows y's memory order. */
static int bin_launch(const kiln_call *c, const char *opname, int code, int compare, const kiln_tensor *a,
                      const kiln_tensor *b, kiln_tensor *y) {
    const char *suf = kiln__cu_suffix(a->dtype);
    if (!suf || (a->dtype == KILN_DTYPE_BOOL && !compare))
        return kiln__cu_type_err(opname, a->dtype);
    if (b->dtype != a->dtype)
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernels need both inputs of one type (%s and %s)",
                              opname, kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    int64_t sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS], sy[KILN_MAX_DIMS];
    int rc = kiln__cu_bcast_strides(opname, y->ndim, y->dims, a->ndim, a->dims, a->strides, sa);
    if (!rc) rc = kiln__cu_bcast_strides(opname, y->ndim, y->dims, b->ndim, b->dims, b->strides, sb);
    if (!rc) rc = kiln__cu_bcast_strides(opname, y->ndim, y->dims, y->ndim, y->dims, y->strides, sy);
    if (rc) return rc;
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, y->dims, sizeof(int64_t) * (size_t)y->ndim);
    if (y->format == KILN_FORMAT_NHWC && y->ndim == 4) { /* walk y's memory order (N, H, W, C): coalesced */
        static const int perm[4] = {0, 2, 3, 1};
        int64_t *v[4] = {dims, sa, sb, sy};
        for (int k = 0; k < 4; k++) {
            int64_t t[4];
            for (int i = 0; i < 4; i++) t[i] = v[k][perm[i]];
            memcpy(v[k], t, sizeof t);
        }
    }
    const int64_t *st[3] = {sa, sb, sy};
    kiln_cu_iter it;
    kiln__cu_iter_init(&it, y->ndim, dims, 3, st);
    void *args[] = {&it, (void *)&a->data, (void *)&b->data, &y->data, &code};
    return kiln__cu_launch_n(c, compare ? "compare" : "binary", suf, it.numel, args);
}

int kiln__cu_binary(const kiln_call *c, const char *op) {
    const bin_entry *e = bin_find(op);
    if (!e) return kiln_set_error(KILN_EINTERNAL, "%s: no CUDA binary op of that name", op);
    return bin_launch(c, op, e->code, e->compare, &c->in[0], &c->in[1], &c->out[0]);
}

int kiln__cu_mod(const kiln_call *c) {
    const kiln_attr_value *f = kiln_attrs_get(c->attrs, "fmod");
    int code = f && f->present && f->i ? KILN_CU_FMOD : KILN_CU_MOD;
    return bin_launch(c, "Mod", code, 0, &c->in[0], &c->in[1], &c->out[0]);
}

int kiln__cu_bitshift(const kiln_call *c) {
    const char *d = kiln__cu_attr_str(c, "direction", "");
    int left = !strcmp(d, "LEFT");
    if (!left && strcmp(d, "RIGHT")) return kiln_set_error(KILN_EATTR, "BitShift: direction '%s'", d);
    return bin_launch(c, "BitShift", left ? KILN_CU_SHL : KILN_CU_SHR, 0, &c->in[0], &c->in[1], &c->out[0]);
}

/* Sum/Mean/Max/Min of n inputs: y = in0 OP in1, then y = y OP in_k (y
 * already has the full broadcast dims); Mean scales by 1/n at the end. */
int kiln__cu_variadic(const kiln_call *c, const char *op) {
    const bin_entry *e = bin_find(op);
    kiln_tensor *y = &c->out[0];
    int rc;
    if (c->nin == 1) {
        int64_t s[KILN_MAX_DIMS];
        rc = kiln__cu_bcast_strides(op, y->ndim, y->dims, c->in[0].ndim, c->in[0].dims, c->in[0].strides, s);
        if (!rc) rc = kiln__cu_copy(c, y->dtype, y->ndim, y->dims, c->in[0].data, s, y->data, y->strides);
    } else {
        rc = bin_launch(c, op, e->code, 0, &c->in[0], &c->in[1], y);
        for (int k = 2; k < c->nin && !rc; k++) rc = bin_launch(c, op, e->code, 0, y, &c->in[k], y);
    }
    if (rc || strcmp(op, "Mean") != 0 || c->nin == 1) return rc;
    const char *suf = kiln__cu_suffix(y->dtype);
    int64_t n = kiln_tensor_numel(y);
    int act = KILN_CU_ACT_AFFINE;
    float a = 1.0f / (float)c->nin, b = 0.0f;
    void *args[] = {&n, &y->data, &y->data, &act, &a, &b};
    return kiln__cu_launch_n(c, "unary", suf, n, args);
}

int kiln__cu_where(const kiln_call *c) {
    const kiln_tensor *cd = &c->in[0], *x = &c->in[1], *z = &c->in[2];
    kiln_tensor *y = &c->out[0];
    const char *sz = kiln__cu_size_suffix(y->dtype);
    if (!sz || cd->dtype != KILN_DTYPE_BOOL) return kiln__cu_type_err("Where", y->dtype);
    if (!kiln__cu_contig(y)) return kiln_set_error(KILN_EUNSUPPORTED, "Where: CUDA kernel needs a contiguous output");
    int64_t s0[KILN_MAX_DIMS], s1[KILN_MAX_DIMS], s2[KILN_MAX_DIMS];
    int rc = kiln__cu_bcast_strides("Where", y->ndim, y->dims, cd->ndim, cd->dims, cd->strides, s0);
    if (!rc) rc = kiln__cu_bcast_strides("Where", y->ndim, y->dims, x->ndim, x->dims, x->strides, s1);
    if (!rc) rc = kiln__cu_bcast_strides("Where", y->ndim, y->dims, z->ndim, z->dims, z->strides, s2);
    if (rc) return rc;
    const int64_t *st[3] = {s0, s1, s2};
    kiln_cu_iter it; /* coalescing keeps the row-major order: y[i] is element i */
    kiln__cu_iter_init(&it, y->ndim, y->dims, 3, st);
    void *args[] = {&it, (void *)&cd->data, (void *)&x->data, (void *)&z->data, &y->data};
    return kiln__cu_launch_n(c, "where", sz, it.numel, args);
}

int kiln__cu_not(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    if (x->dtype != KILN_DTYPE_BOOL) return kiln__cu_type_err("Not", x->dtype);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(&c->out[0]))
        return kiln_set_error(KILN_EUNSUPPORTED, "Not: CUDA kernel needs contiguous tensors");
    int64_t n = kiln_tensor_numel(x);
    void *args[] = {&n, (void *)&x->data, &c->out[0].data};
    return kiln__cu_launch_n(c, "not_bool", NULL, n, args);
}
