/*
 * test_engine_util.h — patching engine files in tests: find a section in
 * the table and re-seal the checksums after a deliberate edit, as a
 * tamperer would (layout: src/engine/file.c; header, then a table of
 * 32-byte entries {u32 id, u32 0, u64 offset, u64 size, u64 checksum});
 * what kiln inspect prints for an engine.
 */
#ifndef KILN_TEST_ENGINE_UTIL_H
#define KILN_TEST_ENGINE_UTIL_H

#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

uint64_t kiln__file_checksum(const void *p, size_t n);

/* The table entry of section `want` in image p; its offset and size. */
static inline uint8_t *test_file_section(uint8_t *p, uint32_t want, uint64_t *off, uint64_t *size) {
    uint32_t siglen, nsec;
    memcpy(&nsec, p + 20, 4);
    memcpy(&siglen, p + 24, 4);
    size_t table = 40 + ((siglen + 7u) & ~7u);
    for (uint32_t i = 0; i < nsec; i++) {
        uint8_t *ent = p + table + 32 * i;
        uint32_t id;
        memcpy(&id, ent, 4);
        if (id != want) continue;
        memcpy(off, ent + 8, 8);
        memcpy(size, ent + 16, 8);
        return ent;
    }
    TEST__FAIL("no section %u", want);
    return NULL;
}

/* Recompute section id's checksum and the header's after an edit. */
static inline void test_file_reseal(uint8_t *p, uint32_t id) {
    uint64_t off, size;
    uint8_t *ent = test_file_section(p, id, &off, &size);
    uint64_t ck = kiln__file_checksum(p + off, (size_t)size);
    memcpy(ent + 24, &ck, 8);
    uint32_t hsize;
    memcpy(&hsize, p + 12, 4);
    memset(p + 32, 0, 8);
    uint64_t h = kiln__file_checksum(p, hsize);
    memcpy(p + 32, &h, 8);
}

/* What kiln_engine_inspect prints for e (malloc'd). */
static inline char *test_inspect_text(const kiln_engine *e) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ASSERT(f);
    ASSERT_OK(kiln_engine_inspect(e, f));
    fclose(f);
    return text;
}

#endif /* KILN_TEST_ENGINE_UTIL_H */
