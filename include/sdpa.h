/*
 * sdpa.h - the public API of libsdpa, fused scaled-dot-product attention for CPUs.
 *
 * This is the only public header. It declares the descriptor that says what to compute,
 * the tensor views that say where the operands live, the fused entry point
 * (sdpa_forward), the naive reference with the same signature (sdpa_reference), status
 * codes and ISA control. It is not a tensor library: libsdpa never allocates, copies or
 * owns caller tensors, and it computes the forward pass only (inference).
 *
 * What is computed, for every batch entry b, query head h, query row i:
 *
 *     s(j)      = scale * <Q[b,h,i,:], K[b,h/g,j,:]>        g = heads_q / heads_kv
 *     O[b,h,i,:] = sum_j softmax_j(s) * V[b,h/g,j,:]        over the visible keys j
 *     lse[b,h,i] = log(sum_j exp(s(j)))                     over the visible keys j
 *
 * Semantics shared by sdpa_forward and sdpa_reference:
 *   - scale 0 means 1/sqrt(dim_qk).
 *   - Causal is bottom-right aligned: query row i sees key j iff j <= i + (len_kv - len_q).
 *     For len_q == len_kv this is the usual lower triangle.
 *   - A row with no visible key outputs zeros and lse = -inf (never NaN from masking);
 *     with sinks on, its lse is the sink logit. A padding row (at or beyond q_lens[b],
 *     or a row no packed sequence owns) outputs zeros and lse = -inf, sinks or not.
 *   - A masked key (causal, window, length, boolean 0, additive -inf) contributes exactly
 *     0 whatever its score or value (even NaN or inf). A score of -inf that comes from
 *     the data is a weight of 0 but not a mask: its value row still multiplies it, so an
 *     inf there gives 0 x inf = NaN (as in PyTorch).
 *   - NaN in a visible input propagates as NaN to the rows that see it.
 *   - Results do not depend on the thread count: same inputs, same bits, for any
 *     num_threads (fixed reduction order, fixed work split).
 *   - On any error the outputs (o and lse) are not written.
 *   - Thread-safe: any number of threads may call sdpa_forward/sdpa_reference at once.
 *
 * Units: dimensions are element counts; strides are element counts (not bytes).
 */
#ifndef SDPA_H
#define SDPA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SDPA_API
#else
#define SDPA_API __attribute__((visibility("default")))
#endif

/* ABI levels. Descriptors grow only by fields appended at their end; each release that
 * appends one is a new ABI level, and the library keeps serving every earlier level, so
 * a program built against an older header keeps working with a newer libsdpa.so.0
 * (README, "ABI policy"). The entry points that take a descriptor whose layout changed
 * since level 1 (0.1.0) are renamed below to this level's symbols, so a caller built
 * against this header binds to this header's layouts; one built against 0.1.0 calls the
 * plain names, which read 0.1.0's layouts. Take their addresses through these names as
 * usual. */
#define SDPA_ABI_VERSION 2
#define sdpa_forward sdpa_forward_abi2
#define sdpa_reference sdpa_reference_abi2
#define sdpa_attention_weights sdpa_attention_weights_abi2
#define sdpa_mha_workspace_size sdpa_mha_workspace_size_abi2
#define sdpa_mha_forward sdpa_mha_forward_abi2
#define sdpa_plan_create sdpa_plan_create_abi2

/* Version of this header; sdpa_version() returns the version of the linked library. */
#define SDPA_VERSION_MAJOR 0
#define SDPA_VERSION_MINOR 1
#define SDPA_VERSION_PATCH 0
#define SDPA_VERSION_STRING "0.1.0"

/* Status codes. Every function that can fail returns one; SDPA_OK is 0. */
typedef enum sdpa_status {
    SDPA_OK = 0,
    SDPA_ERR_NULL_POINTER = 1,  /* a required pointer (descriptor, view, data) is NULL */
    SDPA_ERR_BAD_DIMENSION = 2, /* a dimension is <= 0 or above SDPA_MAX_DIM/SDPA_MAX_HEAD_DIM */
    SDPA_ERR_BAD_HEADS = 3,     /* heads_q is not a multiple of heads_kv */
    SDPA_ERR_BAD_STRIDE = 4,    /* a negative stride, a row stride of an output that makes
                                   two output elements share memory */
    SDPA_ERR_OVERFLOW = 5,      /* an operand's extent in bytes overflows int64/size_t, or
                                   the operand reaches past 2^56 (the top of every 64-bit
                                   user address space: x86-64 with 5-level paging, AArch64) */
    SDPA_ERR_OVERLAP = 6,       /* an output (o or lse) shares memory with an input or with
                                   the other output */
    SDPA_ERR_BAD_DTYPE = 7,     /* an unknown dtype, or one this build does not support */
    SDPA_ERR_BAD_ARGUMENT = 8,  /* another field out of range: scale or softcap not
                                   finite (or softcap < 0), negative num_threads or window
                                   extent, unknown causal, isa, compute or mask kind, a mask kind
                                   without data or data without a kind, dropout_p outside
                                   [0, 1) or dimensions beyond the dropout counter, an
                                   ALiBi slope that is not finite, a sink that is NaN or
                                   +inf */
    SDPA_ERR_OUT_OF_MEMORY = 9, /* scratch allocation failed */
    SDPA_ERR_UNSUPPORTED_ISA = 10, /* the ISA asked for is not built in or not usable on
                                      this CPU, or no usable table computes the compute
                                      mode asked for */
    SDPA_ERR_MISALIGNED = 11,      /* a data pointer is not aligned to its element size */
    SDPA_ERR_BAD_LENGTHS = 12      /* q_lens/kv_lens/cu_seqlens out of range, decreasing,
                                      or combined in a way the descriptor forbids */
} sdpa_status;

