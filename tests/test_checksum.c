/*
 * test_checksum.c — the engine file checksum (engine/checksum.h, format 5)
 * against a plain reference written from the header's description: one
 * stripe, one word at a time, no SIMD, no streaming.  The library's value
 * (AVX-512 where the build has it) must equal the reference for lengths
 * around every boundary (stripe, 1 KiB block, chunk), the streamed value
 * must equal the one-shot one for pieces of random sizes, and a flipped
 * bit, two swapped words or two swapped stripes must change it.
 */
#include "engine/checksum.h"
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <stdlib.h>
#include <string.h>

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t word(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; /* little-endian */
    return v;
}
static uint64_t avalanche(uint64_t h) {
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}

/* key[0..128) for (stripe in block) * 8 + lane, key2[0..8) per lane */
static uint64_t key[136];
static void ref_keys(void) {
    uint64_t x = 0x243F6A8885A308D3ull;
    for (int i = 0; i < 136; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        key[i] = z ^ (z >> 31);
    }
}

static uint64_t ref_chunk(const uint8_t *p, size_t n, uint64_t idx) {
    uint64_t acc[8];
    for (int j = 0; j < 8; j++) acc[j] = key[128 + j] ^ (idx * P1 + (uint64_t)j);
    size_t ns = (n + 63) / 64;
    for (size_t s = 0; s < ns; s++) {
        uint8_t st[64] = {0}; /* the last stripe zero-padded */
        memcpy(st, p + 64 * s, n - 64 * s < 64 ? n - 64 * s : 64);
        for (int j = 0; j < 8; j++) {
            uint64_t w = word(st + 8 * j), d = w ^ key[(s % 16) * 8 + j];
            acc[j] += (d & 0xffffffffu) * (d >> 32);
            acc[j ^ 1] += w;
        }
        if (s % 16 == 15)
            for (int j = 0; j < 8; j++) acc[j] = (acc[j] ^ (acc[j] >> 47) ^ key[128 + j]) * 0x9E3779B1u;
    }
    uint64_t h = (uint64_t)n * P1 ^ idx * P4;
    for (int j = 0; j < 8; j++) h = rotl(h ^ (acc[j] * P2), 31) * P1 + P4;
    return avalanche(h);
}

static uint64_t ref_ck(const uint8_t *p, size_t n) {
    const size_t C = (size_t)1 << 20;
    uint64_t outer = 0x27D4EB2F165667C5ull;
    for (size_t at = 0, i = 0; at < n; at += C, i++)
        outer = rotl(outer ^ (ref_chunk(p + at, n - at < C ? n - at : C, i) * P2), 27) * P1 + P4;
    return avalanche(outer ^ (uint64_t)n * P3);
}

static uint8_t *g_buf;
static const size_t g_max = 3 * ((size_t)1 << 20) + 4099;

static void make(void) {
    if (g_buf) return;
    ref_keys();
    uint64_t seed = 0xc4ec5u;
    float *f = test_rnd_f32(&seed, (int64_t)(g_max / 4 + 1), -3, 3);
    g_buf = (uint8_t *)f;
}

TEST_IMPL(matches_reference) {
    make();
    const size_t C = (size_t)1 << 20;
    const size_t lens[] = {0, 1, 7, 8, 63, 64, 65, 1023, 1024, 1025, 4096 + 13, C - 1, C, C + 1,
                           C + 64, 2 * C + 1000, g_max};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        const uint64_t want = ref_ck(g_buf + i % 5, lens[i]), got = kiln__ck64(g_buf + i % 5, lens[i]);
        if (want != got)
            TEST__FAIL("length %zu (offset %zu): checksum %016llx, reference %016llx", lens[i], i % 5,
                       (unsigned long long)got, (unsigned long long)want);
        ASSERT_EQ(kiln__file_checksum(g_buf + i % 5, lens[i]), want);
    }
}

TEST_IMPL(streamed_equals_whole) {
    make();
    uint64_t seed = 77;
    for (int r = 0; r < 6; r++) {
        const size_t n = r == 0 ? g_max : (size_t)(test_rand_u64(&seed) % g_max);
        kiln__ck c;
        kiln__ck_begin(&c);
        for (size_t at = 0; at < n;) {
            /* pieces of 0..~200 KB, some tiny, some crossing chunk ends */
            size_t k = (size_t)(test_rand_u64(&seed) % (r % 2 ? 97 : 200000));
            if (k > n - at) k = n - at;
            kiln__ck_add(&c, g_buf + at, k);
            at += k;
        }
        ASSERT_EQ(kiln__ck_end(&c), kiln__ck64(g_buf, n));
    }
}

TEST_IMPL(damage_changes_it) {
    make();
    const size_t n = 2 * ((size_t)1 << 20) + 333;
    uint8_t *b = malloc(n);
    ASSERT(b);
    memcpy(b, g_buf, n);
    const uint64_t h = kiln__ck64(b, n);
    const size_t at[] = {0, 5, 63, 64, 1023, 1024, ((size_t)1 << 20) - 1, (size_t)1 << 20, n - 1};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            b[at[i]] ^= (uint8_t)(1u << bit);
            if (kiln__ck64(b, n) == h) TEST__FAIL("bit %d of byte %zu flipped: same checksum", bit, at[i]);
            b[at[i]] ^= (uint8_t)(1u << bit);
        }
    uint8_t t[64];
    memcpy(t, b + 8, 8); /* two words of one stripe */
    memcpy(b + 8, b + 16, 8);
    memcpy(b + 16, t, 8);
    ASSERT(kiln__ck64(b, n) != h);
    memcpy(b, g_buf, n);
    memcpy(t, b + 64 * 3, 64); /* two stripes of one block */
    memcpy(b + 64 * 3, b + 64 * 9, 64);
    memcpy(b + 64 * 9, t, 64);
    ASSERT(kiln__ck64(b, n) != h);
    memcpy(b, g_buf, n);
    ASSERT(kiln__ck64(b, n - 1) != h && kiln__ck64(b, n) == h);
    free(b);
}

TEST_LIST(TEST_ENTRY(matches_reference), TEST_ENTRY(streamed_equals_whole), TEST_ENTRY(damage_changes_it))
