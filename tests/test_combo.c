/* test_combo.c — the type/layout combination grammar. */
#include "kiln_int.h"
#include "test.h"

static kiln_io_format out_[1024];

/* Is (types..., formats...) among the first n expanded rows? */
static int has(int n, int nio, const kiln_dtype *t, const kiln_format *f) {
    for (int i = 0; i < n; i++) {
        int ok = out_[i].n == nio;
        for (int p = 0; ok && p < nio; p++)
            ok = out_[i].dtype[p] == t[p] && out_[i].format[p] == (f ? f[p] : KILN_FORMAT_LINEAR);
        if (ok) return 1;
    }
    return 0;
}

TEST_IMPL(combo_tied) {
    int n = kiln_combo_expand("FP32|FP16, FP32|FP16, FP32|FP16", NULL, 3, out_, 1024);
    ASSERT_EQ(n, 2);
    ASSERT(has(n, 3, (kiln_dtype[]){KILN_DTYPE_F32, KILN_DTYPE_F32, KILN_DTYPE_F32}, NULL));
    ASSERT(has(n, 3, (kiln_dtype[]){KILN_DTYPE_F16, KILN_DTYPE_F16, KILN_DTYPE_F16}, NULL));
    /* a fixed slot among tied ones */
    n = kiln_combo_expand("FP32|FP16, INT64, FP32|FP16", NULL, 3, out_, 1024);
    ASSERT_EQ(n, 2);
    ASSERT(has(n, 3, (kiln_dtype[]){KILN_DTYPE_F16, KILN_DTYPE_I64, KILN_DTYPE_F16}, NULL));
    ASSERT(!has(n, 3, (kiln_dtype[]){KILN_DTYPE_F16, KILN_DTYPE_I64, KILN_DTYPE_F32}, NULL));
    /* tied with three alternatives, different per slot */
    n = kiln_combo_expand("FP32|FP16|INT8, INT64|INT32|INT32", NULL, 2, out_, 1024);
    ASSERT_EQ(n, 3);
    ASSERT(has(n, 2, (kiln_dtype[]){KILN_DTYPE_I8, KILN_DTYPE_I32}, NULL));
    ASSERT(has(n, 2, (kiln_dtype[]){KILN_DTYPE_F32, KILN_DTYPE_I64}, NULL));
}

TEST_IMPL(combo_independent) {
    int n = kiln_combo_expand("FP32*FP16, FP32*FP16, FP32", NULL, 3, out_, 1024);
    ASSERT_EQ(n, 4);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            kiln_dtype t[3] = {a ? KILN_DTYPE_F16 : KILN_DTYPE_F32, b ? KILN_DTYPE_F16 : KILN_DTYPE_F32,
                               KILN_DTYPE_F32};
            ASSERT(has(n, 3, t, NULL));
        }
    /* tied x independent */
    n = kiln_combo_expand("FP32|FP16, INT32*INT64, FP32|FP16", NULL, 3, out_, 1024);
    ASSERT_EQ(n, 4);
    ASSERT(has(n, 3, (kiln_dtype[]){KILN_DTYPE_F16, KILN_DTYPE_I64, KILN_DTYPE_F16}, NULL));
    ASSERT(!has(n, 3, (kiln_dtype[]){KILN_DTYPE_F16, KILN_DTYPE_I64, KILN_DTYPE_F32}, NULL));
    /* duplicates removed */
    n = kiln_combo_expand("FP32*FP32, FP16", NULL, 2, out_, 1024);
    ASSERT_EQ(n, 1);
}

