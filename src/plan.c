/*
 * plan.c - the plan of a fused call: how query rows group into work items, how items
 * split into units, what scratch a worker needs, and running one unit or one finishing
 * unit. It does not choose threads (sdpa.c runs the units on an OpenMP team) and does
 * not compute tiles (tile.c).
 *
 * Rows. A work item is up to Br rows of one (batch entry b, K/V head hk), or of all of
 * b's K/V heads:
 *   - plain: Br consecutive query rows i of one query head h;
 *   - grouped (GQA with Tq <= GROUP_TQ_MAX, i.e. decode, speculative decoding, small
 *     chunked prefill): the g = Hq/Hkv heads sharing hk, row r = (i = r / g, h = hk g +
 *     r % g), so each K/V block is read once for all g heads; when a (b, hk) has more
 *     than Br such rows, its items share them evenly (irows);
 *   - head groups (hgroup: grouped decode over K/V kept tokens-major, contiguous or
 *     paged; heads_together): every query head of entry b, row r = head r, whose K/V
 *     head is r / g; each key block runs head after head (tile.c, heads_step), so a
 *     token's heads are read together, and the merge of its split-KV partials is cut
 *     by KV head.
 * Row r of sequence b sees keys [lo_r, hi_r) (sdpa_row_range: length, causal, window)
 * minus those an explicit mask hides. The item's key range is the union [ulo, uhi).
 *
 * Units. Unit u = (item t, chunk c) runs the tile loop (tile.c) over the keys of chunk
 * c within [ulo, uhi). Without split-KV an item is one unit and finalises its own rows.
 * Split-KV (flash-decoding): when the items are too few to feed many cores (decode:
 * Tq = 1 against a long cache), each item's keys are cut into chunks of a fixed number
 * of keys, each chunk a unit that stores its partial (m, l, O) rows; finishing unit t
 * merges item t's partials in chunk order (finalize.c), cut into bands of rows so that
 * several threads share a large item's merge. The chunk size depends on the
 * shape only, never on the thread count, so results are the same bits for any number
 * of threads and any order of the units.
 *
 * Units are numbered (b, h)-major so consecutive units read the same K and V, and within
 * a head largest first (causal: the last query blocks see the most keys), so a dynamic
 * schedule ends on small units.
 */
#include <math.h>
#include <string.h>

#include "driver.h"

/* Grouped GQA rows when Tq is at most this (decode, speculative decoding, chunked
 * prefill with small chunks): beyond it a plain item already has enough rows to reuse
 * each packed K block. */
#define GROUP_TQ_MAX 16

/* Items of at most this many rows compute QK^T with qk_rows on K in place; larger ones
 * pack K once per block for qk (kernels/ukernel.h says why the costs cross; the
 * crossover is measured in docs/PERFORMANCE.md, "QK^T in place or packed"). */
#define QK_ROWS_MAX 16

/* A split item's merge is cut into bands of at most this many rows, each a finishing
 * unit: the merges run after the units, while the other threads wait, and one thread
 * merging mla-decode's 64-row items (8 partials of 64 rows of 512 floats, 1 MiB) is, by
 * its bytes, about a tenth of the 16-thread call (docs/PERFORMANCE.md, "Many cores,
 * measured"); a band of 16 rows still reads a few KiB of partials per chunk, enough to
 * amortise taking a unit. */
#define MERGE_ROWS 16

/* A head-group item's key blocks (plan.hgroup): run head after head, each head reads a
 * piece of every token's row, and the heads' pieces of a token come in together the
 * closer the passes run: the table's Bc halved while a block's K rows (from the first
 * head's to the end of the last's) pass HGROUP_BLOCK_BYTES, down to HGROUP_BC_MIN (one
 * qk_rows strip of 16 keys). Measured on AMD Zen 4, decode-long's shape over a [B, T,
 * Hkv, D] cache, 1 thread: fp32 (4 KiB of K a token) 64 / 32 / 16 keys 31-33 / 29-31 /
 * 27-29 ms, f16 17.6-19 / 16.4-17.4 / 18-19.3 ms (docs/PERFORMANCE.md, "Decode over a
 * tokens-major cache"); one microarchitecture: the next session on another host should
 * measure it again. */
