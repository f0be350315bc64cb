/*
 * fuzz_core.c - one fuzz case of sdpa_forward (see fuzz_core.h for the byte format).
 *
 * What one case checks:
 *   - the status: a deliberate fault (FZ_FAULT) or a view whose extent overflows must
 *     fail; a plain case must succeed; an output placed over an input must fail with
 *     SDPA_ERR_OVERLAP; sdpa_forward and sdpa_reference agree on the status (the
 *     reference ignores desc.isa, so only SDPA_ERR_UNSUPPORTED_ISA may differ);
 *   - on failure, the output buffers (o with its gaps, and lse) hold exactly the bytes
 *     they held before, for both entry points;
 *   - on success: every output element was written and nothing between them (the fused
 *     call is run twice, over two different fill patterns and with two thread counts,
 *     and must give the same bits: the design's thread-count invariance); an accepted
 *     output view really has no two elements at one address and really misses the
 *     inputs; the stats counters add up; and, for inputs where the suite's tolerance is
 *     meaningful, the fused outputs match the reference (below);
 *   - inputs are never written, whatever the status.
 *
 * KV caches (FZ_PAGE, FZ_KV_DT, FZ_QSCALE): K and V may be pools of pages read through a
 * shuffled block table, and quantized with scales of any granularity. sdpa_kv_write
 * writes them from source rows (codes are drawn directly for raw data and for wild
 * strides), and each write is checked against the header's definition of codes and
 * scales (check_written), including that no byte a row does not own was written; the
 * oracle reads the caches' values through a dequantization of its own (mirror). A KV
 * fault (FZ_KV_FAULT) must fail like any other; a faulty write (FZ_KV_WFAULT) must fail
 * and leave the cache, its scales, its source and its table as they were.
 *
 * When the comparison is meaningful. Data is uniform in [-1, 1) (stored in its dtype),
 * scales are at most 2/sqrt(Dk), ALiBi slopes are bounded so a penalty stays below 16,
 * additive masks lie in [-2, 2) or are -inf, sinks in [-1, 3) or -inf: every score is
 * then small enough that the fp32 path carries the DESIGN section 6 tolerance
 * (|o - r| <= 1e-5 + 1e-4 |r|, plus one unit in the last place of a 16-bit output:
 * common/case.h, sc_close). Special values injected into that data (NaN, +-inf,
 * subnormals, signed zeros) keep the comparison: the reference defines where NaN and
 * inf appear, and the fused path must put them in the same places, since with scores
 * bounded no softmax weight underflows to 0 in fp32 where the double reference keeps it
 * positive (an inf in V times a weight is inf in both, never inf * 0). Raw bit patterns
 * as data, a huge scale (1e30: the argmax flips on one rounding), injected 1e30 values
 * and an inf in Q or K under a large softcap (it scores +-cap, and fp32 scores that large
 * no longer resolve the small terms added to them) are outside that domain: they are
 * checked for everything above except the values.
 */
#include "fuzz_core.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/case.h"
#include "../oracle.h"

/* Under AddressSanitizer, malloc's redzones catch an over- or under-read of instrumented
 * code to the byte. The SIMD kernel tables are built without instrumentation (the
 * Makefile says why), so a case may ask (FZ_ALIAS bit 7) for buffers that end on an
 * unmapped page instead, or start after one (bit 6), which catches them too; outside
 * AddressSanitizer (the normal suite, valgrind) every buffer is guarded that way. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(FZ_ASAN)
#define FZ_ASAN 1
#endif

/* Largest buffer a case allocates; a view that would need more (a huge stride that does
 * not overflow) gets its natural strides instead, since validation cannot know the
 * caller's buffer size and would rightly accept it. */
#define FZ_MAX_BYTES ((int64_t)1 << 24)

/* Work bound, B Hq Tq Tkv (Dk + Dv), so one case runs in milliseconds under sanitizers;
 * the medium class may go to 4x, past the driver's serial threshold
 * (src/sdpa.c SERIAL_FLOPS_MAX = 2^22 flops), so OpenMP teams run too. */
#define FZ_WORK_MAX ((int64_t)1 << 20)

/* Largest score magnitude at which values are compared: 64 2^-24 = 4e-6 of absolute
 * error per score, inside the 1e-5 of the DESIGN section 6 tolerance. */
#define FZ_SCORE_MAX 64.0f

enum { OP_Q, OP_K, OP_V, OP_O, NOPS };
enum { EXPECT_OK, EXPECT_FAIL, EXPECT_STATUS, EXPECT_ANY };

typedef struct fz_view {
    sdpa_tensor t;
    int64_t n[3], d; /* dims (VB, H, T) and the contiguous last dim */
    size_t es;
    int64_t ext;     /* elements spanned; -1 when validation must refuse (overflow) */
    char *buf;       /* allocation holding it (o may live in q's, lse in o's or v's) */
    size_t bytes;    /* bytes of the view's region, rounded up to 8 */
} fz_view;

/* K or V as a cache (include/sdpa.h "KV caches"): its storage, its scales, and the
 * source rows sdpa_kv_write wrote into it. */
typedef struct fz_kv {
    int cache;         /* paged, quantized, or both */
    int writer;        /* filled by sdpa_kv_write from src (else codes drawn directly) */
    sdpa_dtype st;     /* storage type */
    sdpa_dtype src_dt; /* the source rows' dtype (FZ_DTYPE's for this operand) */
    int qs;            /* FZ_QSCALE granularity, QS_* */
    int64_t group;     /* channels per scale; 0 = the row */
    sdpa_scales sc;    /* data NULL unless quantized */
    char *sbuf;
    size_t sbytes;
    int computed;      /* sdpa_kv_write computes the scales */
    sdpa_tensor src;   /* [VB, Hkv, vTkv, D] contiguous */
    char *src_buf;
    size_t src_n;      /* elements of src */
    /* the last sdpa_kv_write call that built the cache (for FZ_KV_WFAULT) */
    int written;
    sdpa_kv_write_desc wd;
    sdpa_tensor wsrc, wdst;
    int64_t wpos;
} fz_kv;

enum { QS_ROW = 0, QS_HEAD = 1, QS_TENSOR = 2, QS_ROW_GIVEN = 3 };

typedef struct fz_case {
    uint8_t h[FZ_NFIELDS];
    uint64_t seed;
    const uint8_t *inj;
    size_t ninj;
    sdpa_isa isa;

    int64_t B, Hq, Hkv, Tq, Tkv, Dk, Dv;
    int64_t VB, vTq, vTkv, maxq, maxkv;
    sdpa_desc desc;
    fz_view v[NOPS];
    float *lse;
    char *lse_buf;
    size_t lse_bytes;
    void *mask;
    size_t mask_bytes;
    float *slopes, *sinks;
    int64_t *qlens, *kvlens, *cuq, *cukv;

    int expect;
    sdpa_status expect_status;
    int compare;       /* inputs inside the domain where values are compared */
    int out_wild;      /* o has fuzzed strides: validation may refuse them */
    int alias;         /* 0 none, 1 o in q's buffer, 2 lse in o's */
    int inf_in_v;      /* an injected inf in V (see in_domain) */
    int inf_in_qk;     /* an injected inf in Q or K (see in_domain) */
    int o_foreign;     /* a fault pointed o into an input: only the inputs are checked */
    char *oreg, *lreg; /* the regions o and lse occupy (before any misaligning fault) */
    size_t oreg_bytes, lreg_bytes;
    sdpa_stats stats;

    int lens_mode;     /* FZ_LENS, or what a KV fault needs */
    fz_kv kv[2];       /* K, V */
    int paged;
    int64_t page, per, npages, tstride; /* page size, table entries per row, pool, stride */
    int32_t *table;
    size_t table_bytes;
    int kv_fault, kv_wfault; /* -1: none */
    float fault_scale; /* scales a fault hands to an operand that has none */
    char pre[512];     /* a check that failed while the case was built (sdpa_kv_write) */
} fz_case;

/* ---- small helpers ----------------------------------------------------------------- */

/* How the case's buffers are allocated: 0 malloc, else an SC_GUARD_* + 1; or, when
 * arena is set, carved in order from one region, upwards (each buffer above the last)
 * or downwards, so the outputs lie above the inputs in one case and below them in
 * another: validation must answer the same whichever side an output is on (an input
 * view reaching far past its buffer, a mask with a huge stride say, is judged by its
 * extent, not by where o happens to lie). Bytes between buffers: a 64-byte gap plus a
 * few more from the seed. */
static int alloc_mode;
static struct {
    char *base;
    size_t size, up, down; /* region, next offset from the bottom, from the top */
    int downwards;
    uint64_t rng;
} arena;

#define FZ_ARENA_BYTES ((size_t)8 * FZ_MAX_BYTES)

static void *fz_alloc(size_t bytes) {
    if (arena.base) {
        const size_t gap = 64 + 8 * (size_t)(sc_rand_u64(&arena.rng) % 5);
        const size_t n = (bytes + 63) / 64 * 64 + gap;
        if (arena.up + arena.down + n > arena.size)
            abort(); /* cannot happen: every view is at most FZ_MAX_BYTES */
        if (!arena.downwards) {
            char *p = arena.base + arena.up + gap;
            arena.up += n;
            return p;
        }
        arena.down += n;
        return arena.base + arena.size - arena.down;
    }
    void *p = alloc_mode ? sc_alloc(bytes, alloc_mode - 1) : malloc(bytes);
    if (!p)
        abort(); /* every view is at most FZ_MAX_BYTES: out of memory is the host's */
    return p;
}

static void fz_free(void *p) {
    if (arena.base)
        return; /* the region goes at the end of the case */
    if (alloc_mode)
        sc_free(p);
    else
        free(p);
}

static size_t round8(size_t a) { return (a + 7) & ~(size_t)7; }

/* Elements a view spans (last offset + 1), or -1 where validation must refuse it: the
 * extent overflows int64, its bytes pass PTRDIFF_MAX or 2^56 (src/validate.c
 * sdpa_extent: no view may reach past 2^56, so one longer than that is refused
 * wherever it starts). An extent that ends past 2^56 only from a high start address
 * (more than 2^56 - 2^48 bytes) is reported as FZ_MAX_BYTES + 1, "too big to allocate":
 * the callers then fall back to plain strides, so no case depends on where the
 * allocator put a buffer. */
#define FZ_ADDRESS_TOP ((__int128)1 << 56)
static int64_t view_extent(const int64_t n[3], const int64_t s[3], int64_t d, size_t es) {
    __int128 last = d - 1;
    for (int i = 0; i < 3; i++)
        last += (__int128)(n[i] - 1) * s[i];
    const __int128 bytes = (last + 1) * (__int128)es;
    if (last + 1 > (__int128)INT64_MAX || bytes > (__int128)PTRDIFF_MAX || bytes > FZ_ADDRESS_TOP)
        return -1;
    if (bytes > FZ_ADDRESS_TOP - ((__int128)1 << 48))
        return FZ_MAX_BYTES + 1;
    return (int64_t)(last + 1);
}

static void fail(char *msg, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *msg, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, n, fmt, ap);
    va_end(ap);
}

/* ---- KV-cache storage (include/sdpa.h: sdpa_dtype, "KV caches") -------------------- */

static int quantized(sdpa_dtype t) { return t >= SDPA_I8 && t <= SDPA_I4; }

/* Bytes per unit of a view's extent: an element, or for int4 a byte (two elements). */
static size_t kv_unit(sdpa_dtype t) { return quantized(t) ? 1 : sc_dtype_size(t); }

/* sdpa_kv_write's largest code magnitude. */
static float qmax_of(sdpa_dtype t) {
    return t == SDPA_I8 ? 127.0f : t == SDPA_I4 ? 7.0f : t == SDPA_FP8_E4M3 ? 448.0f : 57344.0f;
}

/* Code of element e of a quantized buffer: signed for int8 and int4 (low nibble first),
 * the byte for fp8. */
static int read_code(sdpa_dtype t, const void *buf, int64_t e) {
    const uint8_t *p = buf;
    if (t == SDPA_I4) {
        const int n = (p[e / 2] >> (4 * (e % 2))) & 15;
        return n - ((n & 8) << 1);
    }
    return t == SDPA_I8 ? (int8_t)p[e] : p[e];
}

/* value(code) of include/sdpa.h, from the formats' definitions (OCP 8-bit floating point
 * for fp8), in double: exact. */
static double code_value(sdpa_dtype t, int c) {
    if (t == SDPA_I8 || t == SDPA_I4)
        return c;
    const int mb = t == SDPA_FP8_E4M3 ? 3 : 2, bias = t == SDPA_FP8_E4M3 ? 7 : 15;
    const int e = (c & 0x7f) >> mb, m = c & ((1 << mb) - 1);
    const double sg = (c & 0x80) ? -1.0 : 1.0;
    if (t == SDPA_FP8_E4M3 && (c & 0x7f) == 0x7f)
        return NAN;
    if (t == SDPA_FP8_E5M2 && e == 31)
        return m ? NAN : sg * INFINITY;
    return sg * (e ? ldexp(1.0 + m / (double)(1 << mb), e - bias)
                   : ldexp(m / (double)(1 << mb), 1 - bias));
}

/* view_extent of a fz_view in units of kv_unit; an int4 view counts bytes and is -1
 * when validation refuses its odd strides or odd row (src/validate.c check_kv). */
static int64_t extent_of(const fz_view *w) {
    const int64_t s[3] = {w->t.stride_b, w->t.stride_h, w->t.stride_t};
    if (w->t.dtype != SDPA_I4)
        return view_extent(w->n, s, w->d, w->es);
    if (w->d % 2 || s[0] % 2 || s[1] % 2 || s[2] % 2)
        return -1;
    const int64_t half[3] = {s[0] / 2, s[1] / 2, s[2] / 2};
    return view_extent(w->n, half, w->d / 2, 1);
}

