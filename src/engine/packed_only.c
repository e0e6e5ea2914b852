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
 * take it on trust: it runs the engine once with the candidates' raw bytes
 * replaced by zero pages and keeps them out of the file only when every
 * output is bit-identical (kiln__engine_mark_packed_only).  Only layers
 * whose dims are all static qualify: their kernel path cannot change
 * with the input shape.
 *
 * In a loaded engine such a constant has const_off KILN__CONST_PACKED_ONLY
 * and its data pointer is kiln_engine.unread: zero pages mapped read-only,
 * non-NULL so that shape and format functions still see a constant.
 */
#include "kiln_int.h"

#include <stdio.h>
#include <sys/mman.h>

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
    return t->const_off == KILN__CONST_PACKED_ONLY ? e->unread : e->weights + t->const_off;
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

/* Runs e once on fixed pseudo-random inputs at their opt shapes; *out
 * receives every output's bytes, concatenated (kiln__malloc'd). */
static int run_once(const kiln_engine *e, uint8_t **out, size_t *size) {
    const int nin = kiln_engine_num_inputs(e), nio = nin + kiln_engine_num_outputs(e);
    void **buf = kiln__calloc((size_t)nio + 1, sizeof *buf);
    size_t *bytes = kiln__calloc((size_t)nio + 1, sizeof *bytes);
    kiln_context *c = NULL;
    int rc = !buf || !bytes ? KILN_ENOMEM : kiln_context_create(e, 0, &c);
    uint32_t seed = 0x9e3779b9u;
    for (int i = 0; i < nin && !rc; i++) {
        kiln_io_info io;
        rc = kiln__context_opt_input(c, e, i, &io, &bytes[i]);
        if (!rc && !(buf[i] = kiln__malloc(bytes[i] ? bytes[i] : 1))) rc = KILN_ENOMEM;
        /* F32 inputs uniform in [-1, 1); others zero (a valid index, length, flag) */
        if (!rc) memset(buf[i], 0, bytes[i]);
        for (size_t j = 0; !rc && io.dtype == KILN_DTYPE_F32 && j < bytes[i] / 4; j++) {
            seed = seed * 1664525u + 1013904223u;
            ((float *)buf[i])[j] = (float)(seed >> 8) * (2.0f / 16777216.0f) - 1.0f;
        }
        if (!rc) rc = kiln_context_bind(c, io.name, buf[i], bytes[i]);
    }
    if (!rc) rc = kiln_context_run(c);
    size_t total = 0;
    for (int i = nin; i < nio && !rc; i++) {
        kiln_io_info io;
        rc = kiln_engine_io(e, i, &io);
        int64_t dims[KILN_MAX_DIMS];
        int nd = 0;
        if (!rc) rc = kiln_context_shape(c, io.name, &nd, dims);
        const void *p = rc ? NULL : kiln_context_output(c, io.name);
        uint64_t n = 1;
        for (int k = 0; k < nd; k++) n *= (uint64_t)dims[k];
        bytes[i] = (size_t)(n * kiln_dtype_size(io.dtype));
        if (!rc && !(buf[i] = kiln__malloc(bytes[i] ? bytes[i] : 1))) rc = KILN_ENOMEM;
        if (!rc && bytes[i]) memcpy(buf[i], p, bytes[i]);
        total += bytes[i];
    }
    *out = NULL;
    if (!rc && !(*out = kiln__malloc(total ? total : 1))) rc = KILN_ENOMEM;
    for (size_t i = (size_t)nin, at = 0; i < (size_t)nio && !rc; i++) {
        if (bytes[i]) memcpy(*out + at, buf[i], bytes[i]);
        at += bytes[i];
    }
    *size = total;
    kiln_context_free(c);
    for (int i = 0; i < nio && buf; i++) kiln__free(buf[i]);
    kiln__free(buf);
    kiln__free(bytes);
    return rc;
}

int kiln__engine_mark_packed_only(kiln_engine *e, int known_good) {
    if (!e || e->device != KILN_DEVICE_CPU || !e->ntensors) return 0;
    uint8_t *cand = kiln__malloc((size_t)e->ntensors);
    uint64_t *off = kiln__calloc((size_t)e->ntensors, sizeof *off);
    uint8_t *ref = NULL, *got = NULL;
    size_t nref = 0, ngot = 0;
    int n = cand && off ? kiln__engine_packed_only_refs(e, cand) : 0, rc = 0, same = 0;
    if (!n) goto done;
    if (known_good) {
        for (int32_t t = 0; t < e->ntensors; t++) e->tensors[t].packed_only = cand[t];
        kiln__log(KILN_LOG_VERBOSE, "engine file: %d constant%s read only in packed form: stored packed only "
                  "(the timing cache's verdict for this plan and this libkiln)", n, n == 1 ? "" : "s");
        same = 1;
        goto done;
    }
    if (!(rc = run_once(e, &ref, &nref))) {
        for (int32_t t = 0; t < e->ntensors; t++)
            if (cand[t]) {
                off[t] = e->tensors[t].const_off;
                e->tensors[t].const_off = KILN__CONST_PACKED_ONLY;
            }
        rc = kiln__engine_map_unread(e);
        if (!rc) rc = run_once(e, &got, &ngot);
        for (int32_t t = 0; t < e->ntensors; t++)
            if (cand[t]) e->tensors[t].const_off = off[t];
    }
    same = !rc && nref == ngot && !memcmp(ref, got, nref);
    for (int32_t t = 0; t < e->ntensors && same; t++) e->tensors[t].packed_only = cand[t];
    kiln__log(KILN_LOG_VERBOSE, "engine file: %d constant%s read only in packed form: %s", n, n == 1 ? "" : "s",
              rc ? "check run failed, raw copies kept" : same ? "stored packed only"
                 : "outputs differ when their raw bytes are unread (a kernel reads them), raw copies kept");
    if (rc) kiln__log(KILN_LOG_VERBOSE, "  (%s)", kiln_errmsg());
done:
    kiln__free(cand);
    kiln__free(off);
    kiln__free(ref);
    kiln__free(got);
    return same;
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
