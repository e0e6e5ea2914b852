/*
 * engine.c — the engine object: lifecycle, op resolution after build/load,
 * and the IO description (kiln_engine_num_inputs / kiln_engine_io).
 *
 * An engine is immutable once prepared: contexts only read it, so many
 * contexts may run one engine concurrently.  Ownership of the parts:
 * everything is kiln__malloc'd except the weights, which either live in the
 * file mapping (map != NULL, weights_owned == 0) or in a 64-byte aligned
 * block from kiln__aligned_alloc (weights_owned == 1).
 */
#include "kiln_int.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>

static void layer_free(kiln__elayer *l) {
    if (l->state && l->op && l->op->vt && l->op->vt->destroy) l->op->vt->destroy(l->state);
    l->state = NULL;
    if (l->attrs.v) kiln__attrset_free(&l->attrs);
    kiln__epi_free(l);
    for (int32_t k = 0; l->prepacked && k < l->nin; k++)
        if (!(l->prepacked_stored >> k & 1)) kiln__aligned_free(l->prepacked[k]);
    kiln__free(l->prepacked);
    kiln__free(l->prepacked_size);
    l->prepacked = NULL;
    kiln__free(l->name);
    kiln__free(l->op_ns);
    kiln__free(l->op_name);
    kiln__free(l->in);
    kiln__free(l->out);
    kiln__free(l->blob);
}

void kiln__engine_destroy(kiln_engine *e) {
    if (!e) return;
    for (int32_t i = 0; i < e->ntensors && e->tensors; i++) kiln__free(e->tensors[i].name);
    kiln__free(e->tensors);
    for (int32_t i = 0; i < e->nlayers && e->layers; i++) layer_free(&e->layers[i]);
    kiln__free(e->layers);
    kiln__free(e->nodes);
    kiln__free(e->inputs);
    kiln__free(e->outputs);
    kiln__free(e->prof);
    for (int32_t i = 0; i < e->naot && e->aot; i++) kiln__aot_free(&e->aot[i]);
    for (int32_t i = 0; i < e->nacu && e->acu; i++) kiln__aot_cuda_free(&e->acu[i]);
    kiln__free(e->acu);
    for (int32_t i = 0; i < e->ndimnames && e->dimnames; i++) kiln__free(e->dimnames[i].name);
    kiln__free(e->dimnames);
    kiln__free(e->aot);
    for (int32_t i = 0; i < e->nplugins && e->plugins; i++) {
        kiln__plugin_ref *p = &e->plugins[i];
        kiln__free(p->ns);
        kiln__free(p->name);
        kiln__free(p->library);
        kiln__free(p->so);
    }
    kiln__free(e->plugins);
    kiln__free(e->device_sig);
    kiln__engine_device_free(e);
    kiln__free(e->cuda_sig);
    if (e->weights_owned) kiln__aligned_free(e->weights);
    if (e->packed_owned) kiln__aligned_free(e->packed);
    if (e->unread) munmap(e->unread, e->unread_size);
    kiln__data_check_free(e);
    if (e->map) munmap(e->map, e->map_size);
    kiln__free(e);
}

KILN_API void kiln_engine_free(kiln_engine *e) { kiln__engine_destroy(e); }

/* A compile-cache entry (<stem>-<32 hex digits>.so, see compile.c): the
 * plugin was built from a source file, which is what the user must load. */
static int is_cache_entry(const char *lib) {
    size_t n = strlen(lib);
    if (n < 36 || strcmp(lib + n - 3, ".so") || lib[n - 36] != '-') return 0;
    for (size_t i = n - 35; i < n - 3; i++)
        if (!strchr("0123456789abcdef", lib[i])) return 0;
    return 1;
}

static const kiln__plugin_ref *find_ref(const kiln_engine *e, const char *ns, const char *name,
                                        int version) {
    for (int32_t i = 0; i < e->nplugins; i++) {
        const kiln__plugin_ref *p = &e->plugins[i];
        if (p->ns && p->name && !strcmp(p->ns, ns) && !strcmp(p->name, name) &&
            p->version == version)
            return p;
    }
    return NULL;
}