/* ---- decoding ---------------------------------------------------------------------- */

/* The strides of operand `op` from FZ_LAYOUT and its FZ_WILD byte; *wild says whether
 * they came from the fuzzed selectors. */
static void choose_strides(fz_case *c, int op, int *wild) {
    fz_view *w = &c->v[op];
    const int64_t H = w->n[1], T = w->n[2], D = w->d;
    const int lay = (c->h[FZ_LAYOUT] >> (2 * op)) & 3;
    sdpa_tensor *t = &w->t;
    *wild = 0;
    switch (lay) {
    case 0:
        t->stride_t = D, t->stride_h = T * D, t->stride_b = H * T * D;
        return;
    case 1:
        t->stride_h = D, t->stride_t = H * D, t->stride_b = T * H * D;
        return;
    case 2: /* odd gaps between rows, heads and batch entries (even ones for int4, whose
               rows start on bytes) */
        if (t->dtype == SDPA_I4)
            t->stride_t = D + 2, t->stride_h = T * (D + 2) + 4, t->stride_b = H * t->stride_h + 6;
        else
            t->stride_t = D + 3, t->stride_h = T * (D + 3) + 5, t->stride_b = H * t->stride_h + 7;
        return;
    }
    *wild = 1;
    const uint8_t sel = c->h[FZ_WILD_Q + op];
    static const int64_t gaps[4] = {1, 3, 17, 64};
    /* near the int64 limits; past the 2^56 address top once multiplied by two or more
     * dims or bytes (2^54 + 3), but within int64; and one (2^40 + 1) that fits */
    static const int64_t huge[4] = {INT64_MAX, (int64_t)1 << 62, ((int64_t)1 << 54) + 3,
                                    ((int64_t)1 << 40) + 1};
    const int64_t nat[3] = {D, T * D, H * T * D};
    int64_t *dst[3] = {&t->stride_t, &t->stride_h, &t->stride_b};
    for (int i = 0; i < 3; i++) {
        switch ((sel >> (2 * i)) & 3) {
        case 0:
            *dst[i] = 0;
            break;
        case 1:
            *dst[i] = nat[i];
            break;
        case 2:
            *dst[i] = nat[i] + gaps[sel >> 6];
            break;
        default:
            *dst[i] = huge[sel >> 6];
            break;
        }
    }
}

/* Shape of the case: class, dims, bounded work. */
static void decode_shape(fz_case *c) {
    const uint8_t *h = c->h;
    const int cls = h[FZ_CLASS] % 4;
    const unsigned tkv16 = h[FZ_TKV] | (unsigned)h[FZ_TKV_HI] << 8;
    const unsigned dk16 = h[FZ_DK] | (unsigned)h[FZ_DK_HI] << 8;
    int64_t g;
    switch (cls) {
    case 0: /* small: inside one tile */
        c->B = 1 + h[FZ_B] % 2, c->Hkv = 1 + h[FZ_HKV] % 2, g = 1 + h[FZ_GROUP] % 3;
        c->Tq = 1 + h[FZ_TQ] % 24, c->Tkv = 1 + h[FZ_TKV] % 72;
        c->Dk = 1 + h[FZ_DK] % 40, c->Dv = 1 + h[FZ_DV] % 40;
        break;
    case 1: /* medium: across Br = 32/96 and Bc = 64 tile edges */
        c->B = 1 + h[FZ_B] % 3, c->Hkv = 1 + h[FZ_HKV] % 3, g = 1 + h[FZ_GROUP] % 4;
        c->Tq = 1 + h[FZ_TQ] % 140, c->Tkv = 1 + tkv16 % 200;
        c->Dk = 1 + h[FZ_DK] % 72, c->Dv = 1 + h[FZ_DV] % 72;
        break;
    case 2: /* decode: few rows (grouped GQA up to 16), long Tkv (split-KV from 1024);
             * groups of 1 to 8 heads, or with the group byte's top bit 9 to 136 (MLA
             * decode's 128 query heads on one K/V head: more grouped rows than Br, shared
             * evenly between items) */
        c->B = 1 + h[FZ_B] % 2, c->Hkv = 1 + h[FZ_HKV] % 2;
        g = h[FZ_GROUP] & 0x80 ? 9 + (h[FZ_GROUP] & 0x7f) : 1 + h[FZ_GROUP] % 8;
        c->Tq = 1 + h[FZ_TQ] % 18, c->Tkv = 1 + tkv16 % 2200;
        c->Dk = 1 + h[FZ_DK] % 40, c->Dv = 1 + h[FZ_DV] % 40;
        break;
    default: /* wide head dims, up to Dk = 1100 */
        c->B = 1, c->Hkv = 1 + h[FZ_HKV] % 2, g = 1 + h[FZ_GROUP] % 2;
        c->Tq = 1 + h[FZ_TQ] % 9, c->Tkv = 1 + h[FZ_TKV] % 70;
        c->Dk = 1 + dk16 % 1100, c->Dv = 1 + h[FZ_DV] % 300;
        break;
    }
    const int64_t limit = cls == 1 ? 4 * FZ_WORK_MAX : FZ_WORK_MAX;
    for (;;) {
        const int64_t work = c->B * c->Hkv * g * c->Tq * c->Tkv * (c->Dk + c->Dv);
        if (work <= limit)
            break;
        /* decode keeps its long Tkv and gives up rows and heads first; a wide group
         * keeps its heads and gives up head dims before them */
        if (cls == 2 && c->Tq > 1)
            c->Tq = (c->Tq + 1) / 2;
        else if (cls == 2 && g > 8 && c->Dk + c->Dv > 2)
            c->Dk >= c->Dv ? (c->Dk = (c->Dk + 1) / 2) : (c->Dv = (c->Dv + 1) / 2);
        else if (cls == 2 && c->B * c->Hkv * g > 1)
            c->B > 1 ? c->B-- : g > 1 ? g-- : c->Hkv--;
        else if (c->Tkv >= c->Tq && c->Tkv > 1)
            c->Tkv = (c->Tkv + 1) / 2;
        else if (c->Tq > 1)
            c->Tq = (c->Tq + 1) / 2;
        else if (c->B * c->Hkv * g > 1)
            c->B > 1 ? c->B-- : g > 1 ? g-- : c->Hkv--;
        else if (c->Dk >= c->Dv)
            c->Dk = (c->Dk + 1) / 2;
        else
            c->Dv = (c->Dv + 1) / 2;
    }
    c->Hq = c->Hkv * g;
}

/* KV-cache faults (FZ_KV_FAULT - 1), and what each needs the case to have so that its
 * field exists to break (decode_kv makes it so). */
enum {
    KF_PAGE_PAST,        /* a used table slot = num_pages */
    KF_PAGE_NEG,         /* a used slot = -1 */
    KF_PAGE_INT32,       /* a used slot = INT32_MAX or INT32_MIN */
    KF_PAGE_SIZE,        /* page_size 0, negative, past SDPA_MAX_DIM */
    KF_NUM_PAGES,        /* num_pages 0, negative, past SDPA_MAX_DIM */
    KF_TABLE_STRIDE,     /* a table stride whose extent overflows (negative when B = 1) */
    KF_TABLE_MISALIGNED,
    KF_PAGED_VARLEN,     /* a block table under packed varlen */
    KF_LSE_ON_TABLE,     /* lse (or o) over the block table */
    KF_K_NO_SCALES,      /* a quantized K without scales */
    KF_V_NO_SCALES,
    KF_SCALES_ON_PLAIN,  /* scales on an fp32 K */
    KF_GROUP,            /* a K group that does not divide Dk */
    KF_GROUP_NEG,
    KF_I4_ODD_GROUP,     /* an odd group on an int4 V */
    KF_I4_ODD_STRIDE,
    KF_I4_ODD_DIM,       /* an int4 V with an odd dim_v */
    KF_SCALES_DTYPE,     /* K scales neither F32 nor F16 */
    KF_SCALES_STRIDE,    /* K scale strides whose extent overflows */
    KF_SCALES_NEG_STRIDE,
    KF_SCALES_MISALIGNED,
    KF_O_ON_SCALES,      /* o over K's scales */
    KF_Q_QUANT,          /* a quantized Q */
    KF_O_QUANT,          /* a quantized O */
    KF_KV_DTYPE,         /* a K or V dtype past SDPA_I4 or negative */
    KF_N
};
_Static_assert(KF_N == FZ_KV_NFAULTS, "fuzz_core.h counts the KV faults");

enum { NEED_PAGED = 1, NEED_QK = 2, NEED_QV4 = 4, NEED_VARLEN = 8 };
static const uint8_t kf_needs[KF_N] = {
    [KF_PAGE_PAST] = NEED_PAGED,     [KF_PAGE_NEG] = NEED_PAGED,
    [KF_PAGE_INT32] = NEED_PAGED,    [KF_PAGE_SIZE] = NEED_PAGED,
    [KF_NUM_PAGES] = NEED_PAGED,     [KF_TABLE_STRIDE] = NEED_PAGED,
    [KF_TABLE_MISALIGNED] = NEED_PAGED, [KF_PAGED_VARLEN] = NEED_VARLEN,
    [KF_LSE_ON_TABLE] = NEED_PAGED,  [KF_K_NO_SCALES] = NEED_QK,
    [KF_V_NO_SCALES] = NEED_QV4,     [KF_GROUP] = NEED_QK,
    [KF_GROUP_NEG] = NEED_QV4,       [KF_I4_ODD_GROUP] = NEED_QV4,
    [KF_I4_ODD_STRIDE] = NEED_QV4,   [KF_I4_ODD_DIM] = NEED_QV4,
    [KF_SCALES_DTYPE] = NEED_QK,     [KF_SCALES_STRIDE] = NEED_QK,
    [KF_SCALES_NEG_STRIDE] = NEED_QV4, [KF_SCALES_MISALIGNED] = NEED_QK,
    [KF_O_ON_SCALES] = NEED_QK,
};

/* Faulty sdpa_kv_write calls (FZ_KV_WFAULT - 1), each a change to the last call that
 * built a cache. */
enum {
    WF_POS_PAST,     /* pos + len beyond len_kv */
    WF_POS_NEG,
    WF_PAGE_OUT,     /* a written row's page outside the pool */
    WF_PAGE_SIZE,    /* page_size 0 (len 0 unpaged) */
    WF_SRC_IN_CACHE, /* the source over the cache */
    WF_SCALES_IN_SRC,/* the scales over the source */
    WF_COMPUTE_BAD,  /* compute_scales 2.., or 1 on a plain cache */
    WF_SCALES_SHARED,/* computed scales every row shares (not an output) */
    WF_GROUP,        /* a group that does not divide dim (scales on a plain cache) */
    WF_ODD_STRIDE,   /* an odd int4 stride (a negative one otherwise) */
    WF_SRC_DTYPE,    /* a quantized or unknown source dtype */
    WF_THREADS,      /* num_threads < 0 */
    WF_TABLE_STRIDE, /* a table stride whose extent overflows, or negative */
    WF_NO_SCALES,    /* a quantized cache without scales (dim 0 on a plain one) */
    WF_SCALES_DTYPE, /* scales in bf16 (batch -1 on a plain cache) */
    WF_CACHE_DTYPE,  /* a cache dtype past SDPA_I4 or negative */
    WF_N
};
_Static_assert(WF_N == FZ_KV_NWFAULTS, "fuzz_core.h counts the writer faults");

/* The sel-th divisor of D (cyclically), only even ones for int4 (D is even there). */
static int64_t divisor_at(int64_t D, int even, int sel) {
    int64_t divs[64];
    int n = 0;
    for (int64_t g = 1; g <= D && n < 64; g++)
        if (D % g == 0 && (!even || g % 2 == 0))
            divs[n++] = g;
    return divs[sel % n];
}

/* Which operands are caches, their storage and scales, the faults; before the lengths
 * (a fault may need packed varlen, paging may not have it). */
static void decode_kv(fz_case *c) {
    const uint8_t *h = c->h;
    static const sdpa_dtype qtypes[5] = {SDPA_F32, SDPA_I8, SDPA_FP8_E4M3, SDPA_FP8_E5M2, SDPA_I4};
    c->lens_mode = h[FZ_LENS] % 5;
    c->kv_fault = h[FZ_KV_FAULT] >= 1 && h[FZ_KV_FAULT] <= KF_N ? h[FZ_KV_FAULT] - 1 : -1;
    c->kv_wfault = h[FZ_KV_WFAULT] >= 1 && h[FZ_KV_WFAULT] <= WF_N ? h[FZ_KV_WFAULT] - 1 : -1;
    int q[2];
    for (int i = 0; i < 2; i++) {
        const int sel = (h[FZ_KV_DT] >> (3 * i)) & 7;
        q[i] = sel <= 4 ? sel : 0;
    }
    const int need = c->kv_fault >= 0 ? kf_needs[c->kv_fault] : 0;
    c->paged = (h[FZ_PAGE] & 15) != 0 || (need & NEED_PAGED);
    if ((need & NEED_QK) && !q[0])
        q[0] = 1;
    if (need & NEED_QV4)
        q[1] = 4;
    if (c->kv_wfault >= 0 && !c->paged && !q[0] && !q[1])
        q[0] = 1; /* a cache for the faulty write */
    if (need & NEED_VARLEN)
        c->lens_mode = 4, c->paged = 0;
    else if (c->paged && c->lens_mode == 4)
        c->lens_mode = 2; /* paging refuses packed varlen: KF_PAGED_VARLEN tests that */
    for (int i = 0; i < 2; i++) {
        fz_kv *kv = &c->kv[i];
        const int op = OP_K + i;
        int64_t *D = i ? &c->Dv : &c->Dk;
        if (q[i] == 4 && *D % 2) /* int4 rows are whole bytes (KF_I4_ODD_DIM aside) */
            *D += *D > 1 ? -1 : 1;
        kv->cache = c->paged || q[i];
        kv->src_dt = (sdpa_dtype)(((h[FZ_DTYPE] >> (2 * op)) & 3) % 3);
        kv->st = q[i] ? qtypes[q[i]] : kv->src_dt;
        /* sdpa_kv_write fills it, unless its codes are raw data or its strides wild
         * (broadcast strides are not an output) */
        kv->writer = kv->cache && h[FZ_DATA] % 4 != 3 && ((h[FZ_LAYOUT] >> (2 * op)) & 3) != 3;
        if (q[i]) {
            kv->qs = (h[FZ_QSCALE] >> (2 * i)) & 3;
            kv->sc.dtype = h[FZ_KV_DT] & (0x40 << i) ? SDPA_F16 : SDPA_F32;
            const int gsel = h[FZ_QSCALE] >> 4;
            kv->group = gsel ? divisor_at(*D, q[i] == 4, gsel - 1) : 0;
            kv->sc.group = kv->group;
            kv->computed = kv->writer && kv->qs == QS_ROW;
        }
    }
}

