/* test_registry.c — registration rules, lookup, dump, library loading, and
 * the quick-op adapter. */
#include "plugin/registry_int.h"
#include "test.h"

#include <errno.h>
#include <stddef.h>
#include <unistd.h>

static int shape_same(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    return 0;
}

static int impl_calls_;
static int64_t impl_seen_k_;
static int impl_seen_tactic_;
static int impl_add(const kiln_call *c) {
    impl_calls_++;
    impl_seen_k_ = kiln_attrs_int(c->attrs, "k");
    impl_seen_tactic_ = c->tactic;
    return 0;
}

static const kiln_attr_def attrs_[] = {
    {"k", KILN_ATTR_INT, 0, "2", 0, "a count"},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, 1]", 0, "padding"},
    {"mode", KILN_ATTR_STRING, 0, "wrap", 0, NULL},
    {NULL},
};

static const kiln_combo formats_[] = {
    {"FP32|FP16, FP32|FP16", NULL, {1, 2}},
    {"FP32, FP32", "NHWC", {3}},
    {NULL},
};

static const kiln_quick_op op_v1 = {
    .ns = "test", .name = "add", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = attrs_, .shape = shape_same, .impl = impl_add, .formats = formats_, .timing_id = "pads",
    .doc = "adds things",
};
static const kiln_quick_op op_v3 = {
    .ns = "test", .name = "add", .version = 3, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = shape_same, .impl = impl_add,
};
static const kiln_quick_op op_v7 = {
    .ns = "test", .name = "add", .version = 7, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = shape_same, .impl = impl_add,
};
static const kiln_quick_op op_dup = {
    .ns = "test", .name = "add", .version = 3, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = shape_same, .impl = impl_add,
};


static void drop_log(void *ud, kiln_log_level l, const char *m) {
    (void)l;
    (void)m;
    (*(int *)ud)++;
}

