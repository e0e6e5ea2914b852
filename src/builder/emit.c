/*
 * emit.c — from the selected IR to a runnable engine.
 *
 * finalize: puts kiln::reformat layers where a producer's chosen type/format
 * differs from a consumer's (and in front of network outputs, which keep
 * their logical type, LINEAR), and copies in front of in-place layers whose
 * input is still needed afterwards (or is a network input, a constant or a
 * network output).
 *
 * emit: the flat expression program (child nodes first; symbols bound to
 * input dims, size tensors or input values), tensors, layers with their
 * serialized attributes, weights (64-byte aligned), the memory plan at opt,
 * AOT kernels and the list of plugins the engine needs.
 */
#include "builder.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ finalize */

typedef struct variant {
    int base;
    kiln_dtype dt;
    kiln_format fmt;
    kiln_device_kind loc;
    int t;
} variant;

typedef struct ilist {
    int *v;
    int n, cap;
} ilist;

static int ipush(ilist *l, int x) {
    int *n = kiln__grow(l->v, &l->cap, l->n + 1, sizeof *l->v);
    if (!n) return KILN_ENOMEM;
    l->v = n;
    l->v[l->n++] = x;
    return 0;
}

/* The variants made so far: tensor `base` in another type, layout or
 * memory space. */
typedef struct vset {
    variant *v;
    int n, cap;
} vset;

static int find_variant(const vset *s, int base, kiln_dtype dt, kiln_format fmt, kiln_device_kind loc) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i].base == base && s->v[i].dt == dt && s->v[i].fmt == fmt && s->v[i].loc == loc) return s->v[i].t;
    return -1;
}

static int add_variant(vset *s, int base, const bt *t, int ti) {
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 16;
        variant *nv = kiln__realloc(s->v, (size_t)nc * sizeof *nv);
        if (!nv) return kiln__err(KILN_ENOMEM, "build: out of memory");
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = (variant){base, t->pdtype, t->pfmt, t->loc, ti};
    return 0;
}

/* Clone tensor t as a new activation named `name` (dims, dtype, values). */
static int clone_tensor(builder *b, int t, const char *name) {
    int n = kiln__b_new_tensor(b, name, BT_ACT);
    if (n < 0) return n;
    bt *src = &b->t[t], *dst = &b->t[n];
    dst->dtype = src->dtype;
    dst->ndim = src->ndim;
    memcpy(dst->dims, src->dims, sizeof dst->dims);
    dst->nvalues = src->nvalues;
    memcpy(dst->values, src->values, sizeof dst->values);
    dst->pdtype = src->pdtype;
    dst->pfmt = src->pfmt;
    dst->numel_bound = src->numel_bound;
    dst->live = 1;
    return n;
}

/* A copy of tensor `from` in its own memory space (a device copy layer
 * when that is the GPU's). */
static int copy_layer(builder *b, int from, const char *name, int into, int *out_t) {
    int o = into;
    b->no_fold = 1;
    int li = kiln__b_add_reformat(b, from, name, b->t[from].pdtype, b->t[from].pfmt, &o);
    b->no_fold = 0;
    if (li < 0) return li;
    b->t[o].pdtype = b->t[from].pdtype;
    b->t[o].pfmt = b->t[from].pfmt;
    b->t[o].loc = b->t[from].loc;
    b->l[li].device = b->t[from].loc;
    b->t[o].live = 1;
    *out_t = o;
    return li;
}

/* One step of a conversion chain: tensor `from` as (dt, fmt, loc), written
 * into tensor `into` (>= 0) or a new tensor named `name`.  A change of
 * memory space is a kiln::reformat layer on the CUDA device (a copy:
 * cuMemcpyAsync) -- for a constant no layer at all but a twin constant
 * there, uploaded with the weights; a change of type/layout is a reformat
 * on the device holding both sides (folded at build for constants).
 * *layer gets the new layer (-1: none); *out_t the result. */
static int convert_step(builder *b, int from, kiln_dtype dt, kiln_format fmt, kiln_device_kind loc, const char *name,
                        int into, int *layer, int *out_t) {
    *layer = -1;
    const bt *f = &b->t[from];
    if (f->kind == BT_CONST && into < 0 && f->pdtype == dt && f->pfmt == fmt && f->loc != loc) {
        int n = kiln__b_new_tensor(b, name, BT_CONST);
        if (n < 0) return n;
        bt *src = &b->t[from], *dst = &b->t[n];
        char *nm = dst->name;
        *dst = *src;
        dst->name = nm;
        dst->data_owned = 0; /* shares the source's bytes */
        dst->is_output = 0;
        dst->producer = -1;
        dst->input_index = -1;
        dst->eidx = -1;
        dst->loc = loc;
        dst->live = 1;
        *out_t = n;
        return 0;
    }
    int o = into;
    int li = kiln__b_add_reformat(b, from, name, dt, fmt, &o);
    if (li < 0) return li;
    b->t[o].loc = loc;
    b->t[o].live = 1;
    b->l[li].device = loc == KILN_DEVICE_CUDA || b->t[from].loc == KILN_DEVICE_CUDA ? KILN_DEVICE_CUDA
                                                                                    : KILN_DEVICE_CPU;
    if (b->st && !b->l[li].dead) b->st->reformats++;
    *layer = b->l[li].dead ? -1 : li;
    *out_t = o;
    return 0;
}

/* F32/F16/BF16, LINEAR or NHWC: what the GPU's reformat converts
 * (reformat.cu; NHWC only on 4-D tensors, which is where a CUDA layer
 * takes it). */
static int gpu_castable(kiln_dtype t, kiln_format f) {
    return (f == KILN_FORMAT_LINEAR || f == KILN_FORMAT_NHWC) &&
           (t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16);
}

