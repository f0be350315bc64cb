/*
 * peak_neon.c - the AArch64 Advanced SIMD (NEON) fp32 FMA peak loop and streaming-read
 * loop (see peak.h). NEON is part of the AArch64 base ISA, so the Makefile's
 * ISAFLAGS_neon is empty; the guard keeps the file off other targets. It is not a kernel
 * and libsdpa never links it.
 */
#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "peak_neon.c is AArch64 NEON code (Makefile: built for ARCH aarch64 only)"
#endif

#include <arm_neon.h>

#include "peak.h"

/* 16 independent chains: FMLA latency is 4 cycles on common cores with up to 4 pipes
 * (Neoverse V1/V2), so 16 fill them; 18 of the 32 v registers in use. a = a * x + y
 * converges to 1, never overflowing nor going subnormal. */
double sb_peak_loop_neon(int64_t iters, float *sink) {
    const float32x4_t x = vdupq_n_f32(0.999999f), y = vdupq_n_f32(1e-6f);
    float32x4_t a0 = vdupq_n_f32(0.1f), a1 = vdupq_n_f32(0.2f), a2 = vdupq_n_f32(0.3f);
    float32x4_t a3 = vdupq_n_f32(0.4f), a4 = vdupq_n_f32(0.5f), a5 = vdupq_n_f32(0.6f);
    float32x4_t a6 = vdupq_n_f32(0.7f), a7 = vdupq_n_f32(0.8f), a8 = vdupq_n_f32(0.9f);
    float32x4_t a9 = vdupq_n_f32(1.1f), a10 = vdupq_n_f32(1.2f), a11 = vdupq_n_f32(1.3f);
    float32x4_t a12 = vdupq_n_f32(1.4f), a13 = vdupq_n_f32(1.5f), a14 = vdupq_n_f32(1.6f);
    float32x4_t a15 = vdupq_n_f32(1.7f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = vfmaq_f32(y, a0, x);
        a1 = vfmaq_f32(y, a1, x);
        a2 = vfmaq_f32(y, a2, x);
        a3 = vfmaq_f32(y, a3, x);
        a4 = vfmaq_f32(y, a4, x);
        a5 = vfmaq_f32(y, a5, x);
        a6 = vfmaq_f32(y, a6, x);
        a7 = vfmaq_f32(y, a7, x);
        a8 = vfmaq_f32(y, a8, x);
        a9 = vfmaq_f32(y, a9, x);
        a10 = vfmaq_f32(y, a10, x);
        a11 = vfmaq_f32(y, a11, x);
        a12 = vfmaq_f32(y, a12, x);
        a13 = vfmaq_f32(y, a13, x);
        a14 = vfmaq_f32(y, a14, x);
        a15 = vfmaq_f32(y, a15, x);
    }
    float32x4_t s = vaddq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)),
                              vaddq_f32(vaddq_f32(a4, a5), vaddq_f32(a6, a7)));
    s = vaddq_f32(s, vaddq_f32(vaddq_f32(vaddq_f32(a8, a9), vaddq_f32(a10, a11)),
                               vaddq_f32(vaddq_f32(a12, a13), vaddq_f32(a14, a15))));
    *sink = vaddvq_f32(s);
    return (double)iters * 16.0 * 4.0 * 2.0; /* rounds x chains x lanes x (mul + add) */
}

/* Eight independent sums of 16-byte loads: memory is the limit (see peak_avx512.c). n is
 * a multiple of 64 floats. */
double sb_read_loop_neon(const float *p, int64_t n, float *sink) {
    float32x4_t a[8];
    for (int j = 0; j < 8; j++)
        a[j] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 32)
        for (int j = 0; j < 8; j++)
            a[j] = vaddq_f32(a[j], vld1q_f32(p + i + 4 * j));
    const float32x4_t s = vaddq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3])),
                                    vaddq_f32(vaddq_f32(a[4], a[5]), vaddq_f32(a[6], a[7])));
    *sink = vaddvq_f32(s);
    return (double)n * sizeof(float);
}
