/*
 * sdpa.c - the fused driver: plan the work, run it on OpenMP threads, merge split-KV
 * partials, finalise the rows. Within one unit of work it runs the FlashAttention-2 tile
 * loop over key blocks, applying the descriptor's masks and score modifiers to the few
 * blocks that need them.
 *
 * It is portable C compiled with no -m flags: the floating-point inner loops (packing,
 * QK^T, the online softmax, P V, exp) live in the kernel table (kernels/); this file
 * holds index arithmetic, masks and score modifiers (plain loops the compiler
 * vectorises with the baseline ISA; tanh through the table's exp), and per-row
 * finalisation. It does not choose the ISA (dispatch.c) and does not check inputs
 * (validate.c).
 *
 * Rows. A work item is up to Br rows of one (batch entry b, K/V head hk):
 *   - plain: Br consecutive query rows i of one query head h;
 *   - grouped (GQA with Tq <= GROUP_TQ_MAX, i.e. decode, speculative decoding, small
 *     chunked prefill): the g = Hq/Hkv heads sharing hk, row r = (i = r / g, h = hk g +
 *     r % g), so each K/V block is read once for all g heads.
 * Row r of sequence b sees keys [lo_r, hi_r) (sdpa_row_range: length, causal, window)
 * minus those an explicit mask hides. The item's key range is the union [ulo, uhi).
 *
 * The algorithm for one unit = (item, key range [ja, jb) within [ulo, uhi)):
 *
 *   m_r = -inf, l_r = 0, O_r = 0
 *   for key block [j0, j1) = [ja, jb) cut at multiples of Bc (at most Bc keys):
 *       skip it if an explicit mask hides all of it from every row
 *       S = scale Q K^T                                       qk_rows, or pack_k + qk
 *       S = cap tanh(S / cap)                                 softcap (if on)
 *       S -= slope_h |d(i_r) - j|                             ALiBi (if on)
 *       S += M[b, h, i, j]                                    additive mask (if any)
 *       S[r][j] = -inf where row r does not see key j        only in blocks crossing
 *                                                             a range edge or masked
 *       mx_r = max(m_r, max_j S_rj);  mu_r = (mx_r == -inf ? 0 : mx_r)
 *       P = exp(S - mu);  alpha_r = exp(m_r - mu_r)          softmax
 *       l_r = alpha_r l_r + sum_j P_rj;  m_r = mx_r
 *       P_rj = P_rj keep(b, h, i, j) / (1 - p)                dropout (if on; philox.h)
 *       O_r = alpha_r O_r + sum_j P_rj V_j                   pv (V read in place)
 *
 * A hidden key's P is exactly 0, but 0 * V is NaN when V is inf or NaN: in a block with
 * hidden keys the driver checks the block's V rows are finite and, if one is not, runs
 * P V per row over only the keys that row sees. Masking stays exact whatever V holds.
 *
 * Finalisation of row r from its units' partials (m_c, l_c, O_c), c in a fixed order,
 * with the sink logit s_h when sinks are on (else s_h = -inf):
 *
 *   M = max(max_c m_c, s_h)
 *   l = sum_c exp(m_c - M) l_c + exp(s_h - M);  O = sum_c exp(m_c - M) O_c
 *   o_r = O / l,  lse_r = M + log(l);   l == 0 (nothing visible): o_r = 0, lse_r = -inf
 *
 * Split-KV (flash-decoding). When the items are too few to feed many cores (decode:
 * Tq = 1 against a long cache), each item's keys are cut into chunks of a fixed number
 * of keys, the chunks run as separate units in parallel, and finalisation merges them.
 * The chunk size depends on the shape only, never on the thread count, so results are
 * the same bits for any number of threads.
 *
 * Scheduling: units are issued largest first (causal: the last query blocks, which see
 * the most keys) to a dynamic OpenMP schedule, so the threads finish together. Each unit
 * and each merge runs start to finish on one thread in a fixed order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../kernels/convert.h"
#include "internal.h"
#include "philox.h"

/* Below this many flops (2 (Dk + Dv) per visible score) a call runs on the calling
 * thread without entering a parallel region: waking an OpenMP team costs microseconds,
 * the whole runtime of a seed-sized attention. docs/PERFORMANCE.md ("Serial cut-off")
 * has the measured crossover; a build with -DSDPA_SERIAL_FLOPS_MAX=0 parallelises
 * everything, which is how it was measured. */
#ifdef SDPA_SERIAL_FLOPS_MAX
#define SERIAL_FLOPS_MAX SDPA_SERIAL_FLOPS_MAX
#else
#define SERIAL_FLOPS_MAX (1 << 22)
#endif

/* Grouped GQA rows when Tq is at most this (decode, speculative decoding, chunked
 * prefill with small chunks): beyond it a plain item already has enough rows to reuse
 * each packed K block. */
#define GROUP_TQ_MAX 16

/* Items of at most this many rows compute QK^T with qk_rows on K in place; larger ones
 * pack K once per block for qk (kernels/ukernel.h says why the costs cross). Measured on
 * the development machine (AVX-512, Dk = 128, 1 thread, qk_rows against pack + qk):
 * K/V from DRAM (Tkv 16384, 8 K/V heads), 16 rows 1.33x faster, 32 rows 1.10x, 48 and 64
 * rows even; K/V in cache (Tkv 2048, 1 head), 16 rows even, 32 rows 0.91x. */
#define QK_ROWS_MAX 16

