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
 *   - A row with no visible key outputs zeros and lse = -inf (never NaN from masking).
 *     A masked key contributes exactly 0 whatever its score (even NaN or inf).
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
    SDPA_ERR_OVERFLOW = 5,      /* an operand's extent in bytes overflows int64/size_t or
                                   the address space */
    SDPA_ERR_OVERLAP = 6,       /* an output (o or lse) shares memory with an input or with
                                   the other output */
    SDPA_ERR_BAD_DTYPE = 7,     /* an unknown dtype, or one this build does not support */
    SDPA_ERR_BAD_ARGUMENT = 8,  /* another field out of range: scale not finite, negative
                                   num_threads, unknown causal or isa value */
    SDPA_ERR_OUT_OF_MEMORY = 9, /* scratch allocation failed */
    SDPA_ERR_UNSUPPORTED_ISA = 10, /* the ISA asked for is not built in or not usable on
                                      this CPU */
    SDPA_ERR_MISALIGNED = 11       /* a data pointer is not aligned to its element size */
} sdpa_status;

/* Returns a static, human-readable description of a status (never NULL). */
SDPA_API const char *sdpa_strerror(sdpa_status status);

/* Returns the library version as "MAJOR.MINOR.PATCH" (static string). */
SDPA_API const char *sdpa_version(void);

/* Element types. Every operand carries its own dtype; 0 is fp32.
 * This version computes fp32 operands only: SDPA_F16/SDPA_BF16 are reserved names, and
 * passing them returns SDPA_ERR_BAD_DTYPE until storage conversion lands. */
typedef enum sdpa_dtype {
    SDPA_F32 = 0,  /* IEEE-754 binary32 */
    SDPA_F16 = 1,  /* IEEE-754 binary16 (reserved) */
    SDPA_BF16 = 2  /* bfloat16 (reserved) */
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

/* Causal masking modes. */
typedef enum sdpa_causal {
    SDPA_CAUSAL_NONE = 0,         /* every key visible */
    SDPA_CAUSAL_BOTTOM_RIGHT = 1  /* row i sees key j iff j <= i + (len_kv - len_q) */
} sdpa_causal;

/* Instruction sets a kernel table can target. */
typedef enum sdpa_isa {
    SDPA_ISA_AUTO = 0,    /* the best one this CPU and build support */
    SDPA_ISA_SCALAR = 1,  /* portable C, always available */
    SDPA_ISA_AVX2 = 2,    /* x86-64 AVX2 + FMA */
    SDPA_ISA_AVX512 = 3,  /* x86-64 AVX-512 F/BW/DQ/VL */
    SDPA_ISA_NEON = 4,    /* AArch64 Advanced SIMD */
    SDPA_ISA_COUNT_ = 5   /* number of values, not an ISA */
} sdpa_isa;

/* Work counters of one call, filled when sdpa_desc.stats is non-NULL. A "block" is one
 * Br x Bc tile of query rows by key columns (Br, Bc: the kernel table's tile sizes). */
typedef struct sdpa_stats {
    sdpa_isa isa;             /* kernel table used (SDPA_ISA_AUTO for the reference) */
    int threads;              /* threads used (1 when run without a parallel region) */
    int block_q, block_kv;    /* Br and Bc */
    int64_t work_items;       /* (b, h, query-block) items */
    int64_t blocks_total;     /* all Br x Bc tiles of the score matrices */
    int64_t blocks_computed;  /* tiles computed (QK^T, softmax, PV) */
    int64_t blocks_skipped;   /* tiles skipped without touching memory (causal) */
    int64_t blocks_masked;    /* computed tiles that needed element masking */
} sdpa_stats;

/* What to compute. The all-zero value of every option is the plain default (non-causal,
 * default scale, default threads, automatic ISA), so initialise with designated
 * initializers and name only what you need:
 *
 *     sdpa_desc d = { .batch = 1, .heads_q = 8, .heads_kv = 8, .len_q = 128,
 *                     .len_kv = 128, .dim_qk = 64, .dim_v = 64, .causal = 1 };
 */
typedef struct sdpa_desc {
    int64_t batch;     /* B, >= 1 */
    int64_t heads_q;   /* Hq, >= 1 */
    int64_t heads_kv;  /* Hkv, >= 1, divides heads_q (Hkv < Hq: GQA; Hkv == 1: MQA).
                          Query head h reads K/V head h / (heads_q / heads_kv). */
    int64_t len_q;     /* Tq, query rows, 1 .. SDPA_MAX_DIM */
    int64_t len_kv;    /* Tkv, key/value rows, 1 .. SDPA_MAX_DIM (may differ from Tq) */
    int64_t dim_qk;    /* Dk, head dim of Q and K, 1 .. SDPA_MAX_HEAD_DIM */
    int64_t dim_v;     /* Dv, head dim of V and O, 1 .. SDPA_MAX_HEAD_DIM (may differ) */
    float scale;       /* multiplies <q,k>; 0 = 1/sqrt(dim_qk); must be finite */
    int causal;        /* an sdpa_causal value; 0 = none */
    int num_threads;   /* upper bound on threads; 0 = OpenMP's default; >= 0 */
    int isa;           /* an sdpa_isa value forcing this call's kernels; 0 = the
                          process-wide choice (sdpa_get_isa). Ignored by sdpa_reference. */
    sdpa_stats *stats; /* optional out: work counters of this call; NULL = none */
} sdpa_desc;

/* Limits on the descriptor's dimensions (inclusive). */
#define SDPA_MAX_DIM ((int64_t)1 << 40)       /* batch, heads, len_q, len_kv */
#define SDPA_MAX_HEAD_DIM ((int64_t)1 << 16)  /* dim_qk, dim_v */

/* Fused attention (FlashAttention-2 tiling, online softmax, O(threads x tile) scratch).
 *   q   [B, Hq,  Tq,  Dk]     k [B, Hkv, Tkv, Dk]     v [B, Hkv, Tkv, Dv]
 *   o   [B, Hq,  Tq,  Dv]     output, written in full on success
 *   lse [B, Hq,  Tq] contiguous fp32, optional (NULL): natural log of the softmax
 *       denominator of each row, -inf for rows with no visible key.
 * Returns SDPA_OK, or an error status with o and lse untouched. */
SDPA_API sdpa_status sdpa_forward(const sdpa_desc *desc, const sdpa_tensor *q,
                                  const sdpa_tensor *k, const sdpa_tensor *v,
                                  const sdpa_tensor *o, float *lse);

/* Naive reference: same signature and semantics as sdpa_forward. Materialises one row of
 * scores at a time and accumulates in double. Slow (it is the oracle and the baseline),
 * single-threaded, O(Tkv) scratch. desc->isa and desc->num_threads are ignored. */
SDPA_API sdpa_status sdpa_reference(const sdpa_desc *desc, const sdpa_tensor *q,
                                    const sdpa_tensor *k, const sdpa_tensor *v,
                                    const sdpa_tensor *o, float *lse);

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
