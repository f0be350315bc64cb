/*
 * kvq.h - dequantization of one row of a quantized K or V cache (int8, fp8 e4m3/e5m2,
 * int4; include/sdpa.h, sdpa_dtype) into fp32, the kernel table's `dequant` entry.
 *
 * One source, included by every base table (scalar, avx2, avx512, neon) and compiled
 * with that table's ISA flags: one register of codes at a time (kvq_codes) in the
 * compilers' generic vectors, with the ISA's widening load, on the SIMD tables; code by
 * code on the scalar table. The driver (src/kvcache.c) calls kvq_dequant per row while
 * gathering a block of a quantized cache into the fp32 block the tiles then read, and
 * the x86 tiles' fused quantized kernels (kernels/x86/tiles.h, load_kv) decode through
 * kvq_codes in registers, so both see the same values.
 *
 * Every result is fl(value(code) * scale), the value include/sdpa.h defines, bit for bit:
 * value(code) is exact in fp32 for every format, and one IEEE multiplication rounds to
 * nearest even on every target (no fused operation can form: there is nothing to add).
 * The portable fp8 decodes build the fp32 bits of a normal code directly (its exponent
 * rebiased) and a subnormal code as an integer times a power of two, never through an
 * fp32 subnormal, so no flush-to-zero setting can change them. On x86 (F16C, which both
 * x86 tables require) an fp8 code goes through binary16 instead, a third of the
 * instructions: an e5m2 code is the top byte of the binary16 of its value; an e4m3 code
 * with its exponent and mantissa moved down one bit (sign kept) is the binary16 of its
 * value x 2^-8, normal and subnormal codes alike (binary16's bias is 8 more and its
 * subnormals have 7 more bits of range), which vcvtph2ps widens exactly (binary16
 * subnormals included: it ignores MXCSR.DAZ, checked with DAZ and FTZ set) and one
 * multiplication by 2^8 restores exactly. e4m3's NaN codes (S.1111.111) become the
 * binary16 0x7f80 with the code's sign on the way, by carry: the code sign-extended to 16
 * bits and shifted left by 7 (t) has its exponent and mantissa in bits 13..7 and its sign
 * in bits 15 and 14; adding 2^7 carries into bit 14 only from a code whose exponent and
 * mantissa are all ones, so bit 14 of t ^ (t + 2^7) is that carry, and t with its bit 14
 * replaced by it, t ^ ((t + 2^7) & 2^14), is the moved code with the top exponent bit set
 * for the NaN codes alone: 3 vector operations for the move and the NaN, where a mask
 * more (clearing the sign's second copy) and a compare, a mask and a select took 6. In
 * every table
 * an e5m2 NaN keeps its code's mantissa bits as binary16's widening does (quiet bit set),
 * and an e4m3 NaN is what that binary16 widens to: sign | 0x7ff00000, quiet.
 */
#ifndef SDPA_KVQ_H
#define SDPA_KVQ_H

#include <stdint.h>
#include <string.h>

#include "sdpa.h"


/* One code of each format, scalar: the scalar table's whole path and the SIMD tails. */
static inline float kvq_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* An fp8 code with mbits mantissa bits and exponent bias `bias`: a normal code's fp32
 * exponent e + 127 - bias is built in the exponent field; a subnormal code is m times
 * 2^(1 - bias - mbits), an exact product, never an fp32 subnormal (so no flush-to-zero
 * setting changes it). E4M3 (OCP 8-bit floating point v1.0): S.1111.111 is NaN, there
 * is no infinity; E5M2: exponent 31 is inf (m = 0) or NaN, as in binary16. */
static inline float kvq_fp8_one(uint8_t c, int mbits, int bias) {
    const uint32_t a = c & 0x7fu, sign = (uint32_t)(c & 0x80u) << 24;
    const uint32_t e = a >> mbits, m = a & ((1u << mbits) - 1u);
    if (mbits == 3 && a == 0x7fu) /* as the binary16 0x7f80 widens (the x86 route) */
        return kvq_bits(sign | 0x7ff00000u);
    if (mbits == 2 && e == 31u) /* a NaN as binary16's widening gives it: quiet, m kept */
        return kvq_bits(sign | 0x7f800000u | (m ? 0x400000u | m << 21 : 0u));
    if (e)
        return kvq_bits(((a << (23 - mbits)) + ((uint32_t)(127 - bias) << 23)) | sign);
    const float sub = (float)m * kvq_bits((uint32_t)(127 + 1 - bias - mbits) << 23);
    return sign ? -sub : sub;
}