/* The page size and the pool, after the lengths: 1, odd sizes, sizes around the 64-key
 * blocks, the whole of len_kv and more than len_kv; two pages of the pool stay unused. */
static void decode_pages(fz_case *c) {
    if (!c->paged)
        return;
    static const int64_t sizes[] = {1, 2, 3, 5, 7, 16, 17, 31, 64, 100, 256};
    const int nsz = (int)(sizeof sizes / sizeof sizes[0]) + 2;
    const int sel = c->h[FZ_PAGE] & 15;
    const int i = (sel ? sel - 1 : (int)(c->seed % (uint64_t)nsz)) % nsz;
    c->page = i < nsz - 2 ? sizes[i] : i == nsz - 2 ? c->vTkv : c->vTkv + 5;
    c->per = (c->vTkv + c->page - 1) / c->page;
    c->npages = c->B * c->per + 2;
    c->tstride = c->per + (c->h[FZ_PAGE] & 0x20 ? 3 : 0);
}

/* q_lens / kv_lens / cu_seqlens, from their own stream of the data seed. */
static void decode_lengths(fz_case *c) {
    const int mode = c->lens_mode;
    uint64_t rng = c->seed ^ 0x1e9e3779u;
    c->vTq = c->Tq, c->vTkv = c->Tkv, c->VB = c->B;
    c->maxq = c->Tq, c->maxkv = c->Tkv;
    if (mode == 0)
        return;
    int64_t *ql = malloc((size_t)c->B * sizeof *ql), *kl = malloc((size_t)c->B * sizeof *kl);
    for (int64_t b = 0; b < c->B; b++) {
        const uint64_t r = sc_rand_u64(&rng);
        /* entry 0 full, the rest anywhere in [0, T] (0 included: no rows, no keys) */
        ql[b] = b == 0 ? c->Tq : (int64_t)(r % (uint64_t)(c->Tq + 1));
        kl[b] = b == 0 ? c->Tkv : (int64_t)((r >> 32) % (uint64_t)(c->Tkv + 1));
    }
    if (mode == 4) {
        c->cuq = malloc((size_t)(c->B + 1) * sizeof(int64_t));
        c->cukv = malloc((size_t)(c->B + 1) * sizeof(int64_t));
        c->cuq[0] = c->cukv[0] = 0;
        c->maxq = c->maxkv = 0;
        for (int64_t b = 0; b < c->B; b++) {
            c->cuq[b + 1] = c->cuq[b] + ql[b];
            c->cukv[b + 1] = c->cukv[b] + kl[b];
            c->maxq = ql[b] > c->maxq ? ql[b] : c->maxq;
            c->maxkv = kl[b] > c->maxkv ? kl[b] : c->maxkv;
        }
        /* a few rows and keys no sequence owns; at least one row and key per view */
        const uint64_t r = sc_rand_u64(&rng);
        c->vTq = c->cuq[c->B] + (int64_t)(r % 3), c->vTkv = c->cukv[c->B] + (int64_t)((r >> 8) % 3);
        c->vTq += c->vTq == 0, c->vTkv += c->vTkv == 0;
        c->VB = 1;
        c->desc.cu_seqlens_q = c->cuq;
        c->desc.cu_seqlens_kv = c->cukv;
        free(ql);
        free(kl);
        return;
    }
    if (mode == 1 || mode == 3) {
        c->qlens = ql;
        c->desc.q_lens = ql;
    } else {
        free(ql);
    }
    if (mode == 1 || mode == 2) {
        c->kvlens = kl;
        c->desc.kv_lens = kl;
    } else {
        free(kl);
    }
}

/* Descriptor fields other than shape and lengths. */
static void decode_options(fz_case *c) {
    const uint8_t *h = c->h;
    sdpa_desc *d = &c->desc;
    d->batch = c->B, d->heads_q = c->Hq, d->heads_kv = c->Hkv;
    d->len_q = c->vTq, d->len_kv = c->vTkv, d->dim_qk = c->Dk, d->dim_v = c->Dv;
    d->causal = h[FZ_CAUSAL] % 3;
    const float rs = (float)(1.0 / sqrt((double)c->Dk));
    switch (h[FZ_SCALE] % 8) {
    case 1: d->scale = 0.5f * rs; break;
    case 2: d->scale = 2.0f * rs; break;
    case 3: d->scale = -rs; break;
    case 4: d->scale = 1e-30f; break;         /* scores underflow towards 0 */
    case 5: d->scale = FLT_TRUE_MIN; break;   /* a subnormal scale */
    case 6: d->scale = 1e30f; c->compare = 0; break; /* ill-conditioned: argmax */
    case 7: d->scale = 0.125f; break;
    default: d->scale = 0.0f; break;          /* the default, 1/sqrt(Dk) */
    }
    static const float caps[8] = {0, 0, 0, 0, 0.5f, 5.0f, 30.0f, 1e4f};
    d->softcap = caps[h[FZ_SOFTCAP] % 8];
    if (h[FZ_WINDOW] % 4 >= 2) {
        d->window = 1;
        if (h[FZ_WINDOW] % 4 == 2) {
            d->window_left = h[FZ_WL] % 70;
            d->window_right = h[FZ_WR] % 70;
        } else { /* extents at and near the limit, never overflowing the row rule */
            static const int64_t far[4] = {0, 1, ((int64_t)1 << 39) + 3, SDPA_MAX_DIM};
            d->window_left = far[h[FZ_WL] % 4];
            d->window_right = far[h[FZ_WR] % 4];
        }
    }
    static const float drops[4] = {0, 0, 0.25f, 0.9f};
    d->dropout_p = drops[h[FZ_DROPOUT] % 4];
    d->dropout_seed = c->seed;
    static const int threads[5] = {0, 1, 2, 3, 7};
    d->num_threads = threads[h[FZ_THREADS] % 5];
    switch (h[FZ_ISA] % 8) {
    case 6:
        d->isa = SDPA_ISA_AUTO; /* the process-wide choice */
        break;
    case 7: /* an ISA this build or CPU lacks, if there is one */
        d->isa = c->isa;
        for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_; i++)
            if (!sdpa_isa_supported((sdpa_isa)i)) {
                d->isa = i;
                break;
            }
        break;
    default:
        d->isa = c->isa;
        break;
    }
    if (h[FZ_MODS] & 16)
        d->compute = SDPA_COMPUTE_BF16;
    if (h[FZ_MODS] & 8)
        d->stats = &c->stats;
}

/* ---- data -------------------------------------------------------------------------- */

/* A quantized cache's codes drawn directly (no writer): any code of the format but NaN
 * and inf (raw data: any byte). */
static void fill_codes(fz_case *c, const fz_view *w, uint64_t *rng) {
    const int raw = c->h[FZ_DATA] % 4 == 3;
    uint8_t *p = (uint8_t *)w->t.data;
    for (int64_t e = 0; e < w->ext; e++) {
        const uint64_t r = sc_rand_u64(rng);
        const uint8_t b = (uint8_t)r;
        if (raw)
            p[e] = b;
        else if (w->t.dtype == SDPA_I8)
            p[e] = (uint8_t)(int8_t)((int)(r % 255) - 127);
        else if (w->t.dtype == SDPA_I4)
            p[e] = (uint8_t)((((int)(r % 15) - 7) & 15) | (((int)((r >> 8) % 15) - 7) & 15) << 4);
        else if (w->t.dtype == SDPA_FP8_E4M3)
            p[e] = b ^ ((b & 0x7f) == 0x7f); /* S.1111.111 is NaN: its neighbour */
        else
            p[e] = ((b >> 2) & 31) == 31 ? b & 0x83 : b; /* e5m2 inf, NaN: subnormals */
    }
}

static void fill_view(fz_case *c, int op, uint64_t *rng) {
    fz_view *w = &c->v[op];
    const fz_kv *kv = op == OP_K || op == OP_V ? &c->kv[op - OP_K] : NULL;
    if (kv && kv->writer) { /* the rows sdpa_kv_write will store */
        for (size_t e = 0; e < kv->src_n; e++)
            sc_store(kv->src_buf, e, kv->src_dt,
                     (float)((double)(sc_rand_u64(rng) >> 11) * 0x1p-53 * 2.0 - 1.0));
        return;
    }
    if (kv && quantized(kv->st)) {
        fill_codes(c, w, rng);
        return;
    }
    const int raw = c->h[FZ_DATA] % 4 == 3;
    for (int64_t e = 0; e < w->ext; e++) {
        const uint64_t r = sc_rand_u64(rng);
        if (raw && w->es == 2) {
            ((uint16_t *)(void *)w->t.data)[e] = (uint16_t)r;
        } else if (raw) {
            const uint32_t u = (uint32_t)r;
            memcpy((char *)w->t.data + 4 * e, &u, 4);
        } else {
            sc_store(w->t.data, (size_t)e, w->t.dtype,
                     (float)((double)(r >> 11) * 0x1p-53 * 2.0 - 1.0));
        }
    }
}

static void make_mask(fz_case *c, uint64_t *rng) {
    const uint8_t m = c->h[FZ_MASK];
    const int kind = m & 3;
    if (kind == 0 || kind == 3)
        return;
    const int isbool = kind == SDPA_MASK_BOOL;
    const sdpa_dtype dt = isbool ? SDPA_F32 : (sdpa_dtype)(((m >> 2) & 3) % 3);
    const size_t es = isbool ? 1 : sc_dtype_size(dt);
    const int bb = (m >> 4) & 1, bh = (m >> 5) & 1, br = (m >> 6) & 1;
    sdpa_mask mk = {.kind = (sdpa_mask_kind)kind, .dtype = dt};
    const int64_t rows = br ? 1 : c->maxq, heads = bh ? 1 : c->Hq;
    const int64_t ld = c->maxkv + (int64_t)(c->seed % 4);
    mk.stride_q = br ? 0 : ld;
    mk.stride_h = bh ? 0 : rows * ld;
    mk.stride_b = bb ? 0 : heads * rows * ld;
    /* a huge stride_b (FZ_MASK_HIDDEN bits 2-3 pick it): overflowing int64 with B > 2,
     * the independent check's INT64_MAX - 100 and 2^54 + 3 (within int64, past the 2^56
     * address top: refused), 2^40 + 1 (valid, too big to allocate: plain strides) */
    static const int64_t huge[4] = {INT64_MAX / 2 + 1, INT64_MAX - 100,
                                    ((int64_t)1 << 54) + 3, ((int64_t)1 << 40) + 1};
    if ((m & 0x80) && c->B > 1 && !bb)
        mk.stride_b = huge[(c->h[FZ_MASK_HIDDEN] >> 2) & 3];
    int64_t ext = 1;
    if (c->maxq > 0 && c->maxkv > 0) {
        const int64_t n[3] = {c->B, c->Hq, c->maxq}, s[3] = {mk.stride_b, mk.stride_h, mk.stride_q};
        ext = view_extent(n, s, c->maxkv, es);
        if (ext >= 0 && ext * (int64_t)es > FZ_MAX_BYTES) { /* accepted, not allocatable */
            mk.stride_b = bb ? 0 : heads * rows * ld;
            const int64_t s2[3] = {mk.stride_b, mk.stride_h, mk.stride_q};
            ext = view_extent(n, s2, c->maxkv, es);
        }
        if (ext < 0) {
            c->expect = EXPECT_FAIL;
            ext = c->maxkv > 0 ? c->maxkv : 1;
        }
    }
    c->mask_bytes = (size_t)ext * es;
    c->mask = fz_alloc(c->mask_bytes);
    static const double hidden[4] = {0.0, 0.3, 0.9, 1.0};
    const double hide = hidden[c->h[FZ_MASK_HIDDEN] % 4];
    for (int64_t e = 0; e < ext; e++) {
        const uint64_t r = sc_rand_u64(rng);
        const int hid = (double)(r >> 11) * 0x1p-53 < hide;
        if (isbool)
            ((uint8_t *)c->mask)[e] = hid ? 0 : (uint8_t)(1 + (r & 0x7f));
        else
            sc_store(c->mask, (size_t)e, dt,
                     hid ? -INFINITY : (float)((double)(r >> 11) * 0x1p-53 * 4.0 - 2.0));
    }
    mk.data = c->mask;
    c->desc.mask = mk;
}