#define HGROUP_BLOCK_BYTES (64 * 1024)
#define HGROUP_BC_MIN 16

/* Items of the bf16 mode on a table with bf16 tiles have this many times the table's Br
 * rows: the tiles do a block's products in about half the fp32 time, so packing K and V
 * once per item and block weighs twice as much; twice the rows per item halve it again
 * (prefill-causal on avx512bf16, 1 thread: 225 -> 216 ms; 4x: 214 ms; docs/PERFORMANCE.md,
 * "bf16 compute"). */
#define BF16_BR_SCALE 2

/* A worker keeps the packed blocks of the (b, hk) it runs (K by pack_k for the fp32
 * tiles; K and V by pack_k_bf16 and pack_v_bf16 for the bf16 tiles) for its next items
 * of the same (b, hk), where every key block of the longest sequence fits in this many
 * bytes: otherwise every item of a head packs each of its blocks again (a transpose on
 * the shuffle pipe, 3-4% of prefill's time; K and V 5-7% of the bf16 tiles'), and the
 * items of a head, and the query heads of a GQA group, come one after another
 * (item_rows' order). 1 MiB holds 2048 keys at Dk = 128 (prefill-causal's). Where the
 * keys are more, an item streams through more K and V between two uses of a kept block
 * than the caches hold, and keeping some of them gained nothing: long-causal (8192 keys)
 * the same with 1 or 4 MiB kept, chunked-prefill (16384) 0.94-0.96x with its first 2048
 * keys kept. Measured on AMD Zen 4, 1 thread: prefill (D 64) 2-3% faster,
 * prefill-causal and causal-d64 1-2%, prefill-bf16 and prefill-causal-bf16 on
 * avx512bf16 3-4% (docs/PERFORMANCE.md, "K packed once per head"). Per worker, so the
 * scratch stays O(threads x constant). */
#define KPC_BYTES ((size_t)1 << 20)

/* Split-KV: considered when a call has fewer items than this (enough to keep 64 threads
 * busy without splitting, when their lengths are even), in chunks of at least this many
 * keys (a multiple of every table's Bc, so chunks cut no block), into about SPLIT_UNITS
 * units in all (4 per thread at 64 threads, for a dynamic schedule to balance; more
 * only adds per-unit work: the Q gather, the partial's store and merge;
 * docs/PERFORMANCE.md "Split-KV chunks"), with at most SPLIT_PARTIAL_FLOATS floats of
 * partial results per call (the split is then coarser). */
#define SPLIT_ITEMS_MAX 64
#define SPLIT_CHUNK_MIN 512
#define SPLIT_UNITS 256
#define SPLIT_PARTIAL_FLOATS ((int64_t)1 << 23)