static inline float kvq_one(sdpa_dtype dt, const unsigned char *row, int64_t e) {
    switch (dt) {
    case SDPA_I8:
        return (float)(int8_t)row[e];
    case SDPA_I4:
        return (float)((((row[e / 2] >> (4 * (e % 2))) & 15) ^ 8) - 8);
    case SDPA_FP8_E4M3:
        return kvq_fp8_one(row[e], 3, 7);
    default: /* SDPA_FP8_E5M2 */
        return kvq_fp8_one(row[e], 2, 15);
    }
}

/* The SIMD tables: KVQ_LANES codes at a time in the compilers' generic vectors, one
 * register wide (so a cast between two of the types reinterprets one register), with
 * the one step generic vectors lower badly (gcc 12 widens 8-bit lanes one by one, with
 * pinsrd) done by the ISA's widening load: KVQ_WIDEN(out, p, SIGNED) reads KVQ_LANES
 * bytes at p into 32-bit lanes; on NEON KVQ_WIDEN_DUP(out, p) reads KVQ_LANES / 2 bytes,
 * each into two adjacent lanes (int4: two codes per byte). The x86 tables decode int4
 * (KVQ_I4) and fp8 (KVQ_FP8_HALF) with their own instructions instead: the generic
 * code's 32-bit-lane shifts, masks and selects cost more in decode (docs/PERFORMANCE.md,
 * "KV caches" and "The split-KV merge, and prefill with scores transposed"). */
#if defined(__AVX2__) /* both x86 tables (AVX-512 implies it) */
#include <immintrin.h>
/* The e4m3 binary16 by carry (the file comment): t ^ ((t + 2^7) & 2^14), where t is the
 * sign-extended code shifted left by 7, in 16-bit lanes. */
#define KVQ_E4M3_NAN_ADD 0x80
#define KVQ_E4M3_NAN_BIT 0x4000
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define KVQ_LANES 16
#define KVQ_WIDEN(out, p, SIGNED)                                                          \
    do {                                                                                   \
        const __m128i b_ = _mm_loadu_si128((const __m128i *)(const void *)(p));            \
        (out) = (kvq_u32)((SIGNED) ? _mm512_cvtepi8_epi32(b_) : _mm512_cvtepu8_epi32(b_)); \
    } while (0)
/* x86 int4 on AVX-512: no shifts and no conversion. The 8 bytes of 16 codes are broadcast
 * to every 128-bit lane and byte-shuffled so that 32-bit lane l holds byte l / 2 (zero
 * above); one ternary-logic operation keeps the lane's nibble (bits 0-3 in even lanes, 4-7
 * in odd), flips its top bit (n ^ 8, the signed nibble plus 8) and ORs in the exponent of
 * 2^23 (even) or 2^19 (odd), where the nibble's bits are the float's units: the float is
 * 2^23 + (n ^ 8) or 2^19 + (n ^ 8), and subtracting 2^23 + 8 or 2^19 + 8 leaves the
 * signed value (n ^ 8) - 8 exactly (both operands and the result are exact in fp32; a
 * zero is +0, as the conversion of 0 gives). 3 vector operations where the widening and
 * two shifts and a conversion took 4 (int4 decode-long 8% faster on AMD Zen 4,
 * docs/PERFORMANCE.md "Quantized decode's operations"). Per 32-bit lane pair, the
 * ternary logic's B selects, bit by bit, the constant C (1) or A ^ C (0), imm 0x9a; C
 * (the exponents and the flipped bits) read as floats is 2^19 + 8 | 2^23 + 8, the number
 * to subtract. */
