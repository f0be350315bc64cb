/*
 * reference.c - the naive reference: attention written the way the seeds' notebooks
 * write it, one query row at a time, in double precision.
 *
 * This is the oracle every test compares the fused path against and the baseline of
 * the benchmark, so it is written to be read, not to be fast: no tiling, no SIMD, no
 * threads, one row of scores materialised at a time, every descriptor feature applied
 * in the order sdpa.h gives. It shares only the input validation, the per-sequence
 * geometry and the visible-key rule (sdpa_sequence, sdpa_row_range) with the fused
 * path, never a kernel, so a bug in the kernels cannot hide in both. 16-bit operands are
 * widened exactly (kernels/convert.h) and a 16-bit output is rounded from fp32, as the
 * fused path rounds it. Under SDPA_COMPUTE_BF16 it applies the mode's two roundings
 * (Q, K, V to bf16; each weight to bf16 before it multiplies V) and computes everything
 * else exactly, so the kernels' error against it is the mode's error model (sdpa.h).
 */
#include <math.h>
#include <stdlib.h>

#include "../kernels/convert.h"
#include "internal.h"
#include "philox.h"

static size_t esize(sdpa_dtype t) { return t == SDPA_F32 ? 4 : 2; }

/* The value of a quantized code, from the formats' definitions (sdpa.h, sdpa_dtype) by
 * arithmetic, not by the kernels' bit manipulation (kernels/kvq.h), so the two check
 * each other: code c of element d of a row stored as t. */
static double code_value(const char *row, int64_t d, sdpa_dtype t) {
    if (t == SDPA_I8)
        return (double)((const int8_t *)row)[d];
    if (t == SDPA_I4) {
        const int nib = (((const uint8_t *)row)[d / 2] >> (4 * (d % 2))) & 15;
        return (double)(nib >= 8 ? nib - 16 : nib);
    }
    const uint8_t c = ((const uint8_t *)row)[d];
    const int e4m3 = t == SDPA_FP8_E4M3;
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const int e = (c & 0x7f) >> mbits, m = c & ((1 << mbits) - 1);
    const double sign = (c & 0x80) ? -1.0 : 1.0;
    if (e4m3 && e == 15 && m == 7)
        return NAN;
    if (!e4m3 && e == 31)
        return m ? NAN : sign * INFINITY;
    if (e == 0)
        return sign * ldexp((double)m, 1 - bias - mbits);
    return sign * ldexp((double)(m + (1 << mbits)), e - bias - mbits);
}

/* Row j of K (which 0) or V (1) of sequence s of entry b, head hk, stored as t at row,
 * as fp32 values: widened, or dequantized as fl(value * scale) (sdpa.h), into
 * out[0 .. D); out returned. */
static const float *kv_row_widen(const sdpa_problem *p, int which, int64_t b, int64_t hk,
                                 const sdpa_seq *s, int64_t j, const char *row, float *sc,
                                 float *out) {
    const sdpa_dtype t = which ? p->vt : p->kt;
    const int64_t D = which ? p->Dv : p->Dk;
    if (!sdpa_dtype_quantized(t)) {
        for (int64_t d = 0; d < D; d++)
            out[d] = sdpa_load_as_f32(row, d, t);
        return out;
    }
    const int64_t group = (which ? &p->vsc : &p->ksc)->group;
    sdpa_kv_row_scales(p, which, b, hk, s->kv0, j, sc);
    for (int64_t d = 0; d < D; d++)
        out[d] = (float)code_value(row, d, t) * sc[d / group];
    return out;
}

/* That row as fp32 values: the stored row itself when it is fp32 (inline, so a call of
 * small heads does not pay a call per key), else kv_row_widen's. */
static inline const float *kv_row(const sdpa_problem *p, int which, int64_t b, int64_t hk,
                                  const sdpa_seq *s, int64_t j, float *sc, float *out) {
    const char *row = sdpa_kv_row(p, which, b, hk, s->kv0, j);
    if ((which ? p->vt : p->kt) == SDPA_F32)
        return (const float *)(const void *)row;
    return kv_row_widen(p, which, b, hk, s, j, row, sc, out);
}

/* Row `row` of head h of batch entry b of a view, as bytes. */
static const char *row_ptr(const void *base, sdpa_dtype t, const int64_t st[3], int64_t b,
                           int64_t h, int64_t row) {
    return (const char *)base + (size_t)(b * st[0] + h * st[1] + row * st[2]) * esize(t);
}

