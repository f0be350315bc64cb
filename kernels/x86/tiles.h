/*
 * tiles.h - the x86 tile functions, written once for every x86 vector width: pack_k, the
 * qk and qk_rows register tiles, softmax, the pv register tiles and pv's chunking, the
 * vector exp, and their helpers (widening loads, the reduction trees; the transpose is
 * kernels/x86/transpose.h's); qk_rows and pv also read quantized K/V rows in place,
 * decoded with kernels/kvq.h (qk_rows_q, pv_q).
 * kernels/avx2/avx2.c and kernels/avx512/avx512.c each compile it with their own -m
 * flags, after their vector layer (kernels/x86/vec_avx2.h, vec_avx512.h), and build
 * their table from what it defines.
 *
 * It is not a header in the usual sense: it defines functions, is included once per ISA
 * file and never on its own, and names no instruction. Everything it needs of the ISA
 * comes from the vector layer (the vector vf of VL floats, loads and stores with masked
 * tails, 16-bit widening, shuffles, the ISA steps of the exp). The including file
 * defines, before the #include, pv's chunking constants PV_CMAX, PV_WIDE_CMAX, PVQ_CMAX
 * (with PVQ_FEW_M, PVQ_CMAX_FEW and PVQ_UNSC_WHOLE), PV_PF_WHOLE_ROWS and
 * PV_CHUNK_SPAN_BYTES (0: decode's chunks one call each) with pv_spans_ok (which
 * decode calls run their chunks span by span), qk_rows' rows
 * per pass QKR_MR and the
 * UNROLL_BC pragma, and after
 * it `pv_chunk` and `pvq_chunk`, its choice of pv and pvq register tile for each chunk
 * width. The meaning of each
 * function is the contract of kernels/ukernel.h (the same as kernels/scalar/scalar.c,
 * not the same bits: FMA contraction, this exp, another summation order); it knows
 * nothing of masks, heads or threads. Every tail (keys, rows, head dims not multiples of
 * VL or of a register tile) runs through the same vector code with masked loads and
 * stores, so nothing outside the caller's rows or the contract's scratch regions is
 * touched.
 *
 * Names. A register tile is named by its shape in rows x vectors, a vector being VL
 * floats (16 on AVX-512, 8 on AVX2): qk_12x2v is 12 query rows by 2 vectors of keys,
 * pv_6x4v 6 rows by 4 vectors of Dv columns, qkr_8rows 8 rows of qk_rows. Each is its
 * own function with its register budget in its comment; an ISA uses the ones that fit
 * its register file (AVX-512: 32 vectors, qk_12x2v; AVX2: 16, qk_6x2v), named by its
 * table, its QKR_MR or its pv_chunk. Inside a tile function, a switch over constants
 * (the rows left, the storage type) inlines the always-inline template with constant
 * counts, so the accumulator arrays become registers; each switch's default cannot be
 * reached, by the construction its comment gives, and an arm for more rows than the
 * tile has is an empty instance.
 *
 * Kp layout (pack_k, read by qk): keys padded to a multiple of VL (kp_align = VL), cut
 * into strips of 2 VL keys, the last strip VL wide when the padded count is an odd
 * number of VLs. A strip starting at key j0 of width W lives at kp + j0 * dk as [d][W]:
 * at every d, its W keys are contiguous, so qk streams one or two whole vectors per d
 * and broadcasts Q.
 */
#ifndef SDPA_VEC_LAYER
#error "kernels/x86/tiles.h is compiled through an ISA file, after its vector layer"
#endif

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kvload.h"
#include "reduce.h"
#include "transpose.h"

/* A register tile: its own function, never inlined into its caller, so its accumulators
 * are allocated on their own and a profile shows it by name. `unused`: an ISA compiles
 * only the tiles its table, its QKR_MR or its pv_chunk names (AVX2 has no qk_12x2v). */
#define TILE static __attribute__((noinline, unused))

/* The most rows of any qk or qk_rows tile below: the size of their accumulator arrays
 * (the instantiated counts use a part; the rest is never touched). */
enum { QK_ROWS_MAX = 12, QKR_ROWS_MAX = 8 };
/* The most keys of one qk_rows step (qkr_nk): at most VL, which a step must divide. */
enum { QKR_NK_MAX = 8, QKR_ACC_MAX = 16 };
_Static_assert(VL % QKR_NK_MAX == 0, "qk_rows' steps tile a strip of VL keys");

/* ---- widening loads: kernels/x86/kvload.h (the reduction tree is reduce.h's, the
 * transpose transpose.h's) */

/* load_kv's codes without their scale, value(code) in the lanes t (0 elsewhere): an int8
 * row whose scale is taken once per key instead ("int8 scales factored", below). */
ALWAYS_INLINE vf load_codes(const char *row, int i, sdpa_dtype dt, vtail t, int nt) {
    if (nt < VL)
        return v_keep(t, (vf)kvq_codes_part(dt, (const unsigned char *)row, i, nt, 0));
    return (vf)kvq_codes_x(dt, (const unsigned char *)row, i, 0);
}

/* e4m3's 2^8. An e4m3 code decodes through binary16 to value(code) / 2^8, exactly
 * (kvq.h), and its dequantized value is fl(value(code) * s). Where 2^8 s is exact, which
 * is wherever it is finite (a multiplication by a power of two rounds only on overflow),
 * fl(value(code) / 2^8 * (2^8 s)) is the same real product rounded once, so the same
 * bits: the 2^8 goes into the scale, once per call or key, instead of a multiplication per
 * vector of codes (in decode a tenth of an fp8 cache's vector operations per code). For
 * an inf or NaN s the products are inf or NaN alike. The tiles fold it for a call whose
 * rows share one set of scales (ld 0: the per-tensor and per-head scales fp8 caches
 * keep) when every scale of the set passes; per-token scales, or a scale of 2^120 or more
 * (2^8 s overflows), keep the multiplication. */
static inline int e4m3_fold(sdpa_dtype dt, const sdpa_qscales *qs, int dim) {
    if (dt != SDPA_FP8_E4M3 || !qs || qs->ld != 0)
        return 0;
    if (qs->dt == SDPA_F16) /* |s| <= 65504: 2^8 s is finite */
        return 1;
    const float *sc = (const float *)qs->p;
    for (int g = 0; g < dim / qs->group; g++)
        if (fabsf(sc[g]) * KVQ_E4M3_RAW > FLT_MAX && fabsf(sc[g]) <= FLT_MAX)
            return 0; /* 2^8 s overflows, s finite */
    return 1;
}

/* int8 scales factored. Where every code of a key times its scale s is exact in fp32
 * (kernels/convert.h, sdpa_i8_scale_exact: s with its low 7 significand bits 0, as
 * sdpa_kv_write writes them, or any finite binary16 s), the key's dequantized row is
 * c s exactly, and
 *     score = scale sum_d q_d (c_d s) = scale (s sum_d q_d c_d)
 *     P V   = sum_j p_j (c_j s_j)     = sum_j (p_j s_j) c_j
 * are the same real numbers. The tiles then decode the codes without the multiplication
 * (an FMA-pipe operation per vector of codes on AMD Zen 4, where decode waits on those
 * pipes: docs/PERFORMANCE.md, "int8 scales factored") and take s once per key: qk_rows_q
 * on the score, pv_q on a copy of P. That is an fp32 computation of the same attention
 * over the same dequantized values, in another order, as blocking already is. Other
 * keys multiply as before, a factored key's results are the same bits whichever keys
 * share its step, and one scale per key (per token or per head) is the only layout
 * factored: with groups of channels the multiplications move instead of going. */

/* The scales of n <= VL keys, key j's at sp + j ld bytes (binary16 where f16), as fp32
 * lanes, 0 past n. */
ALWAYS_INLINE vf key_scales(int n, const char *sp, int64_t ld, int f16) {
    if (!f16 && ld == (int64_t)sizeof(float))
        return v_load_part((const float *)(const void *)sp, v_tail(n));
    float e[VL];
    for (int j = 0; j < VL; j++)
        e[j] = j < n ? scale_f32(sp + (int64_t)j * ld, f16) : 0.0f;
    return v_loadu(e);
}

/* The factored lanes of key scales s (fp32, a binary16 one widened: exact unless inf or
 * NaN, which the test below refuses), as bits; *sv gets each key's multiplier of its
 * codes (1 where factored, else s) and *ks of its result (s where factored, else 1):
 * x 1 is exact, so a key gets the bits of its own path whichever keys share its step. */
ALWAYS_INLINE unsigned i8_factor(vf s, vf *sv, vf *ks) {
    const kvq_u32 u = (kvq_u32)s, one = (kvq_u32)v_set1(1.0f);
    const kvq_u32 ok = (kvq_u32)(((u & SDPA_I8_SCALE_LOW) == 0) &
                                 (((u >> 23) & 0xffu) <= SDPA_I8_SCALE_EMAX));
    *sv = (vf)((ok & one) | (~ok & u));
    *ks = (vf)((ok & u) | (~ok & one));
    return v_sign_bits((vf)ok);
}

/* 1 if some lane of x is inf or NaN (x - x is +0 for every finite x, NaN otherwise). */
ALWAYS_INLINE int v_any_nonfinite(vf x) {
    return v_sign_bits((vf)((kvq_u32)(x - x) != 0)) != 0;
}

/* ---- exp ------------------------------------------------------------------------ */

/* exp of VL lanes: the algorithm of kernels/exp.h, steps 1-5, with the vector layer's
 * low-end step, rounding and scaling. any_x = 0 drops the clamp at EXP_HI (and AVX2's
 * n = 128 step), for softmax, whose arguments s - max and m_run - max are never
 * positive (or are NaN); the results are otherwise the same. */
ALWAYS_INLINE vf exp_vec(vf x, const int any_x) {
    const vmask live = v_exp_low(&x);
    if (any_x)
        x = v_min(v_set1(EXP_HI), x); /* vminps returns x when x is NaN */
    vf aux;
    const vf n = v_exp_round(x, &aux);
    const vf r = v_fnmadd(n, v_set1(LN2), x);
    vf p = v_set1(EXP_C5);
    p = v_fmadd(p, r, v_set1(EXP_C4));
    p = v_fmadd(p, r, v_set1(EXP_C3));
    p = v_fmadd(p, r, v_set1(EXP_C2));
    p = v_fmadd(p, r, v_set1(1.0f));
    p = v_fmadd(p, r, v_set1(1.0f));
    return v_exp_scale(p, n, aux, live, any_x);
}