/* Returns a static, human-readable description of a status (never NULL). */
SDPA_API const char *sdpa_strerror(sdpa_status status);

/* Returns the library version as "MAJOR.MINOR.PATCH" (static string). */
SDPA_API const char *sdpa_version(void);

/* Element types. Every operand carries its own dtype (Q, K, V and O may all differ);
 * 0 is fp32. Arithmetic is always fp32: 16-bit operands are widened exactly while they
 * are packed into tiles (never copied whole), and O is rounded to nearest-even once. */
typedef enum sdpa_dtype {
    SDPA_F32 = 0,  /* IEEE-754 binary32 */
    SDPA_F16 = 1,  /* IEEE-754 binary16 */
    SDPA_BF16 = 2, /* bfloat16 (the upper half of a binary32) */
    /* Quantized storage, for K and V only (sdpa_desc.k_scales / v_scales give their
     * scales; see "KV caches" below). Element x is stored as a code c and read as
     *     x = fl(value(c) * scale)        one fp32 multiplication, rounded to nearest even
     * which sdpa_forward and sdpa_reference compute alike (exact dequantization: the
     * kernels see exactly these fp32 values). */
    SDPA_I8 = 3,       /* int8, symmetric: value(c) = c, -128 .. 127 */
    SDPA_FP8_E4M3 = 4, /* OCP 8-bit float E4M3 (bias 7, no inf, S.1111.111 is NaN, max 448) */
    SDPA_FP8_E5M2 = 5, /* OCP 8-bit float E5M2 (bias 15, IEEE-style inf and NaN, max 57344) */
    SDPA_I4 = 6        /* 4-bit signed, -8 .. 7, two per byte: element e of a view lives in
                          byte e / 2, the low nibble for even e. Every stride and the row
                          length must be even (rows start on bytes). */
} sdpa_dtype;

/* A strided view of a 4-d operand [B, H, T, D] whose last dimension is contiguous.
 * Element (b, h, t, d) lives at ((T_*)data)[b*stride_b + h*stride_h + t*stride_t + d].
 * Strides are in elements, must be >= 0. Inputs may use any non-negative strides
 * (stride 0 broadcasts). Outputs must not map two elements to the same address.
 * data of an input is never written through, even though the field is not const. */
typedef struct sdpa_tensor {
    void *data;        /* element [0,0,0,0]; suitably aligned for its dtype */
    sdpa_dtype dtype;  /* element type; 0 = SDPA_F32 */
    int64_t stride_b;  /* elements between batch entries */
    int64_t stride_h;  /* elements between heads */
    int64_t stride_t;  /* elements between rows (tokens) */
} sdpa_tensor;

/* View of a contiguous [B, H, T, D] tensor (heads-major, PyTorch's SDPA layout). */
SDPA_API sdpa_tensor sdpa_tensor_bhtd(const void *data, sdpa_dtype dtype, int64_t heads,
                                      int64_t len, int64_t dim);
/* View of a contiguous [B, T, H, D] tensor (tokens-major, the layout projections write). */
SDPA_API sdpa_tensor sdpa_tensor_bthd(const void *data, sdpa_dtype dtype, int64_t heads,
                                      int64_t len, int64_t dim);

/* Causal masking modes. The alignment they set (the "diagonal" of row i, d(i)) is also
 * where the sliding window and ALiBi distances are measured from:
 *   bottom-right: d(i) = i + (Tkv - Tq)       (also the alignment when causal is off)
 *   top-left:     d(i) = i
 * Tq and Tkv are the sequence's own lengths under q_lens/kv_lens or packed varlen. */
typedef enum sdpa_causal {
    SDPA_CAUSAL_NONE = 0,         /* every key visible */
    SDPA_CAUSAL_BOTTOM_RIGHT = 1, /* row i sees key j iff j <= i + (len_kv - len_q): KV-cache
                                     decode and chunked prefill (FlashAttention >= 2.1,
                                     llama.cpp) */
    SDPA_CAUSAL_TOP_LEFT = 2      /* row i sees key j iff j <= i: PyTorch's is_causal when
                                     len_q != len_kv */
} sdpa_causal;

/* An optional mask over the scores, [B or 1, Hq or 1, Tq, Tkv] as a strided view whose
 * last (key) dimension is contiguous: element (b, h, i, j) is
 * data[b*stride_b + h*stride_h + i*stride_q + j], strides in elements, >= 0, 0
 * broadcasts. h is the query head. Under packed varlen, i and j are the row and key
 * within sequence b (not packed offsets). */
typedef enum sdpa_mask_kind {
    SDPA_MASK_NONE = 0,     /* no mask (the all-zero default) */
    SDPA_MASK_ADDITIVE = 1, /* values added to the scores (after scale, softcap, ALiBi);
                               -inf masks a key exactly */
    SDPA_MASK_BOOL = 2      /* uint8: 0 masks the key, anything else keeps it (the seeds'
                               masked_fill(mask == 0, -inf)) */
} sdpa_mask_kind;

typedef struct sdpa_mask {
    const void *data;     /* NULL when kind is SDPA_MASK_NONE */
    sdpa_mask_kind kind;
    sdpa_dtype dtype;     /* ADDITIVE: F32, F16 or BF16; BOOL: must be 0 (elements are
                             uint8) */
    int64_t stride_b;     /* elements between batch entries; 0 broadcasts over B */
    int64_t stride_h;     /* elements between query heads; 0 broadcasts over heads */
    int64_t stride_q;     /* elements between query rows; 0 broadcasts over rows */
} sdpa_mask;

