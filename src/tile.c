/*
 * tile.c - the FlashAttention-2 loop of one unit: the key blocks of one work item's
 * rows, QK^T, the masks and score modifiers (mask.c), the online softmax and P V through
 * the kernel table; or, in the weights mode, the same scores turned into the weights
 * exp(s - lse) of a finished forward pass. It is portable C (no -m flags): the floating-
 * point inner loops are the table's (kernels/), this file holds the block bookkeeping.
 *
 * The algorithm for one unit = (item, key range [ja, jb) within its union [ulo, uhi)):
 *
 *   m_r = -inf, l_r = 0, O_r = 0
 *   for key block [j0, j1) = [ja, jb) cut at multiples of Bc (at most Bc keys):
 *       skip it if an explicit mask hides all of it from every row
 *       S = scale Q K^T                                       qk_rows, or pack_k + qk
 *                                       (a block's pack kept for the next items of the
 *                                        same (b, hk): kpc_slot)
 *       S = cap tanh(S / cap)                                 softcap (if on)
 *       S -= slope_h |d(i_r) - j|                             ALiBi (if on)
 *       S += M[b, h, i, j]                                    additive mask (if any)
 *       S[r][j] = -inf where row r does not see key j        only in blocks crossing
 *                                                             a range edge or masked
 *       mx_r = max(m_r, max_j S_rj);  mu_r = (mx_r == -inf ? 0 : mx_r)
 *       P = exp(S - mu);  alpha_r = exp(m_r - mu_r)          softmax
 *       l_r = alpha_r l_r + sum_j P_rj;  m_r = mx_r
 *       P_rj = P_rj keep(b, h, i, j) / (1 - p)                dropout (if on; philox.h)
 *       O_r = alpha_r O_r + sum_j P_rj V_j                   pv (V read in place)
 *
 * The weights mode runs the same blocks and scores and writes, per row with the lse of
 * the forward pass, W_rj = exp(S_rj - lse_r) (dropout applied) for the keys it sees and
 * 0 for the others, whatever lse is.
 */
#include <math.h>
#include <string.h>

#include "../kernels/convert.h"
#include "driver.h"

/* bf16 of n floats, four at a time so the compiler emits baseline-ISA vector code
 * (basic-block SLP vectorisation, on at -O2: docs/PERFORMANCE.md, "Vectorised plain
 * loops"); a per-element loop ran scalar and took a quarter of the bf16 mode's time on
 * tables without bf16 tiles. */
static void round_f32_bf16(const float *x, int64_t n, uint16_t *out) {
    int64_t d = 0;
    for (; d + 4 <= n; d += 4) {
        out[d] = sdpa_f32_to_bf16(x[d]);
        out[d + 1] = sdpa_f32_to_bf16(x[d + 1]);
        out[d + 2] = sdpa_f32_to_bf16(x[d + 2]);
        out[d + 3] = sdpa_f32_to_bf16(x[d + 3]);
    }
    for (; d < n; d++)
        out[d] = sdpa_f32_to_bf16(x[d]);
}

/* x[0 .. n) rounded to bf16 values in place (fp32 storage), four at a time as above. */
static void round_f32_to_bf16_values(float *x, int64_t n) {
    int64_t d = 0;
    for (; d + 4 <= n; d += 4) {
        x[d] = sdpa_bf16_to_f32(sdpa_f32_to_bf16(x[d]));
        x[d + 1] = sdpa_bf16_to_f32(sdpa_f32_to_bf16(x[d + 1]));
        x[d + 2] = sdpa_bf16_to_f32(sdpa_f32_to_bf16(x[d + 2]));
        x[d + 3] = sdpa_bf16_to_f32(sdpa_f32_to_bf16(x[d + 3]));
    }
    for (; d < n; d++)
        x[d] = sdpa_bf16_to_f32(sdpa_f32_to_bf16(x[d]));
}

/* dst[0 .. n) = the f16 or bf16 row x widened (exactly), 16 elements at a time in loops
 * of fixed length, which the compilers vectorise at -O2 (sdpa_f16_to_f32_lanes and the
 * bf16 shift have no branches): element by element, a decode's gathers of its few Q rows
 * were a few percent of a 16-bit decode on one thread. */
static void widen_row(const uint16_t *x, sdpa_dtype dt, int64_t n, float *dst) {
    int64_t d = 0;
    if (dt == SDPA_F16) {
        for (; d + 16 <= n; d += 16)
            for (int i = 0; i < 16; i++)
                dst[d + i] = sdpa_f16_to_f32_lanes(x[d + i]);
        for (; d < n; d++)
            dst[d] = sdpa_f16_to_f32_lanes(x[d]);
        return;
    }
    for (; d + 16 <= n; d += 16)
        for (int i = 0; i < 16; i++)
            dst[d + i] = sdpa_bf16_to_f32(x[d + i]);
    for (; d < n; d++)
        dst[d] = sdpa_bf16_to_f32(x[d]);
}

void gather_q(const plan *pl, const rows *it, const scratch *w) {
    const sdpa_problem *p = &pl->p;
    const size_t es = sdpa_dtype_size(p->qt);
    for (int r = 0; r < it->mvalid; r++) {
        const char *src = (const char *)p->q +
                          (size_t)(it->b * p->qs[0] + w->h[r] * p->qs[1] +
                                   (it->seq.q0 + w->i[r]) * p->qs[2]) * es;
        if (pl->bf16_tiles || pl->bf16_rows) { /* only Qb is read: bf16, zero beyond Dk */
            pl->kt->pack_q_bf16((int)p->Dk, src, p->qt, w->qb + (size_t)r * (size_t)pl->ldqb);
            continue;
        }
        float *dst = w->q + (size_t)r * (size_t)pl->ldq;
        if (p->qt == SDPA_F32)
            memcpy(dst, src, (size_t)p->Dk * sizeof(float));
        else
            widen_row((const uint16_t *)(const void *)src, p->qt, p->Dk, dst);
        if (pl->bf16) /* the fp32 tiles read Q rounded to bf16 values */
            round_f32_to_bf16_values(dst, p->Dk);
    }
}

