/*
 * region.h — chain-aware layout selection: which connected regions of
 * layers switch from the layout the greedy pass gave them to another one.
 *
 * select.c picks each layer's candidate greedily in topological order: its
 * cost is its kernel time plus the reformats of its *inputs*.  A chain of
 * layers that is faster in NCHW16C is then never entered: its first layer
 * pays the reformat in and gets nothing back, and nobody counts the
 * reformat the consumers of a LINEAR layer would pay.  After the greedy
 * pass, select.c describes the network as a cost graph and region.c
 * chooses a layout per layer over the whole graph:
 *
 *   node  a layer; ms[f] its best time with every activation in layout f
 *         (KILN__RG_KEEP: its greedy candidate, whose layouts are mixed);
 *         < 0 where it has no such candidate;
 *   edge  a tensor from producer to consumer (one edge per consumer: each
 *         pays its own reformat); rf[a][b] the reformat time when the
 *         producer runs in label a and the consumer in label b.  An end
 *         of -1 is outside the graph (a network input or output): LINEAR.
 *
 * The choice minimises the sum of node times and edge reformats.  It is
 * made by alpha-expansion: for each layout F, the layers that offer F
 * either keep their label or take F, the best such split being a minimum
 * s-t cut (exact for two labels when a reformat a -> b costs no more than
 * a -> F -> b).  Each connected set of switched layers (a region) is then
 * kept only when its cost, with the reformats at its border, times margin
 * is below its cost before: a region that wins by timing noise is not
 * entered.  Pure: no timing, no builder; tests/test_region.c drives it with
 * synthetic costs.
 */
#ifndef KILN_REGION_H
#define KILN_REGION_H

#include "kiln/kiln.h"

#define KILN__RG_KEEP KILN_FORMAT_COUNT_   /* the greedy candidate with mixed layouts */
#define KILN__RG_LABELS (KILN_FORMAT_COUNT_ + 1)

typedef struct kiln__rg_node {
    double ms[KILN__RG_LABELS]; /* time per label, < 0: not offered */
    int label;                  /* in: the greedy choice (offered); out: the chosen one */
} kiln__rg_node;

typedef struct kiln__rg_edge {
    int from, to;                               /* node indices, -1: outside (LINEAR) */
    double rf[KILN__RG_LABELS][KILN__RG_LABELS]; /* [from's label][to's label] */
} kiln__rg_edge;

/* One region switched: its layout, node count, first node, and its cost
 * (nodes + the edges touching it) before and after. */
typedef struct kiln__rg_region {
    int label, nnodes, first;
    double before, after;
} kiln__rg_region;

/* Choose the labels of nodes[0..nn) (see the top).  Switched regions are
 * written to reg (up to maxreg; *nreg = how many were switched, which may
 * exceed maxreg).  Each node's `label` ends at its chosen label; `region`
 * (may be NULL, nn ints) gets the index of the node's last region or -1.
 * Returns 0 or KILN_ENOMEM. */
int kiln__rg_solve(kiln__rg_node *nodes, int nn, const kiln__rg_edge *edges, int ne, double margin,
                   kiln__rg_region *reg, int maxreg, int *nreg, int *region);

/* Islands, after kiln__rg_solve: a connected set of at most 4 nodes of one
 * label whose neighbours (at least two edges leave it; an end outside the
 * graph is LINEAR) all have one label F that each of its nodes offers, so
 * that it pays a reformat on every edge out, takes F when its cost there
 * (its nodes' times and the edges touching them) is at most `ratio` times
 * its cost now.  Greedy makes such islands out of isolated times, which a
 * slow stretch of a shared host can put 25-40% over a kernel's time in the
 * network (ResNet-50, bench/README.md session 31); the builder then has
 * the network decide (refine.c): the healed set, a loss in isolation, is
 * kept only where it wins there.  Returns how many islands took F, or
 * KILN_ENOMEM. */
int kiln__rg_heal(kiln__rg_node *nodes, int nn, const kiln__rg_edge *edges, int ne, double ratio);

/* The nodes whose label differs between a and b (nn ints each) grouped
 * into connected regions over the edges between two of them: comp[i] its
 * region, -1 for a node whose label is the same.  Returns how many, or
 * KILN_ENOMEM.  (select.c: the regions left after kiln__rg_solve, which
 * refine.c checks in the network one by one.) */
int kiln__rg_components(int nn, const kiln__rg_edge *edges, int ne, const int *a, const int *b, int *comp);

/* The cost of the nodes with comp[i] == c and of the edges touching them,
 * under labels lab (nn ints). */
double kiln__rg_cost(const kiln__rg_node *nodes, int nn, const kiln__rg_edge *edges, int ne, const int *comp, int c,
                    const int *lab);

#endif
