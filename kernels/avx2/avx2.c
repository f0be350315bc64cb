/*
 * avx2.c - the AVX2 + FMA kernel table (with F16C for fp16 storage): 8-float ymm
 * vectors, 16 registers, vmaskmov tails.
 *
 * It is the fast path on x86-64 CPUs with AVX2 and FMA but no usable AVX-512
 * (dispatch.c decides). It implements the contract of kernels/ukernel.h tile by tile,
 * with the same meaning as kernels/scalar/scalar.c; it is not bit-identical to the scalar
 * table (FMA contraction, its own exp, another summation order) and it knows nothing of
 * masks, heads or threads. Every tail (keys, rows, head dims not multiples of 8 or of a
 * register tile) runs through the same vector code with masked loads and stores
 * (vmaskmovps; 16-bit rows with 32-bit masked loads plus one element), so nothing
 * outside the caller's rows or the contract's scratch regions is touched.
 *
 * Kp layout (private to this file): keys padded to a multiple of 8 (kp_align), cut into
 * strips of 16 keys, the last strip 8 wide when the padded count is an odd number of 8s.
 * A strip starting at key j0 of width W lives at kp + j0 * dk as [d][W]: at every d, its
 * W keys are contiguous, so qk streams one or two whole ymm per d and broadcasts Q.
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels/avx2/ needs -mavx2 -mfma -mf16c (Makefile ISAFLAGS_avx2)"
#endif

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "../ukernel.h"

/* The tile functions below are written once with compile-time row/vector counts and
 * instantiated per count; forcing the inlining is what turns their accumulator arrays
 * into registers. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Full unrolling for loops whose count is a compile-time constant once the tile is
 * instantiated (rows, vectors, transposes), so arrays of vectors become registers; gcc
 * and clang spell it differently. */
#if defined(__clang__)
#define UNROLL_FULL _Pragma("clang loop unroll(full)")
#else
#define UNROLL_FULL _Pragma("GCC unroll 16")
#endif

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* All-ones in lanes [0, k) of 8, 0 <= k <= 8: the mask operand of vmaskmovps. */
static inline __m256i lanes(int k) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ---- exp ------------------------------------------------------------------------ */

/* Constants of the exp, shared with kernels/avx512 (see there for their derivation):
 * EXP_LO is the smallest float at or above ln(FLT_MIN) (0xc2aeac4f), EXP_HI clamps +inf
 * to a value that still overflows, LN2_HI + LN2_LO is ln 2 within 9e-17 (0x3f317218,
 * 0xb102e308), x - n * LN2_HI is exact in one FMA for |n| <= 128. */
#define EXP_LO (-87.33654022216797f)
#define EXP_HI 89.0f
#define LOG2E 1.44269502162933349609375f
#define LN2_HI 0.693147182464599609375f
#define LN2_LO (-1.904654323148236e-09f)
/* 1.5 * 2^23 + 127: adding it to x log2 e rounds to an integer n (the float's unit is 1
 * there) and leaves n + 127, the biased exponent of 2^n, in the low mantissa bits. */
#define EXP_SHIFTER 12583039.0f

/* p(r) = 1 + r + C2 r^2 + ... + C6 r^6 ~ exp(r) on [-ln2/2, ln2/2], the minimax fit for
 * relative error with the constant term fixed to 1 (so exp(0) = 1 exactly), computed by
 * a Remez exchange in mpmath at 40 digits; its error is 2.6e-9, 2.9e-8 once the
 * coefficients are rounded to float (the fitted linear coefficient, 1 + 5e-8, rounds to
 * exactly 1). The same polynomial as kernels/avx512. */
#define EXP_C2 0x1.000002p-1f
#define EXP_C3 0x1.5553c2p-3f
#define EXP_C4 0x1.55515ep-5f
#define EXP_C5 0x1.12903ep-7f
#define EXP_C6 0x1.709b64p-10f

/* exp of 8 lanes: n = round(x log2 e) by the shifter, r = x - n ln 2 (Cody-Waite, two
 * FMAs), exp(x) = p(r) * 2^n with 2^n built in the exponent field. That field holds
 * n <= 127 only, while x in (88.38, 88.72] rounds to n = 128 and still has a finite exp:
 * with any_x (vexp) such lanes use 2^127 and 2 p(r) instead; softmax passes any_x = 0,
 * its arguments (s - max, m_run - max) being never positive (or NaN). Lanes below EXP_LO
 * (-inf included), where n would leave the exponent field, are zeroed by the mask; NaN
 * fails that comparison's "less than" and propagates through every step.
 * Measured max relative error over [-104, 89]: 9.65e-8 (0.81 ulp) on the 2^20 points of
 * tests/test_ukernel.c, 1.004e-7 (0.84 ulp, at x = -70.354218) over every one of the
 * 2.24e9 floats in that range against double exp; no range or special-value errors. */
