/*
 * neon_mem.h - the AArch64 Advanced SIMD loads and stores the NEON tables share: lane
 * loads and stores of 1..3 floats (NEON has no masked loads), and the exact widening of
 * 16-bit storage (f16, bf16) to fp32 as a tile reads K and V.
 *
 * Included by kernels/neon/neon.c (the ARMv8.0 table) and kernels/neonbf16/neonbf16.c
 * (FEAT_BF16), so both read caller memory the same way and neither touches an element
 * past the end of its operand. Only ARMv8.0 Advanced SIMD instructions: a file built with
 * any aarch64 flags may include it. It is not a vector layer: no tile, no arithmetic.
 */
#ifndef SDPA_NEON_MEM_H
#define SDPA_NEON_MEM_H

#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "kernels/neon/neon_mem.h is AArch64 Advanced SIMD code"
#endif

#include <arm_neon.h>
#include <stdint.h>

#include "../simd.h"
#include "sdpa.h"

/* w (1..3) floats into lanes 0..w-1 of fill, one lane load each: nothing past p[w-1] is
 * touched. */
ALWAYS_INLINE float32x4_t load_part(const float *p, int w, float32x4_t fill) {
    fill = vld1q_lane_f32(p, fill, 0);
    if (w > 1)
        fill = vld1q_lane_f32(p + 1, fill, 1);
    if (w > 2)
        fill = vld1q_lane_f32(p + 2, fill, 2);
    return fill;
}

ALWAYS_INLINE void store_part(float *p, float32x4_t v, int w) {
    vst1q_lane_f32(p, v, 0);
    if (w > 1)
        vst1q_lane_f32(p + 1, v, 1);
    if (w > 2)
        vst1q_lane_f32(p + 2, v, 2);
}

/* 16-bit storage widened to fp32, exactly (the same bits as kernels/convert.h, which
 * tests/test_ukernel.c checks for all 65536 bit patterns of each type, NaNs and
 * subnormals included, through qk_rows and pv): FCVTL for binary16 (subnormals
 * normalised; NaN payloads kept and quietened as in the Arm ARM's FPConvertNaN, with
 * Linux's default FPCR.DN = 0), a shift into the top half for bfloat16. */
ALWAYS_INLINE float32x4_t widen16(uint16x4_t h, sdpa_dtype dt) {
    if (dt == SDPA_F16)
        return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

/* Elements d .. d+3 of a row stored as dt, as fp32. */
ALWAYS_INLINE float32x4_t load4(const void *row, int d, sdpa_dtype dt) {
    if (dt == SDPA_F32)
        return vld1q_f32((const float *)row + d);
    return widen16(vld1_u16((const uint16_t *)row + d), dt);
}

/* Elements d .. d+w-1 (w = 1..3) of a row stored as dt, as fp32; other lanes 0. */
ALWAYS_INLINE float32x4_t load_part_dt(const void *row, int d, int w, sdpa_dtype dt) {
    if (dt == SDPA_F32)
        return load_part((const float *)row + d, w, vdupq_n_f32(0.0f));
    const uint16_t *h = (const uint16_t *)row + d;
    uint16x4_t v = vdup_n_u16(0);
    v = vld1_lane_u16(h, v, 0);
    if (w > 1)
        v = vld1_lane_u16(h + 1, v, 1);
    if (w > 2)
        v = vld1_lane_u16(h + 2, v, 2);
    return widen16(v, dt);
}

#endif /* SDPA_NEON_MEM_H */
