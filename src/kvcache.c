/*
 * kvcache.c - K and V as engines keep them (include/sdpa.h, "KV caches"): rows read
 * through a block table of pages, stored quantized with strided scales. It holds the
 * driver's block gather (a block of keys as the tiles read it) and sdpa_kv_write, the
 * quantizer that writes a cache exactly as the kernels read it. It is not a kernel: the
 * per-row dequantization is the table's `dequant` (kernels/kvq.h, compiled per ISA).
 *
 * A block of n <= Bc keys reaches the tiles one of four ways:
 *   - in place, as before: a plain view, or a paged one whose block lies in one page
 *     (rows stride_t apart, the dtype as stored);
 *   - in place page by page (kv_segment): decode's qk_rows and the unmasked pv of a
 *     paged, unquantized cache run once per page the block crosses. Both are exact per
 *     key in key order (qk_rows computes each score alone; pv adds keys one at a time
 *     after the one rescale, which only the first call applies), so the bits are those
 *     of one call on contiguous rows;
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

void sdpa_kv_row_scales(const sdpa_problem *p, int which, int64_t b, int64_t hk, int64_t kv0,
                        int64_t j, float *out) {
    const sdpa_scales *sc = which ? &p->vsc : &p->ksc;
    const int64_t D = which ? p->Dv : p->Dk, ng = D / sc->group;
    int64_t e;
    if (p->pages.block_table) {
        const int64_t P = p->pages.page_size;
        e = (int64_t)p->pages.block_table[b * p->pages.stride + j / P] * sc->stride_b +
            hk * sc->stride_h + (j % P) * sc->stride_t;
    } else {
        e = b * sc->stride_b + hk * sc->stride_h + (kv0 + j) * sc->stride_t;
    }
    for (int64_t g = 0; g < ng; g++)
        out[g] = sdpa_load_as_f32(sc->data, e + g, sc->dtype);
}

int64_t kv_segment(const plan *pl, const rows *it, int which, int64_t j, int64_t end,
                   const char **row) {
    const sdpa_problem *p = &pl->p;
    const int64_t P = p->pages.page_size;
    *row = sdpa_kv_row(p, which, it->b, it->hk, it->seq.kv0, j);
    return min64(end, (j / P + 1) * P) - j;
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
    const sdpa_scales *sc = which ? &p->vsc : &p->ksc;
    float *dst = which ? w->vg : w->kg;
    /* Ask for every line of the block's rows before dequantizing the first: a row of
     * codes is a few lines (128 int8 codes: 2), too short for the hardware prefetchers
     * to run ahead within it, and a paged block jumps between pages they cannot follow,
     * so the misses are issued together here instead of one row at a time. */
    const size_t rowb = (size_t)(D * sdpa_kv_bits(dt) / 8);
    for (int j = 0; j < n; j++) {
        const char *row = j == 0 ? first : sdpa_kv_row(p, which, it->b, it->hk, it->seq.kv0, j0 + j);
        for (size_t off = 0; off < rowb; off += 64) /* 64-byte lines: x86-64, arm64 */
            __builtin_prefetch(row + off, 0, 3);
    }
    /* scales that do not change from row to row (per tensor, per head) are read once */
    const int per_row = sc->stride_t != 0 || (p->pages.block_table && sc->stride_b != 0);
    for (int j = 0; j < n; j++) {
        if (j == 0 || per_row)
            sdpa_kv_row_scales(p, which, it->b, it->hk, it->seq.kv0, j0 + j, w->qsc);
        const char *row = j == 0 ? first : sdpa_kv_row(p, which, it->b, it->hk, it->seq.kv0, j0 + j);
        pl->kt->dequant((int)D, row, dt, w->qsc, (int)sc->group, dst + (size_t)j * (size_t)D);
    }
    return (vrows){(const char *)dst, D, SDPA_F32};
}
