/*
 * builder.c — kiln_build: network -> engine.
 *
 * Passes, in order:
 *   1-3. shape.c: symbols for dynamic input dims (profiles), shape
 *      inference with constant folding and sub-network inlining, dead layers;
 *      pointwise_fold.c (HardSwish chains, a Conv's scale/shift) and
 *      rewrite patterns before the dead-layer pass: transformer.c
 *      (both devices), for the CPU mbconv_fuse.c (MobileNet blocks).
 *   4. select.c: type/format/tactic per layer, by timing (timing cache).
 *   5. emit.c: reformat and in-place copy layers, memory plan, engine.
 */
#include "builder.h"
#include "device/cuda/cuda_int.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ IR helpers */

/* Room for one more entry of a builder table (b->l, b->t).  A pointer
 * into the table does not survive this: `bl *L = &b->l[li]` held across
 * kiln__b_new_layer reads freed memory after a growth.  In sanitizer builds
 * every call moves the table, so such a pointer is a use-after-free that
 * ASan reports in CI, not a crash on the rare build whose growth happens
 * at the wrong moment (an NHWC FP16 PP-OCR build did, on the GPU only). */
static void *grow_table(void *p, int *cap, int n, size_t elem) {
#if defined(__SANITIZE_ADDRESS__)
    if (n < *cap) {
        void *q = kiln__malloc((size_t)*cap * elem);
        if (!q) {
            kiln__err(KILN_ENOMEM, "build: out of memory");
            return NULL;
        }
        memcpy(q, p, (size_t)n * elem);
        kiln__free(p);
        return q;
    }
#endif
    return kiln__grow(p, cap, n + 1, elem);
}

int kiln__b_new_tensor(builder *b, const char *name, bt_kind kind) {
    bt *n = grow_table(b->t, &b->capt, b->nt, sizeof *b->t);
    if (!n) return KILN_ENOMEM;
    b->t = n;
    bt *t = &b->t[b->nt];
    memset(t, 0, sizeof *t);
    t->name = kiln__strdup(name);
    if (!t->name) return kiln__err(KILN_ENOMEM, "build: out of memory");
    t->kind = kind;
    t->producer = -1;
    t->input_index = -1;
    t->alias_in = -1;
    t->nvalues = -1;
    t->eidx = -1;
    return b->nt++;
}

int kiln__b_new_layer(builder *b, const char *name, const kiln__op *op, int nin, int nout) {
    const uintptr_t was = (uintptr_t)b->l; /* (an integer: the old pointer may be freed) */
    bl *n = grow_table(b->l, &b->capl, b->nl, sizeof *b->l);
    if (!n) return KILN_ENOMEM;
    /* A layer's own attributes (reformats, rewritten layers) are pointed
     * at from inside the layer: when the table moved, they moved with it. */
    if ((uintptr_t)n != was)
        for (int i = 0; i < b->nl; i++)
            if (n[i].has_own) n[i].attrs = &n[i].own;
    b->l = n;
    bl *l = &b->l[b->nl];
    memset(l, 0, sizeof *l);
    l->name = kiln__strdup(name);
    l->in = kiln__malloc((size_t)(nin ? nin : 1) * sizeof *l->in);
    l->out = kiln__malloc((size_t)(nout ? nout : 1) * sizeof *l->out);
    if (!l->name || !l->in || !l->out) {
        kiln__free(l->name);
        kiln__free(l->in);
        kiln__free(l->out);
        return kiln__err(KILN_ENOMEM, "build: out of memory");
    }
    for (int i = 0; i < nin; i++) l->in[i] = -1;
    for (int i = 0; i < nout; i++) l->out[i] = -1;
    l->op = op;
    l->nin = nin;
    l->nout = nout;
    l->aot = -1;
    return b->nl++;
}

const bsym *kiln__b_find_sym(const builder *b, const kiln_expr *e) {
    for (int i = 0; i < b->nsym; i++)
        if (b->sym[i].e == e) return &b->sym[i];
    return NULL;
}

typedef struct eval_ud {
    builder *b;
    b_eval_mode mode;
    int upper_layer;
    int depth;
} eval_ud;

