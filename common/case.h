/*
 * case.h - the one case library of the tests, the benchmark, the fuzz target and the
 * tools: an attention case built from a plain description (the descriptor, the views and
 * their deterministic data, every feature of sdpa_desc), the tolerance rule outputs are
 * judged by (DESIGN.md section 6) and the comparison that applies it.
 *
 * It is not a test framework (counting and reporting are tests/harness.c's), not a
 * benchmark (no timing: bench/) and not a fuzz decoder (the byte format is
 * tests/fuzz/fuzz_core.c's, which takes its data, buffers and rule from here). It calls
 * only the public API (include/sdpa.h) and shares no code with the library's internals,
 * so a bug there cannot hide in here; its fp16/bf16 conversions are its own for that
 * reason. Plain C11, plus POSIX mmap for guard pages (and Linux madvise for huge pages) and a
 * mutex around their list.
 * Symbols are prefixed sc_.
 */
#ifndef SDPA_COMMON_CASE_H
#define SDPA_COMMON_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- deterministic data ------------------------------------------------------------ */

/* splitmix64 (Steele, Lea, Flood 2014): the next value of the stream *state. */
uint64_t sc_rand_u64(uint64_t *state);
/* Uniform in [-1, 1): 53 random bits, then rounded to float. */
float sc_rand_float(uint64_t *state);

/* ---- elements ---------------------------------------------------------------------- */

/* Bytes of one element of a dtype (4 for fp32, 2 for f16 and bf16, 1 for the 8-bit
 * codes; 0 for int4, half a byte: sc_view_at handles it). */
size_t sc_dtype_size(sdpa_dtype t);
/* Element i of a buffer of dtype t: stored from fp32 rounding to nearest even (overflow
 * gives inf, NaN stays NaN), or widened to fp32 exactly. */
void sc_store(void *buf, size_t i, sdpa_dtype t, float x);
float sc_load(const void *buf, size_t i, sdpa_dtype t);

/* ---- buffers ----------------------------------------------------------------------- */

enum {
    SC_GUARD_AFTER = 0,  /* the last byte is followed by an unmapped page */
    SC_GUARD_BEFORE = 1, /* the first byte is preceded by one */
    SC_GUARD_NONE = 2,   /* plain heap memory aligned to 64 bytes (large cases, timing) */
    SC_GUARD_HUGE = 3    /* no guard; a buffer of SC_HUGE_PAGE bytes or more starts on a
                            huge-page boundary and is advised onto transparent huge pages
                            (Linux madvise MADV_HUGEPAGE; elsewhere, or refused, as NONE):
                            the timing of a KV cache kept as README advises engines to */
};
/* The x86-64 and AArch64 (4 KiB granule) Linux huge page: 2 MiB. */
#define SC_HUGE_PAGE ((size_t)2 << 20)
/* bytes of writable memory guarded as asked, or NULL when out of memory. An over-read
 * (or under-read) of a guarded buffer faults. Free with sc_free. Thread-safe. */
void *sc_alloc(size_t bytes, int guard);
void sc_free(void *p);

/* ---- a case ------------------------------------------------------------------------ */

enum { SC_BHTD = 0, SC_BTHD = 1, SC_PADDED = 2 }; /* layouts of the views */

/* Sequence-length modes. */
enum {
    SC_LENS_NONE = 0,
    SC_LENS_PADDED = 1, /* q_lens and kv_lens per batch entry (entry 1 gets kv_len 0) */
    SC_LENS_KV = 2,     /* kv_lens only (a KV cache filled to different lengths) */
    SC_LENS_VARLEN = 3  /* packed varlen: cu_seqlens; Tq/Tkv are the longest sequence */
};

/* Mask broadcast bits: one mask for every batch entry, head, or query row (stride 0). */
enum { SC_BCAST_B = 1, SC_BCAST_H = 2, SC_BCAST_ROWS = 4 };

/* What to build, in DESIGN.md's names. Every field's zero value is the plain default. */
typedef struct sc_case {
    int64_t B, Hq, Hkv, Tq, Tkv, Dk, Dv;
    int causal;       /* an sdpa_causal value */
    int threads;      /* desc.num_threads */
    int layout;       /* SC_BHTD, SC_BTHD or SC_PADDED (gaps between rows and heads) */
    int misalign;     /* under SC_GUARD_BEFORE, start every buffer this many elements
                         past its page start (after the guard page, a buffer ends where
                         its size puts it) */
    int guard;        /* SC_GUARD_* of every buffer */
    float scale;      /* desc.scale (0 = default) */
    float amplitude;  /* inputs uniform in [-amplitude, amplitude); 0 means 1 */
    uint64_t seed;    /* of the data, lengths, mask, sinks and dropout */
    /* features, all off when zero */
    sdpa_dtype dt[4]; /* storage of q, k, v, o */
    int window;
    int64_t wl, wr;
    float softcap;
    int alibi;        /* the ALiBi paper's slopes for Hq heads (sdpa_alibi_slopes) */
    int sinks;        /* per-head sink logits in [-1, 3) (head 1 gets -inf: no sink) */
    int mask;         /* an sdpa_mask_kind */
    sdpa_dtype mask_dt;
    int mask_bcast;   /* SC_BCAST_* bits */
    float mask_hidden;/* fraction of hidden entries; row 3 of each head is fully hidden */
    int lens;         /* SC_LENS_* */
    const int64_t *kv_lens; /* [B] given key lengths (with lens SC_LENS_NONE), or NULL */
    float dropout;    /* desc.dropout_p (its seed derives from the case's seed) */
    int compute;      /* desc.compute: an sdpa_compute value */
    int v_in_k;       /* V is a view of K's memory, its first Dv columns (Dv <= Dk; MLA's
                         latent cache, where V is the compressed part of K) */
    /* KV cache storage (include/sdpa.h "KV caches"); dt[1] / dt[2] may be quantized */
    int64_t page;     /* > 0: K and V paged, pages of this many tokens drawn from a pool in
                         shuffled order (not with SC_LENS_VARLEN) */
    int qscale;       /* quantized K/V: SC_QS_ROW, SC_QS_HEAD or SC_QS_TENSOR scales */
    int64_t qgroup;   /* SC_QS_ROW: channels per scale (0 = the whole row) */
    sdpa_dtype qscale_dt; /* the scales' dtype (F32 or F16) */
} sc_case;

