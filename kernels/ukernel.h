/*
 * ukernel.h - the kernel contract: the tile functions every ISA provides, and the one
 * const table per ISA that bundles them.
 *
 * This is what kernels/ and src/ agree on, nothing more. Tile functions are pure and
 * single-threaded: they read their inputs, write only their outputs, keep no state and
 * never allocate. They know nothing of batches, heads, masks, threads or the dtypes of Q
 * and O; the driver (src/tile.c) slices the problem into tiles and calls them.
 *
 * One block step of the online softmax (the FlashAttention-2 loop written out at the top
 * of src/tile.c), for a tile of m query rows (m <= br) against n keys (n <= bc):
 *
 *     pack_k   Kp = layout_of_this_isa(fp32(K[j0 .. j0+n, 0 .. dk]))
 *     qk       S  = scale * Q Kp^T                      m x n, fp32
 *  or qk_rows  S  = scale * Q fp32(K)^T                 the same, K rows read in place
 *     (driver) S[r][j] = -inf where key j is masked for row r
 *     softmax  mx = max(m_run, rowmax S); mu = (mx == -inf ? 0 : mx)
 *              S  = exp(S - mu); alpha = exp(m_run - mu)
 *              l_run = alpha * l_run + rowsum S; m_run = mx
 *     pv       O  = alpha * O + S fp32(V)               m x dv, fp32, V rows read in place
 *
 * Two ways to QK^T, because their costs scale differently with m. pack_k + qk transposes
 * K once per block (a quarter of a shuffle per element of K: 32 per key at dk = 128)
 * and then streams whole vectors of keys against broadcast Q: right for many rows
 * (prefill), where the pack is amortised. qk_rows reads K rows as they are and reduces
 * each row-by-key product across its vector lanes with a transposing tree (about two
 * shuffles and one add per score, whatever dk): right for the few rows of decode, where
 * the pack cost more than the QK^T it fed. The driver picks by the most rows an item of
 * the call has (src/plan.c, QK_ROWS_MAX). Where it takes qk_rows (decode), its blocks may
 * be longer than bc, up to SDPA_DECODE_BC_MAX keys: qk_rows (and _q, _at, _bf16),
 * softmax, pv (and _q, _at, _rows_bf16) take any n up to that; pack_k, qk and the bf16
 * tiles only n <= bc.
 *
 * Strides (ld*) are in elements of the pointed-to type. Pointers into caller memory (k,
 * v) may be aligned only to their element size and must not be read past the last
 * element of the last row (the guard-page tests enforce this); pointers into driver
 * scratch (q, kp, s, o, m_run, l_run, alpha) are 64-byte aligned and their rows are
 * ld apart, with ld a multiple of 16 floats, with two exceptions where a block crosses
 * the causal diagonal and the driver calls a kernel on part of the tile: m_run, l_run
 * and alpha may then start at any row, and pv's p at any column of a row (its rows are
 * still ldp apart). No table may use alignment-requiring loads or stores on those three
 * or on p. Scratch padding (columns between the logical width and ld) holds unspecified
 * values on entry; a kernel may use it only where the function's text says so.
 *
 * K and V are stored as dt (SDPA_F32, SDPA_F16 or SDPA_BF16) and widened to fp32 exactly
 * wherever a kernel reads them (in registers, or while packing), so 16-bit storage is
 * never copied whole and a kernel reads half the bytes of fp32.
 */
#ifndef SDPA_UKERNEL_H
#define SDPA_UKERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

/* Decode reads K and V once, from DRAM, with little arithmetic per byte to hide the
 * latency behind. Kernels that stream caller rows in decode (qk_rows, and pv for few
 * rows) prefetch the row this many bytes of row data ahead of the one they are on,
 * within their call and, where the driver says the rows go on (npf below), past its
 * end into the next call's, so the prefetches run as one stream across the blocks (in a
 * paged cache, the driver names the page about this many bytes on, pf below, which the
 * kernel prefetches in step with its own rows); the driver prefetches the first
 * this-many bytes of a block itself only where no call streamed into it (a unit's
 * first block, after a masked block). Into L1 or L2 (sdpa_prefetch_l1) and how far
 * (sdpa_prefetch_ahead) src/dispatch.c decides once from CPUID, with the measurements:
 * 8 KiB into L2 where the L1D is small (a longer lookahead into L1 evicts the block
 * being read), else into L1, 8 KiB on AMD and 2 KiB on Intel. */
