/*
 * file.c — the .kiln engine file: save, serialize, load (mmap), verify.
 *
 * Layout (all integers little-endian):
 *
 *   offset 0   char  magic[8]        "KILNENG\0"
 *          8   u32   format version  (KILN__FILE_VERSION)
 *         12   u32   header size     (bytes up to the first section)
 *         16   u32   flags           (0)
 *         20   u32   section count
 *         24   u32   device signature length
 *         28   u32   reserved (0)
 *         32   u64   header checksum (over [0, header size) with this field 0;
 *                                    engine/checksum.h)
 *         40   device signature bytes, zero-padded to 8
 *              section table: count x { u32 id, u32 0, u64 offset, u64 size, u64 checksum }
 *   then the sections, each starting 64-byte aligned, gaps zero-filled; the
 *   file ends exactly where the last section ends.
 *
 * Sections: META (threads, device, build host id), NODES (the shape program), TENSORS,
 * LAYERS, IO, PROFILES, WEIGHTS (raw, 64-byte aligned in the file, so an
 * mmap gives aligned weights used in place), AOT (kernel records, see
 * kiln__aot_serialize), PLUGINS (identities, library paths, embedded .so),
 * FUSION (optional, present only when the builder fused epilogue ops into
 * layers: u32 count, then per fused layer i32 layer index, u32 op count,
 * per op str ns, str name, i32 version, i32 input count, i32 activation
 * slot, i32 tensor per input (-1: the activation or absent), u64 attribute
 * blob size + blob), DIMNAMES (optional: input-dim names), AOTCUDA
 * (optional: AOT CUDA kernels, see plugin/aot_cuda.c), PACKED (optional:
 * the packed forms of built-in ops' constant inputs, used in place at load
 * instead of packing them again: str layout (kiln__prepack_layout), u32
 * count, per packed input i32 layer, i32 input, u64 offset, u64 size, then
 * the bytes; offsets from the section's start, 64-byte aligned, ascending,
 * gaps zero), SIGNATURE (optional, always last: the signer's
 * Ed25519 public key and a signature of the file, see trust.c).
 * Strings are u32 length + bytes (no NUL).
 *
 * Loading trusts nothing: the header and each section are checksummed
 * (a 64-bit multiply-rotate hash over 8-byte lanes, ours), every gap must
 * be zero, and every count, index, offset and length is range-checked while
 * parsing; a failure names the section and the file offset.  A mapped
 * file's WEIGHTS and PACKED sections of 1 MiB and more are hashed at the
 * first run instead (data_check.c), so a load does not read them.
 */
#include "kiln_int.h"
#include "core/bytes.h"
#include "core/out_file.h"

#include "engine/checksum.h"
#include "engine/trust.h"
#include "plugin/aot_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The one place the format is versioned: bump it with every change of the
 * layout or of a section's meaning, and say what changed.
 *   1  first release
 *   2  META carries the build host id; optional SIGNATURE section
 *   3  optional PACKED section (prepacked weights stored, not repacked at
 *      load); section AOTCUDA (id 14, added while the version was 2)
 *   4  a constant read only through stored packed forms has no raw copy in
 *      WEIGHTS: TENSORS gives it const offset KILN__CONST_PACKED_ONLY
 *      (all bits set; engine/packed_only.c); WEIGHTS holds the other
 *      constants in tensor order, each 64-byte aligned
 *   5  checksums (header and sections) are engine/checksum.h's chunked
 *      hash (format 4's was a 4-lane xxh64-style one): several times
 *      faster, and a large section's check runs on the context's threads */
#define KILN__FILE_VERSION 5u
/* Bulk sections at least this large are hashed at the first run, not at load. */
#define LAZY_CHECK_MIN (1u << 20)
#define FILE_MAGIC "KILNENG"
#define HDR_FIXED 40u
#define SEC_ENTRY 32u
#define MAX_STR (1u << 20)

enum {
    SEC_META = 1,
    SEC_NODES,
    SEC_TENSORS,
    SEC_LAYERS,
    SEC_IO,
    SEC_PROFILES,
    SEC_WEIGHTS,
    SEC_AOT,
    SEC_PLUGINS,
    SEC_FUSION, /* optional: written only when a layer has fused epilogues */
    SEC_DEVICE, /* optional: written only for engines built for CUDA */
    SEC_SIGNATURE, /* optional, last: written by kiln_engine_save_signed */
    SEC_DIMNAMES,  /* optional: network names of input dims; written before SIGNATURE */
    SEC_AOTCUDA,   /* optional: AOT CUDA kernels (plugin/aot_cuda.c); written before SIGNATURE */
    SEC_PACKED,    /* optional: packed constant inputs of built-in ops; written before SIGNATURE */
    SEC_COUNT_
};

static const char *sec_name(uint32_t id) {
    static const char *const names[] = {"?",  "META",     "NODES",   "TENSORS", "LAYERS",
                                        "IO", "PROFILES", "WEIGHTS", "AOT",     "PLUGINS",
                                        "FUSION", "DEVICE", "SIGNATURE", "DIMNAMES", "AOTCUDA", "PACKED"};
    return id < SEC_COUNT_ ? names[id] : "?";
}

/* ------------------------------------------------------------ checksum */

/* Checksums: engine/checksum.h (format 5: chunked, so a large section's
 * check runs on several threads; streamed, so a section is checksummed
 * from its pieces without being copied together first). */
typedef kiln__ck ckstate;
#define ck_begin kiln__ck_begin
#define ck_add kiln__ck_add
#define ck_end kiln__ck_end
#define ck64 kiln__ck64

/* ------------------------------------------------------------ writer */

/* The byte codec (core/bytes.h) under this file's short names; a zeroed
 * wbuf grows its own buffer. */
typedef kiln__wbuf wbuf;
#define w_raw kiln__w_bytes
#define w_le kiln__w_le
#define w_u8 kiln__w_u8
#define w_u32 kiln__w_u32
#define w_i32 kiln__w_i32
#define w_u64 kiln__w_u64
#define w_i64 kiln__w_i64
#define w_f64 kiln__w_f64
#define w_pad kiln__w_pad
static void w_str(wbuf *w, const char *s) { kiln__w_str(w, s, 4); }

/* A packed input the file stores: a built-in op's, on the CPU. */
static int packed_stored(const kiln__elayer *l, int32_t k) {
    return l->prepacked && l->prepacked[k] && l->prepacked_size[k] && l->op && l->op->builtin &&
           l->device == KILN_DEVICE_CPU;
}

/* The bulk bytes of a section (WEIGHTS, PACKED's packed inputs) are not
 * copied into its buffer: they are referenced where they lie and streamed
 * after it, each after `pad` zero bytes (64-byte alignment in the file),
 * to the checksum and then to the file. */
typedef struct bref {
    uint64_t pad;
    const uint8_t *p;
    uint64_t n;
} bref;
typedef struct brefs {
    bref *v;
    int n, cap, oom;
    uint64_t tail; /* bytes after the section's buffer */
} brefs;

/* Appends n bytes at p (n may be 0: padding only) at the next multiple of
 * 64 of the section, whose buffer holds head bytes. */
static void bulk_add(brefs *b, size_t head, const void *p, uint64_t n) {
    if (b->oom) return;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        bref *v = kiln__realloc(b->v, (size_t)cap * sizeof *v);
        if (!v) {
            b->oom = 1;
            return;
        }
        b->v = v;
        b->cap = cap;
    }
    const uint64_t at = head + b->tail, pad = (64 - at % 64) % 64;
    b->v[b->n++] = (bref){pad, p, n};
    b->tail += pad + n;
}

/* PACKED (only when some layer has a packed input to store). */
static void write_packed(const kiln_engine *e, wbuf *w, brefs *b) {
    uint32_t n = 0;
    for (int32_t i = 0; i < e->nlayers; i++)
        for (int32_t k = 0; k < e->layers[i].nin; k++) n += (uint32_t)packed_stored(&e->layers[i], k);
    if (!n) return;
    w_str(w, kiln__prepack_layout());
    w_u32(w, n);
    uint64_t off = (w->n + (uint64_t)n * 24 + 63) & ~(uint64_t)63;
    for (int32_t i = 0; i < e->nlayers; i++)
        for (int32_t k = 0; k < e->layers[i].nin; k++) {
            if (!packed_stored(&e->layers[i], k)) continue;
            w_i32(w, i);
            w_i32(w, k);
            w_u64(w, off);
            w_u64(w, e->layers[i].prepacked_size[k]);
            off = (off + e->layers[i].prepacked_size[k] + 63) & ~(uint64_t)63;
        }
    for (int32_t i = 0; i < e->nlayers; i++)
        for (int32_t k = 0; k < e->layers[i].nin; k++)
            if (packed_stored(&e->layers[i], k))
                bulk_add(b, w->n, e->layers[i].prepacked[k], e->layers[i].prepacked_size[k]);
}

/* Where each constant goes in section WEIGHTS: off[t], or
 * KILN__CONST_PACKED_ONLY for one stored only packed (packed_only.c: marked
 * by the builder, or loaded so, and still read only through stored packed
 * forms); the section's size in *size.  Constants are stored in tensor
 * order, each 64-byte aligned.  With none packed-only, *size is
 * UINT64_MAX: the engine's weights are written as they are (the offsets
 * the builder gave, or the loaded file's). */
static int weights_layout(const kiln_engine *e, uint64_t *off, uint64_t *size) {
    uint8_t *cand = kiln__malloc((size_t)e->ntensors + 1);
    if (!cand) return kiln__err(KILN_ENOMEM, "out of memory serializing the engine");
    kiln__engine_packed_only_refs(e, cand);
    uint64_t at = 0;
    int rc = 0, dropped = 0;
    for (int32_t t = 0; t < e->ntensors; t++) {
        const kiln__etensor *et = &e->tensors[t];
        off[t] = et->const_off;
        if (et->kind != KILN__ET_CONST) continue;
        const int loaded_packed = et->const_off == KILN__CONST_PACKED_ONLY;
        if ((et->packed_only || loaded_packed) && cand[t]) {
            off[t] = KILN__CONST_PACKED_ONLY;
            dropped++;
            continue;
        }
        if (loaded_packed) { /* its raw bytes are gone and a layer now needs them */
            rc = kiln__err(KILN_EINVAL, "cannot serialize: constant '%s' is stored only in packed form and is "
                           "no longer read only through it", et->name);
            break;
        }
        off[t] = at;
        at = (at + et->const_bytes + 63) & ~(uint64_t)63;
    }
    if (!dropped)
        for (int32_t t = 0; t < e->ntensors; t++) off[t] = e->tensors[t].const_off;
    *size = dropped ? at : UINT64_MAX;
    kiln__free(cand);
    return rc;
}