/* ---- KV caches: quantized and paged K/V ---------------------------------------------
 *
 * Scales of a quantized K or V, as their own strided view: the scale of element
 * (b, h, t, d) of K (or V) is
 *     scales[b*stride_b + h*stride_h + t*stride_t + d / group]
 * Strides in elements (>= 0; 0 broadcasts), so one view says every common granularity:
 *     per tensor       all strides 0, group 0            (fp8: vLLM, SGLang)
 *     per head         stride_h = 1, group 0
 *     per token, head  stride_b, stride_h, stride_t, group 0   (int8: OpenVINO, ORT)
 *     per group of G   the same and group = G, G | D    (int8/int4 groups of 32, 64:
 *                                                       llama.cpp q8_0/q4_0)
 * Under paging (sdpa_pages) b and t are the page and the slot within it, as for K and V;
 * under packed varlen t is the row of all sequences' keys and stride_b is ignored, as for
 * K and V.
 * Scales must be finite (a scale is data: a NaN scale makes NaN values, which propagate
 * like any NaN in K or V). */
typedef struct sdpa_scales {
    const void *data;  /* NULL: the operand is not quantized (and must not use a quantized
                          dtype); required for SDPA_I8, SDPA_FP8_*, SDPA_I4 */
    sdpa_dtype dtype;  /* SDPA_F32 or SDPA_F16 */
    int64_t group;     /* channels per scale, dividing the row (dim_qk for K, dim_v for V);
                          0 = the whole row. Even for SDPA_I4. */
    int64_t stride_b;  /* elements between batch entries (pages, when paged) */
    int64_t stride_h;  /* elements between KV heads */
    int64_t stride_t;  /* elements between tokens (slots within a page, when paged) */
} sdpa_scales;

/* Paged K/V (vLLM's and SGLang's paged KV cache, FlashAttention's block_table): keys of
 * batch entry b live in pages of page_size tokens drawn from a pool; key j of entry b is
 * slot j % page_size of page block_table[b*stride + j / page_size]. The K and V views
 * (and per-token scales) then describe the pool: their data is page 0, stride_b the
 * elements between pages, stride_h and stride_t the head and slot strides within a
 * page, so both common pool layouts are views:
 *     [pages, Hkv, page_size, D]:  stride_b = Hkv*page_size*D, stride_h = page_size*D,
 *                                  stride_t = D
 *     [pages, page_size, Hkv, D]:  stride_b = page_size*Hkv*D, stride_h = D,
 *                                  stride_t = Hkv*D
 * The table has a row of ceil(len_kv / page_size) entries per batch entry; entry b reads
 * only its first ceil(Tkv_b / page_size) (Tkv_b = kv_lens[b] or len_kv), and each of
 * those must be a page of the pool, 0 <= index < num_pages: validation reads them all
 * before anything is written (SDPA_ERR_BAD_ARGUMENT otherwise). Pages may be shared
 * between entries and appear in any order. A page none of whose keys some row may see
 * under its length, causal masking and window is never read (a call reads only keys
 * within the union of its rows' ranges). Not with packed varlen (cu_seqlens). */
typedef struct sdpa_pages {
    const int32_t *block_table; /* [batch, ceil(len_kv / page_size)]; NULL = not paged */
    int64_t stride;             /* int32 elements between the rows of batch entries */
    int64_t page_size;          /* tokens per page, >= 1 */
    int64_t num_pages;          /* pages in the pool, >= 1 */
} sdpa_pages;

/* The precision of the two products. SDPA_COMPUTE_F32 (0) is exact fp32 arithmetic
 * whatever the storage. SDPA_COMPUTE_BF16 is what FlashAttention, vLLM's and SGLang's CPU
 * backends and PyTorch's bf16 CPU path compute:
 *   - Q, K and V enter the products as bf16: fp32 and f16 operands are rounded to nearest
 *     even once (while a tile is packed), bf16 ones are used as they are;
 *   - S = scale Q K^T accumulates exact bf16 products in fp32;
 *   - the softmax (max, exp, the sums l, the state m, lse) stays fp32;
 *   - P is rounded to bf16 (after dropout) before P V, which accumulates in fp32;
 *   - O stays fp32 until it is stored in its dtype.
 * Error model (against the exact attention a of the rounded operands q^, k^, v^, with
 * weights w_j and A_d = sum_j w_j |v^_jd|, row by row; u = 2^-23, twice fp32's unit
 * roundoff, since Arm's BFMMLA rounds its partial sums to odd, an error of up to one
 * ulp; the x86 tables' sums meet it with 2^-24):
 *     |o_d - a_d| <= (2^-8 + 2 D + 2 g(2 Tkv)) A_d  (+ O's rounding to its dtype),
 *     D = |scale| g(Dk) max_j sum_d |q^_d k^_jd| + 4 u max_j |s_j| + 2^-20
 * to first order, where g(n) = n u / (1 - n u) bounds an fp32 sum of n terms: 2^-8 is
 * P's rounding to bf16 (nearest even, relative), D the error of a score (fp32 sum of Dk
 * exact products, then scale, softcap, ALiBi and mask in fp32, and the exp's 2^-20
 * relative error; an error e_j in the scores changes a weight by the factor
 * exp(e_j - sum w e), hence 2 D), 2 g(2 Tkv) the fp32 sums of l and of P V with their
 * rescales. Tables that use vdpbf16ps, AMX or BFMMLA read subnormal bf16 operands as
 * zero and flush subnormal products (their DAZ/FTZ); each such term adds at most
 * |scale| |q^_d k^_jd| < |scale| 2^-126 max|k^| to D. sdpa_reference in this mode
 * applies the same two roundings (operands; P at the row's final max rather than the
 * kernels' running max), so against it the 2^-8 becomes 2^-7. lse is within
 * D + 2 g(2 Tkv) + 2 u |lse| of the exact one; the attention weights (not rounded: P
 * is rounded only where it multiplies V) within (2 D + 2 g(2 Tkv)) w_j.
 * tests/test_bf16.c checks these bounds element by element. Asking for a compute mode
 * no usable kernel table provides is SDPA_ERR_UNSUPPORTED_ISA, never a silent fp32 run.
 * Every table computes this mode: those with bf16 tiles (vdpbf16ps, AMX, BFMMLA/BFDOT,
 * and the scalar table's exact emulation) use them, the others run their fp32 tiles on
 * the rounded operands, which is the same arithmetic (a product of two bf16 values is
 * exact in fp32). The automatic ISA choice picks the best table that computes it. */
