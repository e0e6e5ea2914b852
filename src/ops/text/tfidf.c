/*
 * tfidf.c — ONNX TfIdfVectorizer (9) for integer inputs (int32/int64).
 *
 * The pool (pool_int64s) lists n-grams grouped by length: ngram_counts[i]
 * is where the n-grams of length i + 1 start.  Pool n-gram j is counted in
 * output column ngram_indexes[j].  Every row of X (rank 1: one row; rank 2:
 * [N, C]) is scanned for n-grams of length min_gram_length..max_gram_length
 * whose items are `skip + 1` apart, for skip = 0..max_skip_count (1-grams
 * are counted once, not once per skip).  Output [S] or [N, S] f32 with
 * S = max(ngram_indexes) + 1:
 *   TF:    the counts
 *   IDF:   weights[col] where the count is > 0, else 0 (1 without weights)
 *   TFIDF: weights[col] * count (the count without weights)
 * Weights are taken by output column, as ONNX Runtime and the ONNX
 * reference implementation do (the spec's "weight of the i-th pool n-gram"
 * is the same thing when ngram_indexes is the identity).
 *
 * The pool becomes a trie stored in a hash table (edge (parent node, item)
 * -> child node) built in the workspace at each call; a row is scanned by
 * walking the trie from every start position, for every skip.  Rows run in
 * parallel.  String pools (pool_strings) are not supported: kiln has no
 * string tensors.
 */
#include "kiln/plugin.h"

#include <stdint.h>
#include <string.h>

#define TFIDF "TfIdfVectorizer"

static const kiln_attr_def tfidf_attrs[] = {
    {"max_gram_length", KILN_ATTR_INT, 0, NULL, 1, "longest n-gram counted"},
    {"min_gram_length", KILN_ATTR_INT, 0, NULL, 1, "shortest n-gram counted"},
    {"max_skip_count", KILN_ATTR_INT, 0, NULL, 1, "largest gap between n-gram items"},
    {"mode", KILN_ATTR_STRING, 0, NULL, 1, "TF, IDF or TFIDF"},
    {"ngram_counts", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 1,
     "start of the n-grams of length 1, 2, ... in the pool"},
    {"ngram_indexes", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 1,
     "output column of each pool n-gram"},
    {"pool_int64s", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "the n-grams (integers)"},
    {"pool_strings", KILN_ATTR_STRING, 0, NULL, 0, "string n-grams (not supported)"},
    {"weights", KILN_ATTR_ARRAY, KILN_DTYPE_F32, NULL, 0, "IDF weight per output column"},
    {NULL, 0, 0, NULL, 0, NULL},
};

enum { M_TF = 1, M_IDF, M_TFIDF };

/* Attributes, validated. */
typedef struct tfidf_cfg {
    int mode;
    int64_t min_n, max_n, max_skip;
    const int64_t *counts, *indexes, *pool;
    int64_t ncounts, nindexes, npool;
    const float *weights;
    int64_t nweights;
    int64_t out_size;      /* S */
} tfidf_cfg;

