/*
 * reduce.cu — ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare,
 * ArgMax/ArgMin, and the global pools (a reduction over the spatial dims).
 *
 * reduce_<T>(out, red, x, y, op): one block per output element; `out`
 * walks the kept axes (st[0]: input offset, st[1]: output offset), `red`
 * the reduced axes (st[0]: input strides).  Accumulation in float for the
 * float types (double for none: F32 accumulate is the documented
 * tolerance), in double for FP64 (reduce_f64: every op, the CPU op's
 * precision), in int64 for the integer types (Sum/Prod/Max/Min only).
 * reduce_arg_<T>(out, red, x, y, op, last): the index of the first (last
 * = 1: last) max/min along the one reduced axis, as int64.
 */
#include "ops/common/cuda_common.cuh"

struct kc_prod {
    static __device__ __forceinline__ float id() { return 1.0f; }
    static __device__ __forceinline__ float op(float x, float y) { return x * y; }
};

template <typename R, typename T, typename F>
__device__ __forceinline__ float kc_reduce_span(const kiln_cu_iter &red, const T *x, F pre) {
    float acc = R::id();
    for (int64_t j = threadIdx.x; j < red.numel; j += blockDim.x) {
        int64_t off[1];
        kc_offsets<uint64_t, int64_t, 1>(red, (uint64_t)j, off);
        acc = R::op(acc, pre(kc_ldf(x[off[0]])));
    }
    return kc_block_reduce<R>(acc);
}

template <typename T>
__device__ __forceinline__ void kc_reduce(const kiln_cu_iter &out, const kiln_cu_iter &red, const T *x, T *y,
                                          int op) {
    int64_t o[2];
    kc_offsets<uint64_t, int64_t, 2>(out, (uint64_t)blockIdx.x, o);
    const T *xb = x + o[0];
    float r;
    switch (op) {
    case KILN_CU_RMAX: r = kc_reduce_span<kc_max>(red, xb, [](float v) { return v; }); break;
    case KILN_CU_RMIN: r = kc_reduce_span<kc_min>(red, xb, [](float v) { return v; }); break;
    case KILN_CU_RPROD: r = kc_reduce_span<kc_prod>(red, xb, [](float v) { return v; }); break;
    case KILN_CU_RL1: r = kc_reduce_span<kc_sum>(red, xb, [](float v) { return fabsf(v); }); break;
    case KILN_CU_RL2: r = sqrtf(kc_reduce_span<kc_sum>(red, xb, [](float v) { return v * v; })); break;
    case KILN_CU_RSUMSQUARE: r = kc_reduce_span<kc_sum>(red, xb, [](float v) { return v * v; }); break;
    case KILN_CU_RLOGSUM: r = logf(kc_reduce_span<kc_sum>(red, xb, [](float v) { return v; })); break;
    case KILN_CU_RLOGSUMEXP: {
        float m = kc_reduce_span<kc_max>(red, xb, [](float v) { return v; });
        float mm = isinf(m) ? 0.0f : m;
        r = mm + logf(kc_reduce_span<kc_sum>(red, xb, [mm](float v) { return expf(v - mm); }));
        break;
    }
    case KILN_CU_RMEAN:
        r = kc_reduce_span<kc_sum>(red, xb, [](float v) { return v; }) / (float)red.numel;
        break;
    default: r = kc_reduce_span<kc_sum>(red, xb, [](float v) { return v; }); break;
    }
    if (threadIdx.x == 0) y[o[1]] = kc_stf<T>(r);
}

/* Integer reductions: Sum/Mean/Prod wrap in uint64, Max/Min exact. */
template <typename T>
__device__ __forceinline__ void kc_reduce_int(const kiln_cu_iter &out, const kiln_cu_iter &red, const T *x, T *y,
                                              int op) {
    int64_t o[2];
    kc_offsets<uint64_t, int64_t, 2>(out, (uint64_t)blockIdx.x, o);
    __shared__ int64_t part[1024];
    int64_t acc = op == KILN_CU_RPROD ? 1 : op == KILN_CU_RMAX ? INT64_MIN : op == KILN_CU_RMIN ? INT64_MAX : 0;
    for (int64_t j = threadIdx.x; j < red.numel; j += blockDim.x) {
        int64_t off[1];
        kc_offsets<uint64_t, int64_t, 1>(red, (uint64_t)j, off);
        int64_t v = x[o[0] + off[0]];
        acc = op == KILN_CU_RPROD ? (int64_t)((uint64_t)acc * (uint64_t)v)
            : op == KILN_CU_RMAX  ? (v > acc ? v : acc)
            : op == KILN_CU_RMIN  ? (v < acc ? v : acc)
                                  : (int64_t)((uint64_t)acc + (uint64_t)v);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (unsigned t = 1; t < blockDim.x; t++) {
            int64_t v = part[t];
            acc = op == KILN_CU_RPROD ? (int64_t)((uint64_t)acc * (uint64_t)v)
                : op == KILN_CU_RMAX  ? (v > acc ? v : acc)
                : op == KILN_CU_RMIN  ? (v < acc ? v : acc)
                                      : (int64_t)((uint64_t)acc + (uint64_t)v);
        }
        if (op == KILN_CU_RMEAN && red.numel) acc /= red.numel;
        y[o[1]] = (T)acc;
    }
}

/* FP64: one block (at most 256 threads: kiln__cu_block_for) per output
 * element, accumulated in double; the per-thread partials (part[blockDim])
 * are combined by thread 0 (as the integer kernel).  Max/Min propagate NaN
 * (kc_max's rule). */
