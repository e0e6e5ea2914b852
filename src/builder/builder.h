/*
 * builder.h — the builder's working graph (the "IR"), shared by the files of
 * src/build: builder.c (driver, shape inference, folding), select.c
 * (format/type/tactic selection by timing) and emit.c (engine emission).
 *
 * The IR is flat: tensors and layers in arrays, referred to by index.  Layers
 * are appended in topological order (inlined sub-networks are spliced in
 * place), so the array order is an execution order.
 */
#ifndef KILN_BUILDER_H
#define KILN_BUILDER_H

#include "build_int.h"
#include "device/device.h"

#include <string.h>

#define BUILD_CUT_FACTOR 2.0

typedef enum bt_kind { BT_INPUT = 1, BT_CONST, BT_ACT } bt_kind;

typedef struct bt {
    char *name;
    bt_kind kind;
    kiln_dtype dtype;          /* logical */
    int ndim;
    const kiln_expr *dims[KILN_MAX_DIMS];
    const void *data;          /* CONST contents (row-major, logical dtype) */
    size_t bytes;
    int data_owned;
    int nvalues;               /* as kiln_desc.nvalues */
    const kiln_expr *values[KILN_MAX_VALUES];
    int producer;              /* layer index or -1 */
    int is_output;
    int input_index;           /* position among network inputs, -1 */
    int is_size;
    const kiln_expr *size_sym;
    const kiln_expr *numel_bound; /* kiln_shape_numel_bound, or NULL */
    int alias_in;              /* in-place: the tensor whose buffer this output shares, -1 */
    kiln_dtype pdtype;         /* physical (chosen) dtype and format */
    kiln_format pfmt;
    kiln_device_kind loc;      /* memory space of the buffer (select/finalize) */
    uint32_t cast_to;          /* select: bit dt set when a chosen consumer reads it cast to dt, LINEAR
                                * (finalize makes that cast once for all such consumers) */
    int live;
    int eidx;                  /* engine tensor index, -1 */
} bt;

/* b->nhwc: CUDA layers LINEAR; NHWC candidates timed like the others;
 * NHWC candidates ranked first wherever one runs (tests).  AUTO: kiln_build
 * builds ON and OFF and keeps the faster engine. */
enum { NHWC_OFF = 0, NHWC_ON = 1, NHWC_FORCE = 2, NHWC_AUTO = 3 };

#define KILN__B_TBUF_MAX 12 /* timing buffers kept between candidates */

typedef struct bl {
    char *name;
    const kiln__op *op;
    const kiln__attrset *attrs; /* borrowed from the network, or &own */
    kiln__attrset own;
    int has_own;
    int nin, nout;
    int *in, *out;
    void *state;
    int dead;                  /* folded, inlined or unused */
    int aot;                   /* -1 default, 0 JIT, 1 AOT */
    int is_reformat;
    kiln_io_format io;         /* chosen */
    kiln_device_kind device;   /* where it runs (select.c; copies: CUDA) */
    int tactic;
    double ms;
    double aot_ms;             /* measured time of the AOT kernel (select.c), 0: not timed */
    int timed;
    /* fuse.c: elementwise layers fused into this one (applied to out 0) */
    int nepi;
    struct bepi {
        int layer;             /* the fused (dead) layer: op, attrs, inputs */
        int x;                 /* its activation input slot */
    } epi[KILN__MAX_EPI];
} bl;

typedef enum bsym_kind { BS_INPUT_DIM = 1, BS_SIZE, BS_VALUE } bsym_kind;

typedef struct bsym {
    const kiln_expr *e;        /* the SYM expression (pointer identity) */
    bsym_kind kind;
    int t, d;                  /* tensor index, dim/element */
    const kiln_expr *opt, *upper; /* BS_SIZE */
    int64_t vmin, vopt, vmax;  /* BS_INPUT_DIM, BS_VALUE */
} bsym;

/* refine.c: choices made from isolated timings checked inside the
 * network, in variant engines run in paired rounds.  Two kinds:
 *
 * - tactics (KILN_BUILD_REFINE): CPU layers whose isolated ranking is
 *   close (runner-up tactics within REFINE_MARGIN of the chosen one, same
 *   types and formats).  select.c fills `l` (kiln_build's first pass,
 *   `collect`), and takes `force` (li, tactic pairs) in the passes that
 *   build the variant engines; a decided layer's tactic is kept in the
 *   timing cache under `key` (select.c reads it back in every pass).
 * - regions (`regions`: every timed CPU build, unless
 *   $KILN_REGION_CHECK=off): each connected region the region pass
 *   switched to another layout (select_regions).  The first pass lists it
 *   in `r` and keeps it switched; a variant pass reverts the regions whose
 *   keys are in `revert`; the verdict (kept or reverted) goes into the
 *   timing cache under the region's key, which select_regions reads in
 *   every pass. */
