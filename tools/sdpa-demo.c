/*
 * sdpa-demo - one causal attention through the fused path and the naive reference:
 * prints the ISA, both times, the speedup and the largest error. A first smoke test for
 * a newcomer's machine, not a benchmark (the benchmark is `make bench` once it lands:
 * several repetitions, medians and the FMA peak live there).
 *
 *   sdpa-demo [T [D [H]]]      defaults: T = 512, D = 64, H = 8, batch 1, causal
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
    if (T < 1 || D < 1 || H < 1) {
        fprintf(stderr, "usage: sdpa-demo [T [D [H]]]\n");
        return 2;
    }
    const size_t n = (size_t)(H * T * D);
    float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
    float *o = malloc(n * sizeof *o), *r = malloc(n * sizeof *r);
    if (!q || !k || !v || !o || !r)
        return 1;
    unsigned s = 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u; /* LCG (Numerical Recipes); demo data only */
        q[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        k[i] = (float)((s * 7u) >> 8) / 16777216.0f - 0.5f;
        v[i] = (float)((s * 13u) >> 8) / 16777216.0f - 0.5f;
    }
    sdpa_desc d = {.batch = 1, .heads_q = H, .heads_kv = H, .len_q = T, .len_kv = T,
                   .dim_qk = D, .dim_v = D, .causal = SDPA_CAUSAL_BOTTOM_RIGHT};
    sdpa_tensor tq = sdpa_tensor_bhtd(q, SDPA_F32, H, T, D);
    sdpa_tensor tk = sdpa_tensor_bhtd(k, SDPA_F32, H, T, D);
    sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, H, T, D);
    sdpa_tensor to = sdpa_tensor_bhtd(o, SDPA_F32, H, T, D);
    sdpa_tensor tr = sdpa_tensor_bhtd(r, SDPA_F32, H, T, D);

    sdpa_status st = sdpa_forward(&d, &tq, &tk, &tv, &to, NULL); /* warm-up */
    double best = INFINITY;
    for (int rep = 0; rep < 5 && st == SDPA_OK; rep++) {
        const double t0 = now();
        st = sdpa_forward(&d, &tq, &tk, &tv, &to, NULL);
        const double t = now() - t0;
        best = t < best ? t : best;
    }
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa_forward: %s\n", sdpa_strerror(st));
        return 1;
    }
    const double t0 = now();
    st = sdpa_reference(&d, &tq, &tk, &tv, &tr, NULL);
    const double tref = now() - t0;
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa_reference: %s\n", sdpa_strerror(st));
        return 1;
    }
    double max_abs = 0;
    for (size_t i = 0; i < n; i++)
        max_abs = fmax(max_abs, fabs((double)o[i] - (double)r[i]));
    const double flops = 2.0 * (double)H * (double)T * (double)(T + 1) * (double)(2 * D) / 2.0;
    printf("libsdpa %s, isa %s: causal B=1 H=%lld T=%lld D=%lld\n", sdpa_version(),
           sdpa_isa_name(sdpa_get_isa()), (long long)H, (long long)T, (long long)D);
    printf("fused     %9.3f ms  %7.2f GFLOP/s (best of 5)\n", best * 1e3, flops / best * 1e-9);
    printf("reference %9.3f ms  %7.2f GFLOP/s\n", tref * 1e3, flops / tref * 1e-9);
    printf("speedup   %9.1fx   max |fused - reference| = %.3g\n", tref / best, max_abs);
    free(q);
    free(k);
    free(v);
    free(o);
    free(r);
    return max_abs <= 1e-4 ? 0 : 1;
}