TEST_IMPL(combo_broadcast) {
    int n = kiln_combo_expand("FP32|FP16", NULL, 4, out_, 1024);
    ASSERT_EQ(n, 2);
    ASSERT(has(n, 4, (kiln_dtype[]){KILN_DTYPE_F16, KILN_DTYPE_F16, KILN_DTYPE_F16, KILN_DTYPE_F16}, NULL));
    n = kiln_combo_expand("fp32", NULL, 3, out_, 1024);
    ASSERT_EQ(n, 1);
    ASSERT(has(n, 3, (kiln_dtype[]){KILN_DTYPE_F32, KILN_DTYPE_F32, KILN_DTYPE_F32}, NULL));
    /* every spelling of the documented types */
    const char *names[] = {"FP32", "FP16", "BF16", "FP64", "INT8", "INT32", "INT64", "UINT8", "BOOL", "float16", "i64"};
    kiln_dtype want[] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_BF16, KILN_DTYPE_F64, KILN_DTYPE_I8,
                         KILN_DTYPE_I32, KILN_DTYPE_I64, KILN_DTYPE_U8,  KILN_DTYPE_BOOL, KILN_DTYPE_F16,
                         KILN_DTYPE_I64};
    for (int i = 0; i < 11; i++) {
        ASSERT_EQ(kiln_combo_expand(names[i], NULL, 1, out_, 1024), 1);
        ASSERT_EQ(out_[0].dtype[0], want[i]);
    }
}

TEST_IMPL(combo_layouts) {
    int n = kiln_combo_expand("FP32|FP16, FP32|FP16", "LINEAR|NHWC, LINEAR|NHWC", 2, out_, 1024);
    ASSERT_EQ(n, 4);
    ASSERT(has(n, 2, (kiln_dtype[]){KILN_DTYPE_F16, KILN_DTYPE_F16},
               (kiln_format[]){KILN_FORMAT_NHWC, KILN_FORMAT_NHWC}));
    ASSERT(has(n, 2, (kiln_dtype[]){KILN_DTYPE_F32, KILN_DTYPE_F32},
               (kiln_format[]){KILN_FORMAT_LINEAR, KILN_FORMAT_LINEAR}));
    ASSERT(!has(n, 2, (kiln_dtype[]){KILN_DTYPE_F32, KILN_DTYPE_F32},
                (kiln_format[]){KILN_FORMAT_LINEAR, KILN_FORMAT_NHWC}));
    n = kiln_combo_expand("FP32", "NCHW16C*NCHW, NCHW8C", 2, out_, 1024);
    ASSERT_EQ(n, 2);
    ASSERT(has(n, 2, (kiln_dtype[]){KILN_DTYPE_F32, KILN_DTYPE_F32},
               (kiln_format[]){KILN_FORMAT_NCHW16C, KILN_FORMAT_NCHW8C}));
    ASSERT(has(n, 2, (kiln_dtype[]){KILN_DTYPE_F32, KILN_DTYPE_F32},
               (kiln_format[]){KILN_FORMAT_LINEAR, KILN_FORMAT_NCHW8C}));
    /* NULL and "" layouts = LINEAR */
    n = kiln_combo_expand("FP32", "", 2, out_, 1024);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(out_[0].format[1], KILN_FORMAT_LINEAR);
}

TEST_IMPL(combo_errors) {
    ASSERT_EQ(kiln_combo_expand("FP32|FP16, FP32|FP16|INT8", NULL, 2, out_, 1024), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "slot 2");
    ASSERT_CONTAINS(kiln_errmsg(), "column 12");
    ASSERT_EQ(kiln_combo_expand("FP32, FP33", NULL, 2, out_, 1024), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "'FP33'");
    ASSERT_CONTAINS(kiln_errmsg(), "column 7");
    ASSERT_EQ(kiln_combo_expand("FP32, FP32, FP32", NULL, 2, out_, 1024), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "3 slots");
    ASSERT_EQ(kiln_combo_expand("FP32|FP16*INT8", NULL, 1, out_, 1024), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "mixes");
    ASSERT_EQ(kiln_combo_expand("FP32,", NULL, 2, out_, 1024), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "column 6");
    ASSERT_EQ(kiln_combo_expand("FP32", "LINEAR, NWHC", 2, out_, 1024), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "'NWHC'");
    ASSERT_EQ(kiln_combo_expand("FP32 FP16", NULL, 1, out_, 1024), KILN_EINVAL);
    ASSERT_EQ(kiln_combo_expand("", NULL, 1, out_, 1024), KILN_EINVAL);
    ASSERT_EQ(kiln_combo_expand("FP32", NULL, 0, out_, 1024), KILN_EINVAL);
    /* not enough room */
    ASSERT_EQ(kiln_combo_expand("FP32*FP16, FP32*FP16", NULL, 2, out_, 3), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "room for 3");
    /* count only */
    ASSERT_EQ(kiln_combo_expand("FP32*FP16, FP32*FP16", NULL, 2, NULL, 0), 4);
    /* exponential blow-up is refused, not allocated */
    ASSERT_EQ(kiln_combo_expand("FP32*FP16*INT8*INT32", NULL, 40, NULL, 0), KILN_EINVAL);
}

