/*
 * cublaslt.c — kiln__cuda_gemm over cuBLASLt, loaded with dlopen.
 *
 * Row-major to column-major: a row-major R x C matrix with leading dimension
 * ld is the column-major C x R matrix with the same ld, so row-major
 * D = op(A) @ op(B) is column-major D^T = op(B)^T @ op(A)^T: cuBLASLt gets
 * (B, A) swapped, m and n swapped, and each keeps its own transpose flag.
 * The bias (one value per column of row-major D) becomes cuBLASLt's
 * per-row bias of D^T.
 *
 * Plans (descriptors + the heuristic's algorithm list) are cached by
 * everything that shapes them -- sizes, strides, types, transposes,
 * epilogue, bias pointer, workspace size and pointer alignments -- so a run
 * pays one hash lookup per GEMM; a cached plan is never modified, so
 * contexts on several threads share it without holding the lock while the
 * matmul is enqueued.  The tactic (g->algo) indexes the heuristic's list.
 */
#include "device/cuda/cuda_int.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef int cublasStatus_t;
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct { uint64_t data[8]; } lt_algo;
typedef struct {
    lt_algo algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} lt_heur;
typedef void *lt_desc, *lt_layout, *lt_pref;

enum {
    R_16F = 2, R_16BF = 14, R_32F = 0,                       /* cudaDataType */
    COMPUTE_32F = KILN_CUDA_COMPUTE_32F, COMPUTE_32F_FAST_TF32 = KILN_CUDA_COMPUTE_32F_FAST_TF32, /* cublasComputeType_t */
    DESC_TRANSA = 3, DESC_TRANSB = 4, DESC_EPILOGUE = 7, DESC_BIAS_POINTER = 8,
    LAYOUT_BATCH_COUNT = 5, LAYOUT_BATCH_STRIDE = 6,
    PREF_MAX_WORKSPACE = 1, PREF_ALIGN_A = 5, PREF_ALIGN_B = 6, PREF_ALIGN_C = 7, PREF_ALIGN_D = 8,
    EPI_DEFAULT = 1, EPI_RELU = 2, EPI_BIAS = 4, EPI_GELU = 32,
    MAX_ALGOS = 16, PLAN_CAP = 512, PLAN_PROBES = 32,
};

static struct {
    cublasStatus_t (*Create)(cublasLtHandle_t *);
    const char *(*StatusString)(cublasStatus_t);
    cublasStatus_t (*DescCreate)(lt_desc *, int, int);
    cublasStatus_t (*DescDestroy)(lt_desc);
    cublasStatus_t (*DescSet)(lt_desc, int, const void *, size_t);
    cublasStatus_t (*LayoutCreate)(lt_layout *, int, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*LayoutDestroy)(lt_layout);
    cublasStatus_t (*LayoutSet)(lt_layout, int, const void *, size_t);
    cublasStatus_t (*PrefCreate)(lt_pref *);
    cublasStatus_t (*PrefDestroy)(lt_pref);
    cublasStatus_t (*PrefSet)(lt_pref, int, const void *, size_t);
    cublasStatus_t (*Heuristic)(cublasLtHandle_t, lt_desc, lt_layout, lt_layout, lt_layout, lt_layout, lt_pref, int,
                                lt_heur *, int *);
    cublasStatus_t (*Matmul)(cublasLtHandle_t, lt_desc, const void *, const void *, lt_layout, const void *,
                             lt_layout, const void *, const void *, lt_layout, void *, lt_layout, const lt_algo *,
                             void *, size_t, CUstream);
} lt;
static cublasLtHandle_t g_handle;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_status;
static char g_why[512];