/* Split-KV: considered when a call has fewer items than this (enough to keep 64 threads
 * busy without splitting), in chunks of at least this many keys (a multiple of every
 * table's Bc, so chunks cut no block), into about SPLIT_UNITS units in all (4 per thread
 * at 64 threads, for the dynamic schedule to balance; more only adds per-unit work: the
 * Q gather, the partial's store and merge; decode-long at 2 threads went from 1024 units
 * of 512 keys to 256 of 2048 and 5% faster), with at most SPLIT_PARTIAL_FLOATS floats of
 * partial results per call (the split is then coarser). */
#define SPLIT_ITEMS_MAX 64
#define SPLIT_CHUNK_MIN 512
#define SPLIT_UNITS 256
#define SPLIT_PARTIAL_FLOATS ((int64_t)1 << 23)

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static size_t round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static size_t esize(sdpa_dtype t) { return t == SDPA_F32 ? 4 : 2; }

/* ---- the plan ------------------------------------------------------------------ */

typedef struct plan {
    const sdpa_kernels *kt;
    const sdpa_problem *p;
    int br, bc;
    int grouped;          /* rows are (query row, head of the group) pairs */
    int64_t rows_per_bh;  /* rows of one (b, hk) when grouped, of one (b, h) when not */
    int64_t items_per_bh; /* ceil(rows_per_bh / Br) */
    int64_t nbh;          /* B * Hkv (grouped) or B * Hq */
    int64_t items;
    int mrows;            /* most rows an item has: min(Br, rows_per_bh) */
    int64_t chunk;        /* split-KV chunk in keys; 0 = no split */
    int64_t nchunks;      /* chunks per item when split, else 1 */
    int64_t units;        /* items * nchunks */
    int ldq, lds, ldo;
    int k_in_place;       /* QK^T by qk_rows on K in place, not pack_k + qk */
    int explicit_mask;    /* an explicit mask or a modifier makes every block need work
                             beyond qk/softmax/pv */
    size_t scratch_bytes; /* per thread */
} plan;

/* One item's rows: the (b, hk) it belongs to, and per row its head, its row within the
 * sequence and whether it is a real row (rows at and beyond Tq_b are padding). */
typedef struct rows {
    int64_t b, hk;
    sdpa_seq seq;
    int m;       /* rows of the item (real or padding) */
    int mvalid;  /* real rows: a prefix, since the row index i never decreases with r */
    int64_t ulo, uhi; /* union of the real rows' key ranges; ulo >= uhi when empty */
    int64_t ilo, ihi; /* intersection (the keys every real row sees structurally) */
} rows;

/* Per-thread scratch, carved from one allocation: every array on a 64-byte line, every
 * leading dimension a multiple of 16 floats (ukernel.h). */
typedef struct scratch {
    float *q, *kp, *s, *o;
    float *m, *l, *alpha, *tmp;
    int64_t *h, *i, *lo, *hi;
    unsigned char *hidden; /* Br x Bc: key hidden from the row, in a masked block */
} scratch;

static size_t scratch_layout(const plan *pl, char *base, scratch *w) {
    const sdpa_problem *p = pl->p;
    const size_t br = (size_t)pl->br, bc = (size_t)pl->bc;
    const size_t kp = pl->k_in_place ? 0
                      : round_up((size_t)pl->bc, (size_t)pl->kt->kp_align) * (size_t)p->Dk;
    size_t off = 0;
#define CARVE(field, type, count)                                            \
    do {                                                                     \
        if (w)                                                               \
            w->field = (type *)(void *)(base + off);                         \
        off += round_up((size_t)(count) * sizeof(type), 64);                 \
    } while (0)
    CARVE(q, float, br * (size_t)pl->ldq);
    CARVE(kp, float, kp);
    CARVE(s, float, br * (size_t)pl->lds);
    CARVE(o, float, br * (size_t)pl->ldo);
    CARVE(m, float, br);
    CARVE(l, float, br);
    CARVE(alpha, float, br);
    CARVE(tmp, float, (size_t)pl->lds);
    CARVE(h, int64_t, br);
    CARVE(i, int64_t, br);
    CARVE(lo, int64_t, br);
    CARVE(hi, int64_t, br);
    CARVE(hidden, unsigned char, br * bc);
#undef CARVE
    return off;
}

/* The rows of item t, written into w->h / w->i / w->lo / w->hi. */
static void item_rows(const plan *pl, const scratch *w, int64_t t, rows *it) {
    const sdpa_problem *p = pl->p;
    /* Items are numbered (b, h) major, so consecutive items, on one thread or on
     * several, read the same K and V and find them in cache (row-block major order cycled
     * through every head's K/V between reuses and ran 40% slower at prefill-causal, whose
     * 32 heads of K and V overflow the L3); within a head, largest first: under causal
     * masking the last row blocks see the most keys, and the dynamic schedule then ends
     * on small items. */
    const int64_t bh = t / pl->items_per_bh, qi = t % pl->items_per_bh;
    const int64_t qb = p->causal ? pl->items_per_bh - 1 - qi : qi;
    const int64_t r0 = qb * pl->br;
    it->m = (int)min64(pl->br, pl->rows_per_bh - r0);
    int64_t hbase;
    if (pl->grouped) {
        it->b = bh / p->Hkv;
        it->hk = bh % p->Hkv;
        hbase = it->hk * p->group;
    } else {
        it->b = bh / p->Hq;
        hbase = bh % p->Hq;
        it->hk = hbase / p->group;
    }
    it->seq = sdpa_sequence(p, it->b);
    it->mvalid = 0;
    it->ulo = INT64_MAX;
    it->uhi = INT64_MIN;
    it->ilo = INT64_MIN;
    it->ihi = INT64_MAX;
    for (int r = 0; r < it->m; r++) {
        const int64_t row = r0 + r;
        w->h[r] = pl->grouped ? hbase + row % p->group : hbase;
        w->i[r] = pl->grouped ? row / p->group : row;
        if (w->i[r] >= it->seq.tq)
            continue;
        it->mvalid = r + 1;
        sdpa_row_range(p, &it->seq, w->i[r], &w->lo[r], &w->hi[r]);
        if (w->lo[r] >= w->hi[r]) { /* sees nothing: widens no range, empties the
                                         intersection so every block masks it */
            w->lo[r] = w->hi[r] = 0;
            it->ilo = INT64_MAX;
            continue;
        }
        it->ulo = min64(it->ulo, w->lo[r]);
        it->uhi = max64(it->uhi, w->hi[r]);
        it->ilo = max64(it->ilo, w->lo[r]);
        it->ihi = min64(it->ihi, w->hi[r]);
    }
    if (it->ulo >= it->uhi)
        it->ulo = it->uhi = 0;
}

