/*
 * sdpa.c - the fused driver: validate, plan, run the work items in parallel, and within
 * each item the FlashAttention-2 tile loop over key blocks.
 *
 * It is portable C compiled with no -m flags: every floating-point inner loop lives in
 * the kernel table (kernels/), so this file holds only index arithmetic, masking of the
 * few blocks that need it, and per-row finalisation. It does not choose the ISA
 * (dispatch.c) and does not check inputs (validate.c).
 *
 * The algorithm, for one work item = (b, h, query block [i0, i0 + m)), m <= Br:
 *
 *   e(i)   = end of the keys row i may see: Tkv, or under bottom-right causal
 *            clamp(i + (Tkv - Tq) + 1, 0, Tkv)          (non-decreasing in i)
 *   m_r = -inf, l_r = 0, O_r = 0                          for each row r
 *   for key block [j0, j0 + n), n <= Bc, while j0 < e(i0 + m - 1):
 *       S = scale * Q_blk K_blk^T                         pack_k, qk
 *       if j0 + n > e(i0): S[r][j] = -inf for j0 + j >= e(i0 + r)   (block crosses the
 *                                                          diagonal: the only masked ones)
 *       mx_r = max(m_r, max_j S[r][j]);  mu_r = (mx_r == -inf ? 0 : mx_r)
 *       P = exp(S - mu);  alpha_r = exp(m_r - mu_r)        softmax
 *       l_r = alpha_r l_r + sum_j P[r][j];  m_r = mx_r
 *       O_r = alpha_r O_r + sum_{j visible to r} P[r][j] V[j]        pv
 *   O_r /= l_r, lse_r = mu_r + log(l_r);  rows with l_r = 0 (nothing visible) get
 *   O_r = 0 and lse_r = -inf.
 *
 *   Blocks with j0 >= e(i0 + m - 1) are skipped by that loop bound alone: causal
 *   skipping is index arithmetic, never a scan of a mask. In a masked block, rows that
 *   see none of its keys are left out of every step (for them the step is, in exact
 *   arithmetic, the identity: P = exp(-inf) = 0, alpha = 1 or 0 with l_r = O_r = 0),
 *   rows that see all of it take the unmasked path, and each row in between runs P V
 *   only over the keys it sees, so a masked key's V row (even NaN or inf) never meets
 *   its zero weight.
 *
 * Work items are independent and each is computed by one thread with a fixed sequence of
 * operations, so the result does not depend on the number of threads or the schedule.
 * Items are numbered head by head ((b, h) major), so consecutive items, on one thread or
 * on several, read the same K and V and find them in cache; within a head, causal items
 * are issued largest first (last query block first) with dynamic scheduling, so the
 * threads finish together on the last head's small items.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

/* Below this many flops (4 * visible scores * (Dk + Dv) / 2, roughly) a call runs on the
 * calling thread without entering a parallel region: waking an OpenMP team costs
 * microseconds, which is the whole runtime of a seed-sized attention. */
#define SERIAL_FLOPS_MAX (1 << 22)

/* Rows per P V call in the part of a block that crosses the diagonal: rows are grouped so
 * that the keys all rows of a group see run through pv together, and only the few extra
 * keys each row sees beyond the group's common end run row by row. 8 keeps the per-row
 * remainder (at most 7 keys on the causal diagonal) small against a block of 64; 6 and
 * 12 measured the same on prefill-causal. */
#define MASKED_ROW_GROUP 8

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static size_t round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }

/* Per-thread scratch, carved from one allocation. Every array starts on a 64-byte line
 * and every leading dimension is a multiple of 16 floats (ukernel.h). */
typedef struct scratch {
    float *q;      /* Br x ldq: the query block, gathered contiguous */
    float *kp;     /* packed key block */
    float *s;      /* Br x lds: scores, then probabilities */
    float *o;      /* Br x ldo: the unnormalised output accumulator */
    float *m, *l, *alpha;
    int64_t *end;  /* Br: visible-key end of each row within the current block */
} scratch;

