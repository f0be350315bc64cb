/*
 * neonbf16.c - the AArch64 FEAT_BF16 kernel table: the five bf16-compute entries of
 * kernels/ukernel.h (pack_q_bf16, pack_k_bf16, qk_bf16, pack_v_bf16, pv_bf16) on
 * BFMMLA, for SDPA_COMPUTE_BF16 (include/sdpa.h).
 *
 * What it is: a partial table. It sets only its identity, kpb_align, vpb_align and the
 * bf16 entries; the registry (src/dispatch.c, row "neonbf16", base "neon") composes it
 * over kernels/neon's table, so every fp32 tile (pack_k, qk, qk_rows, softmax, pv, vexp)
 * and br/bc are neon's. It is usable where the kernel reports HWCAP2_BF16 (FEAT_BF16:
 * BFCVT, BFDOT, BFMMLA, BFMLAL), and preferred there; elsewhere (ARMv8.0 cores such as
 * the Cortex-A72) the neon row stays the choice and nothing of this file executes. Built
 * with -march=armv8.2-a+bf16 (sources.mk): FEAT_BF16 is an optional Armv8.2 feature, so
 * every core that reports it implements Armv8.2 and the compiler may use all of that.
 *
 * What it is not: no fp32 tile of its own, no BFDOT (BFMMLA does 16 bf16 products per
 * instruction where BFDOT does 8, with the same arithmetic: both are the Arm ARM's
 * BFDotAdd), no SVE, no FEAT_EBF16 (it never writes FPCR). It is not tuned on real
 * hardware: qemu-aarch64 -cpu max checks correctness only, never speed.
 *
 * BFMMLA Vd.4S, Vn.8H, Vm.8H (vbfmmlaq_f32) adds the 2x4 by 4x2 product of bf16 matrices
 * to a 2x2 fp32 matrix: Vn holds two rows (one per 64-bit half) of 4 bf16 along the
 * reduction, Vm two columns the same way, and Vd lane 2i + j accumulates row i x column
 * j. Both kernels put two query rows in Vn, so a row pair is the unit of every tile.
 *
 * Arithmetic (Arm A64 ISA, DDI 0602: BFMMLA; BFCVTN, BFCVTN2; the same text for BFDOT):
 *   - BFMMLA, without FEAT_EBF16 or with FPCR.EBF = 0 (Linux leaves EBF 0), ignores
 *     FPCR: each output element adds, per pair of bf16 products, the two products
 *     (each rounded) then that sum to the accumulator (rounded), in the non-IEEE
 *     Round-to-Odd mode (an inexact result gets bit 0 set; overflow gives a signed
 *     infinity), flushing denormal inputs and results to zero as if FPCR.{FZ, FIZ} =
 *     {1, 1}, producing only the default NaN, raising no exception flag. A product of
 *     two bf16 values (8-bit significands) is exact in fp32 unless it is below 2^-126,
 *     where it is flushed. So a score or an output is an fp32 sum of exact products in a
 *     fixed order whose additions are rounded to odd: each has a relative error below
 *     2^-23 (one ulp, where round-to-nearest has half an ulp), twice fp32's unit
 *     roundoff, so the error model's g(n) for these sums is g(2n) of nearest rounding;
 *     subnormal bf16 operands, subnormal products and subnormal sums become 0 (an
 *     absolute error below 2^-126 each); a NaN anywhere gives the default NaN. qemu's
 *     helper (target/arm vec_helper.c, bfdotadd) implements exactly this:
 *     float_round_to_odd_inf, flush_to_zero, flush_inputs_to_zero, default_nan_mode.
 *     A caller that sets FPCR.EBF itself (FEAT_EBF16) gets the fused variant (one
 *     rounding per pair, FPCR's mode), within the same bounds.
 *   - BFCVTN/BFCVTN2 (vcvtq_low_bf16_f32, vcvtq_high_bf16_f32), which round K, V (fp32,
 *     or f16 widened exactly by FCVTL) and P to bf16, honour FPCR like any fp32
 *     instruction. Under Linux's default FPCR (RMode nearest even, FZ = 0, DN = 0, AH =
 *     0) they round to nearest even, keep subnormals and turn a NaN into the quiet NaN
 *     with its top payload bits: the bits of kernels/convert.h's sdpa_f32_to_bf16, which
 *     the scalar table's emulation uses. K and V stored as bf16 are copied as they are
 *     (their last 1..7 elements of a row are widened and rounded back: exact, but a
 *     signalling NaN comes back quiet; BFMMLA makes any NaN the default NaN anyway).
 *
 * Layouts (private to this table; every padding element zero, so padding adds 0 x 0):
 *   Kpb (kpb_align = KPANEL = 8): panels of 8 keys; within panel p, for each 4-dim chunk
 *       c < dkp / 4 (dkp = round_up(dk, 32)) and key pair kk < 4, the 8 bf16 that are
 *       one BFMMLA Vm operand: keys 8p + 2kk and 8p + 2kk + 1, dims 4c .. 4c + 3 each:
 *           Kpb[((p * dkp / 4 + c) * 4 + kk) * 8 + 4 h + t] = K[8p + 2kk + h][4c + t]
 *       so a panel's 4 operands of one chunk are 64 contiguous bytes. qk_bf16 writes S
 *       up to round_up(n, 8) (the padding keys' scores are 0), as the contract allows.
 *   Vpb (vpb_align = VGROUP = 4): groups of 4 keys; within group g, for each dim pair e <
 *       dvp / 2 (dvp = round_up(dv, 32)), the Vm operand of dims 2e and 2e + 1 over the
 *       group's keys:
 *           Vpb[(g * dvp / 2 + e) * 8 + 4 h + t] = V[4g + t][2e + h]
 *       (the pairs of V along keys that P V's reduction runs over).
 *   Q (driver scratch, bf16 rows) and P (fp32 rows) enter as Vn: a row pair's 4-element
 *       slices side by side, made in registers (Q: a 64-bit load per row, the second
 *       into the top half; P: BFCVTN + BFCVTN2, once per row tile and PV_KB keys into a
 *       stack buffer, not once per tile of O's columns).
 *
 * Rows are independent: a BFMMLA output element reads only its own Vn row and Vm
 * column, so a row's result does not depend on its partner; a lone last row (m odd) is
 * paired with itself (its own data read twice: nothing past row m - 1 is read, written
 * or used for alpha), and only its row is stored. Every tile shape runs the same chain
 * per element: one accumulator, zero (qk) or alpha * O (pv, FMUL), then BFMMLAs in
 * increasing dim (qk) or key (pv) order, so a row's bits do not depend on m or on which
 * tile computed it. S = scale * sum by one FMUL.
 *
 * Register tiles (32 x 128-bit V registers; names give rows x keys (qkb) or rows x
 * dims (pvb); one accumulator holds a 2 x 2 block):
 *   qkb_8x8_mmla   4 row pairs x 4 key pairs: 16 accumulators + 4 Vn (the 4 pairs' Q
 *                  for 4 dims) + 4 Vm (one panel's chunk) + 4 for the Q halves: 28.
 *                  Per 4 dims: 8 64-bit Q loads, 2 LDP of K, 16 BFMMLA.
 *   qkb_4x16_mmla  2 x 8: 16 accumulators + 2 Vn + 8 Vm (two panels) + 2: 28.
 *   qkb_2x16_mmla  1 x 8: 8 accumulators + 1 Vn + 8 Vm. Every Vm feeds one BFMMLA, so
 *                  the tile is load-bound whatever its width; 8 chains cover the
 *                  latency, and a 1 x 16 tile made GCC hoist 16 Vm loads and spill.
 *   qkb_4x8_mmla, qkb_2x8_mmla  the last panel of 4- and 2-row tiles: 8 and 4
 *                  accumulators.
 *   pvb_8x8_mmla   4 row pairs x 4 dim pairs: 16 accumulators + 4 Vn (P of the 4 pairs
 *                  for 4 keys) + 4 Vm (the 4 dim pairs of V for those keys): 24.
 *   pvb_4x16_mmla  2 x 8: 16 + 2 + 8 = 26.
 *   pvb_2x16_mmla  1 x 8: 8 + 1 + 8 = 17 (load-bound like qkb_2x16_mmla, same reason).
 *   pvb_8x4_mmla, pvb_4x4_mmla, pvb_2x4_mmla  one 4-dim granule (the dv tail, the last
 *                  one possibly 1..3 dims wide through lane loads and stores).
 * gcc 12 -O2 compiles every tile loop without a spill (checked with objdump).
 * Rows go 8 at a time while more than 6 remain (7 uses a lone last row), then 4, then
 * 2. O's columns past dv and P's keys past n are never read or written (lane loads and
 * stores for the partial granule and the last 1..3 keys), and K and V rows are read only
 * up to their dk (dv) elements, so nothing outside the contract's blocks is touched.
 */
