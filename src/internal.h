/*
 * internal.h - what the files of src/ share with each other and with the tests: the
 * validated problem, the dispatcher's view of the kernel tables, and the driver entry
 * that takes an explicit table (so tests can run a deliberately broken one).
 *
 * Nothing here is public API: the symbols are hidden from the shared library
 * (-fvisibility=hidden) and reachable only by linking the static library.
 */
#ifndef SDPA_INTERNAL_H
#define SDPA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/ukernel.h"
#include "sdpa.h"

/* A descriptor and its views after validation: defaults resolved, every extent known
 * to fit in int64 and in the address space. */
typedef struct sdpa_problem {
    int64_t B, Hq, Hkv, Tq, Tkv, Dk, Dv;
    int64_t group;  /* Hq / Hkv */
    float scale;    /* resolved: desc->scale, or 1/sqrt(Dk) when that is 0 */
    int causal;     /* sdpa_causal */
    int num_threads;
    int isa;
    int compute;    /* sdpa_compute */
    const void *q, *k, *v;
    void *o;
    float *lse;
    sdpa_dtype qt, kt, vt, ot;  /* storage types */
    /* element strides, [batch, head, row]; stride_b is 0 under packed varlen (the
     * sequence's row offset takes its place) */
    int64_t qs[3], ks[3], vs[3], os[3];
    int64_t lse_sb, lse_sh;  /* lse strides: batch (0 under packed varlen), head */

    /* features (see sdpa_desc) */
    sdpa_mask mask;  /* kind SDPA_MASK_NONE: no mask */
    int window;
    int64_t window_left, window_right;
    float softcap;   /* 0 = off */
    const float *alibi, *sinks;
    const int64_t *q_lens, *kv_lens, *cu_q, *cu_kv;
    float dropout_p;             /* 0 = off */
    uint32_t dropout_threshold;  /* drop when the word is below: round(p 2^32) */
    float dropout_scale;         /* 1 / (1 - p) */
    uint64_t dropout_seed;

    /* KV cache storage (sdpa_desc.k_scales, v_scales, pages): kt / vt may then be a
     * quantized dtype, whose scales these are (data NULL: not quantized; group resolved,
     * never 0); under paging, ks[0] / vs[0] and the scales' stride_b step between pages
     * and stride_t between the slots of a page */
    sdpa_scales ksc, vsc;
    sdpa_pages pages;  /* block_table NULL: not paged */
} sdpa_problem;

/* Bytes of one element of a dtype any operand may have (fp32, f16, bf16); 0 for a
 * quantized dtype (K and V only: sdpa_kv_bits) and for a value that is not an
 * sdpa_dtype. */
static inline size_t sdpa_dtype_size(sdpa_dtype t) {
    switch (t) {
    case SDPA_F32:
        return 4;
    case SDPA_F16:
    case SDPA_BF16:
        return 2;
    default:
        return 0;
    }
}

/* 1 for the quantized K/V storage types (SDPA_I8, SDPA_FP8_*, SDPA_I4). */
static inline int sdpa_dtype_quantized(sdpa_dtype t) { return t >= SDPA_I8 && t <= SDPA_I4; }

/* Bits of one element of a K/V storage type; 0 for a value that is none. */
static inline int sdpa_kv_bits(sdpa_dtype t) {
    return sdpa_dtype_quantized(t) ? (t == SDPA_I4 ? 4 : 8) : 8 * (int)sdpa_dtype_size(t);
}

/* ---- memory (alloc.c) ---- */

/* bytes of memory aligned to 64 (any size, 0 included), or NULL when out of memory.
 * Every allocation of the library goes through here. */
void *sdpa_alloc(size_t bytes);
void sdpa_free(void *p);
/* Tests: on the calling thread, make the k-th sdpa_alloc from now return NULL (k >= 1;
 * 0 disarms), and count the allocations made so far. */
void sdpa_alloc_fail_at(int64_t k);
int64_t sdpa_alloc_count(void);

/* ---- validation (validate.c) ---- */

/* The byte range [lo, hi) a view may touch. */
typedef struct sdpa_span {
    uintptr_t lo, hi;
} sdpa_span;

/* The one extent rule every view and caller array goes through (tensors, masks, lengths,
 * per-head arrays, lse, weights, and every kind of view added later): data non-NULL
 * (SDPA_ERR_NULL_POINTER) and aligned to esize (SDPA_ERR_MISALIGNED), strides >= 0
 * (SDPA_ERR_BAD_STRIDE), and the extent of dims n[0..ndims) with strides s (elements)
 * over a contiguous last dim of d elements computed without overflow, its bytes within
 * PTRDIFF_MAX and its end within the address space (below 2^56 on 64-bit targets)
 * (SDPA_ERR_OVERFLOW). Every n[i] >= 1, d >= 1. On success *out is the byte range. */
sdpa_status sdpa_extent(const void *data, size_t esize, int ndims, const int64_t *n,
                        const int64_t *s, int64_t d, sdpa_span *out);