static int build_sections(const kiln_engine *e, wbuf *sec, brefs *bulk) {
    uint64_t *woff = kiln__calloc((size_t)e->ntensors + 1, sizeof *woff), wsize = 0;
    if (!woff) return kiln__err(KILN_ENOMEM, "out of memory serializing the engine");
    int wrc = weights_layout(e, woff, &wsize);
    if (wrc) {
        kiln__free(woff);
        return wrc;
    }
    /* META */
    w_u32(&sec[SEC_META], (uint32_t)e->threads);
    w_u32(&sec[SEC_META], (uint32_t)e->device);
    w_u64(&sec[SEC_META], e->host_id ? e->host_id : kiln__host_id());

    /* NODES */
    wbuf *w = &sec[SEC_NODES];
    w_u32(w, (uint32_t)e->nnodes);
    for (int32_t i = 0; i < e->nnodes; i++) {
        const kiln__enode *n = &e->nodes[i];
        w_u8(w, n->op);
        w_u8(w, n->symkind);
        w_le(w, 0, 2);
        w_i32(w, n->a);
        w_i32(w, n->b);
        w_i32(w, n->c);
        w_i64(w, n->v);
    }

    /* TENSORS */
    w = &sec[SEC_TENSORS];
    w_u32(w, (uint32_t)e->ntensors);
    for (int32_t i = 0; i < e->ntensors; i++) {
        const kiln__etensor *t = &e->tensors[i];
        w_str(w, t->name);
        w_u8(w, t->kind);
        w_u8(w, t->dtype);
        w_u8(w, t->format);
        w_u8(w, t->ndim);
        for (int d = 0; d < t->ndim; d++) w_i32(w, t->dims[d]);
        w_i32(w, t->upper);
        w_u64(w, woff[i]);
        w_u64(w, t->const_bytes);
        w_i32(w, t->alias_of);
        w_i32(w, t->first);
        w_i32(w, t->last);
        w_i32(w, t->is_size);
        w_u64(w, t->plan_off);
        w_u64(w, t->plan_bytes);
    }

    /* LAYERS */
    w = &sec[SEC_LAYERS];
    w_u32(w, (uint32_t)e->nlayers);
    for (int32_t i = 0; i < e->nlayers; i++) {
        const kiln__elayer *l = &e->layers[i];
        const char *ns = l->op_ns ? l->op_ns : l->op ? l->op->ns : "";
        const char *nm = l->op_name ? l->op_name : l->op ? l->op->name : "";
        w_str(w, l->name);
        w_str(w, ns);
        w_str(w, nm);
        w_i32(w, l->op_version ? l->op_version : l->op ? l->op->version : 0);
        w_i32(w, l->nin);
        w_i32(w, l->nout);
        for (int32_t k = 0; k < l->nin; k++) w_i32(w, l->in[k]);
        for (int32_t k = 0; k < l->nout; k++) w_i32(w, l->out[k]);
        w_i32(w, l->io.n);
        for (int k = 0; k < l->io.n && k < KILN_MAX_IO; k++) {
            w_u8(w, l->io.dtype[k]);
            w_u8(w, l->io.format[k]);
        }
        w_i32(w, l->tactic);
        w_i32(w, l->aot_kernel);
        w_u64(w, l->blob_size);
        w_raw(w, l->blob, (size_t)l->blob_size);
        w_f64(w, l->time_ms);
    }

    /* IO */
    w = &sec[SEC_IO];
    w_u32(w, (uint32_t)e->ninputs);
    for (int32_t i = 0; i < e->ninputs; i++) w_i32(w, e->inputs[i]);
    w_u32(w, (uint32_t)e->noutputs);
    for (int32_t i = 0; i < e->noutputs; i++) w_i32(w, e->outputs[i]);

    /* PROFILES */
    w = &sec[SEC_PROFILES];
    w_u32(w, e->prof ? (uint32_t)e->ninputs : 0);
    for (int32_t i = 0; e->prof && i < e->ninputs; i++)
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < KILN_MAX_DIMS; d++) w_i64(w, e->prof[i][k][d]);

    /* WEIGHTS */
    brefs *b = &bulk[SEC_WEIGHTS];
    if (wsize == UINT64_MAX) bulk_add(b, 0, e->weights, e->weights_size);
    for (int32_t i = 0; i < e->ntensors && wsize != UINT64_MAX; i++) {
        const kiln__etensor *t = &e->tensors[i];
        if (t->kind != KILN__ET_CONST || woff[i] == KILN__CONST_PACKED_ONLY) continue;
        bulk_add(b, 0, e->weights + t->const_off, t->const_bytes);
    }
    if (wsize != UINT64_MAX) bulk_add(b, 0, NULL, 0);
    KILN__ASSERT(b->oom || wsize == UINT64_MAX || b->tail == wsize);
    kiln__free(woff);

    /* AOT */
    w = &sec[SEC_AOT];
    w_u32(w, (uint32_t)e->naot);
    for (int32_t i = 0; i < e->naot; i++) {
        size_t sz = 0;
        int rc = kiln__aot_serialize(&e->aot[i], NULL, &sz);
        if (rc) return kiln__err_prefix(rc, "AOT kernel %d", (int)i);
        w_u64(w, sz);
        size_t at = w->n;
        uint8_t *tmp = kiln__malloc(sz ? sz : 1);
        if (!tmp) return kiln__err(KILN_ENOMEM, "out of memory serializing AOT kernel %d", (int)i);
        rc = kiln__aot_serialize(&e->aot[i], tmp, &sz);
        if (!rc) w_raw(w, tmp, sz);
        kiln__free(tmp);
        if (rc) return kiln__err_prefix(rc, "AOT kernel %d", (int)i);
        (void)at;
    }

    /* PLUGINS: identities of every non-builtin op the layers need, plus
     * what the builder recorded (library paths, embedded bytes). */
    w = &sec[SEC_PLUGINS];
    w_u32(w, (uint32_t)e->nplugins);
    for (int32_t i = 0; i < e->nplugins; i++) {
        const kiln__plugin_ref *p = &e->plugins[i];
        w_str(w, p->ns);
        w_str(w, p->name);
        w_i32(w, p->version);
        w_str(w, p->library);
        w_u64(w, p->so ? p->so_size : 0);
        if (p->so) w_raw(w, p->so, (size_t)p->so_size);
    }
    /* FUSION (only when some layer has a chain) */
    uint32_t nfused = 0;
    for (int32_t i = 0; i < e->nlayers; i++) nfused += e->layers[i].nepi > 0;
    w = &sec[SEC_FUSION];
    if (nfused) {
        w_u32(w, nfused);
        for (int32_t i = 0; i < e->nlayers; i++) {
            const kiln__elayer *l = &e->layers[i];
            if (l->nepi <= 0) continue;
            w_i32(w, i);
            w_u32(w, (uint32_t)l->nepi);
            for (int32_t k = 0; k < l->nepi; k++) {
                const kiln__eepi *p = &l->epi[k];
                w_str(w, p->op_ns);
                w_str(w, p->op_name);
                w_i32(w, p->op_version);
                w_i32(w, p->nin);
                w_i32(w, p->x);
                for (int32_t j = 0; j < p->nin; j++) w_i32(w, p->in[j]);
                w_u64(w, p->blob_size);
                w_raw(w, p->blob, (size_t)p->blob_size);
            }
        }
    }
    /* DEVICE (CUDA engines): GPU signature, TF32 flag, per tensor its memory
     * space, per layer its device (u8 each). */
    w = &sec[SEC_DEVICE];
    if (e->device == KILN_DEVICE_CUDA) {
        w_str(w, e->cuda_sig ? e->cuda_sig : "");
        w_u32(w, (uint32_t)e->allow_tf32);
        w_u32(w, (uint32_t)e->ntensors);
        for (int32_t i = 0; i < e->ntensors; i++) w_u8(w, e->tensors[i].loc);
        w_u32(w, (uint32_t)e->nlayers);
        for (int32_t i = 0; i < e->nlayers; i++) w_u8(w, e->layers[i].device);
    }
    /* DIMNAMES (only when the network named a dim): node index, name. */
    w = &sec[SEC_DIMNAMES];
    if (e->ndimnames > 0) {
        w_u32(w, (uint32_t)e->ndimnames);
        for (int32_t i = 0; i < e->ndimnames; i++) {
            w_i32(w, e->dimnames[i].node);
            w_str(w, e->dimnames[i].name);
        }
    }
    kiln__aot_cuda_write_section(e, &sec[SEC_AOTCUDA]);
    write_packed(e, &sec[SEC_PACKED], &bulk[SEC_PACKED]);
    for (int s = 1; s < SEC_COUNT_; s++)
        if (sec[s].oom || bulk[s].oom) return kiln__err(KILN_ENOMEM, "out of memory serializing the engine");
    return 0;
}

static int sec_optional(int s) {
    return s == SEC_FUSION || s == SEC_DEVICE || s == SEC_SIGNATURE || s == SEC_DIMNAMES || s == SEC_AOTCUDA ||
           s == SEC_PACKED;
}
/* Order of the sections in a file: by id, except that SIGNATURE stays last
 * (it signs everything before it). */
static const int sec_order[SEC_COUNT_ - 1] = {SEC_META, SEC_NODES, SEC_TENSORS, SEC_LAYERS, SEC_IO,
                                              SEC_PROFILES, SEC_WEIGHTS, SEC_AOT, SEC_PLUGINS, SEC_FUSION,
                                              SEC_DEVICE, SEC_DIMNAMES, SEC_AOTCUDA, SEC_PACKED, SEC_SIGNATURE};
typedef struct sections {
    wbuf w[SEC_COUNT_];
    brefs bulk[SEC_COUNT_];
} sections;

static uint64_t sec_size(const sections *x, int s) { return x->w[s].n + x->bulk[s].tail; }
/* Sections written: all but empty optional ones. */
static int sec_written(const sections *x, int s) { return !sec_optional(s) || sec_size(x, s) > 0; }

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Where an image's bytes go, in order: 0 or a KILN_E* code. */
typedef int (*sink_fn)(void *ud, const uint8_t *p, size_t n);