/* bf16 of n f16 values (widened exactly first), four at a time as round_f32_bf16. */
static void round_f16_bf16(const uint16_t *x, int64_t n, uint16_t *out) {
    int64_t d = 0;
    for (; d + 4 <= n; d += 4) {
        out[d] = sdpa_f32_to_bf16(sdpa_f16_to_f32(x[d]));
        out[d + 1] = sdpa_f32_to_bf16(sdpa_f16_to_f32(x[d + 1]));
        out[d + 2] = sdpa_f32_to_bf16(sdpa_f16_to_f32(x[d + 2]));
        out[d + 3] = sdpa_f32_to_bf16(sdpa_f16_to_f32(x[d + 3]));
    }
    for (; d < n; d++)
        out[d] = sdpa_f32_to_bf16(sdpa_f16_to_f32(x[d]));
}

/* The n x dim block of rows at src (ld elements apart, stored as dt: f32 or f16, the
 * dequantized or stored rows of the bf16 mode's operands) rounded to bf16 into dst, rows
 * bf16_rows_ld(pl, dim) apart; returns that stride. A table with pack_q_bf16 rounds each
 * row with it (vector conversions, and K and V rounded as its Q and packed blocks are);
 * the others through the portable loops. Rows at and past src up to row pfrows - 1 (the
 * block's, and past it those the driver's stream goes on to; 0 for scratch rows) are
 * asked for SDPA_PREFETCH_AHEAD bytes of rows ahead of the row being rounded, as the
 * decode kernels ask for rows they read in place. The mode's operands for the fp32
 * tiles (a table without the decode pair, which rounds in registers) and for P V's
 * exact masked paths (docs/PERFORMANCE.md, "bf16 decode over other caches"). */
static int64_t round_rows_bf16(const plan *pl, int n, int64_t dim, const char *src, int64_t ld,
                               sdpa_dtype dt, uint16_t *dst, int64_t pfrows) {
    const size_t es = sdpa_dtype_size(dt), rowb = (size_t)dim * es;
    const int64_t ldd = bf16_rows_ld(pl, dim);
    const int64_t ahead = (int64_t)(SDPA_PREFETCH_AHEAD / rowb) + 1;
    for (int j = 0; j < n; j++) {
        const char *row = src + (size_t)(j * ld) * es;
        if (j + ahead < pfrows)
            for (size_t off = 0; off < rowb; off += 64) { /* 64-byte lines, as prefetch_head */
                const char *line = row + (size_t)(ahead * ld) * es + off;
                if (sdpa_prefetch_l1)
                    __builtin_prefetch(line, 0, 3);
                else
                    __builtin_prefetch(line, 0, 2);
            }
        uint16_t *out = dst + (size_t)j * (size_t)ldd;
        if (pl->kt->pack_q_bf16)
            pl->kt->pack_q_bf16((int)dim, row, dt, out);
        else if (dt == SDPA_F32)
            round_f32_bf16((const float *)(const void *)row, dim, out);
        else /* SDPA_F16 */
            round_f16_bf16((const uint16_t *)(const void *)row, dim, out);
    }
    return ldd;
}

/* The bytes between rows of a block or run of K or V (ld elements apart, stored as dt)
 * that the kernels step over: nrows of them in all, the call's and those it prefetches at
 * the same stride. Two rows or more lie in one view (or page), which bounds the stride
 * (validate.c); a single row's stride is unbounded (INT64_MAX passes) and never used, and
 * multiplied it would overflow, so it is 0. */
static int64_t rows_ldb(int64_t ld, sdpa_dtype dt, int64_t nrows) {
    return nrows > 1 ? ld * (int64_t)sdpa_dtype_size(dt) : 0;
}

/* Ask for the first SDPA_PREFETCH_AHEAD bytes of rows (at most n of them, `bytes` long,
 * ld bytes apart) to be in cache soon: the start of a block of K or V that no kernel
 * call streamed into (run_keys' kahead, vahead). Only the head of the block: a whole
 * next block in one burst fills the miss buffers ahead of the current block's loads
 * (docs/PERFORMANCE.md, "Decode prefetching"). __builtin_prefetch (gcc, clang) needs no
 * ISA flag. */
static void prefetch_head(const char *base, int64_t ld, int n, size_t bytes) {
    __asm__ volatile(""); /* keeps the calls: see kvcache.c, kv_prefetch_run */
    const int nr = (int)min64(n, (int64_t)(SDPA_PREFETCH_AHEAD / bytes) + 1);
    /* rows back to back (or one row): their span line by line, so rows shorter than a
     * line ask for each line once; else each row's lines */
    const int span = ld >= 0 && (uint64_t)ld <= bytes;
    const size_t len = span ? (size_t)(nr - 1) * (size_t)ld + bytes : bytes;
    for (int j = 0; j < (span ? 1 : nr); j++)
        for (size_t off = 0; off < len; off += 64) { /* 64-byte lines: x86-64, arm64 */
            if (sdpa_prefetch_l1) /* into L1 or L2: internal.h, sdpa_prefetch_l1 */
                __builtin_prefetch(base + (int64_t)j * ld + (int64_t)off, 0, 3);
            else
                __builtin_prefetch(base + (int64_t)j * ld + (int64_t)off, 0, 2);
        }
}

/* k_at / v_at: the addresses of the n rows of the block at key j0 of K (which 0) or V (1)
 * and of the npf rows of the unit after it, into at (kv_rows_at), the count of the latter
 * returned; cold (nothing streamed into the block), the rows at the head of the block are
 * asked for at once, as prefetch_head does for a contiguous block. */