static void store(void *row, int64_t d, sdpa_dtype t, double x) {
    const float f = (float)x;
    switch (t) {
    case SDPA_F16:
        ((uint16_t *)row)[d] = sdpa_f32_to_f16(f);
        break;
    case SDPA_BF16:
        ((uint16_t *)row)[d] = sdpa_f32_to_bf16(f);
        break;
    default: /* SDPA_F32 */
        ((float *)row)[d] = f;
        break;
    }
}

/* Element d of a row stored as t, as the products see it: exactly, or rounded to bf16
 * (nearest even) under SDPA_COMPUTE_BF16. */
static inline double operand(const char *row, int64_t d, sdpa_dtype t, int bf16) {
    const float x = sdpa_load_as_f32(row, d, t);
    return bf16 ? (double)sdpa_bf16_to_f32(sdpa_f32_to_bf16(x)) : (double)x;
}

/* The mask's element (b, h, i, j): 1 and the additive term in *add when key j is kept,
 * 0 when the mask hides it (a boolean 0 or an additive -inf). */
static int mask_keeps(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j,
                      double *add) {
    const sdpa_mask *m = &p->mask;
    *add = 0.0;
    if (m->kind == SDPA_MASK_NONE)
        return 1;
    const int64_t e = b * m->stride_b + h * m->stride_h + i * m->stride_q + j;
    if (m->kind == SDPA_MASK_BOOL)
        return ((const uint8_t *)m->data)[e] != 0;
    *add = (double)sdpa_load_as_f32(m->data, e, m->dtype);
    return *add != -INFINITY;
}

