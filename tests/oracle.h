/*
 * oracle.h - a second, independent reference for the tests: attention written from the
 * documentation in include/sdpa.h alone, in double precision.
 *
 * sdpa_reference shares the validation, the per-sequence geometry (sdpa_sequence) and
 * the visible-key rule (sdpa_row_range) with the fused driver, so a bug in those would
 * hide in both. This oracle shares none of it: it decides visibility per (row i, key j)
 * straight from the descriptor's fields, reads the views through their strides, and
 * computes the output, lse and the attention weights of every row. It does not validate
 * (call it only on descriptors the library accepted) and it is slow (O(Tq Tkv) per head,
 * no tiling). The dropout decision is the documented Philox stream (src/philox.h): that
 * function is the definition of which weights drop, not a helper of the driver.
 */
#ifndef SDPA_TEST_ORACLE_H
#define SDPA_TEST_ORACLE_H

#include <stdint.h>

#include "sdpa.h"

/* Results in double, laid out densely: o [VB, Hq, Tq, Dv], lse [VB, Hq, Tq] and, when w is
 * non-NULL, the weights [VB, Hq, Tq, Tkv] (VB = 1 under packed varlen, else batch; Tq,
 * Tkv the descriptor's len_q, len_kv). Padding rows and rows no sequence owns get
 * zeros, lse -inf and zero weights. Returns 0 when out of memory. */
int th_oracle(const sdpa_desc *d, const sdpa_tensor *q, const sdpa_tensor *k,
              const sdpa_tensor *v, double *o, double *lse, double *w);

/* Whether row i of sequence b sees key j (both counted within the sequence), from the
 * descriptor alone: length, causal alignment, window, boolean mask or additive -inf. */
int th_oracle_visible(const sdpa_desc *d, int64_t b, int64_t h, int64_t i, int64_t j);

#endif /* SDPA_TEST_ORACLE_H */
