/*
 * test.h — the test harness (libuv style): declarative test lists, typed
 * assertions that print both values.  A failing assertion ends the test
 * process with status 1 after printing file:line; CTest reports it.
 *
 *   TEST_IMPL(expr_fold) { ASSERT_EQ(1 + 1, 2); }
 *   TEST_LIST(TEST_ENTRY(expr_fold), TEST_ENTRY(other))
 */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_IMPL(name) static void test_##name(void)
#define TEST_ENTRY(name) {#name, test_##name}

typedef struct test_entry {
    const char *name;
    void (*fn)(void);
} test_entry;

#define TEST__FAIL(...)                                                        \
    do {                                                                       \
        fprintf(stderr, "%s:%d: assertion failed: ", __FILE__, __LINE__);     \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        exit(1);                                                               \
    } while (0)

#define ASSERT(c)                                                              \
    do {                                                                       \
        if (!(c)) TEST__FAIL("%s", #c);                                        \
    } while (0)
#define ASSERT_EQ(a, b)                                                        \
    do {                                                                       \
        int64_t a_ = (int64_t)(a), b_ = (int64_t)(b);                          \
        if (a_ != b_)                                                          \
            TEST__FAIL("%s == %s (%" PRId64 " vs %" PRId64 ")", #a, #b, a_, b_); \
    } while (0)
#define ASSERT_NE(a, b)                                                        \
    do {                                                                       \
        int64_t a_ = (int64_t)(a), b_ = (int64_t)(b);                          \
        if (a_ == b_)                                                          \
            TEST__FAIL("%s != %s (both %" PRId64 ")", #a, #b, a_);              \
    } while (0)
#define ASSERT_NEAR(a, b, tol)                                                 \
    do {                                                                       \
        double a_ = (double)(a), b_ = (double)(b);                             \
        if (!(fabs(a_ - b_) <= (tol)))                                         \
            TEST__FAIL("%s ~= %s (%.9g vs %.9g, tol %g)", #a, #b, a_, b_,      \
                       (double)(tol));                                         \
    } while (0)
#define ASSERT_STR_EQ(a, b)                                                    \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                 \
            TEST__FAIL("%s == %s (\"%s\" vs \"%s\")", #a, #b, a_ ? a_ : "(null)", \
                       b_ ? b_ : "(null)");                                    \
    } while (0)
/* Haystack contains needle (for error messages). */
#define ASSERT_CONTAINS(hay, needle)                                           \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (!h_ || !strstr(h_, n_))                                            \
            TEST__FAIL("\"%s\" contains \"%s\"", h_ ? h_ : "(null)", n_);      \
    } while (0)
/* A kiln call that must succeed; prints kiln_errmsg() otherwise. */
#define ASSERT_OK(call)                                                        \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != 0) TEST__FAIL("%s -> %d: %s", #call, rc_, kiln_errmsg());   \
    } while (0)

/* How many lines of the text file at `path` contain `s` (a test fails if
 * the file cannot be opened). */
static inline int test_file_lines_with(const char *path, const char *s) {
    FILE *f = fopen(path, "rb");
    ASSERT(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, s) != NULL;
    fclose(f);
    return n;
}

/* Deterministic xorshift random numbers for test inputs. */
static inline uint64_t test_rand_u64(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}
/* Uniform in [lo, hi). */
static inline float test_randf(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((test_rand_u64(s) >> 40) / (double)(1ull << 24));
}

/* test_worst_rel(y, ref, n, worst): the largest |y - ref| / (1 + |ref|) of
 * n values, at least `worst`, for a float or double ref; a NaN (an output
 * left poisoned) makes it infinity for good, wherever it is. */
static inline double test__worst_rel(const float *y, const void *ref, int ref_f32, int64_t n, double worst) {
    for (int64_t i = 0; i < n; i++) {
        double r = ref_f32 ? ((const float *)ref)[i] : ((const double *)ref)[i];
        double err = fabs(y[i] - r) / (1 + fabs(r));
        if (!(err <= worst)) worst = err == err ? err : INFINITY;
    }
    return worst;
}
#define test_worst_rel(y, ref, n, worst) \
    test__worst_rel(y, ref, _Generic((ref), float *: 1, const float *: 1, default: 0), n, worst)

#define TEST_LIST(...)                                                         \
    int main(int argc, char **argv) {                                          \
        static const test_entry tests_[] = {__VA_ARGS__};                      \
        int n_ = (int)(sizeof tests_ / sizeof tests_[0]), ran_ = 0;            \
        for (int i_ = 0; i_ < n_; i_++) {                                      \
            if (argc > 1 && strcmp(argv[1], tests_[i_].name) != 0) continue;   \
            fprintf(stderr, "-- %s\n", tests_[i_].name);                       \
            tests_[i_].fn();                                                   \
            fprintf(stderr, "ok %s\n", tests_[i_].name);                       \
            ran_++;                                                            \
        }                                                                      \
        if (ran_ == 0) { fprintf(stderr, "no test ran\n"); return 1; }          \
        return 0;                                                              \
    }

#endif
