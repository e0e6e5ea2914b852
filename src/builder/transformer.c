/*
 * transformer.c — the builder's transformer rewrites (CPU and CUDA builds,
 * before selection, so each new layer is placed, typed and timed like any
 * other; the dead chains are removed by the dead-code pass after them).
 * CPU builds fuse F32 only (the CPU kernels' type) and take any head dim.
 *
 * Attention: the ONNX chain exporters write for scaled dot-product
 * attention
 *
 *   S = MatMul(Q', Kt')   Q' = Q or Mul(Q, c), Kt' = K^T or Mul(K^T, c),
 *                         K^T = Transpose(K) of the last two dims or any tensor
 *   S' = S or Mul/Div(S, c)                       (c: scalar constants)
 *   S'' = S' or Add(S', mask)                     (mask broadcast to S, rank <= 4)
 *   P = Softmax(S'') over the last axis
 *   Y = MatMul(P, V)
 *
 * becomes one kiln::attention layer (ops/nn/attention.c) reading Q, K (or
 * K^T) and V, with the scalars folded into its `scale`.  Where Q, K, V come
 * out of layout-only chains (a packed QKV projection split into heads),
 * the layer reads them as strided views of the chains' first tensors
 * (attn_views.c) and, when a Transpose alone reads Y, writes that
 * Transpose's output itself: the copies go; when the out-projection's
 * Transpose back to batch-first follows, in the layout that makes it a
 * Reshape (out_projection_transpose).  The leading
 * (batch, head) dims of Q, K, V must be the same expressions and the head
 * dims static (on CUDA builds <= KILN_CU_ATTN_DMAX, the GPU kernel's bound).
 *
 * Residual + norm: LayerNormalization(Add(a, b), scale, bias) with a and b
 * of the same dims (post-norm transformers' "x + sublayer(x)") becomes one
 * kiln::add_layernorm layer (ops/nn/add_norm.c): the sum never goes
 * through memory.  The normalized size must be static and <= 8192.
 *
 * Each intermediate must have no other reader and not be a network output.
 */
#include "builder.h"
#include "device/cuda/cuda_kernel_args.h"
#include "ops/common/ops_util.h"
#include "ops/nn/attention.h"

#include <math.h>
#include <string.h>

/* Tensor t is read by exactly one live layer and is no output. */
static int private_tensor(const builder *b, const int *uses, int t) {
    return t >= 0 && uses[t] == 1 && !b->t[t].is_output && !b->t[t].is_size && b->t[t].kind == BT_ACT;
}

/* Scalar float constant t: its value in *v. */
static int scalar_const(const builder *b, int t, double *v) {
    const bt *c = &b->t[t];
    if (t < 0 || c->kind != BT_CONST || !c->data || !kiln__ops_is_float(c->dtype)) return 0;
    for (int d = 0; d < c->ndim; d++) {
        int64_t n;
        if (!kiln_expr_is_const(c->dims[d], &n) || n != 1) return 0;
    }
    *v = kiln__ops_get_f64(c->data, c->dtype, 0);
    return isfinite(*v);
}

/* If tensor *t is made by Mul(x, c) (or Div(x, c) when div) of a private
 * tensor, step back to x and fold c into *scale. */
static void strip_scale(const builder *b, const int *uses, int *t, double *scale, int div) {
    int li = b->t[*t].producer;
    if (!private_tensor(b, uses, *t) || !(kiln__b_live_onnx(b, li, "Mul") || (div && kiln__b_live_onnx(b, li, "Div"))) ||
        b->l[li].nin != 2)
        return;
    const bl *L = &b->l[li];
    double c;
    int dv = !strcmp(L->op->name, "Div");
    for (int s = 0; s < (dv ? 1 : 2); s++)
        if (scalar_const(b, L->in[1 - s], &c) && c != 0) {
            *scale *= dv ? 1.0 / c : c;
            *t = L->in[s];
            return;
        }
}

/* The types the kernels take: the GPU's F32/F16/BF16, the CPU's F32 (F64
 * stays off on both). */
static int kernel_float(const builder *b, kiln_dtype t) {
    return t == KILN_DTYPE_F32 || (b->cuda && (t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16));
}

static int static_dim(const bt *t, int d, int64_t *v) {
    return kiln_expr_is_const(t->dims[d < 0 ? t->ndim + d : d], v);
}

