/*
 * gemm.c — ONNX Gemm and MatMul on the packed SGEMM (sgemm.c).
 *
 * Gemm:   Y = alpha * op(A) * op(B) + beta * C, C unidirectionally
 *         broadcast to (M, N); transposition is expressed as strides, so
 *         no transposed copy is ever made.
 * MatMul: numpy matmul: 1-D operands promoted (and the added dim removed),
 *         batch dims broadcast.  When B has no batch (weights), the batch of
 *         A folds into M and one large GEMM runs.
 */
#include "device/cpu/sgemm.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"


#include <math.h>

/* ------------------------------------------------------------ helpers */

static int same_or_unknown(const kiln_expr *a, const kiln_expr *b, int64_t *va, int64_t *vb) {
    if (a == b) return 1;
    if (kiln_expr_is_const(a, va) && kiln_expr_is_const(b, vb)) return *va == *vb;
    return 1;
}

/* ------------------------------------------------------------ Gemm */

static const kiln_attr_def gemm_attrs[] = {
    {"alpha", KILN_ATTR_FLOAT, 0, "1.0", 0, "scalar multiplier of A*B"},
    {"beta", KILN_ATTR_FLOAT, 0, "1.0", 0, "scalar multiplier of C"},
    {"transA", KILN_ATTR_INT, 0, "0", 0, "transpose A"},
    {"transB", KILN_ATTR_INT, 0, "0", 0, "transpose B"},
    {"broadcast", KILN_ATTR_INT, 0, "0", 0, "opset < 7 (ignored: C always broadcasts)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int gemm_shape(kiln_shape_ctx *c) {
    const kiln_desc *a = &c->in[0], *b = &c->in[1];
    if (a->ndim != 2 || b->ndim != 2)
        return kiln_set_error(KILN_ESHAPE, "Gemm expects 2-D A and B, found rank %d and %d",
                              a->ndim, b->ndim);
    if (a->dtype != b->dtype)
        return kiln_set_error(KILN_ETYPE, "Gemm: A is %s but B is %s", kiln_dtype_name(a->dtype),
                              kiln_dtype_name(b->dtype));
    if (!kiln__ops_is_float(a->dtype))
        return kiln_set_error(KILN_EUNSUPPORTED, "Gemm: type %s not supported (float types only)",
                              kiln_dtype_name(a->dtype));
    int ta = kiln_attrs_int(c->attrs, "transA") != 0, tb = kiln_attrs_int(c->attrs, "transB") != 0;
    const kiln_expr *M = a->dims[ta ? 1 : 0], *Ka = a->dims[ta ? 0 : 1];
    const kiln_expr *Kb = b->dims[tb ? 1 : 0], *N = b->dims[tb ? 0 : 1];
    int64_t v1, v2;
    if (!same_or_unknown(Ka, Kb, &v1, &v2))
        return kiln_set_error(KILN_ESHAPE,
                              "Gemm: inner dims differ: A gives K=%lld, B gives K=%lld "
                              "(transA=%d, transB=%d)",
                              (long long)v1, (long long)v2, ta, tb);
    int rc = kiln__ops_check_same_mask(c, "Gemm", 1u << 2); /* C: read as A's type */
    if (rc) return rc;
    if (c->nin > 2 && c->in[2].dtype != KILN_DTYPE_UNDEFINED && c->in[2].ndim > 2)
        return kiln_set_error(KILN_ESHAPE, "Gemm: C must have rank <= 2, found %d", c->in[2].ndim);
    c->out[0].dtype = a->dtype;
    c->out[0].ndim = 2;
    c->out[0].dims[0] = M;
    c->out[0].dims[1] = N;
    return 0;
}

/* sgemm `done` hook: Y is [M, N], so column j is channel j (chan_len 1). */
typedef struct gemm_epi {
    const kiln_call *c;
    float *y;
    int64_t N;
} gemm_epi;
static void gemm_done(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n) {
    const gemm_epi *ge = ud;
    for (int64_t i = i0; i < i1; i++) kiln_call_epilogue(ge->c, 0, ge->y + i * ge->N + j0, n, j0, 1);
}

static int gemm_impl_f32(const kiln_call *c) {
    const kiln_tensor *A = &c->in[0], *B = &c->in[1], *C = c->nin > 2 ? &c->in[2] : NULL;
    kiln_tensor *Y = &c->out[0];
    int ta = kiln_attrs_int(c->attrs, "transA") != 0, tb = kiln_attrs_int(c->attrs, "transB") != 0;
    float alpha = (float)kiln_attrs_float(c->attrs, "alpha");
    float beta = (float)kiln_attrs_float(c->attrs, "beta");
    int64_t M = Y->dims[0], N = Y->dims[1], K = A->dims[ta ? 0 : 1];
    if (B->dims[tb ? 1 : 0] != K)
        return kiln_set_error(KILN_ESHAPE, "Gemm: A gives K=%lld but B gives K=%lld",
                              (long long)K, (long long)B->dims[tb ? 1 : 0]);
    float *y = Y->data;
    kiln__gemm g = {.M = M, .N = N, .K = K, .alpha = alpha, .c = y, .ldc = N};
    g.a = A->data;
    g.a_rs = ta ? A->strides[1] : A->strides[0];
    g.a_cs = ta ? A->strides[0] : A->strides[1];
    g.b = B->data;
    g.b_rs = tb ? B->strides[1] : B->strides[0];
    g.b_cs = tb ? B->strides[0] : B->strides[1];
    if (C && C->data && beta != 0.0f) {
        const float *cv = C->data;
        int64_t cm = 1, cn = 1;
        if (C->ndim == 1) cn = C->dims[0];
        if (C->ndim == 2) { cm = C->dims[0]; cn = C->dims[1]; }
        if ((cm != 1 && cm != M) || (cn != 1 && cn != N))
            return kiln_set_error(KILN_ESHAPE,
                                  "Gemm: C of shape (%lld, %lld) does not broadcast to (%lld, %lld)",
                                  (long long)cm, (long long)cn, (long long)M, (long long)N);
        if (cn == 1 && cm == M && beta == 1.0f && M > 0) {
            g.bias_row = cv; /* per-row bias: fused into the store */
        } else {
            for (int64_t i = 0; i < M; i++) {
                const float *cr = cv + (cm == 1 ? 0 : i * cn);
                float *yr = y + i * N;
                if (cn == 1)
                    for (int64_t j = 0; j < N; j++) yr[j] = beta * cr[0];
                else
                    for (int64_t j = 0; j < N; j++) yr[j] = beta * cr[j];
            }
            g.accumulate = 1;
        }
    }
    if (c->prepacked) g.b_packed = c->prepacked[1];
    gemm_epi ge = {c, y, N};
    if (c->epilogue) {
        g.done = gemm_done;
        g.done_ud = &ge;
    }
    kiln__sgemm(&g, c->exec);
    return 0;
}

static int gemm_impl(const kiln_call *c) { return kiln__ops_as_f32(c, gemm_impl_f32); }

/* A constant F32 weight matrix packed once as the SGEMM's B operand
 * (kiln_quick_op.prepack), for Gemm (b_rs/b_cs from transB) and MatMul
 * (2-D B).  rows: the rows of A (-1 if not static); a single row runs the
 * matrix-vector path, which reads B in place: nothing to pack then. */
static int weights_prepack(const kiln_call *c, int input, int64_t rows, int64_t K, int64_t N, int64_t b_rs,
                           int64_t b_cs, void *dst, size_t *size) {
    const kiln_tensor *A = &c->in[0], *B = &c->in[1];
    size_t want = *size;
    *size = 0;
    if (input != 1 || rows == 1 || A->dtype != KILN_DTYPE_F32 || B->dtype != KILN_DTYPE_F32 || !B->data ||
        B->ndim != 2 || !kiln__ops_dense(B) || K < 1 || N < 1)
        return 0;
    size_t bytes = kiln__sgemm_pack_b_floats(K, N) * sizeof(float);
    if (!dst) {
        *size = bytes;
        return 0;
    }
    if (want != bytes)
        return kiln_set_error(KILN_EINTERNAL, "weight prepack: %zu bytes asked, %zu given", bytes, want);
    kiln__gemm g = {.N = N, .K = K, .b = B->data, .b_rs = b_rs, .b_cs = b_cs};
    kiln__sgemm_pack_b(&g, dst);
    *size = bytes;
    return 0;
}

static int gemm_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    const kiln_tensor *A = &c->in[0], *B = &c->in[1];
    int ta = kiln_attrs_int(c->attrs, "transA") != 0, tb = kiln_attrs_int(c->attrs, "transB") != 0;
    if (A->ndim != 2 || B->ndim != 2) {
        *size = 0;
        return 0;
    }
    return weights_prepack(c, input, A->dims[ta ? 1 : 0], B->dims[tb ? 1 : 0], B->dims[tb ? 0 : 1],
                           tb ? B->strides[1] : B->strides[0], tb ? B->strides[0] : B->strides[1], dst, size);
}

