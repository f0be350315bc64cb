/*
 * avx512.c - the AVX-512 kernel table (AVX512F/BW/DQ/VL + FMA + F16C): 16-float zmm
 * vectors, 32 registers, k-mask tails, vscalefps in the exp.
 *
 * It is the fast path on CPUs with AVX-512 and OS-enabled ZMM state (dispatch.c decides).
 * It implements the contract of kernels/ukernel.h tile by tile, with the same meaning as
 * kernels/scalar/scalar.c; it is not bit-identical to the scalar table (FMA contraction,
 * its own exp, another summation order) and it knows nothing of masks, heads or
 * threads. Every tail (keys, rows, head dims not multiples of 16 or of a register tile)
 * runs through the same vector code with k-masked loads and stores, so nothing outside
 * the caller's rows or the contract's scratch regions is touched.
 *
 * Kp layout (private to this file): keys padded to a multiple of 16 (kp_align), cut into
 * strips of 32 keys, the last strip 16 wide when the padded count is an odd number of
 * 16s. A strip starting at key j0 of width W lives at kp + j0 * dk as [d][W]: at every d,
 * its W keys are contiguous, so qk streams one or two whole zmm per d and broadcasts Q.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) ||        \
    !defined(__AVX512VL__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels/avx512/ needs -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c"
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

#define ALL16 ((__mmask16)0xffff)

/* Lanes [0, k) of a 16-lane mask, 0 <= k <= 16. */
static inline __mmask16 lanes(int k) { return (__mmask16)((1u << k) - 1u); }

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* ---- exp ------------------------------------------------------------------------ */

/* Constants of the exp. ln(FLT_MIN) = -87.33654475...; EXP_LO is the smallest float at
 * or above it (0xc2aeac4f), so every input whose exp is a normal float is computed and
 * only results below FLT_MIN are flushed. EXP_HI: any input above ln(FLT_MAX) = 88.7228
 * overflows to +inf; clamping to 89 keeps +inf from becoming inf - inf = NaN in the
 * reduction while still giving +inf. LN2_HI is ln 2 rounded to float (0x3f317218) and
 * LN2_LO the float nearest ln 2 - LN2_HI (0xb102e308); their sum is ln 2 within 9e-17
 * (both computed with mpmath at 40 digits). x - n * LN2_HI is exact in one FMA for the
 * |n| <= 128 that reach the polynomial (x and n * LN2_HI are multiples of 2^-25 whose
 * difference is below 1/2), so r carries only LN2_LO's rounding. */
#define EXP_LO (-87.33654022216797f)
#define EXP_HI 89.0f
#define LOG2E 1.44269502162933349609375f
#define LN2_HI 0.693147182464599609375f
#define LN2_LO (-1.904654323148236e-09f)

/* p(r) = 1 + r + C2 r^2 + ... + C6 r^6 ~ exp(r) on [-ln2/2, ln2/2]: the minimax fit for
 * relative error with the constant term fixed to 1 (so exp(0) = 1 exactly), computed by
 * a Remez exchange in mpmath at 40 digits; its error is 2.6e-9, 2.9e-8 once the
 * coefficients are rounded to float (the fitted linear coefficient, 1 + 5e-8, rounds to
 * exactly 1). */
#define EXP_C2 0x1.000002p-1f
#define EXP_C3 0x1.5553c2p-3f
#define EXP_C4 0x1.55515ep-5f
#define EXP_C5 0x1.12903ep-7f
#define EXP_C6 0x1.709b64p-10f