sdpa_status sdpa_reference(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                           const sdpa_tensor *v, const sdpa_tensor *o, float *lse) {
    sdpa_problem p;
    sdpa_status st = sdpa_validate(desc, q, k, v, o, lse, &p);
    if (st != SDPA_OK)
        return st;

    /* One allocation holds the row's output accumulator and query operands, its scores
     * (doubles), one K or V row as fp32 values and its scales, and the keep flags. The
     * scores start half a 4 KiB page past the accumulator's offset in a page: at the same
     * offset (the accumulator after Tkv scores, Tkv a multiple of 512) loads of the one
     * and stores of the other falsely wait on each other (4K aliasing), and the reference
     * ran 5-15% slower on AMD Zen 4 (docs/PERFORMANCE.md, "The seed row's per-call
     * costs"). Tkv <= 2^40 and Dk, Dv <= 2^16 (validated): the sum cannot overflow. */
    const size_t dmax = (size_t)(p.Dk > p.Dv ? p.Dk : p.Dv);
    const size_t head = ((size_t)(p.Dv + p.Dk) * sizeof(double) + 4095) / 4096 * 4096 + 2048;
    const size_t scratch =
        head + (size_t)p.Tkv * sizeof(double) + 2 * dmax * sizeof(float) + (size_t)p.Tkv;
    double *const acc = sdpa_alloc(scratch);
    if (!acc)
        return SDPA_ERR_OUT_OF_MEMORY;
    double *const qd = acc + p.Dv; /* the query row's operands */
    double *const score = (double *)(void *)((char *)acc + head);
    float *const row = (float *)(score + p.Tkv), *const rsc = row + dmax;
    char *const keep = (char *)(rsc + dmax);

    /* loop invariants the compiler cannot prove (p's fields could alias acc's stores) */
    const int bf16 = p.compute == SDPA_COMPUTE_BF16;
    const sdpa_dtype qt = p.qt;

    /* Under packed varlen the views hold one "batch entry" of all rows; rows no sequence
     * owns (beyond cu_seqlens_q[B]) are written like padding rows. */
    const int64_t view_batches = p.cu_q ? 1 : p.B;
    for (int64_t vb = 0; vb < view_batches; vb++)
        for (int64_t h = 0; h < p.Hq; h++)
            for (int64_t r = 0; r < p.Tq; r++) {
                /* which sequence owns view row r, and its row within that sequence */
                int64_t b = vb, i = r;
                sdpa_seq s = sdpa_sequence(&p, b);
                if (p.cu_q) {
                    for (b = 0; b < p.B && r >= p.cu_q[b + 1]; b++) {
                    }
                    if (b < p.B) {
                        s = sdpa_sequence(&p, b);
                        i = r - s.q0;
                    }
                }
                char *orow = (char *)row_ptr(p.o, p.ot, p.os, vb, h, r);
                float *lsei = p.lse ? p.lse + vb * p.lse_sb + h * p.lse_sh + r : NULL;
                if (b >= p.B || i >= s.tq) { /* a padding row: nothing to compute */
                    for (int64_t d = 0; d < p.Dv; d++)
                        store(orow, d, p.ot, 0.0);
                    if (lsei)
                        *lsei = -INFINITY;
                    continue;
                }

                const int64_t hk = h / p.group; /* the K/V head this query head reads */
                const char *qi = row_ptr(p.q, p.qt, p.qs, b, h, s.q0 + i);
                int64_t lo, hi;
                sdpa_row_range(&p, &s, i, &lo, &hi);

                for (int64_t d = 0; d < p.Dk; d++)
                    qd[d] = operand(qi, d, qt, bf16);

                /* scores of the visible keys, and their max (NaN never wins) */
                double mx = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    double add;
                    keep[j] = (char)mask_keeps(&p, b, h, i, j, &add);
                    if (!keep[j])
                        continue;
                    const char *kj = (const char *)kv_row(&p, 0, b, hk, &s, j, rsc, row);
                    double dot = 0.0;
                    if (bf16) /* two loops: the fp32 one stays as fast as it was */
                        for (int64_t d = 0; d < p.Dk; d++)
                            dot += qd[d] * operand(kj, d, SDPA_F32, 1);
                    else
                        for (int64_t d = 0; d < p.Dk; d++)
                            dot += qd[d] * operand(kj, d, SDPA_F32, 0);
                    double x = (double)p.scale * dot;
                    if (p.softcap > 0.0f)
                        x = (double)p.softcap * tanh(x / (double)p.softcap);
                    if (p.alibi)
                        x -= (double)p.alibi[h] * fabs((double)(i + s.off - j));
                    x += add;
                    score[j] = x;
                    if (x > mx)
                        mx = x;
                }
                const double sink = p.sinks ? (double)p.sinks[h] : -INFINITY;
                if (sink > mx)
                    mx = sink;

                /* softmax numerators and denominator; hidden keys are never touched */
                const double mu = (mx == -INFINITY) ? 0.0 : mx;
                double sum = p.sinks ? exp(sink - mu) : 0.0;
                for (int64_t j = lo; j < hi; j++)
                    if (keep[j]) {
                        score[j] = exp(score[j] - mu);
                        sum += score[j];
                    }

                if (sum == 0.0) { /* nothing visible, or every visible score -inf */
                    for (int64_t d = 0; d < p.Dv; d++)
                        store(orow, d, p.ot, 0.0);
                    if (lsei)
                        *lsei = -INFINITY;
                    continue;
                }

                /* weighted sum of the visible values */
                for (int64_t d = 0; d < p.Dv; d++)
                    acc[d] = 0.0;
                for (int64_t j = lo; j < hi; j++) {
                    if (!keep[j])
                        continue;
                    double wj = score[j];
                    if (p.dropout_p != 0.0f) { /* a dropped weight is 0 times V, as in
                                                  PyTorch's dropout(P) @ V */
                        uint32_t words[4];
                        sdpa_dropout_words(p.dropout_seed, b, h, i, j >> 2, words);
                        wj *= words[j & 3] >= p.dropout_threshold ? (double)p.dropout_scale : 0.0;
                    }
                    /* bf16 compute: P V multiplies the weight rounded to bf16 (the
                     * kernels round P at their running max, this at the final one) */
                    if (p.compute == SDPA_COMPUTE_BF16)
                        wj = (double)sdpa_bf16_to_f32(sdpa_f32_to_bf16((float)wj));
                    const char *vj = (const char *)kv_row(&p, 1, b, hk, &s, j, rsc, row);
                    if (bf16)
                        for (int64_t d = 0; d < p.Dv; d++)
                            acc[d] += wj * operand(vj, d, SDPA_F32, 1);
                    else
                        for (int64_t d = 0; d < p.Dv; d++)
                            acc[d] += wj * operand(vj, d, SDPA_F32, 0);
                }
                for (int64_t d = 0; d < p.Dv; d++)
                    store(orow, d, p.ot, acc[d] / sum);
                if (lsei)
                    *lsei = (float)(mu + log(sum));
            }

    sdpa_free(acc);
    if (desc->stats) {
        const sdpa_stats none = {.isa = SDPA_ISA_AUTO, .threads = 1,
                                 .scratch_bytes = (int64_t)scratch};
        *desc->stats = none;
    }
    return SDPA_OK;
}
