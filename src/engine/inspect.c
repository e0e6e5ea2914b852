/*
 * inspect.c — kiln_engine_inspect: a human-readable description of an
 * engine (what `kiln inspect` prints).  Symbolic dims are printed from the
 * engine's shape program: input dims by the network's name for them (ONNX
 * dim_param, e.g. "batch") or else as "x.dim2", size-tensor symbols as
 * "size(nz.count)", values read from integer inputs as "shape[1]".
 */
#include "kiln_int.h"

#include <inttypes.h>
#include <stdio.h>

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) KILN_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->n >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k > 0) b->n = b->n + (size_t)k < b->cap ? b->n + (size_t)k : b->cap - 1;
}

/* Expressions are DAGs (a node may be reached along many paths): printed
 * as trees, a dim built through a dozen transformer layers of Shape ->
 * Gather -> Concat -> Reshape is exponentially long.  So a subexpression
 * whose tree form exceeds INLINE_MAX nodes is printed by name, "e<node>",
 * and defined once in the "shape expressions" list at the end: the output
 * stays linear in the engine's node count. */
#define INLINE_MAX 16u

typedef struct iprint {
    const kiln_engine *e;
    uint32_t *tsz;  /* tree size of each node, saturating; NULL: out of memory */
    uint8_t *named; /* printed by name: define it in the list */
} iprint;

static int node_ok(const kiln_engine *e, int32_t i, int32_t parent) { return i >= 0 && i < parent && i < e->nnodes; }

static int has_children(uint8_t op) { return op != KILN_EXPR_CONST && op != KILN_EXPR_SYM; }

static int iprint_init(iprint *P, const kiln_engine *e) {
    P->e = e;
    P->tsz = kiln__calloc((size_t)e->nnodes + 1, sizeof *P->tsz);
    P->named = kiln__calloc((size_t)e->nnodes + 1, 1);
    if (!P->tsz || !P->named) return kiln__err(KILN_ENOMEM, "inspect: out of memory");
    /* children precede their parents (the loader checks it) */
    for (int32_t i = 0; i < e->nnodes; i++) {
        const kiln__enode *x = &e->nodes[i];
        uint64_t n = 1;
        if (has_children(x->op)) {
            int32_t ch[3] = {x->a, x->b, x->op == KILN_EXPR_SELECT_ ? x->c : -1};
            for (int k = 0; k < 3; k++) n += node_ok(e, ch[k], i) ? P->tsz[ch[k]] : 0;
        }
        P->tsz[i] = n > (1u << 30) ? (1u << 30) : (uint32_t)n;
    }
    return 0;
}

static void iprint_free(iprint *P) {
    kiln__free(P->tsz);
    kiln__free(P->named);
}

static void print_node(iprint *P, int32_t i, int32_t parent, sbuf *b, int top);

static void print_child(iprint *P, int32_t i, int32_t parent, sbuf *b) { print_node(P, i, parent, b, 0); }

