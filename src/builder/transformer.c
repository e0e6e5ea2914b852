/*
 * transformer.c — the builder's transformer rewrites (CUDA builds, before
 * selection, so each new layer is placed, typed and timed like any other;
 * the dead chains are removed by the dead-code pass after them).
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
 * Transpose's output itself: the copies go.  The leading
 * (batch, head) dims of Q, K, V must be the same expressions and the head
 * dims static and <= KILN_CU_ATTN_DMAX (the GPU kernel's bound).
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

static int is_op(const builder *b, int li, const char *name) {
    return li >= 0 && !b->l[li].dead && !strcmp(b->l[li].op->ns, "ai.onnx") && !strcmp(b->l[li].op->name, name);
}

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
    if (!private_tensor(b, uses, *t) || !(is_op(b, li, "Mul") || (div && is_op(b, li, "Div"))) ||
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

/* The types the GPU kernels take (F64 stays off: the CPU reference is F32). */
static int gpu_float(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16;
}

static int static_dim(const bt *t, int d, int64_t *v) {
    return kiln_expr_is_const(t->dims[d < 0 ? t->ndim + d : d], v);
}

/* The Softmax layer li over the last axis of a rank-r input. */
static int last_axis_softmax(const builder *b, int li) {
    if (!is_op(b, li, "Softmax")) return 0;
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
    if (!private_tensor(b, uses, *t) || !is_op(b, li, "Add") || b->l[li].nin != 2) return -1;
    const bt *st = &b->t[*t];
    for (int s = 0; s < 2; s++) {
        int x = b->l[li].in[s], m = b->l[li].in[1 - s], y = x;
        double unused = 1;
        strip_scale(b, uses, &y, &unused, 1);
        if (x < 0 || m < 0 || !is_op(b, b->t[y].producer, "MatMul")) continue;
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

/* Q, K, V (in) as views of the tensors their layout chains start from
 * (builder/attn_views.c): replaces in with those, fills vw.  When the
 * output Y [B, H, S, Dv] is read only by a Transpose, that layer (*at) is
 * to become the attention layer writing its output (perm).  0 when no
 * operand has a chain to skip or the op's shape function would not give
 * the dims the output tensor has. */
static int attention_views(builder *b, const int *uses, int *in, int64_t *vw, int Y, int *at, int64_t *perm) {
    int base[3];
    if (!kiln__b_attn_views(b, in, base, vw) || (base[0] == in[0] && base[1] == in[1] && base[2] == in[2])) return 0;
    int T = -1;
    for (int li = 0; li < b->nl && private_tensor(b, uses, Y) && T < 0; li++)
        if (is_op(b, li, "Transpose") && b->l[li].nin == 1 && b->l[li].in[0] == Y) T = li;
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
    if (T >= 0) *at = T;
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
        if (is_op(b, li, "MatMul") && b->l[li].in[0] == P) mm2 = li;
    double scale = 1.0;
    int mask = strip_mask(b, uses, &S);
    strip_scale(b, uses, &S, &scale, 1);
    int mm1 = b->t[S].producer;
    if (mm2 < 0 || !private_tensor(b, uses, S) || !is_op(b, mm1, "MatMul")) return 0;
    int Q = b->l[mm1].in[0], K = b->l[mm1].in[1], V = b->l[mm2].in[1], Y = b->l[mm2].out[0];
    strip_scale(b, uses, &Q, &scale, 0);
    strip_scale(b, uses, &K, &scale, 0);
    int k_trans = 1, tr = b->t[K].producer;
    if (private_tensor(b, uses, K) && is_op(b, tr, "Transpose")) { /* K^T = Transpose(K), last two dims */
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
    if (r < 2 || k->ndim != r || v->ndim != r || y->ndim != r || !gpu_float(q->dtype) ||
        k->dtype != q->dtype || v->dtype != q->dtype || y->dtype != q->dtype || !static_dim(q, -1, &D) ||
        !static_dim(v, -1, &Dv) || D < 1 || Dv < 1 || D > KILN_CU_ATTN_DMAX || Dv > KILN_CU_ATTN_DMAX)
        return 0;
    for (int d = 0; d + 2 < r; d++)
        if (k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d] || y->dims[d] != q->dims[d]) return 0;
    if (k->dims[k_trans ? r - 2 : r - 1] != q->dims[r - 1] || k->dims[k_trans ? r - 1 : r - 2] != v->dims[r - 2] ||
        y->dims[r - 2] != q->dims[r - 2] || y->dims[r - 1] != v->dims[r - 1])
        return 0;
    /* MatMul 2 (or the Transpose after it, see attention_out) becomes the attention layer */
    int in[4] = {Q, K, V, mask}, at = mm2, nav = 2;
    int64_t vw[3 * KILN_ATTN_VIEW_INTS], perm[4];
    if (!k_trans && r == 4 && attention_views(b, uses, in, vw, Y, &at, perm)) nav = at == mm2 ? 3 : 4;
    const kiln_attr_value av[4] = {
        {.present = 1, .type = KILN_ATTR_FLOAT, .f = scale},
        {.present = 1, .type = KILN_ATTR_INT, .i = k_trans},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 3 * KILN_ATTN_VIEW_INTS, .data = vw},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 4, .data = perm}};
    const char *an[4] = {"scale", "k_trans", "views", "y_perm"};
    int rc = rewrite(b, at, op, an, av, nav, in, mask >= 0 ? 4 : 3);
    if (rc) return rc;
    if (at != mm2) b->l[mm2].dead = 1; /* its output is read by nobody now */
    const bl *L = &b->l[at];
    kiln__log(KILN_LOG_VERBOSE, "attention: '%s' .. '%s' run as one kiln::attention layer (scale %g, %s%s%s%s)",
              b->l[mm1].name, L->name, scale, k_trans ? "K^T" : "K", mask >= 0 ? ", a mask" : "",
              nav > 2 ? ", Q K V as views" : "", nav > 3 ? ", output transposed" : "");
    if (b->st) b->st->fused++;
    return 1;
}