typedef enum sdpa_compute {
    SDPA_COMPUTE_F32 = 0,  /* exact fp32 products (the default) */
    SDPA_COMPUTE_BF16 = 1  /* bf16 operands and P, fp32 accumulation and softmax */
} sdpa_compute;

/* Instruction sets a kernel table can target. */
typedef enum sdpa_isa {
    SDPA_ISA_AUTO = 0,    /* the best one this CPU and build support */
    SDPA_ISA_SCALAR = 1,  /* portable C, always available */
    SDPA_ISA_AVX2 = 2,    /* x86-64 AVX2 + FMA */
    SDPA_ISA_AVX512 = 3,  /* x86-64 AVX-512 F/BW/DQ/VL */
    SDPA_ISA_NEON = 4,    /* AArch64 Advanced SIMD */
    SDPA_ISA_AVX512BF16 = 5, /* avx512 + AVX512_BF16 (vdpbf16ps) for bf16 compute */
    SDPA_ISA_AMX = 6,     /* avx512_bf16 + AMX-TILE/AMX-BF16 tiles for bf16 compute */
    SDPA_ISA_NEONBF16 = 7, /* neon + FEAT_BF16 (BFDOT, BFMMLA) for bf16 compute */
    SDPA_ISA_COUNT_ = 8   /* number of values, not an ISA */
} sdpa_isa;

/* Work counters of one call, filled when sdpa_desc.stats is non-NULL. A "block" is one
 * Br x Bc tile of query rows by key columns (Br, Bc: the call's tile sizes, the kernel
 * table's, except a smaller Bc for decode over K/V kept tokens-major, whose items hold
 * every K/V head of a batch entry). */
typedef struct sdpa_stats {
    sdpa_isa isa;             /* kernel table used (SDPA_ISA_AUTO for the reference) */
    int threads;              /* threads used (1 when run without a parallel region) */
    int block_q, block_kv;    /* Br and Bc (keys per block: a decode call's may be longer
                                 than the table's) */
    int64_t work_items;       /* items: (b, h, query block); (b, K/V head, row block)
                                 for GQA calls of at most 16 query rows; b for decode
                                 over K/V kept tokens-major */
    int64_t blocks_total;     /* all Br x Bc tiles of the score matrices */
    int64_t blocks_computed;  /* tiles computed (QK^T, softmax, PV) */
    int64_t blocks_skipped;   /* tiles skipped without touching memory (causal) */
    int64_t blocks_masked;    /* computed tiles that needed element masking */
    int64_t scratch_bytes;    /* heap memory the call allocated (per-thread tiles and
                                 split-KV partials; O(threads x tile), never O(Tq x Tkv)) */
} sdpa_stats;

/* What to compute. The all-zero value of every option is the plain default (non-causal,
 * default scale, no mask, no window, no padding, default threads, automatic ISA), so
 * initialise with designated initializers and name only what you need:
 *
 *     sdpa_desc d = { .batch = 1, .heads_q = 8, .heads_kv = 8, .len_q = 128,
 *                     .len_kv = 128, .dim_qk = 64, .dim_v = 64, .causal = 1 };
 *
 * The score of row i and key j, in this order:
 *     s = scale * <q_i, k_j>
 *     s = softcap * tanh(s / softcap)                       if softcap > 0
 *     s = s - alibi_slopes[h] * |d(i) - j|                  if alibi_slopes
 *     s = s + mask(b, h, i, j)                              if an additive mask
 * Key j is visible to row i when it is inside the sequence (j < Tkv_b), passes causal
 * (j <= d(i)), the window (d(i) - window_left <= j <= d(i) + window_right) and a boolean
 * mask; invisible keys contribute exactly 0. With sinks, the softmax denominator of
 * every row of head h gains exp(sinks[h]) (a logit with no value row). Dropout, if on,
 * then zeroes weights at random and rescales the kept ones (P V only).
 *
 * Sequence lengths: plain, every batch entry has len_q rows and len_kv keys. q_lens /
 * kv_lens (padded batches) give entry b Tq_b = q_lens[b] rows and Tkv_b = kv_lens[b] keys
 * at the start of its len_q / len_kv rows; rows at and beyond Tq_b are padding: their
 * output is zeros and lse -inf, and no work is done for them or for keys beyond Tkv_b.
 * Packed varlen (FlashAttention's cu_seqlens): sequence b is rows
 * [cu_seqlens_q[b], cu_seqlens_q[b+1]) of Q/O and rows [cu_seqlens_kv[b],
 * cu_seqlens_kv[b+1]) of K/V; the views' stride_b is ignored (the batch is the row
 * offset), len_q / len_kv are the views' total rows, and lse is [Hq, len_q]. */
