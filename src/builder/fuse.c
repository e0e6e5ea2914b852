/*
 * fuse.c — epilogue fusion: elementwise layers folded into their producer.
 *
 * After type/format/tactic selection, a layer L whose op declares an
 * `epilogue` (plugin.h, "epilogue fusion") is fused into the layer P that
 * produces its one non-constant input when P's op declares
 * accepts_epilogue and nothing else can observe the tensor between them.
 * P then writes L's output and carries L (op, attributes, constant inputs)
 * in its epilogue chain; L is dead.  Walking layers in execution order
 * lets chains grow: Conv -> BatchNormalization fuses, then the Clip after
 * it finds Conv as the producer of its input and fuses too.
 *
 * Nothing here names an op: the decision reads only the two declarations,
 * the chosen types/formats and the graph.  The op's epilogue_check sees
 * the constants (e.g. BatchNormalization's parameters must be per-channel)
 * and may refuse.
 *
 * On the GPU an epilogue is data, not a host callback: a built-in producer
 * P on the CUDA device takes one ai.onnx activation without constant inputs (Relu,
 * Sigmoid, HardSigmoid, HardSwish, LeakyRelu, Gelu, ...: the kiln_cu_act
 * set) and applies it in its own kernels (conv_direct, bias_act; cuBLASLt's
 * RELU/GELU epilogues) -- one kernel and one pass over the tensor fewer.
 * engine/epilogue.c turns the chain into that code at load.  After an
 * activation without parameters (HardSwish, Relu, Sigmoid, ...) scalar
 * Mul/Div/Add/Sub layers fuse too: PP-LCNet's x * s + b after each
 * HardSwish becomes the a y + b of the same code (KILN_CU_ACT_THEN_AFFINE).
 *
 * Residual Add.  An ai.onnx Add of two activations of the same shape and
 * type, one (X) the only use of a Conv's output (or a kiln::mbconv's,
 * mbconv_fuse.c) and the other (R) produced
 * before that Conv, becomes the first entry of the Conv's chain: R is
 * appended to the Conv's inputs (at index max_inputs, absent optional
 * inputs padded with -1) so the memory plan keeps it alive and a run binds
 * it, and the epilogue entry's other input names it.  Of ResNet's
 * Add(conv3, downsample) the later of the two producers takes it.  An
 * activation after the Add then fuses as usual: "Conv + Add + Relu".  CPU
 * (F32): the chain adds R per element (engine/epilogue.c); GPU: the Conv
 * launcher adds it in its kernels (cuBLASLt's C operand, beta 1).  A CPU
 * MatMul takes it too, and there R may also be a vector over the output's
 * last dim (dims 1 but the last): a bias that is not a constant (a network
 * input, or computed), added by column like the linear bias below.  (The
 * GPU MatMul launcher does not read a residual yet: it would be cuBLASLt's
 * C operand with beta 1, as for Conv, for the same-shape case.)
 *
 * Linear bias (both devices).  A MatMul takes the Add of a constant bias
 * over its last dim before the activation (GPU: cuBLASLt's BIAS / GELU_BIAS
 * epilogues; CPU: engine/epilogue.c adds it by column in each finished
 * SGEMM tile, then the activation's epilogue runs on the tile), and the
 * erf form of GELU that exporters write as five layers
 * (x * 0.5 * (1 + erf(x / sqrt 2))) is first rewritten into one Gelu
 * layer, so Linear + bias + GELU runs as one GEMM and at most one pass.
 */
#include "builder.h"
#include "ops/common/ops_cuda.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <string.h>

/* kiln_tensor view of builder tensor t for epilogue_check: constants with
 * data, the activation with data NULL and -1 for non-static dims. */
static void view_of(const builder *b, int t, kiln_tensor *v) {
    const bt *x = &b->t[t];
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        if (!kiln_expr_is_const(x->dims[d], &dims[d])) dims[d] = -1;
    kiln__tensor_view(v, x->kind == BT_CONST ? (void *)x->data : NULL, x->dtype,
                      KILN_FORMAT_LINEAR, b->exec.device, x->ndim, dims);
}

