/*
 * cudnn.c — cuDNN convolutions, loaded with dlopen (cudnn.h says where).
 *
 * The handle is shared by the process (cuDNN binds it to the current CUDA
 * context: kiln's one primary context), so a call takes g_lock around
 * cudnnSetStream + the convolution; both only enqueue.  Plans (the
 * descriptors of one geometry/type/math) are made once and never change
 * afterwards except their lazily filled facts, also under g_lock.  At most
 * PLAN_CAP plans live at once: past that the least recently used one is
 * destroyed to make room (its descriptors are host objects that cuDNN
 * reads while it enqueues, so nothing in flight needs them afterwards).
 * kiln__cudnn_stand_in swaps cuDNN's descriptor calls for counting
 * stand-ins, so tests check that bookkeeping on machines without a GPU.
 */
#include "device/cuda/cudnn.h"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef int dnn_status;
typedef struct cudnnContext *dnn_handle;
typedef void *dnn_tensor, *dnn_filter, *dnn_conv, *dnn_act;
typedef struct { /* cudnnConvolutionFwdAlgoPerf_t */
    int algo;
    dnn_status status;
    float time;
    size_t memory;
    int determinism;
    int math_type;
    int reserved[3];
} dnn_perf;

enum {
    DNN_FLOAT = 0, DNN_HALF = 2, DNN_BFLOAT16 = 9,          /* cudnnDataType_t */
    DNN_NCHW = 0, DNN_NHWC = 1,                             /* cudnnTensorFormat_t */
    DNN_CROSS_CORRELATION = 1,                              /* cudnnConvolutionMode_t */
    DNN_ACT_RELU = 1, DNN_ACT_IDENTITY = 5,                 /* cudnnActivationMode_t */
    DNN_NOT_PROPAGATE_NAN = 0,
    DNN_DEFAULT_MATH = 0, DNN_TENSOR_OP_MATH = 1, DNN_FMA_MATH = 3, /* cudnnMathType_t */
    DNN_ALGO_PRECOMP = 1, /* the one algorithm that fuses an identity activation */
    PLAN_CAP = 512,
    PLAN_INDEX = 2 * PLAN_CAP, /* hash index slots (a power of two) */
};

static struct {
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(dnn_status);
    dnn_status (*Create)(dnn_handle *);
    dnn_status (*SetStream)(dnn_handle, CUstream);
    dnn_status (*CreateTensor)(dnn_tensor *);
    dnn_status (*SetTensor4d)(dnn_tensor, int, int, int, int, int, int);
    dnn_status (*CreateFilter)(dnn_filter *);
    dnn_status (*SetFilter4d)(dnn_filter, int, int, int, int, int, int);
    dnn_status (*CreateConv)(dnn_conv *);
    dnn_status (*SetConv2d)(dnn_conv, int, int, int, int, int, int, int, int);
    dnn_status (*SetGroupCount)(dnn_conv, int);
    dnn_status (*SetMathType)(dnn_conv, int);
    dnn_status (*GetConv2dOutDim)(dnn_conv, dnn_tensor, dnn_filter, int *, int *, int *, int *);
    dnn_status (*CreateAct)(dnn_act *);
    dnn_status (*SetAct)(dnn_act, int, int, double);
    dnn_status (*DestroyTensor)(dnn_tensor);
    dnn_status (*DestroyFilter)(dnn_filter);
    dnn_status (*DestroyConv)(dnn_conv);
    dnn_status (*DestroyAct)(dnn_act);
    dnn_status (*GetAlgoV7)(dnn_handle, dnn_tensor, dnn_filter, dnn_conv, dnn_tensor, int, int *, dnn_perf *);
    dnn_status (*GetWorkspace)(dnn_handle, dnn_tensor, dnn_filter, dnn_conv, dnn_tensor, int, size_t *);
    dnn_status (*Forward)(dnn_handle, const void *, dnn_tensor, const void *, dnn_filter, const void *, dnn_conv,
                          int, void *, size_t, const void *, dnn_tensor, void *);
    dnn_status (*BiasActForward)(dnn_handle, const void *, dnn_tensor, const void *, dnn_filter, const void *,
                                 dnn_conv, int, void *, size_t, const void *, dnn_tensor, const void *, dnn_tensor,
                                 const void *, dnn_act, dnn_tensor, void *);
} dnn;
static dnn_handle g_handle;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_status;
static char g_why[1024];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* cuDNN 9's libcudnn.so.9 loads its sub-libraries (libcudnn_cnn.so.9, ...)
 * by soname: when it comes from a folder the loader does not search,
 * open those first from the same folder so the soname lookups find them. */
