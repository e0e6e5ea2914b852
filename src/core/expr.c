/*
 * expr.c — hash-consed, constant-folded symbolic shape expressions.
 *
 * A pool (kiln_exprs) owns every node.  Each node is unique: building an
 * expression that already exists returns the existing node, so pointer
 * equality is structural equality.  Ids are dense and every child has a
 * smaller id than its parent, which lets the engine flatten a pool into a
 * program evaluated in one forward pass.
 *
 * Constructors canonicalize before looking a node up: constants fold,
 * neutral elements vanish (x+0, x*1, floordiv(x,1)), absorbing ones win
 * (x*0), x-x is 0, min/max(x,x) is x, and operands of commutative ops are
 * ordered (constants last, then by id), so a+b and b+a are one node.
 * Nodes live in fixed-size chunks, so their addresses never move.
 */
#include "kiln_int.h"

#include <stdio.h>
#include <stdlib.h>

#define CHUNK_BITS 8
#define CHUNK_SIZE (1u << CHUNK_BITS)

struct kiln_exprs {
    kiln_expr **chunks;
    uint32_t nchunks, cap_chunks;
    uint32_t count;
    uint32_t *table; /* open addressing: id + 1, 0 = empty */
    uint32_t table_size;
};

/* What a constructor returns when it cannot build its node (out of memory,
 * a NULL argument): a symbol no evaluation can resolve, never NULL, so shape
 * functions need no checks; every expression built from it is it again.  The
 * failure is recorded as misuse and fails the callback (kiln__misuse_take). */
static const kiln_expr k_invalid = {.op = KILN_EXPR_SYM, .id = UINT32_MAX, .name = "<invalid expression>",
                                    .lo = INT64_MIN};

static const kiln_expr *invalid(const char *fn, const char *why) {
    kiln__misuse("%s: %s", fn, why);
    return &k_invalid;
}

kiln_exprs *kiln__exprs_create(void) {
    kiln_exprs *x = kiln__calloc(1, sizeof *x);
    if (!x) return NULL;
    x->table_size = 256;
    x->table = kiln__calloc(x->table_size, sizeof *x->table);
    if (!x->table) {
        kiln__free(x);
        return NULL;
    }
    return x;
}

void kiln__exprs_free(kiln_exprs *x) {
    if (!x) return;
    for (uint32_t i = 0; i < x->count; i++) {
        kiln_expr *e = &x->chunks[i >> CHUNK_BITS][i & (CHUNK_SIZE - 1)];
        if (e->op == KILN_EXPR_SYM) kiln__free((char *)e->name);
    }
    for (uint32_t c = 0; c < x->nchunks; c++) kiln__free(x->chunks[c]);
    kiln__free(x->chunks);
    kiln__free(x->table);
    kiln__free(x);
}

uint32_t kiln__exprs_count(const kiln_exprs *x) { return x->count; }