static int eval_cb(void *ud, const char *name, int64_t *v) {
    eval_ud *u = ud;
    builder *b = u->b;
    for (int i = 0; i < b->nsym; i++) {
        const bsym *s = &b->sym[i];
        if (strcmp(s->e->name, name) != 0) continue;
        if (s->kind == BS_SIZE) {
            if (u->depth > 32) return kiln__err(KILN_EINTERNAL, "build: size symbol '%s' nests too deep", name);
            int up = u->mode == BE_UPPER || (u->upper_layer >= 0 && b->t[s->t].producer == u->upper_layer);
            eval_ud inner = *u;
            inner.depth++;
            return kiln__expr_eval(up ? s->upper : s->opt, eval_cb, &inner, v);
        }
        *v = u->mode == BE_MIN ? s->vmin : u->mode == BE_MAX ? s->vmax : s->vopt;
        return 0;
    }
    return kiln__err(KILN_EINTERNAL, "build: unknown symbol '%s' in a shape expression", name);
}

int kiln__b_eval(builder *b, const kiln_expr *e, b_eval_mode mode, int upper_layer, int64_t *v) {
    eval_ud u = {b, mode, upper_layer, 0};
    return kiln__expr_eval(e, eval_cb, &u, v);
}

uint64_t kiln__b_rand(builder *b) {
    uint64_t x = b->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return b->rng = x;
}

const char *kiln__b_dtype_upper(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_F32: return "FP32";
    case KILN_DTYPE_F16: return "FP16";
    case KILN_DTYPE_BF16: return "BF16";
    case KILN_DTYPE_F64: return "FP64";
    case KILN_DTYPE_I8: return "INT8";
    case KILN_DTYPE_U8: return "UINT8";
    case KILN_DTYPE_I16: return "INT16";
    case KILN_DTYPE_U16: return "UINT16";
    case KILN_DTYPE_I32: return "INT32";
    case KILN_DTYPE_U32: return "UINT32";
    case KILN_DTYPE_I64: return "INT64";
    case KILN_DTYPE_U64: return "UINT64";
    case KILN_DTYPE_BOOL: return "BOOL";
    case KILN_DTYPE_UNDEFINED: return "-";
    default: return "?";
    }
}

void kiln__b_desc(const builder *b, int t, kiln_desc *d) {
    memset(d, 0, sizeof *d);
    d->nvalues = -1;
    if (t < 0) return;
    const bt *x = &b->t[t];
    d->dtype = x->dtype;
    d->ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) d->dims[i] = x->dims[i];
    d->data = x->kind == BT_CONST ? x->data : NULL;
    d->nvalues = x->nvalues;
    for (int i = 0; i < x->nvalues && i < KILN_MAX_VALUES; i++) d->values[i] = x->values[i];
}

/* ------------------------------------------------------------ running a layer */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Timing measures what the engine will run: constant inputs in their
 * packed forms (kiln_quick_op.prepack) for this tactic, as
 * kiln__engine_prepare makes them.  A failing prepack times the unpacked
 * path; the engine reports the failure when it is made. */
static void time_prepack(const builder *b, const bl *L, const kiln_call *call, void **packed) {
    const kiln__op *op = L->op;
    if (!op->quick || !op->quick->prepack || L->nin > KILN_MAX_IO) return;
    kiln_tensor views[2 * KILN_MAX_IO];
    for (int i = 0; i < L->nin; i++) {
        views[i] = call->in[i];
        if (L->in[i] < 0 || b->t[L->in[i]].kind != BT_CONST) views[i].data = NULL;
    }
    for (int i = 0; i < L->nout && i < KILN_MAX_IO; i++) {
        views[L->nin + i] = call->out[i];
        views[L->nin + i].data = NULL;
    }
    kiln_call pc = *call;
    pc.in = views;
    pc.out = views + L->nin;
    pc.exec = NULL;
    pc.workspace = NULL;
    pc.workspace_size = 0;
    for (int i = 0; i < L->nin; i++) {
        size_t n = 0;
        if (!views[i].data || kiln__op_prepack(op, L->state, &pc, i, NULL, &n) || !n) continue;
        if (!(packed[i] = kiln__aligned_alloc(n))) continue;
        if (kiln__op_prepack(op, L->state, &pc, i, packed[i], &n)) {
            kiln__aligned_free(packed[i]);
            packed[i] = NULL;
        }
    }
}

/* One sample of a CUDA candidate: iters calls between two events; *host
 * gets the host's enqueue time per call.  spin_ms > 0: a kiln_spin kernel
 * first keeps the GPU busy that long while the host enqueues, so a call
 * that costs more on the host than on the GPU (cuDNN's) is timed by its
 * GPU time, as a CUDA-graph run sees it (without it, cuDNN's 3x3 convs of
 * ResNet-50 timed at ~160 us where their kernels take ~20-50 us). */