/* Plugins the engine carries (EMBED_PLUGINS): load those whose ops are not
 * registered yet.  Their constructors register the ops.  Serialized, so two
 * engines loading in parallel do not load one library twice. */
static pthread_mutex_t g_embed_lock = PTHREAD_MUTEX_INITIALIZER;

static int load_embedded(const kiln_engine *e) {
    int need = 0;
    for (int32_t i = 0; i < e->nplugins; i++) need |= e->plugins[i].so != NULL;
    if (!need) return 0;
    pthread_mutex_lock(&g_embed_lock);
    int rc = 0;
    for (int32_t i = 0; i < e->nplugins; i++) {
        const kiln__plugin_ref *p = &e->plugins[i];
        if (!p->so || !p->so_size) continue;
        if (kiln__registry_find(p->ns, p->name, p->version)) continue;
        char what[256];
        snprintf(what, sizeof what, "embedded plugin library for %s::%s v%d", p->ns, p->name,
                 (int)p->version);
        void *h = NULL;
        rc = kiln__so_load_bytes(p->so, (size_t)p->so_size, what, &h);
        if (rc) break;
        /* The handle stays open for the life of the process: the ops it
         * registered point into it. */
    }
    pthread_mutex_unlock(&g_embed_lock);
    return rc;
}

int kiln__enode_const(const kiln_engine *e, int32_t n, int64_t *v) {
    if (n < 0 || n >= e->nnodes || e->nodes[n].op != KILN_EXPR_CONST) return 0;
    *v = e->nodes[n].v;
    return 1;
}

int kiln__etensor_static_dims(const kiln_engine *e, const kiln__etensor *t, int64_t *dims) {
    int first = -1;
    for (int d = 0; d < t->ndim; d++)
        if (!kiln__enode_const(e, t->dims[d], &dims[d]) || dims[d] < 0) {
            dims[d] = -1;
            if (first < 0) first = d;
        }
    return first;
}

/* The view prepack sees of tensor t: dtype, format, dims (-1 where not
 * static) and their strides, and data for a LINEAR constant whose bytes
 * match its dims. */
static void prepack_view(const kiln_engine *e, int32_t t, kiln_tensor *v) {
    memset(v, 0, sizeof *v);
    v->dtype = KILN_DTYPE_UNDEFINED;
    if (t < 0) return;
    const kiln__etensor *et = &e->tensors[t];
    int64_t dims[KILN_MAX_DIMS] = {0};
    int fixed = kiln__etensor_static_dims(e, et, dims) < 0;
    uint64_t bytes = 0;
    /* Static dims beyond 2^48 bytes (a crafted engine) would overflow the
     * strides (unknown dims count as 1 there): such a tensor is described
     * as of unknown dims. */
    int64_t known[KILN_MAX_DIMS];
    for (int d = 0; d < et->ndim; d++) known[d] = dims[d] < 0 ? 1 : dims[d];
    if (kiln__tensor_bytes((kiln_dtype)et->dtype, (kiln_format)et->format, et->ndim, known, &bytes)) {
        for (int d = 0; d < et->ndim; d++) dims[d] = -1;
        fixed = 0;
    }
    kiln__tensor_view(v, NULL, (kiln_dtype)et->dtype, (kiln_format)et->format,
                      kiln__etensor_device(e, t), et->ndim, dims);
    if (fixed && et->kind == KILN__ET_CONST && et->format == KILN_FORMAT_LINEAR && bytes == et->const_bytes)
        v->data = (void *)kiln__etensor_const(e, et);
}

/* Packed forms of the layer's constant inputs (kiln_quick_op.prepack),
 * shared read-only by the engine's contexts: those the file stored
 * (section PACKED, built-in ops only) are used in place once their size is
 * what the op packs this input into for this layer's dims, attributes and
 * tactic; the others are packed here, into blocks of their own (the
 * weights may be mapped from the file). */
