/*
 * ops_cuda.c — helpers of the built-in ops' CUDA launchers (see
 * ops_cuda.h): kernel names by dtype, grid sizes, broadcast iterators,
 * the strided copy and the activation table shared by the unary ops and
 * the fused epilogues.
 */
#include "ops/common/ops_cuda.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Thin names over the CPU ops' helpers, so the launchers depend on this
 * header alone. */
/* An empty tensor counts as contiguous: no element is addressed. */
int kiln__cu_contig(const kiln_tensor *t) { return kiln_tensor_numel(t) == 0 || kiln__ops_contig(t); }

int kiln__cu_has_in(const kiln_call *c, int i) {
    return i < c->nin && c->in[i].dtype != KILN_DTYPE_UNDEFINED && c->in[i].data;
}

double kiln__cu_host_f64(const kiln_tensor *t, int64_t i) { return kiln__ops_get_f64(t->data, t->dtype, i); }

int64_t kiln__cu_host_i64(const kiln_tensor *t, int64_t i) { return kiln__ops_get_i64(t->data, t->dtype, i); }

static const kiln_attr_value *attr(const kiln_call *c, const char *name) {
    const kiln_attr_value *v = c->attrs ? kiln_attrs_get(c->attrs, name) : NULL;
    return v && v->present ? v : NULL;
}

int64_t kiln__cu_attr_int(const kiln_call *c, const char *name, int64_t def) {
    const kiln_attr_value *v = attr(c, name);
    return v ? v->i : def;
}

double kiln__cu_attr_float(const kiln_call *c, const char *name, double def) {
    const kiln_attr_value *v = attr(c, name);
    return v ? v->f : def;
}

const char *kiln__cu_attr_str(const kiln_call *c, const char *name, const char *def) {
    const kiln_attr_value *v = attr(c, name);
    return v && v->s ? v->s : def;
}

int64_t kiln__cu_attr_ints(const kiln_call *c, const char *name, const int64_t **v) {
    *v = NULL;
    return attr(c, name) ? kiln_attrs_ints(c->attrs, name, v) : -1;
}

const char *kiln__cu_suffix(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_F32: return "f32";
    case KILN_DTYPE_F64: return "f64";
    case KILN_DTYPE_I16: return "i16";
    case KILN_DTYPE_U16: return "u16";
    case KILN_DTYPE_U32: return "u32";
    case KILN_DTYPE_U64: return "u64";
    case KILN_DTYPE_F16: return "f16";
    case KILN_DTYPE_BF16: return "bf16";
    case KILN_DTYPE_I32: return "i32";
    case KILN_DTYPE_I64: return "i64";
    case KILN_DTYPE_I8: return "i8";
    case KILN_DTYPE_U8: return "u8";
    case KILN_DTYPE_BOOL: return "bool";
    default: return NULL;
    }
}

const char *kiln__cu_size_suffix(kiln_dtype t) {
    switch (kiln_dtype_size(t)) {
    case 1: return "1";
    case 2: return "2";
    case 4: return "4";
    case 8: return "8";
    default: return NULL;
    }
}

kiln_cu_check kiln__cu_check(const kiln_call *c) {
    kiln_cu_check k = {NULL, (uint64_t)(uintptr_t)(c ? c->layer : NULL)};
    if (c && c->exec && c->exec->device == KILN_DEVICE_CUDA) k.fault = ((const kiln__cuda_exec *)c->exec)->fault;
    return k;
}

int kiln__cu_type_err(const char *op, kiln_dtype t) {
    return kiln_set_error(KILN_EUNSUPPORTED, "%s: no CUDA kernel for type %s", op, kiln_dtype_name(t));
}

/* Kernel names live for the process: kiln__cuda_launch caches functions
 * by name pointer, so a composed name must not sit in a stack buffer. */
#define NAME_CAP 1024
static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;
static char *g_names[NAME_CAP];

static const char *intern(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    const char *r = NULL;
    pthread_mutex_lock(&g_names_lock);
    for (size_t i = h & (NAME_CAP - 1), k = 0; k < NAME_CAP; k++, i = (i + 1) & (NAME_CAP - 1)) {
        if (!g_names[i]) {
            size_t n = strlen(s) + 1;
            g_names[i] = malloc(n);
            if (g_names[i]) memcpy(g_names[i], s, n);
            r = g_names[i];
            break;
        }
        if (!strcmp(g_names[i], s)) {
            r = g_names[i];
            break;
        }
    }
    pthread_mutex_unlock(&g_names_lock);
    return r;
}

