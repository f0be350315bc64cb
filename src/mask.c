/*
 * mask.c - masks and score modifiers on a block of scores, and P V that stays exact
 * under them: softcap, ALiBi, additive and boolean masks, the range edges (causal
 * diagonal, window, lengths), dropout, and the P V paths that never let a hidden key's
 * value reach a result. Portable C; tanh uses the kernel table's exp.
 *
 * A hidden key's P is exactly 0, but 0 * V is NaN when V is inf or NaN: in a block with
 * hidden keys pv_block checks the block's V rows are finite and, if one is not, runs
 * P V per row over only the keys that row sees. Masking stays exact whatever V holds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/convert.h"
#include "driver.h"
#include "philox.h"

/* Row r's mask entries for keys [j0, j0 + n), as a pointer and element type. */
static const char *mask_row(const sdpa_problem *p, const rows *it, const scratch *w, int r,
                            int64_t j0) {
    const sdpa_mask *mk = &p->mask;
    const size_t es = mk->kind == SDPA_MASK_BOOL ? 1 : sdpa_dtype_size(mk->dtype);
    const int64_t e = it->b * mk->stride_b + w->h[r] * mk->stride_h + w->i[r] * mk->stride_q + j0;
    return (const char *)mk->data + (size_t)e * es;
}

int block_fully_hidden(const plan *pl, const rows *it, const scratch *w, int64_t j0,
                              int n) {
    const sdpa_problem *p = &pl->p;
    if (p->mask.kind == SDPA_MASK_NONE)
        return 0;
    for (int r = 0; r < it->mvalid; r++) {
        const int64_t a = max64(w->lo[r], j0), e = min64(w->hi[r], j0 + n);
        if (a >= e)
            continue;
        const char *mr = mask_row(p, it, w, r, j0);
        for (int64_t j = a - j0; j < e - j0; j++) {
            if (p->mask.kind == SDPA_MASK_BOOL ? mr[j] != 0
                                               : sdpa_load_as_f32(mr, j, p->mask.dtype) != -INFINITY)
                return 0;
        }
    }
    return 1;
}

/* s = cap tanh(s / cap) on n scores. tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|),
 * with the exp from the kernel table (vectorised); below |x| = 2^-4 that form cancels,
 * so a Taylor polynomial takes over (its first omitted term, 62/2835 x^9, is below
 * 2^-41 relative there). */
static void softcap_row(const sdpa_kernels *kt, float *s, int n, float cap, float *tmp) {
    const float inv = 1.0f / cap;
    for (int j = 0; j < n; j++)
        tmp[j] = -2.0f * fabsf(s[j] * inv);
    kt->vexp(n, tmp, tmp);
    for (int j = 0; j < n; j++) {
        const float x = s[j] * inv, ax = fabsf(x);
        float t;
        if (ax < 0.0625f) {
            const float x2 = x * x;
            t = x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
        } else {
            t = (1.0f - tmp[j]) / (1.0f + tmp[j]);
            t = x < 0 ? -t : t;
        }
        s[j] = isnan(x) ? x : cap * t;
    }
}

/* p[0 .. n) = -inf, four at a time so the compiler emits baseline-ISA vector stores
 * (basic-block SLP vectorisation, on at -O2; docs/PERFORMANCE.md, "Vectorised plain
 * loops"). */
static void fill_ninf(float *p, int n) {
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        p[j] = -INFINITY;
        p[j + 1] = -INFINITY;
        p[j + 2] = -INFINITY;
        p[j + 3] = -INFINITY;
    }
    for (; j < n; j++)
        p[j] = -INFINITY;
}

void row_cut(const rows *it, const scratch *w, int r, int64_t j0, int n, int *a, int *e) {
    *a = 0;
    *e = 0;
    if (r >= it->mvalid)
        return;
    *a = (int)min64(max64(w->lo[r] - j0, 0), n);
    *e = (int)min64(max64(w->hi[r] - j0, 0), n);
    if (*e < *a)
        *e = *a;
}