static size_t scratch_layout(const plan *pl, char *base, scratch *w) {
    const sdpa_problem *p = &pl->p;
    const sdpa_kernels *kt = pl->kt;
    const size_t br = (size_t)pl->br, bc = (size_t)pl->bc;
    /* rows of the S tile and the hidden flags: an item's (mrows) where K is read in place,
     * whose blocks may be longer (plan_init), else Br */
    const size_t srows = pl->k_in_place ? (size_t)pl->mrows : br;
    const size_t dk32 = round_up((size_t)p->Dk, 32), dv32 = round_up((size_t)p->Dv, 32);
    const int tiles = pl->bf16_tiles, forward = pl->mode == PLAN_FORWARD;
    const size_t kp = pl->k_in_place || tiles ? 0 : round_up(bc, (size_t)kt->kp_align) * (size_t)p->Dk;
    const size_t kpc = (size_t)pl->kpc_slots;
    /* the bf16 mode through the fp32 tiles rounds K and V blocks stored in another
     * dtype into scratch first (P V's exact masked paths do so with the bf16 tiles and
     * the decode pair too, which otherwise round in registers) */
    const size_t kb = pl->bf16 && !tiles && !pl->bf16_rows && p->kt != SDPA_BF16
                          ? bc * (size_t)bf16_rows_ld(pl, p->Dk)
                          : 0;
    const size_t vb =
        pl->bf16 && forward && p->vt != SDPA_BF16 ? bc * (size_t)bf16_rows_ld(pl, p->Dv) : 0;
    /* paged or quantized K/V: a block gathered or dequantized (fp32 is the widest) */
    const size_t kg = kv_in_place(pl, 0) ? 0 : bc * (size_t)p->Dk;
    const size_t vg = !forward || kv_in_place(pl, 1) ? 0 : bc * (size_t)p->Dv;
    const int quant = sdpa_dtype_quantized(p->kt) || (forward && sdpa_dtype_quantized(p->vt));
    size_t off = 0;
#define CARVE(field, type, count)                                                        \
    do {                                                                                 \
        if (w)                                                                           \
            w->field = (type *)(void *)(base + off);                                     \
        off += round_up((size_t)(count) * sizeof(type), 64);                             \
    } while (0)
    CARVE(q, float, tiles ? 0 : br * (size_t)pl->ldq); /* the bf16 tiles read Qb only */
    CARVE(kp, float, kp);
    CARVE(qb, uint16_t, tiles || pl->bf16_rows ? br * (size_t)pl->ldqb : 0);
    CARVE(kpb, uint16_t, tiles ? round_up(bc, (size_t)kt->kpb_align) * dk32 : 0);
    CARVE(vpb, uint16_t, tiles && forward ? round_up(bc, (size_t)kt->vpb_align) * dv32 : 0);
    CARVE(kb, uint16_t, kb);
    CARVE(vb, uint16_t, vb);
    CARVE(kg, float, kg);
    CARVE(vg, float, vg);
    CARVE(qsc, float, quant ? (size_t)max64(p->Dk, p->Dv) : 0);
    CARVE(kat, const void *, pl->k_at ? bc + KV_AT_AHEAD_MAX : 0);
    CARVE(vat, const void *, pl->v_at ? bc + KV_AT_AHEAD_MAX : 0);
    CARVE(s, float, srows * (size_t)pl->lds);
    CARVE(o, float, br * (size_t)pl->ldo);
    CARVE(m, float, br);
    CARVE(l, float, br);
    CARVE(alpha, float, br);
    CARVE(tmp, float, (size_t)pl->lds);
    CARVE(wts, float, (size_t)pl->nchunks);
    CARVE(lses, float, (size_t)pl->nchunks);
    CARVE(parts, const void *, (size_t)pl->nchunks);
    CARVE(h, int64_t, br);
    CARVE(i, int64_t, br);
    CARVE(lo, int64_t, br);
    CARVE(hi, int64_t, br);
    CARVE(hidden, unsigned char, srows * bc);
    CARVE(q_item, int64_t, 1);
    CARVE(kpc[0], char, kpc * pl->kpc_bytes[0]);
    CARVE(kpc[1], char, kpc * pl->kpc_bytes[1]);
    CARVE(kpc_bh, int64_t, 1);
    CARVE(kpc_st[0], unsigned char, kpc);
    CARVE(kpc_st[1], unsigned char, pl->kpc_bytes[1] ? kpc : 0);
#undef CARVE
    return off;
}

void plan_scratch(const plan *pl, void *buf, scratch *w) {
    scratch_layout(pl, buf, w);
    *w->q_item = -1;
    *w->kpc_bh = -1;
}

size_t partial_floats(const plan *pl) {
    return (size_t)pl->mrows + (size_t)pl->mrows * (size_t)pl->p.Dv;
}

/* Head-group items (plan.hgroup): decode (one query row per entry) of a GQA call whose K
 * and V keep each token's KV heads side by side, heads inside tokens ([B, T, Hkv, D],
 * the layout projections write and llama.cpp's cache keeps; a paged pool's pages
 * [page, Hkv, D], FlashAttention's, or pages of one token, SGLang's: head stride below
 * the token's), stored as f32, f16 or bf16, in exact fp32 compute, with every query
 * head of an entry within one item (Hq <= Br) and a group's rows within qk_rows' reach.
 * An item per KV head would read 1 / Hkv of every token's row, a short piece at a stride
 * of the whole row, which no prefetcher streams (docs/PERFORMANCE.md, "Decode over a
 * tokens-major cache"); an item of all KV heads reads each token's heads together. */