#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "kernels/neonbf16 is AArch64 code: the Makefile builds it only when CC targets aarch64"
#endif
#if !defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#error "kernels/neonbf16 needs FEAT_BF16: build it with sources.mk's SDPA_ISAFLAGS_neonbf16"
#endif

#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>

#include "../neon/neon_mem.h"
#include "../simd.h"
#include "../ukernel.h"

enum {
    KPANEL = 8, /* keys per Kpb panel: 4 key pairs, one BFMMLA Vm each; kpb_align */
    VGROUP = 4, /* keys per Vpb group: the 4-element reduction of one BFMMLA; vpb_align */
    PV_KB = 64, /* keys of P converted to bf16 per pass of pv_bf16 (a 1 KiB stack buffer
                   for 8 rows); any n works, in passes of this many keys */
    PB_G = PV_KB / VGROUP, /* key groups per pass */
};

/* The padded widths of the contract: Qb rows, Kpb and Vpb hold round_up(dim, 32). */
static int pad32(int d) { return (d + 31) & ~31; }

/* ---- register shuffles -------------------------------------------------------------- */

/* The low (high) 64-bit halves of a and b side by side: [a.lo, b.lo] ([a.hi, b.hi]).
 * TRN1/TRN2 .2D (ZIP1/ZIP2 of two doublewords are the same permutation). */