int prepare_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                         int64_t j0, int n) {
    const sdpa_problem *p = &pl->p;
    const int explicit_mask = p->mask.kind != SDPA_MASK_NONE;
    int masked = 0;
    for (int r = ra; r < rb; r++) {
        float *sr = w->s + (size_t)r * (size_t)pl->lds;
        unsigned char *hid = w->hidden + (size_t)r * (size_t)pl->bc;
        int a, e;
        row_cut(it, w, r, j0, n, &a, &e);
        if (p->softcap > 0.0f && e > a)
            softcap_row(pl->kt, sr + a, e - a, p->softcap, w->tmp);
        if (p->alibi && e > a) {
            const float slope = p->alibi[w->h[r]];
            const int64_t dj = w->i[r] + it->seq.off - j0; /* d(i) - j = dj - jj */
            for (int jj = a; jj < e; jj++)
                sr[jj] -= slope * (float)llabs(dj - jj);
        }
        fill_ninf(sr, a);
        fill_ninf(sr + e, n - e);
        memset(hid, 1, (size_t)a);
        memset(hid + a, 0, (size_t)(e - a));
        memset(hid + e, 1, (size_t)(n - e));
        if (a > 0 || e < n)
            masked |= MASKED_RANGE;
        if (explicit_mask && e > a) {
            const char *mr = mask_row(p, it, w, r, j0);
            if (p->mask.kind == SDPA_MASK_BOOL) {
                for (int jj = a; jj < e; jj++)
                    if (!mr[jj]) {
                        sr[jj] = -INFINITY;
                        hid[jj] = 1;
                        masked |= MASKED_EXPLICIT;
                    }
            } else {
                for (int jj = a; jj < e; jj++) {
                    const float add = sdpa_load_as_f32(mr, jj, p->mask.dtype);
                    if (add == -INFINITY) {
                        sr[jj] = -INFINITY;
                        hid[jj] = 1;
                        masked |= MASKED_EXPLICIT;
                    } else {
                        sr[jj] += add;
                    }
                }
            }
        }
    }
    return masked;
}

/* Dropout on one block of probabilities (after the softmax has summed them): each kept
 * weight scaled by 1 / (1 - p), each dropped one zeroed; the words come from the
 * counter-based stream of philox.h, four keys per call. */
void dropout_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                          int64_t j0, int n) {
    const sdpa_problem *p = &pl->p;
    for (int r = ra; r < rb; r++) {
        float *pr = w->s + (size_t)r * (size_t)pl->lds;
        uint32_t words[4];
        int64_t have = -1; /* j / 4 the words belong to */
        for (int jj = 0; jj < n; jj++) {
            const int64_t j = j0 + jj;
            if (j >> 2 != have) {
                have = j >> 2;
                sdpa_dropout_words(p->dropout_seed, it->b, w->h[r], w->i[r], have, words);
            }
            pr[jj] *= words[j & 3] >= p->dropout_threshold ? p->dropout_scale : 0.0f;
        }
    }
}

/* 1 if every element of the block's V rows (stored as dt) is finite, so 0 * V is 0: no
 * element has an all-ones exponent field (binary32 0x7f800000, binary16 0x7c00,
 * bfloat16 0x7f80). Adding the exponent's lowest bit to the masked exponent carries into
 * the sign bit exactly when the field is all ones; OR-ing those sums is branch-free, so
 * the compiler vectorises the loops with the baseline ISA (docs/PERFORMANCE.md, "bf16
 * compute": the check ran at 2.5% of prefill-causal's time as a compare per element). */
int v_block_finite(const char *v, int64_t ldv, sdpa_dtype dt, int n, int dv) {
    uint32_t acc32 = 0;
    uint16_t acc16 = 0;
    for (int j = 0; j < n; j++) {
        const char *row = v + (size_t)(j * ldv) * sdpa_dtype_size(dt);
        if (dt == SDPA_F32) {
            for (int d = 0; d < dv; d++) {
                uint32_t u;
                memcpy(&u, row + 4 * (size_t)d, sizeof u);
                acc32 |= (u & 0x7f800000u) + 0x00800000u;
            }
        } else {
            const uint16_t ex = dt == SDPA_F16 ? 0x7c00u : 0x7f80u;
            const uint16_t one = dt == SDPA_F16 ? 0x0400u : 0x0080u;
            for (int d = 0; d < dv; d++) {
                uint16_t h;
                memcpy(&h, row + 2 * (size_t)d, sizeof h);
                acc16 |= (uint16_t)((h & ex) + one);
            }
        }
    }
    return !(acc32 & 0x80000000u) && !(acc16 & 0x8000u);
}

/* Rows per multi-row P V call in pv_ranges: 8 keeps the per-row remainders (at most 7
 * keys on a causal diagonal) small against a block of 64 (docs/PERFORMANCE.md,
 * "RANGE_ROW_GROUP"). */
#define RANGE_ROW_GROUP 8

/* Key j of a block of V rows. */
static const vrows *v_from(const vrows *v, int64_t j, vrows *tmp) {
    *tmp = *v;
    tmp->v += (size_t)(j * v->ld) * sdpa_dtype_size(v->dt);
    return tmp;
}

/* O rows += (rescaled by alpha unless NULL) P rows x n V rows from v: the table's pv on
 * the scratch rows starting at S row p and O row o; the npf V rows after them continue
 * the stream (kernels/ukernel.h). */
static void pv_call_pf(const plan *pl, int m, int n, const float *p, const vrows *v,
                       const float *alpha, float *o, int npf) {
    pl->kt->pv(m, n, (int)pl->p.Dv, p, pl->lds, v->v, v->ld, v->dt, alpha, o, pl->ldo, npf,
               NULL);
}

/* pv_call_pf on rows that end a stream: a part of a block. */
static void pv_call(const plan *pl, int m, int n, const float *p, const vrows *v,
                    const float *alpha, float *o) {
    pv_call_pf(pl, m, n, p, v, alpha, o, 0);
}