#define KVQ_I4_B (((int64_t)0xffffff0f << 32) | 0xfffffff0) /* odd lane | even lane */
#define KVQ_I4_C (((int64_t)0x49000080 << 32) | 0x4b000008)
#define KVQ_I4_BYTE(i) ((int)(0x80808000u | (i))) /* byte i; 0x80: a zero byte */
#define KVQ_I4(out, p)                                                                      \
    do {                                                                                   \
        int64_t w_;                                                                        \
        memcpy(&w_, (p), sizeof w_);                                                       \
        const __m512i x_ = _mm512_shuffle_epi8(                                            \
            _mm512_set1_epi64(w_), /* lane l: byte l / 2 of the lane's copy, zeros above */ \
            _mm512_set_epi32(KVQ_I4_BYTE(7), KVQ_I4_BYTE(7), KVQ_I4_BYTE(6), KVQ_I4_BYTE(6), \
                             KVQ_I4_BYTE(5), KVQ_I4_BYTE(5), KVQ_I4_BYTE(4), KVQ_I4_BYTE(4), \
                             KVQ_I4_BYTE(3), KVQ_I4_BYTE(3), KVQ_I4_BYTE(2), KVQ_I4_BYTE(2), \
                             KVQ_I4_BYTE(1), KVQ_I4_BYTE(1), KVQ_I4_BYTE(0), KVQ_I4_BYTE(0))); \
        const __m512i y_ = _mm512_ternarylogic_epi32(x_, _mm512_set1_epi64(KVQ_I4_B),      \
                                                     _mm512_set1_epi64(KVQ_I4_C), 0x9a);   \
        (out) = (kvq_f32)_mm512_sub_ps(_mm512_castsi512_ps(y_),                            \
                                       _mm512_castsi512_ps(_mm512_set1_epi64(KVQ_I4_C)));   \
    } while (0)
#define KVQ_FP8_HALF(out, p, E4M3, RAW)                                                    \
    do {                                                                                   \
        const __m128i b_ = _mm_loadu_si128((const __m128i *)(const void *)(p));            \
        __m256i h_;                                                                        \
        if (E4M3) {                                                                        \
            const __m256i t_ = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b_), 7);             \
            h_ = _mm256_ternarylogic_epi32( /* t ^ ((t + 2^7) & 2^14) */                  \
                t_, _mm256_add_epi16(t_, _mm256_set1_epi16(KVQ_E4M3_NAN_ADD)),             \
                _mm256_set1_epi16(KVQ_E4M3_NAN_BIT), 0x78);                                \
        } else {                                                                           \
            h_ = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b_), 8);                           \
        }                                                                                  \
        __m512 f_ = _mm512_cvtph_ps(h_);                                                   \
        if ((E4M3) && !(RAW))                                                              \
            f_ = _mm512_mul_ps(f_, _mm512_set1_ps(256.0f));                                \
        (out) = (kvq_f32)f_;                                                               \
    } while (0)
#elif defined(__AVX2__)
#define KVQ_LANES 8
/* x86 int4 on AVX2: each byte of b twice in a row, widened to 32-bit lanes (lane l holds
 * byte l / 2), then shifted left by KVQ_I4_SHL (28 in even lanes, 24 in odd: the lane's
 * nibble to the top) and arithmetically right by 28: the nibble as a signed 4-bit value,
 * which is (nibble ^ 8) - 8. Two 32-bit shifts after the widening instead of six byte
 * operations (masks, a shift, an interleave, the sign fix) before it. (AVX-512's route
 * above needs its ternary logic: without it, three operations replace the one and it
 * saves nothing.) */
#define KVQ_I4_SHL (((int64_t)24 << 32) | 28)
#define KVQ_WIDEN(out, p, SIGNED)                                                          \
    do {                                                                                   \
        const __m128i b_ = _mm_loadl_epi64((const __m128i *)(const void *)(p));            \
        (out) = (kvq_u32)((SIGNED) ? _mm256_cvtepi8_epi32(b_) : _mm256_cvtepu8_epi32(b_)); \
    } while (0)
#define KVQ_I4(out, p)                                                                      \
    do {                                                                                   \
        int32_t w_;                                                                        \
        memcpy(&w_, (p), sizeof w_);                                                       \
        const __m128i b_ = _mm_cvtsi32_si128(w_);                                          \
        const __m256i x_ = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b_, b_));                \
        (out) = (kvq_f32)_mm256_cvtepi32_ps(                                               \
            _mm256_srai_epi32(_mm256_sllv_epi32(x_, _mm256_set1_epi64x(KVQ_I4_SHL)), 28)); \
    } while (0)