static int sink_ck(void *ud, const uint8_t *p, size_t n) {
    ck_add(ud, p, n);
    return 0;
}

static int sink_buf(void *ud, const uint8_t *p, size_t n) {
    wbuf *w = ud;
    w_raw(w, p, n);
    return w->oom ? kiln__err(KILN_ENOMEM, "out of memory serializing the engine") : 0;
}

static int emit_zeros(sink_fn fn, void *ud, uint64_t n) {
    static const uint8_t z[64];
    int rc = 0;
    for (; n && !rc; n -= n < sizeof z ? n : sizeof z) rc = fn(ud, z, n < sizeof z ? (size_t)n : sizeof z);
    return rc;
}

/* Section s: its buffer, then its bulk bytes. */
static int emit_section(const sections *x, int s, sink_fn fn, void *ud) {
    int rc = x->w[s].n ? fn(ud, x->w[s].p, x->w[s].n) : 0;
    for (int i = 0; i < x->bulk[s].n && !rc; i++) {
        const bref *r = &x->bulk[s].v[i];
        rc = emit_zeros(fn, ud, r->pad);
        if (!rc && r->n) rc = fn(ud, r->p, (size_t)r->n);
    }
    return rc;
}

/* Lays the engine's image out and hands its bytes to fn, header first.
 * with_sig: the image ends with a zeroed SIGNATURE section (the caller
 * signs it); *hdr_size: the header's size; *sig_off: where the SIGNATURE
 * section starts. */
static int emit_image(const kiln_engine *e, int with_sig, sink_fn fn, void *ud, size_t *hdr_size, size_t *sig_off) {
    sections *x = kiln__calloc(1, sizeof *x);
    wbuf out = {0};
    if (!x) return kiln__err(KILN_ENOMEM, "out of memory serializing the engine");
    int rc = build_sections(e, x->w, x->bulk);
    if (rc) goto done;
    if (with_sig) {
        static const uint8_t z[KILN__SIG_SECTION];
        w_raw(&x->w[SEC_SIGNATURE], z, sizeof z);
        if (x->w[SEC_SIGNATURE].oom) {
            rc = kiln__err(KILN_ENOMEM, "out of memory serializing the engine");
            goto done;
        }
    }

    const char *sig = e->device_sig ? e->device_sig : kiln_cpu_signature();
    uint32_t siglen = (uint32_t)strlen(sig);
    uint32_t nsec = 0;
    for (int k = 0; k < SEC_COUNT_ - 1; k++) nsec += (uint32_t)sec_written(x, sec_order[k]);
    size_t hdr = HDR_FIXED + ((siglen + 7u) & ~7u) + (size_t)nsec * SEC_ENTRY;
    uint64_t off = (hdr + 63) & ~(size_t)63;
    uint64_t offs[SEC_COUNT_];
    for (int k = 0; k < SEC_COUNT_ - 1; k++) {
        const int s = sec_order[k];
        if (!sec_written(x, s)) continue;
        offs[s] = off;
        off = (off + sec_size(x, s) + 63) & ~(uint64_t)63;
    }

    w_raw(&out, FILE_MAGIC "", 8);
    w_u32(&out, KILN__FILE_VERSION);
    w_u32(&out, (uint32_t)hdr);
    w_u32(&out, 0);
    w_u32(&out, nsec);
    w_u32(&out, siglen);
    w_u32(&out, 0);
    w_u64(&out, 0); /* header checksum, patched below */
    w_raw(&out, sig, siglen);
    w_pad(&out, 8);
    for (int k = 0; k < SEC_COUNT_ - 1; k++) {
        const int s = sec_order[k];
        if (!sec_written(x, s)) continue;
        ckstate ck;
        ck_begin(&ck);
        emit_section(x, s, sink_ck, &ck);
        w_u32(&out, (uint32_t)s);
        w_u32(&out, 0);
        w_u64(&out, offs[s]);
        w_u64(&out, sec_size(x, s));
        w_u64(&out, ck_end(&ck));
    }
    if (out.oom) {
        rc = kiln__err(KILN_ENOMEM, "out of memory serializing the engine");
        goto done;
    }
    put64(out.p + 32, ck64(out.p, hdr));
    /* The file ends where the last section ends; trailing padding would be
     * bytes no checksum covers. */
    rc = fn(ud, out.p, out.n);
    uint64_t at = out.n;
    for (int k = 0; k < SEC_COUNT_ - 1 && !rc; k++) {
        const int s = sec_order[k];
        if (!sec_written(x, s)) continue;
        rc = emit_zeros(fn, ud, offs[s] - at);
        if (!rc) rc = emit_section(x, s, fn, ud);
        at = offs[s] + sec_size(x, s);
    }
    *hdr_size = hdr;
    *sig_off = with_sig ? (size_t)offs[SEC_SIGNATURE] : 0;
done:
    for (int s = 1; s < SEC_COUNT_; s++) {
        kiln__free(x->w[s].p);
        kiln__free(x->bulk[s].v);
    }
    kiln__free(x);
    kiln__free(out.p);
    return rc;
}

int kiln__engine_plan_digest(const kiln_engine *e, uint64_t *digest) {
    sections *x = kiln__calloc(1, sizeof *x);
    if (!x) return kiln__err(KILN_ENOMEM, "out of memory digesting the engine's plan");
    int rc = build_sections(e, x->w, x->bulk);
    ckstate ck;
    ck_begin(&ck);
    for (int s = 1; s < SEC_COUNT_ && !rc; s++) {
        if (x->w[s].oom || x->bulk[s].oom) rc = kiln__err(KILN_ENOMEM, "out of memory digesting the engine's plan");
        const uint64_t head[3] = {(uint64_t)s, x->w[s].n, (uint64_t)x->bulk[s].n};
        ck_add(&ck, (const uint8_t *)head, sizeof head);
        ck_add(&ck, x->w[s].p ? x->w[s].p : (const uint8_t *)"", x->w[s].n);
        for (int i = 0; i < x->bulk[s].n; i++) {
            const uint64_t piece[2] = {x->bulk[s].v[i].pad, x->bulk[s].v[i].n};
            ck_add(&ck, (const uint8_t *)piece, sizeof piece);
        }
    }
    *digest = ck_end(&ck);
    for (int s = 1; s < SEC_COUNT_; s++) {
        kiln__free(x->w[s].p);
        kiln__free(x->bulk[s].v);
    }
    kiln__free(x);
    return rc;
}

/* The image in one buffer; `sk` (64 bytes) or NULL: sign it (SIGNATURE
 * section, last). */
static int serialize(const kiln_engine *e, const unsigned char *sk, wbuf *out) {
    size_t hdr = 0, so = 0;
    int rc = emit_image(e, sk != NULL, sink_buf, out, &hdr, &so);
    if (rc || !sk) return rc;
    /* SIGNATURE is the last section and the last table entry. */
    size_t ent = hdr - SEC_ENTRY;
    kiln__sig_skip skip = {{32, ent + 24, so}, {8, 8, KILN__SIG_SECTION}};
    rc = kiln__sig_create(out->p, out->n, &skip, sk, out->p + so);
    if (rc) return rc;
    put64(out->p + ent + 24, ck64(out->p + so, KILN__SIG_SECTION));
    put64(out->p + 32, 0); /* the header's checksum covers it as 0 */
    put64(out->p + 32, ck64(out->p, hdr));
    return 0;
}

static int serialize_to(const kiln_engine *e, const unsigned char *sk, void **buf, size_t *size) {
    KILN__ARG(e && buf && size, KILN_EINVAL);
    wbuf w = {0};
    int rc = serialize(e, sk, &w);
    if (rc) {
        kiln__free(w.p);
        return rc;
    }
    *buf = w.p;
    *size = w.n;
    return 0;
}

KILN_API int kiln_engine_serialize(const kiln_engine *e, void **buf, size_t *size) {
    return serialize_to(e, NULL, buf, size);
}

KILN_API int kiln_engine_serialize_signed(const kiln_engine *e, const unsigned char sk[64],
                                          void **buf, size_t *size) {
    KILN__ARG(sk, KILN_EINVAL);
    return serialize_to(e, sk, buf, size);
}

typedef struct sink_file {
    int fd;
    const char *path;
    uint64_t done, flushed; /* bytes written; bytes whose writeback was started */
} sink_file;

/* The file is fsync'd before it replaces the old one (durable when save
 * returns).  Left to the end, that fsync waited for the whole image to go
 * to disk: 65-140 ms of ResNet-50's 161 MB rebuild.  Starting the
 * writeback of every finished 8 MiB while the rest is still being
 * written lets the disk work alongside; the final fsync still waits for
 * all of it (sync_file_range alone guarantees nothing). */
#define KILN__WRITEBACK_STEP ((uint64_t)8 << 20)

