/*
 * select.c — type/format/tactic selection by timing.
 *
 * For every layer the candidates are the (types, layouts, tactic) choices
 * its op offers that keep each tensor's logical dtype (or FP16 for an FP32
 * tensor when the config allows FP16).  A layer with one candidate is not
 * timed.  Otherwise each candidate runs at the profile's opt shapes on random
 * inputs (warm-up + reps; on the GPU the median, on the CPU the fastest
 * sample, and the CPU's candidates run once more at the end of the
 * layer: recheck_cpu), and the cost of a candidate is its time
 * plus the time of the reformats its inputs would need from the formats the
 * producers already chose (greedy, in topological order).
 *
 * Greedy alone never enters a chain of layers that is faster in a blocked
 * layout (its first layer pays the reformat in and gets nothing back), so
 * a second, chain-aware pass follows (select_regions): each timed CPU
 * layer's best candidate per layout (all its activations in it) is kept
 * from the first pass, the reformats on the edges around the layers that
 * offer another layout are timed, and region.c chooses the layouts over the
 * whole graph, switching a connected region only when it wins, border
 * reformats counted, by REGION_MARGIN.  Each region left switched is then
 * run in the whole engine against a variant without it (refine.c) and
 * kept only when it wins there too.  Where no CPU layer offers two
 * layouts (built-in ops do only under KILN_BUILD_CPU_BLOCKED), it costs
 * nothing.
 *
 * Measured times go through the timing cache: identical instances within a
 * build are timed once, and a cache file makes a rebuild time nothing.
 * With KILN_BUILD_REFINE, refine_choice lists the close choices for
 * refine.c, which runs them in the whole engine, and applies its verdicts.
 */
#include "builder.h"
#include "region.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_CANDS 256
#define FP32_TIE_MARGIN 1.1 /* see kiln__b_select */
/* A region (region.h) is switched when its cost times this is below its
 * greedy cost.  Its costs are isolated timings: in ResNet-50 with Conv
 * tactic 13 (pw16c) regions that won by 5-8% there ran 0.4-1.2 ms slower in
 * the network (layer4's 16c convs slower there, the reformats dearer), so
 * it had to win by 10% (session 14).  Since each region is now checked in
 * the network (refine.c), the margin only keeps regions of noise out of
 * the check: at 10% ResNet-50's layer1 (24 layers, predicted 7% cheaper)
 * was never tried, at 3% the check kept it and the engine ran 0.9-1.1 ms
 * faster than greedy at 1 thread (bench/README.md, session 15). */
#define REGION_MARGIN 1.03
/* An island (kiln__rg_heal: a few layers, a conv and its Relu, whose layout
 * differs from all their neighbours', a reformat on every edge) is taken
 * to theirs when that costs at most this much more in isolation, and the
 * network decides: in one ResNet-50 build at 1 thread a slow stretch put
 * Conv tactic 13 at 1.76 ms against 1.25 on every look (layer2.0's conv1
 * went LINEAR) and tactic 14 at 0.95 against 0.74 (layer3's five conv2
 * too): an engine 4% slower (bench/README.md, session 31). */
#define ISLAND_RATIO 1.3
/* recheck_cpu's second look: the warm-up and RECHECK_REPS samples, which a
 * CPU layer's first pass leaves out of the config's reps (TIME_FIRST) */
#define RECHECK_REPS 1

typedef struct cand {
    kiln_io_format io;
    int tactic;
} cand;

typedef struct cand_list {
    cand *c;
    int n, cap;
} cand_list;

static int same_io(const kiln_io_format *a, const kiln_io_format *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->dtype[i] != b->dtype[i] || a->format[i] != b->format[i]) return 0;
    return 1;
}

static int cand_add(cand_list *l, const kiln_io_format *io, int tactic) {
    for (int i = 0; i < l->n; i++)
        if (l->c[i].tactic == tactic && same_io(&l->c[i].io, io)) return 0;
    if (l->n >= MAX_CANDS) return 0;
    cand *n = kiln__grow(l->c, &l->cap, l->n + 1, sizeof *l->c);
    if (!n) return KILN_ENOMEM;
    l->c = n;
    l->c[l->n].io = *io;
    l->c[l->n].tactic = tactic;
    l->n++;
    return 0;
}

static int pos_tensor(const bl *L, int p) { return p < L->nin ? L->in[p] : L->out[p - L->nin]; }

static int dtype_ok(const builder *b, const bt *t, kiln_dtype dt) {
    if (dt == t->dtype) return 1;
    if (t->dtype != KILN_DTYPE_F32 || t->is_size) return 0;
    return (dt == KILN_DTYPE_F16 && (b->cfg->flags & KILN_BUILD_FP16)) ||
           (dt == KILN_DTYPE_BF16 && (b->cfg->flags & KILN_BUILD_BF16));
}

/* Where position p of layer L lives: the layer's device, except inputs its
 * CUDA implementation reads on the host (kiln_quick_op.cuda_host_inputs). */
kiln_device_kind kiln__b_pos_loc(const bl *L, int p) {
    if (L->device == KILN_DEVICE_CPU) return KILN_DEVICE_CPU;
    /* (an AOT CUDA kernel takes every input in device memory) */
    if (p < L->nin && p < 32 && L->aot != 1 && (kiln__op_host_inputs(L->op, L->device) >> p & 1u))
        return KILN_DEVICE_CPU;
    return L->device;
}

static int format_ok(const bt *t, kiln_format f, int min_rank) {
    if (f == KILN_FORMAT_LINEAR) return 1;
    return f < KILN_FORMAT_COUNT_ && t->ndim >= min_rank && !t->is_size;
}

/* The layouts of CUDA layers: LINEAR, or NHWC on a 4-D tensor (blocked
 * layouts are CPU-only). */
static int cuda_format_ok(const builder *b, const bt *t, kiln_format f) {
    return f == KILN_FORMAT_LINEAR || (f == KILN_FORMAT_NHWC && t->ndim == 4 && !t->is_size && b->nhwc != NHWC_OFF);
}

/* Does io put any position in NHWC? */
static int has_nhwc(const kiln_io_format *io) {
    for (int p = 0; p < io->n; p++)
        if (io->format[p] == KILN_FORMAT_NHWC) return 1;
    return 0;
}

static int is_blocked(kiln_format f) { return f == KILN_FORMAT_NCHW8C || f == KILN_FORMAT_NCHW16C; }

/* A CPU candidate that reads an activation in a blocked layout (NCHW8C,
 * NCHW16C) its producer did not choose, or that writes one while reading
 * none blocked (Conv tactic 17: the image LINEAR, Y NCHW16C): the greedy
 * choice does not enter a blocked chain (it is ranked after every other
 * candidate), it only goes on with one.  Alone such a layer pays a
 * reformat in and one out and loses the epilogue fusion of a residual Add /
 * Relu that read it in LINEAR (fusion runs after selection); ResNet-50's
 * 7x7 1x1 convs took Conv tactic 13 that way on timing noise.  And a chain
 * entered greedily at the stem ran on into ResNet-18's layer4 unchecked:
 * chains are entered only by the region pass, whose switches the whole
 * engine checks (refine.c). */
static int cpu_enters_blocked(const builder *b, const bl *L, const kiln_io_format *io) {
    if (L->device != KILN_DEVICE_CPU) return 0;
    int reads_blocked = 0, writes_blocked = 0;
    for (int p = 0; p < L->nin + L->nout && p < io->n; p++) {
        const int t = p < L->nin ? L->in[p] : L->out[p - L->nin];
        if (t < 0 || b->t[t].kind == BT_CONST || !is_blocked(io->format[p])) continue;
        if (p >= L->nin) {
            writes_blocked = 1;
            continue;
        }
        if (b->t[t].pfmt != io->format[p]) return 1;
        reads_blocked = 1;
    }
    return writes_blocked && !reads_blocked;
}

/* Does io put any position in a blocked layout (NCHW8C, NCHW16C)? */
static int blocked_io(const kiln_io_format *io) {
    for (int p = 0; p < io->n; p++)
        if (is_blocked(io->format[p])) return 1;
    return 0;
}

int kiln__b_blocked_force(void) {
    const char *e = getenv("KILN_CPU_BLOCKED");
    return e && !strcmp(e, "force");
}

/* Candidate io of layer L ranks after the others: it enters a blocked
 * layout (cpu_enters_blocked), or, forced, it is not blocked where
 * another candidate is (any_blocked). */
static int blocked_rank(const builder *b, const bl *L, const kiln_io_format *io, int any_blocked) {
    if (L->device != KILN_DEVICE_CPU) return 0;
    return any_blocked ? !blocked_io(io) : cpu_enters_blocked(b, L, io);
}

static void logical_io(const builder *b, const bl *L, kiln_io_format *io) {
    memset(io, 0, sizeof *io);
    io->n = L->nin + L->nout;
    for (int p = 0; p < io->n; p++) {
        int t = pos_tensor(L, p);
        io->dtype[p] = t >= 0 ? b->t[t].dtype : KILN_DTYPE_UNDEFINED;
        io->format[p] = KILN_FORMAT_LINEAR;
    }
}

/* The combinations of a quick op on its layer's device. */
static const kiln_combo *quick_formats(const bl *L) {
    const kiln_quick_op *q = L->op->quick;
    return L->device == KILN_DEVICE_CUDA && q->cuda_formats ? q->cuda_formats : kiln__op_formats(L->op, L->state);
}

/* Slots of a combination string: top-level commas + 1. */
static int combo_slots(const char *types) {
    int n = 1;
    for (const char *s = types; *s; s++) n += *s == ',';
    return n;
}

/* An op with optional inputs may list combinations for each input count:
 * a row whose slot count fits neither 1 nor nio is skipped when another
 * row fits (else kiln_combo_expand reports the mismatch).  A row of the
 * op's full slot count (max_inputs + outputs: `full`) fits a layer whose
 * trailing optional inputs are absent: it is expanded at full and its
 * output slots taken for the layer's (quick_candidates). */
static int combo_fits(const kiln_combo *list, const kiln_combo *cb, int nio, int full) {
    int s = combo_slots(cb->types);
    if (s == 1 || s == nio || s == full) return 1;
    for (const kiln_combo *o = list; o->types; o++)
        if (combo_slots(o->types) == 1 || combo_slots(o->types) == nio) return 0;
    return 1;
}

static int quick_candidates(builder *b, int li, cand_list *cl) {
    const bl *L = &b->l[li];
    int nio = L->nin + L->nout;
    kiln_io_format *exp = kiln__malloc(MAX_CANDS * sizeof *exp);
    if (!exp) return kiln__err(KILN_ENOMEM, "build: out of memory");
    int rc = 0;
    const kiln_combo *list = quick_formats(L);
    const int max_in = L->op->quick->max_inputs, full = max_in + L->nout;
    for (const kiln_combo *cb = list; cb->types && !rc; cb++) {
        if (!combo_fits(list, cb, nio, full)) continue;
        const int wide = nio < full && combo_slots(cb->types) == full; /* trailing inputs absent */
        int n = kiln_combo_expand(cb->types, cb->layouts, wide ? full : nio, exp, MAX_CANDS);
        if (n < 0) {
            rc = kiln__err_prefix(n, "formats of op %s::%s v%d", L->op->ns, L->op->name, L->op->version);
            break;
        }
        int tactics[KILN_MAX_TACTICS], nt = 0;
        for (int i = 0; i < KILN_MAX_TACTICS && cb->tactics[i]; i++) tactics[nt++] = cb->tactics[i];
        if (!nt) tactics[nt++] = 0;
        for (int e = 0; e < n && !rc; e++) {
            kiln_io_format io = exp[e];
            for (int o = 0; o < L->nout && wide; o++) {
                io.dtype[L->nin + o] = exp[e].dtype[max_in + o];
                io.format[L->nin + o] = exp[e].format[max_in + o];
            }
            io.n = nio;
            int ok = 1;
            for (int p = 0; p < nio && ok; p++) {
                int t = pos_tensor(L, p);
                if (t < 0) {
                    io.dtype[p] = KILN_DTYPE_UNDEFINED;
                    io.format[p] = KILN_FORMAT_LINEAR;
                    continue;
                }
                ok = dtype_ok(b, &b->t[t], io.dtype[p]) && format_ok(&b->t[t], io.format[p], 3);
                /* the GPU converts LINEAR <-> NHWC (reformat_cuda.c): CUDA
                 * layers take NHWC on 4-D tensors where their op lists it */
                if (L->device == KILN_DEVICE_CUDA && !cuda_format_ok(b, &b->t[t], io.format[p])) ok = 0;
            }
            for (int k = 0; k < nt && ok && !rc; k++) rc = cand_add(cl, &io, tactics[k]);
        }
    }
    kiln__free(exp);
    return rc;
}

typedef struct penum {
    builder *b;
    const bl *L;
    kiln_io_format io;
    kiln_io_format *found;
    int nfound, max;
} penum;