static int heads_together(const plan *pl, const sdpa_problem *p, int64_t tq_max) {
    const int64_t *ks = p->ks, *vs = p->vs;
    /* a paged pool's token: one slot of a page (stride ks[2]), or a whole page of one */
    const int t = p->pages.block_table && p->pages.page_size == 1 ? 0 : 2;
    return pl->mode == PLAN_FORWARD && pl->grouped && tq_max == 1 && !p->cu_q &&
           p->Hkv > 1 && p->Hq <= pl->br && p->group <= QK_ROWS_MAX &&
           p->compute == SDPA_COMPUTE_F32 && !sdpa_dtype_quantized(p->kt) &&
           !sdpa_dtype_quantized(p->vt) && ks[1] > 0 && ks[1] < ks[t] && vs[1] > 0 &&
           vs[1] < vs[t];
}

void plan_init(plan *pl, const sdpa_kernels *kt, const sdpa_problem *p, int mode,
               float *weights) {
    memset(pl, 0, sizeof *pl);
    pl->kt = kt;
    pl->p = *p;
    pl->mode = mode;
    pl->weights = weights;
    pl->br = kt->br * (p->compute == SDPA_COMPUTE_BF16 && kt->qk_bf16 ? BF16_BR_SCALE : 1);
    pl->bc = kt->bc;
    int64_t tq_max = p->Tq, tkv_max = p->Tkv;
    if (p->cu_q) {
        tq_max = tkv_max = 0;
        for (int64_t b = 0; b < p->B; b++) {
            tq_max = max64(tq_max, p->cu_q[b + 1] - p->cu_q[b]);
            tkv_max = max64(tkv_max, p->cu_kv[b + 1] - p->cu_kv[b]);
        }
    }
    pl->grouped = p->group > 1 && tq_max <= GROUP_TQ_MAX;
    pl->hgroup = heads_together(pl, p, tq_max);
    pl->rows_per_bh = pl->hgroup ? p->Hq : pl->grouped ? p->group * tq_max : tq_max;
    pl->items_per_bh = ceil_div(pl->rows_per_bh, pl->br);
    /* Grouped rows (a group's heads x a few query rows) shared evenly between the items
     * of a (b, hk): with few K/V heads there are few items, and Br rows and the rest
     * make units of unequal work whose larger one sets the makespan (mla-decode, 128
     * heads on one K/V head: 96 + 32 rows, 1.4x slower on 16 threads than 64 + 64;
     * docs/PERFORMANCE.md, "Many cores, measured"). Plain items keep Br rows: a (b, h)
     * has many of them and the tiles run best on whole Br-row blocks. */
    pl->irows = pl->br;
    if (pl->grouped && pl->items_per_bh > 1) {
        pl->irows = (int)ceil_div(pl->rows_per_bh, pl->items_per_bh);
        pl->items_per_bh = ceil_div(pl->rows_per_bh, pl->irows);
    }
    pl->nbh = p->B * (pl->hgroup ? 1 : pl->grouped ? p->Hkv : p->Hq);
    pl->items = pl->nbh * pl->items_per_bh;
    pl->mrows = (int)min64(pl->irows, pl->rows_per_bh);
    pl->ldq = (int)round_up((size_t)p->Dk, 16);
    pl->ldo = (int)round_up((size_t)p->Dv, 16);
    /* (a head-group item calls qk_rows once per KV head, on that head's group rows) */
    pl->k_in_place = pl->hgroup || pl->mrows <= QK_ROWS_MAX;
    /* decode's blocks (items that read K in place, one KV head each): sdpa_decode_bc keys
     * (dispatch.c, a multiple of Bc up to SDPA_DECODE_BC_MAX), fewer restarts of the K
     * and V streams, which take turns at every block */
    if (pl->k_in_place && !pl->hgroup)
        pl->bc = (int)max64(pl->bc, min64(sdpa_decode_bc, SDPA_DECODE_BC_MAX) / pl->bc * pl->bc);
    /* blocks of at most HGROUP_BLOCK_BYTES of K rows, all heads' (the product stays
     * below 2^62: a validated view's extent is below 2^56 bytes, validate.c) */
    if (pl->hgroup)
        while (pl->bc > HGROUP_BC_MIN &&
               (int64_t)pl->bc * ((p->Hkv - 1) * p->ks[1] + p->Dk) *
                       (int64_t)sdpa_dtype_size(p->kt) > HGROUP_BLOCK_BYTES)
            pl->bc /= 2;
    /* bf16 compute: the table's bf16 tiles where it has them and the items are large
     * enough to pack K; else the fp32 tiles on operands rounded to bf16 (the same
     * arithmetic: a product of two bf16 values is exact in fp32) */
    pl->bf16 = p->compute == SDPA_COMPUTE_BF16;
    pl->bf16_tiles = pl->bf16 && kt->qk_bf16 != NULL && !pl->k_in_place;
    pl->bf16_rows = pl->bf16 && kt->qk_rows_bf16 != NULL && pl->k_in_place;
    /* packed blocks kept for the next items of a (b, hk): where an item packs K (and under
     * the bf16 tiles V), and a (b, hk) has more than one item (its row tiles, or the
     * query heads of a GQA group run as items of their own) */
    const int64_t sharing = pl->items_per_bh * (pl->grouped || pl->hgroup ? 1 : p->group);
    const int64_t nblocks = ceil_div(tkv_max, pl->bc);
    const size_t kslot = pl->bf16_tiles ? round_up((size_t)pl->bc, (size_t)kt->kpb_align) *
                                              round_up((size_t)p->Dk, 32) * sizeof(uint16_t)
                                        : round_up((size_t)pl->bc, (size_t)kt->kp_align) *
                                              (size_t)p->Dk * sizeof(float);
    const size_t vslot = pl->bf16_tiles && mode == PLAN_FORWARD
                             ? round_up((size_t)pl->bc, (size_t)kt->vpb_align) *
                                   round_up((size_t)p->Dv, 32) * sizeof(uint16_t)
                             : 0;
    if (!pl->k_in_place && sharing > 1 && nblocks <= (int64_t)(KPC_BYTES / (kslot + vslot))) {
        pl->kpc_slots = nblocks;
        pl->kpc_bytes[0] = round_up(kslot, 64); /* every slot 64-byte aligned */
        pl->kpc_bytes[1] = round_up(vslot, 64);
    }
    pl->kq_fused = kv_fused(pl, 0);
    pl->vq_fused = pl->mode == PLAN_FORWARD && kv_fused(pl, 1);
    pl->k_at = p->pages.block_table && !sdpa_dtype_quantized(p->kt) && kt->qk_rows_at &&
               pl->k_in_place && !pl->bf16;
    pl->v_at = p->pages.block_table && !sdpa_dtype_quantized(p->vt) && kt->pv_at &&
               pl->mode == PLAN_FORWARD && !pl->bf16;
    for (int which = 0; which < 2; which++) /* f32/f16/bf16 rows: rowb > 0 */
        if (which ? pl->v_at : pl->k_at) {
            const int64_t rowb =
                (which ? p->Dv : p->Dk) * (sdpa_kv_bits(which ? p->vt : p->kt) / 8);
            pl->at_ahead[which] =
                (int)min64(KV_AT_AHEAD_MAX, (int64_t)SDPA_PREFETCH_AT_AHEAD / rowb + 1);
        }
    pl->ldqb = (int)round_up((size_t)p->Dk, 32);
    /* S holds a block padded to the packing's key multiple */
    size_t scols = round_up((size_t)pl->bc, (size_t)kt->kp_align);
    if (pl->bf16_tiles)
        scols = round_up((size_t)kt->bc, (size_t)kt->kpb_align);
    pl->lds = (int)round_up(scols, 16);

    /* Split-KV, from the shape alone (never the thread count): chunks of at least
     * SPLIT_CHUNK_MIN keys, about SPLIT_UNITS units, as many as fit SPLIT_PARTIAL_FLOATS
     * of partials. The weights are never split: each item writes its own columns. */
    pl->nchunks = 1;
    /* Many items of uneven length (a batch of decodes against caches of mixed lengths)
     * are split too when the longest is over 1/SPLIT_ITEMS_MAX of all their keys: on that
     * many threads it would end alone. Their chunks aim at 2 SPLIT_UNITS units' worth of
     * keys over all the items, so the longest items' chunks are each ~1/512 of the work
     * (batched-decode at 64 threads, simulated: 85% unsplit, 86% at 256 units' worth,
     * 98% at 512; docs/PERFORMANCE.md, "Many cores, simulated"). */
    double keys = 0.0; /* (in double: a sum over entries times heads may pass 2^63) */
    for (int64_t b = 0; b < p->B && pl->items >= SPLIT_ITEMS_MAX; b++)
        keys += (double)sdpa_sequence(p, b).tkv;
    keys *= (double)(pl->items / p->B); /* items per batch entry: nbh / B heads x items_per_bh */
    const int uneven = pl->items >= SPLIT_ITEMS_MAX && (double)tkv_max * SPLIT_ITEMS_MAX > keys;
    if (mode == PLAN_FORWARD && pl->items > 0 && (pl->items < SPLIT_ITEMS_MAX || uneven) &&
        tkv_max >= 2 * SPLIT_CHUNK_MIN) {
        int64_t nch = tkv_max / SPLIT_CHUNK_MIN;
        if (uneven) /* (keys 0, every sequence empty: the quotient is inf, nch stays) */
            nch = (int64_t)fmin((double)nch, ceil((double)tkv_max * 2 * SPLIT_UNITS / keys));
        else
            nch = min64(nch, ceil_div(SPLIT_UNITS, pl->items));
        const int64_t fit = SPLIT_PARTIAL_FLOATS / ((int64_t)partial_floats(pl) * pl->items);
        nch = min64(nch, fit);
        if (nch >= 2) {
            int64_t chunk = (int64_t)round_up((size_t)ceil_div(tkv_max, nch), SPLIT_CHUNK_MIN);
            chunk = (int64_t)round_up((size_t)chunk, (size_t)pl->bc);
            pl->chunk = chunk;
            pl->nchunks = ceil_div(tkv_max, chunk);
        }
    }
    pl->units = pl->items * pl->nchunks;
    /* A paged pool keeps one page's keys of every KV head side by side (the common
     * layouts, sdpa.h): a head's run of a page is a few KiB, and the hardware prefetcher
     * streaming past its end fetches the next head's. Taking a chunk of all heads at once
     * uses those lines while they are in cache instead of reading them again later
     * (decode-long-paged16, docs/PERFORMANCE.md "KV caches"). */
    pl->chunk_major = p->pages.block_table != NULL && pl->nchunks > 1;
    const int orphans = mode == PLAN_FORWARD && p->cu_q && p->cu_q[p->B] < p->Tq;
    /* a head-group item's merge is cut by KV head, so it runs on as many threads as the
     * per-head items' merges would */
    pl->merge_parts = pl->hgroup ? (int)p->Hkv : (int)ceil_div(pl->mrows, MERGE_ROWS);
    pl->finish_units = (pl->chunk ? pl->items * pl->merge_parts : 0) + orphans;
    pl->scratch_bytes = scratch_layout(pl, NULL, NULL);
}