/* P V of rows [ra, rb) of a block where each row sees one contiguous range [a_r, e_r) of
 * its keys (causal diagonal, window edges): exact without touching a hidden key's V.
 * Runs of rows that see the whole block take one plain pv call; the others go in groups
 * whose common range is one multi-row pv call (it applies alpha), and only each row's
 * extra keys beyond it run row by row. A row that sees none of the block is skipped: its
 * step is the identity. */
static void pv_ranges(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                      int64_t j0, int n, const vrows *v) {
    vrows t;
    const int Dv = (int)pl->p.Dv;
    int r = ra;
    while (r < rb) {
        int a, e;
        row_cut(it, w, r, j0, n, &a, &e);
        if (a == 0 && e == n) { /* a run of full rows */
            int r1 = r + 1;
            while (r1 < rb && (row_cut(it, w, r1, j0, n, &a, &e), a == 0 && e == n))
                r1++;
            pv_call(pl, r1 - r, n, w->s + (size_t)r * (size_t)pl->lds, v, w->alpha + r,
                    w->o + (size_t)r * (size_t)pl->ldo);
            r = r1;
            continue;
        }
        /* a group of up to RANGE_ROW_GROUP partial rows, and its common range [A, E) */
        int g1 = r, A = 0, E = n, ga[RANGE_ROW_GROUP], ge[RANGE_ROW_GROUP];
        while (g1 < rb && g1 - r < RANGE_ROW_GROUP) {
            row_cut(it, w, g1, j0, n, &a, &e);
            if (a == 0 && e == n)
                break;
            ga[g1 - r] = a;
            ge[g1 - r] = e;
            A = a > A ? a : A;
            E = e < E ? e : E;
            g1++;
        }
        const int common = A < E;
        if (common)
            pv_call(pl, g1 - r, E - A, w->s + (size_t)r * (size_t)pl->lds + A, v_from(v, A, &t),
                    w->alpha + r, w->o + (size_t)r * (size_t)pl->ldo);
        for (int q = r; q < g1; q++) {
            const int qa = ga[q - r], qe = ge[q - r];
            const float *prow = w->s + (size_t)q * (size_t)pl->lds;
            float *orow = w->o + (size_t)q * (size_t)pl->ldo;
            if (qa >= qe) /* sees none of the block: the identity step */
                continue;
            if (!common) { /* its whole range, after the rescale no common call did */
                for (int d = 0; d < Dv; d++)
                    orow[d] *= w->alpha[q];
                pv_call(pl, 1, qe - qa, prow + qa, v_from(v, qa, &t), NULL, orow);
                continue;
            }
            if (qa < A) /* left of the common range */
                pv_call(pl, 1, A - qa, prow + qa, v_from(v, qa, &t), NULL, orow);
            if (qe > E) /* right of it */
                pv_call(pl, 1, qe - E, prow + E, v_from(v, E, &t), NULL, orow);
        }
        r = g1;
    }
}

/* P V over only the keys each row sees: the exact path for a masked block whose V holds
 * inf or NaN. */
static void pv_visible_only(const plan *pl, const scratch *w, int ra, int rb, int n,
                            const vrows *v) {
    vrows t;
    const int Dv = (int)pl->p.Dv;
    for (int r = ra; r < rb; r++) {
        float *orow = w->o + (size_t)r * (size_t)pl->ldo;
        const float *prow = w->s + (size_t)r * (size_t)pl->lds;
        const unsigned char *hid = w->hidden + (size_t)r * (size_t)pl->bc;
        for (int d = 0; d < Dv; d++)
            orow[d] *= w->alpha[r];
        for (int j = 0; j < n;) {
            if (hid[j]) {
                j++;
                continue;
            }
            int e = j;
            while (e < n && !hid[e])
                e++;
            pv_call(pl, 1, e - j, prow + j, v_from(v, j, &t), NULL, orow);
            j = e;
        }
    }
}

int pv_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb, int64_t j0,
             int n, const vrows *v, int masked, int npf) {
    const sdpa_problem *p = &pl->p;
    const int mb = rb - ra;
    float *s_ra = w->s + (size_t)ra * (size_t)pl->lds;
    if (masked & MASKED_EXPLICIT) {
        if (v_block_finite(v->v, v->ld, v->dt, n, (int)p->Dv)) {
            pv_call_pf(pl, mb, n, s_ra, v, w->alpha + ra, w->o + (size_t)ra * (size_t)pl->ldo,
                       npf);
            return npf > 0;
        }
        pv_visible_only(pl, w, ra, rb, n, v);
        return 0;
    }
    if (masked) {
        pv_ranges(pl, it, w, ra, rb, j0, n, v);
        return 0;
    }
    pv_call_pf(pl, mb, n, s_ra, v, w->alpha + ra, w->o + (size_t)ra * (size_t)pl->ldo, npf);
    return npf > 0;
}
