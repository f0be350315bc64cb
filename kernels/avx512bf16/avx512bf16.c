/*
 * avx512bf16.c - the AVX512_BF16 kernel table: the bf16 compute mode's tiles
 * (SDPA_COMPUTE_BF16; pack_q_bf16, pack_k_bf16, qk_bf16, pack_v_bf16, pv_bf16 and the
 * decode pair qk_rows_bf16, pv_rows_bf16 of kernels/ukernel.h) on vdpbf16ps, which multiplies pairs of bf16 exactly and adds both products to an fp32
 * lane: 32 multiply-adds per 512-bit instruction, twice the fp32 FMA's 16.
 *
 * It is not a complete table and not an fp32 path: it sets only its ISA, its name, the
 * bf16 alignments and the seven bf16 entries; the registry (src/dispatch.c) starts it
 * from the avx512 row's table, whose fp32 tiles, Br = 96 and Bc = 64 it keeps. The packing
 * layouts and functions are kernels/x86/bf16.h's (shared with the AMX table); the
 * register tiles are here.
 *
 * Arithmetic. vdpbf16ps reads bf16 subnormal inputs as zero and flushes subnormal fp32
 * results to zero (DAZ and FTZ, whatever MXCSR says; Intel SDM vol. 2, VDPBF16PS), and
 * the conversions of fp32 to bf16 (K, V, P) flush fp32 subnormals: include/sdpa.h's error
 * model allows it (each flush loses a term with an operand below 2^-126, or a partial sum
 * below 2^-126; tests/test_ukernel.c bounds it so).
 * Each score is one chain of vdpbf16ps over the dim pairs in order, then the scale;
 * each output is alpha O (one rounding), then one chain over the key pairs in order. The
 * chains are the same instructions whatever m is and whichever rows share a call, so a
 * row's results are the same bits in any call (the driver relies on it).
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) ||        \
    !defined(__AVX512VL__) || !defined(__FMA__) || !defined(__F16C__) ||                \
    !defined(__AVX512BF16__)
#error "kernels/avx512bf16/ needs the avx512 flags and -mavx512bf16 (sources.mk)"
#endif

#include <string.h>

#include "../x86/vec_avx512.h"
#include "../x86/bf16.h"
#include "../x86/kvload.h"
#include "../x86/reduce.h"

/* A register tile: its own function, never inlined into its caller, so its accumulators
 * are allocated on their own and a profile shows it by name (kernels/x86/tiles.h's
 * convention). */
#define TILE static __attribute__((noinline))

/* The most rows of any tile below: the size of their accumulator arrays. */
enum { QKB_ROWS_MAX = 12, PVB_ACC_MAX = 24, QKRB_ROWS_MAX = 8, PVRB_ACC_MAX = 24 };

/* One bf16 pair (two consecutive elements) broadcast to every 32-bit lane: vdpbf16ps's
 * operand for a row of Q or P against a vector of K or V pairs. */
ALWAYS_INLINE __m512bh bcast_pair(const uint16_t *p) {
    int32_t w;
    memcpy(&w, p, sizeof w);
    return (__m512bh)_mm512_set1_epi32(w);
}

ALWAYS_INLINE __m512bh load_pairs(const uint16_t *p) { return (__m512bh)_mm512_load_si512(p); }

/* ---- qk_bf16 --------------------------------------------------------------------- */

/* S[0..MR)[0..16 NV) = scale * Qb Kb^T for NV strips of 16 keys (the second kstride
 * elements after the first), over npair dim pairs: MR x NV accumulators; per pair, NV
 * key-pair vectors and MR Q-pair broadcasts feed MR NV vdpbf16ps. S is stored whole
 * vectors: columns up to round_up(n, 16), which the contract allows. */
ALWAYS_INLINE void qkb_tile(const int MRMAX, const int MR, const int NV, int npair, float scale,
                            const uint16_t *q, int ldq, const uint16_t *ks, size_t kstride,
                            float *s, int lds) {
    if (MR > MRMAX) /* a switch arm the tile never takes (qkb_tile_rows) */
        return;
    vf acc[QKB_ROWS_MAX][2];
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            acc[r][c] = v_zero();
    for (int p = 0; p < npair; p++) {
        const __m512bh b0 = load_pairs(ks + (size_t)p * 2 * KPB_KEYS);
        const __m512bh b1 = NV > 1 ? load_pairs(ks + kstride + (size_t)p * 2 * KPB_KEYS) : b0;
        UNROLL_FULL
        for (int r = 0; r < MR; r++) {
            const __m512bh a = bcast_pair(q + (size_t)r * (size_t)ldq + 2 * (size_t)p);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], b0, a);
            if (NV > 1)
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], b1, a);
        }
    }
    const vf vs = v_set1(scale);
    UNROLL_FULL
    for (int r = 0; r < MR; r++)
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            v_storeu(s + (size_t)r * (size_t)lds + VL * c, acc[r][c] * vs);
}

/* qkb_tile with the row count as a constant: mr = min(MR, rows left) is 1..MR, so the
 * default cannot be reached. */
