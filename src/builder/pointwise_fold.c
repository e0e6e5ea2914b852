/*
 * pointwise_fold.c — elementwise chains rewritten before selection, on
 * every device (so each remaining layer is placed, typed and timed like any
 * other; the chains' dead layers are dropped by the dead-code pass after).
 *
 * HardSwish.  x * Clip(x + 3, 0, 6) / 6 as exporters write it (Paddle's
 * hardswish: Add, Clip, Mul, Div; the 1/6 may be a Mul, or applied to the
 * Clip before the Mul by x), and x * HardSigmoid(x) with alpha 1/6 and
 * beta 1/2, become one HardSwish layer, which then fuses into its producer
 * like any activation (fuse.c): on the GPU the Conv's own epilogue (the
 * kiln_cu_act code), on the CPU its epilogue callback.  Four passes over
 * the tensor become none.
 *
 * Affine after a Conv.  Conv(X, W, B) followed by Mul, Add or Sub (either
 * order) or Div with constants that are scalars or per output channel
 * (PP-LCNet's "learnable affine block": a scalar scale and bias after each
 * conv), or by an inference-mode BatchNormalization, becomes
 * Conv(X, W * s, B * s + c) with new constants computed here in double:
 * the layers go, their passes with them.  ConvTranspose folds the same way
 * (its W is [C, M/group, k...]: the scale goes along dim 1 within each
 * group): PP-OCR's DB head, ConvTranspose + bias Add + BatchNormalization,
 * becomes one ConvTranspose whose Relu / Sigmoid then fuses too (fuse.c).
 * Only an F32 conv with constant W (and B) folds; the conv's output and
 * each intermediate must have no other reader.

 * Each intermediate of a chain must be read by the chain alone and be no
 * network output.  KILN_BUILD_NO_FUSION turns both off.
 */
#include "builder.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <string.h>

/* The one live layer that reads tensor t, when nothing else reads it and
 * it is no output, else -1. */
static int sole_reader(const builder *b, const int *uses, int t) {
    if (t < 0 || uses[t] != 1 || b->t[t].is_output || b->t[t].is_size || b->t[t].kind != BT_ACT) return -1;
    for (int li = 0; li < b->nl; li++)
        for (int p = 0; p < b->l[li].nin && !b->l[li].dead; p++)
            if (b->l[li].in[p] == t) return li;
    return -1;
}

/* Constant float tensor t of static dims: its element count, else -1. */
static int64_t const_numel(const builder *b, int t) {
    const bt *c = &b->t[t];
    if (t < 0 || c->kind != BT_CONST || !c->data || !kiln__ops_is_float(c->dtype)) return -1;
    int64_t n = 1, d;
    for (int k = 0; k < c->ndim; k++) {
        if (!kiln_expr_is_const(c->dims[k], &d)) return -1;
        n *= d;
    }
    return n;
}

static int near(double got, double v) {
    return fabs(got - v) <= 1e-6 * fabs(v) + 1e-7;
}

/* Layer li is a two-input `name` of tensor t and a scalar constant near v
 * (t in slot 0 when `first`). */
static int op_t_const(const builder *b, int li, const char *name, int t, double v, int first) {
    if (!kiln__b_live_onnx(b, li, name) || b->l[li].nin != 2 || b->l[li].nout != 1) return 0;
    const bl *L = &b->l[li];
    for (int s = 0; s < (first ? 1 : 2); s++)
        if (L->in[s] == t && const_numel(b, L->in[1 - s]) == 1 &&
            near(kiln__ops_get_f64(b->t[L->in[1 - s]].data, b->t[L->in[1 - s]].dtype, 0), v))
            return 1;
    return 0;
}

/* Layer li is Div(t, 6) or Mul(t, 1/6). */
static int sixth(const builder *b, int li, int t) {
    return op_t_const(b, li, "Div", t, 6.0, 1) || op_t_const(b, li, "Mul", t, 1.0 / 6, 0);
}

/* Layer li is Mul of x and t, in either order. */
static int mul_of(const builder *b, int li, int x, int t) {
    if (!kiln__b_live_onnx(b, li, "Mul") || b->l[li].nin != 2 || b->l[li].nout != 1) return 0;
    const int *in = b->l[li].in;
    return (in[0] == x && in[1] == t) || (in[0] == t && in[1] == x);
}