ALWAYS_INLINE __m256 exp8(__m256 x, const int any_x) {
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_NLT_UQ);
    if (any_x)
        x = _mm256_min_ps(_mm256_set1_ps(EXP_HI), x); /* min returns x when x is NaN */
    const __m256 shifter = _mm256_set1_ps(EXP_SHIFTER);
    __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), shifter);
    const __m256 n = _mm256_sub_ps(t, shifter);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_set1_ps(EXP_C6);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    if (any_x) {
        const __m256 n128 = _mm256_cmp_ps(n, _mm256_set1_ps(127.5f), _CMP_GT_OQ);
        p = _mm256_blendv_ps(p, _mm256_add_ps(p, p), n128);
        t = _mm256_sub_ps(t, _mm256_and_ps(n128, _mm256_set1_ps(1.0f)));
    }
    const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
    return _mm256_and_ps(_mm256_mul_ps(p, scale), live);
}

static void avx2_vexp(int n, const float *x, float *y) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i), 1));
    if (i < n) {
        const __m256i t = lanes(n - i);
        _mm256_maskstore_ps(y + i, t, exp8(_mm256_maskload_ps(x + i, t), 1));
    }
}

/* ---- loads, pack_k --------------------------------------------------------------- */

/* nd <= 8 16-bit elements, zero-extended in a 128-bit vector, reading nothing past
 * them: pairs through a 32-bit masked load, an odd last one inserted alone. */
static inline __m128i load_u16(const uint16_t *p, int nd) {
    if (nd == 8)
        return _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m128i pairs =
        _mm_cmpgt_epi32(_mm_set1_epi32(nd / 2), _mm_setr_epi32(0, 1, 2, 3));
    __m128i v = _mm_maskload_epi32((const int *)(const void *)p, pairs);
    if (nd & 1) {
        const __m128i at = _mm_cmpeq_epi16(_mm_set1_epi16((short)(nd - 1)),
                                           _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
        v = _mm_or_si128(v, _mm_and_si128(at, _mm_set1_epi16((short)p[nd - 1])));
    }
    return v;
}

/* Up to 8 elements (nd, mask mk) of a row stored as dt, widened exactly to fp32: F16
 * through vcvtph2ps (exact, quietens NaN like convert.h); BF16 is the top half of a
 * binary32, so a zero-extend and a shift. */
ALWAYS_INLINE __m256 load_f32(const void *row, int i, sdpa_dtype dt, int nd, __m256i mk) {
    if (dt == SDPA_F16)
        return _mm256_cvtph_ps(load_u16((const uint16_t *)row + i, nd));
    if (dt == SDPA_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(load_u16((const uint16_t *)row + i, nd)), 16));
    if (nd == 8)
        return _mm256_loadu_ps((const float *)row + i);
    return _mm256_maskload_ps((const float *)row + i, mk);
}

/* In-register 8x8 transpose: r[i] holds row i; afterwards r[c] holds column c. Pairs of
 * floats (unpck), pairs of pairs (shufps), then 128-bit halves (vperm2f128). */
ALWAYS_INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    UNROLL_FULL
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4h + c] holds rows 4h..4h+3 of columns c (low half) and c + 4 (high half) */
    UNROLL_FULL
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
    }
    UNROLL_FULL
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

/* One dt at a time so the conversion is hoisted out of the loops. Each 8 keys x 8 dims
 * block is loaded as rows (masked past dk, zero rows past n), transposed in registers
 * and stored as 8 key-vectors: one pass over K, no scalar element moves. K comes from
 * the caller's memory, usually L3 (a head's K and V outgrow L2 beyond ~1000 keys at
 * D = 128) in short row-strided streams the hardware prefetcher does not pick up, so
 * the next 8 rows are prefetched while this panel is transposed. */