static int launch(const kiln_call *c, const char *base, const char *suffix, unsigned grid, unsigned threads,
                  void **args) {
    /* A GPU layer's epilogue is data: one activation (builder/fuse.c) that
     * its launcher (Conv, ConvTranspose, Gemm, MatMul) passed to its
     * kernels.  A host callback chain must never get here (fail loudly
     * rather than skip it). */
    if (c->epilogue && !kiln__epi_is_cuda(c->epilogue))
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: a host epilogue chain reached a CUDA kernel", base);
    char name[96];
    if (suffix)
        snprintf(name, sizeof name, "%s_%s", base, suffix);
    else
        snprintf(name, sizeof name, "%s", base);
    const char *stable = intern(name);
    if (!stable) return kiln_set_error(KILN_ENOMEM, "%s: out of memory naming the kernel", name);
    const unsigned g[3] = {grid, 1, 1}, b[3] = {threads, 1, 1};
    return kiln__cuda_launch(c, stable, g, b, 0, args);
}

/* Grid-stride kernels: enough blocks to fill any current GPU several times
 * over; more only adds scheduling. */
#define MAX_GRID (1u << 16)

int kiln__cu_launch_n(const kiln_call *c, const char *base, const char *suffix, int64_t n, void **args) {
    if (n <= 0) return 0;
    int64_t blocks = (n + 255) / 256;
    return launch(c, base, suffix, blocks > MAX_GRID ? MAX_GRID : (unsigned)blocks, 256, args);
}

int kiln__cu_launch_blocks(const kiln_call *c, const char *base, const char *suffix, int64_t blocks,
                           unsigned threads, void **args) {
    if (blocks <= 0) return 0;
    if (blocks > INT32_MAX)
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: %lld blocks exceed the CUDA grid", base, (long long)blocks);
    return launch(c, base, suffix, (unsigned)blocks, threads, args);
}

unsigned kiln__cu_block_for(int64_t n) {
    unsigned t = 32;
    while (t < 256 && (int64_t)t < n) t *= 2;
    return t;
}

void kiln__cu_contig_strides(int nd, const int64_t *dims, int64_t *st) {
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
}

int kiln__cu_bcast_strides(const char *op, int ndo, const int64_t *dout, int nd, const int64_t *d, const int64_t *s,
                           int64_t *out) {
    int off = ndo - nd;
    if (off < 0) return kiln_set_error(KILN_ESHAPE, "%s: an input of rank %d does not broadcast to rank %d", op, nd, ndo);
    for (int i = 0; i < ndo; i++) {
        int j = i - off;
        if (j >= 0 && d[j] != dout[i] && d[j] != 1)
            return kiln_set_error(KILN_ESHAPE, "%s: input dim %d is %lld at run time, which does not broadcast to %lld",
                                  op, j, (long long)d[j], (long long)dout[i]);
        out[i] = j < 0 || (d[j] == 1 && dout[i] != 1) ? 0 : s[j];
    }
    return 0;
}

void kiln__cu_iter_init(kiln_cu_iter *it, int ndo, const int64_t *dout, int nop, const int64_t *const *st) {
    memset(it, 0, sizeof *it);
    int64_t numel = 1;
    int nd = 0;
    for (int i = 0; i < ndo; i++) {
        numel *= dout[i];
        if (dout[i] == 1) continue; /* a dim of 1 moves no operand */
        /* merge into the previous kept dim when every operand continues it */
        int merge = nd > 0;
        for (int k = 0; k < nop && merge; k++)
            merge = it->st[k][nd - 1] == st[k][i] * dout[i];
        if (merge) {
            it->dims[nd - 1] *= dout[i];
            for (int k = 0; k < nop; k++) it->st[k][nd - 1] = st[k][i];
        } else {
            it->dims[nd] = dout[i];
            for (int k = 0; k < nop; k++) it->st[k][nd] = st[k][i];
            nd++;
        }
    }
    if (nd == 0) { /* scalar or all ones */
        it->dims[0] = 1;
        nd = 1;
    }
    it->ndim = nd;
    it->numel = numel;
    int small = numel < INT32_MAX;
    for (int k = 0; k < nop && small; k++) {
        int64_t span = 0;
        for (int d = 0; d < nd; d++) span += (it->dims[d] - 1) * (it->st[k][d] < 0 ? -it->st[k][d] : it->st[k][d]);
        small = span < INT32_MAX;
    }
    it->small = small;
}

/* ---- activations ------------------------------------------------------------ */

static float attr_f(const kiln_attrs *a, const char *name, float def) {
    const kiln_attr_value *v = a ? kiln_attrs_get(a, name) : NULL;
    return v && v->present ? (float)v->f : def;
}

typedef struct act_entry {
    const char *op;
    int act;
    const char *pa, *pb; /* attribute names of the parameters */
    float da, db;        /* their ONNX defaults */
} act_entry;