/* The Softmax layer li over the last axis of a rank-r input. */
static int last_axis_softmax(const builder *b, int li) {
    if (!kiln__b_live_onnx(b, li, "Softmax")) return 0;
    const bl *L = &b->l[li];
    int r = b->t[L->in[0]].ndim;
    kiln_attrs a = kiln__attrset_view(L->attrs);
    int64_t axis = kiln_attrs_int(&a, "axis");
    return r >= 2 && (axis == -1 || axis == r - 1);
}

int kiln__b_set_op(builder *b, int li, const kiln__op *op, kiln__attrset *own) {
    bl *L = &b->l[li];
    kiln_attrs view = kiln__attrset_view(own);
    void *state = NULL;
    int rc = kiln__op_create(op, &view, &state);
    if (rc) {
        kiln__attrset_free(own);
        return kiln__err_prefix(rc, "layer '%s': as %s::%s", L->name, op->ns, op->name);
    }
    if (L->state && L->op->vt->destroy) L->op->vt->destroy(L->state);
    if (L->has_own) kiln__attrset_free(&L->own);
    L->state = state;
    L->own = *own;
    L->has_own = 1;
    L->attrs = &L->own;
    L->op = op;
    return 0;
}

/* Layer li becomes op with attributes names[i] = vals[i] and inputs in. */
static int rewrite(builder *b, int li, const kiln__op *op, const char *const *names, const kiln_attr_value *vals,
                   int nv, const int *in, int nin) {
    kiln__attrset own;
    if (kiln__attrset_init(&own, op)) return kiln__err(KILN_ENOMEM, "build: out of memory");
    int *ins = kiln__malloc((size_t)nin * sizeof *ins), rc = 0;
    for (int i = 0; i < nv && !rc; i++) rc = kiln__attrset_set(&own, names[i], &vals[i]);
    if (!ins || rc) {
        kiln__free(ins);
        kiln__attrset_free(&own);
        return rc ? rc : kiln__err(KILN_ENOMEM, "build: out of memory");
    }
    rc = kiln__b_set_op(b, li, op, &own);
    if (rc) {
        kiln__free(ins);
        return rc;
    }
    bl *L = &b->l[li];
    memcpy(ins, in, (size_t)nin * sizeof *ins);
    kiln__free(L->in);
    L->in = ins;
    L->nin = nin;
    return 0;
}

int kiln__b_rewrite(builder *b, int li, const kiln__op *op, const char *const *names, const kiln_attr_value *vals,
                    int nv, const int *in, int nin) {
    return rewrite(b, li, op, names, vals, nv, in, nin);
}

/* If the softmax input *t is Add(scores, mask) of a private tensor, where
 * scores come from a MatMul (possibly scaled) and the mask is a float
 * tensor of the scores' type broadcast to them (rank <= 4): step *t back
 * to the scores and return the mask, else -1. */
static int strip_mask(const builder *b, const int *uses, int *t) {
    int li = b->t[*t].producer;
    if (!private_tensor(b, uses, *t) || !kiln__b_live_onnx(b, li, "Add") || b->l[li].nin != 2) return -1;
    const bt *st = &b->t[*t];
    for (int s = 0; s < 2; s++) {
        int x = b->l[li].in[s], m = b->l[li].in[1 - s], y = x;
        double unused = 1;
        strip_scale(b, uses, &y, &unused, 1);
        if (x < 0 || m < 0 || !kiln__b_live_onnx(b, b->t[y].producer, "MatMul")) continue;
        const bt *mt = &b->t[m];
        if (mt->dtype != st->dtype || mt->ndim > 4 || mt->ndim > st->ndim || b->t[x].ndim != st->ndim) return -1;
        for (int d = 0; d < st->ndim; d++)
            if (b->t[x].dims[d] != st->dims[d]) return -1; /* the mask does not broadcast the scores */
        for (int d = 0; d < mt->ndim; d++) {
            int64_t one;
            if (mt->dims[d] != st->dims[st->ndim - mt->ndim + d] && !(kiln_expr_is_const(mt->dims[d], &one) && one == 1))
                return -1;
        }
        *t = x;
        return m;
    }
    return -1;
}

/* The layer reading activation t as its data: a live ai.onnx `op` reading
 * it as input 0, every other reader a Shape (only the dims, which the
 * rewrite below keeps, unless shape_too: then none); else -1. */