typedef struct sdpa_desc {
    int64_t batch;     /* B, >= 1 (sequences, under packed varlen) */
    int64_t heads_q;   /* Hq, >= 1 */
    int64_t heads_kv;  /* Hkv, >= 1, divides heads_q (Hkv < Hq: GQA; Hkv == 1: MQA).
                          Query head h reads K/V head h / (heads_q / heads_kv). */
    int64_t len_q;     /* Tq, query rows, 1 .. SDPA_MAX_DIM (may differ from Tkv) */
    int64_t len_kv;    /* Tkv, key/value rows, 1 .. SDPA_MAX_DIM */
    int64_t dim_qk;    /* Dk, head dim of Q and K, 1 .. SDPA_MAX_HEAD_DIM */
    int64_t dim_v;     /* Dv, head dim of V and O, 1 .. SDPA_MAX_HEAD_DIM (may differ) */
    float scale;       /* multiplies <q,k>; 0 = 1/sqrt(dim_qk); must be finite */
    int causal;        /* an sdpa_causal value; 0 = none */
    int num_threads;   /* upper bound on threads; 0 = OpenMP's default; >= 0 */
    int isa;           /* an sdpa_isa value forcing this call's kernels; 0 = the
                          process-wide choice (sdpa_get_isa). sdpa_reference runs no
                          kernels: it accepts any sdpa_isa value, one this CPU lacks too. */
    sdpa_stats *stats; /* optional out: work counters of this call; NULL = none */

    /* ---- masks and score modifiers (all off when zero) ---- */
    sdpa_mask mask;    /* additive or boolean mask; .kind 0 = none */
    int window;        /* non-zero: sliding window on, with the two extents below */
    int64_t window_left;  /* keys before the diagonal a row sees, 0 .. SDPA_MAX_DIM */
    int64_t window_right; /* keys after the diagonal a row sees, 0 .. SDPA_MAX_DIM (only
                             keys <= d(i) remain under causal) */
    float softcap;     /* > 0: logit soft-capping (Gemma 2); 0 = off; finite, >= 0 */
    const float *alibi_slopes; /* [heads_q] ALiBi slopes (finite); NULL = off */
    const float *sinks;        /* [heads_q] attention-sink logits (finite or -inf);
                                  NULL = off */

    /* ---- sequence lengths (all NULL: every entry is len_q x len_kv) ---- */
    const int64_t *q_lens;        /* [batch] 0 .. len_q; NULL = len_q */
    const int64_t *kv_lens;       /* [batch] 0 .. len_kv; NULL = len_kv */
    const int64_t *cu_seqlens_q;  /* [batch + 1] packed varlen: 0 = first, non-decreasing,
                                     last <= len_q; set together with cu_seqlens_kv, not
                                     with q_lens/kv_lens */
    const int64_t *cu_seqlens_kv; /* [batch + 1] likewise for K/V, last <= len_kv */

    /* ---- dropout on the attention weights (training-style; off when 0) ---- */
    float dropout_p;        /* probability of zeroing a weight, 0 <= p < 1; kept weights
                               are scaled by 1 / (1 - p). The denominator (and lse) are
                               those of the weights before dropout, as in PyTorch. */
    uint64_t dropout_seed;  /* key of the Philox4x32-10 stream: weight (b, h, i, j) is
                               dropped by a pure function of (seed, b, h, i, j), the same
                               for any tiling, ISA or thread count and in sdpa_reference.
                               Requires batch, heads_q, len_q < 2^32, len_kv < 2^34. */

    /* ---- compute precision (appended in ABI level 2) ---- */
    int compute;            /* an sdpa_compute value; 0 = exact fp32 products */

    /* ---- KV cache storage (appended in ABI level 2) ---- */
    sdpa_scales k_scales;   /* K's scales when k has a quantized dtype; .data NULL = none */
    sdpa_scales v_scales;   /* V's, likewise (each operand quantized independently) */
    sdpa_pages pages;       /* K and V read through a block table; .block_table NULL = off */
} sdpa_desc;

/* Limits on the descriptor's dimensions (inclusive). */
#define SDPA_MAX_DIM ((int64_t)1 << 40)       /* batch, heads, len_q, len_kv */
#define SDPA_MAX_HEAD_DIM ((int64_t)1 << 16)  /* dim_qk, dim_v */

/* Fused attention (FlashAttention-2 tiling, online softmax, O(threads x tile) scratch).
 *   q   [B, Hq,  Tq,  Dk]     k [B, Hkv, Tkv, Dk]     v [B, Hkv, Tkv, Dv]
 *   o   [B, Hq,  Tq,  Dv]     output, written in full on success
 *   lse [B, Hq,  Tq] contiguous fp32 ([Hq, Tq] under packed varlen), optional (NULL):
 *       natural log of the softmax denominator of each row (sinks included), so the
 *       weight of key j is exp(s_ij - lse_i); -inf for a row with no visible key (the
 *       sink logit when sinks are on: its output is zeros all the same) and for a
 *       padding row (sinks or not).
 * Returns SDPA_OK, or an error status with o and lse untouched. */
SDPA_API sdpa_status sdpa_forward(const sdpa_desc *desc, const sdpa_tensor *q,
                                  const sdpa_tensor *k, const sdpa_tensor *v,
                                  const sdpa_tensor *o, float *lse);

/* Naive reference: same signature and semantics as sdpa_forward. Materialises one row of
 * scores at a time and accumulates in double. Slow (it is the oracle and the baseline),
 * single-threaded, O(Tkv) scratch. desc->num_threads is ignored, and desc->isa too (any
 * sdpa_isa value is accepted, even one sdpa_forward would refuse as unusable here). */
