/*
 * schedule.h - how a plan's units spread over threads (schedule.c): the order sdpa.c
 * hands them out in, and a model of that schedule on many threads: the key blocks each
 * unit computes, derived from the plan without running a kernel, the work of every unit
 * and finishing unit, and a simulation of the dynamic schedule.
 *
 * sdpa.c calls the order; the model is for tools/sdpa-schedule and the tests' schedule
 * suite, which predict how a call scales to core counts no development host has. Not
 * public API (hidden from the shared library like the rest of src/).
 */
#ifndef SDPA_SCHEDULE_H
#define SDPA_SCHEDULE_H

#include <stdint.h>

#include "driver.h"

/* The order sdpa.c hands a plan's units out in: batch entries by their work, most first
 * (visible keys summed over their rows; ties in entry order), each entry's units in
 * their plan order, so the longest sequences of a batch of mixed lengths do not start
 * last and leave a tail. Within an entry the plan's order stands: (b, h)-major for the
 * cache, largest first within a head (plan.c). A permutation of whole entries only:
 * results are the same bits in any order. */
typedef struct sched_entry {
    int64_t work, b;
} sched_entry;

/* Writes the order into ord[0..B) (ord[i].b: the i-th entry handed out) and returns 1;
 * or returns 0, writing nothing, when the plan order is that order (one entry, or no
 * per-entry lengths). */
int schedule_order(const plan *pl, sched_entry *ord);

/* The unit handed out k-th under order ord (NULL: the plan order). Every entry has
 * units / B units, contiguous in the plan's numbering: (item, chunk) pairs, item-major;
 * a plan with chunk_major hands them out chunk-major instead (see plan.c). */
static inline int64_t schedule_unit(const plan *pl, const sched_entry *ord, int64_t k) {
    const int64_t per = pl->units / pl->p.B;
    int64_t b = k / per, r = k % per;
    if (ord)
        b = ord[b].b;
    if (pl->chunk_major) {
        const int64_t items = per / pl->nchunks;
        r = r % items * pl->nchunks + r / items;
    }
    return b * per + r;
}

/* The plan sdpa_forward makes for desc on table kt, with views of storage dtypes dt[4]
 * (q, k, v, o; contiguous [B, H, T, D], K and V [B, T, H, D] where tokens_major) whose
 * data are placeholders: planning reads the views' shapes, never their memory, so a
 * shape of any size plans without any. The plan must not run (its pointers are not
 * memory) and holds no allocation. The status of sdpa_validate. */
sdpa_status schedule_plan(const sdpa_desc *desc, const sdpa_dtype dt[4], int tokens_major,
                          const sdpa_kernels *kt, plan *pl);

/* The key blocks unit u of pl computes: what run_keys counts (counters.computed) for it,
 * from the plan's rows and key ranges alone (item_rows, which writes w's row arrays; w
 * is a worker's scratch of pl). Blocks an explicit mask hides entirely, which run_keys
 * skips after reading the mask, count as computed here: without an explicit mask the
 * count is exact, with one an upper bound. */
int64_t unit_blocks(const plan *pl, int64_t u, const scratch *w);

/* The fixed cost of a unit beyond its key blocks, in blocks: its Q gather and its partial
 * store or finalisation, and taking it from the schedule. Those rows' bytes are at most
 * 16/64 of one block's K and V bytes in a plan that reads K in place (decode: at most
 * QK_ROWS_MAX rows, blocks of 64 keys or more), and a few percent of a block's multiply-adds
 * in one that packs K (prefill: a block is Br x Bc x (Dk + Dv) of them), so a quarter
 * block bounds it in both (tools/sdpa-schedule --fixed shows how little it matters). */
#define SCHEDULE_FIXED 0.25

/* The modelled work of every unit, in the order sdpa.c hands them out (unit[k]: that of
 * unit schedule_unit(k)), and of every finishing unit (finish[f]), in key blocks: a
 * unit's blocks plus `fixed`; a finishing unit the partials it reads and the rows it
 * writes, as a share of one block's K and V bytes, plus `fixed`.
 * SDPA_ERR_OUT_OF_MEMORY (for a worker's scratch and the order) or SDPA_OK. */
sdpa_status schedule_work(const plan *pl, double fixed, double *unit, double *finish);

/* OpenMP's schedule(dynamic, 1) over n units of work w[0..n) on `threads` threads, as
 * sdpa.c runs a phase: unit k goes, in index order, to the thread that becomes free
 * first. Returns when the last thread finishes (0 for n = 0; -1 when out of memory). */
double schedule_makespan(const double *w, int64_t n, int threads);

/* One call's two phases (the units, a barrier, the finishing units) on `threads`
 * threads: the work, the simulated makespan, and a lower bound of any schedule's, summed
 * over the phases: the phase's work spread evenly, its largest unit, and for each k >= 1
 * the k + 1 smallest of its k threads + 1 largest units (one thread runs k + 1 of them).
 * SDPA_ERR_OUT_OF_MEMORY or SDPA_OK. */
typedef struct sched_result {
    double work, makespan, bound;
} sched_result;

sdpa_status schedule_simulate(const double *unit, int64_t units, const double *finish,
                              int64_t finish_units, int threads, sched_result *r);

#endif /* SDPA_SCHEDULE_H */