static int data_reader(const builder *b, int t, const char *op, int shape_too) {
    if (t < 0 || b->t[t].is_output || b->t[t].is_size || b->t[t].kind != BT_ACT) return -1;
    int found = -1;
    for (int li = 0; li < b->nl; li++) {
        const bl *L = &b->l[li];
        int reads = 0;
        for (int p = 0; p < L->nin && !L->dead; p++) reads += L->in[p] == t;
        if (!reads) continue;
        if (kiln__b_live_onnx(b, li, op) && reads == 1 && L->in[0] == t && found < 0) found = li;
        else if (shape_too || !kiln__b_live_onnx(b, li, "Shape")) return -1;
    }
    return found;
}

/* torch's MultiheadAttention (batch_first) after the attention output Y
 * [S, B, H, D] (y_perm {2, 0, 1, 3}):
 *   Reshape [S*B, E] -> Gemm (the out-projection, row by row) -> Reshape
 *   [S, B, E'] -> Transpose {1, 0, 2} [B, S, E']
 * The Transpose is a copy.  Written [B, S, H, D] instead (y_perm {0, 2, 1,
 * 3}), Y's rows come in (b, s) order, the Gemm keeps them, and the
 * Transpose's output is the Gemm's output as it lies: the Transpose becomes
 * a Reshape to [-1, S, E'] (or [B, -1, E']) aliasing its input.  The
 * Reshapes in between only regroup rows; their shape inputs still hold S*B
 * and [S, B, E'], the same element counts, and Shape layers reading them
 * or the Gemm's output see the dims they saw before.  Needs S or B static
 * (the new shape is a constant) and E' static; returns the Transpose layer
 * to turn into that Reshape (its shape values in *shape), else -1. */
static int out_projection_transpose(const builder *b, int Y, const int64_t *perm, int64_t shape[3]) {
    static const int64_t torch_perm[4] = {2, 0, 1, 3};
    if (memcmp(perm, torch_perm, sizeof torch_perm) || !kiln__registry_resolve("ai.onnx", "Reshape", 21)) return -1;
    const bt *y = &b->t[Y];
    int r9 = data_reader(b, Y, "Reshape", 1); /* Y's dims change */
    if (r9 < 0 || b->t[b->l[r9].out[0]].ndim != 2) return -1;
    int g = data_reader(b, b->l[r9].out[0], "Gemm", 0);
    if (g < 0) return -1;
    kiln_attrs ga = kiln__attrset_view(b->l[g].attrs);
    if (kiln_attrs_int(&ga, "transA") != 0) return -1; /* rows of A in, rows of the product out */
    if (b->l[g].nin > 2 && b->l[g].in[2] >= 0) { /* C broadcast over the rows only */
        const bt *c = &b->t[b->l[g].in[2]];
        int64_t one;
        if (c->ndim > 2 || (c->ndim == 2 && !(kiln_expr_is_const(c->dims[0], &one) && one == 1))) return -1;
    }
    int r10 = data_reader(b, b->l[g].out[0], "Reshape", 0);
    if (r10 < 0) return -1;
    const bt *r = &b->t[b->l[r10].out[0]];
    if (r->ndim != 3 || r->dims[0] != y->dims[0] || r->dims[1] != y->dims[1]) return -1;
    int tr = data_reader(b, b->l[r10].out[0], "Transpose", 0);
    if (tr < 0 || b->l[tr].nin != 1) return -1;
    kiln_attrs ta = kiln__attrset_view(b->l[tr].attrs);
    const int64_t *tp = NULL;
    if (kiln_attrs_ints(&ta, "perm", &tp) != 3 || !tp || tp[0] != 1 || tp[1] != 0 || tp[2] != 2) return -1;
    int64_t s, bb, e;
    if (!kiln_expr_is_const(r->dims[2], &e)) return -1;
    shape[2] = e;
    if (kiln_expr_is_const(r->dims[0], &s)) {
        shape[0] = -1;
        shape[1] = s;
    } else if (kiln_expr_is_const(r->dims[1], &bb)) {
        shape[0] = bb;
        shape[1] = -1;
    } else {
        return -1;
    }
    return tr;
}