ALWAYS_INLINE void pack_k_dt(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                             float *kp) {
    const size_t es = dt == SDPA_F32 ? 4 : 2;
    const int np = (n + 7) & ~7;
    for (int j0 = 0; j0 < np; j0 += 8) {
        const int nk = min_int(8, n - j0);
        const int s0 = j0 & ~15, w = min_int(16, np - s0), h = j0 - s0;
        float *dst = kp + (size_t)s0 * (size_t)dk + h;
        const char *src = (const char *)k + (size_t)j0 * (size_t)ldk * es;
        for (int i = 8; i < min_int(16, n - j0); i++)
            for (size_t b = 0; b < (size_t)dk * es; b += 64)
                _mm_prefetch(src + (size_t)i * (size_t)ldk * es + b, _MM_HINT_T0);
        for (int d0 = 0; d0 < dk; d0 += 8) {
            const int nd = min_int(8, dk - d0);
            const __m256i mk = lanes(nd);
            __m256 r[8];
            UNROLL_FULL
            for (int i = 0; i < 8; i++)
                r[i] = i < nk ? load_f32(src + (size_t)i * (size_t)ldk * es, d0, dt, nd, mk)
                              : _mm256_setzero_ps();
            transpose8(r);
#pragma GCC unroll 8
            for (int c = 0; c < nd; c++)
                _mm256_storeu_ps(dst + (size_t)(d0 + c) * (size_t)w, r[c]);
        }
    }
}

static void avx2_pack_k(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt, float *kp) {
    if (dt == SDPA_F16)
        pack_k_dt(n, dk, k, ldk, SDPA_F16, kp);
    else if (dt == SDPA_BF16)
        pack_k_dt(n, dk, k, ldk, SDPA_BF16, kp);
    else
        pack_k_dt(n, dk, k, ldk, SDPA_F32, kp);
}

/* ---- reductions ----------------------------------------------------------------- */

/* v[0..8) -> one vector whose lane i is the sum (max) of v[i]'s lanes: a transposing
 * reduction tree, 7 combining steps of two shuffles and one op for 8 vectors instead of
 * 8 separate 3-step horizontal reductions. Every lane's result is the same tree over its
 * vector's lanes ((0+2)+(1+3) within each 128-bit half, then the two halves), so lane i
 * depends on v[i] alone, not on which vectors share the call (softmax's rows, qk_rows'
 * row-by-key products). */
#define REDUCE_TREE(NAME, OP)                                                            \
    ALWAYS_INLINE __m256 NAME(const __m256 v[8]) {                                       \
        __m256 a[4];                                                                     \
        UNROLL_FULL /* lane pairs: [A0 B0 A1 B1] per 128-bit half */                     \
        for (int i = 0; i < 4; i++)                                                      \
            a[i] = OP(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]),                        \
                      _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));                       \
        /* [A B C D] per 128-bit half, then across the halves */                         \
        const __m256 b0 = OP(_mm256_shuffle_ps(a[0], a[1], 0x44),                        \
                             _mm256_shuffle_ps(a[0], a[1], 0xee));                       \
        const __m256 b1 = OP(_mm256_shuffle_ps(a[2], a[3], 0x44),                        \
                             _mm256_shuffle_ps(a[2], a[3], 0xee));                       \
        return OP(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31)); \
    }
REDUCE_TREE(reduce8_max, _mm256_max_ps)
REDUCE_TREE(reduce8_add, _mm256_add_ps)

/* ---- qk ------------------------------------------------------------------------- */

/* Query rows per qk register tile. */
#define QK_MR 6

/* S[0..MR)[0..8 NV) = scale * Q Kp^T for one strip of 8 NV keys, dk deep.
 * Register budget (NV = 2, MR = 6): 12 accumulators + 2 key vectors + 1 broadcast of
 * 16 ymm. Per d: 2 key loads, 6 Q broadcasts, 12 FMAs (6 cycles at two FMA pipes), so
 * each accumulator's FMA chain has 6 cycles to cover the 4-cycle FMA latency. */