static int rows_at(const plan *pl, const rows *it, int which, int64_t j0, int n, int npf,
                   int cold, const void **at) {
    __asm__ volatile(""); /* keeps the prefetches: see kvcache.c, kv_prefetch_run */
    const int nat = kv_rows_at(pl, it, which, j0, n, j0 + n + npf, at);
    if (cold) {
        const sdpa_problem *p = &pl->p;
        const size_t bytes =
            (size_t)((which ? p->Dv : p->Dk) * sdpa_kv_bits(which ? p->vt : p->kt) / 8);
        const int nr = (int)min64(n, (int64_t)(SDPA_PREFETCH_AT_AHEAD / bytes) + 1);
        for (int j = 0; j < nr; j++)
            for (size_t off = 0; off < bytes; off += 64) { /* as prefetch_head */
                if (sdpa_prefetch_at_l1)
                    __builtin_prefetch((const char *)at[j] + off, 0, 3);
                else
                    __builtin_prefetch((const char *)at[j] + off, 0, 2);
            }
    }
    return nat;
}

/* The prefetches around run [j, j + len) of a block [j0, j0 + n) of K (which 0) or V (1)
 * read run by run (paged or quantized), npf keys of the unit after the block: a paged
 * cache whose pages are short against the prefetch distance, read in place, is streamed
 * by the kernel calls, each prefetching in step the run that many pages on (*pf, *pfn
 * rows; kernels/ukernel.h), after a burst of the first pages where nothing streamed into
 * the block (!warm); longer pages in bursts a page run at a time (kv_prefetch_pages);
 * a quantized contiguous block's runs the next run at a time. Bursts stall the core on
 * the miss buffers (docs/PERFORMANCE.md, "Paged decode in step"). Returns 1 if the
 * stream runs on past the block. */
static int run_prefetch(const plan *pl, const rows *it, int which, int64_t j0, int n,
                        int64_t j, int64_t len, int npf, int warm, int in_place,
                        const char **pf, int *pfn) {
    const sdpa_problem *p = &pl->p;
    const int64_t end = j0 + n + npf;
    *pf = NULL;
    *pfn = 0;
    if (in_place && kv_pages_in_step(pl, which)) {
        if (j == j0 && !warm)
            kv_prefetch_pages(pl, it, which, j, end, 1);
        *pf = kv_page_ahead(pl, it, which, j, end, pfn);
        return npf > 0;
    }
    if (p->pages.block_table && npf > 0) { /* the page stream, into the next block */
        kv_prefetch_pages(pl, it, which, j, end, j == j0 && !warm);
        return 1;
    }
    if (j + len < j0 + n) /* the next page: no hardware prefetcher finds it */
        kv_prefetch_run(pl, it, which, j + len, j0 + n);
    return 0;
}

/* The band [*r0, *r1) of rows in [ra, rb) that see some key in [h0, h1) of the block
 * of n keys at j0 (empty: *r0 >= *r1). */
static void band_of(const rows *it, const scratch *w, int ra, int rb, int64_t j0, int n,
                    int h0, int h1, int *r0, int *r1) {
    *r0 = rb;
    *r1 = ra;
    for (int r = ra; r < rb; r++) {
        int a, e;
        row_cut(it, w, r, j0, n, &a, &e);
        if (a < e && a < h1 && e > h0) {
            *r0 = r < *r0 ? r : *r0;
            *r1 = r + 1;
        }
    }
}

typedef struct {
    int h;          /* keys of the first part */
    int b0, e0;     /* the band of rows that see some key of the first part, */
    int b1, e1;     /* ... of the second */
} kparts;

/* Whether rows [ra, rb) of the block run QK^T in two parts (qk_parts), and the parts. */
static int parts_of(const plan *pl, const rows *it, const scratch *w, int64_t j0, int n,
                    int ra, int rb, kparts *pt) {
    pt->h = (n / 2) & ~15;
    if (pt->h == 0 || pt->h % pl->kt->kp_align != 0)
        return 0;
    band_of(it, w, ra, rb, j0, n, 0, pt->h, &pt->b0, &pt->e0);
    band_of(it, w, ra, rb, j0, n, pt->h, n, &pt->b1, &pt->e1);
    return !(pt->b0 == ra && pt->e0 == rb && pt->b1 == ra && pt->e1 == rb);
}

/* Whether the table's pack of a whole block holds the packs of the two parts pt cuts it
 * into (kp_split), so the parts may multiply a kept pack (block_scores). */
static int parts_in_pack(const plan *pl, const kparts *pt) {
    return pl->kt->kp_split > 0 && pt->h % pl->kt->kp_split == 0;
}

/* One part's products (qk_parts): rows [b, e) of S against the nk keys from key h0 of
 * the block, packed at kp. */
static void part_qk(const plan *pl, const scratch *w, int b, int e, int h0, int nk,
                    const float *kp) {
    if (b < e)
        pl->kt->qk(e - b, nk, (int)pl->p.Dk, pl->p.scale, w->q + (size_t)b * (size_t)pl->ldq,
                   pl->ldq, kp, w->s + (size_t)b * (size_t)pl->lds + h0, pl->lds);
}

/* QK^T of a block that rows [ra, rb) see only in part (a causal diagonal, a window's
 * edge), in two parts of its keys, each packed and multiplied for only the band of rows
 * that see some key of it: on the causal diagonal the rows before the middle key skip
 * the second half, a quarter of the block's products. A row outside a part's band sees
 * none of its keys, so prepare_block sets its scores there to -inf whatever they held,
 * and a score's bits do not depend on the keys or rows beside it in a qk call. The first
 * part is a multiple of 16 keys, so the second part's packed keys and its columns of S
 * start 64-byte aligned whatever Dk, and of kp_align, so the two packs fill what one
 * would. Where the worker keeps the block's pack (kslot), the parts multiply it instead
 * (block_scores). Returns 0 (nothing done) when every row sees both parts. */
