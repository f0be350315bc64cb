/*
 * test_extremes.c - numerical and arithmetic extremes, on every ISA: scale 0 and the
 * tiny, subnormal and huge scales, +-inf and NaN inputs, subnormals, logits near
 * FLT_MAX, Dk = 1 up to the head-dim limit, a single key, sequences of 2^20 rows or
 * keys, element offsets beyond 2^31 and 2^32, and strides near the int64 limits; and the
 * KV caches' views (include/sdpa.h "KV caches"): NaN and inf scales, fp8 NaN codes, pages
 * of one key and pages longer than len_kv, the pool, the scales and the block table at
 * the int64, address-space and SDPA_MAX_DIM limits, sdpa_kv_write at its limits.
 *
 * What "correct" is: the reference (double precision, sdpa_reference) defines it, and
 * th_compare's rule applies (NaN exactly where the reference has NaN, an inf only where
 * it has the same inf). Where the reference is itself ill-defined the behaviour is the
 * IEEE one, documented in README.md ("Error model") and tested for consistency here: a
 * +inf score makes its row NaN (inf - inf in the softmax), a -inf score drops its key
 * like a mask, and a row whose every score is -inf is a row with nothing visible (zeros,
 * lse -inf). Where an exact answer exists (one key, tied maxima, subnormal sums) the
 * fused path must give it exactly. It is not a precision study: ill-conditioned inputs
 * (a huge scale over random data) are checked for bounds only.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static uint64_t seed_of(int a, int b, int c) { return (uint64_t)(a * 7919 + b * 131 + c) + 901; }

/* Run c fused only, into freshly made tensors the caller frees. */
static sdpa_status run_fused(const sc_case *c, sc_tensors *t) {
    th_tensors_make(t, c);
    return sdpa_forward(&t->desc, &t->q, &t->k, &t->v, &t->o, t->lse);
}

/* Key j visible to row i (plain lengths): bottom-right causal and the window. */
static int sees(const sc_case *c, int64_t i, int64_t j) {
    const int64_t d = i + (c->causal == SDPA_CAUSAL_TOP_LEFT ? 0 : c->Tkv - c->Tq);
    if (c->causal && j > d)
        return 0;
    if (c->window && (j < d - c->wl || j > d + c->wr))
        return 0;
    return 1;
}

/* ---- scales ------------------------------------------------------------------------- */

/* scale 0 is exactly 1/sqrt(Dk) rounded to float: the same bits as passing that value. */
static void scale_default(void) {
    static const int64_t dks[] = {1, 3, 64, 1024};
    for (int i = 0; i < N(dks); i++) {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 33, .Tkv = 70, .Dk = dks[i], .Dv = 16,
                     .causal = i & 1, .seed = seed_of(1, i, 0)};
        th_run_case(&c, "scale 0");
        sc_tensors a, b;
        sdpa_status sa = run_fused(&c, &a);
        c.scale = (float)(1.0 / sqrt((double)c.Dk));
        sdpa_status sb = run_fused(&c, &b);
        CHECK(sa == SDPA_OK && sb == SDPA_OK &&
                  memcmp(a.bufs[3], b.bufs[3], a.elems[3] * sizeof(float)) == 0 &&
                  memcmp(a.lse, b.lse, a.elems[4] * sizeof(float)) == 0,
              "Dk=%lld: scale 0 and scale 1/sqrt(Dk) differ", (long long)c.Dk);
        sc_tensors_free(&a);
        sc_tensors_free(&b);
    }
}

/* Tiny scales (1e-30, FLT_MIN, the smallest subnormal, negative): every score is ~0,
 * so each output row is the mean of its visible V rows. */
static void scale_tiny(void) {
    static const float scales[] = {1e-30f, FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN};
    for (int s = 0; s < N(scales); s++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 40, .Tkv = 100, .Dk = 16, .Dv = 8,
                         .causal = causal, .scale = scales[s], .seed = seed_of(2, s, causal)};
            sc_tensors out;
            if (!th_run_case_with(&c, "tiny scale", NULL, NULL, &out))
                continue;
            double worst = 0.0;
            for (int64_t i = 0; i < c.Tq; i++)
                for (int64_t d = 0; d < c.Dv; d++) {
                    double sum = 0.0;
                    int64_t n = 0;
                    for (int64_t j = 0; j < c.Tkv; j++)
                        if (sees(&c, i, j)) {
                            sum += sc_at(&out.v, 0, 0, j)[d];
                            n++;
                        }
                    const double e = fabs(sc_at(&out.o, 0, 0, i)[d] - sum / (double)n);
                    worst = e > worst ? e : worst;
                }
            CHECK(worst <= 1e-6, "scale %g (causal %d): rows are not the mean of their values "
                  "(off by %.3g)", (double)scales[s], causal, worst);
            sc_tensors_free(&out);
        }
}

/* K rows one-hot on j % Dk and Q row i on i % Dk: scores are exactly scale (a match) or
 * 0, so with a huge scale every row averages its matching keys (or, with -1e30, the
 * others) with exact ties in both paths. */
static void fill_ties(sc_tensors *t, const sc_case *c, void *ctx) {
    (void)ctx;
    for (int64_t j = 0; j < c->Tkv; j++) {
        float *k = sc_at(&t->k, 0, 0, j);
        memset(k, 0, (size_t)c->Dk * sizeof(float));
        k[j % c->Dk] = 1.0f;
    }
    for (int64_t i = 0; i < c->Tq; i++) {
        float *q = sc_at(&t->q, 0, 0, i);
        memset(q, 0, (size_t)c->Dk * sizeof(float));
        q[i % c->Dk] = 1.0f;
    }
}

static void scale_huge(void) {
    static const float scales[] = {1e30f, -1e30f, FLT_MAX};
    for (int s = 0; s < N(scales); s++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 20, .Tkv = 100, .Dk = 8, .Dv = 8,
                         .causal = causal, .scale = scales[s], .seed = seed_of(3, s, causal)};
            sc_tensors out;
            if (!th_run_case_with(&c, "huge scale, tied maxima", fill_ties, NULL, &out))
                continue;
            int ok = 1;
            const int want_match = scales[s] > 0;
            for (int64_t i = 0; i < c.Tq; i++) {
                /* the row's best keys: the matches (score = scale) under a positive scale,
                 * the others (score 0) under a negative one; every key it sees when it
                 * sees none of those (its scores all tie) */
                int64_t best = 0, seen = 0;
                for (int64_t j = 0; j < c.Tkv; j++) {
                    seen += sees(&c, i, j);
                    best += sees(&c, i, j) && (j % c.Dk == i % c.Dk) == want_match;
                }
                const int64_t n = best ? best : seen;
                for (int64_t d = 0; d < c.Dv; d++) {
                    double sum = 0.0;
                    for (int64_t j = 0; j < c.Tkv; j++)
                        if (sees(&c, i, j) && (!best || (j % c.Dk == i % c.Dk) == want_match))
                            sum += sc_at(&out.v, 0, 0, j)[d];
                    ok &= n > 0 && fabs(sc_at(&out.o, 0, 0, i)[d] - sum / (double)n) <= 1e-6;
                }
            }
            CHECK(ok, "scale %g (causal %d): rows must average exactly their tied best keys",
                  (double)scales[s], causal);
            sc_tensors_free(&out);
        }
    /* Random data under a huge scale is ill-conditioned (one rounding flips the argmax),
     * so no comparison with the reference: every output must still be finite and inside
     * the range of the values the row sees (a convex combination), lse finite. */
    for (int causal = 0; causal < 2; causal++) {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 70, .Tkv = 130, .Dk = 32, .Dv = 24,
                     .causal = causal, .scale = 1e30f, .seed = seed_of(3, 9, causal)};
        sc_tensors t;
        int ok = run_fused(&c, &t) == SDPA_OK;
        for (int64_t h = 0; h < c.Hq && ok; h++)
            for (int64_t i = 0; i < c.Tq; i++) {
                ok &= isfinite(t.lse[h * c.Tq + i]);
                for (int64_t d = 0; d < c.Dv; d++) {
                    float lo = INFINITY, hi = -INFINITY;
                    for (int64_t j = 0; j < c.Tkv; j++)
                        if (sees(&c, i, j)) {
                            const float x = sc_at(&t.v, 0, 0, j)[d];
                            lo = x < lo ? x : lo;
                            hi = x > hi ? x : hi;
                        }
                    const float o = sc_at(&t.o, 0, h, i)[d];
                    ok &= isfinite(o) && o >= lo - 1e-6f && o <= hi + 1e-6f;
                }
            }
        CHECK(ok, "scale 1e30 on random data (causal %d): outputs must be finite convex "
              "combinations of the visible values", causal);
        sc_tensors_free(&t);
    }
}

/* ---- infinities and NaN -------------------------------------------------------------- */

typedef struct inf_case {
    int which; /* 0 +inf in Q row 5, 1 -inf in Q row 6, 2 +inf in K row 9, 3 +-inf in V */
} inf_case;

static void fill_inf(sc_tensors *t, const sc_case *c, void *ctx) {
    const inf_case *ic = ctx;
    uint64_t rng = 77;
    /* dimension 0 of every K row positive, so the sign of an inf in Q decides */
    for (int64_t j = 0; j < c->Tkv; j++)
        sc_at(&t->k, 0, 0, j)[0] = 0.5f + 0.25f * (1.0f + sc_rand_float(&rng));
    for (int64_t i = 0; i < c->Tq; i++) /* Q's sign alternates by row in dimension 0 */
        sc_at(&t->q, 0, 0, i)[0] = (i % 2 ? -0.5f : 0.5f) * (1.0f + sc_rand_float(&rng)) + (i % 2 ? -0.01f : 0.01f);
    switch (ic->which) {
    case 0:
        sc_at(&t->q, 0, 0, 5)[0] = INFINITY;
        break;
    case 1:
        sc_at(&t->q, 0, 0, 6)[0] = -INFINITY;
        break;
    case 2:
        sc_at(&t->k, 0, 0, 9)[0] = INFINITY;
        break;
    default:
        sc_at(&t->v, 0, 0, 4)[2] = INFINITY;
        sc_at(&t->v, 0, 0, 11)[3] = INFINITY;
        sc_at(&t->v, 0, 0, 12)[3] = -INFINITY;
        break;
    }
}