/* Tensor `base` (currently as tensor `from`) converted to (dt, fmt, loc),
 * the last step writing `into` when >= 0.  A float cast across a
 * host<->device move runs on the GPU (move first, or cast first), and so
 * does a LINEAR <-> NHWC change of a 4-D float tensor: it is ~1000x faster
 * there than on one host thread, and network I/O bound to device pointers
 * is never read by the host.  Other type and layout changes with a host
 * side run on the host.  Each result is remembered as a
 * variant of `base`; new layers are appended to ord. */
static int convert(builder *b, vset *vs, ilist *ord, int base, int from, kiln_dtype dt, kiln_format fmt,
                   kiln_device_kind loc, int into, int *out_t) {
    int cur = from, rc = 0;
    for (int step = 0; step < 3 && !rc; step++) {
        const bt *c = &b->t[cur];
        if (c->pdtype == dt && c->pfmt == fmt && c->loc == loc) break;
        kiln_dtype sdt = dt;
        kiln_format sfmt = fmt;
        kiln_device_kind sloc = loc;
        int same = c->pdtype == dt && c->pfmt == fmt;
        if (!same && !(c->loc == KILN_DEVICE_CUDA && loc == KILN_DEVICE_CUDA)) {
            int on_gpu = c->loc != loc && gpu_castable(c->pdtype, c->pfmt) && gpu_castable(dt, fmt) &&
                         (c->pfmt == fmt || c->ndim == 4);
            if (on_gpu && c->loc == KILN_DEVICE_CPU) sdt = c->pdtype, sfmt = c->pfmt; /* to the GPU first */
            else if (on_gpu) sloc = KILN_DEVICE_CUDA;                                 /* cast, then move */
            else if (c->loc == KILN_DEVICE_CUDA) sdt = c->pdtype, sfmt = c->pfmt, sloc = KILN_DEVICE_CPU; /* to host first */
            else sloc = KILN_DEVICE_CPU;                                    /* convert on the host */
        }
        int last = sdt == dt && sfmt == fmt && sloc == loc;
        int V = find_variant(vs, base, sdt, sfmt, sloc);
        if (V >= 0 && !(last && into >= 0)) {
            cur = V;
            continue;
        }
        char *name = kiln__strfmt("%s:%s:%s%s", b->t[base].name, kiln__b_dtype_upper(sdt), kiln_format_name(sfmt),
                                  sloc == KILN_DEVICE_CUDA ? ":cuda" : "");
        if (!name) return kiln__err(KILN_ENOMEM, "build: out of memory");
        int li = -1;
        rc = convert_step(b, cur, sdt, sfmt, sloc, last && into >= 0 ? b->t[into].name : name, last ? into : -1, &li,
                          &V);
        kiln__free(name);
        if (!rc && li >= 0) rc = ipush(ord, li);
        if (!rc) rc = add_variant(vs, base, &b->t[V], V);
        cur = V;
    }
    *out_t = cur;
    return rc;
}

/* Layer li (at k of the order; lastuse: each tensor's last reader there)
 * writes output 0 over its fused residual when its op says its tactic may
 * (kiln_quick_op.residual_inplace_tactics) and nothing else can see it:
 * the chain is the residual Add alone or then Relu (what the tactic's
 * store applies), the residual an activation read by this layer only, in
 * one input slot, and by no later layer, of output 0's type, layout,
 * memory and dims (hash-consed: pointer equality), neither a network
 * output.  Sets output 0's alias_in: the loop below then needs no copy. */
static void residual_inplace(builder *b, int li, int k, const int *lastuse) {
    const bl *L = &b->l[li];
    const kiln_quick_op *q = L->op->quick;
    if (!q || L->device != KILN_DEVICE_CPU || L->aot == 1 || L->tactic < 0 || L->tactic >= 64 ||
        !(q->residual_inplace_tactics >> L->tactic & 1) || L->nout < 1 || L->nepi < 1 || L->nepi > 2 ||
        L->nin != L->op->max_inputs + 1 || !kiln__b_is_onnx(&b->l[L->epi[0].layer], "Add") ||
        (L->nepi == 2 && !kiln__b_is_onnx(&b->l[L->epi[1].layer], "Relu")))
        return;
    const int R = L->in[L->op->max_inputs], O = L->out[0];
    if (R < 0 || O < 0) return;
    const bt *r = &b->t[R], *o = &b->t[O];
    int uses = 0;
    for (int p = 0; p < L->nin; p++) uses += L->in[p] == R;
    if (uses != 1 || r->kind != BT_ACT || r->is_output || r->is_size || lastuse[R] != k || o->is_output ||
        o->is_size || o->alias_in >= 0 || r->pdtype != o->pdtype || r->pfmt != o->pfmt || r->loc != o->loc ||
        r->ndim != o->ndim)
        return;
    for (int d = 0; d < r->ndim; d++)
        if (r->dims[d] != o->dims[d]) return;
    b->t[O].alias_in = R;
    kiln__log(KILN_LOG_VERBOSE, "layer '%s' (tactic %d) writes '%s' over its residual '%s' (in place)", L->name,
              L->tactic, o->name, r->name);
}