/* The layout of a CPU chain fused into P: LINEAR, or NCHW16C where P's
 * output is NCHW16C and P takes chains there (accepts_epilogue 2: Conv's
 * 16c tactics, ops/nn/conv_pw16c.c, and kiln::mbconv's tactic 5 run the
 * chain on each pixel's 16 channels, a residual in their store).  Its
 * weights and biases stay LINEAR. */
static kiln_format cpu_chain_format(const bl *P) {
    return P->device == KILN_DEVICE_CPU && P->op->quick && P->op->quick->accepts_epilogue == 2 && P->io.n > P->nin &&
                   P->io.format[P->nin] == KILN_FORMAT_NCHW16C
               ? KILN_FORMAT_NCHW16C
               : KILN_FORMAT_LINEAR;
}

/* F32 in layout f, or LINEAR (P's constant inputs). */
static int f32_in(kiln_dtype t, kiln_format fmt, kiln_format f) {
    return t == KILN_DTYPE_F32 && (fmt == KILN_FORMAT_LINEAR || fmt == f);
}

/* Linear bias (both devices): L is an ai.onnx Add of its activation input
 * (slot x) and a constant whose dims are 1 but the last, which is the
 * output's last dim (static); P an ai.onnx MatMul with a B of rank >= 2
 * and no epilogue yet. */
static int linear_bias(const builder *b, const bl *P, const bl *L, int x, const bt *ty) {
    /* (a 1-D B drops the column dim: the output's last dim is then not N) */
    if (!kiln__b_is_onnx(L, "Add") || !kiln__b_is_onnx(P, "MatMul") || P->nepi != 0 || L->nin != 2 || ty->ndim < 1 ||
        b->t[P->in[1]].ndim < 2)
        return 0;
    const bt *c = &b->t[L->in[1 - x]];
    int64_t n, v, last;
    if (c->kind != BT_CONST || !c->data || c->ndim > ty->ndim || c->ndim < 1 ||
        !kiln_expr_is_const(ty->dims[ty->ndim - 1], &last) || !kiln_expr_is_const(c->dims[c->ndim - 1], &n) ||
        n != last)
        return 0;
    for (int d = 0; d + 1 < c->ndim; d++)
        if (!kiln_expr_is_const(c->dims[d], &v) || v != 1) return 0;
    return c->dtype == KILN_DTYPE_F32 || c->dtype == KILN_DTYPE_F16 || c->dtype == KILN_DTYPE_BF16;
}

/* L a Mul/Add/Sub of x and a scalar float constant (either order) or a
 * Div of x by one (nonzero), its activation input in slot x. */
static int scalar_step(const builder *b, const bl *L, int x) {
    if (L->nin != 2 || L->nout != 1 || x < 0 || x > 1 ||
        !(kiln__b_is_onnx(L, "Mul") || kiln__b_is_onnx(L, "Add") || kiln__b_is_onnx(L, "Sub") || (x == 0 && kiln__b_is_onnx(L, "Div"))))
        return 0;
    const bt *c = &b->t[L->in[1 - x]];
    int64_t n = 1, d;
    for (int k = 0; k < c->ndim; k++) n *= kiln_expr_is_const(c->dims[k], &d) ? d : -1;
    if (c->kind != BT_CONST || !c->data || n != 1 || !kiln__ops_is_float(c->dtype)) return 0;
    double v = kiln__ops_get_f64(c->data, c->dtype, 0);
    return isfinite(v) && (v != 0 || !kiln__b_is_onnx(L, "Div"));
}

/* GPU: L a scalar step (scalar_step) after P's chain, which ends in an
 * activation without parameters and such steps: engine/epilogue.c makes
 * them one y * a + b after the activation (KILN_CU_ACT_THEN_AFFINE). */
static int gpu_affine_after_act(const builder *b, const bl *P, const bl *L, int x) {
    int k = P->nepi - 1;
    if (k < 0 || k + 1 >= KILN__MAX_EPI || !scalar_step(b, L, x)) return 0;
    while (k >= 0 && scalar_step(b, &b->l[P->epi[k].layer], P->epi[k].x)) k--;
    if (k < 0) return 0;
    const bl *A = &b->l[P->epi[k].layer];
    kiln_attrs view = kiln__attrset_view(A->attrs);
    float a, c;
    return A->nin == 1 && kiln__cu_act_plain(kiln__cu_act_of(A->op->name, &view, &a, &c));
}