/* ---- masks and score modifiers ----------------------------------------------- */

/* Row r's mask entries for keys [j0, j0 + n), as a pointer and element type. */
static const char *mask_row(const sdpa_problem *p, const rows *it, const scratch *w, int r,
                            int64_t j0) {
    const sdpa_mask *mk = &p->mask;
    const size_t es = mk->kind == SDPA_MASK_BOOL ? 1 : esize(mk->dtype);
    const int64_t e = it->b * mk->stride_b + w->h[r] * mk->stride_h + w->i[r] * mk->stride_q + j0;
    return (const char *)mk->data + (size_t)e * es;
}

/* 1 if an explicit mask hides every key of [j0, j0 + n) from every real row. */
static int block_fully_hidden(const plan *pl, const rows *it, const scratch *w, int64_t j0,
                              int n) {
    const sdpa_problem *p = pl->p;
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
 * (basic-block SLP vectorisation, on at -O2; 2% of causal T = 512 as a scalar loop). */
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

/* Row r's structurally visible keys within the block [j0, j0 + n), as [*a, *e). */
static void row_cut(const rows *it, const scratch *w, int r, int64_t j0, int n, int *a, int *e) {
    *a = 0;
    *e = 0;
    if (r >= it->mvalid)
        return;
    *a = (int)min64(max64(w->lo[r] - j0, 0), n);
    *e = (int)min64(max64(w->hi[r] - j0, 0), n);
    if (*e < *a)
        *e = *a;
}

/* What prepare_block found in a block: keys outside some row's range (so P V must skip
 * them per row), keys an explicit mask hides inside the ranges. */
enum { MASKED_RANGE = 1, MASKED_EXPLICIT = 2 };

/* Apply the modifiers and masks to rows [ra, rb) of one block of scores, and fill
 * w->hidden for them. Returns the MASKED_* bits of what it set to -inf (0: nothing). */
static int prepare_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                         int64_t j0, int n) {
    const sdpa_problem *p = pl->p;
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
static void dropout_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                          int64_t j0, int n) {
    const sdpa_problem *p = pl->p;
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
 * bfloat16 0x7f80). */
static int v_block_finite(const char *v, int64_t ldv, sdpa_dtype dt, int n, int dv) {
    uint32_t acc = 0;
    for (int j = 0; j < n; j++) {
        const char *row = v + (size_t)(j * ldv) * esize(dt);
        if (dt == SDPA_F32) {
            for (int d = 0; d < dv; d++) {
                uint32_t u;
                memcpy(&u, row + 4 * (size_t)d, sizeof u);
                acc |= (u & 0x7f800000u) == 0x7f800000u;
            }
        } else {
            const uint16_t ex = dt == SDPA_F16 ? 0x7c00u : 0x7f80u;
            for (int d = 0; d < dv; d++) {
                uint16_t h;
                memcpy(&h, row + 2 * (size_t)d, sizeof h);
                acc |= (h & ex) == ex;
            }
        }
    }
    return acc == 0;
}

/* Rows per multi-row P V call in pv_ranges: 8 keeps the per-row remainders (at most 7
 * keys on a causal diagonal) small against a block of 64; 6 and 12 measured the same on
 * prefill-causal. */
#define RANGE_ROW_GROUP 8

/* Key j of a block of V rows starting at v (caller memory, stored as the problem's vt). */
static const char *v_row(const plan *pl, const char *v, int64_t j) {
    return v + (size_t)(j * pl->p->vs[2]) * esize(pl->p->vt);
}

/* O rows += (rescaled by alpha unless NULL) P rows x n V rows from v: the table's pv on
 * the scratch rows starting at S row p and O row o. */
static void pv_call(const plan *pl, int m, int n, const float *p, const char *v,
                    const float *alpha, float *o) {
    pl->kt->pv(m, n, (int)pl->p->Dv, p, pl->lds, v, pl->p->vs[2], pl->p->vt, alpha, o, pl->ldo);
}

/* P V of rows [ra, rb) of a block where each row sees one contiguous range [a_r, e_r) of
 * its keys (causal diagonal, window edges): exact without touching a hidden key's V.
 * Runs of rows that see the whole block take one plain pv call; the others go in groups
 * whose common range is one multi-row pv call (it applies alpha), and only each row's
 * extra keys beyond it run row by row. A row that sees none of the block is skipped: its
 * step is the identity. */