ALWAYS_INLINE uint16x8_t lo64_u16(uint16x8_t a, uint16x8_t b) {
    const uint64x2_t x = vreinterpretq_u64_u16(a), y = vreinterpretq_u64_u16(b);
    return vreinterpretq_u16_u64(vzip1q_u64(x, y));
}
ALWAYS_INLINE uint16x8_t hi64_u16(uint16x8_t a, uint16x8_t b) {
    const uint64x2_t x = vreinterpretq_u64_u16(a), y = vreinterpretq_u64_u16(b);
    return vreinterpretq_u16_u64(vzip2q_u64(x, y));
}
ALWAYS_INLINE float32x4_t lo64_f32(float32x4_t a, float32x4_t b) {
    const uint64x2_t x = vreinterpretq_u64_f32(a), y = vreinterpretq_u64_f32(b);
    return vreinterpretq_f32_u64(vzip1q_u64(x, y));
}
ALWAYS_INLINE float32x4_t hi64_f32(float32x4_t a, float32x4_t b) {
    const uint64x2_t x = vreinterpretq_u64_f32(a), y = vreinterpretq_u64_f32(b);
    return vreinterpretq_f32_u64(vzip2q_u64(x, y));
}

/* ---- packing -------------------------------------------------------------------------- */

/* Two vectors of 4 fp32 as 8 bf16, rounded by BFCVTN + BFCVTN2 (see the top comment). */
ALWAYS_INLINE uint16x8_t round8(float32x4_t lo, float32x4_t hi) {
    return vreinterpretq_u16_bf16(vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(lo), hi));
}

/* Elements d .. d+7 of a row stored as dt, as bf16; w = the elements left in the row
 * from d (w >= 8: all eight; fewer: those, then zeros; none when w <= 0). Full slices of
 * bf16 storage are copied; the 1..7-element tails go through neon_mem.h's lane loads. */
ALWAYS_INLINE uint16x8_t load8_bf16(const void *row, int d, int w, sdpa_dtype dt) {
    if (w >= 8) {
        if (dt == SDPA_BF16)
            return vld1q_u16((const uint16_t *)row + d);
        return round8(load4(row, d, dt), load4(row, d + 4, dt));
    }
    if (w <= 0)
        return vdupq_n_u16(0);
    const float32x4_t zero = vdupq_n_f32(0.0f);
    const float32x4_t lo = w >= 4 ? load4(row, d, dt) : load_part_dt(row, d, w, dt);
    const float32x4_t hi = w > 4 ? load_part_dt(row, d + 4, w - 4, dt) : zero;
    return round8(lo, hi);
}

/* Q's row: 8 elements per step, the tail and the zeros up to round_up(dk, 32) from
 * load8_bf16. */
ALWAYS_INLINE void pack_q_dt(sdpa_dtype dt, int dk, const void *q, uint16_t *qb) {
    for (int d = 0; d < pad32(dk); d += 8)
        vst1q_u16(qb + d, load8_bf16(q, d, dk - d, dt));
}

static void neonbf16_pack_q_bf16(int dk, const void *q, sdpa_dtype dt, uint16_t *qb) {
    switch (dt) {
    case SDPA_F16: pack_q_dt(SDPA_F16, dk, q, qb); break;
    case SDPA_BF16: pack_q_dt(SDPA_BF16, dk, q, qb); break;
    default: /* SDPA_F32 */ pack_q_dt(SDPA_F32, dk, q, qb); break;
    }
}

/* 8 dims (from d, w of them left in the rows) of one Kpb panel's keys rows[0 .. nk)
 * (the rest zero): ZIP1/ZIP2 .2D put each key pair's 4-dim halves side by side, the Vm
 * of chunks d / 4 and d / 4 + 1. */
