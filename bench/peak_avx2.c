/*
 * peak_avx2.c - the AVX2 + FMA fp32 peak loop and streaming-read loop (see peak.h).
 * Compiled with the Makefile's ISAFLAGS_avx2 and only called when the library's ISA
 * registry says avx2 is usable (peak.c); it is not a kernel and libsdpa never links it.
 */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "peak_avx2.c needs -mavx2 -mfma (Makefile: ISAFLAGS_avx2)"
#endif

#include <immintrin.h>

#include "peak.h"

/* 12 independent chains: FMA latency 4 cycles x up to 2 pipes needs 8; 12 leave margin
 * within the 16 ymm registers (2 more hold x and y). The recurrence a = a * x + y
 * converges to 1, never overflowing nor going subnormal. */
double sb_peak_loop_avx2(int64_t iters, float *sink) {
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
    __m256 a0 = _mm256_set1_ps(0.1f), a1 = _mm256_set1_ps(0.2f), a2 = _mm256_set1_ps(0.3f);
    __m256 a3 = _mm256_set1_ps(0.4f), a4 = _mm256_set1_ps(0.5f), a5 = _mm256_set1_ps(0.6f);
    __m256 a6 = _mm256_set1_ps(0.7f), a7 = _mm256_set1_ps(0.8f), a8 = _mm256_set1_ps(0.9f);
    __m256 a9 = _mm256_set1_ps(1.1f), a10 = _mm256_set1_ps(1.2f), a11 = _mm256_set1_ps(1.3f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, x, y);
        a1 = _mm256_fmadd_ps(a1, x, y);
        a2 = _mm256_fmadd_ps(a2, x, y);
        a3 = _mm256_fmadd_ps(a3, x, y);
        a4 = _mm256_fmadd_ps(a4, x, y);
        a5 = _mm256_fmadd_ps(a5, x, y);
        a6 = _mm256_fmadd_ps(a6, x, y);
        a7 = _mm256_fmadd_ps(a7, x, y);
        a8 = _mm256_fmadd_ps(a8, x, y);
        a9 = _mm256_fmadd_ps(a9, x, y);
        a10 = _mm256_fmadd_ps(a10, x, y);
        a11 = _mm256_fmadd_ps(a11, x, y);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    *sink = lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
    return (double)iters * 12.0 * 8.0 * 2.0; /* rounds x chains x lanes x (mul + add) */
}

/* Four independent sums of 32-byte loads (see peak_avx512.c): memory is the limit. n is
 * a multiple of 64 floats, p 64-byte aligned. */
double sb_read_loop_avx2(const float *p, int64_t n, float *sink) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    *sink = _mm_cvtss_f32(_mm_add_ps(h, _mm_movehl_ps(h, h)));
    return (double)n * sizeof(float);
}