static int sink_fd(void *ud, const uint8_t *p, size_t n) {
    sink_file *f = ud;
    while (n) {
        ssize_t k = write(f->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return kiln__err(KILN_EIO, "writing '%s' (%llu bytes written): %s", f->path,
                             (unsigned long long)f->done, k < 0 ? strerror(errno) : "short write");
        f->done += (uint64_t)k;
        p += k;
        n -= (size_t)k;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    if (f->done - f->flushed >= KILN__WRITEBACK_STEP) {
        /* advice only: an error here shows again at fsync */
        (void)sync_file_range(f->fd, (off_t)f->flushed, (off_t)(f->done - f->flushed), SYNC_FILE_RANGE_WRITE);
        f->flushed = f->done;
    }
#endif
    return 0;
}

static int save_to(const kiln_engine *e, const char *path, const unsigned char *sk) {
    KILN__ARG(e && path, KILN_EINVAL);
    /* A signed image is signed in memory; an unsigned one goes to the
     * file as it is laid out, its bulk bytes from where they lie. */
    wbuf w = {0};
    int rc = sk ? serialize(e, sk, &w) : 0;
    kiln__out_file o;
    if (!rc) rc = kiln__out_open(&o, path, "engine");
    if (!rc) {
        sink_file f = {o.fd, o.write_path, 0, 0};
        size_t hdr, so;
        rc = sk ? sink_fd(&f, w.p, w.n) : emit_image(e, 0, sink_fd, &f, &hdr, &so);
        rc = kiln__out_close(&o, rc);
    }
    kiln__free(w.p);
    return rc;
}

KILN_API int kiln_engine_save(const kiln_engine *e, const char *path) { return save_to(e, path, NULL); }

KILN_API int kiln_engine_save_signed(const kiln_engine *e, const char *path, const unsigned char sk[64]) {
    if (!sk) return kiln__err(KILN_EINVAL, "kiln_engine_save_signed: NULL secret key");
    return save_to(e, path, sk);
}

/* ------------------------------------------------------------ reader */

/* The byte codec (core/bytes.h) under this file's short names: failures
 * read "section LAYERS (file offset N): ..." and stick in r.err. */
typedef kiln__rbuf rd;
static int r_fail(rd *r, const char *what) { return kiln__r_fail(r, KILN_EFORMAT, "%s", what); }
#define r_le kiln__r_le
#define r_u8 kiln__r_u8
#define r_u32 kiln__r_u32
#define r_i32 kiln__r_i32
#define r_u64 kiln__r_u64
#define r_i64 kiln__r_i64
#define r_f64 kiln__r_f64
#define r_bytes kiln__r_copy /* a copy of len raw bytes (NULL for 0 bytes) */
#define r_count kiln__r_count
#define r_check kiln__r_check
#define r_end kiln__r_end
static char *r_str(rd *r, const char *what) { return kiln__r_str(r, 4, MAX_STR, what); }

static int dtype_ok(uint32_t t) {
    return t < KILN_DTYPE_COUNT_ && t != KILN_DTYPE_UNDEFINED && t != KILN_DTYPE_STRING &&
           kiln_dtype_size((kiln_dtype)t) > 0;
}

typedef struct secinfo {
    const uint8_t *p;
    uint64_t off, size;
    int present;
} secinfo;

static void rd_init(rd *r, const secinfo *s, uint32_t id) {
    kiln__r_init(r, s->p, (size_t)s->size, "section");
    r->name = sec_name(id);
    r->unit = "file offset";
    r->base = (size_t)s->off;
}

static int parse_nodes(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_NODES);
    uint32_t n = r_count(&r, 24, 1u << 26, "node count");
    if (r.err) return r.err;
    e->nodes = kiln__calloc(n ? n : 1, sizeof *e->nodes);
    if (!e->nodes) return kiln__err(KILN_ENOMEM, "out of memory: %u shape nodes", n);
    e->nnodes = (int32_t)n;
    for (uint32_t i = 0; i < n && !r.err; i++) {
        kiln__enode *x = &e->nodes[i];
        size_t at = r.at;
        x->op = (uint8_t)r_u8(&r, "node op");
        x->symkind = (uint8_t)r_u8(&r, "node symbol kind");
        uint32_t pad = (uint32_t)r_le(&r, 2, "node padding");
        x->a = r_i32(&r, "node a");
        x->b = r_i32(&r, "node b");
        x->c = r_i32(&r, "node c");
        x->v = r_i64(&r, "node value");
        if (r.err) break;
        char what[64];
        snprintf(what, sizeof what, "node %u op", i);
        if (!r_check(&r, x->op, 0, KILN_EXPR_OP_COUNT_, what, at)) break;
        if (pad) {
            r.at = at;
            r_fail(&r, "nonzero padding in a node");
            break;
        }
        if (x->op == KILN_EXPR_CONST) continue;
        if (x->op == KILN_EXPR_SYM) {
            snprintf(what, sizeof what, "node %u symbol kind", i);
            r_check(&r, x->symkind, KILN__SYM_INPUT_DIM, KILN__SYM_VALUE + 1, what, at);
            continue; /* bindings are checked once the tensors are known */
        }
        /* Children refer to earlier nodes only: one forward pass evaluates. */
        snprintf(what, sizeof what, "node %u child a", i);
        r_check(&r, x->a, 0, i, what, at);
        snprintf(what, sizeof what, "node %u child b", i);
        r_check(&r, x->b, 0, i, what, at);
        if (x->op == KILN_EXPR_SELECT_) {
            snprintf(what, sizeof what, "node %u child c", i);
            r_check(&r, x->c, 0, i, what, at);
        }
    }
    r_end(&r);
    return r.err;
}

static int parse_tensors(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_TENSORS);
    uint32_t n = r_count(&r, 4 + 4 + 4 + 16 + 4 * 4 + 16, 1u << 24, "tensor count");
    if (r.err) return r.err;
    e->tensors = kiln__calloc(n ? n : 1, sizeof *e->tensors);
    if (!e->tensors) return kiln__err(KILN_ENOMEM, "out of memory: %u tensors", n);
    e->ntensors = (int32_t)n;
    for (uint32_t i = 0; i < n && !r.err; i++) {
        kiln__etensor *t = &e->tensors[i];
        char what[96];
        t->name = r_str(&r, "tensor name");
        size_t at = r.at;
        uint32_t kind = r_u8(&r, "tensor kind"), dt = r_u8(&r, "tensor dtype");
        uint32_t fmt = r_u8(&r, "tensor format"), nd = r_u8(&r, "tensor ndim");
        if (r.err) break;
        snprintf(what, sizeof what, "tensor %u ('%s') kind", i, t->name);
        if (!r_check(&r, kind, KILN__ET_INPUT, KILN__ET_OUTPUT + 1, what, at)) break;
        if (!dtype_ok(dt)) {
            snprintf(what, sizeof what, "tensor %u ('%s'): invalid dtype %u", i, t->name, dt);
            r.at = at + 1;
            r_fail(&r, what);
            break;
        }
        snprintf(what, sizeof what, "tensor %u ('%s') format", i, t->name);
        if (!r_check(&r, fmt, 0, KILN_FORMAT_COUNT_, what, at + 2)) break;
        snprintf(what, sizeof what, "tensor %u ('%s') ndim", i, t->name);
        if (!r_check(&r, nd, 0, KILN_MAX_DIMS + 1, what, at + 3)) break;
        t->kind = (uint8_t)kind;
        t->dtype = (uint8_t)dt;
        t->format = (uint8_t)fmt;
        t->ndim = (uint8_t)nd;
        for (uint32_t d = 0; d < nd; d++) {
            size_t a2 = r.at;
            t->dims[d] = r_i32(&r, "tensor dim");
            snprintf(what, sizeof what, "tensor '%s' dim %u node", t->name, d);
            r_check(&r, t->dims[d], 0, e->nnodes, what, a2);
        }
        size_t a2 = r.at;
        t->upper = r_i32(&r, "tensor upper");
        snprintf(what, sizeof what, "tensor '%s' upper-bound node", t->name);
        r_check(&r, t->upper, -1, e->nnodes, what, a2);
        t->const_off = r_u64(&r, "const offset");
        t->const_bytes = r_u64(&r, "const bytes");
        a2 = r.at;
        t->alias_of = r_i32(&r, "alias_of");
        snprintf(what, sizeof what, "tensor '%s' alias_of", t->name);
        r_check(&r, t->alias_of, -1, (int64_t)n, what, a2);
        if (!r.err && t->alias_of == (int32_t)i) {
            r.at = a2;
            r_fail(&r, "tensor aliases itself");
        }
        t->first = r_i32(&r, "first layer");
        t->last = r_i32(&r, "last layer");
        a2 = r.at;
        t->is_size = r_i32(&r, "is_size");
        snprintf(what, sizeof what, "tensor '%s' is_size", t->name);
        r_check(&r, t->is_size, 0, 2, what, a2);
        t->plan_off = r_u64(&r, "plan offset");
        t->plan_bytes = r_u64(&r, "plan bytes");
    }
    r_end(&r);
    return r.err;
}

static int32_t *r_indices(rd *r, int32_t n, int32_t lo, int32_t hi, const char *what) {
    int32_t *v = kiln__calloc(n ? (size_t)n : 1, sizeof *v);
    if (!v) {
        if (!r->err) r->err = kiln__err(KILN_ENOMEM, "out of memory reading %s", what);
        return NULL;
    }
    for (int32_t k = 0; k < n && !r->err; k++) {
        size_t at = r->at;
        v[k] = r_i32(r, what);
        r_check(r, v[k], lo, hi, what, at);
    }
    return v;
}

static int parse_layers(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_LAYERS);
    uint32_t n = r_count(&r, 12 + 12 + 4 + 8 + 8 + 8, 1u << 24, "layer count");
    if (r.err) return r.err;
    e->layers = kiln__calloc(n ? n : 1, sizeof *e->layers);
    if (!e->layers) return kiln__err(KILN_ENOMEM, "out of memory: %u layers", n);
    e->nlayers = (int32_t)n;
    for (uint32_t i = 0; i < n; i++) e->layers[i].aot_kernel = -1;
    for (uint32_t i = 0; i < n && !r.err; i++) {
        kiln__elayer *l = &e->layers[i];
        char what[128];
        l->name = r_str(&r, "layer name");
        l->op_ns = r_str(&r, "layer op namespace");
        l->op_name = r_str(&r, "layer op name");
        if (r.err) break;
        if (!l->op_ns) l->op_ns = kiln__strdup("");
        if (!l->op_name) l->op_name = kiln__strdup("");
        if (!l->name) l->name = kiln__strdup("");
        if (!l->op_ns || !l->op_name || !l->name)
            return kiln__err(KILN_ENOMEM, "out of memory reading layers");
        l->op_version = r_i32(&r, "op version");
        size_t at = r.at;
        l->nin = r_i32(&r, "layer input count");
        snprintf(what, sizeof what, "layer '%s' input count", l->name);
        r_check(&r, l->nin, 0, KILN_MAX_IO + 1, what, at);
        at = r.at;
        l->nout = r_i32(&r, "layer output count");
        snprintf(what, sizeof what, "layer '%s' output count", l->name);
        r_check(&r, l->nout, 0, KILN_MAX_IO + 1 - (l->nin > 0 ? l->nin : 0), what, at);
        if (r.err) break;
        snprintf(what, sizeof what, "layer '%s' input tensor", l->name);
        l->in = r_indices(&r, l->nin, -1, e->ntensors, what);
        snprintf(what, sizeof what, "layer '%s' output tensor", l->name);
        l->out = r_indices(&r, l->nout, 0, e->ntensors, what);
        at = r.at;
        l->io.n = r_i32(&r, "io format count");
        snprintf(what, sizeof what, "layer '%s' io format count", l->name);
        if (!r_check(&r, l->io.n, 0, KILN_MAX_IO + 1, what, at)) break;
        for (int k = 0; k < l->io.n && !r.err; k++) {
            at = r.at;
            uint32_t dt = r_u8(&r, "io dtype"), fm = r_u8(&r, "io format");
            if (r.err) break;
            if (dt != KILN_DTYPE_UNDEFINED && !dtype_ok(dt)) {
                snprintf(what, sizeof what, "layer '%s' io %d: invalid dtype %u", l->name, k, dt);
                r.at = at;
                r_fail(&r, what);
                break;
            }
            snprintf(what, sizeof what, "layer '%s' io %d format", l->name, k);
            r_check(&r, fm, 0, KILN_FORMAT_COUNT_, what, at + 1);
            l->io.dtype[k] = (kiln_dtype)dt;
            l->io.format[k] = (kiln_format)fm;
        }
        l->tactic = r_i32(&r, "tactic");
        at = r.at;
        l->aot_kernel = r_i32(&r, "aot kernel");
        snprintf(what, sizeof what, "layer '%s' AOT kernel index", l->name);
        r_check(&r, l->aot_kernel, -1, INT32_MAX, what, at); /* vs naot after AOT parse */
        at = r.at;
        l->blob_size = r_u64(&r, "attribute blob size");
        if (!r.err && l->blob_size > r.n - r.at) {
            snprintf(what, sizeof what, "layer '%s' attribute blob of %llu bytes, %zu left",
                     l->name, (unsigned long long)l->blob_size, r.n - r.at);
            r.at = at;
            r_fail(&r, what);
            break;
        }
        l->blob = r_bytes(&r, l->blob_size, "attribute blob");
        l->time_ms = r_f64(&r, "time");
    }
    r_end(&r);
    return r.err;
}