extern int sdpa_prefetch_l1;
extern int sdpa_prefetch_ahead;
#define SDPA_PREFETCH_AHEAD sdpa_prefetch_ahead
/* Rows read at addresses (qk_rows_at, pv_at: a paged cache's rows, whose pages no
 * hardware prefetcher follows) are prefetched into L1 or L2 as sdpa_prefetch_at_l1 says,
 * this many bytes of rows ahead: the same as a stream's except where the stream's own
 * distance leans on the hardware prefetchers (src/dispatch.c has the measurements). */
extern int sdpa_prefetch_at_l1;
extern int sdpa_prefetch_at_ahead;
#define SDPA_PREFETCH_AT_AHEAD sdpa_prefetch_at_ahead

/* The most keys of a decode block (the driver's choice within it: src/dispatch.c,
 * sdpa_decode_bc): the n the in-place kernels and softmax must take (above). */
#define SDPA_DECODE_BC_MAX 256

/* The scale groups qk_rows_q and pv_q take besides one per row: multiples of this, a
 * multiple of every table's vector length (16 floats on AVX-512, 8 on AVX2, 4 on NEON),
 * so a vector of elements never straddles two scales. */
#define SDPA_QGROUP_VEC 16

/* The scales of a run of quantized K or V rows, as qk_rows_q and pv_q read them: row j's
 * scale of elements [g group, (g + 1) group) is element j ld + g of p, stored as dt
 * (SDPA_F32, or SDPA_F16 widened exactly); ld >= 0 (0: every row has the same scales). */
typedef struct sdpa_qscales {
    const void *p;
    int64_t ld;
    int group;
    sdpa_dtype dt;
} sdpa_qscales;

