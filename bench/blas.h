/*
 * blas.h - the unfused BLAS baseline (bench/blas.c), built into the benchmark only with
 * `make bench BLAS=openblas`: attention the way a user writes it with a BLAS and no fused
 * kernel. It is a yardstick for the fused path, not part of libsdpa.
 */
#ifndef SDPA_BENCH_BLAS_H
#define SDPA_BENCH_BLAS_H

#include "shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One call: for each (b, h) and block of SB_BLAS_ROWS query rows, S = scale Q K^T with
 * cblas_sgemm over the keys the block's last row sees (causal: the keys after them are
 * never computed), -inf masking of the keys each row of the block must not see, a row
 * softmax with libm expf, O = P V with cblas_sgemm, O /= row sums. OpenMP over the
 * blocks (threads, 0 = OpenMP's default), single-threaded BLAS inside each. Scratch is
 * threads x SB_BLAS_ROWS x Tkv floats. Writes t->o. Plain fp32 attention only: the
 * caller runs it on cases sb_is_plain accepts. */
sdpa_status sb_run_blas(const sc_tensors *t, int threads);
/* What it links against, for reports: "OpenBLAS 0.3.21 ..." from openblas_get_config. */
const char *sb_blas_name(void);

/* Query rows per block, as the best hand-written unfused version measured on the
 * project's machine (docs/PERFORMANCE.md, "Bench and tools measurements"). */
#define SB_BLAS_ROWS 256

#ifdef __cplusplus
}
#endif

#endif /* SDPA_BENCH_BLAS_H */
