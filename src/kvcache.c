/*
 * kvcache.c - K and V as engines keep them (include/sdpa.h, "KV caches"): rows read
 * through a block table of pages, stored quantized with strided scales. It holds the
 * driver's block gather (a block of keys as the tiles read it) and sdpa_kv_write, the
 * quantizer that writes a cache exactly as the kernels read it. It is not a kernel: the
 * per-row dequantization is the table's `dequant`, or its fused kernels' (kernels/kvq.h,
 * compiled per ISA).
 *
 * A block of n <= Bc keys reaches the tiles one of four ways:
 *   - in place, as before: a plain view, or a paged one whose block lies in one page
 *     (rows stride_t apart, the dtype as stored);
 *   - run by run (kv_run): decode's qk_rows and the unmasked pv take the block in runs,
 *     each one call: a page of a paged fp32/16-bit cache in place; a page (or the
 *     block) of a quantized cache in place through the table's fused qk_rows_q / pv_q
 *     (kv_fused, kv_run_qrows), which decode in registers; else at most KV_RUN_QUANT
 *     quantized rows dequantized into scratch that stays in L1 (a whole block of fp32 K
 *     and V rows, 64 KiB at Dk = Dv = 128, would not). The fused kernels give the bits of
 *     the dequantized rows (kernels/ukernel.h), and both kernels are
 *     exact per key in key order (qk_rows computes each score alone; pv adds keys one at
 *     a time after the one rescale, which only the first call applies), so the bits are
 *     those of one call on the whole block; the bf16 mode's decode pair takes the same
 *     runs (its pv pairs keys from a call's first, so V runs only where they start an
 *     even number of keys into the block: tile.c, v_runs);
 *   - gathered: a paged block that crosses pages is copied row by row, as stored, into
 *     n x D scratch (the values are untouched, so paged and contiguous calls give the
 *     same bits);
 *   - dequantized: every row of a quantized block goes through the table's dequant into
 *     n x D fp32 scratch. Only the block is ever dequantized, never the cache.
 */
#include <math.h>
#include <string.h>

#include "../kernels/convert.h"
#include "driver.h"

/* Element index of the first scale of key row j (see sdpa_kv_row). */
static int64_t scale_index(const sdpa_problem *p, const sdpa_scales *sc, int64_t b, int64_t hk,
                           int64_t kv0, int64_t j) {
    if (p->pages.block_table) {
        const int64_t P = p->pages.page_size;
        return (int64_t)p->pages.block_table[b * p->pages.stride + j / P] * sc->stride_b +
               hk * sc->stride_h + (j % P) * sc->stride_t;
    }
    return b * sc->stride_b + hk * sc->stride_h + (kv0 + j) * sc->stride_t;
}

void sdpa_kv_row_scales(const sdpa_problem *p, int which, int64_t b, int64_t hk, int64_t kv0,
                        int64_t j, float *out) {
    const sdpa_scales *sc = which ? &p->vsc : &p->ksc;
    const int64_t D = which ? p->Dv : p->Dk, ng = D / sc->group;
    const int64_t e = scale_index(p, sc, b, hk, kv0, j);
    for (int64_t g = 0; g < ng; g++)
        out[g] = sdpa_load_as_f32(sc->data, e + g, sc->dtype);
}

/* Keys from j to the end of j's page (or to end), the rows one address step apart. */
static int64_t page_run(const sdpa_problem *p, int64_t j, int64_t end) {
    if (!p->pages.block_table)
        return end - j;
    return min64(end, (j / p->pages.page_size + 1) * p->pages.page_size) - j;
}

int64_t kv_run(const plan *pl, const rows *it, int which, int64_t j, int64_t end,
               const char **row) {
    const sdpa_problem *p = &pl->p;
    *row = sdpa_kv_row(p, which, it->b, it->hk, it->seq.kv0, j);
    const int64_t n = page_run(p, j, end);
    const int staged = sdpa_dtype_quantized(which ? p->vt : p->kt) &&
                       !(which ? pl->vq_fused : pl->kq_fused);
    return staged ? min64(n, KV_RUN_QUANT) : n;
}

