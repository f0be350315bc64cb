/*
 * test_bf16.c - the bf16 compute mode (SDPA_COMPUTE_BF16) end to end, on every ISA, under
 * the error model include/sdpa.h states, with every descriptor feature.
 *
 * Each case runs three ways: sdpa_forward in the mode; sdpa_reference in the mode (the
 * same roundings, P rounded at the row's final max); and the independent oracle
 * (oracle.h, double precision) on a copy of the inputs whose q, k and v are rounded to
 * bf16, which is the exact attention a of the mode's operands, with its weights w. Per
 * output element the bound of the header is computed from those weights:
 *     |o_d - a_d| <= (2^-8 + 2 D + 2 g(2 Tkv)) A_d + output rounding,
 *     A_d = sum_j w_j |v^_jd|,
 *     D = |scale| g(Dk) max_j sum_d |q^_d k^_jd| + 4 u max_j |s_j| + 2^-20 (the exp)
 * and against the reference the 2^-8 becomes 2^-7. Nothing is tuned: a wrong rounding
 * (an unrounded P would pass it: roundings_seen checks that the roundings are made),
 * a lost key or a wrong scale are far outside. The second-order terms of the model (the
 * products of these small quantities) are covered by a factor 1 + 2^-6.
 *
 * Also: results bit-identical at 1 and 3 threads; the attention weights under the mode
 * against the oracle's; the roundings are the mode's, not merely within the bound; a masked
 * key's inf in V stays out; extremes behave as the reference in the mode does; an
 * unknown mode is refused.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/convert.h"
#include "harness.h"
#include "oracle.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* The header's u: 2^-23, twice fp32's unit roundoff (BFMMLA's sums round to odd). */
#define U 0x1p-23

static double g(double n) { return n * U / (1.0 - n * U); }

/* Round every element of a view's buffer to bf16 in place (fp32 and f16 storage; bf16
 * storage is already). Gaps of padded layouts are rounded too, harmlessly. */
static void round_buffer(void *buf, size_t elems, sdpa_dtype dt) {
    if (dt == SDPA_BF16)
        return;
    for (size_t e = 0; e < elems; e++)
        sc_store(buf, e, dt, sdpa_bf16_to_f32(sdpa_f32_to_bf16(sc_load(buf, e, dt))));
}

/* Unit roundoff of an output dtype (its own rounding when O is stored). */
static double out_u(sdpa_dtype dt) {
    return dt == SDPA_BF16 ? 0x1p-8 : dt == SDPA_F16 ? 0x1p-11 : U;
}

typedef struct bound_ctx {
    const sc_case *c;
    sc_tensors *x; /* the rounded inputs */
    double *w;     /* the oracle's weights [VB, Hq, Tq, Tkv] */
    int64_t Tq, Tkv;
} bound_ctx;

/* D of row (vb, h, i), from the rounded operands. */
static double score_error(const bound_ctx *b, int64_t vb, int64_t h, int64_t i) {
    const sc_case *c = b->c;
    const sdpa_desc *d = &b->x->desc;
    const int64_t hk = h / (c->Hq / c->Hkv);
    const double scale = fabs((double)(d->scale != 0.0f ? d->scale : 1.0f / sqrtf((float)c->Dk)));
    double mag = 0;
    for (int64_t j = 0; j < b->Tkv; j++) {
        double m = 0;
        for (int64_t dd = 0; dd < c->Dk; dd++)
            m += fabs((double)sc_get(&b->x->q, vb, h, i, dd) * (double)sc_get(&b->x->k, vb, hk, j, dd));
        mag = fmax(mag, m);
    }
    double smax = scale * mag;
    if (d->alibi_slopes)
        smax += fabs((double)d->alibi_slopes[h]) * (double)b->Tkv;
    if (c->mask == SDPA_MASK_ADDITIVE)
        smax += 2.0; /* case.c's additive masks are uniform in [-2, 2) where finite */
    if (d->softcap > 0.0f)
        smax = fmin(smax, (double)d->softcap);
    return scale * g((double)c->Dk) * mag + 4.0 * U * smax + 0x1p-20;
}

