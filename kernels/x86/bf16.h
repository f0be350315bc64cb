/*
 * bf16.h - what the two x86 bf16 tables share (kernels/avx512bf16/avx512bf16.c, the
 * vdpbf16ps register tiles, and kernels/amx/amx.c, the AMX tiles): the layouts of the
 * packed bf16 blocks Kpb and Vpb, the functions that pack them (pack_k_bf16,
 * pack_v_bf16 of kernels/ukernel.h) and Q's rows (pack_q_bf16), and the conversion of P
 * rows to bf16 pairs.
 *
 * It is not a header in the usual sense: it defines static functions, is included once
 * per table file after kernels/x86/vec_avx512.h (whose AVX-512 flags, with
 * -mavx512bf16, are on) and never on its own. It holds no QK^T or P V arithmetic: each
 * table's file has its own.
 *
 * Rounding. fp32 (and f16, widened exactly first) becomes bf16 through vcvtne2ps2bf16
 * (Q, K, V and P alike):
 * round to nearest even, NaN kept and quietened, as kernels/convert.h's
 * sdpa_f32_to_bf16, except that an fp32 subnormal becomes a signed zero (the
 * instruction's DAZ; Intel SDM vol. 2, VCVTNE2PS2BF16, convert_fp32_to_bfloat16). The
 * products that read these operands (vdpbf16ps, tdpbf16ps) read bf16 subnormals as zero
 * anyway, so this differs from exact rounding only for the fp32 subnormals within 2^-134
 * of 2^-126, which round to 2^-126 and here become 0: a term with an operand below
 * 2^-126 dropped, as the error model allows. bf16 storage is copied as it is.
 *
 * Layouts (both the same in the two tables, so each packs with this one code):
 *   Kpb: keys padded to KPB_KEYS = 16 (kpb_align), in strips of 16 keys; dims padded to
 *        dkp = round_up(dk, 32). Strip s is at kp + 16 s dkp; within it, dim pair p
 *        (dims 2p, 2p + 1) is 32 elements at 32 p, key j's pair the 32-bit word j. So
 *        one 64-byte vector holds 2 dims of 16 keys (vdpbf16ps's operand against a
 *        broadcast pair of Q), and 16 consecutive pairs are an AMX B tile of 16 rows
 *        (K^T in the pair layout of TDPBF16PS).
 *   Vpb: keys padded to VPB_KEYS = 32 (vpb_align: one AMX step of 32 keys), dims padded
 *        to dvs = round_up(dv, 16). Key pair kk (keys 2kk, 2kk + 1) is the row of 2 dvs
 *        elements at vp + 2 dvs kk, dim d's pair the 32-bit word d of it. So one vector
 *        holds 16 dims of 2 keys (vdpbf16ps's operand against a broadcast pair of P),
 *        and 16 consecutive rows at 16 dims are an AMX B tile.
 * Both fit the contract's round_up(n, align) * round_up(dim, 32) elements.
 */
#ifndef SDPA_X86_BF16_H
#define SDPA_X86_BF16_H

#if !defined(__AVX512BF16__) || !defined(SDPA_VEC_LAYER)
#error "kernels/x86/bf16.h is compiled through a bf16 table, after vec_avx512.h, with -mavx512bf16"
#endif

#include <stdint.h>

#include "transpose.h"

enum { KPB_KEYS = 16, VPB_KEYS = 32 };
_Static_assert(VL == 16, "the bf16 layouts are written for 16-float vectors");

static inline int round_up_int(int a, int b) { return (a + b - 1) / b * b; }

/* The first nd (0..32) elements from element d0 of a row stored as dt, as 32 bf16 in a
 * vector (element 2i in the low half of 32-bit lane i), zero past nd; nothing past nd
 * is read. */
