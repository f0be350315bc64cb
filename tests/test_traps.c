/*
 * test_traps.c - inputs built to catch the classic attention bugs: a missing max
 * subtraction (logits near +-100), a one-hot softmax, rows with no visible key, NaN that
 * must propagate only to the rows that see it (including through V on the causal
 * diagonal), and a deliberately broken kernel that the checks must notice.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Scores near +-target: q = 1.5, k = 1.5 + small noise, scale = target / (2.25 Dk). */
static void fill_large_logits(sc_tensors *t, const sc_case *c, void *ctx) {
    const float sign = *(const float *)ctx;
    uint64_t rng = 7;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                float *q = sc_at(&t->q, b, h, i);
                for (int64_t d = 0; d < c->Dk; d++)
                    q[d] = sign * 1.5f;
            }
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hkv; h++)
            for (int64_t j = 0; j < c->Tkv; j++) {
                float *k = sc_at(&t->k, b, h, j);
                for (int64_t d = 0; d < c->Dk; d++)
                    k[d] = 1.5f + 0.02f * sc_rand_float(&rng);
            }
}

static void test_large_logits(void) {
    static const float signs[] = {1.0f, -1.0f};
    for (int s = 0; s < 2; s++)
        for (int causal = 0; causal < 2; causal++) {
            /* scale puts the scores at 95..100 (or -100..-95): exp overflows float without
             * the max subtraction, and underflows to a zero denominator with it missing
             * in the other direction */
            sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 100, .Tkv = 150, .Dk = 44, .Dv = 32,
                         .causal = causal, .scale = 98.0f / (2.25f * 44.0f), .seed = 12};
            float sign = signs[s];
            th_run_case_with(&c, sign > 0 ? "logits ~ +98" : "logits ~ -98", fill_large_logits,
                             &sign, NULL);
        }
}

/* Row i's query points at key (i * 7) % Tkv with a margin of 200 in the logits, so the
 * softmax is one-hot to float precision and the output is that key's value row. */
static void fill_one_hot(sc_tensors *t, const sc_case *c, void *ctx) {
    (void)ctx;
    for (int64_t j = 0; j < c->Tkv; j++) {
        float *k = sc_at(&t->k, 0, 0, j);
        memset(k, 0, (size_t)c->Dk * sizeof(float));
        k[j % c->Dk] = 1.0f;
    }
    for (int64_t i = 0; i < c->Tq; i++) {
        float *q = sc_at(&t->q, 0, 0, i);
        memset(q, 0, (size_t)c->Dk * sizeof(float));
        q[((i * 7) % c->Tkv) % c->Dk] = 200.0f;
    }
}

static void test_one_hot(void) {
    sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 70, .Tkv = 70, .Dk = 80, .Dv = 20,
                 .scale = 1.0f, .seed = 13};
    sc_tensors out;
    if (!th_run_case_with(&c, "one-hot rows", fill_one_hot, NULL, &out))
        return;
    int exact = 1;
    for (int64_t i = 0; i < c.Tq; i++) {
        const float *o = sc_at(&out.o, 0, 0, i), *v = sc_at(&out.v, 0, 0, (i * 7) % c.Tkv);
        for (int64_t d = 0; d < c.Dv; d++)
            exact &= fabsf(o[d] - v[d]) <= 1e-6f;
    }
    CHECK(exact, "one-hot rows must reproduce the chosen value rows");
    sc_tensors_free(&out);
}

/* Tq > Tkv under causal: the first Tq - Tkv rows see no key and must give exact zeros
 * and lse = -inf; the rest are ordinary. */
static void test_masked_rows(void) {
    static const int64_t shapes[][2] = {{65, 7}, {200, 64}, {130, 1}};
    for (int s = 0; s < N(shapes); s++) {
        sc_case c = {.B = 2, .Hq = 2, .Hkv = 1, .Tq = shapes[s][0], .Tkv = shapes[s][1],
                     .Dk = 16, .Dv = 16, .causal = 1, .seed = 14};
        sc_tensors out;
        if (!th_run_case_with(&c, "fully masked rows", NULL, NULL, &out))
            continue;
        int ok = 1;
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t h = 0; h < c.Hq; h++)
                for (int64_t i = 0; i < c.Tq - c.Tkv; i++) {
                    const float *o = sc_at(&out.o, b, h, i);
                    for (int64_t d = 0; d < c.Dv; d++)
                        ok &= o[d] == 0.0f && !signbit(o[d]);
                    ok &= isinf(out.lse[(b * c.Hq + h) * c.Tq + i]) &&
                          out.lse[(b * c.Hq + h) * c.Tq + i] < 0;
                }
        CHECK(ok, "Tq=%lld Tkv=%lld: rows with no visible key must be +0 with lse -inf",
              (long long)c.Tq, (long long)c.Tkv);
        sc_tensors_free(&out);
    }
}

typedef struct nan_at {
    int which;  /* 0: K row, 1: V row, 2: Q row */
    int64_t row;
} nan_at;

static void fill_nan(sc_tensors *t, const sc_case *c, void *ctx) {
    const nan_at *n = ctx;
    const sdpa_tensor *v = n->which == 0 ? &t->k : n->which == 1 ? &t->v : &t->q;
    const int64_t D = n->which == 1 ? c->Dv : c->Dk;
    sc_at(v, 0, 0, n->row)[D / 2] = NAN;
}

