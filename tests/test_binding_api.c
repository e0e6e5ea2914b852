/* test_binding_api.c — what the Python binding relies on in the C API:
 * `user` on every quick-op callback, registration copies its input,
 * unregistering, ops with no library file, formats_fn (autotune as a
 * function), the log callback outside kiln's lock, introspection as data. */
#include "kiln/plugin.h"
#include "test.h"

#include <pthread.h>

/* What each callback saw as its user pointer. */
typedef struct seen {
    int shape, impl, workspace, formats;
    int bad_user;
    unsigned tactics; /* bit t: impl ran with tactic t */
} seen;

static int scale_shape(kiln_shape_ctx *c) {
    seen *s = c->user;
    if (!s) return kiln_set_error(KILN_EINVAL, "shape: user is NULL");
    s->shape++;
    c->out[0] = c->in[0];
    return 0;
}

/* y = x * k + tactic (the tactic shows which candidate ran). */
static int scale_impl(const kiln_call *c) {
    seen *s = c->user;
    if (!s) return kiln_set_error(KILN_EINVAL, "impl: user is NULL");
    s->impl++;
    if (c->tactic >= 0 && c->tactic < 32) s->tactics |= 1u << c->tactic;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    double k = kiln_attrs_float(c->attrs, "k");
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = (float)(x[i] * k) + (float)c->tactic;
    return 0;
}

static size_t scale_ws(const kiln_call *c) {
    seen *s = c->user;
    if (s) s->workspace++;
    return s ? 64 : 0;
}

/* Autotune as a function of the attributes: "ntactics" tactics 1..n. */
static int scale_formats(const kiln_shape_ctx *c, kiln_combo *out, int max) {
    seen *s = c->user;
    s->formats++;
    int64_t n = kiln_attrs_int(c->attrs, "ntactics");
    if (n < 0) return kiln_set_error(KILN_EINVAL, "ntactics %lld < 0", (long long)n);
    if (n == 0 || max < 1) return 0;
    /* reused by every call: kiln must copy it before the next one */
    static char types[32];
    snprintf(types, sizeof types, "FP32, FP32");
    out[0].types = types;
    out[0].layouts = NULL;
    for (int t = 0; t < n && t < KILN_MAX_TACTICS; t++) out[0].tactics[t] = t + 1;
    return 1;
}

static const kiln_attr_def scale_attrs[] = {
    {"k", KILN_ATTR_FLOAT, 0, "2", 0, NULL},
    {"ntactics", KILN_ATTR_INT, 0, "0", 0, NULL},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* Registers bind::scale from heap memory that is scribbled over and freed
 * right after: the registry must have copied everything. */
static void register_scale(seen *s, int with_formats_fn) {
    kiln_quick_op *q = calloc(1, sizeof *q);
    kiln_attr_def *defs = malloc(sizeof scale_attrs);
    char *ns = strdup("bind"), *name = strdup("scale"), *doc = strdup("scales by k");
    memcpy(defs, scale_attrs, sizeof scale_attrs);
    defs[0].name = strdup("k");
    defs[0].def = strdup("2");
    *q = (kiln_quick_op){.ns = ns, .name = name, .version = 1, .min_inputs = 1, .max_inputs = 1,
                         .num_outputs = 1, .attrs = defs, .shape = scale_shape, .impl = scale_impl,
                         .workspace = scale_ws, .doc = doc, .user = s,
                         .formats_fn = with_formats_fn ? scale_formats : NULL};
    ASSERT_OK(kiln_register_quick_op(q));
    memset(ns, 'x', 4);
    memset(name, 'x', 5);
    memset((char *)defs[0].name, 'x', 1);
    free(ns);
    free(name);
    free(doc);
    free((void *)defs[0].name);
    free((void *)defs[0].def);
    free(defs);
    memset(q, 0xAB, sizeof *q);
    free(q);
}

/* x [n] or [3, 5] (n = 0) -> op (one layer named `layer`) -> y */
static kiln_network *unary_net(const char *op, const char *layer, int64_t n, kiln_layer **l) {
    kiln_network *net = kiln_network_create();
    int64_t d[2] = {n ? n : 3, 5};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, n ? 1 : 2, d, NULL));
    const char *in[] = {"x"}, *out[] = {"y"};
    *l = kiln_network_add_layer(net, op, 1, layer, 1, in, 1, out);
    ASSERT(*l);
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

