/*
 * peak_avx512.c - the AVX-512 fp32 FMA peak loop and streaming-read loop (see peak.h).
 * Compiled with the Makefile's ISAFLAGS_avx512 and only called when the library's ISA
 * registry says avx512 is usable (peak.c); it is not a kernel and libsdpa never links it.
 */
#if !defined(__AVX512F__)
#error "peak_avx512.c needs -mavx512f (Makefile: ISAFLAGS_avx512)"
#endif

#include <immintrin.h>

#include "peak.h"

/* 16 independent chains: an FMA has 4 cycles of latency on current x86 cores and there
 * are up to 2 FMA pipes, so 8 chains fill them; 16 leave margin and still fit in the 32
 * zmm registers. a = a * x + y with x just below 1 converges to y / (1 - x) = 1, so the
 * values never overflow nor become subnormal (which would be slow). */
double sb_peak_loop_avx512(int64_t iters, float *sink) {
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
    __m512 a0 = _mm512_set1_ps(0.1f), a1 = _mm512_set1_ps(0.2f), a2 = _mm512_set1_ps(0.3f);
    __m512 a3 = _mm512_set1_ps(0.4f), a4 = _mm512_set1_ps(0.5f), a5 = _mm512_set1_ps(0.6f);
    __m512 a6 = _mm512_set1_ps(0.7f), a7 = _mm512_set1_ps(0.8f), a8 = _mm512_set1_ps(0.9f);
    __m512 a9 = _mm512_set1_ps(1.1f), a10 = _mm512_set1_ps(1.2f), a11 = _mm512_set1_ps(1.3f);
    __m512 a12 = _mm512_set1_ps(1.4f), a13 = _mm512_set1_ps(1.5f), a14 = _mm512_set1_ps(1.6f);
    __m512 a15 = _mm512_set1_ps(1.7f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm512_fmadd_ps(a0, x, y);
        a1 = _mm512_fmadd_ps(a1, x, y);
        a2 = _mm512_fmadd_ps(a2, x, y);
        a3 = _mm512_fmadd_ps(a3, x, y);
        a4 = _mm512_fmadd_ps(a4, x, y);
        a5 = _mm512_fmadd_ps(a5, x, y);
        a6 = _mm512_fmadd_ps(a6, x, y);
        a7 = _mm512_fmadd_ps(a7, x, y);
        a8 = _mm512_fmadd_ps(a8, x, y);
        a9 = _mm512_fmadd_ps(a9, x, y);
        a10 = _mm512_fmadd_ps(a10, x, y);
        a11 = _mm512_fmadd_ps(a11, x, y);
        a12 = _mm512_fmadd_ps(a12, x, y);
        a13 = _mm512_fmadd_ps(a13, x, y);
        a14 = _mm512_fmadd_ps(a14, x, y);
        a15 = _mm512_fmadd_ps(a15, x, y);
    }
    const __m512 s0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    const __m512 s1 = _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7));
    const __m512 s2 = _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11));
    const __m512 s3 = _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15));
    const __m512 s = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
    *sink = _mm512_reduce_add_ps(s);
    return (double)iters * 16.0 * 16.0 * 2.0; /* rounds x chains x lanes x (mul + add) */
}

/* Four independent sums of 64-byte loads: an add's latency (~3 cycles) over 4 chains
 * still asks for ~1 load per cycle, 64 B/cycle, several times what DRAM delivers, so
 * memory is the only limit. n is a multiple of 64 floats, p 64-byte aligned. */
double sb_read_loop_avx512(const float *p, int64_t n, float *sink) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    *sink = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    return (double)n * sizeof(float);
}
