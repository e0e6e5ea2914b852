/*
 * attn_views.c — Q, K, V of a fused attention layer as strided views of
 * the tensors their layout chains start from (kiln::attention's `views`,
 * ops/nn/attention.h), so the Gather / Transpose / Reshape copies exporters
 * put between a QKV projection and the attention disappear.
 *
 * torch.nn.MultiheadAttention, for one, writes for x [S, B, E]:
 *   P = x W + b [S, B, 3E] -> Reshape [S, B, 3, E] -> Unsqueeze -> Transpose
 *   -> Squeeze [3, S, B, E] -> Gather(0, i) [S, B, E] -> Reshape [S, B*H, D]
 *   -> Transpose [B*H, S, D] -> Reshape [B, H, S, D]
 * Each operand is walked back through such layout-only layers (Reshape,
 * Squeeze, Unsqueeze, Flatten, Identity, Transpose, Gather of a scalar
 * constant index) to the first tensor something else made (the base), and
 * the chain is replayed forward as a view of the contiguous base whose
 * dims are lists of (size, stride) atoms: Transpose permutes dims, Gather
 * adds its index (in the atoms' mixed radix) to the offset, reshapes deal
 * the atoms out to the new dims, splitting one where a dim takes only its
 * outer part ([B, E] -> [B*H, D] is no strided view, but its [B, H] split
 * two steps later is).  Each final dim's atoms must be one stride apart.  Symbolic dims are evaluated with every
 * symbol at two values (13 and 17); each view stride and offset must then
 * be the same multiple of one contiguous base stride in both, and each
 * view dim a constant or one base dim: that is what `views` stores, so the
 * run time takes the strides from the base tensor as it comes.
 */
#include "builder.h"
#include "ops/common/ops_util.h"
#include "ops/nn/attention.h"

#include <string.h>

#define CHAIN_MAX 16

/* A strided view of a contiguous base: dim k is na[k] atoms (size, element
 * stride), outermost first, so a reshape may split a dim whose parts are
 * not one stride apart and a later reshape merge the parts again. */
#define ATOMS 8
typedef struct view {
    int n, na[KILN_MAX_DIMS];
    int64_t sz[KILN_MAX_DIMS][ATOMS], st[KILN_MAX_DIMS][ATOMS], off;
} view;

static int layout_op(const builder *b, int li) {
    static const char *const names[] = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Transpose", "Gather"};
    if (li < 0 || b->l[li].dead || strcmp(b->l[li].op->ns, "ai.onnx") || b->l[li].nout != 1) return 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(b->l[li].op->name, names[i])) return 1;
    return 0;
}

static int every_sym(void *ud, const char *name, int64_t *v) {
    (void)name;
    *v = *(const int64_t *)ud;
    return 0;
}

static int eval_dims(const bt *t, int64_t val, int64_t *d) {
    for (int i = 0; i < t->ndim; i++)
        if (kiln__expr_eval(t->dims[i], every_sym, &val, &d[i]) || d[i] < 1) return -1;
    return 0;
}

/* v regrouped as dims nd[nn] (same element count) without moving data:
 * the atoms, outermost first, are dealt out to the new dims, an atom split
 * where a new dim takes only its outer part. */
static int view_reshape(view *v, int nn, const int64_t *nd) {
    int64_t as[KILN_MAX_DIMS * ATOMS], ast[KILN_MAX_DIMS * ATOMS];
    int n = 0, i = 0;
    for (int k = 0; k < v->n; k++)
        for (int a = 0; a < v->na[k]; a++)
            if (v->sz[k][a] != 1) {
                as[n] = v->sz[k][a];
                ast[n++] = v->st[k][a];
            }
    view w = {.n = nn, .off = v->off};
    for (int j = 0; j < nn; j++) {
        int64_t need = nd[j];
        w.na[j] = 0;
        while (need > 1) {
            if (i >= n || w.na[j] == ATOMS) return -1;
            int64_t a = as[i], take, stride;
            if (need % a == 0) { /* the whole atom */
                take = a;
                stride = ast[i++];
            } else if (a % need == 0) { /* its outer part; the inner part stays */
                take = need;
                stride = ast[i] * (a / need);
                as[i] = a / need;
            } else {
                return -1;
            }
            w.sz[j][w.na[j]] = take;
            w.st[j][w.na[j]++] = stride;
            need /= take;
        }
    }
    return i == n ? (*v = w, 0) : -1;
}