/* A count that must be n, then n device kinds (u8 each) stored at
 * first[i * stride]; `what` names the records ("tensor", "layer"). */
static void r_devices(rd *r, int32_t n, uint8_t *first, size_t stride, const char *what) {
    char m[64];
    size_t at = r->at;
    snprintf(m, sizeof m, "%s count", what);
    uint32_t k = r_u32(r, m);
    r_check(r, k, n, (int64_t)n + 1, m, at);
    snprintf(m, sizeof m, "%s device", what);
    for (uint32_t i = 0; i < k && !r->err; i++) {
        at = r->at;
        uint32_t v = r_u8(r, m);
        if (r_check(r, v, KILN_DEVICE_CPU, KILN_DEVICE_CUDA + 1, m, at)) first[i * stride] = (uint8_t)v;
    }
}

/* DEVICE: where each tensor lives and each layer runs (CUDA engines). */
static int parse_device(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_DEVICE);
    e->device = KILN_DEVICE_CUDA;
    e->cuda_sig = r_str(&r, "GPU signature");
    size_t at = r.at;
    uint32_t tf = r_u32(&r, "tf32 flag");
    r_check(&r, tf, 0, 2, "tf32 flag", at);
    e->allow_tf32 = (int32_t)tf;
    r_devices(&r, e->ntensors, &e->tensors[0].loc, sizeof e->tensors[0], "tensor");
    r_devices(&r, e->nlayers, &e->layers[0].device, sizeof e->layers[0], "layer");
    r_end(&r);
    return r.err;
}

/* FUSION: epilogue chains; every count, index and length checked here,
 * op identities and constant shapes in kiln__epi_prepare. */
static int parse_fusion(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_FUSION);
    uint32_t n = r_count(&r, 8, (uint32_t)e->nlayers, "fused layer count");
    for (uint32_t i = 0; i < n && !r.err; i++) {
        char what[160];
        size_t at = r.at;
        int32_t li = r_i32(&r, "fused layer index");
        if (!r_check(&r, li, 0, e->nlayers, "fused layer index", at)) break;
        kiln__elayer *l = &e->layers[li];
        if (l->nepi) {
            r.at = at;
            snprintf(what, sizeof what, "layer '%s' has two fused epilogue chains", l->name);
            r_fail(&r, what);
            break;
        }
        at = r.at;
        uint32_t ne = r_u32(&r, "fused op count");
        snprintf(what, sizeof what, "layer '%s' fused op count", l->name);
        if (!r_check(&r, ne, 1, KILN__MAX_EPI + 1, what, at)) break;
        l->epi = kiln__calloc(ne, sizeof *l->epi);
        if (!l->epi) {
            r.err = kiln__err(KILN_ENOMEM, "out of memory reading fused ops");
            break;
        }
        l->nepi = (int32_t)ne;
        for (uint32_t k = 0; k < ne && !r.err; k++) {
            kiln__eepi *p = &l->epi[k];
            p->op_ns = r_str(&r, "fused op namespace");
            p->op_name = r_str(&r, "fused op name");
            if (r.err) break;
            if (!p->op_ns || !p->op_name) {
                if (!p->op_ns) p->op_ns = kiln__strdup("");
                if (!p->op_name) p->op_name = kiln__strdup("");
                if (!p->op_ns || !p->op_name) {
                    r.err = kiln__err(KILN_ENOMEM, "out of memory reading fused ops");
                    break;
                }
            }
            p->op_version = r_i32(&r, "fused op version");
            at = r.at;
            p->nin = r_i32(&r, "fused op input count");
            snprintf(what, sizeof what, "layer '%s' fused op %s input count", l->name, p->op_name);
            if (!r_check(&r, p->nin, 1, KILN__EPI_MAX_IN + 1, what, at)) break;
            at = r.at;
            p->x = r_i32(&r, "fused op activation slot");
            snprintf(what, sizeof what, "layer '%s' fused op %s activation slot", l->name, p->op_name);
            if (!r_check(&r, p->x, 0, p->nin, what, at)) break;
            snprintf(what, sizeof what, "layer '%s' fused op %s input tensor", l->name, p->op_name);
            for (int32_t j = 0; j < p->nin && !r.err; j++) {
                at = r.at;
                p->in[j] = r_i32(&r, what);
                r_check(&r, p->in[j], -1, e->ntensors, what, at);
            }
            at = r.at;
            p->blob_size = r_u64(&r, "fused op attribute blob size");
            if (!r.err && p->blob_size > r.n - r.at) {
                snprintf(what, sizeof what, "layer '%s' fused op %s attribute blob of %llu bytes, %zu left",
                         l->name, p->op_name, (unsigned long long)p->blob_size, r.n - r.at);
                r.at = at;
                r_fail(&r, what);
                break;
            }
            p->blob = r_bytes(&r, p->blob_size, "fused op attribute blob");
        }
    }
    r_end(&r);
    return r.err;
}

/* Each entry names a distinct input-dim symbol node. */
static int parse_dimnames(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_DIMNAMES);
    uint32_t n = r_count(&r, 8, (uint32_t)e->nnodes, "dim name count");
    if (!r.err && n) {
        e->dimnames = kiln__calloc(n, sizeof *e->dimnames);
        if (!e->dimnames) return kiln__err(KILN_ENOMEM, "out of memory reading dim names");
    }
    for (uint32_t i = 0; i < n && !r.err; i++) {
        size_t at = r.at;
        int32_t node = r_i32(&r, "dim name node");
        if (!r_check(&r, node, 0, e->nnodes, "dim name node", at)) break;
        const kiln__enode *x = &e->nodes[node];
        int dup = 0;
        for (int32_t k = 0; k < e->ndimnames; k++) dup |= e->dimnames[k].node == node;
        if (x->op != KILN_EXPR_SYM || x->symkind != KILN__SYM_INPUT_DIM || dup) {
            r.at = at;
            r_fail(&r, dup ? "dim name node named twice" : "dim name node is not an input dim symbol");
            break;
        }
        char *name = r_str(&r, "dim name");
        if (r.err) break;
        if (!name) name = kiln__strdup("");
        if (!name) return kiln__err(KILN_ENOMEM, "out of memory reading dim names");
        e->dimnames[e->ndimnames].node = node;
        e->dimnames[e->ndimnames++].name = name;
    }
    r_end(&r);
    return r.err;
}

/* PACKED: the table is checked here (layer, input, offsets and sizes
 * inside the section, ascending, gaps zero), each size against what the
 * op packs for its layer in kiln__engine_prepare (engine.c).  Bytes packed
 * for another layout are left unused: the layers pack at load.  `copy`:
 * the image is not kept (kiln_engine_load_memory), copy the bytes. */