static int layer_prepack(const kiln_engine *e, kiln__elayer *l) {
    const kiln__op *op = l->op;
    if (l->prepack_done) return 0;
    /* packed forms are host memory, for the CPU implementation only */
    if (!op || !op->quick || !op->quick->prepack || l->device != KILN_DEVICE_CPU) {
        if (l->prepacked_stored)
            return kiln__err(KILN_EFORMAT, "layer '%s': section PACKED holds packed inputs for a layer "
                             "whose op packs none on the CPU", l->name);
        return 0;
    }
    kiln_tensor *views = kiln__calloc((size_t)(l->nin + l->nout) + 1, sizeof *views);
    if (!views) return kiln__err(KILN_ENOMEM, "layer '%s': out of memory", l->name);
    for (int32_t k = 0; k < l->nin; k++) prepack_view(e, l->in[k], &views[k]);
    for (int32_t k = 0; k < l->nout; k++) {
        prepack_view(e, l->out[k], &views[l->nin + k]);
        views[l->nin + k].data = NULL;
    }
    kiln_attrs view = {0};
    if (l->attrs.v) view = kiln__attrset_view(&l->attrs);
    kiln_call c = {.in = views, .nin = l->nin, .out = views + l->nin, .nout = l->nout,
                   .attrs = &view, .tactic = l->tactic, .layer = l->name};
    int rc = 0;
    for (int32_t k = 0; k < l->nin && !rc; k++) {
        const int stored = (int)(l->prepacked_stored >> k & 1);
        size_t n = 0;
        if (l->in[k] >= 0 && e->tensors[l->in[k]].kind == KILN__ET_CONST && views[k].data)
            rc = kiln__op_prepack(op, l->state, &c, k, NULL, &n);
        if (rc) break;
        if (stored) {
            /* A crafted file must not hand the kernels fewer bytes than they read. */
            if (!op->builtin || n != l->prepacked_size[k])
                rc = kiln__err(KILN_EFORMAT, "section PACKED: input %d holds %llu packed bytes; %s", (int)k,
                               (unsigned long long)l->prepacked_size[k],
                               !op->builtin ? "only built-in ops' packed forms are stored"
                               : n ? "the op packs this input into a different size" : "the op packs nothing for it");
            if (rc) break;
            l->prepacked_bytes += n;
            continue;
        }
        if (!n) continue;
        if (!l->prepacked) {
            l->prepacked = kiln__calloc((size_t)l->nin, sizeof *l->prepacked);
            l->prepacked_size = kiln__calloc((size_t)l->nin, sizeof *l->prepacked_size);
            if (!l->prepacked || !l->prepacked_size) {
                rc = kiln__err(KILN_ENOMEM, "out of memory");
                break;
            }
        }
        void *dst = kiln__aligned_alloc(n);
        if (!dst) {
            rc = kiln__err(KILN_ENOMEM, "out of memory: %zu bytes for the packed input %d", n, (int)k);
            break;
        }
        rc = kiln__op_prepack(op, l->state, &c, k, dst, &n);
        if (rc) {
            kiln__aligned_free(dst);
        } else {
            l->prepacked[k] = dst;
            l->prepacked_size[k] = n;
            l->prepacked_bytes += n;
        }
    }
    kiln__free(views);
    if (rc)
        return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", l->name, op->ns, op->name,
                                op->version);
    l->prepack_done = 1;
    return 0;
}

