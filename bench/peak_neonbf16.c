/*
 * peak_neonbf16.c - the FEAT_BF16 peak loop (see peak.h): BFMMLA, the instruction of the
 * neonbf16 table's bf16 tiles, whose rate that table's bf16-compute rows divide by.
 * Compiled with the Makefile's ISAFLAGS_neonbf16 and only called when the library's
 * registry says neonbf16 is usable (peak.c); the streaming read is neon's. Not a kernel:
 * libsdpa never links it.
 */
#if !defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#error "peak_neonbf16.c needs +bf16 (Makefile: ISAFLAGS_neonbf16)"
#endif

#include <arm_neon.h>

#include "peak.h"

/* 16 independent chains. BFMMLA multiplies a 2 x 4 bf16 matrix by a 4 x 2 one into 2 x 2
 * fp32 accumulators: 16 multiply-adds, 32 flops per instruction. Products of 2^-10 keep
 * 1e9 rounds far from overflow. */
double sb_peak_loop_neonbf16(int64_t iters, float *sink) {
    const bfloat16x8_t x = vreinterpretq_bf16_u16(vdupq_n_u16(0x3a80)); /* bf16 2^-10 */
    float32x4_t a[16];
    for (int k = 0; k < 16; k++)
        a[k] = vdupq_n_f32(0.1f * (float)(k + 1));
    for (int64_t i = 0; i < iters; i++) {
        a[0] = vbfmmlaq_f32(a[0], x, x);
        a[1] = vbfmmlaq_f32(a[1], x, x);
        a[2] = vbfmmlaq_f32(a[2], x, x);
        a[3] = vbfmmlaq_f32(a[3], x, x);
        a[4] = vbfmmlaq_f32(a[4], x, x);
        a[5] = vbfmmlaq_f32(a[5], x, x);
        a[6] = vbfmmlaq_f32(a[6], x, x);
        a[7] = vbfmmlaq_f32(a[7], x, x);
        a[8] = vbfmmlaq_f32(a[8], x, x);
        a[9] = vbfmmlaq_f32(a[9], x, x);
        a[10] = vbfmmlaq_f32(a[10], x, x);
        a[11] = vbfmmlaq_f32(a[11], x, x);
        a[12] = vbfmmlaq_f32(a[12], x, x);
        a[13] = vbfmmlaq_f32(a[13], x, x);
        a[14] = vbfmmlaq_f32(a[14], x, x);
        a[15] = vbfmmlaq_f32(a[15], x, x);
    }
    float32x4_t s = a[0];
    for (int k = 1; k < 16; k++)
        s = vaddq_f32(s, a[k]);
    *sink = vaddvq_f32(s);
    return (double)iters * 16.0 * 32.0; /* rounds x chains x (16 multiply-adds x 2) */
}