static void *open_in_dir(const char *dir) {
    static const char *subs[] = {"libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
                                 "libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9",
                                 "libcudnn_ops.so.9", "libcudnn_cnn.so.9"};
    char p[1024];
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, subs[i]);
        dlopen(p, RTLD_NOW | RTLD_GLOBAL); /* absent ones are cuDNN's business */
    }
    snprintf(p, sizeof p, "%s/libcudnn.so.9", dir);
    return dlopen(p, RTLD_NOW | RTLD_LOCAL);
}

static void *open_path(const char *path) {
    struct stat st;
    if (!stat(path, &st) && S_ISDIR(st.st_mode)) return open_in_dir(path);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        void *h = open_in_dir(dir);
        if (h) return h;
    }
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* The pip wheel (nvidia-cudnn-cu1x) layout under the usual prefixes. */
static void *open_wheel(void) {
    const char *roots[] = {getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"), "/usr/local", "/usr"};
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        if (!roots[i] || !*roots[i]) continue;
        char pat[1024];
        snprintf(pat, sizeof pat, "%s/lib/python3*/*-packages/nvidia/cudnn/lib", roots[i]);
        glob_t g;
        if (glob(pat, 0, NULL, &g)) continue;
        void *h = NULL;
        for (size_t k = 0; !h && k < g.gl_pathc; k++) h = open_in_dir(g.gl_pathv[k]);
        globfree(&g);
        if (h) return h;
    }
    return NULL;
}

