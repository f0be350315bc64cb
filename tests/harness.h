/*
 * harness.h - the one small test harness every test file shares.
 *
 * It counts checks, prints failures with enough context to reproduce them, and runs one
 * attention case (common/case.h builds it) through the fused path and the reference and
 * compares them, and the fused path with the independent oracle, under the tolerance
 * rule of common/case.h. It is not a framework: suites are plain functions listed in
 * main.c.
 */
#ifndef SDPA_TEST_HARNESS_H
#define SDPA_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/case.h"
#include "../src/internal.h"
#include "sdpa.h"

/* ---- counting ------------------------------------------------------------------ */

extern int th_passed, th_failed;
extern int th_verbose;
/* 0 under --no-oracle: th_run_case skips its comparison with the oracle (runs whose
 * job is another check, memcheck or an emulated CPU, of the same portable C that the
 * native runs compare with the oracle). */
extern int th_oracle_on;

/* Record one check; on failure print "FAIL <where>: <message>". Returns cond. */
int th_check(int cond, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define CHECK(cond, ...) th_check(!!(cond), __func__, __VA_ARGS__)

/* ---- buffers and cases --------------------------------------------------------- */

/* sc_alloc, aborting when out of memory (a test has no use for that path). Free with
 * sc_free. */
void *th_alloc(size_t bytes, int guard);

/* The ISA the end-to-end suites run on; main.c loops it over every usable ISA. */
extern sdpa_isa th_isa;

/* sc_tensors_make with desc.isa = th_isa, aborting when out of memory. */
void th_tensors_make(sc_tensors *t, const sc_case *c);

/* "isa=<th_isa> " and the case (sc_case_str) into buf. */
const char *th_case_str(const sc_case *c, char *buf, size_t n);

/* ---- comparisons --------------------------------------------------------------- */

/* Largest errors of the th_compare calls that found no element out of tolerance, for
 * the final summary. */
extern double th_worst_abs, th_worst_rel;

/* Outputs o and lse of a (fused) against those of ref, both built from c, under the
 * tolerance rule (common/case.h, sc_close). Does not record a check. */
sc_error th_compare(const sc_case *c, const sc_tensors *a, const sc_tensors *ref);

/* Outputs o and lse of a (a fused run) against the independent oracle (oracle.h) under
 * the same rule. bad = -1 when the oracle ran out of memory. th_run_case calls it on
 * every case of at most ORACLE_WORK_MAX multiply-adds, so a bug shared by
 * sdpa_reference and the driver (they share the visible-key rule) is seen. */
sc_error th_compare_oracle(const sc_case *c, const sc_tensors *a);

/* Run case c fused (on th_isa) and through the reference; record one check that they
 * agree. label names the case in failure messages. Returns 1 on agreement. */
int th_run_case(const sc_case *c, const char *label);

/* The same, with fill(t, c, ctx) overwriting the random inputs of both tensor sets
 * before the calls, and, when keep is non-NULL, the fused tensors handed back for more
 * checks (free them with sc_tensors_free). */
typedef void (*th_fill_fn)(sc_tensors *t, const sc_case *c, void *ctx);
int th_run_case_with(const sc_case *c, const char *label, th_fill_fn fill, void *ctx,
                     sc_tensors *keep);

/* Number of online CPUs. */
int th_nproc(void);

#endif /* SDPA_TEST_HARNESS_H */
