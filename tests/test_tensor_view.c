/*
 * test_tensor_view.c — kiln__tensor_view / kiln__tensor_bytes (the one view
 * builder of the builder, engine and contexts) against independent
 * references: for random dims, the strides of a LINEAR view address every
 * element at its row-major index and those of an NHWC view at its index in
 * an array stored N, spatial..., C (both counted here element by element,
 * not from strides); byte sizes against a product that pads blocked
 * channels; negative and huge dims are errors that name the dim.
 */
#include "kiln_int.h"
#include "test.h"

static uint64_t g_seed = 0x7E4501;

static int64_t rand_dim(void) { return 1 + (int64_t)(test_rand_u64(&g_seed) % 5); }

/* Offset of the element at multi-index idx through the view's strides. */
static int64_t offset_of(const kiln_tensor *v, const int64_t *idx) {
    int64_t o = 0;
    for (int d = 0; d < v->ndim; d++) o += idx[d] * v->strides[d];
    return o;
}

/* Next multi-index in row-major order (last dim fastest); 0 after the end. */
static int next_index(int ndim, const int64_t *dims, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < dims[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

TEST_IMPL(linear_strides_address_row_major) {
    for (int iter = 0; iter < 200; iter++) {
        int ndim = (int)(test_rand_u64(&g_seed) % 6);
        int64_t dims[KILN_MAX_DIMS], idx[KILN_MAX_DIMS] = {0};
        for (int d = 0; d < ndim; d++) dims[d] = rand_dim();
        kiln_tensor v;
        memset(&v, 0xA5, sizeof v); /* poison: every field must be set */
        int payload = 0;
        kiln__tensor_view(&v, &payload, KILN_DTYPE_F16, KILN_FORMAT_LINEAR, KILN_DEVICE_CPU, ndim,
                          dims);
        ASSERT(v.data == &payload);
        ASSERT_EQ(v.dtype, KILN_DTYPE_F16);
        ASSERT_EQ(v.format, KILN_FORMAT_LINEAR);
        ASSERT_EQ(v.device, KILN_DEVICE_CPU);
        ASSERT_EQ(v.ndim, ndim);
        for (int d = 0; d < ndim; d++) ASSERT_EQ(v.dims[d], dims[d]);
        int64_t want = 0; /* the row-major index, counted */
        do {
            ASSERT_EQ(offset_of(&v, idx), want);
            want++;
        } while (ndim > 0 && next_index(ndim, dims, idx));
        ASSERT_EQ(want, kiln_tensor_numel(&v));
    }
}

TEST_IMPL(nhwc_strides_address_channels_last) {
    for (int iter = 0; iter < 200; iter++) {
        int ndim = 3 + (int)(test_rand_u64(&g_seed) % 3);
        int64_t dims[KILN_MAX_DIMS], idx[KILN_MAX_DIMS] = {0};
        for (int d = 0; d < ndim; d++) dims[d] = rand_dim();
        kiln_tensor v;
        kiln__tensor_view(&v, NULL, KILN_DTYPE_F32, KILN_FORMAT_NHWC, KILN_DEVICE_CPU, ndim, dims);
        /* Walk the NHWC storage order (N, spatial dims..., C with C
         * fastest) and map each position back to its logical index. */
        int ph = ndim, perm[KILN_MAX_DIMS], k = 0; /* storage order of logical dims */
        perm[k++] = 0;
        for (int d = 2; d < ndim; d++) perm[k++] = d;
        perm[k++] = 1;
        int64_t sdims[KILN_MAX_DIMS], sidx[KILN_MAX_DIMS] = {0};
        for (int j = 0; j < ph; j++) sdims[j] = dims[perm[j]];
        int64_t want = 0;
        do {
            for (int j = 0; j < ph; j++) idx[perm[j]] = sidx[j];
            ASSERT_EQ(offset_of(&v, idx), want);
            want++;
        } while (next_index(ph, sdims, sidx));
        ASSERT_EQ(want, kiln_tensor_numel(&v));
    }
}

TEST_IMPL(unknown_dims_count_as_one) {
    int64_t dims[3] = {-1, 3, 4};
    kiln_tensor v;
    kiln__tensor_view(&v, NULL, KILN_DTYPE_F32, KILN_FORMAT_LINEAR, KILN_DEVICE_CPU, 3, dims);
    ASSERT_EQ(v.strides[2], 1);
    ASSERT_EQ(v.strides[1], 4);
    ASSERT_EQ(v.strides[0], 12);
    ASSERT_EQ(v.dims[0], -1);
    /* recomputed after the dims change */
    v.dims[0] = 2;
    v.dims[2] = 5;
    kiln__tensor_strides(&v);
    ASSERT_EQ(v.strides[1], 5);
    ASSERT_EQ(v.strides[0], 15);
}

TEST_IMPL(bytes_pad_blocked_channels) {
    static const kiln_format fmts[] = {KILN_FORMAT_LINEAR, KILN_FORMAT_NHWC, KILN_FORMAT_NCHW8C,
                                       KILN_FORMAT_NCHW16C};
    static const kiln_dtype types[] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_I8, KILN_DTYPE_I64};
    static const uint64_t type_bytes[] = {4, 2, 1, 8};
    for (int iter = 0; iter < 400; iter++) {
        int ndim = (int)(test_rand_u64(&g_seed) % 6);
        int f = (int)(test_rand_u64(&g_seed) % 4), ty = (int)(test_rand_u64(&g_seed) % 4);
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < ndim; d++) dims[d] = (int64_t)(test_rand_u64(&g_seed) % 40);
        /* reference: blocked layouts hold whole channel blocks (rank >= 3) */
        uint64_t want = type_bytes[ty];
        for (int d = 0; d < ndim; d++) {
            uint64_t k = (uint64_t)dims[d];
            if (d == 1 && ndim >= 3 && fmts[f] == KILN_FORMAT_NCHW8C) while (k % 8) k++;
            if (d == 1 && ndim >= 3 && fmts[f] == KILN_FORMAT_NCHW16C) while (k % 16) k++;
            want *= k;
        }
        uint64_t got = 0xDEADBEEF;
        ASSERT_OK(kiln__tensor_bytes(types[ty], fmts[f], ndim, dims, &got));
        ASSERT_EQ(got, want);
    }
}