static int qk_parts(const plan *pl, const rows *it, const scratch *w, int64_t j0, int n,
                    int ra, int rb, const char *k, int64_t ldk, sdpa_dtype dt) {
    const int Dk = (int)pl->p.Dk;
    kparts pt;
    if (!parts_of(pl, it, w, j0, n, ra, rb, &pt))
        return 0;
    const int h = pt.h;
    float *kp1 = w->kp + (size_t)h * (size_t)Dk;
    if (pt.b0 < pt.e0) {
        pl->kt->pack_k(h, Dk, k, ldk, dt, w->kp);
        part_qk(pl, w, pt.b0, pt.e0, 0, h, w->kp);
    }
    if (pt.b1 < pt.e1) {
        pl->kt->pack_k(n - h, Dk, k + (size_t)((int64_t)h * ldk) * sdpa_dtype_size(dt), ldk, dt,
                       kp1);
        part_qk(pl, w, pt.b1, pt.e1, h, n - h, kp1);
    }
    return 1;
}

/* The parts pt of a block whose whole pack is at kp (parts_in_pack): the products
 * qk_parts gives, from the same packed keys. */
static void parts_from_pack(const plan *pl, const scratch *w, const kparts *pt, int n,
                            const float *kp) {
    part_qk(pl, w, pt->b0, pt->e0, 0, pt->h, kp);
    part_qk(pl, w, pt->b1, pt->e1, pt->h, n - pt->h, kp + (size_t)pt->h * (size_t)pl->p.Dk);
}

/* Block j0's slot among the blocks a worker keeps packed (plan.kpc_slots), or -1: none
 * kept, or j0 not a block's first key. The slots hold the blocks of one (b, hk), kpc_of. */
static int64_t kpc_index(const plan *pl, int64_t j0) {
    return pl->kpc_slots && j0 % pl->bc == 0 && j0 / pl->bc < pl->kpc_slots ? j0 / pl->bc : -1;
}

static int64_t kpc_of(const plan *pl, const rows *it) { return it->b * pl->p.Hkv + it->hk; }

/* The kept blocks' slot of block j0 of item it's (b, hk) for K (which 0) or V (1), and
 * its state (*st: 0 empty, KPC_PACKED or KPC_NONFINITE), or NULL where the worker keeps
 * none: the plan keeps none, or the block is not the sequence's whole block (a window's
 * or a unit's first keys, the item's last). The kept blocks are one (b, hk)'s; asking
 * for another's empties them. A block's pack is the same bits whichever item packs it
 * (pack_k, pack_k_bf16 or pack_v_bf16 of the same rows, dequantized or rounded the same
 * way), so an item that finds it packed multiplies what it would have packed itself. */
static char *kpc_slot(const plan *pl, const rows *it, const scratch *w, int which, int64_t j0,
                      int n, unsigned char **st) {
    const int64_t slot = kpc_index(pl, j0);
    *st = NULL;
    if (slot < 0 || !pl->kpc_bytes[which] || n != min64(pl->bc, it->seq.tkv - j0))
        return NULL;
    if (*w->kpc_bh != kpc_of(pl, it)) {
        for (int x = 0; x < 2; x++)
            if (pl->kpc_bytes[x])
                memset(w->kpc_st[x], 0, (size_t)pl->kpc_slots);
        *w->kpc_bh = kpc_of(pl, it);
    }
    *st = w->kpc_st[which] + slot;
    return w->kpc[which] + (size_t)slot * pl->kpc_bytes[which];
}

/* Whether the worker keeps block j0 of item it's K packed. */
static int kpc_kept(const plan *pl, const rows *it, const scratch *w, int64_t j0) {
    const int64_t slot = kpc_index(pl, j0);
    return slot >= 0 && *w->kpc_bh == kpc_of(pl, it) && w->kpc_st[0][slot];
}

/* S rows [ra, rb) = scale Q K^T for the n keys of the block kv (caller memory, or the
 * block gathered by kv_block): K rows read in place by qk_rows for plans of few rows,
 * else packed by pack_k for qk.
 * The choice is the plan's, never the block's, so the forward pass and the attention
 * weights compute every score the same way (both kernels give a row the same bits
 * whichever rows share the call).
 * A block not plain (masked, or modified scores) may go to qk_parts.
 * kslot: where not NULL, the block's slot among the kept packed blocks (kpc_slot), which
 * the pack fills unless its state *kst says it holds the block already (kv is then not
 * read); pt, where not NULL, the parts (parts_of) the block's rows run in, which a pack in
 * kslot holds (parts_in_pack): the parts multiply it as qk_parts would its own packs.
 * npf: the keys of the unit after the block (kernels/ukernel.h). Returns 1 if qk_rows
 * read the block's last rows in place, told that the stream goes on (so it may have
 * prefetched the next block's first rows), else 0. */
