/*
 * region.c — chain-aware layout selection over a cost graph (region.h).
 *
 * One expansion (expand) asks, for a layout F: which of the layers that
 * offer F should take it, every other layer keeping its label?  With x = 1
 * for "takes F", a node's cost is U(x) and an edge's E(x_from, x_to); the
 * total is minimised by the minimum cut between a source (x = 0) and a
 * sink (x = 1) in the usual construction (Kolmogorov and Zabih, "What
 * energy functions can be minimized via graph cuts?", 2004):
 *
 *   E(x, y) = E00 + (E10 - E00) x + (E11 - E10) y + (E01 + E10 - E00 - E11) (1 - x) y
 *
 * the linear terms go to the nodes, the last one is an arc x -> y (cut when
 * x keeps its label and y takes F).  That weight is >= 0 when a reformat
 * costs no more than going through F (the triangle inequality of measured
 * reformats); a measurement that breaks it is clamped to 0, which can only
 * make the cut miss a better split, never choose a worse one than it says:
 * every region is costed again with the true edge costs before it is kept.
 *
 * The graphs are small (a few hundred layers offer a blocked layout in a
 * ResNet-50); Edmonds-Karp on adjacency lists is plenty.
 */
#include "region.h"
#include "kiln_int.h"

#include <string.h>

typedef struct arc {
    int to, next;
    double cap;
} arc;

typedef struct flow {
    arc *a;
    int na, cap;
    int *head, n;
} flow;

/* Arcs u -> v (cap c) and its reverse v -> u (cap r): indices 2k and 2k + 1. */
static int arc_add(flow *f, int u, int v, double c, double r) {
    if (f->na + 2 > f->cap) {
        arc *n = kiln__grow(f->a, &f->cap, f->na + 2, sizeof *f->a);
        if (!n) return KILN_ENOMEM;
        f->a = n;
    }
    f->a[f->na] = (arc){.to = v, .next = f->head[u], .cap = c};
    f->head[u] = f->na++;
    f->a[f->na] = (arc){.to = u, .next = f->head[v], .cap = r};
    f->head[v] = f->na++;
    return 0;
}

/* Max flow from s to t (Edmonds-Karp); afterwards seen[v] = 1 for the
 * nodes on the source side of a minimum cut.  eps: residual capacity that
 * counts as none. */
static int max_flow(flow *f, int s, int t, double eps, char *seen) {
    int *prev = kiln__malloc((size_t)f->n * sizeof *prev), *queue = kiln__malloc((size_t)f->n * sizeof *queue);
    if (!prev || !queue) {
        kiln__free(prev);
        kiln__free(queue);
        return KILN_ENOMEM;
    }
    for (;;) {
        memset(seen, 0, (size_t)f->n);
        int qh = 0, qt = 0;
        queue[qt++] = s;
        seen[s] = 1;
        while (qh < qt && !seen[t]) {
            int u = queue[qh++];
            for (int k = f->head[u]; k >= 0; k = f->a[k].next)
                if (f->a[k].cap > eps && !seen[f->a[k].to]) {
                    seen[f->a[k].to] = 1;
                    prev[f->a[k].to] = k;
                    queue[qt++] = f->a[k].to;
                }
        }
        if (!seen[t]) break; /* seen: the source side */
        double push = -1;
        for (int v = t; v != s; v = f->a[prev[v] ^ 1].to)
            if (push < 0 || f->a[prev[v]].cap < push) push = f->a[prev[v]].cap;
        for (int v = t; v != s; v = f->a[prev[v] ^ 1].to) {
            f->a[prev[v]].cap -= push;
            f->a[prev[v] ^ 1].cap += push;
        }
    }
    kiln__free(prev);
    kiln__free(queue);
    return 0;
}

static double edge_cost(const kiln__rg_edge *e, const int *lab) {
    int a = e->from >= 0 ? lab[e->from] : KILN_FORMAT_LINEAR, b = e->to >= 0 ? lab[e->to] : KILN_FORMAT_LINEAR;
    return e->rf[a][b];
}