static int parse_packed(kiln_engine *e, const secinfo *s, int copy) {
    rd r;
    rd_init(&r, s, SEC_PACKED);
    char *layout = r_str(&r, "packed layout");
    uint64_t maxn = 0;
    for (int32_t i = 0; i < e->nlayers; i++) maxn += (uint64_t)e->layers[i].nin;
    uint32_t n = r_count(&r, 24, (uint32_t)(maxn < UINT32_MAX ? maxn : UINT32_MAX), "packed input count");
    const int same = layout && !strcmp(layout, kiln__prepack_layout());
    int packed_only = 0;
    for (int32_t t = 0; t < e->ntensors; t++) packed_only += e->tensors[t].const_off == KILN__CONST_PACKED_ONLY;
    if (!r.err && !same && packed_only) {
        r.err = kiln__err(KILN_EFORMAT, "engine stores %d constant%s only packed for the kernel layout \"%s\"; "
                          "this kiln packs as \"%s\": rebuild the engine with this kiln", packed_only,
                          packed_only == 1 ? "" : "s", layout ? layout : "", kiln__prepack_layout());
        kiln__free(layout);
        return r.err;
    }
    if (!r.err && !same)
        kiln__log(KILN_LOG_WARN, "engine packed its weights for \"%s\", this kiln packs as \"%s\": "
                  "packing them at load (rebuild the engine here to load faster)",
                  layout ? layout : "", kiln__prepack_layout());
    kiln__free(layout);
    if (r.err) return r.err;
    const size_t table_end = r.at + (size_t)n * 24;
    uint64_t prev_end = table_end;
    int64_t prev = -1;
    for (uint32_t i = 0; i < n && !r.err; i++) {
        char what[160];
        size_t at = r.at;
        int32_t li = r_i32(&r, "packed layer");
        if (!r_check(&r, li, 0, e->nlayers, "packed layer", at)) break;
        kiln__elayer *l = &e->layers[li];
        int32_t k = r_i32(&r, "packed input");
        snprintf(what, sizeof what, "layer '%s' packed input", l->name);
        if (!r_check(&r, k, 0, l->nin, what, at + 4)) break;
        uint64_t off = r_u64(&r, "packed offset"), size = r_u64(&r, "packed size");
        if (r.err) break;
        const char *bad = (int64_t)li * (KILN_MAX_IO + 1) + k <= prev ? "not after the previous one"
                          : size == 0                          ? "empty"
                          : off % 64                          ? "offset not 64-byte aligned"
                          : off < prev_end                    ? "overlaps the table or the previous one"
                          : off > s->size || size > s->size - off ? "past the section's end"
                          : NULL;
        if (bad) {
            snprintf(what, sizeof what, "layer '%s' input %d: packed bytes at %llu + %llu (section of %llu "
                     "bytes): %s", l->name, (int)k, (unsigned long long)off, (unsigned long long)size,
                     (unsigned long long)s->size, bad);
            r.at = at;
            r_fail(&r, what);
            break;
        }
        for (uint64_t g = prev_end; g < off && !r.err; g++)
            if (s->p[g]) {
                r.at = (size_t)g;
                r_fail(&r, "nonzero padding byte between packed inputs");
            }
        prev = (int64_t)li * (KILN_MAX_IO + 1) + k;
        prev_end = off + size;
        if (!same || r.err) continue;
        if (!l->prepacked) {
            l->prepacked = kiln__calloc((size_t)l->nin, sizeof *l->prepacked);
            l->prepacked_size = kiln__calloc((size_t)l->nin, sizeof *l->prepacked_size);
            if (!l->prepacked || !l->prepacked_size)
                return kiln__err(KILN_ENOMEM, "out of memory reading packed inputs");
        }
        l->prepacked[k] = (void *)(uintptr_t)off; /* made a pointer below */
        l->prepacked_size[k] = size;
        l->prepacked_stored |= 1ull << k;
    }
    if (!r.err && prev_end != s->size) {
        r.at = (size_t)prev_end;
        r_fail(&r, "bytes after the last packed input");
    }
    if (r.err || !same || !n) return r.err;
    if (copy) {
        e->packed = kiln__aligned_alloc((size_t)s->size);
        if (!e->packed)
            return kiln__err(KILN_ENOMEM, "out of memory: %llu bytes of packed weights",
                             (unsigned long long)s->size);
        e->packed_owned = 1;
        memcpy(e->packed, s->p, (size_t)s->size);
    } else {
        e->packed = (uint8_t *)s->p;
    }
    e->packed_size = s->size;
    for (int32_t i = 0; i < e->nlayers; i++)
        for (int32_t k = 0; k < e->layers[i].nin; k++)
            if (e->layers[i].prepacked_stored >> k & 1)
                e->layers[i].prepacked[k] = e->packed + (uintptr_t)e->layers[i].prepacked[k];
    return 0;
}

static int parse_io(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_IO);
    uint32_t n = r_count(&r, 4, 1u << 20, "input count");
    e->ninputs = (int32_t)n;
    e->inputs = r_indices(&r, (int32_t)n, 0, e->ntensors, "input tensor");
    n = r_count(&r, 4, 1u << 20, "output count");
    e->noutputs = (int32_t)n;
    e->outputs = r_indices(&r, (int32_t)n, 0, e->ntensors, "output tensor");
    r_end(&r);
    return r.err;
}

static int parse_profiles(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_PROFILES);
    size_t at = r.at;
    uint32_t n = r_count(&r, 3 * KILN_MAX_DIMS * 8, 1u << 20, "profile count");
    if (r.err) return r.err;
    if (n && n != (uint32_t)e->ninputs) {
        char m[96];
        snprintf(m, sizeof m, "%u profiles for %d inputs", n, (int)e->ninputs);
        r.at = at;
        return r_fail(&r, m);
    }
    if (n) {
        e->prof = kiln__calloc(n, sizeof *e->prof);
        if (!e->prof) return kiln__err(KILN_ENOMEM, "out of memory reading profiles");
    }
    for (uint32_t i = 0; i < n && !r.err; i++)
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < KILN_MAX_DIMS; d++) e->prof[i][k][d] = r_i64(&r, "profile dim");
    for (uint32_t i = 0; i < n && !r.err; i++)
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            if (e->prof[i][0][d] > e->prof[i][1][d] || e->prof[i][1][d] > e->prof[i][2][d]) {
                char m[128];
                snprintf(m, sizeof m, "profile of input %u dim %d: min %lld, opt %lld, max %lld",
                         i, d, (long long)e->prof[i][0][d], (long long)e->prof[i][1][d],
                         (long long)e->prof[i][2][d]);
                r.at = 4 + (size_t)i * 3 * KILN_MAX_DIMS * 8;
                r_fail(&r, m);
            }
    r_end(&r);
    return r.err;
}

static int parse_aot(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_AOT);
    uint32_t n = r_count(&r, 8, 1u << 20, "AOT kernel count");
    if (r.err) return r.err;
    if (n) {
        e->aot = kiln__calloc(n, sizeof *e->aot);
        if (!e->aot) return kiln__err(KILN_ENOMEM, "out of memory reading AOT kernels");
    }
    for (uint32_t i = 0; i < n && !r.err; i++) {
        size_t at = r.at;
        uint64_t sz = r_u64(&r, "AOT record size");
        if (r.err) break;
        if (sz > r.n - r.at) {
            r.at = at;
            r_fail(&r, "AOT record larger than the section");
            break;
        }
        int rc = kiln__aot_deserialize(&e->aot[i], r.p + r.at, (size_t)sz, e->nnodes);
        e->naot = (int32_t)i + 1; /* freed by destroy from here on */
        if (rc)
            return kiln__err_prefix(rc, "section AOT (file offset %zu): kernel %u",
                                    r.base + r.at, i);
        r.at += (size_t)sz;
    }
    r_end(&r);
    return r.err;
}

static int parse_plugins(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_PLUGINS);
    uint32_t n = r_count(&r, 4 + 4 + 4 + 4 + 8, 1u << 20, "plugin count");
    if (r.err) return r.err;
    if (n) {
        e->plugins = kiln__calloc(n, sizeof *e->plugins);
        if (!e->plugins) return kiln__err(KILN_ENOMEM, "out of memory reading plugins");
    }
    e->nplugins = (int32_t)n;
    for (uint32_t i = 0; i < n && !r.err; i++) {
        kiln__plugin_ref *p = &e->plugins[i];
        p->ns = r_str(&r, "plugin namespace");
        p->name = r_str(&r, "plugin name");
        p->version = r_i32(&r, "plugin version");
        p->library = r_str(&r, "plugin library");
        size_t at = r.at;
        p->so_size = r_u64(&r, "embedded library size");
        if (!r.err && p->so_size > r.n - r.at) {
            r.at = at;
            r_fail(&r, "embedded library larger than the section");
            break;
        }
        p->so = r_bytes(&r, p->so_size, "embedded library");
        if (!r.err && (!p->ns || !p->name)) {
            r.at = at;
            r_fail(&r, "plugin with an empty namespace or name");
        }
    }
    r_end(&r);
    return r.err;
}

static int parse_meta(kiln_engine *e, const secinfo *s) {
    rd r;
    rd_init(&r, s, SEC_META);
    e->threads = (int32_t)r_u32(&r, "threads");
    size_t at = r.at;
    uint32_t dev = r_u32(&r, "device");
    r_check(&r, e->threads, 0, 4097, "threads", 0);
    r_check(&r, dev, KILN_DEVICE_CPU, KILN_DEVICE_CUDA + 1, "device", at);
    e->device = (kiln_device_kind)dev;
    e->host_id = r_u64(&r, "build host id");
    r_end(&r);
    return r.err;
}

static int xfail(const char *sec, uint64_t off, const char *fmt, const char *what) {
    return kiln__err(KILN_EFORMAT, "section %s (file offset %llu): %s%s", sec,
                     (unsigned long long)off, fmt, what);
}