static int block_scores(const plan *pl, const rows *it, const scratch *w, const vrows *kv,
                        int64_t j0, int n, int ra, int rb, int npf, int warm, int plain,
                        char *kslot, unsigned char *kst, const kparts *pt) {
    const sdpa_problem *p = &pl->p;
    const sdpa_kernels *kt = pl->kt;
    float *s = w->s + (size_t)ra * (size_t)pl->lds;
    if (kv == NULL && pl->k_at) { /* paged: the block in one call, its rows' addresses */
        const int nat = rows_at(pl, it, 0, j0, n, npf, !warm, w->kat);
        kt->qk_rows_at(rb - ra, n, (int)p->Dk, p->scale, w->q + (size_t)ra * (size_t)pl->ldq,
                       pl->ldq, w->kat, p->kt, s, pl->lds, nat);
        return nat > 0;
    }
    if (kv == NULL) { /* paged or quantized K on qk_rows: run by run (kvcache.c) */
        const float *q = w->q + (size_t)ra * (size_t)pl->ldq;
        int streamed = 0;
        for (int64_t j = j0; j < j0 + n;) {
            const char *row;
            const int64_t len = kv_run(pl, it, 0, j, j0 + n, &row);
            const char *pf;
            int pfn;
            const int in_place = pl->kq_fused || !sdpa_dtype_quantized(p->kt);
            streamed |= run_prefetch(pl, it, 0, j0, n, j, len, npf, warm, in_place, &pf, &pfn);
            if (pl->kq_fused) {
                /* codes in place: the next block's rows follow this run's unless paged */
                const int on = j + len == j0 + n && !p->pages.block_table && npf > 0;
                streamed |= on;
                const qrows k = kv_run_qrows(pl, it, 0, j, len, row);
                if (on)
                    kv_prefetch_scales(&k, len, min64(len, npf));
                if (pl->bf16_rows)
                    kt->qk_rows_bf16(rb - ra, (int)len, (int)p->Dk, p->scale,
                                     w->qb + (size_t)ra * (size_t)pl->ldqb, pl->ldqb, k.v, k.ldb,
                                     p->kt, &k.sc, s + (j - j0), pl->lds,
                                     pf ? pfn : on ? npf : 0, pf);
                else
                    kt->qk_rows_q(rb - ra, (int)len, (int)p->Dk, p->scale, q, pl->ldq, k.v,
                                  k.ldb, p->kt, &k.sc, s + (j - j0), pl->lds,
                                  pf ? pfn : on ? npf : 0, pf);
            } else {
                const vrows k = kv_run_rows(pl, it, w, 0, j, len, row);
                if (pl->bf16_rows) /* rounded to bf16 in the kernel */
                    kt->qk_rows_bf16(rb - ra, (int)len, (int)p->Dk, p->scale,
                                     w->qb + (size_t)ra * (size_t)pl->ldqb, pl->ldqb, k.v,
                                     rows_ldb(k.ld, k.dt, max64(len, pfn)), k.dt, NULL,
                                     s + (j - j0), pl->lds, pfn, pf);
                else
                    kt->qk_rows(rb - ra, (int)len, (int)p->Dk, p->scale, q, pl->ldq, k.v, k.ld,
                                k.dt, s + (j - j0), pl->lds, pfn, pf);
            }
            j += len;
        }
        return streamed;
    }
    if (pl->bf16_rows) { /* K rows in place (or a gathered block), rounded in the kernel */
        const int streamed = kv_in_place(pl, 0) && npf > 0;
        kt->qk_rows_bf16(rb - ra, n, (int)p->Dk, p->scale, w->qb + (size_t)ra * (size_t)pl->ldqb,
                         pl->ldqb, kv->v, rows_ldb(kv->ld, kv->dt, (int64_t)n + npf), kv->dt,
                         NULL, s, pl->lds, streamed ? npf : 0, NULL);
        return streamed;
    }
    if (pl->bf16_tiles) {
        uint16_t *kp = kslot ? (uint16_t *)(void *)kslot : w->kpb;
        if (!kst || !*kst) {
            kt->pack_k_bf16(n, (int)p->Dk, kv->v, kv->ld, kv->dt, kp);
            if (kst)
                *kst = KPC_PACKED;
        }
        kt->qk_bf16(rb - ra, n, (int)p->Dk, p->scale, w->qb + (size_t)ra * (size_t)pl->ldqb,
                    pl->ldqb, kp, s, pl->lds);
        return 0;
    }
    const float *q = w->q + (size_t)ra * (size_t)pl->ldq;
    if (kst && *kst) {
        if (pt)
            parts_from_pack(pl, w, pt, n, (const float *)(void *)kslot);
        else
            kt->qk(rb - ra, n, (int)p->Dk, p->scale, q, pl->ldq, (const float *)(void *)kslot,
                   s, pl->lds);
        return 0;
    }
    const char *k = kv->v;
    int64_t ldk = kv->ld;
    sdpa_dtype dt = kv->dt;
    /* caller rows (not a gathered block) read by qk_rows, which the stream goes on past */
    const int own = pl->k_in_place && kv_in_place(pl, 0);
    if (pl->bf16 && dt != SDPA_BF16) { /* Q is rounded already (gather_q) */
        ldk = round_rows_bf16(pl, n, p->Dk, k, ldk, dt, w->kb, own ? n + npf : 0);
        k = (const char *)w->kb;
        dt = SDPA_BF16;
    }
    if (pl->k_in_place) {
        /* rows in place stream on in the kernel, rows rounded into scratch did so above */
        const int streamed = k == kv->v && own && npf > 0;
        kt->qk_rows(rb - ra, n, (int)p->Dk, p->scale, q, pl->ldq, k, ldk, dt, s, pl->lds,
                    streamed ? npf : 0, NULL);
        return own && npf > 0;
    }
    if (!kslot && !plain && qk_parts(pl, it, w, j0, n, ra, rb, k, ldk, dt))
        return 0;
    float *kp = kslot ? (float *)(void *)kslot : w->kp;
    kt->pack_k(n, (int)p->Dk, k, ldk, dt, kp);
    if (kst)
        *kst = KPC_PACKED;
    if (pt)
        parts_from_pack(pl, w, pt, n, kp);
    else
        kt->qk(rb - ra, n, (int)p->Dk, p->scale, q, pl->ldq, kp, s, pl->lds);
    return 0;
}

/* Whether V's block at j0 may be read run by run (paged or quantized V, kv_run) rather
 * than gathered into one block (kv_block): not when masked (pv_block's exact paths take a
 * block), nor in the bf16 mode unless every run starts an even number of keys after j0,
 * since pv_rows_bf16 sums key pairs from a call's first key and the bits must be those
 * of the block in one call: a contiguous cache's runs (KV_RUN_QUANT keys) always, a
 * paged one's when its pages and j0 are even. */
_Static_assert(KV_RUN_QUANT % 2 == 0, "bf16 V runs keep the key pairs of one call");
static int v_runs(const plan *pl, int64_t j0, int masked) {
    const sdpa_pages *pg = &pl->p.pages;
    return !masked && (!pl->bf16 || !pg->block_table || (pg->page_size % 2 == 0 && j0 % 2 == 0));
}

