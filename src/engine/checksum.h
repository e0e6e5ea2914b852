/*
 * checksum.h — the 64-bit checksum of engine files (format version 5).
 *
 * A section's bytes are cut into chunks of KILN__CK_CHUNK bytes (the last
 * may be shorter); each chunk is hashed on its own (kiln__ck_chunk: its
 * bytes, its length and its index), and the chunk hashes are folded in
 * order (kiln__ck_fold) and finished with the total length
 * (kiln__ck_final).  Chunks make the check of a large mapped section
 * parallel (data_check.c hashes them on the running context's threads);
 * kiln__ck_begin/add/end gives the same value streamed from pieces of any
 * size (the save path: header, buffers, bulk weights from where they lie).
 *
 * Within a chunk: 64-byte stripes over 8 lanes of 64 bits; each word w of
 * lane j adds lo32(w ^ key) * hi32(w ^ key) to lane j and w to lane j ^ 1,
 * the key depending on the stripe's place in its 1 KiB block and on the
 * lane; after each block every lane is scrambled (shift-xor, multiply).
 * A 32x32-bit multiply per word (no 64-bit one) is what AVX-512 does 8 at
 * a time: ~8 GB/s on one core of this machine against ~4.5 GB/s for the
 * 4-lane xxh64-style hash of format 4.  The scalar code computes the same
 * value.  It detects damage, not forgery (signatures do that: trust.c).
 */
#ifndef KILN_ENGINE_CHECKSUM_H
#define KILN_ENGINE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#define KILN__CK_CHUNK ((size_t)1 << 20)

/* The little-endian u64 at p (any alignment). */
static inline uint64_t kiln__ld64le(const uint8_t *p) {
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

uint64_t kiln__ck_chunk(const uint8_t *p, size_t n, uint64_t index);
uint64_t kiln__ck_fold(uint64_t outer, uint64_t chunk_hash);
uint64_t kiln__ck_final(uint64_t outer, uint64_t total);
#define KILN__CK_OUTER0 0x27D4EB2F165667C5ull

/* Streamed: begin, add any number of pieces, end. */
typedef struct kiln__ck {
    uint64_t acc[8];
    uint64_t outer, total, index;
    size_t pos; /* bytes of the current chunk so far */
    uint8_t tail[64];
    size_t ntail; /* bytes of an incomplete stripe */
} kiln__ck;
void kiln__ck_begin(kiln__ck *c);
void kiln__ck_add(kiln__ck *c, const uint8_t *p, size_t n);
uint64_t kiln__ck_end(kiln__ck *c);

/* All of p[0..n) at once. */
uint64_t kiln__ck64(const uint8_t *p, size_t n);

#endif