/* exp of 16 lanes: n = round(x log2 e), r = x - n ln 2 (Cody-Waite, two FMAs),
 * exp(x) = 2^n p(r) with vscalefps, which is exact for every n and rounds subnormal and
 * overflowing results correctly. Lanes below EXP_LO (-inf included) are zeroed by the
 * mask; NaN fails that comparison's "less than" and propagates through every step.
 * any_x = 0 drops the clamp at EXP_HI, for softmax, whose arguments s - max and
 * m_run - max are never positive (or are NaN); the results are otherwise the same.
 * Measured max relative error over [-104, 89]: 9.67e-8 (0.81 ulp) on the 2^20 points of
 * tests/test_ukernel.c, 1.004e-7 (0.84 ulp, at x = -70.354218) over every one of the
 * 2.24e9 floats in that range against double exp; no range or special-value errors.
 * 12-13 instructions; about 5 cycles per vector in a throughput loop on the development
 * machine (AMD Zen 5), near the 4.5 its 9 multiplies and FMAs take on two FMA pipes: the
 * bound of softmax. */
ALWAYS_INLINE __m512 exp16(__m512 x, const int any_x) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_NLT_UQ);
    if (any_x)
        x = _mm512_min_ps(_mm512_set1_ps(EXP_HI), x); /* min returns x when x is NaN */
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    __m512 p = _mm512_set1_ps(EXP_C6);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(live, p, n);
}

static void avx512_vexp(int n, const float *x, float *y) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i), 1));
    if (i < n) {
        const __mmask16 t = lanes(n - i);
        _mm512_mask_storeu_ps(y + i, t, exp16(_mm512_maskz_loadu_ps(t, x + i), 1));
    }
}

/* ---- pack_k, pack_v ------------------------------------------------------------- */

/* Up to 16 elements of a row stored as dt, widened exactly to fp32 (lanes outside mk are
 * neither read nor faulted on: 0). F16 through vcvtph2ps (exact, quietens NaN like
 * convert.h); BF16 is the top half of a binary32, so a zero-extend and a shift. */
ALWAYS_INLINE __m512 load_f32(const void *row, int i, sdpa_dtype dt, __mmask16 mk) {
    if (dt == SDPA_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)row + i));
    if (dt == SDPA_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)row + i)), 16));
    return _mm512_maskz_loadu_ps(mk, (const float *)row + i);
}

/* In-register 16x16 transpose: r[i] holds row i; afterwards r[c] holds column c. Four
 * rounds of 16 shuffles: pairs of floats, pairs of pairs (as doubles), then 128-bit
 * lanes twice (vshuff32x4 with 0x88 = lanes 0,2 of each source, 0xdd = lanes 1,3). */
ALWAYS_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    UNROLL_FULL
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4i + c] holds rows 4i..4i+3 of columns c, c+4, c+8, c+12 in its four lanes */
    UNROLL_FULL
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    UNROLL_FULL
    for (int c = 0; c < 4; c++) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
        r[c + 4] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[c + 12] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
    }
}

/* One dt at a time so the conversion is hoisted out of the loops. Each 16 keys x 16 dims
 * block is loaded as rows (masked past dk, zero rows past n), transposed in registers
 * and stored as 16 key-vectors: one pass over K, no scalar element moves. K comes from
 * the caller's memory, usually L3 (a head's K and V outgrow L2 beyond ~1000 keys at
 * D = 128) in short row-strided streams the hardware prefetcher does not pick up, so
 * the next 16 rows are prefetched while this panel is transposed. */
ALWAYS_INLINE void pack_k_dt(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                             float *kp) {
    const size_t es = dt == SDPA_F32 ? 4 : 2;
    const int np = (n + 15) & ~15;
    for (int j0 = 0; j0 < np; j0 += 16) {
        const int nk = min_int(16, n - j0);
        const int s0 = j0 & ~31, w = min_int(32, np - s0), h = j0 - s0;
        float *dst = kp + (size_t)s0 * (size_t)dk + h;
        const char *src = (const char *)k + (size_t)j0 * (size_t)ldk * es;
        for (int i = 16; i < min_int(32, n - j0); i++)
            for (size_t b = 0; b < (size_t)dk * es; b += 64)
                _mm_prefetch(src + (size_t)i * (size_t)ldk * es + b, _MM_HINT_T0);
        for (int d0 = 0; d0 < dk; d0 += 16) {
            const int nd = min_int(16, dk - d0);
            const __mmask16 mk = lanes(nd);
            __m512 r[16];
            UNROLL_FULL
            for (int i = 0; i < 16; i++)
                r[i] = i < nk ? load_f32(src + (size_t)i * (size_t)ldk * es, d0, dt, mk)
                              : _mm512_setzero_ps();
            transpose16(r);
#pragma GCC unroll 16
            for (int c = 0; c < nd; c++)
                _mm512_storeu_ps(dst + (size_t)(d0 + c) * (size_t)w, r[c]);
        }
    }
}