/* Cross-references that need several sections. */
static int check_refs(kiln_engine *e, const secinfo *sec) {
    char m[200];
    for (int32_t i = 0; i < e->nnodes; i++) {
        const kiln__enode *x = &e->nodes[i];
        if (x->op != KILN_EXPR_SYM) continue;
        uint64_t off = sec[SEC_NODES].off + 4 + (uint64_t)i * 24;
        if (x->a < 0 || x->a >= e->ntensors) {
            snprintf(m, sizeof m, "node %d: symbol bound to tensor %d, engine has %d", (int)i,
                     (int)x->a, (int)e->ntensors);
            return xfail("NODES", off, m, "");
        }
        const kiln__etensor *t = &e->tensors[x->a];
        if (x->symkind == KILN__SYM_INPUT_DIM &&
            (t->kind != KILN__ET_INPUT || x->b < 0 || x->b >= t->ndim)) {
            snprintf(m, sizeof m, "node %d: input dim %d of tensor '%s' (kind %d, %d dims)",
                     (int)i, (int)x->b, t->name, t->kind, t->ndim);
            return xfail("NODES", off, m, "");
        }
        if (x->symkind == KILN__SYM_SIZE && !t->is_size) {
            snprintf(m, sizeof m, "node %d: size symbol bound to '%s', not a size tensor",
                     (int)i, t->name);
            return xfail("NODES", off, m, "");
        }
        if (x->symkind == KILN__SYM_VALUE &&
            (t->kind != KILN__ET_INPUT ||
             (t->dtype != KILN_DTYPE_I32 && t->dtype != KILN_DTYPE_I64) || x->b < 0)) {
            snprintf(m, sizeof m, "node %d: value symbol bound to element %d of '%s'",
                     (int)i, (int)x->b, t->name);
            return xfail("NODES", off, m, "");
        }
    }
    for (int32_t i = 0; i < e->ntensors; i++) {
        const kiln__etensor *t = &e->tensors[i];
        if (t->kind == KILN__ET_CONST && t->const_off != KILN__CONST_PACKED_ONLY &&
            (t->const_off > e->weights_size || t->const_bytes > e->weights_size - t->const_off)) {
            snprintf(m, sizeof m, "constant '%s' at weights offset %llu + %llu bytes, weights are %llu bytes",
                     t->name, (unsigned long long)t->const_off, (unsigned long long)t->const_bytes,
                     (unsigned long long)e->weights_size);
            return xfail("TENSORS", sec[SEC_TENSORS].off, m, "");
        }
        if (t->first < -1 || t->first > e->nlayers || t->last < -1 || t->last > e->nlayers) {
            snprintf(m, sizeof m, "tensor '%s' lifetime %d..%d, engine has %d layers", t->name,
                     (int)t->first, (int)t->last, (int)e->nlayers);
            return xfail("TENSORS", sec[SEC_TENSORS].off, m, "");
        }
        if (t->is_size && (t->ndim != 0 || t->dtype != KILN_DTYPE_I64)) {
            snprintf(m, sizeof m, "size tensor '%s' is not a 0-D i64", t->name);
            return xfail("TENSORS", sec[SEC_TENSORS].off, m, "");
        }
        /* Alias chains end (no cycles) within ntensors steps. */
        int32_t a = t->alias_of;
        for (int32_t k = 0; a >= 0 && k <= e->ntensors; k++) a = e->tensors[a].alias_of;
        if (a >= 0) {
            snprintf(m, sizeof m, "tensor '%s': alias cycle", t->name);
            return xfail("TENSORS", sec[SEC_TENSORS].off, m, "");
        }
    }
    for (int32_t t = 0; t < e->ntensors; t++) {
        if (e->tensors[t].kind != KILN__ET_INPUT) continue;
        int found = 0;
        for (int32_t i = 0; i < e->ninputs && !found; i++) found = e->inputs[i] == t;
        if (!found) {
            snprintf(m, sizeof m, "input tensor '%s' is not among the engine inputs",
                     e->tensors[t].name);
            return xfail("IO", sec[SEC_IO].off, m, "");
        }
    }
    for (int32_t i = 0; i < e->ninputs; i++)
        if (e->tensors[e->inputs[i]].kind != KILN__ET_INPUT) {
            snprintf(m, sizeof m, "input %d is tensor '%s', not an input tensor", (int)i,
                     e->tensors[e->inputs[i]].name);
            return xfail("IO", sec[SEC_IO].off, m, "");
        }
    for (int32_t i = 0; i < e->nlayers; i++) {
        const kiln__elayer *l = &e->layers[i];
        if (l->aot_kernel >= kiln__layer_aot_count(e, l)) {
            snprintf(m, sizeof m, "layer '%s' uses %sAOT kernel %d, engine has %d", l->name,
                     l->device == KILN_DEVICE_CUDA ? "CUDA " : "", (int)l->aot_kernel,
                     (int)kiln__layer_aot_count(e, l));
            return xfail("LAYERS", sec[SEC_LAYERS].off, m, "");
        }
        if (l->aot_kernel >= 0 && l->device == KILN_DEVICE_CUDA &&
            e->acu[l->aot_kernel].nptr != l->nin + l->nout) {
            snprintf(m, sizeof m, "layer '%s' has %d inputs and outputs, its AOT CUDA kernel %d takes %d pointers",
                     l->name, (int)(l->nin + l->nout), (int)l->aot_kernel, (int)e->acu[l->aot_kernel].nptr);
            return xfail("AOTCUDA", sec[SEC_AOTCUDA].off, m, "");
        }
        if (l->io.n != 0 && l->io.n != l->nin + l->nout) {
            snprintf(m, sizeof m, "layer '%s' has %d io formats for %d positions", l->name,
                     (int)l->io.n, (int)(l->nin + l->nout));
            return xfail("LAYERS", sec[SEC_LAYERS].off, m, "");
        }
        for (int32_t k = 0; k < l->nout; k++) {
            const kiln__etensor *t = &e->tensors[l->out[k]];
            if (t->kind == KILN__ET_INPUT || t->kind == KILN__ET_CONST) {
                snprintf(m, sizeof m, "layer '%s' writes %s tensor '%s'", l->name,
                         t->kind == KILN__ET_INPUT ? "input" : "constant", t->name);
                return xfail("LAYERS", sec[SEC_LAYERS].off, m, "");
            }
        }
    }
    return 0;
}

/* Every feature the engine was built for must be present here; the
 * architecture must match. */
static int device_ok(const char *built, const char *here) {
    const char *bc = strchr(built, ':'), *hc = strchr(here, ':');
    size_t ba = bc ? (size_t)(bc - built) : strlen(built);
    size_t ha = hc ? (size_t)(hc - here) : strlen(here);
    if (ba != ha || memcmp(built, here, ba)) return 0;
    if (!bc) return 1;
    const char *f = bc + 1;
    while (*f) {
        const char *end = strchr(f, ',');
        size_t fl = end ? (size_t)(end - f) : strlen(f);
        int found = 0;
        for (const char *g = hc ? hc + 1 : ""; *g && !found;) {
            const char *ge = strchr(g, ',');
            size_t gl = ge ? (size_t)(ge - g) : strlen(g);
            if (gl == fl && !memcmp(f, g, fl)) found = 1;
            g += gl + (ge ? 1 : 0);
        }
        if (fl && !found) return 0;
        f += fl + (end ? 1 : 0);
    }
    return 1;
}

unsigned kiln__file_version(void) { return KILN__FILE_VERSION; }

/* The version check, the single place that knows which versions load. */
static int version_ok(uint32_t ver) {
    if (ver == KILN__FILE_VERSION) return 0;
    return kiln__err(KILN_EVERSION,
                     "engine file format version %u, this kiln reads version %u: %s", ver,
                     KILN__FILE_VERSION,
                     ver < KILN__FILE_VERSION ? "the file is older, rebuild the engine with this kiln"
                                              : "the file is newer, use the kiln that built it or rebuild");
}

KILN_API int kiln_engine_has_code(const kiln_engine *e) {
    if (!e) return 0;
    if (e->naot > 0 || e->nacu > 0) return 1;
    for (int32_t i = 0; i < e->nplugins; i++)
        if (e->plugins[i].so_size) return 1;
    return 0;
}

/* The options of the engine being prepared on this thread, for engines it
 * loads itself (sub-engines); NULL outside a load. */
static __thread const kiln_load_options *t_nested;

/* Native code runs only by the caller's choice (kiln_load_options). */
static int trust_ok(const kiln_engine *e, const kiln_load_options *opt, int verified) {
    if (!kiln_engine_has_code(e) || verified) return 0;
    int32_t nso = 0;
    for (int32_t i = 0; i < e->nplugins; i++) nso += e->plugins[i].so_size > 0;
    char what[128], cu[40] = "";
    if (e->nacu) snprintf(cu, sizeof cu, ", %d AOT CUDA kernel%s", (int)e->nacu, e->nacu == 1 ? "" : "s");
    snprintf(what, sizeof what, "%d AOT kernel%s%s and %d embedded plugin librar%s", (int)e->naot,
             e->naot == 1 ? "" : "s", cu, (int)nso, nso == 1 ? "y" : "ies");
    if (opt->code == KILN_CODE_ALLOW) return 0;
    if (opt->code == KILN_CODE_LOCAL) {
        if (e->host_id == kiln__host_id()) return 0;
        return kiln__err(KILN_ETRUST,
                         "engine carries native code (%s) and was built on another machine: "
                         "load it only if you trust the file (kiln run --allow-code, "
                         "KILN_CODE_ALLOW) or verify its signature (--verify PUBKEY)", what);
    }
    return kiln__err(KILN_ETRUST,
                     "engine carries native code (%s) and code is not allowed (KILN_CODE_DENY): "
                     "allow it (--allow-code, KILN_CODE_ALLOW) or verify a signature (--verify PUBKEY)",
                     what);
}

/* Parse and verify a whole file image.  `weights_in_place`: point the
 * weights into `p` (the mapping) instead of copying them. */