typedef struct plan {
    const sdpa_kernels *kt;
    const sdpa_problem *p;
    int br, bc;
    int ldq, lds, ldo;
    int64_t nqb;  /* query blocks per (b, h) */
    int64_t nkb;  /* key blocks per (b, h) */
    int64_t items;
    size_t floats_per_thread;
} plan;

typedef struct counters {
    int64_t computed, masked;
} counters;

static void plan_make(plan *pl, const sdpa_kernels *kt, const sdpa_problem *p) {
    pl->kt = kt;
    pl->p = p;
    pl->br = kt->br;
    pl->bc = kt->bc;
    pl->ldq = (int)round_up((size_t)p->Dk, 16);
    pl->lds = (int)round_up(round_up((size_t)kt->bc, (size_t)kt->kp_align), 16);
    pl->ldo = (int)round_up((size_t)p->Dv, 16);
    pl->nqb = ceil_div(p->Tq, pl->br);
    pl->nkb = ceil_div(p->Tkv, pl->bc);
    pl->items = p->B * p->Hq * pl->nqb;
    const size_t br = (size_t)pl->br;
    const size_t kp = round_up(round_up((size_t)kt->bc, (size_t)kt->kp_align) * (size_t)p->Dk, 16);
    pl->floats_per_thread = br * (size_t)pl->ldq + kp + br * (size_t)pl->lds +
                            br * (size_t)pl->ldo + 3 * round_up(br, 16) +
                            2 * round_up(br, 16) /* end[]: int64 = 2 floats */;
}

static scratch scratch_carve(const plan *pl, float *base) {
    const size_t br = (size_t)pl->br, br16 = round_up(br, 16);
    const size_t kp = round_up(round_up((size_t)pl->bc, (size_t)pl->kt->kp_align) *
                                   (size_t)pl->p->Dk, 16);
    scratch w;
    w.q = base;
    w.kp = w.q + br * (size_t)pl->ldq;
    w.s = w.kp + kp;
    w.o = w.s + br * (size_t)pl->lds;
    w.m = w.o + br * (size_t)pl->ldo;
    w.l = w.m + br16;
    w.alpha = w.l + br16;
    w.end = (int64_t *)(void *)(w.alpha + br16);
    return w;
}

/* P V of rows [r0, r1), each over the keys it sees (end[r], at least 1, non-decreasing
 * in r), for the part of a block that crosses the diagonal. Rows go in groups: the keys
 * every row of a group sees run through one multi-row pv call, which also applies the
 * rescale, and only the few keys each row sees beyond them run row by row. */
static void pv_masked(const plan *pl, const scratch *w, int r0, int r1, const float *v,
                      int64_t ldv) {
    const sdpa_kernels *kt = pl->kt;
    const int Dv = (int)pl->p->Dv;
    for (int g0 = r0; g0 < r1; g0 += MASKED_ROW_GROUP) {
        const int g1 = g0 + MASKED_ROW_GROUP < r1 ? g0 + MASKED_ROW_GROUP : r1;
        const int64_t common = w->end[g0];
        kt->pv(g1 - g0, (int)common, Dv, w->s + (size_t)g0 * (size_t)pl->lds, pl->lds, v, ldv,
               w->alpha + g0, w->o + (size_t)g0 * (size_t)pl->ldo, pl->ldo);
        for (int r = g0 + 1; r < g1; r++)
            if (w->end[r] > common)
                kt->pv(1, (int)(w->end[r] - common), Dv,
                       w->s + (size_t)r * (size_t)pl->lds + common, pl->lds,
                       v + common * ldv, ldv, NULL, w->o + (size_t)r * (size_t)pl->ldo,
                       pl->ldo);
    }
}

/* p[0 .. n) = -inf, four at a time for the same SLP vectorisation as scale_row: the
 * invisible scores of a diagonal block's rows (2% of causal T = 512 as a scalar loop). */
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

/* out[0 .. n) = acc[0 .. n) * f. Four at a time with restrict, so that the compiler
 * (basic-block SLP vectorisation, on at -O2) emits one baseline-ISA vector op per group:
 * this pass writes the caller's output, a cache miss per line, and was 3% of prefill as
 * a scalar loop. */
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