TEST_IMPL(register_find_resolve) {
    int logged = 0;
    kiln_log_set(KILN_LOG_ERROR, drop_log, &logged);
    ASSERT_OK(kiln_register_quick_op(&op_v1));
    ASSERT_OK(kiln_register_quick_op(&op_v7));
    ASSERT_OK(kiln_register_quick_op(&op_v3));
    ASSERT_OK(kiln_register_quick_op(&op_v3)); /* same struct again: no-op */
    const kiln__op *o = kiln__registry_find("test", "add", 3);
    ASSERT(o && o->origin == &op_v3 && o->version == 3);
    ASSERT(o->builtin); /* defined in this image, which holds libkiln */
    ASSERT(o->library == NULL);
    ASSERT(o->vt == &kiln__quick_vtable);
    ASSERT(kiln__registry_find("test", "add", 2) == NULL);
    ASSERT(kiln__registry_find("test", "sub", 1) == NULL);
    ASSERT(kiln__registry_find("tes", "add", 1) == NULL);
    ASSERT_EQ(kiln__registry_resolve("test", "add", 5)->version, 3);
    ASSERT_EQ(kiln__registry_resolve("test", "add", 100)->version, 7);
    ASSERT_EQ(kiln__registry_resolve("test", "add", 1)->version, 1);
    ASSERT(kiln__registry_resolve("test", "add", 0) == NULL);
    char buf[64];
    kiln__registry_versions("test", "add", buf, sizeof buf);
    ASSERT_STR_EQ(buf, "1, 3, 7");
    kiln__registry_versions("test", "nope", buf, sizeof buf);
    ASSERT_STR_EQ(buf, "none");
    /* the same lookups through the public API (what the ONNX importer uses) */
    kiln_op_info info;
    memset(&info, 0x5A, sizeof info);
    ASSERT_OK(kiln_registry_find("test", "add", 3, &info));
    ASSERT_STR_EQ(info.ns, "test");
    ASSERT_STR_EQ(info.name, "add");
    ASSERT_EQ(info.version, 3);
    ASSERT_OK(kiln_registry_find("test", "add", 7, NULL));
    ASSERT_EQ(kiln_registry_find("test", "add", 2, &info), KILN_ENOTFOUND);
    ASSERT_CONTAINS(kiln_errmsg(), "test::add version 2 is not registered (registered versions: 1, 3, 7)");
    ASSERT_OK(kiln_registry_resolve("test", "add", 5, &info));
    ASSERT_EQ(info.version, 3);
    ASSERT_OK(kiln_registry_resolve("test", "add", 2, &info));
    ASSERT_EQ(info.version, 1);
    ASSERT_EQ(info.nattrs, 3);
    ASSERT_STR_EQ(info.attrs[0].name, attrs_[0].name);
    ASSERT_OK(kiln_registry_resolve("test", "add", 100, &info));
    ASSERT_EQ(info.version, 7);
    ASSERT_EQ(kiln_registry_resolve("test", "add", 0, &info), KILN_ENOTFOUND);
    ASSERT_EQ(kiln_registry_resolve("test", "nope", 9, NULL), KILN_ENOTFOUND);
    ASSERT_CONTAINS(kiln_errmsg(), "(registered versions: none)");
    ASSERT_EQ(kiln_registry_find(NULL, "add", 1, NULL), KILN_ENOTFOUND);
    kiln_registry_versions("test", "add", buf, sizeof buf);
    ASSERT_STR_EQ(buf, "1, 3, 7");
    kiln_registry_versions(NULL, "add", buf, sizeof buf);
    ASSERT_STR_EQ(buf, "none");
    /* defaults parsed at registration */
    o = kiln__registry_find("test", "add", 1);
    ASSERT_EQ(o->nattrs, 3);
    ASSERT(o->attr_defaults[0].present && o->attr_defaults[0].i == 2);
    ASSERT_EQ(o->attr_defaults[1].count, 2);
    int found = 0;
    for (int i = 0; kiln__registry_at(i); i++) found += kiln__registry_at(i) == o;
    ASSERT_EQ(found, 1);
    /* duplicate: both definitions named */
    ASSERT_EQ(kiln_register_quick_op(&op_dup), KILN_EEXISTS);
    ASSERT_CONTAINS(kiln_errmsg(), "test::add v3");
    ASSERT_CONTAINS(kiln_errmsg(), "is already registered by");
    ASSERT(logged >= 1); /* failures are logged at ERROR */
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
}

TEST_IMPL(identity) {
    char buf[64];
    const char *ns, *name;
    ASSERT_OK(kiln__split_identity("sample::circ_pad", buf, sizeof buf, &ns, &name));
    ASSERT_STR_EQ(ns, "sample");
    ASSERT_STR_EQ(name, "circ_pad");
    ASSERT_OK(kiln__split_identity("ai.onnx::Conv", buf, sizeof buf, &ns, &name));
    ASSERT_STR_EQ(ns, "ai.onnx");
    ASSERT_STR_EQ(name, "Conv");
    ASSERT_EQ(kiln__split_identity("circ_pad", buf, sizeof buf, &ns, &name), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "namespace::name");
    ASSERT_EQ(kiln__split_identity("::x", buf, sizeof buf, &ns, &name), KILN_EINVAL);
    ASSERT_EQ(kiln__split_identity("a::", buf, sizeof buf, &ns, &name), KILN_EINVAL);
    ASSERT_EQ(kiln__split_identity("a::b::c", buf, sizeof buf, &ns, &name), KILN_EINVAL);
    ASSERT_EQ(kiln__split_identity("abc::def", buf, 4, &ns, &name), KILN_EINVAL);
    /* the reserved-namespace rule */
    ASSERT(kiln__registry_ns_reserved("ai.onnx"));
    ASSERT(kiln__registry_ns_reserved("ai.onnx.ml"));
    ASSERT(kiln__registry_ns_reserved("kiln"));
    ASSERT(!kiln__registry_ns_reserved("ai.onnxx"));
    ASSERT(!kiln__registry_ns_reserved("sample"));
    ASSERT(!kiln__registry_ns_reserved("kiln2"));
    ASSERT(kiln__registry_in_libkiln(&op_v1));
    ASSERT(!kiln__registry_in_libkiln((const void *)&fopen)); /* lives in libc */
}