ALWAYS_INLINE void qk_tile(const int MR, const int NV, int dk, float scale, const float *q,
                           int ldq, const float *ks, float *s, int lds) {
    __m256 acc[QK_MR][2];
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (int d = 0; d < dk; d++) {
        const float *kd = ks + (size_t)d * (size_t)(8 * NV);
        const __m256 b0 = _mm256_loadu_ps(kd);
        const __m256 b1 = NV > 1 ? _mm256_loadu_ps(kd + 8) : b0;
        UNROLL_FULL
        for (int r = 0; r < MR; r++) {
            const __m256 a = _mm256_broadcast_ss(q + (size_t)r * (size_t)ldq + (size_t)d);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            if (NV > 1)
                acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            _mm256_storeu_ps(s + (size_t)r * (size_t)lds + 8 * c, _mm256_mul_ps(acc[r][c], vs));
}

#define QK_ARGS int dk, float scale, const float *q, int ldq, const float *ks, float *s, int lds
#define REPEAT_1_6(X) X(1) X(2) X(3) X(4) X(5) X(6)
#define REPEAT_1_12(X) REPEAT_1_6(X) X(7) X(8) X(9) X(10) X(11) X(12)

/* One function per tile shape, so each is compiled with constant counts (calls to the
 * inline tile from the arms of a switch may be merged back into one call with a variable
 * count before inlining, which leaves the accumulators in memory). */
#define X(M)                                                                             \
    static void qk_##M##x1(QK_ARGS) { qk_tile(M, 1, dk, scale, q, ldq, ks, s, lds); }    \
    static void qk_##M##x2(QK_ARGS) { qk_tile(M, 2, dk, scale, q, ldq, ks, s, lds); }
REPEAT_1_6(X)
#undef X

/* qk_fn[NV - 1][MR]: the tile of MR rows by NV key vectors. */
#define X1(M) qk_##M##x1,
#define X2(M) qk_##M##x2,
static void (*const qk_fn[2][QK_MR + 1])(QK_ARGS) = {{NULL, REPEAT_1_6(X1)},
                                                     {NULL, REPEAT_1_6(X2)}};
#undef X1
#undef X2

static void avx2_qk(int m, int n, int dk, float scale, const float *q, int ldq, const float *kp,
                    float *s, int lds) {
    const int np = (n + 7) & ~7;
    for (int r0 = 0; r0 < m; r0 += QK_MR) {
        const int mr = min_int(QK_MR, m - r0);
        const float *qr = q + (size_t)r0 * (size_t)ldq;
        float *sr = s + (size_t)r0 * (size_t)lds;
        for (int j0 = 0; j0 < np; j0 += 16) {
            const float *ks = kp + (size_t)j0 * (size_t)dk;
            qk_fn[np - j0 >= 16][mr](dk, scale, qr, ldq, ks, sr + j0, lds);
        }
    }
}

/* ---- qk_rows ------------------------------------------------------------------- */

/* Rows per qk_rows pass: 2 keys x 4 rows of accumulators + 2 K slices + 1 Q slice fit
 * the 16 ymm registers. */
#define QKR_MR 4

/* Lines [0, nb) bytes of a row of caller memory into L1, ahead of its use: see
 * SDPA_PREFETCH_AHEAD. */
ALWAYS_INLINE void prefetch_row(const char *row, size_t nb) {
    for (size_t b = 0; b < nb; b += 64) /* 64-byte lines */
        _mm_prefetch(row + b, _MM_HINT_T0);
}

/* The dot products of R query rows with NK = 1 or 2 keys (rows of K, read in place) as
 * lane-wise partial sums: t[r * 8 + i] for key i gets sum over 8-element slices of
 * Q[r] * K[key]; the last slice is masked (caller memory, and Q's padding is off limits).
 * Two keys share each Q slice load (held in a register: the empty asm keeps the compiler
 * from folding it into both FMAs as two loads). */
ALWAYS_INLINE void qkr_keys(const int R, const int NK, const sdpa_dtype dt, int dk,
                            const float *q, int ldq, const char *k0, const char *k1,
                            __m256 *t) {
    __m256 c0[QKR_MR], c1[QKR_MR];
    UNROLL_FULL
    for (int r = 0; r < R; r++)
        c0[r] = c1[r] = _mm256_setzero_ps();
    int d0 = 0;
    for (; d0 + 8 <= dk; d0 += 8) {
        const __m256 x0 = load_f32(k0, d0, dt, 8, lanes(8));
        const __m256 x1 = NK > 1 ? load_f32(k1, d0, dt, 8, lanes(8)) : x0;
        UNROLL_FULL
        for (int r = 0; r < R; r++) {
            __m256 qv = _mm256_loadu_ps(q + (size_t)r * (size_t)ldq + d0);
            if (NK > 1)
                __asm__("" : "+x"(qv));
            c0[r] = _mm256_fmadd_ps(qv, x0, c0[r]);
            if (NK > 1)
                c1[r] = _mm256_fmadd_ps(qv, x1, c1[r]);
        }
    }
    if (d0 < dk) {
        const __m256i mk = lanes(dk - d0);
        const __m256 x0 = load_f32(k0, d0, dt, dk - d0, mk);
        const __m256 x1 = NK > 1 ? load_f32(k1, d0, dt, dk - d0, mk) : x0;
        UNROLL_FULL
        for (int r = 0; r < R; r++) {
            const __m256 qv = _mm256_maskload_ps(q + (size_t)r * (size_t)ldq + d0, mk);
            c0[r] = _mm256_fmadd_ps(qv, x0, c0[r]);
            if (NK > 1)
                c1[r] = _mm256_fmadd_ps(qv, x1, c1[r]);
        }
    }
    UNROLL_FULL
    for (int r = 0; r < R; r++) {
        t[r * 8] = c0[r];
        if (NK > 1)
            t[r * 8 + 1] = c1[r];
    }
}

/* S[0..R)[0..n) for R <= QKR_MR rows, 8 keys at a time: each key pair's partial-sum
 * vectors go to a stack buffer (R x 8 ymm, in L1), and the reduction tree turns row r's
 * 8 vectors into its 8 scores in key order, scaled and stored (masked in the tail strip,
 * whose missing keys are zero vectors, never read). A score is one FMA chain over dk then
 * the fixed tree, whatever R and whichever key shares its loads, so a row's bits do not
 * depend on the other rows of the call. K is read a pair of adjacent rows at a time,
 * each from start to end, and the rows SDPA_PREFETCH_AHEAD bytes ahead are prefetched
 * (kernels/avx512 measures why).
 * Register budget: 2 R <= 8 accumulators + 2 K slices + 1 Q slice of 16 ymm. Per key:
 * dk / 8 K loads and R dk / 16 Q loads per R dk / 8 FMAs, then 21 shuffles and adds per
 * row per 8 keys. */
ALWAYS_INLINE void qkr_rows(const int R, const sdpa_dtype dt, int n, int dk, float scale,
                            const float *q, int ldq, const void *k, int64_t ldk, float *s,
                            int lds) {
    const size_t rowb = (size_t)dk * (dt == SDPA_F32 ? 4 : 2);
    const size_t ldkb = (size_t)ldk * (dt == SDPA_F32 ? 4 : 2);
    const int ahead = (int)(SDPA_PREFETCH_AHEAD / rowb) + 1;
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 t[QKR_MR * 8];
    for (int j0 = 0; j0 < n; j0 += 8) {
        const int nk = min_int(8, n - j0);
        const char *ks = (const char *)k + (size_t)j0 * ldkb;
        int jj = 0;
        for (; jj + 2 <= nk; jj += 2) {
            for (int pj = jj + ahead; pj < jj + ahead + 2 && j0 + pj < n; pj++)
                prefetch_row(ks + (size_t)pj * ldkb, rowb);
            qkr_keys(R, 2, dt, dk, q, ldq, ks + (size_t)jj * ldkb, ks + (size_t)(jj + 1) * ldkb,
                     t + jj);
        }
        if (jj < nk)
            qkr_keys(R, 1, dt, dk, q, ldq, ks + (size_t)jj * ldkb, NULL, t + jj);
        for (jj += jj < nk; jj < 8; jj++)
            UNROLL_FULL
            for (int r = 0; r < R; r++)
                t[r * 8 + jj] = _mm256_setzero_ps();
        UNROLL_FULL
        for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_mul_ps(reduce8_add(t + 8 * r), vs);
            if (nk == 8)
                _mm256_storeu_ps(s + (size_t)r * (size_t)lds + j0, x);
            else
                _mm256_maskstore_ps(s + (size_t)r * (size_t)lds + j0, lanes(nk), x);
        }
    }
}

#define QKR_ARGS                                                                         \
    int n, int dk, float scale, const float *q, int ldq, const void *k, int64_t ldk, float *s, \
        int lds

/* One function per (rows, storage type), for the same reason as qk_MxNV. */
#define QKR_FN(R, DT, NAME)                                                              \
    static void qkr_##R##_##NAME(QKR_ARGS) {                                             \
        qkr_rows(R, DT, n, dk, scale, q, ldq, k, ldk, s, lds);                           \
    }
