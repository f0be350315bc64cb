/*
 * peak_scalar.c - the peak loop for the scalar table's rows, and a streaming-read loop
 * (see peak.h): portable C compiled with no -m flags, exactly like kernels/scalar/.
 * Written with 4-lane vectors (GCC/clang vector extensions) it reaches the 128-bit SIMD
 * every target of this build has without flags (SSE2 on x86-64, NEON on AArch64), so it
 * is the most that portable C can get out of this build: the honest ceiling for the
 * scalar table, which the compiler may vectorise that far. Without -mfma an x86-64 build
 * has no fused multiply-add, so there it is a multiply and an add.
 *
 * It is not a kernel and libsdpa never links it.
 */
#include "peak.h"

typedef float v4f __attribute__((vector_size(16)));

/* 12 independent chains: a multiply then an add, ~3 + 3 cycles of latency, with 2
 * multiply and 2 add pipes on current x86 cores, need 12 chains in flight; 14 of the 16
 * xmm registers. a = a * x + y converges to 1 (no overflow, no subnormals). */
double sb_peak_loop_scalar(int64_t iters, float *sink) {
    const v4f x = {0.999999f, 0.999999f, 0.999999f, 0.999999f};
    const v4f y = {1e-6f, 1e-6f, 1e-6f, 1e-6f};
    v4f a0 = x * 0.1f, a1 = x * 0.2f, a2 = x * 0.3f, a3 = x * 0.4f, a4 = x * 0.5f;
    v4f a5 = x * 0.6f, a6 = x * 0.7f, a7 = x * 0.8f, a8 = x * 0.9f, a9 = x * 1.1f;
    v4f a10 = x * 1.2f, a11 = x * 1.3f;
    for (int64_t i = 0; i < iters; i++) {
        a0 = a0 * x + y;
        a1 = a1 * x + y;
        a2 = a2 * x + y;
        a3 = a3 * x + y;
        a4 = a4 * x + y;
        a5 = a5 * x + y;
        a6 = a6 * x + y;
        a7 = a7 * x + y;
        a8 = a8 * x + y;
        a9 = a9 * x + y;
        a10 = a10 * x + y;
        a11 = a11 * x + y;
    }
    const v4f s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));
    *sink = s[0] + s[1] + s[2] + s[3];
    return (double)iters * 12.0 * 4.0 * 2.0; /* rounds x chains x lanes x (mul + add) */
}

/* Eight independent sums of 16-byte vector loads, the widest portable C reaches without
 * -m flags (SSE2, NEON). n is a multiple of 64 floats, p 64-byte aligned. */
double sb_read_loop_scalar(const float *p, int64_t n, float *sink) {
    const v4f *v = (const v4f *)(const void *)p;
    v4f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
    for (int64_t i = 0; i < n / 4; i += 8) {
        a0 += v[i];
        a1 += v[i + 1];
        a2 += v[i + 2];
        a3 += v[i + 3];
        a4 += v[i + 4];
        a5 += v[i + 5];
        a6 += v[i + 6];
        a7 += v[i + 7];
    }
    const v4f s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    *sink = s[0] + s[1] + s[2] + s[3];
    return (double)n * sizeof(float);
}