static void pv_ranges(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                      int64_t j0, int n, const char *v) {
    const int Dv = (int)pl->p->Dv;
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
            pv_call(pl, g1 - r, E - A, w->s + (size_t)r * (size_t)pl->lds + A, v_row(pl, v, A),
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
                pv_call(pl, 1, qe - qa, prow + qa, v_row(pl, v, qa), NULL, orow);
                continue;
            }
            if (qa < A) /* left of the common range */
                pv_call(pl, 1, A - qa, prow + qa, v_row(pl, v, qa), NULL, orow);
            if (qe > E) /* right of it */
                pv_call(pl, 1, qe - E, prow + E, v_row(pl, v, E), NULL, orow);
        }
        r = g1;
    }
}

/* P V over only the keys each row sees: the exact path for a masked block whose V holds
 * inf or NaN. */
static void pv_visible_only(const plan *pl, const scratch *w, int ra, int rb, int n,
                            const char *v) {
    const int Dv = (int)pl->p->Dv;
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
            pv_call(pl, 1, e - j, prow + j, v_row(pl, v, j), NULL, orow);
            j = e;
        }
    }
}

/* ---- one unit ------------------------------------------------------------------- */

typedef struct counters {
    int64_t computed, masked, total;
} counters;

/* Gather the item's Q rows into fp32 scratch (real rows only). */
static void gather_q(const plan *pl, const rows *it, const scratch *w) {
    const sdpa_problem *p = pl->p;
    const size_t es = esize(p->qt);
    for (int r = 0; r < it->mvalid; r++) {
        const char *src = (const char *)p->q +
                          (size_t)(it->b * p->qs[0] + w->h[r] * p->qs[1] +
                                   (it->seq.q0 + w->i[r]) * p->qs[2]) * es;
        float *dst = w->q + (size_t)r * (size_t)pl->ldq;
        if (p->qt == SDPA_F32)
            memcpy(dst, src, (size_t)p->Dk * sizeof(float));
        else
            for (int64_t d = 0; d < p->Dk; d++)
                dst[d] = sdpa_load_as_f32(src, d, p->qt);
    }
}

/* Ask for the first SDPA_PREFETCH_AHEAD bytes of rows (at most n of them, `bytes` long,
 * ld bytes apart) to be in cache soon: the start of a block of K or V, which the
 * kernels' own prefetching (rows ahead within their call) does not reach. Decode-long at
 * 1 thread, f16: 15 -> 17 GB/s. Prefetching whole next blocks instead (64 KiB at fp32,
 * in one burst) ran 20% slower than none at all once the kernels read rows in address
 * order: the burst fills the miss buffers ahead of the current block's loads.
 * __builtin_prefetch (gcc, clang) needs no ISA flag. */
static void prefetch_head(const char *base, int64_t ld, int n, size_t bytes) {
    const int nr = (int)min64(n, (int64_t)(SDPA_PREFETCH_AHEAD / bytes) + 1);
    for (int j = 0; j < nr; j++)
        for (size_t off = 0; off < bytes; off += 64) /* 64-byte lines on x86-64 and arm64 */
            __builtin_prefetch(base + (int64_t)j * ld + (int64_t)off, 0, 3);
}

/* S rows [ra, rb) = scale Q K^T for the n keys of K from kblock (caller memory): K
 * rows read in place by qk_rows for plans of few rows, else packed by pack_k for qk.
 * The choice is the plan's, never the block's, so the forward pass and the attention
 * weights compute every score the same way (both kernels give a row the same bits
 * whichever rows share the call). */
static void block_scores(const plan *pl, const scratch *w, const char *kblock, int n, int ra,
                         int rb) {
    const sdpa_problem *p = pl->p;
    const sdpa_kernels *kt = pl->kt;
    const float *q = w->q + (size_t)ra * (size_t)pl->ldq;
    float *s = w->s + (size_t)ra * (size_t)pl->lds;
    if (pl->k_in_place) {
        kt->qk_rows(rb - ra, n, (int)p->Dk, p->scale, q, pl->ldq, kblock, p->ks[2], p->kt, s,
                    pl->lds);
        return;
    }
    kt->pack_k(n, (int)p->Dk, kblock, p->ks[2], p->kt, w->kp);
    kt->qk(rb - ra, n, (int)p->Dk, p->scale, q, pl->ldq, w->kp, s, pl->lds);
}