/* LayerNormalization li of Add(a, b) -> kiln::add_layernorm (see above). */
static int try_add_norm(builder *b, int li, const int *uses, const kiln__op *op) {
    if (!is_op(b, li, "LayerNormalization")) return 0;
    const bl *L = &b->l[li];
    for (int k = 1; k < L->nout; k++) { /* Mean / InvStdDev: read by nobody */
        int t = L->out[k];
        if (t >= 0 && (uses[t] || b->t[t].is_output || b->t[t].is_size)) return 0;
    }
    int X = L->in[0], add = b->t[X].producer;
    if (!private_tensor(b, uses, X) || !is_op(b, add, "Add") || b->l[add].nin != 2) return 0;
    int A = b->l[add].in[0], B = b->l[add].in[1];
    const bt *x = &b->t[X], *ta = &b->t[A], *tb = &b->t[B];
    if (ta->kind == BT_CONST || tb->kind == BT_CONST || !gpu_float(x->dtype) || ta->dtype != x->dtype ||
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
    int *uses = kiln__malloc(((size_t)b->nt + 1) * sizeof *uses);
    if (!uses) return kiln__err(KILN_ENOMEM, "build: out of memory");
    int rc = 1;
    while (rc > 0) { /* one rewrite per walk: it changes who reads what, so recount */
        memset(uses, 0, ((size_t)b->nt + 1) * sizeof *uses);
        for (int li = 0; li < b->nl; li++)
            for (int p = 0; p < b->l[li].nin && !b->l[li].dead; p++)
                if (b->l[li].in[p] >= 0) uses[b->l[li].in[p]]++;
        for (int s = 0; s < b->nsym; s++)
            if (b->sym[s].t >= 0 && b->sym[s].t < b->nt) uses[b->sym[s].t] += 2;
        rc = 0;
        for (int li = 0; li < b->nl && !rc; li++) {
            rc = try_attention(b, li, uses, op);
            if (!rc) rc = try_add_norm(b, li, uses, norm);
        }
    }
    kiln__free(uses);
    return rc;
}
