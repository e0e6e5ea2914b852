/*
 * test_bytes.c — the byte codec (core/bytes.h) behind engine files,
 * attribute blobs, AOT records and sub-engine states: the writer's bytes
 * against little-endian layouts spelled out by hand, random records read
 * back exactly, a fixed buffer that is too small is measured and never
 * overrun, and every truncation of a record fails with a message naming
 * the record, the offset and the field (never a read past the end: the
 * ASan build checks that).
 */
#include "core/bytes.h"
#include "kiln_int.h"
#include "test.h"

static uint64_t g_seed = 0xB17E5;

TEST_IMPL(writer_is_little_endian) {
    kiln__wbuf w;
    kiln__w_init(&w);
    kiln__w_u8(&w, 0xAB);
    kiln__w_u16(&w, 0x1234);
    kiln__w_u32(&w, 0x01020304u);
    kiln__w_i32(&w, -2);
    kiln__w_u64(&w, 0x1122334455667788ull);
    kiln__w_str(&w, "hi", 2);
    kiln__w_f64(&w, 1.0); /* 0x3FF0000000000000 */
    static const uint8_t want[] = {0xAB, 0x34, 0x12, 0x04, 0x03, 0x02, 0x01, 0xFE, 0xFF, 0xFF, 0xFF,
                                   0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x02, 0x00, 'h',
                                   'i',  0,    0,    0,    0,    0,    0,    0xF0, 0x3F};
    ASSERT_EQ(w.n, sizeof want);
    ASSERT(!w.oom);
    for (size_t i = 0; i < sizeof want; i++) ASSERT_EQ(w.p[i], want[i]);
    kiln__w_pad(&w, 64);
    ASSERT_EQ(w.n, 64);
    for (size_t i = sizeof want; i < 64; i++) ASSERT_EQ(w.p[i], 0);
    kiln__free(w.p);
}

/* One random record: what was written, to compare what is read. */
typedef struct rec {
    uint8_t a;
    uint32_t b;
    int64_t c;
    double d;
    char s[40];
    int16_t e[7];
} rec;

static void rec_write(kiln__wbuf *w, const rec *x) {
    kiln__w_u8(w, x->a);
    kiln__w_u32(w, x->b);
    kiln__w_i64(w, x->c);
    kiln__w_f64(w, x->d);
    kiln__w_str(w, x->s, 4);
    kiln__w_u32(w, 7);
    kiln__w_elems(w, x->e, 7, sizeof x->e[0]);
}

static int rec_read(kiln__rbuf *r, rec *x) {
    x->a = kiln__r_u8(r, "a");
    x->b = kiln__r_u32(r, "b");
    x->c = kiln__r_i64(r, "c");
    x->d = kiln__r_f64(r, "d");
    char *s = kiln__r_str(r, 4, sizeof x->s - 1, "s");
    if (s) strcpy(x->s, s);
    kiln__free(s);
    uint32_t n = kiln__r_count(r, 2, 7, "e count");
    if (!r->err) kiln__r_elems(r, x->e, n, sizeof x->e[0], "e");
    return kiln__r_end(r);
}

static void rec_random(rec *x) {
    memset(x, 0, sizeof *x);
    x->a = (uint8_t)test_rand_u64(&g_seed);
    x->b = (uint32_t)test_rand_u64(&g_seed);
    x->c = (int64_t)test_rand_u64(&g_seed);
    x->d = test_randf(&g_seed, -1e6f, 1e6f);
    int len = (int)(test_rand_u64(&g_seed) % 39);
    for (int i = 0; i < len; i++) x->s[i] = (char)('a' + test_rand_u64(&g_seed) % 26);
    for (int i = 0; i < 7; i++) x->e[i] = (int16_t)test_rand_u64(&g_seed);
}

TEST_IMPL(records_round_trip) {
    for (int iter = 0; iter < 100; iter++) {
        rec x, y;
        rec_random(&x);
        kiln__wbuf w;
        kiln__w_init(&w);
        rec_write(&w, &x);
        kiln__rbuf r;
        kiln__r_init(&r, w.p, w.n, "test record");
        memset(&y, 0x5A, sizeof y); /* poison */
        ASSERT_OK(rec_read(&r, &y));
        ASSERT_EQ(y.a, x.a);
        ASSERT_EQ(y.b, x.b);
        ASSERT_EQ(y.c, x.c);
        ASSERT(y.d == x.d);
        ASSERT_STR_EQ(y.s, x.s);
        for (int i = 0; i < 7; i++) ASSERT_EQ(y.e[i], x.e[i]);
        kiln__free(w.p);
    }
}

