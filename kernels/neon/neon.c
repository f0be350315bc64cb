/*
 * neon.c - the AArch64 Advanced SIMD (NEON) kernel table: the six functions of
 * kernels/ukernel.h in arm_neon.h intrinsics, fp32 arithmetic throughout.
 *
 * What it is: the table every aarch64 CPU can run. It uses only the ARMv8.0-A Advanced
 * SIMD baseline (FMLA by element, FMAXNM/FMAXNMV, FADDP/FADDV, FCVTNS, and FCVTL for the
 * exact f16 -> f32 widening of F16 storage; BF16 storage is widened with a 16-bit shift),
 * so it runs on a Cortex-A72 as well as on Neoverse/Apple-class cores. src/dispatch.c
 * selects it by default on aarch64; tests/test_ukernel.c checks each function against
 * double precision and `make test-aarch64` runs the whole suite under qemu-aarch64 (the
 * default CPU and -cpu cortex-a72, which has nothing beyond ARMv8.0).
 *
 * What it is not: no FP16 arithmetic (FEAT_FP16), no BF16 instructions (BFDOT/BFMMLA,
 * FEAT_BF16: kernels/neonbf16, a table of bf16 tiles over this one's fp32 tiles, chosen
 * by HWCAP2_BF16), no SVE, no dot-product or matrix extensions; those are optional
 * tables chosen through the HWCAP bits src/dispatch.c reads. It is not tuned on
 * real hardware: qemu checks correctness and instruction-set coverage, never speed. It
 * is not written through kernels/x86/'s vector layer: its tiles are built on FMLA by
 * element and lane loads (no masked loads), not on x86's broadcasts and masks. What it
 * shares with the x86 tables is the exp (kernels/exp.h), the helpers of kernels/simd.h
 * and the names of the same ideas (exp_vec, qkr_rows, PV_WIDE_M, prefetch_row); its
 * lane loads and 16-bit widening are in neon_mem.h, which kernels/neonbf16 reads too.
 *
 * Layout of Kp (kp_align = NR = 8): keys are grouped in panels of 8; panel p holds keys
 * 8p .. 8p+7 transposed, Kp[p * 8 * dk + d * 8 + i] = K[8p + i][d], so for each d the qk
 * kernel streams two contiguous 4-float vectors of keys. Keys past n in the last panel
 * are zeros (ukernel.h: padding keys are packed as zeros), so qk has no key tail: it
 * writes S up to round_up(n, 8), which the contract allows.
 *
 * Register budget (32 x 128-bit V registers): every full tile keeps 16 accumulators.
 *   qk: a tile of mr query rows x (8 * npan) keys with mr * 2 * npan accumulators
 *       (mr 8 x 1 panel, 4 x 2, 2 x 4: 16; 1 x 4: 8), + mr vectors of Q (4 d each, used
 *       by lane with FMLA by element) + 2 key vectors per panel for the lane being
 *       applied: 8 x 8 keys uses 16 + 8 + 2 = 26 registers, 4 x 16 uses 16 + 4 + 4 = 24,
 *       2 x 32 uses 16 + 2 + 8 = 26. A single row loads one key vector per FMA whatever
 *       the tile, so it is load-bound; 8 accumulators cover the FMA latency there, and a
 *       1 x 8-panel tile (16) made GCC spill key vectors.
 *   qk_rows (decode: K rows in place): R rows x 16 / R keys with one accumulator per
 *       (row, key), 16, + R Q vectors + 1 key vector: at most 21.
 *   pv: a tile of mr rows x (4 * nv) columns of O with mr * nv accumulators (8 x 2,
 *       4 x 4, 2 x 8: 16; 1 x 8: 8, decode rows are memory bound), + mr vectors of P
 *       (4 keys each, used by lane) + nv vectors of the V row being applied:
 *       8 x 2 uses 16 + 8 + 2 = 26, 4 x 4 uses 24, 2 x 8 uses 26.
 *   Tails use the same kernels with fewer rows/panels/columns; columns past the last
 *   multiple of 4 go through lane loads and stores (NEON has no masked loads), so no
 *   function reads or writes an element outside its operands.
 */
