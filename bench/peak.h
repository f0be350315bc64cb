/*
 * peak.h - the machine's ceilings, measured in the benchmark's own process by small
 * loops, one file per ISA compiled with that ISA's flags (peak_<isa>.c): the fp32
 * multiply-add peak (register-only loops; the "% of peak" of every benchmark row divides
 * by it) and the DRAM read bandwidth (a streaming read of a buffer far larger than the
 * caches; the "% of DRAM" of the decode rows divides by it).
 *
 * They are yardsticks, not part of libsdpa: the library never runs these loops.
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
/* The bf16 tables' loops: vdpbf16ps, TDPBF16PS, BFMMLA (their rows' % of peak). */
double sb_peak_loop_avx512bf16(int64_t iters, float *sink);
double sb_peak_loop_amx(int64_t iters, float *sink);
double sb_peak_loop_neonbf16(int64_t iters, float *sink);

/* What the loop for isa measures ("AVX-512 FMA, 16 x 16 lanes", ...), or NULL when this
 * build has no loop for it or the ISA is not usable (the library's ISA registry: built
 * in, and runnable on this CPU and OS). */
const char *sb_peak_what(sdpa_isa isa);

/* GFLOP/s of isa's loop on `threads` threads at once (each running its own copy), the
 * best of several short tries (peak.c): a peak is a maximum, and a shared machine only
 * ever makes a try slower. 0 when sb_peak_what(isa) is NULL. */
double sb_peak_gflops(sdpa_isa isa, int threads);

/* A streaming-read loop: sums n floats from p (64-byte aligned, n a multiple of 64) in
 * independent vector accumulators, stores the sum in *sink so the loads stay, and
 * returns the bytes read. */
typedef double (*sb_read_loop)(const float *p, int64_t n, float *sink);

double sb_read_loop_scalar(const float *p, int64_t n, float *sink);
double sb_read_loop_avx2(const float *p, int64_t n, float *sink);
double sb_read_loop_avx512(const float *p, int64_t n, float *sink);
double sb_read_loop_neon(const float *p, int64_t n, float *sink);

/* The buffer the read is measured on: 8x the 32 MiB L3 of the project's machine
 * (docs/PERFORMANCE.md, "The machine"), so what is read comes from DRAM (each pass
 * evicts the previous one's lines). */
#define SB_DRAM_BUFFER_BYTES ((int64_t)256 << 20)

/* GB/s (1e9 bytes/s) of isa's read loop on `threads` threads at once, each reading its
 * own contiguous share of one SB_DRAM_BUFFER_BYTES buffer, best of several passes (a
 * ceiling, like the FMA peak). 0 when the loop is unavailable (sb_peak_what(isa) is
 * NULL) or the buffer cannot be allocated. The buffer is allocated and written once, on
 * first use, and kept until sb_dram_release(). */
double sb_dram_read_gbps(sdpa_isa isa, int threads);

/* The same read in the order a paged KV cache is read: the buffer as chunks of
 * chunk_bytes (a power of two, 64 to SB_DRAM_BUFFER_BYTES), visited in one fixed shuffled
 * order, each thread its contiguous share of that order, each chunk read through the
 * same loop. GB/s, best of several passes, 0 as above. One head's 16-token page is 8 KiB
 * at fp32 and 4 KiB at f16 (Dk = 128: SB_PAGED_CHUNKS), what decode-long-paged16 and its
 * f16 row read from one place before they jump; the ratio of this read to
 * sb_dram_read_gbps is the ceiling this memory puts on paged over contiguous decode
 * (docs/PERFORMANCE.md, "Paged reads"). */
#define SB_PAGED_CHUNKS {4096, 8192}
double sb_dram_read_paged_gbps(sdpa_isa isa, int threads, int64_t chunk_bytes);

/* Frees the buffer (and the shuffled order) of the two reads above. */
void sb_dram_release(void);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_BENCH_PEAK_H */
