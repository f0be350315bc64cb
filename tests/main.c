/*
 * main.c - the test runner: runs every suite (the ISA-dependent ones once per ISA this
 * host can run), says which ISAs ran and which were skipped and why, and ends with
 * "N passed, N failed". Exit status 0 only when nothing failed.
 *
 *   sdpa-test [-v] [--quick] [--no-oracle] [--isa NAME[,NAME...]] [SUITE...]
 *
 * --no-oracle: th_run_case compares with the reference only, not also with the
 * independent oracle (harness.h); for memcheck and emulated runs (mk/dev.mk).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "suites.h"

int th_quick;

/* How often a suite runs: once; once per usable ISA whose own table has fp32 tiles (a
 * row that inherits them all, like avx512bf16 from avx512, would repeat its base's runs
 * bit for bit); once per usable ISA. */
enum { ONCE = 0, PER_F32_ISA = 1, PER_ISA = 2 };

typedef struct suite {
    const char *name;
    void (*fn)(void);
    int per_isa;
} suite;

static const suite suites[] = {
    {"api", suite_api, ONCE},
    {"seeds", suite_seeds, PER_F32_ISA},
    {"sweep", suite_sweep, PER_F32_ISA},
    {"layout", suite_layout, PER_F32_ISA},
    {"threads", suite_threads, PER_F32_ISA},
    {"skip", suite_skip, PER_F32_ISA},
    {"traps", suite_traps, PER_F32_ISA},
    {"broken", suite_broken, PER_F32_ISA},
    {"ukernel", suite_ukernel, PER_ISA},
    {"features", suite_features, PER_F32_ISA},
    {"bf16", suite_bf16, PER_ISA},
    {"kvcache", suite_kvcache, PER_ISA},
    {"layer", suite_layer, PER_F32_ISA},
    {"extremes", suite_extremes, PER_F32_ISA},
    {"fuzzcases", suite_fuzzcases, PER_ISA},
    {"alloc", suite_alloc, PER_F32_ISA},
    {"plan", suite_plan, PER_F32_ISA},
    {"schedule", suite_schedule, PER_F32_ISA},
    {"soak", suite_soak, ONCE},
};
enum { NSUITES = sizeof suites / sizeof suites[0] };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage(void) {
    fprintf(stderr, "usage: sdpa-test [-v] [--quick] [--no-oracle] [--isa NAME[,NAME...]] "
                    "[SUITE...]\nsuites:");
    for (int i = 0; i < NSUITES; i++)
        fprintf(stderr, " %s", suites[i].name);
    fprintf(stderr, "\n");
    return 2;
}

/* Whether name is one of the comma-separated names of list. */
static int listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len + (e != NULL);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *only_isa = NULL;
    int selected[NSUITES] = {0}, any_selected = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-v") == 0) {
            th_verbose = 1;
        } else if (strcmp(argv[a], "--quick") == 0) {
            th_quick = 1;
        } else if (strcmp(argv[a], "--no-oracle") == 0) {
            th_oracle_on = 0;
        } else if (strcmp(argv[a], "--isa") == 0 && a + 1 < argc) {
            only_isa = argv[++a];
        } else {
            int found = 0;
            for (int i = 0; i < NSUITES; i++)
                if (strcmp(argv[a], suites[i].name) == 0)
                    selected[i] = found = any_selected = 1;
            if (!found)
                return usage();
        }
    }

    /* Which ISAs to run the per-ISA suites on, and why the others are skipped. */
    sdpa_isa run[SDPA_ISA_COUNT_];
    int nrun = 0;
    printf("libsdpa %s test suite; default isa %s\n", sdpa_version(),
           sdpa_isa_name(sdpa_get_isa()));
    for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_; i++) {
        const sdpa_isa isa = (sdpa_isa)i;
        const char *why = NULL;
        if (!sdpa_isa_lookup(isa) || !sdpa_isa_lookup(isa)->kernels)
            why = "not built for this target";
        else if (!sdpa_isa_supported(isa))
            why = "built, but this CPU/OS cannot run it";
        else if (only_isa && !listed(only_isa, sdpa_isa_name(isa)))
            why = "not selected by --isa";
        if (why) {
            printf("isa %-7s skipped: %s\n", sdpa_isa_name(isa), why);
            continue;
        }
        run[nrun++] = isa;
        if (!(sdpa_isa_lookup(isa)->own & (1u << SDPA_COMPUTE_F32)))
            printf("isa %-7s runs the ukernel, bf16, kvcache and fuzzcases suites only: its "
                   "fp32 tiles are %s's\n",
                   sdpa_isa_name(isa), sdpa_isa_name(sdpa_isa_lookup(isa)->base));
    }
    if (only_isa && nrun == 0) {
        fprintf(stderr, "--isa %s: not usable here\n", only_isa);
        return 2;
    }

    const double t0 = now();
    for (int s = 0; s < NSUITES; s++) {
        if (any_selected && !selected[s])
            continue;
        const int reps = suites[s].per_isa ? nrun : 1;
        for (int r = 0; r < reps; r++) {
            th_isa = suites[s].per_isa ? run[r] : SDPA_ISA_AUTO;
            if (suites[s].per_isa == PER_F32_ISA &&
                !(sdpa_isa_lookup(th_isa)->own & (1u << SDPA_COMPUTE_F32)))
                continue;
            const int f0 = th_failed, p0 = th_passed;
            const double ts = now();
            suites[s].fn();
            printf("suite %-8s %-7s %5d passed, %d failed  (%.1f s)\n", suites[s].name,
                   suites[s].per_isa ? sdpa_isa_name(th_isa) : "-", th_passed - p0,
                   th_failed - f0, now() - ts);
            fflush(stdout);
        }
    }
    printf("isas run:");
    for (int r = 0; r < nrun; r++)
        printf(" %s", sdpa_isa_name(run[r]));
    printf("\nworst error against the reference over passing cases: max_abs %.3g, max_rel %.3g"
           " (%.1f s)\n",
           th_worst_abs, th_worst_rel, now() - t0);
    printf("%d passed, %d failed\n", th_passed, th_failed);
    return th_failed ? 1 : 0;
}