double kiln__rg_cost(const kiln__rg_node *nodes, int nn, const kiln__rg_edge *edges, int ne, const int *comp, int c,
                    const int *lab) {
    double s = 0;
    for (int i = 0; i < nn; i++)
        if (comp[i] == c) s += nodes[i].ms[lab[i]];
    for (int k = 0; k < ne; k++)
        if ((edges[k].from >= 0 && comp[edges[k].from] == c) || (edges[k].to >= 0 && comp[edges[k].to] == c))
            s += edge_cost(&edges[k], lab);
    return s;
}

/* Connected components of the nodes whose label a[i] != b[i], over the
 * edges between two of them: comp[i] = its component, -1 for the others.
 * stack: nn ints of scratch.  Returns how many. */
static int components(int nn, const kiln__rg_edge *edges, int ne, const int *a, const int *b, int *comp, int *stack) {
    int ncomp = 0;
    for (int i = 0; i < nn; i++) comp[i] = -1;
    for (int i = 0; i < nn; i++) {
        if (comp[i] >= 0 || a[i] == b[i]) continue;
        int sp = 0;
        stack[sp++] = i;
        comp[i] = ncomp;
        while (sp) {
            int u = stack[--sp];
            for (int k = 0; k < ne; k++) {
                const kiln__rg_edge *e = &edges[k];
                int v = e->from == u ? e->to : e->to == u ? e->from : -1;
                if (v < 0 || comp[v] >= 0 || a[v] == b[v]) continue;
                comp[v] = ncomp;
                stack[sp++] = v;
            }
        }
        ncomp++;
    }
    return ncomp;
}

int kiln__rg_components(int nn, const kiln__rg_edge *edges, int ne, const int *a, const int *b, int *comp) {
    int *stack = kiln__malloc((size_t)(nn > 0 ? nn : 1) * sizeof *stack);
    if (!stack) return KILN_ENOMEM;
    const int n = components(nn, edges, ne, a, b, comp, stack);
    kiln__free(stack);
    return n;
}

/* Islands: connected sets of at most ISLAND_NODES nodes of one label (the
 * components of each label's nodes); comp[i] = its set, -1 for a node of a
 * larger one.  scratch: 4 nn ints.  Returns how many sets. */
#define ISLAND_NODES 4
static int islands(const int *lab, int nn, const kiln__rg_edge *edges, int ne, int *comp, int *scratch) {
    int *is = scratch, *none = scratch + nn, *cl = scratch + 2 * nn, *stack = scratch + 3 * nn, nc = 0;
    for (int i = 0; i < nn; i++) comp[i] = -1, none[i] = 0;
    for (int f = 0; f < KILN__RG_LABELS; f++) {
        for (int i = 0; i < nn; i++) is[i] = lab[i] == f;
        const int k = components(nn, edges, ne, is, none, cl, stack);
        for (int c = 0; c < k; c++) {
            int size = 0;
            for (int i = 0; i < nn; i++) size += cl[i] == c;
            if (size > ISLAND_NODES) continue;
            for (int i = 0; i < nn; i++)
                if (cl[i] == c) comp[i] = nc;
            nc++;
        }
    }
    return nc;
}

/* The label every edge leaving set c has at its other end (an end outside
 * the graph: LINEAR), or -1 when they differ or fewer than two leave. */
static int border_label(const kiln__rg_edge *edges, int ne, const int *lab, const int *comp, int c) {
    int n = 0, f = -1;
    for (int k = 0; k < ne; k++) {
        const kiln__rg_edge *e = &edges[k];
        const int in_from = e->from >= 0 && comp[e->from] == c, in_to = e->to >= 0 && comp[e->to] == c;
        if (in_from == in_to) continue;
        const int o = in_from ? e->to : e->from, l = o >= 0 ? lab[o] : KILN_FORMAT_LINEAR;
        if (n++ == 0) f = l;
        else if (f != l) return -1;
    }
    return n >= 2 ? f : -1;
}