#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "kernels/neon is AArch64 Advanced SIMD code: build it with an aarch64 compiler (the Makefile does so only when CC targets aarch64)"
#endif

#include <arm_neon.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "../exp.h"
#include "../kvq.h"
#include "../simd.h"
#include "../ukernel.h"
#include "neon_mem.h"

enum {
    NR = 8,  /* keys per Kp panel (two vectors); kp_align */
    MR = 8,  /* the largest row count of a register tile */
    NACC = 16, /* accumulators per full tile */
};

/* ---- exp ---------------------------------------------------------------------------
 *
 * The algorithm of kernels/exp.h, with NEON's instructions: the clamp at EXP_FLOOR (as
 * AVX-512), n rounded by FCVTNS (to nearest even, from the float product x log2 e, as
 * AVX-512 does; saturating, and NaN gives 0, in a lane that ends as NaN anyway), the
 * reduction and the polynomial in FMLA/FMLS, 2^n as two exact powers of two built in the
 * exponent field: 2^n1 2^n2, n1 = n >> 1, n2 = n - n1, both in [-108, 64] for the n of
 * any x in [EXP_FLOOR, EXP_HI], so n = 128 (x just below ln FLT_MAX, where p(r) < 1 keeps
 * the result finite), subnormal results (rounded once, by the second product) and the
 * clamped lanes (+0) need no special path. Its error is the one exp.h gives for AVX-512,
 * whose bits it reproduces for every input but NaN. any_x = 0 drops the clamp at EXP_HI,
 * for softmax, whose arguments are never positive (or are NaN).
 */
ALWAYS_INLINE float32x4_t exp_vec(float32x4_t x, const int any_x) {
    x = vmaxq_f32(vdupq_n_f32(EXP_FLOOR), x); /* FMAX returns NaN when x is NaN */
    if (any_x)
        x = vminq_f32(vdupq_n_f32(EXP_HI), x); /* FMIN returns NaN when x is NaN */
    const int32x4_t n = vcvtnq_s32_f32(vmulq_n_f32(x, LOG2E));
    const float32x4_t nf = vcvtq_f32_s32(n);
    const float32x4_t r = vfmsq_f32(x, nf, vdupq_n_f32(LN2));
    float32x4_t p = vdupq_n_f32(EXP_C5);
    p = vfmaq_f32(vdupq_n_f32(EXP_C4), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_C3), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_C2), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t n1 = vshrq_n_s32(n, 1), n2 = vsubq_s32(n, n1);
    const int32x4_t bias = vdupq_n_s32(127); /* 2^k is the float with exponent field k + 127 */
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

static void neon_vexp(int n, const float *x, float *y) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        vst1q_f32(y + i, exp_vec(a, 1));
        vst1q_f32(y + i + 4, exp_vec(b, 1));
    }
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, exp_vec(vld1q_f32(x + i), 1));
    if (i < n)
        store_part(y + i, exp_vec(load_part(x + i, n - i, vdupq_n_f32(0.0f)), 1), n - i);
}

/* ---- pack_k ------------------------------------------------------------------------ */

