/*
 * epilogue.c — fused epilogue chains at run time.
 *
 * The builder (builder/fuse.c) folds elementwise layers into the layer that
 * produces their input; the engine keeps, per layer, the chain of fused ops
 * (kiln__eepi: identity, attributes, constant inputs).  Here a loaded or
 * built engine turns each chain into a ready-to-call list (op epilogue
 * function + kiln_epilogue_args over the engine's weights), which the
 * context hands to the producing kernel as kiln_call.epilogue.  Everything
 * from the file is checked again here: ops exist and have an epilogue,
 * inputs are constants of static shape, and each op's epilogue_check still
 * accepts them (a crafted file cannot make an epilogue read past a
 * constant).
 *
 * A layer on the GPU gets data instead of callbacks: its chain is an
 * optional residual Add (a Conv's) or bias (a MatMul's Add of a constant
 * over the last dim, read by the launcher with kiln__epi_cuda_bias:
 * cuBLASLt's BIAS epilogue) and an optional ai.onnx activation with a
 * kiln_cu_act code (builder/fuse.c), which its CUDA launcher reads with
 * kiln__epi_cuda_act and applies in its kernels; kiln_call_epilogue is a
 * no-op there (no host entries).  Scalar Mul/Div/Add/Sub after an
 * activation without parameters become a y + b after it, in the same code
 * (KILN_CU_ACT_THEN_AFFINE).
 *
 * Linear bias on the CPU: the first entry of a MatMul's chain may be the
 * same bias (an ai.onnx Add of a constant over the output's last dim,
 * which Add's per-channel host epilogue cannot express); the host adds it
 * by column (the run's offset in output 0 gives the column).  Old engine
 * files never hold such a chain on the CPU: the format is unchanged.
 *
 * Residual Add (builder/fuse.c): the chain's first entry may be an
 * ai.onnx Add whose other input is not a constant but the layer's extra
 * input at index max_inputs of its op.  The host adds it element by element
 * (the offset of the run handed to kiln_call_epilogue in output 0 is its
 * offset in the residual), or by column when it is a vector over output
 * 0's last dim (a MatMul's bias that is not a constant); on the GPU,
 * kiln__epi_cuda_residual tells the launcher which input to add.
 */
#include "kiln_int.h"
#include "ops/common/ops_cuda.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdio.h>

typedef struct epi_entry {
    int (*fn)(const kiln_epilogue_args *a, float *x, int64_t n, int64_t channel, int64_t chan_len);
    int residual;         /* > 0: add the call's input `residual` instead of fn */
    int relu;             /* 1: ai.onnx Relu (kiln__epi_residual_relu) */
    int bias;             /* 1: add the layer's linear bias (epi_rt) instead of fn */
    kiln_epilogue_args args;
    kiln_attrs attrs;
    kiln_tensor in[KILN__EPI_MAX_IN];
} epi_entry;

typedef struct epi_rt {
    int n;                /* host entries (0 on a GPU layer) */
    int cu_act;           /* GPU layer: kiln_cu_act code (KILN_CU_ACT_NONE: none) */
    int cu_res;           /* GPU layer: input index of a residual to add first, -1: none */
    float cu_a, cu_b;     /* its parameters */
    const kiln_engine *cu_engine; /* linear bias: a constant of this engine, */
    uint64_t cu_bias_off; /* at this offset of its weights (GPU: uploaded), */
    int64_t cu_bias_n;    /* this many elements (0: no bias) */
    epi_entry e[KILN__MAX_EPI];
} epi_rt;

int kiln__epi_cuda_act(const void *epilogue, float *a, float *b) {
    const epi_rt *r = epilogue;
    *a = r ? r->cu_a : 0.0f;
    *b = r ? r->cu_b : 0.0f;
    return r ? r->cu_act : KILN_CU_ACT_NONE;
}

const void *kiln__epi_cuda_bias(const void *epilogue, int64_t *n) {
    const epi_rt *r = epilogue;
    *n = r ? r->cu_bias_n : 0;
    if (!r || !r->cu_bias_n || !r->cu_engine->dweights) return NULL;
    return (const uint8_t *)r->cu_engine->dweights + r->cu_bias_off;
}

