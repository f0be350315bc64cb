/*
 * peak.h - the machine's fp32 multiply-add peak, measured in the benchmark's own process
 * by small register-only loops, one file per ISA compiled with that ISA's flags
 * (peak_<isa>.c). The "% of peak" of every benchmark row divides by these figures.
 *
 * It measures arithmetic throughput only (no memory traffic), and it is not part of
 * libsdpa: the library never runs these loops.
 */
#ifndef SDPA_BENCH_PEAK_H
#define SDPA_BENCH_PEAK_H

#include <stdint.h>

#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A peak loop: iters rounds of multiply-adds on independent register accumulators.
 * Returns the flops performed (2 per multiply-add per lane) and stores a value derived
 * from every accumulator in *sink, so the compiler cannot drop the work. */
typedef double (*sb_peak_loop)(int64_t iters, float *sink);

double sb_peak_loop_scalar(int64_t iters, float *sink);
double sb_peak_loop_avx2(int64_t iters, float *sink);
double sb_peak_loop_avx512(int64_t iters, float *sink);
double sb_peak_loop_neon(int64_t iters, float *sink);

/* What the loop for isa measures ("AVX-512 FMA, 16 x 16 lanes", ...), or NULL when this
 * build has no loop for it or this CPU cannot run it. */
const char *sb_peak_what(sdpa_isa isa);

/* GFLOP/s of isa's loop on `threads` threads at once (each running its own copy), the
 * best of several short tries (peak.c): a peak is a maximum, and a shared machine only
 * ever makes a try slower. 0 when sb_peak_what(isa) is NULL. */
double sb_peak_gflops(sdpa_isa isa, int threads);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_BENCH_PEAK_H */
