/*
 * harness.c - counting, the tests' view of the case library, and the fused-vs-reference
 * and fused-vs-oracle comparisons shared by every test file. See harness.h.
 */
#include "harness.h"

#include "oracle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int th_passed, th_failed, th_verbose, th_oracle_on = 1;
double th_worst_abs, th_worst_rel;
sdpa_isa th_isa = SDPA_ISA_SCALAR;

int th_check(int cond, const char *where, const char *fmt, ...) {
    if (cond) {
        th_passed++;
        return 1;
    }
    th_failed++;
    printf("FAIL %s: ", where);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    return 0;
}

/* ---- buffers and cases --------------------------------------------------------- */

void *th_alloc(size_t bytes, int guard) {
    void *p = sc_alloc(bytes, guard);
    if (!p) {
        fprintf(stderr, "th_alloc: %zu bytes: out of memory\n", bytes);
        abort();
    }
    return p;
}

void th_tensors_make(sc_tensors *t, const sc_case *c) {
    if (sc_tensors_make(t, c) != 0) {
        char desc[512];
        fprintf(stderr, "th_tensors_make: out of memory for [%s]\n",
                th_case_str(c, desc, sizeof desc));
        abort();
    }
    t->desc.isa = th_isa;
}

const char *th_case_str(const sc_case *c, char *buf, size_t n) {
    const int k = snprintf(buf, n, "isa=%s ", sdpa_isa_name(th_isa));
    if (k > 0 && (size_t)k < n)
        sc_case_str(c, buf + k, n - (size_t)k);
    return buf;
}

/* ---- comparisons --------------------------------------------------------------- */

sc_error th_compare(const sc_case *c, const sc_tensors *a, const sc_tensors *ref) {
    sc_error e = {0};
    /* the bf16 compute mode against the reference in the mode: its bound for inputs of
     * at most the case's amplitude (common/case.h, sc_bf16_abs_tol) */
    const int bf16 = c->compute == SDPA_COMPUTE_BF16;
    if (bf16)
        e.abs_tol = sc_bf16_abs_tol(c->amplitude != 0.0f ? (double)c->amplitude : 1.0);
    sc_compare_view(&e, &a->o, &ref->o, a->VB, c->Hq, a->desc.len_q, c->Dv);
    for (size_t i = 0; i < a->elems[4]; i++)
        sc_error_add(&e, a->lse[i], ref->lse[i], SDPA_F32);
    /* the summary reports passing fp32 cases (16-bit outputs carry their own rounding) */
    if (e.bad == 0 && !bf16 && a->o.dtype == SDPA_F32 && e.max_abs > th_worst_abs)
        th_worst_abs = e.max_abs;
    if (e.bad == 0 && !bf16 && a->o.dtype == SDPA_F32 && e.max_rel > th_worst_rel)
        th_worst_rel = e.max_rel;
    return e;
}

/* Work below which th_run_case also checks the fused path against the independent
 * oracle (oracle.h): B Hq Tq Tkv (Dk + Dv) multiply-adds in double, a few milliseconds. */
#define ORACLE_WORK_MAX ((int64_t)1 << 22)

sc_error th_compare_oracle(const sc_case *c, const sc_tensors *a) {
    sc_error e = {0};
    const int64_t Tq = a->desc.len_q, Dv = c->Dv;
    const size_t rows = (size_t)(a->VB * c->Hq * Tq);
    double *o = malloc(rows * (size_t)Dv * sizeof(double)), *lse = malloc(rows * sizeof(double));
    if (!o || !lse || !th_oracle(&a->desc, &a->q, &a->k, &a->v, o, lse, NULL)) {
        free(o);
        free(lse);
        e.bad = -1;
        return e;
    }
    /* the oracle's doubles rounded to fp32, as the reference's outputs are */
    for (int64_t b = 0; b < a->VB; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const size_t row = (size_t)((b * c->Hq + h) * Tq + i);
                for (int64_t d = 0; d < Dv; d++)
                    sc_error_add(&e, sc_get(&a->o, b, h, i, d),
                                 (float)o[row * (size_t)Dv + (size_t)d], a->o.dtype);
                sc_error_add(&e, a->lse[row], (float)lse[row], SDPA_F32);
            }
    free(o);
    free(lse);
    return e;
}

