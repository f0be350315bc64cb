/*
 * convert.h - portable conversions between fp32 and the 16-bit storage types, as static
 * inline functions (so no ISA flags leak through the linker).
 *
 * Used by the scalar table's pack functions and by the portable driver. It is not a
 * fast path: the SIMD tables convert with their own instructions (F16C, AVX-512,
 * NEON fcvt) and are tested bit-exact against these.
 *
 * Formats: IEEE-754 binary16 (1 sign, 5 exponent, 10 fraction bits, bias 15) and
 * bfloat16 (the upper 16 bits of a binary32). Widening is exact for both.
 */
#ifndef SDPA_CONVERT_H
#define SDPA_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "sdpa.h"

static inline float sdpa_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t sdpa_bits_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* binary16 -> binary32, exact: normals rebias the exponent (127 - 15 = 112), subnormals
 * are normalised, inf keeps its sign, NaN keeps its payload (quietened). */
static inline float sdpa_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t frac = h & 0x3ffu;
    if (exp == 0x1f) /* inf or NaN */
        return sdpa_f32_from_bits(sign | 0x7f800000u | (frac << 13) | (frac ? 0x400000u : 0));
    if (exp != 0)
        return sdpa_f32_from_bits(sign | ((exp + 112u) << 23) | (frac << 13));
    if (frac == 0)
        return sdpa_f32_from_bits(sign);
    int e = -1; /* subnormal: value = frac * 2^-24; shift the leading 1 into bit 10 */
    do {
        frac <<= 1;
        e++;
    } while (!(frac & 0x400u));
    return sdpa_f32_from_bits(sign | ((uint32_t)(112 - e) << 23) | ((frac & 0x3ffu) << 13));
}

/* sdpa_f16_to_f32's value, without branches: the normal, subnormal and inf/NaN results
 * are computed and selected by masks (a subnormal is its fraction times 2^-24, both
 * exact and the product a binary32 normal, so no flush-to-zero setting changes it), so a
 * loop of fixed length over it vectorises at -O2 (gather_q's rows of a 16-bit Q).
 * Element by element it is the slower form (the scalar table's f16 decode took 1.7x as
 * long through it), hence both. */
static inline float sdpa_f16_to_f32_lanes(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, a = h & 0x7fffu, frac = a & 0x3ffu;
    const uint32_t normal = (a << 13) + (112u << 23);
    const uint32_t sub = sdpa_bits_from_f32((float)(int32_t)frac * 0x1p-24f);
    const uint32_t infnan = (a << 13) | 0x7f800000u | (uint32_t)(frac != 0) << 22;
    const uint32_t small = 0u - (uint32_t)(a < 0x400u), big = 0u - (uint32_t)(a >= 0x7c00u);
    return sdpa_f32_from_bits((sub & small) | (infnan & big) | (normal & ~(small | big)) | sign);
}

/* bfloat16 -> binary32, exact: the 16 bits are the top half of the binary32. */
static inline float sdpa_bf16_to_f32(uint16_t b) { return sdpa_f32_from_bits((uint32_t)b << 16); }

/* binary32 -> binary16, round to nearest even; overflow gives inf, NaN stays NaN. */
static inline uint16_t sdpa_f32_to_f16(float f) {
    const uint32_t u = sdpa_bits_from_f32(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
    if (a >= 0x477ff000u) /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a binary16 subnormal (or zero) */
        if (a < 0x33000000u) /* below 2^-25: rounds to zero */
            return sign;
        const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e; /* 14..24: value = m * 2^(e-150), unit 2^-24 */
        const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        return (uint16_t)(sign | (q + (rem > half || (rem == half && (q & 1u)))));
    }
    /* normal: rebias, round the 13 dropped bits to nearest even (a carry into the
     * exponent is the correct result, up to inf) */
    const uint32_t r = a - 0x38000000u; /* exponent - 112 */
    const uint32_t q = r >> 13, rem = r & 0x1fffu;
    return (uint16_t)(sign | (q + (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))));
}

/* binary32 -> bfloat16, round to nearest even; NaN stays NaN (quietened). Written as a
 * select, not a branch, so loops over rows of it vectorise with the baseline ISA (the
 * bf16 compute mode rounds every Q row and, on tables without bf16 tiles, K, V and P). */
static inline uint16_t sdpa_f32_to_bf16(float f) {
    const uint32_t u = sdpa_bits_from_f32(f);
    const uint32_t quiet = (u >> 16) | 0x40u, rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* int8 codes and their scale. A code has at most 7 significant bits (|c| <= 128), so
 * c x s is exact in fp32 when s's significand has at most 24 - 7 = 17 bits, its low 7
 * bits zero (normal or subnormal s alike: c times the integer significand stays below
 * 2^24), and |127 s| is finite, which s <= 2^120 keeps with room. For such a scale the
 * dequantized row fl(c_d s) = c_d s, so sum_d q_d fl(c_d s) = s sum_d q_d c_d in exact
 * arithmetic: a kernel may multiply by s once per key instead of once per element
 * (kernels/x86/tiles.h, "int8 scales factored"). sdpa_kv_write rounds the fp32 scales it
 * computes for int8 to such values; a binary16 scale (11 significant bits) always is one
 * unless inf or NaN. */
#define SDPA_I8_SCALE_LOW 0x7fu /* the fp32 significand bits an exact scale has 0 */
#define SDPA_I8_SCALE_EMAX (127u + 120u) /* the largest biased exponent it may have */

static inline int sdpa_i8_scale_exact(uint32_t u) {
    return (u & SDPA_I8_SCALE_LOW) == 0 && ((u >> 23) & 0xffu) <= SDPA_I8_SCALE_EMAX;
}

static inline int sdpa_i8_scale_exact_f16(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

/* s >= 0 finite, rounded up to the nearest float with its low 7 significand bits zero (a
 * carry into the exponent is the next power of two, still exact): the scale
 * sdpa_kv_write stores for int8, at most 2^-16 relative above amax / 127, so no code
 * saturates that did not before. */
static inline float sdpa_i8_scale_round(float s) {
    const uint32_t u = sdpa_bits_from_f32(s);
    return (u & SDPA_I8_SCALE_LOW) ? sdpa_f32_from_bits((u | SDPA_I8_SCALE_LOW) + 1u) : s;
}

/* Element i of a row stored as dt (an sdpa_dtype), widened to fp32. */
static inline float sdpa_load_as_f32(const void *row, int64_t i, sdpa_dtype dt) {
    switch (dt) {
    case SDPA_F16:
        return sdpa_f16_to_f32(((const uint16_t *)row)[i]);
    case SDPA_BF16:
        return sdpa_bf16_to_f32(((const uint16_t *)row)[i]);
    default: /* SDPA_F32 */
        break;
    }
    return ((const float *)row)[i];
}

#endif /* SDPA_CONVERT_H */