int kiln__rg_heal(kiln__rg_node *nodes, int nn, const kiln__rg_edge *edges, int ne, double ratio) {
    int *lab = kiln__malloc((size_t)(6 * nn + 1) * sizeof *lab), healed = 0;
    if (!lab) return KILN_ENOMEM;
    int *const comp = lab + nn;
    for (int i = 0; i < nn; i++) lab[i] = nodes[i].label;
    const int nc = islands(lab, nn, edges, ne, comp, lab + 2 * nn);
    for (int c = 0; c < nc; c++) {
        const int f = border_label(edges, ne, lab, comp, c);
        int ok = f >= 0 && f != KILN__RG_KEEP;
        for (int i = 0; i < nn && ok; i++)
            if (comp[i] == c) ok = lab[i] != f && nodes[i].ms[f] >= 0;
        if (!ok) continue;
        const double now = kiln__rg_cost(nodes, nn, edges, ne, comp, c, lab);
        for (int i = 0; i < nn; i++)
            if (comp[i] == c) lab[i] = f;
        if (kiln__rg_cost(nodes, nn, edges, ne, comp, c, lab) <= ratio * now) {
            for (int i = 0; i < nn; i++)
                if (comp[i] == c) nodes[i].label = f;
            healed++;
        } else {
            for (int i = 0; i < nn; i++)
                if (comp[i] == c) lab[i] = nodes[i].label;
        }
    }
    kiln__free(lab);
    return healed;
}

typedef struct solver {
    kiln__rg_node *nodes;
    int nn;
    const kiln__rg_edge *edges;
    int ne;
    double margin;
    kiln__rg_region *reg;
    int maxreg, nreg;
    int *region;
    int *var, *lab, *comp, *stack; /* nn each */
    double *u0, *u1;               /* unary costs of the binary problem */
    char *seen;                    /* nn + 2 */
} solver;

/* The labels that one min cut gives for layout F: lab[i] (a copy of the
 * current labels) set to F where the cut says so. */
static int cut_for(solver *s, int F, int *nvar) {
    const int nn = s->nn;
    int n = 0;
    for (int i = 0; i < nn; i++) {
        s->lab[i] = s->nodes[i].label;
        s->var[i] = s->nodes[i].ms[F] >= 0 && s->nodes[i].label != F ? n++ : -1;
    }
    *nvar = n;
    if (!n) return 0;
    double total = 0;
    for (int i = 0; i < nn; i++) {
        if (s->var[i] < 0) continue;
        s->u0[s->var[i]] = s->nodes[i].ms[s->nodes[i].label];
        s->u1[s->var[i]] = s->nodes[i].ms[F];
    }
    flow f = {.n = n + 2};
    f.head = kiln__malloc((size_t)f.n * sizeof *f.head);
    if (!f.head) return KILN_ENOMEM;
    for (int v = 0; v < f.n; v++) f.head[v] = -1;
    int rc = 0;
    for (int k = 0; k < s->ne && !rc; k++) {
        const kiln__rg_edge *e = &s->edges[k];
        const int x = e->from >= 0 ? s->var[e->from] : -1, y = e->to >= 0 ? s->var[e->to] : -1;
        const int a = e->from >= 0 ? s->lab[e->from] : KILN_FORMAT_LINEAR;
        const int b = e->to >= 0 ? s->lab[e->to] : KILN_FORMAT_LINEAR;
        if (x >= 0 && y >= 0) {
            const double e00 = e->rf[a][b], e01 = e->rf[a][F], e10 = e->rf[F][b], e11 = e->rf[F][F];
            s->u1[x] += e10 - e00;
            s->u1[y] += e11 - e10;
            double w = e01 + e10 - e00 - e11;
            if (w > 0) rc = arc_add(&f, x, y, w, 0);
        } else if (x >= 0) {
            s->u0[x] += e->rf[a][b];
            s->u1[x] += e->rf[F][b];
        } else if (y >= 0) {
            s->u0[y] += e->rf[a][b];
            s->u1[y] += e->rf[a][F];
        }
    }
    const int src = n, snk = n + 1;
    for (int i = 0; i < nn && !rc; i++) {
        const int v = s->var[i];
        if (v < 0) continue;
        const double m = s->u0[v] < s->u1[v] ? s->u0[v] : s->u1[v];
        total += s->u0[v] - m + s->u1[v] - m;
        /* x = 1 (takes F) puts v on the sink side: s -> v is cut and pays U(1) */
        if (s->u1[v] - m > 0) rc = arc_add(&f, src, v, s->u1[v] - m, 0);
        if (!rc && s->u0[v] - m > 0) rc = arc_add(&f, v, snk, s->u0[v] - m, 0);
    }
    if (!rc) rc = max_flow(&f, src, snk, 1e-12 * (total + 1), s->seen);
    for (int i = 0; i < nn && !rc; i++)
        if (s->var[i] >= 0 && !s->seen[s->var[i]]) s->lab[i] = F;
    kiln__free(f.a);
    kiln__free(f.head);
    return rc;
}