static void infinities(void) {
    static const char *names[] = {"+inf in a Q row", "-inf in a Q row", "+inf in a K row",
                                  "+-inf in V"};
    for (int which = 0; which < 4; which++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 100, .Tkv = 150, .Dk = 8, .Dv = 8,
                         .causal = causal, .seed = seed_of(4, which, causal)};
            inf_case ic = {which};
            sc_tensors out;
            if (!th_run_case_with(&c, names[which], fill_inf, &ic, &out))
                continue;
            int ok = 1;
            for (int64_t i = 0; i < c.Tq; i++) {
                const float *o = sc_at(&out.o, 0, 0, i);
                const float lse = out.lse[i];
                for (int64_t d = 0; d < c.Dv; d++) {
                    int want; /* 0 finite, 1 NaN, 2 +inf, 3 zero */
                    switch (which) {
                    case 0: /* every score of row 5 is +inf: inf - inf */
                        want = i == 5 ? 1 : 0;
                        break;
                    case 1: /* every score of row 6 is -inf: nothing visible */
                        want = i == 6 ? 3 : 0;
                        break;
                    case 2: /* key 9 scores +inf for even rows (NaN), -inf for odd ones */
                        want = sees(&c, i, 9) && i % 2 == 0 ? 1 : 0;
                        break;
                    default: /* inf in V reaches the rows that see it, in its column;
                                +inf and -inf together make NaN */
                        want = d == 2 && sees(&c, i, 4) ? 2
                               : d == 3 && sees(&c, i, 11) && sees(&c, i, 12) ? 1
                               : d == 3 && sees(&c, i, 11) ? 2
                                                            : 0;
                        break;
                    }
                    ok &= want == 0   ? isfinite(o[d])
                          : want == 1 ? isnan(o[d])
                          : want == 2 ? o[d] == INFINITY
                                      : o[d] == 0.0f;
                }
                if (which == 1 && i == 6)
                    ok &= lse == -INFINITY;
                else if (which == 0 && i == 5)
                    ok &= isnan(lse);
            }
            CHECK(ok, "%s (causal %d): NaN, inf and zeros must be exactly where IEEE puts them",
                  names[which], causal);
            sc_tensors_free(&out);
        }
}

/* A score of -inf from the data is a weight of exactly 0, not a mask: its key's V row
 * still enters P V, so an inf in it makes 0 x inf = NaN, as in the reference and in
 * PyTorch. The same key hidden by a boolean mask contributes nothing. K row 9 is -inf in
 * every dimension against a positive Q (every score -inf), V row 9 is +inf. */
static void fill_minus_inf_key(sc_tensors *t, const sc_case *c, void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < c->Tq; i++)
        for (int64_t d = 0; d < c->Dk; d++)
            sc_at(&t->q, 0, 0, i)[d] = 0.25f + 0.5f * fabsf(sc_at(&t->q, 0, 0, i)[d]);
    for (int64_t d = 0; d < c->Dk; d++)
        sc_at(&t->k, 0, 0, 9)[d] = -INFINITY;
    for (int64_t d = 0; d < c->Dv; d++)
        sc_at(&t->v, 0, 0, 9)[d] = INFINITY;
    if (t->mask) /* hide key 9 from every row */
        for (int64_t i = 0; i < c->Tq; i++)
            ((uint8_t *)t->mask)[i * t->desc.mask.stride_q + 9] = 0;
}

static void minus_inf_score(void) {
    for (int masked = 0; masked < 2; masked++) {
        sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 30, .Tkv = 70, .Dk = 8, .Dv = 8,
                     .causal = 1, .seed = seed_of(11, masked, 0)};
        if (masked) {
            c.mask = SDPA_MASK_BOOL;
            c.mask_bcast = SC_BCAST_B | SC_BCAST_H;
        }
        sc_tensors out;
        if (!th_run_case_with(&c, masked ? "-inf score, key masked" : "-inf score", fill_minus_inf_key,
                              NULL, &out))
            continue;
        int ok = 1;
        for (int64_t i = 0; i < c.Tq; i++) {
            if (masked && i == 3) /* the harness hides all of row 3 */
                continue;
            const int sees9 = sees(&c, i, 9);
            for (int64_t d = 0; d < c.Dv; d++)
                ok &= !masked && sees9 ? isnan(sc_at(&out.o, 0, 0, i)[d])
                                       : isfinite(sc_at(&out.o, 0, 0, i)[d]);
        }
        CHECK(ok, "a -inf score with +inf in its V row must give NaN to the rows that see it "
              "%s", masked ? "only when not masked" : "(0 x inf)");
        sc_tensors_free(&out);
    }
}

/* Rows whose weight on the keys is exactly 0 while the row still has weight elsewhere:
 * K rows [0, kneg) are -inf in every dimension against a positive Q, V row 9 is +inf.
 * With a sink and every key -inf (kneg = Tkv), a row seeing key 9 outputs 0 x inf = NaN
 * and the others 0; the head without a sink has no weight at all and outputs zeros
 * (lse -inf). In a long decode the -inf keys fill whole split-KV chunks (a chunk of
 * weight 0 next to chunks of weight): the row is NaN. */
static void fill_minus_inf_keys(sc_tensors *t, const sc_case *c, void *ctx) {
    const int64_t kneg = *(const int64_t *)ctx;
    for (int64_t h = 0; h < c->Hq; h++)
        for (int64_t i = 0; i < c->Tq; i++)
            for (int64_t d = 0; d < c->Dk; d++)
                sc_at(&t->q, 0, h, i)[d] = 0.25f + 0.5f * fabsf(sc_at(&t->q, 0, h, i)[d]);
    for (int64_t j = 0; j < kneg; j++)
        for (int64_t d = 0; d < c->Dk; d++)
            sc_at(&t->k, 0, 0, j)[d] = -INFINITY;
    for (int64_t d = 0; d < c->Dv; d++)
        sc_at(&t->v, 0, 0, 9)[d] = INFINITY;
}

static void minus_inf_part(void) {
    { /* sinks: head 0's is finite, head 1 has none */
        int64_t kneg = 70;
        const sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 30, .Tkv = 70, .Dk = 8, .Dv = 8,
                           .causal = 1, .sinks = 1, .seed = seed_of(12, 0, 0)};
        sc_tensors out;
        if (th_run_case_with(&c, "-inf scores, sink", fill_minus_inf_keys, &kneg, &out)) {
            int ok = 1;
            for (int64_t h = 0; h < c.Hq; h++)
                for (int64_t i = 0; i < c.Tq; i++)
                    for (int64_t d = 0; d < c.Dv; d++) {
                        const float x = sc_at(&out.o, 0, h, i)[d];
                        ok &= h == 0 && sees(&c, i, 9) ? isnan(x) : x == 0.0f;
                    }
            CHECK(ok, "every score -inf with a sink: NaN where a row sees the inf in V "
                  "(0 x inf), 0 elsewhere; zeros without a sink");
            sc_tensors_free(&out);
        }
    }
    { /* split-KV decode: the first 2048 of 8192 keys -inf */
        int64_t kneg = 2048;
        const sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 1, .Tkv = 8192, .Dk = 8, .Dv = 8,
                           .seed = seed_of(12, 1, 0)};
        sc_tensors out;
        if (th_run_case_with(&c, "-inf scores, split-KV", fill_minus_inf_keys, &kneg, &out)) {
            int ok = 1;
            for (int64_t d = 0; d < c.Dv; d++)
                ok &= isnan(sc_at(&out.o, 0, 0, 0)[d]);
            CHECK(ok, "split-KV chunks of -inf scores next to chunks of weight: 0 x inf = NaN");
            sc_tensors_free(&out);
        }
    }
}

typedef struct nan_key {
    int64_t head, row; /* K/V head and key row of the NaN */
    int mask_even;     /* a boolean mask hides the key from even rows */
} nan_key;

static void fill_nan_key(sc_tensors *t, const sc_case *c, void *ctx) {
    const nan_key *nk = ctx;
    sc_at(&t->k, 0, nk->head, nk->row)[c->Dk - 1] = NAN;
    if (t->desc.mask.kind == SDPA_MASK_BOOL) {
        const sdpa_mask *m = &t->desc.mask;
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++)
                for (int64_t j = 0; j < c->Tkv; j++)
                    ((uint8_t *)t->mask)[h * m->stride_h + i * m->stride_q + j] =
                        !(nk->mask_even && j == nk->row && i % 2 == 0);
    }
}

/* NaN in one key row: exactly the rows that see it become NaN, whatever hides it from the
 * others (causal, window, a mask, another K/V head, another split-KV chunk). */