static void load_once(void) {
    const char *env = getenv("KILN_CUDNN");
    void *h = NULL;
    char tried[600];
    if (env && (!strcmp(env, "0") || !strcmp(env, "off"))) {
        snprintf(g_why, sizeof g_why, "cuDNN disabled by KILN_CUDNN=%s", env);
        g_status = KILN_EDEVICE;
        return;
    }
    if (env && *env) {
        h = open_path(env);
        if (!h) {
            const char *e = dlerror();
            snprintf(g_why, sizeof g_why, "cuDNN not loaded from $KILN_CUDNN=%s: %s", env, e ? e : "?");
            g_status = KILN_EDEVICE;
            return;
        }
    }
    if (!h) h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(tried, sizeof tried, "%s", e ? e : "not found");
        h = open_wheel();
    }
    if (!h) {
        snprintf(g_why, sizeof g_why,
                 "cuDNN not found (libcudnn.so.9 on the loader path: %s; nor in a pip wheel's "
                 "site-packages/nvidia/cudnn/lib; set KILN_CUDNN to the library or its folder)", tried);
        g_status = KILN_EDEVICE;
        return;
    }
    const kiln__dl_sym need[] = {
        {(void **)&dnn.GetVersion, "cudnnGetVersion", NULL},
        {(void **)&dnn.GetErrorString, "cudnnGetErrorString", NULL},
        {(void **)&dnn.Create, "cudnnCreate", NULL},
        {(void **)&dnn.SetStream, "cudnnSetStream", NULL},
        {(void **)&dnn.CreateTensor, "cudnnCreateTensorDescriptor", NULL},
        {(void **)&dnn.SetTensor4d, "cudnnSetTensor4dDescriptor", NULL},
        {(void **)&dnn.CreateFilter, "cudnnCreateFilterDescriptor", NULL},
        {(void **)&dnn.SetFilter4d, "cudnnSetFilter4dDescriptor", NULL},
        {(void **)&dnn.CreateConv, "cudnnCreateConvolutionDescriptor", NULL},
        {(void **)&dnn.SetConv2d, "cudnnSetConvolution2dDescriptor", NULL},
        {(void **)&dnn.SetGroupCount, "cudnnSetConvolutionGroupCount", NULL},
        {(void **)&dnn.SetMathType, "cudnnSetConvolutionMathType", NULL},
        {(void **)&dnn.GetConv2dOutDim, "cudnnGetConvolution2dForwardOutputDim", NULL},
        {(void **)&dnn.CreateAct, "cudnnCreateActivationDescriptor", NULL},
        {(void **)&dnn.SetAct, "cudnnSetActivationDescriptor", NULL},
        {(void **)&dnn.DestroyTensor, "cudnnDestroyTensorDescriptor", NULL},
        {(void **)&dnn.DestroyFilter, "cudnnDestroyFilterDescriptor", NULL},
        {(void **)&dnn.DestroyConv, "cudnnDestroyConvolutionDescriptor", NULL},
        {(void **)&dnn.DestroyAct, "cudnnDestroyActivationDescriptor", NULL},
        {(void **)&dnn.GetAlgoV7, "cudnnGetConvolutionForwardAlgorithm_v7", NULL},
        {(void **)&dnn.GetWorkspace, "cudnnGetConvolutionForwardWorkspaceSize", NULL},
        {(void **)&dnn.Forward, "cudnnConvolutionForward", NULL},
        {(void **)&dnn.BiasActForward, "cudnnConvolutionBiasActivationForward", NULL},
    };
    const char *miss = kiln__dl_resolve(h, need, sizeof need / sizeof need[0]);
    if (miss) {
        snprintf(g_why, sizeof g_why, "cuDNN lacks %s (kiln needs cuDNN 9)", miss);
        g_status = KILN_EDEVICE;
        return;
    }
    if (dnn.GetVersion() < 90000) {
        snprintf(g_why, sizeof g_why, "cuDNN %zu found, kiln needs 9.x", dnn.GetVersion());
        g_status = KILN_EDEVICE;
        return;
    }
    dnn_status s = dnn.Create(&g_handle);
    if (s) {
        snprintf(g_why, sizeof g_why, "cudnnCreate: %s (status %d)", dnn.GetErrorString(s), s);
        g_status = KILN_EDEVICE;
    }
}

int kiln__cudnn_load(void) {
    int rc = kiln__cuda_enter();
    if (rc) return rc;
    pthread_once(&g_once, load_once);
    return g_status ? kiln__err(g_status, "%s", g_why) : 0;
}

int kiln__cudnn_version(void) { return kiln__cudnn_load() ? 0 : (int)dnn.GetVersion(); }

int kiln__cudnn_tactic(const char *ns, const char *op, int tactic) {
    return tactic >= KILN_CUDNN_TACTIC0 && tactic < KILN_CUDNN_TACTIC0 + KILN_CUDNN_ALGOS && !strcmp(ns, "ai.onnx") &&
           !strcmp(op, "Conv");
}

void kiln__cudnn_signature(int version, char *buf, size_t size) {
    if (version > 0)
        snprintf(buf, size, "cudnn %d.%d.%d", version / 10000, version / 100 % 100, version % 100);
    else
        snprintf(buf, size, "cudnn none");
}

void kiln__cudnn_describe(char *buf, size_t size) {
    if (kiln__cudnn_load()) {
        snprintf(buf, size, "cudnn: %s\n", kiln_errmsg());
        return;
    }
    Dl_info di;
    int v = (int)dnn.GetVersion();
    snprintf(buf, size, "cudnn: %d.%d.%d, %s (Conv tactics 10..17)\n", v / 10000, v / 100 % 100, v % 100,
             dladdr((void *)dnn.Create, &di) && di.dli_fname ? di.dli_fname : "?");
}