int kiln__epi_is_cuda(const void *epilogue) {
    const epi_rt *r = epilogue;
    return r && r->n == 0 && (r->cu_act > KILN_CU_ACT_NONE || r->cu_bias_n > 0 || r->cu_res >= 0);
}

/* A linear bias (both devices): ai.onnx Add of x and a constant of the
 * layer's output type holding one value per element of the output's last
 * dim (static), on a MatMul.  0 and the bias in rt, or -1. */
static int cuda_bias(const kiln_engine *e, const kiln__elayer *el, const kiln__eepi *p, epi_rt *rt) {
    if (!p->op || strcmp(p->op->ns, "ai.onnx") || strcmp(p->op->name, "Add") || strcmp(el->op->ns, "ai.onnx") ||
        strcmp(el->op->name, "MatMul") || p->nin != 2 || p->x < 0 || p->x > 1)
        return -1;
    int32_t ci = p->in[1 - p->x];
    if (ci < 0 || ci >= e->ntensors || e->tensors[ci].kind != KILN__ET_CONST) return -1;
    const kiln__etensor *ct = &e->tensors[ci], *y = &e->tensors[el->out[0]];
    int64_t cd[KILN_MAX_DIMS], yd[KILN_MAX_DIMS], n = 1;
    kiln__etensor_static_dims(e, y, yd);
    if (kiln__etensor_static_dims(e, ct, cd) >= 0 || ct->dtype != y->dtype || y->ndim < 1 || ct->ndim > y->ndim ||
        yd[y->ndim - 1] < 1)
        return -1;
    for (int d = 0; d < ct->ndim; d++) {
        if (d + 1 < ct->ndim && cd[d] != 1) return -1;
        n *= cd[d];
    }
    if (n != yd[y->ndim - 1] || (uint64_t)n * kiln_dtype_size((kiln_dtype)ct->dtype) != ct->const_bytes ||
        ct->const_off > e->weights_size || ct->const_bytes > e->weights_size - ct->const_off)
        return -1;
    rt->cu_engine = e;
    rt->cu_bias_off = ct->const_off;
    rt->cu_bias_n = n;
    return 0;
}

int kiln__epi_cuda_residual(const void *epilogue) {
    const epi_rt *r = epilogue;
    return r ? r->cu_res : -1;
}

int kiln__epi_residual_relu(const void *epilogue, int *res, int *relu) {
    const epi_rt *r = epilogue;
    int i = 0;
    *res = -1;
    *relu = 0;
    if (!r || r->n < 1) return 0;
    if (r->e[0].residual) *res = r->e[i++].residual;
    if (i < r->n && r->e[i].relu) *relu = r->e[i++].relu;
    return i == r->n;
}

/* Entry i of the chain is a residual Add: an ai.onnx Add whose other input
 * is the layer's extra input (index max_inputs of its op).  Returns that
 * index, 0 when the entry is not one. */
static int residual_of(const kiln__elayer *el, int i) {
    const kiln__eepi *p = &el->epi[i];
    int r = el->op->max_inputs;
    if (!p->op_ns || !p->op_name || strcmp(p->op_ns, "ai.onnx") || strcmp(p->op_name, "Add") || p->nin != 2 ||
        p->x < 0 || p->x > 1 || el->nin != r + 1 || el->in[r] < 0 || p->in[1 - p->x] != el->in[r])
        return 0;
    return r;
}

/* Constant tensor ci of e: one float element, its value in *v. */
static int scalar_const(const kiln_engine *e, int32_t ci, double *v) {
    if (ci < 0 || ci >= e->ntensors || e->tensors[ci].kind != KILN__ET_CONST) return 0;
    const kiln__etensor *ct = &e->tensors[ci];
    int64_t cd[KILN_MAX_DIMS], n = 1;
    if (kiln__etensor_static_dims(e, ct, cd) >= 0 || !kiln__ops_is_float((kiln_dtype)ct->dtype)) return 0;
    for (int d = 0; d < ct->ndim; d++) n *= cd[d];
    if (n != 1 || ct->const_bytes != kiln_dtype_size((kiln_dtype)ct->dtype) || ct->const_off > e->weights_size ||
        ct->const_bytes > e->weights_size - ct->const_off)
        return 0;
    *v = kiln__ops_get_f64(e->weights + ct->const_off, (kiln_dtype)ct->dtype, 0);
    return 1;
}

