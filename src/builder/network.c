/*
 * network.c — the network under construction: named tensors (inputs,
 * constants, layer outputs), layers (op instances with attribute values) and
 * the outputs the user marks.
 *
 * Everything is validated as early as possible: op lookup and input/output
 * counts when a layer is added, attribute names and types when they are set.
 * Only "required attribute missing" waits for kiln_build (the user may set
 * attributes in any order).
 */
#include "kiln_int.h"

#include <stdio.h>

/* ------------------------------------------------------------ tensors */

/* Names are looked up through open-addressing tables of indices (-1 empty),
 * kept at most half full; a slot is trusted only after comparing the name.
 * A rolled-back add rebuilds the table. */
static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static const char *tensor_name(const kiln_network *net, int i) {
    return i < net->ntensors ? net->tensors[i].name : NULL;
}
static const char *layer_name_at(const kiln_network *net, int i) {
    return i < net->nlayers ? net->layers[i]->name : NULL;
}

static int hash_find(const kiln_network *net, const int *tab, int cap,
                     const char *(*name_of)(const kiln_network *, int), const char *name) {
    if (!tab || !cap) return -1;
    for (int i = (int)(name_hash(name) & (uint64_t)(cap - 1));; i = (i + 1) & (cap - 1)) {
        if (tab[i] < 0) return -1;
        const char *n = name_of(net, tab[i]);
        if (n && strcmp(n, name) == 0) return tab[i];
    }
}

static void hash_put(int *tab, int cap, const char *name, int idx) {
    int i = (int)(name_hash(name) & (uint64_t)(cap - 1));
    while (tab[i] >= 0) i = (i + 1) & (cap - 1);
    tab[i] = idx;
}

