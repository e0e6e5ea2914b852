/*
 * nms.c — ONNX NonMaxSuppression (10, 11).
 *
 * Inputs: boxes [B, S, 4], scores [B, C, S] (f32), and optional
 * max_output_boxes_per_class (int64, default 0), iou_threshold (f32,
 * default 0), score_threshold (f32, default none), read when the layer runs.
 * center_point_box = 0: a box is [y1, x1, y2, x2] (any diagonal corners);
 * 1: [x_center, y_center, width, height].
 *
 * For every (batch, class): boxes whose score exceeds score_threshold, by
 * descending score (ties: lower box index first), are kept unless their IoU
 * with a box already kept exceeds iou_threshold, up to
 * max_output_boxes_per_class.  Output 0 lists (batch, class, box) as int64
 * [N, 3]; N is known only after the run: output 1 (hidden from ONNX, the
 * importer names it) is the size tensor holding N, bounded by B * C * S.
 */
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const kiln_attr_def nms_attrs[] = {
    {"center_point_box", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0,
     "0: [y1, x1, y2, x2]; 1: [x_center, y_center, width, height]"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int nms_present(const kiln_desc *d) { return d->dtype != KILN_DTYPE_UNDEFINED; }

static int nms_shape(kiln_shape_ctx *c) {
    const kiln_desc *b = &c->in[0], *s = &c->in[1];
    if (b->dtype != KILN_DTYPE_F32 || s->dtype != KILN_DTYPE_F32)
        return kiln_set_error(KILN_ETYPE, "NonMaxSuppression: boxes and scores must be f32, found %s and %s",
                              kiln_dtype_name(b->dtype), kiln_dtype_name(s->dtype));
    if (b->ndim != 3 || s->ndim != 3)
        return kiln_set_error(KILN_ESHAPE, "NonMaxSuppression: expected boxes [B, S, 4] and scores "
                              "[B, C, S], found ranks %d and %d", b->ndim, s->ndim);
    int64_t four;
    if (kiln_expr_is_const(b->dims[2], &four) && four != 4)
        return kiln_set_error(KILN_ESHAPE, "NonMaxSuppression: boxes dim 2 is %lld, expected 4",
                              (long long)four);
    if (c->nin > 2 && nms_present(&c->in[2]) && c->in[2].dtype != KILN_DTYPE_I64)
        return kiln_set_error(KILN_ETYPE, "NonMaxSuppression: max_output_boxes_per_class must be int64");
    for (int i = 3; i < c->nin; i++)
        if (nms_present(&c->in[i]) && c->in[i].dtype != KILN_DTYPE_F32)
            return kiln_set_error(KILN_ETYPE, "NonMaxSuppression: input %d must be f32", i);
    const kiln_expr *upper = kiln_expr_mul(c->x, kiln_expr_mul(c->x, s->dims[0], s->dims[1]), s->dims[2]);
    c->out[1].dtype = KILN_DTYPE_I64;
    c->out[1].ndim = 0;
    const kiln_expr *n = kiln_shape_size_tensor(c, 1, upper, upper);
    if (!n) return KILN_EINVAL;
    c->out[0].dtype = KILN_DTYPE_I64;
    c->out[0].ndim = 2;
    c->out[0].dims[0] = n;
    c->out[0].dims[1] = kiln_expr_const(c->x, 3);
    return 0;
}

typedef struct nms_box {
    float y1, x1, y2, x2, area;
} nms_box;

static nms_box nms_read(const float *p, int center) {
    nms_box r;
    if (center) {
        float xc = p[0], yc = p[1], w = p[2], h = p[3];
        r.x1 = xc - w / 2;
        r.x2 = xc + w / 2;
        r.y1 = yc - h / 2;
        r.y2 = yc + h / 2;
    } else {
        r.y1 = fminf(p[0], p[2]);
        r.y2 = fmaxf(p[0], p[2]);
        r.x1 = fminf(p[1], p[3]);
        r.x2 = fmaxf(p[1], p[3]);
    }
    r.area = (r.x2 - r.x1) * (r.y2 - r.y1);
    return r;
}

static float nms_iou(const nms_box *a, const nms_box *b) {
    float ix = fminf(a->x2, b->x2) - fmaxf(a->x1, b->x1);
    float iy = fminf(a->y2, b->y2) - fmaxf(a->y1, b->y1);
    if (ix <= 0 || iy <= 0) return 0;
    float inter = ix * iy, uni = a->area + b->area - inter;
    return uni > 0 ? inter / uni : 0;
}

/* Candidate order: score descending, then box index ascending. */
typedef struct nms_cand {
    float score;
    int64_t box;
} nms_cand;

static int nms_cmp(const void *pa, const void *pb) {
    const nms_cand *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->box < b->box ? -1 : a->box > b->box;
}

static int nms_impl(const kiln_call *c) {
    const kiln_tensor *bt = &c->in[0], *st = &c->in[1];
    int64_t B = st->dims[0], C = st->dims[1], S = st->dims[2];
    if (bt->dims[0] != B || bt->dims[1] != S)
        return kiln_set_error(KILN_ESHAPE, "NonMaxSuppression: boxes [%lld, %lld, 4] do not match scores "
                              "[%lld, %lld, %lld]", (long long)bt->dims[0], (long long)bt->dims[1],
                              (long long)B, (long long)C, (long long)S);
    int64_t max_out = 0;
    float iou_th = 0, score_th = 0;
    int has_score_th = 0;
    if (c->nin > 2 && c->in[2].data && kiln_tensor_numel(&c->in[2]) > 0) max_out = *(const int64_t *)c->in[2].data;
    if (c->nin > 3 && c->in[3].data && kiln_tensor_numel(&c->in[3]) > 0) iou_th = *(const float *)c->in[3].data;
    if (c->nin > 4 && c->in[4].data && kiln_tensor_numel(&c->in[4]) > 0) {
        score_th = *(const float *)c->in[4].data;
        has_score_th = 1;
    }
    if (iou_th < 0 || iou_th > 1)
        return kiln_set_error(KILN_EINVAL, "NonMaxSuppression: iou_threshold %g outside [0, 1]", (double)iou_th);
    if (max_out < 0) max_out = 0;
    int center = (int)kiln_attrs_int(c->attrs, "center_point_box");
    const float *boxes = bt->data, *scores = st->data;
    int64_t *out = c->out[0].data;
    nms_cand *cand = kiln__malloc((size_t)(S ? S : 1) * sizeof *cand);
    int64_t *kept = kiln__malloc((size_t)(S ? S : 1) * sizeof *kept);
    nms_box *bx = kiln__malloc((size_t)(S ? S : 1) * sizeof *bx);
    if (!cand || !kept || !bx) {
        kiln__free(cand);
        kiln__free(kept);
        kiln__free(bx);
        return kiln_set_error(KILN_ENOMEM, "NonMaxSuppression: out of memory for %lld boxes", (long long)S);
    }
    int64_t n = 0;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < S; i++) bx[i] = nms_read(boxes + (b * S + i) * 4, center);
        for (int64_t k = 0; k < C; k++) {
            const float *sc = scores + (b * C + k) * S;
            int64_t nc = 0, nk = 0;
            for (int64_t i = 0; i < S; i++)
                if (!has_score_th || sc[i] > score_th) cand[nc++] = (nms_cand){sc[i], i};
            qsort(cand, (size_t)nc, sizeof *cand, nms_cmp);
            for (int64_t j = 0; j < nc && nk < max_out; j++) {
                int keep = 1;
                for (int64_t q = 0; q < nk && keep; q++)
                    if (nms_iou(&bx[cand[j].box], &bx[kept[q]]) > iou_th) keep = 0;
                if (!keep) continue;
                kept[nk++] = cand[j].box;
                out[3 * n] = b;
                out[3 * n + 1] = k;
                out[3 * n + 2] = cand[j].box;
                n++;
            }
        }
    }
    kiln__free(cand);
    kiln__free(kept);
    kiln__free(bx);
    *(int64_t *)c->out[1].data = n;
    return 0;
}

#define NMS_OP(var, ver)                                                                  \
    static const kiln_quick_op var = {                                                    \
        .ns = "ai.onnx", .name = "NonMaxSuppression", .version = ver,                     \
        .min_inputs = 2, .max_inputs = 5, .num_outputs = 2,                               \
        .attrs = nms_attrs, .shape = nms_shape, .impl = nms_impl,                         \
        .doc = "non-maximum suppression; [N, 3] selected indices, N data-dependent",       \
        .nondeterministic = 0,                                                            \
    };                                                                                    \
    KILN_OP(var)

NMS_OP(nms_10, 10)
NMS_OP(nms_11, 11)