static int dummy_create(const kiln_attrs *a, void **s) { (void)a; *s = malloc(4); return 0; }
static int dummy_clone(const void *s, void **o) { (void)s; *o = malloc(4); return 0; }
static void dummy_destroy(void *s) { free(s); }
static int dummy_shape(void *s, kiln_shape_ctx *c) { (void)s; c->out[0] = c->in[0]; return 0; }
static int dummy_enqueue(void *s, const kiln_call *c) { (void)s; (void)c; return 0; }
static int dummy_ser(const void *s, void *b, size_t *n) { (void)s; if (b) memcpy(b, "abc", 3); *n = 3; return 0; }
static int dummy_deser(const void *b, size_t n, void **s) {
    if (n != 3 || memcmp(b, "abc", 3)) return kiln_set_error(KILN_EFORMAT, "bad state blob");
    *s = malloc(4);
    return 0;
}

static kiln_plugin_vtable vt_ = {1, dummy_create, dummy_clone, dummy_destroy, dummy_shape, NULL, NULL, NULL,
                                 NULL, NULL, NULL, NULL, dummy_enqueue, dummy_ser, dummy_deser, NULL, NULL, NULL, NULL};

TEST_IMPL(validation) {
    kiln_log_set(KILN_LOG_ERROR, drop_log, &(int){0});
    kiln_quick_op q = op_v1;
    q.name = "v0";
    q.version = 0;
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "version 0");
    q = op_v1;
    q.name = "";
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    q = op_v1;
    q.name = "a::b";
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    q = op_v1;
    q.name = "counts";
    q.min_inputs = 2;
    q.max_inputs = 1;
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "test::counts");
    static const kiln_attr_def bad_def[] = {{"k", KILN_ATTR_INT, 0, "two", 0, NULL}, {NULL}};
    q = op_v1;
    q.name = "baddef";
    q.attrs = bad_def;
    q.timing_id = NULL;
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "test::baddef");
    ASSERT_CONTAINS(kiln_errmsg(), "'k'");
    static const kiln_combo bad_fmt[] = {{"FP32|FP16, FP32|FP16|INT8", NULL, {0}}, {NULL}};
    q = op_v1;
    q.name = "badfmt";
    q.formats = bad_fmt;
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "formats[0]");
    static const kiln_combo three_slots[] = {{"FP32, FP32, FP32", NULL, {0}}, {NULL}};
    q.formats = three_slots; /* 1 input + 1 output = 2 positions */
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    q = op_v1;
    q.name = "badtid";
    q.timing_id = "pads, nosuch";
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "'nosuch'");
    q = op_v1;
    q.name = "noshape";
    q.shape = NULL;
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    ASSERT(kiln__registry_find("test", "noshape", 1) == NULL);
    q = op_v1;
    q.name = "badsig";
    q.aot_signature = "i64,f16";
    ASSERT_EQ(kiln_register_quick_op(&q), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "'f16'");

    /* full plugins: vtable version and required entries */
    static kiln_plugin_vtable newer;
    newer = vt_;
    newer.version = KILN_PLUGIN_VTABLE_VERSION + 1;
    static kiln_plugin_def pd = {.ns = "test", .name = "plug", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1, .vt = &vt_, .doc = "a plugin"};
    static kiln_plugin_def pn = {.ns = "test", .name = "plug_new", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1, .vt = &newer, .doc = NULL};
    ASSERT_EQ(kiln_register_plugin(&pn), KILN_EVERSION);
    ASSERT_CONTAINS(kiln_errmsg(), "newer");
    static kiln_plugin_vtable noenq;
    noenq = vt_;
    noenq.enqueue = NULL;
    static kiln_plugin_def pe = {.ns = "test", .name = "plug_noenq", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1, .vt = &noenq, .doc = NULL};
    ASSERT_EQ(kiln_register_plugin(&pe), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "enqueue");
    ASSERT_OK(kiln_register_plugin(&pd));
    const kiln__op *o = kiln__registry_find("test", "plug", 1);
    ASSERT(o && o->origin == &pd && o->vt->enqueue == vt_.enqueue && !o->quick);
    void *st;
    ASSERT_OK(kiln__op_create(o, NULL, &st));
    uint8_t *blob;
    size_t n;
    ASSERT_OK(kiln__op_serialize(o, st, &blob, &n));
    ASSERT_EQ(n, 3);
    o->vt->destroy(st);
    ASSERT_OK(kiln__op_deserialize(o, blob, n, &st));
    o->vt->destroy(st);
    blob[0] = 'x';
    ASSERT_EQ(kiln__op_deserialize(o, blob, n, &st), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "test::plug");
    ASSERT_CONTAINS(kiln_errmsg(), "bad state blob");
    kiln__free(blob);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
}

