/*
 * refine.c — choices made from isolated timings decided inside the network:
 * close tactic choices (--refine) and the regions the region pass switched.
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
 * neighbours at their chosen tactics.  A variant engine is one more build
 * pass from the timing cache with those tactics forced, but it shares the
 * base engine's packed weights for every layer that packs the same way
 * (kiln__b_share_packed): only the switched layers are packed again.
 *
 * Base and variants run in rounds (each engine once a round, the base
 * first in even rounds, last in odd ones) and a decision rests on paired
 * per-round differences: in a round, a runner-up wins when the sum of
 * its span's layer times (segment_delta: the layer and the consumers it
 * leaves cache to) in the variant is lower than in the base by more than
 * REFINE_TIE.  Identical layers (same candidate key: op, types, shapes,
 * attributes, tactic) form one group whose spans are summed per round, so
 * they get one decision.  A runner-up is taken when its wins pass a
 * one-sided sign test (need_wins), and dropped as soon as its losses make
 * that impossible within REFINE_ROUNDS_MAX; an engine whose layers are all
 * decided stops running.  Building the variants stays within a time budget
 * (REFINE_BUDGET_RUNS base runs, at most REFINE_BUDGET_MS), and so do the
 * rounds that run them, each its own: what the rounds leave undecided
 * keeps its isolated choice (logged).  A layer's own time alone
 * took tactics that cost their consumers more than they saved, and minima
 * over rounds decided within the noise (ResNet-50, PP-OCR det: session 12).
 *
 * Every listed layer's verdict goes into the timing cache (undecided ones
 * too, as their isolated choice), which select.c reads in every pass: the
 * final engine is one more pass (taking the base's packed weights), and a
 * rebuild with the cache replays the verdicts without running anything.
 * Refinement never fails the build: a variant that cannot be built or run
 * leaves the isolated choices (logged).
 *
 * Regions (every timed CPU build; $KILN_REGION_CHECK=off skips it).  The
 * region pass (select.c, region.c) switches a connected region of layers
 * to another layout when its isolated costs (kernels alone, weights hot,
 * plus measured reformats) beat the greedy ones by REGION_MARGIN; in
 * ResNet-50 such regions ran level or up to 3% slower in the network
 * (layer4's 16c 1x1 convs, whose 2-9 MB of weights come from memory
 * there; bench/README.md, session 14).  So each region left switched
 * (a connected set of layers whose layout changed) is checked the same
 * way: one variant engine with every region reverted to the greedy
 * layouts (the greedy engine) runs in the rounds beside the base, and per
 * round a region's difference is its span's time in the base minus in the
 * variant.  The two engines hold different layers (reformats at a
 * region's border, a residual Add fused in one and not the other), so a
 * span is the layers both hold, by name, from the region's first through
 * REFINE_SPAN - 1 past its last (not into the next region), with whatever
 * either engine runs among them (region_spans).  One variant for all
 * regions keeps a round at two runs (a variant per region left ResNet-50's
 * 3-4 regions undecided after 1-2 rounds of 4-5 engines); the regions are
 * apart (separate components of the cut), so one's span is hardly moved by
 * another's revert.  The region is the alternative that must win: kept
 * when its wins pass the sign test and its median gain is REGION_TIE of
 * the greedy span or more; where the budget ends undecided, kept only when
 * it leans that way (kiln__b_judge_lean); where the network gives no
 * verdict against it (losses short of the sign test, the median loss under
 * REGION_LOSS of the span), kept when its isolated gain is 5% or more
 * (kiln__b_region_keep); else
 * reverted to the greedy layouts.  The verdict goes into the timing cache under the region's key
 * (its layers, tactics and layouts, the network, the threads), which
 * select_regions reads in every pass.  Islands the region pass took back
 * to their neighbours' layout (region.h, kiln__rg_heal) are regions of
 * their own here; losing in isolation, they are kept only on the network's
 * win or lean.  When every region is reverted and
 * no tactic changed, the variant is the final engine.  A build in which
 * the region pass switched nothing and healed no island costs nothing here.
 */
#include "builder.h"
#include "region.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>

#define REFINE_SPAN 3          /* a switched layer and its next two: the consumers it leaves cache to */
#define REFINE_TIE 0.03        /* by 3% of the span's time: at 1% PP-OCR det lost 0.2-0.3 ms (noise picks) */
#define REGION_TIE 0.01        /* a region's span is most of a stage or more: 3% of it would drop real wins */
#define REFINE_BUDGET_MS 2000  /* all of refinement, at most */
#define REFINE_BUDGET_RUNS 40  /* ... and at most this many runs of the base engine */
#define REFINE_MIN_RUN_MS 1.0  /* an engine that runs faster is not refined: its spans are noise */
#define REFINE_ALPHA 0.05      /* the sign test's one-sided level */

typedef struct variant {
    kiln_engine *e;
    kiln_context *c;
    void **buf;
    int nin;
    int alt, parity;           /* runner-up index switched in, and which layers; alt -1: none */
    int greedy;                /* 1: every switched region reverted (the regions' variant) */
    kiln_build_stats st;       /* its build pass's */
    int *lmap;                 /* per refined layer: engine layer index, -1 */
    int nl;                    /* engine layers: the same list in every variant (checked) */
    int ok;                    /* built, set up, and its layers are the base's */
    double *cur;               /* per engine layer: its time in this round */
    double run_ms;             /* its fastest run so far (warm-up, rounds) */
} variant;