/* NaN in one K or V row: exactly the rows that see that key become NaN. Under causal,
 * the rows before it (some of which share its tile on the diagonal) stay finite. */
static void test_nan(void) {
    for (int which = 0; which < 3; which++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 100, .Tkv = 100, .Dk = 24, .Dv = 24,
                         .causal = causal, .seed = 15};
            nan_at at = {which, 37};
            sc_tensors out;
            const char *names[] = {"NaN in a K row", "NaN in a V row", "NaN in a Q row"};
            if (!th_run_case_with(&c, names[which], fill_nan, &at, &out))
                continue;
            int ok = 1;
            for (int64_t i = 0; i < c.Tq; i++) {
                const int sees = which == 2 ? i == at.row : (!causal || i >= at.row);
                const float *o = sc_at(&out.o, 0, 0, i);
                /* NaN in V reaches only its own column; in Q or K every column */
                for (int64_t d = 0; d < c.Dv; d++)
                    ok &= (sees && (which != 1 || d == c.Dv / 2)) ? isnan(o[d]) : isfinite(o[d]);
            }
            CHECK(ok, "%s (causal=%d): NaN must reach exactly the rows that see it",
                  names[which], causal);
            sc_tensors_free(&out);
        }
}

void suite_traps(void) {
    test_large_logits();
    test_one_hot();
    test_masked_rows();
    test_nan();
}

/* ---- a deliberately broken kernel ---------------------------------------------- */

/* The table under test, copied, with one function wrapped to misbehave. */
static sdpa_kernels broken;
static const sdpa_kernels *good;

/* P V that forgets the last key of every call: an off-by-one in a tail loop. */
static void pv_drops_last_key(int m, int n, int dv, const float *p, int ldp, const void *v,
                              int64_t ldv, sdpa_dtype dt, const float *alpha, float *o, int ldo,
                              int npf, const void *pf) {
    good->pv(m, n > 1 ? n - 1 : n, dv, p, ldp, v, ldv, dt, alpha, o, ldo, npf, pf);
}

/* Online softmax that never rescales the running sums: right on the first key block,
 * wrong from the second on. */
static void softmax_no_rescale(int m, int n, float *s, int lds, float *m_run, float *l_run,
                               float *alpha) {
    good->softmax(m, n, s, lds, m_run, l_run, alpha);
    for (int r = 0; r < m; r++)
        alpha[r] = 1.0f;
}

/* QK^T that loses the scale on the last column of each tile. */
static void qk_tail_unscaled(int m, int n, int dk, float scale, const float *q, int ldq,
                             const float *kp, float *s, int lds) {
    good->qk(m, n, dk, scale, q, ldq, kp, s, lds);
    for (int r = 0; r < m; r++)
        s[(size_t)r * (size_t)lds + (size_t)(n - 1)] /= scale;
}

void suite_broken(void) {
    good = sdpa_isa_lookup(th_isa)->kernels;
    static const char *names[] = {"pv drops the last key", "softmax never rescales",
                                  "qk forgets the scale on the tile's last column"};
    for (int which = 0; which < 3; which++)
        for (int causal = 0; causal < 2; causal++) {
            broken = *good;
            if (which == 0)
                broken.pv = pv_drops_last_key;
            else if (which == 1)
                broken.softmax = softmax_no_rescale;
            else
                broken.qk = qk_tail_unscaled;
            sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 129, .Tkv = 257, .Dk = 32, .Dv = 32,
                         .causal = causal, .seed = 16};
            sc_tensors f, r;
            th_tensors_make(&f, &c);
            th_tensors_make(&r, &c);
            sdpa_problem p;
            sdpa_status st = sdpa_validate(&f.desc, &f.q, &f.k, &f.v, &f.o, f.lse, &p);
            if (st == SDPA_OK)
                st = sdpa_forward_with(&broken, &p, NULL);
            if (st == SDPA_OK)
                st = sdpa_reference(&r.desc, &r.q, &r.k, &r.v, &r.o, r.lse);
            if (CHECK(st == SDPA_OK, "%s: %s", names[which], sdpa_strerror(st))) {
                const sc_error e = th_compare(&c, &f, &r);
                CHECK(e.bad > 0, "%s (causal=%d) was NOT caught by the comparison",
                      names[which], causal);
                if (th_verbose)
                    printf("  caught '%s' (causal=%d): %lld elements off, max_abs %.3g\n",
                           names[which], causal, (long long)e.bad, e.max_abs);
            }
            /* and the unbroken table passes the very same comparison */
            sc_tensors_free(&f);
            th_tensors_make(&f, &c);
            st = sdpa_validate(&f.desc, &f.q, &f.k, &f.v, &f.o, f.lse, &p);
            if (st == SDPA_OK)
                st = sdpa_forward_with(good, &p, NULL);
            CHECK(st == SDPA_OK && th_compare(&c, &f, &r).bad == 0,
                  "the unbroken %s table fails the control comparison", good->name);
            sc_tensors_free(&f);
            sc_tensors_free(&r);
        }
}
