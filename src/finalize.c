/*
 * finalize.c - the end of a row: its output and lse from one partial (m, l, O) or from
 * several merged in a fixed order (split-KV), the sink logit, padding rows and the rows
 * no packed sequence owns, and the 16-bit rounding of O. Portable C, no kernels.
 *
 * A unit leaves, per row, the running state of the online softmax: m (the max score),
 * l (the sum of exp(s - m)) and O (the sum of exp(s - m) V). One part finalises as
 *
 *   o_r = O / l,  lse_r = m + log(l);     l == 0 (nothing visible): o_r = 0, lse_r = -inf
 *
 * Several parts (split-KV chunks, c in a fixed order) are first normalised to
 * (O_c / l_c, lse_c) and then merged by sdpa_merge_row, the same function sdpa_merge
 * runs for callers, with the head's sink logit s_h as one more part without a value:
 *
 *   M = max(max_c lse_c, s_h);  L = sum_c exp(lse_c - M) + exp(s_h - M)
 *   o_r = sum_c (exp(lse_c - M) / L) O_c / l_c,   lse_r = M + log(L)
 *
 * A part of the fused path with l_c = 0 has lse_c = -inf, but unlike a caller's empty
 * part it may have seen keys: every one scored -inf (a weight of 0, not a mask), and its
 * O_c is the sum of 0 x V over them, 0 or NaN (0 x inf, 0 x NaN). When the row has
 * weight elsewhere (another part, the sink), o_r adds 0 x O_c, so those NaNs reach the
 * output as the reference's sum over every visible key puts them there (include/sdpa.h:
 * a -inf score's value row still multiplies its weight).
 */
#include <math.h>
#include <string.h>

#include "../kernels/convert.h"
#include "driver.h"

/* Columns of a row the merge sums at a time, in an array on the stack (1 KiB). */
#define MERGE_CHUNK 256

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

/* acc[0 .. n) += c * x[0 .. n), x stored as t: a product and then a sum per element, as
 * the merge's scalar loop had them (no contraction: -std=c11), four at a time with
 * restrict as scale_row. */
static void add_scaled(float *restrict acc, float c, const void *restrict x, sdpa_dtype t,
                       int n) {
    int d = 0;
    if (t == SDPA_F32) {
        const float *restrict xf = x;
        for (; d + 4 <= n; d += 4) {
            acc[d] += c * xf[d];
            acc[d + 1] += c * xf[d + 1];
            acc[d + 2] += c * xf[d + 2];
            acc[d + 3] += c * xf[d + 3];
        }
    }
    for (; d < n; d++)
        acc[d] += c * sdpa_load_as_f32(x, d, t);
}

static void store(void *row, int64_t d, sdpa_dtype t, float x) {
    switch (t) {
    case SDPA_F16:
        ((uint16_t *)row)[d] = sdpa_f32_to_f16(x);
        break;
    case SDPA_BF16:
        ((uint16_t *)row)[d] = sdpa_f32_to_bf16(x);
        break;
    default: /* SDPA_F32 */
        ((float *)row)[d] = x;
        break;
    }
}

void sdpa_merge_row(int n, const void *const *parts, const sdpa_dtype *dts, const float *lses,
                    float sink, int zero_weight, int64_t D, void *dst, sdpa_dtype ot,
                    float *lse_out, float *coef) {
    float M = sink;
    int nan = isnan(sink);
    for (int i = 0; i < n; i++) {
        if (isnan(lses[i]))
            nan = 1;
        else if (lses[i] > M)
            M = lses[i];
    }
    if (nan || M == -INFINITY) { /* a NaN anywhere, or nothing seen by any part */
        for (int64_t d = 0; d < D; d++)
            store(dst, d, ot, nan ? NAN : 0.0f);
        if (lse_out)
            *lse_out = nan ? NAN : -INFINITY;
        return;
    }
    float L = sink == -INFINITY ? 0.0f : expf(sink - M);
    for (int i = 0; i < n; i++) {
        coef[i] = lses[i] == -INFINITY ? 0.0f : expf(lses[i] - M);
        L += coef[i];
    }
    const float inv = 1.0f / L;
    for (int i = 0; i < n; i++)
        coef[i] *= inv;
    /* o[d] = sum over the parts in order of coef_i x part_i[d], each element's sum the
     * same sequence of operations whichever way the loops nest: here MERGE_CHUNK columns
     * at a time, part by part, so the inner loop runs along a row (a caller's part that
     * saw nothing adds nothing, even NaN; the fused path's part of weight 0, coef 0, adds
     * 0 x O: see above) */
    for (int64_t d0 = 0; d0 < D; d0 += MERGE_CHUNK) {
        const int nd = (int)(D - d0 < MERGE_CHUNK ? D - d0 : MERGE_CHUNK);
        float acc[MERGE_CHUNK];
        memset(acc, 0, sizeof acc);
        for (int i = 0; i < n; i++) {
            if (lses[i] == -INFINITY && !zero_weight)
                continue;
            const sdpa_dtype t = dts ? dts[i] : SDPA_F32;
            add_scaled(acc, coef[i], (const char *)parts[i] + (size_t)d0 * sdpa_dtype_size(t),
                       t, nd);
        }
        if (ot == SDPA_F32)
            memcpy((float *)dst + d0, acc, (size_t)nd * sizeof(float));
        else
            for (int d = 0; d < nd; d++)
                store(dst, d0 + d, ot, acc[d]);
    }
    if (lse_out)
        *lse_out = M + logf(L);
}