/* A contiguous caller array of count >= 1 elements of esize bytes: sdpa_extent of it. */
sdpa_status sdpa_check_array(const void *a, int64_t count, size_t esize, sdpa_span *sp);

/* 1 if two byte ranges share a byte. */
int sdpa_spans_overlap(sdpa_span a, sdpa_span b);

/* Checks every field and view; on success fills *p. Writes nothing else. */
sdpa_status sdpa_validate(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                          const sdpa_tensor *v, const sdpa_tensor *o, const float *lse,
                          sdpa_problem *p);

/* The same for sdpa_attention_weights: q, k, the lse (an input) and the weights output;
 * p->v and p->o are NULL. */
sdpa_status sdpa_validate_weights(const sdpa_desc *desc, const sdpa_tensor *q,
                                  const sdpa_tensor *k, const float *lse, const float *weights,
                                  sdpa_problem *p);

/* The views of sdpa_merge (parts, their lse arrays, the output and its optional lse). */
sdpa_status sdpa_validate_merge(const sdpa_merge_desc *d, const sdpa_tensor *parts,
                                const float *const *lses, const sdpa_tensor *o,
                                const float *lse);

/* sdpa_kv_write's descriptor and views (the source, the cache and its scales). */
sdpa_status sdpa_validate_kv_write(const sdpa_kv_write_desc *d, const sdpa_tensor *src,
                                   const sdpa_tensor *cache);

/* One batch entry's geometry: its own row and key counts, where its rows start in the
 * views (non-zero only under packed varlen), and the offset of its diagonal,
 * d(i) = i + off (sdpa.h, sdpa_causal). */
typedef struct sdpa_seq {
    int64_t tq, tkv;
    int64_t q0, kv0;
    int64_t off;
} sdpa_seq;

static inline sdpa_seq sdpa_sequence(const sdpa_problem *p, int64_t b) {
    sdpa_seq s = {p->Tq, p->Tkv, 0, 0, 0};
    if (p->cu_q) {
        s.q0 = p->cu_q[b];
        s.kv0 = p->cu_kv[b];
        s.tq = p->cu_q[b + 1] - s.q0;
        s.tkv = p->cu_kv[b + 1] - s.kv0;
    } else {
        if (p->q_lens)
            s.tq = p->q_lens[b];
        if (p->kv_lens)
            s.tkv = p->kv_lens[b];
    }
    s.off = p->causal == SDPA_CAUSAL_TOP_LEFT ? 0 : s.tkv - s.tq;
    return s;
}

/* The visible-key rule shared by the reference and the driver: row i (< s->tq) of a
 * sequence may see keys j in [*lo, *hi) under its length, causal masking and the sliding
 * window (an explicit mask may hide more). An empty range has *lo >= *hi. */
static inline void sdpa_row_range(const sdpa_problem *p, const sdpa_seq *s, int64_t i,
                                  int64_t *lo, int64_t *hi) {
    const int64_t d = i + s->off;
    int64_t a = 0, e = s->tkv;
    if (p->causal != SDPA_CAUSAL_NONE && d + 1 < e)
        e = d + 1;
    if (p->window) {
        /* d - window_left and d + window_right + 1 cannot overflow: |d| < 2^41 and the
         * extents are at most SDPA_MAX_DIM = 2^40 (validated) */
        if (d - p->window_left > a)
            a = d - p->window_left;
        if (d + p->window_right + 1 < e)
            e = d + p->window_right + 1;
    }
    *lo = a < 0 ? 0 : a;
    *hi = e < 0 ? 0 : e;
}

/* ---- KV cache rows (paged, quantized; sdpa.h "KV caches") ---- */

/* Key or value row j (j < the sequence's tkv) of batch entry b, KV head hk, as bytes:
 * `which` 0 reads K, 1 V; kv0 is the sequence's first view row (packed varlen). Under
 * paging, slot j % P of page block_table[b][j / P] (validated: every page index a
 * sequence uses is in the pool). Element offsets are within the validated extent, below
 * 2^56 bytes, so offset * bits cannot overflow. */
static inline const char *sdpa_kv_row(const sdpa_problem *p, int which, int64_t b, int64_t hk,
                                      int64_t kv0, int64_t j) {
    const int64_t *s = which ? p->vs : p->ks;
    const int bits = sdpa_kv_bits(which ? p->vt : p->kt);
    int64_t e;
    if (p->pages.block_table) {
        const int64_t P = p->pages.page_size;
        e = (int64_t)p->pages.block_table[b * p->pages.stride + j / P] * s[0] + hk * s[1] +
            (j % P) * s[2];
    } else {
        e = b * s[0] + hk * s[1] + (kv0 + j) * s[2];
    }
    return (const char *)(which ? p->v : p->k) + e * bits / 8;
}

/* The fp32 scales of that row, one per group: out[0 .. dim / group). */
void sdpa_kv_row_scales(const sdpa_problem *p, int which, int64_t b, int64_t hk, int64_t kv0,
                        int64_t j, float *out);

/* The table for a call computing in mode `compute` (sdpa_compute): the forced ISA if
 * isa != 0, else the process-wide one (or, when that lacks the mode and nobody forced
 * it, the best usable SIMD table that has it). Returns NULL when that ISA is not usable
 * or does not compute the mode (the status to report is SDPA_ERR_UNSUPPORTED_ISA). */