#define KVQ_FP8_HALF(out, p, E4M3, RAW)                                                    \
    do {                                                                                   \
        const __m128i b_ = _mm_loadl_epi64((const __m128i *)(const void *)(p));            \
        __m128i h_;                                                                        \
        if (E4M3) {                                                                        \
            const __m128i t_ = _mm_slli_epi16(_mm_cvtepi8_epi16(b_), 7);                   \
            h_ = _mm_xor_si128(t_, _mm_and_si128( /* t ^ ((t + 2^7) & 2^14) */            \
                _mm_add_epi16(t_, _mm_set1_epi16(KVQ_E4M3_NAN_ADD)),                       \
                _mm_set1_epi16(KVQ_E4M3_NAN_BIT)));                                        \
        } else {                                                                           \
            h_ = _mm_slli_epi16(_mm_cvtepu8_epi16(b_), 8);                                 \
        }                                                                                  \
        __m256 f_ = _mm256_cvtph_ps(h_);                                                   \
        if ((E4M3) && !(RAW))                                                              \
            f_ = _mm256_mul_ps(f_, _mm256_set1_ps(256.0f));                                \
        (out) = (kvq_f32)f_;                                                               \
    } while (0)
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#define KVQ_LANES 4
#define KVQ_WIDEN(out, p, SIGNED)                                                          \
    do {                                                                                   \
        uint32_t w_;                                                                       \
        memcpy(&w_, (p), sizeof w_);                                                       \
        const uint8x8_t b_ = vreinterpret_u8_u32(vdup_n_u32(w_));                          \
        (out) = (SIGNED) ? (kvq_u32)vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u8(b_)))) \
                         : (kvq_u32)vmovl_u16(vget_low_u16(vmovl_u8(b_)));                 \
    } while (0)
#define KVQ_WIDEN_DUP(out, p)                                                              \
    do {                                                                                   \
        uint16_t w_;                                                                       \
        memcpy(&w_, (p), sizeof w_);                                                       \
        const uint8x8_t b_ = vreinterpret_u8_u16(vdup_n_u16(w_));                          \
        (out) = (kvq_u32)vmovl_u16(vget_low_u16(vmovl_u8(vzip1_u8(b_, b_))));             \
    } while (0)
#endif

#ifdef KVQ_LANES
typedef int32_t kvq_i32 __attribute__((vector_size(4 * KVQ_LANES)));
typedef uint32_t kvq_u32 __attribute__((vector_size(4 * KVQ_LANES)));
typedef float kvq_f32 __attribute__((vector_size(4 * KVQ_LANES)));

/* mask ? a : b, lane by lane (mask lanes all ones or all zeros, as comparisons give) */
#define KVQ_SELECT(mask, a, b) (((kvq_u32)(mask) & (a)) | (~(kvq_u32)(mask) & (b)))

/* out = the fp8 codes c (32-bit lanes) as fp32: kvq_fp8_one, lane by lane. */
#define KVQ_FP8(out, c, MBITS, BIAS)                                                       \
    do {                                                                                   \
        const kvq_u32 a_ = (c) & 0x7fu, sign_ = ((c) & 0x80u) << 24;                       \
        const kvq_u32 e_ = a_ >> (MBITS), m_ = a_ & ((1u << (MBITS)) - 1u);                \
        const kvq_u32 normal_ =                                                            \
            ((a_ << (23 - (MBITS))) + ((uint32_t)(127 - (BIAS)) << 23)) | sign_;           \
        const kvq_u32 sub_ =                                                               \
            (kvq_u32)(__builtin_convertvector((kvq_i32)m_, kvq_f32) *                      \
                      kvq_bits((uint32_t)(127 + 1 - (BIAS) - (MBITS)) << 23)) | sign_;     \
        kvq_u32 r_ = KVQ_SELECT(e_ != 0u, normal_, sub_);                                  \
        if ((MBITS) == 3)                                                                  \
            r_ = KVQ_SELECT(a_ == 0x7fu, sign_ | 0x7ff00000u, r_);                         \
        else                                                                               \
            r_ = KVQ_SELECT(e_ == 31u,                                                     \
                            sign_ | 0x7f800000u | ((kvq_u32)(m_ != 0u) & (0x400000u | m_ << 21)), r_); \
        (out) = (kvq_f32)r_;                                                               \
    } while (0)
#endif

#ifdef KVQ_LANES
/* value(code) of elements [i, i + KVQ_LANES) of a row stored as dt (quantized), a whole
 * register of codes read in place. The fused tiles (kernels/x86/tiles.h) and kvq_span
 * below both decode through it (and kvq_codes_part), so they give the same values. i is
 * even for SDPA_I4 (two codes per byte, the even one in the low nibble). With e4m3_raw
 * (x86 only, where KVQ_E4M3_RAW is defined) an e4m3 code gives value(code) / 2^8, the
 * binary16 route's value before its multiplication by 2^8, for a caller that folds the
 * 2^8 into its scale instead (tiles.h, "e4m3's 2^8"). */