/* Layer li is Clip(t) to [0, 6] (bounds as inputs, opset 11+, or attributes). */
static int clip06(const builder *b, int li, int t) {
    if (!kiln__b_live_onnx(b, li, "Clip") || b->l[li].in[0] != t || b->l[li].nout != 1) return 0;
    const bl *L = &b->l[li];
    double lo, hi;
    if (L->op->version < 11) {
        kiln_attrs a = kiln__attrset_view(L->attrs);
        lo = kiln_attrs_float(&a, "min");
        hi = kiln_attrs_float(&a, "max");
    } else {
        if (L->nin != 3 || const_numel(b, L->in[1]) != 1 || const_numel(b, L->in[2]) != 1) return 0;
        lo = kiln__ops_get_f64(b->t[L->in[1]].data, b->t[L->in[1]].dtype, 0);
        hi = kiln__ops_get_f64(b->t[L->in[2]].data, b->t[L->in[2]].dtype, 0);
    }
    return lo == 0 && hi == 6;
}

/* The HardSwish chain whose first layer is li: its layers in chain[] (the
 * last one writes y), its count, x in *xt; 0 when li starts none. */
static int hswish_chain(const builder *b, const int *uses, int li, int chain[4], int *xt) {
    const bl *F = &b->l[li];
    if (kiln__b_live_onnx(b, li, "HardSigmoid") && F->nin == 1 && F->nout == 1) {
        kiln_attrs a = kiln__attrset_view(F->attrs);
        int x = F->in[0], m = sole_reader(b, uses, F->out[0]);
        if (!near(kiln_attrs_float(&a, "alpha"), 1.0 / 6) || !near(kiln_attrs_float(&a, "beta"), 0.5) ||
            !mul_of(b, m, x, F->out[0]))
            return 0;
        chain[0] = li;
        chain[1] = m;
        *xt = x;
        return 2;
    }
    if (!kiln__b_live_onnx(b, li, "Add") || F->nin != 2 || F->nout != 1) return 0;
    for (int s = 0; s < 2; s++) {
        int x = F->in[s];
        if (!op_t_const(b, li, "Add", x, 3.0, 0)) continue;
        int c = sole_reader(b, uses, F->out[0]);
        if (!clip06(b, c, F->out[0])) continue;
        int t = b->l[c].out[0], r = sole_reader(b, uses, t);
        if (r < 0) continue;
        int last = -1;
        if (mul_of(b, r, x, t)) /* (x * clip) / 6 */
            last = sole_reader(b, uses, b->l[r].out[0]), last = sixth(b, last, b->l[r].out[0]) ? last : -1;
        else if (sixth(b, r, t)) /* x * (clip / 6) */
            last = sole_reader(b, uses, b->l[r].out[0]), last = mul_of(b, last, x, b->l[r].out[0]) ? last : -1;
        if (last < 0) continue;
        chain[0] = li;
        chain[1] = c;
        chain[2] = r;
        chain[3] = last;
        *xt = x;
        return 4;
    }
    return 0;
}

/* Rewrite the HardSwish chain starting at li into its last layer (1: done). */
static int try_hswish(builder *b, const int *uses, int li, const kiln__op *hswish) {
    int chain[4], x, n = hswish_chain(b, uses, li, chain, &x);
    if (!n) return 0;
    int last = chain[n - 1], y = b->l[last].out[0];
    const bt *tx = &b->t[x], *ty = &b->t[y];
    if (!kiln__ops_is_float(tx->dtype) || ty->dtype != tx->dtype || tx->ndim != ty->ndim) return 0;
    for (int d = 0; d < tx->ndim; d++)
        if (tx->dims[d] != ty->dims[d]) return 0; /* no broadcasting (hash-consed dims) */
    for (int k = 0; k < n; k++)
        if (b->t[b->l[chain[k]].out[0]].dtype != tx->dtype) return 0;
    kiln__attrset own;
    if (kiln__attrset_init(&own, hswish)) return kiln__err(KILN_ENOMEM, "build: out of memory");
    int rc = kiln__b_set_op(b, last, hswish, &own);
    if (rc) return rc;
    bl *L = &b->l[last];
    L->in[0] = x;
    L->nin = 1;
    for (int k = 0; k + 1 < n; k++) b->l[chain[k]].dead = 1;
    if (b->st) b->st->fused += n - 1;
    kiln__log(KILN_LOG_VERBOSE, "layers '%s' .. '%s' (x * clip(x + 3, 0, 6) / 6) rewritten into one HardSwish '%s'",
              b->l[chain[0]].name, L->name, L->name);
    return 1;
}