/* Identical refined layers (same candidate key) and, per runner-up, the
 * paired per-round record of their spans. */
typedef struct group {
    int first;                 /* rf->l index of its first member */
    int n;                     /* members */
    b_test t[REFINE_MAX_ALT];
    int nalt;
} group;

void kiln__b_refine_free(b_refine *rf) {
    for (int i = 0; i < rf->n; i++) {
        kiln__free(rf->l[i].name);
        kiln__free(rf->l[i].key);
        kiln__free(rf->l[i].pool);
    }
    for (int i = 0; i < rf->nr; i++) {
        for (int k = 0; k < rf->r[i].nnames; k++) kiln__free(rf->r[i].names[k]);
        kiln__free(rf->r[i].names);
        kiln__free(rf->r[i].key);
    }
    kiln__free(rf->l);
    kiln__free(rf->r);
    memset(rf, 0, sizeof *rf);
}

/* ---- packed weights shared between passes ---- */

/* Does engine layer b pack its constants the way donor layer a did: same
 * op, attributes, tactic, tensor types, formats and static dims, and the
 * same constant bytes? */
static int packs_alike(const kiln_engine *ea, const kiln__elayer *a, const kiln_engine *eb, const kiln__elayer *b) {
    if (!a->prepack_done || a->prepacked_stored || a->op != b->op || a->tactic != b->tactic || a->nin != b->nin ||
        a->nout != b->nout || a->device != b->device || a->aot_kernel >= 0 || b->aot_kernel >= 0 ||
        a->blob_size != b->blob_size || (a->blob_size && memcmp(a->blob, b->blob, a->blob_size)) ||
        strcmp(a->name, b->name))
        return 0;
    for (int32_t k = 0; k < a->nin + a->nout; k++) {
        const int32_t ta = k < a->nin ? a->in[k] : a->out[k - a->nin];
        const int32_t tb = k < b->nin ? b->in[k] : b->out[k - b->nin];
        if ((ta < 0) != (tb < 0)) return 0;
        if (ta < 0) continue;
        const kiln__etensor *x = &ea->tensors[ta], *y = &eb->tensors[tb];
        int64_t dx[KILN_MAX_DIMS] = {0}, dy[KILN_MAX_DIMS] = {0};
        if (x->kind != y->kind || x->dtype != y->dtype || x->format != y->format || x->ndim != y->ndim ||
            kiln__etensor_static_dims(ea, x, dx) != kiln__etensor_static_dims(eb, y, dy) ||
            memcmp(dx, dy, sizeof dx))
            return 0;
        if (x->kind != KILN__ET_CONST) continue;
        const uint8_t *cx = kiln__etensor_const(ea, x), *cy = kiln__etensor_const(eb, y);
        if (x->const_bytes != y->const_bytes || x->packed_only || y->packed_only ||
            (cx != cy && memcmp(cx, cy, x->const_bytes)))
            return 0;
    }
    return 1;
}

int kiln__b_share_packed(const kiln_engine *donor, kiln_engine *e) {
    int n = 0;
    for (int32_t i = 0; i < e->nlayers; i++) {
        kiln__elayer *l = &e->layers[i];
        const kiln__elayer *a = NULL;
        if (i < donor->nlayers && !strcmp(donor->layers[i].name, l->name)) a = &donor->layers[i];
        for (int32_t j = 0; !a && j < donor->nlayers; j++)
            if (!strcmp(donor->layers[j].name, l->name)) a = &donor->layers[j];
        if (!a || !packs_alike(donor, a, e, l)) continue;
        if (a->prepacked) {
            l->prepacked = kiln__calloc((size_t)l->nin, sizeof *l->prepacked);
            l->prepacked_size = kiln__calloc((size_t)l->nin, sizeof *l->prepacked_size);
            if (!l->prepacked || !l->prepacked_size) {
                kiln__free(l->prepacked);
                kiln__free(l->prepacked_size);
                l->prepacked = NULL;
                l->prepacked_size = NULL;
                return kiln__err(KILN_ENOMEM, "build: out of memory");
            }
            for (int32_t k = 0; k < l->nin; k++) {
                l->prepacked[k] = a->prepacked[k];
                l->prepacked_size[k] = a->prepacked_size[k];
                if (a->prepacked[k]) l->prepacked_stored |= 1ull << k; /* the donor's: not freed with e */
            }
        }
        l->prepacked_bytes = a->prepacked_bytes;
        l->prepack_done = 1;
        n++;
    }
    kiln__log(KILN_LOG_VERBOSE, "refine: %d of %d layers pack as the base engine's did: its packed forms shared%s", n,
              (int)e->nlayers, e->weights == donor->weights ? ", and its weights" : "");
    return n;
}