sdpa_status plan_alloc(plan *pl) {
    pl->counts = sdpa_alloc((size_t)pl->units * sizeof(counters));
    if (pl->chunk && pl->counts)
        pl->part = sdpa_alloc((size_t)pl->units * partial_floats(pl) * sizeof(float));
    if (!pl->counts || (pl->chunk && !pl->part)) {
        plan_release(pl);
        return SDPA_ERR_OUT_OF_MEMORY;
    }
    return SDPA_OK;
}

void plan_release(plan *pl) {
    sdpa_free(pl->counts);
    sdpa_free(pl->part);
    pl->counts = NULL;
    pl->part = NULL;
}

void item_rows(const plan *pl, const scratch *w, int64_t t, rows *it) {
    const sdpa_problem *p = &pl->p;
    /* (b, h)-major, and within a head largest first under causal masking (see the top
     * of this file; the order's measurements are in docs/PERFORMANCE.md, "Unit order") */
    const int64_t bh = t / pl->items_per_bh, qi = t % pl->items_per_bh;
    const int64_t qb = p->causal ? pl->items_per_bh - 1 - qi : qi;
    const int64_t r0 = qb * pl->irows;
    it->m = (int)min64(pl->irows, pl->rows_per_bh - r0);
    int64_t hbase;
    if (pl->hgroup) { /* rows = the entry's query heads in order, head h's K/V head h / g */
        it->b = bh;
        it->hk = 0;
        hbase = 0;
    } else if (pl->grouped) {
        it->b = bh / p->Hkv;
        it->hk = bh % p->Hkv;
        hbase = it->hk * p->group;
    } else {
        it->b = bh / p->Hq;
        hbase = bh % p->Hq;
        it->hk = hbase / p->group;
    }
    it->seq = sdpa_sequence(p, it->b);
    it->mvalid = 0;
    it->ulo = INT64_MAX;
    it->uhi = INT64_MIN;
    it->ilo = INT64_MIN;
    it->ihi = INT64_MAX;
    for (int r = 0; r < it->m; r++) {
        const int64_t row = r0 + r;
        w->h[r] = pl->hgroup ? row : pl->grouped ? hbase + row % p->group : hbase;
        w->i[r] = pl->hgroup ? 0 : pl->grouped ? row / p->group : row;
        if (w->i[r] >= it->seq.tq)
            continue;
        it->mvalid = r + 1;
        sdpa_row_range(p, &it->seq, w->i[r], &w->lo[r], &w->hi[r]);
        if (w->lo[r] >= w->hi[r]) { /* sees nothing: widens no range, empties the
                                         intersection so every block masks it */
            w->lo[r] = w->hi[r] = 0;
            it->ilo = INT64_MAX;
            continue;
        }
        it->ulo = min64(it->ulo, w->lo[r]);
        it->uhi = max64(it->uhi, w->hi[r]);
        it->ilo = max64(it->ilo, w->lo[r]);
        it->ihi = min64(it->ihi, w->hi[r]);
    }
    if (it->ulo >= it->uhi)
        it->ulo = it->uhi = 0;
}

