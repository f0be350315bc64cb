/*
 * kvq.h - dequantization of one row of a quantized K or V cache (int8, fp8 e4m3/e5m2,
 * int4; include/sdpa.h, sdpa_dtype) into fp32, the kernel table's `dequant` entry.
 *
 * One portable source, included by every base table (scalar, avx2, avx512, neon) and
 * compiled with that table's ISA flags: the loops run over fixed chunks of KVQ_CHUNK
 * elements with one scale each, a trip count the compiler vectorises at -O2 for any
 * vector width (gcc's "very cheap" cost model vectorises only loops whose count is a
 * known multiple of the vector length). It is not a tile: the driver (src/kvcache.c)
 * calls it per row while gathering a block of a quantized cache into the fp32 block the
 * tiles then read.
 *
 * Every result is fl(value(code) * scale), the value include/sdpa.h defines, bit for bit:
 * value(code) is exact in fp32 for every format, and one IEEE multiplication rounds to
 * nearest even on every target (no fused operation can form: there is nothing to add).
 * The fp8 decodes build the fp32 bits of a normal code directly (its exponent rebiased)
 * and a subnormal code as an integer times a power of two, never through an fp32
 * subnormal, so no flush-to-zero setting can change them.
 */
#ifndef SDPA_KVQ_H
#define SDPA_KVQ_H

#include <stdint.h>
#include <string.h>

#include "sdpa.h"

enum { KVQ_CHUNK = 16 };

static inline float kvq_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* E4M3 (OCP 8-bit floating point, v1.0): bias 7; exponent 0 is subnormal, m 2^-9;
 * S.1111.111 is NaN; no infinities. A normal code's fp32 exponent is e + 120. */
static inline float kvq_e4m3(uint8_t c) {
    const uint32_t a = c & 0x7fu, sign = (uint32_t)(c & 0x80u) << 24;
    const float normal = kvq_bits(((a << 20) + (120u << 23)) | sign);
    const float sub = kvq_bits(sign | 0x3f800000u) * (float)(a & 7u) * 0x1p-9f;
    const float nan = kvq_bits(0x7fc00000u | sign);
    return a == 0x7fu ? nan : ((a >> 3) ? normal : sub);
}

/* E5M2 (OCP): bias 15, IEEE-style: exponent 31 is inf (m = 0) or NaN; exponent 0 is
 * subnormal, m 2^-16. A normal code's fp32 exponent is e + 112. */
static inline float kvq_e5m2(uint8_t c) {
    const uint32_t a = c & 0x7fu, sign = (uint32_t)(c & 0x80u) << 24;
    const float normal = kvq_bits(((a << 21) + (112u << 23)) | sign);
    const float sub = kvq_bits(sign | 0x3f800000u) * (float)(a & 3u) * 0x1p-16f;
    const float special = kvq_bits(sign | 0x7f800000u | ((a & 3u) ? 0x400000u : 0u));
    return (a >> 2) == 31u ? special : ((a >> 2) ? normal : sub);
}

/* The signed 4-bit codes of a byte: the low nibble (the even element), the high one. */
static inline int kvq_lo(unsigned char b) { return (int)(b & 15) - (int)((b & 8) << 1); }
static inline int kvq_hi(unsigned char b) { return (int)(b >> 4) - (int)((b & 128) >> 3); }

/* Elements [d0, d0 + n) of a row stored as dt, times scale s, into out[0 .. n). */
static inline void kvq_span(sdpa_dtype dt, const unsigned char *row, int d0, int n, float s,
                            float *out) {
    int d = 0;
    switch (dt) {
    case SDPA_I8: {
        const int8_t *x = (const int8_t *)(const void *)row + d0;
        for (; d + KVQ_CHUNK <= n; d += KVQ_CHUNK)
            for (int c = 0; c < KVQ_CHUNK; c++)
                out[d + c] = (float)x[d + c] * s;
        for (; d < n; d++)
            out[d] = (float)x[d] * s;
        return;
    }
    case SDPA_FP8_E4M3:
        for (; d + KVQ_CHUNK <= n; d += KVQ_CHUNK)
            for (int c = 0; c < KVQ_CHUNK; c++)
                out[d + c] = kvq_e4m3(row[d0 + d + c]) * s;
        for (; d < n; d++)
            out[d] = kvq_e4m3(row[d0 + d]) * s;
        return;
    case SDPA_FP8_E5M2:
        for (; d + KVQ_CHUNK <= n; d += KVQ_CHUNK)
            for (int c = 0; c < KVQ_CHUNK; c++)
                out[d + c] = kvq_e5m2(row[d0 + d + c]) * s;
        for (; d < n; d++)
            out[d] = kvq_e5m2(row[d0 + d]) * s;
        return;
    case SDPA_I4: { /* d0 and n even (the group is even): whole bytes */
        const unsigned char *x = row + d0 / 2;
        for (; d + KVQ_CHUNK <= n; d += KVQ_CHUNK)
            for (int c = 0; c < KVQ_CHUNK / 2; c++) {
                out[d + 2 * c] = (float)kvq_lo(x[d / 2 + c]) * s;
                out[d + 2 * c + 1] = (float)kvq_hi(x[d / 2 + c]) * s;
            }
        for (; d < n; d += 2) {
            out[d] = (float)kvq_lo(x[d / 2]) * s;
            out[d + 1] = (float)kvq_hi(x[d / 2]) * s;
        }
        return;
    }
    default: /* the driver calls this for the quantized dtypes only */
        return;
    }
}

/* out[0 .. dim) = the row at `row` (dtype dt, quantized) dequantized with the fp32
 * scales sc[0 .. dim / group), one per `group` consecutive elements. */
static void kvq_dequant(int dim, const void *row, sdpa_dtype dt, const float *sc, int group,
                        float *out) {
    for (int g = 0; g * group < dim; g++)
        kvq_span(dt, (const unsigned char *)row, g * group, group, sc[g], out + g * group);
}

#endif /* SDPA_KVQ_H */