typedef struct sdpa_kernels {
    sdpa_isa isa;      /* which ISA this table is */
    const char *name;  /* sdpa_isa_name(isa) */
    int br;            /* query rows per work item (Br) */
    int bc;            /* keys per block (Bc) */
    int kp_align;      /* pack_k pads the key count up to a multiple of this */
    int kp_split;      /* 0, or keys per panel of Kp: for h a multiple of it (h < n), the
                        * pack of a block's n keys from kp + h dk on is the pack of its
                        * keys [h, n), and its first h dk floats the pack of keys [0, h)
                        * (the driver runs the causal diagonal's two parts on a kept
                        * pack of the whole block: src/tile.c, qk_parts); 0: the layout
                        * depends on n. Comes with pack_k (dispatch.c) */
    int kpb_align;     /* pack_k_bf16 pads the key count up to a multiple of this */
    int vpb_align;     /* pack_v_bf16 pads the key count up to a multiple of this */

    /* Kp <- the n x dk block of K whose rows are ldk elements apart, converted from dt
     * to fp32 and laid out in this table's own format. Kp holds round_up(n, kp_align) *
     * dk floats; padding keys are packed as zeros. */
    void (*pack_k)(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt, float *kp);

    /* S[r][j] = scale * sum_d Q[r][d] * K[j][d] for r < m, j < n, from the packed Kp.
     * Q rows are ldq apart, S rows lds apart. Columns of S at and beyond n may be
     * written (up to round_up(n, kp_align)) and hold no meaning. */
    void (*qk)(int m, int n, int dk, float scale, const float *q, int ldq, const float *kp,
               float *s, int lds);

    /* S[r][j] = scale * sum_d Q[r][d] * fp32(K[j][d]) for r < m, j < n (any m, n >= 1),
     * reading the rows of K (ldk elements apart, stored as dt) in place. Only columns
     * [0, n) of S's rows are written. A row's scores are the same bits whatever m is and
     * whichever rows share the call, so the driver may run a band of an item's rows
     * (and the attention weights recompute exactly the forward pass's scores). */
    void (*qk_rows)(int m, int n, int dk, float scale, const float *q, int ldq, const void *k,
                    int64_t ldk, sdpa_dtype dt, float *s, int lds, int npf, const void *pf);

    /* The online-softmax step above on m rows of n scores, in place (S becomes P).
     * NaN scores propagate to l_run; -inf scores become exactly 0. */
    void (*softmax)(int m, int n, float *s, int lds, float *m_run, float *l_run,
                    float *alpha);

    /* O[r][:dv] = alpha[r] * O[r][:dv] + sum_{j<n} P[r][j] * fp32(V[j][:dv]) for r < m.
     * alpha == NULL means no rescale (O += P V). V rows are ldv elements apart in caller
     * memory, stored as dt; P rows ldp apart, O rows ldo apart.
     * npf (>= 0) and pf, here and in qk_rows, qk_rows_q and pv_q, say what a kernel that
     * prefetches decode's stream may prefetch; neither is ever read. pf == NULL: the rows
     * n .. n + npf - 1 at the same stride are the next rows the driver will hand a
     * kernel (decode's stream of K or V continues there): the kernel prefetches the rows
     * ahead of the one it is on, up to its prefetch distance (SDPA_PREFETCH_AHEAD),
     * within the call and into those, and the driver then leaves the next call's first
     * rows to it; 0 where the rows end with the call (a unit's last block). pf != NULL (a
     * paged cache, whose next rows lie in other pages): rows pf + j ld, j < npf, a run
     * of the same cache (the page that many bytes on, src/kvcache.c), prefetched in step
     * with the call's own, row j while on row j, and nothing else. */
    void (*pv)(int m, int n, int dv, const float *p, int ldp, const void *v, int64_t ldv,
               sdpa_dtype dt, const float *alpha, float *o, int ldo, int npf, const void *pf);

    /* y[i] = exp(x[i]) for i < n, the same exp softmax uses (y may equal x; neither
     * needs any alignment, and nothing past x[n-1]/y[n-1] is touched). exp(-inf) = 0,
     * results below FLT_MIN may flush to 0, exp(x) = +inf above ~88.72, NaN stays NaN.
     * The SIMD tables' exp and its measured max relative error are in kernels/exp.h (the
     * scalar table's is libm's expf); tests/test_ukernel.c re-measures it over
     * [-104, 89]. */
    void (*vexp)(int n, const float *x, float *y);

    /* out[0 .. dim) = fl(value(code) * scale) for one row of a quantized K or V cache
     * (dt: SDPA_I8, SDPA_FP8_E4M3, SDPA_FP8_E5M2 or SDPA_I4; include/sdpa.h), sc[g] the
     * fp32 scale of elements [g group, (g + 1) group), group dividing dim (even for
     * SDPA_I4). Bit-exact in every table: kernels/kvq.h, compiled per ISA. The row is
     * caller memory (byte-aligned, read only up to its last element); out is scratch. */
    void (*dequant)(int dim, const void *row, sdpa_dtype dt, const float *sc, int group,
                    float *out);

    /* ---- quantized K and V read in place (optional: NULL in a table without them) ------
     * qk_rows and pv on the rows of a quantized cache (dt SDPA_I8, SDPA_FP8_E4M3,
     * SDPA_FP8_E5M2 or SDPA_I4), each element decoded and scaled in registers: element d of
     * row j is fl(value(code) * scale(j, d / group)), the bits `dequant` gives, and the
     * results are bit for bit those of `dequant` into fp32 rows followed by this table's
     * qk_rows / pv on them (same per-score and per-element operation order; only a NaN's
     * payload may differ, as the compiler orders two NaN operands), so the driver may use
     * either; except that a table may factor out an int8 row's one scale s where every code
     * times s is exact (kernels/convert.h, sdpa_i8_scale_exact): the score
     * fl(fl(dot(q, codes) s) scale), P V's term fl(p s) codes, the same real values in
     * another order (the x86 tables do, kernels/x86/tiles.h "int8 scales factored"; each
     * row's bits still whatever rows and keys share the call). Rows are ldb BYTES apart
     * (caller memory: byte-aligned, read only up to the last element of the last row); the
     * scales (caller memory, aligned to their element size) as sdpa_qscales says, their
     * group the row length (one scale per row) or a multiple of SDPA_QGROUP_VEC that
     * divides it. A driver that takes them decodes a quantized cache once per element, in
     * the kernel that multiplies it, instead of writing fp32 rows to scratch and reading
     * them back. */
    void (*qk_rows_q)(int m, int n, int dk, float scale, const float *q, int ldq,
                      const void *k, int64_t ldkb, sdpa_dtype dt, const sdpa_qscales *sc,
                      float *s, int lds, int npf, const void *pf);
    void (*pv_q)(int m, int n, int dv, const float *p, int ldp, const void *v, int64_t ldvb,
                 sdpa_dtype dt, const sdpa_qscales *sc, const float *alpha, float *o, int ldo,
                 int npf, const void *pf);

    /* ---- rows at addresses (optional: NULL in a table without them) -----------------
     * qk_rows and pv on n rows that lie anywhere: row j of K (V) at k[j] (v[j]), stored as
     * dt (SDPA_F32, SDPA_F16 or SDPA_BF16), caller memory. The results are bit for bit
     * those of this table's qk_rows (pv) on the same rows at one stride, so a driver may
     * hand a paged cache's block, whose pages lie anywhere in the pool, to one call
     * instead of one call per page. Entries n .. n + npf - 1 of the array are the rows
     * the driver hands the next call (decode's stream goes on there): their addresses
     * are read, the rows only prefetched (up to the kernel's prefetch distance), as pf
     * == NULL's rows past n above. */
    void (*qk_rows_at)(int m, int n, int dk, float scale, const float *q, int ldq,
                       const void *const *k, sdpa_dtype dt, float *s, int lds, int npf);
    void (*pv_at)(int m, int n, int dv, const float *p, int ldp, const void *const *v,
                  sdpa_dtype dt, const float *alpha, float *o, int ldo, int npf);

    /* ---- bf16 compute (SDPA_COMPUTE_BF16, include/sdpa.h) ----------------------------
     * Set by the tables whose registry row computes the mode (src/dispatch.c), NULL in
     * the others. Operands enter the products as bf16 (fp32 and f16 rounded to nearest
     * even here, bf16 used as stored); each product of two bf16 values is exact in fp32
     * and the sums accumulate in fp32, in an order each table chooses. bf16 buffers (Qb,
     * Kpb, Vpb) are driver scratch, 64-byte aligned. */

    /* Qb's row <- the dk elements of one row of Q (stored as dt) rounded to bf16 as this
     * table's pack_k_bf16 rounds K, then zero up to round_up(dk, 32): a row as qk_bf16
     * reads it. Nothing past q's element dk - 1 is read; qb is 64-byte aligned. */
    void (*pack_q_bf16)(int dk, const void *q, sdpa_dtype dt, uint16_t *qb);

    /* Kpb <- the n x dk block of K (rows ldk elements apart, stored as dt) rounded to
     * bf16, in this table's own layout: round_up(n, kpb_align) * round_up(dk, 32)
     * elements, padding (keys past n, dims past dk) zero. */
    void (*pack_k_bf16)(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                        uint16_t *kp);

    /* S[r][j] = scale * sum_d Qb[r][d] * Kb[j][d] for r < m, j < n, from Kpb. Qb rows are
     * bf16, ldq elements apart (a multiple of 32), zero from dk to round_up(dk, 32).
     * Columns of S at and beyond n may be written (up to round_up(n, kpb_align)). */
    void (*qk_bf16)(int m, int n, int dk, float scale, const uint16_t *q, int ldq,
                    const uint16_t *kp, float *s, int lds);

    /* Vpb <- the n x dv block of V (rows ldv elements apart, stored as dt) rounded to
     * bf16, in this table's own layout: round_up(n, vpb_align) * round_up(dv, 32)
     * elements, padding zero. Returns 1 if every rounded element is finite, else 0 (an
     * inf or NaN, stored or from rounding a finite value past bf16's largest): the
     * driver then knows whether a masked key's P = 0 times its V row is 0 in pv_bf16,
     * without a second pass over the block. */
    int (*pack_v_bf16)(int n, int dv, const void *v, int64_t ldv, sdpa_dtype dt,
                       uint16_t *vp);

    /* O[r][:dv] = alpha[r] * O[r][:dv] + sum_{j<n} bf16(P[r][j]) * Vb[j][:dv] for r < m,
     * P (fp32, rows ldp apart) rounded to bf16 (nearest even) here, fp32 accumulation;
     * alpha == NULL means no rescale. P, alpha and O as for pv. */
    void (*pv_bf16)(int m, int n, int dv, const float *p, int ldp, const uint16_t *vp,
                    const float *alpha, float *o, int ldo);

    /* Decode's bf16 tiles (optional, both or neither, in a table with the five above):
     * the mode's qk_rows and pv on K and V rows read in place, for the items of few rows
     * that qk_rows serves in fp32. qk_rows_bf16: S[r][j] = scale * sum_d Qb[r][d]
     * bf16(K[j][d]) for r < m, j < n, Qb rows as pack_q_bf16 writes them (ldqb apart,
     * zero from dk to round_up(dk, 32)), K rows ldkb BYTES apart (caller memory, read up
     * to element dk - 1 of each), stored as dt: SDPA_F32, SDPA_F16 or SDPA_BF16 (sc
     * NULL), or a quantized type with its scales sc as qk_rows_q takes them, element d
     * of row j then the fp32 value fl(value(code) * scale) `dequant` gives; rounded to
     * bf16 as pack_q_bf16 rounds. Only columns [0, n) of S are written, and a row's
     * scores are the same bits whatever m is. pv_rows_bf16: O[r][:dv] = alpha[r]
     * O[r][:dv] + sum_j bf16(P[r][j]) bf16(V[j][:dv]), P rounded here as pv_bf16 rounds
     * it, V rows ldvb bytes apart (caller memory, stored, scaled and rounded as K), P,
     * alpha and O as pv's; the keys are summed in pairs (j, j + 1) from the call's first,
     * so a block is one call, or calls that each start an even number of keys after its
     * first. npf and pf as qk_rows'. */
    void (*qk_rows_bf16)(int m, int n, int dk, float scale, const uint16_t *qb, int ldqb,
                         const void *k, int64_t ldkb, sdpa_dtype dt, const sdpa_qscales *sc,
                         float *s, int lds, int npf, const void *pf);
    void (*pv_rows_bf16)(int m, int n, int dv, const float *p, int ldp, const void *v,
                         int64_t ldvb, sdpa_dtype dt, const sdpa_qscales *sc,
                         const float *alpha, float *o, int ldo, int npf, const void *pf);
} sdpa_kernels;

/* Number of function pointers in a table; the registry (src/dispatch.c) checks that each
 * composed table sets every one its modes need. */
#define SDPA_KERNELS_NFUNCS 18
_Static_assert(sizeof(sdpa_kernels) ==
                   offsetof(sdpa_kernels, pack_k) + SDPA_KERNELS_NFUNCS * sizeof(void (*)(void)),
               "SDPA_KERNELS_NFUNCS must count the function pointers of sdpa_kernels");

/* The tables. Only those whose ISA the build targets are defined (see the Makefile). */
extern const sdpa_kernels sdpa_kernels_scalar;
extern const sdpa_kernels sdpa_kernels_avx2;
extern const sdpa_kernels sdpa_kernels_avx512;
extern const sdpa_kernels sdpa_kernels_neon;
extern const sdpa_kernels sdpa_kernels_avx512bf16; /* the bf16 entries only (src/dispatch.c) */
extern const sdpa_kernels sdpa_kernels_amx;        /* the bf16 entries only */
extern const sdpa_kernels sdpa_kernels_neonbf16; /* bf16 entries only, over neon's */

#endif /* SDPA_UKERNEL_H */