const kiln_expr *kiln__exprs_at(const kiln_exprs *x, uint32_t id) {
    if (id >= x->count) return NULL;
    return &x->chunks[id >> CHUNK_BITS][id & (CHUNK_SIZE - 1)];
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static uint64_t node_hash(kiln_expr_op op, int64_t v, const char *name, const kiln_expr *a,
                          const kiln_expr *b, const kiln_expr *c) {
    uint64_t h = mix(0x1234567u, (uint64_t)op);
    if (op == KILN_EXPR_CONST) h = mix(h, (uint64_t)v);
    if (op == KILN_EXPR_SYM) h = mix(h, str_hash(name));
    h = mix(h, a ? a->id + 1u : 0);
    h = mix(h, b ? b->id + 1u : 0);
    h = mix(h, c ? c->id + 1u : 0);
    return h;
}

static int node_equal(const kiln_expr *e, kiln_expr_op op, int64_t v, const char *name,
                      const kiln_expr *a, const kiln_expr *b, const kiln_expr *c) {
    if (e->op != op || e->a != a || e->b != b || e->c != c) return 0;
    if (op == KILN_EXPR_CONST) return e->v == v;
    if (op == KILN_EXPR_SYM) return strcmp(e->name, name) == 0;
    return 1;
}

static int table_grow(kiln_exprs *x) {
    uint32_t nsize = x->table_size * 2;
    uint32_t *nt = nsize ? kiln__calloc(nsize, sizeof *nt) : NULL;
    if (!nt) return KILN_ENOMEM;
    for (uint32_t i = 0; i < x->count; i++) {
        const kiln_expr *e = kiln__exprs_at(x, i);
        uint32_t j = (uint32_t)e->hash & (nsize - 1);
        while (nt[j]) j = (j + 1) & (nsize - 1);
        nt[j] = i + 1;
    }
    kiln__free(x->table);
    x->table = nt;
    x->table_size = nsize;
    return 0;
}

/* Lower bounds (INT64_MIN = unknown), from the children's: what lets
 * comparisons and divisions on dims fold.  Saturating: a bound that would
 * overflow is dropped, never wrong. */
#define NO_LO INT64_MIN

static int64_t lo_add(int64_t a, int64_t b) {
    int64_t r;
    if (a == NO_LO || b == NO_LO || __builtin_add_overflow(a, b, &r)) return NO_LO;
    return r;
}

static int64_t lo_mul(int64_t a, int64_t b) { /* both >= 0 */
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return a >= 0 && b >= 0 ? 0 : NO_LO;
    return r;
}

static int64_t lower_bound(kiln_expr_op op, int64_t v, const kiln_expr *a, const kiln_expr *b,
                           const kiln_expr *c) {
    switch (op) {
    case KILN_EXPR_CONST: return v;
    case KILN_EXPR_EQ:
    case KILN_EXPR_LT: return 0;
    case KILN_EXPR_ADD: return lo_add(a->lo, b->lo);
    case KILN_EXPR_MUL: return lo_mul(a->lo, b->lo);
    case KILN_EXPR_MIN: return a->lo < b->lo ? a->lo : b->lo;
    case KILN_EXPR_MAX: return a->lo > b->lo ? a->lo : b->lo;
    case KILN_EXPR_FLOORDIV: /* a >= 0 over b >= 0 (b == 0 fails evaluation) */
    case KILN_EXPR_CEILDIV: return a->lo >= 0 && b->lo >= 0 ? 0 : NO_LO;
    case KILN_EXPR_MOD: return b->lo >= 0 ? 0 : NO_LO; /* floor mod takes the divisor's sign */
    case KILN_EXPR_SELECT_: return b->lo < c->lo ? b->lo : c->lo;
    default: return NO_LO;
    }
}

void kiln__expr_assume_min(const kiln_expr *sym, int64_t lo) {
    /* the pool owns its nodes (mutable chunks); the bound is not part of a
     * node's identity, so hash-consing is unaffected */
    if (sym && sym->op == KILN_EXPR_SYM && sym->id != UINT32_MAX && lo > sym->lo) ((kiln_expr *)sym)->lo = lo;
}

static const kiln_expr *intern(kiln_exprs *x, kiln_expr_op op, int64_t v, const char *name,
                               const kiln_expr *a, const kiln_expr *b, const kiln_expr *c) {
    uint64_t h = node_hash(op, v, name, a, b, c);
    uint32_t j = (uint32_t)h & (x->table_size - 1);
    while (x->table[j]) {
        const kiln_expr *e = kiln__exprs_at(x, x->table[j] - 1);
        if (e->hash == h && node_equal(e, op, v, name, a, b, c)) return e;
        j = (j + 1) & (x->table_size - 1);
    }
    /* new node: keep the table at most half full (grow first, so a failed
     * growth leaves a working table) */
    static const char *const oom = "out of memory in the expression pool";
    if (x->count >= UINT32_MAX / 4) return invalid("expression pool", "more than 2^30 expressions");
    if ((uint64_t)(x->count + 1) * 2 > x->table_size) {
        if (table_grow(x)) return invalid("expression pool", oom);
        j = (uint32_t)h & (x->table_size - 1);
        while (x->table[j]) j = (j + 1) & (x->table_size - 1);
    }
    uint32_t id = x->count;
    if ((id >> CHUNK_BITS) >= x->nchunks) {
        if (x->nchunks == x->cap_chunks) {
            uint32_t nc = x->cap_chunks ? x->cap_chunks * 2 : 8;
            kiln_expr **nch = kiln__realloc(x->chunks, nc * sizeof *x->chunks);
            if (!nch) return invalid("expression pool", oom);
            x->chunks = nch;
            x->cap_chunks = nc;
        }
        kiln_expr *chunk = kiln__calloc(CHUNK_SIZE, sizeof(kiln_expr));
        if (!chunk) return invalid("expression pool", oom);
        x->chunks[x->nchunks++] = chunk;
    }
    char *nm = NULL;
    if (op == KILN_EXPR_SYM && !(nm = kiln__strdup(name))) return invalid("expression pool", oom);
    kiln_expr *e = &x->chunks[id >> CHUNK_BITS][id & (CHUNK_SIZE - 1)];
    memset(e, 0, sizeof *e);
    e->op = op;
    e->id = id;
    e->v = op == KILN_EXPR_CONST ? v : 0;
    e->name = nm;
    e->a = a;
    e->b = b;
    e->c = c;
    e->hash = h;
    e->lo = lower_bound(op, v, a, b, c);
    x->count++;
    x->table[j] = id + 1;
    return e;
}

/* Arithmetic shared by folding and evaluation.  Wraps on overflow (two's
 * complement) rather than invoking undefined behaviour; division by zero is
 * KILN_EINVAL. */
static int arith(kiln_expr_op op, int64_t a, int64_t b, int64_t *out) {
    switch (op) {
    case KILN_EXPR_ADD: *out = (int64_t)((uint64_t)a + (uint64_t)b); return 0;
    case KILN_EXPR_SUB: *out = (int64_t)((uint64_t)a - (uint64_t)b); return 0;
    case KILN_EXPR_MUL: *out = (int64_t)((uint64_t)a * (uint64_t)b); return 0;
    case KILN_EXPR_FLOORDIV:
    case KILN_EXPR_CEILDIV:
    case KILN_EXPR_MOD: {
        if (b == 0) return KILN_EINVAL;
        if (b == -1) { /* avoids INT64_MIN / -1 */
            int64_t q = (int64_t)(0 - (uint64_t)a);
            *out = op == KILN_EXPR_MOD ? 0 : q;
            return 0;
        }
        int64_t q = a / b, r = a % b;
        if (op == KILN_EXPR_FLOORDIV) {
            if (r != 0 && ((r < 0) != (b < 0))) q--;
            *out = q;
        } else if (op == KILN_EXPR_CEILDIV) {
            if (r != 0 && ((r < 0) == (b < 0))) q++;
            *out = q;
        } else {
            if (r != 0 && ((r < 0) != (b < 0))) r += b;
            *out = r;
        }
        return 0;
    }
    case KILN_EXPR_MIN: *out = a < b ? a : b; return 0;
    case KILN_EXPR_MAX: *out = a > b ? a : b; return 0;
    case KILN_EXPR_EQ: *out = a == b; return 0;
    case KILN_EXPR_LT: *out = a < b; return 0;
    default: return KILN_EINVAL;
    }
}

const kiln_expr *kiln_expr_const(kiln_exprs *x, int64_t v) {
    if (!x) return invalid("kiln_expr_const", "invalid argument, expected an expression pool, found NULL");
    return intern(x, KILN_EXPR_CONST, v, NULL, NULL, NULL, NULL);
}

const kiln_expr *kiln_expr_sym(kiln_exprs *x, const char *name) {
    if (!x || !name)
        return invalid("kiln_expr_sym", "invalid argument, expected an expression pool and a name, found NULL");
    return intern(x, KILN_EXPR_SYM, 0, name, NULL, NULL, NULL);
}

static int is_c(const kiln_expr *e, int64_t v) { return e->op == KILN_EXPR_CONST && e->v == v; }
static int is_k(const kiln_expr *e) { return e->op == KILN_EXPR_CONST; }

static int commutative(kiln_expr_op op) {
    return op == KILN_EXPR_ADD || op == KILN_EXPR_MUL || op == KILN_EXPR_MIN ||
           op == KILN_EXPR_MAX || op == KILN_EXPR_EQ;
}

/* e as base + k with k constant (k = 0 when e has no constant offset). */
static void offset_of(const kiln_expr *e, const kiln_expr **base, int64_t *k) {
    if (e->op == KILN_EXPR_ADD && is_k(e->b)) {
        *base = e->a;
        *k = e->b->v;
    } else if (e->op == KILN_EXPR_SUB && is_k(e->b)) {
        *base = e->a;
        *k = (int64_t)(0 - (uint64_t)e->b->v);
    } else {
        *base = e;
        *k = 0;
    }
}

/* Canonical base + k: "base", "base + k" or "base - |k|".  base is never a
 * constant nor itself of that form. */
static const kiln_expr *make_offset(kiln_exprs *x, const kiln_expr *base, int64_t k) {
    if (k == 0) return base;
    if (k < 0 && k != INT64_MIN) return intern(x, KILN_EXPR_SUB, 0, NULL, base, kiln_expr_const(x, -k), NULL);
    return intern(x, KILN_EXPR_ADD, 0, NULL, base, kiln_expr_const(x, k), NULL);
}

/* A product as its factors and constant: what division cancels. */
#define MAX_FACTORS 16
typedef struct product {
    const kiln_expr *f[MAX_FACTORS];
    int n;
    int64_t k;
} product;

static int factor(const kiln_expr *e, product *p) {
    if (e->op == KILN_EXPR_MUL) return factor(e->a, p) && factor(e->b, p);
    if (is_k(e)) {
        int64_t r;
        if (__builtin_mul_overflow(p->k, e->v, &r)) return 0;
        p->k = r;
        return 1;
    }
    if (p->n == MAX_FACTORS) return 0;
    p->f[p->n++] = e;
    return 1;
}

/* a / b when every factor of b is one of a's and b's constant divides a's
 * (the quotient is then exact: floor and ceil agree); NULL otherwise.  The
 * caller knows b >= 1. */
static const kiln_expr *cancel_factors(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    product pa = {.k = 1}, pb = {.k = 1};
    if (!factor(a, &pa) || !factor(b, &pb) || pb.k <= 0 || pa.k % pb.k != 0) return NULL;
    for (int i = 0; i < pb.n; i++) {
        int j = 0;
        while (j < pa.n && pa.f[j] != pb.f[i]) j++;
        if (j == pa.n) return NULL;
        pa.f[j] = pa.f[--pa.n];
    }
    const kiln_expr *r = kiln_expr_const(x, pa.k / pb.k);
    for (int i = 0; i < pa.n; i++) r = kiln_expr_mul(x, r, pa.f[i]);
    return r;
}

const kiln_expr *kiln_expr_bin(kiln_exprs *x, kiln_expr_op op, const kiln_expr *a,
                               const kiln_expr *b) {
    if (!x || !a || !b)
        return invalid("kiln_expr_bin", "invalid argument, expected an expression pool and two expressions, found NULL");
    if (a == &k_invalid || b == &k_invalid) return &k_invalid;
    if (op < KILN_EXPR_ADD || op > KILN_EXPR_LT) {
        kiln__misuse("kiln_expr_bin: operator %d is not a binary operator (%d..%d expected)", (int)op,
                     KILN_EXPR_ADD, KILN_EXPR_LT);
        return &k_invalid;
    }
    int64_t r;
    if (is_k(a) && is_k(b) && arith(op, a->v, b->v, &r) == 0) return kiln_expr_const(x, r);
    if (commutative(op)) {
        /* canonical order: constants last, otherwise smaller id first */
        int swap = is_k(a) ? !is_k(b) : (!is_k(b) && b->id < a->id);
        if (swap) {
            const kiln_expr *t = a;
            a = b;
            b = t;
        }
    }
    switch (op) {
    case KILN_EXPR_ADD:
        /* constant offsets merge: (y + c1) + c2, (y - c1) + c2, y + (-c) */
        if (is_k(b)) {
            const kiln_expr *base;
            int64_t k;
            offset_of(a, &base, &k);
            return make_offset(x, base, (int64_t)((uint64_t)k + (uint64_t)b->v));
        }
        break;
    case KILN_EXPR_SUB:
        if (is_k(b)) {
            const kiln_expr *base;
            int64_t k;
            offset_of(a, &base, &k);
            return make_offset(x, base, (int64_t)((uint64_t)k - (uint64_t)b->v));
        }
        if (a == b) return kiln_expr_const(x, 0);
        /* (y + z) - z -> y, (y + z) - y -> z */
        if (a->op == KILN_EXPR_ADD && a->b == b) return a->a;
        if (a->op == KILN_EXPR_ADD && a->a == b) return a->b;
        break;
    case KILN_EXPR_MUL:
        if (is_c(b, 1)) return a;
        if (is_c(b, 0)) return b;
        if (is_k(b) && a->op == KILN_EXPR_MUL && is_k(a->b))
            return kiln_expr_bin(x, KILN_EXPR_MUL, a->a,
                                 kiln_expr_const(x, (int64_t)((uint64_t)a->b->v * (uint64_t)b->v)));
        break;
    case KILN_EXPR_FLOORDIV:
    case KILN_EXPR_CEILDIV:
        if (is_c(b, 1)) return a;
        /* (y * c) / c -> y for c != 0 */
        if (is_k(b) && b->v != 0 && a->op == KILN_EXPR_MUL && a->b == b) return a->a;
        /* (p * q * k) / (p * k') -> q * (k / k') for p >= 1, k' | k */
        if (b->lo >= 1) {
            const kiln_expr *r = cancel_factors(x, a, b);
            if (r) return r;
        }
        break;
    case KILN_EXPR_MOD:
        if (is_c(b, 1) || is_c(b, -1)) return kiln_expr_const(x, 0);
        break;
    case KILN_EXPR_MIN:
    case KILN_EXPR_MAX:
        if (a == b) return a;
        /* max(dim * k, 1) is dim * k when dim >= 1 */
        if (is_k(b) && a->lo >= b->v) return op == KILN_EXPR_MAX ? a : b;
        break;
    case KILN_EXPR_EQ:
        if (a == b) return kiln_expr_const(x, 1);
        /* below a's bound: Reshape's (dim == -1) and (dim == 0) tests */
        if (is_k(b) && b->v < a->lo) return kiln_expr_const(x, 0);
        break;
    case KILN_EXPR_LT:
        if (a == b) return kiln_expr_const(x, 0);
        if (is_k(b) && b->v <= a->lo) return kiln_expr_const(x, 0);
        if (is_k(a) && b->lo != NO_LO && a->v < b->lo) return kiln_expr_const(x, 1);
        break;
    default: break;
    }
    return intern(x, op, 0, NULL, a, b, NULL);
}

const kiln_expr *kiln_expr_add(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_ADD, a, b);
}
const kiln_expr *kiln_expr_sub(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_SUB, a, b);
}
const kiln_expr *kiln_expr_mul(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_MUL, a, b);
}
const kiln_expr *kiln_expr_floordiv(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_FLOORDIV, a, b);
}
const kiln_expr *kiln_expr_ceildiv(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_CEILDIV, a, b);
}
const kiln_expr *kiln_expr_min(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_MIN, a, b);
}
const kiln_expr *kiln_expr_max(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_MAX, a, b);
}
const kiln_expr *kiln_expr_eq(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_EQ, a, b);
}
const kiln_expr *kiln_expr_lt(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b) {
    return kiln_expr_bin(x, KILN_EXPR_LT, a, b);
}

