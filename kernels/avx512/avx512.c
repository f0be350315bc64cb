/*
 * avx512.c - the AVX-512 kernel table (AVX512F/BW/DQ/VL + FMA + F16C): the x86 tile
 * functions of kernels/x86/tiles.h compiled for 16-float zmm vectors (32 registers,
 * k-mask tails, vscalefps in the exp), and this ISA's choices: its tile sizes, its
 * register tiles and pv's chunking.
 *
 * It is the fast path on CPUs with AVX-512 and OS-enabled ZMM state (src/dispatch.c
 * decides). It holds no tile code: the functions are tiles.h's, the intrinsics
 * kernels/x86/vec_avx512.h's.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) ||        \
    !defined(__AVX512VL__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels/avx512/ needs -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c"
#endif

#include "../x86/vec_avx512.h"

/* pv's chunks of Dv (tiles.h, x86_pv). Many rows (prefill): at most 4 vectors, half a V
 * row of 128 per tile, so a V block reused by every row tile stays in L1; wider chunks,
 * in tiles of fewer rows, re-read each block of V from L2 once per tile. Few rows
 * (decode, m <= PV_WIDE_M): up to 8 vectors, so a tile reads V rows whole, in address
 * order (Dv = 128 in one chunk), which keeps V streaming from DRAM; tiles on half rows
 * were slower there, even with whole rows prefetched ahead. Each tile prefetches its
 * own columns. Measurements: docs/PERFORMANCE.md, "Kernel measurements". */
/* qk_rows runs in passes of QKR_MR = 8 rows (qkr_8rows, the rest by qkr_1row ..
 * qkr_7rows): a GQA group of 8 heads reads K once. */
/* pv_q's chunks of a quantized V, so that one pvq tile holds all rows of a decode item
 * and decodes each V vector once per key: up to PVQ_FEW_M = 4 rows (a GQA group of 4),
 * 4 vectors (pvq_4xNv; at Dv = 128 int8 one 64-byte line per chunk, faster than chunks
 * of 3: docs/PERFORMANCE.md, "KV caches"); more rows, 3 (pvq_8xNv, 24 accumulators). */
/* A GQA group of 4 (PV_FEW_M rows) runs one tile for its rows, so each V row is read
 * and widened once a key: pv_4x8v at Dv = 128 (any V storage) and, on a 16-bit V,
 * pv_4x7v at Dv = 97..112, instead of pv_3x8v's or pv_3x7v's 3 rows and a 1-row tile
 * over the same V again. An fp32 V at Dv = 97..112 keeps those (pv_4x7v's spills cost
 * more than the second loads there: docs/PERFORMANCE.md, "pv for a GQA group of 4 in
 * one tile"). */
/* An int8 V read unscaled (tiles.h, pv_factored) by a GQA group of 4 at Dv = 128 runs
 * in one chunk (PVQ_UNSC_WHOLE, pvq_4x8v_i8), as pv_4x8v does for the other storage. */
/* A GQA group of up to 4 rows at Dv = 256 (two chunks of 8 vectors, no Dv tail, V rows
 * at one stride) runs its chunks span by span in one call (pv_4x8v_spans,
 * PV_CHUNK_SPAN_BYTES = 8 KiB of whole V rows a span), each chunk prefetching its own
 * columns: chunk after chunk over a 64-key block read half of every V row a pass, the
 * second pass from L2 at best. Measured on AMD Zen 4 (docs/PERFORMANCE.md, "Decode at
 * Dv = 256 span by span"): from DRAM 14-20% faster on 1 thread, with V in L2 or L3 3-8%
 * slower (each span loads and stores the accumulators); 16 KiB spans and whole rows
 * prefetched by the first chunk were slower from DRAM; at Dv = 512 (4 chunks, 4 fp32
 * keys a span) 14% faster from DRAM but 18% slower in L3, so those keep their chunks. */