static int cuda_sample(builder *b, kiln__enqueue_fn enq, void *state, const kiln_call *call, int iters,
                       double spin_ms, double *ms, double *host) {
    const kiln__device *d = b->cuda;
    /* best effort: without the kernel (or on the stand-in device of tests), the plain sample */
    if (spin_ms > 0 && !(call->nout > 0 && kiln__cuda_fake_owns(call->out[0].data))) {
        uint64_t ns = (uint64_t)(spin_ms * 1e6);
        void *args[] = {&ns};
        const unsigned one[3] = {1, 1, 1};
        kiln_call sc = {.exec = call->exec, .layer = "(timing spin)"};
        (void)kiln__cuda_launch(&sc, "kiln_spin", one, one, 0, args);
    }
    int rc = d->event_record(b->ev[0], b->cx.base.stream);
    double t0 = kiln__now_ms();
    for (int k = 0; k < iters && !rc; k++) rc = enq(state, call);
    *host = (kiln__now_ms() - t0) / iters;
    if (!rc) rc = d->event_record(b->ev[1], b->cx.base.stream);
    float f = 0;
    if (!rc) rc = d->event_elapsed(b->ev[0], b->ev[1], &f);
    *ms = (double)f / iters;
    return rc;
}

/* The spin before a sample of iters calls that take host_ms each on the
 * host: their enqueue time and a margin, when the host's time is a good
 * part of the measured one (else the GPU is the bottleneck already);
 * none with $KILN_TIMING_SPIN=0. */
static double spin_for(double host_ms, double gpu_ms, int iters) {
    const char *e = getenv("KILN_TIMING_SPIN"); /* "0": plain samples (an A/B switch) */
    if (host_ms < 0.5 * gpu_ms || (e && !strcmp(e, "0"))) return 0;
    double s = 1.5 * host_ms * iters + 0.01;
    return s > 5.0 ? 5.0 : s;
}

/* The cache state a CPU layer finds in the network at several threads:
 * its activations were just written by the layer before, whose threads
 * each wrote a band of rows (output channels), so each core's L2 holds
 * its own band and reads the rest from the other cores.  Repeated on the
 * same inputs, a sample finds every core holding a copy of all of them,
 * and a kernel whose threads read all of X (a GEMM split by output rows)
 * timed as fast as one whose threads read only their own band (split over
 * K: Conv tactic 11).  So before each sample, pool task t writes back one
 * byte of every line of band t of each non-constant input (the same
 * values: only the lines' owner changes).  ResNet-50's layer3 and
 * layer4 at 2 threads: tactic 11 chosen on 8 of their 8 row-split
 * 1x1 convs over two builds, 2 of 8 without (load ~2). */
typedef struct own_bands {
    const builder *b;
    const bl *L;
    const kiln_tensor *in;
} own_bands;

static void own_bands_task(void *ud, int ith, int nth) {
    const own_bands *o = ud;
    for (int i = 0; i < o->L->nin; i++) {
        if (o->L->in[i] < 0 || o->b->t[o->L->in[i]].kind == BT_CONST || !o->in[i].data) continue;
        int64_t lines = kiln_tensor_numel(&o->in[i]) * (int64_t)kiln_dtype_size(o->in[i].dtype) / 64, l0, l1;
        kiln_split_range(lines, ith, nth, &l0, &l1);
        volatile unsigned char *p = o->in[i].data; /* bytes: any dtype, bits unchanged */
        for (int64_t l = l0; l < l1; l++) p[l * 64] = p[l * 64];
    }
}

static void own_bands_run(builder *b, const bl *L, const kiln_tensor *in) {
    const int threads = kiln_exec_threads(&b->exec);
    const char *e = getenv("KILN_TIMING_BANDS"); /* "0": off (an A/B switch) */
    if (threads < 2 || (e && !strcmp(e, "0"))) return;
    own_bands o = {b, L, in};
    kiln_exec_parallel(&b->exec, threads, own_bands_task, &o);
}