ALWAYS_INLINE void pack_k_step(sdpa_dtype dt, int nk, int d, int w, const char *k0,
                               size_t rowb, uint16_t *panel) {
    uint16x8_t r[KPANEL];
    _Pragma("GCC unroll 8") for (int i = 0; i < KPANEL; i++)
        r[i] = i < nk ? load8_bf16(k0 + (size_t)i * rowb, d, w, dt) : vdupq_n_u16(0);
    uint16_t *out = panel + (size_t)d * KPANEL; /* chunk c = d / 4 starts at 32 c */
    _Pragma("GCC unroll 4") for (int kk = 0; kk < 4; kk++) {
        vst1q_u16(out + 8 * kk, lo64_u16(r[2 * kk], r[2 * kk + 1]));      /* chunk c */
        vst1q_u16(out + 32 + 8 * kk, hi64_u16(r[2 * kk], r[2 * kk + 1])); /* chunk c + 1 */
    }
}

/* One panel: whole 8-dim slices (w = 8 known: no tail branches), then the tail and the
 * zero dims up to round_up(dk, 32). */
ALWAYS_INLINE void pack_k_panel(sdpa_dtype dt, int nk, int dk, const char *k0, size_t rowb,
                                uint16_t *panel) {
    int d = 0;
    for (; d + 8 <= dk; d += 8)
        pack_k_step(dt, nk, d, 8, k0, rowb, panel);
    for (; d < pad32(dk); d += 8)
        pack_k_step(dt, nk, d, dk - d, k0, rowb, panel);
}

ALWAYS_INLINE void pack_k_dt(sdpa_dtype dt, int n, int dk, const void *k, int64_t ldk,
                             uint16_t *kp) {
    const size_t rowb = (size_t)ldk * elem_bytes(dt);
    const size_t pstride = (size_t)KPANEL * (size_t)pad32(dk);
    int j = 0;
    for (; j + KPANEL <= n; j += KPANEL) /* a constant nk drops the zero-key checks */
        pack_k_panel(dt, KPANEL, dk, (const char *)k + (size_t)j * rowb, rowb,
                     kp + (size_t)(j / KPANEL) * pstride);
    if (j < n)
        pack_k_panel(dt, n - j, dk, (const char *)k + (size_t)j * rowb, rowb,
                     kp + (size_t)(j / KPANEL) * pstride);
}

static void neonbf16_pack_k_bf16(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                                 uint16_t *kp) {
    switch (dt) {
    case SDPA_F16: pack_k_dt(SDPA_F16, n, dk, k, ldk, kp); break;
    case SDPA_BF16: pack_k_dt(SDPA_BF16, n, dk, k, ldk, kp); break;
    default: /* SDPA_F32 */ pack_k_dt(SDPA_F32, n, dk, k, ldk, kp); break;
    }
}

/* 8 dims (from d, w of them left) of one Vpb group's keys rows[0 .. nk) (the rest
 * zero): a 4 x 8 transpose of 16-bit elements in two rounds of ZIP: ZIP1/ZIP2 .8H pair
 * keys (0, 1) and (2, 3) per dim, ZIP1/ZIP2 .4S join the pairs into [4 keys of dim 2e,
 * 4 keys of dim 2e + 1], the Vm of dim pairs d / 2 .. d / 2 + 3. */
ALWAYS_INLINE void pack_v_step(sdpa_dtype dt, int nk, int d, int w, const char *v0,
                               size_t rowb, uint16_t *group, uint16x8_t *inf_nan) {
    uint16x8_t r[VGROUP];
    const uint16x8_t ex = vdupq_n_u16(0x7f80); /* bf16's exponent field */
    _Pragma("GCC unroll 4") for (int i = 0; i < VGROUP; i++) {
        r[i] = i < nk ? load8_bf16(v0 + (size_t)i * rowb, d, w, dt) : vdupq_n_u16(0);
        *inf_nan = vorrq_u16(*inf_nan, vceqq_u16(vandq_u16(r[i], ex), ex));
    }
    const uint32x4_t a0 = vreinterpretq_u32_u16(vzip1q_u16(r[0], r[1])); /* dims 0-3 */
    const uint32x4_t b0 = vreinterpretq_u32_u16(vzip1q_u16(r[2], r[3]));
    const uint32x4_t a1 = vreinterpretq_u32_u16(vzip2q_u16(r[0], r[1])); /* dims 4-7 */
    const uint32x4_t b1 = vreinterpretq_u32_u16(vzip2q_u16(r[2], r[3]));
    uint16_t *out = group + (size_t)d * VGROUP; /* dim pair e = d / 2 starts at 8 e */
    vst1q_u16(out, vreinterpretq_u16_u32(vzip1q_u32(a0, b0)));
    vst1q_u16(out + 8, vreinterpretq_u16_u32(vzip2q_u32(a0, b0)));
    vst1q_u16(out + 16, vreinterpretq_u16_u32(vzip1q_u32(a1, b1)));
    vst1q_u16(out + 24, vreinterpretq_u16_u32(vzip2q_u32(a1, b1)));
}

