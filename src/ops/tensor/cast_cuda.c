/*
 * cast_cuda.c — CUDA launcher of Cast and CastLike: cast_<from>_<to> of
 * cast.cu (ONNX/CPU conversion rules), contiguous tensors.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

int kiln__cu_cast(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    const char *s = kiln__cu_suffix(x->dtype), *d = kiln__cu_suffix(y->dtype);
    if (!s) return kiln__cu_type_err("Cast", x->dtype);
    if (!d) return kiln__cu_type_err("Cast", y->dtype);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(y))
        return kiln_set_error(KILN_EUNSUPPORTED, "Cast: CUDA kernel needs contiguous tensors");
    char base[16] = "cast_";
    for (int i = 0; s[i]; i++) base[5 + i] = s[i], base[6 + i] = 0;
    int64_t n = kiln_tensor_numel(y);
    void *args[] = {&n, (void *)&x->data, &y->data};
    return kiln__cu_launch_n(c, base, d, n, args);
}