/* A new INT64 constant of n values (n == 0: the scalar v[0]); its index. */
static int i64_const(builder *b, const char *name, const int64_t *v, int n) {
    int64_t *data = kiln__aligned_alloc((n ? (size_t)n : 1) * sizeof *data);
    int t = data ? kiln__b_new_tensor(b, name, BT_CONST) : kiln__err(KILN_ENOMEM, "build: out of memory");
    if (t < 0) {
        kiln__aligned_free(data);
        return t;
    }
    bt *c = &b->t[t];
    memcpy(data, v, (n ? (size_t)n : 1) * sizeof *data);
    c->dtype = KILN_DTYPE_I64;
    c->ndim = n ? 1 : 0;
    if (n) c->dims[0] = kiln_expr_const(b->x, n);
    c->data = data;
    c->bytes = (n ? (size_t)n : 1) * sizeof *data;
    c->data_owned = 1;
    c->nvalues = n ? n : 1;
    for (int i = 0; i < c->nvalues; i++) c->values[i] = kiln_expr_const(b->x, v[i]);
    return t;
}

/* Transpose layer tr becomes Reshape(its input, shape) with its output an
 * alias of the input (see out_projection_transpose). */
static int transpose_to_reshape(builder *b, int tr, const int64_t shape[3]) {
    const kiln__op *op = kiln__registry_resolve("ai.onnx", "Reshape", 21); /* found: out_projection_transpose */
    char *nm = kiln__strfmt("%s:shape", b->l[tr].name);
    int t = nm ? i64_const(b, nm, shape, 3) : kiln__err(KILN_ENOMEM, "build: out of memory");
    kiln__free(nm);
    if (t < 0) return t;
    const int in[2] = {b->l[tr].in[0], t};
    int rc = rewrite(b, tr, op, NULL, NULL, 0, in, 2);
    if (rc) return rc;
    b->t[b->l[tr].out[0]].alias_in = in[0];
    return 0;
}

/* Q, K, V (in) as views of the tensors their layout chains start from
 * (builder/attn_views.c): replaces in with those, fills vw.  When the
 * output Y [B, H, S, Dv] is read only by a Transpose, that layer (*at) is
 * to become the attention layer writing its output (perm).  0 when no
 * operand has a chain to skip or the op's shape function would not give
 * the dims the output tensor has. */
static int attention_views(builder *b, const int *uses, int *in, int64_t *vw, int Y, int *at, int64_t *perm,
                           int *out_tr, int64_t *out_shape) {
    int base[3];
    if (!kiln__b_attn_views(b, in, base, vw) || (base[0] == in[0] && base[1] == in[1] && base[2] == in[2])) return 0;
    int T = -1;
    for (int li = 0; li < b->nl && private_tensor(b, uses, Y) && T < 0; li++)
        if (kiln__b_live_onnx(b, li, "Transpose") && b->l[li].nin == 1 && b->l[li].in[0] == Y) T = li;
    const int64_t *p = NULL;
    if (T >= 0) {
        kiln_attrs a = kiln__attrset_view(b->l[T].attrs);
        if (kiln_attrs_ints(&a, "perm", &p) != 4 || !p) T = -1;
    }
    /* the output dims the shape function will give: [B, H, Sq] of Q's view, Dv of V's */
    const kiln_expr *yd[4];
    for (int a = 0; a < 4; a++) {
        int o = a == 3 ? 2 : 0;
        int64_t e = vw[o * KILN_ATTN_VIEW_INTS + 2 + 3 * a];
        yd[a] = e < 0 ? kiln_expr_const(b->x, -1 - e) : b->t[base[o]].dims[e];
    }
    const bt *out = &b->t[T >= 0 ? b->l[T].out[0] : Y];
    for (int j = 0; j < 4; j++) {
        perm[j] = T >= 0 ? p[j] : j;
        if (perm[j] < 0 || perm[j] > 3 || out->dims[j] != yd[perm[j]]) return 0;
    }
    if (T >= 0) {
        *at = T;
        *out_tr = out_projection_transpose(b, b->l[T].out[0], perm, out_shape);
    }
    memcpy(in, base, sizeof base);
    return 1;
}

