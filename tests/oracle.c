/*
 * oracle.c - the tests' independent reference (see oracle.h): every rule below is the
 * header's sentence for it, applied to one (row, key) pair at a time.
 */
#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/convert.h"
#include "../src/philox.h"

static size_t bytes_of(sdpa_dtype t) { return t == SDPA_F32 ? 4 : 2; }

/* Element (b, h, t, x) of a view, widened to double. */
static double at(const sdpa_tensor *t, int64_t b, int64_t h, int64_t row, int64_t x) {
    const char *p = (const char *)t->data +
                    (size_t)(b * t->stride_b + h * t->stride_h + row * t->stride_t) *
                        bytes_of(t->dtype);
    return (double)sdpa_load_as_f32(p, x, t->dtype);
}

/* Sequence b's row and key counts and where they start in the views. */
typedef struct seq {
    int64_t tq, tkv, q0, kv0;
} seq;

static seq sequence(const sdpa_desc *d, int64_t b) {
    seq s = {d->len_q, d->len_kv, 0, 0};
    if (d->cu_seqlens_q) {
        s.q0 = d->cu_seqlens_q[b];
        s.kv0 = d->cu_seqlens_kv[b];
        s.tq = d->cu_seqlens_q[b + 1] - s.q0;
        s.tkv = d->cu_seqlens_kv[b + 1] - s.kv0;
        return s;
    }
    if (d->q_lens)
        s.tq = d->q_lens[b];
    if (d->kv_lens)
        s.tkv = d->kv_lens[b];
    return s;
}

/* "the diagonal of row i": i + (Tkv - Tq) bottom-right (and with causal off), i top-left */
static int64_t diagonal(const sdpa_desc *d, const seq *s, int64_t i) {
    return d->causal == SDPA_CAUSAL_TOP_LEFT ? i : i + (s->tkv - s->tq);
}

/* The mask's element (b, h, i, j) widened to double (1 or 0 for a boolean mask). */
static double mask_at(const sdpa_desc *d, int64_t b, int64_t h, int64_t i, int64_t j) {
    const sdpa_mask *m = &d->mask;
    const int64_t e = b * m->stride_b + h * m->stride_h + i * m->stride_q + j;
    if (m->kind == SDPA_MASK_BOOL)
        return ((const uint8_t *)m->data)[e] != 0;
    return (double)sdpa_load_as_f32(m->data, e, m->dtype);
}

int th_oracle_visible(const sdpa_desc *d, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (b < 0 || b >= d->batch) /* a view row no sequence owns */
        return 0;
    const seq s = sequence(d, b);
    if (i < 0 || i >= s.tq || j < 0 || j >= s.tkv)
        return 0;
    const int64_t dg = diagonal(d, &s, i);
    if (d->causal != SDPA_CAUSAL_NONE && j > dg)
        return 0;
    if (d->window && (j < dg - d->window_left || j > dg + d->window_right))
        return 0;
    if (d->mask.kind == SDPA_MASK_BOOL && mask_at(d, b, h, i, j) == 0.0)
        return 0;
    if (d->mask.kind == SDPA_MASK_ADDITIVE && mask_at(d, b, h, i, j) == -INFINITY)
        return 0;
    return 1;
}