#define QKR_DT(DT, NAME)                                                                 \
    QKR_FN(1, DT, NAME) QKR_FN(2, DT, NAME) QKR_FN(3, DT, NAME) QKR_FN(4, DT, NAME)
QKR_DT(SDPA_F32, f32)
QKR_DT(SDPA_F16, f16)
QKR_DT(SDPA_BF16, bf16)
#undef QKR_DT
#undef QKR_FN

/* qkr_fn[dt][R] (sdpa_dtype values are 0, 1, 2). */
#define QKR_TABLE(NAME) {NULL, qkr_1_##NAME, qkr_2_##NAME, qkr_3_##NAME, qkr_4_##NAME}
static void (*const qkr_fn[3][QKR_MR + 1])(QKR_ARGS) = {QKR_TABLE(f32), QKR_TABLE(f16),
                                                        QKR_TABLE(bf16)};
#undef QKR_TABLE

/* Rows in passes of QKR_MR, the last pass with the rest. */
static void avx2_qk_rows(int m, int n, int dk, float scale, const float *q, int ldq,
                         const void *k, int64_t ldk, sdpa_dtype dt, float *s, int lds) {
    for (int r0 = 0; r0 < m; r0 += QKR_MR)
        qkr_fn[dt][min_int(QKR_MR, m - r0)](n, dk, scale, q + (size_t)r0 * (size_t)ldq, ldq, k,
                                            ldk, s + (size_t)r0 * (size_t)lds, lds);
}

