/*
 * avx512bf16.c - the AVX512_BF16 kernel table: the bf16 compute mode's tiles
 * (SDPA_COMPUTE_BF16; pack_q_bf16, pack_k_bf16, qk_bf16, pack_v_bf16, pv_bf16 of
 * kernels/ukernel.h) on vdpbf16ps, which multiplies pairs of bf16 exactly and adds both products to an fp32
 * lane: 32 multiply-adds per 512-bit instruction, twice the fp32 FMA's 16.
 *
 * It is not a complete table and not an fp32 path: it sets only its ISA, its name, the
 * bf16 alignments and the five bf16 entries; the registry (src/dispatch.c) starts it
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

/* A register tile: its own function, never inlined into its caller, so its accumulators
 * are allocated on their own and a profile shows it by name (kernels/x86/tiles.h's
 * convention). */
#define TILE static __attribute__((noinline))

/* The most rows of any tile below: the size of their accumulator arrays. */
enum { QKB_ROWS_MAX = 12, PVB_ACC_MAX = 24 };

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

/* Only the bf16 entries; everything else, Br and Bc included, is the avx512 row's. */
const sdpa_kernels sdpa_kernels_avx512bf16 = {
    .isa = SDPA_ISA_AVX512BF16, .name = "avx512bf16",
    .kpb_align = KPB_KEYS, .vpb_align = VPB_KEYS,
    .pack_q_bf16 = x86_pack_q_bf16, .pack_k_bf16 = x86_pack_k_bf16, .qk_bf16 = qkb_12x2v,
    .pack_v_bf16 = x86_pack_v_bf16, .pv_bf16 = avx512bf16_pv_bf16,
};
