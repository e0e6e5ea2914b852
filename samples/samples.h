/*
 * samples.h — what the sample plugin library (libkiln_samples_ops.so)
 * exports besides its ops.
 *
 * The library registers the sample ops (namespace "sample") when it is
 * loaded.  It also builds the sample networks through the public network
 * API, so the runner (kiln-samples) and the CLI (`kiln build --network NAME
 * --plugins libkiln_samples_ops.so`) construct the same graphs.  Programs
 * reach these functions with dlsym() on the loaded library (the CLI does) or
 * by linking the library.
 *
 * The ops keep a few counters and pointers in process-wide globals so the
 * runner can prove what happened (how often impl ran, that in-place ops
 * wrote in place).  They are diagnostics for the samples, not a pattern for
 * production plugins.
 */
#ifndef KILN_SAMPLES_H
#define KILN_SAMPLES_H

#include <kiln/kiln.h>

#define KILN_SAMPLES_NETWORK_SYMBOL "kiln_samples_network"

/* Sample networks, by name:
 *   elemwise_add   x[2,3,4] + y[2,3,4] -> z          (opts: "autotune")
 *   inplace_add    t = x + y (in place on a copy of x); z = t + y (in place on t)
 *   non_zero       x[R,C] -> indices [N,2] int32, count N (0-D i64)
 *                  (opts: "shape=RxC", "dynamic": R and C symbolic)
 *   circ_pad       x[2,3,8,10] -> two circ_pad layers with the same pads
 *                  (opts: "multi-tactic", "per-format-tactics", "aot", "shape=AxBx..",
 *                  "pads=a:b:..")
 *   chain100       100 chained elemwise_add on 1-element tensors
 * `opts` is a comma-separated list (NULL = none).  Returns 0, or a negative
 * KILN_E* code with kiln_errmsg() set (unknown name: KILN_ENOTFOUND listing
 * the names). */
typedef int (*kiln_samples_network_fn)(const char *name, const char *opts,
                                       kiln_network **out);
__attribute__((visibility("default")))
int kiln_samples_network(const char *name, const char *opts, kiln_network **out);

/* Space-separated list of the network names above. */
__attribute__((visibility("default"))) const char *kiln_samples_network_names(void);

/* ---- diagnostics read by the runner ---- */

/* Calls of sample::elemwise_add's impl by input dtype since the last reset. */
typedef struct kiln_samples_counters {
    long add_f32, add_f16;
    long circ_pad_calls[3]; /* by tactic 0, 1, 2 */
} kiln_samples_counters;
__attribute__((visibility("default"))) kiln_samples_counters *kiln_samples_counters_get(void);

/* The last calls of sample::inplace_add: input 0 and output pointers. */
#define KILN_SAMPLES_INPLACE_LOG 8
typedef struct kiln_samples_inplace_log {
    int n; /* calls recorded (ring: the last KILN_SAMPLES_INPLACE_LOG) */
    const void *in0[KILN_SAMPLES_INPLACE_LOG];
    const void *out[KILN_SAMPLES_INPLACE_LOG];
} kiln_samples_inplace_log;
__attribute__((visibility("default"))) kiln_samples_inplace_log *kiln_samples_inplace_log_get(void);

#endif /* KILN_SAMPLES_H */