/* A_d of row (vb, h, i). */
static double weighted_v(const bound_ctx *b, int64_t vb, int64_t h, int64_t i, int64_t dd) {
    const int64_t hk = h / (b->c->Hq / b->c->Hkv);
    const double *wr = b->w + ((vb * b->c->Hq + h) * b->Tq + i) * b->Tkv;
    double a = 0;
    for (int64_t j = 0; j < b->Tkv; j++)
        if (wr[j] != 0.0)
            a += wr[j] * fabs((double)sc_get(&b->x->v, vb, hk, j, dd));
    return a;
}

/* One case in the mode on th_isa; returns 1 if every check passed. */
static int run_bf16(const sc_case *c, const char *label) {
    char cs[512];
    th_case_str(c, cs, sizeof cs);
    sc_tensors f, f3, r, x;
    th_tensors_make(&f, c);
    th_tensors_make(&f3, c);
    th_tensors_make(&r, c);
    th_tensors_make(&x, c);
    f.desc.compute = f3.desc.compute = r.desc.compute = SDPA_COMPUTE_BF16;
    f.desc.num_threads = 1;
    f3.desc.num_threads = 3;
    for (int v = 0; v < 3; v++)
        round_buffer(x.bufs[v], x.elems[v], c->dt[v]);

    const sdpa_status sf = sdpa_forward(&f.desc, &f.q, &f.k, &f.v, &f.o, f.lse);
    const sdpa_status s3 = sdpa_forward(&f3.desc, &f3.q, &f3.k, &f3.v, &f3.o, f3.lse);
    const sdpa_status sr = sdpa_reference(&r.desc, &r.q, &r.k, &r.v, &r.o, r.lse);
    int ok = CHECK(sf == SDPA_OK && s3 == SDPA_OK && sr == SDPA_OK,
                   "%s: %s: status fused %d/%d reference %d", label, cs, sf, s3, sr);
    const int64_t VB = f.VB, Tq = f.desc.len_q, Tkv = f.desc.len_kv;
    const size_t no = (size_t)(VB * c->Hq * Tq * c->Dv), nl = (size_t)(VB * c->Hq * Tq);
    double *ao = malloc(no * sizeof(double)), *al = malloc(nl * sizeof(double));
    double *aw = malloc((size_t)(VB * c->Hq * Tq * Tkv) * sizeof(double));
    if (!ok || !ao || !al || !aw || !th_oracle(&x.desc, &x.q, &x.k, &x.v, ao, al, aw)) {
        if (ok)
            CHECK(0, "%s: %s: out of memory for the oracle", label, cs);
        ok = 0;
        goto done;
    }
    ok &= CHECK(memcmp(f.bufs[3], f3.bufs[3], f.elems[3] * sc_dtype_size(c->dt[3])) == 0 &&
                    memcmp(f.lse, f3.lse, f.elems[4] * sizeof(float)) == 0,
                "%s: %s: 1 and 3 threads give different bits", label, cs);

    const bound_ctx bc = {c, &x, aw, Tq, Tkv};
    const double uo = out_u(c->dt[3]), second = 1.0 + 0x1p-6;
    double worst = 0, worst_ref = 0;
    int64_t bad = 0, bad_ref = 0, bad_lse = 0;
    for (int64_t vb = 0; vb < VB; vb++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const size_t row = (size_t)((vb * c->Hq + h) * Tq + i);
                const double D = score_error(&bc, vb, h, i);
                const double e_out = 0x1p-8 + 2.0 * D + 2.0 * g(2.0 * (double)Tkv);
                const double e_ref = e_out + 0x1p-8;
                for (int64_t d = 0; d < c->Dv; d++) {
                    const double got = (double)sc_get(&f.o, vb, h, i, d);
                    const double want = ao[row * (size_t)c->Dv + (size_t)d];
                    const double ref = (double)sc_get(&r.o, vb, h, i, d);
                    const double A = weighted_v(&bc, vb, h, i, d);
                    /* the stored output's rounding, and its subnormal spacing */
                    const double store = uo * fabs(want) + (c->dt[3] == SDPA_F16 ? 0x1p-25 : 1e-38);
                    const double tol = second * e_out * A + store;
                    const double tol_ref = second * e_ref * A + 2.0 * store;
                    if (!(fabs(got - want) <= tol))
                        bad++;
                    if (!(fabs(got - ref) <= tol_ref))
                        bad_ref++;
                    if (A > 0) {
                        worst = fmax(worst, fabs(got - want) / A);
                        worst_ref = fmax(worst_ref, fabs(got - ref) / A);
                    }
                }
                /* lse: the score error, the sum of l, the log's rounding */
                const double lw = al[row], lg = (double)f.lse[row];
                if (isinf(lw) || isnan(lw))
                    bad_lse += !(lg == lw || (isnan(lw) && isnan(lg)));
                else
                    bad_lse += !(fabs(lg - lw) <= second * (D + 2.0 * g(2.0 * (double)Tkv)) +
                                                       2.0 * U * fabs(lw) + 1e-30);
            }
    ok &= CHECK(bad == 0 && bad_lse == 0,
                "%s: %s: %lld outputs, %lld lse outside the error model against the exact "
                "attention of the rounded operands (worst |o - a| / A = %.3g)",
                label, cs, (long long)bad, (long long)bad_lse, worst);
    ok &= CHECK(bad_ref == 0, "%s: %s: %lld outputs outside the model against the reference "
                "in the mode (worst |o - r| / A = %.3g)", label, cs, (long long)bad_ref, worst_ref);
    if (th_verbose)
        printf("  %-10s %s: worst |o - a|/A %.3g (2^-8 = %.3g), vs reference %.3g\n", label,
               sdpa_isa_name(th_isa), worst, 0x1p-8, worst_ref);
done:
    free(ao);
    free(al);
    free(aw);
    sc_tensors_free(&f);
    sc_tensors_free(&f3);
    sc_tensors_free(&r);
    sc_tensors_free(&x);
    return ok;
}