/* Special values from the injections (data class 2 only). */
static void inject(fz_case *c) {
    if (c->h[FZ_DATA] % 4 != 2)
        return;
    for (size_t i = 0; i < c->ninj; i++) {
        const uint8_t *p = c->inj + FZ_INJ_BYTES * i;
        const int op = p[0] % 4; /* q, k, v or the mask */
        const size_t idx = p[1] | (size_t)p[2] << 8;
        const int kind = p[3] % 8;
        void *buf;
        size_t n;
        sdpa_dtype dt;
        const fz_kv *kv = op == OP_K || op == OP_V ? &c->kv[op - OP_K] : NULL;
        if (op == 3) {
            if (!c->mask || c->desc.mask.kind != SDPA_MASK_ADDITIVE)
                continue;
            buf = c->mask, dt = c->desc.mask.dtype, n = c->mask_bytes / sc_dtype_size(dt);
        } else if (kv && kv->writer) { /* into the rows the cache is written from */
            buf = kv->src_buf, dt = kv->src_dt, n = kv->src_n;
        } else if (kv && quantized(kv->st)) { /* drawn codes: fp8 NaN codes only */
            if (kind == 0 && kv->st != SDPA_I8 && kv->st != SDPA_I4)
                ((uint8_t *)c->v[op].t.data)[idx % (size_t)c->v[op].ext] =
                    kv->st == SDPA_FP8_E4M3 ? 0x7f : 0xfe;
            continue;
        } else {
            buf = c->v[op].t.data, dt = c->v[op].t.dtype, n = (size_t)c->v[op].ext;
        }
        const size_t e = idx % n;
        /* the smallest subnormal of each format, times a small odd factor */
        const float sub = dt == SDPA_F16 ? 0x1p-24f * 3 : 0x1p-149f * 3;
        static const float big = 1e30f;
        const float vals[8] = {NAN, INFINITY, -INFINITY, sub, -sub, 0.0f, -0.0f, big};
        if (kind == 7) {
            c->compare = 0; /* a lone huge score: the argmax may flip on one rounding */
            if (dt == SDPA_F16)
                continue; /* not representable (would become inf) */
        }
        if ((kind == 1 || kind == 2) && op == OP_V)
            c->inf_in_v = 1;
        if ((kind == 1 || kind == 2) && (op == OP_Q || op == OP_K))
            c->inf_in_qk = 1;
        sc_store(buf, e, dt, vals[kind]);
    }
}

/* ---- buffers ----------------------------------------------------------------------- */

static void setup_views(fz_case *c) {
    const int64_t H[NOPS] = {c->Hq, c->Hkv, c->Hkv, c->Hq};
    const int64_t T[NOPS] = {c->vTq, c->vTkv, c->vTkv, c->vTq};
    const int64_t D[NOPS] = {c->Dk, c->Dk, c->Dv, c->Dv};
    for (int op = 0; op < NOPS; op++) {
        fz_view *w = &c->v[op];
        /* a cache: its storage type, and under paging the pool [pages, Hkv, page, D] */
        const fz_kv *kv = op == OP_K || op == OP_V ? &c->kv[op - OP_K] : NULL;
        const int cache = kv && kv->cache;
        w->t.dtype = cache ? kv->st : (sdpa_dtype)(((c->h[FZ_DTYPE] >> (2 * op)) & 3) % 3);
        w->es = kv_unit(w->t.dtype);
        w->n[0] = c->VB, w->n[1] = H[op], w->n[2] = T[op], w->d = D[op];
        if (cache && c->paged)
            w->n[0] = c->npages, w->n[2] = c->page;
        int wild;
        choose_strides(c, op, &wild);
        w->ext = extent_of(w);
        if (w->ext >= 0 && w->ext * (int64_t)w->es > FZ_MAX_BYTES) {
            /* accepted but too big to allocate: the caller would be lying, not us */
            w->t.stride_t = D[op], w->t.stride_h = w->n[2] * D[op];
            w->t.stride_b = H[op] * w->n[2] * D[op];
            w->ext = extent_of(w);
            wild = 0;
        }
        if (w->ext < 0) {
            c->expect = EXPECT_FAIL; /* validation must refuse before reading anything */
            w->ext = w->d;
        }
        if (op == OP_O && wild)
            c->out_wild = 1;
        w->bytes = round8((size_t)w->ext * w->es);
    }
    const size_t lse_n = (size_t)(c->VB * c->Hq * c->vTq);
    const int want_lse = !(c->h[FZ_MODS] & 4);
    c->lse_bytes = round8(lse_n * sizeof(float));
    const int alias = c->h[FZ_ALIAS] % 8;
    c->alias = alias == 6 ? 1 : alias == 7 && want_lse ? 2 : 0;

    /* where the aliased region starts inside its host: at its start, in its middle, on
     * its last 8 bytes (all overlapping), or just past its end (disjoint, valid) */
    fz_view *host = c->alias == 1 ? &c->v[OP_Q] : c->alias == 2 ? &c->v[OP_O] : NULL;
    size_t at = 0, extra = 0;
    if (host) {
        const size_t hb = host->bytes;
        const size_t offs[4] = {0, (hb / 2) & ~(size_t)7, hb >= 8 ? hb - 8 : 0, hb};
        at = offs[c->h[FZ_ALIAS_AT] % 4];
        extra = c->alias == 1 ? c->v[OP_O].bytes : c->lse_bytes;
        if (at < hb) {
            if (c->expect == EXPECT_OK && !c->out_wild) {
                c->expect = EXPECT_STATUS;
                c->expect_status = SDPA_ERR_OVERLAP;
            } else if (c->expect == EXPECT_OK) {
                c->expect = EXPECT_FAIL;
            }
        }
    }
    for (int op = 0; op < NOPS; op++) {
        fz_view *w = &c->v[op];
        if (op == OP_O && c->alias == 1) {
            w->buf = NULL;
            w->t.data = c->v[OP_Q].buf + at;
            continue;
        }
        const size_t more = (host == w) ? at + extra : 0;
        w->buf = fz_alloc(w->bytes + more);
        w->t.data = w->buf;
    }
    if (want_lse) {
        if (c->alias == 2) {
            c->lse = (float *)(void *)(c->v[OP_O].buf + at);
        } else {
            c->lse_buf = fz_alloc(c->lse_bytes);
            c->lse = (float *)(void *)c->lse_buf;
        }
        c->lreg = (char *)c->lse;
        c->lreg_bytes = lse_n * sizeof(float);
    }
    c->oreg = c->v[OP_O].t.data;
    c->oreg_bytes = (size_t)c->v[OP_O].ext * c->v[OP_O].es;
}

/* Per-head arrays: ALiBi slopes bounded so that slope * distance < 16, sinks. */
static void make_heads(fz_case *c, uint64_t *rng) {
    const uint8_t m = c->h[FZ_MODS];
    if (m & 1) {
        c->slopes = malloc((size_t)c->Hq * sizeof(float));
        const double top = 16.0 / (double)(c->vTq + c->vTkv);
        for (int64_t h = 0; h < c->Hq; h++)
            c->slopes[h] = (float)(fmin(1.0, top) * exp2(-8.0 * (double)(h + 1) / (double)c->Hq));
        c->desc.alibi_slopes = c->slopes;
    }
    if (m & 2) {
        c->sinks = malloc((size_t)c->Hq * sizeof(float));
        for (int64_t h = 0; h < c->Hq; h++)
            c->sinks[h] = h == 1 ? -INFINITY : (float)((double)(sc_rand_u64(rng) >> 11) * 0x1p-53 * 4.0 - 1.0);
        c->desc.sinks = c->sinks;
    }
}

/* ---- KV caches: the block table, the scales, sdpa_kv_write -------------------------- */

/* Keys of entry b (the table's rows cover them). */
static int64_t kv_len(const fz_case *c, int64_t b) { return c->kvlens ? c->kvlens[b] : c->vTkv; }

/* The block table, the writer's source rows and the scale views; after setup_views. The
 * table draws each entry's pages from a shuffle of the pool; FZ_PAGE bit 4 gives entries
 * after the first the first half of entry 0's pages (a shared prefix), bit 6 junk in the
 * slots no key uses (never read: validation reads only the used ones), bit 5 a gap after
 * each row. */
static void setup_caches(fz_case *c) {
    if (c->paged || c->kv_fault == KF_PAGED_VARLEN) {
        const int64_t n = c->paged ? (c->VB - 1) * c->tstride + c->per : c->B;
        c->table_bytes = (size_t)n * sizeof(int32_t);
        c->table = fz_alloc(round8(c->table_bytes));
        memset(c->table, 0, c->table_bytes);
    }
    if (c->paged) {
        uint64_t rng = c->seed ^ 0x7ab1e5u;
        int32_t *perm = malloc((size_t)c->npages * sizeof(int32_t));
        for (int64_t p = 0; p < c->npages; p++)
            perm[p] = (int32_t)p;
        for (int64_t p = c->npages - 1; p > 0; p--) {
            const int64_t q = (int64_t)(sc_rand_u64(&rng) % (uint64_t)(p + 1));
            const int32_t x = perm[p];
            perm[p] = perm[q], perm[q] = x;
        }
        const int32_t junk[4] = {INT32_MIN, INT32_MAX, -1, (int32_t)c->npages};
        for (int64_t b = 0; b < c->VB; b++)
            for (int64_t p = 0; p < (b == c->VB - 1 ? c->per : c->tstride); p++) {
                int32_t page = c->h[FZ_PAGE] & 0x40 ? junk[(b + p) % 4] : -1;
                if (p * c->page < kv_len(c, b))
                    page = (c->h[FZ_PAGE] & 0x10) && b > 0 && p < (c->per + 1) / 2
                               ? c->table[p]
                               : perm[b * c->per + p];
                c->table[b * c->tstride + p] = page;
            }
        free(perm);
        c->desc.pages = (sdpa_pages){c->table, c->tstride, c->page, c->npages};
    }
    for (int i = 0; i < 2; i++) {
        fz_kv *kv = &c->kv[i];
        const int op = OP_K + i;
        const int64_t D = c->v[op].d, H = c->Hkv;
        if (kv->writer) {
            kv->src_n = (size_t)(c->VB * H * c->vTkv * D);
            kv->src_buf = fz_alloc(round8(kv->src_n * sc_dtype_size(kv->src_dt)));
            kv->src = (sdpa_tensor){kv->src_buf, kv->src_dt, H * c->vTkv * D, c->vTkv * D, D};
        }
        if (!quantized(kv->st))
            continue;
        /* [pages or VB, Hkv, page or vTkv, D / group] like the cache (bthd, or with gaps),
         * one row per head, or one for all */
        const int64_t n0 = c->paged ? c->npages : c->VB, T = c->paged ? c->page : c->vTkv;
        const int64_t ng = D / (kv->group ? kv->group : D);
        const int lay = (c->h[FZ_LAYOUT] >> (2 * op)) & 3;
        sdpa_scales *sc = &kv->sc;
        const int per_token = kv->qs == QS_ROW || kv->qs == QS_ROW_GIVEN;
        if (kv->qs == QS_HEAD) {
            sc->stride_h = ng;
        } else if (per_token && lay == 1) {
            sc->stride_h = ng, sc->stride_t = H * ng, sc->stride_b = T * H * ng;
        } else if (per_token && lay == 2) {
            sc->stride_t = ng + 1, sc->stride_h = T * (ng + 1) + 1;
            sc->stride_b = H * sc->stride_h + 1;
        } else if (per_token) {
            sc->stride_t = ng, sc->stride_h = T * ng, sc->stride_b = H * T * ng;
        }
        const int64_t count = (n0 - 1) * sc->stride_b + (H - 1) * sc->stride_h +
                              (T - 1) * sc->stride_t + ng;
        kv->sbytes = (size_t)count * sc_dtype_size(sc->dtype);
        kv->sbuf = fz_alloc(round8(kv->sbytes));
        sc->data = kv->sbuf;
        if (i == 0)
            c->desc.k_scales = *sc;
        else
            c->desc.v_scales = *sc;
    }
}

/* Scales the writer reads: per head or per tensor, the largest |x| of the source over the
 * code range (calibrated, as fp8 caches use); per token given (static), or under codes
 * drawn directly, in [1/4, 1] / Q, so values stay within [-1, 1] (half of int8's rounded
 * to exact scales); raw data, raw bits. Computed ones start as 0xff (NaN): a row the
 * writer skipped shows. */
static void fill_scales(fz_case *c, int i, uint64_t *rng) {
    fz_kv *kv = &c->kv[i];
    const size_t ses = sc_dtype_size(kv->sc.dtype), n = kv->sbytes / ses;
    if (kv->computed) {
        memset(kv->sbuf, 0xff, kv->sbytes);
        return;
    }
    const int64_t D = c->v[OP_K + i].d, ng = D / (kv->group ? kv->group : D);
    const int calibrated = kv->writer && (kv->qs == QS_HEAD || kv->qs == QS_TENSOR);
    float amax[4] = {0, 0, 0, 0}; /* per head (Hkv <= 3), then over all of them */
    for (size_t x = 0; calibrated && x < kv->src_n; x++) {
        const float a = fabsf(sc_load(kv->src_buf, x, kv->src_dt));
        const int64_t head = (int64_t)x / (c->vTkv * D) % c->Hkv;
        if (isfinite(a) && a > amax[head])
            amax[head] = a;
        if (isfinite(a) && a > amax[3])
            amax[3] = a;
    }
    for (size_t e = 0; e < n; e++) {
        const uint64_t r = sc_rand_u64(rng);
        if (c->h[FZ_DATA] % 4 == 3) {
            const uint32_t u = (uint32_t)r;
            memcpy(kv->sbuf + e * ses, &u, ses); /* little endian: the low bits for f16 */
            continue;
        }
        float s = (float)(0.25 + 0.75 * (double)(r >> 11) * 0x1p-53) / qmax_of(kv->st);
        if (calibrated) {
            const float a = amax[kv->qs == QS_HEAD ? (int64_t)e / ng : 3];
            s = (a > 0.0f ? a : 1.0f) / qmax_of(kv->st);
        } else if (kv->st == SDPA_I8 && (r & 1)) {
            /* half of int8's given scales with their low 7 significand bits 0, as
             * sdpa_kv_write computes them: keys the x86 tiles factor beside keys they
             * do not (kernels/x86/tiles.h, "int8 scales factored") */
            uint32_t u;
            memcpy(&u, &s, 4);
            u = (u & 0x7fu) ? (u | 0x7fu) + 1u : u;
            memcpy(&s, &u, 4);
        }
        sc_store(kv->sbuf, e, kv->sc.dtype, s);
    }
}