/* One group, as pack_k_panel; lanes of *inf_nan set where an element is inf or NaN. */
ALWAYS_INLINE void pack_v_group(sdpa_dtype dt, int nk, int dv, const char *v0, size_t rowb,
                                uint16_t *group, uint16x8_t *inf_nan) {
    int d = 0;
    for (; d + 8 <= dv; d += 8)
        pack_v_step(dt, nk, d, 8, v0, rowb, group, inf_nan);
    for (; d < pad32(dv); d += 8)
        pack_v_step(dt, nk, d, dv - d, v0, rowb, group, inf_nan);
}

ALWAYS_INLINE int pack_v_dt(sdpa_dtype dt, int n, int dv, const void *v, int64_t ldv,
                            uint16_t *vp) {
    const size_t rowb = (size_t)ldv * elem_bytes(dt);
    const size_t gstride = (size_t)VGROUP * (size_t)pad32(dv);
    uint16x8_t inf_nan = vdupq_n_u16(0);
    int j = 0;
    for (; j + VGROUP <= n; j += VGROUP)
        pack_v_group(dt, VGROUP, dv, (const char *)v + (size_t)j * rowb, rowb,
                     vp + (size_t)(j / VGROUP) * gstride, &inf_nan);
    if (j < n)
        pack_v_group(dt, n - j, dv, (const char *)v + (size_t)j * rowb, rowb,
                     vp + (size_t)(j / VGROUP) * gstride, &inf_nan);
    return vmaxvq_u16(inf_nan) == 0;
}

static int neonbf16_pack_v_bf16(int n, int dv, const void *v, int64_t ldv, sdpa_dtype dt,
                                uint16_t *vp) {
    switch (dt) {
    case SDPA_F16: return pack_v_dt(SDPA_F16, n, dv, v, ldv, vp);
    case SDPA_BF16: return pack_v_dt(SDPA_BF16, n, dv, v, ldv, vp);
    default: /* SDPA_F32 */ return pack_v_dt(SDPA_F32, n, dv, v, ldv, vp);
    }
}

/* ---- qk_bf16 ---------------------------------------------------------------------------
 *
 * S tile = scale * Qb[2 RP rows] Kpb[NP panels]^T; mr (2 RP - 1 or 2 RP) rows are real.
 * acc[(rp * NP + pp) * 4 + kk] = rows (2rp, 2rp + 1) x keys (8pp + 2kk, 8pp + 2kk + 1).
 * Per 4 dims (one chunk): each row pair's Vn from two 64-bit loads (the second row's
 * into the top half), then each panel's 4 Vm (contiguous) against every row pair. The
 * dims run to round_up(dk, 4): Qb is zero from dk to round_up(dk, 32) (the contract)
 * and so is Kpb.
 */
ALWAYS_INLINE void qkb_tile(const int RP, const int NP, int mr, int dk, float scale,
                            const uint16_t *q, int ldq, const uint16_t *kp, float *s, int lds) {
    const size_t pstride = (size_t)KPANEL * (size_t)pad32(dk);
    const uint16_t *q0[4], *q1[4];
    _Pragma("GCC unroll 4") for (int rp = 0; rp < RP; rp++) {
        q0[rp] = q + (size_t)(2 * rp) * (size_t)ldq;
        q1[rp] = 2 * rp + 1 < mr ? q0[rp] + ldq : q0[rp]; /* a lone row pairs with itself */
    }
    float32x4_t acc[16];
    _Pragma("GCC unroll 16") for (int i = 0; i < RP * NP * 4; i++) acc[i] = vdupq_n_f32(0.0f);
    const int d4 = (dk + 3) & ~3;
    for (int d = 0; d < d4; d += 4) {
        bfloat16x8_t a[4];
        _Pragma("GCC unroll 4") for (int rp = 0; rp < RP; rp++) {
            const uint16x8_t x = vcombine_u16(vld1_u16(q0[rp] + d), vld1_u16(q1[rp] + d));
            a[rp] = vreinterpretq_bf16_u16(x);
        }
        const uint16_t *kc = kp + (size_t)d * KPANEL; /* chunk d / 4 of panel 0 */
        _Pragma("GCC unroll 4") for (int pp = 0; pp < NP; pp++)
            _Pragma("GCC unroll 4") for (int kk = 0; kk < 4; kk++) {
                const uint16_t *kv = kc + pp * pstride + 8 * kk;
                const bfloat16x8_t b = vreinterpretq_bf16_u16(vld1q_u16(kv));
                _Pragma("GCC unroll 4") for (int rp = 0; rp < RP; rp++) {
                    float32x4_t *c = &acc[(rp * NP + pp) * 4 + kk];
                    *c = vbfmmlaq_f32(*c, a[rp], b);
                }
            }
    }
    /* two accumulators (key pairs kk, kk + 1) give 4 consecutive keys of each row */
    _Pragma("GCC unroll 4") for (int rp = 0; rp < RP; rp++) {
        float *s0 = s + (size_t)(2 * rp) * (size_t)lds;
        _Pragma("GCC unroll 4") for (int pp = 0; pp < NP; pp++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const float32x4_t x = acc[(rp * NP + pp) * 4 + 2 * h];
                const float32x4_t y = acc[(rp * NP + pp) * 4 + 2 * h + 1];
                const int col = KPANEL * pp + 4 * h;
                vst1q_f32(s0 + col, vmulq_n_f32(lo64_f32(x, y), scale));
                if (2 * rp + 1 < mr)
                    vst1q_f32(s0 + lds + col, vmulq_n_f32(hi64_f32(x, y), scale));
            }
    }
}