static int dnn_check(dnn_status s, const char *call) {
    if (!s) return 0;
    return kiln__err(KILN_EDEVICE, "%s: %s (status %d)", call, dnn.GetErrorString(s), s);
}

/* ------------------------------------------------------------ plans */

static int g_stand_in; /* kiln__cudnn_stand_in */

typedef struct plan_key {
    kiln_cu_conv geo; /* act fields zeroed */
    int32_t dtype, tf32, relu, nhwc;
} plan_key;

typedef struct plan {
    int used;
    uint64_t hash, last_use; /* last_use: g_clock at its latest plan_get */
    plan_key key;
    dnn_tensor x, y, bias;
    dnn_filter w;
    dnn_conv conv;
    dnn_act act;
    int ranked[KILN_CUDNN_ALGOS]; /* -1 unknown, else 0/1 (kiln__cudnn_conv_ranked) */
    int64_t ws[KILN_CUDNN_ALGOS]; /* -2 unknown, -1 unsupported, else bytes */
    int fused[KILN_CUDNN_ALGOS];  /* -1 untried, 0 BiasActivationForward refused, 1 works */
} plan;
static plan g_plans[PLAN_CAP];
/* Open addressing over g_plans: plan number + 1, 0 empty. */
static int g_index[PLAN_INDEX];
static uint64_t g_clock;
static long g_made, g_evicted; /* kiln__cudnn_plan_stats */

static int dtype_of(kiln_dtype t) { return t == KILN_DTYPE_F16 ? DNN_HALF : t == KILN_DTYPE_BF16 ? DNN_BFLOAT16 : DNN_FLOAT; }

/* Destroys what plan_make made (also after a failure half-way). */
static void plan_free(plan *p) {
    if (p->x) dnn.DestroyTensor(p->x);
    if (p->y) dnn.DestroyTensor(p->y);
    if (p->bias) dnn.DestroyTensor(p->bias);
    if (p->w) dnn.DestroyFilter(p->w);
    if (p->conv) dnn.DestroyConv(p->conv);
    if (p->act) dnn.DestroyAct(p->act);
    memset(p, 0, sizeof *p);
}