/* P V for rows [ra, rb) of one block of n keys at v (caller memory), after the softmax
 * (and dropout) left P in S. fp32: pv_block, exact for the masking `masked` reports.
 * bf16: with the bf16 tiles when nothing is masked or every element of V is finite once
 * rounded (pack_v_bf16 says so as it packs; a hidden key's P is exactly 0 and rounds to
 * 0, so 0 x V adds nothing); else P rounded to bf16 in place, V
 * rounded into scratch unless stored as bf16, and pv_block's exact paths on the fp32
 * tiles, which then multiply exactly the mode's operands.
 * npf and the result as block_scores' for V: 1 if the last pv call was told the stream
 * goes on past the block. */
static int block_pv(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                    int64_t j0, int n, const vrows *v, int masked, int npf, int warm,
                    char *vslot, unsigned char *vst) {
    const sdpa_problem *p = &pl->p;
    const int Dv = (int)p->Dv;
    float *s = w->s + (size_t)ra * (size_t)pl->lds;
    if (v == NULL && pl->v_at) { /* paged, nothing masked: as block_scores' k_at */
        const int nat = rows_at(pl, it, 1, j0, n, npf, 0, w->vat);
        pl->kt->pv_at(rb - ra, n, Dv, s, pl->lds, w->vat, p->vt, w->alpha + ra,
                      w->o + (size_t)ra * (size_t)pl->ldo, pl->ldo, nat);
        return nat > 0;
    }
    if (v == NULL) { /* paged or quantized V, nothing masked: run by run (kvcache.c) */
        int streamed = 0;
        for (int64_t j = j0; j < j0 + n;) {
            const char *row;
            const int64_t len = kv_run(pl, it, 1, j, j0 + n, &row);
            const char *pf; /* as K's */
            int pfn;
            const int in_place = pl->vq_fused || !sdpa_dtype_quantized(p->vt);
            streamed |= run_prefetch(pl, it, 1, j0, n, j, len, npf, warm, in_place, &pf, &pfn);
            const float *alpha = j == j0 ? w->alpha + ra : NULL;
            float *o = w->o + (size_t)ra * (size_t)pl->ldo;
            if (pl->vq_fused) {
                const int on = j + len == j0 + n && !p->pages.block_table && npf > 0;
                streamed |= on;
                const qrows vq = kv_run_qrows(pl, it, 1, j, len, row);
                if (on)
                    kv_prefetch_scales(&vq, len, min64(len, npf));
                if (pl->bf16_rows) /* runs an even number of keys apart: v_runs */
                    pl->kt->pv_rows_bf16(rb - ra, (int)len, Dv, s + (j - j0), pl->lds, vq.v,
                                         vq.ldb, p->vt, &vq.sc, alpha, o, pl->ldo,
                                         pf ? pfn : on ? npf : 0, pf);
                else
                    pl->kt->pv_q(rb - ra, (int)len, Dv, s + (j - j0), pl->lds, vq.v, vq.ldb,
                                 p->vt, &vq.sc, alpha, o, pl->ldo, pf ? pfn : on ? npf : 0, pf);
            } else {
                const vrows vr = kv_run_rows(pl, it, w, 1, j, len, row);
                if (pl->bf16_rows) /* runs an even number of keys apart: v_runs */
                    pl->kt->pv_rows_bf16(rb - ra, (int)len, Dv, s + (j - j0), pl->lds, vr.v,
                                         rows_ldb(vr.ld, vr.dt, max64(len, pfn)), vr.dt, NULL,
                                         alpha, o, pl->ldo, pfn, pf);
                else
                    pl->kt->pv(rb - ra, (int)len, Dv, s + (j - j0), pl->lds, vr.v, vr.ld,
                               vr.dt, alpha, o, pl->ldo, pfn, pf);
            }
            j += len;
        }
        return streamed;
    }
    /* a hidden key's P is exactly 0 and 0 x V adds nothing unless a rounded element of V
     * is inf or NaN (which pack_v_bf16 reports; a finite fp32 value past bf16's largest
     * rounds to inf) */
    if (pl->bf16_tiles) {
        uint16_t *vp = vslot ? (uint16_t *)(void *)vslot : w->vpb;
        int finite;
        if (vst && *vst) {
            finite = *vst == KPC_PACKED;
        } else {
            finite = pl->kt->pack_v_bf16(n, Dv, v->v, v->ld, v->dt, vp);
            if (vst)
                *vst = finite ? KPC_PACKED : KPC_NONFINITE;
        }
        if (finite || !masked) {
            pl->kt->pv_bf16(rb - ra, n, Dv, s, pl->lds, vp, w->alpha + ra,
                            w->o + (size_t)ra * (size_t)pl->ldo, pl->ldo);
            return 0;
        }
    }
    if (pl->bf16_rows && !masked) { /* V rows as block_scores' K */
        const int streamed = kv_in_place(pl, 1) && npf > 0;
        pl->kt->pv_rows_bf16(rb - ra, n, Dv, s, pl->lds, v->v,
                             rows_ldb(v->ld, v->dt, (int64_t)n + npf), v->dt, NULL, w->alpha + ra,
                             w->o + (size_t)ra * (size_t)pl->ldo, pl->ldo, streamed ? npf : 0,
                             NULL);
        return streamed;
    }
    vrows vr = *v;
    const int own = kv_in_place(pl, 1); /* caller rows, not a gathered block */
    if (pl->bf16) {
        for (int r = 0; r < rb - ra; r++)
            round_f32_to_bf16_values(s + (size_t)r * (size_t)pl->lds, n);
        if (vr.dt != SDPA_BF16) {
            const int64_t ldv =
                round_rows_bf16(pl, n, p->Dv, vr.v, vr.ld, vr.dt, w->vb, own ? n + npf : 0);
            vr = (vrows){(const char *)w->vb, ldv, SDPA_BF16};
            return pv_block(pl, it, w, ra, rb, j0, n, &vr, masked, 0) || (own && npf > 0);
        }
    }
    /* caller rows stream on in pv; a gathered block does not */
    return pv_block(pl, it, w, ra, rb, j0, n, &vr, masked, own ? npf : 0);
}