int kiln__b_run(builder *b, int li, const kiln_io_format *io, int tactic, const kiln_tensor *in,
                kiln_tensor *out, int reps, double *ms) {
    bl *L = &b->l[li];
    const kiln__op *op = L->op;
    const kiln_plugin_vtable *vt = op->vt;
    const int on_gpu = L->device == KILN_DEVICE_CUDA;
    const kiln__device *dev = on_gpu ? b->cuda : &kiln__device_cpu;
    kiln__enqueue_fn enq = kiln__op_enqueue_fn(op, L->device);
    kiln__workspace_fn wsf = kiln__op_workspace_fn(op, L->device);
    kiln_attrs view = kiln__attrset_view(L->attrs);
    int rc;
    if (!enq || !dev)
        return kiln__err(KILN_EINTERNAL, "layer '%s': no %s implementation", L->name, on_gpu ? "CUDA" : "CPU");
    if (vt->configure) {
        kiln_desc din[KILN_MAX_IO], dout[KILN_MAX_IO];
        for (int i = 0; i < L->nin; i++) kiln__b_desc(b, L->in[i], &din[i]);
        for (int i = 0; i < L->nout; i++) kiln__b_desc(b, L->out[i], &dout[i]);
        rc = vt->configure(L->state, io, din, L->nin, dout, L->nout);
        if (rc) return rc;
    }
    if (vt->set_tactic) {
        rc = vt->set_tactic(L->state, tactic);
        if (rc) return rc;
    }
    kiln_call call = {.in = in, .nin = L->nin, .out = out, .nout = L->nout, .attrs = &view,
                      .tactic = tactic, .exec = on_gpu ? &b->cx.base : &b->exec, .state = L->state, .layer = L->name,
                      .user = op->quick ? op->quick->user : NULL};
    size_t ws = 0;
    kiln__misuse_clear();
    if (wsf)
        ws = wsf(L->state, &call);
    else if (!on_gpu && op->quick && op->quick->workspace)
        ws = op->quick->workspace(&call);
    void *wsp = NULL;
    if (ws && (rc = dev->alloc(ws, &wsp))) return kiln__err_prefix(rc, "layer '%s': workspace", L->name);
    call.workspace = wsp;
    call.workspace_size = ws;
    void *packed[KILN_MAX_IO] = {0};
    if (reps > 0 && !on_gpu) {
        time_prepack(b, L, &call, packed);
        call.prepacked = (const void *const *)packed;
    }
    if (vt->on_shape_change) {
        rc = vt->on_shape_change(L->state, in, L->nin, out, L->nout);
        if (rc) goto done;
    }
    if (reps <= 0) {
        rc = enq(L->state, &call);
        if (!rc && on_gpu) rc = dev->stream_sync(b->cx.base.stream);
        goto done;
    }
    double times[64];
    if (reps > 64) reps = 64;
    /* Warm-up, which also sizes the batch: a sample of very fast kernels
     * repeats the call so each sample lasts ~50 us (clock resolution and
     * call overhead would otherwise decide the winner).  On the GPU the
     * clock is a pair of CUDA events around the calls on the stream. */
    double first = 0, host = 0, t0 = kiln__now_ms();
    if (on_gpu) {
        rc = cuda_sample(b, enq, L->state, &call, 1, 0, &first, &host);
        if (!rc && spin_for(host, first, 1) > 0) /* host-bound: again behind a spin, for iters */
            rc = cuda_sample(b, enq, L->state, &call, 1, spin_for(host, first, 1), &first, &host);
    } else {
        own_bands_run(b, L, in);
        t0 = kiln__now_ms();
        rc = enq(L->state, &call);
        first = kiln__now_ms() - t0;
    }
    int iters = first >= 0.05 ? 1 : first <= 0.0005 ? 100 : (int)(0.05 / first) + 1;
    /* A second look (recheck_cpu, reps + 1 samples): a warm-up of one call
     * is a sample too, and one clearly slower than the best is the last. */
    int r0 = 0;
    if (!rc && !on_gpu && b->recheck && iters == 1) {
        times[r0++] = first;
        reps = b->cut_ms > 0 && first > BUILD_CUT_FACTOR * b->cut_ms ? 1 : reps + 1 > 64 ? 64 : reps + 1;
    }
    for (int r = r0; r < reps && !rc; r++) {
        if (on_gpu) {
            double h = host;
            rc = cuda_sample(b, enq, L->state, &call, iters, spin_for(host, first, iters), &times[r], &h);
            host = h;
        } else {
            own_bands_run(b, L, in);
            t0 = kiln__now_ms();
            for (int k = 0; k < iters && !rc; k++) rc = enq(L->state, &call);
            times[r] = (kiln__now_ms() - t0) / iters;
        }
        /* Clearly slower than the best candidate so far after a full
         * sample (the warm-up is not one): no more samples.  Repetition
         * noise is a few percent; a factor of 2 cannot flip the choice. */
        if (!rc && r == 0 && b->cut_ms > 0 && times[0] > BUILD_CUT_FACTOR * b->cut_ms) {
            reps = 1;
            b->ncut += !b->recheck;
        }
    }
    if (!rc) {
        /* GPU: the median of the event timings.  CPU: the fastest sample;
         * load from other processes only ever adds time (a descheduled
         * pool thread stalls the whole call), so on a busy machine the
         * median of 5 picked a 5.7 ms tactic over a 0.94 ms one. */
        qsort(times, (size_t)reps, sizeof times[0], cmp_double);
        *ms = on_gpu ? times[reps / 2] : times[0];
    }
done:
    /* A failed GPU candidate may leave work queued: drain before freeing. */
    if (on_gpu) dev->stream_sync(b->cx.base.stream);
    rc = kiln__misuse_take(rc);
    for (int i = 0; i < L->nin && i < KILN_MAX_IO; i++) kiln__aligned_free(packed[i]);
    if (wsp) dev->free(wsp);
    return rc;
}

