/*
 * test_timing_cache.h — tests that set the times in a timing cache file
 * (kiln_build_config_set_timing_cache), so that a builder decision does not
 * depend on how fast this machine ran the candidates: build once with the
 * cache (it then holds every key the next build reads), rewrite the times,
 * build again (nothing timed).
 */
#ifndef KILN_TEST_TIMING_CACHE_H
#define KILN_TEST_TIMING_CACHE_H

#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The timing cache file at path into text (NUL-terminated), and back. */
static char g_cache_text[1 << 16], g_cache_out[1 << 16];
static void cache_read(const char *path) {
    FILE *f = fopen(path, "rb");
    ASSERT(f);
    size_t n = fread(g_cache_text, 1, sizeof g_cache_text - 1, f);
    fclose(f);
    g_cache_text[n] = 0;
}
static void cache_write(const char *path, size_t o) {
    FILE *f = fopen(path, "wb");
    ASSERT(f);
    ASSERT_EQ(fwrite(g_cache_out, 1, o, f), o);
    fclose(f);
}

/* The timing cache file at path with every time of a key holding `op`
 * replaced: ms_16c where the key also holds "NCHW16C", else ms_linear. */
static void cache_set(const char *path, const char *op, double ms_linear, double ms_16c) {
    char *text = g_cache_text, *out = g_cache_out;
    size_t o = 0, cap = sizeof g_cache_out;
    cache_read(path);
    int hit = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *key = strchr(line, ' ');
        if (key && strstr(key, op) && strtod(line, NULL) >= 0) {
            o += (size_t)snprintf(out + o, cap - o, "%.17g%s\n", strstr(key, "NCHW16C") ? ms_16c : ms_linear, key);
            hit++;
        } else {
            o += (size_t)snprintf(out + o, cap - o, "%s\n", line);
        }
        ASSERT(o < cap);
    }
    ASSERT(hit > 0);
    cache_write(path, o);
}

#endif /* KILN_TEST_TIMING_CACHE_H */
