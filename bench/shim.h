/*
 * shim.h - the plain-C side of the benchmark, shared by bench/bench.cc (Google Benchmark)
 * and tools/sdpa-run.c: the named shape suite, problems filled with deterministic data
 * (every descriptor feature sdpa-run has a flag for: 16-bit storage, windows, softcap,
 * ALiBi, sinks, key lengths, masks, top-left causal), the flop and byte counts every
 * report uses, the calls into libsdpa, the correctness check against sdpa_reference, and
 * the same for the projection GEMM (sdpa_linear).
 *
 * It is not a benchmark (no timing loops, no statistics; those live in bench.cc and
 * sdpa-run.c) and it uses only the public API, the way a user's program would. Symbols
 * are prefixed sb_ (sdpa bench) so they are never mistaken for the library's.
 */
#ifndef SDPA_BENCH_SHIM_H
#define SDPA_BENCH_SHIM_H

#include <stdint.h>

#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One attention problem, in DESIGN.md's names. The fields after causal are the
 * descriptor's features; their zero value is off, so a plain shape names none of them. */
typedef struct sb_shape {
    const char *name;
    int64_t B, Hq, Hkv, Tq, Tkv, Dk, Dv;
    int causal;             /* an sdpa_causal value */
    sdpa_dtype dtype;       /* storage of Q, K, V and O alike */
    int window;             /* 1: sliding window of window_left, window_right keys */
    int64_t window_left, window_right;
    float softcap;          /* > 0: logit soft-capping */
    int alibi;              /* 1: ALiBi, slope of head h = 2^(-8 (h + 1) / Hq) */
    int sinks;              /* 1: a sink logit per head, sb_sink_logit(h) */
    sdpa_mask_kind mask;    /* the fixed pattern of sb_mask_value, broadcast over B, H */
    const int64_t *kv_lens; /* [B] valid keys per batch entry, or NULL (all Tkv); the
                               owner of the shape keeps the array alive */
} sb_shape;

/* The named suite, in the order reports list it. */
extern const sb_shape sb_suite[];
extern const int sb_suite_len;
/* The suite shape called name, or NULL. */
const sb_shape *sb_find_shape(const char *name);

/* The sink logit of head h under sinks: (h mod 4) - 1, so -1, 0, 1 or 2. */
float sb_sink_logit(int64_t h);
/* The mask pattern (sb_shape.mask), one [Tq, Tkv] matrix shared by every batch entry and
 * head (stride 0): key j is hidden from row i for about 10% of the (i, j) pairs, picked
 * by a hash of (i, j). Boolean: 0 there, 1 elsewhere. Additive (fp32): -inf there, and
 * elsewhere a bias in [-0.5, 0.5) from the same hash. Returns the additive value. */
float sb_mask_value(const sb_shape *s, int64_t i, int64_t j);
/* Keys of batch entry b: kv_lens[b], or Tkv. */
int64_t sb_kv_len(const sb_shape *s, int64_t b);

/* Scores the rows see, summed over every row of every head: row i of entry b sees the
 * keys j < Tkv_b that pass causal (j <= d(i)) and the window (d(i) - left <= j <= d(i) +
 * right), d(i) = i + Tkv_b - Tq (bottom-right) or i (top-left); counted row by row. Keys
 * that only an explicit mask hides count as seen: the fused path computes their scores
 * before it masks them. */
double sb_visible_scores(const sb_shape *s);
/* Flops of one call: 2*(Dk + Dv) per visible score (QK^T: Dk multiply-adds, PV: Dv
 * multiply-adds). For Dk == Dv without causal, window or key lengths this is the usual
 * 4*B*Hq*Tq*Tkv*D. The softmax (exp, max, sums) is not counted. */
double sb_flops(const sb_shape *s);
/* Bytes of K and V one call must read at least: per batch entry and K/V head, the rows
 * some query row sees, once, at the storage size (4 bytes, 2 for f16/bf16). What bounds
 * decode, where the flops per byte are few. */
double sb_kv_bytes(const sb_shape *s);
/* 1 for decode-like shapes (a few query rows against a long cache), where K/V bytes per
 * second, not flops, is the figure that matters. */
int sb_is_decode(const sb_shape *s);
/* 1 for a shape with none of the features (fp32, causal none or bottom-right): what the
 * BLAS baseline computes. */
int sb_is_plain(const sb_shape *s);
/* The shape's features in words (", f16, window (511,0), ..."; "" when plain), in buf. */
const char *sb_features_str(const sb_shape *s, char *buf, int n);

/* Bytes per element of a dtype. */
int sb_elem_size(sdpa_dtype t);

/* A problem: contiguous [B,H,T,D] tensors of s.dtype with deterministic inputs in
 * [-1, 1) (rounded to the dtype), the feature data the shape asks for, and an output
 * buffer every run writes (touched once at setup). */
typedef struct sb_problem {
    sb_shape s;
    void *q, *k, *v, *o;   /* elements of s.dtype */
    void *mask;            /* [Tq, Tkv] uint8 or fp32 (sb_mask_value), or NULL */
    float *slopes, *sinks; /* [Hq], or NULL */
    sdpa_tensor tq, tk, tv, to;
} sb_problem;

/* Allocates and fills; returns 0, or -1 when out of memory (nothing to free then). */
int sb_problem_init(sb_problem *p, const sb_shape *s);
void sb_problem_free(sb_problem *p);
/* The descriptor of the whole problem (isa and threads 0). */
sdpa_desc sb_desc(const sb_problem *p);

/* One fused call on a forced ISA (SDPA_ISA_AUTO: the process-wide choice) and thread
 * count (0: OpenMP's default). stats may be NULL. */