/* One sdpa_kv_write of rows [t0, t0 + len) of entry b (b < 0: every entry, all rows),
 * recorded for the writer fault. 0 and c->pre on failure. */
static int write_rows(fz_case *c, int i, int64_t b, int64_t t0, int64_t len) {
    fz_kv *kv = &c->kv[i];
    const sdpa_tensor *cache = &c->v[OP_K + i].t;
    sdpa_kv_write_desc wd = {.batch = b < 0 ? c->VB : 1, .heads = c->Hkv, .len = len,
                             .dim = c->v[OP_K + i].d, .len_kv = c->vTkv, .scales = kv->sc,
                             .compute_scales = kv->computed,
                             .num_threads = c->desc.num_threads};
    sdpa_tensor src = kv->src, dst = *cache;
    const int64_t e0 = b < 0 ? 0 : b;
    src.data = kv->src_buf + (size_t)(e0 * src.stride_b + t0 * src.stride_t) *
                                 sc_dtype_size(kv->src_dt);
    if (c->paged) {
        wd.pages = c->desc.pages;
        wd.pages.block_table = c->table + e0 * c->tstride;
    } else { /* entry b's part of the cache and of its scales */
        const int bits = cache->dtype == SDPA_I4 ? 4 : 8 * (int)kv_unit(cache->dtype);
        dst.data = (char *)cache->data + (size_t)(e0 * cache->stride_b) * (size_t)bits / 8;
        if (kv->sc.data)
            wd.scales.data = (const char *)kv->sc.data +
                             (size_t)(e0 * kv->sc.stride_b) * sc_dtype_size(kv->sc.dtype);
    }
    kv->wpos = t0;
    if (t0 > 0)
        wd.pos = &kv->wpos;
    const sdpa_status st = sdpa_kv_write(&wd, &src, &dst);
    if (st != SDPA_OK) {
        snprintf(c->pre, sizeof c->pre, "sdpa_kv_write of %s (entry %lld, rows %lld..+%lld) "
                 "failed: %d (%s)", i ? "V" : "K", (long long)b, (long long)t0, (long long)len,
                 st, sdpa_strerror(st));
        return 0;
    }
    kv->written = 1;
    kv->wd = wd;
    kv->wsrc = src;
    kv->wdst = dst;
    return 1;
}

/* The cache of operand i from its source: one batched call when every entry has all
 * len_kv keys, else one call per entry; FZ_PAGE bit 7 splits each entry's rows in two
 * calls, the second at pos. Every byte no row is written to keeps 0xff (NaN in the float
 * types and fp8), so a read of a wrong page or slot shows. */
static int write_cache(fz_case *c, int i) {
    fz_view *w = &c->v[OP_K + i];
    memset(w->buf, 0xff, (size_t)w->ext * w->es);
    const int split = (c->h[FZ_PAGE] & 0x80) != 0;
    if (!c->kvlens && !split)
        return write_rows(c, i, -1, 0, c->vTkv);
    for (int64_t b = 0; b < c->VB; b++) {
        const int64_t len = kv_len(c, b);
        const uint64_t r = c->seed >> (8 * b);
        const int64_t cut = split && len > 1 ? 1 + (int64_t)(r % (uint64_t)(len - 1)) : len;
        if (cut > 0 && !write_rows(c, i, b, 0, cut))
            return 0;
        if (cut < len && !write_rows(c, i, b, cut, len - cut))
            return 0;
    }
    return 1;
}

/* Whether a stored code is the one include/sdpa.h's sdpa_kv_write defines for source x
 * and scale s: x / s (fp32) rounded to nearest even and saturated, NaN to NaN in fp8 and
 * 0 in int8/int4, code 0 for a scale that is 0 (or not finite). fp8 is checked by its
 * spacing at y (the nearest code, ties to the even one) rather than by an encoder. */
static int code_ok(sdpa_dtype t, int code, float x, float s) {
    if (!(s != 0.0f && isfinite(s)))
        return code == 0;
    const float y = x / s;
    if (t == SDPA_I8 || t == SDPA_I4) {
        const float q = qmax_of(t);
        const float r = isnan(y) ? 0.0f : fminf(fmaxf(nearbyintf(y), -q), q);
        return code == (int)r;
    }
    const double v = code_value(t, code), mx = qmax_of(t);
    if (isnan(y))
        return isnan(v);
    if (fabsf(y) >= mx)
        return v == copysign(mx, (double)y);
    const int mb = t == SDPA_FP8_E4M3 ? 3 : 2, emin = t == SDPA_FP8_E4M3 ? -6 : -14;
    const int e = fabsf(y) < ldexpf(1.0f, emin) ? emin : ilogbf(y);
    const double half = ldexp(1.0, e - mb - 1), err = fabs(v - (double)y);
    return err < half || (err == half && (code & 1) == 0);
}

/* What sdpa_kv_write wrote into cache i, against its source: each key's last writer (an
 * entry later in the batch overwrites a shared page) per head; computed scales are
 * fl(amax / Q) (f16: rounded, the largest finite f16 when that overflows; int8 in fp32:
 * rounded up to 17 significant bits), codes by
 * code_ok, plain rows the source rounded to the cache's dtype; and no byte of the cache
 * or of computed scales that no row owns was written. 0 and c->pre on a difference. */
static int check_written(fz_case *c, int i) {
    const fz_kv *kv = &c->kv[i];
    const fz_view *w = &c->v[OP_K + i];
    const sdpa_tensor *t = &w->t;
    const int64_t D = w->d, H = c->Hkv, P = c->paged ? c->page : c->vTkv;
    const int64_t nslots = c->paged ? c->npages * P : c->VB * c->vTkv;
    const int64_t G = kv->group ? kv->group : D;
    const int bits = t->dtype == SDPA_I4 ? 4 : 8 * (int)kv_unit(t->dtype);
    const size_t cbytes = (size_t)w->ext * w->es, ses = sc_dtype_size(kv->sc.dtype);
    int64_t *owner = calloc((size_t)nslots, sizeof(int64_t));
    uint8_t *mark = calloc(cbytes, 1), *smark = kv->computed ? calloc(kv->sbytes, 1) : NULL;
    for (int64_t b = 0; b < c->VB; b++)
        for (int64_t r = 0; r < kv_len(c, b); r++) {
            const int64_t slot = c->paged ? c->table[b * c->tstride + r / P] * P + r % P
                                          : b * c->vTkv + r;
            owner[slot] = b * c->vTkv + r + 1;
        }
    const char *what = NULL;
    int64_t at_b = 0, at_r = 0, at_h = 0, at_d = 0;
    float *x = malloc((size_t)D * sizeof(float));
    for (int64_t slot = 0; slot < nslots && !what; slot++) {
        if (!owner[slot])
            continue;
        const int64_t b = (owner[slot] - 1) / c->vTkv, r = (owner[slot] - 1) % c->vTkv;
        const int64_t pb = slot / P, sl = slot % P;
        for (int64_t h = 0; h < H && !what; h++) {
            for (int64_t d = 0; d < D; d++)
                x[d] = sc_load(kv->src_buf, (size_t)(((b * H + h) * c->vTkv + r) * D + d),
                               kv->src_dt);
            const int64_t e = pb * t->stride_b + h * t->stride_h + sl * t->stride_t;
            memset(mark + e * bits / 8, 1, (size_t)(D * bits / 8));
            const int64_t se = pb * kv->sc.stride_b + h * kv->sc.stride_h + sl * kv->sc.stride_t;
            for (int64_t d = 0; d < D && !what; d++) {
                at_b = b, at_r = r, at_h = h, at_d = d;
                if (!quantized(t->dtype)) {
                    float want, got = sc_load(t->data, (size_t)(e + d), t->dtype);
                    sc_store(&want, 0, t->dtype, x[d]);
                    want = sc_load(&want, 0, t->dtype);
                    if (!(isnan(want) ? isnan(got) : memcmp(&want, &got, 4) == 0))
                        what = "a plain row is not its source rounded to the cache's dtype";
                    continue;
                }
                const float s = sc_load(kv->sc.data, (size_t)(se + d / G), kv->sc.dtype);
                if (kv->computed && d % G == 0) {
                    float amax = 0.0f, want;
                    for (int64_t k = d; k < d + G; k++)
                        if (isfinite(x[k]) && fabsf(x[k]) > amax)
                            amax = fabsf(x[k]);
                    want = amax / qmax_of(t->dtype);
                    if (kv->sc.dtype == SDPA_F16) {
                        sc_store(&want, 0, SDPA_F16, want);
                        want = sc_load(&want, 0, SDPA_F16);
                        want = isinf(want) ? 65504.0f : want;
                    } else if (t->dtype == SDPA_I8) { /* up to 17 significant bits */
                        uint32_t u;
                        memcpy(&u, &want, 4);
                        u = (u & 0x7fu) ? (u | 0x7fu) + 1u : u;
                        memcpy(&want, &u, 4);
                    }
                    if (memcmp(&want, &s, 4) != 0)
                        what = "a computed scale is not fl(amax / Q), as rounded";
                    memset(smark + (size_t)(se + d / G) * ses, 1, ses);
                }
                if (!what && !code_ok(t->dtype, read_code(t->dtype, t->data, e + d), x[d], s))
                    what = "a code is not the source over its scale, rounded and saturated";
            }
        }
    }
    for (size_t e = 0; e < cbytes && !what; e++)
        if (!mark[e] && ((const uint8_t *)w->buf)[e] != 0xff)
            what = "a byte of the cache no row owns was written";
    for (size_t e = 0; smark && e < kv->sbytes && !what; e++)
        if (!smark[e] && (uint8_t)kv->sbuf[e] != 0xff)
            what = "a scale no row owns was written";
    if (what)
        snprintf(c->pre, sizeof c->pre, "sdpa_kv_write into %s: %s (entry %lld key %lld head "
                 "%lld element %lld)", i ? "V" : "K", what, (long long)at_b, (long long)at_r,
                 (long long)at_h, (long long)at_d);
    free(owner);
    free(mark);
    free(smark);
    free(x);
    return what == NULL;
}

/* A nondivisor of D: one in [2, D) if any, else D + 1. */
static int64_t nondivisor(int64_t D) {
    for (int64_t g = 2; g < D; g++)
        if (D % g)
            return g;
    return D + 1;
}

/* The last call that built a cache, with one argument broken (FZ_KV_WFAULT): it must
 * fail and write nothing, neither the cache, nor its scales, nor its source or table. */
static void writer_fault(fz_case *c) {
    fz_kv *kv = c->kv[0].written ? &c->kv[0] : c->kv[1].written ? &c->kv[1] : NULL;
    if (c->kv_wfault < 0 || !kv)
        return;
    const fz_view *w = &c->v[kv == &c->kv[0] ? OP_K : OP_V];
    sdpa_kv_write_desc wd = kv->wd;
    sdpa_tensor src = kv->wsrc, dst = kv->wdst;
    const int quant = quantized(dst.dtype), paged = wd.pages.block_table != NULL;
    const uint64_t r = c->seed;
    int64_t pos[4] = {0, 0, 0, 0};
    int32_t *tcopy = NULL;
    int f = c->kv_wfault;
    if ((f == WF_PAGE_OUT && !paged) || (f == WF_SCALES_SHARED && !(quant && paged)))
        f = WF_POS_PAST; /* nothing of that kind to break (or no sharing to refuse) */
    switch (f) {
    case WF_POS_PAST:
        for (int64_t b = 0; b < wd.batch; b++)
            pos[b] = wd.len_kv - wd.len + 1;
        wd.pos = pos;
        break;
    case WF_POS_NEG:
        pos[wd.batch - 1] = -1 - (int64_t)(r % 3);
        wd.pos = pos;
        break;
    case WF_PAGE_OUT: { /* the page of entry 0's first written row */
        const int64_t n = (wd.batch - 1) * wd.pages.stride + c->per;
        tcopy = malloc((size_t)n * sizeof(int32_t));
        memcpy(tcopy, wd.pages.block_table, (size_t)n * sizeof(int32_t));
        tcopy[(wd.pos ? wd.pos[0] : 0) / wd.pages.page_size] = r & 1 ? (int32_t)c->npages : -1;
        wd.pages.block_table = tcopy;
        break;
    }
    case WF_PAGE_SIZE:
        if (paged)
            wd.pages.page_size = 0;
        else
            wd.len = 0;
        break;
    case WF_SRC_IN_CACHE: src.data = dst.data; break;
    case WF_SCALES_IN_SRC:
        wd.scales.data = src.data;
        wd.scales.dtype = SDPA_F32;
        break;
    case WF_COMPUTE_BAD: wd.compute_scales = quant ? 2 + (int)(r % 3) : 1; break;
    case WF_SCALES_SHARED: /* the pool has at least three pages: stride_b 0 shares rows */
        wd.compute_scales = 1;
        wd.scales.stride_b = 0;
        break;
    case WF_GROUP:
        if (quant)
            wd.scales.group = nondivisor(wd.dim);
        else
            wd.scales = (sdpa_scales){.data = &c->fault_scale, .dtype = SDPA_F32};
        break;
    case WF_ODD_STRIDE:
        if (dst.dtype == SDPA_I4)
            dst.stride_t |= 1;
        else
            dst.stride_t = -1;
        break;
    case WF_SRC_DTYPE: {
        static const int bad[4] = {SDPA_I8, SDPA_FP8_E4M3, SDPA_I4, 12};
        src.dtype = (sdpa_dtype)bad[r % 4];
        break;
    }
    case WF_THREADS: wd.num_threads = -1 - (int)(r % 5); break;
    case WF_TABLE_STRIDE:
        if (paged && wd.batch > 1)
            wd.pages.stride = INT64_MAX - (int64_t)(r % 3);
        else if (paged)
            wd.pages.stride = -1;
        else
            dst.stride_h = -1;
        break;
    case WF_NO_SCALES:
        if (quant)
            wd.scales.data = NULL;
        else
            wd.dim = 0;
        break;
    case WF_SCALES_DTYPE:
        if (quant)
            wd.scales.dtype = SDPA_BF16;
        else
            wd.batch = -1;
        break;
    default: { /* WF_CACHE_DTYPE */
        static const int bad[3] = {7, 50, -1};
        dst.dtype = (sdpa_dtype)bad[r % 3];
        break;
    }
    }
    const void *regions[4] = {w->buf, kv->sbuf, kv->src_buf, c->table};
    const size_t sizes[4] = {(size_t)w->ext * w->es, kv->sbytes,
                             kv->src_n * sc_dtype_size(kv->src_dt), c->table_bytes};
    void *copies[4];
    for (int k = 0; k < 4; k++) {
        copies[k] = malloc(sizes[k] + 1);
        if (sizes[k])
            memcpy(copies[k], regions[k], sizes[k]);
    }
    const sdpa_status st = sdpa_kv_write(&wd, &src, &dst);
    int kept = 1;
    for (int k = 0; k < 4; k++) {
        kept &= !sizes[k] || memcmp(copies[k], regions[k], sizes[k]) == 0;
        free(copies[k]);
    }
    if (st == SDPA_OK || !kept)
        snprintf(c->pre, sizeof c->pre, "writer fault %d on %s: status %d (%s), cache, scales, "
                 "source and table %s", f, kv == &c->kv[0] ? "K" : "V", st, sdpa_strerror(st),
                 kept ? "kept" : "WRITTEN");
    free(tcopy);
}