TEST_IMPL(dump) {
    if (!kiln__registry_find("test", "add", 1)) ASSERT_OK(kiln_register_quick_op(&op_v1));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kiln_registry_dump(f, "test::add");
    fclose(f);
    ASSERT_CONTAINS(text, "test::add v1");
    ASSERT_CONTAINS(text, "test::add v7");
    ASSERT_CONTAINS(text, "adds things");
    ASSERT_CONTAINS(text, "attr k: int = 2");
    ASSERT_CONTAINS(text, "a count");
    ASSERT_CONTAINS(text, "attr pads: i64[] = [1, 1]");
    ASSERT_CONTAINS(text, "attr mode: string = \"wrap\"");
    ASSERT_CONTAINS(text, "FP32|FP16, FP32|FP16");
    ASSERT_CONTAINS(text, "tactics 1,2");
    ASSERT_CONTAINS(text, "aot: no");
    ASSERT(strstr(text, "test::plug") == NULL); /* filtered */
    free(text);
}

TEST_IMPL(quick_adapter) {
    if (!kiln__registry_find("test", "add", 1)) ASSERT_OK(kiln_register_quick_op(&op_v1));
    const kiln__op *o = kiln__registry_find("test", "add", 1);
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, o));
    kiln_attr_value v = {.present = 1, .type = KILN_ATTR_INT, .i = 9};
    ASSERT_OK(kiln__attrset_set(&s, "k", &v));
    kiln_attrs view = kiln__attrset_view(&s);
    void *st;
    ASSERT_OK(kiln__op_create(o, &view, &st));
    kiln__attrset_free(&s);
    const kiln_plugin_vtable *vt = o->vt;
    kiln_io_format io = {2, {KILN_DTYPE_F16, KILN_DTYPE_F16}, {KILN_FORMAT_LINEAR, KILN_FORMAT_LINEAR}};
    ASSERT_EQ(vt->supports_format(st, 0, &io), 1);
    ASSERT_EQ(vt->supports_format(st, 1, &io), 1);
    io.dtype[1] = KILN_DTYPE_F32; /* tied: F16 in, F32 out not offered */
    ASSERT_EQ(vt->supports_format(st, 1, &io), 0);
    io.dtype[0] = KILN_DTYPE_F32;
    io.format[0] = io.format[1] = KILN_FORMAT_NHWC;
    ASSERT_EQ(vt->supports_format(st, 1, &io), 1);
    io.dtype[0] = KILN_DTYPE_I64;
    ASSERT_EQ(vt->supports_format(st, 0, &io), 0);
    /* tactics follow the configured combination */
    int tac[16];
    io = (kiln_io_format){2, {KILN_DTYPE_F16, KILN_DTYPE_F16}, {KILN_FORMAT_LINEAR, KILN_FORMAT_LINEAR}};
    ASSERT_OK(vt->configure(st, &io, NULL, 0, NULL, 0));
    ASSERT_EQ(vt->valid_tactics(st, tac, 16), 2);
    ASSERT(tac[0] == 1 && tac[1] == 2);
    io = (kiln_io_format){2, {KILN_DTYPE_F32, KILN_DTYPE_F32}, {KILN_FORMAT_NHWC, KILN_FORMAT_NHWC}};
    ASSERT_OK(vt->configure(st, &io, NULL, 0, NULL, 0));
    ASSERT_EQ(vt->valid_tactics(st, tac, 16), 1);
    ASSERT_EQ(tac[0], 3);
    /* timing id: only "pads" */
    char tid[128];
    ASSERT_OK(vt->timing_id(st, tid, sizeof tid));
    ASSERT_CONTAINS(tid, "pads=");
    ASSERT(strstr(tid, "k=") == NULL);
    ASSERT_EQ(vt->timing_id(st, tid, 4), KILN_EINVAL);
    /* enqueue calls impl with the instance's attributes and the tactic */
    impl_calls_ = 0;
    kiln_call call;
    memset(&call, 0, sizeof call);
    call.tactic = 2;
    ASSERT_OK(vt->enqueue(st, &call));
    ASSERT_EQ(impl_calls_, 1);
    ASSERT_EQ(impl_seen_k_, 9);
    ASSERT_EQ(impl_seen_tactic_, 2);
    /* serialize -> deserialize keeps attributes */
    uint8_t *blob;
    size_t n;
    ASSERT_OK(kiln__op_serialize(o, st, &blob, &n));
    void *st2;
    ASSERT_OK(kiln__op_deserialize(o, blob, n, &st2));
    ASSERT_OK(vt->enqueue(st2, &call));
    ASSERT_EQ(impl_seen_k_, 9);
    void *st_bad = (void *)1;
    ASSERT_EQ(kiln__op_deserialize(o, blob, n - 1, &st_bad), KILN_EFORMAT);
    ASSERT(st_bad == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "test::add");
    void *st3;
    ASSERT_OK(vt->clone(st2, &st3));
    ASSERT_OK(vt->enqueue(st3, &call));
    ASSERT_EQ(impl_seen_k_, 9);
    vt->destroy(st3);
    vt->destroy(st2);
    kiln__free(blob);
    /* an op without formats: any dtype, LINEAR only, tactic 0 */
    const kiln__op *o3 = kiln__registry_find("test", "add", 3);
    ASSERT_OK(kiln__op_create(o3, NULL, &st2));
    io = (kiln_io_format){2, {KILN_DTYPE_I8, KILN_DTYPE_BOOL}, {KILN_FORMAT_LINEAR, KILN_FORMAT_NHWC}};
    ASSERT_EQ(o3->vt->supports_format(st2, 0, &io), 1);
    ASSERT_EQ(o3->vt->supports_format(st2, 1, &io), 0);
    ASSERT_EQ(o3->vt->valid_tactics(st2, tac, 16), 1);
    ASSERT_EQ(tac[0], 0);
    o3->vt->destroy(st2);
    o->vt->destroy(st);
}