static void print_node(iprint *P, int32_t i, int32_t parent, sbuf *b, int top) {
    const kiln_engine *e = P->e;
    if (!node_ok(e, i, parent)) {
        sb_printf(b, "?");
        return;
    }
    const kiln__enode *x = &e->nodes[i];
    if (!top && has_children(x->op) && P->tsz[i] > INLINE_MAX) {
        P->named[i] = 1;
        sb_printf(b, "e%d", (int)i);
        return;
    }
    static const char *const infix[] = {[KILN_EXPR_ADD] = " + ", [KILN_EXPR_SUB] = " - ",
                                        [KILN_EXPR_MUL] = " * ", [KILN_EXPR_FLOORDIV] = " // ",
                                        [KILN_EXPR_MOD] = " % ", [KILN_EXPR_EQ] = " == ",
                                        [KILN_EXPR_LT] = " < "};
    switch ((kiln_expr_op)x->op) {
    case KILN_EXPR_CONST: sb_printf(b, "%" PRId64, x->v); return;
    case KILN_EXPR_SYM: {
        const char *tn = x->a >= 0 && x->a < e->ntensors ? e->tensors[x->a].name : "?";
        const char *dn = NULL; /* the network's name for the dim (ONNX dim_param) */
        for (int32_t k = 0; x->symkind == KILN__SYM_INPUT_DIM && k < e->ndimnames; k++)
            if (e->dimnames[k].node == i) dn = e->dimnames[k].name;
        if (dn) sb_printf(b, "%s", dn);
        else if (x->symkind == KILN__SYM_INPUT_DIM) sb_printf(b, "%s.dim%d", tn, (int)x->b);
        else if (x->symkind == KILN__SYM_SIZE) sb_printf(b, "size(%s)", tn);
        else sb_printf(b, "%s[%d]", tn, (int)x->b);
        return;
    }
    case KILN_EXPR_CEILDIV:
    case KILN_EXPR_MIN:
    case KILN_EXPR_MAX:
        sb_printf(b, "%s(", x->op == KILN_EXPR_CEILDIV ? "ceildiv" : x->op == KILN_EXPR_MIN ? "min" : "max");
        print_child(P, x->a, i, b);
        sb_printf(b, ", ");
        print_child(P, x->b, i, b);
        sb_printf(b, ")");
        return;
    case KILN_EXPR_SELECT_:
        sb_printf(b, "(");
        print_child(P, x->a, i, b);
        sb_printf(b, " ? ");
        print_child(P, x->b, i, b);
        sb_printf(b, " : ");
        print_child(P, x->c, i, b);
        sb_printf(b, ")");
        return;
    default:
        if (x->op < sizeof infix / sizeof infix[0] && infix[x->op]) {
            sb_printf(b, "(");
            print_child(P, x->a, i, b);
            sb_printf(b, "%s", infix[x->op]);
            print_child(P, x->b, i, b);
            sb_printf(b, ")");
        } else {
            sb_printf(b, "?");
        }
    }
}

/* The definitions of the subexpressions printed by name, in node order
 * (each uses only earlier ones). */
static void print_named(iprint *P, FILE *out) {
    const kiln_engine *e = P->e;
    char buf[1024];
    int n = 0;
    /* a definition may name further (earlier) nodes: mark them first */
    for (int32_t i = e->nnodes - 1; i >= 0; i--) {
        if (!P->named[i]) continue;
        sbuf b = {buf, 0, sizeof buf};
        print_node(P, i, e->nnodes, &b, 1);
        n++;
    }
    if (!n) return;
    fprintf(out, "shape expressions (%d, named where printed above):\n", n);
    for (int32_t i = 0; i < e->nnodes; i++) {
        if (!P->named[i]) continue;
        sbuf b = {buf, 0, sizeof buf};
        buf[0] = 0;
        print_node(P, i, e->nnodes, &b, 1);
        fprintf(out, "  e%d = %s\n", (int)i, buf);
    }
}

static const char *dims_str(iprint *P, const kiln__etensor *t, char *buf, size_t n) {
    sbuf b = {buf, 0, n};
    buf[0] = 0;
    sb_printf(&b, "[");
    for (int d = 0; d < t->ndim; d++) {
        if (d) sb_printf(&b, ", ");
        print_node(P, t->dims[d], P->e->nnodes, &b, 1);
    }
    sb_printf(&b, "]");
    return buf;
}

static const char *tensor_str(iprint *P, int32_t t, char *buf, size_t n) {
    const kiln_engine *e = P->e;
    if (t < 0) {
        snprintf(buf, n, "(absent)");
        return buf;
    }
    const kiln__etensor *et = &e->tensors[t];
    char d[512], up[300] = "";
    if (et->is_size && et->upper >= 0) {
        sbuf b = {up, 0, sizeof up};
        sb_printf(&b, " (size tensor, at most ");
        print_node(P, et->upper, e->nnodes, &b, 1);
        sb_printf(&b, ")");
    } else if (et->is_size) {
        snprintf(up, sizeof up, " (size tensor)");
    }
    snprintf(buf, n, "'%s' %s %s %s%s%s", et->name, kiln_dtype_name((kiln_dtype)et->dtype),
             kiln_format_name((kiln_format)et->format), dims_str(P, et, d, sizeof d),
             et->alias_of >= 0 ? " (in place)" : up, et->loc == KILN_DEVICE_CUDA ? " @cuda" : "");
    return buf;
}

