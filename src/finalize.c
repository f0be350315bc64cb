/*
 * finalize.c - the end of a row: its output and lse from one partial (m, l, O) or from
 * several merged in a fixed order (split-KV), the sink logit, padding rows and the rows
 * no packed sequence owns, and the 16-bit rounding of O. Portable C, no kernels.
 *
 * Finalisation of row r from its units' partials (m_c, l_c, O_c), c in a fixed order,
 * with the sink logit s_h when sinks are on (else s_h = -inf):
 *
 *   M = max(max_c m_c, s_h)
 *   l = sum_c exp(m_c - M) l_c + exp(s_h - M);  O = sum_c exp(m_c - M) O_c
 *   o_r = O / l,  lse_r = M + log(l);   l == 0 (nothing visible): o_r = 0, lse_r = -inf
 */
#include <math.h>
#include <string.h>

#include "../kernels/convert.h"
#include "driver.h"

/* One row's partial results: nc (m, l, O) triples, O rows ldo floats apart. */
typedef struct partials {
    int nc;
    const float *m, *l; /* m[c * stride], l[c * stride] */
    const float *o;     /* o + c * ostride */
    size_t stride, ostride;
} partials;

/* out[0 .. n) = acc[0 .. n) * f, four at a time with restrict so the compiler emits one
 * baseline-ISA vector op per group: this pass writes the caller's output, a cache miss
 * per line, and is a measurable share of prefill as a scalar loop (docs/PERFORMANCE.md,
 * "Vectorised plain loops"). */
static void scale_row(float *restrict out, const float *restrict acc, float f, int n) {
    int d = 0;
    for (; d + 4 <= n; d += 4) {
        out[d] = acc[d] * f;
        out[d + 1] = acc[d + 1] * f;
        out[d + 2] = acc[d + 2] * f;
        out[d + 3] = acc[d + 3] * f;
    }
    for (; d < n; d++)
        out[d] = acc[d] * f;
}

/* Write output row `dst` (and *lse) from a row's partials; see the header comment. wts
 * holds nc floats of scratch. */
static void finalize_row(const plan *pl, const partials *pt, float sink, float *wts,
                         void *restrict dst, float *lse) {
    const sdpa_problem *p = &pl->p;
    const int Dv = (int)p->Dv;
    if (pt->nc == 1 && sink == -INFINITY && p->ot == SDPA_F32) {
        /* The common case, without the two expf calls below: M = m, weight exp(m - M) = 1
         * (or 0 with l = 0 when m = -inf), l = l_c (docs/PERFORMANCE.md, "Vectorised plain
         * loops"). */
        const float l = pt->l[0];
        if (l == 0.0f) {
            memset(dst, 0, (size_t)Dv * sizeof(float));
            if (lse)
                *lse = -INFINITY;
            return;
        }
        scale_row(dst, pt->o, 1.0f / l, Dv);
        if (lse)
            *lse = (pt->m[0] == -INFINITY ? 0.0f : pt->m[0]) + logf(l);
        return;
    }
    float M = sink;
    for (int c = 0; c < pt->nc; c++) {
        const float mc = pt->m[(size_t)c * pt->stride];
        if (mc > M || isnan(mc))
            M = mc;
    }
    /* as in the kernels' softmax: a max of -inf (no visible key, no sink) subtracts 0, so
     * every weight is exp(-inf) = 0 and a NaN l_c still reaches l */
    const float mu = M == -INFINITY ? 0.0f : M;
    float l = expf(sink - mu);
    for (int c = 0; c < pt->nc; c++) {
        wts[c] = expf(pt->m[(size_t)c * pt->stride] - mu);
        l += wts[c] * pt->l[(size_t)c * pt->stride];
    }
    if (l == 0.0f) { /* nothing visible: zeros, lse = -inf */
        memset(dst, 0, (size_t)Dv * sdpa_dtype_size(p->ot));
        if (lse)
            *lse = -INFINITY;
        return;
    }
    const float inv = 1.0f / l;
    if (pt->nc == 1 && p->ot == SDPA_F32) { /* the common case: one partial, fp32 out */
        scale_row(dst, pt->o, wts[0] * inv, Dv);
        if (lse)
            *lse = mu + logf(l);
        return;
    }
    for (int d = 0; d < Dv; d++) {
        float acc = wts[0] * pt->o[d];
        for (int c = 1; c < pt->nc; c++)
            acc += wts[c] * pt->o[(size_t)c * pt->ostride + (size_t)d];
        const float x = acc * inv;
        switch (p->ot) {
        case SDPA_F16:
            ((uint16_t *)dst)[d] = sdpa_f32_to_f16(x);
            break;
        case SDPA_BF16:
            ((uint16_t *)dst)[d] = sdpa_f32_to_bf16(x);
            break;
        case SDPA_F32:
            ((float *)dst)[d] = x;
            break;
        }
    }
    if (lse)
        *lse = mu + logf(l);
}