/* The named shapes (rows x keys): each its own symbol, so a profile shows which runs; a
 * call per tile costs nothing next to its dk / 4 x (up to) 16 BFMMLAs. */
#define QKB_ARGS int mr, int dk, float scale, const uint16_t *q, int ldq, const uint16_t *kp, \
                 float *s, int lds
#define QKB_PASS mr, dk, scale, q, ldq, kp, s, lds
__attribute__((noinline)) static void qkb_8x8_mmla(QKB_ARGS) { qkb_tile(4, 1, QKB_PASS); }
__attribute__((noinline)) static void qkb_4x16_mmla(QKB_ARGS) { qkb_tile(2, 2, QKB_PASS); }
__attribute__((noinline)) static void qkb_4x8_mmla(QKB_ARGS) { qkb_tile(2, 1, QKB_PASS); }
__attribute__((noinline)) static void qkb_2x16_mmla(QKB_ARGS) { qkb_tile(1, 2, QKB_PASS); }
__attribute__((noinline)) static void qkb_2x8_mmla(QKB_ARGS) { qkb_tile(1, 1, QKB_PASS); }

typedef void (*qkb_fn)(QKB_ARGS);

/* All panels for one row tile: `wide` (np_wide panels at a time) then `one` per panel. */
static void qkb_panels(qkb_fn wide, int np_wide, qkb_fn one, int np, int mr, int dk,
                       float scale, const uint16_t *q, int ldq, const uint16_t *kp, float *s,
                       int lds) {
    const size_t pstride = (size_t)KPANEL * (size_t)pad32(dk);
    int p = 0;
    for (; p + np_wide <= np; p += np_wide)
        wide(mr, dk, scale, q, ldq, kp + (size_t)p * pstride, s + p * KPANEL, lds);
    for (; p < np; p++)
        one(mr, dk, scale, q, ldq, kp + (size_t)p * pstride, s + p * KPANEL, lds);
}

static void neonbf16_qk_bf16(int m, int n, int dk, float scale, const uint16_t *q, int ldq,
                             const uint16_t *kp, float *s, int lds) {
    const int np = (n + KPANEL - 1) / KPANEL;
    int r = 0;
    for (; m - r > 6; r += 8)
        qkb_panels(qkb_8x8_mmla, 1, qkb_8x8_mmla, np, min_int(m - r, 8), dk, scale,
                   q + (size_t)r * (size_t)ldq, ldq, kp, s + (size_t)r * (size_t)lds, lds);
    if (m - r > 2) {
        qkb_panels(qkb_4x16_mmla, 2, qkb_4x8_mmla, np, min_int(m - r, 4), dk, scale,
                   q + (size_t)r * (size_t)ldq, ldq, kp, s + (size_t)r * (size_t)lds, lds);
        r += 4;
    }
    if (m - r > 0)
        qkb_panels(qkb_2x16_mmla, 2, qkb_2x8_mmla, np, m - r, dk, scale,
                   q + (size_t)r * (size_t)ldq, ldq, kp, s + (size_t)r * (size_t)lds, lds);
}

/* ---- pv_bf16 ---------------------------------------------------------------------------
 *
 * O tile (2 RP rows, mr of them real, x NG granules of 4 dims, the last one w = 1..4
 * dims wide) = alpha * O + Pb Vpb over ng groups of 4 keys. acc[(rp * NG + gi) * 2 + h]
 * = rows (2rp, 2rp + 1) x dims (4gi + 2h, 4gi + 2h + 1), loaded from two O rows of 4
 * dims by a 64-bit ZIP and stored back by the inverse one. pb holds the Vn of each (row
 * pair, key group), PB_G apart per pair; vg points at the tile's first dim pair of key
 * group 0, groups gstride elements apart. alpha NULL: no rescale.
 */