static void nan_key_row(void) {
    const struct {
        sc_case c;
        nan_key nk;
    } cases[] = {
        {{.B = 1, .Hq = 1, .Hkv = 1, .Tq = 200, .Tkv = 200, .Dk = 16, .Dv = 8, .causal = 1},
         {0, 130, 0}},
        {{.B = 1, .Hq = 1, .Hkv = 1, .Tq = 150, .Tkv = 300, .Dk = 16, .Dv = 8, .causal = 1,
          .window = 1, .wl = 20, .wr = 0},
         {0, 250, 0}},
        {{.B = 1, .Hq = 6, .Hkv = 3, .Tq = 40, .Tkv = 90, .Dk = 8, .Dv = 8}, {1, 70, 0}},
        {{.B = 1, .Hq = 2, .Hkv = 1, .Tq = 50, .Tkv = 100, .Dk = 8, .Dv = 8,
          .mask = SDPA_MASK_BOOL},
         {0, 64, 1}},
        {{.B = 1, .Hq = 4, .Hkv = 1, .Tq = 1, .Tkv = 3000, .Dk = 16, .Dv = 16, .causal = 1},
         {0, 2500, 0}},
        {{.B = 1, .Hq = 4, .Hkv = 1, .Tq = 1, .Tkv = 3000, .Dk = 16, .Dv = 16, .causal = 1,
          .window = 1, .wl = 400},
         {0, 2500, 0}},
        {{.B = 1, .Hq = 4, .Hkv = 2, .Tq = 3, .Tkv = 2100, .Dk = 16, .Dv = 16, .causal = 1,
          .window = 1, .wl = 1000, .threads = 3},
         {1, 1100, 0}},
        /* decode over a tokens-major cache (plan.c, hgroup: every KV head in one item) */
        {{.B = 1, .Hq = 8, .Hkv = 4, .Tq = 1, .Tkv = 1500, .Dk = 16, .Dv = 16,
          .layout = SC_BTHD, .threads = 2},
         {2, 1200, 0}},
        {{.B = 1, .Hq = 6, .Hkv = 3, .Tq = 1, .Tkv = 100, .Dk = 8, .Dv = 8, .causal = 1,
          .layout = SC_BTHD, .mask = SDPA_MASK_BOOL},
         {1, 50, 0}},
    };
    for (int k = 0; k < N(cases); k++) {
        sc_case c = cases[k].c;
        c.seed = seed_of(5, k, 0);
        nan_key nk = cases[k].nk;
        sc_tensors out;
        if (!th_run_case_with(&c, "NaN in one key row", fill_nan_key, &nk, &out))
            continue;
        int ok = 1;
        const int64_t g = c.Hq / c.Hkv;
        for (int64_t h = 0; h < c.Hq; h++)
            for (int64_t i = 0; i < c.Tq; i++) {
                const int hit = h / g == nk.head && sees(&c, i, nk.row) &&
                                !(nk.mask_even && i % 2 == 0);
                const float *o = sc_at(&out.o, 0, h, i);
                for (int64_t d = 0; d < c.Dv; d++)
                    ok &= hit ? isnan(o[d]) : isfinite(o[d]);
                ok &= hit ? isnan(out.lse[h * c.Tq + i]) : !isnan(out.lse[h * c.Tq + i]);
            }
        CHECK(ok, "case %d: NaN must reach exactly the rows that see key %lld of head %lld", k,
              (long long)nk.row, (long long)nk.head);
        sc_tensors_free(&out);
    }
}

/* ---- subnormals and the largest logits ------------------------------------------------ */

/* Q = K = 0 (every score 0), V small multiples of the smallest subnormal: the sums are
 * exact in fp32, so the mean over 64 keys, rounded once, is the reference's bit for bit;
 * a flush-to-zero anywhere would show. */
static void fill_subnormal(sc_tensors *t, const sc_case *c, void *ctx) {
    const int zero_qk = *(const int *)ctx;
    uint64_t rng = 5;
    for (int64_t i = 0; i < c->Tq; i++)
        for (int64_t d = 0; d < c->Dk; d++)
            sc_at(&t->q, 0, 0, i)[d] = zero_qk ? 0.0f : 0x1p-140f * (float)(d + 1);
    for (int64_t j = 0; j < c->Tkv; j++) {
        for (int64_t d = 0; d < c->Dk; d++)
            sc_at(&t->k, 0, 0, j)[d] = zero_qk ? 0.0f : -0x1p-135f * (float)(j % 7);
        for (int64_t d = 0; d < c->Dv; d++)
            sc_at(&t->v, 0, 0, j)[d] =
                0x1p-149f * (float)((int)(sc_rand_u64(&rng) % 1001) - 500);
    }
}

static void subnormals(void) {
    for (int zero_qk = 0; zero_qk < 2; zero_qk++) {
        sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 9, .Tkv = 64, .Dk = 8, .Dv = 16,
                     .seed = seed_of(6, zero_qk, 0)};
        sc_tensors f, r;
        th_tensors_make(&f, &c);
        th_tensors_make(&r, &c);
        fill_subnormal(&f, &c, &zero_qk);
        fill_subnormal(&r, &c, &zero_qk);
        const sdpa_status sf = sdpa_forward(&f.desc, &f.q, &f.k, &f.v, &f.o, f.lse);
        const sdpa_status sr = sdpa_reference(&r.desc, &r.q, &r.k, &r.v, &r.o, r.lse);
        int exact = sf == SDPA_OK && sr == SDPA_OK;
        int subnormal_out = 0;
        for (int64_t i = 0; i < c.Tq && exact; i++)
            for (int64_t d = 0; d < c.Dv; d++) {
                const float x = sc_at(&f.o, 0, 0, i)[d], y = sc_at(&r.o, 0, 0, i)[d];
                exact &= memcmp(&x, &y, sizeof x) == 0;
                subnormal_out |= x != 0.0f && fabsf(x) < FLT_MIN;
            }
        CHECK(exact && subnormal_out,
              "subnormal values (%s Q/K): outputs must equal the reference bit for bit and stay "
              "subnormal (no flush to zero)", zero_qk ? "zero" : "subnormal");
        sc_tensors_free(&f);
        sc_tensors_free(&r);
    }
}

/* Scores up to ~2.7e38 (scale 3e37 times small integer dot products): distinct scores are
 * 3e37 apart, so every row averages its tied maxima exactly; and an additive mask of
 * +-1e38 that swamps the scores. */
typedef struct big_logits {
    int mode; /* 0 positive logits, 1 negative, 2 a +-1e38 additive mask */
} big_logits;

static void fill_big_logits(sc_tensors *t, const sc_case *c, void *ctx) {
    const big_logits *bl = ctx;
    for (int64_t i = 0; i < c->Tq; i++) {
        float *q = sc_at(&t->q, 0, 0, i);
        memset(q, 0, (size_t)c->Dk * sizeof(float));
        q[0] = (float)(1 + i % 3) * (bl->mode == 1 ? -1.0f : 1.0f);
    }
    for (int64_t j = 0; j < c->Tkv; j++) {
        float *k = sc_at(&t->k, 0, 0, j);
        memset(k, 0, (size_t)c->Dk * sizeof(float));
        k[0] = (float)((j * 5) % 7 - 3);
    }
    if (bl->mode == 2) {
        const sdpa_mask *m = &t->desc.mask;
        for (int64_t i = 0; i < c->Tq; i++)
            for (int64_t j = 0; j < c->Tkv; j++)
                ((float *)t->mask)[i * m->stride_q + j] = j % 5 == 0 ? 1e38f : -1e38f;
    }
}

static void logits_1e38(void) {
    for (int mode = 0; mode < 3; mode++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 30, .Tkv = 140, .Dk = 4, .Dv = 8,
                         .causal = causal, .scale = mode == 2 ? 1.0f : 3e37f,
                         .mask = mode == 2 ? SDPA_MASK_ADDITIVE : SDPA_MASK_NONE,
                         .seed = seed_of(7, mode, causal)};
            big_logits bl = {mode};
            th_run_case_with(&c, "logits near FLT_MAX", fill_big_logits, &bl, NULL);
            /* and capped: tanh saturates at the cap, finite */
            c.softcap = 30.0f;
            th_run_case_with(&c, "logits near FLT_MAX, softcap 30", fill_big_logits, &bl, NULL);
        }
}

/* ---- shapes at the edges -------------------------------------------------------------- */

static void head_dims(void) {
    static const int64_t dims[][2] = {{1, 1}, {1, 64}, {1024, 1}, {1024, 64}, {64, 1024},
                                      {1024, 1024}};
    for (int i = 0; i < N(dims); i++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 70, .Tkv = 130, .Dk = dims[i][0],
                         .Dv = dims[i][1], .causal = causal, .seed = seed_of(8, i, causal)};
            if (th_quick && c.Dk * c.Dv > 1024 * 64)
                c.Tq = 7, c.Tkv = 20;
            th_run_case(&c, "head dims");
            c.dt[1] = SDPA_BF16, c.dt[2] = SDPA_F16;
            th_run_case(&c, "head dims, 16-bit K/V");
        }
    /* the limit itself, SDPA_MAX_HEAD_DIM */
    sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 2, .Tkv = 3, .Dk = SDPA_MAX_HEAD_DIM,
                 .Dv = 4, .seed = seed_of(8, 99, 0)};
    th_run_case(&c, "Dk = SDPA_MAX_HEAD_DIM");
}

/* One key: a row that sees it outputs that V row exactly (weight exp(0) / 1 = 1) and its
 * score as lse; under bottom-right causal only the last row sees it. */
static void single_key(void) {
    for (int causal = 0; causal < 3; causal++) {
        sc_case c = {.B = 2, .Hq = 2, .Hkv = 1, .Tq = 70, .Tkv = 1, .Dk = 24, .Dv = 40,
                     .causal = causal, .seed = seed_of(9, causal, 0)};
        sc_tensors out;
        if (!th_run_case_with(&c, "Tkv = 1", NULL, NULL, &out))
            continue;
        int ok = 1;
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t h = 0; h < c.Hq; h++)
                for (int64_t i = 0; i < c.Tq; i++) {
                    const int seen = causal != SDPA_CAUSAL_BOTTOM_RIGHT || i == c.Tq - 1;
                    const float *o = sc_at(&out.o, b, h, i), *v = sc_at(&out.v, b, 0, 0);
                    for (int64_t d = 0; d < c.Dv; d++)
                        ok &= seen ? o[d] == v[d] : o[d] == 0.0f;
                    if (!seen)
                        ok &= out.lse[(b * c.Hq + h) * c.Tq + i] == -INFINITY;
                }
        CHECK(ok, "Tkv = 1 (causal %d): outputs must be the value row exactly, or zeros",
              causal);
        sc_tensors_free(&out);
    }
}