/* Shapes around the tiles and the plan's choices: few rows (K in place, P V on the fp32
 * tiles), many rows (the bf16 tiles where the table has them), grouped GQA, split-KV
 * (Tkv >= 1024 with few items), odd head dims. */
static void shapes(void) {
    static const int64_t s[][7] = {
        /* B, Hq, Hkv, Tq, Tkv, Dk, Dv */
        {1, 1, 1, 1, 1, 1, 1},       {1, 2, 2, 17, 33, 7, 9},     {2, 2, 1, 96, 130, 64, 64},
        {1, 1, 1, 97, 65, 128, 128}, {1, 4, 4, 200, 200, 80, 80}, {1, 2, 2, 33, 64, 31, 33},
        {1, 8, 2, 1, 300, 128, 128}, {2, 8, 1, 4, 129, 64, 64},   {1, 4, 4, 1, 2100, 64, 64},
        {1, 4, 1, 3, 1500, 96, 96},  {1, 2, 2, 130, 97, 256, 256}, {1, 1, 1, 40, 50, 576, 512},
    };
    for (int k = 0; k < N(s); k++)
        for (int causal = 0; causal < 3; causal += 2) {
            sc_case c = {.B = s[k][0], .Hq = s[k][1], .Hkv = s[k][2], .Tq = s[k][3],
                         .Tkv = s[k][4], .Dk = s[k][5], .Dv = s[k][6], .causal = causal,
                         .seed = 0xbf160000u + (uint64_t)(k * 3 + causal)};
            run_bf16(&c, "shape");
        }
}