/* Constant t (stride per channel in *per: 0 scalar, 1 per channel) that
 * broadcasts over a rank-r output with m channels in dim 1, only along it. */
static int chan_const(const builder *b, int t, int r, int64_t m, int *per) {
    int64_t n = const_numel(b, t), d;
    const bt *c = &b->t[t];
    if (n == 1 && c->ndim <= r) {
        *per = 0;
        return 1;
    }
    if (n != m || c->ndim > r || c->ndim < r - 1) return 0;
    for (int k = 0; k < c->ndim; k++) { /* aligned right: dim k is output dim k + r - ndim */
        kiln_expr_is_const(c->dims[k], &d);
        if (d != (k + r - c->ndim == 1 ? m : 1)) return 0;
    }
    *per = 1;
    return 1;
}

/* BatchNormalization L of t in inference mode, its constants per channel
 * (m): (x - mean) * scale / sqrt(var + epsilon) + bias folded into s, c. */
static int bn_step(const builder *b, const int *uses, const bl *L, int t, int64_t m, double *s, double *c) {
    kiln_attrs a = kiln__attrset_view(L->attrs);
    const kiln_attr_value *tm = kiln_attrs_get(&a, "training_mode");
    if (L->nin != 5 || L->in[0] != t || (tm && tm->present && tm->i)) return 0;
    for (int o = 1; o < L->nout; o++) /* BatchNormalization-14's running statistics: unread */
        if (L->out[o] >= 0 && (uses[L->out[o]] || b->t[L->out[o]].is_output || b->t[L->out[o]].is_size)) return 0;
    for (int k = 1; k < 5; k++)
        if (const_numel(b, L->in[k]) != m || b->t[L->in[k]].ndim != 1) return 0;
    double eps = kiln_attrs_float(&a, "epsilon");
    const bt *g = &b->t[L->in[1]], *be = &b->t[L->in[2]], *mu = &b->t[L->in[3]], *var = &b->t[L->in[4]];
    for (int64_t i = 0; i < m; i++)
        if (!(kiln__ops_get_f64(var->data, var->dtype, i) + eps > 0)) return 0;
    for (int64_t i = 0; i < m; i++) {
        double k = kiln__ops_get_f64(g->data, g->dtype, i) / sqrt(kiln__ops_get_f64(var->data, var->dtype, i) + eps);
        s[i] *= k;
        c[i] = (c[i] - kiln__ops_get_f64(mu->data, mu->dtype, i)) * k + kiln__ops_get_f64(be->data, be->dtype, i);
    }
    return 1;
}

/* One step of the affine chain after tensor t: layer li = Mul/Add/Sub of t
 * and a channel constant (either order), Div of t by one, or an inference
 * BatchNormalization; folds it into s, c (m channels). */
static int affine_step(const builder *b, const int *uses, int li, int t, int r, int64_t m, double *s, double *c) {
    static const char *const ops[4] = {"Mul", "Div", "Add", "Sub"};
    int op = -1;
    for (int k = 0; k < 4 && op < 0; k++)
        if (kiln__b_live_onnx(b, li, ops[k])) op = k;
    const bl *L = &b->l[li];
    if (kiln__b_live_onnx(b, li, "BatchNormalization")) return bn_step(b, uses, L, t, m, s, c);
    if (op < 0 || L->nin != 2 || L->nout != 1) return 0;
    int slot = L->in[0] == t ? 0 : 1, per;
    if (L->in[slot] != t || L->in[1 - slot] == t || (slot == 1 && op == 1) || !chan_const(b, L->in[1 - slot], r, m, &per))
        return 0;
    const bt *k = &b->t[L->in[1 - slot]];
    for (int64_t i = 0; i < m && op == 1; i++) /* nothing changes unless the step folds */
        if (kiln__ops_get_f64(k->data, k->dtype, per ? i : 0) == 0) return 0;
    for (int64_t i = 0; i < m; i++) {
        double v = kiln__ops_get_f64(k->data, k->dtype, per ? i : 0);
        if (op == 0 || op == 1) {
            s[i] = op ? s[i] / v : s[i] * v;
            c[i] = op ? c[i] / v : c[i] * v;
        } else if (op == 3 && slot == 1) { /* v - x */
            s[i] = -s[i];
            c[i] = v - c[i];
        } else {
            c[i] += op == 2 ? v : -v;
        }
    }
    return 1;
}

