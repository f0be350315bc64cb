/*
 * vec_avx2.h - the AVX2 vector layer of the x86 tile functions: a vector is a ymm
 * register of VL = 8 floats (16 registers); tails are vmaskmovps masks (AVX2 has no
 * k-masks), 16-bit rows are read through 32-bit masked loads plus one element, and the
 * exp builds 2^n in the exponent field.
 *
 * kernels/avx2/avx2.c includes it (after its #error guard, so the -m flags are on) and
 * then kernels/x86/tiles.h, which writes every tile function, transpose, reduction tree
 * and widening load once in terms of what is here. Same names and meanings as
 * kernels/x86/vec_avx512.h, which lists them; each is one or a few intrinsics, with no
 * loop and no tiling decision.
 */
#ifndef SDPA_VEC_AVX2_H
#define SDPA_VEC_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "../exp.h"
#include "../simd.h"
#include "../ukernel.h"

#define SDPA_VEC_LAYER "avx2"

typedef __m256 vf;    /* a vector of VL floats */
typedef __m128i vh;   /* VL 16-bit values (f16 or bf16 storage) */
typedef __m256 vmask; /* a lane predicate, from a comparison: all-ones lanes */
/* Lanes [0, n) of a vector, a row's tail: the vmaskmovps mask, and n for the 16-bit
 * loads (which have no masked form) and for taking the plain load when n = VL. */
typedef struct {
    __m256i m;
    int n;
} vtail;

/* VL floats per vector, V_NREG vector registers (ymm0-15). Masked loads and stores
 * (vmaskmovps) cost more than plain ones, so pv keeps a separate unmasked instance of
 * each tile for chunks with no Dv tail (V_MASKS_FREE = 0). */
enum { VL = 8, V_MASKS_FREE = 0, V_NREG = 16 };

/* Unrolling by the lanes of a vector, for loops of at most VL iterations (a tail's
 * columns). A pragma needs the literal. */
#define UNROLL_VL _Pragma("GCC unroll 8")

/* Lanes [0, n) of a vector, 0 <= n <= VL. */
static inline vtail v_tail(int n) {
    const vtail t = {
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), n};
    return t;
}
static inline vtail v_full(void) { return v_tail(VL); }

static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_set1(float x) { return _mm256_set1_ps(x); }
static inline vf v_bcast(const float *p) { return _mm256_broadcast_ss(p); }
/* The binary16 at p widened exactly (vcvtph2ps, NaN quietened like convert.h), in every
 * lane. */
static inline vf v_bcast_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_set1_epi16((short)*p));
}
static inline vf v_loadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_storeu(float *p, vf x) { _mm256_storeu_ps(p, x); }

/* Loads of the lanes t: lanes past it are neither read nor faulted on, and are 0 (or
 * fill). v_load_tail takes the plain load when t is a whole vector; v_load_pad_fill is
 * for scratch rows, whose padding up to a whole vector may be read: a plain load and a
 * blend, cheaper than vmaskmovps. */
static inline vf v_load_tail(const float *p, vtail t) {
    return t.n == VL ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, t.m);
}
static inline vf v_load_part(const float *p, vtail t) { return _mm256_maskload_ps(p, t.m); }
static inline vf v_load_part_fill(const float *p, vtail t, vf fill) {
    return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, t.m), _mm256_castsi256_ps(t.m));
}
static inline vf v_load_pad_fill(const float *p, vtail t, vf fill) {
    return _mm256_blendv_ps(fill, _mm256_loadu_ps(p), _mm256_castsi256_ps(t.m));
}
static inline void v_store_part(float *p, vtail t, vf x) { _mm256_maskstore_ps(p, t.m, x); }
/* x in the lanes t, 0 in the rest. */
static inline vf v_keep(vtail t, vf x) { return _mm256_and_ps(x, _mm256_castsi256_ps(t.m)); }
/* Lanes [0, n) stored, 1 <= n <= VL: a whole vector without the mask. */
static inline void v_store_first(float *p, int n, vf x) {
    if (n == VL)
        _mm256_storeu_ps(p, x);
    else
        _mm256_maskstore_ps(p, v_tail(n).m, x);
}

/* 16-bit storage: the lanes t of p (the rest 0, not read: pairs through a 32-bit masked
 * load, an odd last one inserted alone), widened exactly to fp32. F16 through vcvtph2ps
 * (exact, quietens NaN like convert.h); BF16 is the top half of a binary32, so a
 * zero-extend and a shift. */
