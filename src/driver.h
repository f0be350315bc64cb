/*
 * driver.h - what the parts of the fused driver share: the plan of a call (plan.c), one
 * work item's rows, a worker's scratch, and the functions each part provides to the
 * others (the tile loop in tile.c, masks and score modifiers in mask.c, finalisation and
 * merging in finalize.c, the entry points and the OpenMP team in sdpa.c).
 *
 * Internal to src/; the algorithm is written out in plan.c (the plan and its units) and
 * tile.c (the FlashAttention-2 loop of one unit).
 */
#ifndef SDPA_DRIVER_H
#define SDPA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline size_t round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* What a plan computes: attention (outputs o and lse), or the attention weights of the
 * forward pass (sdpa_attention_weights: the same tile loop, writing exp(s - lse)). */
enum { PLAN_FORWARD = 0, PLAN_WEIGHTS = 1 };

/* Work counters of one unit (sdpa_stats): key blocks computed, computed with element
 * masking, and in all (counted once per item, by its first chunk). */
typedef struct counters {
    int64_t computed, masked, total;
} counters;

/* The plan of one call: the validated problem, the kernel table, how rows are grouped
 * into items and items into units, the scratch a worker needs, and the split-KV
 * partials. It depends on the problem's shape only, never on the thread count. */
struct sdpa_plan {
    const sdpa_kernels *kt;
    sdpa_problem p;
    int mode;             /* PLAN_FORWARD or PLAN_WEIGHTS */
    float *weights;       /* PLAN_WEIGHTS: the output */
    int br, bc;
    int grouped;          /* rows are (query row, head of the group) pairs */
    int hgroup;           /* grouped decode whose items hold every KV head of an entry
                             (plan.c, heads_together): row r is query head r, K/V head
                             r / group, and each key block runs head after head */
    int64_t rows_per_bh;  /* rows of one (b, hk) when grouped, of one (b, h) when not,
                             of one b under hgroup */
    int64_t items_per_bh; /* ceil(rows_per_bh / irows) */
    int irows;            /* rows of an item, the last of a (b, h) the rest: Br, or under
                             grouped ceil(rows_per_bh / ceil(rows_per_bh / Br)) (plan.c) */
    int64_t nbh;          /* B * Hkv (grouped), B (hgroup) or B * Hq */
    int64_t items;
    int mrows;            /* most rows an item has: min(irows, rows_per_bh) */
    int64_t chunk;        /* split-KV chunk in keys; 0 = no split */
    int64_t nchunks;      /* chunks per item when split, else 1 */
    int64_t units;        /* items * nchunks */
    int chunk_major;      /* hand an entry's units out chunk by chunk, all its items (KV
                             heads) at once (schedule.h): paged split-KV decode */
    int merge_parts;      /* finishing units an item's merge is cut into, each its share
                             of the rows: bands of MERGE_ROWS, or Hkv under hgroup (a KV
                             head's rows each) */
    int64_t finish_units; /* merges (items x merge_parts, when split) + orphan rows (1,
                             under packed varlen with rows no sequence owns) */
    int ldq, lds, ldo;
    int k_in_place;       /* QK^T by qk_rows on K in place, not pack_k + qk */
    int kq_fused, vq_fused; /* quantized K (V) of decode runs read by qk_rows_q (pv_q),
                               or in the bf16 mode by the decode pair, not dequantized
                               into scratch (kvcache.c, kv_fused) */
    int k_at, v_at;       /* paged f32/f16/bf16 K of decode (V of every unmasked block)
                             read a block per call by qk_rows_at (pv_at) through the
                             row addresses kv_rows_at lists, not page by page */
    int at_ahead[2];      /* rows of K (V) past a block whose addresses kv_rows_at lists:
                             the kernels' distance SDPA_PREFETCH_AT_AHEAD in rows, at
                             most KV_AT_AHEAD_MAX */
    int bf16;             /* SDPA_COMPUTE_BF16: Q, K, V and P enter the products as bf16 */
    int bf16_tiles;       /* ... through the table's bf16 tiles (pack_k_bf16 + qk_bf16,
                             pack_v_bf16 + pv_bf16), not the fp32 ones on rounded operands */
    int bf16_rows;        /* ... or, for plans of few rows (k_in_place), through the
                             table's decode pair (qk_rows_bf16, pv_rows_bf16), which
                             round f32 / f16 / bf16 rows in registers: K and V in place,
                             page run by page run (tile.c, v_runs), or a block gathered or
                             dequantized to fp32 (kvcache.c) */
    int ldqb;             /* bf16 tiles: Qb's row stride in elements, round_up(Dk, 32) */
    int64_t kpc_slots;    /* the K blocks of a (b, hk) (every block of the longest
                             sequence) a worker keeps packed for its next items of the
                             same (b, hk), and under the bf16 tiles the V blocks too
                             (tile.c, kpc_slot); 0: none kept (plan.c, KPC_BYTES) */
    size_t kpc_bytes[2];  /* ... a slot's bytes: a block of K (0) or V (1) packed, 0 for
                             a V kept by none */
    size_t scratch_bytes; /* per worker */
    float *part;          /* split-KV partials: units x partial_floats, or NULL */
    counters *counts;     /* per unit, or NULL: not counted */
};
typedef struct sdpa_plan plan;