/* Make room for one more entry (n items present); rebuilds from scratch. */
static int hash_reserve(kiln_network *net, int **tab, int *cap, int n,
                        const char *(*name_of)(const kiln_network *, int)) {
    if ((n + 1) * 2 <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 64;
    while ((n + 1) * 2 > nc) nc *= 2;
    int *t = kiln__malloc((size_t)nc * sizeof *t);
    if (!t) return kiln__err(KILN_ENOMEM, "network: out of memory");
    for (int i = 0; i < nc; i++) t[i] = -1;
    for (int i = 0; i < n; i++) hash_put(t, nc, name_of(net, i), i);
    kiln__free(*tab);
    *tab = t;
    *cap = nc;
    return 0;
}

/* After a rolled-back add: drop entries of removed tensors. */
static void tensor_hash_rebuild(kiln_network *net) {
    for (int i = 0; i < net->tensor_hash_cap; i++) net->tensor_hash[i] = -1;
    for (int i = 0; i < net->ntensors; i++)
        hash_put(net->tensor_hash, net->tensor_hash_cap, net->tensors[i].name, i);
}

int kiln__network_find_tensor(const kiln_network *net, const char *name) {
    if (!net || !name) return -1;
    return hash_find(net, net->tensor_hash, net->tensor_hash_cap, tensor_name, name);
}

static int find_layer(const kiln_network *net, const char *name) {
    return hash_find(net, net->layer_hash, net->layer_hash_cap, layer_name_at, name);
}

/* Names must fit an engine file (KILN__MAX_NAME). */
static int check_name(const char *what, const char *name) {
    size_t n = strlen(name);
    if (n > KILN__MAX_NAME)
        return kiln__err(KILN_EINVAL, "%s name '%.40s...' is %zu bytes long, at most %u expected", what, name, n,
                         KILN__MAX_NAME);
    return 0;
}

/* New tensor slot with a copied name; returns its index or a negative status. */
static int new_tensor(kiln_network *net, const char *name, kiln__tkind kind) {
    int rc = check_name("tensor", name);
    if (rc) return rc;
    if (kiln__network_find_tensor(net, name) >= 0)
        return kiln__err(KILN_EEXISTS, "network: tensor name '%s' is already taken", name);
    kiln__ntensor *nt = kiln__grow(net->tensors, &net->cap_tensors, net->ntensors + 1, sizeof *net->tensors);
    if (!nt) return KILN_ENOMEM;
    net->tensors = nt;
    rc = hash_reserve(net, &net->tensor_hash, &net->tensor_hash_cap, net->ntensors, tensor_name);
    if (rc) return rc;
    kiln__ntensor *t = &net->tensors[net->ntensors];
    memset(t, 0, sizeof *t);
    t->name = kiln__strdup(name);
    if (!t->name) return kiln__err(KILN_ENOMEM, "network: out of memory");
    t->kind = kind;
    t->producer = -1;
    hash_put(net->tensor_hash, net->tensor_hash_cap, t->name, net->ntensors);
    return net->ntensors++;
}

static void free_tensor(kiln__ntensor *t) {
    kiln__free(t->name);
    for (int d = 0; d < KILN_MAX_DIMS; d++) kiln__free(t->dim_names[d]);
    kiln__free(t->data);
}

static int check_dtype(kiln_dtype dt, const char *what, const char *name) {
    if (dt <= KILN_DTYPE_UNDEFINED || dt >= KILN_DTYPE_COUNT_ || dt == KILN_DTYPE_STRING ||
        kiln_dtype_size(dt) == 0)
        return kiln__err(KILN_EINVAL, "%s '%s': expected a numeric or bool dtype, got %d", what,
                         name, (int)dt);
    return 0;
}

/* ------------------------------------------------------------ network */

kiln_network *kiln_network_create(void) {
    kiln_network *n = kiln__calloc(1, sizeof *n);
    if (!n) kiln__err(KILN_ENOMEM, "kiln_network_create: out of memory");
    return n;
}

static void free_layer(kiln_layer *l) {
    if (!l) return;
    kiln__free(l->name);
    kiln__free(l->in);
    kiln__free(l->out);
    if (l->op) kiln__attrset_free(&l->attrs);
    for (int i = 0; i < l->ngraphs; i++) kiln_network_free(l->graphs[i]);
    kiln__free(l->graphs);
    kiln__free(l);
}

void kiln_network_free(kiln_network *net) {
    if (!net) return;
    for (int i = 0; i < net->ntensors; i++) free_tensor(&net->tensors[i]);
    kiln__free(net->tensors);
    for (int i = 0; i < net->nlayers; i++) free_layer(net->layers[i]);
    kiln__free(net->layers);
    kiln__free(net->inputs);
    kiln__free(net->outputs);
    kiln__free(net->tensor_hash);
    kiln__free(net->layer_hash);
    kiln__free(net);
}

static int append_index(int **arr, int *n, int v) {
    int *q = kiln__realloc(*arr, (size_t)(*n + 1) * sizeof **arr);
    if (!q) return kiln__err(KILN_ENOMEM, "network: out of memory");
    q[(*n)++] = v;
    *arr = q;
    return 0;
}

int kiln_network_add_input(kiln_network *net, const char *name, kiln_dtype dtype, int ndim,
                           const int64_t *dims, const char *const *dim_names) {
    KILN__ARG(net, KILN_EINVAL);
    if (!name || !*name) return kiln__err(KILN_EINVAL, "kiln_network_add_input: empty input name");
    int rc = check_dtype(dtype, "input", name);
    if (rc) return rc;
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln__err(KILN_EINVAL, "input '%s': rank must be 0..%d, got %d", name,
                         KILN_MAX_DIMS, ndim);
    if (ndim > 0 && !dims)
        return kiln__err(KILN_EINVAL, "input '%s': dims is NULL for rank %d", name, ndim);
    int ti = new_tensor(net, name, KILN__T_INPUT);
    if (ti < 0) return ti;
    kiln__ntensor *t = &net->tensors[ti];
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t->dims[d] = dims[d] < 0 ? -1 : dims[d];
        if (dims[d] < 0) {
            char buf[KILN__MAX_NAME + 24]; /* name.d: the name was checked */
            const char *dn = dim_names && dim_names[d] && *dim_names[d] ? dim_names[d] : NULL;
            if (dn && (rc = check_name("dim", dn))) break;
            if (!dn) {
                snprintf(buf, sizeof buf, "%s.%d", name, d);
                dn = buf;
            }
            t->dim_names[d] = kiln__strdup(dn);
            if (!t->dim_names[d]) rc = kiln__err(KILN_ENOMEM, "network: out of memory");
        }
    }
    if (!rc) rc = append_index(&net->inputs, &net->ninputs, ti);
    if (rc) {
        free_tensor(t);
        net->ntensors--;
        tensor_hash_rebuild(net);
    }
    return rc;
}

