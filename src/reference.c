/*
 * reference.c - the naive reference: attention written the way the seeds' notebooks
 * write it, one query row at a time, in double precision.
 *
 * This is the oracle every test compares the fused path against and the baseline of
 * the benchmark, so it is written to be read, not to be fast: no tiling, no SIMD, no
 * threads, one row of Tkv scores materialised at a time. It shares only the input
 * validation and the visible-key rule (sdpa_row_end) with the fused path, never a
 * kernel, so a bug in the kernels cannot hide in both.
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

sdpa_status sdpa_reference(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                           const sdpa_tensor *v, const sdpa_tensor *o, float *lse) {
    sdpa_problem p;
    sdpa_status st = sdpa_validate(desc, q, k, v, o, lse, &p);
    if (st != SDPA_OK)
        return st;

    double *score = malloc((size_t)p.Tkv * sizeof(double));
    double *acc = malloc((size_t)p.Dv * sizeof(double));
    if (!score || !acc) {
        free(score);
        free(acc);
        return SDPA_ERR_OUT_OF_MEMORY;
    }

    for (int64_t b = 0; b < p.B; b++)
        for (int64_t h = 0; h < p.Hq; h++) {
            const int64_t hk = h / p.group; /* the K/V head this query head reads */
            const float *K = p.k + b * p.ks[0] + hk * p.ks[1];
            const float *V = p.v + b * p.vs[0] + hk * p.vs[1];
            for (int64_t i = 0; i < p.Tq; i++) {
                const float *qi = p.q + b * p.qs[0] + h * p.qs[1] + i * p.qs[2];
                const int64_t visible = sdpa_row_end(&p, i); /* keys 0 .. visible-1 */

                /* scores, and their max over the visible keys (NaN never wins) */
                double mx = -INFINITY;
                for (int64_t j = 0; j < visible; j++) {
                    const float *kj = K + j * p.ks[2];
                    double dot = 0.0;
                    for (int64_t d = 0; d < p.Dk; d++)
                        dot += (double)qi[d] * (double)kj[d];
                    score[j] = (double)p.scale * dot;
                    if (score[j] > mx)
                        mx = score[j];
                }

                /* softmax numerators and denominator; masked keys are never touched */
                const double mu = (mx == -INFINITY) ? 0.0 : mx;
                double sum = 0.0;
                for (int64_t j = 0; j < visible; j++) {
                    score[j] = exp(score[j] - mu);
                    sum += score[j];
                }

                float *oi = p.o + b * p.os[0] + h * p.os[1] + i * p.os[2];
                float *lsei = p.lse ? p.lse + (b * p.Hq + h) * p.Tq + i : NULL;
                if (sum == 0.0) { /* nothing visible, or every visible score -inf */
                    for (int64_t d = 0; d < p.Dv; d++)
                        oi[d] = 0.0f;
                    if (lsei)
                        *lsei = -INFINITY;
                    continue;
                }

                /* weighted sum of the visible values */
                for (int64_t d = 0; d < p.Dv; d++)
                    acc[d] = 0.0;
                for (int64_t j = 0; j < visible; j++) {
                    const float *vj = V + j * p.vs[2];
                    for (int64_t d = 0; d < p.Dv; d++)
                        acc[d] += score[j] * (double)vj[d];
                }
                for (int64_t d = 0; d < p.Dv; d++)
                    oi[d] = (float)(acc[d] / sum);
                if (lsei)
                    *lsei = (float)(mu + log(sum));
            }
        }

    free(score);
    free(acc);
    if (desc->stats) {
        const sdpa_stats none = {.isa = SDPA_ISA_AUTO, .threads = 1};
        *desc->stats = none;
    }
    return SDPA_OK;
}