void kiln__b_hand_over(kiln_engine *donor, kiln_engine *e) {
    for (int32_t i = 0; i < e->nlayers; i++) {
        kiln__elayer *l = &e->layers[i];
        for (int32_t k = 0; l->prepacked_stored && k < l->nin; k++) {
            if (!(l->prepacked_stored >> k & 1)) continue;
            for (int32_t j = 0; j < donor->nlayers; j++) {
                kiln__elayer *a = &donor->layers[j];
                for (int32_t m = 0; a->prepacked && m < a->nin; m++)
                    if (a->prepacked[m] == l->prepacked[k] && !(a->prepacked_stored >> m & 1)) {
                        a->prepacked[m] = NULL; /* e's now */
                        l->prepacked_stored &= ~(1ull << k);
                    }
            }
        }
    }
    if (e->weights == donor->weights && donor->weights_owned && !e->weights_owned) {
        e->weights_owned = 1;
        donor->weights_owned = 0;
    }
}

/* ---- variant engines ---- */

static int switched(const b_refine *rf, const variant *v, int j) {
    return v->alt >= 0 && j % 2 == v->parity && rf->l[j].nalt > v->alt;
}

/* Variant v's engine (the base is *out, not built here), sharing the
 * base's packed weights. */
static int variant_build(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc,
                         const b_refine *rf, kiln_engine *base, variant *v) {
    int *force = kiln__malloc((size_t)(2 * rf->n) * sizeof *force), nforce = 0;
    if (!force) return kiln__err(KILN_ENOMEM, "build: out of memory");
    for (int j = 0; j < rf->n; j++)
        if (switched(rf, v, j)) {
            force[2 * nforce] = rf->l[j].li;
            force[2 * nforce + 1] = rf->l[j].alt[v->alt];
            nforce++;
        }
    char **revert = v->greedy ? kiln__malloc((size_t)rf->nr * sizeof *revert) : NULL;
    if (v->greedy && !revert) {
        kiln__free(force);
        return kiln__err(KILN_ENOMEM, "build: out of memory");
    }
    for (int r = 0; revert && r < rf->nr; r++) revert[r] = rf->r[r].key;
    b_refine vrf = {.tactics = rf->tactics, .regions = rf->regions, .force = force, .nforce = nforce,
                    .revert = revert, .nrevert = revert ? rf->nr : 0, .donor = base};
    memset(&v->st, 0, sizeof v->st);
    int rc = kiln__b_build_pass(net, cfg, tc, 0, NHWC_ON, &vrf, &v->st, &v->e);
    kiln__free(force);
    kiln__free(revert);
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
    v->cur = kiln__calloc((size_t)(v->nl > 0 ? v->nl : 1), sizeof *v->cur);
    if (!v->buf || !v->lmap || !v->cur) return kiln__err(KILN_ENOMEM, "build: out of memory");
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
    for (int j = 0; j < rf->n; j++) {
        v->lmap[j] = -1;
        kiln_layer_info li;
        for (int l = 0; l < v->nl && v->lmap[j] < 0; l++)
            if (!kiln_engine_layer_info(e, l, &li) && !strcmp(li.name, rf->l[j].name) &&
                li.tactic == (switched(rf, v, j) ? rf->l[j].alt[v->alt] : rf->l[j].tactic))
                v->lmap[j] = l;
    }
    /* a warm-up run (the first touches the activations' memory), and a
     * second where that is cheap: a neighbour's time slice in one run
     * would make a 0.1 ms engine look worth refining */
    v->run_ms = 1e30;
    for (int r = 0; r < 2 && !rc && (!r || v->run_ms < 10 * REFINE_MIN_RUN_MS); r++) {
        const double t0 = kiln__now_ms();
        rc = kiln_context_run(v->c);
        const double ms = kiln__now_ms() - t0;
        v->run_ms = ms < v->run_ms ? ms : v->run_ms;
    }
    return rc;
}

static void variant_free(variant *v) {
    kiln_context_free(v->c);
    for (int i = 0; i < v->nin && v->buf; i++) kiln__free(v->buf[i]);
    kiln__free(v->buf);
    kiln__free(v->lmap);
    kiln__free(v->cur);
    kiln_engine_free(v->e);
}

/* One run into v->cur; v->run_ms follows the fastest run (the warm-up's
 * first run after a cold start overstated it, and with it each round's
 * estimate against the budget). */