/* ------------------------------------------------------------ driver */

/* A CUDA build: the device (or a clear "no CUDA device (...)"), a stream
 * and two events for timing, and the GPU in the timing cache's signature
 * (a tactic library's version keys only that library's tactics: see
 * timing_key, so cuDNN is not loaded for a network without a Conv). */
static int cuda_setup(builder *b) {
    b->cuda = kiln__device_get(KILN_DEVICE_CUDA);
    if (!b->cuda) return kiln__err_prefix(KILN_EDEVICE, "kiln_build for the cuda device");
    b->cx.base.device = KILN_DEVICE_CUDA;
    b->cx.base.pool = b->pool;
    b->cx.allow_tf32 = (b->cfg->flags & KILN_BUILD_TF32) != 0;
    int rc = b->cuda->stream_create(&b->cx.base.stream);
    if (!rc) rc = b->cuda->event_create(&b->ev[0]);
    if (!rc) rc = b->cuda->event_create(&b->ev[1]);
    char sig[800], gpu[400];
    if (!rc) rc = b->cuda->signature(gpu, sizeof gpu);
    if (rc) return rc;
    snprintf(sig, sizeof sig, "%s + %s", kiln_cpu_signature(), gpu);
    return kiln__tcache_set_device(b->tc, sig);
}

/* KILN_BUILD_STRICT_DEVICE: every op layer on the GPU (type conversions
 * the builder put on the host side of a copy do not count), else an error
 * listing the layers left on the CPU. */
static int strict_device(builder *b, const int *order, int norder) {
    char list[1024] = "";
    size_t n = 0;
    int count = 0;
    for (int k = 0; k < norder; k++) {
        const bl *L = &b->l[order[k]];
        if (L->device == KILN_DEVICE_CUDA || L->is_reformat) continue;
        const char *why = NULL;
        if (kiln__b_cuda_covers(L, &why))
            why = "no CUDA combination for its types";
        else if (!why)
            why = "no CUDA implementation";
        if (count++ < 12 && n < sizeof list)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s'%s' (%s::%s v%d: %s)", count > 1 ? ", " : "", L->name,
                                  L->op->ns, L->op->name, L->op->version, why);
    }
    if (!count) return 0;
    return kiln__err(KILN_EUNSUPPORTED, "strict device: %d layer%s would run on the CPU: %s%s", count,
                     count > 1 ? "s" : "", list, count > 12 ? ", ..." : "");
}

static void builder_free(builder *b) {
    for (int i = 0; i < b->nl; i++) {
        bl *L = &b->l[i];
        if (L->state && L->op && L->op->vt->destroy) L->op->vt->destroy(L->state);
        if (L->has_own) kiln__attrset_free(&L->own);
        kiln__free(L->name);
        kiln__free(L->in);
        kiln__free(L->out);
    }
    for (int i = 0; i < b->nt; i++) {
        kiln__free(b->t[i].name);
        if (b->t[i].data_owned) kiln__aligned_free((void *)b->t[i].data);
    }
    kiln__free(b->t);
    kiln__free(b->l);
    kiln__free(b->sym);
    for (int i = 0; i < b->nowned; i++) kiln_network_free(b->owned[i]);
    kiln__free(b->owned);
    if (b->pool) kiln__pool_free(b->pool);
    if (b->cuda) {
        for (int i = 0; i < 2; i++) b->cuda->event_destroy(b->ev[i]);
        b->cuda->stream_destroy(b->cx.base.stream);
    }
    kiln__tcache_free(b->tc);
    if (b->x) kiln__exprs_free(b->x);
}