/* Output row and lse slot of row r of an item. */
static void *out_row(const plan *pl, const rows *it, const scratch *w, int r, float **lse) {
    const sdpa_problem *p = &pl->p;
    const int64_t row = it->seq.q0 + w->i[r];
    *lse = p->lse ? p->lse + it->b * p->lse_sb + w->h[r] * p->lse_sh + row : NULL;
    return (char *)p->o + (size_t)(it->b * p->os[0] + w->h[r] * p->os[1] + row * p->os[2]) *
                              sdpa_dtype_size(p->ot);
}

/* Padding rows of an item (plain and padded batches only: under packed varlen the rows
 * past a sequence's end belong to the next sequence). */
static void write_padding(const plan *pl, const rows *it, const scratch *w) {
    if (pl->p.cu_q)
        return;
    for (int r = it->mvalid; r < it->m; r++) {
        float *lse;
        void *dst = out_row(pl, it, w, r, &lse);
        memset(dst, 0, (size_t)pl->p.Dv * sdpa_dtype_size(pl->p.ot));
        if (lse)
            *lse = -INFINITY;
    }
}

void finalize_item(const plan *pl, const rows *it, const scratch *w) {
    for (int r = 0; r < it->mvalid; r++) {
        const partials pt = {1, &w->m[r], &w->l[r], w->o + (size_t)r * (size_t)pl->ldo, 0, 0};
        float *lse;
        void *dst = out_row(pl, it, w, r, &lse);
        const float sink = pl->p.sinks ? pl->p.sinks[w->h[r]] : -INFINITY;
        finalize_row(pl, &pt, sink, w->tmp, dst, lse);
    }
    write_padding(pl, it, w);
}

/* ---- planning and threads ----------------------------------------------------- */

void merge_item(const plan *pl, const scratch *w, int64_t t) {
    rows it;
    item_rows(pl, w, t, &it);
    const size_t pf = partial_floats(pl), mr = (size_t)pl->mrows;
    const float *base = pl->part + (size_t)(t * pl->nchunks) * pf;
    for (int r = 0; r < it.mvalid; r++) {
        const partials pt = {(int)pl->nchunks, base + r, base + mr + (size_t)r,
                             base + 2 * mr + (size_t)r * (size_t)pl->p.Dv, pf, pf};
        float *lse;
        void *dst = out_row(pl, &it, w, r, &lse);
        const float sink = pl->p.sinks ? pl->p.sinks[w->h[r]] : -INFINITY;
        finalize_row(pl, &pt, sink, w->wts, dst, lse);
    }
    write_padding(pl, &it, w);
}

/* Under packed varlen, view rows no sequence owns (at and beyond cu_seqlens_q[B]) are
 * written like padding rows, so the whole output is defined. */
void write_orphan_rows(const plan *pl) {
    const sdpa_problem *p = &pl->p;
    if (!p->cu_q)
        return;
    const size_t es = sdpa_dtype_size(p->ot);
    for (int64_t h = 0; h < p->Hq; h++)
        for (int64_t r = p->cu_q[p->B]; r < p->Tq; r++) {
            memset((char *)p->o + (size_t)(h * p->os[1] + r * p->os[2]) * es, 0,
                   (size_t)p->Dv * es);
            if (p->lse)
                p->lse[h * p->lse_sh + r] = -INFINITY;
        }
}