/* Entries j.. of the chain after a parameterless activation: ai.onnx Mul,
 * Add or Sub of x and a scalar constant (either order), or Div of x by one, folded into y * a + b after
 * the activation (KILN_CU_ACT_THEN_AFFINE).  1 if so. */
static int cuda_affine(const kiln_engine *e, kiln__elayer *el, int j, epi_rt *rt) {
    double a = 1, b = 0, v;
    if (!kiln__cu_act_plain(rt->cu_act)) return 0;
    for (; j < el->nepi; j++) {
        kiln__eepi *p = &el->epi[j];
        if (!p->op) p->op = kiln__registry_find(p->op_ns, p->op_name, p->op_version);
        if (!p->op || strcmp(p->op->ns, "ai.onnx") || p->nin != 2 || p->x < 0 || p->x > 1 ||
            !scalar_const(e, p->in[1 - p->x], &v))
            return 0;
        const char *n = p->op->name;
        if (!strcmp(n, "Mul")) a *= v, b *= v;
        else if (!strcmp(n, "Add")) b += v;
        else if (!strcmp(n, "Sub") && p->x == 0) b -= v;
        else if (!strcmp(n, "Sub")) a = -a, b = v - b; /* v - y */
        else if (!strcmp(n, "Div") && p->x == 0 && v != 0) a /= v, b /= v;
        else return 0;
    }
    rt->cu_act += KILN_CU_ACT_THEN_AFFINE;
    rt->cu_a = (float)a;
    rt->cu_b = (float)b;
    return isfinite(rt->cu_a) && isfinite(rt->cu_b);
}

/* A GPU layer's chain: [residual Add (Conv) | bias (MatMul)] [activation
 * [scalar Mul/Div/Add/Sub ...]] (see above). */
static int prepare_cuda(const kiln_engine *e, kiln__elayer *el) {
    epi_rt *rt = kiln__calloc(1, sizeof *rt);
    if (!rt) return kiln__err(KILN_ENOMEM, "out of memory");
    rt->cu_act = KILN_CU_ACT_NONE;
    rt->cu_res = -1;
    int i = 0, ok = el->nepi >= 1 && el->nepi <= KILN__MAX_EPI && !strcmp(el->op->ns, "ai.onnx");
    if (ok) {
        kiln__eepi *p = &el->epi[0];
        if (!p->op) p->op = kiln__registry_find(p->op_ns, p->op_name, p->op_version);
        int res = residual_of(el, 0);
        if (res) { /* only Conv's launcher reads one (a crafted file may name another op) */
            rt->cu_res = res;
            ok = !strcmp(el->op->name, "Conv");
            i = ok; /* else the message names the residual Add */
        } else if (!cuda_bias(e, el, p, rt)) {
            i = 1;
        }
    }
    if (ok && i < el->nepi) { /* the activation, then scalar steps */
        kiln__eepi *p = &el->epi[i];
        if (!p->op) p->op = kiln__registry_find(p->op_ns, p->op_name, p->op_version);
        ok = p->op && !strcmp(p->op->ns, "ai.onnx") && p->nin == 1 && p->x == 0 &&
             (p->attrs.v || p->op->nattrs == 0 ||
              !kiln__attrs_deserialize(&p->attrs, p->op, p->blob, (size_t)p->blob_size));
        if (ok) {
            kiln_attrs view = kiln__attrset_view(&p->attrs);
            rt->cu_act = kiln__cu_act_of(p->op->name, &view, &rt->cu_a, &rt->cu_b);
            ok = rt->cu_act > KILN_CU_ACT_NONE;
        }
        if (ok && i + 1 < el->nepi) ok = cuda_affine(e, el, i + 1, rt);
    }
    if (!ok) {
        const kiln__eepi *p = &el->epi[i < el->nepi ? i : 0];
        kiln__free(rt);
        return kiln__err(KILN_EFORMAT, "layer '%s' runs on the GPU with %d fused ops (first %s::%s v%d); the GPU "
                         "takes a residual Add (Conv) or a bias (MatMul + Add of a constant over the last dim), "
                         "then one ai.onnx activation without extra inputs (one without parameters may have scalar "
                         "Mul/Div/Add/Sub after it), on a built-in op", el->name,
                         (int)el->nepi, p->op_ns ? p->op_ns : "?", p->op_name ? p->op_name : "?",
                         (int)p->op_version);
    }
    el->epi_rt = rt;
    return 0;
}