/* Registrations and lookups from several threads at once. */
#include <pthread.h>
typedef struct reg_job {
    int id;
    kiln_quick_op ops[50];
    char names[50][16];
    int failures;
} reg_job;

static void *reg_thread(void *arg) {
    reg_job *j = arg;
    for (int i = 0; i < 50; i++) {
        snprintf(j->names[i], sizeof j->names[i], "t%d_%d", j->id, i);
        j->ops[i] = op_v3;
        j->ops[i].ns = "mt";
        j->ops[i].name = j->names[i];
        if (kiln_register_quick_op(&j->ops[i]) != 0) j->failures++;
        /* look up something another thread may be registering */
        char other[16];
        snprintf(other, sizeof other, "t%d_%d", (j->id + 1) % 4, i);
        const kiln__op *o = kiln__registry_find("mt", other, 3);
        if (o && strcmp(o->name, other) != 0) j->failures++;
        if (!kiln__registry_find("mt", j->names[i], 3)) j->failures++;
    }
    return NULL;
}

TEST_IMPL(concurrent_registration) {
    static reg_job jobs[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].id = i;
        pthread_create(&t[i], NULL, reg_thread, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) ASSERT_EQ(jobs[i].failures, 0);
    int count = 0;
    for (int i = 0; kiln__registry_at(i); i++) count += strcmp(kiln__registry_at(i)->ns, "mt") == 0;
    ASSERT_EQ(count, 200);
    /* an op struct on the heap lives in no image: not built in, so the
     * reserved namespaces are refused for it */
    kiln_quick_op *h = malloc(sizeof *h);
    *h = op_v3;
    h->ns = "kiln";
    h->name = "heap_op";
    int logged = 0;
    kiln_log_set(KILN_LOG_ERROR, drop_log, &logged);
    ASSERT_EQ(kiln_register_quick_op(h), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "reserved");
    h->ns = "heap";
    ASSERT_OK(kiln_register_quick_op(h));
    const kiln__op *o = kiln__registry_find("heap", "heap_op", 3);
    ASSERT(o && !o->builtin && !o->library);
    kiln_quick_op *h2 = malloc(sizeof *h2);
    *h2 = *h;
    ASSERT_EQ(kiln_register_quick_op(h2), KILN_EEXISTS);
    ASSERT_CONTAINS(kiln_errmsg(), "the main program");
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    free(h2); /* h stays registered for the life of the process */
}