/* The caches from their sources (after the injections), each write checked; then the
 * writer fault. */
static void build_caches(fz_case *c, uint64_t *rng) {
    for (int i = 0; i < 2; i++) {
        const fz_kv *kv = &c->kv[i];
        if (!kv->cache)
            continue;
        if (kv->sc.data)
            fill_scales(c, i, rng);
        if (kv->writer && (!write_cache(c, i) || !check_written(c, i)))
            return;
    }
    writer_fault(c);
}

/* Whether the values are compared: see the header comment. The score bound is what
 * |q|, |k| <= 1 allow; an inf in V stays comparable only while no weight can underflow
 * in fp32 (exp(-87.3) is FLT_MIN; 80 leaves a margin for the sink and mask terms). */
static void in_domain(fz_case *c) {
    if (c->h[FZ_DATA] % 4 == 3)
        c->compare = 0;
    const sdpa_desc *d = &c->desc;
    double s = (d->scale != 0.0f ? fabs((double)d->scale) : 1.0 / sqrt((double)c->Dk)) *
               (double)c->Dk;
    if (d->softcap > 0.0f && s > (double)d->softcap)
        s = (double)d->softcap;
    const double range = 2.0 * s + (d->alibi_slopes ? 16.0 : 0.0) + 4.0 + 3.0;
    if (c->inf_in_v && range > 80.0)
        c->compare = 0;
    /* An inf in Q or K scores +-inf, which softcap turns into +-cap: finite, and as large
     * as the cap. fp32 scores of magnitude M carry absolute errors near M 2^-24, so above
     * FZ_SCORE_MAX the small terms added to them (ALiBi, masks) are no longer resolved
     * to the suite's tolerance; the reference, in double, resolves them. */
    if (c->inf_in_qk && d->softcap > FZ_SCORE_MAX)
        c->compare = 0;
}

/* ---- faults -------------------------------------------------------------------------- */

static void apply_fault(fz_case *c) {
    const int f = c->h[FZ_FAULT];
    if (f >= FZ_NFAULTS)
        return;
    c->expect = EXPECT_FAIL;
    sdpa_desc *d = &c->desc;
    sdpa_tensor *q = &c->v[OP_Q].t, *k = &c->v[OP_K].t, *v = &c->v[OP_V].t, *o = &c->v[OP_O].t;
    switch (f) {
    case 0: /* heads_q not a multiple of heads_kv */
        if (d->heads_kv > 1)
            d->heads_q += 1;
        else
            d->heads_kv = d->heads_q + 1;
        break;
    case 1: d->batch = 0; break;
    case 2: d->len_q = -1; break;
    case 3: d->dim_qk = SDPA_MAX_HEAD_DIM + 1; break;
    case 4: d->dim_v = 0; break;
    case 5: d->scale = NAN; break;
    case 6: d->scale = -INFINITY; break;
    case 7: d->softcap = -1.0f; break;
    case 8: d->softcap = NAN; break;
    case 9: d->num_threads = -1; break;
    case 10: d->causal = 3; break;
    case 11: d->isa = 99; break;
    case 12: d->isa = -1; break;
    case 13: q->dtype = (sdpa_dtype)3; break;
    case 14: o->dtype = (sdpa_dtype)-1; break;
    case 15: /* an unknown mask kind, with data */
        d->mask.kind = (sdpa_mask_kind)3;
        d->mask.data = k->data;
        break;
    case 16: /* a kind without data */
        d->mask.kind = SDPA_MASK_BOOL;
        d->mask.data = NULL;
        break;
    case 17: /* a boolean mask with a dtype */
        d->mask = (sdpa_mask){.data = k->data, .kind = SDPA_MASK_BOOL, .dtype = SDPA_F16};
        break;
    case 18: d->window = 1, d->window_left = -1; break;
    case 19: d->window = 1, d->window_right = SDPA_MAX_DIM + 1; break;
    case 20: d->dropout_p = 1.0f; break;
    case 21: d->dropout_p = NAN; break;
    case 22: d->dropout_p = -0.5f; break;
    case 23: q->data = (char *)q->data + 1; break;
    case 24: o->data = (char *)o->data + 1; break;
    case 25:
        if (c->lse)
            c->lse = (float *)(void *)((char *)c->lse + 2);
        else
            o->data = (char *)o->data + 1;
        break;
    case 26: k->stride_t = -1; break;
    case 27: /* a query length past len_q (or q_lens next to cu_seqlens) */
        if (!c->qlens) {
            c->qlens = calloc((size_t)c->B, sizeof(int64_t));
            d->q_lens = c->qlens;
        }
        c->qlens[c->B - 1] = d->len_q + 1;
        break;
    case 28: /* cu_seqlens not starting at 0, or cu_seqlens_q alone */
        if (!c->cuq) {
            c->cuq = calloc((size_t)c->B + 1, sizeof(int64_t));
            d->cu_seqlens_q = c->cuq;
        } else {
            c->cuq[0] = 1;
        }
        break;
    case 29: /* a non-finite ALiBi slope */
        if (!c->slopes) {
            c->slopes = calloc((size_t)c->Hq, sizeof(float));
            d->alibi_slopes = c->slopes;
        }
        c->slopes[c->Hq - 1] = NAN;
        break;
    case 30: /* a sink of +inf */
        if (!c->sinks) {
            c->sinks = calloc((size_t)c->Hq, sizeof(float));
            d->sinks = c->sinks;
        }
        c->sinks[0] = INFINITY;
        break;
    case 31: /* output strides that map two elements to one address */
        if (c->vTq > 1 && c->Dv > 1)
            o->stride_t = c->Dv - 1;
        else if (c->Hq > 1)
            o->stride_h = 0;
        else if (c->VB > 1)
            o->stride_b = 0;
        else { /* a single output row cannot alias itself: put it on q instead */
            o->data = q->data;
            c->o_foreign = 1;
        }
        break;
    case 32:
        o->data = k->data;
        c->o_foreign = 1;
        break;
    case 34: d->compute = 2; break; /* a compute mode no table knows */
    default: /* 33: a stride that overflows the extent, over a dim of the view (a paged
                pool's are pages, heads and slots) of more than one element */
        if (c->v[OP_V].n[2] > 1)
            v->stride_t = INT64_MAX;
        else if (c->v[OP_V].n[1] > 1)
            v->stride_h = INT64_MAX;
        else if (c->v[OP_V].n[0] > 1)
            v->stride_b = INT64_MAX;
        else
            d->dim_v = -5;
        break;
    }
}

/* One deliberately invalid KV-cache field (FZ_KV_FAULT; decode_kv gave the case what the
 * fault breaks). */
static void apply_kv_fault(fz_case *c) {
    const int f = c->kv_fault;
    if (f < 0)
        return;
    c->expect = EXPECT_FAIL;
    sdpa_desc *d = &c->desc;
    sdpa_tensor *q = &c->v[OP_Q].t, *k = &c->v[OP_K].t, *v = &c->v[OP_V].t, *o = &c->v[OP_O].t;
    sdpa_pages *pg = &d->pages;
    sdpa_scales *ks = &d->k_scales, *vs = &d->v_scales;
    const uint64_t r = c->seed;
    /* a slot entry 0 uses (it has every key) */
    int32_t *used = c->table ? &c->table[r % (uint64_t)(c->per ? c->per : 1)] : NULL;
    static const int64_t big[3] = {0, -3, SDPA_MAX_DIM + 1};
    static const int quant[4] = {SDPA_I8, SDPA_FP8_E4M3, SDPA_FP8_E5M2, SDPA_I4};
    switch (f) {
    case KF_PAGE_PAST: *used = (int32_t)c->npages; break;
    case KF_PAGE_NEG: *used = -1; break;
    case KF_PAGE_INT32: *used = r & 1 ? INT32_MAX : INT32_MIN; break;
    case KF_PAGE_SIZE: pg->page_size = big[r % 3]; break;
    case KF_NUM_PAGES: pg->num_pages = big[r % 3]; break;
    case KF_TABLE_STRIDE: /* with B = 1 the stride is never multiplied: a negative one */
        pg->stride = c->B > 1 ? INT64_MAX - (int64_t)(r % 2) * (INT64_MAX / 2) : -1;
        break;
    case KF_TABLE_MISALIGNED:
        pg->block_table = (const int32_t *)(void *)((char *)c->table + 2);
        break;
    case KF_PAGED_VARLEN: *pg = (sdpa_pages){c->table, 1, c->vTkv, 1}; break;
    case KF_LSE_ON_TABLE:
        if (c->lse) {
            c->lse = (float *)(void *)c->table;
        } else {
            o->data = c->table;
            c->o_foreign = 1;
        }
        break;
    case KF_K_NO_SCALES: ks->data = NULL; break;
    case KF_V_NO_SCALES: vs->data = NULL; break;
    case KF_SCALES_ON_PLAIN:
        if (quantized(k->dtype))
            k->dtype = SDPA_F32;
        else
            *ks = (sdpa_scales){.data = &c->fault_scale, .dtype = SDPA_F32};
        break;
    case KF_GROUP: ks->group = nondivisor(c->Dk); break;
    case KF_GROUP_NEG: vs->group = -2 * (int64_t)(1 + r % 3); break;
    case KF_I4_ODD_GROUP: { /* the largest odd divisor of Dv */
        int64_t g = c->Dv;
        while (g % 2 == 0)
            g /= 2;
        vs->group = g;
        break;
    }
    case KF_I4_ODD_STRIDE: /* odd (wild strides may be INT64_MAX already) */
        if (r % 3 == 0)
            v->stride_t |= 1;
        else if (r % 3 == 1)
            v->stride_h |= 1;
        else
            v->stride_b |= 1;
        break;
    case KF_I4_ODD_DIM: d->dim_v -= 1; break;
    case KF_SCALES_DTYPE: {
        static const int bad[4] = {SDPA_BF16, SDPA_I8, SDPA_I4, 9};
        ks->dtype = (sdpa_dtype)bad[r % 4];
        break;
    }
    case KF_SCALES_STRIDE: /* over a dimension of more than one element */
        if (c->Hkv > 1)
            ks->stride_h = INT64_MAX;
        else if (c->v[OP_K].n[0] > 1)
            ks->stride_b = INT64_MAX / 2 + 1;
        else if (c->v[OP_K].n[2] > 1)
            ks->stride_t = (int64_t)1 << 62;
        else
            ks->stride_h = -1;
        break;
    case KF_SCALES_NEG_STRIDE: vs->stride_t = -1; break;
    case KF_SCALES_MISALIGNED: ks->data = (const char *)ks->data + 1; break;
    case KF_O_ON_SCALES:
        o->data = (void *)(uintptr_t)ks->data;
        c->o_foreign = 1;
        break;
    case KF_Q_QUANT: q->dtype = (sdpa_dtype)quant[r % 4]; break;
    case KF_O_QUANT: o->dtype = (sdpa_dtype)quant[r % 4]; break;
    default: { /* KF_KV_DTYPE */
        static const int bad[3] = {7, -1, 100};
        (r & 1 ? k : v)->dtype = (sdpa_dtype)bad[r % 3];
        break;
    }
    }
}

/* ---- runs and checks ------------------------------------------------------------------ */

/* Fill patterns of the output regions: two different non-NaN-free byte patterns, so an
 * element no run wrote shows as a difference between runs. */