static int variant_run(variant *v) {
    const double t0 = kiln__now_ms();
    int rc = kiln_context_run(v->c);
    const double ms = kiln__now_ms() - t0;
    if (!rc && ms < v->run_ms) v->run_ms = ms;
    for (int l = 0; l < v->nl && !rc; l++) {
        double ms;
        v->cur[l] = kiln_context_profile(v->c, l, NULL, &ms) ? 0 : ms;
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

/* The regions' spans in the base engine a and in the greedy variant b
 * (every region reverted), which hold different layers.  Region r's span
 * is the layers both engines hold (by name, in the same order in both:
 * else 0) from the region's first through REFINE_SPAN - 1 past its last
 * (the consumers it leaves cache to, cut at the next region's first), and
 * whatever else either engine runs among them: the reformats at the
 * region's border, a layer fused in one engine and not the other.  A layer
 * that only one engine holds counts with the next common one; the span
 * reaches every such layer joined to the region's layers through tensors
 * (a reformat out of the region, placed before its first reader).  span:
 * 4 ints a region, [lo, hi) of a then of b.  Returns 1 when found. */
static int region_spans(const b_refine *rf, const kiln_engine *a, const kiln_engine *b, int *span) {
    const kiln_engine *e[2] = {a, b};
    int *seg[2], *match[2], *mark[2], rc = 0, ncommon = 0;
    int *cs = kiln__malloc((size_t)(2 * rf->nr + 1) * sizeof *cs), *ce = cs ? cs + rf->nr : NULL;
    seg[0] = kiln__malloc((size_t)(a->nlayers + 1) * sizeof(int) * 3);
    seg[1] = kiln__malloc((size_t)(b->nlayers + 1) * sizeof(int) * 3);
    if (!cs || !seg[0] || !seg[1]) goto out;
    for (int s = 0; s < 2; s++) {
        match[s] = seg[s] + e[s]->nlayers + 1;
        mark[s] = match[s] + e[s]->nlayers + 1;
    }
    /* match[0][i]: a's layer i's index in b, -1 (they must rise); match[1] the reverse */
    for (int i = 0, last = -1; i < a->nlayers; i++) {
        match[0][i] = -1;
        for (int j = 0; j < b->nlayers && match[0][i] < 0; j++)
            if (!strcmp(a->layers[i].name, b->layers[j].name)) match[0][i] = j;
        if (match[0][i] < 0) continue;
        if (match[0][i] <= last) goto out;
        last = match[0][i];
        ncommon++;
    }
    for (int j = 0; j < b->nlayers; j++) match[1][j] = -1;
    for (int i = 0; i < a->nlayers; i++)
        if (match[0][i] >= 0) match[1][match[0][i]] = i;
    /* seg: the ordinal of the next common layer (ncommon past the last) */
    for (int s = 0; s < 2; s++)
        for (int i = e[s]->nlayers - 1, k = ncommon; i >= 0; i--) {
            if (match[s][i] >= 0) k--;
            seg[s][i] = k;
        }
    for (int r = 0; r < rf->nr; r++) {
        const b_region *g = &rf->r[r];
        cs[r] = 1 << 30;
        ce[r] = -1;
        /* mark: 2 the region's layers, 3 joined to them, 1 a layer only this engine holds, 0 the others */
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < e[s]->nlayers; i++) {
                mark[s][i] = match[s][i] < 0;
                for (int k = 0; k < g->nnames; k++)
                    if (!strcmp(e[s]->layers[i].name, g->names[k])) mark[s][i] = 2;
            }
        for (int s = 0; s < 2; s++)
            for (int grew = 1; grew;) {
                grew = 0;
                for (int i = 0; i < e[s]->nlayers; i++) {
                    if (mark[s][i] != 1) continue;
                    const kiln__elayer *x = &e[s]->layers[i];
                    for (int j = 0; j < e[s]->nlayers && mark[s][i] == 1; j++) {
                        if (mark[s][j] < 2) continue;
                        const kiln__elayer *y = &e[s]->layers[j];
                        for (int p = 0; p < x->nin + x->nout && mark[s][i] == 1; p++) {
                            const int32_t t = p < x->nin ? x->in[p] : x->out[p - x->nin];
                            for (int q = 0; t >= 0 && q < y->nin + y->nout; q++)
                                if ((p < x->nin) != (q < y->nin) && t == (q < y->nin ? y->in[q] : y->out[q - y->nin])) {
                                    mark[s][i] = 3;
                                    grew = 1;
                                    break;
                                }
                        }
                    }
                }
            }
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < e[s]->nlayers; i++)
                if (mark[s][i] >= 2) {
                    cs[r] = seg[s][i] < cs[r] ? seg[s][i] : cs[r];
                    ce[r] = seg[s][i] > ce[r] ? seg[s][i] : ce[r];
                }
        if (ce[r] < 0) goto out;
    }
    for (int r = 0; r < rf->nr; r++) {
        /* past its last layer: REFINE_SPAN - 1 more, not into the next region */
        int end = ce[r] + REFINE_SPAN - 1 < ncommon ? ce[r] + REFINE_SPAN - 1 : ncommon;
        for (int q = 0; q < rf->nr; q++)
            if (cs[q] > ce[r] && cs[q] - 1 < end) end = cs[q] - 1;
        for (int s = 0; s < 2; s++) {
            int *lo = &span[4 * r + 2 * s], *hi = lo + 1;
            *lo = e[s]->nlayers;
            *hi = 0;
            for (int i = 0; i < e[s]->nlayers; i++)
                if (seg[s][i] >= cs[r] && seg[s][i] <= end) {
                    *lo = i < *lo ? i : *lo;
                    *hi = i + 1;
                }
        }
    }
    rc = 1;
out:
    kiln__free(cs);
    kiln__free(seg[0]);
    kiln__free(seg[1]);
    return rc;
}

static double span_sum(const variant *v, int lo, int hi) {
    double s = 0;
    for (int l = lo; l < hi; l++) s += v->cur[l];
    return s;
}