static const act_entry acts[] = {
    {"Relu", KILN_CU_ACT_RELU, NULL, NULL, 0, 0},
    {"Sigmoid", KILN_CU_ACT_SIGMOID, NULL, NULL, 0, 0},
    {"HardSigmoid", KILN_CU_ACT_HARDSIGMOID, "alpha", "beta", 0.2f, 0.5f},
    {"HardSwish", KILN_CU_ACT_HARDSWISH, NULL, NULL, 0, 0},
    {"Tanh", KILN_CU_ACT_TANH, NULL, NULL, 0, 0},
    {"LeakyRelu", KILN_CU_ACT_LEAKYRELU, "alpha", NULL, 0.01f, 0},
    {"Elu", KILN_CU_ACT_ELU, "alpha", NULL, 1.0f, 0},
    {"Selu", KILN_CU_ACT_SELU, "alpha", "gamma", 1.67326319217681884765625f, 1.05070102214813232421875f},
    {"Softplus", KILN_CU_ACT_SOFTPLUS, NULL, NULL, 0, 0},
    {"Softsign", KILN_CU_ACT_SOFTSIGN, NULL, NULL, 0, 0},
    {"Mish", KILN_CU_ACT_MISH, NULL, NULL, 0, 0},
    {"ThresholdedRelu", KILN_CU_ACT_THRESHOLDEDRELU, "alpha", NULL, 1.0f, 0},
    {"Celu", KILN_CU_ACT_CELU, "alpha", NULL, 1.0f, 0},
    {"Clip", KILN_CU_ACT_CLIP, "min", "max", -INFINITY, INFINITY},
    {"Exp", KILN_CU_ACT_EXP, NULL, NULL, 0, 0},
    {"Log", KILN_CU_ACT_LOG, NULL, NULL, 0, 0},
    {"Sqrt", KILN_CU_ACT_SQRT, NULL, NULL, 0, 0},
    {"Reciprocal", KILN_CU_ACT_RECIPROCAL, NULL, NULL, 0, 0},
    {"Abs", KILN_CU_ACT_ABS, NULL, NULL, 0, 0},
    {"Neg", KILN_CU_ACT_NEG, NULL, NULL, 0, 0},
    {"Floor", KILN_CU_ACT_FLOOR, NULL, NULL, 0, 0},
    {"Ceil", KILN_CU_ACT_CEIL, NULL, NULL, 0, 0},
    {"Round", KILN_CU_ACT_ROUND, NULL, NULL, 0, 0},
    {"Sign", KILN_CU_ACT_SIGN, NULL, NULL, 0, 0},
    {"Erf", KILN_CU_ACT_ERF, NULL, NULL, 0, 0},
    {"Sin", KILN_CU_ACT_SIN, NULL, NULL, 0, 0},
    {"Cos", KILN_CU_ACT_COS, NULL, NULL, 0, 0},
    {"Tan", KILN_CU_ACT_TAN, NULL, NULL, 0, 0},
    {"Asin", KILN_CU_ACT_ASIN, NULL, NULL, 0, 0},
    {"Acos", KILN_CU_ACT_ACOS, NULL, NULL, 0, 0},
    {"Atan", KILN_CU_ACT_ATAN, NULL, NULL, 0, 0},
    {"Sinh", KILN_CU_ACT_SINH, NULL, NULL, 0, 0},
    {"Cosh", KILN_CU_ACT_COSH, NULL, NULL, 0, 0},
    {"Asinh", KILN_CU_ACT_ASINH, NULL, NULL, 0, 0},
    {"Acosh", KILN_CU_ACT_ACOSH, NULL, NULL, 0, 0},
    {"Atanh", KILN_CU_ACT_ATANH, NULL, NULL, 0, 0},
    {"Gelu", KILN_CU_ACT_GELU, NULL, NULL, 0, 0},
    {"Shrink", KILN_CU_ACT_SHRINK, "lambd", "bias", 0.5f, 0.0f},
};

int kiln__cu_act_plain(int act) {
    if (act == KILN_CU_ACT_GELU_TANH) return 1;
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (acts[i].act == act) return !acts[i].pa && !acts[i].pb && act != KILN_CU_ACT_NONE;
    return 0;
}

int kiln__cu_act_of(const char *op, const kiln_attrs *a, float *pa, float *pb) {
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        const act_entry *e = &acts[i];
        if (strcmp(e->op, op) != 0) continue;
        *pa = e->pa ? attr_f(a, e->pa, e->da) : e->da;
        *pb = e->pb ? attr_f(a, e->pb, e->db) : e->db;
        if (e->act == KILN_CU_ACT_GELU && a) {
            const kiln_attr_value *v = kiln_attrs_get(a, "approximate");
            if (v && v->present && v->s && strcmp(v->s, "tanh") == 0) return KILN_CU_ACT_GELU_TANH;
        }
        return e->act;
    }
    return -1;
}