/* Scale granularities of a quantized K/V case: per (token, head [, group]) computed by
 * sdpa_kv_write, or per head / per tensor computed from the data's largest |x| and
 * given to it (calibrated scales, as fp8 caches use). */
enum { SC_QS_ROW = 0, SC_QS_HEAD = 1, SC_QS_TENSOR = 2 };

/* A built case: the descriptor and views of a case, filled, ready for either entry
 * point. Two sets made from the same case hold the same values. */
typedef struct sc_tensors {
    sdpa_desc desc;   /* isa 0, stats NULL: the caller sets those */
    sdpa_tensor q, k, v, o;
    float *lse;       /* [VB, Hq, Tq] */
    void *bufs[5];    /* the allocations of q, k, v, o (a view may start inside) and lse */
    size_t elems[5];  /* elements of q, k, v, o, lse (o and lse are written) */
    int64_t VB;       /* batch entries of the views (1 under packed varlen) */
    void *mask;
    float *slopes, *sinks;
    int64_t *qlens, *kvlens, *cuq, *cukv;
    /* paged or quantized K/V: bufs[1] / bufs[2] hold the contiguous source rows (fp32
     * when quantized) from which sdpa_kv_write filled these caches, which k and v view */
    void *cache[2], *scales[2];
    size_t cache_bytes[2];
    int32_t *table;   /* the block table, [VB, ceil(Tkv / page)] */
} sc_tensors;

/* The descriptor of c without its buffers: the dimensions, the scalar features and the
 * given kv_lens (lengths modes, masks, slopes and sinks live in buffers that
 * sc_tensors_make allocates). What a case is planned from without its data. */
sdpa_desc sc_desc(const sc_case *c);

/* Allocates and fills t from c: inputs uniform in [-amplitude, amplitude) rounded to
 * their dtypes, from the stream of c->seed over each buffer's whole extent (gaps of a
 * padded layout included); o and lse hold the sentinels below, so an element a call did
 * not write stays visible. Returns 0, or -1 when out of memory or when the case is too
 * large to address (nothing to free then). */
int sc_tensors_make(sc_tensors *t, const sc_case *c);
void sc_tensors_free(sc_tensors *t);

/* What o (fp32 and 16-bit) and lse hold before a call: quiet NaNs no computation yields. */
#define SC_SENTINEL_F32 0x7fc0deadu
#define SC_SENTINEL_16 0x7e5au

/* Pointer to element (b, h, i, 0) of an fp32 view. */
float *sc_at(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i);
/* Element (b, h, i, d) of a view of any dtype, widened to fp32. */
float sc_get(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i, int64_t d);
/* The view that starts at element (b, h, i, 0) of t, with t's strides and dtype. */
sdpa_tensor sc_view_at(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i);

/* The case as "B=.. Hq=.. ..." in buf. */
const char *sc_case_str(const sc_case *c, char *buf, size_t n);

/* ---- the tolerance rule and the comparison ----------------------------------------- */

/* DESIGN.md section 6: an output element o passes against the reference's r when
 *     |o - r| <= 1e-5 + rel |r|,  rel = 1e-4 for an fp32 output,
 * plus one unit in the last place of a 16-bit output (rel += 2^-10 for f16, 2^-7 for
 * bf16), since both paths round nearly equal fp32 values once and may land on the two
 * sides of a rounding boundary. o may be NaN only where r is NaN and inf only where r is
 * the same inf. lse is fp32 whatever the output's dtype. */
#define SC_TOL_ABS 1e-5
#define SC_TOL_REL 1e-4
double sc_rel_tol(sdpa_dtype out);
int sc_close(double got, double want, sdpa_dtype out);

/* What a comparison found. max_abs and max_rel are over the finite pairs; max_rel only
 * where |r| > 1e-3, where a relative error means something. */
typedef struct sc_error {
    double max_abs, max_rel;
    int64_t bad;      /* elements outside the tolerance (NaN and inf mismatches count) */
    int64_t checked;
    double abs_tol;   /* > 0: finite pairs pass when |o - r| <= abs_tol + rel |r| instead
                         (the bf16 compute mode's bound, sc_bf16_abs_tol) */
} sc_error;

/* The absolute bound of the bf16 compute mode against sdpa_reference in the mode, for
 * inputs like the suite's (|q|, |k| <= 1, a scale near 1/sqrt(Dk), no huge bias): the
 * header's error model with A_d <= max |v| and its score term D far below 2^-7, so
 * |o - r| <= 2^-6 max |v|. vmax is max |v| over V. */
#define sc_bf16_abs_tol(vmax) (0x1p-6 * (vmax))

/* Judges one element by sc_close and records it in e; returns sc_close's answer. */
int sc_error_add(sc_error *e, double got, double want, sdpa_dtype out);
/* Every element of [B, H, T, D] of view got against the same element of view want (any
 * dtypes), judged by got's dtype. */
void sc_compare_view(sc_error *e, const sdpa_tensor *got, const sdpa_tensor *want, int64_t B,
                     int64_t H, int64_t T, int64_t D);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_COMMON_CASE_H */
