/*
 * shim.h - the plain-C side of the benchmark, shared by bench/bench.cc (Google Benchmark)
 * and tools/sdpa-run.c: the named shape suite, problems filled with deterministic data,
 * the flop and byte counts every report uses, the calls into libsdpa, and the
 * correctness check against sdpa_reference.
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

/* One attention problem size, in DESIGN.md's names. */
typedef struct sb_shape {
    const char *name;
    int64_t B, Hq, Hkv, Tq, Tkv, Dk, Dv;
    int causal; /* 0 or SDPA_CAUSAL_BOTTOM_RIGHT */
} sb_shape;

/* The named suite of issue 3, in the order reports list it. */
extern const sb_shape sb_suite[];
extern const int sb_suite_len;
/* The suite shape called name, or NULL. */
const sb_shape *sb_find_shape(const char *name);

/* Scores a query row sees, summed over every row of every head: B*Hq*Tq*Tkv without a
 * mask; under bottom-right causal, row i sees min(Tkv, max(0, i + Tkv - Tq + 1)) keys. */
double sb_visible_scores(const sb_shape *s);
/* Flops of one call: 2*(Dk + Dv) per visible score (QK^T: Dk multiply-adds, PV: Dv
 * multiply-adds). For Dk == Dv without a mask this is the usual 4*B*Hq*Tq*Tkv*D. The
 * softmax (exp, max, sums) is not counted. */
double sb_flops(const sb_shape *s);
/* Bytes of K and V one call must read at least: every K/V row once,
 * B*Hkv*Tkv*(Dk + Dv)*4. What bounds decode, where the flops per byte are few. */
double sb_kv_bytes(const sb_shape *s);
/* 1 for decode-like shapes (a few query rows against a long cache), where K/V bytes per
 * second, not flops, is the figure that matters. */
int sb_is_decode(const sb_shape *s);

/* A problem: contiguous [B,H,T,D] fp32 tensors with deterministic inputs in [-1, 1),
 * and an output buffer every run writes (touched once at setup). */
typedef struct sb_problem {
    sb_shape s;
    float *q, *k, *v, *o;
    sdpa_tensor tq, tk, tv, to;
} sb_problem;

/* Allocates and fills; returns 0, or -1 when out of memory (nothing to free then). */
int sb_problem_init(sb_problem *p, const sb_shape *s);
void sb_problem_free(sb_problem *p);

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
    float *ref;       /* expected values, row-major, Dv per row */
    double seconds;   /* time the reference took for it */
    double flops;     /* flops (sb_flops's count) of what it computed */
} sb_expect;

/* Up to this many reference flops, the check covers the whole output; above it, pieces:
 * the first, middle and last SB_SLICE_ROWS query rows of the first and of the last
 * (batch, head). The reference runs at ~4 GFLOP/s on this project's machine (double, one
 * thread), so a whole check stays around a second. 64 rows span at least two query
 * blocks of every table (Br is 32 in the scalar table) and, at the middle, a block edge. */
#define SB_FULL_CHECK_FLOPS 4e9
#define SB_SLICE_ROWS 64

/* The reference on one piece, as a problem of its own: rows [i0, i0 + rows) against
 * keys [0, end), end = the keys the piece's last row sees. Writes rows x Dv floats to
 * out (zeros when end is 0: no row of the piece sees a key). */
sdpa_status sb_reference_piece(const sb_problem *p, const sb_piece *pc, float *out);

/* Runs the reference on the whole problem or on its pieces. Returns SDPA_OK or the
 * reference's error (nothing to free then). */
sdpa_status sb_expect_make(sb_expect *e, const sb_problem *p);
void sb_expect_free(sb_expect *e);
/* "whole output" or e.g. "slice: rows 0-63, 992-1055, 1984-2047 of (b,h) = (0,0), (0,31)". */
const char *sb_expect_scope(const sb_expect *e, char *buf, int n);

/* Largest errors of p->o against the expectation and how many elements fail
 * |o - r| <= 1e-5 + 1e-4 |r| (DESIGN.md section 6; a NaN or inf fails). max_rel is over
 * elements with |r| > 1e-3, where a relative error means something. */
typedef struct sb_error {
    double max_abs, max_rel;
    int64_t bad, checked;
} sb_error;
sb_error sb_compare(const sb_expect *e, const sb_problem *p);

/* Seconds on a monotonic clock. */
double sb_now(void);
/* CPUs this process may run on (its affinity mask), at least 1. */
int sb_nproc(void);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_BENCH_SHIM_H */