#define FILL_A 0xA5
#define FILL_B 0x5A

typedef struct fz_out {
    sdpa_status st;
    uint8_t *o, *l; /* copies of the regions after the call */
} fz_out;

static void run(fz_case *c, int ref, int threads, uint8_t fill, sdpa_stats *stats, fz_out *out) {
    if (!c->o_foreign)
        memset(c->oreg, fill, c->oreg_bytes);
    if (c->lreg)
        memset(c->lreg, fill, c->lreg_bytes);
    sdpa_desc d = c->desc;
    d.num_threads = threads;
    d.stats = stats;
    out->st = ref ? sdpa_reference(&d, &c->v[OP_Q].t, &c->v[OP_K].t, &c->v[OP_V].t,
                                   &c->v[OP_O].t, c->lse)
                  : sdpa_forward(&d, &c->v[OP_Q].t, &c->v[OP_K].t, &c->v[OP_V].t,
                                 &c->v[OP_O].t, c->lse);
    out->o = malloc(c->oreg_bytes + 1);
    out->l = malloc(c->lreg_bytes + 1);
    if (!c->o_foreign)
        memcpy(out->o, c->oreg, c->oreg_bytes);
    if (c->lreg)
        memcpy(out->l, c->lreg, c->lreg_bytes);
}

static int all_bytes(const uint8_t *p, size_t n, uint8_t b) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != b)
            return 0;
    return 1;
}

/* Element offset (in elements of o) of view element (b, h, i, d). */
static int64_t o_at(const fz_case *c, int64_t b, int64_t h, int64_t i, int64_t d) {
    const sdpa_tensor *o = &c->v[OP_O].t;
    return b * o->stride_b + h * o->stride_h + i * o->stride_t + d;
}

/* Marks of the output view's elements over its region: 0 a gap, 1 one element, 2 an
 * address two elements share. */
static uint8_t *o_marks(const fz_case *c) {
    const fz_view *w = &c->v[OP_O];
    uint8_t *mark = calloc((size_t)w->ext, 1);
    for (int64_t b = 0; b < c->VB; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->vTq; i++)
                for (int64_t d = 0; d < c->Dv; d++) {
                    const int64_t e = o_at(c, b, h, i, d);
                    if (e >= 0 && e < w->ext)
                        mark[e] = mark[e] ? 2 : 1;
                }
    return mark;
}

static int gaps_intact(const fz_case *c, const uint8_t *mark, const uint8_t *o, uint8_t fill) {
    const size_t es = c->v[OP_O].es;
    for (int64_t e = 0; e < c->v[OP_O].ext; e++)
        if (!mark[e] && !all_bytes(o + (size_t)e * es, es, fill))
            return 0;
    return 1;
}

static int spans_disjoint(const void *a, size_t an, const void *b, size_t bn) {
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x + an <= y || y + bn <= x;
}

/* Describes the case for a failure message. */
static int describe(const fz_case *c, char *buf, size_t n) {
    const sdpa_desc *d = &c->desc;
    return snprintf(buf, n,
                    "class=%d B=%lld Hq=%lld Hkv=%lld Tq=%lld Tkv=%lld (views %lld/%lld) Dk=%lld "
                    "Dv=%lld dt=%d/%d/%d/%d layout=0x%02x causal=%d scale=%g softcap=%g "
                    "window=%d(%lld,%lld) alibi=%d sinks=%d mask=0x%02x lens=%d dropout=%g "
                    "threads=%d isa=%d data=%d fault=%d alias=%d/%d compare=%d",
                    c->h[FZ_CLASS] % 4, (long long)c->B, (long long)c->Hq, (long long)c->Hkv,
                    (long long)c->Tq, (long long)c->Tkv, (long long)c->vTq, (long long)c->vTkv,
                    (long long)c->Dk, (long long)c->Dv, c->v[0].t.dtype, c->v[1].t.dtype,
                    c->v[2].t.dtype, c->v[3].t.dtype, c->h[FZ_LAYOUT], d->causal,
                    (double)d->scale, (double)d->softcap, d->window, (long long)d->window_left,
                    (long long)d->window_right, d->alibi_slopes != NULL, d->sinks != NULL,
                    c->h[FZ_MASK], c->h[FZ_LENS] % 5, (double)d->dropout_p, d->num_threads,
                    d->isa, c->h[FZ_DATA] % 4, c->h[FZ_FAULT] < FZ_NFAULTS ? c->h[FZ_FAULT] : -1,
                    c->alias, c->h[FZ_ALIAS_AT] % 4, c->compare);
}

/* The KV-cache part of a case, appended to describe()'s. */
static int describe_kv(const fz_case *c, char *buf, size_t n) {
    if (!c->kv[0].cache && !c->kv[1].cache && c->kv_fault < 0)
        return 0;
    return snprintf(buf, n,
                    " page=%lld (%lld per entry, %lld pages, stride %lld, bits 0x%02x) "
                    "kv=%d/%d src=%d/%d writer=%d/%d qscale=%d/%d group=%lld/%lld "
                    "scales=%d/%d kvfault=%d wfault=%d",
                    (long long)(c->paged ? c->page : 0), (long long)c->per,
                    (long long)c->npages, (long long)c->tstride, c->h[FZ_PAGE] & 0xf0,
                    c->kv[0].st, c->kv[1].st, c->kv[0].src_dt, c->kv[1].src_dt,
                    c->kv[0].writer, c->kv[1].writer, c->kv[0].qs, c->kv[1].qs,
                    (long long)c->kv[0].group, (long long)c->kv[1].group, c->kv[0].sc.dtype,
                    c->kv[1].sc.dtype, c->kv_fault, c->kv_wfault);
}

/* The values of a successful fused run against the reference. */
/* sc_close, or under bf16 compute (where the reference computes in the mode too) the
 * mode's error model for these inputs: |v| <= 1 and bounded scores make D negligible
 * against 2^-7 and A_d at most the sum of the weights (include/sdpa.h), which is 1, or
 * 1 / (1 - p) under dropout (a kept weight is scaled by it), so |o - r| <= 2^-6 A plus
 * o's own rounding (amax = A; 1 for lse, whose bound is the same D plus fp32's). */
static int fz_close(const fz_case *c, float x, float y, sdpa_dtype t, double amax) {
    if (c->desc.compute != SDPA_COMPUTE_BF16 || !isfinite(x) || !isfinite(y))
        return sc_close(x, y, t);
    return fabs((double)x - (double)y) <= 0x1p-6 * amax + sc_rel_tol(t) * fabs((double)y);
}

static int compare_values(const fz_case *c, const fz_out *a, const fz_out *r, char *why,
                          size_t n) {
    const sdpa_dtype ot = c->v[OP_O].t.dtype;
    const double amax = c->desc.dropout_p != 0.0f ? 1.0 / (1.0 - (double)c->desc.dropout_p) : 1.0;
    for (int64_t b = 0; b < c->VB; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->vTq; i++)
                for (int64_t d = 0; d < c->Dv; d++) {
                    const size_t e = (size_t)o_at(c, b, h, i, d);
                    const float x = sc_load(a->o, e, ot), y = sc_load(r->o, e, ot);
                    if (!fz_close(c, x, y, ot, amax)) {
                        fail(why, n, "o[%lld,%lld,%lld,%lld] fused %.9g reference %.9g",
                             (long long)b, (long long)h, (long long)i, (long long)d,
                             (double)x, (double)y);
                        return 0;
                    }
                }
    for (size_t e = 0; e < c->lreg_bytes / sizeof(float); e++) {
        float x, y;
        memcpy(&x, a->l + 4 * e, 4);
        memcpy(&y, r->l + 4 * e, 4);
        if (!fz_close(c, x, y, SDPA_F32, 1.0)) {
            fail(why, n, "lse[%zu] fused %.9g reference %.9g", e, (double)x, (double)y);
            return 0;
        }
    }
    return 1;
}

/* K (i = 0) or V as the plain fp32 view [VB, Hkv, vTkv, D] of the values its cache holds,
 * for the oracle, which reads plain views: each row found through the block table, each
 * code dequantized by the formats' definitions (code_value: fl(value(code) x scale),
 * include/sdpa.h), none of it the library's code. Rows past an entry's keys stay 0 (no
 * one reads them). */
static float *mirror(const fz_case *c, int i, sdpa_tensor *out) {
    const fz_kv *kv = &c->kv[i];
    const sdpa_tensor *t = &c->v[OP_K + i].t;
    const sdpa_scales *sc = &kv->sc;
    const int64_t D = c->v[OP_K + i].d, H = c->Hkv, T = c->vTkv, G = kv->group ? kv->group : D;
    float *m = calloc((size_t)(c->VB * H * T * D), sizeof(float));
    for (int64_t b = 0; b < c->VB; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t r = 0; r < kv_len(c, b); r++) {
                int64_t pb = b, sl = r;
                if (c->paged)
                    pb = c->table[b * c->tstride + r / c->page], sl = r % c->page;
                const int64_t e = pb * t->stride_b + h * t->stride_h + sl * t->stride_t;
                const int64_t se = pb * sc->stride_b + h * sc->stride_h + sl * sc->stride_t;
                float *row = m + ((b * H + h) * T + r) * D;
                for (int64_t d = 0; d < D; d++) {
                    if (!quantized(t->dtype)) {
                        row[d] = sc_load(t->data, (size_t)(e + d), t->dtype);
                        continue;
                    }
                    const int code = read_code(t->dtype, t->data, e + d);
                    const float value = (float)code_value(t->dtype, code);
                    row[d] = value * sc_load(sc->data, (size_t)(se + d / G), sc->dtype);
                }
            }
    *out = sdpa_tensor_bhtd(m, SDPA_F32, H, T, D);
    return m;
}

/* Largest weights matrix (elements) a case checks: 4 MiB of floats. */
#define FZ_WEIGHTS_MAX ((int64_t)1 << 20)

/* After a successful call: sdpa_attention_weights on the same inputs (with an lse from
 * a fresh sdpa_forward) against the independent oracle (tests/oracle.h). A key the row
 * does not see must weigh exactly +0 whatever the data (NaN rows included: the class of
 * the NaN-weights defect); inside the comparison domain the visible weights, o and lse
 * must match the oracle's too. The oracle shares no code with the driver or with
 * sdpa_reference, so a bug in their shared visible-key rule shows here. */
static int check_weights(fz_case *c, char *why, size_t n) {
    const int64_t rows = c->VB * c->Hq * c->vTq, nw = rows * c->vTkv;
    if (nw > FZ_WEIGHTS_MAX)
        return 1;
    sdpa_desc d = c->desc;
    d.stats = NULL;
    const sdpa_tensor *q = &c->v[OP_Q].t, *k = &c->v[OP_K].t, *v = &c->v[OP_V].t;
    float *lse = malloc((size_t)rows * sizeof(float)), *w = malloc((size_t)nw * sizeof(float));
    double *oo = malloc((size_t)(rows * c->Dv) * sizeof(double));
    double *ol = malloc((size_t)rows * sizeof(double)), *ow = malloc((size_t)nw * sizeof(double));
    int ok = 1;
    /* the oracle computes exact fp32-mode attention: under bf16 compute only the hidden
     * keys' exact zeros are compared (the mode's values against sdpa_reference in the
     * mode, compare_values) */
    const int values = c->compare && d.compute != SDPA_COMPUTE_BF16;
    sdpa_status st = sdpa_forward(&d, q, k, v, &c->v[OP_O].t, lse);
    if (st == SDPA_OK)
        st = sdpa_attention_weights(&d, q, k, lse, w);
    if (st != SDPA_OK) {
        fail(why, n, "sdpa_attention_weights after a successful call: %d (%s)", st,
             sdpa_strerror(st));
        ok = 0;
    }
    /* caches reach the oracle as the plain views of their values */
    sdpa_desc od = d;
    sdpa_tensor mk, mv;
    float *mkb = c->kv[0].cache ? mirror(c, 0, &mk) : NULL;
    float *mvb = c->kv[1].cache ? mirror(c, 1, &mv) : NULL;
    od.pages = (sdpa_pages){0};
    od.k_scales = od.v_scales = (sdpa_scales){0};
    if (ok && !th_oracle(&od, q, mkb ? &mk : k, mvb ? &mv : v, oo, ol, ow)) {
        fail(why, n, "the oracle ran out of memory");
        ok = 0;
    }
    for (int64_t e = 0; ok && e < nw; e++) {
        const int64_t row = e / c->vTkv, j = e % c->vTkv;
        const int64_t vb = row / (c->Hq * c->vTq), h = row / c->vTq % c->Hq;
        int64_t b = vb, i = row % c->vTq;
        if (c->cuq) { /* packed varlen: the sequence that owns view row i */
            for (b = 0; b < c->B && i >= c->cuq[b + 1]; b++) {
            }
            i = b < c->B ? i - c->cuq[b] : 0;
        }
        const float r = (float)ow[e];
        if (!th_oracle_visible(&d, b, h, i, j)) {
            if (!(w[e] == 0.0f && !signbit(w[e]))) {
                fail(why, n, "weight[%lld] of a hidden key (row %lld, key %lld) is %g, not 0",
                     (long long)e, (long long)row, (long long)j, (double)w[e]);
                ok = 0;
            }
        } else if (values && !sc_close(w[e], r, SDPA_F32)) {
            fail(why, n, "weight[%lld] (row %lld, key %lld) %.9g, oracle %.9g", (long long)e,
                 (long long)row, (long long)j, (double)w[e], (double)r);
            ok = 0;
        }
    }
    /* o and lse of this call against the oracle (the fused path's own rounding of o) */
    const sdpa_dtype ot = c->v[OP_O].t.dtype;
    for (int64_t row = 0; ok && values && row < rows; row++) {
        const int64_t vb = row / (c->Hq * c->vTq), h = row / c->vTq % c->Hq, i = row % c->vTq;
        if (!sc_close(lse[row], (float)ol[row], SDPA_F32)) {
            fail(why, n, "lse[%lld] %.9g, oracle %.9g", (long long)row, (double)lse[row],
                 ol[row]);
            ok = 0;
        }
        for (int64_t x = 0; ok && x < c->Dv; x++) {
            const float got = sc_load(c->v[OP_O].t.data, (size_t)o_at(c, vb, h, i, x), ot);
            if (!sc_close(got, (float)oo[row * c->Dv + x], ot)) {
                fail(why, n, "o[row %lld, %lld] %.9g, oracle %.9g", (long long)row, (long long)x,
                     (double)got, oo[row * c->Dv + x]);
                ok = 0;
            }
        }
    }
    free(lse);
    free(w);
    free(oo);
    free(ol);
    free(ow);
    free(mkb);
    free(mvb);
    return ok;
}