/* Random grammar strings against a naive expansion done here. */
TEST_IMPL(combo_random) {
    static const char *tn[] = {"FP32", "FP16", "INT32", "INT64"};
    static const kiln_dtype tv[] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_I32, KILN_DTYPE_I64};
    uint64_t seed = 99;
    for (int it = 0; it < 300; it++) {
        int nio = 1 + (int)(test_rand_u64(&seed) % 4);
        int tied_k = 1 + (int)(test_rand_u64(&seed) % 3);
        char str[512];
        size_t off = 0;
        int kind[4], nalt[4], alt[4][3];
        for (int p = 0; p < nio; p++) {
            kind[p] = (int)(test_rand_u64(&seed) % 3); /* 0 fixed, 1 tied, 2 indep */
            nalt[p] = kind[p] == 0 ? 1 : kind[p] == 1 ? tied_k : 1 + (int)(test_rand_u64(&seed) % 3);
            if (kind[p] == 1 && tied_k == 1) kind[p] = 0;
            for (int a = 0; a < nalt[p]; a++) {
                alt[p][a] = (int)(test_rand_u64(&seed) % 4);
                off += (size_t)snprintf(str + off, sizeof str - off, "%s%s", a ? (kind[p] == 1 ? "|" : "*") : "",
                                        tn[alt[p][a]]);
            }
            if (p + 1 < nio) off += (size_t)snprintf(str + off, sizeof str - off, ", ");
        }
        if (nio == 1) continue; /* single slot broadcast covered elsewhere */
        int n = kiln_combo_expand(str, NULL, nio, out_, 1024);
        ASSERT(n > 0);
        /* naive: enumerate tied index x all independent choices */
        int naive = 0;
        kiln_dtype rows[256][4];
        int ties = 1;
        for (int p = 0; p < nio; p++)
            if (kind[p] == 1) ties = tied_k;
        for (int t = 0; t < ties; t++) {
            int ctr[4] = {0};
            for (;;) {
                kiln_dtype r[4];
                for (int p = 0; p < nio; p++)
                    r[p] = tv[alt[p][kind[p] == 1 ? t : kind[p] == 2 ? ctr[p] : 0]];
                int dup = 0;
                for (int k = 0; k < naive && !dup; k++) dup = !memcmp(rows[k], r, sizeof(kiln_dtype) * (size_t)nio);
                if (!dup) memcpy(rows[naive++], r, sizeof r);
                int p = nio - 1;
                for (; p >= 0; p--) {
                    if (kind[p] != 2) continue;
                    if (++ctr[p] < nalt[p]) break;
                    ctr[p] = 0;
                }
                if (p < 0) break;
            }
        }
        if (n != naive) TEST__FAIL("\"%s\": %d combinations, naive %d", str, n, naive);
        for (int k = 0; k < naive; k++) ASSERT(has(n, nio, rows[k], NULL));
    }
}

TEST_LIST(TEST_ENTRY(combo_tied), TEST_ENTRY(combo_independent), TEST_ENTRY(combo_broadcast),
          TEST_ENTRY(combo_layouts), TEST_ENTRY(combo_errors), TEST_ENTRY(combo_random))
