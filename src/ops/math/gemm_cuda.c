/*
 * gemm_cuda.c — CUDA launchers of MatMul and Gemm: both map onto
 * kiln__cuda_gemm (cuBLASLt, F32 accumulate).  A tactic t > 0 selects
 * cuBLASLt's heuristic algorithm t - 1 (the builder times them; one past
 * the end is refused with KILN_EUNSUPPORTED); tactic 0 is algorithm 0.
 *
 * MatMul's numpy batch broadcasting becomes one GEMM of batch x M rows
 * when B is shared by the whole batch and A and Y are packed, else one
 * strided batched call when the batch dims coalesce to one stride per
 * operand (same batch, or one side broadcast as a whole), else one call
 * per batch element.
 *
 * A fused activation (kiln__epi_cuda_act, builder/fuse.c): Relu and tanh
 * Gelu are cuBLASLt epilogues (with the bias: RELU_BIAS, GELU_BIAS); any
 * other runs as one bias_act_<T> pass over the output.  A MatMul's fused
 * bias (the Add of a constant over the last dim that follows it in
 * Linear layers: kiln__epi_cuda_bias) is cuBLASLt's BIAS epilogue.
 */
#include "kiln_int.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

static int gemm_types(const char *op, const kiln_call *c) {
    kiln_dtype t = c->in[0].dtype;
    if (t != KILN_DTYPE_F32 && t != KILN_DTYPE_F16 && t != KILN_DTYPE_BF16) return kiln__cu_type_err(op, t);
    for (int i = 0; i < c->nin; i++) {
        if (!kiln__cu_has_in(c, i)) continue;
        if (c->in[i].dtype != t) return kiln__cu_type_err(op, c->in[i].dtype);
        if (!kiln__cu_contig(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA GEMM needs contiguous inputs", op);
    }
    if (!kiln__cu_contig(&c->out[0]))
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA GEMM needs a contiguous output", op);
    return 0;
}

/* The fused activation: as cuBLASLt's epilogue when it has one (g), else
 * *post gets the code for act_pass.  cuBLASLt's GELU is the tanh form; it
 * also serves the erf form when the output is 16-bit: the two differ by at
 * most 4.7e-4 (at x = 2.7, where an FP16 ulp is 2e-3), below the output's
 * rounding, and the epilogue saves a pass over the FFN's widest tensor. */
static void fused_act(const kiln_call *c, kiln_cuda_gemm *g, int *post, float *a, float *b) {
    int act = kiln__epi_cuda_act(c->epilogue, a, b);
    *post = KILN_CU_ACT_NONE;
    if (act == KILN_CU_ACT_RELU) g->epilogue = 1;
    else if (act == KILN_CU_ACT_GELU_TANH || (act == KILN_CU_ACT_GELU && g->dtype != KILN_DTYPE_F32)) g->epilogue = 2;
    else *post = act;
}

static int act_pass(const kiln_call *c, kiln_tensor *y, int act, float a, float b) {
    if (act == KILN_CU_ACT_NONE) return 0;
    int64_t n = kiln_tensor_numel(y), one = 1;
    const void *none = NULL;
    void *args[] = {&n, &one, &one, &y->data, (void *)&none, &act, &a, &b};
    return kiln__cu_launch_n(c, "bias_act", kiln__cu_suffix(y->dtype), n, args);
}

size_t kiln__cu_gemm_workspace(const kiln_call *c) {
    (void)c;
    return KILN_CUDA_GEMM_WORKSPACE;
}

int kiln__cu_matmul(const kiln_call *c) {
    int rc = gemm_types("MatMul", c);
    if (rc) return rc;
    const kiln_tensor *A = &c->in[0], *B = &c->in[1];
    kiln_tensor *Y = &c->out[0];
    int a1 = A->ndim == 1, b1 = B->ndim == 1;
    int64_t M = a1 ? 1 : A->dims[A->ndim - 2], K = A->dims[A->ndim - 1], N = b1 ? 1 : B->dims[B->ndim - 1];
    if ((b1 ? B->dims[0] : B->dims[B->ndim - 2]) != K)
        return kiln_set_error(KILN_ESHAPE, "MatMul: inner dims differ (%lld and %lld)", (long long)K,
                              (long long)(b1 ? B->dims[0] : B->dims[B->ndim - 2]));
    /* batch dims: Y's leading dims; A's and B's batch dims broadcast into them */
    int nb = Y->ndim - (a1 ? 0 : 1) - (b1 ? 0 : 1);
    if (nb < 0) nb = 0;
    int na = a1 ? 0 : A->ndim - 2, nbb = b1 ? 0 : B->ndim - 2;
    int64_t sa[KILN_MAX_DIMS] = {0}, sb[KILN_MAX_DIMS] = {0}, sy[KILN_MAX_DIMS] = {0}, ast[KILN_MAX_DIMS],
            bst[KILN_MAX_DIMS];
    for (int i = 0; i < na; i++) ast[i] = A->strides[i];
    for (int i = 0; i < nbb; i++) bst[i] = B->strides[i];
    rc = kiln__cu_bcast_strides("MatMul", nb, Y->dims, na, A->dims, ast, sa);
    if (!rc) rc = kiln__cu_bcast_strides("MatMul", nb, Y->dims, nbb, B->dims, bst, sb);
    if (rc) return rc;
    kiln__cu_contig_strides(nb, Y->dims, sy);
    for (int i = 0; i < nb; i++) sy[i] *= M * N;
    const int64_t *st[3] = {sa, sb, sy};
    kiln_cu_iter it;
    kiln__cu_iter_init(&it, nb, Y->dims, 3, st);
    size_t es = kiln_dtype_size(A->dtype);
    kiln_cuda_gemm g = {.m = M, .n = N, .k = K, .batch = 1, .lda = K, .ldb = N, .ldc = N, .ldd = N,
                        .dtype = A->dtype, .alpha = 1.0f, .algo = c->tactic > 0 ? c->tactic - 1 : 0};
    if (it.numel == 0 || M * N == 0) return 0;
    int post;
    float pa, pb;
    fused_act(c, &g, &post, &pa, &pb);
    int64_t nbias;
    g.bias = kiln__epi_cuda_bias(c->epilogue, &nbias);
    if (nbias && (!g.bias || nbias != N))
        return kiln_set_error(KILN_EINVAL, "MatMul: fused bias of %lld values for %lld columns%s", (long long)nbias,
                              (long long)N, g.bias ? "" : " (weights not on the GPU)");
    if (it.ndim == 1 && it.st[1][0] == 0 && it.st[0][0] == M * K && it.st[2][0] == M * N) {
        /* B shared by every batch element and A, Y packed: one GEMM of
         * batch x M rows.  (torch exports Linear layers on [seq, batch,
         * dim] activations this way: as 128 batches of one row, cuBLASLt
         * ran them as GEMVs, ~30x slower than the folded GEMM.) */
        g.m = M * it.dims[0];
        g.a = A->data;
        g.b = B->data;
        g.d = Y->data;
        rc = kiln__cuda_gemm(c, &g);
        return rc ? rc : act_pass(c, Y, post, pa, pb);
    }
    if (it.ndim == 1) { /* one strided batched call */
        g.batch = it.dims[0];
        g.stride_a = it.st[0][0];
        g.stride_b = it.st[1][0];
        g.stride_c = g.stride_d = it.st[2][0];
        g.a = A->data;
        g.b = B->data;
        g.d = Y->data;
        rc = kiln__cuda_gemm(c, &g);
        return rc ? rc : act_pass(c, Y, post, pa, pb);
    }
    for (int64_t i = 0; i < it.numel; i++) { /* irregular broadcast: one call per batch element */
        int64_t r = i, off[3] = {0, 0, 0};
        for (int d = it.ndim - 1; d >= 0; d--) {
            int64_t q = r / it.dims[d], x = r - q * it.dims[d];
            for (int k = 0; k < 3; k++) off[k] += x * it.st[k][d];
            r = q;
        }
        g.a = (const char *)A->data + (size_t)off[0] * es;
        g.b = (const char *)B->data + (size_t)off[1] * es;
        g.d = (char *)Y->data + (size_t)off[2] * es;
        rc = kiln__cuda_gemm(c, &g);
        if (rc) return rc;
    }
    return act_pass(c, Y, post, pa, pb);
}

int kiln__cu_gemm(const kiln_call *c) {
    int rc = gemm_types("Gemm", c);
    if (rc) return rc;
    const kiln_tensor *A = &c->in[0], *B = &c->in[1];
    kiln_tensor *Y = &c->out[0];
    if (A->ndim != 2 || B->ndim != 2) return kiln_set_error(KILN_ESHAPE, "Gemm: A and B must be 2-D");
    int ta = kiln__cu_attr_int(c, "transA", 0) != 0, tb = kiln__cu_attr_int(c, "transB", 0) != 0;
    float alpha = (float)kiln__cu_attr_float(c, "alpha", 1.0), beta = (float)kiln__cu_attr_float(c, "beta", 1.0);
    int64_t M = Y->dims[0], N = Y->dims[1], K = A->dims[ta ? 0 : 1];
    kiln_cuda_gemm g = {.trans_a = ta, .trans_b = tb, .m = M, .n = N, .k = K, .batch = 1, .a = A->data,
                        .b = B->data, .d = Y->data, .lda = A->dims[1], .ldb = B->dims[1], .ldc = N, .ldd = N,
                        .dtype = A->dtype, .alpha = alpha, .algo = c->tactic > 0 ? c->tactic - 1 : 0};
    if (M * N == 0) return 0;
    if (kiln__cu_has_in(c, 2) && beta != 0.0f) {
        const kiln_tensor *C = &c->in[2];
        int64_t cn = kiln_tensor_numel(C);
        if (beta == 1.0f && cn == N && C->dims[C->ndim - 1] == N) {
            g.bias = C->data; /* a row vector: cuBLASLt's bias epilogue */
        } else { /* broadcast C into Y, then Y = alpha A B + beta Y */
            int64_t sc[2], sy[2] = {N, 1};
            rc = kiln__cu_bcast_strides("Gemm", 2, Y->dims, C->ndim, C->dims, C->strides, sc);
            if (!rc) rc = kiln__cu_copy(c, Y->dtype, 2, Y->dims, C->data, sc, Y->data, sy);
            if (rc) return rc;
            g.c = Y->data;
            g.beta = beta;
        }
    }
    int post;
    float pa, pb;
    fused_act(c, &g, &post, &pa, &pb);
    rc = kiln__cuda_gemm(c, &g);
    return rc ? rc : act_pass(c, Y, post, pa, pb);
}