/* The row stride, in elements, of a block of K or V rows rounded to bf16 into scratch
 * (kb, vb): round_up(dim, 32) where the table rounds each row with its pack_q_bf16 (which
 * writes whole 32-element vectors, zero past dim), else dim (tile.c, round_rows_bf16). */
static inline int64_t bf16_rows_ld(const plan *pl, int64_t dim) {
    return pl->kt->pack_q_bf16 ? (int64_t)round_up((size_t)dim, 32) : dim;
}

/* One item's rows: the (b, hk) it belongs to, and per row (in the worker's scratch) its
 * head, its row within the sequence and its key range; rows at and beyond Tq_b are
 * padding. */
typedef struct rows {
    int64_t b, hk;
    sdpa_seq seq;
    int m;            /* rows of the item (real or padding) */
    int mvalid;       /* real rows: a prefix, since the row index i never decreases with r */
    int64_t ulo, uhi; /* union of the real rows' key ranges; ulo >= uhi when empty */
    int64_t ilo, ihi; /* intersection (the keys every real row sees structurally) */
} rows;

/* A worker's scratch, carved from its buffer: every array on a 64-byte line, every
 * leading dimension a multiple of 16 floats (kernels/ukernel.h). */
typedef struct scratch {
    float *q, *kp, *s, *o;
    uint16_t *qb, *kpb, *vpb; /* bf16 tiles: Q rows, the packed K and V blocks */
    uint16_t *kb, *vb;        /* bf16 through the fp32 tiles (and P V's exact masked
                                 paths): a block of K or V rows rounded to bf16, rows
                                 bf16_rows_ld apart */
    float *kg, *vg;           /* paged or quantized K / V: a block of rows gathered as
                                 stored, or dequantized to fp32 (kvcache.c) */
    float *qsc;               /* one quantized row's scales, fp32 */
    const void **kat, **vat;  /* k_at / v_at: a block's row addresses and the stream's
                                 next KV_AT_AHEAD_MAX (kv_rows_at) */
    float *m, *l, *alpha, *tmp;
    float *wts;            /* nchunks floats: the merge's coefficients */
    float *lses;           /* nchunks floats: one row's partial lse values */
    const void **parts;    /* nchunks pointers: one row's partial O rows */
    int64_t *h, *i, *lo, *hi;
    unsigned char *hidden; /* Br x Bc: key hidden from the row, in a masked block */
    int64_t *q_item;       /* the item whose Q rows q (or qb) holds, -1 none: a worker
                              that runs several chunks of one item gathers its Q once */
    char *kpc[2];          /* kpc_slots packed blocks of K (pack_k or pack_k_bf16) and V
                              (pack_v_bf16) of the (b, hk) *kpc_bh (-1 none), ... */
    int64_t *kpc_bh;
    unsigned char *kpc_st[2]; /* ... slot i holding block i where kpc_st[.][i] is not
                                 0: KPC_PACKED, or for a V block in which pack_v_bf16
                                 found an inf or NaN, KPC_NONFINITE */
} scratch;