ALWAYS_INLINE void pvb_tile(const int RP, const int NG, int w, int mr, int ng,
                            const bfloat16x8_t *pb, const uint16_t *vg, size_t gstride,
                            const float *alpha, float *o, int ldo) {
    float32x4_t acc[16];
    const float32x4_t zero = vdupq_n_f32(0.0f);
    _Pragma("GCC unroll 4") for (int rp = 0; rp < RP; rp++) {
        const int r0 = 2 * rp, r1 = 2 * rp + 1 < mr ? r0 + 1 : r0;
        const float *o0 = o + (size_t)r0 * (size_t)ldo, *o1 = o + (size_t)r1 * (size_t)ldo;
        _Pragma("GCC unroll 8") for (int gi = 0; gi < NG; gi++) {
            const int wd = gi == NG - 1 ? w : 4;
            const float *c0 = o0 + 4 * gi, *c1 = o1 + 4 * gi;
            float32x4_t x0 = wd == 4 ? vld1q_f32(c0) : load_part(c0, wd, zero);
            float32x4_t x1 = wd == 4 ? vld1q_f32(c1) : load_part(c1, wd, zero);
            if (alpha) {
                x0 = vmulq_n_f32(x0, alpha[r0]);
                x1 = vmulq_n_f32(x1, alpha[r1]);
            }
            acc[(rp * NG + gi) * 2] = lo64_f32(x0, x1);
            acc[(rp * NG + gi) * 2 + 1] = hi64_f32(x0, x1);
        }
    }
    for (int g = 0; g < ng; g++) {
        const uint16_t *vk = vg + (size_t)g * gstride;
        bfloat16x8_t a[4];
        _Pragma("GCC unroll 4") for (int rp = 0; rp < RP; rp++) a[rp] = pb[rp * PB_G + g];
        _Pragma("GCC unroll 16") for (int e = 0; e < 2 * NG; e++) {
            const bfloat16x8_t b = vreinterpretq_bf16_u16(vld1q_u16(vk + 8 * e));
            _Pragma("GCC unroll 4") for (int rp = 0; rp < RP; rp++)
                acc[rp * NG * 2 + e] = vbfmmlaq_f32(acc[rp * NG * 2 + e], a[rp], b);
        }
    }
    _Pragma("GCC unroll 4") for (int rp = 0; rp < RP; rp++) {
        float *o0 = o + (size_t)(2 * rp) * (size_t)ldo;
        _Pragma("GCC unroll 8") for (int gi = 0; gi < NG; gi++) {
            const int wd = gi == NG - 1 ? w : 4;
            const float32x4_t x = acc[(rp * NG + gi) * 2], y = acc[(rp * NG + gi) * 2 + 1];
            if (wd == 4)
                vst1q_f32(o0 + 4 * gi, lo64_f32(x, y));
            else
                store_part(o0 + 4 * gi, lo64_f32(x, y), wd);
            if (2 * rp + 1 < mr) {
                if (wd == 4)
                    vst1q_f32(o0 + ldo + 4 * gi, hi64_f32(x, y));
                else
                    store_part(o0 + ldo + 4 * gi, hi64_f32(x, y), wd);
            }
        }
    }
}

/* The named shapes (rows x dims), as for qkb_*: the wide ones are all 4-dim granules
 * (w = 4 known, so no lane-load branches), the 4-dim ones take the width of theirs. */
#define PVB_ARGS int mr, int ng, const bfloat16x8_t *pb, const uint16_t *vg, size_t gstride, \
                 const float *alpha, float *o, int ldo
#define PVB_PASS mr, ng, pb, vg, gstride, alpha, o, ldo
__attribute__((noinline)) static void pvb_8x8_mmla(PVB_ARGS) { pvb_tile(4, 2, 4, PVB_PASS); }
__attribute__((noinline)) static void pvb_4x16_mmla(PVB_ARGS) { pvb_tile(2, 4, 4, PVB_PASS); }
__attribute__((noinline)) static void pvb_2x16_mmla(PVB_ARGS) { pvb_tile(1, 4, 4, PVB_PASS); }
__attribute__((noinline)) static void pvb_8x4_mmla(int w, PVB_ARGS) {
    pvb_tile(4, 1, w, PVB_PASS);
}
__attribute__((noinline)) static void pvb_4x4_mmla(int w, PVB_ARGS) {
    pvb_tile(2, 1, w, PVB_PASS);
}
__attribute__((noinline)) static void pvb_2x4_mmla(int w, PVB_ARGS) {
    pvb_tile(1, 1, w, PVB_PASS);
}