static void x86_vexp(int n, const float *x, float *y) {
    int i = 0;
    for (; i + VL <= n; i += VL)
        v_storeu(y + i, exp_vec(v_loadu(x + i), 1));
    if (i < n) {
        const vtail t = v_tail(n - i);
        v_store_part(y + i, t, exp_vec(v_load_part(x + i, t), 1));
    }
}

/* ---- pack_k --------------------------------------------------------------------- */

/* One dt at a time so the conversion is hoisted out of the loops. Each VL keys x VL dims
 * block is loaded as rows (masked past dk, zero rows past n), transposed in registers
 * and stored as VL key-vectors: one pass over K, no scalar element moves. K comes from
 * the caller's memory, usually L3 (a head's K and V outgrow L2 beyond ~1000 keys at
 * D = 128) in short row-strided streams the hardware prefetcher does not pick up, so
 * the next VL rows are prefetched while this panel is transposed (simd.h, pack_pf_begin). */
ALWAYS_INLINE void pack_k_dt(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                             float *kp) {
    const size_t es = elem_bytes(dt);
    const int np = (n + VL - 1) & ~(VL - 1);
    for (int j0 = 0; j0 < np; j0 += VL) {
        const int nk = min_int(VL, n - j0);
        const int s0 = j0 & ~(2 * VL - 1), w = min_int(2 * VL, np - s0), h = j0 - s0;
        float *dst = kp + (size_t)s0 * (size_t)dk + h;
        const char *src = (const char *)k + (size_t)j0 * (size_t)ldk * es;
        const pack_pf pf = pack_pf_begin(VL, src, (size_t)ldk * es, n - j0, (size_t)dk * es);
        for (int d0 = 0; d0 < dk; d0 += VL) {
            const int nd = min_int(VL, dk - d0);
            const vtail mk = v_tail(nd);
            vf r[VL];
            pack_pf_step(VL, &pf, (size_t)d0 * es, (size_t)VL * es);
            UNROLL_FULL
            for (int i = 0; i < VL; i++)
                r[i] = i < nk ? load_dt(src + (size_t)i * (size_t)ldk * es, d0, dt, mk) : v_zero();
            transpose(r);
            UNROLL_VL
            for (int c = 0; c < nd; c++)
                v_storeu(dst + (size_t)(d0 + c) * (size_t)w, r[c]);
        }
    }
}

static void x86_pack_k(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt, float *kp) {
    switch (dt) {
    case SDPA_F16: pack_k_dt(n, dk, k, ldk, SDPA_F16, kp); return;
    case SDPA_BF16: pack_k_dt(n, dk, k, ldk, SDPA_BF16, kp); return;
    default: /* SDPA_F32 */ pack_k_dt(n, dk, k, ldk, SDPA_F32, kp); return;
    }
}

/* ---- qk ------------------------------------------------------------------------- */

/* S[0..MR)[0..VL NV) = scale * Q Kp^T for one strip of VL NV keys, dk deep: MR x NV
 * accumulators; per d, NV key loads and MR Q broadcasts feed MR NV FMAs. */
ALWAYS_INLINE void qk_tile(const int MRMAX, const int MR, const int NV, int dk, float scale,
                           const float *q, int ldq, const float *ks, float *s, int lds) {
    if (MR > MRMAX) /* a switch arm the tile never takes (qk_tile_rows) */
        return;
    vf acc[QK_ROWS_MAX][2];
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            acc[r][c] = v_zero();
    for (int d = 0; d < dk; d++) {
        const float *kd = ks + (size_t)d * (size_t)(VL * NV);
        const vf b0 = v_loadu(kd);
        const vf b1 = NV > 1 ? v_loadu(kd + VL) : b0;
        UNROLL_FULL
        for (int r = 0; r < MR; r++) {
            const vf a = v_bcast(q + (size_t)r * (size_t)ldq + (size_t)d);
            acc[r][0] = v_fmadd(a, b0, acc[r][0]);
            if (NV > 1)
                acc[r][1] = v_fmadd(a, b1, acc[r][1]);
        }
    }
    const vf vs = v_set1(scale);
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            v_storeu(s + (size_t)r * (size_t)lds + VL * c, acc[r][c] * vs);
}

/* qk_tile with the row count mr as a constant: mr = min(MR, rows left) is 1..MR, so the
 * default cannot be reached. */
