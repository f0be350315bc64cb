/*
 * sdpa-schedule - how the bench shapes would spread over many cores: for each shape, the
 * plan sdpa_forward makes (units, finishing units, key blocks), the largest unit's share
 * of the work, and the efficiency of sdpa.c's dynamic schedule at 8, 16, 64, 128 and 192
 * threads (work / (threads x makespan)) beside the bound of any schedule of the same
 * units (the largest unit, or the work spread evenly, per phase).
 *
 * It is a simulation, not a measurement: nothing is timed and no kernel runs. The plan is
 * the library's own (planned from the shape without data: src/schedule.c), the blocks of
 * each unit are derived from the plan as run_keys computes them (the tests check them
 * against the counters of real runs), and a unit's time is its blocks plus a fixed cost
 * (src/schedule.h, SCHEDULE_FIXED). It shows where a shape cannot fill the cores: units
 * too few, or one too large, or an order that leaves a long tail (docs/PERFORMANCE.md,
 * "Many cores, simulated"). Developer tool: it includes src/schedule.h and so the
 * driver's internals (src/driver.h), and links the static library.
 *
 *   sdpa-schedule [--isa NAME|all] [--shape NAME]... [--threads N,N,...] [--fixed BLOCKS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/shim.h"
#include "../src/schedule.h"

enum { MAX_COUNTS = 16 };

static int usage(void) {
    fprintf(stderr,
            "usage: sdpa-schedule [--isa NAME|all] [--shape NAME]... [--threads N,N,...]"
            " [--fixed BLOCKS]\n"
            "  --isa      the table whose Br and Bc plan the shapes (default: the one a call\n"
            "             gets here; all: every table built in, usable here or not)\n"
            "  --shape    a bench shape (default: every one)\n"
            "  --threads  thread counts (default 8,16,64,128,192)\n"
            "  --fixed    a unit's cost beyond its key blocks, in blocks (default %.2f)\n",
            SCHEDULE_FIXED);
    return 2;
}

/* One shape's row of the table; 0, or -1 (said on stderr) when it cannot plan. */
static int shape_row(const sb_shape *s, const sdpa_kernels *kt, const int *counts, int ncounts,
                     double fixed) {
    sdpa_desc d = sc_desc(&s->c);
    /* a quantized K/V needs scales to validate; the plan never reads them (nor pages:
     * a paged cache is planned as its contiguous shape) */
    static const float one = 1.0f;
    if (s->c.dt[1] >= SDPA_I8)
        d.k_scales = (sdpa_scales){.data = &one, .dtype = SDPA_F32};
    if (s->c.dt[2] >= SDPA_I8)
        d.v_scales = (sdpa_scales){.data = &one, .dtype = SDPA_F32};
    plan pl;
    const sdpa_status st = schedule_plan(&d, s->c.dt, s->c.layout == SC_BTHD, kt, &pl);
    if (st != SDPA_OK) {
        fprintf(stderr, "%s: %s\n", s->name, sdpa_strerror(st));
        return -1;
    }
    double *unit = malloc((size_t)(pl.units + pl.finish_units + 1) * sizeof(double));
    if (!unit || schedule_work(&pl, fixed, unit, unit + pl.units) != SDPA_OK) {
        fprintf(stderr, "%s: out of memory\n", s->name);
        free(unit);
        return -1;
    }
    double blocks = 0.0, work = 0.0, most = 0.0;
    for (int64_t u = 0; u < pl.units + pl.finish_units; u++) {
        blocks += u < pl.units ? unit[u] - fixed : 0.0;
        work += unit[u];
        most = unit[u] > most ? unit[u] : most;
    }
    printf("%-19s %6lld %6lld %8.0f %7.2f%%", s->name, (long long)pl.units,
           (long long)pl.finish_units, blocks, 100.0 * most / work);
    for (int i = 0; i < ncounts; i++) {
        sched_result r;
        if (schedule_simulate(unit, pl.units, unit + pl.units, pl.finish_units, counts[i], &r) !=
            SDPA_OK) {
            fprintf(stderr, "\n%s: out of memory\n", s->name);
            free(unit);
            return -1;
        }
        printf("  %5.1f (%5.1f)", 100.0 * r.work / (counts[i] * r.makespan),
               100.0 * r.work / (counts[i] * r.bound));
    }
    printf("\n");
    free(unit);
    return 0;
}