/* take: data was kiln__malloc'd and the network takes it (no copy) on
 * success; else data is copied. */
static int add_constant(kiln_network *net, const char *name, kiln_dtype dtype, int ndim, const int64_t *dims,
                        const void *data, int take) {
    KILN__ARG(net, KILN_EINVAL);
    if (!name || !*name) return kiln__err(KILN_EINVAL, "kiln_network_add_constant: empty name");
    int rc = check_dtype(dtype, "constant", name);
    if (rc) return rc;
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln__err(KILN_EINVAL, "constant '%s': rank must be 0..%d, got %d", name,
                         KILN_MAX_DIMS, ndim);
    if (ndim > 0 && !dims)
        return kiln__err(KILN_EINVAL, "constant '%s': dims is NULL for rank %d", name, ndim);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return kiln__err(KILN_EINVAL, "constant '%s': dim %d is %lld, expected >= 0", name, d,
                             (long long)dims[d]);
        numel *= (uint64_t)dims[d];
    }
    size_t bytes = (size_t)numel * kiln_dtype_size(dtype);
    if (bytes && !data)
        return kiln__err(KILN_EINVAL, "constant '%s': data is NULL for %zu bytes", name, bytes);
    int ti = new_tensor(net, name, KILN__T_CONST);
    if (ti < 0) return ti;
    kiln__ntensor *t = &net->tensors[ti];
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->dims[d] = dims[d];
    t->bytes = bytes;
    t->data = take && bytes ? (void *)data : kiln__malloc(bytes ? bytes : 1);
    if (!t->data) {
        free_tensor(t);
        net->ntensors--;
        tensor_hash_rebuild(net);
        return kiln__err(KILN_ENOMEM, "constant '%s': out of memory for %zu bytes", name, bytes);
    }
    if (bytes && t->data != data) memcpy(t->data, data, bytes);
    return 0;
}

int kiln_network_add_constant(kiln_network *net, const char *name, kiln_dtype dtype, int ndim,
                              const int64_t *dims, const void *data) {
    return add_constant(net, name, dtype, ndim, dims, data, 0);
}

int kiln__network_add_constant_take(kiln_network *net, const char *name, kiln_dtype dtype, int ndim,
                                    const int64_t *dims, void *data) {
    return add_constant(net, name, dtype, ndim, dims, data, 1);
}