int kiln__b_finalize(builder *b, int **order_out, int *norder) {
    ilist ord = {0}, fin = {0};
    vset vs = {0};
    int rc = 0;
    int *lastuse = NULL;
    char *name = NULL; /* names made from tensor/layer names (no length limit) */
    int n0 = b->nl;

    /* Network outputs without a producing layer: constants get a copy layer. */
    for (int i = 0; i < b->nt && !rc; i++) {
        bt *t = &b->t[i];
        if (!t->is_output) continue;
        if (t->kind == BT_INPUT) {
            rc = kiln__err(KILN_EUNSUPPORTED, "network output '%s' is also a network input; add an identity layer "
                           "(e.g. ai.onnx::Identity) to produce it", t->name);
            break;
        }
        if (t->kind != BT_CONST) continue;
        char *old = t->name;
        t->name = kiln__strfmt("%s:const", old);
        if (!t->name) {
            t->name = old;
            rc = kiln__err(KILN_ENOMEM, "build: out of memory");
            break;
        }
        t->is_output = 0;
        int o = -1;
        int li = copy_layer(b, i, old, -1, &o);
        if (li >= 0) {
            kiln__free(b->t[o].name);
            b->t[o].name = old;
            b->t[o].is_output = 1;
            rc = ipush(&ord, li);
        } else {
            kiln__free(old);
            rc = li;
        }
    }

    for (int li = 0; li < n0 && !rc; li++) {
        if (b->l[li].dead) continue;
        for (int p = 0; p < b->l[li].nin && !rc; p++) {
            int T = b->l[li].in[p];
            if (T < 0) continue;
            kiln_dtype dt = b->l[li].io.dtype[p];
            kiln_format fmt = b->l[li].io.format[p];
            kiln_device_kind loc = kiln__b_pos_loc(&b->l[li], p);
            if (b->t[T].pdtype == dt && b->t[T].pfmt == fmt && b->t[T].loc == loc) continue;
            int V = find_variant(&vs, T, dt, fmt, loc);
            if (V < 0 && (rc = convert(b, &vs, &ord, T, T, dt, fmt, loc, -1, &V))) break;
            bl *L = &b->l[li];
            for (int o = 0; o < L->nout; o++)
                if (b->t[L->out[o]].alias_in == T) b->t[L->out[o]].alias_in = V;
            L->in[p] = V;
            /* A residual Add fused first in L's chain (fuse.c) names the
             * input at max_inputs; it must name the copy L reads too
             * (engine/epilogue.c residual_of compares the two). */
            if (p == L->op->max_inputs && L->nepi > 0) {
                bl *F = &b->l[L->epi[0].layer];
                int r = 1 - L->epi[0].x;
                if (F->nin == 2 && r >= 0 && r <= 1 && F->in[r] == T) F->in[r] = V;
            }
        }
        if (rc) break;
        rc = ipush(&ord, li);
        /* Outputs in a non-logical type/format or in device memory: the
         * layer writes a variant, reformats/copies write the network output
         * (logical type, LINEAR, host). */
        for (int o = 0; o < b->l[li].nout && !rc; o++) {
            int T = b->l[li].out[o];
            bt *t = &b->t[T];
            if (!t->is_output || (t->pdtype == t->dtype && t->pfmt == KILN_FORMAT_LINEAR && t->loc == KILN_DEVICE_CPU))
                continue;
            kiln__free(name);
            name = kiln__strfmt("%s:%s:%s%s", t->name, kiln__b_dtype_upper(t->pdtype), kiln_format_name(t->pfmt),
                                t->loc == KILN_DEVICE_CUDA ? ":cuda" : "");
            if (!name) { rc = kiln__err(KILN_ENOMEM, "build: out of memory"); break; }
            int V = clone_tensor(b, T, name);
            if (V < 0) { rc = V; break; }
            t = &b->t[T]; /* clone_tensor may have moved b->t */
            b->t[V].loc = b->t[T].loc;
            b->t[V].producer = li;
            b->t[V].alias_in = b->t[T].alias_in;
            b->t[T].alias_in = -1;
            b->l[li].out[o] = V;
            if (b->t[T].is_size) { /* the layer writes the size: its symbol binds to what it writes
                                    * (b->t, not t: clone_tensor may have moved the array) */
                bsym *s = (bsym *)kiln__b_find_sym(b, b->t[T].size_sym);
                if (s) s->t = V;
                b->t[V].is_size = 1;
                b->t[V].size_sym = b->t[T].size_sym;
                b->t[T].is_size = 0;
            }
            if ((rc = add_variant(&vs, T, &b->t[V], V))) break;
            int done = -1;
            rc = convert(b, &vs, &ord, T, V, b->t[T].dtype, KILN_FORMAT_LINEAR, KILN_DEVICE_CPU, T, &done);
            b->t[T].pdtype = b->t[T].dtype;
            b->t[T].pfmt = KILN_FORMAT_LINEAR;
            b->t[T].loc = KILN_DEVICE_CPU;
        }
    }
    if (rc) goto out;

    /* In-place layers: make the write safe. */
    lastuse = kiln__malloc((size_t)(b->nt + 1) * sizeof *lastuse);
    if (!lastuse) { rc = kiln__err(KILN_ENOMEM, "build: out of memory"); goto out; }
    for (int i = 0; i < b->nt; i++) lastuse[i] = -1;
    for (int k = 0; k < ord.n; k++) {
        const bl *L = &b->l[ord.v[k]];
        for (int p = 0; p < L->nin; p++)
            if (L->in[p] >= 0) lastuse[L->in[p]] = k;
    }
    int ntens_before = b->nt;
    for (int k = 0; k < ord.n && !rc; k++) {
        int li = ord.v[k];
        int post[KILN_MAX_IO], npost = 0;
        residual_inplace(b, li, k, lastuse);
        for (int o = 0; o < b->l[li].nout && !rc; o++) {
            int O = b->l[li].out[o];
            int S = b->t[O].alias_in;
            if (S < 0) continue;
            const bl *L = &b->l[li];
            int uses = 0;
            for (int p = 0; p < L->nin; p++) uses += L->in[p] == S;
            const bt *s = &b->t[S];
            int need = s->kind != BT_ACT || s->is_output || uses > 1 ||
                       (S < ntens_before && lastuse[S] > k);
            /* Another output of this layer aliasing the same input. */
            for (int o2 = 0; o2 < o; o2++)
                if (b->t[L->out[o2]].alias_in == S) need = 1;
            if (need) {
                int C = -1;
                kiln__free(name);
                name = kiln__strfmt("%s:copy:%s", s->name, L->name);
                if (!name) { rc = kiln__err(KILN_ENOMEM, "build: out of memory"); break; }
                int rli = copy_layer(b, S, name, -1, &C);
                if (rli < 0) { rc = rli; break; }
                rc = ipush(&fin, rli);
                L = &b->l[li];
                for (int p = 0; p < L->nin; p++)
                    if (L->in[p] == S) { L->in[p] = C; break; }
                b->t[O].alias_in = C;
            }
            if (b->t[O].is_output) {
                /* Outputs live in user memory: write a private buffer, then copy out. */
                kiln__free(name);
                name = kiln__strfmt("%s:inplace", b->t[O].name);
                if (!name) { rc = kiln__err(KILN_ENOMEM, "build: out of memory"); break; }
                int P = clone_tensor(b, O, name);
                if (P < 0) { rc = P; break; }
                b->t[P].producer = li;
                b->t[P].alias_in = b->t[O].alias_in;
                b->t[O].alias_in = -1;
                b->l[li].out[o] = P;
                post[npost++] = P;
                post[npost++] = O;
            }
        }
        if (rc) break;
        rc = ipush(&fin, li);
        for (int q = 0; q < npost && !rc; q += 2) {
            int O = post[q + 1];
            int rli = copy_layer(b, post[q], b->t[O].name, O, &O);
            if (rli < 0) { rc = rli; break; }
            rc = ipush(&fin, rli);
        }
    }
out:
    kiln__free(name);
    kiln__free(lastuse);
    kiln__free(vs.v);
    kiln__free(ord.v);
    if (rc) {
        kiln__free(fin.v);
        return rc;
    }
    *order_out = fin.v;
    *norder = fin.n;
    return 0;
}