static void avx512_pack_k(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                          float *kp) {
    if (dt == SDPA_F16)
        pack_k_dt(n, dk, k, ldk, SDPA_F16, kp);
    else if (dt == SDPA_BF16)
        pack_k_dt(n, dk, k, ldk, SDPA_BF16, kp);
    else
        pack_k_dt(n, dk, k, ldk, SDPA_F32, kp);
}

static void avx512_pack_v(int n, int dv, const void *v, int64_t ldv, sdpa_dtype dt,
                          float *vp, int ldvp) {
    const size_t es = dt == SDPA_F32 ? 4 : 2;
    for (int j = 0; j < n; j++) {
        const char *row = (const char *)v + (size_t)j * (size_t)ldv * es;
        float *out = vp + (size_t)j * (size_t)ldvp;
        for (int d = 0; d < dv; d += 16) {
            const __mmask16 mk = lanes(min_int(16, dv - d));
            _mm512_mask_storeu_ps(out + d, mk, load_f32(row, d, dt, mk));
        }
    }
}

/* ---- qk ------------------------------------------------------------------------- */

/* Query rows per qk register tile. */
#define QK_MR 12

/* S[0..MR)[0..16 NV) = scale * Q Kp^T for one strip of 16 NV keys, dk deep.
 * Register budget (NV = 2, MR = 12): 24 accumulators + 2 key vectors + 1-2 broadcast
 * temporaries of 32 zmm. Per d: 2 key loads, 12 Q broadcasts, 24 FMAs (12 cycles at two
 * FMA pipes), so the loads stay under two per cycle and each accumulator's FMA chain has
 * 12 cycles to cover the 4-cycle FMA latency. */