enum { KPC_PACKED = 1, KPC_NONFINITE = 2 };

/* ---- plan.c ---- */

/* The plan of problem p on table kt (mode PLAN_WEIGHTS: never split, writes weights),
 * without allocating. */
void plan_init(plan *pl, const sdpa_kernels *kt, const sdpa_problem *p, int mode,
               float *weights);
/* Allocate the per-unit counters and the split-KV partials (SDPA_ERR_OUT_OF_MEMORY with
 * nothing held, or SDPA_OK); plan_release frees them. A plan without counters (weights)
 * runs too, counting nothing. */
sdpa_status plan_alloc(plan *pl);
void plan_release(plan *pl);
/* Carve a worker's buffer (pl->scratch_bytes, 64-byte aligned) into w. */
void plan_scratch(const plan *pl, void *buf, scratch *w);
/* The rows of item t, written into w's row arrays. */
void item_rows(const plan *pl, const scratch *w, int64_t t, rows *it);
/* Floats of one split-KV partial: the lse of every row, then the normalised O rows. */
size_t partial_floats(const plan *pl);
/* Run phase-1 unit u / finishing unit f with worker scratch w (any order within a
 * phase, any thread; every unit of phase 1 before any finishing unit). next: the unit
 * the same worker runs right after u, or -1 when not known; when it is the next chunk
 * of u's item, u's last blocks stream K and V on into that chunk's first rows, as
 * blocks within a unit do, instead of that chunk starting cold (prefetches only: the
 * results are the same bits whatever next says). */
void plan_run_unit(const plan *pl, int64_t u, int64_t next, const scratch *w);
void plan_finish_unit(const plan *pl, int64_t f, const scratch *w);
/* The counters of a plan whose units have all run, with the threads that ran them and
 * the bytes of their scratch. */
void plan_stats(const plan *pl, int threads, size_t worker_bytes, sdpa_stats *stats);

/* ---- tile.c ---- */

/* Gather the item's Q rows into fp32 scratch (real rows only). */
void gather_q(const plan *pl, const rows *it, const scratch *w);
/* Keys [ja, jb) of item it: in PLAN_FORWARD mode leaves m, l, O of its real rows in w;
 * in PLAN_WEIGHTS mode writes the rows' weights of those keys. Keys [jb, jnext) (jnext
 * >= jb, within the item's keys) are read next by the same worker: the kernels may
 * prefetch into them. */
void run_keys(const plan *pl, const rows *it, const scratch *w, int64_t ja, int64_t jb,
              int64_t jnext, counters *c);

/* ---- mask.c ---- */

/* A block of V rows as P V reads them: caller memory (the problem's row stride and
 * dtype), or a copy rounded to bf16 in scratch. */
typedef struct vrows {
    const char *v;
    int64_t ld;     /* elements between rows */
    sdpa_dtype dt;
} vrows;
/* 1 if the n x dv block of V rows (ldv elements apart, stored as dt) is all finite. */
int v_block_finite(const char *v, int64_t ldv, sdpa_dtype dt, int n, int dv);

/* What prepare_block found in a block: keys outside some row's range (so P V must skip
 * them per row), keys an explicit mask hides inside the ranges. */
enum { MASKED_RANGE = 1, MASKED_EXPLICIT = 2 };

/* 1 if an explicit mask hides every key of [j0, j0 + n) from every real row. */
int block_fully_hidden(const plan *pl, const rows *it, const scratch *w, int64_t j0, int n);
/* Row r's structurally visible keys within the block [j0, j0 + n), as [*a, *e). Inline:
 * a masked block asks it of every row three or four times (band_of, prepare_block,
 * the diagonal's qk and pv), which as calls into mask.c was a measurable share of small
 * causal calls (docs/PERFORMANCE.md, "Small calls' fixed costs"). */