int kiln__engine_prepare(kiln_engine *e) {
    KILN__ASSERT(e);
    int rc = load_embedded(e);
    if (rc) return rc;

    /* Resolve ops first, so one message lists every missing plugin. */
    char msg[4096];
    size_t len = 0;
    int nmissing = 0, from_source = 0;
    msg[0] = 0;
    for (int32_t i = 0; i < e->nlayers; i++) {
        kiln__elayer *l = &e->layers[i];
        if (l->aot_kernel >= 0) {
            if (l->aot_kernel >= kiln__layer_aot_count(e, l))
                return kiln__err(KILN_EFORMAT, "layer '%s': AOT kernel %d, engine has %d",
                                 l->name, (int)l->aot_kernel, (int)kiln__layer_aot_count(e, l));
            continue;
        }
        if (l->op) continue;
        l->op = kiln__registry_find(l->op_ns, l->op_name, l->op_version);
        if (l->op) continue;
        /* Report each identity once. */
        int seen = 0;
        for (int32_t j = 0; j < i; j++) {
            const kiln__elayer *o = &e->layers[j];
            if (o->aot_kernel < 0 && !o->op && !strcmp(o->op_ns, l->op_ns) &&
                !strcmp(o->op_name, l->op_name) && o->op_version == l->op_version)
                seen = 1;
        }
        if (seen) continue;
        const kiln__plugin_ref *ref = find_ref(e, l->op_ns, l->op_name, l->op_version);
        const char *lib = ref && ref->library && ref->library[0] ? ref->library : NULL;
        from_source |= lib && is_cache_entry(lib);
        char have[256];
        have[0] = 0;
        kiln__registry_versions(l->op_ns, l->op_name, have, sizeof have);
        if (!strcmp(have, "none") || !strcmp(have, "(none)")) have[0] = 0;
        int n = snprintf(msg + len, sizeof msg - len, "%s%s::%s version %d (%s%s%slayer '%s'%s%s)",
                         nmissing ? "; " : "", l->op_ns, l->op_name, (int)l->op_version,
                         lib ? "built with " : "", lib ? lib : "", lib ? "; " : "", l->name,
                         have[0] ? "; registered versions: " : "", have[0] ? have : "");
        if (n > 0) len += (size_t)n < sizeof msg - len ? (size_t)n : sizeof msg - len - 1;
        nmissing++;
    }
    /* The hint names the C API: the CLI swaps in its options (tools). */
    if (nmissing)
        return kiln__err(KILN_EPLUGIN, "engine needs plugin%s %s; load %s first with kiln_registry_load_library%s",
                         nmissing > 1 ? "s" : "", msg, nmissing > 1 ? "them" : "it",
                         from_source ? " (compiled from source: kiln_plugin_compile_load of its .c file)" : "");

    for (int32_t i = 0; i < e->nlayers; i++) {
        kiln__elayer *l = &e->layers[i];
        if (l->aot_kernel >= 0 && l->device == KILN_DEVICE_CUDA) continue; /* loaded by its context */
        if (l->aot_kernel >= 0) {
            if ((rc = layer_prepack(e, l))) return rc; /* none: refuses stored ones */
            rc = kiln__aot_load(&e->aot[l->aot_kernel]);
            if (rc) return kiln__err_prefix(rc, "layer '%s' (AOT kernel %d)", l->name,
                                            (int)l->aot_kernel);
            continue;
        }
        const kiln__op *op = l->op;
        /* one input more: a fused residual Add reads it (checked by kiln__epi_prepare) */
        if (l->nin < op->min_inputs || l->nin > op->max_inputs + (l->nepi > 0) || l->nout != op->num_outputs)
            return kiln__err(KILN_EFORMAT,
                             "layer '%s' (%s::%s v%d): %d inputs and %d outputs, the op takes "
                             "%d..%d inputs and %d outputs",
                             l->name, op->ns, op->name, op->version, (int)l->nin, (int)l->nout,
                             op->min_inputs, op->max_inputs, op->num_outputs);
        if (op->quick && !l->attrs.v && op->nattrs > 0) {
            rc = kiln__attrs_deserialize(&l->attrs, op, l->blob, (size_t)l->blob_size);
            if (rc)
                return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d) attributes", l->name,
                                        op->ns, op->name, op->version);
        }
        if (!l->state) {
            rc = kiln__op_deserialize(op, l->blob, (size_t)l->blob_size, &l->state);
            if (rc)
                return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", l->name, op->ns,
                                        op->name, op->version);
            if (op->vt && op->vt->set_tactic) {
                rc = op->vt->set_tactic(l->state, l->tactic);
                if (rc)
                    return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d) tactic %d", l->name,
                                            op->ns, op->name, op->version, (int)l->tactic);
            }
        }
        /* before prepack: it reads the constants in the types they claim */
        if ((rc = kiln__layer_check_formats(e, i, l->state, 1))) return rc;
        if (l->nepi && !l->epi_rt && (rc = kiln__epi_prepare(e, l))) return rc;
        if ((rc = layer_prepack(e, l))) return rc;
    }
    return 0;
}