void sdpa_partial_of(float m, float l, float *o, float *out, int64_t D, float *lse) {
    if (l == 0.0f) { /* no visible key in this part: it contributes nothing */
        *lse = -INFINITY;
        if (out != o)
            memcpy(out, o, (size_t)D * sizeof(float));
        return;
    }
    /* as in the kernels' softmax: a max of -inf subtracts 0 */
    *lse = (m == -INFINITY ? 0.0f : m) + logf(l);
    const float inv = 1.0f / l;
    if (out != o) {
        scale_row(out, o, inv, (int)D);
        return;
    }
    int64_t d = 0;
    for (; d + 4 <= D; d += 4) { /* four at a time, as scale_row */
        o[d] *= inv;
        o[d + 1] *= inv;
        o[d + 2] *= inv;
        o[d + 3] *= inv;
    }
    for (; d < D; d++)
        o[d] *= inv;
}

/* Write output row dst (and *lse) from a row's one partial (m, l, O unnormalised) and
 * the head's sink logit (-inf: none). */
static void finalize_row(const plan *pl, float m, float l, float *o, float sink, float *coef,
                         void *restrict dst, float *lse) {
    const sdpa_problem *p = &pl->p;
    const int Dv = (int)p->Dv;
    if (sink == -INFINITY) {
        /* The common case, without the merge's exps: the one part's weight is 1 (or 0
         * with l = 0 when nothing was visible) (docs/PERFORMANCE.md, "Vectorised plain
         * loops"). */
        if (l == 0.0f) {
            memset(dst, 0, (size_t)Dv * sdpa_dtype_size(p->ot));
            if (lse)
                *lse = -INFINITY;
            return;
        }
        if (p->ot == SDPA_F32) {
            scale_row(dst, o, 1.0f / l, Dv);
        } else {
            const float inv = 1.0f / l;
            for (int d = 0; d < Dv; d++)
                store(dst, d, p->ot, o[d] * inv);
        }
        if (lse)
            *lse = (m == -INFINITY ? 0.0f : m) + logf(l);
        return;
    }
    /* with a sink: the row's part merged with the sink logit, a part with no value */
    float lse1;
    sdpa_partial_of(m, l, o, o, Dv, &lse1);
    const void *part = o;
    sdpa_merge_row(1, &part, NULL, &lse1, sink, 1, Dv, dst, p->ot, lse, coef);
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
/* The padding rows among rows [r0, r1) of an item: zeros, lse -inf. */
static void write_padding(const plan *pl, const rows *it, const scratch *w, int r0, int r1) {
    if (pl->p.cu_q)
        return;
    for (int r = r0 > it->mvalid ? r0 : it->mvalid; r < r1; r++) {
        float *lse;
        void *dst = out_row(pl, it, w, r, &lse);
        memset(dst, 0, (size_t)pl->p.Dv * sdpa_dtype_size(pl->p.ot));
        if (lse)
            *lse = -INFINITY;
    }
}

void finalize_item(const plan *pl, const rows *it, const scratch *w) {
    for (int r = 0; r < it->mvalid; r++) {
        float *lse;
        void *dst = out_row(pl, it, w, r, &lse);
        const float sink = pl->p.sinks ? pl->p.sinks[w->h[r]] : -INFINITY;
        finalize_row(pl, w->m[r], w->l[r], w->o + (size_t)r * (size_t)pl->ldo, sink, w->wts,
                     dst, lse);
    }
    write_padding(pl, it, w, 0, it->m);
}

void merge_band(const plan *pl, const rows *it, int part, int *r0, int *r1) {
    const int per = (it->m + pl->merge_parts - 1) / pl->merge_parts;
    *r0 = part * per;
    *r1 = *r0 + per < it->m ? *r0 + per : it->m;
}

void merge_item(const plan *pl, const scratch *w, int64_t t, int part) {
    rows it;
    item_rows(pl, w, t, &it);
    const size_t pf = partial_floats(pl), mr = (size_t)pl->mrows;
    const float *base = pl->part + (size_t)(t * pl->nchunks) * pf;
    const int nc = (int)pl->nchunks;
    int r0, r1;
    merge_band(pl, &it, part, &r0, &r1);
    for (int r = r0; r < r1 && r < it.mvalid; r++) {
        /* chunk c's partial of row r: its lse at base + c pf + r, its O row after the
         * lse of every row */
        for (int c = 0; c < nc; c++) {
            w->lses[c] = base[(size_t)c * pf + (size_t)r];
            w->parts[c] = base + (size_t)c * pf + mr + (size_t)r * (size_t)pl->p.Dv;
        }
        float *lse;
        void *dst = out_row(pl, &it, w, r, &lse);
        const float sink = pl->p.sinks ? pl->p.sinks[w->h[r]] : -INFINITY;
        sdpa_merge_row(nc, w->parts, NULL, w->lses, sink, 1, pl->p.Dv, dst, pl->p.ot, lse,
                       w->wts);
    }
    write_padding(pl, &it, w, r0, r1);
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