static int plan_make(plan *p, const plan_key *k, uint64_t h) {
    memset(p, 0, sizeof *p);
    memcpy(&p->key, k, sizeof *k); /* with its zeroed padding: keys are compared with memcmp */
    p->hash = h;
    const kiln_cu_conv *g = &k->geo;
    int t = dtype_of((kiln_dtype)k->dtype), rc;
    const int fmt = k->nhwc ? DNN_NHWC : DNN_NCHW; /* x, y and the filter (KRSC) alike */
    int cpg = (int)(g->c / g->group);
    rc = dnn_check(dnn.CreateTensor(&p->x), "cudnnCreateTensorDescriptor");
    if (!rc) rc = dnn_check(dnn.CreateTensor(&p->y), "cudnnCreateTensorDescriptor");
    if (!rc) rc = dnn_check(dnn.CreateTensor(&p->bias), "cudnnCreateTensorDescriptor");
    if (!rc) rc = dnn_check(dnn.CreateFilter(&p->w), "cudnnCreateFilterDescriptor");
    if (!rc) rc = dnn_check(dnn.CreateConv(&p->conv), "cudnnCreateConvolutionDescriptor");
    if (!rc) rc = dnn_check(dnn.CreateAct(&p->act), "cudnnCreateActivationDescriptor");
    if (!rc)
        rc = dnn_check(dnn.SetTensor4d(p->x, fmt, t, (int)g->n, (int)g->c, (int)g->h, (int)g->w),
                       "cudnnSetTensor4dDescriptor(x)");
    if (!rc)
        rc = dnn_check(dnn.SetTensor4d(p->y, fmt, t, (int)g->n, (int)g->k, (int)g->oh, (int)g->ow),
                       "cudnnSetTensor4dDescriptor(y)");
    if (!rc) rc = dnn_check(dnn.SetTensor4d(p->bias, DNN_NCHW, t, 1, (int)g->k, 1, 1), "cudnnSetTensor4dDescriptor(bias)");
    if (!rc)
        rc = dnn_check(dnn.SetFilter4d(p->w, t, fmt, (int)g->k, cpg, g->kh, g->kw), "cudnnSetFilter4dDescriptor");
    /* FP16/BF16 accumulate in FP32; FP32 stays FP32 (FMA math: no TF32)
     * unless --tf32 */
    if (!rc)
        rc = dnn_check(dnn.SetConv2d(p->conv, g->ph, g->pw, g->sh, g->sw, g->dh, g->dw, DNN_CROSS_CORRELATION,
                                     DNN_FLOAT),
                       "cudnnSetConvolution2dDescriptor");
    if (!rc && g->group > 1) rc = dnn_check(dnn.SetGroupCount(p->conv, g->group), "cudnnSetConvolutionGroupCount");
    int math = k->dtype != KILN_DTYPE_F32 ? DNN_TENSOR_OP_MATH : k->tf32 ? DNN_DEFAULT_MATH : DNN_FMA_MATH;
    if (!rc) rc = dnn_check(dnn.SetMathType(p->conv, math), "cudnnSetConvolutionMathType");
    if (!rc)
        rc = dnn_check(dnn.SetAct(p->act, k->relu ? DNN_ACT_RELU : DNN_ACT_IDENTITY, DNN_NOT_PROPAGATE_NAN, 0.0),
                       "cudnnSetActivationDescriptor");
    if (!rc) { /* cuDNN pads symmetrically: kiln's end pads must give the same output */
        int on, oc, oh, ow;
        rc = dnn_check(dnn.GetConv2dOutDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow),
                       "cudnnGetConvolution2dForwardOutputDim");
        if (!rc && (oh != g->oh || ow != g->ow))
            rc = kiln__err(KILN_EUNSUPPORTED, "cuDNN conv: output %dx%d with symmetric padding, the layer's is %lldx%lld",
                           oh, ow, (long long)g->oh, (long long)g->ow);
    }
    for (int a = 0; a < KILN_CUDNN_ALGOS; a++) p->ranked[a] = -1, p->ws[a] = -2, p->fused[a] = -1;
    if (rc) plan_free(p); /* a failed plan is made again next time (and fails the same way) */
    else p->used = 1, g_made++;
    return rc;
}

/* Index slot of key k (hash h): >= 0 where it is, else -1 - the empty slot
 * that ends its probe run. */
static int index_find(const plan_key *k, uint64_t h) {
    for (int i = (int)(h & (PLAN_INDEX - 1));; i = (i + 1) & (PLAN_INDEX - 1)) {
        if (!g_index[i]) return -1 - i;
        const plan *p = &g_plans[g_index[i] - 1];
        if (p->hash == h && !memcmp(&p->key, k, sizeof *k)) return i;
    }
}

/* Empties index slot i, moving later entries of its probe run back so
 * every key stays reachable from its home slot (linear probing deletion). */
static void index_remove(int i) {
    for (int j = i;;) {
        g_index[i] = 0;
        for (;;) {
            j = (j + 1) & (PLAN_INDEX - 1);
            if (!g_index[j]) return;
            int home = (int)(g_plans[g_index[j] - 1].hash & (PLAN_INDEX - 1));
            /* j's entry stays when its home lies cyclically in (i, j] */
            if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
            break;
        }
        g_index[i] = g_index[j];
        i = j;
    }
}