SDPA_API sdpa_status sdpa_reference(const sdpa_desc *desc, const sdpa_tensor *q,
                                    const sdpa_tensor *k, const sdpa_tensor *v,
                                    const sdpa_tensor *o, float *lse);

/* Attention weights, [B, Hq, Tq, Tkv] contiguous fp32 ([1, Hq, len_q, len_kv] under
 * packed varlen, with key columns counted within each sequence): the softmax weights
 * exp(s_ij - lse_i) of every visible key (after dropout, if on: the weights P V used),
 * 0 for hidden keys and padding. O(Tq x Tkv) memory: opt in only to inspect small
 * problems. lse must be the output of sdpa_forward (or sdpa_reference) for the same
 * descriptor and inputs; V and O are not needed. The scores are recomputed with the
 * fused kernels (desc->isa) tile by tile; the result matches the reference's weights
 * within the fp32 tolerance. */
SDPA_API sdpa_status sdpa_attention_weights(const sdpa_desc *desc, const sdpa_tensor *q,
                                            const sdpa_tensor *k, const float *lse,
                                            float *weights);

/* ---- writing a KV cache -------------------------------------------------------------- */

/* Writes new tokens into a K or V cache exactly as sdpa_forward reads it: rows
 * src[b, h, t, :] (fp32, f16 or bf16), t < len, go to cache rows pos[b] + t of entry b
 * (through desc->pages when its block_table is set), converted to the cache's dtype:
 *   - F32, F16, BF16: rounded to nearest even (a paged copy when the dtypes agree);
 *   - quantized, desc->scales.data holds the scales (sdpa_scales, same indexing as the
 *     cache's). With compute_scales = 1 each (token, head, group) gets
 *         scale = amax / Q  (fp32 division; amax the group's largest |x|, Q = 127 for
 *                            SDPA_I8, 7 for SDPA_I4, 448 for E4M3, 57344 for E5M2)
 *     for SDPA_I8 in an fp32 view rounded up to the nearest float whose low 7 significand
 *     bits are 0 (at most 2^-16 relative: every code times it is then exact, which lets
 *     decode multiply by it once per key rather than once per element; a caller's own
 *     int8 scales of that form, and f16 scales, get the same),
 *     written to the scale view (fp32, or rounded to f16 for an f16 view; a scale that
 *     rounds to 0 or is 0 stores codes 0), which then must give every (token, head,
 *     group) its own element. With compute_scales = 0 the scales are read (calibrated
 *     per-tensor or per-head fp8, static int8). Codes: c = x / scale (fp32 division)
 *     rounded to nearest even, saturated to the format's range (int8 -127 .. 127, int4
 *     -7 .. 7, fp8 to +-max: e4m3 saturates, e5m2 too, as vLLM does); NaN is stored as
 *     NaN in fp8 and as 0 in int8/int4 (no NaN code); an infinite x saturates.
 * The same inputs give the same bytes for any thread count. Errors as for sdpa_forward's
 * views (the cache and the scales are outputs: SDPA_ERR_OVERLAP when they share memory
 * with src; SDPA_ERR_BAD_ARGUMENT for a page index outside the pool or pos[b] + len
 * beyond len_kv); nothing is written on error. */
typedef struct sdpa_kv_write_desc {
    int64_t batch, heads, len; /* the new rows: [batch, heads, len, dim] */
    int64_t dim;
    int64_t len_kv;            /* the cache's capacity in tokens per entry (the block
                                  table's row covers ceil(len_kv / page_size) pages) */
    const int64_t *pos;        /* [batch] first cache row written per entry; NULL = 0 */
    sdpa_pages pages;          /* the cache's paging; .block_table NULL = contiguous */
    sdpa_scales scales;        /* the cache's scales (quantized dtypes only) */
    int compute_scales;        /* 1: compute and write the scales; 0: read them */
    int num_threads;           /* as in sdpa_desc */
} sdpa_kv_write_desc;

SDPA_API sdpa_status sdpa_kv_write(const sdpa_kv_write_desc *desc, const sdpa_tensor *src,
                                   const sdpa_tensor *cache);

/* ---- plans: the fused path on the caller's threads ------------------------------- */

/* A plan is sdpa_forward cut into units of work that any thread may run, for engines that
 * bring their own thread pool (ggml, ONNX Runtime, at::parallel_for, rayon) instead of an
 * OpenMP team. sdpa_forward is exactly this plan run on an OpenMP team; the results of a
 * plan are the same bits as sdpa_forward's for any order of the units, any interleaving
 * and any number of workers.
 *
 *     sdpa_plan *plan;
 *     sdpa_plan_create(&desc, &q, &k, &v, &o, lse, &plan);  validation + all allocation
 *     each worker: a buffer of sdpa_plan_scratch_size(plan) bytes, 64-byte aligned
 *     for u in [0, sdpa_plan_units(plan)):        any thread, any order, concurrently:
 *         sdpa_plan_run(plan, u, scratch_of_this_worker)
 *     -- every unit done (a barrier) --
 *     for f in [0, sdpa_plan_finish_units(plan)): any thread, any order, concurrently:
 *         sdpa_plan_finish(plan, f, scratch_of_this_worker)
 *     sdpa_plan_destroy(plan)
 *
 * Units never allocate, lock or start threads (no OpenMP inside); each writes its own
 * output rows (or split-KV partials, which the finishing units merge in a fixed order).
 * A worker's scratch is used by one unit at a time. The plan keeps the views' pointers
 * and every array the descriptor points to (mask, lengths, slopes, sinks): they must stay
 * valid and unchanged until the plan is destroyed. desc->num_threads is ignored (the
 * caller's threads run it); desc->stats is ignored (see sdpa_plan_stats). */