/* 2^20 rows or keys with small head dims: the counts, block numbers and offsets pass
 * 2^20 x 64 and every index stays in 64 bits. --quick (sanitizers, valgrind) uses 2^17. */
static void long_sequences(void) {
    const int64_t T = th_quick ? (int64_t)1 << 17 : (int64_t)1 << 20;
    const sc_case cases[] = {
        /* decode over 2^20 keys: split-KV, grouped GQA */
        {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 1, .Tkv = T, .Dk = 2, .Dv = 3, .causal = 1},
        /* 2^20 x 2^20 causal with a window (each row sees 6 keys) and ALiBi: row and key
         * indices up to 2^20 in the distances, which stay within the window (an fp32
         * penalty near 2^20 would itself round by 2^-4, README.md "Error model") */
        {.B = 1, .Hq = 1, .Hkv = 1, .Tq = T, .Tkv = T, .Dk = 1, .Dv = 1, .causal = 1,
         .window = 1, .wl = 5, .alibi = 1},
        /* 2^20 rows, one key, dropout counters up to i = 2^20 */
        {.B = 1, .Hq = 1, .Hkv = 1, .Tq = T, .Tkv = 1, .Dk = 1, .Dv = 2, .dropout = 0.5f},
    };
    for (int k = 0; k < N(cases); k++) {
        sc_case c = cases[k];
        c.seed = seed_of(10, k, 0);
        th_run_case(&c, "2^20 rows or keys");
    }
}

/* ---- element offsets beyond 2^31 and 2^32 ---------------------------------------------- */

/* A view whose rows lie gigabytes apart in one reserved (MAP_NORESERVE) mapping: only the
 * pages the rows touch are ever backed, so offsets beyond 2^32 elements cost a few pages.
 * Returns NULL where the address space cannot be had (some valgrind setups). */
static void *reserve(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

typedef struct far_view {
    sdpa_tensor t;
    size_t bytes;
} far_view;

/* [1, H, T, D] fp32 with the given strides, rows filled from rng (inputs) or NaN. */
static int far_make(far_view *v, int64_t H, int64_t T, int64_t D, int64_t sh, int64_t st,
                    uint64_t *rng) {
    v->t = (sdpa_tensor){.dtype = SDPA_F32, .stride_b = 0, .stride_h = sh, .stride_t = st};
    v->bytes = (size_t)((H - 1) * sh + (T - 1) * st + D) * sizeof(float);
    v->t.data = reserve(v->bytes);
    if (!v->t.data)
        return 0;
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t d = 0; d < D; d++)
                ((float *)v->t.data)[h * sh + i * st + d] = rng ? sc_rand_float(rng) : NAN;
    return 1;
}

static void far_offsets(void) {
    /* element strides: Q rows 2^31 + 5 apart (offsets past 2^31), K and V rows 2^22 + 1
     * apart over 1100 keys (offsets past 2^32 elements, 2^34 bytes), O heads 2^32 + 7
     * apart, a boolean mask's rows 2^32 + 3 bytes apart */
    const int64_t H = 2, Tq = 3, Tkv = 1100, D = 4;
    const int64_t sq = ((int64_t)1 << 31) + 5, skv = ((int64_t)1 << 22) + 1;
    const int64_t so_h = ((int64_t)1 << 32) + 7, smask = ((int64_t)1 << 32) + 3;
    uint64_t rng = 4242;
    far_view q, k, v, o, r;
    int have = far_make(&q, 1, Tq, D, 0, sq, &rng);
    have = have && far_make(&k, 1, Tkv, D, 0, skv, &rng);
    have = have && far_make(&v, 1, Tkv, D, 0, skv, &rng);
    have = have && far_make(&o, H, Tq, D, so_h, D, NULL);
    have = have && far_make(&r, H, Tq, D, so_h, D, NULL);
    uint8_t *mask = have ? reserve((size_t)((Tq - 1) * smask + Tkv)) : NULL;
    if (!mask) {
        printf("  far offsets skipped: no room for a 48 GB reservation here\n");
        return;
    }
    for (int64_t i = 0; i < Tq; i++)
        for (int64_t j = 0; j < Tkv; j++)
            mask[i * smask + j] = (uint8_t)(j % 3 != 1);
    float lo[2 * 3], lr[2 * 3]; /* H x Tq */
    for (int variant = 0; variant < 2; variant++) {
        sdpa_desc d = {.batch = 1, .heads_q = H, .heads_kv = 1, .len_q = Tq, .len_kv = Tkv,
                       .dim_qk = D, .dim_v = D, .causal = 1, .isa = th_isa, .num_threads = 2};
        if (variant == 1)
            d.mask = (sdpa_mask){.data = mask, .kind = SDPA_MASK_BOOL, .stride_q = smask};
        sdpa_tensor qq = q.t, kk = k.t;
        qq.stride_h = 0; /* both query heads read the one Q head */
        const sdpa_status sf = sdpa_forward(&d, &qq, &kk, &v.t, &o.t, lo);
        const sdpa_status sr = sdpa_reference(&d, &qq, &kk, &v.t, &r.t, lr);
        int ok = sf == SDPA_OK && sr == SDPA_OK;
        double worst = 0.0;
        for (int64_t h = 0; h < H && ok; h++)
            for (int64_t i = 0; i < Tq; i++) {
                for (int64_t e = 0; e < D; e++) {
                    const double x = ((float *)o.t.data)[h * so_h + i * D + e];
                    const double y = ((float *)r.t.data)[h * so_h + i * D + e];
                    const double err = fabs(x - y) - 1e-4 * fabs(y);
                    worst = err > worst ? err : worst;
                    ok &= isfinite(x) && err <= 1e-5;
                }
                ok &= fabs(lo[h * Tq + i] - lr[h * Tq + i]) <= 1e-5 + 1e-4 * fabs(lr[h * Tq + i]);
            }
        CHECK(ok, "offsets beyond 2^32 elements (%s): status %d/%d, error %.3g",
              variant ? "with a mask" : "plain", sf, sr, worst);
    }
    munmap(q.t.data, q.bytes);
    munmap(k.t.data, k.bytes);
    munmap(v.t.data, v.bytes);
    munmap(o.t.data, o.bytes);
    munmap(r.t.data, r.bytes);
    munmap(mask, (size_t)((Tq - 1) * smask + Tkv));
}

/* ---- strides and sizes near the int64 limits: refused cleanly -------------------------- */

enum { XB = 2, XH = 2, XT = 3, XD = 4 };

typedef struct fixture {
    float q[XB * XH * XT * XD], k[XB * XH * XT * XD], v[XB * XH * XT * XD];
    float o[XB * XH * XT * XD], lse[XB * XH * XT];
    uint8_t mask[XT * XT];
    int64_t lens[XB], cu[XB + 1];
    sdpa_desc d;
    sdpa_tensor tq, tk, tv, to;
} fixture;

static void fixture_init(fixture *f) {
    memset(f, 0, sizeof *f);
    uint64_t rng = 3;
    for (int i = 0; i < XB * XH * XT * XD; i++)
        f->q[i] = sc_rand_float(&rng), f->k[i] = sc_rand_float(&rng), f->v[i] = sc_rand_float(&rng);
    memset(f->o, 0xA5, sizeof f->o);
    memset(f->lse, 0xA5, sizeof f->lse);
    memset(f->mask, 1, sizeof f->mask);
    f->d = (sdpa_desc){.batch = XB, .heads_q = XH, .heads_kv = XH, .len_q = XT, .len_kv = XT,
                       .dim_qk = XD, .dim_v = XD, .isa = th_isa};
    f->tq = sdpa_tensor_bhtd(f->q, SDPA_F32, XH, XT, XD);
    f->tk = sdpa_tensor_bhtd(f->k, SDPA_F32, XH, XT, XD);
    f->tv = sdpa_tensor_bhtd(f->v, SDPA_F32, XH, XT, XD);
    f->to = sdpa_tensor_bhtd(f->o, SDPA_F32, XH, XT, XD);
}

static int untouched(const fixture *f) {
    for (size_t i = 0; i < sizeof f->o; i++)
        if (((const uint8_t *)f->o)[i] != 0xA5)
            return 0;
    for (size_t i = 0; i < sizeof f->lse; i++)
        if (((const uint8_t *)f->lse)[i] != 0xA5)
            return 0;
    return 1;
}

