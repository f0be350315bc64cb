/*
 * vec_avx512.h - the AVX-512 vector layer of the x86 tile functions: a vector is a zmm
 * register of VL = 16 floats (32 registers); tails are k-masks; the exp scales with
 * vscalefps.
 *
 * kernels/avx512/avx512.c includes it (after its #error guard, so the -m flags are on)
 * and then kernels/x86/tiles.h, which writes every tile function, transpose, reduction
 * tree and widening load once in terms of what is here. It is the list of what tiles.h
 * asks of an ISA, with the same names and meanings as kernels/x86/vec_avx2.h: the
 * vector, mask and tail types, loads and stores with masked tails, 16-bit loads and
 * their widening, fma, max and min, comparisons, the three shuffles the transposes and
 * reduction trees are built from, and the two ISA-specific steps of the exp
 * (kernels/exp.h). Each is one or a few intrinsics; there is no loop and no tiling
 * decision here. Plain + - * on vf are the compilers' vector operators (which is how
 * the intrinsics are defined), each rounded on its own: tiles.h never writes a * b + c
 * in one expression, which clang would contract into an FMA.
 */
#ifndef SDPA_VEC_AVX512_H
#define SDPA_VEC_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "../exp.h"
#include "../simd.h"
#include "../ukernel.h"

#define SDPA_VEC_LAYER "avx512"

typedef __m512 vf;       /* a vector of VL floats */
typedef __m256i vh;      /* VL 16-bit values (f16 or bf16 storage) */
typedef __mmask16 vmask; /* a lane predicate, from a comparison */
typedef __mmask16 vtail; /* lanes [0, n) of a vector: a row's tail */

/* VL floats per vector, V_NREG vector registers (zmm0-31). V_MASKS_FREE: a k-masked
 * load or store costs about what a plain one does, so the tiles need no separate
 * unmasked instance for full vectors except in prefill's pv loop (tiles.h, pv_tile_dt;
 * vec_avx2.h has the opposite). */
enum { VL = 16, V_MASKS_FREE = 1, V_NREG = 32 };

/* Unrolling by the lanes of a vector, for loops of at most VL iterations (a tail's
 * columns). A pragma needs the literal. */
#define UNROLL_VL _Pragma("GCC unroll 16")

/* Lanes [0, n) of a vector, 0 <= n <= VL. */
static inline vtail v_tail(int n) { return (vtail)((1u << n) - 1u); }
static inline vtail v_full(void) { return (vtail)0xffff; }

static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_set1(float x) { return _mm512_set1_ps(x); }
static inline vf v_bcast(const float *p) { return _mm512_set1_ps(*p); }
/* The binary16 at p widened exactly (vcvtph2ps, NaN quietened like convert.h), in every
 * lane. */
static inline vf v_bcast_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)*p));
}
static inline vf v_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_storeu(float *p, vf x) { _mm512_storeu_ps(p, x); }

/* Loads of the lanes t: lanes past it are neither read nor faulted on, and are 0 (or
 * fill). v_load_tail may take a plain load when t is a whole vector (vec_avx2.h does;
 * here the masked load is as cheap); v_load_pad_fill is for scratch rows, whose padding
 * up to a whole vector may be read. */
static inline vf v_load_tail(const float *p, vtail t) { return _mm512_maskz_loadu_ps(t, p); }
static inline vf v_load_part(const float *p, vtail t) { return _mm512_maskz_loadu_ps(t, p); }
static inline vf v_load_part_fill(const float *p, vtail t, vf fill) {
    return _mm512_mask_loadu_ps(fill, t, p);
}
static inline vf v_load_pad_fill(const float *p, vtail t, vf fill) {
    return _mm512_mask_loadu_ps(fill, t, p);
}
static inline void v_store_part(float *p, vtail t, vf x) { _mm512_mask_storeu_ps(p, t, x); }
/* x in the lanes t, 0 in the rest. */
static inline vf v_keep(vtail t, vf x) { return _mm512_maskz_mov_ps(t, x); }
/* Lanes [0, n) stored, 1 <= n <= VL. */
static inline void v_store_first(float *p, int n, vf x) { _mm512_mask_storeu_ps(p, v_tail(n), x); }