/* block_scores and block_pv of a head-group item (plan.hgroup), head after head: K/V
 * head hk's rows are the band [hk g, hk g + g) within [ra, rb), and its block is at kv
 * plus hk head strides where K or V is in place (kv: head 0's block), else read through
 * the pages as the item of head hk alone would (kv NULL; a masked block's V rows
 * gathered per head, kv_block). Each call is the one a per-head item makes on that
 * head's rows, so the rows' bits are the same. Returns 1 if every head's call streamed
 * on past the block. */
static int heads_step(const plan *pl, const rows *it, const scratch *w, const vrows *kv,
                      int which, int64_t j0, int n, int ra, int rb, int npf, int warm,
                      int plain, int masked) {
    const sdpa_problem *p = &pl->p;
    const int g = (int)p->group;
    const int64_t hstep = kv ? (which ? p->vs[1] : p->ks[1]) * (int64_t)sdpa_dtype_size(kv->dt) : 0;
    int streamed = 1;
    for (int hk = ra / g; hk * g < rb; hk++) {
        const int a = hk * g > ra ? hk * g : ra, e = hk * g + g < rb ? hk * g + g : rb;
        rows head = *it;
        head.hk = hk;
        vrows h = kv ? (vrows){kv->v + hk * hstep, kv->ld, kv->dt} : (vrows){NULL, 0, SDPA_F32};
        const int gather = !kv && which && !v_runs(pl, j0, masked);
        if (gather)
            h = kv_block(pl, &head, w, 1, j0, n);
        const vrows *hp = kv || gather ? &h : NULL;
        streamed &= which ? block_pv(pl, &head, w, a, e, j0, n, hp, masked, npf, warm, NULL,
                                     NULL)
                          : block_scores(pl, &head, w, hp, j0, n, a, e, npf, warm, plain, NULL,
                                         NULL, NULL);
    }
    return streamed;
}

/* The weights mode's step on one block of scores (rows [ra, rb), after prepare_block if
 * the block is not plain): W = exp(S - lse) with hidden keys exactly 0 (-inf - lse is
 * NaN when the row's lse is NaN), dropout, and the rows' columns [j0, j0 + n) written. */
static void weights_block(const plan *pl, const rows *it, const scratch *w, int ra, int rb,
                          int64_t j0, int n, int plain) {
    const sdpa_problem *p = &pl->p;
    const int64_t vb = p->cu_q ? 0 : it->b;
    for (int r = ra; r < rb; r++) {
        const float lse = p->lse[vb * p->lse_sb + w->h[r] * p->lse_sh + it->seq.q0 + w->i[r]];
        float *sr = w->s + (size_t)r * (size_t)pl->lds;
        if (lse == -INFINITY) { /* a row that sees nothing: all zero */
            memset(sr, 0, (size_t)n * sizeof(float));
            continue;
        }
        for (int j = 0; j < n; j++)
            sr[j] -= lse;
        pl->kt->vexp(n, sr, sr);
        const unsigned char *hid = w->hidden + (size_t)r * (size_t)pl->bc;
        for (int j = 0; j < n && !plain; j++)
            if (hid[j])
                sr[j] = 0.0f;
    }
    if (p->dropout_p != 0.0f)
        dropout_block(pl, it, w, ra, rb, j0, n);
    for (int r = ra; r < rb; r++) {
        float *dst = pl->weights + ((vb * p->Hq + w->h[r]) * p->Tq + it->seq.q0 + w->i[r]) * p->Tkv;
        memcpy(dst + j0, w->s + (size_t)r * (size_t)pl->lds, (size_t)n * sizeof(float));
    }
}