/* ------------------------------------------------------------ emit */

typedef struct emitter {
    builder *b;
    kiln_engine *e;
    int32_t *map; /* expr id -> node index */
    uint32_t nmap;
    int capnodes;
} emitter;

/* An input dim the network named (ONNX dim_param, not the default
 * "<input>.<d>"): the engine keeps the name for inspect. */
static int add_dim_name(kiln_engine *e, int32_t node, const char *name, const char *input, int d) {
    char dflt[KILN__MAX_NAME + 24];
    snprintf(dflt, sizeof dflt, "%s.%d", input, d);
    if (!name || !*name || !strcmp(name, dflt)) return 0;
    struct kiln__edimname *nd = kiln__realloc(e->dimnames, (size_t)(e->ndimnames + 1) * sizeof *nd);
    if (!nd) return kiln__err(KILN_ENOMEM, "build: out of memory");
    e->dimnames = nd;
    nd[e->ndimnames].node = node;
    nd[e->ndimnames].name = kiln__strdup(name);
    if (!nd[e->ndimnames].name) return kiln__err(KILN_ENOMEM, "build: out of memory");
    e->ndimnames++;
    return 0;
}

static int32_t node_of(emitter *E, const kiln_expr *x) {
    if (!x) return -1;
    if (x->id >= E->nmap) {
        uint32_t nn = E->nmap ? E->nmap : 256;
        while (nn <= x->id) nn *= 2;
        int32_t *m = kiln__realloc(E->map, nn * sizeof *m);
        if (!m) return kiln__err(KILN_ENOMEM, "build: out of memory");
        for (uint32_t i = E->nmap; i < nn; i++) m[i] = -1;
        E->map = m;
        E->nmap = nn;
    }
    if (E->map[x->id] >= 0) return E->map[x->id];
    kiln__enode n;
    memset(&n, 0, sizeof n);
    n.op = (uint8_t)x->op;
    n.a = n.b = n.c = -1;
    if (x->op == KILN_EXPR_CONST) {
        n.v = x->v;
    } else if (x->op == KILN_EXPR_SYM) {
        const bsym *s = kiln__b_find_sym(E->b, x);
        if (!s) return kiln__err(KILN_EINTERNAL, "build: symbol '%s' has no binding", x->name);
        const bt *t = &E->b->t[s->t];
        if (t->eidx < 0)
            return kiln__err(KILN_EINTERNAL, "build: symbol '%s' refers to tensor '%s', which is not in the engine",
                             x->name, t->name);
        /* A size symbol's upper bound comes first: the runtime evaluates
         * bounds in node order, and a bound may use other size symbols. */
        if (s->kind == BS_SIZE && s->upper) {
            int32_t u = node_of(E, s->upper);
            if (u < 0) return u;
        }
        n.symkind = s->kind == BS_INPUT_DIM ? KILN__SYM_INPUT_DIM : s->kind == BS_SIZE ? KILN__SYM_SIZE : KILN__SYM_VALUE;
        n.a = t->eidx;
        n.b = s->kind == BS_SIZE ? 0 : s->d;
    } else {
        n.a = node_of(E, x->a);
        if (n.a < 0) return n.a;
        if (x->b) {
            n.b = node_of(E, x->b);
            if (n.b < 0) return n.b;
        }
        if (x->c) {
            n.c = node_of(E, x->c);
            if (n.c < 0) return n.c;
        }
    }
    kiln_engine *e = E->e;
    kiln__enode *nn = kiln__grow(e->nodes, &E->capnodes, e->nnodes + 1, sizeof *e->nodes);
    if (!nn) return KILN_ENOMEM;
    e->nodes = nn;
    e->nodes[e->nnodes] = n;
    E->map[x->id] = e->nnodes;
    if (n.op == KILN_EXPR_SYM && n.symkind == KILN__SYM_INPUT_DIM) {
        int rc = add_dim_name(e, e->nnodes, x->name, E->b->t[kiln__b_find_sym(E->b, x)->t].name, n.b);
        if (rc) return rc;
    }
    return e->nnodes++;
}

static int32_t aot_node_cb(void *ud, const kiln_expr *x) { return node_of(ud, x); }