static void plugin_dfs(penum *e, int p) {
    if (e->nfound >= e->max) return;
    const bl *L = e->L;
    if (p == L->nin + L->nout) {
        e->found[e->nfound++] = e->io;
        return;
    }
    int ti = pos_tensor(L, p);
    if (ti < 0) {
        e->io.dtype[p] = KILN_DTYPE_UNDEFINED;
        e->io.format[p] = KILN_FORMAT_LINEAR;
        plugin_dfs(e, p + 1);
        return;
    }
    const bt *t = &e->b->t[ti];
    kiln_dtype dts[3] = {t->dtype, KILN_DTYPE_F16, KILN_DTYPE_BF16};
    const kiln_plugin_vtable *vt = L->op->vt;
    for (int i = 0; i < 3; i++)
        for (int f = 0; f < KILN_FORMAT_COUNT_; f++) {
            if (i > 0 && (dts[i] == t->dtype || !dtype_ok(e->b, t, dts[i]))) continue;
            if (!format_ok(t, (kiln_format)f, 4) || (f != KILN_FORMAT_LINEAR && t->ndim != 4)) continue;
            if (L->device == KILN_DEVICE_CUDA && !cuda_format_ok(e->b, t, (kiln_format)f)) continue;
            e->io.dtype[p] = dts[i];
            e->io.format[p] = (kiln_format)f;
            int yes = vt->supports_format ? vt->supports_format(L->state, p, &e->io) == 1
                                          : (i == 0 && f == KILN_FORMAT_LINEAR);
            if (yes) plugin_dfs(e, p + 1);
        }
}

static int plugin_candidates(builder *b, int li, cand_list *cl) {
    const bl *L = &b->l[li];
    const kiln_plugin_vtable *vt = L->op->vt;
    penum e = {.b = b, .L = L, .max = 64};
    e.io.n = L->nin + L->nout;
    e.found = kiln__malloc((size_t)e.max * sizeof *e.found);
    if (!e.found) return kiln__err(KILN_ENOMEM, "build: out of memory");
    plugin_dfs(&e, 0);
    int rc = 0;
    for (int i = 0; i < e.nfound && !rc; i++) {
        int tactics[KILN_MAX_TACTICS], nt = 0;
        if (vt->configure) {
            kiln_desc din[KILN_MAX_IO], dout[KILN_MAX_IO];
            for (int k = 0; k < L->nin; k++) kiln__b_desc(b, L->in[k], &din[k]);
            for (int k = 0; k < L->nout; k++) kiln__b_desc(b, L->out[k], &dout[k]);
            rc = vt->configure(L->state, &e.found[i], din, L->nin, dout, L->nout);
            if (rc) {
                kiln__log(KILN_LOG_VERBOSE, "layer '%s': configure rejected a combination: %s", L->name, kiln_errmsg());
                rc = 0;
                continue;
            }
        }
        if (vt->valid_tactics) nt = vt->valid_tactics(L->state, tactics, KILN_MAX_TACTICS);
        if (nt <= 0) {
            nt = 1;
            tactics[0] = 0;
        }
        if (nt > KILN_MAX_TACTICS) nt = KILN_MAX_TACTICS;
        for (int k = 0; k < nt && !rc; k++) rc = cand_add(cl, &e.found[i], tactics[k]);
    }
    kiln__free(e.found);
    return rc;
}

/* Inputs a GPU layer reads on the host (roi, scales, pads, ...) keep their
 * own type where the op also takes them so: a combination that would cast
 * one (Resize's roi in an --fp16 build) is dropped when its twin with the
 * host input's logical type is a candidate too.  The cast would change
 * values the host code computes with, at no gain. */
static void keep_host_types(const builder *b, const bl *L, cand_list *cl) {
    unsigned host = L->device == KILN_DEVICE_CUDA ? kiln__op_host_inputs(L->op, KILN_DEVICE_CUDA) : 0;
    int n = 0;
    for (int k = 0; k < cl->n; k++) {
        kiln_io_format want = cl->c[k].io;
        int cast = 0;
        for (int p = 0; p < L->nin && p < 32; p++)
            if ((host >> p & 1u) && L->in[p] >= 0 && want.dtype[p] != b->t[L->in[p]].dtype) {
                want.dtype[p] = b->t[L->in[p]].dtype;
                cast = 1;
            }
        int twin = 0; /* (entries before k moved, but never the twin: it has no cast to drop it) */
        for (int j = 0; j < cl->n && cast && !twin; j++)
            twin = cl->c[j].tactic == cl->c[k].tactic && same_io(&cl->c[j].io, &want);
        if (!twin) cl->c[n++] = cl->c[k];
    }
    cl->n = n;
}

static int enum_candidates(builder *b, int li, cand_list *cl) {
    const bl *L = &b->l[li];
    int rc;
    if (L->op->quick) {
        if (!quick_formats(L)) {
            kiln_io_format io;
            logical_io(b, L, &io);
            return cand_add(cl, &io, 0);
        }
        rc = quick_candidates(b, li, cl);
        if (!rc) keep_host_types(b, L, cl);
    } else {
        rc = plugin_candidates(b, li, cl);
    }
    if (rc) return rc;
    if (cl->n == 0) {
        char desc[512] = "";
        for (int p = 0; p < L->nin + L->nout; p++) {
            int t = pos_tensor(L, p);
            char one[64];
            snprintf(one, sizeof one, "%s%s", p ? "," : "", t >= 0 ? kiln__b_dtype_upper(b->t[t].dtype) : "-");
            strncat(desc, one, sizeof desc - strlen(desc) - 1);
        }
        return kiln__err(KILN_EUNSUPPORTED,
                         "layer '%s' (%s::%s v%d): no type/format combination of the op accepts "
                         "the tensors' types [%s] (FP16 %s)",
                         L->name, L->op->ns, L->op->name, L->op->version, desc,
                         (b->cfg->flags & KILN_BUILD_FP16) ? "allowed" : "not allowed");
    }
    return 0;
}

/* ------------------------------------------------------------ timing */