ALWAYS_INLINE __m512i row_bf16x32(const void *row, int d0, int nd, sdpa_dtype dt) {
    const int lo = min_int(nd, 16), hi = nd > 16 ? nd - 16 : 0;
    if (dt == SDPA_BF16)
        return _mm512_maskz_loadu_epi16((__mmask32)(nd >= 32 ? 0xffffffffu : (1u << nd) - 1u),
                                        (const uint16_t *)row + d0);
    vf a, b;
    if (dt == SDPA_F16) {
        a = v_widen_f16(v_load_u16((const uint16_t *)row + d0, v_tail(lo)));
        b = v_widen_f16(v_load_u16((const uint16_t *)row + d0 + 16, v_tail(hi)));
    } else {
        a = v_load_tail((const float *)row + d0, v_tail(lo));
        b = v_load_tail((const float *)row + d0 + 16, v_tail(hi));
    }
    /* the second operand becomes the low 16 elements */
    return (__m512i)_mm512_cvtne2ps_pbh(b, a);
}

/* ---- pack_q_bf16 ----------------------------------------------------------------- */

/* 32 elements per step; the zero tail comes from row_bf16x32's masked loads. */
ALWAYS_INLINE void pack_q_bf16_dt(int dk, const void *q, sdpa_dtype dt, uint16_t *qb) {
    for (int d0 = 0; d0 < dk; d0 += 32)
        _mm512_store_si512(qb + d0, row_bf16x32(q, d0, min_int(32, dk - d0), dt));
}

static void x86_pack_q_bf16(int dk, const void *q, sdpa_dtype dt, uint16_t *qb) {
    switch (dt) {
    case SDPA_F16: pack_q_bf16_dt(dk, q, SDPA_F16, qb); return;
    case SDPA_BF16: pack_q_bf16_dt(dk, q, SDPA_BF16, qb); return;
    default: /* SDPA_F32 */ pack_q_bf16_dt(dk, q, SDPA_F32, qb); return;
    }
}

/* ---- pack_k_bf16 ----------------------------------------------------------------- */

/* One dt at a time, so the conversion is hoisted out of the loops. Each 16 keys x 32
 * dims panel is loaded as 16 rows of 16 pairs, transposed in registers (transpose.h
 * moves 32-bit lanes, so a pair travels whole) and stored as 16 pair-vectors: one pass
 * over K. The next strip's rows are prefetched while this one is transposed, as
 * tiles.h's pack_k does (K comes from the caller's memory, usually L3; simd.h,
 * pack_pf_begin). */
ALWAYS_INLINE void pack_k_bf16_dt(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                                  uint16_t *kp) {
    const size_t es = elem_bytes(dt);
    const int dkp = round_up_int(dk, 32), np = round_up_int(n, KPB_KEYS);
    for (int j0 = 0; j0 < np; j0 += KPB_KEYS) {
        const int nk = min_int(KPB_KEYS, n - j0);
        const char *src = (const char *)k + (size_t)j0 * (size_t)ldk * es;
        uint16_t *dst = kp + (size_t)j0 * (size_t)dkp;
        const pack_pf pf =
            pack_pf_begin(KPB_KEYS, src, (size_t)ldk * es, n - j0, (size_t)dk * es);
        for (int d0 = 0; d0 < dkp; d0 += 32) {
            const int nd = min_int(32, dk - d0);
            vf r[VL];
            pack_pf_step(KPB_KEYS, &pf, (size_t)d0 * es, (size_t)nd * es);
            UNROLL_FULL
            for (int i = 0; i < VL; i++)
                r[i] = i < nk ? _mm512_castsi512_ps(
                                    row_bf16x32(src + (size_t)i * (size_t)ldk * es, d0, nd, dt))
                              : v_zero();
            transpose(r);
            UNROLL_FULL
            for (int p = 0; p < VL; p++)
                _mm512_store_ps(dst + (size_t)(d0 + 2 * p) * KPB_KEYS, r[p]);
        }
    }
}

static void x86_pack_k_bf16(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                            uint16_t *kp) {
    switch (dt) {
    case SDPA_F16: pack_k_bf16_dt(n, dk, k, ldk, SDPA_F16, kp); return;
    case SDPA_BF16: pack_k_bf16_dt(n, dk, k, ldk, SDPA_BF16, kp); return;
    default: /* SDPA_F32 */ pack_k_bf16_dt(n, dk, k, ldk, SDPA_F32, kp); return;
    }
}

/* ---- pack_v_bf16 ----------------------------------------------------------------- */