static int isa_table(sdpa_isa isa, const sb_shape *const *shapes, int nshapes,
                     const int *counts, int ncounts, double fixed) {
    const sdpa_isa_info *info = sdpa_isa_lookup(isa);
    const sdpa_kernels *kt = info ? info->kernels : NULL;
    if (!kt) {
        fprintf(stderr, "isa %s: not built in\n", sdpa_isa_name(isa));
        return -1;
    }
    printf("isa %s: Br %d, Bc %d; a unit's work is its key blocks + %.2f; each thread count:"
           " the dynamic schedule's efficiency %% (the bound of any schedule %%)\n",
           sdpa_isa_name(isa), kt->br, kt->bc, fixed);
    printf("%-19s %6s %6s %8s %8s", "shape", "units", "finish", "blocks", "max unit");
    for (int i = 0; i < ncounts; i++)
        printf("  %9d thr", counts[i]);
    printf("\n");
    int bad = 0;
    for (int i = 0; i < nshapes; i++)
        bad |= shape_row(shapes[i], kt, counts, ncounts, fixed);
    return bad;
}

int main(int argc, char **argv) {
    int counts[MAX_COUNTS] = {8, 16, 64, 128, 192}, ncounts = 5, all = 0;
    sdpa_isa isa = sdpa_get_isa();
    double fixed = SCHEDULE_FIXED;
    const sb_shape **shapes = malloc((size_t)(sb_suite_len + argc) * sizeof *shapes);
    int nshapes = 0;
    if (!shapes)
        return 1;
    for (int a = 1; a < argc; a += 2) { /* every option takes a value */
        const char *val = a + 1 < argc ? argv[a + 1] : NULL;
        if (strcmp(argv[a], "--isa") == 0 && val) {
            all = strcmp(val, "all") == 0;
            int found = all;
            for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_ && !found; i++)
                if (strcmp(val, sdpa_isa_name((sdpa_isa)i)) == 0)
                    isa = (sdpa_isa)i, found = 1;
            if (!found)
                return usage();
        } else if (strcmp(argv[a], "--shape") == 0 && val) {
            if (!(shapes[nshapes++] = sb_find_shape(val)))
                return usage();
        } else if (strcmp(argv[a], "--threads") == 0 && val) {
            ncounts = 0;
            for (const char *p = val; *p;) {
                char *end;
                const long n = strtol(p, &end, 10);
                if (end == p || n < 1 || n > 1 << 16 || ncounts == MAX_COUNTS ||
                    (*end && *end != ','))
                    return usage();
                counts[ncounts++] = (int)n;
                p = *end ? end + 1 : end;
            }
        } else if (strcmp(argv[a], "--fixed") == 0 && val) {
            char *end;
            fixed = strtod(val, &end);
            if (*end || !(fixed >= 0.0 && fixed < 1e6))
                return usage();
        } else {
            return usage();
        }
    }
    if (nshapes == 0)
        for (int i = 0; i < sb_suite_len; i++)
            shapes[nshapes++] = &sb_suite[i];
    int bad = 0;
    if (all) {
        int n, first = 1;
        const sdpa_isa_info *reg = sdpa_isa_registry(&n);
        for (int i = 0; i < n; i++) {
            if (!reg[i].kernels)
                continue;
            if (!first)
                printf("\n");
            first = 0;
            bad |= isa_table(reg[i].isa, shapes, nshapes, counts, ncounts, fixed);
        }
    } else {
        bad = isa_table(isa, shapes, nshapes, counts, ncounts, fixed);
    }
    free(shapes);
    return bad ? 1 : 0;
}
