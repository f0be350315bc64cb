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

/* ---- loads, pack_k --------------------------------------------------------------- */

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

/* ---- reductions ----------------------------------------------------------------- */

/* v[0..16) -> one vector whose lane i is the sum (max) of v[i]'s lanes: a transposing
 * reduction tree, 15 combining steps of two shuffles and one op for 16 vectors instead
 * of 16 separate 4-step horizontal reductions. Every lane's result is the same tree over
 * its vector's lanes ((0+2)+(1+3) within each 128-bit lane, then lanes 0+1, 2+3, and the
 * two halves), so lane i depends on v[i] alone, not on which vectors share the call
 * (softmax's rows, qk_rows' row-by-key products). */
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

/* ---- qk_rows ------------------------------------------------------------------- */

/* Rows per qk_rows pass: 8 covers a GQA group of 8 heads (decode) in one pass over K. */
#define QKR_MR 8

/* Lines [0, nb) bytes of a row of caller memory into L1 (prefetcht0; t1 and nta measured
 * 8-12% slower in decode), ahead of its use: see SDPA_PREFETCH_AHEAD. */
ALWAYS_INLINE void prefetch_row(const char *row, size_t nb) {
    for (size_t b = 0; b < nb; b += 64) /* 64-byte lines */
        _mm_prefetch(row + b, _MM_HINT_T0);
}

/* The dot products of R query rows with NK = 1 or 2 keys (rows of K, read in place) as
 * lane-wise partial sums: t[r * 16 + i] for key i gets sum over 16-element slices of
 * Q[r] * K[key]; the last slice is masked (caller memory, and Q's padding is off limits).
 * Two keys share each Q slice load: per slice 2 K loads (16-bit K: conversions besides)
 * and R Q loads feed 2 R FMAs. The empty asm keeps the Q slice in a register: without it
 * gcc folds the load into both FMAs as two loads, and the kernel ran 1.5x slower, load
 * bound (m = 4, dk = 128, in L1). */
ALWAYS_INLINE void qkr_keys(const int R, const int NK, const sdpa_dtype dt, int dk,
                            const float *q, int ldq, const char *k0, const char *k1,
                            __m512 *t) {
    __m512 c0[QKR_MR], c1[QKR_MR];
    UNROLL_FULL
    for (int r = 0; r < R; r++)
        c0[r] = c1[r] = _mm512_setzero_ps();
    int d0 = 0;
    for (; d0 + 16 <= dk; d0 += 16) {
        const __m512 x0 = load_f32(k0, d0, dt, ALL16);
        const __m512 x1 = NK > 1 ? load_f32(k1, d0, dt, ALL16) : x0;
        UNROLL_FULL
        for (int r = 0; r < R; r++) {
            __m512 qv = _mm512_loadu_ps(q + (size_t)r * (size_t)ldq + d0);
            if (NK > 1)
                __asm__("" : "+v"(qv));
            c0[r] = _mm512_fmadd_ps(qv, x0, c0[r]);
            if (NK > 1)
                c1[r] = _mm512_fmadd_ps(qv, x1, c1[r]);
        }
    }
    if (d0 < dk) {
        const __mmask16 mk = lanes(dk - d0);
        const __m512 x0 = load_f32(k0, d0, dt, mk);
        const __m512 x1 = NK > 1 ? load_f32(k1, d0, dt, mk) : x0;
        UNROLL_FULL
        for (int r = 0; r < R; r++) {
            const __m512 qv = _mm512_maskz_loadu_ps(mk, q + (size_t)r * (size_t)ldq + d0);
            c0[r] = _mm512_fmadd_ps(qv, x0, c0[r]);
            if (NK > 1)
                c1[r] = _mm512_fmadd_ps(qv, x1, c1[r]);
        }
    }
    UNROLL_FULL
    for (int r = 0; r < R; r++) {
        t[r * 16] = c0[r];
        if (NK > 1)
            t[r * 16 + 1] = c1[r];
    }
}