int kv_fused(const plan *pl, int which) {
    const sdpa_problem *p = &pl->p;
    const sdpa_scales *sc = which ? &p->vsc : &p->ksc;
    const int64_t D = which ? p->Dv : p->Dk;
    /* fp32: qk_rows_q / pv_q; the bf16 mode: the decode pair, which takes the same runs */
    const int has = pl->bf16 ? pl->bf16_rows
                             : (which ? pl->kt->pv_q != NULL : pl->kt->qk_rows_q != NULL);
    return sdpa_dtype_quantized(which ? p->vt : p->kt) && has && pl->k_in_place &&
           (sc->group == D || sc->group % SDPA_QGROUP_VEC == 0);
}

qrows kv_run_qrows(const plan *pl, const rows *it, int which, int64_t j, int64_t n,
                   const char *row) {
    const sdpa_problem *p = &pl->p;
    const sdpa_dtype dt = which ? p->vt : p->kt;
    const sdpa_scales *sc = which ? &p->vsc : &p->ksc;
    /* n > 1 only within a page (or view) of two rows or more, which bounds the row and
     * scale strides (validate.c); one row's strides are unbounded and never used */
    const int64_t ldb = n > 1 ? (which ? p->vs : p->ks)[2] * sdpa_kv_bits(dt) / 8 : 0;
    const int per_row = n > 1 && sc->stride_t != 0; /* a run lies in one page */
    const int64_t se = scale_index(p, sc, it->b, it->hk, it->seq.kv0, j);
    const char *sp = (const char *)sc->data + (size_t)se * sdpa_dtype_size(sc->dtype);
    return (qrows){row, ldb, {sp, per_row ? sc->stride_t : 0, (int)sc->group, sc->dtype}};
}

void kv_prefetch_scales(const qrows *r, int64_t from, int64_t n) {
    __asm__ volatile(""); /* keeps the calls: see kv_prefetch_run */
    if (r->sc.ld <= 0) /* one set of scales for every row: read once, kept in cache */
        return;
    const size_t es = r->sc.dt == SDPA_F16 ? 2 : 4;
    const char *a = (const char *)r->sc.p + (size_t)(from * r->sc.ld) * es;
    /* at most KV_SCALES_AHEAD bytes: all of a 256-key block's per-token scales, and a
     * bounded burst of group scales (at Dk = 512 in groups of 32, 16 KiB a block) */
    const size_t bytes = (size_t)min64(n * r->sc.ld * (int64_t)es, KV_SCALES_AHEAD);
    for (size_t off = 0; off < bytes; off += 64) /* 64-byte lines: x86-64, arm64 */
        __builtin_prefetch(a + off, 0, 2);
}

/* Rows [j, j + n) of a quantized K or V (one run, or a block) dequantized into dst, rows
 * D apart, page run by page run (within one, rows and their scales are a stride apart):
 * a row's scales are read for each row, or once in all when they do not change with the
 * token (per tensor, per head). */
static void dequant_rows(const plan *pl, const rows *it, const scratch *w, int which, int64_t j,
                         int n, float *dst) {
    const sdpa_problem *p = &pl->p;
    const sdpa_dtype dt = which ? p->vt : p->kt;
    const int64_t D = which ? p->Dv : p->Dk;
    const sdpa_scales *sc = which ? &p->vsc : &p->ksc;
    const int64_t ng = D / sc->group;
    const int64_t ld = (which ? p->vs : p->ks)[2];
    const int per_row = sc->stride_t != 0 || (p->pages.block_table && sc->stride_b != 0);
    for (int64_t r0 = 0; r0 < n;) {
        const int64_t len = page_run(p, j + r0, j + n);
        const char *row = sdpa_kv_row(p, which, it->b, it->hk, it->seq.kv0, j + r0);
        const int64_t se = scale_index(p, sc, it->b, it->hk, it->seq.kv0, j + r0);
        /* len > 1 only within a page (or view) of two rows or more, which bounds the row
         * stride's bytes (validate.c); one row's stride is unbounded and never used */
        const int64_t step = len > 1 ? ld * sdpa_kv_bits(dt) / 8 : 0;
        for (int64_t r = 0; r < len; r++) {
            if (r0 + r == 0 || per_row)
                for (int64_t g = 0; g < ng; g++)
                    w->qsc[g] = sdpa_load_as_f32(sc->data, se + r * sc->stride_t + g, sc->dtype);
            pl->kt->dequant((int)D, row + r * step, dt, w->qsc, (int)sc->group,
                            dst + (size_t)(r0 + r) * (size_t)D);
        }
        r0 += len;
    }
}