typedef struct sdpa_plan sdpa_plan;

/* Validates exactly as sdpa_forward does (same statuses, outputs untouched on error) and
 * allocates everything the call needs except the workers' scratch. *plan is NULL on
 * error. */
SDPA_API sdpa_status sdpa_plan_create(const sdpa_desc *desc, const sdpa_tensor *q,
                                      const sdpa_tensor *k, const sdpa_tensor *v,
                                      const sdpa_tensor *o, float *lse, sdpa_plan **plan);
/* Units of the first phase, and finishing units (0 unless the plan splits keys across
 * units or has rows no packed sequence owns). */
SDPA_API int64_t sdpa_plan_units(const sdpa_plan *plan);
SDPA_API int64_t sdpa_plan_finish_units(const sdpa_plan *plan);
/* Bytes of scratch one worker needs (its buffer must be 64-byte aligned). */
SDPA_API size_t sdpa_plan_scratch_size(const sdpa_plan *plan);
/* Run unit `unit` / finishing unit `unit` with a worker's scratch. Errors (nothing run):
 * SDPA_ERR_NULL_POINTER, SDPA_ERR_MISALIGNED (scratch not 64-byte aligned),
 * SDPA_ERR_BAD_ARGUMENT (unit out of range). */
SDPA_API sdpa_status sdpa_plan_run(const sdpa_plan *plan, int64_t unit, void *scratch);
SDPA_API sdpa_status sdpa_plan_finish(const sdpa_plan *plan, int64_t unit, void *scratch);
/* The work counters of a plan whose units have all run (threads = 0: the caller's). */
SDPA_API sdpa_status sdpa_plan_stats(const sdpa_plan *plan, sdpa_stats *stats);
/* Frees the plan (NULL is a no-op). */
SDPA_API void sdpa_plan_destroy(sdpa_plan *plan);

/* ---- merging partial attention states ---------------------------------------------- */

/* Attention over a set of keys from attention over disjoint parts of it: given, for the
 * same rows, n partial results (O_i, lse_i) each over its own keys (lse natural-log, as
 * sdpa_forward writes it), writes
 *
 *     L = log sum_i exp(lse_i)       O = sum_i exp(lse_i - L) O_i
 *
 * summed in the order i = 0 .. n-1 (the same bits for the same inputs, any threads).
 * This is how split-KV decode, context parallelism across ranks and ring attention
 * combine their pieces; sdpa_forward's own split-KV merge is this function. Edge cases:
 * a part with lse = -inf (it saw no key) contributes nothing, whatever its O; all parts
 * -inf gives O = 0 and L = -inf; a NaN lse or NaN in O_i propagates as NaN.
 *
 * Shapes: every part and the output are [B, H, T, D] views (o_parts[i], o: sdpa_tensor,
 * any of fp32/f16/bf16, strides as for sdpa_forward's o); lse_parts[i] and lse are
 * contiguous fp32 [B, H, T]; lse may be NULL. The output may be the first part itself
 * (the same view; and lse the same array as lse_parts[0]): engines merge in place; any
 * other overlap between an output and a part is SDPA_ERR_OVERLAP. Errors as for
 * sdpa_forward's views (SDPA_ERR_BAD_DIMENSION for parts out of range); nothing is
 * written on error. */
typedef struct sdpa_merge_desc {
    int64_t batch, heads, len; /* B, H, T: 1 .. SDPA_MAX_DIM */
    int64_t dim;               /* D: 1 .. SDPA_MAX_HEAD_DIM */
    int parts;                 /* n: 1 .. SDPA_MAX_MERGE_PARTS */
    int num_threads;           /* as in sdpa_desc */
} sdpa_merge_desc;
#define SDPA_MAX_MERGE_PARTS 65536

SDPA_API sdpa_status sdpa_merge(const sdpa_merge_desc *desc, const sdpa_tensor *o_parts,
                                const float *const *lse_parts, const sdpa_tensor *o,
                                float *lse);

/* The standard ALiBi slopes for `heads` query heads (Press, Smith, Lewis, "Train Short,
 * Test Long", ICLR 2022, and the rule of its reference code for head counts that are not
 * a power of two, which llama.cpp's max_bias computes too): with n the largest power of
 * two <= heads and b = max_bias (0 means the paper's 8),
 *     slopes[h] = 2^(-b (h + 1) / n)                 for h < n
 *     slopes[h] = 2^(-b (2 (h - n) + 1) / (2 n))     for n <= h < heads
 * each rounded to nearest from the exact power of two. For heads = 8: 1/2, 1/4, ...,
 * 1/256. Pass the result as sdpa_desc.alibi_slopes. Errors: SDPA_ERR_BAD_DIMENSION
 * (heads outside 1 .. SDPA_MAX_DIM), SDPA_ERR_BAD_ARGUMENT (max_bias negative or not
 * finite), and slopes as any caller array (NULL, misaligned, extent); slopes untouched
 * on error. */
SDPA_API sdpa_status sdpa_alibi_slopes(int64_t heads, float max_bias, float *slopes);

/* ---- linear layers and the multi-head attention layer ----------------------------- */

/* y = x W^T + b, as nn.Linear computes it (fp32, row-major). The projections of the
 * attention layer; the same kernel table's QK^T microkernel does the work (QK^T and
 * x W^T are both rows dotted with rows). */