kiln_layer *kiln_network_add_layer(kiln_network *net, const char *op, int version,
                                   const char *layer_name, int nin, const char *const *inputs,
                                   int nout, const char *const *outputs) {
    KILN__ARG(net, NULL);
    char idbuf[256], namebuf[300];
    const char *ns, *name;
    if (!op || kiln__split_identity(op, idbuf, sizeof idbuf, &ns, &name) != 0) {
        kiln__err(KILN_EINVAL, "add layer%s%s%s: op '%s' is not of the form 'namespace::name'",
                  layer_name ? " '" : "", layer_name ? layer_name : "", layer_name ? "'" : "",
                  op ? op : "(null)");
        return NULL;
    }
    if (!layer_name || !*layer_name) {
        for (int k = net->nlayers;; k++) {
            snprintf(namebuf, sizeof namebuf, "%s_%d", name, k);
            if (find_layer(net, namebuf) < 0) break;
        }
        layer_name = namebuf;
    } else if (check_name("layer", layer_name)) {
        return NULL;
    } else if (find_layer(net, layer_name) >= 0) {
        kiln__err(KILN_EEXISTS, "add layer '%s': a layer of that name already exists", layer_name);
        return NULL;
    }
    const kiln__op *o = kiln__registry_find(ns, name, version);
    /* ONNX domains version by opset: an op defined at v1 serves every
     * opset up to its next change, so take the highest version <= asked. */
    if (!o && strncmp(ns, "ai.onnx", 7) == 0) o = kiln__registry_resolve(ns, name, version);
    if (!o) {
        char vers[256] = "";
        kiln__registry_versions(ns, name, vers, sizeof vers);
        if (vers[0] && strcmp(vers, "none") != 0)
            kiln__err(KILN_ENOTFOUND,
                      "layer '%s': op '%s::%s' version %d is not registered (registered versions: %s)",
                      layer_name, ns, name, version, vers);
        else
            kiln__err(KILN_ENOTFOUND,
                      "layer '%s': op '%s::%s' (version %d) is not registered (no version of it is; "
                      "load its plugin library first)",
                      layer_name, ns, name, version);
        return NULL;
    }
    if (nin < o->min_inputs || nin > o->max_inputs || (nin > 0 && !inputs)) {
        kiln__err(KILN_EINVAL, "layer '%s' (%s::%s v%d): expected %d..%d inputs, got %d", layer_name,
                  o->ns, o->name, o->version, o->min_inputs, o->max_inputs, nin);
        return NULL;
    }
    if (nout < 0 || nout > o->num_outputs || (nout > 0 && !outputs) ||
        (nout == 0 && o->num_outputs > 0)) {
        kiln__err(KILN_EINVAL, "layer '%s' (%s::%s v%d): expected 1..%d outputs, got %d", layer_name,
                  o->ns, o->name, o->version, o->num_outputs, nout);
        return NULL;
    }
    /* Check everything before changing the network. */
    for (int i = 0; i < nin; i++) {
        if (!inputs[i] || !*inputs[i]) continue;
        if (kiln__network_find_tensor(net, inputs[i]) < 0) {
            kiln__err(KILN_ENOTFOUND, "layer '%s' (%s::%s v%d): input %d names unknown tensor '%s'",
                      layer_name, o->ns, o->name, o->version, i, inputs[i]);
            return NULL;
        }
    }
    for (int i = 0; i < nout; i++) {
        if (!outputs[i] || !*outputs[i]) continue;
        if (kiln__network_find_tensor(net, outputs[i]) >= 0) {
            kiln__err(KILN_EEXISTS, "layer '%s' (%s::%s v%d): output %d: tensor name '%s' is already taken",
                      layer_name, o->ns, o->name, o->version, i, outputs[i]);
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (outputs[j] && strcmp(outputs[j], outputs[i]) == 0) {
                kiln__err(KILN_EEXISTS, "layer '%s': outputs %d and %d are both named '%s'",
                          layer_name, j, i, outputs[i]);
                return NULL;
            }
    }
    kiln_layer **nl = kiln__grow(net->layers, &net->cap_layers, net->nlayers + 1, sizeof *net->layers);
    if (!nl) return NULL;
    net->layers = nl;
    if (hash_reserve(net, &net->layer_hash, &net->layer_hash_cap, net->nlayers, layer_name_at))
        return NULL;
    kiln_layer *l = kiln__calloc(1, sizeof *l);
    if (!l) {
        kiln__err(KILN_ENOMEM, "network: out of memory");
        return NULL;
    }
    l->net = net;
    l->aot = -1;
    l->name = kiln__strdup(layer_name);
    l->nin = nin;
    l->nout = o->num_outputs;
    l->in = kiln__malloc((size_t)(nin ? nin : 1) * sizeof *l->in);
    l->out = kiln__malloc((size_t)(l->nout ? l->nout : 1) * sizeof *l->out);
    if (!l->name || !l->in || !l->out) {
        free_layer(l);
        kiln__err(KILN_ENOMEM, "network: out of memory");
        return NULL;
    }
    int rc = kiln__attrset_init(&l->attrs, o);
    if (rc) {
        free_layer(l);
        kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", layer_name, o->ns, o->name, o->version);
        return NULL;
    }
    l->op = o;
    for (int i = 0; i < nin; i++)
        l->in[i] = (!inputs[i] || !*inputs[i]) ? -1 : kiln__network_find_tensor(net, inputs[i]);
    int first_new = net->ntensors;
    int lidx = net->nlayers;
    for (int i = 0; i < l->nout; i++) {
        char hidden[320];
        const char *on = i < nout ? outputs[i] : NULL;
        if (!on || !*on) {
            snprintf(hidden, sizeof hidden, "%s:out%d", layer_name, i);
            on = hidden;
        }
        int ti = new_tensor(net, on, KILN__T_LAYER);
        if (ti < 0) {
            while (net->ntensors > first_new) free_tensor(&net->tensors[--net->ntensors]);
            tensor_hash_rebuild(net);
            free_layer(l);
            kiln__err_prefix(ti, "layer '%s'", layer_name);
            return NULL;
        }
        net->tensors[ti].producer = lidx;
        l->out[i] = ti;
    }
    net->layers[net->nlayers] = l;
    hash_put(net->layer_hash, net->layer_hash_cap, l->name, net->nlayers);
    net->nlayers++;
    return l;
}

/* ------------------------------------------------------------ attributes */

static int set_value(kiln_layer *l, const char *name, const kiln_attr_value *v) {
    KILN__ARG(l, KILN_EINVAL);
    if (!name)
        return kiln__err(KILN_EINVAL, "layer '%s': attribute name is NULL", l->name);
    int rc = kiln__attrset_set(&l->attrs, name, v);
    if (rc)
        return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", l->name, l->op->ns, l->op->name,
                                l->op->version);
    return 0;
}