static int read_file(const char *path, uint8_t **data, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return kiln__err(KILN_EIO, "cannot open plugin library '%s' to embed it", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = n > 0 ? kiln__malloc((size_t)n) : NULL;
    if (n <= 0 || !buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        kiln__free(buf);
        return kiln__err(KILN_EIO, "cannot read plugin library '%s' to embed it", path);
    }
    fclose(f);
    *data = buf;
    *size = (uint64_t)n;
    return 0;
}

static int add_plugin_ref(builder *b, kiln_engine *e, const kiln__op *op) {
    if (op->builtin) return 0;
    for (int i = 0; i < e->nplugins; i++)
        if (!strcmp(e->plugins[i].ns, op->ns) && !strcmp(e->plugins[i].name, op->name) &&
            e->plugins[i].version == op->version)
            return 0;
    kiln__plugin_ref *n = kiln__realloc(e->plugins, (size_t)(e->nplugins + 1) * sizeof *n);
    if (!n) return kiln__err(KILN_ENOMEM, "build: out of memory");
    e->plugins = n;
    kiln__plugin_ref *r = &e->plugins[e->nplugins++];
    memset(r, 0, sizeof *r);
    r->ns = kiln__strdup(op->ns);
    r->name = kiln__strdup(op->name);
    r->version = op->version;
    r->library = kiln__strdup(op->library ? op->library : "");
    if (!r->ns || !r->name || !r->library) return kiln__err(KILN_ENOMEM, "build: out of memory");
    if ((b->cfg->flags & KILN_BUILD_EMBED_PLUGINS) && op->library && op->library[0]) {
        /* One copy per library. */
        for (int i = 0; i < e->nplugins - 1; i++)
            if (e->plugins[i].so && !strcmp(e->plugins[i].library, op->library)) return 0;
        return read_file(op->library, &r->so, &r->so_size);
    }
    return 0;
}

static int use_aot(builder *b, const bl *L, int *aot) {
    const kiln_quick_op *q = L->op->quick;
    const int cuda = L->device == KILN_DEVICE_CUDA; /* the implementations of the layer's device */
    int has_aot = q && (cuda ? q->cuda_aot != NULL : q->aot != NULL);
    int has_jit = !q || (cuda ? q->cuda_impl != NULL : q->impl != NULL);
    *aot = 0;
    if (L->aot == 1) {
        if (!has_aot)
            return kiln__err(KILN_EUNSUPPORTED, "layer '%s' (%s::%s v%d): AOT requested but the op has no aot function",
                             L->name, L->op->ns, L->op->name, L->op->version);
        *aot = 1;
    } else if (L->aot == 0) {
        if (!has_jit)
            return kiln__err(KILN_EUNSUPPORTED, "layer '%s' (%s::%s v%d): JIT requested but the op has no impl",
                             L->name, L->op->ns, L->op->name, L->op->version);
    } else if (has_aot && !has_jit) {
        *aot = 1;
    } else if (has_aot) {
        /* Both implementations, no per-layer choice: select.c timed the
         * AOT kernel against the JIT tactics and set L->aot, unless the
         * build forces one or does no timing (then the JIT impl). */
        unsigned f = b->cfg->flags & (KILN_BUILD_PREFER_AOT | KILN_BUILD_PREFER_JIT);
        *aot = f == KILN_BUILD_PREFER_AOT;
    }
    return 0;
}

int kiln__b_aot_kernel(builder *b, int li, kiln_aot_kernel *k) {
    const bl *L = &b->l[li];
    kiln_desc din[KILN_MAX_IO], dout[KILN_MAX_IO];
    for (int i = 0; i < L->nin; i++) kiln__b_desc(b, L->in[i], &din[i]);
    for (int o = 0; o < L->nout; o++) kiln__b_desc(b, L->out[o], &dout[o]);
    kiln_attrs view = kiln__attrset_view(L->attrs);
    kiln_shape_ctx c = {.x = b->x, .in = din, .nin = L->nin, .out = dout, .nout = L->nout, .attrs = &view,
                        .user = L->op->quick->user};
    memset(k, 0, sizeof *k);
    kiln__misuse_clear();
    const kiln_quick_op *q = L->op->quick;
    int rc = kiln__misuse_take((L->device == KILN_DEVICE_CUDA ? q->cuda_aot : q->aot)(&c, &L->io, L->tactic, k));
    if (rc) return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d): aot", L->name, L->op->ns, L->op->name, L->op->version);
    return 0;
}

static int emit_aot(emitter *E, int li, kiln__elayer *el) {
    builder *b = E->b;
    const bl *L = &b->l[li];
    kiln_aot_kernel k;
    int rc = kiln__b_aot_kernel(b, li, &k);
    if (rc) return rc;
    kiln_engine *e = E->e;
    if (L->device == KILN_DEVICE_CUDA) {
        kiln__aot_cuda *nc = kiln__realloc(e->acu, (size_t)(e->nacu + 1) * sizeof *nc);
        if (!nc) return kiln__err(KILN_ENOMEM, "build: out of memory");
        e->acu = nc;
        rc = kiln__aot_cuda_from_kernel(L->op, &k, L->nin + L->nout, aot_node_cb, E, &e->acu[e->nacu]);
        if (rc) return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", L->name, L->op->ns, L->op->name, L->op->version);
        el->aot_kernel = e->nacu++;
        return 0;
    }
    kiln__aot *na = kiln__realloc(e->aot, (size_t)(e->naot + 1) * sizeof *na);
    if (!na) return kiln__err(KILN_ENOMEM, "build: out of memory");
    e->aot = na;
    rc = kiln__aot_from_kernel(L->op, &k, aot_node_cb, E, &e->aot[e->naot]);
    if (rc) return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", L->name, L->op->ns, L->op->name, L->op->version);
    el->aot_kernel = e->naot++;
    el->time_ms = L->aot_ms; /* measured by select.c (0: a build without timing) */
    return 0;
}