TEST_IMPL(fixed_buffer_measures_and_never_overruns) {
    rec x;
    rec_random(&x);
    kiln__wbuf w;
    kiln__w_init_fixed(&w, NULL, 0); /* measure */
    rec_write(&w, &x);
    size_t need = w.n;
    ASSERT(need > 20);
    uint8_t buf[256];
    memset(buf, 0xEE, sizeof buf);
    kiln__w_init_fixed(&w, buf, need - 5); /* too small: counts, writes only what fits */
    rec_write(&w, &x);
    ASSERT_EQ(w.n, need);
    for (size_t i = need - 5; i < sizeof buf; i++) ASSERT_EQ(buf[i], 0xEE);
    kiln__w_init_fixed(&w, buf, need);
    rec_write(&w, &x);
    ASSERT_EQ(w.n, need);
    ASSERT_EQ(buf[need], 0xEE);
}

TEST_IMPL(every_truncation_is_an_error) {
    rec x;
    rec_random(&x);
    snprintf(x.s, sizeof x.s, "name");
    kiln__wbuf w;
    kiln__w_init(&w);
    rec_write(&w, &x);
    for (size_t len = 0; len < w.n; len++) {
        /* a private copy of exactly len bytes, so ASan sees any overread */
        uint8_t *cut = kiln__malloc(len ? len : 1);
        memcpy(cut, w.p, len);
        kiln__rbuf r;
        kiln__r_init(&r, cut, len, "test record");
        rec y;
        ASSERT_EQ(rec_read(&r, &y), KILN_EFORMAT);
        ASSERT_CONTAINS(kiln_errmsg(), "test record (offset ");
        ASSERT_CONTAINS(kiln_errmsg(), "left");
        kiln__free(cut);
    }
    /* one byte more than the record: named as trailing */
    uint8_t *longer = kiln__malloc(w.n + 1);
    memcpy(longer, w.p, w.n);
    longer[w.n] = 9;
    kiln__rbuf r;
    kiln__r_init(&r, longer, w.n + 1, "test record");
    rec y;
    ASSERT_EQ(rec_read(&r, &y), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "1 unexpected bytes at the end");
    kiln__free(longer);
    kiln__free(w.p);
}

TEST_IMPL(reader_checks_lengths_counts_and_ranges) {
    kiln__wbuf w;
    kiln__w_init(&w);
    kiln__w_u32(&w, 1000000); /* a count far beyond the bytes left */
    kiln__w_u32(&w, 5);       /* a string length beyond the limit */
    kiln__w_bytes(&w, "ab\0cd", 5);
    kiln__rbuf r;
    kiln__r_init(&r, w.p, w.n, "section");
    r.name = "LAYERS";
    r.unit = "file offset";
    r.base = 100;
    ASSERT_EQ(kiln__r_count(&r, 4, 1u << 30, "layer count"), 0);
    ASSERT_EQ(r.err, KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "section LAYERS (file offset 100): layer count: count 1000000");
    /* the first failure sticks: later reads return zeros and keep it */
    ASSERT_EQ(kiln__r_u32(&r, "other"), 0);
    ASSERT_CONTAINS(kiln_errmsg(), "layer count");

    kiln__r_init(&r, w.p, w.n, "blob");
    r.at = 4;
    ASSERT(kiln__r_str(&r, 4, 4, "name") == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "blob (offset 4): name: string length 5 exceeds 4");
    kiln__r_init(&r, w.p, w.n, "blob");
    r.at = 4;
    ASSERT(kiln__r_str(&r, 4, 64, "name") == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "name: string holds a NUL byte");

    kiln__r_init(&r, w.p, w.n, "blob");
    ASSERT_EQ(kiln__r_check(&r, 7, 0, 7, "index", 3), 0);
    ASSERT_CONTAINS(kiln_errmsg(), "blob (offset 3): index = 7, expected 0..6");
    kiln__r_init(&r, w.p, w.n, "blob");
    ASSERT_EQ(kiln__r_check(&r, 6, 0, 7, "index", 3), 1);
    ASSERT_EQ(r.err, 0);
    /* a huge length never becomes an allocation */
    kiln__r_init(&r, w.p, w.n, "blob");
    ASSERT(kiln__r_copy(&r, UINT64_MAX, "payload") == NULL);
    ASSERT_EQ(r.err, KILN_EFORMAT);
    kiln__free(w.p);
}

TEST_LIST(TEST_ENTRY(writer_is_little_endian), TEST_ENTRY(records_round_trip),
          TEST_ENTRY(fixed_buffer_measures_and_never_overruns), TEST_ENTRY(every_truncation_is_an_error),
          TEST_ENTRY(reader_checks_lengths_counts_and_ranges))