static inline void row_cut(const rows *it, const scratch *w, int r, int64_t j0, int n, int *a,
                           int *e) {
    *a = 0;
    *e = 0;
    if (r >= it->mvalid)
        return;
    *a = (int)min64(max64(w->lo[r] - j0, 0), n);
    *e = (int)min64(max64(w->hi[r] - j0, 0), n);
    if (*e < *a)
        *e = *a;
}
/* Apply the score modifiers and masks to rows [ra, rb) of one block of scores and fill
 * w->hidden for them (under an explicit mask or outside PLAN_FORWARD, its only readers).
 * Returns the MASKED_* bits of what it set to -inf (0: nothing). */
int prepare_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb, int64_t j0,
                  int n);
/* Dropout on rows [ra, rb) of one block of probabilities. */
void dropout_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb, int64_t j0,
                   int n);
/* O rows [ra, rb) += P V for one block of n keys at v, exact for the masking
 * prepare_block reported (masked): a hidden key's V never enters a result. The npf rows
 * after the block's continue V's stream (kernels/ukernel.h, pv); returns 1 if they went
 * to a whole-block pv call (which may prefetch them), 0 if not. */
int pv_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb, int64_t j0,
             int n, const vrows *v, int masked, int npf);

/* ---- kvcache.c ---- */

/* 1 if K (which 0) or V (1) is read in place, block by block (not paged, not quantized). */
int kv_in_place(const plan *pl, int which);
/* Keys [j0, j0 + n) of K or V of item it (n >= 1, within the sequence) as the tiles read
 * them: in place, or gathered or dequantized into w->kg / w->vg (see kvcache.c). */
/* Keys per run of a quantized cache (kv_run): 16 rows of fp32 at Dk = 128 are 8 KiB, which
 * stay in L1 between the dequantization and the kernel that reads them. */
#define KV_RUN_QUANT 16
/* The run of keys from j (< end) one kernel call takes (paged or quantized K/V): up to
 * end, the end of j's page, and KV_RUN_QUANT keys if quantized and dequantized into
 * scratch (not kv_fused); *row is key j's row as stored. Returns its length (>= 1). */
int64_t kv_run(const plan *pl, const rows *it, int which, int64_t j, int64_t end,
               const char **row);
/* That run's rows (n keys from j, row from kv_run) as the tiles read them: in place, or
 * dequantized into w->kg / w->vg. */
vrows kv_run_rows(const plan *pl, const rows *it, const scratch *w, int which, int64_t j,
                  int64_t n, const char *row);
/* 1 if the plan reads K (which 0) or V (1) through the table's fused quantized kernels
 * (qk_rows_q, pv_q): a quantized cache, a plan of few rows (k_in_place), fp32 compute,
 * and scale groups those kernels take (the row, or multiples of SDPA_QGROUP_VEC). */
int kv_fused(const plan *pl, int which);
/* A run of a quantized cache as qk_rows_q / pv_q read it, in caller memory: rows ldb
 * bytes apart, and their scales. */
typedef struct qrows {
    const char *v;
    int64_t ldb;
    sdpa_qscales sc;
} qrows;
qrows kv_run_qrows(const plan *pl, const rows *it, int which, int64_t j, int64_t n,
                   const char *row);
/* Prefetch the rows of the run from j (< end). */
void kv_prefetch_run(const plan *pl, const rows *it, int which, int64_t j, int64_t end);
/* Paged decode's stream of page runs while it reads the page of key j (keys up to end
 * are the unit's): the page as many pages ahead as the kernels' prefetch distance
 * (SDPA_PREFETCH_AHEAD) spans, or, cold (nothing prefetched yet), every page up to it. */
void kv_prefetch_pages(const plan *pl, const rows *it, int which, int64_t j, int64_t end,
                       int cold);
/* The same stream prefetched in step by the kernels instead (kernels/ukernel.h, pf): 1 if
 * a page of K (which 0) or V (1) is at most the prefetch distance long, so that distance
 * is a whole number of pages; then kv_page_ahead gives, for the run at key j, the run
 * that many pages on (its first row, and its length in *n), or NULL at or past end. */