static void load_once(void) {
    static const char *names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11",
                                  "/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12"};
    void *h = NULL;
    char tried[300] = "";
    const char *home = getenv("CUDA_HOME");
    if (home && *home) {
        char p[512];
        snprintf(p, sizeof p, "%s/lib64/libcublasLt.so.13", home);
        h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    }
    for (size_t i = 0; !h && i < sizeof names / sizeof names[0]; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(tried, sizeof tried, "%s", e ? e : "not found");
        snprintf(g_why, sizeof g_why, "cuBLASLt not found (libcublasLt.so.13/.12/.11; set CUDA_HOME): %s", tried);
        g_status = KILN_EDEVICE;
        return;
    }
    const kiln__dl_sym need[] = {
        {(void **)&lt.Create, "cublasLtCreate", NULL},
        {(void **)&lt.StatusString, "cublasLtGetStatusString", NULL},
        {(void **)&lt.DescCreate, "cublasLtMatmulDescCreate", NULL},
        {(void **)&lt.DescDestroy, "cublasLtMatmulDescDestroy", NULL},
        {(void **)&lt.DescSet, "cublasLtMatmulDescSetAttribute", NULL},
        {(void **)&lt.LayoutCreate, "cublasLtMatrixLayoutCreate", NULL},
        {(void **)&lt.LayoutDestroy, "cublasLtMatrixLayoutDestroy", NULL},
        {(void **)&lt.LayoutSet, "cublasLtMatrixLayoutSetAttribute", NULL},
        {(void **)&lt.PrefCreate, "cublasLtMatmulPreferenceCreate", NULL},
        {(void **)&lt.PrefDestroy, "cublasLtMatmulPreferenceDestroy", NULL},
        {(void **)&lt.PrefSet, "cublasLtMatmulPreferenceSetAttribute", NULL},
        {(void **)&lt.Heuristic, "cublasLtMatmulAlgoGetHeuristic", NULL},
        {(void **)&lt.Matmul, "cublasLtMatmul", NULL},
    };
    const char *miss = kiln__dl_resolve(h, need, sizeof need / sizeof need[0]);
    if (miss) {
        snprintf(g_why, sizeof g_why, "cuBLASLt lacks %s", miss);
        g_status = KILN_EDEVICE;
        return;
    }
    cublasStatus_t s = lt.Create(&g_handle);
    if (s) {
        snprintf(g_why, sizeof g_why, "cublasLtCreate: %s (status %d)", lt.StatusString(s), s);
        g_status = KILN_EDEVICE;
    }
}

static int lt_load(void) {
    int rc = kiln__cuda_enter();
    if (rc) return rc;
    pthread_once(&g_once, load_once);
    return g_status ? kiln__err(g_status, "%s", g_why) : 0;
}

static int lt_check(cublasStatus_t s, const char *call) {
    if (!s) return 0;
    return kiln__err(KILN_EDEVICE, "%s: %s (status %d)", call, lt.StatusString ? lt.StatusString(s) : "?", s);
}

/* ------------------------------------------------------------ plans */

typedef struct plan_key {
    int64_t m, n, k, batch, lda, ldb, ldc, ldd, sa, sb, sc, sd;
    const void *bias;
    uint64_t ws;
    int32_t ta, tb, dtype, epi, tf32, has_c;
    uint32_t align[4];
} plan_key;

typedef struct plan {
    int used;
    plan_key key;
    lt_desc desc;
    lt_layout la, lb, lc, ld;
    lt_heur algos[MAX_ALGOS];
    int nalgo;
} plan;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static plan g_plans[PLAN_CAP];

static uint32_t align_of(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 1 && (v & (a - 1))) a >>= 1;
    return a;
}

int kiln__cuda_gemm_compute(const kiln_call *c, const kiln_cuda_gemm *g) {
    return g->dtype == KILN_DTYPE_F32 && (g->allow_tf32 || kiln__cuda_allow_tf32(c)) ? COMPUTE_32F_FAST_TF32
                                                                                     : COMPUTE_32F;
}

