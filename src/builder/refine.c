/*
 * refine.c — close tactic choices decided inside the network.
 *
 * select.c ranks a layer's candidates in isolation: at opt shapes, on
 * random inputs, its weights hot in cache from the previous sample.  In the
 * network a layer starts from what its producer left in cache and its own
 * weights are cold, and where two tactics are within a few percent the
 * isolated ranking is often the wrong one (MobileNetV2's features.15-17:
 * kiln::mbconv tactic 4 won alone by 5-12% and lost in the network by
 * 0.01-0.04 ms each; ResNet-50's strided 1x1 downsamples, 0.1-0.33 ms each:
 * bench/README.md, session 11).
 *
 * So after the first pass of a timed CPU build, the layers whose runner-up
 * tactics (same types and formats: no reformat changes) came within
 * REFINE_MARGIN of the chosen one are run in the whole engine: variant
 * engines, each with every other such layer (in execution order) switched
 * to its first (then second) runner-up, so a switched layer runs between
 * neighbours at their chosen tactics; the base engine and the variants run
 * alternately at the build's threads, and a layer takes a runner-up when
 * the sum of per-layer minima over its span (segment_delta: the layer and
 * the consumers it leaves cache to) is lower by more than REFINE_TIE; a
 * layer's own time alone took tactics that cost their consumers more than
 * they saved (ResNet-50, bench/README.md, session 12).  The choices go into
 * the timing cache, which select.c reads in every pass: the
 * final engine is one more pass, and a rebuild with the cache replays them
 * without running anything.  Refinement never fails the build: a variant
 * that cannot be built or run leaves the isolated choices (logged).
 */
#include "builder.h"

#include <stdio.h>
#include <stdlib.h>

#define REFINE_SPAN 3         /* a switched layer and its next two: the consumers it leaves cache to */
#define REFINE_TIE 0.03        /* by 3% of the span's time: at 1% PP-OCR det lost 0.2-0.3 ms (noise picks) */
#define REFINE_BUDGET_MS 2500  /* engine runs of all variants together, about */
#define REFINE_ROUNDS_MIN 8
#define REFINE_ROUNDS_MAX 30

typedef struct variant {
    kiln_engine *e;
    kiln_context *c;
    void **buf;
    int nin;
    int alt, parity;           /* runner-up index switched in, and which layers; alt -1: the base engine */
    int *lmap;                 /* per refined layer: engine layer index, -1 */
    int nl;                    /* engine layers: the same list in every variant (checked) */
    double *min;               /* per engine layer: lowest in-network time */
} variant;

void kiln__b_refine_free(b_refine *rf) {
    for (int i = 0; i < rf->n; i++) {
        kiln__free(rf->l[i].name);
        kiln__free(rf->l[i].key);
    }
    kiln__free(rf->l);
    memset(rf, 0, sizeof *rf);
}

static int switched(const b_refine *rf, const variant *v, int j) {
    return v->alt >= 0 && j % 2 == v->parity && rf->l[j].nalt > v->alt;
}

/* Variant v's engine (the base is *out, not built here). */
static int variant_build(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc,
                         const b_refine *rf, variant *v) {
    int *force = kiln__malloc((size_t)(2 * rf->n) * sizeof *force), nforce = 0;
    if (!force) return kiln__err(KILN_ENOMEM, "build: out of memory");
    for (int j = 0; j < rf->n; j++)
        if (switched(rf, v, j)) {
            force[2 * nforce] = rf->l[j].li;
            force[2 * nforce + 1] = rf->l[j].alt[v->alt];
            nforce++;
        }
    b_refine vrf = {.force = force, .nforce = nforce};
    kiln_build_stats st;
    memset(&st, 0, sizeof st);
    int rc = kiln__b_build_pass(net, cfg, tc, 0, NHWC_ON, &vrf, &st, &v->e);
    kiln__free(force);
    return rc;
}

/* Context, inputs at opt shapes (F32 uniform in [-1, 1), others zero),
 * profiling, and the engine layer of each refined layer. */