const kiln_expr *kiln_expr_select(kiln_exprs *x, const kiln_expr *cond, const kiln_expr *a,
                                  const kiln_expr *b) {
    if (!x || !cond || !a || !b)
        return invalid("kiln_expr_select", "invalid argument, expected an expression pool and three expressions, found NULL");
    if (cond == &k_invalid || a == &k_invalid || b == &k_invalid) return &k_invalid;
    if (is_k(cond)) return cond->v ? a : b;
    if (a == b) return a;
    return intern(x, KILN_EXPR_SELECT_, 0, NULL, cond, a, b);
}

int kiln_expr_is_const(const kiln_expr *e, int64_t *v) {
    if (!e || e->op != KILN_EXPR_CONST) return 0;
    if (v) *v = e->v;
    return 1;
}

/* ---------------------------------------------------------------- printing */

typedef struct out_buf {
    char *buf;
    size_t size, pos;
    uint32_t budget; /* nodes left to print (the tree form of a DAG can be exponential) */
} out_buf;

/* Nodes printed at most: beyond, the text ends in "...". */
#define PRINT_MAX_NODES 4096u

static void put(out_buf *o, const char *fmt, ...) KILN_PRINTF(2, 3);
static void put(out_buf *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = o->pos < o->size ? o->buf + o->pos : NULL;
    size_t room = o->pos < o->size ? o->size - o->pos : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->pos += (size_t)n;
}