/* Real plugin libraries, compiled here, when a C compiler is available. */
static int build_lib(const char *dir, const char *name, const char *src) {
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/%s.c", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(src, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -I%s/include -o %s/%s.so %s 2>&1", KILN_SOURCE_DIR, dir, name,
             path);
    return system(cmd);
}

static const char *lib_src_ =
    "#include <kiln/plugin.h>\n"
    "static int sh(kiln_shape_ctx *c) { c->out[0] = c->in[0]; return 0; }\n"
    "static int im(const kiln_call *c) { (void)c; return 0; }\n"
    "static const kiln_quick_op op = {.ns = NS, .name = \"circ\", .version = 1, .min_inputs = 1,\n"
    "  .max_inputs = 1, .num_outputs = 1, .shape = sh, .impl = im};\n"
    "KILN_OP(op)\n";

TEST_IMPL(load_library) {
    char dir[] = "/tmp/kiln_test_registry_XXXXXX";
    ASSERT(mkdtemp(dir));
    char src[1024];
    snprintf(src, sizeof src, "#define NS \"libtest\"\n%s", lib_src_);
    if (build_lib(dir, "a", src) != 0 || build_lib(dir, "b", src) != 0) {
        fprintf(stderr, "no C compiler: skipping library tests\n");
        return;
    }
    snprintf(src, sizeof src, "#define NS \"ai.onnx\"\n%s", lib_src_);
    ASSERT_EQ(build_lib(dir, "r", src), 0);
    char a[600], b[600], r[600], missing[600];
    snprintf(a, sizeof a, "%s/a.so", dir);
    snprintf(b, sizeof b, "%s/b.so", dir);
    snprintf(r, sizeof r, "%s/r.so", dir);
    snprintf(missing, sizeof missing, "%s/missing.so", dir);
    int logged = 0;
    kiln_log_set(KILN_LOG_ERROR, drop_log, &logged);
    ASSERT_OK(kiln_registry_load_library(a));
    const kiln__op *o = kiln__registry_find("libtest", "circ", 1);
    ASSERT(o);
    ASSERT(!o->builtin);
    ASSERT_CONTAINS(o->library, "/a.so");
    ASSERT_OK(kiln_registry_load_library(a)); /* same path twice: no-op */
    ASSERT_EQ(kiln_registry_load_library(b), KILN_EEXISTS);
    ASSERT_CONTAINS(kiln_errmsg(), "libtest::circ v1 from ");
    ASSERT_CONTAINS(kiln_errmsg(), "/b.so is already registered by ");
    ASSERT_CONTAINS(kiln_errmsg(), "/a.so");
    ASSERT_EQ(kiln_registry_load_library(b), KILN_EEXISTS); /* remembered */
    ASSERT_EQ(kiln_registry_load_library(r), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "reserved");
    ASSERT(kiln__registry_find("ai.onnx", "circ", 1) == NULL);
    ASSERT_EQ(kiln_registry_load_library(missing), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "missing.so");
    ASSERT_CONTAINS(kiln_errmsg(), "No such file");
    ASSERT_EQ(kiln_registry_load_library("libkiln_surely_absent_plugin.so"), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "dlopen failed");
    /* relative path to the same library: a no-op */
    char cwd[600];
    ASSERT(getcwd(cwd, sizeof cwd));
    ASSERT_EQ(chdir(dir), 0);
    ASSERT_OK(kiln_registry_load_library("./a.so"));
    ASSERT_EQ(chdir(cwd), 0);
    /* a file that is not a shared object */
    char junk[600];
    snprintf(junk, sizeof junk, "%s/a.c", dir);
    ASSERT_EQ(kiln_registry_load_library(junk), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "dlopen");
    /* A failure while loading is the call's result and message, not also
     * an ERROR log line (users saw it twice). */
    ASSERT_EQ(logged, 0);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ASSERT_EQ(system(cmd), 0);
}

