/*
 * reduce_cuda.c — CUDA launchers of reduce.c's ops: the Reduce* family
 * (reduce_<T> of reduce.cu, one block per output element) and
 * ArgMax/ArgMin (reduce_arg_<T>).  Axes come from the attribute (opset
 * 1..) or input 1, kept on the host (cuda_host_inputs).  FP32/FP16/BF16
 * accumulate in float (the CPU op uses double: sums of many elements
 * differ in the last bits), FP64 in double; integer Sum/Max/Min/Prod/Mean
 * are exact.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <string.h>

typedef struct red_entry {
    const char *op;
    int code, float_only;
} red_entry;

static const red_entry reds[] = {
    {"ReduceSum", KILN_CU_RSUM, 0},       {"ReduceMean", KILN_CU_RMEAN, 0},
    {"ReduceMax", KILN_CU_RMAX, 0},       {"ReduceMin", KILN_CU_RMIN, 0},
    {"ReduceProd", KILN_CU_RPROD, 0},     {"ReduceL1", KILN_CU_RL1, 1},
    {"ReduceL2", KILN_CU_RL2, 1},         {"ReduceLogSum", KILN_CU_RLOGSUM, 1},
    {"ReduceLogSumExp", KILN_CU_RLOGSUMEXP, 1}, {"ReduceSumSquare", KILN_CU_RSUMSQUARE, 1},
};

/* out: the kept axes (input offset, output offset); red: the reduced axes. */
static void red_iters(const kiln_tensor *x, const int *mask, kiln_cu_iter *out, kiln_cu_iter *red) {
    int64_t kd[KILN_MAX_DIMS], ks[KILN_MAX_DIMS], ko[KILN_MAX_DIMS], rd[KILN_MAX_DIMS], rs[KILN_MAX_DIMS];
    int nk = 0, nr = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (mask[i]) rd[nr] = x->dims[i], rs[nr++] = x->strides[i];
        else kd[nk] = x->dims[i], ks[nk++] = x->strides[i];
    }
    kiln__cu_contig_strides(nk, kd, ko);
    const int64_t *so[2] = {ks, ko}, *sr[1] = {rs};
    kiln__cu_iter_init(out, nk, kd, 2, so);
    kiln__cu_iter_init(red, nr, rd, 1, sr);
}

int kiln__cu_reduce(const kiln_call *c, const char *op) {
    const red_entry *e = NULL;
    for (size_t i = 0; i < sizeof reds / sizeof reds[0]; i++)
        if (!strcmp(reds[i].op, op)) e = &reds[i];
    if (!e) return kiln_set_error(KILN_EINTERNAL, "%s: no CUDA reduction of that name", op);
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int is_f = x->dtype == KILN_DTYPE_F32 || x->dtype == KILN_DTYPE_F16 || x->dtype == KILN_DTYPE_BF16 ||
               x->dtype == KILN_DTYPE_F64;
    int is_i = x->dtype == KILN_DTYPE_I32 || x->dtype == KILN_DTYPE_I64;
    if (!is_f && !(is_i && !e->float_only)) return kiln__cu_type_err(op, x->dtype);
    int r = x->ndim, mask[KILN_MAX_DIMS] = {0}, nax = 0;
    const kiln_attr_value *nv = kiln_attrs_get(c->attrs, "noop_with_empty_axes");
    int noop = nv && nv->present && nv->i;
    if (c->nin > 1 && kiln__cu_has_in(c, 1)) {
        if (c->in[1].device != KILN_DEVICE_CPU)
            return kiln_set_error(KILN_EINTERNAL, "%s: axes input is not in host memory", op);
        nax = (int)kiln_tensor_numel(&c->in[1]);
        for (int i = 0; i < nax; i++) {
            int64_t a = kiln__cu_host_i64(&c->in[1], i);
            if (a < 0) a += r;
            if (a < 0 || a >= r) return kiln_set_error(KILN_EATTR, "%s: axis %lld out of range", op, (long long)a);
            mask[a] = 1;
        }
    } else if (c->nin == 1) {
        const int64_t *av = NULL;
        int64_t n = kiln__cu_attr_ints(c, "axes", &av);
        for (int64_t i = 0; i < n; i++) {
            int64_t a = av[i] < 0 ? av[i] + r : av[i];
            if (a < 0 || a >= r) return kiln_set_error(KILN_EATTR, "%s: axis %lld out of range", op, (long long)av[i]);
            mask[a] = 1;
            nax++;
        }
    }
    if (nax == 0) {
        if (noop) return kiln__cu_copy_input(c);
        for (int i = 0; i < r; i++) mask[i] = 1;
    }
    if (!kiln__cu_contig(y)) return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs a contiguous output", op);
    kiln_cu_iter out, red;
    red_iters(x, mask, &out, &red);
    if (out.numel == 0) return 0;
    int code = e->code;
    void *args[] = {&out, &red, (void *)&x->data, &y->data, &code};
    return kiln__cu_launch_blocks(c, "reduce", kiln__cu_suffix(x->dtype), out.numel,
                                  is_f ? kiln__cu_block_for(red.numel) : 64, args);
}

static int arg(const kiln_call *c, int is_max) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    const char *op = is_max ? "ArgMax" : "ArgMin";
    if (x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16 && x->dtype != KILN_DTYPE_BF16)
        return kiln__cu_type_err(op, x->dtype);
    if (!kiln__cu_contig(y)) return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs a contiguous output", op);
    int r = x->ndim, ax = (int)kiln__cu_attr_int(c, "axis", 0), mask[KILN_MAX_DIMS] = {0};
    if (ax < 0) ax += r;
    mask[ax] = 1;
    kiln_cu_iter out, red;
    red_iters(x, mask, &out, &red);
    if (out.numel == 0) return 0;
    if (red.numel == 0) return kiln_set_error(KILN_ESHAPE, "%s: empty axis %d", op, ax);
    red.st[0][0] = x->strides[ax]; /* the kernel walks the one axis by index */
    int code = is_max ? KILN_CU_RARGMAX : KILN_CU_RARGMIN, last = (int)kiln__cu_attr_int(c, "select_last_index", 0);
    void *args[] = {&out, &red, (void *)&x->data, &y->data, &code, &last};
    return kiln__cu_launch_blocks(c, "reduce_arg", kiln__cu_suffix(x->dtype), out.numel,
                                  kiln__cu_block_for(red.numel), args);
}

int kiln__cu_argmax(const kiln_call *c) { return arg(c, 1); }
int kiln__cu_argmin(const kiln_call *c) { return arg(c, 0); }
