/*
 * combo.c — the type/layout combination grammar (TensorRT style).
 *
 *   "FP32|FP16, FP32|FP16, FP32"   tied: slots 1 and 2 take their k-th choice
 *                                  together; slot 3 is fixed -> 2 choices
 *   "FP32*FP16, FP32"              independent: every choice of slot 1 with
 *                                  every choice of the others
 *   "FP32|FP16"                    one slot: applies to every position
 *
 * The result is the product of the type choices and the layout choices,
 * with duplicates removed (first occurrence kept, so order is stable).
 */
#include "kiln_int.h"

#include <ctype.h>
#include <stdio.h>

#define MAX_ALTS 16
#define MAX_EXPANDED 1024

typedef enum slot_kind { SLOT_FIXED, SLOT_TIED, SLOT_INDEP } slot_kind;

typedef struct slot {
    slot_kind kind;
    int nalts;
    int alts[MAX_ALTS];
    int column; /* 1-based column of the slot's first character */
} slot;

typedef struct parsed {
    int nslots;
    slot slots[KILN_MAX_IO];
} parsed;

/* Parse one token as a dtype (is_type) or a layout; -1 if unknown. */
static int parse_token(const char *tok, int is_type) {
    if (is_type) {
        kiln_dtype t = kiln_dtype_parse(tok);
        return t == KILN_DTYPE_UNDEFINED || t == KILN_DTYPE_STRING ? -1 : (int)t;
    }
    kiln_format f;
    return kiln_format_parse(tok, &f) == 0 ? (int)f : -1;
}

static int parse_combo(const char *what, const char *str, int is_type, parsed *p) {
    memset(p, 0, sizeof *p);
    const char *s = str;
    for (;;) {
        if (p->nslots == KILN_MAX_IO)
            return kiln__err(KILN_EINVAL, "%s \"%s\": more than %d slots", what, str, KILN_MAX_IO);
        slot *sl = &p->slots[p->nslots];
        while (*s == ' ' || *s == '\t') s++;
        sl->column = (int)(s - str) + 1;
        char sep = 0;
        for (;;) {
            while (*s == ' ' || *s == '\t') s++;
            const char *b = s;
            while (*s && (isalnum((unsigned char)*s) || *s == '_')) s++;
            int col = (int)(b - str) + 1;
            if (s == b)
                return kiln__err(KILN_EINVAL,
                                 "%s \"%s\": expected a %s name at column %d (slot %d), found '%.8s'",
                                 what, str, is_type ? "type" : "layout", col, p->nslots + 1,
                                 *b ? b : "end of string");
            char tok[32];
            size_t len = (size_t)(s - b);
            if (len >= sizeof tok) len = sizeof tok - 1;
            memcpy(tok, b, len);
            tok[len] = '\0';
            int v = parse_token(tok, is_type);
            if (v < 0)
                return kiln__err(KILN_EINVAL,
                                 "%s \"%s\": unknown %s '%s' at column %d (slot %d); expected %s",
                                 what, str, is_type ? "type" : "layout", tok, col, p->nslots + 1,
                                 is_type ? "FP32, FP16, BF16, FP64, INT8, INT32, INT64, UINT8 or BOOL"
                                         : "LINEAR, NCHW, NHWC, NCHW8C or NCHW16C");
            if (sl->nalts == MAX_ALTS)
                return kiln__err(KILN_EINVAL, "%s \"%s\": slot %d (column %d) has more than %d alternatives",
                                 what, str, p->nslots + 1, sl->column, MAX_ALTS);
            sl->alts[sl->nalts++] = v;
            while (*s == ' ' || *s == '\t') s++;
            if (*s == '|' || *s == '*') {
                if (sep && sep != *s)
                    return kiln__err(KILN_EINVAL,
                                     "%s \"%s\": slot %d mixes '|' and '*' at column %d; use one kind per slot",
                                     what, str, p->nslots + 1, (int)(s - str) + 1);
                sep = *s++;
                continue;
            }
            break;
        }
        sl->kind = sl->nalts == 1 ? SLOT_FIXED : sep == '|' ? SLOT_TIED : SLOT_INDEP;
        p->nslots++;
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s == '\0') break;
        return kiln__err(KILN_EINVAL, "%s \"%s\": unexpected '%c' at column %d (slot %d)", what, str, *s,
                         (int)(s - str) + 1, p->nslots);
    }
    return 0;
}

