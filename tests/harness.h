/*
 * harness.h - the one small test harness every test file shares.
 *
 * It counts checks, prints failures with enough context to reproduce them, allocates
 * tensors whose buffers end (or start) on an unmapped page so any over-read faults, and
 * runs one attention case through the fused path and the reference and compares them
 * with the DESIGN section 6 tolerance. It is not a framework: suites are plain functions
 * listed in main.c.
 */
#ifndef SDPA_TEST_HARNESS_H
#define SDPA_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "../src/internal.h"
#include "sdpa.h"

/* ---- counting ------------------------------------------------------------------ */

extern int th_passed, th_failed;
extern int th_verbose;

/* Record one check; on failure print "FAIL <where>: <message>". Returns cond. */
int th_check(int cond, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define CHECK(cond, ...) th_check(!!(cond), __func__, __VA_ARGS__)

/* ---- deterministic data -------------------------------------------------------- */

uint64_t th_rand_u64(uint64_t *state);
/* Uniform in [-1, 1). */
float th_rand_float(uint64_t *state);

/* ---- guarded buffers ----------------------------------------------------------- */

enum { TH_GUARD_AFTER = 0, TH_GUARD_BEFORE = 1 };
/* bytes of writable memory whose last byte (GUARD_AFTER) is followed by, or whose first
 * byte (GUARD_BEFORE) is preceded by, a PROT_NONE page. Free with th_free. */
void *th_alloc(size_t bytes, int guard);
void th_free(void *p);

/* ---- one attention case -------------------------------------------------------- */

enum { TH_BHTD = 0, TH_BTHD = 1, TH_PADDED = 2 };

/* Sequence-length modes of a case. */
enum {
    TH_LENS_NONE = 0,
    TH_LENS_PADDED = 1, /* q_lens and kv_lens per batch entry (entry 1 gets kv_len 0) */
    TH_LENS_KV = 2,     /* kv_lens only (a KV cache filled to different lengths) */
    TH_LENS_VARLEN = 3  /* packed varlen: cu_seqlens; Tq/Tkv are the longest sequence */
};

/* Mask broadcast bits of a case. */
enum { TH_BCAST_B = 1, TH_BCAST_H = 2, TH_BCAST_ROWS = 4 };

typedef struct th_case {
    int64_t B, Hq, Hkv, Tq, Tkv, Dk, Dv;
    int causal;       /* an sdpa_causal value */
    int threads;      /* desc.num_threads */
    int layout;       /* TH_BHTD, TH_BTHD or TH_PADDED (gaps between rows and heads) */
    int misalign;     /* shift every buffer by this many elements from its page end */
    int guard;        /* TH_GUARD_AFTER or TH_GUARD_BEFORE */
    float scale;      /* desc.scale (0 = default) */
    float amplitude;  /* inputs uniform in [-amplitude, amplitude); 0 means 1 */
    uint64_t seed;
    /* features, all off when zero */
    sdpa_dtype dt[4]; /* storage of q, k, v, o */
    int window;
    int64_t wl, wr;
    float softcap;
    int alibi;        /* per-head ALiBi slopes 2^(-8 (h + 1) / Hq) */
    int sinks;        /* per-head sink logits in [-1, 3) (head 1 gets -inf) */
    int mask;         /* an sdpa_mask_kind */
    sdpa_dtype mask_dt;
    int mask_bcast;   /* TH_BCAST_* bits */
    float mask_hidden;/* fraction of hidden entries; row 3 of each head is fully hidden */
    int lens;         /* TH_LENS_* */
    float dropout;    /* desc.dropout_p (the seed is the case's seed) */
} th_case;
/* Tensors of a case, filled and ready to call either entry point with. Two sets made
 * from the same case hold the same values. */
typedef struct th_tensors {
    sdpa_desc desc;
    sdpa_tensor q, k, v, o;
    float *lse;
    void *bufs[5];
    size_t elems[5];  /* elements of q, k, v, o, lse (o and lse are written) */
    int64_t VB;       /* batch entries of the views (1 under packed varlen) */
    void *mask;
    float *slopes, *sinks;
    int64_t *qlens, *kvlens, *cuq, *cukv;
} th_tensors;

void th_tensors_make(th_tensors *t, const th_case *c);
void th_tensors_free(th_tensors *t);
/* Pointer to element (b, h, i, 0) of an fp32 view. */
float *th_at(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i);
/* Element (b, h, i, d) of a view of any dtype, widened to fp32. */
float th_get(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i, int64_t d);

/* Largest errors of the th_compare calls that found no element out of tolerance, for
 * the final summary. */
extern double th_worst_abs, th_worst_rel;

typedef struct th_errors {
    double max_abs, max_rel;
    int64_t bad;  /* elements outside tolerance (NaN mismatch counts) */
} th_errors;

/* Compare outputs o/lse of a (fused) against those of ref, both shaped by c.
 * Tolerance (DESIGN section 6): |x - r| <= 1e-5 + 1e-4 |r| for an fp32 output; a 16-bit
 * output adds one unit in the last place of its format (2^-10 |r| for f16, 2^-7 |r| for
 * bf16), since both paths round nearly equal fp32 values once and may land on the two
 * sides of a rounding boundary. NaN only where ref is NaN, -inf only where ref is -inf.
 * Does not record a check. */
th_errors th_compare(const th_case *c, const th_tensors *a, const th_tensors *ref);

/* Compare the outputs o/lse of a (a fused run) against the independent oracle
 * (oracle.h) with th_compare's tolerance. bad = -1 when the oracle ran out of memory.
 * th_run_case calls it on every case of at most ORACLE_WORK_MAX multiply-adds, so a bug
 * shared by sdpa_reference and the driver (they share the visible-key rule) is seen. */
th_errors th_compare_oracle(const th_case *c, const th_tensors *a);

/* The ISA the end-to-end suites run on; main.c loops it over every usable ISA. */
extern sdpa_isa th_isa;

/* Run case c fused (on th_isa) and through the reference; record one check that they
 * agree. label names the case in failure messages. Returns 1 on agreement. */
int th_run_case(const th_case *c, const char *label);

/* The same, with fill(t, c, ctx) overwriting the random inputs of both tensor sets
 * before the calls, and, when keep is non-NULL, the fused tensors handed back for more
 * checks (free them with th_tensors_free). */
typedef void (*th_fill_fn)(th_tensors *t, const th_case *c, void *ctx);
int th_run_case_with(const th_case *c, const char *label, th_fill_fn fill, void *ctx,
                     th_tensors *keep);

/* Format a case as "B=.. Hq=.. ..." into buf. */
const char *th_case_str(const th_case *c, char *buf, size_t n);

/* Number of online CPUs. */
int th_nproc(void);

#endif /* SDPA_TEST_HARNESS_H */