enum { PV_CMAX = 4, PV_WIDE_CMAX = 8, PVQ_FEW_M = 4, PVQ_CMAX_FEW = 4, PVQ_CMAX = 3,
       PVQ_UNSC_WHOLE = 1, PV_FEW_M = 4, PV_PF_WHOLE_ROWS = 0, PV_CHUNK_SPAN_BYTES = 8192,
       QKR_MR = 8,
       PV_WIDE_TILE_ROWS = 3 /* pv_3x8v, pv_3x7v */ };

/* Whether decode's nchunk chunks of m rows run span by span (tiles.h, pv_chunks; nest:
 * no Dv tail, V rows at one stride): as the comment above says. */
static inline int pv_spans_ok(int m, int nchunk, int nest) {
    return nest && m <= PV_FEW_M && nchunk == 2;
}

/* softmax's exp loop unrolled by Bc / VL = 64 / 16 vectors: one block row of scores. */
#define UNROLL_BC _Pragma("GCC unroll 4")

#include "../x86/tiles.h"

/* 24 accumulators where the rows allow (tiles.h gives each tile's budget). */
static void pv_chunk(int nv, const pv_chunk_args *a) {
    switch (nv) {
    case 1: pv_12x1v(a); return;
    case 2: pv_12x2v(a); return;
    case 3: pv_8x3v(a); return;
    case 4: pv_6x4v(a); return;
    case 5: pv_4x5v(a); return;
    case 6: pv_4x6v(a); return;
    case 7:
        if (a->m == PV_FEW_M && a->dt != SDPA_F32)
            pv_4x7v(a);
        else
            pv_3x7v(a);
        return;
    case 8:
        if (pv_nest_fits(a, PV_FEW_M)) /* decode's chunks together: PV_CHUNK_SPAN_BYTES */
            pv_4x8v_spans(a);
        else if (a->m == PV_FEW_M)
            pv_4x8v(a);
        else
            pv_3x8v(a);
        return;
    default: /* x86_pv: a chunk has 1..PV_WIDE_CMAX = 8 vectors */
        __builtin_unreachable();
    }
}

static void pvq_chunk(int nv, const pv_chunk_args *a) {
    if (nv == PV_WIDE_CMAX) { /* only as PVQ_UNSC_WHOLE allows it: 4 rows, int8 unscaled */
        pvq_4x8v_i8(a);
        return;
    }
    if (a->m <= PVQ_FEW_M) {
        switch (nv) {
        case 1: pvq_4x1v(a); return;
        case 2: pvq_4x2v(a); return;
        case 3: pvq_4x3v(a); return;
        default: /* x86_pv_q: 1..PVQ_CMAX_FEW = 4 vectors */
            pvq_4x4v(a);
            return;
        }
    }
    switch (nv) {
    case 1: pvq_8x1v(a); return;
    case 2: pvq_8x2v(a); return;
    default: /* x86_pv_q: 1..PVQ_CMAX = 3 vectors */
        pvq_8x3v(a);
        return;
    }
}

/* Br = 96, a multiple of every row tile (12, 8, 6, 4, 3), and near Bc = 64, which the
 * skip counters' tests assume. */
const sdpa_kernels sdpa_kernels_avx512 = {
    .isa = SDPA_ISA_AVX512, .name = "avx512", .br = 96, .bc = 64, .kp_align = VL,
    .kp_split = 2 * VL, /* pack_k_dt's panels of 2 VL keys (kernels/x86/tiles.h) */
    .pack_k = x86_pack_k, .qk = qk_12x2v, .qk_rows = x86_qk_rows,
    .softmax = x86_softmax, .pv = x86_pv, .vexp = x86_vexp, .dequant = kvq_dequant,
    .qk_rows_q = x86_qk_rows_q, .pv_q = x86_pv_q, .qk_rows_at = x86_qk_rows_at,
    .pv_at = x86_pv_at,
};