static void key_of(const kiln_cuda_gemm *g, size_t ws, plan_key *k) {
    memset(k, 0, sizeof *k); /* padding too: keys are compared with memcmp */
    k->m = g->m, k->n = g->n, k->k = g->k, k->batch = g->batch < 1 ? 1 : g->batch;
    k->lda = g->lda, k->ldb = g->ldb, k->ldc = g->ldc, k->ldd = g->ldd;
    k->sa = g->stride_a, k->sb = g->stride_b, k->sc = g->stride_c, k->sd = g->stride_d;
    k->bias = g->bias;
    k->ws = ws;
    k->ta = !!g->trans_a, k->tb = !!g->trans_b, k->dtype = g->dtype, k->epi = g->epilogue;
    k->tf32 = g->dtype == KILN_DTYPE_F32 && g->allow_tf32; /* kiln__cuda_gemm folds in the call's --tf32 */
    k->has_c = g->beta != 0.0f && g->c != NULL;
    k->align[0] = align_of(g->a), k->align[1] = align_of(g->b);
    k->align[2] = k->has_c ? align_of(g->c) : 256, k->align[3] = align_of(g->d);
}

static uint64_t key_hash(const plan_key *k) {
    const uint8_t *b = (const uint8_t *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void plan_free(plan *p) {
    if (p->desc) lt.DescDestroy(p->desc);
    lt_layout ls[4] = {p->la, p->lb, p->lc, p->ld};
    for (int i = 0; i < 4; i++)
        if (ls[i]) lt.LayoutDestroy(ls[i]);
    memset(p, 0, sizeof *p);
}

static int layout(lt_layout *l, int type, uint64_t rows, uint64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    int rc = lt_check(lt.LayoutCreate(l, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
    if (rc || batch <= 1) return rc;
    int32_t b = (int32_t)batch;
    rc = lt_check(lt.LayoutSet(*l, LAYOUT_BATCH_COUNT, &b, sizeof b), "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
    if (!rc)
        rc = lt_check(lt.LayoutSet(*l, LAYOUT_BATCH_STRIDE, &stride, sizeof stride),
                      "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
    return rc;
}

/* Descriptors and heuristic list for key k (column-major, swapped). */
static int plan_make(const plan_key *k, plan *p) {
    memset(p, 0, sizeof *p);
    p->key = *k;
    int type = k->dtype == KILN_DTYPE_F16 ? R_16F : k->dtype == KILN_DTYPE_BF16 ? R_16BF : R_32F;
    int rc = lt_check(lt.DescCreate(&p->desc, k->tf32 ? COMPUTE_32F_FAST_TF32 : COMPUTE_32F, R_32F),
                      "cublasLtMatmulDescCreate");
    int32_t ta = k->tb, tb = k->ta; /* swapped operands keep their own flags */
    uint32_t epi = k->epi == 1 ? EPI_RELU : k->epi == 2 ? EPI_GELU : EPI_DEFAULT;
    if (k->bias) epi = epi == EPI_DEFAULT ? EPI_BIAS : epi | EPI_BIAS;
    if (!rc) rc = lt_check(lt.DescSet(p->desc, DESC_TRANSA, &ta, sizeof ta), "cublasLtMatmulDescSetAttribute(TRANSA)");
    if (!rc) rc = lt_check(lt.DescSet(p->desc, DESC_TRANSB, &tb, sizeof tb), "cublasLtMatmulDescSetAttribute(TRANSB)");
    if (!rc) rc = lt_check(lt.DescSet(p->desc, DESC_EPILOGUE, &epi, sizeof epi), "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    if (!rc && k->bias)
        rc = lt_check(lt.DescSet(p->desc, DESC_BIAS_POINTER, &k->bias, sizeof k->bias),
                      "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    /* cuBLASLt's A is our B: row-major (k x n | n x k) = column-major (n x k | k x n). */
    if (!rc) rc = layout(&p->la, type, k->tb ? k->k : k->n, k->tb ? k->n : k->k, k->ldb, k->batch, k->sb);
    if (!rc) rc = layout(&p->lb, type, k->ta ? k->m : k->k, k->ta ? k->k : k->m, k->lda, k->batch, k->sa);
    if (!rc) rc = layout(&p->lc, type, k->n, k->m, k->has_c ? k->ldc : k->ldd, k->batch, k->has_c ? k->sc : k->sd);
    if (!rc) rc = layout(&p->ld, type, k->n, k->m, k->ldd, k->batch, k->sd);
    if (rc) {
        plan_free(p);
        return rc;
    }
    lt_pref pref = NULL;
    rc = lt_check(lt.PrefCreate(&pref), "cublasLtMatmulPreferenceCreate");
    uint64_t ws = k->ws;
    if (!rc) rc = lt_check(lt.PrefSet(pref, PREF_MAX_WORKSPACE, &ws, sizeof ws), "cublasLtMatmulPreferenceSetAttribute");
    /* cuBLASLt's A/B are our B/A. */
    uint32_t al[4] = {k->align[1], k->align[0], k->align[2], k->align[3]};
    for (int i = 0; i < 4 && !rc; i++)
        rc = lt_check(lt.PrefSet(pref, PREF_ALIGN_A + i, &al[i], sizeof al[i]), "cublasLtMatmulPreferenceSetAttribute");
    if (!rc)
        rc = lt_check(lt.Heuristic(g_handle, p->desc, p->la, p->lb, p->lc, p->ld, pref, MAX_ALGOS, p->algos, &p->nalgo),
                      "cublasLtMatmulAlgoGetHeuristic");
    if (pref) lt.PrefDestroy(pref);
    if (rc) {
        plan_free(p);
        return rc;
    }
    /* keep the usable ones, in the heuristic's order */
    int n = 0;
    for (int i = 0; i < p->nalgo; i++)
        if (p->algos[i].state == 0) p->algos[n++] = p->algos[i];
    p->nalgo = n;
    p->used = 1;
    return 0;
}

/* The plan for g: the cached one (made on a miss; a stable pointer while
 * cached), or, when g's probe neighbourhood of the table is full, one made
 * into *tmp for this call only (the caller frees it with plan_done).  A
 * cached plan is never evicted: another thread may be using it.  The key
 * holds the bias pointer, so every engine's fused-bias GEMMs add entries;
 * a process that loads many models (a server) must keep running when the
 * table fills, at the price of one heuristic query per such call. */
static int plan_get(const kiln_cuda_gemm *g, size_t ws, plan *tmp, const plan **out) {
    plan_key k;
    key_of(g, ws, &k);
    uint64_t h = key_hash(&k);
    pthread_mutex_lock(&g_lock);
    size_t i = (size_t)(h % PLAN_CAP);
    int rc = 0;
    for (size_t probe = 0; probe < PLAN_PROBES; probe++, i = (i + 1) % PLAN_CAP) {
        if (g_plans[i].used && !memcmp(&g_plans[i].key, &k, sizeof k)) {
            *out = &g_plans[i];
            pthread_mutex_unlock(&g_lock);
            return 0;
        }
        if (!g_plans[i].used) break;
    }
    if (g_plans[i].used) { /* full neighbourhood: an uncached plan */
        pthread_mutex_unlock(&g_lock);
        rc = plan_make(&k, tmp);
        if (!rc) *out = tmp;
        return rc;
    }
    rc = plan_make(&k, &g_plans[i]);
    if (!rc) *out = &g_plans[i];
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Frees p if plan_get made it for one call (cuBLASLt reads descriptors
 * when the call is enqueued, so they may go right after it). */
static void plan_done(const plan *p, plan *tmp) {
    if (p == tmp) plan_free(tmp);
}

static int gemm_check(const kiln_cuda_gemm *g) {
    if (g->dtype != KILN_DTYPE_F32 && g->dtype != KILN_DTYPE_F16 && g->dtype != KILN_DTYPE_BF16)
        return kiln__err(KILN_EUNSUPPORTED, "cuBLASLt GEMM: dtype %s, expected F32, F16 or BF16", kiln_dtype_name(g->dtype));
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->epilogue < 0 || g->epilogue > 2 || g->algo < 0)
        return kiln__err(KILN_EINVAL, "cuBLASLt GEMM: m=%lld n=%lld k=%lld epilogue=%d algo=%d", (long long)g->m,
                         (long long)g->n, (long long)g->k, g->epilogue, g->algo);
    return 0;
}

int kiln__cuda_gemm_algos(const kiln_cuda_gemm *g, int max) {
    const plan *p = NULL;
    plan tmp;
    if (gemm_check(g) || lt_load() || plan_get(g, KILN_CUDA_GEMM_WORKSPACE, &tmp, &p)) return 0;
    int n = p->nalgo < max ? p->nalgo : max;
    plan_done(p, &tmp);
    return n;
}

int kiln__cuda_gemm(const kiln_call *c, const kiln_cuda_gemm *g_in) {
    const char *layer = c && c->layer ? c->layer : "?";
    /* an engine built with --tf32 lets every FP32 GEMM of its layers use TF32 */
    kiln_cuda_gemm gt = *g_in;
    gt.allow_tf32 = kiln__cuda_gemm_compute(c, g_in) == COMPUTE_32F_FAST_TF32;
    const kiln_cuda_gemm *g = &gt;
    int rc = gemm_check(g);
    if (!rc) rc = lt_load();
    if (rc) return kiln__err_prefix(rc, "layer '%s'", layer);
    if (!g->m || !g->n || g->batch == 0) return 0;
    size_t ws = c ? c->workspace_size : 0;
    const plan *p = NULL;
    plan tmp;
    if ((rc = plan_get(g, ws, &tmp, &p))) return kiln__err_prefix(rc, "layer '%s'", layer);
    /* The tactic is a position in the heuristic's list for the shape the
     * builder timed.  While the builder times (kiln__b_timing) a position
     * past the list is refused, which drops the tactic.  At run time, at
     * another shape (a dynamic batch) the list differs: where the position
     * is missing or its algorithm needs more workspace than the layer
     * planned, the heuristic's first one that fits runs. */
    int ai = g->algo < p->nalgo && p->algos[g->algo].workspaceSize <= ws ? g->algo : -1;
    if (ai < 0 && kiln__b_timing) {
        plan_done(p, &tmp);
        return kiln__err(KILN_EUNSUPPORTED, "layer '%s': cuBLASLt algorithm %d of %d for %lldx%lldx%lld (batch %lld)",
                         layer, g->algo, p->nalgo, (long long)g->m, (long long)g->n, (long long)g->k,
                         (long long)g->batch);
    }
    for (int i = 0; ai < 0 && i < p->nalgo; i++)
        if (p->algos[i].workspaceSize <= ws) ai = i;
    if (ai < 0) {
        rc = kiln__err(KILN_EUNSUPPORTED,
                       "layer '%s': no cuBLASLt algorithm for %lldx%lldx%lld (batch %lld) fits its %zu workspace bytes "
                       "(%d offered)",
                       layer, (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch, ws, p->nalgo);
        plan_done(p, &tmp);
        return rc;
    }
    const lt_heur *a = &p->algos[ai];
    CUstream stream = c && c->exec ? (CUstream)kiln_exec_stream(c->exec) : NULL;
    const void *cm = p->key.has_c ? g->c : g->d;
    rc = lt_check(lt.Matmul(g_handle, p->desc, &g->alpha, g->b, p->la, g->a, p->lb, &g->beta, cm, p->lc, g->d, p->ld,
                            &a->algo, c ? c->workspace : NULL, ws, stream),
                  "cublasLtMatmul");
    plan_done(p, &tmp);
    return rc ? kiln__err_prefix(rc, "layer '%s' (%lldx%lldx%lld, batch %lld, algo %d)", layer, (long long)g->m,
                                 (long long)g->n, (long long)g->k, (long long)g->batch, g->algo)
              : 0;
}
