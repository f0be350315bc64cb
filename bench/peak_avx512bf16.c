/*
 * peak_avx512bf16.c - the AVX512_BF16 peak loop (see peak.h): vdpbf16ps, the instruction
 * of the avx512bf16 table's bf16 tiles, whose rate the bf16-compute rows of that table
 * divide by. Compiled with the Makefile's ISAFLAGS_avx512bf16 and only called when the
 * library's registry says avx512bf16 is usable (peak.c); the streaming read is
 * avx512's. Not a kernel: libsdpa never links it.
 */
#if !defined(__AVX512BF16__)
#error "peak_avx512bf16.c needs -mavx512bf16 (Makefile: ISAFLAGS_avx512bf16)"
#endif

#include <immintrin.h>

#include "peak.h"

/* 16 independent chains, as the fp32 loop: vdpbf16ps has the latency of an FMA or more
 * on the cores that have it, and at most 2 pipes. Each instruction does, per fp32 lane,
 * two bf16 products added to the lane: 4 flops x 16 lanes. The products (2^-10 x 2^-10
 * each) keep 1e9 rounds far from overflow, and no value is subnormal (vdpbf16ps would
 * read a subnormal as zero and flush one). */
double sb_peak_loop_avx512bf16(int64_t iters, float *sink) {
    const __m512bh x = (__m512bh)_mm512_set1_epi16((short)0x3a80); /* bf16 2^-10 */
    __m512 a0 = _mm512_set1_ps(0.1f), a1 = _mm512_set1_ps(0.2f), a2 = _mm512_set1_ps(0.3f);
    __m512 a3 = _mm512_set1_ps(0.4f), a4 = _mm512_set1_ps(0.5f), a5 = _mm512_set1_ps(0.6f);
    __m512 a6 = _mm512_set1_ps(0.7f), a7 = _mm512_set1_ps(0.8f), a8 = _mm512_set1_ps(0.9f);
    __m512 a9 = _mm512_set1_ps(1.1f), a10 = _mm512_set1_ps(1.2f), a11 = _mm512_set1_ps(1.3f);
    __m512 a12 = _mm512_set1_ps(1.4f), a13 = _mm512_set1_ps(1.5f), a14 = _mm512_set1_ps(1.6f);
    __m512 a15 = _mm512_set1_ps(1.7f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm512_dpbf16_ps(a0, x, x);
        a1 = _mm512_dpbf16_ps(a1, x, x);
        a2 = _mm512_dpbf16_ps(a2, x, x);
        a3 = _mm512_dpbf16_ps(a3, x, x);
        a4 = _mm512_dpbf16_ps(a4, x, x);
        a5 = _mm512_dpbf16_ps(a5, x, x);
        a6 = _mm512_dpbf16_ps(a6, x, x);
        a7 = _mm512_dpbf16_ps(a7, x, x);
        a8 = _mm512_dpbf16_ps(a8, x, x);
        a9 = _mm512_dpbf16_ps(a9, x, x);
        a10 = _mm512_dpbf16_ps(a10, x, x);
        a11 = _mm512_dpbf16_ps(a11, x, x);
        a12 = _mm512_dpbf16_ps(a12, x, x);
        a13 = _mm512_dpbf16_ps(a13, x, x);
        a14 = _mm512_dpbf16_ps(a14, x, x);
        a15 = _mm512_dpbf16_ps(a15, x, x);
    }
    const __m512 s0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    const __m512 s1 = _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7));
    const __m512 s2 = _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11));
    const __m512 s3 = _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15));
    *sink = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    return (double)iters * 16.0 * 16.0 * 4.0; /* rounds x chains x lanes x (2 mul + 2 add) */
}