typedef struct sdpa_linear_desc {
    int64_t rows;         /* M, rows of x and y, >= 1 */
    int64_t in_features;  /* K, >= 1 */
    int64_t out_features; /* N, >= 1 */
    const float *weight;  /* [out_features, in_features] (nn.Linear.weight), rows ld_w
                             apart */
    const float *bias;    /* [out_features] or NULL */
    int64_t ld_x;         /* floats between rows of x; 0 = in_features */
    int64_t ld_w;         /* floats between rows of weight; 0 = in_features */
    int64_t ld_y;         /* floats between rows of y; 0 = out_features */
    int num_threads;      /* as in sdpa_desc */
    int isa;              /* as in sdpa_desc */
} sdpa_linear_desc;

/* y [rows, out_features] = x [rows, in_features] W^T + bias. y must not overlap x, the
 * weight or the bias. Deterministic for any thread count. */
SDPA_API sdpa_status sdpa_linear(const sdpa_linear_desc *desc, const float *x, float *y);

/* One projection's parameters, in nn.Linear's layout. */
typedef struct sdpa_proj {
    const float *weight; /* [out, in], contiguous rows */
    const float *bias;   /* [out] or NULL */
} sdpa_proj;

/* A multi-head attention layer (the seeds' MultiHeadAttention, nn.MultiheadAttention):
 *
 *   Q = x Wq^T + bq        [B, T,   Hq  * Dh]   viewed as [B, T, Hq, Dh]
 *   K = kv Wk^T + bk       [B, Tkv, Hkv * Dh]   kv = x for self-attention
 *   V = kv Wv^T + bv       [B, Tkv, Hkv * Dh]
 *   C = sdpa(Q, K, V)      [B, T,   Hq  * Dh]   heads merged back in place
 *   y = C Wo^T + bo        [B, T,   d_out]      (y = C when wo.weight is NULL)
 *
 * Every attention feature of sdpa_desc applies (causal, masks, windows, dropout...):
 * set them in .attn and leave its shape fields (batch .. dim_v) zero; the layer fills
 * them. Memory: the four activations above plus lse, in the caller's workspace of
 * sdpa_mha_workspace_size() bytes or, when workspace is NULL, allocated and freed by the
 * call. Nothing is O(T x Tkv) unless weights are asked for. */
typedef struct sdpa_mha_desc {
    int64_t batch;    /* B, >= 1 */
    int64_t len_q;    /* T, rows of x per batch entry */
    int64_t len_kv;   /* Tkv, rows of kv per batch entry; 0 = len_q (self-attention) */
    int64_t d_in;     /* features of x */
    int64_t d_kv;     /* features of kv; 0 = d_in */
    int64_t heads_q;  /* Hq */
    int64_t heads_kv; /* Hkv (GQA: Wk and Wv have Hkv * Dh rows); 0 = heads_q */
    int64_t head_dim; /* Dh */
    int64_t d_out;    /* features of y (rows of Wo); ignored without wo, y is then
                         [B, T, Hq * Dh] */
    sdpa_proj wq, wk, wv, wo;
    /* Alternatively nn.MultiheadAttention's packed in-projection: rows [0, Hq Dh) are Wq,
     * the next Hkv Dh rows Wk, the last Hkv Dh rows Wv (d_kv must equal d_in). When set,
     * wq/wk/wv must be unset. */
    const float *in_proj_weight; /* [(Hq + 2 Hkv) Dh, d_in] */
    const float *in_proj_bias;   /* [(Hq + 2 Hkv) Dh] or NULL */
    sdpa_desc attn;   /* attention options (shape fields left 0) and num_threads / isa,
                         which the projections use too */
} sdpa_mha_desc;

/* Bytes of workspace sdpa_mha_forward needs for this descriptor (0 if it is invalid). */
SDPA_API size_t sdpa_mha_workspace_size(const sdpa_mha_desc *desc);

/* y [B, T, d_out] from x [B, T, d_in] and, for cross-attention, kv [B, Tkv, d_kv] (NULL
 * for self-attention), all contiguous fp32. weights (optional, NULL = none) receives the
 * attention weights [B, Hq, T, Tkv] (see sdpa_attention_weights). workspace: NULL, or at
 * least sdpa_mha_workspace_size() bytes aligned to 64. */
SDPA_API sdpa_status sdpa_mha_forward(const sdpa_mha_desc *desc, const float *x,
                                      const float *kv, float *y, float *weights,
                                      void *workspace);

/* ISA control. The process-wide choice is made once, thread-safely, on first use: the
 * SDPA_ISA environment variable (scalar|avx2|avx512|neon) if set, else the best ISA this
 * build and CPU support. An SDPA_ISA naming an ISA that is not usable is reported on
 * stderr and makes every sdpa_forward call fail with SDPA_ERR_UNSUPPORTED_ISA (never a
 * silent fallback). SDPA_VERBOSE=1 logs the choice to stderr once. */

/* The ISA sdpa_forward uses when desc->isa is 0. */
SDPA_API sdpa_isa sdpa_get_isa(void);
/* Force the process-wide ISA (SDPA_ISA_AUTO returns to the automatic choice). Returns
 * SDPA_ERR_UNSUPPORTED_ISA for an ISA not built in or not usable on this CPU, leaving the
 * choice unchanged. Meant for tests and tools; calls in flight keep the table they took. */
SDPA_API sdpa_status sdpa_set_isa(sdpa_isa isa);
/* 1 if the ISA is compiled into this build and usable on this CPU, else 0. */
SDPA_API int sdpa_isa_supported(sdpa_isa isa);
/* Lower-case name ("scalar", "avx2", "avx512", "neon", "auto"); "unknown" otherwise. */
SDPA_API const char *sdpa_isa_name(sdpa_isa isa);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_H */
