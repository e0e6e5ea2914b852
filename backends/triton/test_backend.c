/* test_backend.c — the kiln Triton backend driven through its
 * TRITONBACKEND entry points by a stand-in server: this file defines the
 * TRITONSERVER_* / TRITONBACKEND_* functions the backend calls, with the
 * semantics tritonbackend.h documents, so the backend's lifecycle, request
 * handling and error responses are tested without Triton (and under ASan).
 *
 * usage: test_triton_backend <ppocr_cls folder> <scratch folder>
 * The model is the real PP-OCR classifier; outputs are compared with ONNX
 * Runtime's reference (test_data_set_0, rtol 1e-3 atol 1e-4). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "kiln/onnx.h"
#include "triton_api.h"

/* ---- the stand-in server ------------------------------------------------- */
struct TRITONSERVER_Error { TRITONSERVER_Error_Code code; char msg[2048]; };
struct TRITONSERVER_Message { const char *json; char *owned; };
struct TRITONBACKEND_Model {
    const char *name, *dir, *config;
    uint64_t version;
    void *state;
    int auto_complete; /* what TRITONBACKEND_ModelAutoCompleteConfig answers */
    char *set_config;  /* the config the backend set (auto-complete), or NULL */
};
struct TRITONBACKEND_Input {
    const char *name;
    TRITONSERVER_DataType dtype;
    int64_t shape[8];
    uint32_t ndim, nbuf; /* nbuf > 1: the data is handed out in nbuf pieces */
    const void *data;
    uint64_t bytes;
};
struct TRITONBACKEND_Request {
    struct TRITONBACKEND_Input in[4];
    uint32_t nin;
    int released;
};
struct TRITONBACKEND_Output { char name[64]; TRITONSERVER_DataType dtype; int64_t shape[8]; uint32_t ndim; void *buf; };
struct TRITONBACKEND_Response {
    struct TRITONBACKEND_Output out[4];
    uint32_t nout;
    int sent;
    char error[2048]; /* "" = success */
};
struct TRITONBACKEND_ModelInstance {
    TRITONBACKEND_Model *model;
    void *state;
    int stats_ok, stats_fail;
    int runs, rows; /* batch statistics: kiln runs and the rows they held */
    int gpu;        /* KIND_GPU (else KIND_CPU), on GPU 0 */
};

/* The last message the backend logged. */
static char last_log[512];

/* Responses of the last Execute, in request order. */
static struct TRITONBACKEND_Response responses[16];
static int nresponses;

TRITONSERVER_Error *TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char *msg)
{
    TRITONSERVER_Error *e = calloc(1, sizeof *e);
    e->code = code;
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    return e;
}
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *e) { free(e); }
const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *e) { return e->msg; }
TRITONSERVER_Error *TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message *m, const char **base,
                                                        size_t *size)
{
    *base = m->json;
    *size = strlen(m->json);
    return NULL;
}
TRITONSERVER_Error *TRITONSERVER_MessageDelete(TRITONSERVER_Message *m)
{
    free(m->owned);
    free(m);
    return NULL;
}
TRITONSERVER_Error *TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message **m, const char *base, size_t size)
{
    *m = calloc(1, sizeof **m);
    (*m)->json = (*m)->owned = strndup(base, size);
    return NULL;
}
TRITONSERVER_Error *TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char *file, const int line, const char *msg)
{
    (void)level, (void)file, (void)line;
    snprintf(last_log, sizeof last_log, "%s", msg);
    return NULL;
}
/* Triton's --backend-config=kiln,default-max-batch-size=6; the message
 * stays Triton's (freeing it would be a double free: ASan sees it). */
