/*
 * einsum.c — Einsum: the equation is parsed at build time (explicit and
 * implicit output, ellipsis); the kernel sums products over the contracted
 * labels in double.
 */
#include "ops/common/ops_util.h"

/* ---- Einsum ------------------------------------------------------------------------------------------ */

/* Parsed equation: per operand a list of label ids (ellipsis dims become
 * labels 52.. from the right), and the output labels. */
#define EIN_MAXL 64
typedef struct ein {
    int nops;
    int nl[KILN_MAX_IO];
    int lab[KILN_MAX_IO][KILN_MAX_DIMS];
    int nout;
    int out[KILN_MAX_DIMS];
    int used[EIN_MAXL];
} ein;

static int ein_lab(char ch) {
    if (ch >= 'a' && ch <= 'z') return ch - 'a';
    if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
    return -1;
}

/* Parse one term (up to ',' '-' or end) for an operand of rank `rank`
 * (-1: output, ellipsis width = ell). */
static int ein_term(const char **ps, int rank, int *ell, int *labs, int *n) {
    const char *s = *ps;
    int tmp[KILN_MAX_DIMS * 2], k = 0, ellpos = -1;
    while (*s && *s != ',' && *s != '-') {
        if (*s == ' ') { s++; continue; }
        if (s[0] == '.' && s[1] == '.' && s[2] == '.') {
            if (ellpos >= 0) return kiln_set_error(KILN_EATTR, "Einsum: two ellipses in one term");
            ellpos = k;
            s += 3;
            continue;
        }
        int l = ein_lab(*s);
        if (l < 0) return kiln_set_error(KILN_EATTR, "Einsum: bad character '%c' in equation", *s);
        if (k >= KILN_MAX_DIMS) return kiln_set_error(KILN_EATTR, "Einsum: term too long");
        tmp[k++] = l;
        s++;
    }
    *ps = s;
    int w = 0;
    if (ellpos >= 0) {
        w = rank >= 0 ? rank - k : *ell;
        if (w < 0) return kiln_set_error(KILN_ESHAPE, "Einsum: term has more labels than the operand's rank %d", rank);
        if (rank >= 0 && w > *ell) *ell = w;
    } else if (rank >= 0 && k != rank) {
        return kiln_set_error(KILN_ESHAPE, "Einsum: term has %d labels, operand has rank %d", k, rank);
    }
    int m = 0;
    for (int i = 0; i <= k; i++) {
        if (i == ellpos)
            for (int e = 0; e < w; e++) labs[m++] = 52 + (rank >= 0 ? (*ell >= w ? e + (*ell - w) : e) : e);
        if (i < k) labs[m++] = tmp[i];
    }
    *n = m;
    return m > KILN_MAX_DIMS ? kiln_set_error(KILN_ESHAPE, "Einsum: rank too large") : 0;
}