static int tfidf_config(const kiln_attrs *a, tfidf_cfg *t) {
    memset(t, 0, sizeof *t);
    const kiln_attr_value *ps = kiln_attrs_get(a, "pool_strings");
    if (ps && ps->present)
        return kiln_set_error(KILN_EUNSUPPORTED, TFIDF ": pool_strings is not supported (kiln has "
                              "no string tensors); use pool_int64s with integer input");
    const char *mode = kiln_attrs_string(a, "mode");
    if (!strcmp(mode, "TF")) t->mode = M_TF;
    else if (!strcmp(mode, "IDF")) t->mode = M_IDF;
    else if (!strcmp(mode, "TFIDF")) t->mode = M_TFIDF;
    else
        return kiln_set_error(KILN_EATTR, TFIDF ": mode must be TF, IDF or TFIDF, found '%s'", mode);
    t->min_n = kiln_attrs_int(a, "min_gram_length");
    t->max_n = kiln_attrs_int(a, "max_gram_length");
    t->max_skip = kiln_attrs_int(a, "max_skip_count");
    if (t->min_n < 1 || t->max_n < t->min_n)
        return kiln_set_error(KILN_EATTR, TFIDF ": expected 1 <= min_gram_length <= "
                              "max_gram_length, found %lld and %lld", (long long)t->min_n,
                              (long long)t->max_n);
    if (t->max_skip < 0)
        return kiln_set_error(KILN_EATTR, TFIDF ": max_skip_count must be >= 0, found %lld",
                              (long long)t->max_skip);
    t->npool = kiln_attrs_ints(a, "pool_int64s", &t->pool);
    if (t->npool < 0)
        return kiln_set_error(KILN_EATTR, TFIDF ": pool_int64s is required (the n-gram pool)");
    if (t->npool >= INT32_MAX / 2)
        return kiln_set_error(KILN_EATTR, TFIDF ": pool_int64s has %lld items, at most %d "
                              "supported", (long long)t->npool, INT32_MAX / 2 - 1);
    t->ncounts = kiln_attrs_ints(a, "ngram_counts", &t->counts);
    t->nindexes = kiln_attrs_ints(a, "ngram_indexes", &t->indexes);
    /* sections: n-grams of length i + 1 are pool[counts[i] .. counts[i + 1]) */
    int64_t ngrams = 0;
    for (int64_t i = 0; i < t->ncounts; i++) {
        int64_t b = t->counts[i], e = i + 1 < t->ncounts ? t->counts[i + 1] : t->npool;
        if (b < 0 || e < b || e > t->npool)
            return kiln_set_error(KILN_EATTR, TFIDF ": ngram_counts must be non-decreasing "
                                  "starts within the pool (%lld items): entry %lld is %lld, its "
                                  "section ends at %lld", (long long)t->npool, (long long)i,
                                  (long long)b, (long long)e);
        if ((e - b) % (i + 1))
            return kiln_set_error(KILN_EATTR, TFIDF ": the pool section of %lld-grams has %lld "
                                  "items, not a multiple of %lld", (long long)(i + 1),
                                  (long long)(e - b), (long long)(i + 1));
        ngrams += (e - b) / (i + 1);
    }
    if (t->ncounts > 0 && t->counts[0] != 0)
        return kiln_set_error(KILN_EATTR, TFIDF ": ngram_counts[0] must be 0, found %lld",
                              (long long)t->counts[0]);
    if (t->nindexes != ngrams)
        return kiln_set_error(KILN_EATTR, TFIDF ": ngram_indexes has %lld entries, the pool holds "
                              "%lld n-grams", (long long)t->nindexes, (long long)ngrams);
    t->out_size = 0;
    for (int64_t i = 0; i < t->nindexes; i++) {
        if (t->indexes[i] < 0)
            return kiln_set_error(KILN_EATTR, TFIDF ": ngram_indexes[%lld] = %lld is negative",
                                  (long long)i, (long long)t->indexes[i]);
        if (t->indexes[i] + 1 > t->out_size) t->out_size = t->indexes[i] + 1;
    }
    t->nweights = kiln_attrs_floats(a, "weights", &t->weights);
    if (t->nweights < 0) t->nweights = 0;
    if (t->nweights > 0 && t->mode != M_TF && t->nweights < t->out_size)
        return kiln_set_error(KILN_EATTR, TFIDF ": weights has %lld values, expected one per "
                              "output column (%lld)", (long long)t->nweights,
                              (long long)t->out_size);
    return 0;
}

static int tfidf_shape(kiln_shape_ctx *c) {
    tfidf_cfg t;
    int rc = tfidf_config(c->attrs, &t);
    if (rc) return rc;
    const kiln_desc *x = &c->in[0];
    if (x->dtype != KILN_DTYPE_I32 && x->dtype != KILN_DTYPE_I64)
        return kiln_set_error(x->dtype == KILN_DTYPE_UNDEFINED ? KILN_EUNSUPPORTED : KILN_ETYPE,
                              TFIDF ": X must be i32 or i64 (string input is not supported), "
                              "found %s", kiln_dtype_name(x->dtype));
    if (x->ndim > 2)
        return kiln_set_error(KILN_ESHAPE, TFIDF ": X must be [C] or [N, C], found rank %d",
                              x->ndim);
    kiln_desc *y = &c->out[0];
    y->dtype = KILN_DTYPE_F32;
    y->ndim = x->ndim == 2 ? 2 : 1;
    if (x->ndim == 2) y->dims[0] = x->dims[0];
    y->dims[y->ndim - 1] = kiln_expr_const(c->x, t.out_size);
    return 0;
}

/* ---- the pool trie in a hash table */

typedef struct tf_edge {
    int64_t item;
    int32_t parent;
    int32_t child;     /* 0: empty slot (the root is never a child) */
} tf_edge;

typedef struct tf_trie {
    tf_edge *tab;
    uint64_t mask;
    int32_t *gram;     /* per node: pool n-gram index + 1, 0 if none */
    int32_t nodes;
} tf_trie;