void plan_run_unit(const plan *pl, int64_t u, int64_t next, const scratch *w) {
    rows it;
    const int64_t t = u / pl->nchunks, ch = u % pl->nchunks;
    item_rows(pl, w, t, &it);
    counters local, *c = pl->counts ? &pl->counts[u] : &local;
    c->computed = c->masked = 0;
    /* blocks the item's sequence has in all, counted once per item */
    c->total = ch == 0 ? ceil_div(it.seq.tkv, pl->bc) : 0;
    int64_t ja = it.ulo, jb = it.uhi, jnext = jb;
    if (pl->chunk) {
        ja = max64(ja, ch * pl->chunk);
        jb = min64(jb, (ch + 1) * pl->chunk);
        /* units are numbered item-major (u = t nchunks + ch): u + 1 of the same item is
         * its next chunk, the continuation of this unit's K and V rows */
        jnext = next == u + 1 && ch + 1 < pl->nchunks ? min64(it.uhi, (ch + 2) * pl->chunk) : jb;
        jnext = max64(jnext, jb);
    }
    if (pl->mode == PLAN_WEIGHTS && (it.mvalid == 0 || ja >= jb))
        return;
    if (*w->q_item != t) { /* (nothing else writes q or qb) */
        gather_q(pl, &it, w);
        *w->q_item = t;
    }
    run_keys(pl, &it, w, ja, jb, jnext, c);
    if (pl->mode == PLAN_WEIGHTS)
        return;
    if (!pl->chunk) {
        finalize_item(pl, &it, w);
        return;
    }
    /* the chunk's normalised partial of each real row: its lse, its O / l */
    float *dst = pl->part + (size_t)u * partial_floats(pl);
    const size_t mr = (size_t)pl->mrows;
    for (int r = 0; r < it.mvalid; r++)
        sdpa_partial_of(w->m[r], w->l[r], w->o + (size_t)r * (size_t)pl->ldo,
                        dst + mr + (size_t)r * (size_t)pl->p.Dv, pl->p.Dv, &dst[r]);
}

