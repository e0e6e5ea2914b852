/*
 * copy_bench.c — kiln-bench-copy: memory speed of the CUDA data-movement
 * kernels (src/ops/tensor/copy.cu) on a few large shapes, each run through
 * its op's CUDA launcher (Transpose, Concat, Slice, Expand, Identity) as an
 * engine would run it.
 *
 *   kiln-bench-copy [REPS]
 *
 * Prints one line per shape: the op, the shape, the bytes moved (read +
 * written, at the output's size: an Expand reads less) and GB/s, timed
 * with CUDA events over REPS launches (default 20) after 3 warm-up ones;
 * then the GPU name.  Every output is checked once against a host
 * reference (a mismatch is an error, exit 1), so a fast wrong kernel does
 * not pass.  Built against an older libkiln it gives the "before" figures
 * (scripts in .gpu-<name>/ link it both ways).
 */
#include "device/device.h"
#include "kiln/kiln.h"
#include "kiln_int.h"
#include "kiln/plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *op, *what;
    kiln_dtype t;
    int nd;
    int64_t dims[5];
    const int64_t *perm; /* Transpose; Slice: starts, ends (axis 1); Expand: source dims */
    int np;
} shape;

static const int64_t p0213[] = {0, 2, 1, 3}, p0231[] = {0, 2, 3, 1}, p0312[] = {0, 3, 1, 2}, p021[] = {0, 2, 1};
static const int64_t sl[] = {1, 65}, ex[] = {32, 1, 160, 160};

static const shape shapes[] = {
    {"Transpose", "heads [32,128,12,64] 0213", KILN_DTYPE_F16, 4, {32, 128, 12, 64}, p0213, 4},
    {"Transpose", "NCHW->NHWC [32,64,160,160]", KILN_DTYPE_F16, 4, {32, 64, 160, 160}, p0231, 4},
    {"Transpose", "NHWC->NCHW [32,160,160,64]", KILN_DTYPE_F32, 4, {32, 160, 160, 64}, p0312, 4},
    {"Transpose", "[64,1000,1000] 021", KILN_DTYPE_F16, 3, {64, 1000, 1000}, p021, 3},
    {"Concat", "2x [32,64,160,160] axis 1", KILN_DTYPE_F16, 4, {32, 64, 160, 160}, NULL, 0},
    {"Slice", "[32,128,160,160] axis 1 [1,65)", KILN_DTYPE_F16, 4, {32, 128, 160, 160}, sl, 2},
    {"Expand", "[32,1,160,160]->[32,64,160,160]", KILN_DTYPE_F32, 4, {32, 64, 160, 160}, ex, 4},
    {"Identity", "[32,64,160,160]", KILN_DTYPE_F16, 4, {32, 64, 160, 160}, NULL, 0},
};

static void set(kiln_tensor *t, kiln_dtype dt, int nd, const int64_t *dims, void *data) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = nd;
    memcpy(t->dims, dims, (size_t)nd * sizeof *dims);
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) t->strides[d] = s, s *= dims[d];
    t->data = data;
    t->device = KILN_DEVICE_CUDA;
}

static int64_t numel(int nd, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= d[i];
    return n;
}