/* Every storage dtype in and out. */
static void dtypes(void) {
    for (int q = 0; q < 3; q++)
        for (int kv = 0; kv < 3; kv++)
            for (int o = 0; o < 3; o++) {
                if ((q + kv + o) % 2 && q != kv) /* a spread of the 27, all 9 inputs */
                    continue;
                sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 40, .Tkv = 70, .Dk = 48, .Dv = 40,
                             .causal = SDPA_CAUSAL_BOTTOM_RIGHT,
                             .dt = {(sdpa_dtype)q, (sdpa_dtype)kv, (sdpa_dtype)kv, (sdpa_dtype)o},
                             .seed = 0xbf161000u + (uint64_t)(q * 9 + kv * 3 + o)};
                run_bf16(&c, "dtypes");
            }
}

/* Every feature of the descriptor under the mode. */
static void features(void) {
    const sc_case base = {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 50, .Tkv = 90, .Dk = 32, .Dv = 24};
    for (int f = 0; f < 12; f++) {
        sc_case c = base;
        c.seed = 0xbf162000u + (uint64_t)f;
        const char *what = "";
        switch (f) {
        case 0: c.mask = SDPA_MASK_BOOL; c.mask_hidden = 0.3f; what = "bool mask"; break;
        case 1: c.mask = SDPA_MASK_ADDITIVE; c.mask_hidden = 0.3f; c.mask_bcast = SC_BCAST_H;
                what = "additive mask"; break;
        case 2: c.window = 1; c.wl = 7; c.wr = 3; c.causal = 2; what = "window"; break;
        case 3: c.softcap = 5.0f; c.amplitude = 3.0f; what = "softcap"; break;
        case 4: c.alibi = 1; what = "alibi"; break;
        case 5: c.sinks = 1; what = "sinks"; break;
        case 6: c.lens = SC_LENS_PADDED; c.causal = 2; what = "padded lens"; break;
        case 7: c.lens = SC_LENS_VARLEN; c.causal = 1; what = "varlen"; break;
        case 8: c.lens = SC_LENS_KV; c.Tq = 1; c.Tkv = 1200; what = "kv_lens split"; break;
        case 9: c.dropout = 0.25f; what = "dropout"; break;
        case 10: c.layout = SC_PADDED; c.causal = 2; what = "padded layout"; break;
        case 11: c.Dk = 40; c.Dv = 32; c.v_in_k = 1; c.Tq = 3; c.Hkv = 1; what = "V in K"; break;
        }
        run_bf16(&c, what);
    }
}

/* The attention weights under the mode: the scores of the mode's rounded Q and K, not
 * rounded themselves (P is rounded only where it multiplies V). */
static void weights(void) {
    sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 40, .Tkv = 70, .Dk = 32, .Dv = 16,
                 .causal = 2, .seed = 0xbf163000u};
    char cs[512];
    th_case_str(&c, cs, sizeof cs);
    sc_tensors f, x;
    th_tensors_make(&f, &c);
    th_tensors_make(&x, &c);
    f.desc.compute = SDPA_COMPUTE_BF16;
    for (int v = 0; v < 3; v++)
        round_buffer(x.bufs[v], x.elems[v], c.dt[v]);
    const int64_t Tq = f.desc.len_q, Tkv = f.desc.len_kv, n = c.Hq * Tq * Tkv;
    float *wt = malloc((size_t)n * sizeof(float));
    double *ao = malloc((size_t)(c.Hq * Tq * c.Dv) * sizeof(double));
    double *al = malloc((size_t)(c.Hq * Tq) * sizeof(double));
    double *aw = malloc((size_t)n * sizeof(double));
    if (!wt || !ao || !al || !aw) {
        CHECK(0, "out of memory");
        goto done;
    }
    sdpa_status st = sdpa_forward(&f.desc, &f.q, &f.k, &f.v, &f.o, f.lse);
    if (st == SDPA_OK)
        st = sdpa_attention_weights(&f.desc, &f.q, &f.k, f.lse, wt);
    if (!CHECK(st == SDPA_OK && th_oracle(&x.desc, &x.q, &x.k, &x.v, ao, al, aw),
               "%s: status %d", cs, st))
        goto done;
    const bound_ctx bc = {&c, &x, aw, Tq, Tkv};
    int64_t bad = 0;
    for (int64_t h = 0; h < c.Hq; h++)
        for (int64_t i = 0; i < Tq; i++) {
            const double D = score_error(&bc, 0, h, i);
            for (int64_t j = 0; j < Tkv; j++) {
                const size_t e = (size_t)((h * Tq + i) * Tkv + j);
                bad += !(fabs((double)wt[e] - aw[e]) <=
                         (1.0 + 0x1p-6) * (2.0 * D + 2.0 * g(2.0 * (double)Tkv)) * aw[e] + 1e-30);
            }
        }
    CHECK(bad == 0, "%s: %lld weights outside 2 D + 2 g(2 Tkv) relative", cs, (long long)bad);