/* Expand a parsed combo for nio positions into rows of nio values. */
static int expand(const char *what, const char *str, const parsed *p, int nio, int *rows, int max_rows) {
    slot pos[KILN_MAX_IO];
    if (p->nslots == 1) {
        for (int i = 0; i < nio; i++) pos[i] = p->slots[0];
    } else if (p->nslots == nio) {
        memcpy(pos, p->slots, sizeof(slot) * (size_t)nio);
    } else {
        return kiln__err(KILN_EINVAL, "%s \"%s\": %d slots given, expected 1 or %d (inputs then outputs)",
                         what, str, p->nslots, nio);
    }
    int tied = 1, tied_slot = -1;
    int64_t total = 1;
    for (int i = 0; i < nio; i++) {
        if (pos[i].kind == SLOT_TIED) {
            if (tied_slot >= 0 && pos[i].nalts != tied)
                return kiln__err(KILN_EINVAL,
                                 "%s \"%s\": tied slot %d (column %d) has %d alternatives but tied slot %d "
                                 "(column %d) has %d; tied slots must agree",
                                 what, str, i + 1, pos[i].column, pos[i].nalts, tied_slot + 1,
                                 pos[tied_slot].column, tied);
            if (tied_slot < 0) {
                tied = pos[i].nalts;
                tied_slot = i;
            }
        } else if (pos[i].kind == SLOT_INDEP) {
            total *= pos[i].nalts;
            if (total > MAX_EXPANDED) break;
        }
    }
    total *= tied;
    if (!rows) return total > max_rows ? max_rows + 1 : (int)total;
    if (total > max_rows)
        return kiln__err(KILN_EINVAL, "%s \"%s\": expands to more than %d combinations", what, str, max_rows);
    int n = 0;
    for (int t = 0; t < tied; t++) {
        int ctr[KILN_MAX_IO] = {0};
        for (;;) {
            int *row = rows + (size_t)n * nio;
            for (int i = 0; i < nio; i++)
                row[i] = pos[i].kind == SLOT_TIED ? pos[i].alts[t]
                         : pos[i].kind == SLOT_INDEP ? pos[i].alts[ctr[i]]
                                                     : pos[i].alts[0];
            n++;
            int i = nio - 1;
            for (; i >= 0; i--) {
                if (pos[i].kind != SLOT_INDEP) continue;
                if (++ctr[i] < pos[i].nalts) break;
                ctr[i] = 0;
            }
            if (i < 0) break;
        }
    }
    return n;
}

int kiln_combo_expand(const char *types, const char *layouts, int nio, kiln_io_format *out, int max) {
    if (nio < 1 || nio > KILN_MAX_IO)
        return kiln__err(KILN_EINVAL, "combination: %d positions, expected 1..%d", nio, KILN_MAX_IO);
    if (!types || !*types) return kiln__err(KILN_EINVAL, "combination: empty type string");
    int rc, nt, nl = 1;
    int has_layouts = layouts && *layouts;
    int *trows = NULL, *lrows = NULL;
    kiln_io_format *res = NULL;
    parsed *pt = kiln__malloc(sizeof *pt), *pl = kiln__malloc(sizeof *pl);
    if (!pt || !pl) {
        rc = kiln__err(KILN_ENOMEM, "combination: out of memory");
        goto done;
    }
    /* parse and count first, then allocate exactly */
    if ((rc = parse_combo("types", types, 1, pt)) < 0) goto done;
    if ((nt = rc = expand("types", types, pt, nio, NULL, MAX_EXPANDED)) < 0) goto done;
    if (has_layouts) {
        if ((rc = parse_combo("layouts", layouts, 0, pl)) < 0) goto done;
        if ((nl = rc = expand("layouts", layouts, pl, nio, NULL, MAX_EXPANDED)) < 0) goto done;
    }
    if (nt > MAX_EXPANDED || nl > MAX_EXPANDED || (int64_t)nt * nl > MAX_EXPANDED) {
        rc = kiln__err(KILN_EINVAL, "combination \"%s\" x \"%s\": more than %d combinations", types,
                       has_layouts ? layouts : "LINEAR", MAX_EXPANDED);
        goto done;
    }
    trows = kiln__malloc(sizeof(int) * (size_t)nt * (size_t)nio);
    lrows = kiln__malloc(sizeof(int) * (size_t)nl * (size_t)nio);
    res = kiln__malloc(sizeof *res * (size_t)nt * (size_t)nl);
    if (!trows || !lrows || !res) {
        rc = kiln__err(KILN_ENOMEM, "combination: out of memory");
        goto done;
    }
    expand("types", types, pt, nio, trows, nt);
    if (has_layouts)
        expand("layouts", layouts, pl, nio, lrows, nl);
    else
        for (int i = 0; i < nio; i++) lrows[i] = KILN_FORMAT_LINEAR;
    int n = 0;
    for (int a = 0; a < nt; a++)
        for (int b = 0; b < nl; b++) {
            kiln_io_format *f = &res[n];
            memset(f, 0, sizeof *f);
            f->n = nio;
            for (int i = 0; i < nio; i++) {
                f->dtype[i] = (kiln_dtype)trows[(size_t)a * nio + i];
                f->format[i] = (kiln_format)lrows[(size_t)b * nio + i];
            }
            int dup = 0;
            for (int k = 0; k < n && !dup; k++)
                dup = memcmp(res[k].dtype, f->dtype, sizeof f->dtype[0] * (size_t)nio) == 0 &&
                      memcmp(res[k].format, f->format, sizeof f->format[0] * (size_t)nio) == 0;
            if (!dup) n++;
        }
    if (out) {
        if (n > max) {
            rc = kiln__err(KILN_EINVAL, "combination \"%s\": %d combinations, room for %d", types, n, max);
            goto done;
        }
        memcpy(out, res, sizeof *res * (size_t)n);
    }
    rc = n;
done:
    kiln__free(pt);
    kiln__free(pl);
    kiln__free(trows);
    kiln__free(lrows);
    kiln__free(res);
    return rc;
}
