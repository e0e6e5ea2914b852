/* test_attrs.c — attribute schema defaults, conversions, codec, accessors. */
#include "kiln_int.h"
#include "test.h"

static const kiln_attr_def defs_[] = {
    {"axis", KILN_ATTR_INT, 0, "-1", 0, "axis"},
    {"alpha", KILN_ATTR_FLOAT, 0, "0.5", 0, NULL},
    {"mode", KILN_ATTR_STRING, 0, "nearest", 0, NULL},
    {"flag", KILN_ATTR_BOOL, 0, "true", 0, NULL},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, 2, 3]", 0, NULL},
    {"small", KILN_ATTR_ARRAY, KILN_DTYPE_I32, NULL, 0, NULL},
    {"scales", KILN_ATTR_ARRAY, KILN_DTYPE_F32, "[0.5, 2]", 0, NULL},
    {"blob", KILN_ATTR_BYTES, 0, NULL, 0, NULL},
    {"value", KILN_ATTR_TENSOR, 0, NULL, 0, NULL},
    {"need", KILN_ATTR_INT, 0, NULL, 1, NULL},
    {"empty", KILN_ATTR_ARRAY, 0, "[]", 0, NULL},
    {NULL},
};
#define NDEFS 11

static kiln__op op_;

static void make_op(kiln__op *op, const kiln_attr_def *defs, int n) {
    memset(op, 0, sizeof *op);
    op->ns = "test";
    op->name = "attrs";
    op->version = 1;
    op->attr_defs = defs;
    op->nattrs = n;
    op->attr_defaults = calloc((size_t)n, sizeof(kiln_attr_value));
    for (int i = 0; i < n; i++) ASSERT_OK(kiln__attr_parse_default(&defs[i], &op->attr_defaults[i]));
}

static void free_op(kiln__op *op) {
    for (int i = 0; i < op->nattrs; i++) kiln__attr_value_free(&op->attr_defaults[i]);
    free(op->attr_defaults);
}

TEST_IMPL(attrs_defaults) {
    make_op(&op_, defs_, NDEFS);
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, &op_));
    kiln_attrs a = kiln__attrset_view(&s);
    ASSERT_EQ(kiln_attrs_int(&a, "axis"), -1);
    ASSERT_NEAR(kiln_attrs_float(&a, "alpha"), 0.5, 0);
    ASSERT_STR_EQ(kiln_attrs_string(&a, "mode"), "nearest");
    ASSERT_EQ(kiln_attrs_int(&a, "flag"), 1);
    const int64_t *p;
    ASSERT_EQ(kiln_attrs_ints(&a, "pads", &p), 3);
    ASSERT_EQ(p[0], 1);
    ASSERT_EQ(p[2], 3);
    const float *f;
    ASSERT_EQ(kiln_attrs_floats(&a, "scales", &f), 2);
    ASSERT_NEAR(f[0], 0.5, 0);
    ASSERT_NEAR(f[1], 2.0, 0);
    ASSERT_EQ(kiln_attrs_ints(&a, "small", &p), -1);
    ASSERT(!kiln_attrs_get(&a, "blob")->present);
    ASSERT(kiln_attrs_get(&a, "nope") == NULL);
    ASSERT_EQ(kiln_attrs_ints(&a, "empty", &p), 0);
    ASSERT_STR_EQ(kiln__attrset_missing(&s), "need");
    kiln_attr_value v = {.present = 1, .type = KILN_ATTR_INT, .i = 7};
    ASSERT_OK(kiln__attrset_set(&s, "need", &v));
    ASSERT(kiln__attrset_missing(&s) == NULL);
    kiln__attrset_free(&s);

    /* bad defaults name the attribute */
    kiln_attr_value out;
    kiln_attr_def bad1 = {"k", KILN_ATTR_INT, 0, "abc", 0, NULL};
    ASSERT_EQ(kiln__attr_parse_default(&bad1, &out), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "'k'");
    kiln_attr_def bad2 = {"k2", KILN_ATTR_INT, 0, "1.5", 0, NULL};
    ASSERT(kiln__attr_parse_default(&bad2, &out) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "'k2'");
    kiln_attr_def bad3 = {"arr", KILN_ATTR_ARRAY, KILN_DTYPE_I32, "[1, 99999999999]", 0, NULL};
    ASSERT(kiln__attr_parse_default(&bad3, &out) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "'arr'");
    kiln_attr_def bad4 = {"arr2", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, x]", 0, NULL};
    ASSERT(kiln__attr_parse_default(&bad4, &out) != 0);
    kiln_attr_def bad5 = {"b", KILN_ATTR_BOOL, 0, "2", 0, NULL};
    ASSERT(kiln__attr_parse_default(&bad5, &out) != 0);
    kiln_attr_def ok1 = {"b", KILN_ATTR_BOOL, 0, "False", 0, NULL};
    ASSERT_OK(kiln__attr_parse_default(&ok1, &out));
    ASSERT_EQ(out.i, 0);
    kiln_attr_def ok2 = {"f", KILN_ATTR_FLOAT, 0, "3", 0, NULL};
    ASSERT_OK(kiln__attr_parse_default(&ok2, &out));
    ASSERT_NEAR(out.f, 3.0, 0);
    kiln_attr_def ok3 = {"s", KILN_ATTR_STRING, 0, "\"quoted\"", 0, NULL};
    ASSERT_OK(kiln__attr_parse_default(&ok3, &out));
    ASSERT_STR_EQ(out.s, "quoted");
    kiln__attr_value_free(&out);
    free_op(&op_);
}

