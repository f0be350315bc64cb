/*
 * shim.c - the plain-C side of the benchmark (see shim.h): the shape suite, flop/byte
 * counts, the calls it times, the check against the reference (whole, or exact
 * sub-problems), the same for sdpa_linear, and the registry's usable ISAs.
 *
 * It holds no timing loop and no statistics (bench/bench.cc and tools/sdpa-run.c do
 * that), builds cases through common/case.h, and times only public calls, so what it
 * measures is what a user gets. Only sb_usable_isas reads an internal header (the ISA
 * registry; bench and sdpa-run link the static library).
 */
#include "shim.h"

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/internal.h"

/* A suite case: 64-byte-aligned heap buffers, the data stream of seed 1. */
#define SHAPE(nm, ...) {.name = nm, .c = {.guard = SC_GUARD_HUGE, .seed = 1, __VA_ARGS__}}
#define F16_ALL {SDPA_F16, SDPA_F16, SDPA_F16, SDPA_F16}
#define BF16_ALL {SDPA_BF16, SDPA_BF16, SDPA_BF16, SDPA_BF16}
/* A shape under bf16 compute (include/sdpa.h, SDPA_COMPUTE_BF16), timed on the best table
 * with bf16 tiles (or the best table, on its fp32 tiles, where none has them) beside
 * the fp32 rows of the same shape. */
#define BF16C(nm, ...)                                                                     \
    {.name = nm, .best_isa_only = 1,                                                       \
     .c = {.guard = SC_GUARD_HUGE, .seed = 1, .compute = SDPA_COMPUTE_BF16, __VA_ARGS__}}
/* The same, only in the full suite (as ENGINE_FULL below). */
#define BF16C_FULL(nm, ...)                                                                \
    {.name = nm, .best_isa_only = 1, .full_only = 1,                                       \
     .c = {.guard = SC_GUARD_HUGE, .seed = 1, .compute = SDPA_COMPUTE_BF16, __VA_ARGS__}}
/* A shape engines run, timed on the best ISA only in the default suite (every ISA in the
 * full one): the suite stays under its budget with them. */
#define ENGINE(nm, ...)                                                                    \
    {.name = nm, .best_isa_only = 1, .c = {.guard = SC_GUARD_HUGE, .seed = 1, __VA_ARGS__}}
/* An engine shape only the full suite times: each KV-cache shape of decode-long's size
 * costs the default suite ~3 s of set-up and check (512 MiB of data, a quantizing write,
 * a whole reference call) besides its timed runs. */
#define ENGINE_FULL(nm, ...)                                                               \
    {.name = nm, .best_isa_only = 1, .full_only = 1,                                       \
     .c = {.guard = SC_GUARD_HUGE, .seed = 1, __VA_ARGS__}}

/* K and V stored as engines keep them (include/sdpa.h, "KV caches"): Q and O fp32 */
#define KV_I8 {SDPA_F32, SDPA_I8, SDPA_I8, SDPA_F32}
#define KV_I4 {SDPA_F32, SDPA_I4, SDPA_I4, SDPA_F32}
#define KV_E4M3 {SDPA_F32, SDPA_FP8_E4M3, SDPA_FP8_E4M3, SDPA_F32}
#define KV_E5M2 {SDPA_F32, SDPA_FP8_E5M2, SDPA_FP8_E5M2, SDPA_F32}

/* batched-decode's caches: a mix of long and short sequences, up to Tkv = 8192 */
static const int64_t batched_lens[16] = {8192, 300,  4096, 1024, 7000, 64,  2048, 8192,
                                         512,  3000, 6144, 128,  5000, 8192, 1500, 256};

/* prefill-causal is the shape of DESIGN.md section 7's "what we must beat" figures;
 * decode-long's K/V (512 MiB) is far beyond the 32 MiB L3 of the project's machine.
 * causal-1k and window-8k share long-causal's heads and dims: a window of 512 keys at
 * T = 8192 does the work per row of causal T = 1024 (512 keys on average) on 8x the
 * rows, so its time should be ~8x causal-1k's, far below long-causal's. */