void plan_finish_unit(const plan *pl, int64_t f, const scratch *w) {
    if (pl->chunk && f < pl->items * pl->merge_parts)
        merge_item(pl, w, f / pl->merge_parts, (int)(f % pl->merge_parts));
    else
        write_orphan_rows(pl);
}

/* ---- the public plan API (sdpa.h) ---------------------------------------------------- */

sdpa_status sdpa_plan_create(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                             const sdpa_tensor *v, const sdpa_tensor *o, float *lse,
                             sdpa_plan **out) {
    if (!out)
        return SDPA_ERR_NULL_POINTER;
    *out = NULL;
    sdpa_problem p;
    sdpa_status st = sdpa_validate(desc, q, k, v, o, lse, &p);
    if (st != SDPA_OK)
        return st;
    const sdpa_kernels *kt = sdpa_dispatch_table((sdpa_isa)p.isa, p.compute);
    if (!kt)
        return SDPA_ERR_UNSUPPORTED_ISA;
    plan *pl = sdpa_alloc(sizeof *pl);
    if (!pl)
        return SDPA_ERR_OUT_OF_MEMORY;
    plan_init(pl, kt, &p, PLAN_FORWARD, NULL);
    if (plan_alloc(pl) != SDPA_OK) {
        sdpa_free(pl);
        return SDPA_ERR_OUT_OF_MEMORY;
    }
    *out = pl;
    return SDPA_OK;
}