typedef void (*pvb_wide_fn)(PVB_ARGS);
typedef void (*pvb_one_fn)(int w, PVB_ARGS);

/* All of dv for one row tile of mr rows (rp_n row pairs): P in passes of PV_KB keys,
 * each rounded to bf16 once into pb (keys past n as zeros: their lanes are never
 * loaded), then `wide` tiles of 4 * ng_wide dims and `one` granules of 4 for the rest.
 * alpha is applied by the first pass only; later passes add to O as stored (exact). */
static void pvb_rows(pvb_wide_fn wide, int ng_wide, pvb_one_fn one, int rp_n, int mr, int n,
                     int dv, const float *p, int ldp, const uint16_t *vp, const float *alpha,
                     float *o, int ldo) {
    const size_t gstride = (size_t)VGROUP * (size_t)pad32(dv);
    const float32x4_t zero = vdupq_n_f32(0.0f);
    bfloat16x8_t pb[4 * PB_G];
    for (int j0 = 0; j0 == 0 || j0 < n; j0 += PV_KB) { /* n == 0 still rescales */
        const int kb = min_int(PV_KB, n - j0), ng = (kb + VGROUP - 1) / VGROUP;
        for (int rp = 0; rp < rp_n; rp++) {
            const int r0 = 2 * rp, r1 = 2 * rp + 1 < mr ? r0 + 1 : r0;
            const float *p0 = p + (size_t)r0 * (size_t)ldp + j0;
            const float *p1 = p + (size_t)r1 * (size_t)ldp + j0;
            for (int g = 0; g < ng; g++) {
                const int wk = kb - VGROUP * g;
                const float *c0 = p0 + VGROUP * g, *c1 = p1 + VGROUP * g;
                const float32x4_t x0 = wk >= 4 ? vld1q_f32(c0) : load_part(c0, wk, zero);
                const float32x4_t x1 = wk >= 4 ? vld1q_f32(c1) : load_part(c1, wk, zero);
                pb[rp * PB_G + g] = vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(x0), x1);
            }
        }
        const uint16_t *vb = vp + (size_t)(j0 / VGROUP) * gstride;
        const float *al = j0 == 0 ? alpha : NULL;
        int d = 0;
        for (; d + 4 * ng_wide <= dv; d += 4 * ng_wide)
            wide(mr, ng, pb, vb + (size_t)d * 4, gstride, al, o + d, ldo);
        for (; d < dv; d += 4) /* dim pair d / 2 starts at element 8 (d / 2) = 4 d */
            one(min_int(dv - d, 4), mr, ng, pb, vb + (size_t)d * 4, gstride, al, o + d, ldo);
    }
}

static void neonbf16_pv_bf16(int m, int n, int dv, const float *p, int ldp, const uint16_t *vp,
                             const float *alpha, float *o, int ldo) {
    int r = 0;
    for (; m - r > 6; r += 8)
        pvb_rows(pvb_8x8_mmla, 2, pvb_8x4_mmla, 4, min_int(m - r, 8), n, dv,
                 p + (size_t)r * (size_t)ldp, ldp, vp, alpha ? alpha + r : NULL,
                 o + (size_t)r * (size_t)ldo, ldo);
    if (m - r > 2) {
        pvb_rows(pvb_4x16_mmla, 4, pvb_4x4_mmla, 2, min_int(m - r, 4), n, dv,
                 p + (size_t)r * (size_t)ldp, ldp, vp, alpha ? alpha + r : NULL,
                 o + (size_t)r * (size_t)ldo, ldo);
        r += 4;
    }
    if (m - r > 0)
        pvb_rows(pvb_2x16_mmla, 4, pvb_2x4_mmla, 1, m - r, n, dv, p + (size_t)r * (size_t)ldp,
                 ldp, vp, alpha ? alpha + r : NULL, o + (size_t)r * (size_t)ldo, ldo);
}

/* Only the bf16 entries and their alignments: the registry takes everything else from
 * the neon row (src/dispatch.c, overlay). */
const sdpa_kernels sdpa_kernels_neonbf16 = {
    .isa = SDPA_ISA_NEONBF16, .name = "neonbf16",
    .kpb_align = KPANEL, .vpb_align = VGROUP,
    .pack_q_bf16 = neonbf16_pack_q_bf16, .pack_k_bf16 = neonbf16_pack_k_bf16,
    .qk_bf16 = neonbf16_qk_bf16,
    .pack_v_bf16 = neonbf16_pack_v_bf16, .pv_bf16 = neonbf16_pv_bf16,
};