/* Snapshots of every input region, to prove none was written. */
typedef struct snap {
    const void *p;
    size_t n;
    void *copy;
} snap;

static int take_snaps(const fz_case *c, snap *s) {
    int k = 0;
    for (int op = OP_Q; op <= OP_V; op++)
        s[k++] = (snap){c->v[op].buf, (size_t)c->v[op].ext * c->v[op].es, NULL};
    if (c->mask)
        s[k++] = (snap){c->mask, c->mask_bytes, NULL};
    const size_t hb = (size_t)c->Hq * sizeof(float);
    if (c->slopes)
        s[k++] = (snap){c->slopes, hb, NULL};
    if (c->sinks)
        s[k++] = (snap){c->sinks, hb, NULL};
    const size_t lb = (size_t)c->B * sizeof(int64_t);
    if (c->qlens)
        s[k++] = (snap){c->qlens, lb, NULL};
    if (c->kvlens)
        s[k++] = (snap){c->kvlens, lb, NULL};
    if (c->cuq)
        s[k++] = (snap){c->cuq, lb + sizeof(int64_t), NULL};
    if (c->cukv)
        s[k++] = (snap){c->cukv, lb + sizeof(int64_t), NULL};
    if (c->table)
        s[k++] = (snap){c->table, c->table_bytes, NULL};
    for (int i = 0; i < 2; i++)
        if (c->kv[i].sbuf)
            s[k++] = (snap){c->kv[i].sbuf, c->kv[i].sbytes, NULL};
    for (int i = 0; i < k; i++) {
        s[i].copy = malloc(s[i].n);
        memcpy(s[i].copy, s[i].p, s[i].n);
    }
    return k;
}

static void free_case(fz_case *c) {
    for (int op = 0; op < NOPS; op++)
        if (c->v[op].buf)
            fz_free(c->v[op].buf);
    if (c->lse_buf)
        fz_free(c->lse_buf);
    if (c->mask)
        fz_free(c->mask);
    if (c->table)
        fz_free(c->table);
    for (int i = 0; i < 2; i++) {
        if (c->kv[i].sbuf)
            fz_free(c->kv[i].sbuf);
        if (c->kv[i].src_buf)
            fz_free(c->kv[i].src_buf);
    }
    free(c->slopes);
    free(c->sinks);
    free(c->qlens);
    free(c->kvlens);
    free(c->cuq);
    free(c->cukv);
}

static void free_out(fz_out *o) {
    free(o->o);
    free(o->l);
}

/* All checks of one decoded case; 1 if they hold, else 0 with why. */
static int check(fz_case *c, char *why, size_t n) {
    /* the first fill before the snapshots: an output placed over an input changes that
     * input's bytes here, never in a call that is refused */
    if (!c->o_foreign)
        memset(c->oreg, FILL_A, c->oreg_bytes);
    if (c->lreg)
        memset(c->lreg, FILL_A, c->lreg_bytes);
    snap snaps[16];
    const int nsnap = take_snaps(c, snaps);
    sdpa_stats st;
    memset(&st, 0xEE, sizeof st);
    fz_out a, b = {SDPA_OK, NULL, NULL}, r;
    const sdpa_desc *d = &c->desc;
    run(c, 0, d->num_threads, FILL_A, d->stats ? &st : NULL, &a);
    run(c, 1, d->num_threads, FILL_A, NULL, &r);
    const int isa_unusable = d->isa != SDPA_ISA_AUTO
                                 ? (d->isa > 0 && d->isa < SDPA_ISA_COUNT_ &&
                                    !sdpa_isa_supported((sdpa_isa)d->isa))
                                 : sdpa_get_isa() == SDPA_ISA_AUTO;
    int ok = 1;
    uint8_t *mark = NULL;

    /* statuses */
    if (a.st == SDPA_ERR_UNSUPPORTED_ISA) {
        if (!isa_unusable || r.st != SDPA_OK) {
            fail(why, n, "fused SDPA_ERR_UNSUPPORTED_ISA (isa %d usable: %d), reference %d",
                 d->isa, !isa_unusable, r.st);
            ok = 0;
        }
    } else if (a.st != r.st) {
        fail(why, n, "status fused %d (%s), reference %d (%s)", a.st, sdpa_strerror(a.st), r.st,
             sdpa_strerror(r.st));
        ok = 0;
    } else if (a.st == SDPA_OK && isa_unusable) {
        fail(why, n, "an unusable isa %d ran", d->isa);
        ok = 0;
    }
    if (ok) {
        const int want_ok = c->expect == EXPECT_OK && !isa_unusable;
        if (want_ok && a.st != SDPA_OK) {
            fail(why, n, "a valid case failed: %d (%s)", a.st, sdpa_strerror(a.st));
            ok = 0;
        } else if (c->expect == EXPECT_FAIL && (a.st == SDPA_OK || r.st == SDPA_OK)) {
            fail(why, n, "an invalid case was accepted (fused %d, reference %d)", a.st, r.st);
            ok = 0;
        } else if (c->expect == EXPECT_STATUS && a.st != c->expect_status &&
                   !(isa_unusable && a.st == SDPA_ERR_UNSUPPORTED_ISA)) {
            fail(why, n, "status %d (%s), expected %d (%s)", a.st, sdpa_strerror(a.st),
                 c->expect_status, sdpa_strerror(c->expect_status));
            ok = 0;
        }
    }

    /* failures leave the outputs as they were */
    const fz_out *runs[2] = {&a, &r};
    for (int i = 0; i < 2 && ok; i++)
        if (runs[i]->st != SDPA_OK) {
            if ((!c->o_foreign && !all_bytes(runs[i]->o, c->oreg_bytes, FILL_A)) ||
                (c->lreg && !all_bytes(runs[i]->l, c->lreg_bytes, FILL_A))) {
                fail(why, n, "%s returned %d but wrote an output", i ? "reference" : "fused",
                     runs[i]->st);
                ok = 0;
            }
        }

    /* successes: accepted views really are sound, every element written, no gap */
    if (ok && (a.st == SDPA_OK || r.st == SDPA_OK)) {
        mark = o_marks(c);
        for (int64_t e = 0; e < c->v[OP_O].ext && ok; e++)
            if (mark[e] == 2) {
                fail(why, n, "an output view with two elements at offset %lld was accepted",
                     (long long)e);
                ok = 0;
            }
        if (ok && c->alias == 1 &&
            !spans_disjoint(c->oreg, c->oreg_bytes, c->v[OP_Q].buf,
                            (size_t)c->v[OP_Q].ext * c->v[OP_Q].es)) {
            fail(why, n, "an o overlapping q was accepted");
            ok = 0;
        }
        if (ok && c->alias == 2 && !spans_disjoint(c->lreg, c->lreg_bytes, c->oreg, c->oreg_bytes)) {
            fail(why, n, "an lse overlapping o was accepted");
            ok = 0;
        }
        for (int i = 0; i < 2 && ok; i++)
            if (runs[i]->st == SDPA_OK && !gaps_intact(c, mark, runs[i]->o, FILL_A)) {
                fail(why, n, "%s wrote between the output view's elements",
                     i ? "reference" : "fused");
                ok = 0;
            }
    }
    if (ok && a.st == SDPA_OK) {
        /* the same call with another thread count over another fill: same bits */
        run(c, 0, d->num_threads == 1 ? 2 : 1, FILL_B, NULL, &b);
        if (b.st != SDPA_OK) {
            fail(why, n, "the rerun failed: %d", b.st);
            ok = 0;
        }
        for (int64_t bb = 0; bb < c->VB && ok; bb++)
            for (int64_t h = 0; h < c->Hq && ok; h++)
                for (int64_t i = 0; i < c->vTq && ok; i++) {
                    const size_t es = c->v[OP_O].es, e = (size_t)o_at(c, bb, h, i, 0) * es;
                    if (memcmp(a.o + e, b.o + e, (size_t)c->Dv * es) != 0) {
                        fail(why, n, "o[%lld,%lld,%lld,:] differs between %d and %d threads "
                             "(or was not written)", (long long)bb, (long long)h, (long long)i,
                             d->num_threads, d->num_threads == 1 ? 2 : 1);
                        ok = 0;
                    }
                }
        if (ok && c->lreg && memcmp(a.l, b.l, c->lreg_bytes) != 0) {
            fail(why, n, "lse differs between thread counts (or was not written)");
            ok = 0;
        }
        if (ok && !gaps_intact(c, mark, b.o, FILL_B)) {
            fail(why, n, "fused wrote between the output view's elements");
            ok = 0;
        }
        if (ok && d->stats) {
            const int sane = st.blocks_computed >= 0 && st.blocks_skipped >= 0 &&
                             st.blocks_masked >= 0 && st.blocks_masked <= st.blocks_computed &&
                             st.blocks_computed + st.blocks_skipped == st.blocks_total &&
                             st.threads >= 1 && st.work_items >= 1 &&
                             (d->isa == SDPA_ISA_AUTO || (int)st.isa == d->isa);
            if (!sane) {
                fail(why, n, "stats: isa %d threads %d items %lld total %lld computed %lld "
                     "skipped %lld masked %lld", st.isa, st.threads, (long long)st.work_items,
                     (long long)st.blocks_total, (long long)st.blocks_computed,
                     (long long)st.blocks_skipped, (long long)st.blocks_masked);
                ok = 0;
            }
        }
        if (ok && r.st == SDPA_OK && c->compare)
            ok = compare_values(c, &a, &r, why, n);
        /* the weights (and a second oracle) on cases whose outputs stand alone */
        if (ok && c->alias == 0 && !c->o_foreign)
            ok = check_weights(c, why, n);
    }

    for (int i = 0; i < nsnap; i++) {
        if (ok && memcmp(snaps[i].p, snaps[i].copy, snaps[i].n) != 0) {
            fail(why, n, "input region %d was written", i);
            ok = 0;
        }
        free(snaps[i].copy);
    }
    free(mark);
    free_out(&a);
    free_out(&b);
    free_out(&r);
    return ok;
}

int fz_run(const uint8_t *data, size_t size, sdpa_isa isa, char *msg, size_t msglen) {
    fz_case *c = calloc(1, sizeof *c);
    size_t at = 0;
    for (int i = 0; i < FZ_NFIELDS; i++)
        c->h[i] = at < size ? data[at++] : 0;
    for (int i = 0; i < FZ_SEED_BYTES; i++)
        c->seed |= (uint64_t)(at < size ? data[at++] : 0) << (8 * i);
    c->inj = data + at;
    c->ninj = (size - at) / FZ_INJ_BYTES;
    c->isa = isa;
    c->compare = 1;
    c->expect = EXPECT_OK;
    const int guard = c->h[FZ_ALIAS] & 0x40 ? SC_GUARD_BEFORE : SC_GUARD_AFTER;
#ifdef FZ_ASAN
    alloc_mode = c->h[FZ_ALIAS] & 0x80 ? guard + 1 : 0;
#else
    alloc_mode = guard + 1;
#endif
    if (c->h[FZ_ALIAS] & 0x08) { /* one region, buffers upwards or (bit 4) downwards */
        arena.size = FZ_ARENA_BYTES;
        if (!(arena.base = sc_alloc(arena.size, guard)))
            abort();
        arena.up = arena.down = 0;
        arena.downwards = (c->h[FZ_ALIAS] >> 4) & 1;
        arena.rng = c->seed ^ 0xa7e4a;
    }

    decode_shape(c);
    decode_kv(c);
    decode_lengths(c);
    decode_options(c);
    decode_pages(c);
    uint64_t rng = c->seed;
    setup_views(c);
    setup_caches(c);
    for (int op = OP_Q; op <= OP_V; op++)
        fill_view(c, op, &rng);
    make_mask(c, &rng);
    make_heads(c, &rng);
    inject(c);
    build_caches(c, &rng);
    in_domain(c);
    apply_fault(c);
    apply_kv_fault(c);
    if (c->out_wild && c->expect == EXPECT_OK)
        c->expect = EXPECT_ANY;

    char why[512];
    int ok = 0;
    if (c->pre[0]) /* the cache was not written as it should be: nothing to run */
        snprintf(why, sizeof why, "%s", c->pre);
    else
        ok = check(c, why, sizeof why);
    if (!ok) {
        int k = describe(c, msg, msglen);
        if (k >= 0 && (size_t)k < msglen)
            k += describe_kv(c, msg + k, msglen - (size_t)k);
        if (k >= 0 && (size_t)k < msglen)
            snprintf(msg + k, msglen - (size_t)k, ": %s", why);
    }
    free_case(c);
    free(c);
    if (arena.base) { /* after free_case, whose frees are no-ops in an arena */
        sc_free(arena.base);
        arena.base = NULL;
    }
    return ok;
}
