/*
 * packed_only.c — constants an engine file stores only in packed form.
 *
 * A built-in op's constant input that the engine also holds packed
 * (section PACKED) would otherwise be stored twice: raw in WEIGHTS and in
 * the form the kernel runs.  For ResNet-50 that was 97 MiB raw next to
 * 132 MiB packed (Winograd's transformed 3x3 weights are 4x the raw ones),
 * a 241 MB file.  A constant whose every reader is such a packed input
 * needs no raw copy, as long as the kernels never read in[k].data when
 * c->prepacked[k] is set.  That holds for most paths but not all (a
 * matrix-vector shape streams the raw matrix), so the builder does not
 * take it on trust: it runs the engine once with each candidate's raw
 * bytes on pages of their own in a fresh anonymous mapping that nothing
 * backs, and asks the kernel (mincore) which pages that run touched: a
 * candidate none of whose pages was read keeps no raw copy, one that was
 * read keeps its own (kiln__engine_mark_packed_only).  Session 8's check
 * compared the outputs of two runs (raw bytes, then zero pages) and kept
 * every raw copy when one constant was read: a build under load that
 * picks a tactic whose kernel reads its weights raw would turn a 161 MB
 * ResNet-50 engine into ~258 MB (likely what session 8 saw a few times,
 * not reproduced).  Only layers whose dims are all static
 * qualify: their kernel path cannot change with the input shape.
 *
 * In a loaded engine such a constant has const_off KILN__CONST_PACKED_ONLY
 * and its data pointer is kiln_engine.unread: zero pages mapped read-only,
 * non-NULL so that shape and format functions still see a constant.
 */
#include "kiln_int.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Every input and output dim of layer l is a constant node. */
static int layer_static(const kiln_engine *e, const kiln__elayer *l) {
    int64_t dims[KILN_MAX_DIMS];
    for (int32_t k = 0; k < l->nin + l->nout; k++) {
        int32_t t = k < l->nin ? l->in[k] : l->out[k - l->nin];
        if (t >= 0 && kiln__etensor_static_dims(e, &e->tensors[t], dims) >= 0) return 0;
    }
    return 1;
}

/* Input k of layer l is packed and the file stores that form. */
static int packed_input(const kiln__elayer *l, int32_t k) {
    return l->aot_kernel < 0 && l->op && l->op->builtin && l->device == KILN_DEVICE_CPU && l->prepacked &&
           l->prepacked[k] && l->prepacked_size[k];
}

int kiln__engine_packed_only_refs(const kiln_engine *e, uint8_t *cand) {
    /* bit 0: read as a stored packed input; bit 1: read any other way */
    memset(cand, 0, (size_t)e->ntensors);
    for (int32_t i = 0; i < e->nlayers; i++) {
        const kiln__elayer *l = &e->layers[i];
        const int st = layer_static(e, l);
        for (int32_t k = 0; k < l->nin; k++)
            if (l->in[k] >= 0) cand[l->in[k]] |= st && packed_input(l, k) ? 1 : 2;
        for (int32_t j = 0; j < l->nepi; j++)
            for (int32_t k = 0; k < l->epi[j].nin; k++)
                if (l->epi[j].in[k] >= 0) cand[l->epi[j].in[k]] |= 2;
    }
    for (int32_t i = 0; i < e->noutputs; i++) cand[e->outputs[i]] |= 2;
    for (int32_t t = 0; t < e->ntensors; t++)
        if (e->tensors[t].alias_of >= 0) cand[e->tensors[t].alias_of] |= 2;
    int n = 0;
    for (int32_t t = 0; t < e->ntensors; t++) {
        const kiln__etensor *et = &e->tensors[t];
        cand[t] = cand[t] == 1 && et->kind == KILN__ET_CONST && et->loc == KILN_DEVICE_CPU;
        n += cand[t];
    }
    return n;
}

const uint8_t *kiln__etensor_const(const kiln_engine *e, const kiln__etensor *t) {
    if (t->const_off != KILN__CONST_PACKED_ONLY) return e->weights + t->const_off;
    return e->unread_at ? e->unread + e->unread_at[t - e->tensors] : e->unread;
}

