/*
 * engine_fuzz.c — libFuzzer target for engine files: load, inspect, run.
 *
 * The harness first recomputes every checksum of the input (each section's
 * and the header's), so mutations reach the parser, the cross-checks and
 * the runtime instead of stopping at a checksum mismatch: the checksum is
 * no defence against a crafted file, the validation is.  Engines are
 * loaded with KILN_CODE_DENY (an engine with native code is trusted by
 * definition; see docs/AOT.md), then inspected and run once per input with
 * every input bound to deterministic data of its size (dynamic dims at the
 * profile's min and at a value taken from the input, within the profile);
 * an engine with CUDA layers is also loaded and run once on the stand-in
 * GPU (device/cuda/fake.c), so its device paths are reached on machines
 * without one.
 * Any crash, leak or sanitizer report is a bug; errors are the expected
 * result for most inputs.  Build and run with fuzz/build.sh.
 *
 * The same file, built with -DKILN_ENGINE_FUZZ_MAIN, is a plain program
 * that runs the target once on each file named on its command line (the
 * regression test of kept crash inputs, tests/engines_crafted/).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

/* engine/file.c (kiln_int.h): checksums of an image patched on purpose made consistent again */
void kiln__file_reseal(uint8_t *p, size_t n);
unsigned kiln__file_version(void);
void kiln__cuda_fake(int on);

static uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t ld64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* The image with this machine's CPU signature in place of its own (NULL
 * if the header is too broken to move), checksums recomputed.  Engines
 * carry the signature of the machine that built them; this lets seeds and
 * crash inputs travel between machines (the GPU machine's fuzz runs, this
 * repository's tests/engines_crafted/).  Engines load without native
 * code here, so the signature selects no code: the kernels are those of
 * this binary.  The table grows
 * by a multiple of 64 bytes when the signature is longer: sections stay
 * 64-byte aligned. */
static uint8_t *resign(const uint8_t *p, size_t n, size_t *out_n) {
    if (n < 40) return NULL;
    uint32_t hsize = ld32(p + 12), nsec = ld32(p + 20), siglen = ld32(p + 24);
    if (siglen > 4096 || nsec > 64 || hsize > n || 40 + ((siglen + 7u) & ~7u) + 32 * (size_t)nsec != hsize)
        return NULL;
    const char *here = kiln_cpu_signature();
    size_t hl = strlen(here), nh = 40 + ((hl + 7) & ~(size_t)7) + 32 * (size_t)nsec;
    size_t delta = nh > hsize ? (nh - hsize + 63) & ~(size_t)63 : 0;
    uint8_t *q = calloc(n + delta, 1);
    if (!q) return NULL;
    memcpy(q, p, 40);
    st32(q + 12, (uint32_t)nh);
    st32(q + 24, (uint32_t)hl);
    memcpy(q + 40, here, hl);
    memcpy(q + nh - 32 * (size_t)nsec, p + hsize - 32 * (size_t)nsec, 32 * (size_t)nsec);
    for (uint32_t i = 0; i < nsec; i++) {
        uint8_t *ent = q + nh - 32 * (size_t)nsec + 32 * (size_t)i;
        st64(ent + 8, ld64(ent + 8) + delta);
    }
    memcpy(q + hsize + delta, p + hsize, n - hsize);
    *out_n = n + delta;
    kiln__file_reseal(q, *out_n);
    return q;
}

/* Deterministic, varied data: small integers (valid indices and shapes
 * are likely) mixed with other values. */
static void fill(uint8_t *b, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (uint8_t)((seed >> 16) % 7 == 0 ? seed >> 24 : (seed >> 16) & 3);
    }
}

/* Inputs above this are not run (slow under ASan, not more interesting). */
#define MAX_BYTES (256u << 10)

/* KILN_FUZZ_VERBOSE=1: say where each input stopped (replaying crashes). */
static int g_verbose;
static void note(const char *what, int rc) {
    if (g_verbose && rc) fprintf(stderr, "engine_fuzz: %s: %s\n", what, kiln_errmsg());
}

static void run_once(kiln_engine *e, const uint8_t *data, size_t size, int use_min) {
    kiln_context *c = NULL;
    int rc = kiln_context_create(e, 1, &c);
    note("context", rc);
    if (rc) return;
    int ni = kiln_engine_num_inputs(e), no = kiln_engine_num_outputs(e);
    void **bufs = calloc((size_t)ni + 1, sizeof *bufs);
    for (int i = 0; i < ni && bufs; i++) {
        kiln_io_info info;
        if (kiln_engine_io(e, i, &info)) goto out;
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < info.ndim; d++) {
            dims[d] = info.dims[d];
            if (dims[d] >= 0) continue;
            int64_t lo = info.min[d] > 0 ? info.min[d] : 0, hi = info.max[d];
            dims[d] = lo;
            if (!use_min && hi > lo && size) dims[d] = lo + data[(size_t)(i * 8 + d) % size] % (hi - lo + 1);
        }
        if (kiln_context_set_input_shape(c, info.name, info.ndim, dims)) goto out;
        size_t bytes = kiln_dtype_size(info.dtype);
        for (int d = 0; d < info.ndim; d++) {
            if (dims[d] < 0 || (dims[d] && bytes > MAX_BYTES / (uint64_t)dims[d])) goto out;
            bytes *= (size_t)dims[d];
        }
        bufs[i] = malloc(bytes ? bytes : 1);
        if (!bufs[i]) goto out;
        fill(bufs[i], bytes, (uint32_t)(size * 31 + (size_t)i));
        if (kiln_context_bind(c, info.name, bytes ? bufs[i] : NULL, bytes)) goto out;
    }
    rc = kiln_context_run(c);
    note("run", rc);
    if (rc == 0) {
        /* Read each output's first and last bytes, so a short buffer shows
         * up under ASan. */
        volatile uint8_t sink = 0;
        for (int k = 0; k < no; k++) {
            kiln_io_info info;
            size_t cap = 0;
            if (kiln_engine_io(e, ni + k, &info) || kiln_context_output_capacity(c, info.name, &cap))
                continue;
            int nd = 0;
            int64_t dims[KILN_MAX_DIMS];
            if (kiln_context_shape(c, info.name, &nd, dims)) continue;
            const uint8_t *o = kiln_context_output(c, info.name);
            size_t bytes = kiln_dtype_size(info.dtype);
            for (int d = 0; d < nd; d++) bytes *= (size_t)dims[d];
            if (bytes > cap) bytes = cap;
            for (size_t j = 0; o && j < bytes && j < 64; j++) sink ^= o[j] ^ o[bytes - 1 - j];
        }
        (void)sink;
    }