/* x[0..n) += v by column: x is the run at offset off of a tensor whose
 * last dim is N, v a vector of N values. */
static void add_by_column(float *x, int64_t n, int64_t off, const float *v, int64_t N) {
    for (int64_t i = 0, j = off % N; i < n;) {
        int64_t len = N - j < n - i ? N - j : n - i;
        for (int64_t k = 0; k < len; k++) x[i + k] += v[j + k];
        i += len;
        j = 0;
    }
}

/* The last dim of output 0 (0 when it has none). */
static int64_t out_last_dim(const kiln_call *c) {
    return c->nout > 0 && c->out[0].ndim >= 1 ? c->out[0].dims[c->out[0].ndim - 1] : 0;
}

/* x[0..n) += the same elements of the call's input `k` (x is a run of
 * output 0, which has the residual's shape), or its elements by column when
 * it is a vector over output 0's last dim (its own last dim that long). */
static int residual_add(const kiln_call *c, int k, float *x, int64_t n) {
    const float *y0 = c->nout > 0 ? c->out[0].data : NULL, *r = c->nin > k ? c->in[k].data : NULL;
    int64_t off = y0 ? x - y0 : -1, total = c->nout > 0 ? kiln_tensor_numel(&c->out[0]) : 0;
    int64_t rn = r ? kiln_tensor_numel(&c->in[k]) : -1, N = out_last_dim(c);
    int by_column = r && rn != total && N > 0 && rn == N && c->in[k].ndim >= 1 && c->in[k].dims[c->in[k].ndim - 1] == N;
    if (!r || off < 0 || off + n > total || (rn != total && !by_column) || c->in[k].dtype != KILN_DTYPE_F32)
        return kiln_set_error(KILN_EINTERNAL, "residual epilogue: a run of %lld values at offset %lld of output 0 "
                              "(%lld values), residual input %d %s", (long long)n, (long long)off, (long long)total, k,
                              r ? "of another size or type" : "absent");
    if (by_column)
        add_by_column(x, n, off, r, N);
    else
        for (int64_t i = 0; i < n; i++) x[i] += r[off + i];
    return 0;
}

/* x[0..n) += the linear bias (epi_rt), by column: x is a run of output 0,
 * whose last dim is the bias's length. */
static int bias_add(const kiln_call *c, const epi_rt *r, float *x, int64_t n) {
    const float *y0 = c->nout > 0 ? c->out[0].data : NULL;
    const float *bias = (const float *)(r->cu_engine->weights + r->cu_bias_off);
    int64_t N = r->cu_bias_n, off = y0 ? x - y0 : -1, total = c->nout > 0 ? kiln_tensor_numel(&c->out[0]) : 0;
    if (off < 0 || off + n > total || N <= 0 || out_last_dim(c) != N)
        return kiln_set_error(KILN_EINTERNAL, "bias epilogue: a run of %lld values at offset %lld of output 0 "
                              "(%lld values), bias of %lld", (long long)n, (long long)off, (long long)total,
                              (long long)N);
    add_by_column(x, n, off, bias, N);
    return 0;
}