template <typename P, typename C>
__device__ __forceinline__ double kc_span64(double *part, const kiln_cu_iter &red, const double *x, double init,
                                            P pre, C comb) {
    double acc = init;
    for (int64_t j = threadIdx.x; j < red.numel; j += blockDim.x) {
        int64_t off[1];
        kc_offsets<uint64_t, int64_t, 1>(red, (uint64_t)j, off);
        acc = comb(acc, pre(x[off[0]]));
    }
    __syncthreads(); /* a previous span may still read part[0] */
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (unsigned t = 1; t < blockDim.x; t++) acc = comb(acc, part[t]);
        part[0] = acc;
    }
    __syncthreads();
    return part[0];
}

extern "C" __global__ void reduce_f64(kiln_cu_iter out, kiln_cu_iter red, const double *x, double *y, int op) {
    int64_t o[2];
    kc_offsets<uint64_t, int64_t, 2>(out, (uint64_t)blockIdx.x, o);
    const double *xb = x + o[0];
    __shared__ double part[256];
    auto id = [](double v) { return v; };
    auto sq = [](double v) { return v * v; };
    auto add = [](double a, double b) { return a + b; };
    auto mx = [](double a, double b) { return a != a ? a : b != b ? b : fmax(a, b); };
    auto mn = [](double a, double b) { return a != a ? a : b != b ? b : fmin(a, b); };
    double r;
    switch (op) {
    case KILN_CU_RMAX: r = kc_span64(part, red, xb, -INFINITY, id, mx); break;
    case KILN_CU_RMIN: r = kc_span64(part, red, xb, INFINITY, id, mn); break;
    case KILN_CU_RPROD: r = kc_span64(part, red, xb, 1.0, id, [](double a, double b) { return a * b; }); break;
    case KILN_CU_RL1: r = kc_span64(part, red, xb, 0.0, [](double v) { return fabs(v); }, add); break;
    case KILN_CU_RL2: r = sqrt(kc_span64(part, red, xb, 0.0, sq, add)); break;
    case KILN_CU_RSUMSQUARE: r = kc_span64(part, red, xb, 0.0, sq, add); break;
    case KILN_CU_RLOGSUM: r = log(kc_span64(part, red, xb, 0.0, id, add)); break;
    case KILN_CU_RLOGSUMEXP: {
        double m = kc_span64(part, red, xb, -INFINITY, id, mx);
        double mm = isinf(m) ? 0.0 : m;
        r = mm + log(kc_span64(part, red, xb, 0.0, [mm](double v) { return exp(v - mm); }, add));
        break;
    }
    case KILN_CU_RMEAN: r = kc_span64(part, red, xb, 0.0, id, add) / (double)red.numel; break;
    default: r = kc_span64(part, red, xb, 0.0, id, add); break;
    }
    if (threadIdx.x == 0) y[o[1]] = r;
}

/* ArgMax/ArgMin: (value, index) pairs reduced in shared memory (blockDim
 * at most 1024), with the CPU op's sequential semantics: a NaN first
 * element wins (nothing compares greater), later NaNs never do; ties go to
 * the first index, or the last with select_last_index. */
template <typename T>
__device__ __forceinline__ void kc_reduce_arg(const kiln_cu_iter &out, const kiln_cu_iter &red, const T *x,
                                              int64_t *y, int op, int last) {
    int64_t o[2];
    kc_offsets<uint64_t, int64_t, 2>(out, (uint64_t)blockIdx.x, o);
    __shared__ float pv[1024];
    __shared__ int64_t pi[1024];
    const float sgn = op == KILN_CU_RARGMAX ? 1.0f : -1.0f;
    float best = 0.0f;
    int64_t bi = -1;
    const int64_t st = red.st[0][0];
    for (int64_t j = threadIdx.x; j < red.numel; j += blockDim.x) {
        float v = sgn * kc_ldf(x[o[0] + j * st]);
        if (v != v && j != 0) continue;
        if (bi < 0 || (best == best && (v > best || (last && v == best)))) {
            best = v;
            bi = j;
        }
    }
    pv[threadIdx.x] = best;
    pi[threadIdx.x] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (unsigned t = 1; t < blockDim.x; t++) {
            if (pi[t] < 0) continue;
            float v = pv[t];
            if (best != best && bi >= 0) break; /* a NaN at index 0 stays */
            if (bi < 0 || v != v || v > best || (v == best && (last ? pi[t] > bi : pi[t] < bi))) {
                best = v;
                bi = pi[t];
            }
        }
        y[o[1]] = bi < 0 ? 0 : bi;
    }
}

#define KC_REDUCE(S, T)                                                                       \
    extern "C" __global__ void reduce_##S(kiln_cu_iter out, kiln_cu_iter red, const T *x, T *y, int op) { \
        kc_reduce<T>(out, red, x, y, op);                                                      \
    }                                                                                          \
    extern "C" __global__ void reduce_arg_##S(kiln_cu_iter out, kiln_cu_iter red, const T *x, int64_t *y, \
                                              int op, int last) {                              \
        kc_reduce_arg<T>(out, red, x, y, op, last);                                            \
    }
#define KC_REDUCE_INT(S, T)                                                                   \
    extern "C" __global__ void reduce_##S(kiln_cu_iter out, kiln_cu_iter red, const T *x, T *y, int op) { \
        kc_reduce_int<T>(out, red, x, y, op);                                                  \
    }
KC_FLOATS(KC_REDUCE)
KC_INTS(KC_REDUCE_INT)