/* Layer li applied to view v (dims of its output evaluated at val). */
static int view_apply(const builder *b, int li, int64_t val, view *v) {
    const bl *L = &b->l[li];
    const bt *out = &b->t[L->out[0]];
    int64_t od[KILN_MAX_DIMS];
    if (eval_dims(out, val, od)) return -1;
    kiln_attrs a = kiln__attrset_view(L->attrs);
    const char *op = L->op->name;
    if (!strcmp(op, "Transpose")) {
        const int64_t *perm = NULL;
        int64_t n = kiln_attrs_ints(&a, "perm", &perm);
        view w = *v;
        for (int j = 0; j < v->n; j++) {
            int64_t p = perm && n == v->n ? perm[j] : v->n - 1 - j;
            if (p < 0 || p >= v->n) return -1;
            w.na[j] = v->na[p];
            memcpy(w.sz[j], v->sz[p], sizeof w.sz[j]);
            memcpy(w.st[j], v->st[p], sizeof w.st[j]);
        }
        *v = w;
    } else if (!strcmp(op, "Gather")) {
        int ti = L->nin == 2 ? L->in[1] : -1;
        int64_t axis = kiln_attrs_int(&a, "axis"), idx, size = 1;
        if (axis < 0) axis += v->n;
        if (ti < 0 || b->t[ti].kind != BT_CONST || !b->t[ti].data || b->t[ti].ndim != 0 || axis < 0 ||
            axis >= v->n || kiln__ops_is_float(b->t[ti].dtype))
            return -1;
        for (int k = 0; k < v->na[axis]; k++) size *= v->sz[axis][k];
        idx = kiln__ops_get_i64(b->t[ti].data, b->t[ti].dtype, 0);
        if (idx < 0) idx += size;
        if (idx < 0 || idx >= size) return -1;
        for (int k = v->na[axis] - 1; k >= 0; k--) { /* idx in the atoms' mixed radix */
            v->off += idx % v->sz[axis][k] * v->st[axis][k];
            idx /= v->sz[axis][k];
        }
        for (int k = (int)axis; k + 1 < v->n; k++) {
            v->na[k] = v->na[k + 1];
            memcpy(v->sz[k], v->sz[k + 1], sizeof v->sz[k]);
            memcpy(v->st[k], v->st[k + 1], sizeof v->st[k]);
        }
        v->n--;
    } else if (view_reshape(v, out->ndim, od)) {
        return -1;
    }
    if (v->n != out->ndim) return -1;
    for (int k = 0; k < v->n; k++) {
        int64_t size = 1;
        for (int q = 0; q < v->na[k]; q++) size *= v->sz[k][q];
        if (size != od[k]) return -1;
    }
    return 0;
}

/* Dim k of v as one size and stride: its atoms must be one stride apart. */
static int view_dim(const view *v, int k, int64_t *size, int64_t *stride) {
    *size = 1;
    *stride = 0;
    for (int q = 0; q < v->na[k]; q++) {
        if (q > 0 && v->st[k][q - 1] != v->sz[k][q] * v->st[k][q]) return -1;
        *size *= v->sz[k][q];
        *stride = v->st[k][q];
    }
    return 0;
}

/* Tensor t as a view of its base at symbol value val: *base and v. */
static int view_of(const builder *b, int t, int64_t val, int *base, view *v) {
    int chain[CHAIN_MAX], n = 0;
    while (layout_op(b, b->t[t].producer)) {
        if (n == CHAIN_MAX) return -1;
        chain[n++] = b->t[t].producer;
        t = b->l[chain[n - 1]].in[0];
        if (t < 0) return -1;
    }
    *base = t;
    const bt *bt0 = &b->t[t];
    int64_t d[KILN_MAX_DIMS], s = 1;
    v->n = bt0->ndim;
    v->off = 0;
    if (eval_dims(bt0, val, d)) return -1;
    for (int k = v->n - 1; k >= 0; k--) {
        v->na[k] = 1;
        v->sz[k][0] = d[k];
        v->st[k][0] = s;
        s *= d[k];
    }
    for (int k = n - 1; k >= 0; k--)
        if (view_apply(b, chain[k], val, v)) return -1;
    return 0;
}

/* x (offset or stride) at two valuations as mul * contiguous base stride:
 * out[0] the base axis, out[1] mul. */
static int encode_stride(int r, const int64_t *bsa, const int64_t *bsb, int64_t xa, int64_t xb, int64_t *out) {
    if (xa == 0 && xb == 0) {
        out[0] = r - 1;
        out[1] = 0;
        return 0;
    }
    for (int j = 0; j < r; j++)
        if (xa % bsa[j] == 0 && xb % bsb[j] == 0 && xa / bsa[j] == xb / bsb[j] && xa / bsa[j] > 0) {
            out[0] = j;
            out[1] = xa / bsa[j];
            return 0;
        }
    return -1;
}

int kiln__b_attn_views(const builder *b, const int qkv[3], int base[3], int64_t *vw) {
    static const int64_t vals[2] = {13, 17};
    for (int o = 0; o < 3; o++) {
        view v[2];
        int bs[2];
        for (int e = 0; e < 2; e++)
            if (view_of(b, qkv[o], vals[e], &bs[e], &v[e])) return 0;
        base[o] = bs[0];
        const bt *t = &b->t[base[o]];
        int r = t->ndim;
        if (v[0].n != 4 || t->kind == BT_CONST) return 0;
        int64_t bd[2][KILN_MAX_DIMS], bst[2][KILN_MAX_DIMS];
        for (int e = 0; e < 2; e++) {
            if (eval_dims(t, vals[e], bd[e])) return 0;
            int64_t s = 1;
            for (int k = r - 1; k >= 0; k--) {
                bst[e][k] = s;
                s *= bd[e][k];
            }
        }
        int64_t *w = vw + o * KILN_ATTN_VIEW_INTS;
        if (encode_stride(r, bst[0], bst[1], v[0].off, v[1].off, w)) return 0;
        for (int a = 0; a < 4; a++) {
            int64_t *wa = w + 2 + 3 * a, dim[2], st[2];
            if (view_dim(&v[0], a, &dim[0], &st[0]) || view_dim(&v[1], a, &dim[1], &st[1])) return 0;
            if (dim[0] == dim[1]) {
                wa[0] = -1 - dim[0];
            } else {
                wa[0] = -1;
                for (int j = 0; j < r && wa[0] < 0; j++)
                    if (bd[0][j] == dim[0] && bd[1][j] == dim[1]) wa[0] = j;
                if (wa[0] < 0) return 0;
            }
            if (encode_stride(r, bst[0], bst[1], st[0], st[1], wa + 1)) return 0;
        }
    }
    return 1;
}
