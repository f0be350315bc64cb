/*
 * sdpa.c - the entry points of the fused path: sdpa_forward and sdpa_attention_weights
 * validate, pick the kernel table, make the plan (plan.c) and run its units, on the
 * calling thread or on an OpenMP team. Nothing here computes tiles (tile.c) or decides
 * the split of the work (plan.c); it decides only how many threads run it.
 *
 * A call runs every unit of the plan (any thread, any order: a dynamic schedule) and
 * then every finishing unit (split-KV merges, rows no sequence owns); each unit runs
 * start to finish on one thread, so the results are the same bits for any thread count.
 * A team takes the units in schedule.c's order: a batch's longest sequences first.
 */
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "driver.h"
#include "schedule.h"

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

/* An upper bound of the flops (causal and window taken into account, explicit masks
 * not), for the serial/parallel decision only. */
static double work_flops(const plan *pl) {
    const sdpa_problem *p = &pl->p;
    double keys = (double)p->Tkv;
    if (p->window)
        keys = fmin(keys, (double)p->window_left + (double)p->window_right + 1.0);
    if (p->causal != SDPA_CAUSAL_NONE)
        keys = fmin(keys, 0.5 * (double)p->Tkv + 1.0);
    return 2.0 * (double)(p->Dk + p->Dv) * (double)pl->nbh * (double)pl->rows_per_bh * keys;
}

static int choose_threads(const plan *pl) {
    const sdpa_problem *p = &pl->p;
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

/* Every unit, then every finishing unit, on nt threads (scratch: nt x scratch_bytes);
 * a team hands the units out in order ord (schedule.c; NULL: the plan order). Returns
 * the number of threads that ran. */
static int run_plan(const plan *pl, int nt, char *buf, const sched_entry *ord) {
    int used = 1;
    if (nt == 1) {
        scratch w;
        plan_scratch(pl, buf, &w);
        /* one worker runs the units in order, so it knows the next one (plan_run_unit) */
        for (int64_t k = 0, u = pl->units ? schedule_unit(pl, ord, 0) : 0; k < pl->units; k++) {
            const int64_t next = k + 1 < pl->units ? schedule_unit(pl, ord, k + 1) : -1;
            plan_run_unit(pl, u, next, &w);
            u = next;
        }
        for (int64_t f = 0; f < pl->finish_units; f++)
            plan_finish_unit(pl, f, &w);
        return used;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        const int tid = omp_get_thread_num();
        if (tid == 0)
            used = omp_get_num_threads();
        scratch w;
        plan_scratch(pl, buf + (size_t)tid * pl->scratch_bytes, &w);
#pragma omp for schedule(dynamic, 1)
        for (int64_t k = 0; k < pl->units; k++)
            plan_run_unit(pl, schedule_unit(pl, ord, k), -1, &w);
#pragma omp for schedule(dynamic, 1)
        for (int64_t f = 0; f < pl->finish_units; f++)
            plan_finish_unit(pl, f, &w);
    }
#endif
    return used;
}

sdpa_status sdpa_forward_with(const sdpa_kernels *kt, const sdpa_problem *p,
                              sdpa_stats *stats) {
    plan pl;
    plan_init(&pl, kt, p, PLAN_FORWARD, NULL);
    const int nt = choose_threads(&pl);
    /* every allocation before the first output byte is written */
    if (plan_alloc(&pl) != SDPA_OK)
        return SDPA_ERR_OUT_OF_MEMORY;
    /* a team's order of the units after the workers' scratch (each a multiple of 64
     * bytes), in the same allocation */
    const size_t work_bytes = pl.scratch_bytes * (size_t)nt,
                 ord_bytes = nt > 1 ? (size_t)p->B * sizeof(sched_entry) : 0;
    char *buf = sdpa_alloc(work_bytes + ord_bytes);
    if (!buf) {
        plan_release(&pl);
        return SDPA_ERR_OUT_OF_MEMORY;
    }
    sched_entry *ord = ord_bytes ? (sched_entry *)(void *)(buf + work_bytes) : NULL;
    if (ord && !schedule_order(&pl, ord))
        ord = NULL;
    const int used = run_plan(&pl, nt, buf, ord);
    if (stats)
        plan_stats(&pl, used, work_bytes + ord_bytes, stats);
    sdpa_free(buf);
    plan_release(&pl);
    return SDPA_OK;
}

size_t sdpa_weights_scratch(const sdpa_kernels *kt, const sdpa_problem *p) {
    plan pl;
    plan_init(&pl, kt, p, PLAN_WEIGHTS, NULL);
    return pl.scratch_bytes * (size_t)choose_threads(&pl);
}

sdpa_status sdpa_weights_with(const sdpa_kernels *kt, const sdpa_problem *p, float *weights,
                              void *buf_in) {
    plan pl;
    plan_init(&pl, kt, p, PLAN_WEIGHTS, weights);
    const int nt = choose_threads(&pl);
    char *buf = buf_in ? buf_in : sdpa_alloc(pl.scratch_bytes * (size_t)nt);
    if (!buf)
        return SDPA_ERR_OUT_OF_MEMORY;
    const int64_t VB = p->cu_q ? 1 : p->B;
    memset(weights, 0, (size_t)(VB * p->Hq * p->Tq * p->Tkv) * sizeof(float));
    run_plan(&pl, nt, buf, NULL);
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
    const sdpa_kernels *kt = sdpa_dispatch_table((sdpa_isa)p.isa, p.compute);
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
    const sdpa_kernels *kt = sdpa_dispatch_table((sdpa_isa)p.isa, p.compute);
    if (!kt)
        return SDPA_ERR_UNSUPPORTED_ISA;
    return sdpa_forward_with(kt, &p, desc->stats);
}