static int try_attention(builder *b, int sm, const int *uses, const kiln__op *op) {
    if (!last_axis_softmax(b, sm)) return 0;
    const bl *Sm = &b->l[sm];
    int P = Sm->out[0], S = Sm->in[0];
    if (!private_tensor(b, uses, P)) return 0;
    int mm2 = -1;
    for (int li = 0; li < b->nl && mm2 < 0; li++)
        if (kiln__b_live_onnx(b, li, "MatMul") && b->l[li].in[0] == P) mm2 = li;
    double scale = 1.0;
    int mask = strip_mask(b, uses, &S);
    strip_scale(b, uses, &S, &scale, 1);
    int mm1 = b->t[S].producer;
    if (mm2 < 0 || !private_tensor(b, uses, S) || !kiln__b_live_onnx(b, mm1, "MatMul")) return 0;
    int Q = b->l[mm1].in[0], K = b->l[mm1].in[1], V = b->l[mm2].in[1], Y = b->l[mm2].out[0];
    strip_scale(b, uses, &Q, &scale, 0);
    strip_scale(b, uses, &K, &scale, 0);
    int k_trans = 1, tr = b->t[K].producer;
    if (private_tensor(b, uses, K) && kiln__b_live_onnx(b, tr, "Transpose")) { /* K^T = Transpose(K), last two dims */
        kiln_attrs a = kiln__attrset_view(b->l[tr].attrs);
        const int64_t *perm = NULL;
        int64_t n = kiln_attrs_ints(&a, "perm", &perm), r = b->t[K].ndim;
        int ok = perm && n == r && r >= 2 && perm[r - 1] == r - 2 && perm[r - 2] == r - 1;
        for (int64_t d = 0; ok && d + 2 < r; d++) ok = perm[d] == d;
        if (ok) {
            K = b->l[tr].in[0];
            k_trans = 0;
        }
    }
    const bt *q = &b->t[Q], *k = &b->t[K], *v = &b->t[V], *y = &b->t[Y];
    int r = q->ndim;
    int64_t D, Dv;
    if (r < 2 || k->ndim != r || v->ndim != r || y->ndim != r || !kernel_float(b, q->dtype) ||
        k->dtype != q->dtype || v->dtype != q->dtype || y->dtype != q->dtype || !static_dim(q, -1, &D) ||
        !static_dim(v, -1, &Dv) || D < 1 || Dv < 1 || (b->cuda && (D > KILN_CU_ATTN_DMAX || Dv > KILN_CU_ATTN_DMAX)))
        return 0;
    for (int d = 0; d + 2 < r; d++)
        if (k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d] || y->dims[d] != q->dims[d]) return 0;
    if (k->dims[k_trans ? r - 2 : r - 1] != q->dims[r - 1] || k->dims[k_trans ? r - 1 : r - 2] != v->dims[r - 2] ||
        y->dims[r - 2] != q->dims[r - 2] || y->dims[r - 1] != v->dims[r - 1])
        return 0;
    /* MatMul 2 (or the Transpose after it, see attention_out) becomes the attention layer */
    int in[4] = {Q, K, V, mask}, at = mm2, nav = 2, out_tr = -1;
    int64_t vw[3 * KILN_ATTN_VIEW_INTS], perm[4], out_shape[3];
    if (!k_trans && r == 4 && attention_views(b, uses, in, vw, Y, &at, perm, &out_tr, out_shape))
        nav = at == mm2 ? 3 : 4;
    if (out_tr >= 0) { /* write [B, S, H, D]: the out-projection's Transpose back goes */
        int64_t p0 = perm[0];
        perm[0] = perm[1];
        perm[1] = p0;
        bt *yt = &b->t[b->l[at].out[0]];
        const kiln_expr *d0 = yt->dims[0];
        yt->dims[0] = yt->dims[1];
        yt->dims[1] = d0;
    }
    const kiln_attr_value av[4] = {
        {.present = 1, .type = KILN_ATTR_FLOAT, .f = scale},
        {.present = 1, .type = KILN_ATTR_INT, .i = k_trans},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 3 * KILN_ATTN_VIEW_INTS, .data = vw},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 4, .data = perm}};
    const char *an[4] = {"scale", "k_trans", "views", "y_perm"};
    int rc = rewrite(b, at, op, an, av, nav, in, mask >= 0 ? 4 : 3);
    if (rc) return rc;
    if (at != mm2) b->l[mm2].dead = 1; /* its output is read by nobody now */
    if (out_tr >= 0 && (rc = transpose_to_reshape(b, out_tr, out_shape))) return rc;
    const bl *L = &b->l[at];
    kiln__log(KILN_LOG_VERBOSE, "attention: '%s' .. '%s' run as one kiln::attention layer (scale %g, %s%s%s%s%s)",
              b->l[mm1].name, L->name, scale, k_trans ? "K^T" : "K", mask >= 0 ? ", a mask" : "",
              nav > 2 ? ", Q K V as views" : "", nav > 3 ? ", output transposed" : "",
              out_tr >= 0 ? ", the out-projection's Transpose back a Reshape" : "");
    if (b->st) b->st->fused++;
    return 1;
}