/* $KILN_CUDA_NHWC: unset: NHWC_AUTO (kiln_build races the two layouts);
 * "1"/"on": NHWC candidates timed like the others; "0"/"off": CUDA layers
 * LINEAR; "force": NHWC candidates ranked first wherever one runs (tests). */
static int nhwc_env(void) {
    const char *e = getenv("KILN_CUDA_NHWC");
    if (!e) return NHWC_AUTO;
    return !strcmp(e, "force") ? NHWC_FORCE : !strcmp(e, "0") || !strcmp(e, "off") ? NHWC_OFF : NHWC_ON;
}

/* One pass over the network into *out: shapes, rewrites, selection with
 * CUDA layouts `nhwc`, fusion, finalize, emit.  tc is the caller's; the
 * first pass loads the config's cache file into it (after the device is
 * known: its entries are for one device signature). */
int kiln__b_build_pass(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc, int first,
                       int nhwc, b_refine *rf, kiln_build_stats *st, kiln_engine **out) {
    builder b;
    memset(&b, 0, sizeof b);
    b.net = net;
    b.cfg = cfg;
    b.st = st;
    b.tc = tc;
    b.nhwc = nhwc;
    b.rng = 0x2545F4914F6CDD1Dull;
    b.rf = rf;
    int rc = 0;
    b.reformat_op = kiln__registry_find("kiln", "reformat", 1);
    if (!b.reformat_op) {
        rc = kiln__err(KILN_EINTERNAL, "kiln_build: internal op kiln::reformat v1 is not registered");
        goto done;
    }
    b.x = kiln__exprs_create();
    b.pool = kiln__pool_create(cfg->threads > 0 ? cfg->threads : 1);
    if (!b.x || !b.pool) {
        rc = kiln__err(KILN_ENOMEM, "kiln_build: out of memory");
        goto done;
    }
    b.exec.device = KILN_DEVICE_CPU;
    b.exec.pool = b.pool;
    if (cfg->device == KILN_DEVICE_CUDA && (rc = cuda_setup(&b))) goto done;
    if (first && cfg->cache_path) kiln__tcache_load(tc, cfg->cache_path);
    rc = kiln__b_process_net(&b, net, NULL, NULL, "", 0);
    if (rc) goto done;
    if ((rc = kiln__b_pointwise_fold(&b))) goto done;
    if ((rc = kiln__b_transformer(&b))) goto done;
    if ((rc = kiln__b_mbconv(&b))) goto done;
    if ((rc = kiln__b_stempool(&b))) goto done;
    kiln__b_dead_code(&b);
    rc = kiln__b_select(&b);
    if (rc) goto done;
    rc = kiln__b_fuse(&b);
    if (rc) goto done;
    int *order = NULL, norder = 0;
    rc = kiln__b_finalize(&b, &order, &norder);
    if (!rc && b.cuda && (cfg->flags & KILN_BUILD_STRICT_DEVICE)) rc = strict_device(&b, order, norder);
    if (!rc) rc = kiln__b_emit(&b, order, norder, out);
    kiln__free(order);
done:
    b.tc = NULL; /* the caller's */
    builder_free(&b);
    return rc;
}

/* Median wall time of a synchronous run of CUDA engine e at its inputs'
 * opt shapes, inputs zeroed in device memory (the same for both engines
 * of nhwc_race; only the layouts differ). */
static int engine_run_ms(const kiln_engine *e, int threads, double *ms) {
    enum { WARMUP = 3, RUNS = 11 };
    const kiln__device *d = kiln__device_get(KILN_DEVICE_CUDA);
    const int nin = kiln_engine_num_inputs(e);
    void **buf = kiln__calloc((size_t)(nin > 0 ? nin : 1), sizeof *buf);
    kiln_context *c = NULL;
    int rc = !d || !buf ? KILN_ENOMEM : kiln_context_create(e, threads, &c);
    for (int i = 0; i < nin && !rc; i++) {
        kiln_io_info io;
        size_t bytes = 0;
        rc = kiln__context_opt_input(c, e, i, &io, &bytes);
        if (!rc) rc = d->alloc(bytes ? bytes : 64, &buf[i]);
        if (!rc) rc = d->memset(buf[i], 0, bytes, NULL);
        if (!rc) rc = d->stream_sync(NULL);
        if (!rc) rc = kiln_context_bind(c, io.name, buf[i], bytes);
    }
    double t[RUNS];
    for (int r = 0; r < WARMUP && !rc; r++) rc = kiln_context_run(c);
    for (int r = 0; r < RUNS && !rc; r++) {
        double t0 = kiln__now_ms();
        rc = kiln_context_run(c);
        t[r] = kiln__now_ms() - t0;
    }
    if (!rc) {
        qsort(t, RUNS, sizeof t[0], cmp_double);
        *ms = t[RUNS / 2];
    }
    kiln_context_free(c);
    for (int i = 0; i < nin && buf; i++)
        if (buf[i]) d->free(buf[i]);
    kiln__free(buf);
    return rc;
}