/* Per key pair and 32 dims: the two rows as 32 bf16 each, interleaved element by element
 * with vpermt2w into dims 0-15 and 16-31 of the pair. Keys past n are zero rows. The
 * rows PF_PAIRS pairs ahead are prefetched: V is caller memory, read in row pairs. An
 * all-ones exponent field in any rounded element (inf or NaN) makes the result 0. */
ALWAYS_INLINE int pack_v_bf16_dt(int n, int dv, const void *v, int64_t ldv, sdpa_dtype dt,
                                 uint16_t *vp) {
    enum { PF_PAIRS = 4 };
    const size_t es = elem_bytes(dt), ldvb = (size_t)ldv * es;
    const int dvs = round_up_int(dv, 16), np = round_up_int(n, VPB_KEYS);
    /* word i of the result: element i of the first row, then of the second (index 32 +
     * i selects the second source of vpermt2w) */
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10,
                                            41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3,
                                            34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    const __m512i ex = _mm512_set1_epi16(0x7f80); /* bf16's exponent field */
    __mmask32 inf_nan = 0;
    for (int j = 0; j < np; j += 2) {
        const char *r0 = (const char *)v + (size_t)j * ldvb, *r1 = r0 + ldvb;
        uint16_t *dst = vp + (size_t)j * (size_t)dvs;
        for (int pj = j + 2 * PF_PAIRS; pj < j + 2 * PF_PAIRS + 2 && pj < n; pj++)
            prefetch_row((const char *)v + (size_t)pj * ldvb, (size_t)dv * es);
        for (int d0 = 0; d0 < dvs; d0 += 32) {
            const int nd = min_int(32, dv - d0);
            const __m512i a = j < n ? row_bf16x32(r0, d0, nd, dt) : _mm512_setzero_si512();
            const __m512i b = j + 1 < n ? row_bf16x32(r1, d0, nd, dt) : _mm512_setzero_si512();
            inf_nan |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(a, ex), ex) |
                       _mm512_cmpeq_epi16_mask(_mm512_and_si512(b, ex), ex);
            _mm512_store_si512(dst + 2 * d0, _mm512_permutex2var_epi16(a, lo_idx, b));
            if (d0 + 16 < dvs)
                _mm512_store_si512(dst + 2 * d0 + 32, _mm512_permutex2var_epi16(a, hi_idx, b));
        }
    }
    return inf_nan == 0;
}

static int x86_pack_v_bf16(int n, int dv, const void *v, int64_t ldv, sdpa_dtype dt,
                           uint16_t *vp) {
    switch (dt) {
    case SDPA_F16: return pack_v_bf16_dt(n, dv, v, ldv, SDPA_F16, vp);
    case SDPA_BF16: return pack_v_bf16_dt(n, dv, v, ldv, SDPA_BF16, vp);
    default: /* SDPA_F32 */ return pack_v_bf16_dt(n, dv, v, ldv, SDPA_F32, vp);
    }
}

/* ---- P to bf16 ------------------------------------------------------------------- */

/* Pb[r][0..npad) = bf16(P[r][0..n)), zero from n to npad (a multiple of 32), for r < rows:
 * P rows ldp floats apart from any column (masked loads: nothing past P[r][n - 1] is
 * read, so P's unspecified padding never enters a sum), Pb rows ldpb elements apart,
 * 64-byte aligned. Key pair kk of row r is then the 32-bit word kk of the row. */
ALWAYS_INLINE void p_rows_bf16(int rows, int n, int npad, const float *p, int ldp, uint16_t *pb,
                               int ldpb) {
    for (int r = 0; r < rows; r++) {
        const float *pr = p + (size_t)r * (size_t)ldp;
        uint16_t *br = pb + (size_t)r * (size_t)ldpb;
        for (int j = 0; j < npad; j += 32) {
            const int nd = j < n ? min_int(32, n - j) : 0;
            const vf a = v_load_tail(pr + j, v_tail(min_int(nd, 16)));
            const vf b = v_load_tail(pr + j + 16, v_tail(nd > 16 ? nd - 16 : 0));
            _mm512_store_si512(br + j, (__m512i)_mm512_cvtne2ps_pbh(b, a));
        }
    }
}

#endif /* SDPA_X86_BF16_H */