/* A plugin compiled against an older, shorter kiln_quick_op registers with
 * the unknown trailing fields as zero; a longer (newer) struct is refused. */
TEST_IMPL(abi_sizes) {
    /* An "old" struct: only the fields up to `doc` (as in ABI 1), followed by
     * garbage that a size-unaware registry would read as the newer fields. */
    size_t old_size = offsetof(kiln_quick_op, doc) + sizeof(const char *);
    ASSERT(old_size < sizeof(kiln_quick_op));
    union {
        kiln_quick_op q;
        unsigned char bytes[sizeof(kiln_quick_op) + 64];
    } u;
    memset(&u, 0xA5, sizeof u);
    kiln_quick_op base = {
        .ns = "test_abi", .name = "old", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
        .shape = shape_same, .impl = impl_add, .doc = "compiled against ABI 1",
    };
    memcpy(&u.q, &base, old_size);
    ASSERT_OK(kiln_register_quick_op_sized(&u.q, old_size));
    const kiln__op *o = kiln__registry_find("test_abi", "old", 1);
    ASSERT(o && o->quick);
    ASSERT(o->quick != &u.q); /* a zero-extended copy */
    ASSERT(o->quick->impl == impl_add);
    const unsigned char *tail = (const unsigned char *)o->quick + old_size;
    for (size_t i = 0; i < sizeof(kiln_quick_op) - old_size; i++) ASSERT_EQ(tail[i], 0);

    base.name = "newer";
    memcpy(&u.q, &base, sizeof base);
    ASSERT_EQ(kiln_register_quick_op_sized(&u.q, sizeof(kiln_quick_op) + 16), KILN_EVERSION);
    ASSERT_CONTAINS(kiln_errmsg(), "rebuild the plugin");
    ASSERT(!kiln__registry_find("test_abi", "newer", 1));
}

TEST_LIST(TEST_ENTRY(abi_sizes), TEST_ENTRY(register_find_resolve), TEST_ENTRY(identity), TEST_ENTRY(validation), TEST_ENTRY(dump),
          TEST_ENTRY(quick_adapter), TEST_ENTRY(concurrent_registration),
          TEST_ENTRY(load_library))