static void run_item(const plan *pl, const scratch *w, int64_t item, counters *c) {
    const sdpa_problem *p = pl->p;
    const sdpa_kernels *kt = pl->kt;
    const int64_t bh = item / pl->nqb, qi = item % pl->nqb;
    const int64_t qb = p->causal ? pl->nqb - 1 - qi : qi;
    const int64_t b = bh / p->Hq, h = bh % p->Hq, hk = h / p->group;
    const int64_t i0 = qb * pl->br;
    const int m = (int)(p->Tq - i0 < pl->br ? p->Tq - i0 : pl->br);
    const int Dk = (int)p->Dk, Dv = (int)p->Dv;

    const float *qrow = p->q + b * p->qs[0] + h * p->qs[1] + i0 * p->qs[2];
    for (int r = 0; r < m; r++)
        memcpy(w->q + (size_t)r * (size_t)pl->ldq, qrow + r * p->qs[2], (size_t)Dk * sizeof(float));
    const float *kbase = p->k + b * p->ks[0] + hk * p->ks[1];
    const float *vbase = p->v + b * p->vs[0] + hk * p->vs[1];

    for (int r = 0; r < m; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->o, 0, (size_t)m * (size_t)pl->ldo * sizeof(float));

    const int64_t end_first = sdpa_row_end(p, i0);
    const int64_t end_last = sdpa_row_end(p, i0 + m - 1);
    const int64_t nkb = ceil_div(end_last, pl->bc);
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t j0 = kb * pl->bc;
        const int n = (int)(p->Tkv - j0 < pl->bc ? p->Tkv - j0 : pl->bc);
        const float *vblk = vbase + j0 * p->vs[2];
        kt->pack_k(n, Dk, kbase + j0 * p->ks[2], p->ks[2], SDPA_F32, w->kp);
        if (j0 + n <= end_first) { /* every row sees the whole block */
            kt->qk(m, n, Dk, p->scale, w->q, pl->ldq, w->kp, w->s, pl->lds);
            kt->softmax(m, n, w->s, pl->lds, w->m, w->l, w->alpha);
            kt->pv(m, n, Dv, w->s, pl->lds, vblk, p->vs[2], w->alpha, w->o, pl->ldo);
            continue;
        }
        /* The block crosses the diagonal. e(i) is non-decreasing, so rows [0, lo) see
         * none of it, rows [lo, full) part of it and rows [full, m) all of it. Rows
         * below lo are left alone: for them the step would be exp(-inf) = 0 weights and
         * alpha = exp(m - m) = 1 (or l = O = 0 still), the identity. */
        int lo = m, full = m;
        for (int r = m - 1; r >= 0; r--) {
            int64_t e = sdpa_row_end(p, i0 + r) - j0;
            e = e < 0 ? 0 : (e > n ? n : e);
            w->end[r] = e;
            if (e > 0)
                lo = r;
            if (e == n)
                full = r;
        }
        const int mv = m - lo;
        float *s_lo = w->s + (size_t)lo * (size_t)pl->lds;
        kt->qk(mv, n, Dk, p->scale, w->q + (size_t)lo * (size_t)pl->ldq, pl->ldq, w->kp, s_lo,
               pl->lds);
        for (int r = lo; r < full; r++)
            fill_ninf(w->s + (size_t)r * (size_t)pl->lds + w->end[r], n - (int)w->end[r]);
        kt->softmax(mv, n, s_lo, pl->lds, w->m + lo, w->l + lo, w->alpha + lo);
        if (full < m)
            kt->pv(m - full, n, Dv, w->s + (size_t)full * (size_t)pl->lds, pl->lds, vblk,
                   p->vs[2], w->alpha + full, w->o + (size_t)full * (size_t)pl->ldo, pl->ldo);
        pv_masked(pl, w, lo, full, vblk, p->vs[2]);
        c->masked++;
    }
    c->computed += nkb;

    float *obase = p->o + b * p->os[0] + h * p->os[1] + i0 * p->os[2];
    float *lse = p->lse ? p->lse + (b * p->Hq + h) * p->Tq + i0 : NULL;
    for (int r = 0; r < m; r++) {
        float *out = obase + r * p->os[2];
        const float l = w->l[r];
        if (l == 0.0f) { /* no visible key (or all scores -inf): zeros, lse = -inf */
            memset(out, 0, (size_t)Dv * sizeof(float));
            if (lse)
                lse[r] = -INFINITY;
            continue;
        }
        scale_row(out, w->o + (size_t)r * (size_t)pl->ldo, 1.0f / l, Dv);
        if (lse) {
            const float mu = w->m[r] == -INFINITY ? 0.0f : w->m[r];
            lse[r] = mu + logf(l);
        }
    }
}