/* GPU layouts a fused chain keeps: all LINEAR or all NHWC. */
static int same_layout(kiln_format a, kiln_format b, kiln_format c, kiln_format d, kiln_format e) {
    return (a == KILN_FORMAT_LINEAR || a == KILN_FORMAT_NHWC) && a == b && a == c && a == d && a == e;
}

/* GPU: both layers on the CUDA device, P a built-in ai.onnx op (the
 * activation code is an internal interface its launcher reads; a plugin's
 * cuda_impl would drop it), the same type and layout through (F32, F16 or
 * BF16; LINEAR, or NHWC on both sides), and L either a MatMul's bias (linear_bias) or a
 * one-input ai.onnx activation with a kiln_cu_act code on a P whose chain
 * is empty, a residual Add or a MatMul's bias. */
static int gpu_fusable(const builder *b, const bl *P, const bl *L, int x, const bt *tx, const bt *ty) {
    if (P->device != KILN_DEVICE_CUDA || L->device != KILN_DEVICE_CUDA || strcmp(P->op->ns, "ai.onnx") != 0 ||
        strcmp(L->op->ns, "ai.onnx") != 0)
        return 0;
    kiln_dtype t = tx->pdtype;
    if (!((t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16) && ty->pdtype == t &&
          same_layout(tx->pfmt, ty->pfmt, L->io.format[x], L->io.format[L->nin], P->io.format[P->nin]) &&
          L->io.dtype[x] == t && L->io.dtype[L->nin] == t && P->io.dtype[P->nin] == t))
        return 0;
    if (linear_bias(b, P, L, x, ty) || gpu_affine_after_act(b, P, L, x)) return 1;
    /* after a residual Add or a bias, one activation more */
    const bl *F = P->nepi == 1 ? &b->l[P->epi[0].layer] : NULL;
    int after_res = F && F->nin == 2 && P->nin > P->op->max_inputs;
    int after_bias = F && kiln__b_is_onnx(F, "Add") && kiln__b_is_onnx(P, "MatMul");
    if (L->nin != 1 || !(P->nepi == 0 || after_res || after_bias))
        return 0;
    kiln_attrs view = kiln__attrset_view(L->attrs);
    float a, c;
    return kiln__cu_act_of(L->op->name, &view, &a, &c) > KILN_CU_ACT_NONE;
}

/* ---- erf GELU: Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5)
 * (torch's export of nn.GELU / F.gelu) becomes one Gelu layer, on either
 * device (all five layers on the Erf's), so that it can fuse as one
 * activation after a MatMul's bias. */

/* Layer li is ai.onnx `name` on device dev with inputs {T, a scalar
 * constant near v} in either order: 1 and the slot of T, else 0. */
static int op_with_const(const builder *b, int li, kiln_device_kind dev, const char *name, int T, double v, int *slot) {
    const bl *L = &b->l[li];
    if (L->dead || L->device != dev || !kiln__b_is_onnx(L, name) || L->nin != 2 || L->nout != 1) return 0;
    for (int s = 0; s < 2; s++) {
        const bt *c = &b->t[L->in[1 - s]];
        if (L->in[s] != T || c->kind != BT_CONST || !c->data) continue;
        int64_t n = 1, d;
        for (int k = 0; k < c->ndim; k++) n *= kiln_expr_is_const(c->dims[k], &d) ? d : -1;
        if (n != 1 || (c->dtype != KILN_DTYPE_F32 && c->dtype != KILN_DTYPE_F16 && c->dtype != KILN_DTYPE_BF16 &&
                       c->dtype != KILN_DTYPE_F64))
            continue;
        double got = kiln__ops_get_f64(c->data, c->dtype, 0);
        if (got > v * (1 - 1e-3) && got < v * (1 + 1e-3)) {
            *slot = s;
            return 1;
        }
    }
    return 0;
}

/* The one live layer that reads tensor T (uses[T] == 1), or -1. */
static int sole_reader(const builder *b, int T, const int *uses) {
    if (uses[T] != 1 || b->t[T].is_output || b->t[T].is_size) return -1;
    for (int li = 0; li < b->nl; li++) {
        const bl *L = &b->l[li];
        if (L->dead) continue;
        for (int p = 0; p < L->nin; p++)
            if (L->in[p] == T) return li;
    }
    return -1;
}