out:
    for (int i = 0; i < ni && bufs; i++) free(bufs[i]);
    free(bufs);
    kiln_context_free(c);
}

/* kiln's allocations above this fail (a clean KILN_ENOMEM is the expected
 * result): a crafted engine may legitimately ask for all of this machine's
 * memory, which is not worth exercising.  libFuzzer's -malloc_limit_mb
 * still reports any larger allocation made around kiln's allocator. */
#define MAX_ALLOC ((size_t)64 << 20)
static void *cap_malloc(size_t n) { return n > MAX_ALLOC ? NULL : malloc(n); }
static void *cap_realloc(void *p, size_t n) { return n > MAX_ALLOC ? NULL : realloc(p, n); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int once;
    if (!once) {
        once = 1;
        kiln_set_allocator(cap_malloc, cap_realloc, free);
        kiln_log_set(KILN_LOG_ERROR, NULL, NULL);
        g_verbose = getenv("KILN_FUZZ_VERBOSE") ? atoi(getenv("KILN_FUZZ_VERBOSE")) : 0;
    }
    uint8_t *img = malloc(size ? size : 1);
    if (!img) return 0;
    memcpy(img, data, size);
    kiln__file_reseal(img, size);
    size_t isz = size; /* the image's (resign may grow it) */
    kiln_load_options opt = {.code = KILN_CODE_DENY};
    kiln_engine *e = NULL;
    int rc = kiln_engine_load_memory_ex(img, size, &opt, &e);
    note("load", rc);
    if (rc == KILN_EDEVICE && strstr(kiln_errmsg(), "engine built for device")) {
        /* made on another machine: load it as if made here */
        size_t n2 = 0;
        uint8_t *img2 = resign(img, size, &n2);
        if (img2) {
            rc = kiln_engine_load_memory_ex(img2, n2, &opt, &e);
            note("load (with this machine's signature)", rc);
            free(img);
            img = img2;
            isz = n2;
        }
    }
    if (rc) {
        free(img);
        return 0;
    }
    /* KILN_FUZZ_VERBOSE=2 shows the engine (replaying a crash) */
    FILE *null = g_verbose > 1 ? stderr : fopen("/dev/null", "w");
    if (null) {
        kiln_engine_inspect(e, null);
        if (null != stderr) fclose(null);
    }
    run_once(e, data, size, 1);
    run_once(e, data, size, 0);
    int gpu = 0;
    kiln_engine_placement(e, &gpu, NULL);
    kiln_engine_free(e);
    if (gpu) {
        /* CUDA layers: without a GPU the context stops at "no CUDA device";
         * on the stand-in GPU (host memory; built-in launchers fail
         * cleanly) loading, planning, copies and epilogue preparation run. */
        kiln__cuda_fake(1);
        rc = kiln_engine_load_memory_ex(img, isz, &opt, &e);
        note("load (stand-in GPU)", rc);
        if (!rc) {
            run_once(e, data, size, 1);
            kiln_engine_free(e);
        }
        kiln__cuda_fake(0);
    }
    free(img);
    return 0;
}

#ifdef KILN_ENGINE_FUZZ_MAIN
/* Replay: each file once; exit 0 unless a sanitizer or a crash stops it. */
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "cannot open %s\n", argv[i]);
            return 2;
        }
        uint8_t *b = NULL;
        size_t n = 0, cap = 0;
        for (;;) {
            if (n == cap && !(b = realloc(b, cap = cap ? 2 * cap : 65536))) return 2;
            size_t k = fread(b + n, 1, cap - n, f);
            if (!k) break;
            n += k;
        }
        fclose(f);
        /* Kept inputs from older format versions are stamped with this
         * one (the harness reseals the checksums): every bump since 2 only
         * added optional sections or changed checksums or the meaning of
         * values such files do not hold, so they still reach the code they
         * once crashed instead of stopping at the version check. */
        if (n >= 12) st32(b + 8, kiln__file_version());
        LLVMFuzzerTestOneInput(b, n);
        free(b);
    }
    printf("%d engine files replayed\n", argc - 1);
    return 0;
}
#endif