static int ein_parse(const char *eq, int nops, const int *ranks, ein *e) {
    memset(e, 0, sizeof *e);
    const char *s = eq;
    int ell = 0, r;
    /* first pass for the widest ellipsis */
    for (int pass = 0; pass < 2; pass++) {
        s = eq;
        for (int k = 0; k < nops; k++) {
            if ((r = ein_term(&s, ranks[k], &ell, e->lab[k], &e->nl[k]))) return r;
            if (k < nops - 1) {
                if (*s != ',') return kiln_set_error(KILN_EATTR, "Einsum: equation has fewer terms than the %d inputs", nops);
                s++;
            }
        }
    }
    /* ellipsis labels are right-aligned: relabel so that the last ell dims share labels */
    for (int k = 0; k < nops; k++) {
        int w = 0;
        for (int i = 0; i < e->nl[k]; i++) w += e->lab[k][i] >= 52;
        int seen = 0;
        for (int i = 0; i < e->nl[k]; i++)
            if (e->lab[k][i] >= 52) e->lab[k][i] = 52 + (ell - w) + seen++;
    }
    e->nops = nops;
    for (int k = 0; k < nops; k++)
        for (int i = 0; i < e->nl[k]; i++) e->used[e->lab[k][i]]++;
    while (*s == ' ') s++;
    if (*s == ',') return kiln_set_error(KILN_EATTR, "Einsum: equation has more terms than the %d inputs", nops);
    if (s[0] == '-' && s[1] == '>') {
        s += 2;
        if ((r = ein_term(&s, -1, &ell, e->out, &e->nout))) return r;
        if (*s) return kiln_set_error(KILN_EATTR, "Einsum: unexpected '%c' in the output term", *s);
        for (int i = 0; i < e->nout; i++)
            if (!e->used[e->out[i]]) return kiln_set_error(KILN_EATTR, "Einsum: output label not in any input");
    } else {
        /* implicit: ellipsis dims, then labels used once, alphabetically */
        int n = 0;
        for (int l = 52; l < 52 + ell; l++) e->out[n++] = l;
        for (int l = 0; l < 52; l++)
            if (e->used[l] == 1) {
                if (n >= KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Einsum: output rank too large");
                e->out[n++] = l;
            }
        e->nout = n;
    }
    return 0;
}

static const kiln_attr_def einsum_attrs[] = {{.name = "equation", .type = KILN_ATTR_STRING, .required = 1}, {NULL}};

static int einsum_shape(kiln_shape_ctx *c) {
    int ranks[KILN_MAX_IO];
    for (int k = 0; k < c->nin; k++) {
        ranks[k] = c->in[k].ndim;
        int r = kiln__ops_check_same(c, "Einsum", 0, k);
        if (r) return r;
    }
    if (!kiln__ops_is_num(c->in[0].dtype))
        return kiln_set_error(KILN_ETYPE, "Einsum: inputs must be numeric, found %s", kiln_dtype_name(c->in[0].dtype));
    ein e;
    int r = ein_parse(kiln_attrs_string(c->attrs, "equation"), c->nin, ranks, &e);
    if (r) return r;
    const kiln_expr *ld[EIN_MAXL] = {0};
    for (int k = 0; k < c->nin; k++)
        for (int i = 0; i < e.nl[k]; i++) {
            const kiln_expr *d = c->in[k].dims[i];
            int l = e.lab[k][i];
            int64_t a, b;
            if (!ld[l] || (kiln_expr_is_const(ld[l], &a) && a == 1)) ld[l] = d;
            else if (kiln_expr_is_const(ld[l], &a) && kiln_expr_is_const(d, &b) && a != b && b != 1)
                return kiln_set_error(KILN_ESHAPE, "Einsum: label dims disagree (%lld vs %lld)", (long long)a,
                                      (long long)b);
        }
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < e.nout; i++) d[i] = ld[e.out[i]];
    kiln__ops_set_dims(&c->out[0], c->in[0].dtype, e.nout, d);
    return 0;
}