/* Layer j's switch in variant w, this round: the change of the sum of
 * layer times from j's engine layer up to the next layer w switched (the
 * layers between run the same tactics in both engines, so they move with
 * what j left in cache: a tactic that saves 0.02 ms and costs its consumer
 * 0.05 loses), at most REFINE_SPAN layers: further ones add noise.
 * *seg: the base's time over that span. */
static double segment_delta(const b_refine *rf, const variant *base, const variant *w, int j, double *seg) {
    int end = base->lmap[j] + REFINE_SPAN < base->nl ? base->lmap[j] + REFINE_SPAN : base->nl;
    for (int k = j + 1; k < rf->n; k++)
        if (switched(rf, w, k) && base->lmap[k] > base->lmap[j] && base->lmap[k] < end) end = base->lmap[k];
    double d = 0;
    *seg = 0;
    for (int l = base->lmap[j]; l < end; l++) {
        d += w->cur[l] - base->cur[l];
        *seg += base->cur[l];
    }
    return d;
}

/* The fewest wins in n paired rounds that a fair coin reaches with
 * probability <= REFINE_ALPHA (n + 1: none). */
static int need_wins(int n) {
    double tail = 0, c = 1; /* c: n choose k, from k = n down */
    for (int k = n; k >= 0; k--) {
        tail += c * ldexp(1.0, -n);
        if (tail > REFINE_ALPHA) return k + 1;
        c = c * k / (n - k + 1);
    }
    return 0;
}