int kiln__engine_map_unread(kiln_engine *e) {
    size_t n = 0;
    for (int32_t t = 0; t < e->ntensors; t++)
        if (e->tensors[t].const_off == KILN__CONST_PACKED_ONLY && e->tensors[t].const_bytes > n)
            n = (size_t)e->tensors[t].const_bytes;
    if (n <= e->unread_size) return 0;
    if (e->unread) munmap(e->unread, e->unread_size);
    e->unread = NULL;
    e->unread_size = 0;
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return kiln__err(KILN_ENOMEM, "out of address space: %zu bytes for the view of packed-only constants", n);
    e->unread = p;
    e->unread_size = n;
    return 0;
}

/* Runs e once on fixed pseudo-random inputs at their opt shapes. */
static int run_once(const kiln_engine *e) {
    const int nin = kiln_engine_num_inputs(e);
    void **buf = kiln__calloc((size_t)nin + 1, sizeof *buf);
    kiln_context *c = NULL;
    int rc = !buf ? KILN_ENOMEM : kiln_context_create(e, 0, &c);
    uint32_t seed = 0x9e3779b9u;
    for (int i = 0; i < nin && !rc; i++) {
        kiln_io_info io;
        size_t bytes = 0;
        rc = kiln__context_opt_input(c, e, i, &io, &bytes);
        if (!rc && !(buf[i] = kiln__malloc(bytes ? bytes : 1))) rc = KILN_ENOMEM;
        /* F32 inputs uniform in [-1, 1); others zero (a valid index, length, flag) */
        if (!rc) memset(buf[i], 0, bytes);
        for (size_t j = 0; !rc && io.dtype == KILN_DTYPE_F32 && j < bytes / 4; j++) {
            seed = seed * 1664525u + 1013904223u;
            ((float *)buf[i])[j] = (float)(seed >> 8) * (2.0f / 16777216.0f) - 1.0f;
        }
        if (!rc) rc = kiln_context_bind(c, io.name, buf[i], bytes);
    }
    if (!rc) rc = kiln_context_run(c);
    kiln_context_free(c);
    for (int i = 0; i < nin && buf; i++) kiln__free(buf[i]);
    kiln__free(buf);
    return rc;
}

/* Any page of [p, p + n) resident: read since it was mapped (a read of
 * an untouched anonymous page maps the zero page; mincore counts it). */
static int touched(uint8_t *p, size_t n, size_t pg, unsigned char *vec) {
    const size_t np = (n + pg - 1) / pg;
    if (mincore(p, n, vec) != 0) return 1; /* cannot tell: as read */
    for (size_t i = 0; i < np; i++)
        if (vec[i] & 1) return 1;
    return 0;
}