#define REFINE_MARGIN 0.10
#define REFINE_MAX_ALT 1
#define REFINE_ROUNDS_MAX 20
typedef struct b_refine_layer {
    int li;                    /* builder layer index before fusion (the same in every pass) */
    char *name;
    int tactic, alt[REFINE_MAX_ALT], nalt;
    double ms, alt_ms[REFINE_MAX_ALT]; /* isolated times */
    char *key;
    char *pool;                /* its candidate key: identical layers share one decision */
} b_refine_layer;

/* A switched region: its layers (builder names, execution order), its
 * layout, its cost from isolated timings (kernels + the reformats at its
 * border) greedy and switched. */
typedef struct b_region {
    char *key;
    char **names; int nnames;
    int label;
    double before, after;
} b_region;

typedef struct b_refine {
    int collect;
    int tactics, regions;      /* which kinds this build checks (above) */
    b_refine_layer *l; int n, cap;
    const int *force; int nforce; /* pairs: li, tactic */
    b_region *r; int nr, capr;
    char *const *revert; int nrevert; /* region keys a variant pass reverts */
    /* a pass's engine shares donor's weights block and the packed forms of
     * its layers that pack alike (emit.c, kiln__b_share_packed): donor must
     * outlive it, or hand them over (kiln__b_hand_over) */
    kiln_engine *donor;
} b_refine;

typedef struct builder {
    const kiln_network *net;
    const kiln_build_config *cfg;
    kiln_build_stats *st;
    kiln_exprs *x;
    bt *t; int nt, capt;
    bl *l; int nl, capl;
    bsym *sym; int nsym, capsym;
    kiln__pool *pool;
    kiln_exec exec;
    /* CUDA builds (cfg->device == CUDA): the device, a stream for timing
     * (cx.base.stream), events; NULL / unused otherwise. */
    const kiln__device *cuda;
    kiln__cuda_exec cx;
    void *ev[2];
    kiln__tcache *tc;
    const kiln__op *reformat_op;
    uint64_t rng;
    /* select.c: candidates slower than cut_ms (> 0) by BUILD_CUT_FACTOR after one
     * sample are not sampled further (kiln__b_run); time spent making timing
     * buffers and running candidates, and candidates cut short (verbose log) */
    double cut_ms, prep_ms, run_ms;
    int ncut;
    int nhwc;                  /* CUDA layouts selection may choose: NHWC_OFF/ON/FORCE (kiln_build) */
    /* select.c: timing buffers kept between candidates (tbuf_keep) */
    struct tbuf {
        int t, out;            /* tensor, 1: an output buffer (0: input data) */
        kiln_dtype dt;
        kiln_format fmt;
        kiln_device_kind loc;
        uint64_t bytes, stamp; /* stamp: the bufs_make that last used it */
        void *p;
    } tbuf[KILN__B_TBUF_MAX];
    int ntbuf;
    uint64_t tbuf_stamp, tbuf_bytes;
    /* recheck_cpu: a second look (kiln__b_run counts the warm-up),
     * candidates rechecked, choices changed, time spent */
    int recheck, nrecheck, nrechosen;
    double recheck_ms;
    int no_fold;               /* finalize: copies of constants stay layers */
    b_refine *rf;              /* refine.c's pass over close choices, or NULL */
    uint64_t net_digest;       /* select.c: the live layers before selection (refine keys) */
    kiln_network **owned; int nowned; /* kiln_shape_inline_owned networks */
} builder;

/* Layer L runs ai.onnx's op `name`. */
static inline int kiln__b_is_onnx(const bl *L, const char *name) {
    return !strcmp(L->op->ns, "ai.onnx") && !strcmp(L->op->name, name);
}
/* Layer li exists, is live, and runs ai.onnx's op `name`. */
static inline int kiln__b_live_onnx(const builder *b, int li, const char *name) {
    return li >= 0 && !b->l[li].dead && kiln__b_is_onnx(&b->l[li], name);
}

/* builder.c */
int kiln__b_new_tensor(builder *b, const char *name, bt_kind kind);
int kiln__b_new_layer(builder *b, const char *name, const kiln__op *op, int nin, int nout);
/* A kiln::reformat layer from tensor `from` to a new tensor named `name`
 * with dtype/format, or into tensor *out_tensor when that is >= 0 (the new
 * tensor's index is returned there).  Returns the layer index.  A reformat
 * of a constant is folded right away unless b->no_fold. */
int kiln__b_add_reformat(builder *b, int from, const char *name, kiln_dtype dt, kiln_format fmt,
                         int *out_tensor);
