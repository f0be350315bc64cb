/*
 * suites.h - the test suites main.c runs. Each is a plain function that records its
 * checks through the harness; the ISA-dependent ones run once per usable ISA with
 * th_isa set.
 */
#ifndef SDPA_TEST_SUITES_H
#define SDPA_TEST_SUITES_H

void suite_api(void);     /* validation, helpers (once) */
void suite_seeds(void);   /* numbers printed in the seed notebooks */
void suite_sweep(void);   /* shape sweeps around tile edges */
void suite_layout(void);  /* strided, BSHD, misaligned, guard-before buffers */
void suite_threads(void); /* thread counts and bit-identical results */
void suite_skip(void);    /* causal block skipping counters */
void suite_traps(void);   /* large logits, one-hot, masked rows, NaN */
void suite_broken(void);  /* a deliberately broken kernel must be caught */
void suite_ukernel(void); /* each tile function against double precision */
void suite_features(void);/* masks, lengths, windows, modifiers, dtypes */
void suite_layer(void);   /* sdpa_linear, attention weights, the MHA layer */
void suite_extremes(void);  /* scales, inf/NaN, subnormals, huge T, int64 limits */
void suite_fuzzcases(void); /* the fuzz corpus and regression inputs, replayed */
void suite_soak(void);      /* many host threads at once, bit-identical results */
void suite_alloc(void);     /* every allocation of every entry point failing in turn */
void suite_plan(void);      /* plans on pthreads and shuffled, sdpa_merge */
void suite_schedule(void);  /* the schedule model against real runs, many-core targets */
void suite_bf16(void);      /* the bf16 compute mode under its error model */
void suite_kvcache(void);   /* paged and quantized K/V, sdpa_kv_write */

/* test_extremes.c's NaN and inf scales and codes in quantized, paged K/V, in the bf16
 * compute mode: run by suite_bf16. */
void extremes_kv_special_bf16(void);

/* Set by main.c from --quick: smaller sweeps for slow builds (sanitizers). */
extern int th_quick;

#endif /* SDPA_TEST_SUITES_H */