TEST_IMPL(bytes_bad_dims_are_errors) {
    uint64_t got = 7;
    int64_t neg[3] = {2, -3, 4};
    ASSERT_EQ(kiln__tensor_bytes(KILN_DTYPE_F32, KILN_FORMAT_LINEAR, 3, neg, &got), KILN_ESHAPE);
    ASSERT_CONTAINS(kiln_errmsg(), "dim 1 = -3");
    ASSERT_EQ(got, 7); /* untouched on failure */
    int64_t huge[3] = {1 << 20, 1 << 20, 1 << 20};
    ASSERT_EQ(kiln__tensor_bytes(KILN_DTYPE_F32, KILN_FORMAT_LINEAR, 3, huge, &got), KILN_ESHAPE);
    ASSERT_CONTAINS(kiln_errmsg(), "too large (dim 2");
    int64_t wrap[2] = {INT64_MAX, 3};
    ASSERT_EQ(kiln__tensor_bytes(KILN_DTYPE_I8, KILN_FORMAT_LINEAR, 2, wrap, &got), KILN_ESHAPE);
    ASSERT_EQ(got, 7);
}

TEST_LIST(TEST_ENTRY(linear_strides_address_row_major), TEST_ENTRY(nhwc_strides_address_channels_last),
          TEST_ENTRY(unknown_dims_count_as_one), TEST_ENTRY(bytes_pad_blocked_channels),
          TEST_ENTRY(bytes_bad_dims_are_errors))
