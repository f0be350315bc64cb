/*
 * kvcache.c - K and V as engines keep them (include/sdpa.h, "KV caches"): rows read
 * through a block table of pages, stored quantized with strided scales. It holds the
 * driver's block gather (a block of keys as the tiles read it) and sdpa_kv_write, the
 * quantizer that writes a cache exactly as the kernels read it. It is not a kernel: the
 * per-row dequantization is the table's `dequant` (kernels/kvq.h, compiled per ISA).
 *
 * A block of n <= Bc keys reaches the tiles one of three ways:
 *   - in place, as before: a plain view, or a paged one whose block lies in one page
 *     (rows stride_t apart, the dtype as stored);
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