/* ---- softmax -------------------------------------------------------------------- */

/* 8 rows at a time, in two passes, so that each pass is a stream of independent rows
 * rather than one long dependency chain per row (max -> reduce -> exp -> sum): every
 * row's max vector, reduced for the 8 rows at once and combined with m_run; mu, alpha
 * and m_run as one vector; then p = exp(s - mu) stored in place, and the row sums
 * reduced at once into l_run. Rows past m take part as -inf / 0 vectors and are never
 * stored. The tail vector of a row is blended to -inf in its dead lanes (exp gives 0
 * there) and stored under its mask, so S's padding (inside the row's lds, so readable)
 * is neither used nor written. NaN scores lose every max (vmaxps returns its second
 * operand, the running max, when the first is NaN) and reach l_run through the sum. */
static void avx2_softmax(int m, int n, float *s, int lds, float *m_run, float *l_run,
                         float *alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const int nfull = n & ~7;
    const int ntail = n - nfull;
    const __m256i tail = lanes(ntail);
    const __m256 tailf = _mm256_castsi256_ps(tail);
    for (int r0 = 0; r0 < m; r0 += 8) {
        const int rows = min_int(8, m - r0);
        const __m256i rm = lanes(rows);
        float *s0 = s + (size_t)r0 * (size_t)lds;
        __m256 acc[8];
        for (int i = 0; i < 8; i++) {
            const float *sr = s0 + (size_t)i * (size_t)lds;
            __m256 vmax = ninf;
            if (i < rows) {
                for (int j = 0; j < nfull; j += 8)
                    vmax = _mm256_max_ps(_mm256_loadu_ps(sr + j), vmax);
                if (ntail)
                    vmax = _mm256_max_ps(_mm256_blendv_ps(ninf, _mm256_loadu_ps(sr + nfull), tailf),
                                         vmax);
            }
            acc[i] = vmax;
        }
        const __m256 mold =
            _mm256_blendv_ps(ninf, _mm256_maskload_ps(m_run + r0, rm), _mm256_castsi256_ps(rm));
        const __m256 mx = _mm256_max_ps(reduce8_max(acc), mold);
        /* a row that has seen only masked keys: subtract 0, so exp(-inf) = 0 */
        const __m256 mu = _mm256_andnot_ps(_mm256_cmp_ps(mx, ninf, _CMP_EQ_OQ), mx);
        const __m256 a = exp8(_mm256_sub_ps(mold, mu), 0);
        _mm256_maskstore_ps(m_run + r0, rm, mx);
        _mm256_maskstore_ps(alpha + r0, rm, a);
        float mus[8];
        _mm256_storeu_ps(mus, mu);
        for (int i = 0; i < 8; i++) {
            float *sr = s0 + (size_t)i * (size_t)lds;
            __m256 vsum = _mm256_setzero_ps();
            if (i < rows) {
                const __m256 vmu = _mm256_set1_ps(mus[i]);
#pragma GCC unroll 8
                for (int j = 0; j < nfull; j += 8) {
                    const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(sr + j), vmu), 0);
                    _mm256_storeu_ps(sr + j, p);
                    vsum = _mm256_add_ps(vsum, p);
                }
                if (ntail) {
                    const __m256 x = _mm256_blendv_ps(ninf, _mm256_loadu_ps(sr + nfull), tailf);
                    const __m256 p = exp8(_mm256_sub_ps(x, vmu), 0);
                    _mm256_maskstore_ps(sr + nfull, tail, p);
                    vsum = _mm256_add_ps(vsum, p);
                }
            }
            acc[i] = vsum;
        }
        const __m256 l =
            _mm256_fmadd_ps(a, _mm256_maskload_ps(l_run + r0, rm), reduce8_add(acc));
        _mm256_maskstore_ps(l_run + r0, rm, l);
    }
}