static void limits(void) {
    const int64_t M = INT64_MAX;
    static const char *names[] = {
        "q stride_b INT64_MAX",          "k stride_h 2^62 (bytes overflow)",
        "two strides of 2^62 (sum overflows)", "v stride_t 2^61 (bytes past PTRDIFF_MAX)",
        "o stride_t INT64_MAX",          "o stride_h INT64_MAX / 2 + 1",
        "mask stride_q INT64_MAX",       "mask stride_b INT64_MAX - 1",
        "len_kv INT64_MAX",              "heads_q INT64_MIN",
        "dim_v INT64_MAX",               "window_left INT64_MAX",
        "window_right INT64_MIN",        "kv_lens INT64_MAX",
        "q_lens INT64_MIN",              "cu_seqlens ending at INT64_MAX",
        "dropout with len_kv 2^34",      "bhtd helper with heads 2^62",
    };
    static const sdpa_status want[] = {
        SDPA_ERR_OVERFLOW,      SDPA_ERR_OVERFLOW,      SDPA_ERR_OVERFLOW,
        SDPA_ERR_OVERFLOW,      SDPA_ERR_OVERFLOW,      SDPA_ERR_OVERFLOW,
        SDPA_ERR_OVERFLOW,      SDPA_ERR_OVERFLOW,      SDPA_ERR_BAD_DIMENSION,
        SDPA_ERR_BAD_DIMENSION, SDPA_ERR_BAD_DIMENSION, SDPA_ERR_BAD_ARGUMENT,
        SDPA_ERR_BAD_ARGUMENT,  SDPA_ERR_BAD_LENGTHS,   SDPA_ERR_BAD_LENGTHS,
        SDPA_ERR_BAD_LENGTHS,   SDPA_ERR_BAD_ARGUMENT,  SDPA_ERR_OVERFLOW,
    };
    _Static_assert(sizeof names / sizeof names[0] == sizeof want / sizeof want[0],
                   "one expected status per case");
    for (int c = 0; c < N(names); c++)
        for (int ref = 0; ref < 2; ref++) {
            fixture *f = malloc(sizeof *f);
            fixture_init(f);
            sdpa_desc *d = &f->d;
            switch (c) {
            case 0: f->tq.stride_b = M; break;
            case 1: f->tk.stride_h = (int64_t)1 << 62; break;
            case 2: f->tk.stride_h = f->tk.stride_b = (int64_t)1 << 62; break;
            case 3: f->tv.stride_t = (int64_t)1 << 61; break;
            case 4: f->to.stride_t = M; break;
            case 5: f->to.stride_h = M / 2 + 1; break;
            case 6:
                d->mask = (sdpa_mask){.data = f->mask, .kind = SDPA_MASK_BOOL, .stride_q = M};
                break;
            case 7:
                d->mask = (sdpa_mask){.data = f->mask, .kind = SDPA_MASK_BOOL, .stride_b = M - 1,
                                      .stride_q = XT};
                break;
            case 8: d->len_kv = M; break;
            case 9: d->heads_q = INT64_MIN; break;
            case 10: d->dim_v = M; break;
            case 11: d->window = 1, d->window_left = M; break;
            case 12: d->window = 1, d->window_right = INT64_MIN; break;
            case 13: f->lens[0] = M, f->lens[1] = 1, d->kv_lens = f->lens; break;
            case 14: f->lens[0] = INT64_MIN, f->lens[1] = 1, d->q_lens = f->lens; break;
            case 15:
                f->cu[0] = 0, f->cu[1] = 1, f->cu[2] = M;
                d->cu_seqlens_q = d->cu_seqlens_kv = f->cu;
                break;
            case 16:
                d->dropout_p = 0.5f, d->len_kv = (int64_t)1 << 34;
                f->tk.stride_t = f->tv.stride_t = 0;
                break;
            default:
                f->tq = sdpa_tensor_bhtd(f->q, SDPA_F32, (int64_t)1 << 62, XT, XD);
                break;
            }
            const sdpa_status st = ref ? sdpa_reference(d, &f->tq, &f->tk, &f->tv, &f->to, f->lse)
                                       : sdpa_forward(d, &f->tq, &f->tk, &f->tv, &f->to, f->lse);
            CHECK(st == want[c] && untouched(f), "%s (%s): got %d (%s), want %d, outputs %s",
                  names[c], ref ? "reference" : "forward", st, sdpa_strerror(st), want[c],
                  untouched(f) ? "untouched" : "WRITTEN");
            free(f);
        }
    /* a huge stride over a dimension of size 1 (or the stride_b packed varlen ignores)
     * is never multiplied by more than 0: accepted, same result as the plain view.
     * Variant 2, one row and one key with row strides of INT64_MAX, is the fuzz find
     * tests/fuzz/regress/one-key-row-stride-2e62: the driver formed V's row stride in
     * bytes for a prefetch (signed overflow, UBSan in the sanitizer build). */
    for (int variant = 0; variant < 3; variant++) {
        fixture *f = malloc(sizeof *f), *g = malloc(sizeof *g);
        fixture_init(f);
        fixture_init(g);
        if (variant == 0) {
            f->d.batch = g->d.batch = 1;
            f->tq.stride_b = f->tk.stride_b = f->tv.stride_b = f->to.stride_b = M;
        } else if (variant == 2) {
            f->d.len_q = g->d.len_q = f->d.len_kv = g->d.len_kv = 1;
            f->tq.stride_t = f->tk.stride_t = f->tv.stride_t = f->to.stride_t = M;
        } else {
            f->cu[0] = g->cu[0] = 0, f->cu[1] = g->cu[1] = 1, f->cu[2] = g->cu[2] = XT;
            f->d.batch = g->d.batch = 2;
            f->d.cu_seqlens_q = f->d.cu_seqlens_kv = f->cu;
            g->d.cu_seqlens_q = g->d.cu_seqlens_kv = g->cu;
            f->tq.stride_b = f->tk.stride_b = f->tv.stride_b = f->to.stride_b = M;
        }
        const sdpa_status sf = sdpa_forward(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse);
        const sdpa_status sg = sdpa_forward(&g->d, &g->tq, &g->tk, &g->tv, &g->to, g->lse);
        static const char *what[] = {"stride_b with batch 1", "packed varlen stride_b",
                                     "stride_t with one row and one key"};
        CHECK(sf == SDPA_OK && sg == SDPA_OK && memcmp(f->o, g->o, sizeof f->o) == 0,
              "%s: a stride of INT64_MAX that is never used must be accepted (status %d)",
              what[variant], sf);
        free(f);
        free(g);
    }
    /* Per-head parameters out of range: an ALiBi slope that is NaN or +-inf, a sink that is
     * NaN or +inf. Both entry points used to accept them (the fuzz target's faults 29 and
     * 30) and return rows of NaN; they are refused now, like a non-finite scale. A sink
     * of -inf is the sink switched off for its head and stays valid. */
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int which = 0; which < 2; which++)
        for (int b = 0; b < 3; b++)
            for (int ref = 0; ref < 2; ref++) {
                fixture *f = malloc(sizeof *f);
                fixture_init(f);
                float per_head[XH] = {0.25f, 0.5f};
                per_head[1] = bad[b];
                if (which == 0)
                    f->d.alibi_slopes = per_head;
                else
                    f->d.sinks = per_head;
                const sdpa_status want_st =
                    which == 1 && bad[b] == -INFINITY ? SDPA_OK : SDPA_ERR_BAD_ARGUMENT;
                const sdpa_status st =
                    ref ? sdpa_reference(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse)
                        : sdpa_forward(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse);
                CHECK(st == want_st && (st == SDPA_OK || untouched(f)),
                      "%s %g (%s): got %d (%s), want %d", which ? "sink" : "ALiBi slope",
                      (double)bad[b], ref ? "reference" : "forward", st, sdpa_strerror(st),
                      want_st);
                free(f);
            }
    /* sdpa_linear's leading dimensions and the layer's workspace size */
    float x[8] = {0}, w[8] = {0}, y[8];
    sdpa_linear_desc ld = {.rows = 2, .in_features = 2, .out_features = 2, .weight = w,
                           .ld_x = M, .isa = th_isa};
    CHECK(sdpa_linear(&ld, x, y) != SDPA_OK, "sdpa_linear with ld_x INT64_MAX was accepted");
    ld.ld_x = 0, ld.ld_y = M / 2;
    CHECK(sdpa_linear(&ld, x, y) != SDPA_OK, "sdpa_linear with ld_y INT64_MAX / 2 was accepted");
    ld.ld_y = 0, ld.rows = M;
    CHECK(sdpa_linear(&ld, x, y) != SDPA_OK, "sdpa_linear with INT64_MAX rows was accepted");
    sdpa_mha_desc md = {.batch = 1, .len_q = M, .d_in = 8, .heads_q = 2, .head_dim = 4,
                        .wq = {w, NULL}, .wk = {w, NULL}, .wv = {w, NULL}};
    CHECK(sdpa_mha_workspace_size(&md) == 0, "a layer with len_q INT64_MAX has a workspace size");
    /* B T = 2^70: the size used to be computed as the int64 product B T first, signed
     * overflow (UBSan in the sanitizer build); now in double from the factors */
    md.len_q = (int64_t)1 << 40, md.batch = (int64_t)1 << 30;
    CHECK(sdpa_mha_workspace_size(&md) == 0, "a layer whose activations overflow has a "
          "workspace size");
    /* x of B T d_in floats with d_in = 2^40 and T = 2^24: the byte counts of x, y and the
     * weights were int64 products that overflowed (signed overflow, then a wrong overlap
     * test) before the projections' own checks; now refused up front, y untouched */
    md.batch = 1, md.len_q = (int64_t)1 << 24, md.d_in = (int64_t)1 << 40;
    float y8[8];
    memset(y8, 0xA5, sizeof y8);
    const sdpa_status mst = sdpa_mha_forward(&md, x, NULL, y8, NULL, NULL);
    int y_kept = 1;
    for (size_t i = 0; i < sizeof y8; i++)
        y_kept &= ((const uint8_t *)y8)[i] == 0xA5;
    CHECK(mst == SDPA_ERR_OVERFLOW && y_kept,
          "a layer whose x has 2^64 floats: status %d (%s), want SDPA_ERR_OVERFLOW, y %s", mst,
          sdpa_strerror(mst), y_kept ? "untouched" : "WRITTEN");
    md.d_in = 8;
    md.batch = 1, md.len_q = 3, md.len_kv = (int64_t)1 << 40, md.d_kv = 8;
    md.heads_q = (int64_t)1 << 20, md.head_dim = SDPA_MAX_HEAD_DIM;
    CHECK(sdpa_mha_workspace_size(&md) == 0, "a cross-attention layer of 2^40 keys x 2^36 "
          "features has a workspace size");
}