/* The live layers reading tensor t as data (every other reader a Shape):
 * 1 when that is layer `only` alone. */
static int only_data_reader(const builder *b, int t, int only) {
    for (int li = 0; li < b->nl; li++) {
        const bl *L = &b->l[li];
        for (int p = 0; p < L->nin && !L->dead; p++)
            if (L->in[p] == t && li != only && !kiln__b_live_onnx(b, li, "Shape")) return 0;
    }
    return 1;
}

/* The Shape layers reading T1 (all its readers but layer mm) each read the
 * whole shape, and every reader of their outputs is a Gather (axis 0) of a
 * constant scalar index: then they can read x = Transpose(T1's perm
 * {1, 0, 2}) instead, with indices 0 and 1 swapped. */
static int shape_readers_ok(const builder *b, int T1, int mm) {
    for (int li = 0; li < b->nl; li++) {
        const bl *L = &b->l[li];
        if (L->dead || li == mm || L->nin < 1 || L->in[0] != T1) continue;
        kiln_attrs sa = kiln__attrset_view(L->attrs);
        const kiln_attr_value *end = kiln_attrs_get(&sa, "end");
        if (!kiln__b_live_onnx(b, li, "Shape") || kiln_attrs_int(&sa, "start") != 0 || (end && end->present) ||
            b->t[L->out[0]].is_output)
            return 0;
        for (int g = 0; g < b->nl; g++) {
            const bl *G = &b->l[g];
            for (int p = 0; p < G->nin && !G->dead; p++) {
                if (G->in[p] != L->out[0]) continue;
                kiln_attrs ga = kiln__attrset_view(G->attrs);
                int ix = G->nin == 2 ? G->in[1] : -1;
                if (!kiln__b_live_onnx(b, g, "Gather") || p != 0 || kiln_attrs_int(&ga, "axis") != 0 || ix < 0 ||
                    b->t[ix].kind != BT_CONST || !b->t[ix].data || b->t[ix].ndim != 0 ||
                    kiln__ops_is_float(b->t[ix].dtype))
                    return 0;
            }
        }
    }
    return 1;
}

/* What shape_readers_ok allowed: each Shape reads x (the Transpose's input),
 * its values swapped in 0 and 1, and each Gather of it takes index 1 for 0
 * and 0 for 1 (a new constant). */
static int shape_readers_to_x(builder *b, int T1, int mm) {
    int X = b->l[b->t[T1].producer].in[0];
    for (int li = 0; li < b->nl; li++) {
        if (b->l[li].dead || li == mm || b->l[li].nin < 1 || b->l[li].in[0] != T1) continue;
        int O = b->l[li].out[0];
        b->l[li].in[0] = X;
        if (b->t[O].nvalues == 3) {
            const kiln_expr *v0 = b->t[O].values[0];
            b->t[O].values[0] = b->t[O].values[1];
            b->t[O].values[1] = v0;
        }
        for (int g = 0; g < b->nl; g++) {
            if (b->l[g].dead || b->l[g].nin != 2 || b->l[g].in[0] != O) continue;
            const bt *it = &b->t[b->l[g].in[1]];
            int64_t ix = kiln__ops_get_i64(it->data, it->dtype, 0);
            if (ix < 0) ix += 3;
            if (ix != 0 && ix != 1) continue;
            ix = 1 - ix;
            char *nm = kiln__strfmt("%s:index", b->l[g].name);
            int t = nm ? i64_const(b, nm, &ix, 0) : kiln__err(KILN_ENOMEM, "build: out of memory");
            kiln__free(nm);
            if (t < 0) return t;
            b->l[g].in[1] = t;
        }
    }
    return 0;
}