static inline kvq_f32 kvq_codes_x(sdpa_dtype dt, const unsigned char *row, int64_t i,
                                  int e4m3_raw) {
    const unsigned char *p = row + (dt == SDPA_I4 ? i / 2 : i);
    kvq_u32 c;
    kvq_f32 v;
    switch (dt) {
    case SDPA_I8:
        KVQ_WIDEN(c, p, 1);
        v = __builtin_convertvector((kvq_i32)c, kvq_f32);
        break;
    case SDPA_I4: {
#ifdef KVQ_I4
        KVQ_I4(v, p);
#else /* byte i / 2 in lane i; the even lane takes its low nibble */
        kvq_u32 shift;
        for (int l = 0; l < KVQ_LANES; l++)
            shift[l] = 4u * (uint32_t)(l % 2);
        KVQ_WIDEN_DUP(c, p);
        v = __builtin_convertvector((kvq_i32)(((c >> shift) & 15u) ^ 8u) - 8, kvq_f32);
#endif
        break;
    }
#ifdef KVQ_FP8_HALF
    case SDPA_FP8_E4M3:
        KVQ_FP8_HALF(v, p, 1, e4m3_raw);
        break;
    default: /* SDPA_FP8_E5M2 */
        KVQ_FP8_HALF(v, p, 0, 0);
        break;
#else
    case SDPA_FP8_E4M3:
        KVQ_WIDEN(c, p, 0);
        KVQ_FP8(v, c, 3, 7);
        break;
    default: /* SDPA_FP8_E5M2 */
        KVQ_WIDEN(c, p, 0);
        KVQ_FP8(v, c, 2, 15);
        break;
#endif
    }
    (void)e4m3_raw;
    return v;
}

static inline kvq_f32 kvq_codes(sdpa_dtype dt, const unsigned char *row, int64_t i) {
    return kvq_codes_x(dt, row, i, 0);
}

/* The same for elements [i, i + nv), 1 <= nv < KVQ_LANES, in lanes [0, nv) and 0 in the
 * rest, without reading past element i + nv - 1: through a zeroed local copy (code 0 is
 * the value 0 in every format). Out of line: a tail is rare, and inlined into every
 * instance of the fused tiles it tripled the ISA file's compile time. */
static __attribute__((noinline, unused)) kvq_f32 kvq_codes_part(sdpa_dtype dt,
                                                                const unsigned char *row,
                                                                int64_t i, int nv,
                                                                int e4m3_raw) {
    unsigned char tail[KVQ_LANES];
    memset(tail, 0, sizeof tail);
    memcpy(tail, row + (dt == SDPA_I4 ? i / 2 : i),
           dt == SDPA_I4 ? (size_t)(nv + 1) / 2 : (size_t)nv);
    return kvq_codes_x(dt, tail, 0, e4m3_raw);
}
#endif
#ifdef KVQ_FP8_HALF
/* kvq_codes_x's e4m3_raw values times this are value(code), exactly. */
#define KVQ_E4M3_RAW 256.0f
#endif

/* Elements [d0, d0 + n) of a row stored as dt, times scale s, into out[0 .. n). */
static inline void kvq_span(sdpa_dtype dt, const unsigned char *row, int64_t d0, int n, float s,
                            float *out) {
#ifdef KVQ_LANES
    int d = 0;
    for (; d + KVQ_LANES <= n; d += KVQ_LANES) { /* whole registers: constant sizes */
        const kvq_f32 v = kvq_codes(dt, row, d0 + d) * s;
        memcpy(out + d, &v, sizeof v);
    }
    if (d < n) {
        const kvq_f32 v = kvq_codes_part(dt, row, d0 + d, n - d, 0) * s;
        memcpy(out + d, &v, (size_t)(n - d) * sizeof(float));
    }
#else
    for (int d = 0; d < n; d++)
        out[d] = kvq_one(dt, row, d0 + d) * s;
#endif
}

/* out[0 .. dim) = the row at `row` (dtype dt, quantized) dequantized with the fp32
 * scales sc[0 .. dim / group), one per `group` consecutive elements. */
static __attribute__((unused)) void kvq_dequant(int dim, const void *row, sdpa_dtype dt,
                                                const float *sc, int group, float *out) {
    for (int g = 0; g * group < dim; g++)
        kvq_span(dt, (const unsigned char *)row, (int64_t)g * group, group, sc[g], out + g * group);
}

#endif /* SDPA_KVQ_H */