/* ---- the top of the address space: every kind of view goes through one extent rule --- */

/* A view whose extent fits int64 but reaches past 2^56 (the top of any 64-bit user
 * address space) cannot describe the caller's memory: refused with SDPA_ERR_OVERFLOW
 * before anything is read or written, whatever kind of view it is and wherever the
 * outputs lie. The masks are the independent check's find: a boolean mask with stride_b
 * INT64_MAX - 100 (or an fp32 one with INT64_MAX / 4 - 100), B = 2, crashed (o below
 * the mask) or gave SDPA_ERR_OVERLAP (o above it), because only tensors were held to the
 * address-space rule. */
static void address_top(void) {
    /* masks, with o placed below and then above the mask in one buffer */
    for (int kind = 0; kind < 2; kind++)
        for (int o_above = 0; o_above < 2; o_above++)
            for (int entry = 0; entry < 3; entry++) {
                fixture *f = malloc(sizeof *f);
                fixture_init(f);
                enum { ON = XB * XH * XT * XD, MN = XT * XT * 4 };
                float *buf = malloc((ON + MN) * sizeof(float) + sizeof f->lse);
                float *o = o_above ? buf + MN : buf, *mbuf = o_above ? buf : buf + ON;
                memset(buf, 0xA5, (ON + MN) * sizeof(float));
                f->to = sdpa_tensor_bhtd(o, SDPA_F32, XH, XT, XD);
                if (kind == 0) {
                    memset(mbuf, 1, MN * sizeof(float));
                    f->d.mask = (sdpa_mask){.data = mbuf, .kind = SDPA_MASK_BOOL,
                                            .stride_b = INT64_MAX - 100, .stride_q = XT};
                } else {
                    for (int e = 0; e < MN; e++)
                        mbuf[e] = 0.5f;
                    f->d.mask = (sdpa_mask){.data = mbuf, .kind = SDPA_MASK_ADDITIVE,
                                            .stride_b = INT64_MAX / 4 - 100, .stride_q = XT};
                }
                sdpa_status st;
                float *w = NULL;
                if (entry == 2) { /* the weights, with a valid lse */
                    w = malloc(XB * XH * XT * XT * sizeof(float));
                    memset(w, 0xA5, XB * XH * XT * XT * sizeof(float));
                    st = sdpa_attention_weights(&f->d, &f->tq, &f->tk, f->lse, w);
                } else {
                    st = entry ? sdpa_reference(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse)
                               : sdpa_forward(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse);
                }
                int kept = 1;
                for (int e = 0; e < ON; e++)
                    kept &= memcmp(&o[e], &(uint32_t){0xA5A5A5A5u}, 4) == 0;
                for (int e = 0; w && e < XB * XH * XT * XT; e++)
                    kept &= memcmp(&w[e], &(uint32_t){0xA5A5A5A5u}, 4) == 0;
                CHECK(st == SDPA_ERR_OVERFLOW && kept,
                      "%s mask with stride_b near INT64_MAX, o %s it (%s): got %d (%s), outputs "
                      "%s", kind ? "fp32 additive" : "boolean", o_above ? "above" : "below",
                      entry == 2 ? "weights" : entry ? "reference" : "forward", st,
                      sdpa_strerror(st), kept ? "untouched" : "WRITTEN");
                free(w);
                free(buf);
                free(f);
            }
    /* every kind of view and caller array starting one element under 2^56 (4 bytes for
     * the float and byte ones, 8 for the int64 ones) and at least two elements long:
     * refused without a read (a read there faults) */
    char *const top = (char *)(uintptr_t)(((uint64_t)1 << 56) - 4);
    char *const top8 = (char *)(uintptr_t)(((uint64_t)1 << 56) - 8);
    static const char *names[] = {
        "q stride_b 2^60 (B = 2)", "q data", "k data", "v data", "o data", "lse",
        "boolean mask", "additive mask", "q_lens", "kv_lens", "cu_seqlens_q",
        "ALiBi slopes", "sinks", "weights",
    };
    for (int c = 0; c < N(names); c++)
        for (int ref = 0; ref < 2; ref++) {
            fixture *f = malloc(sizeof *f);
            fixture_init(f);
            sdpa_desc *d = &f->d;
            float *lse = f->lse, *w = NULL;
            switch (c) {
            case 0: f->tq.stride_b = (int64_t)1 << 60; break;
            case 1: f->tq.data = top; break;
            case 2: f->tk.data = top; break;
            case 3: f->tv.data = top; break;
            case 4: f->to.data = top; break;
            case 5: lse = (float *)(void *)top; break;
            case 6: d->mask = (sdpa_mask){.data = top, .kind = SDPA_MASK_BOOL, .stride_q = XT}; break;
            case 7: d->mask = (sdpa_mask){.data = top, .kind = SDPA_MASK_ADDITIVE}; break;
            case 8: d->q_lens = (const int64_t *)(const void *)top8; break;
            case 9: d->kv_lens = (const int64_t *)(const void *)top8; break;
            case 10:
                d->cu_seqlens_q = (const int64_t *)(const void *)top8;
                d->cu_seqlens_kv = f->cu;
                break;
            case 11: d->alibi_slopes = (const float *)(const void *)top; break;
            case 12: d->sinks = (const float *)(const void *)top; break;
            default: w = (float *)(void *)top; break;
            }
            sdpa_status st;
            if (w)
                st = sdpa_attention_weights(d, &f->tq, &f->tk, f->lse, w);
            else
                st = ref ? sdpa_reference(d, &f->tq, &f->tk, &f->tv, &f->to, lse)
                         : sdpa_forward(d, &f->tq, &f->tk, &f->tv, &f->to, lse);
            CHECK(st == SDPA_ERR_OVERFLOW && untouched(f),
                  "%s ending past 2^56 (%s): got %d (%s), want SDPA_ERR_OVERFLOW, outputs %s",
                  names[c], ref ? "reference" : "forward", st, sdpa_strerror(st),
                  untouched(f) ? "untouched" : "WRITTEN");
            free(f);
        }
}

/* ---- KV caches: special values, page edges, the limits ---------------------------------- */

/* Special values in a paged quantized cache: a NaN or +inf scale of one key row (the
 * header: a scale is data, NaN propagates like any NaN in K or V; inf times the row's
 * code 0 is NaN too), and an fp8 NaN code in K or V. Exactly the rows that see the key
 * are hit, as the reference says (th_run_case_with compares NaN positions); the even
 * rows, whose boolean mask hides the key, and the rows causal hides stay finite. */
typedef struct kv_special {
    int which; /* 0 NaN K scale, 1 +inf K scale, 2 NaN V scale, 3 +inf V scale,
                  4 NaN code in K (e4m3), 5 NaN code in V (e5m2, element KV_NAN_DIM) */
    int64_t key;
} kv_special;

enum { KV_NAN_DIM = 3 };

static void fill_kv_special(sc_tensors *t, const sc_case *c, void *ctx) {
    const kv_special *ks = ctx;
    const int v = ks->which == 2 || ks->which == 3 || ks->which == 5;
    const sdpa_tensor *cache = v ? &t->v : &t->k;
    const sdpa_scales *sc = v ? &t->desc.v_scales : &t->desc.k_scales;
    const int64_t P = t->desc.pages.page_size, page = t->table[ks->key / P], slot = ks->key % P;
    uint8_t *codes = (uint8_t *)cache->data;
    for (int64_t h = 0; h < c->Hkv; h++) {
        const int64_t e = page * cache->stride_b + h * cache->stride_h + slot * cache->stride_t;
        const int64_t se = page * sc->stride_b + h * sc->stride_h + slot * sc->stride_t;
        if (ks->which <= 3)
            sc_store((void *)(uintptr_t)sc->data, (size_t)se, sc->dtype,
                     ks->which % 2 ? INFINITY : NAN);
        if (ks->which == 1 || ks->which == 3)
            codes[e] = 0; /* int8 code 0: 0 x inf */
        if (ks->which >= 4)
            codes[e + KV_NAN_DIM] = 0x7f; /* NaN in e4m3 and in e5m2 */
    }
    const sdpa_mask *m = &t->desc.mask;
    for (int64_t i = 0; i < c->Tq; i++)
        for (int64_t j = 0; j < c->Tkv; j++)
            ((uint8_t *)t->mask)[i * m->stride_q + j] = !(j == ks->key && i % 2 == 0);
}