/* S[0..R)[0..n) for R <= QKR_MR rows, 16 keys at a time: each key pair's partial-sum
 * vectors go to a stack buffer (R x 16 zmm, in L1), and the reduction tree turns row r's
 * 16 vectors into its 16 scores in key order, scaled and stored (masked in the tail
 * strip, whose missing keys are zero vectors, never read). A score is one FMA chain over
 * dk then the fixed tree, whatever R and whichever key shares its loads, so a row's bits
 * do not depend on the other rows of the call.
 * Memory order: in decode K streams from DRAM, and this loop is what keeps it streaming.
 * Keys are read a pair of adjacent rows at a time, each from start to end (reading
 * slice-major instead, the first lines of 16 rows, then their second lines..., ran at
 * 60% of the sequential rate in a pure-load test on the development machine), and the
 * rows SDPA_PREFETCH_AHEAD bytes ahead, within the call, are prefetched (decode-long fp32
 * at 1 thread: 14 -> 21 GB/s, so the core no longer waits at every 4 KiB page).
 * Register budget: 2 R <= 16 accumulators + 2 K slices + 1 Q slice of 32 zmm; the tree
 * works on 16 loaded vectors. Per key: dk / 16 K loads and R dk / 32 Q loads per R dk /
 * 16 FMAs (FMA-bound from R = 2 on), then 45 shuffles and adds per row per 16 keys. */