const sdpa_kernels *sdpa_dispatch_table(sdpa_isa isa, int compute);

/* One row of the ISA registry (dispatch.c). */
typedef struct sdpa_isa_info {
    sdpa_isa isa;
    const char *name;             /* sdpa_isa_name(isa) */
    const sdpa_kernels *kernels;  /* its composed table; NULL when not built in (or
                                     incomplete) */
    int usable;                   /* built in and runnable on this CPU and OS */
    unsigned computes;            /* the sdpa_compute modes it computes (bit per value) */
    sdpa_isa base;                /* the row its table starts from (SDPA_ISA_AUTO: none) */
    unsigned own;                 /* the modes whose tiles its own table provides (the
                                     others' are its base's) */
} sdpa_isa_info;

/* Every ISA the library knows, in order of preference (the automatic choice is the first
 * usable one), those built for other targets last; *n gets the count. */
const sdpa_isa_info *sdpa_isa_registry(int *n);

/* The registry row of an ISA, or NULL for a value that names none (SDPA_ISA_AUTO). Tests
 * compare tables tile by tile through its kernels, usable here or not. */
const sdpa_isa_info *sdpa_isa_lookup(sdpa_isa isa);

/* The raw x86 feature bits CPUID and XGETBV report, as dispatch.c reads them to decide
 * which tables are usable; tools/sdpa-cpuinfo prints them. All zero on other targets. */
typedef struct sdpa_x86_cpu {
    int cpuid;          /* CPUID answered (an x86 target) */
    unsigned max_leaf;  /* CPUID.0:EAX */
    char vendor[13];    /* CPUID.0, NUL-terminated */
    int fma, osxsave, avx, f16c;                      /* CPUID.1:ECX */
    int avx2, avx512f, avx512dq, avx512bw, avx512vl;  /* CPUID.(7,0):EBX */
    int amx_bf16, avx512_fp16, amx_tile, amx_int8;    /* CPUID.(7,0):EDX */
    int avx_vnni, avx512_bf16;                        /* CPUID.(7,1):EAX */
    uint64_t xcr0;      /* XCR0, read only when OSXSAVE is set (else 0) */
    int os_ymm, os_zmm, os_amx;  /* XCR0: the OS saves YMM / opmask+ZMM / AMX tile state */
    int l1d_kb;         /* L1 data cache per core, KiB (AMD: CPUID.80000005h:ECX[31:24];
                           Intel: CPUID.4 of the level-1 data cache); 0 if not reported */
} sdpa_x86_cpu;

void sdpa_cpu_x86(sdpa_x86_cpu *f);

/* sdpa_prefetch_l1 and sdpa_prefetch_ahead (kernels/ukernel.h): where the decode kernels
 * prefetch rows ahead (kernels/simd.h prefetch_row, the driver's block heads), 1 into
 * L1, 0 into L2, and how many bytes of rows ahead (SDPA_PREFETCH_AHEAD);
 * sdpa_prefetch_at_l1 and sdpa_prefetch_at_ahead the same for rows read at addresses
 * (paged). Set once at the first use of the library (dispatch.c) from the L1 data
 * cache's size and the vendor, read-only afterwards. */

/* Keys per block of a decode plan (items that read K in place, one KV head each;
 * plan.c), set once with the prefetch policy above (dispatch.c): a multiple of the
 * table's Bc, at most SDPA_DECODE_BC_MAX (kernels/ukernel.h). */
extern int sdpa_decode_bc;

/* The fused driver on a validated problem with an explicit table. */
sdpa_status sdpa_forward_with(const sdpa_kernels *kt, const sdpa_problem *p,
                              sdpa_stats *stats);

/* Attention weights (sdpa_attention_weights) on a problem from sdpa_validate_weights,
 * with scratch of sdpa_weights_scratch() bytes from the caller, or allocated when NULL
 * (the only way it fails: SDPA_ERR_OUT_OF_MEMORY, before writing anything). The size is
 * that of a call made from the same thread in the same OpenMP context. */
size_t sdpa_weights_scratch(const sdpa_kernels *kt, const sdpa_problem *p);
sdpa_status sdpa_weights_with(const sdpa_kernels *kt, const sdpa_problem *p, float *weights,
                              void *buf);

/* y = x W^T + bias (sdpa_linear) with an explicit table, on validated arguments, with
 * scratch of sdpa_linear_scratch() bytes from the caller or allocated when NULL (as
 * sdpa_weights_with). */
size_t sdpa_linear_scratch(const sdpa_kernels *kt, int64_t M, int64_t N, int64_t K,
                           int num_threads);
sdpa_status sdpa_linear_with(const sdpa_kernels *kt, int64_t M, int64_t N, int64_t K,
                             const float *x, int64_t ldx, const float *w, int64_t ldw,
                             const float *bias, float *y, int64_t ldy, int num_threads,
                             void *scratch);

#endif /* SDPA_INTERNAL_H */