/* A new F32 constant named name + suffix with the dims of model tensor
 * `like` (rank nd) and data (owned by it from now on); its index. */
static int new_const(builder *b, int like, int nd, const char *suffix, float *data, size_t bytes) {
    char *nm = kiln__strfmt("%s%s", b->t[like].name, suffix);
    int t = nm ? kiln__b_new_tensor(b, nm, BT_CONST) : kiln__err(KILN_ENOMEM, "build: out of memory");
    kiln__free(nm);
    if (t < 0) {
        kiln__aligned_free(data);
        return t;
    }
    bt *c = &b->t[t];
    c->dtype = KILN_DTYPE_F32;
    c->ndim = nd;
    for (int d = 0; d < nd; d++) c->dims[d] = b->t[like].dims[d];
    c->data = data;
    c->bytes = bytes;
    c->data_owned = 1;
    return t;
}

/* Output channels of Conv / ConvTranspose layer P with weights w (nw
 * elements): Conv's W is [m, C/g, k...]; ConvTranspose's [C, m/g, k...].
 * *tr set for ConvTranspose, *g its group count, *d0 W's dim 0; 0 when
 * not constant. */
static int64_t out_channels(const builder *b, const bl *P, int w, int64_t nw, int *tr, int64_t *g, int64_t *d0) {
    int64_t d1;
    *tr = !strcmp(P->op->name, "ConvTranspose");
    *g = 1;
    if (!kiln_expr_is_const(b->t[w].dims[0], d0) || *d0 <= 0 || nw % *d0) return 0;
    if (!*tr) return *d0;
    kiln_attrs a = kiln__attrset_view(P->attrs);
    *g = kiln_attrs_int(&a, "group");
    if (b->t[w].ndim < 3 || !kiln_expr_is_const(b->t[w].dims[1], &d1) || d1 <= 0 || *g < 1 || *d0 % *g ||
        nw % (*d0 * d1))
        return 0;
    return d1 * *g;
}

/* Fold the scale/shift chain after Conv or ConvTranspose layer li into its
 * W and B (1: done). */