const sb_shape sb_suite[] = {
    SHAPE("prefill-causal", .B = 1, .Hq = 32, .Hkv = 32, .Tq = 2048, .Tkv = 2048, .Dk = 128,
          .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    SHAPE("prefill", .B = 4, .Hq = 12, .Hkv = 12, .Tq = 512, .Tkv = 512, .Dk = 64, .Dv = 64),
    SHAPE("decode-gqa", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 4096, .Dk = 128, .Dv = 128),
    SHAPE("decode-long", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
          .Dv = 128),
    SHAPE("decode-long-f16", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
          .Dv = 128, .dt = F16_ALL),
    SHAPE("long-causal", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 8192, .Tkv = 8192, .Dk = 128,
          .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    /* the bf16 compute mode on the shapes above; decode with a bf16 cache */
    BF16C("prefill-causal-bf16", .B = 1, .Hq = 32, .Hkv = 32, .Tq = 2048, .Tkv = 2048,
          .Dk = 128, .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    BF16C("prefill-bf16", .B = 4, .Hq = 12, .Hkv = 12, .Tq = 512, .Tkv = 512, .Dk = 64, .Dv = 64),
    BF16C("long-causal-bf16", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 8192, .Tkv = 8192, .Dk = 128,
          .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    BF16C("decode-long-bf16", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
          .Dv = 128, .dt = BF16_ALL),
    SHAPE("causal-1k", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 1024, .Tkv = 1024, .Dk = 128,
          .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    SHAPE("window-8k", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 8192, .Tkv = 8192, .Dk = 128,
          .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT, .window = 1, .wl = 511, .wr = 0),
    SHAPE("seed", .B = 2, .Hq = 2, .Hkv = 2, .Tq = 11, .Tkv = 11, .Dk = 4, .Dv = 4,
          .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    /* the shapes engines run: the head dims of Gemma, Phi, Llama, Qwen (64 .. 256) and
     * Gemma 4 (512) on one causal prefill */
    ENGINE("causal-d64", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 2048, .Tkv = 2048, .Dk = 64, .Dv = 64,
           .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    ENGINE("causal-d80", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 2048, .Tkv = 2048, .Dk = 80, .Dv = 80,
           .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    ENGINE("causal-d96", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 2048, .Tkv = 2048, .Dk = 96, .Dv = 96,
           .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    ENGINE("causal-d112", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 2048, .Tkv = 2048, .Dk = 112,
           .Dv = 112, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    ENGINE("causal-d256", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 2048, .Tkv = 2048, .Dk = 256,
           .Dv = 256, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    ENGINE("causal-d512", .B = 1, .Hq = 4, .Hkv = 4, .Tq = 2048, .Tkv = 2048, .Dk = 512,
           .Dv = 512, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    /* DeepSeek's MLA decode: 128 query heads on one latent cache of 576 (512 + 64 rope)
     * per token, V the first 512 columns of K (a view of the same memory) */
    ENGINE("mla-decode", .B = 1, .Hq = 128, .Hkv = 1, .Tq = 1, .Tkv = 4096, .Dk = 576,
           .Dv = 512, .v_in_k = 1),
    /* a 512-row chunk of prefill against a 16k cache, causal (bottom-right) */
    ENGINE("chunked-prefill", .B = 1, .Hq = 8, .Hkv = 2, .Tq = 512, .Tkv = 16384, .Dk = 128,
           .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    /* decode-long over a cache kept tokens-major, [B, T, Hkv, D] (llama.cpp's cache, the
     * layout the K and V projections write): each token's KV heads side by side */
    ENGINE("decode-long-bthd", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
           .Dv = 128, .layout = SC_BTHD),
    /* decode at Gemma's head dim (Gemma 2 9B, Gemma 3 12B: 16 query heads over 8 KV heads
     * of 256) against a 32k f16 cache, 256 MiB: V's rows take two of AVX-512's decode
     * chunks (kernels/avx512/avx512.c, pv_spans_ok) */
    ENGINE_FULL("decode-d256-f16", .B = 1, .Hq = 16, .Hkv = 8, .Tq = 1, .Tkv = 32768,
                .Dk = 256, .Dv = 256, .dt = F16_ALL),
    /* 16 sequences decoding at once against caches of mixed lengths */
    ENGINE("batched-decode", .B = 16, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 8192, .Dk = 128,
           .Dv = 128, .kv_lens = batched_lens),
    /* a long prefill: 32k keys, causal */
    ENGINE("long-prefill-32k", .B = 1, .Hq = 1, .Hkv = 1, .Tq = 32768, .Tkv = 32768, .Dk = 128,
           .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT),
    /* decode-long and chunked-prefill over the caches engines keep: a pool of 16-token
     * pages in shuffled order (vLLM's block size), int8 with a scale per token and head
     * (OpenVINO, ONNX Runtime), int4 in groups of 32 with f16 scales (llama.cpp's q4_0),
     * fp8 e4m3 and e5m2 with a calibrated scale per head (vLLM, SGLang). Against their
     * contiguous shapes they show what paging costs and what fewer bytes per key buy. The
     * default suite keeps paging (fp32), int8, int4 and the paged int8 prefill; f16
     * paging and fp8 (other dequantizations of the same byte count as int8) are the full
     * suite's. */
    ENGINE("decode-long-paged16", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
           .Dv = 128, .page = 16),
    ENGINE("decode-long-f16-paged16", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536,
           .Dk = 128, .Dv = 128, .dt = F16_ALL, .page = 16),
    ENGINE("decode-long-int8", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
           .Dv = 128, .dt = KV_I8, .qscale = SC_QS_ROW),
    ENGINE("decode-long-int4", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
           .Dv = 128, .dt = KV_I4, .qscale = SC_QS_ROW, .qgroup = 32, .qscale_dt = SDPA_F16),
    ENGINE("decode-long-fp8", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536,
           .Dk = 128, .Dv = 128, .dt = KV_E4M3, .qscale = SC_QS_HEAD),
    ENGINE("decode-long-fp8-e5m2", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536,
           .Dk = 128, .Dv = 128, .dt = KV_E5M2, .qscale = SC_QS_HEAD),
    ENGINE("chunked-prefill-int8-paged16", .B = 1, .Hq = 8, .Hkv = 2, .Tq = 512, .Tkv = 16384,
           .Dk = 128, .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT, .dt = KV_I8,
           .qscale = SC_QS_ROW, .page = 16),
    /* the bf16 compute mode over the same caches: a bf16 model's decode over vLLM's
     * paged bf16 cache, and over an int8 one (full suite) */
    BF16C("decode-long-bf16-paged16", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536,
          .Dk = 128, .Dv = 128, .dt = BF16_ALL, .page = 16),
    BF16C_FULL("decode-long-int8-bf16", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536,
               .Dk = 128, .Dv = 128, .dt = KV_I8, .qscale = SC_QS_ROW),
};
const int sb_suite_len = (int)(sizeof sb_suite / sizeof sb_suite[0]);

const sb_shape *sb_find_shape(const char *name) {
    for (int i = 0; i < sb_suite_len; i++)
        if (strcmp(sb_suite[i].name, name) == 0)
            return &sb_suite[i];
    return NULL;
}

/* ---- counts ------------------------------------------------------------------------ */

static int64_t kv_len(const sc_case *c, int64_t b) { return c->kv_lens ? c->kv_lens[b] : c->Tkv; }

/* Keys [lo, hi) row i sees among tkv keys (sdpa.h's rule, an explicit mask aside);
 * hi == lo when none. */
static void row_range(const sc_case *c, int64_t tkv, int64_t i, int64_t *lo, int64_t *hi) {
    const int64_t d = i + (c->causal == SDPA_CAUSAL_TOP_LEFT ? 0 : tkv - c->Tq);
    int64_t a = 0, e = tkv;
    if (c->causal != SDPA_CAUSAL_NONE && d + 1 < e)
        e = d + 1;
    if (c->window) { /* |d| and the extents stay far below 2^62: no overflow */
        if (d - c->wl > a)
            a = d - c->wl;
        if (d + c->wr + 1 < e)
            e = d + c->wr + 1;
    }
    *lo = a;
    *hi = e > a ? e : a;
}

/* Visible scores of rows [i0, i0 + rows) of one head of batch entry b, row by row. */
static double visible_rows(const sc_case *c, int64_t b, int64_t i0, int64_t rows) {
    const int64_t tkv = kv_len(c, b);
    if (c->causal == SDPA_CAUSAL_NONE && !c->window)
        return (double)rows * (double)tkv;
    double n = 0.0;
    for (int64_t i = i0; i < i0 + rows; i++) {
        int64_t lo, hi;
        row_range(c, tkv, i, &lo, &hi);
        n += (double)(hi - lo);
    }
    return n;
}

double sb_visible_scores(const sc_case *c) {
    if (!c->kv_lens) /* every entry alike */
        return (double)c->B * (double)c->Hq * visible_rows(c, 0, 0, c->Tq);
    double n = 0.0;
    for (int64_t b = 0; b < c->B; b++)
        n += (double)c->Hq * visible_rows(c, b, 0, c->Tq);
    return n;
}

double sb_flops(const sc_case *c) { return 2.0 * (double)(c->Dk + c->Dv) * sb_visible_scores(c); }

/* Bytes of one element of K or V as stored: int4 packs two in a byte. */
static double kv_elem_bytes(sdpa_dtype t) {
    switch (t) {
    case SDPA_I8:
    case SDPA_FP8_E4M3:
    case SDPA_FP8_E5M2:
        return 1.0;
    case SDPA_I4:
        return 0.5;
    default:
        return (double)sc_dtype_size(t);
    }
}

static int kv_quantized(sdpa_dtype t) { return t >= SDPA_I8 && t <= SDPA_I4; }

/* Scale elements one K/V head's row of D channels carries in a quantized case
 * (common/case.h's granularities): D / group per token and head for SC_QS_ROW, none per
 * row for the others, whose Hkv or 1 scales are counted once per call. */
static double row_scales(const sc_case *c, int64_t D) {
    return c->qscale == SC_QS_ROW ? (double)(D / (c->qgroup ? c->qgroup : D)) : 0.0;
}

double sb_kv_bytes(const sc_case *c) {
    double rows = 0.0, table = 0.0;
    for (int64_t b = 0; b < (c->kv_lens ? c->B : 1); b++) {
        /* lo and hi never decrease with i, so the keys some row sees are
         * [lo of the first row that sees any, hi of the last one) */
        const int64_t tkv = kv_len(c, b);
        int64_t first = -1, last = -1;
        for (int64_t i = 0; i < c->Tq; i++) {
            int64_t lo, hi;
            row_range(c, tkv, i, &lo, &hi);
            if (hi > lo) {
                if (first < 0)
                    first = lo;
                last = hi;
            }
        }
        const double entries = c->kv_lens ? 1.0 : (double)c->B;
        if (first >= 0) {
            rows += (double)(last - first) * entries;
            if (c->page > 0) /* the block-table entries of the pages those keys are on */
                table += (double)((last - 1) / c->page - first / c->page + 1) * entries;
        }
    }
    /* V inside K (MLA) reads no bytes of its own */
    const int nops = c->v_in_k ? 1 : 2;
    const int64_t dims[2] = {c->Dk, c->Dv};
    double per_row = 0.0, per_call = table * sizeof(int32_t);
    for (int i = 0; i < nops; i++) {
        per_row += (double)dims[i] * kv_elem_bytes(c->dt[1 + i]);
        if (kv_quantized(c->dt[1 + i])) {
            const double ses = (double)sc_dtype_size(c->qscale_dt);
            per_row += row_scales(c, dims[i]) * ses;
            per_call += c->qscale == SC_QS_HEAD ? (double)c->Hkv * ses
                        : c->qscale == SC_QS_TENSOR ? ses
                                                    : 0.0;
        }
    }
    return rows * (double)c->Hkv * per_row + (rows > 0.0 ? per_call : 0.0);
}

/* Speculative decoding verifies up to ~16 tokens at once; beyond that it is prefill. */
int sb_is_decode(const sc_case *c) { return c->Tq <= 16 && c->Tkv >= 64 * c->Tq; }

int sb_is_kv_cache(const sc_case *c) {
    return c->page > 0 || kv_quantized(c->dt[1]) || kv_quantized(c->dt[2]);
}

int sb_is_plain(const sc_case *c) {
    for (int i = 0; i < 4; i++)
        if (c->dt[i] != SDPA_F32)
            return 0;
    return c->page == 0 && c->causal != SDPA_CAUSAL_TOP_LEFT && !c->window &&
           c->softcap == 0.0f && !c->alibi && !c->sinks && c->mask == SDPA_MASK_NONE &&
           c->lens == SC_LENS_NONE && !c->kv_lens && c->dropout == 0.0f &&
           c->compute == SDPA_COMPUTE_F32;
}

const char *sb_case_str(const sc_case *c, char *buf, int n) {
    static const char *const dtypes[] = {"fp32", "f16", "bf16", "int8", "fp8-e4m3",
                                         "fp8-e5m2", "int4"};
    int len = snprintf(buf, (size_t)n, "B=%lld Hq=%lld Hkv=%lld Tq=%lld Tkv=%lld Dk=%lld Dv=%lld",
                       (long long)c->B, (long long)c->Hq, (long long)c->Hkv, (long long)c->Tq,
                       (long long)c->Tkv, (long long)c->Dk, (long long)c->Dv);
    /* Each piece is appended while room is left; snprintf truncates the last one. */
#define ADD(...)                                                                     \
    do {                                                                             \
        if (len >= 0 && len < n)                                                     \
            len += snprintf(buf + len, (size_t)(n - len), __VA_ARGS__);              \
    } while (0)
    if (c->causal)
        ADD(" causal%s", c->causal == SDPA_CAUSAL_TOP_LEFT ? " (top-left)" : "");
    const sdpa_dtype *dt = c->dt;
    if (dt[0] == dt[1] && dt[0] == dt[2] && dt[0] == dt[3]) {
        if (dt[0] != SDPA_F32)
            ADD(", %s", dtypes[dt[0]]);
    } else if (dt[0] == dt[3] && dt[1] == dt[2]) {
        ADD(", Q/O %s, K/V %s", dtypes[dt[0]], dtypes[dt[1]]);
    } else {
        ADD(", Q %s, K %s, V %s, O %s", dtypes[dt[0]], dtypes[dt[1]], dtypes[dt[2]],
            dtypes[dt[3]]);
    }
    if (c->layout == SC_BTHD)
        ADD(", tokens-major [B, T, H, D]");
    if (kv_quantized(dt[1]) || kv_quantized(dt[2])) {
        const char *sdt = dtypes[c->qscale_dt];
        if (c->qscale == SC_QS_HEAD)
            ADD(" (%s scales, one per head)", sdt);
        else if (c->qscale == SC_QS_TENSOR)
            ADD(" (one %s scale)", sdt);
        else if (c->qgroup)
            ADD(" (%s scales, one per token, head and %lld channels)", sdt,
                (long long)c->qgroup);
        else
            ADD(" (%s scales, one per token and head)", sdt);
    }
    if (c->page > 0)
        ADD(", %lld-token pages", (long long)c->page);
    if (c->compute == SDPA_COMPUTE_BF16)
        ADD(", bf16 compute");
    if (c->window)
        ADD(", window (%lld,%lld)", (long long)c->wl, (long long)c->wr);
    if (c->softcap > 0.0f)
        ADD(", softcap %g", (double)c->softcap);
    if (c->alibi)
        ADD(", alibi");
    if (c->sinks)
        ADD(", sinks");
    if (c->mask != SDPA_MASK_NONE)
        ADD(", %s mask", c->mask == SDPA_MASK_BOOL ? "bool" : "float");
    if (c->kv_lens) {
        ADD(", kv_lens");
        for (int64_t b = 0; b < c->B; b++)
            ADD("%s%lld", b ? "," : " ", (long long)c->kv_lens[b]);
    }
#undef ADD
    return buf;
}

/* ---- the calls ------------------------------------------------------------------- */

sdpa_status sb_run_fused(const sc_tensors *t, sdpa_isa isa, int threads, sdpa_stats *stats) {
    sdpa_desc d = t->desc;
    d.isa = (int)isa;
    d.num_threads = threads;
    d.stats = stats;
    return sdpa_forward(&d, &t->q, &t->k, &t->v, &t->o, NULL);
}

sdpa_status sb_run_reference(const sc_tensors *t, sdpa_stats *stats) {
    sdpa_desc d = t->desc;
    d.stats = stats;
    return sdpa_reference(&d, &t->q, &t->k, &t->v, &t->o, NULL);
}

/* ---- the check ------------------------------------------------------------------- */

/* How a piece becomes a problem of its own (shim.h, sb_piece_exact): its causal mode and
 * its keys [0, *len_kv) (0: no row of the piece sees a key). Returns 0 if no exact one. */
static int piece_frame(const sdpa_desc *d, const sb_piece *pc, int *causal, int64_t *len_kv) {
    *causal = SDPA_CAUSAL_NONE;
    *len_kv = 0;
    if (d->dropout_p != 0.0f || d->q_lens || d->cu_seqlens_q)
        return 0;
    const int64_t tkv = d->kv_lens ? d->kv_lens[pc->b] : d->len_kv;
    const int64_t off = d->causal == SDPA_CAUSAL_TOP_LEFT ? 0 : tkv - d->len_q;
    const sc_case geometry = {.Tq = d->len_q, .causal = d->causal, .window = d->window,
                              .wl = d->window_left, .wr = d->window_right};
    int64_t seen_hi = 0; /* keys the piece's rows see lie below this */
    for (int64_t i = pc->i0; i < pc->i0 + pc->rows; i++) {
        int64_t lo, hi;
        row_range(&geometry, tkv, i, &lo, &hi);
        if (hi > lo && hi > seen_hi)
            seen_hi = hi;
    }
    if (seen_hi == 0) /* the answer is zeros */
        return 1;
    if (d->causal == SDPA_CAUSAL_NONE && !d->window && !d->alibi_slopes) { /* d(i) unused */
        *len_kv = tkv;
        return 1;
    }
    if (d->causal == SDPA_CAUSAL_TOP_LEFT && pc->i0 == 0) { /* a top-left prefix */
        *causal = SDPA_CAUSAL_TOP_LEFT;
        *len_kv = tkv;
        return 1;
    }
    const int64_t end = pc->i0 + pc->rows + off; /* keeps d(i) under bottom-right */
    if (end < seen_hi || end > tkv)
        return 0;
    *causal = d->causal == SDPA_CAUSAL_NONE ? SDPA_CAUSAL_NONE : SDPA_CAUSAL_BOTTOM_RIGHT;
    *len_kv = end;
    return 1;
}

int sb_piece_exact(const sc_tensors *t, const sb_piece *pc) {
    int causal;
    int64_t len_kv;
    return piece_frame(&t->desc, pc, &causal, &len_kv);
}

/* Byte offset of element e of a K/V view of dtype t (e even for int4, whose strides are). */
static size_t kv_offset(int64_t e, sdpa_dtype t) {
    return t == SDPA_I4 ? (size_t)e / 2 : (size_t)e * (size_t)kv_elem_bytes(t);
}

/* A piece's K or V (view *in, scales *sin) at (b, hk): a contiguous cache's view and
 * scales start at element (b, hk, 0); a paged pool keeps its pages (b reaches them
 * through the table) and starts at head hk, and so do its scales. */
static void piece_kv(const sc_tensors *t, const sdpa_tensor *in, const sdpa_scales *sin,
                     int64_t b, int64_t hk, sdpa_tensor *out, sdpa_scales *sout) {
    const int64_t bb = t->desc.pages.block_table ? 0 : b;
    *out = *in;
    out->data = (char *)in->data +
                kv_offset(bb * in->stride_b + hk * in->stride_h, in->dtype);
    *sout = *sin;
    if (sin->data)
        sout->data = (const char *)sin->data + (size_t)(bb * sin->stride_b + hk * sin->stride_h) *
                                                   sc_dtype_size(sin->dtype);
}

sdpa_status sb_reference_piece(const sc_tensors *t, const sb_piece *pc, float *out,
                               sdpa_stats *stats) {
    int causal;
    int64_t end;
    if (!piece_frame(&t->desc, pc, &causal, &end))
        return SDPA_ERR_BAD_ARGUMENT;
    const int64_t Dv = t->desc.dim_v;
    if (end == 0) {
        memset(out, 0, (size_t)(pc->rows * Dv) * sizeof(float));
        if (stats)
            *stats = (sdpa_stats){.isa = SDPA_ISA_AUTO, .threads = 1};
        return SDPA_OK;
    }
    const int64_t hk = pc->h / (t->desc.heads_q / t->desc.heads_kv);
    sdpa_desc d = t->desc;
    d.batch = 1;
    d.heads_q = d.heads_kv = 1;
    d.len_q = pc->rows;
    d.len_kv = end;
    d.causal = causal;
    d.kv_lens = NULL; /* end <= the entry's length */
    d.alibi_slopes = t->desc.alibi_slopes ? t->desc.alibi_slopes + pc->h : NULL;
    d.sinks = t->desc.sinks ? t->desc.sinks + pc->h : NULL;
    d.stats = stats;
    if (d.mask.data) { /* the piece's rows of its (b, h) */
        const sdpa_mask *m = &t->desc.mask;
        d.mask.data = (const char *)m->data +
                      (size_t)(pc->b * m->stride_b + pc->h * m->stride_h + pc->i0 * m->stride_q) *
                          (m->kind == SDPA_MASK_BOOL ? 1 : sc_dtype_size(m->dtype));
    }
    const sdpa_tensor tq = sc_view_at(&t->q, pc->b, pc->h, pc->i0);
    sdpa_tensor tk, tv;
    piece_kv(t, &t->k, &t->desc.k_scales, pc->b, hk, &tk, &d.k_scales);
    piece_kv(t, &t->v, &t->desc.v_scales, pc->b, hk, &tv, &d.v_scales);
    if (d.pages.block_table) /* the entry's row of the table is the piece's only row */
        d.pages.block_table += pc->b * d.pages.stride;
    const sdpa_tensor to = sdpa_tensor_bhtd(out, SDPA_F32, 1, pc->rows, Dv);
    return sdpa_reference(&d, &tq, &tk, &tv, &to, NULL);
}

/* The candidate pieces: the first, middle and last SB_SLICE_ROWS rows (one range when Tq
 * is short) of the first and the last (batch, head); those with an exact sub-problem
 * are kept. The last head reads the last K/V head, so a GQA mapping error shows; the
 * middle rows cross tile boundaries of every table; under causal the first rows see
 * few keys and the last rows all of them. */
static void choose_pieces(sb_expect *e, const sc_tensors *t) {
    const sdpa_desc *d = &t->desc;
    const int64_t R = SB_SLICE_ROWS;
    int64_t starts[3], nstarts = 0, rows;
    if (d->len_q <= 3 * R) {
        starts[nstarts++] = 0;
        rows = d->len_q;
    } else {
        starts[nstarts++] = 0;
        starts[nstarts++] = (d->len_q - R) / 2;
        starts[nstarts++] = d->len_q - R;
        rows = R;
    }
    const int64_t heads[2][2] = {{0, 0}, {t->VB - 1, d->heads_q - 1}};
    const int nheads = (t->VB == 1 && d->heads_q == 1) ? 1 : 2;
    e->npieces = e->dropped = 0;
    for (int hh = 0; hh < nheads; hh++)
        for (int64_t r = 0; r < nstarts; r++) {
            const sb_piece pc = {heads[hh][0], heads[hh][1], starts[r], rows};
            if (sb_piece_exact(t, &pc))
                e->piece[e->npieces++] = pc;
            else
                e->dropped++;
        }
}

/* Flops of the rows of a piece (sb_flops's count). */
static double piece_flops(const sc_tensors *t, const sb_piece *pc) {
    const sdpa_desc *d = &t->desc;
    const sc_case c = {.B = 1, .Hq = 1, .Tq = d->len_q,
                       .Tkv = d->kv_lens ? d->kv_lens[pc->b] : d->len_kv, .causal = d->causal,
                       .window = d->window, .wl = d->window_left, .wr = d->window_right};
    return 2.0 * (double)(d->dim_qk + d->dim_v) * visible_rows(&c, 0, pc->i0, pc->rows);
}

sdpa_status sb_expect_make(sb_expect *e, const sc_tensors *t) {
    const sdpa_desc *d = &t->desc;
    const int64_t rows_all = t->VB * d->heads_q * d->len_q;
    memset(e, 0, sizeof *e);
    sb_piece whole = {0, 0, 0, d->len_q};
    double flops = 0.0;
    for (int64_t b = 0; b < t->VB; b++) {
        whole.b = b;
        flops += (double)d->heads_q * piece_flops(t, &whole);
    }
    e->full = flops <= SB_FULL_CHECK_FLOPS;
    if (!e->full) {
        choose_pieces(e, t);
        e->full = e->npieces == 0; /* then only the whole is exact */
    }
    size_t n = 0;
    if (e->full)
        n = (size_t)(rows_all * d->dim_v);
    for (int i = 0; i < e->npieces && !e->full; i++)
        n += (size_t)(e->piece[i].rows * d->dim_v);
    e->ref = malloc(n * sizeof(float));
    if (!e->ref)
        return SDPA_ERR_OUT_OF_MEMORY;
    const double t0 = sb_now();
    sdpa_status st = SDPA_OK;
    if (e->full) {
        e->npieces = e->dropped = 0;
        const sdpa_tensor to = sdpa_tensor_bhtd(e->ref, SDPA_F32, d->heads_q, d->len_q, d->dim_v);
        st = sdpa_reference(d, &t->q, &t->k, &t->v, &to, NULL);
        e->flops = flops;
    } else {
        float *out = e->ref;
        for (int i = 0; i < e->npieces && st == SDPA_OK; i++) {
            st = sb_reference_piece(t, &e->piece[i], out, NULL);
            out += e->piece[i].rows * d->dim_v;
            e->flops += piece_flops(t, &e->piece[i]);
        }
    }
    e->seconds = sb_now() - t0;
    if (st != SDPA_OK)
        sb_expect_free(e);
    return st;
}

void sb_expect_free(sb_expect *e) {
    free(e->ref);
    e->ref = NULL;
}

const char *sb_expect_scope(const sb_expect *e, const sc_tensors *t, char *buf, int n) {
    if (e->full) {
        snprintf(buf, (size_t)n, "whole output");
        return buf;
    }
    /* Pieces come in (b, h) groups (choose_pieces). When every group has the same row
     * ranges: "rows A-B, C-D of (b,h) = (0,0), (0,31)"; else each group with its own. */
    int ngroups = 0, group_start[SB_MAX_PIECES + 1];
    for (int i = 0; i < e->npieces; i++)
        if (i == 0 || e->piece[i].b != e->piece[i - 1].b || e->piece[i].h != e->piece[i - 1].h)
            group_start[ngroups++] = i;
    group_start[ngroups] = e->npieces;
    int same = 1;
    for (int g = 1; g < ngroups && same; g++) {
        const int len = group_start[g + 1] - group_start[g];
        same = len == group_start[1] - group_start[0];
        for (int i = 0; i < len && same; i++)
            same = e->piece[group_start[g] + i].i0 == e->piece[i].i0 &&
                   e->piece[group_start[g] + i].rows == e->piece[i].rows;
    }
    int len = snprintf(buf, (size_t)n, "slice:");
    for (int g = 0; g < ngroups && len < n; g++) {
        if (g == 0 || !same) {
            len += snprintf(buf + len, (size_t)(n - len), "%s rows", g ? ";" : "");
            for (int i = group_start[g]; i < group_start[g + 1] && len < n; i++)
                len += snprintf(buf + len, (size_t)(n - len), "%s %lld-%lld",
                                i > group_start[g] ? "," : "", (long long)e->piece[i].i0,
                                (long long)(e->piece[i].i0 + e->piece[i].rows - 1));
        }
        if (len < n)
            len += snprintf(buf + len, (size_t)(n - len), "%s(%lld,%lld)",
                            !same || g == 0 ? " of (b,h) = " : ", ",
                            (long long)e->piece[group_start[g]].b,
                            (long long)e->piece[group_start[g]].h);
    }
    if (e->dropped && len < n)
        snprintf(buf + len, (size_t)(n - len),
                 " (%d more row range%s not checked: no exact sub-problem, %s)", e->dropped,
                 e->dropped == 1 ? "" : "s",
                 t->desc.causal == SDPA_CAUSAL_TOP_LEFT
                     ? "top-left rows at or beyond Tkv keep their diagonal only in the "
                       "whole problem"
                     : "without causal, a window reaching right of the diagonal or ALiBi "
                       "makes only the last rows exact");
    return buf;
}

sc_error sb_compare(const sb_expect *e, const sc_tensors *t) {
    const sdpa_desc *d = &t->desc;
    sc_error err = {0};
    if (d->compute == SDPA_COMPUTE_BF16) { /* the mode's bound, from the largest |v| */
        double vmax = 0;
        /* bufs[2] holds V's source rows: fp32 when V is quantized; where V is a view of K's
         * memory (MLA) it has none, and K's rows, V's columns among them, bound it */
        const int w = t->bufs[2] != NULL ? 2 : 1;
        const sdpa_dtype vt = w == 2 ? t->v.dtype : t->k.dtype;
        const sdpa_dtype src = kv_quantized(vt) ? SDPA_F32 : vt;
        for (size_t i = 0; i < t->elems[w]; i++)
            vmax = fmax(vmax, fabs((double)sc_load(t->bufs[w], i, src)));
        err.abs_tol = sc_bf16_abs_tol(vmax);
    }
    if (e->full) {
        const sdpa_tensor want = sdpa_tensor_bhtd(e->ref, SDPA_F32, d->heads_q, d->len_q, d->dim_v);
        sc_compare_view(&err, &t->o, &want, t->VB, d->heads_q, d->len_q, d->dim_v);
        return err;
    }
    float *r = e->ref;
    for (int i = 0; i < e->npieces; i++) {
        const sb_piece *pc = &e->piece[i];
        const sdpa_tensor got = sc_view_at(&t->o, pc->b, pc->h, pc->i0);
        const sdpa_tensor want = sdpa_tensor_bhtd(r, SDPA_F32, 1, pc->rows, d->dim_v);
        sc_compare_view(&err, &got, &want, 1, 1, pc->rows, d->dim_v);
        r += pc->rows * d->dim_v;
    }
    return err;
}

/* ---- the projection GEMM --------------------------------------------------------- */

const sb_linear_shape sb_linear_suite[] = {
    {"linear", 2048, 4096, 4096, 1},
};
const int sb_linear_suite_len = (int)(sizeof sb_linear_suite / sizeof sb_linear_suite[0]);

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = sc_rand_float(&seed);
}

int sb_linear_init(sb_linear *l, const sb_linear_shape *s) {
    memset(l, 0, sizeof *l);
    l->s = *s;
    l->x = malloc((size_t)(s->M * s->K) * sizeof(float));
    l->w = malloc((size_t)(s->N * s->K) * sizeof(float));
    l->b = s->bias ? malloc((size_t)s->N * sizeof(float)) : NULL;
    l->y = malloc((size_t)(s->M * s->N) * sizeof(float));
    if (!l->x || !l->w || !l->y || (s->bias && !l->b)) {
        sb_linear_free(l);
        return -1;
    }
    fill(l->x, (size_t)(s->M * s->K), 6);
    fill(l->w, (size_t)(s->N * s->K), 7);
    if (l->b)
        fill(l->b, (size_t)s->N, 8);
    memset(l->y, 0, (size_t)(s->M * s->N) * sizeof(float)); /* first-touch faults now */
    return 0;
}

void sb_linear_free(sb_linear *l) {
    free(l->x);
    free(l->w);
    free(l->b);
    free(l->y);
    memset(l, 0, sizeof *l);
}

double sb_linear_flops(const sb_linear_shape *s) {
    return 2.0 * (double)s->M * (double)s->K * (double)s->N;
}

sdpa_status sb_run_linear(const sb_linear *l, sdpa_isa isa, int threads) {
    const sdpa_linear_desc d = {.rows = l->s.M, .in_features = l->s.K, .out_features = l->s.N,
                                .weight = l->w, .bias = l->b, .num_threads = threads,
                                .isa = (int)isa};
    return sdpa_linear(&d, l->x, l->y);
}

static void check_linear_elem(const sb_linear *l, int64_t r, int64_t c, sc_error *err) {
    const int64_t K = l->s.K;
    double exact = l->b ? (double)l->b[c] : 0.0, mag = fabs(exact);
    for (int64_t k = 0; k < K; k++) {
        const double t = (double)l->x[r * K + k] * (double)l->w[c * K + k];
        exact += t;
        mag += fabs(t);
    }
    const double got = (double)l->y[r * l->s.N + c], ad = fabs(got - exact);
    err->checked++;
    if (!(ad <= (double)(K + 3) * 0x1p-24 * mag + 1e-30)) {
        err->bad++;
        if (!isfinite(ad))
            return;
    }
    if (ad > err->max_abs)
        err->max_abs = ad;
    if (fabs(exact) > 1e-3 && ad / fabs(exact) > err->max_rel)
        err->max_rel = ad / fabs(exact);
}

sc_error sb_linear_check(const sb_linear *l) {
    const int64_t M = l->s.M, N = l->s.N;
    const int64_t rows[3] = {0, M / 2, M - 1}, cols[3] = {0, N / 2, N - 1};
    sc_error err = {0};
    for (int i = 0; i < 3; i++)
        for (int64_t c = 0; c < N; c++)
            check_linear_elem(l, rows[i], c, &err);
    for (int j = 0; j < 3; j++)
        for (int64_t r = 0; r < M; r++)
            check_linear_elem(l, r, cols[j], &err);
    return err;
}

/* ---- ISAs, clocks and cores ------------------------------------------------------ */

unsigned sb_isa_own(sdpa_isa isa) {
    const sdpa_isa_info *r = sdpa_isa_lookup(isa);
    return r ? r->own : 0;
}

int sb_usable_isas(sdpa_isa *out, int max) {
    int n, k = 0;
    const sdpa_isa_info *rows = sdpa_isa_registry(&n);
    for (int i = 0; i < n && k < max; i++)
        if (rows[i].usable)
            out[k++] = rows[i].isa;
    return k;
}

double sb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int sb_nproc(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