done:
    free(wt);
    free(ao);
    free(al);
    free(aw);
    sc_tensors_free(&f);
    sc_tensors_free(&x);
}

/* The mode's roundings are the ones made, not merely within the bound (an unrounded P
 * is more accurate and would pass it): in one block of keys the running max is the
 * final one, so the kernels' P is exp(s - max) rounded to bf16, which the test computes
 * from the rounded operands. The output's distance to that model must be far below its
 * distance to the same model without P's rounding, and to fp32 compute. Few rows (the
 * fp32 tiles on rounded operands) and many (the bf16 tiles where the table has them). */
static void roundings_seen(void) {
    static const int64_t tq[] = {8, 64};
    for (int k = 0; k < N(tq); k++) {
        sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = tq[k], .Tkv = 32, .Dk = 64, .Dv = 64,
                     .seed = 0xbf164000u + (uint64_t)k};
        sc_tensors a;
        th_tensors_make(&a, &c);
        a.desc.compute = SDPA_COMPUTE_BF16;
        const sdpa_status st = sdpa_forward(&a.desc, &a.q, &a.k, &a.v, &a.o, a.lse);
        const double scale = 1.0 / 8.0;
        double e_mode = 0, e_unrounded_p = 0, e_f32 = 0;
        for (int64_t i = 0; i < c.Tq; i++) {
            double s[32], s32[32], mx = -INFINITY, mx32 = -INFINITY;
            for (int64_t j = 0; j < c.Tkv; j++) {
                double t = 0, t32 = 0;
                for (int64_t d = 0; d < c.Dk; d++) {
                    const float q = sc_get(&a.q, 0, 0, i, d), kk = sc_get(&a.k, 0, 0, j, d);
                    t += (double)sdpa_bf16_to_f32(sdpa_f32_to_bf16(q)) *
                         (double)sdpa_bf16_to_f32(sdpa_f32_to_bf16(kk));
                    t32 += (double)q * (double)kk;
                }
                s[j] = (double)(float)(scale * t);
                s32[j] = scale * t32;
                mx = fmax(mx, s[j]);
                mx32 = fmax(mx32, s32[j]);
            }
            double p[32], pr[32], p32[32], l = 0, l32 = 0;
            for (int64_t j = 0; j < c.Tkv; j++) {
                p[j] = exp(s[j] - mx);
                pr[j] = (double)sdpa_bf16_to_f32(sdpa_f32_to_bf16((float)p[j]));
                p32[j] = exp(s32[j] - mx32);
                l += p[j];
                l32 += p32[j];
            }
            for (int64_t d = 0; d < c.Dv; d++) {
                double om = 0, ou = 0, of = 0;
                for (int64_t j = 0; j < c.Tkv; j++) {
                    const float v = sc_get(&a.v, 0, 0, j, d);
                    const double vb = (double)sdpa_bf16_to_f32(sdpa_f32_to_bf16(v));
                    om += pr[j] * vb;
                    ou += p[j] * vb;
                    of += p32[j] * (double)v;
                }
                const double o = (double)sc_get(&a.o, 0, 0, i, d);
                e_mode += (o - om / l) * (o - om / l);
                e_unrounded_p += (o - ou / l) * (o - ou / l);
                e_f32 += (o - of / l32) * (o - of / l32);
            }
        }
        CHECK(st == SDPA_OK && e_mode < 0.01 * e_unrounded_p && e_mode < 0.01 * e_f32,
              "%s Tq=%lld: squared distance to the mode's model %.3g, to it without P's "
              "rounding %.3g, to fp32 compute %.3g", sdpa_isa_name(th_isa), (long long)c.Tq,
              e_mode, e_unrounded_p, e_f32);
        sc_tensors_free(&a);
    }
}