/* Run keys [ja, jb) of item it; leaves m, l, O of its real rows in w. */
static void run_keys(const plan *pl, const rows *it, const scratch *w, int64_t ja, int64_t jb,
                     counters *c) {
    const sdpa_problem *p = pl->p;
    const sdpa_kernels *kt = pl->kt;
    const int m = it->mvalid, Dk = (int)p->Dk, Dv = (int)p->Dv;
    for (int r = 0; r < m; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->o, 0, (size_t)m * (size_t)pl->ldo * sizeof(float));
    if (m == 0 || ja >= jb)
        return;
    const size_t kes = esize(p->kt), ves = esize(p->vt);
    const char *kbase = (const char *)p->k +
                        (size_t)(it->b * p->ks[0] + it->hk * p->ks[1] + it->seq.kv0 * p->ks[2]) * kes;
    const char *vbase = (const char *)p->v +
                        (size_t)(it->b * p->vs[0] + it->hk * p->vs[1] + it->seq.kv0 * p->vs[2]) * ves;
    for (int64_t j0 = ja; j0 < jb;) {
        /* blocks end on multiples of Bc (so split chunks, multiples of Bc, cut none) */
        const int64_t j1 = min64((j0 / pl->bc + 1) * pl->bc, jb);
        const int n = (int)(j1 - j0);
        if (block_fully_hidden(pl, it, w, j0, n)) {
            j0 = j1;
            continue;
        }
        /* A block every row sees in full, with no explicit mask or score modifier, is the
         * plain FlashAttention step on all rows. Otherwise only the band of rows that see
         * some key of it runs: for a row that sees none the step is the identity
         * (P = exp(-inf) = 0, alpha = exp(0) = 1, or l = O = 0 still). */
        int ra = 0, rb = m;
        const int plain = j0 >= it->ilo && j1 <= it->ihi && p->mask.kind == SDPA_MASK_NONE &&
                          p->softcap == 0.0f && !p->alibi;
        if (!plain) {
            int a, e;
            while (ra < m && (row_cut(it, w, ra, j0, n, &a, &e), a == e))
                ra++;
            while (rb > ra && (row_cut(it, w, rb - 1, j0, n, &a, &e), a == e))
                rb--;
            if (ra == rb) { /* no row sees any key of the block */
                j0 = j1;
                continue;
            }
        }
        const int mb = rb - ra;
        float *s_ra = w->s + (size_t)ra * (size_t)pl->lds;
        c->computed++;
        const char *v = v_row(pl, vbase, j0);
        /* n > 1 only when the view has two rows or more, which bounds the row stride's
         * bytes (validate.c); a single row's stride is unbounded (INT64_MAX passes,
         * multiplied by 0) and would overflow here, so it is not used */
        prefetch_head(v, n > 1 ? p->vs[2] * (int64_t)ves : 0, n, (size_t)Dv * ves);
        block_scores(pl, w, kbase + (size_t)(j0 * p->ks[2]) * kes, n, ra, rb);
        const int masked = plain ? 0 : prepare_block(pl, it, w, ra, rb, j0, n);
        kt->softmax(mb, n, s_ra, pl->lds, w->m + ra, w->l + ra, w->alpha + ra);
        if (j1 < jb)
            prefetch_head(kbase + (size_t)(j1 * p->ks[2]) * kes, p->ks[2] * (int64_t)kes,
                          (int)min64(jb - j1, pl->bc), (size_t)Dk * kes);
        if (p->dropout_p != 0.0f)
            dropout_block(pl, it, w, ra, rb, j0, n);
        if (masked & MASKED_EXPLICIT) {
            if (v_block_finite(v, p->vs[2], p->vt, n, Dv))
                pv_call(pl, mb, n, s_ra, v, w->alpha + ra, w->o + (size_t)ra * (size_t)pl->ldo);
            else
                pv_visible_only(pl, w, ra, rb, n, v);
        } else if (masked) {
            pv_ranges(pl, it, w, ra, rb, j0, n, v);
        } else
            pv_call(pl, mb, n, s_ra, v, w->alpha + ra, w->o + (size_t)ra * (size_t)pl->ldo);
        c->masked += masked != 0;
        j0 = j1;
    }
}

/* Blocks the item's sequence has in all (for the computed/skipped counters). */
static int64_t item_blocks(const plan *pl, const rows *it) {
    return ceil_div(it->seq.tkv, pl->bc);
}

/* ---- finalisation --------------------------------------------------------------- */

/* One row's partial results: nc (m, l, O) triples, O rows ldo floats apart. */
typedef struct partials {
    int nc;
    const float *m, *l; /* m[c * stride], l[c * stride] */
    const float *o;     /* o + c * ostride */
    size_t stride, ostride;
} partials;

/* out[0 .. n) = acc[0 .. n) * f, four at a time with restrict so the compiler emits one
 * baseline-ISA vector op per group: this pass writes the caller's output, a cache miss
 * per line, and was 3% of prefill as a scalar loop. */
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
    const sdpa_problem *p = pl->p;
    const int Dv = (int)p->Dv;
    if (pt->nc == 1 && sink == -INFINITY && p->ot == SDPA_F32) {
        /* The common case, without the two expf calls below: M = m, weight exp(m - M) = 1
         * (or 0 with l = 0 when m = -inf), l = l_c. 2% of prefill at Dv = 64. */
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
        memset(dst, 0, (size_t)Dv * esize(p->ot));
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
    const sdpa_problem *p = pl->p;
    const int64_t row = it->seq.q0 + w->i[r];
    *lse = p->lse ? p->lse + it->b * p->lse_sb + w->h[r] * p->lse_sh + row : NULL;
    return (char *)p->o + (size_t)(it->b * p->os[0] + w->h[r] * p->os[1] + row * p->os[2]) *
                              esize(p->ot);
}

/* Padding rows of an item (plain and padded batches only: under packed varlen the rows
 * past a sequence's end belong to the next sequence). */
static void write_padding(const plan *pl, const rows *it, const scratch *w) {
    if (pl->p->cu_q)
        return;
    for (int r = it->mvalid; r < it->m; r++) {
        float *lse;
        void *dst = out_row(pl, it, w, r, &lse);
        memset(dst, 0, (size_t)pl->p->Dv * esize(pl->p->ot));
        if (lse)
            *lse = -INFINITY;
    }
}