static int parse_image(const uint8_t *p, size_t n, int weights_in_place, const kiln_load_options *opt,
                       kiln_engine *e) {
    if (n < 8 || memcmp(p, FILE_MAGIC "", 8) != 0)
        return kiln__err(KILN_EFORMAT,
                         "not a kiln engine file (%zu bytes; expected magic \"KILNENG\" at offset 0)", n);
    if (n < HDR_FIXED)
        return kiln__err(KILN_EFORMAT, "engine file truncated: %zu bytes, the header alone is %u",
                         n, HDR_FIXED);
    rd h;
    kiln__r_init(&h, p, n, "section");
    h.name = "header";
    h.unit = "file offset";
    h.at = 8;
    int rc = version_ok(r_u32(&h, "version"));
    if (rc) return rc;
    uint32_t hsize = r_u32(&h, "header size"), flags = r_u32(&h, "flags");
    uint32_t nsec = r_u32(&h, "section count"), siglen = r_u32(&h, "signature length");
    uint32_t resv = r_u32(&h, "reserved");
    uint64_t hck = r_u64(&h, "header checksum");
    uint64_t need = HDR_FIXED + (((uint64_t)siglen + 7) & ~7ull) + (uint64_t)nsec * SEC_ENTRY;
    if (nsec > 64 || siglen > 4096 || hsize != need)
        return kiln__err(KILN_EFORMAT,
                         "header (offset 12): header size %u, %u sections, signature of %u bytes "
                         "(expected header size %llu)",
                         hsize, nsec, siglen, (unsigned long long)need);
    if (hsize > n)
        return kiln__err(KILN_EFORMAT, "engine file truncated: %zu bytes, header needs %u", n, hsize);
    {
        uint8_t *tmp = kiln__malloc(hsize);
        if (!tmp) return kiln__err(KILN_ENOMEM, "out of memory");
        memcpy(tmp, p, hsize);
        memset(tmp + 32, 0, 8);
        uint64_t c = ck64(tmp, hsize);
        kiln__free(tmp);
        if (c != hck)
            return kiln__err(KILN_ECHECKSUM, "header (offset 0, %u bytes): checksum mismatch",
                             hsize);
    }
    if (flags || resv)
        return kiln__err(KILN_EFORMAT, "header (offset 16): unknown flags 0x%x", flags | resv);
    char sig[4097];
    memcpy(sig, p + HDR_FIXED, siglen);
    sig[siglen] = 0;
    if (memchr(sig, 0, siglen))
        return kiln__err(KILN_EFORMAT, "header (offset %u): device signature holds a NUL", HDR_FIXED);

    secinfo sec[SEC_COUNT_];
    memset(sec, 0, sizeof sec);
    h.at = HDR_FIXED + ((siglen + 7u) & ~7u);
    uint64_t end = hsize;
    for (uint32_t i = 0; i < nsec; i++) {
        size_t at = h.at;
        uint32_t id = r_u32(&h, "section id"), z = r_u32(&h, "section reserved");
        uint64_t off = r_u64(&h, "section offset"), size = r_u64(&h, "section size");
        uint64_t ck = r_u64(&h, "section checksum");
        if (id == 0 || id >= SEC_COUNT_ || sec[id].present || z)
            return kiln__err(KILN_EFORMAT, "section table entry %u (offset %zu): id %u %s", i,
                             at, id, id && id < SEC_COUNT_ ? "repeated" : "unknown");
        if (off < end || off > n || size > n - off || off % 64)
            return kiln__err(KILN_EFORMAT,
                             "section %s (table entry at offset %zu): offset %llu, %llu bytes; "
                             "file is %zu bytes, previous section ends at %llu",
                             sec_name(id), at, (unsigned long long)off, (unsigned long long)size,
                             n, (unsigned long long)end);
        for (uint64_t g = end; g < off; g++)
            if (p[g])
                return kiln__err(KILN_EFORMAT, "nonzero padding byte at offset %llu",
                                 (unsigned long long)g);
        if (weights_in_place && (id == SEC_WEIGHTS || id == SEC_PACKED) && size >= LAZY_CHECK_MIN) {
            if ((rc = kiln__data_check_add(e, p + off, size, ck, sec_name(id), off))) return rc;
        } else if (ck64(p + off, (size_t)size) != ck) {
            return kiln__err(KILN_ECHECKSUM, "section %s (offset %llu, %llu bytes): checksum mismatch",
                             sec_name(id), (unsigned long long)off, (unsigned long long)size);
        }
        sec[id].p = p + off;
        sec[id].off = off;
        sec[id].size = size;
        sec[id].present = 1;
        end = off + size;
    }
    if (end != n)
        return kiln__err(KILN_EFORMAT, "engine file has %llu bytes after its last section (file is %zu bytes)",
                         (unsigned long long)(n - end), n);
    for (int s = 1; s < SEC_COUNT_; s++)
        if (!sec[s].present && !sec_optional(s))
            return kiln__err(KILN_EFORMAT, "engine file lacks section %s", sec_name((uint32_t)s));
    int verified = 0;
    if (sec[SEC_SIGNATURE].present) {
        /* Last in the table and in the file, of a fixed size. */
        uint64_t ent = hsize - SEC_ENTRY;
        if (sec[SEC_SIGNATURE].size != KILN__SIG_SECTION || kiln__ld64le(p + ent) != SEC_SIGNATURE ||
            sec[SEC_SIGNATURE].off + KILN__SIG_SECTION != n)
            return kiln__err(KILN_EFORMAT,
                             "section SIGNATURE (offset %llu): %llu bytes, expected %u bytes as the "
                             "last section", (unsigned long long)sec[SEC_SIGNATURE].off,
                             (unsigned long long)sec[SEC_SIGNATURE].size, KILN__SIG_SECTION);
    }
    if (opt->verify_key) {
        if (!sec[SEC_SIGNATURE].present)
            return kiln__err(KILN_ETRUST, "engine is not signed, and a signature was required "
                             "(build it with kiln build --sign KEY or kiln_engine_save_signed)");
        kiln__sig_skip skip = {{32, hsize - SEC_ENTRY + 24, (size_t)sec[SEC_SIGNATURE].off},
                               {8, 8, KILN__SIG_SECTION}};
        if ((rc = kiln__sig_verify(p, n, &skip, sec[SEC_SIGNATURE].p, opt->verify_key))) return rc;
        verified = 1;
    }
    e->signature = verified ? 2 : sec[SEC_SIGNATURE].present;

    const char *here = kiln_cpu_signature();
    if (!device_ok(sig, here))
        return kiln__err(KILN_EDEVICE,
                         "engine built for device \"%s\"; this machine is \"%s\": rebuild the engine here",
                         sig, here);
    e->device_sig = kiln__strdup(sig);
    if (!e->device_sig) return kiln__err(KILN_ENOMEM, "out of memory");

    if ((rc = parse_meta(e, &sec[SEC_META]))) return rc;
    if ((rc = parse_nodes(e, &sec[SEC_NODES]))) return rc;
    if ((rc = parse_tensors(e, &sec[SEC_TENSORS]))) return rc;
    if ((rc = parse_layers(e, &sec[SEC_LAYERS]))) return rc;
    if ((rc = parse_io(e, &sec[SEC_IO]))) return rc;
    if ((rc = parse_profiles(e, &sec[SEC_PROFILES]))) return rc;
    if ((rc = parse_aot(e, &sec[SEC_AOT]))) return rc;
    if ((rc = parse_plugins(e, &sec[SEC_PLUGINS]))) return rc;
    if (sec[SEC_FUSION].present && (rc = parse_fusion(e, &sec[SEC_FUSION]))) return rc;
    if (sec[SEC_DEVICE].present && (rc = parse_device(e, &sec[SEC_DEVICE]))) return rc;
    if (sec[SEC_DIMNAMES].present && (rc = parse_dimnames(e, &sec[SEC_DIMNAMES]))) return rc;
    if (sec[SEC_AOTCUDA].present) {
        rd r;
        rd_init(&r, &sec[SEC_AOTCUDA], SEC_AOTCUDA);
        if ((rc = kiln__aot_cuda_parse_section(e, &r))) return rc;
    }
    if (sec[SEC_PACKED].present && (rc = parse_packed(e, &sec[SEC_PACKED], !weights_in_place))) return rc;

    e->weights_size = sec[SEC_WEIGHTS].size;
    if (weights_in_place) {
        e->weights = (uint8_t *)sec[SEC_WEIGHTS].p;
    } else if (e->weights_size) {
        e->weights = kiln__aligned_alloc((size_t)e->weights_size);
        if (!e->weights) return kiln__err(KILN_ENOMEM, "out of memory: %llu bytes of weights",
                                          (unsigned long long)e->weights_size);
        e->weights_owned = 1;
        memcpy(e->weights, sec[SEC_WEIGHTS].p, (size_t)e->weights_size);
    }
    for (int32_t t = 0; t < e->ntensors; t++)
        e->tensors[t].packed_only = e->tensors[t].const_off == KILN__CONST_PACKED_ONLY;
    if ((rc = kiln__engine_map_unread(e))) return rc;
    if ((rc = check_refs(e, sec))) return rc;
    if ((rc = kiln__engine_validate(e))) return rc;
    if ((rc = trust_ok(e, opt, verified))) return rc;
    /* Sub-engines (Loop/Scan bodies) load while their layer is prepared:
     * they inherit this engine's decision, since its signature covers them. */
    kiln_load_options inner = {.code = verified || opt->code == KILN_CODE_ALLOW ? KILN_CODE_ALLOW : opt->code};
    const kiln_load_options *outer = t_nested;
    t_nested = &inner;
    rc = kiln__engine_prepare(e);
    t_nested = outer;
    return rc ? rc : kiln__engine_check_packed_only(e);
}

static const kiln_load_options default_opts;

/* The caller's options, checked before any byte of the engine is read: an
 * unknown code policy is a caller's mistake, not a stricter DENY. */
static int options_ok(const kiln_load_options *opt) {
    if ((unsigned)opt->code > (unsigned)KILN_CODE_ALLOW)
        return kiln__err(KILN_EINVAL, "kiln_load_options.code is %d; expected KILN_CODE_LOCAL (0), "
                                      "KILN_CODE_DENY (1) or KILN_CODE_ALLOW (2)", (int)opt->code);
    return 0;
}

KILN_API int kiln_engine_load_memory_ex(const void *buf, size_t size, const kiln_load_options *opt,
                                        kiln_engine **out) {
    KILN__ARG(out, KILN_EINVAL);
    *out = NULL;
    if (!opt) opt = t_nested ? t_nested : &default_opts;
    if (options_ok(opt)) return KILN_EINVAL;
    if (!buf && size) return kiln__err(KILN_EINVAL, "engine buffer is NULL");
    kiln_engine *e = kiln__calloc(1, sizeof *e);
    if (!e) return kiln__err(KILN_ENOMEM, "out of memory");
    int rc = parse_image(buf ? buf : "", size, 0, opt, e);
    if (rc) {
        kiln__engine_destroy(e);
        return rc;
    }
    *out = e;
    return 0;
}

KILN_API int kiln_engine_load_memory(const void *buf, size_t size, kiln_engine **out) {
    return kiln_engine_load_memory_ex(buf, size, NULL, out);
}

KILN_API int kiln_engine_load_ex(const char *path, const kiln_load_options *opt, kiln_engine **out) {
    KILN__ARG(path && out, KILN_EINVAL);
    *out = NULL;
    if (!opt) opt = &default_opts;
    if (options_ok(opt)) return KILN_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln__err(KILN_EIO, "cannot open engine '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = kiln__err(KILN_EIO, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kiln__err(KILN_EIO, "'%s' is not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    void *map = NULL;
    if (n) {
        map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int rc = kiln__err(KILN_EIO, "cannot mmap '%s' (%zu bytes): %s", path, n,
                               strerror(errno));
            close(fd);
            return rc;
        }
    }
    close(fd);
    kiln_engine *e = kiln__calloc(1, sizeof *e);
    if (!e) {
        if (map) munmap(map, n);
        return kiln__err(KILN_ENOMEM, "out of memory");
    }
    e->map = map;
    e->map_size = n;
    int rc = parse_image(map ? map : "", n, 1, opt, e);
    if (rc) {
        kiln__err_prefix(rc, "engine '%s'", path);
        kiln__engine_destroy(e);
        return rc;
    }
    *out = e;
    return 0;
}

uint64_t kiln__file_checksum(const void *p, size_t n) { return ck64(p, n); }

void kiln__file_reseal(uint8_t *p, size_t n) {
    if (n < HDR_FIXED) return;
    uint32_t hsize, nsec, siglen;
    memcpy(&hsize, p + 12, 4);
    memcpy(&nsec, p + 20, 4);
    memcpy(&siglen, p + 24, 4);
    if (siglen > 4096 || nsec > 64) return;
    const size_t table = HDR_FIXED + ((siglen + 7u) & ~7u);
    for (uint32_t i = 0; i < nsec && table + SEC_ENTRY * (size_t)(i + 1) <= n; i++) {
        uint8_t *ent = p + table + SEC_ENTRY * (size_t)i;
        uint64_t off, size;
        memcpy(&off, ent + 8, 8);
        memcpy(&size, ent + 16, 8);
        if (off > n || size > n - off) continue;
        const uint64_t ck = ck64(p + off, (size_t)size);
        memcpy(ent + 24, &ck, 8);
    }
    if (hsize < HDR_FIXED || hsize > n) return;
    memset(p + 32, 0, 8);
    const uint64_t h = ck64(p, hsize);
    memcpy(p + 32, &h, 8);
}

KILN_API int kiln_engine_load(const char *path, kiln_engine **out) {
    return kiln_engine_load_ex(path, NULL, out);
}