static kiln_network *scale_net(double k, int64_t ntactics) {
    kiln_layer *l;
    kiln_network *net = unary_net("bind::scale", "scale1", 0, &l);
    ASSERT_OK(kiln_layer_set_float(l, "k", k));
    ASSERT_OK(kiln_layer_set_int(l, "ntactics", ntactics));
    return net;
}

static kiln_engine *build(const kiln_network *net, unsigned flags, kiln_build_stats *st) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, flags);
    kiln_build_config_set_threads(cfg, 1);
    kiln_build_config_set_timing_reps(cfg, 1);
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, st);
    kiln_build_config_free(cfg);
    if (rc) fprintf(stderr, "build: %s\n", kiln_errmsg());
    return e;
}

/* Runs e on fresh random x and checks y = x * k + tactic. */
static void check_run(kiln_engine *e, double k, int tactic) {
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float x[15], y[15];
    uint64_t seed = 0x5eed + (uint64_t)tactic;
    for (int i = 0; i < 15; i++) x[i] = test_randf(&seed, -3, 3);
    memset(y, 0xCD, sizeof y);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < 15; i++) ASSERT_NEAR(y[i], (float)(x[i] * k) + (float)tactic, 1e-5);
    kiln_context_free(ctx);
}

TEST_IMPL(user_reaches_callbacks_and_registry_copies) {
    static seen s;
    register_scale(&s, 0);
    kiln_network *net = scale_net(1.5, 0);
    kiln_engine *e = build(net, KILN_BUILD_NO_TIMING, NULL);
    ASSERT(e);
    ASSERT(s.shape >= 1);
    check_run(e, 1.5, 0);
    ASSERT(s.impl >= 1);
    ASSERT(s.workspace >= 1);
    /* the registry's copy: identity, doc and schema survived the frees */
    int found = 0;
    for (int i = 0, n = kiln_registry_count(); i < n; i++) {
        kiln_op_info info;
        ASSERT_OK(kiln_registry_op(i, &info));
        if (strcmp(info.ns, "bind") || strcmp(info.name, "scale")) continue;
        found = 1;
        ASSERT_STR_EQ(info.doc, "scales by k");
        ASSERT_EQ(info.nattrs, 2);
        ASSERT_STR_EQ(info.attrs[0].name, "k");
        ASSERT_STR_EQ(info.attrs[0].def, "2");
        ASSERT_STR_EQ(info.library, ""); /* heap: no library file */
        ASSERT(info.is_quick && info.has_impl && !info.has_aot && !info.builtin);
    }
    ASSERT(found);
    kiln_op_info info;
    ASSERT_EQ(kiln_registry_op(kiln_registry_count(), &info), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "out of range");

    /* a heap op has no library: embedding skips it, the engine lists it as
     * needed, and loading it after unregistering names it */
    kiln_engine *emb = build(net, KILN_BUILD_NO_TIMING | KILN_BUILD_EMBED_PLUGINS, NULL);
    ASSERT(emb);
    void *buf;
    size_t size;
    ASSERT_OK(kiln_engine_serialize(emb, &buf, &size));
    kiln_engine *back;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &back));
    check_run(back, 1.5, 0);
    kiln_engine_free(back);

    ASSERT_OK(kiln_registry_unregister("bind::scale", 1));
    ASSERT_EQ(kiln_registry_unregister("bind::scale", 1), KILN_ENOTFOUND);
    ASSERT_CONTAINS(kiln_errmsg(), "bind::scale v1");
    kiln_op_info bi;
    ASSERT_OK(kiln_registry_op(0, &bi)); /* libkiln's ops register first */
    ASSERT(bi.builtin);
    char bid[256];
    snprintf(bid, sizeof bid, "%s::%s", bi.ns, bi.name);
    ASSERT_EQ(kiln_registry_unregister(bid, bi.version), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "built into libkiln");
    ASSERT_EQ(kiln_registry_unregister("noseparator", 1), KILN_EINVAL);
    /* engines and networks made before keep working */
    check_run(e, 1.5, 0);
    kiln_engine *e2 = build(net, KILN_BUILD_NO_TIMING, NULL);
    ASSERT(e2);
    kiln_engine_free(e2);
    /* new lookups fail, naming the op */
    const char *in[] = {"x"}, *out[] = {"z"};
    ASSERT(!kiln_network_add_layer(net, "bind::scale", 1, NULL, 1, in, 1, out));
    ASSERT_CONTAINS(kiln_errmsg(), "bind::scale");
    ASSERT_EQ(kiln_engine_load_memory(buf, size, &back), KILN_EPLUGIN);
    ASSERT_CONTAINS(kiln_errmsg(), "bind::scale");
    kiln_free(buf);
    kiln_engine_free(emb);
    kiln_engine_free(e);
    kiln_network_free(net);
}