static int variant_setup(const b_refine *rf, int threads, variant *v, uint32_t seed) {
    const kiln_engine *e = v->e;
    v->nin = kiln_engine_num_inputs(e);
    v->buf = kiln__calloc((size_t)(v->nin > 0 ? v->nin : 1), sizeof *v->buf);
    v->nl = kiln_engine_num_layers(e);
    v->lmap = kiln__malloc((size_t)rf->n * sizeof *v->lmap);
    v->min = kiln__malloc((size_t)(v->nl > 0 ? v->nl : 1) * sizeof *v->min);
    if (!v->buf || !v->lmap || !v->min) return kiln__err(KILN_ENOMEM, "build: out of memory");
    int rc = kiln_context_create(e, threads, &v->c);
    for (int i = 0; i < v->nin && !rc; i++) {
        kiln_io_info io;
        size_t bytes = 0;
        rc = kiln__context_opt_input(v->c, e, i, &io, &bytes);
        if (!rc && !(v->buf[i] = kiln__calloc(1, bytes ? bytes : 1))) rc = KILN_ENOMEM;
        for (size_t k = 0; !rc && io.dtype == KILN_DTYPE_F32 && k < bytes / 4; k++) {
            seed = seed * 1664525u + 1013904223u;
            ((float *)v->buf[i])[k] = (float)(seed >> 8) * (2.0f / 16777216.0f) - 1.0f;
        }
        if (!rc) rc = kiln_context_bind(v->c, io.name, v->buf[i], bytes);
    }
    if (rc) return rc;
    kiln_context_set_profiling(v->c, 1);
    const int nl = v->nl;
    for (int l = 0; l < nl; l++) v->min[l] = 1e30;
    for (int j = 0; j < rf->n; j++) {
        v->lmap[j] = -1;
        kiln_layer_info li;
        for (int l = 0; l < nl && v->lmap[j] < 0; l++)
            if (!kiln_engine_layer_info(e, l, &li) && !strcmp(li.name, rf->l[j].name) &&
                li.tactic == (switched(rf, v, j) ? rf->l[j].alt[v->alt] : rf->l[j].tactic))
                v->lmap[j] = l;
    }
    return 0;
}

static void variant_free(variant *v) {
    kiln_context_free(v->c);
    for (int i = 0; i < v->nin && v->buf; i++) kiln__free(v->buf[i]);
    kiln__free(v->buf);
    kiln__free(v->lmap);
    kiln__free(v->min);
    kiln_engine_free(v->e);
}

static int variant_run(variant *v) {
    int rc = kiln_context_run(v->c);
    for (int l = 0; l < v->nl && !rc; l++) {
        double ms;
        if (!kiln_context_profile(v->c, l, NULL, &ms) && ms < v->min[l]) v->min[l] = ms;
    }
    return rc;
}

/* Do variant w's engine layers carry the base's names, in order? */
static int same_layers(const variant *base, const variant *w) {
    if (base->nl != w->nl) return 0;
    for (int l = 0; l < base->nl; l++) {
        kiln_layer_info a, b;
        if (kiln_engine_layer_info(base->e, l, &a) || kiln_engine_layer_info(w->e, l, &b) || strcmp(a.name, b.name))
            return 0;
    }
    return 1;
}

/* Layer j's switch in variant w, in the network: the change of the sum of
 * layer minima from j's engine layer up to the next layer w switched (the
 * layers between run the same tactics in both engines, so they move with
 * what j left in cache: a tactic that saves 0.02 ms and costs its consumer
 * 0.05 loses), at most REFINE_SPAN layers: further ones add noise.
 * *seg: the base's time over that span, *nseg its layers. */
static double segment_delta(const b_refine *rf, const variant *base, const variant *w, int j, double *seg,
                            int *nseg) {
    int end = base->lmap[j] + REFINE_SPAN < base->nl ? base->lmap[j] + REFINE_SPAN : base->nl;
    for (int k = j + 1; k < rf->n; k++)
        if (switched(rf, w, k) && base->lmap[k] > base->lmap[j] && base->lmap[k] < end) end = base->lmap[k];
    double d = 0;
    *seg = 0;
    *nseg = end - base->lmap[j];
    for (int l = base->lmap[j]; l < end; l++) {
        d += w->min[l] - base->min[l];
        *seg += base->min[l];
    }
    return d;
}

/* Per refined layer: the tactic whose span of the network ran fastest,
 * into the timing cache.  Returns how many changed. */
