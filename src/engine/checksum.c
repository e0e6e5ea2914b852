/*
 * checksum.c — the engine file checksum (checksum.h describes it).
 */
#include "engine/checksum.h"

#include <pthread.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define M32 0x9E3779B1u

/* key[16 * 8]: per stripe of a block and lane; key2[8]: per lane (the
 * scramble, the start).  A splitmix64 sequence: fixed, so part of the
 * format. */
static uint64_t key[128], key2[8];
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void make_keys(void) {
    uint64_t x = 0x243F6A8885A308D3ull;
    for (int i = 0; i < 136; i++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        if (i < 128) key[i] = z;
        else key2[i - 128] = z;
    }
}

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t avalanche(uint64_t h) {
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}

static void stripe_scalar(uint64_t *acc, const uint8_t *p, size_t s) {
    const uint64_t *k = key + (s & 15) * 8;
    for (int j = 0; j < 8; j++) {
        const uint64_t w = kiln__ld64le(p + 8 * j), d = w ^ k[j];
        acc[j] += (d & 0xffffffffu) * (d >> 32);
        acc[j ^ 1] += w;
    }
    if ((s & 15) == 15)
        for (int j = 0; j < 8; j++) acc[j] = (acc[j] ^ (acc[j] >> 47) ^ key2[j]) * M32;
}

/* ns stripes at p, the first being stripe s0 of its chunk. */
static void stripes(uint64_t *acc, const uint8_t *p, size_t ns, size_t s0) {
    size_t t = 0;
#if defined(__AVX512F__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (ns >= 16) {
        __m512i a = _mm512_loadu_si512(acc);
        const __m512i k2 = _mm512_loadu_si512(key2), m = _mm512_set1_epi64(M32);
        for (; t < ns; t++) {
            const size_t row = (s0 + t) & 15;
            const __m512i w = _mm512_loadu_si512(p + 64 * t), d = _mm512_xor_si512(w, _mm512_loadu_si512(key + 8 * row));
            a = _mm512_add_epi64(a, _mm512_mul_epu32(d, _mm512_srli_epi64(d, 32)));
            a = _mm512_add_epi64(a, _mm512_shuffle_epi32(w, _MM_PERM_BADC)); /* lane j ^ 1 */
            if (row == 15) {
                a = _mm512_xor_si512(_mm512_xor_si512(a, _mm512_srli_epi64(a, 47)), k2);
                /* a * M32 mod 2^64 from 32x32-bit products */
                a = _mm512_add_epi64(_mm512_mul_epu32(a, m),
                                     _mm512_slli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), m), 32));
            }
        }
        _mm512_storeu_si512(acc, a);
    }
#endif
    for (; t < ns; t++) stripe_scalar(acc, p + 64 * t, s0 + t);
}

static void chunk_start(uint64_t *acc, uint64_t index) {
    pthread_once(&key_once, make_keys);
    for (int j = 0; j < 8; j++) acc[j] = key2[j] ^ (index * P1 + (uint64_t)j);
}

/* The chunk's hash from its lanes, after its n bytes; tail: its last
 * n % 64 bytes. */
static uint64_t chunk_end(uint64_t *acc, const uint8_t *tail, size_t n, uint64_t index) {
    if (n % 64) {
        uint8_t last[64] = {0};
        memcpy(last, tail, n % 64);
        stripe_scalar(acc, last, n / 64);
    }
    uint64_t h = (uint64_t)n * P1 ^ index * P4;
    for (int j = 0; j < 8; j++) h = rotl64(h ^ (acc[j] * P2), 31) * P1 + P4;
    return avalanche(h);
}

uint64_t kiln__ck_chunk(const uint8_t *p, size_t n, uint64_t index) {
    uint64_t acc[8];
    chunk_start(acc, index);
    stripes(acc, p, n / 64, 0);
    return chunk_end(acc, p + n / 64 * 64, n, index);
}

uint64_t kiln__ck_fold(uint64_t outer, uint64_t chunk_hash) { return rotl64(outer ^ (chunk_hash * P2), 27) * P1 + P4; }

uint64_t kiln__ck_final(uint64_t outer, uint64_t total) { return avalanche(outer ^ total * P3); }

void kiln__ck_begin(kiln__ck *c) {
    memset(c, 0, sizeof *c);
    c->outer = KILN__CK_OUTER0;
    chunk_start(c->acc, 0);
}

void kiln__ck_add(kiln__ck *c, const uint8_t *p, size_t n) {
    c->total += n;
    while (n) {
        size_t take = KILN__CK_CHUNK - c->pos < n ? KILN__CK_CHUNK - c->pos : n;
        const size_t take0 = take;
        if (c->ntail) {
            size_t k = 64 - c->ntail < take ? 64 - c->ntail : take;
            memcpy(c->tail + c->ntail, p, k);
            c->ntail += k;
            p += k;
            take -= k;
            if (c->ntail == 64) {
                stripes(c->acc, c->tail, 1, c->pos / 64);
                c->ntail = 0;
            }
        }
        if (!c->ntail) {
            const size_t whole = take / 64;
            /* c->pos + bytes before p in this step is where p's stripes start */
            stripes(c->acc, p, whole, (c->pos + (take0 - take)) / 64);
            p += whole * 64;
            memcpy(c->tail, p, take - whole * 64);
            c->ntail = take - whole * 64;
            p += c->ntail;
        }
        c->pos += take0;
        n -= take0;
        if (c->pos == KILN__CK_CHUNK) {
            c->outer = kiln__ck_fold(c->outer, chunk_end(c->acc, c->tail, c->pos, c->index));
            chunk_start(c->acc, ++c->index);
            c->pos = 0;
        }
    }
}

uint64_t kiln__ck_end(kiln__ck *c) {
    if (c->pos) c->outer = kiln__ck_fold(c->outer, chunk_end(c->acc, c->tail, c->pos, c->index));
    return kiln__ck_final(c->outer, c->total);
}

uint64_t kiln__ck64(const uint8_t *p, size_t n) {
    uint64_t outer = KILN__CK_OUTER0;
    for (size_t at = 0, i = 0; at < n; at += KILN__CK_CHUNK, i++)
        outer = kiln__ck_fold(outer, kiln__ck_chunk(p + at, n - at < KILN__CK_CHUNK ? n - at : KILN__CK_CHUNK, i));
    return kiln__ck_final(outer, n);
}