static struct TRITONSERVER_Message backend_config = { "{\"cmdline\":{\"default-max-batch-size\":\"6\"}}", NULL };
TRITONSERVER_Error *TRITONBACKEND_BackendConfig(TRITONBACKEND_Backend *b, TRITONSERVER_Message **out)
{
    (void)b;
    *out = &backend_config;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model *m, bool *on)
{
    *on = m->auto_complete;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model *m, const uint32_t v, TRITONSERVER_Message *cfg)
{
    if (v != 1) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "config version 1 only");
    free(m->set_config);
    m->set_config = strdup(cfg->json);
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance *i, int32_t *id)
{
    (void)i;
    *id = 0;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ApiVersion(uint32_t *major, uint32_t *minor) { *major = 1; *minor = 19; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelName(TRITONBACKEND_Model *m, const char **n) { *n = m->name; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelVersion(TRITONBACKEND_Model *m, uint64_t *v) { *v = m->version; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelRepository(TRITONBACKEND_Model *m, TRITONBACKEND_ArtifactType *t, const char **loc)
{
    *t = TRITONBACKEND_ARTIFACT_FILESYSTEM;
    *loc = m->dir;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelConfig(TRITONBACKEND_Model *m, uint32_t v, TRITONSERVER_Message **out)
{
    (void)v;
    *out = calloc(1, sizeof **out);
    (*out)->json = m->set_config ? m->set_config : m->config;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelState(TRITONBACKEND_Model *m, void **s) { *s = m->state; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelSetState(TRITONBACKEND_Model *m, void *s) { m->state = s; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance *i, TRITONBACKEND_Model **m) { *m = i->model; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance *i, const char **n) { (void)i; *n = "cls_0"; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance *i, TRITONSERVER_InstanceGroupKind *k)
{
    *k = i->gpu ? TRITONSERVER_INSTANCEGROUPKIND_GPU : TRITONSERVER_INSTANCEGROUPKIND_CPU;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance *i, void **s) { *s = i->state; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance *i, void *s) { i->state = s; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance *i, TRITONBACKEND_Request *r,
                                                                const bool ok, const uint64_t a, const uint64_t b,
                                                                const uint64_t c, const uint64_t d)
{
    if (r->released || !(a <= b && b <= c && c <= d))
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "statistics out of order");
    if (ok) i->stats_ok++;
    else i->stats_fail++;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance *i, const uint64_t n,
                                                                     const uint64_t a, const uint64_t b,
                                                                     const uint64_t c, const uint64_t d)
{
    if (!(a <= b && b <= c && c <= d))
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "batch statistics out of order");
    i->runs++;
    i->rows += (int)n;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestInput(TRITONBACKEND_Request *r, const char *name, TRITONBACKEND_Input **in)
{
    for (uint32_t i = 0; i < r->nin; i++)
        if (!strcmp(r->in[i].name, name)) {
            *in = &r->in[i];
            return NULL;
        }
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_NOT_FOUND, "no such input");
}
TRITONSERVER_Error *TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request *r, uint32_t *n) { *n = r->nin; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request *r, uint32_t *n) { (void)r; *n = 0; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request *r, const uint32_t i, const char **n)
{
    (void)r, (void)i, (void)n;
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "no outputs requested");
}
TRITONSERVER_Error *TRITONBACKEND_RequestRelease(TRITONBACKEND_Request *r, uint32_t f) { (void)f; r->released++; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_InputProperties(TRITONBACKEND_Input *in, const char **name, TRITONSERVER_DataType *dt,
                                                  const int64_t **shape, uint32_t *ndim, uint64_t *bytes, uint32_t *nbuf)
{
    if (name) *name = in->name;
    *dt = in->dtype;
    *shape = in->shape;
    *ndim = in->ndim;
    *bytes = in->bytes;
    *nbuf = in->nbuf;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_InputBuffer(TRITONBACKEND_Input *in, const uint32_t idx, const void **buf,
                                              uint64_t *size, TRITONSERVER_MemoryType *mt, int64_t *mid)
{
    uint64_t piece = in->bytes / in->nbuf, at = piece * idx;
    *buf = (const char *)in->data + at;
    *size = idx + 1 == in->nbuf ? in->bytes - at : piece;
    *mt = TRITONSERVER_MEMORY_CPU;
    *mid = 0;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseNew(TRITONBACKEND_Response **resp, TRITONBACKEND_Request *r)
{
    (void)r;
    *resp = &responses[nresponses++];
    memset(*resp, 0, sizeof **resp);
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response *resp) { (void)resp; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response *resp, TRITONBACKEND_Output **out, const char *name,
                                                 const TRITONSERVER_DataType dt, const int64_t *shape, const uint32_t ndim)
{
    struct TRITONBACKEND_Output *o = &resp->out[resp->nout++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dtype = dt;
    o->ndim = ndim;
    memcpy(o->shape, shape, ndim * sizeof *shape);
    *out = o;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output *o, void **buf, const uint64_t size,
                                               TRITONSERVER_MemoryType *mt, int64_t *mid)
{
    o->buf = malloc(size ? size : 1);
    memset(o->buf, 0xA5, size); /* poison: every byte must be written */
    *buf = o->buf;
    *mt = TRITONSERVER_MEMORY_CPU;
    *mid = 0;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseSend(TRITONBACKEND_Response *resp, const uint32_t flags, TRITONSERVER_Error *e)
{
    resp->sent = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL;
    if (e) snprintf(resp->error, sizeof resp->error, "%s", e->msg);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *);
TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *);
TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance *);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance *);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *, TRITONBACKEND_Request **,
                                                       const uint32_t);

/* ---- the test ------------------------------------------------------------ */
static int failures;

#define CHECK(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void free_responses(void)
{
    for (int r = 0; r < nresponses; r++)
        for (uint32_t o = 0; o < responses[r].nout; o++) free(responses[r].out[o].buf);
    nresponses = 0;
}

/* Error text of model initialisation (NULL: success); caller frees. */
static char *init_error(TRITONSERVER_Error *e)
{
    char *msg = e ? strdup(e->msg) : NULL;
    TRITONSERVER_ErrorDelete(e);
    return msg;
}

static int close_to(const float *got, const float *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= 1e-4f + 1e-3f * fabsf(want[i]))) {
            fprintf(stderr, "%s: element %lld: got %g, want %g\n", what, (long long)i, got[i], want[i]);
            return 0;
        }
    return 1;
}

static struct TRITONBACKEND_Input input(TRITONSERVER_DataType dt, int64_t batch, const void *data,
                                        uint64_t bytes, uint32_t nbuf)
{
    struct TRITONBACKEND_Input in = { "x", dt, { batch, 3, 48, 192 }, 4, nbuf, data, bytes };
    return in;
}

/* A model folder <scratch>/<name>/1/ holding `file` (a link to `target`,
 * or nothing when target is NULL); returns <scratch>/<name> in dir. */
static void model_dir(const char *scratch, const char *name, const char *file, const char *target,
                      char *dir, size_t size)
{
    char path[4096];
    snprintf(dir, size, "%s/%s", scratch, name);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/1", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/1/model.kiln", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/1/model.onnx", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/1/%s", dir, file);
    if (target && symlink(target, path)) perror(path);
}

/* Load `m` (error text or NULL), run one request of `batch` rows through a
 * fresh instance and check every row against ONNX Runtime's reference
 * (every row of x is the reference input). */
static char *load_and_serve(TRITONBACKEND_Model *m, const float *x, int64_t batch, const float *y)
{
    char *err = init_error(TRITONBACKEND_ModelInitialize(m));
    if (err) return err;
    TRITONBACKEND_ModelInstance inst = { m, NULL, 0, 0, 0, 0, 0 };
    CHECK(!init_error(TRITONBACKEND_ModelInstanceInitialize(&inst)), "instance of '%s'", m->name);
    TRITONBACKEND_Request r = { 0 };
    r.in[0] = input(TRITONSERVER_TYPE_FP32, batch, x, (uint64_t)batch * 3 * 48 * 192 * 4, 1);
    r.nin = 1;
    TRITONBACKEND_Request *one = &r;
    TRITONBACKEND_ModelInstanceExecute(&inst, &one, 1);
    CHECK(nresponses == 1 && !responses[0].error[0], "'%s' serves batch %lld: '%s'", m->name,
          (long long)batch, responses[0].error);
    for (int64_t b = 0; nresponses == 1 && !responses[0].error[0] && b < batch; b++)
        CHECK(close_to((float *)responses[0].out[0].buf + 2 * b, y, 2, m->name), "'%s' row %lld matches ONNX Runtime",
              m->name, (long long)b);
    free_responses();
    TRITONBACKEND_ModelInstanceFinalize(&inst);
    TRITONBACKEND_ModelFinalize(m);
    return NULL;
}

/* The completed config's entry `section`[0] as "name type [dims]". */
static void describe_entry(const kt_json *cfg, const char *section, char *out, size_t size)
{
    const kt_json *list = kt_json_get(cfg, section);
    const kt_json *e = list && list->type == KT_JSON_ARRAY && list->n == 1 ? list->items[0] : NULL;
    const kt_json *dims = kt_json_get(e, "dims");
    int at = snprintf(out, size, "%s %s [", kt_json_str(kt_json_get(e, "name")) ? kt_json_str(kt_json_get(e, "name")) : "?",
                      kt_json_str(kt_json_get(e, "data_type")) ? kt_json_str(kt_json_get(e, "data_type")) : "?");
    for (int d = 0; dims && dims->type == KT_JSON_ARRAY && d < dims->n && at < (int)size; d++)
        at += snprintf(out + at, size - (size_t)at, "%s%s", d ? "," : "", dims->items[d]->text);
    if (at < (int)size) snprintf(out + at, size - (size_t)at, "]");
}

/* Auto-complete (Triton's default), the config check, and instance kinds:
 * KIND_GPU is built for CUDA, or fails cleanly on a machine without a GPU. */
static void test_config(const char *onnx, const char *scratch, const float *x, const float *y)
{
    char dir[4096], path[4096], desc[256];
    /* model.kiln with a batch profile 1..8, and an empty config. */
    model_dir(scratch, "auto", "model.kiln", NULL, dir, sizeof dir);
    kiln_network *net = NULL;
    kiln_build_config *bc = kiln_build_config_create();
    kiln_engine *e = NULL;
    int64_t mn[4] = { 1, 3, 48, 192 }, op[4] = { 2, 3, 48, 192 }, mx[4] = { 8, 3, 48, 192 };
    snprintf(path, sizeof path, "%s/1/model.kiln", dir);
    CHECK(!kiln_onnx_import(onnx, NULL, &net) && !kiln_build_config_set_profile(bc, "x", 4, mn, op, mx) &&
              !kiln_build(net, bc, &e, NULL) && !kiln_engine_save(e, path),
          "build ppocr_cls with batch 1..8: %s", kiln_errmsg());
    kiln_engine_free(e);
    kiln_build_config_free(bc);
    kiln_network_free(net);
    const char *empty = "{\"name\":\"auto\",\"max_batch_size\":0,\"input\":[],\"output\":[]}";
    TRITONBACKEND_Model am = { "auto", dir, empty, 1, NULL, 1, NULL };
    char *err = load_and_serve(&am, x, 3, y);
    CHECK(!err, "auto-completed model.kiln loads: %s", err);
    free(err);
    char jerr[256];
    kt_json *cfg = am.set_config ? kt_json_parse(am.set_config, strlen(am.set_config), jerr, sizeof jerr) : NULL;
    CHECK(cfg, "auto-complete set a config (%s)", am.set_config ? jerr : "none set");
    int64_t mb = 0;
    CHECK(!kt_json_int(kt_json_get(cfg, "max_batch_size"), &mb) && mb == 8, "max_batch_size 8 (profile max): %lld",
          (long long)mb);
    CHECK(kt_json_get(cfg, "dynamic_batching") != NULL, "dynamic batching turned on: %s", am.set_config);
    describe_entry(cfg, "input", desc, sizeof desc);
    CHECK(!strcmp(desc, "x TYPE_FP32 [3,48,192]"), "input completed: %s", desc);
    describe_entry(cfg, "output", desc, sizeof desc);
    CHECK(!strcmp(desc, "softmax_0.tmp_0 TYPE_FP32 [2]"), "output completed: %s", desc);
    kt_json_free(cfg);
    free(am.set_config);

    /* Auto-complete off (--disable-auto-complete-config): nothing set. */
    TRITONBACKEND_Model off = { "auto", dir, empty, 1, NULL, 0, NULL };
    err = init_error(TRITONBACKEND_ModelInitialize(&off));
    CHECK(!err && !off.set_config, "no auto-complete: loads, config untouched: %s", err);
    free(err);
    TRITONBACKEND_ModelFinalize(&off);

    /* max_batch_size set by the config, no scheduler: IO completed, the
     * dynamic batcher stays off (how a user opts out of it). */
    const char *mb4 = "{\"name\":\"auto\",\"max_batch_size\":4,\"input\":[],\"output\":[]}";
    TRITONBACKEND_Model own = { "auto", dir, mb4, 1, NULL, 1, NULL };
    err = init_error(TRITONBACKEND_ModelInitialize(&own));
    CHECK(!err && own.set_config && strstr(own.set_config, "\"max_batch_size\":4") &&
              strstr(own.set_config, "softmax_0.tmp_0") && !strstr(own.set_config, "dynamic_batching"),
          "own max_batch_size kept, no dynamic batching added: %s / %s", err, own.set_config);
    free(err);
    free(own.set_config);
    TRITONBACKEND_ModelFinalize(&own);

    /* model.onnx whose inputs have a dynamic dim 0: max_batch_size is
     * Triton's default-max-batch-size (6 here); the config gives only the
     * dims the model leaves dynamic; data_type and the output are filled. */
    model_dir(scratch, "auto_onnx", "model.onnx", onnx, dir, sizeof dir);
    const char *dims_only = "{\"max_batch_size\":0,\"input\":[{\"name\":\"x\",\"data_type\":\"TYPE_INVALID\","
                            "\"dims\":[\"3\",\"48\",\"192\"]}],\"output\":[]}";
    TRITONBACKEND_Model ao = { "auto_onnx", dir, dims_only, 1, NULL, 1, NULL };
    err = load_and_serve(&ao, x, 6, y);
    CHECK(!err, "auto-completed model.onnx loads: %s", err);
    free(err);
    cfg = ao.set_config ? kt_json_parse(ao.set_config, strlen(ao.set_config), jerr, sizeof jerr) : NULL;
    CHECK(!kt_json_int(kt_json_get(cfg, "max_batch_size"), &mb) && mb == 6, "max_batch_size 6 (default): %s",
          ao.set_config);
    describe_entry(cfg, "input", desc, sizeof desc);
    CHECK(!strcmp(desc, "x TYPE_FP32 [3,48,192]"), "onnx input completed: %s", desc);
    kt_json_free(cfg);
    free(ao.set_config);

    /* The config is checked against the engine. */
    static const struct { const char *config, *want; } bad[] = {
        { "{\"max_batch_size\":4,\"input\":[{\"name\":\"x\",\"data_type\":\"TYPE_INT32\",\"dims\":[3,48,192]}]}",
          "input 'x': data_type TYPE_INT32, the engine has TYPE_FP32" },
        { "{\"max_batch_size\":4,\"input\":[{\"name\":\"img\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,48,192]}]}",
          "input 'img' is not an input of the engine (inputs: x)" },
        { "{\"max_batch_size\":4,\"output\":[{\"name\":\"softmax_0.tmp_0\",\"data_type\":\"TYPE_FP32\",\"dims\":[3]}]}",
          "output 'softmax_0.tmp_0': dims[0] = 3, the engine has 2" },
        { "{\"max_batch_size\":4,\"input\":[{\"name\":\"x\",\"data_type\":\"TYPE_FP32\",\"dims\":[1,3,48,192]}]}",
          "input 'x': 4 dims, the engine's tensor has rank 4 (with max_batch_size > 0" },
        { "{\"instance_group\":[{\"name\":\"g\",\"kind\":\"KIND_GPU\",\"gpus\":[\"1\"]}]}",
          "KIND_GPU on GPU 1, but kiln drives one GPU per process, GPU 0" },
        { "{\"instance_group\":[{\"name\":\"a\",\"kind\":\"KIND_CPU\"},{\"name\":\"b\",\"kind\":\"KIND_GPU\",\"gpus\":[0]}]}",
          "mixes KIND_CPU and KIND_GPU" },
        { "{\"instance_group\":[{\"name\":\"m\",\"kind\":\"KIND_MODEL\"}]}", "kind KIND_MODEL is not served" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        TRITONBACKEND_Model bm = { "auto", scratch, bad[i].config, 1, NULL, 0, NULL };
        snprintf(dir, sizeof dir, "%s/auto", scratch);
        bm.dir = dir;
        err = init_error(TRITONBACKEND_ModelInitialize(&bm));
        CHECK(err && strstr(err, bad[i].want) && !bm.state, "bad config %zu: want '%s', got '%s'", i, bad[i].want, err);
        free(err);
        if (bm.state) TRITONBACKEND_ModelFinalize(&bm);
    }

    /* KIND_GPU: model.onnx built for CUDA and served by a GPU instance where
     * kiln finds a GPU; else a load failure that says why. */
    model_dir(scratch, "gpu", "model.onnx", onnx, dir, sizeof dir);
    const char *gpu = "{\"max_batch_size\":2,\"input\":[{\"name\":\"x\",\"data_type\":\"TYPE_FP32\","
                      "\"dims\":[3,48,192]}],\"instance_group\":[{\"name\":\"g\",\"kind\":\"KIND_GPU\","
                      "\"count\":1,\"gpus\":[0]}]}";
    TRITONBACKEND_Model gm = { "gpu", dir, gpu, 1, NULL, 0, NULL };
    char devs[1024];
    if (kiln_devices_describe(devs, sizeof devs) < 1) {
        err = init_error(TRITONBACKEND_ModelInitialize(&gm));
        CHECK(err && strstr(err, "KIND_GPU: kiln finds no usable GPU (cuda") && !gm.state,
              "KIND_GPU without a GPU: '%s'", err ? err : "(loaded)");
        printf("KIND_GPU without a GPU fails cleanly: %s\n", err ? err : "(loaded?)");
        free(err);
    } else {
        err = init_error(TRITONBACKEND_ModelInitialize(&gm));
        CHECK(!err, "KIND_GPU model loads on this GPU machine: %s", err);
        free(err);
        if (gm.state) {
            TRITONBACKEND_ModelInstance cpu = { &gm, NULL, 0, 0, 0, 0, 0 };
            err = init_error(TRITONBACKEND_ModelInstanceInitialize(&cpu));
            CHECK(err && strstr(err, "built for KIND_GPU"), "a CPU instance of a GPU model: '%s'", err);
            free(err);
            TRITONBACKEND_ModelInstance g = { &gm, NULL, 0, 0, 0, 0, 1 };
            CHECK(!init_error(TRITONBACKEND_ModelInstanceInitialize(&g)), "GPU instance");
            TRITONBACKEND_Request r = { 0 };
            r.in[0] = input(TRITONSERVER_TYPE_FP32, 1, x, 3 * 48 * 192 * 4, 1);
            r.nin = 1;
            TRITONBACKEND_Request *one = &r;
            TRITONBACKEND_ModelInstanceExecute(&g, &one, 1);
            CHECK(nresponses == 1 && !responses[0].error[0] && close_to(responses[0].out[0].buf, y, 2, "gpu"),
                  "KIND_GPU instance matches ONNX Runtime: '%s'", responses[0].error);
            printf("KIND_GPU instance served ppocr_cls on the GPU\n");
            free_responses();
            TRITONBACKEND_ModelInstanceFinalize(&g);
            TRITONBACKEND_ModelFinalize(&gm);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <ppocr_cls folder> <scratch folder>\n", argv[0]);
        return 2;
    }
    char path[4096], onnx[4096];
    snprintf(onnx, sizeof onnx, "%s/model.onnx", argv[1]);
    if (access(onnx, R_OK)) {
        printf("skipped: %s not found\n", onnx);
        return 77;
    }
    /* A model repository folder: <scratch>/cls/1/model.onnx (a link). */
    snprintf(path, sizeof path, "%s", argv[2]);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/cls", argv[2]);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/cls/1", argv[2]);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/cls/1/model.kiln", argv[2]);
    unlink(path);
    snprintf(path, sizeof path, "%s/cls/1/model.onnx", argv[2]);
    unlink(path);
    if (symlink(onnx, path)) {
        perror(path);
        return 1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/cls", argv[2]);

    /* Reference data. */
    kiln_dtype dt;
    int ndim;
    int64_t xd[KILN_MAX_DIMS], yd[KILN_MAX_DIMS];
    void *x = NULL, *y = NULL;
    snprintf(path, sizeof path, "%s/test_data_set_0/input_0.pb", argv[1]);
    if (kiln_onnx_read_tensor(path, &dt, &ndim, xd, &x)) return fprintf(stderr, "%s\n", kiln_errmsg()), 1;
    snprintf(path, sizeof path, "%s/test_data_set_0/output_0.pb", argv[1]);
    if (kiln_onnx_read_tensor(path, &dt, &ndim, yd, &y)) return fprintf(stderr, "%s\n", kiln_errmsg()), 1;
    const int64_t per = 3 * 48 * 192;
    float *pair = malloc(2 * per * sizeof *pair); /* reference row + a fresh random row */
    memcpy(pair, x, per * sizeof *pair);
    srand(14);
    for (int64_t i = 0; i < per; i++) pair[per + i] = (float)rand() / RAND_MAX * 2 - 1;

    CHECK(TRITONBACKEND_Initialize(NULL) == NULL, "backend initialize");

    /* Protobuf's JSON mapping writes int64 as strings, as Triton does. */
    const char *config = "{\"name\":\"cls\",\"max_batch_size\":2,\"input\":[{\"name\":\"x\","
                         "\"data_type\":\"TYPE_FP32\",\"dims\":[\"3\",\"48\",\"192\"]}],"
                         "\"parameters\":{\"threads\":{\"string_value\":\"1\"}}}";
    TRITONBACKEND_Model model = { "cls", dir, config, 1, NULL, 0, NULL };
    char *err = init_error(TRITONBACKEND_ModelInitialize(&model));
    CHECK(!err, "model initialize: %s", err);
    snprintf(path, sizeof path, "%s/cls/1/model.kiln", argv[2]);
    CHECK(access(path, R_OK) == 0, "the built engine is cached as %s", path);
    free(err);
    TRITONBACKEND_ModelInstance inst = { &model, NULL, 0, 0, 0, 0, 0 };
    CHECK(!init_error(TRITONBACKEND_ModelInstanceInitialize(&inst)), "instance initialize");

    /* 0: reference, 1: batch of 2 (reference + random) in 3 buffers,
     * 2: the random row alone, 3: batch 3 > max_batch_size 2, 4: INT32,
     * 5: no input, 6: too few bytes for the shape. */
    TRITONBACKEND_Request reqs[7] = { 0 };
    reqs[0].in[0] = input(TRITONSERVER_TYPE_FP32, 1, x, per * 4, 1);
    reqs[1].in[0] = input(TRITONSERVER_TYPE_FP32, 2, pair, 2 * per * 4, 3);
    reqs[2].in[0] = input(TRITONSERVER_TYPE_FP32, 1, pair + per, per * 4, 1);
    float *three = calloc(3 * per, sizeof *three);
    reqs[3].in[0] = input(TRITONSERVER_TYPE_FP32, 3, three, 3 * per * 4, 1);
    reqs[4].in[0] = input(TRITONSERVER_TYPE_INT32, 1, x, per * 4, 1);
    reqs[6].in[0] = input(TRITONSERVER_TYPE_FP32, 1, x, per * 4 - 4, 1);
    TRITONBACKEND_Request *rp[7];
    for (int i = 0; i < 7; i++) {
        reqs[i].nin = i == 5 ? 0 : 1;
        rp[i] = &reqs[i];
    }
    CHECK(TRITONBACKEND_ModelInstanceExecute(&inst, rp, 7) == NULL, "execute");
    CHECK(nresponses == 7, "one response per request, got %d", nresponses);
    for (int i = 0; i < 7; i++) {
        CHECK(reqs[i].released == 1, "request %d released once (%d)", i, reqs[i].released);
        CHECK(responses[i].sent, "response %d sent as final", i);
    }
    for (int i = 0; i < 3; i++) CHECK(!responses[i].error[0], "request %d: %s", i, responses[i].error);
    if (!responses[0].error[0] && !responses[1].error[0] && !responses[2].error[0]) {
        struct TRITONBACKEND_Output *o0 = &responses[0].out[0], *o1 = &responses[1].out[0], *o2 = &responses[2].out[0];
        CHECK(responses[0].nout == 1 && o0->ndim == 2 && o0->shape[0] == 1 && o0->shape[1] == 2 &&
                  o0->dtype == TRITONSERVER_TYPE_FP32, "output 0 is FP32 [1,2]");
        CHECK(o1->shape[0] == 2, "batched output has 2 rows (%lld)", (long long)o1->shape[0]);
        CHECK(close_to(o0->buf, y, 2, "reference"), "request 0 matches ONNX Runtime");
        CHECK(close_to(o1->buf, y, 2, "batched row 0"), "batch row 0 matches ONNX Runtime");
        CHECK(close_to((float *)o1->buf + 2, o2->buf, 2, "batched row 1"),
              "batch row 1 equals the same input run alone");
    }
    CHECK(strstr(responses[3].error, "x") && strstr(responses[3].error, "3"),
          "over-profile batch names input and size: '%s'", responses[3].error);
    CHECK(strstr(responses[4].error, "expected FP32, found INT32"), "dtype error: '%s'", responses[4].error);
    CHECK(strstr(responses[5].error, "takes 1 inputs, request has 0"), "missing input: '%s'", responses[5].error);
    CHECK(strstr(responses[6].error, "needs 110592 bytes, the request holds 110588"), "short data: '%s'",
          responses[6].error);
    CHECK(inst.stats_ok == 3 && inst.stats_fail == 4, "statistics: %d ok, %d failed", inst.stats_ok,
          inst.stats_fail);
    CHECK(inst.runs == 3 && inst.rows == 4, "3 runs of 4 rows in all (none could be gathered): %d, %d",
          inst.runs, inst.rows);
    float alone[2];
    memcpy(alone, responses[2].out[0].buf, sizeof alone);
    free_responses();

    /* Gathering: the reference and the random row (batch 1 each) are
     * concatenated into one run of 2 rows; a bad request between runs is
     * answered alone; each response holds its own row. */
    TRITONBACKEND_Request g[3] = { 0 };
    g[0].in[0] = input(TRITONSERVER_TYPE_FP32, 1, x, per * 4, 1);
    g[1].in[0] = input(TRITONSERVER_TYPE_FP32, 1, pair + per, per * 4, 2);
    g[2].in[0] = input(TRITONSERVER_TYPE_INT32, 1, x, per * 4, 1);
    TRITONBACKEND_Request *gp[3] = { &g[0], &g[1], &g[2] };
    for (int i = 0; i < 3; i++) g[i].nin = 1;
    inst.runs = inst.rows = 0;
    CHECK(TRITONBACKEND_ModelInstanceExecute(&inst, gp, 3) == NULL, "execute");
    CHECK(inst.runs == 1 && inst.rows == 2, "one run of 2 rows: %d runs, %d rows", inst.runs, inst.rows);
    CHECK(nresponses == 3 && !responses[0].error[0] && !responses[1].error[0] && responses[2].error[0],
          "gathered requests answered, the bad one refused");
    if (nresponses == 3 && !responses[0].error[0] && !responses[1].error[0]) {
        CHECK(responses[0].out[0].shape[0] == 1 && responses[1].out[0].shape[0] == 1,
              "each response has its own 1 row");
        CHECK(close_to(responses[0].out[0].buf, y, 2, "gathered row 0"), "gathered row 0 matches ONNX Runtime");
        CHECK(close_to(responses[1].out[0].buf, alone, 2, "gathered row 1"), "gathered row 1 = run alone");
    }
    free_responses();
    CHECK(!init_error(TRITONBACKEND_ModelInstanceFinalize(&inst)), "instance finalize");
    CHECK(!init_error(TRITONBACKEND_ModelFinalize(&model)), "model finalize");

    /* Second load: from the cached model.kiln; still serves the reference. */
    TRITONBACKEND_Model again = { "cls", dir, config, 1, NULL, 0, NULL };
    snprintf(path, sizeof path, "%s/cls/1/model.onnx", argv[2]);
    unlink(path); /* only the cache is left to load */
    err = init_error(TRITONBACKEND_ModelInitialize(&again));
    CHECK(!err, "load from the cache: %s", err);
    free(err);
    if (again.state) {
        TRITONBACKEND_ModelInstance i2 = { &again, NULL, 0, 0, 0, 0, 0 };
        CHECK(!init_error(TRITONBACKEND_ModelInstanceInitialize(&i2)), "instance on the cached engine");
        TRITONBACKEND_Request r = { 0 };
        r.in[0] = input(TRITONSERVER_TYPE_FP32, 1, x, per * 4, 1);
        r.nin = 1;
        TRITONBACKEND_Request *one = &r;
        TRITONBACKEND_ModelInstanceExecute(&i2, &one, 1);
        CHECK(nresponses == 1 && !responses[0].error[0] && close_to(responses[0].out[0].buf, y, 2, "cached"),
              "cached engine matches ONNX Runtime: '%s'", responses[0].error);
        free_responses();
        TRITONBACKEND_ModelInstanceFinalize(&i2);
        TRITONBACKEND_ModelFinalize(&again);
    }

    /* A missing plugin library is a load error that names it; so is a
     * version folder with no model. */
    const char *bad = "{\"max_batch_size\":2,\"parameters\":{\"plugins\":{\"string_value\":\"libnope.so\"}}}";
    TRITONBACKEND_Model nope = { "cls", dir, bad, 1, NULL, 0, NULL };
    err = init_error(TRITONBACKEND_ModelInitialize(&nope));
    CHECK(err && strstr(err, "libnope.so") && !nope.state, "missing plugin: '%s'", err);
    free(err);
    TRITONBACKEND_Model empty = { "cls", dir, config, 7, NULL, 0, NULL };
    err = init_error(TRITONBACKEND_ModelInitialize(&empty));
    CHECK(err && strstr(err, "version 7") && strstr(err, "model.kiln"), "no model file: '%s'", err);
    free(err);
    const char *malformed = "{\"max_batch_size\":2,";
    TRITONBACKEND_Model mal = { "cls", dir, malformed, 1, NULL, 0, NULL };
    err = init_error(TRITONBACKEND_ModelInitialize(&mal));
    CHECK(err && strstr(err, "JSON"), "malformed config: '%s'", err);
    free(err);

    /* Auto-complete: rows of the reference input. */
    float *refs = malloc(6 * per * sizeof *refs);
    for (int i = 0; i < 6; i++) memcpy(refs + i * per, x, per * sizeof *refs);
    test_config(onnx, argv[2], refs, y);
    free(refs);
    /* Every model and instance loaded above was released. */
    CHECK(strstr(last_log, "live: 0 models, 0 instances"), "the backend's counters: '%s'", last_log);

    free(three);
    free(pair);
    kiln_free(x);
    kiln_free(y);
    if (failures) return fprintf(stderr, "%d failures\n", failures), 1;
    printf("triton backend unit test: all checks passed\n");
    return 0;
}
