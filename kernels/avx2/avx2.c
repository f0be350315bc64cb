/*
 * avx2.c - the AVX2 + FMA kernel table (with F16C for fp16 storage): the x86 tile
 * functions of kernels/x86/tiles.h compiled for 8-float ymm vectors (16 registers,
 * vmaskmovps tails, 2^n built in the exponent field in the exp), and this ISA's choices:
 * its tile sizes, its register tiles and pv's chunking.
 *
 * It is the fast path on x86-64 CPUs with AVX2 and FMA but no usable AVX-512
 * (src/dispatch.c decides). It holds no tile code: the functions are tiles.h's, the
 * intrinsics kernels/x86/vec_avx2.h's.
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels/avx2/ needs -mavx2 -mfma -mf16c (Makefile ISAFLAGS_avx2)"
#endif

#include "../x86/vec_avx2.h"

/* pv's chunks of Dv (tiles.h, x86_pv): 2 vectors (16 floats), the most a tile of 6 rows
 * holds in 16 registers, and for an odd vector count a last chunk of 1. For few rows
 * (decode) the first chunk's first tile prefetches whole V rows ahead, so the chunks
 * after it, which read the same rows a line at a time, hit cache. */
/* Decode's chunks (Dv = 128: 8 chunks of 2 vectors, each reading one 64-byte line of
 * every row) run span by span in one tile call (pv_6x2v_spans), PV_CHUNK_SPAN_BYTES =
 * 4 KiB of whole V rows a span (8 keys at fp32, Dv = 128), so the chunks after the
 * first find the span in L1, where chunk after chunk over a 64-key block found it in L2
 * at best. The span stays below the whole-row prefetch distance (SDPA_PREFETCH_AHEAD,
 * 8 KiB), so the first chunk prefetches later spans' rows, not its own. Measured on AMD
 * Zen 4 (docs/PERFORMANCE.md, "AVX2's decode chunks span by span"): 8 and 16 KiB spans
 * read V from DRAM slower, 2 KiB and less cost more a key in cache. */
/* qk_rows runs in passes of QKR_MR = 4 rows (qkr_4rows, the rest by qkr_1row ..
 * qkr_3rows): its 8 accumulators, the K and Q slices and the tree's vectors fit 16
 * registers. */
/* pv_q's chunks of a quantized V: 2 vectors, as pv's, in pvq tiles of 6 rows, whatever
 * the row count. pv_6x2v holds a GQA group of up to 6 rows in one tile. */
enum { PV_CMAX = 2, PV_WIDE_CMAX = 2, PVQ_FEW_M = 0, PVQ_CMAX_FEW = 2, PVQ_CMAX = 2,
       PVQ_UNSC_WHOLE = 0 /* 16 registers: no 32-accumulator tile */,
       PV_PF_WHOLE_ROWS = 1, PV_CHUNK_SPAN_BYTES = 4096, QKR_MR = 4,
       PV_WIDE_TILE_ROWS = 6 /* pv_6x2v */ };

/* Decode's chunks run span by span whatever the rows and V's view (tiles.h,
 * pv_chunks): pv_6x2v_spans where its nest holds them, else pv_6x2v's spans. */
static inline int pv_spans_ok(int m, int nchunk, int nest) {
    (void)m;
    (void)nchunk;
    (void)nest;
    return 1;
}

/* softmax's exp loop unrolled by Bc / VL = 64 / 8 vectors: one block row of scores. */
#define UNROLL_BC _Pragma("GCC unroll 8")

#include "../x86/tiles.h"

static void pv_chunk(int nv, const pv_chunk_args *a) {
    if (nv == 1) /* a lone 8-wide chunk: Dv <= 8 or the last of an odd count */
        pv_12x1v(a);
    else if (pv_nest_fits(a, 8)) /* decode's chunks together: PV_CHUNK_SPAN_BYTES */
        pv_6x2v_spans(a);
    else
        pv_6x2v(a);
}

static void pvq_chunk(int nv, const pv_chunk_args *a) {
    if (nv == 1)
        pvq_6x1v(a);
    else
        pvq_6x2v(a);
}

/* Br = 96, a multiple of every row tile (12, 6), and near Bc = 64, which the skip
 * counters' tests assume. */
const sdpa_kernels sdpa_kernels_avx2 = {
    .isa = SDPA_ISA_AVX2, .name = "avx2", .br = 96, .bc = 64, .kp_align = VL,
    .kp_split = 2 * VL, /* pack_k_dt's panels of 2 VL keys (kernels/x86/tiles.h) */
    .pack_k = x86_pack_k, .qk = qk_6x2v, .qk_rows = x86_qk_rows,
    .softmax = x86_softmax, .pv = x86_pv, .vexp = x86_vexp, .dequant = kvq_dequant,
    .qk_rows_q = x86_qk_rows_q, .pv_q = x86_pv_q, .qk_rows_at = x86_qk_rows_at,
    .pv_at = x86_pv_at,
};