TEST_IMPL(attrs_conversions) {
    make_op(&op_, defs_, NDEFS);
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, &op_));
    kiln_attrs a = kiln__attrset_view(&s);
    kiln_attr_value v = {.present = 1};
    /* wrong type: message names the attribute */
    v.type = KILN_ATTR_STRING;
    v.s = "x";
    v.len = 1;
    ASSERT_EQ(kiln__attrset_set(&s, "axis", &v), KILN_EATTR);
    ASSERT_CONTAINS(kiln_errmsg(), "'axis'");
    ASSERT_CONTAINS(kiln_errmsg(), "expected int");
    ASSERT_EQ(kiln__attrset_set(&s, "bogus", &v), KILN_EATTR);
    ASSERT_CONTAINS(kiln_errmsg(), "'bogus'");
    ASSERT_CONTAINS(kiln_errmsg(), "axis, alpha");
    /* int -> float */
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_INT, .i = 3};
    ASSERT_OK(kiln__attrset_set(&s, "alpha", &v));
    ASSERT_NEAR(kiln_attrs_float(&a, "alpha"), 3.0, 0);
    /* float -> int only if integral */
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_FLOAT, .f = 4.0};
    ASSERT_OK(kiln__attrset_set(&s, "axis", &v));
    ASSERT_EQ(kiln_attrs_int(&a, "axis"), 4);
    v.f = 4.5;
    ASSERT_EQ(kiln__attrset_set(&s, "axis", &v), KILN_EATTR);
    ASSERT_EQ(kiln_attrs_int(&a, "axis"), 4); /* unchanged on failure */
    /* bool from int 0/1 only */
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_INT, .i = 0};
    ASSERT_OK(kiln__attrset_set(&s, "flag", &v));
    ASSERT_EQ(kiln_attrs_int(&a, "flag"), 0);
    v.i = 2;
    ASSERT_EQ(kiln__attrset_set(&s, "flag", &v), KILN_EATTR);
    /* arrays: I64 into an I32 schema when values fit */
    int64_t i64v[3] = {5, -6, 70000};
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 3, .data = i64v};
    ASSERT_OK(kiln__attrset_set(&s, "small", &v));
    ASSERT_EQ(kiln_attrs_get(&a, "small")->elem, KILN_DTYPE_I32);
    const int64_t *p;
    ASSERT_EQ(kiln_attrs_ints(&a, "small", &p), 3);
    ASSERT_EQ(p[1], -6);
    ASSERT_EQ(p[2], 70000);
    int64_t big[1] = {(int64_t)1 << 40};
    v.data = big;
    v.count = 1;
    ASSERT_EQ(kiln__attrset_set(&s, "small", &v), KILN_EATTR);
    ASSERT_CONTAINS(kiln_errmsg(), "element 0");
    /* INTS given for a FLOAT array */
    int64_t ints[2] = {3, -1};
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 2, .data = ints};
    ASSERT_OK(kiln__attrset_set(&s, "scales", &v));
    const float *f;
    ASSERT_EQ(kiln_attrs_floats(&a, "scales", &f), 2);
    ASSERT_NEAR(f[0], 3.0, 0);
    ASSERT_NEAR(f[1], -1.0, 0);
    /* F32 0.5 into the I64 array: lossy, refused */
    float fl[1] = {0.5f};
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_F32, .count = 1, .data = fl};
    ASSERT_EQ(kiln__attrset_set(&s, "pads", &v), KILN_EATTR);
    fl[0] = 8.0f;
    ASSERT_OK(kiln__attrset_set(&s, "pads", &v));
    ASSERT_EQ(kiln_attrs_ints(&a, "pads", &p), 1);
    ASSERT_EQ(p[0], 8);
    /* f64 0.1 into an F32 array is not exact: refused */
    double d[1] = {0.1};
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_F64, .count = 1, .data = d};
    ASSERT_EQ(kiln__attrset_set(&s, "scales", &v), KILN_EATTR);
    d[0] = 0.25;
    ASSERT_OK(kiln__attrset_set(&s, "scales", &v));
    /* deep copy: caller's buffers may change afterwards */
    char str[8] = "linear";
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_STRING, .s = str, .len = 6};
    ASSERT_OK(kiln__attrset_set(&s, "mode", &v));
    strcpy(str, "xxxxxx");
    ASSERT_STR_EQ(kiln_attrs_string(&a, "mode"), "linear");
    kiln__attrset c;
    ASSERT_OK(kiln__attrset_copy(&c, &s));
    kiln__attrset_free(&s);
    kiln_attrs ca = kiln__attrset_view(&c);
    ASSERT_STR_EQ(kiln_attrs_string(&ca, "mode"), "linear");
    ASSERT_EQ(kiln_attrs_int(&ca, "axis"), 4);
    kiln__attrset_free(&c);
    free_op(&op_);
}