/* Precedence of infix forms (higher binds tighter); function forms: 9. */
static int prec(const kiln_expr *e) {
    switch (e->op) {
    case KILN_EXPR_EQ:
    case KILN_EXPR_LT: return 1;
    case KILN_EXPR_ADD:
    case KILN_EXPR_SUB: return 2;
    case KILN_EXPR_MUL:
    case KILN_EXPR_FLOORDIV:
    case KILN_EXPR_MOD: return 3;
    case KILN_EXPR_CONST: return e->v < 0 ? 4 : 9;
    default: return 9;
    }
}

static void print_rec(out_buf *o, const kiln_expr *e);

static void print_operand(out_buf *o, const kiln_expr *e, int min_prec) {
    int paren = prec(e) < min_prec;
    if (paren) put(o, "(");
    print_rec(o, e);
    if (paren) put(o, ")");
}

static void print_rec(out_buf *o, const kiln_expr *e) {
    if (o->budget == 0) return;
    if (--o->budget == 0) {
        put(o, "...");
        return;
    }
    static const char *const infix[KILN_EXPR_OP_COUNT_] = {
        [KILN_EXPR_ADD] = " + ", [KILN_EXPR_SUB] = " - ", [KILN_EXPR_MUL] = " * ",
        [KILN_EXPR_FLOORDIV] = " // ", [KILN_EXPR_MOD] = " % ", [KILN_EXPR_EQ] = " == ",
        [KILN_EXPR_LT] = " < "};
    switch (e->op) {
    case KILN_EXPR_CONST: put(o, "%lld", (long long)e->v); return;
    case KILN_EXPR_SYM: put(o, "%s", e->name); return;
    case KILN_EXPR_CEILDIV:
    case KILN_EXPR_MIN:
    case KILN_EXPR_MAX:
        put(o, "%s(", e->op == KILN_EXPR_CEILDIV ? "ceildiv" : e->op == KILN_EXPR_MIN ? "min" : "max");
        print_rec(o, e->a);
        put(o, ", ");
        print_rec(o, e->b);
        put(o, ")");
        return;
    case KILN_EXPR_SELECT_:
        put(o, "select(");
        print_rec(o, e->a);
        put(o, ", ");
        print_rec(o, e->b);
        put(o, ", ");
        print_rec(o, e->c);
        put(o, ")");
        return;
    default: {
        int p = prec(e);
        /* left-associative: the right operand needs parens at equal precedence */
        print_operand(o, e->a, p);
        put(o, "%s", infix[e->op] ? infix[e->op] : " ? ");
        print_operand(o, e->b, p + 1);
        return;
    }
    }
}