/* ---- pv ------------------------------------------------------------------------- */

/* O[0..MR)[8 NV columns] = alpha O + P V over n keys, for one chunk of NV vectors of Dv
 * (the last one masked by `last` unless it is full), V stored as dt and widened as it is
 * loaded. The O tile stays in registers for the whole key loop: per key, NV V loads
 * (masked at the Dv tail: caller memory; 16-bit V: NV conversions besides) and MR P
 * broadcasts feed MR * NV FMAs. With pf > 0 (decode, first chunk: V streams from DRAM)
 * the pfb bytes of the row pf keys ahead, within the call, are prefetched: whole rows,
 * so the other chunks find them in cache.
 * Register budget, MR x NV of 16 ymm (accumulators + V vectors + 1 broadcast):
 * 6 x 2 = 12 + 2 + 1 (8 loads per 12 FMAs), 12 x 1 = 12 + 1 + 1 (13 loads per 12 FMAs,
 * only for a lone 8-wide chunk: Dv <= 8 or an odd number of 8s). */
ALWAYS_INLINE void pv_tile(const int MR, const int NV, const sdpa_dtype dt, int n,
                           const float *p, int ldp, const char *v, size_t ldvb,
                           const float *alpha, float *o, int ldo, int full, int lastw,
                           __m256i last, int pf, size_t pfb) {
    __m256 acc[12][2];
    UNROLL_FULL
    for (int r = 0; r < MR; r++) {
        const __m256 a = _mm256_set1_ps(alpha ? alpha[r] : 1.0f);
        float *orow = o + (size_t)r * (size_t)ldo;
        UNROLL_FULL
        for (int c = 0; c < NV; c++) {
            const __m256 x = c < NV - 1 || full ? _mm256_loadu_ps(orow + 8 * c)
                                                : _mm256_maskload_ps(orow + 8 * c, last);
            acc[r][c] = alpha ? _mm256_mul_ps(x, a) : x;
        }
    }
    for (int j = 0; j < n; j++) {
        const char *vj = v + (size_t)j * ldvb;
        if (pf > 0 && j + pf < n)
            prefetch_row(vj + (size_t)pf * ldvb, pfb);
        __m256 vv[2];
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            vv[c] = load_f32(vj, 8 * c, dt, c < NV - 1 || full ? 8 : lastw, last);
        UNROLL_FULL
        for (int r = 0; r < MR; r++) {
            const __m256 pr = _mm256_broadcast_ss(p + (size_t)r * (size_t)ldp + (size_t)j);
            UNROLL_FULL
            for (int c = 0; c < NV; c++)
                acc[r][c] = _mm256_fmadd_ps(pr, vv[c], acc[r][c]);
        }
    }
    UNROLL_FULL
    for (int r = 0; r < MR; r++) {
        float *orow = o + (size_t)r * (size_t)ldo;
        UNROLL_FULL
        for (int c = 0; c < NV; c++) {
            if (c < NV - 1 || full)
                _mm256_storeu_ps(orow + 8 * c, acc[r][c]);
            else
                _mm256_maskstore_ps(orow + 8 * c, last, acc[r][c]);
        }
    }
}

#define PV_ARGS                                                                          \
    int n, const float *p, int ldp, const char *v, size_t ldvb, const float *alpha, float *o, \
        int ldo, int lastw, __m256i last, int pf, size_t pfb
/* pv_MxNV_dt for chunks whose vectors are all full, pv_MxNVt_dt for a chunk whose last
 * vector is a Dv tail: full chunks carry no mask operations in their key loop. */
#define PV_FN(M, NV, DT, NAME)                                                           \
    static void pv_##M##x##NV##_##NAME(PV_ARGS) {                                        \
        pv_tile(M, NV, DT, n, p, ldp, v, ldvb, alpha, o, ldo, 1, lastw, last, pf, pfb);  \
    }                                                                                    \
    static void pv_##M##x##NV##t_##NAME(PV_ARGS) {                                       \
        pv_tile(M, NV, DT, n, p, ldp, v, ldvb, alpha, o, ldo, 0, lastw, last, pf, pfb);  \
    }
#define PV_DT(M, NV)                                                                     \
    PV_FN(M, NV, SDPA_F32, f32) PV_FN(M, NV, SDPA_F16, f16) PV_FN(M, NV, SDPA_BF16, bf16)