static int same_dims(const bt *a, const bt *c) {
    if (a->ndim != c->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != c->dims[d]) return 0;
    return 1;
}

/* Layer ei an Erf: rewrite its chain into a Gelu layer at ei (0: done or
 * not the pattern). */
static int gelu_erf(builder *b, int ei, int *uses) {
    bl *E = &b->l[ei];
    if (E->dead || !kiln__b_is_onnx(E, "Erf") || E->nin != 1 || E->nout != 1) return 0;
    kiln_device_kind dev = E->device;
    int D = b->t[E->in[0]].producer, s;
    if (D < 0 || uses[E->in[0]] != 1 || b->t[E->in[0]].is_output) return 0;
    int X = b->l[D].in[0];
    if (!(op_with_const(b, D, dev, "Div", X, 1.4142135623730951, &s) && s == 0)) {
        X = b->l[D].in[1];
        if (!op_with_const(b, D, dev, "Mul", X, 0.7071067811865476, &s)) {
            X = b->l[D].in[0];
            if (!op_with_const(b, D, dev, "Mul", X, 0.7071067811865476, &s)) return 0;
        }
    }
    int A = sole_reader(b, E->out[0], uses);
    if (A < 0 || !op_with_const(b, A, dev, "Add", E->out[0], 1.0, &s)) return 0;
    int M = sole_reader(b, b->l[A].out[0], uses);
    if (M < 0 || b->l[M].dead || b->l[M].device != dev || !kiln__b_is_onnx(&b->l[M], "Mul") ||
        b->l[M].nin != 2)
        return 0;
    const bl *m = &b->l[M];
    int Ax = b->l[A].out[0];
    if (!((m->in[0] == X && m->in[1] == Ax) || (m->in[1] == X && m->in[0] == Ax))) return 0;
    int H = sole_reader(b, m->out[0], uses);
    if (H < 0 || !op_with_const(b, H, dev, "Mul", m->out[0], 0.5, &s)) return 0;
    int Y = b->l[H].out[0];
    const int chain[5] = {D, ei, A, M, H};
    kiln_dtype t = b->t[X].pdtype;
    if (uses[X] != 2 || b->t[X].pfmt != KILN_FORMAT_LINEAR || !same_dims(&b->t[X], &b->t[Y]) ||
        (t != KILN_DTYPE_F32 && (dev != KILN_DEVICE_CUDA || (t != KILN_DTYPE_F16 && t != KILN_DTYPE_BF16))))
        return 0;
    for (int k = 0; k < 5; k++) {
        const bl *L = &b->l[chain[k]];
        int o = L->out[0];
        if (L->io.dtype[L->nin] != t || b->t[o].pdtype != t || b->t[o].pfmt != KILN_FORMAT_LINEAR) return 0;
    }
    const kiln__op *gelu = kiln__registry_find("ai.onnx", "Gelu", 20);
    if (!gelu || !gelu->quick) return 0;
    kiln__attrset own;
    if (kiln__attrset_init(&own, gelu) || kiln__b_set_op(b, ei, gelu, &own)) /* approximate = "none" */
        return 0;
    E = &b->l[ei];
    for (int k = 0; k < 5; k++) {
        bl *L = &b->l[chain[k]];
        if (chain[k] != ei) L->dead = 1;
        if (L->out[0] != Y) {
            b->t[L->out[0]].live = 0;
            uses[L->out[0]] = 0;
        }
    }
    E->in[0] = X;
    E->io.dtype[0] = t;
    E->io.format[0] = KILN_FORMAT_LINEAR;
    E->out[0] = Y;
    b->t[Y].producer = ei;
    b->t[Y].alias_in = -1;
    uses[X] = 1;
    if (b->st) b->st->fused += 4;
    kiln__log(KILN_LOG_VERBOSE, "layers '%s' .. '%s' (erf GELU) rewritten into one Gelu layer '%s'",
              b->l[D].name, b->l[H].name, E->name);
    return 1;
}