sdpa_status sb_run_fused(const sb_problem *p, sdpa_isa isa, int threads, sdpa_stats *stats);
/* One call of the naive reference (single-threaded, double accumulation). */
sdpa_status sb_run_reference(const sb_problem *p);

/* Part of the output checked when the whole is too costly for the reference:
 * query rows [i0, i0 + rows) of batch entry b, query head h. */
typedef struct sb_piece {
    int64_t b, h, i0, rows;
} sb_piece;

enum { SB_MAX_PIECES = 6 };

/* The reference's answer for a problem's output, whole or in pieces. */
typedef struct sb_expect {
    int full;         /* 1: ref holds the whole output; 0: the pieces, concatenated */
    int npieces;
    sb_piece piece[SB_MAX_PIECES];
    int dropped;      /* candidate pieces left out: no exact sub-problem (sb_piece_exact) */
    float *ref;       /* expected values (fp32 whatever the dtype), row-major, Dv per row */
    double seconds;   /* time the reference took for it */
    double flops;     /* flops (sb_flops's count) of what it computed */
} sb_expect;

/* Up to this many reference flops, the check covers the whole output; above it, pieces:
 * the first, middle and last SB_SLICE_ROWS query rows of the first and of the last
 * (batch, head), those of them that are exact sub-problems. The reference runs at ~4
 * GFLOP/s on this project's machine (double, one thread), so a whole check stays around
 * a second. 64 rows span at least two query blocks of every table (Br is 32 in the
 * scalar table) and, at the middle, a block edge. */
#define SB_FULL_CHECK_FLOPS 4e9
#define SB_SLICE_ROWS 64

/* 1 when the piece is a problem of its own for the reference, the same answer the whole
 * problem gives for those rows; 0 when no sub-problem is exact. A piece keeps its rows'
 * diagonal d(i), which causal, the window and ALiBi measure from: as rows [i0, i0+rows)
 * against keys [0, end) under bottom-right alignment, with end = i0 + rows + (Tkv_b - Tq)
 * (top-left: i0 + rows), exact when every key the rows see is below end and end <= Tkv_b
 * (always so for the last rows under bottom-right, for every piece under bottom-right
 * causal); or, for a top-left prefix (i0 = 0), as top-left rows against all Tkv_b keys.
 * Without causal, window and ALiBi the diagonal does not matter and every piece is
 * exact. So a non-causal window reaching right of the diagonal, non-causal ALiBi, and
 * top-left with Tq > Tkv_b leave only some pieces exact (suffixes, or prefixes). */
int sb_piece_exact(const sb_problem *p, const sb_piece *pc);
/* The reference on one exact piece: writes rows x Dv floats to out (zeros when no row
 * of the piece sees a key). SDPA_ERR_BAD_ARGUMENT when the piece is not exact. */
sdpa_status sb_reference_piece(const sb_problem *p, const sb_piece *pc, float *out);

/* Runs the reference on the whole problem or on its exact pieces. Returns SDPA_OK or the
 * reference's error (nothing to free then). */
sdpa_status sb_expect_make(sb_expect *e, const sb_problem *p);
void sb_expect_free(sb_expect *e);
/* "whole output" or e.g. "slice: rows 0-63, 992-1055, 1984-2047 of (b,h) = (0,0), (0,31)",
 * followed by what was left out and why when some piece had no exact sub-problem. */
const char *sb_expect_scope(const sb_expect *e, const sb_shape *s, char *buf, int n);

/* Largest errors of p->o against the expectation and how many elements fail
 * |o - r| <= 1e-5 + rel |r|, rel = 1e-4 (DESIGN.md section 6) plus, for a 16-bit output,
 * one unit in its last place (2^-10 f16, 2^-7 bf16: the output's own rounding, as in
 * tests/harness.c); a NaN or inf fails. max_rel is over elements with |r| > 1e-3, where a
 * relative error means something. */
typedef struct sb_error {
    double max_abs, max_rel;
    int64_t bad, checked;
} sb_error;
sb_error sb_compare(const sb_expect *e, const sb_problem *p);
/* The relative part of that tolerance for an output dtype. */
double sb_rel_tol(sdpa_dtype t);

/* ---- the projection GEMM (issue 8): y = x W^T + b through sdpa_linear ------------- */

typedef struct sb_linear_shape {
    const char *name;
    int64_t M, K, N; /* rows, in_features, out_features */
    int bias;
} sb_linear_shape;

/* The GEMM suite: the 2048 x 4096 -> 4096 projection (with bias) of issue 8. */
extern const sb_linear_shape sb_linear_suite[];
extern const int sb_linear_suite_len;

typedef struct sb_linear {
    sb_linear_shape s;
    float *x, *w, *b, *y; /* [M, K], [N, K], [N] or NULL, [M, N]; inputs in [-1, 1) */
} sb_linear;

int sb_linear_init(sb_linear *l, const sb_linear_shape *s);
void sb_linear_free(sb_linear *l);
/* 2 M K N (the bias's M N adds are not counted). */
double sb_linear_flops(const sb_linear_shape *s);
sdpa_status sb_run_linear(const sb_linear *l, sdpa_isa isa, int threads);
/* Checks l->y against a double-precision product on rows 0, M/2, M-1 (every column) and
 * columns 0, N/2, N-1 (every row), within the fp32 dot-product bound (K + 3) u sum_k
 * |x_k w_k| (u = 2^-24, as tests/test_layer.c): a wrong row or column is off by ~|y|,
 * far beyond it. max_rel is over elements with |r| > 1e-3. */
sb_error sb_linear_check(const sb_linear *l);

/* Seconds on a monotonic clock. */
double sb_now(void);
/* CPUs this process may run on (its affinity mask), at least 1. */
int sb_nproc(void);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_BENCH_SHIM_H */
