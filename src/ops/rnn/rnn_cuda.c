/*
 * rnn_cuda.c — CUDA launcher of LSTM, GRU and RNN (rnn.cu), FP32 with
 * optional int32 sequence_lens (the op's cuda_formats; a layer of other
 * types stays on the CPU).  rnn.c resolves the
 * attributes (direction, activations, clip, ...) into a kiln_cu_rnn; this
 * checks the shapes and launches one block per (batch, direction).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

static const void *opt_in(const kiln_call *c, int i) { return kiln__cu_has_in(c, i) ? c->in[i].data : NULL; }

int kiln__cu_rnn(const kiln_call *c, const kiln_cu_rnn *prm) {
    static const char *const names[3] = {"RNN", "GRU", "LSTM"};
    const char *op = names[prm->cell];
    kiln_cu_rnn p = *prm;
    for (int i = 0; i < c->nin; i++) {
        if (!kiln__cu_has_in(c, i)) continue;
        if (c->in[i].dtype != (i == 4 ? KILN_DTYPE_I32 : KILN_DTYPE_F32)) return kiln__cu_type_err(op, c->in[i].dtype);
        if (!kiln__cu_contig(&c->in[i])) return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs contiguous tensors", op);
    }
    const kiln_tensor *X = &c->in[0], *W = &c->in[1], *R = &c->in[2];
    int64_t G = p.cell == 2 ? 4 : p.cell == 1 ? 3 : 1;
    p.S = X->dims[p.layout ? 1 : 0], p.B = X->dims[p.layout ? 0 : 1], p.I = X->dims[2], p.H = R->dims[2];
    int64_t GH = G * p.H;
    if (W->dims[0] != p.ndir || W->dims[1] != GH || W->dims[2] != p.I || R->dims[0] != p.ndir || R->dims[1] != GH)
        return kiln_set_error(KILN_ESHAPE, "%s: W [%lld, %lld, %lld] and R [%lld, %lld, %lld] do not match %d "
                              "directions x %lld gates x hidden %lld, input %lld", op, (long long)W->dims[0],
                              (long long)W->dims[1], (long long)W->dims[2], (long long)R->dims[0],
                              (long long)R->dims[1], (long long)R->dims[2], p.ndir, (long long)G, (long long)p.H,
                              (long long)p.I);
    const int64_t want[8] = {0, 0, 0, p.ndir * 2 * GH, p.B, p.ndir * p.B * p.H, p.ndir * p.B * p.H, p.ndir * 3 * p.H};
    for (int i = 3; i < c->nin && i < 8; i++)
        if (want[i] && kiln__cu_has_in(c, i) && kiln_tensor_numel(&c->in[i]) != want[i])
            return kiln_set_error(KILN_ESHAPE, "%s: input %d has %lld elements, expected %lld", op, i,
                                  (long long)kiln_tensor_numel(&c->in[i]), (long long)want[i]);
    for (int o = 0; o < c->nout; o++)
        if (c->out[o].data && !kiln__cu_contig(&c->out[o]))
            return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs contiguous outputs", op);
    if (p.B * p.ndir == 0 || p.H == 0) return 0;
    const void *bias = opt_in(c, 3), *sl = opt_in(c, 4), *h0 = opt_in(c, 5), *c0 = p.cell == 2 ? opt_in(c, 6) : NULL;
    const void *peep = p.cell == 2 ? opt_in(c, 7) : NULL;
    void *y = c->nout > 0 ? c->out[0].data : NULL, *yh = c->nout > 1 ? c->out[1].data : NULL;
    void *yc = p.cell == 2 && c->nout > 2 ? c->out[2].data : NULL;
    void *args[] = {&p, (void *)&X->data, (void *)&W->data, (void *)&R->data, &bias, &sl, &h0, &c0, &peep, &y, &yh, &yc};
    unsigned threads = kiln__cu_block_for(p.H);
    const unsigned grid[3] = {(unsigned)(p.B * p.ndir), 1, 1}, block[3] = {threads, 1, 1};
    size_t smem = (size_t)(6 * p.H) * sizeof(float);
    if (smem > (1u << 30)) return kiln_set_error(KILN_EUNSUPPORTED, "%s: hidden size %lld too large", op, (long long)p.H);
    return kiln__cuda_launch(c, "rnn_f32", grid, block, (unsigned)smem, args);
}