/* Visible scores of the whole problem, for the serial/parallel decision. Under
 * bottom-right causal e(i) = max(0, i + off + 1), off = Tkv - Tq (it reaches Tkv only
 * at the last row), an arithmetic series from the first row that sees a key. */
static double visible_scores(const sdpa_problem *p) {
    double per_head;
    if (p->causal == SDPA_CAUSAL_NONE) {
        per_head = (double)p->Tq * (double)p->Tkv;
    } else {
        const int64_t off = p->Tkv - p->Tq;
        const int64_t first = off < 0 ? -off : 0; /* first row with e(i) > 0 */
        const double rows = (double)(p->Tq - first);
        per_head = rows * ((double)(first + off + 1) + (double)p->Tkv) / 2.0;
    }
    return per_head * (double)p->B * (double)p->Hq;
}

static int choose_threads(const plan *pl) {
    const sdpa_problem *p = pl->p;
    if (2.0 * visible_scores(p) * (double)(p->Dk + p->Dv) < (double)SERIAL_FLOPS_MAX)
        return 1;
#ifdef _OPENMP
    /* Inside the caller's parallel region the cores are already the caller's: running a
     * nested team would oversubscribe them. */
    if (omp_in_parallel())
        return 1;
    int nt = p->num_threads > 0 ? p->num_threads : omp_get_max_threads();
    if ((int64_t)nt > pl->items)
        nt = (int)pl->items;
    return nt < 1 ? 1 : nt;
#else
    return 1;
#endif
}

sdpa_status sdpa_forward_with(const sdpa_kernels *kt, const sdpa_problem *p,
                              sdpa_stats *stats) {
    plan pl;
    plan_make(&pl, kt, p);
    const int nt = choose_threads(&pl);
    const size_t bytes_per_thread = round_up(pl.floats_per_thread * sizeof(float), 64);
    float *buf = aligned_alloc(64, bytes_per_thread * (size_t)nt);
    if (!buf)
        return SDPA_ERR_OUT_OF_MEMORY;

    int64_t computed = 0, masked = 0;
    int used = 1;
    if (nt == 1) {
        const scratch w = scratch_carve(&pl, buf);
        counters c = {0, 0};
        for (int64_t it = 0; it < pl.items; it++)
            run_item(&pl, &w, it, &c);
        computed = c.computed;
        masked = c.masked;
    } else {
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : computed, masked)
        {
            const int tid = omp_get_thread_num();
            if (tid == 0)
                used = omp_get_num_threads();
            const scratch w =
                scratch_carve(&pl, (float *)(void *)((char *)buf + (size_t)tid * bytes_per_thread));
            counters c = {0, 0};
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < pl.items; it++)
                run_item(&pl, &w, it, &c);
            computed += c.computed;
            masked += c.masked;
        }
#endif
    }
    free(buf);

    if (stats) {
        stats->isa = kt->isa;
        stats->threads = used;
        stats->block_q = pl.br;
        stats->block_kv = pl.bc;
        stats->work_items = pl.items;
        stats->blocks_total = pl.items * pl.nkb;
        stats->blocks_computed = computed;
        stats->blocks_skipped = pl.items * pl.nkb - computed;
        stats->blocks_masked = masked;
    }
    return SDPA_OK;
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