/* The layer's fused epilogue chain (fuse.c) into el->epi. */
static int emit_epilogues(builder *b, kiln_engine *e, const bl *L, kiln__elayer *el) {
    el->epi = kiln__calloc((size_t)L->nepi, sizeof *el->epi);
    if (!el->epi) return kiln__err(KILN_ENOMEM, "build: out of memory");
    el->nepi = L->nepi;
    for (int k = 0; k < L->nepi; k++) {
        const bl *F = &b->l[L->epi[k].layer];
        kiln__eepi *p = &el->epi[k];
        p->op_ns = kiln__strdup(F->op->ns);
        p->op_name = kiln__strdup(F->op->name);
        if (!p->op_ns || !p->op_name) return kiln__err(KILN_ENOMEM, "build: out of memory");
        p->op_version = F->op->version;
        p->op = F->op;
        p->nin = F->nin;
        p->x = L->epi[k].x;
        for (int i = 0; i < F->nin; i++)
            p->in[i] = i == p->x || F->in[i] < 0 ? -1 : b->t[F->in[i]].eidx;
        size_t sz = 0;
        int rc = kiln__attrs_serialize(F->attrs, NULL, &sz);
        if (!rc && sz) {
            p->blob = kiln__malloc(sz);
            if (!p->blob) return kiln__err(KILN_ENOMEM, "build: out of memory");
            rc = kiln__attrs_serialize(F->attrs, p->blob, &sz);
        }
        if (rc)
            return kiln__err_prefix(rc, "layer '%s' fused into '%s': attributes", F->name, L->name);
        p->blob_size = sz;
        rc = add_plugin_ref(b, e, F->op);
        if (rc) return rc;
    }
    return 0;
}

static int assign(builder *b, kiln_engine *e, int t) {
    if (t < 0 || b->t[t].eidx >= 0) return 0;
    b->t[t].eidx = e->ntensors++;
    return 0;
}

/* Does donor's weights block hold e's constants (tensor ei from
 * b->t[tidx[ei]]) at the offsets e gave them? */
static int same_weights(const builder *b, const int *tidx, const kiln_engine *donor, const kiln_engine *e) {
    if (donor->weights_size != e->weights_size || donor->ntensors != e->ntensors) return 0;
    for (int ei = 0; ei < e->ntensors; ei++) {
        const bt *t = &b->t[tidx[ei]];
        const kiln__etensor *x = &e->tensors[ei], *y = &donor->tensors[ei];
        if ((t->kind == BT_CONST) != (y->kind == KILN__ET_CONST)) return 0;
        if (t->kind == BT_CONST && (x->const_off != y->const_off || x->const_bytes != y->const_bytes ||
                                    y->packed_only || (t->bytes && memcmp(donor->weights + y->const_off, t->data, t->bytes))))
            return 0;
    }
    return 1;
}