ALWAYS_INLINE void qkb_tile_rows(const int MR, const int NV, int mr, int npair, float scale,
                                 const uint16_t *q, int ldq, const uint16_t *ks, size_t kstride,
                                 float *s, int lds) {
    switch (mr) {
    case 1: qkb_tile(MR, 1, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 2: qkb_tile(MR, 2, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 3: qkb_tile(MR, 3, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 4: qkb_tile(MR, 4, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 5: qkb_tile(MR, 5, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 6: qkb_tile(MR, 6, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 7: qkb_tile(MR, 7, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 8: qkb_tile(MR, 8, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 9: qkb_tile(MR, 9, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 10: qkb_tile(MR, 10, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 11: qkb_tile(MR, 11, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    case 12: qkb_tile(MR, 12, NV, npair, scale, q, ldq, ks, kstride, s, lds); return;
    default: __builtin_unreachable();
    }
}

/* qkb_12x2v, the contract's qk_bf16: tiles of 12 query rows by 2 strips of 16 keys (the
 * last strip alone when the padded key count is an odd number of 16s, the last row
 * tile the rows left), over ceil(dk / 2) dim pairs (Qb and Kpb are zero past dk).
 * Register budget, of 32: 24 accumulators + 2 key-pair vectors + 1-2 Q-pair broadcasts.
 * Per dim pair: 2 vector loads, 12 broadcasts, 24 vdpbf16ps: the broadcasts ride the
 * load ports, well under their two per cycle, and each accumulator's chain has 24
 * instructions between its steps to cover vdpbf16ps's latency. */
TILE void qkb_12x2v(int m, int n, int dk, float scale, const uint16_t *q, int ldq,
                    const uint16_t *kp, float *s, int lds) {
    const int npair = (dk + 1) / 2, nstrip = (n + KPB_KEYS - 1) / KPB_KEYS;
    const size_t kstride = (size_t)KPB_KEYS * (size_t)round_up_int(dk, 32);
    for (int r0 = 0; r0 < m; r0 += 12) {
        const int mr = min_int(12, m - r0);
        const uint16_t *qr = q + (size_t)r0 * (size_t)ldq;
        float *sr = s + (size_t)r0 * (size_t)lds;
        for (int st = 0; st < nstrip; st += 2) {
            const uint16_t *ks = kp + (size_t)st * kstride;
            if (nstrip - st >= 2)
                qkb_tile_rows(12, 2, mr, npair, scale, qr, ldq, ks, kstride, sr + VL * st, lds);
            else
                qkb_tile_rows(12, 1, mr, npair, scale, qr, ldq, ks, kstride, sr + VL * st, lds);
        }
    }
}

/* ---- pv_bf16 --------------------------------------------------------------------- */

/* One chunk of Dv columns for the rows whose P is converted: what pvb_chunk hands the
 * register tile it picks. */
typedef struct {
    int m;               /* rows */
    int npair;           /* key pairs (keys rounded up to even; P and Vpb zero past n) */
    const uint16_t *pb;  /* P as bf16, rows ldpb elements apart */
    int ldpb;
    const uint16_t *vp;  /* the chunk's first column of Vpb's first key pair */
    size_t vstride;      /* elements between key pairs of Vpb (2 dvs) */
    const float *alpha;  /* per row, or NULL: no rescale */
    float *o;            /* the chunk's first column of O, rows ldo apart */
    int ldo;
    int lastw;           /* columns in the chunk's last vector, 1..16 */
} pvb_args;

/* O[0..MR)[16 NV columns] = alpha O + Pb Vb over the chunk's key pairs. The O tile stays
 * in registers for the whole key loop: per key pair, NV Vpb vectors and MR P-pair
 * broadcasts feed MR NV vdpbf16ps. O's last vector is masked to the chunk's columns. */
ALWAYS_INLINE void pvb_tile(const int MRMAX, const int MR, const int NV, const pvb_args *a,
                            const uint16_t *pb, const float *alpha, float *o, vtail last) {
    if (MR > MRMAX) /* a switch arm the tile never takes (pvb_row_tiles) */
        return;
    const int ldo = a->ldo, ldpb = a->ldpb;
    /* acc[k] is row k / NV, vector k % NV: flat loops, unrolled in full (tiles.h's
     * pv_tile explains why not nested ones) */
    vf acc[PVB_ACC_MAX];
    __m512bh vv[4];
    UNROLL_FULL
    for (int k = 0; k < MR * NV; k++) {
        const int c = k % NV;
        const float *oc = o + (size_t)(k / NV) * (size_t)ldo + VL * c;
        acc[k] = c < NV - 1 ? v_loadu(oc) : v_load_part(oc, last);
        if (alpha)
            acc[k] = acc[k] * v_set1(alpha[k / NV]);
    }
    for (int kk = 0; kk < a->npair; kk++) {
        const uint16_t *vk = a->vp + (size_t)kk * a->vstride;
        UNROLL_FULL
        for (int c = 0; c < NV; c++)
            vv[c] = load_pairs(vk + 2 * VL * c);
        UNROLL_FULL
        for (int k = 0; k < MR * NV; k++)
            acc[k] = _mm512_dpbf16_ps(acc[k], vv[k % NV],
                                      bcast_pair(pb + (size_t)(k / NV) * (size_t)ldpb + 2 * kk));
    }
    UNROLL_FULL
    for (int k = 0; k < MR * NV; k++) {
        const int c = k % NV;
        float *oc = o + (size_t)(k / NV) * (size_t)ldo + VL * c;
        if (c < NV - 1)
            v_storeu(oc, acc[k]);
        else
            v_store_part(oc, last, acc[k]);
    }
}

/* All rows of a chunk in tiles of MR rows by NV vectors, the last tile with the rows
 * left: min(MR, rows left) is 1..MR, so the default cannot be reached. */
ALWAYS_INLINE void pvb_row_tiles(const int MR, const int NV, const pvb_args *a) {
    const vtail last = v_tail(a->lastw);
    for (int r0 = 0; r0 < a->m; r0 += MR) {
        const uint16_t *pb = a->pb + (size_t)r0 * (size_t)a->ldpb;
        const float *alpha = a->alpha ? a->alpha + r0 : NULL;
        float *o = a->o + (size_t)r0 * (size_t)a->ldo;
        switch (min_int(MR, a->m - r0)) {
        case 1: pvb_tile(MR, 1, NV, a, pb, alpha, o, last); continue;
        case 2: pvb_tile(MR, 2, NV, a, pb, alpha, o, last); continue;
        case 3: pvb_tile(MR, 3, NV, a, pb, alpha, o, last); continue;
        case 4: pvb_tile(MR, 4, NV, a, pb, alpha, o, last); continue;
        case 5: pvb_tile(MR, 5, NV, a, pb, alpha, o, last); continue;
        case 6: pvb_tile(MR, 6, NV, a, pb, alpha, o, last); continue;
        case 7: pvb_tile(MR, 7, NV, a, pb, alpha, o, last); continue;
        case 8: pvb_tile(MR, 8, NV, a, pb, alpha, o, last); continue;
        case 9: pvb_tile(MR, 9, NV, a, pb, alpha, o, last); continue;
        case 10: pvb_tile(MR, 10, NV, a, pb, alpha, o, last); continue;
        case 11: pvb_tile(MR, 11, NV, a, pb, alpha, o, last); continue;
        case 12: pvb_tile(MR, 12, NV, a, pb, alpha, o, last); continue;
        default: __builtin_unreachable();
        }
    }
}

/* The pv_bf16 register tiles, rows x vectors of O, each with its budget of the 32
 * registers (accumulators + the V-pair vectors of a key pair + 1 P-pair broadcast) and
 * its loads per key pair (vectors + broadcasts) against its vdpbf16ps. */
/* 12 x 1 = 12 + 1 + 1: a lone one-vector chunk (Dv <= 16); 13 loads per 12. */
TILE void pvb_12x1v(const pvb_args *a) { pvb_row_tiles(12, 1, a); }
/* 12 x 2 = 24 + 2 + 1; 14 loads per 24. */
TILE void pvb_12x2v(const pvb_args *a) { pvb_row_tiles(12, 2, a); }
/* 8 x 3 = 24 + 3 + 1; 11 loads per 24. */
TILE void pvb_8x3v(const pvb_args *a) { pvb_row_tiles(8, 3, a); }
/* 6 x 4 = 24 + 4 + 1; 10 loads per 24. */
TILE void pvb_6x4v(const pvb_args *a) { pvb_row_tiles(6, 4, a); }

/* The tile for a chunk of nv = 1..4 vectors (the chunking below never makes another). */
static void pvb_chunk(int nv, const pvb_args *a) {
    switch (nv) {
    case 1: pvb_12x1v(a); return;
    case 2: pvb_12x2v(a); return;
    case 3: pvb_8x3v(a); return;
    case 4: pvb_6x4v(a); return;
    default: __builtin_unreachable();
    }
}

/* The contract's pv_bf16. P is rounded to bf16 pairs once per call, PB_ROWS rows by
 * PB_KEYS keys at a time into a stack buffer (12 KiB: one Br x Bc block in one piece),
 * which every chunk's tiles then broadcast from. Dv is cut into chunks of at most 4
 * vectors, as even as possible, as the fp32 pv does (kernels/x86/tiles.h, x86_pv: many
 * rows, a V block reused by every row tile stays in L1). A block of more than PB_KEYS
 * keys is summed a piece at a time through O (each row's order stays the keys' order;
 * alpha applies before the first piece). */
static void avx512bf16_pv_bf16(int m, int n, int dv, const float *p, int ldp,
                               const uint16_t *vp, const float *alpha, float *o, int ldo) {
    enum { PB_ROWS = 96, PB_KEYS = 64, CMAX = 4 };
    _Alignas(64) uint16_t pb[PB_ROWS * PB_KEYS];
    const int dvs = round_up_int(dv, VL), nvec = dvs / VL;
    const int nchunk = (nvec + CMAX - 1) / CMAX;
    for (int r0 = 0; r0 < m; r0 += PB_ROWS) {
        const int rows = min_int(PB_ROWS, m - r0);
        for (int j0 = 0; j0 < n; j0 += PB_KEYS) {
            const int kc = min_int(PB_KEYS, n - j0);
            p_rows_bf16(rows, kc, round_up_int(kc, 32), p + (size_t)r0 * (size_t)ldp + j0, ldp,
                        pb, PB_KEYS);
            int c0 = 0;
            for (int ch = 0; ch < nchunk; ch++) {
                const int nv = nvec / nchunk + (ch < nvec % nchunk);
                const pvb_args a = {
                    .m = rows, .npair = (kc + 1) / 2, .pb = pb, .ldpb = PB_KEYS,
                    .vp = vp + (size_t)j0 * (size_t)dvs + 2 * (size_t)(VL * c0),
                    .vstride = 2 * (size_t)dvs,
                    .alpha = j0 == 0 && alpha ? alpha + r0 : NULL,
                    .o = o + (size_t)r0 * (size_t)ldo + VL * c0, .ldo = ldo,
                    .lastw = min_int(VL * nv, dv - VL * c0) - VL * (nv - 1)};
                pvb_chunk(nv, &a);
                c0 += nv;
            }
        }
    }
}

/* ---- decode: qk_rows_bf16, pv_rows_bf16 ------------------------------------------ */

/* Elements [d0, d0 + 32) of a row of nd elements in all, stored as dt, as 16 bf16 pairs,
 * zero past nd: bf16 loaded as stored, f32 and f16 rounded in registers as pack_q_bf16
 * rounds them (bf16.h, row_bf16x32), a quantized row's codes decoded and multiplied by
 * their scales (sa for elements d0 .. d0 + 15, sb for the next 16: kvload.h, load_kv,
 * the fp32 values `dequant` gives) and then rounded so. The row is caller memory, read
 * only up to its last element. */
ALWAYS_INLINE __m512i row_pairs(const char *row, int d0, int nd, sdpa_dtype dt, vf sa, vf sb) {
    if (!dt_quant(dt)) {
        if (dt == SDPA_BF16 && d0 + 32 <= nd)
            return _mm512_loadu_si512((const uint16_t *)(const void *)row + d0);
        return row_bf16x32(row, d0, min_int(32, nd - d0), dt);
    }
    const int lo = min_int(16, nd - d0), hi = nd - d0 > 16 ? min_int(16, nd - d0 - 16) : 0;
    const vf a = load_kv(row, d0, dt, v_tail(lo), lo, sa, 0);
    const vf b = hi > 0 ? load_kv(row, d0 + 16, dt, v_tail(hi), hi, sb, 0) : v_zero();
    return (__m512i)_mm512_cvtne2ps_pbh(b, a); /* the second operand: the low 16 */
}

/* The scales of a quantized row (whose first scale is at sp, binary16 where f16, a new
 * one every `group` elements) for its elements [d0, d0 + 16) and [d0 + 16, d0 + 32), in
 * every lane; one that keeps a scale for the whole row (g1) reads it once, and rows of
 * other types read none. */
typedef struct {
    int quant, g1, group, f16;
} qscale_form;
ALWAYS_INLINE void row_scales(const qscale_form *f, const char *sp, int d0, vf one, vf *sa,
                              vf *sb) {
    if (!f->quant) {
        *sa = *sb = v_zero();
    } else if (f->g1) {
        *sa = *sb = one;
    } else {
        *sa = scale_at(sp, d0 / f->group, f->f16);
        *sb = scale_at(sp, (d0 + 16) / f->group, f->f16);
    }
}
ALWAYS_INLINE vf row_scale_one(const qscale_form *f, const char *sp) {
    return f->quant && f->g1 ? scale_at(sp, 0, f->f16) : v_zero();
}
ALWAYS_INLINE qscale_form qscale_form_of(sdpa_dtype dt, const sdpa_qscales *sc, int dim) {
    const int quant = dt_quant(dt) && sc != NULL;
    return (qscale_form){quant, quant && sc->group >= dim, quant ? sc->group : dim,
                         quant && sc->dt == SDPA_F16};
}

/* Rows [from, to) of a stream, below row lim, at base, ldb bytes apart, rowb bytes
 * each, asked for (kernels/simd.h, prefetch_row). */
ALWAYS_INLINE void prefetch_rows(const char *base, size_t ldb, size_t rowb, int from, int to,
                                 int lim) {
    for (int j = from; j < to && j < lim; j++)
        prefetch_row(base + (size_t)j * ldb, rowb);
}

/* R rows x NK keys (1 or 2) of qk_rows_bf16's products, over the dims in 32-element
 * steps: 2 R accumulators, 2 K vectors, 1 Q vector; the partial sums go to t[r VL + 0 or
 * 1] for the tree. Qb is zero from dk to round_up(dk, 32) and the K vectors past dk are
 * loaded as zero, so the last step adds exact zeros. sp0, sp1: the keys' scales where
 * quantized (qscale_form). */
ALWAYS_INLINE void qkrb_keys(const int R, const int NK, sdpa_dtype dt, int dk, const uint16_t *q,
                             int ldq, const char *k0, const char *k1, const qscale_form *f,
                             const char *sp0, const char *sp1, vf *t) {
    vf c0[QKRB_ROWS_MAX], c1[QKRB_ROWS_MAX];
    UNROLL_FULL
    for (int r = 0; r < R; r++)
        c0[r] = c1[r] = v_zero();
    const vf one0 = row_scale_one(f, sp0), one1 = NK > 1 ? row_scale_one(f, sp1) : one0;
    for (int d0 = 0; d0 < dk; d0 += 32) {
        vf sa, sb;
        row_scales(f, sp0, d0, one0, &sa, &sb);
        const __m512bh x0 = (__m512bh)row_pairs(k0, d0, dk, dt, sa, sb);
        __m512bh x1 = x0;
        if (NK > 1) {
            row_scales(f, sp1, d0, one1, &sa, &sb);
            x1 = (__m512bh)row_pairs(k1, d0, dk, dt, sa, sb);
        }
        UNROLL_FULL
        for (int r = 0; r < R; r++) {
            /* pinned: folded into both vdpbf16ps the Q load would be issued twice */
            const vf qv = v_pin((vf)_mm512_loadu_si512(q + (size_t)r * (size_t)ldq + d0));
            c0[r] = _mm512_dpbf16_ps(c0[r], x0, (__m512bh)qv);
            if (NK > 1)
                c1[r] = _mm512_dpbf16_ps(c1[r], x1, (__m512bh)qv);
        }
    }
    UNROLL_FULL
    for (int r = 0; r < R; r++) {
        t[r * VL] = c0[r];
        if (NK > 1)
            t[r * VL + 1] = c1[r];
    }
}

/* S[0..R)[0..n) of qk_rows_bf16, as kernels/x86/tiles.h's qkr_rows does it in fp32: VL
 * keys at a time, a pair of adjacent K rows per pass over the dims, each key's partial
 * sums reduced by the tree of reduce.h (a score is one vdpbf16ps chain over the dims,
 * then the fixed tree, whatever R: a row's bits do not depend on the other rows). K's
 * rows (ldkb bytes apart) are prefetched SDPA_PREFETCH_AHEAD bytes ahead within the call
 * and into the npf rows after it, or with pf (a paged cache's next run) row j of pf
 * while on row j. */
ALWAYS_INLINE void qkrb_rows(const int R, sdpa_dtype dt, int n, int dk, float scale,
                             const uint16_t *q, int ldq, const char *k, size_t ldkb,
                             const sdpa_qscales *sc, float *s, int lds, int npf,
                             const char *pf) {
    const size_t rowb = dt_bytes(dt, (size_t)dk);
    const int ahead = (int)(SDPA_PREFETCH_AHEAD / rowb) + 1;
    const int pfend = n + min_int(npf, ahead);
    const qscale_form f = qscale_form_of(dt, sc, dk);
    const size_t sldb = f.quant ? (size_t)sc->ld * (f.f16 ? 2 : 4) : 0;
    const char *sp = f.quant ? (const char *)sc->p : NULL;
    const vf vs = v_set1(scale);
    vf t[QKRB_ROWS_MAX * VL];
    for (int j0 = 0; j0 < n; j0 += VL) {
        const int nk = min_int(VL, n - j0);
        const char *ks = k + (size_t)j0 * ldkb;
        int jj = 0;
        for (; jj + 2 <= nk; jj += 2) {
            if (pf)
                prefetch_rows(pf, ldkb, rowb, j0 + jj, j0 + jj + 2, npf);
            else
                prefetch_rows(k, ldkb, rowb, j0 + jj + ahead, j0 + jj + ahead + 2, pfend);
            const char *s0 = sp ? sp + (size_t)(j0 + jj) * sldb : NULL;
            qkrb_keys(R, 2, dt, dk, q, ldq, ks + (size_t)jj * ldkb, ks + (size_t)(jj + 1) * ldkb,
                      &f, s0, s0 ? s0 + sldb : NULL, t + jj);
        }
        if (jj < nk) {
            if (pf)
                prefetch_rows(pf, ldkb, rowb, j0 + jj, j0 + jj + 1, npf);
            const char *s0 = sp ? sp + (size_t)(j0 + jj) * sldb : NULL;
            qkrb_keys(R, 1, dt, dk, q, ldq, ks + (size_t)jj * ldkb, NULL, &f, s0, NULL, t + jj);
        }
        for (jj += jj < nk; jj < VL; jj++)
            UNROLL_FULL
            for (int r = 0; r < R; r++)
                t[r * VL + jj] = v_zero();
        UNROLL_FULL
        for (int r = 0; r < R; r++)
            v_store_first(s + (size_t)r * (size_t)lds + j0, nk, reduce_tree(t + VL * r, 0) * vs);
    }
}

/* qkrb_rows with the storage type as a constant (the types qk_rows_bf16 reads); the types
 * other than bf16 only in the tiles of 1, 2, 4 and 8 rows (qkrb_pass: each instance
 * inlines a conversion or a decode, and every row count of every type made the file's
 * compile time six times as long). */
#define QKRB_DT(DT) qkrb_rows(R, DT, n, dk, scale, q, ldq, (const char *)k, ldkb, sc, s, lds, npf, pf)
ALWAYS_INLINE int qkrb_few(const int R) { return R == 1 || R == 2 || R == 4 || R == 8; }
ALWAYS_INLINE void qkrb_rows_dt(const int R, int n, int dk, float scale, const uint16_t *q,
                                int ldq, const void *k, size_t ldkb, sdpa_dtype dt,
                                const sdpa_qscales *sc, float *s, int lds, int npf,
                                const char *pf) {
    if (!qkrb_few(R) || dt == SDPA_BF16) { /* (qkrb_pass gives no other type here) */
        QKRB_DT(SDPA_BF16);
        return;
    }
    switch (dt) {
    case SDPA_F32: QKRB_DT(SDPA_F32); return;
    case SDPA_F16: QKRB_DT(SDPA_F16); return;
    case SDPA_I8: QKRB_DT(SDPA_I8); return;
    case SDPA_I4: QKRB_DT(SDPA_I4); return;
    case SDPA_FP8_E4M3: QKRB_DT(SDPA_FP8_E4M3); return;
    default: /* SDPA_FP8_E5M2 */ QKRB_DT(SDPA_FP8_E5M2); return;
    }
}
#undef QKRB_DT

#define QKRB_ARGS                                                                        \
    int n, int dk, float scale, const uint16_t *q, int ldq, const void *k, size_t ldkb,  \
        sdpa_dtype dt, const sdpa_qscales *sc, float *s, int lds, int npf, const char *pf
#define QKRB_CALL n, dk, scale, q, ldq, k, ldkb, dt, sc, s, lds, npf, pf
/* The qk_rows_bf16 register tiles, one per row count (tiles.h's qkr_Rrows convention):
 * qkrb_Rrows holds 2 R accumulators + 2 K vectors + 1 Q vector; per 32 dims of a key
 * pair, 2 K loads (f32: 4 loads and 2 vcvtne2ps2bf16; f16: 4 loads, 4 vcvtph2ps and 2
 * vcvtne2ps2bf16; quantized: 4 decodes of 16 codes, kvq.h, 4 scale multiplications and
 * 2 vcvtne2ps2bf16) and R Q loads feed 2 R vdpbf16ps. qkrb_8rows: 19 of 32 registers
 * (a quantized key's scale: 2 more), a GQA group of 8 heads in one pass over K. */
TILE void qkrb_1row(QKRB_ARGS) { qkrb_rows_dt(1, QKRB_CALL); }
TILE void qkrb_2rows(QKRB_ARGS) { qkrb_rows_dt(2, QKRB_CALL); }
TILE void qkrb_3rows(QKRB_ARGS) { qkrb_rows_dt(3, QKRB_CALL); }
TILE void qkrb_4rows(QKRB_ARGS) { qkrb_rows_dt(4, QKRB_CALL); }
TILE void qkrb_5rows(QKRB_ARGS) { qkrb_rows_dt(5, QKRB_CALL); }
TILE void qkrb_6rows(QKRB_ARGS) { qkrb_rows_dt(6, QKRB_CALL); }
TILE void qkrb_7rows(QKRB_ARGS) { qkrb_rows_dt(7, QKRB_CALL); }
TILE void qkrb_8rows(QKRB_ARGS) { qkrb_rows_dt(8, QKRB_CALL); }

/* The rows of one pass of qk_rows_bf16 out of m left: at most 8; for K stored other than
 * as bf16 8, 4, 2 or 1 (qkrb_few: m = 6 as 4 + 2). */
static int qkrb_pass(int m, sdpa_dtype dt) {
    if (dt == SDPA_BF16 || m >= 8)
        return min_int(QKRB_ROWS_MAX, m);
    return m >= 4 ? 4 : m >= 2 ? 2 : 1;
}

/* The contract's qk_rows_bf16, in passes of up to 8 rows (each reads K once, qkrb_pass),
 * so the default cannot be reached. */
static void avx512bf16_qk_rows_bf16(int m, int n, int dk, float scale, const uint16_t *q0,
                                    int ldq, const void *k, int64_t ldkb, sdpa_dtype dt,
                                    const sdpa_qscales *sc, float *s0, int lds, int npf,
                                    const void *pfv) {
    const char *pf = (const char *)pfv;
    for (int r0 = 0, rows; r0 < m; r0 += rows) {
        const uint16_t *q = q0 + (size_t)r0 * (size_t)ldq;
        float *s = s0 + (size_t)r0 * (size_t)lds;
        rows = qkrb_pass(m - r0, dt);
        switch (rows) {
        case 1: qkrb_1row(QKRB_CALL); continue;
        case 2: qkrb_2rows(QKRB_CALL); continue;
        case 3: qkrb_3rows(QKRB_CALL); continue;
        case 4: qkrb_4rows(QKRB_CALL); continue;
        case 5: qkrb_5rows(QKRB_CALL); continue;
        case 6: qkrb_6rows(QKRB_CALL); continue;
        case 7: qkrb_7rows(QKRB_CALL); continue;
        case 8: qkrb_8rows(QKRB_CALL); continue;
        default: __builtin_unreachable();
        }
    }
}
#undef QKRB_ARGS
#undef QKRB_CALL

/* pv_rows_bf16 keeps O in the layout vpunpck{l,h}wd gives a key pair of V rows: for each
 * 32 columns c0.. of V, accumulator "lo" holds columns c0 + {0-3, 8-11, 16-19, 24-27}
 * and "hi" c0 + {4-7, 12-15, 20-23, 28-31}, each lane the pair (V[j][c], V[j + 1][c]).
 * O's two vectors of those columns are permuted into it as loaded and back as stored. */
ALWAYS_INLINE vf o_lo(vf a, vf b) {
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18,
                                                       19, 24, 25, 26, 27), b);
}
ALWAYS_INLINE vf o_hi(vf a, vf b) {
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                                       23, 28, 29, 30, 31), b);
}
ALWAYS_INLINE vf o_first(vf lo, vf hi) { /* columns c0 + 0..15 */
    return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6,
                                                        7, 20, 21, 22, 23), hi);
}
ALWAYS_INLINE vf o_second(vf lo, vf hi) { /* columns c0 + 16..31 */
    return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13,
                                                        14, 15, 28, 29, 30, 31), hi);
}

/* One chunk of pv_rows_bf16: NS slices of 32 columns from column c0, for MR rows. */
typedef struct {
    int n;               /* keys */
    const uint16_t *pb;  /* P as bf16 pairs, rows ldpb elements apart, zero past n */
    int ldpb;
    const char *v;       /* V's key 0, column c0; rows ldvb bytes apart, stored as dt */
    size_t ldvb;
    sdpa_dtype dt;
    int c0;              /* the chunk's first column */
    int nc;              /* columns of V from c0 to dv (> 0) */
    const char *sp;      /* quantized: key 0's scales (of column 0), rows sldb bytes apart */
    size_t sldb;
    qscale_form f;
    const float *alpha;  /* per row, or NULL */
    float *o;            /* O's column c0 of row 0, rows ldo apart */
    int ldo;
    const char *vrow;    /* V's key 0, column 0: the rows prefetched ahead */
    int pfend;           /* ... below this key */
    const char *pf;      /* or, a paged cache's next run: row j of it while on key j ... */
    int pfn;             /* ... below this row (from this piece's first key) */
    size_t rowb;         /* whole rows of this many bytes */
} pvrb_args;

/* O[0..MR)[c0 .. c0 + 32 NS) = alpha O + bf16(P) V over the chunk's keys, a pair
 * (j, j + 1) at a time (the missing V row of an odd last key read as zero, its P pair's
 * second half being zero), O's tile in registers for the whole loop. Per key pair: 2 NS
 * V loads (f32: 4 NS loads and 2 NS vcvtne2ps2bf16, f16 also 4 NS vcvtph2ps; quantized:
 * 4 NS decodes and scale multiplications, 2 NS vcvtne2ps2bf16) and 2 NS vpunpck, MR
 * P-pair broadcasts, 2 MR NS vdpbf16ps. Columns past nc are loaded as zero and never
 * stored. pf: the V row pf keys ahead is prefetched (0: none), or a->pf's rows in step. */
ALWAYS_INLINE void pvrb_tile(const int MRMAX, const int MR, const int NS, sdpa_dtype dt,
                             const pvrb_args *a, const uint16_t *pb, const float *alpha,
                             float *o, int pf) {
    if (MR > MRMAX || (MRMAX == 4 && MR == 3)) /* arms a tile never takes (pvrb_pass) */
        return;
    /* the 4-row tile takes chunks of any width up to its 2 slices (pvrb_row_tiles), its
     * second slice skipped where the chunk ends before it; the 3-row tiles are chosen to
     * fit their chunk */
#define PVRB_LIVE(c) (MRMAX < 4 || (c) < a->nc)
    vf acc[PVRB_ACC_MAX];
    UNROLL_FULL
    for (int k = 0; k < MR * NS; k++) {
        const int c = 32 * (k % NS);
        if (!PVRB_LIVE(c)) {
            acc[2 * k] = acc[2 * k + 1] = v_zero();
            continue;
        }
        const float *oc = o + (size_t)(k / NS) * (size_t)a->ldo + c;
        const vf x0 = v_load_part(oc, v_tail(min_int(16, a->nc - c)));
        const vf x1 = v_load_part(oc + 16, v_tail(a->nc - c > 16 ? min_int(16, a->nc - c - 16) : 0));
        vf lo = o_lo(x0, x1), hi = o_hi(x0, x1);
        if (alpha) {
            lo = lo * v_set1(alpha[k / NS]);
            hi = hi * v_set1(alpha[k / NS]);
        }
        acc[2 * k] = lo;
        acc[2 * k + 1] = hi;
    }
    const int n = a->n;
    /* the scales' form, with "not quantized" a constant where dt is not */
    qscale_form f = a->f;
    f.quant = dt_quant(dt) && f.quant;
    for (int j = 0; j < n; j += 2) {
        const char *v0 = a->v + (size_t)j * a->ldvb;
        if (pf > 0 && a->pf)
            prefetch_rows(a->pf, a->ldvb, a->rowb, j, j + 2, a->pfn);
        else if (pf > 0)
            prefetch_rows(a->vrow, a->ldvb, a->rowb, j + pf, j + pf + 2, a->pfend);
        /* the pair's scales where quantized; a missing second row has none */
        const char *s0 = f.quant ? a->sp + (size_t)j * a->sldb : NULL;
        const char *s1 = f.quant && j + 1 < n ? s0 + a->sldb : NULL;
        const vf one0 = row_scale_one(&f, s0), one1 = s1 ? row_scale_one(&f, s1) : one0;
        UNROLL_FULL
        for (int sl = 0; sl < NS; sl++) {
            if (!PVRB_LIVE(32 * sl))
                continue;
            vf sa, sb;
            row_scales(&f, s0, a->c0 + 32 * sl, one0, &sa, &sb);
            const __m512i x0 = row_pairs(v0, 32 * sl, a->nc, dt, sa, sb);
            __m512i x1 = _mm512_setzero_si512();
            if (j + 1 < n) {
                row_scales(&f, s1, a->c0 + 32 * sl, one1, &sa, &sb);
                x1 = row_pairs(v0 + a->ldvb, 32 * sl, a->nc, dt, sa, sb);
            }
            const __m512bh lo = (__m512bh)_mm512_unpacklo_epi16(x0, x1);
            const __m512bh hi = (__m512bh)_mm512_unpackhi_epi16(x0, x1);
            UNROLL_FULL
            for (int r = 0; r < MR; r++) {
                const __m512bh pp = bcast_pair(pb + (size_t)r * (size_t)a->ldpb + j);
                acc[2 * (r * NS + sl)] = _mm512_dpbf16_ps(acc[2 * (r * NS + sl)], lo, pp);
                acc[2 * (r * NS + sl) + 1] = _mm512_dpbf16_ps(acc[2 * (r * NS + sl) + 1], hi, pp);
            }
        }
    }
    UNROLL_FULL
    for (int k = 0; k < MR * NS; k++) {
        const int c = 32 * (k % NS);
        if (!PVRB_LIVE(c))
            continue;
        float *oc = o + (size_t)(k / NS) * (size_t)a->ldo + c;
        v_store_first(oc, min_int(16, a->nc - c), o_first(acc[2 * k], acc[2 * k + 1]));
        if (a->nc - c > 16)
            v_store_first(oc + 16, min_int(16, a->nc - c - 16), o_second(acc[2 * k], acc[2 * k + 1]));
    }
#undef PVRB_LIVE
}

/* The rows of one tile out of m left: MR, the last tile the rows left, except that the
 * 4-row tiles (which decode: pvrb_row_tiles) run 4, 2 or 1 rows, so that no instance of 3
 * rows is compiled for them. */
ALWAYS_INLINE int pvrb_pass(const int MR, int m) {
    if (MR < 4)
        return min_int(MR, m);
    return m >= 4 ? 4 : m >= 2 ? 2 : 1;
}

/* All m rows of a chunk in tiles of MR rows (pvrb_pass: 1..MR, so the default cannot be
 * reached), V's storage type a constant; each tile prefetches whole
 * rows ahead, as avx512's pv tiles each prefetch their columns (first tile only:
 * decode-long-bf16 4% slower on 2 threads, docs/PERFORMANCE.md "bf16 decode"). */
ALWAYS_INLINE void pvrb_row_tiles_dt(const int MR, const int NS, sdpa_dtype dt, int m,
                                     const pvrb_args *a, int pf) {
    for (int r0 = 0; r0 < m; r0 += pvrb_pass(MR, m - r0)) {
        const uint16_t *pb = a->pb + (size_t)r0 * (size_t)a->ldpb;
        const float *alpha = a->alpha ? a->alpha + r0 : NULL;
        float *o = a->o + (size_t)r0 * (size_t)a->ldo;
        switch (pvrb_pass(MR, m - r0)) {
        case 1: pvrb_tile(MR, 1, NS, dt, a, pb, alpha, o, pf); continue;
        case 2: pvrb_tile(MR, 2, NS, dt, a, pb, alpha, o, pf); continue;
        case 3: pvrb_tile(MR, 3, NS, dt, a, pb, alpha, o, pf); continue;
        case 4: pvrb_tile(MR, 4, NS, dt, a, pb, alpha, o, pf); continue;
        default: __builtin_unreachable();
        }
    }
}
/* The tiles of 3 rows take bf16 V, the one of 4 rows every other type (pv_rows_bf16), so
 * that each type is compiled into one family only (every type in every tile made the
 * file's compile time six times as long). */
ALWAYS_INLINE void pvrb_row_tiles(const int MR, const int NS, int m, const pvrb_args *a, int pf) {
    if (MR == 3) {
        pvrb_row_tiles_dt(MR, NS, SDPA_BF16, m, a, pf);
        return;
    }
    switch (a->dt) {
    case SDPA_F32: pvrb_row_tiles_dt(MR, NS, SDPA_F32, m, a, pf); return;
    case SDPA_I8: pvrb_row_tiles_dt(MR, NS, SDPA_I8, m, a, pf); return;
    case SDPA_I4: pvrb_row_tiles_dt(MR, NS, SDPA_I4, m, a, pf); return;
    case SDPA_FP8_E4M3: pvrb_row_tiles_dt(MR, NS, SDPA_FP8_E4M3, m, a, pf); return;
    case SDPA_FP8_E5M2: pvrb_row_tiles_dt(MR, NS, SDPA_FP8_E5M2, m, a, pf); return;
    default: /* SDPA_F16 */ pvrb_row_tiles_dt(MR, NS, SDPA_F16, m, a, pf); return;
    }
}

/* The pv_rows_bf16 register tiles: 3 rows x NS slices of 32 columns, 2 accumulators a
 * slice (lo, hi: the vectors of 16 columns). pvrb_3x8v: 24 accumulators + 2 V rows'
 * slice + 1 P-pair broadcast = 27 of 32 (the unpacked pair overwrites the loads; f32 and
 * f16 rows pass through 2 more for their halves before rounding); per key pair 8 loads,
 * 8 vpunpck, 3 broadcasts, 24 vdpbf16ps, for 64 multiply-adds each. */
TILE void pvrb_3x2v(int m, const pvrb_args *a, int pf) { pvrb_row_tiles(3, 1, m, a, pf); }
TILE void pvrb_3x4v(int m, const pvrb_args *a, int pf) { pvrb_row_tiles(3, 2, m, a, pf); }
TILE void pvrb_3x6v(int m, const pvrb_args *a, int pf) { pvrb_row_tiles(3, 3, m, a, pf); }
TILE void pvrb_3x8v(int m, const pvrb_args *a, int pf) { pvrb_row_tiles(3, 4, m, a, pf); }
/* pvrb_4x4v: 16 accumulators + 2 V rows' slice + 1 P-pair broadcast + the conversion's
 * or decode's registers (a quantized row's codes and scales), for V stored other than as
 * bf16, in chunks of up to 64 columns: a GQA group of 4 converts each V row once (3-row
 * tiles convert it twice), and the 24 accumulators of pvrb_3x8v beside a quantized
 * decode's registers spill (int8 decode-long in the mode 53 -> 18 ms;
 * docs/PERFORMANCE.md, "bf16 decode over other caches"). */
TILE void pvrb_4x4v(int m, const pvrb_args *a, int pf) { pvrb_row_tiles(4, 2, m, a, pf); }

/* The contract's pv_rows_bf16: P rounded to bf16 pairs once per call, PB_ROWS rows by
 * PB_KEYS keys at a time (p_rows_bf16 of bf16.h, the same rounding as pv_bf16), then
 * Dv in chunks of up to 128 columns (V stored other than as bf16: 64), each by pvrb tiles over the
 * piece's keys; a call of more than PB_KEYS keys is summed a piece at a time through O
 * (alpha before the first).
 * V rows are read in place, whole rows prefetched SDPA_PREFETCH_AHEAD bytes ahead (or
 * pf's rows in step) by the tiles of the first chunk. */
static void avx512bf16_pv_rows_bf16(int m, int n, int dv, const float *p, int ldp,
                                    const void *v, int64_t ldvb, sdpa_dtype dt,
                                    const sdpa_qscales *sc, const float *alpha, float *o,
                                    int ldo, int npf, const void *pf) {
    enum { PB_ROWS = 16, PB_KEYS = 64 };
    _Alignas(64) uint16_t pb[PB_ROWS * PB_KEYS];
    const size_t rowb = dt_bytes(dt, (size_t)dv);
    const int ahead = (int)(SDPA_PREFETCH_AHEAD / rowb) + 1;
    const qscale_form f = qscale_form_of(dt, sc, dv);
    const size_t sldb = f.quant ? (size_t)sc->ld * (f.f16 ? 2 : 4) : 0;
    /* V stored other than as bf16 in pvrb_4x4v's chunks of 64 columns (against 3-row tiles
     * over 128: f16 decode-long in the mode 5% faster, f32 3-7% slower) */
    const int narrow = dt != SDPA_BF16, cw = narrow ? 64 : 128;
    for (int r0 = 0; r0 < m; r0 += PB_ROWS) {
        const int rows = min_int(PB_ROWS, m - r0);
        for (int j0 = 0; j0 < n; j0 += PB_KEYS) {
            const int kc = min_int(PB_KEYS, n - j0);
            p_rows_bf16(rows, kc, round_up_int(kc, 32), p + (size_t)r0 * (size_t)ldp + j0, ldp,
                        pb, PB_KEYS);
            const char *vj = (const char *)v + (size_t)j0 * (size_t)ldvb;
            for (int c0 = 0; c0 < dv; c0 += cw) {
                const pvrb_args a = {
                    .n = kc, .pb = pb, .ldpb = PB_KEYS, .v = vj + dt_bytes(dt, (size_t)c0),
                    .ldvb = (size_t)ldvb, .dt = dt, .c0 = c0, .nc = dv - c0,
                    .sp = f.quant ? (const char *)sc->p + (size_t)j0 * sldb : NULL,
                    .sldb = sldb, .f = f, .alpha = j0 == 0 && alpha ? alpha + r0 : NULL,
                    .o = o + (size_t)r0 * (size_t)ldo + c0, .ldo = ldo, .vrow = vj,
                    .pfend = n - j0 + min_int(npf, ahead),
                    .pf = pf ? (const char *)pf + (size_t)j0 * (size_t)ldvb : NULL,
                    .pfn = npf - j0, .rowb = rowb};
                const int on = c0 == 0 ? ahead : 0;
                if (narrow) {
                    pvrb_4x4v(rows, &a, on);
                    continue;
                }
                switch (min_int(4, (dv - c0 + 31) / 32)) {
                case 1: pvrb_3x2v(rows, &a, on); continue;
                case 2: pvrb_3x4v(rows, &a, on); continue;
                case 3: pvrb_3x6v(rows, &a, on); continue;
                default: pvrb_3x8v(rows, &a, on); continue;
                }
            }
        }
    }
}

/* Only the bf16 entries; everything else, Br and Bc included, is the avx512 row's. */
const sdpa_kernels sdpa_kernels_avx512bf16 = {
    .isa = SDPA_ISA_AVX512BF16, .name = "avx512bf16",
    .kpb_align = KPB_KEYS, .vpb_align = VPB_KEYS,
    .pack_q_bf16 = x86_pack_q_bf16, .pack_k_bf16 = x86_pack_k_bf16, .qk_bf16 = qkb_12x2v,
    .pack_v_bf16 = x86_pack_v_bf16, .pv_bf16 = avx512bf16_pv_bf16,
    .qk_rows_bf16 = avx512bf16_qk_rows_bf16, .pv_rows_bf16 = avx512bf16_pv_rows_bf16,
};