#define X(M) PV_DT(M, 1)
REPEAT_1_12(X)
#undef X
#define X(M) PV_DT(M, 2)
REPEAT_1_6(X)
#undef X
#undef PV_DT
#undef PV_FN

/* Rows per pv register tile for a chunk of NV vectors (index NV), and
 * pv_fn[dt][tail][NV][MR] (sdpa_dtype values are 0, 1, 2). */
static const int pv_mr[3] = {0, 12, 6};
#define PV_TABLE(NAME)                                                                   \
    {                                                                                    \
        {{NULL}, {NULL, REPEAT_1_12(X1##NAME)}, {NULL, REPEAT_1_6(X2##NAME)}},           \
        {{NULL}, {NULL, REPEAT_1_12(X1t##NAME)}, {NULL, REPEAT_1_6(X2t##NAME)}},         \
    }
#define X1f32(M) pv_##M##x1_f32,
#define X2f32(M) pv_##M##x2_f32,
#define X1tf32(M) pv_##M##x1t_f32,
#define X2tf32(M) pv_##M##x2t_f32,
#define X1f16(M) pv_##M##x1_f16,
#define X2f16(M) pv_##M##x2_f16,
#define X1tf16(M) pv_##M##x1t_f16,
#define X2tf16(M) pv_##M##x2t_f16,
#define X1bf16(M) pv_##M##x1_bf16,
#define X2bf16(M) pv_##M##x2_bf16,
#define X1tbf16(M) pv_##M##x1t_bf16,
#define X2tbf16(M) pv_##M##x2t_bf16,
static void (*const pv_fn[3][2][3][13])(PV_ARGS) = {PV_TABLE(f32), PV_TABLE(f16),
                                                    PV_TABLE(bf16)};
#undef X1f32
#undef X2f32
#undef X1tf32
#undef X2tf32
#undef X1f16
#undef X2f16
#undef X1tf16
#undef X2tf16
#undef X1bf16
#undef X2bf16
#undef X1tbf16
#undef X2tbf16
#undef PV_TABLE

/* Rows up to which pv works like decode (prefetching V rows ahead): a GQA group of 8. */
#define PV_DECODE_M 8

/* Dv is cut into chunks of 2 vectors (16 floats) and, when the vector count is odd, one
 * last chunk of 1. For few rows (decode) the first chunk's tiles prefetch whole V rows
 * ahead, so the chunks after it, which read the same rows a line at a time, hit cache. */
static void avx2_pv(int m, int n, int dv, const float *p, int ldp, const void *v, int64_t ldv,
                    sdpa_dtype dt, const float *alpha, float *o, int ldo) {
    const size_t es = dt == SDPA_F32 ? 4 : 2, ldvb = (size_t)ldv * es;
    const size_t rowb = (size_t)dv * es;
    const int pf = m <= PV_DECODE_M ? (int)(SDPA_PREFETCH_AHEAD / rowb) + 1 : 0;
    const int nvec = (dv + 7) / 8;
    for (int c0 = 0; c0 < nvec; c0 += 2) {
        const int nv = min_int(2, nvec - c0);
        const int cols = min_int(8 * nv, dv - 8 * c0);
        const int lastw = cols - 8 * (nv - 1);
        const __m256i last = lanes(lastw);
        const int mrmax = pv_mr[nv];
        for (int r0 = 0; r0 < m; r0 += mrmax) {
            const int mr = min_int(mrmax, m - r0);
            const float *pr = p + (size_t)r0 * (size_t)ldp;
            const float *ar = alpha ? alpha + r0 : NULL;
            float *orow = o + (size_t)r0 * (size_t)ldo + 8 * c0;
            pv_fn[dt][lastw < 8][nv][mr](n, pr, ldp, (const char *)v + (size_t)(8 * c0) * es,
                                         ldvb, ar, orow, ldo, lastw, last,
                                         c0 == 0 && r0 == 0 ? pf : 0, rowb);
        }
    }
}

_Static_assert(SDPA_KERNELS_NFUNCS == 6, "the avx2 table must provide every tile function");

const sdpa_kernels sdpa_kernels_avx2 = {
    .isa = SDPA_ISA_AVX2,
    .name = "avx2",
    .br = 96,
    .bc = 64,
    .kp_align = 8,
    .pack_k = avx2_pack_k,
    .qk = avx2_qk,
    .qk_rows = avx2_qk_rows,
    .softmax = avx2_softmax,
    .pv = avx2_pv,
    .vexp = avx2_vexp,
};