static void kv_special_values_in(int compute, int64_t Tq) {
    static const sdpa_dtype dts[6][2] = {{SDPA_I8, SDPA_F32},       {SDPA_I8, SDPA_BF16},
                                         {SDPA_F16, SDPA_I8},       {SDPA_F32, SDPA_I8},
                                         {SDPA_FP8_E4M3, SDPA_F16}, {SDPA_F32, SDPA_FP8_E5M2}};
    static const char *names[6] = {"NaN K scale", "+inf K scale", "NaN V scale", "+inf V scale",
                                   "NaN e4m3 code in K", "NaN e5m2 code in V"};
    for (int which = 0; which < 6; which++) {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = Tq, .Tkv = 70, .Dk = 16, .Dv = 16,
                     .causal = 1, .page = which % 2 ? 5 : 16, .mask = SDPA_MASK_BOOL,
                     .mask_bcast = SC_BCAST_B | SC_BCAST_H,
                     .qscale_dt = which == 2 ? SDPA_F16 : SDPA_F32,
                     .dt = {SDPA_F32, dts[which][0], dts[which][1], SDPA_F32},
                     .compute = compute, .seed = seed_of(12, which, (uint64_t)Tq)};
        kv_special ks = {which, 60};
        sc_tensors out;
        if (!th_run_case_with(&c, names[which], fill_kv_special, &ks, &out))
            continue;
        int ok = 1;
        for (int64_t h = 0; h < c.Hq; h++)
            for (int64_t i = 0; i < c.Tq; i++) {
                const int hit = sees(&c, i, ks.key) && i % 2 == 1;
                const float *o = sc_at(&out.o, 0, h, i), lse = out.lse[h * c.Tq + i];
                for (int64_t d = 0; d < c.Dv; d++) {
                    if (!hit || (which == 5 && d != KV_NAN_DIM))
                        ok &= isfinite(o[d]);
                    else if (which == 3)
                        ok &= !isfinite(o[d]) && (d != 0 || isnan(o[d]));
                    else
                        ok &= isnan(o[d]);
                }
                ok &= hit && (which == 0 || which == 1 || which == 4) ? isnan(lse) : isfinite(lse);
            }
        CHECK(ok, "%s of key %lld (%s compute, Tq %lld): only the rows that see it (not the "
              "masked even rows, not the rows before it) must be hit", names[which],
              (long long)ks.key, compute == SDPA_COMPUTE_BF16 ? "bf16" : "fp32", (long long)Tq);
        sc_tensors_free(&out);
    }
}

static void kv_special_values(void) { kv_special_values_in(SDPA_COMPUTE_F32, 24); }

/* The same in the bf16 compute mode, for the bf16 suite (which runs on every table that
 * computes it, avx512bf16 included, where this suite does not): also at Tq = 2, rows that
 * decode's kernels take (avx512bf16's decode pair decodes the codes and scales in
 * registers). */
void extremes_kv_special_bf16(void) {
    kv_special_values_in(SDPA_COMPUTE_BF16, 24);
    kv_special_values_in(SDPA_COMPUTE_BF16, 2);
}

/* Pages longer than len_kv (one page per entry, partly used), a single key in pages of
 * one, and a single key in one page: the same bits as the contiguous cache, every
 * storage type; with one key, o is that key's value row exactly (weight 1). */
static void kv_page_edges(void) {
    static const sdpa_dtype dts[] = {SDPA_F16, SDPA_I8, SDPA_FP8_E4M3, SDPA_I4};
    static const sc_case shapes[] = {
        {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 7, .Tkv = 20, .Dk = 8, .Dv = 8, .causal = 1, .page = 27,
         .lens = SC_LENS_KV},
        {.B = 2, .Hq = 2, .Hkv = 1, .Tq = 1, .Tkv = 1, .Dk = 8, .Dv = 8, .page = 1},
        {.B = 1, .Hq = 2, .Hkv = 2, .Tq = 5, .Tkv = 1, .Dk = 8, .Dv = 8, .causal = 2, .page = 1},
        {.B = 1, .Hq = 3, .Hkv = 1, .Tq = 1, .Tkv = 1, .Dk = 8, .Dv = 8, .page = 64},
    };
    for (int s = 0; s < N(shapes); s++)
        for (int d = 0; d < N(dts); d++) {
            sc_case c = shapes[s], flat_c;
            c.dt[1] = c.dt[2] = dts[d];
            c.seed = seed_of(13, s, d);
            flat_c = c;
            flat_c.page = 0;
            sc_tensors flat, paged, ref;
            const sdpa_status s1 = run_fused(&flat_c, &flat), s2 = run_fused(&c, &paged);
            th_tensors_make(&ref, &c);
            const sdpa_status s3 =
                sdpa_reference(&ref.desc, &ref.q, &ref.k, &ref.v, &ref.o, ref.lse);
            const size_t ob = flat.elems[3] * sizeof(float), lb = flat.elems[4] * sizeof(float);
            int same = s1 == SDPA_OK && s2 == SDPA_OK && s3 == SDPA_OK &&
                       memcmp(flat.bufs[3], paged.bufs[3], ob) == 0 &&
                       memcmp(flat.lse, paged.lse, lb) == 0;
            if (c.Tkv == 1) /* the reference's o is the dequantized value row, exactly */
                same &= memcmp(paged.bufs[3], ref.bufs[3], ob) == 0;
            char desc[512];
            CHECK(same, "page %lld [%s]: status %d/%d/%d, paged and contiguous (and, with one "
                  "key, the value row) must be the same bits", (long long)c.page,
                  th_case_str(&c, desc, sizeof desc), s1, s2, s3);
            sc_tensors_free(&flat);
            sc_tensors_free(&paged);
            sc_tensors_free(&ref);
            th_run_case(&c, "page edges");
        }
}

/* A paged int8 cache in miniature, with the fixture's q, o and lse: the XB entries of XT
 * keys in pages of KP, a pool of KNP pages [KNP, XH, KP, XD] for K and for V, per-token
 * f32 scales [KNP, XH, KP]. */
enum { KP = 2, KPER = 2, KNP = XB * KPER };

typedef struct kv_fixture {
    fixture f;
    int8_t k[KNP * XH * KP * XD], v[KNP * XH * KP * XD];
    float ks[KNP * XH * KP], vs[KNP * XH * KP];
    int32_t table[XB * KPER];
} kv_fixture;

static void kv_fixture_init(kv_fixture *x) {
    fixture_init(&x->f);
    uint64_t rng = 12;
    for (int i = 0; i < KNP * XH * KP * XD; i++) {
        x->k[i] = (int8_t)((int)(sc_rand_u64(&rng) % 255) - 127);
        x->v[i] = (int8_t)((int)(sc_rand_u64(&rng) % 255) - 127);
    }
    for (int i = 0; i < KNP * XH * KP; i++)
        x->ks[i] = x->vs[i] = 1.0f / 127.0f;
    const int32_t table[XB * KPER] = {2, 0, 3, 1};
    memcpy(x->table, table, sizeof table);
    sdpa_desc *d = &x->f.d;
    d->k_scales = (sdpa_scales){.data = x->ks, .dtype = SDPA_F32, .stride_b = XH * KP,
                                .stride_h = KP, .stride_t = 1};
    d->v_scales = d->k_scales;
    d->v_scales.data = x->vs;
    d->pages = (sdpa_pages){x->table, KPER, KP, KNP};
    x->f.tk = (sdpa_tensor){x->k, SDPA_I8, XH * KP * XD, KP * XD, XD};
    x->f.tv = (sdpa_tensor){x->v, SDPA_I8, XH * KP * XD, KP * XD, XD};
}

/* The KV views at the int64 and address-space limits, and the block table's entries and
 * the pool's sizes at theirs: refused with the documented status, o and lse untouched, by
 * both entry points, nothing read where a read would fault. Then the limits that are
 * valid: page_size SDPA_MAX_DIM (one page per entry), and num_pages SDPA_MAX_DIM with
 * pages that alias (stride_b 0) and table entries up to INT32_MAX, which must give the
 * same bits as the contiguous cache. */