static int decide(const b_refine *rf, const variant *v, int nv, kiln__tcache *tc) {
    int changed = 0;
    for (int j = 0; j < rf->n; j++) {
        const b_refine_layer *r = &rf->l[j];
        if (v[0].lmap[j] < 0) {
            kiln__log(KILN_LOG_VERBOSE, "refine: layer '%s' not found in the engine: tactic %d kept", r->name,
                      r->tactic);
            continue;
        }
        int best = r->tactic, measured = 0;
        double best_d = 0;
        char text[512];
        size_t n = (size_t)snprintf(text, sizeof text, "tactic %d %.4f ms (isolated %.4f)", r->tactic,
                                    v[0].min[v[0].lmap[j]], r->ms);
        for (int k = 1; k < nv; k++) {
            if (!switched(rf, &v[k], j) || v[k].lmap[j] != v[0].lmap[j] || !same_layers(&v[0], &v[k])) continue;
            const int a = v[k].alt;
            double seg;
            int nseg;
            const double d = segment_delta(rf, &v[0], &v[k], j, &seg, &nseg);
            measured++;
            if (n < sizeof text)
                n += (size_t)snprintf(text + n, sizeof text - n, ", tactic %d %.4f ms (isolated %.4f; %+.4f ms over "
                                      "%d layers from here)", r->alt[a], v[k].min[v[k].lmap[j]], r->alt_ms[a], d, nseg);
            if (d < best_d && d < -REFINE_TIE * seg) {
                best = r->alt[a];
                best_d = d;
            }
        }
        if (!measured) continue;
        changed += best != r->tactic;
        kiln__log(KILN_LOG_VERBOSE, "refine: layer '%s' in the network (minima): %s: %s tactic %d", r->name, text,
                  best != r->tactic ? "takes" : "keeps", best);
        if (kiln__tcache_put(tc, r->key, best)) kiln__log(KILN_LOG_WARN, "%s", kiln_errmsg());
    }
    return changed;
}

void kiln__b_refine(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc, b_refine *rf,
                    kiln_build_stats *st, kiln_engine **out) {
    const double t0 = kiln__now_ms();
    const int threads = cfg->threads > 0 ? cfg->threads : 1;
    variant v[1 + 2 * REFINE_MAX_ALT];
    memset(v, 0, sizeof v);
    int nv = 0, rc = 0;
    v[nv++] = (variant){.e = *out, .alt = -1};
    for (int a = 0; a < REFINE_MAX_ALT && !rc; a++)
        for (int p = 0; p < 2 && !rc; p++) {
            variant *w = &v[nv];
            *w = (variant){.alt = a, .parity = p};
            int any = 0;
            for (int j = 0; j < rf->n; j++) any |= switched(rf, w, j);
            if (!any) continue;
            nv++;
            rc = variant_build(net, cfg, tc, rf, w);
        }
    const double t1 = kiln__now_ms();
    for (int k = 0; k < nv && !rc; k++) rc = variant_setup(rf, threads, &v[k], 0x9E3779B9u);
    /* a warm-up run each; the base's time sets the rounds */
    double run_ms = 0;
    for (int k = 0; k < nv && !rc; k++) {
        const double r0 = kiln__now_ms();
        rc = kiln_context_run(v[k].c);
        if (!k) run_ms = kiln__now_ms() - r0;
    }
    int rounds = run_ms > 0 ? (int)(REFINE_BUDGET_MS / (run_ms * nv)) : REFINE_ROUNDS_MAX;
    rounds = rounds < REFINE_ROUNDS_MIN ? REFINE_ROUNDS_MIN : rounds > REFINE_ROUNDS_MAX ? REFINE_ROUNDS_MAX : rounds;
    for (int r = 0; r < rounds && !rc; r++)
        for (int i = 0; i < nv && !rc; i++) rc = variant_run(&v[(r + i) % nv]);
    const double t2 = kiln__now_ms();
    int changed = 0;
    if (rc)
        kiln__log(KILN_LOG_VERBOSE, "refine: %d layers with close tactics keep their isolated choice: %s", rf->n,
                  kiln_errmsg());
    else
        changed = decide(rf, v, nv, tc);
    v[0].e = NULL; /* *out, the caller's */
    for (int k = 0; k < nv; k++) variant_free(&v[k]);
    if (changed) {
        kiln_build_stats st2;
        memset(&st2, 0, sizeof st2);
        kiln_engine *fin = NULL;
        b_refine frf = {0};
        rc = kiln__b_build_pass(net, cfg, tc, 0, NHWC_ON, &frf, &st2, &fin);
        if (rc) {
            kiln__log(KILN_LOG_VERBOSE, "refine: the refined engine could not be built (%s): isolated choices kept",
                      kiln_errmsg());
        } else {
            kiln_engine_free(*out);
            *out = fin;
            st->layers = st2.layers;
            st->folded = st2.folded;
            st->reformats = st2.reformats;
            st->fused = st2.fused;
        }
    }
    st->refined += rf->n;
    st->refine_changed += rc ? 0 : changed;
    kiln__log(KILN_LOG_VERBOSE, "refine: %d layers with close tactics, %d engines x %d rounds at %d threads "
              "(%.0f ms a run): %d choices changed; %.2f s building variants, %.2f s running, %.2f s in all",
              rf->n, nv, rounds, threads, run_ms, rc ? 0 : changed, (t1 - t0) / 1000, (t2 - t1) / 1000,
              (kiln__now_ms() - t0) / 1000);
}