/* 16-bit storage: the lanes t of p (the rest 0, not read), widened exactly to fp32. F16
 * through vcvtph2ps (exact, quietens NaN like convert.h); BF16 is the top half of a
 * binary32, so a zero-extend and a shift. */
static inline vh v_load_u16(const uint16_t *p, vtail t) { return _mm256_maskz_loadu_epi16(t, p); }
static inline vf v_widen_f16(vh h) { return _mm512_cvtph_ps(h); }
static inline vf v_widen_bf16(vh h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline vf v_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); } /* a b + c */
/* vmaxps returns b when either is NaN. */
static inline vf v_max(vf a, vf b) { return _mm512_max_ps(a, b); }

/* Comparisons, for softmax's mu = (mx == -inf ? 0 : mx) and the exp's live lanes;
 * v_zero_where gives 0 in the lanes of m, x elsewhere. */
static inline vf v_zero_where(vmask m, vf x) {
    return _mm512_mask_blend_ps(m, x, _mm512_setzero_ps());
}
static inline vmask v_cmp_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
/* !(a < b): true for NaN */
static inline vmask v_cmp_nlt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_NLT_UQ); }
/* The lanes whose top bit is set, as bits 0..VL-1 (vpmovd2m, AVX512DQ). */
static inline unsigned v_sign_bits(vf x) {
    return (unsigned)_mm512_movepi32_mask(_mm512_castps_si512(x));
}

/* The shuffles of the transposes and reduction trees. Within each 128-bit lane:
 * v_unpacklo/hi interleave the floats of a and b (lo: a0 b0 a1 b1, hi: a2 b2 a3 b3),
 * v_unpacklo2/hi2 their pairs (lo: a0 a1 b0 b1, hi: a2 a3 b2 b3; vunpcklpd/vunpckhpd).
 * Across lanes: v_lanes_even/odd are the even/odd 128-bit lanes of a then of b
 * (vshuff32x4 with 0x88: a0 a2 b0 b2, 0xdd: a1 a3 b1 b3). */
static inline vf v_unpacklo(vf a, vf b) { return _mm512_unpacklo_ps(a, b); }
static inline vf v_unpackhi(vf a, vf b) { return _mm512_unpackhi_ps(a, b); }
static inline vf v_unpacklo2(vf a, vf b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
static inline vf v_unpackhi2(vf a, vf b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
static inline vf v_lanes_even(vf a, vf b) { return _mm512_shuffle_f32x4(a, b, 0x88); }
static inline vf v_lanes_odd(vf a, vf b) { return _mm512_shuffle_f32x4(a, b, 0xdd); }

/* What else the exp needs (kernels/exp.h): the clamp (vminps returns b when either is
 * NaN), the reduction, and the three ISA steps. */
static inline vf v_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf v_fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); } /* c - a b */

/* Step 3 of kernels/exp.h: n = round(x log2 e), from the float product. aux is for
 * v_exp_scale (unused here). */
ALWAYS_INLINE vf v_exp_round(vf x, vf *aux) {
    const vf n = _mm512_roundscale_ps(x * _mm512_set1_ps(LOG2E),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    *aux = n;
    return n;
}

/* Step 1 of kernels/exp.h by the clamp x = max(EXP_FLOOR, x) (vmaxps returns its second
 * operand, x, when x is NaN): no lane mask, whose comparison would take a slot of the
 * FMA pipes on AMD Zen 4 (docs/PERFORMANCE.md, "The exp in seven operations"); every
 * lane is live. */
ALWAYS_INLINE vmask v_exp_low(vf *x) {
    *x = _mm512_max_ps(_mm512_set1_ps(EXP_FLOOR), *x);
    return (vmask)0xffff;
}

/* Step 5: p 2^n by vscalefps (exact for every n; subnormal results rounded once, and
 * those of the clamped lanes to +0). */
ALWAYS_INLINE vf v_exp_scale(vf p, vf n, vf aux, vmask live, const int any_x) {
    (void)aux;
    (void)live;
    (void)any_x;
    return _mm512_scalef_ps(p, n);
}

/* For qk_rows: keeps x in a register, so the compiler may not fold its load into the
 * instructions that use it (two uses would then be two loads). */
static inline vf v_pin(vf x) {
    __asm__("" : "+v"(x));
    return x;
}

#endif /* SDPA_VEC_AVX512_H */