static void kv_limits(void) {
    const int64_t M = INT64_MAX;
    const void *top = (const void *)(uintptr_t)(((uint64_t)1 << 56) - 4);
    static const char *names[] = {
        "pool stride_b INT64_MAX",         "pool stride_t INT64_MAX",
        "pool stride_h 2^62 (past 2^56)",  "int4 pool stride_b INT64_MAX - 1",
        "scales stride_b INT64_MAX",       "scales stride_t 2^62 (bytes overflow)",
        "scales stride_h 2^54 + 3 (past 2^56)", "table stride INT64_MAX",
        "table stride 2^61 (bytes past PTRDIFF_MAX)", "table stride 2^54 + 3 (past 2^56)",
        "num_pages SDPA_MAX_DIM, page stride 2^20", "page_size SDPA_MAX_DIM, slot stride 2^20",
        "table entry INT32_MAX (4 pages)", "table entry INT32_MIN",
        "page_size SDPA_MAX_DIM + 1",      "num_pages SDPA_MAX_DIM + 1",
        "page_size INT64_MAX",             "num_pages INT64_MIN",
        "block table ending past 2^56",    "scales ending past 2^56",
    };
    static const sdpa_status want[] = {
        SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,
        SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,
        SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,
        SDPA_ERR_BAD_ARGUMENT, SDPA_ERR_BAD_ARGUMENT, SDPA_ERR_BAD_ARGUMENT, SDPA_ERR_BAD_ARGUMENT,
        SDPA_ERR_BAD_ARGUMENT, SDPA_ERR_BAD_ARGUMENT, SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,
    };
    _Static_assert(sizeof names / sizeof names[0] == sizeof want / sizeof want[0],
                   "one expected status per case");
    for (int c = 0; c < N(names); c++)
        for (int ref = 0; ref < 2; ref++) {
            kv_fixture *x = malloc(sizeof *x);
            kv_fixture_init(x);
            sdpa_desc *d = &x->f.d;
            switch (c) {
            case 0: x->f.tk.stride_b = M; break;
            case 1: x->f.tv.stride_t = M; break;
            case 2: x->f.tk.stride_h = (int64_t)1 << 62; break;
            case 3: /* int4 V, rows of XD / 2 bytes: the halved stride still overflows */
                x->f.tv.dtype = SDPA_I4;
                x->f.tv.stride_b = M - 1;
                break;
            case 4: d->k_scales.stride_b = M; break;
            case 5: d->v_scales.stride_t = (int64_t)1 << 62; break;
            case 6: d->k_scales.stride_h = ((int64_t)1 << 54) + 3; break;
            case 7: d->pages.stride = M; break;
            case 8: d->pages.stride = (int64_t)1 << 61; break;
            case 9: d->pages.stride = ((int64_t)1 << 54) + 3; break;
            case 10:
                d->pages.num_pages = SDPA_MAX_DIM;
                x->f.tk.stride_b = (int64_t)1 << 20;
                break;
            case 11:
                d->pages.page_size = SDPA_MAX_DIM;
                x->f.tk.stride_t = (int64_t)1 << 20;
                break;
            case 12: x->table[3] = INT32_MAX; break;
            case 13: x->table[1] = INT32_MIN; break;
            case 14: d->pages.page_size = SDPA_MAX_DIM + 1; break;
            case 15: d->pages.num_pages = SDPA_MAX_DIM + 1; break;
            case 16: d->pages.page_size = M; break;
            case 17: d->pages.num_pages = INT64_MIN; break;
            case 18: d->pages.block_table = top; break;
            default: d->k_scales.data = top; break;
            }
            const fixture *f = &x->f;
            const sdpa_status st = ref ? sdpa_reference(d, &f->tq, &f->tk, &f->tv, &f->to, x->f.lse)
                                       : sdpa_forward(d, &f->tq, &f->tk, &f->tv, &f->to, x->f.lse);
            CHECK(st == want[c] && untouched(f), "KV cache, %s (%s): got %d (%s), want %d, "
                  "outputs %s", names[c], ref ? "reference" : "forward", st, sdpa_strerror(st),
                  want[c], untouched(f) ? "untouched" : "WRITTEN");
            free(x);
        }

    /* the valid limits, against the contiguous int8 cache of the same rows */
    for (int variant = 0; variant < 3; variant++) {
        kv_fixture *x = malloc(sizeof *x), *y = malloc(sizeof *y);
        kv_fixture_init(x);
        kv_fixture_init(y);
        sdpa_desc *d = &x->f.d;
        if (variant == 0) { /* one page per entry, SDPA_MAX_DIM slots long (3 used) */
            d->pages.page_size = SDPA_MAX_DIM;
            d->pages.stride = 1;
            x->table[0] = 1, x->table[1] = 0;
        } else { /* SDPA_MAX_DIM pages that all alias page 0 (stride_b 0), entries up to
                    INT32_MAX: every index reads page 0's memory */
            d->pages.num_pages = SDPA_MAX_DIM;
            x->f.tk.stride_b = x->f.tv.stride_b = 0;
            d->k_scales.stride_b = d->v_scales.stride_b = 0;
            const int32_t t[XB * KPER] = {INT32_MAX, variant == 1 ? 1 << 30 : 0, 0, INT32_MAX - 1};
            memcpy(x->table, t, sizeof t);
        }
        /* y: the rows each key reads, copied to a contiguous [XB, XH, XT, XD] cache */
        int8_t ck[XB * XH * XT * XD], cv[XB * XH * XT * XD];
        float cks[XB * XH * XT], cvs[XB * XH * XT];
        for (int64_t b = 0; b < XB; b++)
            for (int64_t h = 0; h < XH; h++)
                for (int64_t j = 0; j < XT; j++) {
                    const int64_t P = d->pages.page_size;
                    const int64_t page = x->table[b * d->pages.stride + j / P], slot = j % P;
                    const int64_t e = page * x->f.tk.stride_b + h * x->f.tk.stride_h + slot * XD;
                    const int64_t se = page * d->k_scales.stride_b + h * KP + slot;
                    const int64_t r = (b * XH + h) * XT + j;
                    memcpy(ck + r * XD, x->k + e, XD);
                    memcpy(cv + r * XD, x->v + e, XD);
                    cks[r] = x->ks[se], cvs[r] = x->vs[se];
                }
        y->f.d.pages = (sdpa_pages){0};
        y->f.tk = sdpa_tensor_bhtd(ck, SDPA_I8, XH, XT, XD);
        y->f.tv = sdpa_tensor_bhtd(cv, SDPA_I8, XH, XT, XD);
        y->f.d.k_scales = (sdpa_scales){.data = cks, .dtype = SDPA_F32, .stride_b = XH * XT,
                                        .stride_h = XT, .stride_t = 1};
        y->f.d.v_scales = y->f.d.k_scales;
        y->f.d.v_scales.data = cvs;
        int same = 1;
        sdpa_status st[4];
        for (int ref = 0; ref < 2; ref++) {
            fixture *a = &x->f, *b = &y->f;
            st[2 * ref] = ref ? sdpa_reference(&a->d, &a->tq, &a->tk, &a->tv, &a->to, a->lse)
                              : sdpa_forward(&a->d, &a->tq, &a->tk, &a->tv, &a->to, a->lse);
            st[2 * ref + 1] = ref ? sdpa_reference(&b->d, &b->tq, &b->tk, &b->tv, &b->to, b->lse)
                                  : sdpa_forward(&b->d, &b->tq, &b->tk, &b->tv, &b->to, b->lse);
            same &= st[2 * ref] == SDPA_OK && st[2 * ref + 1] == SDPA_OK &&
                    memcmp(a->o, b->o, sizeof a->o) == 0 &&
                    memcmp(a->lse, b->lse, sizeof a->lse) == 0;
        }
        CHECK(same, "KV cache at the valid limits (%s): status %d/%d (forward), %d/%d "
              "(reference); paged and contiguous must be the same bits",
              variant ? "num_pages SDPA_MAX_DIM, entries up to INT32_MAX"
                      : "page_size SDPA_MAX_DIM",
              st[0], st[1], st[2], st[3]);
        free(x);
        free(y);
    }
}

/* sdpa_kv_write into the miniature cache at the limits: strides of the cache, of its
 * scales and of its table near INT64_MAX, table entries at INT32_MAX and INT32_MIN, pos
 * at the int64 limits, a page SDPA_MAX_DIM slots long, a cache ending past 2^56: refused
 * with the documented status, the cache and its scales untouched. */
static void kv_write_limits(void) {
    const int64_t M = INT64_MAX;
    static const char *names[] = {
        "cache stride_b INT64_MAX", "cache stride_t 2^62 (past 2^56)", "scales stride_b INT64_MAX",
        "table stride INT64_MAX",   "table entry INT32_MAX",           "table entry INT32_MIN",
        "pos INT64_MAX",            "pos INT64_MIN",                   "len_kv SDPA_MAX_DIM + 1",
        "page_size SDPA_MAX_DIM, slot stride 2^20",                    "cache ending past 2^56",
    };
    static const sdpa_status want[] = {
        SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,     SDPA_ERR_OVERFLOW,      SDPA_ERR_OVERFLOW,
        SDPA_ERR_BAD_ARGUMENT, SDPA_ERR_BAD_ARGUMENT, SDPA_ERR_BAD_ARGUMENT,  SDPA_ERR_BAD_ARGUMENT,
        SDPA_ERR_BAD_DIMENSION, SDPA_ERR_OVERFLOW,    SDPA_ERR_OVERFLOW,
    };
    _Static_assert(sizeof names / sizeof names[0] == sizeof want / sizeof want[0],
                   "one expected status per case");
    for (int c = 0; c < N(names); c++) {
        kv_fixture *x = malloc(sizeof *x);
        kv_fixture_init(x);
        memset(x->k, 0x5A, sizeof x->k);
        memset(x->ks, 0x5A, sizeof x->ks);
        float src[XB * XH * XD];
        uint64_t rng = 13;
        for (int i = 0; i < XB * XH * XD; i++)
            src[i] = sc_rand_float(&rng);
        int64_t pos[XB] = {1, 2}; /* entry 0 writes key 1 (table slot 0), entry 1 key 2 */
        sdpa_kv_write_desc w = {.batch = XB, .heads = XH, .len = 1, .dim = XD, .len_kv = XT,
                                .pos = pos, .pages = x->f.d.pages, .scales = x->f.d.k_scales,
                                .compute_scales = 1};
        const sdpa_tensor s = sdpa_tensor_bhtd(src, SDPA_F32, XH, 1, XD);
        sdpa_tensor cache = x->f.tk;
        switch (c) {
        case 0: cache.stride_b = M; break;
        case 1: cache.stride_t = (int64_t)1 << 62; break;
        case 2: w.scales.stride_b = M; break;
        case 3: w.pages.stride = M; break;
        case 4: x->table[0] = INT32_MAX; break;
        case 5: x->table[KPER + 1] = INT32_MIN; break;
        case 6: pos[1] = M; break;
        case 7: pos[0] = INT64_MIN; break;
        case 8: w.len_kv = SDPA_MAX_DIM + 1; break;
        case 9:
            w.pages.page_size = SDPA_MAX_DIM;
            cache.stride_t = (int64_t)1 << 20;
            break;
        default: cache.data = (void *)(uintptr_t)(((uint64_t)1 << 56) - 4); break;
        }
        const sdpa_status st = sdpa_kv_write(&w, &s, &cache);
        int kept = 1;
        for (size_t i = 0; i < sizeof x->k; i++)
            kept &= (uint8_t)x->k[i] == 0x5A;
        for (size_t i = 0; i < sizeof x->ks; i++)
            kept &= ((const uint8_t *)x->ks)[i] == 0x5A;
        CHECK(st == want[c] && kept, "sdpa_kv_write, %s: got %d (%s), want %d, cache %s",
              names[c], st, sdpa_strerror(st), want[c], kept ? "untouched" : "WRITTEN");
        free(x);
    }
}

void suite_extremes(void) {
    scale_default();
    scale_tiny();
    scale_huge();
    infinities();
    minus_inf_score();
    minus_inf_part();
    nan_key_row();
    subnormals();
    logits_1e38();
    head_dims();
    single_key();
    long_sequences();
    far_offsets();
    limits();
    address_top();
    kv_special_values();
    kv_page_edges();
    kv_limits();
    if (th_isa == sdpa_get_isa() || th_isa == SDPA_ISA_SCALAR)
        kv_write_limits(); /* no kernel table involved: once or twice per run */
}