static void fill_random(kiln__attrset *s, uint64_t *seed, float *tdata) {
    kiln_attr_value v = {.present = 1, .type = KILN_ATTR_INT};
    v.i = (int64_t)test_rand_u64(seed);
    ASSERT_OK(kiln__attrset_set(s, "axis", &v));
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_FLOAT, .f = test_randf(seed, -10, 10)};
    ASSERT_OK(kiln__attrset_set(s, "alpha", &v));
    char str[16];
    snprintf(str, sizeof str, "m%u", (unsigned)(test_rand_u64(seed) % 1000));
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_STRING, .s = str, .len = strlen(str)};
    ASSERT_OK(kiln__attrset_set(s, "mode", &v));
    int64_t arr[6];
    for (int i = 0; i < 6; i++) arr[i] = (int64_t)(test_rand_u64(seed) % 2000) - 1000;
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 6, .data = arr};
    ASSERT_OK(kiln__attrset_set(s, "pads", &v));
    ASSERT_OK(kiln__attrset_set(s, "small", &v));
    uint8_t bytes[5] = {0, 1, 2, 0, 255};
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_BYTES, .s = (const char *)bytes, .len = 5};
    ASSERT_OK(kiln__attrset_set(s, "blob", &v));
    for (int i = 0; i < 6; i++) tdata[i] = test_randf(seed, -1, 1);
    v = (kiln_attr_value){.present = 1, .type = KILN_ATTR_TENSOR, .elem = KILN_DTYPE_F32, .ndim = 2,
                          .dims = {2, 3}, .data = tdata};
    ASSERT_OK(kiln__attrset_set(s, "value", &v));
}

static void assert_same(const kiln__attrset *a, const kiln__attrset *b) {
    ASSERT_EQ(a->count, b->count);
    for (int i = 0; i < a->count; i++) {
        const kiln_attr_value *x = &a->v[i], *y = &b->v[i];
        ASSERT_EQ(x->present, y->present);
        if (!x->present) continue;
        ASSERT_EQ(x->type, y->type);
        ASSERT_EQ(x->elem, y->elem);
        ASSERT_EQ(x->i, y->i);
        ASSERT(x->f == y->f);
        ASSERT_EQ(x->len, y->len);
        if (x->len) ASSERT(memcmp(x->s, y->s, x->len) == 0);
        ASSERT_EQ(x->count, y->count);
        ASSERT_EQ(x->ndim, y->ndim);
        for (int k = 0; k < x->ndim; k++) ASSERT_EQ(x->dims[k], y->dims[k]);
        if (x->count) ASSERT(memcmp(x->data, y->data, (size_t)x->count * kiln_dtype_size(x->elem)) == 0);
    }
}