vrows kv_run_rows(const plan *pl, const rows *it, const scratch *w, int which, int64_t j,
                  int64_t n, const char *row) {
    const sdpa_problem *p = &pl->p;
    const sdpa_dtype dt = which ? p->vt : p->kt;
    if (!sdpa_dtype_quantized(dt))
        return (vrows){row, (which ? p->vs : p->ks)[2], dt};
    float *dst = which ? w->vg : w->kg;
    dequant_rows(pl, it, w, which, j, (int)n, dst);
    return (vrows){(const char *)dst, which ? p->Dv : p->Dk, SDPA_F32};
}

void kv_prefetch_run(const plan *pl, const rows *it, int which, int64_t j, int64_t end) {
    /* a side effect the compiler keeps: gcc 12 counts __builtin_prefetch as none, so it
     * judged a function made only of prefetches pure and deleted its calls in the same
     * file (kv_prefetch_pages', tile.c's prefetch_head: no call of the latter was left in
     * run_keys); clang keeps them either way */
    __asm__ volatile("");
    const sdpa_problem *p = &pl->p;
    const char *row;
    const int64_t n = kv_run(pl, it, which, j, end, &row);
    const sdpa_dtype dt = which ? p->vt : p->kt;
    const int64_t rowb = (which ? p->Dv : p->Dk) * sdpa_kv_bits(dt) / 8;
    /* n > 1 only within a page of two rows or more (kv_run), which bounds the step */
    const int64_t step = n > 1 ? (which ? p->vs : p->ks)[2] * sdpa_kv_bits(dt) / 8 : 0;
    /* the run's rows, at most 8 KiB: all of a quantized run (16 short rows) or of a
     * 16-token page of fp32 rows. Only the first 4 KiB of a page (the driver's block-head
     * rule then) left paged fp32 decode at 47 ms against 36 ms for the whole page
     * (decode-long-paged16, docs/PERFORMANCE.md "KV caches"): a page run is short and
     * nothing else fetches its second half early. */
    int64_t budget = 8192;
    for (int64_t r = 0; r < n && budget > 0; r++)
        for (int64_t off = 0; off < rowb && budget > 0; off += 64, budget -= 64) {
            /* 64-byte lines (x86-64, arm64), into L1 or L2 as internal.h's
             * sdpa_prefetch_l1 says for this core (the driver's block heads do the same) */
            if (sdpa_prefetch_l1)
                __builtin_prefetch(row + r * step + off, 0, 3);
            else
                __builtin_prefetch(row + r * step + off, 0, 2);
        }
}

/* Whole pages of K or V (their codes) in the kernels' prefetch distance: 0 when a page is
 * longer. */
static int64_t pages_ahead(const plan *pl, int which) {
    const sdpa_problem *p = &pl->p;
    const int64_t rowb = (which ? p->Dv : p->Dk) * sdpa_kv_bits(which ? p->vt : p->kt) / 8;
    return (int64_t)SDPA_PREFETCH_AHEAD / (p->pages.page_size * max64(rowb, 1));
}

void kv_prefetch_pages(const plan *pl, const rows *it, int which, int64_t j, int64_t end,
                       int cold) {
    const int64_t ps = pl->p.pages.page_size;
    /* pages ahead: the kernels' prefetch distance in whole pages, at least one, at most
     * 8 (a page of int4 rows at Dk = 128 is 1 KiB) */
    const int64_t dist = max64(1, min64(8, pages_ahead(pl, which)));
    for (int64_t k = cold ? 1 : dist; k <= dist; k++) {
        const int64_t t = (j / ps + k) * ps;
        if (t >= end)
            break;
        kv_prefetch_run(pl, it, which, t, end);
    }
}

int kv_pages_in_step(const plan *pl, int which) {
    return pl->p.pages.block_table && pages_ahead(pl, which) >= 1;
}

const char *kv_page_ahead(const plan *pl, const rows *it, int which, int64_t j, int64_t end,
                          int *n) {
    const int64_t ps = pl->p.pages.page_size;
    /* at most 64 pages on: one-token pages of short rows (SGLang's) */
    const int64_t t = (j / ps + min64(64, pages_ahead(pl, which))) * ps;
    *n = 0;
    if (t >= end)
        return NULL;
    const char *row;
    *n = (int)kv_run(pl, it, which, t, end, &row); /* one page: at most the distance's rows */
    return row;
}