static uint64_t tf_hash(int32_t parent, int64_t item) {
    uint64_t h = (uint64_t)item * 0x9E3779B97F4A7C15ull ^ ((uint64_t)(uint32_t)parent << 1);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

static int32_t tf_find(const tf_trie *t, int32_t parent, int64_t item) {
    for (uint64_t i = tf_hash(parent, item) & t->mask;; i = (i + 1) & t->mask) {
        const tf_edge *e = &t->tab[i];
        if (!e->child) return 0;
        if (e->parent == parent && e->item == item) return e->child;
    }
}

static int32_t tf_insert(tf_trie *t, int32_t parent, int64_t item) {
    uint64_t i = tf_hash(parent, item) & t->mask;
    for (;; i = (i + 1) & t->mask) {
        tf_edge *e = &t->tab[i];
        if (!e->child) break;
        if (e->parent == parent && e->item == item) return e->child;
    }
    int32_t node = t->nodes++;
    t->gram[node] = 0;
    t->tab[i] = (tf_edge){item, parent, node};
    return node;
}

/* Table slots: a power of two at least twice the node bound. */
static uint64_t tf_slots(const tfidf_cfg *t) {
    uint64_t need = 2 * (uint64_t)(t->npool + 1), s = 16;
    while (s < need) s <<= 1;
    return s;
}

static size_t tfidf_ws(const kiln_call *c) {
    tfidf_cfg t;
    if (tfidf_config(c->attrs, &t)) return 0;
    return tf_slots(&t) * sizeof(tf_edge) + (size_t)(t.npool + 1) * sizeof(int32_t);
}

static void tf_build(const tfidf_cfg *t, tf_trie *tr) {
    tr->gram[0] = 0;
    tr->nodes = 1;
    memset(tr->tab, 0, (size_t)(tr->mask + 1) * sizeof *tr->tab);
    int64_t id = 0; /* pool n-gram index */
    for (int64_t i = 0; i < t->ncounts; i++) {
        int64_t n = i + 1, b = t->counts[i], e = i + 1 < t->ncounts ? t->counts[i + 1] : t->npool;
        if (n < t->min_n || n > t->max_n) {
            id += (e - b) / n;
            continue;
        }
        for (int64_t p = b; p < e; p += n, id++) {
            int32_t node = 0;
            for (int64_t k = 0; k < n; k++) node = tf_insert(tr, node, t->pool[p + k]);
            tr->gram[node] = (int32_t)(id + 1); /* a repeated n-gram: the last one wins */
        }
    }
}

typedef struct tf_task {
    const tfidf_cfg *cfg;
    const tf_trie *trie;
    const void *x;
    int x64;
    int64_t C;
    float *y;
} tf_task;

static void tf_rows(void *ud, int64_t lo, int64_t hi) {
    const tf_task *t = ud;
    const tfidf_cfg *cfg = t->cfg;
    const int64_t C = t->C, S = cfg->out_size;
    for (int64_t r = lo; r < hi; r++) {
        float *y = t->y + r * S;
        memset(y, 0, (size_t)S * sizeof *y);
        const int32_t *x32 = (const int32_t *)t->x + r * C;
        const int64_t *x64 = (const int64_t *)t->x + r * C;
        int64_t first = cfg->min_n;
        for (int64_t skip = 0; skip <= cfg->max_skip; skip++) {
            const int64_t dist = skip + 1;
            /* larger skips fit no n-gram of length >= first either (and
             * max_skip_count may be huge: the loop ends here) */
            if (first > 1 && dist > (C - 1) / (first - 1)) break;
            for (int64_t s = 0; s + dist * (first - 1) < C; s++) {
                int32_t node = 0;
                int64_t pos = s;
                for (int64_t n = 1; n <= cfg->max_n && pos < C; n++, pos += dist) {
                    node = tf_find(t->trie, node, t->x64 ? x64[pos] : (int64_t)x32[pos]);
                    if (!node) break;
                    int32_t g = t->trie->gram[node];
                    if (n >= first && g) y[cfg->indexes[g - 1]] += 1.0f;
                }
            }
            /* 1-grams do not depend on the skip: count them once */
            if (first == 1) first = 2;
            if (first > cfg->max_n) break;
        }
        if (cfg->mode == M_IDF) {
            for (int64_t i = 0; i < S; i++)
                y[i] = y[i] > 0 ? (cfg->nweights ? cfg->weights[i] : 1.0f) : 0.0f;
        } else if (cfg->mode == M_TFIDF && cfg->nweights) {
            for (int64_t i = 0; i < S; i++) y[i] *= cfg->weights[i];
        }
    }
}

static int tfidf_impl(const kiln_call *c) {
    tfidf_cfg cfg;
    int rc = tfidf_config(c->attrs, &cfg);
    if (rc) return rc;
    const kiln_tensor *x = &c->in[0];
    int64_t st = 1;
    for (int d = x->ndim - 1; d >= 0; st *= x->dims[d], d--)
        if (x->dims[d] > 1 && x->strides[d] != st)
            return kiln_set_error(KILN_EUNSUPPORTED, TFIDF ": X is not dense");
    int64_t rows = x->ndim == 2 ? x->dims[0] : 1;
    int64_t C = x->ndim == 0 ? 1 : x->dims[x->ndim - 1];
    tf_trie tr;
    uint64_t slots = tf_slots(&cfg);
    tr.tab = c->workspace;
    tr.mask = slots - 1;
    tr.gram = (int32_t *)(tr.tab + slots);
    tf_build(&cfg, &tr);
    tf_task t = {&cfg, &tr, x->data, x->dtype == KILN_DTYPE_I64, C, c->out[0].data};
    kiln_exec_parallel_for(c->exec, rows, 1, tf_rows, &t);
    return 0;
}

static const kiln_quick_op tfidf_9 = {
    .ns = "ai.onnx", .name = "TfIdfVectorizer", .version = 9,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = tfidf_attrs, .shape = tfidf_shape, .impl = tfidf_impl, .workspace = tfidf_ws,
    .doc = "n-gram counts (TF, IDF, TFIDF) of integer sequences against a pool",
};
KILN_OP(tfidf_9)