int kiln__b_emit(builder *b, const int *order, int norder, kiln_engine **out) {
    int rc = 0;
    kiln_engine *e = kiln__calloc(1, sizeof *e);
    if (!e) return kiln__err(KILN_ENOMEM, "build: out of memory");
    emitter E = {.b = b, .e = e};
    const kiln_network *net = b->net;

    /* Tensor numbering: inputs first, then in execution order. */
    int *in_t = kiln__malloc((size_t)(net->ninputs + 1) * sizeof *in_t);
    if (!in_t) { rc = kiln__err(KILN_ENOMEM, "build: out of memory"); goto fail; }
    for (int i = 0; i < b->nt; i++)
        if (b->t[i].kind == BT_INPUT && b->t[i].input_index >= 0) in_t[b->t[i].input_index] = i;
    for (int i = 0; i < net->ninputs; i++) assign(b, e, in_t[i]);
    for (int k = 0; k < norder; k++) {
        const bl *L = &b->l[order[k]];
        for (int p = 0; p < L->nin; p++) assign(b, e, L->in[p]);
        for (int o = 0; o < L->nout; o++) assign(b, e, L->out[o]);
        for (int k = 0; k < L->nepi; k++) { /* constants of fused epilogue ops */
            const bl *F = &b->l[L->epi[k].layer];
            for (int p = 0; p < F->nin; p++)
                if (p != L->epi[k].x) assign(b, e, F->in[p]);
        }
    }
    int *tidx = kiln__malloc((size_t)(e->ntensors + 1) * sizeof *tidx);
    e->tensors = kiln__calloc((size_t)(e->ntensors + 1), sizeof *e->tensors);
    e->layers = kiln__calloc((size_t)(norder + 1), sizeof *e->layers);
    e->inputs = kiln__malloc((size_t)(net->ninputs + 1) * sizeof *e->inputs);
    e->outputs = kiln__malloc((size_t)(net->noutputs + 1) * sizeof *e->outputs);
    e->prof = kiln__calloc((size_t)(net->ninputs + 1), sizeof *e->prof);
    if (!tidx || !e->tensors || !e->layers || !e->inputs || !e->outputs || !e->prof) {
        kiln__free(tidx);
        kiln__free(in_t);
        rc = kiln__err(KILN_ENOMEM, "build: out of memory");
        goto fail;
    }
    for (int i = 0; i < b->nt; i++)
        if (b->t[i].eidx >= 0) tidx[b->t[i].eidx] = i;
    e->ninputs = net->ninputs;
    for (int i = 0; i < net->ninputs; i++) e->inputs[i] = b->t[in_t[i]].eidx;
    kiln__free(in_t);
    /* Outputs in the network's order. */
    for (int i = 0; i < net->noutputs; i++) {
        const char *nm = net->tensors[net->outputs[i]].name;
        int found = -1;
        for (int t = 0; t < b->nt; t++)
            if (b->t[t].is_output && b->t[t].eidx >= 0 && !strcmp(b->t[t].name, nm)) found = t;
        if (found < 0) {
            kiln__free(tidx);
            rc = kiln__err(KILN_EINTERNAL, "build: network output '%s' is produced by no layer", nm);
            goto fail;
        }
        e->outputs[e->noutputs++] = b->t[found].eidx;
    }

    /* Tensors. */
    uint64_t woff = 0;
    for (int ei = 0; ei < e->ntensors && !rc; ei++) {
        const bt *t = &b->t[tidx[ei]];
        kiln__etensor *et = &e->tensors[ei];
        et->name = kiln__strdup(t->name);
        if (!et->name) { rc = kiln__err(KILN_ENOMEM, "build: out of memory"); break; }
        et->kind = t->kind == BT_INPUT ? KILN__ET_INPUT : t->kind == BT_CONST ? KILN__ET_CONST
                   : t->is_output ? KILN__ET_OUTPUT : KILN__ET_ACT;
        et->dtype = (uint8_t)t->pdtype;
        et->format = (uint8_t)t->pfmt;
        et->ndim = (uint8_t)t->ndim;
        et->upper = -1;
        et->alias_of = -1;
        et->first = et->last = -1;
        et->is_size = t->is_size;
        et->loc = (uint8_t)t->loc;
        if (t->kind == BT_CONST) {
            woff = (woff + 63) / 64 * 64;
            et->const_off = woff;
            et->const_bytes = t->bytes;
            woff += t->bytes;
        }
    }
    if (rc) { kiln__free(tidx); goto fail; }
    /* Dims after every tensor has its index (symbols refer to tensors). */
    for (int ei = 0; ei < e->ntensors && !rc; ei++) {
        const bt *t = &b->t[tidx[ei]];
        kiln__etensor *et = &e->tensors[ei];
        for (int d = 0; d < t->ndim && !rc; d++) {
            int32_t n = node_of(&E, t->dims[d]);
            if (n < 0) rc = n;
            else et->dims[d] = n;
        }
        if (!rc && t->is_size) {
            const bsym *s = kiln__b_find_sym(b, t->size_sym);
            if (s) {
                int32_t n = node_of(&E, s->upper);
                if (n < 0) rc = n;
                else et->upper = n;
            }
        } else if (!rc && t->numel_bound) { /* data-dependent dims: a bound on numel */
            int32_t n = node_of(&E, t->numel_bound);
            if (n < 0) rc = n;
            else et->upper = n;
        }
        if (!rc && t->alias_in >= 0) et->alias_of = b->t[t->alias_in].eidx;
    }
    if (rc) { kiln__free(tidx); goto fail; }
    e->weights_size = (woff + 63) / 64 * 64;
    /* refine.c's passes: the base engine's weights block, not owned, when
     * it holds the same constants at the same offsets (BERT-base's 340 MB
     * copied again cost a variant 0.3-0.5 s) */
    const kiln_engine *donor = b->rf ? b->rf->donor : NULL;
    if (donor && donor->weights_owned && same_weights(b, tidx, donor, e)) {
        e->weights = donor->weights;
        e->weights_owned = 0;
        goto layers;
    }
    e->weights = kiln__aligned_alloc(e->weights_size ? e->weights_size : 64);
    if (!e->weights) { kiln__free(tidx); rc = kiln__err(KILN_ENOMEM, "build: out of memory for %llu bytes of weights",
                                                        (unsigned long long)e->weights_size); goto fail; }
    e->weights_owned = 1;
    /* constants in ascending offsets: zero only the gaps (writing the
     * whole block twice cost 10-20 ms for ResNet-50's 100 MB) */
    uint64_t wend = 0;
    for (int ei = 0; ei < e->ntensors; ei++) {
        const bt *t = &b->t[tidx[ei]];
        if (t->kind != BT_CONST) continue;
        const uint64_t at = e->tensors[ei].const_off;
        memset(e->weights + wend, 0, (size_t)(at - wend));
        if (t->bytes) memcpy(e->weights + at, t->data, t->bytes);
        wend = at + t->bytes;
    }
    memset(e->weights + wend, 0, (size_t)((e->weights_size ? e->weights_size : 64) - wend));

layers:
    /* Layers. */
    for (int k = 0; k < norder && !rc; k++) {
        bl *L = &b->l[order[k]];
        kiln__elayer *el = &e->layers[k];
        e->nlayers = k + 1;
        el->name = kiln__strdup(L->name);
        el->op_ns = kiln__strdup(L->op->ns);
        el->op_name = kiln__strdup(L->op->name);
        el->in = kiln__malloc((size_t)(L->nin ? L->nin : 1) * sizeof *el->in);
        el->out = kiln__malloc((size_t)(L->nout ? L->nout : 1) * sizeof *el->out);
        if (!el->name || !el->op_ns || !el->op_name || !el->in || !el->out) {
            rc = kiln__err(KILN_ENOMEM, "build: out of memory");
            break;
        }
        el->op = L->op;
        el->op_version = L->op->version;
        el->nin = L->nin;
        el->nout = L->nout;
        el->io = L->io;
        el->io.n = L->nin + L->nout;
        el->tactic = L->tactic;
        el->device = (uint8_t)L->device;
        el->aot_kernel = -1;
        el->time_ms = L->ms;
        for (int p = 0; p < L->nin; p++) {
            el->in[p] = L->in[p] >= 0 ? b->t[L->in[p]].eidx : -1;
            if (L->in[p] >= 0) {
                kiln__etensor *et = &e->tensors[el->in[p]];
                if (et->last < k) et->last = k;
            }
        }
        for (int o = 0; o < L->nout; o++) {
            el->out[o] = b->t[L->out[o]].eidx;
            kiln__etensor *et = &e->tensors[el->out[o]];
            if (et->first < 0) et->first = k;
        }
        const kiln_plugin_vtable *vt = L->op->vt;
        if (vt->configure) {
            kiln_desc din[KILN_MAX_IO], dout[KILN_MAX_IO];
            for (int i = 0; i < L->nin; i++) kiln__b_desc(b, L->in[i], &din[i]);
            for (int i = 0; i < L->nout; i++) kiln__b_desc(b, L->out[i], &dout[i]);
            rc = vt->configure(L->state, &L->io, din, L->nin, dout, L->nout);
        }
        if (!rc && vt->set_tactic) rc = vt->set_tactic(L->state, L->tactic);
        if (rc) {
            kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", L->name, L->op->ns, L->op->name, L->op->version);
            break;
        }
        size_t bsz = 0;
        rc = kiln__op_serialize(L->op, L->state, &el->blob, &bsz);
        if (rc) {
            kiln__err_prefix(rc, "layer '%s' (%s::%s v%d): serialize", L->name, L->op->ns, L->op->name, L->op->version);
            break;
        }
        el->blob_size = bsz;
        int aot = 0;
        rc = use_aot(b, L, &aot);
        if (!rc && aot) rc = emit_aot(&E, order[k], el);
        if (!rc && !aot) rc = add_plugin_ref(b, e, L->op);
        if (!rc && L->nepi) rc = emit_epilogues(b, e, L, el);
    }
    if (rc) { kiln__free(tidx); goto fail; }
    for (int ei = 0; ei < e->ntensors; ei++) {
        kiln__etensor *et = &e->tensors[ei];
        if (et->kind == KILN__ET_INPUT || et->kind == KILN__ET_CONST) et->first = 0;
        if (et->kind == KILN__ET_OUTPUT) et->last = norder > 0 ? norder - 1 : 0;
        if (et->first < 0) et->first = 0;
        if (et->last < et->first) et->last = et->first;
    }

    /* Memory plan at opt (data-dependent dims at their upper bound). */
    {
        int n = e->ntensors;
        uint64_t *sizes = kiln__calloc((size_t)n + 1, sizeof *sizes);
        uint64_t *offs = kiln__calloc((size_t)n + 1, sizeof *offs);
        int32_t *first = kiln__calloc((size_t)n + 1, sizeof *first);
        int32_t *last = kiln__calloc((size_t)n + 1, sizeof *last);
        int32_t *alias = kiln__calloc((size_t)n + 1, sizeof *alias);
        int *sub = kiln__calloc((size_t)n + 1, sizeof *sub);
        int *rev = kiln__calloc((size_t)n + 1, sizeof *rev);
        int m = 0;
        if (!sizes || !offs || !first || !last || !alias || !sub || !rev) rc = kiln__err(KILN_ENOMEM, "build: out of memory");
        for (int ei = 0; ei < n && !rc; ei++) {
            kiln__etensor *et = &e->tensors[ei];
            const bt *t = &b->t[tidx[ei]];
            int64_t dims[KILN_MAX_DIMS];
            for (int d = 0; d < t->ndim && !rc; d++) rc = kiln__b_eval(b, t->dims[d], BE_UPPER, -1, &dims[d]);
            if (rc) break;
            uint64_t bytes;
            rc = kiln__tensor_bytes(t->pdtype, t->pfmt, t->ndim, dims, &bytes);
            if (rc) {
                kiln__err_prefix(rc, "build: tensor '%s' at its upper bounds", t->name);
                break;
            }
            et->plan_bytes = et->kind == KILN__ET_CONST ? et->const_bytes : bytes;
            rev[ei] = -1;
            if (et->kind != KILN__ET_ACT) continue;
            rev[ei] = m;
            sub[m] = ei;
            sizes[m] = bytes;
            first[m] = et->first;
            last[m] = et->last;
            m++;
        }
        for (int j = 0; j < m && !rc; j++) {
            int32_t a = e->tensors[sub[j]].alias_of;
            alias[j] = a >= 0 && rev[a] >= 0 ? rev[a] : -1;
        }
        uint64_t total = 0;
        if (!rc) rc = kiln__memplan(m, sizes, first, last, alias, offs, &total);
        for (int j = 0; j < m && !rc; j++) e->tensors[sub[j]].plan_off = offs[j];
        kiln__free(sizes); kiln__free(offs); kiln__free(first); kiln__free(last);
        kiln__free(alias); kiln__free(sub); kiln__free(rev);
    }
    kiln__free(tidx);
    if (rc) goto fail;

    /* Profiles. */
    for (int i = 0; i < e->ninputs; i++) {
        const kiln__etensor *et = &e->tensors[e->inputs[i]];
        for (int d = 0; d < et->ndim; d++) {
            const kiln__enode *nd = &e->nodes[et->dims[d]];
            if (nd->op == KILN_EXPR_CONST) {
                e->prof[i][0][d] = e->prof[i][1][d] = e->prof[i][2][d] = nd->v;
                continue;
            }
            int64_t v;
            for (int s = 0; s < b->nsym; s++) {
                const bsym *bs = &b->sym[s];
                if (bs->kind == BS_INPUT_DIM && E.map && bs->e->id < E.nmap && E.map[bs->e->id] == et->dims[d]) {
                    e->prof[i][0][d] = bs->vmin;
                    e->prof[i][1][d] = bs->vopt;
                    e->prof[i][2][d] = bs->vmax;
                }
            }
            (void)v;
        }
    }
    e->device_sig = kiln__strdup(kiln_cpu_signature());
    if (!e->device_sig) { rc = kiln__err(KILN_ENOMEM, "build: out of memory"); goto fail; }
    e->threads = b->cfg->threads;
    e->device = b->cfg->device;
    if (b->cuda) {
        char gpu[400];
        rc = b->cuda->signature(gpu, sizeof gpu);
        if (!rc && !(e->cuda_sig = kiln__strdup(gpu))) rc = kiln__err(KILN_ENOMEM, "build: out of memory");
        if (rc) goto fail;
        e->allow_tf32 = (b->cfg->flags & KILN_BUILD_TF32) != 0;
    }
    if (b->st) b->st->layers = e->nlayers;
    /* refine.c's passes: the layers that pack as the base engine's did take its packed forms */
    if (b->rf && b->rf->donor && (rc = kiln__b_share_packed(b->rf->donor, e)) < 0) goto fail;
    rc = kiln__engine_prepare(e);
    if (rc) {
        kiln__err_prefix(rc, "build: preparing the engine");
        goto fail;
    }
    kiln__free(E.map);
    *out = e;
    return 0;
fail:
    kiln__free(E.map);
    kiln__engine_destroy(e);
    return rc;
}