/* 4x4 transpose: on return a[i] holds lane i of the inputs a[0..3]. */
ALWAYS_INLINE void transpose4(float32x4_t a[4]) {
    const float32x4_t t0 = vtrn1q_f32(a[0], a[1]), t1 = vtrn2q_f32(a[0], a[1]);
    const float32x4_t t2 = vtrn1q_f32(a[2], a[3]), t3 = vtrn2q_f32(a[2], a[3]);
    a[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    a[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    a[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    a[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

/* One panel: keys rows[0 .. nk) (nk <= 8; the rest packed as zeros), 4 d at a time as two
 * 4x4 transposes; the last dk % 4 columns through lane loads. */
ALWAYS_INLINE void pack_k_panel(const int nk, int dk, const char *k0, size_t row_bytes,
                                sdpa_dtype dt, float *panel) {
    const char *rows[NR];
    for (int i = 0; i < NR; i++)
        rows[i] = k0 + (size_t)(i < nk ? i : 0) * row_bytes;
    for (int d = 0; d < dk; d += 4) {
        const int w = dk - d < 4 ? dk - d : 4;
        float32x4_t a[NR];
        for (int i = 0; i < NR; i++)
            a[i] = i >= nk ? vdupq_n_f32(0.0f)
                   : w == 4 ? load4(rows[i], d, dt)
                            : load_part_dt(rows[i], d, w, dt);
        transpose4(a);
        transpose4(a + 4);
        for (int c = 0; c < w; c++) {
            vst1q_f32(panel + (size_t)(d + c) * NR, a[c]);
            vst1q_f32(panel + (size_t)(d + c) * NR + 4, a[4 + c]);
        }
    }
}

ALWAYS_INLINE void pack_k_dt(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                             float *kp) {
    const size_t row_bytes = (size_t)ldk * elem_bytes(dt);
    int j = 0;
    for (; j + NR <= n; j += NR) /* full panels: a constant nk drops the zero-key checks */
        pack_k_panel(NR, dk, (const char *)k + (size_t)j * row_bytes, row_bytes, dt,
                     kp + (size_t)j * (size_t)dk);
    if (j < n)
        pack_k_panel(n - j, dk, (const char *)k + (size_t)j * row_bytes, row_bytes, dt,
                     kp + (size_t)j * (size_t)dk);
}

static void neon_pack_k(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                        float *kp) {
    switch (dt) {
    case SDPA_F16: pack_k_dt(n, dk, k, ldk, SDPA_F16, kp); break;
    case SDPA_BF16: pack_k_dt(n, dk, k, ldk, SDPA_BF16, kp); break;
    default: /* SDPA_F32 */ pack_k_dt(n, dk, k, ldk, SDPA_F32, kp); break;
    }
}

/* ---- qk -------------------------------------------------------------------------------
 *
 * S tile = scale * Q[mr rows] Kp[npan panels]^T. acc[r * 2 npan + 2 pp + h] holds keys
 * 8 pp + 4 h .. +3 of row r. Per 4 d: mr loads of Q (one vector per row), then for each
 * of the 4 lanes two key vectors per panel, each FMLA'd against every row's Q lane.
 */
#define QK_LANE(L)                                                                           \
    for (int pp = 0; pp < npan; pp++) {                                                       \
        const float *kl = kp + (size_t)pp * pstride + (size_t)(d + (L)) * NR;                 \
        const float32x4_t k0 = vld1q_f32(kl), k1 = vld1q_f32(kl + 4);                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {                                \
            acc[r * 2 * npan + 2 * pp] = vfmaq_laneq_f32(acc[r * 2 * npan + 2 * pp], k0, qv[r], L); \
            acc[r * 2 * npan + 2 * pp + 1] =                                                  \
                vfmaq_laneq_f32(acc[r * 2 * npan + 2 * pp + 1], k1, qv[r], L);                \
        }                                                                                     \
    }

ALWAYS_INLINE void qk_tile(const int mr, const int npan, int dk, float scale, const float *q,
                           int ldq, const float *kp, float *s, int lds) {
    const size_t pstride = (size_t)NR * (size_t)dk;
    float32x4_t acc[NACC];
    _Pragma("GCC unroll 16") for (int a = 0; a < mr * 2 * npan; a++) acc[a] = vdupq_n_f32(0.0f);
    int d = 0;
    for (; d + 4 <= dk; d += 4) {
        float32x4_t qv[MR];
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            qv[r] = vld1q_f32(q + (size_t)r * (size_t)ldq + d);
        _Pragma("GCC unroll 8") QK_LANE(0);
        _Pragma("GCC unroll 8") QK_LANE(1);
        _Pragma("GCC unroll 8") QK_LANE(2);
        _Pragma("GCC unroll 8") QK_LANE(3);
    }
    for (; d < dk; d++) { /* dk % 4 columns: Q read element by element (its padding is off limits) */
        _Pragma("GCC unroll 8") for (int pp = 0; pp < npan; pp++) {
            const float *kl = kp + (size_t)pp * pstride + (size_t)d * NR;
            const float32x4_t k0 = vld1q_f32(kl), k1 = vld1q_f32(kl + 4);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                const float qs = q[(size_t)r * (size_t)ldq + d];
                acc[r * 2 * npan + 2 * pp] = vfmaq_n_f32(acc[r * 2 * npan + 2 * pp], k0, qs);
                acc[r * 2 * npan + 2 * pp + 1] =
                    vfmaq_n_f32(acc[r * 2 * npan + 2 * pp + 1], k1, qs);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 16") for (int c = 0; c < 2 * npan; c++)
            vst1q_f32(s + (size_t)r * (size_t)lds + 4 * c, vmulq_n_f32(acc[r * 2 * npan + c], scale));
}

/* All panels for mr rows: npan panels per tile, the remaining panels one at a time. */
ALWAYS_INLINE void qk_panels(const int mr, const int npan, int np, int dk, float scale,
                             const float *q, int ldq, const float *kp, float *s, int lds) {
    const size_t pstride = (size_t)NR * (size_t)dk;
    int p = 0;
    for (; p + npan <= np; p += npan)
        qk_tile(mr, npan, dk, scale, q, ldq, kp + (size_t)p * pstride, s + (size_t)p * NR, lds);
    for (; p < np; p++)
        qk_tile(mr, 1, dk, scale, q, ldq, kp + (size_t)p * pstride, s + (size_t)p * NR, lds);
}

static void neon_qk(int m, int n, int dk, float scale, const float *q, int ldq,
                    const float *kp, float *s, int lds) {
    const int np = (n + NR - 1) / NR;
    int r = 0;
    for (; r + 8 <= m; r += 8)
        qk_panels(8, 1, np, dk, scale, q + (size_t)r * (size_t)ldq, ldq, kp,
                  s + (size_t)r * (size_t)lds, lds);
    if (m - r >= 4) {
        qk_panels(4, 2, np, dk, scale, q + (size_t)r * (size_t)ldq, ldq, kp,
                  s + (size_t)r * (size_t)lds, lds);
        r += 4;
    }
    if (m - r >= 2) {
        qk_panels(2, 4, np, dk, scale, q + (size_t)r * (size_t)ldq, ldq, kp,
                  s + (size_t)r * (size_t)lds, lds);
        r += 2;
    }
    if (m - r >= 1)
        qk_panels(1, 4, np, dk, scale, q + (size_t)r * (size_t)ldq, ldq, kp,
                  s + (size_t)r * (size_t)lds, lds);
}

/* ---- qk_rows --------------------------------------------------------------------------
 *
 * K rows read in place, for the few query rows of decode. A group of J = 16 / R keys for
 * R = 1, 2 or 4 rows keeps one accumulator per (row, key): acc[r * J + jj] holds the
 * lane-wise sum over dk of Q[r] * K[jj] by 4-element slices. Two rounds of FADDP reduce
 * four consecutive accumulators into one vector of their four sums ((x0 + x1) + (x2 + x3)
 * each, the same tree for every lane), which is four consecutive keys of one row, since
 * J >= 4: no transposes. K is read key by key, each row from its start to its end, the
 * order hardware prefetchers follow, and the group's rows SDPA_PREFETCH_AHEAD bytes ahead
 * are prefetched (why: docs/PERFORMANCE.md, "Kernel measurements"); the accumulator
 * chains of a group are independent, so the core overlaps consecutive keys. A row's
 * accumulation order does not depend on R or on the other rows.
 * Register budget: 16 accumulators + R Q slices (read per slice: R <= 4) + 1 K slice of
 * 32 V registers. Keys past n are not read (their accumulators stay zero) and their
 * scores not stored; the last dk % 4 columns go through lane loads.
 */
ALWAYS_INLINE void qkr_key(const int R, const int J, sdpa_dtype dt, int jj, int dk,
                           const float *q, int ldq, const char *kr, float32x4_t acc[16]) {
    int d = 0;
    for (; d + 4 <= dk; d += 4) {
        const float32x4_t kv = load4(kr, d, dt);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
            acc[r * J + jj] =
                vfmaq_f32(acc[r * J + jj], vld1q_f32(q + (size_t)r * (size_t)ldq + d), kv);
    }
    if (d < dk) {
        const float32x4_t kv = load_part_dt(kr, d, dk - d, dt);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
            acc[r * J + jj] = vfmaq_f32(
                acc[r * J + jj],
                load_part(q + (size_t)r * (size_t)ldq + d, dk - d, vdupq_n_f32(0.0f)), kv);
    }
}

/* Keys [0, nk) of one group (nk <= J; FULL: nk == J, no key checks). */
ALWAYS_INLINE void qkr_group(const int R, const int FULL, sdpa_dtype dt, int nk, int dk,
                             float scale, const float *q, int ldq, const char *k, size_t ldkb,
                             float *s, int lds) {
    const int J = 16 / R;
    float32x4_t acc[16];
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) acc[i] = vdupq_n_f32(0.0f);
    _Pragma("GCC unroll 16") for (int jj = 0; jj < J; jj++) {
        if (!FULL && jj >= nk)
            break;
        qkr_key(R, J, dt, jj, dk, q, ldq, k + (size_t)jj * ldkb, acc);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        const float32x4_t sum = vpaddq_f32(vpaddq_f32(acc[4 * i], acc[4 * i + 1]),
                                           vpaddq_f32(acc[4 * i + 2], acc[4 * i + 3]));
        const int r = 4 * i / J, j0 = 4 * i % J; /* row r, keys j0 .. j0 + 3 */
        float *sr = s + (size_t)r * (size_t)lds + j0;
        const float32x4_t x = vmulq_n_f32(sum, scale);
        if (FULL || j0 + 4 <= nk)
            vst1q_f32(sr, x);
        else if (j0 < nk)
            store_part(sr, x, nk - j0);
    }
}

ALWAYS_INLINE void qkr_rows(const int R, sdpa_dtype dt, int n, int dk, float scale,
                            const float *q, int ldq, const void *k, int64_t ldk, float *s,
                            int lds, int npf, const void *pf) {
    const int J = 16 / R;
    const size_t ldkb = (size_t)ldk * elem_bytes(dt), rowb = (size_t)dk * elem_bytes(dt);
    /* row pj of pfs is prefetched for pj in [j0 + ahead, j0 + ahead + J), below pfend:
     * the rows ahead in the call and the npf after it, or a paged cache's run in step */
    const int ahead = pf ? 0 : (int)(SDPA_PREFETCH_AHEAD / rowb) + 1;
    const int pfend = pf ? npf : n + min_int(npf, ahead);
    const char *pfs = pf ? (const char *)pf : (const char *)k;
    int j0 = 0;
    for (; j0 + J <= n; j0 += J) {
        for (int pj = j0 + ahead; pj < j0 + ahead + J && pj < pfend; pj++)
            prefetch_row(pfs + (size_t)pj * ldkb, rowb);
        qkr_group(R, 1, dt, J, dk, scale, q, ldq, (const char *)k + (size_t)j0 * ldkb, ldkb,
                  s + j0, lds);
    }
    if (j0 < n)
        qkr_group(R, 0, dt, n - j0, dk, scale, q, ldq, (const char *)k + (size_t)j0 * ldkb, ldkb,
                  s + j0, lds);
}

/* Rows in tiles of 4, then 2, then 1; one instantiation per storage type. */
ALWAYS_INLINE void qk_rows_dt(sdpa_dtype dt, int m, int n, int dk, float scale, const float *q,
                              int ldq, const void *k, int64_t ldk, float *s, int lds, int npf,
                              const void *pf) {
    int r = 0;
    for (; r + 4 <= m; r += 4)
        qkr_rows(4, dt, n, dk, scale, q + (size_t)r * (size_t)ldq, ldq, k, ldk,
                 s + (size_t)r * (size_t)lds, lds, npf, pf);
    if (m - r >= 2) {
        qkr_rows(2, dt, n, dk, scale, q + (size_t)r * (size_t)ldq, ldq, k, ldk,
                 s + (size_t)r * (size_t)lds, lds, npf, pf);
        r += 2;
    }
    if (r < m)
        qkr_rows(1, dt, n, dk, scale, q + (size_t)r * (size_t)ldq, ldq, k, ldk,
                 s + (size_t)r * (size_t)lds, lds, npf, pf);
}

static void neon_qk_rows(int m, int n, int dk, float scale, const float *q, int ldq,
                         const void *k, int64_t ldk, sdpa_dtype dt, float *s, int lds, int npf,
                         const void *pf) {
    switch (dt) {
    case SDPA_F16: qk_rows_dt(SDPA_F16, m, n, dk, scale, q, ldq, k, ldk, s, lds, npf, pf); break;
    case SDPA_BF16: qk_rows_dt(SDPA_BF16, m, n, dk, scale, q, ldq, k, ldk, s, lds, npf, pf); break;
    default: /* SDPA_F32 */ qk_rows_dt(SDPA_F32, m, n, dk, scale, q, ldq, k, ldk, s, lds, npf, pf); break;
    }
}

/* ---- softmax ------------------------------------------------------------------------- */

/* One row of the online-softmax step (ukernel.h). The max uses FMAXNM, which ignores a
 * quiet NaN like the scalar table's `>` does; a NaN score still reaches l_run through
 * exp(NaN) = NaN. Lanes past n are never read as scores: the tail is lane-loaded over a
 * -inf fill (exp gives 0 there) and lane-stored. */
ALWAYS_INLINE void softmax_row(int n, float *sr, float *m_run, float *l_run, float *alpha) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    float32x4_t vm0 = ninf, vm1 = ninf;
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        vm0 = vmaxnmq_f32(vm0, vld1q_f32(sr + j));
        vm1 = vmaxnmq_f32(vm1, vld1q_f32(sr + j + 4));
    }
    for (; j + 4 <= n; j += 4)
        vm0 = vmaxnmq_f32(vm0, vld1q_f32(sr + j));
    const int w = n - j;
    if (w > 0)
        vm1 = vmaxnmq_f32(vm1, load_part(sr + j, w, ninf));
    const float bmax = vmaxnmvq_f32(vmaxnmq_f32(vm0, vm1));
    const float mx = bmax > *m_run ? bmax : *m_run;
    const float mu = mx == -INFINITY ? 0.0f : mx;

    const float32x4_t vmu = vdupq_n_f32(mu);
    float32x4_t sum0 = vdupq_n_f32(0.0f), sum1 = vdupq_n_f32(0.0f);
    j = 0;
    for (; j + 8 <= n; j += 8) {
        const float32x4_t p0 = exp_vec(vsubq_f32(vld1q_f32(sr + j), vmu), 0);
        const float32x4_t p1 = exp_vec(vsubq_f32(vld1q_f32(sr + j + 4), vmu), 0);
        vst1q_f32(sr + j, p0);
        vst1q_f32(sr + j + 4, p1);
        sum0 = vaddq_f32(sum0, p0);
        sum1 = vaddq_f32(sum1, p1);
    }
    for (; j + 4 <= n; j += 4) {
        const float32x4_t p0 = exp_vec(vsubq_f32(vld1q_f32(sr + j), vmu), 0);
        vst1q_f32(sr + j, p0);
        sum0 = vaddq_f32(sum0, p0);
    }
    if (w > 0) {
        const float32x4_t p1 = exp_vec(vsubq_f32(load_part(sr + j, w, ninf), vmu), 0);
        store_part(sr + j, p1, w);
        sum1 = vaddq_f32(sum1, p1);
    }
    const float sum = vaddvq_f32(vaddq_f32(sum0, sum1));
    const float a = vgetq_lane_f32(exp_vec(vdupq_n_f32(*m_run - mu), 0), 0);
    *alpha = a;
    *l_run = a * *l_run + sum;
    *m_run = mx;
}

static void neon_softmax(int m, int n, float *s, int lds, float *m_run, float *l_run,
                         float *alpha) {
    for (int r = 0; r < m; r++)
        softmax_row(n, s + (size_t)r * (size_t)lds, m_run + r, l_run + r, alpha + r);
}

/* ---- pv -------------------------------------------------------------------------------
 *
 * O tile (mr rows x nv vectors of 4 columns, or one partial vector of w = 1..3 columns
 * when w > 0) = alpha * O + P V, V stored as dt and widened as it is loaded.
 * acc[r * nv + c]. Per 4 keys: mr loads of P (one vector per row), then per key (lane) nv
 * vectors of its V row, each FMLA'd against every row's P lane. Keys past the last
 * multiple of 4 use the P element itself (P padding is off limits). v points at the
 * tile's first column of key 0; V rows are ldvb bytes apart. With pfs (decode: V
 * streams from DRAM; the first tile only) the pfb bytes of row j + pf of pfs while on
 * row j, below pfend, are prefetched: pfs = v, the rows pf keys ahead within the call
 * and the npf after it (kernels/ukernel.h), or a paged cache's run in step (pf = 0);
 * whole rows, so the other tiles find them in cache.
 */
ALWAYS_INLINE float32x4_t load_v(const char *vr, int c, const int w, sdpa_dtype dt) {
    return w ? load_part_dt(vr, c, w, dt) : load4(vr, c, dt);
}

#define PV_LANE(L)                                                                           \
    {                                                                                         \
        const char *vr = v + (size_t)(j + (L)) * ldvb;                                        \
        _Pragma("GCC unroll 16") for (int c = 0; c < nv; c++) {                               \
            const float32x4_t vc = load_v(vr, 4 * c, w, dt);                                  \
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)                              \
                acc[r * nv + c] = vfmaq_laneq_f32(acc[r * nv + c], vc, pv4[r], L);            \
        }                                                                                     \
    }

ALWAYS_INLINE void pv_tile(const int mr, const int nv, const int w, sdpa_dtype dt, int n,
                           const float *p, int ldp, const char *v, size_t ldvb, const float *alpha,
                           float *o, int ldo, const char *pfs, int pf, int pfend, size_t pfb) {
    float32x4_t acc[NACC];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
        const float32x4_t a = vdupq_n_f32(alpha ? alpha[r] : 1.0f);
        _Pragma("GCC unroll 16") for (int c = 0; c < nv; c++) {
            const float *orc = o + (size_t)r * (size_t)ldo + 4 * c;
            const float32x4_t x = w ? load_part(orc, w, vdupq_n_f32(0.0f)) : vld1q_f32(orc);
            acc[r * nv + c] = alpha ? vmulq_f32(x, a) : x;
        }
    }
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        for (int pj = j + pf; pfs && pj < j + pf + 4 && pj < pfend; pj++)
            prefetch_row(pfs + (size_t)pj * ldvb, pfb);
        float32x4_t pv4[MR];
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            pv4[r] = vld1q_f32(p + (size_t)r * (size_t)ldp + j);
        PV_LANE(0);
        PV_LANE(1);
        PV_LANE(2);
        PV_LANE(3);
    }
    for (; j < n; j++) {
        const char *vr = v + (size_t)j * ldvb;
        _Pragma("GCC unroll 16") for (int c = 0; c < nv; c++) {
            const float32x4_t vc = load_v(vr, 4 * c, w, dt);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
                acc[r * nv + c] = vfmaq_n_f32(acc[r * nv + c], vc, p[(size_t)r * (size_t)ldp + j]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 16") for (int c = 0; c < nv; c++) {
            float *orc = o + (size_t)r * (size_t)ldo + 4 * c;
            if (w)
                store_part(orc, acc[r * nv + c], w);
            else
                vst1q_f32(orc, acc[r * nv + c]);
        }
}

/* All dv columns for mr rows: nv vectors per tile, then single vectors, then the partial
 * one; the first tile prefetches (pfs, pf, pfend: see pv_tile). */
ALWAYS_INLINE void pv_rows(const int mr, const int nv, sdpa_dtype dt, int n, int dv,
                           const float *p, int ldp, const char *v, size_t ldvb,
                           const float *alpha, float *o, int ldo, const char *pfs, int pf,
                           int pfend) {
    const size_t es = elem_bytes(dt), pfb = (size_t)dv * es;
    int c = 0;
    for (; c + 4 * nv <= dv; c += 4 * nv)
        pv_tile(mr, nv, 0, dt, n, p, ldp, v + (size_t)c * es, ldvb, alpha, o + c, ldo,
                c ? NULL : pfs, pf, pfend, pfb);
    for (; c + 4 <= dv; c += 4)
        pv_tile(mr, 1, 0, dt, n, p, ldp, v + (size_t)c * es, ldvb, alpha, o + c, ldo,
                c ? NULL : pfs, pf, pfend, pfb);
    switch (dv - c) {
    case 1:
        pv_tile(mr, 1, 1, dt, n, p, ldp, v + (size_t)c * es, ldvb, alpha, o + c, ldo, c ? NULL : pfs, pf, pfend,
                pfb);
        break;
    case 2:
        pv_tile(mr, 1, 2, dt, n, p, ldp, v + (size_t)c * es, ldvb, alpha, o + c, ldo, c ? NULL : pfs, pf, pfend,
                pfb);
        break;
    case 3:
        pv_tile(mr, 1, 3, dt, n, p, ldp, v + (size_t)c * es, ldvb, alpha, o + c, ldo, c ? NULL : pfs, pf, pfend,
                pfb);
        break;
    default:
        break;
    }
}

/* Rows up to which pv works like decode (prefetching whole V rows ahead in its first
 * tile): a GQA group of 8. */
#define PV_WIDE_M 8

/* Rows in tiles of 8, 4, 2, 1; one instantiation per storage type. */
ALWAYS_INLINE void pv_dt(sdpa_dtype dt, int m, int n, int dv, const float *p, int ldp,
                         const void *v, int64_t ldv, const float *alpha, float *o, int ldo,
                         int npf, const void *pfv) {
    const char *vc = (const char *)v;
    const size_t ldvb = (size_t)ldv * elem_bytes(dt);
    const int ahead = (int)(SDPA_PREFETCH_AHEAD / ((size_t)dv * elem_bytes(dt))) + 1;
    /* pv_tile's prefetch: the rows ahead (few rows, or the stream goes on), or the paged
     * run the driver names, in step */
    const char *pfs = pfv ? (const char *)pfv : m <= PV_WIDE_M || npf > 0 ? vc : NULL;
    const int pf = pfv ? 0 : ahead;
    const int pfend = pfv ? npf : n + min_int(npf, ahead); /* rows below it may be prefetched */
    int r = 0;
    for (; r + 8 <= m; r += 8)
        pv_rows(8, 2, dt, n, dv, p + (size_t)r * (size_t)ldp, ldp, vc, ldvb,
                alpha ? alpha + r : NULL, o + (size_t)r * (size_t)ldo, ldo, r ? NULL : pfs, pf, pfend);
    if (m - r >= 4) {
        pv_rows(4, 4, dt, n, dv, p + (size_t)r * (size_t)ldp, ldp, vc, ldvb,
                alpha ? alpha + r : NULL, o + (size_t)r * (size_t)ldo, ldo, r ? NULL : pfs, pf, pfend);
        r += 4;
    }
    if (m - r >= 2) {
        pv_rows(2, 8, dt, n, dv, p + (size_t)r * (size_t)ldp, ldp, vc, ldvb,
                alpha ? alpha + r : NULL, o + (size_t)r * (size_t)ldo, ldo, r ? NULL : pfs, pf, pfend);
        r += 2;
    }
    if (m - r >= 1)
        pv_rows(1, 8, dt, n, dv, p + (size_t)r * (size_t)ldp, ldp, vc, ldvb,
                alpha ? alpha + r : NULL, o + (size_t)r * (size_t)ldo, ldo, r ? NULL : pfs, pf, pfend);
}

static void neon_pv(int m, int n, int dv, const float *p, int ldp, const void *v,
                    int64_t ldv, sdpa_dtype dt, const float *alpha, float *o, int ldo, int npf,
                    const void *pf) {
    switch (dt) {
    case SDPA_F16: pv_dt(SDPA_F16, m, n, dv, p, ldp, v, ldv, alpha, o, ldo, npf, pf); break;
    case SDPA_BF16: pv_dt(SDPA_BF16, m, n, dv, p, ldp, v, ldv, alpha, o, ldo, npf, pf); break;
    default: /* SDPA_F32 */ pv_dt(SDPA_F32, m, n, dv, p, ldp, v, ldv, alpha, o, ldo, npf, pf); break;
    }
}


const sdpa_kernels sdpa_kernels_neon = {
    .isa = SDPA_ISA_NEON, .name = "neon", .br = 32, .bc = 64, .kp_align = NR,
    .kp_split = NR, /* panels of NR keys, NR dk floats apart (the layout above) */
    .pack_k = neon_pack_k, .qk = neon_qk, .qk_rows = neon_qk_rows,
    .softmax = neon_softmax, .pv = neon_pv, .vexp = neon_vexp,
    .dequant = kvq_dequant,
};
