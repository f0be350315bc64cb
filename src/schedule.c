/*
 * schedule.c - how a plan's units spread over threads. The order sdpa.c hands a team the
 * units in (schedule_order: whole batch entries, the most work first); and a model of
 * that schedule on many threads: the key blocks each unit computes, derived from the plan
 * (item_rows: the rows of an item and their key ranges) without running a kernel or
 * reading any data, the work of each unit and finishing unit, and a simulation of the
 * dynamic schedule. tools/sdpa-schedule prints the model for the bench shapes; the tests
 * check the derived blocks against the counters of real runs (so the model cannot drift
 * from run_keys) and the predicted efficiency.
 *
 * The order is the only part on a call's path, and it changes when a unit runs, never
 * what it computes. The plan (plan.c) and the thread count (sdpa.c) are decided
 * elsewhere, from the shape alone.
 *
 * The model. A unit's time is its key blocks plus a fixed cost; a finishing unit's is
 * the bytes it moves as a share of one block's K/V bytes, plus the same fixed cost. A
 * block counts one whatever its rows: a tail item's, or a causal diagonal block's band
 * of rows, counts as a full block, which overstates the small units (and so a schedule's
 * tail) a little.
 */
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

static int entry_cmp(const void *x, const void *y) {
    const sched_entry *a = x, *b = y;
    if (a->work != b->work)
        return a->work < b->work ? 1 : -1;
    return (a->b > b->b) - (a->b < b->b);
}

int schedule_order(const plan *pl, sched_entry *ord) {
    const sdpa_problem *p = &pl->p;
    if (p->B == 1 || !(p->q_lens || p->kv_lens || p->cu_q))
        return 0;
    for (int64_t b = 0; b < p->B; b++) {
        const sdpa_seq s = sdpa_sequence(p, b);
        int64_t keys = 0;
        for (int64_t i = 0; i < s.tq; i++) {
            int64_t lo, hi;
            sdpa_row_range(p, &s, i, &lo, &hi);
            keys += hi > lo ? hi - lo : 0;
        }
        ord[b] = (sched_entry){keys, b};
    }
    qsort(ord, (size_t)p->B, sizeof ord[0], entry_cmp);
    return 1;
}

sdpa_status schedule_plan(const sdpa_desc *desc, const sdpa_dtype dt[4], int tokens_major,
                          const sdpa_kernels *kt, plan *pl) {
    /* Inputs may overlap each other, outputs may not overlap inputs (validate.c): one
     * placeholder address for the three inputs, another 2^46 bytes above for the output
     * (64-bit targets; every extent of a plannable shape is far below that) */
    char *const in = (char *)((uintptr_t)1 << 46), *const out = in + ((uintptr_t)1 << 46);
    const sdpa_tensor q = sdpa_tensor_bhtd(in, dt[0], desc->heads_q, desc->len_q, desc->dim_qk),
                      k = (tokens_major ? sdpa_tensor_bthd : sdpa_tensor_bhtd)(
                          in, dt[1], desc->heads_kv, desc->len_kv, desc->dim_qk),
                      v = (tokens_major ? sdpa_tensor_bthd : sdpa_tensor_bhtd)(
                          in, dt[2], desc->heads_kv, desc->len_kv, desc->dim_v),
                      o = sdpa_tensor_bhtd(out, dt[3], desc->heads_q, desc->len_q, desc->dim_v);
    sdpa_problem p;
    const sdpa_status st = sdpa_validate(desc, &q, &k, &v, &o, NULL, &p);
    if (st == SDPA_OK)
        plan_init(pl, kt, &p, PLAN_FORWARD, NULL);
    return st;
}

int64_t unit_blocks(const plan *pl, int64_t u, const scratch *w) {
    rows it;
    const int64_t t = u / pl->nchunks, ch = u % pl->nchunks;
    item_rows(pl, w, t, &it);
    int64_t ja = it.ulo, jb = it.uhi; /* the unit's keys, as plan_run_unit cuts them */
    if (pl->chunk) {
        ja = max64(ja, ch * pl->chunk);
        jb = min64(jb, (ch + 1) * pl->chunk);
    }
    if (it.mvalid == 0 || ja >= jb)
        return 0;
    /* run_keys' loop: [ja, jb) cut at multiples of Bc, and a block skipped when no real
     * row sees a key of it (row_cut empty for every row; a block it runs as the plain
     * step is one every row sees in full) */
    int64_t blocks = 0;
    for (int64_t j0 = ja, j1; j0 < jb; j0 = j1) {
        j1 = min64((j0 / pl->bc + 1) * pl->bc, jb);
        for (int r = 0; r < it.mvalid; r++) {
            int a, e;
            row_cut(&it, w, r, j0, (int)(j1 - j0), &a, &e);
            if (a < e) {
                blocks++;
                break;
            }
        }
    }
    return blocks;
}