int kiln_layer_set_int(kiln_layer *l, const char *name, int64_t v) {
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_INT, .i = v};
    return set_value(l, name, &a);
}

int kiln_layer_set_float(kiln_layer *l, const char *name, double v) {
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_FLOAT, .f = v};
    return set_value(l, name, &a);
}

int kiln_layer_set_bool(kiln_layer *l, const char *name, int v) {
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_BOOL, .i = v ? 1 : 0};
    return set_value(l, name, &a);
}

int kiln_layer_set_string(kiln_layer *l, const char *name, const char *v) {
    if (!v) v = "";
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_STRING, .s = v, .len = strlen(v)};
    return set_value(l, name, &a);
}

int kiln_layer_set_bytes(kiln_layer *l, const char *name, const void *data, size_t n) {
    if (n && !data) return kiln__err(KILN_EINVAL, "layer '%s': attribute '%s': NULL bytes", l->name, name);
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_BYTES, .s = data, .len = n};
    return set_value(l, name, &a);
}

int kiln_layer_set_array(kiln_layer *l, const char *name, kiln_dtype elem, int64_t count,
                         const void *data) {
    if (count < 0 || (count > 0 && !data))
        return kiln__err(KILN_EINVAL, "layer '%s': attribute '%s': bad array (count %lld, data %p)",
                         l->name, name ? name : "(null)", (long long)count, data);
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_ARRAY, .elem = elem, .count = count,
                         .data = data};
    return set_value(l, name, &a);
}

int kiln_layer_set_ints(kiln_layer *l, const char *name, const int64_t *v, int64_t count) {
    return kiln_layer_set_array(l, name, KILN_DTYPE_I64, count, v);
}

int kiln_layer_set_floats(kiln_layer *l, const char *name, const float *v, int64_t count) {
    return kiln_layer_set_array(l, name, KILN_DTYPE_F32, count, v);
}

int kiln_layer_set_tensor(kiln_layer *l, const char *name, kiln_dtype dtype, int ndim,
                          const int64_t *dims, const void *data) {
    if (ndim < 0 || ndim > KILN_MAX_DIMS || (ndim > 0 && !dims))
        return kiln__err(KILN_EINVAL, "layer '%s': tensor attribute '%s': bad rank %d", l->name,
                         name ? name : "(null)", ndim);
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_TENSOR, .elem = dtype, .ndim = ndim,
                         .data = data};
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return kiln__err(KILN_EINVAL, "layer '%s': tensor attribute '%s': dim %d is negative",
                             l->name, name ? name : "(null)", d);
        a.dims[d] = dims[d];
        n *= dims[d];
    }
    a.count = n;
    if (n > 0 && !data)
        return kiln__err(KILN_EINVAL, "layer '%s': tensor attribute '%s': data is NULL", l->name,
                         name ? name : "(null)");
    return set_value(l, name, &a);
}

int kiln_layer_set_graph(kiln_layer *l, const char *name, kiln_network *g) {
    KILN__ARG(l, KILN_EINVAL);
    if (!g) return kiln__err(KILN_EINVAL, "layer '%s': graph attribute '%s' is NULL", l->name,
                             name ? name : "(null)");
    kiln_network **ng = kiln__realloc(l->graphs, (size_t)(l->ngraphs + 1) * sizeof *ng);
    if (!ng) {
        kiln_network_free(g);
        return kiln__err(KILN_ENOMEM, "layer '%s': out of memory", l->name);
    }
    l->graphs = ng;
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_GRAPH, .graph = g};
    int rc = set_value(l, name, &a);
    if (rc) {
        kiln_network_free(g);
        return rc;
    }
    /* The layer owns the graph; the attribute value only points at it. */
    l->graphs[l->ngraphs++] = g;
    return 0;
}