TEST_IMPL(formats_fn_autotune) {
    static seen s;
    register_scale(&s, 1); /* again after the unregister above: a new definition */
    /* three tactics from the attribute: each is timed, one is chosen */
    kiln_network *net = scale_net(0.5, 3);
    kiln_build_stats st;
    kiln_engine *e = build(net, 0, &st);
    ASSERT(e);
    ASSERT(s.formats >= 1);
    ASSERT_EQ(st.candidates, 3);
    ASSERT_EQ(st.timed, 3);
    ASSERT_EQ(s.tactics, 0xEu); /* 1, 2 and 3 each ran while timing; 0 never */
    kiln_layer_info li;
    ASSERT_EQ(kiln_engine_num_layers(e), 1);
    ASSERT_OK(kiln_engine_layer_info(e, 0, &li));
    ASSERT_STR_EQ(li.name, "scale1");
    ASSERT_STR_EQ(li.op_ns, "bind");
    ASSERT_STR_EQ(li.op_name, "scale");
    ASSERT_EQ(li.nin, 1);
    ASSERT_STR_EQ(li.inputs[0], "x");
    ASSERT_STR_EQ(li.outputs[0], "y");
    ASSERT(li.tactic >= 1 && li.tactic <= 3);
    check_run(e, 0.5, li.tactic);
    ASSERT_EQ(kiln_engine_layer_info(e, 1, &li), KILN_EINVAL);
    kiln_engine_free(e);
    kiln_network_free(net);

    /* zero combinations: the default (tactic 0) */
    net = scale_net(0.5, 0);
    e = build(net, 0, &st);
    ASSERT(e);
    ASSERT_EQ(st.candidates, 1);
    check_run(e, 0.5, 0);
    kiln_engine_free(e);
    kiln_network_free(net);

    /* an error from formats_fn fails the build, naming layer and op */
    net = scale_net(0.5, -1);
    kiln_engine *bad = NULL;
    kiln_build_config *cfg = kiln_build_config_create();
    ASSERT(kiln_build(net, cfg, &bad, NULL) < 0);
    ASSERT(!bad);
    ASSERT_CONTAINS(kiln_errmsg(), "formats_fn");
    ASSERT_CONTAINS(kiln_errmsg(), "ntactics -1 < 0");
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    ASSERT_OK(kiln_registry_unregister("bind::scale", 1));
}

/* A bad combination string from formats_fn is refused like a bad `formats`. */
static int bad_formats(const kiln_shape_ctx *c, kiln_combo *out, int max) {
    (void)c;
    (void)max;
    out[0] = (kiln_combo){"FP32, FP99", NULL, {0}};
    return 1;
}

TEST_IMPL(formats_fn_bad_string) {
    static seen s;
    kiln_quick_op q = {.ns = "bind", .name = "badfmt", .version = 1, .min_inputs = 1, .max_inputs = 1,
                       .num_outputs = 1, .shape = scale_shape, .impl = scale_impl, .user = &s,
                       .formats_fn = bad_formats};
    ASSERT_OK(kiln_register_quick_op(&q));
    kiln_layer *l;
    kiln_network *net = unary_net("bind::badfmt", "b", 4, &l);
    kiln_layer_info li;
    ASSERT_OK(kiln_network_layer_info(net, 0, &li));
    ASSERT_STR_EQ(li.name, "b");
    ASSERT_STR_EQ(li.op_name, "badfmt");
    ASSERT_EQ(li.aot, -1);
    ASSERT_STR_EQ(li.outputs[0], "y");
    ASSERT_EQ(kiln_network_layer_info(net, 1, &li), KILN_EINVAL);
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_engine *e = NULL;
    ASSERT(kiln_build(net, cfg, &e, NULL) < 0);
    ASSERT_CONTAINS(kiln_errmsg(), "FP99");
    kiln_build_config_free(cfg);
    kiln_network_free(net);
}