/* torch's MultiheadAttention (batch_first) before attention layer li,
 * which reads Q, K, V as views of one packed projection P:
 *   x [B, S, E] -> Transpose {1, 0, 2} [S, B, E] -> MatMul(., W) -> Add(., b) = P [S, B, 3E]
 * The projection is row by row, so on x itself it gives P with its rows in
 * (b, s) order, [B, S, 3E]: the views take P's axes 0 and 1 swapped (a
 * view stride or dim that stepped along S now steps along P's axis 1, B's
 * along axis 0), the MatMul reads x, and the Shape layers that read the
 * Transpose (the exporter's shape arithmetic) read x with their Gather
 * indices 0 and 1 swapped: the Transpose goes.  Runs after a dead-code
 * pass, so P's other readers (the layout chain the views replace) are
 * gone.  1 when rewritten. */
static int try_qkv_input(builder *b, int li, const kiln__op *attn) {
    const bl *L = &b->l[li];
    if (L->dead || L->op != attn || L->nin != 3 || L->in[0] != L->in[1] || L->in[1] != L->in[2]) return 0;
    kiln_attrs a = kiln__attrset_view(L->attrs);
    const int64_t *vw = NULL, *yp = NULL;
    if (kiln_attrs_ints(&a, "views", &vw) != 3 * KILN_ATTN_VIEW_INTS || !vw) return 0;
    int np = (int)kiln_attrs_ints(&a, "y_perm", &yp);
    int P = L->in[0], add = b->t[P].producer;
    if (b->t[P].ndim != 3 || !kiln__b_live_onnx(b, add, "Add") || b->l[add].nin != 2 || !only_data_reader(b, P, li)) return 0;
    int M = -1, bias = -1;
    for (int k = 0; k < 2; k++)
        if (kiln__b_live_onnx(b, b->t[b->l[add].in[k]].producer, "MatMul")) {
            M = b->l[add].in[k];
            bias = b->l[add].in[1 - k];
        }
    if (M < 0 || b->t[bias].kind != BT_CONST || b->t[M].ndim != 3 || !only_data_reader(b, M, add)) return 0;
    for (int d = 0; d + 1 < b->t[bias].ndim; d++) { /* the bias broadcasts over the rows */
        int64_t one;
        if (!kiln_expr_is_const(b->t[bias].dims[d], &one) || one != 1) return 0;
    }
    int mm = b->t[M].producer, T1 = b->l[mm].in[0], tr = b->t[T1].producer;
    if (b->l[mm].nin != 2 || b->t[b->l[mm].in[1]].ndim != 2 || !kiln__b_live_onnx(b, tr, "Transpose") || b->l[tr].nin != 1 ||
        !only_data_reader(b, T1, mm))
        return 0;
    kiln_attrs ta = kiln__attrset_view(b->l[tr].attrs);
    const int64_t *tp = NULL;
    if (kiln_attrs_ints(&ta, "perm", &tp) != 3 || !tp || tp[0] != 1 || tp[1] != 0 || tp[2] != 2) return 0;
    if (!shape_readers_ok(b, T1, mm)) return 0;
    int64_t nv[3 * KILN_ATTN_VIEW_INTS];
    memcpy(nv, vw, sizeof nv);
    for (int o = 0; o < 3; o++) {
        int64_t *w = nv + o * KILN_ATTN_VIEW_INTS;
        for (int k = 0; k < KILN_ATTN_VIEW_INTS; k++) {
            int axis_field = k == 0 || (k >= 2 && (k - 2) % 3 != 2); /* [0]; per dim, its input dim and stride axis */
            if (axis_field && (w[k] == 0 || w[k] == 1)) w[k] = 1 - w[k];
        }
    }
    const kiln_attr_value av[4] = {
        {.present = 1, .type = KILN_ATTR_FLOAT, .f = kiln_attrs_float(&a, "scale")},
        {.present = 1, .type = KILN_ATTR_INT, .i = kiln_attrs_int(&a, "k_trans")},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 3 * KILN_ATTN_VIEW_INTS, .data = nv},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 4, .data = yp}};
    const char *an[4] = {"scale", "k_trans", "views", "y_perm"};
    int in[3] = {P, P, P};
    int rc = rewrite(b, li, attn, an, av, np == 4 && yp ? 4 : 3, in, 3);
    if (rc) return rc;
    b->l[mm].in[0] = b->l[tr].in[0];
    for (int t = 0; t < 2; t++) { /* M and P: [B, S, 3E] now */
        bt *x = &b->t[t ? P : M];
        const kiln_expr *d0 = x->dims[0];
        x->dims[0] = x->dims[1];
        x->dims[1] = d0;
    }
    if ((rc = shape_readers_to_x(b, T1, mm))) return rc;
    b->l[tr].dead = 1; /* read by nobody now */
    kiln__log(KILN_LOG_VERBOSE, "attention '%s': the projection '%s' reads x, its Transpose '%s' goes",
              b->l[li].name, b->l[mm].name, b->l[tr].name);
    return 1;
}