const bsym *kiln__b_find_sym(const builder *b, const kiln_expr *e);
typedef enum b_eval_mode { BE_OPT = 0, BE_MIN, BE_MAX, BE_UPPER } b_eval_mode;
/* Value of e at opt (size symbols at their opt, or at their upper bound in
 * BE_UPPER and when produced by `upper_layer`). */
int kiln__b_eval(builder *b, const kiln_expr *e, b_eval_mode mode, int upper_layer, int64_t *v);
void kiln__b_desc(const builder *b, int t, kiln_desc *d);
const char *kiln__b_dtype_upper(kiln_dtype t);
/* Run layer L once (or reps times, *ms = median) with io/tactic on the
 * given tensors, on L's device (CUDA: device buffers, CUDA-event timing). */
int kiln__b_run(builder *b, int li, const kiln_io_format *io, int tactic, const kiln_tensor *in,
                kiln_tensor *out, int reps, double *ms);
uint64_t kiln__b_rand(builder *b);
/* emit.c: ask layer li's op for its AOT kernel at its chosen io/tactic
 * (errors name the layer and op). */
int kiln__b_aot_kernel(builder *b, int li, kiln_aot_kernel *k);

/* shape.c: passes 1-3 over a network (sub-networks: in_map/out_map bind
 * their inputs/outputs to IR tensors, names get `prefix`). */
int kiln__b_process_net(builder *b, const kiln_network *net, const int *in_map, const int *out_map,
                        const char *prefix, int depth);
void kiln__b_dead_code(builder *b);
/* shape.c: layer li's formats_fn (its tactic list) run again as its shape
 * call runs it, kiln__shape_ctx_building true: for passes that give a
 * layer a new op after shape inference (mbconv_fuse.c). */
int kiln__b_formats(builder *b, int li);
/* transformer.c (CUDA builds, before dead code): MatMul -> Softmax -> MatMul
 * chains into kiln::attention layers, Add -> LayerNormalization into
 * kiln::add_layernorm. */
int kiln__b_transformer(builder *b);
/* pointwise_fold.c: x * clip(x + 3, 0, 6) / 6 into HardSwish, Conv's scale/shift into its weights (any device) */
int kiln__b_pointwise_fold(builder *b);
/* attn_views.c: Q, K, V (qkv) of an attention layer as views of base[3]
 * (kiln::attention's `views`, 3 x KILN_ATTN_VIEW_INTS ints in vw); 1 if
 * found, 0 if not. */
int kiln__b_attn_views(const builder *b, const int qkv[3], int base[3], int64_t *vw);
/* Layer li runs op with attribute values *own (taken over: freed on
 * error too) from now on: its op, attributes and instance state replaced. */
int kiln__b_set_op(builder *b, int li, const kiln__op *op, kiln__attrset *own);
/* transformer.c: layer li runs op with attributes names[i] = vals[i] (nv)
 * and inputs in[0..nin) from now on. */
int kiln__b_rewrite(builder *b, int li, const kiln__op *op, const char *const *names, const kiln_attr_value *vals,
                    int nv, const int *in, int nin);
/* mbconv_fuse.c (CPU builds, before dead code): MobileNet inverted-residual
 * blocks (1x1 expand, depthwise, 1x1 project) into kiln::mbconv layers. */
int kiln__b_mbconv(builder *b);
/* mbconv_fuse.c, for stempool_fuse.c: layer li a live ai.onnx Conv of 2-D
 * kernel with constant W and B and explicit pads, its strides, pads,
 * dilations and group into s[2], p[4], d[2], *g (else 0); tensor t a
 * rank-4 F32 activation read once, by the chain, and no output. */
int kiln__b_conv_geo(const builder *b, int li, int64_t *s, int64_t *p, int64_t *d, int64_t *g);
int kiln__b_private4(const builder *b, const int *uses, int t);
/* mbconv_fuse.c: CPU builds without KILN_BUILD_NO_FUSION: try_fn(b, li,
 * uses, op) on each layer, op = kiln::`name` v1; a rewrite (1) recounts
 * the readers (uses) and starts again, an error (< 0) stops. */
typedef int (*kiln__b_try_fn)(builder *b, int li, const int *uses, const kiln__op *op);
int kiln__b_rewrite_each(builder *b, const char *name, kiln__b_try_fn try_fn);
/* stempool_fuse.c (CPU builds, before dead code): a stem conv of few input
 * channels [-> Relu] -> MaxPool into one kiln::stempool layer. */
int kiln__b_stempool(builder *b);

/* fuse.c: epilogue fusion (after select, before finalize) */
int kiln__b_fuse(builder *b);
/* fuse.c: uses[t] (b->nt + 1 ints) = how many live layer inputs read
 * tensor t, plus 2 for each size symbol bound to it (so a fusion that
 * wants a single reader leaves it alone): the rewrites' reader counts. */
