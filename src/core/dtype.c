/*
 * dtype.c — element types, half/bfloat16 conversion, layouts, CPU signature.
 */
#include "kiln_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <strings.h>
#include <sys/utsname.h>

typedef struct dtype_info {
    const char *name;
    size_t size;
} dtype_info;

static const dtype_info g_dtypes[KILN_DTYPE_COUNT_] = {
    [KILN_DTYPE_UNDEFINED] = {"undefined", 0},
    [KILN_DTYPE_F32] = {"f32", 4},
    [KILN_DTYPE_U8] = {"u8", 1},
    [KILN_DTYPE_I8] = {"i8", 1},
    [KILN_DTYPE_U16] = {"u16", 2},
    [KILN_DTYPE_I16] = {"i16", 2},
    [KILN_DTYPE_I32] = {"i32", 4},
    [KILN_DTYPE_I64] = {"i64", 8},
    [KILN_DTYPE_STRING] = {"string", 0},
    [KILN_DTYPE_BOOL] = {"bool", 1},
    [KILN_DTYPE_F16] = {"f16", 2},
    [KILN_DTYPE_F64] = {"f64", 8},
    [KILN_DTYPE_U32] = {"u32", 4},
    [KILN_DTYPE_U64] = {"u64", 8},
    [KILN_DTYPE_BF16] = {"bf16", 2},
};

size_t kiln_dtype_size(kiln_dtype t) {
    if ((unsigned)t >= KILN_DTYPE_COUNT_) return 0;
    return g_dtypes[t].size;
}

const char *kiln_dtype_name(kiln_dtype t) {
    if ((unsigned)t >= KILN_DTYPE_COUNT_ || !g_dtypes[t].name) return "?";
    return g_dtypes[t].name;
}

/* Spellings accepted by kiln_dtype_parse, compared without case. */
static const struct {
    const char *s;
    kiln_dtype t;
} g_aliases[] = {
    {"fp32", KILN_DTYPE_F32},    {"float32", KILN_DTYPE_F32}, {"float", KILN_DTYPE_F32},
    {"fp16", KILN_DTYPE_F16},    {"float16", KILN_DTYPE_F16}, {"half", KILN_DTYPE_F16},
    {"fp64", KILN_DTYPE_F64},    {"float64", KILN_DTYPE_F64}, {"double", KILN_DTYPE_F64},
    {"bfloat16", KILN_DTYPE_BF16}, {"bf16", KILN_DTYPE_BF16},
    {"int8", KILN_DTYPE_I8},     {"int16", KILN_DTYPE_I16},   {"int32", KILN_DTYPE_I32},
    {"int64", KILN_DTYPE_I64},   {"uint8", KILN_DTYPE_U8},    {"uint16", KILN_DTYPE_U16},
    {"uint32", KILN_DTYPE_U32},  {"uint64", KILN_DTYPE_U64},  {"int", KILN_DTYPE_I32},
    {"long", KILN_DTYPE_I64},    {"boolean", KILN_DTYPE_BOOL},
};

kiln_dtype kiln_dtype_parse(const char *s) {
    if (!s || !*s) return KILN_DTYPE_UNDEFINED;
    for (int t = 1; t < KILN_DTYPE_COUNT_; t++)
        if (g_dtypes[t].name && strcasecmp(s, g_dtypes[t].name) == 0) return (kiln_dtype)t;
    for (size_t i = 0; i < sizeof g_aliases / sizeof g_aliases[0]; i++)
        if (strcasecmp(s, g_aliases[i].s) == 0) return g_aliases[i].t;
    return KILN_DTYPE_UNDEFINED;
}

/* ---------------------------------------------------------------- fp16 / bf16 */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Portable conversions (also used where the CPU lacks F16C; tests check
 * both paths against each other and an exhaustive reference). */
float kiln__f16_to_f32_soft(uint16_t h);
uint16_t kiln__f32_to_f16_soft(float f);

float kiln__f16_to_f32_soft(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t kiln__f32_to_f16_soft(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* inf / nan (nan stays quiet, payload top bits kept) */
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    }
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* rounds past 65504 */
    if (ax < 0x38800000u) {                       /* result subnormal or zero */
        if (ax <= 0x33000000u) return sign;       /* <= 2^-25: ties to even zero */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

#if defined(__F16C__)
#include <immintrin.h>
float kiln_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
uint16_t kiln_f32_to_f16(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#else
float kiln_f16_to_f32(uint16_t h) { return kiln__f16_to_f32_soft(h); }
uint16_t kiln_f32_to_f16(float f) { return kiln__f32_to_f16_soft(f); }
#endif

float kiln_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t kiln_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ---------------------------------------------------------------- formats */

static const char *const g_formats[KILN_FORMAT_COUNT_] = {"LINEAR", "NHWC", "NCHW8C", "NCHW16C"};

const char *kiln_format_name(kiln_format f) {
    if ((unsigned)f >= KILN_FORMAT_COUNT_) return "?";
    return g_formats[f];
}

int kiln_format_parse(const char *s, kiln_format *out) {
    if (!s) return KILN_EINVAL;
    for (int i = 0; i < KILN_FORMAT_COUNT_; i++)
        if (strcasecmp(s, g_formats[i]) == 0) {
            *out = (kiln_format)i;
            return 0;
        }
    if (strcasecmp(s, "NCHW") == 0 || strcasecmp(s, "ROWMAJOR") == 0 ||
        strcasecmp(s, "ROW_MAJOR") == 0) {
        *out = KILN_FORMAT_LINEAR;
        return 0;
    }
    return KILN_EINVAL;
}

/* ---------------------------------------------------------------- CPU signature */

static char g_cpu_sig[256];
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void cpu_sig_init(void) {
#if defined(__x86_64__) || defined(__i386__)
    size_t n = (size_t)snprintf(g_cpu_sig, sizeof g_cpu_sig, "%s:",
#if defined(__x86_64__)
                                "x86_64"
#else
                                "i386"
#endif
    );
    int first = 1;
    __builtin_cpu_init();
#define KILN__FLAG(f)                                                              \
    if (__builtin_cpu_supports(f) && n < sizeof g_cpu_sig) {                   \
        n += (size_t)snprintf(g_cpu_sig + n, sizeof g_cpu_sig - n, "%s%s", first ? "" : ",", f); \
        first = 0;                                                             \
    }
    KILN__FLAG("sse4.2")
    KILN__FLAG("avx")
    KILN__FLAG("avx2")
    KILN__FLAG("fma")
    KILN__FLAG("f16c")
    KILN__FLAG("avx512f")
    KILN__FLAG("avx512bw")
    KILN__FLAG("avx512vl")
    KILN__FLAG("avx512dq")
    KILN__FLAG("avx512vnni")
    KILN__FLAG("avx512bf16")
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
    KILN__FLAG("avx512fp16")
#endif
#undef KILN__FLAG
    (void)first;
#else
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(g_cpu_sig, sizeof g_cpu_sig, "%s:", u.machine);
    else
        snprintf(g_cpu_sig, sizeof g_cpu_sig, "unknown:");
#endif
}

const char *kiln_cpu_signature(void) {
    pthread_once(&g_cpu_once, cpu_sig_init);
    return g_cpu_sig;
}