int kiln_expr_print(const kiln_expr *e, char *buf, size_t size) {
    out_buf o = {buf, size, 0, PRINT_MAX_NODES};
    if (size) buf[0] = '\0';
    if (!e) {
        put(&o, "(null)");
        return (int)o.pos;
    }
    print_rec(&o, e);
    if (size) buf[o.pos < size ? o.pos : size - 1] = '\0';
    return (int)o.pos;
}

/* ---------------------------------------------------------------- evaluation */

/* Expressions are DAGs: a dim built through many layers reaches the same
 * subexpression along exponentially many paths (torch's Shape -> Gather ->
 * Concat -> Reshape chains), so evaluation memoizes every operator node's
 * value by id and visits each node once.  Selects stay lazy: the branch not
 * taken is not evaluated (its division by zero is no error). */
typedef struct eval_memo {
    uint32_t *keys; /* id + 1; 0 = empty */
    int64_t *vals;
    uint32_t cap, n;
    uint32_t k0[64];
    int64_t v0[64];
} eval_memo;

static int64_t *memo_slot(eval_memo *m, uint32_t id, int insert) {
    uint32_t j = (id * 2654435761u) & (m->cap - 1);
    while (m->keys[j] && m->keys[j] != id + 1) j = (j + 1) & (m->cap - 1);
    if (m->keys[j]) return &m->vals[j];
    if (!insert) return NULL;
    if ((m->n + 1) * 2 > m->cap) { /* grow; on failure stay as is, just slower */
        uint32_t nc = m->cap * 2;
        uint32_t *nk = kiln__calloc(nc, sizeof *nk);
        int64_t *nv = kiln__malloc(nc * sizeof *nv);
        if (!nk || !nv) {
            kiln__free(nk);
            kiln__free(nv);
            return NULL;
        }
        for (uint32_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            uint32_t q = ((m->keys[i] - 1) * 2654435761u) & (nc - 1);
            while (nk[q]) q = (q + 1) & (nc - 1);
            nk[q] = m->keys[i];
            nv[q] = m->vals[i];
        }
        if (m->keys != m->k0) {
            kiln__free(m->keys);
            kiln__free(m->vals);
        }
        m->keys = nk;
        m->vals = nv;
        m->cap = nc;
        j = (id * 2654435761u) & (nc - 1);
        while (m->keys[j]) j = (j + 1) & (nc - 1);
    }
    m->keys[j] = id + 1;
    m->n++;
    return &m->vals[j];
}