void kiln__b_count_uses(const builder *b, int *uses);

/* select.c */
int kiln__b_select(builder *b);
/* Memory space of position p (inputs then outputs) of layer L. */
kiln_device_kind kiln__b_pos_loc(const bl *L, int p);
/* 1 when layer L runs on its op's AOT CUDA kernel: a CUDA build, the op
 * has cuda_aot, and the layer (aot = 1) or the build (PREFER_AOT) asks for
 * AOT, or the op has no cuda_impl (and the build does not prefer JIT). */
int kiln__b_cuda_aot_wanted(const builder *b, const bl *L);
/* Does the op's CUDA implementation cover layer L (beyond its types)?
 * When not, *why says why (NULL: the op has no CUDA implementation). */
int kiln__b_cuda_covers(const bl *L, const char **why);
/* builder.c: one pass over the network into *out (rf: refine.c's, or NULL) */
/* $KILN_CPU_BLOCKED=force (tests, as KILN_CUDA_NHWC=force; select.c): the
 * built-in CPU ops offer their blocked rows and a CPU layer with a blocked
 * candidate takes one; the region pass then leaves the choice alone. */
int kiln__b_blocked_force(void);
int kiln__b_build_pass(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc, int first,
                       int nhwc, b_refine *rf, kiln_build_stats *st, kiln_engine **out);
/* refine.c: after the first pass, the close choices of rf timed in the
 * network; *out replaced when a choice changed.  Never fails the build. */
void kiln__b_refine(const kiln_network *net, const kiln_build_config *cfg, kiln__tcache *tc, b_refine *rf,
                    kiln_build_stats *st, kiln_engine **out);
void kiln__b_refine_free(b_refine *rf);
/* refine.c's decision, one paired round at a time: d is the change of
 * the span's time that the alternative makes in this round (< 0: it won
 * the round), seg the reference's time over that span.  The alternative is
 * taken (verdict 1) once its wins pass a one-sided sign test at 5% and
 * its median d is below -tie times the median seg; dropped (-1) once its
 * losses make that impossible within REFINE_ROUNDS_MAX rounds, or at
 * REFINE_ROUNDS_MAX.  Returns 1 while undecided. */
typedef struct b_test {
    int rounds, wins, losses;
    int verdict;               /* 0 undecided, 1 taken, -1 dropped */
    double d[REFINE_ROUNDS_MAX], seg[REFINE_ROUNDS_MAX];
} b_test;
int kiln__b_judge(b_test *t, double d, double seg, double tie);
/* Where the budget ends a test undecided: does it lean to the alternative
 * (REFINE_LEAN_ROUNDS rounds or more, twice as many wins as losses or
 * more, the median below -tie)?  A decided test: its verdict.  The region check's last
 * word (a tactic left undecided keeps its isolated choice). */
#define REFINE_LEAN_ROUNDS 5
int kiln__b_judge_lean(const b_test *t, double tie);
/* A region's verdict from its test t (tie REGION_TIE) and its isolated
 * costs (greedy `before`, switched `after`): 1 kept by the network (won,
 * or leaning to it), 2 kept by the isolated costs (the network short of a
 * verdict against it: its losses short of the sign test, the median loss
 * over its rounds, if any, below REGION_LOSS of the span, and the
 * isolated gain REGION_ISOLATED or more), 0 reverted.  A check the budget
 * cut to fewer than REFINE_LEAN_ROUNDS rounds (an engine that runs for
 * 200 ms or more: the budget's 2 s hold 4 rounds of two runs) has no
 * significant loss to go on, so there too the isolated costs decide, as
 * where the check does not run at all (KILN_REGION_CHECK=off, an engine
 * under REFINE_MIN_RUN_MS); it reverted every such region before. */
#define REGION_ISOLATED 0.05
#define REGION_LOSS 0.03
int kiln__b_region_keep(const b_test *t, double tie, double before, double after);
double kiln__b_test_median(const double *x, int n);
/* refine.c: each layer of e (emitted, not yet prepared) that packs its
 * constants as donor's layer of the same name did (op, attributes, tactic,
 * types, dims, constant bytes) gets donor's packed forms, marked not owned,
 * instead of packing them again.  Returns how many layers, or a KILN_E*
 * (< 0).  kiln__b_hand_over: what e shares of donor (packed forms, the
 * weights block) becomes e's, so donor can be freed. */
int kiln__b_share_packed(const kiln_engine *donor, kiln_engine *e);
void kiln__b_hand_over(kiln_engine *donor, kiln_engine *e);
/* emit.c */
int kiln__b_finalize(builder *b, int **order, int *norder);
int kiln__b_emit(builder *b, const int *order, int norder, kiln_engine **out);

#endif