/* Try to fuse layer li into the producer of its activation input. */
static void try_fuse(builder *b, int li, int *uses) {
    bl *L = &b->l[li];
    const kiln_quick_op *q = L->op->quick;
    /* (the GPU's epilogues are codes, not the op's host callback) */
    if (L->dead || L->is_reformat || !q || (!q->epilogue && L->device != KILN_DEVICE_CUDA) || L->nout < 1 ||
        L->nin > KILN__EPI_MAX_IN || L->io.n != L->nin + L->nout)
        return;
    /* optional extra outputs (BatchNormalization-14's running statistics)
     * only when nothing reads them */
    for (int o = 1; o < L->nout; o++) {
        int T = L->out[o];
        if (T >= 0 && (uses[T] || b->t[T].is_output || b->t[T].is_size)) return;
    }
    /* exactly one non-constant input; the rest constants with data */
    int x = -1;
    for (int p = 0; p < L->nin; p++) {
        int T = L->in[p];
        if (T < 0) continue;
        if (b->t[T].kind == BT_CONST && b->t[T].data) {
            for (int d = 0; d < b->t[T].ndim; d++) {
                int64_t v;
                if (!kiln_expr_is_const(b->t[T].dims[d], &v)) return;
            }
            continue;
        }
        if (x >= 0) return;
        x = p;
    }
    if (x < 0) return;
    int X = L->in[x], Y = L->out[0];
    bt *tx = &b->t[X], *ty = &b->t[Y];
    if (tx->kind != BT_ACT || tx->producer < 0 || tx->is_output || tx->is_size || uses[X] != 1 ||
        tx->alias_in >= 0 || ty->is_size || (ty->alias_in >= 0 && ty->alias_in != X))
        return;
    int pi = tx->producer;
    bl *P = &b->l[pi];
    const kiln_quick_op *pq = P->op->quick;
    if (P->dead || !pq || !pq->accepts_epilogue || pq->aot || P->aot == 1 || P->nout != 1 ||
        P->out[0] != X || P->nepi >= KILN__MAX_EPI || P->io.n != P->nin + P->nout)
        return;
    int gpu = P->device == KILN_DEVICE_CUDA || L->device == KILN_DEVICE_CUDA;
    if (gpu) {
        if (!gpu_fusable(b, P, L, x, tx, ty)) return;
    } else {
        /* F32 LINEAR (or a 16c Conv's NCHW16C) through the fused path */
        const kiln_format f = cpu_chain_format(P);
        for (int p = 0; p < P->io.n; p++)
            if (!(p < P->nin && P->in[p] < 0) && !f32_in(P->io.dtype[p], P->io.format[p], f)) return;
        if (L->io.dtype[x] != KILN_DTYPE_F32 || L->io.format[x] != f || L->io.dtype[L->nin] != KILN_DTYPE_F32 ||
            L->io.format[L->nin] != f || tx->pdtype != KILN_DTYPE_F32 || tx->pfmt != f ||
            ty->pdtype != KILN_DTYPE_F32 || ty->pfmt != f ||
            tx->dtype != KILN_DTYPE_F32 || ty->dtype != KILN_DTYPE_F32)
            return;
    }
    /* same dims (hash-consed expressions: pointer equality) */
    if (tx->ndim != ty->ndim || tx->ndim < 1) return;
    for (int d = 0; d < tx->ndim; d++)
        if (tx->dims[d] != ty->dims[d]) return;
    int64_t channels = 1; /* host callbacks only: the GPU's epilogues do not need it */
    if (!gpu && tx->ndim >= 2 && !kiln_expr_is_const(tx->dims[1], &channels)) return;
    /* CPU: a MatMul's bias is applied by engine/epilogue.c, not by Add's
     * per-channel epilogue (its check would refuse a last-dim constant) */
    if (!gpu && linear_bias(b, P, L, x, ty) && b->t[L->in[1 - x]].dtype == KILN_DTYPE_F32) goto fuse;
    if (gpu && L->nin == 2) { /* a bias (linear_bias): in the layer's type (folded cast); a scalar as it is */
        int c = L->in[1 - x];
        if (b->t[c].dtype != tx->pdtype && !scalar_step(b, L, x)) {
            int o = -1;
            char *name = kiln__strfmt("%s:%s", b->t[c].name, kiln_dtype_name(tx->pdtype));
            if (!name) return;
            int r = kiln__b_add_reformat(b, c, name, tx->pdtype, KILN_FORMAT_LINEAR, &o);
            kiln__free(name);
            if (r < 0) return;
            if (b->t[o].kind != BT_CONST) { /* not folded (no_fold): leave the Add alone */
                b->l[r].dead = 1;
                return;
            }
            L = &b->l[li]; /* the arrays may have moved */
            L->in[1 - x] = o;
        }
        goto fuse;
    }
    /* the op's own check on its constants */
    kiln_tensor in[KILN__EPI_MAX_IN];
    for (int p = 0; p < L->nin; p++) {
        if (L->in[p] < 0) {
            memset(&in[p], 0, sizeof in[p]);
            continue;
        }
        view_of(b, L->in[p], &in[p]);
    }
    kiln_attrs view = kiln__attrset_view(L->attrs);
    kiln_epilogue_args a = {.attrs = &view, .in = in, .nin = L->nin, .x = x, .channels = channels};
    if (q->epilogue_check && q->epilogue_check(&a) != 0) return;
fuse:
    L = &b->l[li];
    P = &b->l[pi];
    tx = &b->t[X];
    ty = &b->t[Y];
    P->epi[P->nepi].layer = li;
    P->epi[P->nepi].x = x;
    P->nepi++;
    P->out[0] = Y;
    ty->producer = pi;
    ty->alias_in = -1;
    tx->live = 0;
    uses[X] = 0;
    L->dead = 1;
    if (b->st) b->st->fused++;
    kiln__log(KILN_LOG_VERBOSE, "layer '%s' (%s::%s v%d) fused into '%s' (%s::%s v%d) as an epilogue",
              L->name, L->op->ns, L->op->name, L->op->version, P->name, P->op->ns, P->op->name,
              P->op->version);
}

