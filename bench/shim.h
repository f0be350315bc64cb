/*
 * shim.h - the plain-C side of the benchmark, shared by bench/bench.cc (Google Benchmark)
 * and tools/sdpa-run.c: the named shape suite, the flop and byte counts every report
 * uses, the calls it times, the check against sdpa_reference (whole, or exact
 * sub-problems when the whole would take the reference too long), the same for the
 * projection GEMM (sdpa_linear), and the ISAs to run, from the library's registry.
 *
 * It is not a benchmark (no timing loops, no statistics: bench.cc and sdpa-run.c) and
 * builds no case itself: cases, their data and the tolerance rule are common/case.h's.
 * The calls it times go through the public API, the way a user's program makes them.
 * Symbols are prefixed sb_ (sdpa bench) so they are never mistaken for the library's.
 */
#ifndef SDPA_BENCH_SHIM_H
#define SDPA_BENCH_SHIM_H

#include <stdint.h>

#include "../common/case.h"
#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A named case of the suite. Its buffers have no guard pages; those of 2 MiB and more
 * are advised onto transparent huge pages (SC_GUARD_HUGE), as README advises engines to
 * keep a KV cache, so a row's time does not hang on the host's TLB walks over 4 KiB pages
 * (docs/PERFORMANCE.md, "Paged decode in step"). It uses no random length mode
 * (SC_LENS_NONE): the counts below assume that, and so do sdpa-run's cases. */
typedef struct sb_shape {
    const char *name;
    int best_isa_only; /* the default suite times it on the best ISA only */
    int full_only;     /* only the full suite times it (the default stays in its budget) */
    sc_case c;
} sb_shape;

/* The suite, in the order reports list it. */
extern const sb_shape sb_suite[];
extern const int sb_suite_len;
/* The suite shape called name, or NULL. */
const sb_shape *sb_find_shape(const char *name);

/* Scores the rows see, summed over every row of every head: row i of entry b sees the
 * keys j < Tkv_b that pass causal (j <= d(i)) and the window (d(i) - left <= j <= d(i) +
 * right), d(i) = i + Tkv_b - Tq (bottom-right) or i (top-left); counted row by row. Keys
 * that only an explicit mask hides count as seen: the fused path computes their scores
 * before it masks them. */
double sb_visible_scores(const sc_case *c);
/* Flops of one call: 2*(Dk + Dv) per visible score (QK^T: Dk multiply-adds, PV: Dv
 * multiply-adds). For Dk == Dv without causal, window or key lengths this is the usual
 * 4*B*Hq*Tq*Tkv*D. The softmax (exp, max, sums) is not counted. */
double sb_flops(const sc_case *c);
/* Bytes of K and V one call must read at least: per batch entry and K/V head, the rows
 * some query row sees, once, at their storage size (4 bytes an element for fp32, 2 for
 * f16 and bf16, 1 for int8 and fp8, 1/2 for int4), plus what a KV cache reads beside
 * them: the scales of those rows (a per-head or per-tensor scale once per call) and the
 * block-table entries of their pages. What bounds decode, where the flops per byte are
 * few. */
double sb_kv_bytes(const sc_case *c);
/* 1 for decode-like shapes (a few query rows against a long cache), where K/V bytes per
 * second, not flops, is the figure that matters. */
int sb_is_decode(const sc_case *c);
/* 1 for a KV cache as engines keep it: K or V paged or quantized (common/case.h). */
int sb_is_kv_cache(const sc_case *c);
/* 1 for a case with none of the features (fp32, contiguous K/V, causal none or
 * bottom-right, any layout and scale): what the BLAS baseline computes. */
int sb_is_plain(const sc_case *c);
/* "B=.. Hq=.. Hkv=.. Tq=.. Tkv=.. Dk=.. Dv=.." and the features ("causal, f16, window
 * (511,0), ...", a KV cache's storage: "Q/O fp32, K/V int8 (fp32 scales, one per token
 * and head), 16-token pages") in buf. */
const char *sb_case_str(const sc_case *c, char *buf, int n);

/* One fused call on a built case, on a forced ISA (SDPA_ISA_AUTO: the process-wide
 * choice) and thread count (0: OpenMP's default), without lse. stats may be NULL. */
sdpa_status sb_run_fused(const sc_tensors *t, sdpa_isa isa, int threads, sdpa_stats *stats);
/* One call of the naive reference (single-threaded, double accumulation). */
sdpa_status sb_run_reference(const sc_tensors *t, sdpa_stats *stats);

/* Part of the output checked when the whole is too costly for the reference:
 * query rows [i0, i0 + rows) of batch entry b, query head h. */
typedef struct sb_piece {
    int64_t b, h, i0, rows;
} sb_piece;

enum { SB_MAX_PIECES = 6 };

/* The reference's answer for a case's output, whole or in pieces. */
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
 * (batch, head), those of them that are exact sub-problems. 4 GFLOP is about a second of
 * the reference (double, one thread; docs/PERFORMANCE.md, "Bench and tools
 * measurements"). 64 rows span at least two query blocks of every table (Br is 32 in
 * the scalar table) and, at the middle, a block edge. */
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
 * top-left with Tq > Tkv_b leave only some pieces exact (suffixes, or prefixes). Dropout
 * (keyed by absolute positions) and query lengths make no piece exact. */
int sb_piece_exact(const sc_tensors *t, const sb_piece *pc);
/* The reference on one exact piece: writes rows x Dv floats to out (zeros when no row
 * of the piece sees a key). SDPA_ERR_BAD_ARGUMENT when the piece is not exact. */
sdpa_status sb_reference_piece(const sc_tensors *t, const sb_piece *pc, float *out,
                               sdpa_stats *stats);

/* Runs the reference on the whole case or on its exact pieces. Returns SDPA_OK or the
 * reference's error (nothing to free then). */
sdpa_status sb_expect_make(sb_expect *e, const sc_tensors *t);
void sb_expect_free(sb_expect *e);
/* "whole output" or e.g. "slice: rows 0-63, 992-1055, 1984-2047 of (b,h) = (0,0), (0,31)",
 * followed by what was left out and why when some piece had no exact sub-problem. */
const char *sb_expect_scope(const sb_expect *e, const sc_tensors *t, char *buf, int n);

/* t's output against the expectation, under the tolerance rule (common/case.h). */
sc_error sb_compare(const sb_expect *e, const sc_tensors *t);

/* ---- the projection GEMM: y = x W^T + b through sdpa_linear ---------------------- */

typedef struct sb_linear_shape {
    const char *name;
    int64_t M, K, N; /* rows, in_features, out_features */
    int bias;
} sb_linear_shape;

/* The GEMM suite: the 2048 x 4096 -> 4096 projection (with bias) of a multi-head layer
 * (sdpa_mha_forward) at a 4096-wide model and 2048 tokens. */
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
sc_error sb_linear_check(const sb_linear *l);

/* ---- ISAs, clocks and cores ------------------------------------------------------ */

/* The ISAs this build has and this CPU runs, in the registry's order of preference (the
 * best first, scalar last): up to max of them in out; returns how many. */
int sb_usable_isas(sdpa_isa *out, int max);
/* The sdpa_compute modes (a bit per value) whose tiles isa's own table provides; the
 * others it inherits from its base table (the ISA registry, src/dispatch.c). */
unsigned sb_isa_own(sdpa_isa isa);
/* Seconds on a monotonic clock. */
double sb_now(void);
/* CPUs this process may run on (its affinity mask), at least 1. */
int sb_nproc(void);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_BENCH_SHIM_H */