int64_t sdpa_plan_units(const sdpa_plan *pl) { return pl ? pl->units : 0; }

int64_t sdpa_plan_finish_units(const sdpa_plan *pl) { return pl ? pl->finish_units : 0; }

size_t sdpa_plan_scratch_size(const sdpa_plan *pl) { return pl ? pl->scratch_bytes : 0; }

/* The checks both run functions make before running anything. */
static sdpa_status unit_args(const plan *pl, int64_t unit, int64_t count, const void *buf) {
    if (!pl || !buf)
        return SDPA_ERR_NULL_POINTER;
    if ((uintptr_t)buf % 64 != 0)
        return SDPA_ERR_MISALIGNED;
    if (unit < 0 || unit >= count)
        return SDPA_ERR_BAD_ARGUMENT;
    return SDPA_OK;
}

sdpa_status sdpa_plan_run(const sdpa_plan *pl, int64_t unit, void *buf) {
    const sdpa_status st = unit_args(pl, unit, pl ? pl->units : 0, buf);
    if (st != SDPA_OK)
        return st;
    scratch w;
    plan_scratch(pl, buf, &w);
    plan_run_unit(pl, unit, -1, &w);
    return SDPA_OK;
}

sdpa_status sdpa_plan_finish(const sdpa_plan *pl, int64_t unit, void *buf) {
    const sdpa_status st = unit_args(pl, unit, pl ? pl->finish_units : 0, buf);
    if (st != SDPA_OK)
        return st;
    scratch w;
    plan_scratch(pl, buf, &w);
    plan_finish_unit(pl, unit, &w);
    return SDPA_OK;
}

void plan_stats(const plan *pl, int threads, size_t worker_bytes, sdpa_stats *stats) {
    counters tot = {0, 0, 0};
    for (int64_t u = 0; u < pl->units; u++) {
        tot.computed += pl->counts[u].computed;
        tot.masked += pl->counts[u].masked;
        tot.total += pl->counts[u].total;
    }
    stats->isa = pl->kt->isa;
    stats->threads = threads;
    stats->block_q = pl->br;
    stats->block_kv = pl->bc;
    stats->work_items = pl->items;
    stats->blocks_total = tot.total;
    stats->blocks_computed = tot.computed;
    stats->blocks_skipped = tot.total - tot.computed;
    stats->blocks_masked = tot.masked;
    stats->scratch_bytes =
        (int64_t)(worker_bytes + (size_t)pl->units * sizeof(counters) +
                  (pl->chunk ? (size_t)pl->units * partial_floats(pl) * sizeof(float) : 0));
}

sdpa_status sdpa_plan_stats(const sdpa_plan *pl, sdpa_stats *stats) {
    if (!pl || !stats)
        return SDPA_ERR_NULL_POINTER;
    plan_stats(pl, 0, 0, stats);
    return SDPA_OK;
}

void sdpa_plan_destroy(sdpa_plan *pl) {
    if (!pl)
        return;
    plan_release(pl);
    sdpa_free(pl);
}
