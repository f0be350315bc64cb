/*
 * sdpa-demo - one causal attention through the fused path and the naive reference:
 * prints the ISA, both times, the speedup and the largest errors, judged by the tests'
 * tolerance rule (common/case.h). A first smoke test for a newcomer's machine, not a
 * benchmark (`make bench` is: repetitions, medians and the FMA peak live there).
 *
 *   sdpa-demo [T [D [H]]]      defaults: T = 512, D = 64, H = 8, batch 1, causal
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../common/case.h"
#include "sdpa.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const int64_t T = argc > 1 ? atoll(argv[1]) : 512;
    const int64_t D = argc > 2 ? atoll(argv[2]) : 64;
    const int64_t H = argc > 3 ? atoll(argv[3]) : 8;
    if (argc > 4 || T < 1 || D < 1 || H < 1) {
        fprintf(stderr, "usage: sdpa-demo [T [D [H]]]\n");
        return 2;
    }
    const sc_case c = {.B = 1, .Hq = H, .Hkv = H, .Tq = T, .Tkv = T, .Dk = D, .Dv = D,
                       .causal = SDPA_CAUSAL_BOTTOM_RIGHT, .guard = SC_GUARD_NONE, .seed = 1};
    sc_tensors f, r; /* the same inputs twice: fused into f.o, the reference into r.o */
    if (sc_tensors_make(&f, &c) != 0 || sc_tensors_make(&r, &c) != 0) {
        fprintf(stderr, "sdpa-demo: out of memory\n");
        return 1;
    }

    sdpa_status st = sdpa_forward(&f.desc, &f.q, &f.k, &f.v, &f.o, NULL); /* warm-up */
    double best = INFINITY;
    for (int rep = 0; rep < 5 && st == SDPA_OK; rep++) {
        const double t0 = now();
        st = sdpa_forward(&f.desc, &f.q, &f.k, &f.v, &f.o, NULL);
        const double t = now() - t0;
        best = t < best ? t : best;
    }
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa_forward: %s\n", sdpa_strerror(st));
        return 1;
    }
    const double t0 = now();
    st = sdpa_reference(&r.desc, &r.q, &r.k, &r.v, &r.o, NULL);
    const double tref = now() - t0;
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa_reference: %s\n", sdpa_strerror(st));
        return 1;
    }
    sc_error e = {0};
    sc_compare_view(&e, &f.o, &r.o, 1, H, T, D);
    /* causal: row i sees i + 1 keys, 2 D multiply-adds each (QK^T and P V) */
    const double flops = 2.0 * (double)H * (double)T * (double)(T + 1) * (double)(2 * D) / 2.0;
    printf("libsdpa %s, isa %s: causal B=1 H=%lld T=%lld D=%lld\n", sdpa_version(),
           sdpa_isa_name(sdpa_get_isa()), (long long)H, (long long)T, (long long)D);
    printf("fused     %9.3f ms  %7.2f GFLOP/s (best of 5)\n", best * 1e3, flops / best * 1e-9);
    printf("reference %9.3f ms  %7.2f GFLOP/s\n", tref * 1e3, flops / tref * 1e-9);
    printf("speedup   %9.1fx   max |fused - reference| = %.3g (relative %.3g), %lld of %lld "
           "outside |o - r| <= %g + %g |r|\n",
           tref / best, e.max_abs, e.max_rel, (long long)e.bad, (long long)e.checked,
           SC_TOL_ABS, SC_TOL_REL);
    sc_tensors_free(&f);
    sc_tensors_free(&r);
    return e.bad == 0 ? 0 : 1;
}