/* CUDA (gemm_cuda.c): tactics 1..4 = cuBLASLt's first heuristic algorithms. */
static const kiln_combo gemm_cuda_formats[] = {{.types = KILN_CU_T_FLOAT, .tactics = {1, 2, 3, 4}}, {0}};

static const kiln_quick_op gemm_op = {
    .ns = "ai.onnx", .name = "Gemm", .version = 1,
    .min_inputs = 2, .max_inputs = 3, .num_outputs = 1,
    .attrs = gemm_attrs, .shape = gemm_shape, .impl = gemm_impl, .prepack = gemm_prepack,
    .timing_id = "transA,transB",
    .accepts_epilogue = 1, /* applied per finished tile (sgemm done hook) */
    .doc = "general matrix multiply Y = alpha*A'*B' + beta*C (packed AVX SGEMM)",
    .cuda_impl = kiln__cu_gemm, .cuda_formats = gemm_cuda_formats, .cuda_workspace = kiln__cu_gemm_workspace,
};

/* ------------------------------------------------------------ MatMul */

static int matmul_shape(kiln_shape_ctx *c) {
    const kiln_desc *a = &c->in[0], *b = &c->in[1];
    if (a->dtype != b->dtype)
        return kiln_set_error(KILN_ETYPE, "MatMul: A is %s but B is %s",
                              kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    if (!kiln__ops_is_float(a->dtype))
        return kiln_set_error(KILN_EUNSUPPORTED, "MatMul: type %s not supported (float types only)",
                              kiln_dtype_name(a->dtype));
    return kiln__ops_matmul_shape(c, "MatMul", 0, 1, a->dtype);
}

static int is_int8(kiln_dtype t) { return t == KILN_DTYPE_U8 || t == KILN_DTYPE_I8; }

static int matmulint_shape(kiln_shape_ctx *c) {
    if (!is_int8(c->in[0].dtype) || !is_int8(c->in[1].dtype))
        return kiln_set_error(KILN_ETYPE, "MatMulInteger: A and B must be u8/i8, found %s and %s",
                              kiln_dtype_name(c->in[0].dtype), kiln_dtype_name(c->in[1].dtype));
    return kiln__ops_matmul_shape(c, "MatMulInteger", 0, 1, KILN_DTYPE_I32);
}

typedef struct mm_task {
    const kiln__gemm *proto;
    int64_t nbatch;
    const int64_t *aoff, *boff, *yoff;
} mm_task;

static void mm_batches(void *ud, int ith, int nth) {
    const mm_task *t = ud;
    int64_t b, e;
    kiln_split_range(t->nbatch, ith, nth, &b, &e);
    for (int64_t i = b; i < e; i++) {
        kiln__gemm g = *t->proto;
        g.a += t->aoff[i];
        g.b += t->boff[i];
        g.c += t->yoff[i];
        kiln__sgemm_serial(&g);
    }
}

/* sgemm `done` hook for a MatMul whose batch is folded into M (or absent):
 * a block of rows [i0, i1) x columns [j0, j0 + n) of Y viewed as [rows, N].
 * The epilogue's channel is Y's dim 1: the column for a 2-D Y, else the
 * row's index along dim 1 (each run then lies in one channel). */
typedef struct mm_epi {
    const kiln_call *c;
    float *y;
    int64_t N, rows_per_ch, C;
    int rank;
} mm_epi;
static void mm_done(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n) {
    const mm_epi *me = ud;
    for (int64_t i = i0; i < i1; i++) {
        float *x = me->y + i * me->N + j0;
        if (me->rank == 2) kiln_call_epilogue(me->c, 0, x, n, j0, 1);
        else if (me->rank < 2) kiln_call_epilogue(me->c, 0, x, n, 0, 0);
        else kiln_call_epilogue(me->c, 0, x, n, i / me->rows_per_ch % me->C, 0);
    }
}

/* *tiled: 1 when a fused epilogue was applied per finished tile. */
static int matmul_run(const kiln_call *c, int *tiled) {
    const kiln_tensor *A = &c->in[0], *B = &c->in[1];
    kiln_tensor *Y = &c->out[0];
    if (!kiln__ops_dense(A) || !kiln__ops_dense(B) || !kiln__ops_dense(Y))
        return kiln_set_error(KILN_EUNSUPPORTED, "MatMul: strided tensors not supported");
    int64_t M = A->ndim >= 2 ? A->dims[A->ndim - 2] : 1, K = A->dims[A->ndim - 1];
    int64_t N = B->ndim >= 2 ? B->dims[B->ndim - 1] : 1;
    int64_t Kb = B->ndim >= 2 ? B->dims[B->ndim - 2] : B->dims[0];
    if (Kb != K)
        return kiln_set_error(KILN_ESHAPE, "MatMul: A has K=%lld but B has K=%lld", (long long)K,
                              (long long)Kb);
    if (kiln_tensor_numel(Y) == 0) return 0;
    /* batch dims, right-aligned */
    int ba = A->ndim > 2 ? A->ndim - 2 : 0, bb = B->ndim > 2 ? B->ndim - 2 : 0;
    int nb = ba > bb ? ba : bb;
    int64_t bd[KILN_MAX_DIMS], as[KILN_MAX_DIMS], bs[KILN_MAX_DIMS];
    int64_t nbatch = 1, sa = M * K, sb = K * N;
    for (int i = nb - 1; i >= 0; i--) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return kiln_set_error(KILN_ESHAPE, "MatMul: batch dims %lld and %lld do not broadcast",
                                  (long long)da, (long long)db);
        bd[i] = da > db ? da : db;
        as[i] = da == 1 ? 0 : sa;
        bs[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
        nbatch *= bd[i];
    }
    kiln__gemm g = {.M = M, .N = N, .K = K, .alpha = 1.0f, .a = A->data, .a_rs = K, .a_cs = 1,
                    .b = B->data, .b_rs = N, .b_cs = 1, .c = Y->data, .ldc = N};
    if (c->prepacked && B->ndim == 2) g.b_packed = c->prepacked[1]; /* one B for every batch */
    kiln__gemm gt = g; /* the non-batched paths: with the epilogue per tile */
    mm_epi me = {c, Y->data, N, 1, Y->ndim >= 2 ? Y->dims[1] : 1, Y->ndim};
    for (int i = 2; i + 1 < Y->ndim; i++) me.rows_per_ch *= Y->dims[i];
    if (c->epilogue && c->nout == 1 && A->ndim >= 2 && B->ndim >= 2) { /* Y is [..., M, N] */
        gt.done = mm_done;
        gt.done_ud = &me;
    }
    int b_has_batch = 0;
    for (int i = 0; i < nb; i++) b_has_batch |= bs[i] != 0;
    if (!b_has_batch) {
        /* weights without batch: fold A's batch into M (A is dense) */
        int a_full = 1;
        for (int i = 0; i < nb; i++) a_full &= as[i] != 0 || bd[i] == 1;
        if (a_full) {
            gt.M = M * nbatch;
            kiln__sgemm(&gt, c->exec);
            *tiled = gt.done != NULL;
            return 0;
        }
    }
    if (nbatch == 1) {
        kiln__sgemm(&gt, c->exec);
        *tiled = gt.done != NULL;
        return 0;
    }
    int64_t *offs = c->workspace;
    if (!offs || c->workspace_size < (size_t)nbatch * 3 * sizeof(int64_t))
        return kiln_set_error(KILN_EINTERNAL, "MatMul: workspace of %zu bytes for %lld batches",
                              c->workspace_size, (long long)nbatch);
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int64_t t = 0; t < nbatch; t++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < nb; i++) { oa += idx[i] * as[i]; ob += idx[i] * bs[i]; }
        offs[t] = oa;
        offs[nbatch + t] = ob;
        offs[2 * nbatch + t] = t * M * N;
        for (int i = nb - 1; i >= 0; i--) {
            if (++idx[i] < bd[i]) break;
            idx[i] = 0;
        }
    }
    mm_task task = {.proto = &g, .nbatch = nbatch, .aoff = offs, .boff = offs + nbatch,
                    .yoff = offs + 2 * nbatch};
    int threads = c->exec ? kiln_exec_threads(c->exec) : 1;
    if (nbatch >= threads && threads > 1) {
        kiln_exec_parallel(c->exec, (int)(nbatch < threads ? nbatch : threads), mm_batches, &task);
    } else {
        for (int64_t t = 0; t < nbatch; t++) {
            kiln__gemm gi = g;
            gi.a += offs[t];
            gi.b += offs[nbatch + t];
            gi.c += offs[2 * nbatch + t];
            kiln__sgemm(&gi, c->exec);
        }
    }
    return 0;
}