/* Finalise the real rows of an item whose single partial is in the thread's scratch. */
static void finalize_item(const plan *pl, const rows *it, const scratch *w) {
    for (int r = 0; r < it->mvalid; r++) {
        const partials pt = {1, &w->m[r], &w->l[r], w->o + (size_t)r * (size_t)pl->ldo, 0, 0};
        float *lse;
        void *dst = out_row(pl, it, w, r, &lse);
        const float sink = pl->p->sinks ? pl->p->sinks[w->h[r]] : -INFINITY;
        finalize_row(pl, &pt, sink, w->tmp, dst, lse);
    }
    write_padding(pl, it, w);
}

/* ---- planning and threads ----------------------------------------------------- */

/* Floats of one split-KV partial: m and l of every row, then the O rows. */
static size_t partial_floats(const plan *pl) {
    return 2 * (size_t)pl->mrows + (size_t)pl->mrows * (size_t)pl->p->Dv;
}

static void plan_make(plan *pl, const sdpa_kernels *kt, const sdpa_problem *p, int allow_split) {
    memset(pl, 0, sizeof *pl);
    pl->kt = kt;
    pl->p = p;
    pl->br = kt->br;
    pl->bc = kt->bc;
    int64_t tq_max = p->Tq, tkv_max = p->Tkv;
    if (p->cu_q) {
        tq_max = tkv_max = 0;
        for (int64_t b = 0; b < p->B; b++) {
            tq_max = max64(tq_max, p->cu_q[b + 1] - p->cu_q[b]);
            tkv_max = max64(tkv_max, p->cu_kv[b + 1] - p->cu_kv[b]);
        }
    }
    pl->grouped = p->group > 1 && tq_max <= GROUP_TQ_MAX;
    pl->rows_per_bh = pl->grouped ? p->group * tq_max : tq_max;
    pl->items_per_bh = ceil_div(pl->rows_per_bh, pl->br);
    pl->nbh = p->B * (pl->grouped ? p->Hkv : p->Hq);
    pl->items = pl->nbh * pl->items_per_bh;
    pl->mrows = (int)min64(pl->br, pl->rows_per_bh);
    pl->ldq = (int)round_up((size_t)p->Dk, 16);
    pl->lds = (int)round_up(round_up((size_t)kt->bc, (size_t)kt->kp_align), 16);
    pl->ldo = (int)round_up((size_t)p->Dv, 16);
    pl->k_in_place = pl->mrows <= QK_ROWS_MAX;

    /* Split-KV, from the shape alone (never the thread count): chunks of at least
     * SPLIT_CHUNK_MIN keys, about SPLIT_UNITS units, as many as fit SPLIT_PARTIAL_FLOATS
     * of partials. */
    pl->nchunks = 1;
    if (allow_split && pl->items > 0 && pl->items < SPLIT_ITEMS_MAX &&
        tkv_max >= 2 * SPLIT_CHUNK_MIN) {
        int64_t nch = tkv_max / SPLIT_CHUNK_MIN;
        nch = min64(nch, ceil_div(SPLIT_UNITS, pl->items));
        const int64_t fit = SPLIT_PARTIAL_FLOATS / ((int64_t)partial_floats(pl) * pl->items);
        nch = min64(nch, fit);
        if (nch >= 2) {
            int64_t chunk = (int64_t)round_up((size_t)ceil_div(tkv_max, nch), SPLIT_CHUNK_MIN);
            chunk = (int64_t)round_up((size_t)chunk, (size_t)pl->bc);
            pl->chunk = chunk;
            pl->nchunks = ceil_div(tkv_max, chunk);
        }
    }
    pl->units = pl->items * pl->nchunks;
    pl->scratch_bytes = scratch_layout(pl, NULL, NULL) +
                        round_up((size_t)pl->nchunks * sizeof(float), 64);
}

/* An upper bound of the flops (causal and window taken into account, explicit masks
 * not), for the serial/parallel decision only. */
static double work_flops(const plan *pl) {
    const sdpa_problem *p = pl->p;
    double keys = (double)p->Tkv;
    if (p->window)
        keys = fmin(keys, (double)p->window_left + (double)p->window_right + 1.0);
    if (p->causal != SDPA_CAUSAL_NONE)
        keys = fmin(keys, 0.5 * (double)p->Tkv + 1.0);
    return 2.0 * (double)(p->Dk + p->Dv) * (double)p->Hq * (double)pl->rows_per_bh /
           (pl->grouped ? (double)p->group : 1.0) * (double)p->B * keys;
}

static int choose_threads(const plan *pl) {
    const sdpa_problem *p = pl->p;
    if (work_flops(pl) < (double)SERIAL_FLOPS_MAX || pl->units <= 1)
        return 1;
#ifdef _OPENMP
    /* Inside the caller's parallel region the cores are already the caller's: a nested
     * team would oversubscribe them, so run on the calling thread unless the caller
     * asked for threads explicitly (OpenMP's nesting settings then decide). */
    if (omp_in_parallel() && p->num_threads == 0)
        return 1;
    int nt = p->num_threads > 0 ? p->num_threads : omp_get_max_threads();
    if ((int64_t)nt > pl->units)
        nt = (int)pl->units;
    return nt < 1 ? 1 : nt;
#else
    (void)p;
    return 1;
#endif
}

/* ---- the two phases ------------------------------------------------------------- */

typedef struct run_ctx {
    const plan *pl;
    char *scratch;   /* threads x pl->scratch_bytes */
    float *part;     /* split-KV partials: units x partial_floats, or NULL */
} run_ctx;