static int count_nhwc(const kiln_engine *e) {
    int n = 0;
    for (int32_t t = 0; t < e->ntensors; t++) n += e->tensors[t].format == KILN_FORMAT_NHWC;
    return n;
}

/* $KILN_CUDA_NHWC unset, a timed CUDA build whose engine holds NHWC
 * tensors: the same network is built again with CUDA layers LINEAR (its
 * candidates all come from the timing cache the first pass filled), both
 * engines are run, and the faster one is kept in *out.  Layer by layer the
 * choice of layout is greedy, and the reformats it implies around layers
 * that stay LINEAR (Concat, Resize) can cost more than NHWC saves: PP-OCR
 * det FP16 batch 32 on an H100 ran 21.9 ms in NHWC against 14.8 LINEAR,
 * while ResNet-50 FP16 ran 2.4x faster in NHWC.  Failing to build or run
 * the LINEAR engine keeps the NHWC one (logged). */
static void nhwc_race(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc,
                      kiln_build_stats *st, kiln_engine **out) {
    const int nn = count_nhwc(*out);
    if (!nn) return;
    kiln_build_stats st2;
    memset(&st2, 0, sizeof st2);
    kiln_engine *lin = NULL;
    double a = 0, l = 0;
    int rc = kiln__b_build_pass(net, cfg, tc, 0, NHWC_OFF, NULL, &st2, &lin);
    if (!rc) rc = engine_run_ms(*out, cfg->threads, &a);
    if (!rc) rc = engine_run_ms(lin, cfg->threads, &l);
    if (rc) {
        kiln__log(KILN_LOG_VERBOSE, "CUDA layouts: no LINEAR engine to compare (%s): the NHWC engine is kept",
                  kiln_errmsg());
        kiln_engine_free(lin);
        return;
    }
    const int keep_lin = l < a;
    kiln__log(KILN_LOG_VERBOSE, "CUDA layouts: the engine with %d NHWC tensors runs in %.3f ms, all LINEAR in "
              "%.3f ms (median of synchronous runs at opt shapes): %s kept", nn, a, l, keep_lin ? "LINEAR" : "NHWC");
    if (keep_lin) {
        kiln_engine_free(*out);
        *out = lin;
        st->layers = st2.layers;
        st->folded = st2.folded;
        st->reformats = st2.reformats;
        st->fused = st2.fused;
    } else {
        kiln_engine_free(lin);
    }
}

/* The packed-only check (packed_only.c) runs the engine once more: ~50 ms
 * of a ResNet-50 rebuild that the timing cache otherwise makes cheap (two
 * runs, ~100-150 ms, before it became per constant).  Its passing verdict
 * (every candidate unread) depends on which paths the built-in kernels
 * take, so it
 * is kept in the timing cache under this libkiln's build id and a digest
 * of the plan (ops, tactics, shapes, attributes, packed sizes, threads,
 * host; not the weights' values, which no kernel path depends on): a
 * rebuild of the same plan by the same binary reuses it.  A failed check
 * is not kept, so it runs again next time. */
static void mark_packed_only(kiln_engine *e, kiln__tcache *tc) {
    const char *bid = e->device == KILN_DEVICE_CPU ? kiln__build_id() : NULL;
    char key[192] = "";
    uint64_t digest;
    double v;
    if (bid && kiln__engine_plan_digest(e, &digest) == 0)
        snprintf(key, sizeof key, "packed-only-check %s %016llx", bid, (unsigned long long)digest);
    const int known = key[0] && kiln__tcache_get(tc, key, &v, NULL) && v == 0;
    if (kiln__engine_mark_packed_only(e, known) && key[0] && !known && kiln__tcache_put(tc, key, 0))
        kiln__log(KILN_LOG_WARN, "%s", kiln_errmsg());
}