int kv_pages_in_step(const plan *pl, int which);
const char *kv_page_ahead(const plan *pl, const rows *it, int which, int64_t j, int64_t end,
                          int *n);
vrows kv_block(const plan *pl, const rows *it, const scratch *w, int which, int64_t j0, int n);
/* Most rows past a block whose addresses kv_rows_at lists for qk_rows_at / pv_at to
 * prefetch: the kernels' distance for them (SDPA_PREFETCH_AT_AHEAD) is at most 17 rows of
 * fp32 at D = 128 and 33 of f16 (8 KiB); shorter rows are prefetched fewer rows ahead. */
#define KV_AT_AHEAD_MAX 64
/* The addresses of rows [j0, j0 + n) of K (which 0) or V (1) of the item's head, and of
 * the next of the unit's rows up to end (at most KV_AT_AHEAD_MAX and the kernels'
 * prefetch distance), into at; returns how many follow the n (the kernels' npf). */
int kv_rows_at(const plan *pl, const rows *it, int which, int64_t j0, int n, int64_t end,
               const void **at);

/* Into L2, the scales of rows [from, from + n) of the view r's rows begin (r's run and
 * the rows after it at the same strides: a contiguous cache). The driver asks for the
 * next block's as a block starts: the kernels prefetch the rows of codes a distance
 * ahead but not their scales, a stream of its own (1 KiB a 256-key block of int8 with a
 * scale per token) too short for the hardware prefetchers to run ahead of, which left
 * int8 decode waiting on the scale loads (docs/PERFORMANCE.md, "Quantized decode's
 * scales ahead"). Nothing for scales shared by every row. */
void kv_prefetch_scales(const qrows *r, int64_t from, int64_t n);
/* The most bytes of scales kv_prefetch_scales asks for at once: a burst of prefetches
 * waits on the miss buffers (docs/PERFORMANCE.md, "Paged decode in step"), and 2 KiB
 * covers the measured case (1 KiB: int8, one fp32 scale per token, 256 keys) and int4's
 * f16 scales per 32 channels at Dk = 128. */
#define KV_SCALES_AHEAD 2048

/* ---- finalize.c ---- */

/* Finalise the real rows of an item whose single partial is in w, and its padding rows. */
void finalize_item(const plan *pl, const rows *it, const scratch *w);
/* One part's normalised state from the online softmax's (m, l, O): *lse = m + log l and
 * out = O / l, or *lse = -inf and out = O as it is when l = 0; out may be o (in place)
 * or a row that does not overlap it. */
void sdpa_partial_of(float m, float l, float *o, float *out, int64_t D, float *lse);
/* Output row dst (D elements of ot) and *lse_out (if non-NULL) merged from n parts:
 * parts[i] (dts[i], or fp32 when dts is NULL) with lse lses[i], and a value-less part of
 * logit sink (-inf: none); coef holds n floats of scratch. A part of lse -inf adds
 * nothing (a caller's part that saw no key: sdpa_merge) or, with zero_weight (the fused
 * path's parts, fp32), 0 x its values when the row has weight elsewhere. See finalize.c. */
void sdpa_merge_row(int n, const void *const *parts, const sdpa_dtype *dts, const float *lses,
                    float sink, int zero_weight, int64_t D, void *dst, sdpa_dtype ot,
                    float *lse_out, float *coef);
/* The rows [*r0, *r1) of an item (real and padding) that part `part` of its merge_parts
 * merges (plan.c: an even share each, in row order). */
void merge_band(const plan *pl, const rows *it, int part, int *r0, int *r1);
/* Merge item t's split-KV partials into its output rows: the rows of part `part` of the
 * item's merge_parts (merge_band), each a finishing unit. */
void merge_item(const plan *pl, const scratch *w, int64_t t, int part);
/* Under packed varlen, the view rows no sequence owns: zeros and lse -inf. */
void write_orphan_rows(const plan *pl);

#endif /* SDPA_DRIVER_H */