int kiln_layer_set_aot(kiln_layer *l, int aot) {
    KILN__ARG(l, KILN_EINVAL);
    if (aot < -1 || aot > 1)
        return kiln__err(KILN_EINVAL, "layer '%s': aot must be -1, 0 or 1, got %d", l->name, aot);
    l->aot = aot;
    return 0;
}

const char *kiln_layer_name(const kiln_layer *l) {
    KILN__ARG(l, NULL);
    return l->name;
}

/* ------------------------------------------------------------ outputs */

int kiln_network_mark_output(kiln_network *net, const char *name) {
    KILN__ARG(net, KILN_EINVAL);
    int ti = kiln__network_find_tensor(net, name);
    if (ti < 0)
        return kiln__err(KILN_ENOTFOUND, "mark output: no tensor named '%s' in the network",
                         name ? name : "(null)");
    if (net->tensors[ti].is_output) return 0;
    int rc = append_index(&net->outputs, &net->noutputs, ti);
    if (rc) return rc;
    net->tensors[ti].is_output = 1;
    return 0;
}

int kiln_network_num_layers(const kiln_network *net) {
    KILN__ARG(net, KILN_EINVAL);
    return net->nlayers;
}

int kiln_network_num_inputs(const kiln_network *net) {
    KILN__ARG(net, KILN_EINVAL);
    return net->ninputs;
}

int kiln_network_num_outputs(const kiln_network *net) {
    KILN__ARG(net, KILN_EINVAL);
    return net->noutputs;
}

const char *kiln_network_input_name(const kiln_network *net, int i) {
    KILN__ARG(net, NULL);
    if (i < 0 || i >= net->ninputs) return NULL;
    return net->tensors[net->inputs[i]].name;
}

int kiln_network_input_info(const kiln_network *net, int i, kiln_io_info *info) {
    KILN__ARG(net && info, KILN_EINVAL);
    if (i < 0 || i >= net->ninputs)
        return kiln__err(KILN_EINVAL, "network input %d out of range (the network has %d)", i, net->ninputs);
    const kiln__ntensor *t = &net->tensors[net->inputs[i]];
    memset(info, 0, sizeof *info);
    info->name = t->name;
    info->dtype = t->dtype;
    info->ndim = t->ndim;
    for (int k = 0; k < t->ndim; k++) info->dims[k] = t->dims[k] < 0 ? -1 : t->dims[k];
    info->is_input = 1;
    return 0;
}

int kiln_network_tensor_info(const kiln_network *net, const char *name, kiln_net_tensor_info *info) {
    if (!net || !name)
        return kiln__err(KILN_EINVAL, "kiln_network_tensor_info: %s is NULL", net ? "name" : "net");
    int ti = kiln__network_find_tensor(net, name);
    if (ti < 0) return kiln__err(KILN_ENOTFOUND, "the network has no tensor '%s'", name);
    if (!info) return 0;
    const kiln__ntensor *t = &net->tensors[ti];
    memset(info, 0, sizeof *info);
    info->name = t->name;
    info->kind = t->kind == KILN__T_INPUT   ? KILN_NET_TENSOR_INPUT
                 : t->kind == KILN__T_CONST ? KILN_NET_TENSOR_CONSTANT
                                            : KILN_NET_TENSOR_LAYER_OUTPUT;
    info->is_output = t->is_output;
    if (t->kind == KILN__T_LAYER) {
        info->dtype = KILN_DTYPE_UNDEFINED;
        info->ndim = -1;
        return 0;
    }
    info->dtype = t->dtype;
    info->ndim = t->ndim;
    for (int k = 0; k < t->ndim; k++) {
        info->dims[k] = t->dims[k];
        info->dim_names[k] = t->dim_names[k];
    }
    info->data = t->data;
    info->bytes = t->bytes;
    return 0;
}

const char *kiln_network_output_name(const kiln_network *net, int i) {
    KILN__ARG(net, NULL);
    if (i < 0 || i >= net->noutputs) return NULL;
    return net->tensors[net->outputs[i]].name;
}

/* ------------------------------------------------------------ copying (Loop unrolling) */