static scratch thread_scratch(const run_ctx *x, int tid) {
    scratch w;
    scratch_layout(x->pl, x->scratch + (size_t)tid * x->pl->scratch_bytes, &w);
    return w;
}

static void run_unit(const run_ctx *x, const scratch *w, int64_t u, counters *c) {
    const plan *pl = x->pl;
    rows it;
    const int64_t t = u / pl->nchunks, ch = u % pl->nchunks;
    item_rows(pl, w, t, &it);
    if (ch == 0)
        c->total += item_blocks(pl, &it);
    int64_t ja = it.ulo, jb = it.uhi;
    if (pl->chunk) {
        ja = max64(ja, ch * pl->chunk);
        jb = min64(jb, (ch + 1) * pl->chunk);
    }
    gather_q(pl, &it, w);
    run_keys(pl, &it, w, ja, jb, c);
    if (!pl->chunk) {
        finalize_item(pl, &it, w);
        return;
    }
    float *dst = x->part + (size_t)u * partial_floats(pl);
    const size_t mr = (size_t)pl->mrows;
    for (int r = 0; r < it.mvalid; r++) {
        dst[r] = w->m[r];
        dst[mr + (size_t)r] = w->l[r];
        memcpy(dst + 2 * mr + (size_t)r * (size_t)pl->p->Dv, w->o + (size_t)r * (size_t)pl->ldo,
               (size_t)pl->p->Dv * sizeof(float));
    }
}

static void merge_item(const run_ctx *x, const scratch *w, int64_t t, float *wts) {
    const plan *pl = x->pl;
    rows it;
    item_rows(pl, w, t, &it);
    const size_t pf = partial_floats(pl), mr = (size_t)pl->mrows;
    const float *base = x->part + (size_t)(t * pl->nchunks) * pf;
    for (int r = 0; r < it.mvalid; r++) {
        const partials pt = {(int)pl->nchunks, base + r, base + mr + (size_t)r,
                             base + 2 * mr + (size_t)r * (size_t)pl->p->Dv, pf, pf};
        float *lse;
        void *dst = out_row(pl, &it, w, r, &lse);
        const float sink = pl->p->sinks ? pl->p->sinks[w->h[r]] : -INFINITY;
        finalize_row(pl, &pt, sink, wts, dst, lse);
    }
    write_padding(pl, &it, w);
}

/* Under packed varlen, view rows no sequence owns (at and beyond cu_seqlens_q[B]) are
 * written like padding rows, so the whole output is defined. */
static void write_orphan_rows(const sdpa_problem *p) {
    if (!p->cu_q)
        return;
    for (int64_t h = 0; h < p->Hq; h++)
        for (int64_t r = p->cu_q[p->B]; r < p->Tq; r++) {
            memset((char *)p->o + (size_t)(h * p->os[1] + r * p->os[2]) * esize(p->ot), 0,
                   (size_t)p->Dv * esize(p->ot));
            if (p->lse)
                p->lse[h * p->lse_sh + r] = -INFINITY;
        }
}

sdpa_status sdpa_forward_with(const sdpa_kernels *kt, const sdpa_problem *p,
                              sdpa_stats *stats) {
    plan pl;
    plan_make(&pl, kt, p, 1);
    const int nt = choose_threads(&pl);
    run_ctx x = {&pl, NULL, NULL};
    x.scratch = sdpa_alloc(pl.scratch_bytes * (size_t)nt);
    if (pl.chunk)
        x.part = sdpa_alloc((size_t)pl.units * partial_floats(&pl) * sizeof(float));
    if (!x.scratch || (pl.chunk && !x.part)) {
        sdpa_free(x.scratch);
        sdpa_free(x.part);
        return SDPA_ERR_OUT_OF_MEMORY;
    }
    const size_t wts_off = scratch_layout(&pl, NULL, NULL);

    counters tot = {0, 0, 0};
    int used = 1;
    if (nt == 1) {
        const scratch w = thread_scratch(&x, 0);
        for (int64_t u = 0; u < pl.units; u++)
            run_unit(&x, &w, u, &tot);
        if (pl.chunk)
            for (int64_t t = 0; t < pl.items; t++)
                merge_item(&x, &w, t, (float *)(void *)(x.scratch + wts_off));
    } else {
#ifdef _OPENMP
        int64_t computed = 0, masked = 0, total = 0;
#pragma omp parallel num_threads(nt) reduction(+ : computed, masked, total)
        {
            const int tid = omp_get_thread_num();
            if (tid == 0)
                used = omp_get_num_threads();
            const scratch w = thread_scratch(&x, tid);
            counters c = {0, 0, 0};
#pragma omp for schedule(dynamic, 1)
            for (int64_t u = 0; u < pl.units; u++)
                run_unit(&x, &w, u, &c);
            if (pl.chunk) {
                float *wts = (float *)(void *)(x.scratch + (size_t)tid * pl.scratch_bytes + wts_off);
#pragma omp for schedule(dynamic, 1)
                for (int64_t t = 0; t < pl.items; t++)
                    merge_item(&x, &w, t, wts);
            }
            computed += c.computed;
            masked += c.masked;
            total += c.total;
        }
        tot.computed = computed;
        tot.masked = masked;
        tot.total = total;
#endif
    }
    write_orphan_rows(p);
    sdpa_free(x.scratch);
    sdpa_free(x.part);

    if (stats) {
        stats->isa = kt->isa;
        stats->threads = used;
        stats->block_q = pl.br;
        stats->block_kv = pl.bc;
        stats->work_items = pl.items;
        stats->blocks_total = tot.total;
        stats->blocks_computed = tot.computed;
        stats->blocks_skipped = tot.total - tot.computed;
        stats->blocks_masked = tot.masked;
        stats->scratch_bytes =
            (int64_t)(pl.scratch_bytes * (size_t)nt +
                      (pl.chunk ? (size_t)pl.units * partial_floats(&pl) * sizeof(float) : 0));
    }
    return SDPA_OK;
}