static int eval_rec(const kiln_expr *e, kiln__sym_lookup cb, void *ud, eval_memo *m, int64_t *out) {
    switch (e->op) {
    case KILN_EXPR_CONST: *out = e->v; return 0;
    case KILN_EXPR_SYM: {
        if (!cb) return kiln__err(KILN_EINVAL, "symbol '%s' has no value (no lookup given)", e->name);
        int rc = cb(ud, e->name, out);
        if (rc != 0)
            return kiln__err(rc < 0 ? rc : KILN_EINVAL, "symbol '%s' has no value", e->name);
        return 0;
    }
    default: break;
    }
    const int64_t *known = memo_slot(m, e->id, 0);
    if (known) {
        *out = *known;
        return 0;
    }
    int rc;
    if (e->op == KILN_EXPR_SELECT_) {
        int64_t c;
        if ((rc = eval_rec(e->a, cb, ud, m, &c))) return rc;
        if ((rc = eval_rec(c ? e->b : e->c, cb, ud, m, out))) return rc;
    } else {
        int64_t a, b;
        if ((rc = eval_rec(e->a, cb, ud, m, &a))) return rc;
        if ((rc = eval_rec(e->b, cb, ud, m, &b))) return rc;
        if (arith(e->op, a, b, out) != 0) {
            char txt[256];
            kiln_expr_print(e, txt, sizeof txt);
            return kiln__err(KILN_EINVAL, "division by zero evaluating '%s' (divisor evaluated to 0)", txt);
        }
    }
    int64_t *slot = memo_slot(m, e->id, 1);
    if (slot) *slot = *out;
    return 0;
}

int kiln__expr_eval(const kiln_expr *e, kiln__sym_lookup cb, void *ud, int64_t *out) {
    KILN__ASSERT(e && out);
    eval_memo m;
    memset(m.k0, 0, sizeof m.k0);
    m.keys = m.k0;
    m.vals = m.v0;
    m.cap = 64;
    m.n = 0;
    int rc = eval_rec(e, cb, ud, &m, out);
    if (m.keys != m.k0) {
        kiln__free(m.keys);
        kiln__free(m.vals);
    }
    return rc;
}