static int try_conv_affine(builder *b, const int *uses, int li) {
    if ((!kiln__b_live_onnx(b, li, "Conv") && !kiln__b_live_onnx(b, li, "ConvTranspose")) || b->l[li].nout != 1 || b->l[li].nin < 2)
        return 0;
    const bl *P = &b->l[li];
    int w = P->in[1], bias = P->nin > 2 ? P->in[2] : -1, y = P->out[0], tr = 0;
    const bt *ty = &b->t[y];
    int64_t nw = const_numel(b, w), m = 0, groups = 1, wc = 1;
    if (nw > 0) m = out_channels(b, P, w, nw, &tr, &groups, &wc);
    if (nw <= 0 || b->t[w].dtype != KILN_DTYPE_F32 || ty->dtype != KILN_DTYPE_F32 || ty->ndim < 3 || m <= 0 ||
        (bias >= 0 && (const_numel(b, bias) != m || b->t[bias].dtype != KILN_DTYPE_F32)))
        return 0;
    double *s = kiln__malloc((size_t)m * 2 * sizeof *s), *c = s + m;
    if (!s) return kiln__err(KILN_ENOMEM, "build: out of memory");
    for (int64_t i = 0; i < m; i++) {
        s[i] = 1;
        c[i] = bias >= 0 ? ((const float *)b->t[bias].data)[i] : 0;
    }
    int steps = 0, chain[16];
    for (int t = y, r; steps < 16 && (r = sole_reader(b, uses, t)) >= 0; t = b->l[r].out[0], steps++) {
        const bt *to = &b->t[b->l[r].out[0]];
        int same = to->dtype == KILN_DTYPE_F32 && to->ndim == ty->ndim;
        for (int d = 0; d < ty->ndim && same; d++) same = to->dims[d] == ty->dims[d];
        if (!same || !affine_step(b, uses, r, t, ty->ndim, m, s, c)) break;
        chain[steps] = r;
    }
    float *nwd = NULL, *nbd = NULL;
    for (int64_t i = 0; i < m && steps; i++)
        if (!isfinite(s[i]) || !isfinite(c[i]) || fabs(s[i]) > 3e38 || fabs(c[i]) > 3e38) steps = 0;
    if (steps) {
        nwd = kiln__aligned_alloc((size_t)nw * sizeof *nwd);
        nbd = kiln__aligned_alloc((size_t)m * sizeof *nbd);
    }
    if (!steps || !nwd || !nbd) {
        kiln__free(s);
        kiln__aligned_free(nwd);
        kiln__aligned_free(nbd);
        return steps ? kiln__err(KILN_ENOMEM, "build: out of memory") : 0;
    }
    const float *wd = b->t[w].data;
    /* element i of W belongs to output channel i / per (Conv); ConvTranspose:
     * [C, m/g, k...] with input channel ci in group ci / (C/g) */
    const int64_t mpg = m / groups, cpg = wc / groups, area = nw / (wc * (tr ? mpg : 1));
    for (int64_t i = 0; i < nw; i++)
        nwd[i] = (float)(wd[i] * s[tr ? i / (mpg * area) / cpg * mpg + i / area % mpg : i / (nw / m)]);
    for (int64_t i = 0; i < m; i++) nbd[i] = (float)c[i];
    kiln__free(s);
    int last = chain[steps - 1], yo = b->l[last].out[0];
    int nt = new_const(b, w, b->t[w].ndim, ":scaled", nwd, (size_t)nw * sizeof *nwd);
    if (nt < 0) {
        kiln__aligned_free(nbd);
        return nt;
    }
    int nb = new_const(b, nt, 1, ":bias", nbd, (size_t)m * sizeof *nbd); /* Conv: dims[0] of W is m */
    if (nb < 0) return nb;
    if (tr && !(b->t[nb].dims[0] = kiln_expr_const(b->x, m))) return kiln__err(KILN_ENOMEM, "build: out of memory");
    bl *C = &b->l[li];
    if (C->nin < 3) {
        int *in = kiln__malloc(3 * sizeof *in);
        if (!in) return kiln__err(KILN_ENOMEM, "build: out of memory");
        in[0] = C->in[0];
        kiln__free(C->in);
        C->in = in;
        C->nin = 3;
    }
    C->in[1] = nt;
    C->in[2] = nb;
    C->out[0] = yo;
    b->t[yo].producer = li;
    b->t[y].producer = -1;
    for (int k = 0; k < steps; k++) b->l[chain[k]].dead = 1;
    if (b->st) b->st->fused += steps;
    kiln__log(KILN_LOG_VERBOSE, "layers '%s' .. '%s' (scale and shift) folded into the weights of Conv '%s'",
              b->l[chain[0]].name, b->l[last].name, C->name);
    return 1;
}

int kiln__b_pointwise_fold(builder *b) {
    if (b->cfg->flags & KILN_BUILD_NO_FUSION) return 0;
    const kiln__op *hswish = kiln__registry_find("ai.onnx", "HardSwish", 14);
    int *uses = kiln__malloc(((size_t)b->nt + 1) * sizeof *uses), rc = 0;
    if (!uses) return kiln__err(KILN_ENOMEM, "build: out of memory");
    kiln__b_count_uses(b, uses);
    for (int li = 0; li < b->nl && rc >= 0; li++) {
        rc = hswish ? try_hswish(b, uses, li, hswish) : 0;
        if (!rc) rc = try_conv_affine(b, uses, li);
        if (rc > 0) { /* who reads what changed (and b->t may have grown) */
            int *u = kiln__realloc(uses, ((size_t)b->nt + 1) * sizeof *uses);
            if (!u) rc = kiln__err(KILN_ENOMEM, "build: out of memory");
            else kiln__b_count_uses(b, uses = u);
        }
    }
    kiln__free(uses);
    return rc < 0 ? rc : 0;
}