KILN_API int kiln_engine_num_inputs(const kiln_engine *e) {
    KILN__ARG(e, KILN_EINVAL);
    return e->ninputs;
}

KILN_API int kiln_engine_num_outputs(const kiln_engine *e) {
    KILN__ARG(e, KILN_EINVAL);
    return e->noutputs;
}

/* 1 if node n depends on a size-tensor symbol.  Nodes are a DAG with much
 * sharing (a transformer's reshapes nest the same products over and over):
 * memo[n] (0 unknown, 1 no, 2 yes; NULL: none) keeps the walk linear
 * instead of exponential. */
static int node_has_size_sym(const kiln_engine *e, uint8_t *memo, int32_t n, int depth) {
    if (n < 0 || n >= e->nnodes || depth > 64) return 0;
    if (memo && memo[n]) return memo[n] == 2;
    const kiln__enode *x = &e->nodes[n];
    int r;
    if (x->op == KILN_EXPR_CONST) r = 0;
    else if (x->op == KILN_EXPR_SYM) r = x->symkind == KILN__SYM_SIZE;
    else
        r = node_has_size_sym(e, memo, x->a, depth + 1) || node_has_size_sym(e, memo, x->b, depth + 1) ||
            (x->op == KILN_EXPR_SELECT_ && node_has_size_sym(e, memo, x->c, depth + 1));
    if (memo) memo[n] = (uint8_t)(r ? 2 : 1);
    return r;
}

KILN_API int kiln_engine_io(const kiln_engine *e, int i, kiln_io_info *info) {
    KILN__ARG(e && info, KILN_EINVAL);
    if (i < 0 || i >= e->ninputs + e->noutputs)
        return kiln__err(KILN_EINVAL, "engine IO index %d out of range [0, %d)", i,
                         (int)(e->ninputs + e->noutputs));
    memset(info, 0, sizeof *info);
    int is_in = i < e->ninputs;
    int32_t t = is_in ? e->inputs[i] : e->outputs[i - e->ninputs];
    const kiln__etensor *et = &e->tensors[t];
    info->name = et->name;
    info->dtype = (kiln_dtype)et->dtype;
    info->ndim = et->ndim;
    info->is_input = is_in;
    uint8_t *memo = NULL; /* for node_has_size_sym; without it, slower */
    for (int d = 0; d < et->ndim; d++) {
        const kiln__enode *n = &e->nodes[et->dims[d]];
        info->dims[d] = n->op == KILN_EXPR_CONST ? n->v : -1;
        if (!is_in && n->op != KILN_EXPR_CONST && !memo) memo = kiln__calloc((size_t)e->nnodes + 1, 1);
        if (!is_in && node_has_size_sym(e, memo, et->dims[d], 0)) info->data_dependent = 1;
        if (is_in && e->prof) {
            info->min[d] = e->prof[i][0][d];
            info->opt[d] = e->prof[i][1][d];
            info->max[d] = e->prof[i][2][d];
        } else if (info->dims[d] >= 0) {
            info->min[d] = info->opt[d] = info->max[d] = info->dims[d];
        } else {
            info->min[d] = info->opt[d] = info->max[d] = -1;
        }
    }
    kiln__free(memo);
    return 0;
}
