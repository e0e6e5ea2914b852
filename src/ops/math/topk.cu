/*
 * topk.cu — TopK (topk.c semantics): the K best elements of each line
 * along the axis, ordered best first, ties by the lower index (the CPU
 * op's sort order), with their indices.  The tensor is [outer, A, inner];
 * one thread per element computes its rank in its line (elements before it
 * in that order) and, when the rank is below K, writes itself to that
 * output position: O(A) per element, no sort, deterministic.
 *   topk_<T>(outer, A, inner, K, largest, x, y, yi)
 */
#include "ops/common/cuda_common.cuh"

template <typename T>
__device__ __forceinline__ void kc_topk(int64_t outer, int64_t A, int64_t inner, int64_t K, int largest, const T *x,
                                        T *y, int64_t *yi) {
    typedef kc_t<T> L;
    typedef typename kc_t<T>::C C;
    KC_FOR(i, outer * A * inner, int64_t) {
        int64_t in = i % inner, a = (i / inner) % A, o = i / (inner * A);
        const T *line = x + o * A * inner + in;
        C v = L::ld(line[a * inner]);
        int64_t rank = 0;
        for (int64_t b = 0; b < A && rank < K; b++) {
            C w = L::ld(line[b * inner]);
            rank += largest ? (w > v || (w == v && b < a)) : (w < v || (w == v && b < a));
        }
        if (rank >= K) continue;
        int64_t dst = (o * K + rank) * inner + in;
        y[dst] = line[a * inner];
        yi[dst] = a;
    }
}

#define KC_TOPK(S, T)                                                                         \
    extern "C" __global__ void topk_##S(int64_t outer, int64_t A, int64_t inner, int64_t K, int largest, \
                                        const T *x, T *y, int64_t *yi) {                       \
        kc_topk<T>(outer, A, inner, K, largest, x, y, yi);                                     \
    }
KC_FLOATS64(KC_TOPK)
KC_INTS(KC_TOPK)