/* One expansion for layout F: the cut's switched layers grouped into
 * connected regions, each kept when it wins by the margin.  *changed set
 * when one was kept. */
static int expand(solver *s, int F, int *changed) {
    int nvar;
    int rc = cut_for(s, F, &nvar);
    if (rc || !nvar) return rc;
    const int nn = s->nn;
    int *old = s->var; /* (var is free again: reused for the labels before) */
    for (int i = 0; i < nn; i++) old[i] = s->nodes[i].label;
    /* regions: connected components of the switched nodes */
    const int ncomp = components(nn, s->edges, s->ne, old, s->lab, s->comp, s->stack);
    for (int c = 0; c < ncomp; c++) {
        const double before = kiln__rg_cost(s->nodes, nn, s->edges, s->ne, s->comp, c, old);
        double after = 0;
        /* the region's labels alone changed: the others keep theirs */
        int first = -1, cnt = 0;
        for (int i = 0; i < nn; i++)
            if (s->comp[i] == c) {
                old[i] = F;
                cnt++;
                if (first < 0) first = i;
            }
        after = kiln__rg_cost(s->nodes, nn, s->edges, s->ne, s->comp, c, old);
        for (int i = 0; i < nn; i++)
            if (s->comp[i] == c) old[i] = s->nodes[i].label;
        if (!(after * s->margin < before)) continue;
        for (int i = 0; i < nn; i++)
            if (s->comp[i] == c) {
                s->nodes[i].label = F;
                old[i] = F;
                if (s->region) s->region[i] = s->nreg;
            }
        if (s->nreg < s->maxreg)
            s->reg[s->nreg] = (kiln__rg_region){.label = F, .nnodes = cnt, .first = first, .before = before,
                                                .after = after};
        s->nreg++;
        *changed = 1;
    }
    return 0;
}

int kiln__rg_solve(kiln__rg_node *nodes, int nn, const kiln__rg_edge *edges, int ne, double margin,
                   kiln__rg_region *reg, int maxreg, int *nreg, int *region) {
    solver s = {.nodes = nodes, .nn = nn, .edges = edges, .ne = ne, .margin = margin, .reg = reg,
                .maxreg = maxreg, .region = region};
    *nreg = 0;
    if (region)
        for (int i = 0; i < nn; i++) region[i] = -1;
    if (nn <= 0) return 0;
    const size_t n = (size_t)nn;
    s.var = kiln__malloc(n * sizeof *s.var);
    s.lab = kiln__malloc(n * sizeof *s.lab);
    s.comp = kiln__malloc(n * sizeof *s.comp);
    s.stack = kiln__malloc(n * sizeof *s.stack);
    s.u0 = kiln__malloc(n * sizeof *s.u0);
    s.u1 = kiln__malloc(n * sizeof *s.u1);
    s.seen = kiln__malloc(n + 2);
    int rc = s.var && s.lab && s.comp && s.stack && s.u0 && s.u1 && s.seen ? 0 : KILN_ENOMEM;
    /* blocked layouts first: LINEAR last, so a region can also be left again */
    static const int order[] = {KILN_FORMAT_NCHW16C, KILN_FORMAT_NCHW8C, KILN_FORMAT_NHWC, KILN_FORMAT_LINEAR};
    for (int round = 0, changed = 1; round < 4 && changed && !rc; round++) {
        changed = 0;
        for (int k = 0; k < 4 && !rc; k++) rc = expand(&s, order[k], &changed);
    }
    *nreg = s.nreg;
    kiln__free(s.var);
    kiln__free(s.lab);
    kiln__free(s.comp);
    kiln__free(s.stack);
    kiln__free(s.u0);
    kiln__free(s.u1);
    kiln__free(s.seen);
    return rc;
}