/* Batch offset table: 3 int64 per output matrix. */
static size_t matmul_ws(const kiln_call *c) {
    const kiln_tensor *A = &c->in[0], *B = &c->in[1];
    if (A->ndim < 1 || B->ndim < 1) return 0;
    int64_t M = A->ndim >= 2 ? A->dims[A->ndim - 2] : 1, N = B->ndim >= 2 ? B->dims[B->ndim - 1] : 1;
    int64_t n = M * N > 0 ? kiln_tensor_numel(&c->out[0]) / (M * N) : 1; /* batch count */
    return (size_t)(n > 0 ? n : 1) * 3 * sizeof(int64_t);
}

/* The batched paths split work in several ways; a fused epilogue runs
 * there as one pass over the result (elsewhere per tile, mm_done). */
static int matmul_impl_epi(const kiln_call *c) {
    int tiled = 0, rc = matmul_run(c, &tiled);
    if (!rc && !tiled) kiln__ops_epilogue_all(c);
    return rc;
}

static int matmul_impl(const kiln_call *c) { return kiln__ops_as_f32(c, matmul_impl_epi); }

static int matmul_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    const kiln_tensor *A = &c->in[0], *B = &c->in[1];
    int64_t rows = 1;
    for (int i = 0; i + 1 < A->ndim; i++) rows = A->dims[i] < 0 || rows < 0 ? -1 : rows * A->dims[i];
    if (B->ndim != 2 || A->ndim < 1) {
        *size = 0;
        return 0;
    }
    return weights_prepack(c, input, rows, B->dims[0], B->dims[1], B->dims[1], 1, dst, size);
}