/* Elements of an output buffer that belong to no element of the view must still hold
 * the sentinel: the call wrote nothing outside the output. */
static int64_t gaps_written(const sc_case *c, const sc_tensors *t) {
    if (c->layout != SC_PADDED)
        return 0;
    const size_t es = sc_dtype_size(t->o.dtype);
    const uint32_t sentinel = SC_SENTINEL_F32;
    char *mark = calloc(t->elems[3], 1);
    for (int64_t b = 0; b < t->VB; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < t->desc.len_q; i++)
                memset(mark + (b * t->o.stride_b + h * t->o.stride_h + i * t->o.stride_t), 1,
                       (size_t)c->Dv);
    int64_t bad = 0;
    for (size_t e = 0; e < t->elems[3]; e++) {
        const char *x = (const char *)t->o.data + e * es;
        const int intact = es == 4 ? memcmp(x, &sentinel, sizeof sentinel) == 0
                                   : *(const uint16_t *)(const void *)x == SC_SENTINEL_16;
        if (!mark[e] && !intact)
            bad++;
    }
    free(mark);
    return bad;
}

int th_run_case(const sc_case *c, const char *label) {
    return th_run_case_with(c, label, NULL, NULL, NULL);
}

int th_run_case_with(const sc_case *c, const char *label, th_fill_fn fill, void *ctx,
                     sc_tensors *keep) {
    sc_tensors f, r;
    th_tensors_make(&f, c);
    th_tensors_make(&r, c);
    if (fill) {
        fill(&f, c, ctx);
        fill(&r, c, ctx);
    }
    char desc[512];
    const sdpa_status sf = sdpa_forward(&f.desc, &f.q, &f.k, &f.v, &f.o, f.lse);
    const sdpa_status sr = sdpa_reference(&r.desc, &r.q, &r.k, &r.v, &r.o, r.lse);
    int ok;
    if (sf != SDPA_OK || sr != SDPA_OK) {
        ok = th_check(0, "th_run_case", "%s [%s]: status fused=%s reference=%s", label,
                      th_case_str(c, desc, sizeof desc), sdpa_strerror(sf), sdpa_strerror(sr));
    } else {
        const sc_error e = th_compare(c, &f, &r);
        const int64_t gaps = gaps_written(c, &f);
        ok = th_check(e.bad == 0 && gaps == 0, "th_run_case",
                      "%s [%s]: max_abs=%.3g max_rel=%.3g bad=%lld gaps_written=%lld", label,
                      th_case_str(c, desc, sizeof desc), e.max_abs, e.max_rel,
                      (long long)e.bad, (long long)gaps);
        const double work = (double)f.VB * (double)c->Hq * (double)f.desc.len_q *
                            (double)f.desc.len_kv * (double)(c->Dk + c->Dv);
        /* the oracle reads plain views only; cache cases (paged, quantized) meet the
         * reference, whose dequantization is its own (src/reference.c) */
        const int cache = f.desc.pages.block_table || f.desc.k_scales.data || f.desc.v_scales.data;
        if (th_oracle_on && work <= (double)ORACLE_WORK_MAX && !cache) {
            const sc_error eo = th_compare_oracle(c, &f);
            ok &= th_check(eo.bad == 0, "th_run_case",
                           "%s [%s]: against the independent oracle max_abs=%.3g max_rel=%.3g "
                           "bad=%lld", label, th_case_str(c, desc, sizeof desc), eo.max_abs,
                           eo.max_rel, (long long)eo.bad);
        }
        if (th_verbose)
            printf("  ok %s [%s] max_abs=%.3g max_rel=%.3g\n", label,
                   th_case_str(c, desc, sizeof desc), e.max_abs, e.max_rel);
    }
    if (keep)
        *keep = f;
    else
        sc_tensors_free(&f);
    sc_tensors_free(&r);
    return ok;
}

int th_nproc(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