/* The variant that switches layer j to runner-up a, or -1. */
static int variant_of(const b_refine *rf, const variant *v, int nv, int j, int a) {
    for (int k = 1; k < nv; k++)
        if (v[k].ok && v[k].alt == a && switched(rf, &v[k], j) && v[k].lmap[j] >= 0 && v[k].lmap[j] == v[0].lmap[j])
            return k;
    return -1;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *x, int n) {
    double s[REFINE_ROUNDS_MAX];
    if (n <= 0 || n > REFINE_ROUNDS_MAX) return 0;
    memcpy(s, x, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return (s[(n - 1) / 2] + s[n / 2]) / 2;
}

double kiln__b_test_median(const double *x, int n) { return median(x, n); }

int kiln__b_judge(b_test *t, double d, double seg, double tie) {
    if (t->verdict || t->rounds >= REFINE_ROUNDS_MAX) return 0;
    t->d[t->rounds] = d;
    t->seg[t->rounds] = seg;
    t->rounds++;
    if (d < 0) t->wins++;
    else t->losses++;
    if (t->wins >= need_wins(t->rounds) && median(t->d, t->rounds) < -tie * median(t->seg, t->rounds))
        t->verdict = 1;
    else if (t->losses > REFINE_ROUNDS_MAX - need_wins(REFINE_ROUNDS_MAX) || t->rounds == REFINE_ROUNDS_MAX)
        t->verdict = -1;
    return !t->verdict;
}

int kiln__b_judge_lean(const b_test *t, double tie) {
    if (t->verdict) return t->verdict > 0;
    return t->rounds >= REFINE_LEAN_ROUNDS && t->wins >= 2 * t->losses &&
           median(t->d, t->rounds) < -tie * median(t->seg, t->rounds);
}

int kiln__b_region_keep(const b_test *t, double tie, double before, double after) {
    if (kiln__b_judge_lean(t, tie)) return 1; /* (a win is its verdict) */
    if (t->losses >= need_wins(t->rounds)) return 0; /* (a significant loss: 5 rounds or more) */
    const int short_of_loss = t->rounds == 0 || median(t->d, t->rounds) < REGION_LOSS * median(t->seg, t->rounds);
    return short_of_loss && after <= (1 - REGION_ISOLATED) * before ? 2 : 0;
}

/* The variant that reverts the regions, or -1. */
static int greedy_variant(const variant *v, int nv) {
    for (int k = 1; k < nv; k++)
        if (v[k].ok && v[k].greedy) return k;
    return -1;
}

/* This round's paired differences, into each undecided test (a region's:
 * its span with the region against the variant's without, so that the
 * region is the alternative that must win); returns how many tests remain
 * undecided. */
static int record_round(const b_refine *rf, const int *gof, group *g, int ng, b_test *rt, const int *span,
                        const variant *v, int nv) {
    int open = 0;
    const int k = greedy_variant(v, nv);
    for (int r = 0; r < rf->nr && k >= 0; r++) {
        if (rt[r].verdict) continue;
        const int *sp = &span[4 * r];
        const double with = span_sum(&v[0], sp[0], sp[1]), without = span_sum(&v[k], sp[2], sp[3]);
        open += kiln__b_judge(&rt[r], with - without, without, REGION_TIE);
    }
    for (int q = 0; q < ng; q++)
        for (int a = 0; a < g[q].nalt; a++) {
            b_test *t = &g[q].t[a];
            if (t->verdict) continue;
            double d = 0, seg = 0;
            int any = 0;
            for (int j = g[q].first; j < rf->n; j++) {
                const int k = gof[j] == q ? variant_of(rf, v, nv, j, a) : -1;
                if (k < 0) continue;
                double s;
                d += segment_delta(rf, &v[0], &v[k], j, &s);
                seg += s;
                any = 1;
            }
            if (!any) {
                t->verdict = -1;
                continue;
            }
            open += kiln__b_judge(t, d, seg, REFINE_TIE);
        }
    return open;
}

/* Does variant k switch a layer (revert a region) whose test is undecided? */
static int needed(const b_refine *rf, const int *gof, const group *g, const b_test *rt, const variant *v, int nv,
                  int k) {
    for (int r = 0; v[k].greedy && r < rf->nr; r++)
        if (!rt[r].verdict) return 1;
    if (v[k].greedy) return 0;
    for (int j = 0; j < rf->n; j++)
        if (switched(rf, &v[k], j) && variant_of(rf, v, nv, j, v[k].alt) == k && !g[gof[j]].t[v[k].alt].verdict)
            return 1;
    return 0;
}

/* Per group: the runner-up taken (lowest median difference among those
 * taken) or the isolated choice, logged and put in the timing cache for
 * every member.  Returns how many layers changed. */
static int decide(const b_refine *rf, const int *gof, const group *g, int ng, kiln__tcache *tc) {
    int changed = 0;
    for (int q = 0; q < ng; q++) {
        const b_refine_layer *r = &rf->l[g[q].first];
        int best = r->tactic, open = 0;
        double best_d = 0;
        char text[600];
        size_t n = (size_t)snprintf(text, sizeof text, "tactic %d (isolated %.4f ms)", r->tactic, r->ms);
        for (int a = 0; a < g[q].nalt; a++) {
            const b_test *t = &g[q].t[a];
            const double md = median(t->d, t->rounds), ms = median(t->seg, t->rounds);
            open += !t->verdict;
            if (n < sizeof text)
                n += (size_t)snprintf(text + n, sizeof text - n, ", tactic %d (isolated %.4f): %+.4f ms of %.4f "
                                      "(median over %d rounds), %d wins %d losses: %s", r->alt[a], r->alt_ms[a],
                                      md, ms, t->rounds, t->wins, t->losses,
                                      t->verdict > 0 ? "taken" : t->verdict < 0 ? "dropped" : "undecided");
            if (t->verdict > 0 && md < best_d) {
                best = r->alt[a];
                best_d = md;
            }
        }
        kiln__log(KILN_LOG_VERBOSE, "refine: layer '%s'%s%.0d%s in the network (paired rounds): %s: %s tactic %d%s",
                  r->name, g[q].n > 1 ? " and " : "", g[q].n - 1, g[q].n > 1 ? " identical" : "", text,
                  best != r->tactic ? "takes" : "keeps", best,
                  open && best == r->tactic ? " (undecided within the budget: the isolated choice)" : "");
        for (int j = g[q].first; j < rf->n; j++) {
            if (gof[j] != q) continue;
            changed += best != rf->l[j].tactic;
            if (kiln__tcache_put(tc, rf->l[j].key, best)) kiln__log(KILN_LOG_WARN, "%s", kiln_errmsg());
        }
    }
    return changed;
}

/* Per region: kept when it won in the network, or when the budget left it
 * undecided leaning that way (kiln__b_judge_lean: on a busy machine the
 * budget's 8-10 rounds left regions of 7 or 8 wins in 10 and a 1-2% median
 * gain undecided, ResNet-50's layer1 and layer3 at 1 thread), or when the
 * network could tell nothing and the isolated costs gain 5% or more
 * (kiln__b_region_keep: on the GPU machine's busy host, rounds of 52-72 ms,
 * ResNet-50's whole-body 16c region, 8% in isolation, lost 6 of 10 rounds
 * by +0.5% in the median and was reverted, where that engine runs 5-9%
 * faster than the LINEAR one; in session 21, 10.7% in isolation, 2 wins 6
 * losses by +1.1% (past REGION_TIE), reverted, where the 16c engine then
 * ran 8% faster in one process beside it and 1.18x ORT against 1.08x:
 * so a median loss short of the sign test overrules a 5% isolated gain
 * only past REGION_LOSS; a check cut to a few rounds by the budget has
 * no significant loss, so the isolated costs decide there too); else
 * reverted to the greedy layouts.
 * Logged and put in the timing cache.  Returns how many were reverted. */
static int decide_regions(const b_refine *rf, const b_test *rt, kiln__tcache *tc) {
    int reverted = 0;
    for (int r = 0; r < rf->nr; r++) {
        const b_region *g = &rf->r[r];
        const b_test *t = &rt[r];
        const int keep = kiln__b_region_keep(t, REGION_TIE, g->before, g->after);
        const double md = median(t->d, t->rounds), ms = median(t->seg, t->rounds);
        kiln__log(KILN_LOG_VERBOSE, "region check: %d layers from '%s' in %s (isolated: %.4f ms greedy -> %.4f "
                  "switched) in the network (paired rounds): %+.4f ms of %.4f (median over %d rounds: its span with "
                  "the region minus without), %d wins %d losses: %s", g->nnames, g->names[0],
                  g->label == KILN__RG_KEEP ? "mixed layouts" : kiln_format_name((kiln_format)g->label), g->before,
                  g->after, md, ms, t->rounds, t->wins, t->losses,
                  t->verdict > 0 ? "kept"
                  : keep == 2    ? "kept (no verdict against it in the network: the isolated costs decide)"
                  : t->verdict < 0 ? "reverted"
                  : keep         ? "kept (undecided within the budget, leaning to the region)"
                                 : "reverted (undecided within the budget, not leaning to the region)");
        char d[REFINE_ROUNDS_MAX * 12] = "";
        for (int k = 0, n = 0; k < t->rounds && n < (int)sizeof d; k++)
            n += snprintf(d + n, sizeof d - (size_t)n, "%s%+.3f", k ? " " : "", t->d[k]);
        kiln__log(KILN_LOG_VERBOSE, "region check: the region from '%s', per round (ms): %s", g->names[0], d);
        reverted += !keep;
        if (kiln__tcache_put(tc, g->key, keep)) kiln__log(KILN_LOG_WARN, "%s", kiln_errmsg());
    }
    return reverted;
}

/* Identical layers into groups: gof[j] = j's group. */
static int make_groups(const b_refine *rf, int *gof, group *g) {
    int ng = 0;
    for (int j = 0; j < rf->n; j++) {
        gof[j] = -1;
        for (int q = 0; q < ng && gof[j] < 0; q++) {
            const b_refine_layer *f = &rf->l[g[q].first];
            if (!strcmp(f->pool, rf->l[j].pool) && f->nalt == rf->l[j].nalt &&
                !memcmp(f->alt, rf->l[j].alt, (size_t)f->nalt * sizeof *f->alt))
                gof[j] = q;
        }
        if (gof[j] < 0) {
            memset(&g[ng], 0, sizeof g[ng]);
            g[ng].first = j;
            g[ng].nalt = rf->l[j].nalt;
            gof[j] = ng++;
        }
        g[gof[j]].n++;
    }
    return ng;
}

/* The regions' variant w (every region reverted): built, set up, and the
 * regions' spans in it and in the base found (span). */
static int region_variant(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc, const b_refine *rf,
                          int threads, variant *v, variant *w, int *span) {
    int rc = variant_build(net, cfg, tc, rf, v[0].e, w);
    if (!rc) rc = variant_setup(rf, threads, w, 0x9E3779B9u);
    if (!rc) w->ok = region_spans(rf, v[0].e, w->e, span);
    if (!rc && !w->ok)
        kiln__log(KILN_LOG_VERBOSE, "region check: the engine without the regions runs its layers in another "
                  "order: not compared");
    return rc;
}

void kiln__b_refine(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc, b_refine *rf,
                    kiln_build_stats *st, kiln_engine **out) {
    const double t0 = kiln__now_ms();
    const int threads = cfg->threads > 0 ? cfg->threads : 1;
    const int nvmax = 2 + 2 * REFINE_MAX_ALT;
    variant *v = kiln__calloc((size_t)nvmax, sizeof *v);
    int *gof = kiln__malloc((size_t)(rf->n + 1) * sizeof *gof), *active = kiln__malloc((size_t)nvmax * sizeof *active);
    group *g = kiln__malloc((size_t)(rf->n + 1) * sizeof *g);
    b_test *rt = kiln__calloc((size_t)(rf->nr + 1), sizeof *rt);
    int *span = kiln__malloc((size_t)(4 * rf->nr + 1) * sizeof *span);
    int nv = 1, rc = v && gof && active && g && rt && span ? 0 : kiln__err(KILN_ENOMEM, "build: out of memory"), ng = 0,
        rounds = 0, open = 0;
    if (!rc) v[0] = (variant){.e = *out, .alt = -1, .ok = 1};
    if (!rc) ng = make_groups(rf, gof, g);
    if (!rc) rc = variant_setup(rf, threads, &v[0], 0x9E3779B9u);
    double budget = v ? REFINE_BUDGET_RUNS * v[0].run_ms : 0, build_ms = 0;
    if (budget > REFINE_BUDGET_MS) budget = REFINE_BUDGET_MS;
    const char *stop = NULL;
    int fast = 0;
    if (!rc && v[0].run_ms < REFINE_MIN_RUN_MS) {
        /* nothing decided, nothing kept: a rebuild looks again (one run) */
        if (rf->n)
            kiln__log(KILN_LOG_VERBOSE, "refine: %d layers with close tactics keep their isolated choice: the engine "
                      "runs in %.3f ms (under %.1f ms, spans of noise)", rf->n, v[0].run_ms, REFINE_MIN_RUN_MS);
        if (rf->nr)
            kiln__log(KILN_LOG_VERBOSE, "region check: %d regions stay switched as the isolated costs chose: the "
                      "engine runs in %.3f ms (under %.1f ms, spans of noise)", rf->nr, v[0].run_ms, REFINE_MIN_RUN_MS);
        fast = 1;
    }
    /* the regions' variant first (every timed CPU build checks them), then the tactics' (--refine) */
    if (rf->nr && !rc && !fast) {
        const double b0 = kiln__now_ms();
        v[nv] = (variant){.alt = -1, .greedy = 1};
        rc = region_variant(net, cfg, tc, rf, threads, v, &v[nv], span);
        nv++;
        build_ms = kiln__now_ms() - b0;
    }
    for (int a = 0; a < REFINE_MAX_ALT && !rc && !stop && !fast; a++)
        for (int p = 0; p < 2 && !rc && !stop; p++) {
            variant *w = &v[nv];
            *w = (variant){.alt = a, .parity = p};
            int any = 0;
            for (int j = 0; j < rf->n; j++) any |= switched(rf, w, j);
            if (!any) continue;
            /* room for this build, one round of the engines so far and the final pass */
            const double b0 = kiln__now_ms();
            if (b0 - t0 + 2 * build_ms + v[0].run_ms * (nv + 1) > budget) {
                stop = "no time left for more variant engines";
                break;
            }
            nv++;
            rc = variant_build(net, cfg, tc, rf, v[0].e, w);
            if (!rc) rc = variant_setup(rf, threads, w, 0x9E3779B9u);
            if (!rc) w->ok = same_layers(&v[0], w);
            const double bt = kiln__now_ms() - b0;
            build_ms = bt > build_ms ? bt : build_ms;
        }
    const double t1 = kiln__now_ms();
    for (int r = 0; r < REFINE_ROUNDS_MAX && !rc && nv > 1; r++) {
        int na = 0;
        double est = v[0].run_ms;
        for (int k = 1; k < nv; k++)
            if (v[k].ok && needed(rf, gof, g, rt, v, nv, k)) {
                active[na++] = k;
                est += v[k].run_ms;
            }
        if (!na) break;
        /* the rounds have a budget of their own: where the variants' builds
         * counted against it, a build of MobileNetV2 (3 ms a run, 0.13 s)
         * whose variant took 0.07 s instead of 0.03 ran no round at all,
         * and ResNet-50's (31 ms a run) 3, both then reverting regions that
         * won every round (-8% and -6% in the network) as undecided */
        if (kiln__now_ms() - t1 + est > budget) {
            stop = stop ? stop : "the time budget ran out";
            break;
        }
        rc = r % 2 ? 0 : variant_run(&v[0]);
        for (int i = 0; i < na && !rc; i++) rc = variant_run(&v[active[i]]);
        if (!rc && r % 2) rc = variant_run(&v[0]);
        if (!rc) open = record_round(rf, gof, g, ng, rt, span, v, nv);
        rounds++;
    }
    const double t2 = kiln__now_ms();
    int changed = 0, reverted = 0;
    if (rc) {
        if (rf->n)
            kiln__log(KILN_LOG_VERBOSE, "refine: %d layers with close tactics keep their isolated choice: %s", rf->n,
                      kiln_errmsg());
        if (rf->nr)
            kiln__log(KILN_LOG_VERBOSE, "region check: %d regions stay switched as the isolated costs chose: %s",
                      rf->nr, kiln_errmsg());
    } else if (!fast) {
        changed = decide(rf, gof, g, ng, tc);
        reverted = decide_regions(rf, rt, tc);
    }
    if (v) v[0].e = NULL; /* *out, the caller's */
    /* every region reverted and no tactic changed: the regions' variant is the engine */
    const int kg = !rc && !changed && reverted && reverted == rf->nr ? greedy_variant(v, nv) : -1;
    kiln_build_stats st2 = kg >= 0 ? v[kg].st : *st;
    kiln_engine *fin = kg >= 0 ? v[kg].e : NULL;
    if (kg >= 0) v[kg].e = NULL;
    for (int k = 0; k < nv && v; k++) variant_free(&v[k]);
    if (fin) {
        kiln__b_hand_over(*out, fin);
        kiln_engine_free(*out);
        *out = fin;
        st->layers = st2.layers;
        st->folded = st2.folded;
        st->reformats = st2.reformats;
        st->fused = st2.fused;
    } else if (changed || reverted) {
        memset(&st2, 0, sizeof st2);
        b_refine frf = {.tactics = rf->tactics, .regions = rf->regions, .donor = *out};
        rc = kiln__b_build_pass(net, cfg, tc, 0, NHWC_ON, &frf, &st2, &fin);
        if (!rc) kiln__b_hand_over(*out, fin);
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
    if (!fast) {
        st->refined += rf->n;
        st->refine_changed += rc ? 0 : changed;
        kiln__log(KILN_LOG_VERBOSE, "refine: %d layers with close tactics in %d groups and %d switched regions, %d "
                  "engines, %d rounds at %d threads (%.1f ms a run): %d choices changed, %d regions reverted, %d tests "
                  "undecided%s%s; %.2f s building variants, %.2f s running, %.2f s in all (budget %.2f s)", rf->n, ng,
                  rf->nr, nv, rounds, threads, v ? v[0].run_ms : 0, rc ? 0 : changed, rc ? 0 : reverted, open,
                  stop ? ": " : "", stop ? stop : "", (t1 - t0) / 1000, (t2 - t1) / 1000,
                  (kiln__now_ms() - t0) / 1000, budget / 1000);
    }
    kiln__free(v);
    kiln__free(active);
    kiln__free(rt);
    kiln__free(span);
    kiln__free(gof);
    kiln__free(g);
}