static inline vh v_load_u16(const uint16_t *p, vtail t) {
    const int nd = t.n;
    if (nd == 8)
        return _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m128i pairs = _mm_cmpgt_epi32(_mm_set1_epi32(nd / 2), _mm_setr_epi32(0, 1, 2, 3));
    __m128i v = _mm_maskload_epi32((const int *)(const void *)p, pairs);
    if (nd & 1) {
        const __m128i lane = _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7);
        const __m128i at = _mm_cmpeq_epi16(_mm_set1_epi16((short)(nd - 1)), lane);
        v = _mm_or_si128(v, _mm_and_si128(at, _mm_set1_epi16((short)p[nd - 1])));
    }
    return v;
}
static inline vf v_widen_f16(vh h) { return _mm256_cvtph_ps(h); }
static inline vf v_widen_bf16(vh h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline vf v_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); } /* a b + c */
/* vmaxps returns b when either is NaN. */
static inline vf v_max(vf a, vf b) { return _mm256_max_ps(a, b); }

/* Comparisons, for softmax's mu = (mx == -inf ? 0 : mx) and the exp's live lanes;
 * v_zero_where gives 0 in the lanes of m, x elsewhere. */
static inline vf v_zero_where(vmask m, vf x) { return _mm256_andnot_ps(m, x); }
static inline vmask v_cmp_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
/* !(a < b): true for NaN */
static inline vmask v_cmp_nlt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_NLT_UQ); }
/* The lanes whose top bit is set, as bits 0..VL-1 (vmovmskps). */
static inline unsigned v_sign_bits(vf x) { return (unsigned)_mm256_movemask_ps(x); }

/* The shuffles of the transposes and reduction trees (vec_avx512.h gives their
 * meaning): unpck within 128-bit lanes, pairs of pairs by vshufps (0x44: a0 a1 b0 b1,
 * 0xee: a2 a3 b2 b3), the two 128-bit lanes by vperm2f128 (0x20: a0 b0, 0x31: a1 b1). */
static inline vf v_unpacklo(vf a, vf b) { return _mm256_unpacklo_ps(a, b); }
static inline vf v_unpackhi(vf a, vf b) { return _mm256_unpackhi_ps(a, b); }
static inline vf v_unpacklo2(vf a, vf b) { return _mm256_shuffle_ps(a, b, 0x44); }
static inline vf v_unpackhi2(vf a, vf b) { return _mm256_shuffle_ps(a, b, 0xee); }
static inline vf v_lanes_even(vf a, vf b) { return _mm256_permute2f128_ps(a, b, 0x20); }
static inline vf v_lanes_odd(vf a, vf b) { return _mm256_permute2f128_ps(a, b, 0x31); }

/* What else the exp needs (kernels/exp.h): the clamp (vminps returns b when either is
 * NaN), the reduction, and the three ISA steps. */
static inline vf v_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf v_fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); } /* c - a b */

/* Step 1 of kernels/exp.h by a mask: live = !(x < EXP_LO), true for NaN (the scaling
 * below cannot reach under 2^-126, so the dead lanes are zeroed by it). */
ALWAYS_INLINE vmask v_exp_low(vf *x) {
    return _mm256_cmp_ps(*x, _mm256_set1_ps(EXP_LO), _CMP_NLT_UQ);
}

/* Step 3 of kernels/exp.h: n = round(x log2 e) by EXP_SHIFTER (the exact product,
 * rounded once by the FMA); aux = n + shifter, whose low mantissa bits v_exp_scale
 * turns into 2^n. */
ALWAYS_INLINE vf v_exp_round(vf x, vf *aux) {
    const vf shifter = _mm256_set1_ps(EXP_SHIFTER);
    *aux = _mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), shifter);
    return *aux - shifter;
}

/* Step 5: p 2^n in the live lanes, 0 elsewhere, 2^n built in the exponent field. That
 * field holds n <= 127 only; with any_x (arguments up to EXP_HI) the lanes where n = 128
 * (n > 127.5) use 2^127 and 2 p instead. Lanes below EXP_LO, where n would leave the
 * field, are the ones live zeroes. */
ALWAYS_INLINE vf v_exp_scale(vf p, vf n, vf aux, vmask live, const int any_x) {
    if (any_x) {
        const vf n128 = _mm256_cmp_ps(n, _mm256_set1_ps(127.5f), _CMP_GT_OQ);
        p = _mm256_blendv_ps(p, p + p, n128);
        aux = aux - _mm256_and_ps(n128, _mm256_set1_ps(1.0f));
    }
    const vf scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(aux), 23));
    return _mm256_and_ps(p * scale, live);
}

/* For qk_rows: keeps x in a register, so the compiler may not fold its load into the
 * instructions that use it (two uses would then be two loads). */
static inline vf v_pin(vf x) {
    __asm__("" : "+x"(x));
    return x;
}

#endif /* SDPA_VEC_AVX2_H */