ALWAYS_INLINE void qk_tile_rows(const int MR, const int NV, int mr, int dk, float scale,
                                const float *q, int ldq, const float *ks, float *s, int lds) {
    switch (mr) {
    case 1: qk_tile(MR, 1, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 2: qk_tile(MR, 2, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 3: qk_tile(MR, 3, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 4: qk_tile(MR, 4, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 5: qk_tile(MR, 5, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 6: qk_tile(MR, 6, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 7: qk_tile(MR, 7, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 8: qk_tile(MR, 8, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 9: qk_tile(MR, 9, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 10: qk_tile(MR, 10, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 11: qk_tile(MR, 11, NV, dk, scale, q, ldq, ks, s, lds); return;
    case 12: qk_tile(MR, 12, NV, dk, scale, q, ldq, ks, s, lds); return;
    default: __builtin_unreachable();
    }
}

/* The contract's qk on tiles of MR rows by 2 vectors of keys (the last strip 1 vector
 * when the padded key count is an odd number of VLs, the last row tile the rows left). */
ALWAYS_INLINE void qk_blocks(const int MR, int m, int n, int dk, float scale, const float *q,
                             int ldq, const float *kp, float *s, int lds) {
    const int np = (n + VL - 1) & ~(VL - 1);
    for (int r0 = 0; r0 < m; r0 += MR) {
        const int mr = min_int(MR, m - r0);
        const float *qr = q + (size_t)r0 * (size_t)ldq;
        float *sr = s + (size_t)r0 * (size_t)lds;
        for (int j0 = 0; j0 < np; j0 += 2 * VL) {
            const float *ks = kp + (size_t)j0 * (size_t)dk;
            if (np - j0 >= 2 * VL)
                qk_tile_rows(MR, 2, mr, dk, scale, qr, ldq, ks, sr + j0, lds);
            else
                qk_tile_rows(MR, 1, mr, dk, scale, qr, ldq, ks, sr + j0, lds);
        }
    }
}

/* qk_12x2v, for 32 registers: 24 accumulators + 2 key vectors + 1-2 broadcast
 * temporaries. Per d: 2 key loads, 12 Q broadcasts, 24 FMAs (12 cycles at two FMA
 * pipes), so the loads stay under two per cycle and each accumulator's FMA chain has 12
 * cycles to cover the 4-cycle FMA latency. */
TILE void qk_12x2v(int m, int n, int dk, float scale, const float *q, int ldq, const float *kp,
                   float *s, int lds) {
    qk_blocks(12, m, n, dk, scale, q, ldq, kp, s, lds);
}

/* qk_6x2v, for 16 registers: 12 accumulators + 2 key vectors + 1 broadcast = 15. Per d:
 * 2 key loads, 6 Q broadcasts, 12 FMAs (6 cycles at two FMA pipes), so each accumulator's
 * FMA chain has 6 cycles to cover the 4-cycle FMA latency. */
TILE void qk_6x2v(int m, int n, int dk, float scale, const float *q, int ldq, const float *kp,
                  float *s, int lds) {
    qk_blocks(6, m, n, dk, scale, q, ldq, kp, s, lds);
}

/* ---- qk_rows -------------------------------------------------------------------- */

/* The dot products of R query rows with NK keys (rows of K, read in place, at kr[0..NK))
 * as lane-wise partial sums: t[r ldt + i] for key i gets sum over VL-element slices of
 * Q[r] * K[key]; the last slice is masked (caller memory, and Q's padding is off limits).
 * A quantized K (qk_rows_q) is decoded slice by slice and scaled by its group's scale
 * (scr[i]: key i's scales, binary16 where f16, else fp32; group dk or a multiple of VL,
 * so a slice lies in one group and only the row's last group can end in a masked
 * slice); the slices run in the same order either way, so a key's sum is the one over
 * its dequantized row, whichever keys share the step.
 * Per slice NK K loads (16-bit K: conversions besides) and R Q loads feed R NK FMAs, in
 * R NK independent chains. v_pin keeps each Q slice in a register: folded into the FMAs
 * it would be loaded NK times, and the loads are near their limit already
 * (docs/PERFORMANCE.md, "Kernel measurements"). The products run as one flat loop over
 * the accumulators, which gcc promotes to registers (nested loops over rows and keys
 * left them stored to the stack at every slice). */
ALWAYS_INLINE void qkr_keys(const int R, const int NK, const sdpa_dtype dt, const int UNSC,
                            int dk, const float *q, int ldq, const char *const *kr,
                            const char *const *scr, int f16, int fold, int group, vf *t,
                            const int ldt) {
    vf c[QKR_ACC_MAX], sv[QKR_NK_MAX], x[QKR_NK_MAX], qv[QKR_ROWS_MAX];
    UNROLL_FULL
    for (int i = 0; i < R * NK; i++)
        c[i] = v_zero();
    const int gl = dt_quant(dt) ? group : dk;
    for (int g0 = 0, gi = 0; g0 < dk; g0 += gl, gi++) {
        UNROLL_FULL
        for (int i = 0; i < NK; i++)
            sv[i] = dt_quant(dt) && !UNSC ? scale_at(scr[i], gi, f16) : v_zero();
        if (dt == SDPA_FP8_E4M3 && fold)
            UNROLL_FULL
            for (int i = 0; i < NK; i++)
                sv[i] = sv[i] * v_set1(KVQ_E4M3_RAW);
        const int ge = g0 + gl;
        int d0 = g0;
        for (; d0 + VL <= ge; d0 += VL) {
            UNROLL_FULL
            for (int i = 0; i < NK; i++)
                x[i] = UNSC ? load_codes(kr[i], d0, dt, v_full(), VL)
                            : load_kv(kr[i], d0, dt, v_full(), VL, sv[i], fold);
            UNROLL_FULL
            for (int r = 0; r < R; r++) {
                qv[r] = v_loadu(q + (size_t)r * (size_t)ldq + d0);
                if (NK > 1)
                    qv[r] = v_pin(qv[r]);
            }
            UNROLL_FULL
            for (int a = 0; a < R * NK; a++)
                c[a] = v_fmadd(qv[a / NK], x[a % NK], c[a]);
        }
        if (d0 < ge) {
            const vtail mk = v_tail(ge - d0);
            UNROLL_FULL
            for (int i = 0; i < NK; i++)
                x[i] = UNSC ? load_codes(kr[i], d0, dt, mk, ge - d0)
                            : load_kv(kr[i], d0, dt, mk, ge - d0, sv[i], fold);
            UNROLL_FULL
            for (int r = 0; r < R; r++)
                qv[r] = v_load_part(q + (size_t)r * (size_t)ldq + d0, mk);
            UNROLL_FULL
            for (int a = 0; a < R * NK; a++)
                c[a] = v_fmadd(qv[a / NK], x[a % NK], c[a]);
        }
    }
    UNROLL_FULL
    for (int a = 0; a < R * NK; a++)
        t[a / NK * ldt + a % NK] = c[a];
}

/* Keys per step of qkr_rows for R rows: the most of QKR_NK_MAX, .., 4, 2 whose R NK
 * accumulators (at most QKR_ACC_MAX), NK key vectors (with a quantized K's NK scale
 * vectors) and R Q slices fit the V_NREG vector registers, and at most 4 for a quantized
 * K, whose decode needs temporaries of its own (int8, 1 row: 8 keys a step ran 47% slower
 * than 4 on the Intel host; docs/PERFORMANCE.md, "Decode's arithmetic"). More keys a step
 * give the slice loads more FMAs each and the FMA pipes more independent chains: one row
 * at 2 keys a step is 2 chains of dk / VL dependent FMAs, under the 8 that two pipes of
 * 4-cycle FMAs need (4 cycles: measured on the Intel host, a dependent FMA chain against
 * the two-pipe peak loop of the same run). */
ALWAYS_INLINE int qkr_nk(const int R, const int quant) {
    for (int nk = quant ? 4 : QKR_NK_MAX; nk > 2; nk /= 2)
        if (R * nk <= QKR_ACC_MAX && R * nk + (1 + quant) * nk + R <= V_NREG)
            return nk;
    return 2;
}

/* qkr_rows' keys [j, j + NK): their rows ahead prefetched (as qkr_rows says), then their
 * partial sums into t[r ldt + i] (qkr_keys; with UNSC, int8 codes unscaled), key j's
 * scales at sc + js ldscb. */
ALWAYS_INLINE void qkr_step(const int R, const int NK, const sdpa_dtype dt, const int UNSC,
                            int AT, int nreal, int j, int js, int dk, const float *q, int ldq,
                            const void *k, size_t ldkb, const char *sc, int64_t ldscb,
                            int f16, int fold, int group, size_t rowb, int ahead, int pfend,
                            int npf, const char *pf, const char *const *kat, vf *t,
                            const int ldt) {
    /* the prefetches in a loop kept rolled: unrolled per key, their tests and line loops
     * made each tile function several times larger for nothing measured */
    NO_UNROLL
    for (int pj = j; pj < j + NK; pj++) {
        const char *pr = NULL; /* the row, then one prefetch site (as pv_tile) */
        int l1 = sdpa_prefetch_l1;
        if (pf) { /* a paged cache: the run the driver names, in step */
            if (pj < npf)
                pr = pf + (size_t)pj * ldkb;
        } else if (pj + ahead < pfend) {
            if (AT) {
                pr = kat[pj + ahead];
                l1 = sdpa_prefetch_at_l1;
            } else {
                pr = (const char *)k + (size_t)(pj + ahead) * ldkb;
            }
        }
        if (pr)
            prefetch_row_to(pr, rowb, l1);
    }
    const char *kr[QKR_NK_MAX], *scr[QKR_NK_MAX];
    if (nreal == NK) {
        UNROLL_FULL
        for (int i = 0; i < NK; i++) {
            kr[i] = AT ? kat[j + i] : (const char *)k + (size_t)(j + i) * ldkb;
            scr[i] = dt_quant(dt) ? sc + (int64_t)(js + i) * ldscb : NULL;
        }
    } else { /* the call's last keys, fewer than a step: the missing ones repeat the last
              * (rows of the call, so in bounds; their sums are never stored) */
        UNROLL_FULL
        for (int i = 0; i < NK; i++) {
            const int ii = i < nreal ? i : nreal - 1;
            kr[i] = AT ? kat[j + ii] : (const char *)k + (size_t)(j + ii) * ldkb;
            scr[i] = dt_quant(dt) ? sc + (int64_t)(js + ii) * ldscb : NULL;
        }
    }
    qkr_keys(R, NK, dt, UNSC, dk, q, ldq, kr, scr, f16, fold, group, t, ldt);
}

/* qkr_step's arguments after js, as qkr_rows has them (a strip's scales: ssc, sld, sf16). */
#define QKR_STEP dk, q, ldq, k, ldkb, ssc, sld, sf16, fold, group, rowb, ahead, pfend, npf, pf, kat

/* S[0..R)[0..n) for R rows, VL keys at a time, NK keys a step (qkr_nk): each step's R
 * groups of NK partial-sum vectors go through the first log2 NK rounds of the reduction
 * tree at once (reduce.h: a group of adjacent vectors gives there what it gives inside
 * the whole tree), the VL / NK results per row to a stack buffer, and the tree's other
 * rounds turn them into the row's VL scores in key order, scaled and stored (masked in
 * the tail strip, whose missing keys are zero vectors, never stored). The call's last
 * keys, fewer than NK, run as a step whose missing keys repeat the last key (a one-key
 * step of their own in every row count's tile was a sixth of the x86 files' code:
 * docs/PERFORMANCE.md, "Compile time"); the tree keeps keys apart, so the extra sums
 * touch only lanes that are never stored. A score is one FMA
 * chain over dk then the fixed tree, whatever R, NK and whichever keys share its loads,
 * so a row's bits do not depend on the other rows of the call. Where kat is not NULL
 * (qk_rows_at) row j is at kat[j] instead of k + j ldkb (the same arithmetic, so the
 * same bits), and the rows ahead are prefetched at kat[j + ahead].
 * Memory order: in decode K streams from DRAM, and this loop is what keeps it streaming.
 * Keys are read NK adjacent rows at a time, each from start to end (the order the
 * hardware prefetchers follow; reading slice-major, the first lines of VL rows, then
 * their second lines..., is much slower), and the rows SDPA_PREFETCH_AHEAD bytes ahead,
 * within the call and into the npf rows after it (kernels/ukernel.h), are prefetched
 * so the core does not wait at every 4 KiB page
 * (docs/PERFORMANCE.md, "Kernel measurements"). Per key: dk / VL K loads and
 * R dk / (NK VL) Q loads per R dk / VL FMAs, then per row per VL keys the tree's shuffles
 * and adds (45 at VL = 16, 21 at VL = 8). K rows are ldkb bytes apart; a quantized K's
 * scales are at sc, ldscb bytes per key, binary16 where f16 (qkr_keys). */
ALWAYS_INLINE void qkr_rows(const int R, const sdpa_dtype dt, int AT, int n, int dk, float scale,
                            const float *q, int ldq, const void *k, size_t ldkb,
                            const char *sc, int64_t ldscb, int f16, int fold, int group,
                            float *s, int lds, int npf, const char *pf, const char *const *kat) {
    const size_t rowb = dt_bytes(dt, (size_t)dk);
    const int ahead = (int)((AT ? SDPA_PREFETCH_AT_AHEAD : SDPA_PREFETCH_AHEAD) / rowb) + 1;
    const int pfend = n + min_int(npf, ahead); /* rows below it may be prefetched */
    const vf vs = v_set1(scale);
    const int NK = qkr_nk(R, dt_quant(dt));
    const int G = VL / NK, LOG_NK = NK == 8 ? 3 : NK == 4 ? 2 : 1;
    vf t[QKR_ROWS_MAX * (VL / 2)], raw[QKR_ACC_MAX];
    /* an int8 K with one scale per key: its scales factored where exact (i8_factor) */
    const int fac = dt == SDPA_I8 && sc != NULL && group == dk;
    for (int j0 = 0; j0 < n; j0 += VL) {
        const int nk = min_int(VL, n - j0);
        const unsigned all = (1u << nk) - 1u; /* nk <= VL <= 16 */
        const char *ssc = sc;
        int64_t sld = ldscb;
        int sf16 = f16, js0 = 0;
        float sv[VL], first[QKR_ROWS_MAX * VL];
        unsigned fm = 0; /* the strip's factored keys */
        vf ksv = v_zero();
        if (fac) {
            vf svv;
            fm = i8_factor(key_scales(nk, sc + (int64_t)j0 * ldscb, ldscb, f16), &svv, &ksv) &
                 all;
            v_storeu(sv, svv);
            ssc = (const char *)sv; /* the steps read the multipliers of the codes */
            sld = sizeof(float);
            sf16 = 0;
            js0 = j0;
        }
        for (int redo = 0;; redo = 1) {
            int g = 0;
            for (; g * NK < nk; g++) { /* the last step may have fewer keys (qkr_step) */
                const int j = j0 + g * NK, nreal = min_int(NK, nk - g * NK);
                const unsigned real = (1u << nreal) - 1u;
                if (((fm >> (g * NK)) & real) == real)
                    qkr_step(R, NK, dt, 1, AT, nreal, j, j - js0, QKR_STEP, raw, NK);
                else
                    qkr_step(R, NK, dt, 0, AT, nreal, j, j - js0, QKR_STEP, raw, NK);
                UNROLL_FULL
                for (int r = 0; r < R; r++) {
                    tree_rounds(raw + r * NK, 0, LOG_NK, 0);
                    t[r * G + g] = raw[r * NK];
                }
            }
            for (; g < G; g++)
                UNROLL_FULL
                for (int r = 0; r < R; r++)
                    t[r * G + g] = v_zero();
            UNROLL_FULL
            for (int r = 0; r < R; r++)
                tree_rounds(t + r * G, LOG_NK, TREE_ROUNDS, 0);
            if (redo) { /* lane by lane, the first pass's score where it is finite */
                float e[VL];
                UNROLL_FULL
                for (int r = 0; r < R; r++) {
                    v_storeu(e, t[r * G]);
                    for (int i = 0; i < VL; i++)
                        e[i] = isfinite(first[r * VL + i]) ? first[r * VL + i] : e[i];
                    t[r * G] = v_loadu(e);
                }
                break;
            }
            if (!fm) /* nothing factored (or not int8): the scores as they are */
                break;
            int bad = 0;
            UNROLL_FULL
            for (int r = 0; r < R; r++) {
                t[r * G] = t[r * G] * ksv;
                bad |= v_any_nonfinite(t[r * G]);
            }
            if (!bad)
                break;
            /* sum_d q_d c_d overflows where sum_d q_d (c_d s) need not (|q| past about
             * FLT_MAX / (127 dk)), or an input is inf or NaN: the strip again with every
             * key's codes scaled (the cache's own scales) */
            UNROLL_FULL
            for (int r = 0; r < R; r++)
                v_storeu(first + r * VL, t[r * G]);
            fm = 0;
            ssc = sc;
            sld = ldscb;
            sf16 = f16;
            js0 = 0;
        }
        UNROLL_FULL
        for (int r = 0; r < R; r++)
            v_store_first(s + (size_t)r * (size_t)lds + j0, nk, t[r * G] * vs);
    }
}
#undef QKR_STEP

/* qkr_rows with the storage type as a constant (the types kernels/ukernel.h lets
 * qk_rows and qk_rows_q read). */
#define QKR_DT(DT, AT, FOLD) qkr_rows(R, DT, AT, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, FOLD, group, s, lds, npf, pf, kat)
/* AT (rows at addresses, kat) is a run-time test in the loop, not compiled apart, as
 * pv's (pv_row_tiles); e4m3 has an instance with its 2^8 folded and one without
 * (e4m3_fold). */
ALWAYS_INLINE void qkr_rows_dt(const int R, sdpa_dtype dt, int n, int dk, float scale,
                               const float *q, int ldq, const void *k, size_t ldkb,
                               const char *sc, int64_t ldscb, int f16, int fold, int group,
                               float *s, int lds, int npf, const char *pf,
                               const char *const *kat) {
    switch (dt) {
    case SDPA_F16: QKR_DT(SDPA_F16, kat != NULL, 0); return;
    case SDPA_BF16: QKR_DT(SDPA_BF16, kat != NULL, 0); return;
    case SDPA_I8: QKR_DT(SDPA_I8, 0, 0); return;
    case SDPA_I4: QKR_DT(SDPA_I4, 0, 0); return;
    case SDPA_FP8_E4M3:
        if (fold)
            QKR_DT(SDPA_FP8_E4M3, 0, 1);
        else
            QKR_DT(SDPA_FP8_E4M3, 0, 0);
        return;
    case SDPA_FP8_E5M2: QKR_DT(SDPA_FP8_E5M2, 0, 0); return;
    default: /* SDPA_F32 */ QKR_DT(SDPA_F32, kat != NULL, 0); return;
    }
}
#undef QKR_DT

/* The parameter list of the qk_rows tiles (qk_rows_q's, less m). */
#define QKR_ARGS                                                                             \
    int n, int dk, float scale, const float *q, int ldq, const void *k, size_t ldkb,         \
        sdpa_dtype dt, const char *sc, int64_t ldscb, int f16, int fold, int group, float *s,  \
        int lds, int npf, const char *pf, const char *const *kat
#define QKR_CALL n, dk, scale, q, ldq, k, ldkb, dt, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat

/* The qk_rows register tiles, one function per row count: qkr_Rrows holds R NK
 * accumulators (R rows x the NK keys of a step, qkr_nk) + NK K slices (a quantized K's
 * NK scales besides) + R Q slices. AVX-512: qkr_8rows 16 + 2 + 8 = 26 of 32 registers, a
 * GQA group of 8 heads (decode) in one pass over K; qkr_4rows 16 + 4 + 4 = 24 (int8:
 * 28); qkr_1row 8 + 8 + 1 = 17. AVX2: qkr_4rows 8 + 2 + 4 = 14 of 16; qkr_2rows 8 + 4 + 2.
 * Each row count is its own function rather than an arm of one switch function: in
 * decode, where each pass over a block is short and K streams from DRAM, the switch
 * form measured slower (docs/PERFORMANCE.md, "Kernel measurements"). */
TILE void qkr_1row(QKR_ARGS) { qkr_rows_dt(1, dt, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat); }
TILE void qkr_2rows(QKR_ARGS) { qkr_rows_dt(2, dt, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat); }
TILE void qkr_3rows(QKR_ARGS) { qkr_rows_dt(3, dt, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat); }
TILE void qkr_4rows(QKR_ARGS) { qkr_rows_dt(4, dt, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat); }
TILE void qkr_5rows(QKR_ARGS) { qkr_rows_dt(5, dt, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat); }
TILE void qkr_6rows(QKR_ARGS) { qkr_rows_dt(6, dt, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat); }
TILE void qkr_7rows(QKR_ARGS) { qkr_rows_dt(7, dt, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat); }
TILE void qkr_8rows(QKR_ARGS) { qkr_rows_dt(8, dt, n, dk, scale, q, ldq, k, ldkb, sc, ldscb, f16, fold, group, s, lds, npf, pf, kat); }

/* qk_rows_q, qk_rows and qk_rows_at in passes of QKR_MR rows (the including ISA's), the
 * last pass with the rest; each pass reads K once (rows ldkb bytes apart from k, or at
 * kat[j]). The rows of a pass, min(QKR_MR, rows left), are 1..QKR_MR, and an arm above
 * QKR_MR is dead code, so the default cannot be reached. */
static void qkr_passes(int m, int n, int dk, float scale, const float *q0, int ldq,
                       const void *k, int64_t ldkb_, sdpa_dtype dt, const sdpa_qscales *qs,
                       float *s0, int lds, int npf, const void *pfv, const char *const *kat) {
    const size_t ldkb = (size_t)ldkb_;
    const char *pf = (const char *)pfv;
    const int f16 = qs && qs->dt == SDPA_F16, group = qs ? qs->group : dk;
    const char *sc = qs ? (const char *)qs->p : NULL;
    const int64_t ldscb = qs ? qs->ld * (f16 ? 2 : 4) : 0;
    const int fold = e4m3_fold(dt, qs, dk);
    for (int r0 = 0; r0 < m; r0 += QKR_MR) {
        const float *q = q0 + (size_t)r0 * (size_t)ldq;
        float *s = s0 + (size_t)r0 * (size_t)lds;
        switch (min_int(QKR_MR, m - r0)) {
        case 1: qkr_1row(QKR_CALL); continue;
        case 2: qkr_2rows(QKR_CALL); continue;
        case 3: qkr_3rows(QKR_CALL); continue;
        case 4: qkr_4rows(QKR_CALL); continue;
        case 5: if (QKR_MR >= 5) qkr_5rows(QKR_CALL); continue;
        case 6: if (QKR_MR >= 6) qkr_6rows(QKR_CALL); continue;
        case 7: if (QKR_MR >= 7) qkr_7rows(QKR_CALL); continue;
        case 8: if (QKR_MR >= 8) qkr_8rows(QKR_CALL); continue;
        default: __builtin_unreachable();
        }
    }
}

/* The contract's qk_rows_q. */
static void x86_qk_rows_q(int m, int n, int dk, float scale, const float *q, int ldq,
                          const void *k, int64_t ldkb, sdpa_dtype dt, const sdpa_qscales *qs,
                          float *s, int lds, int npf, const void *pf) {
    qkr_passes(m, n, dk, scale, q, ldq, k, ldkb, dt, qs, s, lds, npf, pf, NULL);
}

/* The contract's qk_rows: the same tiles on rows stored as f32/f16/bf16 (no scales). */
static void x86_qk_rows(int m, int n, int dk, float scale, const float *q, int ldq,
                        const void *k, int64_t ldk, sdpa_dtype dt, float *s, int lds, int npf,
                        const void *pf) {
    qkr_passes(m, n, dk, scale, q, ldq, k, ldk * (int64_t)elem_bytes(dt), dt, NULL, s, lds,
               npf, pf, NULL);
}

/* The contract's qk_rows_at: the same tiles on rows at addresses. */
static void x86_qk_rows_at(int m, int n, int dk, float scale, const float *q, int ldq,
                           const void *const *k, sdpa_dtype dt, float *s, int lds, int npf) {
    qkr_passes(m, n, dk, scale, q, ldq, NULL, 0, dt, NULL, s, lds, npf, NULL,
               (const char *const *)k);
}

/* ---- softmax -------------------------------------------------------------------- */

/* VL rows at a time, in two passes, so that each pass is a stream of independent rows
 * rather than one long dependency chain per row (max, reduce, exp, sum): every row's max
 * vector, reduced for the VL rows at once and combined with m_run; mu, alpha and m_run as
 * one vector; then p = exp(s - mu) stored in place, and the row sums reduced at once into
 * l_run. Rows past m take part as -inf / 0 vectors and are never stored. The tail vector
 * of a row is filled with -inf in its dead lanes (exp gives 0 there) and stored under
 * its mask, so S's padding is neither used nor written (it is read on AVX2: inside the
 * row's lds, so readable). NaN scores lose every max (vmaxps returns its second operand,
 * the running max, when the first is NaN) and reach l_run through the sum. */
static void x86_softmax(int m, int n, float *s, int lds, float *m_run, float *l_run,
                        float *alpha) {
    const vf ninf = v_set1(-INFINITY);
    const int nfull = n & ~(VL - 1);
    const int ntail = n - nfull;
    const vtail tail = v_tail(ntail);
    for (int r0 = 0; r0 < m; r0 += VL) {
        const int rows = min_int(VL, m - r0);
        const vtail rm = v_tail(rows);
        float *s0 = s + (size_t)r0 * (size_t)lds;
        vf acc[VL];
        for (int i = 0; i < VL; i++) {
            const float *sr = s0 + (size_t)i * (size_t)lds;
            vf vmax = ninf;
            if (i < rows) {
                for (int j = 0; j < nfull; j += VL)
                    vmax = v_max(v_loadu(sr + j), vmax);
                if (ntail)
                    vmax = v_max(v_load_pad_fill(sr + nfull, tail, ninf), vmax);
            }
            acc[i] = vmax;
        }
        const vf mold = v_load_part_fill(m_run + r0, rm, ninf);
        const vf mx = v_max(reduce_tree(acc, 1), mold);
        /* a row that has seen only masked keys: subtract 0, so exp(-inf) = 0 */
        const vf mu = v_zero_where(v_cmp_eq(mx, ninf), mx);
        const vf a = exp_vec(mold - mu, 0);
        v_store_part(m_run + r0, rm, mx);
        v_store_part(alpha + r0, rm, a);
        float mus[VL];
        v_storeu(mus, mu);
        for (int i = 0; i < VL; i++) {
            float *sr = s0 + (size_t)i * (size_t)lds;
            vf vsum = v_zero();
            if (i < rows) {
                const vf vmu = v_set1(mus[i]);
                UNROLL_BC
                for (int j = 0; j < nfull; j += VL) {
                    const vf p = exp_vec(v_loadu(sr + j) - vmu, 0);
                    v_storeu(sr + j, p);
                    vsum = vsum + p;
                }
                if (ntail) {
                    const vf p = exp_vec(v_load_pad_fill(sr + nfull, tail, ninf) - vmu, 0);
                    v_store_part(sr + nfull, tail, p);
                    vsum = vsum + p;
                }
            }
            acc[i] = vsum;
        }
        const vf l = v_fmadd(a, v_load_part(l_run + r0, rm), reduce_tree(acc, 0));
        v_store_part(l_run + r0, rm, l);
    }
}

/* ---- pv ------------------------------------------------------------------------- */

/* One chunk of pv's columns for all m rows: what x86_pv hands the register tile that
 * pv_chunk picks. */
typedef struct {
    int m, n;            /* rows of P and O; keys */
    const float *p;      /* P, rows ldp apart */
    int ldp;
    const char *v;       /* the chunk's first column of V's key 0; V rows ldvb bytes apart */
    size_t ldvb;
    const float *alpha;  /* per row, or NULL: no rescale */
    float *o;            /* the chunk's first column of O, rows ldo apart */
    int ldo;
    sdpa_dtype dt;       /* V's storage type */
    int lastw;           /* columns in the chunk's last vector, 1..VL */
    int pf;              /* prefetch the V rows this many keys ahead (0: none), below row
                          * pfend, ... */
    int pfend;
    const char *pfrun;   /* or, where not NULL, row j of these rows (V's stride) while on
                          * row j < pfn: a paged cache's run the driver names */
    int pfn;
    size_t pfb;          /* ... this many bytes of each, where PV_PF_WHOLE_ROWS */
    int whole;           /* the chunk is V's whole rows (the only chunk) */
    const char *const *vat; /* or, where not NULL (pv_at), V's row j at vat[j] + voff, the
                             * chunk's first column; rows past n prefetched as above */
    size_t voff;
    const char *sc;      /* a quantized V (pv_q): key j's scales at sc + j ldscb bytes, */
    int64_t ldscb;
    int f16;             /* binary16 where f16, else fp32, ... */
    int goff[PV_WIDE_CMAX]; /* ... vector c's at offset goff[c] from them */
    int fold;            /* e4m3 codes decoded without their 2^8, which the scales carry
                          * (e4m3_fold) */
    int unsc;            /* int8 codes taken unscaled, P scaled instead (pv_factored) */
    int nchunk;          /* chunks of the tile's NV vectors the call runs, each VL NV
                          * columns after the last (the last one lastw wide), ... */
    int span;            /* ... span keys at a time: each span through every chunk and
                          * row tile before the next (pv_row_tiles) */
} pv_chunk_args;

/* pv's register tile for a chunk of nv vectors of Dv: the including ISA file defines
 * it, after this file, naming its pv_RxNv tiles. */
static void pv_chunk(int nv, const pv_chunk_args *a);
/* The same for pv_q's chunks of a quantized V, of up to PVQ_CMAX vectors: one of the
 * pvq tiles below. */
static void pvq_chunk(int nv, const pv_chunk_args *a);

/* pv_tile's keys need no prefetch and lie at one stride (many rows: prefill): they
 * run in a loop of their own, free of the other's per-key tests and address moves.
 * Where the FMA pipes are the limit those took slots from them: with 2 FMA ports of
 * full-width AVX-512 (Intel) pv_6x4v ran at 70% of the peak in one loop, 83% in two,
 * 86% with FULL as well (docs/PERFORMANCE.md, "The Intel host"). */
static inline int pv_plain(int AT, const pv_chunk_args *a, int pf) {
    return !AT && !a->pfrun && pf <= 0;
}

/* One key of pv_tile: the NV vectors of V's row at vj (a quantized V's scales at sj)
 * times column j of the tile's MR rows of P, added to acc. */
ALWAYS_INLINE void pv_key(const int MR, const int NV, const int FULL, const sdpa_dtype dt,
                          const int FOLD, const int UNSC, const pv_chunk_args *a, const char *vj,
                          const char *sj, const float *p, int ldp, int j, vtail last, vf *acc) {
    if (MR * NV == V_NREG) {
        /* the accumulators fill the register file (pv_4x8v): each V vector loaded right
         * before its MR FMAs, so one register holds V, where the order below would hold
         * NV and keep as many more accumulators on the stack */
        UNROLL_FULL
        for (int c = 0; c < NV; c++) {
            const int whole = c < NV - 1 || FULL;
            const vf x = UNSC ? load_codes(vj, VL * c, dt, whole ? v_full() : last,
                                           whole ? VL : a->lastw)
                              : load_kv(vj, VL * c, dt, whole ? v_full() : last,
                                        whole ? VL : a->lastw,
                                        dt_quant(dt) ? scale_at(sj, a->goff[c], a->f16) : v_zero(),
                                        FOLD);
            UNROLL_FULL
            for (int r = 0; r < MR; r++)
                acc[r * NV + c] = v_fmadd(v_bcast(p + (size_t)r * (size_t)ldp + (size_t)j),
                                          x, acc[r * NV + c]);
        }
        return;
    }
    vf vv[8];
    UNROLL_FULL
    for (int c = 0; c < NV; c++) {
        const int whole = c < NV - 1 || FULL;
        vv[c] = UNSC ? load_codes(vj, VL * c, dt, whole ? v_full() : last, whole ? VL : a->lastw)
                     : load_kv(vj, VL * c, dt, whole ? v_full() : last, whole ? VL : a->lastw,
                               dt_quant(dt) ? scale_at(sj, a->goff[c], a->f16) : v_zero(), FOLD);
    }
    UNROLL_FULL
    for (int k = 0; k < MR * NV; k++)
        acc[k] = v_fmadd(v_bcast(p + (size_t)(k / NV) * (size_t)ldp + (size_t)j), vv[k % NV],
                         acc[k]);
}

/* pv_tile's prefetch of a V row ahead (into L1 where l1): its NV vectors, or where
 * PV_PF_WHOLE_ROWS, a->pfb bytes. The lengths are
 * constants in each arm, so prefetch_row unrolls in full: a run-time length costs a
 * chain of compares a row, 2-3% of fp32 decode, which waits on these prefetches. */
ALWAYS_INLINE void pv_prefetch(const int NV, const sdpa_dtype dt, const pv_chunk_args *a,
                               const char *row, int l1) {
    if (PV_PF_WHOLE_ROWS)
        prefetch_row_to(row, a->pfb, l1);
    else
        prefetch_row_to(row, dt_bytes(dt, (size_t)NV * VL), l1);
}

/* O[0..MR)[VL NV columns] = alpha O + P V over n keys, for one chunk of NV vectors of
 * Dv (the last one masked by `last` unless FULL), V stored as dt and widened as it is
 * loaded. The O tile stays in registers for the whole key loop: per key, NV V loads
 * (masked at the Dv tail: caller memory; 16-bit V: NV conversions besides) and MR P
 * broadcasts feed MR NV FMAs. With pf > 0 (decode: V streams from DRAM) pfb bytes of
 * the row pf keys ahead, below a->pfend (n and the npf rows past it), are prefetched,
 * as qk_rows does for K. A
 * quantized V (pv_q) is decoded and scaled vector by vector as it is loaded (load_kv),
 * one scale per vector (a vector never straddles two groups: SDPA_QGROUP_VEC). */
ALWAYS_INLINE void pv_tile(const int MRMAX, const int MR, const int NV, const int FULL,
                           const sdpa_dtype dt, const int FOLD, const int UNSC, int AT,
                           const pv_chunk_args *a,
                           const float *p,
                           const float *alpha, float *o, vtail last, int pf) {
    if (MR > MRMAX) /* a switch arm the tile never takes (pv_row_tiles) */
        return;
    const int n = a->n, ldp = a->ldp, ldo = a->ldo;
    const char *v = a->v;
    const size_t ldvb = a->ldvb;
    /* acc[k] is row k / NV, vector k % NV, so each loop over the tile is one flat loop
     * that the compiler unrolls in full before it promotes the arrays to registers
     * (nested loops in a tile function with many instances left clang 14 with the
     * accumulators in memory). The largest tile: 32 accumulators (pv_4x8v). */
    vf acc[32];
    UNROLL_FULL
    for (int k = 0; k < MR * NV; k++) {
        const int c = k % NV;
        float *oc = o + (size_t)(k / NV) * (size_t)ldo + VL * c;
        acc[k] = c < NV - 1 || FULL ? v_loadu(oc) : v_load_part(oc, last);
        if (alpha)
            acc[k] = acc[k] * v_set1(alpha[k / NV]);
    }
    /* with V_MASKS_FREE, pv_tile_dt runs FULL instances on plain keys only: they hold
     * no second loop */
    if ((V_MASKS_FREE && FULL) || (!dt_quant(dt) && pv_plain(AT, a, pf))) {
        for (int j = 0; j < n; j++)
            pv_key(MR, NV, FULL, dt, FOLD, UNSC, a, v + (size_t)j * ldvb, NULL, p, ldp, j, last,
                   acc);
    } else {
        for (int j = 0; j < n; j++) {
            const char *vj = AT ? a->vat[j] + a->voff : v + (size_t)j * ldvb;
            /* which row to prefetch, then one prefetch site (one per site would triple
             * the unrolled prefetches, a fifth of the file's code) */
            const char *pr = NULL;
            int l1 = sdpa_prefetch_l1;
            if (a->pfrun) {
                if (pf > 0 && j < a->pfn)
                    pr = a->pfrun + (size_t)j * ldvb;
            } else if (pf > 0 && j + pf < a->pfend) {
                if (AT) {
                    pr = a->vat[j + pf] + a->voff;
                    l1 = sdpa_prefetch_at_l1;
                } else {
                    pr = vj + (size_t)pf * ldvb;
                }
            }
            if (pr)
                pv_prefetch(NV, dt, a, pr, l1);
            const char *sj = dt_quant(dt) && !UNSC ? a->sc + (int64_t)j * a->ldscb : NULL;
            pv_key(MR, NV, FULL, dt, FOLD, UNSC, a, vj, sj, p, ldp, j, last, acc);
        }
    }
    UNROLL_FULL
    for (int k = 0; k < MR * NV; k++) {
        const int c = k % NV;
        float *oc = o + (size_t)(k / NV) * (size_t)ldo + VL * c;
        if (c < NV - 1 || FULL)
            v_storeu(oc, acc[k]);
        else
            v_store_part(oc, last, acc[k]);
    }
}

/* pv_tile with the storage type as a constant: one of the quantized types where QUANT
 * (the pvq tiles, pv_q), else f32/f16/bf16 (the pv tiles, pv). */
#define PV_DT(DT, FOLD) pv_tile(MRMAX, MR, NV, FULL, DT, FOLD, 0, AT, a, p, alpha, o, last, pf)
ALWAYS_INLINE void pv_tile_q(const int MRMAX, const int MR, const int NV, const int FULL,
                             const int QUANT, int AT, const pv_chunk_args *a, const float *p,
                             const float *alpha, float *o, vtail last, int pf) {
    if (QUANT) {
        switch (a->dt) {
        case SDPA_I4: PV_DT(SDPA_I4, 0); return;
        case SDPA_FP8_E4M3:
            if (a->fold)
                PV_DT(SDPA_FP8_E4M3, 1);
            else
                PV_DT(SDPA_FP8_E4M3, 0);
            return;
        case SDPA_FP8_E5M2: PV_DT(SDPA_FP8_E5M2, 0); return;
        default: /* SDPA_I8 */
            if (a->unsc)
                pv_tile(MRMAX, MR, NV, FULL, SDPA_I8, 0, 1, AT, a, p, alpha, o, last, pf);
            else
                PV_DT(SDPA_I8, 0);
            return;
        }
    }
    switch (a->dt) {
    case SDPA_F16: PV_DT(SDPA_F16, 0); return;
    case SDPA_BF16: PV_DT(SDPA_BF16, 0); return;
    default: /* SDPA_F32 */ PV_DT(SDPA_F32, 0); return;
    }
}
#undef PV_DT

/* pv_tile with FULL and the storage type as constants. A chunk with no Dv tail runs an
 * instance with no masks at all (FULL): without V_MASKS_FREE always, with it on plain
 * keys (pv_plain: prefill's loop, where the masked loads cost 1-3% on Intel; an
 * instance of the decode loop besides would add half again to the file's compile time
 * for nothing measurable). Never on a quantized V: its decode reads whole vectors
 * unmasked anyway (load_kv), and a second instance of every pvq tile cost more compile
 * time than the masked O loads and stores cost time. */
ALWAYS_INLINE void pv_tile_dt(const int MRMAX, const int MR, const int NV, const int QUANT,
                              int AT, const pv_chunk_args *a, const float *p,
                              const float *alpha, float *o, vtail last, int pf) {
    if (!QUANT && a->lastw == VL && (!V_MASKS_FREE || pv_plain(AT, a, pf))) {
        pv_tile_q(MRMAX, MR, NV, 1, QUANT, AT, a, p, alpha, o, last, pf);
        return;
    }
    pv_tile_q(MRMAX, MR, NV, 0, QUANT, AT, a, p, alpha, o, last, pf);
}

/* All m rows of a chunk (or of a span of its keys) in tiles of MR rows by NV vectors,
 * the last tile with the rows left: min(MR, rows left) is 1..MR, so the default cannot
 * be reached. Where PV_PF_WHOLE_ROWS or the chunk is the whole rows, only the first tile
 * prefetches, whole rows (a->pfb), so the others find them in cache and run the plain
 * loop (pv_plain): in decode (Dv = 128 at fp32, a GQA group of 4: pv_3x8v, then a
 * 1-row tile) the second tile's prefetches and per-key tests cost more than its FMAs.
 * Otherwise each tile prefetches its own columns. */
ALWAYS_INLINE void pv_span_tiles(const int MR, const int NV, const int QUANT, int AT,
                                 const pv_chunk_args *a) {
    const vtail last = v_tail(a->lastw);
    for (int r0 = 0; r0 < a->m; r0 += MR) {
        const float *p = a->p + (size_t)r0 * (size_t)a->ldp;
        const float *alpha = a->alpha ? a->alpha + r0 : NULL;
        float *o = a->o + (size_t)r0 * (size_t)a->ldo;
        const int pf = r0 == 0 || !(PV_PF_WHOLE_ROWS || a->whole) ? a->pf : 0;
        switch (min_int(MR, a->m - r0)) {
        case 1: pv_tile_dt(MR, 1, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 2: pv_tile_dt(MR, 2, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 3: pv_tile_dt(MR, 3, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 4: pv_tile_dt(MR, 4, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 5: pv_tile_dt(MR, 5, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 6: pv_tile_dt(MR, 6, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 7: pv_tile_dt(MR, 7, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 8: pv_tile_dt(MR, 8, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 9: pv_tile_dt(MR, 9, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 10: pv_tile_dt(MR, 10, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 11: pv_tile_dt(MR, 11, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        case 12: pv_tile_dt(MR, 12, NV, QUANT, AT, a, p, alpha, o, last, pf); continue;
        default: __builtin_unreachable();
        }
    }
}

/* The chunk's keys [j0, j0 + n) as a chunk of their own: the rescale (alpha) only with
 * the first, the prefetch bounds and the stream in step moved along. Adding the keys
 * span by span adds them in the same order, one at a time, so the bits are the same. */
ALWAYS_INLINE pv_chunk_args pv_span(const pv_chunk_args *a, int j0, int n) {
    pv_chunk_args s = *a;
    s.n = n;
    s.p = a->p + j0;
    s.v = a->v ? a->v + (size_t)j0 * a->ldvb : NULL;
    s.vat = a->vat ? a->vat + j0 : NULL;
    s.alpha = j0 ? NULL : a->alpha;
    s.pfend = a->pfend - j0;
    s.pfrun = a->pfrun ? a->pfrun + (size_t)j0 * a->ldvb : NULL;
    s.pfn = a->pfn - j0;
    s.sc = a->sc ? a->sc + (int64_t)j0 * a->ldscb : NULL;
    return s;
}

static inline size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* A tile call's chunks (a->nchunk) over its keys a->span at a time: each span of keys
 * runs through every chunk and row tile before the next, so V's rows of a span, read
 * from memory by the first chunk, are still in L1 for the others (PV_SPAN_BYTES,
 * PV_CHUNK_SPAN_BYTES). One call runs them all: a call per span and chunk cost ~100
 * cycles each, which doubled AVX2's pv time a key with V in L1 (docs/PERFORMANCE.md,
 * "Decode over a tokens-major cache"). Every O column still adds its keys in order,
 * one at a time, so the bits are those of one pass per chunk. At least one pass, so a
 * call of no keys still rescales O. AT (rows at addresses, pv_at) is chosen per key, not
 * compiled apart: an instance of every tile for each doubled the x86 kernels' compile
 * time (35 -> 53 s for avx512.c) to save 2-6% of decode with K and V in cache and
 * nothing from DRAM (docs/PERFORMANCE.md, "Paged decode in one call"). */
ALWAYS_INLINE void pv_row_tiles(const int MR, const int NV, const int QUANT,
                                const pv_chunk_args *a) {
    const size_t cb = dt_bytes(a->dt, (size_t)(VL * NV));
    int j0 = 0;
    do {
        pv_chunk_args s = pv_span(a, j0, min_int(a->span, a->n - j0));
        for (int ch = 0; ch < a->nchunk; ch++) {
            s.lastw = ch == a->nchunk - 1 ? a->lastw : VL;
            pv_span_tiles(MR, NV, QUANT, !QUANT && a->vat, &s);
            s.v = s.v ? s.v + cb : NULL;
            s.o += VL * NV;
            s.voff += cb;
            s.pfrun = s.pfrun ? s.pfrun + cb : NULL;
            s.pf = PV_PF_WHOLE_ROWS ? 0 : a->pf;
        }
    } while ((j0 += a->span) < a->n);
}

/* pv_row_tiles' spans and chunks for the case decode runs (one or two row tiles, no Dv
 * tail, rows at one stride, no paged run): the same keys in the same order, in one loop
 * nest with no per-span dispatch, so a span and chunk costs its accumulators' loads and
 * stores and little else (through the general loop's switches and argument copies,
 * AVX2's 4 KiB spans cost 65 cycles a key in L1, here 47; docs/PERFORMANCE.md, "AVX2's
 * decode chunks span by span"). Only the first tile of a chunk prefetches, its
 * columns, or where the ISA sets PV_PF_WHOLE_ROWS (AVX2) only the first chunk's, whole
 * rows, so the other tiles (and chunks) find them in cache. pv_nest_tile is one tile's
 * rows [r0, r0 + MR) over keys [j0, j1) of chunk ch. */
ALWAYS_INLINE void pv_nest_tile(const int MR, const int NV, const sdpa_dtype dt,
                                const pv_chunk_args *a, int r0, int j0, int j1, int ch) {
    const int ldp = a->ldp, ldo = a->ldo;
    const int pf = r0 == 0 && (ch == 0 || !PV_PF_WHOLE_ROWS) ? a->pf : 0;
    const size_t ldvb = a->ldvb;
    const char *v = a->v + (size_t)ch * dt_bytes(dt, (size_t)(VL * NV));
    const float *p = a->p + (size_t)r0 * (size_t)ldp;
    float *o = a->o + (size_t)r0 * (size_t)ldo + VL * NV * ch;
    vf acc[32];
    UNROLL_FULL
    for (int k = 0; k < MR * NV; k++) {
        acc[k] = v_loadu(o + (size_t)(k / NV) * (size_t)ldo + VL * (k % NV));
        if (j0 == 0 && a->alpha)
            acc[k] = acc[k] * v_set1(a->alpha[r0 + k / NV]);
    }
    if (pf > 0) {
        for (int j = j0; j < j1; j++) {
            if (j + pf < a->pfend)
                pv_prefetch(NV, dt, a, v + (size_t)(j + pf) * ldvb, sdpa_prefetch_l1);
            pv_key(MR, NV, 1, dt, 0, 0, a, v + (size_t)j * ldvb, NULL, p, ldp, j, v_full(),
                   acc);
        }
    } else {
        for (int j = j0; j < j1; j++)
            pv_key(MR, NV, 1, dt, 0, 0, a, v + (size_t)j * ldvb, NULL, p, ldp, j, v_full(),
                   acc);
    }
    UNROLL_FULL
    for (int k = 0; k < MR * NV; k++)
        v_storeu(o + (size_t)(k / NV) * (size_t)ldo + VL * (k % NV), acc[k]);
}

/* pv_nest_tile over spans, chunks and up to two row tiles: MR rows, then MR2 (0: none). */
ALWAYS_INLINE void pv_span_nest(const int MR, const int MR2, const int NV, const sdpa_dtype dt,
                                const pv_chunk_args *a) {
    int j0 = 0;
    do {
        const int j1 = min_int(j0 + a->span, a->n);
        for (int ch = 0; ch < a->nchunk; ch++) {
            pv_nest_tile(MR, NV, dt, a, 0, j0, j1, ch);
            if (MR2)
                pv_nest_tile(MR2 ? MR2 : 1, NV, dt, a, MR, j0, j1, ch);
        }
    } while ((j0 += a->span) < a->n);
}

/* pv_span_nest with the storage type as a constant. */
ALWAYS_INLINE void pv_span_nest_dt(const int MR, const int MR2, const int NV,
                                   const pv_chunk_args *a) {
    switch (a->dt) {
    case SDPA_F16: pv_span_nest(MR, MR2, NV, SDPA_F16, a); return;
    case SDPA_BF16: pv_span_nest(MR, MR2, NV, SDPA_BF16, a); return;
    default: /* SDPA_F32 */ pv_span_nest(MR, MR2, NV, SDPA_F32, a); return;
    }
}

/* Whether pv_span_nest can run a call of chunks (pv_chunk asks): at most mr rows, no
 * Dv tail, rows at one stride, no paged run. */
static inline int pv_nest_fits(const pv_chunk_args *a, int mr) {
    return a->nchunk > 1 && a->m <= mr && a->lastw == VL && !a->vat && !a->pfrun;
}

/* The pv register tiles, rows x vectors of O, each with its register budget (the
 * accumulators, the V vectors of a key, 1 P broadcast) and the register file it is for.
 * At 24 accumulators the 10-14 loads per 24 FMAs (12 cycles) stay under two per cycle. */
/* 12 x 1 = 12 + 1 + 1, of 16 or 32: a lone one-vector chunk (Dv <= VL, or on AVX2 the
 * last of an odd number of 8s; 13 loads per 12 FMAs). */
TILE void pv_12x1v(const pv_chunk_args *a) { pv_row_tiles(12, 1, 0, a); }
/* 6 x 2 = 12 + 2 + 1 = 15 of 16: AVX2's tile (8 loads per 12 FMAs). */
TILE void pv_6x2v(const pv_chunk_args *a) { pv_row_tiles(6, 2, 0, a); }
/* pv_6x2v's registers over decode's chunks span by span (pv_span_nest): up to 6 rows
 * in one tile, 7 or 8 (a GQA group of 8) in a tile of 6 and one of the rest. */
TILE void pv_6x2v_spans(const pv_chunk_args *a) {
    switch (a->m) {
    case 1: pv_span_nest_dt(1, 0, 2, a); return;
    case 2: pv_span_nest_dt(2, 0, 2, a); return;
    case 3: pv_span_nest_dt(3, 0, 2, a); return;
    case 4: pv_span_nest_dt(4, 0, 2, a); return;
    case 5: pv_span_nest_dt(5, 0, 2, a); return;
    case 6: pv_span_nest_dt(6, 0, 2, a); return;
    case 7: pv_span_nest_dt(6, 1, 2, a); return;
    default: /* pv_nest_fits: 8 rows, a GQA group of 8 (PV_WIDE_M) */
        pv_span_nest_dt(6, 2, 2, a);
        return;
    }
}
/* pv_4x8v's registers over decode's chunks span by span (pv_span_nest): a GQA group of
 * up to 4 rows at Dv = 256 (AVX-512's pv_spans_ok), each span of V rows read from
 * memory by the first chunk and from L1 by the second. */
TILE void pv_4x8v_spans(const pv_chunk_args *a) {
    switch (a->m) {
    case 1: pv_span_nest_dt(1, 0, 8, a); return;
    case 2: pv_span_nest_dt(2, 0, 8, a); return;
    case 3: pv_span_nest_dt(3, 0, 8, a); return;
    default: /* pv_nest_fits: 4 rows */
        pv_span_nest_dt(4, 0, 8, a);
        return;
    }
}
/* 12 x 2 = 24 + 2 + 1, of 32. */
TILE void pv_12x2v(const pv_chunk_args *a) { pv_row_tiles(12, 2, 0, a); }
/* 8 x 3 = 24 + 3 + 1, of 32. */
TILE void pv_8x3v(const pv_chunk_args *a) { pv_row_tiles(8, 3, 0, a); }
/* 6 x 4 = 24 + 4 + 1, of 32. */
TILE void pv_6x4v(const pv_chunk_args *a) { pv_row_tiles(6, 4, 0, a); }
/* 4 x 5 = 20 + 5 + 1, of 32. */
TILE void pv_4x5v(const pv_chunk_args *a) { pv_row_tiles(4, 5, 0, a); }
/* 4 x 6 = 24 + 6 + 1, of 32. */
TILE void pv_4x6v(const pv_chunk_args *a) { pv_row_tiles(4, 6, 0, a); }
/* 3 x 7 = 21 + 7 + 1, of 32. */
TILE void pv_3x7v(const pv_chunk_args *a) { pv_row_tiles(3, 7, 0, a); }
/* 3 x 8 = 24 + 8 + 1 = 33, of 32: one vector lives on the stack (one load and one FMA
 * with a memory operand per key); it serves decode's whole rows of Dv = 128, which
 * stream from DRAM, where that load is not the limit. */
TILE void pv_3x8v(const pv_chunk_args *a) { pv_row_tiles(3, 8, 0, a); }
/* 4 x 7 = 28 + 7 + 1 = 36, of 32: a GQA group of 4 in one tile on a 16-bit V at Dv
 * 97..112, each V vector loaded and widened once a key. gcc keeps 4-6 accumulators on
 * the stack (an FMA with a memory operand and a store each a key); taking V a vector at
 * a time with its 4 FMAs spills nothing but ran f16 decode slower from DRAM
 * (docs/PERFORMANCE.md, "pv for a GQA group of 4 in one tile"). */
TILE void pv_4x7v(const pv_chunk_args *a) { pv_row_tiles(4, 7, 0, a); }
/* 4 x 8 = 32 + 1 + 4 = 37, of 32: a GQA group of 4 in one tile at Dv = 128, any V
 * storage, so each V row is read once a key (pv_3x8v and a 1-row tile read it twice, the
 * second time from L2) and a 16-bit one widened once. Its accumulators fill the
 * register file, so pv_key takes V a vector at a time; gcc 12 holds the 4 P broadcasts
 * in registers and keeps 5 accumulators on the stack (an FMA with a memory addend and a
 * store each a key; docs/PERFORMANCE.md, "pv for a GQA group of 4 at Dv = 128 in one
 * tile"). */
TILE void pv_4x8v(const pv_chunk_args *a) { pv_row_tiles(4, 8, 0, a); }

/* The pvq tiles, pv_q's on a quantized V: each V vector is decoded and scaled once per
 * key for all the tile's rows, so a tile holds every row of a decode item (a GQA group
 * of up to 8 heads) and cuts Dv into narrower chunks instead; budget: the
 * accumulators, the V vectors of a key, 1 P broadcast, 1 scale broadcast and the
 * decode's temporaries (the fp8 decodes' constants among them). 4 x 1..4 = up to 16 +
 * 4 + 2, of 32 (AVX-512, up to 4 rows: a chunk of 4 vectors of int8 codes is one
 * 64-byte line). */
TILE void pvq_4x1v(const pv_chunk_args *a) { pv_row_tiles(4, 1, 1, a); }
TILE void pvq_4x2v(const pv_chunk_args *a) { pv_row_tiles(4, 2, 1, a); }
TILE void pvq_4x3v(const pv_chunk_args *a) { pv_row_tiles(4, 3, 1, a); }
TILE void pvq_4x4v(const pv_chunk_args *a) { pv_row_tiles(4, 4, 1, a); }
/* 8 x 1..3 = up to 24 + 3 + 2, of 32 (AVX-512, 5 rows and more). */
TILE void pvq_8x1v(const pv_chunk_args *a) { pv_row_tiles(8, 1, 1, a); }
TILE void pvq_8x2v(const pv_chunk_args *a) { pv_row_tiles(8, 2, 1, a); }
TILE void pvq_8x3v(const pv_chunk_args *a) { pv_row_tiles(8, 3, 1, a); }
/* 4 x 8 = 32 + 1 + 4, of 32: pv_4x8v on an int8 V read unscaled (pv_factored), whose
 * codes widen in one register (vpmovsxbd, vcvtdq2ps) as a 16-bit V's do, so a GQA group
 * of 4 at Dv = 128 reads each V row once a key in one tile instead of a 64-byte chunk
 * per pvq_4x4v (AVX-512: PVQ_UNSC_WHOLE). The rows are exactly 4 (pv_chunks). */
TILE void pvq_4x8v_i8(const pv_chunk_args *a) {
    pv_tile(4, 4, 8, 0, SDPA_I8, 0, 1, 0, a, a->p, a->alpha, a->o, v_tail(a->lastw), a->pf);
}
/* 6 x 1..2 = up to 12 + 2 + 2, of 16 (AVX2). */
TILE void pvq_6x1v(const pv_chunk_args *a) { pv_row_tiles(6, 1, 1, a); }
TILE void pvq_6x2v(const pv_chunk_args *a) { pv_row_tiles(6, 2, 1, a); }

/* Bytes of V (a chunk's columns) the row tiles of a chunk pass over before the next
 * span, where the rows take more than one tile (more than the including ISA's
 * PV_WIDE_TILE_ROWS, the rows of its fewest-row pv tile): half of a 32 KiB L1D (AMD
 * Zen 4, the project's smallest; CPUID leaf 0x80000005 ECX[31:24]), so a span read by
 * the first tile is still in L1 for the others beside Q, S and O (docs/PERFORMANCE.md,
 * "Paged decode in one call"). */
#define PV_SPAN_BYTES 16384

/* Rows up to which pv works like decode (a GQA group of 8 heads): it prefetches V rows
 * ahead (as does any call told its rows go on, npf > 0), and cuts Dv into chunks of up
 * to PV_WIDE_CMAX vectors instead of PV_CMAX. */
#define PV_WIDE_M 8

/* Vectors of Dv up to which pv_q folds e4m3's 2^8 into a copy of the scales on the stack
 * (pv_chunks): Dv = 512 at AVX-512, 256 at AVX2, the widest head dims engines run with fp8
 * caches; a wider V keeps the multiplication. */
#define PV_FOLD_VEC 32

/* Dv is cut into chunks of at most cmax vectors, as even as possible (5 -> 3 + 2,
 * 8 -> 4 + 4, 9 -> 3 + 3 + 3 at cmax = 4; at cmax = 2, chunks of 2 and a last 1 for an
 * odd count), so no chunk but a lone one drops below 2 vectors and the tile keeps its
 * accumulators at Dv = 80 or 96 as at 64 or 128. The chunk widths are the including
 * ISA's; why they are what they are is in its file. A quantized V (pv_q) always works
 * like decode, in chunks of up to PVQ_CMAX_FEW vectors for up to PVQ_FEW_M rows, else
 * PVQ_CMAX, for pvq_chunk's tiles, each vector's scale offset given to the tile; with
 * unsc its int8 codes are read unscaled (pv_factored scaled P instead), and where the
 * ISA's PVQ_UNSC_WHOLE says so a GQA group of PVQ_FEW_M rows at Dv = PV_WIDE_CMAX
 * vectors runs in one chunk (pvq_4x8v_i8). */
_Static_assert(PVQ_CMAX <= PV_WIDE_CMAX && PVQ_CMAX_FEW <= PV_WIDE_CMAX,
               "pv_chunk_args.goff holds a chunk's scale offsets");
ALWAYS_INLINE void pv_chunks(const int QUANT, int unsc, int m, int n, int dv, const float *p,
                             int ldp,
                             const void *v, size_t ldvb, sdpa_dtype dt, const sdpa_qscales *qs,
                             const float *alpha, float *o, int ldo, int npf, const void *pfv,
                             const char *const *vat) {
    const int group = qs ? qs->group : dv, f16 = qs && qs->dt == SDPA_F16;
    const size_t rowb = dt_bytes(dt, (size_t)dv);
    const int nvec = (dv + VL - 1) / VL;
    const int wide = QUANT || m <= PV_WIDE_M;
    const int cmax = QUANT ? (m <= PVQ_FEW_M ? (PVQ_UNSC_WHOLE && unsc && m == PVQ_FEW_M &&
                                                        nvec == PV_WIDE_CMAX
                                                    ? PV_WIDE_CMAX
                                                    : PVQ_CMAX_FEW)
                                             : PVQ_CMAX)
                     : wide ? PV_WIDE_CMAX : PV_CMAX;
    const int ahead = (int)((vat ? SDPA_PREFETCH_AT_AHEAD : SDPA_PREFETCH_AHEAD) / rowb) + 1;
    const int pf = wide || npf > 0 || pfv ? ahead : 0;
    const int nchunk = (nvec + cmax - 1) / cmax;
    /* a folded e4m3 V's scales, 2^8 s for each vector of Dv in order (e4m3_fold: they are
     * the same for every key), as fp32: the tiles read them where they would read the
     * cache's own, without a multiplication per vector */
    const int fold = QUANT && nvec <= PV_FOLD_VEC && e4m3_fold(dt, qs, dv);
    float sfold[PV_FOLD_VEC];
    if (fold)
        for (int c = 0; c < nvec; c++) {
            const int64_t g = VL * c / group;
            sfold[c] = (f16 ? _cvtsh_ss(((const uint16_t *)qs->p)[g])
                            : ((const float *)qs->p)[g]) * KVQ_E4M3_RAW;
        }
    /* decode's chunks, all of one width, in one call, PV_CHUNK_SPAN_BYTES of whole V
     * rows a span (where the including ISA sets it, for the rows and chunks its
     * pv_spans_ok takes; nest: what pv_nest_fits asks of V's view) */
    const int nest = dv % VL == 0 && !vat && !pfv;
    const int run = !QUANT && PV_CHUNK_SPAN_BYTES > 0 && wide && pf > 0 && nchunk > 1 &&
                            nvec % nchunk == 0 && pv_spans_ok(m, nchunk, nest)
                        ? nchunk
                        : 1;
    int c0 = 0;
    for (int ch = 0; ch < nchunk; ch += run) {
        const int nv = nvec / nchunk + (ch < nvec % nchunk);
        const size_t cb = dt_bytes(dt, (size_t)(VL * nv));
        /* field by field: an initializer would zero goff, which only pv_q reads, per
         * chunk (gcc emits rep stos for it, 4% of AVX2's f16 decode) */
        pv_chunk_args a;
        a.m = m;
        a.n = n;
        a.p = p;
        a.ldp = ldp;
        a.v = vat ? NULL : (const char *)v + dt_bytes(dt, (size_t)(VL * c0));
        a.ldvb = ldvb;
        a.alpha = alpha;
        a.o = o + VL * c0;
        a.ldo = ldo;
        a.dt = dt;
        a.lastw = min_int(VL * nv * run, dv - VL * c0) - VL * (nv * run - 1);
        a.pf = ch == 0 || !PV_PF_WHOLE_ROWS ? pf : 0;
        a.pfend = n + min_int(npf, ahead);
        a.pfrun = pfv ? (const char *)pfv + dt_bytes(dt, (size_t)(VL * c0)) : NULL;
        a.pfn = npf;
        a.pfb = rowb;
        a.whole = nchunk == 1;
        a.vat = vat;
        a.voff = dt_bytes(dt, (size_t)(VL * c0));
        a.sc = fold ? (const char *)(sfold + c0) : qs ? (const char *)qs->p : NULL;
        a.ldscb = qs && !fold ? qs->ld * (f16 ? 2 : 4) : 0;
        a.f16 = f16 && !fold;
        a.fold = fold;
        a.unsc = unsc;
        a.nchunk = run;
        /* keys a pass: PV_CHUNK_SPAN_BYTES of rows where the chunks run together; where
         * the rows take more than one tile (more than PV_WIDE_TILE_ROWS), PV_SPAN_BYTES
         * of the chunk's columns; else (a quantized V always) all */
        a.span = run > 1 ? (int)max_size(1, PV_CHUNK_SPAN_BYTES / rowb)
                 : !QUANT && m > PV_WIDE_TILE_ROWS && (size_t)n * cb > PV_SPAN_BYTES
                     ? (int)max_size(1, PV_SPAN_BYTES / cb)
                     : n;
        if (QUANT) {
            for (int c = 0; c < nv; c++)
                a.goff[c] = fold ? c : VL * (c0 + c) / group;
            pvq_chunk(nv, &a);
        } else {
            pv_chunk(nv, &a);
        }
        c0 += nv * run;
    }
}

static void x86_pv(int m, int n, int dv, const float *p, int ldp, const void *v, int64_t ldv,
                   sdpa_dtype dt, const float *alpha, float *o, int ldo, int npf, const void *pf) {
    pv_chunks(0, 0, m, n, dv, p, ldp, v, (size_t)ldv * elem_bytes(dt), dt, NULL, alpha, o, ldo,
              npf, pf, NULL);
}

/* The contract's pv_at: pv's tiles on rows at addresses. */
static void x86_pv_at(int m, int n, int dv, const float *p, int ldp, const void *const *v,
                      sdpa_dtype dt, const float *alpha, float *o, int ldo, int npf) {
    pv_chunks(0, 0, m, n, dv, p, ldp, NULL, 0, dt, NULL, alpha, o, ldo, npf, NULL,
              (const char *const *)v);
}

/* pv_q on an int8 V with one scale per key ("int8 scales factored"): keys in spans of
 * PVQ_FAC_KEYS and rows in groups of PVQ_FAC_ROWS, each span's P times its keys' result
 * multipliers into a copy (fl(p s) for a factored key, where the scaled codes would give
 * fl(p fl(c s)): the same real product p c s, rounded once either way; p x 1 for the
 * others), then the span through pv_chunks: codes unscaled where every key of it is
 * factored, else each key's codes times 1 or its s (i8_factor). Keys are added to O in
 * the same order as in one call; the next span's rows are the stream the prefetches run
 * ahead into. A copy of 8 rows x 128 keys is 4 KiB of stack; its multiplications, m /
 * VL per key, replace Dv / VL. */
enum { PVQ_FAC_KEYS = 128, PVQ_FAC_ROWS = 8 };
static void pv_factored(int m, int n, int dv, const float *p, int ldp, const char *v,
                        size_t ldvb, const sdpa_qscales *qs, const float *alpha, float *o,
                        int ldo, int npf, const char *pfv) {
    const int f16 = qs->dt == SDPA_F16;
    const int64_t ldsb = qs->ld * (f16 ? 2 : 4);
    float sv[PVQ_FAC_KEYS], ks[PVQ_FAC_KEYS], pb[PVQ_FAC_ROWS * PVQ_FAC_KEYS];
    for (int j0 = 0; j0 < n; j0 += PVQ_FAC_KEYS) {
        const int len = min_int(PVQ_FAC_KEYS, n - j0);
        int all = 1;
        for (int i = 0; i < len; i += VL) {
            const int c = min_int(VL, len - i);
            vf svv, ksv;
            const unsigned fm = i8_factor(
                key_scales(c, (const char *)qs->p + (int64_t)(j0 + i) * ldsb, ldsb, f16), &svv,
                &ksv);
            all &= (fm & ((1u << c) - 1u)) == (1u << c) - 1u;
            v_storeu(sv + i, svv);
            v_storeu(ks + i, ksv);
        }
        const sdpa_qscales q1 = {sv, 1, dv, SDPA_F32};
        for (int r0 = 0; r0 < m; r0 += PVQ_FAC_ROWS) {
            const int mr = min_int(PVQ_FAC_ROWS, m - r0);
            for (int r = 0; r < mr; r++) {
                const float *pr = p + (size_t)(r0 + r) * (size_t)ldp + j0;
                float *br = pb + r * PVQ_FAC_KEYS;
                for (int j = 0; j < len; j += VL) {
                    const vtail t = v_tail(min_int(VL, len - j));
                    v_store_part(br + j, t, v_load_part(pr + j, t) * v_loadu(ks + j));
                }
            }
            pv_chunks(1, all, mr, len, dv, pb, PVQ_FAC_KEYS, v + (size_t)j0 * ldvb, ldvb,
                      SDPA_I8, &q1, j0 || !alpha ? NULL : alpha + r0,
                      o + (size_t)r0 * (size_t)ldo, ldo, pfv ? npf - j0 : n - j0 - len + npf,
                      pfv ? pfv + (size_t)j0 * ldvb : NULL, NULL);
        }
    }
}

static void x86_pv_q(int m, int n, int dv, const float *p, int ldp, const void *v, int64_t ldvb,
                     sdpa_dtype dt, const sdpa_qscales *qs, const float *alpha, float *o,
                     int ldo, int npf, const void *pf) {
    if (dt == SDPA_I8 && qs && qs->group == dv) {
        pv_factored(m, n, dv, p, ldp, (const char *)v, (size_t)ldvb, qs, alpha, o, ldo, npf,
                    (const char *)pf);
        return;
    }
    pv_chunks(1, 0, m, n, dv, p, ldp, v, (size_t)ldvb, dt, qs, alpha, o, ldo, npf, pf, NULL);
}