static int einsum_impl(const kiln_call *c) {
    int ranks[KILN_MAX_IO];
    for (int k = 0; k < c->nin; k++) ranks[k] = c->in[k].ndim;
    ein e;
    int r = ein_parse(kiln_attrs_string(c->attrs, "equation"), c->nin, ranks, &e);
    if (r) return r;
    int64_t size[EIN_MAXL];
    for (int l = 0; l < EIN_MAXL; l++) size[l] = 1;
    for (int k = 0; k < c->nin; k++)
        for (int i = 0; i < e.nl[k]; i++)
            if (c->in[k].dims[i] != 1) size[e.lab[k][i]] = c->in[k].dims[i];
    /* loop labels: output labels, then summed labels */
    int loop[EIN_MAXL], nloop = 0, isout[EIN_MAXL] = {0};
    for (int i = 0; i < e.nout; i++) { loop[nloop++] = e.out[i]; isout[e.out[i]] = 1; }
    for (int l = 0; l < EIN_MAXL; l++)
        if (e.used[l] && !isout[l]) loop[nloop++] = l;
    /* per operand: stride of each label (summed over repeated labels = diagonal) */
    int64_t lst[KILN_MAX_IO][EIN_MAXL];
    double *in[KILN_MAX_IO] = {0};
    int rc = 0;
    for (int k = 0; k < c->nin; k++) {
        memset(lst[k], 0, sizeof lst[k]);
        int64_t s = 1;
        for (int i = e.nl[k] - 1; i >= 0; i--) {
            if (c->in[k].dims[i] != 1) lst[k][e.lab[k][i]] += s;
            s *= c->in[k].dims[i];
        }
        int64_t n = kiln_tensor_numel(&c->in[k]);
        in[k] = kiln__malloc((size_t)(n ? n : 1) * sizeof(double));
        if (!in[k]) { rc = kiln_set_error(KILN_ENOMEM, "Einsum: out of memory"); goto done; }
        kiln__ops_to_f64(c->in[k].data, c->in[k].dtype, in[k], n);
    }
    int64_t on = kiln_tensor_numel(&c->out[0]), inner = 1;
    for (int i = e.nout; i < nloop; i++) inner *= size[loop[i]];
    /* summed labels: sizes and per-operand strides */
    int nsum = nloop - e.nout;
    int64_t ssz[EIN_MAXL], sst[KILN_MAX_IO][EIN_MAXL];
    for (int i = 0; i < nsum; i++) {
        ssz[i] = size[loop[e.nout + i]];
        for (int k = 0; k < c->nin; k++) sst[k][i] = lst[k][loop[e.nout + i]];
    }
    double *acc = kiln__malloc((size_t)(on ? on : 1) * sizeof(double));
    if (!acc) { rc = kiln_set_error(KILN_ENOMEM, "Einsum: out of memory"); goto done; }
    for (int64_t o = 0; o < on; o++) {
        int64_t base[KILN_MAX_IO] = {0}, rem = o;
        for (int i = e.nout - 1; i >= 0; i--) {
            int64_t ix = rem % size[loop[i]];
            rem /= size[loop[i]];
            for (int k = 0; k < c->nin; k++) base[k] += ix * lst[k][loop[i]];
        }
        double sum = 0;
        if (nsum == 1 && c->nin == 2) { /* a dot product: matmul-like equations */
            const double *p0 = in[0] + base[0], *p1 = in[1] + base[1];
            int64_t s0 = sst[0][0], s1 = sst[1][0];
            for (int64_t t = 0; t < inner; t++) sum += p0[t * s0] * p1[t * s1];
        } else if (inner > 0) {
            /* odometer over the summed labels, offsets updated incrementally */
            int64_t idx[EIN_MAXL] = {0}, off[KILN_MAX_IO];
            for (int k = 0; k < c->nin; k++) off[k] = base[k];
            for (;;) {
                double p = 1;
                for (int k = 0; k < c->nin; k++) p *= in[k][off[k]];
                sum += p;
                int i = nsum - 1;
                for (; i >= 0; i--) {
                    for (int k = 0; k < c->nin; k++) off[k] += sst[k][i];
                    if (++idx[i] < ssz[i]) break;
                    for (int k = 0; k < c->nin; k++) off[k] -= sst[k][i] * ssz[i];
                    idx[i] = 0;
                }
                if (i < 0) break;
            }
        }
        acc[o] = sum;
    }
    kiln__ops_from_f64(acc, c->out[0].dtype, c->out[0].data, on);
    kiln__free(acc);
done:
    for (int k = 0; k < c->nin; k++) kiln__free(in[k]);
    return rc;
}
static const kiln_quick_op einsum_op = {
    .ns = OPS_NS, .name = "Einsum", .version = 12, .min_inputs = 1, .max_inputs = KILN_MAX_IO - 1,
    .num_outputs = 1, .attrs = einsum_attrs, .shape = einsum_shape, .impl = einsum_impl,
    .doc = "Einstein summation (naive contraction over labels)",
};
KILN_OP(einsum_op)