/* A hidden key's inf in V stays out of the result in the mode too, on the tiles' paths
 * (many rows) and the fp32 ones (few); so does FLT_MAX, finite as stored but inf once
 * rounded to bf16 (the mode's operand). */
static void fill_inf_v(sc_tensors *t, const sc_case *c, float x) {
    /* key 5 is causal-hidden from rows 0..4 (top-left): its V row is x */
    for (int64_t b = 0; b < t->VB; b++)
        for (int64_t h = 0; h < c->Hkv; h++)
            for (int64_t d = 0; d < c->Dv; d++)
                sc_at(&t->v, b, h, 5)[d] = x;
}

static void hidden_inf(void) {
    static const int64_t tq[] = {3, 40};
    static const float big[] = {INFINITY, FLT_MAX};
    for (int k = 0; k < 2 * N(tq); k++) {
        sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = tq[k % N(tq)], .Tkv = 70, .Dk = 16,
                     .Dv = 16, .causal = SDPA_CAUSAL_TOP_LEFT,
                     .seed = 0xbf165000u + (uint64_t)k};
        sc_tensors t;
        th_tensors_make(&t, &c);
        fill_inf_v(&t, &c, big[k / N(tq)]);
        t.desc.compute = SDPA_COMPUTE_BF16;
        const sdpa_status st = sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse);
        int finite_before = 1, inf_after = 1;
        for (int64_t i = 0; i < c.Tq; i++)
            for (int64_t d = 0; d < c.Dv; d++) {
                const float o = sc_get(&t.o, 0, 0, i, d);
                if (i < 5)
                    finite_before &= isfinite(o);
                else
                    inf_after &= !isfinite(o);
            }
        CHECK(st == SDPA_OK && finite_before && inf_after,
              "%s Tq=%lld: rows that do not see the V row of %g must stay finite (%d), the "
              "others not (%d)", sdpa_isa_name(th_isa), (long long)c.Tq, (double)big[k / N(tq)],
              finite_before, inf_after);
        sc_tensors_free(&t);
    }
}

/* Extremes in the mode (tests/test_extremes.c runs them in fp32): non-finite inputs,
 * subnormal and huge values, huge and tiny scales, one key, Dk = 1 and wide heads.
 * Outside the error model's regime the reference in the mode defines the behaviour: the
 * same NaN and inf positions, and finite outputs within 2^-6 of the largest |V| (a
 * consistency check, not a precision one). */
typedef struct extreme {
    int what;
} extreme;

static void fill_extreme(sc_tensors *t, const sc_case *c, void *ctx) {
    const int what = ((const extreme *)ctx)->what;
    for (int64_t h = 0; h < c->Hkv; h++)
        for (int64_t d = 0; d < c->Dk; d++) {
            float *k3 = sc_at(&t->k, 0, h, 3);
            switch (what) {
            case 0: k3[d] = INFINITY; break;            /* +inf score: rows NaN */
            case 1: k3[d] = NAN; break;                 /* NaN key */
            case 2: k3[d] = -INFINITY; break;           /* -inf or NaN scores */
            case 3: /* subnormal Q and K: bf16 subnormals (DAZ tables read them as 0) */
                for (int64_t j = 0; j < t->desc.len_kv; j++)
                    sc_at(&t->k, 0, h, j)[d] *= 0x1p-128f;
                break;
            case 4: /* V near the top of the range */
                if (d < c->Dv)
                    for (int64_t j = 0; j < t->desc.len_kv; j++)
                        sc_at(&t->v, 0, h, j)[d] *= 1e37f;
                break;
            default: break;
            }
        }
}