ALWAYS_INLINE void qk_tile(const int MR, const int NV, int dk, float scale, const float *q,
                           int ldq, const float *ks, float *s, int lds) {
    __m512 acc[QK_MR][2];
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (int d = 0; d < dk; d++) {
        const float *kd = ks + (size_t)d * (size_t)(16 * NV);
        const __m512 b0 = _mm512_loadu_ps(kd);
        const __m512 b1 = NV > 1 ? _mm512_loadu_ps(kd + 16) : b0;
        UNROLL_FULL
        for (int r = 0; r < MR; r++) {
            const __m512 a = _mm512_set1_ps(q[(size_t)r * (size_t)ldq + (size_t)d]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            if (NV > 1)
                acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            _mm512_storeu_ps(s + (size_t)r * (size_t)lds + 16 * c, _mm512_mul_ps(acc[r][c], vs));
}

#define QK_ARGS int dk, float scale, const float *q, int ldq, const float *ks, float *s, int lds
#define REPEAT_1_6(X) X(1) X(2) X(3) X(4) X(5) X(6)
#define REPEAT_1_8(X) REPEAT_1_6(X) X(7) X(8)
#define REPEAT_1_12(X) REPEAT_1_8(X) X(9) X(10) X(11) X(12)

/* One function per tile shape, so each is compiled with constant counts (calls to the
 * inline tile from the arms of a switch may be merged back into one call with a variable
 * count before inlining, which leaves the accumulators in memory). */
#define X(M)                                                                             \
    static void qk_##M##x1(QK_ARGS) { qk_tile(M, 1, dk, scale, q, ldq, ks, s, lds); }    \
    static void qk_##M##x2(QK_ARGS) { qk_tile(M, 2, dk, scale, q, ldq, ks, s, lds); }
REPEAT_1_12(X)
#undef X

/* qk_fn[NV - 1][MR]: the tile of MR rows by NV key vectors. */
#define X1(M) qk_##M##x1,
#define X2(M) qk_##M##x2,
static void (*const qk_fn[2][QK_MR + 1])(QK_ARGS) = {{NULL, REPEAT_1_12(X1)},
                                                     {NULL, REPEAT_1_12(X2)}};
#undef X1
#undef X2

static void avx512_qk(int m, int n, int dk, float scale, const float *q, int ldq,
                      const float *kp, float *s, int lds) {
    const int np = (n + 15) & ~15;
    for (int r0 = 0; r0 < m; r0 += QK_MR) {
        const int mr = min_int(QK_MR, m - r0);
        const float *qr = q + (size_t)r0 * (size_t)ldq;
        float *sr = s + (size_t)r0 * (size_t)lds;
        for (int j0 = 0; j0 < np; j0 += 32) {
            const float *ks = kp + (size_t)j0 * (size_t)dk;
            qk_fn[np - j0 >= 32][mr](dk, scale, qr, ldq, ks, sr + j0, lds);
        }
    }
}

/* ---- softmax -------------------------------------------------------------------- */

/* v[0..16) -> one vector whose lane i is the sum (max) of v[i]'s lanes: a transposing
 * reduction tree, 15 combining steps of two shuffles and one op for 16 rows instead of
 * 16 separate 4-step horizontal reductions. The order of the operations is fixed, so a
 * row's result does not depend on the other rows. */
#define REDUCE_TREE(NAME, OP)                                                            \
    ALWAYS_INLINE __m512 NAME(const __m512 v[16]) {                                      \
        __m512 a[8], b[4];                                                               \
        UNROLL_FULL /* lane pairs: [A0 B0 A1 B1] per 128-bit lane */                     \
        for (int i = 0; i < 8; i++)                                                      \
            a[i] = OP(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),                        \
                      _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));                       \
        UNROLL_FULL /* [A B C D] per 128-bit lane */                                     \
        for (int i = 0; i < 4; i++) {                                                    \
            const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]); \
            b[i] = OP(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),                        \
                      _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));                       \
        }                                                                                \
        /* then across the four 128-bit lanes */                                         \
        const __m512 c0 = OP(_mm512_shuffle_f32x4(b[0], b[1], 0x88),                     \
                             _mm512_shuffle_f32x4(b[0], b[1], 0xdd));                    \
        const __m512 c1 = OP(_mm512_shuffle_f32x4(b[2], b[3], 0x88),                     \
                             _mm512_shuffle_f32x4(b[2], b[3], 0xdd));                    \
        return OP(_mm512_shuffle_f32x4(c0, c1, 0x88), _mm512_shuffle_f32x4(c0, c1, 0xdd)); \
    }
REDUCE_TREE(reduce16_max, _mm512_max_ps)
REDUCE_TREE(reduce16_add, _mm512_add_ps)

/* 16 rows at a time, in two passes, so that each pass is a stream of independent rows
 * rather than one long dependency chain per row (max -> reduce -> exp -> sum): every
 * row's max vector, reduced for the 16 rows at once and combined with m_run; mu, alpha
 * and m_run as one vector; then p = exp(s - mu) stored in place, and the row sums
 * reduced at once into l_run. Rows past m take part as -inf / 0 vectors and are never
 * stored. The tail vector of a row is loaded with -inf in its dead lanes (exp gives 0
 * there) and stored under its mask, so S's padding is neither used nor written. NaN
 * scores lose every max (vmaxps returns its second operand, the running max, when the
 * first is NaN) and reach l_run through the sum. */
