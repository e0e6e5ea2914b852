/*
 * placement.h — where each layer of a sample engine runs, as the samples
 * runners print it (kiln-samples here, samples/python/placement.py the same
 * way), one line per layer:
 *
 *   layer pad_a          sample::circ_pad v2 on cuda, JIT impl tactic 2
 *
 * The copies and type conversions the builder inserted are layers too.
 */
#ifndef KILN_SAMPLES_PLACEMENT_H
#define KILN_SAMPLES_PLACEMENT_H

#include <kiln/kiln.h>

/* Prints every layer of `e` on stdout; returns how many layers of the
 * sample namespace ("sample::") run on another device than `want` (a
 * kiln_device_kind, or -1: any device), or 1 when the engine has no such
 * layer at all. */
int kiln_samples_print_placement(const kiln_engine *e, int want);

#endif