static int run_chain(const kiln_call *c, const epi_rt *r, float *x, int64_t n, int64_t channel, int64_t chan_len) {
    for (int i = 0; i < r->n; i++) {
        int rc = r->e[i].residual ? residual_add(c, r->e[i].residual, x, n)
                 : r->e[i].bias   ? bias_add(c, r, x, n)
                                  : r->e[i].fn(&r->e[i].args, x, n, channel, chan_len);
        if (rc) return rc;
    }
    return 0;
}

/* Values per chunk when a chain has several ops: each op's pass then reads
 * what the previous one wrote from L1. */
#define EPI_CHUNK 2048

static int apply(const kiln_call *c, float *x, int64_t n, int64_t channel, int64_t chan_len);

KILN_API int kiln_call_epilogue(const kiln_call *c, int out, float *x, int64_t n, int64_t channel,
                                int64_t chan_len) {
    if (!c || !c->epilogue || out != 0 || n <= 0) return 0;
    int rc = apply(c, x, n, channel, chan_len);
    int none = 0;
    /* kernels call this from their worker threads and may drop rc: the
     * first failure waits on the exec handle for the context (messages are
     * per thread, so it keeps this one's) */
    if (rc && c->exec &&
        __atomic_compare_exchange_n(&c->exec->epi_rc, &none, rc, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        snprintf(c->exec->epi_msg, sizeof c->exec->epi_msg, "%s", kiln_errmsg());
    return rc;
}

int kiln__epi_failure(kiln_exec *x, int rc) {
    int erc = __atomic_exchange_n(&x->epi_rc, 0, __ATOMIC_ACQ_REL);
    if (rc || !erc) return rc;
    return kiln__err(erc, "fused epilogue: %s", x->epi_msg);
}

static int apply(const kiln_call *c, float *x, int64_t n, int64_t channel, int64_t chan_len) {
    const epi_rt *r = c->epilogue;
    if (r->n == 1 || n <= EPI_CHUNK) return run_chain(c, r, x, n, channel, chan_len);
    int rc = 0;
    if (chan_len == 1 || chan_len == 0) { /* any split keeps the meaning */
        for (int64_t i = 0; i < n && !rc; i += EPI_CHUNK)
            rc = run_chain(c, r, x + i, n - i < EPI_CHUNK ? n - i : EPI_CHUNK,
                           chan_len ? channel + i : channel, chan_len);
        return rc;
    }
    if (chan_len <= EPI_CHUNK) { /* whole channels per chunk */
        int64_t step = EPI_CHUNK / chan_len * chan_len;
        for (int64_t i = 0; i < n && !rc; i += step)
            rc = run_chain(c, r, x + i, n - i < step ? n - i : step, channel + i / chan_len, chan_len);
        return rc;
    }
    /* long channels: chunks inside one channel */
    for (int64_t i = 0; i < n && !rc;) {
        int64_t in_ch = chan_len - i % chan_len, len = in_ch < EPI_CHUNK ? in_ch : EPI_CHUNK;
        if (len > n - i) len = n - i;
        rc = run_chain(c, r, x + i, len, channel + i / chan_len, 0);
        i += len;
    }
    return rc;
}

KILN_API int kiln_epilogue_param_kind(const kiln_epilogue_args *a, int i) {
    if (!a || i < 0 || i >= a->nin || i == a->x || !a->in[i].data) return 0;
    const kiln_tensor *t = &a->in[i];
    if (kiln_tensor_numel(t) == 1) return 1;
    int r = a->in[a->x].ndim;
    if (r < 2 || t->ndim > r || r - t->ndim > 1) return 0; /* must reach dim 1 */
    for (int j = 0; j < t->ndim; j++) {
        int d = r - t->ndim + j; /* activation dim this one broadcasts against */
        if (d == 1) {
            if (t->dims[j] != a->channels) return 0;
        } else if (t->dims[j] != 1) {
            return 0;
        }
    }
    return 2;
}

void kiln__epi_free(kiln__elayer *el) {
    for (int32_t i = 0; i < el->nepi && el->epi; i++) {
        kiln__eepi *p = &el->epi[i];
        kiln__free(p->op_ns);
        kiln__free(p->op_name);
        kiln__free(p->blob);
        if (p->attrs.v) kiln__attrset_free(&p->attrs);
    }
    kiln__free(el->epi);
    el->epi = NULL;
    el->nepi = 0;
    kiln__free(el->epi_rt);
    el->epi_rt = NULL;
}

void kiln__epi_describe(const kiln__elayer *el, char *buf, size_t size) {
    size_t len = 0;
    if (size) buf[0] = 0;
    for (int32_t i = 0; i < el->nepi && el->epi; i++) {
        int n = snprintf(buf + len, size - len, " + %s", el->epi[i].op_name);
        if (n < 0 || (size_t)n >= size - len) break;
        len += (size_t)n;
    }
}

int kiln__epi_prepare(kiln_engine *e, kiln__elayer *el) {
    if (el->nepi <= 0) return 0;
    if (el->nepi > KILN__MAX_EPI || el->nout < 1 || el->aot_kernel >= 0 || !el->op ||
        !el->op->quick || !el->op->quick->accepts_epilogue)
        return kiln__err(KILN_EFORMAT,
                         "layer '%s': %d fused epilogue ops, but the layer %s (at most %d ops on a "
                         "JIT layer whose op accepts epilogues)",
                         el->name, (int)el->nepi,
                         el->aot_kernel >= 0 ? "runs an AOT kernel"
                         : !el->op || !el->op->quick || !el->op->quick->accepts_epilogue
                             ? "does not accept epilogues"
                             : "has no output",
                         KILN__MAX_EPI);
    if (el->nin > el->op->max_inputs && !residual_of(el, 0))
        return kiln__err(KILN_EFORMAT, "layer '%s': %d inputs, its op takes at most %d (one more only for a residual "
                         "Add first in its fused chain, reading that input)", el->name, (int)el->nin,
                         el->op->max_inputs);
    if (el->device == KILN_DEVICE_CUDA) return prepare_cuda(e, el);
    /* The activation: the layer's output 0 (same dims as the fused input). */
    const kiln__etensor *act = &e->tensors[el->out[0]];
    /* (an op that takes chains in NCHW16C, accepts_epilogue 2 (Conv's 16c
     * tactics, kiln::mbconv's tactic 5), runs its chain on each pixel's 16
     * channels: chan_len 1, and a residual of the same layout) */
    const int chain16c = act->format == KILN_FORMAT_NCHW16C && el->op->quick->accepts_epilogue == 2;
    if (act->dtype != KILN_DTYPE_F32 || (act->format != KILN_FORMAT_LINEAR && !chain16c))
        return kiln__err(KILN_EFORMAT, "layer '%s': fused epilogues need an F32 LINEAR output (NCHW16C where "
                         "its op takes chains there), found %s %s", el->name, kiln_dtype_name((kiln_dtype)act->dtype),
                         kiln_format_name((kiln_format)act->format));
    int64_t channels = 1;
    if (act->ndim >= 2 && !kiln__enode_const(e, act->dims[1], &channels))
        return kiln__err(KILN_EFORMAT, "layer '%s': fused epilogues need a static dim 1 of "
                         "output '%s'", el->name, act->name);
    epi_rt *rt = kiln__calloc(1, sizeof *rt);
    if (!rt) return kiln__err(KILN_ENOMEM, "out of memory");
    int rc = 0;
    for (int32_t i = 0; i < el->nepi && !rc; i++) {
        kiln__eepi *p = &el->epi[i];
        epi_entry *en = &rt->e[i];
        const char *what = p->op_name ? p->op_name : "?";
        if (!p->op) p->op = kiln__registry_find(p->op_ns, p->op_name, p->op_version);
        if (!p->op) {
            rc = kiln__err(KILN_EPLUGIN, "layer '%s': fused epilogue op %s::%s version %d is not "
                           "registered; load it first with kiln_registry_load_library", el->name, p->op_ns, p->op_name,
                           (int)p->op_version);
            break;
        }
        const kiln__op *op = p->op;
        if (i == 0 && (en->residual = residual_of(el, 0))) {
            rt->n = 1;
            continue;
        }
        if (i == 0 && act->dtype == KILN_DTYPE_F32 && !cuda_bias(e, el, p, rt)) {
            en->bias = 1;
            rt->n = 1;
            continue;
        }
        if (!op->quick || !op->quick->epilogue) {
            rc = kiln__err(KILN_EFORMAT, "layer '%s': fused op %s::%s v%d has no epilogue function",
                           el->name, op->ns, op->name, op->version);
            break;
        }
        if (p->nin < op->min_inputs || p->nin > op->max_inputs || p->nin > KILN__EPI_MAX_IN ||
            p->x < 0 || p->x >= p->nin || p->in[p->x] != -1) {
            rc = kiln__err(KILN_EFORMAT, "layer '%s': fused op %s::%s v%d has %d inputs "
                           "(activation at %d); the op takes %d..%d", el->name, op->ns, op->name,
                           op->version, (int)p->nin, (int)p->x, op->min_inputs, op->max_inputs);
            break;
        }
        if (!p->attrs.v && op->nattrs > 0) {
            rc = kiln__attrs_deserialize(&p->attrs, op, p->blob, (size_t)p->blob_size);
            if (rc) {
                kiln__err_prefix(rc, "layer '%s': fused op %s attributes", el->name, what);
                break;
            }
        }
        en->attrs = kiln__attrset_view(&p->attrs);
        en->relu = op->builtin && !strcmp(op->ns, "ai.onnx") && !strcmp(op->name, "Relu");
        for (int32_t k = 0; k < p->nin && !rc; k++) {
            kiln_tensor *t = &en->in[k];
            int64_t dims[KILN_MAX_DIMS];
            if (k == p->x) {
                /* the activation: its data is the callback's float pointer */
                kiln__etensor_static_dims(e, act, dims);
                kiln__tensor_view(t, NULL, KILN_DTYPE_F32, KILN_FORMAT_LINEAR,
                                  kiln__etensor_device(e, el->out[0]), act->ndim, dims);
                continue;
            }
            if (p->in[k] < 0) continue; /* absent optional input: the zeroed view */
            if (p->in[k] >= e->ntensors || e->tensors[p->in[k]].kind != KILN__ET_CONST) {
                rc = kiln__err(KILN_EFORMAT, "layer '%s': fused op %s input %d is tensor %d, "
                               "expected a constant", el->name, what, (int)k, (int)p->in[k]);
                break;
            }
            const kiln__etensor *ct = &e->tensors[p->in[k]];
            int d = kiln__etensor_static_dims(e, ct, dims);
            if (d >= 0) {
                rc = kiln__err(KILN_EFORMAT, "layer '%s': fused op %s: constant '%s' has a "
                               "non-static dim %d", el->name, what, ct->name, d);
                break;
            }
            kiln__tensor_view(t, (void *)kiln__etensor_const(e, ct), (kiln_dtype)ct->dtype,
                              KILN_FORMAT_LINEAR, kiln__etensor_device(e, p->in[k]), ct->ndim,
                              dims);
            uint64_t bytes = 0;
            rc = kiln__tensor_bytes(t->dtype, t->format, t->ndim, t->dims, &bytes);
            if (rc || bytes != ct->const_bytes) {
                rc = kiln__err(KILN_EFORMAT, "layer '%s': fused op %s: constant '%s' holds %llu "
                               "bytes, its dims need %llu", el->name, what, ct->name,
                               (unsigned long long)ct->const_bytes, (unsigned long long)bytes);
                break;
            }
        }
        if (rc) break;
        en->fn = op->quick->epilogue;
        en->args.attrs = &en->attrs;
        en->args.in = en->in;
        en->args.nin = p->nin;
        en->args.x = p->x;
        en->args.channels = channels;
        if (op->quick->epilogue_check && op->quick->epilogue_check(&en->args) != 0) {
            rc = kiln__err(KILN_EFORMAT, "layer '%s': fused op %s::%s v%d refuses its inputs "
                           "(epilogue_check)", el->name, op->ns, op->name, op->version);
            break;
        }
        rt->n = i + 1;
    }
    if (rc) {
        kiln__free(rt);
        return rc;
    }
    el->epi_rt = rt;
    return 0;
}