static void avx512_softmax(int m, int n, float *s, int lds, float *m_run, float *l_run,
                           float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const int nfull = n & ~15;
    const __mmask16 tail = lanes(n - nfull);
    for (int r0 = 0; r0 < m; r0 += 16) {
        const int rows = min_int(16, m - r0);
        const __mmask16 rm = lanes(rows);
        float *s0 = s + (size_t)r0 * (size_t)lds;
        __m512 acc[16];
        for (int i = 0; i < 16; i++) {
            const float *sr = s0 + (size_t)i * (size_t)lds;
            __m512 vmax = ninf;
            if (i < rows) {
                for (int j = 0; j < nfull; j += 16)
                    vmax = _mm512_max_ps(_mm512_loadu_ps(sr + j), vmax);
                if (tail)
                    vmax = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail, sr + nfull), vmax);
            }
            acc[i] = vmax;
        }
        const __m512 mold = _mm512_mask_loadu_ps(ninf, rm, m_run + r0);
        const __m512 mx = _mm512_max_ps(reduce16_max(acc), mold);
        /* a row that has seen only masked keys: subtract 0, so exp(-inf) = 0 */
        const __m512 mu =
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ), mx, _mm512_setzero_ps());
        const __m512 a = exp16(_mm512_sub_ps(mold, mu), 0);
        _mm512_mask_storeu_ps(m_run + r0, rm, mx);
        _mm512_mask_storeu_ps(alpha + r0, rm, a);
        float mus[16];
        _mm512_storeu_ps(mus, mu);
        for (int i = 0; i < 16; i++) {
            float *sr = s0 + (size_t)i * (size_t)lds;
            __m512 vsum = _mm512_setzero_ps();
            if (i < rows) {
                const __m512 vmu = _mm512_set1_ps(mus[i]);
#pragma GCC unroll 4
                for (int j = 0; j < nfull; j += 16) {
                    const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(sr + j), vmu), 0);
                    _mm512_storeu_ps(sr + j, p);
                    vsum = _mm512_add_ps(vsum, p);
                }
                if (tail) {
                    const __m512 p =
                        exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, tail, sr + nfull), vmu), 0);
                    _mm512_mask_storeu_ps(sr + nfull, tail, p);
                    vsum = _mm512_add_ps(vsum, p);
                }
            }
            acc[i] = vsum;
        }
        const __m512 l =
            _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(rm, l_run + r0), reduce16_add(acc));
        _mm512_mask_storeu_ps(l_run + r0, rm, l);
    }
}

/* ---- pv ------------------------------------------------------------------------- */

/* O[0..MR)[16 NV columns] = alpha O + P V over n keys, for one chunk of NV vectors of
 * Dv (the last one masked by `last`). The O tile stays in registers for the whole key
 * loop: per key, NV V loads (masked at the Dv tail: caller memory) and MR P broadcasts
 * feed MR * NV FMAs.
 * Register budget, MR x NV of 32 zmm (accumulators + V vectors + 1 broadcast):
 * 6 x 4 = 24 + 4 + 1, 8 x 3 = 24 + 3 + 1, 12 x 2 = 24 + 2 + 1, 12 x 1 = 12 + 1 + 1;
 * at 24 accumulators the 10-14 loads per 24 FMAs (12 cycles) stay under two per cycle. */
ALWAYS_INLINE void pv_tile(const int MR, const int NV, int n, const float *p, int ldp,
                           const float *v, int64_t ldv, const float *alpha, float *o, int ldo,
                           __mmask16 last) {
    __m512 acc[12][4];
    UNROLL_FULL
    for (int r = 0; r < MR; r++) {
        const __m512 a = _mm512_set1_ps(alpha ? alpha[r] : 1.0f);
        UNROLL_FULL
        for (int c = 0; c < NV; c++) {
            const __mmask16 mk = c == NV - 1 ? last : ALL16;
            const __m512 x = _mm512_maskz_loadu_ps(mk, o + (size_t)r * (size_t)ldo + 16 * c);
            acc[r][c] = alpha ? _mm512_mul_ps(x, a) : x;
        }
    }
    for (int j = 0; j < n; j++) {
        const float *vj = v + (int64_t)j * ldv;
        __m512 vv[4];
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            vv[c] = _mm512_maskz_loadu_ps(c == NV - 1 ? last : ALL16, vj + 16 * c);
        UNROLL_FULL
        for (int r = 0; r < MR; r++) {
            const __m512 pr = _mm512_set1_ps(p[(size_t)r * (size_t)ldp + (size_t)j]);
            UNROLL_FULL
            for (int c = 0; c < NV; c++)
                acc[r][c] = _mm512_fmadd_ps(pr, vv[c], acc[r][c]);
        }
    }
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            _mm512_mask_storeu_ps(o + (size_t)r * (size_t)ldo + 16 * c, c == NV - 1 ? last : ALL16,
                                  acc[r][c]);
}