/* LayerNormalization li of Add(a, b) -> kiln::add_layernorm (see above). */
static int try_add_norm(builder *b, int li, const int *uses, const kiln__op *op) {
    if (!kiln__b_live_onnx(b, li, "LayerNormalization")) return 0;
    const bl *L = &b->l[li];
    for (int k = 1; k < L->nout; k++) { /* Mean / InvStdDev: read by nobody */
        int t = L->out[k];
        if (t >= 0 && (uses[t] || b->t[t].is_output || b->t[t].is_size)) return 0;
    }
    int X = L->in[0], add = b->t[X].producer;
    if (!private_tensor(b, uses, X) || !kiln__b_live_onnx(b, add, "Add") || b->l[add].nin != 2) return 0;
    int A = b->l[add].in[0], B = b->l[add].in[1];
    const bt *x = &b->t[X], *ta = &b->t[A], *tb = &b->t[B];
    if (ta->kind == BT_CONST || tb->kind == BT_CONST || !kernel_float(b, x->dtype) || ta->dtype != x->dtype ||
        tb->dtype != x->dtype || ta->ndim != x->ndim || tb->ndim != x->ndim)
        return 0;
    for (int d = 0; d < x->ndim; d++)
        if (ta->dims[d] != x->dims[d] || tb->dims[d] != x->dims[d]) return 0;
    kiln_attrs la = kiln__attrset_view(L->attrs);
    int64_t axis = kiln_attrs_int(&la, "axis"), inner = 1, n;
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return 0;
    for (int d = (int)axis; d < x->ndim; d++) {
        if (!kiln_expr_is_const(x->dims[d], &n)) return 0;
        inner *= n;
    }
    if (inner < 1 || inner > 8192) return 0;
    const kiln_attr_value av[2] = {{.present = 1, .type = KILN_ATTR_INT, .i = axis},
                                   {.present = 1, .type = KILN_ATTR_FLOAT, .f = kiln_attrs_float(&la, "epsilon")}};
    const char *an[2] = {"axis", "epsilon"};
    const int in[4] = {A, B, L->in[1], L->nin > 2 ? L->in[2] : -1};
    int rc = rewrite(b, li, op, an, av, 2, in, 4);
    if (rc) return rc;
    bl *N = &b->l[li];
    for (int k = 1; k < N->nout; k++)
        if (N->out[k] >= 0) b->t[N->out[k]].producer = -1;
    N->nout = 1;
    kiln__log(KILN_LOG_VERBOSE, "add_layernorm: '%s' + '%s' run as one kiln::add_layernorm layer", b->l[add].name,
              N->name);
    if (b->st) b->st->fused++;
    return 1;
}

int kiln__b_transformer(builder *b) {
    if (b->cfg->flags & KILN_BUILD_NO_FUSION) return 0;
    const kiln__op *op = kiln__registry_find("kiln", "attention", 1),
                   *norm = kiln__registry_find("kiln", "add_layernorm", 1);
    if (!op || !norm) return 0;
    int *uses = NULL, rc = 1;
    while (rc > 0) { /* one rewrite per walk: it changes who reads what (and may add a tensor), so recount */
        kiln__free(uses);
        uses = kiln__malloc(((size_t)b->nt + 1) * sizeof *uses);
        if (!uses) return kiln__err(KILN_ENOMEM, "build: out of memory");
        kiln__b_count_uses(b, uses);
        rc = 0;
        for (int li = 0; li < b->nl && !rc; li++) {
            rc = try_attention(b, li, uses, op);
            if (!rc) rc = try_add_norm(b, li, uses, norm);
        }
    }
    kiln__free(uses);
    if (rc < 0) return rc;
    kiln__b_dead_code(b); /* the layout chains the views replaced go before the next rewrite */
    for (int li = 0; li < b->nl && rc >= 0; li++) rc = try_qkv_input(b, li, op);
    return rc < 0 ? rc : 0;
}