int kiln_build(const kiln_network *net, const kiln_build_config *cfg, kiln_engine **out,
               kiln_build_stats *stats) {
    KILN__ARG(net && out, KILN_EINVAL);
    *out = NULL;
    double t0 = kiln__now_ms();
    kiln_build_stats st_local;
    kiln_build_stats *st = stats ? stats : &st_local;
    memset(st, 0, sizeof *st);
    kiln_build_config *own_cfg = NULL;
    if (!cfg) {
        own_cfg = kiln_build_config_create();
        if (!own_cfg) return KILN_ENOMEM;
        cfg = own_cfg;
    }
    kiln__tcache *tc = NULL;
    int rc = 0;
    if (cfg->device != KILN_DEVICE_CPU && cfg->device != KILN_DEVICE_CUDA) {
        rc = kiln__err(KILN_EINVAL, "kiln_build: device %d, expected KILN_DEVICE_CPU or KILN_DEVICE_CUDA",
                       (int)cfg->device);
        goto done;
    }
    if ((cfg->flags & KILN_BUILD_PREFER_AOT) && (cfg->flags & KILN_BUILD_PREFER_JIT)) {
        rc = kiln__err(KILN_EINVAL, "kiln_build: KILN_BUILD_PREFER_AOT and KILN_BUILD_PREFER_JIT are "
                                    "both set; expected at most one of them");
        goto done;
    }
    if (net->noutputs == 0) {
        rc = kiln__err(KILN_EINVAL, "kiln_build: the network has no outputs (kiln_network_mark_output)");
        goto done;
    }
    for (int i = 0; i < cfg->nprofiles; i++) {
        int ti = kiln__network_find_tensor(net, cfg->profiles[i].input);
        if (ti < 0 || net->tensors[ti].kind != KILN__T_INPUT) {
            char names[512] = "";
            for (int k = 0; k < net->ninputs; k++) {
                size_t n = strlen(names);
                snprintf(names + n, sizeof names - n, "%s'%s'", k ? ", " : "", net->tensors[net->inputs[k]].name);
            }
            rc = kiln__err(KILN_ENOTFOUND, "kiln_build: the config has a profile for '%s', which is not a network input "
                           "(inputs: %s)", cfg->profiles[i].input, names[0] ? names : "none");
            goto done;
        }
    }
    if (!(tc = kiln__tcache_create())) {
        rc = kiln__err(KILN_ENOMEM, "kiln_build: out of memory");
        goto done;
    }
    const int nhwc = nhwc_env();
    /* refine.c: a CPU build that times its candidates collects the regions
     * the region pass switched (unless $KILN_REGION_CHECK=off: the isolated
     * costs decide, for A/B) and, with KILN_BUILD_REFINE, the close tactics */
    const int timed_cpu = cfg->device == KILN_DEVICE_CPU && !(cfg->flags & KILN_BUILD_NO_TIMING);
    const char *rcheck = getenv("KILN_REGION_CHECK");
    b_refine rf = {.collect = 1, .tactics = timed_cpu && (cfg->flags & KILN_BUILD_REFINE),
                   .regions = timed_cpu && !(rcheck && !strcmp(rcheck, "off"))};
    if ((cfg->flags & KILN_BUILD_REFINE) && !rf.tactics)
        kiln__log(KILN_LOG_VERBOSE, "refine: skipped (%s)", cfg->device != KILN_DEVICE_CPU ? "CUDA build: CPU builds only"
                                                                                          : "KILN_BUILD_NO_TIMING");
    rc = kiln__b_build_pass(net, cfg, tc, 1, nhwc == NHWC_AUTO ? NHWC_ON : nhwc, rf.tactics || rf.regions ? &rf : NULL,
                            st, out);
    if (!rc && (rf.n || rf.nr)) kiln__b_refine(net, cfg, tc, &rf, st, out);
    kiln__b_refine_free(&rf);
    if (rc) goto done;
    if (nhwc == NHWC_AUTO && cfg->device == KILN_DEVICE_CUDA && !(cfg->flags & KILN_BUILD_NO_TIMING))
        nhwc_race(net, cfg, tc, st, out);
    /* before the timing cache is saved: its runs are not timings */
    mark_packed_only(*out, tc);
    if (cfg->cache_path) {
        int src = kiln__tcache_save(tc, cfg->cache_path);
        if (src) kiln__log(KILN_LOG_WARN, "%s", kiln_errmsg());
    }
done:
    kiln__tcache_free(tc);
    kiln_build_config_free(own_cfg);
    st->build_ms = kiln__now_ms() - t0;
    return rc;
}