#define PV_ARGS                                                                          \
    int n, const float *p, int ldp, const float *v, int64_t ldv, const float *alpha, float *o, \
        int ldo, __mmask16 last
#define PV_FN(M, NV)                                                                     \
    static void pv_##M##x##NV(PV_ARGS) {                                                 \
        pv_tile(M, NV, n, p, ldp, v, ldv, alpha, o, ldo, last);                          \
    }
#define X(M) PV_FN(M, 1) PV_FN(M, 2)
REPEAT_1_12(X)
#undef X
#define X(M) PV_FN(M, 3)
REPEAT_1_8(X)
#undef X
#define X(M) PV_FN(M, 4)
REPEAT_1_6(X)
#undef X

/* Rows per pv register tile for a chunk of NV vectors (index NV), and pv_fn[NV][MR]. */
static const int pv_mr[5] = {0, 12, 12, 8, 6};
#define X1(M) pv_##M##x1,
#define X2(M) pv_##M##x2,
#define X3(M) pv_##M##x3,
#define X4(M) pv_##M##x4,
static void (*const pv_fn[5][13])(PV_ARGS) = {
    {NULL},
    {NULL, REPEAT_1_12(X1)},
    {NULL, REPEAT_1_12(X2)},
    {NULL, REPEAT_1_8(X3)},
    {NULL, REPEAT_1_6(X4)},
};
#undef X1
#undef X2
#undef X3
#undef X4

/* Dv is cut into chunks of at most 4 vectors, as even as possible (5 -> 3 + 2, 8 -> 4 +
 * 4, 9 -> 3 + 3 + 3), so no chunk but a lone one drops below 2 vectors: the rows x
 * vectors tile keeps its 24 accumulators at Dv = 80 or 96 as at 64 or 128. */
static void avx512_pv(int m, int n, int dv, const float *p, int ldp, const float *v,
                      int64_t ldv, const float *alpha, float *o, int ldo) {
    const int nvec = (dv + 15) / 16;
    const int nchunk = (nvec + 3) / 4;
    int c0 = 0;
    for (int ch = 0; ch < nchunk; ch++) {
        const int nv = nvec / nchunk + (ch < nvec % nchunk);
        const int cols = min_int(16 * nv, dv - 16 * c0);
        const __mmask16 last = lanes(cols - 16 * (nv - 1));
        const int mrmax = pv_mr[nv];
        for (int r0 = 0; r0 < m; r0 += mrmax)
            pv_fn[nv][min_int(mrmax, m - r0)](n, p + (size_t)r0 * (size_t)ldp, ldp, v + 16 * c0,
                                              ldv, alpha ? alpha + r0 : NULL,
                                              o + (size_t)r0 * (size_t)ldo + 16 * c0, ldo, last);
        c0 += nv;
    }
}

_Static_assert(SDPA_KERNELS_NFUNCS == 6, "the avx512 table must provide every tile function");

const sdpa_kernels sdpa_kernels_avx512 = {
    .isa = SDPA_ISA_AVX512,
    .name = "avx512",
    .br = 96,
    .bc = 64,
    .kp_align = 16,
    .pack_k = avx512_pack_k,
    .pack_v = avx512_pack_v,
    .qk = avx512_qk,
    .softmax = avx512_softmax,
    .pv = avx512_pv,
    .vexp = avx512_vexp,
};