/* The plan of p (g_lock held). */
static int plan_get(const kiln_cudnn_conv *q, plan **out) {
    plan_key k;
    memset(&k, 0, sizeof k);
    k.geo = q->geo;
    k.geo.act = 0, k.geo.act_a = 0, k.geo.act_b = 0;
    k.dtype = q->dtype, k.tf32 = q->dtype == KILN_DTYPE_F32 && q->tf32, k.relu = !!q->relu, k.nhwc = !!q->nhwc;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof k; i++) h = (h ^ ((const uint8_t *)&k)[i]) * 1099511628211ull;
    int at = index_find(&k, h);
    if (at >= 0) {
        *out = &g_plans[g_index[at] - 1];
        (*out)->last_use = ++g_clock;
        return 0;
    }
    /* A miss (rare: descriptors are made once per shape): a free plan, else
     * the least recently used one, destroyed and dropped from the index. */
    int victim = 0;
    for (int i = 0; i < PLAN_CAP; i++) {
        if (!g_plans[i].used) {
            victim = i;
            break;
        }
        if (g_plans[i].last_use < g_plans[victim].last_use) victim = i;
    }
    plan *p = &g_plans[victim];
    if (p->used) {
        index_remove(index_find(&p->key, p->hash));
        plan_free(p);
        g_evicted++;
        at = index_find(&k, h); /* the removal may have moved k's empty slot */
    }
    int rc = plan_make(p, &k, h);
    if (rc) return rc;
    g_index[-1 - at] = victim + 1;
    p->last_use = ++g_clock;
    *out = p;
    return 0;
}

static int64_t plan_ws(plan *p, int algo) {
    if (p->ws[algo] == -2) {
        size_t n = 0;
        dnn_status s = dnn.GetWorkspace(g_handle, p->x, p->w, p->conv, p->y, algo, &n);
        p->ws[algo] = s || n > KILN_CUDNN_MAX_WORKSPACE ? -1 : (int64_t)n;
    }
    return p->ws[algo];
}

static int prepare(const kiln_cudnn_conv *q, plan **p) {
    if (q->algo < 0 || q->algo >= KILN_CUDNN_ALGOS)
        return kiln__err(KILN_EUNSUPPORTED, "cuDNN conv: algorithm %d is not one of cuDNN's 0..%d", q->algo,
                         KILN_CUDNN_ALGOS - 1);
    int rc = g_stand_in ? 0 : kiln__cudnn_load();
    if (rc) return rc;
    return plan_get(q, p);
}

int kiln__cudnn_conv_workspace(const kiln_cudnn_conv *q, size_t *bytes) {
    *bytes = 0;
    pthread_mutex_lock(&g_lock);
    plan *p;
    int rc = prepare(q, &p);
    int64_t n = rc ? 0 : plan_ws(p, q->algo);
    pthread_mutex_unlock(&g_lock);
    if (rc) return rc;
    if (n < 0)
        return kiln__err(KILN_EUNSUPPORTED, "cuDNN conv: algorithm %d does not take this convolution", q->algo);
    *bytes = (size_t)n;
    return 0;
}

int kiln__cudnn_conv_ranked(const kiln_cudnn_conv *q) {
    pthread_mutex_lock(&g_lock);
    plan *p;
    int ok = 0;
    if (!prepare(q, &p)) {
        if (p->ranked[q->algo] < 0) {
            dnn_perf perf[KILN_CUDNN_ALGOS];
            int n = 0, taken = 0;
            for (int a = 0; a < KILN_CUDNN_ALGOS; a++) p->ranked[a] = 0;
            if (!dnn.GetAlgoV7(g_handle, p->x, p->w, p->conv, p->y, KILN_CUDNN_ALGOS, &n, perf))
                for (int i = 0; i < n && taken < KILN_CUDNN_TOPK; i++)
                    if (!perf[i].status && perf[i].algo >= 0 && perf[i].algo < KILN_CUDNN_ALGOS &&
                        perf[i].memory <= KILN_CUDNN_MAX_WORKSPACE && !p->ranked[perf[i].algo])
                        p->ranked[perf[i].algo] = 1, taken++;
        }
        ok = p->ranked[q->algo];
    }
    pthread_mutex_unlock(&g_lock);
    return ok;
}