TEST_IMPL(attrs_codec) {
    make_op(&op_, defs_, NDEFS);
    uint64_t seed = 4242;
    for (int it = 0; it < 50; it++) {
        kiln__attrset s, d;
        float tdata[6];
        ASSERT_OK(kiln__attrset_init(&s, &op_));
        fill_random(&s, &seed, tdata);
        size_t n = 0;
        ASSERT_OK(kiln__attrs_serialize(&s, NULL, &n));
        uint8_t *buf = malloc(n);
        memset(buf, 0xcd, n);
        size_t m = n;
        ASSERT_OK(kiln__attrs_serialize(&s, buf, &m));
        ASSERT_EQ(m, n);
        ASSERT_OK(kiln__attrs_deserialize(&d, &op_, buf, n));
        assert_same(&s, &d);
        kiln__attrset_free(&d);
        /* too small a buffer is an error, not an overrun */
        m = n - 1;
        ASSERT_EQ(kiln__attrs_serialize(&s, buf, &m), KILN_EINVAL);
        free(buf);
        kiln__attrset_free(&s);
    }
    /* unknown name -> KILN_EFORMAT */
    static const kiln_attr_def other[] = {{"axis", KILN_ATTR_INT, 0, "1", 0, NULL},
                                          {"stranger", KILN_ATTR_INT, 0, "5", 0, NULL},
                                          {NULL}};
    kiln__op op2;
    make_op(&op2, other, 2);
    kiln__attrset s2, d2;
    ASSERT_OK(kiln__attrset_init(&s2, &op2));
    uint8_t buf[256];
    size_t n = sizeof buf;
    ASSERT_OK(kiln__attrs_serialize(&s2, buf, &n));
    ASSERT_EQ(kiln__attrs_deserialize(&d2, &op_, buf, n), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "'stranger'");
    ASSERT_EQ(d2.v, NULL);
    kiln__attrset_free(&s2);
    free_op(&op2);
    /* the same attribute twice: rejected */
    static const kiln_attr_def one[] = {{"axis", KILN_ATTR_INT, 0, "1", 0, NULL}, {NULL}};
    kiln__op op1;
    make_op(&op1, one, 1);
    kiln__attrset s1;
    ASSERT_OK(kiln__attrset_init(&s1, &op1));
    n = sizeof buf;
    ASSERT_OK(kiln__attrs_serialize(&s1, buf, &n)); /* 1 + 4 + (2 + 4 + 2 + 8) */
    ASSERT_EQ(n, 21);
    uint8_t twice[64];
    memcpy(twice, buf, n);
    memcpy(twice + n, buf + 5, n - 5);
    twice[1] = 2;
    kiln__op big = op_;
    make_op(&big, defs_, NDEFS);
    ASSERT_EQ(kiln__attrs_deserialize(&d2, &big, twice, 2 * n - 5), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "twice");
    twice[1] = 1;
    ASSERT_OK(kiln__attrs_deserialize(&d2, &big, twice, n));
    ASSERT_EQ(d2.v[0].i, 1);
    kiln__attrset_free(&d2);
    free_op(&big);
    kiln__attrset_free(&s1);
    free_op(&op1);
    free_op(&op_);
}

TEST_IMPL(attrs_fuzz) {
    make_op(&op_, defs_, NDEFS);
    uint64_t seed = 31337;
    kiln__attrset s;
    float tdata[6];
    ASSERT_OK(kiln__attrset_init(&s, &op_));
    fill_random(&s, &seed, tdata);
    size_t n = 0;
    ASSERT_OK(kiln__attrs_serialize(&s, NULL, &n));
    uint8_t *good = malloc(n);
    ASSERT_OK(kiln__attrs_serialize(&s, good, &n));
    int ok = 0, bad = 0;
    for (int it = 0; it < 20000; it++) {
        /* an exactly sized heap copy so ASan sees any overread */
        size_t len = n;
        if (it % 3 == 0) len = (size_t)(test_rand_u64(&seed) % (n + 1));
        uint8_t *b = malloc(len ? len : 1);
        memcpy(b, good, len);
        int flips = it % 3 == 0 ? 0 : 1 + (int)(test_rand_u64(&seed) % 4);
        for (int k = 0; k < flips && len; k++) b[test_rand_u64(&seed) % len] ^= (uint8_t)(1u << (test_rand_u64(&seed) % 8));
        kiln__attrset d;
        int rc = kiln__attrs_deserialize(&d, &op_, b, len);
        if (rc == 0) {
            ok++;
            /* whatever decoded must re-encode */
            size_t m = 0;
            if (kiln__attrs_serialize(&d, NULL, &m) == 0) ASSERT(m > 0);
            kiln__attrset_free(&d);
        } else {
            bad++;
            ASSERT(rc == KILN_EFORMAT || rc == KILN_EVERSION || rc == KILN_ENOMEM);
            ASSERT(kiln_errmsg()[0] != '\0');
        }
        free(b);
    }
    ASSERT(bad > 1000);
    kiln__attrset d;
    ASSERT_EQ(kiln__attrs_deserialize(&d, &op_, NULL, 0), KILN_EFORMAT);
    free(good);
    kiln__attrset_free(&s);
    free_op(&op_);
}

/* The one table of attribute type names (messages of the importer, the
 * registry listing and the attribute codec all use it). */
TEST_IMPL(attrs_type_names) {
    static const char *const want[] = {"int", "float", "string", "bool", "bytes", "array", "tensor", "graph"};
    for (int t = KILN_ATTR_INT; t <= KILN_ATTR_GRAPH; t++)
        ASSERT_STR_EQ(kiln_attr_type_name((kiln_attr_type)t), want[t - KILN_ATTR_INT]);
    ASSERT_STR_EQ(kiln_attr_type_name((kiln_attr_type)0), "?");
    ASSERT_STR_EQ(kiln_attr_type_name((kiln_attr_type)99), "?");
}

TEST_LIST(TEST_ENTRY(attrs_defaults), TEST_ENTRY(attrs_type_names), TEST_ENTRY(attrs_conversions), TEST_ENTRY(attrs_codec), TEST_ENTRY(attrs_fuzz))