void run_keys(const plan *pl, const rows *it, const scratch *w, int64_t ja, int64_t jb,
              int64_t jnext, counters *c) {
    const sdpa_problem *p = &pl->p;
    const sdpa_kernels *kt = pl->kt;
    const int forward = pl->mode == PLAN_FORWARD;
    const int m = it->mvalid, Dk = (int)p->Dk, Dv = (int)p->Dv;
    if (forward) {
        for (int r = 0; r < m; r++) {
            w->m[r] = -INFINITY;
            w->l[r] = 0.0f;
        }
        memset(w->o, 0, (size_t)m * (size_t)pl->ldo * sizeof(float));
    }
    if (m == 0 || ja >= jb)
        return;
    /* K and V in place (plain views): row addresses from the bases; else kv_block
     * gathers or dequantizes each block (kvcache.c) */
    const int kin = kv_in_place(pl, 0), vin = forward && kv_in_place(pl, 1);
    /* paged or quantized K and V run by run where the kernels allow it (kvcache.c): qk_rows
     * (decode) for K, the unmasked pv for V (v_runs); in the bf16 mode only through the
     * decode pair (the fp32 tiles take blocks rounded into scratch) */
    const int kseg = !kin && pl->k_in_place && (!pl->bf16 || pl->bf16_rows);
    const int vseg = forward && !vin && (!pl->bf16 || pl->bf16_rows);
    const size_t kes = sdpa_dtype_size(p->kt), ves = vin ? sdpa_dtype_size(p->vt) : 0;
    const char *kbase = kin ? sdpa_kv_row(p, 0, it->b, it->hk, it->seq.kv0, 0) : NULL;
    const char *vbase = vin ? sdpa_kv_row(p, 1, it->b, it->hk, it->seq.kv0, 0) : NULL;
    /* a row's bytes, or under hgroup a token's, from its first KV head's row to the end
     * of its last (heads_step reads them all) */
    const int64_t nh = pl->hgroup ? p->Hkv - 1 : 0;
    const size_t krow = (size_t)(nh * p->ks[1] + Dk) * kes;
    const size_t vrow = (size_t)(nh * p->vs[1] + Dv) * ves;
    /* whether the last qk_rows / pv call streamed past its block (block_scores,
     * block_pv): the kernel then prefetched this block's first rows at its prefetch
     * distance, as it did every row before, and the driver asks for them only when not
     * (the unit's first block, a masked or skipped block): one burst of the head of a
     * block in decode's steady state measured slower than the stream
     * (docs/PERFORMANCE.md, "Decode prefetching") */
    int kahead = 0, vahead = 0;
    for (int64_t j0 = ja; j0 < jb;) {
        /* blocks end on multiples of Bc (so split chunks, multiples of Bc, cut none) */
        const int64_t j1 = min64((j0 / pl->bc + 1) * pl->bc, jb);
        const int n = (int)(j1 - j0);
        if (block_fully_hidden(pl, it, w, j0, n)) {
            kahead = vahead = 0;
            j0 = j1;
            continue;
        }
        /* A block every row sees in full, with no explicit mask or score modifier, is the
         * plain FlashAttention step on all rows. Otherwise only the band of rows that see
         * some key of it runs: for a row that sees none the step is the identity
         * (P = exp(-inf) = 0, alpha = exp(0) = 1, or l = O = 0 still). */
        int ra = 0, rb = m;
        const int plain = j0 >= it->ilo && j1 <= it->ihi && p->mask.kind == SDPA_MASK_NONE &&
                          p->softcap == 0.0f && !p->alibi;
        if (!plain) {
            band_of(it, w, 0, m, j0, n, 0, n, &ra, &rb);
            if (ra >= rb) { /* no row sees any key of the block */
                kahead = vahead = 0;
                j0 = j1;
                continue;
            }
        }
        c->computed++;
        /* keys after this block that this worker reads next (the unit's, then the next
         * chunk's: jnext), the rows a kernel may prefetch past it, in plans of few rows
         * (decode: K and V stream from DRAM; prefill's items reuse each block, and its
         * pv prefetches nothing) */
        const int npf = pl->k_in_place ? (int)min64(jnext - j1, INT32_MAX) : 0;
        /* the worker's kept packs of the block (kpc_slot); a block the fp32 tiles run in
         * parts (qk_parts) only where its whole pack holds the parts' packs */
        unsigned char *kst = NULL, *vst = NULL;
        kparts pt;
        const int parts = pl->kpc_slots && !plain && !pl->bf16_tiles &&
                          parts_of(pl, it, w, j0, n, ra, rb, &pt);
        char *kslot = pl->kpc_slots && (!parts || parts_in_pack(pl, &pt))
                          ? kpc_slot(pl, it, w, 0, j0, n, &kst)
                          : NULL;
        char *vslot = pl->kpc_slots ? kpc_slot(pl, it, w, 1, j0, n, &vst) : NULL;
        const int vkept = vst && *vst == KPC_PACKED; /* block_pv reads no row of V */
        vrows v = {NULL, 0, SDPA_F32};
        if (vin) {
            v = (vrows){vbase + (size_t)(j0 * p->vs[2]) * ves, p->vs[2], p->vt};
            /* n > 1 only when the view has two rows or more, which bounds the row
             * stride's bytes (validate.c); a single row's stride is unbounded (INT64_MAX
             * passes, multiplied by 0) and would overflow here, so it is not used */
            if (!vahead && !vkept)
                prefetch_head(v.v, n > 1 ? p->vs[2] * (int64_t)ves : 0, n, vrow);
        } else if (vseg && !vahead) { /* the first rows of V, as prefetch_head: before QK^T */
            if (pl->v_at)
                rows_at(pl, it, 1, j0, n, npf, 1, w->vat);
            else
                kv_prefetch_run(pl, it, 1, j0, j1);
        }
        const vrows k = kin ? (vrows){kbase + (size_t)(j0 * p->ks[2]) * kes, p->ks[2], p->kt}
                        : kseg || (kst && *kst) ? (vrows){NULL, 0, SDPA_F32}
                                                : kv_block(pl, it, w, 0, j0, n);
        kahead = pl->hgroup ? heads_step(pl, it, w, kin ? &k : NULL, 0, j0, n, ra, rb, npf,
                                         kahead, plain, 0)
                            : block_scores(pl, it, w, kseg ? NULL : &k, j0, n, ra, rb, npf,
                                           kahead, plain, kslot, kst, parts && kslot ? &pt : NULL);
        const int masked = plain ? 0 : prepare_block(pl, it, w, ra, rb, j0, n);
        c->masked += masked != 0;
        if (!forward) {
            weights_block(pl, it, w, ra, rb, j0, n, plain);
            vahead = 0;
            j0 = j1;
            continue;
        }
        kt->softmax(rb - ra, n, w->s + (size_t)ra * (size_t)pl->lds, pl->lds, w->m + ra,
                    w->l + ra, w->alpha + ra);
        if (j1 < jb && kseg && !kahead) /* the next block's first run of K, as below */
            kv_prefetch_run(pl, it, 0, j1, min64(jb, j1 + pl->bc));
        else if (j1 < jb && kin && !kahead && !kpc_kept(pl, it, w, j1))
            prefetch_head(kbase + (size_t)(j1 * p->ks[2]) * kes, p->ks[2] * (int64_t)kes,
                          (int)min64(jb - j1, pl->bc), krow);
        if (p->dropout_p != 0.0f)
            dropout_block(pl, it, w, ra, rb, j0, n);
        const int vpages = vseg && v_runs(pl, j0, masked);
        if (!vin && !vpages && !pl->hgroup && !vkept) /* (heads_step gathers each head's) */
            v = kv_block(pl, it, w, 1, j0, n);
        vahead = pl->hgroup ? heads_step(pl, it, w, vin ? &v : NULL, 1, j0, n, ra, rb, npf,
                                         vahead, 0, masked)
                            : block_pv(pl, it, w, ra, rb, j0, n, vpages ? NULL : &v, masked,
                                       npf, vahead, vslot, vst);
        j0 = j1;
    }
}