static const kiln_quick_op matmul_op = {
    .ns = "ai.onnx", .name = "MatMul", .version = 1,
    .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
    .shape = matmul_shape, .impl = matmul_impl, .workspace = matmul_ws, .prepack = matmul_prepack,
    .accepts_epilogue = 1, /* per finished tile; one pass after a batched product */
    .doc = "numpy matmul with batch broadcasting (packed AVX SGEMM)",
    .cuda_impl = kiln__cu_matmul, .cuda_formats = gemm_cuda_formats, .cuda_workspace = kiln__cu_gemm_workspace,
};

/* ------------------------------------------------------------ MatMulInteger */

/* Integer reference path: exact int32 accumulation with zero points
 * (per-tensor, per-row of A, per-column of B). */
static int matmulint_impl(const kiln_call *c) {
    const kiln_tensor *A = &c->in[0], *B = &c->in[1];
    kiln_tensor *Y = &c->out[0];
    if (!kiln__ops_dense(A) || !kiln__ops_dense(B) || !kiln__ops_dense(Y))
        return kiln_set_error(KILN_EUNSUPPORTED, "MatMulInteger: strided tensors not supported");
    int64_t M = A->ndim >= 2 ? A->dims[A->ndim - 2] : 1, K = A->dims[A->ndim - 1];
    int64_t N = B->ndim >= 2 ? B->dims[B->ndim - 1] : 1;
    int64_t Kb = B->ndim >= 2 ? B->dims[B->ndim - 2] : B->dims[0];
    if (Kb != K)
        return kiln_set_error(KILN_ESHAPE, "MatMulInteger: A has K=%lld but B has K=%lld",
                              (long long)K, (long long)Kb);
    const kiln_tensor *za = c->nin > 2 && c->in[2].data ? &c->in[2] : NULL;
    const kiln_tensor *zb = c->nin > 3 && c->in[3].data ? &c->in[3] : NULL;
    int64_t nza = za ? kiln_tensor_numel(za) : 0, nzb = zb ? kiln_tensor_numel(zb) : 0;
    if ((za && nza != 1 && nza != M) || (zb && nzb != 1 && nzb != N))
        return kiln_set_error(KILN_ESHAPE, "MatMulInteger: zero points must be scalars or per "
                              "row/column (%lld and %lld elements)", (long long)nza, (long long)nzb);
    int ba = A->ndim > 2 ? A->ndim - 2 : 0, bb = B->ndim > 2 ? B->ndim - 2 : 0;
    int nb = ba > bb ? ba : bb;
    int64_t bd[KILN_MAX_DIMS], nbatch = 1;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return kiln_set_error(KILN_ESHAPE, "MatMulInteger: batch dims %lld and %lld do not "
                                  "broadcast", (long long)da, (long long)db);
        bd[i] = da > db ? da : db;
        nbatch *= bd[i];
    }
    int32_t *y = Y->data;
    for (int64_t t = 0; t < nbatch; t++) {
        int64_t rem = t, oa = 0, ob = 0, sa = 1, sb = 1;
        for (int i = nb - 1; i >= 0; i--) {
            int64_t ix = rem % bd[i];
            rem /= bd[i];
            int ia = i - (nb - ba), ib = i - (nb - bb);
            if (ia >= 0) { oa += (A->dims[ia] == 1 ? 0 : ix) * sa; sa *= A->dims[ia]; }
            if (ib >= 0) { ob += (B->dims[ib] == 1 ? 0 : ix) * sb; sb *= B->dims[ib]; }
        }
        for (int64_t i = 0; i < M; i++) {
            int32_t a0 = za ? (int32_t)kiln__ops_get_i64(za->data, za->dtype, nza == 1 ? 0 : i) : 0;
            for (int64_t j = 0; j < N; j++) {
                int32_t b0 = zb ? (int32_t)kiln__ops_get_i64(zb->data, zb->dtype, nzb == 1 ? 0 : j) : 0;
                int32_t s = 0;
                for (int64_t k = 0; k < K; k++) {
                    int32_t av = (int32_t)kiln__ops_get_i64(A->data, A->dtype, oa * M * K + i * K + k);
                    int32_t bv = (int32_t)kiln__ops_get_i64(B->data, B->dtype, ob * K * N + k * N + j);
                    s += (av - a0) * (bv - b0);
                }
                y[t * M * N + i * N + j] = s;
            }
        }
    }
    return 0;
}

static const kiln_quick_op matmulint_op = {
    .ns = "ai.onnx", .name = "MatMulInteger", .version = 10,
    .min_inputs = 2, .max_inputs = 4, .num_outputs = 1,
    .shape = matmulint_shape, .impl = matmulint_impl,
    .doc = "u8/i8 matmul with zero points into i32 (exact reference loops)",
};

__attribute__((constructor)) static void gemm_register(void) {
    kiln_register_quick_op(&matmulint_op);
    /* 7: broadcast attribute dropped (C always broadcasts); 11: C optional */
    static const int gv[] = {1, 7, 11};
    kiln__ops_register_versions(&gemm_op, gv, 3);
    kiln_register_quick_op(&matmul_op);
}