int kiln__engine_mark_packed_only(kiln_engine *e, int known_good) {
    if (!e || e->device != KILN_DEVICE_CPU || !e->ntensors) return 0;
    uint8_t *cand = kiln__malloc((size_t)e->ntensors);
    uint64_t *off = kiln__calloc((size_t)e->ntensors, sizeof *off), *at = kiln__calloc((size_t)e->ntensors, sizeof *at);
    unsigned char *vec = NULL;
    uint8_t *map = MAP_FAILED;
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t total = 0, most = 0;
    int n = cand && off && at ? kiln__engine_packed_only_refs(e, cand) : 0, rc = 0, kept = 0;
    if (!n) goto done;
    if (known_good) {
        for (int32_t t = 0; t < e->ntensors; t++) e->tensors[t].packed_only = cand[t];
        kiln__log(KILN_LOG_VERBOSE, "engine file: %d constant%s read only in packed form: stored packed only "
                  "(the timing cache's verdict for this plan and this libkiln)", n, n == 1 ? "" : "s");
        goto done;
    }
    /* each candidate at its own pages, a guard page between */
    for (int32_t t = 0; t < e->ntensors; t++)
        if (cand[t]) {
            const size_t b = (size_t)e->tensors[t].const_bytes, np = (b + pg - 1) / pg;
            at[t] = total;
            total += (np + 1) * pg;
            most = np > most ? np : most;
        }
    map = mmap(NULL, total, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    vec = kiln__malloc(most + 1);
    if (map == MAP_FAILED || !vec) {
        rc = kiln__err(KILN_ENOMEM, "out of address space: %zu bytes for the packed-only check", total);
        goto report;
    }
#ifdef MADV_NOHUGEPAGE
    (void)madvise(map, total, MADV_NOHUGEPAGE); /* a huge zero page would mark its neighbours read */
#endif
    uint8_t *const unread = e->unread;
    const size_t unread_size = e->unread_size;
    for (int32_t t = 0; t < e->ntensors; t++)
        if (cand[t]) {
            off[t] = e->tensors[t].const_off;
            e->tensors[t].const_off = KILN__CONST_PACKED_ONLY;
        }
    e->unread = map;
    e->unread_size = total;
    e->unread_at = at;
    const double t0 = kiln__now_ms();
    rc = run_once(e);
    const double run_ms = kiln__now_ms() - t0;
    e->unread = unread;
    e->unread_size = unread_size;
    e->unread_at = NULL;
    for (int32_t t = 0; t < e->ntensors; t++)
        if (cand[t]) e->tensors[t].const_off = off[t];
    for (int32_t t = 0; t < e->ntensors && !rc; t++)
        if (cand[t]) {
            const int read = touched(map + at[t], (size_t)e->tensors[t].const_bytes, pg, vec);
            e->tensors[t].packed_only = !read;
            if (read && kept++ < 3)
                kiln__log(KILN_LOG_VERBOSE, "engine file: a kernel reads constant '%s' raw: its raw copy is kept",
                          e->tensors[t].name);
        }
    kiln__log(KILN_LOG_VERBOSE, "engine file: %d constant%s read only in packed form: %s%s (check run %.1f ms)", n,
              n == 1 ? "" : "s", rc ? "check run failed, raw copies kept" : kept ? "some read raw by a kernel, " : "stored packed only",
              rc ? "" : kept ? "the others stored packed only" : "", run_ms);
    if (rc) kiln__log(KILN_LOG_VERBOSE, "  (%s)", kiln_errmsg());
    goto done;
report:
    kiln__log(KILN_LOG_VERBOSE, "engine file: %d constant%s read only in packed form: check not run, raw copies kept",
              n, n == 1 ? "" : "s");
    if (rc) kiln__log(KILN_LOG_VERBOSE, "  (%s)", kiln_errmsg());
done:
    if (map != MAP_FAILED) munmap(map, total);
    kiln__free(vec);
    kiln__free(cand);
    kiln__free(off);
    kiln__free(at);
    return n > 0 && !rc && !kept;
}

int kiln__context_opt_input(kiln_context *c, const kiln_engine *e, int i, kiln_io_info *io, size_t *bytes) {
    int64_t dims[KILN_MAX_DIMS];
    uint64_t n = 1;
    int rc = kiln_engine_io(e, i, io);
    for (int k = 0; k < io->ndim && !rc; k++) n *= (uint64_t)(dims[k] = io->dims[k] >= 0 ? io->dims[k] : io->opt[k]);
    *bytes = (size_t)(n * kiln_dtype_size(io->dtype));
    return rc ? rc : kiln_context_set_input_shape(c, io->name, io->ndim, dims);
}

int kiln__engine_check_packed_only(const kiln_engine *e) {
    int n = 0;
    for (int32_t t = 0; t < e->ntensors; t++) n += e->tensors[t].const_off == KILN__CONST_PACKED_ONLY;
    if (!n) return 0;
    uint8_t *cand = kiln__malloc((size_t)e->ntensors);
    if (!cand) return kiln__err(KILN_ENOMEM, "out of memory checking packed-only constants");
    kiln__engine_packed_only_refs(e, cand);
    /* packed from the file, not at load (that would pack the zero pages) */
    for (int32_t i = 0; i < e->nlayers; i++)
        for (int32_t k = 0; k < e->layers[i].nin; k++)
            if (e->layers[i].in[k] >= 0 && !(e->layers[i].prepacked_stored >> k & 1)) cand[e->layers[i].in[k]] = 0;
    int rc = 0;
    for (int32_t t = 0; t < e->ntensors && !rc; t++) {
        const kiln__etensor *et = &e->tensors[t];
        if (et->const_off != KILN__CONST_PACKED_ONLY || cand[t]) continue;
        /* name a reader that does not take the stored packed form */
        const char *who = "no layer";
        int32_t input = -1;
        for (int32_t i = 0; i < e->nlayers && input < 0; i++)
            for (int32_t k = 0; k < e->layers[i].nin && input < 0; k++)
                if (e->layers[i].in[k] == t && !(e->layers[i].prepacked_stored >> k & 1)) {
                    who = e->layers[i].name;
                    input = k;
                }
        rc = kiln__err(KILN_EFORMAT, "section TENSORS: constant '%s' is stored only in packed form, but %s%s%s "
                       "reads it otherwise (input %d: no stored packed form, a dynamic dim, or another reader)",
                       et->name, input >= 0 ? "layer '" : "", who, input >= 0 ? "'" : "", (int)input);
    }
    kiln__free(cand);
    return rc;
}