static void extremes(void) {
    static const struct {
        int what;
        int64_t Tq, Tkv, Dk;
        float scale;
    } cases[] = {
        {0, 20, 40, 16, 0}, {1, 20, 40, 16, 0},    {2, 20, 40, 16, 0},   {3, 20, 40, 16, 0},
        {4, 20, 40, 16, 0}, {5, 20, 40, 16, 1e30f}, {5, 20, 40, 16, 1e-30f}, {5, 20, 1, 16, 0},
        {5, 3, 70, 1, 0},   {5, 20, 40, 1024, 0},
    };
    for (int k = 0; k < N(cases); k++) {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = cases[k].Tq, .Tkv = cases[k].Tkv,
                     .Dk = cases[k].Dk, .Dv = 16, .scale = cases[k].scale,
                     .seed = 0xbf166000u + (uint64_t)k};
        extreme e = {cases[k].what};
        sc_tensors f, r;
        th_tensors_make(&f, &c);
        th_tensors_make(&r, &c);
        fill_extreme(&f, &c, &e);
        fill_extreme(&r, &c, &e);
        f.desc.compute = r.desc.compute = SDPA_COMPUTE_BF16;
        const sdpa_status sf = sdpa_forward(&f.desc, &f.q, &f.k, &f.v, &f.o, f.lse);
        const sdpa_status sr = sdpa_reference(&r.desc, &r.q, &r.k, &r.v, &r.o, r.lse);
        double vmax = 0;
        for (int64_t j = 0; j < c.Tkv; j++)
            for (int64_t d = 0; d < c.Dv; d++)
                vmax = fmax(vmax, fabs((double)sc_get(&r.v, 0, 0, j, d)));
        int64_t bad = 0;
        for (int64_t h = 0; h < c.Hq; h++)
            for (int64_t i = 0; i < c.Tq; i++) {
                for (int64_t d = 0; d < c.Dv; d++) {
                    const double o = sc_get(&f.o, 0, h, i, d), w = sc_get(&r.o, 0, h, i, d);
                    if (isnan(w) || isinf(w))
                        bad += !(isnan(w) ? isnan(o) : o == w);
                    else
                        bad += !(fabs(o - w) <= 0x1p-6 * vmax);
                }
                const double lo = f.lse[h * c.Tq + i], lw = r.lse[h * c.Tq + i];
                bad += (isnan(lo) != isnan(lw)) || (isinf(lw) && lo != lw);
            }
        CHECK(sf == SDPA_OK && sr == SDPA_OK && bad == 0,
              "%s extreme %d (Tq=%lld Tkv=%lld Dk=%lld scale=%g): status %d/%d, %lld elements "
              "unlike the reference in the mode", sdpa_isa_name(th_isa), cases[k].what,
              (long long)c.Tq, (long long)c.Tkv, (long long)c.Dk, (double)c.scale, sf, sr,
              (long long)bad);
        sc_tensors_free(&f);
        sc_tensors_free(&r);
    }
}

void suite_bf16(void) {
    const sdpa_isa_info *row = sdpa_isa_lookup(th_isa);
    if (!CHECK(row && (row->computes & (1u << SDPA_COMPUTE_BF16)),
               "%s does not compute bf16", sdpa_isa_name(th_isa)))
        return;
    shapes();
    dtypes();
    features();
    weights();
    roundings_seen();
    hidden_inf();
    extremes();
    extremes_kv_special_bf16();
    /* a compute value no table knows is refused before anything is written */
    sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 4, .Tkv = 4, .Dk = 8, .Dv = 8, .seed = 1};
    sc_tensors t;
    th_tensors_make(&t, &c);
    t.desc.compute = 2;
    const uint32_t before = ((const uint32_t *)t.o.data)[0];
    const sdpa_status st = sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse);
    CHECK(st == SDPA_ERR_BAD_ARGUMENT && ((const uint32_t *)t.o.data)[0] == before,
          "compute = 2: status %d, output %s", st,
          ((const uint32_t *)t.o.data)[0] == before ? "untouched" : "WRITTEN");
    sc_tensors_free(&t);
}