int kv_rows_at(const plan *pl, const rows *it, int which, int64_t j0, int n, int64_t end,
               const void **at) {
    const sdpa_problem *p = &pl->p;
    const int64_t *st = which ? p->vs : p->ks;
    const int64_t eb = sdpa_kv_bits(which ? p->vt : p->kt) / 8; /* f32/f16/bf16 only */
    const int64_t stop = min64(end, j0 + n + pl->at_ahead[which]), P = p->pages.page_size;
    const int32_t *table = p->pages.block_table + it->b * p->pages.stride;
    const char *head = (const char *)(which ? p->v : p->k) + it->hk * st[1] * eb;
    /* a page of two rows or more bounds the row stride (validate.c); one row's stride
     * is unbounded and never used */
    const int64_t step = P > 1 ? st[2] * eb : 0, page = st[0] * eb;
    const void **out = at;
    int64_t pg = j0 / P, r0 = j0 - pg * P; /* one division: then page after page */
    /* the addresses of sdpa_kv_row, four to a step where a page has them: one a step
     * ran at about a cycle an address, 5% of paged f16 decode's kernel time
     * (docs/PERFORMANCE.md, "Paged decode's row addresses") */
    for (int64_t j = j0; j < stop; pg++, r0 = 0) {
        const int64_t len = min64(stop - j, P - r0);
        const char *row = head + (int64_t)table[pg] * page + r0 * step;
        int64_t r = 0;
        for (; r + 4 <= len; r += 4) {
            out[r] = row + r * step;
            out[r + 1] = row + (r + 1) * step;
            out[r + 2] = row + (r + 2) * step;
            out[r + 3] = row + (r + 3) * step;
        }
        for (; r < len; r++)
            out[r] = row + r * step;
        out += len;
        j += len;
    }
    return (int)(stop - j0 - n);
}

int kv_in_place(const plan *pl, int which) {
    const sdpa_problem *p = &pl->p;
    return !p->pages.block_table && !sdpa_dtype_quantized(which ? p->vt : p->kt);
}

vrows kv_block(const plan *pl, const rows *it, const scratch *w, int which, int64_t j0, int n) {
    const sdpa_problem *p = &pl->p;
    const sdpa_dtype dt = which ? p->vt : p->kt;
    const int64_t D = which ? p->Dv : p->Dk;
    const int64_t ld = (which ? p->vs : p->ks)[2];
    const char *first = sdpa_kv_row(p, which, it->b, it->hk, it->seq.kv0, j0);
    if (!sdpa_dtype_quantized(dt)) {
        const int64_t P = p->pages.page_size;
        if (!p->pages.block_table || j0 / P == (j0 + n - 1) / P)
            return (vrows){first, ld, dt};
        const size_t bytes = (size_t)D * sdpa_dtype_size(dt);
        char *dst = (char *)(which ? w->vg : w->kg);
        for (int j = 0; j < n; j++)
            memcpy(dst + (size_t)j * bytes, sdpa_kv_row(p, which, it->b, it->hk, 0, j0 + j),
                   bytes);
        return (vrows){dst, D, dt};
    }
    float *dst = which ? w->vg : w->kg;
    /* Ask for every line of the block's rows before dequantizing the first: a row of
     * codes is a few lines (128 int8 codes: 2), too short for the hardware prefetchers
     * to run ahead within it, and a paged block jumps between pages they cannot follow,
     * so the misses are issued together here instead of one row at a time. */
    const size_t rowb = (size_t)(D * sdpa_kv_bits(dt) / 8);
    for (int j = 0; j < n; j++) {
        const char *row = j == 0 ? first : sdpa_kv_row(p, which, it->b, it->hk, it->seq.kv0, j0 + j);
        for (size_t off = 0; off < rowb; off += 64) { /* as kv_prefetch_run */
            if (sdpa_prefetch_l1)
                __builtin_prefetch(row + off, 0, 3);
            else
                __builtin_prefetch(row + off, 0, 2);
        }
    }
    dequant_rows(pl, it, w, which, j0, n, dst);
    return (vrows){(const char *)dst, D, SDPA_F32};
}