static void io_text(const kiln_io_format *io, char *buf, size_t size) {
    size_t n = 0;
    buf[0] = 0;
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (int p = 0; p < io->n && n < size; p++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", p ? "," : "", kiln__b_dtype_upper(io->dtype[p]));
    int same = 1;
    for (int p = 1; p < io->n; p++)
        if (io->format[p] != io->format[0]) same = 0;
    if (n >= size) return;
    if (same) {
        snprintf(buf + n, size - n, "] %s", kiln_format_name(io->n ? io->format[0] : KILN_FORMAT_LINEAR));
        return;
    }
    n += (size_t)snprintf(buf + n, size - n, "] [");
    for (int p = 0; p < io->n && n < size; p++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", p ? "," : "", kiln_format_name(io->format[p]));
    if (n < size) snprintf(buf + n, size - n, "]");
}

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n) {
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_value(const kiln_attr_value *v) {
    uint64_t h = 1469598103934665603ull;
    h = fnv_bytes(h, &v->present, sizeof v->present);
    h = fnv_bytes(h, &v->type, sizeof v->type);
    switch (v->type) {
    case KILN_ATTR_INT: case KILN_ATTR_BOOL: h = fnv_bytes(h, &v->i, sizeof v->i); break;
    case KILN_ATTR_FLOAT: h = fnv_bytes(h, &v->f, sizeof v->f); break;
    case KILN_ATTR_STRING: case KILN_ATTR_BYTES: if (v->s) h = fnv_bytes(h, v->s, v->len); break;
    case KILN_ATTR_ARRAY: case KILN_ATTR_TENSOR:
        h = fnv_bytes(h, &v->elem, sizeof v->elem);
        h = fnv_bytes(h, &v->count, sizeof v->count);
        if (v->data) h = fnv_bytes(h, v->data, (size_t)v->count * kiln_dtype_size(v->elem));
        if (v->type == KILN_ATTR_TENSOR) h = fnv_bytes(h, v->dims, sizeof v->dims[0] * (size_t)v->ndim);
        break;
    default: break;
    }
    return h;
}

/* Text that, with op identity and IO, says what makes two instances time differently. */
static void timing_id(builder *b, const bl *L, char *buf, size_t size) {
    const kiln__op *op = L->op;
    buf[0] = 0;
    if (!op->quick) {
        if (op->vt->timing_id && op->vt->timing_id(L->state, buf, size) == 0) {
            for (char *c = buf; *c; c++)
                if (*c == '\n' || *c == '\r') *c = ' ';
            return;
        }
        uint8_t *blob = NULL;
        size_t n = 0;
        if (kiln__op_serialize(op, L->state, &blob, &n) == 0)
            snprintf(buf, size, "blob:%016llx", (unsigned long long)fnv_bytes(1469598103934665603ull, blob, n));
        kiln__free(blob);
        return;
    }
    (void)b;
    const kiln__attrset *a = L->attrs;
    const char *want = op->quick->timing_id;
    size_t n = 0;
    for (int i = 0; i < a->count && n < size; i++) {
        const char *nm = a->defs[i].name;
        if (want) {
            /* comma-separated list of names */
            size_t len = strlen(nm);
            const char *p = want;
            int found = 0;
            while (*p) {
                while (*p == ' ' || *p == ',') p++;
                const char *q = p;
                while (*q && *q != ',' && *q != ' ') q++;
                if ((size_t)(q - p) == len && strncmp(p, nm, len) == 0) found = 1;
                p = q;
            }
            if (!found) continue;
        }
        n += (size_t)snprintf(buf + n, size - n, "%s%s=%016llx", n ? ";" : "", nm,
                              (unsigned long long)hash_value(&a->v[i]));
    }
}

static void fill_block(builder *b, void *data, kiln_dtype dt, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = kiln__b_rand(b);
        double f = (double)(r >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
        int64_t iv = (int64_t)(r >> 63);
        switch (dt) {
        case KILN_DTYPE_F32: ((float *)data)[i] = (float)f; break;
        case KILN_DTYPE_F64: ((double *)data)[i] = f; break;
        case KILN_DTYPE_F16: ((uint16_t *)data)[i] = kiln_f32_to_f16((float)f); break;
        case KILN_DTYPE_BF16: ((uint16_t *)data)[i] = kiln_f32_to_bf16((float)f); break;
        case KILN_DTYPE_I64: ((int64_t *)data)[i] = iv; break;
        case KILN_DTYPE_I32: ((int32_t *)data)[i] = (int32_t)iv; break;
        case KILN_DTYPE_U32: ((uint32_t *)data)[i] = (uint32_t)iv; break;
        case KILN_DTYPE_U64: ((uint64_t *)data)[i] = (uint64_t)iv; break;
        case KILN_DTYPE_I16: case KILN_DTYPE_U16: ((int16_t *)data)[i] = (int16_t)iv; break;
        default: ((uint8_t *)data)[i] = (uint8_t)iv; break;
        }
    }
}

/* Random timing data: the first FILL_BLOCK elements drawn, the rest copies
 * of them (drawing and converting every element of BERT's activations at
 * batch 32 took seconds per build; a kernel's speed does not depend on the
 * data repeating every 4096 elements). */
#define FILL_BLOCK 4096
static void fill_random(builder *b, void *data, kiln_dtype dt, uint64_t n) {
    uint64_t drawn = n < FILL_BLOCK ? n : FILL_BLOCK;
    size_t es = kiln_dtype_size(dt);
    fill_block(b, data, dt, drawn);
    for (uint64_t done = drawn; done < n;) { /* doubling copies */
        uint64_t k = done < n - done ? done : n - done;
        memcpy((char *)data + done * es, data, k * es);
        done += k;
    }
}

typedef struct timing_bufs {
    kiln_tensor in[KILN_MAX_IO], out[KILN_MAX_IO];
    void *mem[2 * KILN_MAX_IO];
    int nmem;
    const kiln__device *dev;   /* CUDA layers: dmem holds the device copies */
    void *dmem[2 * KILN_MAX_IO];
    int ndmem;
} timing_bufs;

static void bufs_free(timing_bufs *t) {
    for (int i = 0; i < t->nmem; i++) kiln__aligned_free(t->mem[i]);
    for (int i = 0; i < t->ndmem; i++) t->dev->free(t->dmem[i]);
    t->nmem = t->ndmem = 0;
}

/* Timing buffers kept between candidates.  The candidates of a layer (and
 * the reformat timings between them) read the same tensors in a few
 * (type, layout) pairs, and making a buffer -- allocate, fill, upload, free
 * -- cost more than timing the kernels: 26 of the 31 s of PP-OCR det's
 * batch-32 FP32 build on an H100.  Up to KILN__B_TBUF_MAX buffers and
 * TBUF_BYTES are kept, the least recently used evicted first but never one
 * the candidate being set up uses; selection frees them all at its end
 * (tbuf_clear).  Inputs keep their data (kernels do not write their
 * inputs); an output buffer is handed over with what it last held. */
#define TBUF_BYTES ((uint64_t)3 << 30)

static void tbuf_drop(builder *b, int i) {
    struct tbuf *e = &b->tbuf[i];
    if (e->loc == KILN_DEVICE_CUDA) b->cuda->free(e->p);
    else kiln__aligned_free(e->p);
    b->tbuf_bytes -= e->bytes;
    b->tbuf[i] = b->tbuf[--b->ntbuf];
}

/* Frees the kept buffers the current candidate does not use (all = 1: every one). */
static void tbuf_clear(builder *b, int all) {
    for (int i = b->ntbuf - 1; i >= 0; i--)
        if (all || b->tbuf[i].stamp != b->tbuf_stamp) tbuf_drop(b, i);
}

static void *tbuf_find(builder *b, const struct tbuf *k) {
    for (int i = 0; i < b->ntbuf; i++) {
        struct tbuf *e = &b->tbuf[i];
        if (e->t == k->t && e->out == k->out && e->dt == k->dt && e->fmt == k->fmt && e->loc == k->loc &&
            e->bytes == k->bytes) {
            e->stamp = b->tbuf_stamp;
            return e->p;
        }
    }
    return NULL;
}

/* Keep buffer k->p, just made for the current candidate: 1 when the cache
 * took it, 0 when the caller still owns it (too big, or every kept buffer
 * is in use). */
static int tbuf_keep(builder *b, const struct tbuf *k) {
    if (k->bytes > TBUF_BYTES / 2) return 0;
    while (b->ntbuf == KILN__B_TBUF_MAX || b->tbuf_bytes + k->bytes > TBUF_BYTES) {
        int v = -1;
        for (int i = 0; i < b->ntbuf; i++)
            if (b->tbuf[i].stamp != b->tbuf_stamp && (v < 0 || b->tbuf[i].stamp < b->tbuf[v].stamp)) v = i;
        if (v < 0) return 0;
        tbuf_drop(b, v);
    }
    b->tbuf[b->ntbuf] = *k;
    b->tbuf[b->ntbuf++].stamp = b->tbuf_stamp;
    b->tbuf_bytes += k->bytes;
    return 1;
}

/* A new buffer of `bytes` in memory space k->loc for the current
 * candidate, kept (tbuf_keep) or else listed in tb to be freed after it.
 * Out of memory: the kept buffers it does not use are freed, then once more. */
static int tbuf_alloc(builder *b, timing_bufs *tb, struct tbuf *k) {
    const uint64_t n = k->bytes ? k->bytes : 64;
    const int dev = k->loc == KILN_DEVICE_CUDA;
    for (int again = 0;; again++) {
        int rc = 0;
        k->p = NULL;
        if (dev) rc = b->cuda->alloc(n, &k->p);
        else if (!(k->p = kiln__aligned_alloc(n))) rc = KILN_ENOMEM;
        if (!rc) break;
        if (again || !b->ntbuf) {
            if (dev) return kiln__err_prefix(rc, "timing buffers");
            return kiln__err(KILN_ENOMEM, "timing: out of memory for %llu bytes", (unsigned long long)n);
        }
        tbuf_clear(b, 0);
    }
    if (tbuf_keep(b, k)) return 0;
    if (dev) {
        tb->dev = b->cuda;
        tb->dmem[tb->ndmem++] = k->p;
    } else {
        tb->mem[tb->nmem++] = k->p;
    }
    return 0;
}

/* Move a host timing buffer (tb's) to the device (CUDA layers): contents
 * copied into a buffer of tensor k->t's, kt->data repointed. */
static int bufs_upload(builder *b, timing_bufs *tb, kiln_tensor *kt, struct tbuf *k) {
    const void *host = kt->data;
    k->loc = KILN_DEVICE_CUDA;
    int rc = tbuf_alloc(b, tb, k);
    if (rc) return rc;
    rc = b->cuda->copy(k->p, host, k->bytes, b->cx.base.stream);
    if (!rc) rc = b->cuda->stream_sync(b->cx.base.stream);
    kt->data = k->p;
    kt->device = KILN_DEVICE_CUDA;
    return rc;
}

/* fill_random straight into a new device buffer of k's: one block drawn
 * on the host and uploaded, the doubling copies made on the device (drawn,
 * copied and uploaded on the host, PP-OCR det's batch-32 activations of
 * 200-800 MB took 0.1-0.3 s each). */
static int fill_random_device(builder *b, timing_bufs *tb, kiln_tensor *kt, struct tbuf *k) {
    const size_t es = kiln_dtype_size(kt->dtype);
    const uint64_t n = k->bytes / es;
    void *h = kiln__aligned_alloc(FILL_BLOCK * es);
    if (!h) return kiln__err(KILN_ENOMEM, "timing: out of memory for %zu bytes", FILL_BLOCK * es);
    tb->mem[tb->nmem++] = h;
    fill_block(b, h, kt->dtype, FILL_BLOCK);
    int rc = tbuf_alloc(b, tb, k);
    if (rc) return rc;
    void *s = b->cx.base.stream;
    rc = b->cuda->copy(k->p, h, FILL_BLOCK * es, s);
    for (uint64_t done = FILL_BLOCK; done < n && !rc;) {
        uint64_t c = done < n - done ? done : n - done;
        rc = b->cuda->copy((char *)k->p + done * es, k->p, c * es, s);
        done += c;
    }
    if (!rc) rc = b->cuda->stream_sync(s);
    kt->data = k->p;
    kt->device = KILN_DEVICE_CUDA;
    return rc;
}

/* Output p of layer L is one its op may skip (kiln_quick_op.optional_outputs)
 * and nothing reads: the engine passes it NULL (context.c), so it is timed
 * NULL too.  (MaxPool's Indices: ResNet's stem pool timed 7-17 ms with
 * them, ~0.2 ms without, which put noise into every layout decision
 * around it.) */
static int unread_optional(const builder *b, const bl *L, int p) {
    const kiln_quick_op *q = L->op ? L->op->quick : NULL;
    const int k = p - L->nin, ti = pos_tensor(L, p);
    if (k < 0 || k >= 32 || !q || !(q->optional_outputs >> k & 1) || ti < 0 || b->t[ti].is_output) return 0;
    for (int l = 0; l < b->nl; l++)
        for (int i = 0; i < b->l[l].nin && !b->l[l].dead; i++)
            if (b->l[l].in[i] == ti) return 0;
    return 1;
}

/* Tensors for a run of layer li with `io` at opt shapes; *shape_text gets
 * the dims for the cache key (an unread optional output, passed NULL, is
 * marked "~").  alloc 0: the text only (a cache hit needs no buffers). */
static int bufs_make(builder *b, int li, const kiln_io_format *io, timing_bufs *tb, char *shape_text,
                     size_t size, int alloc) {
    const bl *L = &b->l[li];
    memset(tb, 0, sizeof *tb);
    b->tbuf_stamp += alloc != 0; /* a new candidate: what it finds kept is in use */
    size_t sn = 0;
    shape_text[0] = 0;
    for (int p = 0; p < L->nin + L->nout; p++) {
        int ti = pos_tensor(L, p);
        int is_in = p < L->nin;
        kiln_tensor *kt = is_in ? &tb->in[p] : &tb->out[p - L->nin];
        if (ti < 0) {
            sn += (size_t)snprintf(shape_text + sn, size > sn ? size - sn : 0, "%s-", p ? "," : "");
            continue;
        }
        const bt *t = &b->t[ti];
        int64_t dims[KILN_MAX_DIMS];
        sn += (size_t)snprintf(shape_text + sn, size > sn ? size - sn : 0, "%s[", p ? "," : "");
        for (int d = 0; d < t->ndim; d++) {
            int rc = kiln__b_eval(b, t->dims[d], BE_OPT, is_in ? -1 : li, &dims[d]);
            if (rc) return rc;
            sn += (size_t)snprintf(shape_text + sn, size > sn ? size - sn : 0, "%s%lld", d ? "x" : "",
                                   (long long)dims[d]);
        }
        const int absent = !is_in && unread_optional(b, L, p);
        sn += (size_t)snprintf(shape_text + sn, size > sn ? size - sn : 0, "]%s", absent ? "~" : "");
        if (!alloc) continue;
        kiln__tensor_view(kt, NULL, io->dtype[p], io->format[p], b->exec.device, t->ndim, dims);
        if (absent) continue; /* its dims, data NULL: as the engine's call */
        uint64_t bytes;
        int rc = kiln__tensor_bytes(kt->dtype, kt->format, kt->ndim, kt->dims, &bytes);
        if (rc) return kiln__err_prefix(rc, "timing: tensor '%s' at opt shapes", t->name);
        const int up = kiln__b_pos_loc(L, p) == KILN_DEVICE_CUDA;
        struct tbuf k = {.t = ti, .out = !is_in, .dt = kt->dtype, .fmt = kt->format,
                         .loc = up ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU, .bytes = bytes};
        if ((kt->data = tbuf_find(b, &k))) { /* made for an earlier candidate */
            if (up) kt->device = KILN_DEVICE_CUDA;
            continue;
        }
        if (!is_in) { /* a zeroed buffer; on the device, no host twin */
            if ((rc = tbuf_alloc(b, tb, &k))) return rc;
            kt->data = k.p;
            if (!up) {
                memset(k.p, 0, bytes);
                continue;
            }
            kt->device = KILN_DEVICE_CUDA;
            if ((rc = b->cuda->memset(k.p, 0, bytes, b->cx.base.stream))) return rc;
            continue;
        }
        const size_t es = kiln_dtype_size(kt->dtype);
        const int from_data = t->kind == BT_CONST && t->data && kt->dtype == t->pdtype && kt->format == t->pfmt &&
                              bytes == t->bytes;
        if (up && !from_data && es && bytes % es == 0 && bytes / es > FILL_BLOCK && t->nvalues < 0) {
            if ((rc = fill_random_device(b, tb, kt, &k))) return rc;
            continue;
        }
        /* the data on the host first (a device input: a staging buffer, freed after the candidate) */
        struct tbuf h = k;
        h.loc = KILN_DEVICE_CPU;
        h.t = up ? -1 : ti;
        if (up) {
            if (!(h.p = kiln__aligned_alloc(bytes ? bytes : 64)))
                return kiln__err(KILN_ENOMEM, "timing: out of memory for %llu bytes", (unsigned long long)bytes);
            tb->mem[tb->nmem++] = h.p;
        } else if ((rc = tbuf_alloc(b, tb, &h))) {
            return rc;
        }
        void *m = h.p;
        kt->data = m;
        uint64_t n = bytes / es;
        if (from_data) {
            memcpy(m, t->data, bytes);
            if (up && (rc = bufs_upload(b, tb, kt, &k))) return rc;
            continue;
        }
        fill_random(b, m, kt->dtype, n);
        /* Shape-like integer tensors get their values at opt, so index and
         * reshape kernels see sensible data. */
        if (t->nvalues >= 0 && (uint64_t)t->nvalues == n && kt->dtype == t->dtype) {
            for (int i = 0; i < t->nvalues; i++) {
                int64_t v;
                if (kiln__b_eval(b, t->values[i], BE_OPT, -1, &v)) break;
                switch (kt->dtype) {
                case KILN_DTYPE_I64: ((int64_t *)m)[i] = v; break;
                case KILN_DTYPE_I32: ((int32_t *)m)[i] = (int32_t)v; break;
                default: break;
                }
            }
        }
        if (up && (rc = bufs_upload(b, tb, kt, &k))) return rc;
    }
    return 0;
}

_Thread_local int kiln__b_timing;

/* The timing cache key of a candidate: device, op, types, opt shapes, the
 * attributes that change timing, tactic, the version of the library the
 * tactic runs if any ("|cudnn 9.19.0"); `kind` "|aot" for the AOT kernel. */
static void timing_key(builder *b, const bl *L, const kiln_io_format *io, const char *shapes, int tactic,
                       const char *kind, char *key, size_t size) {
    char ids[1024], iot[512], lib[128] = "";
    timing_id(b, L, ids, sizeof ids);
    io_text(io, iot, sizeof iot);
    if (L->device == KILN_DEVICE_CUDA && b->cuda->tactic_library)
        b->cuda->tactic_library(L->op->ns, L->op->name, tactic, lib, sizeof lib);
    snprintf(key, size, "%s%s::%s v%d|%s|%s|id=%s|tactic=%d%s%s%s", L->device == KILN_DEVICE_CUDA ? "cuda|" : "",
             L->op->ns, L->op->name, L->op->version, iot, shapes, ids, tactic, *lib ? "|" : "", lib, kind);
    for (char *c = key; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
}

/* How time_candidate_x runs a candidate: all the config's samples; a CPU
 * layer's first pass, which recheck_cpu follows (RECHECK_REPS + 1 fewer, at
 * least one); recheck_cpu's second look (run even when the cache holds a
 * time, the lower of the two kept); late_look's, as the second but kept
 * under a key of its own (LATE_KIND), which only the region pass reads: the
 * greedy pass of a rebuild from the cache then sees the times the cold
 * build's greedy pass saw, and makes the same choices. */
enum { TIME_FULL, TIME_FIRST, TIME_RECHECK, TIME_LATE };
#define LATE_KIND "|late"

/* Time of one candidate (cache or measurement).  *ok = 0 when it failed.
 * *measured (may be NULL): 1 when it ran now; how: TIME_*. */
static int time_candidate_x(builder *b, int li, const kiln_io_format *io, int tactic, double *ms, int *ok,
                            int log_it, int how, int *measured) {
    const int retime = how == TIME_RECHECK || how == TIME_LATE;
    const bl *L = &b->l[li];
    char shapes[1024], key[3072], iot[512];
    timing_bufs tb;
    *ok = 0;
    if (measured) *measured = 0;
    int rc = bufs_make(b, li, io, &tb, shapes, sizeof shapes, 0);
    if (rc) return rc;
    timing_key(b, L, io, shapes, tactic, "", key, sizeof key);
    io_text(io, iot, sizeof iot);
    int from_build = 0;
    double before = -1;
    if (retime && !kiln__tcache_get(b->tc, key, &before, NULL)) before = -1;
    if (how == TIME_LATE) /* (before: the greedy pass's time) */
        timing_key(b, L, io, shapes, tactic, LATE_KIND, key, sizeof key);
    if (!retime && kiln__tcache_get(b->tc, key, ms, &from_build)) {
        b->st->cache_hits++;
        if (from_build) b->st->cache_dedup++;
        *ok = *ms >= 0;
        if (log_it)
            kiln__log(KILN_LOG_VERBOSE, "timing layer '%s' (%s::%s v%d) %s tactic %d: %.4f ms (%s)", L->name,
                      L->op->ns, L->op->name, L->op->version, iot, tactic, *ms,
                      from_build ? "identical instance already timed" : "timing cache");
        return 0;
    }
    double t0 = kiln__now_ms();
    rc = bufs_make(b, li, io, &tb, shapes, sizeof shapes, 1);
    double t1 = kiln__now_ms();
    b->prep_ms += t1 - t0;
    if (rc) {
        bufs_free(&tb);
        return rc;
    }
    kiln__b_timing = 1;
    int reps = b->cfg->reps;
    if (retime) reps = reps > RECHECK_REPS ? RECHECK_REPS : reps;
    if (how == TIME_FIRST) reps = reps - RECHECK_REPS - 1 > 1 ? reps - RECHECK_REPS - 1 : 1;
    rc = kiln__b_run(b, li, io, tactic, tb.in, tb.out, reps, ms);
    kiln__b_timing = 0;
    bufs_free(&tb);
    b->run_ms += kiln__now_ms() - t1;
    b->st->timed += !retime; /* candidates timed, not runs */
    if (measured) *measured = 1;
    if (rc && before >= 0) { /* a retimed candidate keeps its earlier time */
        *ms = before;
        *ok = 1;
        return 0;
    }
    if (rc) {
        kiln__log(KILN_LOG_VERBOSE, "timing layer '%s' (%s::%s v%d) %s tactic %d: failed: %s", L->name, L->op->ns,
                  L->op->name, L->op->version, iot, tactic, kiln_errmsg());
        *ms = -1;
        /* a refusal holds wherever the key does; these may pass next time */
        kiln__tcache_put_failed(b->tc, key, rc == KILN_ENOMEM || rc == KILN_EDEVICE || rc == KILN_EIO);
        return 0;
    }
    *ok = 1;
    if (log_it)
        kiln__log(KILN_LOG_VERBOSE, "timing layer '%s' (%s::%s v%d) %s tactic %d: %.4f ms%s", L->name, L->op->ns,
                  L->op->name, L->op->version, iot, tactic, *ms,
                  how == TIME_LATE ? " (a later look)" : retime ? " (recheck)" : "");
    if (before >= 0 && before < *ms) *ms = before;
    return kiln__tcache_put(b->tc, key, *ms);
}

static int time_candidate(builder *b, int li, const kiln_io_format *io, int tactic, double *ms, int *ok,
                          int log_it) {
    return time_candidate_x(b, li, io, tactic, ms, ok, log_it, TIME_FULL, NULL);
}

/* The AOT kernel's symbolic extent and scalars, evaluated at opt shapes:
 * kiln__aot_from_kernel maps each expression to an index of vals. */
typedef struct aot_vals {
    builder *b;
    int li;
    int64_t vals[KILN_MAX_SCALARS + 1];
    int n;
} aot_vals;

static int32_t aot_val_cb(void *ud, const kiln_expr *x) {
    aot_vals *v = ud;
    if (v->n > KILN_MAX_SCALARS) return kiln__err(KILN_EINTERNAL, "AOT timing: too many expressions");
    int rc = kiln__b_eval(v->b, x, BE_OPT, v->li, &v->vals[v->n]);
    return rc ? rc : v->n++;
}

/* Time layer li's AOT kernel for its chosen io/tactic: ask the op for the
 * kernel, compile it (the compile cache makes the emit's compile a hit),
 * launch it on the timing buffers; *ms = the fastest of reps samples. */
static int time_aot(builder *b, int li, double *ms) {
    const bl *L = &b->l[li];
    timing_bufs tb;
    char shapes[1024], key[3072];
    int rc = bufs_make(b, li, &L->io, &tb, shapes, sizeof shapes, 1);
    timing_key(b, L, &L->io, shapes, L->tactic, "|aot", key, sizeof key);
    int from_build = 0;
    if (!rc && kiln__tcache_get(b->tc, key, ms, &from_build)) {
        bufs_free(&tb);
        b->st->cache_hits++;
        if (from_build) b->st->cache_dedup++;
        if (*ms >= 0) return 0;
        return kiln__err(KILN_EKERNEL, "the AOT kernel failed when timed (timing cache)");
    }
    kiln_aot_kernel k;
    if (!rc) rc = kiln__b_aot_kernel(b, li, &k);
    aot_vals v = {.b = b, .li = li};
    kiln__aot ak;
    memset(&ak, 0, sizeof ak);
    if (!rc && (rc = kiln__aot_from_kernel(L->op, &k, aot_val_cb, &v, &ak)))
        rc = kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", L->name, L->op->ns, L->op->name, L->op->version);
    void *in[KILN_MAX_IO], *out[KILN_MAX_IO];
    for (int i = 0; i < L->nin; i++) in[i] = tb.in[i].data;
    for (int o = 0; o < L->nout; o++) out[o] = tb.out[o].data;
    /* As kiln__b_run: a warm-up that sizes the batch, then reps samples. */
    double t0 = kiln__now_ms(), first, times[64];
    const int prepared = !rc;
    if (!rc) rc = kiln__aot_launch(&ak, &b->exec, in, out, v.vals);
    first = kiln__now_ms() - t0;
    int iters = first >= 0.05 ? 1 : first <= 0.0005 ? 100 : (int)(0.05 / first) + 1;
    int reps = b->cfg->reps < 1 ? 1 : b->cfg->reps > 64 ? 64 : b->cfg->reps;
    for (int r = 0; r < reps && !rc; r++) {
        t0 = kiln__now_ms();
        for (int i = 0; i < iters && !rc; i++) rc = kiln__aot_launch(&ak, &b->exec, in, out, v.vals);
        times[r] = (kiln__now_ms() - t0) / iters;
    }
    bufs_free(&tb);
    kiln__aot_free(&ak);
    b->st->timed++;
    if (rc && prepared)
        rc = kiln__err_prefix(rc, "layer '%s' (%s::%s v%d): AOT kernel timing run", L->name, L->op->ns, L->op->name,
                              L->op->version);
    if (rc) return rc;
    *ms = times[0]; /* the fastest sample, as kiln__b_run on the CPU */
    for (int r = 1; r < reps; r++)
        if (times[r] < *ms) *ms = times[r];
    return kiln__tcache_put(b->tc, key, *ms);
}

/* A CPU layer whose op has both a JIT impl and an AOT kernel: unless the
 * layer or the build forces one, time the AOT kernel against the chosen
 * JIT candidate (jit_ms, < 0: not timed yet) and take the faster.  A forced
 * AOT kernel is timed too, so the engine records what it measured. */
static int choose_aot(builder *b, int li, double jit_ms) {
    bl *L = &b->l[li];
    const kiln_quick_op *q = L->op->quick;
    if (!q || !q->aot || L->device != KILN_DEVICE_CPU || L->aot == 0 || (b->cfg->flags & KILN_BUILD_NO_TIMING))
        return 0;
    unsigned f = b->cfg->flags & (KILN_BUILD_PREFER_AOT | KILN_BUILD_PREFER_JIT);
    if (L->aot < 0 && f == KILN_BUILD_PREFER_JIT) return 0;
    int forced = L->aot == 1 || f == KILN_BUILD_PREFER_AOT || !q->impl;
    double ms = 0;
    int rc = time_aot(b, li, &ms);
    if (rc) {
        if (forced) return rc;
        kiln__log(KILN_LOG_VERBOSE, "layer '%s' (%s::%s v%d): AOT kernel failed when timed, JIT kept: %s", L->name,
                  L->op->ns, L->op->name, L->op->version, kiln_errmsg());
        L->aot = 0;
        return 0;
    }
    L->aot_ms = ms;
    if (forced) {
        kiln__log(KILN_LOG_VERBOSE, "layer '%s' (%s::%s v%d): AOT kernel (forced) %.4f ms", L->name, L->op->ns,
                  L->op->name, L->op->version, ms);
        return 0;
    }
    if (jit_ms < 0) {
        int ok;
        rc = time_candidate(b, li, &L->io, L->tactic, &jit_ms, &ok, 1);
        if (rc) return rc;
        if (!ok) jit_ms = 1e30;
        else L->ms = jit_ms;
    }
    L->aot = ms < jit_ms;
    kiln__log(KILN_LOG_VERBOSE, "layer '%s' (%s::%s v%d): JIT tactic %d %.4f ms vs AOT kernel %.4f ms: chose %s",
              L->name, L->op->ns, L->op->name, L->op->version, L->tactic, jit_ms, ms, L->aot ? "AOT" : "JIT");
    return 0;
}

/* A timing-only reformat layer (never emitted). */
static int rf_timer(builder *b) {
    static const char nm[] = "(reformat timing)";
    for (int i = 0; i < b->nl; i++)
        if (b->l[i].is_reformat && b->l[i].dead == 2) return i;
    int li = kiln__b_new_layer(b, nm, b->reformat_op, 1, 1);
    if (li < 0) return li;
    bl *L = &b->l[li];
    L->dead = 2;
    L->is_reformat = 1;
    L->has_own = 1;
    int rc = kiln__attrset_init(&L->own, b->reformat_op);
    if (rc) return rc;
    L->attrs = &L->own;
    kiln_attrs view = kiln__attrset_view(L->attrs);
    rc = kiln__op_create(b->reformat_op, &view, &L->state);
    return rc ? rc : li;
}

/* Time of the reformat tensor t needs to go from (from, ffmt) to (dt, fmt)
 * for a consumer on `device` (reformat_cost: from the type and format its
 * producer chose).  A float cast between two LINEAR tensors for a GPU consumer
 * runs on the GPU (reformat_cuda.c), so it is timed there: timed on the
 * host, a cast of a large activation cost hundreds of microseconds instead
 * of a few, and an --fp16 build kept every layer in FP32 (ResNet-50). */
static int cast_cost(builder *b, int t, kiln_dtype from, kiln_format ffmt, kiln_dtype dt, kiln_format fmt,
                     kiln_device_kind device, double *ms) {
    const bt *x = &b->t[t];
    *ms = 0;
    if (from == dt && ffmt == fmt) return 0;
    if (x->kind == BT_CONST) return 0; /* converted once, at build time */
    int li = rf_timer(b);
    if (li < 0) return li;
    bl *L = &b->l[li];
    L->device = device == KILN_DEVICE_CUDA && b->cuda && cuda_format_ok(b, &b->t[t], ffmt) && cuda_format_ok(b, &b->t[t], fmt)
                    ? KILN_DEVICE_CUDA
                    : KILN_DEVICE_CPU;
    L->in[0] = t;
    L->out[0] = t;
    kiln_io_format io = {.n = 2};
    io.dtype[0] = from;
    io.format[0] = ffmt;
    io.dtype[1] = dt;
    io.format[1] = fmt;
    int ok;
    int rc = time_candidate(b, li, &io, 0, ms, &ok, 0);
    if (!rc && !ok) *ms = 1e9;
    return rc;
}

static int reformat_cost(builder *b, int t, kiln_dtype dt, kiln_format fmt, kiln_device_kind device, double *ms) {
    const bt *x = &b->t[t];
    *ms = 0;
    if (fmt == KILN_FORMAT_LINEAR && x->pfmt == KILN_FORMAT_LINEAR && dt < 32 && (x->cast_to >> dt & 1u))
        return 0; /* an earlier consumer's cast serves this one too */
    return cast_cost(b, t, x->pdtype, x->pfmt, dt, fmt, device, ms);
}

int kiln__b_cuda_aot_wanted(const builder *b, const bl *L) {
    const kiln_quick_op *q = L->op->quick;
    if (!b->cuda || !q || !q->cuda_aot || L->aot == 0) return 0;
    unsigned f = b->cfg->flags & (KILN_BUILD_PREFER_AOT | KILN_BUILD_PREFER_JIT);
    return L->aot == 1 || f == KILN_BUILD_PREFER_AOT || (!q->cuda_impl && f != KILN_BUILD_PREFER_JIT);
}

/* Does the op's CUDA implementation cover layer L beyond its types (its
 * cuda_check; a built-in op must state its CUDA types, kiln__op_cuda_check)?
 * *why says why not. */
int kiln__b_cuda_covers(const bl *L, const char **why) {
    *why = NULL;
    if (!kiln__op_has_device(L->op, KILN_DEVICE_CUDA)) return 0;
    return !kiln__op_cuda_check(L->op, L->state, why);
}

/* Placement: a CUDA build runs a layer on the GPU when its op has a CUDA
 * implementation that covers the layer (kiln__b_cuda_covers) with a combination
 * for its types (and it is not forced to a CPU AOT kernel), else on the
 * CPU.  Leaves the candidates of the chosen device in cl. */
static int place(builder *b, int li, cand_list *cl) {
    bl *L = &b->l[li];
    L->device = KILN_DEVICE_CPU;
    if (kiln__b_cuda_aot_wanted(b, L)) { /* AOT CUDA kernel: always on the GPU */
        L->device = KILN_DEVICE_CUDA;
        L->aot = 1;
        return enum_candidates(b, li, cl);
    }
    const char *why = NULL;
    if (b->cuda && L->aot != 1 && kiln__b_cuda_covers(L, &why)) {
        L->device = KILN_DEVICE_CUDA;
        int rc = enum_candidates(b, li, cl);
        if (!rc && cl->n) return 0;
        why = rc ? kiln_errmsg() : "no CUDA combination for its types";
        L->device = KILN_DEVICE_CPU;
        cl->n = 0;
    }
    if (why)
        kiln__log(KILN_LOG_VERBOSE, "layer '%s' (%s::%s v%d): on the CPU: %s", L->name, L->op->ns, L->op->name,
                  L->op->version, why);
    return enum_candidates(b, li, cl);
}

/* The 16-bit type a reduced-precision build prefers (FP16 over BF16 when
 * both are allowed), KILN_DTYPE_UNDEFINED in an FP32 build. */
static kiln_dtype reduced_type(const builder *b) {
    return (b->cfg->flags & KILN_BUILD_FP16)   ? KILN_DTYPE_F16
           : (b->cfg->flags & KILN_BUILD_BF16) ? KILN_DTYPE_BF16
                                               : KILN_DTYPE_UNDEFINED;
}

/* Would layer ci read its input p in type dt on the GPU (the device place()
 * will give it, a combination with dt there)?  Asked before ci's own turn:
 * its device is restored afterwards. */
static int gpu_takes(builder *b, int ci, int p, kiln_dtype dt, int fmt) {
    bl *C = &b->l[ci];
    const char *why;
    if (!C->op->quick || !b->cuda || C->aot == 1) return 0;
    if (!kiln__b_cuda_aot_wanted(b, C) && !kiln__b_cuda_covers(C, &why)) return 0;
    kiln_device_kind saved = C->device;
    C->device = KILN_DEVICE_CUDA;
    cand_list cl = {0};
    int yes = 0;
    if (!enum_candidates(b, ci, &cl))
        for (int k = 0; k < cl.n && !yes; k++)
            yes = (dt == KILN_DTYPE_UNDEFINED || cl.c[k].io.dtype[p] == dt) && (fmt < 0 || (int)cl.c[k].io.format[p] == fmt);
    kiln__free(cl.c);
    C->device = saved;
    return yes;
}

/* Does a later GPU layer read tensor t and take it in type dt (UNDEFINED:
 * any) and layout fmt (-1: any)? */
static int consumer_takes(builder *b, int li, int t, kiln_dtype dt, int fmt) {
    for (int ci = li + 1; ci < b->nl; ci++) {
        const bl *C = &b->l[ci];
        if (C->dead) continue;
        for (int p = 0; p < C->nin; p++)
            if (C->in[p] == t && gpu_takes(b, ci, p, dt, fmt)) return 1;
    }
    return 0;
}

/* Does io keep a tensor that is FP32 by its logical type in FP32? */
static int keeps_f32(const builder *b, const bl *L, const kiln_io_format *io) {
    for (int p = 0; p < io->n; p++) {
        int t = pos_tensor(L, p);
        if (t >= 0 && b->t[t].dtype == KILN_DTYPE_F32 && !b->t[t].is_size && io->dtype[p] == KILN_DTYPE_F32) return 1;
    }
    return 0;
}

/* A reduced-precision build, a GPU layer: when every activation input that
 * is FP32 by its logical type already arrives in the reduced type, the
 * precision is decided -- FP32 candidates would pay a cast per input to
 * undo it.  They are moved behind the others; the count of the others is
 * returned (cl->n when nothing moved): only they are timed, the FP32 ones
 * only if every one of them fails. */
static int drop_decided(builder *b, int li, cand_list *cl) {
    const bl *L = &b->l[li];
    kiln_dtype rt = reduced_type(b);
    if (rt == KILN_DTYPE_UNDEFINED || L->device != KILN_DEVICE_CUDA) return cl->n;
    int nact = 0;
    for (int p = 0; p < L->nin; p++) {
        if (L->in[p] < 0) continue;
        const bt *t = &b->t[L->in[p]];
        if (t->kind == BT_CONST || t->dtype != KILN_DTYPE_F32 || t->is_size) continue;
        if (t->pdtype != rt) return cl->n;
        nact++;
    }
    if (!nact) return cl->n;
    cand *tmp = kiln__malloc((size_t)cl->n * sizeof *tmp);
    if (!tmp) return cl->n; /* (nothing moved: all are timed) */
    int n = 0, m = 0;
    for (int k = 0; k < cl->n; k++)
        if (!keeps_f32(b, L, &cl->c[k].io)) cl->c[n++] = cl->c[k];
        else tmp[m++] = cl->c[k];
    memcpy(cl->c + n, tmp, (size_t)m * sizeof *tmp);
    kiln__free(tmp);
    if (n == 0 || m == 0) return cl->n;
    kiln__log(KILN_LOG_VERBOSE, "layer '%s': inputs already %s: %d FP32 candidates not timed", L->name,
              kiln__b_dtype_upper(rt), m);
    return n;
}

/* Bit o set: output o of GPU layer li is an FP32 activation a later GPU
 * layer could read in the build's 16-bit type (lookahead_cost). */
static unsigned lookahead_outputs(builder *b, int li) {
    const bl *L = &b->l[li];
    kiln_dtype rt = reduced_type(b);
    unsigned m = 0;
    if (rt == KILN_DTYPE_UNDEFINED || L->device != KILN_DEVICE_CUDA) return 0;
    for (int o = 0; o < L->nout && o < 32; o++) {
        const bt *x = &b->t[L->out[o]];
        if (x->dtype == KILN_DTYPE_F32 && !x->is_size && consumer_takes(b, li, L->out[o], rt, -1)) m |= 1u << o;
    }
    return m;
}

/* The same look-ahead for layouts: bit o set when output o of GPU layer li
 * is a 4-D activation a later GPU layer could read in NHWC.  A candidate
 * writing it LINEAR is charged the LINEAR -> NHWC reformat that layer
 * would otherwise pay: without it the greedy choice never leaves LINEAR
 * (each layer, given LINEAR inputs, finds its NHWC candidate dearer by the
 * reformat of its input), so a chain of NHWC convs could not start. */
static unsigned nhwc_outputs(builder *b, int li) {
    const bl *L = &b->l[li];
    unsigned m = 0;
    if (L->device != KILN_DEVICE_CUDA || b->nhwc == NHWC_OFF) return 0;
    for (int o = 0; o < L->nout && o < 32; o++) {
        const bt *x = &b->t[L->out[o]];
        if (cuda_format_ok(b, x, KILN_FORMAT_NHWC) && x->kind == BT_ACT && !x->is_output &&
            consumer_takes(b, li, L->out[o], KILN_DTYPE_UNDEFINED, KILN_FORMAT_NHWC))
            m |= 1u << o;
    }
    return m;
}

static int nhwc_lookahead_cost(builder *b, int li, unsigned outs, const kiln_io_format *io, double *ms) {
    const bl *L = &b->l[li];
    *ms = 0;
    for (int o = 0; o < L->nout && o < 32; o++) {
        kiln_dtype dt = io->dtype[L->nin + o];
        if (!(outs >> o & 1u) || io->format[L->nin + o] != KILN_FORMAT_LINEAR) continue;
        double c;
        int rc = cast_cost(b, L->out[o], dt, KILN_FORMAT_LINEAR, dt, KILN_FORMAT_NHWC, KILN_DEVICE_CUDA, &c);
        if (rc) return rc;
        *ms += c;
    }
    return 0;
}

/* Look-ahead for the greedy choice: a GPU candidate that leaves an FP32
 * output in FP32 while a later GPU layer could read it in the build's
 * 16-bit type is charged the cast that layer would otherwise need.
 * Without it, FP32 spread from the network input through the residual
 * stream: each layer found its FP32 candidate cheapest given FP32 inputs
 * (no cast on its side), and BERT's --fp16 engine ran LayerNorm, the
 * attention and the QKV copies in FP32 between 96 casts per run. */
static int lookahead_cost(builder *b, int li, unsigned outs, const kiln_io_format *io, double *ms) {
    const bl *L = &b->l[li];
    kiln_dtype rt = reduced_type(b);
    *ms = 0;
    for (int o = 0; o < L->nout && o < 32; o++) {
        kiln_dtype dt = io->dtype[L->nin + o];
        if (!(outs >> o & 1u) || dt == rt) continue;
        double c;
        int rc = cast_cost(b, L->out[o], dt, io->format[L->nin + o], rt, KILN_FORMAT_LINEAR, KILN_DEVICE_CUDA, &c);
        if (rc) return rc;
        *ms += c;
    }
    return 0;
}

/* First-pass result of one candidate: kernel time, reformat cost on top,
 * rank factor (FP32_TIE_MARGIN), whether it has a time and whether it ran
 * now (not from the timing cache). */
typedef struct cand_time {
    double ms, extra, mult;
    char ok, measured;
} cand_time;

/* A CPU layer whose candidates ran now: each one with a time runs once
 * more after all of them ran (kiln__b_run's second look: the warm-up and
 * one sample, or the warm-up alone where it is already over
 * BUILD_CUT_FACTOR times the fastest), keeping its fastest sample, and the
 * choice is made again.  Another process's burst of work (a compiler on a
 * 2-core machine) then has to hit every sample of both passes of the right
 * tactic to lose it; a single pass picked a 5.7 ms tactic over a 0.94 ms
 * one.  Every candidate, not only the close ones: the right one may have
 * run first, under the burst, and been measured many times too slow.
 * *best: in, the first pass's choice; out, the final one. */
static int recheck_cpu(builder *b, int li, const cand_list *cl, cand_time *ct, int *best) {
    const bl *L = &b->l[li];
    int nre = 0, nmeasured = 0;
    for (int k = 0; k < cl->n; k++) {
        nre += ct[k].ok;
        nmeasured += ct[k].measured;
    }
    if (L->device != KILN_DEVICE_CPU || nre < 2 || !nmeasured) return 0;
    const double first_ms = ct[*best].ms, t0 = kiln__now_ms();
    double fastest = first_ms; /* the fastest kernel (the best may pay reformats) */
    for (int k = 0; k < cl->n; k++)
        if (ct[k].ok && ct[k].ms < fastest) fastest = ct[k].ms;
    for (int k = 0; k < cl->n; k++) {
        if (!ct[k].ok) continue;
        double ms;
        int ok;
        b->cut_ms = fastest;
        b->recheck = 1;
        int rc = time_candidate_x(b, li, &cl->c[k].io, cl->c[k].tactic, &ms, &ok, 1, TIME_RECHECK, NULL);
        b->cut_ms = 0;
        b->recheck = 0;
        if (rc) return rc;
        if (ok && ms < ct[k].ms) ct[k].ms = ms;
        if (ct[k].ms < fastest) fastest = ct[k].ms;
    }
    const int was = *best;
    for (int k = 0; k < cl->n; k++)
        if (ct[k].ok && (ct[k].ms + ct[k].extra) * ct[k].mult < (ct[*best].ms + ct[*best].extra) * ct[*best].mult)
            *best = k;
    b->nrecheck += nre;
    b->recheck_ms += kiln__now_ms() - t0;
    if (*best != was) {
        b->nrechosen++;
        kiln__log(KILN_LOG_VERBOSE, "layer '%s': recheck of %d candidates: tactic %d (%.4f ms) replaces tactic %d "
                  "(%.4f ms after the recheck, %.4f ms before)", L->name, nre, cl->c[*best].tactic, ct[*best].ms,
                  cl->c[was].tactic, ct[was].ms, first_ms);
    }
    return 0;
}

/* ------------------------------------------------------------ regions */

/* region.c's inputs, gathered during the greedy pass: for a timed CPU
 * layer, its best candidate with all activations in each layout (the
 * candidates were timed anyway: the region pass times only reformats). */
typedef struct layer_alt {
    double ms[KILN__RG_LABELS];
    int at[KILN__RG_LABELS];          /* index into the pool of candidates, -1: none */
    char measured[KILN__RG_LABELS];   /* 1: its time was measured in this build (not the timing cache's) */
    int greedy;                       /* the greedy choice's label */
    int nlabels;                      /* labels offered (>= 2: a node that may switch) */
} layer_alt;

typedef struct region_in {
    layer_alt *alt; /* b->nl entries */
    cand *pool;
    int npool, cap;
} region_in;

/* The label of candidate io of layer L next to the greedy choice g: layout
 * f when every activation (present, not a constant) is in f with g's type
 * and every constant as in g; -1 otherwise.  A network input read LINEAR
 * does not decide the label (Conv tactic 17: the image LINEAR, Y NCHW16C,
 * so that a region may start at the stem; region_edge costs that edge by
 * the candidate's real formats). */
static int uniform_label(const builder *b, const bl *L, const kiln_io_format *io, const kiln_io_format *g) {
    int f = -1;
    for (int p = 0; p < io->n; p++) {
        const int t = pos_tensor(L, p);
        if (t < 0) continue;
        if (io->dtype[p] != g->dtype[p]) return -1;
        if (b->t[t].kind == BT_CONST) {
            if (io->format[p] != g->format[p]) return -1;
            continue;
        }
        if (b->t[t].kind == BT_INPUT && io->format[p] == KILN_FORMAT_LINEAR) continue;
        if (f >= 0 && (int)io->format[p] != f) return -1;
        f = io->format[p];
    }
    return f < 0 ? KILN_FORMAT_LINEAR : f;
}

/* After a timed CPU layer's choice (best of cl): its best candidate per
 * label into ri (kept only when it offers two labels or more). */
static int region_note(builder *b, int li, const cand_list *cl, const cand_time *ct, int best, region_in *ri) {
    const bl *L = &b->l[li];
    layer_alt *a = &ri->alt[li];
    const int start = ri->npool;
    for (int f = 0; f < KILN__RG_LABELS; f++) {
        a->ms[f] = -1;
        a->at[f] = -1;
    }
    a->nlabels = 0;
    if (L->device != KILN_DEVICE_CPU || L->aot == 1) return 0;
    int g = uniform_label(b, L, &cl->c[best].io, &cl->c[best].io);
    a->greedy = g = g < 0 ? KILN__RG_KEEP : g;
    for (int k = 0; k < cl->n; k++) {
        const int f = k == best ? g : uniform_label(b, L, &cl->c[k].io, &cl->c[best].io);
        if (!ct[k].ok || f < 0 || (f == g && k != best) || (a->at[f] >= 0 && a->ms[f] <= ct[k].ms)) continue;
        if (a->at[f] < 0) {
            a->nlabels++;
            cand *n = kiln__grow(ri->pool, &ri->cap, ri->npool + 1, sizeof *ri->pool);
            if (!n) return kiln__err(KILN_ENOMEM, "build: out of memory");
            ri->pool = n;
            a->at[f] = ri->npool++;
        }
        ri->pool[a->at[f]] = cl->c[k];
        a->ms[f] = ct[k].ms;
        a->measured[f] = ct[k].measured;
    }
    if (a->nlabels < 2) { /* nothing to switch to */
        ri->npool = start;
        for (int f = 0; f < KILN__RG_LABELS; f++) a->at[f] = -1;
        a->nlabels = 0;
    }
    return 0;
}

/* The types and layouts layer li runs with under `label`. */
static const kiln_io_format *label_io(const builder *b, const region_in *ri, int li, int label) {
    const layer_alt *a = &ri->alt[li];
    return a->nlabels && label != a->greedy ? &ri->pool[a->at[label]].io : &b->l[li].io;
}

static int node_label(const builder *b, const region_in *ri, int li) {
    if (ri->alt[li].nlabels) return ri->alt[li].greedy;
    const int g = uniform_label(b, &b->l[li], &b->l[li].io, &b->l[li].io);
    return g < 0 ? KILN__RG_KEEP : g;
}

/* The edge of tensor t from its producer P (-1: a network input) to
 * consumer C's input q (C -1: the network output): reformat times for the
 * labels each end offers. */
static int region_edge(builder *b, const region_in *ri, const int *nid, int t, int C, int q, kiln__rg_edge *e) {
    const bt *x = &b->t[t];
    const int P = x->producer >= 0 && !b->l[x->producer].dead ? x->producer : -1;
    int po = -1;
    for (int o = 0; P >= 0 && o < b->l[P].nout; o++)
        if (b->l[P].out[o] == t) po = b->l[P].nin + o;
    memset(e, 0, sizeof *e);
    e->from = P >= 0 && po >= 0 ? nid[P] : -1;
    e->to = C >= 0 ? nid[C] : -1;
    for (int a = 0; a < KILN__RG_LABELS; a++) {
        const int pa = e->from >= 0 ? (ri->alt[P].nlabels ? ri->alt[P].ms[a] >= 0 : a == node_label(b, ri, P))
                                    : a == KILN_FORMAT_LINEAR;
        for (int c = 0; c < KILN__RG_LABELS && pa; c++) {
            const int cb = C >= 0 ? (ri->alt[C].nlabels ? ri->alt[C].ms[c] >= 0 : c == node_label(b, ri, C))
                                  : c == KILN_FORMAT_LINEAR;
            if (!cb) continue;
            kiln_dtype fd = x->dtype, td = x->dtype;
            kiln_format ff = KILN_FORMAT_LINEAR, tf = KILN_FORMAT_LINEAR;
            if (e->from >= 0) {
                fd = label_io(b, ri, P, a)->dtype[po];
                ff = label_io(b, ri, P, a)->format[po];
            }
            kiln_device_kind dev = KILN_DEVICE_CPU;
            if (C >= 0) {
                td = label_io(b, ri, C, c)->dtype[q];
                tf = label_io(b, ri, C, c)->format[q];
                dev = kiln__b_pos_loc(&b->l[C], q);
            }
            int rc = cast_cost(b, t, fd, ff, td, tf, dev, &e->rf[a][c]);
            if (rc) return rc;
        }
    }
    return 0;
}

/* refine.c's close tactics of layer li were for its greedy layouts: not
 * tried in the network once a region switched it. */
static void refine_forget(b_refine *rf, int li) {
    int n = 0;
    for (int i = 0; i < rf->n; i++) {
        if (rf->l[i].li != li) {
            rf->l[n++] = rf->l[i];
            continue;
        }
        kiln__free(rf->l[i].name);
        kiln__free(rf->l[i].key);
        kiln__free(rf->l[i].pool);
    }
    rf->n = n;
}

static int switchable(const region_in *ri, int li) { return li >= 0 && ri->alt[li].nlabels > 0; }

/* Will fuse.c (after selection) fold layer C into the layer that produces
 * its inputs, but only where both run in one layout?  C is an epilogue of
 * one activation input X, the only use of a producer that takes epilogues
 * or is itself folded into one (a chain: Conv <- Add <- Relu); or a
 * residual Add of X, the later producer's output, read once, by a producer
 * that takes epilogues, where both inputs tie it (R must arrive in C's
 * layout too: fuse.c leaves the Add alone where R needs a reformat).  The
 * region pass then moves C's time onto those edges: nothing in the tied
 * layout (fused), its kernel plus the reformat in another.  Without it the
 * cut put the border between a 16c Conv and its Relu as often as after it
 * (the same reformat) and the Relu ran unfused (ResNet-50, Conv tactic
 * 13), and a block whose downsample stayed LINEAR ran its Add and Relu
 * unfused in NCHW16C. */
static int fuses_into(const builder *b, const int *uses, int C, int depth) {
    const bl *L = &b->l[C];
    if (!L->op->quick || L->nout != 1 || depth > KILN__MAX_EPI) return 0;
    int nact = 0, X = -1;
    for (int p = 0; p < L->nin; p++) {
        const int x = L->in[p];
        if (x < 0 || b->t[x].kind == BT_CONST) continue;
        nact++;
        if (X < 0 || b->t[x].producer > b->t[X].producer) X = x;
    }
    const int P = X >= 0 ? b->t[X].producer : -1;
    if (P < 0 || b->l[P].dead || !b->l[P].op->quick || b->l[P].nout != 1 || uses[X] != 1 || b->t[X].is_output)
        return 0;
    const int takes = b->l[P].op->quick->accepts_epilogue;
    if (nact == 1) return L->op->quick->epilogue && (takes || fuses_into(b, uses, P, depth + 1));
    return nact == 2 && takes && !strcmp(L->op->ns, "ai.onnx") && !strcmp(L->op->name, "Add");
}

/* A region's verdict from the in-network check (refine.c), read once the
 * cut has chosen: region c of comp (the layers whose label went from lab0
 * to lab1) is kept or reverted as the timing cache says under its key
 * (its layers, their tactics and layouts, the network, the threads); a
 * first pass lists an unknown one for refine.c and keeps it; a variant
 * pass reverts those refine.c names.  Without refine.c's part (a CUDA
 * build, $KILN_REGION_CHECK=off) the isolated costs decide.  1: revert. */
static int region_verdict(builder *b, const region_in *ri, const int *nid, const kiln__rg_node *nodes, int nn,
                          const kiln__rg_edge *edges, int ne, const int *lab0, const int *lab1, const int *comp, int c,
                          int *revert) {
    b_refine *rf = b->rf;
    *revert = 0;
    if (!rf || !rf->regions) return 0;
    uint64_t h = 1469598103934665603ull;
    int n = 0, first = -1;
    for (int li = 0; li < b->nl; li++) {
        if (nid[li] < 0 || comp[nid[li]] != c) continue;
        const int f = lab1[nid[li]];
        const int tactic = ri->pool[ri->alt[li].at[f]].tactic;
        h = fnv_bytes(h, b->l[li].name, strlen(b->l[li].name) + 1);
        h = fnv_bytes(h, &tactic, sizeof tactic);
        h = fnv_bytes(h, &f, sizeof f);
        if (first < 0) first = li;
        n++;
    }
    if (first < 0) return 0; /* (every layer of a region the cut switched was then an island's) */
    const int label = lab1[nid[first]];
    const char *lname = label == KILN__RG_KEEP ? "mixed" : kiln_format_name((kiln_format)label);
    char key[600];
    snprintf(key, sizeof key, "region|net=%016llx|threads=%d|%s|first=%s|n=%d|%016llx",
             (unsigned long long)b->net_digest, b->cfg->threads, lname, b->l[first].name, n, (unsigned long long)h);
    const double before = kiln__rg_cost(nodes, nn, edges, ne, comp, c, lab0);
    const double after = kiln__rg_cost(nodes, nn, edges, ne, comp, c, lab1);
    double v;
    if (kiln__tcache_get(b->tc, key, &v, NULL)) {
        *revert = v == 0;
        kiln__log(KILN_LOG_VERBOSE, "region of %d layers from '%s' (%s, isolated %.4f -> %.4f ms): %s (checked in "
                  "the network, timing cache)", n, b->l[first].name, lname, before, after, *revert ? "reverted" : "kept");
        return 0;
    }
    for (int k = 0; k < rf->nrevert; k++) *revert |= !strcmp(rf->revert[k], key);
    if (!rf->collect) return 0;
    b_region r = {.key = kiln__strdup(key), .names = kiln__calloc((size_t)n, sizeof(char *)), .label = label,
                  .before = before, .after = after};
    int rc = r.key && r.names ? 0 : KILN_ENOMEM;
    for (int li = 0; li < b->nl && !rc; li++)
        if (nid[li] >= 0 && comp[nid[li]] == c && !(r.names[r.nnames++] = kiln__strdup(b->l[li].name))) rc = KILN_ENOMEM;
    b_region *g = rc ? NULL : kiln__grow(rf->r, &rf->capr, rf->nr + 1, sizeof *rf->r);
    if (g) {
        rf->r = g;
        rf->r[rf->nr++] = r;
        return 0;
    }
    for (int k = 0; k < r.nnames; k++) kiln__free(r.names[k]);
    kiln__free(r.names);
    kiln__free(r.key);
    return kiln__err(KILN_ENOMEM, "build: out of memory");
}

/* The time the timing cache holds for a candidate of layer li after
 * late_look (its LATE_KIND key): 0, or -1 (none: *ms untouched). */
static int late_time(builder *b, int li, const kiln_io_format *io, int tactic, double *ms) {
    char shapes[1024], key[3072];
    timing_bufs tb;
    int rc = bufs_make(b, li, io, &tb, shapes, sizeof shapes, 0);
    if (rc) return rc;
    timing_key(b, &b->l[li], io, shapes, tactic, LATE_KIND, key, sizeof key);
    bufs_free(&tb);
    return kiln__tcache_get(b->tc, key, ms, NULL) ? 0 : -1;
}

/* A later look at the region pass's inputs: each switchable layer's best
 * candidate per layout, measured in this build, runs once more now that
 * the greedy pass is over (recheck_cpu's second look: the warm-up and a
 * sample, the lower time kept, under its own key: TIME_LATE), and every
 * label then takes that time where the cache has one (an identical
 * instance's look lowers its twins'; a rebuild from the cache, which runs
 * nothing, reads the cold build's).  The
 * greedy pass times a layer's candidates within a few milliseconds, all
 * in one of the host's stretches; in a slow one the 16c kernels lose more
 * than the NCHW ones (Conv tactic 13 0.85 against tactic 1's 0.79 ms on
 * ResNet-50's layer3 conv3, 0.62 against 0.67 in a quiet one), and the cut
 * left layer3 in NCHW in 2 of 16 builds of ResNet-50 at 1 thread, an
 * engine 3.5% slower (bench/README.md, session 27).  A look seconds later
 * often falls in another stretch.  Nothing runs for times from the cache
 * (a rebuild) or in a variant pass of the in-network check. */
static int late_look(builder *b, region_in *ri) {
    int nre = 0, nlower = 0, rc = 0;
    const double t0 = kiln__now_ms();
    /* in the greedy pass's order, so that the instance it measured runs
     * before the identical ones that read its time back */
    for (int li = 0; li < b->nl && !rc; li++) {
        layer_alt *a = &ri->alt[li];
        if (b->l[li].dead || !switchable(ri, li)) continue;
        double fastest = -1;
        for (int f = 0; f < KILN__RG_LABELS; f++)
            if (a->at[f] >= 0 && a->ms[f] >= 0 && (fastest < 0 || a->ms[f] < fastest)) fastest = a->ms[f];
        for (int f = 0; f < KILN__RG_LABELS && !rc; f++) {
            if (a->at[f] < 0 || a->ms[f] < 0) continue;
            const cand *c = &ri->pool[a->at[f]];
            double ms = a->ms[f];
            if (a->measured[f]) {
                int ok;
                b->cut_ms = fastest;
                b->recheck = 1;
                rc = time_candidate_x(b, li, &c->io, c->tactic, &ms, &ok, 1, TIME_LATE, NULL);
                b->cut_ms = 0;
                b->recheck = 0;
                if (!ok) ms = a->ms[f];
                nre++;
            } else if ((rc = late_time(b, li, &c->io, c->tactic, &ms)) < 0) {
                rc = 0;
            }
            if (!rc && ms >= 0 && ms < a->ms[f]) {
                nlower++;
                a->ms[f] = ms;
            }
        }
    }
    if (nre)
        kiln__log(KILN_LOG_VERBOSE, "regions: a later look at %d candidates (the best per layout of each switchable "
                  "layer) lowered %d layouts' times (%.2f s)", nre, nlower, (kiln__now_ms() - t0) / 1000);
    return rc;
}

/* The region pass (region.h): after the greedy choice, connected layers
 * that are cheaper together in another layout, the reformats at their
 * border counted, are switched to it.  Nothing to do (and nothing timed)
 * unless some CPU layer offered two layouts.  Each region left switched
 * is then checked in the network (region_verdict, refine.c). */
static int select_regions(builder *b, region_in *ri) {
    const char *env = getenv("KILN_REGIONS"); /* "off": the greedy choice alone (A/B) */
    if (env && !strcmp(env, "off")) return 0;
    /* a build that forces blocked CPU candidates (the 16c tests' switches)
     * keeps them: the pass would switch a slower forced layer back */
    if (kiln__b_blocked_force()) return 0;
    int nsw = 0;
    for (int li = 0; li < b->nl; li++) nsw += !b->l[li].dead && switchable(ri, li);
    if (!nsw) return 0;
    const int late_rc = late_look(b, ri);
    if (late_rc) return late_rc;
    const double t0 = kiln__now_ms();
    int *nid = kiln__malloc((size_t)b->nl * sizeof *nid), nn = 0, ne = 0, cap = 0;
    kiln__rg_node *nodes = kiln__malloc((size_t)b->nl * sizeof *nodes);
    int *region = kiln__malloc((size_t)b->nl * sizeof *region);
    kiln__rg_edge *edges = NULL;
    int rc = nid && nodes && region ? 0 : kiln__err(KILN_ENOMEM, "build: out of memory");
    int *uses = kiln__malloc(((size_t)b->nt + 1) * sizeof *uses);
    if (!rc && !uses) rc = kiln__err(KILN_ENOMEM, "build: out of memory");
    if (!rc) kiln__b_count_uses(b, uses);
    for (int li = 0; li < b->nl && !rc; li++) {
        nid[li] = -1;
        if (b->l[li].dead) continue;
        kiln__rg_node *n = &nodes[nn];
        for (int f = 0; f < KILN__RG_LABELS; f++) n->ms[f] = switchable(ri, li) ? ri->alt[li].ms[f] : -1;
        n->label = node_label(b, ri, li);
        if (!switchable(ri, li)) n->ms[n->label] = 0; /* fixed: a constant of every split */
        nid[li] = nn++;
    }
    struct fixed_reader {
        int t;
        uint32_t target; /* dtype << 8 | layout */
    } *fixed = NULL;
    int nfixed = 0, capfixed = 0;
    /* edges touching a switchable layer: its inputs, the readers of its outputs */
    for (int C = 0; C < b->nl && !rc; C++) {
        const bl *L = &b->l[C];
        if (L->dead) continue;
        for (int q = 0; q < L->nin + L->nout && !rc; q++) {
            const int t = pos_tensor(L, q), out = q >= L->nin;
            if (t < 0 || b->t[t].kind == BT_CONST) continue;
            const int P = b->t[t].producer;
            if (out ? !(b->t[t].is_output && switchable(ri, C)) : !(switchable(ri, C) || switchable(ri, P))) continue;
            /* Readers of one layout that cannot switch (the network output:
             * LINEAR) share one reformat of t (emit makes one per layout):
             * one edge for them all.  Counted per reader, a 16c Relu whose
             * output two stride-2 convs read paid two reformats, and the
             * cut put the border before it, unfused (ResNet-18). */
            const int fused = !out && fuses_into(b, uses, C, 0);
            const uint32_t target = out ? (uint32_t)b->t[t].dtype << 8
                                        : (uint32_t)L->io.dtype[q] << 8 | (uint32_t)L->io.format[q];
            int dup = 0;
            if (!fused && (out || !switchable(ri, C)))
                for (int k = 0; k < nfixed && !dup; k++) dup = fixed[k].t == t && fixed[k].target == target;
            if (dup) continue;
            kiln__rg_edge *grown = kiln__grow(edges, &cap, ne + 1, sizeof *edges);
            struct fixed_reader *fg = kiln__grow(fixed, &capfixed, nfixed + 1, sizeof *fixed);
            if (grown) edges = grown;
            if (fg) fixed = fg;
            if (!grown || !fg) {
                rc = kiln__err(KILN_ENOMEM, "build: out of memory");
                break;
            }
            if (!fused && (out || !switchable(ri, C))) fixed[nfixed++] = (struct fixed_reader){.t = t, .target = target};
            rc = out ? region_edge(b, ri, nid, t, -1, -1, &edges[ne]) : region_edge(b, ri, nid, t, C, q, &edges[ne]);
            if (!rc && fused) { /* C's time moves onto the edge: paid where unfused */
                kiln__rg_node *n = &nodes[nid[C]];
                for (int c = 0; c < KILN__RG_LABELS; c++) {
                    if (n->ms[c] < 0) continue;
                    const double own = switchable(ri, C) ? ri->alt[C].ms[c] : L->ms; /* (n->ms: 0 after a first tie) */
                    for (int a = 0; a < KILN__RG_LABELS; a++) edges[ne].rf[a][c] += a != c ? own : 0;
                    n->ms[c] = 0;
                }
            }
            ne += !rc;
        }
    }
    int nreg = 0, ncomp = 0, nregc = 0, nheal = 0;
    kiln__rg_region reg[64];
    /* labels: greedy, final, each node's connected set of switched layers,
     * after the cut (before the islands), scratch; the regions the cut
     * leaves switched (greedy -> cut), then the islands (cut -> final) */
    int *lab = kiln__malloc((size_t)(5 * nn + 1) * sizeof *lab), *revert = NULL;
    int *const fin = lab + nn, *const comp = lab + 2 * nn, *const cut = lab + 3 * nn, *const isl = lab + 4 * nn;
    if (!rc && !lab) rc = KILN_ENOMEM;
    for (int i = 0; i < nn && !rc; i++) lab[i] = nodes[i].label;
    if (!rc) rc = kiln__rg_solve(nodes, nn, edges, ne, REGION_MARGIN, reg, 64, &nreg, region);
    for (int i = 0; i < nn && !rc; i++) cut[i] = nodes[i].label;
    if (!rc && b->rf && b->rf->regions && (nheal = kiln__rg_heal(nodes, nn, edges, ne, ISLAND_RATIO)) < 0)
        rc = nheal;
    for (int i = 0; i < nn && !rc; i++) fin[i] = nodes[i].label;
    if (!rc) rc = nregc = kiln__rg_components(nn, edges, ne, lab, cut, comp);
    if (rc >= 0) rc = ncomp = kiln__rg_components(nn, edges, ne, cut, fin, isl);
    for (int i = 0; i < nn && rc >= 0; i++)
        if (isl[i] >= 0) comp[i] = nregc + isl[i];
    if (rc >= 0) ncomp += nregc;
    if (rc == KILN_ENOMEM) rc = kiln__err(KILN_ENOMEM, "build: out of memory");
    if (rc > 0) rc = 0;
    if (!rc && ncomp && !(revert = kiln__calloc((size_t)ncomp, sizeof *revert)))
        rc = kiln__err(KILN_ENOMEM, "build: out of memory");
    /* (an island is judged against its labels after the cut, a region against greedy's) */
    for (int c = 0; c < ncomp && !rc; c++)
        rc = region_verdict(b, ri, nid, nodes, nn, edges, ne, c < nregc ? lab : cut, fin, comp, c, &revert[c]);
    int nreverted = 0;
    for (int c = 0; c < ncomp && !rc; c++) nreverted += revert[c];
    for (int li = 0; li < b->nl && !rc; li++) {
        if (nid[li] < 0 || !switchable(ri, li)) continue;
        const int i = nid[li], r = region[i];
        /* a reverted region goes back to greedy's labels, a reverted island to the cut's */
        const int f = comp[i] >= 0 && revert[comp[i]] ? (comp[i] < nregc ? lab[i] : cut[i]) : fin[i];
        if (f == ri->alt[li].greedy) continue;
        bl *L = &b->l[li];
        const cand *c = &ri->pool[ri->alt[li].at[f]];
        char iot[512];
        io_text(&c->io, iot, sizeof iot);
        kiln__log(KILN_LOG_VERBOSE, "layer '%s': region %d: %s tactic %d (kernel %.4f ms) replaces the greedy tactic "
                  "%d (%.4f ms)", L->name, r, iot, c->tactic, ri->alt[li].ms[f], L->tactic, L->ms);
        L->io = c->io;
        L->tactic = c->tactic;
        L->ms = ri->alt[li].ms[f];
        for (int o = 0; o < L->nout; o++) {
            b->t[L->out[o]].pdtype = L->io.dtype[L->nin + o];
            b->t[L->out[o]].pfmt = L->io.format[L->nin + o];
        }
        if (b->rf && b->rf->collect) refine_forget(b->rf, li);
    }
    for (int r = 0; r < nreg && r < 64 && !rc; r++) {
        int first = 0;
        while (first < b->nl && nid[first] != reg[r].first) first++;
        kiln__log(KILN_LOG_VERBOSE, "region %d: %d layers from '%s' switched to %s: cost %.4f ms -> %.4f ms "
                  "(kernels + reformats at its border; greedy -> region)", r, reg[r].nnodes, b->l[first].name,
                  reg[r].label == KILN__RG_KEEP ? "mixed" : kiln_format_name((kiln_format)reg[r].label),
                  reg[r].before, reg[r].after);
    }
    const int variant = b->rf && !b->rf->collect && b->rf->nrevert;
    kiln__log(KILN_LOG_VERBOSE, "regions: %d of %d layers offered another layout, %d edges costed, %d regions "
              "switched, %d islands taken back to their neighbours' layout; of the %d connected sets of switched "
              "layers %d reverted (%s) (%.2f s)", nsw, nn, ne, nreg, nheal, ncomp, nreverted,
              variant ? "a variant engine of the in-network check" : "the in-network check's verdicts",
              (kiln__now_ms() - t0) / 1000);
    kiln__free(lab);
    kiln__free(revert);
    kiln__free(nid);
    kiln__free(fixed);
    kiln__free(uses);
    kiln__free(nodes);
    kiln__free(region);
    kiln__free(edges);
    return rc;
}

/* A hash of the live layers (names, ops, tensors), the network part of
 * a refined choice's cache key: its layer key covers the op, types,
 * shapes and attributes, this the network around it. */
static uint64_t net_digest(const builder *b) {
    uint64_t h = 1469598103934665603ull;
    for (int li = 0; li < b->nl; li++) {
        const bl *L = &b->l[li];
        if (L->dead) continue;
        h = fnv_bytes(h, L->name, strlen(L->name) + 1);
        h = fnv_bytes(h, L->op->name, strlen(L->op->name) + 1);
        for (int p = 0; p < L->nin + L->nout; p++) {
            const int t = pos_tensor(L, p);
            if (t >= 0) h = fnv_bytes(h, b->t[t].name, strlen(b->t[t].name) + 1);
        }
    }
    return h;
}

/* The candidate of cl with best's types and formats and `tactic`, or -1. */
static int same_io_tactic(const cand_list *cl, const cand_time *ct, int best, int tactic) {
    for (int k = 0; k < cl->n; k++)
        if (ct[k].ok && cl->c[k].tactic == tactic && same_io(&cl->c[k].io, &cl->c[best].io)) return k;
    return -1;
}

/* refine.c's part of a timed CPU layer's choice (b->rf set): a tactic the
 * variant pass forces; else the refined tactic the timing cache holds for
 * this network; else (first pass) the runner-ups within REFINE_MARGIN of
 * the chosen kernel time, same types and formats, listed for refine.c. */
static int refine_choice(builder *b, int li, const cand_list *cl, const cand_time *ct, int *best) {
    const bl *L = &b->l[li];
    b_refine *rf = b->rf;
    if (!rf || !rf->tactics || L->device != KILN_DEVICE_CPU) return 0;
    for (int i = 0; i < rf->nforce; i++)
        if (rf->force[2 * i] == li) {
            const int k = same_io_tactic(cl, ct, *best, rf->force[2 * i + 1]);
            if (k >= 0) *best = k;
            return 0;
        }
    char shapes[1024], lkey[3072], key[3300];
    timing_bufs tb;
    int rc = bufs_make(b, li, &cl->c[*best].io, &tb, shapes, sizeof shapes, 0);
    if (rc) return rc;
    timing_key(b, L, &cl->c[*best].io, shapes, cl->c[*best].tactic, "", lkey, sizeof lkey);
    snprintf(key, sizeof key, "refine|net=%016llx|threads=%d|layer=%s|%s", (unsigned long long)b->net_digest,
             b->cfg->threads, L->name, lkey);
    double v;
    if (kiln__tcache_get(b->tc, key, &v, NULL)) {
        const int k = same_io_tactic(cl, ct, *best, (int)v);
        if (k >= 0 && k != *best)
            kiln__log(KILN_LOG_VERBOSE, "layer '%s': tactic %d (refined in the network, timing cache) replaces "
                      "tactic %d", L->name, cl->c[k].tactic, cl->c[*best].tactic);
        if (k >= 0) *best = k;
        return 0;
    }
    if (!rf->collect) return 0;
    b_refine_layer r = {.li = li, .tactic = cl->c[*best].tactic, .ms = ct[*best].ms};
    for (int k = 0; k < cl->n; k++) { /* the closest REFINE_MAX_ALT, in order of time */
        if (k == *best || !ct[k].ok || !same_io(&cl->c[k].io, &cl->c[*best].io) ||
            cl->c[k].tactic == cl->c[*best].tactic || ct[k].ms > ct[*best].ms * (1 + REFINE_MARGIN))
            continue;
        int at = r.nalt;
        while (at > 0 && r.alt_ms[at - 1] > ct[k].ms) at--;
        if (at >= REFINE_MAX_ALT) continue;
        for (int j = r.nalt < REFINE_MAX_ALT ? r.nalt : REFINE_MAX_ALT - 1; j > at; j--) {
            r.alt[j] = r.alt[j - 1];
            r.alt_ms[j] = r.alt_ms[j - 1];
        }
        r.alt[at] = cl->c[k].tactic;
        r.alt_ms[at] = ct[k].ms;
        if (r.nalt < REFINE_MAX_ALT) r.nalt++;
    }
    if (!r.nalt) return 0;
    b_refine_layer *n = kiln__grow(rf->l, &rf->cap, rf->n + 1, sizeof *rf->l);
    if (!n) return kiln__err(KILN_ENOMEM, "build: out of memory");
    rf->l = n;
    r.name = kiln__strdup(L->name);
    r.key = kiln__strdup(key);
    r.pool = kiln__strdup(lkey);
    if (!r.name || !r.key || !r.pool) {
        kiln__free(r.name);
        kiln__free(r.key);
        kiln__free(r.pool);
        return kiln__err(KILN_ENOMEM, "build: out of memory");
    }
    rf->l[rf->n++] = r;
    return 0;
}

int kiln__b_select(builder *b) {
    for (int i = 0; i < b->nt; i++) {
        bt *t = &b->t[i];
        if (t->pdtype == KILN_DTYPE_UNDEFINED) {
            t->pdtype = t->dtype;
            t->pfmt = KILN_FORMAT_LINEAR;
        }
    }
    int rc = rf_timer(b); /* created up front: adding a layer may move b->l */
    if (rc < 0) return rc;
    if (b->rf) b->net_digest = net_digest(b); /* refine_choice's keys only */
    rc = 0;
    int total = 0, done = 0;
    for (int li = 0; li < b->nl; li++) total += !b->l[li].dead;
    int progress = (b->cfg->flags & KILN_BUILD_PROGRESS) && isatty(2);
    int no_timing = (b->cfg->flags & KILN_BUILD_NO_TIMING) != 0;
    cand_list cl = {0};
    cand_time ct[MAX_CANDS];
    region_in ri = {.alt = kiln__malloc((size_t)b->nl * sizeof *ri.alt)};
    if (!ri.alt) return kiln__err(KILN_ENOMEM, "build: out of memory");
    memset(ri.alt, 0, (size_t)b->nl * sizeof *ri.alt);
    for (int li = 0; li < b->nl && !rc; li++) {
        if (b->l[li].dead) continue;
        cl.n = 0;
        rc = place(b, li, &cl);
        if (rc) break;
        const int ndecided = drop_decided(b, li, &cl);
        b->st->candidates += ndecided;
        int best = 0;
        double best_cost = 0, best_ms = 0, best_rank = 0;
        /* An AOT CUDA layer takes its op's first combination: its kernel is
         * compiled once, at emit (not timed against JIT candidates). */
        const int cuda_aot = b->l[li].device == KILN_DEVICE_CUDA && b->l[li].aot == 1;
        if (cl.n > 1 && !no_timing && !cuda_aot) {
            best = -1;
            const unsigned ahead = lookahead_outputs(b, li), ahead_nhwc = nhwc_outputs(b, li);
            int any_nhwc = 0; /* KILN_CUDA_NHWC=force: only where an NHWC candidate exists */
            for (int k = 0; k < cl.n && b->nhwc == NHWC_FORCE; k++) any_nhwc |= has_nhwc(&cl.c[k].io);
            int any_blocked = 0; /* KILN_CPU_BLOCKED=force: likewise for blocked CPU candidates */
            for (int k = 0; k < cl.n && kiln__b_blocked_force(); k++) any_blocked |= blocked_io(&cl.c[k].io);
            double fastest = 0; /* the fastest kernel so far: slower ones are cut short */
            memset(ct, 0, (size_t)cl.n * sizeof ct[0]);
            for (int k = 0; k < cl.n && !rc; k++) {
                if (k == ndecided && best >= 0) break; /* the FP32 rest: only when the others all failed */
                double ms;
                int ok, measured;
                b->cut_ms = fastest;
                rc = time_candidate_x(b, li, &cl.c[k].io, cl.c[k].tactic, &ms, &ok, 1,
                                      b->l[li].device == KILN_DEVICE_CPU ? TIME_FIRST : TIME_FULL, &measured);
                b->cut_ms = 0;
                ct[k].measured = (char)measured;
                if (rc || !ok) continue;
                if (fastest <= 0 || ms < fastest) fastest = ms;
                double cost = ms, rf_in = 0, rf_out = 0;
                const bl *L = &b->l[li];
                for (int p = 0; p < L->nin && !rc; p++) {
                    if (L->in[p] < 0) continue;
                    double rms;
                    rc = reformat_cost(b, L->in[p], cl.c[k].io.dtype[p], cl.c[k].io.format[p],
                                       kiln__b_pos_loc(L, p), &rms);
                    rf_in += rms;
                }
                cost += rf_in;
                /* Network outputs must end in their logical type, LINEAR. */
                for (int o = 0; o < L->nout && !rc; o++) {
                    const bt *t = &b->t[L->out[o]];
                    kiln_io_format *io = &cl.c[k].io;
                    if (t->is_output && (io->dtype[L->nin + o] != t->dtype || io->format[L->nin + o] != KILN_FORMAT_LINEAR))
                        rf_out += ms * 0.05; /* a reformat follows; exact time unknown before the choice */
                }
                double ra = 0;
                if (!rc && ahead) rc = lookahead_cost(b, li, ahead, &cl.c[k].io, &ra);
                rf_out += ra;
                ra = 0;
                if (!rc && ahead_nhwc) rc = nhwc_lookahead_cost(b, li, ahead_nhwc, &cl.c[k].io, &ra);
                rf_out += ra;
                cost += rf_out;
                if (!rc) { /* why a candidate wins or loses: its kernel and its reformats */
                    char iot[512];
                    io_text(&cl.c[k].io, iot, sizeof iot);
                    kiln__log(KILN_LOG_VERBOSE, "layer '%s': candidate %s tactic %d: kernel %.4f ms + reformat "
                              "inputs %.4f ms + outputs %.4f ms (estimate) = cost %.4f ms", L->name, iot,
                              cl.c[k].tactic, ms, rf_in, rf_out, cost);
                }
                /* In a 16-bit build an FP32 candidate of a GPU layer must win
                 * by more than timing noise: a tie goes to the precision
                 * the build asked for (a narrow FP32 win at the network
                 * input kept a whole residual stream in FP32 before). */
                const double mult = (reduced_type(b) != KILN_DTYPE_UNDEFINED && L->device == KILN_DEVICE_CUDA &&
                                             keeps_f32(b, L, &cl.c[k].io)
                                         ? FP32_TIE_MARGIN
                                         : 1.0) *
                                    (any_nhwc && !has_nhwc(&cl.c[k].io) ? 1e6 : 1.0) *
                                    (blocked_rank(b, L, &cl.c[k].io, any_blocked) ? 1e6 : 1.0);
                const double rank = cost * mult;
                if (!rc)
                    ct[k] = (cand_time){.ms = ms, .extra = cost - ms, .mult = mult, .ok = 1,
                                        .measured = ct[k].measured};
                if (best < 0 || rank < best_rank) {
                    best = k;
                    best_cost = cost;
                    best_rank = rank;
                    best_ms = ms;
                }
            }
            if (!rc && best >= 0) {
                rc = recheck_cpu(b, li, &cl, ct, &best);
                if (!rc) rc = refine_choice(b, li, &cl, ct, &best);
                best_ms = ct[best].ms;
                best_cost = ct[best].ms + ct[best].extra;
            }
            if (rc) break;
            if (best < 0) {
                const bl *L = &b->l[li];
                rc = kiln__err(KILN_EKERNEL, "layer '%s' (%s::%s v%d): all %d candidates failed when timed; last error: %s",
                               L->name, L->op->ns, L->op->name, L->op->version, cl.n, kiln_errmsg());
                break;
            }
            char iot[512];
            io_text(&cl.c[best].io, iot, sizeof iot);
            kiln__log(KILN_LOG_VERBOSE, "layer '%s' (%s::%s v%d): chose %s tactic %d (kernel %.4f ms + reformats "
                      "%.4f ms = cost %.4f ms, lowest of %d candidates)",
                      b->l[li].name, b->l[li].op->ns, b->l[li].op->name, b->l[li].op->version, iot,
                      cl.c[best].tactic, best_ms, best_cost - best_ms, best_cost, cl.n);
            b->l[li].timed = 1;
        }
        bl *L = &b->l[li];
        L->io = cl.c[best].io;
        L->tactic = cl.c[best].tactic;
        for (int p = 0; p < L->nin; p++) {
            bt *t = L->in[p] >= 0 ? &b->t[L->in[p]] : NULL;
            kiln_dtype dt = L->io.dtype[p];
            if (t && t->kind != BT_CONST && dt != t->pdtype && dt < 32 && L->io.format[p] == KILN_FORMAT_LINEAR &&
                t->pfmt == KILN_FORMAT_LINEAR)
                t->cast_to |= 1u << dt;
        }
        L->ms = best_ms;
        rc = choose_aot(b, li, L->timed ? best_ms : -1);
        if (!rc && L->timed) rc = region_note(b, li, &cl, ct, best, &ri);
        if (rc) break;
        for (int o = 0; o < L->nout; o++) {
            bt *t = &b->t[L->out[o]];
            t->pdtype = L->io.dtype[L->nin + o];
            t->pfmt = L->io.format[L->nin + o];
            t->loc = kiln__b_pos_loc(L, L->nin + o);
        }
        done++;
        if (progress) fprintf(stderr, "\r[%d/%d] layers", done, total);
    }
    if (progress) fprintf(stderr, "\n");
    if (!rc) rc = select_regions(b, &ri);
    kiln__free(ri.alt);
    kiln__free(ri.pool);
    kiln__free(cl.c);
    tbuf_clear(b, 1);
    kiln__log(KILN_LOG_VERBOSE, "selection: %d candidates, %d timed (%d cut short after one sample, %d rechecks "
              "that changed %d choices), %d from the timing cache (%d identical instances); %.2f s making timing "
              "buffers, %.2f s timing (%.2f s of it rechecking)",
              b->st->candidates, b->st->timed, b->ncut, b->nrecheck, b->nrechosen, b->st->cache_hits,
              b->st->cache_dedup, b->prep_ms / 1000, b->run_ms / 1000, b->recheck_ms / 1000);
    return rc;
}