sdpa_status schedule_work(const plan *pl, double fixed, double *unit, double *finish) {
    const sdpa_problem *p = &pl->p;
    char *buf = sdpa_alloc(pl->scratch_bytes);
    sched_entry *ord = sdpa_alloc((size_t)p->B * sizeof(sched_entry));
    if (!buf || !ord) {
        sdpa_free(buf);
        sdpa_free(ord);
        return SDPA_ERR_OUT_OF_MEMORY;
    }
    const int ordered = schedule_order(pl, ord);
    scratch w;
    plan_scratch(pl, buf, &w);
    for (int64_t k = 0; k < pl->units; k++)
        unit[k] = (double)unit_blocks(pl, schedule_unit(pl, ordered ? ord : NULL, k), &w) + fixed;
    /* A finishing unit streams what it reads and writes, as decode streams K and V: its
     * bytes over those of one block's K and V rows (every KV head's, for an item that
     * holds them all: plan.hgroup). A merge reads its item's nchunks
     * fp32 partials of each real row and writes the row; the orphan rows' unit writes
     * zeros into the rows no sequence owns. */
    const double block_bytes = (double)pl->bc * (pl->hgroup ? (double)p->Hkv : 1.0) *
                               ((double)p->Dk * sdpa_kv_bits(p->kt) +
                                (double)p->Dv * sdpa_kv_bits(p->vt)) / 8.0;
    const double row_bytes = (double)p->Dv * (double)sdpa_dtype_size(p->ot);
    for (int64_t f = 0; f < pl->finish_units; f++) {
        double bytes;
        if (pl->chunk && f < pl->items * pl->merge_parts) { /* merge_item's rows */
            rows it;
            item_rows(pl, &w, f / pl->merge_parts, &it);
            int r0, r1;
            merge_band(pl, &it, (int)(f % pl->merge_parts), &r0, &r1);
            const int real = (r1 < it.mvalid ? r1 : it.mvalid) - r0; /* rows it merges */
            bytes = (double)(real > 0 ? real : 0) *
                    ((double)pl->nchunks * 4.0 * ((double)p->Dv + 1.0) + row_bytes);
        } else {
            bytes = (double)(p->Tq - p->cu_q[p->B]) * (double)p->Hq * row_bytes;
        }
        finish[f] = bytes / block_bytes + fixed;
    }
    sdpa_free(buf);
    sdpa_free(ord);
    return SDPA_OK;
}

/* Restore the min-heap order of heap[0..n) below node i. */
static void sift_down(double *heap, int n, int i) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && heap[c + 1] < heap[c])
            c++;
        if (heap[i] <= heap[c])
            return;
        const double x = heap[i];
        heap[i] = heap[c];
        heap[c] = x;
        i = c;
    }
}

double schedule_makespan(const double *w, int64_t n, int threads) {
    if (n <= 0)
        return 0.0;
    const int nt = threads < 1 ? 1 : (int64_t)threads < n ? threads : (int)n;
    /* a min-heap of the times the threads become free; the next unit goes to its root */
    double *heap = sdpa_alloc((size_t)nt * sizeof(double));
    if (!heap)
        return -1.0;
    for (int k = 0; k < nt; k++) /* every thread takes a unit at time 0 */
        heap[k] = w[k];
    for (int k = nt / 2 - 1; k >= 0; k--)
        sift_down(heap, nt, k);
    for (int64_t u = nt; u < n; u++) { /* the thread free first takes the next unit */
        heap[0] += w[u];
        sift_down(heap, nt, 0);
    }
    double end = 0.0;
    for (int k = 0; k < nt; k++)
        end = heap[k] > end ? heap[k] : end;
    sdpa_free(heap);
    return end;
}

static int desc_cmp(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a < b) - (a > b);
}

/* No schedule of the n units w on `threads` threads ends sooner: the work spread evenly,
 * and for each k >= 0 with k threads + 1 units or more, the k + 1 smallest of the
 * k threads + 1 largest units, since one thread runs k + 1 of those (k = 0: the largest
 * unit; k = 1: two of the threads + 1 largest). s: n + 1 doubles of scratch. */
static double phase_bound(const double *w, int64_t n, int threads, double *s) {
    if (n == 0)
        return 0.0;
    /* s[i]: the sum of the i largest units */
    s[0] = 0.0;
    memcpy(s + 1, w, (size_t)n * sizeof(double));
    qsort(s + 1, (size_t)n, sizeof(double), desc_cmp);
    for (int64_t i = 1; i <= n; i++)
        s[i] += s[i - 1];
    double bound = s[n] / threads;
    for (int64_t k = 0; k * threads + 1 <= n; k++) {
        const double b = s[k * threads + 1] - s[k * threads - k];
        bound = b > bound ? b : bound;
    }
    return bound;
}

sdpa_status schedule_simulate(const double *unit, int64_t units, const double *finish,
                              int64_t finish_units, int threads, sched_result *r) {
    const double m1 = schedule_makespan(unit, units, threads),
                 m2 = schedule_makespan(finish, finish_units, threads);
    double *s = sdpa_alloc((size_t)(units > finish_units ? units : finish_units) * sizeof(double) +
                           sizeof(double));
    if (m1 < 0.0 || m2 < 0.0 || !s) {
        sdpa_free(s);
        return SDPA_ERR_OUT_OF_MEMORY;
    }
    r->work = 0.0;
    for (int64_t k = 0; k < units; k++)
        r->work += unit[k];
    for (int64_t f = 0; f < finish_units; f++)
        r->work += finish[f];
    r->makespan = m1 + m2;
    r->bound = phase_bound(unit, units, threads, s) + phase_bound(finish, finish_units, threads, s);
    sdpa_free(s);
    return SDPA_OK;
}