ALWAYS_INLINE void qkr_rows(const int R, const sdpa_dtype dt, int n, int dk, float scale,
                            const float *q, int ldq, const void *k, int64_t ldk, float *s,
                            int lds) {
    const size_t rowb = (size_t)dk * (dt == SDPA_F32 ? 4 : 2);
    const size_t ldkb = (size_t)ldk * (dt == SDPA_F32 ? 4 : 2);
    const int ahead = (int)(SDPA_PREFETCH_AHEAD / rowb) + 1;
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 t[QKR_MR * 16];
    for (int j0 = 0; j0 < n; j0 += 16) {
        const int nk = min_int(16, n - j0);
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
        jj += jj < nk;
        for (; jj < 16; jj++)
            UNROLL_FULL
            for (int r = 0; r < R; r++)
                t[r * 16 + jj] = _mm512_setzero_ps();
        const __mmask16 sm = lanes(nk);
        UNROLL_FULL
        for (int r = 0; r < R; r++)
            _mm512_mask_storeu_ps(s + (size_t)r * (size_t)lds + j0, sm,
                                  _mm512_mul_ps(reduce16_add(t + 16 * r), vs));
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
    QKR_FN(1, DT, NAME) QKR_FN(2, DT, NAME) QKR_FN(3, DT, NAME) QKR_FN(4, DT, NAME)          \
    QKR_FN(5, DT, NAME) QKR_FN(6, DT, NAME) QKR_FN(7, DT, NAME) QKR_FN(8, DT, NAME)
QKR_DT(SDPA_F32, f32)
QKR_DT(SDPA_F16, f16)
QKR_DT(SDPA_BF16, bf16)
#undef QKR_DT
#undef QKR_FN

/* qkr_fn[dt][R] (sdpa_dtype values are 0, 1, 2). */
#define QKR_TABLE(NAME)                                                                  \
    {NULL, qkr_1_##NAME, qkr_2_##NAME, qkr_3_##NAME, qkr_4_##NAME,                       \
     qkr_5_##NAME, qkr_6_##NAME, qkr_7_##NAME, qkr_8_##NAME}
static void (*const qkr_fn[3][QKR_MR + 1])(QKR_ARGS) = {QKR_TABLE(f32), QKR_TABLE(f16),
                                                        QKR_TABLE(bf16)};
#undef QKR_TABLE

/* Rows in passes of QKR_MR, the last pass with the rest. */
static void avx512_qk_rows(int m, int n, int dk, float scale, const float *q, int ldq,
                           const void *k, int64_t ldk, sdpa_dtype dt, float *s, int lds) {
    for (int r0 = 0; r0 < m; r0 += QKR_MR)
        qkr_fn[dt][min_int(QKR_MR, m - r0)](n, dk, scale, q + (size_t)r0 * (size_t)ldq, ldq, k,
                                            ldk, s + (size_t)r0 * (size_t)lds, lds);
}

/* ---- softmax -------------------------------------------------------------------- */

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
 * Dv (the last one masked by `last`), V stored as dt and widened as it is loaded. The O
 * tile stays in registers for the whole key loop: per key, NV V loads (masked at the Dv
 * tail: caller memory; 16-bit V: NV conversions besides) and MR P broadcasts feed
 * MR * NV FMAs. With pf > 0 (decode: V streams from DRAM) the chunk of the row pf keys
 * ahead, within the call, is prefetched, as qk_rows does for K.
 * Register budget, MR x NV of 32 zmm (accumulators + V vectors + 1 broadcast): 24
 * accumulators where the rows allow (12 x 2, 8 x 3, 6 x 4, 4 x 6, 3 x 8; 4 x 5 = 20,
 * 3 x 7 = 21, 12 x 1 = 12) + at most 8 V vectors, each loaded once and used by MR FMAs,
 * + 1; at 24 accumulators the 10-14 loads per 24 FMAs (12 cycles) stay under two per
 * cycle. */
ALWAYS_INLINE void pv_tile(const int MR, const int NV, const sdpa_dtype dt, int n,
                           const float *p, int ldp, const char *v, size_t ldvb,
                           const float *alpha, float *o, int ldo, __mmask16 last, int pf) {
    __m512 acc[24];
    UNROLL_FULL
    for (int r = 0; r < MR; r++) {
        const __m512 a = _mm512_set1_ps(alpha ? alpha[r] : 1.0f);
        UNROLL_FULL
        for (int c = 0; c < NV; c++) {
            const __mmask16 mk = c == NV - 1 ? last : ALL16;
            const __m512 x = _mm512_maskz_loadu_ps(mk, o + (size_t)r * (size_t)ldo + 16 * c);
            acc[r * NV + c] = alpha ? _mm512_mul_ps(x, a) : x;
        }
    }
    for (int j = 0; j < n; j++) {
        const char *vj = v + (size_t)j * ldvb;
        if (pf > 0 && j + pf < n)
            prefetch_row(vj + (size_t)pf * ldvb, (size_t)NV * 16 * (dt == SDPA_F32 ? 4 : 2));
        __m512 vv[8];
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            vv[c] = load_f32(vj, 16 * c, dt, c == NV - 1 ? last : ALL16);
        UNROLL_FULL
        for (int r = 0; r < MR; r++) {
            const __m512 pr = _mm512_set1_ps(p[(size_t)r * (size_t)ldp + (size_t)j]);
            UNROLL_FULL
            for (int c = 0; c < NV; c++)
                acc[r * NV + c] = _mm512_fmadd_ps(pr, vv[c], acc[r * NV + c]);
        }
    }
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            _mm512_mask_storeu_ps(o + (size_t)r * (size_t)ldo + 16 * c, c == NV - 1 ? last : ALL16,
                                  acc[r * NV + c]);
}

#define PV_ARGS                                                                          \
    int n, const float *p, int ldp, const char *v, size_t ldvb, const float *alpha, float *o, \
        int ldo, __mmask16 last, int pf
#define PV_FN(M, NV, DT, NAME)                                                           \
    static void pv_##M##x##NV##_##NAME(PV_ARGS) {                                        \
        pv_tile(M, NV, DT, n, p, ldp, v, ldvb, alpha, o, ldo, last, pf);                 \
    }
#define PV_DT(M, NV)                                                                     \
    PV_FN(M, NV, SDPA_F32, f32) PV_FN(M, NV, SDPA_F16, f16) PV_FN(M, NV, SDPA_BF16, bf16)
#define REPEAT_1_3(X) X(1) X(2) X(3)
#define REPEAT_1_4(X) REPEAT_1_3(X) X(4)
#define X(M) PV_DT(M, 1) PV_DT(M, 2)
REPEAT_1_12(X)
#undef X
#define X(M) PV_DT(M, 3)
REPEAT_1_8(X)
#undef X
#define X(M) PV_DT(M, 4)
REPEAT_1_6(X)
#undef X
#define X(M) PV_DT(M, 5) PV_DT(M, 6)
REPEAT_1_4(X)
#undef X
#define X(M) PV_DT(M, 7) PV_DT(M, 8)
REPEAT_1_3(X)
#undef X
#undef PV_DT
#undef PV_FN

/* Rows per pv register tile for a chunk of NV vectors (index NV), and
 * pv_fn[dt][NV][MR] (sdpa_dtype values are 0, 1, 2). */
static const int pv_mr[9] = {0, 12, 12, 8, 6, 4, 4, 3, 3};
#define PV_TABLE(NAME)                                                                   \
    {                                                                                    \
        {NULL},                                                                          \
        {NULL, REPEAT_1_12(X1##NAME)},                                                   \
        {NULL, REPEAT_1_12(X2##NAME)},                                                   \
        {NULL, REPEAT_1_8(X3##NAME)},                                                    \
        {NULL, REPEAT_1_6(X4##NAME)},                                                    \
        {NULL, REPEAT_1_4(X5##NAME)},                                                    \
        {NULL, REPEAT_1_4(X6##NAME)},                                                    \
        {NULL, REPEAT_1_3(X7##NAME)},                                                    \
        {NULL, REPEAT_1_3(X8##NAME)},                                                    \
    }
#define X1f32(M) pv_##M##x1_f32,
#define X2f32(M) pv_##M##x2_f32,
#define X3f32(M) pv_##M##x3_f32,
#define X4f32(M) pv_##M##x4_f32,
#define X5f32(M) pv_##M##x5_f32,
#define X6f32(M) pv_##M##x6_f32,
#define X7f32(M) pv_##M##x7_f32,
#define X8f32(M) pv_##M##x8_f32,
#define X1f16(M) pv_##M##x1_f16,
#define X2f16(M) pv_##M##x2_f16,
#define X3f16(M) pv_##M##x3_f16,
#define X4f16(M) pv_##M##x4_f16,
#define X5f16(M) pv_##M##x5_f16,
#define X6f16(M) pv_##M##x6_f16,
#define X7f16(M) pv_##M##x7_f16,
#define X8f16(M) pv_##M##x8_f16,
#define X1bf16(M) pv_##M##x1_bf16,
#define X2bf16(M) pv_##M##x2_bf16,
#define X3bf16(M) pv_##M##x3_bf16,
#define X4bf16(M) pv_##M##x4_bf16,
#define X5bf16(M) pv_##M##x5_bf16,
#define X6bf16(M) pv_##M##x6_bf16,
#define X7bf16(M) pv_##M##x7_bf16,
#define X8bf16(M) pv_##M##x8_bf16,
static void (*const pv_fn[3][9][13])(PV_ARGS) = {PV_TABLE(f32), PV_TABLE(f16), PV_TABLE(bf16)};
#undef PV_TABLE

/* Rows up to which pv works like decode: whole V rows per tile and prefetching (at most
 * 3 row tiles of 3 x 8). Beyond it, at Dv = 128, prefill's 32 tiles of 3 x 8 re-read each
 * 32 KiB block of V from L2 and prefill-causal ran at 0.72x its speed with 6 x 4. */
#define PV_WIDE_M 8

/* Dv is cut into chunks of at most cmax vectors, as even as possible (5 -> 3 + 2, 8 -> 4 + 4,
 * 9 -> 3 + 3 + 3 at cmax = 4), so no chunk but a lone one drops below 2 vectors: the rows
 * x vectors tile keeps its 24 accumulators at Dv = 80 or 96 as at 64 or 128.
 * Many rows (prefill): cmax = 4, half a V row of 128 per tile, so a V block reused by
 * every row tile stays in L1. Few rows (decode, m <= PV_WIDE_M): cmax = 8, so a tile reads
 * V rows whole, in address order (Dv = 128 in one chunk), and prefetches
 * SDPA_PREFETCH_AHEAD bytes of rows ahead. At m = 4 that is tiles of 3 and 1 rows, twice
 * the V loads of two 4 x 4 tiles on half rows, but the half-row tiles, even with whole
 * rows prefetched ahead, ran decode-long at 0.92x (fp32) and 0.79x (f16) the speed at 1
 * thread, 0.89x and 0.76x at 2. */
static void avx512_pv(int m, int n, int dv, const float *p, int ldp, const void *v,
                      int64_t ldv, sdpa_dtype dt, const float *alpha, float *o, int ldo) {
    const size_t es = dt == SDPA_F32 ? 4 : 2, ldvb = (size_t)ldv * es;
    const int nvec = (dv + 15) / 16;
    const int wide = m <= PV_WIDE_M;
    const int cmax = wide ? 8 : 4;
    const int pf = wide ? (int)(SDPA_PREFETCH_AHEAD / ((size_t)dv * es)) + 1 : 0;
    const int nchunk = (nvec + cmax - 1) / cmax;
    int c0 = 0;
    for (int ch = 0; ch < nchunk; ch++) {
        const int nv = nvec / nchunk + (ch < nvec % nchunk);
        const int cols = min_int(16 * nv, dv - 16 * c0);
        const __mmask16 last = lanes(cols - 16 * (nv - 1));
        const int mrmax = pv_mr[nv];
        for (int r0 = 0; r0 < m; r0 += mrmax)
            pv_fn[dt][nv][min_int(mrmax, m - r0)](
                n, p + (size_t)r0 * (size_t)ldp, ldp, (const char *)v + (size_t)(16 * c0) * es,
                ldvb, alpha ? alpha + r0 : NULL, o + (size_t)r0 * (size_t)ldo + 16 * c0, ldo, last,
                pf);
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
    .qk = avx512_qk,
    .qk_rows = avx512_qk_rows,
    .softmax = avx512_softmax,
    .pv = avx512_pv,
    .vexp = avx512_vexp,
};
