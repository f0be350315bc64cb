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

int prepare_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                         int64_t j0, int n) {
    const sdpa_problem *p = &pl->p;
    const int explicit_mask = p->mask.kind != SDPA_MASK_NONE;
    /* w->hidden is read only by the exact P V of an explicit mask (pv_visible_only) and
     * the weights mode; forward passes without an explicit mask take each row's range
     * from row_cut, so the per-row flags (three memsets a row) are not written there */
    const int flags = explicit_mask || pl->mode != PLAN_FORWARD;
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
        if (flags) {
            memset(hid, 1, (size_t)a);
            memset(hid + a, 0, (size_t)(e - a));
            memset(hid + e, 1, (size_t)(n - e));
        }
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
 * the element's sign bit exactly when the field is all ones, and never past it, so one
 * 32-bit lane holds one binary32 or two 16-bit elements; OR-ing the sums is branch-free.
 * The lanes go four to a 16-byte vector (GCC vector extensions, the baseline ISA's SSE2
 * or NEON): gcc 12 at -O2 leaves the scalar loop scalar, about one element a cycle,
 * which made this check 1.5% of prefill-causal once every causal diagonal block ran it
 * (docs/PERFORMANCE.md, "The causal diagonal in one call per row group"). */
typedef uint32_t vf_u32x4 __attribute__((vector_size(16)));
int v_block_finite(const char *v, int64_t ldv, sdpa_dtype dt, int n, int dv) {
    size_t rowb = (size_t)dv * sdpa_dtype_size(dt);
    if ((size_t)ldv * sdpa_dtype_size(dt) == rowb) { /* rows back to back: one run */
        rowb *= (size_t)n;
        n = 1;
    }
    const uint32_t ex = dt == SDPA_F32 ? 0x7f800000u : dt == SDPA_F16 ? 0x7c007c00u : 0x7f807f80u;
    const uint32_t one = dt == SDPA_F32 ? 0x00800000u : dt == SDPA_F16 ? 0x04000400u : 0x00800080u;
    const uint32_t sign = dt == SDPA_F32 ? 0x80000000u : 0x80008000u;
    vf_u32x4 acc0 = {0, 0, 0, 0}, acc1 = {0, 0, 0, 0};
    for (int j = 0; j < n; j++) {
        const char *row = v + (size_t)(j * ldv) * sdpa_dtype_size(dt);
        size_t b = 0;
        for (; b + 32 <= rowb; b += 32) {
            vf_u32x4 x, y;
            memcpy(&x, row + b, sizeof x);
            memcpy(&y, row + b + 16, sizeof y);
            acc0 |= (x & ex) + one;
            acc1 |= (y & ex) + one;
        }
        if (b + 16 <= rowb) {
            vf_u32x4 x;
            memcpy(&x, row + b, sizeof x);
            acc0 |= (x & ex) + one;
            b += 16;
        }
        if (b < rowb) { /* the tail, zero-filled: a zero element is finite */
            vf_u32x4 x = {0, 0, 0, 0};
            memcpy(&x, row + b, rowb - b);
            acc1 |= (x & ex) + one;
        }
    }
    acc0 |= acc1;
    return !((acc0[0] | acc0[1] | acc0[2] | acc0[3]) & sign);
}

/* Rows per multi-row P V call in pv_ranges: 8 bounds a group's row-key pairs with hidden
 * keys (P = 0) at 8 x 7 / 2 = 28 on a causal diagonal, 224 in a diagonal block of 64
 * keys against the 2080 pairs it sees, and its per-row remainders on the exact path at
 * 7 keys; 6 and 12 measured the same (docs/PERFORMANCE.md, "RANGE_ROW_GROUP"). */
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
 * its keys (causal diagonal, window edges). Runs of rows that see the whole block take one
 * plain pv call; the others go in groups of up to RANGE_ROW_GROUP rows. When every element
 * of the block's V is finite a group is one pv call over the union of its rows' ranges: a
 * hidden key's P is exactly +0 (exp(-inf)), so it adds +0 x V = +-0 to O, which changes
 * nothing but a -0 of O into +0 (the explicit mask's full pass does the same), and a row
 * that sees none of the block gets alpha = 1 (its running max unchanged) or alpha = 0
 * with O = 0 (nothing seen yet). Otherwise, exact without touching a hidden key's V: each
 * group's common range is one multi-row pv call (it applies alpha), and only each row's
 * extra keys beyond it run row by row; a row that sees none of the block is skipped, its
 * step the identity. */
static void pv_ranges(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                      int64_t j0, int n, const vrows *v) {
    vrows t;
    const int Dv = (int)pl->p.Dv;
    int finite = -1; /* whether the block's V is finite: checked at the first partial row */
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
        if (finite < 0)
            finite = v_block_finite(v->v, v->ld, v->dt, n, Dv);
        /* a group of up to RANGE_ROW_GROUP partial rows, its common range [A, E) and the
         * union [U, X) of the ranges of the rows that see some key */
        int g1 = r, A = 0, E = n, U = n, X = 0, ga[RANGE_ROW_GROUP], ge[RANGE_ROW_GROUP];
        while (g1 < rb && g1 - r < RANGE_ROW_GROUP) {
            row_cut(it, w, g1, j0, n, &a, &e);
            if (a == 0 && e == n)
                break;
            ga[g1 - r] = a;
            ge[g1 - r] = e;
            A = a > A ? a : A;
            E = e < E ? e : E;
            if (a < e) {
                U = a < U ? a : U;
                X = e > X ? e : X;
            }
            g1++;
        }
        if (finite) {
            if (U < X)
                pv_call(pl, g1 - r, X - U, w->s + (size_t)r * (size_t)pl->lds + U,
                        v_from(v, U, &t), w->alpha + r, w->o + (size_t)r * (size_t)pl->ldo);
            r = g1;
            continue;
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