int kiln_network_append(kiln_network *dst, const kiln_network *src, const char *prefix,
                        const char *const *in_names, const char *const *out_names) {
    if (!dst || !src || !prefix || (src->ninputs && !in_names) || (src->noutputs && !out_names))
        return kiln__err(KILN_EINVAL, "kiln_network_append: NULL argument");
    if (dst == src) return kiln__err(KILN_EINVAL, "kiln_network_append: dst and src are the same network");
    for (int k = 0; k < src->noutputs; k++)
        if (!out_names[k] || !*out_names[k])
            return kiln__err(KILN_EINVAL, "kiln_network_append: out_names[%d] is empty", k);
    int rc = 0;
    char **map = kiln__calloc((size_t)(src->ntensors ? src->ntensors : 1), sizeof *map);
    if (!map) return kiln__err(KILN_ENOMEM, "network: out of memory");
    for (int i = 0; i < src->ninputs && !rc; i++) {
        const char *nm = in_names[i] ? in_names[i] : "";
        if (!(map[src->inputs[i]] = kiln__strdup(nm))) rc = kiln__err(KILN_ENOMEM, "network: out of memory");
    }
    for (int t = 0; t < src->ntensors && !rc; t++) {
        const kiln__ntensor *nt = &src->tensors[t];
        if (nt->kind != KILN__T_CONST) continue;
        if (!(map[t] = kiln__strfmt("%s%s", prefix, nt->name))) rc = kiln__err(KILN_ENOMEM, "network: out of memory");
        else rc = kiln_network_add_constant(dst, map[t], nt->dtype, nt->ndim, nt->dims, nt->data);
    }
    /* Layer outputs that are src outputs take the caller's names. */
    for (int k = 0; k < src->noutputs && !rc; k++) {
        int t = src->outputs[k];
        if (src->tensors[t].kind == KILN__T_LAYER && !map[t] &&
            !(map[t] = kiln__strdup(out_names[k])))
            rc = kiln__err(KILN_ENOMEM, "network: out of memory");
    }
    const char *ins[KILN_MAX_IO], *outs[KILN_MAX_IO];
    char id[300];
    for (int li = 0; li < src->nlayers && !rc; li++) { /* insertion order is topological */
        const kiln_layer *l = src->layers[li];
        if (l->nin > KILN_MAX_IO || l->nout > KILN_MAX_IO) {
            rc = kiln__err(KILN_EUNSUPPORTED, "network copy: layer '%s' has too many inputs/outputs", l->name);
            break;
        }
        for (int i = 0; i < l->nin; i++) ins[i] = l->in[i] >= 0 ? map[l->in[i]] : NULL;
        for (int k = 0; k < l->nout && !rc; k++) {
            int t = l->out[k];
            if (!map[t]) {
                if (!(map[t] = kiln__strfmt("%s%s", prefix, src->tensors[t].name)))
                    rc = kiln__err(KILN_ENOMEM, "network: out of memory");
            }
            outs[k] = map[t];
        }
        if (rc) break;
        snprintf(id, sizeof id, "%s::%s", l->op->ns, l->op->name);
        char *lname = kiln__strfmt("%s%s", prefix, l->name);
        kiln_layer *nl = lname ? kiln_network_add_layer(dst, id, l->op->version, lname, l->nin, ins, l->nout, outs)
                               : NULL;
        if (!lname) kiln__err(KILN_ENOMEM, "network: out of memory");
        kiln__free(lname);
        if (!nl) { rc = kiln__err_prefix(KILN_EINVAL, "network copy"); break; }
        /* Attribute values by copy; graph attributes stay src's (borrowed). */
        kiln__attrset copy;
        rc = kiln__attrset_copy(&copy, &l->attrs);
        if (rc) break;
        kiln__attrset_free(&nl->attrs);
        nl->attrs = copy;
        nl->aot = l->aot;
    }
    /* src outputs that are inputs or constants: a copy under the caller's name. */
    for (int k = 0; k < src->noutputs && !rc; k++) {
        int t = src->outputs[k];
        if (src->tensors[t].kind == KILN__T_LAYER) continue;
        const char *in1[1] = {map[t]}, *out1[1] = {out_names[k]};
        if (!kiln_network_add_layer(dst, "ai.onnx::Identity", 1, NULL, 1, in1, 1, out1))
            rc = kiln__err_prefix(KILN_EINVAL, "network copy: output %d", k);
    }
    for (int t = 0; t < src->ntensors; t++) kiln__free(map[t]);
    kiln__free(map);
    return rc;
}