/* ---- attention weights ------------------------------------------------------------ */

/* Weights of item t: the scores recomputed block by block exactly as run_keys computes
 * them, then exp(s - lse) (and the dropout factor) written into the rows' columns. */
static void weights_item(const plan *pl, const scratch *w, int64_t t, float *out) {
    const sdpa_problem *p = pl->p;
    const sdpa_kernels *kt = pl->kt;
    rows it;
    item_rows(pl, w, t, &it);
    const int m = it.mvalid;
    if (m == 0 || it.ulo >= it.uhi)
        return;
    gather_q(pl, &it, w);
    const size_t kes = esize(p->kt);
    const char *kbase = (const char *)p->k +
                        (size_t)(it.b * p->ks[0] + it.hk * p->ks[1] + it.seq.kv0 * p->ks[2]) * kes;
    const int64_t vb = p->cu_q ? 0 : it.b;
    for (int64_t j0 = it.ulo; j0 < it.uhi;) {
        const int64_t j1 = min64((j0 / pl->bc + 1) * pl->bc, it.uhi);
        const int n = (int)(j1 - j0);
        if (!block_fully_hidden(pl, &it, w, j0, n)) {
            block_scores(pl, w, kbase + (size_t)(j0 * p->ks[2]) * kes, n, 0, m);
            prepare_block(pl, &it, w, 0, m, j0, n);
            for (int r = 0; r < m; r++) {
                const float lse = p->lse[vb * p->lse_sb + w->h[r] * p->lse_sh + it.seq.q0 + w->i[r]];
                float *sr = w->s + (size_t)r * (size_t)pl->lds;
                if (lse == -INFINITY) { /* a row that sees nothing: all zero */
                    memset(sr, 0, (size_t)n * sizeof(float));
                    continue;
                }
                for (int j = 0; j < n; j++)
                    sr[j] -= lse;
                kt->vexp(n, sr, sr);
                /* a hidden key's weight is 0 whatever the row's lse: -inf - lse is NaN
                 * when lse is NaN (a row that sees a NaN key) */
                const unsigned char *hid = w->hidden + (size_t)r * (size_t)pl->bc;
                for (int j = 0; j < n; j++)
                    if (hid[j])
                        sr[j] = 0.0f;
            }
            if (p->dropout_p != 0.0f)
                dropout_block(pl, &it, w, 0, m, j0, n);
            for (int r = 0; r < m; r++) {
                float *dst = out + ((vb * p->Hq + w->h[r]) * p->Tq + it.seq.q0 + w->i[r]) * p->Tkv;
                memcpy(dst + j0, w->s + (size_t)r * (size_t)pl->lds, (size_t)n * sizeof(float));
            }
        }
        j0 = j1;
    }
}

size_t sdpa_weights_scratch(const sdpa_kernels *kt, const sdpa_problem *p) {
    plan pl;
    plan_make(&pl, kt, p, 0);
    return pl.scratch_bytes * (size_t)choose_threads(&pl);
}

sdpa_status sdpa_weights_with(const sdpa_kernels *kt, const sdpa_problem *p, float *weights,
                              void *buf_in) {
    plan pl;
    plan_make(&pl, kt, p, 0);
    const int nt = choose_threads(&pl);
    char *buf = buf_in ? buf_in : sdpa_alloc(pl.scratch_bytes * (size_t)nt);
    if (!buf)
        return SDPA_ERR_OUT_OF_MEMORY;
    const int64_t VB = p->cu_q ? 1 : p->B;
    memset(weights, 0, (size_t)(VB * p->Hq * p->Tq * p->Tkv) * sizeof(float));
    run_ctx x = {&pl, buf, NULL};
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        const scratch w = thread_scratch(&x, tid);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t t = 0; t < pl.items; t++)
            weights_item(&pl, &w, t, weights);
    }
    if (!buf_in)
        sdpa_free(buf);
    return SDPA_OK;
}

sdpa_status sdpa_attention_weights(const sdpa_desc *desc, const sdpa_tensor *q,
                                   const sdpa_tensor *k, const float *lse, float *weights) {
    sdpa_problem p;
    sdpa_status st = sdpa_validate_weights(desc, q, k, lse, weights, &p);
    if (st != SDPA_OK)
        return st;
    const sdpa_kernels *kt = sdpa_dispatch_table((sdpa_isa)p.isa);
    if (!kt)
        return SDPA_ERR_UNSUPPORTED_ISA;
    return sdpa_weights_with(kt, &p, weights, NULL);
}

sdpa_status sdpa_forward(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                         const sdpa_tensor *v, const sdpa_tensor *o, float *lse) {
    sdpa_problem p;
    sdpa_status st = sdpa_validate(desc, q, k, v, o, lse, &p);
    if (st != SDPA_OK)
        return st;
    const sdpa_kernels *kt = sdpa_dispatch_table((sdpa_isa)p.isa);
    if (!kt)
        return SDPA_ERR_UNSUPPORTED_ISA;
    return sdpa_forward_with(kt, &p, desc->stats);
}