/* "host->device" etc. for a kiln::reformat that moves a tensor between
 * memory spaces, else NULL. */
static const char *copy_kind(const kiln_engine *e, const kiln__elayer *L) {
    if (L->nin != 1 || L->nout != 1 || L->in[0] < 0 || strcmp(L->op_ns, "kiln") || strcmp(L->op_name, "reformat"))
        return NULL;
    int a = e->tensors[L->in[0]].loc, b = e->tensors[L->out[0]].loc;
    if (a == b) return a == KILN_DEVICE_CUDA ? "device->device" : NULL;
    return a == KILN_DEVICE_CUDA ? "device->host" : "host->device";
}

static void human(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024) snprintf(buf, n, "%.2f KiB", (double)b / 1024.0);
    else snprintf(buf, n, "%llu B", (unsigned long long)b);
}

KILN_API int kiln_engine_inspect(const kiln_engine *e, FILE *out) {
    KILN__ARG(e && out, KILN_EINVAL);
    iprint P;
    int rc = iprint_init(&P, e);
    if (rc) {
        iprint_free(&P);
        return rc;
    }
    char b1[1024], b2[64];
    fprintf(out, "kiln engine (format version %u)\n", kiln__file_version());
    fprintf(out, "  device:    %s (%s)\n", e->device == KILN_DEVICE_CUDA ? "cuda" : "cpu",
            e->device_sig ? e->device_sig : kiln_cpu_signature());
    if (e->device == KILN_DEVICE_CUDA) {
        int ngpu = 0, ncopy = 0;
        for (int32_t l = 0; l < e->nlayers; l++) {
            ngpu += e->layers[l].device == KILN_DEVICE_CUDA;
            ncopy += copy_kind(e, &e->layers[l]) != NULL;
        }
        fprintf(out, "  gpu:       %s%s\n", e->cuda_sig ? e->cuda_sig : "?", e->allow_tf32 ? ", TF32 allowed" : "");
        fprintf(out, "  placement: %d layers on cuda (%d of them copies between memory spaces), %d on cpu\n", ngpu,
                ncopy, (int)(e->nlayers - ngpu));
    }
    fprintf(out, "  threads:   %d\n", (int)e->threads);
    fprintf(out, "  source:    %s\n", e->map ? "mmapped file" : "memory");
    int32_t nso = 0;
    for (int32_t i = 0; i < e->nplugins; i++) nso += e->plugins[i].so_size > 0;
    if (kiln_engine_has_code(e))
        fprintf(out, "  native code: yes (%d AOT kernel%s, %d embedded plugin librar%s%s): runs in the "
                "loading process; load only trusted engines (docs/AOT.md, Trust)\n", (int)e->naot,
                e->naot == 1 ? "" : "s", (int)nso, nso == 1 ? "y" : "ies",
                e->nacu ? ", AOT CUDA kernels: see below" : "");
    else
        fprintf(out, "  native code: none (data only: loading and running cannot run code from the file)\n");
    fprintf(out, "  signature: %s\n", e->signature == 2 ? "Ed25519, verified"
                                       : e->signature ? "Ed25519 (not verified: kiln inspect --verify PUBKEY)"
                                                      : "none");

    fprintf(out, "inputs (%d):\n", (int)e->ninputs);
    for (int32_t i = 0; i < e->ninputs; i++) {
        const kiln__etensor *t = &e->tensors[e->inputs[i]];
        fprintf(out, "  %s\n", tensor_str(&P, e->inputs[i], b1, sizeof b1));
        if (!e->prof) continue;
        int dyn = 0;
        for (int d = 0; d < t->ndim; d++)
            if (e->nodes[t->dims[d]].op != KILN_EXPR_CONST) dyn = 1;
        if (!dyn) continue;
        fprintf(out, "    profile:");
        for (int k = 0; k < 3; k++) {
            fprintf(out, " %s [", k == 0 ? "min" : k == 1 ? "opt" : "max");
            for (int d = 0; d < t->ndim; d++)
                fprintf(out, "%s%" PRId64, d ? ", " : "", e->prof[i][k][d]);
            fprintf(out, "]");
        }
        fprintf(out, "\n");
    }
    fprintf(out, "outputs (%d):\n", (int)e->noutputs);
    for (int32_t i = 0; i < e->noutputs; i++) {
        kiln_io_info info;
        kiln_engine_io(e, (int)(e->ninputs + i), &info);
        fprintf(out, "  %s%s\n", tensor_str(&P, e->outputs[i], b1, sizeof b1),
                info.data_dependent ? " (data-dependent shape)" : "");
    }

    fprintf(out, "layers (%d):\n", (int)e->nlayers);
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *L = &e->layers[l];
        char fused[512];
        kiln__epi_describe(L, fused, sizeof fused);
        fprintf(out, "  #%d '%s' %s::%s v%d%s  %s  tactic %d", (int)l, L->name, L->op_ns,
                L->op_name, (int)L->op_version, fused, L->aot_kernel >= 0 ? "AOT" : "JIT",
                (int)L->tactic);
        if (L->aot_kernel >= 0) fprintf(out, " (kernel %d)", (int)L->aot_kernel);
        if (L->time_ms > 0) fprintf(out, "  %.4f ms", L->time_ms);
        if (e->device == KILN_DEVICE_CUDA) fprintf(out, "  [%s]", L->device == KILN_DEVICE_CUDA ? "cuda" : "cpu");
        const char *ck = copy_kind(e, L);
        if (ck) {
            human(e->tensors[L->out[0]].plan_bytes, b2, sizeof b2);
            fprintf(out, "  copy %s, %s at opt", ck, b2);
        }
        fprintf(out, "\n");
        char attrs[1024];
        kiln__attrset_describe(&L->attrs, attrs, sizeof attrs);
        if (attrs[0]) fprintf(out, "      attrs %s\n", attrs);
        for (int32_t k = 0; k < L->nin; k++)
            fprintf(out, "      in  %s\n", tensor_str(&P, L->in[k], b1, sizeof b1));
        for (int32_t k = 0; k < L->nout; k++)
            fprintf(out, "      out %s\n", tensor_str(&P, L->out[k], b1, sizeof b1));
        if (L->prepacked) {
            fprintf(out, "      packed:");
            for (int32_t k = 0; k < L->nin; k++)
                if (L->prepacked[k])
                    fprintf(out, " in %d%s", (int)k, L->prepacked_stored >> k & 1 ? " (stored)" : "");
            human(L->prepacked_bytes, b2, sizeof b2);
            fprintf(out, " (%s)\n", b2);
        }
        for (int32_t k = 0; k < L->nepi; k++) {
            const kiln__eepi *p = &L->epi[k];
            fprintf(out, "      fused %s::%s v%d (epilogue on out 0)\n", p->op_ns, p->op_name,
                    (int)p->op_version);
            for (int32_t j = 0; j < p->nin; j++)
                if (p->in[j] >= 0)
                    fprintf(out, "        in %s\n", tensor_str(&P, p->in[j], b1, sizeof b1));
        }
    }

    fprintf(out, "memory plan (at opt shapes):\n");
    uint64_t arena = 0;
    for (int32_t t = 0; t < e->ntensors; t++) {
        const kiln__etensor *et = &e->tensors[t];
        if (et->kind != KILN__ET_ACT) continue;
        if (et->alias_of >= 0) {
            fprintf(out, "  '%s' shares the buffer of '%s'\n", et->name,
                    e->tensors[et->alias_of].name);
            continue;
        }
        human(et->plan_bytes, b2, sizeof b2);
        fprintf(out, "  '%s' offset %llu, %s (layers %d..%d)\n", et->name,
                (unsigned long long)et->plan_off, b2, (int)et->first, (int)et->last);
        if (et->plan_off + et->plan_bytes > arena) arena = et->plan_off + et->plan_bytes;
    }
    human(arena, b2, sizeof b2);
    fprintf(out, "  arena total: %s\n", b2);
    int nconst = 0, nonly = 0;
    uint64_t raw = 0, only = 0;
    for (int32_t t = 0; t < e->ntensors; t++) {
        const kiln__etensor *et = &e->tensors[t];
        if (et->kind != KILN__ET_CONST) continue;
        nconst++;
        raw += et->const_bytes;
        nonly += et->packed_only;
        only += et->packed_only ? et->const_bytes : 0;
    }
    human(raw, b2, sizeof b2);
    fprintf(out, "weights: %s in %d constants", b2, nconst);
    if (nonly) {
        human(only, b2, sizeof b2);
        fprintf(out, "; %d of them (%s) read only in packed form, which the file stores instead", nonly, b2);
    }
    fprintf(out, "\n");
    uint64_t packed = 0;
    int npacked = 0, nstored = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        packed += e->layers[l].prepacked_bytes;
        npacked += e->layers[l].prepacked != NULL;
        nstored += e->layers[l].prepacked_stored != 0;
    }
    if (npacked) {
        human(packed, b2, sizeof b2);
        fprintf(out, "packed weights: %s for %d layers (%d stored in the file, used in place; the others "
                "packed when the engine was built or loaded)\n", b2, npacked, nstored);
    }

    fprintf(out, "AOT kernels (%d):\n", (int)e->naot);
    for (int32_t i = 0; i < e->naot; i++) {
        const kiln__aot *k = &e->aot[i];
        human(k->so_size, b2, sizeof b2);
        fprintf(out, "  #%d entry %s, %s, cpu %s, %d scalars\n", (int)i, k->entry ? k->entry : "?",
                b2, k->cpu_sig ? k->cpu_sig : "?", (int)k->nscalars);
    }
    if (e->nacu) fprintf(out, "AOT CUDA kernels (%d):\n", (int)e->nacu);
    for (int32_t i = 0; i < e->nacu; i++) {
        const kiln__aot_cuda *k = &e->acu[i];
        fprintf(out, "  #%d entry %s, %s, PTX %llu bytes, cubin %llu bytes (sm_%d), %d scalars, %d scratch\n",
                (int)i, k->entry, k->lang == KILN_AOT_LANG_PTX ? "from PTX" : "from CUDA C",
                (unsigned long long)k->ptx_size, (unsigned long long)k->cubin_size, (int)k->sm,
                (int)k->nscalars, (int)k->nscratch);
    }
    int nemb = 0;
    for (int32_t i = 0; i < e->nplugins; i++) nemb += e->plugins[i].so != NULL;
    fprintf(out, "embedded plugins (%d):\n", nemb);
    for (int32_t i = 0; i < e->nplugins; i++) {
        const kiln__plugin_ref *p = &e->plugins[i];
        if (!p->so) continue;
        human(p->so_size, b2, sizeof b2);
        fprintf(out, "  %s::%s v%d (%s)\n", p->ns, p->name, (int)p->version, b2);
    }
    fprintf(out, "required plugins (%d):\n", (int)(e->nplugins - nemb));
    for (int32_t i = 0; i < e->nplugins; i++) {
        const kiln__plugin_ref *p = &e->plugins[i];
        if (p->so) continue;
        fprintf(out, "  %s::%s v%d%s%s\n", p->ns, p->name, (int)p->version,
                p->library && p->library[0] ? " from " : "", p->library ? p->library : "");
    }
    print_named(&P, out);
    iprint_free(&P);
    return ferror(out) ? kiln__err(KILN_EIO, "writing the engine description failed") : 0;
}

KILN_API void kiln_engine_placement(const kiln_engine *e, int *gpu, int *cpu) {
    int g = 0, c = 0;
    for (int32_t l = 0; e && l < e->nlayers; l++) {
        const kiln__elayer *L = &e->layers[l];
        if (!strcmp(L->op_ns, "kiln") && !strcmp(L->op_name, "reformat")) continue;
        if (L->device == KILN_DEVICE_CUDA) g++;
        else c++;
    }
    if (gpu) *gpu = g;
    if (cpu) *cpu = c;
}