#define CHECK(x)                                                                                        \
    do {                                                                                                \
        if (x) {                                                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, kiln_errmsg());           \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

/* Element k of dst (host copy, es bytes each) equals the source element
 * the op maps it to, by a naive walk of the output index. */
static int verify(const shape *s, const unsigned char *in, const unsigned char *out, size_t es, const int64_t *xdims,
                  const int64_t *odims) {
    int nd = s->nd;
    int64_t n = numel(nd, odims), ist[5], idx[5];
    ist[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--) ist[d] = ist[d + 1] * xdims[d + 1];
    /* the op: Transpose, Slice, Expand, Concat, else a plain copy */
    int op = !strcmp(s->op, "Transpose") ? 1 : !strcmp(s->op, "Slice") ? 2 : !strcmp(s->op, "Expand") ? 3
             : !strcmp(s->op, "Concat")  ? 4 : 0;
    for (int64_t k = 0; k < n; k += 7) { /* every 7th element: the check stays cheap */
        int64_t r = k, off = 0;
        for (int d = nd - 1; d >= 0; d--) idx[d] = r % odims[d], r /= odims[d];
        const unsigned char *src = in;
        for (int d = 0; d < nd; d++) {
            if (op == 1) off += idx[d] * ist[s->perm[d]];
            else if (op == 2) off += (d == 1 ? idx[d] + s->perm[0] : idx[d]) * ist[d];
            else if (op == 3) off += (xdims[d] == 1 ? 0 : idx[d]) * ist[d];
            else if (op == 4) off += (d == 1 ? idx[d] % xdims[1] : idx[d]) * ist[d];
            else off += idx[d] * ist[d];
        }
        if (op == 4 && idx[1] >= xdims[1]) src = in + (size_t)numel(nd, xdims) * es; /* input 2 */
        if (memcmp(out + (size_t)k * es, src + (size_t)off * es, es)) {
            fprintf(stderr, "%s %s: element %lld differs from the host reference\n", s->op, s->what, (long long)k);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    const kiln__device *dev = kiln__device_get(KILN_DEVICE_CUDA);
    if (!dev) {
        printf("SKIP: %s\n", kiln_errmsg());
        return 77;
    }
    void *e0, *e1;
    CHECK(dev->event_create(&e0));
    CHECK(dev->event_create(&e1));
    int bad = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        size_t es = kiln_dtype_size(s->t);
        int nd = s->nd, nin = 1;
        int64_t n = numel(nd, s->dims), odims[5], xdims[5];
        memcpy(odims, s->dims, sizeof odims);
        memcpy(xdims, s->dims, sizeof xdims);
        if (!strcmp(s->op, "Transpose"))
            for (int d = 0; d < nd; d++) odims[d] = s->dims[s->perm[d]];
        if (!strcmp(s->op, "Concat")) odims[1] *= 2, nin = 2;
        if (!strcmp(s->op, "Slice")) odims[1] = s->perm[1] - s->perm[0];
        if (!strcmp(s->op, "Expand")) memcpy(xdims, s->perm, sizeof xdims), n = numel(nd, xdims);
        int64_t on = numel(nd, odims);
        size_t ib = (size_t)n * es * (size_t)nin, ob = (size_t)on * es;
        unsigned char *h = malloc(ib), *g = malloc(ob);
        for (size_t k = 0; k < ib; k++) h[k] = (unsigned char)(k * 2654435761u >> 13);
        void *dx = NULL, *dy = NULL;
        CHECK(dev->alloc(ib, &dx));
        CHECK(dev->alloc(ob, &dy));
        CHECK(dev->copy(dx, h, ib, NULL));
        CHECK(dev->memset(dy, 0xFF, ob, NULL));
        kiln_tensor in[5], out;
        set(&in[0], s->t, nd, xdims, dx);
        set(&in[1], s->t, nd, xdims, (char *)dx + (size_t)n * es);
        set(&out, s->t, nd, odims, dy);
        const kiln__op *op = kiln__registry_resolve("ai.onnx", s->op, 13);
        if (!op || !op->quick || !op->quick->cuda_impl) {
            fprintf(stderr, "%s: no CUDA op\n", s->op);
            return 1;
        }
        kiln__attrset as;
        CHECK(kiln__attrset_init(&as, op));
        kiln_attr_value v;
        memset(&v, 0, sizeof v);
        v.present = 1;
        if (!strcmp(s->op, "Transpose")) {
            v.type = KILN_ATTR_ARRAY, v.elem = KILN_DTYPE_I64, v.count = s->np, v.data = s->perm;
            CHECK(kiln__attrset_set(&as, "perm", &v));
        }
        if (!strcmp(s->op, "Concat")) {
            v.type = KILN_ATTR_INT, v.i = 1;
            CHECK(kiln__attrset_set(&as, "axis", &v));
        }
        /* Slice's starts/ends/axes are host inputs (the launcher reads them) */
        int64_t st = s->perm ? s->perm[0] : 0, en = s->perm ? s->perm[1] : 0, ax = 1;
        if (!strcmp(s->op, "Slice")) {
            int64_t d1 = 1;
            nin = 4;
            const int64_t *vals[3] = {&st, &en, &ax};
            for (int k = 0; k < 3; k++) {
                set(&in[1 + k], KILN_DTYPE_I64, 1, &d1, (void *)vals[k]);
                in[1 + k].device = KILN_DEVICE_CPU;
            }
        }
        if (!strcmp(s->op, "Expand")) {
            int64_t d1 = nd;
            nin = 2;
            set(&in[1], KILN_DTYPE_I64, 1, &d1, (void *)odims);
            in[1].device = KILN_DEVICE_CPU;
        }
        kiln_attrs av = kiln__attrset_view(&as);
        kiln_call c = {.in = in, .nin = nin, .out = &out, .nout = 1, .attrs = &av, .layer = s->op};
        for (int k = 0; k < 3; k++) CHECK(op->quick->cuda_impl(&c));
        CHECK(dev->stream_sync(NULL));
        CHECK(dev->copy(g, dy, ob, NULL));
        CHECK(dev->stream_sync(NULL));
        bad |= verify(s, h, g, es, xdims, odims);
        CHECK(dev->event_record(e0, NULL));
        for (int k = 0; k < reps; k++) CHECK(op->quick->cuda_impl(&c));
        CHECK(dev->event_record(e1, NULL));
        CHECK(dev->stream_sync(NULL));
        float ms = 0;
        CHECK(dev->event_elapsed(e0, e1, &ms));
        double t = ms / reps * 1e-3, moved = 2.0 * (double)ob;
        printf("%-10s %-34s %-5s %8.1f MB %9.1f us %8.1f GB/s\n", s->op, s->what, kiln_dtype_name(s->t), moved / 1e6,
               t * 1e6, moved / t / 1e9);
        kiln__attrset_free(&as);
        dev->free(dx);
        dev->free(dy);
        free(h);
        free(g);
    }
    dev->event_destroy(e0);
    dev->event_destroy(e1);
    return bad;
}