/* The log callback runs outside kiln's log lock: it may call kiln_log_set
 * (which takes that lock) without deadlocking. */
static int g_logged;
static void relog(void *ud, kiln_log_level level, const char *msg) {
    (void)ud;
    (void)msg;
    g_logged++;
    kiln_log_set(level, relog, NULL);
}

TEST_IMPL(log_callback_outside_lock) {
    kiln_log_set(KILN_LOG_VERBOSE, relog, NULL);
    static seen s;
    kiln_quick_op q = {.ns = "bind", .name = "logged", .version = 1, .min_inputs = 1, .max_inputs = 1,
                       .num_outputs = 1, .shape = scale_shape, .impl = scale_impl, .user = &s};
    ASSERT_OK(kiln_register_quick_op(&q)); /* logs "registered op" at VERBOSE */
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    ASSERT(g_logged >= 1);
}

/* Full plugins: create_user / deserialize_user get the def's user. */
typedef struct pstate { float add; } pstate;
static int p_create(const kiln_attrs *a, void *user, void **st) {
    (void)a;
    pstate *p = malloc(sizeof *p);
    p->add = *(const float *)user;
    *st = p;
    return 0;
}
static int p_deser(const void *b, size_t n, void *user, void **st) {
    (void)b;
    (void)n;
    return p_create(NULL, user, st);
}
static int p_clone(const void *s, void **o) {
    pstate *p = malloc(sizeof *p);
    *p = *(const pstate *)s;
    *o = p;
    return 0;
}
static void p_destroy(void *s) { free(s); }
static int p_shape(void *s, kiln_shape_ctx *c) {
    (void)s;
    c->out[0] = c->in[0];
    return 0;
}
static int p_enqueue(void *s, const kiln_call *c) {
    const pstate *p = s;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = x[i] + p->add;
    return 0;
}
static int p_ser(const void *s, void *b, size_t *n) {
    (void)s;
    (void)b;
    *n = 0;
    return 0;
}

TEST_IMPL(plugin_create_user) {
    static const kiln_plugin_vtable vt = {.version = 1, .clone = p_clone, .destroy = p_destroy, .shape = p_shape,
                                          .enqueue = p_enqueue, .serialize = p_ser};
    static const float add = 0.25f;
    kiln_plugin_def d = {.ns = "bind", .name = "addc", .version = 1, .min_inputs = 1, .max_inputs = 1,
                         .num_outputs = 1, .vt = &vt, .user = (void *)&add};
    ASSERT_EQ(kiln_register_plugin(&d), KILN_EINVAL); /* neither create nor create_user */
    ASSERT_CONTAINS(kiln_errmsg(), "create");
    d.create_user = p_create;
    d.deserialize_user = p_deser;
    ASSERT_OK(kiln_register_plugin(&d));
    kiln_layer *l;
    kiln_network *net = unary_net("bind::addc", "a", 6, &l);
    kiln_engine *e = build(net, KILN_BUILD_NO_TIMING, NULL);
    ASSERT(e);
    void *buf;
    size_t size;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *back;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &back)); /* deserialize_user */
    kiln_free(buf);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(back, 1, &ctx));
    float x[6], y[6];
    uint64_t seed = 99;
    for (int i = 0; i < 6; i++) x[i] = test_randf(&seed, -1, 1);
    memset(y, 0xCD, sizeof y);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < 6; i++) ASSERT_NEAR(y[i], x[i] + 0.25f, 1e-6);
    kiln_context_free(ctx);
    kiln_engine_free(back);
    kiln_engine_free(e);
    kiln_network_free(net);
}

TEST_IMPL(version) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH);
    ASSERT_STR_EQ(kiln_version(), want);
    ASSERT_EQ(kiln_abi_version(), KILN_ABI_VERSION);
}

TEST_LIST(TEST_ENTRY(user_reaches_callbacks_and_registry_copies), TEST_ENTRY(formats_fn_autotune),
          TEST_ENTRY(formats_fn_bad_string), TEST_ENTRY(log_callback_outside_lock), TEST_ENTRY(plugin_create_user),
          TEST_ENTRY(version))