/* R (tr) a vector over y's last dim: every dim 1 but the last, which is
 * y's (hash-consed: pointer equality). */
static int last_dim_vector(const bt *tr, const bt *ty) {
    if (tr->ndim < 1 || tr->ndim > ty->ndim || tr->dims[tr->ndim - 1] != ty->dims[ty->ndim - 1]) return 0;
    for (int d = 0; d + 1 < tr->ndim; d++) {
        int64_t v;
        if (!kiln_expr_is_const(tr->dims[d], &v) || v != 1) return 0;
    }
    return 1;
}

/* Layer li, an ai.onnx Add of two activations: fuse it into the Conv that
 * produces one of them as a residual epilogue (see the top). */
static void try_fuse_residual(builder *b, int li, int *uses) {
    bl *L = &b->l[li];
    if (L->dead || L->is_reformat || !kiln__b_is_onnx(L, "Add") || L->nin != 2 || L->nout != 1 || L->io.n != 3) return;
    int Y = L->out[0];
    bt *ty = &b->t[Y];
    if (ty->is_size || ty->alias_in >= 0) return;
    for (int x = 1; x >= 0; x--) { /* the later producer takes it */
        int X = L->in[x], R = L->in[1 - x];
        if (X < 0 || R < 0 || X == R) continue;
        bt *tx = &b->t[X], *tr = &b->t[R];
        if (tx->kind != BT_ACT || tx->producer < 0 || tx->is_output || tx->is_size || uses[X] != 1 ||
            tx->alias_in >= 0 || tr->kind == BT_CONST || tr->is_size || (tr->kind == BT_ACT && tr->producer >= tx->producer))
            continue;
        int pi = tx->producer;
        bl *P = &b->l[pi];
        const int max_in = P->op->max_inputs;
        const int cpu_matmul = kiln__b_is_onnx(P, "MatMul") && P->device == KILN_DEVICE_CPU;
        if (P->dead ||
            !(kiln__b_is_onnx(P, "Conv") || cpu_matmul || (!strcmp(P->op->ns, "kiln") && !strcmp(P->op->name, "mbconv"))) ||
            !P->op->quick || P->aot == 1 || P->nout != 1 || P->out[0] != X ||
            P->nepi != 0 || P->nin > max_in || P->io.n != P->nin + 1 || max_in + 2 > KILN_MAX_IO ||
            P->device != L->device)
            continue;
        /* one type through, LINEAR (or NHWC throughout on the GPU); the CPU
         * chain is F32 */
        kiln_dtype t = tx->pdtype;
        const kiln_format f = tx->pfmt;
        const int cpu16c = P->device == KILN_DEVICE_CPU && f == KILN_FORMAT_NCHW16C && f == cpu_chain_format(P);
        int ok = (f == cpu_chain_format(P) || P->device == KILN_DEVICE_CUDA) &&
                 (same_layout(f, tr->pfmt, ty->pfmt, L->io.format[0], L->io.format[1]) ||
                  (cpu16c && tr->pfmt == f && ty->pfmt == f && L->io.format[0] == f && L->io.format[1] == f)) &&
                 L->io.format[2] == f &&
                 P->io.format[P->nin] == f && tr->pdtype == t && ty->pdtype == t && L->io.dtype[0] == t && L->io.dtype[1] == t &&
                 L->io.dtype[2] == t && P->io.dtype[P->nin] == t && tr->dtype == tx->dtype && ty->dtype == tx->dtype &&
                 (P->device == KILN_DEVICE_CUDA ? t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16
                                                : t == KILN_DTYPE_F32);
        for (int p = 0; p < P->io.n && ok; p++) /* present positions (a CUDA op's own layouts) */
            ok = (p < P->nin && P->in[p] < 0) || P->device == KILN_DEVICE_CUDA || f32_in(P->io.dtype[p], P->io.format[p], f);
        /* the same dims (hash-consed: pointer equality), or on a CPU MatMul
         * a vector over the last dim */
        if (!ok || tx->ndim != ty->ndim || tx->ndim < 1) continue;
        for (int d = 0; d < tx->ndim && ok; d++) ok = tx->dims[d] == ty->dims[d];
        int same = tr->ndim == ty->ndim;
        for (int d = 0; d < tr->ndim && same; d++) same = tr->dims[d] == ty->dims[d];
        if (!ok || !(same || (cpu_matmul && last_dim_vector(tr, ty)))) continue;
        int *in = kiln__malloc((size_t)(max_in + 1) * sizeof *in);
        if (!in) return; /* not fused: still correct */
        kiln_io_format io = P->io;
        for (int p = 0; p < max_in; p++) {
            in[p] = p < P->nin ? P->in[p] : -1;
            io.dtype[p] = p < P->nin ? P->io.dtype[p] : KILN_DTYPE_UNDEFINED;
            io.format[p] = p < P->nin ? P->io.format[p] : KILN_FORMAT_LINEAR;
        }
        in[max_in] = R;
        io.dtype[max_in] = t;
        io.format[max_in] = f;
        io.dtype[max_in + 1] = P->io.dtype[P->nin];
        io.format[max_in + 1] = P->io.format[P->nin];
        io.n = max_in + 2;
        kiln__free(P->in);
        P->in = in;
        P->nin = max_in + 1;
        P->io = io;
        P->epi[0].layer = li;
        P->epi[0].x = x;
        P->nepi = 1;
        P->out[0] = Y;
        ty->producer = pi;
        tx->live = 0;
        uses[X] = 0;
        L->dead = 1;
        if (b->st) b->st->fused++;
        kiln__log(KILN_LOG_VERBOSE, "layer '%s' (residual Add) fused into '%s' (%s::%s v%d), reading '%s'", L->name,
                  P->name, P->op->ns, P->op->name, P->op->version, tr->name);
        return;
    }
}

void kiln__b_count_uses(const builder *b, int *uses) {
    memset(uses, 0, ((size_t)b->nt + 1) * sizeof *uses);
    for (int li = 0; li < b->nl; li++)
        for (int p = 0; p < b->l[li].nin && !b->l[li].dead; p++)
            if (b->l[li].in[p] >= 0) uses[b->l[li].in[p]]++;
    for (int s = 0; s < b->nsym; s++) /* a size symbol bound to a tensor reads it too */
        if (b->sym[s].t >= 0 && b->sym[s].t < b->nt) uses[b->sym[s].t] += 2;
}

int kiln__b_fuse(builder *b) {
    if (b->cfg->flags & KILN_BUILD_NO_FUSION) return 0;
    int *uses = kiln__malloc(((size_t)b->nt + 1) * sizeof *uses);
    if (!uses) return kiln__err(KILN_ENOMEM, "build: out of memory");
    kiln__b_count_uses(b, uses);
    for (int li = 0; li < b->nl; li++) gelu_erf(b, li, uses);
    for (int li = 0; li < b->nl; li++) {
        try_fuse_residual(b, li, uses);
        try_fuse(b, li, uses);
    }
    kiln__free(uses);
    return 0;
}