/* Row i of sequence b, head h: output row o[Dv], *lse and weights w[Tkv view columns]. */
static void one_row(const sdpa_desc *d, const sdpa_tensor *q, const sdpa_tensor *k,
                    const sdpa_tensor *v, int64_t vb, int64_t b, int64_t h, int64_t i,
                    double *sc, double *qd, double *o, double *lse, double *w) {
    const seq s = sequence(d, b);
    const int64_t g = d->heads_q / d->heads_kv, hk = h / g, Dk = d->dim_qk, Dv = d->dim_v;
    const float scale = d->scale != 0.0f ? d->scale : (float)(1.0 / sqrt((double)Dk));
    const int64_t dg = diagonal(d, &s, i);
    int any_nan = 0;
    double mx = -INFINITY;
    for (int64_t x = 0; x < Dk; x++) /* the query row, read once */
        qd[x] = at(q, vb, h, s.q0 + i, x);
    for (int64_t j = 0; j < s.tkv; j++) {
        if (!th_oracle_visible(d, b, h, i, j))
            continue;
        double dot = 0.0;
        for (int64_t x = 0; x < Dk; x++)
            dot += qd[x] * at(k, vb, hk, s.kv0 + j, x);
        double x = (double)scale * dot;
        if (d->softcap > 0.0f)
            x = (double)d->softcap * tanh(x / (double)d->softcap);
        if (d->alibi_slopes)
            x -= (double)d->alibi_slopes[h] * fabs((double)(dg - j));
        if (d->mask.kind == SDPA_MASK_ADDITIVE)
            x += mask_at(d, b, h, i, j);
        sc[j] = x;
        if (isnan(x))
            any_nan = 1;
        else if (x > mx)
            mx = x;
    }
    const double sink = d->sinks ? (double)d->sinks[h] : -INFINITY;
    if (sink > mx)
        mx = sink;
    /* the softmax of the visible scores, the sink's exp in the denominator only */
    const double mu = mx == -INFINITY ? 0.0 : mx;
    double sum = any_nan ? NAN : exp(sink - mu);
    for (int64_t j = 0; j < s.tkv; j++)
        if (th_oracle_visible(d, b, h, i, j)) {
            sc[j] = exp(sc[j] - mu); /* the score's numerator from here on */
            sum += sc[j];
        }
    if (sum == 0.0) { /* nothing visible, or every visible score -inf: zeros, -inf */
        *lse = -INFINITY;
        return;
    }
    *lse = mu + log(sum);
    for (int64_t j = 0; j < s.tkv; j++) {
        if (!th_oracle_visible(d, b, h, i, j))
            continue;
        double wj = sc[j] / sum;
        if (d->dropout_p != 0.0f) {
            uint32_t words[4];
            sdpa_dropout_words(d->dropout_seed, b, h, i, j >> 2, words);
            const double thr = nearbyint((double)d->dropout_p * 4294967296.0);
            const int keep = (double)words[j & 3] >= (thr >= 4294967295.0 ? 4294967295.0 : thr);
            wj *= keep ? (double)(float)(1.0 / (1.0 - (double)d->dropout_p)) : 0.0;
        }
        if (w)
            w[j] = wj;
        for (int64_t x = 0; x < Dv; x++) /* a zero weight still multiplies its value */
            o[x] += wj * at(v, vb, hk, s.kv0 + j, x);
    }
}

int th_oracle(const sdpa_desc *d, const sdpa_tensor *q, const sdpa_tensor *k,
              const sdpa_tensor *v, double *o, double *lse, double *w) {
    const int varlen = d->cu_seqlens_q != NULL;
    const int64_t VB = varlen ? 1 : d->batch, Hq = d->heads_q, Tq = d->len_q, Tkv = d->len_kv;
    const int64_t Dv = d->dim_v;
    double *sc = malloc((size_t)(Tkv + d->dim_qk) * sizeof(double)); /* scores, query row */
    if (!sc)
        return 0;
    for (int64_t vb = 0; vb < VB; vb++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t r = 0; r < Tq; r++) {
                const size_t row = (size_t)((vb * Hq + h) * Tq + r);
                double *orow = o + row * (size_t)Dv, *wrow = w ? w + row * (size_t)Tkv : NULL;
                memset(orow, 0, (size_t)Dv * sizeof(double));
                if (wrow)
                    memset(wrow, 0, (size_t)Tkv * sizeof(double));
                lse[row] = -INFINITY;
                /* which sequence owns view row r, and the row within it */
                int64_t b = vb, i = r;
                if (varlen) {
                    for (b = 0; b < d->batch && r >= d->cu_seqlens_q[b + 1]; b++) {
                    }
                    if (b == d->batch)
                        continue; /* no sequence owns it */
                    i = r - d->cu_seqlens_q[b];
                }
                if (i >= sequence(d, b).tq)
                    continue; /* padding: zeros, -inf, whatever the sinks */
                /* the weights' columns are keys within the sequence */
                one_row(d, q, k, v, vb, b, h, i, sc, sc + Tkv, orow, &lse[row], wrow);
            }
    free(sc);
    return 1;
}