int kiln__cudnn_conv(const kiln_call *c, const kiln_cudnn_conv *q, int *fused) {
    *fused = 0;
    const kiln__cu *cu;
    int rc = kiln__cuda_init(&cu, NULL);
    if (rc) return rc;
    CUstream stream = c->exec ? (CUstream)kiln_exec_stream(c->exec) : NULL;
    pthread_mutex_lock(&g_lock);
    plan *p;
    rc = prepare(q, &p);
    int64_t need = rc ? 0 : plan_ws(p, q->algo);
    if (!rc && need < 0)
        rc = kiln__err(KILN_EUNSUPPORTED, "cuDNN conv: algorithm %d does not take this convolution", q->algo);
    if (!rc && (size_t)need > c->workspace_size)
        rc = kiln__err(KILN_EINTERNAL, "cuDNN conv: workspace of %zu bytes, algorithm %d needs %lld",
                       c->workspace_size, q->algo, (long long)need);
    if (!rc) rc = dnn_check(dnn.SetStream(g_handle, stream), "cudnnSetStream");
    const float one = 1.0f, zero = 0.0f;
    /* identity fuses with IMPLICIT_PRECOMP_GEMM only (cuDNN's rule) */
    if (!rc && q->bias && (q->relu || q->algo == DNN_ALGO_PRECOMP) && p->fused[q->algo] != 0) {
        dnn_status s = dnn.BiasActForward(g_handle, &one, p->x, q->x, p->w, q->w, p->conv, q->algo, c->workspace,
                                          (size_t)need, q->z ? &one : &zero, p->y, q->z ? q->z : q->y, p->bias,
                                          q->bias, p->act, p->y, q->y);
        p->fused[q->algo] = !s; /* a refusal is found before anything is enqueued */
        if (!s) {
            *fused = 1;
            pthread_mutex_unlock(&g_lock);
            return 0;
        }
    }
    if (!rc && q->z && q->z != q->y) {
        size_t bytes = (size_t)(q->geo.n * q->geo.k * q->geo.oh * q->geo.ow) * kiln_dtype_size(q->dtype);
        rc = kiln__cuda_check(cu->MemcpyAsync((CUdeviceptr)(uintptr_t)q->y, (CUdeviceptr)(uintptr_t)q->z, bytes,
                                              stream),
                              "cuMemcpyAsync(cuDNN conv residual)");
    }
    if (!rc) {
        dnn_status s = dnn.Forward(g_handle, &one, p->x, q->x, p->w, q->w, p->conv, q->algo, c->workspace,
                                   (size_t)need, q->z ? &one : &zero, p->y, q->y);
        /* cuDNN 9 groups its codes: 2xxx bad parameter, 3xxx not supported */
        if (s >= 2000 && s < 4000)
            rc = kiln__err(KILN_EUNSUPPORTED, "cudnnConvolutionForward (algorithm %d): %s", q->algo,
                           dnn.GetErrorString(s));
        else
            rc = dnn_check(s, "cudnnConvolutionForward");
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------ statistics, stand-in */

/* Stand-in descriptors hold what their Set call stored; g_live counts the
 * ones not destroyed yet (under g_lock, as every plan operation). */
static int g_live;
static dnn_status si_create(void **d) {
    *d = calloc(8, sizeof(int64_t));
    if (!*d) return 4; /* CUDNN_STATUS_ALLOC_FAILED */
    g_live++;
    return 0;
}
static dnn_status si_destroy(void *d) {
    free(d);
    g_live--;
    return 0;
}
static dnn_status si_set4(void *d, int64_t a, int64_t b, int64_t c, int64_t e) {
    int64_t *v = d;
    v[0] = a, v[1] = b, v[2] = c, v[3] = e;
    return 0;
}
static dnn_status si_tensor(dnn_tensor t, int fmt, int type, int n, int c, int h, int w) {
    (void)fmt, (void)type;
    return si_set4(t, n, c, h, w);
}
static dnn_status si_filter(dnn_filter f, int type, int fmt, int k, int c, int h, int w) {
    (void)fmt, (void)type;
    return si_set4(f, k, c, h, w);
}
static dnn_status si_conv(dnn_conv d, int ph, int pw, int sh, int sw, int dh, int dw, int mode, int type) {
    (void)mode, (void)type;
    int64_t *v = d;
    v[0] = ph, v[1] = pw, v[2] = sh, v[3] = sw, v[4] = dh, v[5] = dw;
    return 0;
}
static dnn_status si_conv_int(dnn_conv d, int v) { return (void)d, (void)v, 0; }
static dnn_status si_act(dnn_act a, int mode, int nan, double coef) { return (void)a, (void)mode, (void)nan, (void)coef, 0; }
static dnn_status si_out_dim(dnn_conv d, dnn_tensor x, dnn_filter w, int *n, int *c, int *h, int *wo) {
    const int64_t *cv = d, *xv = x, *fv = w;
    *n = (int)xv[0], *c = (int)fv[0];
    *h = (int)((xv[2] + 2 * cv[0] - cv[4] * (fv[2] - 1) - 1) / cv[2] + 1);
    *wo = (int)((xv[3] + 2 * cv[1] - cv[5] * (fv[3] - 1) - 1) / cv[3] + 1);
    return 0;
}
/* Workspace: 1 KiB per algorithm number (algorithm 0 needs none). */
static dnn_status si_workspace(dnn_handle hd, dnn_tensor x, dnn_filter w, dnn_conv c, dnn_tensor y, int algo,
                               size_t *n) {
    (void)hd, (void)x, (void)w, (void)c, (void)y;
    *n = (size_t)algo << 10;
    return 0;
}
static dnn_status si_algos(dnn_handle hd, dnn_tensor x, dnn_filter w, dnn_conv c, dnn_tensor y, int max, int *n,
                           dnn_perf *perf) {
    (void)hd, (void)x, (void)w, (void)c, (void)y, (void)max, (void)perf;
    *n = 0;
    return 0;
}
static const char *si_error(dnn_status s) { return (void)s, "cuDNN stand-in error"; }

/* Destroys every plan with the current entry points (g_lock held). */
static void plans_clear(void) {
    for (int i = 0; i < PLAN_CAP; i++)
        if (g_plans[i].used) plan_free(&g_plans[i]);
    memset(g_index, 0, sizeof g_index);
}

void kiln__cudnn_stand_in(int on) {
    static __typeof__(dnn) real;
    pthread_mutex_lock(&g_lock);
    if (on != g_stand_in) {
        plans_clear(); /* no plan outlives the entry points that made it */
        if (on) {
            real = dnn;
            memset(&dnn, 0, sizeof dnn);
            dnn.GetErrorString = si_error;
            dnn.CreateTensor = si_create;
            dnn.CreateFilter = si_create;
            dnn.CreateConv = si_create;
            dnn.CreateAct = si_create;
            dnn.DestroyTensor = dnn.DestroyFilter = dnn.DestroyConv = dnn.DestroyAct = si_destroy;
            dnn.SetTensor4d = si_tensor;
            dnn.SetFilter4d = si_filter;
            dnn.SetConv2d = si_conv;
            dnn.SetGroupCount = dnn.SetMathType = si_conv_int;
            dnn.SetAct = si_act;
            dnn.GetConv2dOutDim = si_out_dim;
            dnn.GetWorkspace = si_workspace;
            dnn.GetAlgoV7 = si_algos;
        } else {
            dnn = real;
        }
        g_stand_in = on;
        g_made = g_evicted = 0;
    }
    pthread_mutex_unlock(&g_lock);
}

void kiln__cudnn_plan_stats(kiln_cudnn_plan_stats *st) {
    pthread_mutex_lock(&g_lock);
    memset(st, 0, sizeof *st);
    for (int i = 0; i < PLAN_CAP; i++) st->plans += g_plans[i].used;
    for (int i = 0; i < PLAN_INDEX; i++) st->indexed += g_index[i] != 0;
    st->capacity = PLAN_CAP;
    st->made = g_made;
    st->evicted = g_evicted;
    st->descriptors = g_stand_in ? g_live : -1;
    pthread_mutex_unlock(&g_lock);
}
